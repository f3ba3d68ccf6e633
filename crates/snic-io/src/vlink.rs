//! Virtual links: an in-process wire between two endpoints, with seeded impairments, on the
//! simulated clock.
//!
//! [`Link`] is one direction of a link and is sans-IO: [`Link::handle_send`] takes a frame and
//! the current time, [`Link::poll_timeout`] says when the next frame becomes deliverable and
//! [`Link::poll_deliver`] hands over every frame due by `now`. Its impairments, all drawn from a
//! ChaCha RNG seeded at construction (so the same seed gives the same run):
//!
//! - **rate**: a frame occupies the wire for `len * 8 / rate` seconds (serialisation delay);
//!   frames waiting for the wire sit in a queue of at most `queue_limit` frames, and a frame that
//!   finds it full is a counted tail drop;
//! - **loss**: a frame is lost with probability `loss`;
//! - **delay + jitter**: propagation delay plus a uniform extra in `[0, jitter)`; without
//!   reordering, jitter never lets a frame overtake an earlier one;
//! - **reordering**: with probability `reorder` a frame is held back an extra `reorder_delay`,
//!   letting later frames pass it;
//! - **duplication**: with probability `duplicate` a frame is delivered twice;
//! - **ECN marking**: on a rate-limited link with an `ecn_threshold`, an ECN-capable IPv4 or
//!   IPv6 frame (ECT(0) or ECT(1)) that finds more than that many frames queued is marked CE
//!   (the IPv4 header checksum fixed), as a switch port's RED/ECN threshold does.
//!
//! A link can be cut and restored, and its impairments changed, while it runs
//! ([`VLinkPort::control`], [`VLinkControl`]): a cut link loses every frame offered to it
//! (counted as `lost`; frames already on the wire still arrive).
//! [`VLink::pair`] joins two directions into two endpoints, [`VLinkPort`]s, usable as `Port`s.
//! Stored frames are kept in recycled buffers.

use crate::port::{Port, PortCaps, PortCounters};
use core::cmp::{Ordering, Reverse};
use core::time::Duration;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use snic_pipeline::Batch;
use snic_time::Instant;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

/// Impairments of one direction of a link. The default is a perfect, instant wire.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// Probability a frame is lost, in `[0, 1]`.
    pub loss: f64,
    /// Probability a frame is delivered twice, in `[0, 1]`.
    pub duplicate: f64,
    /// Probability a frame is held back by `reorder_delay`, in `[0, 1]`.
    pub reorder: f64,
    /// Extra delay of a reordered frame.
    pub reorder_delay: Duration,
    /// Propagation delay.
    pub delay: Duration,
    /// Uniform extra delay in `[0, jitter)`.
    pub jitter: Duration,
    /// Line rate in bits per second; `0` means unlimited (no serialisation delay, no queue).
    pub rate_bps: u64,
    /// Most frames waiting for the wire (rate-limited links only).
    pub queue_limit: usize,
    /// Mark CE on ECN-capable frames that find more than this many frames queued
    /// (rate-limited links only); `None`: never.
    pub ecn_threshold: Option<usize>,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(100),
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            rate_bps: 0,
            queue_limit: 1024,
            ecn_threshold: None,
        }
    }
}

/// What happened to frames on one direction of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct LinkStats {
    /// Frames handed to the link.
    pub offered: u64,
    /// Frames delivered (duplicates included).
    pub delivered: u64,
    /// Bytes delivered.
    pub delivered_bytes: u64,
    /// Frames lost by the loss model.
    pub lost: u64,
    /// Frames dropped because the queue was full.
    pub tail_dropped: u64,
    /// Extra copies made by the duplication model.
    pub duplicated: u64,
    /// Frames held back by the reordering model.
    pub reordered: u64,
    /// Frames marked CE because the queue was above the ECN threshold.
    pub ecn_marked: u64,
}

#[derive(Debug)]
struct InFlight {
    at: Instant,
    seq: u64,
    frame: Vec<u8>,
}

