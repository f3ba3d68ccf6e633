//! The Generic Flow Table (GFT): the exact-match cache of unified flows that the fast path
//! consults for every packet.
//!
//! Layout (all reserved once in [`Gft::new`]; nothing allocates afterwards, and the index is
//! first written at the first insert, so huge pages advised right after `new` take effect):
//!
//! - a *slab* of entries, one 192-byte, cache-line-aligned slot per flow. A slot holds the
//!   [`FlowEntry`] (`#[repr(C)]`, so the key and the per-packet fields — action, epoch,
//!   `last_seen`, packet and byte counters — sit in the slot's first two cache lines), the flow's
//!   64-bit hash and a free-list link. Slots never move while their flow lives, so a [`FlowId`]
//!   stays valid until that flow is removed. The slab `Vec` is reserved to the capacity, so
//!   pages are only touched as flows arrive;
//! - an *index* of 64-byte buckets, each with 8 slots of (32-bit tag, 32-bit slab index). Every
//!   key has two candidate buckets (bucketized cuckoo hashing): `b1` from the low 32 hash bits,
//!   `b2 = (c(tag) - b1) mod n`, where the tag is the high 32 bits. The map `b -> c(tag) - b` is
//!   its own inverse, so an entry's other bucket is known from its bucket and tag alone and a
//!   displacement walk never reads the slab. Bucket counts need not be powers of two (both
//!   reductions are multiply-shift), so the index is sized to a 7/8 load at full capacity:
//!   about 9 bytes per flow. Together: about 201 bytes per flow (see [`Gft::memory_bytes`]).
//!
//! Bounded work everywhere: a lookup reads at most two buckets; an insert that finds both
//! buckets full searches a cuckoo path breadth-first over at most [`MAX_PATH_NODES`] buckets.
//! When that fails the least recently seen of the (up to 16) flows in the two buckets is evicted;
//! when the slab is full a CLOCK hand samples [`CLOCK_SAMPLE`] consecutive slots and evicts the
//! least recently seen of them. Idle aging ([`Gft::expire`]) walks a cursor over the slab a
//! budget of slots at a time. Every displaced flow is handed back to the caller.
//!
//! Prefetching: [`Gft::lookup_batch`] works in stages, with real software prefetches
//! (`PREFETCHT0`, the crate's one small `unsafe` module): prefetch every first bucket, then scan
//! the buckets' tags and prefetch the candidate entries' two hot cache lines (or, for the roughly
//! one flow in ten that sits in its second bucket, that bucket), then compare keys, so many
//! misses are in flight at once. The three stages are also public ([`Gft::prefetch_buckets`],
//! [`Gft::scan_buckets`], [`Gft::resolve`]), so the engine can run them on different chunks of a
//! batch (a software pipeline) and keep other work between a prefetch and its use.
//!
//! This module is not concurrent (one table per worker shard, no locks), does not read the clock
//! (callers pass `now`), and knows nothing of what an [`ActionId`] means.

use crate::key::FlowKey;
use crate::prefetch::prefetch_read;
use core::fmt;
use core::time::Duration;
use snic_time::Instant;

/// Index of a compiled action in the engine's action table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ActionId(pub u32);

/// Where [`Gft::scan_buckets`] found a key's candidate entry (opaque; for [`Gft::resolve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate(u32);

impl Default for Candidate {
    /// No candidate.
    fn default() -> Self {
        Candidate(NONE)
    }
}

/// Slot of a flow in the table; valid until the next insert/remove/expire.
///
/// (In this implementation an id stays valid for as long as its flow is in the table: slots
/// never move. Callers should still not rely on more than the documented contract.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowId(pub u32);

/// Most flows a table may be built for.
pub const MAX_CAPACITY: usize = 1 << 26;

/// Slots per index bucket.
const SLOTS: usize = 8;
/// The index has one bucket per this many flows of capacity (a 7/8 load when full).
const FLOWS_PER_BUCKET: usize = 7;
/// Most buckets a cuckoo path search examines before giving up.
pub const MAX_PATH_NODES: usize = 48;
/// Longest cuckoo path (bucket positions, including the final empty slot).
const MAX_PATH: usize = 6;
/// Slab slots the CLOCK hand examines per eviction when the table is full.
pub const CLOCK_SAMPLE: usize = 8;
/// Keys handled per stage in [`Gft::lookup_batch`].
const BATCH: usize = 64;
/// "No slot" in free-list links and candidate arrays.
const NONE: u32 = u32::MAX;
/// Candidate not known yet: the second bucket must be scanned.
const PENDING: u32 = u32::MAX - 1;

/// Configuration of a [`Gft`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GftConfig {
    /// Most flows the table holds, `1..=MAX_CAPACITY`.
    pub capacity: usize,
    /// A flow not seen for this long is removed by [`Gft::expire`].
    pub idle_timeout: Duration,
    /// Secret hash seed, so a remote sender cannot aim collisions at one bucket.
    pub seed: u64,
}

impl Default for GftConfig {
    /// 1,048,576 flows, 30 s idle timeout, a fixed seed (set a random one in production).
    fn default() -> Self {
        GftConfig {
            capacity: 1 << 20,
            idle_timeout: Duration::from_secs(30),
            seed: 0x5eed_f10e_7ab1_e000,
        }
    }
}

/// One cached unified flow.
///
/// `#[repr(C)]` with the key first and the per-packet fields right after it: in the table's
/// cache-line-aligned slots, a fast-path hit touches exactly two cache lines (the meter fields
/// sit in the third).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct FlowEntry {
    /// The exact-match key. Never change it through [`Gft::entry_mut`]: re-insert instead.
    pub key: FlowKey,
    /// The compiled action.
    pub action: ActionId,
    /// The vPort the flow belongs to.
    pub vport: u16,
    /// Engine-defined bits (e.g. "copy TCP SYN/FIN/RST to the slow path").
    pub flags: u16,
    /// The vPort's epoch when the action was compiled.
    pub epoch: u32,
    /// When the flow was installed.
    pub created: Instant,
    /// When the flow last carried a packet (drives idle aging and eviction).
    pub last_seen: Instant,
    /// Packets counted on this flow.
    pub packets: u64,
    /// Bytes counted on this flow.
    pub bytes: u64,
    /// Per-flow token bucket state, owned by the engine.
    pub meter_tokens: u64,
    /// When `meter_tokens` was last refilled.
    pub meter_stamp: Instant,
}

impl FlowEntry {
    /// A fresh entry installed at `now`: counters and meter state zero, `last_seen = now`.
    pub fn new(key: FlowKey, action: ActionId, vport: u16, epoch: u32, now: Instant) -> Self {
        FlowEntry {
            key,
            action,
            vport,
            flags: 0,
            epoch,
            created: now,
            last_seen: now,
            packets: 0,
            bytes: 0,
            meter_tokens: 0,
            meter_stamp: now,
        }
    }
}

/// Counters of a [`Gft`] (cumulative since it was built; [`Gft::clear`] keeps them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GftStats {
    /// Calls to [`Gft::insert`].
    pub inserts: u64,
    /// Inserts that replaced an entry with the same key.
    pub replaced: u64,
    /// Entries removed by [`Gft::remove`] or [`Gft::remove_id`].
    pub removed: u64,
    /// Entries removed by idle aging.
    pub expired: u64,
    /// Entries evicted because the table was full.
    pub evicted_full: u64,
    /// Entries evicted because both of a new key's buckets were full and no cuckoo path existed.
    pub evicted_collision: u64,
    /// Flows in the table now.
    pub len: usize,
    /// Most flows the table holds.
    pub capacity: usize,
}

