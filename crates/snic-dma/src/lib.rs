//! snic's memory model, shared by every engine that touches memory (RDMA, DMA, kernels).
//!
//! - [`mem`]: one address space for the engines. Host memory and device memory are both mapped
//!   into it; device addresses are told apart by a fixed prefix ([`mem::DEVICE_ADDR_PREFIX`],
//!   as RecoNIC routes by address), and every access is bounds-checked against a region.
//! - [`alloc`]: the device-memory allocator (first fit over an ordered free list, alignment,
//!   coalescing on free), used for on-chip and on-board regions.
//!
//! This crate is sans-IO: it opens no files and spawns no threads. Shared-memory backings
//! (memfd, fd passing) plug in through the [`mem::Backing`] trait from the I/O layer.

pub mod alloc;
pub mod mem;

pub use mem::{
    AddressSpace, Backing, DEVICE_ADDR_MASK, DEVICE_ADDR_PREFIX, DevAddr, HostAddr, MemError,
    MemKind, RegionId, is_device_address,
};
