//! Edge cases of the DMA engine that a hostile or unlucky host can reach (completion
//! accounting across wraps, loopback completion room, stream size limits, chain limits,
//! stop/start colour, round robin, channel reports).

use snic_dma::desc::{cmpt_word, flags};
use snic_dma::engine::{MAX_STREAM_PKT, StreamDrop};
use snic_dma::testing::{Client, QueueLayout, Rig};
use snic_dma::{
    ChannelKey, Completion, Descriptor, Dir, Event, Mode, Notify, QueueConfig, QueueState, Status,
};

/// Client 1's host memory (rings at the start, buffers from `BUF`).
const HOST: u64 = 0x100_0000;
const HOST_LEN: usize = 4 << 20;
const BUF: u64 = HOST + 0x10_0000;
/// Client 2's memory (must never change).
const OTHER: u64 = 0x1000_0000;
const OTHER_LEN: usize = 1 << 16;

/// Both clients' memory (client 2's filled with 0xEE) and 4 MiB of device memory; queue
/// rings in one 64 KiB block per queue from HOST (`r.cfg`), queues polled.
fn rig() -> Rig {
    let clients = [Client::new(1, HOST, HOST_LEN), Client::new(2, OTHER, OTHER_LEN).filled(0xEE)];
    Rig::new(&clients, 4 << 20, QueueLayout::new(1, HOST, Notify::Poll))
}

/// A host that consumes completions the way a driver does: it polls the colour bit at its
/// own cidx (colour 1 on the first pass, 0 on the next, ...) and rings the completion
/// doorbell. Returns the entries it saw.
struct HostCq {
    qid: u16,
    cidx: u32,
    size: u32,
}

impl HostCq {
    fn drain(&mut self, r: &mut Rig) -> Vec<Completion> {
        let mut out = Vec::new();
        loop {
            let want = (self.cidx / self.size) & 1 == 0;
            let c = r.cmpt(self.qid, self.cidx);
            if c.color() != want {
                break;
            }
            out.push(c);
            self.cidx = self.cidx.wrapping_add(1);
        }
        if !out.is_empty() {
            r.e.cmpt_doorbell(self.qid, self.cidx);
        }
        out
    }
}

