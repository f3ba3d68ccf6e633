//! The generator port: a deterministic, seeded mix of traffic for `snic run` without arguments,
//! the testbed and tests.
//!
//! The mix covers what the pipeline must handle: IPv4/IPv6 UDP and TCP, 802.1Q and QinQ, VXLAN
//! carrying TCP, Geneve, NVGRE, ARP, ICMP and ICMPv6, RoCEv2 RC over IPv4 (SEND, WRITE, READ
//! request and response, ACK, atomics, atomic ACK) and over IPv6 (SEND, WRITE) with a correct
//! ICRC (and, over IPv6, a correct UDP checksum), and a small share of malformed
//! frames (truncated mid-header, RoCEv2 with a bad ICRC). Frames are assembled in place in the
//! packet buffer's receive area with `snic-wire`'s `Repr::emit` APIs (Ethernet, IPv4, IPv6, UDP,
//! TCP, VXLAN, Geneve, NVGRE, ARP, BTH and its extension headers, the ICRC); VLAN tags and the
//! ICMP echo bodies are written directly. Producing a frame allocates nothing.
//!
//! Flows repeat (a few flows per kind) so that flow tables and RSS see realistic locality.

use crate::port::{Port, PortCaps, PortCounters};
use core::time::Duration;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use snic_pipeline::Batch;
use snic_time::Instant;
use snic_wire::ethernet::EtherType;
use snic_wire::ipv4::IpProtocol;
use snic_wire::roce::{self, bth, ext, icrc};
use snic_wire::{arp, checksum, ethernet, geneve, gre, ipv4, ipv6, tcp, udp, vxlan};
use std::io;
use std::net::IpAddr;

/// The kinds of frame the generator produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// Ethernet / IPv4 / UDP.
    Ipv4Udp,
    /// Ethernet / IPv4 / TCP.
    Ipv4Tcp,
    /// Ethernet / IPv6 / UDP.
    Ipv6Udp,
    /// Ethernet / IPv6 / TCP.
    Ipv6Tcp,
    /// Ethernet / 802.1Q / IPv4 / UDP.
    VlanUdp,
    /// Ethernet / 802.1ad / 802.1Q / IPv4 / TCP.
    QinQTcp,
    /// IPv4 / UDP 4789 / VXLAN / Ethernet / IPv4 / TCP.
    VxlanTcp,
    /// IPv4 / UDP 6081 / Geneve / Ethernet / IPv4 / UDP.
    GeneveUdp,
    /// IPv4 / GRE (NVGRE) / Ethernet / IPv4 / TCP.
    NvgreTcp,
    /// ARP request.
    Arp,
    /// ICMP echo request.
    Icmpv4,
    /// ICMPv6 echo request.
    Icmpv6,
    /// RoCEv2 RC SEND Only.
    RoceSend,
    /// RoCEv2 RC RDMA WRITE Only (RETH).
    RoceWrite,
    /// RoCEv2 RC RDMA READ Request (RETH).
    RoceReadReq,
    /// RoCEv2 RC RDMA READ Response Only (AETH).
    RoceReadResp,
    /// RoCEv2 RC Acknowledge (AETH).
    RoceAck,
    /// RoCEv2 RC Compare-and-Swap or Fetch-and-Add (AtomicETH).
    RoceAtomic,
    /// RoCEv2 RC Atomic Acknowledge (AETH + AtomicAckETH).
    RoceAtomicAck,
    /// RoCEv2 RC SEND Only over IPv6.
    RoceV6Send,
    /// RoCEv2 RC RDMA WRITE Only (RETH) over IPv6.
    RoceV6Write,
    /// A valid frame cut short inside its headers.
    Truncated,
    /// A RoCEv2 frame whose ICRC does not verify.
    BadIcrc,
}

impl FrameKind {
    /// Every kind, in the order of [`FrameKind::index`].
    pub const ALL: [FrameKind; 23] = [
        FrameKind::Ipv4Udp,
        FrameKind::Ipv4Tcp,
        FrameKind::Ipv6Udp,
        FrameKind::Ipv6Tcp,
        FrameKind::VlanUdp,
        FrameKind::QinQTcp,
        FrameKind::VxlanTcp,
        FrameKind::GeneveUdp,
        FrameKind::NvgreTcp,
        FrameKind::Arp,
        FrameKind::Icmpv4,
        FrameKind::Icmpv6,
        FrameKind::RoceSend,
        FrameKind::RoceWrite,
        FrameKind::RoceReadReq,
        FrameKind::RoceReadResp,
        FrameKind::RoceAck,
        FrameKind::RoceAtomic,
        FrameKind::RoceAtomicAck,
        FrameKind::RoceV6Send,
        FrameKind::RoceV6Write,
        FrameKind::Truncated,
        FrameKind::BadIcrc,
    ];

    /// Relative weight in the mix (sums to 100 over [`FrameKind::ALL`]).
    const fn weight(self) -> u32 {
        match self {
            FrameKind::Ipv4Udp => 12,
            FrameKind::Ipv4Tcp => 14,
            FrameKind::Ipv6Udp => 6,
            FrameKind::Ipv6Tcp => 6,
            FrameKind::VlanUdp => 5,
            FrameKind::QinQTcp => 4,
            FrameKind::VxlanTcp => 8,
            FrameKind::GeneveUdp => 4,
            FrameKind::NvgreTcp => 4,
            FrameKind::Arp => 3,
            FrameKind::Icmpv4 => 3,
            FrameKind::Icmpv6 => 2,
            FrameKind::RoceSend => 3,
            FrameKind::RoceWrite => 3,
            FrameKind::RoceReadReq => 3,
            FrameKind::RoceReadResp => 3,
            FrameKind::RoceAck => 4,
            FrameKind::RoceAtomic => 2,
            FrameKind::RoceAtomicAck => 2,
            FrameKind::RoceV6Send => 2,
            FrameKind::RoceV6Write => 2,
            FrameKind::Truncated => 2,
            FrameKind::BadIcrc => 2,
        }
    }

