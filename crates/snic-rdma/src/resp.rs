//! Responder of an RC QP: IBTA 9.7 receive-side rules, as the Linux soft-RoCE responder
//! (rxe_resp.c) applies them.
//!
//! Per request packet, in this order: ePSN check (duplicate / ahead / in order), opcode
//! sequence, QP access flags, receive-WQE availability (RNR), payload lengths, MR checks, then
//! execution. Responses go into one queue in PSN order (ACKs coalesce at its tail), so an ACK
//! never overtakes the READ response or atomic ACK of an earlier request: the requester would
//! take that as an implied NAK and retransmit. READ responses are generated lazily, one packet
//! per [`poll_transmit`], gathered straight from memory into the packet buffer.
//!
//! Errors the IBTA classes as fatal for the responder (classes A and C: invalid request,
//! remote access, remote operational, length) queue their NAK, complete the receive WQE in
//! progress with an error status, and move the QP to ERR; the NAK still leaves because
//! [`poll_transmit`] sends pending NAKs in ERR.

use snic_time::Instant;
use snic_wire::roce::ext::{AethRepr, AtomicAckEthRepr, NakCode, Syndrome};
use snic_wire::roce::{RoceRepr, bth, cnp, icrc, opcode};

use crate::mr::MrFault;
use crate::nic_core::{Core, Placement};
use crate::pkt::{self, BuildError, Path, RxPkt, TxSg};
use crate::psn;
use crate::qp::{self, Qp, recv_cqe};
use crate::resp_state::{MAX_OUT, Msg, Out, ReadOut, ResKind, Resource};
use crate::verbs::{
    Access, FLUSH_GLOBAL, FLUSH_PERSISTENT, FlushLevel, QpState, RecvWr, WcOpcode, WcStatus,
};

/// Largest RDMA message (IBTA: 2^31 bytes).
const MAX_MSG: u32 = 1 << 31;

/// Why a request was not executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fail {
    /// No receive WQE: RNR NAK, nothing changes.
    Rnr,
    /// Too many queued responses: dropped, the requester retransmits.
    Busy,
    /// Invalid request NAK; the WQE in progress completes with `status`.
    InvReq(WcStatus),
    /// Remote access error NAK.
    Access,
    /// Remote operational error NAK; the WQE in progress completes with `status`.
    RemOp(WcStatus),
    /// The receive CQ overflowed: QP to ERR without a NAK (IBTA class G).
    CqOverflow,
}

const INV_REQ: Fail = Fail::InvReq(WcStatus::RemInvReqErr);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    Write,
    Read,
    Atomic,
    /// RC FLUSH (IBTA 1.5).
    Flush,
    /// RC ATOMIC WRITE (IBTA 1.5).
    AtomicWrite,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pos {
    First,
    Middle,
    Last,
    Only,
}

fn classify(op: u8) -> Option<(Kind, Pos)> {
    use opcode::*;
    Some(match op {
        RC_SEND_FIRST => (Kind::Send, Pos::First),
        RC_SEND_MIDDLE => (Kind::Send, Pos::Middle),
        RC_SEND_LAST | RC_SEND_LAST_WITH_IMMEDIATE | RC_SEND_LAST_WITH_INVALIDATE => {
            (Kind::Send, Pos::Last)
        }
        RC_SEND_ONLY | RC_SEND_ONLY_WITH_IMMEDIATE | RC_SEND_ONLY_WITH_INVALIDATE => {
            (Kind::Send, Pos::Only)
        }
        RC_RDMA_WRITE_FIRST => (Kind::Write, Pos::First),
        RC_RDMA_WRITE_MIDDLE => (Kind::Write, Pos::Middle),
        RC_RDMA_WRITE_LAST | RC_RDMA_WRITE_LAST_WITH_IMMEDIATE => (Kind::Write, Pos::Last),
        RC_RDMA_WRITE_ONLY | RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE => (Kind::Write, Pos::Only),
        RC_RDMA_READ_REQUEST => (Kind::Read, Pos::Only),
        RC_COMPARE_SWAP | RC_FETCH_ADD => (Kind::Atomic, Pos::Only),
        RC_FLUSH => (Kind::Flush, Pos::Only),
        RC_ATOMIC_WRITE => (Kind::AtomicWrite, Pos::Only),
        _ => return None,
    })
}

/// Packets a READ response of `len` bytes takes (and PSNs its request consumes).
fn npkts(len: u32, mtu: u32) -> u32 {
    len.div_ceil(mtu).max(1)
}

/// `p` lies in the PSN range `[first, last]`.
fn in_range(p: u32, first: u32, last: u32) -> bool {
    psn::diff(p, first) >= 0 && psn::diff(last, p) >= 0
}

/// Where the payload of an in-order request packet that continues a message (SEND or WRITE,
/// MIDDLE or LAST, without immediate data) will be written if [`on_request`] accepts it: the
/// checks it makes before writing (ePSN, opcode sequence, lengths, rights and bounds), and
/// nothing changes. The receiver copies such a payload into place while it checks the ICRC
/// ([`crate::pkt::OpenPkt::place`]). `None` for every other packet (it is checked first, then
/// handled). A FIRST or ONLY packet is never placed early: its target comes from its own
/// headers, which a corrupted packet may have wrong; a continuation's target comes from the
/// QP's state, so a corrupted one writes only bytes its good copy will overwrite.
pub fn placement(core: &Core, qp: &Qp, pkt: &RxPkt<'_>) -> Option<Placement> {
    if !matches!(qp.attr.state, QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe) {
        return None;
    }
    let bth = pkt.bth();
    if bth.psn != qp.resp.epsn || bth.opcode == opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE {
        return None;
    }
    let (kind, pos) = classify(bth.opcode)?;
    let mtu = qp.attr.path_mtu.bytes();
    let plen = u32::try_from(pkt.payload().len()).ok()?;
    let len_ok = match pos {
        Pos::Middle => plen == mtu,
        Pos::Last => (1..=mtu).contains(&plen),
        Pos::First | Pos::Only => false,
    };
    if !len_ok {
        return None;
    }
    match (qp.resp.msg?, kind) {
        (Msg::Send { wqe, offset }, Kind::Send) => {
            let pd = qp::recv_pd(core, qp);
            core.scatter_plan(pd, &wqe.sgl, offset, plen as usize).ok()
        }
        (Msg::Write { va, rkey, len, offset, .. }, Kind::Write) => {
            let left = len.checked_sub(offset)?;
            let fits = if pos == Pos::Middle { left > plen } else { left == plen };
            let at = va.checked_add(u64::from(offset))?;
            let rights =
                core.mrs.check_remote(rkey, qp.init.pd, at, u64::from(plen), Access::REMOTE_WRITE);
            (fits && rights.is_ok() && core.mem.check(at, u64::from(plen)).is_ok())
                .then(|| Placement::one(at, plen))
        }
        _ => None,
    }
}

/// A request packet arrived for this QP.
pub fn on_request(core: &mut Core, qp: &mut Qp, now: Instant, pkt: &RxPkt<'_>) {
    if pkt.ce {
        note_ce(core, qp, now);
    }
    let bth = *pkt.bth();
    let d = psn::diff(bth.psn, qp.resp.epsn);
    if d < 0 {
        duplicate(core, qp, pkt);
        return;
    }
    if d > 0 {
        // A gap: one NAK carrying the ePSN, then silence until the ePSN arrives.
        if qp.resp.seq_nak_sent {
            core.stats.out_of_seq_dropped += 1;
        } else {
            qp.resp.seq_nak_sent = true;
            let e = qp.resp.epsn;
            if !qp.resp.queue_nak(e, Syndrome::Nak(NakCode::PsnSequenceError)) {
                core.stats.resp_busy_drops += 1;
            }
        }
        return;
    }
    qp.resp.seq_nak_sent = false;
    if let Err(f) = execute(core, qp, pkt) {
        fail(core, qp, now, bth.psn, f);
    }
}

fn note_ce(core: &Core, qp: &mut Qp, now: Instant) {
    let gap = core.cfg.cc.cnp_interval;
    if qp.resp.last_cnp.is_none_or(|t| now >= t.saturating_add(gap)) {
        qp.resp.cnp_pending = true;
        qp.resp.last_cnp = Some(now);
    }
}

fn fail(core: &mut Core, qp: &mut Qp, now: Instant, psn: u32, f: Fail) {
    let (syndrome, status) = match f {
        Fail::Rnr => {
            let timer = qp.attr.min_rnr_timer & 0x1f;
            if !qp.resp.queue_nak(psn, Syndrome::RnrNak { timer }) {
                core.stats.resp_busy_drops += 1;
            }
            return;
        }
        Fail::Busy => {
            core.stats.resp_busy_drops += 1;
            return;
        }
        Fail::InvReq(s) => (Some(NakCode::InvalidRequest), s),
        Fail::Access => (Some(NakCode::RemoteAccessError), WcStatus::RemAccessErr),
        Fail::RemOp(s) => (Some(NakCode::RemoteOperationalError), s),
        Fail::CqOverflow => (None, WcStatus::WrFlushErr),
    };
    if let Some((wqe, op)) = qp.resp.msg.take().and_then(|m| m.wqe()) {
        let cqe = recv_cqe(qp, &wqe, status, op, 0);
        core.push_cqe(qp.init.recv_cq, cqe);
    }
    if let Some(code) = syndrome
        && !qp.resp.queue_nak(psn, Syndrome::Nak(code))
    {
        core.stats.resp_busy_drops += 1;
    }
    qp::enter_error(core, qp, now);
}

/// Take a receive WQE; `Rnr` when none is posted.
fn take_wqe(core: &mut Core, qp: &mut Qp) -> Result<RecvWr, Fail> {
    match qp::rq_pop(core, qp) {
        None => Err(Fail::Rnr),
        Some(Ok(w)) => Ok(w),
        // The ring slot does not decode (class A: malformed WQE).
        Some(Err(_)) => Err(Fail::RemOp(WcStatus::LocQpOpErr)),
    }
}

