//! Requester and completer of an RC QP.
//!
//! The requester fetches send WQEs from the SQ ring in memory (`[sq.cidx, sq.pidx)`), keeps a
//! shadow of each fetched WQE (decoded WR, PSN range, READ progress, completion status), and
//! emits request packets from a cursor `(WQE, packet)`. New WQEs get their PSNs when they start;
//! go-back-N moves the cursor back and packets before the furthest PSN ever sent count as
//! retransmissions. The completer takes ACKs, NAKs, READ responses and atomic ACKs, marks WQEs
//! done and retires them strictly in SQ order, writing CQEs.
//!
//! Choices worth knowing (all per IBTA RC as rxe behaves, see `/tmp/rc_protocol.md`):
//! - PSN sequence error NAKs and implied NAKs do not consume `retry_cnt`; only timer expiries
//!   do (a NAK is proof the peer is alive). Any forward progress resets both retry counters.
//! - An implied NAK (an ACK beyond a READ/atomic whose response never came) retransmits once
//!   per READ/atomic until that READ/atomic makes progress or the timer fires, so a burst of
//!   coalesced ACKs does not start a burst of retransmissions. A gap inside a READ's
//!   responses is handled the same way.
//! - A WQE that fails locally (does not decode, bad SGL, gather fault) is a barrier: the WQEs
//!   before it still complete normally, then it completes with its error and the QP enters ERR.
//!   A fatal NAK or exhausted retry counter completes the failing WQE at once (earlier WQEs
//!   still waiting for READ/atomic responses are flushed first, in order) and enters ERR.

use snic_time::Instant;
use snic_wire::roce::ext::{
    AethRepr, AtomicEthRepr, FethRepr, IethRepr, ImmDtRepr, NakCode, RethRepr, Syndrome,
};
use snic_wire::roce::{RoceRepr, bth, opcode};

use crate::nic_core::{Core, Placement};
use crate::pkt::{self, RxPkt};
use crate::psn;
use crate::qp::{self, Qp};
use crate::req_state::Wqe;
use crate::verbs::{Cqe, QpState, SendWr, SgList, WcStatus, WrOp};
use crate::wqe;

/// A READ/atomic request's window floor is this many times `RnicConfig::window_floor`.
const READ_FLOOR_GAIN: u32 = 4;

fn qp_live(qp: &Qp) -> bool {
    matches!(qp.attr.state, QpState::Rts | QpState::Sqd | QpState::Sqe)
}

fn cqe(qp: &Qp, w: &Wqe, status: WcStatus) -> Cqe {
    let byte_len = if status == WcStatus::Success { w.len } else { 0 };
    Cqe {
        wr_id: w.wr.wr_id,
        status,
        opcode: w.wr.op.wc_opcode(),
        byte_len,
        qpn: qp.qpn,
        src_qp: qp.attr.dest_qpn,
        imm: None,
        invalidated_rkey: None,
    }
}

/// Retire done WQEs from the front of the SQ, in order. An error completion (or a CQ
/// overflow) moves the QP to ERR, which flushes the rest.
fn retire(core: &mut Core, qp: &mut Qp, now: Instant) {
    while let Some(status) = qp.req.wqes.front().and_then(|w| w.status) {
        let Some(w) = qp.req.wqes.pop_front() else { break };
        let rs = &mut qp.req;
        rs.started = rs.started.saturating_sub(1);
        if rs.cur > 0 {
            rs.cur -= 1;
        } else {
            rs.set_cursor(0);
        }
        qp.sq.cidx = qp.sq.cidx.wrapping_add(1);
        let mut ok = status == WcStatus::Success;
        if ok {
            core.msg_latency.observe(now.saturating_duration_since(w.posted));
        }
        if !ok || w.wr.signaled || qp.init.sq_sig_all {
            let c = cqe(qp, &w, status);
            if !core.push_cqe(qp.init.send_cq, c) {
                ok = false;
            }
        }
        if !ok {
            qp::enter_error(core, qp, now);
            return;
        }
    }
}

/// Complete `wqes[i]` with `status` now: earlier unfinished WQEs are flushed first (they
/// cannot finish once the QP is in error), then the QP enters ERR.
fn fail_at(core: &mut Core, qp: &mut Qp, i: usize, status: WcStatus, now: Instant) {
    for (j, w) in qp.req.wqes.iter_mut().enumerate() {
        if j >= i {
            break;
        }
        if w.status.is_none() {
            w.status = Some(WcStatus::WrFlushErr);
        }
    }
    if let Some(w) = qp.req.wqes.get_mut(i) {
        w.status = Some(status);
    }
    retire(core, qp, now);
    if qp.attr.state != QpState::Err {
        qp::enter_error(core, qp, now);
    }
}

/// Forward progress: reset retry counters and restart (or stop) the retransmission timer.
/// The path estimator learns what was acknowledged and the loss probe starts again.
fn progress(qp: &mut Qp, now: Instant) {
    let t = crate::ack_timeout(qp.attr.timeout);
    let rs = &mut qp.req;
    rs.retry_used = 0;
    rs.rnr_used = 0;
    let acked = psn::diff(rs.una, rs.path_una).max(0) as u32;
    rs.path_una = rs.una;
    rs.path.on_ack(now, rs.una, acked);
    let armed = rs.waiting() && rs.rnr_until.is_none();
    rs.rto = if armed { t.map(|t| now + t) } else { None };
    rs.probe = if armed && rs.path_on { rs.path.probe_timeout().map(|t| now + t) } else { None };
}

/// Everything up to and including PSN `p` reached the responder. SEND/WRITE WQEs ending at or
/// before `p` are done; a READ/atomic ending before `p` without its response lost it (implied
/// NAK: go back to it). Returns whether `una` advanced.
fn ack_through(qp: &mut Qp, p: u32) -> bool {
    let rs = &mut qp.req;
    let mut implied = None;
    for i in 0..rs.started {
        let w = &mut rs.wqes[i];
        if w.done() {
            continue;
        }
        if w.is_rd_atomic() {
            if psn::before(w.last(), p) {
                if implied.is_none() && !w.retry_pending {
                    implied = Some(i);
                }
                continue;
            }
            break;
        }
        if psn::before(p, w.last()) {
            break;
        }
        w.status = Some(WcStatus::Success);
    }
    let advanced = !psn::before(p, rs.una) && psn::before(p, rs.max_sent);
    if advanced {
        rs.una = psn::add(p, 1);
    }
    if let Some(i) = implied {
        rs.wqes[i].retry_pending = true;
        let off = rs.resume_off(i);
        rs.go_back_to(i, off);
    }
    advanced
}

/// Decode and check the next WQE of the ring into a shadow. `false` when none is posted.
fn fetch(core: &Core, qp: &mut Qp) -> bool {
    let rs = &mut qp.req;
    let idx = qp.sq.cidx.wrapping_add(rs.wqes.len() as u32);
    if rs.wqes.len() as u32 >= qp.sq.len() {
        return false;
    }
    let slot = core.mem.slice(qp.sq.slot_addr(idx), wqe::SQ_SLOT).ok();
    let decoded = slot.map(wqe::decode_send);
    let (wr, status) = match decoded {
        Some(Ok(wr)) => {
            let len = wr.sgl.total_len();
            let write = wr.op.is_read_or_atomic();
            let bad_len = (wr.op.is_atomic() && len != 8)
                || (wr.op.is_flush_or_atomic_write() && !wr.sgl.as_slice().is_empty());
            if len > u64::from(u32::MAX >> 1) || bad_len {
                (wr, Some(WcStatus::LocQpOpErr))
            } else if core.check_sgl(qp.init.pd, &wr.sgl, write).is_err() {
                (wr, Some(WcStatus::LocProtErr))
            } else {
                (wr, None)
            }
        }
        _ => {
            // The slot was overwritten: complete with whatever wr_id it holds.
            let wr_id = slot
                .and_then(|b| b.get(..8))
                .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
            (SendWr::new(wr_id, WrOp::Send, SgList::empty()), Some(WcStatus::LocQpOpErr))
        }
    };
    let len = wr.sgl.total_len().min(u64::from(u32::MAX >> 1)) as u32;
    let mtu = qp.attr.path_mtu.bytes();
    let npsn = if wr.op.is_atomic() { 1 } else { len.div_ceil(mtu).max(1) };
    rs.wqes.push_back(Wqe {
        wr,
        len,
        npsn,
        first: 0,
        rcvd: 0,
        status,
        retry_pending: false,
        posted: Instant::ZERO,
    });
    true
}

fn bth_for(qp: &Qp, op: u8, p: u32, ack_req: bool, solicited: bool) -> bth::Repr {
    bth::Repr {
        opcode: op,
        solicited,
        mig_req: false,
        pad_count: 0,
        pkey: bth::PKEY_DEFAULT,
        fecn: false,
        becn: false,
        dest_qp: qp.attr.dest_qpn,
        ack_req,
        psn: p,
    }
}

