//! Requester and completer of an RC QP.
//!
//! STUB: being written; the functions below are the contract `rnic` and `qp` call.

use snic_time::Instant;

use crate::pkt::RxPkt;
use crate::qp::Qp;
use crate::rnic::Core;

/// Requester / completer state of one QP.
#[derive(Debug, Clone, Default)]
pub struct ReqState {
    _todo: (),
}

impl ReqState {
    /// Start (RTR -> RTS) with the first PSN to send.
    pub fn reset(&mut self, _sq_psn: u32, _now: Instant) {}
}

/// Build the next request packet of this QP into `buf` (new or retransmitted), if one may
/// leave now.
pub fn poll_transmit(
    _core: &mut Core,
    _qp: &mut Qp,
    _now: Instant,
    _buf: &mut [u8],
) -> Option<usize> {
    None
}

/// A response arrived for this QP: ACK, NAK, RNR NAK, READ response or atomic ACK.
pub fn on_response(_core: &mut Core, _qp: &mut Qp, _now: Instant, _pkt: &RxPkt<'_>) {}

/// A CNP arrived for this QP.
pub fn on_cnp(_core: &mut Core, _qp: &mut Qp, _now: Instant) {}

/// Earliest requester deadline (retransmission, RNR wait, pacing, CC timers).
pub fn poll_timeout(_qp: &Qp) -> Option<Instant> {
    None
}

/// Run requester timers due at `now`.
pub fn handle_timeout(_core: &mut Core, _qp: &mut Qp, _now: Instant) {}

/// Complete every outstanding send WQE with `WrFlushErr` (the QP is in ERR).
pub fn flush(_core: &mut Core, _qp: &mut Qp, _now: Instant) {}
