//! Moving a live engine's QPs into a fresh engine ([`Rnic::export`] / [`Rnic::import`]) in the
//! middle of a transfer, through JSON and onto another clock: the packets in flight at the
//! move are lost or arrive late at the new engine, and the transfer still completes with the
//! right bytes and no error. And imports of bad state fail with their typed error, leaving the
//! engine as it was; a document with any number corrupted is refused or runs without a panic.

mod common;

use common::retrying_attr;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use snic_dma::MemKind;
use snic_rdma::testing::{End, EndOpts, Pair, dummy_cqe};
use snic_rdma::*;
use snic_time::Instant;

const SLOT: u64 = 4096;
/// Where READ results land in A's buffer.
const READ_AT: u64 = 512 << 10;

fn opts() -> EndOpts {
    EndOpts {
        host_pool: 4 << 20,
        buf_len: 1 << 20,
        cq_depth: 4096,
        max_send_wr: 64,
        max_recv_wr: 64,
        ..EndOpts::default()
    }
}

/// One engine on its own clock: its `now` is the test's global time plus `off`.
struct Node {
    nic: Rnic,
    off: u64,
}

impl Node {
    fn now(&self, g: u64) -> Instant {
        Instant::from_nanos(g + self.off)
    }
}

/// Every packet `n` has ready at global time `g`.
fn take(n: &mut Node, g: u64) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; pkt::MAX_PACKET_LEN];
    let mut out = Vec::new();
    let now = n.now(g);
    while let Some(len) = n.nic.poll_transmit(now, &mut buf) {
        out.push(buf[..len].to_vec());
        assert!(out.len() < 100_000, "a NIC that never stops sending");
    }
    out
}

fn give(n: &mut Node, g: u64, pkts: &[Vec<u8>]) {
    let now = n.now(g);
    for p in pkts {
        n.nic.handle_packet(now, p);
    }
}

/// Move packets both ways over a clean link (jumping to the next timer when quiet) until
/// `done`. Returns whether `done` became true within the bound.
fn run(a: &mut Node, b: &mut Node, g: &mut u64, mut done: impl FnMut(&mut Node) -> bool) -> bool {
    for _ in 0..100_000 {
        if done(a) {
            return true;
        }
        let ab = take(a, *g);
        give(b, *g, &ab);
        let ba = take(b, *g);
        give(a, *g, &ba);
        if ab.is_empty() && ba.is_empty() {
            let next = [&*a, &*b]
                .iter()
                .filter_map(|n| n.nic.poll_timeout().map(|t| t.as_nanos().saturating_sub(n.off)))
                .min();
            let Some(t) = next else { return done(a) };
            *g = (*g).max(t);
            a.nic.handle_timeout(a.now(*g));
            b.nic.handle_timeout(b.now(*g));
        }
    }
    false
}

