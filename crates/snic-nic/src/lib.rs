//! The NIC's own packet handling, sans-IO.

pub mod neigh;
