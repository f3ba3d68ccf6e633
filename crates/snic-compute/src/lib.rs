//! snic's lookaside compute kernels.
//!
//! A host hands a kernel command (kernel id, tag, source, destination, length) to snic through
//! its control FIFO; snic runs the kernel over the engines' [`snic_dma::AddressSpace`] on the
//! client's behalf and writes a status (tag, status code, 64-bit result) back. This crate is the
//! sans-IO part: the command and status types, the [`LookasideKernel`] trait, the built-in
//! kernels and the [`Kernels`] registry. The FIFOs themselves live in shared memory and are
//! served by `snic-io`'s host-interface workers.
//!
//! Every address a kernel touches is checked with [`snic_dma::AddressSpace::check_owned`]
//! (device memory, or host memory the client registered) before any byte is read or written.

pub mod kernel;

pub use kernel::{
    CopyKernel, KernelCmd, KernelStatus, Kernels, LookasideKernel, SumKernel, ids, status,
};
