//! What an RC QP keeps for its responder ([`RespState`]): the expected PSN, the MSN, the
//! message in progress, the saved READ/atomic resources and the queue of responses to send.
//! The logic that drives it is in [`crate::resp`].

use std::collections::VecDeque;

use snic_time::Instant;
use snic_wire::roce::ext::{NakCode, Syndrome};

use crate::psn;
use crate::verbs::{RecvWr, WcOpcode};

/// Most queued responses per QP. ACKs coalesce, so only READ/atomic responses and NAKs fill
/// it; a peer that floods READs faster than we drain them sees its requests dropped (and
/// retransmits) instead of growing our memory without bound.
pub(crate) const MAX_OUT: usize = 1024;

/// The message in progress (between a FIRST and its LAST).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Msg {
    /// A SEND scattering into `wqe` at `offset`.
    Send { wqe: RecvWr, offset: u64 },
    /// A WRITE of `len` bytes at `va`, `offset` of them done. `wqe`: the receive WQE a
    /// WRITE with immediate consumed (only between taking it and completing it).
    Write { va: u64, rkey: u32, len: u32, offset: u32, wqe: Option<RecvWr> },
}

impl Msg {
    /// The receive WQE this message holds, with the completion opcode it would get.
    pub(crate) fn wqe(&self) -> Option<(RecvWr, WcOpcode)> {
        match *self {
            Msg::Send { wqe, .. } => Some((wqe, WcOpcode::Recv)),
            Msg::Write { wqe, .. } => wqe.map(|w| (w, WcOpcode::RecvRdmaWithImm)),
        }
    }
}

/// What a saved READ / atomic resource is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum ResKind {
    Read,
    /// The atomic ran; this is the value it returned (replayed, never run again).
    Atomic {
        orig: u64,
    },
    /// A FLUSH or ATOMIC WRITE ran; a duplicate gets its empty READ response again, and is
    /// not run again.
    Done,
}

/// A saved responder resource (IBTA 9.7.5.1.2): PSN range of one READ, atomic, FLUSH or
/// ATOMIC WRITE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Resource {
    pub(crate) first: u32,
    pub(crate) last: u32,
    pub(crate) kind: ResKind,
}

/// READ responses still to send for one READ (or a replay of part of one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ReadOut {
    /// First PSN of the original READ: decides FIRST/MIDDLE versus a replay's start.
    pub(crate) res_first: u32,
    /// PSN of the next response packet.
    pub(crate) psn: u32,
    /// PSN of the last response packet.
    pub(crate) last: u32,
    /// Address of the next payload byte.
    pub(crate) va: u64,
    pub(crate) rkey: u32,
    /// Bytes still to send.
    pub(crate) left: u32,
    /// MSN for the AETHs.
    pub(crate) msn: u32,
}

/// A queued response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
/// Each carries the MSN of when it was queued, so a response sent later still tells how many
/// messages were complete at its PSN.
pub(crate) enum Out {
    Ack {
        psn: u32,
        msn: u32,
    },
    Nak {
        psn: u32,
        #[serde(with = "crate::export::syndrome")]
        syndrome: Syndrome,
        msn: u32,
    },
    Read(ReadOut),
    Atomic {
        psn: u32,
        orig: u64,
        msn: u32,
    },
}

/// Responder state of one QP.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct RespState {
    /// Expected PSN of the next new request.
    pub(crate) epsn: u32,
    /// Messages completed (24 bits), carried in every AETH.
    pub(crate) msn: u32,
    /// A PSN sequence NAK went out for the current gap: drop until ePSN arrives.
    pub(crate) seq_nak_sent: bool,
    pub(crate) msg: Option<Msg>,
    /// Saved READ/atomic resources, oldest first.
    pub(crate) res: VecDeque<Resource>,
    /// Responses to send, in PSN order.
    pub(crate) out: VecDeque<Out>,
    pub(crate) cnp_pending: bool,
    #[serde(with = "crate::export::opt_instant")]
    pub(crate) last_cnp: Option<Instant>,
}