    /// Position in [`FrameKind::ALL`].
    pub fn index(self) -> usize {
        FrameKind::ALL.iter().position(|k| *k == self).unwrap_or(0)
    }

    /// True for the kinds that are malformed on purpose.
    pub const fn is_malformed(self) -> bool {
        matches!(self, FrameKind::Truncated | FrameKind::BadIcrc)
    }
}

const MIN_FRAME: usize = 60;
/// Destination ports of generated UDP and TCP flows: unassigned, so that capture tools do not
/// try to decode the patterned payloads as some application protocol.
const UDP_DPORT: u16 = 40_000;
const TCP_DPORT: u16 = 41_000;
/// Smallest RoCEv2 SEND/WRITE payload (tools try to decode tiny SEND payloads as RPC-over-RDMA).
const MIN_ROCE_PAYLOAD: usize = 32;
/// Flows per kind: frames of one kind cycle through this many 5-tuples.
const FLOWS: u32 = 8;

/// A bounded writer over a frame buffer. Writes past the end set `overflow` instead of
/// panicking; a frame that overflowed is discarded.
struct W<'a> {
    buf: &'a mut [u8],
    pos: usize,
    overflow: bool,
}

impl<'a> W<'a> {
    fn new(buf: &'a mut [u8]) -> Self {
        W { buf, pos: 0, overflow: false }
    }

    fn put(&mut self, bytes: &[u8]) -> usize {
        let at = self.pos;
        match self.buf.get_mut(at..at + bytes.len()) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                self.pos += bytes.len();
            }
            None => self.overflow = true,
        }
        at
    }

    fn u8(&mut self, v: u8) {
        self.put(&[v]);
    }
    fn u16(&mut self, v: u16) {
        self.put(&v.to_be_bytes());
    }
    fn zeros(&mut self, n: usize) {
        for _ in 0..n {
            self.u8(0);
        }
    }
    fn pattern(&mut self, n: usize, seed: u8) {
        for i in 0..n {
            self.u8(seed.wrapping_add(i as u8));
        }
    }

    fn set_u16(&mut self, at: usize, v: u16) {
        match self.buf.get_mut(at..at + 2) {
            Some(dst) => dst.copy_from_slice(&v.to_be_bytes()),
            None => self.overflow = true,
        }
    }

    fn slice(&self, r: core::ops::Range<usize>) -> &[u8] {
        self.buf.get(r).unwrap_or(&[])
    }

    /// The bytes `at..at + len`, or `None` (and `overflow` set) past the end.
    fn region(&mut self, at: usize, len: usize) -> Option<&mut [u8]> {
        let r = self.buf.get_mut(at..at + len);
        if r.is_none() {
            self.overflow = true;
        }
        r
    }

    /// Append `len` zero bytes and let `emit` write a header into them; an emit error marks
    /// the frame bad (it is discarded and counted, never sent half-written).
    fn header(&mut self, len: usize, emit: impl FnOnce(&mut [u8]) -> snic_wire::Result<()>) {
        let at = self.pos;
        self.zeros(len);
        if let Some(b) = self.region(at, len)
            && emit(b).is_err()
        {
            self.overflow = true;
        }
    }

    /// Ethernet header (`snic_wire::ethernet::Repr`) with `tags` VLAN tags (TPID, VID; outer
    /// first); the last EtherType is `ethertype`.
    fn eth(&mut self, dst: [u8; 6], src: [u8; 6], tags: &[(u16, u16)], ethertype: u16) {
        let first = tags.first().map_or(ethertype, |t| t.0);
        let at = self.pos;
        self.zeros(ethernet::HEADER_LEN);
        if let Some(b) = self.region(at, ethernet::HEADER_LEN) {
            let repr = ethernet::Repr {
                src_addr: ethernet::EthernetAddress(src),
                dst_addr: ethernet::EthernetAddress(dst),
                ethertype: ethernet::EtherType(first),
            };
            repr.emit(&mut ethernet::Frame::new_unchecked(b));
        }
        for (i, (_, vid)) in tags.iter().enumerate() {
            // Tag: TCI, then the next tag's TPID or the final EtherType.
            self.u16(*vid & 0x0fff);
            self.u16(tags.get(i + 1).map_or(ethertype, |t| t.0));
        }
    }

    /// IPv4 header (`snic_wire::ipv4::Repr`), total length and checksum set by
    /// [`W::ipv4_finish`].
    fn ipv4(&mut self, src: [u8; 4], dst: [u8; 4], proto: u8, tos: u8, id: u16) -> Ip {
        let at = self.pos;
        self.zeros(ipv4::HEADER_LEN);
        let mut repr = ipv4::Repr::new(src.into(), dst.into(), ipv4::IpProtocol(proto), 0);
        repr.dscp = tos >> 2;
        repr.ecn = tos & 0x03;
        repr.ident = id;
        if let Some(b) = self.region(at, ipv4::HEADER_LEN) {
            repr.emit(&mut ipv4::Packet::new_unchecked(b));
        }
        Ip { at, src: IpAddr::V4(src.into()), dst: IpAddr::V4(dst.into()) }
    }

    fn ipv4_finish(&mut self, ip: Ip) {
        let total = u16::try_from(self.pos.saturating_sub(ip.at)).unwrap_or(u16::MAX);
        let len = self.pos.saturating_sub(ip.at);
        if let Some(b) = self.region(ip.at, len) {
            let mut p = ipv4::Packet::new_unchecked(b);
            p.set_total_len(total);
            p.fill_checksum();
        }
    }

    /// IPv6 header (`snic_wire::ipv6::Repr`), payload length set by [`W::ipv6_finish`].
    fn ipv6(&mut self, src: [u8; 16], dst: [u8; 16], next: u8, tclass: u8, flow: u32) -> Ip {
        let at = self.pos;
        self.zeros(ipv6::HEADER_LEN);
        let repr = ipv6::Repr {
            src_addr: src.into(),
            dst_addr: dst.into(),
            next_header: ipv4::IpProtocol(next),
            payload_len: 0,
            hop_limit: 64,
            traffic_class: tclass,
            flow_label: flow & 0x000f_ffff,
        };
        if let Some(b) = self.region(at, ipv6::HEADER_LEN) {
            repr.emit(&mut ipv6::Packet::new_unchecked(b));
        }
        Ip { at, src: IpAddr::V6(src.into()), dst: IpAddr::V6(dst.into()) }
    }

    fn ipv6_finish(&mut self, ip: Ip) {
        let plen = self.pos.saturating_sub(ip.at + ipv6::HEADER_LEN);
        if let Some(b) = self.region(ip.at, ipv6::HEADER_LEN) {
            ipv6::Packet::new_unchecked(b).set_payload_len(u16::try_from(plen).unwrap_or(u16::MAX));
        }
    }

    /// UDP header (`snic_wire::udp::Repr`), length and checksum set by [`W::udp_finish`].
    fn udp(&mut self, sport: u16, dport: u16) -> usize {
        let at = self.pos;
        self.zeros(udp::HEADER_LEN);
        let repr = udp::Repr { src_port: sport, dst_port: dport, payload_len: 0 };
        if let Some(b) = self.region(at, udp::HEADER_LEN) {
            repr.emit(&mut udp::Packet::new_unchecked(b));
        }
        at
    }

    /// Set the UDP length; compute the checksum unless `zero_csum` (allowed over IPv4 only).
    fn udp_finish(&mut self, ip: Ip, at: usize, zero_csum: bool) {
        let len = self.pos.saturating_sub(at);
        if let Some(b) = self.region(at, len) {
            let mut p = udp::Packet::new_unchecked(b);
            p.set_len(u16::try_from(len).unwrap_or(u16::MAX));
            if !zero_csum || ip.src.is_ipv6() {
                p.fill_checksum(&ip.src, &ip.dst);
            }
        }
    }

    /// TCP header without options (`snic_wire::tcp::Repr`), checksum set by
    /// [`W::tcp_finish`].
    fn tcp(&mut self, sport: u16, dport: u16, seq: u32, ack: u32, flags: u16) -> usize {
        let at = self.pos;
        self.zeros(tcp::HEADER_LEN);
        let repr = tcp::Repr {
            src_port: sport,
            dst_port: dport,
            seq_number: seq,
            ack_number: ack,
            flags: tcp::Flags(flags),
            window_len: 65_535,
            urgent_at: 0,
            max_seg_size: None,
            window_scale: None,
            sack_permitted: false,
            timestamps: None,
            sack_ranges: tcp::SackBlocks::EMPTY,
            payload_len: 0,
        };
        if let Some(b) = self.region(at, tcp::HEADER_LEN) {
            repr.emit(&mut tcp::Packet::new_unchecked(b));
        }
        at
    }

    fn tcp_finish(&mut self, ip: Ip, at: usize) {
        let len = self.pos.saturating_sub(at);
        if let Some(b) = self.region(at, len) {
            tcp::Packet::new_unchecked(b).fill_checksum(&ip.src, &ip.dst);
        }
    }

    /// Internet checksum of an L4 message `at..pos` with the pseudo-header of `ip` (ICMPv6).
    fn l4_checksum(&self, ip: Ip, proto: u8, at: usize) -> u16 {
        checksum::upper_layer(&ip.src, &ip.dst, proto, self.slice(at..self.pos))
    }

    /// Pad to the Ethernet minimum.
    fn pad_min(&mut self) {
        if self.pos < MIN_FRAME {
            self.zeros(MIN_FRAME - self.pos);
        }
    }
}

