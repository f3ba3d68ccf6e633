//! snic's runtime eBPF maps, with the semantics of the Linux maps of the same type: arrays
//! (and global data), per-CPU arrays (one value per worker), hashes, per-CPU hashes, LRU
//! hashes, LPM tries, device maps and ring buffers.
//!
//! # Memory
//!
//! Programs get host addresses of map values (`bpf_map_lookup_elem` returns one, `lddw` of a
//! global variable is one) and read and write them directly, as in the kernel. So every map
//! preallocates its value memory once, when it is created, as a boxed slice of
//! [`AtomicU64`] words: one 8-byte aligned slot of `round_up(value_size, 8)` bytes per entry
//! (per entry *and worker* for per-CPU maps). The memory never moves or shrinks while the map
//! lives, so an address stays valid for the map's life (a deleted hash entry's slot is
//! recycled for the next insertion, like the kernel's preallocated hash elements). Atomic words
//! give interior mutability without `unsafe`: this module reads and writes values with relaxed
//! atomic loads and stores, and programs write them through raw pointers (the interpreter and
//! the JIT own that `unsafe`); BPF atomic instructions on values are real atomics.
//!
//! # Concurrency
//!
//! A [`Map`] is `Send + Sync` and shared (in an `Arc`) by every worker and the control plane.
//! Value bytes are not locked, exactly as in the kernel: two programs writing the same value
//! race, and a reader may see a value half-updated by the control plane. Index structures are
//! behind locks: a hash map's key index in an [`RwLock`] (lookups share it; LRU lookups take
//! it exclusively, since they refresh recency), the LPM trie's index likewise, a device map's
//! presence bits are atomics, and a ring buffer's positions and outstanding records in a
//! [`Mutex`]. Locks are never held across calls out of this module, so there is no lock
//! order to get wrong. A poisoned lock (a panic elsewhere while holding it) is recovered: the
//! index is only changed by code here that does not panic midway.
//!
//! # Differences from the kernel
//!
//! - The LRU hash is exact (one recency list); the kernel's is approximate (per-CPU free and
//!   pending lists), so which entry a full map evicts can differ, and the kernel may evict
//!   before the map is full.
//! - [`Map::set`] on a per-CPU map also takes a single `value_size` value for every worker (the
//!   syscall always takes every CPU's value).
//! - A device map holds snic port numbers; whether the port exists is the runtime's business
//!   (the kernel refuses an unknown ifindex with `-EINVAL`). Device-map programs (an 8-byte
//!   value with a program fd) are refused.
//!
//! # Why our own
//!
//! Userspace BPF runtimes (`rbpf`, `ubpf`) leave maps to their embedder; aya and libbpf
//! create kernel maps. snic runs programs in its own process, so it implements the maps'
//! semantics itself (flags, error codes, LRU eviction, longest-prefix match, ring-buffer record
//! protocol), checked against the kernel's documented behaviour and, in the oracle tests,
//! against the kernel itself.

use crate::object::{MapKind, MapSpec, Object};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

mod fasthash;
mod format;
mod hash;
mod lpm;
mod ring;

pub use format::{ParseBytesError, format_hex, parse_bytes, parse_hex};

use hash::HashIndex;
use lpm::LpmIndex;
use ring::Ring;

/// Update flag: create or replace (`BPF_ANY`).
pub const BPF_ANY: u64 = 0;
/// Update flag: create only; an existing key fails with `-EEXIST` (`BPF_NOEXIST`).
pub const BPF_NOEXIST: u64 = 1;
/// Update flag: replace only; a missing key fails with `-ENOENT` (`BPF_EXIST`).
pub const BPF_EXIST: u64 = 2;

/// The most memory one map may use (values, ring data and an estimate of its index), so a
/// hostile or mistaken object cannot make snic allocate without bound.
pub const MAX_MAP_BYTES: u64 = 256 << 20;
/// The most workers a map is created for (per-CPU maps keep one value per worker).
pub const MAX_WORKERS: usize = 1024;
/// Largest key in bytes (the kernel's limit is the BPF stack size).
pub const MAX_KEY_SIZE: u32 = 512;
/// Largest value in bytes (the kernel's `KMALLOC_MAX_SIZE` on x86-64).
pub const MAX_VALUE_SIZE: u32 = 4 << 20;
/// Largest per-CPU value in bytes (the kernel's `PCPU_MIN_UNIT_SIZE`).
pub const MAX_PERCPU_VALUE_SIZE: u32 = 32 << 10;
/// The page size ring buffers must be a multiple of.
pub const PAGE_SIZE: u32 = 4096;

/// Linux errno values the maps return (negated, as helpers do).
pub mod errno {
    /// Operation not permitted.
    pub const EPERM: i64 = 1;
    /// No such entry.
    pub const ENOENT: i64 = 2;
    /// Too big (full hash map, array index out of range).
    pub const E2BIG: i64 = 7;
    /// Try again (ring buffer full).
    pub const EAGAIN: i64 = 11;
    /// Out of memory.
    pub const ENOMEM: i64 = 12;
    /// Entry exists.
    pub const EEXIST: i64 = 17;
    /// Invalid argument.
    pub const EINVAL: i64 = 22;
    /// No space (full LPM trie).
    pub const ENOSPC: i64 = 28;
}

