//! P4Runtime v1 for snic: the control plane P4 users already have (p4runtime-shell, finsy,
//! ONOS, PTF suites) drives snic's `p4` stage.
//!
//! - [`p4info`]: the P4Info of any program snic's front end compiles, with ids as the
//!   specification assigns them (kind prefix in the top byte, `@id` honoured, stable hashes),
//!   in protobuf text format for `snic p4 info --p4info`.
//! - [`schema`]: a pushed P4Info bound to the compiled program (ids to the switch's indices,
//!   shapes checked), and the byte-string codec.
//! - [`device`]: arbitration, SetForwardingPipelineConfig/Get, Write and Read of every
//!   entity, packet-in/out and digests: the translation to the stage's switches, without I/O
//!   of its own.
//! - [`server`]: the gRPC service (tonic) on a thread of its own.
//!
//! The messages come from our own `.proto` files under `proto/` (names and field numbers from
//! the P4Runtime specification), compiled at build time by protox, so building needs no
//! `protoc`.

pub mod device;
pub mod p4info;
pub mod proto;
pub mod schema;
pub mod server;
pub mod status;
#[cfg(feature = "testing")]
pub mod testing;
pub mod text;