impl RespState {
    /// Start (INIT -> RTR) expecting `rq_psn`.
    pub fn reset(&mut self, rq_psn: u32) {
        *self = RespState { epsn: rq_psn & psn::MASK, ..RespState::default() };
    }

    /// Move every instant through `f` (an import onto another clock).
    pub(crate) fn retime(&mut self, f: &dyn Fn(Instant) -> Instant) {
        self.last_cnp = self.last_cnp.map(f);
    }

    /// The rules an imported state must keep.
    pub(crate) fn check(&self) -> Result<(), &'static str> {
        if self.epsn > psn::MASK || self.msn > psn::MASK {
            return Err("responder PSN or MSN over 24 bits");
        }
        if self.out.len() > MAX_OUT + 1024 || self.res.len() > 256 {
            return Err("responder queues");
        }
        Ok(())
    }

    /// The PSN the responder expects next.
    pub fn expected_psn(&self) -> u32 {
        self.epsn
    }

    /// Request messages completed so far (the MSN, 24 bits).
    pub fn msn(&self) -> u32 {
        self.msn
    }

    /// Whether a response (ACK, NAK, READ response, atomic ACK or CNP) waits to be sent.
    pub fn has_pending(&self) -> bool {
        !self.out.is_empty() || self.cnp_pending
    }

    /// Queue an ACK. Returns `false` when the queue is full and the ACK was dropped (the
    /// requester's timer recovers; the caller counts it).
    pub(crate) fn queue_ack(&mut self, psn: u32) -> bool {
        let msn = self.msn;
        if let Some(Out::Ack { psn: p, msn: m }) = self.out.back_mut() {
            // Coalesce: a later ACK acknowledges everything the earlier one did.
            if !psn::before(psn, *p) {
                (*p, *m) = (psn, msn);
            }
            return true;
        }
        if self.out.len() >= MAX_OUT {
            return false;
        }
        self.out.push_back(Out::Ack { psn, msn });
        true
    }

    /// Queue a NAK. Recoverable NAKs (RNR, PSN sequence error) repeating the last queued one
    /// merge into it, and are dropped when the queue is full (returns `false`): remote input
    /// must not grow the queue without bound. Fatal NAKs are always queued; each moves the QP
    /// to the error state, so there are few.
    pub(crate) fn queue_nak(&mut self, psn: u32, syndrome: Syndrome) -> bool {
        let recoverable =
            matches!(syndrome, Syndrome::RnrNak { .. } | Syndrome::Nak(NakCode::PsnSequenceError));
        if recoverable {
            if let Some(Out::Nak { psn: p, syndrome: s, .. }) = self.out.back()
                && *p == psn
                && *s == syndrome
            {
                return true;
            }
            if self.out.len() >= MAX_OUT {
                return false;
            }
        }
        self.out.push_back(Out::Nak { psn, syndrome, msn: self.msn });
        true
    }

    /// Forget queued responses to requests after `p` (READ responses, atomic ACKs, ACKs).
    /// Called when a duplicate READ/atomic at `p` shows the requester went back to `p`: it
    /// resends those later requests and gets their answers then, in PSN order. Answering them
    /// before the replay would let them overtake it (as rxe, which abandons the reply in
    /// progress for the replay).
    pub(crate) fn drop_after(&mut self, p: u32) {
        self.out.retain(|o| match *o {
            Out::Ack { psn, .. } | Out::Atomic { psn, .. } => !psn::before(p, psn),
            Out::Read(r) => !psn::before(p, r.res_first),
            Out::Nak { .. } => true,
        });
    }

    pub(crate) fn push_resource(&mut self, r: Resource, max: u8) {
        // rxe's answer to more READ/atomics than max_dest_rd_atomic: evict the oldest.
        while self.res.len() >= usize::from(max.max(1)) {
            self.res.pop_front();
        }
        self.res.push_back(r);
    }
}
