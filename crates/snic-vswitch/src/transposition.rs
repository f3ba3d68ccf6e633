//! Header transposition: the action of a unified flow, as a short list of header operations
//! ("microcode") that the fast path interprets for every packet of the flow.
//!
//! A [`Transposition`] is built once on the slow path ([`Transposition::new`] validates the ops
//! and precompiles the encapsulation header into a byte template); [`Transposition::apply`] then
//! runs the ops in order on one packet, with no allocation and no lock. A new action kind is a
//! new [`Op`] variant: the flow table and the fast path's loop do not change.
//!
//! Ops work on the *current frame*: at first the whole frame, after [`Op::PopOuter`] the inner
//! frame of the tunnel. Checksums are kept valid incrementally (RFC 1624), including frames whose
//! L4 checksum is left to the device (`csum_partial`), and IPv4 first fragments. Decapsulation
//! follows RFC 6040 normal mode for ECN; encapsulation copies the inner ECN to the outer header.
//!
//! Checksum offload: when `meta.offload.csum_partial` names the L4 checksum field, that field
//! holds the non-complemented pseudo-header sum and the device sums the rest. Address rewrites
//! then update it without the complement (`S' = S + ~m + m'`); port and echo-identifier
//! rewrites leave it alone, since the device's sum covers them (as Linux's
//! `inet_proto_csum_replace*` does for `CHECKSUM_PARTIAL`). An IPv6 VXLAN encapsulation of such
//! a packet computes its outer UDP checksum as if the inner one were complete (local checksum
//! offload, as Linux does for tunnels).
//!
//! GSO super-packets (`meta.offload.gso`, from a guest with TSO on) may be encapsulated: the
//! push records the outer headers in `gso.tunnel` and moves `gso.hdr_len` and the checksum
//! start past them; the outer lengths are those of the whole super-packet and the outer
//! UDP/IPv6 checksum is left 0. The I/O layer then either writes it whole (a TAP port with
//! UDP-tunnel GSO: VXLAN over IPv4, whose zero outer checksum needs no per-segment work) or
//! segments it in software (`snic_pipeline::offload::segment`, "tunnel TSO"), fixing lengths and
//! checksums per segment. A pop of a super-packet is allowed only for outer headers of exactly
//! the recorded length (`gso.tunnel`): pushed here, or received whole with a UDP-tunnel
//! virtio-net header (VXLAN, which the TAP port maps to the same record).
//!
//! This module does not parse frames (it uses the layer offsets of `pkt.meta.stack`), does not
//! segment GSO super-packets, does not add VLAN tags to the outer frame of an encapsulation, and
//! does not encapsulate in Geneve (it decapsulates it).

use crate::policy::{Mac, TunnelKind};
use core::fmt;
use core::net::IpAddr;
use snic_pipeline::PacketBuf;
use snic_pipeline::meta::{TunnelGso, TunnelGsoKind};
use snic_wire::checksum;
use snic_wire::stack::{Headers, Layer};

/// One header operation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Op {
    /// Strip everything before the inner Ethernet header of a tunnelled packet (VXLAN, NVGRE,
    /// Geneve), and any trailer after the outer IP datagram. ECN by RFC 6040 normal mode: an
    /// outer CE marks an ECN-capable inner header CE (an outer ECT(1) turns an inner ECT(0) into
    /// ECT(1)); an outer CE over a Not-ECT inner packet is an error ([`TranspositionError::CeOnNotEct`]).
    PopOuter,
    /// Remove the outermost VLAN tag of the current frame.
    PopVlan,
    /// Add an outermost VLAN tag with this TCI (PCP in bits 15..13, DEI in bit 12, VID in bits
    /// 11..0; a plain VID is a TCI of priority 0). The TPID is 0x8100 on an untagged frame and
    /// 0x88a8 (802.1ad S-tag) in front of an existing tag.
    PushVlan(u16),
    /// Rewrite the Ethernet source of the current frame.
    SetEthSrc(Mac),
    /// Rewrite the Ethernet destination of the current frame.
    SetEthDst(Mac),
    /// Rewrite the IP source of the current frame (IPv4 header checksum and TCP/UDP/ICMPv6
    /// checksums fixed incrementally; a UDP/IPv4 checksum of 0 stays 0). The packet's family
    /// must match the address's.
    SetIpSrc(IpAddr),
    /// Rewrite the IP destination; as [`Op::SetIpSrc`].
    SetIpDst(IpAddr),
    /// Rewrite the TCP/UDP source port, or the ICMP/ICMPv6 echo identifier.
    SetL4Src(u16),
    /// Rewrite the TCP/UDP destination port, or the ICMP/ICMPv6 echo identifier.
    SetL4Dst(u16),
    /// Decrement the IPv4 TTL / IPv6 hop limit; a packet arriving with 0 or 1 is an error
    /// ([`TranspositionError::TtlExpired`]).
    DecTtl,
    /// Prepend an outer Ethernet + IPv4/IPv6 + (UDP + VXLAN | NVGRE) header; the current frame
    /// becomes the inner frame.
    PushEncap(Encap),
}

/// An encapsulation to push.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Encap {
    /// VXLAN (RFC 7348) or NVGRE (RFC 7637).
    pub kind: TunnelKind,
    /// Outer Ethernet source.
    pub src_mac: Mac,
    /// Outer Ethernet destination.
    pub dst_mac: Mac,
    /// Outer IP source (same family as `dst_ip`).
    pub src_ip: IpAddr,
    /// Outer IP destination.
    pub dst_ip: IpAddr,
    /// VXLAN VNI / NVGRE VSID (24 bits).
    pub vni: u32,
    /// Outer TTL / hop limit (not 0).
    pub ttl: u8,
    /// Outer UDP destination port of VXLAN (4789); ignored for NVGRE.
    pub udp_dst: u16,
}

/// Why a transposition could not be built or applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TranspositionError {
    /// `PopOuter` on a packet without a tunnel and an inner Ethernet header.
    NotTunnelled,
    /// An Ethernet op on a frame without an Ethernet header.
    NoL2,
    /// An IP op on a frame without an IP header.
    NoL3,
    /// A port/identifier op on a packet without TCP, UDP or ICMP echo; or an address rewrite on
    /// a packet whose L4 header (and checksum) did not parse: a truncated one, or an IPv6
    /// fragment (IPv4 fragments are handled).
    NoL4,
    /// An IP address of one family for a packet of the other (or two such ops in one list).
    FamilyMismatch,
    /// TTL / hop limit was 0 or 1.
    TtlExpired,
    /// Not enough headroom for a push.
    NoRoom {
        /// Bytes needed in front of the frame.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// A tunnel push on a GSO super-packet that already carries one (`gso.tunnel`), or a pop
    /// of a super-packet whose outer headers were not pushed by an encapsulation here.
    SuperPacket,
    /// An invalid [`Encap`] (at [`Transposition::new`]).
    BadEncap(&'static str),
    /// An invalid op list (at [`Transposition::new`]): order, repetition or a bad value.
    BadProgram(&'static str),
    /// `PopVlan` on an untagged frame.
    NoVlan,
    /// `PushVlan` on a frame that already has two tags.
    TooManyVlans,
    /// A header the stack points at does not fit in the frame (the stack does not describe it).
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Frame length.
        have: usize,
    },
    /// The encapsulated packet would exceed the 16-bit IP length field.
    TooLong {
        /// The length that does not fit.
        len: usize,
    },
    /// RFC 6040: outer CE over a Not-ECT inner packet must be dropped at decapsulation.
    CeOnNotEct,
    /// The checksum-offload offsets do not fit the rewritten frame.
    BadOffload,
    /// The layer offsets of `meta.stack` contradict each other (a stale or foreign stack).
    BadStack,
}

impl fmt::Display for TranspositionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TranspositionError::NotTunnelled => {
                f.write_str("pop: packet is not tunnelled over Ethernet")
            }
            TranspositionError::NoL2 => f.write_str("frame has no Ethernet header"),
            TranspositionError::NoL3 => f.write_str("frame has no IP header"),
            TranspositionError::NoL4 => f.write_str("packet has no TCP/UDP/ICMP echo header"),
            TranspositionError::FamilyMismatch => f.write_str("IP address family does not match"),
            TranspositionError::TtlExpired => f.write_str("TTL expired"),
            TranspositionError::NoRoom { need, have } => {
                write!(f, "no headroom: need {need} bytes, have {have}")
            }
            TranspositionError::SuperPacket => {
                f.write_str("tunnel push on a tunnelled, or pop on a plain, GSO super-packet")
            }
            TranspositionError::BadEncap(why) => write!(f, "bad encapsulation: {why}"),
            TranspositionError::BadProgram(why) => write!(f, "bad transposition: {why}"),
            TranspositionError::NoVlan => f.write_str("pop_vlan: frame has no VLAN tag"),
            TranspositionError::TooManyVlans => {
                f.write_str("push_vlan: frame already has two VLAN tags")
            }
            TranspositionError::Truncated { need, have } => {
                write!(f, "header beyond the frame: need {need} bytes, frame has {have}")
            }
            TranspositionError::TooLong { len } => {
                write!(f, "encapsulated packet of {len} bytes exceeds the IP length field")
            }
            TranspositionError::CeOnNotEct => {
                f.write_str("decap: outer CE over a Not-ECT inner packet")
            }
            TranspositionError::BadOffload => f.write_str("checksum offload offsets out of range"),
            TranspositionError::BadStack => f.write_str("layer offsets do not describe the frame"),
        }
    }
}

impl std::error::Error for TranspositionError {}

impl From<snic_pipeline::buf::NoRoom> for TranspositionError {
    fn from(e: snic_pipeline::buf::NoRoom) -> Self {
        TranspositionError::NoRoom { need: e.need, have: e.have }
    }
}

type Result<T> = core::result::Result<T, TranspositionError>;

// ---- precompiled encapsulation ------------------------------------------------------------

/// Longest template: Ethernet 14 + IPv6 40 + UDP 8 + VXLAN 8.
const MAX_TEMPLATE: usize = 70;
const ETH_LEN: usize = 14;
const IP4_LEN: usize = 20;
const IP6_LEN: usize = 40;
const UDP_LEN: usize = 8;
const VXLAN_LEN: usize = 8;
const NVGRE_LEN: usize = 8;
const PROTO_UDP: u8 = 17;
const PROTO_GRE: u8 = 47;
const PROTO_TCP: u8 = 6;
const PROTO_ICMPV6: u8 = 58;

/// The outer headers of an [`Encap`], with the checksum parts that do not vary precomputed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Template {
    bytes: [u8; MAX_TEMPLATE],
    len: u8,
    v6: bool,
    vxlan: bool,
    /// IPv4: folded sum of the header with total length, TOS and checksum zero.
    /// IPv6 + VXLAN: folded sum of the pseudo-header without its length, the UDP destination
    /// port and the VXLAN header.
    sum: u16,
}

impl Template {
    fn new(e: &Encap) -> Result<Template> {
        if e.vni > 0x00ff_ffff {
            return Err(TranspositionError::BadEncap("vni exceeds 24 bits"));
        }
        if e.ttl == 0 {
            return Err(TranspositionError::BadEncap("ttl 0"));
        }
        let vxlan = matches!(e.kind, TunnelKind::Vxlan);
        if vxlan && e.udp_dst == 0 {
            return Err(TranspositionError::BadEncap("udp destination port 0"));
        }
        let mut b = [0u8; MAX_TEMPLATE];
        b[0..6].copy_from_slice(&e.dst_mac);
        b[6..12].copy_from_slice(&e.src_mac);
        let proto = if vxlan { PROTO_UDP } else { PROTO_GRE };
        let (l4, v6, mut sum) = match (e.src_ip, e.dst_ip) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                b[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
                let ip = &mut b[ETH_LEN..ETH_LEN + IP4_LEN];
                ip[0] = 0x45;
                ip[6] = 0x40; // DF
                ip[8] = e.ttl;
                ip[9] = proto;
                ip[12..16].copy_from_slice(&s.octets());
                ip[16..20].copy_from_slice(&d.octets());
                (ETH_LEN + IP4_LEN, false, sum_bytes(ip))
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                b[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
                let ip = &mut b[ETH_LEN..ETH_LEN + IP6_LEN];
                ip[0] = 0x60;
                ip[6] = proto;
                ip[7] = e.ttl;
                ip[8..24].copy_from_slice(&s.octets());
                ip[24..40].copy_from_slice(&d.octets());
                // Pseudo-header without the length: addresses and next header.
                let pseudo = fold(u64::from(sum_bytes(&ip[8..40])) + u64::from(PROTO_UDP));
                (ETH_LEN + IP6_LEN, true, pseudo)
            }
            _ => {
                return Err(TranspositionError::BadEncap(
                    "source and destination of different families",
                ));
            }
        };
        let len = if vxlan {
            b[l4 + 2..l4 + 4].copy_from_slice(&e.udp_dst.to_be_bytes());
            let vx = l4 + UDP_LEN;
            b[vx] = 0x08; // I flag
            b[vx + 4..vx + 8].copy_from_slice(&(e.vni << 8).to_be_bytes());
            if v6 {
                sum = fold(
                    u64::from(sum)
                        + u64::from(e.udp_dst)
                        + u64::from(sum_bytes(&b[vx..vx + VXLAN_LEN])),
                );
            }
            vx + VXLAN_LEN
        } else {
            b[l4..l4 + 2].copy_from_slice(&0x2000u16.to_be_bytes()); // K
            b[l4 + 2..l4 + 4].copy_from_slice(&0x6558u16.to_be_bytes());
            b[l4 + 4..l4 + 8].copy_from_slice(&(e.vni << 8).to_be_bytes());
            l4 + NVGRE_LEN
        };
        if v6 && !vxlan {
            sum = 0;
        }
        Ok(Template { bytes: b, len: len as u8, v6, vxlan, sum })
    }

