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
use std::net::IpAddr;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use snic_dma::MemKind;
use snic_rdma::{
    Access, CqId, Cqe, MrInfo, Mtu, QpAttr, QpInit, Remote, Rnic, RnicConfig, SendWr, SgList, Sge,
    WcOpcode, WcStatus, WrOp,
};
use snic_time::Instant;

/// Bytes of each side's buffer: the largest message.
const BUF: u64 = 1 << 20;

/// One side: the NIC, its QP, send CQ, buffer and MR.
struct Side {
    rnic: Rnic,
    qpn: u32,
    cq: CqId,
    mr: MrInfo,
}

/// Two connected NICs and a virtual clock.
struct Pair {
    a: Side,
    b: Side,
    now: Instant,
    pkt: Vec<u8>,
    cqes: Vec<Cqe>,
}

fn side(ip: IpAddr) -> Side {
    let cfg = RnicConfig {
        local_ip: ip,
        host_pool: 8 << 20,
        on_chip: 0,
        on_board: 0,
        ..RnicConfig::default()
    };
    let mut rnic = Rnic::new(cfg).expect("rnic");
    let pd = rnic.alloc_pd();
    let cq = rnic.create_cq(4096);
    let rcq = rnic.create_cq(16);
    let buf = rnic.alloc_buf(MemKind::Host, BUF, 4096).expect("buffer");
    let mr = rnic.reg_mr(pd, buf, BUF, Access::ALL).expect("mr");
    let qpn = rnic
        .create_qp(QpInit {
            pd,
            send_cq: cq,
            recv_cq: rcq,
            srq: None,
            max_send_wr: 256,
            max_recv_wr: 16,
            placement: MemKind::Host,
            sq_sig_all: false,
        })
        .expect("qp");
    Side { rnic, qpn, cq, mr }
}

fn bring_up(s: &mut Side, peer: IpAddr, peer_qpn: u32, now: Instant) {
    let attr = QpAttr {
        access: Access::ALL,
        path_mtu: Mtu::M4096,
        dest_qpn: peer_qpn,
        rq_psn: 0,
        sq_psn: 0,
        remote: Some(peer),
        ..QpAttr::default()
    };
    s.rnic.connect_rc(s.qpn, &attr, now).expect("connect");
}

impl Pair {
    fn new() -> Pair {
        let (ipa, ipb): (IpAddr, IpAddr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let now = Instant::from_millis(1);
        let mut a = side(ipa);
        let mut b = side(ipb);
        let (qa, qb) = (a.qpn, b.qpn);
        bring_up(&mut a, ipb, qb, now);
        bring_up(&mut b, ipa, qa, now);
        let blank = Cqe {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::RdmaWrite,
            byte_len: 0,
            qpn: 0,
            src_qp: 0,
            imm: None,
            invalidated_rkey: None,
        };
        Pair { a, b, now, pkt: vec![0u8; snic_rdma::pkt::MAX_PACKET_LEN], cqes: vec![blank; 256] }
    }

    fn write(&self, id: u64, size: u32) -> SendWr {
        let sgl = SgList::one(Sge { addr: self.a.mr.addr, len: size, lkey: self.a.mr.lkey });
        let remote = Remote { addr: self.b.mr.addr, rkey: self.b.mr.rkey };
        SendWr::new(id, WrOp::Write { remote }, sgl)
    }

    /// Move packets both ways and run timers until `want` send CQEs arrived at A.
    fn run(&mut self, want: usize) {
        let mut got = 0;
        let mut idle = 0u32;
        while got < want {
            let mut moved = false;
            while let Some(n) = self.a.rnic.poll_transmit(self.now, &mut self.pkt) {
                self.b.rnic.handle_packet(self.now, &self.pkt[..n]);
                moved = true;
            }
            while let Some(n) = self.b.rnic.poll_transmit(self.now, &mut self.pkt) {
                self.a.rnic.handle_packet(self.now, &self.pkt[..n]);
                moved = true;
            }
            let n = self.a.rnic.poll_cq(self.a.cq, &mut self.cqes).expect("poll");
            for c in &self.cqes[..n] {
                assert_eq!(c.status, WcStatus::Success, "{c:?}");
            }
            got += n;
            self.now += Duration::from_nanos(100);
            if !moved && n == 0 {
                // Nothing in flight: an ACK coalescing or pacing timer holds the next step.
                idle += 1;
                assert!(
                    idle < 1_000_000,
                    "stuck: {:?} / {:?}",
                    self.a.rnic.stats(),
                    self.b.rnic.stats()
                );
                let next = [self.a.rnic.poll_timeout(), self.b.rnic.poll_timeout()]
                    .into_iter()
                    .flatten()
                    .min();
                if let Some(t) = next.filter(|t| *t > self.now) {
                    self.now = t;
                }
                self.a.rnic.handle_timeout(self.now);
                self.b.rnic.handle_timeout(self.now);
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
            let mut p = Pair::new();
            let wrs: Vec<SendWr> = (0..k as u64).map(|i| p.write(i, size)).collect();
            g.bench_with_input(BenchmarkId::from_parameter(size), &wrs, |bch, wrs| {
                bch.iter(|| {
                    let now = p.now;
                    p.a.rnic.post_send_batch(p.a.qpn, black_box(wrs), now).expect("post");
                    p.run(wrs.len());
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
    let mut p = Pair::new();
    let wrs: Vec<SendWr> = (0..N as u64).map(|i| p.write(i, 4096)).collect();
    g.bench_function("single", |bch| {
        bch.iter(|| {
            for wr in &wrs {
                let now = p.now;
                p.a.rnic.post_send(p.a.qpn, black_box(wr), now).expect("post");
            }
            p.run(N);
        })
    });
    g.bench_function("single_wait", |bch| {
        bch.iter(|| {
            for wr in &wrs {
                let now = p.now;
                p.a.rnic.post_send(p.a.qpn, black_box(wr), now).expect("post");
                p.run(1);
            }
        })
    });
    g.bench_function("batch", |bch| {
        bch.iter(|| {
            let now = p.now;
            p.a.rnic.post_send_batch(p.a.qpn, black_box(&wrs), now).expect("post");
            p.run(N);
        })
    });
    g.finish();
}

criterion_group!(benches, writes, batch_vs_single);
criterion_main!(benches);
