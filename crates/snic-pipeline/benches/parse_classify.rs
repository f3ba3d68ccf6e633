//! parse + classify cost per packet for three frames: a 64-byte UDP frame, a VXLAN-in-UDP TCP
//! frame, and a RoCEv2 RDMA WRITE ONLY with a valid ICRC (64-byte payload).
//!
//! Two views: `one/*` runs the per-packet work (stack walk, RSS hash, RoCE fields + ICRC) on a
//! single frame; `batch32/*` runs the `parse` and `classify` stages over a batch of 32 copies
//! (throughput in packets, so ns/packet = time / 32).
//!
//! Run: `cargo bench -p snic-pipeline --bench parse_classify -- --warm-up-time 1 --measurement-time 3`

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use snic_pipeline::counters::StageCounters;
use snic_pipeline::rss::Toeplitz;
use snic_pipeline::stages::{Classify, Parse, classify};
use snic_pipeline::testing::frames::*;
use snic_pipeline::trace::TraceRing;
use snic_pipeline::{Batch, Stage, StageCtx};
use snic_time::Instant;

fn inputs() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("udp64", udp64(1234, 5678)),
        ("vxlan_tcp", vxlan(42, &tcp_frame(40000, 443, &[0x5a; 64]))),
        ("roce_write", roce_write(Write::default(), false)),
    ]
}

fn bench(c: &mut Criterion) {
    let rss = Toeplitz::default();
    let mut one = c.benchmark_group("one");
    one.throughput(Throughput::Elements(1));
    for (name, frame) in inputs() {
        one.bench_with_input(BenchmarkId::from_parameter(name), &frame, |b, f| {
            b.iter(|| {
                let f = black_box(&f[..]);
                let stack = snic_wire::stack::parse(f);
                let h = rss.hash_packet(f, &stack);
                let m = classify::roce_meta(f, &stack);
                black_box((stack.error(), h, m))
            })
        });
    }
    one.finish();

    let mut group = c.benchmark_group("batch32");
    group.throughput(Throughput::Elements(32));
    for (name, frame) in inputs() {
        let mut batch = Batch::new(32);
        for _ in 0..32 {
            batch.push_frame(&frame).unwrap();
        }
        let mut parse = Parse::default();
        let mut cls = Classify::default();
        let mut pc = StageCounters::new("parse");
        let mut cc = StageCounters::new("classify");
        let mut ring = TraceRing::new(16);
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                // Each pass sees the frames as freshly received: not yet walked (`meta.parsed`
                // would otherwise let the parse stage skip the walk from the second pass on).
                for p in batch.iter_mut() {
                    p.meta.parsed = false;
                }
                parse.process(Instant::ZERO, &mut batch, &mut StageCtx::new(&mut pc, &mut ring));
                cls.process(Instant::ZERO, &mut batch, &mut StageCtx::new(&mut cc, &mut ring));
                assert_eq!(batch.len(), 32);
            })
        });
        assert_eq!(pc.drops.total() + cc.drops.total(), 0, "{name}: every packet must pass");
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
