//! Property tests for the L2/L3/L4 headers of `snic-wire`:
//! - round trips: every `Repr` emitted then parsed gives the same `Repr`;
//! - robustness: arbitrary bytes through `new_checked`, every accessor and `Repr::parse` never
//!   panic;
//! - cross-check: random valid Ethernet/VLAN/IPv4/IPv6/UDP/TCP frames built by us are read by
//!   the `etherparse` crate with the same fields and the same checksum verdicts.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use snic_wire::ethernet::{self, EtherType, EthernetAddress, VlanRepr, VlanTag};
use snic_wire::ipv4::{self, IpProtocol};
use snic_wire::tcp::{self, Flags, SackBlocks, TcpOption};
use snic_wire::{arp, icmpv4, icmpv6, ipv6, udp};

// ---------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------

fn mac() -> impl Strategy<Value = EthernetAddress> {
    any::<[u8; 6]>().prop_map(EthernetAddress)
}

fn ipv4_repr(proto: Option<u8>) -> impl Strategy<Value = ipv4::Repr> {
    (
        any::<[u8; 4]>(),
        any::<[u8; 4]>(),
        any::<u8>(),
        0usize..600,
        any::<u8>(),
        0u8..64,
        0u8..4,
        any::<u16>(),
        any::<bool>(),
        any::<bool>(),
        0u16..8192,
        (0usize..=10).prop_flat_map(|w| proptest::collection::vec(any::<u8>(), w * 4)),
    )
        .prop_map(move |(s, d, p, len, ttl, dscp, ecn, ident, df, mf, off, opts)| {
            let mut r = ipv4::Repr::new(
                Ipv4Addr::from(s),
                Ipv4Addr::from(d),
                IpProtocol(proto.unwrap_or(p)),
                len,
            );
            r.hop_limit = ttl;
            r.dscp = dscp;
            r.ecn = ecn;
            r.ident = ident;
            r.dont_frag = df;
            r.more_frags = mf;
            r.frag_offset = off << 3;
            r.set_options(&opts).unwrap();
            r
        })
}

fn ipv6_repr(proto: Option<u8>) -> impl Strategy<Value = ipv6::Repr> {
    (
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        any::<u8>(),
        0usize..600,
        any::<u8>(),
        any::<u8>(),
        0u32..(1 << 20),
    )
        .prop_map(move |(s, d, p, len, hl, tc, fl)| ipv6::Repr {
            src_addr: Ipv6Addr::from(s),
            dst_addr: Ipv6Addr::from(d),
            next_header: IpProtocol(proto.unwrap_or(p)),
            payload_len: len,
            hop_limit: hl,
            traffic_class: tc,
            flow_label: fl,
        })
}

fn tcp_repr() -> impl Strategy<Value = tcp::Repr> {
    (
        (
            any::<u16>(),
            any::<u16>(),
            any::<u32>(),
            any::<u32>(),
            0u16..0x200,
            any::<u16>(),
            any::<u16>(),
        ),
        (
            proptest::option::of(any::<u16>()),
            proptest::option::of(any::<u8>()),
            any::<bool>(),
            proptest::option::of(any::<(u32, u32)>()),
            proptest::collection::vec(any::<(u32, u32)>(), 0..=4),
        ),
        0usize..300,
    )
        .prop_map(|((sp, dp, seq, ack, flags, win, urg), (mss, ws, sp_ok, ts, sack), len)| {
            tcp::Repr {
                src_port: sp,
                dst_port: dp,
                seq_number: seq,
                ack_number: ack,
                flags: Flags(flags),
                window_len: win,
                urgent_at: urg,
                max_seg_size: mss,
                window_scale: ws,
                sack_permitted: sp_ok,
                timestamps: ts,
                sack_ranges: SackBlocks::from_slice(&sack).unwrap(),
                payload_len: len,
            }
        })
}

/// Fixed (non-SACK) option bytes a TCP Repr emits.
fn tcp_fixed_opts(r: &tcp::Repr) -> usize {
    4 * usize::from(r.max_seg_size.is_some())
        + 3 * usize::from(r.window_scale.is_some())
        + 2 * usize::from(r.sack_permitted)
        + 10 * usize::from(r.timestamps.is_some())
}

// ---------------------------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------------------------

