//! Fuzz target `gro`: receive-side coalescing (`snic_pipeline::gro::coalesce`) on arbitrary
//! frames. Input: byte 0 bit 0 says whether VXLAN frames may merge; then frames, each a
//! little-endian u16 length and that many bytes.
//!
//! Checked, besides "never panics": packets out plus packets merged equal packets in; frames
//! that were not merged keep their bytes; every merged super-packet segments again
//! (`offload::segment`) into exactly as many segments as went into it.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_pipeline::gro::coalesce;
use snic_pipeline::offload::segment;
use snic_pipeline::testing::frames::push_length_prefixed;
use snic_pipeline::{Batch, MAX_BATCH};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let mut b = Batch::new(64);
    let frames = push_length_prefixed(&mut b, rest);
    let before = b.len();
    let merged = coalesce(&mut b, flags & 1 != 0);
    assert_eq!(b.len() + merged, before);
    let mut segs = 0;
    let mut out = Batch::new(MAX_BATCH);
    for p in b.iter() {
        if p.meta.offload.gso.is_some() {
            out.clear();
            let n = segment(p, &mut out).expect("a merged super-packet segments");
            assert!(n >= 2);
            segs += n;
        } else {
            assert!(frames.iter().any(|f| f[..] == *p.data()));
            segs += 1;
        }
    }
    assert_eq!(segs, before);
});
