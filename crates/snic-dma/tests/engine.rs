//! Integration tests of the DMA engine: queues (memory-mapped and streaming), completion
//! rings, every error status, channels, and a property test that random descriptor soup never
//! panics and never touches memory no valid descriptor could target.

use proptest::prelude::*;
use snic_dma::desc::{DIR_QUEUE, MAX_CHAIN, cmpt_word, flags};
use snic_dma::engine::{MAX_QUEUES, StreamDrop};
use snic_dma::testing::{Client, QueueLayout, Rig, changed};
use snic_dma::{
    ChannelKey, Completion, Descriptor, Dir, DmaError, Event, Mode, Notify, QueueConfig,
    QueueState, Status,
};

/// Host memory of client 1: rings and buffers.
const HOST: u64 = 0x10_0000;
const HOST_LEN: usize = 1 << 20;
/// Host memory of client 2 (no queue of client 1 may touch it).
const OTHER: u64 = 0x100_0000;
const OTHER_LEN: usize = 1 << 16;
/// Data buffers start here in HOST.
const BUF: u64 = HOST + 0x8_0000;

/// Both clients' memory (client 2's filled with 0xEE) and 1 MiB of device memory; queue
/// rings in one 64 KiB block per queue from HOST (`r.cfg`), queues notify by interrupt.
fn rig() -> Rig {
    let clients = [Client::new(1, HOST, HOST_LEN), Client::new(2, OTHER, OTHER_LEN).filled(0xEE)];
    Rig::new(&clients, 1 << 20, QueueLayout::new(1, HOST, Notify::Interrupt))
}

#[test]
fn mm_h2c_and_c2h_are_byte_exact() {
    let mut r = rig();
    r.mm(0);
    let data = r.fill(BUF, 1000, 7);
    r.post(0, Dir::H2c, 0, Descriptor::new(BUF, r.dev + 100, 1000));
    r.e.doorbell(0, Dir::H2c, 1);
    assert_eq!(r.run(), 1);
    assert_eq!(r.bytes(r.dev + 100, 1000), data);
    let c = r.cmpt(0, 0);
    assert_eq!((c.len, c.index, c.status, c.dir, c.qid), (1000, 1, 0, 0, 0));
    assert_eq!(c.word, cmpt_word::COLOR | cmpt_word::SOP | cmpt_word::EOP);
    assert_eq!(r.events(), vec![Event::Completed { qid: 0, entries: 1, interrupt: true }]);

    // Back to another host buffer.
    r.post(0, Dir::C2h, 0, Descriptor::new(r.dev + 100, BUF + 0x1000, 1000));
    r.e.doorbell(0, Dir::C2h, 1);
    r.run();
    assert_eq!(r.bytes(BUF + 0x1000, 1000), data);
    let c = r.cmpt(0, 1);
    assert_eq!((c.len, c.index, c.status, c.dir), (1000, 1, 0, 1));
    let ix = r.e.queue_indices(0).unwrap();
    assert_eq!((ix.h2c_cidx, ix.c2h_cidx, ix.cmpt_pidx), (1, 1, 2));
    let s = r.e.stats();
    assert_eq!((s.h2c_bytes, s.c2h_bytes, s.descs, s.completions), (1000, 1000, 2, 2));
}

#[test]
fn chain_moves_every_piece_with_one_completion() {
    let mut r = rig();
    r.mm(0);
    let data = r.fill(BUF, 300, 1);
    let d1 = BUF + 0x10000;
    let d2 = BUF + 0x20000;
    // Slot: 100 bytes, then chain to d1 (100 bytes), then d2 (100 bytes, EOP).
    let mut head = Descriptor::new(BUF, r.dev, 100);
    head.flags = flags::SOP | flags::CHAIN;
    head.next = d1;
    r.post(0, Dir::H2c, 0, head);
    r.put(
        d1,
        Descriptor {
            flags: flags::CHAIN,
            next: d2,
            ..Descriptor::new(BUF + 100, r.dev + 1000, 100)
        },
    );
    r.put(d2, Descriptor { flags: flags::EOP, ..Descriptor::new(BUF + 200, r.dev + 5000, 100) });
    r.e.doorbell(0, Dir::H2c, 1);
    assert_eq!(r.run(), 3);
    assert_eq!(r.bytes(r.dev, 100), data[..100]);
    assert_eq!(r.bytes(r.dev + 1000, 100), data[100..200]);
    assert_eq!(r.bytes(r.dev + 5000, 100), data[200..]);
    let c = r.cmpt(0, 0);
    assert_eq!((c.len, c.index, c.status), (300, 1, 0));
    assert_eq!(r.e.queue_indices(0).unwrap().cmpt_pidx, 1);
}