impl PartialEq for InFlight {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// One direction of a virtual link (sans-IO).
#[derive(Debug)]
pub struct Link {
    cfg: LinkConfig,
    rng: ChaCha8Rng,
    busy_until: Instant,
    queue: VecDeque<Instant>,
    in_flight: BinaryHeap<Reverse<InFlight>>,
    pool: Vec<Vec<u8>>,
    last_at: Instant,
    seq: u64,
    stats: LinkStats,
    down: bool,
}

/// Set CE in the IP header of an ECN-capable (ECT(0) / ECT(1)) IPv4 or IPv6 frame, fixing the
/// IPv4 header checksum incrementally (RFC 1624). Returns whether it marked the frame.
fn mark_ce(frame: &mut [u8]) -> bool {
    if frame.len() < 14 {
        return false;
    }
    let mut off = 12;
    let mut ty = u16::from_be_bytes([frame[off], frame[off + 1]]);
    // VLAN tags (802.1Q, 802.1ad).
    while (ty == 0x8100 || ty == 0x88a8) && frame.len() >= off + 6 {
        off += 4;
        ty = u16::from_be_bytes([frame[off], frame[off + 1]]);
    }
    let ip = off + 2;
    match ty {
        0x0800 if frame.len() >= ip + 20 && frame[ip] >> 4 == 4 => {
            let tos = frame[ip + 1];
            if tos & 3 == 0 || tos & 3 == 3 {
                return false;
            }
            let old = u16::from_be_bytes([frame[ip], tos]);
            frame[ip + 1] = tos | 3;
            let new = u16::from_be_bytes([frame[ip], frame[ip + 1]]);
            let ck = u16::from_be_bytes([frame[ip + 10], frame[ip + 11]]);
            // HC' = ~(~HC + ~m + m')
            let mut sum = u32::from(!ck) + u32::from(!old) + u32::from(new);
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            frame[ip + 10..ip + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
            true
        }
        0x86dd if frame.len() >= ip + 40 && frame[ip] >> 4 == 6 => {
            let tc = ((frame[ip] & 0x0f) << 4) | (frame[ip + 1] >> 4);
            if tc & 3 == 0 || tc & 3 == 3 {
                return false;
            }
            frame[ip + 1] |= 0x30;
            true
        }
        _ => false,
    }
}

impl Link {
    /// A link with impairments `cfg` whose random choices come from `seed`.
    pub fn new(cfg: LinkConfig, seed: u64) -> Self {
        Link {
            cfg,
            rng: ChaCha8Rng::seed_from_u64(seed),
            busy_until: Instant::ZERO,
            queue: VecDeque::new(),
            in_flight: BinaryHeap::new(),
            pool: Vec::new(),
            last_at: Instant::ZERO,
            seq: 0,
            stats: LinkStats::default(),
            down: false,
        }
    }

    /// Change the impairments from now on (frames on the wire keep their delivery times).
    pub fn set_config(&mut self, cfg: LinkConfig) {
        self.cfg = cfg;
    }

    /// Cut (`true`) or restore the link: while cut, every frame offered is lost.
    pub fn set_down(&mut self, down: bool) {
        self.down = down;
    }

    /// Whether the link is cut.
    pub fn is_down(&self) -> bool {
        self.down
    }

    /// The link's counters.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// The configuration.
    pub fn config(&self) -> &LinkConfig {
        &self.cfg
    }

    /// Frames on the wire or waiting for it.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    fn stash(&mut self, at: Instant, frame: &[u8]) {
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(frame);
        self.seq += 1;
        self.in_flight.push(Reverse(InFlight { at, seq: self.seq, frame: buf }));
    }

    fn serialisation(&self, len: usize) -> Duration {
        if self.cfg.rate_bps == 0 {
            return Duration::ZERO;
        }
        let nanos = (len as u128 * 8 * 1_000_000_000).div_ceil(u128::from(self.cfg.rate_bps));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// Put a frame on the link at `now`.
    pub fn handle_send(&mut self, now: Instant, frame: &[u8]) {
        self.stats.offered += 1;
        // Always draw the same number of random values per frame, so one impairment's outcome
        // never shifts another's stream.
        let r_loss: f64 = self.rng.r#gen();
        let r_dup: f64 = self.rng.r#gen();
        let r_reorder: f64 = self.rng.r#gen();
        let r_jitter: f64 = self.rng.r#gen();
        if self.down {
            self.stats.lost += 1;
            return;
        }
        if self.cfg.rate_bps > 0 {
            while self.queue.front().is_some_and(|end| *end <= now) {
                self.queue.pop_front();
            }
            if self.queue.len() >= self.cfg.queue_limit {
                self.stats.tail_dropped += 1;
                return;
            }
        }
        let mark =
            self.cfg.rate_bps > 0 && self.cfg.ecn_threshold.is_some_and(|t| self.queue.len() > t);
        let start = now.max(self.busy_until);
        let end = start + self.serialisation(frame.len());
        if self.cfg.rate_bps > 0 {
            self.busy_until = end;
            self.queue.push_back(end);
        }
        if r_loss < self.cfg.loss {
            self.stats.lost += 1;
            return;
        }
        let jitter_ns = (self.cfg.jitter.as_nanos() as f64 * r_jitter) as u64;
        let base = end + self.cfg.delay + Duration::from_nanos(jitter_ns);
        let at = if r_reorder < self.cfg.reorder {
            self.stats.reordered += 1;
            base + self.cfg.reorder_delay
        } else {
            let at = base.max(self.last_at);
            self.last_at = at;
            at
        };
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(frame);
        if mark && mark_ce(&mut buf) {
            self.stats.ecn_marked += 1;
        }
        if r_dup < self.cfg.duplicate {
            self.stats.duplicated += 1;
            self.stash(at, &buf);
        }
        self.seq += 1;
        self.in_flight.push(Reverse(InFlight { at, seq: self.seq, frame: buf }));
    }

    /// When the next frame becomes deliverable; `None` when nothing is in flight.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.in_flight.peek().map(|Reverse(f)| f.at)
    }

    /// Move every frame due by `now` into `out` (until it is full), in delivery order, each
    /// with `meta.rx_time` set to its delivery time. Returns how many were moved.
    pub fn poll_deliver(&mut self, now: Instant, out: &mut Batch) -> usize {
        let mut n = 0;
        while !out.is_full() && self.in_flight.peek().is_some_and(|Reverse(f)| f.at <= now) {
            let Some(Reverse(f)) = self.in_flight.pop() else { break };
            if let Some(p) = out.push_frame(&f.frame) {
                p.meta.rx_time = f.at;
            }
            self.stats.delivered += 1;
            self.stats.delivered_bytes += f.frame.len() as u64;
            self.pool.push(f.frame);
            n += 1;
        }
        n
    }
}

/// Constructors for a two-way virtual link.
#[derive(Debug)]
pub struct VLink;

impl VLink {
    /// A link whose directions A→B and B→A have impairments `a_to_b` and `b_to_a`, seeded from
    /// `seed`. Returns the two endpoints, named `"{name}:a"` and `"{name}:b"`.
    pub fn pair(
        name: &str,
        a_to_b: LinkConfig,
        b_to_a: LinkConfig,
        seed: u64,
    ) -> (VLinkPort, VLinkPort) {
        let links = Arc::new(Mutex::new([
            Link::new(a_to_b, seed),
            Link::new(b_to_a, seed ^ 0x9e37_79b9_7f4a_7c15),
        ]));
        (
            VLinkPort {
                name: format!("{name}:a"),
                side: 0,
                links: links.clone(),
                counters: PortCounters::default(),
            },
            VLinkPort {
                name: format!("{name}:b"),
                side: 1,
                links,
                counters: PortCounters::default(),
            },
        )
    }

