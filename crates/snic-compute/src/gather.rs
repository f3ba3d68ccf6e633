//! GATHER ([`ids::GATHER`]): a scatter-gather list of blocks packed, in order, into one
//! buffer.
//!
//! The whole list is checked before a byte moves: every entry is decoded, every block is
//! resolved for the client (device memory or the client's own host memory), every block is
//! checked not to overlap the destination, and the destination is checked to hold them all.
//! Blocks may overlap each other and the list itself (they are only read).

use snic_dma::AddressSpace;
use snic_dma::mem::Span;

use crate::cmd::AddrArg;
use crate::kernel::{Invocation, KernelError, LookasideKernel, ids};

/// Most entries one GATHER command takes (`s0` beyond it is [`crate::status::BAD_ARGS`]).
pub const MAX_SGL_ENTRIES: u64 = 4096;
/// Bytes of one scatter-gather entry: addr u64, len u32, reserved u32 (little-endian).
pub const SGL_ENTRY_SIZE: usize = 16;

/// One scatter-gather entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SglEntry {
    /// First byte of the block.
    pub addr: u64,
    /// Its length.
    pub len: u32,
}

impl SglEntry {
    /// The 16-byte encoding (reserved bytes zero).
    pub fn encode(&self) -> [u8; SGL_ENTRY_SIZE] {
        let mut b = [0u8; SGL_ENTRY_SIZE];
        b[..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// The entry a 16-byte encoding holds (reserved bytes ignored).
    pub fn decode(b: &[u8; SGL_ENTRY_SIZE]) -> SglEntry {
        let mut addr = [0u8; 8];
        addr.copy_from_slice(&b[..8]);
        let mut len = [0u8; 4];
        len.copy_from_slice(&b[8..12]);
        SglEntry { addr: u64::from_le_bytes(addr), len: u32::from_le_bytes(len) }
    }
}

/// Encode `entries` as the list a GATHER command's `a0` holds.
pub fn encode_sgl(entries: &[SglEntry]) -> Vec<u8> {
    entries.iter().flat_map(|e| e.encode()).collect()
}

/// GATHER (see [`ids::GATHER`]). `s0` is 1..=[`MAX_SGL_ENTRIES`]; a block the client may not
/// reach is [`crate::status::BAD_ADDRESS`] (reported as argument 0, the list), a block that
/// overlaps the destination [`crate::status::OVERLAP`], a destination too small
/// [`crate::status::NO_SPACE`], a list shorter than `s0` entries
/// [`crate::status::BAD_LENGTH`].
#[derive(Debug, Default, Clone, Copy)]
pub struct GatherKernel;

impl LookasideKernel for GatherKernel {
    fn id(&self) -> u32 {
        ids::GATHER
    }
    fn name(&self) -> &'static str {
        "gather"
    }
    fn usage(&self) -> &'static str {
        "a0 SGL (s0 entries: addr u64, len u32, rsvd u32), a1 dst; result = bytes gathered"
    }
    fn run(&mut self, mem: &mut AddressSpace, inv: &Invocation<'_>) -> Result<u64, KernelError> {
        let spans = inv.check(mem, 2..=2, 1..=1, &[1])?;
        let (list, dst) = (&spans[0], &spans[1]);
        let n = inv.scalar(0);
        if n == 0 || n > MAX_SGL_ENTRIES {
            return Err(KernelError::BadArgs("SGL entries must be 1..=4096"));
        }
        let n = n as usize;
        if list.len() < n * SGL_ENTRY_SIZE {
            return Err(KernelError::BadLength("SGL shorter than its entries"));
        }
        let raw = mem
            .span_bytes(list, n * SGL_ENTRY_SIZE)
            .map_err(|err| KernelError::BadAddress { arg: 0, err })?;
        let entries: Vec<SglEntry> = raw
            .chunks_exact(SGL_ENTRY_SIZE)
            .filter_map(|c| c.try_into().ok())
            .map(SglEntry::decode)
            .collect();
        let plan = plan(mem, inv, &entries, dst)?;
        for (src, to) in &plan {
            mem.copy_span(src, to, src.len())
                .map_err(|err| KernelError::BadAddress { arg: 0, err })?;
        }
        Ok(plan.iter().map(|(s, _)| s.len() as u64).sum())
    }
}

/// Resolve every block and its place in the destination; nothing is moved.
fn plan(
    mem: &AddressSpace,
    inv: &Invocation<'_>,
    entries: &[SglEntry],
    dst: &Span,
) -> Result<Vec<(Span, Span)>, KernelError> {
    let out = inv.arg(1);
    let total: u64 = entries.iter().map(|e| u64::from(e.len)).sum();
    let mut plan = Vec::with_capacity(entries.len());
    for e in entries {
        let src = mem
            .resolve(e.addr, u64::from(e.len), inv.owner)
            .map_err(|err| KernelError::BadAddress { arg: 0, err })?;
        if AddrArg::new(e.addr, u64::from(e.len)).overlaps(&out) {
            return Err(KernelError::Overlap { output: 1, other: 0 });
        }
        plan.push(src);
    }
    if total > dst.len() as u64 {
        return Err(KernelError::NoSpace);
    }
    let mut at = out.addr;
    plan.into_iter()
        .map(|src| {
            // Inside the destination, which resolved whole: this cannot fail.
            let to = mem
                .resolve(at, src.len() as u64, inv.owner)
                .map_err(|err| KernelError::BadAddress { arg: 1, err })?;
            at += src.len() as u64;
            Ok((src, to))
        })
        .collect()
}