/// Where an IP header sits and its addresses, for pseudo-header checksums.
#[derive(Clone, Copy)]
struct Ip {
    at: usize,
    src: IpAddr,
    dst: IpAddr,
}

/// The traffic generator core: frame `i` of a seeded stream, written into a buffer.
#[derive(Debug, Clone)]
pub struct Generator {
    rng: ChaCha8Rng,
    total_weight: u32,
    seq: u64,
}

impl Generator {
    /// A generator for `seed`. The same seed always yields the same frames.
    pub fn new(seed: u64) -> Self {
        Generator {
            rng: ChaCha8Rng::seed_from_u64(seed),
            total_weight: FrameKind::ALL.iter().map(|k| k.weight()).sum(),
            seq: 0,
        }
    }

    fn pick_kind(&mut self) -> FrameKind {
        let mut x = self.rng.gen_range(0..self.total_weight);
        for k in FrameKind::ALL {
            if x < k.weight() {
                return k;
            }
            x -= k.weight();
        }
        FrameKind::Ipv4Udp
    }

    /// Write the next frame into `out`; returns its kind and length, or `None` if `out` is too
    /// small (at least 1600 bytes always suffices).
    pub fn next_frame(&mut self, out: &mut [u8]) -> Option<(FrameKind, usize)> {
        let kind = self.pick_kind();
        self.seq += 1;
        let len = self.build(kind, out)?;
        Some((kind, len))
    }

