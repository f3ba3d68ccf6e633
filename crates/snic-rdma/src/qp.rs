//! The RC queue pair: its rings in memory, its state machine, and moves into the error state.

use snic_time::Instant;

use crate::nic_core::Core;
use crate::pkt::Path;
use crate::req_state::ReqState;
use crate::resp_state::RespState;
use crate::ring::Ring;
use crate::verbs::{AttrMask, QpAttr, QpInit, QpState, RecvWr, VerbsError};
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
            Some(r) if r.is_ipv4() == core.cfg.local_ip.is_ipv4() => {}
            Some(_) => {
                return Err(VerbsError::InvalidAttr(
                    "remote: IP family differs from the local GID",
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
            qp.path = Some(Path {
                src: core.cfg.local_ip,
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
/// `WrFlushErr` (requester and responder flush their own queues).
pub(crate) fn enter_error(core: &mut Core, qp: &mut Qp, now: Instant) {
    if qp.attr.state != QpState::Err {
        core.stats.qp_errors += 1;
    }
    qp.attr.state = QpState::Err;
    crate::req::flush(core, qp, now);
    crate::resp::flush(core, qp, now);
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
