//! Networked matrix multiplication (RecoNIC's lookaside example, its Fig. 6) in the
//! deterministic testbed: two whole NICs on a lossy virtual link, on simulated time.
//!
//! NIC 0 is peer 1: A and B live in its memory (host memory or on-board device memory) under an
//! MR that allows remote READ. NIC 1 is peer 2: its QP fetches A and B with RDMA READs posted
//! in one batch (one doorbell), each at most [`CHUNK`] bytes, into its on-board device memory;
//! when every READ has completed, the lookaside GEMM kernel (`snic_compute::Kernels`, the same
//! registry `snic serve` runs) computes C = A x B in that device memory, and C is checked
//! against a reference computed here (i8: exact; f32: within the rounding bound of a K-term
//! dot product).
//!
//! The wire loses 2% of the frames both ways (seeded): the READ requests and responses that
//! were lost must have been retransmitted (the requester's `retransmits`), and the product
//! must still be right. Every run is reproducible from its seed.

use std::net::IpAddr;
use std::time::Duration;

use snic_compute::netmm::{Mismatch, matrix, verify};
use snic_compute::{Invocation, KernelCmd, Kernels, dtype, ids, status};
use snic_dma::MemKind;
use snic_io::script::ScriptPort;
use snic_io::vlink::{LinkConfig, VLink, VLinkStats};
use snic_nic::NicConfig;
use snic_nic::neigh::NeighConfig;
use snic_pipeline::PortId;
use snic_rdma::testing::{EndOpts, connect_qp, drain_cq};
use snic_rdma::{Access, Mtu, QpAttr, Remote, RnicConfig, SendWr, SgList, Sge, WcStatus, WrOp};
use snic_testbed::{NicDevice, NodeId, Testbed};
use snic_time::Instant;
use snic_wire::ethernet::EthernetAddress;

/// Most bytes one READ fetches: the matrices travel as many READs of one batch.
const CHUNK: u64 = 16 << 10;
/// The testbed runs at most this long in simulated time.
const LIMIT: Duration = Duration::from_secs(30);

/// A lossy wire: 2% of the frames lost each way, 5 us, 25 Gbit/s, a queue deep enough never to
/// tail-drop (so every loss is the seeded model's).
fn lossy() -> LinkConfig {
    LinkConfig {
        loss: 0.02,
        delay: Duration::from_micros(5),
        rate_bps: 25_000_000_000,
        queue_limit: 1 << 20,
        ..LinkConfig::default()
    }
}

/// Two NICs on one wire; NIC 0 is peer 1 (holds A and B), NIC 1 is peer 2 (computes).
struct Bed {
    tb: Testbed,
    nic: [NodeId; 2],
    wire: VLinkStats,
}

impl Bed {
    fn new(link: LinkConfig, seed: u64) -> Bed {
        let (w0, w1) = VLink::symmetric("wire", link, seed);
        let wire = w0.stats_handle();
        let mut tb = Testbed::new();
        let mut nic = [NodeId(0); 2];
        for (i, w) in [w0, w1].into_iter().enumerate() {
            let (host_port, _) = ScriptPort::new(&format!("host{i}"));
            let opts = EndOpts { host_pool: 8 << 20, on_board: 8 << 20, ..EndOpts::default() };
            let rnic = RnicConfig { max_inflight: 64, ..opts.config(i as u8 + 1) };
            let cfg = NicConfig {
                mac: EthernetAddress([0x02, 0, 0, 0, i as u8 + 1, 1]),
                ips: vec![rnic.local_ip],
                wire: PortId(0),
                neigh: NeighConfig {
                    retry_interval: Duration::from_millis(20),
                    ..NeighConfig::default()
                },
            };
            let ports: Vec<Box<dyn snic_io::Port>> = vec![Box::new(w), Box::new(host_port)];
            nic[i] = tb.add_nic(&format!("nic{i}"), cfg, rnic, &[], ports).expect("NIC");
        }
        Bed { tb, nic, wire }
    }

    fn dev(&self, i: usize) -> &NicDevice {
        self.tb.nic(self.nic[i]).expect("a NIC node")
    }

    fn dev_mut(&mut self, i: usize) -> &mut NicDevice {
        self.tb.nic_mut(self.nic[i]).expect("a NIC node")
    }

    fn ip(&self, i: usize) -> IpAddr {
        self.dev(i).rnic.config().local_ip
    }
}