    fn build(&mut self, kind: FrameKind, out: &mut [u8]) -> Option<usize> {
        let flow = self.rng.gen_range(0..FLOWS);
        let f = flow as u8;
        let k = kind.index() as u8;
        let seq = self.seq as u32;
        let payload = self.rng.gen_range(0..=256usize);
        let mac_a = [0x02, 0, 0, 0, k, f];
        let mac_b = [0x02, 0, 0, 1, k, f];
        let ip_a = [10, k, 0, f + 1];
        let ip_b = [10, k, 1, f + 1];
        let ip6_a = v6(k, 0, f);
        let ip6_b = v6(k, 1, f);
        let sport = 10_000 + u16::from(k) * 64 + u16::from(f);
        let mut w = W::new(out);
        match kind {
            FrameKind::Ipv4Udp | FrameKind::VlanUdp => {
                let tags: &[(u16, u16)] = if kind == FrameKind::VlanUdp {
                    &[(EtherType::VLAN.0, 100 + flow as u16)]
                } else {
                    &[]
                };
                w.eth(mac_b, mac_a, tags, EtherType::IPV4.0);
                let ip = w.ipv4(ip_a, ip_b, IpProtocol::UDP.0, 0, seq as u16);
                let u = w.udp(sport, UDP_DPORT);
                w.pattern(payload, f);
                w.udp_finish(ip, u, false);
                w.ipv4_finish(ip);
            }
            FrameKind::Ipv4Tcp | FrameKind::QinQTcp => {
                let tags: &[(u16, u16)] = if kind == FrameKind::QinQTcp {
                    &[(EtherType::QINQ.0, 200), (EtherType::VLAN.0, 300 + flow as u16)]
                } else {
                    &[]
                };
                w.eth(mac_b, mac_a, tags, EtherType::IPV4.0);
                tcp4(&mut w, ip_a, ip_b, sport, TCP_DPORT, seq, payload, f);
            }
            FrameKind::Ipv6Udp => {
                w.eth(mac_b, mac_a, &[], EtherType::IPV6.0);
                let ip = w.ipv6(ip6_a, ip6_b, IpProtocol::UDP.0, 0, flow);
                let u = w.udp(sport, UDP_DPORT);
                w.pattern(payload, f);
                w.udp_finish(ip, u, false);
                w.ipv6_finish(ip);
            }
            FrameKind::Ipv6Tcp => {
                w.eth(mac_b, mac_a, &[], EtherType::IPV6.0);
                let ip = w.ipv6(ip6_a, ip6_b, IpProtocol::TCP.0, 0, flow);
                let t = w.tcp(sport, TCP_DPORT + 1, seq.wrapping_mul(1000), 1, 0x18);
                w.pattern(payload, f);
                w.tcp_finish(ip, t);
                w.ipv6_finish(ip);
            }
            FrameKind::VxlanTcp | FrameKind::GeneveUdp => {
                let vni = 1000 + flow;
                w.eth([0x02, 0, 0, 0xfe, 0, 1], [0x02, 0, 0, 0xfe, 0, 2], &[], EtherType::IPV4.0);
                let oip =
                    w.ipv4([192, 168, 0, 1], [192, 168, 0, 2], IpProtocol::UDP.0, 0, seq as u16);
                let dport =
                    if kind == FrameKind::VxlanTcp { vxlan::UDP_PORT } else { geneve::UDP_PORT };
                let ou = w.udp(49_152 + u16::from(f) * 7, dport);
                if kind == FrameKind::VxlanTcp {
                    w.header(vxlan::HEADER_LEN, |b| {
                        vxlan::Repr { vni }.emit(&mut vxlan::Packet::new_unchecked(b))
                    });
                    w.eth(mac_b, mac_a, &[], EtherType::IPV4.0);
                    tcp4(&mut w, ip_a, ip_b, sport, TCP_DPORT + 2, seq, payload, f);
                } else {
                    let repr = geneve::Repr {
                        oam: false,
                        critical: false,
                        protocol: EtherType::TEB.0,
                        vni,
                        options: &[],
                    };
                    w.header(repr.buffer_len(), |b| {
                        repr.emit(&mut geneve::Packet::new_unchecked(b))
                    });
                    w.eth(mac_b, mac_a, &[], EtherType::IPV4.0);
                    let ip = w.ipv4(ip_a, ip_b, IpProtocol::UDP.0, 0, seq as u16);
                    let u = w.udp(sport, UDP_DPORT + 1);
                    w.pattern(payload, f);
                    w.udp_finish(ip, u, false);
                    w.ipv4_finish(ip);
                }
                w.udp_finish(oip, ou, true);
                w.ipv4_finish(oip);
            }
            FrameKind::NvgreTcp => {
                w.eth([0x02, 0, 0, 0xfe, 0, 1], [0x02, 0, 0, 0xfe, 0, 2], &[], EtherType::IPV4.0);
                let oip =
                    w.ipv4([192, 168, 0, 1], [192, 168, 0, 2], IpProtocol::GRE.0, 0, seq as u16);
                let repr = gre::NvgreRepr { vsid: 5000 + flow, flow_id: f };
                w.header(gre::NVGRE_HEADER_LEN, |b| repr.emit(&mut gre::Packet::new_unchecked(b)));
                w.eth(mac_b, mac_a, &[], EtherType::IPV4.0);
                tcp4(&mut w, ip_a, ip_b, sport, TCP_DPORT + 3, seq, payload, f);
                w.ipv4_finish(oip);
            }
            FrameKind::Arp => {
                w.eth([0xff; 6], mac_a, &[], EtherType::ARP.0);
                let repr = arp::Repr {
                    operation: arp::Operation::Request,
                    source_hardware_addr: ethernet::EthernetAddress(mac_a),
                    source_protocol_addr: ip_a.into(),
                    target_hardware_addr: ethernet::EthernetAddress([0; 6]),
                    target_protocol_addr: ip_b.into(),
                };
                w.header(arp::HEADER_LEN, |b| {
                    repr.emit(&mut arp::Packet::new_unchecked(b));
                    Ok(())
                });
            }
            FrameKind::Icmpv4 => {
                w.eth(mac_b, mac_a, &[], EtherType::IPV4.0);
                let ip = w.ipv4(ip_a, ip_b, IpProtocol::ICMP.0, 0, seq as u16);
                let at = w.pos;
                w.u8(8);
                w.u8(0);
                w.u16(0);
                w.u16(flow as u16);
                w.u16(seq as u16);
                w.pattern(payload.min(56), f);
                let c = !checksum::data(w.slice(at..w.pos));
                w.set_u16(at + 2, c);
                w.ipv4_finish(ip);
            }
            FrameKind::Icmpv6 => {
                w.eth(mac_b, mac_a, &[], EtherType::IPV6.0);
                let ip = w.ipv6(ip6_a, ip6_b, IpProtocol::ICMPV6.0, 0, 0);
                let at = w.pos;
                w.u8(128);
                w.u8(0);
                w.u16(0);
                w.u16(flow as u16);
                w.u16(seq as u16);
                w.pattern(payload.min(56), f);
                let c = w.l4_checksum(ip, IpProtocol::ICMPV6.0, at);
                w.set_u16(at + 2, c);
                w.ipv6_finish(ip);
            }
            FrameKind::RoceSend
            | FrameKind::RoceWrite
            | FrameKind::RoceReadReq
            | FrameKind::RoceReadResp
            | FrameKind::RoceAck
            | FrameKind::RoceAtomic
            | FrameKind::RoceAtomicAck
            | FrameKind::BadIcrc => {
                let atomic_op = if self.rng.gen_bool(0.5) { 0x13 } else { 0x14 };
                let sub = if kind == FrameKind::BadIcrc { FrameKind::RoceSend } else { kind };
                let ips = RoceIps::V4([ip_a, ip_b]);
                roce(&mut w, sub, ips, [mac_a, mac_b], flow, seq, payload, atomic_op);
                if kind == FrameKind::BadIcrc {
                    // Flip one bit of the ICRC (over IPv4: no UDP checksum to break with it).
                    let last = w.pos.checked_sub(1)?;
                    if let Some(b) = w.buf.get_mut(last) {
                        *b ^= 0x01;
                    }
                }
            }
            FrameKind::RoceV6Send | FrameKind::RoceV6Write => {
                let sub = if kind == FrameKind::RoceV6Send {
                    FrameKind::RoceSend
                } else {
                    FrameKind::RoceWrite
                };
                let ips = RoceIps::V6([ip6_a, ip6_b]);
                roce(&mut w, sub, ips, [mac_a, mac_b], flow, seq, payload, 0);
            }
            FrameKind::Truncated => {
                // A VXLAN frame or a TCP frame, cut inside its headers.
                let inner = self.rng.gen_bool(0.5);
                let mut full = if inner {
                    self.build(FrameKind::VxlanTcp, w.buf)?
                } else {
                    self.build(FrameKind::Ipv4Tcp, w.buf)?
                };
                // Cut between the Ethernet header and the end of the (inner) TCP header.
                let hdrs = if inner { 14 + 20 + 8 + 8 + 14 + 20 + 20 } else { 14 + 20 + 20 };
                full = full.min(hdrs);
                return Some(self.rng.gen_range(15..full));
            }
        }
        if kind != FrameKind::BadIcrc && !matches!(kind, FrameKind::Truncated) {
            w.pad_min();
        }
        if w.overflow { None } else { Some(w.pos) }
    }
}

