//! CRC32C ([`ids::CRC32C`]): the Castagnoli CRC of iSCSI (RFC 3720), NVMe-oF data digests and
//! ext4 metadata.
//!
//! The arithmetic comes from the `crc32c` crate (MIT or Apache-2.0), which uses the SSE4.2
//! `crc32` instruction (three interleaved streams) when the CPU has it, detected at run time,
//! and a table-driven software path otherwise; writing either by hand would only repeat it.

use snic_dma::AddressSpace;

use crate::kernel::{Invocation, KernelError, LookasideKernel, ids};

/// CRC-32C of `data`, continuing from `init` (the CRC of the bytes before it; 0 for a fresh
/// one).
pub fn crc32c(init: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(init, data)
}

/// CRC32C (see [`ids::CRC32C`]). An empty `a0` is allowed (the result is `s0`); `s0` must
/// fit 32 bits and may be left out (0).
#[derive(Debug, Default, Clone, Copy)]
pub struct Crc32cKernel;

impl LookasideKernel for Crc32cKernel {
    fn id(&self) -> u32 {
        ids::CRC32C
    }
    fn name(&self) -> &'static str {
        "crc32c"
    }
    fn usage(&self) -> &'static str {
        "a0 data; s0 initial CRC (0 fresh); result = the CRC-32C"
    }
    fn run(&mut self, mem: &mut AddressSpace, inv: &Invocation<'_>) -> Result<u64, KernelError> {
        let spans = inv.check(mem, 1..=1, 0..=1, &[])?;
        let init = u32::try_from(inv.scalar(0))
            .map_err(|_| KernelError::BadArgs("initial CRC does not fit 32 bits"))?;
        let data = mem
            .span_bytes(&spans[0], spans[0].len())
            .map_err(|err| KernelError::BadAddress { arg: 0, err })?;
        Ok(u64::from(crc32c(init, data)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 3720, appendix B.4 (CRC examples; the RFC lists each CRC's bytes as sent, least
    /// significant first, so 0x8A9136AA appears as `aa 36 91 8a`).
    #[test]
    fn rfc3720_b4_vectors() {
        assert_eq!(crc32c(0, &[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(0, &[0xFFu8; 32]), 0x62A8_AB43);
        let inc: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(0, &inc), 0x46DD_794E);
        let dec: Vec<u8> = (0..32).rev().collect();
        assert_eq!(crc32c(0, &dec), 0x113F_DB5C);
        let read10: [u8; 48] = [
            0x01, 0xC0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
            0x14, 0, 0, 0, 0, 0, 0x04, 0, 0, 0, 0, 0x14, 0, 0, 0, 0x18, //
            0x28, 0, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(crc32c(0, &read10), 0xD996_3A56);
        // Continuing from a prefix's CRC is the CRC of the whole.
        assert_eq!(crc32c(crc32c(0, &inc[..13]), &inc[13..]), 0x46DD_794E);
    }
}
