//! P4Runtime v1 for snic.
#![allow(missing_docs)]

pub mod device;
pub mod p4info;
pub mod proto;
pub mod schema;
pub mod server;
pub mod status;
#[cfg(feature = "testing")]
pub mod testing;
pub mod text;