/// Why a map operation (or a map's creation) failed. [`MapError::errno`] gives the negative
/// Linux errno a helper returns to the program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapError {
    /// No such key (`-ENOENT`): delete or `BPF_EXIST` update of a missing key.
    NotFound,
    /// The key exists (`-EEXIST`): `BPF_NOEXIST` update of an existing key (always, on arrays).
    Exists,
    /// Too big (`-E2BIG`): a full hash map, an array index out of range.
    TooBig,
    /// No space (`-ENOSPC`): a full LPM trie.
    NoSpace,
    /// Try again (`-EAGAIN`): the ring buffer has no room for the record.
    Again,
    /// Not permitted (`-EPERM`): writing a read-only (`.rodata`) map.
    ReadOnly,
    /// Out of memory (`-ENOMEM`): the allocator refused the map's memory.
    NoMemory {
        /// Map name.
        map: String,
        /// Bytes asked for.
        bytes: u64,
    },
    /// Invalid argument (`-EINVAL`), with the reason.
    Invalid(&'static str),
    /// A map spec snic refuses to create (`-EINVAL`), with the reason.
    BadSpec {
        /// Map name.
        map: String,
        /// What is wrong.
        reason: String,
    },
}

impl MapError {
    /// The negative Linux errno, as `bpf_map_update_elem` and friends return it.
    pub fn errno(&self) -> i64 {
        -match self {
            MapError::NotFound => errno::ENOENT,
            MapError::Exists => errno::EEXIST,
            MapError::TooBig => errno::E2BIG,
            MapError::NoSpace => errno::ENOSPC,
            MapError::Again => errno::EAGAIN,
            MapError::ReadOnly => errno::EPERM,
            MapError::NoMemory { .. } => errno::ENOMEM,
            MapError::Invalid(_) | MapError::BadSpec { .. } => errno::EINVAL,
        }
    }

    fn bad_spec(spec: &MapSpec, reason: impl Into<String>) -> MapError {
        MapError::BadSpec { map: spec.name.clone(), reason: reason.into() }
    }
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapError::NotFound => write!(f, "no such key (ENOENT)"),
            MapError::Exists => write!(f, "key exists (EEXIST)"),
            MapError::TooBig => write!(f, "map full or index out of range (E2BIG)"),
            MapError::NoSpace => write!(f, "map full (ENOSPC)"),
            MapError::Again => write!(f, "ring buffer full (EAGAIN)"),
            MapError::ReadOnly => write!(f, "map is read-only (EPERM)"),
            MapError::NoMemory { map, bytes } => {
                write!(f, "map {map:?}: cannot allocate {bytes} bytes (ENOMEM)")
            }
            MapError::Invalid(why) => write!(f, "invalid argument: {why} (EINVAL)"),
            MapError::BadSpec { map, reason } => write!(f, "map {map:?}: {reason}"),
        }
    }
}

impl std::error::Error for MapError {}

/// Rounds up to a multiple of 8.
fn round8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// Writes `data` at byte offset `at` (a multiple of 8) of `words`, zero-padding its last word.
fn write_bytes(words: &[AtomicU64], at: usize, data: &[u8]) {
    for (i, chunk) in data.chunks(8).enumerate() {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        words[at / 8 + i].store(u64::from_ne_bytes(w), Ordering::Relaxed);
    }
}

/// Appends `len` bytes read at byte offset `at` (a multiple of 8) of `words` to `out`.
fn read_bytes(words: &[AtomicU64], at: usize, len: usize, out: &mut Vec<u8>) {
    let mut left = len;
    let mut i = at / 8;
    while left > 0 {
        let w = words[i].load(Ordering::Relaxed).to_ne_bytes();
        let n = left.min(8);
        out.extend_from_slice(&w[..n]);
        left -= n;
        i += 1;
    }
}

/// Zeroes `len` bytes (rounded up to words) at byte offset `at` (a multiple of 8).
fn zero_bytes(words: &[AtomicU64], at: usize, len: usize) {
    for w in &words[at / 8..(at + len).div_ceil(8)] {
        w.store(0, Ordering::Relaxed);
    }
}

/// Reads a lock, recovering from poisoning (see the module docs).
fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

/// Writes a lock, recovering from poisoning.
fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

/// Locks a mutex, recovering from poisoning.
fn lock<T>(l: &Mutex<T>) -> MutexGuard<'_, T> {
    l.lock().unwrap_or_else(|e| e.into_inner())
}

