//! The vSwitch fast path (`snic-vswitch` driven as `snic run` drives it), one core: batches of 256 packets (64-byte inner UDP frames from the
//! VM) through the `vswitch` stage, every packet a GFT hit with a VXLAN encap transposition,
//! with 1k, 100k, 1M and 10M flows cached. Beside it, in the same run and on the same batches:
//! the simplest possible fast path, a `hashbrown::HashMap<FlowKey, [u8; 50]>` lookup plus a
//! copy of the 50-byte outer header into the headroom.
//!
//! The batches are rebuilt (frame copied back, metadata restored) outside the timed routine,
//! so the figures are the stage's own cost per packet. Flow sizes are chosen by
//! `SNIC_BENCH_FLOWS` (comma-separated; default `1000,100000,1000000,10000000`).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use snic_pipeline::{Batch, MAX_BATCH, PortId, Stage, StageCounters, StageCtx, TraceRing};
use snic_time::Instant;
use snic_vswitch::engine::{VSwitch, VSwitchConfig};
use snic_vswitch::key::{self, Direction, FlowKey};
use snic_vswitch::policy::default_policy;
use snic_vswitch::policy::{Action, LayerKind};
use snic_wire::stack::Stack;
use std::hint::black_box;
use std::time::Duration;

/// A 64-byte Ethernet/IPv4/UDP frame from the VM (10.0.0.1) for flow `i`: destination
/// 10.0.0.(2 + i % 253), source port i / 253.
fn frame(i: u64, out: &mut [u8; 64]) {
    *out = [0; 64];
    out[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    out[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    out[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut out[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&50u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 2 + (i % 253) as u8]);
    let c = !snic_wire::checksum::data(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let sport = (i / 253) as u16;
    out[34..36].copy_from_slice(&sport.to_be_bytes());
    out[36..38].copy_from_slice(&9000u16.to_be_bytes());
    out[38..40].copy_from_slice(&30u16.to_be_bytes());
}

/// Fill `b` with packets of the flows `ids`, parsed as the parse stage would leave them.
fn fill(b: &mut Batch, ids: &[u64], stack: &Stack) {
    b.clear();
    let mut f = [0u8; 64];
    for &i in ids {
        frame(i, &mut f);
        let p = b.push_frame(&f).expect("room");
        p.meta.ingress = PortId(0);
        p.meta.stack = *stack;
        p.meta.parsed = true;
    }
}

/// Resident memory of this process in bytes (`/proc/self/statm`, second field, 4 KiB pages).
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .map_or(0, |p| p * 4096)
}

/// Resident memory per flow after installing `n` flows of `policy` (stateless or stateful)
/// through the slow path: flow table entries, reverse flows, connection records, actions.
fn memory_per_flow(policy: &snic_vswitch::policy::Policy, n: u64, stack: &Stack) -> f64 {
    let before = rss();
    let mut cfg = VSwitchConfig::default();
    cfg.gft.capacity = 2 * n as usize;
    cfg.age_budget = 0;
    let vs = VSwitch::new(policy.clone(), cfg).unwrap();
    let mut stage = vs.stage().unwrap();
    let mut counters = StageCounters::new("vswitch");
    let mut ring = TraceRing::new(16);
    let mut batch = Batch::new(MAX_BATCH);
    let ids: Vec<u64> = (0..n).collect();
    for chunk in ids.chunks(MAX_BATCH) {
        fill(&mut batch, chunk, stack);
        stage.process(
            Instant::from_secs(1),
            &mut batch,
            &mut StageCtx::new(&mut counters, &mut ring),
        );
    }
    let flows = vs.stats().flows as f64;
    let grown = rss().saturating_sub(before) as f64;
    eprintln!(
        "memory: {n} connections -> {flows} cached flows, resident growth {:.0} MiB = {:.0} B per cached flow, {:.0} B per connection",
        grown / 1048576.0,
        grown / flows,
        grown / n as f64
    );
    grown / flows
}

/// Anonymous memory of this process backed by transparent huge pages, in bytes
/// (`AnonHugePages` of `/proc/self/smaps_rollup`; 0 where the kernel does not say).
fn huge_backed() -> u64 {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("AnonHugePages:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kb| kb * 1024)
}

fn flow_sizes() -> Vec<u64> {
    std::env::var("SNIC_BENCH_FLOWS")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 100_000, 1_000_000, 10_000_000])
}

fn bench(c: &mut Criterion) {
    let mut f = [0u8; 64];
    frame(0, &mut f);
    let stack = Stack::parse(&f);
    let mut policy = default_policy();
    // Stateless allow: one cached flow per flow (no reverse flows, no connection state).
    for l in &mut policy.vports[0].layers {
        if l.kind == LayerKind::Acl {
            for r in &mut l.rules {
                r.action = Action::Allow;
            }
        }
    }
    // Memory actually touched per cached flow (1M flows; the table's capacity is 2M so both
    // directions of stateful connections fit): stateless, then stateful (allow-stateful: a
    // reverse flow and a connection record per connection).
    if std::env::var_os("SNIC_BENCH_MEMORY").is_some() {
        memory_per_flow(&policy, 1_000_000, &stack);
        memory_per_flow(&default_policy(), 1_000_000, &stack);
    }
    let mut g = c.benchmark_group("fastpath");
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(MAX_BATCH as u64));
    for n in flow_sizes() {
        let mut cfg = VSwitchConfig::default();
        cfg.gft.capacity = (n as usize).max(1024);
        cfg.gft.idle_timeout = Duration::from_secs(3600);
        cfg.age_budget = 0;
        let vs = VSwitch::new(policy.clone(), cfg).unwrap();
        let mut stage = vs.stage().unwrap();
        // As `snic run` does: back the flow table with huge pages where the kernel allows.
        let huge = snic_io::sys::hugepage::advise(&vs.table_regions()).unwrap_or(0);
        let mut counters = StageCounters::new("vswitch");
        let mut ring = TraceRing::new(16);
        let mut batch = Batch::new(MAX_BATCH);
        // Install every flow through the slow path.
        let t0 = std::time::Instant::now();
        let ids: Vec<u64> = (0..n).collect();
        for chunk in ids.chunks(MAX_BATCH) {
            fill(&mut batch, chunk, &stack);
            stage.process(
                Instant::from_secs(1),
                &mut batch,
                &mut StageCtx::new(&mut counters, &mut ring),
            );
        }
        let st = vs.stats();
        assert_eq!(st.flows as u64, n, "every flow cached");
        let mem = vs.table_memory();
        eprintln!(
            "fastpath: {n} flows installed in {:.2?} ({:.0} setups/s); table memory {} MiB = {:.0} B/flow at capacity {}, {} MiB advised for huge pages, {} MiB of the process on huge pages",
            t0.elapsed(),
            n as f64 / t0.elapsed().as_secs_f64(),
            mem >> 20,
            mem as f64 / st.capacity as f64,
            st.capacity,
            huge >> 20,
            huge_backed() >> 20
        );
        let mut rng = ChaCha8Rng::seed_from_u64(n);
        let mut pick =
            move || -> Vec<u64> { (0..MAX_BATCH).map(|_| rng.gen_range(0..n)).collect() };
        let hits_before = vs.stats().fast.hits;
        let mut bt = Batch::new(MAX_BATCH);
        g.bench_function(format!("vswitch/{n}"), |b| {
            // Only `process` is timed; refilling the batch is not.
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    fill(&mut bt, &pick(), &stack);
                    let t = std::time::Instant::now();
                    stage.process(
                        Instant::from_secs(2),
                        &mut bt,
                        &mut StageCtx::new(&mut counters, &mut ring),
                    );
                    total += t.elapsed();
                    black_box(bt.len());
                }
                total
            })
        });
        let st = vs.stats();
        assert_eq!(st.fast.misses, n, "the timed runs were all hits");
        assert!(st.fast.hits > hits_before);

        // The simplest possible fast path over the same packets.
        let mut map: hashbrown::HashMap<FlowKey, [u8; 50]> =
            hashbrown::HashMap::with_capacity(n as usize);
        for i in 0..n {
            frame(i, &mut f);
            let k = key::extract(&f, &stack, 0, Direction::Out).unwrap();
            let mut hdr = [0u8; 50];
            hdr[0] = (i % 251) as u8;
            map.insert(k, hdr);
        }
        let mut rng2 = ChaCha8Rng::seed_from_u64(n);
        let mut pick2 =
            move || -> Vec<u64> { (0..MAX_BATCH).map(|_| rng2.gen_range(0..n)).collect() };
        g.bench_function(format!("hashbrown+copy/{n}"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    fill(&mut bt, &pick2(), &stack);
                    let t = std::time::Instant::now();
                    let mut hit = 0;
                    for p in bt.iter_mut() {
                        let Ok(k) = key::extract(p.data(), &p.meta.stack, 0, Direction::Out) else {
                            continue;
                        };
                        if let Some(h) = map.get(&k) {
                            if let Ok(front) = p.push_front(50) {
                                front.copy_from_slice(h);
                                hit += 1;
                            }
                            p.meta.egress = Some(PortId(1));
                        }
                    }
                    total += t.elapsed();
                    black_box(hit);
                }
                total
            })
        });
        drop(map);
        drop(stage);
        drop(vs);
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
