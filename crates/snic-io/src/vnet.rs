//! The virtio-net header (`struct virtio_net_hdr`, 10 bytes) that AF_PACKET sockets with
//! `PACKET_VNET_HDR` and TAP devices with `IFF_VNET_HDR` put in front of every frame.
//!
//! It carries the frame's segmentation (GSO) and checksum-offload state: a super-packet of up to
//! 64 KiB that is still to be cut into `gso_size`-byte segments, and an L4 checksum that is
//! partial (only the pseudo-header sum is filled in). [`VnetHdr`] parses and emits the header and
//! maps it to and from [`snic_pipeline::meta::Offload`].
//!
//! Layout (all multi-byte fields little-endian, as the kernel uses for these sockets and devices
//! on a little-endian host and for virtio 1.0):
//!
//! ```text
//! 0      flags        u8   NEEDS_CSUM = 1, DATA_VALID = 2
//! 1      gso_type     u8   NONE = 0, TCPV4 = 1, UDP = 3 (UFO, refused), TCPV6 = 4, UDP_L4 = 5, | ECN 0x80
//! 2..4   hdr_len      u16  length of all headers up to the L4 payload
//! 4..6   gso_size     u16  payload bytes per segment
//! 6..8   csum_start   u16  where checksumming starts, from the frame start
//! 8..10  csum_offset  u16  where the checksum is stored, from csum_start
//! ```
//!
//! # The UDP-tunnel header (Linux 6.17+)
//!
//! `struct virtio_net_hdr_v1_hash_tunnel` ([`VNET_HDR_TNL_LEN`] = 24 bytes) extends the header
//! for super-packets inside a UDP tunnel (VXLAN, Geneve): `gso_type` adds
//! [`GSO_UDP_TUNNEL_IPV4`] or [`GSO_UDP_TUNNEL_IPV6`] (the outer IP version) to the inner kind,
//! `flags` may add [`FLAG_UDP_TUNNEL_CSUM`] (the outer UDP checksum is to be computed per
//! segment), `csum_start` names the *inner* L4 header, and two offsets from the frame start
//! follow:
//!
//! ```text
//! 10..12 num_buffers      u16  (unused here, 0)
//! 12..16 hash_value       u32  (unused here, 0)
//! 16..18 hash_report      u16  (unused here, 0)
//! 18..20 padding          u16
//! 20..22 outer_th_offset  u16  the outer UDP header
//! 22..24 inner_nh_offset  u16  the inner IP header
//! ```
//!
//! A TAP device takes this header on write once its header size is 24 (`TUNSETVNETHDRSZ`), and
//! hands tunnelled super-packets over whole on read once `TUNSETOFFLOAD` has
//! `TUN_F_UDP_TUNNEL_GSO` (0x80). The kernel requires NEEDS_CSUM (the inner checksum partial)
//! for a tunnel super-packet. AF_PACKET's `PACKET_VNET_HDR` does not take the tunnel types
//! (`virtio_net_hdr_to_skb` refuses them): packet sockets keep the 10-byte header. They do take
//! [`GSO_UDP_L4`] (checked on Linux 6.18 over veth, with the peer's kernel VXLAN device
//! decapsulating every datagram; the kernel requires NEEDS_CSUM with `csum_offset` 6), so a
//! VXLAN super-packet leaves a packet socket as one UDP GSO buffer of ready VXLAN datagrams
//! (`snic_pipeline::offload::udp_tunnel_gso`), described by the plain header this module
//! writes for a [`GsoKind::UdpL4`] offload.
//! snic maps the tunnel types to [`snic_pipeline::meta::TunnelGso`] for VXLAN over IPv4 with a
//! zero outer UDP checksum only (what its encapsulation writes); [`VnetHdr::tunnel_whole`] says
//! when a packet can be written so, and anything else is segmented in software.
//!
//! This module is sans-IO: it only reads and writes bytes.

use core::fmt;
use snic_pipeline::meta::{Gso, GsoKind, Offload, TunnelGso, TunnelGsoKind};

