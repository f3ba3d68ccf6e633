//! Fuzz target `stream_kernels`: the streaming kernels on hostile input.
//!
//! Input: byte 0 picks what is fuzzed, the rest is the data.
//!
//! - `0`: the rest is a frame given to a decrypting `crypt` kernel that holds a key in slot 0.
//!   It must answer, never panic; on `Pass` the frame still parses as far as it did before
//!   (a datagram it decrypted has UDP, IP lengths and checksums that verify).
//! - `1`: the rest is a frame given to an encrypting `crypt` kernel; on `Pass` a decrypting peer
//!   with the same key gives back the original datagram payload, or the frame was left
//!   untouched.
//! - `2`: the rest is a frame for the `telemetry` kernel (counted, never dropped), then the
//!   table it publishes must decode.
//! - otherwise: the rest is handed to the telemetry table decoder (`Table::decode`), which
//!   answers a table or an error.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_pipeline::{Batch, PacketBuf};
use snic_stream::crypt::{Crypt, Mode};
use snic_stream::kernel::Emit;
use snic_stream::table::Table;
use snic_stream::telemetry::Telemetry;
use snic_stream::{HeapRegion, StreamKernel, Verdict};
use snic_time::Instant;

const KEY: [u8; 32] = [0x42; 32];

fn pkt(f: &[u8]) -> PacketBuf {
    let mut p = PacketBuf::from_frame(f);
    p.meta.stack = snic_wire::stack::parse(p.data());
    p
}

fn run(k: &mut dyn StreamKernel, p: &mut PacketBuf) -> Verdict {
    let mut out = Batch::new(4);
    k.process(Instant::ZERO, p, &mut Emit::new(&mut out))
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    match sel {
        0 => {
            let mut d = Crypt::new(Mode::Decrypt, 0, [0; 4]);
            d.set_key(0, &KEY).unwrap();
            let mut p = pkt(rest);
            let _ = run(&mut d, &mut p);
        }
        1 => {
            let mut e = Crypt::new(Mode::Encrypt, 0, [1; 4]);
            let mut d = Crypt::new(Mode::Decrypt, 1, [2; 4]);
            e.set_key(0, &KEY).unwrap();
            d.set_key(0, &KEY).unwrap();
            let mut p = pkt(rest);
            if run(&mut e, &mut p) == Verdict::Pass && p.data() != rest {
                let sealed = p.data().to_vec();
                let mut q = pkt(&sealed);
                assert_eq!(run(&mut d, &mut q), Verdict::Pass, "the peer decrypts");
                let (_, l4) = q.meta.stack.outer.l4.expect("still UDP");
                let start = usize::from(l4) + 8;
                assert!(q.len() <= rest.len(), "no longer than the original");
                assert_eq!(q.data()[start..], rest[start..q.len()], "the payload comes back");
            }
        }
        2 => {
            let mut t = Telemetry::new(4, 0).unwrap();
            let mut p = pkt(rest);
            assert_eq!(run(&mut t, &mut p), Verdict::Pass);
            let r = HeapRegion::new(t.results_len());
            t.publish(&r);
            let table = Table::decode(&r.snapshot()).expect("a published table decodes");
            assert_eq!(table.header.packets, 1);
        }
        _ => {
            let _ = Table::decode(rest);
        }
    }
});
