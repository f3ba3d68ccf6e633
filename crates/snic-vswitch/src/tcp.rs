//! TCP connection state as the VFP slow path tracks it from the segments the fast path copies
//! to it (those with SYN, FIN or RST, plus the first packet of each flow).
//!
//! The tracker is simplified on purpose: it follows flags only, never sequence numbers, windows
//! or payload, so it cannot tell a retransmission from a new segment and does not validate that
//! an RST is in-window. It answers what the vSwitch needs: is the connection half-open (counted
//! and capped by the caller), has it been established, when may its flows be forgotten
//! (time-wait after both FINs or an RST).
//!
//! States: a SYN opens it ([`TcpState::SynSent`]); the responder's SYN (with or without ACK:
//! simultaneous open) moves it to [`TcpState::SynReceived`]; once each side's SYN has been
//! acknowledged by the other it is [`TcpState::Established`]. The first FIN gives
//! [`TcpState::FinWait`], the other side's FIN [`TcpState::TimeWait`] (or
//! [`TcpState::Closing`] when that FIN carries no ACK: the two FINs crossed, and the next ACK
//! moves it on to time-wait). The final ACK is not tracked. An RST in any state gives
//! [`TcpState::Closed`].
//!
//! It is not a TCP stack and not a firewall's full conntrack: no segment is ever held or
//! rewritten here.

use crate::key::Direction;
use core::time::Duration;
use snic_time::Instant;

/// TCP header flag bits (byte 13 of the header).
pub mod flags {
    /// No more data from the sender.
    pub const FIN: u8 = 0x01;
    /// Synchronize sequence numbers (opens a connection).
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push.
    pub const PSH: u8 = 0x08;
    /// The acknowledgment number is significant.
    pub const ACK: u8 = 0x10;
}

/// Offset of the flags byte inside a TCP header.
const FLAGS_OFFSET: usize = 13;
/// Length of a TCP header without options.
const MIN_HEADER_LEN: usize = 20;

/// The flags byte of the TCP header that starts at `l4_offset` in `frame`, or `None` when the
/// frame is too short to hold a 20-byte TCP header there. For the fast path: it decides from
/// this whether to copy a segment to the slow path (`flags & (SYN | FIN | RST) != 0`).
pub fn tcp_flags(frame: &[u8], l4_offset: usize) -> Option<u8> {
    let end = l4_offset.checked_add(MIN_HEADER_LEN)?;
    if end > frame.len() {
        return None;
    }
    frame.get(l4_offset.checked_add(FLAGS_OFFSET)?).copied()
}

/// True when a segment with these flags must be copied to the slow path.
pub fn is_control(tcp_flags: u8) -> bool {
    tcp_flags & (flags::SYN | flags::FIN | flags::RST) != 0
}

/// Where a tracked connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TcpState {
    /// The originator's SYN was seen, nothing from the responder yet.
    SynSent,
    /// Both SYNs were seen; not both acknowledged yet.
    SynReceived,
    /// Both SYNs acknowledged (or the connection was picked up mid-stream).
    Established,
    /// One side sent FIN.
    FinWait,
    /// Both sides sent FIN, and the second FIN did not acknowledge the first (they crossed).
    Closing,
    /// Both sides sent FIN; the connection may be forgotten after the time-wait timeout.
    TimeWait,
    /// Reset (or an invalid first segment): the connection lingers for the time-wait period,
    /// then may be forgotten.
    Closed,
}

impl TcpState {
    /// Lower-case name for dumps (`"syn-sent"`, `"established"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            TcpState::SynSent => "syn-sent",
            TcpState::SynReceived => "syn-received",
            TcpState::Established => "established",
            TcpState::FinWait => "fin-wait",
            TcpState::Closing => "closing",
            TcpState::TimeWait => "time-wait",
            TcpState::Closed => "closed",
        }
    }
}

/// What a segment changed, for the caller to act on and count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpEvent {
    /// Nothing worth acting on (including retransmissions and reopening after time-wait).
    None,
    /// The connection just became established (no longer half-open).
    Established,
    /// A FIN was seen that does not complete the close (first FIN, or crossed FINs).
    FinSeen,
    /// Both FINs seen: the connection entered time-wait; see [`TcpConn::expires`].
    TimeWait,
    /// An RST closed the connection; it may be forgotten after the time-wait period.
    Reset,
    /// A segment that does not fit the state (a SYN on an established connection, SYN with FIN
    /// or RST, ...). The state is unchanged; the caller counts it.
    Invalid,
}

