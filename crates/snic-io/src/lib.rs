//! Ports, workers and the run loop: where snic's packet path meets sockets, threads and the
//! real clock.
//!
//! Its neighbours do the rest of snic's I/O: `snic-roce` (RoCE over kernel UDP),
//! `snic-device` (the device a host sees) and `snic-testbed` (nodes on simulated time).
//!
//! Ports move batches of frames between the outside world (pcap files, AF_PACKET sockets, TAP
//! devices, UDP tunnels, in-process virtual links) and the sans-IO pipeline. Workers own ports'
//! queues and pipelines, spread flows by RSS hash, and read the real clock.
//!
//! - [`spec`]: port specs (`pcap:in.pcap,out.pcap`, `udp:A,B`, `gen:1000`, `null`, ...).
//! - [`pcap`], [`udp`], [`generator`], [`null`], [`afpacket`], [`tap`], [`script`]:
//!   port drivers.
//! - [`vlink`]: seeded virtual links (the deterministic testbed, `snic-testbed`, joins nodes
//!   with them).
//! - [`worker`], [`runtime`], [`signal`]: real threads, the real clock, clean shutdown.
//! - [`nic`]: one whole NIC's data path (pipeline, the device's own packets, the RDMA engine)
//!   on one thread, for real ports and for the testbed.
//! - [`p4`]: the `p4` stage (a P4-16 v1model program per worker, `snic-p4`) and its control
//!   plane; the program and its entries file are read and compiled here.
//! - [`stream`]: the `kernel:NAME` stages (streaming kernels, `snic-stream`): one instance
//!   per worker, their control handles, the per-process nonce salt.
//! - [`bpf`]: the Linux kernel's eBPF through `bpf(2)` (maps, program loading with the
//!   verifier's log, `BPF_PROG_TEST_RUN`), the oracle snic's eBPF is tested against.
//! - [`sys`]: every libc helper (socket options, `mmsghdr` set-up, `poll`, `madvise`).

pub mod port;
pub use port::{Port, PortCaps, PortCounters};

pub mod spec;
pub use spec::{PortSpec, SpecError};

pub mod generator;
pub mod handover;
pub mod null;
pub mod pcap;
pub mod script;
pub mod udp;
pub mod vlink;

pub mod ebpf;
pub mod nic;
pub mod p4;
pub mod runtime;
pub mod signal;
pub mod stream;
pub mod sys;
pub mod worker;

pub mod afpacket;
pub mod afxdp;
pub mod bpf;
pub mod tap;
pub mod vnet;