fn execute(core: &mut Core, qp: &mut Qp, pkt: &RxPkt<'_>) -> Result<(), Fail> {
    let bth = *pkt.bth();
    let op = bth.opcode;
    let (kind, pos) = classify(op).ok_or(INV_REQ)?;
    // Opcode sequence: MIDDLE/LAST continue the message in progress, nothing else may.
    let cont = matches!(pos, Pos::Middle | Pos::Last);
    match (qp.resp.msg, kind) {
        (Some(Msg::Send { .. }), Kind::Send) | (Some(Msg::Write { .. }), Kind::Write) if cont => {}
        (None, _) if !cont => {}
        _ => return Err(INV_REQ),
    }
    let need = match (kind, pos) {
        (Kind::Write, Pos::First | Pos::Only) => Some(Access::REMOTE_WRITE),
        (Kind::Read, _) => Some(Access::REMOTE_READ),
        (Kind::Atomic, _) => Some(Access::REMOTE_ATOMIC),
        (Kind::AtomicWrite, _) => Some(Access::REMOTE_WRITE),
        // As rxe: the QP must allow each placement type the FLUSH asks for.
        (Kind::Flush, _) => pkt.roce.headers().feth.map(|f| flush_access(f.placement_type)),
        _ => None,
    };
    if need.is_some_and(|a| !qp.attr.access.contains(a)) {
        return Err(INV_REQ);
    }
    let with_imm = matches!(
        op,
        opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE | opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE
    );
    let takes_wqe = (kind == Kind::Send && matches!(pos, Pos::First | Pos::Only)) || with_imm;
    if takes_wqe && !qp::rq_ready(core, qp) {
        return Err(Fail::Rnr);
    }
    let mtu = qp.attr.path_mtu.bytes();
    let plen = u32::try_from(pkt.payload().len()).map_err(|_| INV_REQ)?;
    let len_ok = match pos {
        Pos::First | Pos::Middle => plen == mtu,
        Pos::Last => (1..=mtu).contains(&plen),
        Pos::Only => plen <= mtu,
    };
    if !len_ok {
        return Err(INV_REQ);
    }
    match kind {
        Kind::Send => do_send(core, qp, pkt, pos)?,
        Kind::Write => do_write(core, qp, pkt, pos, with_imm)?,
        Kind::Read => return do_read(core, qp, pkt),
        Kind::Atomic => return do_atomic(core, qp, pkt),
        Kind::Flush => return do_flush(core, qp, pkt),
        Kind::AtomicWrite => return do_atomic_write(core, qp, pkt),
    }
    qp.resp.epsn = psn::add(bth.psn, 1);
    if bth.ack_req && !qp.resp.queue_ack(bth.psn) {
        core.stats.resp_busy_drops += 1;
    }
    Ok(())
}

fn do_send(core: &mut Core, qp: &mut Qp, pkt: &RxPkt<'_>, pos: Pos) -> Result<(), Fail> {
    if matches!(pos, Pos::First | Pos::Only) {
        let wqe = take_wqe(core, qp)?;
        qp.resp.msg = Some(Msg::Send { wqe, offset: 0 });
    }
    let Some(Msg::Send { wqe, offset }) = qp.resp.msg else {
        return Err(INV_REQ);
    };
    let data = pkt.payload();
    // The RECV's buffers are checked against the PD of the queue they came from (an SRQ's
    // may differ from the QP's).
    let pd = qp::recv_pd(core, qp);
    if !pkt.placed {
        core.scatter(pd, &wqe.sgl, offset, data).map_err(|e| match e {
            // The message is longer than the RECV's buffers.
            MrFault::Bounds => Fail::InvReq(WcStatus::LocLenErr),
            _ => Fail::RemOp(WcStatus::LocProtErr),
        })?;
    }
    let offset = offset + data.len() as u64;
    qp.resp.msg = Some(Msg::Send { wqe, offset });
    if matches!(pos, Pos::Last | Pos::Only) {
        let hdr = pkt.roce.headers();
        let byte_len = u32::try_from(offset).unwrap_or(u32::MAX);
        let mut cqe = recv_cqe(qp, &wqe, WcStatus::Success, WcOpcode::Recv, byte_len);
        cqe.imm = hdr.imm_dt.map(|i| i.imm);
        if let Some(ieth) = hdr.ieth {
            // rxe: an rkey that cannot be invalidated is a responder-fatal error.
            core.mrs
                .invalidate(ieth.rkey, qp.init.pd)
                .map_err(|_| Fail::InvReq(WcStatus::LocAccessErr))?;
            cqe.invalidated_rkey = Some(ieth.rkey);
        }
        qp.resp.msg = None;
        qp.resp.msn = psn::add(qp.resp.msn, 1);
        if !core.push_cqe(qp.init.recv_cq, cqe) {
            return Err(Fail::CqOverflow);
        }
    }
    Ok(())
}

fn do_write(
    core: &mut Core,
    qp: &mut Qp,
    pkt: &RxPkt<'_>,
    pos: Pos,
    with_imm: bool,
) -> Result<(), Fail> {
    let pd = qp.init.pd;
    let hdr = pkt.roce.headers();
    if matches!(pos, Pos::First | Pos::Only) {
        let reth = hdr.reth.ok_or(INV_REQ)?;
        if reth.dma_len > MAX_MSG {
            return Err(INV_REQ);
        }
        // The whole message is checked before its first byte lands.
        if reth.dma_len > 0 {
            core.mrs
                .check_remote(reth.rkey, pd, reth.va, u64::from(reth.dma_len), Access::REMOTE_WRITE)
                .map_err(|_| Fail::Access)?;
        }
        qp.resp.msg = Some(Msg::Write {
            va: reth.va,
            rkey: reth.rkey,
            len: reth.dma_len,
            offset: 0,
            wqe: None,
        });
    }
    let Some(Msg::Write { va, rkey, len, offset, mut wqe }) = qp.resp.msg else {
        return Err(INV_REQ);
    };
    let data = pkt.payload();
    let plen = data.len() as u32;
    let left = len - offset;
    let fits = match pos {
        // More must follow: a LAST carries at least one byte.
        Pos::First | Pos::Middle => left > plen,
        Pos::Last | Pos::Only => left == plen,
    };
    if !fits {
        return Err(INV_REQ);
    }
    if with_imm {
        wqe = Some(take_wqe(core, qp)?);
        qp.resp.msg = Some(Msg::Write { va, rkey, len, offset, wqe });
    }
    if plen > 0 {
        let at = va.checked_add(u64::from(offset)).ok_or(Fail::Access)?;
        // Again per packet: the MR may have been deregistered or invalidated meanwhile.
        core.mrs
            .check_remote(rkey, pd, at, u64::from(plen), Access::REMOTE_WRITE)
            .map_err(|_| Fail::Access)?;
        if !pkt.placed {
            core.mem.write(at, data).map_err(|_| Fail::RemOp(WcStatus::LocQpOpErr))?;
        }
    }
    let offset = offset + plen;
    qp.resp.msg = Some(Msg::Write { va, rkey, len, offset, wqe });
    if matches!(pos, Pos::Last | Pos::Only) {
        qp.resp.msg = None;
        qp.resp.msn = psn::add(qp.resp.msn, 1);
        if let Some(w) = wqe {
            let mut cqe = recv_cqe(qp, &w, WcStatus::Success, WcOpcode::RecvRdmaWithImm, len);
            cqe.imm = hdr.imm_dt.map(|i| i.imm);
            if !core.push_cqe(qp.init.recv_cq, cqe) {
                return Err(Fail::CqOverflow);
            }
        }
    }
    Ok(())
}

fn do_read(core: &mut Core, qp: &mut Qp, pkt: &RxPkt<'_>) -> Result<(), Fail> {
    let p = pkt.bth().psn;
    let reth = pkt.roce.headers().reth.ok_or(INV_REQ)?;
    if reth.dma_len > MAX_MSG {
        return Err(INV_REQ);
    }
    if reth.dma_len > 0 {
        core.mrs
            .check_remote(
                reth.rkey,
                qp.init.pd,
                reth.va,
                u64::from(reth.dma_len),
                Access::REMOTE_READ,
            )
            .map_err(|_| Fail::Access)?;
    }
    if qp.resp.out.len() >= MAX_OUT {
        return Err(Fail::Busy);
    }
    let n = npkts(reth.dma_len, qp.attr.path_mtu.bytes());
    let last = psn::add(p, n - 1);
    let max = qp.attr.max_dest_rd_atomic;
    qp.resp.push_resource(Resource { first: p, last, kind: ResKind::Read }, max);
    qp.resp.msn = psn::add(qp.resp.msn, 1);
    qp.resp.out.push_back(Out::Read(ReadOut {
        res_first: p,
        psn: p,
        last,
        va: reth.va,
        rkey: reth.rkey,
        left: reth.dma_len,
        msn: qp.resp.msn,
    }));
    qp.resp.epsn = psn::add(p, n);
    Ok(())
}

fn do_atomic(core: &mut Core, qp: &mut Qp, pkt: &RxPkt<'_>) -> Result<(), Fail> {
    let p = pkt.bth().psn;
    let a = pkt.roce.headers().atomic_eth.ok_or(INV_REQ)?;
    if a.va % 8 != 0 {
        return Err(INV_REQ);
    }
    core.mrs
        .check_remote(a.rkey, qp.init.pd, a.va, 8, Access::REMOTE_ATOMIC)
        .map_err(|_| Fail::Access)?;
    if qp.resp.out.len() >= MAX_OUT {
        return Err(Fail::Busy);
    }
    let r = if pkt.bth().opcode == opcode::RC_COMPARE_SWAP {
        core.mem.compare_swap(a.va, a.compare, a.swap_add)
    } else {
        core.mem.fetch_add(a.va, a.swap_add)
    };
    let orig = r.map_err(|_| Fail::RemOp(WcStatus::LocQpOpErr))?;
    core.stats.atomics_executed += 1;
    let max = qp.attr.max_dest_rd_atomic;
    qp.resp.push_resource(Resource { first: p, last: p, kind: ResKind::Atomic { orig } }, max);
    qp.resp.msn = psn::add(qp.resp.msn, 1);
    qp.resp.out.push_back(Out::Atomic { psn: p, orig, msn: qp.resp.msn });
    qp.resp.epsn = psn::add(p, 1);
    Ok(())
}

/// The access flags a FLUSH of `placement` needs (of the QP and of the MR).
fn flush_access(placement: u8) -> Access {
    let mut a = Access::NONE;
    if placement & FLUSH_GLOBAL != 0 {
        a = a | Access::FLUSH_GLOBAL;
    }
    if placement & FLUSH_PERSISTENT != 0 {
        a = a | Access::FLUSH_PERSISTENT;
    }
    a
}

/// A FLUSH or ATOMIC WRITE at `p` was executed: remember it (a duplicate is answered from the
/// resource, never executed again), count the message, queue its empty READ RESPONSE ONLY and
/// expect the next PSN.
fn answer_done(qp: &mut Qp, p: u32) {
    let max = qp.attr.max_dest_rd_atomic;
    qp.resp.push_resource(Resource { first: p, last: p, kind: ResKind::Done }, max);
    qp.resp.msn = psn::add(qp.resp.msn, 1);
    qp.resp.out.push_back(empty_read_response(p, qp.resp.msn));
    qp.resp.epsn = psn::add(p, 1);
}

/// The answer to a FLUSH or ATOMIC WRITE at `p`: one READ RESPONSE ONLY without payload.
fn empty_read_response(p: u32, msn: u32) -> Out {
    Out::Read(ReadOut { res_first: p, psn: p, last: p, va: 0, rkey: 0, left: 0, msn })
}

