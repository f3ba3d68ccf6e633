//! snic's host library: what a host process links to use a running snic, as an application
//! uses a PCIe SmartNIC through its driver.
//!
//! - [`Device`]: the connection (setup socket, the client's register space "BAR", the NIC page
//!   and the workers' kick eventfds). Memory API ([`Device::alloc_host`],
//!   [`Device::alloc_device`], [`Device::write_device`] ...), control API (registers,
//!   lookaside kernels: [`Device::kernel_submit`], [`Device::kernel_wait`],
//!   [`Device::kernel_run`] ...) and DMA API ([`Device::open_queue`], [`Device::channel`]).
//! - [`HostBuf`]: host memory registered with snic (a shared memfd mapping with an IOVA).
//! - [`Queue`]: a QDMA-like queue whose rings live in a [`HostBuf`]: post descriptors, ring
//!   doorbells, consume completions.
//! - [`Channel`]: an XDMA-like channel running descriptor chains.
//! - [`ffi`]: the same as a C ABI (header `include/snic.h`).
//!
//! Setup requests travel over the socket ([`snic_hostif::proto`]); the data path is shared
//! memory only: descriptors and completions in registered host memory, doorbells as release
//! stores in the BAR, and a kick eventfd written only when the serving worker sleeps.

mod conn;
mod deadline;
mod device;
mod error;
pub mod ffi;
mod kernel;
mod queue;

pub use conn::HostBuf;
pub use device::Device;
pub use error::{HostError, Result};
pub use kernel::{AddrArg, KernelCmd, KernelInfo, KernelSlotCounters, KernelStatus};
pub use queue::{Channel, ChannelResult, Queue, QueueOpts};

pub use snic_dma::{Completion, Descriptor, Dir, Status};
pub use snic_hostif::proto::{DevKind, DeviceRegion, QueueMode, Request, Response};

// RDMA API hooks (QPs and MRs of snic's RDMA engine; see the `rdma` module docs).
mod rdma;
pub use rdma::{
    ChainRead, ChainReport, ChainWrite, Placement, RDMA_MAX_BATCH, RDMA_MAX_MSG, RdmaCqe, RdmaOp,
    RdmaQp, RdmaSge, RdmaWr, WC_ATOMIC_WRITE, WC_CHAIN, WC_FLUSH, WC_RDMA_READ, WC_RDMA_WRITE,
    WC_RECV, WC_SEND, WC_SUCCESS, rdma_access,
};
