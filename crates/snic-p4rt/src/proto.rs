//! The generated messages (our own `.proto` files under `proto/`, compiled by protox).

#[allow(clippy::all, missing_docs, missing_debug_implementations)]
pub mod google {
    pub mod rpc {
        include!(concat!(env!("OUT_DIR"), "/google.rpc.rs"));
    }
}

#[allow(clippy::all, missing_docs, missing_debug_implementations)]
pub mod p4 {
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/p4.v1.rs"));
    }
    pub mod config {
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/p4.config.v1.rs"));
        }
    }
}

/// The descriptor set of every `.proto` file (for the text format).
pub const DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptor.bin"));