proptest! {
    #[test]
    fn ethernet_round_trip(src in mac(), dst in mac(), et in any::<u16>(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
        let r = ethernet::Repr { src_addr: src, dst_addr: dst, ethertype: EtherType(et) };
        let mut buf = vec![0u8; r.buffer_len() + payload.len()];
        let mut f = ethernet::Frame::new_unchecked(&mut buf[..]);
        r.emit(&mut f);
        f.payload_mut().copy_from_slice(&payload);
        let f = ethernet::Frame::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(ethernet::Repr::parse(&f).unwrap(), r);
        prop_assert_eq!(f.payload(), &payload[..]);
    }

    #[test]
    fn vlan_round_trip(pcp in 0u8..8, dei in any::<bool>(), vid in 0u16..4096, et in any::<u16>()) {
        let r = VlanRepr { pcp, dei, vid, ethertype: EtherType(et) };
        let mut buf = [0u8; 4];
        r.emit(&mut VlanTag::new_unchecked(&mut buf[..]));
        prop_assert_eq!(VlanRepr::parse(&VlanTag::new_checked(&buf[..]).unwrap()).unwrap(), r);
    }

    #[test]
    fn ipv4_round_trip(r in ipv4_repr(None)) {
        let mut buf = vec![0u8; r.buffer_len()];
        let mut p = ipv4::Packet::new_unchecked(&mut buf[..]);
        r.emit(&mut p);
        p.fill_checksum();
        let p = ipv4::Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(p.verify_checksum());
        prop_assert_eq!(ipv4::Repr::parse(&p).unwrap(), r);
    }

    #[test]
    fn ipv6_round_trip(r in ipv6_repr(None)) {
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut ipv6::Packet::new_unchecked(&mut buf[..]));
        let p = ipv6::Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(ipv6::Repr::parse(&p).unwrap(), r);
    }

    #[test]
    fn udp_round_trip(sp in any::<u16>(), dp in any::<u16>(), payload in proptest::collection::vec(any::<u8>(), 0..200), v6 in any::<bool>()) {
        let (src, dst): (IpAddr, IpAddr) = if v6 {
            (Ipv6Addr::LOCALHOST.into(), Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 9).into())
        } else {
            (Ipv4Addr::new(10, 1, 2, 3).into(), Ipv4Addr::new(172, 16, 0, 1).into())
        };
        let r = udp::Repr { src_port: sp, dst_port: dp, payload_len: payload.len() };
        let mut buf = vec![0u8; r.buffer_len()];
        let mut p = udp::Packet::new_unchecked(&mut buf[..]);
        r.emit(&mut p);
        p.payload_mut().copy_from_slice(&payload);
        p.fill_checksum(&src, &dst);
        let p = udp::Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(p.checksum() != 0);
        prop_assert!(p.verify_checksum(&src, &dst));
        prop_assert_eq!(udp::Repr::parse(&p).unwrap(), r);
    }

    #[test]
    fn tcp_round_trip(r in tcp_repr()) {
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut tcp::Packet::new_unchecked(&mut buf[..]));
        let p = tcp::Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(p.header_len(), r.header_len());
        prop_assert!(p.header_len() <= tcp::MAX_HEADER_LEN && p.header_len() % 4 == 0);
        let back = tcp::Repr::parse(&p).unwrap();
        // SACK blocks that do not fit in 40 option bytes are left out, never half-written.
        let sent = r.sack_ranges.as_slice();
        let got = back.sack_ranges.as_slice();
        prop_assert_eq!(got, &sent[..got.len()]);
        if got.len() < sent.len() {
            prop_assert!(tcp_fixed_opts(&r) + 2 + 8 * (got.len() + 1) > 40);
        }
        let mut expect = r;
        expect.sack_ranges = back.sack_ranges;
        prop_assert_eq!(back, expect);
    }

    #[test]
    fn icmp_round_trip(kind in 0u8..3, t in any::<u8>(), c in any::<u8>(), rest in any::<[u8; 4]>(), id in any::<u16>(), seq in any::<u16>(), data in proptest::collection::vec(any::<u8>(), 0..64)) {
        let data_len = data.len();
        let r4 = match kind {
            0 => icmpv4::Repr::EchoRequest { ident: id, seq_no: seq, data_len },
            1 => icmpv4::Repr::EchoReply { ident: id, seq_no: seq, data_len },
            _ => icmpv4::Repr::Other { msg_type: t, code: c.max(1), rest, data_len },
        };
        let mut buf = vec![0u8; r4.buffer_len()];
        let mut p = icmpv4::Packet::new_unchecked(&mut buf[..]);
        r4.emit(&mut p);
        p.payload_mut().copy_from_slice(&data);
        p.fill_checksum();
        let p = icmpv4::Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(p.verify_checksum());
        prop_assert_eq!(icmpv4::Repr::parse(&p).unwrap(), r4);

        let r6 = match kind {
            0 => icmpv6::Repr::EchoRequest { ident: id, seq_no: seq, data_len },
            1 => icmpv6::Repr::EchoReply { ident: id, seq_no: seq, data_len },
            _ => icmpv6::Repr::Other { msg_type: t, code: c.max(1), rest, data_len },
        };
        let (s, d) = (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1), Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2));
        let mut buf = vec![0u8; r6.buffer_len()];
        let mut p = icmpv6::Packet::new_unchecked(&mut buf[..]);
        r6.emit(&mut p);
        p.payload_mut().copy_from_slice(&data);
        p.fill_checksum(s, d);
        let p = icmpv6::Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(p.verify_checksum(s, d));
        prop_assert_eq!(icmpv6::Repr::parse(&p).unwrap(), r6);
    }

    #[test]
    fn arp_round_trip(reply in any::<bool>(), sha in mac(), tha in mac(), spa in any::<[u8; 4]>(), tpa in any::<[u8; 4]>()) {
        let r = arp::Repr {
            operation: if reply { arp::Operation::Reply } else { arp::Operation::Request },
            source_hardware_addr: sha,
            source_protocol_addr: spa.into(),
            target_hardware_addr: tha,
            target_protocol_addr: tpa.into(),
        };
        let mut buf = [0u8; arp::HEADER_LEN];
        r.emit(&mut arp::Packet::new_unchecked(&mut buf[..]));
        prop_assert_eq!(arp::Repr::parse(&arp::Packet::new_checked(&buf[..]).unwrap()).unwrap(), r);
    }
}

// ---------------------------------------------------------------------------------------------
// Arbitrary bytes never panic
// ---------------------------------------------------------------------------------------------

