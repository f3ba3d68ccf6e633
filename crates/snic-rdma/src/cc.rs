//! Congestion control: a DCQCN-style reaction point (the sender's rate limiter). The responder
//! (notification point) sends a CNP when it receives a CE-marked packet; on a CNP the sender
//! cuts its rate by `alpha / 2`, and recovers in timed stages (fast recovery toward the target
//! rate, then additive increase). Model: Zhu et al., "Congestion Control for Large-Scale RDMA
//! Deployments" (SIGCOMM 2015).
//!
//! Pacing: after a packet of `len` bytes leaves at `t`, the next may leave at
//! `t + len * 8 / rate`. A QP that has never seen a CNP and has no configured line rate is not
//! paced at all (the common case on a quiet network costs nothing).

use core::time::Duration;

use snic_time::Instant;

/// DCQCN parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CcConfig {
    /// React to CNPs and pace at all (when off the QP is never paced).
    pub enabled: bool,
    /// Starting and highest rate, bits per second; 0 means unpaced until the first CNP, then
    /// paced from `initial_after_cnp_bps`.
    pub line_rate_bps: u64,
    /// Rate to start from when the first CNP arrives on an unpaced QP.
    pub initial_after_cnp_bps: u64,
    /// Lowest rate.
    pub min_rate_bps: u64,
    /// EWMA gain of alpha (DCQCN's g, 1/256 default).
    pub g: f64,
    /// Alpha update / rate increase timer.
    pub timer: Duration,
    /// Additive increase step, bits per second.
    pub rai_bps: u64,
    /// Minimum gap between two CNPs the responder sends for one QP.
    pub cnp_interval: Duration,
}

impl Default for CcConfig {
    fn default() -> Self {
        CcConfig {
            enabled: true,
            line_rate_bps: 0,
            initial_after_cnp_bps: 40_000_000_000,
            min_rate_bps: 10_000_000,
            g: 1.0 / 256.0,
            timer: Duration::from_micros(55),
            rai_bps: 40_000_000,
            cnp_interval: Duration::from_micros(50),
        }
    }
}

/// Fast-recovery periods after a cut before additive increase starts (DCQCN's F).
pub const FAST_RECOVERY_PERIODS: u32 = 5;

/// Rate state of one QP (reaction point).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CcState {
    /// Current rate RC, bits per second; 0 while unpaced.
    rc: f64,
    /// Target rate RT, bits per second.
    rt: f64,
    /// DCQCN's alpha: the estimate of how congested the path is (0..=1).
    alpha: f64,
    /// Earliest time the next packet may leave (meaningful while paced).
    #[serde(with = "crate::export::instant")]
    next_send: Instant,
    /// Next alpha-update / rate-increase tick; `None` while no recovery is under way.
    #[serde(with = "crate::export::opt_instant")]
    timer_at: Option<Instant>,
    /// When the timer stopped after a recovery: alpha decays lazily from then on.
    #[serde(with = "crate::export::opt_instant")]
    alpha_since: Option<Instant>,
    /// A CNP arrived in the current timer period.
    cnp_in_period: bool,
    /// Increase periods since the last cut.
    stage: u32,
}

impl Default for CcState {
    fn default() -> Self {
        CcState {
            rc: 0.0,
            rt: 0.0,
            alpha: 1.0,
            next_send: Instant::ZERO,
            timer_at: None,
            alpha_since: None,
            cnp_in_period: false,
            stage: 0,
        }
    }
}

/// The highest rate a QP recovers to.
fn max_rate(cfg: &CcConfig) -> f64 {
    let m = if cfg.line_rate_bps > 0 { cfg.line_rate_bps } else { cfg.initial_after_cnp_bps };
    m.max(cfg.min_rate_bps).max(1) as f64
}

impl CcState {
    /// Move every instant through `f` (an import onto another clock).
    pub(crate) fn retime(&mut self, f: &dyn Fn(Instant) -> Instant) {
        self.next_send = f(self.next_send);
        self.timer_at = self.timer_at.map(f);
        self.alpha_since = self.alpha_since.map(f);
    }

    /// Whether a packet may leave at `now` (pacing).
    pub fn may_send(&self, now: Instant) -> bool {
        self.rc <= 0.0 || now >= self.next_send
    }

