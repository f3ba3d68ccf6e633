//! One side of a benchmark ([`Side`]): the NIC, its RoCE transport, one connected QP and its
//! buffer, set up over the control connection, and the loops that drive it until something
//! happens.

use anyhow::{Context, Result, anyhow, bail, ensure};
use snic_dma::MemKind;
use snic_rdma::{
    Access, CqId, Cqe, MrInfo, QpInit, RecvWr, Remote, Rnic, RnicConfig, SgList, Sge, WcStatus,
};
use snic_roce::cm::{self, QpInfo};
use snic_roce::transport::{RoceTransport, TransportOpts};
use snic_time::{Clock, MonotonicClock};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::args::RdmaArgs;
use super::ctrl::{Ctrl, canonical, expect_tag, tag};
use super::plan::Plan;
use super::takeover::{self, Phase};
use super::verify::marker;
use crate::handover::ChannelListener;

/// How long the tool busy-polls after the last packet before it sleeps in poll(2).
const SPIN: Duration = Duration::from_millis(2);

/// One side of a benchmark: the NIC, its transport, one QP and its buffer.
#[derive(Debug)]
pub(super) struct Side {
    pub(super) rnic: Rnic,
    pub(super) tx: RoceTransport,
    pub(super) clock: MonotonicClock,
    pub(super) ctrl: Ctrl,
    pub(super) qpn: u32,
    pub(super) scq: CqId,
    pub(super) rcq: CqId,
    pub(super) mr: MrInfo,
    pub(super) remote: QpInfo,
    pub(super) plan: Plan,
    /// The last time anything moved (a completion, a message, the awaited memory change).
    last_progress: std::time::Instant,
    /// When a packet last came in or went out (busy-polling goes on for [`SPIN`] after it).
    last_busy: std::time::Instant,
    timeout: Duration,
    pub(super) cqes: Vec<Cqe>,
    /// Send completions polled so far (all sizes).
    pub(super) sends_done: u64,
    /// Where a new server process may connect to take over (`--handover`).
    pub(super) listener: Option<ChannelListener>,
    /// Where the server loop is while it waits for a control message at a point a takeover
    /// may happen (`None`: not here).
    pub(super) phase: Option<Phase>,
}

