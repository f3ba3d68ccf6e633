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
//! [`coalesce_udp_tunnel`] is the counterpart for ports that take UDP GSO but not UDP-tunnel
//! super-packets (AF_PACKET): consecutive VXLAN datagrams of one outer flow become one
//! `GSO_UDP_L4` buffer, their payloads untouched.
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

/// Most datagrams merged into one UDP GSO buffer (the kernel's `UDP_MAX_SEGMENTS`).
const UDP_MAX_MERGE: usize = crate::offload::UDP_GSO_MAX_SEGMENTS;
/// Outer headers of a VXLAN/IPv4 datagram up to the UDP payload.
const UDP_OUTER: usize = 14 + 20 + 8;

/// A VXLAN/IPv4 datagram [`coalesce_udp_tunnel`] may merge: its UDP payload length and IPv4
/// identification.
fn parse_vxlan_datagram(f: &[u8]) -> Option<(usize, u16)> {
    if be16(f, 12)? != 0x0800 {
        return None;
    }
    let (ihl, proto) = ip_ok(f, 14)?;
    if ihl != 20
        || proto != 17
        || be16(f, 36)? != VXLAN_PORT
        || be16(f, 40)? != 0
        || usize::from(be16(f, 38)?) != f.len() - 34
        || f.len() <= UDP_OUTER
    {
        return None;
    }
    Some((f.len() - UDP_OUTER, be16(f, 18)?))
}

/// The UDP GSO buffer being built at batch index `idx` by [`coalesce_udp_tunnel`].
#[derive(Debug, Clone, Copy)]
struct UdpHead {
    idx: usize,
    /// The first datagram's UDP payload length: every piece's but the last.
    size: usize,
    id: u16,
    /// Datagrams merged so far (the first included).
    count: usize,
    /// UDP payload bytes so far.
    payload: usize,
    /// A shorter datagram was merged: nothing may follow.
    closed: bool,
    /// The identifications are all equal (`Some(true)`, DF set) or incrementing.
    fixed_id: Option<bool>,
}

impl UdpHead {
    fn takes(&self, size: usize, id: u16) -> bool {
        let k = self.count as u16;
        !self.closed
            && self.count < UDP_MAX_MERGE
            && size <= self.size
            && 20 + 8 + self.payload + size <= 65_535
            && match self.fixed_id {
                None => id == self.id || id == self.id.wrapping_add(k),
                Some(true) => id == self.id,
                Some(false) => id == self.id.wrapping_add(k),
            }
    }
}

/// Outer headers of two VXLAN/IPv4 datagrams are equal but for the IPv4 total length,
/// identification and header checksum and the UDP length.
fn same_udp_headers(a: &[u8], b: &[u8]) -> bool {
    a[..16] == b[..16] && a[20..24] == b[20..24] && a[26..38] == b[26..38] && a[40..42] == b[40..42]
}