/// The value being written by an update.
#[derive(Clone, Copy)]
enum Value<'a> {
    /// A program's update: this worker's value (per-CPU maps), or the one value.
    Worker(usize, &'a [u8]),
    /// Every copy, `round_up(value_size, 8)` bytes each, concatenated (the syscall's layout).
    All(&'a [u8]),
    /// One value for every copy.
    Broadcast(&'a [u8]),
}

/// Index structure of a map, by family.
#[derive(Debug)]
enum Inner {
    /// `Array`, `PerCpuArray`, global data: every entry exists.
    Array,
    /// `DevMap`: an array whose entries may be empty.
    DevMap(Box<[AtomicBool]>),
    /// `Hash`, `PerCpuHash`, `LruHash`, `DevMapHash`.
    Hash(RwLock<HashIndex>),
    /// `LpmTrie`.
    Lpm(RwLock<LpmIndex>),
    /// `RingBuf`.
    Ring(Ring),
}

/// One runtime map. See the module docs for memory and concurrency.
pub struct Map {
    spec: MapSpec,
    workers: usize,
    /// Values per entry: `workers` for per-CPU maps, else 1.
    copies: usize,
    /// Bytes per value slot: `round_up(value_size, 8)`.
    stride: usize,
    /// Value memory (ring buffers: the data area, twice the ring size, see `ring`).
    mem: Box<[AtomicU64]>,
    inner: Inner,
}

impl fmt::Debug for Map {
    /// The spec and the number of entries, not the (possibly large) value memory.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Map")
            .field("name", &self.spec.name)
            .field("kind", &self.spec.kind)
            .field("key_size", &self.spec.key_size)
            .field("value_size", &self.spec.value_size)
            .field("max_entries", &self.spec.max_entries)
            .field("workers", &self.workers)
            .field("len", &self.len())
            .finish()
    }
}

impl Map {
    /// Creates the map `spec` describes for `workers` workers, after checking the spec as the
    /// kernel does (sizes per type) and that it needs at most [`MAX_MAP_BYTES`]. Global data
    /// maps (`spec.data`) start with their initial contents in value 0.
    pub fn new(spec: &MapSpec, workers: usize) -> Result<Map, MapError> {
        if workers == 0 || workers > MAX_WORKERS {
            return Err(MapError::bad_spec(
                spec,
                format!("{workers} workers (a map serves 1 to {MAX_WORKERS})"),
            ));
        }
        validate(spec)?;
        let per_cpu = matches!(spec.kind, MapKind::PerCpuArray | MapKind::PerCpuHash);
        let copies = if per_cpu { workers } else { 1 };
        let stride = round8(spec.value_size as usize);
        let entries = spec.max_entries as u64;
        let values = entries.saturating_mul(copies as u64).saturating_mul(stride as u64);
        let per_key = |extra: u64| entries.saturating_mul(2 * spec.key_size as u64 + extra);
        let (mem_bytes, index_bytes) = match spec.kind {
            MapKind::RingBuf => (2 * entries, 0),
            MapKind::Hash | MapKind::PerCpuHash | MapKind::LruHash | MapKind::DevMapHash => {
                (values, per_key(64))
            }
            MapKind::LpmTrie => (values, per_key(96)),
            MapKind::DevMap => (values, entries),
            _ => (values, 0),
        };
        let total = mem_bytes.saturating_add(index_bytes);
        if total > MAX_MAP_BYTES {
            return Err(MapError::bad_spec(
                spec,
                format!(
                    "needs about {total} bytes for {workers} workers, more than the {} MiB a \
                     map may use",
                    MAX_MAP_BYTES >> 20
                ),
            ));
        }
        let words = (mem_bytes / 8) as usize;
        let mut v: Vec<AtomicU64> = Vec::new();
        v.try_reserve_exact(words)
            .map_err(|_| MapError::NoMemory { map: spec.name.clone(), bytes: mem_bytes })?;
        v.resize_with(words, || AtomicU64::new(0));
        let mem = v.into_boxed_slice();
        let max = spec.max_entries;
        let inner = match spec.kind {
            MapKind::Array | MapKind::PerCpuArray => Inner::Array,
            MapKind::DevMap => Inner::DevMap((0..max).map(|_| AtomicBool::new(false)).collect()),
            MapKind::Hash | MapKind::PerCpuHash | MapKind::DevMapHash => {
                Inner::Hash(RwLock::new(HashIndex::new(max, false)))
            }
            MapKind::LruHash => Inner::Hash(RwLock::new(HashIndex::new(max, true))),
            MapKind::LpmTrie => Inner::Lpm(RwLock::new(LpmIndex::new(spec.key_size, max))),
            MapKind::RingBuf => Inner::Ring(Ring::new(max)),
            MapKind::Other(_) => unreachable_kind(spec)?,
        };
        if let Some(data) = &spec.data {
            write_bytes(&mem, 0, data);
        }
        Ok(Map { spec: spec.clone(), workers, copies, stride, mem, inner })
    }

    /// The spec this map was created from.
    pub fn spec(&self) -> &MapSpec {
        &self.spec
    }

    /// The map's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The map's type.
    pub fn kind(&self) -> MapKind {
        self.spec.kind
    }

    /// The number of workers it was created for.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Whether programs may write it (false for `.rodata`).
    pub fn writable(&self) -> bool {
        !self.spec.readonly
    }

    /// Address of the first byte of value memory (value 0 of an array; a global data
    /// section's first byte).
    pub fn base(&self) -> u64 {
        self.mem.as_ptr() as u64
    }

    /// Bytes of value memory.
    fn mem_len(&self) -> u64 {
        self.mem.len() as u64 * 8
    }

    /// Byte offset of value slot `slot` (entry × copies + copy).
    fn slot_off(&self, slot: usize) -> usize {
        slot * self.stride
    }

    /// The array index a key names, checking the key's size.
    fn array_index(&self, key: &[u8]) -> Result<u32, MapError> {
        let k: [u8; 4] = key.try_into().map_err(|_| MapError::Invalid("key size"))?;
        Ok(u32::from_ne_bytes(k))
    }

    fn check_key(&self, key: &[u8]) -> Result<(), MapError> {
        if key.len() != self.spec.key_size as usize {
            return Err(MapError::Invalid("key size"));
        }
        Ok(())
    }

    // ---- program side -------------------------------------------------------------------

    /// `bpf_map_lookup_elem`: the address of `key`'s value (this worker's, for per-CPU maps),
    /// or `None`. The LPM trie matches the longest prefix; an LRU lookup makes the key the
    /// most recently used. Ring buffers have no values (`None`).
    pub fn lookup(&self, key: &[u8], worker: usize) -> Option<u64> {
        let copy = if self.copies > 1 {
            if worker >= self.copies {
                return None;
            }
            worker
        } else {
            0
        };
        let entry = self.entry(key, true)?;
        Some(self.base() + self.slot_off(entry * self.copies + copy) as u64)
    }

    /// The entry `key` names (the LPM trie: its longest matching prefix), if present;
    /// `refresh` marks an LRU entry as just used (program lookups do, control-plane reads
    /// do not).
    fn entry(&self, key: &[u8], refresh: bool) -> Option<usize> {
        Some(match &self.inner {
            Inner::Array => {
                let i = self.array_index(key).ok()?;
                (i < self.spec.max_entries).then_some(i as usize)?
            }
            Inner::DevMap(present) => {
                let i = self.array_index(key).ok()? as usize;
                present.get(i)?.load(Ordering::Acquire).then_some(i)?
            }
            Inner::Hash(index) => {
                self.check_key(key).ok()?;
                if refresh && self.spec.kind == MapKind::LruHash {
                    let mut ix = write(index);
                    let slot = ix.get(key)?;
                    ix.touch(slot);
                    slot as usize
                } else {
                    read(index).get(key)? as usize
                }
            }
            Inner::Lpm(index) => {
                self.check_key(key).ok()?;
                read(index).lookup(key)? as usize
            }
            Inner::Ring(_) => return None,
        })
    }

    /// `bpf_map_update_elem` from a program on `worker`: sets `key`'s value (`value` is
    /// `value_size` bytes) with `flags` ([`BPF_ANY`], [`BPF_NOEXIST`], [`BPF_EXIST`]). Per-CPU
    /// maps set this worker's value (a new per-CPU hash entry starts zeroed on the others).
    pub fn update(
        &self,
        key: &[u8],
        value: &[u8],
        flags: u64,
        worker: usize,
    ) -> Result<(), MapError> {
        if value.len() != self.spec.value_size as usize {
            return Err(MapError::Invalid("value size"));
        }
        if worker >= self.workers {
            return Err(MapError::Invalid("worker index"));
        }
        self.store(key, Value::Worker(worker, value), flags)
    }

    /// `bpf_map_delete_elem`: removes `key`. Arrays refuse (`-EINVAL`); a missing key is
    /// `-ENOENT`.
    pub fn delete(&self, key: &[u8]) -> Result<(), MapError> {
        if self.spec.readonly {
            return Err(MapError::ReadOnly);
        }
        match &self.inner {
            Inner::Array => Err(MapError::Invalid("array entries cannot be deleted")),
            Inner::DevMap(present) => {
                let i = self.array_index(key)? as usize;
                let p = present.get(i).ok_or(MapError::Invalid("index out of range"))?;
                p.store(false, Ordering::Release);
                Ok(())
            }
            Inner::Hash(index) => {
                self.check_key(key)?;
                write(index).remove(key).map(|_| ())
            }
            Inner::Lpm(index) => {
                self.check_key(key)?;
                write(index).remove(key).map(|_| ())
            }
            Inner::Ring(_) => Err(MapError::Invalid("ring buffers have no keys")),
        }
    }

    /// Where `[addr, addr + len)` lies in this map's memory: `Some(writable)` when it is inside
    /// one value (within `value_size`), or inside a reserved, not yet committed ring-buffer
    /// record; `None` otherwise. The interpreter and helpers check every access with it.
    pub fn contains(&self, addr: u64, len: u64) -> Option<bool> {
        let base = self.base();
        let end = addr.checked_add(len.max(1))?;
        if addr < base || end > base + self.mem_len() {
            return None;
        }
        if let Inner::Ring(ring) = &self.inner {
            return ring.contains(base, addr, end).then_some(true);
        }
        let off = addr - base;
        let within = off % self.stride as u64;
        if within + len > self.spec.value_size as u64 {
            return None;
        }
        Some(!self.spec.readonly)
    }

    /// Reads `len` bytes at `addr` if [`Map::contains`] them: a safe way for the control plane,
    /// helpers and tests to read value or reserved-record memory a program sees. Writing or
    /// reading nothing always succeeds.
    pub fn read_at(&self, addr: u64, len: u64) -> Option<Vec<u8>> {
        if len == 0 {
            return Some(Vec::new());
        }
        self.contains(addr, len)?;
        let off = (addr - self.base()) as usize;
        let mut out = Vec::with_capacity(len as usize);
        for i in off..off + len as usize {
            let w = self.mem[i / 8].load(Ordering::Relaxed).to_ne_bytes();
            out.push(w[i % 8]);
        }
        Some(out)
    }

    /// Writes `data` at `addr` if [`Map::contains`] it writable (`-EINVAL` if outside, `-EPERM`
    /// if read-only), merging bytes into their words atomically: what a program's stores do,
    /// for helpers and tests that hold no raw pointer.
    pub fn write_at(&self, addr: u64, data: &[u8]) -> Result<(), MapError> {
        if data.is_empty() {
            return Ok(());
        }
        match self.contains(addr, data.len() as u64) {
            None => return Err(MapError::Invalid("address outside the map's values")),
            Some(false) => return Err(MapError::ReadOnly),
            Some(true) => {}
        }
        let off = (addr - self.base()) as usize;
        let mut i = 0;
        while i < data.len() {
            let at = off + i;
            let (word, first) = (at / 8, at % 8);
            let n = (8 - first).min(data.len() - i);
            let mut bytes = [0u8; 8];
            let mut mask = [0u8; 8];
            bytes[first..first + n].copy_from_slice(&data[i..i + n]);
            mask[first..first + n].fill(0xff);
            let (bytes, mask) = (u64::from_ne_bytes(bytes), u64::from_ne_bytes(mask));
            let _ = self.mem[word].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some((old & !mask) | bytes)
            });
            i += n;
        }
        Ok(())
    }

    // ---- ring buffer --------------------------------------------------------------------

    /// `bpf_ringbuf_reserve`: the address of a new record of `size` bytes (8-byte aligned),
    /// writable until [`Map::ringbuf_commit`]; `None` (and a counted drop) when the ring has
    /// no room or this is not a ring buffer.
    pub fn ringbuf_reserve(&self, size: u64) -> Option<u64> {
        let Inner::Ring(ring) = &self.inner else { return None };
        ring.reserve(self.base(), size)
    }

    /// Whether `addr` is the data address of a record reserved in this ring buffer and not yet
    /// committed (zero-size records included, which [`Map::contains`] cannot show): how
    /// `bpf_ringbuf_submit`/`discard` find the ring a record belongs to.
    pub fn ringbuf_owns(&self, addr: u64) -> bool {
        match &self.inner {
            Inner::Ring(ring) => ring.owns(self.base(), addr),
            _ => false,
        }
    }

    /// `bpf_ringbuf_submit` (`discard` false) or `bpf_ringbuf_discard` (true) of a record
    /// [`Map::ringbuf_reserve`] returned. Anything else is `-EINVAL`.
    pub fn ringbuf_commit(&self, addr: u64, discard: bool) -> Result<(), MapError> {
        let Inner::Ring(ring) = &self.inner else {
            return Err(MapError::Invalid("not a ring buffer"));
        };
        ring.commit(self.base(), addr, discard)
    }

    /// `bpf_ringbuf_output`: a record with a copy of `data`; `-EAGAIN` (and a counted drop)
    /// when the ring has no room.
    pub fn ringbuf_output(&self, data: &[u8]) -> Result<(), MapError> {
        let Inner::Ring(ring) = &self.inner else {
            return Err(MapError::Invalid("not a ring buffer"));
        };
        ring.output(&self.mem, self.base(), data)
    }

    /// The consumer: up to `max` committed records, oldest first, removed from the ring.
    /// Stops at the oldest record still reserved (records are delivered in order); discarded
    /// records are skipped.
    pub fn ringbuf_drain(&self, max: usize) -> Vec<Vec<u8>> {
        let Inner::Ring(ring) = &self.inner else { return Vec::new() };
        ring.drain(&self.mem, max)
    }

    /// Records a full ring refused (failed reserves and outputs) since creation.
    pub fn ringbuf_dropped(&self) -> u64 {
        match &self.inner {
            Inner::Ring(ring) => ring.dropped(),
            _ => 0,
        }
    }

    // ---- control plane ------------------------------------------------------------------

    /// The value of `key` as the `bpf()` syscall returns it: `value_size` bytes, or for
    /// per-CPU maps every worker's value, each padded to a multiple of 8 bytes, concatenated.
    /// The LPM trie matches the longest prefix (as the syscall does). Does not refresh LRU
    /// recency.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let entry = self.entry(key, false)?;
        Some(self.read_entry(entry))
    }

    /// Reads entry `entry`'s value(s), in the syscall's layout.
    fn read_entry(&self, entry: usize) -> Vec<u8> {
        let mut out = Vec::new();
        if self.copies == 1 {
            read_bytes(&self.mem, self.slot_off(entry), self.spec.value_size as usize, &mut out);
        } else {
            let first = self.slot_off(entry * self.copies);
            read_bytes(&self.mem, first, self.copies * self.stride, &mut out);
        }
        out
    }

    /// Sets `key`'s value from the control plane with `flags`. For per-CPU maps `value` is
    /// either every worker's value (each padded to a multiple of 8, concatenated, as
    /// [`Map::get`] returns) or one `value_size` value for all workers. Read-only maps refuse
    /// (`-EPERM`, as the kernel refuses a frozen `.rodata`).
    pub fn set(&self, key: &[u8], value: &[u8], flags: u64) -> Result<(), MapError> {
        let vs = self.spec.value_size as usize;
        let v = if value.len() == vs {
            Value::Broadcast(value)
        } else if self.copies > 1 && value.len() == self.copies * self.stride {
            Value::All(value)
        } else {
            return Err(MapError::Invalid("value size"));
        };
        self.store(key, v, flags)
    }

    /// Removes `key` from the control plane (as [`Map::delete`]).
    pub fn remove(&self, key: &[u8]) -> Result<(), MapError> {
        self.delete(key)
    }

    /// Every entry as `(key, value)` in the syscall's layout (see [`Map::get`]), ordered by
    /// key: all indexes of an array, the present entries of a device map, the keys of a hash
    /// or trie (trie keys as last written, including bits beyond the prefix). Ring buffers
    /// have none. A large array has many: [`Map::entries_up_to`] bounds the answer.
    pub fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.entries_up_to(usize::MAX)
    }

    /// The first `limit` entries of [`Map::entries`] (what a dump over the control socket
    /// sends, so a 16-million-entry array does not become gigabytes of answer).
    pub fn entries_up_to(&self, limit: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let sorted = |mut v: Vec<(Vec<u8>, Vec<u8>)>| {
            v.sort();
            v.truncate(limit);
            v
        };
        match &self.inner {
            Inner::Array => (0..self.spec.max_entries)
                .take(limit)
                .map(|i| (i.to_ne_bytes().to_vec(), self.read_entry(i as usize)))
                .collect(),
            Inner::DevMap(present) => present
                .iter()
                .enumerate()
                .filter(|(_, p)| p.load(Ordering::Acquire))
                .take(limit)
                .map(|(i, _)| ((i as u32).to_ne_bytes().to_vec(), self.read_entry(i)))
                .collect(),
            Inner::Hash(index) => sorted(
                read(index)
                    .iter()
                    .map(|(k, slot)| (k.to_vec(), self.read_entry(slot as usize)))
                    .collect(),
            ),
            Inner::Lpm(index) => sorted(
                read(index)
                    .iter()
                    .map(|(k, slot)| (k.to_vec(), self.read_entry(slot as usize)))
                    .collect(),
            ),
            Inner::Ring(_) => Vec::new(),
        }
    }

    /// Number of entries present (an array's `max_entries`; a ring buffer's pending records).
    pub fn len(&self) -> usize {
        match &self.inner {
            Inner::Array => self.spec.max_entries as usize,
            Inner::DevMap(p) => p.iter().filter(|p| p.load(Ordering::Relaxed)).count(),
            Inner::Hash(index) => read(index).len(),
            Inner::Lpm(index) => read(index).len(),
            Inner::Ring(ring) => ring.pending(),
        }
    }

    /// Whether [`Map::len`] is 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    // ---- shared update path -------------------------------------------------------------

    /// Writes value `v` into entry `entry`. `fresh`: a new hash entry (other workers' copies
    /// are zeroed when a program sets only its own).
    fn write_entry(&self, entry: usize, v: Value<'_>, fresh: bool) {
        let first = entry * self.copies;
        match v {
            Value::Worker(w, data) => {
                let copy = if self.copies > 1 { w } else { 0 };
                if fresh && self.copies > 1 {
                    zero_bytes(&self.mem, self.slot_off(first), self.copies * self.stride);
                }
                write_bytes(&self.mem, self.slot_off(first + copy), data);
            }
            Value::All(data) => {
                for (c, chunk) in data.chunks(self.stride).enumerate() {
                    let vs = self.spec.value_size as usize;
                    write_bytes(&self.mem, self.slot_off(first + c), &chunk[..vs]);
                }
            }
            Value::Broadcast(data) => {
                for c in 0..self.copies {
                    write_bytes(&self.mem, self.slot_off(first + c), data);
                }
            }
        }
    }

    fn store(&self, key: &[u8], v: Value<'_>, flags: u64) -> Result<(), MapError> {
        if flags > BPF_EXIST {
            return Err(MapError::Invalid("unknown update flags"));
        }
        if self.spec.readonly {
            return Err(MapError::ReadOnly);
        }
        match &self.inner {
            Inner::Array => {
                let i = self.array_index(key)?;
                if i >= self.spec.max_entries {
                    return Err(MapError::TooBig);
                }
                if flags == BPF_NOEXIST {
                    return Err(MapError::Exists);
                }
                self.write_entry(i as usize, v, false);
                Ok(())
            }
            Inner::DevMap(present) => {
                let i = self.array_index(key)?;
                if i >= self.spec.max_entries {
                    return Err(MapError::TooBig);
                }
                if flags == BPF_NOEXIST {
                    return Err(MapError::Exists);
                }
                let port = dev_port(v)?;
                let p = &present[i as usize];
                if port == 0 {
                    // As the kernel: ifindex 0 empties the slot.
                    p.store(false, Ordering::Release);
                    return Ok(());
                }
                self.write_entry(i as usize, v, false);
                p.store(true, Ordering::Release);
                Ok(())
            }
            Inner::Hash(index) => {
                self.check_key(key)?;
                if self.spec.kind == MapKind::DevMapHash && dev_port(v)? == 0 {
                    return Err(MapError::Invalid("port 0"));
                }
                let mut ix = write(index);
                let (slot, fresh) = ix.insert(key, flags)?;
                self.write_entry(slot as usize, v, fresh);
                Ok(())
            }
            Inner::Lpm(index) => {
                self.check_key(key)?;
                let mut ix = write(index);
                let (slot, fresh) = ix.insert(key, flags)?;
                self.write_entry(slot as usize, v, fresh);
                Ok(())
            }
            Inner::Ring(_) => Err(MapError::Invalid("ring buffers have no keys")),
        }
    }
}

