//! UDP datagrams (RFC 768): ports, length and the checksum over the IPv4/IPv6 pseudo-header.
//!
//! The view's buffer is the IP payload; the UDP Length field must fit in it (bytes past it are
//! ignored). `emit` zeroes the checksum; call [`Packet::fill_checksum`] once the payload is in
//! place. A zero checksum means "none" over IPv4 and is invalid over IPv6 (RFC 8200 section 8.1).

use core::net::IpAddr;

use crate::{Error, Field, Result, checksum};

mod field {
    use crate::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
}

/// UDP header length.
pub const HEADER_LEN: usize = field::CHECKSUM.end;

/// The IP protocol number of UDP.
pub const PROTOCOL: u8 = 17;

fn read_u16(b: &[u8], f: Field) -> u16 {
    u16::from_be_bytes([b[f.start], b[f.start + 1]])
}

/// A read/write view of a UDP datagram.
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

    /// `Truncated` when shorter than 8 bytes; `BadTotalLen` when the Length field is below 8 or
    /// past the buffer.
    pub fn check_len(&self) -> Result<()> {
        let n = self.buffer.as_ref().len();
        Error::need(HEADER_LEN, n)?;
        let l = usize::from(self.len());
        if l < HEADER_LEN || l > n {
            return Err(Error::BadTotalLen { got: l });
        }
        Ok(())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Header length (always [`HEADER_LEN`]).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Length field: header plus payload.
    pub fn len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// True when the Length field says there is no payload.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    /// Checksum as stored.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The payload, up to the Length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }

    /// True when the checksum verifies against the pseudo-header of `src`/`dst`. A zero checksum
    /// over IPv4 means "not computed" and verifies; over IPv6 it does not.
    pub fn verify_checksum(&self, src: &IpAddr, dst: &IpAddr) -> bool {
        if self.checksum() == 0 {
            return src.is_ipv4();
        }
        let msg = &self.buffer.as_ref()[..usize::from(self.len())];
        checksum::upper_layer(src, dst, PROTOCOL, msg) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn write_u16(&mut self, f: Field, v: u16) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes());
    }

    /// Set the source port.
    pub fn set_src_port(&mut self, v: u16) {
        self.write_u16(field::SRC_PORT, v);
    }

    /// Set the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        self.write_u16(field::DST_PORT, v);
    }

    /// Set the Length field.
    pub fn set_len(&mut self, v: u16) {
        self.write_u16(field::LENGTH, v);
    }

    /// Set the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.write_u16(field::CHECKSUM, v);
    }

    /// Compute and store the checksum over the pseudo-header, header and payload (up to the
    /// Length field). A computed zero is stored as 0xffff.
    pub fn fill_checksum(&mut self, src: &IpAddr, dst: &IpAddr) {
        self.set_checksum(0);
        let msg = &self.buffer.as_ref()[..usize::from(self.len())];
        let c = checksum::upper_layer(src, dst, PROTOCOL, msg);
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    fn adjust_checksum(&mut self, f: impl FnOnce(u16) -> u16) {
        if self.checksum() == 0 {
            // No checksum (IPv4): nothing to keep in step.
            return;
        }
        let c = f(self.checksum());
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// Rewrite the source port and update the checksum incrementally (RFC 1624).
    pub fn rewrite_src_port(&mut self, port: u16) {
        let old = self.src_port();
        self.set_src_port(port);
        self.adjust_checksum(|c| checksum::update16(c, old, port));
    }

    /// Rewrite the destination port and update the checksum incrementally (RFC 1624).
    pub fn rewrite_dst_port(&mut self, port: u16) {
        let old = self.dst_port();
        self.set_dst_port(port);
        self.adjust_checksum(|c| checksum::update16(c, old, port));
    }

    /// Update the checksum for a change of one pseudo-header address (the IP header's source or
    /// destination is being rewritten from `old` to `new`, as in NAT or header transposition).
    pub fn adjust_checksum_for_addr(&mut self, old: &core::net::IpAddr, new: &core::net::IpAddr) {
        self.adjust_checksum(|c| checksum::update_ip_addr(c, old, new));
    }

    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let l = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..l]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The fields of a UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length (Length field minus 8).
    pub payload_len: usize,
}

impl Repr {
    /// Read a datagram's header (lengths checked; the checksum is not verified).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            payload_len: usize::from(packet.len()) - HEADER_LEN,
        })
    }

    /// Header length (8).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header plus payload.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Write the header with a zero checksum. The Length field saturates at 65535.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(u16::try_from(self.buffer_len()).unwrap_or(u16::MAX));
        packet.set_checksum(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};

    const SRC4: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    const DST4: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

    // scapy: IP(src="10.0.0.1",dst="10.0.0.2")/UDP(sport=1000,dport=2000)/b"hi" (UDP part)
    static DGRAM: [u8; 10] = [0x03, 0xe8, 0x07, 0xd0, 0x00, 0x0a, 0x77, 0xb6, 0x68, 0x69];

    // scapy: IPv6(src="fe80::1",dst="ff02::1")/UDP(sport=5353,dport=5353)/b"abc" (UDP part)
    static DGRAM6: [u8; 11] = [0x14, 0xe9, 0x14, 0xe9, 0x00, 0x0b, 0x00, 0x00, 0x61, 0x62, 0x63];
    const SRC6: IpAddr = IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1));
    const DST6: IpAddr = IpAddr::V6(Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1));
    const CSUM6: u16 = 0x141e;

    #[test]
    fn test_parse() {
        let p = Packet::new_checked(&DGRAM[..]).unwrap();
        assert_eq!(p.src_port(), 1000);
        assert_eq!(p.dst_port(), 2000);
        assert_eq!(p.len(), 10);
        assert_eq!(p.payload(), b"hi");
        assert!(p.verify_checksum(&SRC4, &DST4));
        assert!(!p.verify_checksum(&SRC4, &IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3))));
        assert_eq!(
            Repr::parse(&p).unwrap(),
            Repr { src_port: 1000, dst_port: 2000, payload_len: 2 }
        );
    }

    #[test]
    fn test_emit() {
        let mut b = [0u8; 10];
        let mut p = Packet::new_unchecked(&mut b[..]);
        Repr { src_port: 1000, dst_port: 2000, payload_len: 2 }.emit(&mut p);
        p.payload_mut().copy_from_slice(b"hi");
        p.fill_checksum(&SRC4, &DST4);
        assert_eq!(b, DGRAM);
    }

    #[test]
    fn ipv6_checksum() {
        let mut b = DGRAM6;
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum(&SRC6, &DST6);
        assert_eq!(p.checksum(), CSUM6);
        assert!(p.verify_checksum(&SRC6, &DST6));
        // Over IPv6 a zero checksum is not "none".
        p.set_checksum(0);
        assert!(!p.verify_checksum(&SRC6, &DST6));
        // Over IPv4 it is.
        assert!(p.verify_checksum(&SRC4, &DST4));
    }

    #[test]
    fn bad_lengths() {
        assert_eq!(
            Packet::new_checked(&DGRAM[..7]).unwrap_err(),
            Error::Truncated { need: 8, got: 7 }
        );
        assert_eq!(Packet::new_checked(&DGRAM[..9]).unwrap_err(), Error::BadTotalLen { got: 10 });
        let mut b = DGRAM;
        b[5] = 7;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::BadTotalLen { got: 7 });
    }

    #[test]
    fn trailing_bytes_ignored() {
        let mut b = [0u8; 14];
        b[..10].copy_from_slice(&DGRAM);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload(), b"hi");
        assert!(p.verify_checksum(&SRC4, &DST4));
    }
}
