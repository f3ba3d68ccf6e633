//! Fuzz target `tpacket_block`: the walk over a `TPACKET_V3` receive block of the AF_PACKET
//! port's ring (`snic_io::afpacket::tpacket`), and the same bytes read as one `TPACKET_V2`
//! receive slot. The input is the block or slot, as the kernel would have filled it (or not).
//!
//! Checked: walking never panics; every frame it returns, and the virtio-net header in front of
//! it, lies inside the block and after the frame's own header; a walk that fails names a
//! frame offset inside the block.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_io::afpacket::tpacket::{self, RingError, TPACKET2_HDRLEN, TPACKET3_HDRLEN};

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = tpacket::v2_frame(data, 10) {
        assert!(f.mac >= TPACKET2_HDRLEN + 10 && f.mac + f.snaplen <= data.len());
        let (vnet, frame) = f.slices(data, 10);
        assert_eq!((vnet.len(), frame.len()), (10, f.snaplen));
    }
    match tpacket::walk(data, 10) {
        Ok(frames) => {
            for f in frames {
                assert!(f.mac >= TPACKET3_HDRLEN + 10);
                assert!(f.mac + f.snaplen <= data.len());
                let (vnet, frame) = f.slices(data, 10);
                assert_eq!((vnet.len(), frame.len()), (10, f.snaplen));
            }
        }
        Err(RingError::BadBlock) => {}
        Err(
            RingError::FrameOutside { off }
            | RingError::BadFrameData { off }
            | RingError::BadNext { off },
        ) => assert!(off < data.len()),
    }
});
