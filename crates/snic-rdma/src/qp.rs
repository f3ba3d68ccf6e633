//! The RC queue pair: its rings in memory, its state machine, and moves into the error state.

use snic_time::Instant;

use crate::nic_core::Core;
use crate::pkt::Path;
use crate::req_state::ReqState;
use crate::resp_state::RespState;
use crate::ring::Ring;
use crate::verbs::{
    AttrMask, Cqe, QpAttr, QpInit, QpState, RecvWr, SendWr, SgList, VerbsError, WcOpcode, WcStatus,
    WrOp,
};
use crate::wqe::{self, WqeError};

/// One RC QP.
#[derive(Debug)]
pub struct Qp {
    /// QP number.
    pub qpn: u32,
    /// Creation parameters (PD, CQs, SRQ, placement).
    pub init: QpInit,
    /// Current attributes; `attr.state` is the current state.
    pub attr: QpAttr,
    /// Send queue ring.
    pub sq: Ring,
    /// Receive queue ring (`None` with an SRQ).
    pub rq: Option<Ring>,
    /// Addresses of this QP's packets (valid from RTR on).
    pub path: Option<Path>,
    /// Requester and completer state.
    pub req: ReqState,
    /// Responder state.
    pub resp: RespState,
}

impl Qp {
    /// The current state.
    pub fn state(&self) -> QpState {
        self.attr.state
    }
}

fn allowed(from: QpState, to: QpState) -> bool {
    use QpState::*;
    matches!(
        (from, to),
        (_, Reset)
            | (_, Err)
            | (Reset, Init)
            | (Init, Init)
            | (Init, Rtr)
            | (Rtr, Rts)
            | (Rts, Rts)
            | (Rts, Sqd)
            | (Sqd, Sqd)
            | (Sqd, Rts)
            | (Sqe, Rts)
    )
}

/// Attributes a transition requires (IBTA 11.2.4.2 / `ibv_modify_qp` for RC).
pub(crate) fn required(from: QpState, to: QpState) -> AttrMask {
    use QpState::*;
    match (from, to) {
        (Init, Rtr) => {
            AttrMask::AV
                | AttrMask::PATH_MTU
                | AttrMask::DEST_QPN
                | AttrMask::RQ_PSN
                | AttrMask::MAX_DEST_RD_ATOMIC
                | AttrMask::MIN_RNR_TIMER
        }
        (Rtr, Rts) => {
            AttrMask::SQ_PSN
                | AttrMask::TIMEOUT
                | AttrMask::RETRY_CNT
                | AttrMask::RNR_RETRY
                | AttrMask::MAX_RD_ATOMIC
        }
        _ => AttrMask(0),
    }
}

