//! The RC engine between two NICs (public API only): a mixed run over a lossy link, and
//! targeted QP edge cases.

use std::net::IpAddr;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use snic_dma::MemKind;
use snic_rdma::pkt::{self, Path};
use snic_rdma::*;
use snic_time::Instant;
use snic_wire::roce::ext::RethRepr;
use snic_wire::roce::{RoceRepr, bth, opcode};

const BUF: u64 = 1 << 20;

struct Side {
    nic: Rnic,
    qpn: u32,
    cq: CqId,
    buf: u64,
    mr: MrInfo,
    ip: IpAddr,
}

fn side(host: u8) -> Side {
    let ip: IpAddr = format!("10.0.0.{host}").parse().unwrap();
    let cfg = RnicConfig {
        local_ip: ip,
        host_pool: 4 << 20,
        on_chip: 0,
        on_board: 0,
        ..RnicConfig::default()
    };
    let mut nic = Rnic::new(cfg).unwrap();
    let pd = nic.alloc_pd();
    let buf = nic.alloc_buf(MemKind::Host, BUF, 64).unwrap();
    let mr = nic.reg_mr(pd, buf, BUF, Access::ALL).unwrap();
    let cq = nic.create_cq(4096);
    let qpn = nic
        .create_qp(QpInit {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            max_send_wr: 64,
            max_recv_wr: 1024,
            placement: MemKind::Host,
            sq_sig_all: false,
        })
        .unwrap();
    Side { nic, qpn, cq, buf, mr, ip }
}

fn connect(e: &mut Side, peer: (u32, IpAddr), sq_psn: u32, rq_psn: u32, mut attr: QpAttr) {
    attr.access = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    attr.dest_qpn = peer.0;
    attr.remote = Some(peer.1);
    attr.sq_psn = sq_psn;
    attr.rq_psn = rq_psn;
    e.nic.connect_rc(e.qpn, &attr, Instant::ZERO).unwrap();
}

fn pair(sq_psn: u32, attr: QpAttr) -> (Side, Side) {
    let (mut a, mut b) = (side(1), side(2));
    let (pa, pb) = ((a.qpn, a.ip), (b.qpn, b.ip));
    connect(&mut a, pb, sq_psn, 0x100, attr);
    connect(&mut b, pa, 0x100, sq_psn, attr);
    (a, b)
}

fn sge(s: &Side, off: u64, len: u32) -> SgList {
    SgList::one(Sge { addr: s.buf + off, len, lkey: s.mr.lkey })
}

fn remote(s: &Side, off: u64) -> Remote {
    Remote { addr: s.buf + off, rkey: s.mr.rkey }
}

fn poll_all(s: &mut Side) -> Vec<Cqe> {
    let mut out = Vec::new();
    let mut v = [Cqe {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        byte_len: 0,
        qpn: 0,
        src_qp: 0,
        imm: None,
        invalidated_rkey: None,
    }; 64];
    loop {
        let n = s.nic.poll_cq(s.cq, &mut v).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&v[..n]);
    }
}

/// A lossy, duplicating, reordering, corrupting link between two NICs.
struct Net {
    rng: ChaCha8Rng,
    loss: f64,
    dup: f64,
    reorder: f64,
    corrupt: f64,
    now: Instant,
}

impl Net {
    /// Move packets both ways until `done` or the engines go quiet with no timer. Returns
    /// whether `done` became true.
    fn run(
        &mut self,
        a: &mut Side,
        b: &mut Side,
        mut done: impl FnMut(&mut Side, &mut Side) -> bool,
    ) -> bool {
        let mut buf = vec![0u8; pkt::MAX_PACKET_LEN];
        for _ in 0..2_000_000 {
            if done(a, b) {
                return true;
            }
            let mut moved = false;
            for dir in 0..2 {
                let (src, dst) = if dir == 0 { (&mut *a, &mut *b) } else { (&mut *b, &mut *a) };
                let mut batch: Vec<Vec<u8>> = Vec::new();
                for _ in 0..32 {
                    let Some(n) = src.nic.poll_transmit(self.now, &mut buf) else { break };
                    batch.push(buf[..n].to_vec());
                }
                moved |= !batch.is_empty();
                if batch.len() > 1 && self.rng.gen_bool(self.reorder) {
                    let i = self.rng.gen_range(0..batch.len());
                    let j = self.rng.gen_range(0..batch.len());
                    batch.swap(i, j);
                }
                for mut p in batch {
                    if self.rng.gen_bool(self.loss) {
                        continue;
                    }
                    if self.rng.gen_bool(self.corrupt) {
                        let k = self.rng.gen_range(0..p.len());
                        p[k] ^= 0x40;
                    }
                    dst.nic.handle_packet(self.now, &p);
                    if self.rng.gen_bool(self.dup) {
                        dst.nic.handle_packet(self.now, &p);
                    }
                }
            }
            self.now += core::time::Duration::from_micros(1);
            if !moved {
                let t = [a.nic.poll_timeout(), b.nic.poll_timeout()].into_iter().flatten().min();
                match t {
                    Some(t) => {
                        if t > self.now {
                            self.now = t;
                        }
                        a.nic.handle_timeout(self.now);
                        b.nic.handle_timeout(self.now);
                    }
                    None => return done(a, b),
                }
            }
        }
        false
    }
}

