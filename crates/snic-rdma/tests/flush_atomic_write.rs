//! RC FLUSH and ATOMIC WRITE (IBTA 1.5) between two NICs through the public API: completions,
//! bytes, errors, and over a lossy, duplicating, reordering link every ATOMIC WRITE and FLUSH
//! runs exactly once at the responder (a retransmitted or duplicated one is answered from the
//! saved resource, never applied again).

mod common;

use common::{Net, retrying_attr};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use snic_rdma::testing::{EndOpts, Pair};
use snic_rdma::*;
use snic_time::Instant;

fn pair(attr: QpAttr) -> Pair {
    let opts = EndOpts {
        host_pool: 4 << 20,
        buf_len: 1 << 20,
        cq_depth: 4096,
        max_send_wr: 64,
        max_recv_wr: 64,
        ..EndOpts::default()
    };
    Pair::new(&opts, QpAttr { access: Access::ALL, ..attr }, [psn::MASK - 20, 0x100])
}

fn flush(id: u64, remote: Remote, len: u32, level: FlushLevel, placement: u8) -> SendWr {
    SendWr::new(id, WrOp::Flush { remote, len, level, placement }, SgList::empty())
}

fn atomic_write(id: u64, remote: Remote, value: u64) -> SendWr {
    SendWr::new(id, WrOp::AtomicWrite { remote, value }, SgList::empty())
}

#[test]
fn write_flush_atomic_write_end_to_end() {
    let mut p = pair(QpAttr { path_mtu: Mtu::M1024, ..QpAttr::default() });
    let (a, b) = (&mut p.a, &mut p.b);
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 13) as u8).collect();
    a.nic.mem_mut().write(a.buf, &data).unwrap();
    let both = FLUSH_GLOBAL | FLUSH_PERSISTENT;
    let wrs = [
        SendWr::new(1, WrOp::Write { remote: b.remote(0x100) }, a.sge(0, 3000)),
        flush(2, b.remote(0x100), 3000, FlushLevel::Range, both),
        atomic_write(3, b.remote(0x2000), 0xfeed_f00d_dead_beef),
        flush(4, b.remote(0), 0, FlushLevel::Region, FLUSH_GLOBAL),
    ];
    a.nic.post_send_batch(a.qpn, &wrs, p.now).unwrap();
    p.drive_bounded(10_000);
    let (a, b) = (&mut p.a, &mut p.b);
    let got: Vec<_> = a.poll_all().iter().map(|c| (c.wr_id, c.status, c.opcode)).collect();
    let ok = WcStatus::Success;
    assert_eq!(
        got,
        vec![
            (1, ok, WcOpcode::RdmaWrite),
            (2, ok, WcOpcode::Flush),
            (3, ok, WcOpcode::AtomicWrite),
            (4, ok, WcOpcode::Flush),
        ]
    );
    assert!(b.nic.mem().slice(b.buf + 0x100, 3000).unwrap() == &data[..], "WRITE bytes");
    assert_eq!(b.nic.mem().read_u64(b.buf + 0x2000).unwrap(), 0xfeed_f00d_dead_beef);
    assert_eq!(b.nic.stats().flushes_executed, 2);
    assert_eq!(b.nic.stats().atomic_writes_executed, 1);
    assert!(b.poll_all().is_empty(), "no receive completions at the responder");
}