/// A fresh engine built as `old` was (same configuration and buffer address), holding
/// `old`'s state moved through JSON at global time `g` and its buffer's bytes, on a clock
/// `off` ahead of the global one.
fn moved(old: &Node, host: u8, buf: u64, g: u64, off: u64) -> Node {
    let st = old.nic.export(old.now(g)).expect("export");
    let json = serde_json::to_string(&st).expect("to JSON");
    let st: RnicExport = serde_json::from_str(&json).expect("from JSON");
    let mut nic = Rnic::new(opts().config(host)).expect("new NIC");
    let again = nic.alloc_buf(MemKind::Host, opts().buf_len, 4096).expect("buffer");
    assert_eq!(again, buf, "a fresh engine lays its buffer out at the same address");
    let bytes = old.nic.mem().slice(buf, opts().buf_len as usize).expect("old buffer").to_vec();
    nic.mem_mut().write(buf, &bytes).expect("copy the buffer");
    let new = Node { nic, off };
    let mut new = new;
    let now = new.now(g);
    new.nic.import(&st, now).expect("import");
    new
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

/// A posts `ops` WRITEs and READs to B (slot `i` each, 3000 bytes, 1 KiB MTU); after `cut`
/// of A's packets reached B, one side (`move_a`: the requester, else the responder) moves to
/// a fresh engine on another clock. Of the packets then in flight towards the moved side,
/// those for which `lose` says so are lost, the rest arrive late at the new engine. All WQEs
/// complete with success at the requester, the bytes are right, and neither side has a QP
/// error. Returns whether WQEs were still open at the move, and the requester's
/// retransmissions.
fn move_mid_transfer(
    move_a: bool,
    ops: u64,
    cut: usize,
    lose: &mut dyn FnMut() -> bool,
) -> (bool, u64) {
    let attr = QpAttr { access: Access::ALL, ..retrying_attr() };
    let p = Pair::new(&opts(), attr, [psn::MASK - 20, 0x100]);
    let (ea, eb): (End, End) = (p.a, p.b);
    let (abuf, bbuf, aqp, acq) = (ea.buf, eb.buf, ea.qpn, ea.cq);
    let len = 3000u32;
    let a_data = pattern(0x5a, (ops * SLOT) as usize);
    let b_data = pattern(0xa5, (ops * SLOT) as usize);
    let mut a = Node { nic: ea.nic, off: 0 };
    let mut b = Node { nic: eb.nic, off: 7_000_000_000 };
    a.nic.mem_mut().write(abuf, &a_data).unwrap();
    b.nic.mem_mut().write(bbuf + READ_AT, &b_data).unwrap();
    let mut g = 1_000_000u64;
    let mut wrs = Vec::new();
    for i in 0..ops {
        let src = SgList::one(Sge { addr: abuf + i * SLOT, len, lkey: ea.mr.lkey });
        let wr = if i % 3 == 2 {
            let dst = SgList::one(Sge { addr: abuf + READ_AT + i * SLOT, len, lkey: ea.mr.lkey });
            let remote = Remote { addr: bbuf + READ_AT + i * SLOT, rkey: eb.mr.rkey };
            SendWr::new(i, WrOp::Read { remote }, dst)
        } else {
            let remote = Remote { addr: bbuf + i * SLOT, rkey: eb.mr.rkey };
            SendWr::new(i, WrOp::Write { remote }, src)
        };
        wrs.push(wr.signaled(true));
    }
    a.nic.post_send_batch(aqp, &wrs, a.now(g)).unwrap();
    // Up to the cut: A's packets reach B, B's answers reach A.
    let mut sent = 0;
    let mut in_flight = Vec::new();
    for _ in 0..1000 {
        let ab = take(&mut a, g);
        let room = cut.saturating_sub(sent).min(ab.len());
        give(&mut b, g, &ab[..room]);
        sent += room;
        in_flight.extend_from_slice(&ab[room..]);
        if sent >= cut || ab.is_empty() {
            break;
        }
        let ba = take(&mut b, g);
        give(&mut a, g, &ba);
        g += 1_000;
    }
    // B's answers of the last round are in flight too, towards A.
    let back = take(&mut b, g);
    g += 50_000;
    let mut completed = Vec::new();
    let drain = |n: &mut Node, got: &mut Vec<Cqe>| {
        let mut out = [dummy_cqe(); 64];
        loop {
            let k = n.nic.poll_cq(acq, &mut out).unwrap();
            got.extend_from_slice(&out[..k]);
            if k < out.len() {
                break;
            }
        }
    };
    drain(&mut a, &mut completed);
    let open = (completed.len() as u64) < ops;
    if move_a {
        a = moved(&a, 1, abuf, g, 3_000);
        // A's packets in flight still reach B; B's answers to the old A arrive late or not.
        give(&mut b, g, &in_flight);
        let late: Vec<Vec<u8>> = back.into_iter().filter(|_| !lose()).collect();
        give(&mut a, g, &late);
    } else {
        b = moved(&b, 2, bbuf, g, 11);
        let late: Vec<Vec<u8>> = in_flight.into_iter().filter(|_| !lose()).collect();
        give(&mut b, g, &late);
        give(&mut a, g, &back);
    }
    let done = run(&mut a, &mut b, &mut g, |a| {
        drain(a, &mut completed);
        completed.len() as u64 >= ops
    });
    assert!(
        done,
        "only {} of {ops} WQEs completed; A {:?} B {:?}",
        completed.len(),
        a.nic.stats(),
        b.nic.stats()
    );
    let mut ids: Vec<u64> = completed.iter().map(|c| c.wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..ops).collect::<Vec<_>>(), "each WQE completes once");
    assert!(completed.iter().all(|c| c.status == WcStatus::Success), "{completed:?}");
    for i in 0..ops {
        let o = (i * SLOT) as usize;
        if i % 3 == 2 {
            let got = a.nic.mem().slice(abuf + READ_AT + i * SLOT, len as usize).unwrap();
            assert!(got == &b_data[o..o + len as usize], "READ {i} result");
        } else {
            let got = b.nic.mem().slice(bbuf + i * SLOT, len as usize).unwrap();
            assert!(got == &a_data[o..o + len as usize], "WRITE {i} at B");
        }
    }
    assert_eq!((a.nic.stats().qp_errors, b.nic.stats().qp_errors), (0, 0));
    assert_eq!(a.nic.query_qp(aqp).unwrap().state, QpState::Rts);
    (open, a.nic.stats().retransmits)
}