/// Execute an RC FLUSH (IBTA 1.5 section 9.4.6; rxe's `process_flush`).
///
/// Ordering: the responder places every request in PSN order as it arrives, synchronously,
/// into the one engine memory, so when a FLUSH executes every earlier WRITE / ATOMIC WRITE of
/// the QP is already placed and visible to every reader of that memory. snic's memories (host
/// pool, on-chip, on-board) have no separate persistence domain, so a persistence FLUSH has
/// nothing more to write back; it still needs the MR's (and the QP's) `FLUSH_PERSISTENT`
/// right, so an application gets the errors a real persistent-memory NIC gives it.
fn do_flush(core: &mut Core, qp: &mut Qp, pkt: &RxPkt<'_>) -> Result<(), Fail> {
    let p = pkt.bth().psn;
    let h = pkt.roce.headers();
    let (feth, reth) = (h.feth.ok_or(INV_REQ)?, h.reth.ok_or(INV_REQ)?);
    let level = FlushLevel::from_selectivity(feth.selectivity_level).ok_or(INV_REQ)?;
    let placement = feth.placement_type;
    // Placement types other than visibility, persistence or both are reserved.
    if placement == 0 || placement & !(FLUSH_GLOBAL | FLUSH_PERSISTENT) != 0 {
        return Err(INV_REQ);
    }
    let need = flush_access(placement);
    let pd = qp.init.pd;
    let (va, len) = match level {
        FlushLevel::Range => (reth.va, u64::from(reth.dma_len)),
        // The whole MR: its address and length are not the RETH's (rxe skips the range check).
        FlushLevel::Region => {
            let mr = core.mrs.by_rkey(reth.rkey).ok_or(Fail::Access)?;
            (mr.addr, mr.len)
        }
    };
    core.mrs.check_remote(reth.rkey, pd, va, len, need).map_err(|_| Fail::Access)?;
    if qp.resp.out.len() >= MAX_OUT {
        return Err(Fail::Busy);
    }
    core.stats.flushes_executed += 1;
    answer_done(qp, p);
    Ok(())
}

/// Execute an RC ATOMIC WRITE (IBTA 1.5 section 9.4.5; rxe's `atomic_write_reply`): the 8
/// payload bytes land at the 8-byte aligned address in one store. The engine is the only
/// writer of its memory while it handles a packet, so no reader sees half of them (the same
/// guarantee as its CmpSwap and FetchAdd).
fn do_atomic_write(core: &mut Core, qp: &mut Qp, pkt: &RxPkt<'_>) -> Result<(), Fail> {
    let p = pkt.bth().psn;
    let reth = pkt.roce.headers().reth.ok_or(INV_REQ)?;
    let data: [u8; opcode::ATOMIC_WRITE_LEN] = pkt.payload().try_into().map_err(|_| INV_REQ)?;
    if reth.dma_len as usize != opcode::ATOMIC_WRITE_LEN || reth.va % 8 != 0 {
        return Err(INV_REQ);
    }
    core.mrs
        .check_remote(reth.rkey, qp.init.pd, reth.va, 8, Access::REMOTE_WRITE)
        .map_err(|_| Fail::Access)?;
    if qp.resp.out.len() >= MAX_OUT {
        return Err(Fail::Busy);
    }
    core.mem.write(reth.va, &data).map_err(|_| Fail::RemOp(WcStatus::LocQpOpErr))?;
    core.stats.atomic_writes_executed += 1;
    answer_done(qp, p);
    Ok(())
}

/// A request with a PSN before the ePSN: answer it again without executing it again.
fn duplicate(core: &mut Core, qp: &mut Qp, pkt: &RxPkt<'_>) {
    core.stats.dup_requests += 1;
    let p = pkt.bth().psn;
    match classify(pkt.bth().opcode).map(|c| c.0) {
        Some(Kind::Send | Kind::Write) => {
            // Always answered, AckReq or not: the requester may have lost our ACK.
            let prev = psn::add(qp.resp.epsn, psn::MASK);
            if !qp.resp.queue_ack(prev) {
                core.stats.resp_busy_drops += 1;
            }
        }
        Some(Kind::Read) => replay_read(core, qp, pkt),
        Some(Kind::Atomic) => {
            let found = qp.resp.res.iter().find_map(|r| match r.kind {
                ResKind::Atomic { orig } if r.first == p => Some(orig),
                _ => None,
            });
            let Some(orig) = found else { return };
            qp.resp.drop_after(p);
            let queued =
                qp.resp.out.iter().any(|o| matches!(o, Out::Atomic { psn, .. } if *psn == p));
            if !queued && qp.resp.out.len() < MAX_OUT {
                qp.resp.out.push_back(Out::Atomic { psn: p, orig, msn: qp.resp.msn });
            }
            core.stats.dup_atomics_replayed += 1;
        }
        Some(k @ (Kind::Flush | Kind::AtomicWrite)) => {
            let found = qp.resp.res.iter().any(|r| r.kind == ResKind::Done && r.first == p);
            if !found {
                // Evicted (or never ours): IBTA class D, drop; never run it again.
                return;
            }
            qp.resp.drop_after(p);
            let queued = qp.resp.out.iter().any(|o| matches!(o, Out::Read(r) if r.res_first == p));
            if !queued && qp.resp.out.len() < MAX_OUT {
                qp.resp.out.push_back(empty_read_response(p, qp.resp.msn));
            }
            if k == Kind::Flush {
                core.stats.dup_flushes_replayed += 1;
            } else {
                core.stats.dup_atomic_writes_replayed += 1;
            }
        }
        None => {}
    }
}

fn replay_read(core: &mut Core, qp: &mut Qp, pkt: &RxPkt<'_>) {
    let p = pkt.bth().psn;
    let Some(reth) = pkt.roce.headers().reth else { return };
    let Some(res) = qp
        .resp
        .res
        .iter()
        .find(|r| r.kind == ResKind::Read && in_range(p, r.first, r.last))
        .copied()
    else {
        // Evicted (or never ours): IBTA class D, drop.
        return;
    };
    if reth.dma_len > MAX_MSG {
        return;
    }
    // The retry names the rest of the READ (va and length advanced): check it afresh.
    if reth.dma_len > 0
        && core
            .mrs
            .check_remote(
                reth.rkey,
                qp.init.pd,
                reth.va,
                u64::from(reth.dma_len),
                Access::REMOTE_READ,
            )
            .is_err()
    {
        return;
    }
    let last = psn::add(p, npkts(reth.dma_len, qp.attr.path_mtu.bytes()) - 1);
    if !in_range(last, res.first, res.last) {
        return;
    }
    qp.resp.drop_after(p);
    let ro = ReadOut {
        res_first: res.first,
        psn: p,
        last,
        va: reth.va,
        rkey: reth.rkey,
        left: reth.dma_len,
        msn: qp.resp.msn,
    };
    let queued =
        qp.resp.out.iter().position(|o| matches!(o, Out::Read(r) if r.res_first == res.first));
    match queued {
        // Still being answered: restart from where the requester asks.
        Some(i) => qp.resp.out[i] = Out::Read(ro),
        None if qp.resp.out.len() < MAX_OUT => qp.resp.out.push_back(Out::Read(ro)),
        None => return,
    }
    core.stats.dup_reads_replayed += 1;
}

fn resp_bth(qp: &Qp, opcode: u8, psn: u32) -> bth::Repr {
    bth::Repr {
        opcode,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        pkey: bth::PKEY_DEFAULT,
        fecn: false,
        becn: false,
        dest_qp: qp.attr.dest_qpn,
        ack_req: false,
        psn,
    }
}

fn no_payload(_: &mut icrc::Hasher, _: &mut TxSg) -> Result<(), ()> {
    Ok(())
}

/// Build the next response packet (ACK, NAK, READ response, atomic ACK, CNP) into `buf`.
pub fn poll_transmit(core: &mut Core, qp: &mut Qp, now: Instant, buf: &mut [u8]) -> Option<TxSg> {
    let path = qp.path?;
    let err = qp.attr.state == QpState::Err;
    while let Some(&o) = qp.resp.out.front() {
        if err && !matches!(o, Out::Nak { .. }) {
            // In ERR only the NAK that put us there still leaves.
            qp.resp.out.pop_front();
            continue;
        }
        match emit(core, qp, &path, o, buf) {
            Ok(n) => return Some(n),
            Err(BuildError::Payload) => {
                // The READ's memory went away after the request was accepted.
                qp.resp.out.pop_front();
                if let Out::Read(r) = o {
                    let syn = Syndrome::Nak(NakCode::RemoteOperationalError);
                    let msn = qp.resp.msn;
                    qp.resp.out.push_front(Out::Nak { psn: r.psn, syndrome: syn, msn });
                    qp::enter_error(core, qp, now);
                }
                return poll_transmit(core, qp, now, buf);
            }
            Err(_) => {
                // Cannot be built into this buffer (or at all): drop it rather than wedge.
                qp.resp.out.pop_front();
                return None;
            }
        }
    }
    if qp.resp.cnp_pending && !err {
        qp.resp.cnp_pending = false;
        let c = cnp::Repr { dest_qp: qp.attr.dest_qpn, pkey: bth::PKEY_DEFAULT };
        let n = pkt::build_sg(buf, &path, &RoceRepr::new(c.bth()), 0, no_payload).ok()?;
        core.stats.cnps_sent += 1;
        return Some(n);
    }
    None
}

