//! Direct calls of the lookaside kernels (no FIFOs, no host interface): GEMM f32 and i8 at
//! square sizes and one non-square shape, the i8 kernel against a naive triple loop, CRC32C,
//! LZ4 and the vector kernels on 1 MiB. GEMM throughput is in elements = operations
//! (2·M·N·K per run), so criterion's elem/s reads as op/s (GFLOP/s, GOP/s for i8).
//!
//! `cargo bench -p snic-compute --bench kernels` (a filter such as `gemm_i8` narrows it).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use snic_compute::testing::{
    Space, f32_bytes, gemm_cmd, gemm_ref_i8, i8_bytes, random_f32, random_i8, rng,
};
use snic_compute::{GemmShape, KernelCmd, dtype, ids, reduce};

const MIB: usize = 1 << 20;

/// A Space holding A, B and C of `shape` for `dt` in device memory, and the command.
fn gemm_space(shape: &GemmShape, dt: u64) -> (Space, KernelCmd) {
    let (m, n, k) = (shape.m, shape.n, shape.k);
    let isz = if dt == dtype::I8 { 1 } else { 4 };
    let (na, nb, nc) = (m * k * isz, k * n * isz, m * n * 4);
    let round = |x: usize| x.div_ceil(4096) * 4096;
    let mut s = Space::new(4096, round(na) + round(nb) + round(nc));
    let (a, b, c) =
        (s.dev_at(0), s.dev_at(round(na) as u64), s.dev_at((round(na) + round(nb)) as u64));
    let mut r = rng(7);
    if dt == dtype::I8 {
        s.put(a, &i8_bytes(&random_i8(&mut r, m * k)));
        s.put(b, &i8_bytes(&random_i8(&mut r, k * n)));
    } else {
        s.put(a, &f32_bytes(&random_f32(&mut r, m * k)));
        s.put(b, &f32_bytes(&random_f32(&mut r, k * n)));
    }
    let cmd = gemm_cmd(shape, dt, a, b, c);
    (s, cmd)
}

fn bench_gemm(c: &mut Criterion) {
    let mut shapes: Vec<(usize, usize, usize)> =
        [64, 128, 256, 512, 1024, 2048].iter().map(|&d| (d, d, d)).collect();
    shapes.push((384, 1000, 200));
    for (dt, name) in [(dtype::F32, "gemm_f32"), (dtype::I8, "gemm_i8")] {
        let mut g = c.benchmark_group(name);
        for &(m, n, k) in &shapes {
            if dt == dtype::I8 && m == 2048 {
                continue;
            }
            let shape = GemmShape::new(m as u64, n as u64, k as u64, 0).expect("shape");
            let (mut s, cmd) = gemm_space(&shape, dt);
            let big = m * n * k >= 512 * 512 * 512;
            g.sample_size(if big { 10 } else { 30 });
            g.measurement_time(Duration::from_secs(if big { 6 } else { 3 }));
            g.throughput(Throughput::Elements(shape.ops()));
            g.bench_function(BenchmarkId::from_parameter(format!("{m}x{n}x{k}")), |bch| {
                bch.iter(|| {
                    let st = s.run(1, black_box(&cmd));
                    assert!(st.is_ok());
                })
            });
        }
        g.finish();
    }
    // The packed i8 kernel against the naive triple loop, same sizes, same run.
    let mut g = c.benchmark_group("gemm_i8_naive");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(3));
    for d in [64usize, 128, 256, 512] {
        let shape = GemmShape::new(d as u64, d as u64, d as u64, 0).expect("shape");
        let mut r = rng(3);
        let (a, b) = (random_i8(&mut r, d * d), random_i8(&mut r, d * d));
        let mut out = vec![0i32; d * d];
        g.throughput(Throughput::Elements(shape.ops()));
        g.bench_function(BenchmarkId::from_parameter(format!("{d}x{d}x{d}")), |bch| {
            bch.iter(|| gemm_ref_i8(&shape, black_box(&a), black_box(&b), &mut out))
        });
    }
    g.finish();
}

fn bench_stream(c: &mut Criterion) {
    let mut s = Space::new(4096, 4 * MIB);
    s.scribble(9);
    let (x, y, out) = (s.dev_at(0), s.dev_at(MIB as u64), s.dev_at(2 * MIB as u64));
    let m = MIB as u64;
    // Text-like data for LZ4: words from a 64-word vocabulary, picked at random.
    let text = words(MIB);
    s.put(x, &text);
    let mut g = c.benchmark_group("stream_1MiB");
    g.throughput(Throughput::Bytes(m));
    g.measurement_time(Duration::from_secs(3));
    let cmds = [
        ("crc32c", KernelCmd::new(ids::CRC32C, 1).addr(x, m).scalar(0)),
        ("lz4_compress", KernelCmd::new(ids::LZ4_COMPRESS, 1).addr(x, m).addr(out, 2 * m)),
        (
            "vadd_f32",
            KernelCmd::new(ids::VADD, 1).addr(x, m).addr(y, m).addr(out, m).scalar(dtype::F32),
        ),
        (
            "vadd_i32",
            KernelCmd::new(ids::VADD, 1).addr(x, m).addr(y, m).addr(out, m).scalar(dtype::I32),
        ),
        (
            "reduce_sum_f32",
            KernelCmd::new(ids::REDUCE, 1).addr(x, m).scalar(reduce::SUM).scalar(dtype::F32),
        ),
        (
            "reduce_sum_i64",
            KernelCmd::new(ids::REDUCE, 1).addr(x, m).scalar(reduce::SUM).scalar(dtype::I64),
        ),
        (
            "reduce_max_i32",
            KernelCmd::new(ids::REDUCE, 1).addr(x, m).scalar(reduce::MAX).scalar(dtype::I32),
        ),
    ];
    for (name, cmd) in &cmds {
        g.bench_function(*name, |b| b.iter(|| assert!(s.run(1, black_box(cmd)).is_ok())));
    }
    // Decompress what the compressor made.
    let st = s.run(1, &cmds[1].1);
    assert!(st.is_ok());
    let dec = KernelCmd::new(ids::LZ4_DECOMPRESS, 1).addr(out, st.result).addr(y, m);
    g.bench_function("lz4_decompress", |b| b.iter(|| assert!(s.run(1, black_box(&dec)).is_ok())));
    g.finish();
    eprintln!("lz4 ratio on the bench data: {:.2}", MIB as f64 / st.result as f64);
}

/// `len` bytes of space-separated words drawn at random from a small vocabulary (LZ4 packs it
/// about 2:1, like log or JSON text).
fn words(len: usize) -> Vec<u8> {
    use rand::Rng;
    let mut r = rng(21);
    let vocab: Vec<Vec<u8>> = (0..64)
        .map(|_| (0..r.gen_range(3..10)).map(|_| r.gen_range(b'a'..=b'z')).collect())
        .collect();
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        out.extend_from_slice(&vocab[r.gen_range(0..vocab.len())]);
        out.push(b' ');
    }
    out.truncate(len);
    out
}

criterion_group!(benches, bench_gemm, bench_stream);
criterion_main!(benches);