/// Why a [`Gft`] could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GftError {
    /// The capacity is zero or above [`MAX_CAPACITY`].
    BadCapacity {
        /// The capacity asked for.
        requested: usize,
        /// The largest capacity allowed.
        max: usize,
    },
    /// The allocator refused a reservation.
    OutOfMemory {
        /// Which part of the table.
        what: &'static str,
        /// Bytes asked for.
        bytes: usize,
    },
}

impl fmt::Display for GftError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GftError::BadCapacity { requested, max } => {
                write!(f, "flow table capacity {requested} is outside 1..={max}")
            }
            GftError::OutOfMemory { what, bytes } => {
                write!(f, "cannot reserve {bytes} bytes for the flow table's {what}")
            }
        }
    }
}

impl std::error::Error for GftError {}

/// A slab slot: the entry, its hash (so removal never rehashes) and the free-list link.
/// 144 + 8 + 4 bytes, padded to three cache lines.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Slot {
    e: FlowEntry,
    hash: u64,
    next_free: u32,
}

const _: () = assert!(core::mem::size_of::<FlowEntry>() == 144);
const _: () = assert!(core::mem::size_of::<Slot>() == 192);

/// One index bucket: 8 tags (0 = empty slot) and the slab indices they point to.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Bucket {
    tags: [u32; SLOTS],
    idx: [u32; SLOTS],
}

const _: () = assert!(core::mem::size_of::<Bucket>() == 64);

impl Bucket {
    const EMPTY: Bucket = Bucket { tags: [0; SLOTS], idx: [0; SLOTS] };

    /// Bit `i` set where `tags[i] == tag` (written so it compiles to one vector compare).
    #[inline(always)]
    fn matches(&self, tag: u32) -> u32 {
        let mut m = 0u32;
        for (i, &t) in self.tags.iter().enumerate() {
            m |= u32::from(t == tag) << i;
        }
        m
    }

    /// The first empty slot.
    #[inline]
    fn empty_slot(&self) -> Option<usize> {
        let m = self.matches(0);
        (m != 0).then(|| m.trailing_zeros() as usize)
    }
}

/// The tag of a hash: its high 32 bits, never 0 (0 marks an empty slot).
#[inline(always)]
fn tag_of(hash: u64) -> u32 {
    let t = (hash >> 32) as u32;
    t | u32::from(t == 0)
}

/// `x * n / 2^32`: maps a uniform 32-bit value onto `0..n` without a division.
#[inline(always)]
fn reduce(x: u32, n: u64) -> usize {
    ((u64::from(x) * n) >> 32) as usize
}

/// Eight bytes of an address, native order.
#[inline(always)]
fn word(a: &[u8; 16], hi: bool) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(if hi { &a[8..] } else { &a[..8] });
    u64::from_ne_bytes(x)
}

// Key equality as one OR of word differences, without a branch per field. Covers all 80
// bytes; this size assertion and the `key_eq_is_equality` property keep it honest if the key
// changes.
const _: () = assert!(core::mem::size_of::<FlowKey>() == 80);

/// Whether two keys are equal (same result as `==`).
#[inline(always)]
fn key_eq(a: &FlowKey, b: &FlowKey) -> bool {
    let tail = |k: &FlowKey| {
        (
            u64::from(k.vni) | u64::from(k.src_port) << 32 | u64::from(k.dst_port) << 48,
            u64::from(k.port)
                | u64::from(k.proto) << 16
                | u64::from(k.flags) << 24
                | u64::from(k.reserved) << 32,
        )
    };
    let (ta, ma) = tail(a);
    let (tb, mb) = tail(b);
    let d = (word(&a.src, false) ^ word(&b.src, false))
        | (word(&a.src, true) ^ word(&b.src, true))
        | (word(&a.dst, false) ^ word(&b.dst, false))
        | (word(&a.dst, true) ^ word(&b.dst, true))
        | (word(&a.outer_src, false) ^ word(&b.outer_src, false))
        | (word(&a.outer_src, true) ^ word(&b.outer_src, true))
        | (word(&a.outer_dst, false) ^ word(&b.outer_dst, false))
        | (word(&a.outer_dst, true) ^ word(&b.outer_dst, true))
        | (ta ^ tb)
        | (ma ^ mb);
    d == 0
}

/// Number of index buckets for a capacity.
fn buckets_for(capacity: usize) -> usize {
    capacity.div_ceil(FLOWS_PER_BUCKET).max(1)
}

/// A cuckoo path: positions `p[0] .. p[len-1]`; the entry at `p[k]` moves to `p[k+1]`, the
/// last position is empty, and the new key goes into `p[0]`.
#[derive(Clone, Copy)]
struct Path {
    pos: [(u32, u8); MAX_PATH],
    len: usize,
}

/// A bucket reached by the path search: `slot` of the parent bucket holds an entry whose other
/// bucket is `bucket`.
#[derive(Clone, Copy)]
struct Node {
    bucket: u32,
    parent: u8,
    slot: u8,
    depth: u8,
}

/// The GFT exact-match flow table. See the module documentation for the design.
pub struct Gft {
    slab: Vec<Slot>,
    live: Vec<u64>,
    buckets: Vec<Bucket>,
    n_buckets: u64,
    capacity: usize,
    len: usize,
    free_head: u32,
    hand: usize,
    cursor: usize,
    idle_timeout: Duration,
    seed: u64,
    stats: GftStats,
}

impl fmt::Debug for Gft {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gft")
            .field("capacity", &self.capacity)
            .field("len", &self.len)
            .field("buckets", &self.n_buckets)
            .field("idle_timeout", &self.idle_timeout)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Gft {
    /// Build a table for `cfg.capacity` flows. The slab and the index (about 9 bytes per flow)
    /// are reserved, not touched: the index is written at the first insert, the slab as flows
    /// arrive.
    pub fn new(cfg: GftConfig) -> Result<Gft, GftError> {
        if cfg.capacity == 0 || cfg.capacity > MAX_CAPACITY {
            return Err(GftError::BadCapacity { requested: cfg.capacity, max: MAX_CAPACITY });
        }
        let n_buckets = buckets_for(cfg.capacity);
        Self::with_buckets(cfg, n_buckets)
    }

    /// Build with an explicit bucket count (tests use tiny indexes to force collisions).
    fn with_buckets(cfg: GftConfig, n_buckets: usize) -> Result<Gft, GftError> {
        let cap = cfg.capacity;
        let mut slab: Vec<Slot> = Vec::new();
        slab.try_reserve_exact(cap).map_err(|_| GftError::OutOfMemory {
            what: "flow entries",
            bytes: cap.saturating_mul(core::mem::size_of::<Slot>()),
        })?;
        let mut buckets: Vec<Bucket> = Vec::new();
        buckets.try_reserve_exact(n_buckets).map_err(|_| GftError::OutOfMemory {
            what: "index",
            bytes: n_buckets.saturating_mul(core::mem::size_of::<Bucket>()),
        })?;
        // Reserved, not written: the index is filled with empty buckets at the first insert
        // ([`Gft::ensure_index`]), so pages the I/O layer advises for huge pages right after
        // `new` are first touched afterwards (and can be faulted in as huge pages).
        let words = cap.div_ceil(64);
        let mut live: Vec<u64> = Vec::new();
        live.try_reserve_exact(words)
            .map_err(|_| GftError::OutOfMemory { what: "live bitmap", bytes: words * 8 })?;
        live.resize(words, 0);
        Ok(Gft {
            slab,
            live,
            buckets,
            n_buckets: n_buckets as u64,
            capacity: cap,
            len: 0,
            free_head: NONE,
            hand: 0,
            cursor: 0,
            idle_timeout: cfg.idle_timeout,
            seed: cfg.seed,
            stats: GftStats { capacity: cap, ..GftStats::default() },
        })
    }

    /// Fill the index with empty buckets if it is not yet (before the first insert). Until
    /// then the table is empty, and every lookup misses without reading the index.
    #[inline]
    fn ensure_index(&mut self) {
        if self.buckets.is_empty() {
            // Within the reserved capacity: never reallocates.
            self.buckets.resize(self.n_buckets as usize, Bucket::EMPTY);
        }
    }

    /// The table's hash of `key` (keyed by the table's seed).
    #[inline]
    pub fn hash(&self, key: &FlowKey) -> u64 {
        key.hash_with(self.seed)
    }

    #[inline(always)]
    fn bucket1(&self, hash: u64) -> usize {
        reduce(hash as u32, self.n_buckets)
    }

    /// The other candidate bucket of an entry with `tag` that sits in bucket `b`.
    #[inline(always)]
    fn alt(&self, b: usize, tag: u32) -> usize {
        let c = reduce(tag, self.n_buckets);
        if c >= b { c - b } else { c + self.n_buckets as usize - b }
    }

    /// Start loading the buckets of `hash` (a software prefetch: the core does not wait for
    /// it). Call it a few packets ahead of [`Gft::lookup`].
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        if self.buckets.is_empty() {
            return;
        }
        let b1 = self.bucket1(hash);
        let b2 = self.alt(b1, tag_of(hash));
        prefetch_read(&self.buckets[b1]);
        prefetch_read(&self.buckets[b2]);
    }