/// Side of the connection, relative to its originator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Orig = 0,
    Resp = 1,
}

impl Side {
    const fn other(self) -> Side {
        match self {
            Side::Orig => Side::Resp,
            Side::Resp => Side::Orig,
        }
    }
}

/// Tracked state of one TCP connection (both directions).
///
/// The originator is learnt from the first segment given to [`TcpConn::new`]: the sender of a
/// SYN, the receiver of a SYN+ACK, otherwise the sender. Later `dir` values must follow the same
/// convention as that first one (all relative to the originator, where `Direction::Out` means
/// "from the originator", or all as the vSwitch sees them); either works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpConn {
    state: TcpState,
    /// Direction value of segments from the originator.
    orig: Direction,
    /// Time of the last state change.
    since: Instant,
    /// Time of the last segment.
    last: Instant,
    /// Per side (index [`Side`]): SYN sent.
    syn: [bool; 2],
    /// Per side: its SYN was acknowledged by the other side.
    syn_acked: [bool; 2],
    /// Per side: FIN sent.
    fin: [bool; 2],
}

/// A [`TcpConn`] in a form that outlives its process (the vSwitch state a hitless upgrade
/// hands over): its times are ages before the `now` of [`TcpConn::snapshot`], never raw
/// instants, since each process's clock has its own origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TcpSnapshot {
    /// Where the connection is.
    pub state: TcpState,
    /// Direction value of segments from the originator.
    pub orig: Direction,
    /// Nanoseconds since the last state change.
    pub since_age_ns: u64,
    /// Nanoseconds since the last segment.
    pub last_age_ns: u64,
    /// Per side (originator, responder): SYN sent.
    pub syn: [bool; 2],
    /// Per side: its SYN was acknowledged by the other side.
    pub syn_acked: [bool; 2],
    /// Per side: FIN sent.
    pub fin: [bool; 2],
}

/// Whole nanoseconds of `d`, saturating.
fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

const fn has(f: u8, bit: u8) -> bool {
    f & bit != 0
}

impl TcpConn {
    /// Start tracking from the first segment seen, normally the originator's SYN (`SynSent`).
    /// A SYN+ACK starts in `SynReceived` (the SYN was missed); an RST, or an impossible flag
    /// combination (SYN with FIN or RST), starts `Closed`; a FIN starts in `FinWait`; anything
    /// else is a connection picked up mid-stream and starts `Established`.
    pub fn new(now: Instant, dir: Direction, flags: u8) -> TcpConn {
        let syn = has(flags, flags::SYN);
        let ack = has(flags, flags::ACK);
        let orig = if syn && ack { dir.reverse() } else { dir };
        let mut c = TcpConn {
            state: TcpState::Closed,
            orig,
            since: now,
            last: now,
            syn: [false; 2],
            syn_acked: [false; 2],
            fin: [false; 2],
        };
        if has(flags, flags::RST) || (syn && has(flags, flags::FIN)) {
            return c;
        }
        if syn && !ack {
            c.state = TcpState::SynSent;
            c.syn = [true, false];
        } else if syn {
            // The responder's SYN+ACK: the originator's SYN was sent and is now acknowledged.
            c.state = TcpState::SynReceived;
            c.syn = [true, true];
            c.syn_acked = [true, false];
        } else {
            c.state = TcpState::Established;
            c.syn = [true, true];
            c.syn_acked = [true, true];
            if has(flags, flags::FIN) {
                c.fin[Side::Orig as usize] = true;
                c.state = TcpState::FinWait;
            }
        }
        c
    }

    /// The connection with its times as ages before `now`.
    pub fn snapshot(&self, now: Instant) -> TcpSnapshot {
        TcpSnapshot {
            state: self.state,
            orig: self.orig,
            since_age_ns: duration_ns(now - self.since),
            last_age_ns: duration_ns(now - self.last),
            syn: self.syn,
            syn_acked: self.syn_acked,
            fin: self.fin,
        }
    }

