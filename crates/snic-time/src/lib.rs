//! snic's clock type, defined once at the bottom of the crate graph.
//!
//! Engines never read the system clock: they are handed an [`Instant`] by whoever drives them.
//! An `Instant` is a count of nanoseconds since an arbitrary origin (the start of the process for
//! [`MonotonicClock`], zero for a [`SimClock`]), so the testbed's time is fully virtual and runs
//! are reproducible. Durations are `core::time::Duration`.
//!
//! This crate is not a timer wheel or a scheduler: it only says what time it is.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};
use core::time::Duration;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A point in time, in nanoseconds since the clock's origin.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The clock's origin.
    pub const ZERO: Instant = Instant(0);
    /// The latest representable instant; useful as "never".
    pub const MAX: Instant = Instant(u64::MAX);

    /// An instant `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }
    /// An instant `micros` microseconds after the origin (saturating).
    pub const fn from_micros(micros: u64) -> Self {
        Instant(micros.saturating_mul(1_000))
    }
    /// An instant `millis` milliseconds after the origin (saturating).
    pub const fn from_millis(millis: u64) -> Self {
        Instant(millis.saturating_mul(1_000_000))
    }
    /// An instant `secs` seconds after the origin (saturating).
    pub const fn from_secs(secs: u64) -> Self {
        Instant(secs.saturating_mul(1_000_000_000))
    }
    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// Time elapsed from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
    /// `self + d`, or `None` on overflow.
    pub fn checked_add(self, d: Duration) -> Option<Instant> {
        let n = u64::try_from(d.as_nanos()).ok()?;
        self.0.checked_add(n).map(Instant)
    }
    /// `self + d`, saturating at [`Instant::MAX`].
    pub fn saturating_add(self, d: Duration) -> Instant {
        self.checked_add(d).unwrap_or(Instant::MAX)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturating: time never wraps.
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating: an earlier minus a later instant is zero.
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:09}s", self.0 / 1_000_000_000, self.0 % 1_000_000_000)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Something that can tell the time.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Instant;
}

/// The real monotonic clock, origin at construction. Only the I/O layer uses it.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: std::time::Instant,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        MonotonicClock { origin: std::time::Instant::now() }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Instant {
        let d = self.origin.elapsed();
        Instant(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

/// A simulated clock: time moves only when told to. Clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct SimClock {
    nanos: Arc<AtomicU64>,
}

impl SimClock {
    /// A simulated clock at [`Instant::ZERO`].
    pub fn new() -> Self {
        Self::default()
    }
    /// Move time forward by `d` (saturating).
    pub fn advance(&self, d: Duration) {
        let n = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // fetch_update never fails with a closure that always returns Some.
        let _ = self
            .nanos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| Some(cur.saturating_add(n)));
    }
    /// Jump to `t` if it is later than now; never moves time backwards.
    pub fn advance_to(&self, t: Instant) {
        self.nanos.fetch_max(t.0, Ordering::AcqRel);
    }
}

impl Clock for SimClock {
    fn now(&self) -> Instant {
        Instant(self.nanos.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_secs(1);
        assert_eq!((t + Duration::from_millis(5)).as_nanos(), 1_005_000_000);
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(t.checked_add(Duration::from_secs(u64::MAX)), None);
        assert_eq!(format!("{t:?}"), "1.000000000s");
    }

    #[test]
    fn sim_clock_moves_only_forward() {
        let c = SimClock::new();
        let c2 = c.clone();
        c.advance(Duration::from_micros(3));
        assert_eq!(c2.now(), Instant::from_micros(3));
        c.advance_to(Instant::from_micros(1));
        assert_eq!(c.now(), Instant::from_micros(3));
        c.advance_to(Instant::from_millis(1));
        assert_eq!(c.now(), Instant::from_millis(1));
    }

    #[test]
    fn monotonic_clock_follows_real_time() {
        let c = MonotonicClock::new();
        let a = c.now();
        std::thread::sleep(Duration::from_millis(1));
        let b = c.now();
        // `sleep` waits at least the time asked; the clock must have seen all of it.
        assert!(b - a >= Duration::from_millis(1), "{a:?} -> {b:?}");
        // An hour would mean a unit error (the clock counts nanoseconds).
        assert!(b - a < Duration::from_secs(3600), "{a:?} -> {b:?}");
    }
}
