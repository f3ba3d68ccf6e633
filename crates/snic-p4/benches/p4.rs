//! The v1model executor against hand-written Rust doing the same work, and the front end's
//! compile time.
//!
//! - `l3_router/*`: `examples/p4/l3_router.p4` (table size raised to 131,072 so that 100k
//!   routes fit) with 1k and 100k random IPv4 routes (prefix lengths 8..=32, mostly /24), fed
//!   64-byte Ethernet/IPv4/UDP frames to random destinations that all hit, through
//!   `Switch::process`; beside it, on the same frames and routes, `native`: parse Ethernet +
//!   IPv4, verify the header checksum, longest-prefix match (one hash map per prefix length,
//!   tried longest first: the same tuple-space idea as the P4 table, without the generality),
//!   rewrite the MACs, decrement the TTL, recompute the checksum, write the frame out. Before
//!   timing, both must give the same port and the same bytes for every frame.
//! - `classifier/*`: `examples/p4/reconic_classifier.p4` against snic's native `parse` and
//!   `classify` stages (the `Stage` code `snic run` drives, in batches of 32, `parse:pass` and
//!   `classify:mark` so that malformed frames stay in the batch) on the generator's traffic mix
//!   (`snic_io::generator::frames`, seed 1) and on `parse_classify`'s three frames. Before
//!   timing, the two classifications are compared and the disagreements printed (the program
//!   does not look inside tunnels, see its header comment).
//! - `compile/*`: preprocess + lex + parse + compile + `Switch::new` of the largest example.
//!
//! Run: `cargo bench -p snic-p4 --bench p4 -- --warm-up-time 1 --measurement-time 3`

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use hashbrown::HashMap;
use snic_p4::ir::{ActionCall, Compiled};
use snic_p4::table::FieldMatch;
use snic_p4::v1model::Switch;
use snic_pipeline::counters::StageCounters;
use snic_pipeline::meta::Class;
use snic_pipeline::rss::Toeplitz;
use snic_pipeline::stages::{Classify, Parse};
use snic_pipeline::trace::TraceRing;
use snic_pipeline::{Batch, Stage, StageCtx};
use snic_time::Instant;

const L3_ROUTER: &str = include_str!("../../../examples/p4/l3_router.p4");
const CLASSIFIER: &str = include_str!("../../../examples/p4/reconic_classifier.p4");

/// Frames in the router's working set (each iteration processes all of them).
const ROUTER_FRAMES: usize = 1024;
/// Next hops the routes point to.
const NEXT_HOPS: usize = 64;

fn compile(name: &str, src: &str) -> Compiled {
    let mut map = snic_p4::span::SourceMap::new();
    let main = map.add(name, src);
    match snic_p4::runner::build(
        &mut map,
        main,
        &mut snic_p4::builtin::Builtins,
        &Default::default(),
    ) {
        Ok(b) => b.program,
        Err(d) => panic!(
            "{name} does not compile:\n{}",
            d.iter().map(|d| d.render(&map)).collect::<Vec<_>>().join("\n")
        ),
    }
}

/// splitmix64: deterministic, dependency-free randomness.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A prefix length with roughly the shape of a BGP table: 60% /24, 20% /22-/23, 13% /16-/21,
/// 2% /8-/15, 5% /25-/32.
fn prefix_len(rng: &mut Rng) -> u32 {
    let r = rng.below(100);
    let (lo, hi) = match r {
        0..60 => (24, 24),
        60..80 => (22, 23),
        80..93 => (16, 21),
        93..95 => (8, 15),
        _ => (25, 32),
    };
    lo + rng.below(u64::from(hi - lo + 1)) as u32
}