/// The port (ifindex) a device map value names: its first 4 bytes. An 8-byte value
/// (`struct bpf_devmap_val`) also names a program to run on redirected packets, which snic does
/// not support: a non-zero program fd is refused.
fn dev_port(v: Value<'_>) -> Result<u32, MapError> {
    let data = match v {
        Value::Worker(_, d) | Value::All(d) | Value::Broadcast(d) => d,
    };
    if data.get(4..8).is_some_and(|fd| fd != [0; 4]) {
        return Err(MapError::Invalid("device map programs are not supported"));
    }
    Ok(data.get(..4).map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]])))
}

fn unreachable_kind(spec: &MapSpec) -> Result<Inner, MapError> {
    Err(MapError::bad_spec(spec, "unsupported map type"))
}

/// Checks a spec's sizes as the kernel's `map_alloc_check` of each type does.
fn validate(spec: &MapSpec) -> Result<(), MapError> {
    let bad = |r: String| Err(MapError::bad_spec(spec, r));
    let (k, v, n) = (spec.key_size, spec.value_size, spec.max_entries);
    if let MapKind::Other(t) = spec.kind {
        return bad(format!("map type {t} is not implemented"));
    }
    if let Some(data) = &spec.data
        && (spec.kind != MapKind::Array || data.len() > v as usize)
    {
        return bad(format!(
            "initial data ({} bytes) only fits an array's value ({v} bytes)",
            data.len()
        ));
    }
    if spec.kind == MapKind::RingBuf {
        if k != 0 || v != 0 {
            return bad(format!("a ring buffer has no key or value (key {k}, value {v} bytes)"));
        }
        if n == 0 || !n.is_power_of_two() || n % PAGE_SIZE != 0 {
            return bad(format!(
                "ring buffer size {n} must be a power of two and a multiple of {PAGE_SIZE}"
            ));
        }
        return Ok(());
    }
    if n == 0 {
        return bad("max_entries is 0".into());
    }
    if v == 0 {
        return bad("value_size is 0".into());
    }
    if v > MAX_VALUE_SIZE {
        return bad(format!("value_size {v} is over {MAX_VALUE_SIZE}"));
    }
    if k > MAX_KEY_SIZE {
        return bad(format!("key_size {k} is over {MAX_KEY_SIZE}"));
    }
    match spec.kind {
        MapKind::Array | MapKind::PerCpuArray | MapKind::DevMap if k != 4 => {
            bad(format!("key_size must be 4 for {} (got {k})", spec.kind.name()))
        }
        MapKind::PerCpuArray | MapKind::PerCpuHash if v > MAX_PERCPU_VALUE_SIZE => {
            bad(format!("per-CPU value_size {v} is over {MAX_PERCPU_VALUE_SIZE}"))
        }
        MapKind::DevMap | MapKind::DevMapHash if v != 4 && v != 8 => {
            bad(format!("a device map's value_size must be 4 or 8 (got {v})"))
        }
        MapKind::DevMapHash if k != 4 => {
            bad(format!("key_size must be 4 for devmap_hash (got {k})"))
        }
        MapKind::Hash | MapKind::PerCpuHash | MapKind::LruHash if k == 0 => {
            bad("key_size is 0".into())
        }
        MapKind::LpmTrie if !(5..=4 + lpm::MAX_DATA as u32).contains(&k) => {
            bad(format!("an LPM trie's key_size must be 4 + 1..={} bytes (got {k})", lpm::MAX_DATA))
        }
        _ if spec.readonly && spec.kind != MapKind::Array => {
            bad("only arrays can be read-only".into())
        }
        _ => Ok(()),
    }
}

