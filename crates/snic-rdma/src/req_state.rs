//! What an RC QP keeps for its requester and completer ([`ReqState`]): the shadows of the
//! fetched send WQEs, the send cursor, PSNs, timers and retry counters. The logic that drives
//! it is in [`crate::req`].

use std::collections::VecDeque;

use snic_time::Instant;

use crate::cc::CcState;
use crate::psn;
use crate::verbs::{SendWr, WcStatus, WrOp};
use crate::window::PathEstimator;

/// The requester's shadow of one fetched send WQE.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Wqe {
    /// The decoded work request (a placeholder with the slot's wr_id when it did not decode).
    pub(crate) wr: SendWr,
    /// Message length in bytes.
    pub(crate) len: u32,
    /// PSNs the message consumes (packets of a SEND/WRITE, responses of a READ, 1 for atomics).
    pub(crate) npsn: u32,
    /// First PSN (valid once started).
    pub(crate) first: u32,
    /// READ: response packets received so far (in order).
    pub(crate) rcvd: u32,
    /// Done (in SQ order it still waits for earlier WQEs): the completion status.
    pub(crate) status: Option<WcStatus>,
    /// A retransmission of this READ/atomic was started by an implied NAK or a response gap;
    /// further ones wait for progress or the timer.
    pub(crate) retry_pending: bool,
    /// When the requester fetched it (its latency sample starts here).
    #[serde(with = "crate::export::instant")]
    pub(crate) posted: Instant,
}

impl Wqe {
    pub(crate) fn last(&self) -> u32 {
        psn::add(self.first, self.npsn - 1)
    }
    pub(crate) fn is_rd_atomic(&self) -> bool {
        self.wr.op.is_read_or_atomic()
    }
    pub(crate) fn done(&self) -> bool {
        self.status.is_some()
    }
    /// `p` lies in this WQE's PSN range.
    pub(crate) fn contains(&self, p: u32) -> bool {
        let d = psn::diff(p, self.first);
        d >= 0 && (d as u32) < self.npsn
    }
}

/// Requester / completer state of one QP.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ReqState {
    /// Shadows of the fetched WQEs; `wqes[0]` is the WQE at `sq.cidx`.
    pub(crate) wqes: VecDeque<Wqe>,
    /// `wqes[..started]` have PSNs.
    pub(crate) started: usize,
    /// Send cursor: the WQE the next packet belongs to...
    pub(crate) cur: usize,
    /// ...and the packet within it (PSN offset; ignored for READ / atomic).
    pub(crate) cur_off: u32,
    /// First PSN of the next WQE to start.
    pub(crate) next_psn: u32,
    /// One past the furthest PSN ever sent (earlier PSNs sent again are retransmissions).
    pub(crate) max_sent: u32,
    /// Oldest PSN not acknowledged.
    pub(crate) una: u32,
    /// Retransmission deadline.
    #[serde(with = "crate::export::opt_instant")]
    pub(crate) rto: Option<Instant>,
    /// RNR NAK wait: nothing leaves before this.
    #[serde(with = "crate::export::opt_instant")]
    pub(crate) rnr_until: Option<Instant>,
    /// Timer expiries since the last progress.
    pub(crate) retry_used: u8,
    /// RNR NAKs since the last progress.
    pub(crate) rnr_used: u8,
    /// Packets sent since the last one with AckReq.
    pub(crate) since_ackreq: u32,
    /// A new WQE is held back by `max_rd_atomic` (counted once per stall).
    pub(crate) rd_stalled: bool,
    /// `poll_transmit` had a packet but pacing held it back (wake at the pacing deadline).
    pub(crate) paced_blocked: bool,
    /// DCQCN reaction point.
    pub cc: CcState,
    /// Round trip, delivery rate, send window and loss-probe timeout.
    pub path: PathEstimator,
    /// Loss-probe deadline (see [`crate::window`]).
    #[serde(with = "crate::export::opt_instant")]
    pub(crate) probe: Option<Instant>,
    /// `una` as last reported to `path` (the packets acknowledged since are its next sample).
    pub(crate) path_una: u32,
    /// A new packet is held back by the send window (counted once per stall).
    pub(crate) win_stalled: bool,
    /// The NIC sizes windows to the path and runs loss probes (`RnicConfig::path_window`).
    pub(crate) path_on: bool,
    /// End-to-end credits (IBTA 9.7.7.2): the PSN of the newest ACK that carried a credit
    /// count, and the receive WQEs it advertised beyond the messages up to that PSN. `None`:
    /// not limited (no count yet, or the responder advertises "invalid": an SRQ).
    pub(crate) credits: Option<(u32, u32)>,
    /// A new SEND / WRITE with immediate is held back for want of credits (counted once per
    /// stall).
    pub(crate) credit_stalled: bool,
}

impl ReqState {
    /// Start (RTR -> RTS) with the first PSN to send.
    pub fn reset(&mut self, sq_psn: u32, _now: Instant) {
        let p = sq_psn & psn::MASK;
        *self = ReqState { next_psn: p, max_sent: p, una: p, path_una: p, ..ReqState::default() };
    }

