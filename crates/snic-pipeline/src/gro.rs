//! Receive-side coalescing (GRO): consecutive TCP segments of one flow in a batch merged into one
//! super-packet with GSO metadata, so that a port that takes super-packets (a guest's TAP or
//! veth with a virtio-net header) gets one write instead of dozens.
//!
//! [`coalesce`] walks a batch once and merges each packet into the one before it when both are
//! TCP over IPv4, plain or inside VXLAN over IPv4 (`tunnels`), and:
//!
//! - every header byte is equal but for the IP total lengths, identifications and header
//!   checksums, the outer UDP length, the TCP sequence number, flags and checksum;
//! - the inner IP identifications and the sequence numbers follow on exactly; the outer
//!   identifications too, or are all the same (snic's own VXLAN encapsulation writes 0 with DF,
//!   where RFC 6864 gives the field no meaning; segmenting again then numbers them from the
//!   first);
//! - the TCP flags are ACK, with PSH allowed on the last segment only; no FIN, SYN, RST, URG,
//!   ECE, CWR;
//! - every segment carries the first one's payload size but the last, which may be smaller;
//! - the IPv4 header checksums and the TCP checksum are valid (checked here: merging must not
//!   hide a corrupt segment), the outer UDP checksum is zero, IPv4 has no fragment bits but DF,
//!   and the frame has no bytes past the IP packet;
//! - the result stays within 64 KiB of IP packet.
//!
//! The super-packet keeps the first segment's headers (and metadata), with the lengths and
//! header checksums of the whole, the last segment's flags, and the TCP checksum left partial
//! (`csum_partial`: the pseudo-header sum of the whole, as a virtio-net NEEDS_CSUM header has
//! it); `gso` says TCPv4, the segment size, the header length and, for VXLAN, the outer headers.
//! Cutting it again with [`crate::offload::segment`] gives back the original segments byte for
//! byte (the property the tests check). Packets already carrying offload state, IPv6, VLAN tags
//! and IP options that differ are left alone.
//!
//! Sans-IO and panic-free; no allocation except when a buffer too small for the merged packet
//! must grow (once per buffer).

use crate::buf::{Batch, PacketBuf};
use crate::meta::{Gso, GsoKind, Offload, TunnelGso, TunnelGsoKind};
use core::net::Ipv4Addr;
use snic_wire::checksum;

/// Outer headers of a VXLAN-over-IPv4 frame: Ethernet, IPv4 (no options), UDP, VXLAN.
const VXLAN_OUTER: usize = 14 + 20 + 8 + 8;
/// The VXLAN UDP port.
const VXLAN_PORT: u16 = 4789;
/// Room a buffer is grown to for a merged packet.
const GRO_ROOM: usize = 65_536 + 128;
const TCP_ACK: u8 = 0x10;
const TCP_PSH: u8 = 0x08;
/// Most packets of a batch looked at (the merge marks fit a fixed bitmap).
const MAX_LOOK: usize = 256;

/// Where the headers of a segment are, and its per-segment fields.
#[derive(Debug, Clone, Copy)]
struct Seg {
    /// VXLAN over IPv4 (outer headers of [`VXLAN_OUTER`] bytes) or plain.
    tunnel: bool,
    /// Inner (or only) IPv4 header.
    l3: usize,
    /// TCP header.
    l4: usize,
    /// End of the TCP header.
    hdr_len: usize,
    /// TCP payload bytes.
    payload: usize,
    seq: u32,
    id: u16,
    outer_id: u16,
    flags: u8,
}

fn be16(f: &[u8], at: usize) -> Option<u16> {
    f.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]))
}

fn ipv4(f: &[u8], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(f[at], f[at + 1], f[at + 2], f[at + 3])
}

/// Check an IPv4 header at `l3` (DF only, header checksum valid) that must end where the frame
/// ends; returns (header length, protocol).
fn ip_ok(f: &[u8], l3: usize) -> Option<(usize, u8)> {
    let vihl = *f.get(l3)?;
    let ihl = usize::from(vihl & 0x0f) * 4;
    if vihl >> 4 != 4 || ihl < 20 || f.len() < l3 + ihl {
        return None;
    }
    let total = usize::from(be16(f, l3 + 2)?);
    if l3 + total != f.len() || total < ihl || be16(f, l3 + 6)? & !0x4000 != 0 {
        return None;
    }
    if checksum::data(&f[l3..l3 + ihl]) != 0xffff {
        return None;
    }
    Some((ihl, f[l3 + 9]))
}

