//! Chained offloads in the deterministic testbed: peer 2's NIC fetches A and B from peer 1 by
//! RDMA READ into its device memory, runs the GEMM kernel on them and writes C back to peer 1
//! by RDMA WRITE, all from one [`ChainSpec`], over a lossy link, on simulated time.
//!
//! Checked: C at peer 1 equals the reference product; the chain's own completions never reach
//! the host's view of the CQ; the one [`ChainDone`] says what happened; failures (a READ the
//! peer refuses, a kernel command that does not fit) end the chain with the right outcome and
//! write nothing at the peer.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use snic_compute::{KernelCmd, Kernels, dtype, ids, status};
use snic_dma::MemKind;
use snic_io::vlink::{LinkConfig, VLink};
use snic_nic::offload::{ChainDone, ChainEnd, ChainOutcome, ChainRead, ChainSpec, Chains};
use snic_rdma::testing::{connect_qp, drain_cq};
use snic_rdma::{Access, CqId, MrInfo, QpAttr, QpInit, Remote, Rnic, RnicConfig, Sge};
use snic_testbed::{NodeId, Testbed};
use snic_time::{Clock, Instant};

/// The testbed's clock as seen at one instant (the kernel takes no simulated time).
struct At(Instant);

impl Clock for At {
    fn now(&self) -> Instant {
        self.0
    }
}

/// One peer: its engine's PD, CQ, QP, and one registered buffer (host memory at peer 1, where
/// A, B and C live; device memory at peer 2, where they are fetched and computed).
struct Peer {
    id: NodeId,
    cq: CqId,
    qpn: u32,
    buf: u64,
    mr: MrInfo,
}

struct Bed {
    tb: Testbed,
    p: [Peer; 2],
    chains: Chains,
    kernels: Kernels,
}

const BUF: u64 = 4 << 20;

impl Bed {
    fn new(loss: f64, seed: u64) -> Bed {
        let link = LinkConfig { loss, delay: Duration::from_micros(5), ..LinkConfig::default() };
        let (a, b) = VLink::pair("ab", link, link, seed);
        let mut tb = Testbed::new();
        let mut ids = Vec::new();
        for (i, end) in [a, b].into_iter().enumerate() {
            let cfg = RnicConfig {
                local_ip: snic_rdma::testing::ip(false, i as u8 + 1),
                host_pool: 8 << 20,
                on_board: 8 << 20,
                ..RnicConfig::default()
            };
            ids.push(tb.add_rnic(&format!("peer{}", i + 1), cfg, Box::new(end)).expect("engine"));
        }
        let mut peers = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            let nic = rnic(&mut tb, id);
            let kind = if i == 0 { MemKind::Host } else { MemKind::OnBoard };
            let pd = nic.alloc_pd();
            let buf = nic.alloc_buf(kind, BUF, 4096).expect("buffer");
            let mr = nic.reg_mr(pd, buf, BUF, Access::ALL).expect("MR");
            let cq = nic.create_cq(256);
            let init = QpInit {
                pd,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                max_send_wr: 128,
                max_recv_wr: 16,
                placement: MemKind::Host,
                sq_sig_all: false,
            };
            let qpn = nic.create_qp(init).expect("QP");
            peers.push(Peer { id, cq, qpn, buf, mr });
        }
        for i in 0..2 {
            let attr = QpAttr { access: Access::ALL, timeout: 10, ..QpAttr::default() };
            let peer_ip = snic_rdma::testing::ip(false, (1 - i) as u8 + 1);
            let (qpn, peer_qpn) = (peers[i].qpn, peers[1 - i].qpn);
            connect_qp(rnic(&mut tb, peers[i].id), qpn, peer_qpn, peer_ip, 100, 100, attr);
        }
        let p: [Peer; 2] = peers.try_into().ok().expect("two peers");
        Bed { tb, p, chains: Chains::new(), kernels: Kernels::with_builtins() }
    }

    fn nic(&mut self, i: usize) -> &mut Rnic {
        rnic(&mut self.tb, self.p[i].id)
    }

    /// Peer 2 starts `spec`; step until it ends; the host's view of peer 2's CQ must stay
    /// empty throughout.
    fn run(&mut self, spec: ChainSpec) -> ChainDone {
        let now = self.tb.now();
        let id = self.p[1].id;
        let nic = rnic(&mut self.tb, id);
        self.chains.start(nic, 0, spec, now).expect("the chain starts");
        let limit = Instant::from_secs(30);
        loop {
            let now = self.tb.now();
            let cq = self.p[1].cq;
            let nic = rnic(&mut self.tb, id);
            for cqe in drain_cq(nic, cq) {
                assert!(self.chains.on_cqe(&cqe, now), "a chain completion leaked: {cqe:?}");
            }
            let mut done = self.chains.progress(nic, &mut self.kernels, &At(now));
            if let Some(d) = done.pop() {
                assert!(done.is_empty() && self.chains.is_empty());
                return d;
            }
            self.tb.step().expect("the testbed steps");
            assert!(self.tb.now() < limit, "the chain did not end by {limit}");
        }
    }

    fn write(&mut self, i: usize, off: u64, data: &[u8]) {
        let at = self.p[i].buf + off;
        self.nic(i).mem_mut().write(at, data).expect("in the buffer");
    }

    fn read(&mut self, i: usize, off: u64, len: usize) -> Vec<u8> {
        let at = self.p[i].buf + off;
        self.nic(i).mem().slice(at, len).expect("in the buffer").to_vec()
    }

    fn remote(&self, i: usize, off: u64) -> Remote {
        Remote { addr: self.p[i].buf + off, rkey: self.p[i].mr.rkey }
    }

    fn local(&self, i: usize, off: u64, len: usize) -> Sge {
        Sge { addr: self.p[i].buf + off, len: len as u32, lkey: self.p[i].mr.lkey }
    }
}