/// Tiny deterministic PRNG (xorshift) so the model tests need no extra crates.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Model test: memory-mapped H2C and C2H slots of random kinds (EOP or not, chains, bad
/// descriptors) on the smallest rings, random budgets and random host consumption, across
/// hundreds of wraps of both rings. Every slot whose last descriptor has EOP, and every bad
/// slot, must produce exactly one completion, in slot order per direction, with the right
/// index (new cidx), len, status, dir and colour (checked by `HostCq`), and no other slot
/// may produce one.
#[test]
fn mm_completions_exact_across_many_wraps() {
    for (ring, cmpt, seed) in [(2u32, 2u32, 1u64), (4, 2, 7), (8, 4, 99), (2, 8, 1234)] {
        let mut r = rig();
        r.queue(0, r.cfg(0, Mode::Mm, ring, cmpt));
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut host = HostCq { qid: 0, cidx: 0, size: cmpt };
        let mut pidx = [0u32; 2];
        // Expected completions per direction, in order: (index, len, status).
        let mut expect: [std::collections::VecDeque<(u32, u32, Status)>; 2] = Default::default();
        let mut seen = 0usize;
        let chain_area = BUF + 0x20_0000;
        let mut total_slots = 0u32;
        while total_slots < 3000 {
            for (di, dir) in [Dir::H2c, Dir::C2h].into_iter().enumerate() {
                let cidx = match dir {
                    Dir::H2c => r.e.queue_indices(0).unwrap().h2c_cidx,
                    Dir::C2h => r.e.queue_indices(0).unwrap().c2h_cidx,
                };
                let free = ring - pidx[di].wrapping_sub(cidx);
                let n = rng.below(u64::from(free) + 1) as u32;
                for _ in 0..n {
                    let i = pidx[di];
                    let (src, dst) = match dir {
                        Dir::H2c => (BUF, r.dev),
                        Dir::C2h => (r.dev, BUF + 0x8000),
                    };
                    let len = 1 + rng.below(64) as u32;
                    let kind = rng.below(5);
                    let next = i.wrapping_add(1);
                    match kind {
                        0 => {
                            r.post(0, dir, i, Descriptor::new(src, dst, len));
                            expect[di].push_back((next, len, Status::Ok));
                        }
                        1 => {
                            let d =
                                Descriptor { flags: flags::SOP, ..Descriptor::new(src, dst, len) };
                            r.post(0, dir, i, d);
                        }
                        2 => {
                            // Chain of two, EOP on the last.
                            let link = chain_area + u64::from(i % 64) * 64 + di as u64 * 0x1000;
                            r.put(
                                link,
                                Descriptor { flags: flags::EOP, ..Descriptor::new(src, dst, 3) },
                            );
                            let d = Descriptor {
                                flags: flags::SOP | flags::CHAIN,
                                next: link,
                                ..Descriptor::new(src, dst, len)
                            };
                            r.post(0, dir, i, d);
                            expect[di].push_back((next, len + 3, Status::Ok));
                        }
                        3 => {
                            r.post_raw(0, dir, i, [0x5A; 32]);
                            expect[di].push_back((next, 0, Status::BadMagic));
                        }
                        _ => {
                            // Client 2's memory as destination (or source).
                            let d = match dir {
                                Dir::H2c => Descriptor::new(OTHER, dst, len),
                                Dir::C2h => Descriptor::new(src, OTHER, len),
                            };
                            r.post(0, dir, i, d);
                            expect[di].push_back((next, 0, Status::NotOwner));
                        }
                    }
                    pidx[di] = next;
                    total_slots += 1;
                }
                r.e.doorbell(0, dir, pidx[di]);
            }
            r.e.poll(1 + rng.below(8) as usize);
            if rng.below(3) != 0 {
                for c in host.drain(&mut r) {
                    let di = usize::from(c.dir);
                    assert!(di < 2, "queue-level completion {c:?}");
                    let (index, len, status) = expect[di]
                        .pop_front()
                        .unwrap_or_else(|| panic!("unexpected completion {c:?}"));
                    assert_eq!(
                        (c.index, c.len, c.status()),
                        (index, len, Some(status)),
                        "ring {ring} cmpt {cmpt} entry {seen}"
                    );
                    seen += 1;
                }
            }
            assert_eq!(r.e.queue_state(0), Some(QueueState::Running));
        }
        // Drain what is left.
        for _ in 0..10_000 {
            r.e.poll(64);
            for c in host.drain(&mut r) {
                let di = usize::from(c.dir);
                let (index, len, status) = expect[di].pop_front().expect("completion");
                assert_eq!((c.index, c.len, c.status()), (index, len, Some(status)));
                seen += 1;
            }
            if expect.iter().all(|e| e.is_empty()) {
                break;
            }
        }
        assert!(expect.iter().all(|e| e.is_empty()), "completions lost: {expect:?}");
        assert_eq!(r.e.stats().completions, seen as u64);
        // Completed events account for every entry written.
        let reported: u64 = r
            .events()
            .iter()
            .map(|e| match e {
                Event::Completed { entries, .. } => u64::from(*entries),
                _ => 0,
            })
            .sum();
        assert_eq!(reported, seen as u64);
        assert_eq!(r.bytes(OTHER, OTHER_LEN), vec![0xEE; OTHER_LEN]);
    }
}

/// Streaming loopback to the queue itself: the H2C packet's completion and the C2H delivery
/// completion share one completion ring. The engine reserves room for two entries, but the
/// delivery may write more: each bad C2H buffer at the head gets its own error completion.
/// The H2C completion must then wait for room (the slot is doorbelled with EOP, so the host is
/// owed exactly one completion for it); the engine instead drops it and counts it in
/// `flushed_silent` (engine.rs, st_h2c_slot: `if !q.cmpt_room() { flushed_silent += 1 }`).
#[test]
fn self_loopback_h2c_completion_not_lost_when_delivery_uses_the_room() {
    let mut r = rig();
    r.queue(1, QueueConfig { stream_to: Some(1), ..r.cfg(1, Mode::St, 4, 2) });
    // C2H slot 0: a bad buffer (client 2's memory); slot 1: a good 64-byte buffer.
    r.post(1, Dir::C2h, 0, Descriptor::new(0, OTHER, 64));
    r.post(1, Dir::C2h, 1, Descriptor::new(0, BUF + 0x1000, 64));
    r.e.doorbell(1, Dir::C2h, 2);
    r.e.mem.write(BUF, &[7u8; 32]).unwrap();
    r.post(1, Dir::H2c, 0, Descriptor::new(BUF, 0, 32));
    r.e.doorbell(1, Dir::H2c, 1);
    let mut host = HostCq { qid: 1, cidx: 0, size: 2 };
    let mut all = Vec::new();
    for _ in 0..10 {
        r.run();
        all.extend(host.drain(&mut r));
    }
    assert_eq!(r.bytes(BUF + 0x1000, 32), vec![7u8; 32], "packet delivered");
    let h2c: Vec<_> = all.iter().filter(|c| c.dir == Dir::H2c.code()).collect();
    assert_eq!(h2c.len(), 1, "one completion for the EOP slot; saw {all:?}");
    assert_eq!((h2c[0].status(), h2c[0].len, h2c[0].index), (Some(Status::Ok), 32, 1));
    assert_eq!(r.e.stats().flushed_silent, 0);
}

