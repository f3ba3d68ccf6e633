//! IPv6 fixed headers (RFC 8200) and extension-header skipping.
//!
//! [`Packet`] is the 40-byte fixed header plus the payload announced by Payload Length (bytes
//! past it are ignored). [`walk_extensions`] skips Hop-by-Hop, Routing, Fragment, Destination
//! Options and AH headers and returns the upper-layer protocol and where it starts; the chain is
//! capped at [`MAX_EXT_HEADERS`]. Jumbograms (Payload Length 0 with a Jumbo option) are not
//! supported: Payload Length 0 means an empty payload.

use core::net::Ipv6Addr;

pub use crate::ipv4::IpProtocol;
use crate::{Error, Field, Result};

mod field {
    use crate::Field;
    pub const VER_TC_FLOW: Field = 0..4;
    pub const LENGTH: Field = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Field = 8..24;
    pub const DST_ADDR: Field = 24..40;
}

/// IPv6 fixed header length.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// The most extension headers [`walk_extensions`] skips before giving up with
/// [`Error::TooManyHeaders`].
pub const MAX_EXT_HEADERS: usize = 8;

fn read_addr(b: &[u8], f: Field) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[f]);
    Ipv6Addr::from(a)
}

/// A read/write view of an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wrap a buffer and [`check_len`](Self::check_len) it.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Truncated` when shorter than 40 bytes; `BadVersion` when the version is not 6;
    /// `BadTotalLen` when Payload Length runs past the buffer.
    pub fn check_len(&self) -> Result<()> {
        let n = self.buffer.as_ref().len();
        Error::need(HEADER_LEN, n)?;
        if self.version() != 6 {
            return Err(Error::BadVersion { got: self.version() });
        }
        let pl = usize::from(self.payload_len());
        if HEADER_LEN + pl > n {
            return Err(Error::BadTotalLen { got: pl });
        }
        Ok(())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Length of the fixed header (always [`HEADER_LEN`]).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    fn first_word(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Version field (6 for a valid packet).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Traffic Class (DSCP << 2 | ECN).
    pub fn traffic_class(&self) -> u8 {
        (self.first_word() >> 20) as u8
    }

    /// DSCP, the high 6 bits of the Traffic Class.
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    /// ECN codepoint, the low 2 bits of the Traffic Class (see [`crate::ipv4::ecn`]).
    pub fn ecn(&self) -> u8 {
        self.traffic_class() & 0x03
    }

    /// Flow Label (20 bits).
    pub fn flow_label(&self) -> u32 {
        self.first_word() & 0x000f_ffff
    }

    /// Payload Length: bytes after the fixed header, extension headers included.
    pub fn payload_len(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[field::LENGTH.start], b[field::LENGTH.start + 1]])
    }

    /// Next Header of the fixed header.
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol(self.buffer.as_ref()[field::NXT_HDR])
    }

    /// Hop Limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        read_addr(self.buffer.as_ref(), field::SRC_ADDR)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        read_addr(self.buffer.as_ref(), field::DST_ADDR)
    }

    /// The payload (extension headers included), up to Payload Length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + usize::from(self.payload_len())]
    }

    /// Skip the extension headers of the payload (see [`walk_extensions`]). The returned
    /// `offset` counts from the start of the payload; add [`HEADER_LEN`] for an offset from the
    /// start of the IPv6 header.
    pub fn extensions(&self) -> Result<ExtHeaders> {
        walk_extensions(self.next_header(), self.payload())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_first_word(&mut self, w: u32) {
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&w.to_be_bytes());
    }

    /// Set the version (low 4 bits used).
    pub fn set_version(&mut self, v: u8) {
        let w = (self.first_word() & 0x0fff_ffff) | (u32::from(v & 0x0f) << 28);
        self.set_first_word(w);
    }

    /// Set the Traffic Class.
    pub fn set_traffic_class(&mut self, tc: u8) {
        let w = (self.first_word() & 0xf00f_ffff) | (u32::from(tc) << 20);
        self.set_first_word(w);
    }

    /// Set the ECN codepoint (low 2 bits used), keeping DSCP. IPv6 has no header checksum, so
    /// this is all CE marking needs.
    pub fn set_ecn(&mut self, ecn: u8) {
        let tc = (self.traffic_class() & 0xfc) | (ecn & 0x03);
        self.set_traffic_class(tc);
    }

    /// Set the Flow Label (low 20 bits used).
    pub fn set_flow_label(&mut self, fl: u32) {
        let w = (self.first_word() & 0xfff0_0000) | (fl & 0x000f_ffff);
        self.set_first_word(w);
    }

    /// Set Payload Length.
    pub fn set_payload_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes());
    }

    /// Set Next Header.
    pub fn set_next_header(&mut self, v: IpProtocol) {
        self.buffer.as_mut()[field::NXT_HDR] = v.0;
    }

    /// Set Hop Limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }

    /// Set the source address.
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    /// Set the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The fields of an IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// Next Header of the fixed header.
    pub next_header: IpProtocol,
    /// Payload Length (extension headers included).
    pub payload_len: usize,
    /// Hop Limit.
    pub hop_limit: u8,
    /// Traffic Class (DSCP << 2 | ECN).
    pub traffic_class: u8,
    /// Flow Label (20 bits).
    pub flow_label: u32,
}

