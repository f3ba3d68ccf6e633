//! RoCEv2 over real UDP sockets on loopback: two `Rnic`s on 127.0.0.1:P and 127.0.0.2:P (one
//! RoCE port, two addresses, as two hosts would be), joined by `RoceTransport`s.
//!
//! Checked: a hand-built packet crosses byte-exact (the rebuilt IP + UDP headers are the ones
//! the sender's ICRC covered) and is counted by the engine, ECN CE survives, GSO leaves as
//! separate datagrams, an unbindable source port falls back with a correct ICRC; and the
//! engine's 1 MiB WRITE, READ and SEND between the two NICs, with data verified.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use snic_rdma::pkt::{self, ECN_CE, ECN_ECT0, Path};
use snic_rdma::testing::{End, EndOpts, dummy_cqe};
use snic_rdma::{
    CqId, Cqe, MrInfo, RecvWr, Remote, Rnic, RnicConfig, SendWr, SgList, Sge, WcOpcode, WcStatus,
    WrOp,
};
use snic_roce::cm::{QpInfo, connect_qp};
use snic_roce::transport::{RoceTransport, TransportOpts};
use snic_time::{Clock, Instant, MonotonicClock};
use snic_wire::roce::{RoceRepr, bth, opcode};

const A_IP: &str = "127.0.0.1";
const B_IP: &str = "127.0.0.2";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Bind transports on A_IP:P and B_IP:P for a free random port P (tests run in parallel).
fn bind_pair(opts: TransportOpts) -> (RoceTransport, RoceTransport, u16) {
    for _ in 0..100 {
        let p: u16 = 20_000 + rand::random::<u16>() % 20_000;
        let Ok(a) = RoceTransport::bind(SocketAddr::new(ip(A_IP), p), opts) else { continue };
        let Ok(b) = RoceTransport::bind(SocketAddr::new(ip(B_IP), p), opts) else { continue };
        return (a, b, p);
    }
    panic!("no free port pair");
}

/// Each side's NIC, CQ, QP and registered buffer (2 MiB).
fn opts() -> EndOpts {
    EndOpts {
        host_pool: 8 << 20,
        buf_len: 2 << 20,
        cq_depth: 256,
        max_send_wr: 64,
        max_recv_wr: 64,
        ..EndOpts::default()
    }
}

fn nic(local: &str, port: u16) -> Rnic {
    Rnic::new(RnicConfig { local_ip: ip(local), udp_port: port, ..opts().config(1) }).unwrap()
}

/// A SEND ONLY request packet from `src` to `dst` (the shape the engine emits).
fn send_only(path: &Path, dest_qp: u32, payload: &[u8]) -> Vec<u8> {
    let r = RoceRepr::new(bth::Repr {
        opcode: opcode::RC_SEND_ONLY,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        pkey: bth::PKEY_DEFAULT,
        fecn: false,
        becn: false,
        dest_qp,
        ack_req: true,
        psn: 0,
    });
    let mut buf = vec![0u8; pkt::MAX_PACKET_LEN];
    let n = pkt::build(&mut buf, path, &r, payload.len(), |b: &mut [u8]| -> Result<(), ()> {
        b.copy_from_slice(payload);
        Ok(())
    })
    .unwrap();
    buf.truncate(n);
    buf
}

fn path(sport: u16, dport: u16, ecn: u8) -> Path {
    Path { src: ip(A_IP), dst: ip(B_IP), sport, dport, dscp: 26, ecn }
}

/// Hand `pkts` to the transport (all of them, retrying a full socket buffer).
fn send_all(t: &mut RoceTransport, pkts: &[Vec<u8>]) {
    let mut it = pkts.iter();
    t.send_from(|buf| {
        let p = it.next()?;
        buf[..p.len()].copy_from_slice(p);
        Some(p.len())
    })
    .unwrap();
    let guard = std::time::Instant::now();
    while t.tx_pending() > 0 {
        assert!(guard.elapsed() < Duration::from_secs(10), "send stuck: {:?}", t.stats());
        t.send_from(|_| None).unwrap();
    }
}