fn mask(len: u32) -> u32 {
    u32::MAX.checked_shl(32 - len).unwrap_or(0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NextHop {
    port: u32,
    smac: [u8; 6],
    dmac: [u8; 6],
}

fn next_hops() -> Vec<NextHop> {
    (0..NEXT_HOPS)
        .map(|i| NextHop {
            port: 1 + (i as u32 % 8),
            smac: [0x02, 0, 0, 0, 0xaa, i as u8],
            dmac: [0x02, 0, 0, 0, 0xbb, i as u8],
        })
        .collect()
}

/// `n` distinct random routes: (prefix, length, next hop index).
fn routes(n: usize, rng: &mut Rng) -> Vec<(u32, u32, usize)> {
    let mut seen = hashbrown::HashSet::new();
    let mut v = Vec::with_capacity(n);
    while v.len() < n {
        let len = prefix_len(rng);
        let prefix = (rng.next() as u32) & mask(len);
        if seen.insert((prefix, len)) {
            v.push((prefix, len, rng.below(NEXT_HOPS as u64) as usize));
        }
    }
    v
}

/// The one's complement sum of `b` (even length), folded.
fn csum(b: &[u8]) -> u16 {
    let mut s: u32 = b.chunks_exact(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// A 64-byte Ethernet/IPv4/UDP frame to `dst`.
fn frame(dst: u32, id: u16) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x99]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&50u16.to_be_bytes());
    ip[4..6].copy_from_slice(&id.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[192, 0, 2, 1]);
    ip[16..20].copy_from_slice(&dst.to_be_bytes());
    let c = !csum(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f[34..36].copy_from_slice(&1234u16.to_be_bytes());
    f[36..38].copy_from_slice(&5678u16.to_be_bytes());
    f[38..40].copy_from_slice(&30u16.to_be_bytes());
    for (i, b) in f[42..].iter_mut().enumerate() {
        *b = i as u8;
    }
    f
}

/// The hand-written router: one hash map per prefix length, tried longest first.
#[derive(Debug)]
struct NativeRouter {
    /// `by_len[l]`: prefix (masked) -> next hop index, for prefix length `l`.
    by_len: Vec<HashMap<u32, u16>>,
    /// The prefix lengths in use, longest first.
    lens: Vec<u32>,
    hops: Vec<NextHop>,
}

impl NativeRouter {
    fn new(routes: &[(u32, u32, usize)], hops: Vec<NextHop>) -> Self {
        let mut by_len = vec![HashMap::new(); 33];
        for &(p, l, h) in routes {
            by_len[l as usize].insert(p, h as u16);
        }
        let lens = (0..=32u32).rev().filter(|&l| !by_len[l as usize].is_empty()).collect();
        NativeRouter { by_len, lens, hops }
    }

    fn lookup(&self, dst: u32) -> Option<&NextHop> {
        for &l in &self.lens {
            if let Some(&h) = self.by_len[l as usize].get(&(dst & mask(l))) {
                return Some(&self.hops[usize::from(h)]);
            }
        }
        None
    }

    /// Route `data`: `Some(port)` with the frame written to `out`, or `None` (dropped: not
    /// IPv4, options, bad checksum, TTL 0 or 1, no route).
    fn process(&self, data: &[u8], out: &mut Vec<u8>) -> Option<u32> {
        if data.len() < 34 || data[12..14] != [0x08, 0x00] {
            return None;
        }
        let ip = &data[14..34];
        if ip[0] & 0x0f != 5 || csum(ip) != 0xffff || ip[8] <= 1 {
            return None;
        }
        let dst = u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]]);
        let hop = self.lookup(dst)?;
        out.clear();
        out.extend_from_slice(data);
        out[0..6].copy_from_slice(&hop.dmac);
        out[6..12].copy_from_slice(&hop.smac);
        let ip = &mut out[14..34];
        ip[8] -= 1;
        ip[10..12].fill(0);
        let c = !csum(ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        Some(hop.port)
    }
}

fn mac_u128(m: &[u8; 6]) -> u128 {
    m.iter().fold(0, |v, b| (v << 8) | u128::from(*b))
}

fn router_switch(routes: &[(u32, u32, usize)], hops: &[NextHop]) -> Switch {
    // The example's table holds 131072 routes, room for the 100k-route run.
    assert!(L3_ROUTER.contains("size = 131072;"), "l3_router.p4's table size changed");
    let mut sw = Switch::new(compile("l3_router.p4", L3_ROUTER)).expect("switch");
    let t = sw.table_index("MyIngress.ipv4_lpm").expect("table MyIngress.ipv4_lpm");
    for &(p, l, h) in routes {
        let hop = &hops[h];
        let call = ActionCall {
            action: 0, // set_nhop
            args: vec![u128::from(hop.port), mac_u128(&hop.smac), mac_u128(&hop.dmac)],
        };
        sw.table_add(t, vec![FieldMatch::Lpm { value: u128::from(p), len: l }], None, call)
            .expect("table_add");
    }
    sw
}

fn l3_router(c: &mut Criterion) {
    let hops = next_hops();
    let mut g = c.benchmark_group("l3_router");
    g.throughput(Throughput::Elements(ROUTER_FRAMES as u64));
    for n in [1_000usize, 100_000] {
        let mut rng = Rng(n as u64);
        let routes = routes(n, &mut rng);
        let frames: Vec<Vec<u8>> = (0..ROUTER_FRAMES)
            .map(|i| {
                let (p, l, _) = routes[rng.below(n as u64) as usize];
                let dst = p | (rng.next() as u32 & !mask(l));
                frame(dst, i as u16)
            })
            .collect();
        let native = NativeRouter::new(&routes, hops.clone());
        let mut sw = router_switch(&routes, &hops);

        // Same decisions, same bytes.
        let mut out = Vec::new();
        let mut buf = Vec::new();
        for f in &frames {
            out.clear();
            sw.process(0, f, 0, &mut out);
            let port = native.process(f, &mut buf).expect("every frame hits");
            assert_eq!(out, vec![(port, buf.clone())], "P4 and native disagree");
        }

        let label = format!("{}k", n / 1000);
        g.bench_function(BenchmarkId::new("p4", &label), |b| {
            let mut out = Vec::with_capacity(4);
            b.iter(|| {
                for f in &frames {
                    out.clear();
                    sw.process(0, black_box(f), 0, &mut out);
                    black_box(&out);
                }
            })
        });
        g.bench_function(BenchmarkId::new("native", &label), |b| {
            let mut buf = Vec::with_capacity(64);
            b.iter(|| {
                for f in &frames {
                    black_box(native.process(black_box(f), &mut buf));
                }
            })
        });
    }
    g.finish();
}

