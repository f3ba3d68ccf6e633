//! The neighbour table, driven as two NICs on one link with virtual time: A resolves B through
//! ARP or Neighbor Discovery, each side's frames handed to the other's `handle_frame`. Frames
//! are checked with etherparse (a decoder we did not write) or byte by byte; every counter
//! check compares the whole `NeighCounters`, so a counter that moves by mistake fails it.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::time::Duration;

use etherparse::{Ethernet2Slice, NetSlice, PacketBuilder, SlicedPacket, TransportSlice};
use proptest::prelude::*;
use snic_nic::neigh::{Entry, NeighConfig, NeighCounters, Neighbours, Resolve, State};
use snic_time::Instant;
use snic_wire::ethernet::EthernetAddress;
use snic_wire::{icmpv6, ndisc};

const MAC_A: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x0a]);
const MAC_B: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x0b]);
const MAC_C: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x0c]);

const A4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const C4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 3);
const A6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xa);
const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xb);
const C6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xc);

const T0: Instant = Instant::from_secs(100);

fn at(ms: u64) -> Instant {
    T0 + Duration::from_millis(ms)
}

fn cfg() -> NeighConfig {
    NeighConfig {
        capacity: 8,
        queue_per_entry: 4,
        solicit_tries: 3,
        retry_interval: Duration::from_secs(1),
        reachable: Duration::from_secs(30),
        failed_hold: Duration::from_secs(2),
    }
}

fn nic(mac: EthernetAddress, v4: Ipv4Addr, v6: Ipv6Addr) -> Neighbours {
    Neighbours::new(cfg(), mac, &[IpAddr::V4(v4), IpAddr::V6(v6)])
}

fn pair() -> (Neighbours, Neighbours) {
    (nic(MAC_A, A4, A6), nic(MAC_B, B4, B6))
}

/// Every frame `n` has to send, each written into a 2048-byte buffer.
fn drain(n: &mut Neighbours, now: Instant) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 2048];
    while let Some(len) = n.poll_transmit(now, &mut buf) {
        out.push(buf[..len].to_vec());
        assert!(out.len() <= 1000, "poll_transmit does not run dry");
    }
    out
}

fn the_one(n: &mut Neighbours, now: Instant) -> Vec<u8> {
    let mut f = drain(n, now);
    assert_eq!(f.len(), 1, "one frame expected, got {f:02x?}");
    f.pop().unwrap()
}

/// A UDP packet (IP header first, no Ethernet header) from `src` to `dst`.
fn udp(src: IpAddr, dst: IpAddr, payload: &[u8]) -> Vec<u8> {
    let b = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => PacketBuilder::ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => PacketBuilder::ipv6(s.octets(), d.octets(), 64),
        _ => panic!("mixed families"),
    };
    let b = b.udp(4000, 5000);
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).unwrap();
    v
}

/// Ethernet dst, src and EtherType of a frame, read by etherparse.
fn eth(frame: &[u8]) -> ([u8; 6], [u8; 6], u16) {
    let e = Ethernet2Slice::from_slice_without_fcs(frame).unwrap();
    (e.destination(), e.source(), e.ether_type().0)
}

/// The ARP fields (op, sha, spa, tha, tpa) of an Ethernet/IPv4 ARP frame, checked by hand
/// (etherparse 0.16 has no ARP decoder).
fn arp(frame: &[u8]) -> (u16, [u8; 6], Ipv4Addr, [u8; 6], Ipv4Addr) {
    assert_eq!(eth(frame).2, 0x0806);
    let a = &frame[14..];
    assert_eq!(a.len(), 28, "an Ethernet/IPv4 ARP packet");
    assert_eq!(&a[..6], &[0, 1, 0x08, 0x00, 6, 4], "htype, ptype, hlen, plen");
    let ip = |b: &[u8]| Ipv4Addr::new(b[0], b[1], b[2], b[3]);
    let mac = |b: &[u8]| <[u8; 6]>::try_from(b).unwrap();
    (
        u16::from_be_bytes([a[6], a[7]]),
        mac(&a[8..14]),
        ip(&a[14..18]),
        mac(&a[18..24]),
        ip(&a[24..28]),
    )
}

/// An ND message read by etherparse: IPv6 src, dst, hop limit, then the ICMPv6 type, code,
/// flags byte, target and first option (type, MAC); the checksum must verify.
struct Nd {
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    kind: u8,
    code: u8,
    flags: u8,
    target: Ipv6Addr,
    option: Option<(u8, [u8; 6])>,
}

fn nd(frame: &[u8]) -> Nd {
    assert_eq!(eth(frame).2, 0x86dd);
    let p = SlicedPacket::from_ethernet(frame).unwrap();
    let Some(NetSlice::Ipv6(ip)) = &p.net else { panic!("not IPv6: {:?}", p.net) };
    let h = ip.header();
    let Some(TransportSlice::Icmpv6(icmp)) = &p.transport else { panic!("not ICMPv6") };
    assert!(icmp.is_checksum_valid(h.source(), h.destination()), "ICMPv6 checksum");
    let body = icmp.payload();
    assert!(body.len() >= 16);
    let target = Ipv6Addr::from(<[u8; 16]>::try_from(&body[..16]).unwrap());
    let opts = &body[16..];
    let option = (opts.len() >= 8).then(|| {
        assert_eq!(opts[1], 1, "option length in 8-byte units");
        (opts[0], <[u8; 6]>::try_from(&opts[2..8]).unwrap())
    });
    Nd {
        src: h.source_addr(),
        dst: h.destination_addr(),
        hop_limit: h.hop_limit(),
        kind: icmp.type_u8(),
        code: icmp.code_u8(),
        flags: icmp.bytes5to8()[0],
        target,
        option,
    }
}

