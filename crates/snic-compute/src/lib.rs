//! snic's lookaside compute kernels.
//!
//! A host hands a kernel command (kernel id, tag, source, destination, length) to snic through
//! its control FIFO; snic runs the kernel over the engines' [`snic_dma::AddressSpace`] on the
//! client's behalf and writes a status (tag, status code, 64-bit result) back. This crate is the
//! sans-IO part: the command and status types, the [`LookasideKernel`] trait, the built-in
//! kernels and the [`Kernels`] registry. The FIFOs themselves live in shared memory and are
//! served by `snic-io`'s host-interface workers.
//!
//! Every range a kernel touches is first resolved with [`snic_dma::AddressSpace::resolve`]
//! for the client (device memory, or host memory the client registered), and then read or
//! written only through the resulting spans.

pub mod kernel;

pub use kernel::{
    CopyKernel, KernelCmd, KernelStatus, Kernels, LookasideKernel, SumKernel, ids, status,
};