/// Receive with `f` until it has seen `want` packets (10 s hang guard).
fn recv_n(t: &mut RoceTransport, want: usize, mut f: impl FnMut(&[u8])) {
    let mut got = 0;
    let guard = std::time::Instant::now();
    while got < want {
        assert!(guard.elapsed() < Duration::from_secs(10), "got {got} of {want}: {:?}", t.stats());
        got += t.recv_with(&mut f).unwrap();
        if got < want {
            t.wait(Some(Duration::from_millis(10))).unwrap();
        }
    }
}

#[test]
fn built_packet_crosses_byte_exact_with_ce() {
    let (mut ta, mut tb, p) = bind_pair(TransportOpts::default());
    let path = path(pkt::sport_for(0x11, 0x22), p, ECN_CE);
    let sent = send_only(&path, 0x22, b"hello over a real socket");
    send_all(&mut ta, std::slice::from_ref(&sent));
    let mut got = Vec::new();
    recv_n(&mut tb, 1, |pkt| got.push(pkt.to_vec()));
    // The rebuilt IPv4 + UDP headers are exactly the sender's: identification 0, DF, TTL 64,
    // the TOS byte with DSCP and CE, the QP-hash source port, the RoCE port.
    assert_eq!(got, vec![sent.clone()]);
    let rx = pkt::parse(&got[0], p).unwrap();
    assert!(rx.ce);
    assert_eq!(rx.sport, path.sport);
    assert_eq!(ta.stats().tx_datagrams, 1);
    assert_eq!(ta.stats().sport_fallbacks, 0);
    assert_eq!(tb.stats().rx_datagrams, 1);
    assert_eq!(tb.stats().rx_bytes as usize, sent.len() - 28);
}

#[test]
fn engine_counts_received_packet_and_ce() {
    let (mut ta, mut tb, p) = bind_pair(TransportOpts::default());
    let mut b = nic(B_IP, p);
    let pd = b.alloc_pd();
    let cq = b.create_cq(64);
    let qpn = b.create_qp(opts().qp_init(pd, cq, cq)).unwrap();
    // Expect requests from A's QP 0x77, so the packet passes the peer check.
    let remote = QpInfo {
        qpn: 0x77,
        psn: 0,
        gid: ip(A_IP),
        udp_port: p,
        rkey: 0,
        addr: 0,
        len: 0,
        mtu: 1024,
    };
    connect_qp(&mut b, qpn, &remote, 0, Instant::ZERO).unwrap();
    let sent = send_only(&path(pkt::sport_for(0x77, qpn), p, ECN_CE), qpn, &[5u8; 100]);
    send_all(&mut ta, std::slice::from_ref(&sent));
    let guard = std::time::Instant::now();
    while b.stats().rx_packets == 0 {
        assert!(guard.elapsed() < Duration::from_secs(10));
        tb.recv(&mut b, Instant::ZERO).unwrap();
    }
    let s = *b.stats();
    assert_eq!(s.rx_packets, 1);
    assert_eq!(s.rx_bytes as usize, sent.len());
    assert_eq!(s.rx_bad_icrc + s.rx_malformed + s.rx_not_roce + s.rx_wrong_peer, 0, "{s:?}");
    assert_eq!(s.ecn_ce_rcvd, 1);
}

#[test]
fn gso_leaves_as_separate_datagrams() {
    let (mut ta, _tb, _) = bind_pair(TransportOpts { batch: 64, gso: true, gro: false });
    let sink = UdpSocket::bind((ip(B_IP), 0)).unwrap();
    let q = sink.local_addr().unwrap().port();
    let pa = path(pkt::sport_for(1, 2), q, ECN_ECT0);
    // 20 equal-sized packets and a shorter last one: one GSO buffer on the sending side.
    let mut pkts: Vec<Vec<u8>> = (0..20u8).map(|i| send_only(&pa, 2, &[i; 1024])).collect();
    pkts.push(send_only(&pa, 2, &[99u8; 100]));
    send_all(&mut ta, &pkts);
    let st = ta.stats();
    assert_eq!(st.tx_datagrams, 21);
    if ta.opts().gso {
        assert_eq!(st.gso_sends, 1, "{st:?}");
    }
    sink.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 65536];
    for (i, want) in pkts.iter().enumerate() {
        let (n, from) = sink.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], &want[28..], "datagram {i}");
        assert_eq!(from, SocketAddr::new(ip(A_IP), pa.sport));
    }
}