fn entry(n: &Neighbours, now: Instant, ip: impl Into<IpAddr>) -> Option<Entry> {
    n.entry(now, ip.into())
}

#[test]
fn arp_round_trip_releases_the_queued_packet_framed_with_the_peers_mac() {
    let (mut a, mut b) = pair();
    let pkt = udp(A4.into(), B4.into(), b"hello over arp");
    assert_eq!(a.resolve(T0, B4.into(), A4.into(), &pkt), Resolve::Queued);
    assert_eq!(*a.counters(), NeighCounters { solicits_sent: 1, queued: 1, ..Default::default() });

    let req = the_one(&mut a, T0);
    assert_eq!(eth(&req), ([0xff; 6], MAC_A.0, 0x0806));
    assert_eq!(arp(&req), (1, MAC_A.0, A4, [0; 6], B4));

    b.handle_frame(at(1), &req);
    assert_eq!(*b.counters(), NeighCounters { answers_sent: 1, learned: 1, ..Default::default() });
    // Learned from a request: known, but not confirmed (RFC 4861 7.2.3's rule, Linux's for ARP).
    let e = entry(&b, at(1), A4).unwrap();
    assert_eq!((e.mac, e.state), (Some(MAC_A), State::Stale));
    let rep = the_one(&mut b, at(1));
    assert_eq!(eth(&rep), (MAC_A.0, MAC_B.0, 0x0806));
    assert_eq!(arp(&rep), (2, MAC_B.0, B4, MAC_A.0, A4));

    a.handle_frame(at(2), &rep);
    let want = NeighCounters {
        solicits_sent: 1,
        queued: 1,
        learned: 1,
        released: 1,
        ..Default::default()
    };
    assert_eq!(*a.counters(), want);
    let out = the_one(&mut a, at(2));
    assert_eq!(eth(&out), (MAC_B.0, MAC_A.0, 0x0800));
    assert_eq!(&out[14..], &pkt[..], "the packet, unchanged after the Ethernet header");
    let p = SlicedPacket::from_ethernet(&out).unwrap();
    let Some(TransportSlice::Udp(u)) = p.transport else { panic!("not UDP") };
    assert_eq!(u.payload(), b"hello over arp");

    assert_eq!(a.resolve(at(3), B4.into(), A4.into(), &pkt), Resolve::Ready(MAC_B));
    assert_eq!(*a.counters(), want, "a ready packet moves no counter");
    let e = entry(&a, at(3), B4).unwrap();
    assert_eq!((e.mac, e.state, e.queued), (Some(MAC_B), State::Reachable, 0));
    assert_eq!(a.poll_timeout(), None, "a reachable entry needs no timer");
    assert!(drain(&mut a, at(3)).is_empty());
}

#[test]
fn nd_round_trip_releases_the_queued_packet_framed_with_the_peers_mac() {
    let (mut a, mut b) = pair();
    let pkt = udp(A6.into(), B6.into(), b"hello over nd");
    assert_eq!(a.resolve(T0, B6.into(), A6.into(), &pkt), Resolve::Queued);
    assert_eq!(*a.counters(), NeighCounters { solicits_sent: 1, queued: 1, ..Default::default() });

    let ns = the_one(&mut a, T0);
    let group = ndisc::solicited_node(B6);
    assert_eq!(group, "ff02::1:ff00:b".parse::<Ipv6Addr>().unwrap());
    assert_eq!(eth(&ns), ([0x33, 0x33, 0xff, 0, 0, 0x0b], MAC_A.0, 0x86dd));
    let m = nd(&ns);
    assert_eq!((m.src, m.dst, m.hop_limit), (A6, group, 255));
    assert_eq!((m.kind, m.code, m.flags, m.target), (135, 0, 0, B6));
    assert_eq!(m.option, Some((1, MAC_A.0)), "source link-layer address option");

    b.handle_frame(at(1), &ns);
    assert_eq!(*b.counters(), NeighCounters { answers_sent: 1, learned: 1, ..Default::default() });
    let e = entry(&b, at(1), A6).unwrap();
    assert_eq!((e.mac, e.state), (Some(MAC_A), State::Stale));
    let na = the_one(&mut b, at(1));
    assert_eq!(eth(&na), (MAC_A.0, MAC_B.0, 0x86dd));
    let m = nd(&na);
    assert_eq!((m.src, m.dst, m.hop_limit), (B6, A6, 255));
    let so = ndisc::FLAG_SOLICITED | ndisc::FLAG_OVERRIDE;
    assert_eq!((m.kind, m.code, m.flags, m.target), (136, 0, so, B6));
    assert_eq!(m.option, Some((2, MAC_B.0)), "target link-layer address option");

    a.handle_frame(at(2), &na);
    let want = NeighCounters {
        solicits_sent: 1,
        queued: 1,
        learned: 1,
        released: 1,
        ..Default::default()
    };
    assert_eq!(*a.counters(), want);
    let out = the_one(&mut a, at(2));
    assert_eq!(eth(&out), (MAC_B.0, MAC_A.0, 0x86dd));
    assert_eq!(&out[14..], &pkt[..]);
    let p = SlicedPacket::from_ethernet(&out).unwrap();
    let Some(TransportSlice::Udp(u)) = p.transport else { panic!("not UDP") };
    assert_eq!(u.payload(), b"hello over nd");
    assert_eq!(a.resolve(at(3), B6.into(), A6.into(), &pkt), Resolve::Ready(MAC_B));
    assert_eq!(entry(&a, at(3), B6).unwrap().state, State::Reachable);
}

