//! The ring buffer (`BPF_MAP_TYPE_RINGBUF`): one producer position and one consumer position
//! over a data area of `size` bytes (a power of two), records of an 8-byte header (kept here
//! only as accounting, as the kernel's header: the record's length with busy and discard bits)
//! and their data, each rounded up to 8 bytes, delivered in reservation order.
//!
//! The kernel maps the data area twice in a row so that a record crossing the end is
//! contiguous in memory. We get the same effect by allocating the data area twice over: a
//! record at ring offset `off` always lives at `[off, off + len)` of the doubled area, so it is
//! contiguous even when it runs past `size`. Live records span at most `size` bytes of
//! positions, so their ranges never overlap; capacity and the "full" rule are exactly the
//! kernel's (`new_prod - cons > size - 1` refuses the record).
//!
//! Record memory is written by the program between reserve and commit, then read by the
//! consumer; the mutex around the positions orders the two.

use super::{MapError, lock, read_bytes, write_bytes};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Header bytes before each record's data.
const HDR: u64 = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Busy,
    Committed,
    Discarded,
}

#[derive(Debug)]
struct Record {
    /// Producer position of the header.
    pos: u64,
    /// Data length.
    len: u32,
    state: State,
}

impl Record {
    fn total(&self) -> u64 {
        (self.len as u64 + HDR).div_ceil(8) * 8
    }
}

#[derive(Debug, Default)]
struct Positions {
    prod: u64,
    cons: u64,
    /// Records between `cons` and `prod`, oldest first.
    records: VecDeque<Record>,
}

/// A ring buffer's state (its data area is the map's value memory).
#[derive(Debug)]
pub(super) struct Ring {
    size: u64,
    pos: Mutex<Positions>,
    dropped: AtomicU64,
}

impl Ring {
    pub(super) fn new(size: u32) -> Ring {
        Ring { size: size as u64, pos: Mutex::default(), dropped: AtomicU64::new(0) }
    }

    /// Offset of position `p`'s header in the data area.
    fn off(&self, p: u64) -> u64 {
        p & (self.size - 1)
    }

    pub(super) fn reserve(&self, base: u64, size: u64) -> Option<u64> {
        let total = size.checked_add(HDR)?.div_ceil(8) * 8;
        let mut p = lock(&self.pos);
        if total > self.size || p.prod + total - p.cons > self.size - 1 {
            drop(p);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let pos = p.prod;
        p.prod += total;
        p.records.push_back(Record { pos, len: size as u32, state: State::Busy });
        Some(base + self.off(pos) + HDR)
    }

    pub(super) fn commit(&self, base: u64, addr: u64, discard: bool) -> Result<(), MapError> {
        let mut p = lock(&self.pos);
        let r = p
            .records
            .iter_mut()
            .find(|r| r.state == State::Busy && base + self.off(r.pos) + HDR == addr)
            .ok_or(MapError::Invalid("not a reserved ring buffer record"))?;
        r.state = if discard { State::Discarded } else { State::Committed };
        Ok(())
    }

    pub(super) fn output(&self, mem: &[AtomicU64], base: u64, data: &[u8]) -> Result<(), MapError> {
        let addr = self.reserve(base, data.len() as u64).ok_or(MapError::Again)?;
        write_bytes(mem, (addr - base) as usize, data);
        self.commit(base, addr, false)
    }

    pub(super) fn drain(&self, mem: &[AtomicU64], max: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut p = lock(&self.pos);
        while out.len() < max {
            let Some(r) = p.records.front() else { break };
            if r.state == State::Busy {
                break;
            }
            if r.state == State::Committed {
                let mut v = Vec::with_capacity(r.len as usize);
                read_bytes(mem, (self.off(r.pos) + HDR) as usize, r.len as usize, &mut v);
                out.push(v);
            }
            p.cons = r.pos + r.total();
            p.records.pop_front();
        }
        out
    }

    /// Whether `[addr, end)` is inside a reserved record's data.
    pub(super) fn contains(&self, base: u64, addr: u64, end: u64) -> bool {
        let p = lock(&self.pos);
        p.records.iter().any(|r| {
            let start = base + self.off(r.pos) + HDR;
            r.state == State::Busy && addr >= start && end <= start + r.len as u64
        })
    }

    /// Whether `addr` is a busy record's data address.
    pub(super) fn owns(&self, base: u64, addr: u64) -> bool {
        let p = lock(&self.pos);
        p.records.iter().any(|r| r.state == State::Busy && base + self.off(r.pos) + HDR == addr)
    }

    /// Committed records not yet drained.
    pub(super) fn pending(&self) -> usize {
        lock(&self.pos).records.iter().filter(|r| r.state == State::Committed).count()
    }

    pub(super) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}
