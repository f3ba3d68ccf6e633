//! The InfiniBand Base Transport Header (IBTA Vol 1 section 9.2), the first 12 bytes after the
//! RoCEv2 UDP header.
//!
//! ```text
//!  0               1               2               3
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |    OpCode     |S|M|Pad| TVer  |           Partition Key       |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |F|B| Reserved  |             Destination QP                    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |A|  Reserved   |           Packet Sequence Number              |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! F and B are the FECN/BECN congestion bits (RoCEv2 uses the IP ECN bits and CNPs instead,
//! but the bits are still carried). The reserved bits are written as zero and ignored on receipt.

use super::{check_u24, opcode};
use crate::{Error, Result};

/// Length of the BTH.
pub const HEADER_LEN: usize = 12;

/// The only transport header version defined.
pub const TVER: u8 = 0;

/// Default partition key (full membership, default partition).
pub const PKEY_DEFAULT: u16 = 0xffff;

mod field {
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: usize = 2;
    pub const CONG: usize = 4;
    pub const DEST_QP: usize = 5;
    pub const ACK: usize = 8;
    pub const PSN: usize = 9;
}

/// Offset of the byte holding FECN, BECN and 6 reserved bits (masked to 1s for the ICRC).
pub const CONGESTION_BYTE: usize = field::CONG;

fixed_header!(
    /// A read/write view of a BTH.
    Header,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> Header<T> {
    /// The opcode byte.
    pub fn opcode(&self) -> u8 {
        self.get_u8(field::OPCODE)
    }

    /// SE: solicited event.
    pub fn solicited(&self) -> bool {
        self.get_u8(field::FLAGS) & 0x80 != 0
    }

    /// M: migration request.
    pub fn mig_req(&self) -> bool {
        self.get_u8(field::FLAGS) & 0x40 != 0
    }

    /// Pad count: bytes (0..=3) added to the payload to align it to 4 bytes.
    pub fn pad_count(&self) -> u8 {
        (self.get_u8(field::FLAGS) >> 4) & 0x3
    }

    /// Transport header version.
    pub fn tver(&self) -> u8 {
        self.get_u8(field::FLAGS) & 0x0f
    }

    /// Partition key.
    pub fn pkey(&self) -> u16 {
        self.get_u16(field::PKEY)
    }

    /// FECN: forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.get_u8(field::CONG) & 0x80 != 0
    }

    /// BECN: backward explicit congestion notification.
    pub fn becn(&self) -> bool {
        self.get_u8(field::CONG) & 0x40 != 0
    }

    /// The 6 reserved bits after FECN/BECN.
    pub fn reserved6(&self) -> u8 {
        self.get_u8(field::CONG) & 0x3f
    }

    /// Destination QP number (24 bits).
    pub fn dest_qp(&self) -> u32 {
        self.get_u24(field::DEST_QP)
    }

    /// AckReq: the responder is asked to acknowledge this packet.
    pub fn ack_req(&self) -> bool {
        self.get_u8(field::ACK) & 0x80 != 0
    }

    /// The 7 reserved bits after AckReq.
    pub fn reserved7(&self) -> u8 {
        self.get_u8(field::ACK) & 0x7f
    }

    /// Packet sequence number (24 bits).
    pub fn psn(&self) -> u32 {
        self.get_u24(field::PSN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    /// Set the opcode.
    pub fn set_opcode(&mut self, value: u8) {
        self.put_u8(field::OPCODE, value);
    }

    /// Set SE, M, pad count (low 2 bits) and TVer (low 4 bits) in one go.
    pub fn set_flags(&mut self, solicited: bool, mig_req: bool, pad_count: u8, tver: u8) {
        let v = (u8::from(solicited) << 7)
            | (u8::from(mig_req) << 6)
            | ((pad_count & 0x3) << 4)
            | (tver & 0x0f);
        self.put_u8(field::FLAGS, v);
    }

    /// Set the pad count (low 2 bits), keeping the other bits of that byte.
    pub fn set_pad_count(&mut self, pad: u8) {
        let v = (self.get_u8(field::FLAGS) & !0x30) | ((pad & 0x3) << 4);
        self.put_u8(field::FLAGS, v);
    }

    /// Set the partition key.
    pub fn set_pkey(&mut self, value: u16) {
        self.put_u16(field::PKEY, value);
    }

    /// Set FECN and BECN (reserved bits zero).
    pub fn set_congestion(&mut self, fecn: bool, becn: bool) {
        self.put_u8(field::CONG, (u8::from(fecn) << 7) | (u8::from(becn) << 6));
    }

    /// Set the destination QP (low 24 bits).
    pub fn set_dest_qp(&mut self, value: u32) {
        self.put_u24(field::DEST_QP, value);
    }

    /// Set AckReq (reserved bits zero).
    pub fn set_ack_req(&mut self, value: bool) {
        self.put_u8(field::ACK, u8::from(value) << 7);
    }

    /// Set the PSN (low 24 bits).
    pub fn set_psn(&mut self, value: u32) {
        self.put_u24(field::PSN, value);
    }
}

/// A parsed BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Opcode (one of [`opcode::ALL`]).
    pub opcode: u8,
    /// SE bit.
    pub solicited: bool,
    /// M bit.
    pub mig_req: bool,
    /// Pad count (0..=3).
    pub pad_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// FECN bit.
    pub fecn: bool,
    /// BECN bit.
    pub becn: bool,
    /// Destination QP (24 bits).
    pub dest_qp: u32,
    /// AckReq bit.
    pub ack_req: bool,
    /// PSN (24 bits).
    pub psn: u32,
}

impl Repr {
    /// Read a BTH. `Err(BadVersion)` unless TVer is 0; `Err(BadOpcode)` for an opcode not in
    /// [`opcode::ALL`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(header: &Header<&T>) -> Result<Repr> {
        header.check_len()?;
        if header.tver() != TVER {
            return Err(Error::BadVersion { got: header.tver() });
        }
        let op = header.opcode();
        if opcode::lookup(op).is_none() {
            return Err(Error::BadOpcode { got: op });
        }
        Ok(Repr {
            opcode: op,
            solicited: header.solicited(),
            mig_req: header.mig_req(),
            pad_count: header.pad_count(),
            pkey: header.pkey(),
            fecn: header.fecn(),
            becn: header.becn(),
            dest_qp: header.dest_qp(),
            ack_req: header.ack_req(),
            psn: header.psn(),
        })
    }

    /// The opcode's table entry (always `Some` for a parsed `Repr`).
    pub fn info(&self) -> Option<&'static opcode::OpcodeInfo> {
        opcode::lookup(self.opcode)
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the BTH (TVer 0, reserved bits zero). `Err(BadValue)` when the pad count exceeds 3
    /// or the QPN/PSN do not fit 24 bits; `Err(BadOpcode)` for an opcode outside the table.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, header: &mut Header<T>) -> Result<()> {
        if opcode::lookup(self.opcode).is_none() {
            return Err(Error::BadOpcode { got: self.opcode });
        }
        if self.pad_count > 3 {
            return Err(Error::BadValue { field: "bth.pad_count" });
        }
        check_u24(self.dest_qp, "bth.dest_qp")?;
        check_u24(self.psn, "bth.psn")?;
        header.check_len()?;
        header.set_opcode(self.opcode);
        header.set_flags(self.solicited, self.mig_req, self.pad_count, TVER);
        header.set_pkey(self.pkey);
        header.set_congestion(self.fecn, self.becn);
        header.set_dest_qp(self.dest_qp);
        header.set_ack_req(self.ack_req);
        header.set_psn(self.psn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RC_SEND_ONLY, SE, pad 2, pkey 0xffff, BECN, QP 0x000011, AckReq, PSN 0xabcdef.
    static BYTES: [u8; 12] =
        [0x04, 0xa0, 0xff, 0xff, 0x40, 0x00, 0x00, 0x11, 0x80, 0xab, 0xcd, 0xef];

    fn repr() -> Repr {
        Repr {
            opcode: opcode::RC_SEND_ONLY,
            solicited: true,
            mig_req: false,
            pad_count: 2,
            pkey: 0xffff,
            fecn: false,
            becn: true,
            dest_qp: 0x11,
            ack_req: true,
            psn: 0xab_cdef,
        }
    }

    #[test]
    fn test_parse() {
        let h = Header::new_checked(&BYTES[..]).unwrap();
        assert_eq!(Repr::parse(&h), Ok(repr()));
    }

    #[test]
    fn test_emit() {
        let mut b = [0x55u8; 12];
        repr().emit(&mut Header::new_unchecked(&mut b[..])).unwrap();
        assert_eq!(b, BYTES);
    }

    #[test]
    fn test_reserved_ignored() {
        let mut b = BYTES;
        b[4] |= 0x3f;
        b[8] |= 0x7f;
        let h = Header::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&h), Ok(repr()));
    }

    #[test]
    fn test_errors() {
        assert_eq!(Header::new_checked(&BYTES[..11]), Err(Error::Truncated { need: 12, got: 11 }));
        let mut b = BYTES;
        b[1] |= 0x01;
        assert_eq!(
            Repr::parse(&Header::new_checked(&b[..]).unwrap()),
            Err(Error::BadVersion { got: 1 })
        );
        let mut b = BYTES;
        b[0] = 0x15;
        assert_eq!(
            Repr::parse(&Header::new_checked(&b[..]).unwrap()),
            Err(Error::BadOpcode { got: 0x15 })
        );
        let mut out = [0u8; 12];
        let r = Repr { psn: 0x0100_0000, ..repr() };
        assert_eq!(
            r.emit(&mut Header::new_unchecked(&mut out[..])),
            Err(Error::BadValue { field: "bth.psn" })
        );
    }
}