    /// Account a packet of `len` bytes sent at `now`.
    pub fn on_send(&mut self, cfg: &CcConfig, now: Instant, len: usize) {
        if !cfg.enabled {
            return;
        }
        if self.rc <= 0.0 {
            if cfg.line_rate_bps == 0 {
                return;
            }
            // A configured line rate paces from the first packet on.
            self.rc = cfg.line_rate_bps as f64;
            self.rt = self.rc;
        }
        let ns = (len as f64 * 8.0 * 1e9 / self.rc).ceil();
        // A sender polled late does not earn a burst: spacing counts from the actual send.
        self.next_send = now + Duration::from_nanos(ns as u64);
    }

    /// A CNP arrived: cut the rate (RT = RC, RC = RC * (1 - alpha / 2)) and raise alpha.
    pub fn on_cnp(&mut self, cfg: &CcConfig, now: Instant) {
        if !cfg.enabled {
            return;
        }
        if self.rc <= 0.0 {
            self.rc = if cfg.line_rate_bps > 0 {
                cfg.line_rate_bps as f64
            } else {
                cfg.initial_after_cnp_bps.max(1) as f64
            };
            self.rt = self.rc;
        }
        if self.timer_at.is_none() {
            if let Some(since) = self.alpha_since.take() {
                // Alpha decayed while no timer ran: apply the missed periods now.
                let t = cfg.timer.as_nanos().max(1);
                let periods = i32::try_from((now - since).as_nanos() / t).unwrap_or(i32::MAX);
                self.alpha *= (1.0 - cfg.g).powi(periods);
            }
            self.timer_at = Some(now + cfg.timer);
        }
        self.rt = self.rc;
        self.rc = (self.rc * (1.0 - self.alpha / 2.0)).max(cfg.min_rate_bps as f64);
        self.alpha = ((1.0 - cfg.g) * self.alpha + cfg.g).min(1.0);
        self.cnp_in_period = true;
        self.stage = 0;
    }

    /// The earliest time the next packet may leave (`None` while unpaced).
    pub fn next_send(&self) -> Option<Instant> {
        (self.rc > 0.0).then_some(self.next_send)
    }

    /// The next alpha-update / rate-increase tick (`None` when no recovery is under way).
    pub fn timer_deadline(&self) -> Option<Instant> {
        self.timer_at
    }