/// Merge consecutive VXLAN/IPv4 datagrams of one outer flow in `batch` into UDP GSO buffers, for
/// a port that takes `GSO_UDP_L4` super-packets but not UDP-tunnel ones (AF_PACKET): the
/// kernel cuts each buffer back into the datagrams with one write and one skb instead of one
/// each. Packets merge when they carry no offload state and are untagged Ethernet + IPv4 (no
/// options, no fragment bits but DF, valid header checksum, no bytes past the IP packet) + UDP
/// to port 4789 with a zero checksum (nothing to verify, so merging hides no corruption), the
/// headers are equal but for the per-datagram fields, the identifications are all equal or
/// follow on, and every UDP payload is the first one's size but the last, which may be
/// smaller; at most [`crate::offload::UDP_GSO_MAX_SEGMENTS`] datagrams and 64 KiB of IP
/// datagram per buffer. Nothing inside the UDP payloads (VXLAN, inner frames) is read or
/// changed.
///
/// A buffer keeps the first datagram's headers and metadata with the lengths and header
/// checksum of the whole, the UDP checksum partial (the pseudo-header sum: the kernel
/// computes each datagram's, as NEEDS_CSUM requires), and `gso` [`GsoKind::UdpL4`] with the
/// first datagram's payload size and 42 bytes of headers. Cut by the kernel, it gives back the
/// datagrams with their UDP checksums computed and, where they were all equal (DF set, RFC
/// 6864), the identifications numbered on from the first. Returns how many datagrams were
/// merged into an earlier one.
pub fn coalesce_udp_tunnel(batch: &mut Batch) -> usize {
    let n = batch.len().min(MAX_LOOK);
    let mut gone = [0u64; MAX_LOOK / 64];
    let mut merged = 0;
    let mut head: Option<UdpHead> = None;
    let pkts = batch.packets_mut();
    for j in 0..n {
        let dgram = if pkts[j].meta.offload == Offload::default() {
            parse_vxlan_datagram(pkts[j].data())
        } else {
            None
        };
        let Some((size, id)) = dgram else {
            if let Some(h) = head.take() {
                finish_udp(&mut pkts[h.idx], &h);
            }
            continue;
        };
        if let Some(h) = head.as_mut()
            && h.takes(size, id)
            && same_udp_headers(pkts[h.idx].data(), pkts[j].data())
        {
            let (before, after) = pkts.split_at_mut(j);
            if append(&mut before[h.idx], &after[0].data()[UDP_OUTER..]) {
                if h.fixed_id.is_none() {
                    h.fixed_id = Some(id == h.id);
                }
                h.count += 1;
                h.payload += size;
                h.closed = size < h.size;
                gone[j / 64] |= 1 << (j % 64);
                merged += 1;
                continue;
            }
        }
        if let Some(h) = head.take() {
            finish_udp(&mut pkts[h.idx], &h);
        }
        head = Some(UdpHead {
            idx: j,
            size,
            id,
            count: 1,
            payload: size,
            closed: false,
            fixed_id: None,
        });
    }
    if let Some(h) = head.take() {
        finish_udp(&mut pkts[h.idx], &h);
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

/// Turn the head datagram into the UDP GSO buffer of `h` (nothing to do for a single one).
fn finish_udp(p: &mut PacketBuf, h: &UdpHead) {
    if h.count < 2 {
        return;
    }
    let f = p.data_mut();
    let len = f.len();
    let put = |f: &mut [u8], at: usize, v: u16| f[at..at + 2].copy_from_slice(&v.to_be_bytes());
    put(f, 16, (len - 14) as u16);
    put(f, 24, 0);
    let c = !checksum::data(&f[14..34]);
    put(f, 24, c);
    let ulen = len - 34;
    put(f, 38, ulen as u16);
    put(f, 40, checksum::pseudo_header_v4(ipv4(f, 26), ipv4(f, 30), 17, ulen as u32));
    p.meta.offload = Offload {
        csum_partial: Some((34, 6)),
        gso: Some(Gso {
            kind: GsoKind::UdpL4,
            size: h.size as u16,
            hdr_len: UDP_OUTER as u16,
            tunnel: None,
        }),
    };
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

    /// Cut every UDP GSO buffer of `b` as the kernel does (other packets as they are), with
    /// each datagram's UDP checksum checked and then zeroed (the originals had none).
    fn cut_udp(b: &Batch) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        for p in b.iter() {
            if p.meta.offload.gso.is_none() {
                v.push(p.data().to_vec());
                continue;
            }
            for mut d in crate::offload::tests::kernel_udp_segment(p) {
                // kernel_udp_segment computed the checksum in full; a datagram sums to 0xffff.
                let ulen = d.len() - 34;
                let pseudo =
                    checksum::pseudo_header_v4(ipv4(&d, 26), ipv4(&d, 30), 17, ulen as u32);
                assert_eq!(checksum::combine(&[pseudo, checksum::data(&d[34..])]), 0xffff);
                d[40..42].copy_from_slice(&[0, 0]);
                v.push(d);
            }
        }
        v
    }

    /// Set the outer IPv4 identification of VXLAN frame `f` and fix its header checksum.
    fn set_outer_id(f: &mut [u8], id: u16) {
        f[18..20].copy_from_slice(&id.to_be_bytes());
        f[24..26].copy_from_slice(&[0, 0]);
        let c = !checksum::data(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
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

    proptest! {
        /// Software-segmented VXLAN datagrams of one flow merged into UDP GSO buffers and cut
        /// as the kernel does give back the datagrams byte for byte (their zero UDP checksums
        /// aside, which the kernel computes); at most 64 datagrams per buffer.
        #[test]
        fn udp_coalesce_then_kernel_cut_gives_back_the_datagrams(
            mss in 200u16..1460,
            nseg in 1usize..100,
            last in 1usize..1460,
            seq in any::<u32>(),
            outer_id in any::<u16>(),
            psh in any::<bool>(),
        ) {
            let last = last.min(usize::from(mss));
            let len = (nseg - 1) * usize::from(mss) + last;
            prop_assume!(len + 54 + 50 <= 65_535);
            let payload: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(29)).collect();
            let sp = super_packet(&payload, mss, seq, 3, outer_id, true, psh);
            let mut segs = Batch::new(MAX_BATCH);
            prop_assert_eq!(segment(&sp, &mut segs).unwrap(), nseg);
            let original = frames(&segs);
            let merged = coalesce_udp_tunnel(&mut segs);
            let buffers = original.chunks(UDP_MAX_MERGE).count();
            // 64 KiB of IP datagram may split a run before 64 datagrams.
            prop_assert!(segs.len() >= buffers);
            prop_assert_eq!(merged, nseg - segs.len());
            for p in segs.iter() {
                prop_assert!(p.len() - 14 <= 65_535);
            }
            prop_assert_eq!(cut_udp(&segs), original);
        }
    }

    /// Equal outer identifications (DF set) merge; the kernel numbers them on from the first.
    /// A datagram of another flow, a shorter one followed by more, and one with a UDP checksum
    /// or offload state end a run.
    #[test]
    fn udp_coalesce_keeps_to_one_flow_and_clean_datagrams() {
        let sp = super_packet(&vec![5u8; 4000], 1000, 1, 1, 0, true, false);
        let mut segs = Batch::new(16);
        segment(&sp, &mut segs).unwrap();
        for p in segs.packets_mut() {
            set_outer_id(p.data_mut(), 0);
        }
        let fixed = frames(&segs);
        assert_eq!(coalesce_udp_tunnel(&mut segs), 3);
        let cut = cut_udp(&segs);
        for (i, (c, o)) in cut.iter().zip(&fixed).enumerate() {
            assert_eq!(u16::from_be_bytes([c[18], c[19]]), i as u16);
            let mut c = c.clone();
            set_outer_id(&mut c, 0);
            assert_eq!(&c, o);
        }
        // Runs broken: [a0 a1 b a2 a3(short) a4 csum offload]
        let sp = super_packet(&vec![7u8; 5000], 1000, 1, 1, 10, true, false);
        let mut a = Batch::new(16);
        segment(&sp, &mut a).unwrap();
        let a: Vec<Vec<u8>> = frames(&a);
        let mut other = a[0].clone();
        other[37] ^= 1; // another destination port: not VXLAN, not merged
        let mut short = a[3].clone();
        short.truncate(short.len() - 10);
        let ulen = (short.len() - 34) as u16;
        short[38..40].copy_from_slice(&ulen.to_be_bytes());
        let total = (short.len() - 14) as u16;
        short[16..18].copy_from_slice(&total.to_be_bytes());
        set_outer_id(&mut short, 13);
        let mut csum = a[4].clone();
        csum[40] = 1;
        let mut b = Batch::new(16);
        for f in [&a[0], &a[1], &other, &a[2], &short, &a[4], &csum] {
            b.push_frame(f).unwrap();
        }
        b.push_frame(&a[1]).unwrap().meta.offload.csum_partial = Some((34, 6));
        assert_eq!(coalesce_udp_tunnel(&mut b), 2);
        let lens: Vec<usize> = b.iter().map(|p| p.len()).collect();
        let (n, s) = (a[0].len(), short.len());
        assert_eq!(lens, [2 * n - 42, n, s + n - 42, n, n, a[1].len()]);
        assert!(b.packets()[0].meta.offload.gso.is_some());
        assert!(b.packets()[2].meta.offload.gso.is_some(), "a2 and the short one: one buffer");
        assert!(b.packets()[3].meta.offload.gso.is_none(), "nothing follows a short one");
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
