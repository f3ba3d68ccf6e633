//! f32 GEMM as a lookaside kernel through the host library (command into the GEMM kernel's
//! control FIFO, computed on snic's compute worker over this process's registered memory,
//! status polled from the status FIFO, or waited for on the kernel's eventfd) against the same kernel called directly in this
//! process (`snic_compute::Kernels::run` over a local address space), in the same run.
//!
//! `cargo bench -p snic-host --bench kernel_offload`. Sizes: 64 .. 2048 square and one
//! non-square (384 x 1000 x 200); fewer samples for the big ones. The ratio reported in
//! BENCHMARKS.md is direct time / offload time.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use snic_compute::{Invocation, KernelCmd, Kernels, dtype, ids};
use snic_device::{Server, ServerConfig};
use snic_dma::{AddressSpace, HostAddr};
use snic_host::Device;

const TIMEOUT: Duration = Duration::from_secs(60);

/// Seeded f32 values in [-1, 1), as little-endian bytes.
fn matrix(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 23) as f32 - 1.0).to_le_bytes()
        })
        .collect()
}

fn gemm_cmd(m: usize, n: usize, k: usize, a: u64, b: u64, c: u64) -> KernelCmd {
    KernelCmd::new(ids::GEMM, 1)
        .addr(a, (m * k * 4) as u64)
        .addr(b, (k * n * 4) as u64)
        .addr(c, (m * n * 4) as u64)
        .scalar(m as u64)
        .scalar(n as u64)
        .scalar(k as u64)
        .scalar(dtype::F32)
        .scalar(0)
}

fn offload_vs_direct(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("snic-bench-kernel-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let cfg = ServerConfig {
        socket: dir.join("snic.sock"),
        workers: 1,
        compute_workers: 1,
        huge: false,
        ..ServerConfig::default()
    };
    let server = Server::start(cfg).expect("server starts");
    let dev = Device::connect(server.socket_path(), "bench-kernel").expect("connect");

    let mut g = c.benchmark_group("gemm_f32");
    g.warm_up_time(Duration::from_millis(500));
    let shapes = [
        (64, 64, 64),
        (128, 128, 128),
        (256, 256, 256),
        (512, 512, 512),
        (1024, 1024, 1024),
        (2048, 2048, 2048),
        (384, 1000, 200),
    ];
    for (m, n, k) in shapes {
        let ops = 2 * (m * n * k) as u64;
        g.sample_size(if ops >= 1 << 30 { 10 } else { 30 });
        g.measurement_time(Duration::from_secs(if ops >= 1 << 30 { 8 } else { 3 }));
        g.throughput(Throughput::Elements(ops));
        let label = format!("{m}x{n}x{k}");
        let (a, b) = (matrix(m * k, 1), matrix(k * n, 2));

        // Offload: A, B, C in registered host memory of this process.
        let bufs: Vec<_> = [a.len(), b.len(), m * n * 4]
            .iter()
            .map(|&len| dev.alloc_host(len).expect("host buffer"))
            .collect();
        bufs[0].write(0, &a).unwrap();
        bufs[1].write(0, &b).unwrap();
        let cmd = gemm_cmd(m, n, k, bufs[0].iova(), bufs[1].iova(), bufs[2].iova());
        // Polled status, then the GEMM kernel's eventfd (the host thread sleeps meanwhile).
        for (name, irq) in [("offload", false), ("offload_irq", true)] {
            dev.kernel_set_interrupt(ids::GEMM, irq).expect("completion mode");
            g.bench_with_input(BenchmarkId::new(name, &label), &cmd, |bench, cmd| {
                bench.iter(|| {
                    let st = dev.kernel_run(cmd, TIMEOUT).expect("kernel runs");
                    assert!(st.is_ok(), "{st:?}");
                })
            });
        }
        dev.kernel_set_interrupt(ids::GEMM, false).expect("completion mode");
        drop(bufs);

        // Direct: the same kernel over a local address space.
        let mut mem = AddressSpace::new();
        let mut at = 1u64 << 40;
        let mut addrs = Vec::new();
        for (i, len) in [a.len(), b.len(), m * n * 4].into_iter().enumerate() {
            let mut v = vec![0u8; len];
            match i {
                0 => v.copy_from_slice(&a),
                1 => v.copy_from_slice(&b),
                _ => {}
            }
            mem.map_host_owned(HostAddr::new(at).unwrap(), Box::new(v), 1).unwrap();
            addrs.push(at);
            at += (len as u64).next_multiple_of(1 << 20);
        }
        let cmd = gemm_cmd(m, n, k, addrs[0], addrs[1], addrs[2]);
        let mut kernels = Kernels::with_builtins();
        g.bench_with_input(BenchmarkId::new("direct", &label), &cmd, |bench, cmd| {
            bench.iter(|| {
                let st = kernels.run(&mut mem, &Invocation::new(1, cmd));
                assert!(st.is_ok(), "{st:?}");
            })
        });
    }
    g.finish();
    drop(dev);
    let _ = server.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, offload_vs_direct);
criterion_main!(benches);