/// Validate and apply a `modify_qp`. State side effects: RTR resets the responder at `rq_psn`,
/// RTS (from RTR) resets the requester at `sq_psn`, ERR flushes both queues, RESET empties them.
pub(crate) fn modify(
    core: &mut Core,
    qp: &mut Qp,
    attr: &QpAttr,
    mask: AttrMask,
    now: Instant,
) -> Result<(), VerbsError> {
    let from = qp.attr.state;
    let to = if mask.contains(AttrMask::STATE) { attr.state } else { from };
    if !allowed(from, to) {
        return Err(VerbsError::InvalidTransition { from, to });
    }
    let need = required(from, to);
    if !mask.contains(need) {
        return Err(VerbsError::InvalidAttr(missing_name(AttrMask(need.0 & !mask.0))));
    }
    let extra = AttrMask(mask.0 & !(need.0 | optional(from, to).0 | AttrMask::STATE.0));
    if extra.0 != 0 {
        return Err(VerbsError::InvalidAttr(not_allowed_name(extra)));
    }
    // Range checks on what is given.
    if mask.contains(AttrMask::RETRY_CNT) && attr.retry_cnt > 7 {
        return Err(VerbsError::InvalidAttr("retry_cnt"));
    }
    if mask.contains(AttrMask::RNR_RETRY) && attr.rnr_retry > 7 {
        return Err(VerbsError::InvalidAttr("rnr_retry"));
    }
    if mask.contains(AttrMask::MIN_RNR_TIMER) && attr.min_rnr_timer > 31 {
        return Err(VerbsError::InvalidAttr("min_rnr_timer"));
    }
    if mask.contains(AttrMask::TIMEOUT) && attr.timeout > 31 {
        return Err(VerbsError::InvalidAttr("timeout"));
    }
    if mask.contains(AttrMask::RQ_PSN) && attr.rq_psn > crate::psn::MASK {
        return Err(VerbsError::InvalidAttr("rq_psn"));
    }
    if mask.contains(AttrMask::SQ_PSN) && attr.sq_psn > crate::psn::MASK {
        return Err(VerbsError::InvalidAttr("sq_psn"));
    }
    if mask.contains(AttrMask::DEST_QPN) && attr.dest_qpn > crate::psn::MASK {
        return Err(VerbsError::InvalidAttr("dest_qpn"));
    }
    if mask.contains(AttrMask::MAX_RD_ATOMIC) && attr.max_rd_atomic == 0 {
        return Err(VerbsError::InvalidAttr("max_rd_atomic"));
    }
    if mask.contains(AttrMask::MAX_DEST_RD_ATOMIC) && attr.max_dest_rd_atomic == 0 {
        return Err(VerbsError::InvalidAttr("max_dest_rd_atomic"));
    }
    if mask.contains(AttrMask::AV) {
        match attr.remote {
            Some(r) if core.cfg.source_for(r).is_some() => {}
            Some(_) => {
                return Err(VerbsError::InvalidAttr(
                    "remote: IP family differs from every local GID",
                ));
            }
            None => return Err(VerbsError::InvalidAttr("remote")),
        }
    }
    let a = &mut qp.attr;
    macro_rules! set {
        ($m:ident, $f:ident) => {
            if mask.contains(AttrMask::$m) {
                a.$f = attr.$f;
            }
        };
    }
    set!(ACCESS, access);
    set!(PATH_MTU, path_mtu);
    set!(DEST_QPN, dest_qpn);
    set!(RQ_PSN, rq_psn);
    set!(SQ_PSN, sq_psn);
    set!(AV, remote);
    set!(TIMEOUT, timeout);
    set!(RETRY_CNT, retry_cnt);
    set!(RNR_RETRY, rnr_retry);
    set!(MIN_RNR_TIMER, min_rnr_timer);
    set!(MAX_RD_ATOMIC, max_rd_atomic);
    set!(MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
    qp.attr.state = to;
    match (from, to) {
        (_, QpState::Reset) => {
            qp.sq.cidx = qp.sq.pidx;
            if let Some(rq) = qp.rq.as_mut() {
                rq.cidx = rq.pidx;
            }
            qp.req = ReqState::default();
            qp.resp = RespState::default();
            qp.path = None;
        }
        (_, QpState::Err) if from != QpState::Err => enter_error(core, qp, now),
        (QpState::Init, QpState::Rtr) => {
            let remote = qp.attr.remote.ok_or(VerbsError::InvalidAttr("remote"))?;
            let src = core.cfg.source_for(remote).ok_or(VerbsError::InvalidAttr("remote"))?;
            qp.path = Some(Path {
                src,
                dst: remote,
                sport: crate::pkt::sport_for(qp.qpn, qp.attr.dest_qpn),
                dport: core.cfg.udp_port,
                dscp: core.cfg.dscp,
                ecn: if core.cfg.ecn { crate::pkt::ECN_ECT0 } else { 0 },
            });
            qp.resp.reset(qp.attr.rq_psn);
        }
        (QpState::Rtr, QpState::Rts) => qp.req.reset(qp.attr.sq_psn, now),
        _ => {}
    }
    Ok(())
}

/// Attributes a transition may also change (IBTA 11.2.4.2, `ibv_modify_qp`'s table for RC).
/// Path attributes (address, MTU, PSNs, remote QPN) are set once, on the way to RTR/RTS: the
/// requester's segmentation and the responder's ePSN depend on them mid-message.
fn optional(from: QpState, to: QpState) -> AttrMask {
    use QpState::*;
    match (from, to) {
        (Reset, Init) | (Init, Init) | (Init, Rtr) => AttrMask::ACCESS,
        (Rtr, Rts) | (Rts, Rts) | (Sqe, Rts) => AttrMask::ACCESS | AttrMask::MIN_RNR_TIMER,
        (Sqd, Sqd) | (Sqd, Rts) => {
            AttrMask::ACCESS
                | AttrMask::MIN_RNR_TIMER
                | AttrMask::TIMEOUT
                | AttrMask::RETRY_CNT
                | AttrMask::RNR_RETRY
                | AttrMask::MAX_RD_ATOMIC
                | AttrMask::MAX_DEST_RD_ATOMIC
        }
        _ => AttrMask(0),
    }
}

fn not_allowed_name(m: AttrMask) -> &'static str {
    let names = [
        (AttrMask::ACCESS, "access is not allowed in this transition"),
        (AttrMask::AV, "remote (address vector) is not allowed in this transition"),
        (AttrMask::PATH_MTU, "path_mtu is not allowed in this transition"),
        (AttrMask::DEST_QPN, "dest_qpn is not allowed in this transition"),
        (AttrMask::RQ_PSN, "rq_psn is not allowed in this transition"),
        (AttrMask::SQ_PSN, "sq_psn is not allowed in this transition"),
        (AttrMask::TIMEOUT, "timeout is not allowed in this transition"),
        (AttrMask::RETRY_CNT, "retry_cnt is not allowed in this transition"),
        (AttrMask::RNR_RETRY, "rnr_retry is not allowed in this transition"),
        (AttrMask::MIN_RNR_TIMER, "min_rnr_timer is not allowed in this transition"),
        (AttrMask::MAX_RD_ATOMIC, "max_rd_atomic is not allowed in this transition"),
        (AttrMask::MAX_DEST_RD_ATOMIC, "max_dest_rd_atomic is not allowed in this transition"),
    ];
    names.iter().find(|(b, _)| m.contains(*b)).map_or("attribute not allowed", |x| x.1)
}