/// Size of the header in bytes.
pub const VNET_HDR_LEN: usize = 10;
/// Size of the UDP-tunnel header (`struct virtio_net_hdr_v1_hash_tunnel`).
pub const VNET_HDR_TNL_LEN: usize = 24;
/// `gso_type` bit: the super-packet is inside a UDP tunnel over IPv4.
pub const GSO_UDP_TUNNEL_IPV4: u8 = 0x20;
/// `gso_type` bit: the super-packet is inside a UDP tunnel over IPv6.
pub const GSO_UDP_TUNNEL_IPV6: u8 = 0x40;
/// `flags`: the outer UDP checksum of a tunnel super-packet is to be computed per segment.
pub const FLAG_UDP_TUNNEL_CSUM: u8 = 8;
/// Bytes of a VXLAN header plus the outer UDP header.
const UDP_VXLAN_LEN: u16 = 16;
/// Bytes of an untagged Ethernet header.
const ETH_LEN: u16 = 14;

/// `flags`: the L4 checksum is partial and must be completed from `csum_start`.
pub const FLAG_NEEDS_CSUM: u8 = 1;
/// `flags`: the checksum was already verified (receive only).
pub const FLAG_DATA_VALID: u8 = 2;

/// `gso_type`: not a super-packet.
pub const GSO_NONE: u8 = 0;
/// `gso_type`: TCP over IPv4 super-packet.
pub const GSO_TCPV4: u8 = 1;
/// `gso_type`: UDP fragmentation offload (obsolete, refused here).
pub const GSO_UDP: u8 = 3;
/// `gso_type`: TCP over IPv6 super-packet.
pub const GSO_TCPV6: u8 = 4;
/// `gso_type`: UDP segmentation (each segment a datagram of its own).
pub const GSO_UDP_L4: u8 = 5;
/// `gso_type` bit: the TCP stream uses ECN (CWR set on the first segment only).
pub const GSO_ECN: u8 = 0x80;

/// A malformed or unsupported virtio-net header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum VnetError {
    /// Fewer than [`VNET_HDR_LEN`] bytes.
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        got: usize,
    },
    /// A `gso_type` this port does not handle (the raw value, ECN bit included).
    UnsupportedGsoType(u8),
    /// A super-packet with `gso_size` zero.
    ZeroGsoSize,
    /// Flag bits other than NEEDS_CSUM and DATA_VALID are set (the raw flags).
    UnknownFlags(u8),
    /// Moving the header's frame offsets for inserted bytes overflowed 16 bits.
    OffsetOverflow,
    /// A UDP-tunnel super-packet snic does not take whole: not VXLAN over IPv4 with an
    /// untagged inner Ethernet header and a zero outer checksum, or without NEEDS_CSUM (the
    /// raw `gso_type`).
    UnsupportedTunnel(u8),
}

impl fmt::Display for VnetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            VnetError::Truncated { need, got } => {
                write!(f, "virtio-net header truncated: need {need} bytes, got {got}")
            }
            VnetError::UnsupportedGsoType(t) => {
                write!(f, "virtio-net header: unsupported gso_type {t:#04x}")
            }
            VnetError::ZeroGsoSize => {
                write!(f, "virtio-net header: GSO super-packet with gso_size 0")
            }
            VnetError::UnknownFlags(x) => write!(f, "virtio-net header: unknown flags {x:#04x}"),
            VnetError::OffsetOverflow => {
                write!(f, "virtio-net header: offsets overflow after inserting bytes")
            }
            VnetError::UnsupportedTunnel(t) => {
                write!(
                    f,
                    "virtio-net header: unsupported UDP-tunnel super-packet (gso_type {t:#04x})"
                )
            }
        }
    }
}

impl std::error::Error for VnetError {}

/// The decoded fields of a virtio-net header, as they are on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VnetHdr {
    /// `FLAG_*` bits.
    pub flags: u8,
    /// One of the `GSO_*` values, possibly with [`GSO_ECN`].
    pub gso_type: u8,
    /// Length of the headers up to the L4 payload.
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Start of the checksummed range, from the frame start.
    pub csum_start: u16,
    /// Offset of the checksum field from `csum_start`.
    pub csum_offset: u16,
    /// UDP-tunnel header only: where the outer UDP header starts (0 when not tunnelled).
    pub outer_th: u16,
    /// UDP-tunnel header only: where the inner IP header starts (0 when not tunnelled).
    pub inner_nh: u16,
}

