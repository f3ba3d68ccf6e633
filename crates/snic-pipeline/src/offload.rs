//! Software segmentation and checksum offload, for ports that cannot take super-packets.
//!
//! AF_PACKET and TAP ports hand over GSO super-packets (up to 64 KiB, `meta.offload.gso`) and
//! frames whose L4 checksum is only partial (`meta.offload.csum_partial`). When such a packet
//! leaves by a port without GSO capability (`snic_io::PortCaps::gso` false), the I/O layer calls:
//!
//! - [`segment`]: cut the super-packet into wire-sized frames, each a complete packet with its own
//!   headers and full checksums. TCP (over IPv4 and IPv6): sequence numbers advance by the
//!   payload sent, FIN and PSH stay on the last segment only, CWR on the first only. UDP
//!   (`UdpL4`): each segment is a datagram with its own UDP length. IPv4: total length and header
//!   checksum per segment, the identification incremented per segment. IPv6: payload length per
//!   segment.
//!   Tunnelled super-packets (`gso.tunnel`: the vSwitch pushed VXLAN or NVGRE headers on one)
//!   are segmented by their inner payload, the outer headers replicated in front of each
//!   segment with their own lengths, IPv4 identification and checksums ("tunnel TSO"). The I/O
//!   layer does so for every port that cannot take them whole (only a TAP port with the
//!   UDP-tunnel virtio-net header of Linux 6.17+ can, for VXLAN over IPv4) and that cannot take
//!   the cheaper fallback below either.
//! - [`udp_tunnel_gso`]: the same segments for a VXLAN super-packet, laid out as one UDP GSO
//!   buffer (`GSO_UDP_L4`): the outer headers once, then each segment's outer UDP payload
//!   (VXLAN, inner headers, one MSS), every piece `gso.size` bytes but the last. A port that
//!   takes UDP GSO but not UDP-tunnel GSO (AF_PACKET's `PACKET_VNET_HDR` refuses the tunnel
//!   types) hands it to the kernel as one write and one skb; the kernel cuts the datagrams.
//! - [`complete_checksum`]: finish a partial L4 checksum in place.
//!
//! The headers are located by parsing the frame here (Ethernet, up to four 802.1Q/802.1ad
//! tags, IPv4 with options or IPv6 with hop-by-hop/routing/destination-options extension
//! headers, then TCP or UDP; for a tunnelled super-packet first the outer IP and UDP + VXLAN or
//! GRE headers, then the inner frame the same way), so the functions do not depend on the
//! parse stage having run. Not handled: Geneve outer headers, tunnels inside tunnels, and
//! outer IPv4 fragments.
//! Nothing here allocates per packet except where the output batch must grow a buffer the first
//! time it is used, and nothing panics on any input: malformed frames are [`OffloadError`]s.

use crate::buf::{Batch, PacketBuf};
use crate::meta::{Gso, GsoKind, Offload, TunnelGso, TunnelGsoKind};
use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};
use snic_wire::checksum;

/// Why a packet could not be segmented or checksummed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OffloadError {
    /// The packet has no GSO metadata (nothing to segment).
    NotGso,
    /// The packet has no partial checksum to complete.
    NoPartialChecksum,
    /// The frame ended before a header did.
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        got: usize,
    },
    /// The frame is not IPv4 or IPv6 (the EtherType found).
    NotIp(u16),
    /// The GSO kind says TCP or UDP but the IP header carries another protocol (its number), or
    /// the IP version does not match the kind.
    WrongProtocol(u8),
    /// A header field is inconsistent (which one).
    BadHeader(&'static str),
    /// An IPv4 super-packet is a fragment; fragments cannot be segmented.
    Fragment,
    /// The segment size is zero.
    ZeroSegmentSize,
    /// The output batch has room for fewer segments than the packet needs; nothing was added.
    NoRoom {
        /// Segments needed.
        need: usize,
        /// Free slots in the batch.
        have: usize,
    },
    /// The packet is not a super-packet inside a UDP tunnel (VXLAN), so it has no UDP to
    /// segment ([`udp_tunnel_gso`]).
    NotUdpTunnel,
    /// The partial checksum's position lies outside the frame.
    ChecksumOutOfRange {
        /// `csum_start`.
        start: u16,
        /// `csum_offset`.
        offset: u16,
        /// Frame length.
        len: usize,
    },
}

impl fmt::Display for OffloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            OffloadError::NotGso => write!(f, "packet is not a GSO super-packet"),
            OffloadError::NoPartialChecksum => write!(f, "packet has no partial checksum"),
            OffloadError::Truncated { need, got } => {
                write!(f, "frame truncated: need {need} bytes, got {got}")
            }
            OffloadError::NotIp(t) => write!(f, "not an IP frame (EtherType {t:#06x})"),
            OffloadError::WrongProtocol(p) => {
                write!(f, "IP protocol {p} does not match the GSO kind")
            }
            OffloadError::BadHeader(what) => write!(f, "bad header: {what}"),
            OffloadError::Fragment => write!(f, "IPv4 fragment cannot be segmented"),
            OffloadError::ZeroSegmentSize => write!(f, "GSO segment size is zero"),
            OffloadError::NoRoom { need, have } => {
                write!(f, "output batch too small: need {need} slots, have {have}")
            }
            OffloadError::NotUdpTunnel => write!(f, "packet is not a UDP-tunnelled super-packet"),
            OffloadError::ChecksumOutOfRange { start, offset, len } => {
                write!(f, "partial checksum at {start}+{offset} lies outside the {len}-byte frame")
            }
        }
    }
}

impl std::error::Error for OffloadError {}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const PROTO_GRE: u8 = 47;
/// GRE protocol type of NVGRE: transparent Ethernet bridging.
const ETHERTYPE_TEB: u16 = 0x6558;
/// VXLAN header length (after the outer UDP header).
const VXLAN_LEN: usize = 8;
/// NVGRE header length (GRE with the key bit).
const NVGRE_LEN: usize = 8;
const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;
/// Most VLAN tags walked before giving up.
const MAX_TAGS: usize = 4;
/// Most IPv6 extension headers walked before giving up.
const MAX_EXT: usize = 8;

fn be16(b: &[u8], at: usize) -> Result<u16, OffloadError> {
    match b.get(at..at + 2) {
        Some(s) => Ok(u16::from_be_bytes([s[0], s[1]])),
        None => Err(OffloadError::Truncated { need: at + 2, got: b.len() }),
    }
}

fn byte(b: &[u8], at: usize) -> Result<u8, OffloadError> {
    b.get(at).copied().ok_or(OffloadError::Truncated { need: at + 1, got: b.len() })
}

/// Where the headers of an IP frame are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    /// Start of the IP header.
    l3: usize,
    /// True for IPv4.
    v4: bool,
    /// Start of the L4 header.
    l4: usize,
    /// IP protocol / final next header.
    proto: u8,
    /// End of the IP packet (frame bytes past it are link padding).
    end: usize,
}

impl Layout {
    /// The same layout for a frame found `base` bytes into a larger one.
    fn shifted(self, base: usize) -> Layout {
        Layout { l3: self.l3 + base, l4: self.l4 + base, end: self.end + base, ..self }
    }
}

/// Walk Ethernet, VLAN tags and the IP header(s) of `f`.
fn layout(f: &[u8]) -> Result<Layout, OffloadError> {
    let mut at = 12;
    let mut ethertype = be16(f, at)?;
    let mut tags = 0;
    while ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ {
        tags += 1;
        if tags > MAX_TAGS {
            return Err(OffloadError::BadHeader("too many VLAN tags"));
        }
        at += 4;
        ethertype = be16(f, at)?;
    }
    let l3 = at + 2;
    match ethertype {
        ETHERTYPE_IPV4 => {
            let vihl = byte(f, l3)?;
            if vihl >> 4 != 4 {
                return Err(OffloadError::BadHeader("IPv4 version"));
            }
            let ihl = usize::from(vihl & 0x0f) * 4;
            if ihl < 20 {
                return Err(OffloadError::BadHeader("IPv4 header length"));
            }
            let total = usize::from(be16(f, l3 + 2)?);
            if total < ihl {
                return Err(OffloadError::BadHeader("IPv4 total length"));
            }
            let end = l3 + total;
            if end > f.len() {
                return Err(OffloadError::Truncated { need: end, got: f.len() });
            }
            let frag = be16(f, l3 + 6)?;
            if frag & 0x3fff != 0 {
                return Err(OffloadError::Fragment);
            }
            Ok(Layout { l3, v4: true, l4: l3 + ihl, proto: byte(f, l3 + 9)?, end })
        }
        ETHERTYPE_IPV6 => {
            if byte(f, l3)? >> 4 != 6 {
                return Err(OffloadError::BadHeader("IPv6 version"));
            }
            let plen = usize::from(be16(f, l3 + 4)?);
            // Payload length zero (a jumbogram) is refused: super-packets here are <= 64 KiB.
            let end = l3 + 40 + plen;
            if end > f.len() {
                return Err(OffloadError::Truncated { need: end, got: f.len() });
            }
            let mut next = byte(f, l3 + 6)?;
            let mut l4 = l3 + 40;
            let mut walked = 0;
            // Hop-by-hop, routing, destination options: (next, len in 8-byte units - 1).
            while matches!(next, 0 | 43 | 60) {
                walked += 1;
                if walked > MAX_EXT {
                    return Err(OffloadError::BadHeader("too many IPv6 extension headers"));
                }
                let n = byte(f, l4)?;
                let len = (usize::from(byte(f, l4 + 1)?) + 1) * 8;
                next = n;
                l4 += len;
            }
            if l4 > end {
                return Err(OffloadError::BadHeader("IPv6 extension headers overrun the packet"));
            }
            Ok(Layout { l3, v4: false, l4, proto: next, end })
        }
        other => Err(OffloadError::NotIp(other)),
    }
}

/// The folded pseudo-header sum for an L4 segment of `l4_len` bytes.
fn pseudo_sum(f: &[u8], lay: &Layout, l4_len: usize) -> u16 {
    let len = u32::try_from(l4_len).unwrap_or(u32::MAX);
    if lay.v4 {
        let a = |at: usize| Ipv4Addr::new(f[at], f[at + 1], f[at + 2], f[at + 3]);
        checksum::pseudo_header_v4(a(lay.l3 + 12), a(lay.l3 + 16), lay.proto, len)
    } else {
        let a = |at: usize| {
            let mut b = [0u8; 16];
            b.copy_from_slice(&f[at..at + 16]);
            Ipv6Addr::from(b)
        };
        checksum::pseudo_header_v6(a(lay.l3 + 8), a(lay.l3 + 24), lay.proto, len)
    }
}

