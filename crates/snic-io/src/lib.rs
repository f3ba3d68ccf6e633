//! Ports, workers, clocks and the testbed: the only layer of snic that does I/O.
//!
//! Ports move batches of frames between the outside world (pcap files, AF_PACKET sockets, TAP
//! devices, UDP tunnels, in-process virtual links) and the sans-IO pipeline. Workers own ports'
//! queues and pipelines, spread flows by RSS hash, and read the real clock.

pub mod port;
pub use port::{Port, PortCaps};