fn rnic(tb: &mut Testbed, id: NodeId) -> &mut Rnic {
    &mut tb.rnic_mut(id).expect("an engine node").rnic
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Row-major reference product.
fn reference(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    c
}

/// The chain of one GEMM (A at 0, B after it, C after B, the same offsets on both peers).
fn gemm_chain(bed: &Bed, m: usize, n: usize, k: usize, wr_id: u64) -> ChainSpec {
    let (la, lb, lc) = (m * k * 4, k * n * 4, m * n * 4);
    let (oa, ob, oc) = (0u64, la as u64, (la + lb) as u64);
    let dev = |off: u64| bed.p[1].buf + off;
    ChainSpec {
        qpn: bed.p[1].qpn,
        wr_id,
        reads: vec![
            ChainRead { remote: bed.remote(0, oa), local: bed.local(1, oa, la) },
            ChainRead { remote: bed.remote(0, ob), local: bed.local(1, ob, lb) },
        ],
        kernel: KernelCmd::new(ids::GEMM, 7)
            .addr(dev(oa), la as u64)
            .addr(dev(ob), lb as u64)
            .addr(dev(oc), lc as u64)
            .scalar(m as u64)
            .scalar(n as u64)
            .scalar(k as u64)
            .scalar(dtype::F32)
            .scalar(0),
        end: ChainEnd::WriteBack { local: bed.local(1, oc, lc), remote: bed.remote(0, oc) },
    }
}

#[test]
fn chained_gemm_over_a_lossy_link_writes_c_back_to_the_peer() {
    let (m, n, k) = (67, 101, 73);
    let mut bed = Bed::new(0.05, 0x5eed);
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let a: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let b: Vec<f32> = (0..k * n).map(|_| rng.gen_range(-1.0..1.0)).collect();
    bed.write(0, 0, &f32s(&a));
    bed.write(0, (m * k * 4) as u64, &f32s(&b));
    let spec = gemm_chain(&bed, m, n, k, 0xC0FFEE);
    let done = bed.run(spec);
    assert_eq!(done.outcome, ChainOutcome::Done, "{done:?}");
    assert_eq!((done.wr_id, done.result), (0xC0FFEE, (2 * m * n * k) as u64));
    assert_eq!((done.fetched, done.written), ((m * k * 4 + k * n * 4) as u64, (m * n * 4) as u64));
    let c_at = ((m * k + k * n) * 4) as u64;
    let got: Vec<f32> = bed
        .read(0, c_at, m * n * 4)
        .chunks_exact(4)
        .map(|w| f32::from_le_bytes(w.try_into().unwrap()))
        .collect();
    let want = reference(&a, &b, m, n, k);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= 1e-4 * (k as f32), "C[{}][{}] = {g}, want {w}", i / n, i % n);
    }
    // The loss was real: the requester had to go again.
    let retries = bed.nic(1).stats().retransmits + bed.nic(0).stats().retransmits;
    assert!(retries > 0, "5% loss, yet nothing was retransmitted");
    assert!(done.fetch_ns > 0 && done.write_ns > 0, "{done:?}");
}

#[test]
fn a_failed_read_or_kernel_ends_the_chain_and_writes_nothing() {
    let mut bed = Bed::new(0.0, 1);
    let (m, n, k) = (8, 8, 8);
    let c_at = ((m * k + k * n) * 4) as u64;
    bed.write(0, c_at, &[0xAB; 256]);

    // The kernel command does not fit its buffers (K too big for A's length).
    let mut spec = gemm_chain(&bed, m, n, k, 1);
    spec.kernel.scalars[2] = 4096;
    let done = bed.run(spec);
    assert_eq!(done.outcome, ChainOutcome::KernelFailed { code: status::BAD_LENGTH });
    assert_eq!((done.written, done.result), (0, 0));
    assert_eq!(bed.read(0, c_at, 256), vec![0xAB; 256]);

    // The peer refuses the READ (a wrong rkey): the QP errs, the chain says so.
    let mut spec = gemm_chain(&bed, m, n, k, 2);
    spec.reads[1].remote.rkey ^= 0x55;
    let done = bed.run(spec);
    assert!(matches!(done.outcome, ChainOutcome::ReadFailed { .. }), "{done:?}");
    assert_eq!(bed.read(0, c_at, 256), vec![0xAB; 256]);
}

#[test]
fn chains_refuse_bad_plans_without_posting() {
    let mut bed = Bed::new(0.0, 2);
    let now = bed.tb.now();
    let mut spec = gemm_chain(&bed, 4, 4, 4, 3);
    spec.reads.clear();
    let id = bed.p[1].id;
    let err = bed.chains.start(rnic(&mut bed.tb, id), 0, spec, now);
    assert_eq!(err, Err(snic_nic::offload::ChainError::BadReads));
    let mut spec = gemm_chain(&bed, 4, 4, 4, 3);
    spec.qpn = 0xFFFF;
    assert!(bed.chains.start(rnic(&mut bed.tb, id), 0, spec, now).is_err());
    assert!(bed.chains.is_empty());
    let cq = bed.p[1].cq;
    assert!(drain_cq(bed.nic(1), cq).is_empty());
}