/// Recompute the IPv4 header checksum of the header at `l3` with length `ihl`.
fn fix_ipv4_checksum(f: &mut [u8], l3: usize, ihl: usize) {
    f[l3 + 10] = 0;
    f[l3 + 11] = 0;
    let c = !checksum::data(&f[l3..l3 + ihl]);
    f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
}

/// Compute and store the full L4 checksum of the segment in `f` (headers already final).
fn fix_l4_checksum(f: &mut [u8], lay: &Layout, csum_at: usize, udp: bool) {
    let l4_len = f.len() - lay.l4;
    f[csum_at] = 0;
    f[csum_at + 1] = 0;
    let mut c = !checksum::combine(&[pseudo_sum(f, lay, l4_len), checksum::data(&f[lay.l4..])]);
    if udp && c == 0 {
        c = 0xffff;
    }
    f[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
}

/// Where the outer headers of a tunnelled super-packet are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Outer {
    /// The outer IP header's layout (its `end` bounds the inner frame).
    lay: Layout,
    /// VXLAN (outer UDP length and checksum to fix per segment); NVGRE otherwise.
    udp: bool,
    /// Start of the inner Ethernet header.
    inner: usize,
}

/// Walk the outer headers of a tunnelled super-packet and check they are what `t` says.
fn outer_layout(f: &[u8], t: TunnelGso) -> Result<Outer, OffloadError> {
    let lay = layout(f)?;
    let inner = usize::from(t.outer_len);
    let udp = match t.kind {
        TunnelGsoKind::Vxlan => {
            if lay.proto != PROTO_UDP {
                return Err(OffloadError::WrongProtocol(lay.proto));
            }
            if lay.l4 + 8 + VXLAN_LEN != inner {
                return Err(OffloadError::BadHeader("VXLAN outer header length"));
            }
            true
        }
        TunnelGsoKind::Nvgre => {
            if lay.proto != PROTO_GRE {
                return Err(OffloadError::WrongProtocol(lay.proto));
            }
            if lay.l4 + NVGRE_LEN != inner {
                return Err(OffloadError::BadHeader("NVGRE outer header length"));
            }
            if be16(f, lay.l4 + 2)? != ETHERTYPE_TEB {
                return Err(OffloadError::BadHeader("NVGRE protocol type"));
            }
            false
        }
    };
    // The inner Ethernet header lies inside the outer IP datagram.
    if inner + 14 > lay.end {
        return Err(OffloadError::Truncated { need: inner + 14, got: lay.end });
    }
    Ok(Outer { lay, udp, inner })
}

/// Cut the GSO super-packet `pkt` into segments appended to `out`, each with complete headers
/// and checksums and with `meta.offload` cleared (the rest of the metadata is copied). Returns
/// how many segments were added. A super-packet whose payload fits one segment still produces
/// one (fully checksummed) frame.
///
/// A tunnelled super-packet (`gso.tunnel`: VXLAN or NVGRE headers pushed in front of it) is cut
/// by its inner L4 payload; each segment is the outer headers, the inner headers and one piece.
/// The inner headers are fixed as for a plain super-packet; the outer IPv4 total length,
/// identification (incremented per segment) and header checksum, or the outer IPv6 payload
/// length, and the outer UDP length are set per segment. The outer UDP checksum is computed in
/// full over IPv6 and left 0 over IPv4 (as the encapsulation wrote it; a non-zero one is
/// computed too).
///
/// Fails without adding anything when the frame is malformed or `out` has fewer free slots
/// than segments needed ([`OffloadError::NoRoom`]). A partial checksum on the super-packet
/// (`csum_partial`) is ignored: every segment's checksum is computed in full, so callers use
/// [`complete_checksum`] only for frames that are not super-packets.
pub fn segment(pkt: &PacketBuf, out: &mut Batch) -> Result<usize, OffloadError> {
    let plan = Plan::new(pkt)?;
    let nseg = plan.nseg;
    let have = out.max() - out.len();
    if nseg > have {
        return Err(OffloadError::NoRoom { need: nseg, have });
    }
    let mut meta = pkt.meta.clone();
    meta.offload = Offload::default();
    for i in 0..nseg {
        let Some(seg) = out.push_slot() else {
            // Checked above; unreachable in practice but never a panic.
            return Err(OffloadError::NoRoom { need: nseg - i, have: 0 });
        };
        plan.write_into(seg, i);
        seg.meta = meta.clone();
    }
    Ok(nseg)
}

/// Most segments the kernel takes in one `GSO_UDP_L4` buffer (`UDP_MAX_SEGMENTS` is 64 in
/// older kernels, 128 from 6.9; the smaller is used).
pub const UDP_GSO_MAX_SEGMENTS: usize = 64;

/// Lay out the VXLAN-tunnelled TCP super-packet `pkt` as UDP GSO buffers appended to `out`
/// (usually one), for a port that takes `GSO_UDP_L4` super-packets but not UDP-tunnel ones (an
/// AF_PACKET socket with `PACKET_VNET_HDR`). Returns how many buffers were added.
///
/// Each buffer is the outer headers once (Ethernet, IP, UDP) followed by the concatenated
/// outer UDP payloads of the segments [`segment`] would produce: VXLAN header, inner Ethernet,
/// inner IP and TCP headers fixed per segment (lengths, identifications, sequence numbers,
/// flags, full checksums) and one MSS of payload. Every piece but the last is exactly
/// `gso.size` bytes, so the kernel's UDP segmentation cutting at `gso.size` gives back
/// [`segment`]'s frames: outer IPv4 identifications numbered on from the buffer's, lengths and
/// the IPv4 header checksum per datagram. The one difference: the kernel computes the outer
/// UDP checksum, also over IPv4 where [`segment`] leaves it 0 (the kernel requires NEEDS_CSUM
/// for UDP GSO). The buffer's `meta.offload` says so: `gso` is [`GsoKind::UdpL4`] with the
/// piece size and the outer header length, `csum_partial` points at the outer UDP checksum,
/// which holds the pseudo-header sum of the buffer's UDP length.
///
/// A buffer holds at most [`UDP_GSO_MAX_SEGMENTS`] pieces and 64 KiB of IP datagram; a
/// super-packet that needs more gets more buffers. A buffer of one piece is a plain segment
/// (offload state cleared), as [`segment`] writes it.
///
/// Errors: [`OffloadError::NotUdpTunnel`] for anything but a VXLAN-tunnelled super-packet
/// (NVGRE has no UDP to segment: use [`segment`]), the errors of [`segment`] otherwise; nothing
/// is added on error.
pub fn udp_tunnel_gso(pkt: &PacketBuf, out: &mut Batch) -> Result<usize, OffloadError> {
    let plan = Plan::new(pkt)?;
    let Some(o) = plan.outer.filter(|o| o.udp) else {
        return Err(OffloadError::NotUdpTunnel);
    };
    // Outer headers up to the UDP payload, and the size of every piece but the last.
    let ohl = o.lay.l4 + 8;
    let piece = plan.hdr_len - ohl + plan.mss;
    // IP datagram limit: the outer IP header (IPv4) or extension headers (IPv6), the UDP
    // header, then the pieces.
    let ip_over = o.lay.l4 - o.lay.l3 - if o.lay.v4 { 0 } else { 40 } + 8;
    let per_buf = (usize::from(u16::MAX).saturating_sub(ip_over) / piece).min(UDP_GSO_MAX_SEGMENTS);
    let Ok(piece16) = u16::try_from(piece) else {
        return Err(OffloadError::BadHeader("UDP GSO piece size"));
    };
    if per_buf < 2 {
        return Err(OffloadError::BadHeader("UDP GSO piece size"));
    }
    let nbuf = plan.nseg.div_ceil(per_buf);
    let have = out.max() - out.len();
    if nbuf > have {
        return Err(OffloadError::NoRoom { need: nbuf, have });
    }
    let mut plain = pkt.meta.clone();
    plain.offload = Offload::default();
    let mut gso = pkt.meta.clone();
    gso.offload = Offload {
        csum_partial: Some((o.lay.l4 as u16, 6)),
        gso: Some(Gso { kind: GsoKind::UdpL4, size: piece16, hdr_len: ohl as u16, tunnel: None }),
    };
    for b in 0..nbuf {
        let first = b * per_buf;
        let k = (plan.nseg - first).min(per_buf);
        let Some(buf) = out.push_slot() else {
            // Checked above; unreachable in practice but never a panic.
            return Err(OffloadError::NoRoom { need: nbuf - b, have: 0 });
        };
        if k == 1 {
            plan.write_into(buf, first);
            buf.meta = plain.clone();
            continue;
        }
        let last = first + k - 1;
        let total = (k - 1) * piece + plan.seg_len(last);
        buf.reserve_frame(total);
        let area = buf.recv_area();
        // Last piece first: each segment's outer headers land on the tail of the headers of
        // the one after it, already written and no longer needed; the first segment's stay.
        for j in (0..k).rev() {
            let at = j * piece;
            let len = plan.seg_len(first + j);
            plan.write(&mut area[at..at + len], first + j, false);
        }
        let s = &mut area[..total];
        fix_ip(s, &o.lay, plan.outer_id.wrapping_add(first as u16), o.lay.l4 - o.lay.l3);
        let ulen = total - o.lay.l4;
        s[o.lay.l4 + 4..o.lay.l4 + 6].copy_from_slice(&(ulen as u16).to_be_bytes());
        let pseudo = pseudo_sum(s, &o.lay, ulen);
        s[o.lay.l4 + 6..o.lay.l4 + 8].copy_from_slice(&pseudo.to_be_bytes());
        // Cannot fail: reserve_frame made room for `total` bytes.
        let _ = buf.set_len(total);
        buf.meta = gso.clone();
    }
    Ok(nbuf)
}

/// A super-packet checked and measured for segmentation: where its headers are, how many
/// segments it makes, and the per-segment fields that advance.
#[derive(Debug, Clone, Copy)]
struct Plan<'a> {
    /// The super-packet's frame.
    f: &'a [u8],
    /// The outer headers of a tunnelled one.
    outer: Option<Outer>,
    /// The (inner) IP and L4 headers, in frame offsets.
    lay: Layout,
    tcp: bool,
    /// End of the (inner) L4 header: every segment starts with `f[..hdr_len]`.
    hdr_len: usize,
    mss: usize,
    nseg: usize,
    ip_id: u16,
    seq0: u32,
    outer_id: u16,
    /// Whether the outer UDP checksum is computed per segment.
    outer_udp_sum: bool,
}