    /// The earliest time the next packet may leave, or a timer (alpha / increase) deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [self.next_send(), self.timer_at].into_iter().flatten().min()
    }

    /// Run timers due at `now`: one alpha update and one increase step per elapsed period.
    pub fn handle_timeout(&mut self, cfg: &CcConfig, now: Instant) {
        let max = max_rate(cfg);
        while let Some(t) = self.timer_at {
            if t > now {
                break;
            }
            if self.cnp_in_period {
                // A cut happened in this period: no increase, alpha already raised.
                self.cnp_in_period = false;
            } else {
                self.alpha *= 1.0 - cfg.g;
                self.stage += 1;
                if self.stage > FAST_RECOVERY_PERIODS {
                    self.rt = (self.rt + cfg.rai_bps as f64).min(max);
                }
                self.rc = ((self.rt + self.rc) / 2.0).min(max);
            }
            if self.rc >= max * 0.999 {
                // Recovered: stop ticking (alpha keeps decaying lazily until the next CNP).
                self.rc = if cfg.line_rate_bps > 0 { max } else { 0.0 };
                self.rt = self.rc;
                self.timer_at = None;
                self.alpha_since = Some(t);
                break;
            }
            self.timer_at = Some(t + cfg.timer.max(Duration::from_nanos(1)));
        }
    }

    /// Current rate in bits per second (0: unpaced).
    pub fn rate_bps(&self) -> u64 {
        self.rc.max(0.0) as u64
    }

    /// Target rate RT in bits per second.
    pub fn target_bps(&self) -> u64 {
        self.rt.max(0.0) as u64
    }

    /// DCQCN's alpha.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> CcConfig {
        CcConfig {
            enabled: true,
            line_rate_bps: 0,
            initial_after_cnp_bps: 10_000_000_000,
            min_rate_bps: 100_000_000,
            g: 1.0 / 16.0,
            timer: Duration::from_micros(50),
            rai_bps: 500_000_000,
            cnp_interval: Duration::from_micros(50),
        }
    }

    #[test]
    fn unpaced_until_first_cnp() {
        let c = cfg();
        let mut s = CcState::default();
        for i in 0..100 {
            assert!(s.may_send(Instant::from_nanos(i)));
            s.on_send(&c, Instant::from_nanos(i), 4096);
        }
        assert_eq!(s.rate_bps(), 0);
        assert_eq!(s.poll_timeout(), None);
    }

    #[test]
    fn rate_falls_on_cnp_and_recovers() {
        let c = cfg();
        let mut s = CcState::default();
        let t0 = Instant::from_micros(10);
        s.on_cnp(&c, t0);
        // alpha starts at 1: the first cut halves the rate.
        assert_eq!(s.rate_bps(), 5_000_000_000);
        assert_eq!(s.target_bps(), 10_000_000_000);
        let r1 = s.rate_bps();
        s.on_cnp(&c, t0);
        assert!(s.rate_bps() < r1);
        let low = s.rate_bps();
        // Recovery: every period raises the rate, until it is back to the top and stops.
        let mut t = t0;
        let mut last = low;
        let mut rose = 0;
        for _ in 0..10_000 {
            let Some(d) = s.timer_deadline() else { break };
            t = d;
            s.handle_timeout(&c, t);
            if s.rate_bps() > last {
                rose += 1;
            }
            assert!(s.rate_bps() >= last || s.rate_bps() == 0);
            last = s.rate_bps();
        }
        assert!(rose > FAST_RECOVERY_PERIODS, "rose {rose} times");
        assert_eq!(s.timer_deadline(), None, "recovery never finished");
        // Back to unpaced (no line rate configured).
        assert_eq!(s.rate_bps(), 0);
        assert!(s.may_send(t));
    }

    #[test]
    fn alpha_decays_without_cnps() {
        let c = cfg();
        let mut s = CcState::default();
        s.on_cnp(&c, Instant::ZERO);
        let a0 = s.alpha();
        let d = s.timer_deadline().unwrap();
        s.handle_timeout(&c, d); // the period of the CNP: no decay
        let d = s.timer_deadline().unwrap();
        s.handle_timeout(&c, d);
        assert!(s.alpha() < a0);
        assert!((s.alpha() - a0 * (1.0 - c.g)).abs() < 1e-12);
    }

    #[test]
    fn never_below_min_rate() {
        let c = cfg();
        let mut s = CcState::default();
        for _ in 0..1000 {
            s.on_cnp(&c, Instant::ZERO);
            assert!(s.rate_bps() >= c.min_rate_bps);
        }
        assert_eq!(s.rate_bps(), c.min_rate_bps);
    }

    #[test]
    fn pacing_spacing_matches_rate() {
        let mut c = cfg();
        c.line_rate_bps = 1_000_000_000; // 1 Gb/s: 1000 bytes take 8 us
        let mut s = CcState::default();
        let t0 = Instant::from_micros(100);
        assert!(s.may_send(t0));
        s.on_send(&c, t0, 1000);
        assert_eq!(s.rate_bps(), 1_000_000_000);
        assert!(!s.may_send(t0 + Duration::from_nanos(7_999)));
        assert!(s.may_send(t0 + Duration::from_micros(8)));
        assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_micros(8)));
        // After a CNP (alpha 1) the rate halves and the spacing doubles.
        let t1 = t0 + Duration::from_micros(8);
        s.on_cnp(&c, t1);
        assert_eq!(s.rate_bps(), 500_000_000);
        s.on_send(&c, t1, 1000);
        assert_eq!(s.next_send(), Some(t1 + Duration::from_micros(16)));
    }

    #[test]
    fn disabled_never_paces() {
        let mut c = cfg();
        c.enabled = false;
        c.line_rate_bps = 1_000_000;
        let mut s = CcState::default();
        s.on_cnp(&c, Instant::ZERO);
        s.on_send(&c, Instant::ZERO, 10_000);
        assert!(s.may_send(Instant::ZERO));
        assert_eq!(s.rate_bps(), 0);
        assert_eq!(s.poll_timeout(), None);
    }
}
