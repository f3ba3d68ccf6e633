//! [`Point`]: one measured point of `snic dma sweep`, as the sweep prints it (table or JSON)
//! and the plots draw it.

use serde::Serialize;

/// One measured point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// "h2c" or "c2h".
    pub dir: &'static str,
    /// "on-chip" or "on-board".
    pub mem: &'static str,
    /// "poll" or "interrupt".
    pub completion: &'static str,
    /// Channels running at once.
    pub channels: u8,
    /// Bytes per transfer (per channel).
    pub size: u64,
    /// Transfers per channel.
    pub iters: u64,
    /// Wall time of the measurement.
    pub seconds: f64,
    /// All bytes moved / wall time, in GB/s (bytes per nanosecond).
    pub gbps: f64,
}
