//! Quality of service: token-bucket meters (per vPort and per flow), ECN marking, and egress
//! queues shaped to a rate that mark CE instead of dropping when they grow deep.
//!
//! Everything here is sans-IO and allocation-free per packet: time is an argument
//! ([`snic_time::Instant`], nanoseconds), token arithmetic is integer-only and exact over long
//! runs (no float, no lost sub-byte remainder), and an [`EgressQueue`] holds packets by swapping
//! [`PacketBuf`]s with spares it allocated up front.
//!
//! Token units: a bucket counts tokens in 1/8,000,000,000 of a byte (one bit-nanosecond per
//! bit/s of rate), so refilling `dt` nanoseconds at `rate_bps` adds exactly `dt * rate_bps`
//! units and nothing is ever rounded away. The price is a cap on the burst:
//! [`MAX_BURST_BYTES`] (about 2.3 GB), which is far above any useful bucket.
//!
//! A per-vPort meter is shared by every worker shard: [`SharedBucket`] keeps the same exact
//! arithmetic in atomics (compare-exchange loops with bounded retries, no lock), so N workers
//! together get the vPort's rate, not N times it. A per-flow meter lives in its flow entry and
//! is only touched by the one shard that owns the flow ([`bucket_take`]).
//!
//! This module does not decide which meter applies to a packet (the slow path does, from
//! [`crate::policy::Action::Meter`] and [`crate::policy::VPortPolicy::meter`]) and does not
//! schedule between several queues: one [`EgressQueue`] shapes one pipeline port.

use crate::policy::{Exceed, MeterSpec, QueueSpec};
use core::sync::atomic::{AtomicU64, Ordering};
use snic_pipeline::{Batch, PacketBuf};
use snic_time::Instant;
use snic_wire::ethernet::{self, EtherType};
use snic_wire::{ipv4, ipv6};

/// Token units per byte: 8 bits times 10^9 nanoseconds per second.
const UNITS_PER_BYTE: u64 = 8_000_000_000;

/// The largest burst a bucket holds, in bytes; larger bursts are clamped to it.
pub const MAX_BURST_BYTES: u64 = u64::MAX / UNITS_PER_BYTE;

/// Most packets one [`EgressQueue`] holds; a larger [`QueueSpec::limit`] is clamped to it (each
/// slot preallocates one [`PacketBuf`], about 2.2 KiB).
pub const MAX_QUEUE_LIMIT: usize = 65_536;

/// Capacity of a bucket of `burst_bytes`, in token units.
fn capacity(burst_bytes: u64) -> u64 {
    burst_bytes.min(MAX_BURST_BYTES) * UNITS_PER_BYTE
}

/// Refill `tokens` (stamped `stamp`) up to `now`, capped at `cap`. Time running backwards adds
/// nothing and leaves the stamp where it was.
fn refill(tokens: &mut u64, stamp: &mut Instant, rate_bps: u64, cap: u64, now: Instant) {
    if now > *stamp {
        let dt = now.as_nanos() - stamp.as_nanos();
        let add = u128::from(dt) * u128::from(rate_bps);
        let sum = (u128::from(*tokens) + add).min(u128::from(cap));
        *tokens = u64::try_from(sum).unwrap_or(cap);
        *stamp = now;
    } else if *tokens > cap {
        *tokens = cap;
    }
}

/// Token-bucket meter step on a bucket stored as two words (the flow table keeps them in its
/// entry): refill up to `now` at `rate_bps` (capped at `burst_bytes`), then take `bytes` if the
/// bucket holds that many. Returns true when the packet conforms (tokens taken), false when it
/// exceeds (bucket unchanged apart from the refill). A packet larger than the burst never
/// conforms. `tokens` and `stamp` start from [`bucket_init`].
pub fn bucket_take(
    tokens: &mut u64,
    stamp: &mut Instant,
    rate_bps: u64,
    burst_bytes: u64,
    now: Instant,
    bytes: u32,
) -> bool {
    refill(tokens, stamp, rate_bps, capacity(burst_bytes), now);
    let need = u64::from(bytes).saturating_mul(UNITS_PER_BYTE);
    if *tokens >= need {
        *tokens -= need;
        true
    } else {
        false
    }
}

/// A full bucket of `burst_bytes` at `now`, as the `(tokens, stamp)` pair [`bucket_take`] uses.
pub fn bucket_init(burst_bytes: u64, now: Instant) -> (u64, Instant) {
    (capacity(burst_bytes), now)
}

/// Integer token bucket (no floats on the packet path; exact over long runs: sub-byte
/// remainders are kept). Fills at `rate_bps` up to `burst_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    tokens: u64,
    stamp: Instant,
    rate_bps: u64,
    burst_bytes: u64,
}

impl TokenBucket {
    /// A bucket filling at `rate_bps` bits per second up to `burst_bytes` (clamped to
    /// [`MAX_BURST_BYTES`]); it starts full.
    pub fn new(rate_bps: u64, burst_bytes: u64, now: Instant) -> TokenBucket {
        let burst_bytes = burst_bytes.min(MAX_BURST_BYTES);
        let (tokens, stamp) = bucket_init(burst_bytes, now);
        TokenBucket { tokens, stamp, rate_bps, burst_bytes }
    }

    /// Refill up to `now`, then take `bytes` tokens if there are that many: true when the
    /// packet conforms to the rate.
    pub fn conform(&mut self, now: Instant, bytes: u32) -> bool {
        bucket_take(&mut self.tokens, &mut self.stamp, self.rate_bps, self.burst_bytes, now, bytes)
    }

    /// Change rate and burst. Tokens already in the bucket are kept (cut down to the new burst);
    /// time since the last packet is credited at the new rate on the next [`conform`](Self::conform).
    pub fn set(&mut self, rate_bps: u64, burst_bytes: u64) {
        self.rate_bps = rate_bps;
        self.burst_bytes = burst_bytes.min(MAX_BURST_BYTES);
        self.tokens = self.tokens.min(capacity(self.burst_bytes));
    }

    /// Rate in bits per second.
    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// Depth in bytes.
    pub fn burst_bytes(&self) -> u64 {
        self.burst_bytes
    }

    /// Whole bytes in the bucket as of its last update (no refill).
    pub fn tokens_bytes(&self) -> u64 {
        self.tokens / UNITS_PER_BYTE
    }
}

/// How many times [`SharedBucket::conform`] retries a compare-exchange it lost to another
/// shard before it gives up and counts the packet as non-conforming (a lost race is a retry;
/// this many in a row only happens under pathological contention).
pub const SHARED_BUCKET_RETRIES: u32 = 64;

/// What one [`SharedBucket::take`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// The bucket held enough tokens; they were taken.
    Conform,
    /// Not enough tokens (or the packet is larger than the burst); nothing taken.
    Exceed,
    /// Every compare-exchange of the allowed [`SHARED_BUCKET_RETRIES`] was lost to other
    /// shards; nothing taken. Counts as non-conforming, and in [`SharedBucket::contended`].
    Contended,
}

/// A token bucket shared by every worker shard of a vSwitch (the per-vPort meter): the same
/// integer arithmetic as [`TokenBucket`] (tokens in 1/8e9 of a byte, no lost remainder), held
/// in atomics so shards meter one rate between them without a lock.
///
/// Refill: the shard whose compare-exchange moves the timestamp from `s` to `now` owns the
/// interval `(s, now]` and deposits `(now - s) * rate` units (capped at the burst); every
/// interval is credited exactly once. Take: a compare-exchange loop that takes only when the
/// bucket holds enough, so the tokens never go below zero. Both loops are bounded by
/// [`SHARED_BUCKET_RETRIES`]; running out is a counted non-conformance, never a spin. The
/// total granted over any run is at most `rate * elapsed + burst` (a refill that loses its
/// deposit loop gives tokens away, never invents them).
///
/// Between one shard winning the timestamp and depositing, another shard may see the old
/// level: it errs towards refusing a packet, never towards exceeding the rate.
#[derive(Debug)]
pub struct SharedBucket {
    tokens: AtomicU64,
    /// Nanoseconds of the last refill.
    stamp: AtomicU64,
    rate_bps: AtomicU64,
    burst_bytes: AtomicU64,
    contended: AtomicU64,
}

impl SharedBucket {
    /// A bucket filling at `rate_bps` bits per second up to `burst_bytes` (clamped to
    /// [`MAX_BURST_BYTES`]); it starts full, stamped `now`.
    pub fn new(rate_bps: u64, burst_bytes: u64, now: Instant) -> SharedBucket {
        let burst_bytes = burst_bytes.min(MAX_BURST_BYTES);
        SharedBucket {
            tokens: AtomicU64::new(capacity(burst_bytes)),
            stamp: AtomicU64::new(now.as_nanos()),
            rate_bps: AtomicU64::new(rate_bps),
            burst_bytes: AtomicU64::new(burst_bytes),
            contended: AtomicU64::new(0),
        }
    }

    /// Refill up to `now`, then take `bytes` tokens if there are that many: true when the
    /// packet conforms to the rate (a [`Take::Contended`] counts as not conforming).
    #[inline]
    pub fn conform(&self, now: Instant, bytes: u32) -> bool {
        self.take(now, bytes) == Take::Conform
    }