#[test]
fn queued_packets_leave_in_order_after_the_answer() {
    let (mut a, mut b) = pair();
    let pkts: Vec<Vec<u8>> = (0..3u8).map(|i| udp(A4.into(), B4.into(), &[i; 5])).collect();
    for p in &pkts {
        assert_eq!(a.resolve(T0, B4.into(), A4.into(), p), Resolve::Queued);
    }
    assert_eq!(entry(&a, T0, B4).unwrap().queued, 3);
    assert_eq!(a.held_packets(), 3);
    let req = the_one(&mut a, T0);
    b.handle_frame(T0, &req);
    a.handle_frame(T0, &the_one(&mut b, T0));
    let out = drain(&mut a, T0);
    assert_eq!(out.len(), 3);
    for (f, p) in out.iter().zip(&pkts) {
        assert_eq!(&f[14..], &p[..]);
    }
    assert_eq!(a.held_packets(), 0);
    let want = NeighCounters {
        solicits_sent: 1,
        queued: 3,
        learned: 1,
        released: 3,
        ..Default::default()
    };
    assert_eq!(*a.counters(), want);
}

#[test]
fn retries_every_retry_interval_then_fails_and_drops_every_queued_packet() {
    for (dst, src) in [(IpAddr::V4(B4), IpAddr::V4(A4)), (IpAddr::V6(B6), IpAddr::V6(A6))] {
        let (mut a, _) = pair();
        let pkt = udp(src, dst, b"x");
        for _ in 0..3 {
            assert_eq!(a.resolve(T0, dst, src, &pkt), Resolve::Queued);
        }
        let first = the_one(&mut a, T0);
        assert_eq!(a.poll_timeout(), Some(at(1000)));
        a.handle_timeout(at(999));
        assert!(drain(&mut a, at(999)).is_empty(), "no retry before retry_interval");
        a.handle_timeout(at(1000));
        assert_eq!(the_one(&mut a, at(1000)), first, "the retry is the same solicitation");
        assert_eq!(a.poll_timeout(), Some(at(2000)));
        a.handle_timeout(at(2000));
        assert_eq!(the_one(&mut a, at(2000)), first);
        assert_eq!(entry(&a, at(2000), dst).unwrap().tries, 3);
        let want = NeighCounters { solicits_sent: 3, queued: 3, ..Default::default() };
        assert_eq!(*a.counters(), want, "3 tries sent, not failed yet");
        // The last try had its retry_interval to be answered; then the resolution fails.
        assert_eq!(a.poll_timeout(), Some(at(3000)));
        a.handle_timeout(at(3000));
        assert!(drain(&mut a, at(3000)).is_empty(), "no fourth solicitation, no packet");
        let want = NeighCounters {
            solicits_sent: 3,
            queued: 3,
            failed: 1,
            drop_unresolved: 3,
            ..Default::default()
        };
        assert_eq!(*a.counters(), want, "{dst}: drop_unresolved equals the queued count");
        let e = entry(&a, at(3000), dst).unwrap();
        assert_eq!((e.state, e.mac, e.queued), (State::Failed, None, 0));
        assert_eq!(a.held_packets(), 0);
    }
}

#[test]
fn a_failed_entry_drops_for_failed_hold_then_a_new_resolution_starts() {
    let (mut a, _) = pair();
    let pkt = udp(A4.into(), B4.into(), b"x");
    assert_eq!(a.resolve(T0, B4.into(), A4.into(), &pkt), Resolve::Queued);
    for s in 1..=3 {
        a.handle_timeout(at(s * 1000));
    }
    drain(&mut a, at(3000));
    let failed = NeighCounters {
        solicits_sent: 3,
        queued: 1,
        failed: 1,
        drop_unresolved: 1,
        ..Default::default()
    };
    assert_eq!(*a.counters(), failed);
    assert_eq!(a.poll_timeout(), Some(at(5000)), "failed at 3 s, held 2 s");

    assert_eq!(a.resolve(at(4999), B4.into(), A4.into(), &pkt), Resolve::Dropped);
    assert_eq!(*a.counters(), NeighCounters { drop_unresolved: 2, ..failed });
    assert!(drain(&mut a, at(4999)).is_empty(), "no solicitation during the hold");

    // The hold ends: the entry vanishes, and the next packet starts over.
    a.handle_timeout(at(5000));
    assert_eq!(entry(&a, at(5000), B4), None);
    assert_eq!(a.poll_timeout(), None);
    assert_eq!(a.resolve(at(5000), B4.into(), A4.into(), &pkt), Resolve::Queued);
    let want = NeighCounters { drop_unresolved: 2, solicits_sent: 4, queued: 2, ..failed };
    assert_eq!(*a.counters(), want);
    assert_eq!(arp(&the_one(&mut a, at(5000))).0, 1);
    assert_eq!(entry(&a, at(5000), B4).unwrap().state, State::Incomplete);
}

#[test]
fn a_failed_entry_past_its_hold_restarts_even_without_handle_timeout() {
    let (mut a, _) = pair();
    let pkt = udp(A6.into(), B6.into(), b"x");
    a.resolve(T0, B6.into(), A6.into(), &pkt);
    for s in 1..=3 {
        a.handle_timeout(at(s * 1000));
    }
    assert_eq!(entry(&a, at(3000), B6).unwrap().state, State::Failed);
    assert_eq!(a.resolve(at(5000), B6.into(), A6.into(), &pkt), Resolve::Queued);
    assert_eq!(entry(&a, at(5000), B6).unwrap().state, State::Incomplete);
}

