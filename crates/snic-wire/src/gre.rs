//! GRE (RFC 2784 with the key and sequence number extensions of RFC 2890) and NVGRE (RFC 7637),
//! carried as IP protocol 47.
//!
//! ```text
//!  0                   1                   2                   3
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |C| |K|S| Reserved0       | Ver |         Protocol Type         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |      Checksum (optional)      |       Reserved1 (optional)    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                         Key (optional)                        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                 Sequence Number (optional)                    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! The header is 4 bytes plus 4 for each of C, K, S that is set. Version must be 0
//! ([`Error::BadVersion`]); bits 1, 4 and 5 of Reserved0 (RFC 1701 routing, strict source route,
//! recursion) must be zero ([`Error::BadFlags`]), as RFC 2784 section 2.3 asks.
//!
//! NVGRE is GRE with K set, C and S clear and protocol 0x6558 (transparent Ethernet bridging);
//! its key holds a 24-bit Virtual Subnet ID and an 8-bit FlowID ([`NvgreRepr`]).

use crate::{Error, Result};

/// IP protocol number of GRE.
pub const IP_PROTOCOL: u8 = 47;

/// GRE protocol type of transparent Ethernet bridging (the NVGRE payload).
pub const PROTO_TEB: u16 = 0x6558;

/// Checksum-present flag (first byte).
pub const FLAG_C: u8 = 0x80;
/// Key-present flag (first byte).
pub const FLAG_K: u8 = 0x20;
/// Sequence-number-present flag (first byte).
pub const FLAG_S: u8 = 0x10;
/// Bits 1, 4 and 5 of the header (RFC 1701 routing present, strict source route, top bit of the
/// recursion control), which RFC 2784 requires to be zero.
const MUST_BE_ZERO: u8 = 0x40 | 0x08 | 0x04;

/// Length of the fixed part (flags, version, protocol type).
pub const BASE_LEN: usize = 4;
/// Longest GRE header (C, K and S all set).
pub const MAX_HEADER_LEN: usize = 16;

mod field {
    use crate::Field;
    pub const FLAGS: usize = 0;
    pub const VERSION: usize = 1;
    pub const PROTOCOL: Field = 2..4;
}

/// A read/write view of a GRE header and its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap a buffer without checking it; accessors may panic until [`Self::check_len`] passes.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wrap a buffer, checking that it holds the whole header its flags announce.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// `Err(Truncated)` when the buffer is shorter than the header its flags announce.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        Error::need(BASE_LEN, len)?;
        Error::need(self.header_len(), len)
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Header length from the flags: 4, plus 4 each for checksum, key and sequence number.
    pub fn header_len(&self) -> usize {
        let f = self.buffer.as_ref()[field::FLAGS];
        BASE_LEN
            + 4 * (usize::from(f & FLAG_C != 0)
                + usize::from(f & FLAG_K != 0)
                + usize::from(f & FLAG_S != 0))
    }

    /// The C (checksum present) flag.
    pub fn c_flag(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & FLAG_C != 0
    }

    /// The K (key present) flag.
    pub fn k_flag(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & FLAG_K != 0
    }

    /// The S (sequence number present) flag.
    pub fn s_flag(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & FLAG_S != 0
    }

    /// The first two bytes (flags, reserved0 and version) as one big-endian word.
    pub fn flags_version(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[field::FLAGS], b[field::VERSION]])
    }

    /// The version (low 3 bits of the second byte).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION] & 0x07
    }

    /// The protocol type (an EtherType).
    pub fn protocol(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[field::PROTOCOL.start], b[field::PROTOCOL.start + 1]])
    }

    fn word_at(&self, off: usize) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
    }

    /// The checksum field, when C is set.
    pub fn checksum(&self) -> Option<u16> {
        self.c_flag().then(|| (self.word_at(BASE_LEN) >> 16) as u16)
    }

    /// Offset of the key field, when K is set.
    fn key_offset(&self) -> Option<usize> {
        self.k_flag().then(|| BASE_LEN + if self.c_flag() { 4 } else { 0 })
    }

    /// Offset of the sequence-number field, when S is set.
    fn seq_offset(&self) -> Option<usize> {
        self.s_flag().then(|| {
            BASE_LEN + if self.c_flag() { 4 } else { 0 } + if self.k_flag() { 4 } else { 0 }
        })
    }

    /// The key, when K is set.
    pub fn key(&self) -> Option<u32> {
        self.key_offset().map(|o| self.word_at(o))
    }

    /// The sequence number, when S is set.
    pub fn seq_number(&self) -> Option<u32> {
        self.seq_offset().map(|o| self.word_at(o))
    }

    /// True when the C flag is clear, or the checksum over the header and payload verifies.
    pub fn verify_checksum(&self) -> bool {
        !self.c_flag() || ones_complement_sum(self.buffer.as_ref()) == 0xffff
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The bytes after the header (the encapsulated packet).
    pub fn payload(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        b.get(self.header_len()..).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the first two bytes (flags, reserved0, version). This changes [`Self::header_len`].
    pub fn set_flags_version(&mut self, value: u16) {
        let b = self.buffer.as_mut();
        b[field::FLAGS..field::VERSION + 1].copy_from_slice(&value.to_be_bytes());
    }

    /// Set the protocol type.
    pub fn set_protocol(&mut self, value: u16) {
        self.buffer.as_mut()[field::PROTOCOL].copy_from_slice(&value.to_be_bytes());
    }

    fn set_word_at(&mut self, off: usize, value: u32) {
        self.buffer.as_mut()[off..off + 4].copy_from_slice(&value.to_be_bytes());
    }

    /// Set the key; no-op when K is clear.
    pub fn set_key(&mut self, value: u32) {
        if let Some(o) = self.key_offset() {
            self.set_word_at(o, value);
        }
    }

    /// Set the sequence number; no-op when S is clear.
    pub fn set_seq_number(&mut self, value: u32) {
        if let Some(o) = self.seq_offset() {
            self.set_word_at(o, value);
        }
    }

    /// Compute and store the checksum over the whole buffer (header and payload: call it once the
    /// payload is in place). No-op when C is clear.
    pub fn fill_checksum(&mut self) {
        if !self.c_flag() {
            return;
        }
        self.set_word_at(BASE_LEN, 0);
        let sum = !ones_complement_sum(self.buffer.as_ref());
        self.buffer.as_mut()[BASE_LEN..BASE_LEN + 2].copy_from_slice(&sum.to_be_bytes());
    }

    /// The bytes after the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        let b = self.buffer.as_mut();
        let start = start.min(b.len());
        &mut b[start..]
    }
}