/// What one request packet is: headers, where its payload comes from in the message, and how
/// many PSNs it covers.
struct PktPlan {
    roce: RoceRepr,
    payload_off: u64,
    payload_len: usize,
    /// PSNs this packet accounts for (a READ request covers all its remaining responses).
    psns: u32,
    /// It ends the message (the cursor moves on to the next WQE).
    last: bool,
}

fn plan(qp: &Qp, w: &Wqe, off: u32, ack_every: u32, since_ackreq: u32) -> PktPlan {
    let mtu = qp.attr.path_mtu.bytes();
    let wr = &w.wr;
    match wr.op {
        WrOp::Read { remote } => {
            let done = u64::from(w.rcvd) * u64::from(mtu);
            let mut r = RoceRepr::new(bth_for(
                qp,
                opcode::RC_RDMA_READ_REQUEST,
                psn::add(w.first, w.rcvd),
                true,
                false,
            ));
            r.reth = Some(RethRepr {
                va: remote.addr.wrapping_add(done),
                rkey: remote.rkey,
                dma_len: (u64::from(w.len).saturating_sub(done)) as u32,
            });
            PktPlan { roce: r, payload_off: 0, payload_len: 0, psns: w.npsn - w.rcvd, last: true }
        }
        WrOp::CmpSwap { .. } | WrOp::FetchAdd { .. } => {
            let (op, remote, swap, compare) = match wr.op {
                WrOp::CmpSwap { remote, compare, swap } => {
                    (opcode::RC_COMPARE_SWAP, remote, swap, compare)
                }
                WrOp::FetchAdd { remote, add } => (opcode::RC_FETCH_ADD, remote, add, 0),
                _ => (opcode::RC_FETCH_ADD, Default::default(), 0, 0),
            };
            let mut r = RoceRepr::new(bth_for(qp, op, w.first, true, false));
            r.atomic_eth =
                Some(AtomicEthRepr { va: remote.addr, rkey: remote.rkey, swap_add: swap, compare });
            PktPlan { roce: r, payload_off: 0, payload_len: 0, psns: 1, last: true }
        }
        WrOp::Flush { remote, len, level, placement } => {
            let mut r = RoceRepr::new(bth_for(qp, opcode::RC_FLUSH, w.first, true, false));
            r.feth = Some(FethRepr {
                placement_type: placement & 0x0f,
                selectivity_level: level.selectivity(),
            });
            r.reth = Some(RethRepr { va: remote.addr, rkey: remote.rkey, dma_len: len });
            PktPlan { roce: r, payload_off: 0, payload_len: 0, psns: 1, last: true }
        }
        WrOp::AtomicWrite { remote, .. } => {
            // The 8 bytes come from the WQE itself (see `poll_transmit`).
            let mut r = RoceRepr::new(bth_for(qp, opcode::RC_ATOMIC_WRITE, w.first, true, false));
            r.reth = Some(RethRepr {
                va: remote.addr,
                rkey: remote.rkey,
                dma_len: opcode::ATOMIC_WRITE_LEN as u32,
            });
            let n = opcode::ATOMIC_WRITE_LEN;
            PktPlan { roce: r, payload_off: 0, payload_len: n, psns: 1, last: true }
        }
        _ => {
            let first = off == 0;
            let last = off + 1 >= w.npsn;
            let payload_off = u64::from(off) * u64::from(mtu);
            let payload_len = (u64::from(w.len) - payload_off).min(u64::from(mtu)) as usize;
            use opcode::*;
            let (op, reth, imm, ieth) = match (wr.op, first, last) {
                (WrOp::Send, true, true) => (RC_SEND_ONLY, None, None, None),
                (WrOp::SendImm { imm }, true, true) => {
                    (RC_SEND_ONLY_WITH_IMMEDIATE, None, Some(imm), None)
                }
                (WrOp::SendInv { rkey }, true, true) => {
                    (RC_SEND_ONLY_WITH_INVALIDATE, None, None, Some(rkey))
                }
                (WrOp::Send | WrOp::SendImm { .. } | WrOp::SendInv { .. }, true, false) => {
                    (RC_SEND_FIRST, None, None, None)
                }
                (WrOp::Send | WrOp::SendImm { .. } | WrOp::SendInv { .. }, false, false) => {
                    (RC_SEND_MIDDLE, None, None, None)
                }
                (WrOp::Send, false, true) => (RC_SEND_LAST, None, None, None),
                (WrOp::SendImm { imm }, false, true) => {
                    (RC_SEND_LAST_WITH_IMMEDIATE, None, Some(imm), None)
                }
                (WrOp::SendInv { rkey }, false, true) => {
                    (RC_SEND_LAST_WITH_INVALIDATE, None, None, Some(rkey))
                }
                (WrOp::Write { remote }, true, true) => {
                    (RC_RDMA_WRITE_ONLY, Some(remote), None, None)
                }
                (WrOp::WriteImm { remote, imm }, true, true) => {
                    (RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, Some(remote), Some(imm), None)
                }
                (WrOp::Write { remote } | WrOp::WriteImm { remote, .. }, true, false) => {
                    (RC_RDMA_WRITE_FIRST, Some(remote), None, None)
                }
                (WrOp::Write { .. } | WrOp::WriteImm { .. }, false, false) => {
                    (RC_RDMA_WRITE_MIDDLE, None, None, None)
                }
                (WrOp::Write { .. }, false, true) => (RC_RDMA_WRITE_LAST, None, None, None),
                (WrOp::WriteImm { imm, .. }, false, true) => {
                    (RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, None, Some(imm), None)
                }
                // READ and atomics are handled above.
                _ => (RC_SEND_ONLY, None, None, None),
            };
            let ack_req = last || since_ackreq + 1 >= ack_every.max(1);
            let solicited = last
                && wr.solicited
                && matches!(
                    wr.op,
                    WrOp::Send
                        | WrOp::SendImm { .. }
                        | WrOp::SendInv { .. }
                        | WrOp::WriteImm { .. }
                );
            let mut r = RoceRepr::new(bth_for(qp, op, psn::add(w.first, off), ack_req, solicited));
            r.reth = reth.map(|rm| RethRepr { va: rm.addr, rkey: rm.rkey, dma_len: w.len });
            r.imm_dt = imm.map(|imm| ImmDtRepr { imm });
            r.ieth = ieth.map(|rkey| IethRepr { rkey });
            PktPlan { roce: r, payload_off, payload_len, psns: 1, last }
        }
    }
}