/// Parse `f` as a mergeable TCP segment (see the module documentation).
fn parse(f: &[u8], tunnels: bool) -> Option<Seg> {
    if be16(f, 12)? != 0x0800 {
        return None;
    }
    let (ihl, proto) = ip_ok(f, 14)?;
    let (tunnel, l3, outer_id) = if proto == 17 {
        let udp = 14 + ihl;
        if !tunnels
            || ihl != 20
            || be16(f, udp + 2)? != VXLAN_PORT
            || be16(f, udp + 6)? != 0
            || usize::from(be16(f, udp + 4)?) != f.len() - udp
            || *f.get(udp + 8)? != 0x08
            || be16(f, VXLAN_OUTER + 12)? != 0x0800
        {
            return None;
        }
        (true, VXLAN_OUTER + 14, be16(f, 18)?)
    } else {
        (false, 14, 0)
    };
    let (ihl, proto) = if tunnel { ip_ok(f, l3)? } else { (ihl, proto) };
    if proto != 6 {
        return None;
    }
    let l4 = l3 + ihl;
    let doff = usize::from(*f.get(l4 + 12)? >> 4) * 4;
    let hdr_len = l4 + doff;
    if doff < 20 || hdr_len >= f.len() {
        return None;
    }
    let flags = f[l4 + 13];
    if flags != TCP_ACK && flags != TCP_ACK | TCP_PSH {
        return None;
    }
    let tcp_len = f.len() - l4;
    let pseudo = checksum::pseudo_header_v4(ipv4(f, l3 + 12), ipv4(f, l3 + 16), 6, tcp_len as u32);
    if checksum::combine(&[pseudo, checksum::data(&f[l4..])]) != 0xffff {
        return None;
    }
    let seq = u32::from_be_bytes([f[l4 + 4], f[l4 + 5], f[l4 + 6], f[l4 + 7]]);
    Some(Seg {
        tunnel,
        l3,
        l4,
        hdr_len,
        payload: f.len() - hdr_len,
        seq,
        id: be16(f, l3 + 4)?,
        outer_id,
        flags,
    })
}

/// Header bytes of the two segments are equal but for the per-segment fields.
fn same_headers(a: &[u8], b: &[u8], s: &Seg) -> bool {
    let varying: &[(usize, usize)] = &[
        // Outer IPv4 total length + id, header checksum, UDP length (VXLAN only).
        (16, 20),
        (24, 26),
        (38, 40),
    ];
    let inner: [(usize, usize); 5] = [
        (s.l3 + 2, s.l3 + 6),
        (s.l3 + 10, s.l3 + 12),
        (s.l4 + 4, s.l4 + 8),
        (s.l4 + 13, s.l4 + 14),
        (s.l4 + 16, s.l4 + 18),
    ];
    let mut at = 0;
    let outer = if s.tunnel { varying } else { &[] };
    for &(from, to) in outer.iter().chain(inner.iter()) {
        if a[at..from] != b[at..from] {
            return false;
        }
        at = to;
    }
    a[at..s.hdr_len] == b[at..s.hdr_len]
}

/// The super-packet being built at batch index `idx`.
#[derive(Debug, Clone, Copy)]
struct Head {
    idx: usize,
    first: Seg,
    /// Segments merged so far (the first included).
    count: usize,
    /// Payload bytes so far.
    payload: usize,
    /// The flags of the last merged segment.
    flags: u8,
    /// No more segments may follow (a short or PSH segment was merged).
    closed: bool,
    /// How the outer IPv4 identifications go, decided by the second segment: all equal
    /// (`Some(true)`) or incrementing (`Some(false)`). One run never mixes the two, so
    /// segmenting the merged packet again gives back the same identifications.
    outer_fixed: Option<bool>,
}

impl Head {
    /// Whether `s` follows on from what the head holds.
    fn takes(&self, s: &Seg) -> bool {
        let f = &self.first;
        let k = self.count as u16;
        let inner_total = self.payload + s.payload + f.hdr_len - f.l3;
        !self.closed
            && s.tunnel == f.tunnel
            && s.hdr_len == f.hdr_len
            && s.l4 == f.l4
            && s.payload <= f.payload
            && s.id == f.id.wrapping_add(k)
            && (!f.tunnel
                || match self.outer_fixed {
                    None => s.outer_id == f.outer_id || s.outer_id == f.outer_id.wrapping_add(k),
                    Some(true) => s.outer_id == f.outer_id,
                    Some(false) => s.outer_id == f.outer_id.wrapping_add(k),
                })
            && s.seq == f.seq.wrapping_add(self.payload as u32)
            && inner_total + if f.tunnel { VXLAN_OUTER } else { 0 } <= 65_535
    }
}

