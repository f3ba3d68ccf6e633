//! The InfiniBand extension transport headers that follow the BTH (IBTA Vol 1 section 9.3):
//! RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH and DETH, and the FETH of the IBTA 1.5 RC
//! FLUSH (as Linux rxe sends it). All fields are big-endian.
//!
//! Which of them a packet carries, and in what order, is decided by the BTH opcode
//! ([`super::opcode`]).

use super::check_u24;
use crate::{Error, Result};

// ---------------------------------------------------------------------------------------------
// RETH

/// Length of the RETH.
pub const RETH_LEN: usize = 16;

fixed_header!(
    /// RDMA Extended Transport Header: virtual address (64), R_Key (32), DMA length (32).
    Reth,
    RETH_LEN
);

impl<T: AsRef<[u8]>> Reth<T> {
    /// Remote virtual address.
    pub fn va(&self) -> u64 {
        self.get_u64(0)
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.get_u32(8)
    }
    /// DMA length in bytes.
    pub fn dma_len(&self) -> u32 {
        self.get_u32(12)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    /// Set the remote virtual address.
    pub fn set_va(&mut self, v: u64) {
        self.put_u64(0, v);
    }
    /// Set the remote key.
    pub fn set_rkey(&mut self, v: u32) {
        self.put_u32(8, v);
    }
    /// Set the DMA length.
    pub fn set_dma_len(&mut self, v: u32) {
        self.put_u32(12, v);
    }
}

/// A parsed RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RethRepr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// DMA length in bytes.
    pub dma_len: u32,
}

impl RethRepr {
    /// Read a RETH.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &Reth<&T>) -> Result<RethRepr> {
        h.check_len()?;
        Ok(RethRepr { va: h.va(), rkey: h.rkey(), dma_len: h.dma_len() })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        RETH_LEN
    }
    /// Write a RETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Reth<T>) -> Result<()> {
        h.check_len()?;
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_dma_len(self.dma_len);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// AETH

/// Length of the AETH.
pub const AETH_LEN: usize = 4;

fixed_header!(
    /// ACK Extended Transport Header: syndrome (8), MSN (24).
    Aeth,
    AETH_LEN
);

impl<T: AsRef<[u8]>> Aeth<T> {
    /// The raw syndrome byte.
    pub fn syndrome_raw(&self) -> u8 {
        self.get_u8(0)
    }
    /// Message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        self.get_u24(1)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Aeth<T> {
    /// Set the raw syndrome byte.
    pub fn set_syndrome_raw(&mut self, v: u8) {
        self.put_u8(0, v);
    }
    /// Set the MSN (low 24 bits).
    pub fn set_msn(&mut self, v: u32) {
        self.put_u24(1, v);
    }
}

/// A NAK code (AETH syndrome `011xxxxx`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// PSN sequence error (0).
    PsnSequenceError,
    /// Invalid request (1).
    InvalidRequest,
    /// Remote access error (2).
    RemoteAccessError,
    /// Remote operational error (3).
    RemoteOperationalError,
    /// Invalid RD request (4).
    InvalidRdRequest,
}

impl NakCode {
    /// The 5-bit code.
    pub const fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
        }
    }

    /// The NAK code for a 5-bit value; `None` for reserved values.
    pub const fn from_code(code: u8) -> Option<NakCode> {
        Some(match code {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            _ => return None,
        })
    }
}

/// The meaning of an AETH syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// ACK (`000ccccc`) with a 5-bit credit count (31 means "credits not limited").
    Ack {
        /// Credit count, 0..=31.
        credits: u8,
    },
    /// RNR NAK (`001ttttt`) with a 5-bit RNR timer code.
    RnrNak {
        /// Encoded minimum RNR NAK timer, 0..=31.
        timer: u8,
    },
    /// NAK (`011nnnnn`).
    Nak(NakCode),
}

/// Syndrome value field mask.
const SYN_VALUE: u8 = 0x1f;

impl Syndrome {
    /// Decode a syndrome byte. `Err(BadValue)` for the reserved bit 7, the reserved type `10`,
    /// or a reserved NAK code.
    pub const fn from_byte(b: u8) -> Result<Syndrome> {
        let value = b & SYN_VALUE;
        match b >> 5 {
            0b000 => Ok(Syndrome::Ack { credits: value }),
            0b001 => Ok(Syndrome::RnrNak { timer: value }),
            0b011 => match NakCode::from_code(value) {
                Some(c) => Ok(Syndrome::Nak(c)),
                None => Err(Error::BadValue { field: "aeth.nak_code" }),
            },
            _ => Err(Error::BadValue { field: "aeth.syndrome" }),
        }
    }

