//! IPv4 headers (RFC 791) with options, DSCP/ECN (RFC 2474, RFC 3168), fragmentation fields and
//! the header checksum; and [`IpProtocol`], the protocol / next-header number shared with IPv6.
//!
//! `check_len` accepts a buffer that holds the whole header (IHL 5..=15) and the whole datagram
//! announced by Total Length; bytes past Total Length (Ethernet padding) are ignored by
//! [`Packet::payload`]. `emit` zeroes the checksum; call [`Packet::fill_checksum`] after it (see
//! [`crate::checksum`] for the convention).

use core::fmt;
use core::net::Ipv4Addr;

use crate::{Error, Field, Result, checksum};

/// An IP protocol number (IPv4 Protocol, IPv6 Next Header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct IpProtocol(pub u8);

impl IpProtocol {
    /// IPv6 Hop-by-Hop Options, 0.
    pub const HOPOPT: IpProtocol = IpProtocol(0);
    /// ICMP, 1.
    pub const ICMP: IpProtocol = IpProtocol(1);
    /// IGMP, 2.
    pub const IGMP: IpProtocol = IpProtocol(2);
    /// IP-in-IP, 4.
    pub const IPIP: IpProtocol = IpProtocol(4);
    /// TCP, 6.
    pub const TCP: IpProtocol = IpProtocol(6);
    /// UDP, 17.
    pub const UDP: IpProtocol = IpProtocol(17);
    /// IPv6 encapsulation, 41.
    pub const IPV6: IpProtocol = IpProtocol(41);
    /// IPv6 Routing header, 43.
    pub const IPV6_ROUTE: IpProtocol = IpProtocol(43);
    /// IPv6 Fragment header, 44.
    pub const IPV6_FRAG: IpProtocol = IpProtocol(44);
    /// GRE (and NVGRE), 47.
    pub const GRE: IpProtocol = IpProtocol(47);
    /// Encapsulating Security Payload, 50.
    pub const ESP: IpProtocol = IpProtocol(50);
    /// Authentication Header, 51.
    pub const AH: IpProtocol = IpProtocol(51);
    /// ICMPv6, 58.
    pub const ICMPV6: IpProtocol = IpProtocol(58);
    /// IPv6 No Next Header, 59.
    pub const IPV6_NONXT: IpProtocol = IpProtocol(59);
    /// IPv6 Destination Options, 60.
    pub const IPV6_OPTS: IpProtocol = IpProtocol(60);
}

impl From<u8> for IpProtocol {
    fn from(v: u8) -> Self {
        IpProtocol(v)
    }
}

impl From<IpProtocol> for u8 {
    fn from(v: IpProtocol) -> Self {
        v.0
    }
}

impl fmt::Display for IpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            IpProtocol::ICMP => write!(f, "ICMP"),
            IpProtocol::TCP => write!(f, "TCP"),
            IpProtocol::UDP => write!(f, "UDP"),
            IpProtocol::GRE => write!(f, "GRE"),
            IpProtocol::ICMPV6 => write!(f, "ICMPv6"),
            IpProtocol(v) => write!(f, "{v}"),
        }
    }
}

/// ECN codepoints (RFC 3168), the low two bits of the TOS / Traffic Class byte.
pub mod ecn {
    /// Not ECN-Capable Transport.
    pub const NOT_ECT: u8 = 0b00;
    /// ECN-Capable Transport (1).
    pub const ECT1: u8 = 0b01;
    /// ECN-Capable Transport (0).
    pub const ECT0: u8 = 0b10;
    /// Congestion Experienced.
    pub const CE: u8 = 0b11;
}

mod field {
    use crate::Field;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC_ADDR: Field = 12..16;
    pub const DST_ADDR: Field = 16..20;
}

/// Minimum IPv4 header length (IHL 5).
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// Maximum IPv4 header length (IHL 15).
pub const MAX_HEADER_LEN: usize = 60;

/// Maximum length of IPv4 options.
pub const MAX_OPTIONS_LEN: usize = MAX_HEADER_LEN - HEADER_LEN;

fn read_u16(b: &[u8], f: Field) -> u16 {
    u16::from_be_bytes([b[f.start], b[f.start + 1]])
}

/// One IPv4 option, as read by [`Options`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ipv4Option<'a> {
    /// Type 0: End of Option List (iteration stops after it).
    EndOfList,
    /// Type 1: No Operation.
    NoOperation,
    /// Any other option: its type byte (copied flag, class, number) and the data after the
    /// type and length bytes.
    Other {
        /// The option type byte.
        kind: u8,
        /// The option data.
        data: &'a [u8],
    },
}

