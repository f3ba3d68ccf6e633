//! ICMPv6 messages (RFC 4443): type, code, checksum over the IPv6 pseudo-header, the 4-byte
//! rest-of-header (echo identifier and sequence number) and the data.
//!
//! The view's buffer is the whole message (the upper-layer part of the IPv6 payload). `emit`
//! zeroes the checksum; call [`Packet::fill_checksum`] with the IPv6 addresses once the data is
//! in place.
//!
//! The header view and [`Repr`] are shared with ICMPv4 ([`crate::icmp`]); this module adds the
//! ICMPv6 type numbers and checksum.

use core::net::{IpAddr, Ipv6Addr};

use crate::{checksum, icmp};

/// ICMPv6 header length (type, code, checksum, rest of header).
pub const HEADER_LEN: usize = icmp::HEADER_LEN;

/// The IPv6 Next Header value of ICMPv6.
pub const PROTOCOL: u8 = 58;

/// Destination Unreachable type.
pub const DEST_UNREACHABLE: u8 = 1;
/// Packet Too Big type.
pub const PACKET_TOO_BIG: u8 = 2;
/// Time Exceeded type.
pub const TIME_EXCEEDED: u8 = 3;
/// Parameter Problem type.
pub const PARAM_PROBLEM: u8 = 4;
/// Echo Request type.
pub const ECHO_REQUEST: u8 = 128;
/// Echo Reply type.
pub const ECHO_REPLY: u8 = 129;
/// Neighbor Solicitation type.
pub const NEIGHBOR_SOLICIT: u8 = 135;
/// Neighbor Advertisement type.
pub const NEIGHBOR_ADVERT: u8 = 136;

/// ICMPv6 (RFC 4443).
#[derive(Debug, Clone, Copy)]
pub enum V6 {}

impl icmp::Version for V6 {
    const ECHO_REQUEST: u8 = ECHO_REQUEST;
    const ECHO_REPLY: u8 = ECHO_REPLY;
}

/// A read/write view of an ICMPv6 message.
pub type Packet<T> = icmp::Packet<T, V6>;

/// An ICMPv6 message header; the data itself stays in the buffer (`data_len` is its length).
/// Echo Request is type 128, Echo Reply type 129.
pub type Repr = icmp::Repr;

fn msg_checksum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
    checksum::upper_layer(&IpAddr::V6(src), &IpAddr::V6(dst), PROTOCOL, msg)
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// True when the checksum (over the IPv6 pseudo-header and the whole message) verifies.
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        msg_checksum(src, dst, self.as_ref()) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Compute and store the checksum over the IPv6 pseudo-header and the whole buffer.
    pub fn fill_checksum(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let c = msg_checksum(src, dst, self.as_ref());
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use crate::icmpv4::V4;

    const SRC: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
    const DST: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2);

    // scapy: IPv6(src="fe80::1",dst="fe80::2")/ICMPv6EchoRequest(id=0x1234,seq=7,data=b"ping")
    static ECHO: [u8; 12] =
        [0x80, 0x00, 0x91, 0xa8, 0x12, 0x34, 0x00, 0x07, 0x70, 0x69, 0x6e, 0x67];

    #[test]
    fn test_parse() {
        let p = Packet::new_checked(&ECHO[..]).unwrap();
        assert_eq!(p.msg_type(), ECHO_REQUEST);
        assert_eq!(p.msg_code(), 0);
        assert_eq!(p.payload(), b"ping");
        assert!(p.verify_checksum(SRC, DST));
        assert!(!p.verify_checksum(DST, Ipv6Addr::LOCALHOST));
        assert_eq!(
            Repr::parse(&p).unwrap(),
            Repr::EchoRequest { ident: 0x1234, seq_no: 7, data_len: 4 }
        );
    }

    #[test]
    fn test_emit() {
        let r = Repr::EchoRequest { ident: 0x1234, seq_no: 7, data_len: 4 };
        let mut b = [0xffu8; 12];
        let mut p = Packet::new_unchecked(&mut b[..]);
        r.emit(&mut p);
        p.payload_mut().copy_from_slice(b"ping");
        p.fill_checksum(SRC, DST);
        assert_eq!(b, ECHO);
    }

    #[test]
    fn other_and_truncated() {
        let b = [NEIGHBOR_SOLICIT, 0, 0, 0, 0, 0, 0, 0, 0xfe, 0x80];
        let r = Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            Repr::Other { msg_type: NEIGHBOR_SOLICIT, code: 0, rest: [0; 4], data_len: 2 }
        );
        assert_eq!(Packet::new_checked(&b[..5]).unwrap_err(), Error::Truncated { need: 8, got: 5 });
        // A non-zero code on an echo is not an echo.
        let e = [ECHO_REPLY, 1, 0, 0, 0, 9, 0, 1];
        assert_eq!(
            Repr::parse(&Packet::new_checked(&e[..]).unwrap()).unwrap(),
            Repr::Other { msg_type: ECHO_REPLY, code: 1, rest: [0, 9, 0, 1], data_len: 0 }
        );
    }

    #[test]
    fn echo_type_numbers_follow_the_version() {
        let r = Repr::EchoReply { ident: 0x0102, seq_no: 3, data_len: 0 };
        let mut b = [0xffu8; 8];
        r.emit(&mut icmp::Packet::<_, V4>::new_unchecked(&mut b[..]));
        assert_eq!(b, [0, 0, 0, 0, 1, 2, 0, 3]);
        r.emit(&mut icmp::Packet::<_, V6>::new_unchecked(&mut b[..]));
        assert_eq!(b, [129, 0, 0, 0, 1, 2, 0, 3]);
        // An ICMPv4 echo request type number is not an echo in ICMPv6.
        b[0] = crate::icmpv4::ECHO_REQUEST;
        assert_eq!(
            Repr::parse(&icmp::Packet::<_, V6>::new_checked(&b[..]).unwrap()).unwrap(),
            Repr::Other { msg_type: 8, code: 0, rest: [1, 2, 0, 3], data_len: 0 }
        );
        assert_eq!(
            Repr::parse(&icmp::Packet::<_, V4>::new_checked(&b[..]).unwrap()).unwrap(),
            Repr::EchoRequest { ident: 0x0102, seq_no: 3, data_len: 0 }
        );
    }
}
