//! Fuzz target `neigh`: a `snic_nic::neigh::Neighbours` table (A) beside a peer (B) on one
//! link, driven by arbitrary operations with arbitrary time steps.
//!
//! Input: byte 0 sets A's config (capacity 1..=8 from bits 0-2, queue per entry 0..=3 from
//! bits 3-4, solicit tries 0..=3 from bits 5-6, failed hold 0 or 2 s from bit 7); retry
//! interval 1 s, reachable 5 s. Then records, by the low 3 bits of a control byte:
//! - `0`: time step of `next byte * 10` ms.
//! - `1`: `resolve` to an address of a pool (B's, unknown ones, a group, one of ours, the
//!   unspecified one) from a source of a pool (ours, foreign, the other family), packet of
//!   `next byte` bytes.
//! - `2`: `handle_frame` of `next byte` raw bytes.
//! - `3`: pump: every frame A sends goes to B, every frame B sends to A (buffer of `next byte *
//!   8` bytes, so some are too big).
//! - `4`: `handle_timeout` at the current time; `5`: jump to `poll_timeout` and run it.
//! - `6`: the last frame A or B sent, one byte flipped, to `handle_frame` of the other.
//! - `7`: `poll_transmit` of A into `next byte` bytes, dropped on the floor.
//!
//! Checked, besides "never panics": counters never go down; a `resolve` moves `queued` (for
//! `Queued`) or exactly one drop counter (for `Dropped`) by one and nothing else of the
//! packet's; a frame is either ignored or acted on (learned, answered), once; the table, the
//! held packets and the transmit queue stay within their bounds; every packet queued is
//! released, dropped by its failed resolution, or still queued; `poll_transmit` writes within the buffer and runs dry;
//! after `handle_timeout(now)` and sending what it queued, the next deadline is later than
//! `now` (no livelock).

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_nic::neigh::{NeighConfig, NeighCounters, Neighbours, Resolve};
use snic_time::Instant;
use snic_wire::ethernet::EthernetAddress;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

const MAC_A: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x0a]);
const MAC_B: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x0b]);

fn v4(x: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, x))
}

fn v6(x: u16) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, x))
}

/// Destinations: B's two, unknown ones (no answer), groups, one of ours, unspecified.
fn dst(i: u8) -> IpAddr {
    match i % 12 {
        0 => v4(2),
        1 => v6(0xb),
        2 => v4(3),
        3 => v6(0xc),
        4 => v4(4),
        5 => v6(0xd),
        6 => v4(5),
        7 => v6(0xe),
        8 => IpAddr::V4(Ipv4Addr::new(239, 1, 2, 3)),
        9 => IpAddr::V6(Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1)),
        10 => v4(1),
        _ => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

/// Sources: ours of `dst`'s family most of the time, sometimes a foreign or mixed one.
fn src(dst: IpAddr, i: u8) -> IpAddr {
    match (i % 8, dst) {
        (6, _) => v4(9),
        (7, IpAddr::V4(_)) => v6(0xa),
        (7, IpAddr::V6(_)) => v4(1),
        (_, IpAddr::V4(_)) => v4(1),
        (_, IpAddr::V6(_)) => v6(0xa),
    }
}

/// Packet-drop counters moved from `a` to `b`, summed.
fn drops(a: &NeighCounters, b: &NeighCounters) -> u64 {
    (b.drop_queue_full - a.drop_queue_full)
        + (b.drop_unresolved - a.drop_unresolved)
        + (b.drop_table_full - a.drop_table_full)
        + (b.drop_bad_address - a.drop_bad_address)
}

fn monotone(a: &NeighCounters, b: &NeighCounters) {
    let pairs = [
        (a.solicits_sent, b.solicits_sent),
        (a.answers_sent, b.answers_sent),
        (a.learned, b.learned),
        (a.failed, b.failed),
        (a.queued, b.queued),
        (a.released, b.released),
        (a.drop_queue_full, b.drop_queue_full),
        (a.drop_unresolved, b.drop_unresolved),
        (a.drop_table_full, b.drop_table_full),
        (a.ignored, b.ignored),
        (a.drop_too_big, b.drop_too_big),
        (a.drop_tx_full, b.drop_tx_full),
        (a.drop_bad_address, b.drop_bad_address),
    ];
    for (x, y) in pairs {
        assert!(x <= y, "a counter went down: {a:?} -> {b:?}");
    }
}

/// Drain `n` into buffers of `cap` bytes; every frame's length is within the buffer and the
/// queue runs dry within its length.
fn drain(n: &mut Neighbours, now: Instant, cap: usize) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; cap];
    let bound = n.tx_len();
    let mut out = Vec::new();
    while let Some(len) = n.poll_transmit(now, &mut buf) {
        assert!(len <= cap && len >= 14, "frame of {len} bytes in a {cap}-byte buffer");
        out.push(buf[..len].to_vec());
        assert!(out.len() <= bound, "poll_transmit gave more than it held");
    }
    assert_eq!(n.tx_len(), 0);
    out
}

/// Feed `frame` to `n` and check it was counted once: ignored, or acted on.
fn feed(n: &mut Neighbours, now: Instant, frame: &[u8]) {
    let c0 = *n.counters();
    n.handle_frame(now, frame);
    let c1 = *n.counters();
    monotone(&c0, &c1);
    let ignored = c1.ignored - c0.ignored;
    let learned = c1.learned - c0.learned;
    let answered = (c1.answers_sent - c0.answers_sent) + (c1.drop_tx_full - c0.drop_tx_full);
    assert!(ignored <= 1 && learned <= 1 && answered <= 1, "{c0:?} -> {c1:?}");
    assert!((ignored == 1) != (learned + answered > 0), "counted once: {c0:?} -> {c1:?}");
    assert_eq!(c1.queued, c0.queued);
    assert_eq!(drops(&c0, &c1), 0, "a frame drops no packet");
    assert_eq!(c1.failed, c0.failed);
}