    /// Encode; `Err(BadValue)` when a credit count or timer exceeds 31.
    pub const fn to_byte(self) -> Result<u8> {
        match self {
            Syndrome::Ack { credits } if credits <= SYN_VALUE => Ok(credits),
            Syndrome::RnrNak { timer } if timer <= SYN_VALUE => Ok(0x20 | timer),
            Syndrome::Nak(c) => Ok(0x60 | c.code()),
            _ => Err(Error::BadValue { field: "aeth.syndrome" }),
        }
    }
}

/// A parsed AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AethRepr {
    /// ACK, RNR NAK or NAK.
    pub syndrome: Syndrome,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl AethRepr {
    /// Read an AETH; `Err(BadValue)` for a reserved syndrome.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &Aeth<&T>) -> Result<AethRepr> {
        h.check_len()?;
        Ok(AethRepr { syndrome: Syndrome::from_byte(h.syndrome_raw())?, msn: h.msn() })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        AETH_LEN
    }
    /// Write an AETH; `Err(BadValue)` for an out-of-range syndrome value or MSN.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Aeth<T>) -> Result<()> {
        let s = self.syndrome.to_byte()?;
        check_u24(self.msn, "aeth.msn")?;
        h.check_len()?;
        h.set_syndrome_raw(s);
        h.set_msn(self.msn);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// AtomicETH

/// Length of the AtomicETH.
pub const ATOMIC_ETH_LEN: usize = 28;

fixed_header!(
    /// Atomic Extended Transport Header: VA (64), R_Key (32), swap/add data (64), compare data (64).
    AtomicEth,
    ATOMIC_ETH_LEN
);