/// Build the next request packet of this QP into `buf` (new or retransmitted), if one may
/// leave now.
pub fn poll_transmit(
    core: &mut Core,
    qp: &mut Qp,
    now: Instant,
    buf: &mut [u8],
) -> Option<pkt::TxSg> {
    if qp.req.rnr_until.is_some_and(|t| t <= now) {
        qp.req.rnr_until = None;
    }
    if !qp_live(qp) || qp.req.rnr_until.is_some() {
        return None;
    }
    // Find the WQE the cursor is on: skip finished ones, fetch new ones (RTS only).
    loop {
        let rs = &mut qp.req;
        if let Some(w) = rs.wqes.get(rs.cur) {
            match w.status {
                None => break,
                // A local error is a barrier: it completes once the WQEs before it have.
                Some(s) if s != WcStatus::Success => return None,
                Some(_) => {
                    let i = rs.cur + 1;
                    rs.set_cursor(i);
                    continue;
                }
            }
        }
        if qp.attr.state != QpState::Rts || !fetch(core, qp) {
            return None;
        }
        if let Some(w) = qp.req.wqes.back_mut() {
            w.posted = now;
        }
        if qp.req.wqes.back().is_some_and(Wqe::done) {
            // It failed its local checks.
            retire(core, qp, now);
            return None;
        }
    }
    let path = qp.path?;
    let rs = &mut qp.req;
    let i = rs.cur;
    let new = i == rs.started;
    if new {
        if qp.attr.state != QpState::Rts {
            // SQD / SQE: finish what is started, start nothing new.
            return None;
        }
        let w = &rs.wqes[i];
        let open_rd = rs.wqes.iter().take(rs.started).filter(|x| !x.done() && x.is_rd_atomic());
        let open_rd = open_rd.count();
        if w.wr.fence && open_rd > 0 {
            return None;
        }
        if w.is_rd_atomic() && open_rd >= usize::from(qp.attr.max_rd_atomic.max(1)) {
            if !rs.rd_stalled {
                rs.rd_stalled = true;
                core.stats.rd_atomic_stalls += 1;
            }
            return None;
        }
        if w.wr.op.consumes_recv() && !rs.credit_allows() {
            if !rs.credit_stalled {
                rs.credit_stalled = true;
                core.stats.credit_stalls += 1;
            }
            return None;
        }
        rs.credit_stalled = false;
    }
    let cur_psn = if new {
        rs.next_psn
    } else {
        let w = &rs.wqes[i];
        match w.wr.op {
            WrOp::Read { .. } => psn::add(w.first, w.rcvd),
            _ => psn::add(w.first, rs.cur_off),
        }
    };
    // The send window: sized to the path (see `crate::window`), at most `max_inflight`. It
    // counts PSNs, so a READ's responses count too: a new READ starts once its first response
    // PSN is inside the window (one READ may be longer than the window; the next one overlaps
    // only the last window's worth of it), which bounds the responses in flight that a lost
    // one throws away (the responder restarts from a re-issued READ and drops the rest).
    // READ responses cost the requester no sending, so their floor is four times the
    // SEND/WRITE one (on the real path a 256-packet floor cut loss-free READ by half against
    // 1024; BENCHMARKS.md, "RDMA under loss").
    rs.path_on = core.cfg.path_window;
    let floor = core.cfg.window_floor;
    let floor =
        if rs.wqes[i].is_rd_atomic() { floor.saturating_mul(READ_FLOOR_GAIN) } else { floor };
    let window = if rs.path_on {
        rs.path.window(core.cfg.max_inflight, floor)
    } else {
        core.cfg.max_inflight.max(1)
    };
    if psn::diff(cur_psn, rs.una) >= window as i32 {
        if !rs.win_stalled {
            rs.win_stalled = true;
            core.stats.window_stalls += 1;
        }
        return None;
    }
    rs.win_stalled = false;
    if !rs.cc.may_send(now) {
        rs.paced_blocked = true;
        return None;
    }
    if new {
        let w = &mut rs.wqes[i];
        w.first = rs.next_psn;
        rs.next_psn = psn::add(rs.next_psn, w.npsn);
        rs.started += 1;
        rs.cur_off = 0;
        rs.rd_stalled = false;
    }
    let (off, since) = (rs.cur_off, rs.since_ackreq);
    let w = &qp.req.wqes[i];
    let pl = plan(qp, w, off, core.cfg.ack_req_every, since);
    let (pd, sgl) = (qp.init.pd, w.wr.sgl);
    // An ATOMIC WRITE's 8 bytes are the value in its own SQ slot (which stays put until the
    // WQE retires), sent from there like any payload.
    let inline = matches!(w.wr.op, WrOp::AtomicWrite { .. })
        .then(|| qp.sq.slot_addr(qp.sq.cidx.wrapping_add(i as u32)) + wqe::SQ_VALUE_OFF as u64);
    let built = pkt::build_sg(buf, &path, &pl.roce, pl.payload_len, |h, sg| match inline {
        Some(at) => {
            h.update(core.mem.slice(at, pl.payload_len).map_err(|_| crate::mr::MrFault::Bounds)?);
            sg.ranges[0] = (at, pl.payload_len as u32);
            sg.npayload = 1;
            Ok(())
        }
        None => core.gather_sg(pd, &sgl, pl.payload_off, pl.payload_len, h, sg),
    });
    let sg = match built {
        Ok(sg) => sg,
        Err(e) => {
            let status = match e {
                pkt::BuildError::Payload => WcStatus::LocProtErr,
                _ => WcStatus::LocQpOpErr,
            };
            // Earlier WQEs may still finish; this one is a barrier until then.
            qp.req.wqes[i].status = Some(status);
            retire(core, qp, now);
            return None;
        }
    };
    let rs = &mut qp.req;
    let p = pl.roce.bth.psn;
    let end = psn::add(p, pl.psns);
    let again = psn::before(p, rs.max_sent);
    if again {
        core.stats.retransmits += 1;
    } else {
        core.stats.req_packets += 1;
    }
    // A READ is timed to its first response: the round trip, not the whole transfer.
    let timed_end = if pl.psns > 1 { psn::add(p, 1) } else { end };
    rs.path.on_send(now, timed_end, pl.roce.bth.ack_req, again);
    if rs.probe.is_none() && rs.path_on {
        rs.probe = rs.path.probe_timeout().map(|t| now + t);
    }
    if psn::before(rs.max_sent, end) {
        rs.max_sent = end;
    }
    rs.since_ackreq = if pl.roce.bth.ack_req { 0 } else { rs.since_ackreq + 1 };
    rs.paced_blocked = false;
    rs.cc.on_send(&core.cfg.cc, now, sg.len);
    if rs.rto.is_none() {
        rs.rto = crate::ack_timeout(qp.attr.timeout).map(|t| now + t);
    }
    if pl.last {
        rs.set_cursor(i + 1);
    } else {
        rs.cur_off += 1;
    }
    Some(sg)
}

/// A response arrived for this QP: ACK, NAK, RNR NAK, READ response or atomic ACK.
pub fn on_response(core: &mut Core, qp: &mut Qp, now: Instant, pkt: &RxPkt<'_>) {
    if !qp_live(qp) {
        return;
    }
    let bth = *pkt.bth();
    let h = pkt.roce.headers();
    let p = bth.psn;
    // Any AETH that acknowledges (ACK, atomic ACK, READ response) carries the credit count.
    if let Some(AethRepr { syndrome: Syndrome::Ack { credits }, .. }) = h.aeth
        && psn::before(p, qp.req.max_sent)
    {
        qp.req.on_credits(p, credits);
    }
    match bth.opcode {
        opcode::RC_ACKNOWLEDGE => {
            let Some(aeth) = h.aeth else {
                core.stats.rx_bad_headers += 1;
                return;
            };
            on_aeth(core, qp, now, p, aeth.syndrome);
        }
        opcode::RC_ATOMIC_ACKNOWLEDGE => {
            let Some(orig) = h.atomic_ack_eth.map(|a| a.orig_data) else {
                core.stats.rx_bad_headers += 1;
                return;
            };
            on_atomic_ack(core, qp, now, p, orig);
        }
        opcode::RC_RDMA_READ_RESPONSE_FIRST
        | opcode::RC_RDMA_READ_RESPONSE_MIDDLE
        | opcode::RC_RDMA_READ_RESPONSE_LAST
        | opcode::RC_RDMA_READ_RESPONSE_ONLY => {
            core.stats.read_resp_rcvd += 1;
            on_read_response(core, qp, now, p, bth.opcode, pkt.payload(), pkt.placed);
        }
        _ => core.stats.rx_bad_opcode += 1,
    }
}

/// The index of the started, unfinished WQE whose PSN range holds `p`.
fn wqe_at(qp: &Qp, p: u32) -> Option<usize> {
    let rs = &qp.req;
    rs.wqes.iter().take(rs.started).position(|w| !w.done() && w.contains(p))
}

fn on_aeth(core: &mut Core, qp: &mut Qp, now: Instant, p: u32, syn: Syndrome) {
    let rs = &qp.req;
    // A response PSN at or beyond anything sent is bogus; a NAK's PSN may equal the next
    // expected one (sequence error at the very end).
    let bogus = match syn {
        Syndrome::Ack { .. } => !psn::before(p, rs.max_sent),
        _ => psn::before(rs.max_sent, p),
    };
    match syn {
        Syndrome::Ack { .. } => core.stats.acks_rcvd += 1,
        Syndrome::RnrNak { .. } => core.stats.rnr_naks_rcvd += 1,
        Syndrome::Nak(NakCode::PsnSequenceError) => core.stats.seq_naks_rcvd += 1,
        Syndrome::Nak(_) => core.stats.err_naks_rcvd += 1,
    }
    // A NAK for a PSN already acknowledged is stale (an ACK may legitimately repeat una - 1
    // only as a duplicate).
    let stale = match syn {
        Syndrome::Ack { .. } => psn::before(p, rs.una),
        _ => psn::before(p, rs.una) || !rs.waiting(),
    };
    if bogus || stale {
        core.stats.dup_responses += 1;
        return;
    }
    match syn {
        Syndrome::Ack { .. } => {
            if ack_through(qp, p) {
                progress(qp, now);
            }
            retire(core, qp, now);
        }
        Syndrome::Nak(NakCode::PsnSequenceError) => {
            if ack_through(qp, psn::add(p, psn::MASK)) {
                progress(qp, now);
            }
            qp.req.go_back(p);
            retire(core, qp, now);
        }
        Syndrome::RnrNak { timer } => {
            let advanced = ack_through(qp, psn::add(p, psn::MASK));
            if advanced {
                progress(qp, now);
            }
            retire(core, qp, now);
            if !qp_live(qp) {
                return;
            }
            let infinite = qp.attr.rnr_retry == 7;
            if !infinite && qp.req.rnr_used >= qp.attr.rnr_retry {
                let i = wqe_at(qp, p).or_else(|| qp.req.oldest_open()).unwrap_or(0);
                fail_at(core, qp, i, WcStatus::RnrRetryExcErr, now);
                return;
            }
            let rs = &mut qp.req;
            rs.rnr_used = rs.rnr_used.saturating_add(1);
            let us = crate::RNR_TIMER_US[usize::from(timer & 0x1f)];
            rs.rnr_until = Some(now + core::time::Duration::from_micros(u64::from(us)));
            rs.rto = None;
            rs.probe = None;
            rs.go_back(p);
        }
        Syndrome::Nak(code) => {
            if ack_through(qp, psn::add(p, psn::MASK)) {
                progress(qp, now);
            }
            let status = match code {
                NakCode::InvalidRequest | NakCode::InvalidRdRequest => WcStatus::RemInvReqErr,
                NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                NakCode::RemoteOperationalError | NakCode::PsnSequenceError => WcStatus::RemOpErr,
            };
            let i = wqe_at(qp, p).or_else(|| qp.req.oldest_open()).unwrap_or(0);
            fail_at(core, qp, i, status, now);
        }
    }
}