/// The table's bounds, and the packet accounting: every packet queued was released (sent,
/// dropped as too big, or waiting in the transmit queue), dropped by its failed resolution, or
/// still waits in its entry's queue.
fn bounds(n: &Neighbours, cap: usize, direct_unresolved: u64) {
    let c = n.counters();
    assert!(n.len() <= cap);
    assert!(n.held_packets() <= n.packet_limit());
    assert!(n.tx_len() <= n.control_limit() + n.packet_limit());
    let mut waiting = 0u64;
    for e in n.entries(Instant::MAX) {
        assert!(e.queued <= n.config().queue_per_entry);
        waiting += e.queued as u64;
    }
    assert!(waiting <= n.held_packets() as u64);
    assert_eq!(c.queued, c.released + (c.drop_unresolved - direct_unresolved) + waiting, "{c:?}");
}

fuzz_target!(|data: &[u8]| {
    let Some((&c, mut rest)) = data.split_first() else { return };
    let cfg = NeighConfig {
        capacity: usize::from(c & 7) + 1,
        queue_per_entry: usize::from((c >> 3) & 3),
        solicit_tries: u32::from((c >> 5) & 3),
        retry_interval: Duration::from_secs(1),
        reachable: Duration::from_secs(5),
        failed_hold: if c & 0x80 != 0 { Duration::from_secs(2) } else { Duration::ZERO },
    };
    let mut a = Neighbours::new(cfg, MAC_A, &[v4(1), v6(0xa)]);
    let mut b = Neighbours::new(NeighConfig::default(), MAC_B, &[v4(2), v6(0xb)]);
    let mut now = Instant::from_secs(1);
    let mut last: Option<(bool, Vec<u8>)> = None;
    // drop_unresolved moved by resolve itself (failed hold), not by a failed queue.
    let mut direct_unresolved = 0u64;
    let mut steps = 0;
    while let Some((&ctl, tail)) = rest.split_first() {
        rest = tail;
        steps += 1;
        if steps > 256 {
            break;
        }
        let mut next = || -> u8 {
            let Some((&x, t)) = rest.split_first() else { return 0 };
            rest = t;
            x
        };
        match ctl & 7 {
            0 => now += Duration::from_millis(u64::from(next()) * 10),
            1 => {
                let d = dst(next());
                let s = src(d, next());
                let pkt = vec![0x45u8; usize::from(next())];
                let c0 = *a.counters();
                let r = a.resolve(now, d, s, &pkt);
                let c1 = *a.counters();
                monotone(&c0, &c1);
                match r {
                    Resolve::Queued => {
                        assert_eq!(c1.queued, c0.queued + 1);
                        assert_eq!(drops(&c0, &c1), 0);
                    }
                    Resolve::Dropped => {
                        assert_eq!(c1.queued, c0.queued);
                        assert_eq!(drops(&c0, &c1), 1, "one drop reason: {c0:?} -> {c1:?}");
                        direct_unresolved += c1.drop_unresolved - c0.drop_unresolved;
                    }
                    Resolve::Ready(m) => {
                        assert_eq!(c1.queued, c0.queued);
                        assert_eq!(drops(&c0, &c1), 0);
                        assert_ne!(m, MAC_A, "{d} resolved to our own MAC");
                    }
                }
                assert_eq!((c1.released, c1.failed), (c0.released, c0.failed));
            }
            2 => {
                let n = usize::from(next()).min(rest.len());
                let (f, t) = rest.split_at(n);
                rest = t;
                feed(&mut a, now, f);
            }
            3 => {
                let cap = usize::from(next()) * 8;
                for f in drain(&mut a, now, cap) {
                    feed(&mut b, now, &f);
                    last = Some((true, f));
                }
                for f in drain(&mut b, now, cap) {
                    feed(&mut a, now, &f);
                    last = Some((false, f));
                }
            }
            4 | 5 => {
                if ctl & 7 == 5 {
                    if let Some(t) = a.poll_timeout() {
                        now = now.max(t);
                    }
                }
                let c0 = *a.counters();
                a.handle_timeout(now);
                b.handle_timeout(now);
                monotone(&c0, a.counters());
                assert_eq!(a.counters().queued, c0.queued);
                // Frames waiting to be sent are due at once (`Instant::ZERO`); once they are
                // out, every timer must lie after `now`.
                let _ = drain(&mut a, now, 1 << 14);
                if let Some(t) = a.poll_timeout() {
                    assert!(t > now, "deadline {t:?} not after handle_timeout({now:?})");
                }
            }
            6 => {
                if let Some((to_b, mut f)) = last.clone() {
                    let i = usize::from(next()) % f.len();
                    f[i] ^= next() | 1;
                    if to_b {
                        feed(&mut b, now, &f);
                    } else {
                        feed(&mut a, now, &f);
                    }
                }
            }
            _ => {
                let mut buf = vec![0u8; usize::from(next())];
                let n = buf.len();
                if let Some(len) = a.poll_transmit(now, &mut buf) {
                    assert!(len <= n);
                }
            }
        }
        bounds(&a, cfg.capacity, direct_unresolved);
    }
});
