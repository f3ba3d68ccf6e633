//! The NIC's own packets, sans-IO: what the device terminates and what it sends by itself.
//!
//! One snic NIC is a pipeline between its wire port and its host port, plus the device's own
//! endpoints beside it (seed 003, RecoNIC Fig. 2: packet classification sends RDMA traffic to
//! the RDMA engine and the rest to the host):
//!
//! ```text
//!   wire ──> parse ─> classify ─> local ─> (user stages: vswitch, l2fwd, ...) ─> host / wire
//!                                   │
//!                                   └─> Nic::deliver ─> Rnic::handle_packet  (RoCEv2 for us)
//!                                                    └─> Neighbours          (ARP / ND for us)
//!   Rnic::poll_transmit ─> Neighbours::resolve ─> Ethernet header ─> wire    (Nic::transmit)
//! ```
//!
//! - [`local::Local`] is the stage that picks the NIC's packets out (egress
//!   [`snic_pipeline::PortId::LOCAL`]); the pipeline hands them over with
//!   [`snic_pipeline::Pipeline::take_local`].
//! - [`Nic::deliver`] gives each of them to the RDMA engine or to the neighbour table.
//! - [`Nic::transmit`] fills a batch for the wire port: first what the neighbour table sends
//!   (answers, solicitations, packets released by a resolution), then the engine's packets,
//!   each framed with the next hop's MAC, or queued while that MAC is being resolved.
//! - [`neigh::Neighbours`] is the neighbour table (ARP, IPv6 ND) with timeouts, retries and
//!   bounded queues.
//!
//! Nothing here reads a clock or does I/O: the driver (`snic_io::nic` on real ports, the
//! testbed on simulated time) passes `now` and owns the ports.

pub mod local;
pub mod neigh;
pub mod offload;

use core::net::IpAddr;

use serde::Serialize;
use snic_pipeline::{Batch, PortId};
use snic_rdma::Rnic;
use snic_rdma::pkt::MAX_PACKET_LEN;
use snic_time::Instant;
use snic_wire::ethernet::{self, EtherType, EthernetAddress};

use crate::local::{Local, LocalKind};
use crate::neigh::{NeighConfig, Neighbours, Resolve};

/// Bytes of the Ethernet header the NIC puts in front of its IP packets.
const ETH_LEN: usize = ethernet::HEADER_LEN;

/// Largest frame the NIC sends by itself: one engine packet and its Ethernet header.
pub const MAX_FRAME: usize = MAX_PACKET_LEN + ETH_LEN;

/// How a NIC is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicConfig {
    /// The NIC's MAC: the source of every frame it sends, and the MAC it answers ARP and ND
    /// with (`snic serve` derives one from the wire interface's by default).
    pub mac: EthernetAddress,
    /// The NIC's RoCE addresses (IPv4 and IPv6; the RDMA engine's GIDs).
    pub ips: Vec<IpAddr>,
    /// The pipeline port of the wire.
    pub wire: PortId,
    /// The neighbour table's settings.
    pub neigh: NeighConfig,
}

/// What the NIC did with its own packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct NicCounters {
    /// RoCEv2 packets handed to the RDMA engine.
    pub roce_rx: u64,
    /// ARP and ND frames handed to the neighbour table.
    pub neigh_rx: u64,
    /// Packets delivered to the device that were neither, or whose IP header lay outside the
    /// frame (cannot happen with the `local` stage; counted, not trusted).
    pub local_unknown: u64,
    /// Engine packets framed for the wire at once (the next hop's MAC was known).
    pub roce_tx: u64,
    /// Engine packets the neighbour table queued while resolving (they leave later, counted
    /// in the table's `released`) or dropped (counted in its `drop_*`).
    pub roce_tx_unresolved: u64,
    /// Frames the neighbour table sent (answers, solicitations, released packets).
    pub neigh_tx: u64,
    /// Engine packets that were not IP (cannot happen; counted, not trusted).
    pub roce_tx_bad: u64,
}

/// The NIC's own packet handling (see the crate doc).
#[derive(Debug)]
pub struct Nic {
    cfg: NicConfig,
    local: Local,
    neigh: Neighbours,
    counters: NicCounters,
}

impl Nic {
    /// A NIC set up as `cfg` says.
    pub fn new(cfg: NicConfig) -> Self {
        let local = Local::new(&cfg.ips).on_port(cfg.wire);
        let neigh = Neighbours::new(cfg.neigh, cfg.mac, &cfg.ips);
        Nic { cfg, local, neigh, counters: NicCounters::default() }
    }

    /// The stage to put right after `classify` in this NIC's pipeline.
    pub fn local_stage(&self) -> Local {
        self.local.clone()
    }

    /// The configuration.
    pub fn config(&self) -> &NicConfig {
        &self.cfg
    }

    /// Take the packets the pipeline delivered to the device (`local`, emptied): RoCEv2 to
    /// the engine, ARP and ND to the neighbour table.
    pub fn deliver(&mut self, now: Instant, local: &mut Batch, rnic: &mut Rnic) {
        for p in local.iter() {
            match self.local.kind(p) {
                Some(LocalKind::Roce { ip }) => match p.data().get(ip..) {
                    Some(packet) => {
                        self.counters.roce_rx += 1;
                        rnic.handle_packet(now, packet);
                    }
                    None => self.counters.local_unknown += 1,
                },
                Some(LocalKind::Neighbour) => {
                    self.counters.neigh_rx += 1;
                    self.neigh.handle_frame(now, p.data());
                }
                None => self.counters.local_unknown += 1,
            }
        }
        local.clear();
    }

