//! In-process RDMA WRITE throughput: two `Rnic`s in one thread, packets moved straight from one's
//! `poll_transmit` buffer into the other's `handle_packet` (no sockets, no copies beyond the
//! engine's own), path MTU 4096, a virtual clock. This is the engine's own cost per byte and per
//! message, the ceiling the UDP transport can approach.
//!
//! - `write_bytes/SIZE` and `write_msgs/SIZE`: a window of WRITEs of SIZE bytes (64 B, 4 KiB,
//!   64 KiB, 1 MiB) posted as one batch and run to completion (every CQE polled); reported as
//!   bytes/s and as messages/s.
//! - `post_4k/*`: 16 WRITEs of 4 KiB: `batch` posts them with one doorbell, `single` with one
//!   doorbell each (then runs them all), `single_wait` posts one and waits for its completion
//!   before the next (no pipelining: what a caller without batching that waits gets).
//!
//! `cargo bench -p snic-rdma --bench inproc` (add `-- --quick` for a short check).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use snic_rdma::testing::{EndOpts, Pair, dummy_cqe};
use snic_rdma::{Access, Cqe, Mtu, QpAttr, SendWr, WcStatus, WrOp};
use snic_time::Instant;

/// Bytes of each side's buffer: the largest message.
const BUF: u64 = 1 << 20;

/// Two connected NICs (the kit's [`Pair`], with its virtual clock) and room for A's CQEs.
struct Bench {
    p: Pair,
    cqes: Vec<Cqe>,
}

impl Bench {
    fn new() -> Bench {
        let opts = EndOpts {
            host_pool: 8 << 20,
            buf_len: BUF,
            cq_depth: 4096,
            recv_cq_depth: Some(16),
            max_send_wr: 256,
            ..EndOpts::default()
        };
        let attr = QpAttr { access: Access::ALL, path_mtu: Mtu::M4096, ..QpAttr::default() };
        let mut p = Pair::new(&opts, attr, [0, 0]);
        p.now = Instant::from_millis(1);
        Bench { p, cqes: vec![dummy_cqe(); 256] }
    }

    fn write(&self, id: u64, size: u32) -> SendWr {
        SendWr::new(id, WrOp::Write { remote: self.p.b.remote(0) }, self.p.a.sge(0, size))
    }

    /// Move packets both ways and run timers until `want` send CQEs arrived at A.
    fn run(&mut self, want: usize) {
        let mut got = 0;
        let mut idle = 0u32;
        let p = &mut self.p;
        while got < want {
            let moved = p.step() > 0;
            let n = p.a.nic.poll_cq(p.a.cq, &mut self.cqes).expect("poll");
            for c in &self.cqes[..n] {
                assert_eq!(c.status, WcStatus::Success, "{c:?}");
            }
            got += n;
            p.now += Duration::from_nanos(100);
            if !moved && n == 0 {
                // Nothing in flight: an ACK coalescing or pacing timer holds the next step.
                idle += 1;
                assert!(idle < 1_000_000, "stuck: {:?} / {:?}", p.a.nic.stats(), p.b.nic.stats());
                p.advance_to_timer();
            }
        }
    }
}

/// Messages per iteration for a message size: enough to keep the pipe full, few enough for a
/// short iteration.
fn window(size: u32) -> usize {
    match size {
        0..=4096 => 64,
        4097..=65_536 => 16,
        _ => 2,
    }
}

fn writes(c: &mut Criterion) {
    for (group, bytes) in [("write_bytes", true), ("write_msgs", false)] {
        let mut g = c.benchmark_group(group);
        for size in [64u32, 4096, 65_536, 1 << 20] {
            let k = window(size);
            g.throughput(if bytes {
                Throughput::Bytes(size as u64 * k as u64)
            } else {
                Throughput::Elements(k as u64)
            });
            let mut b = Bench::new();
            let wrs: Vec<SendWr> = (0..k as u64).map(|i| b.write(i, size)).collect();
            g.bench_with_input(BenchmarkId::from_parameter(size), &wrs, |bch, wrs| {
                bch.iter(|| {
                    let now = b.p.now;
                    b.p.a.nic.post_send_batch(b.p.a.qpn, black_box(wrs), now).expect("post");
                    b.run(wrs.len());
                })
            });
        }
        g.finish();
    }
}

fn batch_vs_single(c: &mut Criterion) {
    const N: usize = 16;
    let mut g = c.benchmark_group("post_4k");
    g.throughput(Throughput::Elements(N as u64));
    let mut b = Bench::new();
    let wrs: Vec<SendWr> = (0..N as u64).map(|i| b.write(i, 4096)).collect();
    g.bench_function("single", |bch| {
        bch.iter(|| {
            for wr in &wrs {
                let now = b.p.now;
                b.p.a.nic.post_send(b.p.a.qpn, black_box(wr), now).expect("post");
            }
            b.run(N);
        })
    });
    g.bench_function("single_wait", |bch| {
        bch.iter(|| {
            for wr in &wrs {
                let now = b.p.now;
                b.p.a.nic.post_send(b.p.a.qpn, black_box(wr), now).expect("post");
                b.run(1);
            }
        })
    });
    g.bench_function("batch", |bch| {
        bch.iter(|| {
            let now = b.p.now;
            b.p.a.nic.post_send_batch(b.p.a.qpn, black_box(&wrs), now).expect("post");
            b.run(N);
        })
    });
    g.finish();
}

criterion_group!(benches, writes, batch_vs_single);
criterion_main!(benches);
