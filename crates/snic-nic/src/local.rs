//! `local`: the stage that picks out the packets the NIC itself terminates.
//!
//! It runs right after `classify` and gives the egress [`PortId::LOCAL`] (the device itself) to:
//! - RoCEv2 packets (`Class::Rdma`, not tunnelled) whose IP destination is one of the NIC's
//!   RoCE addresses: they go to the RDMA engine;
//! - ARP packets whose target protocol address is one of the NIC's IPv4 RoCE addresses
//!   (requests to answer, replies to learn from);
//! - ICMPv6 Neighbor Solicitations whose target is one of the NIC's IPv6 RoCE addresses, and
//!   Neighbor Advertisements sent to one of them (answers to the NIC's solicitations; an
//!   unsolicited advertisement to all nodes goes on to the host).
//!
//! A NIC's stage takes them only from its wire port ([`Local::on_port`]).
//!
//! The pipeline then takes those packets out of the batch (later stages never see them) and
//! counts them in this stage's `local`. Everything else goes on unchanged. The stage reads the
//! parse stage's offsets (`meta.stack`) and bounds-checked bytes only; a packet that was not
//! parsed is left alone.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use snic_pipeline::meta::Class;
use snic_pipeline::stage::{Stage, StageCtx};
use snic_pipeline::trace::TraceWhat;
use snic_pipeline::{Batch, PacketBuf, PortId};
use snic_time::Instant;
use snic_wire::stack::Layer;
use snic_wire::{arp, icmpv6, ipv6};

/// What a local packet is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalKind {
    /// A RoCEv2 packet for the RDMA engine; its IP header starts at `ip`.
    Roce {
        /// Offset of the IP header in the frame.
        ip: usize,
    },
    /// An ARP packet or an ND message for the neighbour table.
    Neighbour,
}

/// The `local` stage.
#[derive(Debug, Clone)]
pub struct Local {
    v4: Vec<Ipv4Addr>,
    v6: Vec<Ipv6Addr>,
    /// Only packets that arrived on this port are the NIC's (its wire); `None`: any port.
    port: Option<PortId>,
}

impl Local {
    /// A stage terminating the packets for `addrs` (the NIC's RoCE addresses).
    pub fn new(addrs: &[IpAddr]) -> Self {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for a in addrs {
            match a {
                IpAddr::V4(a) => v4.push(*a),
                IpAddr::V6(a) => v6.push(*a),
            }
        }
        Local { v4, v6, port: None }
    }

    /// Take only packets that arrived on `port` (the NIC's wire port). The host netdev's own
    /// ARP or RoCE for a NIC address then goes on through the pipeline like its other traffic,
    /// instead of being answered on the wire, where the host would never see the answer.
    pub fn on_port(mut self, port: PortId) -> Self {
        self.port = Some(port);
        self
    }

    fn is_ours(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => self.v4.contains(&a),
            IpAddr::V6(a) => self.v6.contains(&a),
        }
    }

    /// What `pkt` is to the NIC, or `None` when it is not the NIC's.
    pub fn kind(&self, pkt: &PacketBuf) -> Option<LocalKind> {
        if self.port.is_some_and(|p| p != pkt.meta.ingress) {
            return None;
        }
        let stack = &pkt.meta.stack;
        if stack.tunnel.is_some() {
            return None;
        }
        let (layer, l3) = stack.outer.l3?;
        let l3 = usize::from(l3);
        let d = pkt.data();
        if pkt.meta.class == Class::Rdma {
            let roce = pkt.roce()?;
            return self.is_ours(roce.ip_dst).then_some(LocalKind::Roce { ip: l3 });
        }
        match layer {
            Layer::Arp => {
                let a = arp::Packet::new_checked(d.get(l3..)?).ok()?;
                self.v4.contains(&a.target_protocol_addr()).then_some(LocalKind::Neighbour)
            }
            Layer::Ipv6 if !self.v6.is_empty() => {
                let (Layer::Icmpv6, l4) = stack.outer.l4? else { return None };
                let msg = d.get(usize::from(l4)..)?;
                let ip = ipv6::Packet::new_checked(d.get(l3..)?).ok()?;
                let ours = match *msg.first()? {
                    // A solicitation asks about its target: ours, or not for us.
                    icmpv6::NEIGHBOR_SOLICIT => {
                        // The target address follows type, code, checksum and 4 flag bytes.
                        let target: [u8; 16] = msg.get(8..24)?.try_into().ok()?;
                        self.v6.contains(&Ipv6Addr::from(target))
                    }
                    // An advertisement answering the NIC's solicitation is sent to the NIC's
                    // address (its target is the peer's).
                    icmpv6::NEIGHBOR_ADVERT => self.v6.contains(&ip.dst_addr()),
                    _ => false,
                };
                ours.then_some(LocalKind::Neighbour)
            }
            _ => None,
        }
    }
}