#[test]
fn completion_only_for_eop_slots() {
    let mut r = rig();
    r.mm(0);
    r.fill(BUF, 400, 3);
    for i in 0..4u32 {
        let mut d = Descriptor::new(BUF + u64::from(i) * 100, r.dev + u64::from(i) * 100, 100);
        if i != 3 {
            d.flags = 0;
        }
        r.post(0, Dir::H2c, i, d);
    }
    r.e.doorbell(0, Dir::H2c, 3);
    r.run();
    assert_eq!(r.e.queue_indices(0).unwrap().cmpt_pidx, 0);
    assert!(r.events().is_empty());
    assert_eq!(r.e.queue_indices(0).unwrap().h2c_cidx, 3);
    r.e.doorbell(0, Dir::H2c, 4);
    r.run();
    let c = r.cmpt(0, 0);
    assert_eq!(
        (c.len, c.index, c.word),
        (100, 4, cmpt_word::COLOR | cmpt_word::SOP | cmpt_word::EOP)
    );
    assert_eq!(r.bytes(r.dev, 400), r.bytes(BUF, 400));
}

#[test]
fn colour_flips_each_wrap() {
    let mut r = rig();
    r.queue(0, r.cfg(0, Mode::Mm, 8, 4));
    r.fill(BUF, 64, 9);
    for i in 0..10u32 {
        r.post(0, Dir::H2c, i, Descriptor::new(BUF, r.dev + u64::from(i) * 64, 64));
        r.e.doorbell(0, Dir::H2c, i + 1);
        r.run();
        let c = r.cmpt(0, i);
        assert_eq!(c.index, i + 1);
        assert_eq!(c.color(), (i / 4) % 2 == 0, "entry {i}");
        r.e.cmpt_doorbell(0, i + 1);
    }
    assert_eq!(r.e.stats().cmpt_full_stalls, 0);
}

