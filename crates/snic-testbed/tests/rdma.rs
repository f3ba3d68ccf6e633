//! The RDMA engine in the deterministic testbed: two bare engines ([`RnicDevice`]: an `Rnic`
//! on a port, its IP packets on the wire as they are) on the ends of a seeded virtual link
//! (`vlink`), on the testbed's simulated clock, with loss, duplication, reordering, and each
//! engine tampering with what it sends (corrupted bytes after the BTH, ECN CE marks). Every run
//! is reproducible from its seed.
//!
//! What is checked: memory byte-exact on both sides against a shadow model, every WQE completed
//! exactly once with the right status, receive CQEs exactly once with the right length /
//! immediate / invalidated rkey, atomics applied exactly once; protection violations NAKed with
//! nothing written; RNR waits and RNR / transport retry exhaustion; PSN wrap; SRQ; ECN -> CNP.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use snic_dma::MemKind;
use snic_io::vlink::{LinkConfig, VLink};
use snic_rdma::testing::{EndOpts, connect_qp, drain_cq, dummy_cqe};
use snic_rdma::{
    Access, AttrMask, CqId, Cqe, MrInfo, Mtu, Pd, QpAttr, QpInit, QpState, RdmaStats, RecvWr,
    Remote, Rnic, RnicConfig, SendWr, SgList, Sge, SrqId, WcOpcode, WcStatus, WrOp,
};
use snic_testbed::{NodeId, RnicDevice, RnicDeviceCounters, Step, Tamper, Testbed};
use snic_time::Instant;

// ---------------------------------------------------------------------------------------------
// The harness
// ---------------------------------------------------------------------------------------------

/// Two bare engines on one testbed: NIC 0 on end `a` of the link, NIC 1 on end `b`.
struct Pair {
    tb: Testbed,
    id: [NodeId; 2],
    seed: u64,
    /// Simulated-time bound: the TEST panics past it (a livelock or a lost completion).
    limit: Instant,
}

fn nic_config(v6: bool, host: u8, small: bool) -> RnicConfig {
    // Small memories so the protection tests can snapshot every byte.
    let (host_pool, on_chip, on_board) =
        if small { (2 << 20, 64 << 10, 256 << 10) } else { (24 << 20, 2 << 20, 8 << 20) };
    EndOpts { host_pool, on_chip, on_board, v6, ..EndOpts::default() }.config(host)
}

impl Pair {
    fn new(v6: bool, a_to_b: LinkConfig, b_to_a: LinkConfig, seed: u64, small: bool) -> Pair {
        let (a, b) = VLink::pair("ab", a_to_b, b_to_a, seed);
        let mut tb = Testbed::new();
        let mut id = [NodeId(0); 2];
        for (i, end) in [a, b].into_iter().enumerate() {
            let cfg = nic_config(v6, i as u8 + 1, small);
            id[i] = tb.add_rnic(&format!("nic{i}"), cfg, Box::new(end)).expect("engine");
        }
        Pair { tb, id, seed, limit: Instant::from_secs(60) }
    }

    fn dev(&self, i: usize) -> &RnicDevice {
        self.tb.rnic(self.id[i]).expect("an engine node")
    }

    fn dev_mut(&mut self, i: usize) -> &mut RnicDevice {
        self.tb.rnic_mut(self.id[i]).expect("an engine node")
    }

    /// NIC `i`'s engine.
    fn nic(&self, i: usize) -> &Rnic {
        &self.dev(i).rnic
    }

    /// NIC `i`'s engine, mutably (post verbs at [`Pair::now`]).
    fn nic_mut(&mut self, i: usize) -> &mut Rnic {
        &mut self.dev_mut(i).rnic
    }

    fn now(&self) -> Instant {
        self.tb.now()
    }

    /// Have NIC `i` tamper with what it sends, from an RNG of its own seeded from the pair's.
    fn tamper(&mut self, i: usize, t: Tamper) {
        let seed = self.seed ^ 0x00c0_ffee ^ ((i as u64) << 32);
        self.dev_mut(i).set_tamper(t, seed);
    }

    /// What NIC `i` tampered with.
    fn tampered(&self, i: usize) -> RnicDeviceCounters {
        self.dev(i).device_counters()
    }

    /// Both engines' statistics, to explain a failure.
    fn stats(&self) -> String {
        format!("stats A {:?} B {:?}", self.nic(0).stats(), self.nic(1).stats())
    }

    /// Settle the current instant, then move the clock to the next deadline but not past
    /// `until`. Returns `false` when nothing at all is pending (no frame in flight, no timer
    /// armed). A testbed error (a livelock, a deadline that stays due) fails the test.
    fn step_until(&mut self, until: Instant) -> bool {
        let s = self.tb.step_until(until).unwrap_or_else(|e| {
            panic!("harness: the testbed stopped at {}: {e}; {}", self.now(), self.stats())
        });
        self.guard();
        s != Step::Idle
    }

    /// One step with no horizon.
    fn step(&mut self) -> bool {
        self.step_until(Instant::MAX)
    }

    fn guard(&self) {
        assert!(
            self.now() <= self.limit,
            "harness: simulated time {} passed the test's bound {}: the run did not finish \
             (livelock or lost completion); {}",
            self.now(),
            self.limit,
            self.stats()
        );
    }

    /// Run the simulation for `d` of simulated time.
    fn run_for(&mut self, d: Duration) {
        let end = self.now() + d;
        self.tb.run_until(end).unwrap_or_else(|e| {
            panic!("harness: the testbed stopped at {}: {e}; {}", self.now(), self.stats())
        });
        self.guard();
    }

    /// Step until `cq` of NIC `n` holds a CQE; return it.
    fn wait_cqe(&mut self, n: usize, cq: CqId, what: &str) -> Cqe {
        loop {
            let mut out = [dummy_cqe()];
            if self.nic_mut(n).poll_cq(cq, &mut out).unwrap() == 1 {
                return out[0];
            }
            let live = self.step();
            if self.nic(n).cq_len(cq) > 0 {
                continue;
            }
            assert!(
                live,
                "harness: waiting for {what}: nothing in flight and no timer armed at {}; {}",
                self.now(),
                self.stats()
            );
        }
    }

    /// Run until nothing is pending (or `d` passed).
    fn settle(&mut self, d: Duration) {
        let end = self.now() + d;
        while self.now() < end && self.step_until(end) {}
    }

    /// Every drop counter that must stay zero in a healthy run.
    fn assert_no_bad_drops(&self) {
        for i in 0..2 {
            let s = self.nic(i).stats();
            assert_eq!(
                (s.rx_malformed, s.rx_not_roce, s.rx_bad_headers, s.rx_unknown_qp, s.rx_wrong_peer),
                (0, 0, 0, 0, 0),
                "NIC {i} dropped packets it should not have: {s:?}"
            );
            assert_eq!(s.cq_overflows, 0, "NIC {i}");
            let d = self.tampered(i);
            assert_eq!((d.tx_dropped, d.port_errors), (0, 0), "NIC {i}'s port: {d:?}");
        }
    }
}

/// QP parameters of a connection.
#[derive(Debug, Clone, Copy)]
struct QpOpts {
    mtu: Mtu,
    /// First PSN A sends (B expects) and first PSN B sends (A expects).
    psn: [u32; 2],
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    min_rnr_timer: u8,
    /// QP remote access flags of A's and B's QP.
    access: [Access; 2],
    max_send_wr: u32,
    max_recv_wr: u32,
    placement: MemKind,
}

impl Default for QpOpts {
    fn default() -> Self {
        QpOpts {
            mtu: Mtu::M1024,
            psn: [0x100, 0x2000],
            timeout: 12,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            access: [Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC; 2],
            max_send_wr: 64,
            max_recv_wr: 64,
            placement: MemKind::Host,
        }
    }
}

/// Per-NIC objects of one connection.
#[derive(Debug, Clone, Copy)]
struct Side {
    pd: Pd,
    scq: CqId,
    rcq: CqId,
    srq: Option<SrqId>,
}

/// Create a QP on each NIC and take both to RTS, connected to each other. Returns the QPNs.
fn connect(p: &mut Pair, side: [Side; 2], o: &QpOpts) -> [u32; 2] {
    let mut qpn = [0u32; 2];
    for i in 0..2 {
        qpn[i] = p
            .nic_mut(i)
            .create_qp(QpInit {
                pd: side[i].pd,
                send_cq: side[i].scq,
                recv_cq: side[i].rcq,
                srq: side[i].srq,
                max_send_wr: o.max_send_wr,
                max_recv_wr: o.max_recv_wr,
                placement: o.placement,
                sq_sig_all: false,
            })
            .unwrap();
    }
    for i in 0..2 {
        let attr = QpAttr {
            access: o.access[i],
            path_mtu: o.mtu,
            min_rnr_timer: o.min_rnr_timer,
            max_dest_rd_atomic: 16,
            timeout: o.timeout,
            retry_cnt: o.retry_cnt,
            rnr_retry: o.rnr_retry,
            max_rd_atomic: 16,
            ..QpAttr::default()
        };
        let peer_ip = p.nic(1 - i).config().local_ip;
        connect_qp(p.nic_mut(i), qpn[i], qpn[1 - i], peer_ip, o.psn[i], o.psn[1 - i], attr);
    }
    qpn
}

