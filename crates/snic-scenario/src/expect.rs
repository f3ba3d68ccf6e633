//! Checking expectations: counters (exact or ranges), captures (exact or with fields masked,
//! in order or not), end time; buffers and CQE lists are the hosts' ([`crate::hosts::Hosts::check`]).
//! Each failure carries a readable diff: the first differing frame with both decodes and the
//! first differing byte.

use crate::Loaded;
use crate::report::ExpectReport;
use crate::schema::ExpectSpec;
use crate::world::{self, World};
use core::fmt::Write as _;
use snic_time::Instant;
use std::collections::BTreeMap;

/// Check every expectation of `loaded` that applies in `mode` (`sim` or `real`; see
/// [`crate::schema::ExpectSpec::only`]) against the world at the end of its run, whose
/// counters are `counters`.
pub fn check_all(
    world: &World,
    loaded: &Loaded,
    counters: &BTreeMap<String, u64>,
    mode: &str,
) -> Vec<ExpectReport> {
    loaded
        .scenario
        .expect
        .iter()
        .enumerate()
        .filter(|(_, e)| e.only.is_none_or(|m| m.as_str() == mode))
        .map(|(i, e)| check_one(world, loaded, counters, i, e))
        .collect()
}

fn default_name(i: usize, e: &ExpectSpec) -> String {
    if let Some(n) = &e.name {
        return n.clone();
    }
    e.counter
        .as_deref()
        .or(e.pcap.as_deref())
        .or(e.memory.as_deref())
        .or(e.cqes.as_deref())
        .map(str::to_string)
        .unwrap_or_else(|| if e.end_time { "end_time".into() } else { format!("expect{i}") })
}

fn check_one(
    world: &World,
    loaded: &Loaded,
    counters: &BTreeMap<String, u64>,
    i: usize,
    e: &ExpectSpec,
) -> ExpectReport {
    let name = default_name(i, e);
    if let Some(c) = &e.counter {
        return check_counter(name, counters, c, e.eq, e.min, e.max);
    }
    if let Some(p) = &e.pcap {
        let want = match (&e.file, e.packets.is_empty()) {
            (Some(f), _) => match world::read_capture(&loaded.dir.join(f)) {
                Ok(v) => v.into_iter().map(|(_, f)| f).collect(),
                Err(why) => {
                    return fail(
                        name,
                        "pcap",
                        format!("frames of {f}"),
                        format!("unreadable: {why}"),
                    );
                }
            },
            (None, false) => match world::packet_frames(&e.packets, Instant::ZERO) {
                Ok(v) => v.into_iter().map(|(_, f)| f).collect(),
                Err(why) => return fail(name, "pcap", "the packets given".into(), why),
            },
            (None, true) => Vec::new(),
        };
        return check_pcap(world, name, "pcap", p, &want, &e.mask, e.any_order);
    }
    if e.end_time {
        let end = world.end.as_nanos();
        let lo = e.min_time.map_or(0, |t| t.0);
        let hi = e.max_time.map_or(u64::MAX, |t| t.0);
        let want = match (e.min_time, e.max_time) {
            (Some(a), Some(b)) => format!("end in [{a}, {b}]"),
            (Some(a), None) => format!("end at or after {a}"),
            (None, Some(b)) => format!("end at or before {b}"),
            (None, None) => "any end".into(),
        };
        return ExpectReport {
            name,
            kind: "end_time".into(),
            passed: (lo..=hi).contains(&end),
            want,
            got: format!("{}", crate::schema::SimTime(end)),
            diff: None,
        };
    }
    if e.memory.is_some() || e.cqes.is_some() {
        let kind = if e.memory.is_some() { "memory" } else { "cqes" };
        return match world.hosts.check(&world.tb, loaded, e) {
            Some(mut r) => {
                if e.name.is_some() {
                    r.name = name;
                }
                r
            }
            None => fail(name, kind, "a check by the hosts".into(), "not checked".into()),
        };
    }
    fail(name, "unknown", "one of counter, pcap, memory, cqes, end_time".into(), "none".into())
}

fn fail(name: String, kind: &str, want: String, got: String) -> ExpectReport {
    ExpectReport { name, kind: kind.into(), passed: false, want, got, diff: None }
}