    /// Refill up to `now`, then take `bytes` tokens if there are that many.
    pub fn take(&self, now: Instant, bytes: u32) -> Take {
        let rate = self.rate_bps.load(Ordering::Relaxed);
        let cap = capacity(self.burst_bytes.load(Ordering::Relaxed));
        let now = now.as_nanos();
        if !self.refill(now, rate, cap) {
            self.contended.fetch_add(1, Ordering::Relaxed);
            return Take::Contended;
        }
        let need = u64::from(bytes).saturating_mul(UNITS_PER_BYTE);
        let mut t = self.tokens.load(Ordering::Acquire);
        for _ in 0..SHARED_BUCKET_RETRIES {
            if t < need {
                return Take::Exceed;
            }
            match self.tokens.compare_exchange_weak(
                t,
                t - need,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Take::Conform,
                Err(cur) => t = cur,
            }
        }
        self.contended.fetch_add(1, Ordering::Relaxed);
        Take::Contended
    }

    /// Credit the time up to `now`: false when a loop ran out of retries.
    fn refill(&self, now: u64, rate: u64, cap: u64) -> bool {
        let mut s = self.stamp.load(Ordering::Acquire);
        for _ in 0..SHARED_BUCKET_RETRIES {
            if now <= s {
                // Another shard already credited up to here (or time ran backwards).
                return true;
            }
            match self.stamp.compare_exchange_weak(s, now, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    let add = u128::from(now - s) * u128::from(rate);
                    return self.deposit(add, cap);
                }
                Err(cur) => s = cur,
            }
        }
        false
    }

    /// Add `add` units, capped at `cap` (a level already above `cap`, after a smaller burst
    /// was set, is cut down to it).
    fn deposit(&self, add: u128, cap: u64) -> bool {
        let mut t = self.tokens.load(Ordering::Acquire);
        for _ in 0..SHARED_BUCKET_RETRIES {
            let sum = (u128::from(t) + add).min(u128::from(cap));
            let next = u64::try_from(sum).unwrap_or(cap);
            if next == t {
                return true;
            }
            match self.tokens.compare_exchange_weak(t, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(cur) => t = cur,
            }
        }
        false
    }

    /// Change rate and burst. Tokens already in the bucket are kept (cut down to the new
    /// burst); time since the last refill is credited at the new rate.
    pub fn set(&self, rate_bps: u64, burst_bytes: u64) {
        let burst_bytes = burst_bytes.min(MAX_BURST_BYTES);
        self.rate_bps.store(rate_bps, Ordering::Relaxed);
        self.burst_bytes.store(burst_bytes, Ordering::Relaxed);
        self.tokens.fetch_min(capacity(burst_bytes), Ordering::AcqRel);
    }

    /// Rate in bits per second.
    pub fn rate_bps(&self) -> u64 {
        self.rate_bps.load(Ordering::Relaxed)
    }

    /// Depth in bytes.
    pub fn burst_bytes(&self) -> u64 {
        self.burst_bytes.load(Ordering::Relaxed)
    }

    /// Whole bytes in the bucket as of its last update (no refill).
    pub fn tokens_bytes(&self) -> u64 {
        self.tokens.load(Ordering::Acquire) / UNITS_PER_BYTE
    }

    /// Packets refused because the retries ran out ([`Take::Contended`]).
    pub fn contended(&self) -> u64 {
        self.contended.load(Ordering::Relaxed)
    }

    /// The level and the age of the last refill as of `now`, to carry the bucket to another
    /// process (whose clock has another origin).
    pub fn snapshot(&self, now: Instant) -> BucketSnapshot {
        BucketSnapshot {
            tokens: self.tokens.load(Ordering::Acquire),
            age_ns: now.as_nanos().saturating_sub(self.stamp.load(Ordering::Acquire)),
        }
    }

    /// Take the level of a snapshot (cut down to this bucket's burst), its last refill `age_ns`
    /// before `now`. An age older than this clock's origin is clamped to the origin: the bucket
    /// is credited less time, never more.
    pub fn restore(&self, s: &BucketSnapshot, now: Instant) {
        let cap = capacity(self.burst_bytes.load(Ordering::Relaxed));
        self.tokens.store(s.tokens.min(cap), Ordering::Release);
        self.stamp.store(now.as_nanos().saturating_sub(s.age_ns), Ordering::Release);
    }
}

/// A [`SharedBucket`]'s state with its time as an age ([`SharedBucket::snapshot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BucketSnapshot {
    /// Tokens, in units of 1/(8 * 10^9) byte.
    pub tokens: u64,
    /// Nanoseconds since the last refill.
    pub age_ns: u64,
}

/// What a meter decided for one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policed {
    /// Within the rate: forward unchanged.
    Pass,
    /// Above the rate with [`Exceed::Mark`], and ECN-capable: forward, now carrying CE.
    PassMarked,
    /// Above the rate and dropped (count it).
    Drop,
}

/// What to do with a packet that exceeded its meter, given the meter's [`Exceed`] policy:
/// `Drop` drops; `Mark` sets CE on an ECT packet (or keeps CE on a CE one) and lets it through,
/// and drops a Not-ECT or non-IP one. Never [`Policed::Pass`].
pub fn police_exceed(exceed: Exceed, frame: &mut [u8]) -> Policed {
    match exceed {
        Exceed::Drop => Policed::Drop,
        Exceed::Mark => match mark_ce(frame) {
            MarkResult::Marked | MarkResult::AlreadyCe => Policed::PassMarked,
            MarkResult::NotEct | MarkResult::NotIp => Policed::Drop,
        },
    }
}

/// Counters of one [`Meter`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MeterStats {
    /// Packets within the rate.
    pub passed: u64,
    /// Bytes within the rate.
    pub passed_bytes: u64,
    /// Packets above the rate let through with CE set.
    pub marked: u64,
    /// Packets above the rate dropped.
    pub dropped: u64,
}

/// A meter from a [`MeterSpec`]: a token bucket plus its exceed policy and counters, owned by
/// one thread. The engine's per-vPort meters use a [`SharedBucket`] (one for all shards) and
/// per-flow meters use [`bucket_take`] on words in the flow entry, both with
/// [`police_exceed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meter {
    bucket: TokenBucket,
    exceed: Exceed,
    stats: MeterStats,
}

impl Meter {
    /// A meter with a full bucket.
    pub fn new(spec: &MeterSpec, now: Instant) -> Meter {
        Meter {
            bucket: TokenBucket::new(spec.rate_bps, spec.burst_bytes, now),
            exceed: spec.exceed,
            stats: MeterStats::default(),
        }
    }

    /// Meter one frame (its whole length counts), marking it CE when that is the verdict.
    pub fn police(&mut self, now: Instant, frame: &mut [u8]) -> Policed {
        let bytes = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        if self.bucket.conform(now, bytes) {
            self.stats.passed += 1;
            self.stats.passed_bytes += u64::from(bytes);
            return Policed::Pass;
        }
        let v = police_exceed(self.exceed, frame);
        match v {
            Policed::PassMarked => self.stats.marked += 1,
            Policed::Drop => self.stats.dropped += 1,
            Policed::Pass => {}
        }
        v
    }

    /// Take a new spec (rate, burst, exceed policy), keeping tokens and counters.
    pub fn set(&mut self, spec: &MeterSpec) {
        self.bucket.set(spec.rate_bps, spec.burst_bytes);
        self.exceed = spec.exceed;
    }

    /// The counters.
    pub fn stats(&self) -> MeterStats {
        self.stats
    }

    /// The bucket.
    pub fn bucket(&self) -> &TokenBucket {
        &self.bucket
    }
}

/// The ECN codepoint of an IP header (RFC 3168).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ecn {
    /// `00`: not ECN-capable.
    NotEct,
    /// `01`: ECN-capable transport (1).
    Ect1,
    /// `10`: ECN-capable transport (0).
    Ect0,
    /// `11`: congestion experienced.
    Ce,
}

impl Ecn {
    /// The codepoint of the two ECN bits (higher bits ignored).
    pub const fn from_bits(bits: u8) -> Ecn {
        match bits & 0x03 {
            0b00 => Ecn::NotEct,
            0b01 => Ecn::Ect1,
            0b10 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// The two ECN bits.
    pub const fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0b00,
            Ecn::Ect1 => 0b01,
            Ecn::Ect0 => 0b10,
            Ecn::Ce => 0b11,
        }
    }
}

/// The outermost IP header of an Ethernet frame: its offset and family.
#[derive(Clone, Copy)]
enum OuterIp {
    V4(usize),
    V6(usize),
}

