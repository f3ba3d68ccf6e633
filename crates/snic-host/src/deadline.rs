//! [`Deadline`]: the bound of a busy-wait on shared memory (queue and channel completions,
//! kernel statuses).

use std::time::{Duration, Instant};

use snic_hostif::shm::EventFd;

use crate::error::{HostError, Result};

/// How long [`Deadline::pause_backoff`] spins before it sleeps between polls.
const BACKOFF_AFTER: Duration = Duration::from_micros(50);

/// A busy-wait's deadline. Between polls of shared memory it spins, yielding the CPU now and
/// then (snic's workers may share it), or sleeps on an interrupt eventfd. A spinning waiter
/// reads the clock only when it yields: a clock read costs as much as a poll, so reading it
/// every turn would slow down the very wait it bounds. A timeout therefore fires at most one
/// yield period (64 spins) late.
#[derive(Debug)]
pub(crate) struct Deadline {
    start: Instant,
    timeout: Duration,
    spins: u32,
}

impl Deadline {
    /// A deadline `timeout` from now.
    pub(crate) fn new(timeout: Duration) -> Deadline {
        Deadline { start: Instant::now(), timeout, spins: 0 }
    }

    /// Time left; [`HostError::Timeout`] when none.
    pub(crate) fn left(&self) -> Result<Duration> {
        let left = self.timeout.saturating_sub(self.start.elapsed());
        if left.is_zero() { Err(HostError::Timeout) } else { Ok(left) }
    }

    /// One pause between polls of something that may take long (a lookaside kernel): spin
    /// for the first [`BACKOFF_AFTER`], then sleep a sixteenth of the time waited so far
    /// (10 us .. 1 ms). A kernel of micro-seconds is seen at once; a long one costs the
    /// waiter almost no CPU (on a busy machine the spinning waiter would take it from the
    /// worker running the kernel) and is seen at most ~6 % late.
    pub(crate) fn pause_backoff(&mut self) -> Result<()> {
        let waited = self.start.elapsed();
        if waited < BACKOFF_AFTER {
            return self.pause(None);
        }
        let left = self.left()?;
        let nap = (waited / 16).clamp(Duration::from_micros(10), Duration::from_millis(1));
        std::thread::sleep(nap.min(left));
        Ok(())
    }

    /// One pause between polls: sleep on `irq` (at most the time left), or spin.
    pub(crate) fn pause(&mut self, irq: Option<&EventFd>) -> Result<()> {
        if let Some(e) = irq {
            e.wait(Some(self.left()?))?;
            return Ok(());
        }
        self.spins = self.spins.wrapping_add(1);
        if self.spins.is_multiple_of(64) {
            self.left()?;
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
        Ok(())
    }
}