/// Check a counter against `eq`, `min` and `max`.
pub fn check_counter(
    name: String,
    counters: &BTreeMap<String, u64>,
    c: &str,
    eq: Option<u64>,
    min: Option<u64>,
    max: Option<u64>,
) -> ExpectReport {
    let mut want = Vec::new();
    if let Some(v) = eq {
        want.push(format!("== {v}"));
    }
    if let Some(v) = min {
        want.push(format!(">= {v}"));
    }
    if let Some(v) = max {
        want.push(format!("<= {v}"));
    }
    let want = if want.is_empty() { "present".into() } else { want.join(" and ") };
    let Some(&v) = counters.get(c) else {
        let stem = c.rsplit_once('.').map_or(c, |(s, _)| s);
        let near: Vec<&str> =
            counters.keys().filter(|k| k.starts_with(stem)).map(String::as_str).take(8).collect();
        let diff = if near.is_empty() {
            None
        } else {
            Some(format!("counters under {stem}: {}", near.join(", ")))
        };
        return ExpectReport {
            name,
            kind: "counter".into(),
            passed: false,
            want: format!("{c} {want}"),
            got: "no such counter".into(),
            diff,
        };
    };
    let passed =
        eq.is_none_or(|x| v == x) && min.is_none_or(|x| v >= x) && max.is_none_or(|x| v <= x);
    ExpectReport {
        name,
        kind: "counter".into(),
        passed,
        want: format!("{c} {want}"),
        got: v.to_string(),
        diff: None,
    }
}

/// Compare what port (or host) `port` was sent with `want`.
pub fn check_pcap(
    world: &World,
    name: String,
    kind: &str,
    port: &str,
    want: &[Vec<u8>],
    mask: &[String],
    any_order: bool,
) -> ExpectReport {
    let Some(got) = world.sent(port) else {
        return fail(
            name,
            kind,
            format!("{} frames", want.len()),
            format!("no port or host {port:?}"),
        );
    };
    let got: Vec<Vec<u8>> = got.into_iter().map(|(_, f)| f).collect();
    let diff = match compare_frames(&got, want, mask, any_order) {
        Ok(d) => d,
        Err(e) => return fail(name, kind, format!("{} frames", want.len()), e),
    };
    ExpectReport {
        name,
        kind: kind.into(),
        passed: diff.is_none(),
        want: format!("{} frames{}", want.len(), if any_order { ", any order" } else { "" }),
        got: format!("{} frames", got.len()),
        diff,
    }
}