    /// Fill `out` (up to its capacity) with frames for the wire port, each with
    /// `meta.egress = wire`: the neighbour table's frames first, then the engine's packets.
    /// Returns how many were added. An engine packet whose next hop is unknown is queued in
    /// the neighbour table (it leaves in a later call) or dropped there, counted.
    pub fn transmit(&mut self, now: Instant, rnic: &mut Rnic, out: &mut Batch) -> usize {
        let start = out.len();
        self.neighbour_frames(now, out);
        self.engine_packets(now, rnic, out);
        // Solicitations the engine's packets just started leave now, not on the next wake-up.
        self.neighbour_frames(now, out);
        out.len() - start
    }

    /// The neighbour table's frames (answers, solicitations, released packets) into `out`.
    fn neighbour_frames(&mut self, now: Instant, out: &mut Batch) {
        while let Some(p) = out.push_slot() {
            p.reserve_frame(MAX_FRAME);
            match self.neigh.poll_transmit(now, p.recv_area()) {
                Some(n) if p.set_len(n).is_ok() => {
                    p.meta.egress = Some(self.cfg.wire);
                    self.counters.neigh_tx += 1;
                }
                _ => {
                    out.pop_slot();
                    break;
                }
            }
        }
    }

    /// The engine's packets into `out`, each framed for its next hop, or handed to the
    /// neighbour table (queued or counted as dropped there) while that is being resolved.
    fn engine_packets(&mut self, now: Instant, rnic: &mut Rnic, out: &mut Batch) {
        while let Some(p) = out.push_slot() {
            p.reserve_frame(MAX_FRAME);
            let area = p.recv_area();
            let Some(n) = rnic.poll_transmit(now, &mut area[ETH_LEN..]) else {
                out.pop_slot();
                break;
            };
            let ip = &area[ETH_LEN..ETH_LEN + n];
            let Some((src, dst, ty)) = ip_ends(ip) else {
                self.counters.roce_tx_bad += 1;
                out.pop_slot();
                continue;
            };
            match self.neigh.resolve(now, dst, src, ip) {
                Resolve::Ready(mac) => {
                    let mut eth = ethernet::Frame::new_unchecked(&mut area[..ETH_LEN]);
                    eth.set_dst_addr(mac);
                    eth.set_src_addr(self.cfg.mac);
                    eth.set_ethertype(ty);
                    // `n + ETH_LEN` fits: the area was reserved for MAX_FRAME.
                    if p.set_len(n + ETH_LEN).is_err() {
                        self.counters.roce_tx_bad += 1;
                        out.pop_slot();
                        continue;
                    }
                    p.meta.egress = Some(self.cfg.wire);
                    self.counters.roce_tx += 1;
                }
                Resolve::Queued | Resolve::Dropped => {
                    self.counters.roce_tx_unresolved += 1;
                    out.pop_slot();
                }
            }
        }
    }

    /// Start resolving the peer `dst` now (a QP was just connected to it), from the NIC's
    /// first address of `dst`'s family: the QP's first packets then find its MAC known.
    /// Returns whether a resolution started.
    pub fn prepare(&mut self, now: Instant, dst: IpAddr) -> bool {
        let Some(src) = self.cfg.ips.iter().copied().find(|ip| ip.is_ipv4() == dst.is_ipv4())
        else {
            return false;
        };
        self.neigh.prepare(now, dst, src)
    }

    /// When [`Nic::handle_timeout`] next has work (the neighbour table's retries and expiries).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.neigh.poll_timeout()
    }

    /// Run the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.neigh.handle_timeout(now);
    }

    /// The NIC's counters.
    pub fn counters(&self) -> &NicCounters {
        &self.counters
    }

    /// The neighbour table.
    pub fn neighbours(&self) -> &Neighbours {
        &self.neigh
    }

    /// The neighbour table, to change (a takeover fills it with what another NIC knew).
    pub fn neighbours_mut(&mut self) -> &mut Neighbours {
        &mut self.neigh
    }
}

/// True for a unicast address: not unspecified, multicast or (IPv4) broadcast. A NIC's RoCE
/// address and a QP's peer must be one (loopback is judged by the caller: a QP over kernel UDP
/// may use it, a NIC's wire may not).
pub fn is_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => !a.is_unspecified() && !a.is_multicast() && !a.is_broadcast(),
        IpAddr::V6(a) => !a.is_unspecified() && !a.is_multicast(),
    }
}

/// Source, destination and EtherType of an IP packet, from its first bytes.
fn ip_ends(ip: &[u8]) -> Option<(IpAddr, IpAddr, EtherType)> {
    match ip.first()? >> 4 {
        4 => {
            let p = snic_wire::ipv4::Packet::new_checked(ip).ok()?;
            Some((p.src_addr().into(), p.dst_addr().into(), EtherType::IPV4))
        }
        6 => {
            let p = snic_wire::ipv6::Packet::new_checked(ip).ok()?;
            Some((p.src_addr().into(), p.dst_addr().into(), EtherType::IPV6))
        }
        _ => None,
    }
}