/// One's-complement sum of 16-bit big-endian words (odd trailing byte padded with zero), folded.
fn ones_complement_sum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
        sum = (sum & 0xffff) + (sum >> 16);
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// A parsed GRE header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Protocol type of the payload (an EtherType).
    pub protocol: u16,
    /// Whether a checksum is present. [`Repr::emit`] writes zero there; call
    /// [`Packet::fill_checksum`] once the payload is written.
    pub checksum: bool,
    /// The key, when present.
    pub key: Option<u32>,
    /// The sequence number, when present.
    pub seq_number: Option<u32>,
}

impl Repr {
    /// Read a header. `Err(BadVersion)` for a version other than 0, `Err(BadFlags)` when one of
    /// the must-be-zero bits is set. The checksum is not verified here (see
    /// [`Packet::verify_checksum`]): it covers the payload, which may be partial.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        if packet.version() != 0 {
            return Err(Error::BadVersion { got: packet.version() });
        }
        if (packet.flags_version() >> 8) as u8 & MUST_BE_ZERO != 0 {
            return Err(Error::BadFlags);
        }
        Ok(Repr {
            protocol: packet.protocol(),
            checksum: packet.c_flag(),
            key: packet.key(),
            seq_number: packet.seq_number(),
        })
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        BASE_LEN
            + if self.checksum { 4 } else { 0 }
            + if self.key.is_some() { 4 } else { 0 }
            + if self.seq_number.is_some() { 4 } else { 0 }
    }

    /// Write the header (version 0, reserved bits zero, checksum field zero).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<()> {
        Error::need(self.buffer_len(), packet.buffer.as_ref().len())?;
        let mut flags = 0u8;
        if self.checksum {
            flags |= FLAG_C;
        }
        if self.key.is_some() {
            flags |= FLAG_K;
        }
        if self.seq_number.is_some() {
            flags |= FLAG_S;
        }
        packet.set_flags_version(u16::from(flags) << 8);
        packet.set_protocol(self.protocol);
        if self.checksum {
            packet.set_word_at(BASE_LEN, 0);
        }
        if let Some(k) = self.key {
            packet.set_key(k);
        }
        if let Some(s) = self.seq_number {
            packet.set_seq_number(s);
        }
        Ok(())
    }
}

/// A parsed NVGRE header (RFC 7637): GRE with only K set, protocol 0x6558, key = VSID and FlowID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NvgreRepr {
    /// 24-bit Virtual Subnet ID.
    pub vsid: u32,
    /// 8-bit per-flow entropy.
    pub flow_id: u8,
}

/// Length of an NVGRE header.
pub const NVGRE_HEADER_LEN: usize = 8;

/// Largest VSID (24 bits).
pub const VSID_MAX: u32 = 0x00ff_ffff;

