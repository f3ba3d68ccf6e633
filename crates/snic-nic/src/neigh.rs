//! The NIC's neighbour table: ARP (IPv4) and IPv6 Neighbor Discovery for the NIC's own
//! addresses, sans-IO.
//!
//! API skeleton: the implementation is being written (see the crate's issue).

use core::net::IpAddr;
use core::time::Duration;

use serde::Serialize;
use snic_time::Instant;
use snic_wire::ethernet::EthernetAddress;

/// Settings of a [`Neighbours`] table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighConfig {
    /// Most entries (resolved, pending or failed) the table keeps.
    pub capacity: usize,
    /// Most packets queued per entry while its resolution is pending.
    pub queue_per_entry: usize,
    /// Solicitations sent before a resolution fails (the first one included).
    pub solicit_tries: u32,
    /// Time between solicitations of one pending resolution.
    pub retry_interval: Duration,
    /// How long a resolved entry is used before it is confirmed again.
    pub reachable: Duration,
    /// How long a failed entry refuses packets before a new resolution may start.
    pub failed_hold: Duration,
}

impl Default for NeighConfig {
    fn default() -> Self {
        NeighConfig {
            capacity: 1024,
            queue_per_entry: 64,
            solicit_tries: 3,
            retry_interval: Duration::from_secs(1),
            reachable: Duration::from_secs(30),
            failed_hold: Duration::from_secs(1),
        }
    }
}

/// What [`Neighbours::resolve`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolve {
    /// The next hop is at this MAC: frame the packet and send it now.
    Ready(EthernetAddress),
    /// The packet was copied into the entry's queue; it leaves (framed) through
    /// [`Neighbours::poll_transmit`] once the address is known.
    Queued,
    /// The packet was dropped and counted (queue full, table full, resolution failed).
    Dropped,
}

/// Counters of a [`Neighbours`] table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct NeighCounters {
    /// ARP requests and neighbour solicitations sent (first tries and retries).
    pub solicits_sent: u64,
    /// ARP replies and neighbour advertisements sent (answers for our addresses).
    pub answers_sent: u64,
    /// Frames learned from (replies, advertisements, requests for our addresses).
    pub learned: u64,
    /// Resolutions that ended without an answer.
    pub failed: u64,
    /// Packets queued while a resolution was pending.
    pub queued: u64,
    /// Queued packets sent once their resolution completed.
    pub released: u64,
    /// Packets dropped because their entry's queue was full.
    pub drop_queue_full: u64,
    /// Packets dropped because their resolution failed (queued ones and new ones during the
    /// failed hold).
    pub drop_unresolved: u64,
    /// Packets dropped because the table was full of pending entries.
    pub drop_table_full: u64,
    /// ARP / ND frames ignored: malformed, not for us, or not acceptable (bad hop limit,
    /// checksum, ...).
    pub ignored: u64,
}

/// The neighbour table of a NIC with the MAC `mac` and the IP addresses `ips`.
#[derive(Debug)]
pub struct Neighbours {
    cfg: NeighConfig,
    mac: EthernetAddress,
    ips: Vec<IpAddr>,
    counters: NeighCounters,
}

impl Neighbours {
    /// An empty table.
    pub fn new(cfg: NeighConfig, mac: EthernetAddress, ips: &[IpAddr]) -> Self {
        Neighbours { cfg, mac, ips: ips.to_vec(), counters: NeighCounters::default() }
    }

    /// Find the MAC of the on-link next hop `dst` for `packet` (an IP packet, no L2 header)
    /// that the NIC sends from its address `src`.
    pub fn resolve(&mut self, now: Instant, dst: IpAddr, src: IpAddr, packet: &[u8]) -> Resolve {
        let _ = (now, dst, src, packet, &self.cfg, self.mac, &self.ips);
        Resolve::Dropped
    }

    /// Take one ARP or ND frame (the whole Ethernet frame) the pipeline delivered to the NIC.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        let _ = (now, frame);
        self.counters.ignored += 1;
    }

    /// Write the next frame to send into `buf`; its length, or `None` when nothing is due.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let _ = (now, buf);
        None
    }

    /// When [`Neighbours::handle_timeout`] next has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// Run the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let _ = now;
    }

    /// The counters.
    pub fn counters(&self) -> &NeighCounters {
        &self.counters
    }
}