/// A registered buffer.
#[derive(Debug, Clone, Copy)]
struct Buf {
    addr: u64,
    len: u64,
    mr: MrInfo,
}

impl Buf {
    fn sge(&self, off: u64, len: u32) -> Sge {
        assert!(off + u64::from(len) <= self.len);
        Sge { addr: self.addr + off, len, lkey: self.mr.lkey }
    }
    fn remote(&self, off: u64) -> Remote {
        Remote { addr: self.addr + off, rkey: self.mr.rkey }
    }
}

fn alloc_mr(n: &mut Rnic, pd: Pd, kind: MemKind, len: u64, access: Access) -> Buf {
    let addr = n.alloc_buf(kind, len, 64).unwrap();
    let mr = n.reg_mr(pd, addr, len, access).unwrap();
    Buf { addr, len, mr }
}

fn fill_random(n: &mut Rnic, b: &Buf, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut v = vec![0u8; b.len as usize];
    rng.fill(&mut v[..]);
    n.mem_mut().write(b.addr, &v).unwrap();
    v
}

fn mem_of(n: &Rnic, addr: u64, len: u64) -> Vec<u8> {
    n.mem().slice(addr, len as usize).unwrap().to_vec()
}

/// The bytes an SG list covers, in order.
fn sgl_bytes(n: &Rnic, sgl: &SgList) -> Vec<u8> {
    let mut v = Vec::new();
    for s in sgl.as_slice() {
        v.extend_from_slice(n.mem().slice(s.addr, s.len as usize).unwrap());
    }
    v
}

/// Every mapped byte of a NIC's memory.
fn snapshot(n: &Rnic) -> Vec<(u64, Vec<u8>)> {
    n.mem().regions().map(|r| (r.base, mem_of(n, r.base, r.len))).collect()
}