/// Resolve `dst` from A through B, leaving A with a reachable entry confirmed at `T0`.
fn resolved(dst: IpAddr, src: IpAddr) -> (Neighbours, Neighbours) {
    let (mut a, mut b) = pair();
    assert_eq!(a.resolve(T0, dst, src, &udp(src, dst, b"x")), Resolve::Queued);
    b.handle_frame(T0, &the_one(&mut a, T0));
    a.handle_frame(T0, &the_one(&mut b, T0));
    assert_eq!(drain(&mut a, T0).len(), 1);
    (a, b)
}

#[test]
fn a_stale_entry_is_used_and_reprobed_by_unicast_then_confirmed() {
    for (dst, src) in [(IpAddr::V4(B4), IpAddr::V4(A4)), (IpAddr::V6(B6), IpAddr::V6(A6))] {
        let (mut a, mut b) = resolved(dst, src);
        let before = *a.counters();
        let pkt = udp(src, dst, b"y");
        assert_eq!(a.resolve(at(29_999), dst, src, &pkt), Resolve::Ready(MAC_B));
        assert!(drain(&mut a, at(29_999)).is_empty(), "fresh: no probe");
        assert_eq!(entry(&a, at(30_000), dst).unwrap().state, State::Stale);
        assert_eq!(a.resolve(at(30_000), dst, src, &pkt), Resolve::Ready(MAC_B), "stale is used");
        assert_eq!(
            *a.counters(),
            NeighCounters { solicits_sent: before.solicits_sent + 1, ..before }
        );
        assert_eq!(entry(&a, at(30_000), dst).unwrap().state, State::Probe);
        let probe = the_one(&mut a, at(30_000));
        assert_eq!(eth(&probe).0, MAC_B.0, "{dst}: the probe is unicast to the known MAC");
        match dst {
            IpAddr::V4(_) => assert_eq!(arp(&probe), (1, MAC_A.0, A4, [0; 6], B4)),
            IpAddr::V6(_) => {
                let m = nd(&probe);
                assert_eq!((m.src, m.dst, m.kind, m.target), (A6, B6, 135, B6), "unicast NS");
            }
        }
        // Another packet while probing: used, no second probe.
        assert_eq!(a.resolve(at(30_001), dst, src, &pkt), Resolve::Ready(MAC_B));
        assert!(drain(&mut a, at(30_001)).is_empty());

        b.handle_frame(at(30_002), &probe);
        a.handle_frame(at(30_003), &the_one(&mut b, at(30_002)));
        let e = entry(&a, at(30_003), dst).unwrap();
        assert_eq!((e.state, e.mac), (State::Reachable, Some(MAC_B)));
        let want = NeighCounters {
            solicits_sent: before.solicits_sent + 1,
            learned: before.learned + 1,
            ..before
        };
        assert_eq!(*a.counters(), want);
        assert_eq!(a.poll_timeout(), None);
    }
}

#[test]
fn a_stale_probe_without_answer_fails_the_entry() {
    let (mut a, _) = resolved(B4.into(), A4.into());
    let before = *a.counters();
    let pkt = udp(A4.into(), B4.into(), b"y");
    assert_eq!(a.resolve(at(40_000), B4.into(), A4.into(), &pkt), Resolve::Ready(MAC_B));
    a.handle_timeout(at(41_000));
    a.handle_timeout(at(42_000));
    let probes = drain(&mut a, at(42_000));
    assert_eq!(probes.len(), 3);
    assert!(probes.iter().all(|f| eth(f).0 == MAC_B.0), "every probe try is unicast");
    assert_eq!(a.resolve(at(42_500), B4.into(), A4.into(), &pkt), Resolve::Ready(MAC_B));
    a.handle_timeout(at(43_000));
    let want = NeighCounters { solicits_sent: before.solicits_sent + 3, failed: 1, ..before };
    assert_eq!(*a.counters(), want, "no packet was queued, so none is dropped");
    assert_eq!(entry(&a, at(43_000), B4).unwrap().state, State::Failed);
    assert_eq!(a.resolve(at(43_001), B4.into(), A4.into(), &pkt), Resolve::Dropped);
    assert_eq!(*a.counters(), NeighCounters { drop_unresolved: 1, ..want });
}

#[test]
fn the_queue_per_entry_bound_drops_and_counts_the_overflow() {
    let (mut a, _) = pair();
    let pkt = udp(A4.into(), B4.into(), b"x");
    for _ in 0..4 {
        assert_eq!(a.resolve(T0, B4.into(), A4.into(), &pkt), Resolve::Queued);
    }
    assert_eq!(a.resolve(T0, B4.into(), A4.into(), &pkt), Resolve::Dropped);
    assert_eq!(a.resolve(at(1), B4.into(), A4.into(), &pkt), Resolve::Dropped);
    let want =
        NeighCounters { solicits_sent: 1, queued: 4, drop_queue_full: 2, ..Default::default() };
    assert_eq!(*a.counters(), want);
    assert_eq!(entry(&a, T0, B4).unwrap().queued, 4);
    assert_eq!(drain(&mut a, T0).len(), 1, "one solicitation, not one per packet");
}