fn missing_name(m: AttrMask) -> &'static str {
    let names = [
        (AttrMask::AV, "remote (address vector)"),
        (AttrMask::PATH_MTU, "path_mtu"),
        (AttrMask::DEST_QPN, "dest_qpn"),
        (AttrMask::RQ_PSN, "rq_psn"),
        (AttrMask::MAX_DEST_RD_ATOMIC, "max_dest_rd_atomic"),
        (AttrMask::MIN_RNR_TIMER, "min_rnr_timer"),
        (AttrMask::SQ_PSN, "sq_psn"),
        (AttrMask::TIMEOUT, "timeout"),
        (AttrMask::RETRY_CNT, "retry_cnt"),
        (AttrMask::RNR_RETRY, "rnr_retry"),
        (AttrMask::MAX_RD_ATOMIC, "max_rd_atomic"),
    ];
    names.iter().find(|(b, _)| m.contains(*b)).map_or("attribute", |x| x.1)
}

/// Move the QP into the error state: every outstanding send and receive WQE completes with
/// `WrFlushErr` ([`flush_send`], [`flush_recv`]).
pub(crate) fn enter_error(core: &mut Core, qp: &mut Qp, now: Instant) {
    if qp.attr.state != QpState::Err {
        core.stats.qp_errors += 1;
    }
    qp.attr.state = QpState::Err;
    flush_send(core, qp, now);
    flush_recv(core, qp, now);
}

