//! The in-memory form of work requests. `post_send` / `post_recv` write WQEs into the QP's ring
//! (in host or device memory) and ring the doorbell; the engine fetches and decodes them from
//! there, as a hardware NIC fetches WQEs by DMA. A WQE that does not decode (the ring memory was
//! overwritten) completes with `LocQpOpErr`.
//!
//! Send WQE, [`SQ_SLOT`] bytes, little-endian:
//!
//! | off | field |
//! |----:|-------|
//! | 0 | wr_id u64 |
//! | 8 | opcode u8 (0 SEND, 1 SEND_IMM, 2 SEND_INV, 3 WRITE, 4 WRITE_IMM, 5 READ, 6 CMP_SWAP, 7 FETCH_ADD, 8 FLUSH, 9 ATOMIC_WRITE) |
//! | 9 | flags u8 (1 signaled, 2 solicited, 4 fence) |
//! | 10 | SGE count u8 |
//! | 11 | FLUSH: selectivity level u8 (bits 7:4), placement type (bits 3:0) |
//! | 12 | immediate data / rkey to invalidate / FLUSH length u32 |
//! | 16 | remote address u64 |
//! | 24 | rkey u32 |
//! | 32 | compare / add / ATOMIC WRITE value u64 |
//! | 40 | swap u64 |
//! | 48 | 4 SGEs of 16 bytes: address u64, length u32, lkey u32 |
//!
//! Receive WQE, [`RQ_SLOT`] bytes: wr_id u64, SGE count u8 at 8, SGEs from 16.

use crate::verbs::{FlushLevel, MAX_SGE, RecvWr, Remote, SendWr, SgList, Sge, WrOp};

/// Bytes of one send WQE slot.
pub const SQ_SLOT: usize = 128;
/// Offset in a send slot of the compare / add / ATOMIC WRITE value (8 bytes, little-endian):
/// an ATOMIC WRITE's payload is sent straight from there.
pub const SQ_VALUE_OFF: usize = 32;
/// Bytes of one receive WQE slot.
pub const RQ_SLOT: usize = 80;

/// A WQE that does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WqeError {
    /// Unknown opcode byte.
    BadOpcode(u8),
    /// A FLUSH with a reserved selectivity level.
    BadFlushLevel(u8),
    /// SGE count above [`MAX_SGE`].
    BadSgeCount(u8),
    /// The slot is shorter than a WQE.
    Short,
}

fn put_sges(b: &mut [u8], at: usize, sgl: &SgList) {
    for (i, s) in sgl.as_slice().iter().enumerate() {
        let o = at + i * 16;
        b[o..o + 8].copy_from_slice(&s.addr.to_le_bytes());
        b[o + 8..o + 12].copy_from_slice(&s.len.to_le_bytes());
        b[o + 12..o + 16].copy_from_slice(&s.lkey.to_le_bytes());
    }
}

fn get_sges(b: &[u8], at: usize, n: u8) -> Result<SgList, WqeError> {
    if usize::from(n) > MAX_SGE {
        return Err(WqeError::BadSgeCount(n));
    }
    let mut v = [Sge::default(); MAX_SGE];
    for (i, s) in v.iter_mut().enumerate().take(usize::from(n)) {
        let o = at + i * 16;
        *s = Sge { addr: u64_at(b, o), len: u32_at(b, o + 8), lkey: u32_at(b, o + 12) };
    }
    SgList::new(&v[..usize::from(n)]).map_err(|_| WqeError::BadSgeCount(n))
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[o..o + 4]);
    u32::from_le_bytes(a)
}

/// Write `wr` into a send slot (`slot.len() >= SQ_SLOT`).
pub fn encode_send(wr: &SendWr, slot: &mut [u8]) {
    let b = &mut slot[..SQ_SLOT];
    b.fill(0);
    b[0..8].copy_from_slice(&wr.wr_id.to_le_bytes());
    let mut flush = 0u8;
    let (op, imm, remote, c, s) = match wr.op {
        WrOp::Send => (0u8, 0u32, Remote::default(), 0u64, 0u64),
        WrOp::SendImm { imm } => (1, imm, Remote::default(), 0, 0),
        WrOp::SendInv { rkey } => (2, rkey, Remote::default(), 0, 0),
        WrOp::Write { remote } => (3, 0, remote, 0, 0),
        WrOp::WriteImm { remote, imm } => (4, imm, remote, 0, 0),
        WrOp::Read { remote } => (5, 0, remote, 0, 0),
        WrOp::CmpSwap { remote, compare, swap } => (6, 0, remote, compare, swap),
        WrOp::FetchAdd { remote, add } => (7, 0, remote, add, 0),
        WrOp::Flush { remote, len, level, placement } => {
            flush = (level.selectivity() << 4) | (placement & 0x0f);
            (8, len, remote, 0, 0)
        }
        WrOp::AtomicWrite { remote, value } => (9, 0, remote, value, 0),
    };
    b[8] = op;
    b[11] = flush;
    b[9] = u8::from(wr.signaled) | (u8::from(wr.solicited) << 1) | (u8::from(wr.fence) << 2);
    b[10] = wr.sgl.as_slice().len() as u8;
    b[12..16].copy_from_slice(&imm.to_le_bytes());
    b[16..24].copy_from_slice(&remote.addr.to_le_bytes());
    b[24..28].copy_from_slice(&remote.rkey.to_le_bytes());
    b[32..40].copy_from_slice(&c.to_le_bytes());
    b[40..48].copy_from_slice(&s.to_le_bytes());
    put_sges(b, 48, &wr.sgl);
}