/// A response for `wqes[i]` arrived while an earlier READ/atomic still waits for its own: that
/// one's response was lost (responses leave in PSN order). Take nothing for `i` (the earlier
/// one's retried data must not land after `i`'s), retry the earlier one once. `true` if so.
fn earlier_rd_open(core: &mut Core, qp: &mut Qp, i: usize) -> bool {
    let rs = &mut qp.req;
    let Some(j) = rs.wqes.iter().take(i).position(|w| !w.done() && w.is_rd_atomic()) else {
        return false;
    };
    core.stats.dup_responses += 1;
    if !rs.wqes[j].retry_pending {
        rs.wqes[j].retry_pending = true;
        let off = rs.resume_off(j);
        rs.go_back_to(j, off);
    }
    true
}

fn on_atomic_ack(core: &mut Core, qp: &mut Qp, now: Instant, p: u32, orig: u64) {
    let found = qp
        .req
        .wqes
        .iter()
        .take(qp.req.started)
        .position(|w| !w.done() && w.wr.op.is_atomic() && w.first == p);
    let Some(i) = found else {
        core.stats.dup_responses += 1;
        return;
    };
    if earlier_rd_open(core, qp, i) {
        return;
    }
    let (pd, sgl) = (qp.init.pd, qp.req.wqes[i].wr.sgl);
    if core.scatter(pd, &sgl, 0, &orig.to_le_bytes()).is_err() {
        fail_at(core, qp, i, WcStatus::LocProtErr, now);
        return;
    }
    qp.req.wqes[i].status = Some(WcStatus::Success);
    ack_through(qp, p);
    progress(qp, now);
    retire(core, qp, now);
}

/// The zero-length READ response that answers a FLUSH or an ATOMIC WRITE (IBTA 1.5, as rxe
/// sends it). `false` when no such WQE waits at `p` (then it is an ordinary READ response).
fn on_flush_or_atomic_write_ack(
    core: &mut Core,
    qp: &mut Qp,
    now: Instant,
    p: u32,
    op: u8,
    data: &[u8],
) -> bool {
    let found = qp
        .req
        .wqes
        .iter()
        .take(qp.req.started)
        .position(|w| !w.done() && w.wr.op.is_flush_or_atomic_write() && w.first == p);
    let Some(i) = found else { return false };
    if earlier_rd_open(core, qp, i) {
        return true;
    }
    if op != opcode::RC_RDMA_READ_RESPONSE_ONLY || !data.is_empty() {
        fail_at(core, qp, i, WcStatus::BadRespErr, now);
        return true;
    }
    qp.req.wqes[i].status = Some(WcStatus::Success);
    ack_through(qp, p);
    progress(qp, now);
    retire(core, qp, now);
    true
}

/// Where the payload of a READ response will be written if [`on_response`] accepts it (the
/// expected response of the oldest open READ, of the expected length), with nothing changed;
/// `None` for any other packet. As [`crate::resp::placement`]: the target comes from the
/// READ's WQE, so a corrupted response writes only bytes its good copy will overwrite.
pub fn read_placement(core: &Core, qp: &Qp, pkt: &RxPkt<'_>) -> Option<Placement> {
    let (p, op) = (pkt.bth().psn, pkt.bth().opcode);
    if !matches!(qp.attr.state, QpState::Rts | QpState::Sqd | QpState::Sqe)
        || !matches!(
            op,
            opcode::RC_RDMA_READ_RESPONSE_FIRST
                | opcode::RC_RDMA_READ_RESPONSE_MIDDLE
                | opcode::RC_RDMA_READ_RESPONSE_LAST
                | opcode::RC_RDMA_READ_RESPONSE_ONLY
        )
        || pkt.payload().is_empty()
    {
        return None;
    }
    let started = || qp.req.wqes.iter().take(qp.req.started);
    if started().any(|w| !w.done() && w.wr.op.is_flush_or_atomic_write() && w.first == p) {
        return None;
    }
    let i = started()
        .position(|w| !w.done() && matches!(w.wr.op, WrOp::Read { .. }) && w.contains(p))?;
    if started().take(i).any(|w| !w.done() && w.is_rd_atomic()) {
        return None;
    }
    let w = &qp.req.wqes[i];
    let mtu = qp.attr.path_mtu.bytes();
    let offset = u64::from(w.rcvd) * u64::from(mtu);
    let want = (u64::from(w.len).checked_sub(offset)?).min(u64::from(mtu)) as usize;
    let is_last = w.rcvd + 1 == w.npsn;
    let says_last =
        matches!(op, opcode::RC_RDMA_READ_RESPONSE_LAST | opcode::RC_RDMA_READ_RESPONSE_ONLY);
    if p != psn::add(w.first, w.rcvd) || pkt.payload().len() != want || says_last != is_last {
        return None;
    }
    core.scatter_plan(qp.init.pd, &w.wr.sgl, offset, want).ok()
}

fn on_read_response(
    core: &mut Core,
    qp: &mut Qp,
    now: Instant,
    p: u32,
    op: u8,
    data: &[u8],
    placed: bool,
) {
    if on_flush_or_atomic_write_ack(core, qp, now, p, op, data) {
        return;
    }
    let found = qp
        .req
        .wqes
        .iter()
        .take(qp.req.started)
        .position(|w| !w.done() && matches!(w.wr.op, WrOp::Read { .. }) && w.contains(p));
    let Some(i) = found else {
        core.stats.dup_responses += 1;
        return;
    };
    if earlier_rd_open(core, qp, i) {
        return;
    }
    let mtu = qp.attr.path_mtu.bytes();
    let w = &qp.req.wqes[i];
    let expected = psn::add(w.first, w.rcvd);
    let d = psn::diff(p, expected);
    if d < 0 {
        core.stats.dup_responses += 1;
        return;
    }
    if d > 0 {
        // Responses before this one were lost: ask again from the first missing one, once.
        core.stats.dup_responses += 1;
        if !w.retry_pending {
            let off = w.rcvd;
            qp.req.wqes[i].retry_pending = true;
            qp.req.go_back_to(i, off);
        }
        return;
    }
    let is_last = w.rcvd + 1 == w.npsn;
    let offset = u64::from(w.rcvd) * u64::from(mtu);
    let want = (u64::from(w.len) - offset).min(u64::from(mtu)) as usize;
    let says_last =
        matches!(op, opcode::RC_RDMA_READ_RESPONSE_LAST | opcode::RC_RDMA_READ_RESPONSE_ONLY);
    if data.len() != want || says_last != is_last {
        fail_at(core, qp, i, WcStatus::BadRespErr, now);
        return;
    }
    let (pd, sgl) = (qp.init.pd, w.wr.sgl);
    if !placed && core.scatter(pd, &sgl, offset, data).is_err() {
        fail_at(core, qp, i, WcStatus::LocProtErr, now);
        return;
    }
    let w = &mut qp.req.wqes[i];
    w.rcvd += 1;
    w.retry_pending = false;
    if is_last {
        w.status = Some(WcStatus::Success);
    }
    ack_through(qp, p);
    progress(qp, now);
    retire(core, qp, now);
}

/// A CNP arrived for this QP.
pub fn on_cnp(core: &mut Core, qp: &mut Qp, now: Instant) {
    if core.cfg.cc.enabled {
        core.stats.rate_decreases += 1;
    }
    qp.req.cc.on_cnp(&core.cfg.cc, now);
}

/// Earliest requester deadline (retransmission, RNR wait, pacing, CC timers).
pub fn poll_timeout(qp: &Qp) -> Option<Instant> {
    if !qp_live(qp) {
        return None;
    }
    let rs = &qp.req;
    let pacing = if rs.paced_blocked { rs.cc.next_send() } else { None };
    [rs.rto, rs.probe, rs.rnr_until, pacing, rs.cc.timer_deadline()].into_iter().flatten().min()
}

