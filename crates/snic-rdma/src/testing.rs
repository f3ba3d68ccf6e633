//! Test kit: two RC NICs connected back to back, written once for every test of the engine
//! (feature `testing`; always on for this crate's own unit tests).
//!
//! - [`ip`]: the address of test host `n`.
//! - [`EndOpts`]: the sizes and settings of one end; its [`EndOpts::config`] and
//!   [`EndOpts::qp_init`] serve tests that build a NIC or a QP of their own.
//! - [`End`]: a NIC with a PD, one registered buffer, one CQ and one RC QP; [`connect_qp`]
//!   takes any QP to RTS the way [`End::connect`] does.
//! - [`Pair`]: two ends connected to each other and a clock; [`Pair::step`] moves packets,
//!   [`Pair::drive_bounded`] runs until quiet, [`advance_to_timer`] jumps to the next timer.
//! - [`drain_cq`] and [`dummy_cqe`]: completions.
//!
//! ```
//! use snic_rdma::testing::{EndOpts, Pair};
//! use snic_rdma::{Access, QpAttr, SendWr, WrOp};
//!
//! let attr = QpAttr { access: Access::ALL, ..QpAttr::default() };
//! let mut p = Pair::new(&EndOpts::default(), attr, [0, 0]);
//! let wr = SendWr::new(1, WrOp::Write { remote: p.b.remote(0) }, p.a.sge(0, 100));
//! let now = p.now;
//! p.a.nic.post_send(p.a.qpn, &wr, now).unwrap();
//! p.drive_bounded(100);
//! assert_eq!(p.a.poll_all().len(), 1);
//! ```

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use snic_dma::MemKind;
use snic_time::Instant;

use crate::verbs::{
    Access, CqId, Cqe, MrInfo, Pd, QpAttr, QpInit, Remote, SgList, Sge, WcOpcode, WcStatus,
};
use crate::{Rnic, RnicConfig, pkt};

/// The address of test host `host`: `10.0.0.host`, or `fd00::host` (the number as the last
/// group) when `v6`.
pub fn ip(v6: bool, host: u8) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, u16::from(host)))
    } else {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, host))
    }
}

/// Sizes and settings of one [`End`]. The default is a small NIC: a 1 MiB host pool and no
/// device memory, a 256 KiB buffer with an MR allowing everything, a 64-entry CQ, a QP of 16
/// send and 16 receive WRs in host memory that signals only what asks to be, over IPv4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndOpts {
    /// Bytes of the NIC's host memory pool (the buffer, and the QP's rings when in host memory).
    pub host_pool: u64,
    /// Bytes of on-chip device memory.
    pub on_chip: u64,
    /// Bytes of on-board device memory.
    pub on_board: u64,
    /// Bytes of the data buffer, in host memory, page-aligned; the MR covers all of it.
    pub buf_len: u64,
    /// Access the MR allows.
    pub mr_access: Access,
    /// Depth of the send CQ (which also takes receive completions unless `recv_cq_depth`).
    pub cq_depth: usize,
    /// A CQ of its own for receive completions, of this depth; `None`: they share the send CQ.
    pub recv_cq_depth: Option<usize>,
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Where the QP's rings live.
    pub placement: MemKind,
    /// Every send WQE makes a CQE, signaled or not.
    pub sq_sig_all: bool,
    /// IPv6 addresses ([`ip`]) instead of IPv4.
    pub v6: bool,
    /// The NIC sizes its send windows to the path and runs loss probes
    /// ([`RnicConfig::path_window`], on by default).
    pub path_window: bool,
}

impl Default for EndOpts {
    fn default() -> Self {
        EndOpts {
            host_pool: 1 << 20,
            on_chip: 0,
            on_board: 0,
            buf_len: 256 << 10,
            mr_access: Access::ALL,
            cq_depth: 64,
            recv_cq_depth: None,
            max_send_wr: 16,
            max_recv_wr: 16,
            placement: MemKind::Host,
            sq_sig_all: false,
            v6: false,
            path_window: true,
        }
    }
}

impl EndOpts {
    /// The NIC configuration of host `host`: its [`ip`] and these memory sizes, the rest
    /// default.
    pub fn config(&self, host: u8) -> RnicConfig {
        RnicConfig {
            local_ip: ip(self.v6, host),
            host_pool: self.host_pool,
            on_chip: self.on_chip,
            on_board: self.on_board,
            path_window: self.path_window,
            ..RnicConfig::default()
        }
    }

