//! Geneve header (RFC 8926), after UDP destination port 6081.
//!
//! ```text
//!  0                   1                   2                   3
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Ver|  Opt Len  |O|C|    Rsvd.  |          Protocol Type        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |        Virtual Network Identifier (VNI)       |    Reserved   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    Variable-Length Options                    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Opt Len counts 4-byte words of options. Each option is a TLV: class (16 bits), type (8 bits,
//! the top bit is "critical"), 3 reserved bits, length (5 bits, in 4-byte words, not counting
//! the 4-byte option header), data. [`Options`] walks them without allocating; a TLV that runs
//! past the option area is [`Error::BadOption`].

use crate::vxlan::{read_u24, write_u24};
use crate::{Error, Result};

/// IANA-assigned UDP destination port of Geneve.
pub const UDP_PORT: u16 = 6081;

/// Protocol type of an Ethernet payload (transparent Ethernet bridging).
pub const PROTO_TEB: u16 = 0x6558;

/// Length of the fixed header.
pub const HEADER_LEN: usize = 8;

/// Longest header: 8 bytes plus 63 words of options.
pub const MAX_HEADER_LEN: usize = HEADER_LEN + 63 * 4;

/// Largest VNI (24 bits).
pub const VNI_MAX: u32 = 0x00ff_ffff;

/// Length of an option's TLV header.
pub const OPTION_HEADER_LEN: usize = 4;

/// The critical bit of an option type.
pub const OPTION_TYPE_CRITICAL: u8 = 0x80;

mod field {
    use crate::Field;
    pub const VER_OPTLEN: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PROTOCOL: Field = 2..4;
    pub const VNI: Field = 4..7;
    pub const RESERVED: usize = 7;
}

const FLAG_O: u8 = 0x80;
const FLAG_C: u8 = 0x40;

/// A read/write view of a Geneve header, its options and the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap a buffer without checking it; accessors may panic until [`Self::check_len`] passes.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wrap a buffer, checking that it holds the fixed header and all the options.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// `Err(Truncated)` when the buffer is shorter than the fixed header plus the options.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        Error::need(HEADER_LEN, len)?;
        Error::need(self.header_len(), len)
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The version (top 2 bits).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_OPTLEN] >> 6
    }

    /// Option length in 4-byte words.
    pub fn opt_len(&self) -> u8 {
        self.buffer.as_ref()[field::VER_OPTLEN] & 0x3f
    }

    /// Header length including options, in bytes.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + 4 * usize::from(self.opt_len())
    }

    /// The O (OAM / control packet) flag.
    pub fn oam(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & FLAG_O != 0
    }

    /// The C (critical options present) flag.
    pub fn critical(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & FLAG_C != 0
    }

    /// The 6 reserved bits after O and C.
    pub fn reserved_flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & 0x3f
    }

    /// Protocol type of the payload (an EtherType; 0x6558 for Ethernet).
    pub fn protocol(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[field::PROTOCOL.start], b[field::PROTOCOL.start + 1]])
    }

    /// The 24-bit VNI.
    pub fn vni(&self) -> u32 {
        read_u24(&self.buffer.as_ref()[field::VNI])
    }

    /// The reserved byte after the VNI.
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[field::RESERVED]
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The raw option bytes (`opt_len * 4` of them).
    pub fn options_raw(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        b.get(HEADER_LEN..self.header_len()).unwrap_or(&[])
    }

    /// Iterator over the options.
    pub fn options(&self) -> Options<'a> {
        Options::new(self.options_raw())
    }

    /// The bytes after the header and options.
    pub fn payload(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        b.get(self.header_len()..).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set version (2 bits) and option length (6 bits, in words).
    pub fn set_version_opt_len(&mut self, version: u8, opt_len: u8) {
        self.buffer.as_mut()[field::VER_OPTLEN] = (version << 6) | (opt_len & 0x3f);
    }

    /// Set the flags byte from O, C (reserved bits zero).
    pub fn set_flags(&mut self, oam: bool, critical: bool) {
        let mut f = 0;
        if oam {
            f |= FLAG_O;
        }
        if critical {
            f |= FLAG_C;
        }
        self.buffer.as_mut()[field::FLAGS] = f;
    }

    /// Set the protocol type.
    pub fn set_protocol(&mut self, value: u16) {
        self.buffer.as_mut()[field::PROTOCOL].copy_from_slice(&value.to_be_bytes());
    }

    /// Set the VNI (low 24 bits of `value`).
    pub fn set_vni(&mut self, value: u32) {
        write_u24(&mut self.buffer.as_mut()[field::VNI], value);
    }

    /// Set the reserved byte after the VNI.
    pub fn set_reserved(&mut self, value: u8) {
        self.buffer.as_mut()[field::RESERVED] = value;
    }

    /// The option bytes, writable.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// One Geneve option (a TLV).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GeneveOption<'a> {
    /// Option class (namespace of the type).
    pub class: u16,
    /// Option type; the top bit ([`OPTION_TYPE_CRITICAL`]) marks a critical option.
    pub typ: u8,
    /// The 3 reserved bits (as read).
    pub reserved: u8,
    /// Option data (`length * 4` bytes).
    pub data: &'a [u8],
}