#[test]
fn a_table_full_of_pending_entries_drops_then_evicts_the_oldest_resolved() {
    let mut a = Neighbours::new(
        NeighConfig { capacity: 2, ..cfg() },
        MAC_A,
        &[IpAddr::V4(A4), IpAddr::V6(A6)],
    );
    let mut b = nic(MAC_B, B4, B6);
    let d4 = Ipv4Addr::new(10, 0, 0, 4);
    let pkt = udp(A4.into(), B4.into(), b"x");
    assert_eq!(a.resolve(T0, B4.into(), A4.into(), &pkt), Resolve::Queued);
    assert_eq!(a.resolve(T0, C4.into(), A4.into(), &pkt), Resolve::Queued);
    assert_eq!(a.resolve(T0, d4.into(), A4.into(), &pkt), Resolve::Dropped);
    let want =
        NeighCounters { solicits_sent: 2, queued: 2, drop_table_full: 1, ..Default::default() };
    assert_eq!(*a.counters(), want, "no entry, no solicitation for the dropped one");
    assert_eq!(a.len(), 2);
    let reqs = drain(&mut a, T0);
    assert_eq!(reqs.len(), 2);
    assert_eq!(arp(&reqs[0]).4, B4);
    // B answers: its entry is the only one not pending, so the next new one evicts it.
    b.handle_frame(T0, &reqs[0]);
    a.handle_frame(at(1), &the_one(&mut b, T0));
    assert_eq!(drain(&mut a, at(1)).len(), 1);
    assert_eq!(a.resolve(at(2), d4.into(), A4.into(), &pkt), Resolve::Queued);
    let ips: Vec<IpAddr> = a.entries(at(2)).map(|e| e.ip).collect();
    assert_eq!(ips, [IpAddr::V4(C4), IpAddr::V4(d4)]);
    let want = NeighCounters {
        solicits_sent: 3,
        queued: 3,
        drop_table_full: 1,
        learned: 1,
        released: 1,
        ..Default::default()
    };
    assert_eq!(*a.counters(), want, "evicting a resolved entry drops nothing");
}

#[test]
fn the_total_of_held_packets_is_bounded_by_capacity_times_queue() {
    let mut a = Neighbours::new(
        NeighConfig { capacity: 2, queue_per_entry: 2, ..cfg() },
        MAC_A,
        &[IpAddr::V4(A4)],
    );
    let mut b = nic(MAC_B, B4, B6);
    let pkt = udp(A4.into(), B4.into(), b"x");
    for _ in 0..2 {
        a.resolve(T0, B4.into(), A4.into(), &pkt);
    }
    b.handle_frame(T0, &the_one(&mut a, T0));
    a.handle_frame(T0, &the_one(&mut b, T0));
    // Two released packets wait in the transmit queue (not polled), two more are queued.
    assert_eq!(a.resolve(T0, C4.into(), A4.into(), &pkt), Resolve::Queued);
    assert_eq!(a.resolve(T0, C4.into(), A4.into(), &pkt), Resolve::Queued);
    assert_eq!(a.held_packets(), 4);
    assert_eq!(a.packet_limit(), 4);
    // A third address: its entry evicts B4's (resolved) and solicits, but the packet finds
    // no room in the total.
    let d4 = Ipv4Addr::new(10, 0, 0, 4);
    assert_eq!(a.resolve(T0, d4.into(), A4.into(), &pkt), Resolve::Dropped);
    let want = NeighCounters {
        solicits_sent: 3,
        queued: 4,
        learned: 1,
        released: 2,
        drop_queue_full: 1,
        ..Default::default()
    };
    assert_eq!(*a.counters(), want);
    let e = entry(&a, T0, d4).unwrap();
    assert_eq!((e.state, e.queued), (State::Incomplete, 0));
    assert_eq!(drain(&mut a, T0).len(), 4, "2 released packets, 2 solicitations");
    assert_eq!(a.held_packets(), 2, "C4's two, still queued");
    // Polling freed room: the next packet for the third address is queued.
    assert_eq!(a.resolve(T0, d4.into(), A4.into(), &pkt), Resolve::Queued);
}

#[test]
fn a_buffer_too_small_drops_that_frame_counted_and_sends_the_next() {
    let (mut a, _) = pair();
    a.resolve(T0, B4.into(), A4.into(), &udp(A4.into(), B4.into(), b"x"));
    a.resolve(T0, B6.into(), A6.into(), &udp(A6.into(), B6.into(), b"x"));
    let mut small = [0u8; 60];
    let n = a.poll_transmit(T0, &mut small).expect("the ARP request fits");
    // The ARP request (42 bytes) fits; the NS (86 bytes) does not.
    assert_eq!(n, 42);
    assert_eq!(a.poll_transmit(T0, &mut small), None);
    let want = NeighCounters { solicits_sent: 2, queued: 2, drop_too_big: 1, ..Default::default() };
    assert_eq!(*a.counters(), want);
    assert_eq!(a.poll_transmit(T0, &mut []), None);
}

#[test]
fn a_request_for_us_learns_the_sender_and_answers_even_with_the_table_full() {
    let mut b = Neighbours::new(NeighConfig { capacity: 1, ..cfg() }, MAC_B, &[B4.into()]);
    let (mut a, mut c) = (nic(MAC_A, A4, A6), nic(MAC_C, C4, C6));
    let pkt = udp(B4.into(), Ipv4Addr::new(10, 0, 0, 9).into(), b"x");
    assert_eq!(b.resolve(T0, Ipv4Addr::new(10, 0, 0, 9).into(), B4.into(), &pkt), Resolve::Queued);
    drain(&mut b, T0);
    a.resolve(T0, B4.into(), A4.into(), &[]);
    c.resolve(T0, B4.into(), C4.into(), &[]);
    b.handle_frame(T0, &the_one(&mut a, T0));
    // The only slot is pending: A's request is answered but A is not learned.
    let want = NeighCounters { solicits_sent: 1, queued: 1, answers_sent: 1, ..Default::default() };
    assert_eq!(*b.counters(), want);
    assert_eq!(entry(&b, T0, A4), None);
    assert_eq!(arp(&the_one(&mut b, T0)), (2, MAC_B.0, B4, MAC_A.0, A4));
    // A's request again once the pending entry failed: A replaces the failed entry.
    for s in 1..=3 {
        b.handle_timeout(at(s * 1000));
    }
    drain(&mut b, at(3000));
    b.handle_frame(at(3000), &the_one(&mut c, T0));
    assert_eq!(entry(&b, at(3000), C4).unwrap().mac, Some(MAC_C));
    assert_eq!(b.len(), 1);
}

