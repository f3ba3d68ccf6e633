//! The exact-match key of a unified flow, taken from a parsed frame, and its hash.
//!
//! A [`FlowKey`] names one direction of one flow as the GFT sees it: the inner L3/L4 tuple (the
//! customer's addresses, across one level of encapsulation), the outer (provider) addresses and
//! the VNI when the packet is tunnelled, the ingress port and the direction. It is a fixed
//! 80-byte value with no padding holes, so it compares and hashes as ten 64-bit words.
//!
//! IPv4 addresses are stored IPv4-mapped (`::ffff:a.b.c.d`), so one key type covers both
//! families. ICMP echo request and reply both key on the identifier (as both ports), so a reply
//! finds the reverse of its request's flow. ARP keys on the sender and target protocol
//! addresses with [`KeyFlags::ARP`] set, so ARP can be encapsulated like any flow.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use snic_wire::stack::{Headers, Layer, Stack};

/// A virtual port of the vSwitch (a VM's NIC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct VPortId(pub u16);

impl fmt::Display for VPortId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vport{}", self.0)
    }
}

/// Which way a packet crosses the vSwitch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// From a VM (its vPort) towards the network: layers are walked in order.
    #[default]
    Out,
    /// From the network towards a VM: layers are walked in reverse order.
    In,
}

impl Direction {
    /// `"out"` or `"in"`.
    pub const fn name(self) -> &'static str {
        match self {
            Direction::Out => "out",
            Direction::In => "in",
        }
    }

    /// The other direction.
    pub const fn reverse(self) -> Direction {
        match self {
            Direction::Out => Direction::In,
            Direction::In => Direction::Out,
        }
    }
}

/// Bits of [`FlowKey::flags`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyFlags;

impl KeyFlags {
    /// The packet enters from the network ([`Direction::In`]).
    pub const INBOUND: u8 = 1 << 0;
    /// The (inner) L3 header is IPv6.
    pub const IPV6: u8 = 1 << 1;
    /// The packet is tunnelled: `vni`, `outer_src` and `outer_dst` are meaningful.
    pub const TUNNEL: u8 = 1 << 2;
    /// The (inner) frame is ARP: `src`/`dst` are the sender/target protocol addresses.
    pub const ARP: u8 = 1 << 3;
    /// The outer L3 header is IPv6.
    pub const OUTER_IPV6: u8 = 1 << 4;
}

/// The exact-match key of one direction of one flow.
///
/// Every byte is a named field (no padding), so two keys are equal exactly when their fields
/// are, and the hash reads the fields as words.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(C, align(8))]
pub struct FlowKey {
    /// Inner (customer) source address, IPv4-mapped for IPv4.
    pub src: [u8; 16],
    /// Inner (customer) destination address, IPv4-mapped for IPv4.
    pub dst: [u8; 16],
    /// Outer (provider) source address of a tunnelled packet; zero otherwise.
    pub outer_src: [u8; 16],
    /// Outer (provider) destination address of a tunnelled packet; zero otherwise.
    pub outer_dst: [u8; 16],
    /// VNI / VSID of a tunnelled packet; zero otherwise.
    pub vni: u32,
    /// L4 source port; ICMP echo identifier; ICMP type<<8|code for other ICMP; 0 otherwise.
    pub src_port: u16,
    /// L4 destination port; ICMP echo identifier; 0 otherwise.
    pub dst_port: u16,
    /// The pipeline port the packet arrived on.
    pub port: u16,
    /// IP protocol (inner); 0 for ARP.
    pub proto: u8,
    /// [`KeyFlags`] bits.
    pub flags: u8,
    /// Always zero (keeps the key free of padding).
    pub reserved: u32,
}

/// Bytes of a [`FlowKey`].
pub const FLOW_KEY_LEN: usize = core::mem::size_of::<FlowKey>();
const _: () = assert!(FLOW_KEY_LEN == 80);

const K0: u64 = 0x9e37_79b9_7f4a_7c15;
const K1: u64 = 0xd6e8_feb8_6659_fd93;

#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

#[inline(always)]
fn w(b: &[u8; 16], hi: bool) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(if hi { &b[8..] } else { &b[..8] });
    u64::from_ne_bytes(x)
}

impl FlowKey {
    /// The direction recorded in the flags.
    pub fn direction(&self) -> Direction {
        if self.flags & KeyFlags::INBOUND != 0 { Direction::In } else { Direction::Out }
    }

    /// True when the packet was tunnelled.
    pub fn is_tunnel(&self) -> bool {
        self.flags & KeyFlags::TUNNEL != 0
    }