    /// The connection of a snapshot, its ages counted back from `now` (this process's clock).
    /// An age older than this clock's origin is clamped to the origin: a time-wait may then
    /// last longer than it would have, never shorter.
    pub fn restore(s: &TcpSnapshot, now: Instant) -> TcpConn {
        let back = |age: u64| Instant::from_nanos(now.as_nanos().saturating_sub(age));
        TcpConn {
            state: s.state,
            orig: s.orig,
            since: back(s.since_age_ns),
            last: back(s.last_age_ns),
            syn: s.syn,
            syn_acked: s.syn_acked,
            fin: s.fin,
        }
    }

    fn side(&self, dir: Direction) -> Side {
        if dir == self.orig { Side::Orig } else { Side::Resp }
    }

    fn enter(&mut self, now: Instant, state: TcpState) {
        if self.state != state {
            self.state = state;
            self.since = now;
        }
    }

    /// Forget everything and start a new connection from the originator's SYN (the 4-tuple
    /// reused after time-wait or reset).
    fn reopen(&mut self, now: Instant) {
        self.syn = [true, false];
        self.syn_acked = [false; 2];
        self.fin = [false; 2];
        self.state = TcpState::SynSent;
        self.since = now;
    }

    /// Track one segment from direction `dir` carrying `flags`; returns what changed. A segment
    /// that both completes the handshake and carries a FIN returns the FIN's event (compare
    /// [`is_half_open`](Self::is_half_open) before and after to keep a half-open count).
    pub fn on_segment(&mut self, now: Instant, dir: Direction, flags: u8) -> TcpEvent {
        let syn = has(flags, flags::SYN);
        let ack = has(flags, flags::ACK);
        let fin = has(flags, flags::FIN);
        let rst = has(flags, flags::RST);
        if syn && (fin || rst) {
            return TcpEvent::Invalid;
        }
        self.last = self.last.max(now);
        let side = self.side(dir);
        let (s, o) = (side as usize, side.other() as usize);

        if rst {
            if self.state == TcpState::Closed {
                return TcpEvent::None;
            }
            self.enter(now, TcpState::Closed);
            return TcpEvent::Reset;
        }

        match self.state {
            TcpState::Closed | TcpState::TimeWait => {
                // Only a fresh SYN from the originator reopens (the 4-tuple reused); anything
                // else is the tail of the old connection.
                if syn && !ack && side == Side::Orig {
                    self.reopen(now);
                    TcpEvent::None
                } else if syn {
                    TcpEvent::Invalid
                } else {
                    TcpEvent::None
                }
            }
            TcpState::SynSent | TcpState::SynReceived => {
                if syn {
                    self.syn[s] = true;
                }
                if ack {
                    // An ACK from this side implies its own SYN (a SYN+ACK we missed) ...
                    self.syn[s] = true;
                    if !self.syn[o] {
                        // ... and, when the other side's SYN was missed too, that it was a
                        // SYN+ACK which acknowledged this side's SYN.
                        self.syn[o] = true;
                        self.syn_acked[s] = true;
                    }
                    self.syn_acked[o] = true;
                }
                if self.syn == [true, true] {
                    self.enter(now, TcpState::SynReceived);
                }
                let established = self.syn_acked == [true, true];
                if established {
                    self.enter(now, TcpState::Established);
                }
                if fin {
                    self.on_fin(now, s, o, ack)
                } else if established {
                    TcpEvent::Established
                } else {
                    TcpEvent::None
                }
            }
            TcpState::Established | TcpState::FinWait | TcpState::Closing => {
                if syn {
                    if ack && self.state == TcpState::Established {
                        // A retransmitted SYN+ACK (the final ACK of the handshake was lost).
                        return TcpEvent::None;
                    }
                    return TcpEvent::Invalid;
                }
                if fin {
                    return self.on_fin(now, s, o, ack);
                }
                if self.state == TcpState::Closing && ack {
                    self.enter(now, TcpState::TimeWait);
                    return TcpEvent::TimeWait;
                }
                TcpEvent::None
            }
        }
    }