/// Build `o` (the queue's front) and advance the queue.
fn emit(
    core: &mut Core,
    qp: &mut Qp,
    path: &Path,
    o: Out,
    buf: &mut [u8],
) -> Result<TxSg, BuildError> {
    let credits = qp::ack_credits(qp);
    let ack = |msn| AethRepr { syndrome: Syndrome::Ack { credits }, msn };
    match o {
        Out::Ack { psn, msn } | Out::Nak { psn, msn, .. } => {
            let syndrome = match o {
                Out::Nak { syndrome, .. } => syndrome,
                _ => ack(msn).syndrome,
            };
            let mut r = RoceRepr::new(resp_bth(qp, opcode::RC_ACKNOWLEDGE, psn));
            r.aeth = Some(AethRepr { syndrome, msn });
            let n = pkt::build_sg(buf, path, &r, 0, no_payload)?;
            qp.resp.out.pop_front();
            let s = &mut core.stats;
            match syndrome {
                Syndrome::Ack { .. } => s.acks_sent += 1,
                Syndrome::RnrNak { .. } => s.rnr_naks_sent += 1,
                Syndrome::Nak(NakCode::PsnSequenceError) => s.seq_naks_sent += 1,
                Syndrome::Nak(NakCode::InvalidRequest | NakCode::InvalidRdRequest) => {
                    s.inv_req_naks_sent += 1
                }
                Syndrome::Nak(NakCode::RemoteAccessError) => s.rem_access_naks_sent += 1,
                Syndrome::Nak(NakCode::RemoteOperationalError) => s.rem_op_naks_sent += 1,
            }
            Ok(n)
        }
        Out::Atomic { psn, orig, msn } => {
            let mut r = RoceRepr::new(resp_bth(qp, opcode::RC_ATOMIC_ACKNOWLEDGE, psn));
            r.aeth = Some(ack(msn));
            r.atomic_ack_eth = Some(AtomicAckEthRepr { orig_data: orig });
            let n = pkt::build_sg(buf, path, &r, 0, no_payload)?;
            qp.resp.out.pop_front();
            Ok(n)
        }
        Out::Read(ro) => {
            let mtu = qp.attr.path_mtu.bytes();
            let len = ro.left.min(mtu);
            let at_start = ro.psn == ro.res_first;
            let at_end = ro.psn == ro.last || ro.left <= mtu;
            let op = match (at_start, at_end) {
                (true, true) => opcode::RC_RDMA_READ_RESPONSE_ONLY,
                (true, false) => opcode::RC_RDMA_READ_RESPONSE_FIRST,
                (false, true) => opcode::RC_RDMA_READ_RESPONSE_LAST,
                (false, false) => opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            };
            let mut r = RoceRepr::new(resp_bth(qp, op, ro.psn));
            if op != opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
                r.aeth = Some(ack(ro.msn));
            }
            let (mem, mrs, pd) = (&core.mem, &core.mrs, qp.init.pd);
            let n = pkt::build_sg(buf, path, &r, len as usize, |h, sg| {
                if len == 0 {
                    return Ok(());
                }
                // The MR may have been deregistered since the request was checked.
                mrs.check_remote(ro.rkey, pd, ro.va, u64::from(len), Access::REMOTE_READ)
                    .map_err(|_| ())?;
                h.update(mem.slice(ro.va, len as usize).map_err(|_| ())?);
                sg.ranges[0] = (ro.va, len);
                sg.npayload = 1;
                Ok::<(), ()>(())
            })?;
            core.stats.read_resp_sent += 1;
            if at_end {
                qp.resp.out.pop_front();
            } else if let Some(Out::Read(f)) = qp.resp.out.front_mut() {
                f.psn = psn::add(f.psn, 1);
                f.va = f.va.wrapping_add(u64::from(len));
                f.left -= len;
            }
            Ok(n)
        }
    }
}

/// Earliest responder deadline: none (ACKs are coalesced up to the next [`poll_transmit`],
/// not on a timer).
pub fn poll_timeout(_qp: &Qp) -> Option<Instant> {
    None
}