#[test]
fn responder_moves_mid_transfer_half_the_flight_lost() {
    let mut k = 0u32;
    let (open, retx) = move_mid_transfer(false, 30, 25, &mut || {
        k += 1;
        k.is_multiple_of(2)
    });
    assert!(open, "the move came mid-transfer");
    assert!(retx > 0, "the lost packets were sent again");
}

#[test]
fn responder_moves_mid_transfer_all_the_flight_late() {
    let (open, _) = move_mid_transfer(false, 30, 40, &mut || false);
    assert!(open, "the move came mid-transfer");
}

#[test]
fn requester_moves_mid_transfer_with_reads_outstanding() {
    let mut k = 0u32;
    let (open, _) = move_mid_transfer(true, 30, 33, &mut || {
        k += 1;
        k.is_multiple_of(3)
    });
    assert!(open, "the move came mid-transfer");
}

/// The state of B of a connected pair after some traffic, and B itself.
fn exported() -> (RnicExport, End) {
    let attr = QpAttr { access: Access::ALL, ..retrying_attr() };
    let mut p = Pair::new(&opts(), attr, [0, 0]);
    let wr = SendWr::new(1, WrOp::Write { remote: p.b.remote(0) }, p.a.sge(0, 5000));
    let now = p.now;
    p.a.nic.post_send(p.a.qpn, &wr, now).unwrap();
    let rwr = RecvWr { wr_id: 7, sgl: p.b.sge(8192, 100) };
    p.b.nic.post_recv(p.b.qpn, &rwr, now).unwrap();
    p.drive_bounded(100);
    (p.b.nic.export(now).unwrap(), p.b)
}

fn fresh() -> Rnic {
    Rnic::new(opts().config(2)).unwrap()
}