fn assert_same_memory(before: &[(u64, Vec<u8>)], n: &Rnic, what: &str) {
    let after = snapshot(n);
    assert_eq!(before.len(), after.len(), "{what}: regions changed");
    for ((base, a), (_, b)) in before.iter().zip(&after) {
        if let Some(i) = a.iter().zip(b).position(|(x, y)| x != y) {
            panic!(
                "{what}: responder memory changed at {:#x} ({:#x} -> {:#x})",
                base + i as u64,
                a[i],
                b[i]
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Mixed operations under loss, with a shadow model
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    SendImm,
    SendInv,
    Write,
    WriteImm,
    Read,
    CmpSwap,
    FetchAdd,
}

const KINDS: [Kind; 8] = [
    Kind::Send,
    Kind::SendImm,
    Kind::SendInv,
    Kind::Write,
    Kind::WriteImm,
    Kind::Read,
    Kind::CmpSwap,
    Kind::FetchAdd,
];

/// Destination pieces of a READ: (offset in `ldst`, length, offset in the READ's data).
type Pieces = Vec<(u64, u32, usize)>;

/// What to check when a send WQE completes.
#[derive(Debug)]
struct Pending {
    wr_id: u64,
    kind: Kind,
    len: u32,
    /// Atomic: (local result address, expected original value).
    atomic: Option<(u64, u64)>,
    /// READ: remote offset and destination pieces (offset in `ldst`, length, offset in data).
    read: Option<(u64, Pieces)>,
}

/// What the responder's next receive CQE must say.
#[derive(Debug)]
struct ExpRecv {
    /// Payload (SEND kinds); `None` for WRITE with immediate.
    data: Option<Vec<u8>>,
    len: u32,
    imm: Option<u32>,
    /// (rkey, index in the inv pool).
    inv: Option<(u32, usize)>,
    src_wr: u64,
}

/// One requester stream: NIC `req` sending on its QP `j` to the peer's QP `j`.
struct Stream {
    req: usize,
    mtu: Mtu,
    req_qpn: u32,
    resp_qpn: u32,
    req_scq: CqId,
    resp_rcq: CqId,
    // Requester-local.
    ldst: Buf,
    ldst_shadow: Vec<u8>,
    ares: Buf,
    // On the responder.
    w: Buf,
    w_shadow: Vec<u8>,
    ctr: Buf,
    fa: u64,
    cs: u64,
    adds: u64,
    recv: Buf,
    recv_free: Vec<usize>,
    recv_posted: VecDeque<(u64, usize)>,
    inv: Vec<(MrInfo, bool)>,
    // Expectations, in order.
    pending: VecDeque<Pending>,
    exp_recv: VecDeque<ExpRecv>,
    seq: u64,
    recv_seq: u64,
    fa_results: Vec<u64>,
    fa_expected: Vec<u64>,
    /// Every READ: (wr_id, remote offset, destination pieces as (offset, len, offset in data)),
    /// to explain a mismatch.
    read_log: Vec<(u64, u64, Pieces)>,
    /// PSNs the stream's requests consumed (to show a wrap happened).
    psns: u64,
}

const MIX_QPS: usize = 4;
const SQ_DEPTH: u32 = 64;
const ATOMIC_SLOTS: u64 = SQ_DEPTH as u64;
const RECV_SLOTS: usize = 16;
const INV_POOL: usize = 4;

#[derive(Debug, Clone, Copy)]
struct MixCfg {
    ops: usize,
    seed: u64,
    v6: bool,
    loss: f64,
    duplicate: f64,
    reorder: f64,
    corrupt: f64,
    max_size: u32,
    window: usize,
    psn: [u32; 2],
    /// Simulated-time bound.
    limit_secs: u64,
}

impl MixCfg {
    fn lossy(ops: usize, seed: u64, loss: f64) -> MixCfg {
        let imp = loss > 0.0;
        MixCfg {
            ops,
            seed,
            v6: false,
            loss,
            duplicate: if imp { 0.02 } else { 0.0 },
            reorder: if imp { 0.02 } else { 0.0 },
            corrupt: if imp { (loss / 4.0).max(0.005) } else { 0.0 },
            max_size: MAX_SIZE,
            window: 16,
            psn: [0x1000, 0x40_0000],
            limit_secs: 600,
        }
    }
}

/// Largest message of the mixed tests at 0% and 1% loss.
const MAX_SIZE: u32 = 64 << 10;
/// Largest message at 5% and 20% loss: go-back-N resends whole windows, so 64 KiB messages there
/// took 17-20 s per test in a debug build (CI runs debug); 16 KiB (still up to 16 packets per
/// message) takes about 4 s. The op count stays at 10,000.
const LOSSY_MAX_SIZE: u32 = 16 << 10;

fn pick_len(rng: &mut ChaCha8Rng, max: u32, mtu: u32) -> u32 {
    let r: f64 = rng.r#gen();
    if r < 0.03 {
        0
    } else if r < 0.40 {
        rng.gen_range(1..=256.min(max))
    } else if r < 0.70 {
        rng.gen_range(1..=(3 * mtu + 17).min(max))
    } else {
        rng.gen_range(1..=max)
    }
}

/// Up to `n` pieces of `len` bytes total at random offsets of a region of `region` bytes.
fn pieces(rng: &mut ChaCha8Rng, len: u32, region: u64, n: usize) -> Vec<(u64, u32)> {
    if len == 0 {
        return Vec::new();
    }
    let k = rng.gen_range(1..=n).min(len as usize);
    let mut cuts: Vec<u32> = (0..k - 1).map(|_| rng.gen_range(1..len)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::new();
    let mut prev = 0;
    for c in cuts.into_iter().chain([len]) {
        let l = c - prev;
        out.push((rng.gen_range(0..=region - u64::from(l)), l));
        prev = c;
    }
    out
}

struct Mix {
    p: Pair,
    cfg: MixCfg,
    rng: ChaCha8Rng,
    streams: Vec<Stream>,
    /// Per NIC: static send source and READ source.
    src: [Buf; 2],
    src_data: [Vec<u8>; 2],
    rsrc: [Buf; 2],
    rsrc_data: [Vec<u8>; 2],
    completed: HashSet<u64>,
    recv_done: HashSet<u64>,
    /// (NIC, QPN) -> stream index, for send CQs (requester) and recv CQs (responder).
    by_req: HashMap<(usize, u32), usize>,
    by_resp: HashMap<(usize, u32), usize>,
    posted: usize,
    kinds_done: HashMap<&'static str, usize>,
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Send => "SEND",
        Kind::SendImm => "SEND_IMM",
        Kind::SendInv => "SEND_INV",
        Kind::Write => "WRITE",
        Kind::WriteImm => "WRITE_IMM",
        Kind::Read => "READ",
        Kind::CmpSwap => "CMP_SWAP",
        Kind::FetchAdd => "FETCH_ADD",
    }
}

impl Mix {
    fn new(cfg: MixCfg) -> Mix {
        let link = LinkConfig {
            loss: cfg.loss,
            duplicate: cfg.duplicate,
            reorder: cfg.reorder,
            reorder_delay: Duration::from_micros(20),
            delay: Duration::from_micros(5),
            jitter: Duration::from_micros(1),
            rate_bps: 40_000_000_000,
            queue_limit: 1 << 20,
            ecn_threshold: None,
        };
        let mut p = Pair::new(cfg.v6, link, link, cfg.seed, false);
        p.limit = Instant::from_secs(cfg.limit_secs);
        for i in 0..2 {
            p.tamper(i, Tamper { corrupt: cfg.corrupt, ce: 0.0 });
        }
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed.wrapping_mul(0x9e37_79b9));
        let region = u64::from(cfg.max_size.max(4096)) * 2;
        let pds = [p.nic_mut(0).alloc_pd(), p.nic_mut(1).alloc_pd()];
        let mut src = Vec::new();
        let mut src_data = Vec::new();
        let mut rsrc = Vec::new();
        let mut rsrc_data = Vec::new();
        for (i, &pd) in pds.iter().enumerate() {
            let n = p.nic_mut(i);
            let s = alloc_mr(n, pd, MemKind::Host, region, Access::NONE);
            src_data.push(fill_random(n, &s, &mut rng));
            src.push(s);
            let r = alloc_mr(n, pd, MemKind::OnBoard, region, Access::REMOTE_READ);
            rsrc_data.push(fill_random(n, &r, &mut rng));
            rsrc.push(r);
        }
        // Per NIC and QP index: CQs and QPs.
        let mut qpns = [[0u32; MIX_QPS]; 2];
        let mut cqs = [[(CqId(0), CqId(0)); MIX_QPS]; 2];
        for j in 0..MIX_QPS {
            let mut side = [Side { pd: pds[0], scq: CqId(0), rcq: CqId(0), srq: None }; 2];
            for i in 0..2 {
                side[i].pd = pds[i];
                side[i].scq = p.nic_mut(i).create_cq(1024);
                side[i].rcq = p.nic_mut(i).create_cq(1024);
                cqs[i][j] = (side[i].scq, side[i].rcq);
            }
            let o = QpOpts {
                mtu: if j % 2 == 0 { Mtu::M1024 } else { Mtu::M4096 },
                psn: cfg.psn,
                max_send_wr: SQ_DEPTH,
                max_recv_wr: 32,
                placement: if j == 2 { MemKind::OnChip } else { MemKind::Host },
                ..QpOpts::default()
            };
            let q = connect(&mut p, side, &o);
            qpns[0][j] = q[0];
            qpns[1][j] = q[1];
        }
        let mut streams = Vec::new();
        let mut by_req = HashMap::new();
        let mut by_resp = HashMap::new();
        for r in 0..2 {
            for j in 0..MIX_QPS {
                let s = 1 - r;
                let dev = if j % 2 == 1 { MemKind::OnBoard } else { MemKind::Host };
                let ldst =
                    alloc_mr(p.nic_mut(r), pds[r], MemKind::Host, region, Access::LOCAL_WRITE);
                let ldst_shadow = fill_random(p.nic_mut(r), &ldst, &mut rng);
                let ares = alloc_mr(
                    p.nic_mut(r),
                    pds[r],
                    MemKind::Host,
                    8 * ATOMIC_SLOTS,
                    Access::LOCAL_WRITE,
                );
                fill_random(p.nic_mut(r), &ares, &mut rng);
                let wacc = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
                let w = alloc_mr(p.nic_mut(s), pds[s], dev, region, wacc);
                let w_shadow = fill_random(p.nic_mut(s), &w, &mut rng);
                let cacc = Access::LOCAL_WRITE | Access::REMOTE_ATOMIC;
                let ctr = alloc_mr(p.nic_mut(s), pds[s], dev, 16, cacc);
                let fa: u64 = rng.r#gen();
                let cs: u64 = rng.r#gen();
                p.nic_mut(s).mem_mut().write_u64(ctr.addr, fa).unwrap();
                p.nic_mut(s).mem_mut().write_u64(ctr.addr + 8, cs).unwrap();
                let slot = u64::from(cfg.max_size.max(64));
                let recv = alloc_mr(
                    p.nic_mut(s),
                    pds[s],
                    MemKind::Host,
                    slot * RECV_SLOTS as u64,
                    Access::LOCAL_WRITE,
                );
                let inv = (0..INV_POOL)
                    .map(|_| (alloc_mr(p.nic_mut(s), pds[s], MemKind::Host, 64, wacc).mr, false))
                    .collect();
                let idx = streams.len();
                by_req.insert((r, qpns[r][j]), idx);
                by_resp.insert((s, qpns[s][j]), idx);
                streams.push(Stream {
                    req: r,
                    mtu: if j % 2 == 0 { Mtu::M1024 } else { Mtu::M4096 },
                    req_qpn: qpns[r][j],
                    resp_qpn: qpns[s][j],
                    req_scq: cqs[r][j].0,
                    resp_rcq: cqs[s][j].1,
                    ldst,
                    ldst_shadow,
                    ares,
                    w,
                    w_shadow,
                    ctr,
                    fa,
                    cs,
                    adds: 0,
                    recv,
                    recv_free: (0..RECV_SLOTS).rev().collect(),
                    recv_posted: VecDeque::new(),
                    inv,
                    pending: VecDeque::new(),
                    exp_recv: VecDeque::new(),
                    seq: 0,
                    recv_seq: 0,
                    fa_results: Vec::new(),
                    fa_expected: Vec::new(),
                    read_log: Vec::new(),
                    psns: 0,
                });
            }
        }
        Mix {
            p,
            cfg,
            rng,
            streams,
            src: [src[0], src[1]],
            src_data: [src_data.remove(0), src_data.remove(0)],
            rsrc: [rsrc[0], rsrc[1]],
            rsrc_data: [rsrc_data.remove(0), rsrc_data.remove(0)],
            completed: HashSet::new(),
            recv_done: HashSet::new(),
            by_req,
            by_resp,
            posted: 0,
            kinds_done: HashMap::new(),
        }
    }

    fn recv_slot_len(&self) -> u64 {
        u64::from(self.cfg.max_size.max(64))
    }

    /// The SG list of receive slot `k`: two SGEs, second half first, so scatter across
    /// non-contiguous buffers is exercised.
    fn recv_sgl(&self, st: &Stream, k: usize) -> SgList {
        let slot = self.recv_slot_len();
        let half = slot / 2;
        let base = k as u64 * slot;
        SgList::new(&[
            st.recv.sge(base + half, (slot - half) as u32),
            st.recv.sge(base, half as u32),
        ])
        .unwrap()
    }

    fn top_up_recvs(&mut self) {
        for si in 0..self.streams.len() {
            while self.streams[si].recv_posted.len() < RECV_SLOTS {
                let Some(k) = self.streams[si].recv_free.pop() else { break };
                let sgl = self.recv_sgl(&self.streams[si], k);
                let st = &mut self.streams[si];
                st.recv_seq += 1;
                let wr_id = (1 << 63) | ((si as u64) << 40) | st.recv_seq;
                let resp = 1 - st.req;
                let now = self.p.now();
                self.p.nic_mut(resp).post_recv(st.resp_qpn, &RecvWr { wr_id, sgl }, now).unwrap();
                st.recv_posted.push_back((wr_id, k));
            }
        }
    }

    fn post_ops(&mut self) {
        let order: Vec<usize> = (0..self.streams.len()).collect();
        for si in order {
            while self.posted < self.cfg.ops && self.streams[si].pending.len() < self.cfg.window {
                self.post_one(si);
                self.posted += 1;
            }
        }
    }

    fn post_one(&mut self, si: usize) {
        let rng = &mut self.rng;
        let st = &mut self.streams[si];
        let r = st.req;
        let mut kind = KINDS[rng.gen_range(0..KINDS.len())];
        let free_inv = st.inv.iter().position(|(_, busy)| !busy);
        if kind == Kind::SendInv && free_inv.is_none() {
            kind = Kind::Send;
        }
        let mtu = st.mtu.bytes();
        let max = self.cfg.max_size;
        let len = match kind {
            Kind::CmpSwap | Kind::FetchAdd => 8,
            _ => pick_len(rng, max, mtu),
        };
        st.seq += 1;
        st.psns += u64::from(len.div_ceil(mtu).max(1));
        let wr_id = ((si as u64) << 40) | st.seq;
        let src = self.src[r];
        let gather = |rng: &mut ChaCha8Rng| -> (SgList, Vec<u8>) {
            let ps = pieces(rng, len, src.len, 3);
            let sges: Vec<Sge> = ps.iter().map(|&(o, l)| src.sge(o, l)).collect();
            let mut data = Vec::new();
            for &(o, l) in &ps {
                data.extend_from_slice(&self.src_data[r][o as usize..(o + u64::from(l)) as usize]);
            }
            (SgList::new(&sges).unwrap(), data)
        };
        let mut atomic = None;
        let mut read = None;
        let (op, sgl) = match kind {
            Kind::Send | Kind::SendImm | Kind::SendInv => {
                let (sgl, data) = gather(rng);
                let (op, imm, inv) = match kind {
                    Kind::Send => (WrOp::Send, None, None),
                    Kind::SendImm => {
                        let imm = rng.r#gen();
                        (WrOp::SendImm { imm }, Some(imm), None)
                    }
                    _ => {
                        let k = free_inv.unwrap();
                        st.inv[k].1 = true;
                        let rkey = st.inv[k].0.rkey;
                        (WrOp::SendInv { rkey }, None, Some((rkey, k)))
                    }
                };
                st.exp_recv.push_back(ExpRecv { data: Some(data), len, imm, inv, src_wr: wr_id });
                (op, sgl)
            }
            Kind::Write | Kind::WriteImm => {
                let (sgl, data) = gather(rng);
                let off = rng.gen_range(0..=st.w.len - u64::from(len));
                st.w_shadow[off as usize..off as usize + data.len()].copy_from_slice(&data);
                let remote = st.w.remote(off);
                if kind == Kind::Write {
                    (WrOp::Write { remote }, sgl)
                } else {
                    let imm = rng.r#gen();
                    st.exp_recv.push_back(ExpRecv {
                        data: None,
                        len,
                        imm: Some(imm),
                        inv: None,
                        src_wr: wr_id,
                    });
                    (WrOp::WriteImm { remote, imm }, sgl)
                }
            }
            Kind::Read => {
                let rs = self.rsrc[1 - r];
                let off = rng.gen_range(0..=rs.len - u64::from(len));
                let data = &self.rsrc_data[1 - r][off as usize..(off + u64::from(len)) as usize];
                // Destination: up to two pieces, one in each half of `ldst`, so the pieces of one
                // READ never overlap each other.
                let half = st.ldst.len / 2;
                let mut sges = Vec::new();
                let mut log = Vec::new();
                if len > 0 {
                    let a = if rng.gen_bool(0.5) { len } else { rng.gen_range(0..=len) };
                    let b = len - a;
                    let mut at = 0usize;
                    for (base, l) in [(0u64, a), (half, b)] {
                        if l == 0 {
                            continue;
                        }
                        let o = base + rng.gen_range(0..=half - u64::from(l));
                        sges.push(st.ldst.sge(o, l));
                        log.push((o, l, at));
                        st.ldst_shadow[o as usize..o as usize + l as usize]
                            .copy_from_slice(&data[at..at + l as usize]);
                        at += l as usize;
                    }
                }
                st.read_log.push((wr_id, off, log.clone()));
                read = Some((off, log));
                (WrOp::Read { remote: rs.remote(off) }, SgList::new(&sges).unwrap())
            }
            Kind::CmpSwap | Kind::FetchAdd => {
                let slot = (st.seq % ATOMIC_SLOTS) * 8;
                let sgl = SgList::one(st.ares.sge(slot, 8));
                let remote_fa = st.ctr.remote(0);
                let remote_cs = st.ctr.remote(8);
                if kind == Kind::FetchAdd {
                    let add: u64 =
                        if rng.gen_bool(0.5) { rng.gen_range(1..1000) } else { rng.r#gen() };
                    atomic = Some((st.ares.addr + slot, st.fa));
                    st.fa_expected.push(st.fa);
                    st.fa = st.fa.wrapping_add(add);
                    st.adds = st.adds.wrapping_add(add);
                    (WrOp::FetchAdd { remote: remote_fa, add }, sgl)
                } else {
                    let hit = rng.gen_bool(0.7);
                    let compare = if hit { st.cs } else { st.cs ^ (1 << rng.gen_range(0..64)) };
                    let swap: u64 = rng.r#gen();
                    atomic = Some((st.ares.addr + slot, st.cs));
                    if hit {
                        st.cs = swap;
                    }
                    (WrOp::CmpSwap { remote: remote_cs, compare, swap }, sgl)
                }
            }
        };
        st.pending.push_back(Pending { wr_id, kind, len, atomic, read });
        let wr = SendWr::new(wr_id, op, sgl);
        let now = self.p.now();
        self.p
            .nic_mut(r)
            .post_send(st.req_qpn, &wr, now)
            .unwrap_or_else(|e| panic!("post_send of {kind:?} on stream {si}: {e}"));
    }

    /// Poll every CQ and check each CQE against the expectations.
    fn poll(&mut self) {
        for si in 0..self.streams.len() {
            let (r, scq, rcq) = {
                let st = &self.streams[si];
                (st.req, st.req_scq, st.resp_rcq)
            };
            for c in drain_cq(self.p.nic_mut(r), scq) {
                self.on_send_cqe(r, c);
            }
            for c in drain_cq(self.p.nic_mut(1 - r), rcq) {
                self.on_recv_cqe(1 - r, c);
            }
        }
    }

    fn on_send_cqe(&mut self, nic: usize, c: Cqe) {
        let seed = self.cfg.seed;
        let si = *self.by_req.get(&(nic, c.qpn)).unwrap_or_else(|| {
            panic!("seed {seed}: send CQE for unknown QP {:#x} on NIC {nic}: {c:?}", c.qpn)
        });
        let st = &mut self.streams[si];
        assert!(
            self.completed.insert(c.wr_id),
            "seed {seed}: WQE {:#x} completed twice: {c:?}",
            c.wr_id
        );
        let Some(exp) = st.pending.pop_front() else {
            panic!("seed {seed}: stream {si}: a send CQE with nothing outstanding: {c:?}")
        };
        assert_eq!(
            c.wr_id, exp.wr_id,
            "seed {seed}: stream {si}: completions out of order (expected {:?}): {c:?}",
            exp
        );
        assert_eq!(
            c.status,
            WcStatus::Success,
            "seed {seed}: stream {si}: {:?} of {} bytes (wr {:#x}) failed: {c:?}; stats A {:?} B {:?}",
            exp.kind,
            exp.len,
            exp.wr_id,
            self.p.nic(0).stats(),
            self.p.nic(1).stats()
        );
        let want = match exp.kind {
            Kind::Send | Kind::SendImm | Kind::SendInv => WcOpcode::Send,
            Kind::Write | Kind::WriteImm => WcOpcode::RdmaWrite,
            Kind::Read => WcOpcode::RdmaRead,
            Kind::CmpSwap => WcOpcode::CompSwap,
            Kind::FetchAdd => WcOpcode::FetchAdd,
        };
        assert_eq!(c.opcode, want, "seed {seed}: {exp:?}: {c:?}");
        if exp.kind == Kind::Read {
            assert_eq!(c.byte_len, exp.len, "seed {seed}: READ byte_len: {c:?}");
        }
        if let Some((roff, log)) = &exp.read {
            // The READ's data must all be in place now, except where a later READ (already
            // under way) may overwrite it.
            let later: Vec<(u64, u32)> = st
                .pending
                .iter()
                .filter_map(|p| p.read.as_ref())
                .flat_map(|(_, l)| l.iter().map(|&(o, n, _)| (o, n)))
                .collect();
            let src = &self.rsrc_data[1 - nic][*roff as usize..];
            let mem = self.p.nic(nic).mem();
            for &(o, n, at) in log {
                let got = mem.slice(st.ldst.addr + o, n as usize).unwrap();
                if got == &src[at..at + n as usize] {
                    // All in place (the byte-by-byte walk below would find nothing).
                    continue;
                }
                for (x, &b) in got.iter().enumerate() {
                    let pos = o + x as u64;
                    if later.iter().any(|&(lo, ln)| pos >= lo && pos < lo + u64::from(ln)) {
                        continue;
                    }
                    if b != src[at + x] {
                        // Where did the bytes come from? Look for them in the READ source.
                        let probe = &got[x..(x + 16).min(got.len())];
                        let all = &self.rsrc_data[1 - nic];
                        let found: Vec<usize> = all
                            .windows(probe.len())
                            .enumerate()
                            .filter(|(_, w)| *w == probe)
                            .map(|(k, _)| k)
                            .take(4)
                            .collect();
                        for &f in &found {
                            for (wr, ro, lg) in &st.read_log {
                                let n: u32 = lg.iter().map(|x| x.1).sum();
                                if f >= *ro as usize && f < *ro as usize + n as usize {
                                    eprintln!(
                                        "  source offset {f} is byte {} of READ {wr:#x} (remote \
                                         offset {ro}, {n} bytes)",
                                        f - *ro as usize
                                    );
                                }
                            }
                        }
                        eprintln!(
                            "READ wr {:#x}: remote offset {roff}, pieces {log:?}; bad byte at data \
                             offset {}; the bytes found there are at READ-source offsets \
                             {found:?} (expected {})",
                            exp.wr_id,
                            at + x,
                            *roff as usize + at + x
                        );
                    }
                    assert_eq!(
                        b,
                        src[at + x],
                        "seed {seed}: stream {si}: READ wr {:#x} of {} bytes completed but byte \
                         {} of its data is not in place",
                        exp.wr_id,
                        exp.len,
                        at + x
                    );
                }
            }
        }
        if let Some((addr, orig)) = exp.atomic {
            let got = self.p.nic(nic).mem().read_u64(addr).unwrap();
            assert_eq!(
                got, orig,
                "seed {seed}: stream {si}: {:?} wr {:#x} returned {got:#x}, expected original \
                 {orig:#x}",
                exp.kind, exp.wr_id
            );
            if exp.kind == Kind::FetchAdd {
                st.fa_results.push(got);
            }
        }
        *self.kinds_done.entry(kind_name(exp.kind)).or_default() += 1;
    }

    fn on_recv_cqe(&mut self, nic: usize, c: Cqe) {
        let seed = self.cfg.seed;
        let si = *self.by_resp.get(&(nic, c.qpn)).unwrap_or_else(|| {
            panic!("seed {seed}: recv CQE for unknown QP {:#x} on NIC {nic}: {c:?}", c.qpn)
        });
        assert!(self.recv_done.insert(c.wr_id), "seed {seed}: RECV {:#x} completed twice", c.wr_id);
        let Some(exp) = self.streams[si].exp_recv.pop_front() else {
            panic!("seed {seed}: stream {si}: a receive CQE nobody sent: {c:?}")
        };
        let Some((wr_id, k)) = self.streams[si].recv_posted.pop_front() else {
            panic!("seed {seed}: stream {si}: a receive CQE with no RECV posted: {c:?}")
        };
        let ctx = format!("seed {seed}: stream {si}: receive for sender wr {:#x}", exp.src_wr);
        assert_eq!(c.wr_id, wr_id, "{ctx}: RECVs consumed out of order: {c:?}");
        assert_eq!(c.status, WcStatus::Success, "{ctx}: {c:?}");
        assert_eq!(c.byte_len, exp.len, "{ctx}: byte_len: {c:?}");
        assert_eq!(c.imm, exp.imm, "{ctx}: imm: {c:?}");
        assert_eq!(c.invalidated_rkey, exp.inv.map(|x| x.0), "{ctx}: invalidated rkey: {c:?}");
        assert_eq!(c.src_qp, self.streams[si].req_qpn, "{ctx}: src_qp: {c:?}");
        let want = if exp.data.is_some() { WcOpcode::Recv } else { WcOpcode::RecvRdmaWithImm };
        assert_eq!(c.opcode, want, "{ctx}: {c:?}");
        if let Some(data) = &exp.data {
            let sgl = self.recv_sgl(&self.streams[si], k);
            let got = sgl_bytes(self.p.nic(nic), &sgl);
            if got[..data.len()] != data[..]
                && let Some(i) = got.iter().zip(data).position(|(a, b)| a != b)
            {
                panic!("{ctx}: received payload differs at byte {i} of {}", data.len());
            }
        }
        let st = &mut self.streams[si];
        st.recv_free.push(k);
        if let Some((_, idx)) = exp.inv {
            // The fast-register step: make the invalidated MR usable for the next SEND_INV.
            let lkey = st.inv[idx].0.lkey;
            self.p.nic_mut(nic).revalidate_mr(lkey).unwrap();
            st.inv[idx].1 = false;
        }
    }

    fn done(&self) -> bool {
        self.posted >= self.cfg.ops
            && self.streams.iter().all(|s| s.pending.is_empty() && s.exp_recv.is_empty())
    }

    fn outstanding(&self) -> String {
        self.streams
            .iter()
            .enumerate()
            .map(|(i, s)| {
                format!(
                    "stream {i}: {} send WQEs (oldest {:?}), {} receives",
                    s.pending.len(),
                    s.pending.front(),
                    s.exp_recv.len()
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn run(&mut self) {
        self.top_up_recvs();
        self.post_ops();
        while !self.done() {
            let live = self.p.step();
            self.poll();
            self.top_up_recvs();
            self.post_ops();
            if !live && !self.done() {
                // Give the fresh posts a chance before calling it a stall.
                if !self.p.step() {
                    self.poll();
                    assert!(
                        self.done(),
                        "seed {}: stalled at {}: nothing in flight, no timer armed, but work \
                         outstanding: {}; stats A {:?} B {:?}",
                        self.cfg.seed,
                        self.p.now(),
                        self.outstanding(),
                        self.p.nic(0).stats(),
                        self.p.nic(1).stats()
                    );
                }
            }
        }
        // Let stragglers (duplicates, late ACKs) drain; nothing more may complete.
        self.p.settle(Duration::from_secs(1));
        for si in 0..self.streams.len() {
            let st = &self.streams[si];
            let (r, scq, rcq) = (st.req, st.req_scq, st.resp_rcq);
            let extra = drain_cq(self.p.nic_mut(r), scq);
            assert!(extra.is_empty(), "seed {}: extra send CQEs: {extra:?}", self.cfg.seed);
            let extra = drain_cq(self.p.nic_mut(1 - r), rcq);
            assert!(extra.is_empty(), "seed {}: extra receive CQEs: {extra:?}", self.cfg.seed);
        }
    }

    fn check_memory(&self) {
        let seed = self.cfg.seed;
        for (si, st) in self.streams.iter().enumerate() {
            let r = st.req;
            let w = mem_of(self.p.nic(1 - r), st.w.addr, st.w.len);
            if let Some(i) = w.iter().zip(&st.w_shadow).position(|(a, b)| a != b) {
                panic!("seed {seed}: stream {si}: WRITE target differs from the model at byte {i}");
            }
            let l = mem_of(self.p.nic(r), st.ldst.addr, st.ldst.len);
            if let Some(i) = l.iter().zip(&st.ldst_shadow).position(|(a, b)| a != b) {
                let end =
                    i + l[i..].iter().zip(&st.ldst_shadow[i..]).take_while(|(a, b)| a != b).count();
                let mut why = Vec::new();
                for (wr, roff, log) in st.read_log.iter().rev() {
                    for &(o, len, at) in log {
                        let o = o as usize;
                        if i >= o && i < o + len as usize {
                            let k = (i - o) + at;
                            let src = &self.rsrc_data[1 - r][*roff as usize..];
                            let matches =
                                (i..end.min(o + len as usize)).all(|x| l[x] == src[x - o + at]);
                            why.push(format!(
                                "READ {wr:#x} (piece at {o}, {len} bytes, data offset {k}) \
                                 {} the actual bytes",
                                if matches { "explains" } else { "does not explain" }
                            ));
                        }
                    }
                    if why.len() >= 4 {
                        break;
                    }
                }
                panic!(
                    "seed {seed}: stream {si}: READ destination differs from the model at bytes \
                     {i}..{end}; latest READs covering it first: {why:#?}"
                );
            }
            let m = self.p.nic(1 - r).mem();
            let fa = m.read_u64(st.ctr.addr).unwrap();
            let cs = m.read_u64(st.ctr.addr + 8).unwrap();
            assert_eq!(
                fa, st.fa,
                "seed {seed}: stream {si}: FETCH_ADD counter (adds applied != once)"
            );
            assert_eq!(cs, st.cs, "seed {seed}: stream {si}: CMP_SWAP chain");
            assert_eq!(
                st.fa_results, st.fa_expected,
                "seed {seed}: stream {si}: FETCH_ADD originals"
            );
            // Counter == initial + sum of adds.
            let initial = st.fa_expected.first().copied().unwrap_or(st.fa);
            assert_eq!(fa, initial.wrapping_add(st.adds), "seed {seed}: stream {si}");
        }
        for i in 0..2 {
            let s = mem_of(self.p.nic(i), self.src[i].addr, self.src[i].len);
            assert!(s == self.src_data[i], "seed {seed}: NIC {i}: send source buffer changed");
            let r = mem_of(self.p.nic(i), self.rsrc[i].addr, self.rsrc[i].len);
            assert!(r == self.rsrc_data[i], "seed {seed}: NIC {i}: READ source buffer changed");
        }
    }
}

fn sum_stats(p: &Pair) -> RdmaStats {
    let (a, b) = (p.nic(0).stats(), p.nic(1).stats());
    let mut s = *a;
    macro_rules! add {
        ($($f:ident),*) => { $( s.$f += b.$f; )* };
    }
    add!(
        retransmits,
        timeouts,
        dup_requests,
        seq_naks_sent,
        seq_naks_rcvd,
        rx_bad_icrc,
        dup_reads_replayed,
        dup_atomics_replayed,
        dup_responses,
        rnr_naks_sent,
        cqe_errors,
        atomics_executed,
        out_of_seq_dropped
    );
    s
}

fn mixed(cfg: MixCfg) -> (Mix, RdmaStats) {
    let mut m = Mix::new(cfg);
    m.run();
    m.check_memory();
    m.p.assert_no_bad_drops();
    assert_eq!(m.completed.len(), cfg.ops, "every WQE completed exactly once");
    for k in KINDS {
        assert!(
            m.kinds_done.get(kind_name(k)).copied().unwrap_or(0) > 0 || cfg.ops < 100,
            "no {k:?} ran"
        );
    }
    let s = sum_stats(&m.p);
    assert_eq!(s.cqe_errors, 0, "seed {}: error completions: {s:?}", cfg.seed);
    eprintln!(
        "seed {} loss {}: {} ops, {} simulated, kinds {:?}, corrupted {:?}\nA {:?}\nB {:?}",
        cfg.seed,
        cfg.loss,
        cfg.ops,
        m.p.now(),
        m.kinds_done,
        [m.p.tampered(0).corrupted, m.p.tampered(1).corrupted],
        m.p.nic(0).stats(),
        m.p.nic(1).stats()
    );
    (m, s)
}

#[test]
fn mixed_ops_under_loss_0() {
    let (m, s) = mixed(MixCfg::lossy(10_000, 1, 0.0));
    assert_eq!(
        (s.retransmits, s.timeouts, s.rx_bad_icrc, s.seq_naks_sent, s.dup_requests),
        (0, 0, 0, 0, 0),
        "a perfect link needs no recovery: {s:?}"
    );
    assert!(s.atomics_executed > 0);
    drop(m);
}

#[test]
fn mixed_ops_under_loss_1() {
    let (m, s) = mixed(MixCfg::lossy(10_000, 2, 0.01));
    assert_recovered_bounds(&m, &s);
}

#[test]
fn mixed_ops_under_loss_5() {
    // The IPv6 variant.
    let cfg = MixCfg { v6: true, max_size: LOSSY_MAX_SIZE, ..MixCfg::lossy(10_000, 3, 0.05) };
    let (m, s) = mixed(cfg);
    assert_recovered_bounds(&m, &s);
}

#[test]
fn mixed_ops_under_loss_20() {
    let cfg = MixCfg {
        duplicate: 0.05,
        reorder: 0.05,
        max_size: LOSSY_MAX_SIZE,
        ..MixCfg::lossy(10_000, 4, 0.20)
    };
    let (m, s) = mixed(cfg);
    assert_recovered_bounds(&m, &s);
    // Tail losses are recovered by a timer: the path window's loss probe (which goes back
    // without spending `retry_cnt`) or, with the fixed window, the IBTA timeout.
    assert!(s.timeouts + s.loss_probes > 0, "20% loss and never a timer recovery? {s:?}");
}

/// Recovery happened, and every ICRC drop is one of the packets the engines corrupted (a
/// corrupted packet may also be lost, or duplicated, on the link: hence bounds).
fn assert_recovered_bounds(m: &Mix, s: &RdmaStats) {
    let seed = m.cfg.seed;
    assert!(s.retransmits > 0, "seed {seed}: no retransmission under loss: {s:?}");
    assert!(s.dup_requests > 0, "seed {seed}: no duplicate request seen: {s:?}");
    assert!(s.seq_naks_sent > 0, "seed {seed}: no PSN sequence NAK under loss: {s:?}");
    assert!(s.rx_bad_icrc > 0, "seed {seed}: no corrupted packet was caught: {s:?}");
    assert!(s.dup_reads_replayed > 0, "seed {seed}: no READ was replayed: {s:?}");
    assert!(s.dup_atomics_replayed > 0, "seed {seed}: no atomic was replayed: {s:?}");
    let corrupted = m.p.tampered(0).corrupted + m.p.tampered(1).corrupted;
    assert!(
        s.rx_bad_icrc <= 2 * corrupted,
        "seed {seed}: {} ICRC drops but only {corrupted} packets corrupted",
        s.rx_bad_icrc
    );
}

/// More seeds, for hunting: `SNIC_TESTBED_SEEDS=10..30 SNIC_TESTBED_LOSS=0.2 cargo test -p
/// snic-testbed --test rdma -- --ignored seed_sweep` (optional `SNIC_TESTBED_OPS`,
/// `SNIC_TESTBED_MAX_SIZE`).
#[test]
#[ignore = "long: a seed sweep for hunting bugs"]
fn seed_sweep() {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
    let seeds = env("SNIC_TESTBED_SEEDS", "100..110");
    let (a, b) = seeds.split_once("..").expect("SNIC_TESTBED_SEEDS=FROM..TO");
    let loss: f64 = env("SNIC_TESTBED_LOSS", "0.05").parse().unwrap();
    let ops: usize = env("SNIC_TESTBED_OPS", "10000").parse().unwrap();
    let max: u32 = env("SNIC_TESTBED_MAX_SIZE", "16384").parse().unwrap();
    for seed in a.parse::<u64>().unwrap()..b.parse::<u64>().unwrap() {
        let cfg = MixCfg { max_size: max, v6: seed % 2 == 1, ..MixCfg::lossy(ops, seed, loss) };
        mixed(cfg);
    }
}

#[test]
fn psn_wrap() {
    let cfg = MixCfg { psn: [0xFF_FFF0, 0xFF_FFF0], ..MixCfg::lossy(200, 6, 0.05) };
    let (m, s) = mixed(cfg);
    assert!(s.retransmits > 0, "{s:?}");
    // Every stream went past the wrap (0xFFFFF0 + 16 = 0).
    for (i, st) in m.streams.iter().enumerate() {
        assert!(st.psns > 16, "stream {i} used only {} PSNs", st.psns);
    }
}

/// Given the same seeds, a run on the testbed is the same run: engine statistics, tampering,
/// what the ports moved and the simulated time; another seed gives another run.
#[test]
fn same_seed_same_run() {
    let fingerprint = |cfg: MixCfg| {
        let (m, _) = mixed(cfg);
        let p = &m.p;
        format!(
            "{:?} {:?} {:?} {:?} {:?} {}",
            p.nic(0).stats(),
            p.nic(1).stats(),
            p.tampered(0),
            p.tampered(1),
            p.tb.port_counters(),
            p.now()
        )
    };
    let cfg = MixCfg { max_size: 4096, ..MixCfg::lossy(300, 7, 0.05) };
    let a = fingerprint(cfg);
    assert_eq!(a, fingerprint(cfg), "seed 7 ran differently twice");
    assert_ne!(a, fingerprint(MixCfg { seed: 8, ..cfg }), "seeds 7 and 8 ran the same");
}

// ---------------------------------------------------------------------------------------------
// Simple one-QP setups
// ---------------------------------------------------------------------------------------------

/// Two NICs with one connected QP pair and a few buffers on B.
struct One {
    p: Pair,
    side: [Side; 2],
    qpn: [u32; 2],
    /// A's local buffer (all access), 64 KiB.
    la: Buf,
    /// B's MR with every access, 64 KiB.
    rb: Buf,
}

fn one(o: QpOpts, a_to_b: LinkConfig, seed: u64) -> One {
    one_v(false, o, a_to_b, seed)
}

fn one_v(v6: bool, o: QpOpts, a_to_b: LinkConfig, seed: u64) -> One {
    let mut p = Pair::new(v6, a_to_b, LinkConfig::default(), seed, true);
    let side = [0, 1].map(|i| Side {
        pd: p.nic_mut(i).alloc_pd(),
        scq: p.nic_mut(i).create_cq(64),
        rcq: p.nic_mut(i).create_cq(64),
        srq: None,
    });
    let qpn = connect(&mut p, side, &o);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let la = alloc_mr(p.nic_mut(0), side[0].pd, MemKind::Host, 64 << 10, Access::ALL);
    fill_random(p.nic_mut(0), &la, &mut rng);
    let rb = alloc_mr(p.nic_mut(1), side[1].pd, MemKind::Host, 64 << 10, Access::ALL);
    fill_random(p.nic_mut(1), &rb, &mut rng);
    One { p, side, qpn, la, rb }
}

impl One {
    fn post(&mut self, wrs: &[SendWr]) {
        let now = self.p.now();
        self.p.nic_mut(0).post_send_batch(self.qpn[0], wrs, now).unwrap();
    }
    fn wait_send(&mut self) -> Cqe {
        self.p.wait_cqe(0, self.side[0].scq, "a send completion at A")
    }
    fn write(&self, wr_id: u64, len: u32, remote: Remote) -> SendWr {
        SendWr::new(wr_id, WrOp::Write { remote }, SgList::one(self.la.sge(0, len)))
    }
}

// ---------------------------------------------------------------------------------------------
// Protection
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nak {
    Access,
    InvReq,
}

/// Post `bad` then two good WRITEs; expect `status` for `bad`, WrFlushErr for the others, the
/// matching NAK counted at B, A's QP in ERR, and not one byte of B's memory changed.
fn protection_case(name: &str, o: QpOpts, setup: impl FnOnce(&mut One) -> SendWr, nak: Nak) {
    let mut t = one(o, LinkConfig { delay: Duration::from_micros(3), ..Default::default() }, 7);
    let bad = setup(&mut t);
    let before = snapshot(t.p.nic(1));
    let b0 = *t.p.nic(1).stats();
    let good1 = t.write(2, 100, t.rb.remote(0));
    let good2 = t.write(3, 5000, t.rb.remote(1000));
    t.post(&[bad, good1, good2]);
    let want = match nak {
        Nak::Access => WcStatus::RemAccessErr,
        Nak::InvReq => WcStatus::RemInvReqErr,
    };
    let c = t.wait_send();
    assert_eq!((c.wr_id, c.status), (bad.wr_id, want), "{name}: {c:?}");
    for id in [2, 3] {
        let c = t.wait_send();
        assert_eq!((c.wr_id, c.status), (id, WcStatus::WrFlushErr), "{name}: {c:?}");
    }
    t.p.settle(Duration::from_millis(100));
    assert_eq!(t.p.nic(0).query_qp(t.qpn[0]).unwrap().state, QpState::Err, "{name}");
    let b1 = *t.p.nic(1).stats();
    let (acc, inv) = (
        b1.rem_access_naks_sent - b0.rem_access_naks_sent,
        b1.inv_req_naks_sent - b0.inv_req_naks_sent,
    );
    match nak {
        Nak::Access => assert_eq!((acc, inv), (1, 0), "{name}: NAKs sent by B: {b1:?}"),
        Nak::InvReq => assert_eq!((acc, inv), (0, 1), "{name}: NAKs sent by B: {b1:?}"),
    }
    assert!(t.p.nic(0).stats().err_naks_rcvd >= 1, "{name}");
    assert_same_memory(&before, t.p.nic(1), name);
    assert!(drain_cq(t.p.nic_mut(1), t.side[1].rcq).is_empty(), "{name}: B completed a RECV");
    t.p.assert_no_bad_drops();
}

#[test]
fn protection_wrong_rkey() {
    protection_case(
        "wrong rkey (tag)",
        QpOpts::default(),
        |t| t.write(1, 64, Remote { addr: t.rb.addr, rkey: t.rb.mr.rkey ^ 0x02 }),
        Nak::Access,
    );
    protection_case(
        "wrong rkey (index)",
        QpOpts::default(),
        |t| t.write(1, 64, Remote { addr: t.rb.addr, rkey: t.rb.mr.rkey + 0x1000 }),
        Nak::Access,
    );
    protection_case(
        "lkey used as rkey",
        QpOpts::default(),
        |t| t.write(1, 64, Remote { addr: t.rb.addr, rkey: t.rb.mr.lkey }),
        Nak::Access,
    );
}

#[test]
fn protection_out_of_bounds() {
    protection_case(
        "WRITE past the end",
        QpOpts::default(),
        |t| t.write(1, 100, t.rb.remote(t.rb.len - 10)),
        Nak::Access,
    );
    protection_case(
        "multi-packet WRITE past the end",
        QpOpts::default(),
        |t| t.write(1, 5000, t.rb.remote(t.rb.len - 4000)),
        Nak::Access,
    );
    protection_case(
        "WRITE before the start",
        QpOpts::default(),
        |t| t.write(1, 100, Remote { addr: t.rb.addr - 8, rkey: t.rb.mr.rkey }),
        Nak::Access,
    );
    protection_case(
        "READ past the end",
        QpOpts::default(),
        |t| {
            let sgl = SgList::one(t.la.sge(0, 3000));
            SendWr::new(1, WrOp::Read { remote: t.rb.remote(t.rb.len - 2000) }, sgl)
        },
        Nak::Access,
    );
    protection_case(
        "atomic past the end",
        QpOpts::default(),
        |t| {
            let sgl = SgList::one(t.la.sge(0, 8));
            SendWr::new(1, WrOp::FetchAdd { remote: t.rb.remote(t.rb.len), add: 1 }, sgl)
        },
        Nak::Access,
    );
}

fn mr_without(t: &mut One, access: Access) -> Buf {
    let pd = t.side[1].pd;
    let b = alloc_mr(t.p.nic_mut(1), pd, MemKind::Host, 4096, access);
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    fill_random(t.p.nic_mut(1), &b, &mut rng);
    b
}

#[test]
fn protection_missing_mr_access() {
    let lw = Access::LOCAL_WRITE;
    protection_case(
        "WRITE to an MR without REMOTE_WRITE",
        QpOpts::default(),
        |t| {
            let b = mr_without(t, lw | Access::REMOTE_READ | Access::REMOTE_ATOMIC);
            t.write(1, 64, b.remote(0))
        },
        Nak::Access,
    );
    protection_case(
        "READ of an MR without REMOTE_READ",
        QpOpts::default(),
        |t| {
            let b = mr_without(t, lw | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC);
            SendWr::new(1, WrOp::Read { remote: b.remote(0) }, SgList::one(t.la.sge(0, 64)))
        },
        Nak::Access,
    );
    protection_case(
        "CMP_SWAP on an MR without REMOTE_ATOMIC",
        QpOpts::default(),
        |t| {
            let b = mr_without(t, lw | Access::REMOTE_WRITE | Access::REMOTE_READ);
            let op = WrOp::CmpSwap { remote: b.remote(0), compare: 0, swap: 1 };
            SendWr::new(1, op, SgList::one(t.la.sge(0, 8)))
        },
        Nak::Access,
    );
}

#[test]
fn protection_mr_of_another_pd() {
    protection_case(
        "WRITE to an MR of another PD",
        QpOpts::default(),
        |t| {
            let pd2 = t.p.nic_mut(1).alloc_pd();
            let b = alloc_mr(t.p.nic_mut(1), pd2, MemKind::Host, 4096, Access::ALL);
            t.write(1, 64, b.remote(0))
        },
        Nak::Access,
    );
}

#[test]
fn protection_qp_access_and_alignment() {
    let no_write = QpOpts {
        access: [Access::ALL, Access::REMOTE_READ | Access::REMOTE_ATOMIC],
        ..QpOpts::default()
    };
    protection_case(
        "WRITE to a QP without REMOTE_WRITE",
        no_write,
        |t| t.write(1, 64, t.rb.remote(0)),
        Nak::InvReq,
    );
    let no_read = QpOpts {
        access: [Access::ALL, Access::REMOTE_WRITE | Access::REMOTE_ATOMIC],
        ..QpOpts::default()
    };
    protection_case(
        "READ from a QP without REMOTE_READ",
        no_read,
        |t| SendWr::new(1, WrOp::Read { remote: t.rb.remote(0) }, SgList::one(t.la.sge(0, 64))),
        Nak::InvReq,
    );
    let no_atomic = QpOpts {
        access: [Access::ALL, Access::REMOTE_WRITE | Access::REMOTE_READ],
        ..QpOpts::default()
    };
    protection_case(
        "FETCH_ADD on a QP without REMOTE_ATOMIC",
        no_atomic,
        |t| {
            let op = WrOp::FetchAdd { remote: t.rb.remote(0), add: 1 };
            SendWr::new(1, op, SgList::one(t.la.sge(0, 8)))
        },
        Nak::InvReq,
    );
    protection_case(
        "misaligned atomic",
        QpOpts::default(),
        |t| {
            let op = WrOp::FetchAdd { remote: t.rb.remote(4), add: 1 };
            SendWr::new(1, op, SgList::one(t.la.sge(0, 8)))
        },
        Nak::InvReq,
    );
}

#[test]
fn protection_qp_in_error_state() {
    let o = QpOpts { timeout: 8, retry_cnt: 2, ..QpOpts::default() };
    let mut t = one(o, LinkConfig::default(), 8);
    let now = t.p.now();
    // B: a RECV posted, then B's QP to ERR: the RECV is flushed.
    let rsgl = SgList::one(t.rb.sge(0, 1024));
    t.p.nic_mut(1).post_recv(t.qpn[1], &RecvWr { wr_id: 50, sgl: rsgl }, now).unwrap();
    let err = QpAttr { state: QpState::Err, ..QpAttr::default() };
    t.p.nic_mut(1).modify_qp(t.qpn[1], &err, AttrMask::STATE, now).unwrap();
    let c = t.p.wait_cqe(1, t.side[1].rcq, "B's flushed RECV");
    assert_eq!((c.wr_id, c.status), (50, WcStatus::WrFlushErr), "{c:?}");
    // A RECV posted to a QP in ERR completes flushed at once.
    t.p.nic_mut(1).post_recv(t.qpn[1], &RecvWr { wr_id: 51, sgl: rsgl }, now).unwrap();
    let c = t.p.wait_cqe(1, t.side[1].rcq, "B's RECV posted in ERR");
    assert_eq!((c.wr_id, c.status), (51, WcStatus::WrFlushErr), "{c:?}");
    // A WRITEs and SENDs to B: B drops and counts them; nothing is written; A times out.
    let before = snapshot(t.p.nic(1));
    let w = t.write(1, 3000, t.rb.remote(0));
    let s = SendWr::new(2, WrOp::Send, SgList::one(t.la.sge(0, 10)));
    t.post(&[w, s]);
    let c = t.wait_send();
    assert_eq!((c.wr_id, c.status), (1, WcStatus::RetryExcErr), "{c:?}");
    let c = t.wait_send();
    assert_eq!((c.wr_id, c.status), (2, WcStatus::WrFlushErr), "{c:?}");
    assert!(t.p.nic(1).stats().rx_bad_state > 0, "{:?}", t.p.nic(1).stats());
    assert_same_memory(&before, t.p.nic(1), "QP in ERR");
    // A is in ERR now too: a new post completes flushed without touching the wire.
    assert_eq!(t.p.nic(0).query_qp(t.qpn[0]).unwrap().state, QpState::Err);
    let tx = t.p.nic(0).stats().tx_packets;
    let w = t.write(3, 8, t.rb.remote(0));
    t.post(&[w]);
    let c = t.wait_send();
    assert_eq!((c.wr_id, c.status), (3, WcStatus::WrFlushErr), "{c:?}");
    t.p.settle(Duration::from_millis(100));
    assert_eq!(t.p.nic(0).stats().tx_packets, tx, "a QP in ERR sent packets");
}

// ---------------------------------------------------------------------------------------------
// RNR, retry exhaustion
// ---------------------------------------------------------------------------------------------

#[test]
fn rnr_then_recv_posted() {
    // min_rnr_timer 8 = 160 us.
    let o = QpOpts { min_rnr_timer: 8, rnr_retry: 7, ..QpOpts::default() };
    let link = LinkConfig { delay: Duration::from_micros(2), ..Default::default() };
    let mut t = one(o, link, 9);
    let send = SendWr::new(1, WrOp::SendImm { imm: 0xabcd }, SgList::one(t.la.sge(100, 3000)));
    t.post(&[send]);
    let period = Duration::from_micros(u64::from(snic_rdma::RNR_TIMER_US[8]));
    t.p.run_for(period * 5);
    let mut out = [dummy_cqe()];
    assert_eq!(
        t.p.nic_mut(0).poll_cq(t.side[0].scq, &mut out).unwrap(),
        0,
        "completed with no RECV"
    );
    let naks = t.p.nic(1).stats().rnr_naks_sent;
    assert!(naks >= 2, "a few RNR periods passed but B sent {naks} RNR NAKs");
    assert!(t.p.nic(0).stats().rnr_naks_rcvd >= 2);
    // Now the RECV: the next retry lands.
    let rbuf = t.rb.sge(8192, 4096);
    let now = t.p.now();
    t.p.nic_mut(1).post_recv(t.qpn[1], &RecvWr { wr_id: 77, sgl: SgList::one(rbuf) }, now).unwrap();
    let c = t.wait_send();
    assert_eq!((c.wr_id, c.status), (1, WcStatus::Success), "{c:?}");
    let r = t.p.wait_cqe(1, t.side[1].rcq, "the RECV");
    assert_eq!((r.wr_id, r.status, r.byte_len, r.imm), (77, WcStatus::Success, 3000, Some(0xabcd)));
    let got = mem_of(t.p.nic(1), rbuf.addr, 3000);
    assert!(got == mem_of(t.p.nic(0), t.la.addr + 100, 3000), "payload differs");
    assert!(t.p.nic(1).stats().rnr_naks_sent > 0);
    t.p.assert_no_bad_drops();
}

#[test]
fn rnr_retry_exhausted() {
    let o = QpOpts { min_rnr_timer: 4, rnr_retry: 2, ..QpOpts::default() };
    let mut t = one(o, LinkConfig { delay: Duration::from_micros(2), ..Default::default() }, 10);
    let start = t.p.now();
    let s = SendWr::new(1, WrOp::Send, SgList::one(t.la.sge(0, 10)));
    let s2 = SendWr::new(2, WrOp::Send, SgList::one(t.la.sge(0, 10)));
    t.post(&[s, s2]);
    let c = t.wait_send();
    assert_eq!((c.wr_id, c.status), (1, WcStatus::RnrRetryExcErr), "{c:?}");
    let c = t.wait_send();
    assert_eq!((c.wr_id, c.status), (2, WcStatus::WrFlushErr), "{c:?}");
    // The first try and two retries, each answered with an RNR NAK.
    assert_eq!(t.p.nic(0).stats().rnr_naks_rcvd, 3, "{:?}", t.p.nic(0).stats());
    assert_eq!(t.p.nic(1).stats().rnr_naks_sent, 3, "{:?}", t.p.nic(1).stats());
    let waited = t.p.now() - start;
    let rnr = Duration::from_micros(u64::from(snic_rdma::RNR_TIMER_US[4]));
    assert!(waited >= 2 * rnr, "gave up after {waited:?}, before two RNR waits of {rnr:?}");
    assert_eq!(t.p.nic(0).query_qp(t.qpn[0]).unwrap().state, QpState::Err);
}

#[test]
fn retry_exhausted_on_dead_link() {
    let (timeout, retry_cnt) = (10u8, 3u8);
    let o = QpOpts { timeout, retry_cnt, ..QpOpts::default() };
    let dead = LinkConfig { loss: 1.0, ..Default::default() };
    let mut t = one(o, dead, 11);
    let start = t.p.now();
    let w = t.write(1, 2500, t.rb.remote(0));
    let w2 = t.write(2, 10, t.rb.remote(0));
    t.post(&[w, w2]);
    let c = t.wait_send();
    assert_eq!((c.wr_id, c.status), (1, WcStatus::RetryExcErr), "{c:?}");
    let c = t.wait_send();
    assert_eq!((c.wr_id, c.status), (2, WcStatus::WrFlushErr), "{c:?}");
    let elapsed = t.p.now() - start;
    let period = snic_rdma::ack_timeout(timeout).unwrap();
    // The first send and `retry_cnt` retries each wait one period.
    let n = u32::from(retry_cnt) + 1;
    assert!(
        elapsed >= period * n && elapsed <= period * n + period / 2,
        "gave up after {elapsed:?}; expected about {n} x {period:?}"
    );
    let s = t.p.nic(0).stats();
    assert_eq!(s.timeouts, u64::from(n), "{s:?}");
    assert!(s.retransmits >= u64::from(retry_cnt), "{s:?}");
    assert_eq!(t.p.nic(1).stats().rx_packets, 0);
}

// ---------------------------------------------------------------------------------------------
// SRQ, ECN
// ---------------------------------------------------------------------------------------------

#[test]
fn srq_shared_by_two_qps() {
    let mut p = Pair::new(false, LinkConfig::default(), LinkConfig::default(), 12, true);
    let pd = [p.nic_mut(0).alloc_pd(), p.nic_mut(1).alloc_pd()];
    let srq = p.nic_mut(1).create_srq(pd[1], 64, MemKind::Host).unwrap();
    let rcq_b = p.nic_mut(1).create_cq(256);
    let mut qp = Vec::new();
    let mut scq_a = Vec::new();
    for _ in 0..2 {
        let a = Side {
            pd: pd[0],
            scq: p.nic_mut(0).create_cq(64),
            rcq: p.nic_mut(0).create_cq(64),
            srq: None,
        };
        let b = Side { pd: pd[1], scq: p.nic_mut(1).create_cq(64), rcq: rcq_b, srq: Some(srq) };
        scq_a.push(a.scq);
        qp.push(connect(&mut p, [a, b], &QpOpts::default()));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let src = alloc_mr(p.nic_mut(0), pd[0], MemKind::Host, 20 * 4096, Access::NONE);
    fill_random(p.nic_mut(0), &src, &mut rng);
    let slots = 24u64;
    let rbuf = alloc_mr(p.nic_mut(1), pd[1], MemKind::Host, slots * 4096, Access::LOCAL_WRITE);
    let recvs: Vec<RecvWr> = (0..slots)
        .map(|k| RecvWr { wr_id: 1000 + k, sgl: SgList::one(rbuf.sge(k * 4096, 4096)) })
        .collect();
    p.nic_mut(1).post_srq_recv(srq, &recvs).unwrap();
    // 10 SENDs on each QP; the first 8 bytes of each payload name it.
    let mut sent = HashMap::new();
    for k in 0..20u64 {
        let q = (k % 2) as usize;
        let len = rng.gen_range(8..=4096u32);
        // Disjoint source slots: a SEND's payload is gathered when it leaves, not when posted.
        let off = k * 4096;
        p.nic_mut(0).mem_mut().write_u64(src.addr + off, k).unwrap();
        let data = mem_of(p.nic(0), src.addr + off, u64::from(len));
        sent.insert(k, (q, data));
        let wr = SendWr::new(k, WrOp::Send, SgList::one(src.sge(off, len)));
        let now = p.now();
        p.nic_mut(0).post_send(qp[q][0], &wr, now).unwrap();
    }
    let mut got = 0;
    let mut per_qp = [0; 2];
    while got < 20 {
        let c = p.wait_cqe(1, rcq_b, "receives through the SRQ");
        assert_eq!(c.status, WcStatus::Success, "{c:?}");
        let k = c.wr_id - 1000;
        assert!(k < slots);
        let id = p.nic(1).mem().read_u64(rbuf.addr + k * 4096).unwrap();
        let (q, data) = sent.remove(&id).unwrap_or_else(|| panic!("unknown or repeated SEND {id}"));
        assert_eq!(c.qpn, qp[q][1], "received on the wrong QP");
        assert_eq!(c.src_qp, qp[q][0]);
        assert_eq!(c.byte_len as usize, data.len());
        assert!(mem_of(p.nic(1), rbuf.addr + k * 4096, data.len() as u64) == data);
        per_qp[q] += 1;
        got += 1;
    }
    assert_eq!(per_qp, [10, 10]);
    p.settle(Duration::from_millis(10));
    for (q, cq) in scq_a.iter().enumerate() {
        let c: Vec<_> = drain_cq(p.nic_mut(0), *cq).iter().map(|c| (c.wr_id, c.status)).collect();
        let want: Vec<_> =
            (0..20u64).filter(|k| k % 2 == q as u64).map(|k| (k, WcStatus::Success)).collect();
        assert_eq!(c, want, "send completions of QP {q}");
    }
    p.assert_no_bad_drops();
}

#[test]
fn ecn_ce_marks_bring_cnps_and_rate_decrease() {
    ecn_case(false);
    ecn_case(true);
}

fn ecn_case(v6: bool) {
    let link = LinkConfig {
        delay: Duration::from_micros(5),
        rate_bps: 10_000_000_000,
        queue_limit: 1 << 20,
        ..Default::default()
    };
    let mut t = one_v(v6, QpOpts::default(), link, 13);
    t.p.tamper(0, Tamper { ce: 0.3, corrupt: 0.0 });
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let mut shadow = mem_of(t.p.nic(1), t.rb.addr, t.rb.len);
    let src = mem_of(t.p.nic(0), t.la.addr, t.la.len);
    // 200 WRITEs of up to 16 KiB, spread over a few hundred microseconds.
    for k in 0..200u64 {
        let len = rng.gen_range(1..=16_384u32);
        let off = rng.gen_range(0..=t.rb.len - u64::from(len));
        shadow[off as usize..off as usize + len as usize].copy_from_slice(&src[..len as usize]);
        let w = t.write(k, len, t.rb.remote(off));
        t.post(&[w]);
        let c = t.wait_send();
        assert_eq!((c.wr_id, c.status), (k, WcStatus::Success), "{c:?}");
    }
    let (a, b) = (*t.p.nic(0).stats(), *t.p.nic(1).stats());
    assert!(t.p.tampered(0).ce_marked > 0);
    assert!(b.ecn_ce_rcvd > 0, "{b:?}");
    assert!(b.cnps_sent > 0, "B saw CE but sent no CNP: {b:?}");
    assert!(a.cnps_rcvd > 0, "{a:?}");
    assert!(a.rate_decreases > 0, "A got CNPs but did not slow down: {a:?}");
    assert_eq!(a.rx_bad_icrc + b.rx_bad_icrc, 0, "CE marking must not break the ICRC");
    assert!(mem_of(t.p.nic(1), t.rb.addr, t.rb.len) == shadow, "WRITE data wrong");
    t.p.assert_no_bad_drops();
}
