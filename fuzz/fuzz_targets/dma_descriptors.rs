//! Fuzz target `dma_descriptors`: arbitrary bytes as DMA ring contents and doorbells.
//!
//! Setup (fresh for every input): a `DmaEngine` over client 1's host region (rings, chain
//! area, buffers), client 2's host region (forbidden: filled with 0xEE) and a 64 KiB device
//! region. Queues 0 (memory-mapped), 1 (memory-mapped, align 8), 2 (streaming, loopback to 3)
//! and 3 (streaming), rings of 8 slots and completion rings of 4 entries, one H2C channel; the
//! chain limit is 64.
//!
//! Input: byte 0 = `n`; the next `4 * n` bytes (at most 1020) fill, in order, the H2C and C2H
//! rings of queues 0..3 (256 bytes each, padded with zeros) and, again, the chain area at the
//! start of client 1's region; the rest is records, by the low 3 bits of a control byte (queue = bits 3-4, bit 5 = C2H):
//! - `0`/`1`: producer doorbell `k = next byte` slots past the producer (`1`: `k` is
//!   absolute, the next 4 bytes).
//! - `2`: completion doorbell at the next byte.
//! - `3`: poll with budget `next byte`.
//! - `4`: push a packet of `next byte * 3` bytes; `5`: stop, `6`: start the queue.
//! - `7`: run the channel on the chain-area descriptor `next byte & 63`.
//!
//! Checked, besides "never panics": client 2's region is unchanged after every step.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_dma::testing::{Client, QueueLayout, Rig};
use snic_dma::{ChannelKey, Dir, Notify};

const HOST: u64 = 0x10_0000;
const OTHER: u64 = 0x100_0000;
const OTHER_LEN: usize = 1 << 14;

fn setup() -> Rig {
    let clients = [Client::new(1, HOST, 0x6_0000), Client::new(2, OTHER, OTHER_LEN).filled(0xEE)];
    // Queue q's rings 0x100 bytes apart in the 64 KiB block after the chain area's, block q + 1.
    let layout = QueueLayout {
        base: HOST + 0x1_0000,
        stride: 0x100,
        ..QueueLayout::new(1, HOST, Notify::Interrupt)
    };
    let mut r = Rig::new(&clients, 1 << 16, layout);
    r.e.set_max_chain(64);
    r.mixed_queues();
    r.channel(ChannelKey(0), Dir::H2c);
    r
}

fuzz_target!(|data: &[u8]| {
    let mut r = setup();
    let Some((&n, data)) = data.split_first() else { return };
    let (rings, mut rest) = data.split_at(data.len().min(usize::from(n) * 4));
    let mut img = [0u8; 1024];
    img[..rings.len()].copy_from_slice(rings);
    for q in 0..4u64 {
        let o = (q * 256) as usize;
        r.e.mem.write(r.layout.h2c_ring(q), &img[o..o + 256]).unwrap();
    }
    // The chain area reuses the same bytes, so `next` pointers into it meet descriptors.
    r.e.mem.write(HOST, &img).unwrap();
    let other = r.e.mem.slice(OTHER, OTHER_LEN).unwrap().to_vec();
    let mut out = Vec::new();
    while let Some((&ctl, tail)) = rest.split_first() {
        rest = tail;
        let mut next = || -> u8 {
            let Some((&b, t)) = rest.split_first() else { return 0 };
            rest = t;
            b
        };
        let q = u16::from((ctl >> 3) & 3);
        let dir = if ctl & 0x20 != 0 { Dir::C2h } else { Dir::H2c };
        match ctl & 7 {
            0 => r.advance(q, dir, u32::from(next())),
            1 => {
                let p = u32::from_le_bytes([next(), next(), next(), next()]);
                r.e.doorbell(q, dir, p);
            }
            2 => r.e.cmpt_doorbell(q, u32::from(next())),
            3 => {
                r.e.poll(usize::from(next()));
            }
            4 => {
                let pkt = vec![0xA5u8; usize::from(next()) * 3];
                let _ = r.e.push_stream(q, &pkt);
            }
            5 => {
                let _ = r.e.stop_queue(q);
            }
            6 => {
                let _ = r.e.start_queue(q);
            }
            _ => {
                let _ = r.e.channel_run(ChannelKey(0), HOST + u64::from(next() & 63) * 32);
            }
        }
        while r.e.poll_event().is_some() {}
        while r.e.poll_stream(&mut out).is_some() {}
        assert_eq!(
            r.e.mem.slice(OTHER, OTHER_LEN).unwrap(),
            &other[..],
            "client 2's memory changed"
        );
    }
    r.e.poll(10_000);
    assert_eq!(r.e.mem.slice(OTHER, OTHER_LEN).unwrap(), &other[..], "client 2's memory changed");
});