#[test]
fn import_refuses_bad_state_and_changes_nothing() {
    let (st, mut b) = exported();
    let qpn = st.qps[0].qpn;
    assert_eq!(st.qps[0].rq_slots.len(), 1, "the posted RECV is carried");
    // Another version.
    let mut v = st.clone();
    v.version = EXPORT_VERSION + 1;
    let mut n = fresh();
    let now = Instant::from_secs(1);
    assert_eq!(n.import(&v, now), Err(ImportError::Version { got: 2, want: EXPORT_VERSION }));
    // A QPN the engine has.
    assert_eq!(b.nic.import(&st, now), Err(ImportError::QpnClash(qpn)));
    // An MR beyond the engine's memory.
    let small = RnicConfig { host_pool: 64 << 10, ..opts().config(2) };
    let mut n2 = Rnic::new(small).unwrap();
    let lkey = st.mrs[0].info.lkey;
    assert_eq!(n2.import(&st, now), Err(ImportError::MrOutOfRange(lkey)));
    // A cursor past the fetched WQEs (through JSON, as a corrupt document would come).
    let mut j = serde_json::to_value(&st).unwrap();
    j["qps"][0]["req"]["started"] = 99.into();
    let bad: RnicExport = serde_json::from_value(j).unwrap();
    assert!(matches!(n.import(&bad, now), Err(ImportError::Inconsistent(_))));
    // A PD the engine has.
    let mut n3 = fresh();
    n3.alloc_pd();
    assert_eq!(n3.import(&st, now), Err(ImportError::PdClash(0)));
    // Nothing of the refused imports stayed: the same engine takes the good state, and its
    // QP answers to the old number and keys, with the RECV still posted.
    for e in [&mut n, &mut n2] {
        assert!(e.qp(qpn).is_none());
    }
    n.import(&st, now).unwrap();
    assert_eq!(n.query_qp(qpn).unwrap().state, QpState::Rts);
    assert_eq!(n.qp(qpn).unwrap().rq.map(|r| r.len()), Some(1));
    // Importing twice clashes.
    assert_eq!(n.import(&st, now), Err(ImportError::QpnClash(qpn)));
    // Unknown fields or garbage do not deserialize into a state.
    assert!(serde_json::from_str::<RnicExport>("{\"version\":1}").is_err());
}

#[test]
fn timers_keep_their_remaining_time_across_clocks() {
    // A WRITE whose packets are all lost: A's retransmission timer is armed.
    let attr = QpAttr { access: Access::ALL, ..retrying_attr() };
    let mut p = Pair::new(&opts(), attr, [0, 0]);
    let t0 = Instant::from_millis(5);
    let wr = SendWr::new(1, WrOp::Write { remote: p.b.remote(0) }, p.a.sge(0, 100));
    p.a.nic.post_send(p.a.qpn, &wr, t0).unwrap();
    let mut buf = vec![0u8; pkt::MAX_PACKET_LEN];
    while p.a.nic.poll_transmit(t0, &mut buf).is_some() {}
    let due = p.a.nic.poll_timeout().expect("a timer");
    let left = due.saturating_duration_since(t0);
    let st = p.a.nic.export(t0).unwrap();
    let mut n = Rnic::new(opts().config(1)).unwrap();
    n.alloc_buf(MemKind::Host, opts().buf_len, 4096).unwrap();
    let t1 = Instant::from_secs(100);
    n.import(&st, t1).unwrap();
    assert_eq!(n.poll_timeout(), Some(t1 + left));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Either side moves at any point of a transfer, losing any part of the flight.
    #[test]
    fn any_cut_any_loss(move_a: bool, cut in 0usize..80, seed: u64, loss in 0.0f64..1.0) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        move_mid_transfer(move_a, 24, cut, &mut || rng.gen_bool(loss));
    }
}