/// Posted C2H buffers: a bad buffer that is not at the head of the ring (the head buffer is
/// good but too small for the packet) is never consumed, so every packet larger than the head
/// buffer is dropped with `NoBuffer` forever, although the host has posted plenty of good
/// buffers behind it. The spec says a bad C2H descriptor gets an error completion, is consumed,
/// and the engine retries with the next slots; here the queue is wedged for good
/// (engine.rs, push_inner: the gather loop `Err(_) => break` without consuming).
#[test]
fn bad_c2h_buffer_behind_the_head_does_not_wedge_the_queue() {
    let mut r = rig();
    r.queue(2, r.cfg(2, Mode::St, 8, 8));
    let b = BUF + 0x4_0000;
    r.post(2, Dir::C2h, 0, Descriptor::new(0, b, 64));
    r.post(2, Dir::C2h, 1, Descriptor::new(0, OTHER, 64)); // bad
    for i in 2..6u32 {
        r.post(2, Dir::C2h, i, Descriptor::new(0, b + u64::from(i) * 0x100, 64));
    }
    r.e.doorbell(2, Dir::C2h, 6);
    let mut ok = 0;
    for _ in 0..3 {
        if r.e.push_stream(2, &[9u8; 100]).is_ok() {
            ok += 1;
        }
    }
    assert!(ok >= 1, "4 good 64-byte buffers posted, yet every 100-byte packet is dropped");
    assert_eq!(r.bytes(OTHER, OTHER_LEN), vec![0xEE; OTHER_LEN]);
}

/// A packet of exactly MAX_STREAM_PKT bytes is legal and delivered whole; one byte more is
/// dropped with BadLength, and nothing of it reaches the stream.
#[test]
fn stream_packet_at_max_len() {
    let mut r = rig();
    r.queue(1, r.cfg(1, Mode::St, 8, 8));
    let half = (MAX_STREAM_PKT / 2) as u32;
    let sop = Descriptor { flags: flags::SOP, ..Descriptor::new(BUF, 0, half) };
    r.post(1, Dir::H2c, 0, sop);
    r.post(1, Dir::H2c, 1, Descriptor { flags: flags::EOP, ..Descriptor::new(BUF, 0, half) });
    r.post(1, Dir::H2c, 2, sop);
    r.post(1, Dir::H2c, 3, Descriptor { flags: flags::EOP, ..Descriptor::new(BUF, 0, half + 1) });
    r.e.doorbell(1, Dir::H2c, 4);
    r.run();
    let c0 = r.cmpt(1, 0);
    assert_eq!((c0.status(), c0.len, c0.index), (Some(Status::Ok), MAX_STREAM_PKT as u32, 2));
    let c1 = r.cmpt(1, 1);
    assert_eq!((c1.status(), c1.index), (Some(Status::BadLength), 4));
    let mut out = Vec::new();
    assert_eq!(r.e.poll_stream(&mut out), Some(1));
    assert_eq!(out.len(), MAX_STREAM_PKT);
    assert_eq!(r.e.poll_stream(&mut out), None);
}

/// After stop/start mid-ring (the host was on the colour-0 pass), the ring is zeroed and the
/// first new entry is at slot 0 with colour 1; outstanding slots were flushed in order first.
#[test]
fn colour_restarts_after_stop_start() {
    let mut r = rig();
    r.queue(0, r.cfg(0, Mode::Mm, 4, 4));
    let mut host = HostCq { qid: 0, cidx: 0, size: 4 };
    for i in 0..6u32 {
        r.post(0, Dir::H2c, i, Descriptor::new(BUF, r.dev, 8));
        r.e.doorbell(0, Dir::H2c, i + 1);
        r.run();
        assert_eq!(host.drain(&mut r).len(), 1);
    }
    // Two outstanding slots, then stop: two Flushed entries with the pass-2 colour (0).
    r.post(0, Dir::H2c, 6, Descriptor::new(BUF, r.dev, 8));
    r.post(0, Dir::H2c, 7, Descriptor::new(BUF, r.dev, 8));
    r.e.doorbell(0, Dir::H2c, 8);
    r.e.stop_queue(0).unwrap();
    let f = host.drain(&mut r);
    assert_eq!(f.len(), 2);
    assert!(f.iter().all(|c| c.status() == Some(Status::Flushed) && !c.color()));
    assert_eq!((f[0].index, f[1].index), (7, 8));
    r.e.start_queue(0).unwrap();
    for i in 0..4 {
        assert_eq!(r.cmpt(0, i).encode(), [0u8; 16], "ring zeroed");
    }
    let mut host = HostCq { qid: 0, cidx: 0, size: 4 };
    r.post(0, Dir::H2c, 0, Descriptor::new(BUF, r.dev, 8));
    r.e.doorbell(0, Dir::H2c, 1);
    r.run();
    let c = host.drain(&mut r);
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].index, c[0].word), (1, cmpt_word::COLOR | cmpt_word::SOP | cmpt_word::EOP));
}

