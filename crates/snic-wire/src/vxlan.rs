//! VXLAN header (RFC 7348): an 8-byte header after UDP (destination port 4789) that carries a
//! 24-bit VXLAN Network Identifier (VNI) in front of an inner Ethernet frame.
//!
//! ```text
//!  0               1               2               3
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |R|R|R|R|I|R|R|R|            Reserved                           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                VXLAN Network Identifier (VNI) |   Reserved    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! The I flag must be set (a header without it is refused with [`Error::BadFlags`]); the reserved
//! fields are written as zero and ignored on receipt, as the RFC asks.

use crate::{Error, Result};

/// IANA-assigned UDP destination port of VXLAN.
pub const UDP_PORT: u16 = 4789;

/// Largest VNI (24 bits).
pub const VNI_MAX: u32 = 0x00ff_ffff;

/// The "VNI is valid" flag, bit 3 of the first byte.
pub const FLAG_I: u8 = 0x08;

mod field {
    use crate::Field;
    pub const FLAGS: usize = 0;
    pub const RESERVED1: Field = 1..4;
    pub const VNI: Field = 4..7;
    pub const RESERVED2: usize = 7;
}

/// Length of the VXLAN header.
pub const HEADER_LEN: usize = 8;

/// A read/write view of a VXLAN header and the inner frame after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap a buffer without checking its length; accessors may panic until [`Self::check_len`] passes.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wrap a buffer, checking that it holds a whole header.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// `Err(Truncated)` when the buffer is shorter than the header.
    pub fn check_len(&self) -> Result<()> {
        Error::need(HEADER_LEN, self.buffer.as_ref().len())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Header length (always [`HEADER_LEN`]).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// The flags byte.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// True when the I ("VNI valid") flag is set.
    pub fn i_flag(&self) -> bool {
        self.flags() & FLAG_I != 0
    }

    /// The 24 reserved bits after the flags.
    pub fn reserved1(&self) -> u32 {
        read_u24(&self.buffer.as_ref()[field::RESERVED1])
    }

    /// The 24-bit VNI.
    pub fn vni(&self) -> u32 {
        read_u24(&self.buffer.as_ref()[field::VNI])
    }

    /// The last reserved byte.
    pub fn reserved2(&self) -> u8 {
        self.buffer.as_ref()[field::RESERVED2]
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The inner Ethernet frame.
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the flags byte.
    pub fn set_flags(&mut self, value: u8) {
        self.buffer.as_mut()[field::FLAGS] = value;
    }

    /// Set the 24 reserved bits after the flags (only the low 24 bits of `value` are used).
    pub fn set_reserved1(&mut self, value: u32) {
        write_u24(&mut self.buffer.as_mut()[field::RESERVED1], value);
    }

    /// Set the VNI (only the low 24 bits of `value` are used).
    pub fn set_vni(&mut self, value: u32) {
        write_u24(&mut self.buffer.as_mut()[field::VNI], value);
    }

    /// Set the last reserved byte.
    pub fn set_reserved2(&mut self, value: u8) {
        self.buffer.as_mut()[field::RESERVED2] = value;
    }

    /// The inner frame, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// A parsed VXLAN header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// The 24-bit VXLAN Network Identifier.
    pub vni: u32,
}

impl Repr {
    /// Read a header; `Err(BadFlags)` when the I flag is clear.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        if !packet.i_flag() {
            return Err(Error::BadFlags);
        }
        Ok(Repr { vni: packet.vni() })
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header: I flag set, reserved fields zero. `Err(BadValue)` when the VNI does not
    /// fit 24 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<()> {
        if self.vni > VNI_MAX {
            return Err(Error::BadValue { field: "vxlan.vni" });
        }
        packet.check_len()?;
        packet.set_flags(FLAG_I);
        packet.set_reserved1(0);
        packet.set_vni(self.vni);
        packet.set_reserved2(0);
        Ok(())
    }
}

/// Big-endian 24-bit read of `b[0..3]`.
pub(crate) fn read_u24(b: &[u8]) -> u32 {
    (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2])
}

/// Big-endian 24-bit write of the low 24 bits of `value` into `b[0..3]`.
pub(crate) fn write_u24(b: &mut [u8], value: u32) {
    b[0] = (value >> 16) as u8;
    b[1] = (value >> 8) as u8;
    b[2] = value as u8;
}

#[cfg(test)]
mod tests {
    use super::*;

    // Flags 0x08, VNI 0x123456, reserved zero, then the first two bytes of an inner frame.
    static BYTES: [u8; 10] = [0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0, 0xaa, 0xbb];

    #[test]
    fn test_parse() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert!(p.i_flag());
        assert_eq!(p.vni(), 0x12_3456);
        assert_eq!(p.payload(), &[0xaa, 0xbb]);
        assert_eq!(Repr::parse(&p), Ok(Repr { vni: 0x12_3456 }));
    }

    #[test]
    fn test_emit() {
        let mut buf = [0xffu8; 10];
        buf[8] = 0xaa;
        buf[9] = 0xbb;
        let mut p = Packet::new_unchecked(&mut buf[..]);
        Repr { vni: 0x12_3456 }.emit(&mut p).unwrap();
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn test_reserved_ignored_on_receipt() {
        let mut bytes = BYTES;
        bytes[0] = 0xff;
        bytes[2] = 0x77;
        bytes[7] = 0x99;
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(Repr::parse(&p), Ok(Repr { vni: 0x12_3456 }));
    }

    #[test]
    fn test_i_flag_required() {
        let mut bytes = BYTES;
        bytes[0] = 0x00;
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(Repr::parse(&p), Err(Error::BadFlags));
    }

    #[test]
    fn test_truncated() {
        assert_eq!(
            Packet::new_checked(&BYTES[..7]).unwrap_err(),
            Error::Truncated { need: 8, got: 7 }
        );
    }

    #[test]
    fn test_vni_too_large() {
        let mut buf = [0u8; 8];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        assert_eq!(
            Repr { vni: 0x0100_0000 }.emit(&mut p),
            Err(Error::BadValue { field: "vxlan.vni" })
        );
    }
}