/// Iterator over IPv4 options. Yields `Err(BadOption)` once, then stops, when a length byte is
/// missing, below 2, or runs past the options; stops after End of Option List.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    rest: &'a [u8],
}

impl<'a> Options<'a> {
    /// Iterate over raw option bytes.
    pub fn new(bytes: &'a [u8]) -> Options<'a> {
        Options { rest: bytes }
    }
}

impl<'a> Iterator for Options<'a> {
    type Item = Result<Ipv4Option<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let (&kind, after) = self.rest.split_first()?;
        match kind {
            0 => {
                self.rest = &[];
                return Some(Ok(Ipv4Option::EndOfList));
            }
            1 => {
                self.rest = after;
                return Some(Ok(Ipv4Option::NoOperation));
            }
            _ => {}
        }
        let len = after.first().map(|&l| usize::from(l));
        match len {
            Some(len) if len >= 2 && len <= self.rest.len() => {
                let data = &self.rest[2..len];
                self.rest = &self.rest[len..];
                Some(Ok(Ipv4Option::Other { kind, data }))
            }
            _ => {
                self.rest = &[];
                Some(Err(Error::BadOption))
            }
        }
    }
}

/// A read/write view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap a buffer without checking it; accessors may panic if it is malformed.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wrap a buffer and [`check_len`](Self::check_len) it.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Check that the buffer can be read as IPv4:
    /// - `Truncated` if it is shorter than 20 bytes or than the IHL-announced header;
    /// - `BadVersion` if the version is not 4;
    /// - `BadHeaderLen` if IHL < 5;
    /// - `BadTotalLen` if Total Length is below the header length or past the buffer.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        Error::need(HEADER_LEN, b.len())?;
        if self.version() != 4 {
            return Err(Error::BadVersion { got: self.version() });
        }
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return Err(Error::BadHeaderLen { got: hl });
        }
        Error::need(hl, b.len())?;
        let tl = usize::from(self.total_len());
        if tl < hl || tl > b.len() {
            return Err(Error::BadTotalLen { got: tl });
        }
        Ok(())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version field (4 for a valid packet).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL * 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// The whole TOS byte (DSCP << 2 | ECN).
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }

    /// Differentiated Services Code Point (6 bits).
    pub fn dscp(&self) -> u8 {
        self.tos() >> 2
    }

    /// ECN codepoint (2 bits, see [`ecn`]).
    pub fn ecn(&self) -> u8 {
        self.tos() & 0x03
    }

    /// Total Length: header plus payload, in bytes.
    pub fn total_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Identification.
    pub fn ident(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::IDENT)
    }

    /// Don't Fragment flag.
    pub fn dont_frag(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLG_OFF) & 0x4000 != 0
    }

    /// More Fragments flag.
    pub fn more_frags(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLG_OFF) & 0x2000 != 0
    }

    /// The reserved (evil) bit, which must be zero.
    pub fn reserved_flag(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLG_OFF) & 0x8000 != 0
    }

    /// Fragment offset in bytes (the field is in 8-byte units; this is field * 8).
    pub fn frag_offset(&self) -> u16 {
        (read_u16(self.buffer.as_ref(), field::FLG_OFF) & 0x1fff) << 3
    }

    /// True when this is a fragment (MF set or a non-zero offset).
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    /// Time To Live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol of the payload.
    pub fn protocol(&self) -> IpProtocol {
        IpProtocol(self.buffer.as_ref()[field::PROTOCOL])
    }

    /// Header checksum as stored.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// The option bytes (between the fixed header and IHL * 4), padding included.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// Iterate over the options.
    pub fn options_iter(&self) -> Options<'_> {
        Options::new(self.options())
    }

    /// True when the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::data(&self.buffer.as_ref()[..self.header_len()]) == 0xffff
    }

    /// The payload: from the end of the header to Total Length (Ethernet padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn write_u16(&mut self, f: Field, v: u16) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes());
    }

    /// Set version (low 4 bits used).
    pub fn set_version(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0f) | (v << 4);
    }

    /// Set the header length in bytes (stored as IHL = len / 4).
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xf0) | ((len / 4) as u8 & 0x0f);
    }

    /// Set the whole TOS byte.
    pub fn set_tos(&mut self, tos: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = tos;
    }

    /// Set DSCP (low 6 bits used), keeping ECN.
    pub fn set_dscp(&mut self, dscp: u8) {
        let tos = (self.tos() & 0x03) | (dscp << 2);
        self.set_tos(tos);
    }

    /// Set the ECN codepoint (low 2 bits used), keeping DSCP. Does not touch the checksum; see
    /// [`mark_ce`](Self::mark_ce) for the incremental version.
    pub fn set_ecn(&mut self, ecn: u8) {
        let tos = (self.tos() & 0xfc) | (ecn & 0x03);
        self.set_tos(tos);
    }

    /// Mark Congestion Experienced if the packet is ECN-capable, updating the checksum
    /// incrementally. Returns true when the packet now carries CE, false for Not-ECT packets
    /// (which a congested queue must drop instead).
    pub fn mark_ce(&mut self) -> bool {
        match self.ecn() {
            ecn::NOT_ECT => false,
            ecn::CE => true,
            _ => {
                let old = u16::from_be_bytes([self.buffer.as_ref()[0], self.tos()]);
                self.set_ecn(ecn::CE);
                let new = u16::from_be_bytes([self.buffer.as_ref()[0], self.tos()]);
                let c = checksum::update16(self.checksum(), old, new);
                self.set_checksum(c);
                true
            }
        }
    }

    /// Set Total Length.
    pub fn set_total_len(&mut self, v: u16) {
        self.write_u16(field::LENGTH, v);
    }

    /// Set Identification.
    pub fn set_ident(&mut self, v: u16) {
        self.write_u16(field::IDENT, v);
    }

    /// Set flags and fragment offset at once. `frag_offset` is in bytes and is divided by 8.
    pub fn set_flags_frag(&mut self, dont_frag: bool, more_frags: bool, frag_offset: u16) {
        let v = (u16::from(dont_frag) << 14)
            | (u16::from(more_frags) << 13)
            | ((frag_offset >> 3) & 0x1fff);
        self.write_u16(field::FLG_OFF, v);
    }

    /// Set TTL.
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }

    /// Decrement TTL (saturating at 0), updating the checksum incrementally. Returns the new TTL.
    pub fn decrement_ttl(&mut self) -> u8 {
        let old = u16::from_be_bytes([self.ttl(), self.protocol().0]);
        let ttl = self.ttl().saturating_sub(1);
        self.set_ttl(ttl);
        let new = u16::from_be_bytes([ttl, self.protocol().0]);
        let c = checksum::update16(self.checksum(), old, new);
        self.set_checksum(c);
        ttl
    }

    /// Set Protocol.
    pub fn set_protocol(&mut self, v: IpProtocol) {
        self.buffer.as_mut()[field::PROTOCOL] = v.0;
    }

    /// Set the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.write_u16(field::CHECKSUM, v);
    }

    /// Set the source address (checksum not updated).
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    /// Set the destination address (checksum not updated).
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// The option bytes, writable.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[HEADER_LEN..hl]
    }

    /// Compute and store the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let c = !checksum::data(&self.buffer.as_ref()[..hl]);
        self.set_checksum(c);
    }

    /// The payload (to Total Length), writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        let tl = usize::from(self.total_len());
        &mut self.buffer.as_mut()[hl..tl]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The fields of an IPv4 header. Options are carried inline (no allocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Protocol of the payload.
    pub next_header: IpProtocol,
    /// Payload length (Total Length minus header length).
    pub payload_len: usize,
    /// Time To Live.
    pub hop_limit: u8,
    /// DSCP, 6 bits.
    pub dscp: u8,
    /// ECN codepoint, 2 bits.
    pub ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment.
    pub dont_frag: bool,
    /// More Fragments.
    pub more_frags: bool,
    /// Fragment offset in bytes (a multiple of 8).
    pub frag_offset: u16,
    options: [u8; MAX_OPTIONS_LEN],
    options_len: u8,
}