    /// The slab index of `key` in bucket `b`, if there.
    #[inline(always)]
    fn probe(&self, b: usize, tag: u32, key: &FlowKey) -> Option<(usize, u32)> {
        let bk = &self.buckets[b];
        let mut m = bk.matches(tag);
        while m != 0 {
            let s = m.trailing_zeros() as usize;
            let i = bk.idx[s];
            if key_eq(&self.slab[i as usize].e.key, key) {
                return Some((s, i));
            }
            m &= m - 1;
        }
        None
    }

    /// Where `key` is: (bucket, slot, slab index).
    #[inline]
    fn find(&self, hash: u64, key: &FlowKey) -> Option<(usize, usize, u32)> {
        if self.buckets.is_empty() {
            return None;
        }
        let tag = tag_of(hash);
        let b1 = self.bucket1(hash);
        if let Some((s, i)) = self.probe(b1, tag, key) {
            return Some((b1, s, i));
        }
        let b2 = self.alt(b1, tag);
        if b2 == b1 {
            return None;
        }
        self.probe(b2, tag, key).map(|(s, i)| (b2, s, i))
    }

    /// Look `key` up; `hash` must be [`Gft::hash`] of it.
    #[inline]
    pub fn lookup(&self, hash: u64, key: &FlowKey) -> Option<FlowId> {
        self.find(hash, key).map(|(_, _, i)| FlowId(i))
    }

    /// Batch lookup: `hashes[i]`/`keys[i]` -> `out[i]`. Prefetches all first buckets, then
    /// scans them and prefetches the candidate entries (and the second buckets that are
    /// needed), then compares keys, so the cache misses of a batch overlap. Same results as
    /// [`Gft::lookup`] on each key.
    ///
    /// Handles the first `min(hashes.len(), keys.len(), out.len())` items; the rest of `out` is
    /// left as it was.
    pub fn lookup_batch(&self, hashes: &[u64], keys: &[FlowKey], out: &mut [Option<FlowId>]) {
        debug_assert!(hashes.len() == keys.len() && keys.len() == out.len());
        let n = hashes.len().min(keys.len()).min(out.len());
        let mut cand = [Candidate::default(); BATCH];
        let mut start = 0;
        while start < n {
            let end = n.min(start + BATCH);
            let c = &mut cand[..end - start];
            self.prefetch_buckets(&hashes[start..end]);
            self.scan_buckets(&hashes[start..end], c);
            self.resolve(&hashes[start..end], &keys[start..end], c, &mut out[start..end]);
            start = end;
        }
    }

    /// First stage of a pipelined batch lookup: start loading the first bucket of every hash
    /// (software prefetch). Then, ideally after other work, [`Gft::scan_buckets`].
    #[inline]
    pub fn prefetch_buckets(&self, hashes: &[u64]) {
        if self.buckets.is_empty() {
            return;
        }
        for h in hashes {
            prefetch_read(&self.buckets[self.bucket1(*h)]);
        }
    }

    /// Second stage: scan each hash's first bucket for its tag and note the candidate slot in
    /// `cand[i]` (prefetching the candidate entry's two hot cache lines), or, for the roughly
    /// one flow in ten that sits in its second bucket, prefetch that bucket. Then
    /// [`Gft::resolve`]. Handles `min(hashes.len(), cand.len())` items.
    #[inline]
    pub fn scan_buckets(&self, hashes: &[u64], cand: &mut [Candidate]) {
        if self.buckets.is_empty() {
            cand.fill(Candidate(NONE));
            return;
        }
        for (h, c) in hashes.iter().zip(cand.iter_mut()) {
            let tag = tag_of(*h);
            let b1 = self.bucket1(*h);
            let bk = &self.buckets[b1];
            let m = bk.matches(tag);
            *c = if m != 0 {
                let i = bk.idx[m.trailing_zeros() as usize];
                if let Some(s) = self.slab.get(i as usize) {
                    prefetch_read(&s.e.key);
                    prefetch_read(&s.e.packets);
                }
                Candidate(i)
            } else {
                let b2 = self.alt(b1, tag);
                if b2 == b1 {
                    Candidate(NONE)
                } else {
                    prefetch_read(&self.buckets[b2]);
                    Candidate(PENDING)
                }
            };
        }
    }

    /// Last stage: compare each key with its candidate (scanning the second bucket where the
    /// candidate is pending) into `out[i]`: the same result as [`Gft::lookup`]. `cand` must come
    /// from [`Gft::scan_buckets`] of the same hashes on the unchanged table. Handles the
    /// shortest of the four slices.
    #[inline]
    pub fn resolve(
        &self,
        hashes: &[u64],
        keys: &[FlowKey],
        cand: &[Candidate],
        out: &mut [Option<FlowId>],
    ) {
        for (((h, k), c), o) in hashes.iter().zip(keys).zip(cand).zip(out.iter_mut()) {
            let mut c = c.0;
            if c == PENDING {
                let tag = tag_of(*h);
                let bk = &self.buckets[self.alt(self.bucket1(*h), tag)];
                let m = bk.matches(tag);
                c = if m != 0 { bk.idx[m.trailing_zeros() as usize] } else { NONE };
            }
            // A key that does not match its first candidate (a 32-bit tag collision, about one
            // in 2^28, or a stale candidate) takes the full path.
            *o = match self.slab.get(c as usize) {
                None if c == NONE => None,
                Some(s) if key_eq(&s.e.key, k) => Some(FlowId(c)),
                _ => self.lookup(*h, k),
            };
        }
    }

    /// The entry of `id`. Panics only on an id that no lookup or insert of this table returned.
    #[inline]
    pub fn entry(&self, id: FlowId) -> &FlowEntry {
        &self.slab[id.0 as usize].e
    }

    /// The entry of `id`, to update counters, `last_seen` and meter state. Do not change `key`
    /// (re-insert instead). Panics like [`Gft::entry`].
    #[inline]
    pub fn entry_mut(&mut self, id: FlowId) -> &mut FlowEntry {
        &mut self.slab[id.0 as usize].e
    }

    /// The entry of `id` if `id` names a flow now in the table.
    pub fn get(&self, id: FlowId) -> Option<&FlowEntry> {
        let i = id.0 as usize;
        (i < self.slab.len() && self.is_live(i)).then(|| &self.slab[i].e)
    }