impl<'a> Plan<'a> {
    fn new(pkt: &'a PacketBuf) -> Result<Plan<'a>, OffloadError> {
        let gso = pkt.meta.offload.gso.ok_or(OffloadError::NotGso)?;
        let f = pkt.data();
        let outer = gso.tunnel.map(|t| outer_layout(f, t)).transpose()?;
        // The inner frame: the whole frame, or what follows the outer headers up to the end
        // of the outer IP datagram (`outer_layout` checked `inner + 14 <= end <= f.len()`).
        let (base, limit) = outer.map_or((0, f.len()), |o| (o.inner, o.lay.end));
        let inner_frame = f.get(base..limit).ok_or(OffloadError::BadHeader("tunnel bounds"))?;
        let lay = layout(inner_frame)?.shifted(base);
        let (tcp, v4_expected) = match gso.kind {
            GsoKind::TcpV4 => (true, Some(true)),
            GsoKind::TcpV6 => (true, Some(false)),
            GsoKind::UdpL4 => (false, None),
        };
        if v4_expected.is_some_and(|v4| v4 != lay.v4) {
            return Err(OffloadError::BadHeader("IP version does not match the GSO kind"));
        }
        let want_proto = if tcp { PROTO_TCP } else { PROTO_UDP };
        if lay.proto != want_proto {
            return Err(OffloadError::WrongProtocol(lay.proto));
        }
        let l4_hdr = if tcp {
            let doff = usize::from(byte(f, lay.l4 + 12)? >> 4) * 4;
            if doff < 20 {
                return Err(OffloadError::BadHeader("TCP data offset"));
            }
            doff
        } else {
            8
        };
        let hdr_len = lay.l4 + l4_hdr;
        if hdr_len > lay.end {
            return Err(OffloadError::Truncated { need: hdr_len, got: lay.end });
        }
        let mss = usize::from(gso.size);
        if mss == 0 {
            return Err(OffloadError::ZeroSegmentSize);
        }
        let nseg = (lay.end - hdr_len).div_ceil(mss).max(1);
        let ip_id = if lay.v4 { be16(f, lay.l3 + 4)? } else { 0 };
        let seq0 = if tcp {
            u32::from_be_bytes([f[lay.l4 + 4], f[lay.l4 + 5], f[lay.l4 + 6], f[lay.l4 + 7]])
        } else {
            0
        };
        // Outer: IPv4 identification and whether the outer UDP checksum is to be computed.
        let (outer_id, outer_udp_sum) = match outer {
            Some(o) => (
                if o.lay.v4 { be16(f, o.lay.l3 + 4)? } else { 0 },
                o.udp && (!o.lay.v4 || be16(f, o.lay.l4 + 6)? != 0),
            ),
            None => (0, false),
        };
        Ok(Plan { f, outer, lay, tcp, hdr_len, mss, nseg, ip_id, seq0, outer_id, outer_udp_sum })
    }

    /// Payload bytes of segment `i`.
    fn chunk(&self, i: usize) -> &'a [u8] {
        let payload = &self.f[self.hdr_len..self.lay.end];
        let lo = (i * self.mss).min(payload.len());
        &payload[lo..(lo + self.mss).min(payload.len())]
    }

    /// Frame length of segment `i`.
    fn seg_len(&self, i: usize) -> usize {
        self.hdr_len + self.chunk(i).len()
    }

    /// Write segment `i` as a frame of its own into `seg` (the metadata is left to the caller).
    fn write_into(&self, seg: &mut PacketBuf, i: usize) {
        let len = self.seg_len(i);
        seg.reserve_frame(len);
        self.write(&mut seg.recv_area()[..len], i, true);
        // Cannot fail: reserve_frame made room for `len` bytes.
        let _ = seg.set_len(len);
    }

    /// Write segment `i` into `s` (exactly [`Plan::seg_len`] bytes): the headers, its payload,
    /// then the (inner) headers fixed and, with `fix_outer`, the outer ones.
    fn write(&self, s: &mut [u8], i: usize, fix_outer: bool) {
        let (hdr_len, lay) = (self.hdr_len, self.lay);
        let chunk = self.chunk(i);
        s[..hdr_len].copy_from_slice(&self.f[..hdr_len]);
        s[hdr_len..].copy_from_slice(chunk);
        let last = i + 1 == self.nseg;

        // L3 lengths (and IPv4 identification and checksum).
        fix_ip(s, &lay, self.ip_id.wrapping_add(i as u16), lay.l4 - lay.l3);

        // L4 header and checksum.
        if self.tcp {
            let seq = self.seq0.wrapping_add((i * self.mss) as u32);
            s[lay.l4 + 4..lay.l4 + 8].copy_from_slice(&seq.to_be_bytes());
            let mut flags = s[lay.l4 + 13];
            if !last {
                flags &= !(TCP_FIN | TCP_PSH);
            }
            if i > 0 {
                flags &= !TCP_CWR;
            }
            s[lay.l4 + 13] = flags;
            fix_l4_checksum(s, &lay, lay.l4 + 16, false);
        } else {
            let ulen = (s.len() - lay.l4) as u16;
            s[lay.l4 + 4..lay.l4 + 6].copy_from_slice(&ulen.to_be_bytes());
            fix_l4_checksum(s, &lay, lay.l4 + 6, true);
        }

        // Outer headers, once the inner frame is final (the outer UDP checksum covers it).
        if let Some(o) = self.outer.as_ref().filter(|_| fix_outer) {
            fix_ip(s, &o.lay, self.outer_id.wrapping_add(i as u16), o.lay.l4 - o.lay.l3);
            if o.udp {
                let ulen = (s.len() - o.lay.l4) as u16;
                s[o.lay.l4 + 4..o.lay.l4 + 6].copy_from_slice(&ulen.to_be_bytes());
                if self.outer_udp_sum {
                    fix_outer_udp_checksum(s, &o.lay, &lay);
                }
            }
        }
    }
}