/// Whether a map made from `old` can serve as the map `new` describes on a hot swap: same
/// name, type, key and value sizes and max_entries; for global data the same initial contents
/// and read-only flag too (new constants must not be hidden by the old program's); per-CPU
/// maps also need the same number of workers.
fn same_shape(old: &Map, new: &MapSpec, workers: usize) -> bool {
    let o = &old.spec;
    let data_ok = (o.data.is_none() && new.data.is_none())
        || (o.data == new.data && o.readonly == new.readonly);
    o.name == new.name
        && o.kind == new.kind
        && o.key_size == new.key_size
        && o.value_size == new.value_size
        && o.max_entries == new.max_entries
        && data_ok
        && (old.copies == 1 || old.workers == workers)
}

/// How a map of a [`MapSet`] came to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Created for this object.
    Created,
    /// Kept (shared) from the previous program's set by [`MapSet::rebind`].
    Kept,
}

/// The runtime maps of one object, by [`Object::maps`] index, shared by all workers.
#[derive(Clone, Debug, Default)]
pub struct MapSet {
    maps: Vec<Arc<Map>>,
    origin: Vec<Origin>,
}

impl MapSet {
    /// Creates every map of `object` for `workers` workers.
    pub fn new(object: &Object, workers: usize) -> Result<MapSet, MapError> {
        let mut set = MapSet::default();
        for spec in &object.maps {
            set.maps.push(Arc::new(Map::new(spec, workers)?));
            set.origin.push(Origin::Created);
        }
        Ok(set)
    }