/// Run requester timers due at `now`.
pub fn handle_timeout(core: &mut Core, qp: &mut Qp, now: Instant) {
    if !qp_live(qp) {
        return;
    }
    let rs = &mut qp.req;
    rs.cc.handle_timeout(&core.cfg.cc, now);
    if rs.paced_blocked && rs.cc.next_send().is_none_or(|t| t <= now) {
        rs.paced_blocked = false;
    }
    if rs.rnr_until.is_some_and(|t| t <= now) {
        // The wait is over: the cursor already points at the NAKed packet.
        rs.rnr_until = None;
    }
    if rs.rto.is_some_and(|t| t <= now) {
        core.stats.timeouts += 1;
        rs.rto = None;
        let Some(oldest) = rs.oldest_open() else { return };
        if rs.retry_used >= qp.attr.retry_cnt {
            fail_at(core, qp, oldest, WcStatus::RetryExcErr, now);
            return;
        }
        rs.retry_used += 1;
        for w in rs.wqes.iter_mut() {
            w.retry_pending = false;
        }
        let off = rs.resume_off(oldest);
        rs.go_back_to(oldest, off);
        rs.rto = crate::ack_timeout(qp.attr.timeout).map(|t| now + t);
        rs.probe = rs.path.probe_timeout().filter(|_| rs.path_on).map(|t| now + t);
    }
    if rs.probe.is_some_and(|t| t <= now) {
        // Nothing acknowledged for the path's probe timeout: go back as a timeout would, but
        // without spending `retry_cnt` (the IBTA timer above still decides the peer is gone).
        rs.probe = None;
        let Some(oldest) = rs.oldest_open() else { return };
        if rs.rnr_until.is_some() {
            return;
        }
        core.stats.loss_probes += 1;
        rs.path.on_probe();
        for w in rs.wqes.iter_mut() {
            w.retry_pending = false;
        }
        let off = rs.resume_off(oldest);
        rs.go_back_to(oldest, off);
        rs.probe = rs.path.probe_timeout().map(|t| now + t);
    }
}

#[cfg(test)]
mod tests {
    use snic_wire::roce::ext::{AethRepr, AtomicAckEthRepr};

    use super::*;
    use crate::pkt::Path;
    use crate::testing::{End, EndOpts, Pair};
    use crate::verbs::{Access, Mtu, QpAttr, RecvWr, Remote, Sge};

    const PORT: u16 = snic_wire::roce::UDP_PORT;

    /// A requester `a` connected to `b`; `a` sends from `sq_psn`.
    fn pair(mtu: Mtu, sq_psn: u32, tweak: impl Fn(&mut QpAttr)) -> (End, End) {
        let mut attr = QpAttr { path_mtu: mtu, ..QpAttr::default() };
        tweak(&mut attr);
        attr.access = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
        // The fixed window without loss probes: these tests follow the IBTA timer alone.
        let opts = EndOpts { path_window: false, ..EndOpts::default() };
        let p = Pair::new(&opts, attr, [sq_psn, 0x100]);
        (p.a, p.b)
    }

    /// [`pair`] with the default configuration: the NICs size their windows to the path and
    /// run loss probes.
    fn path_pair(mtu: Mtu) -> (End, End) {
        let mut attr = QpAttr { path_mtu: mtu, ..QpAttr::default() };
        attr.access = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
        let p = Pair::new(&EndOpts::default(), attr, [0, 0x100]);
        (p.a, p.b)
    }