/// Compute the outer UDP checksum of the tunnelled segment `s` (outer layout `o`, inner `inner`)
/// once the inner L4 checksum is final, without summing the inner L4 segment again: with a
/// valid checksum it sums to the complement of its pseudo-header sum (the identity behind
/// local checksum offload, RFC 7348 implementations and Linux's LCO).
fn fix_outer_udp_checksum(s: &mut [u8], o: &Layout, inner: &Layout) {
    let at = o.l4 + 6;
    s[at] = 0;
    s[at + 1] = 0;
    let len = s.len();
    let mut inner_l4 = !pseudo_sum(s, inner, len - inner.l4);
    if (inner.l4 - o.l4) % 2 == 1 {
        // The inner L4 segment starts at an odd offset of the outer UDP datagram.
        inner_l4 = inner_l4.swap_bytes();
    }
    let head = checksum::data(&s[o.l4..inner.l4]);
    let mut c = !checksum::combine(&[pseudo_sum(s, o, len - o.l4), head, inner_l4]);
    if c == 0 {
        c = 0xffff;
    }
    s[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

/// Set the IP length of the segment `s` (it ends where the IP packet of `lay` ends); for IPv4
/// also the identification `id` and the header checksum (header length `ihl`).
fn fix_ip(s: &mut [u8], lay: &Layout, id: u16, ihl: usize) {
    let len = s.len();
    if lay.v4 {
        let total = (len - lay.l3) as u16;
        s[lay.l3 + 2..lay.l3 + 4].copy_from_slice(&total.to_be_bytes());
        s[lay.l3 + 4..lay.l3 + 6].copy_from_slice(&id.to_be_bytes());
        fix_ipv4_checksum(s, lay.l3, ihl);
    } else {
        let plen = (len - lay.l3 - 40) as u16;
        s[lay.l3 + 4..lay.l3 + 6].copy_from_slice(&plen.to_be_bytes());
    }
}

/// Complete the partial L4 checksum of `pkt` in place and clear `meta.offload.csum_partial`.
///
/// A partial checksum (virtio-net `NEEDS_CSUM`) holds the pseudo-header sum at
/// `csum_start + csum_offset`; the device sums from `csum_start` to the end of the packet and
/// stores the complement there. The end is the IP packet's end when the frame parses as IP
/// (so link padding is left out), the frame's end otherwise.
pub fn complete_checksum(pkt: &mut PacketBuf) -> Result<(), OffloadError> {
    let (start, offset) = pkt.meta.offload.csum_partial.ok_or(OffloadError::NoPartialChecksum)?;
    let f = pkt.data_mut();
    let len = f.len();
    let end = layout(f).map(|l| l.end).unwrap_or(len);
    let s = usize::from(start);
    let at = s + usize::from(offset);
    if at + 2 > end || s > end {
        return Err(OffloadError::ChecksumOutOfRange { start, offset, len });
    }
    let mut c = !checksum::data(&f[s..end]);
    if c == 0 {
        // One's-complement zero is sent as 0xffff (UDP's "no checksum" value is 0).
        c = 0xffff;
    }
    f[at..at + 2].copy_from_slice(&c.to_be_bytes());
    pkt.meta.offload.csum_partial = None;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};

    const SRC4: [u8; 4] = [10, 199, 1, 1];
    const DST4: [u8; 4] = [10, 199, 2, 1];
    const SRC6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const DST6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

    // Reference one's-complement arithmetic, written independently of `snic_wire::checksum`
    // (which the code under test uses), to cross-check it.

    /// One's-complement sum of `data` added to `sum` (not folded).
    fn sum_bytes(mut sum: u32, data: &[u8]) -> u32 {
        let mut chunks = data.chunks_exact(2);
        for c in &mut chunks {
            sum = sum.wrapping_add(u32::from(u16::from_be_bytes([c[0], c[1]])));
            // Keep the accumulator from overflowing on 64 KiB inputs: fold now and then.
            if sum >= 0x8000_0000 {
                sum = (sum & 0xffff) + (sum >> 16);
            }
        }
        if let [last] = chunks.remainder() {
            sum = sum.wrapping_add(u32::from(*last) << 8);
        }
        sum
    }

    /// Fold a 32-bit one's-complement accumulator to 16 bits.
    fn fold(mut sum: u32) -> u16 {
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum as u16
    }

    /// The pseudo-header sum for an L4 segment of `l4_len` bytes of protocol `proto`.
    fn pseudo_sum(f: &[u8], lay: &Layout, l4_len: usize) -> u32 {
        let (src, dst) = if lay.v4 {
            (&f[lay.l3 + 12..lay.l3 + 16], &f[lay.l3 + 16..lay.l3 + 20])
        } else {
            (&f[lay.l3 + 8..lay.l3 + 24], &f[lay.l3 + 24..lay.l3 + 40])
        };
        let mut s = sum_bytes(0, src);
        s = sum_bytes(s, dst);
        s = s.wrapping_add(u32::from(lay.proto));
        // l4_len <= 64 KiB + headers; add as a 32-bit value split in halves.
        s = s.wrapping_add((l4_len as u32) >> 16).wrapping_add((l4_len as u32) & 0xffff);
        s
    }

    fn payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    fn eth(ethertype: u16) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f
    }

    /// TCP header with timestamps option (32 bytes), checksum left as the pseudo-header sum
    /// would be for a partial checksum (any value: segment recomputes).
    fn tcp_hdr(seq: u32, flags: u8) -> Vec<u8> {
        let mut t = vec![0u8; 32];
        t[0..2].copy_from_slice(&40000u16.to_be_bytes());
        t[2..4].copy_from_slice(&5201u16.to_be_bytes());
        t[4..8].copy_from_slice(&seq.to_be_bytes());
        t[8..12].copy_from_slice(&0x1122_3344u32.to_be_bytes());
        t[12] = 8 << 4;
        t[13] = flags;
        t[14..16].copy_from_slice(&512u16.to_be_bytes());
        t[16..18].copy_from_slice(&[0xab, 0xcd]);
        // NOP, NOP, timestamps (kind 8, length 10).
        t[20..32].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
        t
    }

    fn ipv4_frame(proto: u8, l4: &[u8], id: u16) -> Vec<u8> {
        let mut f = eth(ETHERTYPE_IPV4);
        let total = (20 + l4.len()) as u16;
        let mut ip = vec![0x45, 0];
        ip.extend_from_slice(&total.to_be_bytes());
        ip.extend_from_slice(&id.to_be_bytes());
        ip.extend_from_slice(&[0x40, 0, 64, proto, 0, 0]);
        ip.extend_from_slice(&SRC4);
        ip.extend_from_slice(&DST4);
        f.extend_from_slice(&ip);
        f.extend_from_slice(l4);
        f
    }

    fn ipv6_frame(proto: u8, l4: &[u8]) -> Vec<u8> {
        let mut f = eth(ETHERTYPE_IPV6);
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
        f.extend_from_slice(&[proto, 64]);
        f.extend_from_slice(&SRC6);
        f.extend_from_slice(&DST6);
        f.extend_from_slice(l4);
        f
    }

    fn gso_pkt(frame: &[u8], kind: GsoKind, size: u16, hdr_len: u16) -> PacketBuf {
        let mut p = PacketBuf::from_frame(frame);
        p.meta.offload.gso = Some(Gso { kind, size, hdr_len, tunnel: None });
        p
    }

    /// Verify every segment with etherparse and our own sums; return (seq or 0, payload) pairs.
    fn check_segments(out: &Batch, tcp: bool) -> Vec<(u32, Vec<u8>, u8)> {
        let mut v = Vec::new();
        for p in out.iter() {
            assert_eq!(p.meta.offload, Offload::default());
            let s = SlicedPacket::from_ethernet(p.data()).expect("segment parses");
            let (src, dst, v4) = match s.net.as_ref().expect("ip") {
                NetSlice::Ipv4(ip) => {
                    let h = ip.header();
                    // Header checksum verifies.
                    let hdr = h.to_header();
                    assert_eq!(hdr.header_checksum, hdr.calc_header_checksum());
                    assert_eq!(usize::from(h.total_len()) + 14, p.len());
                    (h.source().to_vec(), h.destination().to_vec(), true)
                }
                NetSlice::Ipv6(ip) => {
                    let h = ip.header();
                    assert_eq!(usize::from(h.payload_length()) + 54, p.len());
                    (h.source().to_vec(), h.destination().to_vec(), false)
                }
            };
            match s.transport.expect("transport") {
                TransportSlice::Tcp(t) => {
                    assert!(tcp);
                    let h = t.to_header();
                    let want = if v4 {
                        h.calc_checksum_ipv4_raw(
                            src[..4].try_into().unwrap(),
                            dst[..4].try_into().unwrap(),
                            t.payload(),
                        )
                        .unwrap()
                    } else {
                        h.calc_checksum_ipv6_raw(
                            src[..16].try_into().unwrap(),
                            dst[..16].try_into().unwrap(),
                            t.payload(),
                        )
                        .unwrap()
                    };
                    assert_eq!(h.checksum, want, "TCP checksum");
                    v.push((
                        t.sequence_number(),
                        t.payload().to_vec(),
                        p.data()[14 + if v4 { 20 } else { 40 } + 13],
                    ));
                }
                TransportSlice::Udp(u) => {
                    assert!(!tcp);
                    let h = u.to_header();
                    assert_eq!(usize::from(h.length), u.payload().len() + 8);
                    let want = if v4 {
                        h.calc_checksum_ipv4_raw(
                            src[..4].try_into().unwrap(),
                            dst[..4].try_into().unwrap(),
                            u.payload(),
                        )
                        .unwrap()
                    } else {
                        h.calc_checksum_ipv6_raw(
                            src[..16].try_into().unwrap(),
                            dst[..16].try_into().unwrap(),
                            u.payload(),
                        )
                        .unwrap()
                    };
                    assert_eq!(h.checksum, want, "UDP checksum");
                    v.push((0, u.payload().to_vec(), 0));
                }
                _ => panic!("unexpected transport"),
            }
        }
        v
    }

    #[test]
    fn segments_64k_tcpv4_super_packet() {
        let data = payload(65_000);
        let mut l4 = tcp_hdr(0xffff_f000, 0x10 | TCP_PSH | TCP_FIN | TCP_CWR);
        l4.extend_from_slice(&data);
        let frame = ipv4_frame(PROTO_TCP, &l4, 0xfffe);
        let pkt = gso_pkt(&frame, GsoKind::TcpV4, 1448, 66);
        let mut out = Batch::new(256);
        let n = segment(&pkt, &mut out).unwrap();
        assert_eq!(n, 65_000usize.div_ceil(1448));
        assert_eq!(out.len(), n);
        let segs = check_segments(&out, true);
        // Payloads concatenate back; sequence numbers line up (and wrap).
        let mut joined = Vec::new();
        let mut seq = 0xffff_f000u32;
        for (i, (s, pl, flags)) in segs.iter().enumerate() {
            assert_eq!(*s, seq, "seq of segment {i}");
            seq = seq.wrapping_add(pl.len() as u32);
            joined.extend_from_slice(pl);
            let last = i + 1 == n;
            assert_eq!(flags & TCP_FIN != 0, last, "FIN on segment {i}");
            assert_eq!(flags & TCP_PSH != 0, last, "PSH on segment {i}");
            assert_eq!(flags & TCP_CWR != 0, i == 0, "CWR on segment {i}");
            assert_eq!(flags & 0x10, 0x10, "ACK kept");
            if !last {
                assert_eq!(pl.len(), 1448);
            }
        }
        assert_eq!(joined, data);
        // IP IDs increment (and wrap) per segment; DF kept.
        for (i, p) in out.iter().enumerate() {
            let id = u16::from_be_bytes([p.data()[18], p.data()[19]]);
            assert_eq!(id, 0xfffeu16.wrapping_add(i as u16));
            assert_eq!(p.data()[20], 0x40);
            assert_eq!(p.len(), 66 + segs[i].1.len());
        }
        // The first segment is byte-exact against a hand-built frame.
        let mut want_l4 = tcp_hdr(0xffff_f000, 0x10 | TCP_CWR);
        want_l4.extend_from_slice(&data[..1448]);
        let mut want = ipv4_frame(PROTO_TCP, &want_l4, 0xfffe);
        let lay = layout(&want).unwrap();
        fix_ipv4_checksum(&mut want, 14, 20);
        fix_l4_checksum(&mut want, &lay, 14 + 20 + 16, false);
        assert_eq!(out.packets()[0].data(), &want[..]);
    }

    #[test]
    fn segments_tcpv6_super_packet() {
        let data = payload(30_001);
        let mut l4 = tcp_hdr(1000, 0x10 | TCP_PSH);
        l4.extend_from_slice(&data);
        let frame = ipv6_frame(PROTO_TCP, &l4);
        let pkt = gso_pkt(&frame, GsoKind::TcpV6, 1428, 86);
        let mut out = Batch::new(64);
        let n = segment(&pkt, &mut out).unwrap();
        assert_eq!(n, 30_001usize.div_ceil(1428));
        let segs = check_segments(&out, true);
        let joined: Vec<u8> = segs.iter().flat_map(|s| s.1.clone()).collect();
        assert_eq!(joined, data);
        for (i, (s, _, flags)) in segs.iter().enumerate() {
            assert_eq!(*s, 1000 + (i * 1428) as u32);
            assert_eq!(flags & TCP_PSH != 0, i + 1 == n);
        }
        assert_eq!(segs.last().unwrap().1.len(), 30_001 % 1428);
    }

    #[test]
    fn segments_udp_l4_v4_and_v6() {
        let data = payload(10_000);
        let mut udp = vec![0x30, 0x39, 0x12, 0x67, 0, 0, 0, 0];
        udp.extend_from_slice(&data);
        for (frame, hdr_len) in
            [(ipv4_frame(PROTO_UDP, &udp, 7), 42u16), (ipv6_frame(PROTO_UDP, &udp), 62)]
        {
            let pkt = gso_pkt(&frame, GsoKind::UdpL4, 1200, hdr_len);
            let mut out = Batch::new(32);
            assert_eq!(segment(&pkt, &mut out).unwrap(), 9);
            let segs = check_segments(&out, false);
            let joined: Vec<u8> = segs.iter().flat_map(|s| s.1.clone()).collect();
            assert_eq!(joined, data);
            assert_eq!(segs[8].1.len(), 10_000 - 8 * 1200);
            // Ports are copied into every datagram.
            for p in out.iter() {
                let l4 = usize::from(hdr_len) - 8;
                assert_eq!(&p.data()[l4..l4 + 4], &[0x30, 0x39, 0x12, 0x67]);
            }
        }
    }

    #[test]
    fn vlan_tagged_super_packet() {
        let data = payload(3000);
        let mut l4 = tcp_hdr(5, 0x10);
        l4.extend_from_slice(&data);
        let plain = ipv4_frame(PROTO_TCP, &l4, 1);
        let mut frame = plain[..12].to_vec();
        frame.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
        frame.extend_from_slice(&plain[12..]);
        let pkt = gso_pkt(&frame, GsoKind::TcpV4, 1000, 70);
        let mut out = Batch::new(8);
        assert_eq!(segment(&pkt, &mut out).unwrap(), 3);
        for p in out.iter() {
            assert_eq!(&p.data()[12..16], &[0x81, 0x00, 0x00, 0x64]);
            let s = SlicedPacket::from_ethernet(p.data()).unwrap();
            let Some(TransportSlice::Tcp(t)) = s.transport else { panic!("tcp") };
            assert_eq!(t.payload().len(), 1000);
        }
    }

    #[test]
    fn errors_are_typed_and_add_nothing() {
        let mut out = Batch::new(4);
        let plain = PacketBuf::from_frame(&ipv4_frame(PROTO_TCP, &tcp_hdr(0, 0x10), 0));
        assert_eq!(segment(&plain, &mut out), Err(OffloadError::NotGso));

        let data = payload(10_000);
        let mut l4 = tcp_hdr(0, 0x10);
        l4.extend_from_slice(&data);
        let frame = ipv4_frame(PROTO_TCP, &l4, 0);
        let pkt = gso_pkt(&frame, GsoKind::TcpV4, 1000, 66);
        assert_eq!(segment(&pkt, &mut out), Err(OffloadError::NoRoom { need: 10, have: 4 }));
        assert!(out.is_empty());

        let pkt6 = gso_pkt(&frame, GsoKind::TcpV6, 1000, 66);
        assert!(matches!(segment(&pkt6, &mut out), Err(OffloadError::BadHeader(_))));
        let udp = gso_pkt(&frame, GsoKind::UdpL4, 1000, 66);
        assert_eq!(segment(&udp, &mut out), Err(OffloadError::WrongProtocol(PROTO_TCP)));
        let zero = gso_pkt(&frame, GsoKind::TcpV4, 0, 66);
        let mut big = Batch::new(256);
        assert_eq!(segment(&zero, &mut big), Err(OffloadError::ZeroSegmentSize));

        // Truncated: the IPv4 total length claims more than the frame holds.
        let cut = gso_pkt(&frame[..frame.len() - 1], GsoKind::TcpV4, 1000, 66);
        assert_eq!(
            segment(&cut, &mut big),
            Err(OffloadError::Truncated { need: frame.len(), got: frame.len() - 1 })
        );
        // Every prefix of the frame is an error or a success, never a panic.
        for n in 0..80 {
            let p = gso_pkt(&frame[..n], GsoKind::TcpV4, 1000, 66);
            assert!(segment(&p, &mut big).is_err());
        }
        let arp = gso_pkt(&eth(0x0806), GsoKind::TcpV4, 1000, 66);
        assert_eq!(segment(&arp, &mut big), Err(OffloadError::NotIp(0x0806)));
        assert!(big.is_empty());
    }

    #[test]
    fn completes_partial_tcp_and_udp_checksums() {
        // Build a TCP/IPv4 frame whose checksum field holds the pseudo-header sum, as a sender
        // with checksum offload leaves it; completing it must give the full checksum.
        let mut l4 = tcp_hdr(42, 0x18);
        l4.extend_from_slice(b"hello, partial checksum!");
        let mut frame = ipv4_frame(PROTO_TCP, &l4, 3);
        let lay = layout(&frame).unwrap();
        let mut full = frame.clone();
        fix_l4_checksum(&mut full, &lay, 34 + 16, false);
        let pseudo = fold(pseudo_sum(&frame, &lay, l4.len()));
        frame[50..52].copy_from_slice(&pseudo.to_be_bytes());
        let mut p = PacketBuf::from_frame(&frame);
        p.meta.offload.csum_partial = Some((34, 16));
        complete_checksum(&mut p).unwrap();
        assert_eq!(p.data(), &full[..]);
        assert_eq!(p.meta.offload.csum_partial, None);
        assert_eq!(complete_checksum(&mut p), Err(OffloadError::NoPartialChecksum));

        // UDP over IPv6, with 4 bytes of link padding that must not be summed.
        let mut udp = vec![0x00, 0x35, 0x00, 0x35, 0, 20, 0, 0];
        udp.extend_from_slice(b"twelve bytes");
        let mut frame = ipv6_frame(PROTO_UDP, &udp);
        let lay = layout(&frame).unwrap();
        let mut full = frame.clone();
        fix_l4_checksum(&mut full, &lay, 54 + 6, true);
        let pseudo = fold(pseudo_sum(&frame, &lay, udp.len()));
        frame[60..62].copy_from_slice(&pseudo.to_be_bytes());
        frame.extend_from_slice(&[0xee; 4]);
        full.extend_from_slice(&[0xee; 4]);
        let mut p = PacketBuf::from_frame(&frame);
        p.meta.offload.csum_partial = Some((54, 6));
        complete_checksum(&mut p).unwrap();
        assert_eq!(p.data(), &full[..]);
        let s = SlicedPacket::from_ethernet(&p.data()[..p.len() - 4]).unwrap();
        let Some(TransportSlice::Udp(u)) = s.transport else { panic!("udp") };
        assert_eq!(
            u.to_header().checksum,
            u.to_header().calc_checksum_ipv6_raw(SRC6, DST6, u.payload()).unwrap()
        );

        // Out of range.
        let mut p = PacketBuf::from_frame(&frame);
        p.meta.offload.csum_partial = Some((54, 60));
        assert!(matches!(
            complete_checksum(&mut p),
            Err(OffloadError::ChecksumOutOfRange { start: 54, offset: 60, .. })
        ));
    }

    #[test]
    fn ipv4_options_and_single_segment() {
        // IHL 6: four bytes of options (NOP x3, EOL) stay in every segment.
        let data = payload(2500);
        let mut l4 = tcp_hdr(77, 0x10 | TCP_FIN);
        l4.extend_from_slice(&data);
        let mut frame = ipv4_frame(PROTO_TCP, &l4, 9);
        frame[14] = 0x46;
        frame.splice(34..34, [1, 1, 1, 0]);
        let total = (24 + l4.len()) as u16;
        frame[16..18].copy_from_slice(&total.to_be_bytes());
        let pkt = gso_pkt(&frame, GsoKind::TcpV4, 1300, 70);
        let mut out = Batch::new(8);
        assert_eq!(segment(&pkt, &mut out).unwrap(), 2);
        let segs = check_segments_with_ihl(&out, 24);
        assert_eq!(segs.concat(), data);
        for p in out.iter() {
            assert_eq!(&p.data()[34..38], &[1, 1, 1, 0]);
        }
        // FIN only on the last.
        assert_eq!(out.packets()[0].data()[38 + 13] & TCP_FIN, 0);
        assert_eq!(out.packets()[1].data()[38 + 13] & TCP_FIN, TCP_FIN);

        // A payload that fits one segment gives one fully checksummed frame, FIN kept.
        let mut l4 = tcp_hdr(1, 0x10 | TCP_FIN);
        l4.extend_from_slice(&data[..100]);
        let pkt = gso_pkt(&ipv4_frame(PROTO_TCP, &l4, 1), GsoKind::TcpV4, 1448, 66);
        let mut out = Batch::new(8);
        assert_eq!(segment(&pkt, &mut out).unwrap(), 1);
        let segs = check_segments(&out, true);
        assert_eq!(segs[0].1, &data[..100]);
        assert_eq!(segs[0].2 & TCP_FIN, TCP_FIN);
    }

    /// Payloads of segments whose IPv4 header is `ihl` bytes, checking both checksums with our
    /// own arithmetic against an etherparse-parsed header.
    fn check_segments_with_ihl(out: &Batch, ihl: usize) -> Vec<Vec<u8>> {
        out.iter()
            .map(|p| {
                let f = p.data();
                let (ip, _) = etherparse::Ipv4Header::from_slice(&f[14..]).unwrap();
                assert_eq!(ip.header_len(), ihl);
                assert_eq!(ip.header_checksum, ip.calc_header_checksum());
                // Sum over pseudo header + TCP segment must be 0xffff.
                let lay = layout(f).unwrap();
                let s = sum_bytes(pseudo_sum(f, &lay, f.len() - lay.l4), &f[lay.l4..]);
                assert_eq!(fold(s), 0xffff, "TCP checksum verifies");
                f[lay.l4 + 32..].to_vec()
            })
            .collect()
    }

    proptest::proptest! {
        /// Arbitrary bytes with arbitrary offload metadata: an error or segments, never a panic.
        #[test]
        fn never_panics_on_garbage(
            frame in proptest::collection::vec(proptest::num::u8::ANY, 0..400),
            kind in 0u8..3,
            size in 0u16..600,
            start in 0u16..420,
            offset in 0u16..40,
        ) {
            let kind = [GsoKind::TcpV4, GsoKind::TcpV6, GsoKind::UdpL4][usize::from(kind)];
            let mut p = gso_pkt(&frame, kind, size, 0);
            let mut out = Batch::new(256);
            if let Ok(n) = segment(&p, &mut out) {
                proptest::prop_assert_eq!(n, out.len());
            }
            p.meta.offload.csum_partial = Some((start, offset));
            let _ = complete_checksum(&mut p);
        }
    }

    proptest::proptest! {
        /// Valid super-packets (IPv4/IPv6, TCP/UDP) with random bytes overwritten and a random
        /// cut: an error or well-formed segments, never a panic.
        #[test]
        fn never_panics_on_mutated_super_packets(
            which in 0usize..4,
            edits in proptest::collection::vec((0usize..200, proptest::num::u8::ANY), 0..6),
            cut in 0usize..1200,
            size in 1u16..300,
        ) {
            let data = payload(1000);
            let mut tcp = tcp_hdr(3, 0x18);
            tcp.extend_from_slice(&data);
            let mut udp = vec![0, 1, 0, 2, 0, 0, 0, 0];
            udp.extend_from_slice(&data);
            let (mut frame, kind) = match which {
                0 => (ipv4_frame(PROTO_TCP, &tcp, 1), GsoKind::TcpV4),
                1 => (ipv6_frame(PROTO_TCP, &tcp), GsoKind::TcpV6),
                2 => (ipv4_frame(PROTO_UDP, &udp, 1), GsoKind::UdpL4),
                _ => (ipv6_frame(PROTO_UDP, &udp), GsoKind::UdpL4),
            };
            for (at, v) in edits {
                if let Some(b) = frame.get_mut(at) {
                    *b = v;
                }
            }
            frame.truncate(cut);
            let p = gso_pkt(&frame, kind, size, 0);
            let mut out = Batch::new(256);
            if let Ok(n) = segment(&p, &mut out) {
                proptest::prop_assert_eq!(n, out.len());
                for s in out.iter() {
                    proptest::prop_assert!(s.len() <= frame.len());
                }
            }
        }
    }

    #[test]
    fn odd_length_sum_matches_reference() {
        // RFC 1071 example bytes, odd length tail padded with zero.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7, 0x01];
        assert_eq!(fold(sum_bytes(0, &d)), 0xddf2u16.wrapping_add(0x0100));
    }

    // ---- tunnelled super-packets ("tunnel TSO") ---------------------------------------------

    const OUTER4: ([u8; 4], [u8; 4]) = ([192, 168, 100, 1], [192, 168, 100, 2]);
    const OUTER6: ([u8; 16], [u8; 16]) = (
        [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
    );
    const OUTER_ID: u16 = 0xfffe;
    const SPORT: u16 = 0xc123;

    /// `inner` encapsulated as the vSwitch writes it: outer Ethernet, IPv4 (DF, TTL 64, ID
    /// `id`, header checksum from our own arithmetic) or IPv6, then UDP (checksum 0 over IPv4,
    /// computed over IPv6) + VXLAN with VNI 42, or NVGRE with VSID 42.
    fn encapsulate(inner: &[u8], v6: bool, vxlan: bool, id: u16) -> Vec<u8> {
        let proto = if vxlan { PROTO_UDP } else { PROTO_GRE };
        let mut tun = if vxlan {
            let mut u = SPORT.to_be_bytes().to_vec();
            u.extend_from_slice(&4789u16.to_be_bytes());
            u.extend_from_slice(&((16 + inner.len()) as u16).to_be_bytes());
            u.extend_from_slice(&[0, 0, 0x08, 0, 0, 0, 0, 0, 42, 0]);
            u
        } else {
            vec![0x20, 0, 0x65, 0x58, 0, 0, 42, 0x23]
        };
        tun.extend_from_slice(inner);
        let mut f = vec![0x02, 0, 0, 0, 2, 2, 0x02, 0, 0, 0, 1, 1];
        if v6 {
            if vxlan {
                let mut s = sum_bytes(0, &OUTER6.0);
                s = sum_bytes(s, &OUTER6.1);
                s += u32::from(PROTO_UDP) + tun.len() as u32;
                let c = match !fold(sum_bytes(s, &tun)) {
                    0 => 0xffff,
                    c => c,
                };
                tun[6..8].copy_from_slice(&c.to_be_bytes());
            }
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
            f.extend_from_slice(&(tun.len() as u16).to_be_bytes());
            f.extend_from_slice(&[proto, 64]);
            f.extend_from_slice(&OUTER6.0);
            f.extend_from_slice(&OUTER6.1);
        } else {
            let mut ip = vec![0x45, 0];
            ip.extend_from_slice(&((20 + tun.len()) as u16).to_be_bytes());
            ip.extend_from_slice(&id.to_be_bytes());
            ip.extend_from_slice(&[0x40, 0, 64, proto, 0, 0]);
            ip.extend_from_slice(&OUTER4.0);
            ip.extend_from_slice(&OUTER4.1);
            let c = !fold(sum_bytes(0, &ip));
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&[0x08, 0x00]);
            f.extend_from_slice(&ip);
        }
        f.extend_from_slice(&tun);
        f
    }

    /// Outer header length of `encapsulate`.
    fn outer_len(v6: bool, vxlan: bool) -> u16 {
        14 + if v6 { 40 } else { 20 } + if vxlan { 16 } else { 8 }
    }

    /// A plain TCP frame (inner IPv4 with ID `id`, or IPv6) carrying `data` from `seq`, with
    /// both checksums complete by our own arithmetic.
    fn tcp_frame(v6: bool, seq: u32, flags: u8, data: &[u8], id: u16) -> Vec<u8> {
        let mut l4 = tcp_hdr(seq, flags);
        l4.extend_from_slice(data);
        let mut f = if v6 { ipv6_frame(PROTO_TCP, &l4) } else { ipv4_frame(PROTO_TCP, &l4, id) };
        let lay = layout(&f).unwrap();
        if !v6 {
            f[24..26].copy_from_slice(&[0, 0]);
            let c = !fold(sum_bytes(0, &f[14..34]));
            f[24..26].copy_from_slice(&c.to_be_bytes());
        }
        let at = lay.l4 + 16;
        f[at..at + 2].copy_from_slice(&[0, 0]);
        let c = !fold(sum_bytes(pseudo_sum(&f, &lay, l4.len()), &f[lay.l4..]));
        f[at..at + 2].copy_from_slice(&c.to_be_bytes());
        f
    }

    /// A tunnelled TCP super-packet as the vSwitch leaves it after pushing the encapsulation on
    /// a guest's TSO packet: the inner TCP checksum partial (the pseudo-header sum, with
    /// `csum_partial` pointing at it), `gso.hdr_len` and `gso.tunnel` covering the outer
    /// headers.
    fn tunnelled_super_packet(
        v6_outer: bool,
        v6_inner: bool,
        vxlan: bool,
        seq: u32,
        flags: u8,
        data: &[u8],
        mss: u16,
    ) -> PacketBuf {
        let mut inner = tcp_frame(v6_inner, seq, flags, data, 0x1000);
        let lay = layout(&inner).unwrap();
        let pseudo = fold(pseudo_sum(&inner, &lay, inner.len() - lay.l4));
        inner[lay.l4 + 16..lay.l4 + 18].copy_from_slice(&pseudo.to_be_bytes());
        let frame = encapsulate(&inner, v6_outer, vxlan, OUTER_ID);
        let ol = outer_len(v6_outer, vxlan);
        let mut p = PacketBuf::from_frame(&frame);
        let kind = if v6_inner { GsoKind::TcpV6 } else { GsoKind::TcpV4 };
        let hdr_len = ol + lay.l4 as u16 + 32;
        let tunnel = Some(TunnelGso {
            kind: if vxlan { TunnelGsoKind::Vxlan } else { TunnelGsoKind::Nvgre },
            outer_len: ol,
        });
        p.meta.offload.gso = Some(Gso { kind, size: mss, hdr_len, tunnel });
        p.meta.offload.csum_partial = Some((ol + lay.l4 as u16, 16));
        p
    }

    /// Check one segment of a tunnelled super-packet from scratch: it walks with
    /// `snic_wire::stack::Stack` as a tunnelled TCP packet, the outer lengths match the frame,
    /// the outer IPv4 header checksum and (IPv6) UDP checksum verify, and so do the inner IPv4
    /// and TCP checksums. Returns (sequence number, payload, TCP flags).
    fn check_tunnel_segment(f: &[u8], vxlan: bool) -> (u32, Vec<u8>, u8) {
        use snic_wire::stack::{Layer, Stack};
        let st = Stack::parse(f);
        assert_eq!(st.error(), None, "segment parses");
        let want_tunnel = if vxlan { Layer::Vxlan } else { Layer::Nvgre };
        assert_eq!(st.tunnel.map(|t| t.0), Some(want_tunnel));
        assert_eq!(st.vni, Some(42));
        let inner = st.inner.expect("inner frame");
        let (Some((Layer::Tcp, tcp)), Some(il3)) = (inner.l4, inner.l3) else {
            panic!("inner TCP: {inner:?}")
        };
        let (ol3, o) = st.outer.l3.expect("outer IP");
        let o = usize::from(o);
        match ol3 {
            Layer::Ipv4 => {
                assert_eq!(usize::from(u16::from_be_bytes([f[o + 2], f[o + 3]])), f.len() - o);
                assert_eq!(fold(sum_bytes(0, &f[o..o + 20])), 0xffff, "outer IPv4 checksum");
            }
            _ => {
                assert_eq!(usize::from(u16::from_be_bytes([f[o + 4], f[o + 5]])), f.len() - o - 40)
            }
        }
        if vxlan {
            let (_, u) = st.outer.l4.expect("outer UDP");
            let u = usize::from(u);
            assert_eq!(usize::from(u16::from_be_bytes([f[u + 4], f[u + 5]])), f.len() - u);
            if ol3 == Layer::Ipv4 {
                assert_eq!(&f[u + 6..u + 8], &[0, 0], "outer UDP/IPv4 checksum stays 0");
            } else {
                let lay = layout(f).unwrap();
                let s = sum_bytes(pseudo_sum(f, &lay, f.len() - u), &f[u..]);
                assert_eq!(fold(s), 0xffff, "outer UDP/IPv6 checksum");
                assert_ne!(&f[u + 6..u + 8], &[0, 0]);
            }
        }
        let ie = usize::from(inner.eth.unwrap());
        let il = layout(&f[ie..]).unwrap();
        assert_eq!(il.end + ie, f.len(), "inner IP length matches the segment");
        if il3.0 == Layer::Ipv4 {
            let i = usize::from(il3.1);
            assert_eq!(fold(sum_bytes(0, &f[i..i + 20])), 0xffff, "inner IPv4 checksum");
        }
        let inner_f = &f[ie..];
        let s = sum_bytes(pseudo_sum(inner_f, &il, inner_f.len() - il.l4), &inner_f[il.l4..]);
        assert_eq!(fold(s), 0xffff, "inner TCP checksum");
        let t = usize::from(tcp);
        let seq = u32::from_be_bytes([f[t + 4], f[t + 5], f[t + 6], f[t + 7]]);
        (seq, f[t + 32..].to_vec(), f[t + 13])
    }

    #[test]
    fn segments_vxlan_tunnelled_super_packets_byte_exact() {
        // Three segments (1398 + 1398 + 704 bytes) over IPv4 and over IPv6 outer headers.
        let data = payload(3500);
        let mss = 1398u16;
        let flags = 0x10 | TCP_PSH | TCP_CWR;
        for v6_outer in [false, true] {
            let pkt = tunnelled_super_packet(v6_outer, false, true, 0xffff_fa00, flags, &data, mss);
            let mut out = Batch::new(8);
            assert_eq!(segment(&pkt, &mut out), Ok(3));
            let mut joined = Vec::new();
            for (i, seg) in out.iter().enumerate() {
                assert_eq!(seg.meta.offload, Offload::default());
                let (seq, pl, fl) = check_tunnel_segment(seg.data(), true);
                assert_eq!(seq, 0xffff_fa00u32.wrapping_add(i as u32 * 1398), "seq {i}");
                assert_eq!(fl & TCP_PSH != 0, i == 2);
                assert_eq!(fl & TCP_CWR != 0, i == 0);
                joined.extend_from_slice(&pl);
                // Byte-exact against the segment built independently: the plain TCP segment
                // (inner IPv4 ID 0x1000 + i) encapsulated (outer IPv4 ID 0xfffe + i).
                let lo = i * 1398;
                let chunk = &data[lo..(lo + 1398).min(data.len())];
                let mut f = flags & !TCP_CWR;
                if i == 0 {
                    f |= TCP_CWR;
                }
                if i < 2 {
                    f &= !TCP_PSH;
                }
                let want_inner = tcp_frame(
                    false,
                    0xffff_fa00u32.wrapping_add(lo as u32),
                    f,
                    chunk,
                    0x1000 + i as u16,
                );
                let want =
                    encapsulate(&want_inner, v6_outer, true, OUTER_ID.wrapping_add(i as u16));
                assert_eq!(seg.data(), &want[..], "segment {i} (IPv6 outer: {v6_outer})");
            }
            assert_eq!(joined, data);
        }
    }

    #[test]
    fn segments_nvgre_and_ipv6_inner_tunnelled_super_packets() {
        let data = payload(5000);
        for (v6_outer, v6_inner, vxlan) in
            [(false, true, true), (true, true, true), (false, false, false), (true, true, false)]
        {
            let pkt = tunnelled_super_packet(v6_outer, v6_inner, vxlan, 7, 0x18, &data, 1200);
            let mut out = Batch::new(8);
            assert_eq!(segment(&pkt, &mut out), Ok(5));
            let mut joined = Vec::new();
            for (i, seg) in out.iter().enumerate() {
                let (seq, pl, _) = check_tunnel_segment(seg.data(), vxlan);
                assert_eq!(seq, 7 + 1200 * i as u32);
                joined.extend_from_slice(&pl);
                if !v6_outer {
                    let id = u16::from_be_bytes([seg.data()[18], seg.data()[19]]);
                    assert_eq!(id, OUTER_ID.wrapping_add(i as u16));
                }
            }
            assert_eq!(joined, data);
        }
    }

    #[test]
    fn segments_tunnelled_udp_l4_super_packet() {
        // UDP segmentation inside VXLAN over IPv6: every datagram's inner UDP checksum and the
        // outer UDP checksum (derived from the inner one) verify from scratch. Odd sizes.
        let data = payload(4001);
        let mut udp = vec![0x30, 0x39, 0x12, 0x67, 0, 0, 0, 0];
        udp.extend_from_slice(&data);
        let inner = ipv4_frame(PROTO_UDP, &udp, 5);
        for v6_outer in [true, false] {
            let mut p = PacketBuf::from_frame(&encapsulate(&inner, v6_outer, true, 9));
            let ol = outer_len(v6_outer, true);
            let tunnel = Some(TunnelGso { kind: TunnelGsoKind::Vxlan, outer_len: ol });
            p.meta.offload.gso =
                Some(Gso { kind: GsoKind::UdpL4, size: 999, hdr_len: ol + 42, tunnel });
            let mut out = Batch::new(8);
            assert_eq!(segment(&p, &mut out), Ok(5));
            let mut joined = Vec::new();
            for seg in out.iter() {
                let f = seg.data();
                let u = usize::from(ol) - 16;
                assert_eq!(usize::from(u16::from_be_bytes([f[u + 4], f[u + 5]])), f.len() - u);
                if v6_outer {
                    let lay = layout(f).unwrap();
                    let s = sum_bytes(pseudo_sum(f, &lay, f.len() - u), &f[u..]);
                    assert_eq!(fold(s), 0xffff, "outer UDP/IPv6 checksum");
                }
                let i = usize::from(ol);
                let mut one = Batch::new(1);
                one.push_frame(&f[i..]).unwrap();
                let segs = check_segments(&one, false);
                joined.extend_from_slice(&segs[0].1);
            }
            assert_eq!(joined, data);
        }
    }

    #[test]
    fn tunnelled_super_packet_errors_are_typed() {
        let data = payload(3000);
        let pkt = tunnelled_super_packet(false, false, true, 1, 0x10, &data, 1000);
        let mut out = Batch::new(8);
        // An outer length that does not end at the VXLAN header.
        let mut bad = PacketBuf::from_frame(pkt.data());
        bad.meta.offload = pkt.meta.offload;
        if let Some(g) = &mut bad.meta.offload.gso {
            g.tunnel = Some(TunnelGso { kind: TunnelGsoKind::Vxlan, outer_len: 42 });
        }
        assert_eq!(
            segment(&bad, &mut out),
            Err(OffloadError::BadHeader("VXLAN outer header length"))
        );
        // NVGRE claimed on a UDP outer header.
        if let Some(g) = &mut bad.meta.offload.gso {
            g.tunnel = Some(TunnelGso { kind: TunnelGsoKind::Nvgre, outer_len: 50 });
        }
        assert_eq!(segment(&bad, &mut out), Err(OffloadError::WrongProtocol(PROTO_UDP)));
        // An outer length past the outer datagram.
        if let Some(g) = &mut bad.meta.offload.gso {
            g.tunnel = Some(TunnelGso { kind: TunnelGsoKind::Vxlan, outer_len: 50 });
        }
        let short = {
            let mut f = pkt.data()[..60].to_vec();
            f[16..18].copy_from_slice(&46u16.to_be_bytes());
            let mut p = PacketBuf::from_frame(&f);
            p.meta.offload = bad.meta.offload;
            p
        };
        assert_eq!(segment(&short, &mut out), Err(OffloadError::Truncated { need: 64, got: 60 }));
        // Too few slots: nothing added.
        let mut small = Batch::new(2);
        assert_eq!(segment(&pkt, &mut small), Err(OffloadError::NoRoom { need: 3, have: 2 }));
        assert!(small.is_empty() && out.is_empty());
        // Every prefix: an error, never a panic.
        for n in 0..pkt.len() {
            let mut p = PacketBuf::from_frame(&pkt.data()[..n]);
            p.meta.offload = pkt.meta.offload;
            assert!(segment(&p, &mut out).is_err(), "prefix of {n} bytes");
        }
        assert!(out.is_empty());
    }

    proptest::proptest! {
        /// Any payload size and MSS, VXLAN or NVGRE, IPv4 or IPv6 outside and inside: the
        /// segments parse, every checksum verifies from scratch, the sequence numbers advance
        /// by the payload sent and the payloads concatenate to the original.
        #[test]
        fn tunnelled_segments_reassemble(
            len in 0usize..9000,
            mss in 64u16..1500,
            v6_outer in proptest::bool::ANY,
            v6_inner in proptest::bool::ANY,
            vxlan in proptest::bool::ANY,
            seq in proptest::num::u32::ANY,
        ) {
            let data = payload(len);
            let pkt = tunnelled_super_packet(v6_outer, v6_inner, vxlan, seq, 0x19, &data, mss);
            let mut out = Batch::new(256);
            let n = segment(&pkt, &mut out).unwrap();
            proptest::prop_assert_eq!(n, len.div_ceil(usize::from(mss)).max(1));
            let mut joined = Vec::new();
            let mut next = seq;
            for (i, s) in out.iter().enumerate() {
                let (sq, pl, fl) = check_tunnel_segment(s.data(), vxlan);
                proptest::prop_assert_eq!(sq, next);
                proptest::prop_assert!(pl.len() <= usize::from(mss));
                proptest::prop_assert_eq!(fl & TCP_FIN != 0, i + 1 == n);
                next = next.wrapping_add(pl.len() as u32);
                joined.extend_from_slice(&pl);
            }
            proptest::prop_assert_eq!(joined, data);
        }

        /// Tunnelled super-packets with random bytes overwritten, a random cut and a random
        /// outer length: an error or segments no longer than the frame, never a panic.
        #[test]
        fn tunnelled_never_panics_on_mutation(
            edits in proptest::collection::vec((0usize..220, proptest::num::u8::ANY), 0..6),
            cut in 0usize..1400,
            outer_len in 0u16..120,
            nvgre in proptest::bool::ANY,
            v6_outer in proptest::bool::ANY,
            size in 1u16..300,
        ) {
            let pkt = tunnelled_super_packet(v6_outer, false, true, 3, 0x18, &payload(1000), size);
            let mut frame = pkt.data().to_vec();
            for (at, v) in edits {
                if let Some(b) = frame.get_mut(at) {
                    *b = v;
                }
            }
            frame.truncate(cut);
            let mut p = PacketBuf::from_frame(&frame);
            p.meta.offload = pkt.meta.offload;
            let kind = if nvgre { TunnelGsoKind::Nvgre } else { TunnelGsoKind::Vxlan };
            if let Some(g) = &mut p.meta.offload.gso {
                g.tunnel = Some(TunnelGso { kind, outer_len });
            }
            let mut out = Batch::new(256);
            if let Ok(n) = segment(&p, &mut out) {
                proptest::prop_assert_eq!(n, out.len());
                for s in out.iter() {
                    proptest::prop_assert!(s.len() <= frame.len());
                }
            }
        }
    }

    // ---- one UDP GSO buffer per tunnelled super-packet --------------------------------------

    /// What the kernel's UDP segmentation (`__udp_gso_segment` after `inet_gso_segment`) makes
    /// of a `GSO_UDP_L4` buffer, written from its description: cut the UDP payload every
    /// `gso.size` bytes, copy the outer headers in front, set the IPv4 total length,
    /// identification (the buffer's, plus one per datagram) and header checksum, or the IPv6
    /// payload length, the UDP length, and compute the UDP checksum in full (NEEDS_CSUM). Also
    /// checks that the buffer's partial checksum is the pseudo-header sum the kernel expects.
    pub(crate) fn kernel_udp_segment(p: &PacketBuf) -> Vec<Vec<u8>> {
        let f = p.data();
        let g = p.meta.offload.gso.expect("a GSO buffer");
        assert_eq!(g.kind, GsoKind::UdpL4);
        assert_eq!(g.tunnel, None);
        let (ohl, size) = (usize::from(g.hdr_len), usize::from(g.size));
        let u = ohl - 8;
        assert_eq!(p.meta.offload.csum_partial, Some((u as u16, 6)));
        let lay = layout(f).unwrap();
        assert_eq!((lay.l4, lay.end, lay.proto), (u, f.len(), PROTO_UDP));
        assert_eq!(usize::from(u16::from_be_bytes([f[u + 4], f[u + 5]])), f.len() - u);
        let stored = u16::from_be_bytes([f[u + 6], f[u + 7]]);
        assert_eq!(stored, fold(pseudo_sum(f, &lay, f.len() - u)), "partial UDP checksum");
        let n = (f.len() - ohl).div_ceil(size);
        assert!((2..=UDP_GSO_MAX_SEGMENTS).contains(&n), "{n} datagrams");
        let id0 = u16::from_be_bytes([f[18], f[19]]);
        let mut v = Vec::new();
        for (k, piece) in f[ohl..].chunks(size).enumerate() {
            let mut d = f[..ohl].to_vec();
            d.extend_from_slice(piece);
            let len = d.len();
            if lay.v4 {
                d[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
                d[18..20].copy_from_slice(&id0.wrapping_add(k as u16).to_be_bytes());
                d[24..26].copy_from_slice(&[0, 0]);
                let c = !fold(sum_bytes(0, &d[14..lay.l4]));
                d[24..26].copy_from_slice(&c.to_be_bytes());
            } else {
                d[18..20].copy_from_slice(&((len - 54) as u16).to_be_bytes());
            }
            d[u + 4..u + 6].copy_from_slice(&((len - u) as u16).to_be_bytes());
            d[u + 6..u + 8].copy_from_slice(&[0, 0]);
            let dl = layout(&d).unwrap();
            let c = match !fold(sum_bytes(pseudo_sum(&d, &dl, len - u), &d[u..])) {
                0 => 0xffff,
                c => c,
            };
            d[u + 6..u + 8].copy_from_slice(&c.to_be_bytes());
            v.push(d);
        }
        v
    }

    /// Lay `pkt` out as UDP GSO buffers, cut them as the kernel does and check the result is
    /// [`segment`]'s frames byte for byte (but the outer UDP/IPv4 checksum, which the kernel
    /// computes and [`segment`] leaves 0: it is checked, then compared as 0). Returns the
    /// number of buffers.
    fn check_udp_gso_matches_segment(pkt: &PacketBuf) -> usize {
        /// A batch holds at most `MAX_BATCH` packets: super-packets here make no more segments.
        const MAX_SEGS: usize = crate::buf::MAX_BATCH;
        let mut segs = Batch::new(MAX_SEGS);
        let n = segment(pkt, &mut segs).unwrap();
        let mut bufs = Batch::new(32);
        let nbuf = udp_tunnel_gso(pkt, &mut bufs).unwrap();
        assert_eq!(nbuf, bufs.len());
        let mut cut = Vec::new();
        for b in bufs.iter() {
            assert_eq!(b.meta.ingress, pkt.meta.ingress);
            if b.meta.offload.gso.is_none() {
                // A one-piece buffer is a plain, fully checksummed segment.
                assert_eq!(b.meta.offload, Offload::default());
                cut.push(b.data().to_vec());
            } else {
                cut.extend(kernel_udp_segment(b));
            }
        }
        assert_eq!(cut.len(), n, "datagrams");
        for (i, (c, s)) in cut.iter_mut().zip(segs.iter()).enumerate() {
            let lay = layout(c).unwrap();
            if lay.v4 && c.len() > lay.l4 + 8 {
                let u = lay.l4;
                if c[u + 6..u + 8] != [0, 0] {
                    let sum = sum_bytes(pseudo_sum(c, &lay, c.len() - u), &c[u..]);
                    assert_eq!(fold(sum), 0xffff, "outer UDP/IPv4 checksum of datagram {i}");
                    c[u + 6..u + 8].copy_from_slice(&[0, 0]);
                }
            }
            assert_eq!(&c[..], s.data(), "datagram {i}");
        }
        nbuf
    }

    #[test]
    fn udp_gso_buffer_cuts_into_the_software_segments() {
        // 3500 bytes at MSS 1398: one buffer of three pieces, IPv4 and IPv6 outside.
        let data = payload(3500);
        let flags = 0x10 | TCP_PSH | TCP_CWR;
        for (v6_outer, v6_inner) in [(false, false), (true, false), (false, true), (true, true)] {
            let pkt =
                tunnelled_super_packet(v6_outer, v6_inner, true, 0xffff_fa00, flags, &data, 1398);
            assert_eq!(check_udp_gso_matches_segment(&pkt), 1);
            let mut out = Batch::new(4);
            udp_tunnel_gso(&pkt, &mut out).unwrap();
            let b = &out.packets()[0];
            let ohl = if v6_outer { 14 + 40 + 8 } else { 14 + 20 + 8 };
            let inner_hdrs = 8 + 14 + if v6_inner { 40 } else { 20 } + 32;
            let g = b.meta.offload.gso.unwrap();
            assert_eq!((usize::from(g.hdr_len), usize::from(g.size)), (ohl, inner_hdrs + 1398));
            assert_eq!(b.len(), ohl + 3 * inner_hdrs + 3500);
        }
    }

    #[test]
    fn a_64k_super_packet_takes_two_buffers() {
        // 47 segments of 1472-byte pieces: 44 fit under 64 KiB of IPv4 datagram.
        let data = payload(65_000);
        let pkt = tunnelled_super_packet(false, false, true, 1, 0x18, &data, 1398);
        assert_eq!(check_udp_gso_matches_segment(&pkt), 2);
        let mut out = Batch::new(4);
        udp_tunnel_gso(&pkt, &mut out).unwrap();
        assert!(out.iter().all(|b| b.len() - 14 <= 65_535));
        assert_eq!(
            u16::from_be_bytes([out.packets()[1].data()[18], out.packets()[1].data()[19]]),
            OUTER_ID.wrapping_add(44)
        );
        // A small MSS: at most UDP_GSO_MAX_SEGMENTS pieces per buffer, the last alone.
        let pkt = tunnelled_super_packet(false, false, true, 1, 0x18, &payload(64 * 100 + 1), 100);
        assert_eq!(check_udp_gso_matches_segment(&pkt), 2);
        let mut out = Batch::new(4);
        udp_tunnel_gso(&pkt, &mut out).unwrap();
        assert_eq!(out.packets()[1].meta.offload, Offload::default());
        // One segment: one plain frame.
        let pkt = tunnelled_super_packet(true, false, true, 1, 0x18, &payload(500), 1398);
        assert_eq!(check_udp_gso_matches_segment(&pkt), 1);
    }

    #[test]
    fn udp_gso_refuses_what_has_no_udp_tunnel() {
        let data = payload(3000);
        let mut out = Batch::new(8);
        let nvgre = tunnelled_super_packet(false, false, false, 1, 0x10, &data, 1000);
        assert_eq!(udp_tunnel_gso(&nvgre, &mut out), Err(OffloadError::NotUdpTunnel));
        let mut l4 = tcp_hdr(1, 0x10);
        l4.extend_from_slice(&data);
        let plain = gso_pkt(&ipv4_frame(PROTO_TCP, &l4, 1), GsoKind::TcpV4, 1000, 66);
        assert_eq!(udp_tunnel_gso(&plain, &mut out), Err(OffloadError::NotUdpTunnel));
        let none = PacketBuf::from_frame(plain.data());
        assert_eq!(udp_tunnel_gso(&none, &mut out), Err(OffloadError::NotGso));
        // No room: nothing added.
        let big = tunnelled_super_packet(false, false, true, 1, 0x10, &payload(65_000), 1398);
        let mut one = Batch::new(1);
        assert_eq!(udp_tunnel_gso(&big, &mut one), Err(OffloadError::NoRoom { need: 2, have: 1 }));
        assert!(one.is_empty() && out.is_empty());
        // Every prefix: an error, never a panic.
        let pkt = tunnelled_super_packet(false, false, true, 1, 0x10, &data, 1000);
        for n in 0..pkt.len() {
            let mut p = PacketBuf::from_frame(&pkt.data()[..n]);
            p.meta.offload = pkt.meta.offload;
            assert!(udp_tunnel_gso(&p, &mut out).is_err(), "prefix of {n} bytes");
        }
        assert!(out.is_empty());
    }

    proptest::proptest! {
        /// Any payload size and MSS, IPv4 or IPv6 outside and inside: the UDP GSO buffers cut
        /// at their `gso_size` as the kernel does give [`segment`]'s frames byte for byte.
        #[test]
        fn udp_gso_buffers_cut_into_segment_frames(
            len in 0usize..65_000,
            mss in 256u16..1500,
            v6_outer in proptest::bool::ANY,
            v6_inner in proptest::bool::ANY,
            seq in proptest::num::u32::ANY,
            flags in proptest::sample::select(vec![0x10u8, 0x18, 0x19, 0x98]),
        ) {
            let pkt = tunnelled_super_packet(v6_outer, v6_inner, true, seq, flags, &payload(len), mss);
            let nbuf = check_udp_gso_matches_segment(&pkt);
            proptest::prop_assert!(nbuf >= 1);
        }

        /// Mutated and cut tunnelled super-packets: an error or buffers, never a panic, and
        /// never a buffer past 64 KiB of IP datagram.
        #[test]
        fn udp_gso_never_panics_on_mutation(
            edits in proptest::collection::vec((0usize..220, proptest::num::u8::ANY), 0..6),
            cut in 0usize..3000,
            outer_len in 0u16..120,
            size in 1u16..300,
        ) {
            let pkt = tunnelled_super_packet(false, false, true, 3, 0x18, &payload(2000), size);
            let mut frame = pkt.data().to_vec();
            for (at, v) in edits {
                if let Some(b) = frame.get_mut(at) {
                    *b = v;
                }
            }
            frame.truncate(cut);
            let mut p = PacketBuf::from_frame(&frame);
            p.meta.offload = pkt.meta.offload;
            if let Some(g) = &mut p.meta.offload.gso {
                g.tunnel = Some(TunnelGso { kind: TunnelGsoKind::Vxlan, outer_len });
            }
            let mut out = Batch::new(256);
            if let Ok(n) = udp_tunnel_gso(&p, &mut out) {
                proptest::prop_assert_eq!(n, out.len());
                for b in out.iter() {
                    proptest::prop_assert!(b.len() <= 65_535 + 14);
                }
            }
        }
    }
}