#[test]
fn flush_without_the_mr_right_fails_with_remote_access_error() {
    let mut p = pair(QpAttr::default());
    let (a, b) = (&mut p.a, &mut p.b);
    // A second MR at B without FLUSH_PERSISTENT.
    let acc = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::FLUSH_GLOBAL;
    let mr = b.nic.reg_mr(b.mr.pd, b.buf + 4096, 4096, acc).unwrap();
    let remote = Remote { addr: mr.addr, rkey: mr.rkey };
    a.nic.post_send(a.qpn, &flush(1, remote, 64, FlushLevel::Range, FLUSH_GLOBAL), p.now).unwrap();
    p.drive_bounded(10_000);
    let wrs =
        [flush(2, remote, 64, FlushLevel::Range, FLUSH_PERSISTENT), atomic_write(3, remote, 1)];
    p.a.nic.post_send_batch(p.a.qpn, &wrs, p.now).unwrap();
    p.drive_bounded(10_000);
    let got: Vec<_> = p.a.poll_all().iter().map(|c| (c.wr_id, c.status, c.opcode)).collect();
    assert_eq!(
        got,
        vec![
            (1, WcStatus::Success, WcOpcode::Flush),
            (2, WcStatus::RemAccessErr, WcOpcode::Flush),
            (3, WcStatus::WrFlushErr, WcOpcode::AtomicWrite),
        ]
    );
    assert_eq!(p.b.nic.stats().rem_access_naks_sent, 1);
    // Bad work requests are refused at post time.
    let mut p = pair(QpAttr::default());
    let (a, now) = (&mut p.a, p.now);
    let r = Remote { addr: 0, rkey: 0 };
    let with_sge = SendWr::new(9, WrOp::AtomicWrite { remote: r, value: 0 }, a.sge(0, 8));
    assert!(matches!(a.nic.post_send(a.qpn, &with_sge, now), Err(VerbsError::InvalidWr(_))));
    let no_placement = flush(9, r, 8, FlushLevel::Range, 0);
    assert!(matches!(a.nic.post_send(a.qpn, &no_placement, now), Err(VerbsError::InvalidWr(_))));
}

/// ATOMIC WRITEs to a few words, FLUSHes and WRITEs over a bad link: each word ends with the
/// value of its last ATOMIC WRITE (a stale duplicate applied late would bring an older one
/// back) and the responder ran each ATOMIC WRITE and FLUSH exactly once.
fn lossy(seed: u64, loss: f64, ops: u64) {
    let p = pair(retrying_attr());
    let (mut a, mut b) = (p.a, p.b);
    let mut net = Net {
        rng: ChaCha8Rng::seed_from_u64(seed),
        loss,
        dup: loss,
        reorder: loss,
        corrupt: loss / 4.0,
        now: Instant::ZERO,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    const WORDS: u64 = 4;
    let mut want = [0u64; WORDS as usize];
    let (mut writes, mut flushes) = (0u64, 0u64);
    let mut next = 0u64;
    let mut pending = std::collections::BTreeSet::new();
    while next < ops || !pending.is_empty() {
        while next < ops && pending.len() < 16 {
            let id = next;
            let wr = match rng.gen_range(0..4) {
                0 => {
                    flushes += 1;
                    flush(id, b.remote(0), 64, FlushLevel::Range, FLUSH_GLOBAL)
                }
                1 => SendWr::new(id, WrOp::Write { remote: b.remote(4096) }, a.sge(0, 1500)),
                _ => {
                    let w = rng.gen_range(0..WORDS);
                    want[w as usize] = id + 1;
                    writes += 1;
                    atomic_write(id, b.remote(8 * w), id + 1)
                }
            };
            a.nic.post_send(a.qpn, &wr, net.now).unwrap();
            pending.insert(id);
            next += 1;
        }
        let before = pending.len();
        let ok = net.run(&mut a, &mut b, |a, _| {
            for c in a.poll_all() {
                assert_eq!(c.status, WcStatus::Success, "{c:?}");
                assert!(pending.remove(&c.wr_id), "wr {} completed twice", c.wr_id);
            }
            pending.len() < before || pending.is_empty()
        });
        assert!(ok, "stuck with {} pending", pending.len());
    }
    for w in 0..WORDS {
        assert_eq!(b.nic.mem().read_u64(b.buf + 8 * w).unwrap(), want[w as usize], "word {w}");
    }
    let s = b.nic.stats();
    assert_eq!(s.atomic_writes_executed, writes, "each ATOMIC WRITE applied once");
    assert_eq!(s.flushes_executed, flushes, "each FLUSH run once");
    if loss > 0.0 {
        assert!(a.nic.stats().retransmits > 0);
        assert!(s.dup_requests > 0);
    }
}

#[test]
fn lossless_counts() {
    lossy(1, 0.0, 200);
}

#[test]
fn lossy_link_applies_each_atomic_write_once() {
    for seed in 0..4 {
        lossy(seed, 0.1, 200);
    }
}