    fn len(&self) -> usize {
        usize::from(self.len)
    }
}

// ---- the transposition --------------------------------------------------------------------

/// The compiled action of a unified flow: ops plus the precompiled encapsulation header.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Transposition {
    ops: Box<[Op]>,
    template: Option<Box<Template>>,
    /// Some op pushes or pops a tunnel (checked against a super-packet's `gso.tunnel`).
    tunnel_op: bool,
    growth: Option<isize>,
}

impl Default for Transposition {
    fn default() -> Self {
        Transposition::identity()
    }
}

/// The layer offsets of the current frame, from the start of the packet data.
#[derive(Debug, Clone, Copy)]
struct Cur {
    eth: Option<usize>,
    vlans: u8,
    l3: Option<(Layer, usize)>,
    l4: Option<(Layer, usize)>,
    proto: Option<u8>,
}

impl Cur {
    /// `h` with every offset moved back by `n` bytes (the bytes popped in front of it).
    fn from_headers(h: &Headers, n: usize) -> Result<Cur> {
        let sh = |o: u16| usize::from(o).checked_sub(n).ok_or(TranspositionError::BadStack);
        Ok(Cur {
            eth: h.eth.map(sh).transpose()?,
            vlans: h.vlans,
            l3: h.l3.map(|(l, o)| sh(o).map(|o| (l, o))).transpose()?,
            l4: h.l4.map(|(l, o)| sh(o).map(|o| (l, o))).transpose()?,
            proto: h.ip_proto,
        })
    }

    /// Move the L3/L4 offsets by `d` bytes (a VLAN tag added or removed in front of them).
    fn shift_l3(&mut self, d: isize) -> Result<()> {
        let f = |o: usize| o.checked_add_signed(d).ok_or(TranspositionError::BadStack);
        self.l3 = self.l3.map(|(l, o)| f(o).map(|o| (l, o))).transpose()?;
        self.l4 = self.l4.map(|(l, o)| f(o).map(|o| (l, o))).transpose()?;
        Ok(())
    }
}

impl Transposition {
    /// Validate `ops` and precompile the encapsulation. Rules: at most one `PopOuter`, and only
    /// as the first op; at most one `PushEncap`, and only as the last; VLAN ids 4095 are
    /// reserved; IP rewrites of one list use one family; the [`Encap`] must be valid.
    pub fn new(ops: Vec<Op>) -> Result<Transposition> {
        let n = ops.len();
        let mut template = None;
        let mut tunnel_op = false;
        let mut growth: Option<isize> = Some(0);
        let mut family: Option<bool> = None;
        for (i, op) in ops.iter().enumerate() {
            match op {
                Op::PopOuter => {
                    if i != 0 {
                        return Err(TranspositionError::BadProgram("pop must be the first op"));
                    }
                    tunnel_op = true;
                    growth = None;
                }
                Op::PushEncap(e) => {
                    if i + 1 != n {
                        return Err(TranspositionError::BadProgram("push must be the last op"));
                    }
                    let t = Template::new(e)?;
                    growth = growth.map(|g| g + t.len() as isize);
                    template = Some(Box::new(t));
                    tunnel_op = true;
                }
                Op::PushVlan(tci) => {
                    if tci & 0x0fff == 0x0fff {
                        return Err(TranspositionError::BadProgram("vlan id 4095 is reserved"));
                    }
                    growth = growth.map(|g| g + 4);
                }
                Op::PopVlan => growth = growth.map(|g| g - 4),
                Op::SetIpSrc(a) | Op::SetIpDst(a) => {
                    let v6 = a.is_ipv6();
                    if family.is_some_and(|f| f != v6) {
                        return Err(TranspositionError::FamilyMismatch);
                    }
                    family = Some(v6);
                }
                Op::SetEthSrc(_)
                | Op::SetEthDst(_)
                | Op::SetL4Src(_)
                | Op::SetL4Dst(_)
                | Op::DecTtl => {}
            }
        }
        Ok(Transposition { ops: ops.into_boxed_slice(), template, tunnel_op, growth })
    }

    /// The transposition that changes nothing.
    pub fn identity() -> Transposition {
        Transposition { ops: Box::new([]), template: None, tunnel_op: false, growth: Some(0) }
    }

    /// The ops, in the order they run.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// True when there are no ops.
    pub fn is_identity(&self) -> bool {
        self.ops.is_empty()
    }

    /// Bytes the frame grows by (negative when it shrinks), when known statically (for MTU
    /// checks); `None` when it depends on the packet (a pop of the outer headers).
    pub fn growth(&self) -> Option<isize> {
        self.growth
    }

    /// Apply to `pkt` using the layer offsets in `pkt.meta.stack` (the parse stage's walk of
    /// the frame as it is now). `flow_hash` feeds the outer UDP source port of VXLAN
    /// (`0xC000 | hash & 0x3FFF`, RFC 7348 section 5), the NVGRE FlowID (low 8 bits) and the
    /// outer IPv6 flow label (low 20 bits).
    ///
    /// Never allocates and never panics; on error the packet may be partly rewritten (the
    /// engine drops it, counted). After success `pkt.meta.stack` still describes the OLD
    /// layout; `pkt.meta.offload` is updated (checksum start moved, GSO header length moved
    /// by VLAN and tunnel pushes and pops, `gso.tunnel` set by a push and cleared by a pop).
    pub fn apply(&self, pkt: &mut PacketBuf, flow_hash: u32) -> Result<()> {
        if self.ops.is_empty() {
            return Ok(());
        }
        if self.tunnel_op
            && let Some(g) = &pkt.meta.offload.gso
        {
            // Checked before anything is rewritten: a pop needs outer headers pushed here, a
            // push needs a super-packet without a tunnel (once popped, if the list pops).
            let pops = matches!(self.ops.first(), Some(Op::PopOuter));
            let pushes = self.template.is_some();
            if (pops && g.tunnel.is_none()) || (pushes && !pops && g.tunnel.is_some()) {
                return Err(TranspositionError::SuperPacket);
            }
        }
        let mut cur = Cur::from_headers(&pkt.meta.stack.outer, 0)?;
        // `new` put a pop first and a push last: the ops between them only touch the current
        // frame, through one borrow of its bytes (renewed after a VLAN op moves the frame).
        let mut ops = &self.ops[..];
        if let [Op::PopOuter, rest @ ..] = ops {
            pop_outer(pkt, &mut cur)?;
            ops = rest;
        }
        let mut push = None;
        if let ([rest @ .., Op::PushEncap(_)], Some(t)) = (ops, &self.template) {
            push = Some(t);
            ops = rest;
        }
        let mut partial = partial_at(pkt);
        let mut d = pkt.data_mut();
        for op in ops {
            match op {
                Op::PopVlan | Op::PushVlan(_) => {
                    if let Op::PushVlan(tci) = op {
                        push_vlan(pkt, &mut cur, *tci)?;
                    } else {
                        pop_vlan(pkt, &mut cur)?;
                    }
                    partial = partial_at(pkt);
                    d = pkt.data_mut();
                }
                Op::SetEthSrc(m) => set_mac(d, &cur, 6, m)?,
                Op::SetEthDst(m) => set_mac(d, &cur, 0, m)?,
                Op::SetIpSrc(a) => set_ip(d, &cur, *a, false, partial)?,
                Op::SetIpDst(a) => set_ip(d, &cur, *a, true, partial)?,
                Op::SetL4Src(p) => set_port(d, &cur, *p, false, partial)?,
                Op::SetL4Dst(p) => set_port(d, &cur, *p, true, partial)?,
                Op::DecTtl => dec_ttl(d, &cur)?,
                // Validated away by `new` (first / last only).
                Op::PopOuter | Op::PushEncap(_) => {
                    return Err(TranspositionError::BadProgram("pop or push in the middle"));
                }
            }
        }
        if let Some(t) = push {
            push_encap(pkt, &cur, t, flow_hash)?;
        }
        Ok(())
    }
}

// ---- checksum arithmetic ------------------------------------------------------------------

/// Fold a wide one's-complement sum to 16 bits.
#[inline(always)]
fn fold(mut s: u64) -> u16 {
    s = (s & 0xffff_ffff) + (s >> 32);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// Folded one's-complement sum of `b` as big-endian 16-bit words (odd tail padded with zero).
#[inline(always)]
fn sum_bytes(b: &[u8]) -> u16 {
    let mut acc: u64 = 0;
    let mut words = b.chunks_exact(2);
    for w in &mut words {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        acc += u64::from(*last) << 8;
    }
    fold(acc)
}

/// A checksum field after covered data summing to `old` now sums to `new`. A *stored*
/// (complemented) checksum: `HC' = ~(~HC + ~m + m')` (RFC 1624 eqn. 3). A *partial* one (the
/// device's non-complemented pseudo-header sum): `S' = S + ~m + m'`.
#[inline(always)]
fn adjust(field: u16, old: u16, new: u16, partial: bool) -> u16 {
    if partial {
        fold(u64::from(field) + u64::from(!old) + u64::from(new))
    } else {
        !fold(u64::from(!field) + u64::from(!old) + u64::from(new))
    }
}

// ---- bounds-checked byte access -----------------------------------------------------------

#[inline(always)]
fn bytes_mut<const N: usize>(d: &mut [u8], at: usize) -> Result<&mut [u8; N]> {
    let have = d.len();
    d.get_mut(at..at.wrapping_add(N))
        .and_then(|s| <&mut [u8; N]>::try_from(s).ok())
        .ok_or(TranspositionError::Truncated { need: at.saturating_add(N), have })
}

#[inline(always)]
fn rd16(d: &[u8], at: usize) -> Result<u16> {
    match d.get(at..at.wrapping_add(2)) {
        Some(&[a, b]) => Ok(u16::from_be_bytes([a, b])),
        _ => Err(TranspositionError::Truncated { need: at.saturating_add(2), have: d.len() }),
    }
}

#[inline(always)]
fn wr16(d: &mut [u8], at: usize, v: u16) -> Result<()> {
    *bytes_mut::<2>(d, at)? = v.to_be_bytes();
    Ok(())
}

#[inline(always)]
fn byte(d: &[u8], at: usize) -> Result<u8> {
    d.get(at)
        .copied()
        .ok_or(TranspositionError::Truncated { need: at.saturating_add(1), have: d.len() })
}

/// Frame offset of the L4 checksum field that is left to the device, if any.
#[inline(always)]
fn partial_at(pkt: &PacketBuf) -> Option<usize> {
    pkt.meta.offload.csum_partial.map(|(s, o)| usize::from(s) + usize::from(o))
}

/// Move the checksum-offload start by `d` bytes (a header pushed or popped in front of it).
fn shift_offload(pkt: &mut PacketBuf, d: isize) -> Result<()> {
    if let Some((start, off)) = pkt.meta.offload.csum_partial {
        let s = usize::from(start).checked_add_signed(d).ok_or(TranspositionError::BadOffload)?;
        let s = u16::try_from(s).map_err(|_| TranspositionError::BadOffload)?;
        pkt.meta.offload.csum_partial = Some((s, off));
    }
    Ok(())
}

// ---- ECN ----------------------------------------------------------------------------------

/// ECN bits of the IP header at `o`.
#[inline(always)]
fn ecn_of(d: &[u8], l3: Option<(Layer, usize)>) -> Result<Option<u8>> {
    match l3 {
        Some((Layer::Ipv4, o)) => Ok(Some(byte(d, o + 1)? & 3)),
        Some((Layer::Ipv6, o)) => Ok(Some((byte(d, o + 1)? >> 4) & 3)),
        _ => Ok(None),
    }
}

/// Set the ECN bits of the IP header at `l3` to `ecn` (IPv4 header checksum fixed).
fn set_ecn(d: &mut [u8], l3: (Layer, usize), ecn: u8) -> Result<()> {
    match l3 {
        (Layer::Ipv4, o) => {
            let old = rd16(d, o)?;
            let new = (old & !3) | u16::from(ecn);
            wr16(d, o, new)?;
            let c = rd16(d, o + 10)?;
            wr16(d, o + 10, adjust(c, old, new, false))
        }
        (_, o) => {
            let b = bytes_mut::<1>(d, o + 1)?;
            b[0] = (b[0] & !0x30) | (ecn << 4);
            Ok(())
        }
    }
}

// ---- ops ----------------------------------------------------------------------------------

fn pop_outer(pkt: &mut PacketBuf, cur: &mut Cur) -> Result<()> {
    let st = &pkt.meta.stack;
    let (Some(_), Some(inner)) = (st.tunnel, st.inner) else {
        return Err(TranspositionError::NotTunnelled);
    };
    let n = usize::from(inner.eth.ok_or(TranspositionError::NotTunnelled)?);
    // A super-packet: only outer headers pushed here (of exactly this length) come off.
    if let Some(g) = pkt.meta.offload.gso
        && g.tunnel.is_none_or(|t| usize::from(t.outer_len) != n)
    {
        return Err(TranspositionError::SuperPacket);
    }
    let outer_l3 = Cur::from_headers(&st.outer, 0)?.l3;
    let inner_l3 = Cur::from_headers(&inner, 0)?.l3;
    let d = pkt.data_mut();
    // Where the outer IP datagram ends: anything after it is Ethernet padding or a trailer.
    let end = match outer_l3 {
        Some((Layer::Ipv4, o)) => Some(o + usize::from(rd16(d, o + 2)?)),
        Some((Layer::Ipv6, o)) => Some(o + IP6_LEN + usize::from(rd16(d, o + 4)?)),
        _ => None,
    };
    // RFC 6040 section 4.2, normal mode.
    if let (Some(outer), Some(inner_ecn)) = (ecn_of(d, outer_l3)?, ecn_of(d, inner_l3)?) {
        let out = match (inner_ecn, outer) {
            (0, 3) => return Err(TranspositionError::CeOnNotEct),
            (1 | 2, 3) => 3,
            (2, 1) => 1,
            (e, _) => e,
        };
        if let (true, Some(l3)) = (out != inner_ecn, inner_l3) {
            set_ecn(d, l3, out)?;
        }
    }
    pkt.pull_front(n)?;
    if let Some(end) = end
        && end >= n
    {
        pkt.truncate(end - n);
    }
    *cur = Cur::from_headers(&inner, n)?;
    match pkt.meta.offload.csum_partial {
        Some((s, _)) if usize::from(s) < n => pkt.meta.offload.csum_partial = None,
        _ => shift_offload(pkt, -(n as isize))?,
    }
    if let Some(g) = &mut pkt.meta.offload.gso {
        // `n` is the pushed `outer_len` (checked above), at most a template's length.
        g.hdr_len = g.hdr_len.saturating_sub(n as u16);
        g.tunnel = None;
    }
    Ok(())
}

fn pop_vlan(pkt: &mut PacketBuf, cur: &mut Cur) -> Result<()> {
    if cur.eth != Some(0) {
        return Err(TranspositionError::NoL2);
    }
    if cur.vlans == 0 {
        return Err(TranspositionError::NoVlan);
    }
    let d = pkt.data_mut();
    if d.len() < ETH_LEN + 4 {
        return Err(TranspositionError::Truncated { need: ETH_LEN + 4, have: d.len() });
    }
    d.copy_within(0..12, 4);
    pkt.pull_front(4)?;
    cur.vlans -= 1;
    cur.shift_l3(-4)?;
    shift_offload(pkt, -4)?;
    if let Some(g) = &mut pkt.meta.offload.gso {
        g.hdr_len = g.hdr_len.saturating_sub(4);
    }
    Ok(())
}

fn push_vlan(pkt: &mut PacketBuf, cur: &mut Cur, tci: u16) -> Result<()> {
    if cur.eth != Some(0) {
        return Err(TranspositionError::NoL2);
    }
    if cur.vlans >= 2 {
        return Err(TranspositionError::TooManyVlans);
    }
    if pkt.len() < ETH_LEN {
        return Err(TranspositionError::Truncated { need: ETH_LEN, have: pkt.len() });
    }
    let tpid: u16 = if cur.vlans == 0 { 0x8100 } else { 0x88a8 };
    pkt.push_front(4)?;
    let d = pkt.data_mut();
    d.copy_within(4..16, 0);
    *bytes_mut::<4>(d, 12)? = [(tpid >> 8) as u8, tpid as u8, (tci >> 8) as u8, tci as u8];
    cur.vlans += 1;
    cur.shift_l3(4)?;
    shift_offload(pkt, 4)?;
    if let Some(g) = &mut pkt.meta.offload.gso {
        g.hdr_len = g.hdr_len.saturating_add(4);
    }
    Ok(())
}

#[inline(always)]
fn set_mac(d: &mut [u8], cur: &Cur, at: usize, mac: &Mac) -> Result<()> {
    let e = cur.eth.ok_or(TranspositionError::NoL2)?;
    *bytes_mut::<6>(d, e + at)? = *mac;
    Ok(())
}

/// What kind of L4 checksum a field is: UDP's 0 means "none" (over IPv4) and a computed 0 is
/// sent as 0xffff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sum {
    /// TCP, ICMP, ICMPv6.
    Plain,
    /// UDP over IPv4.
    Udp4,
    /// UDP over IPv6.
    Udp6,
}

