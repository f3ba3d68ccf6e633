//! Congestion control: a DCQCN-style reaction point (the sender's rate limiter). The responder
//! (notification point) sends a CNP when it receives a CE-marked packet; on a CNP the sender
//! cuts its rate by `alpha / 2`, and recovers in timed stages (fast recovery toward the target
//! rate, then additive increase). Model: Zhu et al., "Congestion Control for Large-Scale RDMA
//! Deployments" (SIGCOMM 2015).
//!
//! STUB: being written; the API below is the contract.

use core::time::Duration;

use snic_time::Instant;

/// DCQCN parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CcConfig {
    /// React to CNPs at all (when off the QP sends at `line_rate_bps`, unpaced if 0).
    pub enabled: bool,
    /// Starting and highest rate, bits per second; 0 means unpaced until the first CNP, then
    /// paced from `initial_after_cnp_bps`.
    pub line_rate_bps: u64,
    /// Rate to start from when the first CNP arrives on an unpaced QP.
    pub initial_after_cnp_bps: u64,
    /// Lowest rate.
    pub min_rate_bps: u64,
    /// EWMA gain of alpha (DCQCN's g, 1/256 default).
    pub g: f64,
    /// Alpha update / rate increase timer.
    pub timer: Duration,
    /// Additive increase step, bits per second.
    pub rai_bps: u64,
    /// Minimum gap between two CNPs the responder sends for one QP.
    pub cnp_interval: Duration,
}

impl Default for CcConfig {
    fn default() -> Self {
        CcConfig {
            enabled: true,
            line_rate_bps: 0,
            initial_after_cnp_bps: 40_000_000_000,
            min_rate_bps: 10_000_000,
            g: 1.0 / 256.0,
            timer: Duration::from_micros(55),
            rai_bps: 40_000_000,
            cnp_interval: Duration::from_micros(50),
        }
    }
}

/// Rate state of one QP (reaction point).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CcState {
    _todo: (),
}

impl CcState {
    /// Whether a packet of `len` bytes may leave at `now` (pacing).
    pub fn may_send(&self, _now: Instant) -> bool {
        true
    }
    /// Account a packet of `len` bytes sent at `now`.
    pub fn on_send(&mut self, _cfg: &CcConfig, _now: Instant, _len: usize) {}
    /// A CNP arrived.
    pub fn on_cnp(&mut self, _cfg: &CcConfig, _now: Instant) {}
    /// The earliest time the next packet may leave, or a timer (alpha / increase) deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    /// Run timers due at `now`.
    pub fn handle_timeout(&mut self, _cfg: &CcConfig, _now: Instant) {}
    /// Current rate in bits per second (0: unpaced).
    pub fn rate_bps(&self) -> u64 {
        0
    }
}
