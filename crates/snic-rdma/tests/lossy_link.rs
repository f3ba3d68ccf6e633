//! Mixed WRITE / READ / SEND / FETCH_ADD between two NICs over a lossy, duplicating,
//! reordering and corrupting link: every WQE completes once, bytes exact, atomics applied once.

mod common;

use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use snic_rdma::*;
use snic_time::Instant;

/// Mixed WRITE / READ / SEND / FETCH_ADD from A to B over a bad link, starting just below the
/// PSN wrap: all complete once with success, bytes exact, atomics applied once.
fn lossy_mixed(seed: u64, loss: f64, ops: usize, mtu: Mtu) {
    let attr = QpAttr { path_mtu: mtu, rnr_retry: 7, min_rnr_timer: 1, ..retrying_attr() };
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
                    SendWr::new(id, WrOp::Write { remote: b.remote(off) }, a.sge(off, len))
                }
                1 => {
                    let src = expect_b[off as usize..off as usize + len as usize].to_vec();
                    expect_a[off as usize..off as usize + len as usize].copy_from_slice(&src);
                    SendWr::new(id, WrOp::Read { remote: b.remote(off) }, a.sge(off, len))
                }
                2 => {
                    // SEND A[off..] into a RECV at B[off..]
                    let src = expect_a[off as usize..off as usize + len as usize].to_vec();
                    expect_b[off as usize..off as usize + len as usize].copy_from_slice(&src);
                    let rw = RecvWr { wr_id: 1 << 40 | id, sgl: b.sge(off, 4096) };
                    b.nic.post_recv(b.qpn, &rw, net.now).unwrap();
                    sends += 1;
                    SendWr::new(id, WrOp::Send, a.sge(off, len))
                }
                _ => {
                    let add = rng.gen_range(1..1000u64);
                    adds += add;
                    let res = CTR + 8 * (id % 256);
                    atomic_origs.push((id, res));
                    SendWr::new(
                        id,
                        WrOp::FetchAdd { remote: b.remote(CTR), add },
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
            for c in a.poll_all() {
                assert!(completed.insert(c.wr_id, c.status).is_none(), "wr {} twice", c.wr_id);
                assert_eq!(c.status, WcStatus::Success, "wr {} {:?}", c.wr_id, c);
                pending.remove(&c.wr_id);
            }
            for c in b.poll_all() {
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
        for c in b.poll_all() {
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