fn v6(k: u8, side: u8, f: u8) -> [u8; 16] {
    [0xfd, 0, 0, 0, 0, 0, 0, k, 0, 0, 0, 0, 0, 0, side, f + 1]
}

#[allow(clippy::too_many_arguments, reason = "a frame template takes every field it varies")]
fn tcp4(
    w: &mut W<'_>,
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    seq: u32,
    payload: usize,
    f: u8,
) {
    let ip = w.ipv4(src, dst, IpProtocol::TCP.0, 0, seq as u16);
    let t = w.tcp(sport, dport, seq.wrapping_mul(1000), 1, 0x18);
    w.pattern(payload, f);
    w.tcp_finish(ip, t);
    w.ipv4_finish(ip);
}

/// The source and destination addresses of a RoCEv2 packet.
#[derive(Clone, Copy)]
enum RoceIps {
    V4([[u8; 4]; 2]),
    V6([[u8; 16]; 2]),
}

/// A RoCEv2 RC packet over IPv4 or IPv6 with the extension headers of its opcode (`kind` is
/// one of the IPv4 RoCE kinds, which names the opcode) and a valid ICRC. Over IPv4 the UDP
/// checksum is zero; over IPv6 it is computed (after the ICRC, which it covers).
#[allow(clippy::too_many_arguments, reason = "a frame template takes every field it varies")]
fn roce(
    w: &mut W<'_>,
    kind: FrameKind,
    ips: RoceIps,
    macs: [[u8; 6]; 2],
    flow: u32,
    seq: u32,
    payload: usize,
    atomic_op: u8,
) {
    let (opcode, data) = match kind {
        FrameKind::RoceSend => (0x04u8, payload.max(MIN_ROCE_PAYLOAD)),
        FrameKind::RoceWrite => (0x0a, payload.max(MIN_ROCE_PAYLOAD)),
        FrameKind::RoceReadReq => (0x0c, 0),
        FrameKind::RoceReadResp => (0x10, payload.max(MIN_ROCE_PAYLOAD)),
        FrameKind::RoceAck => (0x11, 0),
        FrameKind::RoceAtomicAck => (0x12, 0),
        _ => (atomic_op, 0),
    };
    let pad = (4 - data % 4) % 4;
    // DSCP 26, ECT(0): typical RoCEv2 marking.
    let tos = (26 << 2) | 0b10;
    let ip = match ips {
        RoceIps::V4([src, dst]) => {
            w.eth(macs[1], macs[0], &[], EtherType::IPV4.0);
            w.ipv4(src, dst, IpProtocol::UDP.0, tos, seq as u16)
        }
        RoceIps::V6([src, dst]) => {
            w.eth(macs[1], macs[0], &[], EtherType::IPV6.0);
            w.ipv6(src, dst, IpProtocol::UDP.0, tos, flow)
        }
    };
    let u = w.udp(0xc000 | (flow as u16 * 131), roce::UDP_PORT);
    let bth_repr = bth::Repr {
        opcode,
        solicited: false,
        mig_req: false,
        pad_count: pad as u8,
        pkey: bth::PKEY_DEFAULT,
        fecn: false,
        becn: false,
        dest_qp: 0x11 + flow,
        ack_req: matches!(opcode, 0x0a | 0x0c | 0x13 | 0x14),
        psn: seq & 0x00ff_ffff,
    };
    w.header(bth::HEADER_LEN, |b| bth_repr.emit(&mut bth::Header::new_unchecked(b)));
    let aeth =
        ext::AethRepr { syndrome: ext::Syndrome::Ack { credits: 31 }, msn: seq & 0x00ff_ffff };
    match opcode {
        0x0a | 0x0c => {
            let reth = ext::RethRepr {
                va: 0x1000_0000 + u64::from(flow) * 0x1000,
                rkey: 0x100 + flow,
                dma_len: if opcode == 0x0c { 4096 } else { data as u32 },
            };
            w.header(ext::RETH_LEN, |b| reth.emit(&mut ext::Reth::new_unchecked(b)));
        }
        0x10 | 0x11 => {
            w.header(ext::AETH_LEN, |b| aeth.emit(&mut ext::Aeth::new_unchecked(b)));
        }
        0x12 => {
            w.header(ext::AETH_LEN, |b| aeth.emit(&mut ext::Aeth::new_unchecked(b)));
            let ack = ext::AtomicAckEthRepr { orig_data: u64::from(seq) };
            w.header(ext::ATOMIC_ACK_ETH_LEN, |b| {
                ack.emit(&mut ext::AtomicAckEth::new_unchecked(b))
            });
        }
        0x13 | 0x14 => {
            let at = ext::AtomicEthRepr {
                va: 0x2000_0000 + u64::from(flow) * 8,
                rkey: 0x200 + flow,
                swap_add: 1,
                compare: if opcode == 0x13 { u64::from(seq) } else { 0 },
            };
            w.header(ext::ATOMIC_ETH_LEN, |b| at.emit(&mut ext::AtomicEth::new_unchecked(b)));
        }
        _ => {}
    }
    w.pattern(data, flow as u8);
    w.zeros(pad);
    // ICRC placeholder, then lengths, then the CRC over the finished headers (it masks the UDP
    // checksum, so an IPv6 UDP checksum is computed last, over the ICRC).
    w.put(&[0; 4]);
    w.udp_finish(ip, u, true);
    match ips {
        RoceIps::V4(_) => w.ipv4_finish(ip),
        RoceIps::V6(_) => w.ipv6_finish(ip),
    }
    let len = w.pos.saturating_sub(ip.at);
    if let Some(b) = w.region(ip.at, len)
        && icrc::fill(b).is_err()
    {
        w.overflow = true;
    }
    if ip.src.is_ipv6() {
        w.udp_finish(ip, u, false);
    }
}