impl Sum {
    fn udp(v4: bool) -> Sum {
        if v4 { Sum::Udp4 } else { Sum::Udp6 }
    }
}

/// Where the L4 checksum covering the pseudo-header lives, and its kind.
#[inline(always)]
fn l4_csum_at(d: &[u8], cur: &Cur) -> Result<Option<(usize, Sum)>> {
    let v4 = matches!(cur.l3, Some((Layer::Ipv4, _)));
    match cur.l4 {
        Some((Layer::Tcp, o)) => Ok(Some((o + 16, Sum::Plain))),
        Some((Layer::Udp, o)) => Ok(Some((o + 6, Sum::udp(v4)))),
        Some((Layer::Icmpv6, o)) => Ok(Some((o + 2, Sum::Plain))),
        Some(_) => Ok(None),
        None => match (cur.l3, cur.proto) {
            (Some((Layer::Ipv4, o)), Some(p @ (PROTO_TCP | PROTO_UDP))) => {
                let frag = rd16(d, o + 6)?;
                if frag & 0x1fff != 0 {
                    // A later fragment: no L4 header here.
                    return Ok(None);
                }
                if frag & 0x2000 == 0 {
                    // Not a fragment, yet the L4 header did not parse.
                    return Err(TranspositionError::NoL4);
                }
                // First fragment: the L4 header follows the IP header.
                let l4 = o + usize::from(byte(d, o)? & 0x0f) * 4;
                Ok(Some(if p == PROTO_TCP { (l4 + 16, Sum::Plain) } else { (l4 + 6, Sum::Udp4) }))
            }
            (Some((Layer::Ipv6, _)), Some(PROTO_TCP | PROTO_UDP | PROTO_ICMPV6)) => {
                Err(TranspositionError::NoL4)
            }
            _ => Ok(None),
        },
    }
}

/// Fix the L4 checksum at `at` for covered words summing `old` before and `new` after.
#[inline(always)]
fn fix_l4(d: &mut [u8], at: usize, kind: Sum, partial: bool, old: u16, new: u16) -> Result<()> {
    let c = rd16(d, at)?;
    if kind == Sum::Udp4 && c == 0 && !partial {
        return Ok(());
    }
    let mut n = adjust(c, old, new, partial);
    if kind != Sum::Plain && n == 0 && !partial {
        n = 0xffff;
    }
    wr16(d, at, n)
}

#[inline(always)]
fn set_ip(d: &mut [u8], cur: &Cur, addr: IpAddr, dst: bool, partial: Option<usize>) -> Result<()> {
    let (old, new) = match (cur.l3, addr) {
        (Some((Layer::Ipv4, o)), IpAddr::V4(a)) => {
            let f = bytes_mut::<4>(d, o + if dst { 16 } else { 12 })?;
            let sum4 = |x: u32| fold(u64::from(x >> 16) + u64::from(x & 0xffff));
            let old = sum4(u32::from_be_bytes(*f));
            let new = sum4(a.to_bits());
            *f = a.octets();
            let c = rd16(d, o + 10)?;
            wr16(d, o + 10, adjust(c, old, new, false))?;
            (old, new)
        }
        (Some((Layer::Ipv6, o)), IpAddr::V6(a)) => {
            let f = bytes_mut::<16>(d, o + if dst { 24 } else { 8 })?;
            let old = sum_bytes(f);
            *f = a.octets();
            (old, sum_bytes(f))
        }
        (Some((Layer::Ipv4 | Layer::Ipv6, _)), _) => {
            return Err(TranspositionError::FamilyMismatch);
        }
        _ => return Err(TranspositionError::NoL3),
    };
    if let Some((at, kind)) = l4_csum_at(d, cur)? {
        fix_l4(d, at, kind, partial == Some(at), old, new)?;
    }
    Ok(())
}

#[inline(always)]
fn set_port(d: &mut [u8], cur: &Cur, port: u16, dst: bool, partial: Option<usize>) -> Result<()> {
    let v4 = matches!(cur.l3, Some((Layer::Ipv4, _)));
    let (field, csum, kind) = match cur.l4 {
        Some((Layer::Tcp, o)) => (o + usize::from(dst) * 2, o + 16, Sum::Plain),
        Some((Layer::Udp, o)) => (o + usize::from(dst) * 2, o + 6, Sum::udp(v4)),
        Some((l @ (Layer::Icmpv4 | Layer::Icmpv6), o)) => {
            let echo =
                matches!((l, byte(d, o)?), (Layer::Icmpv4, 0 | 8) | (Layer::Icmpv6, 128 | 129));
            if !echo {
                return Err(TranspositionError::NoL4);
            }
            (o + 4, o + 2, Sum::Plain)
        }
        _ => return Err(TranspositionError::NoL4),
    };
    let old = rd16(d, field)?;
    wr16(d, field, port)?;
    // A checksum the device completes sums the ports itself: only a stored one is adjusted.
    if partial != Some(csum) {
        fix_l4(d, csum, kind, false, old, port)?;
    }
    Ok(())
}

#[inline(always)]
fn dec_ttl(d: &mut [u8], cur: &Cur) -> Result<()> {
    match cur.l3 {
        Some((Layer::Ipv4, o)) => {
            let old = rd16(d, o + 8)?;
            if old >> 8 <= 1 {
                return Err(TranspositionError::TtlExpired);
            }
            let new = old - 0x100;
            wr16(d, o + 8, new)?;
            let c = rd16(d, o + 10)?;
            wr16(d, o + 10, adjust(c, old, new, false))
        }
        Some((Layer::Ipv6, o)) => {
            let h = bytes_mut::<1>(d, o + 7)?;
            if h[0] <= 1 {
                return Err(TranspositionError::TtlExpired);
            }
            h[0] -= 1;
            Ok(())
        }
        _ => Err(TranspositionError::NoL3),
    }
}

fn push_encap(pkt: &mut PacketBuf, cur: &Cur, t: &Template, hash: u32) -> Result<()> {
    let inner_len = pkt.len();
    let ecn = ecn_of(pkt.data(), cur.l3)?.unwrap_or(0);
    let hl = t.len();
    let l3_len = hl - ETH_LEN + inner_len;
    if l3_len > usize::from(u16::MAX) + if t.v6 { IP6_LEN } else { 0 } {
        return Err(TranspositionError::TooLong { len: l3_len });
    }
    // Inner L4 checksum left to the device: its final value is known in sum (LCO, below).
    let partial = match pkt.meta.offload.csum_partial {
        Some((s, o)) => {
            let s = usize::from(s);
            let field = s + usize::from(o);
            Some((s, rd16(pkt.data(), field)?))
        }
        None => None,
    };
    // A super-packet's outer UDP/IPv6 checksum is computed per segment (see the module doc).
    let whole = pkt.meta.offload.gso.is_none();
    let inner_sum =
        if t.v6 && t.vxlan && partial.is_none() && whole { checksum::data(pkt.data()) } else { 0 };
    // Copied straight into the headroom (no zero fill first), with fixed-size copies for the
    // four template sizes (inlined moves instead of a memcpy call).
    let front = match hl {
        70 => pkt.push_front_from(&t.bytes[..70])?,
        62 => pkt.push_front_from(&t.bytes[..62])?,
        50 => pkt.push_front_from(&t.bytes[..50])?,
        42 => pkt.push_front_from(&t.bytes[..42])?,
        n => pkt.push_front_from(
            t.bytes.get(..n).ok_or(TranspositionError::BadEncap("template length"))?,
        )?,
    };
    let l4 = if t.v6 { ETH_LEN + IP6_LEN } else { ETH_LEN + IP4_LEN };
    let body = l3_len - (l4 - ETH_LEN); // bytes after the IP header
    let sport = 0xc000 | (hash as u16 & 0x3fff);
    // One length check per family: the patches below index fixed-size arrays.
    const SHORT: TranspositionError = TranspositionError::BadEncap("template length");
    if t.v6 {
        const L4: usize = ETH_LEN + IP6_LEN;
        let f: &mut [u8; L4 + 8] = front.first_chunk_mut().ok_or(SHORT)?;
        f[ETH_LEN + 1] = (ecn << 4) | ((hash >> 16) & 0x0f) as u8;
        f[ETH_LEN + 2..ETH_LEN + 4].copy_from_slice(&(hash as u16).to_be_bytes());
        f[ETH_LEN + 4..ETH_LEN + 6].copy_from_slice(&(body as u16).to_be_bytes());
        if t.vxlan {
            f[L4..L4 + 2].copy_from_slice(&sport.to_be_bytes());
            f[L4 + 4..L4 + 6].copy_from_slice(&(body as u16).to_be_bytes());
        } else {
            f[L4 + 7] = hash as u8;
        }
    } else {
        const L4: usize = ETH_LEN + IP4_LEN;
        let f: &mut [u8; L4 + 8] = front.first_chunk_mut().ok_or(SHORT)?;
        f[ETH_LEN + 1] = ecn;
        f[ETH_LEN + 2..ETH_LEN + 4].copy_from_slice(&(l3_len as u16).to_be_bytes());
        let c = !fold(u64::from(t.sum) + l3_len as u64 + u64::from(ecn));
        f[ETH_LEN + 10..ETH_LEN + 12].copy_from_slice(&c.to_be_bytes());
        if t.vxlan {
            f[L4..L4 + 2].copy_from_slice(&sport.to_be_bytes());
            f[L4 + 4..L4 + 6].copy_from_slice(&(body as u16).to_be_bytes());
        } else {
            f[L4 + 7] = hash as u8;
        }
    }
    if t.vxlan && t.v6 && whole {
        // UDP over IPv6 needs a checksum (Linux drops zero ones by default).
        let payload = match partial {
            None => u64::from(inner_sum),
            Some((start, field)) => {
                // Local checksum offload (LCO): once the device fills the inner checksum,
                // the inner L4 segment sums to the complement of the pseudo-header sum the
                // field holds now, so only the bytes before it need summing.
                let head = checksum::data(pkt.data().get(hl..hl + start).unwrap_or(&[]));
                let rest = if start % 2 == 1 { (!field).swap_bytes() } else { !field };
                u64::from(head) + u64::from(rest)
            }
        };
        let s = u64::from(t.sum) + 2 * body as u64 + u64::from(sport) + payload;
        let c = match !fold(s) {
            0 => 0xffff,
            c => c,
        };
        wr16(pkt.data_mut(), l4 + 6, c)?;
    }
    if let Some(g) = &mut pkt.meta.offload.gso {
        // A template is at most 70 bytes.
        g.hdr_len = g.hdr_len.checked_add(hl as u16).ok_or(TranspositionError::BadOffload)?;
        let kind = if t.vxlan { TunnelGsoKind::Vxlan } else { TunnelGsoKind::Nvgre };
        g.tunnel = Some(TunnelGso { kind, outer_len: hl as u16 });
    }
    shift_offload(pkt, hl as isize)
}