    /// The maps for `object` replacing a running program that used `old` (hot swap): every old
    /// map with the same name, type, key and value sizes and max_entries is kept, shared with
    /// `old`, values and all ([`Origin::Kept`]); the others are created ([`Origin::Created`]).
    /// Two refinements: a global data map (`.data`, `.rodata`, `.bss`) is kept only if its
    /// initial contents are the same too (new constants must not be hidden by the old
    /// program's values), and a per-CPU map only for the same number of workers. Nothing
    /// changes in `old`; on error (a new map that cannot be created) nothing is returned.
    pub fn rebind(object: &Object, old: &MapSet, workers: usize) -> Result<MapSet, MapError> {
        let mut set = MapSet::default();
        for spec in &object.maps {
            match old.by_name(&spec.name).filter(|m| same_shape(m, spec, workers)) {
                Some(m) => {
                    set.maps.push(Arc::clone(m));
                    set.origin.push(Origin::Kept);
                }
                None => {
                    set.maps.push(Arc::new(Map::new(spec, workers)?));
                    set.origin.push(Origin::Created);
                }
            }
        }
        Ok(set)
    }

    /// The map at `index` (an [`Object::maps`] index), if any.
    pub fn get(&self, index: usize) -> Option<&Arc<Map>> {
        self.maps.get(index)
    }

