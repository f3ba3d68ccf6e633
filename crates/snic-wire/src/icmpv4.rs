//! ICMPv4 messages (RFC 792): type, code, checksum, the 4-byte rest-of-header (echo
//! identifier and sequence number) and the data.
//!
//! The view's buffer is the whole message (the IPv4 payload): the checksum covers all of it.
//! `emit` zeroes the checksum; call [`Packet::fill_checksum`] once the data is in place.
//!
//! The header view and [`Repr`] are shared with ICMPv6 ([`crate::icmp`]); this module adds the
//! ICMPv4 type numbers and checksum.

use crate::{checksum, icmp};

/// ICMPv4 header length (type, code, checksum, rest of header).
pub const HEADER_LEN: usize = icmp::HEADER_LEN;

/// Echo Reply type.
pub const ECHO_REPLY: u8 = 0;
/// Destination Unreachable type.
pub const DEST_UNREACHABLE: u8 = 3;
/// Redirect type.
pub const REDIRECT: u8 = 5;
/// Echo Request type.
pub const ECHO_REQUEST: u8 = 8;
/// Time Exceeded type.
pub const TIME_EXCEEDED: u8 = 11;
/// Parameter Problem type.
pub const PARAM_PROBLEM: u8 = 12;

/// ICMPv4 (RFC 792).
#[derive(Debug, Clone, Copy)]
pub enum V4 {}

impl icmp::Version for V4 {
    const ECHO_REQUEST: u8 = ECHO_REQUEST;
    const ECHO_REPLY: u8 = ECHO_REPLY;
}

/// A read/write view of an ICMPv4 message.
pub type Packet<T> = icmp::Packet<T, V4>;

/// An ICMPv4 message header; the data itself stays in the buffer (`data_len` is its length).
/// Echo Request is type 8, Echo Reply type 0.
pub type Repr = icmp::Repr;

impl<T: AsRef<[u8]>> Packet<T> {
    /// True when the checksum over the whole message verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::data(self.as_ref()) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Compute and store the checksum over the whole buffer.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = !checksum::data(self.as_ref());
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    // scapy: ICMP(type=8, id=0x1234, seq=7)/b"ping"
    static ECHO: [u8; 12] =
        [0x08, 0x00, 0x00, 0x00, 0x12, 0x34, 0x00, 0x07, 0x70, 0x69, 0x6e, 0x67];
    const ECHO_CSUM: u16 = 0x06f4;

    fn echo_bytes() -> [u8; 12] {
        let mut b = ECHO;
        b[2..4].copy_from_slice(&ECHO_CSUM.to_be_bytes());
        b
    }

    #[test]
    fn test_parse() {
        let b = echo_bytes();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.msg_type(), ECHO_REQUEST);
        assert_eq!(p.echo_ident(), 0x1234);
        assert_eq!(p.echo_seq_no(), 7);
        assert_eq!(p.payload(), b"ping");
        assert!(p.verify_checksum());
        assert_eq!(
            Repr::parse(&p).unwrap(),
            Repr::EchoRequest { ident: 0x1234, seq_no: 7, data_len: 4 }
        );
    }

    #[test]
    fn test_emit() {
        let r = Repr::EchoRequest { ident: 0x1234, seq_no: 7, data_len: 4 };
        let mut b = [0xffu8; 12];
        assert_eq!(r.buffer_len(), 12);
        let mut p = Packet::new_unchecked(&mut b[..]);
        r.emit(&mut p);
        p.payload_mut().copy_from_slice(b"ping");
        p.fill_checksum();
        assert_eq!(b, echo_bytes());
    }

    #[test]
    fn other_kept_and_round_trips() {
        // Destination unreachable, port unreachable, next-hop MTU field unused.
        let mut b = [3u8, 3, 0, 0, 0, 0, 5, 0xdc];
        let r = Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(r, Repr::Other { msg_type: 3, code: 3, rest: [0, 0, 5, 0xdc], data_len: 0 });
        let mut p = Packet::new_unchecked(&mut b[..]);
        Repr::EchoReply { ident: 1, seq_no: 2, data_len: 0 }.emit(&mut p);
        assert_eq!(b, [0, 0, 0, 0, 0, 1, 0, 2]);
    }

    #[test]
    fn truncated_and_bad_checksum() {
        assert_eq!(
            Packet::new_checked(&ECHO[..7]).unwrap_err(),
            Error::Truncated { need: 8, got: 7 }
        );
        let mut b = echo_bytes();
        b[9] ^= 1;
        assert!(!Packet::new_checked(&b[..]).unwrap().verify_checksum());
    }
}