/// The problem: dimensions, element type, where peer 1 keeps A and B, the seed of the data
/// and of the link.
#[derive(Debug, Clone, Copy)]
struct Case {
    m: usize,
    n: usize,
    k: usize,
    dtype: u64,
    peer1_mem: MemKind,
    seed: u64,
}

impl Case {
    fn elem(&self) -> usize {
        dtype::size(self.dtype).expect("a GEMM dtype")
    }
    fn c_elem(&self) -> usize {
        4
    }
}

/// Run one networked multiplication; returns (READs posted, peer 2's retransmissions, frames
/// the wire lost, simulated fetch time).
fn run(c: Case) -> (usize, u64, u64, Duration) {
    let mut bed = Bed::new(lossy(), c.seed);
    let (a_len, b_len, c_len) =
        ((c.m * c.k * c.elem()) as u64, (c.k * c.n * c.elem()) as u64, (c.m * c.n * 4) as u64);
    let a = matrix(c.seed, 1, c.m * c.k, c.dtype);
    let b = matrix(c.seed, 2, c.k * c.n, c.dtype);

    // Peer 1: A and B in its memory, readable by the peer.
    let (pd1, src) = {
        let d = bed.dev_mut(0);
        let pd = d.rnic.alloc_pd();
        let base = d.rnic.alloc_buf(c.peer1_mem, a_len + b_len, 4096).expect("peer 1 memory");
        d.rnic.mem_mut().write(base, &a).unwrap();
        d.rnic.mem_mut().write(base + a_len, &b).unwrap();
        let mr = d.rnic.reg_mr(pd, base, a_len + b_len, Access::REMOTE_READ).expect("MR");
        (pd, Remote { addr: base, rkey: mr.rkey })
    };
    // Peer 2: A, B and C in its on-board device memory.
    let (pd2, dst, lkey) = {
        let d = bed.dev_mut(1);
        let pd = d.rnic.alloc_pd();
        let base = d.rnic.alloc_buf(MemKind::OnBoard, a_len + b_len + c_len, 4096).unwrap();
        let mr = d.rnic.reg_mr(pd, base, a_len + b_len, Access::LOCAL_WRITE).expect("MR");
        (pd, base, mr.lkey)
    };
    // The QPs.
    let cq: [_; 2] = core::array::from_fn(|i| bed.dev_mut(i).rnic.create_cq(512));
    let pds = [pd1, pd2];
    let qpn: [u32; 2] = core::array::from_fn(|i| {
        let init = EndOpts { max_send_wr: 256, ..EndOpts::default() }.qp_init(pds[i], cq[i], cq[i]);
        bed.dev_mut(i).rnic.create_qp(init).expect("QP")
    });
    for i in 0..2 {
        let attr = QpAttr {
            access: Access::REMOTE_READ,
            path_mtu: Mtu::M1024,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            ..QpAttr::default()
        };
        let peer = bed.ip(1 - i);
        connect_qp(&mut bed.dev_mut(i).rnic, qpn[i], qpn[1 - i], peer, 0, 0, attr);
    }

    // One batch of READs, one doorbell: A then B, in chunks.
    let mut wrs = Vec::new();
    let mut off = 0;
    while off < a_len + b_len {
        let len = CHUNK.min(a_len + b_len - off);
        let sgl = SgList::one(Sge { addr: dst + off, len: len as u32, lkey });
        let remote = Remote { addr: src.addr + off, rkey: src.rkey };
        wrs.push(SendWr::new(wrs.len() as u64, WrOp::Read { remote }, sgl));
        off += len;
    }
    let t0 = bed.tb.now();
    bed.dev_mut(1).rnic.post_send_batch(qpn[1], &wrs, t0).expect("post the READs");
    let mut done = Vec::new();
    while done.len() < wrs.len() {
        let step = bed.tb.step().expect("the testbed runs");
        done.extend(drain_cq(&mut bed.dev_mut(1).rnic, cq[1]));
        assert!(
            bed.tb.now() < Instant::ZERO + LIMIT,
            "{c:?}: {} of {} READs done at {}",
            done.len(),
            wrs.len(),
            bed.tb.now()
        );
        assert!(
            done.len() == wrs.len() || step != snic_testbed::Step::Idle,
            "{c:?}: idle with {} of {} READs done",
            done.len(),
            wrs.len()
        );
    }
    let fetch = bed.tb.now().saturating_duration_since(t0);
    let ids_done: Vec<u64> = done.iter().map(|q| q.wr_id).collect();
    assert_eq!(ids_done, (0..wrs.len() as u64).collect::<Vec<_>>(), "{c:?}: each READ once");
    assert!(done.iter().all(|q| q.status == WcStatus::Success), "{c:?}: {done:?}");

    // The lookaside kernel over peer 2's device memory.
    let cmd = KernelCmd::new(ids::GEMM, 42)
        .addr(dst, a_len)
        .addr(dst + a_len, b_len)
        .addr(dst + a_len + b_len, c_len)
        .scalar(c.m as u64)
        .scalar(c.n as u64)
        .scalar(c.k as u64)
        .scalar(c.dtype)
        .scalar(0);
    let mut kernels = Kernels::with_builtins();
    let st = kernels.run(bed.dev_mut(1).rnic.mem_mut(), &Invocation::new(1, &cmd));
    assert_eq!(
        (st.workload, status::name(st.status), st.result),
        (42, "ok", 2 * (c.m * c.n * c.k) as u64),
        "{c:?}"
    );
    let got = bed.dev(1).rnic.mem().slice(dst + a_len + b_len, c_len as usize).unwrap().to_vec();
    assert_eq!(c.c_elem() * c.m * c.n, got.len());
    if let Some(Mismatch { row, col, got: g, want: w }) =
        verify((c.m, c.n, c.k), c.dtype, &a, &b, &got)
    {
        panic!("{c:?}: C[{row}][{col}] = {g}, want {w}");
    }
    let lost = bed.wire.tx().lost + bed.wire.rx().lost;
    (wrs.len(), bed.dev(1).rnic.stats().retransmits, lost, fetch)
}