// ---- display ------------------------------------------------------------------------------

struct MacFmt<'a>(&'a Mac);

impl fmt::Display for MacFmt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5])
    }
}

impl fmt::Display for Op {
    /// `pop`, `pop_vlan`, `push_vlan(vid=100)` (`,pcp=3` when set), `set(eth.src=..)`,
    /// `set(ip.dst=10.0.0.5)`, `set(l4.dst=80)`, `dec_ttl`,
    /// `push(vxlan vni=42 10.1.1.1>10.1.1.2)`, `push(nvgre vsid=42 ..)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::PopOuter => f.write_str("pop"),
            Op::PopVlan => f.write_str("pop_vlan"),
            Op::PushVlan(tci) => {
                write!(f, "push_vlan(vid={}", tci & 0x0fff)?;
                if tci >> 13 != 0 {
                    write!(f, ",pcp={}", tci >> 13)?;
                }
                if tci & 0x1000 != 0 {
                    f.write_str(",dei")?;
                }
                f.write_str(")")
            }
            Op::SetEthSrc(m) => write!(f, "set(eth.src={})", MacFmt(m)),
            Op::SetEthDst(m) => write!(f, "set(eth.dst={})", MacFmt(m)),
            Op::SetIpSrc(a) => write!(f, "set(ip.src={a})"),
            Op::SetIpDst(a) => write!(f, "set(ip.dst={a})"),
            Op::SetL4Src(p) => write!(f, "set(l4.src={p})"),
            Op::SetL4Dst(p) => write!(f, "set(l4.dst={p})"),
            Op::DecTtl => f.write_str("dec_ttl"),
            Op::PushEncap(e) => match e.kind {
                TunnelKind::Vxlan => {
                    write!(f, "push(vxlan vni={} {}>{}", e.vni, e.src_ip, e.dst_ip)?;
                    if e.udp_dst != 4789 {
                        write!(f, " port={}", e.udp_dst)?;
                    }
                    f.write_str(")")
                }
                TunnelKind::Nvgre => {
                    write!(f, "push(nvgre vsid={} {}>{})", e.vni, e.src_ip, e.dst_ip)
                }
            },
        }
    }
}