    #[inline(always)]
    fn is_live(&self, i: usize) -> bool {
        self.live.get(i / 64).is_some_and(|w| w & (1u64 << (i % 64)) != 0)
    }

    #[inline(always)]
    fn set_live(&mut self, i: usize, on: bool) {
        if let Some(w) = self.live.get_mut(i / 64) {
            if on {
                *w |= 1u64 << (i % 64);
            } else {
                *w &= !(1u64 << (i % 64));
            }
        }
    }

    /// Put `entry` into a free slab slot (the caller made sure one exists).
    fn alloc(&mut self, hash: u64, entry: FlowEntry) -> u32 {
        let slot = Slot { e: entry, hash, next_free: NONE };
        let i = if self.free_head != NONE {
            let i = self.free_head;
            self.free_head = self.slab[i as usize].next_free;
            self.slab[i as usize] = slot;
            i
        } else {
            debug_assert!(self.slab.len() < self.capacity);
            let i = self.slab.len() as u32;
            // Within the reserved capacity: never reallocates.
            self.slab.push(slot);
            i
        };
        self.set_live(i as usize, true);
        self.len += 1;
        i
    }

    /// Return slab slot `i` to the free list and hand back its entry.
    fn release(&mut self, i: u32) -> FlowEntry {
        self.set_live(i as usize, false);
        let s = &mut self.slab[i as usize];
        s.next_free = self.free_head;
        self.free_head = i;
        self.len -= 1;
        s.e
    }

    /// Where slab index `i` (with hash `hash`) sits in the index.
    fn position_of(&self, hash: u64, i: u32) -> Option<(usize, usize)> {
        if self.buckets.is_empty() {
            return None;
        }
        let tag = tag_of(hash);
        let b1 = self.bucket1(hash);
        let b2 = self.alt(b1, tag);
        for b in [b1, b2] {
            let bk = &self.buckets[b];
            let mut m = bk.matches(tag);
            while m != 0 {
                let s = m.trailing_zeros() as usize;
                if bk.idx[s] == i {
                    return Some((b, s));
                }
                m &= m - 1;
            }
        }
        None
    }

    fn clear_pos(&mut self, b: usize, s: usize) {
        self.buckets[b].tags[s] = 0;
        self.buckets[b].idx[s] = 0;
    }

    /// Remove slab entry `i` from the index and the slab.
    fn remove_at(&mut self, i: u32) -> FlowEntry {
        let hash = self.slab[i as usize].hash;
        if let Some((b, s)) = self.position_of(hash, i) {
            self.clear_pos(b, s);
        } else {
            debug_assert!(false, "live slab entry {i} missing from the index");
        }
        self.release(i)
    }

    /// Search a cuckoo path for a new key with buckets `b1`, `b2` (breadth first, at most
    /// [`MAX_PATH_NODES`] buckets). Does not change the table.
    fn search_path(&self, b1: usize, b2: usize) -> Option<Path> {
        let mut path = Path { pos: [(0, 0); MAX_PATH], len: 0 };
        for b in [b1, b2] {
            if let Some(s) = self.buckets[b].empty_slot() {
                path.pos[0] = (b as u32, s as u8);
                path.len = 1;
                return Some(path);
            }
        }
        let root = Node { bucket: 0, parent: u8::MAX, slot: 0, depth: 0 };
        let mut nodes = [root; MAX_PATH_NODES];
        nodes[0].bucket = b1 as u32;
        let mut n = 1;
        if b2 != b1 {
            nodes[1].bucket = b2 as u32;
            n = 2;
        }
        let mut head = 0;
        while head < n {
            let node = nodes[head];
            let nb = node.bucket as usize;
            let bk = &self.buckets[nb];
            for s in 0..SLOTS {
                let a = self.alt(nb, bk.tags[s]);
                if a == nb {
                    continue;
                }
                if let Some(e) = self.buckets[a].empty_slot() {
                    // Found: positions from the end back to the root, then reversed.
                    let mut rev = [(0u32, 0u8); MAX_PATH];
                    rev[0] = (a as u32, e as u8);
                    rev[1] = (nb as u32, s as u8);
                    let mut len = 2;
                    let mut cur = node;
                    while cur.parent != u8::MAX {
                        let p = nodes[cur.parent as usize];
                        rev[len] = (p.bucket, cur.slot);
                        len += 1;
                        cur = p;
                    }
                    for k in 0..len {
                        path.pos[k] = rev[len - 1 - k];
                    }
                    path.len = len;
                    return Some(path);
                }
                // Explore `a` later, unless the path could grow too long, the search is at
                // its bound, or `a` was seen (a bucket twice on a path would corrupt it).
                if usize::from(node.depth) + 3 < MAX_PATH
                    && n < MAX_PATH_NODES
                    && !nodes[..n].iter().any(|x| x.bucket as usize == a)
                {
                    nodes[n] = Node {
                        bucket: a as u32,
                        parent: head as u8,
                        slot: s as u8,
                        depth: node.depth + 1,
                    };
                    n += 1;
                }
            }
            head += 1;
        }
        None
    }

    /// Move the entries along `path` and put (tag, i) at its start.
    fn apply_path(&mut self, path: &Path, tag: u32, i: u32) {
        for k in (1..path.len).rev() {
            let (fb, fs) = path.pos[k - 1];
            let (tb, ts) = path.pos[k];
            let (t, x) = (
                self.buckets[fb as usize].tags[fs as usize],
                self.buckets[fb as usize].idx[fs as usize],
            );
            self.buckets[tb as usize].tags[ts as usize] = t;
            self.buckets[tb as usize].idx[ts as usize] = x;
        }
        let (b, s) = path.pos[0];
        self.buckets[b as usize].tags[s as usize] = tag;
        self.buckets[b as usize].idx[s as usize] = i;
    }

    #[inline]
    fn is_idle(&self, e: &FlowEntry, now: Instant) -> bool {
        e.last_seen.saturating_add(self.idle_timeout) <= now
    }

    /// The least recently seen of the flows in (full) buckets `b1`, `b2`; an already idle one
    /// ends the search early.
    fn collision_victim(&self, now: Instant, b1: usize, b2: usize) -> (usize, usize) {
        let mut best = (b1, 0);
        let mut best_t = Instant::MAX;
        let nb = if b2 == b1 { 1 } else { 2 };
        for &b in [b1, b2].iter().take(nb) {
            for s in 0..SLOTS {
                let e = &self.slab[self.buckets[b].idx[s] as usize].e;
                if self.is_idle(e, now) {
                    return (b, s);
                }
                if e.last_seen < best_t {
                    best_t = e.last_seen;
                    best = (b, s);
                }
            }
        }
        best
    }

    /// CLOCK eviction on a full slab: of the next [`CLOCK_SAMPLE`] slots after the hand, the
    /// least recently seen (or the first idle one).
    fn clock_victim(&mut self, now: Instant) -> u32 {
        let n = self.slab.len();
        debug_assert_eq!(n, self.capacity);
        let k = CLOCK_SAMPLE.min(n);
        let mut i = if self.hand < n { self.hand } else { 0 };
        let mut best = i;
        let mut best_t = Instant::MAX;
        for _ in 0..k {
            let e = &self.slab[i].e;
            let idle = self.is_idle(e, now);
            if idle || e.last_seen < best_t {
                best_t = e.last_seen;
                best = i;
            }
            i += 1;
            if i == n {
                i = 0;
            }
            if idle {
                break;
            }
        }
        self.hand = if i < n { i } else { 0 };
        best as u32
    }

