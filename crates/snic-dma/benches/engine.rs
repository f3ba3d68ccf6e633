//! In-process DMA engine throughput: memory-mapped H2C copies from a host buffer to device
//! memory, `Vec` backings, one queue, a ring of 1024 descriptors and a completion ring the
//! bench consumes as it goes.
//!
//! - `mm_h2c_bytes/SIZE`: 256 transfers of SIZE bytes (64 B, 4 KiB, 1 MiB: 16 transfers)
//!   posted with one doorbell, each with EOP (one completion each), run to completion;
//!   reported as bytes/s.
//! - `mm_h2c_descs/64`: the same at 64 B reported as descriptors/s (the per-descriptor cost:
//!   validation, copy, completion).
//! - `mm_h2c_batch64/64`: 64 B descriptors, each its own ring slot, with EOP only on every
//!   64th (one completion per 64, as a host batching doorbells posts them), as descriptors/s.
//!
//! `cargo bench -p snic-dma --bench engine` (add `-- --quick` for a short check).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use snic_dma::desc::flags;
use snic_dma::testing::{Client, QueueLayout, Rig};
use snic_dma::{Descriptor, Dir, DmaEngine, Mode, Notify};

const HOST: u64 = 0x1000_0000;
const RING: u32 = 1024;
const BUF: u64 = HOST + 0x10_0000;

/// An engine with queue 0 started, a host region (rings + a 1 MiB buffer) and a 2 MiB device
/// region; the H2C ring holds `RING` descriptors of `size` bytes, with EOP on every
/// `eop_every`-th.
fn setup(size: u32, eop_every: u32) -> (DmaEngine, u32) {
    let host = [Client::new(1, HOST, 0x20_0000).filled(7)];
    // The rings of 1024 slots (32 KiB) back to back from HOST.
    let layout = QueueLayout { stride: 0x8000, ..QueueLayout::new(1, HOST, Notify::Poll) };
    let mut r = Rig::new(&host, 2 << 20, layout);
    r.queue(0, r.cfg(0, Mode::Mm, RING, RING));
    let per = (1u64 << 20) / u64::from(size);
    for i in 0..RING {
        let off = (u64::from(i) % per) * u64::from(size);
        let mut d = Descriptor::new(BUF + off, r.dev + off, size);
        d.flags = 0;
        if i % eop_every == 0 {
            d.flags |= flags::SOP;
        }
        if (i + 1) % eop_every == 0 {
            d.flags |= flags::EOP;
        }
        r.post(0, Dir::H2c, i, d);
    }
    let batch = if size >= 1 << 20 { 16 } else { 256 };
    (r.e, batch)
}

/// Post `batch` more descriptors, run them, consume the completions.
fn round(e: &mut DmaEngine, batch: u32) {
    let ix = e.queue_indices(0).unwrap();
    e.doorbell(0, Dir::H2c, ix.h2c_pidx.wrapping_add(batch));
    while e.poll(256) > 0 {}
    let ix = e.queue_indices(0).unwrap();
    e.cmpt_doorbell(0, ix.cmpt_pidx);
    while e.poll_event().is_some() {}
    black_box(ix);
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("mm_h2c_bytes");
    for size in [64u32, 4096, 1 << 20] {
        let (mut e, batch) = setup(size, 1);
        g.throughput(Throughput::Bytes(u64::from(size) * u64::from(batch)));
        g.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, _| {
            b.iter(|| round(&mut e, batch))
        });
        assert_eq!(e.stats().errors.iter().sum::<u64>(), 0);
    }
    g.finish();
    let mut g = c.benchmark_group("mm_h2c_descs");
    let (mut e, batch) = setup(64, 1);
    g.throughput(Throughput::Elements(u64::from(batch)));
    g.bench_with_input(BenchmarkId::from_parameter(64), &64, |b, _| {
        b.iter(|| round(&mut e, batch))
    });
    assert_eq!(e.stats().errors.iter().sum::<u64>(), 0);
    g.finish();
    let mut g = c.benchmark_group("mm_h2c_batch64");
    let (mut e, batch) = setup(64, 64);
    g.throughput(Throughput::Elements(u64::from(batch)));
    g.bench_with_input(BenchmarkId::from_parameter(64), &64, |b, _| {
        b.iter(|| round(&mut e, batch))
    });
    assert_eq!(e.stats().errors.iter().sum::<u64>(), 0);
    assert_eq!(e.stats().descs, e.stats().completions * 64);
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