/// Mixed WRITE / READ / SEND / FETCH_ADD from A to B over a bad link, starting just below the
/// PSN wrap: all complete once with success, bytes exact, atomics applied once.
fn lossy_mixed(seed: u64, loss: f64, ops: usize, mtu: Mtu) {
    let attr = QpAttr {
        path_mtu: mtu,
        timeout: 8,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 1,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        ..QpAttr::default()
    };
    let (mut a, mut b) = pair(psn::MASK - 40, attr);
    let mut net = Net {
        rng: ChaCha8Rng::seed_from_u64(seed),
        loss,
        dup: loss / 2.0,
        reorder: loss,
        corrupt: loss / 4.0,
        now: Instant::ZERO,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xabc);
    // Layout in each 1 MiB buffer: [0, 512K) data slots of 4 KiB (128 of them);
    // [512K, 516K) atomic results at A / counter at B (B: offset 512K).
    const SLOT: u64 = 4096;
    const CTR: u64 = 512 << 10;
    let mut expect_b = vec![0u8; (CTR) as usize];
    let mut expect_a = vec![0u8; (CTR) as usize];
    // Fill B's data with a pattern (READ sources), A's likewise.
    for i in 0..CTR {
        let v = (i as u8).wrapping_mul(7).wrapping_add(3);
        expect_b[i as usize] = v;
        expect_a[i as usize] = v ^ 0x55;
    }
    a.nic.mem_mut().write(a.buf, &expect_a).unwrap();
    b.nic.mem_mut().write(b.buf, &expect_b).unwrap();
    let mut adds = 0u64;
    let mut pending = std::collections::BTreeMap::new();
    let mut completed = std::collections::BTreeMap::<u64, WcStatus>::new();
    let mut recvs_done = 0usize;
    let mut sends = 0usize;
    let mut next_id = 0u64;
    let mut atomic_origs = Vec::new();
    while (next_id as usize) < ops || !pending.is_empty() {
        // Post up to 8 new WQEs (each slot used by at most one op in flight at a time).
        let mut posted = 0;
        while (next_id as usize) < ops && pending.len() < 48 && posted < 8 {
            let id = next_id;
            let slot = id % 120;
            let off = slot * SLOT;
            let len = rng.gen_range(0..=3000u32);
            let kind = rng.gen_range(0..4);
            let wr = match kind {
                0 => {
                    // WRITE A[off..] -> B[off..]
                    let src = expect_a[off as usize..off as usize + len as usize].to_vec();
                    expect_b[off as usize..off as usize + len as usize].copy_from_slice(&src);
                    SendWr::new(id, WrOp::Write { remote: remote(&b, off) }, sge(&a, off, len))
                }
                1 => {
                    let src = expect_b[off as usize..off as usize + len as usize].to_vec();
                    expect_a[off as usize..off as usize + len as usize].copy_from_slice(&src);
                    SendWr::new(id, WrOp::Read { remote: remote(&b, off) }, sge(&a, off, len))
                }
                2 => {
                    // SEND A[off..] into a RECV at B[off..]
                    let src = expect_a[off as usize..off as usize + len as usize].to_vec();
                    expect_b[off as usize..off as usize + len as usize].copy_from_slice(&src);
                    let rw = RecvWr { wr_id: 1 << 40 | id, sgl: sge(&b, off, 4096) };
                    b.nic.post_recv(b.qpn, &rw, net.now).unwrap();
                    sends += 1;
                    SendWr::new(id, WrOp::Send, sge(&a, off, len))
                }
                _ => {
                    let add = rng.gen_range(1..1000u64);
                    adds += add;
                    let res = CTR + 8 * (id % 256);
                    atomic_origs.push((id, res));
                    SendWr::new(
                        id,
                        WrOp::FetchAdd { remote: remote(&b, CTR), add },
                        SgList::one(Sge { addr: a.buf + res, len: 8, lkey: a.mr.lkey }),
                    )
                }
            };
            // Unsignaled now and then.
            let wr = wr.signaled(true);
            a.nic.post_send(a.qpn, &wr, net.now).unwrap();
            pending.insert(id, kind);
            next_id += 1;
            posted += 1;
        }
        let before = pending.len();
        let ok = net.run(&mut a, &mut b, |a, b| {
            for c in poll_all(a) {
                assert!(completed.insert(c.wr_id, c.status).is_none(), "wr {} twice", c.wr_id);
                assert_eq!(c.status, WcStatus::Success, "wr {} {:?}", c.wr_id, c);
                pending.remove(&c.wr_id);
            }
            for c in poll_all(b) {
                assert_eq!(c.status, WcStatus::Success, "recv {c:?}");
                recvs_done += 1;
            }
            pending.len() < before || pending.is_empty()
        });
        assert!(
            ok,
            "stuck: pending {:?} a={:?} b={:?}",
            pending.keys().take(5).collect::<Vec<_>>(),
            a.nic.query_qp(a.qpn).unwrap().state,
            b.nic.query_qp(b.qpn).unwrap().state
        );
    }
    // Let the last RECV completions arrive.
    net.run(&mut a, &mut b, |_, b| {
        for c in poll_all(b) {
            assert_eq!(c.status, WcStatus::Success);
            recvs_done += 1;
        }
        recvs_done == sends
    });
    assert_eq!(recvs_done, sends);
    assert_eq!(b.nic.mem().read_u64(b.buf + CTR).unwrap(), adds, "atomics applied once");
    assert_eq!(b.nic.stats().atomics_executed as usize, atomic_origs.len());
    assert!(a.nic.mem().slice(a.buf, CTR as usize).unwrap() == &expect_a[..], "A bytes");
    assert!(b.nic.mem().slice(b.buf, CTR as usize).unwrap() == &expect_b[..], "B bytes");
    if loss > 0.0 {
        assert!(a.nic.stats().retransmits > 0);
    }
}

