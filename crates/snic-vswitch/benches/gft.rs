//! GFT flow-table benchmarks (one thread).
//!
//! - `lookup/{gft_batch32, gft_single, hashbrown}/N`: hit lookups of random keys from the live
//!   set of a table holding N flows (1k, 100k, 1M, 10M). The GFT figures include hashing the key
//!   with [`Gft::hash`], as the fast path does; `hashbrown` is a plain
//!   `hashbrown::HashMap<FlowKey, u32>` (default hasher) looking up the same keys.
//! - `insert/gft_fill_1M`, `insert/hashbrown_fill_1M`: a million inserts into an empty table.
//! - `insert/gft_churn_full_1M`: inserts of new keys into a full 1M table (each one evicts).
//!
//! Tables are built outside the timed loops. Prints `memory_bytes()/capacity` per size.
//! Run: `cargo bench -p snic-vswitch --bench gft`.

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, black_box};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use snic_time::Instant;
use snic_vswitch::gft::{ActionId, FlowEntry, FlowId, Gft, GftConfig};
use snic_vswitch::key::{FlowKey, KeyFlags};
use std::time::Duration;

/// Queries cycled through per size (a power of two).
const QUERIES: usize = 1 << 16;
/// Keys per `lookup_batch` call.
const BATCH: usize = 32;

/// A random tunnelled IPv4 UDP flow key (VNI below 2^24).
fn random_key(rng: &mut ChaCha8Rng) -> FlowKey {
    let mut k = FlowKey {
        proto: 17,
        src_port: rng.r#gen(),
        dst_port: rng.r#gen(),
        vni: rng.gen_range(0..1 << 24),
        port: rng.gen_range(0..4),
        flags: KeyFlags::TUNNEL,
        ..FlowKey::default()
    };
    for a in [&mut k.src, &mut k.dst, &mut k.outer_src, &mut k.outer_dst] {
        a[10] = 0xff;
        a[11] = 0xff;
        rng.fill(&mut a[12..16]);
    }
    k
}

fn keys(n: usize, seed: u64) -> Vec<FlowKey> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| random_key(&mut rng)).collect()
}

fn table(capacity: usize) -> Gft {
    let cfg = GftConfig { capacity, idle_timeout: Duration::from_secs(30), seed: 0x0123_4567_89ab };
    Gft::new(cfg).expect("bench capacity is valid")
}

fn fill(t: &mut Gft, keys: &[FlowKey]) {
    let now = Instant::from_secs(1);
    for (i, k) in keys.iter().enumerate() {
        let h = t.hash(k);
        t.insert(now, h, FlowEntry::new(*k, ActionId(i as u32), 0, 0, now));
    }
}

fn lookups(c: &mut Criterion) {
    let mut g = c.benchmark_group("lookup");
    for &n in &[1_000usize, 100_000, 1_000_000, 10_000_000] {
        let ks = keys(n, n as u64);
        let mut t = table(n);
        fill(&mut t, &ks);
        let mut map: hashbrown::HashMap<FlowKey, u32> = hashbrown::HashMap::with_capacity(n);
        for (i, k) in ks.iter().enumerate() {
            map.insert(*k, i as u32);
        }
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let q: Vec<FlowKey> = (0..QUERIES).map(|_| ks[rng.gen_range(0..n)]).collect();
        let hits = q.iter().filter(|k| t.lookup(t.hash(k), k).is_some()).count();
        let st = t.stats();
        eprintln!(
            "gft n={n}: len={} evicted_collision={} hits={hits}/{QUERIES} memory_bytes/capacity={:.1}",
            st.len,
            st.evicted_collision,
            t.memory_bytes() as f64 / t.capacity() as f64
        );
        drop(ks);

        g.throughput(Throughput::Elements(BATCH as u64));
        g.bench_function(BenchmarkId::new("gft_batch32", n), |b| {
            let mut off = 0;
            let mut hashes = [0u64; BATCH];
            let mut out: [Option<FlowId>; BATCH] = [None; BATCH];
            b.iter(|| {
                let batch = &q[off..off + BATCH];
                for (h, k) in hashes.iter_mut().zip(batch) {
                    *h = t.hash(k);
                }
                t.lookup_batch(&hashes, batch, &mut out);
                off = (off + BATCH) & (QUERIES - 1);
                black_box(&out);
            })
        });
        g.bench_function(BenchmarkId::new("gft_single", n), |b| {
            let mut off = 0;
            b.iter(|| {
                for k in &q[off..off + BATCH] {
                    black_box(t.lookup(t.hash(k), k));
                }
                off = (off + BATCH) & (QUERIES - 1);
            })
        });
        g.bench_function(BenchmarkId::new("hashbrown", n), |b| {
            let mut off = 0;
            b.iter(|| {
                for k in &q[off..off + BATCH] {
                    black_box(map.get(k));
                }
                off = (off + BATCH) & (QUERIES - 1);
            })
        });
    }
    g.finish();
}

fn inserts(c: &mut Criterion) {
    const N: usize = 1_000_000;
    let mut g = c.benchmark_group("insert");
    let ks = keys(N, 99);
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("gft_fill_1M", |b| {
        b.iter_batched(|| table(N), |mut t| fill(&mut t, &ks), BatchSize::PerIteration)
    });
    g.bench_function("hashbrown_fill_1M", |b| {
        b.iter_batched(
            || hashbrown::HashMap::<FlowKey, u32>::with_capacity(N),
            |mut m| {
                for (i, k) in ks.iter().enumerate() {
                    m.insert(*k, i as u32);
                }
                m
            },
            BatchSize::PerIteration,
        )
    });

    // Steady state at capacity: every insert is of a key never seen before (a filled key with a
    // VNI at or above 2^24, which the fill never uses), so each one evicts a flow.
    let mut t = table(N);
    fill(&mut t, &ks);
    const CHURN: usize = 1024;
    g.throughput(Throughput::Elements(CHURN as u64));
    // Criterion calls the routine several times: the position in the key stream lives outside.
    let (mut off, mut round, mut now) = (0usize, 1u32 << 24, 2u64);
    g.bench_function("gft_churn_full_1M", |b| {
        b.iter(|| {
            let at = Instant::from_secs(now);
            for k in &ks[off..off + CHURN] {
                let k = FlowKey { vni: round, ..*k };
                let h = t.hash(&k);
                black_box(t.insert(at, h, FlowEntry::new(k, ActionId(0), 0, 0, at)));
            }
            off += CHURN;
            if off + CHURN > ks.len() {
                off = 0;
                round += 1;
            }
            now += 1;
        })
    });
    let st = t.stats();
    eprintln!(
        "gft churn: evicted_full={} evicted_collision={} replaced={}",
        st.evicted_full, st.evicted_collision, st.replaced
    );
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(10)
}

criterion::criterion_group! {
    name = benches;
    config = config();
    targets = lookups, inserts
}
criterion::criterion_main!(benches);
