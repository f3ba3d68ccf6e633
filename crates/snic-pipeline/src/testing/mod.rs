//! Test kits other crates reuse (feature `testing`; always on for this crate's own tests).
//!
//! - [`counters`]: name the counters a step must move, fail when any other counter moved
//!   (after OPTE's `incr!` / `assert_port!`), for any counters that serialise.
//! - [`frames`]: frames built byte by byte (Ethernet/IPv4/UDP, TCP, VXLAN, RoCEv2 with a real
//!   ICRC).

pub mod counters;
pub mod frames;