impl Repr {
    /// Read the fixed header (lengths and version checked).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: usize::from(packet.payload_len()),
            hop_limit: packet.hop_limit(),
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
        })
    }

    /// Fixed header length (40).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header plus payload.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Write the fixed header. Payload Length saturates at 65535; the flow label is masked to
    /// 20 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_first_word(0);
        packet.set_version(6);
        packet.set_traffic_class(self.traffic_class);
        packet.set_flow_label(self.flow_label);
        packet.set_payload_len(u16::try_from(self.payload_len).unwrap_or(u16::MAX));
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
    }
}

/// What a Fragment header said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragmentInfo {
    /// Fragment offset in bytes.
    pub offset: u16,
    /// More Fragments flag.
    pub more: bool,
    /// Identification.
    pub ident: u32,
}

/// The result of walking an extension-header chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExtHeaders {
    /// The protocol after the last extension header (TCP, UDP, ICMPv6, ESP, No Next Header...).
    pub next_header: IpProtocol,
    /// Offset of the upper-layer header from the start of the IPv6 payload.
    pub offset: usize,
    /// Number of extension headers skipped.
    pub count: u8,
    /// The Fragment header, if there was one. When its offset is not zero the bytes at
    /// `offset` are the middle of the upper-layer message, not its header.
    pub fragment: Option<FragmentInfo>,
}

/// True for the protocols [`walk_extensions`] skips.
pub const fn is_extension(p: IpProtocol) -> bool {
    matches!(p.0, 0 | 43 | 44 | 51 | 60)
}