/// Set up this side: NIC, buffer, QP, the QP exchange over `ctrl`, the RoCE transport.
/// `client`: this is the side that connected the control connection.
///
/// When both sides use the same address (two processes on one host without `--local-ip`: the
/// only IPv6 loopback address `::1`, or any one address of the host) both bind UDP port 4791
/// there with `SO_REUSEPORT`, and the client's receive socket is connected to the server's QP's
/// source port ([`RoceTransport::bind_shared`]); the client takes the second QP number so that
/// the two QPs (both processes would otherwise number theirs 0x11) send from different UDP
/// source ports. RoCEv2's destination port stays 4791 on the wire both ways.
pub(super) fn setup(
    ctrl: Ctrl,
    plan: Plan,
    a: &RdmaArgs,
    local_ip: IpAddr,
    client: bool,
) -> Result<Side> {
    let (mut rnic, addr) = engine(plan, a, local_ip)?;
    let pd = rnic.alloc_pd();
    let buf_len = u64::from(plan.buf_slots()) * plan.stride;
    let kind = a.mem.kind();
    let mr = rnic.reg_mr(pd, addr, buf_len, Access::ALL).map_err(|e| anyhow!("reg_mr: {e}"))?;
    let depth = a.tx_depth.max(plan.slots);
    let scq = rnic.create_cq(depth as usize * 2 + 64);
    let rcq = rnic.create_cq(depth as usize * 2 + 64);
    let init = QpInit {
        pd,
        send_cq: scq,
        recv_cq: rcq,
        srq: None,
        max_send_wr: depth,
        max_recv_wr: depth,
        placement: kind,
        sq_sig_all: false,
    };
    let peer = ctrl.s.peer_addr().context("control connection")?.ip();
    if client && canonical(peer) == canonical(local_ip) {
        // One address for both processes: leave the first QP number to the server's QP.
        rnic.create_qp(init).map_err(|e| anyhow!("create_qp: {e}"))?;
    }
    let qpn = rnic.create_qp(init).map_err(|e| anyhow!("create_qp: {e}"))?;
    let psn = initial_psn(qpn);
    let mtu = a.mtu_towards(peer)?;
    let local = QpInfo {
        qpn,
        psn,
        gid: local_ip,
        udp_port: a.port,
        rkey: mr.rkey,
        addr: mr.addr,
        len: mr.len,
        mtu,
    };
    let mut ctrl = ctrl;
    let remote = cm::exchange(&mut ctrl.s, &local).context("QP exchange")?;
    ensure!(
        remote.gid.is_ipv4() == local_ip.is_ipv4(),
        "address families differ: local {local_ip}, remote {}",
        remote.gid
    );
    ensure!(
        remote.udp_port == a.port,
        "the peer uses UDP port {} (here {})",
        remote.udp_port,
        a.port
    );
    let clock = MonotonicClock::new();
    cm::connect_qp_mtu(&mut rnic, qpn, &remote, psn, mtu, clock.now())
        .map_err(|e| anyhow!("connect QP: {e}"))?;
    let opts = TransportOpts { gso: !a.no_gso, gro: !a.no_gso, ..TransportOpts::default() };
    let bind = SocketAddr::new(local_ip, a.port);
    let tx = if canonical(remote.gid) == canonical(local_ip) {
        let theirs = snic_rdma::pkt::sport_for(remote.qpn, qpn);
        ensure!(
            theirs != snic_rdma::pkt::sport_for(qpn, remote.qpn),
            "both QPs ({qpn:#x} here, {:#x} at the peer) would send from UDP port {theirs} of \
             {local_ip}: give one side another address with --local-ip",
            remote.qpn
        );
        let from = client.then_some(SocketAddr::new(remote.gid, theirs));
        RoceTransport::bind_shared(bind, from, opts).with_context(|| {
            format!(
                "cannot bind RoCE UDP socket {bind} beside the peer's (same address: both \
                 need SO_REUSEPORT; an older peer may not set it: use --local-ip)"
            )
        })?
    } else {
        RoceTransport::bind(bind, opts)
            .with_context(|| format!("cannot bind RoCE UDP socket {bind}"))?
    };
    tracing::debug!(?local, ?remote, "QP connected");
    Ok(Side {
        rnic,
        tx,
        clock,
        ctrl,
        qpn,
        scq,
        rcq,
        mr,
        remote,
        plan,
        last_progress: std::time::Instant::now(),
        last_busy: std::time::Instant::now(),
        timeout: Duration::from_secs_f64(a.timeout),
        cqes: vec![BLANK_CQE; 64],
        sends_done: 0,
        listener: None,
        phase: None,
    })
}

/// The NIC of one side and its buffer (of `plan`'s slots; returns its engine address). The
/// same arguments give the same layout: a server taking over from another finds the
/// buffer at the address the old one registered.
pub(super) fn engine(plan: Plan, a: &RdmaArgs, local_ip: IpAddr) -> Result<(Rnic, u64)> {
    let kind = a.mem.kind();
    let buf_len = u64::from(plan.buf_slots()) * plan.stride;
    let rings = 8 << 20;
    let mut cfg = RnicConfig {
        local_ip,
        udp_port: a.port,
        path_window: !a.fixed_window,
        ..RnicConfig::default()
    };
    if let Some(f) = a.window_floor {
        cfg.window_floor = f;
    }
    match kind {
        MemKind::Host => cfg.host_pool = buf_len + rings,
        _ => {
            cfg.host_pool = rings;
            cfg.on_board = cfg.on_board.max(buf_len + rings);
        }
    }
    let mut rnic = Rnic::new(cfg).map_err(|e| anyhow!("RDMA NIC: {e}"))?;
    let addr = rnic.alloc_buf(kind, buf_len, 4096).map_err(|e| anyhow!("buffer: {e}"))?;
    Ok((rnic, addr))
}

/// A PSN that differs between runs (perftest draws it at random) but needs no RNG here.
fn initial_psn(qpn: u32) -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (t ^ qpn.rotate_left(11)) & snic_rdma::psn::MASK
}