impl<T: AsRef<[u8]>> AtomicEth<T> {
    /// Remote virtual address.
    pub fn va(&self) -> u64 {
        self.get_u64(0)
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.get_u32(8)
    }
    /// Swap (CmpSwap) or add (FetchAdd) operand.
    pub fn swap_add(&self) -> u64 {
        self.get_u64(12)
    }
    /// Compare operand (CmpSwap).
    pub fn compare(&self) -> u64 {
        self.get_u64(20)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEth<T> {
    /// Set the remote virtual address.
    pub fn set_va(&mut self, v: u64) {
        self.put_u64(0, v);
    }
    /// Set the remote key.
    pub fn set_rkey(&mut self, v: u32) {
        self.put_u32(8, v);
    }
    /// Set the swap/add operand.
    pub fn set_swap_add(&mut self, v: u64) {
        self.put_u64(12, v);
    }
    /// Set the compare operand.
    pub fn set_compare(&mut self, v: u64) {
        self.put_u64(20, v);
    }
}

/// A parsed AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicEthRepr {
    /// Remote virtual address (8-byte aligned for a valid request; not checked here).
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap or add operand.
    pub swap_add: u64,
    /// Compare operand.
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Read an AtomicETH.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &AtomicEth<&T>) -> Result<AtomicEthRepr> {
        h.check_len()?;
        Ok(AtomicEthRepr {
            va: h.va(),
            rkey: h.rkey(),
            swap_add: h.swap_add(),
            compare: h.compare(),
        })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        ATOMIC_ETH_LEN
    }
    /// Write an AtomicETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicEth<T>) -> Result<()> {
        h.check_len()?;
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_swap_add(self.swap_add);
        h.set_compare(self.compare);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// AtomicAckETH

/// Length of the AtomicAckETH.
pub const ATOMIC_ACK_ETH_LEN: usize = 8;

fixed_header!(
    /// Atomic ACK Extended Transport Header: the original remote data (64).
    AtomicAckEth,
    ATOMIC_ACK_ETH_LEN
);

impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    /// The value at the remote address before the atomic operation.
    pub fn orig_data(&self) -> u64 {
        self.get_u64(0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEth<T> {
    /// Set the original data.
    pub fn set_orig_data(&mut self, v: u64) {
        self.put_u64(0, v);
    }
}

/// A parsed AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicAckEthRepr {
    /// The value at the remote address before the operation.
    pub orig_data: u64,
}

impl AtomicAckEthRepr {
    /// Read an AtomicAckETH.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &AtomicAckEth<&T>) -> Result<AtomicAckEthRepr> {
        h.check_len()?;
        Ok(AtomicAckEthRepr { orig_data: h.orig_data() })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        ATOMIC_ACK_ETH_LEN
    }
    /// Write an AtomicAckETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicAckEth<T>) -> Result<()> {
        h.check_len()?;
        h.set_orig_data(self.orig_data);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// ImmDt, IETH: one 32-bit word each

/// Length of the ImmDt header.
pub const IMMDT_LEN: usize = 4;

fixed_header!(
    /// Immediate data (32 bits, delivered to the receiver's completion as is).
    ImmDt,
    IMMDT_LEN
);

impl<T: AsRef<[u8]>> ImmDt<T> {
    /// The immediate data, read big-endian (network order).
    pub fn imm(&self) -> u32 {
        self.get_u32(0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDt<T> {
    /// Set the immediate data (written big-endian).
    pub fn set_imm(&mut self, v: u32) {
        self.put_u32(0, v);
    }
}

/// A parsed ImmDt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ImmDtRepr {
    /// Immediate data (big-endian on the wire).
    pub imm: u32,
}

impl ImmDtRepr {
    /// Read an ImmDt.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &ImmDt<&T>) -> Result<ImmDtRepr> {
        h.check_len()?;
        Ok(ImmDtRepr { imm: h.imm() })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        IMMDT_LEN
    }
    /// Write an ImmDt.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut ImmDt<T>) -> Result<()> {
        h.check_len()?;
        h.set_imm(self.imm);
        Ok(())
    }
}

/// Length of the IETH.
pub const IETH_LEN: usize = 4;

fixed_header!(
    /// Invalidate Extended Transport Header: the R_Key to invalidate (32).
    Ieth,
    IETH_LEN
);

impl<T: AsRef<[u8]>> Ieth<T> {
    /// The R_Key to invalidate.
    pub fn rkey(&self) -> u32 {
        self.get_u32(0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ieth<T> {
    /// Set the R_Key to invalidate.
    pub fn set_rkey(&mut self, v: u32) {
        self.put_u32(0, v);
    }
}

/// A parsed IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IethRepr {
    /// The R_Key to invalidate.
    pub rkey: u32,
}

impl IethRepr {
    /// Read an IETH.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &Ieth<&T>) -> Result<IethRepr> {
        h.check_len()?;
        Ok(IethRepr { rkey: h.rkey() })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        IETH_LEN
    }
    /// Write an IETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Ieth<T>) -> Result<()> {
        h.check_len()?;
        h.set_rkey(self.rkey);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// DETH

/// Length of the DETH.
pub const DETH_LEN: usize = 8;

fixed_header!(
    /// Datagram Extended Transport Header: Q_Key (32), reserved (8), source QP (24).
    Deth,
    DETH_LEN
);

impl<T: AsRef<[u8]>> Deth<T> {
    /// Queue key.
    pub fn qkey(&self) -> u32 {
        self.get_u32(0)
    }
    /// The reserved byte.
    pub fn reserved(&self) -> u8 {
        self.get_u8(4)
    }
    /// Source QP number (24 bits).
    pub fn src_qp(&self) -> u32 {
        self.get_u24(5)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    /// Set the queue key.
    pub fn set_qkey(&mut self, v: u32) {
        self.put_u32(0, v);
    }
    /// Set the reserved byte.
    pub fn set_reserved(&mut self, v: u8) {
        self.put_u8(4, v);
    }
    /// Set the source QP (low 24 bits).
    pub fn set_src_qp(&mut self, v: u32) {
        self.put_u24(5, v);
    }
}

/// A parsed DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DethRepr {
    /// Queue key.
    pub qkey: u32,
    /// Source QP (24 bits).
    pub src_qp: u32,
}

impl DethRepr {
    /// Read a DETH (the reserved byte is ignored).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &Deth<&T>) -> Result<DethRepr> {
        h.check_len()?;
        Ok(DethRepr { qkey: h.qkey(), src_qp: h.src_qp() })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        DETH_LEN
    }
    /// Write a DETH (reserved byte zero); `Err(BadValue)` when the source QP exceeds 24 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Deth<T>) -> Result<()> {
        check_u24(self.src_qp, "deth.src_qp")?;
        h.check_len()?;
        h.set_qkey(self.qkey);
        h.set_reserved(0);
        h.set_src_qp(self.src_qp);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// FETH

/// Length of the FETH.
pub const FETH_LEN: usize = 4;

/// FETH placement-type bits (3:0).
const FETH_PLT_MASK: u32 = 0x0000_000f;
/// FETH selectivity-level bits (5:4).
const FETH_SEL_MASK: u32 = 0x0000_0030;
/// Shift of the selectivity level.
const FETH_SEL_SHIFT: u32 = 4;

fixed_header!(
    /// FLUSH Extended Transport Header (IBTA 1.5): one 32-bit word, 26 reserved bits, the
    /// selectivity level (bits 5:4) and the placement type (bits 3:0).
    Feth,
    FETH_LEN
);

impl<T: AsRef<[u8]>> Feth<T> {
    /// The whole word, reserved bits included.
    pub fn bits(&self) -> u32 {
        self.get_u32(0)
    }
    /// Placement type (4 bits): bit 0 global visibility, bit 1 persistence.
    pub fn placement_type(&self) -> u8 {
        (self.bits() & FETH_PLT_MASK) as u8
    }
    /// Selectivity level (2 bits): 0 the RETH's memory range, 1 the whole memory region.
    pub fn selectivity_level(&self) -> u8 {
        ((self.bits() & FETH_SEL_MASK) >> FETH_SEL_SHIFT) as u8
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Feth<T> {
    /// Set the whole word.
    pub fn set_bits(&mut self, v: u32) {
        self.put_u32(0, v);
    }
}

/// Placement type bit: make the flushed range globally visible.
pub const FLUSH_GLOBAL_VISIBILITY: u8 = 0x1;
/// Placement type bit: make the flushed range persistent.
pub const FLUSH_PERSISTENCE: u8 = 0x2;

/// A parsed FETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FethRepr {
    /// Placement type, 0..=15 ([`FLUSH_GLOBAL_VISIBILITY`], [`FLUSH_PERSISTENCE`]).
    pub placement_type: u8,
    /// Selectivity level, 0..=3 (0 memory range, 1 memory region).
    pub selectivity_level: u8,
}

impl FethRepr {
    /// Read a FETH (the reserved bits are ignored, as rxe does).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &Feth<&T>) -> Result<FethRepr> {
        h.check_len()?;
        Ok(FethRepr {
            placement_type: h.placement_type(),
            selectivity_level: h.selectivity_level(),
        })
    }
    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        FETH_LEN
    }
    /// Write a FETH (reserved bits zero); `Err(BadValue)` when the placement type exceeds 4
    /// bits or the selectivity level 2 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Feth<T>) -> Result<()> {
        if u32::from(self.placement_type) > FETH_PLT_MASK {
            return Err(Error::BadValue { field: "feth.placement_type" });
        }
        if u32::from(self.selectivity_level) > FETH_SEL_MASK >> FETH_SEL_SHIFT {
            return Err(Error::BadValue { field: "feth.selectivity_level" });
        }
        h.check_len()?;
        h.set_bits(
            (u32::from(self.selectivity_level) << FETH_SEL_SHIFT) | u32::from(self.placement_type),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reth_bytes() {
        let b = [1, 2, 3, 4, 5, 6, 7, 8, 0xaa, 0xbb, 0xcc, 0xdd, 0, 0, 0x10, 0];
        let r = RethRepr::parse(&Reth::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(r, RethRepr { va: 0x0102_0304_0506_0708, rkey: 0xaabb_ccdd, dma_len: 4096 });
        let mut out = [0u8; 16];
        r.emit(&mut Reth::new_unchecked(&mut out[..])).unwrap();
        assert_eq!(out, b);
        assert_eq!(Reth::new_checked(&b[..15]), Err(Error::Truncated { need: 16, got: 15 }));
    }

    #[test]
    fn aeth_syndromes() {
        let cases: [(u8, Syndrome); 5] = [
            (0x1f, Syndrome::Ack { credits: 31 }),
            (0x00, Syndrome::Ack { credits: 0 }),
            (0x2e, Syndrome::RnrNak { timer: 14 }),
            (0x60, Syndrome::Nak(NakCode::PsnSequenceError)),
            (0x63, Syndrome::Nak(NakCode::RemoteOperationalError)),
        ];
        for (byte, syn) in cases {
            let b = [byte, 0x12, 0x34, 0x56];
            let r = AethRepr::parse(&Aeth::new_checked(&b[..]).unwrap()).unwrap();
            assert_eq!(r, AethRepr { syndrome: syn, msn: 0x12_3456 });
            let mut out = [0u8; 4];
            r.emit(&mut Aeth::new_unchecked(&mut out[..])).unwrap();
            assert_eq!(out, b);
        }
        for (byte, field) in
            [(0x40, "aeth.syndrome"), (0x80, "aeth.syndrome"), (0x65, "aeth.nak_code")]
        {
            let b = [byte, 0, 0, 1];
            assert_eq!(
                AethRepr::parse(&Aeth::new_checked(&b[..]).unwrap()),
                Err(Error::BadValue { field })
            );
        }
    }

    #[test]
    fn atomic_bytes() {
        let mut b = [0u8; 28];
        b[7] = 8; // va = 8
        b[11] = 0x42; // rkey
        b[19] = 1; // add 1
        b[27] = 2; // compare 2
        let r = AtomicEthRepr::parse(&AtomicEth::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(r, AtomicEthRepr { va: 8, rkey: 0x42, swap_add: 1, compare: 2 });
        let mut out = [0xffu8; 28];
        r.emit(&mut AtomicEth::new_unchecked(&mut out[..])).unwrap();
        assert_eq!(out, b);
        let a = [0, 0, 0, 0, 0, 0, 0x01, 0x00];
        assert_eq!(
            AtomicAckEthRepr::parse(&AtomicAckEth::new_checked(&a[..]).unwrap()),
            Ok(AtomicAckEthRepr { orig_data: 256 })
        );
    }

    #[test]
    fn deth_bytes() {
        let b = [0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01];
        let r = DethRepr::parse(&Deth::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(r, DethRepr { qkey: 0x8001_0000, src_qp: 1 });
        let mut out = [0xffu8; 8];
        r.emit(&mut Deth::new_unchecked(&mut out[..])).unwrap();
        assert_eq!(out, b);
        let bad = DethRepr { qkey: 0, src_qp: 0x0100_0000 };
        assert_eq!(
            bad.emit(&mut Deth::new_unchecked(&mut out[..])),
            Err(Error::BadValue { field: "deth.src_qp" })
        );
    }

    #[test]
    fn imm_ieth_bytes() {
        let b = [0xde, 0xad, 0xbe, 0xef];
        assert_eq!(
            ImmDtRepr::parse(&ImmDt::new_checked(&b[..]).unwrap()),
            Ok(ImmDtRepr { imm: 0xdead_beef })
        );
        assert_eq!(
            IethRepr::parse(&Ieth::new_checked(&b[..]).unwrap()),
            Ok(IethRepr { rkey: 0xdead_beef })
        );
        assert_eq!(ImmDt::new_checked(&b[..3]), Err(Error::Truncated { need: 4, got: 3 }));
    }

    #[test]
    fn feth_bytes() {
        // Selectivity 1 (memory region), placement 3 (visibility + persistence), reserved bits
        // set: they are ignored on parse and written as zero.
        let b = [0xff, 0xff, 0xff, 0xd3];
        let r = FethRepr::parse(&Feth::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(r, FethRepr { placement_type: 3, selectivity_level: 1 });
        let mut out = [0xffu8; 4];
        r.emit(&mut Feth::new_unchecked(&mut out[..])).unwrap();
        assert_eq!(out, [0, 0, 0, 0x13]);
        let bad = FethRepr { placement_type: 16, selectivity_level: 0 };
        assert_eq!(
            bad.emit(&mut Feth::new_unchecked(&mut out[..])),
            Err(Error::BadValue { field: "feth.placement_type" })
        );
        let bad = FethRepr { placement_type: 0, selectivity_level: 4 };
        assert_eq!(
            bad.emit(&mut Feth::new_unchecked(&mut out[..])),
            Err(Error::BadValue { field: "feth.selectivity_level" })
        );
        assert_eq!(Feth::new_checked(&b[..3]), Err(Error::Truncated { need: 4, got: 3 }));
    }
}