/// Skip the extension headers at the start of `payload` (the bytes after the fixed header),
/// starting with `first` (the fixed header's Next Header). Hop-by-Hop (0), Routing (43),
/// Fragment (44), Destination Options (60) and AH (51) are skipped; anything else ends the walk.
///
/// Errors: `Truncated` when a header runs past `payload`; `TooManyHeaders` after
/// [`MAX_EXT_HEADERS`]; `BadValue { field: "hop_by_hop" }` for a Hop-by-Hop header that is not
/// first (RFC 8200 section 4.1).
pub fn walk_extensions(first: IpProtocol, payload: &[u8]) -> Result<ExtHeaders> {
    let mut r = ExtHeaders { next_header: first, offset: 0, count: 0, fragment: None };
    while is_extension(r.next_header) {
        if usize::from(r.count) >= MAX_EXT_HEADERS {
            return Err(Error::TooManyHeaders);
        }
        if r.next_header == IpProtocol::HOPOPT && r.count != 0 {
            return Err(Error::BadValue { field: "hop_by_hop" });
        }
        let got = payload.len();
        let hdr = payload.get(r.offset..).unwrap_or(&[]);
        let (&nh, rest) = hdr.split_first().ok_or(Error::Truncated { need: r.offset + 2, got })?;
        let &len_byte = rest.first().ok_or(Error::Truncated { need: r.offset + 2, got })?;
        let len = match r.next_header {
            IpProtocol::IPV6_FRAG => 8,
            IpProtocol::AH => (usize::from(len_byte) + 2) * 4,
            _ => (usize::from(len_byte) + 1) * 8,
        };
        Error::need(r.offset + len, got)?;
        if r.next_header == IpProtocol::IPV6_FRAG {
            let off_flags = u16::from_be_bytes([hdr[2], hdr[3]]);
            r.fragment = Some(FragmentInfo {
                offset: off_flags & 0xfff8,
                more: off_flags & 1 != 0,
                ident: u32::from_be_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]),
            });
        }
        r.next_header = IpProtocol(nh);
        r.offset += len;
        r.count += 1;
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    // scapy: IPv6(src="2001:db8::1",dst="2001:db8::2",tc=0xb9,fl=0x12345,hlim=64)
    //        /UDP(sport=1000,dport=2000)/b"hi"
    static PKT: &str = "6b912345000a114020010db800000000000000000000000120010db8000000000000000000000002\
                        03e807d0000a30446869";

    fn repr() -> Repr {
        Repr {
            src_addr: "2001:db8::1".parse().unwrap(),
            dst_addr: "2001:db8::2".parse().unwrap(),
            next_header: IpProtocol::UDP,
            payload_len: 10,
            hop_limit: 64,
            traffic_class: 0xb9,
            flow_label: 0x12345,
        }
    }

    #[test]
    fn test_parse() {
        let b = hex(PKT);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xb9);
        assert_eq!(p.dscp(), 46);
        assert_eq!(p.ecn(), 1);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload(), &b[40..]);
        assert_eq!(Repr::parse(&p).unwrap(), repr());
        let e = p.extensions().unwrap();
        assert_eq!(
            e,
            ExtHeaders { next_header: IpProtocol::UDP, offset: 0, count: 0, fragment: None }
        );
    }

    #[test]
    fn test_emit() {
        let want = hex(PKT);
        let mut b = vec![0xffu8; want.len()];
        let mut p = Packet::new_unchecked(&mut b[..]);
        repr().emit(&mut p);
        p.payload_mut().copy_from_slice(&want[40..]);
        assert_eq!(b, want);
    }

    #[test]
    fn bad_version_and_lengths() {
        let mut b = hex(PKT);
        assert_eq!(
            Packet::new_checked(&b[..39]).unwrap_err(),
            Error::Truncated { need: 40, got: 39 }
        );
        assert_eq!(Packet::new_checked(&b[..49]).unwrap_err(), Error::BadTotalLen { got: 10 });
        b[0] = 0x4b;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::BadVersion { got: 4 });
    }

    #[test]
    fn ecn_setter() {
        let mut b = hex(PKT);
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_ecn(crate::ipv4::ecn::CE);
        assert_eq!(p.traffic_class(), 0xbb);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(&b[..4], &[0x6b, 0xb1, 0x23, 0x45]);
    }

    // scapy: IPv6(src="::1",dst="::2")/IPv6ExtHdrHopByHop()/IPv6ExtHdrRouting()
    //   /IPv6ExtHdrDestOpt()/IPv6ExtHdrFragment(offset=0,m=1,id=0xdeadbeef)/TCP()
    static EXT: &str = "60000000003400400000000000000000000000000000000100000000000000000000000000000002\
                        2b000104000000003c000000000000002c0001040000000006000001deadbeef0014005000000000\
                        00000000500220008f7c0000";

    #[test]
    fn walk_chain() {
        let b = hex(EXT);
        let p = Packet::new_checked(&b[..]).unwrap();
        let e = p.extensions().unwrap();
        assert_eq!(e.next_header, IpProtocol::TCP);
        assert_eq!(e.count, 4);
        assert_eq!(e.offset, 32);
        assert_eq!(e.fragment, Some(FragmentInfo { offset: 0, more: true, ident: 0xdeadbeef }));
        assert_eq!(&p.payload()[e.offset..e.offset + 4], &[0x00, 0x14, 0x00, 0x50]);
    }

    #[test]
    fn ah_length_in_4_byte_units() {
        // AH: next header UDP, payload len 4 -> (4 + 2) * 4 = 24 bytes.
        let mut pl = [0u8; 32];
        pl[0] = 17;
        pl[1] = 4;
        let e = walk_extensions(IpProtocol::AH, &pl).unwrap();
        assert_eq!((e.next_header, e.offset), (IpProtocol::UDP, 24));
        assert_eq!(
            walk_extensions(IpProtocol::AH, &pl[..23]).unwrap_err(),
            Error::Truncated { need: 24, got: 23 }
        );
    }

    #[test]
    fn chain_errors() {
        // Nine Destination Options headers, each 8 bytes, pointing at the next.
        let mut pl = [0u8; 80];
        for h in pl.chunks_exact_mut(8) {
            h[0] = 60;
        }
        assert_eq!(walk_extensions(IpProtocol::IPV6_OPTS, &pl).unwrap_err(), Error::TooManyHeaders);
        // Header length running past the payload.
        assert_eq!(
            walk_extensions(IpProtocol::IPV6_ROUTE, &[6, 1, 0, 0, 0, 0, 0, 0]).unwrap_err(),
            Error::Truncated { need: 16, got: 8 }
        );
        // No room for the next-header/length bytes.
        assert_eq!(
            walk_extensions(IpProtocol::HOPOPT, &[6]).unwrap_err(),
            Error::Truncated { need: 2, got: 1 }
        );
        // Hop-by-Hop after another header.
        let mut pl = [0u8; 16];
        pl[0] = 0;
        assert_eq!(
            walk_extensions(IpProtocol::IPV6_OPTS, &pl).unwrap_err(),
            Error::BadValue { field: "hop_by_hop" }
        );
        // Nothing to skip.
        assert_eq!(walk_extensions(IpProtocol::TCP, &[]).unwrap().offset, 0);
    }
}