/// Filler of the CQE buffer `poll_cq` writes into.
const BLANK_CQE: Cqe = Cqe {
    wr_id: 0,
    status: WcStatus::Success,
    opcode: snic_rdma::WcOpcode::Send,
    byte_len: 0,
    qpn: 0,
    src_qp: 0,
    imm: None,
    invalidated_rkey: None,
};

impl Side {
    /// A side of a server that took over (see [`takeover`]): its parts adopted from the old
    /// process.
    #[allow(clippy::too_many_arguments, reason = "the parts of a side, each named")]
    pub(super) fn adopted(
        rnic: Rnic,
        clock: MonotonicClock,
        tx: RoceTransport,
        ctrl: Ctrl,
        ids: takeover::SideIds,
        plan: Plan,
        timeout: Duration,
    ) -> Side {
        Side {
            rnic,
            tx,
            clock,
            ctrl,
            qpn: ids.qpn,
            scq: CqId(ids.scq),
            rcq: CqId(ids.rcq),
            mr: ids.mr,
            remote: ids.remote,
            plan,
            last_progress: std::time::Instant::now(),
            last_busy: std::time::Instant::now(),
            timeout,
            cqes: vec![BLANK_CQE; 64],
            sends_done: ids.sends_done,
            listener: None,
            phase: None,
        }
    }

    pub(super) fn slot_addr(&self, slot: u64) -> u64 {
        self.mr.addr + (slot % u64::from(self.plan.buf_slots())) * self.plan.stride
    }
    fn remote_slot(&self, slot: u64) -> u64 {
        self.remote.addr + (slot % u64::from(self.plan.buf_slots())) * self.plan.stride
    }
    pub(super) fn sge(&self, slot: u64, len: u32) -> SgList {
        SgList::one(Sge { addr: self.slot_addr(slot), len, lkey: self.mr.lkey })
    }
    pub(super) fn remote(&self, slot: u64) -> Remote {
        Remote { addr: self.remote_slot(slot), rkey: self.remote.rkey }
    }

    /// Move packets both ways and run due timers; true when anything happened.
    pub(super) fn progress(&mut self) -> Result<bool> {
        let now = self.clock.now();
        let got = self.tx.recv(&mut self.rnic, now).context("RoCE receive")?;
        let now = self.clock.now();
        if self.rnic.poll_timeout().is_some_and(|t| t <= now) {
            self.rnic.handle_timeout(now);
        }
        let sent = self.tx.send(&mut self.rnic, now).context("RoCE send")?;
        if got + sent > 0 {
            self.last_busy = std::time::Instant::now();
        }
        Ok(got + sent > 0)
    }

    /// Nothing to do: block until a packet may have arrived or a timer is due (at most 1 ms,
    /// so the control socket and memory conditions are looked at regularly).
    pub(super) fn idle(&mut self) -> Result<()> {
        // Busy-poll while traffic is recent (perftest polls the CQ the same way): sleeping in
        // poll(2) costs a wake-up (~10 us here) per round trip. Block only after SPIN of quiet.
        // Each spin gives the CPU away (sched_yield): on a busy host the peer process may be
        // queued behind this one, and it alone can make progress; on an idle CPU the call
        // returns at once, as a spin would.
        if self.last_busy.elapsed() < SPIN {
            std::thread::yield_now();
            return self.check_stall();
        }
        let now = self.clock.now();
        let mut d = Duration::from_millis(1);
        if let Some(t) = self.rnic.poll_timeout() {
            d = d.min(t - now);
        }
        if !d.is_zero() {
            self.tx.wait(Some(d)).context("RoCE wait")?;
        }
        self.check_stall()
    }

    pub(super) fn touch(&mut self) {
        self.last_progress = std::time::Instant::now();
    }

    fn check_stall(&self) -> Result<()> {
        if self.last_progress.elapsed() > self.timeout {
            bail!(
                "no progress for {:?} (is the peer running? engine stats: {:?})",
                self.timeout,
                self.rnic.stats()
            );
        }
        Ok(())
    }

