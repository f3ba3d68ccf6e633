//! The vSwitch of snic: Azure AccelNet's VFP and GFT, in software.
//!
//! The first packet of each flow is an *exception packet*: the slow path ([`vfp`]) walks the
//! vPort's policy layers ([`policy`]: ACL, VNET, NAT/SLB, routing, metering) and compiles the
//! result into one *unified flow*: an exact-match [`key::FlowKey`] and one
//! [`transposition::Transposition`] (a short list of header operations: pop the outer headers,
//! modify fields, push an encapsulation). The flow is cached in the Generic Flow Table
//! ([`gft`]); every later packet of the flow is served by the fast path alone: hash, look up,
//! check the vPort's epoch, apply the transposition, count ([`engine`]).
//!
//! The crate is sans-IO: it reads no clock, opens no socket and spawns nothing; the one file it
//! reads is a policy file the control plane names ([`policy::toml::load_policy`]). The
//! pipeline drives it as a stage; the control plane changes policy through
//! [`engine::VSwitch`].
//!
//! The control handle also hands a running vSwitch over to a new process (a hitless upgrade):
//! [`engine::VSwitch::export_state`] in the paused old process gives plain serde data (the
//! policy in force, every connection with its TCP state and SNAT binding, the counters, times
//! as ages), and [`engine::VSwitch::import_state`] loads it into a fresh vSwitch of the new one
//! before its workers start. The flow tables are not carried: each flow's first packet after
//! the takeover is compiled again from its carried connection, so no connection is reset.
//!
//! It is not a router or a host stack: it does not answer ARP or ICMP itself, and it keeps no
//! per-packet state beyond the flow table, TCP connection state and meters.

pub mod classifier;
pub mod engine;
pub mod gft;
pub mod key;
pub mod policy;
mod prefetch;
pub mod qos;
pub mod tcp;
pub mod transposition;
pub mod vfp;