/// Merge consecutive TCP segments of one flow in `batch` into super-packets (see the module
/// documentation); VXLAN-encapsulated ones too when `tunnels`. Packets that cannot be merged
/// stay as they are, in order. Returns how many packets were merged into an earlier one (and
/// so left the batch).
pub fn coalesce(batch: &mut Batch, tunnels: bool) -> usize {
    let n = batch.len().min(MAX_LOOK);
    let mut gone = [0u64; MAX_LOOK / 64];
    let mut merged = 0;
    let mut head: Option<Head> = None;
    let pkts = batch.packets_mut();
    for j in 0..n {
        let seg = if pkts[j].meta.offload == Offload::default() {
            parse(pkts[j].data(), tunnels)
        } else {
            None
        };
        let Some(seg) = seg else {
            if let Some(h) = head.take() {
                finish(&mut pkts[h.idx], &h);
            }
            continue;
        };
        if let Some(h) = head.as_mut()
            && h.takes(&seg)
            && same_headers(pkts[h.idx].data(), pkts[j].data(), &seg)
        {
            let (before, after) = pkts.split_at_mut(j);
            if append(&mut before[h.idx], &after[0].data()[seg.hdr_len..]) {
                if h.outer_fixed.is_none() {
                    h.outer_fixed = Some(seg.outer_id == h.first.outer_id);
                }
                h.count += 1;
                h.payload += seg.payload;
                h.flags = seg.flags;
                h.closed = seg.payload < h.first.payload || seg.flags & TCP_PSH != 0;
                gone[j / 64] |= 1 << (j % 64);
                merged += 1;
                continue;
            }
        }
        if let Some(h) = head.take() {
            finish(&mut pkts[h.idx], &h);
        }
        head = Some(Head {
            idx: j,
            first: seg,
            count: 1,
            payload: seg.payload,
            flags: seg.flags,
            closed: seg.flags & TCP_PSH != 0,
            outer_fixed: None,
        });
    }
    if let Some(h) = head.take() {
        finish(&mut pkts[h.idx], &h);
    }
    if merged > 0 {
        let mut r = 0;
        batch.retain(|_| {
            let keep = r >= MAX_LOOK || gone[r / 64] & (1 << (r % 64)) == 0;
            r += 1;
            keep
        });
    }
    merged
}

/// Append `payload` to the frame of `p`, growing its buffer when needed. False when it cannot.
fn append(p: &mut PacketBuf, payload: &[u8]) -> bool {
    if p.tailroom() < payload.len() {
        let len = p.len();
        if len + payload.len() > GRO_ROOM {
            return false;
        }
        let frame = p.data().to_vec();
        p.reserve_frame(GRO_ROOM);
        p.recv_area()[..len].copy_from_slice(&frame);
        if p.set_len(len).is_err() {
            return false;
        }
    }
    match p.push_back(payload.len()) {
        Ok(tail) => {
            tail.copy_from_slice(payload);
            true
        }
        Err(_) => false,
    }
}