#[test]
fn gro_buffers_are_split_per_datagram() {
    let (mut ta, mut tb, p) = bind_pair(TransportOpts::default());
    let pa = path(pkt::sport_for(3, 4), p, ECN_ECT0);
    let pkts: Vec<Vec<u8>> = (0..30u8).map(|i| send_only(&pa, 4, &[i; 2048])).collect();
    send_all(&mut ta, &pkts);
    let mut got = Vec::new();
    recv_n(&mut tb, pkts.len(), |pkt| got.push(pkt.to_vec()));
    assert_eq!(got, pkts);
    // On loopback a GSO buffer reaches a GRO socket whole, and is split here.
    if ta.opts().gso && tb.opts().gro {
        assert!(tb.stats().gro_buffers >= 1, "{:?}", tb.stats());
    }
}

#[test]
fn unbindable_source_port_falls_back_with_right_icrc() {
    let (mut ta, mut tb, p) = bind_pair(TransportOpts::default());
    // Someone else holds the QP's source port on A's address.
    let sport = pkt::sport_for(0x55, 0x66);
    let squatter = UdpSocket::bind((ip(A_IP), sport));
    let sent = send_only(&path(sport, p, ECN_ECT0), 0x66, b"fallback");
    send_all(&mut ta, std::slice::from_ref(&sent));
    let mut got = Vec::new();
    recv_n(&mut tb, 1, |pkt| got.push(pkt.to_vec()));
    let rx = pkt::parse(&got[0], p).expect("ICRC still right");
    if squatter.is_ok() {
        assert_eq!(ta.stats().sport_fallbacks, 1);
        assert_eq!(rx.sport, p, "left from the receive socket");
    }
    assert_eq!(rx.payload(), b"fallback");
}

// ----- the engine end to end -----

/// One side: NIC, transport, CQ, QP, and a 2 MiB registered buffer.
struct Side {
    nic: Rnic,
    t: RoceTransport,
    cq: CqId,
    qpn: u32,
    mr: MrInfo,
}

fn side(local: &str, t: RoceTransport, port: u16) -> Side {
    let End { nic, cq, qpn, mr, .. } = End::with_nic(nic(local, port), &opts());
    Side { nic, t, cq, qpn, mr }
}

fn info(s: &Side, psn: u32, port: u16) -> QpInfo {
    QpInfo {
        qpn: s.qpn,
        psn,
        gid: s.nic.config().local_ip,
        udp_port: port,
        rkey: s.mr.rkey,
        addr: s.mr.addr,
        len: s.mr.len,
        mtu: 4096,
    }
}

fn connected_pair() -> (Side, Side) {
    let (ta, tb, p) = bind_pair(TransportOpts::default());
    let mut a = side(A_IP, ta, p);
    let mut b = side(B_IP, tb, p);
    let (ia, ib) = (info(&a, 0x10_0000, p), info(&b, 0xff_fff0, p));
    connect_qp(&mut a.nic, a.qpn, &ib, ia.psn, Instant::ZERO).unwrap();
    connect_qp(&mut b.nic, b.qpn, &ia, ib.psn, Instant::ZERO).unwrap();
    (a, b)
}

