//! Fuzz target `offload`: software segmentation and checksum completion
//! (`snic_pipeline::offload::{segment, complete_checksum}`) on arbitrary frames with arbitrary
//! GSO / partial-checksum metadata.
//!
//! Input layout (the rest is the frame):
//!
//! ```text
//! 0      bits 0-1: GSO kind (0 none, 1 TcpV4, 2 TcpV6, 3 UdpL4); bit 2: csum_partial present;
//!        bit 3: small output batch (byte 9 + 1 slots) instead of MAX_BATCH
//! 1..3   gso size (LE)      3..5   gso hdr_len (LE)
//! 5..7   csum_start (LE)    7..9   csum_offset (LE)
//! 9      output batch size when bit 3 is set
//! ```
//!
//! Checked, besides "never panics": on `Err` nothing was added to the output batch. On
//! `Ok(n)`: `n` segments were added, each with the offload metadata cleared; each parses with
//! `snic_wire::stack::parse` up to the same L4 header kind at the same offset as the super-packet
//! (when the super-packet itself parses that far); every segment's headers are as long as the
//! super-packet's, carries at most `gso size` payload bytes (exactly that many except the last),
//! and the payloads add up to the super-packet's; every IPv4 header checksum and every TCP/UDP
//! checksum verifies. `complete_checksum`: on `Ok` only the two checksum bytes changed and they
//! hold the complement of the sum from `csum_start` to the end of the IP packet; on `Err` the
//! frame is untouched.

#![no_main]

use core::net::{Ipv4Addr, Ipv6Addr};
use libfuzzer_sys::fuzz_target;
use snic_pipeline::meta::{Gso, GsoKind, Offload};
use snic_pipeline::offload::{complete_checksum, segment};
use snic_pipeline::{Batch, MAX_BATCH, PacketBuf};
use snic_wire::checksum;
use snic_wire::stack::{self, Layer};

const META_LEN: usize = 10;

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// Where the L3 and L4 headers of a parsed frame are, and its IP end (outer headers only).
struct Hdrs {
    l3: (Layer, usize),
    l4: (Layer, usize),
    /// First byte of the L4 payload.
    payload: usize,
    /// End of the IP packet.
    ip_end: usize,
}

/// Find the outer L3/L4 headers with the stack parser (independent of `offload`'s own walk).
fn hdrs(f: &[u8]) -> Option<Hdrs> {
    let s = stack::parse(f);
    let (l3k, l3) = s.outer.l3?;
    let (l4k, l4) = s.outer.l4?;
    let (l3, l4) = (usize::from(l3), usize::from(l4));
    let l4_hdr = match l4k {
        Layer::Tcp => usize::from(f[l4 + 12] >> 4) * 4,
        Layer::Udp => 8,
        _ => return None,
    };
    let ip_end = match l3k {
        Layer::Ipv4 => l3 + usize::from(u16::from_be_bytes([f[l3 + 2], f[l3 + 3]])),
        Layer::Ipv6 => l3 + 40 + usize::from(u16::from_be_bytes([f[l3 + 4], f[l3 + 5]])),
        _ => return None,
    };
    Some(Hdrs { l3: (l3k, l3), l4: (l4k, l4), payload: l4 + l4_hdr, ip_end })
}

/// The L4 checksum of `f` (headers found by `h`) verifies.
fn l4_checksum_ok(f: &[u8], h: &Hdrs) -> bool {
    let seg = &f[h.l4.1..h.ip_end];
    let proto = if h.l4.0 == Layer::Tcp { 6 } else { 17 };
    let len = seg.len() as u32;
    let (l3, v4) = (h.l3.1, h.l3.0 == Layer::Ipv4);
    let pseudo = if v4 {
        let a = |at: usize| Ipv4Addr::new(f[at], f[at + 1], f[at + 2], f[at + 3]);
        checksum::pseudo_header_v4(a(l3 + 12), a(l3 + 16), proto, len)
    } else {
        let a = |at: usize| {
            let mut b = [0u8; 16];
            b.copy_from_slice(&f[at..at + 16]);
            Ipv6Addr::from(b)
        };
        checksum::pseudo_header_v6(a(l3 + 8), a(l3 + 24), proto, len)
    };
    checksum::combine(&[pseudo, checksum::data(seg)]) == 0xffff
}