    /// A link with the same impairments both ways.
    pub fn symmetric(name: &str, cfg: LinkConfig, seed: u64) -> (VLinkPort, VLinkPort) {
        Self::pair(name, cfg, cfg, seed)
    }
}

/// One endpoint of a virtual link: what it sends goes out on its direction, what it receives
/// comes from the other.
#[derive(Debug)]
pub struct VLinkPort {
    name: String,
    side: usize,
    links: Arc<Mutex<[Link; 2]>>,
    counters: PortCounters,
}

impl VLinkPort {
    fn lock(&self) -> MutexGuard<'_, [Link; 2]> {
        // A poisoned lock only means another endpoint's user panicked; the links' state is
        // still consistent (every method leaves it so), so keep going.
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counters of the direction this endpoint sends on.
    pub fn tx_link_stats(&self) -> LinkStats {
        self.lock()[self.side].stats()
    }

    /// Counters of the direction this endpoint receives from.
    pub fn rx_link_stats(&self) -> LinkStats {
        self.lock()[1 - self.side].stats()
    }

    /// A handle that reads both directions' counters after the port was handed to a node.
    pub fn stats_handle(&self) -> VLinkStats {
        VLinkStats { side: self.side, links: self.links.clone() }
    }

    /// A handle that cuts, restores and re-impairs the link after the port was handed to a
    /// node.
    pub fn control(&self) -> VLinkControl {
        VLinkControl { links: self.links.clone() }
    }
}

/// Changes a running link ([`VLinkPort::control`]): direction 0 is A→B, 1 is B→A.
#[derive(Debug, Clone)]
pub struct VLinkControl {
    links: Arc<Mutex<[Link; 2]>>,
}

impl VLinkControl {
    fn lock(&self) -> MutexGuard<'_, [Link; 2]> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Cut (`true`) or restore both directions.
    pub fn set_down(&self, down: bool) {
        for l in self.lock().iter_mut() {
            l.set_down(down);
        }
    }

