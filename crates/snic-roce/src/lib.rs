//! RoCEv2 over kernel UDP sockets: how snic's sans-IO RDMA engine ([`snic_rdma::Rnic`]) reaches
//! another process or host when it is not terminated on a NIC port.
//!
//! - [`transport`]: [`transport::RoceTransport`], the engine's packets as UDP datagrams
//!   (`sendmmsg`/`recvmmsg`, UDP GSO/GRO, per-QP source ports, ECN both ways).
//! - [`cm`]: the connection exchange over a TCP side channel, as perftest does (QP number, PSN,
//!   GID, rkey, buffer, MTU), and the INIT -> RTR -> RTS walk with the peer's values.
//! - [`blast`]: the raw UDP ceiling (same batching, no RDMA) that RDMA bandwidth is set beside.
//!
//! Not here: the engine itself (`snic-rdma`), ports and the packet pipeline (`snic-io`), the
//! host-facing device that serves QPs to host processes (`snic-device`). Generic libc helpers
//! come from [`snic_io::sys`].

pub mod blast;
pub mod cm;
pub mod transport;