    /// Insert `entry` (or replace the entry with the same key); `hash` must be
    /// [`Gft::hash`]`(&entry.key)`. Returns the flow's id and what was displaced: the replaced
    /// entry, or the flow evicted to make room (when the table is full, the least recently seen
    /// of [`CLOCK_SAMPLE`] flows under the CLOCK hand; when both of the key's buckets are full
    /// and no cuckoo path exists, the least recently seen flow of those buckets). An idle flow
    /// (per `now` and the idle timeout) is taken before a live one. Bounded work, no
    /// allocation.
    pub fn insert(
        &mut self,
        now: Instant,
        hash: u64,
        entry: FlowEntry,
    ) -> (FlowId, Option<FlowEntry>) {
        debug_assert_eq!(hash, self.hash(&entry.key), "hash is not Gft::hash of the key");
        self.stats.inserts += 1;
        self.ensure_index();
        if let Some((_, _, i)) = self.find(hash, &entry.key) {
            self.stats.replaced += 1;
            let s = &mut self.slab[i as usize];
            let old = core::mem::replace(&mut s.e, entry);
            return (FlowId(i), Some(old));
        }
        let tag = tag_of(hash);
        let b1 = self.bucket1(hash);
        let b2 = self.alt(b1, tag);
        let Some(mut path) = self.search_path(b1, b2) else {
            // Both buckets full, no path: evict within them; reuse the victim's slots.
            let (vb, vs) = self.collision_victim(now, b1, b2);
            let vi = self.buckets[vb].idx[vs];
            let slot = &mut self.slab[vi as usize];
            let victim = core::mem::replace(&mut slot.e, entry);
            slot.hash = hash;
            self.buckets[vb].tags[vs] = tag;
            self.stats.evicted_collision += 1;
            return (FlowId(vi), Some(victim));
        };
        let mut displaced = None;
        if self.len == self.capacity {
            let vi = self.clock_victim(now);
            let vhash = self.slab[vi as usize].hash;
            if let Some((vb, vs)) = self.position_of(vhash, vi) {
                self.clear_pos(vb, vs);
                // The victim may sit on the path: its slot is free now, so the path ends there.
                let at = (vb as u32, vs as u8);
                if let Some(k) = path.pos[..path.len].iter().position(|p| *p == at) {
                    path.len = k + 1;
                }
            } else {
                debug_assert!(false, "live slab entry {vi} missing from the index");
            }
            displaced = Some(self.release(vi));
            self.stats.evicted_full += 1;
        }
        let i = self.alloc(hash, entry);
        self.apply_path(&path, tag, i);
        (FlowId(i), displaced)
    }

    /// Remove `key`'s flow; `hash` must be [`Gft::hash`] of it.
    pub fn remove(&mut self, hash: u64, key: &FlowKey) -> Option<FlowEntry> {
        let (b, s, i) = self.find(hash, key)?;
        self.clear_pos(b, s);
        self.stats.removed += 1;
        Some(self.release(i))
    }

    /// Remove the flow `id`. Panics if `id` does not name a flow now in the table.
    pub fn remove_id(&mut self, id: FlowId) -> FlowEntry {
        assert!(
            (id.0 as usize) < self.slab.len() && self.is_live(id.0 as usize),
            "remove_id: {id:?} is not in the flow table"
        );
        self.stats.removed += 1;
        self.remove_at(id.0)
    }

    /// Idle aging, incremental: examine at most `budget` slab slots (and never one twice in a
    /// call) from a cursor that wraps; remove the flows with `last_seen + idle_timeout <= now`,
    /// calling `on_expire` with each after its removal. Returns how many were removed.
    pub fn expire(
        &mut self,
        now: Instant,
        budget: usize,
        mut on_expire: impl FnMut(&FlowEntry),
    ) -> usize {
        let hw = self.slab.len();
        if hw == 0 {
            return 0;
        }
        let mut c = if self.cursor < hw { self.cursor } else { 0 };
        let mut removed = 0;
        for _ in 0..budget.min(hw) {
            if self.is_live(c) && self.is_idle(&self.slab[c].e, now) {
                let e = self.remove_at(c as u32);
                removed += 1;
                on_expire(&e);
            }
            c += 1;
            if c == hw {
                c = 0;
            }
        }
        self.cursor = c;
        self.stats.expired += removed as u64;
        removed
    }