/// Run responder timers due at `now` (there are none).
pub fn handle_timeout(_core: &mut Core, _qp: &mut Qp, _now: Instant) {}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use snic_dma::MemKind;
    use snic_wire::roce::ext::{AtomicEthRepr, IethRepr, ImmDtRepr, RethRepr};

    use super::*;
    use crate::pkt::{ECN_CE, ECN_ECT0};
    use crate::testing::{End, EndOpts, Pair, dummy_cqe};
    use crate::verbs::*;
    use crate::{Rnic, RnicConfig};

    const PEER_QPN: u32 = 0x99;
    const LOCAL_IP: &str = "10.0.0.2";
    const PEER_IP: &str = "10.0.0.1";
    const BUF_LEN: u64 = 8192;
    const MR_LEN: u64 = 4096;

    struct T {
        nic: Rnic,
        qpn: u32,
        pd: Pd,
        cq: CqId,
        peer: Path,
        /// Start of an 8 KiB buffer; the MR covers its first 4 KiB.
        buf: u64,
        mr: MrInfo,
        now: Instant,
    }

    /// One NIC with one RC QP in RTR (the requester side stays silent), path MTU 256.
    fn setup_psn(qp_access: Access, mr_access: Access, rq_psn: u32) -> T {
        let cfg = RnicConfig {
            local_ip: LOCAL_IP.parse().unwrap(),
            host_pool: 1 << 20,
            on_chip: 0,
            on_board: 0,
            ..RnicConfig::default()
        };
        let mut nic = Rnic::new(cfg).unwrap();
        let pd = nic.alloc_pd();
        let cq = nic.create_cq(64);
        let qpn = nic
            .create_qp(QpInit {
                pd,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                max_send_wr: 8,
                max_recv_wr: 8,
                placement: MemKind::Host,
                sq_sig_all: false,
            })
            .unwrap();
        let init = QpAttr { state: QpState::Init, access: qp_access, ..QpAttr::default() };
        nic.modify_qp(qpn, &init, AttrMask::STATE | AttrMask::ACCESS, Instant::ZERO).unwrap();
        let peer_ip: IpAddr = PEER_IP.parse().unwrap();
        let rtr = QpAttr {
            state: QpState::Rtr,
            remote: Some(peer_ip),
            path_mtu: Mtu::M256,
            dest_qpn: PEER_QPN,
            rq_psn,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 5,
            ..init
        };
        let mask = AttrMask::STATE
            | AttrMask::AV
            | AttrMask::PATH_MTU
            | AttrMask::DEST_QPN
            | AttrMask::RQ_PSN
            | AttrMask::MAX_DEST_RD_ATOMIC
            | AttrMask::MIN_RNR_TIMER;
        nic.modify_qp(qpn, &rtr, mask, Instant::ZERO).unwrap();
        let buf = nic.alloc_buf(MemKind::Host, BUF_LEN, 64).unwrap();
        let mr = nic.reg_mr(pd, buf, MR_LEN, mr_access).unwrap();
        let peer = Path {
            src: peer_ip,
            dst: LOCAL_IP.parse().unwrap(),
            sport: pkt::sport_for(PEER_QPN, qpn),
            dport: snic_wire::roce::UDP_PORT,
            dscp: 26,
            ecn: ECN_ECT0,
        };
        T { nic, qpn, pd, cq, peer, buf, mr, now: Instant::ZERO }
    }

    fn setup(qp_access: Access, mr_access: Access) -> T {
        setup_psn(qp_access, mr_access, 100)
    }

    fn all() -> T {
        setup(Access::ALL, Access::ALL)
    }

    fn req_bth(t: &T, op: u8, psn: u32, ack_req: bool) -> RoceRepr {
        RoceRepr::new(bth::Repr {
            opcode: op,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: bth::PKEY_DEFAULT,
            fecn: false,
            becn: false,
            dest_qp: t.qpn,
            ack_req,
            psn,
        })
    }

    fn deliver(t: &mut T, r: &RoceRepr, payload: &[u8]) {
        let mut b = vec![0u8; pkt::MAX_PACKET_LEN];
        let n = pkt::build(&mut b, &t.peer, r, payload.len(), |d: &mut [u8]| {
            d.copy_from_slice(payload);
            Ok::<(), ()>(())
        })
        .unwrap();
        t.nic.handle_packet(t.now, &b[..n]);
    }

    /// A WRITE packet; `at`: (offset into the buffer, RETH length) with the MR's rkey.
    fn write(t: &mut T, op: u8, psn: u32, ack: bool, at: Option<(u64, u32)>, data: &[u8]) {
        let r = at.and_then(|(off, len)| reth(t, off, len));
        write_raw(t, op, psn, ack, r, data);
    }

    fn write_raw(t: &mut T, op: u8, psn: u32, ack: bool, reth: Option<RethRepr>, data: &[u8]) {
        let mut r = req_bth(t, op, psn, ack);
        r.reth = reth;
        deliver(t, &r, data);
    }

    fn reth(t: &T, off: u64, len: u32) -> Option<RethRepr> {
        Some(RethRepr { va: t.buf + off, rkey: t.mr.rkey, dma_len: len })
    }

    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Resp {
        op: u8,
        psn: u32,
        dest_qp: u32,
        aeth: Option<AethRepr>,
        orig: Option<u64>,
        payload: Vec<u8>,
    }

    fn drain(t: &mut T) -> Vec<Resp> {
        let mut out = Vec::new();
        let mut b = vec![0u8; pkt::MAX_PACKET_LEN];
        while let Some(n) = t.nic.poll_transmit(t.now, &mut b) {
            let p = pkt::parse(&b[..n], snic_wire::roce::UDP_PORT).expect("valid packet");
            assert_eq!(p.dst, t.peer.src);
            let h = p.roce.headers();
            // The credit count follows the RQ (`qp::ack_credits`, tested with the requester's
            // credit rules in req.rs); these tests compare everything else.
            let mut aeth = h.aeth;
            if let Some(AethRepr { syndrome: Syndrome::Ack { credits }, .. }) = aeth.as_mut() {
                *credits = 31;
            }
            out.push(Resp {
                op: h.bth.opcode,
                psn: h.bth.psn,
                dest_qp: h.bth.dest_qp,
                aeth,
                orig: h.atomic_ack_eth.map(|a| a.orig_data),
                payload: p.payload().to_vec(),
            });
            assert!(out.len() < 10_000, "endless responses");
        }
        out
    }

    fn ack(psn: u32, msn: u32) -> Resp {
        Resp {
            op: opcode::RC_ACKNOWLEDGE,
            psn,
            dest_qp: PEER_QPN,
            aeth: Some(AethRepr { syndrome: Syndrome::Ack { credits: 31 }, msn }),
            orig: None,
            payload: Vec::new(),
        }
    }

    fn nak(psn: u32, msn: u32, syndrome: Syndrome) -> Resp {
        Resp { aeth: Some(AethRepr { syndrome, msn }), ..ack(psn, msn) }
    }

    fn mem(t: &T, off: u64, len: usize) -> Vec<u8> {
        t.nic.mem().slice(t.buf + off, len).unwrap().to_vec()
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
    }

    fn cqes(t: &mut T) -> Vec<Cqe> {
        let mut v = [dummy_cqe(); 16];
        let n = t.nic.poll_cq(t.cq, &mut v).unwrap();
        v[..n].to_vec()
    }

    fn post_recv(t: &mut T, wr_id: u64, off: u64, len: u32) {
        let sge = Sge { addr: t.buf + off, len, lkey: t.mr.lkey };
        t.nic.post_recv(t.qpn, &RecvWr { wr_id, sgl: SgList::one(sge) }, t.now).unwrap();
    }

    fn state(t: &T) -> QpState {
        t.nic.query_qp(t.qpn).unwrap().state
    }

    #[test]
    fn multi_packet_write_lands_byte_exact_across_psn_wrap() {
        let mut t = setup_psn(Access::ALL, Access::ALL, psn::MASK - 1);
        let data = pattern(612, 7);
        let p0 = psn::MASK - 1;
        write(&mut t, opcode::RC_RDMA_WRITE_FIRST, p0, false, Some((8, 612)), &data[..256]);
        write(&mut t, opcode::RC_RDMA_WRITE_MIDDLE, psn::MASK, false, None, &data[256..512]);
        write(&mut t, opcode::RC_RDMA_WRITE_LAST, 0, true, None, &data[512..]);
        assert_eq!(drain(&mut t), vec![ack(0, 1)]);
        assert_eq!(mem(&t, 8, 612), data);
        assert_eq!(mem(&t, 0, 8), vec![0; 8]);
        assert_eq!(mem(&t, 620, 100), vec![0; 100]);
        assert_eq!(t.nic.stats().acks_sent, 1);
        // Next in-order PSN is 1.
        write(&mut t, opcode::RC_RDMA_WRITE_ONLY, 1, true, Some((0, 2)), b"xy");
        assert_eq!(drain(&mut t), vec![ack(1, 2)]);
        assert_eq!(mem(&t, 0, 2), b"xy");
    }

    /// Deliver a request whose payload byte `flip` was corrupted after its ICRC was computed.
    fn deliver_corrupt(t: &mut T, r: &RoceRepr, payload: &[u8], flip: usize) {
        let mut b = vec![0u8; pkt::MAX_PACKET_LEN];
        let n = pkt::build(&mut b, &t.peer, r, payload.len(), |d: &mut [u8]| {
            d.copy_from_slice(payload);
            Ok::<(), ()>(())
        })
        .unwrap();
        let at = n - snic_wire::roce::ICRC_LEN - r.bth.pad_count as usize - payload.len();
        b[at + flip] ^= 0x40;
        t.nic.handle_packet(t.now, &b[..n]);
    }

    /// In-order continuations are copied while their ICRC is checked: a corrupted one is
    /// counted, answered with nothing, completes nothing and moves nothing; its good copy then
    /// lands byte-exact (over whatever the bad one left) and completes.
    #[test]
    fn corrupt_continuation_is_counted_and_its_good_copy_completes() {
        let mut t = all();
        post_recv(&mut t, 77, 1024, 1024);
        let data = pattern(700, 9);
        write(&mut t, opcode::RC_RDMA_WRITE_FIRST, 100, false, Some((8, 700)), &data[..256]);
        let mid = req_bth(&t, opcode::RC_RDMA_WRITE_MIDDLE, 101, false);
        deliver_corrupt(&mut t, &mid, &data[256..512], 17);
        let last = req_bth(&t, opcode::RC_RDMA_WRITE_LAST, 102, true);
        deliver_corrupt(&mut t, &last, &data[512..], 187);
        let before = t.nic.stats();
        assert_eq!((before.rx_bad_icrc, before.rx_placed, before.acks_sent), (2, 0, 0));
        assert!(drain(&mut t).is_empty(), "no answer to a bad ICRC");
        // A gap is still a gap: the corrupted MIDDLE did not advance the ePSN.
        deliver(&mut t, &last, &data[512..]);
        assert_eq!(drain(&mut t), vec![nak(101, 0, Syndrome::Nak(NakCode::PsnSequenceError))]);
        deliver(&mut t, &mid, &data[256..512]);
        deliver(&mut t, &last, &data[512..]);
        assert_eq!(drain(&mut t), vec![ack(102, 1)]);
        assert_eq!(mem(&t, 8, 700), data);

        // A SEND: the corrupted LAST completes nothing.
        let first = req_bth(&t, opcode::RC_SEND_FIRST, 103, false);
        deliver(&mut t, &first, &data[..256]);
        let last = req_bth(&t, opcode::RC_SEND_LAST, 104, true);
        deliver_corrupt(&mut t, &last, &data[256..300], 0);
        assert!(cqes(&mut t).is_empty());
        assert!(drain(&mut t).is_empty());
        deliver(&mut t, &last, &data[256..300]);
        assert_eq!(drain(&mut t), vec![ack(104, 2)]);
        let c = cqes(&mut t);
        assert_eq!((c.len(), c[0].wr_id, c[0].byte_len), (1, 77, 300));
        assert_eq!(mem(&t, 1024, 300), &data[..300]);
        let s = t.nic.stats();
        // Placed early: WRITE MIDDLE and LAST, SEND LAST (FIRSTs are checked, then copied).
        assert_eq!((s.rx_bad_icrc, s.rx_placed), (3, 3));
    }

    #[test]
    fn acks_coalesce_to_latest_psn() {
        let mut t = all();
        for i in 0..5u32 {
            write(&mut t, opcode::RC_RDMA_WRITE_ONLY, 100 + i, true, Some((0, 1)), b"a");
        }
        assert_eq!(drain(&mut t), vec![ack(104, 5)]);
    }

    #[test]
    fn send_with_imm_completes_recv() {
        let mut t = all();
        post_recv(&mut t, 77, 64, 512);
        let data = pattern(300, 3);
        let r = req_bth(&t, opcode::RC_SEND_FIRST, 100, false);
        deliver(&mut t, &r, &data[..256]);
        let mut r = req_bth(&t, opcode::RC_SEND_LAST_WITH_IMMEDIATE, 101, true);
        r.imm_dt = Some(ImmDtRepr { imm: 0xdead_beef });
        deliver(&mut t, &r, &data[256..]);
        assert_eq!(drain(&mut t), vec![ack(101, 1)]);
        assert_eq!(mem(&t, 64, 300), data);
        let c = cqes(&mut t);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].wr_id, 77);
        assert_eq!(c[0].status, WcStatus::Success);
        assert_eq!(c[0].opcode, WcOpcode::Recv);
        assert_eq!(c[0].byte_len, 300);
        assert_eq!(c[0].imm, Some(0xdead_beef));
        assert_eq!(c[0].src_qp, PEER_QPN);
        assert_eq!(c[0].qpn, t.qpn);
    }

    #[test]
    fn send_with_invalidate_invalidates_the_rkey() {
        let mut t = all();
        let other = t.nic.reg_mr(t.pd, t.buf + 4096, 64, Access::ALL).unwrap();
        post_recv(&mut t, 1, 0, 64);
        let mut r = req_bth(&t, opcode::RC_SEND_ONLY_WITH_INVALIDATE, 100, true);
        r.ieth = Some(IethRepr { rkey: other.rkey });
        deliver(&mut t, &r, b"bye");
        assert_eq!(drain(&mut t), vec![ack(100, 1)]);
        let c = cqes(&mut t);
        assert_eq!(c[0].invalidated_rkey, Some(other.rkey));
        // The invalidated MR refuses remote access now.
        let bad = Some(RethRepr { va: t.buf + 4096, rkey: other.rkey, dma_len: 1 });
        write_raw(&mut t, opcode::RC_RDMA_WRITE_ONLY, 101, true, bad, b"z");
        let nk = nak(101, 1, Syndrome::Nak(NakCode::RemoteAccessError));
        assert_eq!(drain(&mut t), vec![nk]);
        assert_eq!(mem(&t, 4096, 1), vec![0]);
    }

    #[test]
    fn write_with_imm_consumes_a_recv() {
        let mut t = all();
        post_recv(&mut t, 5, 2048, 16);
        let mut r = req_bth(&t, opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 100, true);
        r.reth = reth(&t, 0, 4);
        r.imm_dt = Some(ImmDtRepr { imm: 42 });
        deliver(&mut t, &r, b"abcd");
        assert_eq!(drain(&mut t), vec![ack(100, 1)]);
        assert_eq!(mem(&t, 0, 4), b"abcd");
        let c = cqes(&mut t);
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].wr_id, c[0].opcode, c[0].byte_len), (5, WcOpcode::RecvRdmaWithImm, 4));
        assert_eq!(c[0].imm, Some(42));
        // No RECV left: RNR NAK and nothing written.
        deliver(&mut t, &RoceRepr { bth: bth::Repr { psn: 101, ..r.bth }, ..r }, b"wxyz");
        assert_eq!(drain(&mut t), vec![nak(101, 1, Syndrome::RnrNak { timer: 5 })]);
        assert_eq!(mem(&t, 0, 4), b"abcd");
    }

    #[test]
    fn rnr_nak_without_recv_leaves_epsn() {
        let mut t = all();
        let r = req_bth(&t, opcode::RC_SEND_ONLY, 100, true);
        deliver(&mut t, &r, b"hello");
        assert_eq!(drain(&mut t), vec![nak(100, 0, Syndrome::RnrNak { timer: 5 })]);
        assert_eq!(t.nic.stats().rnr_naks_sent, 1);
        assert!(cqes(&mut t).is_empty());
        assert_eq!(state(&t), QpState::Rtr);
        // The same PSN again, now with a RECV posted: accepted (the ePSN did not move).
        post_recv(&mut t, 9, 0, 64);
        deliver(&mut t, &r, b"hello");
        assert_eq!(drain(&mut t), vec![ack(100, 1)]);
        assert_eq!(mem(&t, 0, 5), b"hello");
        assert_eq!(cqes(&mut t)[0].wr_id, 9);
    }

    #[test]
    fn out_of_sequence_gets_one_nak_per_gap() {
        let mut t = all();
        for p in [102, 103, 104] {
            write(&mut t, opcode::RC_RDMA_WRITE_ONLY, p, true, Some((0, 1)), b"x");
        }
        assert_eq!(drain(&mut t), vec![nak(100, 0, Syndrome::Nak(NakCode::PsnSequenceError))]);
        assert_eq!(t.nic.stats().seq_naks_sent, 1);
        assert_eq!(t.nic.stats().out_of_seq_dropped, 2);
        assert_eq!(mem(&t, 0, 1), vec![0]);
        // The expected PSN arrives; a new gap is NAKed again.
        write(&mut t, opcode::RC_RDMA_WRITE_ONLY, 100, true, Some((0, 1)), b"y");
        write(&mut t, opcode::RC_RDMA_WRITE_ONLY, 105, true, Some((0, 1)), b"z");
        let want = vec![ack(100, 1), nak(101, 1, Syndrome::Nak(NakCode::PsnSequenceError))];
        assert_eq!(drain(&mut t), want);
        assert_eq!(mem(&t, 0, 1), b"y");
    }

    #[test]
    fn duplicate_write_is_reacked_not_rewritten() {
        let mut t = all();
        write(&mut t, opcode::RC_RDMA_WRITE_ONLY, 100, true, Some((0, 3)), b"one");
        write(&mut t, opcode::RC_RDMA_WRITE_ONLY, 101, false, Some((8, 3)), b"two");
        assert_eq!(drain(&mut t), vec![ack(100, 1)]);
        t.nic.mem_mut().write(t.buf, b"new").unwrap();
        // Duplicate without AckReq: still answered, with ePSN - 1.
        write(&mut t, opcode::RC_RDMA_WRITE_ONLY, 100, false, Some((0, 3)), b"one");
        assert_eq!(drain(&mut t), vec![ack(101, 2)]);
        assert_eq!(mem(&t, 0, 3), b"new");
        assert_eq!(t.nic.stats().dup_requests, 1);
    }

    fn atomic(t: &mut T, op: u8, psn: u32, off: u64, swap_add: u64, compare: u64) {
        let mut r = req_bth(t, op, psn, true);
        r.atomic_eth = Some(AtomicEthRepr { va: t.buf + off, rkey: t.mr.rkey, swap_add, compare });
        deliver(t, &r, &[]);
    }

    fn atomic_ack(psn: u32, msn: u32, orig: u64) -> Resp {
        Resp { op: opcode::RC_ATOMIC_ACKNOWLEDGE, orig: Some(orig), ..ack(psn, msn) }
    }

    #[test]
    fn duplicate_atomic_replays_the_original_value_once() {
        let mut t = all();
        t.nic.mem_mut().write_u64(t.buf + 16, 5).unwrap();
        atomic(&mut t, opcode::RC_FETCH_ADD, 100, 16, 3, 0);
        assert_eq!(drain(&mut t), vec![atomic_ack(100, 1, 5)]);
        assert_eq!(t.nic.mem().read_u64(t.buf + 16).unwrap(), 8);
        atomic(&mut t, opcode::RC_FETCH_ADD, 100, 16, 3, 0);
        assert_eq!(drain(&mut t), vec![atomic_ack(100, 1, 5)]);
        assert_eq!(t.nic.mem().read_u64(t.buf + 16).unwrap(), 8);
        assert_eq!(t.nic.stats().atomics_executed, 1);
        assert_eq!(t.nic.stats().dup_atomics_replayed, 1);
        // Compare-and-swap: swaps when equal, returns the original either way.
        atomic(&mut t, opcode::RC_COMPARE_SWAP, 101, 16, 99, 8);
        atomic(&mut t, opcode::RC_COMPARE_SWAP, 102, 16, 7, 8);
        assert_eq!(drain(&mut t), vec![atomic_ack(101, 2, 8), atomic_ack(102, 3, 99)]);
        assert_eq!(t.nic.mem().read_u64(t.buf + 16).unwrap(), 99);
    }

    #[test]
    fn misaligned_atomic_is_an_invalid_request() {
        let mut t = all();
        atomic(&mut t, opcode::RC_FETCH_ADD, 100, 4, 1, 0);
        assert_eq!(drain(&mut t), vec![nak(100, 0, Syndrome::Nak(NakCode::InvalidRequest))]);
        assert_eq!(mem(&t, 0, 16), vec![0; 16]);
        assert_eq!(state(&t), QpState::Err);
    }

    fn atomic_write_req(t: &mut T, psn: u32, off: u64, rkey: u32, dma_len: u32, data: [u8; 8]) {
        let mut r = req_bth(t, opcode::RC_ATOMIC_WRITE, psn, true);
        r.reth = Some(RethRepr { va: t.buf + off, rkey, dma_len });
        deliver(t, &r, &data);
    }

    fn flush_req(t: &mut T, psn: u32, va: u64, len: u32, placement: u8, selectivity: u8) {
        let mut r = req_bth(t, opcode::RC_FLUSH, psn, true);
        r.feth = Some(snic_wire::roce::ext::FethRepr {
            placement_type: placement,
            selectivity_level: selectivity,
        });
        r.reth = Some(RethRepr { va, rkey: t.mr.rkey, dma_len: len });
        deliver(t, &r, &[]);
    }

    /// The answer to a FLUSH / ATOMIC WRITE: READ RESPONSE ONLY, no payload, AETH ACK.
    fn empty_read_resp(psn: u32, msn: u32) -> Resp {
        read_resp(opcode::RC_RDMA_READ_RESPONSE_ONLY, psn, msn, &[])
    }

    #[test]
    fn atomic_write_lands_once_and_duplicates_are_replayed() {
        let mut t = all();
        let rkey = t.mr.rkey;
        let v = 0x1122_3344_5566_7788u64.to_le_bytes();
        atomic_write_req(&mut t, 100, 16, rkey, 8, v);
        assert_eq!(drain(&mut t), vec![empty_read_resp(100, 1)]);
        assert_eq!(t.nic.mem().read_u64(t.buf + 16).unwrap(), 0x1122_3344_5566_7788);
        // A later WRITE changes the word; the retransmitted ATOMIC WRITE must not undo it.
        write(&mut t, opcode::RC_RDMA_WRITE_ONLY, 101, true, Some((16, 8)), &[9; 8]);
        assert_eq!(drain(&mut t), vec![ack(101, 2)]);
        atomic_write_req(&mut t, 100, 16, rkey, 8, v);
        assert_eq!(drain(&mut t), vec![empty_read_resp(100, 2)]);
        assert_eq!(mem(&t, 16, 8), vec![9; 8]);
        let s = t.nic.stats();
        assert_eq!((s.atomic_writes_executed, s.dup_atomic_writes_replayed), (1, 1));
        assert!(cqes(&mut t).is_empty(), "no receive completion");
    }

    #[test]
    fn atomic_write_errors() {
        let inv = Syndrome::Nak(NakCode::InvalidRequest);
        let acc = Syndrome::Nak(NakCode::RemoteAccessError);
        let cases: [(Access, Access, u64, u32, Syndrome); 5] = [
            // Misaligned address.
            (Access::ALL, Access::ALL, 12, 8, inv),
            // A RETH length other than 8.
            (Access::ALL, Access::ALL, 16, 4, inv),
            // The QP does not allow remote writes.
            (Access::REMOTE_READ, Access::ALL, 16, 8, inv),
            // The MR does not allow remote writes.
            (Access::ALL, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC, 16, 8, acc),
            // Beyond the MR.
            (Access::ALL, Access::ALL, MR_LEN, 8, acc),
        ];
        for (qp_acc, mr_acc, off, len, syn) in cases {
            let mut t = setup(qp_acc, mr_acc);
            let rkey = t.mr.rkey;
            atomic_write_req(&mut t, 100, off, rkey, len, [7; 8]);
            assert_eq!(drain(&mut t), vec![nak(100, 0, syn)], "off {off} len {len}");
            assert_eq!(mem(&t, 0, BUF_LEN as usize), vec![0; BUF_LEN as usize]);
            assert_eq!(state(&t), QpState::Err);
            assert_eq!(t.nic.stats().atomic_writes_executed, 0);
        }
        // A wrong rkey.
        let mut t = all();
        let rkey = t.mr.rkey ^ 0x100;
        atomic_write_req(&mut t, 100, 16, rkey, 8, [7; 8]);
        assert_eq!(drain(&mut t), vec![nak(100, 0, acc)]);
    }

    #[test]
    fn flush_checks_placement_rights_and_range() {
        let (g, p) = (FLUSH_GLOBAL, FLUSH_PERSISTENT);
        let inv = Syndrome::Nak(NakCode::InvalidRequest);
        let acc = Syndrome::Nak(NakCode::RemoteAccessError);
        let mr_g = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::FLUSH_GLOBAL;
        let qp_g = Access::REMOTE_WRITE | Access::FLUSH_GLOBAL;
        // (QP access, MR access, offset, length, placement, selectivity, answer)
        let ok = None;
        type Case = (Access, Access, u64, u32, u8, u8, Option<Syndrome>);
        let cases: [Case; 9] = [
            (Access::ALL, Access::ALL, 0, 64, g | p, 0, ok),
            (qp_g, mr_g, 64, 128, g, 0, ok),
            // Whole region: the RETH's address and length do not matter.
            (qp_g, mr_g, 1 << 40, u32::MAX, g, 1, ok),
            // The MR lacks FLUSH_PERSISTENT.
            (Access::ALL, mr_g, 0, 64, p, 0, Some(acc)),
            // The QP lacks FLUSH_PERSISTENT.
            (qp_g, Access::ALL, 0, 64, p, 0, Some(inv)),
            // The range leaves the MR.
            (Access::ALL, Access::ALL, MR_LEN - 8, 64, g, 0, Some(acc)),
            // Reserved placement types and selectivity levels.
            (Access::ALL, Access::ALL, 0, 64, 0, 0, Some(inv)),
            (Access::ALL, Access::ALL, 0, 64, 4 | g, 0, Some(inv)),
            (Access::ALL, Access::ALL, 0, 64, g, 2, Some(inv)),
        ];
        for (i, (qa, ma, off, len, plt, sel, want)) in cases.into_iter().enumerate() {
            let mut t = setup(qa, ma);
            // An earlier WRITE: already placed when the FLUSH executes (snic places in order).
            write(&mut t, opcode::RC_RDMA_WRITE_ONLY, 100, false, Some((0, 4)), b"data");
            let va = if sel == 1 { off } else { t.buf + off };
            flush_req(&mut t, 101, va, len, plt, sel);
            let got = drain(&mut t);
            match want {
                None => {
                    assert_eq!(got, vec![empty_read_resp(101, 2)], "case {i}");
                    assert_eq!(t.nic.stats().flushes_executed, 1);
                    assert_eq!(mem(&t, 0, 4), b"data");
                }
                Some(syn) => {
                    assert_eq!(got, vec![nak(101, 1, syn)], "case {i}");
                    assert_eq!(t.nic.stats().flushes_executed, 0);
                    assert_eq!(state(&t), QpState::Err);
                }
            }
        }
        // A duplicate FLUSH is answered again, not run again.
        let mut t = all();
        let va = t.buf;
        flush_req(&mut t, 100, va, 8, g, 0);
        flush_req(&mut t, 100, va, 8, g, 0);
        assert_eq!(drain(&mut t), vec![empty_read_resp(100, 1)]);
        let s = t.nic.stats();
        assert_eq!((s.flushes_executed, s.dup_flushes_replayed), (1, 1));
    }

    fn read_req(t: &mut T, psn: u32, off: u64, len: u32) {
        let mut r = req_bth(t, opcode::RC_RDMA_READ_REQUEST, psn, true);
        r.reth = reth(t, off, len);
        deliver(t, &r, &[]);
    }

    fn read_resp(op: u8, psn: u32, msn: u32, data: &[u8]) -> Resp {
        let aeth = (op != opcode::RC_RDMA_READ_RESPONSE_MIDDLE)
            .then_some(AethRepr { syndrome: Syndrome::Ack { credits: 31 }, msn });
        Resp { op, psn, dest_qp: PEER_QPN, aeth, orig: None, payload: data.to_vec() }
    }

    #[test]
    fn read_is_segmented_and_replayed() {
        use opcode::{
            RC_RDMA_READ_RESPONSE_FIRST as F, RC_RDMA_READ_RESPONSE_LAST as L,
            RC_RDMA_READ_RESPONSE_MIDDLE as M, RC_RDMA_READ_RESPONSE_ONLY as O,
        };
        let mut t = all();
        let data = pattern(600, 11);
        t.nic.mem_mut().write(t.buf + 100, &data).unwrap();
        read_req(&mut t, 100, 100, 600);
        // The next request's PSN is 103 (the READ took three).
        write(&mut t, opcode::RC_RDMA_WRITE_ONLY, 103, true, Some((2000, 1)), b"w");
        // The READ's responses carry the MSN of its acceptance (1), then the WRITE's ACK 2;
        // MIDDLE has no AETH (read_resp leaves it out).
        let want = vec![
            read_resp(F, 100, 1, &data[..256]),
            read_resp(M, 101, 1, &data[256..512]),
            read_resp(L, 102, 1, &data[512..]),
            ack(103, 2),
        ];
        assert_eq!(drain(&mut t), want);
        assert_eq!(t.nic.stats().read_resp_sent, 3);
        // The requester lost the last two: it asks again from PSN 101, va and length advanced.
        read_req(&mut t, 101, 356, 344);
        let got = drain(&mut t);
        assert_eq!(
            got,
            vec![read_resp(M, 101, 2, &data[256..512]), read_resp(L, 102, 2, &data[512..])]
        );
        assert_eq!(t.nic.stats().dup_reads_replayed, 1);
        // A zero-length READ: one READ_RESPONSE_ONLY without payload.
        read_req(&mut t, 104, 0, 0);
        assert_eq!(drain(&mut t), vec![read_resp(O, 104, 3, &[])]);
    }

    #[test]
    fn replay_is_not_overtaken_by_later_responses() {
        use opcode::{RC_RDMA_READ_RESPONSE_LAST as L, RC_RDMA_READ_RESPONSE_MIDDLE as M};
        let mut t = all();
        let data = pattern(1200, 5);
        t.nic.mem_mut().write(t.buf, &data).unwrap();
        read_req(&mut t, 100, 0, 600); // PSNs 100..=102
        read_req(&mut t, 103, 600, 600); // PSNs 103..=105
        let mut b = vec![0u8; pkt::MAX_PACKET_LEN];
        assert!(t.nic.poll_transmit(t.now, &mut b).is_some()); // 100 leaves, then is lost
        // The requester goes back to 101: the replay comes first, the later READ's
        // responses wait for its own retransmitted request.
        read_req(&mut t, 101, 256, 344);
        let got = drain(&mut t);
        assert_eq!(
            got,
            vec![read_resp(M, 101, 2, &data[256..512]), read_resp(L, 102, 2, &data[512..600])]
        );
        read_req(&mut t, 103, 600, 600);
        let got: Vec<u32> = drain(&mut t).iter().map(|r| r.psn).collect();
        assert_eq!(got, vec![103, 104, 105]);
    }

    /// Sends one WRITE_ONLY of 4 bytes at `off` with `rkey` and returns the responses.
    fn try_write(t: &mut T, rkey: u32, off: u64) -> Vec<Resp> {
        let r = Some(RethRepr { va: t.buf + off, rkey, dma_len: 4 });
        write_raw(t, opcode::RC_RDMA_WRITE_ONLY, 100, true, r, b"evil");
        drain(t)
    }

    #[test]
    fn protection_errors_nak_and_write_nothing() {
        let acc = Syndrome::Nak(NakCode::RemoteAccessError);
        // Wrong rkey.
        let mut t = all();
        let rkey = t.mr.rkey ^ 0x100;
        assert_eq!(try_write(&mut t, rkey, 0), vec![nak(100, 0, acc)]);
        assert_eq!(mem(&t, 0, BUF_LEN as usize), vec![0; BUF_LEN as usize]);
        assert_eq!(state(&t), QpState::Err);
        // Out of the MR's bounds (memory there is mapped, the MR ends at 4096).
        let mut t = all();
        let rkey = t.mr.rkey;
        assert_eq!(try_write(&mut t, rkey, MR_LEN - 2), vec![nak(100, 0, acc)]);
        assert_eq!(mem(&t, 0, BUF_LEN as usize), vec![0; BUF_LEN as usize]);
        // The MR lacks REMOTE_WRITE.
        let mut t = setup(Access::ALL, Access::LOCAL_WRITE | Access::REMOTE_READ);
        let rkey = t.mr.rkey;
        assert_eq!(try_write(&mut t, rkey, 0), vec![nak(100, 0, acc)]);
        assert_eq!(mem(&t, 0, 8), vec![0; 8]);
        // An MR of another PD.
        let mut t = all();
        let pd2 = t.nic.alloc_pd();
        let mr2 = t.nic.reg_mr(pd2, t.buf + 4096, 4096, Access::ALL).unwrap();
        assert_eq!(try_write(&mut t, mr2.rkey, 4096), vec![nak(100, 0, acc)]);
        assert_eq!(mem(&t, 4096, 8), vec![0; 8]);
        assert_eq!(t.nic.stats().rem_access_naks_sent, 1);
        // The QP lacks REMOTE_WRITE: invalid request.
        let mut t = setup(Access::REMOTE_READ, Access::ALL);
        let rkey = t.mr.rkey;
        let inv = Syndrome::Nak(NakCode::InvalidRequest);
        assert_eq!(try_write(&mut t, rkey, 0), vec![nak(100, 0, inv)]);
        assert_eq!(mem(&t, 0, 8), vec![0; 8]);
        // A READ beyond the MR: remote access NAK, no data.
        let mut t = all();
        read_req(&mut t, 100, MR_LEN - 100, 200);
        assert_eq!(drain(&mut t), vec![nak(100, 0, acc)]);
    }

    #[test]
    fn multi_packet_write_beyond_mr_writes_nothing() {
        let mut t = all();
        let data = pattern(512, 1);
        // Announces 600 bytes from 3584: the message would leave the MR at 4096.
        write(&mut t, opcode::RC_RDMA_WRITE_FIRST, 100, false, Some((3584, 600)), &data[..256]);
        write(&mut t, opcode::RC_RDMA_WRITE_MIDDLE, 101, false, None, &data[256..]);
        let got = drain(&mut t);
        assert_eq!(got, vec![nak(100, 0, Syndrome::Nak(NakCode::RemoteAccessError))]);
        assert_eq!(mem(&t, 0, BUF_LEN as usize), vec![0; BUF_LEN as usize]);
    }

    #[test]
    fn bad_opcode_sequence_and_lengths_are_invalid_requests() {
        let inv = Syndrome::Nak(NakCode::InvalidRequest);
        // MIDDLE with no FIRST.
        let mut t = all();
        write(&mut t, opcode::RC_RDMA_WRITE_MIDDLE, 100, true, None, &[0; 256]);
        assert_eq!(drain(&mut t), vec![nak(100, 0, inv)]);
        // A SEND_FIRST followed by a WRITE_ONLY: the RECV completes in error.
        let mut t = all();
        post_recv(&mut t, 3, 0, 1024);
        let r = req_bth(&t, opcode::RC_SEND_FIRST, 100, false);
        deliver(&mut t, &r, &[1; 256]);
        write(&mut t, opcode::RC_RDMA_WRITE_ONLY, 101, true, Some((2000, 1)), b"q");
        assert_eq!(drain(&mut t), vec![nak(101, 0, inv)]);
        let c = cqes(&mut t);
        assert_eq!((c[0].wr_id, c[0].status), (3, WcStatus::RemInvReqErr));
        assert_eq!(mem(&t, 2000, 1), vec![0]);
        // A FIRST shorter than the MTU.
        let mut t = all();
        write(&mut t, opcode::RC_RDMA_WRITE_FIRST, 100, true, Some((0, 300)), &[1; 200]);
        assert_eq!(drain(&mut t), vec![nak(100, 0, inv)]);
        // A WRITE_ONLY whose payload is not the RETH length.
        let mut t = all();
        write(&mut t, opcode::RC_RDMA_WRITE_ONLY, 100, true, Some((0, 8)), &[1; 4]);
        assert_eq!(drain(&mut t), vec![nak(100, 0, inv)]);
        assert_eq!(mem(&t, 0, 8), vec![0; 8]);
    }

    #[test]
    fn send_longer_than_recv_is_a_length_error() {
        let mut t = all();
        post_recv(&mut t, 4, 0, 100);
        post_recv(&mut t, 5, 200, 100);
        let r = req_bth(&t, opcode::RC_SEND_ONLY, 100, true);
        deliver(&mut t, &r, &[9; 150]);
        assert_eq!(drain(&mut t), vec![nak(100, 0, Syndrome::Nak(NakCode::InvalidRequest))]);
        let c = cqes(&mut t);
        assert_eq!((c[0].wr_id, c[0].status), (4, WcStatus::LocLenErr));
        // The QP is in ERR: the other RECV was flushed.
        assert_eq!((c[1].wr_id, c[1].status), (5, WcStatus::WrFlushErr));
        assert_eq!(state(&t), QpState::Err);
        assert_eq!(mem(&t, 0, 100), vec![0; 100]);
    }

    #[test]
    fn flush_completes_posted_recvs() {
        let mut t = all();
        post_recv(&mut t, 10, 0, 8);
        post_recv(&mut t, 11, 8, 8);
        let err = QpAttr { state: QpState::Err, ..QpAttr::default() };
        t.nic.modify_qp(t.qpn, &err, AttrMask::STATE, t.now).unwrap();
        let c = cqes(&mut t);
        assert_eq!(
            c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
            vec![(10, WcStatus::WrFlushErr), (11, WcStatus::WrFlushErr)]
        );
        // A RECV posted in ERR is flushed at once.
        post_recv(&mut t, 12, 0, 8);
        assert_eq!(cqes(&mut t)[0].wr_id, 12);
        assert!(drain(&mut t).is_empty());
    }

    #[test]
    fn ce_marks_get_rate_limited_cnps() {
        let mut t = all();
        t.peer.ecn = ECN_CE;
        let gap = t.nic.config().cc.cnp_interval;
        let mut cnps = 0;
        for (i, at) in [0, 1, 2, 5, 10, 11].into_iter().enumerate() {
            // Steps of a fifth of the CNP interval.
            t.now = Instant::ZERO + gap * at / 5;
            let p = 100 + i as u32;
            write(&mut t, opcode::RC_RDMA_WRITE_ONLY, p, true, Some((0, 1)), b"c");
            let got = drain(&mut t);
            assert_eq!(got[0], ack(p, i as u32 + 1));
            let c: Vec<_> = got.iter().filter(|r| r.op == opcode::CNP).collect();
            let want = usize::from(matches!(at, 0 | 5 | 10));
            assert_eq!(c.len(), want, "at step {at}");
            for r in c {
                assert_eq!(r.dest_qp, PEER_QPN);
                cnps += 1;
            }
        }
        assert_eq!(cnps, 3);
        assert_eq!(t.nic.stats().cnps_sent, 3);
    }

    /// A second QP of `t.nic` in `t.pd`, fed by `srq`, in RTR towards `PEER_QPN + 1`
    /// expecting PSN 7.
    fn srq_qp(t: &mut T, srq: SrqId) -> u32 {
        let qpn = t
            .nic
            .create_qp(QpInit {
                pd: t.pd,
                send_cq: t.cq,
                recv_cq: t.cq,
                srq: Some(srq),
                max_send_wr: 4,
                max_recv_wr: 4,
                placement: MemKind::Host,
                sq_sig_all: false,
            })
            .unwrap();
        let init = QpAttr { state: QpState::Init, access: Access::ALL, ..QpAttr::default() };
        t.nic.modify_qp(qpn, &init, AttrMask::STATE | AttrMask::ACCESS, t.now).unwrap();
        let rtr = QpAttr {
            state: QpState::Rtr,
            remote: Some(t.peer.src),
            dest_qpn: PEER_QPN + 1,
            rq_psn: 7,
            ..init
        };
        let mask = AttrMask::STATE
            | AttrMask::AV
            | AttrMask::PATH_MTU
            | AttrMask::DEST_QPN
            | AttrMask::RQ_PSN
            | AttrMask::MAX_DEST_RD_ATOMIC
            | AttrMask::MIN_RNR_TIMER;
        t.nic.modify_qp(qpn, &rtr, mask, t.now).unwrap();
        qpn
    }

    /// Post one RECV of 16 bytes at `off` through `lkey` to `srq`, deliver a SEND_ONLY "srq!"
    /// to `qpn` and return the responses.
    fn send_via_srq(t: &mut T, srq: SrqId, qpn: u32, lkey: u32, off: u64) -> Vec<Resp> {
        let sge = Sge { addr: t.buf + off, len: 16, lkey };
        t.nic.post_srq_recv(srq, &[RecvWr { wr_id: 55, sgl: SgList::one(sge) }]).unwrap();
        let mut r = req_bth(t, opcode::RC_SEND_ONLY, 7, true);
        r.bth.dest_qp = qpn;
        deliver(t, &r, b"srq!");
        drain(t)
    }

    #[test]
    fn srq_feeds_sends() {
        let mut t = all();
        let srq = t.nic.create_srq(t.pd, 4, MemKind::Host).unwrap();
        let qpn = srq_qp(&mut t, srq);
        let lkey = t.mr.lkey;
        let got = send_via_srq(&mut t, srq, qpn, lkey, 300);
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].op, got[0].psn, got[0].dest_qp),
            (opcode::RC_ACKNOWLEDGE, 7, PEER_QPN + 1)
        );
        assert_eq!(mem(&t, 300, 4), b"srq!");
        assert_eq!(cqes(&mut t)[0].wr_id, 55);
    }

    #[test]
    fn srq_buffers_are_checked_against_the_srqs_pd() {
        // The SRQ is in PD B, its QP in PD A. A RECV whose buffer is in an MR of PD A (the
        // QP's, not the SRQ's) fails: local protection error, remote operational NAK, nothing
        // written.
        let mut t = all();
        let pd_b = t.nic.alloc_pd();
        let srq = t.nic.create_srq(pd_b, 4, MemKind::Host).unwrap();
        let qpn = srq_qp(&mut t, srq);
        let lkey_a = t.mr.lkey;
        let got = send_via_srq(&mut t, srq, qpn, lkey_a, 300);
        let want = Resp {
            dest_qp: PEER_QPN + 1,
            ..nak(7, 0, Syndrome::Nak(NakCode::RemoteOperationalError))
        };
        assert_eq!(got, vec![want]);
        let c = cqes(&mut t);
        assert_eq!((c[0].wr_id, c[0].status, c[0].qpn), (55, WcStatus::LocProtErr, qpn));
        assert_eq!(mem(&t, 300, 4), vec![0; 4]);
        assert_eq!(t.nic.query_qp(qpn).unwrap().state, QpState::Err);

        // Same PDs, but the MR is in the SRQ's PD B: the SEND lands.
        let mut t = all();
        let pd_b = t.nic.alloc_pd();
        let srq = t.nic.create_srq(pd_b, 4, MemKind::Host).unwrap();
        let qpn = srq_qp(&mut t, srq);
        let mr_b = t.nic.reg_mr(pd_b, t.buf + 4096, 4096, Access::LOCAL_WRITE).unwrap();
        let got = send_via_srq(&mut t, srq, qpn, mr_b.lkey, 4096 + 32);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].op, got[0].psn), (opcode::RC_ACKNOWLEDGE, 7));
        assert_eq!(mem(&t, 4096 + 32, 4), b"srq!");
        let c = cqes(&mut t);
        assert_eq!((c[0].wr_id, c[0].status, c[0].byte_len), (55, WcStatus::Success, 4));
    }

    #[test]
    fn resources_are_bounded_oldest_evicted() {
        let mut t = all();
        t.nic.mem_mut().write(t.buf, &[1, 2, 3, 4]).unwrap();
        // max_dest_rd_atomic is 4: the fifth READ evicts the first one's resource.
        for i in 0..5 {
            read_req(&mut t, 100 + i, 0, 4);
        }
        assert_eq!(drain(&mut t).len(), 5);
        read_req(&mut t, 100, 0, 4);
        assert!(drain(&mut t).is_empty());
        read_req(&mut t, 101, 0, 4);
        assert_eq!(drain(&mut t).len(), 1);
        assert_eq!(t.nic.stats().dup_reads_replayed, 1);
    }

    #[test]
    fn two_nics_write_read_send_atomic_end_to_end() {
        let o = EndOpts { buf_len: 64 << 10, sq_sig_all: true, ..EndOpts::default() };
        let (a, mut b) = (End::new(1, &o), End::new(2, &o));
        // A second QP at B, connected instead of the first, so the two ends' QPNs differ.
        b.qpn = b.nic.create_qp(b.init).unwrap();
        assert_ne!(a.qpn, b.qpn);
        let attr = QpAttr { access: Access::ALL, path_mtu: Mtu::M1024, ..QpAttr::default() };
        let mut p = Pair::connect(a, b, attr, [0x00ff_fff0; 2]);
        let (qa, qb) = (p.a.qpn, p.b.qpn);
        p.now = Instant::from_micros(1);
        let now = p.now;
        let (a, b) = (&mut p.a, &mut p.b);
        let data = pattern(5000, 42);
        a.nic.mem_mut().write(a.mr.addr, &data).unwrap();
        b.nic.mem_mut().write(b.mr.addr + 0x8000, &pattern(3000, 9)).unwrap();
        b.nic.mem_mut().write_u64(b.mr.addr + 0x2000, 40).unwrap();
        b.nic.post_recv(qb, &RecvWr { wr_id: 900, sgl: b.sge(0xC000, 2048) }, now).unwrap();
        let wrs = [
            SendWr::new(1, WrOp::Write { remote: b.remote(0) }, a.sge(0, 5000)),
            SendWr::new(2, WrOp::Read { remote: b.remote(0x8000) }, a.sge(0x4000, 3000)),
            SendWr::new(3, WrOp::FetchAdd { remote: b.remote(0x2000), add: 2 }, a.sge(0x3000, 8)),
            SendWr::new(4, WrOp::SendImm { imm: 7 }, a.sge(0, 1500)),
        ];
        a.nic.post_send_batch(qa, &wrs, now).unwrap();
        p.drive_bounded(100_000);
        let (a, b) = (&mut p.a, &mut p.b);
        // Compared without printing 5000 bytes on failure.
        assert!(b.nic.mem().slice(b.mr.addr, 5000).unwrap() == &data[..], "WRITE data differs");
        let read_back = a.nic.mem().slice(a.mr.addr + 0x4000, 3000).unwrap();
        assert!(read_back == &pattern(3000, 9)[..], "READ data differs");
        assert_eq!(a.nic.mem().read_u64(a.mr.addr + 0x3000).unwrap(), 40);
        assert_eq!(b.nic.mem().read_u64(b.mr.addr + 0x2000).unwrap(), 42);
        let sent = b.nic.mem().slice(b.mr.addr + 0xC000, 1500).unwrap();
        assert!(sent == &data[..1500], "SEND data differs");
        let got: Vec<_> = a.poll_all().iter().map(|c| (c.wr_id, c.status)).collect();
        let ok = WcStatus::Success;
        assert_eq!(got, vec![(1, ok), (2, ok), (3, ok), (4, ok)]);
        let cb = b.poll_all();
        assert_eq!(cb.len(), 1);
        assert_eq!((cb[0].wr_id, cb[0].byte_len, cb[0].imm), (900, 1500, Some(7)));
        assert_eq!(cb[0].src_qp, qa);
        assert_eq!(b.nic.stats().atomics_executed, 1);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Arbitrary request opcodes, PSNs near the ePSN, RETH / AtomicETH values and payloads:
        /// never a panic, and never a byte written outside the MR.
        #[test]
        fn arbitrary_requests_stay_inside_the_mr(
            reqs in proptest::collection::vec(
                (0usize..64, 0u32..8, proptest::prelude::any::<u64>(), 0u32..5000,
                 proptest::prelude::any::<bool>(), 0usize..300, proptest::prelude::any::<u64>()),
                1..40)
        ) {
            let mut t = all();
            for (op_i, dpsn, va_bits, len, good_key, plen, operand) in reqs {
                let infos: Vec<_> = opcode::ALL
                    .iter()
                    .filter(|i| i.is_request() && i.transport() == 0)
                    .collect();
                let info = infos[op_i % infos.len()];
                let mut r = req_bth(&t, info.code, psn::add(100, dpsn), true);
                let va = if va_bits & 1 == 0 { t.buf + (va_bits >> 1) % (MR_LEN + 64) } else { va_bits };
                let rkey = if good_key { t.mr.rkey } else { operand as u32 };
                for e in info.ext {
                    match e {
                        opcode::ExtHeader::Reth => r.reth = Some(RethRepr { va, rkey, dma_len: len }),
                        opcode::ExtHeader::ImmDt => r.imm_dt = Some(ImmDtRepr { imm: 1 }),
                        opcode::ExtHeader::Ieth => r.ieth = Some(IethRepr { rkey }),
                        opcode::ExtHeader::AtomicEth => {
                            r.atomic_eth = Some(AtomicEthRepr { va, rkey, swap_add: operand, compare: 0 })
                        }
                        opcode::ExtHeader::Feth => r.feth = Some(snic_wire::roce::ext::FethRepr { placement_type: (operand & 0xf) as u8, selectivity_level: ((operand >> 4) & 3) as u8 }),
                        _ => {}
                    }
                }
                let plen = info.fixed_payload_len().unwrap_or(plen);
                if va_bits & 2 == 0 {
                    let sge = Sge { addr: t.buf, len: 128, lkey: t.mr.lkey };
                    // May be refused (ring full): that is fine here.
                    let _ = t.nic.post_recv(t.qpn, &RecvWr { wr_id: 1, sgl: SgList::one(sge) }, t.now);
                }
                deliver(&mut t, &r, &vec![0xAB; plen]);
                drain(&mut t);
                let _ = cqes(&mut t);
            }
            proptest::prop_assert_eq!(mem(&t, MR_LEN, (BUF_LEN - MR_LEN) as usize), vec![0; (BUF_LEN - MR_LEN) as usize]);
        }
    }
}