/// A port that produces `count` generated frames and then reports itself exhausted. Frames
/// sent to it are counted and discarded.
///
/// Without a pace, every `recv` fills the batch. With [`GenPort::with_pace`], frame `i` becomes
/// available at `start + i * interval` on the caller's clock, and [`Port::poll_timeout`] says
/// when the next one is due (for the simulated-time testbed).
#[derive(Debug)]
pub struct GenPort {
    name: String,
    generator: Generator,
    count: u64,
    produced: u64,
    pace: Option<(Instant, Duration)>,
    kinds: [u64; FrameKind::ALL.len()],
    counters: PortCounters,
}

impl GenPort {
    /// A generator port producing `count` frames from `seed`.
    pub fn new(count: u64, seed: u64) -> Self {
        GenPort {
            name: format!("gen:{count},{seed}"),
            generator: Generator::new(seed),
            count,
            produced: 0,
            pace: None,
            kinds: [0; FrameKind::ALL.len()],
            counters: PortCounters::default(),
        }
    }

    /// Produce one frame every `interval` from `start` on (simulated-time sources).
    pub fn with_pace(mut self, start: Instant, interval: Duration) -> Self {
        self.pace = Some((start, interval));
        self
    }

    /// How many frames of each kind were produced, indexed by [`FrameKind::index`].
    pub fn kind_counts(&self) -> &[u64; FrameKind::ALL.len()] {
        &self.kinds
    }

    fn due(&self, i: u64) -> Instant {
        match self.pace {
            None => Instant::ZERO,
            Some((start, interval)) => {
                let n = interval.as_nanos().saturating_mul(u128::from(i));
                start.saturating_add(Duration::from_nanos(u64::try_from(n).unwrap_or(u64::MAX)))
            }
        }
    }
}

impl Port for GenPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let mut n = 0;
        while self.produced < self.count && self.due(self.produced) <= now {
            let Some(slot) = batch.push_slot() else { break };
            match self.generator.next_frame(slot.recv_area()) {
                Some((kind, len)) if slot.set_len(len).is_ok() => {
                    slot.meta.rx_time = now;
                    self.kinds[kind.index()] += 1;
                    self.counters.count_rx(len);
                    n += 1;
                }
                _ => {
                    batch.pop_slot();
                    self.counters.rx_errors += 1;
                }
            }
            self.produced += 1;
        }
        Ok(n)
    }

    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        for p in batch.iter() {
            self.counters.count_tx(p.len());
        }
        Ok(batch.len())
    }

    fn poll_timeout(&self) -> Option<Instant> {
        (self.produced < self.count).then(|| self.due(self.produced))
    }

    fn is_exhausted(&self) -> bool {
        self.produced >= self.count
    }

    fn caps(&self) -> PortCaps {
        PortCaps { gso: false, max_frame: 65_535, tunnel_gso: false, merges_udp_tunnel: false }
    }

    fn counters(&self) -> PortCounters {
        self.counters
    }
}