/// Drive both sides in this thread until `cq` of side `which` (0 = a) yields a CQE.
fn run_until_cqe(a: &mut Side, b: &mut Side, which: usize, clock: &MonotonicClock) -> Cqe {
    let guard = std::time::Instant::now();
    loop {
        for s in [&mut *a, &mut *b] {
            let now = clock.now();
            s.t.recv(&mut s.nic, now).unwrap();
            if s.nic.poll_timeout().is_some_and(|t| t <= now) {
                s.nic.handle_timeout(now);
            }
            s.t.send(&mut s.nic, now).unwrap();
        }
        let s = if which == 0 { &mut *a } else { &mut *b };
        let mut out = [dummy_cqe()];
        if s.nic.poll_cq(s.cq, &mut out).unwrap() == 1 {
            return out[0];
        }
        assert!(
            guard.elapsed() < Duration::from_secs(30),
            "no CQE: a {:?} {:?} / b {:?} {:?}",
            a.nic.stats(),
            a.t.stats(),
            b.nic.stats(),
            b.t.stats()
        );
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn write_read_send_over_udp() {
    let clock = MonotonicClock::new();
    let (mut a, mut b) = connected_pair();
    const MIB: usize = 1 << 20;

    // WRITE 1 MiB from A's buffer into B's.
    let data = pattern(MIB, 7);
    a.nic.mem_mut().write(a.mr.addr, &data).unwrap();
    let wr = SendWr::new(
        1,
        WrOp::Write { remote: Remote { addr: b.mr.addr, rkey: b.mr.rkey } },
        SgList::one(Sge { addr: a.mr.addr, len: MIB as u32, lkey: a.mr.lkey }),
    );
    a.nic.post_send(a.qpn, &wr, clock.now()).unwrap();
    let c = run_until_cqe(&mut a, &mut b, 0, &clock);
    assert_eq!((c.wr_id, c.status, c.opcode), (1, WcStatus::Success, WcOpcode::RdmaWrite));
    assert!(b.nic.mem().slice(b.mr.addr, MIB).unwrap() == &data[..], "WRITE data differs");

    // READ 1 MiB back from B (a different pattern there) into A's second MiB.
    let back = pattern(MIB, 99);
    b.nic.mem_mut().write(b.mr.addr + MIB as u64, &back).unwrap();
    let wr = SendWr::new(
        2,
        WrOp::Read { remote: Remote { addr: b.mr.addr + MIB as u64, rkey: b.mr.rkey } },
        SgList::one(Sge { addr: a.mr.addr + MIB as u64, len: MIB as u32, lkey: a.mr.lkey }),
    );
    a.nic.post_send(a.qpn, &wr, clock.now()).unwrap();
    let c = run_until_cqe(&mut a, &mut b, 0, &clock);
    assert_eq!((c.wr_id, c.status, c.opcode), (2, WcStatus::Success, WcOpcode::RdmaRead));
    assert!(a.nic.mem().slice(a.mr.addr + MIB as u64, MIB).unwrap() == &back[..], "READ differs");

    // SEND 10000 bytes into a posted RECV.
    let msg = pattern(10_000, 3);
    a.nic.mem_mut().write(a.mr.addr, &msg).unwrap();
    let rwr = RecvWr {
        wr_id: 30,
        sgl: SgList::one(Sge { addr: b.mr.addr, len: 16_384, lkey: b.mr.lkey }),
    };
    b.nic.post_recv(b.qpn, &rwr, clock.now()).unwrap();
    let wr = SendWr::new(
        3,
        WrOp::Send,
        SgList::one(Sge { addr: a.mr.addr, len: msg.len() as u32, lkey: a.mr.lkey }),
    );
    a.nic.post_send(a.qpn, &wr, clock.now()).unwrap();
    let c = run_until_cqe(&mut a, &mut b, 1, &clock);
    assert_eq!((c.wr_id, c.status, c.opcode), (30, WcStatus::Success, WcOpcode::Recv));
    assert_eq!(c.byte_len as usize, msg.len());
    assert!(b.nic.mem().slice(b.mr.addr, msg.len()).unwrap() == &msg[..], "SEND data differs");
    let c = run_until_cqe(&mut a, &mut b, 0, &clock);
    assert_eq!((c.wr_id, c.status, c.opcode), (3, WcStatus::Success, WcOpcode::Send));

    // Every engine packet went through the sockets: nothing bad arrived on either side.
    for s in [&a, &b] {
        let st = s.nic.stats();
        assert_eq!(st.rx_bad_icrc + st.rx_malformed + st.rx_not_roce + st.rx_wrong_peer, 0);
        // (`sport_fallbacks` may be non-zero: tests running in parallel use the same QPNs on
        // the same addresses, so they compete for the same source ports; fallbacks keep the
        // ICRC right, which the line above checks.)
        assert_eq!(s.t.stats().tx_errors + s.t.stats().tx_malformed, 0);
    }
}

#[test]
fn drive_runs_each_side_in_its_own_thread() {
    let (mut a, b) = connected_pair();
    let done = Arc::new(AtomicBool::new(false));
    let data = pattern(256 << 10, 1);
    a.nic.mem_mut().write(a.mr.addr, &data).unwrap();
    let (baddr, brkey) = (b.mr.addr, b.mr.rkey);
    let server = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut b = b;
            let clock = MonotonicClock::new();
            let ok =
                b.t.drive(
                    &mut b.nic,
                    &clock,
                    |_| done.load(Ordering::Acquire),
                    Duration::from_secs(30),
                )
                .unwrap();
            (ok, b)
        })
    };
    let clock = MonotonicClock::new();
    let wr = SendWr::new(
        9,
        WrOp::Write { remote: Remote { addr: baddr, rkey: brkey } },
        SgList::one(Sge { addr: a.mr.addr, len: data.len() as u32, lkey: a.mr.lkey }),
    );
    a.nic.post_send(a.qpn, &wr, clock.now()).unwrap();
    let cq = a.cq;
    let ok = a.t.drive(&mut a.nic, &clock, |n| n.cq_len(cq) > 0, Duration::from_secs(30)).unwrap();
    done.store(true, Ordering::Release);
    let (bok, b) = server.join().unwrap();
    assert!(ok && bok);
    let mut out = [dummy_cqe()];
    assert_eq!(a.nic.poll_cq(cq, &mut out).unwrap(), 1);
    assert_eq!(out[0].status, WcStatus::Success);
    assert!(b.nic.mem().slice(baddr, data.len()).unwrap() == &data[..]);
}