impl Repr {
    /// A header with no options, TTL 64, DF set, DSCP/ECN 0, ident 0.
    pub const fn new(
        src_addr: Ipv4Addr,
        dst_addr: Ipv4Addr,
        next_header: IpProtocol,
        payload_len: usize,
    ) -> Repr {
        Repr {
            src_addr,
            dst_addr,
            next_header,
            payload_len,
            hop_limit: 64,
            dscp: 0,
            ecn: 0,
            ident: 0,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            options: [0; MAX_OPTIONS_LEN],
            options_len: 0,
        }
    }

    /// The option bytes as parsed or set (a multiple of 4 when parsed).
    pub fn options(&self) -> &[u8] {
        &self.options[..usize::from(self.options_len)]
    }

    /// Set the option bytes. `BadOption` if longer than [`MAX_OPTIONS_LEN`]. `emit` pads them
    /// with zero (End of Option List) bytes to a multiple of 4.
    pub fn set_options(&mut self, opts: &[u8]) -> Result<()> {
        if opts.len() > MAX_OPTIONS_LEN {
            return Err(Error::BadOption);
        }
        self.options = [0; MAX_OPTIONS_LEN];
        self.options[..opts.len()].copy_from_slice(opts);
        self.options_len = opts.len() as u8;
        Ok(())
    }