    /// Move every instant through `f` (an import onto another clock).
    pub(crate) fn retime(&mut self, f: &dyn Fn(Instant) -> Instant) {
        for w in &mut self.wqes {
            w.posted = f(w.posted);
        }
        for t in [&mut self.rto, &mut self.rnr_until, &mut self.probe] {
            *t = t.map(f);
        }
        self.cc.retime(f);
        self.path.retime(f);
    }

    /// The rules an imported state must keep (`sq_len`: WQEs in the send ring): the engine
    /// indexes its shadows by them.
    pub(crate) fn check(&self, sq_len: u32) -> Result<(), &'static str> {
        if self.wqes.len() > sq_len as usize {
            return Err("more fetched WQEs than the send ring holds");
        }
        if self.started > self.wqes.len() || self.cur > self.started {
            return Err("requester cursor");
        }
        if self.wqes.iter().any(|w| w.npsn == 0 || w.first > psn::MASK) {
            return Err("a fetched WQE without PSNs");
        }
        let psns = [self.next_psn, self.max_sent, self.una, self.path_una];
        if psns.iter().any(|&p| p > psn::MASK) {
            return Err("requester PSN over 24 bits");
        }
        Ok(())
    }

    /// Send WQEs fetched and not yet retired.
    pub fn outstanding_wqes(&self) -> usize {
        self.wqes.len()
    }

    /// PSN the next new request will carry.
    pub fn next_psn(&self) -> u32 {
        self.next_psn
    }

    /// Oldest unacknowledged PSN.
    pub fn una(&self) -> u32 {
        self.una
    }

    /// Some started WQE waits for an ACK or response.
    pub(crate) fn waiting(&self) -> bool {
        self.wqes.iter().take(self.started).any(|w| !w.done())
    }

    /// Where a cursor landing on `wqes[i]` resumes: SEND/WRITE after what is acknowledged, a
    /// READ at its first missing response, an atomic from scratch.
    pub(crate) fn resume_off(&self, i: usize) -> u32 {
        let Some(w) = self.wqes.get(i) else { return 0 };
        if i >= self.started {
            return 0;
        }
        match w.wr.op {
            WrOp::Read { .. } => w.rcvd,
            op if op.is_atomic() => 0,
            _ => psn::diff(self.una, w.first).clamp(0, w.npsn as i32 - 1) as u32,
        }
    }

    pub(crate) fn set_cursor(&mut self, i: usize) {
        self.cur = i;
        self.cur_off = self.resume_off(i);
    }

    /// Go back to `(i, off)` unless the cursor is already at or before it (after a timer or
    /// probe: the first copies may still arrive).
    pub(crate) fn go_back_to(&mut self, i: usize, off: u32) {
        self.go_back_from(i, off, false);
    }

    /// [`Self::go_back_to`]; `nak`: asked for by a PSN sequence NAK or a gap in READ
    /// responses (the first copies from there on were discarded or lost).
    pub(crate) fn go_back_from(&mut self, i: usize, off: u32, nak: bool) {
        if (i, off) < (self.cur, self.cur_off) {
            self.cur = i;
            self.cur_off = off;
            // The PSN sending resumes at (a READ's `off` counts its responses received).
            let started = self.wqes.iter().take(self.started).nth(i);
            let from = started.map_or(self.next_psn, |w| psn::add(w.first, off));
            self.path.on_go_back(from, self.max_sent, nak);
        }
    }

    /// Go-back-N from PSN `p`: the first started, unfinished WQE that is a READ/atomic (its
    /// response is missing) or that reaches `p`.
    pub(crate) fn go_back(&mut self, p: u32) {
        let mut target = (self.started, 0);
        for (i, w) in self.wqes.iter().enumerate().take(self.started) {
            if w.done() {
                continue;
            }
            if w.is_rd_atomic() {
                target = (i, self.resume_off(i));
                break;
            }
            if !psn::before(w.last(), p) {
                let off = psn::diff(p, w.first).clamp(0, w.npsn as i32 - 1) as u32;
                target = (i, off);
                break;
            }
        }
        self.go_back_from(target.0, target.1, true);
    }

    /// An ACK up to PSN `p` advertised credit code `code`. Older ACKs (reordered) change
    /// nothing.
    pub(crate) fn on_credits(&mut self, p: u32, code: u8) {
        if self.credits.is_some_and(|(q, _)| psn::before(p, q)) {
            return;
        }
        self.credits = crate::qp::decode_credits(code).map(|n| (p, n));
    }

    /// A new message that consumes a receive WQE may start (IBTA 9.7.7.2): fewer such messages
    /// started after the newest credit-bearing ACK than it advertised, or none at all (the
    /// limited WQE: one message may always go to learn whether a receive WQE was posted; the
    /// responder answers it with an ACK carrying new credits, or an RNR NAK).
    pub(crate) fn credit_allows(&self) -> bool {
        let Some((p, n)) = self.credits else { return true };
        let used = self
            .wqes
            .iter()
            .take(self.started)
            .filter(|w| w.wr.op.consumes_recv() && psn::before(p, w.first))
            .count();
        used == 0 || used < n as usize
    }

    /// Index of the oldest started WQE not done.
    pub(crate) fn oldest_open(&self) -> Option<usize> {
        self.wqes.iter().take(self.started).position(|w| !w.done())
    }
}