/// End of the IP packet as a plain walk sees it (up to four VLAN tags, then the IPv4 total
/// length or the IPv6 payload length), for the `complete_checksum` check.
fn ip_end_guess(f: &[u8]) -> Option<usize> {
    let be = |at: usize| f.get(at..at + 2).map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])));
    let mut at = 12;
    let mut tags = 0;
    while matches!(be(at)?, 0x8100 | 0x88a8) && tags < 4 {
        at += 4;
        tags += 1;
    }
    let l3 = at + 2;
    match be(at)? {
        0x0800 => Some(l3 + be(l3 + 2)?),
        0x86dd => Some(l3 + 40 + be(l3 + 4)?),
        _ => None,
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < META_LEN {
        return;
    }
    let (m, frame) = data.split_at(META_LEN);
    let kind = match m[0] & 3 {
        1 => Some(GsoKind::TcpV4),
        2 => Some(GsoKind::TcpV6),
        3 => Some(GsoKind::UdpL4),
        _ => None,
    };
    let offload = Offload {
        csum_partial: (m[0] & 4 != 0).then(|| (le16(m, 5), le16(m, 7))),
        gso: kind.map(|kind| Gso { kind, size: le16(m, 1), hdr_len: le16(m, 3), tunnel: None }),
    };
    let max = if m[0] & 8 != 0 { usize::from(m[9]) + 1 } else { MAX_BATCH };

    let mut pkt = PacketBuf::from_frame(frame);
    pkt.meta.offload = offload;
    pkt.meta.seq = 7;

    // --- segment ---
    let mut out = Batch::new(max);
    // One packet already in the batch: segments are appended after it.
    out.push_frame(&[0xee; 14]).expect("an empty batch has room");
    let before = out.len();
    match segment(&pkt, &mut out) {
        Err(_) => assert_eq!(out.len(), before, "a failed segment() added packets"),
        Ok(n) => {
            let gso = offload.gso.expect("segment() succeeded without GSO metadata");
            let size = usize::from(gso.size);
            assert!(n >= 1);
            assert_eq!(out.len(), before + n);
            assert_eq!(out.packets()[0].data(), &[0xee; 14], "segment() touched an old packet");
            let orig = hdrs(frame);
            let want_l4 = if gso.kind == GsoKind::UdpL4 { Layer::Udp } else { Layer::Tcp };
            let mut total_payload = 0;
            for (i, seg) in out.packets()[before..].iter().enumerate() {
                let f = seg.data();
                assert_eq!(seg.meta.offload, Offload::default());
                assert_eq!(seg.meta.seq, 7);
                assert!(f.len() <= frame.len(), "segment longer than the super-packet");
                let Some(o) = &orig else { continue };
                if o.l4.0 != want_l4 {
                    continue;
                }
                // The super-packet parsed as IP + the right L4: so must every segment.
                let h = hdrs(f).unwrap_or_else(|| {
                    panic!("segment {i} does not parse: {:?}", stack::parse(f).error())
                });
                assert_eq!((h.l3, h.l4, h.payload), (o.l3, o.l4, o.payload), "segment {i}");
                assert_eq!(h.ip_end, f.len(), "segment {i}: IP length != frame length");
                let pl = f.len() - h.payload;
                assert!(pl <= size, "segment {i}: {pl} payload bytes > gso size {size}");
                assert!(f.len() <= h.payload + size);
                if i + 1 < n {
                    assert_eq!(pl, size, "segment {i} of {n} is short");
                }
                total_payload += pl;
                if h.l3.0 == Layer::Ipv4 {
                    let ihl = usize::from(f[h.l3.1] & 0x0f) * 4;
                    assert_eq!(checksum::data(&f[h.l3.1..h.l3.1 + ihl]), 0xffff, "IPv4 csum");
                }
                assert!(l4_checksum_ok(f, &h), "segment {i}: L4 checksum does not verify");
            }
            if let Some(o) = &orig
                && o.l4.0 == want_l4
            {
                assert_eq!(total_payload, o.ip_end - o.payload, "payload lost or duplicated");
            }
        }
    }

    // --- complete_checksum ---
    let original = pkt.data().to_vec();
    match complete_checksum(&mut pkt) {
        Err(_) => assert_eq!(pkt.data(), &original[..], "a failed complete_checksum() wrote"),
        Ok(()) => {
            let (start, offset) = offload.csum_partial.expect("completed without csum_partial");
            assert_eq!(pkt.meta.offload.csum_partial, None);
            assert_eq!(pkt.meta.offload.gso, offload.gso);
            let f = pkt.data();
            assert_eq!(f.len(), original.len());
            let at = usize::from(start) + usize::from(offset);
            assert!(at + 2 <= f.len());
            assert_eq!(f[..at], original[..at]);
            assert_eq!(f[at + 2..], original[at + 2..]);
            // The stored value is the complement of the sum over [start, end) as it was (the
            // field held the pseudo-header sum), zero sent as 0xffff. `end` is the IP end when
            // `offload` parses the frame as IP, else the frame end: try both.
            let c = u16::from_be_bytes([f[at], f[at + 1]]);
            let start = usize::from(start);
            let mut ends = vec![f.len()];
            ends.extend(ip_end_guess(&original).filter(|&e| e <= f.len() && e >= at + 2));
            let ok = ends.iter().any(|&end| {
                let mut want = !checksum::data(&original[start..end]);
                if want == 0 {
                    want = 0xffff;
                }
                want == c
            });
            assert!(ok, "stored checksum {c:#06x} is no complement of a sum from {start}");
        }
    }
});