/// `count` frames of the stream for `seed`, each as its own `Vec` (for tests and for writing
/// sample pcap files; allocates).
pub fn frames(count: usize, seed: u64) -> Vec<(FrameKind, Vec<u8>)> {
    let mut g = Generator::new(seed);
    let mut buf = [0u8; 2048];
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        if let Some((kind, len)) = g.next_frame(&mut buf) {
            out.push((kind, buf[..len].to_vec()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Reference implementations, independent of snic-wire, to check the frames against.

    fn add_words(mut sum: u32, data: &[u8]) -> u32 {
        let mut chunks = data.chunks_exact(2);
        for c in &mut chunks {
            sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        if let [last] = chunks.remainder() {
            sum += u32::from(*last) << 8;
        }
        sum
    }

    fn checksum(init: u32, data: &[u8]) -> u16 {
        let mut sum = u64::from(add_words(0, data)) + u64::from(init);
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    /// RoCEv2 ICRC of an IPv4 frame whose IP header is at `ip`: CRC-32 over 8 bytes of ones,
    /// the IP/UDP/BTH headers with TOS, TTL, IP checksum, UDP checksum and the BTH reserved
    /// byte set to ones, then the rest up to the ICRC.
    fn icrc_ipv4(frame: &[u8], ip: usize) -> Option<u32> {
        let mut h = crc32fast::Hasher::new();
        h.update(&[0xff; 8]);
        let mut iph: [u8; 20] = frame.get(ip..ip + 20)?.try_into().ok()?;
        iph[1] = 0xff;
        iph[8] = 0xff;
        iph[10] = 0xff;
        iph[11] = 0xff;
        h.update(&iph);
        let mut udph: [u8; 8] = frame.get(ip + 20..ip + 28)?.try_into().ok()?;
        udph[6] = 0xff;
        udph[7] = 0xff;
        h.update(&udph);
        let mut b: [u8; 12] = frame.get(ip + 28..ip + 40)?.try_into().ok()?;
        b[4] = 0xff;
        h.update(&b);
        h.update(frame.get(ip + 40..frame.len().checked_sub(4)?)?);
        Some(h.finalize())
    }

    #[test]
    fn same_seed_same_frames_other_seed_differs() {
        let a = frames(500, 42);
        let b = frames(500, 42);
        let c = frames(500, 43);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn every_kind_appears_in_a_large_sample() {
        let mut seen = [0u32; FrameKind::ALL.len()];
        for (k, f) in frames(5000, 7) {
            seen[k.index()] += 1;
            if !k.is_malformed() {
                assert!(f.len() >= MIN_FRAME, "{k:?} is {} bytes", f.len());
            }
        }
        for k in FrameKind::ALL {
            assert!(seen[k.index()] > 0, "{k:?} never generated");
        }
        let malformed: u32 =
            FrameKind::ALL.iter().filter(|k| k.is_malformed()).map(|k| seen[k.index()]).sum();
        // 4% by weight.
        assert!((100..=320).contains(&malformed), "{malformed}");
    }

    fn first(kind: FrameKind) -> Vec<u8> {
        frames(3000, 11).into_iter().find(|(k, _)| *k == kind).map(|(_, f)| f).unwrap()
    }

    #[test]
    fn ipv4_udp_checksums_verify() {
        let f = first(FrameKind::Ipv4Udp);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        // IP header checksum over the header sums to zero.
        assert_eq!(checksum(0, &f[14..34]), 0);
        let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
        let udp_len = usize::from(u16::from_be_bytes([f[38], f[39]]));
        assert_eq!(total, udp_len + 20);
        // UDP checksum with pseudo-header sums to zero.
        let mut s = add_words(0, &f[26..34]);
        s += 17 + udp_len as u32;
        assert_eq!(checksum(s, &f[34..34 + udp_len]), 0);
    }

    #[test]
    fn vxlan_frame_layout() {
        let f = first(FrameKind::VxlanTcp);
        assert_eq!(u16::from_be_bytes([f[36], f[37]]), vxlan::UDP_PORT);
        assert_eq!(f[42], 0x08, "VXLAN I flag");
        // Inner Ethernet carries IPv4 / TCP.
        assert_eq!(&f[50 + 12..50 + 14], &[0x08, 0x00]);
        assert_eq!(f[50 + 14 + 9], IpProtocol::TCP.0);
        assert_eq!(checksum(0, &f[64..84]), 0);
    }

    #[test]
    fn roce_icrc_verifies_and_bad_icrc_does_not() {
        for kind in
            [FrameKind::RoceSend, FrameKind::RoceWrite, FrameKind::RoceAck, FrameKind::RoceAtomic]
        {
            let f = first(kind);
            assert_eq!(u16::from_be_bytes([f[36], f[37]]), roce::UDP_PORT);
            let carried = u32::from_le_bytes(f[f.len() - 4..].try_into().unwrap());
            assert_eq!(icrc_ipv4(&f, 14), Some(carried), "{kind:?}");
            assert_eq!(icrc::verify(&f[14..]), Ok(()), "{kind:?}");
            // The IP total length covers the ICRC.
            assert_eq!(usize::from(u16::from_be_bytes([f[16], f[17]])) + 14, f.len());
        }
        let f = first(FrameKind::BadIcrc);
        let carried = u32::from_le_bytes(f[f.len() - 4..].try_into().unwrap());
        assert_ne!(icrc_ipv4(&f, 14), Some(carried));
        assert!(matches!(icrc::verify(&f[14..]), Err(snic_wire::Error::BadIcrc { .. })));
    }

    /// RoCEv2 ICRC of an IPv6 frame whose IP header is at `ip`: as [`icrc_ipv4`], with the
    /// traffic class, flow label and hop limit masked to ones.
    fn icrc_ipv6(frame: &[u8], ip: usize) -> Option<u32> {
        let mut h = crc32fast::Hasher::new();
        h.update(&[0xff; 8]);
        let mut iph: [u8; 40] = frame.get(ip..ip + 40)?.try_into().ok()?;
        iph[0] |= 0x0f;
        iph[1] = 0xff;
        iph[2] = 0xff;
        iph[3] = 0xff;
        iph[7] = 0xff;
        h.update(&iph);
        let mut udph: [u8; 8] = frame.get(ip + 40..ip + 48)?.try_into().ok()?;
        udph[6] = 0xff;
        udph[7] = 0xff;
        h.update(&udph);
        let mut b: [u8; 12] = frame.get(ip + 48..ip + 60)?.try_into().ok()?;
        b[4] = 0xff;
        h.update(&b);
        h.update(frame.get(ip + 60..frame.len().checked_sub(4)?)?);
        Some(h.finalize())
    }

    #[test]
    fn roce_over_ipv6_icrc_and_udp_checksum_verify() {
        for (kind, opcode) in [(FrameKind::RoceV6Send, 0x04), (FrameKind::RoceV6Write, 0x0a)] {
            let f = first(kind);
            assert_eq!(&f[12..14], &[0x86, 0xdd], "{kind:?}");
            assert_eq!(f[14] >> 4, 6);
            // Traffic class DSCP 26, ECT(0); next header UDP.
            assert_eq!(((f[14] & 0x0f) << 4) | (f[15] >> 4), 0x6a, "{kind:?}");
            assert_eq!(f[20], IpProtocol::UDP.0);
            assert_eq!(u16::from_be_bytes([f[56], f[57]]), roce::UDP_PORT);
            assert_eq!(f[62], opcode, "{kind:?}");
            // Payload length and UDP length both cover everything to the end (ICRC included).
            let plen = usize::from(u16::from_be_bytes([f[18], f[19]]));
            let udp_len = usize::from(u16::from_be_bytes([f[58], f[59]]));
            assert_eq!(plen + 54, f.len(), "{kind:?}");
            assert_eq!(udp_len, plen);
            let carried = u32::from_le_bytes(f[f.len() - 4..].try_into().unwrap());
            assert_eq!(icrc_ipv6(&f, 14), Some(carried), "{kind:?}");
            assert_eq!(icrc::verify(&f[14..]), Ok(()), "{kind:?}");
            // The UDP checksum (mandatory over IPv6) covers the ICRC and sums to zero with the
            // pseudo-header.
            assert_ne!(u16::from_be_bytes([f[60], f[61]]), 0);
            let s = add_words(0, &f[22..54]) + 17 + udp_len as u32;
            assert_eq!(checksum(s, &f[54..54 + udp_len]), 0, "{kind:?}");
        }
    }

    #[test]
    fn icrc_known_answer() {
        // A fixed RoCEv2 SEND-only frame; ICRC independently computed with Python's
        // zlib.crc32 over the masked pseudo-packet.
        let mut f = vec![0u8; 14];
        f.extend_from_slice(&[
            0x45, 0x00, 0x00, 0x30, 0x00, 0x01, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 10, 0, 0, 1,
            10, 0, 0, 2, // IPv4
            0xc0, 0x00, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00, // UDP
            0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x00, 0x01, // BTH
            1, 2, 3, 4, // payload
            0, 0, 0, 0, // ICRC
        ]);
        assert_eq!(icrc_ipv4(&f, 14), Some(ICRC_KAT));
        assert_eq!(icrc::compute(&f[14..]), Ok(ICRC_KAT));
    }

    /// Computed with `zlib.crc32(b'\xff'*8 + masked headers + payload)` in Python, by this
    /// one-liner (also `scripts/icrc_kat.py`, which snic-wire's `vectors_drift` test re-runs):
    /// `python3 -c "import zlib; print(hex(zlib.crc32(bytes.fromhex('ff'*8 +
    /// '45ff003000014000ff11ffff0a0000010a000002' + 'c00012b7001cffff' +
    /// '0400ffffff00001100000001' + '01020304'))))"` (IPv4 TOS/TTL/checksum, UDP checksum and
    /// BTH byte 4 masked to ones).
    const ICRC_KAT: u32 = 0x37cc_9e88;

    #[test]
    fn snic_wire_parses_every_valid_frame_and_rejects_truncated_ones() {
        for (k, f) in frames(3000, 5) {
            let st = snic_wire::stack::Stack::parse(&f);
            match k {
                FrameKind::Truncated => assert!(!st.is_ok(), "truncated frame parsed: {f:02x?}"),
                _ => assert!(st.is_ok(), "{k:?}: {:?} in {f:02x?}", st.error()),
            }
        }
    }

    #[test]
    fn port_produces_count_then_exhausts_and_paces() {
        let mut p = GenPort::new(300, 1);
        let mut b = Batch::new(256);
        assert_eq!(p.recv(Instant::ZERO, &mut b).unwrap(), 256);
        b.clear();
        assert_eq!(p.recv(Instant::ZERO, &mut b).unwrap(), 44);
        assert!(p.is_exhausted());
        assert_eq!(p.counters().rx_packets, 300);
        assert_eq!(p.kind_counts().iter().sum::<u64>(), 300);

        let mut p =
            GenPort::new(10, 1).with_pace(Instant::from_micros(10), Duration::from_micros(5));
        let mut b = Batch::new(256);
        assert_eq!(p.poll_timeout(), Some(Instant::from_micros(10)));
        assert_eq!(p.recv(Instant::from_micros(9), &mut b).unwrap(), 0);
        assert_eq!(p.recv(Instant::from_micros(20), &mut b).unwrap(), 3);
        assert_eq!(p.poll_timeout(), Some(Instant::from_micros(25)));
        assert_eq!(b.packets()[0].meta.rx_time, Instant::from_micros(20));
    }
}
