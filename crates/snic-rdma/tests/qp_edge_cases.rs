//! QP edge cases between two NICs, each pinning a bug a review found: a path MTU change in
//! the middle of a message, the responder's queue under ACK/RNR alternation, transmit fairness
//! between QPs, and SQD holding new WQEs.

mod common;

use std::net::IpAddr;

use common::*;
use snic_rdma::pkt::{self, Path};
use snic_rdma::testing::{End, connect_qp};
use snic_rdma::*;
use snic_time::Instant;
use snic_wire::roce::ext::RethRepr;
use snic_wire::roce::{RoceRepr, bth, opcode};

fn raw(to: &End, from_ip: IpAddr, op: u8, psn: u32, ack_req: bool) -> RoceRepr {
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

fn inject(to: &mut End, from_ip: IpAddr, r: &RoceRepr, payload: &[u8]) {
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
    let wr = SendWr::new(1, WrOp::Write { remote: b.remote(0) }, a.sge(0, 1000));
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

/// Responses the responder queues are bounded (MAX_OUT = 1024 says resp_state.rs), whatever the
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
    let qa2 = a.nic.create_qp(QpInit { max_recv_wr: 64, ..a.init }).unwrap();
    let qb2 = b.nic.create_qp(QpInit { max_recv_wr: 64, ..b.init }).unwrap();
    let (qa1, qb1) = (a.qpn, b.qpn);
    let attr = QpAttr {
        access: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
        ..attr
    };
    connect_qp(&mut a.nic, qa2, qb2, b.ip, 0, 0x100, attr);
    connect_qp(&mut b.nic, qb2, qa2, a.ip, 0x100, 0, attr);
    // QP 1: 200 KiB WRITE (800 packets); QP 2: one small WRITE, posted right after.
    let big = SendWr::new(1, WrOp::Write { remote: b.remote(0) }, a.sge(0, 200 << 10));
    a.nic.post_send(qa1, &big, Instant::ZERO).unwrap();
    let small = SendWr::new(2, WrOp::Write { remote: b.remote(300 << 10) }, a.sge(0, 8));
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
    let wr = SendWr::new(7, WrOp::Write { remote: b.remote(0) }, a.sge(0, 100));
    a.nic.post_send(a.qpn, &wr, Instant::ZERO).unwrap();
    let mut buf = vec![0u8; pkt::MAX_PACKET_LEN];
    assert!(a.nic.poll_transmit(Instant::ZERO, &mut buf).is_none());
    let rts = QpAttr { state: QpState::Rts, ..QpAttr::default() };
    a.nic.modify_qp(a.qpn, &rts, AttrMask::STATE, Instant::ZERO).unwrap();
    let mut net = Net::clean(Instant::ZERO);
    let mut got = Vec::new();
    assert!(net.run(&mut a, &mut b, |a, _| {
        got.extend(a.poll_all());
        !got.is_empty()
    }));
    assert_eq!((got[0].wr_id, got[0].status), (7, WcStatus::Success));
}