    /// Whether the link is cut.
    pub fn is_down(&self) -> bool {
        self.lock()[0].is_down()
    }

    /// The impairments of direction `dir` (0: A→B, 1: B→A; anything else reads B→A).
    pub fn config(&self, dir: usize) -> LinkConfig {
        *self.lock()[dir.min(1)].config()
    }

    /// Change the impairments of direction `dir` (0: A→B, 1: B→A) from now on.
    pub fn set_config(&self, dir: usize, cfg: LinkConfig) {
        self.lock()[dir.min(1)].set_config(cfg);
    }

    /// The counters of direction `dir` (0: A→B, 1: B→A).
    pub fn stats(&self, dir: usize) -> LinkStats {
        self.lock()[dir.min(1)].stats()
    }

    /// Frames in flight in direction `dir`.
    pub fn in_flight(&self, dir: usize) -> usize {
        self.lock()[dir.min(1)].in_flight()
    }
}

/// Reads a link's counters from outside the node that owns the endpoint
/// ([`VLinkPort::stats_handle`]); "tx" and "rx" are as seen from that endpoint.
#[derive(Debug, Clone)]
pub struct VLinkStats {
    side: usize,
    links: Arc<Mutex<[Link; 2]>>,
}

impl VLinkStats {
    /// Counters of the direction the endpoint sends on.
    pub fn tx(&self) -> LinkStats {
        self.links.lock().unwrap_or_else(|e| e.into_inner())[self.side].stats()
    }

