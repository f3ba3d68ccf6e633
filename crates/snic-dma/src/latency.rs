//! [`LatencyHist`]: a latency histogram with fixed, log-spaced buckets, for the engines' users
//! to time what they want (DMA doorbell to completion, RDMA work request to completion). It
//! reads no clock: callers hand it durations. An observation is one bucket search over
//! [`BOUNDS_NS`] and three adds; nothing allocates.

/// Upper bounds of the buckets, in nanoseconds (250 ns to 10 s, 1-2.5-5 steps); a last bucket
/// without bound takes everything above.
pub const BOUNDS_NS: [u64; 24] = [
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Buckets of a [`LatencyHist`]: one per bound and one above the last.
pub const BUCKETS: usize = BOUNDS_NS.len() + 1;

/// A latency histogram: per-bucket counts (not cumulative), the sum and the count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencyHist {
    counts: [u64; BUCKETS],
    sum_ns: u64,
    count: u64,
}

impl Default for LatencyHist {
    fn default() -> Self {
        LatencyHist { counts: [0; BUCKETS], sum_ns: 0, count: 0 }
    }
}

impl LatencyHist {
    /// Count one latency of `ns` nanoseconds: the first bucket whose bound is at least `ns`.
    #[inline]
    pub fn observe_ns(&mut self, ns: u64) {
        let i = BOUNDS_NS.partition_point(|&b| b < ns);
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.count += 1;
    }

    /// Count one latency.
    #[inline]
    pub fn observe(&mut self, d: std::time::Duration) {
        self.observe_ns(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Add `other`'s observations to these.
    pub fn merge(&mut self, other: &LatencyHist) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a += b;
        }
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.count += other.count;
    }

    /// Observations.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of every observation, in nanoseconds (saturating).
    pub fn sum_ns(&self) -> u64 {
        self.sum_ns
    }

    /// Per-bucket counts (not cumulative), in the order of [`BOUNDS_NS`], then the count above
    /// the last bound.
    pub fn counts(&self) -> &[u64; BUCKETS] {
        &self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_whose_bound_holds_them() {
        let mut h = LatencyHist::default();
        for ns in [0, 250, 251, 999_999, 1_000_000, 20_000_000_000] {
            h.observe_ns(ns);
        }
        let c = h.counts();
        assert_eq!(c[0], 2, "0 and 250 are <= 250 ns");
        assert_eq!(c[1], 1, "251 ns");
        assert_eq!(c[11], 2, "999 999 and 1 000 000 ns are <= 1 ms");
        assert_eq!(c[BUCKETS - 1], 1, "above 10 s");
        assert_eq!(c.iter().sum::<u64>(), 6);
        assert_eq!(h.count(), 6);
        assert_eq!(h.sum_ns(), 250 + 251 + 999_999 + 1_000_000 + 20_000_000_000);
        let mut m = LatencyHist::default();
        m.merge(&h);
        m.merge(&h);
        assert_eq!(m.count(), 12);
        assert_eq!(m.counts()[0], 4);
        assert!(BOUNDS_NS.windows(2).all(|w| w[0] < w[1]));
    }
}