    /// A QP of these depths, placement and signaling in `pd`, without an SRQ.
    pub fn qp_init(&self, pd: Pd, send_cq: CqId, recv_cq: CqId) -> QpInit {
        QpInit {
            pd,
            send_cq,
            recv_cq,
            srq: None,
            max_send_wr: self.max_send_wr,
            max_recv_wr: self.max_recv_wr,
            placement: self.placement,
            sq_sig_all: self.sq_sig_all,
        }
    }
}

/// One end of a connection: a NIC with a PD, a buffer and its MR, a CQ and an RC QP (in
/// RESET until [`End::connect`]).
#[derive(Debug)]
pub struct End {
    /// The NIC.
    pub nic: Rnic,
    /// The PD of the MR and the QP.
    pub pd: Pd,
    /// The QP.
    pub qpn: u32,
    /// The QP's send CQ.
    pub cq: CqId,
    /// The QP's receive CQ (`cq` itself unless [`EndOpts::recv_cq_depth`]).
    pub rcq: CqId,
    /// First address of the buffer.
    pub buf: u64,
    /// The MR over the whole buffer.
    pub mr: MrInfo,
    /// The NIC's address.
    pub ip: IpAddr,
    /// What the QP was created with (for more QPs like it: `nic.create_qp(init)`).
    pub init: QpInit,
}

impl End {
    /// Host `host` (its address is [`ip`]`(opts.v6, host)`) built as `opts` says.
    pub fn new(host: u8, opts: &EndOpts) -> End {
        let nic = Rnic::new(opts.config(host)).expect("test NIC");
        End::with_nic(nic, opts)
    }

    /// The PD, buffer, MR, CQ and QP of `opts` on a NIC built by the caller (another address
    /// or UDP port); `opts`' memory sizes and address are not used.
    pub fn with_nic(mut nic: Rnic, opts: &EndOpts) -> End {
        let ip = nic.config().local_ip;
        let pd = nic.alloc_pd();
        let buf = nic.alloc_buf(MemKind::Host, opts.buf_len, 4096).expect("test buffer");
        let mr = nic.reg_mr(pd, buf, opts.buf_len, opts.mr_access).expect("test MR");
        let cq = nic.create_cq(opts.cq_depth);
        let rcq = opts.recv_cq_depth.map_or(cq, |d| nic.create_cq(d));
        let init = opts.qp_init(pd, cq, rcq);
        let qpn = nic.create_qp(init).expect("test QP");
        End { nic, pd, qpn, cq, rcq, buf, mr, ip, init }
    }

    /// Take the QP to RTS towards `peer_qpn` at `peer_ip`, see [`connect_qp`].
    pub fn connect(
        &mut self,
        peer_qpn: u32,
        peer_ip: IpAddr,
        sq_psn: u32,
        rq_psn: u32,
        attr: QpAttr,
    ) {
        connect_qp(&mut self.nic, self.qpn, peer_qpn, peer_ip, sq_psn, rq_psn, attr);
    }

    /// `len` bytes at `off` in the buffer, as a local SG list.
    pub fn sge(&self, off: u64, len: u32) -> SgList {
        SgList::one(Sge { addr: self.buf + off, len, lkey: self.mr.lkey })
    }

    /// The buffer at `off`, as a peer's WRITE / READ / atomic target.
    pub fn remote(&self, off: u64) -> Remote {
        Remote { addr: self.buf + off, rkey: self.mr.rkey }
    }

    /// Every CQE the CQs hold: the send CQ's, oldest first, then the receive CQ's (when it is
    /// another).
    pub fn poll_all(&mut self) -> Vec<Cqe> {
        let mut all = drain_cq(&mut self.nic, self.cq);
        if self.rcq != self.cq {
            all.extend(drain_cq(&mut self.nic, self.rcq));
        }
        all
    }
}

/// Take `qpn` of `nic` from RESET to RTS with `attr`, its addressing filled in: the peer's QP
/// and address, the first PSN this QP sends and the first it expects. Everything else
/// (access, path MTU, timers, retries, read/atomic depths) is `attr`'s. Panics when a step is
/// refused. (RESET to RTS starts no timer, so no time is needed.)
pub fn connect_qp(
    nic: &mut Rnic,
    qpn: u32,
    peer_qpn: u32,
    peer_ip: IpAddr,
    sq_psn: u32,
    rq_psn: u32,
    attr: QpAttr,
) {
    let attr = QpAttr { dest_qpn: peer_qpn, remote: Some(peer_ip), sq_psn, rq_psn, ..attr };
    if let Err(e) = nic.connect_rc(qpn, &attr, Instant::ZERO) {
        panic!("connect QP {qpn} to QP {peer_qpn} at {peer_ip}: {e:?} ({attr:?})");
    }
}

