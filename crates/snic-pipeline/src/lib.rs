//! The packet pipeline core: buffers, batches, metadata, stages, counters, traces.
//!
//! A [`Batch`] of up to [`MAX_BATCH`] [`PacketBuf`]s flows through a chain of [`Stage`]s. Each
//! buffer keeps headroom in front of the frame so that encapsulation prepends in place and never
//! copies the payload. Each packet carries [`Metadata`]: ingress port, parsed layer offsets, RSS
//! hash, classification, verdict, offload state. Every dropped packet increments exactly one
//! drop-reason counter.
//!
//! Modules: [`buf`] (buffers, batches), [`meta`] (metadata, [`Class`], [`RoceMeta`]), [`drop`](mod@drop)
//! ([`DropReason`]), [`counters`] (per-stage and per-port counters), [`trace`] (packet trace and
//! its filter), [`rss`] (Toeplitz hash), [`stage`] (the [`Stage`] trait), [`stages`] (`parse`,
//! `classify`, `l2fwd`, `tap`), [`pipeline`] (a chain of stages built from [`StageSpec`]
//! strings, with the I/O contract: after [`Pipeline::process`] every packet left in the batch
//! has an egress port, every other one was counted as a drop).
//!
//! This crate is sans-IO: it never opens a socket, spawns a thread or reads the clock. Ports and
//! workers live in `snic-io`.

pub mod buf;
pub use buf::{Batch, MAX_BATCH, NoRoom, PacketBuf};
pub mod meta;
pub use meta::{Class, Metadata, PortId, RoceMeta};
pub mod counters;
pub use counters::{ClassCounts, Counters, DropCounts, PortCounters, StageCounters};
pub mod drop;
pub use drop::DropReason;
pub mod pipeline;
pub use pipeline::{BuildError, Pipeline, PipelineConfig, StageFactory, StageSpec};
pub mod rss;
pub mod stage;
pub use stage::{Stage, StageCtx};
pub mod stages;
pub mod trace;
pub use trace::{TraceEvent, TraceFilter, TraceRing, TraceWhat};
pub mod gro;
pub mod offload;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