impl VnetHdr {
    /// Decode the first [`VNET_HDR_LEN`] bytes of `buf`. Only the length is checked here; use
    /// [`VnetHdr::to_offload`] to validate the contents.
    pub fn parse(buf: &[u8]) -> Result<VnetHdr, VnetError> {
        let Some(b) = buf.get(..VNET_HDR_LEN) else {
            return Err(VnetError::Truncated { need: VNET_HDR_LEN, got: buf.len() });
        };
        let le = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Ok(VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: le(2),
            gso_size: le(4),
            csum_start: le(6),
            csum_offset: le(8),
            outer_th: 0,
            inner_nh: 0,
        })
    }

    /// Decode a header of `len` bytes ([`VNET_HDR_LEN`], or [`VNET_HDR_TNL_LEN`] and more for
    /// the UDP-tunnel header, whose offsets are read too).
    pub fn parse_sized(buf: &[u8], len: usize) -> Result<VnetHdr, VnetError> {
        let mut h = VnetHdr::parse(buf)?;
        if len >= VNET_HDR_TNL_LEN {
            let Some(b) = buf.get(..VNET_HDR_TNL_LEN) else {
                return Err(VnetError::Truncated { need: VNET_HDR_TNL_LEN, got: buf.len() });
            };
            h.outer_th = u16::from_le_bytes([b[20], b[21]]);
            h.inner_nh = u16::from_le_bytes([b[22], b[23]]);
        }
        Ok(h)
    }

    /// The UDP-tunnel header as bytes (the tunnel offsets are zero for other packets).
    pub fn to_tnl_bytes(&self) -> [u8; VNET_HDR_TNL_LEN] {
        let mut b = [0u8; VNET_HDR_TNL_LEN];
        // Cannot fail: the array holds VNET_HDR_LEN bytes.
        let _ = self.emit(&mut b);
        b[20..22].copy_from_slice(&self.outer_th.to_le_bytes());
        b[22..24].copy_from_slice(&self.inner_nh.to_le_bytes());
        b
    }

    /// Whether a packet with offload state `off` and frame `frame` can leave whole, with the
    /// UDP-tunnel header, through a port that negotiated UDP-tunnel GSO: a TCP super-packet in
    /// VXLAN over IPv4 (no outer VLAN tag) with its inner checksum partial, an untagged inner
    /// Ethernet header, and a zero outer UDP checksum (nothing to compute per segment). Plain
    /// packets return false (they need no tunnel header).
    pub fn tunnel_whole(off: &Offload, frame: &[u8]) -> bool {
        let Some(Gso { kind: GsoKind::TcpV4 | GsoKind::TcpV6, tunnel: Some(t), .. }) = off.gso
        else {
            return false;
        };
        let ol = usize::from(t.outer_len);
        t.kind == TunnelGsoKind::Vxlan
            && off.csum_partial.is_some()
            && frame.get(12..14) == Some(&[0x08, 0x00])
            && ol == usize::from(ETH_LEN + 20 + UDP_VXLAN_LEN)
            && frame.get(ol - 10..ol - 8) == Some(&[0, 0])
            && frame.get(ol + 12..ol + 14).is_some_and(|e| e != [0x81, 0x00] && e != [0x88, 0xa8])
    }

    /// Encode into `out`, which must hold at least [`VNET_HDR_LEN`] bytes.
    pub fn emit(&self, out: &mut [u8]) -> Result<(), VnetError> {
        let got = out.len();
        let Some(b) = out.get_mut(..VNET_HDR_LEN) else {
            return Err(VnetError::Truncated { need: VNET_HDR_LEN, got });
        };
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        Ok(())
    }

    /// The header as bytes.
    pub fn to_bytes(&self) -> [u8; VNET_HDR_LEN] {
        let mut b = [0u8; VNET_HDR_LEN];
        // Cannot fail: the array is exactly VNET_HDR_LEN long.
        let _ = self.emit(&mut b);
        b
    }

    /// The header for the same frame after `n` bytes were inserted in front of its L3 header
    /// (a VLAN tag put back after the MAC addresses): `csum_start` (when NEEDS_CSUM is set) and
    /// `hdr_len` (when non-zero) count from the frame start and move by `n`; `csum_offset` and
    /// `gso_size` are relative and stay.
    pub fn shifted(&self, n: u16) -> Result<VnetHdr, VnetError> {
        let mut h = *self;
        if h.flags & FLAG_NEEDS_CSUM != 0 {
            h.csum_start = h.csum_start.checked_add(n).ok_or(VnetError::OffsetOverflow)?;
        }
        if h.hdr_len != 0 {
            h.hdr_len = h.hdr_len.checked_add(n).ok_or(VnetError::OffsetOverflow)?;
        }
        Ok(h)
    }

    /// True when the ECN bit of `gso_type` is set.
    pub fn ecn(&self) -> bool {
        self.gso_type & GSO_ECN != 0
    }

    /// The pipeline's view of this header. DATA_VALID is accepted and dropped (the pipeline
    /// re-verifies nothing it does not rewrite); the ECN bit is recovered on transmit from the
    /// TCP header (see [`VnetHdr::from_offload`]).
    pub fn to_offload(&self) -> Result<Offload, VnetError> {
        let unknown = self.flags & !(FLAG_NEEDS_CSUM | FLAG_DATA_VALID);
        if unknown != 0 {
            return Err(VnetError::UnknownFlags(self.flags));
        }
        // FLAG_UDP_TUNNEL_CSUM is refused above: snic does not negotiate outer checksums.
        if self.gso_type & (GSO_UDP_TUNNEL_IPV4 | GSO_UDP_TUNNEL_IPV6) != 0 {
            return self.tunnel_offload();
        }
        let csum_partial =
            (self.flags & FLAG_NEEDS_CSUM != 0).then_some((self.csum_start, self.csum_offset));
        let kind = match self.gso_type & !GSO_ECN {
            GSO_NONE => return Ok(Offload { csum_partial, gso: None }),
            GSO_TCPV4 => GsoKind::TcpV4,
            GSO_TCPV6 => GsoKind::TcpV6,
            GSO_UDP_L4 => GsoKind::UdpL4,
            _ => return Err(VnetError::UnsupportedGsoType(self.gso_type)),
        };
        if self.gso_size == 0 {
            return Err(VnetError::ZeroGsoSize);
        }
        Ok(Offload {
            csum_partial,
            gso: Some(Gso { kind, size: self.gso_size, hdr_len: self.hdr_len, tunnel: None }),
        })
    }

    /// [`VnetHdr::to_offload`] for a UDP-tunnel super-packet: VXLAN over IPv4 (the offsets
    /// say UDP + VXLAN + untagged Ethernet lie between the outer UDP and inner IP headers), no
    /// outer checksum to compute, inner TCP with NEEDS_CSUM. The frame's bytes are not looked
    /// at here: the port checks the outer protocol (see [`VnetHdr::tunnel_whole`]).
    fn tunnel_offload(&self) -> Result<Offload, VnetError> {
        let unsupported = VnetError::UnsupportedTunnel(self.gso_type);
        if self.gso_type & GSO_UDP_TUNNEL_IPV6 != 0
            || self.flags != FLAG_NEEDS_CSUM
            || self.outer_th != ETH_LEN + 20
            || self.inner_nh != self.outer_th + UDP_VXLAN_LEN + ETH_LEN
            || self.csum_start < self.inner_nh + 20
        {
            return Err(unsupported);
        }
        let kind = match self.gso_type & !(GSO_ECN | GSO_UDP_TUNNEL_IPV4) {
            GSO_TCPV4 => GsoKind::TcpV4,
            GSO_TCPV6 => GsoKind::TcpV6,
            _ => return Err(unsupported),
        };
        if self.gso_size == 0 {
            return Err(VnetError::ZeroGsoSize);
        }
        let outer_len = self.inner_nh - ETH_LEN;
        let tunnel = Some(TunnelGso { kind: TunnelGsoKind::Vxlan, outer_len });
        Ok(Offload {
            csum_partial: Some((self.csum_start, self.csum_offset)),
            gso: Some(Gso { kind, size: self.gso_size, hdr_len: self.hdr_len, tunnel }),
        })
    }

    /// The header to send `frame` with, given its offload state. For a TCP super-packet the ECN
    /// bit is set when the TCP header (found at `csum_start`) has CWR set, as the kernel expects.
    /// A tunnelled super-packet that [`VnetHdr::tunnel_whole`] accepts gets the UDP-tunnel type
    /// and offsets (send it with [`VnetHdr::to_tnl_bytes`]); callers segment the others first.
    pub fn from_offload(off: &Offload, frame: &[u8]) -> VnetHdr {
        let mut h = VnetHdr::default();
        if let Some((start, offset)) = off.csum_partial {
            h.flags = FLAG_NEEDS_CSUM;
            h.csum_start = start;
            h.csum_offset = offset;
        }
        if let Some(gso) = off.gso {
            h.gso_size = gso.size;
            h.hdr_len = gso.hdr_len;
            h.gso_type = match gso.kind {
                GsoKind::TcpV4 => GSO_TCPV4,
                GsoKind::TcpV6 => GSO_TCPV6,
                GsoKind::UdpL4 => GSO_UDP_L4,
            };
            if matches!(gso.kind, GsoKind::TcpV4 | GsoKind::TcpV6) {
                // TCP flags are byte 13 of the TCP header; CWR is bit 0x80.
                let flags_at = usize::from(h.csum_start) + 13;
                if h.flags & FLAG_NEEDS_CSUM != 0
                    && frame.get(flags_at).is_some_and(|f| f & 0x80 != 0)
                {
                    h.gso_type |= GSO_ECN;
                }
            }
            if let Some(t) = gso.tunnel
                && VnetHdr::tunnel_whole(off, frame)
            {
                h.gso_type |= GSO_UDP_TUNNEL_IPV4;
                h.outer_th = t.outer_len - UDP_VXLAN_LEN;
                h.inner_nh = t.outer_len + ETH_LEN;
            }
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCPv4 super-packet header as the kernel hands it over on a veth: NEEDS_CSUM, csum at
    /// 14 + 20 = 34, offset 16, hdr_len 66 (Ethernet + IPv4 + TCP with timestamps), MSS 1448.
    const TCP4: [u8; 10] = [0x01, 0x01, 66, 0, 0xa8, 0x05, 34, 0, 16, 0];

    #[test]
    fn parse_tcpv4_super_packet() {
        let h = VnetHdr::parse(&TCP4).unwrap();
        assert_eq!(
            h,
            VnetHdr {
                flags: FLAG_NEEDS_CSUM,
                gso_type: GSO_TCPV4,
                hdr_len: 66,
                gso_size: 1448,
                csum_start: 34,
                csum_offset: 16,
                ..VnetHdr::default()
            }
        );
        let off = h.to_offload().unwrap();
        assert_eq!(
            off,
            Offload {
                csum_partial: Some((34, 16)),
                gso: Some(Gso { kind: GsoKind::TcpV4, size: 1448, hdr_len: 66, tunnel: None }),
            }
        );
    }

    #[test]
    fn emit_round_trips_byte_exact() {
        let h = VnetHdr::parse(&TCP4).unwrap();
        assert_eq!(h.to_bytes(), TCP4);
        let off = h.to_offload().unwrap();
        // The TCP header at 34 has flags ACK only: no ECN bit.
        let mut frame = [0u8; 66];
        frame[34 + 13] = 0x10;
        assert_eq!(VnetHdr::from_offload(&off, &frame).to_bytes(), TCP4);
    }

    #[test]
    fn ecn_bit_follows_cwr() {
        let off = VnetHdr::parse(&TCP4).unwrap().to_offload().unwrap();
        let mut frame = [0u8; 66];
        frame[34 + 13] = 0x90; // CWR | ACK
        let h = VnetHdr::from_offload(&off, &frame);
        assert_eq!(h.gso_type, GSO_TCPV4 | GSO_ECN);
        assert!(h.ecn());
        // ECN on receive maps to the same kind.
        let back = h.to_offload().unwrap();
        assert_eq!(back.gso.unwrap().kind, GsoKind::TcpV4);
    }

    #[test]
    fn tcpv6_and_udp_l4() {
        // IPv6: csum_start 14 + 40 = 54 (0x36), offset 16; MSS 1428 = 0x0594.
        let b = [0x01, 0x04, 86, 0, 0x94, 0x05, 0x36, 0, 16, 0];
        let off = VnetHdr::parse(&b).unwrap().to_offload().unwrap();
        assert_eq!(
            off.gso,
            Some(Gso { kind: GsoKind::TcpV6, size: 1428, hdr_len: 86, tunnel: None })
        );
        assert_eq!(VnetHdr::from_offload(&off, &[]).to_bytes(), b);
        // UDP_L4 over IPv4: csum at 34, offset 6, hdr_len 42, 1200-byte datagrams (0x04b0).
        let b = [0x01, 0x05, 42, 0, 0xb0, 0x04, 34, 0, 6, 0];
        let off = VnetHdr::parse(&b).unwrap().to_offload().unwrap();
        assert_eq!(
            off.gso,
            Some(Gso { kind: GsoKind::UdpL4, size: 1200, hdr_len: 42, tunnel: None })
        );
        assert_eq!(off.csum_partial, Some((34, 6)));
        assert_eq!(VnetHdr::from_offload(&off, &[]).to_bytes(), b);
    }

    #[test]
    fn shifted_moves_frame_offsets_only() {
        let h = VnetHdr::parse(&TCP4).unwrap().shifted(4).unwrap();
        assert_eq!((h.csum_start, h.csum_offset, h.hdr_len, h.gso_size), (38, 16, 70, 1448));
        assert_eq!((h.flags, h.gso_type), (FLAG_NEEDS_CSUM, GSO_TCPV4));
        let off = h.to_offload().unwrap();
        assert_eq!(off.csum_partial, Some((38, 16)));
        assert_eq!(off.gso.unwrap().hdr_len, 70);
        // Without NEEDS_CSUM, csum_start means nothing and stays; a zero hdr_len stays zero.
        let plain = VnetHdr { flags: FLAG_DATA_VALID, csum_start: 7, ..Default::default() };
        assert_eq!(plain.shifted(4).unwrap(), plain);
        assert_eq!(VnetHdr::default().shifted(4).unwrap(), VnetHdr::default());
        // Overflow is an error, not a wrap.
        let far =
            VnetHdr { flags: FLAG_NEEDS_CSUM, csum_start: u16::MAX - 2, ..Default::default() };
        assert_eq!(far.shifted(4), Err(VnetError::OffsetOverflow));
        let long = VnetHdr { hdr_len: u16::MAX, ..Default::default() };
        assert_eq!(long.shifted(1), Err(VnetError::OffsetOverflow));
    }

    #[test]
    fn plain_frame_is_all_zero() {
        let off = VnetHdr::parse(&[0; 10]).unwrap().to_offload().unwrap();
        assert_eq!(off, Offload::default());
        assert_eq!(VnetHdr::from_offload(&Offload::default(), &[]).to_bytes(), [0; 10]);
        // DATA_VALID alone: nothing to do.
        let off = VnetHdr::parse(&[2, 0, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap().to_offload().unwrap();
        assert_eq!(off, Offload::default());
    }

    #[test]
    fn bad_headers_are_typed_errors() {
        assert_eq!(VnetHdr::parse(&[0; 9]), Err(VnetError::Truncated { need: 10, got: 9 }));
        assert_eq!(
            VnetHdr::default().emit(&mut [0u8; 4]),
            Err(VnetError::Truncated { need: 10, got: 4 })
        );
        let ufo = VnetHdr { gso_type: GSO_UDP, gso_size: 1000, ..Default::default() };
        assert_eq!(ufo.to_offload(), Err(VnetError::UnsupportedGsoType(GSO_UDP)));
        let zero = VnetHdr { gso_type: GSO_TCPV4, ..Default::default() };
        assert_eq!(zero.to_offload(), Err(VnetError::ZeroGsoSize));
        let flags = VnetHdr { flags: 0x41, ..Default::default() };
        assert_eq!(flags.to_offload(), Err(VnetError::UnknownFlags(0x41)));
    }

    /// A VXLAN-over-IPv4 super-packet as snic encapsulates it: Ethernet + IPv4 + UDP (checksum
    /// 0) + VXLAN + inner Ethernet + IPv4 + TCP.
    fn vxlan_frame() -> Vec<u8> {
        let mut f = vec![0u8; 50 + 14 + 20 + 20 + 100];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[23] = 17;
        f[50 + 12..50 + 14].copy_from_slice(&[0x08, 0x00]);
        f
    }

    #[test]
    fn tunnel_header_round_trips_with_offsets() {
        let tunnel = Some(TunnelGso { kind: TunnelGsoKind::Vxlan, outer_len: 50 });
        let gso = Gso { kind: GsoKind::TcpV4, size: 1398, hdr_len: 104, tunnel };
        let off = Offload { csum_partial: Some((84, 16)), gso: Some(gso) };
        let f = vxlan_frame();
        assert!(VnetHdr::tunnel_whole(&off, &f));
        let h = VnetHdr::from_offload(&off, &f);
        let b = h.to_tnl_bytes();
        assert_eq!(
            b,
            [
                0x01, 0x21, 104, 0, 0x76, 0x05, 84, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 34, 0,
                64, 0
            ]
        );
        let back = VnetHdr::parse_sized(&b, VNET_HDR_TNL_LEN).unwrap();
        assert_eq!(back, h);
        assert_eq!(back.to_offload().unwrap(), off);
        // A 10-byte parse does not read the offsets.
        let short = VnetHdr::parse_sized(&b, VNET_HDR_LEN).unwrap();
        assert_eq!((short.outer_th, short.inner_nh), (0, 0));
        assert_eq!(
            VnetHdr::parse_sized(&b[..20], VNET_HDR_TNL_LEN).unwrap_err(),
            VnetError::Truncated { need: 24, got: 20 }
        );
        // A plain header in 24 bytes: zero offsets, same meaning.
        let plain = VnetHdr::parse(&TCP4).unwrap();
        assert_eq!(&plain.to_tnl_bytes()[..10], &TCP4);
        assert_eq!(&plain.to_tnl_bytes()[10..], &[0; 14]);
    }

    #[test]
    fn tunnel_packets_snic_cannot_take_whole_are_refused() {
        let tunnel = Some(TunnelGso { kind: TunnelGsoKind::Vxlan, outer_len: 50 });
        let gso = Gso { kind: GsoKind::TcpV4, size: 1398, hdr_len: 104, tunnel };
        let off = Offload { csum_partial: Some((84, 16)), gso: Some(gso) };
        let f = vxlan_frame();
        // Outer UDP checksum set, inner VLAN tag, outer IPv6, no partial checksum, NVGRE.
        let mut csum = f.clone();
        csum[40] = 1;
        let mut tagged = f.clone();
        tagged[62..64].copy_from_slice(&[0x81, 0x00]);
        let mut v6 = f.clone();
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        for frame in [&csum, &tagged, &v6] {
            assert!(!VnetHdr::tunnel_whole(&off, frame));
            assert_eq!(VnetHdr::from_offload(&off, frame).gso_type, GSO_TCPV4);
        }
        assert!(!VnetHdr::tunnel_whole(&Offload { csum_partial: None, ..off }, &f));
        let nvgre = Some(TunnelGso { kind: TunnelGsoKind::Nvgre, outer_len: 50 });
        let g = Offload { gso: Some(Gso { tunnel: nvgre, ..gso }), ..off };
        assert!(!VnetHdr::tunnel_whole(&g, &f));
        assert!(!VnetHdr::tunnel_whole(&Offload::default(), &f));
        // Received headers: outer IPv6, outer checksum, Geneve-sized offsets, UDP inside, no
        // NEEDS_CSUM are typed errors.
        let good = VnetHdr::from_offload(&off, &f);
        let bad = [
            VnetHdr { gso_type: GSO_TCPV4 | GSO_UDP_TUNNEL_IPV6, ..good },
            VnetHdr { inner_nh: 72, ..good },
            VnetHdr { gso_type: GSO_UDP_L4 | GSO_UDP_TUNNEL_IPV4, ..good },
            VnetHdr { flags: 0, ..good },
        ];
        for h in bad {
            assert_eq!(h.to_offload(), Err(VnetError::UnsupportedTunnel(h.gso_type)), "{h:?}");
        }
        let with_csum = VnetHdr { flags: FLAG_NEEDS_CSUM | FLAG_UDP_TUNNEL_CSUM, ..good };
        assert_eq!(with_csum.to_offload(), Err(VnetError::UnknownFlags(9)));
        assert_eq!(VnetHdr { gso_size: 0, ..good }.to_offload(), Err(VnetError::ZeroGsoSize));
    }
}