    /// Every packet `e` emits at `now`, parsed.
    fn drain(e: &mut End, now: Instant) -> Vec<(RoceRepr, Vec<u8>)> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; pkt::MAX_PACKET_LEN];
        let dest = e.nic.query_qp(e.qpn).unwrap().dest_qpn;
        while let Some(n) = e.nic.poll_transmit(now, &mut buf) {
            let p = pkt::parse(&buf[..n], PORT).expect("emitted packet parses");
            assert_eq!(p.bth().dest_qp, dest, "dest_qp is the peer's QPN");
            assert_eq!(p.bth().pkey, bth::PKEY_DEFAULT);
            out.push((p.roce.repr(), p.payload().to_vec()));
            assert!(out.len() < 10_000, "runaway transmit");
        }
        out
    }

    /// A response from `b` to `a` as `b` would send it.
    fn response(a: &End, b: &End, r: RoceRepr, payload: &[u8]) -> Vec<u8> {
        let path = Path { src: b.ip, dst: a.ip, sport: 0xC123, dport: PORT, dscp: 0, ecn: 0 };
        let mut buf = vec![0u8; pkt::MAX_PACKET_LEN];
        let n = pkt::build(&mut buf, &path, &r, payload.len(), |d: &mut [u8]| -> Result<(), ()> {
            d.copy_from_slice(payload);
            Ok(())
        })
        .unwrap();
        buf.truncate(n);
        buf
    }

    fn resp_bth(a: &End, op: u8, p: u32) -> bth::Repr {
        bth_for_test(op, a.qpn, p)
    }

    fn bth_for_test(op: u8, qpn: u32, p: u32) -> bth::Repr {
        bth::Repr {
            opcode: op,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: bth::PKEY_DEFAULT,
            fecn: false,
            becn: false,
            dest_qp: qpn,
            ack_req: false,
            psn: p,
        }
    }

    fn aeth_pkt(a: &End, b: &End, p: u32, syndrome: Syndrome) -> Vec<u8> {
        let mut r = RoceRepr::new(resp_bth(a, opcode::RC_ACKNOWLEDGE, p));
        r.aeth = Some(AethRepr { syndrome, msn: 0 });
        response(a, b, r, &[])
    }

    const ACK: Syndrome = Syndrome::Ack { credits: 0x1f };

    fn fill(e: &mut End, off: u64, len: usize, seed: u8) -> Vec<u8> {
        let data: Vec<u8> =
            (0..len).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect();
        e.nic.mem_mut().write(e.mr.addr + off, &data).unwrap();
        data
    }

    #[test]
    fn write_segments_and_read_consumes_psns_across_wrap() {
        let (mut a, b) = pair(Mtu::M4096, 0xff_fffe, |_| {});
        let data = fill(&mut a, 0, 10_000, 3);
        let t = Instant::from_micros(1);
        let w = SendWr::new(1, WrOp::Write { remote: b.remote(0x1000) }, a.sge(0, 10_000));
        a.nic.post_send(a.qpn, &w, t).unwrap();
        let r = SendWr::new(2, WrOp::Read { remote: b.remote(0) }, a.sge(0x10000, 10_000));
        a.nic.post_send(a.qpn, &r, t).unwrap();
        let s = SendWr::new(3, WrOp::SendImm { imm: 0xabcd }, a.sge(0, 5)).solicited(true);
        a.nic.post_send(a.qpn, &s, t).unwrap();
        let pk = drain(&mut a, t);
        let ops: Vec<u8> = pk.iter().map(|(r, _)| r.bth.opcode).collect();
        assert_eq!(
            ops,
            [
                opcode::RC_RDMA_WRITE_FIRST,
                opcode::RC_RDMA_WRITE_MIDDLE,
                opcode::RC_RDMA_WRITE_LAST,
                opcode::RC_RDMA_READ_REQUEST,
                opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
            ]
        );
        let psns: Vec<u32> = pk.iter().map(|(r, _)| r.bth.psn).collect();
        // WRITE: 3 PSNs over the wrap; READ: one packet, 3 PSNs; then the SEND.
        assert_eq!(psns, [0xff_fffe, 0xff_ffff, 0, 1, 4]);
        let acks: Vec<bool> = pk.iter().map(|(r, _)| r.bth.ack_req).collect();
        assert_eq!(acks, [false, false, true, true, true]);
        assert_eq!(
            pk[0].0.reth,
            Some(RethRepr { va: b.mr.addr + 0x1000, rkey: b.mr.rkey, dma_len: 10_000 })
        );
        assert_eq!(pk[1].0.reth, None);
        assert_eq!(
            pk[3].0.reth,
            Some(RethRepr { va: b.mr.addr, rkey: b.mr.rkey, dma_len: 10_000 })
        );
        let lens: Vec<usize> = pk.iter().map(|(_, p)| p.len()).collect();
        assert_eq!(lens, [4096, 4096, 1808, 0, 5]);
        let written: Vec<u8> = pk[..3].iter().flat_map(|(_, p)| p.clone()).collect();
        assert_eq!(written, data);
        assert_eq!(pk[4].0.imm_dt, Some(ImmDtRepr { imm: 0xabcd }));
        assert!(pk[4].0.bth.solicited);
        assert!(!pk[2].0.bth.solicited);
        assert_eq!(a.nic.stats().req_packets, 5);
        assert_eq!(a.nic.stats().retransmits, 0);
    }

    #[test]
    fn acks_and_read_responses_complete_in_order() {
        let (mut a, b) = pair(Mtu::M1024, 0xff_fffe, |_| {});
        let t = Instant::from_micros(1);
        let w = SendWr::new(1, WrOp::Write { remote: b.remote(0) }, a.sge(0, 2000));
        let r = SendWr::new(2, WrOp::Read { remote: b.remote(0) }, a.sge(0x8000, 2500));
        let f =
            SendWr::new(3, WrOp::FetchAdd { remote: b.remote(0x100), add: 5 }, a.sge(0x9000, 8));
        let s = SendWr::new(4, WrOp::Send, a.sge(0, 10)).signaled(false);
        a.nic.post_send_batch(a.qpn, &[w, r, f, s], t).unwrap();
        let pk = drain(&mut a, t);
        let psns: Vec<u32> = pk.iter().map(|(r, _)| r.bth.psn).collect();
        // WRITE 2 PSNs, READ 3 PSNs, atomic 1, SEND 1.
        assert_eq!(psns, [0xff_fffe, 0xff_ffff, 0, 3, 4]);
        assert_eq!(pk[3].0.bth.opcode, opcode::RC_FETCH_ADD);
        let ae = pk[3].0.atomic_eth.unwrap();
        assert_eq!((ae.va, ae.swap_add), (b.mr.addr + 0x100, 5));

        // ACK of the WRITE's first packet only: nothing completes.
        a.nic.handle_packet(t, &aeth_pkt(&a, &b, 0xff_fffe, ACK));
        assert!(a.poll_all().is_empty());
        // ACK of the WRITE: it completes.
        a.nic.handle_packet(t, &aeth_pkt(&a, &b, 0xff_ffff, ACK));
        let c = a.poll_all();
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].wr_id, c[0].status, c[0].byte_len), (1, WcStatus::Success, 2000));
        assert_eq!(c[0].src_qp, b.qpn);
        // Atomic ACK before the READ responses: it waits for the READ (SQ order).
        let mut r = RoceRepr::new(resp_bth(&a, opcode::RC_ATOMIC_ACKNOWLEDGE, 3));
        r.aeth = Some(AethRepr { syndrome: ACK, msn: 3 });
        r.atomic_ack_eth = Some(AtomicAckEthRepr { orig_data: 0x1122_3344_5566_7788 });
        let atomic_ack = response(&a, &b, r, &[]);
        // READ responses: FIRST, MIDDLE, LAST.
        let data: Vec<u8> = (0..2500u32).map(|i| (i % 251) as u8).collect();
        let ops = [
            opcode::RC_RDMA_READ_RESPONSE_FIRST,
            opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            opcode::RC_RDMA_READ_RESPONSE_LAST,
        ];
        let mut rr = Vec::new();
        for (k, op) in ops.into_iter().enumerate() {
            let mut r = RoceRepr::new(resp_bth(&a, op, k as u32));
            if op != opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
                r.aeth = Some(AethRepr { syndrome: ACK, msn: 2 });
            }
            let end = (k * 1024 + 1024).min(2500);
            rr.push(response(&a, &b, r, &data[k * 1024..end]));
        }
        a.nic.handle_packet(t, &rr[0]);
        // A duplicate of the first response is ignored.
        a.nic.handle_packet(t, &rr[0]);
        assert_eq!(a.nic.stats().dup_responses, 1);
        a.nic.handle_packet(t, &rr[1]);
        assert!(a.poll_all().is_empty());
        // An atomic ACK overtaking the READ's last response says that response was lost: it
        // is not taken (its data must not land before the READ's) and the READ is retried.
        a.nic.handle_packet(t, &atomic_ack);
        assert!(a.poll_all().is_empty());
        assert_eq!(a.nic.stats().dup_responses, 2);
        let pk = drain(&mut a, t);
        assert_eq!((pk[0].0.bth.opcode, pk[0].0.bth.psn), (opcode::RC_RDMA_READ_REQUEST, 2));
        assert_eq!(pk[0].0.reth.unwrap().dma_len, 2500 - 2048);
        a.nic.handle_packet(t, &rr[2]);
        a.nic.handle_packet(t, &atomic_ack);
        let c = a.poll_all();
        let got: Vec<(u64, WcStatus, u32)> =
            c.iter().map(|c| (c.wr_id, c.status, c.byte_len)).collect();
        assert_eq!(got, [(2, WcStatus::Success, 2500), (3, WcStatus::Success, 8)]);
        assert_eq!(c[0].opcode, crate::verbs::WcOpcode::RdmaRead);
        assert_eq!(c[1].opcode, crate::verbs::WcOpcode::FetchAdd);
        let mut got = vec![0u8; 2500];
        a.nic.mem().read(a.mr.addr + 0x8000, &mut got).unwrap();
        assert_eq!(got, data);
        assert_eq!(a.nic.mem().read_u64(a.mr.addr + 0x9000).unwrap(), 0x1122_3344_5566_7788);
        // The unsignaled SEND retires silently on its ACK.
        a.nic.handle_packet(t, &aeth_pkt(&a, &b, 4, ACK));
        assert!(a.poll_all().is_empty());
        assert!(a.nic.sq_idle(a.qpn));
        // A late duplicate ACK is ignored.
        a.nic.handle_packet(t, &aeth_pkt(&a, &b, 4, ACK));
        assert_eq!(a.nic.stats().dup_responses, 3);
        assert_eq!(a.nic.poll_timeout(), None, "nothing outstanding: no timer");
    }

    #[test]
    fn timeout_retransmits_then_retry_exceeded_flushes() {
        let (mut a, b) = pair(Mtu::M1024, 10, |at| {
            at.timeout = 10; // 4.2 ms
            at.retry_cnt = 2;
        });
        let t0 = Instant::from_micros(1);
        let w1 = SendWr::new(1, WrOp::Write { remote: b.remote(0) }, a.sge(0, 1500));
        let w2 = SendWr::new(2, WrOp::Send, a.sge(0, 8));
        a.nic.post_send_batch(a.qpn, &[w1, w2], t0).unwrap();
        assert_eq!(drain(&mut a, t0).len(), 3);
        let rto = a.nic.poll_timeout().unwrap();
        assert_eq!(rto, t0 + crate::ack_timeout(10).unwrap());
        // The first packet is acknowledged: progress restarts the timer.
        let t1 = t0 + core::time::Duration::from_millis(1);
        a.nic.handle_packet(t1, &aeth_pkt(&a, &b, 10, ACK));
        let rto = a.nic.poll_timeout().unwrap();
        assert_eq!(rto, t1 + crate::ack_timeout(10).unwrap());
        // Expiry 1 and 2: go-back-N from PSN 11 (the WRITE's second packet), then the SEND.
        let mut now = rto;
        for k in 1..=2u64 {
            a.nic.handle_timeout(now);
            let pk = drain(&mut a, now);
            let psns: Vec<u32> = pk.iter().map(|(r, _)| r.bth.psn).collect();
            assert_eq!(psns, [11, 12]);
            assert_eq!(pk[0].0.bth.opcode, opcode::RC_RDMA_WRITE_LAST);
            assert_eq!(a.nic.stats().timeouts, k);
            assert_eq!(a.nic.stats().retransmits, 2 * k);
            now = a.nic.poll_timeout().unwrap();
        }
        // Expiry 3: retry_cnt (2) is exhausted.
        a.nic.handle_timeout(now);
        let c = a.poll_all();
        let got: Vec<(u64, WcStatus)> = c.iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(got, [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]);
        assert_eq!(a.nic.query_qp(a.qpn).unwrap().state, QpState::Err);
        assert!(drain(&mut a, now).is_empty());
        assert_eq!(a.nic.poll_timeout(), None);
        // Posting in ERR flushes at once.
        a.nic.post_send(a.qpn, &w2, now).unwrap();
        let c = a.poll_all();
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].wr_id, c[0].status), (2, WcStatus::WrFlushErr));
    }

    /// A first WRITE acknowledged after 100 us gives the path its first sample (srtt 100 us,
    /// rttvar 50 us: probe after 300 us). A second WRITE loses its tail: no later packet can
    /// reveal it with a NAK, and the IBTA timer (timeout 14: 67 ms) is far away. The loss
    /// probe sends the unacknowledged packets again after 300 us, without spending retry_cnt.
    #[test]
    fn loss_probe_resends_a_lost_tail_long_before_the_ibta_timer() {
        let (mut a, b) = path_pair(Mtu::M1024);
        let us = core::time::Duration::from_micros;
        let t0 = Instant::from_micros(1);
        let w1 = SendWr::new(1, WrOp::Write { remote: b.remote(0) }, a.sge(0, 4096));
        a.nic.post_send(a.qpn, &w1, t0).unwrap();
        assert_eq!(drain(&mut a, t0).len(), 4);
        a.nic.handle_packet(t0 + us(100), &aeth_pkt(&a, &b, 3, ACK));
        let c = a.poll_all();
        assert_eq!((c.len(), c[0].status), (1, WcStatus::Success));
        let t2 = t0 + us(200);
        let w2 = SendWr::new(2, WrOp::Write { remote: b.remote(0) }, a.sge(0, 4096));
        a.nic.post_send(a.qpn, &w2, t2).unwrap();
        let first: Vec<u32> = drain(&mut a, t2).iter().map(|(r, _)| r.bth.psn).collect();
        assert_eq!(first, [4, 5, 6, 7]);
        // PSN 7 is lost; the responder acknowledged up to 6 (ACK coalescing).
        let t3 = t2 + us(100);
        a.nic.handle_packet(t3, &aeth_pkt(&a, &b, 6, ACK));
        let probe = a.nic.poll_timeout().unwrap();
        assert!(probe < t2 + crate::ack_timeout(14).unwrap());
        // PSN 7 is the timed packet, so the ACK at t3 is no sample: the probe counts from that
        // progress with srtt 100 us, rttvar 50 us.
        assert_eq!(probe, t3 + us(300));
        assert!(drain(&mut a, t3 + us(299)).is_empty());
        a.nic.handle_timeout(probe);
        let again: Vec<u32> = drain(&mut a, probe).iter().map(|(r, _)| r.bth.psn).collect();
        assert_eq!(again, [7], "only the unacknowledged tail goes again");
        let s = a.nic.stats();
        assert_eq!((s.loss_probes, s.timeouts, s.retransmits), (1, 0, 1));
        // Without progress the next probe waits twice as long.
        assert_eq!(a.nic.poll_timeout(), Some(probe + us(600)));
        a.nic.handle_packet(probe + us(50), &aeth_pkt(&a, &b, 7, ACK));
        let c = a.poll_all();
        assert_eq!((c.len(), c[0].wr_id, c[0].status), (1, 2, WcStatus::Success));
        assert_eq!(a.nic.poll_timeout(), None, "nothing outstanding: no timer, no probe");
    }

    /// Once the path is measured, new packets stop at the window (twice the bandwidth-delay
    /// product, at least `MIN_WINDOW`) instead of `max_inflight`, and go on as ACKs arrive.
    #[test]
    fn window_sized_to_the_path_bounds_packets_in_flight() {
        let (mut a, b) = path_pair(Mtu::M256);
        let us = core::time::Duration::from_micros;
        let t0 = Instant::from_micros(1);
        let w1 = SendWr::new(1, WrOp::Write { remote: b.remote(0) }, a.sge(0, 256));
        a.nic.post_send(a.qpn, &w1, t0).unwrap();
        assert_eq!(drain(&mut a, t0).len(), 1);
        // One packet per 100 us: a slow path.
        let t1 = t0 + us(100);
        a.nic.handle_packet(t1, &aeth_pkt(&a, &b, 0, ACK));
        assert_eq!(a.poll_all().len(), 1);
        // The path's BDP is below one packet: the window is the floor (four transport batches).
        let win = crate::window::DEFAULT_FLOOR;
        let w2 = SendWr::new(2, WrOp::Write { remote: b.remote(0) }, a.sge(0, (win + 44) * 256));
        a.nic.post_send(a.qpn, &w2, t1).unwrap();
        let sent: Vec<u32> = drain(&mut a, t1).iter().map(|(r, _)| r.bth.psn).collect();
        assert_eq!(sent, (1..=win).collect::<Vec<u32>>());
        assert_eq!(a.nic.stats().window_stalls, 1);
        // Eight acknowledged: eight more may leave.
        a.nic.handle_packet(t1 + us(10), &aeth_pkt(&a, &b, 8, ACK));
        let more: Vec<u32> = drain(&mut a, t1 + us(10)).iter().map(|(r, _)| r.bth.psn).collect();
        assert_eq!(more, (win + 1..=win + 8).collect::<Vec<u32>>());
        assert_eq!(a.nic.stats().retransmits, 0);
    }

    #[test]
    fn seq_nak_goes_back_and_rnr_nak_waits() {
        let (mut a, b) = pair(Mtu::M256, 0, |at| at.rnr_retry = 1);
        let t = Instant::from_micros(1);
        let w = SendWr::new(1, WrOp::Write { remote: b.remote(0) }, a.sge(0, 1024));
        let s = SendWr::new(2, WrOp::Send, a.sge(0, 100));
        a.nic.post_send_batch(a.qpn, &[w, s], t).unwrap();
        assert_eq!(drain(&mut a, t).len(), 5);
        // PSN 2 was lost: the responder NAKs with its expected PSN.
        a.nic.handle_packet(t, &aeth_pkt(&a, &b, 2, Syndrome::Nak(NakCode::PsnSequenceError)));
        let pk = drain(&mut a, t);
        let psns: Vec<u32> = pk.iter().map(|(r, _)| r.bth.psn).collect();
        assert_eq!(psns, [2, 3, 4]);
        assert_eq!(pk[0].0.bth.opcode, opcode::RC_RDMA_WRITE_MIDDLE);
        assert_eq!(a.nic.stats().seq_naks_rcvd, 1);
        // WRITE acknowledged; the SEND finds no RECV: RNR NAK with timer code 4 (40 us).
        a.nic.handle_packet(t, &aeth_pkt(&a, &b, 4, Syndrome::RnrNak { timer: 4 }));
        let c = a.poll_all();
        assert_eq!((c.len(), c[0].wr_id, c[0].status), (1, 1, WcStatus::Success));
        assert!(drain(&mut a, t).is_empty(), "RNR wait");
        let until = t + core::time::Duration::from_micros(40);
        assert_eq!(a.nic.poll_timeout(), Some(until));
        a.nic.handle_timeout(until);
        let pk = drain(&mut a, until);
        assert_eq!(pk.len(), 1);
        assert_eq!((pk[0].0.bth.psn, pk[0].0.bth.opcode), (4, opcode::RC_SEND_ONLY));
        // Second RNR NAK: rnr_retry (1) is exhausted.
        a.nic.handle_packet(until, &aeth_pkt(&a, &b, 4, Syndrome::RnrNak { timer: 4 }));
        let c = a.poll_all();
        assert_eq!((c.len(), c[0].wr_id, c[0].status), (1, 2, WcStatus::RnrRetryExcErr));
        assert_eq!(a.nic.query_qp(a.qpn).unwrap().state, QpState::Err);
    }

    #[test]
    fn fatal_nak_fails_wqe_and_flushes_rest() {
        let (mut a, b) = pair(Mtu::M1024, 7, |_| {});
        let t = Instant::from_micros(1);
        let w1 = SendWr::new(1, WrOp::Write { remote: b.remote(0) }, a.sge(0, 8));
        let w2 = SendWr::new(2, WrOp::Write { remote: Remote { addr: 0, rkey: 1 } }, a.sge(0, 8));
        let w3 = SendWr::new(3, WrOp::Send, a.sge(0, 8));
        a.nic.post_send_batch(a.qpn, &[w1, w2, w3], t).unwrap();
        assert_eq!(drain(&mut a, t).len(), 3);
        let nak = aeth_pkt(&a, &b, 8, Syndrome::Nak(NakCode::RemoteAccessError));
        a.nic.handle_packet(t, &nak);
        let got: Vec<(u64, WcStatus)> = a.poll_all().iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(
            got,
            [(1, WcStatus::Success), (2, WcStatus::RemAccessErr), (3, WcStatus::WrFlushErr)]
        );
        assert_eq!(a.nic.stats().err_naks_rcvd, 1);
    }

    #[test]
    fn local_protection_error_completes_after_earlier_wqes() {
        let (mut a, b) = pair(Mtu::M1024, 7, |_| {});
        let t = Instant::from_micros(1);
        let w1 = SendWr::new(1, WrOp::Write { remote: b.remote(0) }, a.sge(0, 8));
        let bad = SgList::one(Sge { addr: a.mr.addr, len: 8, lkey: a.mr.lkey ^ 0x100 });
        let w2 = SendWr::new(2, WrOp::Send, bad);
        let w3 = SendWr::new(3, WrOp::Send, a.sge(0, 8));
        a.nic.post_send_batch(a.qpn, &[w1, w2, w3], t).unwrap();
        assert_eq!(drain(&mut a, t).len(), 1, "nothing after the bad WQE leaves");
        assert!(a.poll_all().is_empty(), "the WRITE before it is still in flight");
        a.nic.handle_packet(t, &aeth_pkt(&a, &b, 7, ACK));
        let got: Vec<(u64, WcStatus)> = a.poll_all().iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(
            got,
            [(1, WcStatus::Success), (2, WcStatus::LocProtErr), (3, WcStatus::WrFlushErr)]
        );
        assert_eq!(a.nic.query_qp(a.qpn).unwrap().state, QpState::Err);
    }

    #[test]
    fn implied_nak_and_max_rd_atomic() {
        let (mut a, b) = pair(Mtu::M1024, 0, |at| at.max_rd_atomic = 1);
        let t = Instant::from_micros(1);
        let r1 = SendWr::new(1, WrOp::Read { remote: b.remote(0) }, a.sge(0, 100));
        let r2 = SendWr::new(2, WrOp::Read { remote: b.remote(0) }, a.sge(0x100, 100));
        a.nic.post_send_batch(a.qpn, &[r1, r2], t).unwrap();
        let pk = drain(&mut a, t);
        assert_eq!(pk.len(), 1, "second READ held back by max_rd_atomic");
        assert_eq!(a.nic.stats().rd_atomic_stalls, 1);
        // READ 1 answered: READ 2 may go.
        let mut r = RoceRepr::new(resp_bth(&a, opcode::RC_RDMA_READ_RESPONSE_ONLY, 0));
        r.aeth = Some(AethRepr { syndrome: ACK, msn: 1 });
        a.nic.handle_packet(t, &response(&a, &b, r, &[9u8; 100]));
        assert_eq!(a.poll_all().len(), 1);
        let w = SendWr::new(3, WrOp::Write { remote: b.remote(0) }, a.sge(0, 8));
        a.nic.post_send(a.qpn, &w, t).unwrap();
        let pk = drain(&mut a, t);
        let psns: Vec<u32> = pk.iter().map(|(r, _)| r.bth.psn).collect();
        assert_eq!(psns, [1, 2]);
        // An ACK of the WRITE (PSN 2) means READ 2's response (PSN 1) was lost: resend it once.
        a.nic.handle_packet(t, &aeth_pkt(&a, &b, 2, ACK));
        a.nic.handle_packet(t, &aeth_pkt(&a, &b, 2, ACK));
        let pk = drain(&mut a, t);
        assert_eq!(pk.len(), 1);
        assert_eq!((pk[0].0.bth.opcode, pk[0].0.bth.psn), (opcode::RC_RDMA_READ_REQUEST, 1));
        assert_eq!(a.nic.stats().retransmits, 1);
        let mut r = RoceRepr::new(resp_bth(&a, opcode::RC_RDMA_READ_RESPONSE_ONLY, 1));
        r.aeth = Some(AethRepr { syndrome: ACK, msn: 2 });
        a.nic.handle_packet(t, &response(&a, &b, r, &[7u8; 100]));
        let got: Vec<u64> = a.poll_all().iter().map(|c| c.wr_id).collect();
        assert_eq!(got, [2, 3]);
        assert!(a.nic.sq_idle(a.qpn));
    }

    #[test]
    fn fence_waits_for_earlier_read() {
        let (mut a, b) = pair(Mtu::M1024, 0, |_| {});
        let t = Instant::from_micros(1);
        let r1 = SendWr::new(1, WrOp::Read { remote: b.remote(0) }, a.sge(0, 100));
        let s = SendWr::new(2, WrOp::Send, a.sge(0x100, 100)).fence(true);
        a.nic.post_send_batch(a.qpn, &[r1, s], t).unwrap();
        let pk = drain(&mut a, t);
        assert_eq!(pk.len(), 1, "the fenced SEND waits");
        let mut r = RoceRepr::new(resp_bth(&a, opcode::RC_RDMA_READ_RESPONSE_ONLY, 0));
        r.aeth = Some(AethRepr { syndrome: ACK, msn: 1 });
        a.nic.handle_packet(t, &response(&a, &b, r, &[9u8; 100]));
        let pk = drain(&mut a, t);
        assert_eq!(pk.len(), 1);
        assert_eq!((pk[0].0.bth.opcode, pk[0].0.bth.psn), (opcode::RC_SEND_ONLY, 1));
        // The READ's data landed and the SEND carries what is now in its buffer.
        assert_eq!(pk[0].1, vec![0u8; 100]);
        let mut got = [0u8; 100];
        a.nic.mem().read(a.mr.addr, &mut got).unwrap();
        assert_eq!(got, [9u8; 100]);
    }

    #[test]
    fn partial_read_retry_resumes_at_missing_response() {
        let (mut a, b) = pair(Mtu::M256, 0x20, |_| {});
        let t = Instant::from_micros(1);
        let r1 = SendWr::new(1, WrOp::Read { remote: b.remote(0x400) }, a.sge(0, 1000));
        a.nic.post_send(a.qpn, &r1, t).unwrap();
        assert_eq!(drain(&mut a, t).len(), 1);
        let mut r = RoceRepr::new(resp_bth(&a, opcode::RC_RDMA_READ_RESPONSE_FIRST, 0x20));
        r.aeth = Some(AethRepr { syndrome: ACK, msn: 1 });
        a.nic.handle_packet(t, &response(&a, &b, r, &[1u8; 256]));
        // 0x21 lost, 0x22 arrives: retry from 0x21 with va/len advanced by one MTU.
        let r = RoceRepr::new(resp_bth(&a, opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 0x22));
        a.nic.handle_packet(t, &response(&a, &b, r, &[3u8; 256]));
        let pk = drain(&mut a, t);
        assert_eq!(pk.len(), 1);
        assert_eq!(pk[0].0.bth.psn, 0x21);
        assert_eq!(
            pk[0].0.reth,
            Some(RethRepr { va: b.mr.addr + 0x400 + 256, rkey: b.mr.rkey, dma_len: 744 })
        );
    }

    /// IBTA 9.7.7.2 end to end: the responder advertises its posted receive WQEs in every ACK
    /// (zero once its RQ is empty); the requester starts no more SENDs than that beyond the
    /// acknowledged ones, except one "limited WQE" when it has none outstanding, which learns
    /// of RECVs posted later (here through an RNR NAK, then an ACK with new credits).
    #[test]
    fn sends_wait_for_credits_and_the_limited_wqe_finds_new_recvs() {
        let mut attr = QpAttr { path_mtu: Mtu::M1024, rnr_retry: 7, ..QpAttr::default() };
        attr.access = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
        let mut p = Pair::new(&EndOpts::default(), attr, [0, 0x100]);
        let recvs = |p: &mut Pair, ids: core::ops::Range<u64>| {
            for k in ids {
                let wr = RecvWr { wr_id: k, sgl: p.b.sge(k * 64, 64) };
                p.b.nic.post_recv(p.b.qpn, &wr, p.now).unwrap();
            }
        };
        let send = |k: u64, a: &End| SendWr::new(k, WrOp::Send, a.sge(k * 64, 8));
        recvs(&mut p, 0..3);
        // Before any ACK nothing limits; the ACK of the first SEND advertises 2 credits.
        p.a.nic.post_send(p.a.qpn, &send(1, &p.a), p.now).unwrap();
        p.drive_bounded(10);
        assert_eq!(p.a.poll_all().len(), 1);
        let ws: Vec<SendWr> = (2..=5).map(|k| send(k, &p.a)).collect();
        p.a.nic.post_send_batch(p.a.qpn, &ws, p.now).unwrap();
        // Two SENDs leave, the third waits for credits; B's ACK of both advertises none...
        p.step();
        let (s, b) = (*p.a.nic.stats(), *p.b.nic.stats());
        assert_eq!((s.req_packets, s.credit_stalls, b.rnr_naks_sent), (3, 1, 0));
        // ...so only one more SEND goes, as the limited WQE, and finds no RECV.
        p.step();
        let (s, b) = (*p.a.nic.stats(), *p.b.nic.stats());
        assert_eq!((s.req_packets, s.rnr_naks_rcvd, b.rnr_naks_sent), (4, 1, 1));
        assert_eq!(p.step(), 0, "nothing beyond the limited WQE, and it waits out the RNR timer");
        // Two RECVs posted: the RNR retry lands, its ACK advertises one credit, SEND 5 goes.
        recvs(&mut p, 3..5);
        assert!(p.advance_to_timer());
        p.drive_bounded(10);
        let got: Vec<(u64, WcStatus)> =
            p.a.poll_all().iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(got, (2..=5).map(|k| (k, WcStatus::Success)).collect::<Vec<_>>());
        let s = *p.a.nic.stats();
        assert_eq!((s.req_packets, s.retransmits, s.rnr_naks_rcvd), (5, 1, 1));
        assert_eq!(p.b.poll_all().len(), 5, "every SEND found its RECV");
    }

    #[test]
    fn cnp_cuts_rate_and_paces() {
        let (mut a, b) = pair(Mtu::M1024, 0, |_| {});
        let t = Instant::from_micros(1);
        let mut r = RoceRepr::new(resp_bth(&a, opcode::CNP, 0));
        r.bth.pkey = bth::PKEY_DEFAULT;
        let cnp = response(&a, &b, r, &[]);
        a.nic.handle_packet(t, &cnp);
        assert_eq!(a.nic.stats().rate_decreases, 1);
        let ws: Vec<SendWr> = (0..4)
            .map(|i| SendWr::new(i, WrOp::Write { remote: b.remote(0) }, a.sge(0, 1000)))
            .collect();
        a.nic.post_send_batch(a.qpn, &ws, t).unwrap();
        // Paced: one packet now, the next only at the pacing deadline.
        assert_eq!(drain(&mut a, t).len(), 1);
        let next = a.nic.poll_timeout().unwrap();
        assert!(next > t);
        a.nic.handle_timeout(next);
        assert_eq!(drain(&mut a, next).len(), 1);
    }
}