    /// True for ARP.
    pub fn is_arp(&self) -> bool {
        self.flags & KeyFlags::ARP != 0
    }

    /// Inner source address.
    pub fn src_ip(&self) -> IpAddr {
        to_ip(&self.src, self.flags & KeyFlags::IPV6 != 0)
    }

    /// Inner destination address.
    pub fn dst_ip(&self) -> IpAddr {
        to_ip(&self.dst, self.flags & KeyFlags::IPV6 != 0)
    }

    /// Outer source address, for tunnelled packets.
    pub fn outer_src_ip(&self) -> Option<IpAddr> {
        self.is_tunnel().then(|| to_ip(&self.outer_src, self.flags & KeyFlags::OUTER_IPV6 != 0))
    }

    /// Outer destination address, for tunnelled packets.
    pub fn outer_dst_ip(&self) -> Option<IpAddr> {
        self.is_tunnel().then(|| to_ip(&self.outer_dst, self.flags & KeyFlags::OUTER_IPV6 != 0))
    }

    /// The VNI, for tunnelled packets.
    pub fn vni(&self) -> Option<u32> {
        self.is_tunnel().then_some(self.vni)
    }

    /// A 64-bit hash of every field, keyed by `seed` (the table's secret, so a remote sender
    /// cannot aim collisions at one bucket). Ten folded multiplies.
    #[inline]
    pub fn hash_with(&self, seed: u64) -> u64 {
        let tail = u64::from(self.vni)
            | u64::from(self.src_port) << 32
            | u64::from(self.dst_port) << 48;
        let misc = u64::from(self.port)
            | u64::from(self.proto) << 16
            | u64::from(self.flags) << 24
            | u64::from(self.reserved) << 32;
        let a = fold(w(&self.src, false) ^ seed, w(&self.src, true) ^ K0);
        let b = fold(w(&self.dst, false) ^ K1, w(&self.dst, true) ^ seed);
        let c = fold(w(&self.outer_src, false) ^ seed, w(&self.outer_src, true) ^ K1);
        let d = fold(w(&self.outer_dst, false) ^ K0, w(&self.outer_dst, true) ^ seed);
        let e = fold(tail ^ K1, misc ^ K0 ^ seed);
        fold(a ^ c ^ e.rotate_left(17), b ^ d ^ K0).wrapping_add(e)
    }

    /// The key a reply to this packet carries when it comes back *untranslated* over the same
    /// path: source and destination swapped (inner and outer), ports swapped, direction flipped,
    /// arriving on `port`. NAT and encapsulation changes are the compiler's business; this is
    /// the plain mirror.
    pub fn mirror(&self, port: u16) -> FlowKey {
        let mut k = *self;
        core::mem::swap(&mut k.src, &mut k.dst);
        core::mem::swap(&mut k.outer_src, &mut k.outer_dst);
        core::mem::swap(&mut k.src_port, &mut k.dst_port);
        k.flags ^= KeyFlags::INBOUND;
        k.port = port;
        k
    }

    /// Set the inner source address.
    pub fn set_src_ip(&mut self, ip: IpAddr) {
        self.src = from_ip(ip);
        self.set_v6(matches!(ip, IpAddr::V6(_)));
    }

    /// Set the inner destination address.
    pub fn set_dst_ip(&mut self, ip: IpAddr) {
        self.dst = from_ip(ip);
        self.set_v6(matches!(ip, IpAddr::V6(_)));
    }

    fn set_v6(&mut self, v6: bool) {
        if v6 {
            self.flags |= KeyFlags::IPV6;
        } else {
            self.flags &= !KeyFlags::IPV6;
        }
    }

    /// Make this key tunnelled with these outer addresses and VNI (or plain, with `None`).
    pub fn set_tunnel(&mut self, tunnel: Option<(IpAddr, IpAddr, u32)>) {
        match tunnel {
            Some((s, d, vni)) => {
                self.outer_src = from_ip(s);
                self.outer_dst = from_ip(d);
                self.vni = vni;
                self.flags |= KeyFlags::TUNNEL;
                if matches!(s, IpAddr::V6(_)) {
                    self.flags |= KeyFlags::OUTER_IPV6;
                } else {
                    self.flags &= !KeyFlags::OUTER_IPV6;
                }
            }
            None => {
                self.outer_src = [0; 16];
                self.outer_dst = [0; 16];
                self.vni = 0;
                self.flags &= !(KeyFlags::TUNNEL | KeyFlags::OUTER_IPV6);
            }
        }
    }

    /// Set the direction flag.
    pub fn set_direction(&mut self, dir: Direction) {
        match dir {
            Direction::In => self.flags |= KeyFlags::INBOUND,
            Direction::Out => self.flags &= !KeyFlags::INBOUND,
        }
    }
}

