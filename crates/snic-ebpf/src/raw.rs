//! The only place the eBPF runtime touches memory through raw addresses.
//!
//! eBPF programs see host addresses (as in the kernel): `r10` points into the run's stack,
//! `data`/`data_end` into the packet buffer, a map lookup returns the address of a value.
//! [`Memory`] is the table of regions one run may touch (its stack, its context, the packet
//! window, the maps' value memory, the NIC-core arguments). Every access the interpreter and
//! the helpers make goes through it and is checked against that table first, so even a program
//! that slipped past the verifier (or a bug in `prepare`) ends as a typed fault, never as
//! undefined behaviour. The JIT does not come through here (like the kernel's JIT, it runs
//! verified programs unchecked).
//!
//! Soundness rests on one rule: a region is added only from a Rust borrow that outlives the
//! [`Memory`] (`&'a mut [u8]`, `&'a mut [u64]`), so the memory is live and not otherwise
//! accessed while the run goes on. Map values are the maps module's memory: [`Map::contains`]
//! answers whether a range lies inside a live value (or a reserved ring-buffer record), and
//! values are shared with other workers exactly as in the kernel (atomic instructions are
//! real atomics there).
//!
//! One caveat, stated plainly: a program's plain (non-atomic) loads and stores to a map value
//! may run at the same time as another worker's, or as the control plane's reads and writes of
//! the same value. In the kernel that is an accepted race (the value is just bytes, programs
//! that care use atomics); in Rust's memory model it is a data race on that memory. It cannot
//! touch memory outside the value, and the maps module itself reads and writes values only with
//! atomic word operations.
#![allow(
    unsafe_code,
    reason = "checked loads, stores and atomics at program addresses; each block has a SAFETY \
              comment"
)]

use crate::maps::Map;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Most fixed regions one run has (stack, context, eight NIC-core arguments, spare).
const MAX_REGIONS: usize = 12;

/// One range of addresses a run may touch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Region {
    start: u64,
    len: u64,
    writable: bool,
}

impl Region {
    /// First address.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for an empty region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// One past the last address.
    pub fn end(&self) -> u64 {
        self.start + self.len
    }

    /// Whether programs may write it.
    pub fn writable(&self) -> bool {
        self.writable
    }

    #[inline]
    fn covers(&self, addr: u64, len: u64) -> bool {
        addr >= self.start
            && addr.wrapping_sub(self.start).checked_add(len).is_some_and(|e| e <= self.len)
    }
}

/// Context structures (all-integer `#[repr(C)]` structs without padding) that a run exposes
/// to its program as raw bytes.
///
/// # Safety
/// Implementors must be `#[repr(C)]`, contain only integer fields and have no padding bytes,
/// so that every byte is initialised and any bit pattern is valid.
pub(crate) unsafe trait CtxBytes {}

// SAFETY: `XdpCtx` is `#[repr(C)]`: three u64 then four u32 (the last one explicit padding),
// 40 bytes, no implicit padding; any bit pattern is valid.
unsafe impl CtxBytes for crate::vm::XdpCtx {}
// SAFETY: `CoreCtx` is `#[repr(C)]`: u64, u64, u32, u32, [u64; 8], [u32; 8], all naturally
// aligned with no implicit padding (120 bytes); any bit pattern is valid.
unsafe impl CtxBytes for crate::core::CoreCtx {}

/// The regions of one run, and the checked accesses to them.
#[derive(Debug)]
pub struct Memory<'a> {
    regions: [Region; MAX_REGIONS],
    count: usize,
    ctx: Region,
    packet: Region,
    packet_buf: Region,
    maps: &'a [Arc<Map>],
    _borrow: PhantomData<&'a mut [u8]>,
}

/// A read-modify-write atomic operation (`BPF_ATOMIC` with its `imm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// `+=`.
    Add,
    /// `|=`.
    Or,
    /// `&=`.
    And,
    /// `^=`.
    Xor,
    /// Exchange.
    Xchg,
}