/// Complete every outstanding send WQE with `WrFlushErr` (the QP is in ERR).
pub fn flush_send(core: &mut Core, qp: &mut Qp, _now: Instant) {
    let n = qp.sq.len();
    for k in 0..n {
        let idx = qp.sq.cidx.wrapping_add(k);
        let shadow = qp.req.wqes.get(k as usize).map(|w| w.wr);
        let wr = shadow.or_else(|| {
            let slot = core.mem.slice(qp.sq.slot_addr(idx), wqe::SQ_SLOT).ok()?;
            Some(wqe::decode_send(slot).unwrap_or_else(|_| {
                let wr_id = u64::from_le_bytes(slot[..8].try_into().unwrap_or([0; 8]));
                SendWr::new(wr_id, WrOp::Send, SgList::empty())
            }))
        });
        let wr = wr.unwrap_or(SendWr::new(0, WrOp::Send, SgList::empty()));
        let c = Cqe {
            wr_id: wr.wr_id,
            status: WcStatus::WrFlushErr,
            opcode: wr.op.wc_opcode(),
            byte_len: 0,
            qpn: qp.qpn,
            src_qp: qp.attr.dest_qpn,
            imm: None,
            invalidated_rkey: None,
        };
        // A full CQ loses flush completions; the QP is in error already.
        let _ = core.push_cqe(qp.init.send_cq, c);
    }
    qp.sq.cidx = qp.sq.pidx;
    let rs = &mut qp.req;
    rs.wqes.clear();
    rs.started = 0;
    rs.cur = 0;
    rs.cur_off = 0;
    rs.rto = None;
    rs.rnr_until = None;
    rs.paced_blocked = false;
    rs.una = rs.next_psn;
    rs.max_sent = rs.next_psn;
}

/// A receive completion of this QP.
pub(crate) fn recv_cqe(
    qp: &Qp,
    wqe: &RecvWr,
    status: WcStatus,
    opcode: WcOpcode,
    byte_len: u32,
) -> Cqe {
    Cqe {
        wr_id: wqe.wr_id,
        status,
        opcode,
        byte_len,
        qpn: qp.qpn,
        src_qp: qp.attr.dest_qpn,
        imm: None,
        invalidated_rkey: None,
    }
}

/// Complete every outstanding receive WQE of the QP's own RQ with `WrFlushErr`, the one in
/// progress first (an SRQ's WQEs stay for its other QPs).
pub fn flush_recv(core: &mut Core, qp: &mut Qp, _now: Instant) {
    if let Some((wqe, op)) = qp.resp.msg.take().and_then(|m| m.wqe()) {
        let cqe = recv_cqe(qp, &wqe, WcStatus::WrFlushErr, op, 0);
        core.push_cqe(qp.init.recv_cq, cqe);
    }
    let Some(mut rq) = qp.rq else { return };
    while !rq.is_empty() {
        let addr = rq.slot_addr(rq.cidx);
        rq.cidx = rq.cidx.wrapping_add(1);
        // A slot that no longer decodes still gets its CQE: its wr_id is its first 8 bytes.
        let wr_id = core.mem.read_u64(addr).unwrap_or(0);
        let wqe = RecvWr { wr_id, ..RecvWr::default() };
        let cqe = recv_cqe(qp, &wqe, WcStatus::WrFlushErr, WcOpcode::Recv, 0);
        core.push_cqe(qp.init.recv_cq, cqe);
    }
    qp.rq = Some(rq);
}

/// Take the next receive WQE of the QP (its RQ, or its SRQ). `None` when none is posted (the
/// responder answers with an RNR NAK); `Some(Err)` when the slot does not decode.
pub(crate) fn rq_pop(core: &mut Core, qp: &mut Qp) -> Option<Result<RecvWr, WqeError>> {
    let ring = match (qp.rq.as_mut(), qp.init.srq) {
        (Some(rq), _) => rq,
        (None, Some(srq)) => &mut core.srqs.get_mut(srq.0 as usize)?.as_mut()?.ring,
        (None, None) => return None,
    };
    if ring.is_empty() {
        return None;
    }
    let addr = ring.slot_addr(ring.cidx);
    ring.cidx = ring.cidx.wrapping_add(1);
    let r = match core.mem.slice(addr, wqe::RQ_SLOT) {
        Ok(b) => wqe::decode_recv(b),
        Err(_) => Err(WqeError::Short),
    };
    Some(r)
}