impl fmt::Debug for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for FlowKey {
    /// `port=0,out,tunnel(src=10.1.1.1,dst=10.1.1.2,vni=42),proto=6,src=10.0.0.1:1234,dst=10.0.0.2:80`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "port={},{}", self.port, self.direction().name())?;
        if let (Some(s), Some(d), Some(v)) = (self.outer_src_ip(), self.outer_dst_ip(), self.vni())
        {
            write!(f, ",tunnel(src={s},dst={d},vni={v})")?;
        }
        if self.is_arp() {
            return write!(f, ",arp,src={},dst={}", self.src_ip(), self.dst_ip());
        }
        let (s, d) = (self.src_ip(), self.dst_ip());
        let sock = |ip: IpAddr, p: u16| match ip {
            IpAddr::V4(a) => format!("{a}:{p}"),
            IpAddr::V6(a) => format!("[{a}]:{p}"),
        };
        write!(
            f,
            ",proto={},src={},dst={}",
            self.proto,
            sock(s, self.src_port),
            sock(d, self.dst_port)
        )
    }
}

/// An address as the key stores it (IPv4-mapped for IPv4).
pub fn from_ip(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

fn to_ip(b: &[u8; 16], v6: bool) -> IpAddr {
    let a = Ipv6Addr::from(*b);
    match (v6, a.to_ipv4_mapped()) {
        (false, Some(v4)) => IpAddr::V4(v4),
        _ => IpAddr::V6(a),
    }
}

/// Why a frame has no flow key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyError {
    /// Neither IP nor ARP (after the tunnel, if any).
    NotIp,
    /// The header the key needs was not parsed (truncated or malformed frame).
    Incomplete,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::NotIp => f.write_str("frame is neither IP nor ARP"),
            KeyError::Incomplete => f.write_str("frame headers needed for the flow key are missing"),
        }
    }
}

fn slice16(frame: &[u8], at: usize) -> Option<[u8; 16]> {
    frame.get(at..at + 16).and_then(|s| s.try_into().ok())
}

fn v4mapped(frame: &[u8], at: usize) -> Option<[u8; 16]> {
    let s: [u8; 4] = frame.get(at..at + 4)?.try_into().ok()?;
    Some(Ipv4Addr::from(s).to_ipv6_mapped().octets())
}

fn be16(frame: &[u8], at: usize) -> Option<u16> {
    let s: [u8; 2] = frame.get(at..at + 2)?.try_into().ok()?;
    Some(u16::from_be_bytes(s))
}

/// Source and destination address of the L3 header `h` of `frame`, and whether it is IPv6.
fn l3_addrs(frame: &[u8], h: &Headers) -> Result<([u8; 16], [u8; 16], bool), KeyError> {
    match h.l3 {
        Some((Layer::Ipv4, o)) => {
            let o = usize::from(o);
            let s = v4mapped(frame, o + 12).ok_or(KeyError::Incomplete)?;
            let d = v4mapped(frame, o + 16).ok_or(KeyError::Incomplete)?;
            Ok((s, d, false))
        }
        Some((Layer::Ipv6, o)) => {
            let o = usize::from(o);
            let s = slice16(frame, o + 8).ok_or(KeyError::Incomplete)?;
            let d = slice16(frame, o + 24).ok_or(KeyError::Incomplete)?;
            Ok((s, d, true))
        }
        Some((Layer::Arp, o)) => {
            // Ethernet/IPv4 ARP: sender protocol address at 14, target at 24.
            let o = usize::from(o);
            let s = v4mapped(frame, o + 14).ok_or(KeyError::Incomplete)?;
            let d = v4mapped(frame, o + 24).ok_or(KeyError::Incomplete)?;
            Ok((s, d, false))
        }
        None if h.eth.is_some() => Err(KeyError::NotIp),
        _ => Err(KeyError::Incomplete),
    }
}

