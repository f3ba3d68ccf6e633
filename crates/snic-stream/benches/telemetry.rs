//! The telemetry streaming kernel's cost per packet, against the same pipeline without it, in
//! the same run: `base` is `parse -> l2fwd`, `telemetry` is `parse -> kernel:telemetry ->
//! l2fwd` (the stage publishes its dirty entries after every batch, as it does in a run).
//! Batches of 32 64-byte UDP frames; `flows` is how many distinct 5-tuples the frames cycle
//! through (1: every packet hits one entry; 1024 and 16384: the index and entries spill out of
//! L1/L2). Throughput is in packets, so ns/packet = time / 32. `crypt` adds the
//! ChaCha20-Poly1305 encrypt kernel on the same frames for scale.
//!
//! Run: `cargo bench -p snic-stream --bench telemetry -- --warm-up-time 1 --measurement-time 3`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use snic_pipeline::stages::L2Fwd;
use snic_pipeline::testing::frames::udp64;
use snic_pipeline::{Batch, Pipeline, PipelineConfig, PortId};
use snic_stream::Registry;
use snic_time::Instant;

const BATCH: usize = 32;

fn pipeline(kernel: Option<(&str, Vec<(String, String)>)>) -> Pipeline {
    let cfg = PipelineConfig::from_strs(&["parse"]).unwrap();
    let mut p = Pipeline::build(&cfg, &mut |_: &str| unreachable!("no taps")).unwrap();
    if let Some((name, args)) = kernel {
        let (_, stages) = Registry::with_builtins().stages(name, name, &args, 1, [0; 4]).unwrap();
        for s in stages {
            p.push(Box::new(s));
        }
    }
    p.push(Box::new(L2Fwd::with_map(&[(0, 1)])));
    p
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("telemetry");
    g.throughput(Throughput::Elements(BATCH as u64));
    for flows in [1usize, 1024, 16384] {
        let frames: Vec<Vec<u8>> = (0..flows)
            .map(|i| udp64(1024 + (i % 50000) as u16, 5000 + (i / 50000) as u16))
            .collect();
        let cap = vec![("capacity".to_string(), flows.max(64).to_string())];
        let key = vec![
            ("mode".to_string(), "encrypt".to_string()),
            ("key".to_string(), "42".repeat(32)),
            ("mtu".to_string(), "9000".to_string()),
        ];
        let mut cases =
            vec![("base", pipeline(None)), ("telemetry", pipeline(Some(("telemetry", cap))))];
        if flows == 1 {
            cases.push(("crypt", pipeline(Some(("crypt", key)))));
        }
        for (name, mut p) in cases {
            let mut batch = Batch::new(BATCH);
            let mut next = 0usize;
            let mut now = 0u64;
            g.bench_function(BenchmarkId::new(name, flows), |b| {
                b.iter(|| {
                    batch.clear();
                    for _ in 0..BATCH {
                        let pk = batch.push_frame(&frames[next]).unwrap();
                        pk.meta.ingress = PortId(0);
                        next = (next + 1) % frames.len();
                    }
                    now += 1000;
                    p.process(Instant::from_nanos(now), &mut batch);
                    assert_eq!(batch.len(), BATCH);
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
