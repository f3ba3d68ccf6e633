//! The port abstraction.

use snic_pipeline::Batch;
use snic_time::Instant;
use std::io;
use std::os::fd::RawFd;

/// What a port can take on transmit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortCaps {
    /// The port accepts super-packets (GSO) and a partial checksum, and passes them on as such
    /// (AF_PACKET or TAP with a virtio-net header). Ports without it get segmented, fully
    /// checksummed frames.
    pub gso: bool,
    /// Largest frame the port sends without segmentation (its MTU plus L2 header).
    pub max_frame: usize,
}

/// A source and sink of frames.
///
/// `recv` appends received packets to `batch` (until it is full) and returns how many it added;
/// `Ok(0)` means nothing is ready now (ports never block in `recv`). `send` transmits the live
/// packets of `batch` in order and returns how many left; the caller counts the rest as drops.
pub trait Port: Send {
    /// Name for counters and logs (`"afpacket:veth0"`, `"pcap:in.pcap"`).
    fn name(&self) -> &str;
    /// Receive into the free slots of `batch`.
    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize>;
    /// Send the live packets of `batch`.
    fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize>;
    /// A file descriptor that becomes readable when `recv` may return packets, for `poll(2)`.
    fn poll_fd(&self) -> Option<RawFd> {
        None
    }
    /// True when the port will never produce another packet (a pcap file read to its end).
    fn is_exhausted(&self) -> bool {
        false
    }
    /// What the port can take on transmit.
    fn caps(&self) -> PortCaps;
    /// Flush anything buffered (pcap writers).
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
