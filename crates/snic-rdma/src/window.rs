//! The requester's view of its path: round-trip time, delivery rate, and from them the send
//! window and the loss-probe timeout that bound what go-back-N costs under loss (issue 18).
//!
//! Go-back-N resends everything sent after a lost packet, so a loss costs about the packets in
//! flight. With a fixed window of [`crate::RnicConfig::max_inflight`] (1024) packets, 5% random
//! loss made a 64 KiB WRITE resend most of what it sent. The window here is sized to the path
//! instead, as BBR and IRN's BDP-FC do: twice the bandwidth-delay product, the largest recent
//! delivery rate times the smallest recent round trip, never below the floor (below). A loss then
//! costs about one BDP, not the whole queue. The window counts PSNs, so it bounds READ
//! responses too: a new READ starts once its first response PSN is inside the window (a READ
//! longer than the window still goes alone), and a READ is timed to its first response.
//! On by default; `RnicConfig::path_window = false` (`snic rdma --fixed-window`) keeps the
//! fixed `max_inflight` window without probes.
//!
//! The smallest recent RTT understates the round trip on a host where both ends take turns on
//! busy CPUs and the transport moves packets in batches of 64 datagrams: ACKs then arrive in
//! bursts, and a window of 2 x BDP alone stalls the sender between them (a floor of 16 cut
//! loss-free WRITE from 95 to 60 MB/s between two namespaces). So the window has a floor of a
//! few transport batches, [`crate::RnicConfig::window_floor`] ([`DEFAULT_FLOOR`] by default);
//! a driver without batches (the testbed's simulated link) sets it lower.
//!
//! Losses a NAK cannot reveal (the last packets of a burst, a lost NAK, a retransmission lost
//! again while the responder stays silent after its one NAK) wait for a timer. The IBTA local
//! ACK timeout (`timeout` 14: 67 ms) is far longer than the path's round trip, so the requester
//! also runs a **loss probe**: when nothing is acknowledged for `srtt + 4 rttvar` (at least
//! [`MIN_PROBE`], doubled on each probe without progress) it goes back to the oldest
//! unacknowledged packet as a timeout would, but without spending `retry_cnt`; the IBTA timer
//! still runs beside it and alone decides that the peer is gone. A probe that fires too early
//! only sends duplicates, which the responder acknowledges again (and replays for READ/atomic
//! from its saved resources), so correctness never depends on it.
//!
//! Samples follow Karn: one timed packet (a new one with AckReq) at a time, discarded when it
//! is sent again before its acknowledgment. Before the first sample the window is
//! [`INIT_WINDOW`].

use core::time::Duration;

use snic_time::Instant;

use crate::psn;

/// Smallest send window, in packets, whatever the floor.
pub const MIN_WINDOW: u32 = 16;
/// Default floor of the window: four batches of the RoCE transport (64 datagrams each).
pub const DEFAULT_FLOOR: u32 = 256;
/// Send window before the path is measured, in packets (a go-back before the first sample
/// costs at most this much).
pub const INIT_WINDOW: u32 = 64;
/// Shortest loss-probe timeout.
pub const MIN_PROBE: Duration = Duration::from_micros(200);
/// Window gain over the bandwidth-delay product (room for the rate to grow and for batching).
const GAIN: f64 = 2.0;
/// Samples kept by the min-RTT and max-rate filters.
const FILTER: usize = 16;
/// Most doublings of the probe timeout.
const MAX_BACKOFF: u32 = 6;

/// The packet being timed.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
struct Timed {
    /// One past its PSN: it is acknowledged once `una` reaches this.
    end: u32,
    #[serde(with = "crate::export::instant")]
    sent: Instant,
    /// Packets delivered when it was sent.
    delivered: u64,
}

/// Round trip, delivery rate, window and loss-probe timeout of one requester (see module doc).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct PathEstimator {
    timed: Option<Timed>,
    /// Packets acknowledged so far.
    delivered: u64,
    srtt: Option<Duration>,
    rttvar: Duration,
    /// Recent RTT samples (ring) and recent delivery rates in packets per second.
    rtts: [Duration; FILTER],
    rates: [f64; FILTER],
    /// Samples taken (the ring's fill and next slot).
    samples: usize,
    /// Probes fired since the last progress.
    backoff: u32,
    /// After a timer or probe: retransmissions below this PSN are not timed.
    unsure: Option<u32>,
}

