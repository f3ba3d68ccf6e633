//! Responder of an RC QP.
//!
//! STUB: being written; the functions below are the contract `rnic` and `qp` call.

use snic_time::Instant;

use crate::pkt::RxPkt;
use crate::qp::Qp;
use crate::rnic::Core;

/// Responder state of one QP.
#[derive(Debug, Clone, Default)]
pub struct RespState {
    _todo: (),
}

impl RespState {
    /// Start (INIT -> RTR) expecting `rq_psn`.
    pub fn reset(&mut self, _rq_psn: u32) {}
}

/// A request packet arrived for this QP.
pub fn on_request(_core: &mut Core, _qp: &mut Qp, _now: Instant, _pkt: &RxPkt<'_>) {}

/// Build the next response packet (ACK, NAK, READ response, atomic ACK, CNP) into `buf`.
pub fn poll_transmit(
    _core: &mut Core,
    _qp: &mut Qp,
    _now: Instant,
    _buf: &mut [u8],
) -> Option<usize> {
    None
}

/// Earliest responder deadline.
pub fn poll_timeout(_qp: &Qp) -> Option<Instant> {
    None
}

/// Run responder timers due at `now`.
pub fn handle_timeout(_core: &mut Core, _qp: &mut Qp, _now: Instant) {}

/// Complete every outstanding receive WQE of the QP's own RQ with `WrFlushErr`.
pub fn flush(_core: &mut Core, _qp: &mut Qp, _now: Instant) {}
