//! P4Runtime over loopback gRPC (tonic client, snic server): Write RPCs with one update and
//! with 1000, a Read of 100k entries, and SetForwardingPipelineConfig; then a pipeline swap
//! under load: the time from the RPC to the first packet the new program handles, and the
//! packets lost across it.
//!
//! `cargo bench -p snic-p4rt --bench p4rt`

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use snic_p4rt::proto::p4::v1 as p4;
use snic_p4rt::testing::{Kit, action, config, ids, update};
use snic_pipeline::{Batch, PortId};

use p4::entity::Entity as E;

const ROUTER: &str = include_str!("../../../examples/p4/l3_router.p4");

/// Route `i` as a /32 (10.x.y.z) to port 1.
fn route(table: u32, act: u32, i: u32) -> p4::Update {
    let dst = (10u32 << 24 | i).to_be_bytes();
    update(
        1,
        E::TableEntry(p4::TableEntry {
            table_id: table,
            r#match: vec![p4::FieldMatch {
                field_id: 1,
                field_match_type: Some(p4::field_match::FieldMatchType::Lpm(
                    p4::field_match::Lpm { value: dst.to_vec(), prefix_len: 32 },
                )),
            }],
            action: action(act, &[(1, &[1]), (2, &[2; 6]), (3, &[3; 6])]),
            ..Default::default()
        }),
    )
}

fn router_kit() -> (Kit, (u32, u32)) {
    let mut k = Kit::new();
    let s = k.primary_with(1, ROUTER);
    std::mem::forget(s); // keep the stream (and the primary) for the whole run
    let n = ids(config(ROUTER).p4info.as_ref().expect("p4info"));
    (k, (n["MyIngress.ipv4_lpm"], n["MyIngress.set_nhop"]))
}

fn writes(c: &mut Criterion) {
    let (mut k, (t, a)) = router_kit();
    let mut next = 0u32;
    let mut g = c.benchmark_group("p4rt_write");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(1));
    g.bench_function("single", |b| {
        b.iter(|| {
            next += 1;
            k.write(1, 0, vec![route(t, a, next % 100_000)]).ok();
        })
    });
    // Empty the table between batches: a fresh kit per size keeps inserts real.
    for batch in [100u32, 1000] {
        let (mut k, (t, a)) = router_kit();
        let mut base = 0u32;
        g.throughput(Throughput::Elements(u64::from(batch)));
        g.bench_with_input(BenchmarkId::new("batch", batch), &batch, |b, &n| {
            b.iter(|| {
                let ups = (0..n).map(|i| route(t, a, (base + i) % 120_000)).collect();
                base += n;
                // Past 120k the routes repeat: those inserts fail and are cheap; stay below.
                if base >= 120_000 {
                    base = 0;
                    k.set_pipeline(1, 3, Some(config(ROUTER))).ok();
                }
                k.write(1, 0, ups).ok();
            })
        });
    }
    g.finish();
}

fn reads(c: &mut Criterion) {
    let (mut k, (t, a)) = router_kit();
    for chunk in 0..100 {
        let ups = (0..1000).map(|i| route(t, a, chunk * 1000 + i)).collect();
        k.write(1, 0, ups).expect("insert 100k");
    }
    let q = p4::Entity {
        entity: Some(E::TableEntry(p4::TableEntry { table_id: t, ..Default::default() })),
    };
    assert_eq!(k.read(vec![q.clone()]).expect("read").len(), 100_000);
    let mut g = c.benchmark_group("p4rt_read");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    g.throughput(Throughput::Elements(100_000));
    g.bench_function("100k_entries", |b| b.iter(|| k.read(vec![q.clone()]).expect("read").len()));
    g.finish();
}

fn set_pipeline(c: &mut Criterion) {
    let (mut k, _) = router_kit();
    let mut g = c.benchmark_group("p4rt_set_pipeline");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    g.bench_function("verify_and_commit_l3_router", |b| {
        b.iter(|| k.set_pipeline(1, 3, Some(config(ROUTER))).expect("set"))
    });
    g.finish();
}

/// The swap under load: a worker thread runs batches of 32 packets through the stage as fast
/// as it can while the controller pushes a second program (the router's default sends every
/// packet to port 9 instead of dropping it... see `variant`).
fn swap_under_load(_c: &mut Criterion) {
    let mut k = Kit::new();
    let a = variant(1);
    let b = variant(2);
    let s = k.primary_with(1, &a);
    let prog = k.prog.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let got = Arc::new(AtomicU64::new(0));
    let first_new = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let worker = {
        let (stop, sent, got, first_new) =
            (stop.clone(), sent.clone(), got.clone(), first_new.clone());
        std::thread::spawn(move || {
            let mut p = snic_pipeline::Pipeline::new();
            p.push(Box::new(prog.stage(0).expect("stage")));
            let frame = snic_p4rt::testing::eth([0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 2], 0x0800);
            let mut now = 1u64;
            while !stop.load(Ordering::Relaxed) {
                let mut batch = Batch::new(32);
                for _ in 0..32 {
                    batch.push_frame(&frame).expect("room").meta.ingress = PortId(0);
                }
                now += 1;
                p.process(snic_time::Instant::from_nanos(now * 1000), &mut batch);
                sent.fetch_add(32, Ordering::Relaxed);
                got.fetch_add(batch.len() as u64, Ordering::Relaxed);
                if batch.iter().any(|x| x.meta.egress == Some(PortId(2)))
                    && first_new.load(Ordering::Relaxed) == 0
                {
                    first_new.store(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let before = t0.elapsed();
    k.set_pipeline(1, 3, Some(config(&b))).expect("swap");
    let rpc = t0.elapsed() - before;
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    worker.join().expect("worker");
    drop(s);
    let (sent, got) = (sent.load(Ordering::Relaxed), got.load(Ordering::Relaxed));
    let first = Duration::from_nanos(first_new.load(Ordering::Relaxed)).saturating_sub(before);
    println!(
        "swap under load: RPC {:.2} ms, first packet on the new program {:.2} ms after the RPC began, \
         {} packets in, {} out, {} lost",
        rpc.as_secs_f64() * 1e3,
        first.as_secs_f64() * 1e3,
        sent,
        got,
        sent - got
    );
}

/// A program that sends every packet to `port`.
fn variant(port: u32) -> String {
    format!(
        "#include <core.p4>\n#include <v1model.p4>\n\
         header eth_t {{ bit<48> d; bit<48> s; bit<16> t; }}\n\
         struct h_t {{ eth_t e; }}\nstruct m_t {{}}\n\
         parser P(packet_in p, out h_t h, inout m_t m, inout standard_metadata_t s) {{ state start {{ p.extract(h.e); transition accept; }} }}\n\
         control C(inout h_t h, inout m_t m) {{ apply {{}} }}\n\
         control I(inout h_t h, inout m_t m, inout standard_metadata_t s) {{ apply {{ s.egress_spec = {port}; }} }}\n\
         control E(inout h_t h, inout m_t m, inout standard_metadata_t s) {{ apply {{}} }}\n\
         control D(packet_out p, in h_t h) {{ apply {{ p.emit(h.e); }} }}\n\
         V1Switch(P(), C(), I(), E(), C(), D()) main;\n"
    )
}

criterion_group!(benches, writes, reads, set_pipeline, swap_under_load);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