impl PathEstimator {
    /// Move every instant through `f` (an import onto another clock).
    pub(crate) fn retime(&mut self, f: &dyn Fn(Instant) -> Instant) {
        if let Some(t) = self.timed.as_mut() {
            t.sent = f(t.sent);
        }
    }

    /// A packet ending before PSN `end` left at `now`; `ack_req`: it asks for an ACK; `again`:
    /// it is a retransmission. Only packets asking for an ACK are timed, and a retransmission
    /// only when no earlier copy can still be acknowledged (see [`Self::on_go_back`]).
    pub fn on_send(&mut self, now: Instant, end: u32, ack_req: bool, again: bool) {
        if !again {
            self.unsure = None;
        }
        let unsure = again && self.unsure.is_some_and(|u| psn::before(psn::add(end, psn::MASK), u));
        if ack_req && !unsure && self.timed.is_none() {
            self.timed = Some(Timed { end, sent: now, delivered: self.delivered });
        }
    }

    /// Sending goes back to PSN `from`, packets up to `max_sent` (exclusive) having been sent.
    /// The timed packet, if it is sent again, is no longer timed. `nak`: a PSN sequence NAK
    /// asked for it, so the responder discarded every first copy from `from` on and an ACK
    /// there can only be for a new copy, which may be timed. After a timer or probe the first
    /// copies may still arrive, and (Karn) no copy below `max_sent` is timed.
    pub fn on_go_back(&mut self, from: u32, max_sent: u32, nak: bool) {
        if self.timed.is_some_and(|t| !psn::before(psn::add(t.end, psn::MASK), from)) {
            self.timed = None;
        }
        if !nak {
            self.unsure = Some(max_sent);
        }
    }