/// The PD the QP's receive WQEs are checked against: the SRQ's for a QP that takes its
/// receive WQEs from an SRQ (IBTA 10.2.9: an SRQ's WQEs belong to the SRQ's PD, which may
/// differ from its QPs'), the QP's own otherwise.
pub(crate) fn recv_pd(core: &Core, qp: &Qp) -> crate::verbs::Pd {
    match (qp.rq.as_ref(), qp.init.srq) {
        (None, Some(srq)) => {
            core.srqs.get(srq.0 as usize).and_then(|s| s.as_ref()).map_or(qp.init.pd, |s| s.pd)
        }
        _ => qp.init.pd,
    }
}

/// Whether a receive WQE is available to the QP (without taking it).
pub(crate) fn rq_ready(core: &Core, qp: &Qp) -> bool {
    match (qp.rq.as_ref(), qp.init.srq) {
        (Some(rq), _) => !rq.is_empty(),
        (None, Some(srq)) => core
            .srqs
            .get(srq.0 as usize)
            .and_then(|s| s.as_ref())
            .is_some_and(|s| !s.ring.is_empty()),
        (None, None) => false,
    }
}

/// The AETH credit count "invalid": the responder does not limit by credits (an SRQ's QPs,
/// IBTA 9.7.7.2.4).
pub const CREDITS_UNLIMITED: u8 = 0x1f;

/// Receive WQEs each AETH credit code stands for (IBTA Table 45, codes 0..=30: logarithmic).
const CREDIT_COUNTS: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

/// The credit code advertising `n` receive WQEs: the largest code whose count is at most `n`
/// (a responder never advertises more than it has).
pub fn encode_credits(n: u32) -> u8 {
    CREDIT_COUNTS.iter().rposition(|&c| c <= n).unwrap_or(0) as u8
}

/// The receive WQEs a credit code stands for; `None` for [`CREDITS_UNLIMITED`] (or anything
/// above it, which a 5-bit field cannot carry).
pub fn decode_credits(code: u8) -> Option<u32> {
    CREDIT_COUNTS.get(usize::from(code)).copied()
}

/// The credit code the QP's responder advertises in its ACKs (IBTA 9.7.7.2): the receive WQEs
/// posted to its own RQ and not yet taken (zero when the RQ is empty), or
/// [`CREDITS_UNLIMITED`] for a QP fed by an SRQ (shared WQEs are no credit of this QP's).
pub fn ack_credits(qp: &Qp) -> u8 {
    match &qp.rq {
        Some(rq) => encode_credits(rq.len()),
        None => CREDITS_UNLIMITED,
    }
}

#[cfg(test)]
mod credit_tests {
    use super::*;

    #[test]
    fn credit_codes_round_down_and_round_trip() {
        assert_eq!(encode_credits(0), 0);
        assert_eq!(encode_credits(4), 4);
        assert_eq!(encode_credits(5), 4, "5 WQEs advertise 4: never more than posted");
        assert_eq!(encode_credits(63), 11);
        assert_eq!(decode_credits(11), Some(48));
        assert_eq!(encode_credits(u32::MAX), 30);
        assert_eq!(decode_credits(30), Some(32768));
        assert_eq!(decode_credits(CREDITS_UNLIMITED), None);
        for code in 0..CREDITS_UNLIMITED {
            let n = decode_credits(code).unwrap();
            assert_eq!(encode_credits(n), code);
            // Between two codes, the lower one.
            if code < 30 {
                let next = decode_credits(code + 1).unwrap();
                assert_eq!(encode_credits(next - 1), code);
            }
        }
    }
}