/// Every number in a JSON document, by path (object keys and array indexes).
fn number_paths(v: &serde_json::Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match v {
        serde_json::Value::Number(_) => out.push(at.clone()),
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                at.push(i.to_string());
                number_paths(x, at, out);
                at.pop();
            }
        }
        serde_json::Value::Object(o) => {
            for (k, x) in o {
                at.push(k.clone());
                number_paths(x, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

fn at_path<'a>(v: &'a mut serde_json::Value, path: &[String]) -> &'a mut serde_json::Value {
    path.iter().fold(v, |v, k| match v {
        serde_json::Value::Array(a) => &mut a[k.parse::<usize>().unwrap()],
        other => &mut other[k.as_str()],
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// A state with any one number changed (a corrupt document) is refused with a typed error
    /// or imported; an imported one runs against the peer without a panic.
    #[test]
    fn a_corrupt_number_never_panics(pick: usize, value in prop_oneof![
        Just(0u64), Just(1u64), Just(u64::from(u32::MAX)), Just(0x00ff_ffff), 0u64..5000,
    ]) {
        let attr = QpAttr { access: Access::ALL, ..retrying_attr() };
        let mut p = Pair::new(&opts(), attr, [0, 0]);
        let now = p.now;
        let wrs: Vec<SendWr> = (0..6)
            .map(|i| {
                let remote = p.b.remote(i * SLOT);
                let op = if i % 2 == 0 { WrOp::Write { remote } } else { WrOp::Read { remote } };
                SendWr::new(i, op, p.a.sge(i * SLOT, 3000)).signaled(true)
            })
            .collect();
        p.a.nic.post_send_batch(p.a.qpn, &wrs, now).unwrap();
        let rwr = RecvWr { wr_id: 7, sgl: p.b.sge(8192, 100) };
        p.b.nic.post_recv(p.b.qpn, &rwr, now).unwrap();
        p.step();
        for (moving, host) in [(0, 1u8), (1, 2)] {
            let nic = if moving == 0 { &p.a.nic } else { &p.b.nic };
            let mut j = serde_json::to_value(nic.export(now).unwrap()).unwrap();
            let mut paths = Vec::new();
            number_paths(&j, &mut Vec::new(), &mut paths);
            let path = &paths[pick % paths.len()];
            *at_path(&mut j, path) = value.into();
            let Ok(st) = serde_json::from_value::<RnicExport>(j) else { continue };
            let mut n = Rnic::new(opts().config(host)).unwrap();
            n.alloc_buf(MemKind::Host, opts().buf_len, 4096).unwrap();
            if n.import(&st, now).is_err() {
                continue;
            }
            let other = if moving == 0 { &mut p.b.nic } else { &mut p.a.nic };
            let mut buf = vec![0u8; pkt::MAX_PACKET_LEN];
            let mut t = now;
            for _ in 0..200 {
                let mut moved = 0;
                while let Some(len) = n.poll_transmit(t, &mut buf) {
                    other.handle_packet(t, &buf[..len]);
                    moved += 1;
                    if moved > 2000 { break; }
                }
                while let Some(len) = other.poll_transmit(t, &mut buf) {
                    n.handle_packet(t, &buf[..len]);
                    moved += 1;
                    if moved > 4000 { break; }
                }
                let mut cqes = [dummy_cqe(); 64];
                for cq in 0..2 {
                    let _ = n.poll_cq(CqId(cq), &mut cqes);
                }
                if moved == 0 {
                    let Some(next) = [n.poll_timeout(), other.poll_timeout()].into_iter().flatten().min()
                    else { break };
                    t = t.max(next);
                    n.handle_timeout(t);
                    other.handle_timeout(t);
                }
            }
        }
    }
}

/// [`Rnic::import_in_place`] over the exporting engine's memory moved whole: the QP's rings
/// stay at their addresses with the posted WQEs as they were; over memory without the rings
/// mapped it is refused and changes nothing.
#[test]
fn import_in_place_keeps_the_rings_where_they_were() {
    let (st, mut b) = exported();
    let qpn = b.qpn;
    let rings = b.nic.qp_rings(qpn).unwrap();
    let (rq, rq_len) = (rings.1.expect("an RQ"), 64 * wqe::RQ_SLOT);
    let before = b.nic.mem().slice(rq, rq_len).unwrap().to_vec();
    let now = Instant::from_nanos(5_000_000);
    let mut n = fresh();
    std::mem::swap(n.mem_mut(), b.nic.mem_mut());
    n.import_in_place(&st, now).unwrap();
    assert_eq!(n.qp_rings(qpn).unwrap(), rings);
    assert_eq!(n.mem().slice(rq, rq_len).unwrap(), &before[..], "slots not rewritten");
    assert_eq!(n.query_qp(qpn).unwrap().state, QpState::Rts);

    let mut empty = Rnic::new(EndOpts { host_pool: 0, ..opts() }.config(3)).unwrap();
    let mut no_mrs = st.clone();
    no_mrs.mrs.clear();
    assert!(matches!(empty.import_in_place(&no_mrs, now), Err(ImportError::Mem(_))));
    assert!(empty.qp_rings(qpn).is_err(), "nothing imported");
}