/// Every CQE `cq` holds, oldest first.
pub fn drain_cq(nic: &mut Rnic, cq: CqId) -> Vec<Cqe> {
    let mut all = Vec::new();
    let mut out = [dummy_cqe(); 64];
    loop {
        let n = nic.poll_cq(cq, &mut out).expect("poll the test CQ");
        all.extend_from_slice(&out[..n]);
        if n < out.len() {
            return all;
        }
    }
}

/// A placeholder CQE for `poll_cq` output arrays (a fatal error: a slot `poll_cq` did not fill
/// never passes for a success).
pub fn dummy_cqe() -> Cqe {
    Cqe {
        wr_id: 0,
        status: WcStatus::FatalErr,
        opcode: WcOpcode::Send,
        byte_len: 0,
        qpn: 0,
        src_qp: 0,
        imm: None,
        invalidated_rkey: None,
    }
}

/// Move `now` to the earliest timer either NIC has armed (when that is later) and run both
/// NICs' due timers. Returns `false`, and does nothing, when neither has a timer armed.
pub fn advance_to_timer(nics: [&mut Rnic; 2], now: &mut Instant) -> bool {
    let Some(t) = nics.iter().filter_map(|n| n.poll_timeout()).min() else { return false };
    *now = (*now).max(t);
    for n in nics {
        n.handle_timeout(*now);
    }
    true
}

/// Two ends, host 1 (`a`) and host 2 (`b`), their QPs connected to each other, and the time
/// packets move at. Packets go straight from one NIC's `poll_transmit` to the other's
/// `handle_packet`: no loss, no delay.
pub struct Pair {
    /// Host 1.
    pub a: End,
    /// Host 2.
    pub b: End,
    /// The time of [`Pair::step`]; only the test moves it.
    pub now: Instant,
    buf: Vec<u8>,
}

impl fmt::Debug for Pair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pair")
            .field("a", &self.a)
            .field("b", &self.b)
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

impl Pair {
    /// Hosts 1 and 2 built as `opts` says, connected with `attr`; `psn[0]` is the first PSN A
    /// sends (B expects), `psn[1]` the first B sends. The clock starts at zero.
    pub fn new(opts: &EndOpts, attr: QpAttr, psn: [u32; 2]) -> Pair {
        Pair::connect(End::new(1, opts), End::new(2, opts), attr, psn)
    }

    /// `a` and `b` (built by the caller) connected as in [`Pair::new`].
    pub fn connect(mut a: End, mut b: End, attr: QpAttr, psn: [u32; 2]) -> Pair {
        a.connect(b.qpn, b.ip, psn[0], psn[1], attr);
        b.connect(a.qpn, a.ip, psn[1], psn[0], attr);
        Pair { a, b, now: Instant::ZERO, buf: vec![0u8; pkt::MAX_PACKET_LEN] }
    }

    /// Move every packet A has ready to B, then every packet B has ready to A, at `now`.
    /// Returns how many moved.
    pub fn step(&mut self) -> usize {
        self.step_at_most(usize::MAX)
    }

    /// [`Pair::step`] until nothing moves; returns how many packets moved in all. Panics once
    /// more than `max_packets` moved: the NICs keep each other busy (a livelock).
    #[track_caller]
    pub fn drive_bounded(&mut self, max_packets: usize) -> usize {
        let mut total = 0;
        loop {
            let moved = self.step_at_most((max_packets - total).saturating_add(1));
            total += moved;
            assert!(
                total <= max_packets,
                "Pair::drive_bounded: more than {max_packets} packets and the NICs are not \
                 quiet (livelock?) at {}; stats A {:?} B {:?}",
                self.now,
                self.a.nic.stats(),
                self.b.nic.stats()
            );
            if moved == 0 {
                return total;
            }
        }
    }

    /// A step moving at most `limit` packets each way.
    fn step_at_most(&mut self, limit: usize) -> usize {
        let Pair { a, b, now, buf } = self;
        transfer(&mut a.nic, &mut b.nic, *now, buf, limit)
            + transfer(&mut b.nic, &mut a.nic, *now, buf, limit)
    }

    /// [`advance_to_timer`] on both NICs and [`Pair::now`].
    pub fn advance_to_timer(&mut self) -> bool {
        advance_to_timer([&mut self.a.nic, &mut self.b.nic], &mut self.now)
    }
}