    /// Flows in the table.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the table holds no flow.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most flows the table holds.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The idle timeout in force.
    pub fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }

    /// Change the idle timeout (takes effect on the next [`Gft::expire`] or eviction).
    pub fn set_idle_timeout(&mut self, d: Duration) {
        self.idle_timeout = d;
    }

    /// Every flow, in slab order (for dumps; not for the packet path).
    pub fn iter(&self) -> impl Iterator<Item = (FlowId, &FlowEntry)> {
        self.slab
            .iter()
            .enumerate()
            .filter(|(i, _)| self.is_live(*i))
            .map(|(i, s)| (FlowId(i as u32), &s.e))
    }

    /// Remove every flow (counters are kept; no `on_expire` calls). Writes the index once.
    pub fn clear(&mut self) {
        self.slab.clear();
        self.buckets.fill(Bucket::EMPTY);
        self.live.fill(0);
        self.len = 0;
        self.free_head = NONE;
        self.hand = 0;
        self.cursor = 0;
    }

    /// The counters, with the current length and capacity.
    pub fn stats(&self) -> GftStats {
        GftStats { len: self.len, capacity: self.capacity, ..self.stats }
    }

    /// Bytes the table reserved at its capacity (slab, index and live bitmap). Divide by
    /// [`Gft::capacity`] for the cost of one flow (about 201 bytes).
    pub fn memory_bytes(&self) -> usize {
        self.slab.capacity() * core::mem::size_of::<Slot>()
            + self.buckets.capacity() * core::mem::size_of::<Bucket>()
            + self.live.capacity() * core::mem::size_of::<u64>()
    }

    /// The address and length in bytes of the table's two large reservations (slab, index),
    /// for the I/O layer to back with huge pages (e.g. `madvise(MADV_HUGEPAGE)`) right after
    /// [`Gft::new`]: at a million flows and more, lookups are bound by TLB misses on 4 KiB pages.
    /// This module cannot make that call itself (it would need `unsafe`).
    pub fn memory_regions(&self) -> [(usize, usize); 2] {
        [
            (self.slab.as_ptr() as usize, self.slab.capacity() * core::mem::size_of::<Slot>()),
            (
                self.buckets.as_ptr() as usize,
                self.buckets.capacity() * core::mem::size_of::<Bucket>(),
            ),
        ]
    }

    /// Test helper: check every structural invariant, panicking with what is wrong.
    #[cfg(test)]
    fn check_invariants(&self) {
        let mut seen = vec![false; self.slab.len()];
        for (b, bk) in self.buckets.iter().enumerate() {
            for s in 0..SLOTS {
                if bk.tags[s] == 0 {
                    continue;
                }
                let i = bk.idx[s] as usize;
                assert!(i < self.slab.len(), "bucket {b} slot {s} points past the slab");
                assert!(self.is_live(i), "bucket {b} slot {s} points at free slot {i}");
                assert!(!seen[i], "slab slot {i} indexed twice");
                seen[i] = true;
                let h = self.slab[i].hash;
                assert_eq!(h, self.hash(&self.slab[i].e.key), "stored hash of {i}");
                assert_eq!(bk.tags[s], tag_of(h), "tag of {i}");
                let b1 = self.bucket1(h);
                assert!(
                    b == b1 || b == self.alt(b1, tag_of(h)),
                    "slab slot {i} in a foreign bucket"
                );
            }
        }
        let live = (0..self.slab.len()).filter(|&i| self.is_live(i)).count();
        assert_eq!(live, self.len, "live bits vs len");
        assert_eq!(seen.iter().filter(|x| **x).count(), self.len, "indexed vs len");
        let mut free = 0;
        let mut f = self.free_head;
        while f != NONE {
            assert!(!self.is_live(f as usize), "free list holds live slot {f}");
            free += 1;
            assert!(free <= self.slab.len(), "free list cycles");
            f = self.slab[f as usize].next_free;
        }
        assert_eq!(free + self.len, self.slab.len(), "free + live vs high-water mark");
        assert!(self.len <= self.capacity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn key(n: u32) -> FlowKey {
        let mut k =
            FlowKey { proto: 6, src_port: (n & 0xffff) as u16, dst_port: 80, ..FlowKey::default() };
        k.src[12..16].copy_from_slice(&n.to_be_bytes());
        k.src[10] = 0xff;
        k.src[11] = 0xff;
        k.dst[10] = 0xff;
        k.dst[11] = 0xff;
        k.dst[12..16].copy_from_slice(&[10, 0, 0, 1]);
        k
    }

    fn entry(n: u32, t: u64) -> FlowEntry {
        let mut e = FlowEntry::new(key(n), ActionId(n), 1, 7, Instant::from_secs(t));
        e.packets = u64::from(n) * 3;
        e
    }

    fn cfg(capacity: usize) -> GftConfig {
        GftConfig { capacity, idle_timeout: Duration::from_secs(30), seed: 0x1234_5678 }
    }

    fn ins(t: &mut Gft, e: FlowEntry) -> (FlowId, Option<FlowEntry>) {
        let h = t.hash(&e.key);
        t.insert(e.last_seen, h, e)
    }

    fn look(t: &Gft, n: u32) -> Option<FlowId> {
        let k = key(n);
        t.lookup(t.hash(&k), &k)
    }

    #[test]
    fn capacity_bounds_are_typed_errors() {
        assert_eq!(
            Gft::new(cfg(0)).unwrap_err(),
            GftError::BadCapacity { requested: 0, max: MAX_CAPACITY }
        );
        assert_eq!(
            Gft::new(cfg(MAX_CAPACITY + 1)).unwrap_err(),
            GftError::BadCapacity { requested: MAX_CAPACITY + 1, max: MAX_CAPACITY }
        );
        assert_eq!(
            Gft::new(cfg(0)).unwrap_err().to_string(),
            "flow table capacity 0 is outside 1..=67108864"
        );
        let t = Gft::new(cfg(1)).unwrap();
        assert_eq!((t.capacity(), t.len(), t.is_empty()), (1, 0, true));
    }

    #[test]
    fn memory_per_flow_is_under_256_bytes() {
        let t = Gft::new(cfg(1 << 20)).unwrap();
        let per = t.memory_bytes() as f64 / t.capacity() as f64;
        assert!(per <= 256.0, "{per} bytes per flow");
        // Slab 192 + index 64/7 + bitmap 1/8.
        assert_eq!(
            t.memory_bytes(),
            (1 << 20) * 192 + (1usize << 20).div_ceil(7) * 64 + (1 << 20) / 8
        );
        let [(slab, slab_len), (index, index_len)] = t.memory_regions();
        assert_eq!((slab % 64, index % 64), (0, 0), "cache-line aligned");
        assert_eq!(slab_len + index_len + (1 << 20) / 8, t.memory_bytes());
    }

    #[test]
    fn insert_lookup_replace_remove() {
        let mut t = Gft::new(cfg(100)).unwrap();
        assert_eq!(look(&t, 1), None);
        let (id, d) = ins(&mut t, entry(1, 5));
        assert_eq!(d, None);
        assert_eq!(look(&t, 1), Some(id));
        assert_eq!(*t.entry(id), entry(1, 5));
        assert_eq!(look(&t, 2), None);
        // Replace: same id, old entry handed back.
        let mut e2 = entry(1, 6);
        e2.action = ActionId(99);
        let (id2, d) = ins(&mut t, e2);
        assert_eq!(id2, id);
        assert_eq!(d, Some(entry(1, 5)));
        assert_eq!(t.entry(id).action, ActionId(99));
        assert_eq!(t.len(), 1);
        // Mutate counters in place.
        t.entry_mut(id).packets += 10;
        assert_eq!(t.entry(id).packets, 13);
        let (id3, _) = ins(&mut t, entry(3, 1));
        assert_ne!(id3, id);
        let k = key(1);
        let got = t.remove(t.hash(&k), &k).unwrap();
        assert_eq!((got.action, got.packets), (ActionId(99), 13));
        assert_eq!(t.remove(t.hash(&k), &k), None);
        assert_eq!(look(&t, 1), None);
        assert_eq!(t.get(id), None);
        assert_eq!(t.remove_id(id3), entry(3, 1));
        assert!(t.is_empty());
        let s = t.stats();
        assert_eq!((s.inserts, s.replaced, s.removed, s.len), (3, 1, 2, 0));
        t.check_invariants();
    }

    #[test]
    #[should_panic(expected = "is not in the flow table")]
    fn remove_id_of_a_free_slot_panics() {
        let mut t = Gft::new(cfg(4)).unwrap();
        let (id, _) = ins(&mut t, entry(1, 1));
        t.remove_id(id);
        t.remove_id(id);
    }

    #[test]
    fn full_table_evicts_least_recently_seen_under_the_clock_hand() {
        // A roomy index, so only the slab can fill.
        let c = GftConfig { idle_timeout: Duration::from_secs(3600), ..cfg(16) };
        let mut t = Gft::with_buckets(c, 64).unwrap();
        for n in 0..16 {
            assert_eq!(ins(&mut t, entry(n, 100 + u64::from(n))).1, None);
        }
        assert_eq!(t.len(), 16);
        // Seen more recently than everyone else: slot 0 is not the oldest of slots 0..8.
        let id0 = look(&t, 0).unwrap();
        t.entry_mut(id0).last_seen = Instant::from_secs(1000);
        let (id, d) = ins(&mut t, entry(100, 200));
        assert_eq!(d, Some(entry(1, 101)));
        assert_eq!(look(&t, 1), None);
        assert_eq!(look(&t, 100), Some(id));
        assert_eq!(t.len(), 16);
        // The hand moved on: the next victim is the oldest of slots 8..16.
        let (_, d) = ins(&mut t, entry(101, 201));
        assert_eq!(d, Some(entry(8, 108)));
        let s = t.stats();
        assert_eq!((s.evicted_full, s.evicted_collision, s.len), (2, 0, 16));
        t.check_invariants();
    }

    #[test]
    fn full_table_prefers_an_idle_flow() {
        let mut t = Gft::with_buckets(cfg(8), 64).unwrap();
        for n in 0..8 {
            ins(&mut t, entry(n, 1000));
        }
        // Both idle at 1000 s with a 30 s timeout; 5 is older, but the scan stops at the first
        // idle flow, 3, rather than reading on.
        let id5 = look(&t, 5).unwrap();
        t.entry_mut(id5).last_seen = Instant::from_secs(10);
        let id3 = look(&t, 3).unwrap();
        t.entry_mut(id3).last_seen = Instant::from_secs(500);
        let (_, d) = ins(&mut t, entry(50, 1000));
        assert_eq!(d.map(|e| e.key), Some(key(3)));
        // The hand moved past the victim: the next scan starts at slot 4 and finds 5.
        let (_, d) = ins(&mut t, entry(51, 1000));
        assert_eq!(d.map(|e| e.key), Some(key(5)));
    }

    #[test]
    fn collision_evicts_least_recently_seen_of_the_buckets() {
        // One bucket of 8 slots, room for 100 in the slab.
        let mut t = Gft::with_buckets(cfg(100), 1).unwrap();
        for n in 0..8 {
            assert_eq!(ins(&mut t, entry(n, 50 - u64::from(n))).1, None);
        }
        // Key 7 was seen longest ago (t = 43).
        let (id, d) = ins(&mut t, entry(8, 60));
        assert_eq!(d, Some(entry(7, 43)));
        assert_eq!(look(&t, 8), Some(id));
        assert_eq!(look(&t, 7), None);
        assert_eq!(t.len(), 8);
        let s = t.stats();
        assert_eq!((s.evicted_collision, s.evicted_full), (1, 0));
        t.check_invariants();
    }

    #[test]
    fn cuckoo_paths_fill_a_tight_index() {
        // 64 slots of index for 56 flows: inserts must displace, not evict, nearly always.
        let mut t = Gft::with_buckets(cfg(56), 8).unwrap();
        let mut evicted = 0;
        for n in 0..56 {
            if ins(&mut t, entry(n, 1)).1.is_some() {
                evicted += 1;
            }
            t.check_invariants();
        }
        assert_eq!(t.len() + evicted, 56);
        assert!(evicted <= 2, "{evicted} collision evictions at 7/8 load");
        for n in 0..56 {
            if let Some(id) = look(&t, n) {
                assert_eq!(*t.entry(id), entry(n, 1));
            }
        }
    }

    #[test]
    fn expire_is_incremental_wraps_and_removes_exactly_the_idle() {
        let mut t = Gft::new(cfg(100)).unwrap();
        for n in 0..50 {
            // Even flows last seen at 0 s, odd at 20 s.
            ins(&mut t, entry(n, if n % 2 == 0 { 0 } else { 20 }));
        }
        let now = Instant::from_secs(30); // 0 + 30 <= 30: even flows are idle; 20 + 30 > 30.
        let mut gone = Vec::new();
        assert_eq!(t.expire(now, 10, |e| gone.push(e.key)), 5);
        assert_eq!(gone, (0..10).step_by(2).map(key).collect::<Vec<_>>());
        let mut calls = 1;
        while t.len() > 25 {
            let before = t.len();
            let r = t.expire(now, 7, |e| gone.push(e.key));
            assert_eq!(before - t.len(), r);
            calls += 1;
            assert!(calls < 20);
        }
        // Wrapped around; nothing more to remove.
        assert_eq!(t.expire(now, 1000, |_| panic!("no idle flow is left")), 0);
        gone.sort_by_key(|k| k.src_port);
        assert_eq!(gone, (0..50).step_by(2).map(key).collect::<Vec<_>>());
        for n in (1..50).step_by(2) {
            assert!(look(&t, n).is_some());
        }
        assert_eq!(t.stats().expired, 25);
        // Later the odd ones go too; a shorter timeout takes effect at once.
        t.set_idle_timeout(Duration::from_secs(1));
        assert_eq!(t.expire(Instant::from_secs(21), usize::MAX, |_| {}), 25);
        assert!(t.is_empty());
        assert_eq!(Gft::new(cfg(4)).unwrap().expire(now, 10, |_| {}), 0);
        t.check_invariants();
    }

    #[test]
    fn lookup_batch_matches_lookup() {
        let mut t = Gft::new(cfg(1000)).unwrap();
        for n in 0..500 {
            ins(&mut t, entry(n, 1));
        }
        let keys: Vec<FlowKey> = (0..200u32).map(|n| key(n * 7 % 1000)).collect();
        let hashes: Vec<u64> = keys.iter().map(|k| t.hash(k)).collect();
        let mut out = vec![Some(FlowId(12345)); 201];
        t.lookup_batch(&hashes, &keys, &mut out[..200]);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(out[i], t.lookup(hashes[i], k));
            assert_eq!(out[i].is_some(), (i as u32 * 7 % 1000) < 500);
        }
        assert_eq!(out[200], Some(FlowId(12345)), "beyond the batch is untouched");
        t.prefetch(hashes[0]);
    }

    /// The three stages run apart (as the engine's software pipeline runs them, with entry
    /// counters changing between scan and resolve) find what `lookup` finds, in a full table
    /// where many flows sit in their second bucket.
    /// The index is written at the first insert, not by `new` (so the I/O layer can advise
    /// its pages for huge pages first); until then every kind of lookup misses.
    #[test]
    fn index_is_written_at_the_first_insert() {
        let mut t = Gft::new(cfg(1000)).unwrap();
        assert!(t.buckets.is_empty());
        assert_eq!(t.buckets.capacity(), buckets_for(1000));
        let ks = [key(1), key(2)];
        let hs = [t.hash(&ks[0]), t.hash(&ks[1])];
        let mut out = [Some(FlowId(7)); 2];
        t.prefetch(hs[0]);
        t.lookup_batch(&hs, &ks, &mut out);
        assert_eq!(out, [None, None]);
        assert_eq!(t.remove(hs[0], &ks[0]), None);
        assert_eq!(t.expire(Instant::from_secs(100), 10, |_| {}), 0);
        let (id, _) = ins(&mut t, entry(1, 1));
        assert_eq!(t.buckets.len(), buckets_for(1000));
        t.lookup_batch(&hs, &ks, &mut out);
        assert_eq!(out, [Some(id), None]);
        t.check_invariants();
    }

    #[test]
    fn pipelined_stages_match_lookup() {
        let mut t = Gft::new(cfg(700)).unwrap();
        for n in 0..700 {
            ins(&mut t, entry(n, 1));
        }
        let keys: Vec<FlowKey> = (0..900u32).map(|n| key(n * 13 % 900)).collect();
        let hashes: Vec<u64> = keys.iter().map(|k| t.hash(k)).collect();
        let mut cand = vec![Candidate::default(); keys.len()];
        t.prefetch_buckets(&hashes);
        t.scan_buckets(&hashes, &mut cand);
        let second = cand.iter().filter(|c| c.0 == PENDING).count();
        assert!(second > 0, "some flows sit in their second bucket");
        let ids: Vec<FlowId> = (0..700).filter_map(|n| look(&t, n)).collect();
        for id in ids {
            t.entry_mut(id).packets += 1;
        }
        let mut out = vec![None; keys.len()];
        t.resolve(&hashes, &keys, &cand, &mut out);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(out[i], t.lookup(hashes[i], k));
            assert_eq!(out[i].is_some(), (i as u32 * 13 % 900) < 700);
        }
    }

    #[test]
    fn tag_collisions_compare_full_keys() {
        // Two keys whose 32-bit tags are equal (birthday search), in a one-bucket index so the
        // tag matches in the bucket every lookup reads.
        let mut t = Gft::with_buckets(cfg(16), 1).unwrap();
        let mut seen = HashMap::new();
        let (a, b) = (0u32..1_000_000)
            .find_map(|n| {
                let tag = tag_of(t.hash(&key(n)));
                seen.insert(tag, n).map(|m| (m, n))
            })
            .expect("a 32-bit tag collision within a million keys");
        ins(&mut t, entry(a, 1));
        assert_eq!(look(&t, b), None);
        let ks = [key(a), key(b)];
        let hs = [t.hash(&ks[0]), t.hash(&ks[1])];
        let mut out = [None; 2];
        t.lookup_batch(&hs, &ks, &mut out);
        assert_eq!(out, [look(&t, a), None]);
        let (idb, d) = ins(&mut t, entry(b, 2));
        assert_eq!(d, None);
        t.lookup_batch(&hs, &ks, &mut out);
        assert_eq!(out, [look(&t, a), Some(idb)]);
        assert_eq!(t.entry(idb).key, key(b));
        // Insert b first in a fresh table: the batch's first candidate for a is b's entry.
        let mut t = Gft::with_buckets(cfg(16), 1).unwrap();
        let (idb, _) = ins(&mut t, entry(b, 2));
        let (ida, _) = ins(&mut t, entry(a, 1));
        t.lookup_batch(&hs, &ks, &mut out);
        assert_eq!(out, [Some(ida), Some(idb)]);
        t.check_invariants();
    }

    #[test]
    fn iter_and_clear() {
        let mut t = Gft::new(cfg(10)).unwrap();
        for n in 0..5 {
            ins(&mut t, entry(n, 1));
        }
        let k = key(2);
        t.remove(t.hash(&k), &k);
        let mut got: Vec<u32> = t
            .iter()
            .map(|(id, e)| {
                assert_eq!(t.entry(id), e);
                e.action.0
            })
            .collect();
        got.sort_unstable();
        assert_eq!(got, vec![0, 1, 3, 4]);
        t.clear();
        assert_eq!(t.iter().count(), 0);
        assert_eq!(look(&t, 1), None);
        assert_eq!(t.stats().inserts, 5);
        ins(&mut t, entry(1, 1));
        assert!(look(&t, 1).is_some());
        t.check_invariants();
    }

    /// Release only: a million flows, all found, every one byte-exact.
    #[test]
    #[cfg_attr(debug_assertions, ignore = "slow in debug builds")]
    fn one_million_flows_smoke() {
        let n = 1_000_000u32;
        let mut t = Gft::new(cfg(n as usize)).unwrap();
        let mut evicted = 0usize;
        for i in 0..n {
            let mut e = entry(i, 1);
            e.key.dst_port = (i >> 16) as u16;
            if ins(&mut t, e).1.is_some() {
                evicted += 1;
            }
        }
        assert_eq!(t.len() + evicted, n as usize);
        assert!(evicted < 100, "{evicted}");
        let mut found = 0;
        for i in 0..n {
            let mut k = key(i);
            k.dst_port = (i >> 16) as u16;
            if let Some(id) = t.lookup(t.hash(&k), &k) {
                assert_eq!(t.entry(id).action, ActionId(i));
                found += 1;
            }
        }
        assert_eq!(found, t.len());
    }

    #[derive(Debug, Clone, Copy)]
    enum Op {
        Insert(u32),
        Remove(u32),
        RemoveId(u32),
        Touch(u32),
        Expire(usize),
        ExpireAll,
        Tick(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u32..40).prop_map(Op::Insert),
            2 => (0u32..40).prop_map(Op::Remove),
            1 => (0u32..40).prop_map(Op::RemoveId),
            2 => (0u32..40).prop_map(Op::Touch),
            1 => (0usize..12).prop_map(Op::Expire),
            1 => Just(Op::ExpireAll),
            2 => (0u64..8).prop_map(Op::Tick),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// `key_eq` is `==`: keys that differ in any one field, or are equal.
        #[test]
        fn key_eq_is_equality(
            a in any::<[u8; 16]>(), b in any::<[u8; 16]>(), vni in any::<u32>(),
            sp in any::<u16>(), port in any::<u16>(), flags in any::<u8>(),
            field in 0usize..12, byte in 0usize..16, bit in 0u8..8,
        ) {
            let k = FlowKey {
                src: a, dst: b, outer_src: b, outer_dst: a, vni, src_port: sp, dst_port: !sp,
                port, proto: flags ^ 0x5a, flags, reserved: vni.rotate_left(7),
            };
            prop_assert!(key_eq(&k, &k));
            let mut o = k;
            let m = 1u8 << bit;
            match field {
                0 => o.src[byte] ^= m,
                1 => o.dst[byte] ^= m,
                2 => o.outer_src[byte] ^= m,
                3 => o.outer_dst[byte] ^= m,
                4 => o.vni ^= u32::from(m) << (8 * (byte % 4)),
                5 => o.src_port ^= u16::from(m) << (8 * (byte % 2)),
                6 => o.dst_port ^= u16::from(m) << (8 * (byte % 2)),
                7 => o.port ^= u16::from(m) << (8 * (byte % 2)),
                8 => o.proto ^= m,
                9 => o.flags ^= m,
                10 => o.reserved ^= u32::from(m) << (8 * (byte % 4)),
                _ => {}
            }
            prop_assert_eq!(key_eq(&k, &o), k == o);
            prop_assert_eq!(key_eq(&o, &k), field == 11);
        }

        /// The table behaves like a map from key to entry, where every displaced entry is
        /// handed back: the model applies the evictions the table reports.
        #[test]
        fn behaves_like_a_map(
            cap in 1usize..24,
            tight in any::<bool>(),
            nb in 1usize..4,
            ops in proptest::collection::vec(op(), 1..200),
        ) {
            let nb = if tight { nb } else { buckets_for(cap) };
            let c = GftConfig { capacity: cap, idle_timeout: Duration::from_secs(10), seed: 99 };
            let mut t = Gft::with_buckets(c, nb).unwrap();
            let mut model: HashMap<FlowKey, FlowEntry> = HashMap::new();
            let mut now = 0u64;
            let mut serial = 0u64;
            for op in ops {
                let tn = Instant::from_secs(now);
                match op {
                    Op::Insert(n) => {
                        serial += 1;
                        let mut e = FlowEntry::new(key(n), ActionId(n), 0, 0, tn);
                        e.bytes = serial;
                        let h = t.hash(&e.key);
                        let (id, d) = t.insert(tn, h, e);
                        match (model.insert(e.key, e), d) {
                            (Some(old), Some(d)) => prop_assert_eq!(old, d),
                            (Some(_), None) => prop_assert!(false, "replace returned nothing"),
                            (None, Some(d)) => {
                                prop_assert_ne!(d.key, e.key);
                                prop_assert_eq!(model.remove(&d.key), Some(d));
                            }
                            (None, None) => {}
                        }
                        prop_assert_eq!(*t.entry(id), e);
                    }
                    Op::Remove(n) => {
                        let k = key(n);
                        prop_assert_eq!(t.remove(t.hash(&k), &k), model.remove(&k));
                    }
                    Op::RemoveId(n) => {
                        let k = key(n);
                        if let Some(id) = t.lookup(t.hash(&k), &k) {
                            prop_assert_eq!(Some(t.remove_id(id)), model.remove(&k));
                        }
                    }
                    Op::Touch(n) => {
                        let k = key(n);
                        if let Some(id) = t.lookup(t.hash(&k), &k) {
                            t.entry_mut(id).last_seen = tn;
                            t.entry_mut(id).packets += 1;
                            let m = model.get_mut(&k).unwrap();
                            m.last_seen = tn;
                            m.packets += 1;
                        }
                    }
                    Op::Expire(_) | Op::ExpireAll => {
                        let budget = if let Op::Expire(b) = op { b } else { usize::MAX };
                        let mut gone = Vec::new();
                        let r = t.expire(tn, budget, |e| gone.push(*e));
                        prop_assert_eq!(r, gone.len());
                        prop_assert!(r <= budget);
                        for e in gone {
                            prop_assert!(e.last_seen + Duration::from_secs(10) <= tn);
                            prop_assert_eq!(model.remove(&e.key), Some(e));
                        }
                        if budget == usize::MAX {
                            let idle = |e: &FlowEntry| e.last_seen + Duration::from_secs(10) <= tn;
                            prop_assert!(!model.values().any(idle));
                        }
                    }
                    Op::Tick(d) => now += d,
                }
                t.check_invariants();
                prop_assert_eq!(t.len(), model.len());
                prop_assert!(t.len() <= cap);
                let keys: Vec<FlowKey> = (0..40).map(key).collect();
                let hashes: Vec<u64> = keys.iter().map(|k| t.hash(k)).collect();
                let mut out = vec![None; 40];
                t.lookup_batch(&hashes, &keys, &mut out);
                for (k, o) in keys.iter().zip(&out) {
                    prop_assert_eq!(o.map(|id| *t.entry(id)), model.get(k).copied());
                }
                prop_assert_eq!(t.iter().count(), model.len());
            }
        }
    }
}
