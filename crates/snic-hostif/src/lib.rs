//! The boundary between a host process and snic, shared by both sides.
//!
//! In snic the "PCIe link" is a Unix socket for setup plus shared memory for the data path:
//!
//! - [`abi`]: the layout of a client's register space (its "BAR": ID and scratch registers,
//!   queue doorbells and write-backs, channel registers, the lookaside-kernel control and status
//!   FIFOs) and of the NIC page (which worker sleeps and wants a kick).
//! - [`proto`]: the setup messages (JSON over a `SOCK_SEQPACKET` Unix socket, file descriptors
//!   passed alongside with `SCM_RIGHTS`).
//! - [`shm`]: memfd-backed shared mappings, the one place with `unsafe` for shared memory;
//!   fd passing; eventfds for interrupts and kicks.
//!
//! What this crate is not: the DMA engine (`snic-dma`), the server that runs it (`snic-io`'s
//! `hostif`), or the host library (`snic-host`).

pub mod abi;
pub mod proto;
pub mod shm;
