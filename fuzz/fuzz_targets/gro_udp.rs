//! Fuzz target `gro_udp`: merging VXLAN datagrams into UDP GSO buffers
//! (`snic_pipeline::gro::coalesce_udp_tunnel`) on arbitrary frames. Input: frames, each a
//! little-endian u16 length and that many bytes.
//!
//! Checked, besides "never panics": packets out plus packets merged equal packets in; frames
//! that were not merged keep their bytes; each buffer's UDP payload, cut at its `gso.size` as the
//! kernel cuts it, gives the UDP payloads of as many input frames as went into it, in order.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_pipeline::Batch;
use snic_pipeline::gro::coalesce_udp_tunnel;
use snic_pipeline::testing::frames::push_length_prefixed;

fuzz_target!(|data: &[u8]| {
    let mut b = Batch::new(128);
    let frames = push_length_prefixed(&mut b, data);
    let before = b.len();
    let merged = coalesce_udp_tunnel(&mut b);
    assert_eq!(b.len() + merged, before);
    // Walk the output against the input in order.
    let mut i = 0;
    for p in b.iter() {
        match p.meta.offload.gso {
            None => {
                assert_eq!(p.data(), &frames[i][..]);
                i += 1;
            }
            Some(g) => {
                let size = usize::from(g.size);
                assert_eq!(usize::from(g.hdr_len), 42);
                let pieces: Vec<&[u8]> = p.data()[42..].chunks(size).collect();
                assert!(pieces.len() >= 2 && pieces.len() <= 64);
                for piece in pieces {
                    assert_eq!(piece, &frames[i][42..]);
                    i += 1;
                }
            }
        }
    }
    assert_eq!(i, before);
});