    /// Poll `cq`; every CQE must be a success.
    pub(super) fn poll(&mut self, cq: CqId) -> Result<usize> {
        let n = self.rnic.poll_cq(cq, &mut self.cqes).map_err(|e| anyhow!("poll_cq: {e}"))?;
        for c in &self.cqes[..n] {
            if c.status != WcStatus::Success {
                bail!(
                    "completion error: {} ({:?}, wr_id {}, QP {:#x})",
                    c.status.name(),
                    c.opcode,
                    c.wr_id,
                    c.qpn
                );
            }
        }
        if n > 0 {
            self.touch();
        }
        if cq == self.scq {
            self.sends_done += n as u64;
        }
        Ok(n)
    }

    /// Drive the engine until a control message arrives.
    pub(super) fn drive_until_msg(&mut self) -> Result<Vec<u64>> {
        let mut busy = false;
        let mut rounds = 0u32;
        loop {
            // While packets flow the control socket is looked at only every 64 rounds: a
            // message is never urgent, a read per round would cost a syscall per batch.
            rounds = rounds.wrapping_add(1);
            let look = !busy || rounds.is_multiple_of(64);
            if look && let Some(m) = self.ctrl.try_recv()? {
                self.touch();
                return Ok(m);
            }
            // A safe point for a takeover: no control message half handled, the engine
            // between two rounds of I/O.
            if look
                && let Some(phase) = self.phase
                && let Some(ch) = self.listener.as_ref().map(|l| l.try_accept()).transpose()?
                && let Some(ch) = ch
            {
                takeover::offer(self, &ch, phase)?;
                self.touch();
            }
            busy = self.progress()?;
            // Send completions of the passive side are not waited for; drain them so the CQ
            // never overflows.
            let _ = self.poll(self.scq)?;
            if !busy {
                self.idle()?;
            }
        }
    }

    /// Both sides say DONE and keep driving until the peer's DONE: the last ACKs still flow.
    pub(super) fn finish(&mut self) -> Result<()> {
        self.ctrl.send(&[tag::DONE])?;
        let m = self.drive_until_msg()?;
        expect_tag(&m, tag::DONE)
    }

    pub(super) fn mem_write(&mut self, addr: u64, data: &[u8]) -> Result<()> {
        self.rnic.mem_mut().write(addr, data).map_err(|e| anyhow!("buffer write: {e}"))
    }

    pub(super) fn mem_read(&self, addr: u64, len: usize) -> Result<&[u8]> {
        self.rnic.mem().slice(addr, len).map_err(|e| anyhow!("buffer read: {e}"))
    }
}

pub(super) fn post_recv(s: &mut Side, slot: u64, size: u32) -> Result<()> {
    let wr = RecvWr { wr_id: slot, sgl: s.sge(slot, size) };
    let now = s.clock.now();
    s.rnic.post_recv(s.qpn, &wr, now).map_err(|e| anyhow!("post_recv: {e}"))
}

/// Drive until one receive completion of `size` bytes; returns it.
pub(super) fn wait_recv(s: &mut Side, size: u32) -> Result<Cqe> {
    let mut got = None;
    drive_until(s, |s| {
        let n = s.poll(s.rcq)?;
        if n > 0 {
            ensure!(n == 1, "more receive completions than RECVs posted");
            got = Some(s.cqes[0]);
        }
        let _ = s.poll(s.scq)?;
        Ok(got.is_some())
    })?;
    let c = got.ok_or_else(|| anyhow!("no receive completion"))?;
    ensure!(c.byte_len == size, "received {} bytes, expected {size}", c.byte_len);
    Ok(c)
}

/// Drive until the last byte of the ping-pong buffer shows iteration `i`'s marker (the WRITE
/// has landed: its packets are placed in order). Send completions are drained meanwhile so the
/// CQ never overflows.
pub(super) fn wait_marker(s: &mut Side, at: u64, i: u64) -> Result<()> {
    drive_until(s, |s| {
        s.poll(s.scq)?;
        Ok(s.mem_read(at, 1)?[0] == marker(i))
    })
}

/// Drive the engine until `done` holds (looked at after every round of I/O).
pub(super) fn drive_until(
    s: &mut Side,
    mut done: impl FnMut(&mut Side) -> Result<bool>,
) -> Result<()> {
    loop {
        if done(s)? {
            s.touch();
            return Ok(());
        }
        if !s.progress()? {
            if done(s)? {
                s.touch();
                return Ok(());
            }
            s.idle()?;
        }
    }
}