#[test]
fn lossy_mixed_counts_no_loss() {
    lossy_mixed(1, 0.0, 300, Mtu::M1024);
}

#[test]
fn lossy_mixed_5pct() {
    for seed in 0..4 {
        lossy_mixed(seed, 0.05, 300, Mtu::M1024);
    }
}

#[test]
fn lossy_mixed_20pct() {
    for seed in 10..13 {
        lossy_mixed(seed, 0.2, 200, Mtu::M256);
    }
}

fn raw(to: &Side, from_ip: IpAddr, op: u8, psn: u32, ack_req: bool) -> RoceRepr {
    let _ = from_ip;
    RoceRepr::new(bth::Repr {
        opcode: op,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        pkey: bth::PKEY_DEFAULT,
        fecn: false,
        becn: false,
        dest_qp: to.qpn,
        ack_req,
        psn,
    })
}

fn inject(to: &mut Side, from_ip: IpAddr, r: &RoceRepr, payload: &[u8]) {
    let path = Path {
        src: from_ip,
        dst: to.ip,
        sport: 0xc001,
        dport: snic_wire::roce::UDP_PORT,
        dscp: 0,
        ecn: 0,
    };
    let mut b = vec![0u8; pkt::MAX_PACKET_LEN];
    let n = pkt::build(&mut b, &path, r, payload.len(), |d: &mut [u8]| {
        d.copy_from_slice(payload);
        Ok::<(), ()>(())
    })
    .unwrap();
    to.nic.handle_packet(Instant::ZERO, &b[..n]);
}

/// A modify_qp RTS -> RTS that changes the path MTU while a multi-packet WRITE is half sent
/// (IBTA does not allow PATH_MTU in RTS -> RTS; the engine accepts it) must not panic.
#[test]
fn path_mtu_change_mid_message_does_not_panic() {
    let attr = QpAttr { path_mtu: Mtu::M256, ..QpAttr::default() };
    let (mut a, b) = pair(0, attr);
    let wr = SendWr::new(1, WrOp::Write { remote: remote(&b, 0) }, sge(&a, 0, 1000));
    a.nic.post_send(a.qpn, &wr, Instant::ZERO).unwrap();
    let mut buf = vec![0u8; pkt::MAX_PACKET_LEN];
    assert!(a.nic.poll_transmit(Instant::ZERO, &mut buf).is_some());
    let m = QpAttr { state: QpState::Rts, path_mtu: Mtu::M4096, ..QpAttr::default() };
    let r = a.nic.modify_qp(a.qpn, &m, AttrMask::STATE | AttrMask::PATH_MTU, Instant::ZERO);
    if r.is_ok() {
        // Next packet: payload offset 1 * 4096 > 1000 bytes.
        let _ = a.nic.poll_transmit(Instant::ZERO, &mut buf);
    }
}

