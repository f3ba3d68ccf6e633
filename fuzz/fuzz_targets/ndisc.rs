//! Fuzz target `ndisc`: `snic_wire::ndisc::Repr::parse` on arbitrary bytes as a whole ICMPv6
//! message (Neighbor Solicitation or Advertisement with options).
//!
//! Checked, besides "never panics": on `Ok`, the target is not multicast, `emit` writes exactly
//! `buffer_len` bytes that parse back to the same repr, and a checksum filled over them verifies.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_wire::{icmpv6, ndisc};
use std::net::Ipv6Addr;

fuzz_target!(|data: &[u8]| {
    let Ok(r) = ndisc::Repr::parse(data) else { return };
    let target = match r {
        ndisc::Repr::Solicit { target, .. } | ndisc::Repr::Advert { target, .. } => target,
    };
    assert!(!target.is_multicast(), "a multicast target parsed: {r:?}");
    let mut out = vec![0u8; r.buffer_len()];
    r.emit(&mut out).expect("emit into buffer_len bytes");
    assert_eq!(ndisc::Repr::parse(&out).expect("our emit parses"), r);
    let (src, dst) = (Ipv6Addr::LOCALHOST, ndisc::solicited_node(target));
    let mut p = icmpv6::Packet::new_checked(&mut out[..]).expect("at least a header");
    p.fill_checksum(src, dst);
    assert!(icmpv6::Packet::new_checked(&out[..]).unwrap().verify_checksum(src, dst));
});