/// What the classifier program decided: port 1 is RDMA, port 2 the rest.
fn p4_class(sw: &mut Switch, f: &[u8], out: &mut Vec<(u32, Vec<u8>)>) -> Option<Class> {
    out.clear();
    sw.process(0, f, 0, out);
    match out.as_slice() {
        [(1, _)] => Some(Class::Rdma),
        [(2, _)] => Some(Class::Other),
        _ => None,
    }
}

/// `frames` in batches of 32 for the native stages.
fn batches(frames: &[Vec<u8>]) -> Vec<Batch> {
    frames
        .chunks(32)
        .map(|c| {
            let mut b = Batch::new(32);
            for f in c {
                b.push_frame(f).expect("batch room");
            }
            b
        })
        .collect()
}

#[derive(Debug)]
struct Native {
    parse: Parse,
    cls: Classify,
    pc: StageCounters,
    cc: StageCounters,
    ring: TraceRing,
}

impl Native {
    fn new() -> Self {
        Native {
            parse: Parse::new(Toeplitz::default(), true),
            cls: Classify::new(false),
            pc: StageCounters::new("parse"),
            cc: StageCounters::new("classify"),
            ring: TraceRing::new(16),
        }
    }

    fn run(&mut self, batch: &mut Batch) {
        // Each pass sees the frames as freshly received (see parse_classify.rs).
        for p in batch.iter_mut() {
            p.meta.parsed = false;
        }
        self.parse.process(Instant::ZERO, batch, &mut StageCtx::new(&mut self.pc, &mut self.ring));
        self.cls.process(Instant::ZERO, batch, &mut StageCtx::new(&mut self.cc, &mut self.ring));
    }
}

fn classifier(c: &mut Criterion) {
    let trio = {
        use snic_pipeline::testing::frames::*;
        vec![
            udp64(1234, 5678),
            vxlan(42, &tcp_frame(40000, 443, &[0x5a; 64])),
            roce_write(Write::default(), false),
        ]
    };
    let mix: Vec<Vec<u8>> =
        snic_io::generator::frames(4096, 1).into_iter().map(|(_, f)| f).collect();
    let mut g = c.benchmark_group("classifier");
    for (name, frames) in [("mix", mix), ("trio", trio)] {
        let mut sw = Switch::new(compile("reconic_classifier.p4", CLASSIFIER)).expect("switch");
        let mut native = Native::new();
        let mut bs = batches(&frames);

        // Compare the decisions once.
        let mut out = Vec::new();
        let (mut rdma, mut differ, mut none) = (0, 0, 0);
        for b in bs.iter_mut() {
            native.run(b);
        }
        for (f, p) in frames.iter().zip(bs.iter().flat_map(|b| b.iter())) {
            match p4_class(&mut sw, f, &mut out) {
                None => none += 1,
                Some(c) if c != p.meta.class => differ += 1,
                Some(_) => {}
            }
            rdma += usize::from(p.meta.class == Class::Rdma);
        }
        eprintln!(
            "classifier/{name}: {} frames, native rdma {rdma}; P4 differs on {differ}, sends \
             {none} nowhere",
            frames.len()
        );

        g.throughput(Throughput::Elements(frames.len() as u64));
        g.bench_function(BenchmarkId::new("p4", name), |b| {
            let mut out = Vec::with_capacity(4);
            b.iter(|| {
                for f in &frames {
                    out.clear();
                    sw.process(0, black_box(f), 0, &mut out);
                    black_box(&out);
                }
            })
        });
        g.bench_function(BenchmarkId::new("native", name), |b| {
            b.iter(|| {
                for batch in bs.iter_mut() {
                    native.run(batch);
                }
            })
        });
    }
    g.finish();
}

fn compile_time(c: &mut Criterion) {
    let mut g = c.benchmark_group("compile");
    g.bench_function("reconic_classifier", |b| {
        b.iter(|| Switch::new(compile("reconic_classifier.p4", black_box(CLASSIFIER))).unwrap())
    });
    g.finish();
}

criterion_group!(benches, l3_router, classifier, compile_time);
criterion_main!(benches);