/// Responses the responder queues are bounded (MAX_OUT = 1024 says resp.rs), whatever the
/// peer sends between two poll_transmit calls: alternating in-order WRITEs (ACK) and SENDs
/// without a RECV (RNR NAK) make entries that do not coalesce.
#[test]
fn responder_queue_bounded_under_ack_rnr_alternation() {
    let (a, mut b) = pair(0, QpAttr::default());
    let ip = a.ip;
    let mut p = 0u32;
    for _ in 0..3000 {
        let mut w = raw(&b, ip, opcode::RC_RDMA_WRITE_ONLY, p, true);
        w.reth = Some(RethRepr { va: b.buf, rkey: b.mr.rkey, dma_len: 1 });
        inject(&mut b, ip, &w, b"x");
        p = psn::add(p, 1);
        let s = raw(&b, ip, opcode::RC_SEND_ONLY, p, true);
        inject(&mut b, ip, &s, b"y");
    }
    let mut buf = vec![0u8; pkt::MAX_PACKET_LEN];
    let mut n = 0;
    while b.nic.poll_transmit(Instant::ZERO, &mut buf).is_some() {
        n += 1;
        assert!(n < 100_000);
    }
    assert!(n <= 1100, "{n} responses queued from one burst of 6000 requests");
}

/// Two QPs on one NIC: a long WRITE on the first must not hold back the second QP's packets
/// until it has sent all of its own (poll_transmit's round-robin).
#[test]
fn poll_transmit_is_fair_between_qps() {
    let attr = QpAttr { path_mtu: Mtu::M256, ..QpAttr::default() };
    let (mut a, mut b) = pair(0, attr);
    // A second QP pair on the same NICs.
    let pd = a.mr.pd;
    let qinit = |nic: &mut Rnic, cq| {
        nic.create_qp(QpInit {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            max_send_wr: 64,
            max_recv_wr: 64,
            placement: MemKind::Host,
            sq_sig_all: false,
        })
        .unwrap()
    };
    let qa2 = qinit(&mut a.nic, a.cq);
    let qb2 = qinit(&mut b.nic, b.cq);
    let (qa1, qb1) = (a.qpn, b.qpn);
    a.qpn = qa2;
    b.qpn = qb2;
    let (pa, pb) = ((qa2, a.ip), (qb2, b.ip));
    connect(&mut a, pb, 0, 0x100, attr);
    connect(&mut b, pa, 0x100, 0, attr);
    // QP 1: 200 KiB WRITE (800 packets); QP 2: one small WRITE, posted right after.
    let big = SendWr::new(1, WrOp::Write { remote: remote(&b, 0) }, sge(&a, 0, 200 << 10));
    a.nic.post_send(qa1, &big, Instant::ZERO).unwrap();
    let small = SendWr::new(2, WrOp::Write { remote: remote(&b, 300 << 10) }, sge(&a, 0, 8));
    a.nic.post_send(qa2, &small, Instant::ZERO).unwrap();
    let _ = qb1;
    let mut buf = vec![0u8; pkt::MAX_PACKET_LEN];
    let mut k = 0;
    loop {
        let n = a.nic.poll_transmit(Instant::ZERO, &mut buf).expect("packets");
        let p = pkt::parse(&buf[..n], snic_wire::roce::UDP_PORT).unwrap();
        if p.bth().dest_qp == qb2 {
            break;
        }
        k += 1;
    }
    assert!(k <= 64, "QP 2's first packet left after {k} packets of QP 1");
}

/// SQD: a WQE posted in SQD does not start; back in RTS it completes.
#[test]
fn sqd_holds_new_wqes_then_rts_resumes() {
    let (mut a, mut b) = pair(0, QpAttr::default());
    let sqd = QpAttr { state: QpState::Sqd, ..QpAttr::default() };
    a.nic.modify_qp(a.qpn, &sqd, AttrMask::STATE, Instant::ZERO).unwrap();
    let wr = SendWr::new(7, WrOp::Write { remote: remote(&b, 0) }, sge(&a, 0, 100));
    a.nic.post_send(a.qpn, &wr, Instant::ZERO).unwrap();
    let mut buf = vec![0u8; pkt::MAX_PACKET_LEN];
    assert!(a.nic.poll_transmit(Instant::ZERO, &mut buf).is_none());
    let rts = QpAttr { state: QpState::Rts, ..QpAttr::default() };
    a.nic.modify_qp(a.qpn, &rts, AttrMask::STATE, Instant::ZERO).unwrap();
    let mut net = Net {
        rng: ChaCha8Rng::seed_from_u64(1),
        loss: 0.0,
        dup: 0.0,
        reorder: 0.0,
        corrupt: 0.0,
        now: Instant::ZERO,
    };
    let mut got = Vec::new();
    assert!(net.run(&mut a, &mut b, |a, _| {
        got.extend(poll_all(a));
        !got.is_empty()
    }));
    assert_eq!((got[0].wr_id, got[0].status), (7, WcStatus::Success));
}
