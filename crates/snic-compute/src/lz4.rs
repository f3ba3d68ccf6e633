//! LZ4 block compression and decompression ([`ids::LZ4_COMPRESS`], [`ids::LZ4_DECOMPRESS`]).
//!
//! The codec is `lz4_flex` (MIT), built with its safe encoder and decoder only: it is the
//! fastest pure-Rust LZ4, and the safe decoder bounds-checks every literal and match, so a
//! hostile block can fail but not read or write out of bounds. The block format has no
//! checksum and no length header: a caller keeps the decompressed size beside the block (the
//! result of the compress command).
//!
//! Neither kernel writes anything on failure: each produces its output in a scratch buffer
//! and copies it to the destination once it is whole (compression: of the worst-case size,
//! [`lz4_flex::block::get_maximum_output_size`]; decompression: of the destination's size,
//! capped by what the block can expand to, as a corrupt block is only found out part way,
//! after bytes were produced). The buffer is kept between commands (up to [`SCRATCH_KEEP`]
//! bytes), so a command does not fault in fresh pages. The copy also keeps the source (a
//! shared borrow of the address space) and the destination (a mutable one) apart without
//! `unsafe`.

use snic_dma::AddressSpace;

use crate::kernel::{Invocation, KernelError, LookasideKernel, ids};

fn mem_err(arg: usize) -> impl Fn(snic_dma::MemError) -> KernelError {
    move |err| KernelError::BadAddress { arg, err }
}

/// Scratch bytes a kernel keeps between commands (a larger buffer is freed after use).
pub const SCRATCH_KEEP: usize = 16 << 20;

/// Most bytes an LZ4 block of `n` bytes can decompress to: a sequence's length bytes add at
/// most 255 bytes of output each, and every other byte at most 19.
pub fn max_decompressed(n: usize) -> usize {
    n.saturating_mul(255).saturating_add(64)
}

/// A scratch buffer reused across commands, so that a command does not pay for fresh
/// (page-faulting) memory every time.
#[derive(Debug, Default, Clone)]
struct Scratch(Vec<u8>);

impl Scratch {
    /// `len` bytes (contents unspecified).
    fn get(&mut self, len: usize) -> &mut [u8] {
        if self.0.len() < len {
            self.0.resize(len, 0);
        }
        &mut self.0[..len]
    }

    /// Free the buffer if it grew past [`SCRATCH_KEEP`].
    fn trim(&mut self) {
        if self.0.len() > SCRATCH_KEEP {
            self.0 = Vec::new();
        }
    }
}

/// LZ4_COMPRESS (see [`ids::LZ4_COMPRESS`]). An empty source compresses to a one-byte block.
#[derive(Debug, Default, Clone)]
pub struct Lz4CompressKernel {
    scratch: Scratch,
}

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
        let scratch = self.scratch.get(worst);
        let r = match lz4_flex::block::compress_into(input, scratch) {
            Ok(n) if n <= dst.len() => {
                mem.write_span(dst, &scratch[..n]).map_err(mem_err(1)).map(|()| n as u64)
            }
            _ => Err(KernelError::NoSpace),
        };
        self.scratch.trim();
        r
    }
}

/// LZ4_DECOMPRESS (see [`ids::LZ4_DECOMPRESS`]).
#[derive(Debug, Default, Clone)]
pub struct Lz4DecompressKernel {
    scratch: Scratch,
}

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
        // The scratch need not be larger than the block can expand to (a destination may be
        // a whole region); should the bound be wrong, the full size is tried before saying
        // the destination is too small.
        let mut len = dst.len().min(max_decompressed(src.len()));
        let r = loop {
            let scratch = self.scratch.get(len);
            match lz4_flex::block::decompress_into(input, scratch) {
                Ok(n) => break Ok(n),
                Err(lz4_flex::block::DecompressError::OutputTooSmall { .. }) if len < dst.len() => {
                    len = dst.len();
                }
                Err(lz4_flex::block::DecompressError::OutputTooSmall { .. }) => {
                    break Err(KernelError::NoSpace);
                }
                Err(_) => break Err(KernelError::Corrupt("bad LZ4 block")),
            }
        };
        let r = r.and_then(|n| {
            mem.write_span(dst, &self.scratch.get(n)[..n]).map_err(mem_err(1)).map(|()| n as u64)
        });
        self.scratch.trim();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expansion_bound_holds_for_the_most_compressible_input() {
        for len in [1usize, 20, 300, 70_000, 1 << 20] {
            let block = lz4_flex::block::compress(&vec![0u8; len]);
            assert!(len <= max_decompressed(block.len()), "{len} from {}", block.len());
        }
        let mut s = Scratch::default();
        assert_eq!(s.get(10).len(), 10);
        s.get(SCRATCH_KEEP + 1);
        s.trim();
        assert!(s.0.is_empty());
    }
}
