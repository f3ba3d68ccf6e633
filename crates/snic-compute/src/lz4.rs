//! LZ4 block compression and decompression ([`ids::LZ4_COMPRESS`], [`ids::LZ4_DECOMPRESS`]).
//!
//! The codec is `lz4_flex` (MIT), built with its safe encoder and decoder only: it is the
//! fastest pure-Rust LZ4, and the safe decoder bounds-checks every literal and match, so a
//! hostile block can fail but not read or write out of bounds. The block format has no
//! checksum and no length header: a caller keeps the decompressed size beside the block (the
//! result of the compress command).
//!
//! Neither kernel writes anything on failure: each produces its output in a scratch buffer
//! (compression: the worst-case size, [`lz4_flex::block::get_maximum_output_size`];
//! decompression: the destination's size, as a corrupt block is only found out part way,
//! after bytes were produced) and copies it to the destination once it is whole. The copy
//! also keeps the source (a shared borrow of the address space) and the destination (a
//! mutable one) apart without `unsafe`.

use snic_dma::AddressSpace;

use crate::kernel::{Invocation, KernelError, LookasideKernel, ids};

fn mem_err(arg: usize) -> impl Fn(snic_dma::MemError) -> KernelError {
    move |err| KernelError::BadAddress { arg, err }
}

/// LZ4_COMPRESS (see [`ids::LZ4_COMPRESS`]). An empty source compresses to a one-byte block.
#[derive(Debug, Default, Clone, Copy)]
pub struct Lz4CompressKernel;

impl LookasideKernel for Lz4CompressKernel {
    fn id(&self) -> u32 {
        ids::LZ4_COMPRESS
    }
    fn name(&self) -> &'static str {
        "lz4_compress"
    }
    fn usage(&self) -> &'static str {
        "a0 src, a1 dst; result = compressed bytes (no_space if a1 is too small)"
    }
    fn run(&mut self, mem: &mut AddressSpace, inv: &Invocation<'_>) -> Result<u64, KernelError> {
        let spans = inv.check(mem, 2..=2, 0..=0, &[1])?;
        let (src, dst) = (&spans[0], &spans[1]);
        let worst = lz4_flex::block::get_maximum_output_size(src.len());
        let input = mem.span_bytes(src, src.len()).map_err(mem_err(0))?;
        let mut scratch = vec![0u8; worst];
        let n = lz4_flex::block::compress_into(input, &mut scratch)
            .map_err(|_| KernelError::NoSpace)?;
        if n > dst.len() {
            return Err(KernelError::NoSpace);
        }
        mem.write_span(dst, &scratch[..n]).map_err(mem_err(1))?;
        Ok(n as u64)
    }
}

/// LZ4_DECOMPRESS (see [`ids::LZ4_DECOMPRESS`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct Lz4DecompressKernel;

impl LookasideKernel for Lz4DecompressKernel {
    fn id(&self) -> u32 {
        ids::LZ4_DECOMPRESS
    }
    fn name(&self) -> &'static str {
        "lz4_decompress"
    }
    fn usage(&self) -> &'static str {
        "a0 LZ4 block, a1 dst; result = decompressed bytes (corrupt_input, no_space)"
    }
    fn run(&mut self, mem: &mut AddressSpace, inv: &Invocation<'_>) -> Result<u64, KernelError> {
        let spans = inv.check(mem, 2..=2, 0..=0, &[1])?;
        let (src, dst) = (&spans[0], &spans[1]);
        if src.is_empty() {
            return Err(KernelError::Corrupt("empty LZ4 block"));
        }
        let input = mem.span_bytes(src, src.len()).map_err(mem_err(0))?;
        let mut scratch = vec![0u8; dst.len()];
        let n = lz4_flex::block::decompress_into(input, &mut scratch).map_err(|e| match e {
            lz4_flex::block::DecompressError::OutputTooSmall { .. } => KernelError::NoSpace,
            _ => KernelError::Corrupt("bad LZ4 block"),
        })?;
        mem.write_span(dst, &scratch[..n]).map_err(mem_err(1))?;
        Ok(n as u64)
    }
}