/// Stop with a full completion ring: nothing is overwritten (the unconsumed entries stay),
/// the flushed slots are counted as silent, and the queue restarts cleanly.
#[test]
fn stop_with_full_completion_ring_overwrites_nothing() {
    let mut r = rig();
    r.queue(0, r.cfg(0, Mode::Mm, 8, 2));
    for i in 0..5u32 {
        r.post(0, Dir::H2c, i, Descriptor::new(BUF, r.dev, 8));
    }
    r.e.doorbell(0, Dir::H2c, 5);
    r.run();
    let before: Vec<_> = (0..2).map(|i| r.cmpt(0, i)).collect();
    assert_eq!((before[0].index, before[1].index), (1, 2));
    r.e.stop_queue(0).unwrap();
    assert_eq!((r.cmpt(0, 0), r.cmpt(0, 1)), (before[0], before[1]));
    assert_eq!(r.e.stats().flushed_silent, 3);
    assert_eq!(r.e.queue_state(0), Some(QueueState::Stopped));
    // A completion doorbell to the stopped queue is ignored; start works.
    r.e.cmpt_doorbell(0, 2);
    r.e.start_queue(0).unwrap();
    assert_eq!(r.e.queue_indices(0).unwrap(), Default::default());
}

/// Completion doorbell edge cases: equal to the current cidx is fine, exactly the written
/// count is fine, one past is a BadDoorbell queue error (no wrap to "huge" on backwards).
#[test]
fn cmpt_doorbell_edges() {
    let mut r = rig();
    r.queue(0, r.cfg(0, Mode::Mm, 4, 4));
    for i in 0..3u32 {
        r.post(0, Dir::H2c, i, Descriptor::new(BUF, r.dev, 8));
    }
    r.e.doorbell(0, Dir::H2c, 3);
    r.run();
    r.e.cmpt_doorbell(0, 0);
    r.e.cmpt_doorbell(0, 3);
    assert_eq!(r.e.queue_state(0), Some(QueueState::Running));
    r.e.cmpt_doorbell(0, 2); // backwards
    assert_eq!(r.e.queue_state(0), Some(QueueState::Error(Status::BadDoorbell)));
    let mut r = rig();
    r.queue(0, r.cfg(0, Mode::Mm, 4, 4));
    r.e.cmpt_doorbell(0, 1); // past the entries written
    assert_eq!(r.e.queue_state(0), Some(QueueState::Error(Status::BadDoorbell)));
    let c = r.cmpt(0, 0);
    assert_eq!((c.dir, c.index, c.status()), (2, 1, Some(Status::BadDoorbell)));
    r.e.cmpt_doorbell(0, u32::MAX); // in error: ignored, no panic
}

/// Producer doorbell boundary: exactly ring_size outstanding is accepted, one more is
/// RingOverflow; u32::MAX (backwards from 0) is BadDoorbell.
#[test]
fn doorbell_boundaries() {
    let mut r = rig();
    r.queue(0, r.cfg(0, Mode::Mm, 4, 8));
    r.e.doorbell(0, Dir::H2c, 4);
    assert_eq!(r.e.queue_state(0), Some(QueueState::Running));
    r.e.doorbell(0, Dir::H2c, 5);
    assert_eq!(r.e.queue_state(0), Some(QueueState::Error(Status::RingOverflow)));
    let mut r = rig();
    r.queue(0, r.cfg(0, Mode::Mm, 4, 8));
    r.e.doorbell(0, Dir::C2h, u32::MAX);
    assert_eq!(r.e.queue_state(0), Some(QueueState::Error(Status::BadDoorbell)));
}