#[test]
fn full_completion_ring_stalls_then_resumes_without_loss() {
    let mut r = rig();
    r.queue(0, r.cfg(0, Mode::Mm, 8, 2));
    let data = r.fill(BUF, 6 * 128, 5);
    for i in 0..6u32 {
        let o = u64::from(i) * 128;
        r.post(0, Dir::H2c, i, Descriptor::new(BUF + o, r.dev + o, 128));
    }
    r.e.doorbell(0, Dir::H2c, 6);
    assert_eq!(r.run(), 2);
    assert_eq!(r.e.stats().cmpt_full_stalls, 1);
    assert_eq!(r.e.queue_indices(0).unwrap().h2c_cidx, 2);
    // Nothing moves while the ring is full, and the stall is counted once.
    assert_eq!(r.run(), 0);
    assert_eq!(r.e.stats().cmpt_full_stalls, 1);
    assert_eq!(r.bytes(r.dev + 256, 128), vec![0u8; 128]);
    let mut seen = Vec::new();
    let mut cidx = 0;
    while cidx < 6 {
        for i in cidx..r.e.queue_indices(0).unwrap().cmpt_pidx {
            seen.push(r.cmpt(0, i).index);
        }
        cidx = r.e.queue_indices(0).unwrap().cmpt_pidx;
        r.e.cmpt_doorbell(0, cidx);
        r.run();
    }
    assert_eq!(seen, vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(r.bytes(r.dev, 6 * 128), data);
    assert_eq!(r.e.stats().cmpt_full_stalls, 2);
}

/// Post `d` (with extra descriptors written by `setup`) in a fresh rig queue with alignment
/// `align`, run it and return the completion; checks nothing but the completion ring changed.
fn bad(align: u32, setup: impl FnOnce(&mut Rig) -> Descriptor) -> (Completion, Rig) {
    let mut r = rig();
    r.queue(0, QueueConfig { align, ..r.cfg(0, Mode::Mm, 16, 16) });
    r.fill(BUF, 0x4000, 11);
    let d = setup(&mut r);
    r.post(0, Dir::H2c, 0, d);
    let before = r.snapshot();
    r.e.doorbell(0, Dir::H2c, 1);
    r.run();
    let after = r.snapshot();
    let cmpt = r.layout.cmpt_ring(0);
    for a in changed(&before, &after) {
        assert!((cmpt..cmpt + 16).contains(&a), "byte {a:#x} changed");
    }
    let c = r.cmpt(0, 0);
    assert_eq!((c.len, c.index, c.dir), (0, 1, 0));
    assert_eq!(r.e.queue_state(0), Some(QueueState::Running));
    (c, r)
}

fn status_of(align: u32, setup: impl FnOnce(&mut Rig) -> Descriptor) -> Option<Status> {
    let (c, r) = bad(align, setup);
    let s = c.status().unwrap();
    assert_eq!(r.e.stats().errors[s as usize], 1);
    Some(s)
}

#[test]
fn every_descriptor_error_has_its_status_and_moves_nothing() {
    use Status::*;
    // BadMagic: garbage in the slot.
    let mut r = rig();
    r.mm(0);
    r.post_raw(0, Dir::H2c, 0, [0x55; 32]);
    let before = r.snapshot();
    r.e.doorbell(0, Dir::H2c, 1);
    r.run();
    assert_eq!(r.cmpt(0, 0).status(), Some(BadMagic));
    let cmpt = r.layout.cmpt_ring(0);
    assert!(changed(&before, &r.snapshot()).iter().all(|a| (cmpt..cmpt + 16).contains(a)));

    let flags_bad =
        |r: &mut Rig| Descriptor { flags: 0x10 | flags::EOP, ..Descriptor::new(BUF, r.dev, 8) };
    assert_eq!(status_of(1, flags_bad), Some(BadFlags));
    assert_eq!(status_of(1, |r| Descriptor::new(BUF, r.dev, 0)), Some(BadLength));
    assert_eq!(status_of(1, |r| Descriptor::new(BUF, r.dev, 1 << 28)), Some(BadLength));
    assert_eq!(status_of(64, |r| Descriptor::new(BUF + 8, r.dev, 64)), Some(Misaligned));
    assert_eq!(status_of(64, |r| Descriptor::new(BUF, r.dev + 8, 64)), Some(Misaligned));
    assert_eq!(status_of(64, |r| Descriptor::new(BUF, r.dev, 72)), Some(Misaligned));
    assert_eq!(status_of(1, |r| Descriptor::new(0x5000, r.dev, 8)), Some(Unmapped));
    assert_eq!(status_of(1, |_| Descriptor::new(BUF, 0xD000_0000_F000_0000, 8)), Some(Unmapped));
    let end = HOST + HOST_LEN as u64;
    assert_eq!(status_of(1, |r| Descriptor::new(end - 4, r.dev, 8)), Some(OutOfBounds));
    assert_eq!(status_of(1, |r| Descriptor::new(BUF, r.dev + (1 << 20) - 4, 8)), Some(OutOfBounds));
    assert_eq!(status_of(1, |r| Descriptor::new(OTHER, r.dev, 8)), Some(NotOwner));
    // H2C reading device memory, or writing host memory.
    assert_eq!(status_of(1, |r| Descriptor::new(r.dev, r.dev + 64, 8)), Some(WrongDirection));
    assert_eq!(status_of(1, |_| Descriptor::new(BUF, BUF + 64, 8)), Some(WrongDirection));
    // Chain to an unmapped / foreign descriptor address.
    let chain_to = |next: u64| {
        move |r: &mut Rig| Descriptor {
            flags: flags::SOP | flags::CHAIN,
            next,
            ..Descriptor::new(BUF, r.dev, 8)
        }
    };
    assert_eq!(status_of(1, chain_to(0x7000)), Some(BadDescAddr));
    assert_eq!(status_of(1, chain_to(OTHER)), Some(BadDescAddr));
    assert_eq!(status_of(1, chain_to(HOST + HOST_LEN as u64 - 16)), Some(BadDescAddr));
    // A chain whose second descriptor is bad: nothing of the first moves either.
    assert_eq!(
        status_of(1, |r| {
            let d1 = BUF + 0x3000;
            r.put(d1, Descriptor { flags: flags::EOP, ..Descriptor::new(BUF, r.dev, 0) });
            Descriptor {
                flags: flags::SOP | flags::CHAIN,
                next: d1,
                ..Descriptor::new(BUF, r.dev, 8)
            }
        }),
        Some(BadLength)
    );
}

#[test]
fn cyclic_chains_are_found() {
    // Self loop, a 2-cycle, and a cycle after a tail of 5.
    for (tail, cycle) in [(0u64, 1u64), (0, 2), (5, 7), (3, 64)] {
        let (c, _) = bad(1, |r| {
            let at = |i: u64| BUF + 0x10000 + i * 32;
            let n = tail + cycle;
            for i in 1..n {
                let next = if i + 1 == n { at(tail) } else { at(i + 1) };
                let d = Descriptor { flags: flags::CHAIN, next, ..Descriptor::new(BUF, r.dev, 8) };
                r.put(at(i), d);
            }
            // The slot is element 0; when the cycle includes it, "at(0)" is the slot itself.
            let first_next = if n == 1 { r.slot(0, Dir::H2c, 0) } else { at(1) };
            let fix = if tail == 0 && n > 1 { Some(r.slot(0, Dir::H2c, 0)) } else { None };
            if let Some(slot) = fix {
                // Close the cycle back to the ring slot.
                let d = Descriptor {
                    flags: flags::CHAIN,
                    next: slot,
                    ..Descriptor::new(BUF, r.dev, 8)
                };
                r.put(at(n - 1), d);
            }
            Descriptor {
                flags: flags::SOP | flags::CHAIN,
                next: first_next,
                ..Descriptor::new(BUF, r.dev, 8)
            }
        });
        assert_eq!(c.status(), Some(Status::CyclicChain), "tail {tail} cycle {cycle}");
    }
}

#[test]
fn chain_too_long_with_a_small_limit() {
    let mut r = rig();
    r.e.set_max_chain(4);
    assert_eq!(r.e.max_chain(), 4);
    r.mm(0);
    r.fill(BUF, 64, 2);
    let at = |i: u64| BUF + 0x10000 + i * 32;
    let link = |r: &Rig, next: u64| Descriptor {
        flags: flags::CHAIN,
        next,
        ..Descriptor::new(BUF, r.dev, 8)
    };
    // Slot 0: slot + 3 linked = 4 descriptors (the limit). Slot 1: slot + 4 = 5.
    for (first, n) in [(0u64, 3u64), (10, 4)] {
        for i in first..first + n - 1 {
            let d = link(&r, at(i + 1));
            r.put(at(i), d);
        }
        let last = Descriptor { flags: flags::EOP, ..Descriptor::new(BUF, r.dev, 8) };
        r.put(at(first + n - 1), last);
    }
    let d = link(&r, at(0));
    r.post(0, Dir::H2c, 0, d);
    let d = link(&r, at(10));
    r.post(0, Dir::H2c, 1, d);
    r.e.doorbell(0, Dir::H2c, 2);
    r.run();
    assert_eq!(r.cmpt(0, 0).status(), Some(Status::Ok));
    assert_eq!(r.cmpt(0, 0).len, 32);
    assert_eq!(r.cmpt(0, 1).status(), Some(Status::ChainTooLong));
    assert_eq!(r.cmpt(0, 1).len, 0);
    r.e.set_max_chain(0);
    assert_eq!(r.e.max_chain(), 1);
    r.e.set_max_chain(u32::MAX);
    assert_eq!(r.e.max_chain(), MAX_CHAIN);
}

#[test]
fn bad_doorbells_put_the_queue_in_error() {
    for (pidx, want) in [(17u32, Status::RingOverflow), (u32::MAX, Status::BadDoorbell)] {
        let mut r = rig();
        r.mm(3);
        let before = r.snapshot();
        r.e.doorbell(3, Dir::H2c, pidx);
        assert_eq!(r.e.queue_state(3), Some(QueueState::Error(want)));
        let c = r.cmpt(3, 0);
        assert_eq!((c.status(), c.dir, c.index, c.len, c.qid), (Some(want), DIR_QUEUE, pidx, 0, 3));
        let cmpt = r.layout.cmpt_ring(3);
        assert!(changed(&before, &r.snapshot()).iter().all(|a| (cmpt..cmpt + 16).contains(a)));
        let ev = r.events();
        assert!(ev.contains(&Event::QueueError { qid: 3, status: want }), "{ev:?}");
        // Further doorbells are ignored; a restart needs a stop first.
        r.e.doorbell(3, Dir::H2c, 1);
        assert_eq!(r.e.stats().doorbells_ignored, 1);
        assert!(matches!(r.e.start_queue(3), Err(DmaError::BadState(_))));
        r.e.stop_queue(3).unwrap();
        r.e.start_queue(3).unwrap();
        assert_eq!(r.e.queue_indices(3).unwrap(), Default::default());
        assert_eq!(r.cmpt(3, 0).word, 0, "completion ring zeroed on start");
    }
    // Backwards after an accepted doorbell.
    let mut r = rig();
    r.mm(0);
    r.e.doorbell(0, Dir::C2h, 5);
    r.e.doorbell(0, Dir::C2h, 4);
    assert_eq!(r.e.queue_state(0), Some(QueueState::Error(Status::BadDoorbell)));
}

#[test]
fn doorbells_to_idle_queues_are_ignored() {
    let mut r = rig();
    r.e.doorbell(9, Dir::H2c, 1);
    r.e.add_queue(9, r.cfg(0, Mode::Mm, 16, 16)).unwrap();
    r.e.doorbell(9, Dir::H2c, 1);
    r.e.cmpt_doorbell(9, 0);
    assert_eq!(r.e.stats().doorbells_ignored, 3);
    assert_eq!(r.e.queue_indices(9).unwrap().h2c_pidx, 0);
    assert_eq!(r.e.poll(100), 0);
}

#[test]
fn stop_flushes_outstanding_descriptors() {
    let mut r = rig();
    r.queue(0, r.cfg(0, Mode::Mm, 16, 4));
    r.fill(BUF, 64, 1);
    for i in 0..6 {
        r.post(0, Dir::H2c, i, Descriptor::new(BUF, r.dev, 64));
    }
    r.e.doorbell(0, Dir::H2c, 6);
    r.e.stop_queue(0).unwrap();
    assert_eq!(r.e.queue_state(0), Some(QueueState::Stopped));
    for i in 0..4 {
        let c = r.cmpt(0, i);
        assert_eq!((c.status(), c.index, c.len), (Some(Status::Flushed), i + 1, 0));
    }
    assert_eq!(r.e.stats().flushed_silent, 2);
    assert_eq!(r.e.stats().errors[Status::Flushed as usize], 4);
    assert_eq!(r.bytes(r.dev, 64), vec![0; 64]);
    assert_eq!(r.events(), vec![Event::Completed { qid: 0, entries: 4, interrupt: true }]);
    assert!(matches!(r.e.stop_queue(0), Err(DmaError::BadState(QueueState::Stopped))));
    assert_eq!(r.e.delete_queue(0).unwrap().cmpt_size, 4);
    assert_eq!(r.e.queue_state(0), None);
}

#[test]
fn control_path_checks() {
    let mut r = rig();
    assert_eq!(r.e.add_queue(MAX_QUEUES, r.cfg(0, Mode::Mm, 16, 16)), Err(DmaError::BadQid(2048)));
    assert!(matches!(r.e.add_queue(0, r.cfg(0, Mode::Mm, 3, 16)), Err(DmaError::BadConfig(_))));
    assert!(matches!(r.e.add_queue(0, r.cfg(0, Mode::Mm, 16, 1)), Err(DmaError::BadConfig(_))));
    let c = QueueConfig { align: 3, ..r.cfg(0, Mode::Mm, 16, 16) };
    assert!(matches!(r.e.add_queue(0, c), Err(DmaError::BadConfig(_))));
    let c = QueueConfig { h2c_ring: OTHER, ..r.cfg(0, Mode::Mm, 16, 16) };
    assert!(matches!(r.e.add_queue(0, c), Err(DmaError::RingMemory(_))));
    let c = QueueConfig { cmpt_ring: HOST + HOST_LEN as u64 - 16, ..r.cfg(0, Mode::Mm, 16, 16) };
    assert!(matches!(r.e.add_queue(0, c), Err(DmaError::RingMemory(_))));
    assert_eq!(r.e.start_queue(0), Err(DmaError::NoQueue(0)));
    r.e.add_queue(0, r.cfg(0, Mode::Mm, 16, 16)).unwrap();
    assert_eq!(r.e.add_queue(0, r.cfg(0, Mode::Mm, 16, 16)), Err(DmaError::QidInUse(0)));
}

#[test]
fn all_2048_queues() {
    let mut r = rig();
    for q in 0..MAX_QUEUES {
        r.e.add_queue(q, r.cfg(u64::from(q % 8), Mode::Mm, 16, 16)).unwrap();
    }
    assert_eq!(r.e.qids().count(), 2048);
    assert_eq!(r.e.qids().last(), Some(2047));
    // The last one works.
    r.e.delete_queue(5).unwrap();
    r.e.start_queue(2047).unwrap();
    r.fill(BUF, 32, 4);
    r.post(2047, Dir::H2c, 0, Descriptor::new(BUF, r.dev, 32));
    r.e.doorbell(2047, Dir::H2c, 1);
    assert_eq!(r.run(), 1);
    assert_eq!(r.cmpt(2047, 0).qid, 2047);
    assert_eq!(r.e.qids().count(), 2047);
}

#[test]
fn round_robin_shares_the_budget() {
    let mut r = rig();
    r.mm(0);
    r.mm(1);
    r.fill(BUF, 64, 4);
    for q in 0..2u16 {
        for i in 0..16u32 {
            r.post(q, Dir::H2c, i, Descriptor { flags: 0, ..Descriptor::new(BUF, r.dev, 64) });
        }
        r.e.doorbell(q, Dir::H2c, 16);
    }
    assert_eq!(r.e.poll(8), 8);
    let a = r.e.queue_indices(0).unwrap().h2c_cidx;
    let b = r.e.queue_indices(1).unwrap().h2c_cidx;
    assert_eq!(a + b, 8);
    assert_eq!(r.run(), 24);
}

/// Streaming: queue 1 sends to queue 2 (loopback); queue 2 has C2H buffers posted.
fn st_pair(r: &mut Rig, bufs: u32, buf_len: u32) {
    r.queue(1, QueueConfig { stream_to: Some(2), ..r.cfg(1, Mode::St, 16, 16) });
    r.queue(2, r.cfg(2, Mode::St, 16, 16));
    for i in 0..bufs {
        let dst = BUF + 0x40000 + u64::from(i) * 0x1000;
        r.post(2, Dir::C2h, i, Descriptor::new(0, dst, buf_len));
    }
    r.e.doorbell(2, Dir::C2h, bufs);
}

#[test]
fn stream_loopback_multi_slot_packets() {
    let mut r = rig();
    st_pair(&mut r, 4, 64);
    let data = r.fill(BUF, 150, 8);
    // 150 bytes in three slots: SOP 50, middle 50 (a chain of two 25s), EOP 50.
    let link = BUF + 0x10000;
    r.put(link, Descriptor { flags: 0, ..Descriptor::new(BUF + 75, 0, 25) });
    r.post(1, Dir::H2c, 0, Descriptor { flags: flags::SOP, ..Descriptor::new(BUF, 0, 50) });
    r.post(
        1,
        Dir::H2c,
        1,
        Descriptor { flags: flags::CHAIN, next: link, ..Descriptor::new(BUF + 50, 0, 25) },
    );
    r.post(1, Dir::H2c, 2, Descriptor { flags: flags::EOP, ..Descriptor::new(BUF + 100, 0, 50) });
    r.e.doorbell(1, Dir::H2c, 3);
    r.run();
    // Sender: one completion at EOP.
    let c = r.cmpt(1, 0);
    assert_eq!((c.status(), c.len, c.index, c.dir), (Some(Status::Ok), 150, 3, 0));
    assert_eq!(c.word, cmpt_word::COLOR | cmpt_word::SOP | cmpt_word::EOP);
    assert_eq!(r.e.queue_indices(1).unwrap().cmpt_pidx, 1);
    // Receiver: 3 buffers (64 + 64 + 22), one completion.
    let c = r.cmpt(2, 0);
    assert_eq!((c.status(), c.len, c.index, c.dir), (Some(Status::Ok), 150, 3, 1));
    let b = BUF + 0x40000;
    let mut got = r.bytes(b, 64);
    got.extend(r.bytes(b + 0x1000, 64));
    got.extend(r.bytes(b + 0x2000, 22));
    assert_eq!(got, data);
    assert_eq!(r.bytes(b + 0x2000 + 22, 42), vec![0; 42]);
    assert_eq!(r.e.queue_indices(2).unwrap().c2h_cidx, 3);
    assert_eq!((r.e.stats().stream_tx, r.e.stats().stream_rx), (1, 1));
    // The next packet needs 100 bytes but only one 64-byte buffer is left: dropped.
    r.post(1, Dir::H2c, 3, Descriptor::new(BUF, 0, 100));
    r.e.doorbell(1, Dir::H2c, 4);
    r.run();
    assert_eq!(r.e.stats().stream_drops, [0, 1, 0, 0]);
    assert_eq!(r.e.queue_indices(2).unwrap().c2h_cidx, 3);
    assert_eq!(r.cmpt(1, 1).len, 100);
}

#[test]
fn stream_framing_errors() {
    let mut r = rig();
    r.queue(1, r.cfg(1, Mode::St, 16, 16));
    r.fill(BUF, 64, 8);
    // Middle slot without a packet open.
    r.post(1, Dir::H2c, 0, Descriptor { flags: 0, ..Descriptor::new(BUF, 0, 8) });
    // SOP, then SOP|EOP: the first packet is broken, the second goes out.
    r.post(1, Dir::H2c, 1, Descriptor { flags: flags::SOP, ..Descriptor::new(BUF, 0, 8) });
    r.post(1, Dir::H2c, 2, Descriptor::new(BUF + 8, 0, 16));
    r.e.doorbell(1, Dir::H2c, 3);
    r.run();
    let c0 = r.cmpt(1, 0);
    assert_eq!((c0.status(), c0.index), (Some(Status::BadFraming), 1));
    let c1 = r.cmpt(1, 1);
    assert_eq!((c1.status(), c1.index), (Some(Status::BadFraming), 2));
    let c2 = r.cmpt(1, 2);
    assert_eq!((c2.status(), c2.index, c2.len), (Some(Status::Ok), 3, 16));
    let mut out = Vec::new();
    assert_eq!(r.e.poll_stream(&mut out), Some(1));
    assert_eq!(out, r.bytes(BUF + 8, 16));
    assert_eq!(r.e.poll_stream(&mut out), None);
    assert!(out.is_empty());
}

#[test]
fn push_stream_drops() {
    let mut r = rig();
    r.mm(0);
    r.queue(2, r.cfg(2, Mode::St, 16, 2));
    assert_eq!(r.e.push_stream(0, b"x"), Err(StreamDrop::NoQueue));
    assert_eq!(r.e.push_stream(7, b"x"), Err(StreamDrop::NoQueue));
    assert_eq!(r.e.push_stream(2, b""), Err(StreamDrop::Empty));
    assert_eq!(r.e.push_stream(2, b"x"), Err(StreamDrop::NoBuffer));
    let b = BUF + 0x40000;
    for i in 0..4u32 {
        r.post(2, Dir::C2h, i, Descriptor::new(0, b + u64::from(i) * 0x100, 16));
    }
    r.e.doorbell(2, Dir::C2h, 4);
    // 70 bytes > 64 posted: nothing consumed.
    assert_eq!(r.e.push_stream(2, &[1; 70]), Err(StreamDrop::NoBuffer));
    assert_eq!(r.e.queue_indices(2).unwrap().c2h_cidx, 0);
    r.e.push_stream(2, &[2; 20]).unwrap();
    r.e.push_stream(2, &[3; 5]).unwrap();
    // Completion ring (2 entries) full now.
    assert_eq!(r.e.push_stream(2, &[4; 5]), Err(StreamDrop::CmptFull));
    assert_eq!(r.bytes(b, 16), vec![2; 16]);
    assert_eq!(r.bytes(b + 0x100, 4), vec![2; 4]);
    assert_eq!(r.bytes(b + 0x104, 1), vec![0]);
    assert_eq!(r.bytes(b + 0x200, 5), vec![3; 5]);
    assert_eq!((r.cmpt(2, 0).len, r.cmpt(2, 0).index), (20, 2));
    assert_eq!((r.cmpt(2, 1).len, r.cmpt(2, 1).index), (5, 3));
    assert_eq!(r.e.stats().stream_drops, [2, 2, 1, 1]);
    assert_eq!(r.e.stats().stream_rx, 2);
    // A bad buffer at the head is consumed with an error completion, the next one is used.
    r.e.cmpt_doorbell(2, 2);
    r.post(2, Dir::C2h, 4, Descriptor::new(0, OTHER, 16));
    r.post(2, Dir::C2h, 5, Descriptor::new(0, b + 0x500, 16));
    r.e.doorbell(2, Dir::C2h, 6);
    r.e.push_stream(2, &[6; 16]).unwrap(); // slot 3
    r.e.cmpt_doorbell(2, 3);
    r.e.push_stream(2, &[7; 16]).unwrap(); // slot 4 bad, slot 5
    assert_eq!(r.cmpt(2, 3).status(), Some(Status::NotOwner));
    assert_eq!(r.cmpt(2, 4).status(), Some(Status::Ok));
    assert_eq!(r.bytes(b + 0x500, 16), vec![7; 16]);
    assert_eq!(r.bytes(OTHER, 16), vec![0xEE; 16]);
}

#[test]
fn stream_out_without_target() {
    let mut r = rig();
    r.queue(1, r.cfg(1, Mode::St, 16, 16));
    let data = r.fill(BUF, 3000, 1);
    r.post(1, Dir::H2c, 0, Descriptor { flags: flags::SOP, ..Descriptor::new(BUF, 0, 1000) });
    r.post(
        1,
        Dir::H2c,
        1,
        Descriptor { flags: flags::EOP, ..Descriptor::new(BUF + 1000, 0, 2000) },
    );
    r.e.doorbell(1, Dir::H2c, 2);
    r.run();
    let mut out = vec![9; 3];
    assert_eq!(r.e.poll_stream(&mut out), Some(1));
    assert_eq!(out, data);
}

#[test]
fn channels_run_and_fail() {
    let mut r = rig();
    let k = ChannelKey(7);
    let ch = r.channel(k, Dir::C2h);
    assert_eq!(r.e.add_channel(k, ch), Err(DmaError::ChannelInUse(k)));
    let data: Vec<u8> = (0..200u8).collect();
    r.e.mem.write(r.dev, &data).unwrap();
    let d0 = BUF + 0x10000;
    let d1 = d0 + 0x100;
    r.put(d0, Descriptor { flags: flags::CHAIN, next: d1, ..Descriptor::new(r.dev, BUF, 100) });
    // STOP ends the chain even with CHAIN set (next points to garbage).
    r.put(
        d1,
        Descriptor {
            flags: flags::CHAIN | flags::STOP,
            next: 0x1,
            ..Descriptor::new(r.dev + 100, BUF + 500, 100)
        },
    );
    r.e.channel_run(k, d0).unwrap();
    assert!(r.e.channel_busy(k));
    assert_eq!(r.e.channel_run(k, d0), Err(DmaError::ChannelBusy(k)));
    assert_eq!(r.e.poll(10), 2);
    assert!(!r.e.channel_busy(k));
    assert_eq!(r.bytes(BUF, 100), data[..100]);
    assert_eq!(r.bytes(BUF + 500, 100), data[100..]);
    let done = Event::ChannelDone {
        key: k,
        descs: 2,
        bytes: 200,
        status: Status::Ok,
        fault_desc: 0,
        interrupt: false,
    };
    assert_eq!(r.events(), vec![done]);
    // Error: the second descriptor writes client 2's memory; nothing moves.
    r.put(d1, Descriptor { flags: 0, ..Descriptor::new(r.dev, OTHER, 100) });
    r.e.mem.fill(BUF, 100, 0).unwrap();
    let before = r.snapshot();
    r.e.channel_run(k, d0).unwrap();
    r.e.poll(10);
    assert_eq!(changed(&before, &r.snapshot()), Vec::<u64>::new());
    let fail = Event::ChannelDone {
        key: k,
        descs: 0,
        bytes: 0,
        status: Status::NotOwner,
        fault_desc: d1,
        interrupt: false,
    };
    assert_eq!(r.events(), vec![fail]);
    assert_eq!(r.e.stats().channel_runs, 2);
    assert_eq!(r.e.remove_channel(k).unwrap(), ch);
    assert_eq!(r.e.channel_run(k, d0), Err(DmaError::NoChannel(k)));
}

/// Random descriptor soup: random bytes in every ring, random doorbells and completion
/// doorbells, random pushes. Client 2's region must never change, nor the guard bytes of
/// client 1's region outside its rings, buffers and completion rings.
#[derive(Debug, Clone)]
enum Op {
    /// Producer doorbell `k` slots past the current producer.
    Advance(u16, bool, u32),
    Doorbell(u16, bool, u32),
    Cmpt(u16, u32),
    Poll(u8),
    Push(u16, u16),
    Stop(u16),
    Start(u16),
    Channel(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..4u16, any::<bool>(), 0..6u32).prop_map(|(q, d, k)| Op::Advance(q, d, k)),
        1 => (0..4u16, any::<bool>(), any::<u32>()).prop_map(|(q, d, p)| Op::Doorbell(q, d, p)),
        2 => (0..4u16, 0..12u32).prop_map(|(q, c)| Op::Cmpt(q, c)),
        3 => any::<u8>().prop_map(Op::Poll),
        1 => (0..4u16, 0..300u16).prop_map(|(q, n)| Op::Push(q, n)),
        1 => (0..4u16).prop_map(Op::Stop),
        1 => (0..4u16).prop_map(Op::Start),
        1 => (0..64u64).prop_map(|i| Op::Channel(HOST + i * 32)),
    ]
}

