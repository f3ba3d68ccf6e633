//! GFT in P4 against the native vSwitch, one core, the same traffic in the same run:
//! `examples/p4/gft_pna.p4` (PNA, run by `snic_p4::v1model::Switch`) and the `vswitch` stage
//! (`snic-vswitch`'s GFT fast path, as `snic run` drives it, as in `vswitch_fastpath`).
//!
//! Traffic: 64-byte Ethernet/IPv4/UDP frames from the VM (10.0.0.1) of N established flows
//! (default 10,000; `SNIC_BENCH_FLOWS` takes a comma-separated list), in batches of 256 random
//! flows. Every packet is a flow-table hit whose action is the VXLAN encap transposition of
//! the default policy (VNI 42, provider address 192.168.100.x, inner MAC rewrite). Both sides
//! install every flow through their slow path before timing: the vSwitch's VFP layers, the P4
//! program's `acl` + `vnet` tables, recirculation and `add_entry`.
//!
//! Only the packet work is timed: the vSwitch processes a parsed batch in place; the P4
//! switch runs each frame to completion (parse, tables, deparse into a new buffer). Batches are
//! rebuilt outside the timed part. Run: `cargo bench -p snic-io --bench gft_p4`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use snic_p4::v1model::Switch;
use snic_pipeline::{Batch, MAX_BATCH, PortId, Stage, StageCounters, StageCtx, TraceRing};
use snic_time::Instant;
use snic_vswitch::engine::{VSwitch, VSwitchConfig};
use snic_vswitch::policy::{Action, LayerKind, default_policy};
use snic_wire::stack::Stack;
use std::hint::black_box;
use std::time::Duration;

/// The frame of flow `i` (as `vswitch_fastpath`): 10.0.0.1 -> 10.0.0.(2 + i % 253), UDP
/// source port i / 253, destination port 9000.
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
    out[34..36].copy_from_slice(&((i / 253) as u16).to_be_bytes());
    out[36..38].copy_from_slice(&9000u16.to_be_bytes());
    out[38..40].copy_from_slice(&30u16.to_be_bytes());
}

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

/// gft_pna.p4 with the default policy's ACL (allow 10/8) and VNET mappings (10.0.0.n ->
/// 192.168.100.n, 02:00:00:00:00:n, VNI 42), port 0 a host port, flows that do not expire.
fn p4_switch(flows: usize) -> Switch {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/p4");
    let text = std::fs::read_to_string(dir.join("gft_pna.p4")).expect("gft_pna.p4");
    let text = text.replace("size = 65536;", &format!("size = {};", flows.max(1024)));
    let mut map = snic_p4::span::SourceMap::new();
    let main = map.add("gft_pna.p4", &text);
    let built = snic_p4::runner::build(
        &mut map,
        main,
        &mut snic_p4::builtin::Builtins,
        &Default::default(),
    )
    .unwrap_or_else(|_| panic!("gft_pna.p4 compiles"));
    let mut sw = Switch::new(built.program).expect("switch");
    sw.set_host_ports(&[0]);
    sw.set_expire_time_profile(0, 3600 * 1_000_000_000);
    let mut lines =
        vec!["table_add acl allow 0&&&0 0x0a000000&&&0xff000000 0&&&0 0&&&0 => 10".to_string()];
    for n in 2..=254u32 {
        lines.push(format!(
            "table_add vnet map 0x0a0000{n:02x} => 0xc0a864{n:02x} 0x0200000000{n:02x} 42"
        ));
    }
    for l in &lines {
        let cmd = snic_p4::cli::parse_line(l, 1).expect("parses").expect("a command");
        snic_p4::runtime::apply(&mut sw, &cmd).expect("applies");
    }
    sw
}

fn flow_sizes() -> Vec<u64> {
    std::env::var("SNIC_BENCH_FLOWS")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000])
}