impl GeneveOption<'_> {
    /// True when the option type's critical bit is set.
    pub fn is_critical(&self) -> bool {
        self.typ & OPTION_TYPE_CRITICAL != 0
    }
}

/// Iterator over the TLVs of a Geneve option area. Yields `Err(BadOption)` once (then stops) when
/// a TLV header or its data runs past the area.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Options<'a> {
    /// Walk the options in `raw` (the option area of a header).
    pub const fn new(raw: &'a [u8]) -> Options<'a> {
        Options { rest: raw, failed: false }
    }

    /// Check the whole area; `Err(BadOption)` on the first malformed TLV. Returns the count.
    pub fn validate(raw: &'a [u8]) -> Result<usize> {
        let mut n = 0;
        for o in Options::new(raw) {
            o?;
            n += 1;
        }
        Ok(n)
    }
}

impl<'a> Iterator for Options<'a> {
    type Item = Result<GeneveOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let (Some(hdr), Some(tail)) =
            (self.rest.get(..OPTION_HEADER_LEN), self.rest.get(OPTION_HEADER_LEN..))
        else {
            self.failed = true;
            return Some(Err(Error::BadOption));
        };
        let data_len = usize::from(hdr[3] & 0x1f) * 4;
        let Some(data) = tail.get(..data_len) else {
            self.failed = true;
            return Some(Err(Error::BadOption));
        };
        self.rest = &tail[data_len..];
        Some(Ok(GeneveOption {
            class: u16::from_be_bytes([hdr[0], hdr[1]]),
            typ: hdr[2],
            reserved: hdr[3] >> 5,
            data,
        }))
    }
}

/// A parsed Geneve header. Options stay a borrowed slice of the packet (already validated).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr<'a> {
    /// O flag: an OAM/control packet.
    pub oam: bool,
    /// C flag: critical options are present.
    pub critical: bool,
    /// Protocol type of the payload.
    pub protocol: u16,
    /// 24-bit VNI.
    pub vni: u32,
    /// The raw option area (a multiple of 4 bytes, at most 252, well-formed TLVs).
    pub options: &'a [u8],
}

