//! Driving a testbed with the real clock: the same devices (NICs with their engines, hosts'
//! work between steps) on real ports, with the testbed's clock following the time elapsed
//! since [`RealClock::start`].
//!
//! A step lets the testbed catch up with the real clock ([`Testbed::run_until`] the time now,
//! or the caller's horizon if that comes first: every deadline passed meanwhile is run, in
//! order), then sleeps on the real ports'
//! descriptors until a frame arrives, the next deadline, the caller's horizon or a short
//! bound, whichever comes first, and catches up again. Nothing spins: an idle real run sleeps
//! in `poll(2)`.
//!
//! Real ports report no deadlines, so "idle" means something else than on the simulated
//! clock: no deadline anywhere and no frame received for [`RealClock::quiet`].

use crate::{Step, Testbed, TestbedError};
use core::time::Duration;
use snic_time::Instant;
use std::os::fd::RawFd;

/// The real clock of a testbed (see the module doc).
#[derive(Debug)]
pub struct RealClock {
    start: std::time::Instant,
    fds: Vec<RawFd>,
    max_wait: Duration,
    quiet: Duration,
    last_activity: Instant,
}

impl RealClock {
    /// A clock starting now, sleeping on `fds` (the real ports' descriptors; ports of the
    /// testbed that live at least as long as the clock is used).
    pub fn start(fds: Vec<RawFd>) -> RealClock {
        RealClock {
            start: std::time::Instant::now(),
            fds,
            max_wait: Duration::from_millis(2),
            quiet: Duration::from_millis(20),
            last_activity: Instant::ZERO,
        }
    }

    /// Idle after this long with no deadline and no frame received (default 20 ms).
    pub fn with_quiet(mut self, quiet: Duration) -> Self {
        self.quiet = quiet;
        self
    }

    /// How long idle takes to declare (see [`RealClock::with_quiet`]).
    pub fn quiet(&self) -> Duration {
        self.quiet
    }

    /// Whether nothing is pending in `tb` and no frame arrived for [`RealClock::quiet`].
    pub fn is_quiet(&self, tb: &Testbed) -> bool {
        tb.poll_timeout().is_none()
            && self.now().saturating_duration_since(self.last_activity) >= self.quiet
    }

    /// Time elapsed since the clock started, as a testbed instant.
    pub fn now(&self) -> Instant {
        let ns = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        Instant::from_nanos(ns)
    }

    /// Catch `tb` up with the real clock (never moving it backwards), but not past `horizon`.
    pub fn catch_up(
        &mut self,
        tb: &mut Testbed,
        horizon: Instant,
    ) -> Result<Instant, TestbedError> {
        let now = self.now().min(horizon).max(tb.now());
        tb.run_until(now)?;
        Ok(now)
    }

    /// One real step (see the module doc): catch up, sleep until a frame arrives, the next
    /// deadline or `horizon` (at most a couple of milliseconds), catch up again. The testbed's
    /// clock never passes `horizon` (the caller's next event, such as an operation that must
    /// start before later frames are injected): it waits there, behind the real clock, until
    /// the caller moves the horizon on. Returns the time reached, or [`Step::Idle`] once
    /// nothing is pending and nothing arrived for [`RealClock::quiet`] (and `horizon` has
    /// passed or is unbounded).
    pub fn step_until(&mut self, tb: &mut Testbed, horizon: Instant) -> Result<Step, TestbedError> {
        let now = self.catch_up(tb, horizon)?;
        let deadline = tb.poll_timeout();
        let real = self.now();
        let until = [Some(horizon), deadline, Some(real.saturating_add(self.max_wait))]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(real);
        let mut arrived = false;
        if until > real {
            let wait = until.saturating_duration_since(real);
            arrived = snic_io::sys::poll::wait_readable(&self.fds, wait).unwrap_or(false);
        }
        let now = self.catch_up(tb, horizon)?.max(now);
        if arrived || deadline.is_some() {
            self.last_activity = self.now();
        }
        if self.is_quiet(tb) && (horizon == Instant::MAX || horizon <= now) {
            return Ok(Step::Idle);
        }
        Ok(Step::Advanced(now))
    }

    /// Step until `done` holds (checked after every step) or `limit` (real time since the
    /// start) passes. Returns whether `done` held.
    pub fn run_while(
        &mut self,
        tb: &mut Testbed,
        limit: Instant,
        mut done: impl FnMut(&mut Testbed) -> bool,
    ) -> Result<bool, TestbedError> {
        loop {
            if done(tb) {
                return Ok(true);
            }
            if self.now() >= limit {
                return Ok(false);
            }
            self.step_until(tb, limit)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use snic_io::script::ScriptPort;
    use snic_pipeline::Pipeline;

    #[test]
    fn the_testbed_follows_the_real_clock_and_frames_come_due_on_it() {
        let mut tb = Testbed::new();
        let (port, h) = ScriptPort::new("in");
        let (out, sent) = ScriptPort::new("out");
        h.push(Instant::from_millis(20), vec![0xff; 60]);
        let p = Pipeline::from_strs(&["l2fwd:0=1"]).unwrap();
        tb.add_node("n", p, vec![Box::new(port), Box::new(out)]);
        let mut clock = RealClock::start(Vec::new()).with_quiet(Duration::from_millis(10));
        let t0 = std::time::Instant::now();
        // Not before its time ...
        clock.run_while(&mut tb, Instant::from_millis(10), |_| sent.sent_count() > 0).unwrap();
        assert_eq!(sent.sent_count(), 0);
        // ... and soon after it.
        let ok = clock.run_while(&mut tb, Instant::from_secs(2), |_| sent.sent_count() > 0);
        assert_eq!(ok, Ok(true));
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(20) && took < Duration::from_secs(1), "{took:?}");
        let at = sent.take_sent()[0].0;
        assert!(at >= Instant::from_millis(20) && at < Instant::from_millis(500), "{at}");
        // Nothing pending any more: idle after the quiet time.
        let mut steps = 0;
        while clock.step_until(&mut tb, Instant::MAX).unwrap() != Step::Idle {
            steps += 1;
            assert!(steps < 10_000, "never idle");
        }
        assert!(tb.now() >= at);
    }
}