/// Up to `limit` packets from `from` to `to` at `now`; returns how many.
fn transfer(from: &mut Rnic, to: &mut Rnic, now: Instant, buf: &mut [u8], limit: usize) -> usize {
    let mut moved = 0;
    while moved < limit {
        let Some(n) = from.poll_transmit(now, buf) else { break };
        to.handle_packet(now, &buf[..n]);
        moved += 1;
    }
    moved
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::{Mtu, RecvWr, SendWr, WrOp};

    fn attr() -> QpAttr {
        QpAttr { access: Access::ALL, path_mtu: Mtu::M1024, ..QpAttr::default() }
    }

    #[test]
    fn ends_get_their_host_address_and_a_whole_buffer_mr() {
        assert_eq!(ip(false, 7), "10.0.0.7".parse::<IpAddr>().unwrap());
        assert_eq!(ip(true, 2), "fd00::2".parse::<IpAddr>().unwrap());
        let o = EndOpts { v6: true, buf_len: 8192, ..EndOpts::default() };
        let e = End::new(3, &o);
        assert_eq!((e.ip, e.nic.config().local_ip), (ip(true, 3), ip(true, 3)));
        assert_eq!((e.mr.addr, e.mr.len, e.mr.access), (e.buf, 8192, Access::ALL));
        assert_eq!(e.sge(16, 4).as_slice(), &[Sge { addr: e.buf + 16, len: 4, lkey: e.mr.lkey }]);
        assert_eq!(e.remote(8), Remote { addr: e.buf + 8, rkey: e.mr.rkey });
    }

    #[test]
    fn pair_moves_a_write_and_a_send_then_goes_quiet() {
        let mut p = Pair::new(&EndOpts::default(), attr(), [0xff_fff0, 7]);
        let data: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        p.a.nic.mem_mut().write(p.a.buf, &data).unwrap();
        let now = p.now;
        let rwr = RecvWr { wr_id: 9, sgl: p.b.sge(0x8000, 4096) };
        p.b.nic.post_recv(p.b.qpn, &rwr, now).unwrap();
        let w = SendWr::new(1, WrOp::Write { remote: p.b.remote(0) }, p.a.sge(0, 3000));
        let s = SendWr::new(2, WrOp::Send, p.a.sge(0, 100));
        p.a.nic.post_send_batch(p.a.qpn, &[w.signaled(true), s.signaled(true)], now).unwrap();
        let moved = p.drive_bounded(100);
        assert!(moved >= 4, "3 WRITE packets, 1 SEND, ACKs: {moved}");
        assert_eq!(p.step(), 0);
        assert!(p.b.nic.mem().slice(p.b.buf, 3000).unwrap() == &data[..]);
        let sent: Vec<_> = p.a.poll_all().iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(sent, [(1, WcStatus::Success), (2, WcStatus::Success)]);
        let recv = p.b.poll_all();
        assert_eq!((recv.len(), recv[0].wr_id, recv[0].byte_len), (1, 9, 100));
        assert!(p.a.poll_all().is_empty());
    }

    #[test]
    fn a_lost_request_comes_back_after_advancing_to_the_timer() {
        let attr = QpAttr { timeout: 10, ..attr() };
        let mut p = Pair::new(&EndOpts::default(), attr, [0, 0]);
        let now = p.now;
        let w = SendWr::new(1, WrOp::Write { remote: p.b.remote(0) }, p.a.sge(0, 10));
        p.a.nic.post_send(p.a.qpn, &w.signaled(true), now).unwrap();
        // Lose what A sends.
        let mut buf = vec![0u8; pkt::MAX_PACKET_LEN];
        while p.a.nic.poll_transmit(now, &mut buf).is_some() {}
        assert_eq!(p.drive_bounded(10), 0);
        assert!(p.advance_to_timer());
        assert!(p.now > now);
        assert!(p.drive_bounded(10) > 0);
        assert_eq!(p.a.poll_all()[0].status, WcStatus::Success);
        assert_eq!(p.a.nic.stats().retransmits, 1);
        assert!(!p.advance_to_timer(), "nothing outstanding, no timer");
    }

    #[test]
    #[should_panic(expected = "livelock")]
    fn drive_bounded_panics_past_its_bound() {
        let mut p = Pair::new(&EndOpts::default(), attr(), [0, 0]);
        let now = p.now;
        let w = SendWr::new(1, WrOp::Write { remote: p.b.remote(0) }, p.a.sge(0, 10_000));
        p.a.nic.post_send(p.a.qpn, &w, now).unwrap();
        p.drive_bounded(3);
    }
}
