//! What ICMPv4 and ICMPv6 share: the 8-byte header (type, code, checksum, rest of header with
//! the echo identifier and sequence number), its view [`Packet`] and the echo [`Repr`].
//!
//! The versions differ in their type numbers ([`Version`], implemented by
//! [`icmpv4::V4`](crate::icmpv4::V4) and [`icmpv6::V6`](crate::icmpv6::V6)) and
//! in what the checksum covers. Use them through [`crate::icmpv4`] and [`crate::icmpv6`]: each
//! names these types as its own `Packet` and `Repr` and adds `verify_checksum`/`fill_checksum`.

use core::fmt;
use core::marker::PhantomData;

use crate::{Error, Field, Result};

mod field {
    use crate::Field;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    pub const REST: Field = 4..8;
    pub const ECHO_IDENT: Field = 4..6;
    pub const ECHO_SEQNO: Field = 6..8;
}

/// ICMP header length (type, code, checksum, rest of header), in both versions.
pub const HEADER_LEN: usize = field::REST.end;

/// The type numbers that differ between ICMP versions: [`V4`](crate::icmpv4::V4) and
/// [`V6`](crate::icmpv6::V6).
pub trait Version {
    /// Echo Request type.
    const ECHO_REQUEST: u8;
    /// Echo Reply type.
    const ECHO_REPLY: u8;
}

fn read_u16(b: &[u8], f: Field) -> u16 {
    u16::from_be_bytes([b[f.start], b[f.start + 1]])
}

/// A read/write view of an ICMP message of version `V`: the whole message, as the checksum
/// covers all of it.
#[derive(Clone)]
pub struct Packet<T: AsRef<[u8]>, V> {
    buffer: T,
    version: PhantomData<V>,
}

impl<T: AsRef<[u8]> + fmt::Debug, V> fmt::Debug for Packet<T, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Packet").field("buffer", &self.buffer).finish()
    }
}

impl<T: AsRef<[u8]>, V> Packet<T, V> {
    /// Wrap a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T, V> {
        Packet { buffer, version: PhantomData }
    }

    /// Wrap a buffer and [`check_len`](Self::check_len) it.
    pub fn new_checked(buffer: T) -> Result<Packet<T, V>> {
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
}

impl<T: AsRef<[u8]> + AsMut<[u8]>, V> Packet<T, V> {
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
}

impl<T: AsRef<[u8]>, V> AsRef<[u8]> for Packet<T, V> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// An ICMP message header; the data itself stays in the buffer (`data_len` is its length).
/// The echo type numbers come from the packet's version when parsing and emitting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Repr {
    /// Echo Request (ICMPv4 type 8, ICMPv6 type 128; code 0).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Length of the echo data.
        data_len: usize,
    },
    /// Echo Reply (ICMPv4 type 0, ICMPv6 type 129; code 0).
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
    pub fn parse<T: AsRef<[u8]> + ?Sized, V: Version>(packet: &Packet<&T, V>) -> Result<Repr> {
        packet.check_len()?;
        let data_len = packet.payload().len();
        let (ident, seq_no) = (packet.echo_ident(), packet.echo_seq_no());
        Ok(match (packet.msg_type(), packet.msg_code()) {
            (t, 0) if t == V::ECHO_REQUEST => Repr::EchoRequest { ident, seq_no, data_len },
            (t, 0) if t == V::ECHO_REPLY => Repr::EchoReply { ident, seq_no, data_len },
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
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized, V: Version>(
        &self,
        packet: &mut Packet<&mut T, V>,
    ) {
        let (t, c, rest) = match *self {
            Repr::EchoRequest { ident, seq_no, .. } => {
                (V::ECHO_REQUEST, 0, echo_rest(ident, seq_no))
            }
            Repr::EchoReply { ident, seq_no, .. } => (V::ECHO_REPLY, 0, echo_rest(ident, seq_no)),
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