#[test]
fn ipv6_packet_crosses_with_traffic_class() {
    // One IPv6 loopback address: two ports stand for the two hosts.
    let opts = TransportOpts::default();
    let v6 = ip("::1");
    let Ok(probe) = UdpSocket::bind((v6, 0)) else {
        eprintln!("no IPv6 loopback here; skipped");
        return;
    };
    drop(probe);
    let mut pair = None;
    for _ in 0..100 {
        let p: u16 = 20_000 + rand::random::<u16>() % 20_000;
        let Ok(a) = RoceTransport::bind(SocketAddr::new(v6, p), opts) else { continue };
        let Ok(b) = RoceTransport::bind(SocketAddr::new(v6, p + 1), opts) else { continue };
        pair = Some((a, b, p + 1));
        break;
    }
    let (mut ta, mut tb, pb) = pair.unwrap();
    let path = Path {
        src: v6,
        dst: v6,
        sport: pkt::sport_for(0x21, 0x22),
        dport: pb,
        dscp: 26,
        ecn: ECN_CE,
    };
    let sent = send_only(&path, 0x22, &[0xabu8; 700]);
    send_all(&mut ta, std::slice::from_ref(&sent));
    let mut got = Vec::new();
    recv_n(&mut tb, 1, |pkt| got.push(pkt.to_vec()));
    // Same length and headers; the UDP checksum (masked by the ICRC) is not rebuilt.
    assert_eq!(got[0].len(), sent.len());
    let rx = pkt::parse(&got[0], pb).expect("ICRC right over the rebuilt IPv6 header");
    assert!(rx.ce);
    assert_eq!(rx.sport, path.sport);
    assert_eq!(rx.payload(), &[0xabu8; 700][..]);
    assert_eq!(got[0][..46], sent[..46], "IPv6 header and UDP ports/length");
}