fn poke_all(b: &[u8]) {
    let a4: IpAddr = Ipv4Addr::new(1, 2, 3, 4).into();
    let a6: IpAddr = Ipv6Addr::LOCALHOST.into();
    if let Ok(f) = ethernet::Frame::new_checked(b) {
        let _ = (f.src_addr(), f.dst_addr(), f.ethertype(), f.payload().len(), f.vlans());
        let _ = ethernet::Repr::parse(&f);
    }
    if let Ok(t) = VlanTag::new_checked(b) {
        let _ = (t.pcp(), t.dei(), t.vid(), t.ethertype(), t.payload().len());
    }
    let _ = ethernet::walk_vlans(EtherType::QINQ, b);
    if let Ok(p) = arp::Packet::new_checked(b) {
        let _ = arp::Repr::parse(&p);
    }
    if let Ok(p) = ipv4::Packet::new_checked(b) {
        let _ = (p.options().len(), p.payload().len(), p.verify_checksum(), p.frag_offset());
        let _ = p.options_iter().count();
        let _ = ipv4::Repr::parse(&p);
        let mut c = b.to_vec();
        let mut m = ipv4::Packet::new_unchecked(&mut c[..]);
        let _ = (m.mark_ce(), m.decrement_ttl());
        m.fill_checksum();
        m.payload_mut().fill(0);
    }
    if let Ok(p) = ipv6::Packet::new_checked(b) {
        let _ = (p.flow_label(), p.payload().len(), p.extensions());
        let _ = ipv6::Repr::parse(&p);
    }
    for first in [0u8, 43, 44, 51, 60] {
        let _ = ipv6::walk_extensions(IpProtocol(first), b);
    }
    if let Ok(p) = udp::Packet::new_checked(b) {
        let _ = (p.payload().len(), p.verify_checksum(&a4, &a4), p.verify_checksum(&a6, &a4));
        let _ = udp::Repr::parse(&p);
    }
    if let Ok(p) = tcp::Packet::new_checked(b) {
        let _ = (p.flags(), p.payload().len(), p.segment_len(), p.verify_checksum(&a6, &a6));
        let _ = p.options_iter().count();
        let _ = tcp::Repr::parse(&p);
    }
    for _ in tcp::Options::new(b) {}
    if let Ok(p) = icmpv4::Packet::new_checked(b) {
        let _ = (p.verify_checksum(), icmpv4::Repr::parse(&p));
    }
    if let Ok(p) = icmpv6::Packet::new_checked(b) {
        let _ = (
            p.verify_checksum(Ipv6Addr::LOCALHOST, Ipv6Addr::UNSPECIFIED),
            icmpv6::Repr::parse(&p),
        );
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..128)) {
        poke_all(&b);
    }

    /// Mostly-valid headers with one field scrambled reach deeper code than random bytes.
    #[test]
    fn scrambled_headers_never_panic(r in ipv4_repr(Some(6)), t in tcp_repr(), at in any::<prop::sample::Index>(), v in any::<u8>()) {
        let mut buf = vec![0u8; r.header_len() + t.buffer_len()];
        let mut r = r;
        r.payload_len = t.buffer_len();
        r.emit(&mut ipv4::Packet::new_unchecked(&mut buf[..]));
        let hl = r.header_len();
        t.emit(&mut tcp::Packet::new_unchecked(&mut buf[hl..]));
        let i = at.index(buf.len());
        buf[i] = v;
        poke_all(&buf);
        poke_all(&buf[hl..]);
        poke_all(&buf[hl.min(20)..]);
    }
}

// ---------------------------------------------------------------------------------------------
// Cross-check against etherparse
// ---------------------------------------------------------------------------------------------

/// What to break before handing the frame to etherparse.
#[derive(Debug, Clone, Copy)]
enum Corrupt {
    None,
    IpChecksum,
    L4Checksum,
}

fn corrupt() -> impl Strategy<Value = Corrupt> {
    prop_oneof![Just(Corrupt::None), Just(Corrupt::IpChecksum), Just(Corrupt::L4Checksum)]
}

#[derive(Debug, Clone)]
enum L4 {
    Udp(u16, u16),
    Tcp(tcp::Repr),
}

fn l4() -> impl Strategy<Value = L4> {
    prop_oneof![
        (any::<u16>(), any::<u16>()).prop_map(|(s, d)| L4::Udp(s, d)),
        tcp_repr().prop_map(L4::Tcp)
    ]
}

fn vlans() -> impl Strategy<Value = Vec<VlanRepr>> {
    proptest::collection::vec(
        (0u8..8, any::<bool>(), 0u16..4096).prop_map(|(pcp, dei, vid)| VlanRepr {
            pcp,
            dei,
            vid,
            ethertype: EtherType(0),
        }),
        0..=2,
    )
}