impl NvgreRepr {
    /// Read an NVGRE header. `Err(BadFlags)` unless K is set and C and S are clear;
    /// `Err(BadValue)` when the protocol type is not 0x6558; GRE errors as [`Repr::parse`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<NvgreRepr> {
        let gre = Repr::parse(packet)?;
        NvgreRepr::from_gre(&gre)
    }

    /// Interpret an already-parsed GRE header as NVGRE (same errors as [`Self::parse`]).
    pub fn from_gre(gre: &Repr) -> Result<NvgreRepr> {
        let key = match (gre.checksum, gre.key, gre.seq_number) {
            (false, Some(key), None) => key,
            _ => return Err(Error::BadFlags),
        };
        if gre.protocol != PROTO_TEB {
            return Err(Error::BadValue { field: "nvgre.protocol" });
        }
        Ok(NvgreRepr { vsid: key >> 8, flow_id: key as u8 })
    }

    /// The GRE header this NVGRE header is. `Err(BadValue)` when the VSID does not fit 24 bits.
    pub fn to_gre(&self) -> Result<Repr> {
        if self.vsid > VSID_MAX {
            return Err(Error::BadValue { field: "nvgre.vsid" });
        }
        Ok(Repr {
            protocol: PROTO_TEB,
            checksum: false,
            key: Some((self.vsid << 8) | u32::from(self.flow_id)),
            seq_number: None,
        })
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        NVGRE_HEADER_LEN
    }

    /// Write the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<()> {
        self.to_gre()?.emit(packet)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // C, K and S set; protocol IPv4; checksum over the 16-byte header + 4-byte payload;
    // key 0x01020304; seq 0x0a0b0c0d.
    fn full() -> [u8; 20] {
        let mut b = [
            0xb0, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x03, 0x04, 0x0a, 0x0b,
            0x0c, 0x0d, 0xde, 0xad, 0xbe, 0xef,
        ];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.fill_checksum();
        b
    }

    #[test]
    fn test_parse_full() {
        let b = full();
        // Sum of words b000+0800+0000+0000+0102+0304+0a0b+0c0d+dead+beef folds to 0x6fbc;
        // the checksum is its complement.
        assert_eq!(&b[4..6], &[0x90, 0x43]);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.header_len(), 16);
        assert!(p.verify_checksum());
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(
            Repr::parse(&p),
            Ok(Repr {
                protocol: 0x0800,
                checksum: true,
                key: Some(0x0102_0304),
                seq_number: Some(0x0a0b_0c0d)
            })
        );
    }

    #[test]
    fn test_emit_full() {
        let mut b = [0u8; 20];
        b[16..].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        let repr = Repr {
            protocol: 0x0800,
            checksum: true,
            key: Some(0x0102_0304),
            seq_number: Some(0x0a0b_0c0d),
        };
        assert_eq!(repr.buffer_len(), 16);
        let mut p = Packet::new_unchecked(&mut b[..]);
        repr.emit(&mut p).unwrap();
        p.fill_checksum();
        assert_eq!(b, full());
    }

    #[test]
    fn test_bad_checksum_detected() {
        let mut b = full();
        b[18] ^= 1;
        assert!(!Packet::new_checked(&b[..]).unwrap().verify_checksum());
    }

    #[test]
    fn test_seq_only_offset() {
        let b = [0x10, 0x00, 0x86, 0xdd, 0, 0, 0, 9];
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.key(), None);
        assert_eq!(p.seq_number(), Some(9));
        assert_eq!(p.protocol(), 0x86dd);
    }

    #[test]
    fn test_truncated_by_flags() {
        let b = [0xb0, 0x00, 0x08, 0x00, 0, 0, 0, 0, 1, 2, 3, 4];
        assert_eq!(Packet::new_checked(&b[..]), Err(Error::Truncated { need: 16, got: 12 }));
        assert_eq!(Packet::new_checked(&b[..3]), Err(Error::Truncated { need: 4, got: 3 }));
    }

    #[test]
    fn test_bad_version() {
        let b = [0x00, 0x01, 0x88, 0x0b];
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p), Err(Error::BadVersion { got: 1 }));
    }

    #[test]
    fn test_routing_bit_refused() {
        let b = [0x40, 0x00, 0x08, 0x00];
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p), Err(Error::BadFlags));
    }

    static NVGRE: [u8; 8] = [0x20, 0x00, 0x65, 0x58, 0xab, 0xcd, 0xef, 0x42];

    #[test]
    fn test_nvgre_parse() {
        let p = Packet::new_checked(&NVGRE[..]).unwrap();
        assert_eq!(NvgreRepr::parse(&p), Ok(NvgreRepr { vsid: 0xab_cdef, flow_id: 0x42 }));
    }

    #[test]
    fn test_nvgre_emit() {
        let mut b = [0xffu8; 8];
        NvgreRepr { vsid: 0xab_cdef, flow_id: 0x42 }
            .emit(&mut Packet::new_unchecked(&mut b[..]))
            .unwrap();
        assert_eq!(b, NVGRE);
    }

    #[test]
    fn test_nvgre_requires_k_only() {
        let b = [0x00, 0x00, 0x65, 0x58];
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(NvgreRepr::parse(&p), Err(Error::BadFlags));
        let b = [0x30, 0x00, 0x65, 0x58, 0, 0, 1, 0, 0, 0, 0, 1];
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(NvgreRepr::parse(&p), Err(Error::BadFlags));
        let b = [0x20, 0x00, 0x08, 0x00, 0, 0, 1, 0];
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(NvgreRepr::parse(&p), Err(Error::BadValue { field: "nvgre.protocol" }));
    }
}