#[test]
fn duplicate_address_detection_of_our_address_is_answered_to_all_nodes() {
    let (mut a, _) = pair();
    let group = ndisc::solicited_node(A6);
    let ns = ndisc::Repr::Solicit { target: A6, source_lladdr: None };
    let frame =
        nd_frame(MAC_C, ndisc::multicast_mac(group), Ipv6Addr::UNSPECIFIED, group, 255, &ns);
    a.handle_frame(T0, &frame);
    assert_eq!(*a.counters(), NeighCounters { answers_sent: 1, ..Default::default() });
    assert_eq!(a.len(), 0, "nothing learned from the unspecified address");
    let na = the_one(&mut a, T0);
    assert_eq!(eth(&na), ([0x33, 0x33, 0, 0, 0, 1], MAC_A.0, 0x86dd));
    let m = nd(&na);
    let all: Ipv6Addr = "ff02::1".parse().unwrap();
    assert_eq!((m.src, m.dst, m.hop_limit, m.kind), (A6, all, 255, 136));
    assert_eq!((m.flags, m.target, m.option), (ndisc::FLAG_OVERRIDE, A6, Some((2, MAC_A.0))));
}

/// An Ethernet + IPv6 + ND frame built with snic-wire (checksum filled).
fn nd_frame(
    eth_src: EthernetAddress,
    eth_dst: EthernetAddress,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    r: &ndisc::Repr,
) -> Vec<u8> {
    let n = r.buffer_len();
    let mut f = vec![0u8; 14 + 40 + n];
    f[..6].copy_from_slice(&eth_dst.0);
    f[6..12].copy_from_slice(&eth_src.0);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    f[14] = 0x60;
    f[18..20].copy_from_slice(&(n as u16).to_be_bytes());
    f[20] = 58;
    f[21] = hop_limit;
    f[22..38].copy_from_slice(&src.octets());
    f[38..54].copy_from_slice(&dst.octets());
    r.emit(&mut f[54..]).unwrap();
    icmpv6::Packet::new_checked(&mut f[54..]).unwrap().fill_checksum(src, dst);
    f
}

/// A's frames that B must ignore, each moving `ignored` by one and nothing else.
#[test]
fn frames_not_for_us_or_not_acceptable_are_ignored() {
    let (mut a, _) = pair();
    let mut c = nic(MAC_C, C4, C6);
    let other4 = Ipv4Addr::new(10, 0, 0, 99);
    let other6: Ipv6Addr = "fd00::99".parse().unwrap();
    // An ARP request and an NS for someone else; C is not in A's table.
    c.resolve(T0, other4.into(), C4.into(), &[]);
    c.resolve(T0, other6.into(), C6.into(), &[]);
    let frames = drain(&mut c, T0);
    let (arp_other, ns_other) = (frames[0].clone(), frames[1].clone());
    // Valid ones for A, to spoil.
    c.resolve(T0, A4.into(), C4.into(), &[]);
    c.resolve(T0, A6.into(), C6.into(), &[]);
    let frames = drain(&mut c, T0);
    let (arp_ok, ns_ok) = (frames[0].clone(), frames[1].clone());

    let mut bad: Vec<(&str, Vec<u8>)> = vec![
        ("arp for another address", arp_other),
        ("ns for another address", ns_other),
        ("empty", vec![]),
        ("runt", arp_ok[..13].to_vec()),
        ("truncated arp", arp_ok[..14 + 27].to_vec()),
        ("ipv4 udp", {
            let mut f = vec![0xff; 6];
            f.extend_from_slice(&MAC_C.0);
            f.extend_from_slice(&[0x08, 0x00]);
            f.extend_from_slice(&udp(C4.into(), A4.into(), b"x"));
            f
        }),
    ];
    let mut spoil = |name: &'static str, base: &[u8], at: usize, v: u8| {
        let mut f = base.to_vec();
        f[at] = v;
        bad.push((name, f));
    };
    spoil("arp to another unicast mac", &arp_ok, 0, 0x02);
    spoil("arp from a multicast mac", &arp_ok, 6, 0x01);
    spoil("arp opcode 3", &arp_ok, 14 + 7, 3);
    spoil("arp hlen 8", &arp_ok, 14 + 4, 8);
    spoil("arp sender claims our address", &arp_ok, 14 + 17, 1);
    spoil("ns hop limit 64", &ns_ok, 14 + 7, 64);
    spoil("ns bad checksum", &ns_ok, 14 + 40 + 2, ns_ok[14 + 40 + 2] ^ 1);
    spoil("ns next header udp", &ns_ok, 14 + 6, 17);
    spoil("ns version 4", &ns_ok, 14, 0x40);
    // A code other than 0 with the checksum fixed: Repr::parse refuses it.
    let mut f = ns_ok.clone();
    f[14 + 40 + 1] = 1;
    icmpv6::Packet::new_checked(&mut f[54..]).unwrap().fill_checksum(C6, ndisc::solicited_node(A6));
    bad.push(("ns code 1", f));
    // An unsolicited NA for an address A has no entry for.
    let na =
        ndisc::Repr::Advert { flags: ndisc::FLAG_OVERRIDE, target: C6, target_lladdr: Some(MAC_C) };
    let all: Ipv6Addr = "ff02::1".parse().unwrap();
    bad.push(("na without entry", nd_frame(MAC_C, ndisc::multicast_mac(all), C6, all, 255, &na)));
    // A solicited NA to a multicast destination (RFC 4861 7.1.2).
    let na = ndisc::Repr::Advert { flags: ndisc::FLAG_SOLICITED, target: C6, target_lladdr: None };
    bad.push((
        "solicited na to multicast",
        nd_frame(MAC_C, ndisc::multicast_mac(all), C6, all, 255, &na),
    ));
    // A DAD NS that carries a source link-layer option (RFC 4861 7.1.1).
    let group = ndisc::solicited_node(A6);
    let ns = ndisc::Repr::Solicit { target: A6, source_lladdr: Some(MAC_C) };
    let dad = nd_frame(MAC_C, ndisc::multicast_mac(group), Ipv6Addr::UNSPECIFIED, group, 255, &ns);
    bad.push(("dad ns with an option", dad));
    // Our own solicitation looped back.
    a.resolve(T0, B4.into(), A4.into(), &[]);
    bad.push(("our own frame", the_one(&mut a, T0)));

    for (i, (name, f)) in bad.iter().enumerate() {
        a.handle_frame(T0, f);
        let want = NeighCounters {
            ignored: i as u64 + 1,
            solicits_sent: 1,
            queued: 1,
            ..Default::default()
        };
        assert_eq!(*a.counters(), want, "{name}");
        assert!(drain(&mut a, T0).is_empty(), "{name}: nothing sent");
        assert_eq!(a.len(), 1, "{name}: nothing learned");
    }
    // The unspoilt ones are answered.
    a.handle_frame(T0, &arp_ok);
    a.handle_frame(T0, &ns_ok);
    assert_eq!(drain(&mut a, T0).len(), 2);
}