/// Build Ethernet / VLANs / IP / L4 / payload with our emitters; returns the frame and the
/// offsets of the IP and L4 headers.
fn build(
    src: EthernetAddress,
    dst: EthernetAddress,
    tags: &[VlanRepr],
    ip: &IpRepr,
    l4: &L4,
    payload: &[u8],
    corrupt: Corrupt,
) -> (Vec<u8>, usize, usize) {
    let (l4_hdr_len, proto) = match l4 {
        L4::Udp(..) => (udp::HEADER_LEN, IpProtocol::UDP),
        L4::Tcp(t) => (t.header_len(), IpProtocol::TCP),
    };
    let l4_len = l4_hdr_len + payload.len();
    let ip_hl = match ip {
        IpRepr::V4(r) => r.header_len(),
        IpRepr::V6(_) => ipv6::HEADER_LEN,
    };
    let ip_off = ethernet::HEADER_LEN + tags.len() * ethernet::VLAN_TAG_LEN;
    let l4_off = ip_off + ip_hl;
    let mut buf = vec![0u8; l4_off + l4_len];

    let ip_type = match ip {
        IpRepr::V4(_) => EtherType::IPV4,
        IpRepr::V6(_) => EtherType::IPV6,
    };
    let first_type = match tags.len() {
        0 => ip_type,
        1 => EtherType::VLAN,
        _ => EtherType::QINQ,
    };
    let eth = ethernet::Repr { src_addr: src, dst_addr: dst, ethertype: first_type };
    eth.emit(&mut ethernet::Frame::new_unchecked(&mut buf[..]));
    for (i, t) in tags.iter().enumerate() {
        let mut t = *t;
        t.ethertype = if i + 1 == tags.len() { ip_type } else { EtherType::VLAN };
        let at = ethernet::HEADER_LEN + i * ethernet::VLAN_TAG_LEN;
        t.emit(&mut VlanTag::new_unchecked(&mut buf[at..]));
    }

    let (s, d): (IpAddr, IpAddr) = match ip {
        IpRepr::V4(r) => {
            let mut r = *r;
            r.next_header = proto;
            r.payload_len = l4_len;
            let mut p = ipv4::Packet::new_unchecked(&mut buf[ip_off..]);
            r.emit(&mut p);
            p.fill_checksum();
            (r.src_addr.into(), r.dst_addr.into())
        }
        IpRepr::V6(r) => {
            let mut r = *r;
            r.next_header = proto;
            r.payload_len = l4_len;
            r.emit(&mut ipv6::Packet::new_unchecked(&mut buf[ip_off..]));
            (r.src_addr.into(), r.dst_addr.into())
        }
    };

    match l4 {
        L4::Udp(sp, dp) => {
            let r = udp::Repr { src_port: *sp, dst_port: *dp, payload_len: payload.len() };
            let mut p = udp::Packet::new_unchecked(&mut buf[l4_off..]);
            r.emit(&mut p);
            p.payload_mut().copy_from_slice(payload);
            p.fill_checksum(&s, &d);
        }
        L4::Tcp(t) => {
            let mut t = *t;
            t.payload_len = payload.len();
            let mut p = tcp::Packet::new_unchecked(&mut buf[l4_off..]);
            t.emit(&mut p);
            p.payload_mut().copy_from_slice(payload);
            p.fill_checksum(&s, &d);
        }
    }

    match (corrupt, ip) {
        (Corrupt::IpChecksum, IpRepr::V4(_)) => buf[ip_off + 10] ^= 0x5a,
        (Corrupt::L4Checksum, _) | (Corrupt::IpChecksum, IpRepr::V6(_)) => {
            let at = l4_off + if matches!(l4, L4::Udp(..)) { 6 } else { 16 };
            buf[at] ^= 0x24;
        }
        (Corrupt::None, _) => {}
    }
    (buf, ip_off, l4_off)
}

#[derive(Debug, Clone, Copy)]
enum IpRepr {
    V4(ipv4::Repr),
    V6(ipv6::Repr),
}

