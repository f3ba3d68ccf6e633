//! Ports, workers, clocks and the testbed: the only layer of snic that does I/O.
//!
//! Ports move batches of frames between the outside world (pcap files, AF_PACKET sockets, TAP
//! devices, UDP tunnels, in-process virtual links) and the sans-IO pipeline. Workers own ports'
//! queues and pipelines, spread flows by RSS hash, and read the real clock.
//!
//! - [`spec`]: port specs (`pcap:in.pcap,out.pcap`, `udp:A,B`, `gen:1000`, `null`, ...).
//! - [`pcap`], [`udp`], [`generator`] (`gen.rs`), [`null`]: port drivers.
//! - [`vlink`] and [`testbed`]: virtual links and the deterministic, simulated-time testbed.
//! - [`worker`], [`runtime`], [`signal`]: real threads, the real clock, clean shutdown.
//! - [`sys`]: every libc helper (socket options, `mmsghdr` set-up, `poll`, `madvise`).

pub mod port;
pub use port::{Port, PortCaps, PortCounters};

pub mod spec;
pub use spec::{PortSpec, SpecError};

#[path = "gen.rs"]
pub mod generator;
pub mod null;
pub mod pcap;
pub mod script;
pub mod udp;
pub mod vlink;

pub mod runtime;
pub mod signal;
pub mod sys;
pub mod testbed;
pub mod worker;

pub mod afpacket;
pub mod tap;
pub mod vnet;