#[test]
fn resolve_refuses_foreign_sources_and_maps_groups_without_a_table_entry() {
    let (mut a, _) = pair();
    let p = [0u8; 20];
    assert_eq!(a.resolve(T0, B4.into(), C4.into(), &p), Resolve::Dropped, "src not ours");
    assert_eq!(a.resolve(T0, B6.into(), A4.into(), &p), Resolve::Dropped, "mixed families");
    assert_eq!(a.resolve(T0, Ipv4Addr::UNSPECIFIED.into(), A4.into(), &p), Resolve::Dropped);
    assert_eq!(*a.counters(), NeighCounters { drop_bad_address: 3, ..Default::default() });
    let g6: Ipv6Addr = "ff02::1:2".parse().unwrap();
    let want = EthernetAddress([0x33, 0x33, 0, 1, 0, 2]);
    assert_eq!(a.resolve(T0, g6.into(), A6.into(), &p), Resolve::Ready(want));
    let g4 = Ipv4Addr::new(239, 129, 2, 3);
    let want = EthernetAddress([0x01, 0, 0x5e, 0x01, 2, 3]);
    assert_eq!(a.resolve(T0, g4.into(), A4.into(), &p), Resolve::Ready(want));
    let bc = Ipv4Addr::BROADCAST.into();
    assert_eq!(a.resolve(T0, bc, A4.into(), &p), Resolve::Ready(EthernetAddress::BROADCAST));
    assert_eq!(a.len(), 0);
    assert_eq!(*a.counters(), NeighCounters { drop_bad_address: 3, ..Default::default() });
}

#[test]
fn an_na_without_override_does_not_replace_a_known_mac() {
    let (mut a, _) = resolved(B6.into(), A6.into());
    let before = *a.counters();
    let na = ndisc::Repr::Advert {
        flags: ndisc::FLAG_SOLICITED,
        target: B6,
        target_lladdr: Some(MAC_C),
    };
    a.handle_frame(at(1), &nd_frame(MAC_C, MAC_A, B6, A6, 255, &na));
    assert_eq!(*a.counters(), NeighCounters { ignored: 1, ..before });
    let e = entry(&a, at(1), B6).unwrap();
    assert_eq!((e.mac, e.state), (Some(MAC_B), State::Stale), "kept, no longer confirmed");
    // With Override, the new address is taken.
    let na = ndisc::Repr::Advert {
        flags: ndisc::FLAG_SOLICITED | ndisc::FLAG_OVERRIDE,
        target: B6,
        target_lladdr: Some(MAC_C),
    };
    a.handle_frame(at(2), &nd_frame(MAC_C, MAC_A, B6, A6, 255, &na));
    assert_eq!(*a.counters(), NeighCounters { ignored: 1, learned: before.learned + 1, ..before });
    let e = entry(&a, at(2), B6).unwrap();
    assert_eq!((e.mac, e.state), (Some(MAC_C), State::Reachable));
}