/// Chain limit: exactly max_chain descriptors run, max_chain + 1 fail with ChainTooLong
/// pointing at the first descriptor past the limit, moving nothing.
#[test]
fn channel_chain_limit_exact() {
    let mut r = rig();
    r.e.set_max_chain(4);
    let k = ChannelKey(1);
    r.channel(k, Dir::H2c);
    r.e.mem.write(BUF, &[3u8; 64]).unwrap();
    let at = |i: u64| BUF + 0x1000 + i * 32;
    let link = |r: &mut Rig, n: u64| {
        let dev = r.dev;
        r.put_chain(
            at(0),
            (0..n).map(|i| Descriptor { flags: 0, ..Descriptor::new(BUF, dev + i * 8, 8) }),
        );
    };
    link(&mut r, 4);
    r.e.channel_run(k, at(0)).unwrap();
    r.e.poll(100);
    let ev = r.events();
    assert!(matches!(
        ev[..],
        [Event::ChannelDone { descs: 4, bytes: 32, status: Status::Ok, fault_desc: 0, .. }]
    ));
    r.e.mem.fill(r.dev, 64, 0).unwrap();
    link(&mut r, 5);
    r.e.channel_run(k, at(0)).unwrap();
    r.e.poll(100);
    let ev = r.events();
    assert_eq!(
        ev,
        vec![Event::ChannelDone {
            key: k,
            descs: 0,
            bytes: 0,
            status: Status::ChainTooLong,
            fault_desc: at(4),
            interrupt: false
        }]
    );
    assert_eq!(r.bytes(r.dev, 64), vec![0u8; 64]);
}

/// Round robin: a queue with many long chains does not starve another queue. With a budget
/// smaller than one chain, the second queue is served on the next poll.
#[test]
fn busy_queue_does_not_starve_another() {
    let mut r = rig();
    r.mm(0);
    r.mm(1);
    let chain = BUF + 0x3_0000;
    // A chain of 8, EOP on the last.
    let d = Descriptor { flags: 0, ..Descriptor::new(BUF, r.dev, 8) };
    r.put_chain(chain, std::iter::repeat_n(d, 7).chain([Descriptor { flags: flags::EOP, ..d }]));
    for i in 0..16u32 {
        r.e.mem.copy(chain, r.slot(0, Dir::H2c, i), 32).unwrap();
    }
    r.e.doorbell(0, Dir::H2c, 16);
    r.post(1, Dir::H2c, 0, Descriptor::new(BUF, r.dev + 0x1000, 8));
    r.e.doorbell(1, Dir::H2c, 1);
    r.e.poll(4);
    r.e.poll(4);
    assert_eq!(r.e.queue_indices(1).unwrap().h2c_cidx, 1, "queue 1 starved");
    assert!(r.e.queue_indices(0).unwrap().h2c_cidx >= 1);
}

/// Push to a queue whose completion ring is full reports CmptFull and consumes no buffer;
/// the drop is counted once.
#[test]
fn push_with_full_cmpt_consumes_nothing() {
    let mut r = rig();
    r.queue(2, r.cfg(2, Mode::St, 4, 2));
    for i in 0..4u32 {
        r.post(2, Dir::C2h, i, Descriptor::new(0, BUF + u64::from(i) * 0x100, 16));
    }
    r.e.doorbell(2, Dir::C2h, 4);
    r.e.push_stream(2, &[1; 4]).unwrap();
    r.e.push_stream(2, &[2; 4]).unwrap();
    assert_eq!(r.e.push_stream(2, &[3; 4]), Err(StreamDrop::CmptFull));
    assert_eq!(r.e.queue_indices(2).unwrap().c2h_cidx, 2);
    assert_eq!(r.e.stats().stream_drops, [0, 0, 1, 0]);
    assert_eq!(r.bytes(BUF + 0x200, 4), vec![0u8; 4]);
}

/// Stats: `DmaStats::descs` is "descriptors completed successfully". A streaming slot whose
/// packet is later dropped (a new SOP arrives before its EOP: BadFraming) never completes,
/// yet it is counted when it is gathered (engine.rs, st_h2c_slot: `stats.descs +=` before the
/// packet's fate is known). Only the second, delivered packet's descriptor should count.
#[test]
fn dropped_stream_packet_is_not_counted_as_completed_descriptors() {
    let mut r = rig();
    r.queue(1, r.cfg(1, Mode::St, 8, 8));
    r.post(1, Dir::H2c, 0, Descriptor { flags: flags::SOP, ..Descriptor::new(BUF, 0, 8) });
    r.post(1, Dir::H2c, 1, Descriptor::new(BUF, 0, 8));
    r.e.doorbell(1, Dir::H2c, 2);
    r.run();
    assert_eq!(r.cmpt(1, 0).status(), Some(Status::BadFraming));
    assert_eq!(r.cmpt(1, 1).status(), Some(Status::Ok));
    assert_eq!(r.e.stats().descs, 1);
}