/// Byte ranges of a named field in `frame` (`eth.src`, `ipv4.id`, `udp.checksum`, ...) or a
/// literal range (`14..16`). `Ok(None)`: the frame has no such header.
pub fn mask_range(frame: &[u8], field: &str) -> Result<Option<(usize, usize)>, String> {
    if let Some((a, b)) = field.split_once("..") {
        // As `snic scenario check` reads them: decimal, `0x` hex or a size (`1KiB`).
        let num = |s: &str| {
            crate::hosts::util::parse_num(s)
                .ok()
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
                .ok_or_else(|| format!("bad mask range {field:?}"))
        };
        return Ok(Some((num(a)?, num(b)?)));
    }
    let (layer, f) = field.split_once('.').ok_or_else(|| format!("bad mask field {field:?}"))?;
    // L3 offset (after VLAN tags) and type.
    let mut l3 = 14;
    let mut ty = frame.get(12..14).map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
    while (ty == 0x8100 || ty == 0x88a8) && frame.len() >= l3 + 4 {
        ty = u16::from_be_bytes([frame[l3 + 2], frame[l3 + 3]]);
        l3 += 4;
    }
    let (l4, proto) = match ty {
        0x0800 if frame.len() > l3 + 9 => (l3 + usize::from(frame[l3] & 0x0f) * 4, frame[l3 + 9]),
        0x86dd if frame.len() > l3 + 6 => (l3 + 40, frame[l3 + 6]),
        _ => (0, 0),
    };
    let r = |base: usize, a: usize, b: usize| Some((base + a, base + b));
    let got = match (layer, f) {
        ("eth", "dst") => r(0, 0, 6),
        ("eth", "src") => r(0, 6, 12),
        ("eth", "type") => r(0, 12, 14),
        ("ipv4" | "ip", _) if ty != 0x0800 => None,
        ("ipv4" | "ip", "tos") => r(l3, 1, 2),
        ("ipv4" | "ip", "len") => r(l3, 2, 4),
        ("ipv4" | "ip", "id") => r(l3, 4, 6),
        ("ipv4" | "ip", "flags" | "frag") => r(l3, 6, 8),
        ("ipv4" | "ip", "ttl") => r(l3, 8, 9),
        ("ipv4" | "ip", "proto") => r(l3, 9, 10),
        ("ipv4" | "ip", "checksum" | "chksum") => r(l3, 10, 12),
        ("ipv4" | "ip", "src") => r(l3, 12, 16),
        ("ipv4" | "ip", "dst") => r(l3, 16, 20),
        ("ipv6", _) if ty != 0x86dd => None,
        ("ipv6", "tc" | "flow") => r(l3, 0, 4),
        ("ipv6", "plen") => r(l3, 4, 6),
        ("ipv6", "hlim") => r(l3, 7, 8),
        ("ipv6", "src") => r(l3, 8, 24),
        ("ipv6", "dst") => r(l3, 24, 40),
        ("udp", _) if proto != 17 || l4 == 0 => None,
        ("tcp", _) if proto != 6 || l4 == 0 => None,
        ("udp" | "tcp", "sport") => r(l4, 0, 2),
        ("udp" | "tcp", "dport") => r(l4, 2, 4),
        ("udp", "len") => r(l4, 4, 6),
        ("udp", "checksum" | "chksum") => r(l4, 6, 8),
        ("tcp", "seq") => r(l4, 4, 8),
        ("tcp", "ack") => r(l4, 8, 12),
        ("tcp", "window") => r(l4, 14, 16),
        ("tcp", "checksum" | "chksum") => r(l4, 16, 18),
        _ => return Err(format!("unknown mask field {field:?}")),
    };
    Ok(got)
}

/// `frame` with the masked bytes zeroed.
pub fn masked(frame: &[u8], mask: &[String]) -> Result<Vec<u8>, String> {
    let mut f = frame.to_vec();
    for m in mask {
        if let Some((a, b)) = mask_range(frame, m)? {
            let b = b.min(f.len());
            if a < b {
                f[a..b].fill(0);
            }
        }
    }
    Ok(f)
}

/// Compare frame lists (masked); `Ok(None)` when they match, else a readable diff.
pub fn compare_frames(
    got: &[Vec<u8>],
    want: &[Vec<u8>],
    mask: &[String],
    any_order: bool,
) -> Result<Option<String>, String> {
    let g: Vec<Vec<u8>> = got.iter().map(|f| masked(f, mask)).collect::<Result<_, _>>()?;
    let w: Vec<Vec<u8>> = want.iter().map(|f| masked(f, mask)).collect::<Result<_, _>>()?;
    if any_order {
        let mut left: BTreeMap<&[u8], Vec<usize>> = BTreeMap::new();
        for (i, f) in g.iter().enumerate() {
            left.entry(f).or_default().push(i);
        }
        let mut missing = Vec::new();
        for (i, f) in w.iter().enumerate() {
            match left.get_mut(f.as_slice()).and_then(Vec::pop) {
                Some(_) => {}
                None => missing.push(i),
            }
        }
        let mut extra: Vec<usize> = left.into_values().flatten().collect();
        extra.sort_unstable();
        if missing.is_empty() && extra.is_empty() {
            return Ok(None);
        }
        let mut s = format!(
            "{} wanted frames not sent, {} sent frames not wanted",
            missing.len(),
            extra.len()
        );
        if let Some(&i) = missing.first() {
            let _ = write!(s, "\nfirst missing: want[{i}] {}", decode(&want[i]));
        }
        if let Some(&i) = extra.first() {
            let _ = write!(s, "\nfirst extra:   got[{i}] {}", decode(&got[i]));
        }
        return Ok(Some(s));
    }
    for i in 0..g.len().max(w.len()) {
        match (g.get(i), w.get(i)) {
            (Some(a), Some(b)) if a == b => {}
            (Some(a), Some(b)) => {
                let at = a
                    .iter()
                    .zip(b.iter())
                    .position(|(x, y)| x != y)
                    .unwrap_or(a.len().min(b.len()));
                let byte = |f: &[u8]| f.get(at).map_or("end".to_string(), |x| format!("{x:02x}"));
                return Ok(Some(format!(
                    "frame {i} differs at byte {at} (want {}, got {}; lengths {} and {})\n want: {}\n got:  {}",
                    byte(b),
                    byte(a),
                    b.len(),
                    a.len(),
                    decode(&want[i]),
                    decode(&got[i])
                )));
            }
            (None, Some(_)) => {
                return Ok(Some(format!(
                    "{} frames sent, {} wanted: first missing frame {i}\n want: {}",
                    g.len(),
                    w.len(),
                    decode(&want[i])
                )));
            }
            (Some(_), None) => {
                return Ok(Some(format!(
                    "{} frames sent, {} wanted: first extra frame {i}\n got:  {}",
                    g.len(),
                    w.len(),
                    decode(&got[i])
                )));
            }
            (None, None) => {}
        }
    }
    Ok(None)
}