fn bench(c: &mut Criterion) {
    let mut f = [0u8; 64];
    frame(0, &mut f);
    let stack = Stack::parse(&f);
    let mut policy = default_policy();
    // Stateless allow (as vswitch_fastpath): one cached flow per flow.
    for l in &mut policy.vports[0].layers {
        if l.kind == LayerKind::Acl {
            for r in &mut l.rules {
                r.action = Action::Allow;
            }
        }
    }
    let mut g = c.benchmark_group("gft");
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(MAX_BATCH as u64));
    for n in flow_sizes() {
        // The native vSwitch.
        let mut cfg = VSwitchConfig::default();
        cfg.gft.capacity = (n as usize).max(1024);
        cfg.gft.idle_timeout = Duration::from_secs(3600);
        cfg.age_budget = 0;
        let vs = VSwitch::new(policy.clone(), cfg).unwrap();
        let mut stage = vs.stage().unwrap();
        let mut counters = StageCounters::new("vswitch");
        let mut ring = TraceRing::new(16);
        let mut batch = Batch::new(MAX_BATCH);
        let ids: Vec<u64> = (0..n).collect();
        for chunk in ids.chunks(MAX_BATCH) {
            fill(&mut batch, chunk, &stack);
            stage.process(
                Instant::from_secs(1),
                &mut batch,
                &mut StageCtx::new(&mut counters, &mut ring),
            );
        }
        assert_eq!(vs.stats().flows as u64, n, "every flow cached");

        // The P4 program: each flow's first packet installs it.
        let mut sw = p4_switch(n as usize);
        let mut out = Vec::new();
        for &i in &ids {
            frame(i, &mut f);
            out.clear();
            sw.process(0, &f, 1_000_000_000, &mut out);
            assert_eq!(out.len(), 1, "flow {i} forwarded");
        }
        let t = sw.table_index("MainControlImpl.flows").expect("flows");
        assert_eq!(sw.table_entries(t).len() as u64, n, "every flow learned");
        assert_eq!(sw.stats().learned, n);
        // Same transposition: the P4 output of flow 0 has the vSwitch's outer destination,
        // VNI and inner frame (the UDP source ports differ: each picks its own entropy hash).
        frame(0, &mut f);
        out.clear();
        sw.process(0, &f, 1_000_000_000, &mut out);
        fill(&mut batch, &[0], &stack);
        stage.process(
            Instant::from_secs(1),
            &mut batch,
            &mut StageCtx::new(&mut counters, &mut ring),
        );
        let native = batch.iter_mut().next().expect("one packet").data().to_vec();
        let p4 = &out[0].1;
        assert_eq!(p4.len(), native.len());
        assert_eq!(p4[..34], native[..34], "outer Ethernet and IPv4");
        assert_eq!(p4[36..], native[36..], "UDP (but the source port), VXLAN, inner frame");

        let mut rng = ChaCha8Rng::seed_from_u64(n);
        let picks: Vec<Vec<u64>> =
            (0..64).map(|_| (0..MAX_BATCH).map(|_| rng.gen_range(0..n)).collect()).collect();
        let mut k = 0usize;
        let mut bt = Batch::new(MAX_BATCH);
        g.bench_function(format!("vswitch/{n}"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    fill(&mut bt, &picks[k % picks.len()], &stack);
                    k += 1;
                    let t0 = std::time::Instant::now();
                    stage.process(
                        Instant::from_secs(2),
                        &mut bt,
                        &mut StageCtx::new(&mut counters, &mut ring),
                    );
                    total += t0.elapsed();
                    black_box(bt.len());
                }
                total
            })
        });
        let frames: Vec<Vec<[u8; 64]>> = picks
            .iter()
            .map(|ids| {
                ids.iter()
                    .map(|&i| {
                        let mut f = [0u8; 64];
                        frame(i, &mut f);
                        f
                    })
                    .collect()
            })
            .collect();
        let learned = sw.stats().learned;
        let mut k = 0usize;
        g.bench_function(format!("p4_gft_pna/{n}"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let fs = &frames[k % frames.len()];
                    k += 1;
                    out.clear();
                    let t0 = std::time::Instant::now();
                    for f in fs {
                        sw.process(0, f, 2_000_000_000, &mut out);
                    }
                    total += t0.elapsed();
                    black_box(out.len());
                }
                total
            })
        });
        assert_eq!(sw.stats().learned, learned, "the timed runs were all hits");
        assert_eq!(vs.stats().fast.misses, n, "the vSwitch's timed runs were all hits");
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