    /// Counters of the direction the endpoint receives from.
    pub fn rx(&self) -> LinkStats {
        self.links.lock().unwrap_or_else(|e| e.into_inner())[1 - self.side].stats()
    }
}

impl Port for VLinkPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let start = batch.len();
        let n = self.lock()[1 - self.side].poll_deliver(now, batch);
        for p in &batch.packets()[start..] {
            self.counters.count_rx(p.len());
        }
        Ok(n)
    }

    fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let side = self.side;
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        for p in batch.iter() {
            links[side].handle_send(now, p.data());
            self.counters.count_tx(p.len());
        }
        Ok(batch.len())
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.lock()[1 - self.side].poll_timeout()
    }

    fn caps(&self) -> PortCaps {
        PortCaps { gso: false, max_frame: 9216, tunnel_gso: false, merges_udp_tunnel: false }
    }

    fn counters(&self) -> PortCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(i: u32, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len.max(4)];
        f[..4].copy_from_slice(&i.to_be_bytes());
        f
    }

    fn id(b: &[u8]) -> u32 {
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Send `n` frames one every `gap`, deliver everything; return (delivery time, id) pairs.
    fn run(
        cfg: LinkConfig,
        seed: u64,
        n: u32,
        gap: Duration,
        len: usize,
    ) -> (Vec<(Instant, u32)>, LinkStats) {
        let mut l = Link::new(cfg, seed);
        let mut out = Vec::new();
        let mut b = Batch::new(256);
        let mut now = Instant::ZERO;
        for i in 0..n {
            l.handle_send(now, &frame(i, len));
            now += gap;
            b.clear();
            l.poll_deliver(now, &mut b);
            out.extend(b.iter().map(|p| (p.meta.rx_time, id(p.data()))));
        }
        while let Some(t) = l.poll_timeout() {
            b.clear();
            l.poll_deliver(t, &mut b);
            out.extend(b.iter().map(|p| (p.meta.rx_time, id(p.data()))));
        }
        (out, l.stats())
    }

    fn lossy() -> LinkConfig {
        LinkConfig {
            loss: 0.1,
            duplicate: 0.05,
            reorder: 0.02,
            delay: Duration::from_micros(50),
            jitter: Duration::from_micros(10),
            ..Default::default()
        }
    }

    #[test]
    fn same_seed_same_delivery_sequence() {
        let gap = Duration::from_micros(1);
        let (a, sa) = run(lossy(), 5, 5000, gap, 64);
        let (b, sb) = run(lossy(), 5, 5000, gap, 64);
        let (c, _) = run(lossy(), 6, 5000, gap, 64);
        assert_eq!(a, b);
        assert_eq!(sa, sb);
        assert_ne!(a, c);
        // Every delivery is accounted for.
        assert_eq!(sa.delivered, sa.offered - sa.lost + sa.duplicated);
        assert_eq!(a.len() as u64, sa.delivered);
    }

    #[test]
    fn loss_and_duplication_rates_within_bounds() {
        let n = 100_000u64;
        let (_, s) = run(lossy(), 77, n as u32, Duration::from_micros(1), 64);
        // Binomial: mean n*p, sd sqrt(n*p*(1-p)); accept 5 sd.
        let within = |count: u64, p: f64| {
            let mean = n as f64 * p;
            let sd = (n as f64 * p * (1.0 - p)).sqrt();
            (count as f64 - mean).abs() < 5.0 * sd
        };
        assert!(within(s.lost, 0.1), "lost {}", s.lost);
        // Duplication is drawn for every frame but applied only to frames not lost.
        let survivors = n - s.lost;
        let dup_mean = survivors as f64 * 0.05;
        let dup_sd = (survivors as f64 * 0.05 * 0.95).sqrt();
        assert!((s.duplicated as f64 - dup_mean).abs() < 5.0 * dup_sd, "dup {}", s.duplicated);
        assert!(s.reordered > 0);
    }

    #[test]
    fn order_preserved_without_reordering_even_with_jitter() {
        let cfg = LinkConfig {
            delay: Duration::from_micros(20),
            jitter: Duration::from_micros(50),
            ..Default::default()
        };
        let (out, s) = run(cfg, 3, 10_000, Duration::from_micros(1), 64);
        assert_eq!(s.reordered, 0);
        let ids: Vec<u32> = out.iter().map(|(_, i)| *i).collect();
        assert_eq!(ids, (0..10_000).collect::<Vec<_>>());
        assert!(out.windows(2).all(|w| w[0].0 <= w[1].0));
        // Delay is applied: the first frame arrives no earlier than 20 us.
        assert!(out[0].0 >= Instant::from_micros(20));
    }

    #[test]
    fn reordering_lets_later_frames_pass() {
        let cfg = LinkConfig { reorder: 0.2, ..Default::default() };
        let (out, s) = run(cfg, 9, 2000, Duration::from_micros(1), 64);
        assert!(s.reordered > 0);
        let ids: Vec<u32> = out.iter().map(|(_, i)| *i).collect();
        assert!(ids.windows(2).any(|w| w[0] > w[1]));
        assert_eq!(ids.len(), 2000);
    }

    #[test]
    fn rate_limit_gives_configured_throughput() {
        // 1 Gbit/s, 1000-byte frames offered at 2 Gbit/s with a queue big enough for all.
        let cfg =
            LinkConfig { rate_bps: 1_000_000_000, queue_limit: 100_000, ..Default::default() };
        let (out, s) = run(cfg, 1, 20_000, Duration::from_nanos(4000), 1000);
        assert_eq!(s.tail_dropped, 0);
        assert_eq!(out.len(), 20_000);
        // Each frame takes exactly 8 us on the wire: frame i ends at 8 us * (i + 1).
        assert_eq!(out[0].0, Instant::from_micros(8));
        assert_eq!(out[19_999].0, Instant::from_micros(8 * 20_000));
        let secs = out[19_999].0.as_nanos() as f64 / 1e9;
        let bps = s.delivered_bytes as f64 * 8.0 / secs;
        assert!((bps - 1e9).abs() / 1e9 < 0.001, "{bps}");
    }

    #[test]
    fn full_queue_tail_drops_are_counted() {
        let cfg = LinkConfig { rate_bps: 1_000_000_000, queue_limit: 10, ..Default::default() };
        let mut l = Link::new(cfg, 1);
        // 100 frames at once: 10 fit in the queue, 90 are tail drops.
        for i in 0..100 {
            l.handle_send(Instant::ZERO, &frame(i, 1000));
        }
        assert_eq!(l.stats().tail_dropped, 90);
        assert_eq!(l.in_flight(), 10);
        // Once the first frame has left the wire (8 us), one more fits.
        l.handle_send(Instant::from_micros(8), &frame(100, 1000));
        assert_eq!(l.stats().tail_dropped, 90);
        l.handle_send(Instant::from_micros(8), &frame(101, 1000));
        assert_eq!(l.stats().tail_dropped, 91);
    }

    fn ip_frame(v6: bool, ecn: u8) -> Vec<u8> {
        let mut f = vec![0u8; 80];
        if v6 {
            f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
            f[14] = 0x60;
            f[15] = ecn << 4;
        } else {
            f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            f[14] = 0x45;
            f[15] = ecn;
            let mut sum = 0u32;
            for w in f[14..34].chunks(2) {
                sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
            }
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        }
        f
    }

    fn ipv4_checksum_ok(f: &[u8]) -> bool {
        let mut sum = 0u32;
        for w in f[14..34].chunks(2) {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum == 0xffff
    }

    #[test]
    fn ecn_capable_frames_above_the_threshold_are_marked() {
        let cfg = LinkConfig {
            rate_bps: 1_000_000_000,
            queue_limit: 100,
            ecn_threshold: Some(2),
            ..Default::default()
        };
        let mut l = Link::new(cfg, 1);
        // Frames 0..=2 find at most 2 queued; 3 and 4 find more (4 is not ECN-capable).
        for (v6, ecn) in [(false, 1), (false, 2), (true, 2), (false, 2), (false, 0), (true, 1)] {
            l.handle_send(Instant::ZERO, &ip_frame(v6, ecn));
        }
        assert_eq!(l.stats().ecn_marked, 2);
        let mut b = Batch::new(16);
        l.poll_deliver(Instant::from_millis(1), &mut b);
        let ce: Vec<bool> = b
            .iter()
            .map(|p| {
                let d = p.data();
                if d[12] == 0x86 { (d[15] >> 4) & 3 == 3 } else { d[15] & 3 == 3 }
            })
            .collect();
        assert_eq!(ce, [false, false, false, true, false, true]);
        for p in b.iter().filter(|p| p.data()[12] == 0x08) {
            assert!(ipv4_checksum_ok(p.data()), "{:02x?}", &p.data()[14..34]);
        }
    }

    #[test]
    fn a_cut_link_loses_everything_until_restored() {
        let cfg = LinkConfig { delay: Duration::from_micros(10), ..Default::default() };
        let (mut a, mut b) = VLink::symmetric("l", cfg, 1);
        let ctl = a.control();
        let mut batch = Batch::new(8);
        batch.push_frame(&frame(1, 64)).unwrap();
        a.send(Instant::ZERO, &mut batch).unwrap();
        ctl.set_down(true);
        assert!(ctl.is_down());
        a.send(Instant::from_micros(1), &mut batch).unwrap();
        ctl.set_down(false);
        ctl.set_config(0, LinkConfig { delay: Duration::from_micros(1), ..cfg });
        a.send(Instant::from_micros(2), &mut batch).unwrap();
        let mut rx = Batch::new(8);
        b.recv(Instant::from_micros(20), &mut rx).unwrap();
        // The frame on the wire before the cut arrives; the one sent while cut is lost.
        assert_eq!(rx.len(), 2);
        // The shorter delay applies, but the later frame never overtakes the earlier one.
        assert_eq!(rx.packets()[1].meta.rx_time, Instant::from_micros(10));
        assert_eq!(ctl.config(0).delay, Duration::from_micros(1));
        let s = ctl.stats(0);
        assert_eq!((s.offered, s.lost, s.delivered), (3, 1, 2));
    }

    #[test]
    fn endpoints_work_as_ports() {
        let cfg = LinkConfig { delay: Duration::from_micros(10), ..Default::default() };
        let (mut a, mut b) = VLink::symmetric("l0", cfg, 1);
        assert_eq!(a.name(), "l0:a");
        let mut batch = Batch::new(8);
        batch.push_frame(&frame(1, 64)).unwrap();
        batch.push_frame(&frame(2, 64)).unwrap();
        assert_eq!(a.send(Instant::ZERO, &mut batch).unwrap(), 2);
        assert_eq!(b.poll_timeout(), Some(Instant::from_micros(10)));
        assert_eq!(a.poll_timeout(), None);
        let mut rx = Batch::new(8);
        assert_eq!(b.recv(Instant::from_micros(9), &mut rx).unwrap(), 0);
        assert_eq!(b.recv(Instant::from_micros(10), &mut rx).unwrap(), 2);
        assert_eq!(rx.iter().map(|p| id(p.data())).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(b.counters().rx_packets, 2);
        assert_eq!(a.tx_link_stats().delivered, 2);
        assert_eq!(b.rx_link_stats().delivered, 2);
        // A handle sees the same counters after the port is gone (moved into a node).
        let stats = b.stats_handle();
        drop(b);
        assert_eq!((stats.rx().delivered, stats.tx().offered), (2, 0));
    }
}