    /// `una` moved forward by `acked` packets to `una` at `now`.
    pub fn on_ack(&mut self, now: Instant, una: u32, acked: u32) {
        self.delivered += u64::from(acked);
        self.backoff = 0;
        let Some(t) = self.timed else { return };
        if psn::before(una, t.end) {
            return;
        }
        self.timed = None;
        let rtt = now.saturating_duration_since(t.sent).max(Duration::from_nanos(1));
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(s) => {
                let err = s.abs_diff(rtt);
                self.rttvar = (self.rttvar * 3 + err) / 4;
                self.srtt = Some((s * 7 + rtt) / 8);
            }
        }
        let rate = (self.delivered - t.delivered) as f64 / rtt.as_secs_f64();
        let k = self.samples % FILTER;
        self.rtts[k] = rtt;
        self.rates[k] = rate;
        self.samples += 1;
    }

    /// Smoothed round trip (`None` before the first sample).
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// Smallest recent round trip and largest recent delivery rate (packets/s).
    fn filters(&self) -> Option<(Duration, f64)> {
        let n = self.samples.min(FILTER);
        if n == 0 {
            return None;
        }
        let min_rtt = self.rtts[..n].iter().copied().min()?;
        let max_rate = self.rates[..n].iter().copied().fold(0.0, f64::max);
        Some((min_rtt, max_rate))
    }

    /// Packets that may be in flight: `GAIN` x BDP within `floor.max(MIN_WINDOW)..=max`
    /// ([`INIT_WINDOW`], or `floor` if larger, before the first sample).
    pub fn window(&self, max: u32, floor: u32) -> u32 {
        let max = max.max(1);
        let floor = floor.max(MIN_WINDOW).min(max);
        let Some((rtt, rate)) = self.filters() else { return INIT_WINDOW.max(floor).min(max) };
        let bdp = GAIN * rate * rtt.as_secs_f64();
        let w = if bdp.is_finite() { bdp.ceil().min(f64::from(u32::MAX)) as u32 } else { max };
        w.clamp(floor, max)
    }

    /// How long without progress before a loss probe (`None` before the first sample).
    pub fn probe_timeout(&self) -> Option<Duration> {
        let s = self.srtt?;
        let base = (s + self.rttvar * 4).max(MIN_PROBE);
        Some(base * (1u32 << self.backoff.min(MAX_BACKOFF)))
    }

    /// A probe fired: the next one waits twice as long until progress.
    pub fn on_probe(&mut self) {
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(us: u64) -> Instant {
        Instant::from_micros(us)
    }

    #[test]
    fn no_sample_no_limit() {
        let p = PathEstimator::default();
        assert_eq!(p.window(1024, 0), INIT_WINDOW);
        assert_eq!(p.window(10, 0), 10);
        assert_eq!(p.window(1024, 300), 300);
        assert_eq!(p.probe_timeout(), None);
    }

    #[test]
    fn window_is_twice_the_bdp_within_bounds() {
        let mut p = PathEstimator::default();
        // Packets 0..100 sent over 100 us, 1 per us; packet 0 is timed; its ACK after 50 us
        // comes when 50 have been acknowledged.
        p.on_send(at(0), 1, true, false);
        p.on_send(at(1), 2, true, false); // only one timed at a time
        p.on_ack(at(50), 50, 50);
        // Rate 50 / 50 us = 1 packet/us, RTT 50 us: BDP 50, window 100.
        assert_eq!(p.window(1024, 0), 100);
        assert_eq!(p.window(64, 0), 64);
        assert_eq!(p.window(1024, 200), 200);
        assert_eq!(p.srtt(), Some(Duration::from_micros(50)));
        // A slow path: never below the minimum.
        let mut q = PathEstimator::default();
        q.on_send(at(0), 1, true, false);
        q.on_ack(at(1000), 1, 1);
        assert_eq!(q.window(1024, 0), MIN_WINDOW);
    }

    #[test]
    fn karn_discards_a_sample_sent_again() {
        let mut p = PathEstimator::default();
        // Going back past the timed packet (PSN 9) keeps the sample...
        p.on_send(at(0), 10, true, false);
        p.on_go_back(10, 10, false);
        p.on_ack(at(50), 10, 10);
        assert_eq!(p.srtt(), Some(Duration::from_micros(50)));
        // ...going back to it or before drops it.
        let mut q = PathEstimator::default();
        q.on_send(at(0), 10, true, false);
        q.on_go_back(9, 10, false);
        q.on_ack(at(500), 10, 10);
        assert_eq!(q.srtt(), None);
        assert_eq!(q.window(1024, 0), INIT_WINDOW);
        // After a timer or probe (not a NAK) its copy sent again is not timed either...
        q.on_send(at(600), 10, true, true);
        q.on_ack(at(700), 10, 10);
        assert_eq!(q.srtt(), None);
        // ...but after a NAK the first copies were discarded: the new copy is timed.
        let mut r = PathEstimator::default();
        r.on_send(at(0), 10, true, false);
        r.on_go_back(5, 10, true);
        r.on_send(at(100), 10, true, true);
        r.on_ack(at(130), 10, 10);
        assert_eq!(r.srtt(), Some(Duration::from_micros(30)));
    }

    #[test]
    fn probe_timeout_backs_off_and_resets_on_progress() {
        let mut p = PathEstimator::default();
        p.on_send(at(0), 1, true, false);
        p.on_ack(at(1000), 1, 1);
        // srtt 1 ms, rttvar 0.5 ms: 3 ms.
        assert_eq!(p.probe_timeout(), Some(Duration::from_micros(3000)));
        p.on_probe();
        assert_eq!(p.probe_timeout(), Some(Duration::from_micros(6000)));
        for _ in 0..20 {
            p.on_probe();
        }
        assert_eq!(p.probe_timeout(), Some(Duration::from_micros(3000 << MAX_BACKOFF)));
        p.on_ack(at(90_000), 2, 1);
        assert_eq!(p.probe_timeout(), Some(Duration::from_micros(3000)));
        // Short round trips still wait at least MIN_PROBE.
        let mut q = PathEstimator::default();
        q.on_send(at(0), 1, true, false);
        q.on_ack(at(5), 1, 1);
        assert_eq!(q.probe_timeout(), Some(MIN_PROBE));
    }

    #[test]
    fn acks_before_the_timed_packet_do_not_sample() {
        let mut p = PathEstimator::default();
        p.on_send(at(0), 0x00ff_fffe, true, false); // across the PSN wrap
        p.on_ack(at(10), 0x00ff_fffd, 3);
        assert_eq!(p.srtt(), None);
        p.on_ack(at(20), 0x00ff_ffff, 2);
        assert_eq!(p.srtt(), Some(Duration::from_micros(20)));
    }
}