impl fmt::Display for Transposition {
    /// The ops joined by commas, e.g.
    /// `pop,set(eth.dst=02:00:00:00:00:01),set(ip.dst=10.0.0.5),push(vxlan vni=42 10.1.1.1>10.1.1.2)`;
    /// `identity` when there are none.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ops.is_empty() {
            return f.write_str("identity");
        }
        for (i, op) in self.ops.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{op}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};
    use proptest::prelude::*;
    use snic_wire::checksum;
    use snic_wire::stack::Stack;

    const VM_A: Mac = [0x02, 0, 0, 0, 0, 0x0a];
    const VM_B: Mac = [0x02, 0, 0, 0, 0, 0x0b];
    const HOST: Mac = [0x02, 0, 0, 0, 1, 0x01];
    const GW: Mac = [0x02, 0, 0, 0, 1, 0xfe];

    fn v4(a: [u8; 4]) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(a))
    }

    fn v6(last: u16) -> IpAddr {
        IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, last))
    }

    // ---- independent frame builders -------------------------------------------------------

    fn eth(dst: Mac, src: Mac, tags: &[(u16, u16)], ty: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&dst);
        f.extend_from_slice(&src);
        for (tpid, tci) in tags {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
        }
        f.extend_from_slice(&ty.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    struct Ip {
        src: IpAddr,
        dst: IpAddr,
        proto: u8,
        ttl: u8,
        ecn: u8,
        df: bool,
        flow: u32,
    }

    impl Ip {
        fn new(src: IpAddr, dst: IpAddr, proto: u8) -> Ip {
            Ip { src, dst, proto, ttl: 64, ecn: 0, df: false, flow: 0 }
        }

        fn ethertype(&self) -> u16 {
            if self.src.is_ipv6() { 0x86dd } else { 0x0800 }
        }

        fn emit(&self, payload: &[u8]) -> Vec<u8> {
            let mut h = Vec::new();
            match (self.src, self.dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    h.extend_from_slice(&[0x45, self.ecn]);
                    h.extend_from_slice(&(20 + payload.len() as u16).to_be_bytes());
                    h.extend_from_slice(&[0, 0, if self.df { 0x40 } else { 0 }, 0]);
                    h.extend_from_slice(&[self.ttl, self.proto, 0, 0]);
                    h.extend_from_slice(&s.octets());
                    h.extend_from_slice(&d.octets());
                    let c = !checksum::data(&h);
                    h[10..12].copy_from_slice(&c.to_be_bytes());
                }
                (IpAddr::V6(s), IpAddr::V6(d)) => {
                    let w = 6u32 << 28 | u32::from(self.ecn) << 20 | (self.flow & 0xfffff);
                    h.extend_from_slice(&w.to_be_bytes());
                    h.extend_from_slice(&(payload.len() as u16).to_be_bytes());
                    h.extend_from_slice(&[self.proto, self.ttl]);
                    h.extend_from_slice(&s.octets());
                    h.extend_from_slice(&d.octets());
                }
                _ => unreachable!("test builder given mixed families"),
            }
            h.extend_from_slice(payload);
            h
        }
    }

    /// A TCP (6) / UDP (17) segment with a correct checksum (`csum == false`: UDP checksum 0).
    fn l4(proto: u8, ip: &Ip, sp: u16, dp: u16, csum: bool, payload: &[u8]) -> Vec<u8> {
        let mut s = Vec::new();
        s.extend_from_slice(&sp.to_be_bytes());
        s.extend_from_slice(&dp.to_be_bytes());
        let at = if proto == PROTO_TCP {
            s.extend_from_slice(&0x0102_0304u32.to_be_bytes());
            s.extend_from_slice(&0x0506_0708u32.to_be_bytes());
            s.extend_from_slice(&[0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
            16
        } else {
            s.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
            s.extend_from_slice(&[0, 0]);
            6
        };
        s.extend_from_slice(payload);
        if csum {
            let mut c = checksum::upper_layer(&ip.src, &ip.dst, proto, &s);
            if c == 0 && proto == PROTO_UDP {
                c = 0xffff;
            }
            s[at..at + 2].copy_from_slice(&c.to_be_bytes());
        }
        s
    }

    /// An ICMP / ICMPv6 echo request with identifier `id` and a correct checksum.
    fn echo(ip: &Ip, id: u16, payload: &[u8]) -> Vec<u8> {
        let ty = if ip.src.is_ipv6() { 128 } else { 8 };
        let mut s = vec![ty, 0, 0, 0];
        s.extend_from_slice(&id.to_be_bytes());
        s.extend_from_slice(&7u16.to_be_bytes());
        s.extend_from_slice(payload);
        let c = if ip.src.is_ipv6() {
            checksum::upper_layer(&ip.src, &ip.dst, PROTO_ICMPV6, &s)
        } else {
            !checksum::data(&s)
        };
        s[2..4].copy_from_slice(&c.to_be_bytes());
        s
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Kind {
        Tcp,
        Udp,
        UdpNoCsum,
        Echo,
    }

    /// A whole frame of `kind` from `src:sp` to `dst:dp` (for echo, `sp` is the identifier).
    fn frame(kind: Kind, ip: &Ip, sp: u16, dp: u16, payload: &[u8]) -> Vec<u8> {
        let (proto, seg) = match kind {
            Kind::Tcp => (PROTO_TCP, l4(PROTO_TCP, ip, sp, dp, true, payload)),
            Kind::Udp => (PROTO_UDP, l4(PROTO_UDP, ip, sp, dp, true, payload)),
            Kind::UdpNoCsum => (PROTO_UDP, l4(PROTO_UDP, ip, sp, dp, false, payload)),
            Kind::Echo => (if ip.src.is_ipv6() { PROTO_ICMPV6 } else { 1 }, echo(ip, sp, payload)),
        };
        let ip = Ip { proto, ..*ip };
        eth(VM_B, VM_A, &[], ip.ethertype(), &ip.emit(&seg))
    }

    /// The encapsulation of `inner` as an independent builder writes it.
    fn encapsulated(e: &Encap, sport_or_flow: u16, flow_label: u32, inner: &[u8]) -> Vec<u8> {
        let inner_ecn = {
            let st = Stack::parse(inner);
            match st.outer.l3 {
                Some((Layer::Ipv4, o)) => inner[usize::from(o) + 1] & 3,
                Some((Layer::Ipv6, o)) => (inner[usize::from(o) + 1] >> 4) & 3,
                _ => 0,
            }
        };
        let vxlan = matches!(e.kind, TunnelKind::Vxlan);
        let mut ip = Ip::new(e.src_ip, e.dst_ip, if vxlan { PROTO_UDP } else { PROTO_GRE });
        ip.ttl = e.ttl;
        ip.ecn = inner_ecn;
        ip.df = true;
        ip.flow = flow_label;
        let body = if vxlan {
            let mut v = vec![0x08, 0, 0, 0];
            v.extend_from_slice(&(e.vni << 8).to_be_bytes());
            v.extend_from_slice(inner);
            l4(PROTO_UDP, &ip, sport_or_flow, e.udp_dst, e.src_ip.is_ipv6(), &v)
        } else {
            let mut g = vec![0x20, 0, 0x65, 0x58];
            g.extend_from_slice(&(e.vni << 8 | u32::from(sport_or_flow & 0xff)).to_be_bytes());
            g.extend_from_slice(inner);
            g
        };
        eth(e.dst_mac, e.src_mac, &[], ip.ethertype(), &ip.emit(&body))
    }

    fn encap(kind: TunnelKind, v6_outer: bool, vni: u32) -> Encap {
        let (src_ip, dst_ip) = if v6_outer {
            (IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)), {
                IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2))
            })
        } else {
            (v4([10, 1, 1, 1]), v4([10, 1, 1, 2]))
        };
        Encap { kind, src_mac: HOST, dst_mac: GW, src_ip, dst_ip, vni, ttl: 64, udp_dst: 4789 }
    }

    // ---- checking -------------------------------------------------------------------------

    /// Every IPv4 header checksum and every TCP/UDP/ICMP/ICMPv6 checksum (outer and inner)
    /// recomputed from scratch; a UDP/IPv4 checksum of 0 is accepted.
    fn verify(f: &[u8]) -> core::result::Result<(), String> {
        let st = Stack::parse(f);
        if let Some(e) = st.error() {
            return Err(format!("does not parse: {e:?}"));
        }
        for h in [Some(st.outer), st.inner].into_iter().flatten() {
            let Some((l3, o)) = h.l3 else { continue };
            let o = usize::from(o);
            let (src, dst, end) = match l3 {
                Layer::Ipv4 => {
                    let ihl = usize::from(f[o] & 0xf) * 4;
                    if checksum::data(&f[o..o + ihl]) != 0xffff {
                        return Err(format!("IPv4 header checksum at {o}"));
                    }
                    let s: [u8; 4] = f[o + 12..o + 16].try_into().unwrap();
                    let d: [u8; 4] = f[o + 16..o + 20].try_into().unwrap();
                    let tl = usize::from(u16::from_be_bytes([f[o + 2], f[o + 3]]));
                    (v4(s), v4(d), o + tl)
                }
                Layer::Ipv6 => {
                    let s: [u8; 16] = f[o + 8..o + 24].try_into().unwrap();
                    let d: [u8; 16] = f[o + 24..o + 40].try_into().unwrap();
                    let pl = usize::from(u16::from_be_bytes([f[o + 4], f[o + 5]]));
                    (IpAddr::from(s), IpAddr::from(d), o + 40 + pl)
                }
                _ => continue,
            };
            let Some((l4, at)) = h.l4 else { continue };
            let seg = &f[usize::from(at)..end];
            let ok = match l4 {
                Layer::Icmpv4 => checksum::data(seg) == 0xffff,
                Layer::Udp if l3 == Layer::Ipv4 && seg[6..8] == [0, 0] => true,
                Layer::Tcp | Layer::Udp | Layer::Icmpv6 => {
                    checksum::upper_layer(&src, &dst, h.ip_proto.unwrap(), seg) == 0
                }
                _ => true,
            };
            if !ok {
                return Err(format!("{l4:?} checksum at {at}"));
            }
        }
        Ok(())
    }

    fn pkt(f: &[u8]) -> PacketBuf {
        let mut p = PacketBuf::from_frame(f);
        p.meta.stack = Stack::parse(f);
        p
    }

    fn run(ops: Vec<Op>, f: &[u8]) -> core::result::Result<Vec<u8>, TranspositionError> {
        let t = Transposition::new(ops)?;
        let mut p = pkt(f);
        t.apply(&mut p, 0x1234_5678)?;
        Ok(p.data().to_vec())
    }

    fn ip4(src: [u8; 4], dst: [u8; 4]) -> Ip {
        Ip::new(v4(src), v4(dst), 0)
    }

    // ---- modify ops -----------------------------------------------------------------------

    #[test]
    fn identity_changes_nothing() {
        let f = frame(Kind::Tcp, &ip4([10, 0, 0, 1], [10, 0, 0, 2]), 1000, 80, b"hi");
        assert_eq!(run(vec![], &f).unwrap(), f);
        assert_eq!(Transposition::identity().to_string(), "identity");
        assert_eq!(Transposition::identity().growth(), Some(0));
        assert_eq!(Transposition::new(vec![]).unwrap(), Transposition::identity());
    }

    #[test]
    fn set_eth_rewrites_macs_only() {
        let f = frame(Kind::Udp, &ip4([10, 0, 0, 1], [10, 0, 0, 2]), 1, 2, b"x");
        let out = run(vec![Op::SetEthSrc(HOST), Op::SetEthDst(GW)], &f).unwrap();
        let mut want = f.clone();
        want[0..6].copy_from_slice(&GW);
        want[6..12].copy_from_slice(&HOST);
        assert_eq!(out, want);
    }

    #[test]
    fn dnat_v4_tcp_is_byte_exact() {
        let a = ip4([10, 0, 0, 1], [192, 168, 1, 100]);
        let f = frame(Kind::Tcp, &a, 40000, 80, b"GET / HTTP/1.1\r\n");
        let ops = vec![Op::SetIpDst(v4([10, 0, 0, 5])), Op::SetL4Dst(8080)];
        let out = run(ops, &f).unwrap();
        let want = frame(
            Kind::Tcp,
            &ip4([10, 0, 0, 1], [10, 0, 0, 5]),
            40000,
            8080,
            b"GET / HTTP/1.1\r\n",
        );
        assert_eq!(out, want);
        verify(&out).unwrap();
    }

    #[test]
    fn snat_v6_udp_and_icmpv6_echo() {
        let a = Ip::new(v6(1), v6(2), 0);
        let f = frame(Kind::Udp, &a, 5353, 53, b"query");
        let out = run(vec![Op::SetIpSrc(v6(0x99)), Op::SetL4Src(1024)], &f).unwrap();
        assert_eq!(out, frame(Kind::Udp, &Ip::new(v6(0x99), v6(2), 0), 1024, 53, b"query"));

        let f = frame(Kind::Echo, &a, 77, 77, b"ping");
        let out = run(vec![Op::SetIpDst(v6(3)), Op::SetL4Src(900)], &f).unwrap();
        assert_eq!(out, frame(Kind::Echo, &Ip::new(v6(1), v6(3), 0), 900, 900, b"ping"));
        verify(&out).unwrap();
    }

    #[test]
    fn icmpv4_echo_identifier() {
        let a = ip4([10, 0, 0, 1], [10, 0, 0, 2]);
        let f = frame(Kind::Echo, &a, 1, 1, b"abc");
        let out = run(vec![Op::SetL4Dst(0xbeef), Op::SetIpSrc(v4([1, 2, 3, 4]))], &f).unwrap();
        assert_eq!(out, frame(Kind::Echo, &ip4([1, 2, 3, 4], [10, 0, 0, 2]), 0xbeef, 0, b"abc"));
    }

    #[test]
    fn udp4_zero_checksum_stays_zero() {
        let f = frame(Kind::UdpNoCsum, &ip4([10, 0, 0, 1], [10, 0, 0, 2]), 1, 2, b"abc");
        let ops = vec![Op::SetIpDst(v4([10, 9, 9, 9])), Op::SetL4Dst(99)];
        let out = run(ops, &f).unwrap();
        assert_eq!(out, frame(Kind::UdpNoCsum, &ip4([10, 0, 0, 1], [10, 9, 9, 9]), 1, 99, b"abc"));
        assert_eq!(&out[40..42], &[0, 0]);
    }

    #[test]
    fn udp_checksum_that_becomes_zero_is_sent_as_ffff() {
        for a in [ip4([10, 0, 0, 1], [10, 0, 0, 2]), Ip::new(v6(1), v6(2), 0)] {
            let f = frame(Kind::Udp, &a, 1000, 2000, b"zero");
            let at = if a.src.is_ipv6() { 14 + 40 + 6 } else { 14 + 20 + 6 };
            let c = u16::from_be_bytes([f[at], f[at + 1]]);
            // The destination port that makes the updated checksum come out as 0.
            let port = (0..=u16::MAX).find(|&p| adjust(c, 2000, p, false) == 0).unwrap();
            let out = run(vec![Op::SetL4Dst(port)], &f).unwrap();
            assert_eq!(&out[at..at + 2], &[0xff, 0xff]);
            verify(&out).unwrap();
        }
    }

    #[test]
    fn dec_ttl_v4_v6_and_expiry() {
        let mut a = ip4([10, 0, 0, 1], [10, 0, 0, 2]);
        a.ttl = 2;
        let out = run(vec![Op::DecTtl], &frame(Kind::Tcp, &a, 1, 2, b"")).unwrap();
        a.ttl = 1;
        assert_eq!(out, frame(Kind::Tcp, &a, 1, 2, b""));
        assert_eq!(run(vec![Op::DecTtl], &out), Err(TranspositionError::TtlExpired));
        a.ttl = 0;
        assert_eq!(
            run(vec![Op::DecTtl], &frame(Kind::Tcp, &a, 1, 2, b"")),
            Err(TranspositionError::TtlExpired)
        );

        let mut b = Ip::new(v6(1), v6(2), 0);
        let out = run(vec![Op::DecTtl], &frame(Kind::Udp, &b, 1, 2, b"")).unwrap();
        b.ttl = 63;
        assert_eq!(out, frame(Kind::Udp, &b, 1, 2, b""));
        b.ttl = 1;
        assert_eq!(
            run(vec![Op::DecTtl], &frame(Kind::Udp, &b, 1, 2, b"")),
            Err(TranspositionError::TtlExpired)
        );
    }

    #[test]
    fn errors_for_missing_or_mismatched_headers() {
        let f4 = frame(Kind::Tcp, &ip4([10, 0, 0, 1], [10, 0, 0, 2]), 1, 2, b"");
        assert_eq!(run(vec![Op::SetIpDst(v6(1))], &f4), Err(TranspositionError::FamilyMismatch));
        assert_eq!(
            Transposition::new(vec![Op::SetIpDst(v6(1)), Op::SetIpSrc(v4([1, 1, 1, 1]))]),
            Err(TranspositionError::FamilyMismatch)
        );
        // ARP: no IP header.
        let arp = eth(
            VM_B,
            VM_A,
            &[],
            0x0806,
            &[
                0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 10, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0,
                2,
            ],
        );
        assert_eq!(run(vec![Op::SetIpDst(v4([1, 1, 1, 1]))], &arp), Err(TranspositionError::NoL3));
        assert_eq!(run(vec![Op::DecTtl], &arp), Err(TranspositionError::NoL3));
        assert_eq!(run(vec![Op::SetL4Dst(1)], &arp), Err(TranspositionError::NoL4));
        // ICMP that is not an echo has no identifier.
        let mut unreach = frame(Kind::Echo, &ip4([10, 0, 0, 1], [10, 0, 0, 2]), 1, 1, b"");
        unreach[34] = 3;
        assert_eq!(run(vec![Op::SetL4Src(1)], &unreach), Err(TranspositionError::NoL4));
        // Not tunnelled.
        assert_eq!(run(vec![Op::PopOuter], &f4), Err(TranspositionError::NotTunnelled));
        // Empty and garbage frames.
        assert_eq!(run(vec![Op::SetEthDst(GW)], &[]), Err(TranspositionError::NoL2));
        assert_eq!(
            run(vec![Op::SetIpDst(v4([1, 1, 1, 1]))], &[0u8; 5]),
            Err(TranspositionError::NoL3)
        );
    }

    #[test]
    fn ipv4_first_fragment_gets_its_l4_checksum_fixed() {
        let a = ip4([10, 0, 0, 1], [10, 0, 0, 2]);
        let whole = frame(Kind::Udp, &a, 1000, 2000, &[0x42; 40]);
        // Make it the first fragment (MF set) of a bigger datagram: the UDP checksum still
        // covers the whole datagram, so it is only checked after the rewrite, incrementally.
        let mut frag = whole.clone();
        frag[20] = 0x20;
        let c = u16::from_be_bytes([frag[24], frag[25]]);
        frag[24..26].copy_from_slice(&adjust(c, 0, 0x2000, false).to_be_bytes());
        assert_eq!(Stack::parse(&frag).outer.l4, None);
        let out = run(vec![Op::SetIpDst(v4([10, 0, 0, 9]))], &frag).unwrap();
        let mut want =
            frame(Kind::Udp, &ip4([10, 0, 0, 1], [10, 0, 0, 9]), 1000, 2000, &[0x42; 40]);
        want[20] = 0x20;
        let c = u16::from_be_bytes([want[24], want[25]]);
        want[24..26].copy_from_slice(&adjust(c, 0, 0x2000, false).to_be_bytes());
        assert_eq!(out, want);
        // A later fragment: only the IP header changes.
        let mut later = frag.clone();
        later[20..22].copy_from_slice(&[0x00, 0x10]);
        let c = u16::from_be_bytes([later[24], later[25]]);
        later[24..26].copy_from_slice(&adjust(c, 0x2000, 0x0010, false).to_be_bytes());
        let out = run(vec![Op::SetIpDst(v4([10, 0, 0, 9]))], &later).unwrap();
        assert_eq!(out[34..], later[34..]);
        assert_eq!(checksum::data(&out[14..34]), 0xffff);
    }

    // ---- VLAN -----------------------------------------------------------------------------

    #[test]
    fn push_and_pop_vlan() {
        let a = ip4([10, 0, 0, 1], [10, 0, 0, 2]);
        let plain = frame(Kind::Tcp, &a, 1, 2, b"data");
        let tagged = eth(VM_B, VM_A, &[(0x8100, 0x6064)], 0x0800, &plain[14..]);
        let qinq = eth(VM_B, VM_A, &[(0x88a8, 7), (0x8100, 0x6064)], 0x0800, &plain[14..]);
        assert_eq!(run(vec![Op::PushVlan(0x6064)], &plain).unwrap(), tagged);
        assert_eq!(run(vec![Op::PushVlan(7)], &tagged).unwrap(), qinq);
        assert_eq!(
            run(vec![Op::PopVlan], &qinq).unwrap(),
            eth(VM_B, VM_A, &[(0x8100, 0x6064)], 0x0800, &plain[14..])
        );
        assert_eq!(run(vec![Op::PopVlan], &tagged).unwrap(), plain);
        assert_eq!(run(vec![Op::PopVlan], &plain), Err(TranspositionError::NoVlan));
        assert_eq!(run(vec![Op::PushVlan(1)], &qinq), Err(TranspositionError::TooManyVlans));
        // Ops after a VLAN change see the moved headers.
        let out = run(vec![Op::PopVlan, Op::SetIpDst(v4([10, 0, 0, 3])), Op::SetL4Dst(9)], &tagged)
            .unwrap();
        assert_eq!(out, frame(Kind::Tcp, &ip4([10, 0, 0, 1], [10, 0, 0, 3]), 1, 9, b"data"));
        let out = run(vec![Op::PushVlan(5), Op::DecTtl], &plain).unwrap();
        let mut b = ip4([10, 0, 0, 1], [10, 0, 0, 2]);
        b.ttl = 63;
        assert_eq!(
            out,
            eth(VM_B, VM_A, &[(0x8100, 5)], 0x0800, &frame(Kind::Tcp, &b, 1, 2, b"data")[14..])
        );
        assert_eq!(
            Transposition::new(vec![Op::PushVlan(0xfff)]),
            Err(TranspositionError::BadProgram("vlan id 4095 is reserved"))
        );
        assert_eq!(
            Transposition::new(vec![Op::PushVlan(1), Op::PushVlan(2)]).unwrap().growth(),
            Some(8)
        );
    }

    // ---- encapsulation --------------------------------------------------------------------

    #[test]
    fn vxlan_v4_encap_is_byte_exact() {
        let mut a = ip4([192, 168, 0, 1], [192, 168, 0, 2]);
        a.ecn = 2; // ECT(0): copied to the outer header
        let inner = frame(Kind::Tcp, &a, 40000, 443, &[0x5a; 10]);
        let e = encap(TunnelKind::Vxlan, false, 42);
        let t = Transposition::new(vec![Op::PushEncap(e.clone())]).unwrap();
        assert_eq!(t.growth(), Some(50));
        let mut p = pkt(&inner);
        t.apply(&mut p, 0xdead_beef).unwrap();
        let want = encapsulated(&e, 0xc000 | (0xbeef & 0x3fff), 0, &inner);
        assert_eq!(p.data(), &want[..]);
        verify(p.data()).unwrap();
        let st = Stack::parse(p.data());
        assert_eq!((st.tunnel.map(|t| t.0), st.vni), (Some(Layer::Vxlan), Some(42)));
        assert_eq!(p.data()[15], 2, "outer ECN copied, DSCP 0");
        assert_eq!(&p.data()[20..22], &[0x40, 0], "DF set");
        assert_eq!(&p.data()[40..42], &[0, 0], "UDP/IPv4 checksum 0");
        assert_eq!(p.headroom(), snic_pipeline::buf::DEFAULT_HEADROOM - 50);
    }

    #[test]
    fn vxlan_v6_encap_has_a_full_udp_checksum() {
        let inner = frame(Kind::Udp, &Ip::new(v6(1), v6(2), 0), 1, 2, b"odd-length!");
        let e = encap(TunnelKind::Vxlan, true, 0x00ab_cdef);
        let mut p = pkt(&inner);
        Transposition::new(vec![Op::PushEncap(e.clone())])
            .unwrap()
            .apply(&mut p, 0x0007_1234)
            .unwrap();
        let want = encapsulated(&e, 0xc000 | 0x1234, 0x7_1234, &inner);
        assert_eq!(p.data(), &want[..]);
        verify(p.data()).unwrap();
        assert_ne!(&p.data()[60..62], &[0, 0]);
    }

    #[test]
    fn nvgre_encap_v4_and_v6() {
        let inner = frame(Kind::Echo, &ip4([10, 0, 0, 1], [10, 0, 0, 2]), 5, 5, b"ping");
        for v6_outer in [false, true] {
            let e = encap(TunnelKind::Nvgre, v6_outer, 5000);
            let t = Transposition::new(vec![Op::PushEncap(e.clone())]).unwrap();
            assert_eq!(t.growth(), Some(if v6_outer { 62 } else { 42 }));
            let mut p = pkt(&inner);
            t.apply(&mut p, 0x1_23ab).unwrap();
            let want = encapsulated(&e, 0xab, if v6_outer { 0x1_23ab } else { 0 }, &inner);
            assert_eq!(p.data(), &want[..]);
            verify(p.data()).unwrap();
            let st = Stack::parse(p.data());
            assert_eq!((st.tunnel.map(|t| t.0), st.vni), (Some(Layer::Nvgre), Some(5000)));
        }
    }

    #[test]
    fn full_outbound_program() {
        // VM traffic: DNAT, MAC rewrite, TTL, then VXLAN.
        let inner = frame(Kind::Tcp, &ip4([10, 0, 0, 1], [100, 64, 0, 1]), 1234, 80, b"x");
        let e = encap(TunnelKind::Vxlan, false, 7);
        let ops = vec![
            Op::SetEthDst(VM_A),
            Op::SetIpDst(v4([10, 0, 0, 5])),
            Op::SetL4Dst(8080),
            Op::DecTtl,
            Op::PushEncap(e.clone()),
        ];
        let out = run(ops, &inner).unwrap();
        let mut ip = ip4([10, 0, 0, 1], [10, 0, 0, 5]);
        ip.ttl = 63;
        let mut want_inner = frame(Kind::Tcp, &ip, 1234, 8080, b"x");
        want_inner[0..6].copy_from_slice(&VM_A);
        assert_eq!(out, encapsulated(&e, 0xc000 | 0x1678, 0, &want_inner));
        verify(&out).unwrap();
    }

    #[test]
    fn pop_outer_restores_inner_and_then_modifies_it() {
        let inner = frame(Kind::Udp, &ip4([10, 0, 0, 1], [10, 0, 0, 2]), 7, 8, b"payload");
        for kind in [TunnelKind::Vxlan, TunnelKind::Nvgre] {
            for v6_outer in [false, true] {
                let outer = encapsulated(&encap(kind, v6_outer, 9), 0xc001, 0, &inner);
                assert_eq!(run(vec![Op::PopOuter], &outer).unwrap(), inner);
                let mut padded = outer.clone();
                padded.extend_from_slice(&[0xee; 4]); // a trailer after the outer datagram
                let out =
                    run(vec![Op::PopOuter, Op::SetIpDst(v4([10, 0, 0, 3]))], &padded).unwrap();
                assert_eq!(
                    out,
                    frame(Kind::Udp, &ip4([10, 0, 0, 1], [10, 0, 0, 3]), 7, 8, b"payload")
                );
            }
        }
        let t = Transposition::new(vec![Op::PopOuter, Op::SetEthDst(VM_B)]).unwrap();
        assert_eq!(t.growth(), None);
    }

    #[test]
    fn pop_outer_of_geneve() {
        let inner = frame(Kind::Tcp, &ip4([10, 0, 0, 1], [10, 0, 0, 2]), 1, 2, b"geneve");
        let mut g = vec![0x00, 0x00, 0x65, 0x58];
        g.extend_from_slice(&(77u32 << 8).to_be_bytes());
        g.extend_from_slice(&inner);
        let ip = Ip { df: true, ..ip4([10, 1, 1, 1], [10, 1, 1, 2]) };
        let udp = l4(PROTO_UDP, &ip, 50000, 6081, false, &g);
        let outer =
            eth(GW, HOST, &[(0x8100, 10)], 0x0800, &Ip { proto: PROTO_UDP, ..ip }.emit(&udp));
        let st = Stack::parse(&outer);
        assert_eq!((st.tunnel.map(|t| t.0), st.vni), (Some(Layer::Geneve), Some(77)));
        let out = run(vec![Op::PopOuter, Op::SetL4Dst(3)], &outer).unwrap();
        assert_eq!(out, frame(Kind::Tcp, &ip4([10, 0, 0, 1], [10, 0, 0, 2]), 1, 3, b"geneve"));
    }

    #[test]
    fn contradictory_stack_is_an_error() {
        let f = frame(Kind::Tcp, &ip4([10, 0, 0, 1], [10, 0, 0, 2]), 1, 2, b"");
        let mut p = pkt(&f);
        p.meta.stack = Stack::default();
        p.meta.stack.outer.eth = Some(0);
        p.meta.stack.outer.vlans = 1;
        p.meta.stack.outer.l3 = Some((Layer::Ipv4, 2));
        let t = Transposition::new(vec![Op::PopVlan]).unwrap();
        assert_eq!(t.apply(&mut p, 0), Err(TranspositionError::BadStack));
        // A stack pointing past the end of the frame.
        let mut p = pkt(&f);
        p.truncate(20);
        let t = Transposition::new(vec![Op::SetIpDst(v4([1, 2, 3, 4]))]).unwrap();
        assert_eq!(t.apply(&mut p, 0), Err(TranspositionError::Truncated { need: 34, have: 20 }));
    }

    #[test]
    fn ipv6_fragments_refuse_address_rewrites() {
        // A first fragment: its UDP checksum covers the whole datagram, which we cannot see.
        let udp = l4(PROTO_UDP, &Ip::new(v6(1), v6(2), 0), 1, 2, true, b"frag");
        let mut payload = vec![PROTO_UDP, 0, 0x00, 0x01, 0, 0, 0, 9];
        payload.extend_from_slice(&udp);
        let ip = Ip::new(v6(1), v6(2), 44);
        let f = eth(VM_B, VM_A, &[], 0x86dd, &ip.emit(&payload));
        assert_eq!(Stack::parse(&f).outer.l4, None);
        assert_eq!(run(vec![Op::SetIpDst(v6(3))], &f), Err(TranspositionError::NoL4));
        // Ops that do not touch the L4 checksum still work.
        let out = run(vec![Op::DecTtl, Op::SetEthDst(GW)], &f).unwrap();
        assert_eq!(out[21], 63);
    }

    #[test]
    fn rfc6040_decap_ecn() {
        // (inner, outer) -> inner after decap, or the drop.
        let cases = [
            (0, 0, Some(0)),
            (0, 2, Some(0)),
            (0, 3, None),
            (2, 3, Some(3)),
            (1, 3, Some(3)),
            (2, 1, Some(1)),
            (1, 2, Some(1)),
            (3, 0, Some(3)),
        ];
        for v6_inner in [false, true] {
            for (inner_ecn, outer_ecn, want) in cases {
                let mut a = if v6_inner {
                    Ip::new(v6(1), v6(2), 0)
                } else {
                    ip4([10, 0, 0, 1], [10, 0, 0, 2])
                };
                a.ecn = inner_ecn;
                let inner = frame(Kind::Tcp, &a, 1, 2, b"");
                let mut outer =
                    encapsulated(&encap(TunnelKind::Vxlan, false, 9), 0xc001, 0, &inner);
                outer[15] = outer_ecn;
                let c = !checksum::data(&{
                    let mut h = outer[14..34].to_vec();
                    h[10..12].fill(0);
                    h
                });
                outer[24..26].copy_from_slice(&c.to_be_bytes());
                let got = run(vec![Op::PopOuter], &outer);
                match want {
                    None => assert_eq!(got, Err(TranspositionError::CeOnNotEct)),
                    Some(w) => {
                        a.ecn = w;
                        assert_eq!(
                            got.unwrap(),
                            frame(Kind::Tcp, &a, 1, 2, b""),
                            "{inner_ecn} {outer_ecn}"
                        );
                    }
                }
            }
        }
    }

    fn gso(kind: snic_pipeline::meta::GsoKind, hdr_len: u16) -> snic_pipeline::meta::Gso {
        snic_pipeline::meta::Gso { kind, size: 1000, hdr_len, tunnel: None }
    }

    #[test]
    fn super_packets_and_headroom() {
        use snic_pipeline::meta::{GsoKind, TunnelGso, TunnelGsoKind};
        let inner = frame(Kind::Tcp, &ip4([10, 0, 0, 1], [10, 0, 0, 2]), 1, 2, b"");
        let t =
            Transposition::new(vec![Op::PushEncap(encap(TunnelKind::Vxlan, false, 1))]).unwrap();
        // NAT and VLAN ops are fine on a super-packet; a VLAN push moves the header length.
        let mut p = pkt(&inner);
        p.meta.offload.gso = Some(gso(GsoKind::TcpV4, 54));
        let nat = Transposition::new(vec![Op::PushVlan(3), Op::SetL4Dst(5)]).unwrap();
        nat.apply(&mut p, 0).unwrap();
        assert_eq!(p.meta.offload.gso.unwrap().hdr_len, 58);
        // A push on a super-packet that already carries a tunnel is refused, untouched.
        let mut p = pkt(&inner);
        let vx = Some(TunnelGso { kind: TunnelGsoKind::Vxlan, outer_len: 50 });
        p.meta.offload.gso =
            Some(snic_pipeline::meta::Gso { tunnel: vx, ..gso(GsoKind::TcpV4, 54) });
        assert_eq!(t.apply(&mut p, 0), Err(TranspositionError::SuperPacket));
        assert_eq!(p.data(), &inner[..]);
        // A pop of a super-packet whose outer headers were not pushed here is refused.
        let tunnelled =
            run(vec![Op::PushEncap(encap(TunnelKind::Vxlan, false, 1))], &inner).unwrap();
        let mut p = pkt(&tunnelled);
        p.meta.offload.gso = Some(gso(GsoKind::TcpV4, 104));
        let pop = Transposition::new(vec![Op::PopOuter]).unwrap();
        assert_eq!(pop.apply(&mut p, 0), Err(TranspositionError::SuperPacket));
        assert_eq!(p.data(), &tunnelled[..]);
        // Nor one whose recorded outer length is not the packet's.
        let nv = Some(TunnelGso { kind: TunnelGsoKind::Vxlan, outer_len: 70 });
        p.meta.offload.gso =
            Some(snic_pipeline::meta::Gso { tunnel: nv, ..gso(GsoKind::TcpV4, 124) });
        assert_eq!(pop.apply(&mut p, 0), Err(TranspositionError::SuperPacket));

        let mut small = PacketBuf::with_room(16, 256);
        small.set_frame(&inner);
        small.meta.stack = Stack::parse(&inner);
        // `set_frame` restores the default headroom when it reallocates; shrink it back.
        let mut small = if small.headroom() > 16 {
            let mut s = PacketBuf::with_room(16, 256);
            s.recv_area()[..inner.len()].copy_from_slice(&inner);
            s.set_len(inner.len()).unwrap();
            s.meta.stack = Stack::parse(&inner);
            s
        } else {
            small
        };
        assert_eq!(t.apply(&mut small, 0), Err(TranspositionError::NoRoom { need: 50, have: 16 }));
    }

    /// Tunnel TSO: encapsulating a guest's TCP super-packet (checksum partial) records the
    /// tunnel in the GSO metadata and moves the header length and checksum start; software
    /// segmentation then yields wire packets whose every checksum verifies and whose inner
    /// frames are the plain segmentation of the original; popping the outer headers again
    /// restores the original packet and metadata.
    #[test]
    fn super_packet_encap_records_the_tunnel_for_segmentation() {
        use snic_pipeline::Batch;
        use snic_pipeline::meta::{GsoKind, TunnelGso, TunnelGsoKind};
        use snic_pipeline::offload::segment;
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 13 % 251) as u8).collect();
        for (v6_inner, v6_outer, kind, hl) in [
            (false, false, TunnelKind::Vxlan, 50u16),
            (false, true, TunnelKind::Vxlan, 70),
            (true, false, TunnelKind::Nvgre, 42),
            (true, true, TunnelKind::Vxlan, 70),
        ] {
            let a =
                if v6_inner { Ip::new(v6(1), v6(2), 0) } else { ip4([10, 0, 0, 1], [10, 0, 0, 2]) };
            let plain = frame(Kind::Tcp, &a, 40000, 5201, &data);
            let (f, (start, off)) = make_partial(&plain);
            let st = Stack::parse(&f);
            let l4 = st.outer.l4.unwrap().1;
            let gkind = if v6_inner { GsoKind::TcpV6 } else { GsoKind::TcpV4 };
            let g = snic_pipeline::meta::Gso {
                kind: gkind,
                size: 1000,
                hdr_len: l4 + 20,
                tunnel: None,
            };
            let mut p = pkt(&f);
            p.meta.offload.gso = Some(g);
            p.meta.offload.csum_partial = Some((start, off));
            let x = Transposition::new(vec![Op::PushEncap(encap(kind, v6_outer, 42))]).unwrap();
            x.apply(&mut p, 0x77).unwrap();
            let tkind =
                if kind == TunnelKind::Vxlan { TunnelGsoKind::Vxlan } else { TunnelGsoKind::Nvgre };
            assert_eq!(
                p.meta.offload.gso,
                Some(snic_pipeline::meta::Gso {
                    hdr_len: l4 + 20 + hl,
                    tunnel: Some(TunnelGso { kind: tkind, outer_len: hl }),
                    ..g
                })
            );
            assert_eq!(p.meta.offload.csum_partial, Some((start + hl, off)));
            // The outer headers are those of the whole super-packet: the inner frame intact
            // behind them, the outer lengths covering all of it.
            assert_eq!(&p.data()[usize::from(hl)..], &f[..]);
            let outer = Stack::parse(p.data());
            let (ol3, o) = outer.outer.l3.unwrap();
            let o = usize::from(o);
            let ip_len = if ol3 == Layer::Ipv4 {
                usize::from(u16::from_be_bytes([p.data()[o + 2], p.data()[o + 3]]))
            } else {
                40 + usize::from(u16::from_be_bytes([p.data()[o + 4], p.data()[o + 5]]))
            };
            assert_eq!(o + ip_len, p.len());

            let mut out = Batch::new(8);
            assert_eq!(segment(&p, &mut out), Ok(3));
            let mut joined = Vec::new();
            for (i, s) in out.iter().enumerate() {
                verify(s.data()).unwrap_or_else(|e| panic!("segment {i}: {e}"));
                assert!(s.len() <= usize::from(hl) + plain.len() - data.len() + 1000);
                // The inner frame of each segment is the plain frame's segment.
                let back = run(vec![Op::PopOuter], s.data()).unwrap();
                let st = Stack::parse(&back);
                let t = usize::from(st.outer.l4.unwrap().1);
                let seq = u32::from_be_bytes(back[t + 4..t + 8].try_into().unwrap());
                assert_eq!(seq, 0x0102_0304 + 1000 * i as u32, "segment {i}");
                // PSH only on the last.
                assert_eq!(back[t + 13], if i == 2 { 0x18 } else { 0x10 });
                joined.extend_from_slice(&back[t + 20..]);
            }
            assert_eq!(joined, data);

            // Popping the pushed headers off the super-packet restores it and its metadata.
            let mut q = pkt(p.data());
            q.meta.offload = p.meta.offload;
            Transposition::new(vec![Op::PopOuter]).unwrap().apply(&mut q, 0).unwrap();
            assert_eq!(q.data(), &f[..]);
            assert_eq!(q.meta.offload.gso, Some(g));
            assert_eq!(q.meta.offload.csum_partial, Some((start, off)));
        }
    }

    #[test]
    fn bad_programs_are_refused() {
        let e = encap(TunnelKind::Vxlan, false, 1);
        assert_eq!(
            Transposition::new(vec![Op::SetEthDst(GW), Op::PopOuter]),
            Err(TranspositionError::BadProgram("pop must be the first op"))
        );
        assert_eq!(
            Transposition::new(vec![Op::PushEncap(e.clone()), Op::DecTtl]),
            Err(TranspositionError::BadProgram("push must be the last op"))
        );
        let bad = |f: fn(&mut Encap)| {
            let mut e = e.clone();
            f(&mut e);
            Transposition::new(vec![Op::PushEncap(e)]).unwrap_err()
        };
        assert_eq!(bad(|e| e.vni = 1 << 24), TranspositionError::BadEncap("vni exceeds 24 bits"));
        assert_eq!(bad(|e| e.ttl = 0), TranspositionError::BadEncap("ttl 0"));
        assert_eq!(bad(|e| e.udp_dst = 0), TranspositionError::BadEncap("udp destination port 0"));
        assert_eq!(
            bad(|e| e.dst_ip = v6(1)),
            TranspositionError::BadEncap("source and destination of different families")
        );
        assert_eq!(TranspositionError::BadEncap("ttl 0").to_string(), "bad encapsulation: ttl 0");
    }

    #[test]
    fn display_for_dump_flows() {
        let t = Transposition::new(vec![
            Op::PopOuter,
            Op::PopVlan,
            Op::PushVlan(0x6064),
            Op::SetEthSrc(HOST),
            Op::SetEthDst([0x02, 0, 0, 0, 0, 0x01]),
            Op::SetIpSrc(v4([10, 0, 0, 1])),
            Op::SetIpDst(v4([10, 0, 0, 5])),
            Op::SetL4Src(1),
            Op::SetL4Dst(80),
            Op::DecTtl,
            Op::PushEncap(encap(TunnelKind::Vxlan, false, 42)),
        ])
        .unwrap();
        assert_eq!(
            t.to_string(),
            "pop,pop_vlan,push_vlan(vid=100,pcp=3),set(eth.src=02:00:00:00:01:01),\
             set(eth.dst=02:00:00:00:00:01),set(ip.src=10.0.0.1),set(ip.dst=10.0.0.5),\
             set(l4.src=1),set(l4.dst=80),dec_ttl,push(vxlan vni=42 10.1.1.1>10.1.1.2)"
        );
        assert_eq!(t.ops().len(), 11);
        let n = Transposition::new(vec![Op::PushEncap(encap(TunnelKind::Nvgre, true, 7))]).unwrap();
        assert_eq!(n.to_string(), "push(nvgre vsid=7 2001:db8::1>2001:db8::2)");
    }

    // ---- checksum offload -----------------------------------------------------------------

    /// `f` with its L4 checksum replaced by the non-complemented pseudo-header sum, as a sender
    /// using checksum offload leaves it; returns the frame and `(csum_start, csum_offset)`.
    fn make_partial(f: &[u8]) -> (Vec<u8>, (u16, u16)) {
        let st = Stack::parse(f);
        let (l3, o) = st.outer.l3.unwrap();
        let (l4, at) = st.outer.l4.unwrap();
        let (o, at) = (usize::from(o), usize::from(at));
        let (src, dst, end) = if l3 == Layer::Ipv4 {
            let s: [u8; 4] = f[o + 12..o + 16].try_into().unwrap();
            let d: [u8; 4] = f[o + 16..o + 20].try_into().unwrap();
            (v4(s), v4(d), o + usize::from(u16::from_be_bytes([f[o + 2], f[o + 3]])))
        } else {
            let s: [u8; 16] = f[o + 8..o + 24].try_into().unwrap();
            let d: [u8; 16] = f[o + 24..o + 40].try_into().unwrap();
            (
                IpAddr::from(s),
                IpAddr::from(d),
                o + 40 + usize::from(u16::from_be_bytes([f[o + 4], f[o + 5]])),
            )
        };
        let off: u16 = match l4 {
            Layer::Tcp => 16,
            Layer::Udp => 6,
            _ => 2,
        };
        let mut out = f.to_vec();
        let pseudo =
            checksum::pseudo_header(&src, &dst, st.outer.ip_proto.unwrap(), (end - at) as u32);
        out[at + usize::from(off)..at + usize::from(off) + 2]
            .copy_from_slice(&pseudo.to_be_bytes());
        (out, (at as u16, off))
    }

    /// Complete a partial checksum as the device does: sum from `start` to the end of the IP
    /// datagram (the field holds the pseudo-header sum) and store the complement.
    fn complete(f: &mut [u8], (start, off): (u16, u16), ip_end: usize) {
        let (s, o) = (usize::from(start), usize::from(off));
        let c = !checksum::data(&f[s..ip_end]);
        f[s + o..s + o + 2].copy_from_slice(&c.to_be_bytes());
    }

    #[test]
    fn nat_with_checksum_offload_updates_the_pseudo_sum() {
        for (v6_inner, kind) in
            [(false, Kind::Tcp), (false, Kind::Udp), (true, Kind::Tcp), (true, Kind::Udp)]
        {
            let a =
                if v6_inner { Ip::new(v6(1), v6(2), 0) } else { ip4([10, 0, 0, 1], [10, 0, 0, 2]) };
            let (f, partial) = make_partial(&frame(kind, &a, 1000, 80, b"abcdefg"));
            let new_dst = if v6_inner { v6(5) } else { v4([10, 0, 0, 5]) };
            let t = Transposition::new(vec![Op::SetIpDst(new_dst), Op::SetL4Dst(8080)]).unwrap();
            let mut p = pkt(&f);
            p.meta.offload.csum_partial = Some(partial);
            t.apply(&mut p, 0).unwrap();
            let b = Ip { dst: new_dst, ..a };
            // The field holds the pseudo-header sum of the NEW addresses, not a checksum.
            let (want_partial, _) = make_partial(&frame(kind, &b, 1000, 8080, b"abcdefg"));
            assert_eq!(p.data(), &want_partial[..]);
            assert_eq!(p.meta.offload.csum_partial, Some(partial));
            let mut out = p.data().to_vec();
            let len = out.len();
            complete(&mut out, partial, len);
            assert_eq!(out, frame(kind, &b, 1000, 8080, b"abcdefg"));
        }
    }

    #[test]
    fn encap_with_checksum_offload_moves_start_and_uses_lco() {
        let inner = frame(Kind::Tcp, &ip4([10, 0, 0, 1], [10, 0, 0, 2]), 1, 2, b"hello, world");
        let (f, (start, off)) = make_partial(&inner);
        for (v6_outer, hl) in [(false, 50u16), (true, 70)] {
            let t = Transposition::new(vec![Op::PushEncap(encap(TunnelKind::Vxlan, v6_outer, 3))])
                .unwrap();
            let mut p = pkt(&f);
            p.meta.offload.csum_partial = Some((start, off));
            t.apply(&mut p, 99).unwrap();
            assert_eq!(p.meta.offload.csum_partial, Some((start + hl, off)));
            let mut out = p.data().to_vec();
            let len = out.len();
            complete(&mut out, (start + hl, off), len);
            // Once the device fills the inner checksum, the outer UDP/IPv6 checksum is right.
            verify(&out).unwrap();
            let back = run(vec![Op::PopOuter], &out).unwrap();
            assert_eq!(back, inner);
        }
        // Pop moves it back.
        let outer = {
            let mut p = pkt(&f);
            p.meta.offload.csum_partial = Some((start, off));
            Transposition::new(vec![Op::PushEncap(encap(TunnelKind::Vxlan, false, 3))])
                .unwrap()
                .apply(&mut p, 1)
                .unwrap();
            p
        };
        let mut p = pkt(outer.data());
        p.meta.offload = outer.meta.offload;
        Transposition::new(vec![Op::PopOuter]).unwrap().apply(&mut p, 0).unwrap();
        assert_eq!(p.meta.offload.csum_partial, Some((start, off)));
        assert_eq!(p.data(), &f[..]);
    }

    // ---- properties -----------------------------------------------------------------------

    fn arb_ip(v6: bool) -> impl Strategy<Value = IpAddr> {
        if v6 {
            any::<[u8; 16]>().prop_map(IpAddr::from).boxed()
        } else {
            any::<[u8; 4]>().prop_map(IpAddr::from).boxed()
        }
    }

    fn arb_kind() -> impl Strategy<Value = Kind> {
        prop_oneof![Just(Kind::Tcp), Just(Kind::Udp), Just(Kind::UdpNoCsum), Just(Kind::Echo)]
    }

    /// A valid frame and a random NAT program of the same family.
    fn arb_nat() -> impl Strategy<Value = (Vec<u8>, Vec<Op>)> {
        any::<bool>().prop_flat_map(|v6| {
            (
                arb_ip(v6),
                arb_ip(v6),
                arb_ip(v6),
                arb_ip(v6),
                arb_kind(),
                any::<(u16, u16, u16, u16)>(),
                proptest::collection::vec(any::<u8>(), 0..64),
                any::<(bool, bool, bool, bool, bool)>(),
                2u8..=255,
                0u8..4,
            )
                .prop_map(
                    move |(s, d, ns, nd, kind, (sp, dp, nsp, ndp), payload, which, ttl, ecn)| {
                        // Ports that make the parser read a tunnel or RoCE header (VXLAN, Geneve,
                        // RoCEv2) would turn the generated L4 payload into a truncated tunnel:
                        // that is a different frame, not a NAT case.
                        let plain =
                            |p: u16| if matches!(p, 4789 | 4791 | 6081) { p ^ 0x8000 } else { p };
                        let (sp, dp, nsp, ndp) = (plain(sp), plain(dp), plain(nsp), plain(ndp));
                        // UDP over IPv6 always has a checksum.
                        let kind = if v6 && kind == Kind::UdpNoCsum { Kind::Udp } else { kind };
                        let mut ip = Ip::new(s, d, 0);
                        ip.ttl = ttl;
                        ip.ecn = ecn;
                        let f = frame(
                            kind,
                            &ip,
                            sp,
                            if kind == Kind::Echo { sp } else { dp },
                            &payload,
                        );
                        let mut ops = Vec::new();
                        if which.0 {
                            ops.push(Op::SetIpSrc(ns));
                        }
                        if which.1 {
                            ops.push(Op::SetIpDst(nd));
                        }
                        if which.2 {
                            ops.push(Op::SetL4Src(nsp));
                        }
                        if which.3 {
                            ops.push(Op::SetL4Dst(ndp));
                        }
                        if which.4 {
                            ops.push(Op::DecTtl);
                        }
                        (f, ops)
                    },
                )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn nat_keeps_every_checksum_valid((f, ops) in arb_nat(), partial in any::<bool>()) {
            verify(&f).unwrap();
            let t = Transposition::new(ops.clone()).unwrap();
            let (input, csum) = if partial && !is_echo4(&f) { let (g, c) = make_partial(&f); (g, Some(c)) } else { (f.clone(), None) };
            let mut p = pkt(&input);
            p.meta.offload.csum_partial = csum;
            t.apply(&mut p, 0).unwrap();
            let mut out = p.data().to_vec();
            if let Some(c) = csum {
                let len = out.len();
                complete(&mut out, c, len);
                // A UDP checksum that completes to 0 is sent as 0xffff.
                if out[usize::from(c.0) + 6..usize::from(c.0) + 8] == [0, 0] && usize::from(c.1) == 6 {
                    out[usize::from(c.0) + 6..usize::from(c.0) + 8].copy_from_slice(&[0xff, 0xff]);
                }
            }
            prop_assert_eq!(verify(&out), Ok(()));
            // The rewritten fields hold the new values.
            let st = Stack::parse(&out);
            let (l4, at) = st.outer.l4.unwrap();
            let at = usize::from(at);
            for op in &ops {
                match (op, l4) {
                    (Op::SetL4Src(v), Layer::Tcp | Layer::Udp) => prop_assert_eq!(&out[at..at + 2], &v.to_be_bytes()),
                    (Op::SetL4Dst(v), Layer::Tcp | Layer::Udp) => prop_assert_eq!(&out[at + 2..at + 4], &v.to_be_bytes()),
                    _ => {}
                }
            }
            prop_assert_eq!(out.len(), f.len());
        }

        #[test]
        fn vlan_ops_move_the_cursor((f, ops) in arb_nat(), t1 in 1u16..4095, t2 in 1u16..4095) {
            // Retagging around NAT equals NAT on the untagged frame, tagged afterwards.
            let tagged = run(vec![Op::PushVlan(t1)], &f).unwrap();
            let mut all = vec![Op::PopVlan];
            all.extend(ops.iter().cloned());
            all.push(Op::PushVlan(t2));
            let got = run(all, &tagged).unwrap();
            let mut plain = ops.clone();
            plain.push(Op::PushVlan(t2));
            prop_assert_eq!(&got, &run(plain, &f).unwrap());
            prop_assert_eq!(verify(&got), Ok(()));
            prop_assert_eq!(&got[12..16], &[0x81, 0x00, (t2 >> 8) as u8, t2 as u8]);
        }

        #[test]
        fn encap_then_pop_is_identity(
            (f, _) in arb_nat(),
            vxlan in any::<bool>(),
            v6_outer in any::<bool>(),
            vni in 0u32..(1 << 24),
            hash in any::<u32>(),
            tag in proptest::option::of(1u16..4095),
        ) {
            let f = match tag {
                Some(t) => run(vec![Op::PushVlan(t)], &f).unwrap(),
                None => f,
            };
            let kind = if vxlan { TunnelKind::Vxlan } else { TunnelKind::Nvgre };
            let t = Transposition::new(vec![Op::PushEncap(encap(kind, v6_outer, vni))]).unwrap();
            let mut p = pkt(&f);
            t.apply(&mut p, hash).unwrap();
            prop_assert_eq!(p.len() as isize - f.len() as isize, t.growth().unwrap());
            prop_assert_eq!(verify(p.data()), Ok(()));
            let st = Stack::parse(p.data());
            prop_assert_eq!(st.vni, Some(vni));
            prop_assert_eq!(st.inner.unwrap().eth, Some(t.growth().unwrap() as u16));
            // Decapsulate from a fresh parse.
            let enc = p.data().to_vec();
            let mut q = pkt(&enc);
            Transposition::new(vec![Op::PopOuter]).unwrap().apply(&mut q, 0).unwrap();
            prop_assert_eq!(q.data(), &f[..]);
        }

        #[test]
        fn garbage_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..160),
            cut in 0usize..160,
            ops in proptest::collection::vec(arb_op(), 0..6),
        ) {
            // A random frame, and the same frame cut short after it was parsed (a stack that
            // points past the end).
            let mut p = pkt(&bytes);
            let mut ops = ops;
            ops.retain(|o| !matches!(o, Op::PopOuter | Op::PushEncap(_)));
            for extra in [vec![Op::PopOuter], vec![]] {
                let mut all = extra.clone();
                all.extend(ops.iter().cloned());
                if let Ok(t) = Transposition::new(all) {
                    let _ = t.apply(&mut p, 1);
                    let mut q = pkt(&bytes);
                    q.truncate(cut);
                    let _ = t.apply(&mut q, 1);
                }
            }
            // Real tunnelled frames, truncated after parsing.
            let inner = frame(Kind::Tcp, &ip4([1, 1, 1, 1], [2, 2, 2, 2]), 1, 2, &bytes[..bytes.len().min(20)]);
            let outer = encapsulated(&encap(TunnelKind::Vxlan, false, 1), 0xc000, 0, &inner);
            let mut all = vec![Op::PopOuter];
            all.extend(ops.iter().cloned());
            if let Ok(t) = Transposition::new(all) {
                let mut q = pkt(&outer);
                q.truncate(cut);
                let _ = t.apply(&mut q, 1);
            }
            // Plain frames of every kind and family, truncated after parsing, then encapsulated.
            let mut all = ops.clone();
            all.push(Op::PushEncap(encap(TunnelKind::Vxlan, cut % 2 == 0, 1)));
            for kind in [Kind::Tcp, Kind::Udp, Kind::Echo] {
                for a in [ip4([1, 1, 1, 1], [2, 2, 2, 2]), Ip::new(v6(1), v6(2), 0)] {
                    let f = frame(kind, &a, 1, 2, &bytes[..bytes.len().min(30)]);
                    for t in [Transposition::new(ops.clone()), Transposition::new(all.clone())]
                        .into_iter()
                        .flatten()
                    {
                        let mut q = pkt(&f);
                        q.truncate(cut);
                        let _ = t.apply(&mut q, 1);
                    }
                }
            }
        }
    }

    fn is_echo4(f: &[u8]) -> bool {
        matches!(Stack::parse(f).outer.l4, Some((Layer::Icmpv4, _)))
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            Just(Op::PopOuter),
            Just(Op::PopVlan),
            (0u16..4095).prop_map(Op::PushVlan),
            any::<Mac>().prop_map(Op::SetEthSrc),
            any::<Mac>().prop_map(Op::SetEthDst),
            any::<bool>().prop_flat_map(arb_ip).prop_map(Op::SetIpSrc),
            any::<bool>().prop_flat_map(arb_ip).prop_map(Op::SetIpDst),
            any::<u16>().prop_map(Op::SetL4Src),
            any::<u16>().prop_map(Op::SetL4Dst),
            Just(Op::DecTtl),
        ]
    }

    // ---- interop: tshark and scapy ------------------------------------------------------------

    /// Is `cmd args` runnable? A missing tool skips the test with a message, unless `CI` is
    /// set (then CI cannot pass by skipping).
    fn have(cmd: &str, args: &[&str], what: &str) -> bool {
        let ok = std::process::Command::new(cmd)
            .args(args)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !ok {
            assert!(std::env::var_os("CI").is_none(), "{what} is required when CI is set");
            use std::io::Write as _;
            let _ =
                writeln!(std::io::stderr(), "SKIP transposition interop: {what} is not installed");
        }
        ok
    }

    fn run_tool(cmd: &mut std::process::Command) -> String {
        let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{cmd:?} failed:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }

    /// The encapsulated frames of the interop test, with what tshark must see in each.
    fn interop_frames() -> Vec<(Vec<u8>, &'static str)> {
        let mut out = Vec::new();
        let go = |ops: Vec<Op>, f: &[u8], partial: Option<(u16, u16)>| {
            let t = Transposition::new(ops).unwrap();
            let mut p = pkt(f);
            p.meta.offload.csum_partial = partial;
            t.apply(&mut p, 0x5eed_1234).unwrap();
            let mut v = p.data().to_vec();
            if let Some(c) = p.meta.offload.csum_partial {
                let len = v.len();
                complete(&mut v, c, len);
            }
            v
        };
        let tcp4 = frame(Kind::Tcp, &ip4([10, 0, 0, 1], [100, 64, 0, 1]), 40000, 80, b"GET /");
        let dnat = vec![Op::SetIpDst(v4([10, 0, 0, 5])), Op::SetL4Dst(8080), Op::DecTtl];
        let mut ops = dnat.clone();
        ops.push(Op::PushEncap(encap(TunnelKind::Vxlan, false, 42)));
        out.push((go(ops, &tcp4, None), "vxlan"));
        let udp6 = frame(Kind::Udp, &Ip::new(v6(1), v6(2), 0), 40001, 7777, b"odd-length!");
        out.push((
            go(vec![Op::PushEncap(encap(TunnelKind::Vxlan, true, 42))], &udp6, None),
            "vxlan",
        ));
        let icmp = frame(Kind::Echo, &ip4([10, 0, 0, 1], [10, 0, 0, 2]), 9, 9, b"ping");
        out.push((
            go(vec![Op::PushEncap(encap(TunnelKind::Nvgre, false, 42))], &icmp, None),
            "gre",
        ));
        let tcp6 = frame(Kind::Tcp, &Ip::new(v6(3), v6(4), 0), 1, 443, &[7; 33]);
        let ops = vec![Op::PushVlan(100), Op::PushEncap(encap(TunnelKind::Nvgre, true, 7))];
        out.push((go(ops, &tcp6, None), "gre"));
        // Checksum offload: the inner TCP checksum completed after the encap (LCO outer sum).
        let (partial, c) = make_partial(&tcp4);
        let mut ops = dnat;
        ops.push(Op::PushEncap(encap(TunnelKind::Vxlan, true, 42)));
        out.push((go(ops, &partial, Some(c)), "vxlan"));
        // Tunnel TSO: a TCP super-packet (checksum partial) encapsulated in VXLAN over IPv6 and
        // in NVGRE over IPv4, then segmented in software: every segment a wire packet.
        let data: Vec<u8> = (0..2500u32).map(|i| (i * 7) as u8).collect();
        let big = frame(Kind::Tcp, &ip4([10, 0, 0, 1], [10, 0, 0, 2]), 40000, 5201, &data);
        let (big, (start, off)) = make_partial(&big);
        for (v6_outer, kind, label) in
            [(true, TunnelKind::Vxlan, "vxlan"), (false, TunnelKind::Nvgre, "gre")]
        {
            let mut p = pkt(&big);
            p.meta.offload.csum_partial = Some((start, off));
            p.meta.offload.gso = Some(snic_pipeline::meta::Gso {
                kind: snic_pipeline::meta::GsoKind::TcpV4,
                size: 1000,
                hdr_len: 54,
                tunnel: None,
            });
            let t = Transposition::new(vec![Op::PushEncap(encap(kind, v6_outer, 42))]).unwrap();
            t.apply(&mut p, 0x5eed_1234).unwrap();
            let mut segs = snic_pipeline::Batch::new(4);
            assert_eq!(snic_pipeline::offload::segment(&p, &mut segs), Ok(3));
            out.extend(segs.iter().map(|s| (s.data().to_vec(), label)));
        }
        out
    }

    fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) {
        use pcap_file::pcap::{PcapPacket, PcapWriter};
        let mut w = PcapWriter::new(std::fs::File::create(path).unwrap()).unwrap();
        for (i, f) in frames.iter().enumerate() {
            let ts = std::time::Duration::from_millis(1_700_000_000_000 + i as u64);
            w.write_packet(&PcapPacket::new(ts, f.len() as u32, f)).unwrap();
        }
    }

    /// `scripts/check_pcap.py` (scapy recomputes every checksum): its verdict and output.
    fn scapy_verdict(pcap: &std::path::Path) -> (bool, String) {
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/check_pcap.py");
        let out = std::process::Command::new("python3").arg(script).arg(pcap).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    }

    /// tshark's malformed-packet and expert-error lines, checksum validation on.
    fn tshark_problems(pcap: &std::path::Path) -> Vec<String> {
        let mut v = std::process::Command::new("tshark");
        v.arg("-r").arg(pcap).args(["-V", "-z", "expert"]);
        for p in ["ip.check_checksum:TRUE", "udp.check_checksum:TRUE", "tcp.check_checksum:TRUE"] {
            v.args(["-o", p]);
        }
        let text = run_tool(&mut v);
        text.lines()
            .filter(|l| l.contains("Malformed") || l.contains("[Expert Info (Error"))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn interop_encapsulated_frames_decode_in_tshark_and_scapy() {
        let labelled = interop_frames();
        let frames: Vec<Vec<u8>> = labelled.iter().map(|(f, _)| f.clone()).collect();
        for f in &frames {
            verify(f).unwrap();
        }
        let dir = std::env::temp_dir().join(format!("snic-transposition-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pcap = dir.join("transposition.pcap");
        write_pcap(&pcap, &frames);
        // The same frames with the outer IPv4 header checksum (frame 1) and the outer
        // UDP/IPv6 checksum (frame 2) broken: both tools must notice, or they prove nothing.
        let bad_pcap = dir.join("broken.pcap");
        let mut broken = frames.clone();
        broken[0][24] ^= 0x01;
        broken[1][60] ^= 0x01;
        write_pcap(&bad_pcap, &broken);

        if have("python3", &["-c", "import scapy.all"], "python3 with scapy") {
            let (ok, text) = scapy_verdict(&pcap);
            assert!(ok, "scapy:\n{text}");
            assert!(text.contains(&format!("all {} packets verified", frames.len())), "{text}");
            let (ok, text) = scapy_verdict(&bad_pcap);
            assert!(!ok && text.contains("mismatch in packet(s): 1, 2"), "scapy:\n{text}");
        }
        if have("tshark", &["--version"], "tshark") {
            let bad = tshark_problems(&pcap);
            assert!(bad.is_empty(), "tshark problems:\n{}", bad.join("\n"));
            assert!(!tshark_problems(&bad_pcap).is_empty(), "tshark missed broken checksums");
            let fields = run_tool(
                std::process::Command::new("tshark")
                    .arg("-r")
                    .arg(&pcap)
                    .args(["-T", "fields", "-E", "separator=|"])
                    .args(["-e", "frame.protocols", "-e", "vxlan.vni", "-e", "gre.key"]),
            );
            let lines: Vec<&str> = fields.lines().collect();
            assert_eq!(lines.len(), frames.len(), "{fields}");
            for (line, (_, want)) in lines.iter().zip(&labelled) {
                let cols: Vec<&str> = line.split('|').collect();
                assert_eq!(cols.len(), 3, "{line}");
                let chain = cols[0];
                if *want == "vxlan" {
                    assert!(chain.contains(":udp:vxlan:eth:"), "{line}");
                    assert_eq!(cols[1], "42", "{line}");
                } else {
                    // tshark 4.0 has no NVGRE dissector: GRE with a key, carrying Ethernet.
                    assert!(chain.contains(":gre:eth:"), "{line}");
                    let key = u32::from_str_radix(cols[2].trim_start_matches("0x"), 16)
                        .unwrap_or_else(|_| cols[2].parse().unwrap());
                    assert_eq!(key >> 8, if chain.contains("vlan") { 7 } else { 42 }, "{line}");
                    assert_eq!(key & 0xff, 0x34, "FlowID from the hash: {line}");
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
