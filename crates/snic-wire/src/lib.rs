//! Zero-copy typed views over packet bytes, and `Repr` parse/emit, for every format snic speaks.
//!
//! Each header module follows one shape (after smoltcp's `wire`):
//! - `Packet<T: AsRef<[u8]>>` (or `Header<T>`): a typed view over a buffer. `new_unchecked`,
//!   `check_len`, `new_checked`; getters on `T: AsRef<[u8]>`, setters on `T: AsMut<[u8]>`.
//! - `Repr`: a small `Copy` struct with `parse(&Packet<&T>) -> Result<Repr>`, `buffer_len()`, and
//!   `emit(&mut Packet<&mut T>)`.
//!
//! **The contract:** once `new_checked` (or `check_len`) returned `Ok`, no accessor panics, on any
//! input. Untrusted bytes always go through `new_checked`. Nothing in this crate allocates or
//! panics on input; errors say what was wrong ([`Error`]).
//!
//! [`stack::Stack`] walks a whole frame (Ethernet, VLANs, IP, L4, tunnels, the inner frame,
//! RoCEv2 headers) and records where each layer starts.
//!
//! This crate is not a protocol engine: it has no state, no timers and no I/O.

pub mod error;
pub use error::{Error, Result};

pub mod checksum;

pub mod arp;
pub mod ethernet;
pub mod icmp;
pub mod icmpv4;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod ndisc;
pub mod tcp;
pub mod udp;

pub mod geneve;
pub mod gre;
pub mod vxlan;

pub mod roce;

pub mod stack;

/// A byte range inside a header, as used by the private `field` modules.
pub(crate) type Field = core::ops::Range<usize>;
/// A field that runs from an offset to the end of the header.
#[allow(dead_code, reason = "used by header modules whose payload starts at a fixed offset")]
pub(crate) type Rest = core::ops::RangeFrom<usize>;