    /// Read a packet's header. Checks lengths and version (as `check_len`) and that the reserved
    /// flag is clear (`BadFlags`). Does not verify the checksum.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        if packet.reserved_flag() {
            return Err(Error::BadFlags);
        }
        let mut r = Repr::new(
            packet.src_addr(),
            packet.dst_addr(),
            packet.protocol(),
            usize::from(packet.total_len()) - packet.header_len(),
        );
        r.hop_limit = packet.ttl();
        r.dscp = packet.dscp();
        r.ecn = packet.ecn();
        r.ident = packet.ident();
        r.dont_frag = packet.dont_frag();
        r.more_frags = packet.more_frags();
        r.frag_offset = packet.frag_offset();
        r.set_options(packet.options())?;
        Ok(r)
    }

    /// Header length this emits: 20 plus the options rounded up to 4.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN + (self.options_len as usize).div_ceil(4) * 4
    }

    /// Header plus payload length.
    pub const fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len
    }

    /// Write the header (checksum zeroed; call [`Packet::fill_checksum`]). The buffer must hold
    /// at least `header_len()` bytes. Total Length saturates at 65535.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        let hl = self.header_len();
        packet.set_version(4);
        packet.set_header_len(hl);
        packet.set_tos((self.dscp << 2) | (self.ecn & 0x03));
        packet.set_total_len(u16::try_from(self.buffer_len()).unwrap_or(u16::MAX));
        packet.set_ident(self.ident);
        packet.set_flags_frag(self.dont_frag, self.more_frags, self.frag_offset);
        packet.set_ttl(self.hop_limit);
        packet.set_protocol(self.next_header);
        packet.set_checksum(0);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        let opts = packet.options_mut();
        let n = usize::from(self.options_len);
        opts[..n].copy_from_slice(self.options());
        opts[n..].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // scapy: IP(src="10.0.0.1", dst="10.0.0.2", id=0x1234, flags="DF", ttl=64, tos=0xb9,
    //           options=[IPOption_RR(routers=["1.2.3.4"])])/UDP(sport=1000,dport=2000)/b"hi"
    //        (IHL 7: an 8-byte Record Route option with one slot, padded)
    static PACKET: [u8; 38] = [
        0x47, 0xb9, 0x00, 0x26, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0x00, 0xcd, 0x0a, 0x00, 0x00,
        0x01, 0x0a, 0x00, 0x00, 0x02, 0x07, 0x07, 0x04, 0x01, 0x02, 0x03, 0x04, 0x00, 0x03, 0xe8,
        0x07, 0xd0, 0x00, 0x0a, 0x77, 0xb6, 0x68, 0x69,
    ];

    fn packet_bytes() -> [u8; 38] {
        PACKET
    }

    fn repr() -> Repr {
        let mut r =
            Repr::new(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2), IpProtocol::UDP, 10);
        r.dscp = 0xb9 >> 2;
        r.ecn = 0x01;
        r.ident = 0x1234;
        r.set_options(&[0x07, 0x07, 0x04, 0x01, 0x02, 0x03, 0x04, 0x00]).unwrap();
        r
    }

    #[test]
    fn test_parse() {
        let b = packet_bytes();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 28);
        assert_eq!(p.total_len(), 38);
        assert_eq!(p.dscp(), 46);
        assert_eq!(p.ecn(), ecn::ECT1);
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), IpProtocol::UDP);
        assert_eq!(p.options(), &PACKET[20..28]);
        assert_eq!(p.payload(), &PACKET[28..38]);
        assert!(p.verify_checksum());
        assert_eq!(Repr::parse(&p).unwrap(), repr());
    }

    #[test]
    fn test_emit() {
        let r = repr();
        assert_eq!(r.header_len(), 28);
        assert_eq!(r.buffer_len(), 38);
        let mut b = [0xffu8; 38];
        let mut p = Packet::new_unchecked(&mut b[..]);
        r.emit(&mut p);
        p.payload_mut().copy_from_slice(&PACKET[28..]);
        p.fill_checksum();
        assert_eq!(b, packet_bytes());
    }

    #[test]
    fn known_checksum() {
        // fill_checksum reproduces the scapy-computed checksum of the packet above.
        let mut b = packet_bytes();
        b[10] = 0xaa;
        b[11] = 0x55;
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert_eq!(p.checksum(), 0x00cd);
    }

    #[test]
    fn options_padded_on_emit() {
        let mut r = repr();
        r.set_options(&[0x01]).unwrap(); // a single NOP
        assert_eq!(r.header_len(), 24);
        let mut b = [0xffu8; 34];
        r.emit(&mut Packet::new_unchecked(&mut b[..]));
        assert_eq!(&b[20..24], &[0x01, 0, 0, 0]);
        assert_eq!(b[0], 0x46);
        assert!(r.set_options(&[0u8; 41]).is_err());
    }

    #[test]
    fn options_iterator() {
        let b = packet_bytes();
        let p = Packet::new_checked(&b[..]).unwrap();
        let opts: Vec<_> = p.options_iter().collect::<Result<_>>().unwrap();
        assert_eq!(
            opts,
            vec![
                Ipv4Option::Other { kind: 7, data: &[0x04, 0x01, 0x02, 0x03, 0x04] },
                Ipv4Option::EndOfList
            ]
        );
        let mut it = Options::new(&[1, 0x44, 1]);
        assert_eq!(it.next(), Some(Ok(Ipv4Option::NoOperation)));
        assert_eq!(it.next(), Some(Err(Error::BadOption)));
        assert_eq!(it.next(), None);
        assert_eq!(Options::new(&[0x83, 9, 0, 0]).next(), Some(Err(Error::BadOption)));
        assert_eq!(Options::new(&[0x44]).next(), Some(Err(Error::BadOption)));
    }

    #[test]
    fn bad_version() {
        let mut b = packet_bytes();
        b[0] = 0x68;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::BadVersion { got: 6 });
    }

    #[test]
    fn bad_ihl() {
        let mut b = packet_bytes();
        b[0] = 0x44;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::BadHeaderLen { got: 16 });
        b[0] = 0x4f; // 60-byte header in a 38-byte buffer
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            Error::Truncated { need: 60, got: 38 }
        );
    }

    #[test]
    fn test_total_len_overflow() {
        let mut b = packet_bytes();
        b[3] = 39;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::BadTotalLen { got: 39 });
        b[3] = 27; // below the 28-byte header
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::BadTotalLen { got: 27 });
    }

    #[test]
    fn truncated() {
        let b = packet_bytes();
        assert_eq!(
            Packet::new_checked(&b[..19]).unwrap_err(),
            Error::Truncated { need: 20, got: 19 }
        );
    }

    #[test]
    fn padding_past_total_len_is_ignored() {
        let mut b = [0u8; 60];
        b[..38].copy_from_slice(&packet_bytes());
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload().len(), 10);
    }

    #[test]
    fn reserved_flag_rejected() {
        let mut b = packet_bytes();
        b[6] |= 0x80;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap_err(), Error::BadFlags);
    }

    #[test]
    fn bad_checksum_detected() {
        let mut b = packet_bytes();
        b[8] = 63;
        assert!(!Packet::new_checked(&b[..]).unwrap().verify_checksum());
    }

    #[test]
    fn mark_ce_and_ttl_keep_checksum_valid() {
        let mut b = packet_bytes();
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        assert!(p.mark_ce());
        assert_eq!(p.ecn(), ecn::CE);
        assert_eq!(p.dscp(), 46);
        assert!(p.verify_checksum());
        assert_eq!(p.decrement_ttl(), 63);
        assert!(p.verify_checksum());
        p.set_ecn(ecn::NOT_ECT);
        assert!(!p.mark_ce());
    }

    #[test]
    fn fragment_fields() {
        let mut b = packet_bytes();
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_flags_frag(false, true, 1480);
        assert!(p.more_frags() && !p.dont_frag());
        assert_eq!(p.frag_offset(), 1480);
        assert!(p.is_fragment());
        assert_eq!(&b[6..8], &[0x20, 0xb9]);
    }
}