/// Find the outermost IP header, skipping up to two VLAN tags, and check that it is a
/// well-formed header (version, header length, total length within the frame).
fn outer_ip(frame: &[u8]) -> Option<OuterIp> {
    // The EtherType after the MAC addresses, then after each tag (as `ethernet::walk_vlans`
    // reads them, without building the tag list: this runs on congested packets).
    let mut off = ethernet::HEADER_LEN - 2;
    let mut tags = 0;
    let ethertype = loop {
        let t = frame.get(off..off + 2)?;
        let t = EtherType(u16::from_be_bytes([t[0], t[1]]));
        off += 2;
        if !t.is_vlan() {
            break t;
        }
        if tags == ethernet::MAX_VLAN_TAGS {
            return None;
        }
        tags += 1;
        // Skip the TCI; the tag's inner EtherType is read next.
        off += 2;
    };
    let l3 = frame.get(off..)?;
    if ethertype == EtherType::IPV4 {
        ipv4::Packet::new_checked(l3).ok()?;
        Some(OuterIp::V4(off))
    } else if ethertype == EtherType::IPV6 {
        ipv6::Packet::new_checked(l3).ok()?;
        Some(OuterIp::V6(off))
    } else {
        None
    }
}

/// The ECN codepoint of the outermost IP header of an Ethernet frame (802.1Q / QinQ tags
/// skipped), or `None` when the frame carries no well-formed IPv4 or IPv6 header.
pub fn ecn_of(frame: &[u8]) -> Option<Ecn> {
    // `outer_ip` checked the header at that offset; the views below only read checked bytes.
    match outer_ip(frame)? {
        OuterIp::V4(off) => {
            Some(Ecn::from_bits(ipv4::Packet::new_unchecked(frame.get(off..)?).ecn()))
        }
        OuterIp::V6(off) => {
            Some(Ecn::from_bits(ipv6::Packet::new_unchecked(frame.get(off..)?).ecn()))
        }
    }
}

/// What [`mark_ce`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkResult {
    /// The packet was ECT(0) or ECT(1) and now carries CE.
    Marked,
    /// The packet already carried CE; unchanged.
    AlreadyCe,
    /// The packet is IP but not ECN-capable; unchanged (a congested queue must drop it).
    NotEct,
    /// No well-formed IPv4/IPv6 header; unchanged.
    NotIp,
}

/// Set CE on the outermost IP header of an Ethernet frame (802.1Q / QinQ tags skipped) if it is
/// ECN-capable. The IPv4 header checksum is updated incrementally (RFC 1624); IPv6 has none.
/// For a tunnelled packet this marks the outer header, which the decapsulator copies inward
/// (RFC 6040). Never panics; leaves the frame unchanged unless it returns `Marked`.
pub fn mark_ce(frame: &mut [u8]) -> MarkResult {
    let Some(ip) = outer_ip(frame) else { return MarkResult::NotIp };
    let off = match ip {
        OuterIp::V4(off) | OuterIp::V6(off) => off,
    };
    let Some(l3) = frame.get_mut(off..) else { return MarkResult::NotIp };
    // `outer_ip` checked the header at `off`: the unchecked views only touch checked bytes.
    match ip {
        OuterIp::V4(_) => {
            let mut p = ipv4::Packet::new_unchecked(l3);
            match Ecn::from_bits(p.ecn()) {
                Ecn::NotEct => MarkResult::NotEct,
                Ecn::Ce => MarkResult::AlreadyCe,
                Ecn::Ect0 | Ecn::Ect1 => {
                    p.mark_ce();
                    MarkResult::Marked
                }
            }
        }
        OuterIp::V6(_) => {
            let mut p = ipv6::Packet::new_unchecked(l3);
            match Ecn::from_bits(p.ecn()) {
                Ecn::NotEct => MarkResult::NotEct,
                Ecn::Ce => MarkResult::AlreadyCe,
                Ecn::Ect0 | Ecn::Ect1 => {
                    p.set_ecn(Ecn::Ce.bits());
                    MarkResult::Marked
                }
            }
        }
    }
}

/// What [`EgressQueue::enqueue`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// Queued unchanged.
    Queued,
    /// Queued, and marked CE because the queue was at or above its ECN threshold.
    QueuedMarked,
    /// Not queued: the queue holds `limit` packets (counted in
    /// [`QueueStats::dropped_full`]).
    DroppedFull,
}

/// Counters of one [`EgressQueue`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Packets queued (marked or not).
    pub enqueued: u64,
    /// Packets marked CE on the way in.
    pub marked: u64,
    /// Packets dropped because the queue was full.
    pub dropped_full: u64,
    /// Packets handed out by [`EgressQueue::dequeue`].
    pub sent: u64,
    /// Greatest depth seen (packets, counting the one just queued).
    pub max_depth: u64,
    /// Bytes handed out by [`EgressQueue::dequeue`].
    pub sent_bytes: u64,
}

/// One queued packet and the time it has left the shaped link.
#[derive(Debug)]
struct Slot {
    buf: PacketBuf,
    depart: Instant,
}

/// An egress queue shaped to `rate_bps`: packets leave no faster than the rate (each packet's
/// departure is computed when it arrives: it starts when the link is free and takes
/// `len * 8 / rate` seconds, with the sub-nanosecond remainder carried so long runs are exact).
///
/// At arrival, when the *depth* (packets queued whose departure time is still ahead) is at or
/// above `ecn_threshold`, an ECT packet is marked CE (counted) and queued; a Not-ECT packet is
/// queued unmarked. When the queue holds `limit` packets, the arrival is dropped (counted). The
/// limit counts packets held, so the driver dequeues before it enqueues.
///
/// Packets are held by swapping [`PacketBuf`]s with spares allocated in [`EgressQueue::new`]:
/// nothing allocates per packet once the output batch has spare buffers of its own. A rate of
/// zero means unshaped (packets may leave at once).
#[derive(Debug)]
pub struct EgressQueue {
    port: u16,
    rate_bps: u64,
    ecn_threshold: usize,
    slots: Vec<Slot>,
    head: usize,
    len: usize,
    /// When the link finishes sending the last queued packet.
    link_free: Instant,
    /// Remainder of the last departure computation, in bit-nanoseconds (< rate_bps).
    rem: u64,
    stats: QueueStats,
}

impl EgressQueue {
    /// An empty queue for `spec.port`, preallocating `spec.limit` packet buffers (clamped to
    /// [`MAX_QUEUE_LIMIT`]).
    pub fn new(spec: &QueueSpec, now: Instant) -> EgressQueue {
        let limit = spec.limit.min(MAX_QUEUE_LIMIT);
        let slots = (0..limit).map(|_| Slot { buf: PacketBuf::new(), depart: now }).collect();
        EgressQueue {
            port: spec.port,
            rate_bps: spec.rate_bps,
            ecn_threshold: spec.ecn_threshold,
            slots,
            head: 0,
            len: 0,
            link_free: now,
            rem: 0,
            stats: QueueStats::default(),
        }
    }

    /// The queued packet `i` places after the head (`i < len`), without a division.
    fn slot(&self, i: usize) -> Option<&Slot> {
        let cap = self.slots.len();
        let idx = self.head + i;
        self.slots.get(if idx >= cap { idx - cap } else { idx })
    }

