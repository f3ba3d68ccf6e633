//! ICMPv6 messages (RFC 4443): type, code, checksum over the IPv6 pseudo-header, the 4-byte
//! rest-of-header (echo identifier and sequence number) and the data.
//!
//! The view's buffer is the whole message (the upper-layer part of the IPv6 payload). `emit`
//! zeroes the checksum; call [`Packet::fill_checksum`] with the IPv6 addresses once the data is
//! in place.

use core::net::{IpAddr, Ipv6Addr};

use crate::{Error, Field, Result, checksum};

mod field {
    use crate::Field;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    pub const REST: Field = 4..8;
    pub const ECHO_IDENT: Field = 4..6;
    pub const ECHO_SEQNO: Field = 6..8;
}

/// ICMPv6 header length (type, code, checksum, rest of header).
pub const HEADER_LEN: usize = field::REST.end;

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

fn read_u16(b: &[u8], f: Field) -> u16 {
    u16::from_be_bytes([b[f.start], b[f.start + 1]])
}

fn msg_checksum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
    checksum::upper_layer(&IpAddr::V6(src), &IpAddr::V6(dst), PROTOCOL, msg)
}

/// A read/write view of an ICMPv6 message.
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

    /// `Truncated` when shorter than [`HEADER_LEN`].
    pub fn check_len(&self) -> Result<()> {
        Error::need(HEADER_LEN, self.buffer.as_ref().len())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Header length (always [`HEADER_LEN`]).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// Message code.
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Checksum as stored.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The 4-byte rest of header.
    pub fn rest_of_header(&self) -> [u8; 4] {
        let b = self.buffer.as_ref();
        [b[4], b[5], b[6], b[7]]
    }

    /// Echo identifier (bytes 4..6).
    pub fn echo_ident(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_IDENT)
    }

    /// Echo sequence number (bytes 6..8).
    pub fn echo_seq_no(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_SEQNO)
    }

    /// The data after the 8-byte header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// True when the checksum (over the IPv6 pseudo-header and the whole message) verifies.
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        msg_checksum(src, dst, self.buffer.as_ref()) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn write_u16(&mut self, f: Field, v: u16) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes());
    }

    /// Set the message type.
    pub fn set_msg_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::TYPE] = v;
    }

    /// Set the message code.
    pub fn set_msg_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::CODE] = v;
    }

    /// Set the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.write_u16(field::CHECKSUM, v);
    }

    /// Set the rest of header.
    pub fn set_rest_of_header(&mut self, v: [u8; 4]) {
        self.buffer.as_mut()[field::REST].copy_from_slice(&v);
    }

    /// Set the echo identifier.
    pub fn set_echo_ident(&mut self, v: u16) {
        self.write_u16(field::ECHO_IDENT, v);
    }

    /// Set the echo sequence number.
    pub fn set_echo_seq_no(&mut self, v: u16) {
        self.write_u16(field::ECHO_SEQNO, v);
    }

    /// The data, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }

    /// Compute and store the checksum over the IPv6 pseudo-header and the whole buffer.
    pub fn fill_checksum(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let c = msg_checksum(src, dst, self.buffer.as_ref());
        self.set_checksum(c);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// An ICMPv6 message header; the data itself stays in the buffer (`data_len` is its length).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Repr {
    /// Echo Request (type 128, code 0).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Length of the echo data.
        data_len: usize,
    },
    /// Echo Reply (type 129, code 0).
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Length of the echo data.
        data_len: usize,
    },
    /// Any other message, kept as type, code and rest of header.
    Other {
        /// Message type.
        msg_type: u8,
        /// Message code.
        code: u8,
        /// Bytes 4..8.
        rest: [u8; 4],
        /// Length of the data after the header.
        data_len: usize,
    },
}

impl Repr {
    /// Read a message header. Echo messages with a non-zero code are returned as `Other`.
    /// The checksum is not verified.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        let data_len = packet.payload().len();
        Ok(match (packet.msg_type(), packet.msg_code()) {
            (ECHO_REQUEST, 0) => Repr::EchoRequest {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data_len,
            },
            (ECHO_REPLY, 0) => Repr::EchoReply {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data_len,
            },
            (msg_type, code) => {
                Repr::Other { msg_type, code, rest: packet.rest_of_header(), data_len }
            }
        })
    }

    /// Header length (8).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header plus data.
    pub const fn buffer_len(&self) -> usize {
        match *self {
            Repr::EchoRequest { data_len, .. }
            | Repr::EchoReply { data_len, .. }
            | Repr::Other { data_len, .. } => HEADER_LEN + data_len,
        }
    }

    /// Write the header with a zero checksum.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        let (t, c, rest) = match *self {
            Repr::EchoRequest { ident, seq_no, .. } => (ECHO_REQUEST, 0, echo_rest(ident, seq_no)),
            Repr::EchoReply { ident, seq_no, .. } => (ECHO_REPLY, 0, echo_rest(ident, seq_no)),
            Repr::Other { msg_type, code, rest, .. } => (msg_type, code, rest),
        };
        packet.set_msg_type(t);
        packet.set_msg_code(c);
        packet.set_checksum(0);
        packet.set_rest_of_header(rest);
    }
}

fn echo_rest(ident: u16, seq_no: u16) -> [u8; 4] {
    let [a, b] = ident.to_be_bytes();
    let [c, d] = seq_no.to_be_bytes();
    [a, b, c, d]
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