/// Turn the head packet into the super-packet of `h` (nothing to do for a single segment).
fn finish(p: &mut PacketBuf, h: &Head) {
    if h.count < 2 {
        return;
    }
    let s = h.first;
    let f = p.data_mut();
    let len = f.len();
    let put = |f: &mut [u8], at: usize, v: u16| f[at..at + 2].copy_from_slice(&v.to_be_bytes());
    let fix_ip = |f: &mut [u8], l3: usize| {
        let ihl = usize::from(f[l3] & 0x0f) * 4;
        put(f, l3 + 2, (len - l3) as u16);
        put(f, l3 + 10, 0);
        let c = !checksum::data(&f[l3..l3 + ihl]);
        put(f, l3 + 10, c);
    };
    fix_ip(f, s.l3);
    f[s.l4 + 13] = h.flags;
    let tcp_len = (len - s.l4) as u32;
    let pseudo = checksum::pseudo_header_v4(ipv4(f, s.l3 + 12), ipv4(f, s.l3 + 16), 6, tcp_len);
    put(f, s.l4 + 16, pseudo);
    if s.tunnel {
        fix_ip(f, 14);
        put(f, 38, (len - 34) as u16);
    }
    let tunnel =
        s.tunnel.then_some(TunnelGso { kind: TunnelGsoKind::Vxlan, outer_len: VXLAN_OUTER as u16 });
    p.meta.offload = Offload {
        csum_partial: Some((s.l4 as u16, 16)),
        gso: Some(Gso {
            kind: GsoKind::TcpV4,
            size: s.payload as u16,
            hdr_len: s.hdr_len as u16,
            tunnel,
        }),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::MAX_BATCH;
    use crate::offload::segment;
    use proptest::prelude::*;

    /// A TCP/IPv4 super-packet of `payload` (ids from `id`), VXLAN-encapsulated (outer id
    /// `outer_id`, UDP checksum 0) when `tunnel`, with its GSO metadata for segment size `mss`.
    fn super_packet(
        payload: &[u8],
        mss: u16,
        seq: u32,
        id: u16,
        outer_id: u16,
        tunnel: bool,
        psh: bool,
    ) -> PacketBuf {
        let mut inner = Vec::new();
        let mut tcp =
            etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 0xa], [2, 0, 0, 0, 0, 0xb])
                .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
                .tcp(40000, 5201, seq, 64_000)
                .ack(7);
        if psh {
            tcp = tcp.psh();
        }
        tcp.write(&mut inner, payload).unwrap();
        inner[18..20].copy_from_slice(&id.to_be_bytes());
        let frame = if tunnel {
            let mut vx = vec![0x08, 0, 0, 0, 0, 0, 42, 0];
            vx.extend_from_slice(&inner);
            let mut f = Vec::new();
            etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 1, 1], [2, 0, 0, 0, 2, 2])
                .ipv4([192, 168, 100, 1], [192, 168, 100, 2], 64)
                .udp(0xc001, VXLAN_PORT)
                .write(&mut f, &vx)
                .unwrap();
            f[18..20].copy_from_slice(&outer_id.to_be_bytes());
            f[40..42].copy_from_slice(&[0, 0]);
            f
        } else {
            inner
        };
        let base = if tunnel { VXLAN_OUTER } else { 0 };
        let mut p = PacketBuf::from_frame(&frame);
        let tunnel = tunnel
            .then_some(TunnelGso { kind: TunnelGsoKind::Vxlan, outer_len: VXLAN_OUTER as u16 });
        p.meta.offload.gso =
            Some(Gso { kind: GsoKind::TcpV4, size: mss, hdr_len: (base + 54) as u16, tunnel });
        p
    }

    fn frames(b: &Batch) -> Vec<Vec<u8>> {
        b.iter().map(|p| p.data().to_vec()).collect()
    }

    proptest! {
        /// Segmenting a super-packet, coalescing the segments and segmenting the result again
        /// gives the same segments byte for byte; the segments became one packet.
        #[test]
        fn coalesce_then_segment_gives_back_the_segments(
            mss in 200u16..1460,
            nseg in 2usize..40,
            last in 1usize..1460,
            seq in any::<u32>(),
            id in any::<u16>(),
            outer_id in any::<u16>(),
            tunnel in any::<bool>(),
            psh in any::<bool>(),
            fill in any::<u8>(),
        ) {
            let last = last.min(usize::from(mss));
            let len = (nseg - 1) * usize::from(mss) + last;
            prop_assume!(len + 54 + 50 <= 65_535);
            let payload: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31) ^ fill).collect();
            let sp = super_packet(&payload, mss, seq, id, outer_id, tunnel, psh);
            let mut segs = Batch::new(MAX_BATCH);
            prop_assert_eq!(segment(&sp, &mut segs).unwrap(), nseg);
            let original = frames(&segs);
            let merged = coalesce(&mut segs, true);
            prop_assert_eq!(merged, nseg - 1);
            prop_assert_eq!(segs.len(), 1);
            let g = segs.packets()[0].meta.offload.gso.unwrap();
            prop_assert_eq!(g.size, mss);
            prop_assert_eq!(g.tunnel.is_some(), tunnel);
            let mut again = Batch::new(MAX_BATCH);
            prop_assert_eq!(segment(&segs.packets()[0], &mut again).unwrap(), nseg);
            prop_assert_eq!(frames(&again), original);
        }
    }

    /// Outer identifications all equal (snic's encapsulation writes 0 with DF) still merge.
    #[test]
    fn fixed_outer_ids_merge() {
        let payload = vec![9u8; 4000];
        let sp = super_packet(&payload, 1000, 1, 1, 0, true, false);
        let mut segs = Batch::new(16);
        segment(&sp, &mut segs).unwrap();
        for p in segs.packets_mut() {
            let f = p.data_mut();
            f[18..20].copy_from_slice(&[0, 0]);
            f[24..26].copy_from_slice(&[0, 0]);
            let c = !checksum::data(&f[14..34]);
            f[24..26].copy_from_slice(&c.to_be_bytes());
        }
        assert_eq!(coalesce(&mut segs, true), 3);
        assert_eq!(segs.len(), 1);
        assert_eq!(segs.packets()[0].len(), VXLAN_OUTER + 54 + 4000);
    }

    /// Outer identifications 5, 5, 7: the second segment fixes the run's pattern (all equal),
    /// so the third, which would fit only an incrementing one, starts a new packet.
    #[test]
    fn mixed_outer_id_patterns_do_not_merge() {
        let payload = vec![3u8; 3000];
        let sp = super_packet(&payload, 1000, 1, 1, 5, true, false);
        let mut segs = Batch::new(16);
        segment(&sp, &mut segs).unwrap();
        assert_eq!(segs.len(), 3);
        for (p, id) in segs.packets_mut().iter_mut().zip([5u16, 5, 7]) {
            let f = p.data_mut();
            f[18..20].copy_from_slice(&id.to_be_bytes());
            f[24..26].copy_from_slice(&[0, 0]);
            let c = !checksum::data(&f[14..34]);
            f[24..26].copy_from_slice(&c.to_be_bytes());
        }
        assert_eq!(coalesce(&mut segs, true), 1);
        assert_eq!(segs.len(), 2);
        assert_eq!(segs.packets()[0].len(), VXLAN_OUTER + 54 + 2000);
        assert_eq!(segs.packets()[1].len(), VXLAN_OUTER + 54 + 1000);
    }

    #[test]
    fn tunnelled_segments_are_left_alone_unless_asked() {
        let payload = vec![7u8; 3000];
        let sp = super_packet(&payload, 1000, 1, 1, 1, true, false);
        let mut segs = Batch::new(16);
        segment(&sp, &mut segs).unwrap();
        let before = frames(&segs);
        assert_eq!(coalesce(&mut segs, false), 0);
        assert_eq!(frames(&segs), before);
    }

    /// What must not merge: a segment with a bad checksum, one after a gap in sequence numbers,
    /// another flow's packet in between (it splits the run), a pure ACK, a segment after a
    /// short one.
    #[test]
    fn only_clean_consecutive_segments_merge() {
        let payload: Vec<u8> = (0..6000u32).map(|i| i as u8).collect();
        let sp = super_packet(&payload, 1000, 100, 5, 0, false, false);
        let mut segs = Batch::new(16);
        segment(&sp, &mut segs).unwrap();
        let orig = frames(&segs);
        // Corrupt segment 2's payload: 0 and 1 merge, 2 stays, 3..5 merge.
        let mut b = Batch::new(16);
        for (i, f) in orig.iter().enumerate() {
            let p = b.push_frame(f).unwrap();
            if i == 2 {
                let n = p.len();
                p.data_mut()[n - 1] ^= 0xff;
            }
        }
        assert_eq!(coalesce(&mut b, false), 1 + 2);
        assert_eq!(b.len(), 3);
        assert_eq!(b.packets()[1].data(), {
            let mut f = orig[2].clone();
            let n = f.len();
            f[n - 1] ^= 0xff;
            f
        });
        assert!(b.packets()[1].meta.offload.gso.is_none());
        // Sequence gap: drop segment 3 from the run.
        let mut b = Batch::new(16);
        for (i, f) in orig.iter().enumerate() {
            if i != 3 {
                b.push_frame(f).unwrap();
            }
        }
        assert_eq!(coalesce(&mut b, false), 2 + 1);
        assert_eq!(b.len(), 2);
        // Another packet (an ARP-like frame) between segments 1 and 2.
        let mut b = Batch::new(16);
        for (i, f) in orig.iter().enumerate() {
            if i == 2 {
                b.push_frame(&[0u8; 60]).unwrap();
            }
            b.push_frame(f).unwrap();
        }
        assert_eq!(coalesce(&mut b, false), 1 + 3);
        assert_eq!(b.len(), 3);
        assert_eq!(b.packets()[1].data(), &[0u8; 60]);
        // A short segment closes the run: [full, short, full] merges the first two only.
        let short = super_packet(&payload[..1500], 1000, 100, 5, 0, false, false);
        let mut b = Batch::new(16);
        segment(&short, &mut b).unwrap();
        let next = b.push_frame(&orig[2]).unwrap();
        let _ = next;
        assert_eq!(coalesce(&mut b, false), 1);
        assert_eq!(b.len(), 2);
    }
}