#[test]
fn a_gratuitous_arp_updates_a_known_entry_only() {
    let (mut a, _) = resolved(B4.into(), A4.into());
    let before = *a.counters();
    let garp = |mac: EthernetAddress, ip: Ipv4Addr| {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&mac.0);
        f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
        f.extend_from_slice(&mac.0);
        f.extend_from_slice(&ip.octets());
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&ip.octets());
        f
    };
    a.handle_frame(at(1), &garp(MAC_C, B4));
    assert_eq!(*a.counters(), NeighCounters { learned: before.learned + 1, ..before });
    let e = entry(&a, at(1), B4).unwrap();
    assert_eq!((e.mac, e.state), (Some(MAC_C), State::Stale));
    a.handle_frame(at(1), &garp(MAC_C, C4));
    let want = NeighCounters { learned: before.learned + 1, ignored: 1, ..before };
    assert_eq!(*a.counters(), want, "no entry for C4: not learned");
    assert_eq!(entry(&a, at(1), C4), None);
}

fn arbitrary_frames() -> impl Strategy<Value = Vec<u8>> {
    let (mut a, mut b) = pair();
    a.resolve(T0, B4.into(), A4.into(), &[]);
    a.resolve(T0, B6.into(), A6.into(), &[]);
    let valid = drain(&mut a, T0);
    for f in &valid {
        b.handle_frame(T0, f);
    }
    let mut seeds = valid;
    seeds.extend(drain(&mut b, T0));
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        (proptest::sample::select(seeds), any::<usize>(), any::<u8>(), 0usize..100).prop_map(
            |(mut f, i, x, cut)| {
                let i = i % f.len();
                f[i] ^= x;
                f.truncate(f.len().saturating_sub(cut % 8));
                f
            }
        ),
    ]
}

proptest! {
    /// Any bytes: no panic, and each frame is either ignored or acted on (learned and/or
    /// answered), never both; the transmit queue stays bounded.
    #[test]
    fn arbitrary_frames_never_panic_and_are_counted_once(
        frames in proptest::collection::vec(arbitrary_frames(), 1..40)
    ) {
        let (mut a, _) = pair();
        a.resolve(T0, B4.into(), A4.into(), &[1, 2, 3]);
        a.resolve(T0, B6.into(), A6.into(), &[1, 2, 3]);
        for (i, f) in frames.iter().enumerate() {
            let now = at(i as u64);
            let c0 = *a.counters();
            a.handle_frame(now, f);
            let c1 = *a.counters();
            let ignored = c1.ignored - c0.ignored;
            let acted = (c1.learned - c0.learned) + (c1.answers_sent - c0.answers_sent);
            prop_assert!(ignored + acted >= 1 && ignored <= 1 && (ignored == 0 || acted == 0));
            prop_assert!(c1.learned - c0.learned <= 1 && c1.answers_sent - c0.answers_sent <= 1);
            prop_assert_eq!(c1.queued, c0.queued);
            prop_assert!(a.len() <= 8);
            prop_assert!(a.tx_len() <= a.control_limit() + a.packet_limit());
        }
        let sent = drain(&mut a, at(100));
        prop_assert!(sent.iter().all(|f| f.len() <= 14 + 40 + 32 || f.len() == 14 + 3));
    }
}

#[test]
fn prepare_resolves_ahead_so_the_first_packet_is_ready() {
    for (a_ip, b_ip) in [(IpAddr::V4(A4), IpAddr::V4(B4)), (IpAddr::V6(A6), IpAddr::V6(B6))] {
        let (mut a, mut b) = pair();
        assert!(a.prepare(T0, b_ip, a_ip), "a resolution starts");
        assert!(!a.prepare(T0, b_ip, a_ip), "pending already: nothing new");
        assert_eq!(*a.counters(), NeighCounters { solicits_sent: 1, ..Default::default() });
        let ask = the_one(&mut a, T0);
        b.handle_frame(at(1), &ask);
        let answer = the_one(&mut b, at(1));
        a.handle_frame(at(2), &answer);
        // Nothing was queued, so nothing is released: the table only learned.
        assert!(drain(&mut a, at(2)).is_empty());
        let want = NeighCounters { solicits_sent: 1, learned: 1, ..Default::default() };
        assert_eq!(*a.counters(), want);
        let pkt = udp(a_ip, b_ip, b"first packet");
        assert_eq!(a.resolve(at(3), b_ip, a_ip, &pkt), Resolve::Ready(MAC_B));
        assert!(!a.prepare(at(3), b_ip, a_ip), "known: nothing to do");
        assert_eq!(*a.counters(), want, "ready packets and known peers move no counter");
    }
    // Bad addresses are refused and counted; groups need no resolution.
    let (mut a, _) = pair();
    assert!(!a.prepare(T0, B4.into(), C4.into()), "C4 is not ours");
    assert!(!a.prepare(T0, B6.into(), A4.into()), "mixed families");
    assert!(!a.prepare(T0, "224.0.0.1".parse().unwrap(), A4.into()), "a group");
    assert_eq!(*a.counters(), NeighCounters { drop_bad_address: 2, ..Default::default() });
    assert!(drain(&mut a, T0).is_empty());
}

#[test]
fn prepare_after_a_failed_hold_starts_again_but_not_during_it() {
    let (mut a, _) = pair();
    assert!(a.prepare(T0, B4.into(), A4.into()));
    // No answer: retries at 1 s and 2 s, failure at 3 s, held failed until 5 s.
    for ms in [1000, 2000, 3000] {
        a.handle_timeout(at(ms));
    }
    drain(&mut a, at(3000));
    assert_eq!(a.counters().failed, 1);
    assert!(!a.prepare(at(4000), B4.into(), A4.into()), "still in its failed hold");
    assert!(a.prepare(at(5000), B4.into(), A4.into()), "the hold is over");
    assert_eq!(a.counters().solicits_sent, 4);
}