/// The flow key of a parsed frame arriving on `port` in direction `dir`.
///
/// `stack` must be the result of walking `frame` (the parse stage's `meta.stack`). The key takes
/// the innermost L3/L4 headers, and the outer addresses and VNI when the frame is tunnelled.
/// Frames that are neither IP nor ARP, or whose needed headers did not parse, get an error.
pub fn extract(frame: &[u8], stack: &Stack, port: u16, dir: Direction) -> Result<FlowKey, KeyError> {
    let inner = stack.innermost();
    let mut k = FlowKey { port, ..FlowKey::default() };
    k.set_direction(dir);
    let (src, dst, v6) = l3_addrs(frame, inner)?;
    k.src = src;
    k.dst = dst;
    if v6 {
        k.flags |= KeyFlags::IPV6;
    }
    if matches!(inner.l3, Some((Layer::Arp, _))) {
        k.flags |= KeyFlags::ARP;
    } else {
        let proto = inner.ip_proto.ok_or(KeyError::Incomplete)?;
        k.proto = proto;
        match inner.l4 {
            Some((Layer::Tcp | Layer::Udp, o)) => {
                let o = usize::from(o);
                k.src_port = be16(frame, o).ok_or(KeyError::Incomplete)?;
                k.dst_port = be16(frame, o + 2).ok_or(KeyError::Incomplete)?;
            }
            Some((Layer::Icmpv4 | Layer::Icmpv6, o)) => {
                let o = usize::from(o);
                let ty = *frame.get(o).ok_or(KeyError::Incomplete)?;
                let code = *frame.get(o + 1).ok_or(KeyError::Incomplete)?;
                let echo = matches!(
                    (inner.l4.map(|l| l.0), ty),
                    (Some(Layer::Icmpv4), 0 | 8) | (Some(Layer::Icmpv6), 128 | 129)
                );
                if echo {
                    let id = be16(frame, o + 4).ok_or(KeyError::Incomplete)?;
                    k.src_port = id;
                    k.dst_port = id;
                } else {
                    k.src_port = u16::from(ty) << 8 | u16::from(code);
                }
            }
            // Other protocols, and fragments without an L4 header: addresses and protocol only.
            _ => {}
        }
    }
    if stack.inner.is_some() {
        let (os, od, ov6) = l3_addrs(frame, &stack.outer)?;
        k.outer_src = os;
        k.outer_dst = od;
        k.vni = stack.vni.unwrap_or(0);
        k.flags |= KeyFlags::TUNNEL;
        if ov6 {
            k.flags |= KeyFlags::OUTER_IPV6;
        }
    }
    Ok(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp4(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + 4];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut f[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(20u16 + 8 + 4).to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&src);
        ip[16..20].copy_from_slice(&dst);
        let c = snic_wire::checksum::data(ip);
        ip[10..12].copy_from_slice(&(!c).to_be_bytes());
        f[34..36].copy_from_slice(&sp.to_be_bytes());
        f[36..38].copy_from_slice(&dp.to_be_bytes());
        f[38..40].copy_from_slice(&12u16.to_be_bytes());
        f
    }

    #[test]
    fn key_of_plain_udp_and_its_mirror() {
        let f = udp4([10, 0, 0, 1], [10, 0, 0, 2], 1234, 80);
        let st = Stack::parse(&f);
        let k = extract(&f, &st, 3, Direction::Out).unwrap();
        assert_eq!(k.src_ip(), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(k.dst_ip(), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
        assert_eq!((k.src_port, k.dst_port, k.proto, k.port), (1234, 80, 17, 3));
        assert_eq!(k.direction(), Direction::Out);
        assert!(!k.is_tunnel());
        let r = udp4([10, 0, 0, 2], [10, 0, 0, 1], 80, 1234);
        let rk = extract(&r, &Stack::parse(&r), 5, Direction::In).unwrap();
        assert_eq!(k.mirror(5), rk);
        assert_ne!(k.hash_with(1), rk.hash_with(1));
        assert_eq!(k.to_string(), "port=3,out,proto=17,src=10.0.0.1:1234,dst=10.0.0.2:80");
    }

    #[test]
    fn hash_depends_on_every_field_and_seed() {
        let base = FlowKey { src_port: 1, ..FlowKey::default() };
        let h = base.hash_with(7);
        let variants = [
            FlowKey { src: [1; 16], ..base },
            FlowKey { dst: [1; 16], ..base },
            FlowKey { outer_src: [1; 16], ..base },
            FlowKey { outer_dst: [1; 16], ..base },
            FlowKey { vni: 1, ..base },
            FlowKey { src_port: 2, ..base },
            FlowKey { dst_port: 1, ..base },
            FlowKey { port: 1, ..base },
            FlowKey { proto: 1, ..base },
            FlowKey { flags: 1, ..base },
        ];
        for v in variants {
            assert_ne!(v.hash_with(7), h, "{v}");
        }
        assert_ne!(base.hash_with(8), h);
    }

    #[test]
    fn non_ip_is_not_a_flow() {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
        assert_eq!(extract(&f, &Stack::parse(&f), 0, Direction::Out), Err(KeyError::NotIp));
        assert_eq!(extract(&[], &Stack::parse(&[]), 0, Direction::Out), Err(KeyError::Incomplete));
    }
}
