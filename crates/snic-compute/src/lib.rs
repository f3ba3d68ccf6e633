//! snic's lookaside compute kernels.
//!
//! A host hands a kernel command ([`KernelCmd`]: workload id, kernel id, up to eight address
//! arguments with lengths and up to eight scalars, like RecoNIC's lookaside control message)
//! to a kernel's control FIFO; snic runs the kernel over the engines' [`snic_dma::AddressSpace`]
//! on the client's behalf and writes a [`KernelStatus`] (workload id, status code, 64-bit
//! result, time run) to the kernel's status FIFO. This crate is the sans-IO part: the command
//! and status types and their FIFO encodings ([`cmd`]), the [`LookasideKernel`] trait with the
//! argument checks every kernel starts with ([`Invocation::check`]), the built-in kernels and
//! the [`Kernels`] registry. The FIFOs themselves live in the host interface's shared memory
//! and are served by `snic-device`'s workers.
//!
//! Every range a kernel touches is first resolved with [`snic_dma::AddressSpace::resolve`]
//! for the client (device memory, or host memory the client registered), every output is
//! checked not to overlap another argument, and only then is memory read or written: a
//! refused command changes no byte.
//!
//! The built-in kernels, one module each: COPY ([`CopyKernel`]), [`gemm`] (i8 and f32
//! matrix multiply, RecoNIC's systolic-array kernel in software), [`vector`] (VADD, VSCALE,
//! REDUCE), [`gather`] (a scatter-gather list into one buffer), [`crc`] (CRC-32C) and [`lz4`]
//! (LZ4 block compression). The `testing` feature adds the `testing` module: an
//! address-space fixture, reference kernels and matrix helpers for other crates' tests.

pub mod cmd;
pub mod crc;
pub mod gather;
pub mod gemm;
pub mod kernel;
pub mod lz4;
pub mod netmm;
#[cfg(feature = "testing")]
pub mod testing;
pub mod vector;

pub use cmd::{AddrArg, KCMD_SIZE, KSTS_SIZE, KernelCmd, KernelStatus, MAX_ADDRS, MAX_SCALARS};
pub use crc::Crc32cKernel;
pub use gather::{GatherKernel, SglEntry};
pub use gemm::{GemmKernel, GemmShape};
pub use kernel::{
    CopyKernel, Invocation, KernelCounters, KernelError, Kernels, LookasideKernel, MAX_KERNELS,
    USER_REGS, dtype, ids, reduce, status,
};
pub use lz4::{Lz4CompressKernel, Lz4DecompressKernel};
pub use vector::{ReduceKernel, VaddKernel, VscaleKernel};

/// A fresh instance of every built-in kernel, by id.
pub fn builtins() -> Vec<Box<dyn LookasideKernel>> {
    vec![
        Box::new(CopyKernel),
        Box::new(vector::ReduceKernel),
        Box::new(gemm::GemmKernel),
        Box::new(vector::VaddKernel),
        Box::new(vector::VscaleKernel),
        Box::new(gather::GatherKernel),
        Box::new(crc::Crc32cKernel),
        Box::new(lz4::Lz4CompressKernel::default()),
        Box::new(lz4::Lz4DecompressKernel::default()),
    ]
}
