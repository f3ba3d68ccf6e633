//! snic's memory model, shared by every engine that touches memory (RDMA, DMA, kernels).
//!
//! - [`mem`]: one address space for the engines. Host memory and device memory are both mapped
//!   into it; device addresses are told apart by a fixed prefix ([`mem::DEVICE_ADDR_PREFIX`],
//!   as RecoNIC routes by address), and every access is bounds-checked against a region.
//! - [`alloc`]: the device-memory allocator (first fit over an ordered free list, alignment,
//!   coalescing on free), used for on-chip and on-board regions.
//! - [`desc`]: the descriptor and completion-entry formats hosts and the engine share.
//! - [`engine`]: the queue-based DMA engine (QDMA-like queues with H2C, C2H and completion
//!   rings; XDMA-like channels), sans-IO: doorbells in, bytes moved, completions and events out.
//! - [`latency`]: a fixed-bucket latency histogram the engines' users fill with durations they
//!   measure (the crate itself reads no clock).
//! - `testing` (feature `testing`): the test rig the engine's tests, benches and fuzz target
//!   share: memory for clients, queues ready to use, descriptor and completion helpers.
//!
//! This crate is sans-IO: it opens no files, spawns no threads and reads no clock. Shared-memory backings
//! (memfd, fd passing) plug in through the [`mem::Backing`] trait from the I/O layer.

pub mod alloc;
pub mod desc;
pub mod engine;
pub mod latency;
pub mod mem;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use desc::{Completion, Descriptor, Dir, Status};
pub use engine::{
    ChannelConfig, ChannelKey, DmaEngine, DmaError, DmaStats, Event, Mode, Notify, QueueConfig,
    QueueIndices, QueueSnapshot, QueueState,
};
pub use latency::LatencyHist;
pub use mem::{
    AddressSpace, Backing, DEVICE_ADDR_MASK, DEVICE_ADDR_PREFIX, DevAddr, HostAddr, MemError,
    MemKind, NIC_OWNER, RegionId, RegionInfo, is_device_address,
};
