//! The packet pipeline core: buffers, batches, metadata, stages, counters, traces.
//!
//! A [`Batch`] of up to [`MAX_BATCH`] [`PacketBuf`]s flows through a chain of [`Stage`]s. Each
//! buffer keeps headroom in front of the frame so that encapsulation prepends in place and never
//! copies the payload. Each packet carries [`Metadata`]: ingress port, parsed layer offsets, RSS
//! hash, classification, verdict, offload state. Every dropped packet increments exactly one
//! drop-reason counter.
//!
//! This crate is sans-IO: it never opens a socket, spawns a thread or reads the clock. Ports and
//! workers live in `snic-io`.

pub mod buf;
pub use buf::{Batch, MAX_BATCH, NoRoom, PacketBuf};
pub mod meta;
pub use meta::{Metadata, PortId};