    /// The map named `name`.
    pub fn by_name(&self, name: &str) -> Option<&Arc<Map>> {
        self.maps.iter().find(|m| m.spec.name == name)
    }

    /// The address programs use for the map at `index` (what `lddw` of a map loads after
    /// `prepare`): the address of its [`Map`].
    pub fn addr(&self, index: usize) -> Option<u64> {
        self.maps.get(index).map(|m| Arc::as_ptr(m) as u64)
    }

    /// The map whose [`MapSet::addr`] is `addr`: how helpers check a map argument is one of
    /// the program's maps before using it.
    pub fn by_addr(&self, addr: u64) -> Option<&Arc<Map>> {
        self.maps.iter().find(|m| Arc::as_ptr(m) as u64 == addr)
    }

    /// [`Map::contains`] over every map of the set.
    pub fn contains(&self, addr: u64, len: u64) -> Option<bool> {
        self.maps.iter().find_map(|m| m.contains(addr, len))
    }

    /// How the map at `index` came to be.
    pub fn origin(&self, index: usize) -> Option<Origin> {
        self.origin.get(index).copied()
    }

    /// `(name, origin)` of every map, for the hot-swap log.
    pub fn report(&self) -> Vec<(String, Origin)> {
        self.maps.iter().zip(&self.origin).map(|(m, &o)| (m.spec.name.clone(), o)).collect()
    }

    /// The maps, by index.
    pub fn iter(&self) -> std::slice::Iter<'_, Arc<Map>> {
        self.maps.iter()
    }

    /// Number of maps.
    pub fn len(&self) -> usize {
        self.maps.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }
}

impl<'a> IntoIterator for &'a MapSet {
    type Item = &'a Arc<Map>;
    type IntoIter = std::slice::Iter<'a, Arc<Map>>;
    fn into_iter(self) -> Self::IntoIter {
        self.maps.iter()
    }
}

#[cfg(test)]
mod tests;