    /// Packets queued whose departure time is after `now` (the depth a packet arriving at `now`
    /// sees). Departures are in FIFO order, so this is a binary search (O(1) when nothing or
    /// everything has left).
    pub fn depth(&self, now: Instant) -> usize {
        if self.len == 0 || self.slot(self.len - 1).is_none_or(|s| s.depart <= now) {
            return 0;
        }
        if self.slot(0).is_some_and(|s| s.depart > now) {
            return self.len;
        }
        let (mut lo, mut hi) = (1usize, self.len - 1);
        // Invariant: slots before `lo` have left by `now`; slots from `hi` have not.
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.slot(mid) {
                Some(s) if s.depart <= now => lo = mid + 1,
                _ => hi = mid,
            }
        }
        self.len - lo
    }

    /// The time a packet of `bytes` arriving at `now` has left the link; advances the link.
    fn schedule(&mut self, now: Instant, bytes: usize) -> Instant {
        if self.rate_bps == 0 {
            self.link_free = self.link_free.max(now);
            return self.link_free;
        }
        if now > self.link_free {
            // The link went idle: start afresh from now.
            self.link_free = now;
            self.rem = 0;
        }
        // Bit-nanoseconds to send, plus the carried remainder. A frame below 2 GB fits in u64.
        let (ns, rem) = match u64::try_from(bytes)
            .ok()
            .and_then(|b| b.checked_mul(UNITS_PER_BYTE))
            .and_then(|x| x.checked_add(self.rem))
        {
            Some(x) => (x / self.rate_bps, x % self.rate_bps),
            None => {
                let x = u128::from(u64::try_from(bytes).unwrap_or(u64::MAX))
                    * u128::from(UNITS_PER_BYTE)
                    + u128::from(self.rem);
                let rate = u128::from(self.rate_bps);
                // The remainder is below the rate, which is a u64.
                (u64::try_from(x / rate).unwrap_or(u64::MAX), u64::try_from(x % rate).unwrap_or(0))
            }
        };
        self.rem = rem;
        self.link_free = self.link_free.saturating_add(core::time::Duration::from_nanos(ns));
        self.link_free
    }

    /// Take `pkt` into the queue by swapping its buffer with a spare: on `Queued*`, `pkt` is
    /// left holding an old spare buffer (stale frame and metadata) the caller discards or
    /// resets; on `DroppedFull` `pkt` is untouched. An ECT packet arriving at depth >= the ECN threshold is marked CE first.
    pub fn enqueue(&mut self, now: Instant, pkt: &mut PacketBuf) -> Enqueued {
        let cap = self.slots.len();
        if self.len >= cap {
            self.stats.dropped_full += 1;
            return Enqueued::DroppedFull;
        }
        let depth = self.depth(now);
        let mut result = Enqueued::Queued;
        if depth >= self.ecn_threshold && mark_ce(pkt.data_mut()) == MarkResult::Marked {
            self.stats.marked += 1;
            result = Enqueued::QueuedMarked;
        }
        let depart = self.schedule(now, pkt.len());
        let tail = self.head + self.len;
        let tail = if tail >= cap { tail - cap } else { tail };
        if let Some(slot) = self.slots.get_mut(tail) {
            core::mem::swap(&mut slot.buf, pkt);
            slot.depart = depart;
        }
        self.len += 1;
        self.stats.enqueued += 1;
        let d = u64::try_from(depth + 1).unwrap_or(u64::MAX);
        self.stats.max_depth = self.stats.max_depth.max(d);
        result
    }

    /// Move packets whose departure time is `<= now` into `out`, in FIFO order, while `out` has
    /// room ([`Batch::push_swap`]: buffers are traded, nothing allocates once `out` has spares).
    /// Returns how many.
    pub fn dequeue(&mut self, now: Instant, out: &mut Batch) -> usize {
        let cap = self.slots.len();
        let mut n = 0;
        while self.len > 0 && !out.is_full() {
            let Some(slot) = self.slots.get_mut(self.head) else { break };
            if slot.depart > now {
                break;
            }
            let bytes = slot.buf.len();
            if !out.push_swap(&mut slot.buf) {
                break;
            }
            self.head = if self.head + 1 >= cap { 0 } else { self.head + 1 };
            self.len -= 1;
            self.stats.sent += 1;
            self.stats.sent_bytes += u64::try_from(bytes).unwrap_or(u64::MAX);
            n += 1;
        }
        n
    }

    /// Take a new spec at runtime (control plane, may allocate). Rate and threshold apply to
    /// packets arriving from now on; queued packets keep their departure times and order. A
    /// smaller limit than the packets held drops the newest ones (counted in
    /// [`QueueStats::dropped_full`]). The port is not changed.
    pub fn set(&mut self, spec: &QueueSpec) {
        self.rate_bps = spec.rate_bps;
        self.ecn_threshold = spec.ecn_threshold;
        let limit = spec.limit.min(MAX_QUEUE_LIMIT);
        if limit == self.slots.len() {
            return;
        }
        let cap = self.slots.len();
        let keep = self.len.min(limit);
        let dropped = self.len - keep;
        let mut old = core::mem::take(&mut self.slots);
        // Rotate so the head is at index 0, then keep the oldest `keep` packets.
        if cap > 0 {
            old.rotate_left(self.head % cap);
        }
        old.truncate(keep);
        if dropped > 0 {
            // The link is free once the last kept packet has left.
            self.link_free = old.last().map_or(Instant::ZERO, |s| s.depart);
            self.rem = 0;
        }
        old.resize_with(limit, || Slot { buf: PacketBuf::new(), depart: Instant::ZERO });
        self.slots = old;
        self.head = 0;
        self.len = keep;
        self.stats.dropped_full += u64::try_from(dropped).unwrap_or(u64::MAX);
    }

    /// Packets held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no packet is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most packets held ([`QueueSpec::limit`], clamped).
    pub fn limit(&self) -> usize {
        self.slots.len()
    }

    /// When the head packet may leave: the next time [`dequeue`](Self::dequeue) has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.len == 0 { None } else { self.slot(0).map(|s| s.depart) }
    }

    /// The counters.
    pub fn stats(&self) -> QueueStats {
        self.stats
    }

    /// The pipeline port this queue shapes.
    pub fn port(&self) -> u16 {
        self.port
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use snic_wire::checksum;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    // scapy: Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")/IP(src="10.0.0.1",
    //   dst="10.0.0.2", tos=0xb8|2, id=0x1234, ttl=64)/UDP(sport=1000, dport=2000)/b"abcd"
    const V4_ECT0: &str = "020000000002020000000001080045ba002012340000401153dd0a0000010a00000203e807d0000c1b5561626364";
    // The same with tos=0xb8|3 and the checksum scapy computes for it.
    const V4_CE: &str = "020000000002020000000001080045bb002012340000401153dc0a0000010a00000203e807d0000c1b5561626364";
    // scapy: Ether(..)/Dot1Q(vlan=100)/IPv6(src="fd00::1", dst="fd00::2", tc=0x01, fl=0xabcde,
    //   hlim=64)/UDP(sport=1000, dport=2000)/b"abcd"
    const V6_VLAN_ECT1: &str = "0200000000020200000000018100006486dd601abcde000c1140fd000000000000000000000000000001fd00000000000000000000000000000203e807d0000c355361626364";
    // The same with tc=0x03.
    const V6_VLAN_CE: &str = "0200000000020200000000018100006486dd603abcde000c1140fd000000000000000000000000000001fd00000000000000000000000000000203e807d0000c355361626364";

    /// Offset of the IP header after Ethernet and `tags` VLAN tags.
    fn l3_off(tags: usize) -> usize {
        14 + 4 * tags
    }

    fn eth(tags: usize, ethertype: u16) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        let tpids = [0x88a8u16, 0x8100, 0x8100];
        for (i, tpid) in tpids.iter().take(tags).enumerate() {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&(100 + i as u16).to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f
    }

    /// An Ethernet/[VLAN]/IPv4/UDP frame of `len` bytes (>= l2 + 32) whose payload starts with
    /// `seq`, with a correct header checksum.
    fn v4_frame(tags: usize, ecn: u8, seq: u32, len: usize) -> Vec<u8> {
        let mut f = eth(tags, 0x0800);
        let ip_len = (len - f.len()) as u16;
        let o = f.len();
        f.extend_from_slice(&[0x45, 0x28 << 2 | ecn]);
        f.extend_from_slice(&ip_len.to_be_bytes());
        f.extend_from_slice(&[0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        let c = !checksum::data(&f[o..o + 20]);
        f[o + 10..o + 12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&[0x03, 0xe8, 0x07, 0xd0]);
        f.extend_from_slice(&(ip_len - 20).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(&seq.to_be_bytes());
        f.resize(len, 0xa5);
        f
    }

    /// An Ethernet/[VLAN]/IPv6/UDP frame of `len` bytes (>= l2 + 52) whose payload starts with
    /// `seq`.
    fn v6_frame(tags: usize, ecn: u8, seq: u32, len: usize) -> Vec<u8> {
        let mut f = eth(tags, 0x86dd);
        let pl = (len - f.len() - 40) as u16;
        let tc = 0x28 << 2 | ecn;
        f.extend_from_slice(&[0x60 | tc >> 4, (tc & 0x0f) << 4 | 0x0a, 0xbc, 0xde]);
        f.extend_from_slice(&pl.to_be_bytes());
        f.extend_from_slice(&[17, 64]);
        f.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        f.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        f.extend_from_slice(&[0x03, 0xe8, 0x07, 0xd0]);
        f.extend_from_slice(&pl.to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(&seq.to_be_bytes());
        f.resize(len, 0x5a);
        f
    }

    /// The IPv4 header checksum recomputed from scratch equals the stored one.
    fn v4_checksum_ok(f: &[u8], tags: usize) -> bool {
        let o = l3_off(tags);
        let ihl = usize::from(f[o] & 0x0f) * 4;
        let mut h = f[o..o + ihl].to_vec();
        let stored = u16::from_be_bytes([h[10], h[11]]);
        h[10] = 0;
        h[11] = 0;
        !checksum::data(&h) == stored
    }

    #[test]
    fn mark_ce_ipv4_matches_scapy_and_keeps_the_checksum_valid() {
        let mut f = hex(V4_ECT0);
        assert_eq!(ecn_of(&f), Some(Ecn::Ect0));
        assert_eq!(mark_ce(&mut f), MarkResult::Marked);
        assert_eq!(f, hex(V4_CE));
        assert!(v4_checksum_ok(&f, 0));
        assert_eq!(ecn_of(&f), Some(Ecn::Ce));
        assert_eq!(mark_ce(&mut f), MarkResult::AlreadyCe);
        assert_eq!(f, hex(V4_CE));
    }

    #[test]
    fn mark_ce_ipv6_behind_a_vlan_tag_matches_scapy() {
        let mut f = hex(V6_VLAN_ECT1);
        assert_eq!(ecn_of(&f), Some(Ecn::Ect1));
        assert_eq!(mark_ce(&mut f), MarkResult::Marked);
        assert_eq!(f, hex(V6_VLAN_CE));
        assert_eq!(ecn_of(&f), Some(Ecn::Ce));
    }

    #[test]
    fn mark_ce_through_qinq_and_every_codepoint() {
        for tags in 0..=2 {
            for (bits, want) in [
                (0b00, MarkResult::NotEct),
                (0b01, MarkResult::Marked),
                (0b10, MarkResult::Marked),
                (0b11, MarkResult::AlreadyCe),
            ] {
                let orig = v4_frame(tags, bits, 7, 100);
                let mut f = orig.clone();
                assert_eq!(ecn_of(&f), Some(Ecn::from_bits(bits)));
                assert_eq!(mark_ce(&mut f), want, "v4 tags {tags} ecn {bits}");
                assert!(v4_checksum_ok(&f, tags));
                if want == MarkResult::Marked {
                    let o = l3_off(tags);
                    assert_eq!(f[o + 1], 0x28 << 2 | 0b11);
                    // Only the TOS byte and the checksum changed.
                    let diff: Vec<usize> = (0..f.len()).filter(|&i| f[i] != orig[i]).collect();
                    assert!(diff.iter().all(|&i| i == o + 1 || i == o + 10 || i == o + 11));
                } else {
                    assert_eq!(f, orig);
                }
                let orig = v6_frame(tags, bits, 7, 100);
                let mut f = orig.clone();
                assert_eq!(ecn_of(&f), Some(Ecn::from_bits(bits)));
                assert_eq!(mark_ce(&mut f), want, "v6 tags {tags} ecn {bits}");
                if want == MarkResult::Marked {
                    assert_eq!(ecn_of(&f), Some(Ecn::Ce));
                    let o = l3_off(tags);
                    assert_eq!(&f[..o + 1], &orig[..o + 1]);
                    assert_eq!(f[o + 1] & 0xcf, orig[o + 1] & 0xcf, "flow label kept");
                    assert_eq!(&f[o + 2..], &orig[o + 2..]);
                } else {
                    assert_eq!(f, orig);
                }
            }
        }
    }

    #[test]
    fn non_ip_and_malformed_frames_are_untouched() {
        // ARP.
        let mut f = eth(0, 0x0806);
        f.resize(60, 0);
        let orig = f.clone();
        assert_eq!(mark_ce(&mut f), MarkResult::NotIp);
        assert_eq!(ecn_of(&f), None);
        assert_eq!(f, orig);
        // Three VLAN tags: refused by the tag walk.
        let mut f = eth(3, 0x0800);
        f.extend_from_slice(&v4_frame(0, 0b10, 1, 60)[14..]);
        assert_eq!(mark_ce(&mut f), MarkResult::NotIp);
        // IPv4 truncated inside its header, a wrong version, a total length past the frame.
        let good = v4_frame(0, 0b10, 1, 60);
        let mut f = good[..30].to_vec();
        assert_eq!(mark_ce(&mut f), MarkResult::NotIp);
        let mut f = good.clone();
        f[14] = 0x65;
        assert_eq!(mark_ce(&mut f), MarkResult::NotIp);
        let mut f = good.clone();
        f[16..18].copy_from_slice(&1000u16.to_be_bytes());
        assert_eq!(mark_ce(&mut f), MarkResult::NotIp);
        // IPv6 header cut short.
        let mut f = v6_frame(1, 0b01, 1, 80)[..50].to_vec();
        assert_eq!(mark_ce(&mut f), MarkResult::NotIp);
        assert_eq!(ecn_of(&f), None);
        assert_eq!(mark_ce(&mut []), MarkResult::NotIp);
    }

    proptest! {
        #[test]
        fn mark_ce_never_panics_and_changes_only_marked_frames(
            bytes in proptest::collection::vec(any::<u8>(), 0..120),
        ) {
            let mut f = bytes.clone();
            let r = mark_ce(&mut f);
            if r == MarkResult::Marked {
                prop_assert_eq!(ecn_of(&f), Some(Ecn::Ce));
            } else {
                prop_assert_eq!(&f, &bytes);
            }
        }

        #[test]
        fn mark_ce_on_valid_headers_and_their_truncations(
            tags in 0usize..=2,
            v6 in any::<bool>(),
            ecn in 0u8..4,
            len in 80usize..200,
            cut in 0usize..200,
            fill in any::<u8>(),
        ) {
            let mut orig = if v6 { v6_frame(tags, ecn, 9, len) } else { v4_frame(tags, ecn, 9, len) };
            // Vary the checksummed fields: TTL / hop limit.
            let o = l3_off(tags);
            if !v6 {
                let old = u16::from_be_bytes([orig[o + 8], orig[o + 9]]);
                let new = u16::from_be_bytes([fill, orig[o + 9]]);
                let c = checksum::update16(u16::from_be_bytes([orig[o + 10], orig[o + 11]]), old, new);
                orig[o + 8] = fill;
                orig[o + 10..o + 12].copy_from_slice(&c.to_be_bytes());
                prop_assert!(v4_checksum_ok(&orig, tags));
            }
            let mut f = orig.clone();
            let r = mark_ce(&mut f);
            prop_assert_eq!(r == MarkResult::Marked, ecn == 0b01 || ecn == 0b10);
            prop_assert_eq!(ecn_of(&f), Some(if ecn == 0 { Ecn::NotEct } else { Ecn::Ce }));
            if !v6 {
                prop_assert!(v4_checksum_ok(&f, tags));
            }
            // Any truncation: never a panic, and a frame cut inside its IP packet is not IP.
            let mut t = orig[..cut.min(orig.len())].to_vec();
            let r = mark_ce(&mut t);
            if t.len() < orig.len() {
                prop_assert_eq!(r, MarkResult::NotIp);
                prop_assert_eq!(&t[..], &orig[..t.len()]);
            }
        }
    }

    /// Offer mixed-size packets at twice `rate_bps` for one simulated second to the three bucket
    /// forms; they must agree, and accept `rate * 1 s + burst` bytes to within 2%, never more.
    fn offered_at_twice_the_rate(rate_bps: u64, burst: u64, seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let start = Instant::from_secs(5);
        let mut tb = TokenBucket::new(rate_bps, burst, start);
        let sb = SharedBucket::new(rate_bps, burst, start);
        let (mut tokens, mut stamp) = bucket_init(burst, start);
        let (mut now_ns, mut carry, mut accepted, mut offered) = (0u64, 0u128, 0u64, 0u64);
        let window = 1_000_000_000u64;
        while now_ns <= window {
            let bytes: u32 = rng.gen_range(64..=1518);
            let now = Instant::from_nanos(start.as_nanos() + now_ns);
            let a = tb.conform(now, bytes);
            let b = bucket_take(&mut tokens, &mut stamp, rate_bps, burst, now, bytes);
            assert_eq!(a, b, "the two bucket forms disagree at {now:?}");
            assert_eq!(sb.take(now, bytes), if a { Take::Conform } else { Take::Exceed });
            offered += u64::from(bytes);
            if a {
                accepted += u64::from(bytes);
            }
            // Next arrival: this packet's time on a link of twice the rate, remainder carried.
            let x = u128::from(bytes) * 8 * 1_000_000_000 + carry;
            let r = u128::from(2 * rate_bps);
            now_ns += (x / r) as u64;
            carry = x % r;
        }
        let expect = rate_bps / 8 + burst;
        assert!(offered > 2 * expect - 2 * burst - 3_100, "offered {offered}");
        assert!(accepted <= expect, "{rate_bps} bit/s: accepted {accepted} > {expect}");
        let err = (expect - accepted) as f64 / expect as f64;
        assert!(err < 0.02, "{rate_bps} bit/s: accepted {accepted}, want {expect} (err {err})");
    }

    #[test]
    fn token_bucket_is_within_2_percent_at_1_mbit() {
        offered_at_twice_the_rate(1_000_000, 3_000, 1);
    }

    #[test]
    fn token_bucket_is_within_2_percent_at_10_mbit() {
        offered_at_twice_the_rate(10_000_000, 15_000, 2);
    }

    #[test]
    fn token_bucket_is_within_2_percent_at_100_mbit() {
        offered_at_twice_the_rate(100_000_000, 64_000, 3);
    }

    #[test]
    fn token_bucket_is_within_2_percent_at_10_gbit() {
        offered_at_twice_the_rate(10_000_000_000, 1_000_000, 4);
    }

    #[test]
    fn token_bucket_keeps_sub_byte_remainders() {
        // 12,345 bit/s refilled every 10 us adds 0.0154 bytes per step: a bucket that rounded
        // each refill to whole bytes would never refill at all.
        let rate = 12_345u64;
        let mut tb = TokenBucket::new(rate, 100, Instant::ZERO);
        let mut accepted = 0u64;
        let mut last = 0u64;
        for i in 0..=1_000_000u64 {
            last = i * 10_000;
            if tb.conform(Instant::from_nanos(last), 1) {
                accepted += 1;
            }
        }
        // Exactly the burst plus every whole byte earned by the last offer.
        let earned = (100 * 8_000_000_000 + u128::from(rate) * u128::from(last)) / 8_000_000_000;
        assert_eq!(u128::from(accepted), earned);
        assert_eq!(accepted, 100 + 15_431);
    }

    #[test]
    fn token_bucket_edges() {
        let t0 = Instant::from_secs(1);
        let mut tb = TokenBucket::new(8_000, 1_500, t0);
        assert_eq!(tb.tokens_bytes(), 1_500);
        // Larger than the burst: never conforms, takes nothing.
        assert!(!tb.conform(t0, 1_501));
        assert!(tb.conform(t0, 1_500));
        assert!(!tb.conform(t0, 1));
        // Time running backwards adds nothing; 1 ms at 8 kbit/s earns one byte.
        assert!(!tb.conform(Instant::ZERO, 1));
        assert!(tb.conform(t0 + core::time::Duration::from_millis(1), 1));
        assert!(!tb.conform(t0 + core::time::Duration::from_millis(1), 1));
        // An idle hour fills only to the burst.
        let later = t0 + core::time::Duration::from_secs(3600);
        assert!(tb.conform(later, 1_500));
        assert!(!tb.conform(later, 1));
        // A smaller burst cuts the tokens; rate zero never refills.
        let mut tb = TokenBucket::new(0, 10_000, t0);
        tb.set(0, 100);
        assert_eq!((tb.rate_bps(), tb.burst_bytes(), tb.tokens_bytes()), (0, 100, 100));
        assert!(tb.conform(later, 100));
        assert!(!tb.conform(Instant::MAX, 1));
        // Huge values saturate instead of overflowing.
        let mut tb = TokenBucket::new(u64::MAX, u64::MAX, Instant::ZERO);
        assert_eq!(tb.burst_bytes(), MAX_BURST_BYTES);
        // (u32::MAX bytes is more than the largest burst.)
        assert!(!tb.conform(Instant::MAX, u32::MAX));
        assert!(tb.conform(Instant::MAX, u32::try_from(MAX_BURST_BYTES).unwrap()));
        assert!(!TokenBucket::new(1, 1, Instant::ZERO).conform(Instant::MAX, u32::MAX));
    }

    proptest! {
        #[test]
        fn bucket_never_gives_more_than_rate_times_time_plus_burst(
            rate in 0u64..20_000_000_000,
            burst in 0u64..10_000_000,
            steps in proptest::collection::vec((0u64..5_000_000, 0u32..100_000), 1..200),
        ) {
            let mut tb = TokenBucket::new(rate, burst, Instant::ZERO);
            let (mut now, mut accepted) = (0u64, 0u128);
            for (dt, bytes) in steps {
                now += dt;
                if tb.conform(Instant::from_nanos(now), bytes) {
                    accepted += u128::from(bytes);
                    prop_assert!(u64::from(bytes) <= burst);
                }
                let bound = u128::from(burst) * 8_000_000_000 + u128::from(rate) * u128::from(now);
                prop_assert!(accepted * 8_000_000_000 <= bound);
            }
        }
    }

    #[test]
    fn shared_bucket_edges() {
        let t0 = Instant::from_secs(1);
        let b = SharedBucket::new(8_000, 1_500, t0);
        assert_eq!((b.rate_bps(), b.burst_bytes(), b.tokens_bytes()), (8_000, 1_500, 1_500));
        // Larger than the burst: never conforms, takes nothing.
        assert_eq!(b.take(t0, 1_501), Take::Exceed);
        assert_eq!(b.take(t0, 1_500), Take::Conform);
        assert_eq!(b.take(t0, 1), Take::Exceed);
        // Time running backwards adds nothing (and leaves the stamp); 1 ms at 8 kbit/s earns
        // one byte.
        assert!(!b.conform(Instant::ZERO, 1));
        assert!(b.conform(t0 + core::time::Duration::from_millis(1), 1));
        assert!(!b.conform(t0 + core::time::Duration::from_millis(1), 1));
        // An idle hour fills only to the burst.
        let later = t0 + core::time::Duration::from_secs(3600);
        assert!(b.conform(later, 1_500));
        assert!(!b.conform(later, 1));
        // A smaller burst cuts the tokens; rate zero never refills.
        let b = SharedBucket::new(0, 10_000, t0);
        b.set(0, 100);
        assert_eq!((b.rate_bps(), b.burst_bytes(), b.tokens_bytes()), (0, 100, 100));
        assert!(b.conform(later, 100));
        assert!(!b.conform(Instant::MAX, 1));
        // Huge values saturate instead of overflowing.
        let b = SharedBucket::new(u64::MAX, u64::MAX, Instant::ZERO);
        assert_eq!(b.burst_bytes(), MAX_BURST_BYTES);
        assert!(!b.conform(Instant::MAX, u32::MAX));
        assert!(b.conform(Instant::MAX, u32::try_from(MAX_BURST_BYTES).unwrap()));
        // A bucket stamped at zero is full at its first packet, whenever that comes.
        let b = SharedBucket::new(1_000, 500, Instant::ZERO);
        assert!(b.conform(Instant::from_secs(100), 500));
        assert!(!b.conform(Instant::from_secs(100), 1));
        // Rate raised in place: the time since the last refill is credited at the new rate.
        b.set(8_000_000, 500);
        assert!(b.conform(Instant::from_secs(100) + core::time::Duration::from_micros(100), 100));
        assert!(!b.conform(Instant::from_secs(100) + core::time::Duration::from_micros(100), 1));
        assert_eq!(b.contended(), 0);
    }

    proptest! {
        /// On one thread the shared bucket is the same bucket as [`TokenBucket`], decision for
        /// decision and byte for byte, across setting changes.
        #[test]
        fn shared_bucket_agrees_with_token_bucket(
            rate in 0u64..20_000_000_000,
            burst in 0u64..10_000_000,
            steps in proptest::collection::vec(
                (0u64..5_000_000, 0u32..100_000, proptest::option::of((0u64..20_000_000_000, 0u64..10_000_000)), any::<bool>()),
                1..200),
        ) {
            let t0 = Instant::from_secs(3);
            let mut tb = TokenBucket::new(rate, burst, t0);
            let sb = SharedBucket::new(rate, burst, t0);
            let mut now = t0.as_nanos();
            for (dt, bytes, set, back) in steps {
                // Now and then time runs backwards a little.
                now = if back { now.saturating_sub(dt / 8) } else { now + dt };
                let t = Instant::from_nanos(now);
                if let Some((r, b)) = set {
                    tb.set(r, b);
                    sb.set(r, b);
                }
                let a = tb.conform(t, bytes);
                prop_assert_eq!(sb.take(t, bytes), if a { Take::Conform } else { Take::Exceed });
                prop_assert_eq!(sb.tokens_bytes(), tb.tokens_bytes());
                prop_assert_eq!((sb.rate_bps(), sb.burst_bytes()), (tb.rate_bps(), tb.burst_bytes()));
            }
            prop_assert_eq!(sb.contended(), 0);
        }
    }

    /// Two threads hammer one bucket, each offering the full rate, on a shared simulated clock
    /// (each packet advances it): the total granted never exceeds `rate * t + burst`, and
    /// with demand at twice the rate it reaches that bound to within 2%.
    #[test]
    fn shared_bucket_two_threads_never_exceed_rate_times_time_plus_burst() {
        use std::sync::{Arc, Barrier};
        let rate = 80_000_000u64; // 10 MB/s
        let burst = 20_000u64;
        let len = 1_000u32;
        // 1000 B at 160 Mbit/s: each thread's packets advance the clock by 50 us, so together
        // the two offer twice the rate.
        let step = 50_000u64;
        let per_thread = 50_000u64;
        let b = Arc::new(SharedBucket::new(rate, burst, Instant::ZERO));
        let clock = Arc::new(AtomicU64::new(0));
        let granted = Arc::new(AtomicU64::new(0));
        let start = Arc::new(Barrier::new(2));
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (b, clock, granted, start) =
                    (b.clone(), clock.clone(), granted.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let mut mine = 0u64;
                    for _ in 0..per_thread {
                        let now = clock.fetch_add(step, Ordering::AcqRel) + step;
                        if b.conform(Instant::from_nanos(now), len) {
                            mine += u64::from(len);
                            // The invariant holds at every instant, not only at the end.
                            let total = granted.fetch_add(u64::from(len), Ordering::AcqRel)
                                + u64::from(len);
                            let t = clock.load(Ordering::Acquire);
                            let bound = u128::from(burst) * 8_000_000_000
                                + u128::from(rate) * u128::from(t);
                            assert!(
                                u128::from(total) * 8_000_000_000 <= bound,
                                "{total} B at {t} ns"
                            );
                        }
                    }
                    mine
                })
            })
            .collect();
        let total: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        assert_eq!(total, granted.load(Ordering::Acquire));
        let t = clock.load(Ordering::Acquire);
        assert_eq!(t, 2 * per_thread * step);
        let expect = rate / 8 * t / 1_000_000_000 + burst;
        assert!(total <= expect, "granted {total} > {expect}");
        let err = (expect - total) as f64 / expect as f64;
        assert!(err < 0.02, "granted {total}, want {expect} (err {err})");
        assert_eq!(b.contended(), 0);
    }

    fn spec(exceed: Exceed) -> MeterSpec {
        MeterSpec { name: "m".into(), rate_bps: 8_000, burst_bytes: 200, exceed }
    }

    #[test]
    fn meter_drops_or_marks_above_the_rate_and_counts() {
        let t0 = Instant::ZERO;
        let mut m = Meter::new(&spec(Exceed::Drop), t0);
        let mut f = v4_frame(0, 0b10, 1, 100);
        assert_eq!(m.police(t0, &mut f), Policed::Pass);
        assert_eq!(m.police(t0, &mut f), Policed::Pass);
        assert_eq!(m.police(t0, &mut f), Policed::Drop);
        assert_eq!(ecn_of(&f), Some(Ecn::Ect0));
        assert_eq!(m.stats(), MeterStats { passed: 2, passed_bytes: 200, marked: 0, dropped: 1 });

        let mut m = Meter::new(&spec(Exceed::Mark), t0);
        let mut ect = v6_frame(1, 0b01, 1, 200);
        let mut not_ect = v4_frame(0, 0b00, 2, 100);
        let mut arp = eth(0, 0x0806);
        arp.resize(60, 0);
        assert_eq!(m.police(t0, &mut ect), Policed::Pass);
        assert_eq!(ecn_of(&ect), Some(Ecn::Ect1));
        assert_eq!(m.police(t0, &mut ect), Policed::PassMarked);
        assert_eq!(ecn_of(&ect), Some(Ecn::Ce));
        // Already CE: still let through as marked.
        assert_eq!(m.police(t0, &mut ect), Policed::PassMarked);
        assert_eq!(m.police(t0, &mut not_ect), Policed::Drop);
        assert_eq!(ecn_of(&not_ect), Some(Ecn::NotEct));
        assert_eq!(m.police(t0, &mut arp), Policed::Drop);
        assert_eq!(m.stats(), MeterStats { passed: 1, passed_bytes: 200, marked: 2, dropped: 2 });
        // 100 ms at 8 kbit/s earns 100 bytes.
        assert_eq!(m.police(Instant::from_millis(100), &mut not_ect), Policed::Pass);
        m.set(&MeterSpec { exceed: Exceed::Drop, ..spec(Exceed::Drop) });
        assert_eq!(m.police(Instant::from_millis(100), &mut ect), Policed::Drop);
        assert_eq!(m.bucket().burst_bytes(), 200);
    }

    /// One packet offered to a queue in the incast simulation.
    struct Offer {
        at: u64,
        frame: Vec<u8>,
        v6: bool,
        tags: usize,
        ecn: u8,
        seq: u32,
    }

    fn seq_of(f: &[u8], v6: bool, tags: usize) -> u32 {
        let o = l3_off(tags) + if v6 { 48 } else { 28 };
        u32::from_be_bytes([f[o], f[o + 1], f[o + 2], f[o + 3]])
    }

    /// 8 senders, each a back-to-back burst of `per_sender` mixed-size packets at 10 Gbit/s,
    /// into a queue shaped to 1 Gbit/s. Checks marking, drops, FIFO order and the departure
    /// rate; returns the stats.
    fn incast(threshold: usize, limit: usize, per_sender: u32) -> QueueStats {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let rate = 1_000_000_000u64;
        let t0 = 1_000_000u64;
        let mut offers = Vec::new();
        for s in 0..8u32 {
            let mut at = t0 + u64::from(s) * 100;
            let v6 = s >= 4;
            let tags = (s % 3) as usize;
            // ECT(0), ECT(1), Not-ECT, ECT(0) again; one in eight starts CE.
            let ecn = match s % 4 {
                0 | 3 => 0b10,
                1 => 0b01,
                _ => 0b00,
            };
            for i in 0..per_sender {
                let len = rng.gen_range(100..=1514usize);
                let ecn = if s == 3 && i % 8 == 7 { 0b11 } else { ecn };
                let seq = s << 16 | i;
                let frame =
                    if v6 { v6_frame(tags, ecn, seq, len) } else { v4_frame(tags, ecn, seq, len) };
                offers.push(Offer { at, frame, v6, tags, ecn, seq });
                at += (len as u64 * 8).div_ceil(10);
            }
        }
        offers.sort_by_key(|o| o.at);

        let qspec = QueueSpec { port: 3, rate_bps: rate, ecn_threshold: threshold, limit };
        let mut q = EgressQueue::new(&qspec, Instant::from_nanos(0));
        assert_eq!((q.port(), q.limit(), q.len(), q.poll_timeout()), (3, limit, 0, None));
        let mut out = Batch::new(32);
        let mut pkt = PacketBuf::new();
        // (seq, expected ECN bits, v6, tags) in the order the packets must leave.
        let mut expect: Vec<(u32, u8, bool, usize)> = Vec::new();
        let mut sent: Vec<(u64, Vec<u8>)> = Vec::new();
        let (mut marked, mut dropped) = (0u64, 0u64);
        let mut drain = |q: &mut EgressQueue, now: u64, sent: &mut Vec<(u64, Vec<u8>)>| {
            let n = q.dequeue(Instant::from_nanos(now), &mut out);
            assert_eq!(n, out.len());
            for p in out.iter() {
                sent.push((now, p.data().to_vec()));
            }
            out.clear();
        };
        let mut next = offers.iter().peekable();
        loop {
            let arrival = next.peek().map(|o| o.at);
            let departure = q.poll_timeout().map(|t| t.as_nanos());
            match (arrival, departure) {
                (Some(a), d) if d.is_none_or(|d| a < d) => {
                    let Some(o) = next.next() else { unreachable!() };
                    drain(&mut q, a, &mut sent);
                    let now = Instant::from_nanos(a);
                    let (held, depth) = (q.len(), q.depth(now));
                    pkt.set_frame(&o.frame);
                    let r = q.enqueue(now, &mut pkt);
                    let ect = o.ecn == 0b01 || o.ecn == 0b10;
                    match r {
                        Enqueued::DroppedFull => {
                            assert_eq!(held, limit, "drop below the limit");
                            assert_eq!(pkt.data(), &o.frame[..], "dropped packet touched");
                            dropped += 1;
                        }
                        Enqueued::QueuedMarked => {
                            assert!(held < limit && depth >= threshold && ect);
                            expect.push((o.seq, 0b11, o.v6, o.tags));
                            marked += 1;
                        }
                        Enqueued::Queued => {
                            assert!(held < limit);
                            assert!(depth < threshold || !ect, "ECT packet not marked");
                            expect.push((o.seq, o.ecn, o.v6, o.tags));
                        }
                    }
                    assert_eq!(q.len(), held + usize::from(r != Enqueued::DroppedFull));
                }
                (_, Some(d)) => drain(&mut q, d, &mut sent),
                (None, None) => break,
                (Some(_), None) => unreachable!(),
            }
        }

        // FIFO order, marks exactly as decided at enqueue, IPv4 checksums valid.
        assert_eq!(sent.len(), expect.len());
        for ((_, f), &(seq, ecn, v6, tags)) in sent.iter().zip(&expect) {
            assert_eq!(seq_of(f, v6, tags), seq);
            assert_eq!(ecn_of(f), Some(Ecn::from_bits(ecn)), "packet {seq:#x}");
            if !v6 {
                assert!(v4_checksum_ok(f, tags), "packet {seq:#x}");
            }
        }
        // The queue never idles once backlogged, so the departures run at the shaped rate.
        let (first, last) = (sent[0].0, sent[sent.len() - 1].0);
        let bytes: u64 = sent[1..].iter().map(|(_, f)| f.len() as u64).sum();
        let measured = bytes as f64 * 8e9 / (last - first) as f64;
        let err = (measured - rate as f64).abs() / rate as f64;
        assert!(err < 0.02, "departure rate {measured} bit/s vs {rate}");
        assert!(err < 1e-5, "shaping should be exact when backlogged: {measured}");

        let st = q.stats();
        assert_eq!(st.enqueued, expect.len() as u64);
        assert_eq!(st.marked, marked);
        assert_eq!(st.dropped_full, dropped);
        assert_eq!(st.sent, sent.len() as u64);
        assert_eq!(st.sent_bytes, sent.iter().map(|(_, f)| f.len() as u64).sum::<u64>());
        assert!(st.max_depth <= limit as u64);
        assert!(q.is_empty());
        st
    }

    #[test]
    fn incast_marks_ect_past_the_threshold_and_drops_only_at_the_limit() {
        let st = incast(32, 128, 48);
        assert!(st.marked > 50, "{st:?}");
        assert!(st.dropped_full > 0, "{st:?}");
        assert_eq!(st.max_depth, 128);
    }

    #[test]
    fn incast_below_the_limit_marks_without_dropping() {
        let st = incast(16, 1024, 48);
        assert_eq!(st.dropped_full, 0);
        assert!(st.marked > 100, "{st:?}");
        assert!(st.max_depth > 16 && st.max_depth <= 384, "{st:?}");
    }

    #[test]
    fn queue_timing_batches_and_unshaped() {
        let qs = QueueSpec { port: 1, rate_bps: 8_000_000, ecn_threshold: 100, limit: 4 };
        let mut q = EgressQueue::new(&qs, Instant::ZERO);
        let mut pkt = PacketBuf::new();
        // 1000 bytes at 8 Mbit/s take 1 ms each.
        for i in 0..4 {
            pkt.set_frame(&v4_frame(0, 0, i, 1000));
            assert_eq!(q.enqueue(Instant::ZERO, &mut pkt), Enqueued::Queued);
        }
        pkt.set_frame(&v4_frame(0, 0, 9, 1000));
        assert_eq!(q.enqueue(Instant::ZERO, &mut pkt), Enqueued::DroppedFull);
        assert_eq!(q.depth(Instant::ZERO), 4);
        assert_eq!(q.depth(Instant::from_millis(2)), 2);
        assert_eq!(q.poll_timeout(), Some(Instant::from_millis(1)));
        let mut out = Batch::new(1);
        assert_eq!(q.dequeue(Instant::from_micros(999), &mut out), 0);
        // Three are due, but the batch holds one.
        assert_eq!(q.dequeue(Instant::from_millis(3), &mut out), 1);
        assert_eq!(seq_of(out.packets()[0].data(), false, 0), 0);
        assert_eq!(q.dequeue(Instant::from_millis(3), &mut out), 0);
        out.clear();
        assert_eq!(q.dequeue(Instant::from_millis(3), &mut out), 1);
        assert_eq!(seq_of(out.packets()[0].data(), false, 0), 1);
        assert_eq!(q.poll_timeout(), Some(Instant::from_millis(3)));
        // After an idle gap the link restarts from the arrival time.
        out.clear();
        let mut big = Batch::new(8);
        assert_eq!(q.dequeue(Instant::from_millis(10), &mut big), 2);
        pkt.set_frame(&v4_frame(0, 0, 5, 500));
        assert_eq!(q.enqueue(Instant::from_millis(20), &mut pkt), Enqueued::Queued);
        assert_eq!(q.poll_timeout(), Some(Instant::from_micros(20_500)));

        // Rate zero: unshaped, packets may leave at once; limit zero drops everything.
        let mut q = EgressQueue::new(&QueueSpec { rate_bps: 0, ..qs.clone() }, Instant::ZERO);
        pkt.set_frame(&v4_frame(0, 0, 1, 64));
        assert_eq!(q.enqueue(Instant::from_millis(1), &mut pkt), Enqueued::Queued);
        assert_eq!(q.poll_timeout(), Some(Instant::from_millis(1)));
        assert_eq!(q.depth(Instant::from_millis(1)), 0);
        let mut q = EgressQueue::new(&QueueSpec { limit: 0, ..qs }, Instant::ZERO);
        assert_eq!(q.enqueue(Instant::ZERO, &mut pkt), Enqueued::DroppedFull);
        assert_eq!(q.dequeue(Instant::MAX, &mut big), 0);
        assert_eq!(q.depth(Instant::ZERO), 0);
    }

    #[test]
    fn queue_set_keeps_order_and_drops_the_newest_when_shrinking() {
        let qs = QueueSpec { port: 2, rate_bps: 8_000_000, ecn_threshold: 100, limit: 4 };
        let mut q = EgressQueue::new(&qs, Instant::ZERO);
        let mut pkt = PacketBuf::new();
        let mut out = Batch::new(8);
        // Move the head off slot 0 first, so the ring wraps.
        for i in 0..3 {
            pkt.set_frame(&v4_frame(0, 0b10, 100 + i, 1000));
            q.enqueue(Instant::ZERO, &mut pkt);
        }
        assert_eq!(q.dequeue(Instant::from_millis(2), &mut out), 2);
        for i in 0..3 {
            pkt.set_frame(&v4_frame(0, 0b10, i, 1000));
            assert_eq!(q.enqueue(Instant::from_millis(2), &mut pkt), Enqueued::Queued);
        }
        assert_eq!(q.len(), 4);
        // Grow: nothing lost, order kept; the new threshold applies to the next arrival.
        q.set(&QueueSpec { limit: 6, ecn_threshold: 1, ..qs.clone() });
        assert_eq!((q.limit(), q.len(), q.port()), (6, 4, 2));
        pkt.set_frame(&v4_frame(0, 0b10, 3, 1000));
        assert_eq!(q.enqueue(Instant::from_millis(2), &mut pkt), Enqueued::QueuedMarked);
        // Shrink below what is held: the two newest go, counted.
        q.set(&QueueSpec { limit: 3, ..qs });
        assert_eq!((q.limit(), q.len(), q.stats().dropped_full), (3, 3, 2));
        // The link is free when the last kept packet (seq 1, leaving at 5 ms) has left.
        pkt.set_frame(&v4_frame(0, 0, 9, 1000));
        out.clear();
        assert_eq!(q.dequeue(Instant::from_millis(3), &mut out), 1);
        assert_eq!(q.enqueue(Instant::from_millis(3), &mut pkt), Enqueued::Queued);
        assert_eq!(q.dequeue(Instant::MAX, &mut out), 3);
        let seqs: Vec<u32> = out.iter().map(|p| seq_of(p.data(), false, 0)).collect();
        assert_eq!(seqs, [102, 0, 1, 9]);
        let mut q2 = EgressQueue::new(&QueueSpec { limit: 0, ..qs_of(&q) }, Instant::ZERO);
        q2.set(&QueueSpec { limit: 1, ..qs_of(&q) });
        pkt.set_frame(&v4_frame(0, 0, 1, 1000));
        assert_eq!(q2.enqueue(Instant::ZERO, &mut pkt), Enqueued::Queued);
    }

    proptest! {
        #[test]
        fn queue_invariants_under_random_traffic(
            rate in prop_oneof![Just(0u64), 1_000u64..100_000_000_000],
            threshold in 0usize..10,
            limit in 0usize..12,
            ops in proptest::collection::vec(
                (0u64..200_000, 60usize..1600, 0u8..4, any::<bool>(), 1usize..5), 1..120),
        ) {
            let qs = QueueSpec { port: 0, rate_bps: rate, ecn_threshold: threshold, limit };
            let mut q = EgressQueue::new(&qs, Instant::ZERO);
            let mut pkt = PacketBuf::new();
            let (mut now, mut seq) = (0u64, 0u32);
            let mut fifo = std::collections::VecDeque::new();
            let mut prev_depart = Instant::ZERO;
            for (dt, len, ecn, deq, batch) in ops {
                now += dt;
                let t = Instant::from_nanos(now);
                let linear = (0..q.len).filter(|&i| q.slot(i).is_some_and(|s| s.depart > t)).count();
                prop_assert_eq!(q.depth(t), linear);
                if deq {
                    let mut out = Batch::new(batch);
                    let n = q.dequeue(t, &mut out);
                    prop_assert!(n <= batch);
                    for p in out.iter() {
                        prop_assert_eq!(Some(seq_of(p.data(), false, 0)), fifo.pop_front());
                    }
                    // Whatever is left is due later, or the batch was full.
                    prop_assert!(n == batch || q.poll_timeout().is_none_or(|d| d > t));
                } else {
                    pkt.set_frame(&v4_frame(0, ecn, seq, len));
                    let held = q.len();
                    let r = q.enqueue(t, &mut pkt);
                    prop_assert_eq!(r == Enqueued::DroppedFull, held == limit);
                    if r != Enqueued::DroppedFull {
                        fifo.push_back(seq);
                        let depart = q.slot(q.len - 1).map(|s| s.depart).unwrap_or(Instant::MAX);
                        let start = prev_depart.max(t);
                        if rate == 0 {
                            prop_assert_eq!(depart, start);
                        } else {
                            // Never faster than the rate; at most 1 ns of carried remainder.
                            let tx = (len as u128 * 8_000_000_000 / u128::from(rate)) as u64;
                            let took = depart.as_nanos() - start.as_nanos();
                            prop_assert!(took == tx || took == tx + 1, "took {} tx {}", took, tx);
                        }
                        prev_depart = depart;
                    }
                    seq += 1;
                }
                let st = q.stats();
                prop_assert_eq!(st.enqueued, st.sent + q.len() as u64);
                prop_assert_eq!(q.len(), fifo.len());
                prop_assert!(q.len() <= limit && st.max_depth <= limit as u64);
            }
        }
    }

    fn qs_of(q: &EgressQueue) -> QueueSpec {
        QueueSpec { port: q.port(), rate_bps: 8_000_000, ecn_threshold: 100, limit: q.limit() }
    }

    #[test]
    fn queue_threshold_zero_marks_every_ect_packet() {
        let qs = QueueSpec { port: 1, rate_bps: 1_000_000, ecn_threshold: 0, limit: 8 };
        let mut q = EgressQueue::new(&qs, Instant::ZERO);
        let mut pkt = PacketBuf::from_frame(&v4_frame(1, 0b01, 0, 80));
        assert_eq!(q.enqueue(Instant::ZERO, &mut pkt), Enqueued::QueuedMarked);
        let mut pkt = PacketBuf::from_frame(&v4_frame(1, 0b00, 1, 80));
        assert_eq!(q.enqueue(Instant::ZERO, &mut pkt), Enqueued::Queued);
        let mut out = Batch::new(8);
        assert_eq!(q.dequeue(Instant::from_secs(1), &mut out), 2);
        assert_eq!(ecn_of(out.packets()[0].data()), Some(Ecn::Ce));
        assert!(v4_checksum_ok(out.packets()[0].data(), 1));
        assert_eq!(ecn_of(out.packets()[1].data()), Some(Ecn::NotEct));
        assert_eq!(q.stats().marked, 1);
    }
}