fn ip_repr() -> impl Strategy<Value = IpRepr> {
    prop_oneof![
        // Unfragmented, so etherparse reads the transport header.
        ipv4_repr(None).prop_map(|mut r| {
            r.more_frags = false;
            r.frag_offset = 0;
            IpRepr::V4(r)
        }),
        ipv6_repr(None).prop_map(IpRepr::V6),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn cross_check_etherparse(
        src in mac(), dst in mac(), tags in vlans(), ip in ip_repr(), l4 in l4(),
        payload in proptest::collection::vec(any::<u8>(), 0..100), corrupt in corrupt(),
    ) {
        use etherparse::{LinkHeader, NetHeaders, PacketHeaders, TransportHeader, VlanHeader};

        let (buf, ip_off, l4_off) = build(src, dst, &tags, &ip, &l4, &payload, corrupt);
        let ep = PacketHeaders::from_ethernet_slice(&buf).expect("etherparse accepts our frame");

        // Ethernet and VLAN tags.
        // Our parse must give back what we emitted (so agreement with etherparse below also
        // checks our emitters, not just our parsers).
        let (proto, l4_len) = match &l4 {
            L4::Udp(..) => (IpProtocol::UDP, udp::HEADER_LEN + payload.len()),
            L4::Tcp(t) => (IpProtocol::TCP, t.header_len() + payload.len()),
        };
        let frame = ethernet::Frame::new_checked(&buf[..]).unwrap();
        prop_assert_eq!((frame.src_addr(), frame.dst_addr()), (src, dst));
        let Some(LinkHeader::Ethernet2(eth)) = ep.link.clone() else { panic!("no ethernet") };
        prop_assert_eq!(eth.source, frame.src_addr().0);
        prop_assert_eq!(eth.destination, frame.dst_addr().0);
        prop_assert_eq!(eth.ether_type.0, frame.ethertype().0);
        let walk = frame.vlans().unwrap();
        prop_assert_eq!(ethernet::HEADER_LEN + walk.payload_offset, ip_off);
        let ep_tags: Vec<_> = match ep.vlan.clone() {
            None => vec![],
            Some(VlanHeader::Single(s)) => vec![s],
            Some(VlanHeader::Double(d)) => vec![d.outer, d.inner],
        };
        prop_assert_eq!(ep_tags.len(), walk.tags().len());
        for (e, o) in ep_tags.iter().zip(walk.tags()) {
            prop_assert_eq!(e.pcp.value(), o.pcp);
            prop_assert_eq!(e.drop_eligible_indicator, o.dei);
            prop_assert_eq!(e.vlan_id.value(), o.vid);
            prop_assert_eq!(e.ether_type.0, o.ethertype.0);
        }
        for (i, o) in tags.iter().zip(walk.tags()) {
            prop_assert_eq!((i.pcp, i.dei, i.vid), (o.pcp, o.dei, o.vid));
        }

        // IP.
        let (src_ip, dst_ip): (IpAddr, IpAddr) = match ep.net.clone() {
            Some(NetHeaders::Ipv4(h, _)) => {
                let p = ipv4::Packet::new_checked(&buf[ip_off..]).unwrap();
                let r = ipv4::Repr::parse(&p).unwrap();
                let IpRepr::V4(mut want) = ip else { panic!("built IPv4") };
                want.next_header = proto;
                want.payload_len = l4_len;
                prop_assert_eq!(r, want);
                prop_assert_eq!(h.source, r.src_addr.octets());
                prop_assert_eq!(h.destination, r.dst_addr.octets());
                prop_assert_eq!(h.protocol.0, r.next_header.0);
                prop_assert_eq!(usize::from(h.total_len), r.buffer_len());
                prop_assert_eq!(h.time_to_live, r.hop_limit);
                prop_assert_eq!(h.dscp.value(), r.dscp);
                prop_assert_eq!(h.ecn.value(), r.ecn);
                prop_assert_eq!(h.identification, r.ident);
                prop_assert_eq!(h.dont_fragment, r.dont_frag);
                prop_assert_eq!(h.more_fragments, r.more_frags);
                prop_assert_eq!(h.fragment_offset.value() * 8, r.frag_offset);
                prop_assert_eq!(h.options.as_slice(), r.options());
                prop_assert_eq!(h.header_checksum, p.checksum());
                // Same checksum verdict.
                prop_assert_eq!(h.calc_header_checksum() == h.header_checksum, p.verify_checksum());
                prop_assert_eq!(p.verify_checksum(), !matches!(corrupt, Corrupt::IpChecksum));
                (r.src_addr.into(), r.dst_addr.into())
            }
            Some(NetHeaders::Ipv6(h, _)) => {
                let p = ipv6::Packet::new_checked(&buf[ip_off..]).unwrap();
                let r = ipv6::Repr::parse(&p).unwrap();
                let IpRepr::V6(mut want) = ip else { panic!("built IPv6") };
                want.next_header = proto;
                want.payload_len = l4_len;
                prop_assert_eq!(r, want);
                prop_assert_eq!(h.source, r.src_addr.octets());
                prop_assert_eq!(h.destination, r.dst_addr.octets());
                prop_assert_eq!(h.next_header.0, r.next_header.0);
                prop_assert_eq!(usize::from(h.payload_length), r.payload_len);
                prop_assert_eq!(h.hop_limit, r.hop_limit);
                prop_assert_eq!(h.traffic_class, r.traffic_class);
                prop_assert_eq!(h.flow_label.value(), r.flow_label);
                prop_assert_eq!(p.extensions().unwrap().offset, 0);
                (r.src_addr.into(), r.dst_addr.into())
            }
            None => panic!("etherparse found no IP header"),
        };

        // L4.
        let l4_bytes = &buf[l4_off..];
        match ep.transport.clone() {
            Some(TransportHeader::Udp(h)) => {
                let p = udp::Packet::new_checked(l4_bytes).unwrap();
                let r = udp::Repr::parse(&p).unwrap();
                let L4::Udp(sp, dp) = l4 else { panic!("built UDP") };
                prop_assert_eq!(r, udp::Repr { src_port: sp, dst_port: dp, payload_len: payload.len() });
                prop_assert_eq!(h.source_port, r.src_port);
                prop_assert_eq!(h.destination_port, r.dst_port);
                prop_assert_eq!(usize::from(h.length), r.buffer_len());
                prop_assert_eq!(h.checksum, p.checksum());
                let calc = match (src_ip, dst_ip) {
                    (IpAddr::V4(s), IpAddr::V4(d)) => h.calc_checksum_ipv4_raw(s.octets(), d.octets(), p.payload()).unwrap(),
                    (IpAddr::V6(s), IpAddr::V6(d)) => h.calc_checksum_ipv6_raw(s.octets(), d.octets(), p.payload()).unwrap(),
                    _ => unreachable!(),
                };
                let ep_ok = calc == h.checksum || (h.checksum == 0 && src_ip.is_ipv4());
                prop_assert_eq!(ep_ok, p.verify_checksum(&src_ip, &dst_ip));
                prop_assert_eq!(ep.payload.slice(), p.payload());
            }
            Some(TransportHeader::Tcp(h)) => {
                let p = tcp::Packet::new_checked(l4_bytes).unwrap();
                let r = tcp::Repr::parse(&p).unwrap();
                let L4::Tcp(mut want) = l4.clone() else { panic!("built TCP") };
                want.payload_len = payload.len();
                let got = r.sack_ranges.as_slice();
                prop_assert_eq!(got, &want.sack_ranges.as_slice()[..got.len()]);
                want.sack_ranges = r.sack_ranges;
                prop_assert_eq!(r, want);
                prop_assert_eq!(h.source_port, r.src_port);
                prop_assert_eq!(h.destination_port, r.dst_port);
                prop_assert_eq!(h.sequence_number, r.seq_number);
                prop_assert_eq!(h.acknowledgment_number, r.ack_number);
                prop_assert_eq!(h.window_size, r.window_len);
                prop_assert_eq!(h.urgent_pointer, r.urgent_at);
                prop_assert_eq!(h.checksum, p.checksum());
                prop_assert_eq!(h.header_len(), p.header_len());
                let f = r.flags;
                let ep_flags = [h.fin, h.syn, h.rst, h.psh, h.ack, h.urg, h.ece, h.cwr, h.ns];
                let ours = [Flags::FIN, Flags::SYN, Flags::RST, Flags::PSH, Flags::ACK, Flags::URG, Flags::ECE, Flags::CWR, Flags::NS]
                    .map(|x| f.contains(x));
                prop_assert_eq!(ep_flags, ours);
                // Options: same sequence, ignoring NOP padding and what follows End of List.
                let mut theirs = vec![];
                for o in h.options_iterator() {
                    use etherparse::TcpOptionElement as E;
                    match o.unwrap() {
                        E::Noop => {}
                        E::MaximumSegmentSize(m) => theirs.push(TcpOption::MaxSegmentSize(m)),
                        E::WindowScale(s) => theirs.push(TcpOption::WindowScale(s)),
                        E::SelectiveAcknowledgementPermitted => theirs.push(TcpOption::SackPermitted),
                        E::SelectiveAcknowledgement(first, rest) => {
                            let mut s = SackBlocks::EMPTY;
                            s.push(first.0, first.1);
                            for (l, r) in rest.into_iter().flatten() {
                                s.push(l, r);
                            }
                            theirs.push(TcpOption::Sack(s));
                        }
                        E::Timestamp(a, b) => theirs.push(TcpOption::Timestamps { tsval: a, tsecr: b }),
                    }
                }
                let mut mine = vec![];
                for o in p.options_iter() {
                    match o.unwrap() {
                        TcpOption::EndOfList => break,
                        TcpOption::NoOperation => {}
                        o => mine.push(o),
                    }
                }
                prop_assert_eq!(theirs, mine);
                let calc = match (src_ip, dst_ip) {
                    (IpAddr::V4(s), IpAddr::V4(d)) => h.calc_checksum_ipv4_raw(s.octets(), d.octets(), p.payload()).unwrap(),
                    (IpAddr::V6(s), IpAddr::V6(d)) => h.calc_checksum_ipv6_raw(s.octets(), d.octets(), p.payload()).unwrap(),
                    _ => unreachable!(),
                };
                prop_assert_eq!(calc == h.checksum, p.verify_checksum(&src_ip, &dst_ip));
                prop_assert_eq!(ep.payload.slice(), p.payload());
            }
            other => panic!("etherparse transport {other:?}"),
        }
        let l4_corrupted = matches!(corrupt, Corrupt::L4Checksum)
            || matches!((corrupt, ip), (Corrupt::IpChecksum, IpRepr::V6(_)));
        let ok = match l4 {
            L4::Udp(..) => udp::Packet::new_checked(l4_bytes).unwrap().verify_checksum(&src_ip, &dst_ip),
            L4::Tcp(_) => tcp::Packet::new_checked(l4_bytes).unwrap().verify_checksum(&src_ip, &dst_ip),
        };
        // A flipped checksum byte can only still verify for UDP/IPv4 landing on "no checksum".
        if !(l4_corrupted && matches!(l4, L4::Udp(..)) && src_ip.is_ipv4() && buf[l4_off + 6] == 0 && buf[l4_off + 7] == 0) {
            prop_assert_eq!(ok, !l4_corrupted);
        }
    }
}

// The other direction: etherparse writes the frame, we read it.

fn ep_tcp_options(r: &tcp::Repr) -> Vec<etherparse::TcpOptionElement> {
    use etherparse::TcpOptionElement as E;
    let mut v = vec![];
    if let Some(m) = r.max_seg_size {
        v.push(E::MaximumSegmentSize(m));
    }
    if let Some(s) = r.window_scale {
        v.push(E::WindowScale(s));
    }
    if r.sack_permitted {
        v.push(E::SelectiveAcknowledgementPermitted);
    }
    if let Some((a, b)) = r.timestamps {
        v.push(E::Timestamp(a, b));
    }
    if let Some((&first, rest)) = r.sack_ranges.as_slice().split_first() {
        let mut more = [None; 3];
        for (m, &b) in more.iter_mut().zip(rest) {
            *m = Some(b);
        }
        v.push(E::SelectiveAcknowledgement(first, more));
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn etherparse_written_frames_read_back(
        src in mac(), dst in mac(), tag in proptest::option::of((0u8..8, any::<bool>(), 0u16..4096)),
        ip in ip_repr(), l4 in l4(), payload in proptest::collection::vec(any::<u8>(), 0..100),
    ) {
        use etherparse::{EtherType as EpEt, Ethernet2Header, IpNumber, SingleVlanHeader, TcpHeader, UdpHeader};

        let ip_type = match ip { IpRepr::V4(_) => EpEt::IPV4, IpRepr::V6(_) => EpEt::IPV6 };
        let eth = Ethernet2Header {
            source: src.0,
            destination: dst.0,
            ether_type: if tag.is_some() { EpEt::VLAN_TAGGED_FRAME } else { ip_type },
        };
        let mut frame = eth.to_bytes().to_vec();
        if let Some((pcp, dei, vid)) = tag {
            let v = SingleVlanHeader {
                pcp: pcp.try_into().unwrap(),
                drop_eligible_indicator: dei,
                vlan_id: vid.try_into().unwrap(),
                ether_type: ip_type,
            };
            frame.extend_from_slice(&v.to_bytes());
        }
        let ip_off = frame.len();

        // L4 header bytes need the IP header for the checksum; build L4 first without it.
        let proto = if matches!(l4, L4::Udp(..)) { IpNumber::UDP } else { IpNumber::TCP };
        let mut tcp_hdr = None;
        let l4_hdr_len = match &l4 {
            L4::Udp(..) => 8,
            L4::Tcp(t) => {
                let mut h = TcpHeader::new(t.src_port, t.dst_port, t.seq_number, t.window_len);
                h.acknowledgment_number = t.ack_number;
                let f = t.flags;
                h.fin = f.contains(Flags::FIN);
                h.syn = f.contains(Flags::SYN);
                h.rst = f.contains(Flags::RST);
                h.psh = f.contains(Flags::PSH);
                h.ack = f.contains(Flags::ACK);
                h.urg = f.contains(Flags::URG);
                h.ece = f.contains(Flags::ECE);
                h.cwr = f.contains(Flags::CWR);
                h.ns = f.contains(Flags::NS);
                h.urgent_pointer = t.urgent_at;
                if h.set_options(&ep_tcp_options(t)).is_err() {
                    // Too many options for 40 bytes: keep the fixed ones only.
                    let mut t2 = *t;
                    t2.sack_ranges = SackBlocks::EMPTY;
                    h.set_options(&ep_tcp_options(&t2)).unwrap();
                }
                let n = h.header_len();
                tcp_hdr = Some(h);
                n
            }
        };
        let l4_len = l4_hdr_len + payload.len();
        let (src_ip, dst_ip): (IpAddr, IpAddr) = match ip {
            IpRepr::V4(r) => {
                let mut h = etherparse::Ipv4Header::new(0, r.hop_limit, proto, r.src_addr.octets(), r.dst_addr.octets()).unwrap();
                h.dscp = r.dscp.try_into().unwrap();
                h.ecn = r.ecn.try_into().unwrap();
                h.identification = r.ident;
                h.dont_fragment = r.dont_frag;
                h.options = r.options().try_into().unwrap();
                h.set_payload_len(l4_len).unwrap();
                h.header_checksum = h.calc_header_checksum();
                frame.extend_from_slice(&h.to_bytes());
                (r.src_addr.into(), r.dst_addr.into())
            }
            IpRepr::V6(r) => {
                let mut h = etherparse::Ipv6Header {
                    traffic_class: r.traffic_class,
                    flow_label: r.flow_label.try_into().unwrap(),
                    payload_length: 0,
                    next_header: proto,
                    hop_limit: r.hop_limit,
                    source: r.src_addr.octets(),
                    destination: r.dst_addr.octets(),
                };
                h.set_payload_length(l4_len).unwrap();
                frame.extend_from_slice(&h.to_bytes());
                (r.src_addr.into(), r.dst_addr.into())
            }
        };
        let l4_off = frame.len();
        match (&l4, tcp_hdr) {
            (L4::Udp(sp, dp), _) => {
                let h = match (src_ip, dst_ip) {
                    (IpAddr::V4(s), IpAddr::V4(d)) => {
                        let mut h = UdpHeader::without_ipv4_checksum(*sp, *dp, payload.len()).unwrap();
                        h.checksum = h.calc_checksum_ipv4_raw(s.octets(), d.octets(), &payload).unwrap();
                        h
                    }
                    (IpAddr::V6(s), IpAddr::V6(d)) => {
                        let mut h = UdpHeader::without_ipv4_checksum(*sp, *dp, payload.len()).unwrap();
                        h.checksum = h.calc_checksum_ipv6_raw(s.octets(), d.octets(), &payload).unwrap();
                        h
                    }
                    _ => unreachable!(),
                };
                frame.extend_from_slice(&h.to_bytes());
            }
            (L4::Tcp(_), Some(mut h)) => {
                h.checksum = match (src_ip, dst_ip) {
                    (IpAddr::V4(s), IpAddr::V4(d)) => h.calc_checksum_ipv4_raw(s.octets(), d.octets(), &payload).unwrap(),
                    (IpAddr::V6(s), IpAddr::V6(d)) => h.calc_checksum_ipv6_raw(s.octets(), d.octets(), &payload).unwrap(),
                    _ => unreachable!(),
                };
                frame.extend_from_slice(&h.to_bytes());
            }
            _ => unreachable!(),
        }
        frame.extend_from_slice(&payload);

        // Read it back with our parsers.
        let f = ethernet::Frame::new_checked(&frame[..]).unwrap();
        prop_assert_eq!(ethernet::Repr::parse(&f).unwrap().src_addr, src);
        prop_assert_eq!(f.dst_addr(), dst);
        let walk = f.vlans().unwrap();
        prop_assert_eq!(ethernet::HEADER_LEN + walk.payload_offset, ip_off);
        match (tag, walk.outer()) {
            (None, None) => {}
            (Some((pcp, dei, vid)), Some(o)) => prop_assert_eq!((pcp, dei, vid), (o.pcp, o.dei, o.vid)),
            other => prop_assert!(false, "tags differ: {:?}", other),
        }
        match ip {
            IpRepr::V4(want) => {
                let p = ipv4::Packet::new_checked(&frame[ip_off..]).unwrap();
                prop_assert!(p.verify_checksum());
                let r = ipv4::Repr::parse(&p).unwrap();
                prop_assert_eq!((r.src_addr, r.dst_addr, r.next_header.0), (want.src_addr, want.dst_addr, proto.0));
                prop_assert_eq!((r.dscp, r.ecn, r.ident, r.dont_frag, r.hop_limit), (want.dscp, want.ecn, want.ident, want.dont_frag, want.hop_limit));
                prop_assert_eq!(r.options(), want.options());
                prop_assert_eq!(r.payload_len, l4_len);
            }
            IpRepr::V6(want) => {
                let p = ipv6::Packet::new_checked(&frame[ip_off..]).unwrap();
                let r = ipv6::Repr::parse(&p).unwrap();
                prop_assert_eq!(r, ipv6::Repr { next_header: IpProtocol(proto.0), payload_len: l4_len, ..want });
            }
        }
        match &l4 {
            L4::Udp(sp, dp) => {
                let p = udp::Packet::new_checked(&frame[l4_off..]).unwrap();
                prop_assert!(p.verify_checksum(&src_ip, &dst_ip));
                prop_assert_eq!(udp::Repr::parse(&p).unwrap(), udp::Repr { src_port: *sp, dst_port: *dp, payload_len: payload.len() });
                prop_assert_eq!(p.payload(), &payload[..]);
            }
            L4::Tcp(t) => {
                let p = tcp::Packet::new_checked(&frame[l4_off..]).unwrap();
                prop_assert!(p.verify_checksum(&src_ip, &dst_ip));
                let r = tcp::Repr::parse(&p).unwrap();
                let mut want = *t;
                want.payload_len = payload.len();
                if r.sack_ranges.is_empty() {
                    want.sack_ranges = SackBlocks::EMPTY;
                }
                prop_assert_eq!(r, want);
                prop_assert_eq!(p.payload(), &payload[..]);
            }
        }
    }
}

proptest! {
    /// NAT-style rewrite (address in the pseudo-header, both ports) with incremental checksum
    /// updates gives a segment that verifies under the new addresses, as a full recompute would.
    #[test]
    fn incremental_rewrite_verifies(
        v6 in any::<bool>(), a in any::<[u8; 16]>(), b in any::<[u8; 16]>(), c in any::<[u8; 16]>(),
        t in tcp_repr(), sp in any::<u16>(), dp in any::<u16>(),
        payload in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let addr = |x: [u8; 16]| -> IpAddr {
            if v6 { Ipv6Addr::from(x).into() } else { Ipv4Addr::new(x[0], x[1], x[2], x[3]).into() }
        };
        let (src, dst, new_src) = (addr(a), addr(b), addr(c));

        // UDP.
        let r = udp::Repr { src_port: t.src_port, dst_port: t.dst_port, payload_len: payload.len() };
        let mut buf = vec![0u8; r.buffer_len()];
        let mut p = udp::Packet::new_unchecked(&mut buf[..]);
        r.emit(&mut p);
        p.payload_mut().copy_from_slice(&payload);
        p.fill_checksum(&src, &dst);
        p.adjust_checksum_for_addr(&src, &new_src);
        p.rewrite_src_port(sp);
        p.rewrite_dst_port(dp);
        prop_assert!(p.checksum() != 0);
        prop_assert!(p.verify_checksum(&new_src, &dst));
        prop_assert_eq!((p.src_port(), p.dst_port()), (sp, dp));
        // A UDP/IPv4 datagram without a checksum stays without one.
        if !v6 {
            p.set_checksum(0);
            p.rewrite_src_port(sp ^ 1);
            prop_assert_eq!(p.checksum(), 0);
        }

        // TCP.
        let mut t = t;
        t.payload_len = payload.len();
        let mut buf = vec![0u8; t.buffer_len()];
        let mut p = tcp::Packet::new_unchecked(&mut buf[..]);
        t.emit(&mut p);
        p.payload_mut().copy_from_slice(&payload);
        p.fill_checksum(&src, &dst);
        p.adjust_checksum_for_addr(&dst, &new_src);
        p.rewrite_src_port(sp);
        p.rewrite_dst_port(dp);
        prop_assert!(p.verify_checksum(&src, &new_src));
        prop_assert_eq!((p.src_port(), p.dst_port()), (sp, dp));
    }
}

/// One extension header to build: its kind and its length byte.
fn ext_chain() -> impl Strategy<Value = (Vec<(u8, u8)>, u8, Vec<u8>)> {
    (
        any::<bool>(),
        proptest::collection::vec(
            (prop_oneof![Just(43u8), Just(44), Just(51), Just(60)], 0u8..4),
            0..=7,
        ),
        prop_oneof![Just(6u8), Just(17), Just(58), Just(59)],
        proptest::collection::vec(any::<u8>(), 1..256),
    )
        .prop_map(|(hbh, mut chain, last, fill)| {
            if hbh {
                chain.insert(0, (0, 1));
                chain.truncate(ipv6::MAX_EXT_HEADERS);
            }
            (chain, last, fill)
        })
}

proptest! {
    /// Extension-header skipping agrees with etherparse on where the upper layer starts.
    #[test]
    fn ipv6_extensions_match_etherparse((chain, last, fill) in ext_chain(), cut in any::<prop::sample::Index>()) {
        let mut buf = vec![];
        for (i, &(kind, len_byte)) in chain.iter().enumerate() {
            let next = chain.get(i + 1).map_or(last, |c| c.0);
            let len = match kind {
                44 => 8,
                51 => (usize::from(len_byte) + 2) * 4,
                _ => (usize::from(len_byte) + 1) * 8,
            };
            let start = buf.len();
            buf.extend(fill.iter().cycle().take(len));
            buf[start] = next;
            buf[start + 1] = if kind == 44 { buf[start + 1] } else { len_byte };
        }
        let body = buf.len();
        buf.extend_from_slice(&[0xaa; 8]);
        let first = chain.first().map_or(last, |c| c.0);

        let ours = ipv6::walk_extensions(IpProtocol(first), &buf).unwrap();
        let (nh, rest) = etherparse::Ipv6Header::skip_all_header_extensions_in_slice(&buf, etherparse::IpNumber(first)).unwrap();
        prop_assert_eq!(ours.next_header.0, nh.0);
        prop_assert_eq!(ours.offset, buf.len() - rest.len());
        prop_assert_eq!(ours.offset, body);
        prop_assert_eq!(usize::from(ours.count), chain.len());
        prop_assert_eq!(ours.fragment.is_some(), chain.iter().any(|c| c.0 == 44));

        // Cut anywhere inside the chain: both refuse, ours with Truncated.
        if body > 0 {
            let at = cut.index(body);
            let e = ipv6::walk_extensions(IpProtocol(first), &buf[..at]).unwrap_err();
            prop_assert!(matches!(e, snic_wire::Error::Truncated { .. }), "{:?}", e);
            prop_assert!(etherparse::Ipv6Header::skip_all_header_extensions_in_slice(&buf[..at], etherparse::IpNumber(first)).is_err());
        }
    }
}