#[test]
fn networked_gemm_over_a_lossy_link_verifies() {
    let cases = [
        Case { m: 200, n: 150, k: 300, dtype: dtype::F32, peer1_mem: MemKind::Host, seed: 7 },
        Case { m: 200, n: 150, k: 300, dtype: dtype::I8, peer1_mem: MemKind::OnBoard, seed: 11 },
        Case { m: 128, n: 128, k: 128, dtype: dtype::F32, peer1_mem: MemKind::OnBoard, seed: 3 },
        Case { m: 96, n: 40, k: 250, dtype: dtype::I8, peer1_mem: MemKind::Host, seed: 5 },
    ];
    for c in cases {
        let (reads, retransmits, lost, fetch) = run(c);
        assert!(reads > 1, "{c:?}: the matrices travel as several READs");
        assert!(lost > 0, "{c:?}: the 2% loss model lost nothing");
        assert!(retransmits > 0, "{c:?}: {lost} frames lost and no retransmission");
        eprintln!(
            "compute {}x{}x{} {}: {reads} READs in one batch, {lost} frames lost, \
             {retransmits} retransmitted, fetched in {fetch:?} simulated",
            c.m,
            c.n,
            c.k,
            dtype::name(c.dtype).unwrap_or("?"),
        );
    }
}

#[test]
fn same_seed_same_run() {
    let c = Case { m: 64, n: 48, k: 80, dtype: dtype::F32, peer1_mem: MemKind::Host, seed: 9 };
    assert_eq!(run(c), run(c));
}

#[test]
fn a_wrong_product_is_reported_with_its_place() {
    let c = Case { m: 3, n: 4, k: 5, dtype: dtype::I8, peer1_mem: MemKind::Host, seed: 1 };
    let a = matrix(c.seed, 1, 15, c.dtype);
    let b = matrix(c.seed, 2, 20, c.dtype);
    let mut got = Vec::new();
    for i in 0..3 {
        for j in 0..4 {
            let v: i32 =
                (0..5).map(|l| i32::from(a[i * 5 + l] as i8) * i32::from(b[l * 4 + j] as i8)).sum();
            got.extend_from_slice(&v.to_le_bytes());
        }
    }
    assert_eq!(verify((c.m, c.n, c.k), c.dtype, &a, &b, &got), None);
    got[(4 + 2) * 4] ^= 1;
    let Mismatch { row, col, .. } =
        verify((c.m, c.n, c.k), c.dtype, &a, &b, &got).expect("a mismatch");
    assert_eq!((row, col), (1, 2));
}