impl Stage for Local {
    fn name(&self) -> &str {
        "local"
    }

    fn process(&mut self, _now: Instant, batch: &mut Batch, ctx: &mut StageCtx<'_>) {
        for p in batch.iter_mut() {
            if let Some(kind) = self.kind(p) {
                p.meta.egress = Some(PortId::LOCAL);
                ctx.trace(p, || TraceWhat::Forwarded {
                    port: PortId::LOCAL,
                    how: match kind {
                        LocalKind::Roce { .. } => "local: rdma engine",
                        LocalKind::Neighbour => "local: neighbour table",
                    },
                });
            }
        }
    }

    fn delivers_local(&self) -> bool {
        true
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::neigh::{NeighConfig, Neighbours, Resolve};
    use snic_rdma::testing::ip;
    use snic_wire::ethernet::EthernetAddress;

    const MAC: [EthernetAddress; 2] =
        [EthernetAddress([2, 0, 0, 0, 0, 1]), EthernetAddress([2, 0, 0, 0, 0, 2])];

    /// What the `local` stage of a NIC with address `ours` makes of `frame`.
    fn kind(ours: IpAddr, frame: &[u8]) -> Option<LocalKind> {
        let mut b = Batch::new(1);
        let p = b.push_frame(frame).unwrap();
        p.meta.stack = snic_wire::stack::parse(frame);
        Local::new(&[ours]).kind(p)
    }

    fn next_frame(n: &mut Neighbours) -> Vec<u8> {
        let mut buf = [0u8; 256];
        let len = n.poll_transmit(Instant::ZERO, &mut buf).expect("a frame to send");
        buf[..len].to_vec()
    }

    /// NIC A resolves NIC B, then probes it: each solicitation is B's, each answer is A's, and
    /// neither is the other NIC's. (The stage once took an advertisement by its target, the
    /// advertiser's own address, so a NIC never saw the answers to its IPv6 solicitations.)
    #[test]
    fn solicitations_go_to_the_target_answers_to_the_solicitor() {
        for v6 in [false, true] {
            let (a_ip, b_ip) = (ip(v6, 1), ip(v6, 2));
            let cfg = NeighConfig { reachable: core::time::Duration::ZERO, ..Default::default() };
            let mut a = Neighbours::new(cfg, MAC[0], &[a_ip]);
            let mut b = Neighbours::new(cfg, MAC[1], &[b_ip]);
            let t = Instant::ZERO;
            assert_eq!(a.resolve(t, b_ip, a_ip, &[0x45; 40]), Resolve::Queued);
            // A multicast (or broadcast) solicitation, then its answer; then (the entry is
            // stale at once) a unicast probe and its answer.
            for round in ["resolution", "probe"] {
                let ask = next_frame(&mut a);
                assert_eq!(kind(b_ip, &ask), Some(LocalKind::Neighbour), "{round} v6 {v6}");
                assert_eq!(kind(a_ip, &ask), None, "{round} v6 {v6}");
                b.handle_frame(t, &ask);
                let answer = next_frame(&mut b);
                assert_eq!(kind(a_ip, &answer), Some(LocalKind::Neighbour), "{round} v6 {v6}");
                assert_eq!(kind(b_ip, &answer), None, "{round} v6 {v6}");
                a.handle_frame(t, &answer);
                if round == "resolution" {
                    next_frame(&mut a); // the queued packet, released
                    assert_eq!(a.resolve(t, b_ip, a_ip, &[0x45; 40]), Resolve::Ready(MAC[1]));
                }
            }
            assert_eq!(a.counters().failed, 0);
            assert_eq!(a.counters().learned, 2, "v6 {v6}: {:?}", a.counters());
        }
    }
}