    /// A FIN from side `s` (other side `o`).
    fn on_fin(&mut self, now: Instant, s: usize, o: usize, ack: bool) -> TcpEvent {
        let first = !self.fin[s];
        self.fin[s] = true;
        if !self.fin[o] {
            self.enter(now, TcpState::FinWait);
            return if first { TcpEvent::FinSeen } else { TcpEvent::None };
        }
        if !first && self.state != TcpState::Closing {
            // A retransmitted FIN after both were seen.
            return TcpEvent::None;
        }
        if ack {
            self.enter(now, TcpState::TimeWait);
            TcpEvent::TimeWait
        } else {
            self.enter(now, TcpState::Closing);
            if first { TcpEvent::FinSeen } else { TcpEvent::None }
        }
    }

    /// Where the connection is.
    pub fn state(&self) -> TcpState {
        self.state
    }

    /// True while a SYN was seen and the connection is not yet established (`SynSent` or
    /// `SynReceived`): what the caller counts and caps.
    pub fn is_half_open(&self) -> bool {
        matches!(self.state, TcpState::SynSent | TcpState::SynReceived)
    }

    /// Time of the last state change.
    pub fn since(&self) -> Instant {
        self.since
    }

    /// Time of the latest segment seen (for idle timeouts).
    pub fn last_seen(&self) -> Instant {
        self.last
    }

