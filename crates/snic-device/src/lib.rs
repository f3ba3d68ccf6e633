//! The device a host sees: snic's side of the host interface, the way a PCIe function looks
//! from the host (register space, device memory, DMA queues and channels, lookaside kernels,
//! RDMA verbs). `snic serve` runs it; host processes reach it through the host library
//! (`snic-host`), and both sides speak the contract in `snic-hostif`.
//!
//! Not to be confused with its neighbours: `snic-hostif` is the contract (register layout,
//! setup messages, shared memory) that both processes share; `snic-host` is the host library
//! (what a host program links); this crate is the device that serves them.
//!
//! A host process connects to the setup socket ([`snic_hostif::proto`]), says hello and gets
//! its register space (BAR), the NIC page and one kick eventfd per worker. It registers host
//! memory (memfds, mapped here and placed at IOVAs in the client's window `client << 40`),
//! allocates device memory, and adds queues and channels. From then on the data path is
//! shared memory: descriptor rings in its registered memory, doorbells in its BAR, completions
//! and write-backs from the workers, eventfds for interrupts and kicks.
//!
//! - [`server`]: [`Server::start`], the control thread (one request, one response), device
//!   memory (one memfd per kind: a master address space allocates, every worker mirrors it),
//!   registrations, and reclaiming everything a client had when its socket closes.
//! - `rdma` (with `ServerConfig::rdma`): one RDMA engine for all clients, QPs whose rings sit
//!   in the client's host memory or in device memory, MRs, verbs posted over the socket, and
//!   an RDMA thread driving RoCEv2 over UDP.
//! - `worker`: DMA workers (a [`snic_dma::DmaEngine`] per thread, doorbell scanning,
//!   write-backs, interrupts) and compute workers (the kernel slots of every client: kernel
//!   `k` on compute worker `k % compute_workers`, with per-kernel eventfds and counters);
//!   sleeping and kicks for both.
//! - [`ebpf`]: NIC-core eBPF programs served as the lookaside kernel `EBPF` (id 9).
//!
//! Conventions the host library relies on (beyond [`snic_hostif::abi`]):
//! - `StartQueue` clears the queue's register slot: after the response every index is 0.
//! - `SetChannel` clears the channel's block and sets `CH_CONTROL` to 1 when an eventfd was
//!   attached (0 otherwise); the host's `CH_RUN_SEQ` counts from 0.
//! - A streaming queue's `stream_to` must name a streaming queue of the same client; the new
//!   queue's id is chosen on that queue's worker, so delivery is one engine step. A queue
//!   another queue streams to cannot be deleted before it.
//! - A kernel-FIFO producer index more than `KFIFO_DEPTH` ahead is ignored (counted in
//!   `DOORBELLS_IGNORED`) until the host writes another value.

pub mod ebpf;
mod rdma;
pub mod server;
mod worker;

pub use rdma::Wire;
pub use server::takeover::{Adopted, Prepared};
pub use server::{DeviceBlock, Handover, KernelSet, Server, ServerConfig, ServerHandle};
pub use snic_hostif::proto::DevKind;

use std::path::PathBuf;

/// The default setup-socket path: `$XDG_RUNTIME_DIR/snic.sock` when that is set, else
/// `/tmp/snic-$UID.sock`.
pub fn default_socket_path() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("snic.sock");
    }
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0);
    PathBuf::from(format!("/tmp/snic-{uid}.sock"))
}