/// A descriptor that is often plausible (addresses drawn from a small set, host/device pairs
/// more likely than not), sometimes random bytes.
fn soup_desc() -> impl Strategy<Value = [u8; 32]> {
    let host = prop_oneof![
        Just(BUF),
        Just(BUF + 0x100),
        Just(HOST),
        Just(HOST + HOST_LEN as u64 - 8),
        Just(OTHER),
        Just(OTHER + 8),
    ];
    let dev = prop_oneof![
        Just(0xD000_0000_0000_0000u64),
        Just(0xD000_0000_0000_0040u64),
        Just(0xD000_0000_000F_FFF8u64),
    ];
    let any_addr = prop_oneof![host.clone(), dev.clone(), any::<u64>()];
    let pair = prop_oneof![
        2 => (host.clone(), dev.clone()),
        2 => (dev, host),
        1 => (any_addr.clone(), any_addr),
    ];
    let len = prop_oneof![4 => 1..64u32, 1 => 0..600u32];
    prop_oneof![
        1 => any::<[u8; 32]>(),
        6 => (pair, len, 0..16u16, 0..64u64).prop_map(|((src, dst), len, fl, nx)| {
            Descriptor { src, dst, len, flags: fl, next: HOST + nx * 32 }.encode()
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    #[test]
    fn descriptor_soup_never_touches_forbidden_memory(
        descs in proptest::collection::vec(soup_desc(), 64),
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let mut r = rig();
        r.e.set_max_chain(64);
        // Queues 0 (MM), 1 (MM, align 8), 2 (ST -> 3), 3 (ST); all rings in the first 0x800
        // bytes of their 64 KiB block; the soup is laid over queue 0's block.
        r.layout.stride = 0x100;
        r.mixed_queues();
        for (i, d) in descs.iter().enumerate() {
            // Rings of all queues get soup, and so does the chain area at HOST.
            let q = (i / 16) as u64;
            let at = r.layout.h2c_ring(q) + (i as u64 % 16) * 32;
            r.e.mem.write(at, d).unwrap();
            r.e.mem.write(HOST + (i as u64) * 32 % 0x800, d).unwrap();
        }
        r.channel(ChannelKey(0), Dir::H2c);
        let other = r.bytes(OTHER, OTHER_LEN);
        // Host bytes of client 1 no descriptor of the soup can validly reach (the soup's
        // host targets are HOST, BUF, BUF + 0x100 with at most 600 bytes, and the last 8).
        let guard_a = (HOST + 0x800, 0x10000 - 0x800);
        let guard_b = (BUF + 0x400, (HOST + HOST_LEN as u64 - 8 - BUF - 0x400) as usize);
        let before_a = r.bytes(guard_a.0, guard_a.1);
        let before_b = r.bytes(guard_b.0, guard_b.1);
        for o in ops {
            match o {
                Op::Advance(q, d, k) => r.advance(q, if d { Dir::C2h } else { Dir::H2c }, k),
                Op::Doorbell(q, d, p) => r.e.doorbell(q, if d { Dir::C2h } else { Dir::H2c }, p),
                Op::Cmpt(q, c) => r.e.cmpt_doorbell(q, c),
                Op::Poll(b) => { r.e.poll(usize::from(b)); }
                Op::Push(q, n) => { let _ = r.e.push_stream(q, &vec![0xAB; usize::from(n)]); }
                Op::Stop(q) => { let _ = r.e.stop_queue(q); }
                Op::Start(q) => { let _ = r.e.start_queue(q); }
                Op::Channel(a) => { let _ = r.e.channel_run(ChannelKey(0), a); }
            }
            while r.e.poll_event().is_some() {}
            let mut v = Vec::new();
            while r.e.poll_stream(&mut v).is_some() {}
        }
        r.run();
        prop_assert_eq!(r.bytes(OTHER, OTHER_LEN), other);
        prop_assert!(r.bytes(guard_a.0, guard_a.1) == before_a);
        prop_assert!(r.bytes(guard_b.0, guard_b.1) == before_b);
        let s = r.e.stats();
        prop_assert!(s.completions >= s.errors.iter().sum::<u64>());
    }
}

#[test]
fn stats_add_sums_every_counter() {
    let mut a = snic_dma::DmaStats { descs: 1, channel_runs: 2, ..Default::default() };
    a.errors[3] = 4;
    a.stream_drops[1] = 5;
    let mut b = snic_dma::DmaStats {
        descs: 10,
        h2c_bytes: 7,
        c2h_bytes: 8,
        completions: 9,
        doorbells: 11,
        doorbells_ignored: 12,
        cmpt_full_stalls: 13,
        stream_rx: 14,
        stream_tx: 15,
        channel_runs: 16,
        flushed_silent: 17,
        ..Default::default()
    };
    b.errors[3] = 40;
    b.stream_drops[1] = 50;
    b.channel_errors[9] = 60;
    a.add(&b);
    assert_eq!((a.descs, a.h2c_bytes, a.c2h_bytes, a.completions), (11, 7, 8, 9));
    assert_eq!((a.doorbells, a.doorbells_ignored, a.cmpt_full_stalls), (11, 12, 13));
    assert_eq!((a.stream_rx, a.stream_tx, a.channel_runs, a.flushed_silent), (14, 15, 18, 17));
    assert_eq!((a.errors[3], a.stream_drops[1], a.channel_errors[9]), (44, 55, 60));
}