impl<'a> Memory<'a> {
    /// A table with no region but the value memory of `maps`.
    pub(crate) fn new(maps: &'a [Arc<Map>]) -> Memory<'a> {
        Memory {
            regions: [Region::default(); MAX_REGIONS],
            count: 0,
            ctx: Region::default(),
            packet: Region::default(),
            packet_buf: Region::default(),
            maps,
            _borrow: PhantomData,
        }
    }

    fn push(&mut self, r: Region) -> Option<Region> {
        let slot = self.regions.get_mut(self.count)?;
        *slot = r;
        self.count += 1;
        Some(r)
    }

    /// Adds a writable region (a stack, an argument). `None` when the table is full.
    pub(crate) fn add(&mut self, s: &'a mut [u8]) -> Option<Region> {
        self.push(Region { start: s.as_mut_ptr() as u64, len: s.len() as u64, writable: true })
    }

    /// Adds a writable region of 8-byte words (the stack).
    pub(crate) fn add_words(&mut self, s: &'a mut [u64]) -> Option<Region> {
        self.push(Region { start: s.as_mut_ptr() as u64, len: 8 * s.len() as u64, writable: true })
    }

    /// Sets the context (read-only to programs; helpers change it with
    /// [`Memory::write_ctx_u64`]). Returns its address.
    pub(crate) fn set_ctx<T: CtxBytes>(&mut self, ctx: &'a mut T) -> u64 {
        let start = ctx as *mut T as u64;
        self.ctx = Region { start, len: std::mem::size_of::<T>() as u64, writable: false };
        start
    }

    /// Sets the packet buffer and the window `start..end` inside it that programs may touch
    /// (`data_meta..data_end`). Returns the buffer's address.
    pub(crate) fn set_packet_buf(&mut self, buf: &'a mut [u8], start: usize, end: usize) -> u64 {
        let base = buf.as_mut_ptr() as u64;
        self.packet_buf = Region { start: base, len: buf.len() as u64, writable: true };
        let end = end.min(buf.len());
        let start = start.min(end);
        self.packet =
            Region { start: base + start as u64, len: (end - start) as u64, writable: true };
        base
    }

    /// Moves the packet window (after `bpf_xdp_adjust_*`); refused outside the buffer.
    pub(crate) fn set_packet(&mut self, start: u64, end: u64) -> bool {
        if start > end || !self.packet_buf.covers(start, end - start) {
            return false;
        }
        self.packet = Region { start, len: end - start, writable: true };
        true
    }

    /// The context region.
    pub fn ctx(&self) -> Region {
        self.ctx
    }

    /// The packet window.
    pub fn packet(&self) -> Region {
        self.packet
    }

    /// The whole packet buffer (headroom, frame, tailroom).
    pub fn packet_buf(&self) -> Region {
        self.packet_buf
    }

    /// Whether `len` bytes at `addr` are inside one region (and writable, for a write).
    #[inline]
    pub fn check(&self, addr: u64, len: u64, write: bool) -> bool {
        for r in &self.regions[..self.count] {
            if r.covers(addr, len) {
                return !write || r.writable;
            }
        }
        if self.packet.covers(addr, len) {
            return true;
        }
        if self.ctx.covers(addr, len) {
            return !write;
        }
        self.maps.iter().any(|m| m.contains(addr, len).is_some_and(|w| !write || w))
    }

    /// Loads `size` (1, 2, 4 or 8) bytes, zero-extended; `None` outside the regions.
    #[inline]
    pub fn load(&self, addr: u64, size: u8) -> Option<u64> {
        if !self.check(addr, u64::from(size), false) {
            return None;
        }
        let p = addr as *const u8;
        // SAFETY: `check` proved `size` bytes at `addr` lie in a live region (see module docs);
        // unaligned reads are allowed on every region.
        let v = unsafe {
            match size {
                1 => u64::from(p.read()),
                2 => u64::from(p.cast::<u16>().read_unaligned()),
                4 => u64::from(p.cast::<u32>().read_unaligned()),
                8 => p.cast::<u64>().read_unaligned(),
                _ => return None,
            }
        };
        Some(v)
    }

    /// Stores the low `size` bytes of `v`; `None` outside the writable regions.
    #[inline]
    pub fn store(&self, addr: u64, size: u8, v: u64) -> Option<()> {
        if !self.check(addr, u64::from(size), true) {
            return None;
        }
        let p = addr as *mut u8;
        // SAFETY: `check` proved `size` bytes at `addr` lie in a live writable region.
        unsafe {
            match size {
                1 => p.write(v as u8),
                2 => p.cast::<u16>().write_unaligned(v as u16),
                4 => p.cast::<u32>().write_unaligned(v as u32),
                8 => p.cast::<u64>().write_unaligned(v),
                _ => return None,
            }
        }
        Some(())
    }

    /// Atomic read-modify-write of 4 or 8 bytes (must be aligned); returns the old value.
    pub fn atomic(&self, addr: u64, size: u8, op: AtomicOp, v: u64) -> Option<u64> {
        if !addr.is_multiple_of(u64::from(size)) || !self.check(addr, u64::from(size), true) {
            return None;
        }
        let o = Ordering::SeqCst;
        match size {
            4 => {
                // SAFETY: checked: 4 writable bytes, 4-aligned, live for the run; other workers
                // touch map values only atomically or through their own programs' accesses,
                // as in the kernel.
                let a = unsafe { AtomicU32::from_ptr(addr as *mut u32) };
                let v = v as u32;
                let old = match op {
                    AtomicOp::Add => a.fetch_add(v, o),
                    AtomicOp::Or => a.fetch_or(v, o),
                    AtomicOp::And => a.fetch_and(v, o),
                    AtomicOp::Xor => a.fetch_xor(v, o),
                    AtomicOp::Xchg => a.swap(v, o),
                };
                Some(u64::from(old))
            }
            8 => {
                // SAFETY: as above, 8 bytes, 8-aligned.
                let a = unsafe { AtomicU64::from_ptr(addr as *mut u64) };
                Some(match op {
                    AtomicOp::Add => a.fetch_add(v, o),
                    AtomicOp::Or => a.fetch_or(v, o),
                    AtomicOp::And => a.fetch_and(v, o),
                    AtomicOp::Xor => a.fetch_xor(v, o),
                    AtomicOp::Xchg => a.swap(v, o),
                })
            }
            _ => None,
        }
    }

    /// Atomic compare-and-exchange of 4 or 8 aligned bytes: if the value equals `expected`,
    /// stores `new`. Returns the old value either way.
    pub fn cmpxchg(&self, addr: u64, size: u8, expected: u64, new: u64) -> Option<u64> {
        if !addr.is_multiple_of(u64::from(size)) || !self.check(addr, u64::from(size), true) {
            return None;
        }
        let (s, f) = (Ordering::SeqCst, Ordering::SeqCst);
        match size {
            4 => {
                // SAFETY: checked: 4 writable bytes, 4-aligned, live for the run.
                let a = unsafe { AtomicU32::from_ptr(addr as *mut u32) };
                let r = a.compare_exchange(expected as u32, new as u32, s, f);
                Some(u64::from(r.unwrap_or_else(|x| x)))
            }
            8 => {
                // SAFETY: checked: 8 writable bytes, 8-aligned, live for the run.
                let a = unsafe { AtomicU64::from_ptr(addr as *mut u64) };
                Some(a.compare_exchange(expected, new, s, f).unwrap_or_else(|x| x))
            }
            _ => None,
        }
    }

    /// Copies `dst.len()` bytes from `addr` into `dst`.
    pub fn read(&self, addr: u64, dst: &mut [u8]) -> Option<()> {
        if !self.check(addr, dst.len() as u64, false) {
            return None;
        }
        // SAFETY: checked: the source bytes are in a live region; `dst` is a Rust buffer that
        // no region overlaps (regions are borrowed for the run, `dst` is not one of them).
        unsafe { std::ptr::copy(addr as *const u8, dst.as_mut_ptr(), dst.len()) };
        Some(())
    }

    /// Copies `src` to `addr`.
    pub fn write(&self, addr: u64, src: &[u8]) -> Option<()> {
        if !self.check(addr, src.len() as u64, true) {
            return None;
        }
        // SAFETY: checked: the destination bytes are in a live writable region.
        unsafe { std::ptr::copy(src.as_ptr(), addr as *mut u8, src.len()) };
        Some(())
    }

    /// Copies `len` bytes from `src` to `dst` (both checked; overlapping is fine).
    pub fn copy(&self, dst: u64, src: u64, len: u64) -> Option<()> {
        if !self.check(src, len, false) || !self.check(dst, len, true) {
            return None;
        }
        // SAFETY: both ranges checked to be live regions (destination writable); `copy` is
        // memmove.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len as usize) };
        Some(())
    }

    /// Moves `len` bytes inside the packet buffer (headroom included), for the
    /// `bpf_xdp_adjust_*` helpers.
    pub(crate) fn buf_move(&self, dst: u64, src: u64, len: u64) -> Option<()> {
        if !self.packet_buf.covers(src, len) || !self.packet_buf.covers(dst, len) {
            return None;
        }
        // SAFETY: both ranges are inside the packet buffer, borrowed mutably for the run.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len as usize) };
        Some(())
    }

    /// Zeroes `len` bytes inside the packet buffer.
    pub(crate) fn buf_zero(&self, addr: u64, len: u64) -> Option<()> {
        if !self.packet_buf.covers(addr, len) {
            return None;
        }
        // SAFETY: the range is inside the packet buffer, borrowed mutably for the run.
        unsafe { std::ptr::write_bytes(addr as *mut u8, 0, len as usize) };
        Some(())
    }

    /// Writes a u64 field of the context (helpers move `data`/`data_end`/`data_meta`).
    pub(crate) fn write_ctx_u64(&self, offset: u64, v: u64) -> Option<()> {
        if !offset.is_multiple_of(8) || !self.ctx.covers(self.ctx.start + offset, 8) {
            return None;
        }
        // SAFETY: the context struct is borrowed mutably for the run (`set_ctx`), the 8 bytes
        // are inside it and 8-aligned (the struct is 8-aligned, the offset a multiple of 8).
        unsafe { ((self.ctx.start + offset) as *mut u64).write(v) };
        Some(())
    }

    /// Runs `f` over a copy of `len` bytes at `addr` (on the stack up to 256 bytes): for map
    /// keys and values, which may lie in the very map memory the operation then writes.
    pub fn with_copy<R>(&self, addr: u64, len: u64, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let n = usize::try_from(len).ok()?;
        if n <= 256 {
            let mut buf = [0u8; 256];
            self.read(addr, &mut buf[..n])?;
            Some(f(&buf[..n]))
        } else {
            let mut buf = vec![0u8; n];
            self.read(addr, &mut buf)?;
            Some(f(&buf))
        }
    }

    /// Runs `f` over `len` bytes at `addr` in place (read-only helper inputs: checksums,
    /// ring-buffer output, trace formats).
    pub fn with_bytes<R>(&self, addr: u64, len: u64, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        if !self.check(addr, len, false) || usize::try_from(len).is_err() {
            return None;
        }
        // SAFETY: checked: `len` bytes at `addr` are in a live region, and no `&mut` to them
        // exists during the run (regions are reached only through raw pointers here).
        let s = unsafe { std::slice::from_raw_parts(addr as *const u8, len as usize) };
        Some(f(s))
    }
}