/// One line describing a frame: `eth SRC > DST, ipv4 A > B, udp 1 > 2, 64 bytes`.
pub fn decode(frame: &[u8]) -> String {
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};
    let mut s = String::new();
    match SlicedPacket::from_ethernet(frame) {
        Err(e) => {
            let _ = write!(s, "undecodable ({e})");
        }
        Ok(p) => {
            if let Some(etherparse::LinkSlice::Ethernet2(e)) = &p.link {
                let m =
                    |a: [u8; 6]| a.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
                let _ = write!(
                    s,
                    "eth {} > {} type {:#06x}",
                    m(e.source()),
                    m(e.destination()),
                    e.ether_type().0
                );
            }
            match &p.net {
                Some(NetSlice::Ipv4(ip)) => {
                    let h = ip.header();
                    let _ = write!(
                        s,
                        ", ipv4 {} > {} proto {} tos {:#04x} id {} ttl {}",
                        h.source_addr(),
                        h.destination_addr(),
                        h.protocol().0,
                        (h.dcp().value() << 2) | h.ecn().value(),
                        h.identification(),
                        h.ttl()
                    );
                }
                Some(NetSlice::Ipv6(ip)) => {
                    let h = ip.header();
                    let _ = write!(
                        s,
                        ", ipv6 {} > {} next {}",
                        h.source_addr(),
                        h.destination_addr(),
                        h.next_header().0
                    );
                }
                _ => {}
            }
            match &p.transport {
                Some(TransportSlice::Udp(u)) => {
                    let _ = write!(
                        s,
                        ", udp {} > {} len {}",
                        u.source_port(),
                        u.destination_port(),
                        u.length()
                    );
                }
                Some(TransportSlice::Tcp(t)) => {
                    let _ = write!(
                        s,
                        ", tcp {} > {} seq {}",
                        t.source_port(),
                        t.destination_port(),
                        t.sequence_number()
                    );
                }
                Some(TransportSlice::Icmpv4(_)) => s.push_str(", icmp"),
                Some(TransportSlice::Icmpv6(_)) => s.push_str(", icmpv6"),
                _ => {}
            }
        }
    }
    let _ = write!(s, ", {} bytes", frame.len());
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_ranges_read_as_check_reads_them() {
        // `snic scenario check` takes hex and sizes in a range: the run must too.
        let f = vec![0xaa; 40];
        for m in ["18..20", "0x12..0x14", " 0x12 .. 20 "] {
            assert_eq!(mask_range(&f, m), Ok(Some((18, 20))), "{m}");
        }
        assert_eq!(mask_range(&f, "0..1KiB"), Ok(Some((0, 1024))));
        assert!(mask_range(&f, "a..b").is_err());
        let m = masked(&f, &["0x12..0x14".into()]).expect("masks");
        assert_eq!(&m[17..21], [0xaa, 0, 0, 0xaa]);
    }
}