    /// When the connection may be forgotten: `time_wait` after it entered `TimeWait` or
    /// `Closed`, otherwise `None` (idle aging decides).
    ///
    /// A reset connection lingers as long as a closed one (as Linux conntrack keeps a reset
    /// connection in its CLOSE state): the segments that were in flight when it was reset, and
    /// the peer's RSTs answering each of them, still belong to it and pass. Forgetting it at
    /// once made every one of those RSTs the first packet of an unknown flow, denied as
    /// `tcp_invalid`. A fresh SYN from the originator reopens it meanwhile.
    pub fn expires(&self, time_wait: Duration) -> Option<Instant> {
        match self.state {
            TcpState::TimeWait | TcpState::Closed => Some(self.since.saturating_add(time_wait)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::flags::{ACK, FIN, PSH, RST, SYN};
    use super::*;
    use proptest::prelude::*;

    const OUT: Direction = Direction::Out;
    const IN: Direction = Direction::In;
    const TW: Duration = Duration::from_secs(60);

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    /// Feed `(ms, dir, flags, expected event, expected state)` steps to a connection opened by
    /// the first step.
    fn run(steps: &[(u64, Direction, u8, TcpEvent, TcpState)]) -> TcpConn {
        let (ms, dir, f, _, st) = steps[0];
        let mut c = TcpConn::new(t(ms), dir, f);
        assert_eq!(c.state(), st, "after first segment");
        for (i, &(ms, dir, f, ev, st)) in steps.iter().enumerate().skip(1) {
            assert_eq!(c.on_segment(t(ms), dir, f), ev, "event of step {i}");
            assert_eq!(c.state(), st, "state after step {i}");
        }
        c
    }

    #[test]
    fn tcp_flags_reads_byte_13_of_a_full_header() {
        let mut frame = [0u8; 54];
        frame[34 + 13] = SYN | ACK;
        assert_eq!(tcp_flags(&frame, 34), Some(SYN | ACK));
        // 19 bytes of TCP header: too short.
        assert_eq!(tcp_flags(&frame[..53], 34), None);
        assert_eq!(tcp_flags(&frame, 35), None);
        assert_eq!(tcp_flags(&frame, usize::MAX), None);
        assert_eq!(tcp_flags(&[], 0), None);
        assert!(is_control(FIN | ACK) && is_control(RST) && is_control(SYN));
        assert!(!is_control(ACK | PSH));
    }

    #[test]
    fn normal_open_and_close_from_originator() {
        use TcpEvent as E;
        use TcpState as S;
        let c = run(&[
            (0, OUT, SYN, E::None, S::SynSent),
            (1, IN, SYN | ACK, E::None, S::SynReceived),
            (2, OUT, ACK, E::Established, S::Established),
            (3, OUT, ACK | PSH, E::None, S::Established),
            (10, OUT, FIN | ACK, E::FinSeen, S::FinWait),
            (11, IN, ACK, E::None, S::FinWait),
            (12, IN, FIN | ACK, E::TimeWait, S::TimeWait),
            (13, OUT, ACK, E::None, S::TimeWait),
        ]);
        assert_eq!(c.since(), t(12));
        assert_eq!(c.last_seen(), t(13));
        assert_eq!(c.expires(TW), Some(t(12) + TW));
        assert!(!c.is_half_open());
    }

    #[test]
    fn normal_close_from_responder() {
        use TcpEvent as E;
        use TcpState as S;
        let c = run(&[
            (0, OUT, SYN, E::None, S::SynSent),
            (1, IN, SYN | ACK, E::None, S::SynReceived),
            (2, OUT, ACK, E::Established, S::Established),
            (5, IN, FIN | ACK, E::FinSeen, S::FinWait),
            // A retransmitted FIN changes nothing.
            (6, IN, FIN | ACK, E::None, S::FinWait),
            (7, OUT, FIN | ACK, E::TimeWait, S::TimeWait),
            (8, IN, FIN | ACK, E::None, S::TimeWait),
        ]);
        assert_eq!(c.expires(Duration::from_secs(2)), Some(t(2007)));
    }

    #[test]
    fn simultaneous_close_goes_through_closing() {
        use TcpEvent as E;
        use TcpState as S;
        let c = run(&[
            (0, OUT, SYN, E::None, S::SynSent),
            (1, IN, SYN | ACK, E::None, S::SynReceived),
            (2, OUT, ACK, E::Established, S::Established),
            (5, OUT, FIN, E::FinSeen, S::FinWait),
            (5, IN, FIN, E::FinSeen, S::Closing),
            (6, OUT, ACK, E::TimeWait, S::TimeWait),
        ]);
        assert_eq!(c.expires(TW), Some(t(6) + TW));
        // Both FINs carrying ACK (the usual crossing on the wire) go straight to time-wait.
        run(&[
            (0, IN, SYN, E::None, S::SynSent),
            (1, OUT, SYN | ACK, E::None, S::SynReceived),
            (2, IN, ACK, E::Established, S::Established),
            (5, IN, FIN | ACK, E::FinSeen, S::FinWait),
            (5, OUT, FIN | ACK, E::TimeWait, S::TimeWait),
        ]);
    }

    #[test]
    fn reset_closes_from_any_state_and_lingers_like_time_wait() {
        use TcpEvent as E;
        use TcpState as S;
        let c = run(&[
            (0, OUT, SYN, E::None, S::SynSent),
            (4, IN, RST | ACK, E::Reset, S::Closed),
            (5, IN, RST, E::None, S::Closed),
            (6, OUT, ACK, E::None, S::Closed),
        ]);
        // Trailing RSTs and data of the reset connection changed nothing: it expires
        // `time_wait` after the reset.
        assert_eq!(c.expires(TW), Some(t(4) + TW));
        assert!(!c.is_half_open());
        let prefixes: [&[(Direction, u8)]; 5] = [
            &[(OUT, SYN), (IN, SYN | ACK)],
            &[(OUT, SYN), (IN, SYN | ACK), (OUT, ACK)],
            &[(OUT, SYN), (IN, SYN | ACK), (OUT, ACK), (OUT, FIN | ACK)],
            &[(OUT, SYN), (IN, SYN), (OUT, FIN), (IN, FIN)],
            &[(OUT, SYN), (IN, SYN | ACK), (OUT, ACK), (OUT, FIN | ACK), (IN, FIN | ACK)],
        ];
        for p in prefixes {
            let mut c = TcpConn::new(t(0), p[0].0, p[0].1);
            for &(d, f) in &p[1..] {
                c.on_segment(t(1), d, f);
            }
            assert_ne!(c.state(), TcpState::Closed);
            assert_eq!(c.on_segment(t(9), IN, RST), TcpEvent::Reset, "{p:?}");
            assert_eq!(c.state(), TcpState::Closed);
            assert_eq!(c.expires(TW), Some(t(9) + TW));
        }
    }

    #[test]
    fn half_open_transitions() {
        let mut c = TcpConn::new(t(0), OUT, SYN);
        assert!(c.is_half_open());
        assert_eq!(c.expires(TW), None);
        // Retransmitted SYN: still half-open, no state change.
        assert_eq!(c.on_segment(t(1000), OUT, SYN), TcpEvent::None);
        assert_eq!(c.since(), t(0));
        assert!(c.is_half_open());
        assert_eq!(c.on_segment(t(1001), IN, SYN | ACK), TcpEvent::None);
        assert!(c.is_half_open());
        assert_eq!(c.since(), t(1001));
        // A retransmitted SYN+ACK keeps it half-open.
        assert_eq!(c.on_segment(t(1002), IN, SYN | ACK), TcpEvent::None);
        assert!(c.is_half_open());
        assert_eq!(c.on_segment(t(1003), OUT, ACK), TcpEvent::Established);
        assert!(!c.is_half_open());
        // A late duplicate SYN+ACK is harmless; a bare SYN is invalid and changes nothing.
        assert_eq!(c.on_segment(t(1004), IN, SYN | ACK), TcpEvent::None);
        assert_eq!(c.on_segment(t(1005), OUT, SYN), TcpEvent::Invalid);
        assert_eq!(c.state(), TcpState::Established);
        assert_eq!(c.since(), t(1003));
    }

    #[test]
    fn simultaneous_open_needs_both_syns_acknowledged() {
        use TcpEvent as E;
        use TcpState as S;
        run(&[
            (0, OUT, SYN, E::None, S::SynSent),
            (0, IN, SYN, E::None, S::SynReceived),
            (1, OUT, SYN | ACK, E::None, S::SynReceived),
            (1, IN, SYN | ACK, E::Established, S::Established),
        ]);
        // The same with plain ACKs after the crossing SYNs: one ACK is not enough.
        run(&[
            (0, OUT, SYN, E::None, S::SynSent),
            (0, IN, SYN, E::None, S::SynReceived),
            (1, IN, ACK, E::None, S::SynReceived),
            (2, OUT, ACK, E::Established, S::Established),
        ]);
    }

    #[test]
    fn missed_handshake_segments_are_inferred() {
        use TcpEvent as E;
        use TcpState as S;
        // The responder's SYN+ACK never reached the slow path: the originator's ACK implies it.
        run(&[(0, OUT, SYN, E::None, S::SynSent), (2, OUT, ACK, E::Established, S::Established)]);
        // First segment seen is the SYN+ACK: the originator is the other side.
        let mut c = TcpConn::new(t(0), IN, SYN | ACK);
        assert_eq!(c.state(), TcpState::SynReceived);
        assert!(c.is_half_open());
        // The responder's own ACK does not complete the handshake ...
        assert_eq!(c.on_segment(t(1), IN, ACK), TcpEvent::None);
        // ... the originator's does.
        assert_eq!(c.on_segment(t(2), OUT, ACK), TcpEvent::Established);
        // Mid-stream pickup and a FIN as the first segment.
        assert_eq!(TcpConn::new(t(0), OUT, ACK | PSH).state(), TcpState::Established);
        let mut c = TcpConn::new(t(0), IN, FIN | ACK);
        assert_eq!(c.state(), TcpState::FinWait);
        assert_eq!(c.on_segment(t(1), OUT, FIN | ACK), TcpEvent::TimeWait);
    }

    #[test]
    fn invalid_flag_combinations() {
        assert_eq!(TcpConn::new(t(0), OUT, SYN | FIN).state(), TcpState::Closed);
        assert_eq!(TcpConn::new(t(0), OUT, SYN | RST).state(), TcpState::Closed);
        assert_eq!(TcpConn::new(t(0), OUT, RST).state(), TcpState::Closed);
        let mut c = TcpConn::new(t(0), OUT, SYN);
        let before = c;
        assert_eq!(c.on_segment(t(1), IN, SYN | FIN | ACK), TcpEvent::Invalid);
        assert_eq!(c.on_segment(t(1), IN, SYN | RST), TcpEvent::Invalid);
        assert_eq!(c, before);
    }

    #[test]
    fn a_new_syn_reopens_after_time_wait_or_reset() {
        let mut c = TcpConn::new(t(0), OUT, SYN);
        c.on_segment(t(1), IN, SYN | ACK);
        c.on_segment(t(2), OUT, ACK);
        c.on_segment(t(3), OUT, FIN | ACK);
        assert_eq!(c.on_segment(t(4), IN, FIN | ACK), TcpEvent::TimeWait);
        // The responder cannot open the same 4-tuple the other way round.
        assert_eq!(c.on_segment(t(5), IN, SYN), TcpEvent::Invalid);
        assert_eq!(c.state(), TcpState::TimeWait);
        assert_eq!(c.on_segment(t(6), OUT, SYN), TcpEvent::None);
        assert_eq!(c.state(), TcpState::SynSent);
        assert!(c.is_half_open());
        assert_eq!(c.since(), t(6));
        assert_eq!(c.expires(TW), None);
        c.on_segment(t(7), OUT, RST);
        assert_eq!(c.on_segment(t(8), OUT, SYN), TcpEvent::None);
        assert_eq!(c.state(), TcpState::SynSent);
    }

    /// A snapshot keeps ages, not instants: restored on another clock, the connection expires
    /// as long after the restore as it had left at the snapshot; an age older than that clock
    /// is clamped to its origin (a later expiry, never an earlier one).
    #[test]
    fn snapshot_restores_on_another_clock() {
        let mut c = TcpConn::new(t(0), OUT, SYN);
        c.on_segment(t(1), IN, SYN | ACK);
        c.on_segment(t(2), OUT, ACK);
        c.on_segment(t(3), OUT, FIN | ACK);
        c.on_segment(t(4_000), IN, FIN | ACK);
        let s = c.snapshot(t(4_500));
        assert_eq!(
            (s.state, s.since_age_ns, s.last_age_ns),
            (TcpState::TimeWait, 500_000_000, 500_000_000)
        );
        let r = TcpConn::restore(&s, t(90_000));
        assert_eq!(r.state(), TcpState::TimeWait);
        assert_eq!(r.snapshot(t(90_000)), s);
        assert_eq!(r.expires(TW), Some(t(90_000) + (TW - Duration::from_millis(500))));
        // The same segments follow the same transitions after the restore.
        let mut r = r;
        assert_eq!(r.on_segment(t(90_001), OUT, SYN), TcpEvent::None);
        assert_eq!(r.state(), TcpState::SynSent);
        let early = TcpConn::restore(&s, t(100));
        assert_eq!(early.since(), Instant::ZERO);
        assert_eq!(early.expires(TW), Some(Instant::ZERO + TW));
    }

    #[test]
    fn expiry_saturates() {
        let mut c = TcpConn::new(Instant::MAX, OUT, ACK);
        c.on_segment(Instant::MAX, OUT, FIN | ACK);
        c.on_segment(Instant::MAX, IN, FIN | ACK);
        assert_eq!(c.expires(TW), Some(Instant::MAX));
    }

    proptest! {
        #[test]
        fn any_flag_sequence_is_handled(
            first in any::<u8>(),
            first_in in any::<bool>(),
            segs in proptest::collection::vec((any::<bool>(), any::<u8>(), 0u64..1_000), 0..40),
        ) {
            let dir = |b: bool| if b { IN } else { OUT };
            let mut now = 0u64;
            let mut c = TcpConn::new(t(now), dir(first_in), first);
            prop_assert_eq!(c.is_half_open(),
                matches!(c.state(), TcpState::SynSent | TcpState::SynReceived));
            for (d, f, dt) in segs {
                now += dt;
                let before = c;
                let ev = c.on_segment(t(now), dir(d), f);
                prop_assert_eq!(c.is_half_open(),
                    matches!(c.state(), TcpState::SynSent | TcpState::SynReceived));
                prop_assert!(c.since() <= t(now) && c.since() >= before.since());
                match ev {
                    TcpEvent::Invalid => {
                        prop_assert_eq!(c.state(), before.state());
                        prop_assert_eq!(c.since(), before.since());
                    }
                    TcpEvent::Reset => prop_assert_eq!(c.state(), TcpState::Closed),
                    TcpEvent::TimeWait => prop_assert_eq!(c.state(), TcpState::TimeWait),
                    TcpEvent::Established => prop_assert_eq!(c.state(), TcpState::Established),
                    TcpEvent::FinSeen => prop_assert!(
                        matches!(c.state(), TcpState::FinWait | TcpState::Closing)),
                    TcpEvent::None => {}
                }
                if f & RST != 0 && f & SYN == 0 {
                    prop_assert_eq!(c.state(), TcpState::Closed);
                }
                if c.state() != before.state() {
                    prop_assert_eq!(c.since(), t(now));
                }
                match c.state() {
                    TcpState::TimeWait => prop_assert_eq!(c.expires(TW), Some(c.since() + TW)),
                    TcpState::Closed => prop_assert_eq!(c.expires(TW), Some(c.since() + TW)),
                    _ => prop_assert_eq!(c.expires(TW), None),
                }
            }
        }
    }
}