impl<'a> Repr<'a> {
    /// Read a header. `Err(BadVersion)` unless version is 0; `Err(BadOption)` when a TLV is
    /// malformed.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Repr<'a>> {
        packet.check_len()?;
        if packet.version() != 0 {
            return Err(Error::BadVersion { got: packet.version() });
        }
        let options = packet.options_raw();
        Options::validate(options)?;
        Ok(Repr {
            oam: packet.oam(),
            critical: packet.critical(),
            protocol: packet.protocol(),
            vni: packet.vni(),
            options,
        })
    }

    /// The options, as an iterator.
    pub fn options(&self) -> Options<'a> {
        Options::new(self.options)
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.options.len()
    }

    /// Write the header and options. `Err(BadValue)` when the VNI does not fit 24 bits or the
    /// options are not a multiple of 4 bytes up to 252; `Err(BadOption)` when they are not
    /// well-formed TLVs.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<()> {
        if self.vni > VNI_MAX {
            return Err(Error::BadValue { field: "geneve.vni" });
        }
        if self.options.len() & 3 != 0 || self.options.len() > MAX_HEADER_LEN - HEADER_LEN {
            return Err(Error::BadValue { field: "geneve.options" });
        }
        Options::validate(self.options)?;
        Error::need(self.buffer_len(), packet.buffer.as_ref().len())?;
        packet.set_version_opt_len(0, (self.options.len() / 4) as u8);
        packet.set_flags(self.oam, self.critical);
        packet.set_protocol(self.protocol);
        packet.set_vni(self.vni);
        packet.set_reserved(0);
        packet.options_mut().copy_from_slice(self.options);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Version 0, opt len 3 words, C set, protocol 0x6558, VNI 0x00abcd; one option: class
    // 0x0102, type 0x83 (critical), length 2 words, data 8 bytes. Then 2 payload bytes.
    static BYTES: [u8; 22] = [
        0x03, 0x40, 0x65, 0x58, 0x00, 0xab, 0xcd, 0x00, 0x01, 0x02, 0x83, 0x02, 1, 2, 3, 4, 5, 6,
        7, 8, 0xee, 0xff,
    ];

    #[test]
    fn test_parse() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.payload(), &[0xee, 0xff]);
        let r = Repr::parse(&p).unwrap();
        assert_eq!(
            r,
            Repr {
                oam: false,
                critical: true,
                protocol: 0x6558,
                vni: 0xabcd,
                options: &BYTES[8..20]
            }
        );
        let mut it = r.options();
        let o = it.next().unwrap().unwrap();
        assert_eq!(o.class, 0x0102);
        assert_eq!(o.typ, 0x83);
        assert!(o.is_critical());
        assert_eq!(o.data, &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(it.next().is_none());
    }

    #[test]
    fn test_emit() {
        let mut buf = [0xaau8; 22];
        buf[20] = 0xee;
        buf[21] = 0xff;
        let r = Repr {
            oam: false,
            critical: true,
            protocol: 0x6558,
            vni: 0xabcd,
            options: &BYTES[8..20],
        };
        assert_eq!(r.buffer_len(), 20);
        r.emit(&mut Packet::new_unchecked(&mut buf[..])).unwrap();
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn test_option_overruns_area() {
        let mut b = BYTES;
        b[11] = 0x03; // option claims 3 words of data, area holds 2
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p), Err(Error::BadOption));
        let errs: Vec<_> = p.options().collect();
        assert_eq!(errs, vec![Err(Error::BadOption)]);
    }

    #[test]
    fn test_options_past_buffer() {
        assert_eq!(Packet::new_checked(&BYTES[..19]), Err(Error::Truncated { need: 20, got: 19 }));
        assert_eq!(Packet::new_checked(&BYTES[..5]), Err(Error::Truncated { need: 8, got: 5 }));
    }

    #[test]
    fn test_bad_version() {
        let mut b = BYTES;
        b[0] |= 0x40;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p), Err(Error::BadVersion { got: 1 }));
    }

    #[test]
    fn test_emit_rejects_bad_options() {
        let mut buf = [0u8; 32];
        let r = Repr { oam: true, critical: false, protocol: 0x0800, vni: 1, options: &[0, 1, 2] };
        assert_eq!(
            r.emit(&mut Packet::new_unchecked(&mut buf[..])),
            Err(Error::BadValue { field: "geneve.options" })
        );
        let r = Repr { options: &[0, 1, 2, 1], ..r };
        assert_eq!(r.emit(&mut Packet::new_unchecked(&mut buf[..])), Err(Error::BadOption));
    }
}