/// Read a send WQE from its slot.
pub fn decode_send(slot: &[u8]) -> Result<SendWr, WqeError> {
    if slot.len() < SQ_SLOT {
        return Err(WqeError::Short);
    }
    let b = slot;
    let imm = u32_at(b, 12);
    let remote = Remote { addr: u64_at(b, 16), rkey: u32_at(b, 24) };
    let (c, s) = (u64_at(b, 32), u64_at(b, 40));
    let op = match b[8] {
        0 => WrOp::Send,
        1 => WrOp::SendImm { imm },
        2 => WrOp::SendInv { rkey: imm },
        3 => WrOp::Write { remote },
        4 => WrOp::WriteImm { remote, imm },
        5 => WrOp::Read { remote },
        6 => WrOp::CmpSwap { remote, compare: c, swap: s },
        7 => WrOp::FetchAdd { remote, add: c },
        8 => WrOp::Flush {
            remote,
            len: imm,
            level: FlushLevel::from_selectivity(b[11] >> 4)
                .ok_or(WqeError::BadFlushLevel(b[11] >> 4))?,
            placement: b[11] & 0x0f,
        },
        9 => WrOp::AtomicWrite { remote, value: c },
        x => return Err(WqeError::BadOpcode(x)),
    };
    let f = b[9];
    Ok(SendWr {
        wr_id: u64_at(b, 0),
        op,
        sgl: get_sges(b, 48, b[10])?,
        signaled: f & 1 != 0,
        solicited: f & 2 != 0,
        fence: f & 4 != 0,
    })
}

/// Write `wr` into a receive slot (`slot.len() >= RQ_SLOT`).
pub fn encode_recv(wr: &RecvWr, slot: &mut [u8]) {
    let b = &mut slot[..RQ_SLOT];
    b.fill(0);
    b[0..8].copy_from_slice(&wr.wr_id.to_le_bytes());
    b[8] = wr.sgl.as_slice().len() as u8;
    put_sges(b, 16, &wr.sgl);
}

/// Read a receive WQE from its slot.
pub fn decode_recv(slot: &[u8]) -> Result<RecvWr, WqeError> {
    if slot.len() < RQ_SLOT {
        return Err(WqeError::Short);
    }
    Ok(RecvWr { wr_id: u64_at(slot, 0), sgl: get_sges(slot, 16, slot[8])? })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_sgl() -> impl Strategy<Value = SgList> {
        proptest::collection::vec((any::<u64>(), any::<u32>(), any::<u32>()), 0..=MAX_SGE).prop_map(
            |v| {
                let s: Vec<Sge> =
                    v.into_iter().map(|(addr, len, lkey)| Sge { addr, len, lkey }).collect();
                SgList::new(&s).unwrap()
            },
        )
    }

    fn arb_op() -> impl Strategy<Value = WrOp> {
        let r = (any::<u64>(), any::<u32>()).prop_map(|(addr, rkey)| Remote { addr, rkey });
        prop_oneof![
            Just(WrOp::Send),
            any::<u32>().prop_map(|imm| WrOp::SendImm { imm }),
            any::<u32>().prop_map(|rkey| WrOp::SendInv { rkey }),
            r.clone().prop_map(|remote| WrOp::Write { remote }),
            (r.clone(), any::<u32>()).prop_map(|(remote, imm)| WrOp::WriteImm { remote, imm }),
            r.clone().prop_map(|remote| WrOp::Read { remote }),
            (r.clone(), any::<u64>(), any::<u64>())
                .prop_map(|(remote, compare, swap)| WrOp::CmpSwap { remote, compare, swap }),
            (r.clone(), any::<u64>()).prop_map(|(remote, add)| WrOp::FetchAdd { remote, add }),
            (r.clone(), any::<u32>(), any::<bool>(), 0u8..16).prop_map(
                |(remote, len, mr, placement)| {
                    let level = if mr { FlushLevel::Region } else { FlushLevel::Range };
                    WrOp::Flush { remote, len, level, placement }
                }
            ),
            (r, any::<u64>()).prop_map(|(remote, value)| WrOp::AtomicWrite { remote, value }),
        ]
    }

    proptest! {
        #[test]
        fn send_round_trip(wr_id: u64, op in arb_op(), sgl in arb_sgl(), sig: bool, sol: bool, fence: bool) {
            let wr = SendWr { wr_id, op, sgl, signaled: sig, solicited: sol, fence };
            let mut slot = [0xEEu8; SQ_SLOT];
            encode_send(&wr, &mut slot);
            prop_assert_eq!(decode_send(&slot), Ok(wr));
        }

        #[test]
        fn recv_round_trip(wr_id: u64, sgl in arb_sgl()) {
            let wr = RecvWr { wr_id, sgl };
            let mut slot = [0xEEu8; RQ_SLOT];
            encode_recv(&wr, &mut slot);
            prop_assert_eq!(decode_recv(&slot), Ok(wr));
        }

        /// Arbitrary slot bytes decode or fail with a typed error, never panic.
        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_send(&b);
            let _ = decode_recv(&b);
        }
    }
}
