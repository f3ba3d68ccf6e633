//! The vSwitch engine: GFT fast path per worker shard, one shared VFP slow path, and the
//! control handle.
//!
//! # The three speeds
//!
//! 1. **Cached flow** (fast path, per packet): extract the [`FlowKey`], hash it, look it up in the
//!    shard's GFT (the batch's lookups are issued together so their cache misses overlap), check
//!    the entry's vPort epoch, run its meters, apply its [`Transposition`], count. No lock, no
//!    allocation.
//! 2. **Exception packet** (a miss, or a stale epoch): the packet is moved (buffer swap, no copy)
//!    into the shard's bounded exception queue; later packets of the same flow queue behind it,
//!    so a flow is never reordered. Overflow is a counted drop (`exception_overflow`).
//! 3. **Slow path**: at the end of the batch the shard takes the slow-path lock once, compiles
//!    up to `slow_budget` queued packets through the vPort's layers ([`crate::vfp`]), installs
//!    the unified flow (and the reverse flow of a stateful connection), applies it to the packet
//!    and releases the packet into the batch. Denied flows are cached as drop entries.
//!
//! TCP SYN, FIN and RST segments of cached flows are forwarded by the fast path and a copy of
//! their key and flags goes to the slow path, which tracks the connection and tells every shard
//! to remove the flow after FIN/RST and time-wait.
//!
//! # Policy changes and epochs
//!
//! A policy change ([`VSwitch::apply`]) is validated as a whole first (nothing is applied
//! half-way), swapped into the slow path, and bumps the epoch of every vPort it touched. A cached
//! entry remembers the epoch it was compiled under; a packet that finds an older epoch is an
//! exception and is compiled again under the new policy. `apply` returns (the change is
//! *acknowledged*) only after every shard has finished the batch it was processing when the
//! epochs moved (each shard's state lock is taken once: a grace period), so from then on no
//! packet is handled by a stale action.
//!
//! # Handing over to a new process
//!
//! [`VSwitch::export_state`] and [`VSwitch::import_state`] move a vSwitch's state to a new
//! process for a hitless upgrade: the policy in force, the generation and epochs, every
//! connection (TCP state, SNAT binding, idle time) and the counters, as a versioned
//! [`VSwitchState`] with times relative to the exporter's clock. The shards' flow tables are
//! not carried (the new process compiles each flow again from its connection at its first
//! packet); see the `state` submodule's doc ([`VSwitchState`]) and [`crate::vfp::state`].
//!
//! # Locks
//!
//! Each shard's state sits behind a mutex that its worker takes once per batch (uncontended: the
//! control plane takes it only to dump flows and for the grace period). The slow path's mutex is
//! taken once per batch that has exceptions, TCP copies or expired flows. Lock order: shard, then
//! slow path; the control plane never holds the slow path while taking a shard.
//!
//! A vPort's meter is one [`SharedBucket`] for all shards (atomics, no lock: with N workers the
//! vPort still gets its rate, not N times it); each shard holds the buckets by `Arc`, picked up
//! with the policy. Per-flow meters keep their bucket in the flow entry (one shard per flow).

use crate::gft::{ActionId, Candidate, FlowEntry, FlowId, Gft, GftConfig, GftError, GftStats};
use crate::key::{self, Direction, FlowKey, VPortId};
use crate::policy::edit::{PolicyEdit, apply_edits};
use crate::policy::validate::{ConfigError, validate};
use crate::policy::{Exceed, MeterSpec, Policy};
use crate::qos::{self, EgressQueue, Enqueued, MarkResult, QueueStats, SharedBucket};
use crate::tcp;
use crate::transposition::Transposition;
use crate::vfp::{FlowAction, SlowPath, SlowPathConfig, SlowPathStats, UnifiedFlow, Verdict};
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use core::time::Duration;
use hashbrown::HashMap;
use snic_pipeline::{Batch, DropReason, MAX_BATCH, PacketBuf, PortId, Stage, StageCtx, TraceWhat};
use snic_time::Instant;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

mod state;
pub use crate::vfp::state::{ConnProblem, ImportError};
pub use state::{ImportSummary, STATE_VERSION, VPortEpoch, VPortMeterState, VSwitchState};

/// The action id of a cached drop (a denied flow): no action-table slot.
pub const DROP_ACTION: ActionId = ActionId(u32::MAX);

/// Bits of [`FlowEntry::flags`].
pub mod entry_flags {
    /// Copy this flow's TCP SYN/FIN/RST to the slow path.
    pub const TRACK_TCP: u16 = 1 << 0;
    /// A cached drop (the policy denied the flow).
    pub const DROP: u16 = 1 << 1;
    /// The reverse flow of a stateful connection (installed with its forward flow).
    pub const REVERSE: u16 = 1 << 2;
}

/// Settings of a vSwitch (all shards).
#[derive(Debug, Clone)]
pub struct VSwitchConfig {
    /// Flow table of each shard.
    pub gft: GftConfig,
    /// Packets each shard's exception queue holds.
    pub exception_queue: usize,
    /// Most exception packets a shard compiles per batch (the slow path's share of the core).
    pub slow_budget: usize,
    /// Flow-table slots examined for idle aging per batch.
    pub age_budget: usize,
    /// TCP SYN/FIN/RST copies a shard buffers per batch for the slow path.
    pub tcp_copies: usize,
    /// Slow-path settings.
    pub slow: SlowPathConfig,
}

impl Default for VSwitchConfig {
    fn default() -> Self {
        VSwitchConfig {
            gft: GftConfig::default(),
            exception_queue: 1024,
            slow_budget: MAX_BATCH,
            age_budget: 64,
            tcp_copies: 1024,
            slow: SlowPathConfig::default(),
        }
    }
}

/// Why a vSwitch could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum VSwitchError {
    /// The policy is invalid.
    Policy(ConfigError),
    /// The flow table settings are invalid.
    Table(GftError),
    /// A setting is out of range.
    Setting(String),
}

impl fmt::Display for VSwitchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VSwitchError::Policy(e) => write!(f, "{e}"),
            VSwitchError::Table(e) => write!(f, "flow table: {e}"),
            VSwitchError::Setting(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for VSwitchError {}

/// Counters of the fast path and exception handling (one shard, or all summed).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShardStats {
    /// Packets served by a cached flow.
    pub hits: u64,
    /// Packets that found no cached flow.
    pub misses: u64,
    /// Packets whose cached flow was from an older epoch (re-evaluated).
    pub stale: u64,
    /// Packets queued behind an earlier exception packet of their flow (order kept).
    pub queued_behind: u64,
    /// Exception packets compiled by the slow path.
    pub compiled: u64,
    /// Exception packets served by a flow installed meanwhile (no compile needed).
    pub late_hits: u64,
    /// Exception packets dropped because the queue was full.
    pub exception_overflow: u64,
    /// Flows installed (forward).
    pub installs: u64,
    /// Reverse flows installed for stateful connections.
    pub reverse_installs: u64,
    /// Denied flows cached as drop entries.
    pub drop_entries: u64,
    /// Packets dropped by policy: first packets (by reason in `denied_by`) and packets that hit
    /// a cached drop entry (`denied_cached`).
    pub denied: u64,
    /// Packets dropped by a cached drop entry (their flow was denied earlier).
    pub denied_cached: u64,
    /// Denials by reason (slow path).
    #[serde(deserialize_with = "state::deny_names")]
    pub denied_by: std::collections::BTreeMap<&'static str, u64>,
    /// TCP SYN/FIN/RST copies sent to the slow path.
    pub tcp_copies: u64,
    /// TCP copies lost because the per-batch buffer was full.
    pub tcp_copy_overflow: u64,
    /// Flows removed on the slow path's request (TCP close, policy change).
    pub removed: u64,
    /// Flows aged out.
    pub expired: u64,
    /// Flows evicted to make room.
    pub evicted: u64,
    /// Packets dropped by a meter.
    pub meter_drops: u64,
    /// Packets ECN-marked by a meter.
    pub meter_marks: u64,
    /// Packets a shared per-vPort meter refused because it lost its compare-exchange to other
    /// shards too many times in a row ([`qos::Take::Contended`]); they are also counted as
    /// `meter_drops` or `meter_marks`, as for any packet above the rate.
    pub meter_contended: u64,
    /// Packets whose transposition failed.
    pub transpose_errors: u64,
    /// Frames that are not flows (neither IP nor ARP).
    pub not_flow: u64,
    /// Packets on ports the policy does not name (passed through untouched).
    pub passthrough: u64,
    /// Cached flows dropped by fast-path restarts ([`VSwitch::restart_fastpath`]).
    pub flushed: u64,
    /// Packets the slow path served alone while the fast path was off (compiled, not cached).
    pub slow_served: u64,
}

impl ShardStats {
    fn merge(&mut self, o: &ShardStats) {
        self.hits += o.hits;
        self.misses += o.misses;
        self.stale += o.stale;
        self.queued_behind += o.queued_behind;
        self.compiled += o.compiled;
        self.late_hits += o.late_hits;
        self.exception_overflow += o.exception_overflow;
        self.installs += o.installs;
        self.reverse_installs += o.reverse_installs;
        self.drop_entries += o.drop_entries;
        self.denied += o.denied;
        self.denied_cached += o.denied_cached;
        for (k, v) in &o.denied_by {
            *self.denied_by.entry(k).or_default() += v;
        }
        self.tcp_copies += o.tcp_copies;
        self.tcp_copy_overflow += o.tcp_copy_overflow;
        self.removed += o.removed;
        self.expired += o.expired;
        self.evicted += o.evicted;
        self.meter_drops += o.meter_drops;
        self.meter_marks += o.meter_marks;
        self.meter_contended += o.meter_contended;
        self.transpose_errors += o.transpose_errors;
        self.not_flow += o.not_flow;
        self.passthrough += o.passthrough;
        self.flushed += o.flushed;
        self.slow_served += o.slow_served;
    }
}

/// Everything `snic vswitch show` prints.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct VSwitchStats {
    /// Policy generation (bumped by every applied change).
    pub generation: u64,
    /// Shards (workers).
    pub shards: usize,
    /// Cached flows in all shards.
    pub flows: usize,
    /// Flow-table capacity of all shards.
    pub capacity: usize,
    /// Distinct compiled actions in all shards.
    pub actions: usize,
    /// Packets waiting in exception queues.
    pub exceptions_queued: usize,
    /// Fast-path restarts done ([`VSwitch::restart_fastpath`]).
    pub restarts: u64,
    /// Until when (run clock, nanoseconds) the slow path serves every packet; 0 when no restart
    /// ever turned the fast path off.
    pub fastpath_off_until_ns: u64,
    /// Fast-path and exception counters, summed.
    pub fast: ShardStats,
    /// Flow-table counters, summed.
    #[serde(skip)]
    pub table: Vec<GftStats>,
    /// Slow-path counters.
    #[serde(skip)]
    pub slow: SlowPathStats,
    /// Egress queues (per shard and port).
    #[serde(skip)]
    pub queues: Vec<(u16, QueueStats)>,
}

/// One cached flow, as `snic vswitch dump-flows` prints it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FlowDump {
    /// Shard (worker) holding it.
    pub shard: usize,
    /// The exact-match key.
    pub key: String,
    /// The action: transposition, output port, meters; or `drop`.
    pub actions: String,
    /// Packets served.
    pub packets: u64,
    /// Bytes served.
    pub bytes: u64,
    /// Seconds since it was installed.
    pub age_secs: f64,
    /// Seconds since its last packet.
    pub used_secs: f64,
    /// The vPort epoch it was compiled under.
    pub epoch: u32,
    /// True when its vPort's epoch moved on (the next packet re-evaluates it).
    pub stale: bool,
}

impl fmt::Display for FlowDump {
    /// `ovs-appctl dpctl/dump-flows` style: one line per flow.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, packets:{}, bytes:{}, used:{:.3}s, age:{:.3}s, epoch:{}{}, actions:{}",
            self.key,
            self.packets,
            self.bytes,
            self.used_secs,
            self.age_secs,
            self.epoch,
            if self.stale { " (stale)" } else { "" },
            self.actions
        )
    }
}

/// What a policy change did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The new policy generation.
    pub generation: u64,
    /// vPorts whose epoch was bumped.
    pub vports: Vec<VPortId>,
    /// Cached flows removed because the new policy ends their connection.
    pub removed: usize,
}

/// Compiled actions of one shard, interned: flows with the same action share one slot.
#[derive(Debug, Default)]
struct ActionTable {
    slots: Vec<Option<(FlowAction, u32)>>,
    index: HashMap<FlowAction, u32>,
    free: Vec<u32>,
}

impl ActionTable {
    fn intern(&mut self, a: FlowAction) -> ActionId {
        if let Some(&i) = self.index.get(&a) {
            if let Some(Some((_, refs))) = self.slots.get_mut(i as usize) {
                *refs += 1;
            }
            return ActionId(i);
        }
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some((a.clone(), 1));
                i
            }
            None => {
                self.slots.push(Some((a.clone(), 1)));
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(a, i);
        ActionId(i)
    }

    #[inline]
    fn get(&self, id: ActionId) -> Option<&FlowAction> {
        self.slots.get(id.0 as usize).and_then(|s| s.as_ref()).map(|(a, _)| a)
    }

    fn release(&mut self, id: ActionId) {
        if id == DROP_ACTION {
            return;
        }
        let Some(slot) = self.slots.get_mut(id.0 as usize) else { return };
        let gone = match slot {
            Some((_, refs)) => {
                *refs -= 1;
                *refs == 0
            }
            None => false,
        };
        if gone && let Some((a, _)) = slot.take() {
            self.index.remove(&a);
            self.free.push(id.0);
        }
    }

    fn len(&self) -> usize {
        self.index.len()
    }
}

/// A packet waiting for the slow path.
#[derive(Debug)]
struct Exception {
    pkt: PacketBuf,
    key: FlowKey,
    hash: u64,
}

/// What the fast path decided for one packet.
enum Fate {
    Keep,
    Drop(DropReason),
    /// Moved into a queue (exception queue or egress queue); the batch slot holds a spare.
    Held,
}

/// The state of one shard (one worker's share of the flows).
#[derive(Debug)]
pub struct Shard {
    index: usize,
    gft: Gft,
    actions: ActionTable,
    exc: VecDeque<Exception>,
    exc_cap: usize,
    spare: Vec<PacketBuf>,
    pending: HashMap<FlowKey, u32>,
    tcp_events: Vec<(FlowKey, u8)>,
    tcp_cap: usize,
    removals: Vec<FlowKey>,
    evicted: Vec<FlowKey>,
    queues: Vec<EgressQueue>,
    queue_specs: Vec<crate::policy::QueueSpec>,
    draining: Vec<EgressQueue>,
    queue_of_port: Vec<Option<usize>>,
    /// Per-vPort meter buckets by vPort id: clones of [`Shared::vport_meters`], shared by
    /// every shard.
    vport_meters: Vec<Option<Arc<SharedBucket>>>,
    meters: Vec<MeterSpec>,
    roles: Vec<Option<Direction>>,
    generation: u64,
    slow_deadline: Option<Instant>,
    /// True for a batch that runs while the fast path is off (a restart's window): every flow
    /// packet is served by the slow path and nothing is cached.
    bypass: bool,
    stats: ShardStats,
    slow_budget: usize,
    age_budget: usize,
    keys: Vec<FlowKey>,
    hashes: Vec<u64>,
    ids: Vec<Option<FlowId>>,
    cands: Vec<Candidate>,
    kinds: Vec<PacketKind>,
    keep: Vec<bool>,
}

/// Packets whose keys and lookups are prepared together before they are served.
const CHUNK: usize = 32;

/// What the fast path does with one packet of a batch, decided when its flow key is extracted.
/// One byte per packet of the shard's scratch (`Shard::kinds`).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PacketKind {
    /// It arrived on a port the policy does not name (neither a vPort's nor the underlay's):
    /// passed through untouched, counted in `passthrough`.
    Passthrough = 0,
    /// Its flow key was extracted: it is hashed, looked up in the GFT, then served by its cached
    /// flow or queued as an exception for the slow path.
    Flow = 1,
    /// It arrived on a vPort or the underlay but has no flow key (neither IP nor ARP, or its
    /// headers did not parse): dropped as `NotAFlow`, counted in `not_flow`.
    NotAFlow = 2,
}

#[derive(Debug)]
struct ShardCell {
    state: Mutex<Shard>,
    removals: Mutex<Vec<FlowKey>>,
    has_removals: AtomicBool,
    pending: AtomicUsize,
    /// Next deadline in nanoseconds (`u64::MAX`: none).
    deadline: AtomicU64,
}

#[derive(Debug)]
struct Shared {
    slow: Mutex<SlowPath>,
    epochs: Box<[AtomicU32]>,
    generation: AtomicU64,
    shards: Mutex<Vec<Arc<ShardCell>>>,
    /// The per-vPort meter buckets by vPort id, one for all shards (each shard keeps clones of
    /// the `Arc`s, so the fast path takes no lock). Updated with the policy, under the slow
    /// path's lock; a leaf lock (nothing is locked while holding it).
    vport_meters: Mutex<Vec<Option<Arc<SharedBucket>>>>,
    /// Until when (run clock, nanoseconds) the fast path is off: 0 = on.
    fastpath_off_until: AtomicU64,
    /// Fast-path restarts done.
    restarts: AtomicU64,
    /// Fast-path counters carried over from the process this one took over from
    /// ([`VSwitch::import_state`]), added to the shards' own in [`VSwitch::stats`]. A leaf lock.
    carried: Mutex<ShardStats>,
    cfg: VSwitchConfig,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    #[inline]
    fn epoch(&self, vport: u16) -> u32 {
        self.epochs[usize::from(vport)].load(Ordering::Acquire)
    }

    /// The epoch a cached drop is compiled under: the policy generation (truncated). The slow
    /// path does not say which vPort denied a flow (an inbound packet may match none), so any
    /// policy change re-evaluates cached drops.
    #[inline]
    fn drop_epoch(&self) -> u32 {
        self.generation.load(Ordering::Acquire) as u32
    }

    /// True when `e` was compiled under the policy in force: its vPort's epoch for a flow, the
    /// generation for a cached drop.
    #[inline]
    fn is_current(&self, e: &FlowEntry) -> bool {
        let now =
            if e.flags & entry_flags::DROP != 0 { self.drop_epoch() } else { self.epoch(e.vport) };
        now == e.epoch
    }

    /// Ask every shard to uncache `keys` (at its next batch).
    fn broadcast(&self, keys: &[FlowKey], skip: Option<usize>) {
        if keys.is_empty() {
            return;
        }
        for (i, cell) in lock(&self.shards).iter().enumerate() {
            if Some(i) == skip {
                continue;
            }
            lock(&cell.removals).extend_from_slice(keys);
            cell.has_removals.store(true, Ordering::Release);
        }
    }
}

/// A vSwitch: the control handle shared by the control plane and every shard.
#[derive(Debug, Clone)]
pub struct VSwitch {
    shared: Arc<Shared>,
}

impl VSwitch {
    /// A vSwitch with `policy` (validated first) and `cfg`.
    pub fn new(policy: Policy, cfg: VSwitchConfig) -> Result<VSwitch, VSwitchError> {
        validate(&policy).map_err(VSwitchError::Policy)?;
        if cfg.exception_queue == 0 || cfg.exception_queue > 1 << 20 {
            return Err(VSwitchError::Setting(format!(
                "exception_queue must be 1..=1048576, got {}",
                cfg.exception_queue
            )));
        }
        // Fail early on bad table settings rather than at the first shard.
        Gft::new(GftConfig { capacity: 1, ..cfg.gft.clone() }).map_err(VSwitchError::Table)?;
        if cfg.gft.capacity == 0 || cfg.gft.capacity > crate::gft::MAX_CAPACITY {
            return Err(VSwitchError::Setting(format!(
                "flow table capacity must be 1..={}, got {}",
                crate::gft::MAX_CAPACITY,
                cfg.gft.capacity
            )));
        }
        let epochs = (0..=u16::MAX as usize).map(|_| AtomicU32::new(1)).collect();
        let mut vport_meters = Vec::new();
        sync_vport_meters(&mut vport_meters, &policy);
        let slow = SlowPath::new(Arc::new(policy), cfg.slow.clone());
        Ok(VSwitch {
            shared: Arc::new(Shared {
                slow: Mutex::new(slow),
                epochs,
                generation: AtomicU64::new(1),
                shards: Mutex::new(Vec::new()),
                vport_meters: Mutex::new(vport_meters),
                fastpath_off_until: AtomicU64::new(0),
                restarts: AtomicU64::new(0),
                carried: Mutex::new(ShardStats::default()),
                cfg,
            }),
        })
    }

    /// A new shard and the pipeline stage that drives it (one per worker).
    pub fn stage(&self) -> Result<VSwitchStage, VSwitchError> {
        let cfg = &self.shared.cfg;
        let mut shards = lock(&self.shared.shards);
        let index = shards.len();
        let gft = shard_table(cfg, index)?;
        let mut shard = Shard {
            index,
            gft,
            actions: ActionTable::default(),
            exc: VecDeque::with_capacity(cfg.exception_queue),
            exc_cap: cfg.exception_queue,
            spare: (0..cfg.exception_queue.min(4096)).map(|_| PacketBuf::new()).collect(),
            pending: HashMap::with_capacity(cfg.exception_queue),
            tcp_events: Vec::with_capacity(cfg.tcp_copies),
            tcp_cap: cfg.tcp_copies,
            removals: Vec::new(),
            evicted: Vec::new(),
            queues: Vec::new(),
            queue_specs: Vec::new(),
            draining: Vec::new(),
            queue_of_port: Vec::new(),
            vport_meters: Vec::new(),
            meters: Vec::new(),
            roles: Vec::new(),
            generation: 0,
            slow_deadline: None,
            bypass: false,
            stats: ShardStats::default(),
            slow_budget: cfg.slow_budget.max(1),
            age_budget: cfg.age_budget,
            keys: vec![FlowKey::default(); MAX_BATCH],
            hashes: vec![0; MAX_BATCH],
            ids: vec![None; MAX_BATCH],
            cands: vec![Candidate::default(); MAX_BATCH],
            kinds: vec![PacketKind::Passthrough; MAX_BATCH],
            keep: vec![true; MAX_BATCH],
        };
        shard.refresh(&self.shared, Instant::ZERO);
        // Slow-path timers already pending (connections carried over by `import_state`) run
        // from this shard's first batch.
        shard.slow_deadline = lock(&self.shared.slow).poll_timeout();
        let deadline = shard.next_deadline().map_or(u64::MAX, |t| t.as_nanos());
        let cell = Arc::new(ShardCell {
            state: Mutex::new(shard),
            removals: Mutex::new(Vec::new()),
            has_removals: AtomicBool::new(false),
            pending: AtomicUsize::new(0),
            deadline: AtomicU64::new(deadline),
        });
        shards.push(cell.clone());
        Ok(VSwitchStage { shared: self.shared.clone(), cell })
    }

    /// The policy in force.
    pub fn policy(&self) -> Arc<Policy> {
        lock(&self.shared.slow).policy().clone()
    }

    /// The current policy generation.
    pub fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    /// The current epoch of a vPort.
    pub fn epoch(&self, vport: VPortId) -> u32 {
        self.shared.epoch(vport.0)
    }

    /// Apply `edits` as one transaction. On error nothing changed. On success the change is
    /// acknowledged: no packet processed after this returns uses an action compiled under the
    /// old policy for the vPorts that changed.
    pub fn apply(&self, edits: &[PolicyEdit]) -> Result<Applied, ConfigError> {
        let mut removals = Vec::new();
        let (generation, vports) = {
            let mut slow = lock(&self.shared.slow);
            let (next, changed) = apply_edits(slow.policy(), edits)?;
            sync_vport_meters(&mut lock(&self.shared.vport_meters), &next);
            slow.set_policy(Arc::new(next), &mut removals);
            for v in &changed {
                self.shared.epochs[usize::from(v.0)].fetch_add(1, Ordering::AcqRel);
            }
            let g = self.shared.generation.fetch_add(1, Ordering::AcqRel) + 1;
            (g, changed)
        };
        let removed = removals.len();
        self.shared.broadcast(&removals, None);
        self.grace_period();
        Ok(Applied { generation, vports, removed })
    }

    /// Replace the whole policy (one transaction).
    pub fn replace(&self, policy: Policy) -> Result<Applied, ConfigError> {
        self.apply(&[PolicyEdit::Replace(policy)])
    }

    /// Wait until every shard finished the batch it was in when the epochs moved.
    fn grace_period(&self) {
        let cells: Vec<Arc<ShardCell>> = lock(&self.shared.shards).clone();
        for c in cells {
            drop(lock(&c.state));
        }
    }

    /// Up to `limit` cached flows of every shard, with ages relative to `now`.
    pub fn dump_flows(&self, now: Instant, limit: usize) -> Vec<FlowDump> {
        let cells: Vec<Arc<ShardCell>> = lock(&self.shared.shards).clone();
        let mut out = Vec::new();
        for c in cells {
            if out.len() >= limit {
                break;
            }
            let s = lock(&c.state);
            for (_, e) in s.gft.iter() {
                if out.len() >= limit {
                    break;
                }
                out.push(s.dump(&self.shared, now, e));
            }
        }
        out
    }

    /// The cached flows of `key` in every shard (a read-only lookup, for `snic trace`): what
    /// the fast path would do with a packet of that key now. Nothing is counted or aged.
    pub fn cached(&self, now: Instant, key: &FlowKey) -> Vec<FlowDump> {
        let cells: Vec<Arc<ShardCell>> = lock(&self.shared.shards).clone();
        let mut out = Vec::new();
        for c in cells {
            let s = lock(&c.state);
            if let Some(e) = s.gft.lookup(s.gft.hash(key), key).and_then(|id| s.gft.get(id)) {
                out.push(s.dump(&self.shared, now, e));
            }
        }
        out
    }

    /// Counters of every shard and of the slow path.
    pub fn stats(&self) -> VSwitchStats {
        let cells: Vec<Arc<ShardCell>> = lock(&self.shared.shards).clone();
        let mut st = VSwitchStats {
            generation: self.generation(),
            shards: cells.len(),
            restarts: self.shared.restarts.load(Ordering::Acquire),
            fastpath_off_until_ns: self.shared.fastpath_off_until.load(Ordering::Acquire),
            ..Default::default()
        };
        for c in cells {
            let s = lock(&c.state);
            st.flows += s.gft.len();
            st.capacity += s.gft.capacity();
            st.actions += s.actions.len();
            st.exceptions_queued += s.exc.len();
            st.fast.merge(&s.stats);
            st.table.push(s.gft.stats());
            st.queues.extend(s.queues.iter().map(|q| (q.port(), q.stats())));
        }
        st.fast.merge(&lock(&self.shared.carried));
        st.slow = lock(&self.shared.slow).stats();
        st
    }

    /// The large memory regions of every shard's flow table (address, length), for the I/O
    /// layer to back with huge pages.
    pub fn table_regions(&self) -> Vec<(usize, usize)> {
        let cells: Vec<Arc<ShardCell>> = lock(&self.shared.shards).clone();
        cells.iter().flat_map(|c| lock(&c.state).gft.memory_regions()).collect()
    }

    /// Bytes reserved by the flow tables of all shards.
    pub fn table_memory(&self) -> usize {
        let cells: Vec<Arc<ShardCell>> = lock(&self.shared.shards).clone();
        cells.iter().map(|c| lock(&c.state).gft.memory_bytes()).sum()
    }
}

/// Bring the per-vPort meter buckets in line with `policy`: a vPort whose meter is set keeps
/// its bucket (and its level; new settings take effect in place, the level cut down to a
/// smaller burst), one that gains a meter gets a full bucket, one that loses it drops it.
fn sync_vport_meters(buckets: &mut Vec<Option<Arc<SharedBucket>>>, policy: &Policy) {
    let max_id = policy.vports.iter().map(|v| usize::from(v.id.0)).max().map_or(0, |m| m + 1);
    let mut next: Vec<Option<Arc<SharedBucket>>> = vec![None; max_id];
    for v in &policy.vports {
        let Some(m) = v.meter.and_then(|m| policy.meters.get(usize::from(m.0))) else {
            continue;
        };
        let b = match buckets.get_mut(usize::from(v.id.0)).and_then(Option::take) {
            Some(b) => {
                if (b.rate_bps(), b.burst_bytes())
                    != (m.rate_bps, m.burst_bytes.min(qos::MAX_BURST_BYTES))
                {
                    b.set(m.rate_bps, m.burst_bytes);
                }
                b
            }
            // Stamped at time zero: full, and still full at the first packet (the refill is
            // capped at the burst), whatever the clock reads then.
            None => Arc::new(SharedBucket::new(m.rate_bps, m.burst_bytes, Instant::ZERO)),
        };
        if let Some(slot) = next.get_mut(usize::from(v.id.0)) {
            *slot = Some(b);
        }
    }
    *buckets = next;
}

/// The vPort meter of `a` for a packet of `len` bytes: `Ok(true)` when the packet is to be
/// CE-marked, `Err` with the drop. One bucket serves all shards (lock-free); a take that keeps
/// losing races to other shards is a counted non-conformance. A free function over the shard's
/// fields so [`Shard::serve`] can call it while it holds its cached entry and action.
#[inline(always)]
fn vport_meter(
    stats: &mut ShardStats,
    meters: &[MeterSpec],
    vport_meters: &[Option<Arc<SharedBucket>>],
    a: &FlowAction,
    now: Instant,
    len: u32,
) -> Result<bool, Fate> {
    if let Some(m) = a.vport_meter
        && let Some(spec) = meters.get(usize::from(m.0))
        && let Some(Some(b)) = vport_meters.get(usize::from(a.vport.0))
    {
        let took = b.take(now, len);
        if took == qos::Take::Contended {
            stats.meter_contended += 1;
        }
        if took != qos::Take::Conform {
            return match spec.exceed {
                Exceed::Drop => {
                    stats.meter_drops += 1;
                    Err(Fate::Drop(DropReason::Metered))
                }
                Exceed::Mark => Ok(true),
            };
        }
    }
    Ok(false)
}

/// The end every served packet shares: the transposition, the CE mark when a meter asked for
/// one, and the egress port with its queue, if it has one.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn egress(
    stats: &mut ShardStats,
    queue_of_port: &[Option<usize>],
    queues: &mut [EgressQueue],
    now: Instant,
    p: &mut PacketBuf,
    a: &FlowAction,
    hash: u64,
    mark: bool,
) -> Fate {
    if a.transposition.apply(p, (hash ^ (hash >> 32)) as u32).is_err() {
        stats.transpose_errors += 1;
        return Fate::Drop(DropReason::TransposeFailed);
    }
    p.meta.parsed = false;
    if mark {
        match qos::mark_ce(p.data_mut()) {
            MarkResult::Marked | MarkResult::AlreadyCe => stats.meter_marks += 1,
            MarkResult::NotEct | MarkResult::NotIp => {
                stats.meter_drops += 1;
                return Fate::Drop(DropReason::Metered);
            }
        }
    }
    let egress = a.egress;
    p.meta.egress = Some(PortId(egress));
    if let Some(Some(q)) = queue_of_port.get(usize::from(egress))
        && let Some(q) = queues.get_mut(*q)
    {
        return match q.enqueue(now, p) {
            Enqueued::Queued | Enqueued::QueuedMarked => Fate::Held,
            Enqueued::DroppedFull => Fate::Drop(DropReason::EgressQueueFull),
        };
    }
    Fate::Keep
}

impl Shard {
    /// Pick up a new policy generation: roles, meters, queues.
    fn refresh(&mut self, shared: &Shared, now: Instant) {
        let g = shared.generation.load(Ordering::Acquire);
        if g == self.generation {
            return;
        }
        self.generation = g;
        // The policy and the meter buckets made for it, read together.
        let (policy, meters) = {
            let slow = lock(&shared.slow);
            (slow.policy().clone(), lock(&shared.vport_meters).clone())
        };
        self.roles.clear();
        let mut set_role = |port: u16, d: Direction| {
            let i = usize::from(port);
            if self.roles.len() <= i {
                self.roles.resize(i + 1, None);
            }
            self.roles[i] = Some(d);
        };
        for v in &policy.vports {
            set_role(v.port, Direction::Out);
        }
        set_role(policy.underlay.port, Direction::In);
        if self.meters != policy.meters {
            self.meters = policy.meters.clone();
        }
        // vPort meters: the shared buckets (kept across policy changes by the registry).
        self.vport_meters.clone_from(&meters);
        // Egress queues: rebuilt when their specs change; a replaced queue that still holds
        // packets keeps draining (no new packets) until empty.
        if self.queue_specs != policy.queues {
            let old = core::mem::take(&mut self.queues);
            self.draining.extend(old.into_iter().filter(|q| !q.is_empty()));
            self.queues = policy.queues.iter().map(|s| EgressQueue::new(s, now)).collect();
            self.queue_specs = policy.queues.clone();
            self.queue_of_port.clear();
            for (i, q) in self.queues.iter().enumerate() {
                let p = usize::from(q.port());
                if self.queue_of_port.len() <= p {
                    self.queue_of_port.resize(p + 1, None);
                }
                self.queue_of_port[p] = Some(i);
            }
        }
    }

    fn dump(&self, shared: &Shared, now: Instant, e: &FlowEntry) -> FlowDump {
        let actions = if e.action == DROP_ACTION {
            "drop".to_string()
        } else {
            match self.actions.get(e.action) {
                Some(a) => describe(a),
                None => "?".to_string(),
            }
        };
        FlowDump {
            shard: self.index,
            key: e.key.to_string(),
            actions,
            packets: e.packets,
            bytes: e.bytes,
            age_secs: now.saturating_duration_since(e.created).as_secs_f64(),
            used_secs: now.saturating_duration_since(e.last_seen).as_secs_f64(),
            epoch: e.epoch,
            stale: !shared.is_current(e),
        }
    }

    /// Uncache `key` (if cached), releasing its action.
    fn uncache(&mut self, key: &FlowKey) {
        let h = self.gft.hash(key);
        if let Some(e) = self.gft.remove(h, key) {
            self.actions.release(e.action);
            self.stats.removed += 1;
        }
    }

    fn take_removals(&mut self, cell: &ShardCell) {
        if !cell.has_removals.swap(false, Ordering::AcqRel) {
            return;
        }
        let keys = core::mem::take(&mut *lock(&cell.removals));
        for k in &keys {
            self.uncache(k);
        }
    }

    /// Insert a compiled flow; returns its slot. Displaced entries are remembered for the slow
    /// path (their connection state) and their actions released.
    fn install(
        &mut self,
        now: Instant,
        shared: &Shared,
        flow: UnifiedFlow,
        reverse: bool,
    ) -> FlowId {
        let vport = flow.action.vport.0;
        let epoch = shared.epoch(vport);
        let meter_burst = flow
            .action
            .meter
            .and_then(|m| self.meters.get(usize::from(m.0)))
            .map_or(0, |m| m.burst_bytes);
        let (tokens, stamp) = qos::bucket_init(meter_burst, now);
        let mut flags = if flow.action.track_tcp { entry_flags::TRACK_TCP } else { 0 };
        if reverse {
            flags |= entry_flags::REVERSE;
        }
        let action = self.actions.intern(flow.action);
        let entry = FlowEntry {
            flags,
            meter_tokens: tokens,
            meter_stamp: stamp,
            ..FlowEntry::new(flow.key, action, vport, epoch, now)
        };
        self.insert(now, entry)
    }

    /// Cache a denied flow as a drop entry, current until the next policy change.
    fn install_drop(&mut self, now: Instant, shared: &Shared, key: FlowKey) {
        let entry = FlowEntry {
            flags: entry_flags::DROP,
            ..FlowEntry::new(key, DROP_ACTION, 0, shared.drop_epoch(), now)
        };
        self.insert(now, entry);
        self.stats.drop_entries += 1;
    }

    /// Insert `entry` into the flow table. What it displaced (an older entry of the same key,
    /// or a victim evicted to make room) gives back its action; an evicted flow is remembered
    /// for the slow path (its connection state).
    fn insert(&mut self, now: Instant, entry: FlowEntry) -> FlowId {
        let key = entry.key;
        let hash = self.gft.hash(&key);
        let (id, displaced) = self.gft.insert(now, hash, entry);
        if let Some(old) = displaced {
            self.actions.release(old.action);
            if old.key != key {
                self.stats.evicted += 1;
                self.evicted.push(old.key);
            }
        }
        id
    }

    /// Move `p` into the exception queue (buffer swap; no copy).
    fn enqueue_exception(&mut self, p: &mut PacketBuf, key: FlowKey, hash: u64) -> Fate {
        if self.exc.len() >= self.exc_cap {
            self.stats.exception_overflow += 1;
            return Fate::Drop(DropReason::ExceptionOverflow);
        }
        let mut buf = self.spare.pop().unwrap_or_default();
        core::mem::swap(p, &mut buf);
        self.exc.push_back(Exception { pkt: buf, key, hash });
        *self.pending.entry(key).or_insert(0) += 1;
        Fate::Held
    }

    /// Serve `p` with the cached entry `id`: meters, transposition, counters, TCP copy, egress
    /// queue.
    #[inline(always)]
    fn serve(&mut self, now: Instant, p: &mut PacketBuf, id: FlowId, hash: u64) -> Fate {
        let len = p.len() as u32;
        let e = self.gft.entry_mut(id);
        e.packets += 1;
        e.bytes += u64::from(len);
        e.last_seen = now;
        if e.action == DROP_ACTION {
            self.stats.denied += 1;
            self.stats.denied_cached += 1;
            return Fate::Drop(DropReason::PolicyDeny);
        }
        let Some(a) = self.actions.get(e.action) else {
            self.stats.transpose_errors += 1;
            return Fate::Drop(DropReason::TransposeFailed);
        };
        let mut mark = false;
        if let Some(m) = a.meter
            && let Some(spec) = self.meters.get(usize::from(m.0))
            && !qos::bucket_take(
                &mut e.meter_tokens,
                &mut e.meter_stamp,
                spec.rate_bps,
                spec.burst_bytes,
                now,
                len,
            )
        {
            match spec.exceed {
                Exceed::Drop => {
                    self.stats.meter_drops += 1;
                    return Fate::Drop(DropReason::Metered);
                }
                Exceed::Mark => mark = true,
            }
        }
        match vport_meter(&mut self.stats, &self.meters, &self.vport_meters, a, now, len) {
            Ok(m) => mark |= m,
            Err(fate) => return fate,
        }
        if a.track_tcp
            && let Some((tcp_layer, off)) = p.meta.stack.innermost().l4
            && tcp_layer == snic_wire::stack::Layer::Tcp
            && let Some(fl) = tcp::tcp_flags(p.data(), usize::from(off))
            && (fl & (tcp::flags::SYN | tcp::flags::FIN | tcp::flags::RST) != 0
                // The originator's first ACK completes the handshake: without it the slow path
                // would count the connection as half-open until it closes.
                || (e.packets == 2 && fl & tcp::flags::ACK != 0 && e.flags & entry_flags::REVERSE == 0))
        {
            if self.tcp_events.len() < self.tcp_cap {
                self.tcp_events.push((e.key, fl));
                self.stats.tcp_copies += 1;
            } else {
                self.stats.tcp_copy_overflow += 1;
            }
        }
        egress(&mut self.stats, &self.queue_of_port, &mut self.queues, now, p, a, hash, mark)
    }

    /// Serve `p` with `a`, compiled for it alone while the fast path is off (a restart): the
    /// vPort meter, the transposition and the egress queue, as [`Shard::serve`] does. A
    /// per-flow meter has no bucket without a cached entry and is not applied in the window
    /// (its flow gets a fresh, full bucket when it is cached again); the slow path has seen
    /// the packet's TCP flags already, so no copy is made.
    fn serve_uncached(
        &mut self,
        now: Instant,
        p: &mut PacketBuf,
        a: &FlowAction,
        hash: u64,
    ) -> Fate {
        let len = p.len() as u32;
        let mark = match vport_meter(&mut self.stats, &self.meters, &self.vport_meters, a, now, len)
        {
            Ok(mark) => mark,
            Err(fate) => return fate,
        };
        egress(&mut self.stats, &self.queue_of_port, &mut self.queues, now, p, a, hash, mark)
    }

    /// The fast path for one packet of the batch (`i` indexes the scratch arrays).
    #[inline]
    fn fast(&mut self, shared: &Shared, now: Instant, p: &mut PacketBuf, i: usize) -> Fate {
        match self.kinds[i] {
            PacketKind::Passthrough => {
                self.stats.passthrough += 1;
                return Fate::Keep;
            }
            PacketKind::NotAFlow => {
                self.stats.not_flow += 1;
                return Fate::Drop(DropReason::NotAFlow);
            }
            PacketKind::Flow => {}
        }
        let key = self.keys[i];
        let hash = self.hashes[i];
        if !self.pending.is_empty() && self.pending.contains_key(&key) {
            self.stats.queued_behind += 1;
            return self.enqueue_exception(p, key, hash);
        }
        if self.bypass {
            // The fast path is off (a restart): the slow path serves this packet.
            return self.enqueue_exception(p, key, hash);
        }
        match self.ids[i] {
            None => {
                self.stats.misses += 1;
                self.enqueue_exception(p, key, hash)
            }
            Some(id) => {
                if !shared.is_current(self.gft.entry(id)) {
                    self.stats.stale += 1;
                    return self.enqueue_exception(p, key, hash);
                }
                self.stats.hits += 1;
                self.serve(now, p, id, hash)
            }
        }
    }

    /// First step for the packets `r` of the batch: decide their kind, extract their flow
    /// keys, hash them and prefetch their first buckets.
    #[inline]
    fn prepare(&mut self, pkts: &[PacketBuf], r: core::ops::Range<usize>) {
        for (i, p) in pkts.iter().enumerate().take(r.end).skip(r.start) {
            let port = p.meta.ingress.0;
            self.kinds[i] = match self.roles.get(usize::from(port)).copied().flatten() {
                None => PacketKind::Passthrough,
                Some(dir) => {
                    let k = &mut self.keys[i];
                    match key::extract_into(p.data(), &p.meta.stack, port, dir, k) {
                        Ok(()) => PacketKind::Flow,
                        Err(_) => PacketKind::NotAFlow,
                    }
                }
            };
        }
        // Hashed in a second pass: by now the keys' stores have reached the cache, so the
        // hash's word loads do not wait on them.
        for i in r.clone() {
            if self.kinds[i] == PacketKind::Flow {
                self.hashes[i] = self.gft.hash(&self.keys[i]);
            }
        }
        self.gft.prefetch_buckets(&self.hashes[r]);
    }

    /// Process one batch (the stage's body).
    fn process(
        &mut self,
        shared: &Shared,
        cell: &ShardCell,
        now: Instant,
        batch: &mut Batch,
        ctx: &mut StageCtx<'_>,
    ) {
        self.refresh(shared, now);
        self.take_removals(cell);
        self.bypass = now.as_nanos() < shared.fastpath_off_until.load(Ordering::Acquire);
        // The batch is handled in chunks of `CHUNK` packets, in a three-step software pipeline:
        // keys, hashes and bucket prefetches of a chunk two steps ahead, the bucket scan (and
        // entry prefetches) of the next chunk, then the key compare and each packet's fast path
        // for this chunk, its headers and flow entry by then in the cache. Packets are still
        // served in batch order, and the fast path never changes the table's index (only entry
        // counters), so the outcome is that of one pass over the whole batch.
        let n = batch.len();
        if self.keys.len() < n {
            // A batch larger than `MAX_BATCH` (never in the pipeline): grow the scratch once.
            self.keys.resize(n, FlowKey::default());
            self.hashes.resize(n, 0);
            self.ids.resize(n, None);
            self.cands.resize(n, Candidate::default());
            self.kinds.resize(n, PacketKind::Passthrough);
            self.keep.resize(n, true);
        }
        let pkts = batch.packets_mut();
        let mut kept = 0;
        // Software pipeline over the chunks: while chunk `c` is served, the candidate entries
        // of chunk `c + 1` (found in buckets prefetched one step earlier) and the buckets of
        // chunk `c + 2` are on their way into the cache.
        let chunks = n.div_ceil(CHUNK);
        let range = |c: usize| c * CHUNK..n.min((c + 1) * CHUNK);
        for c in 0..chunks.min(2) {
            self.prepare(pkts, range(c));
        }
        if chunks > 0 {
            let r = range(0);
            self.gft.scan_buckets(&self.hashes[r.clone()], &mut self.cands[r]);
        }
        for c in 0..chunks {
            if c + 2 < chunks {
                self.prepare(pkts, range(c + 2));
            }
            if c + 1 < chunks {
                let r = range(c + 1);
                self.gft.scan_buckets(&self.hashes[r.clone()], &mut self.cands[r]);
            }
            let r = range(c);
            self.gft.resolve(
                &self.hashes[r.clone()],
                &self.keys[r.clone()],
                &self.cands[r.clone()],
                &mut self.ids[r.clone()],
            );
            // The entries are in the cache by now; start loading the actions they point to
            // (a dependent load the serve loop below would otherwise wait on, packet by packet).
            for id in self.ids[r.clone()].iter().flatten() {
                if let Some(a) = self.actions.slots.get(self.gft.entry(*id).action.0 as usize) {
                    crate::prefetch::prefetch_read(a);
                }
            }
            for (i, p) in pkts.iter_mut().enumerate().take(r.end).skip(r.start) {
                let keep = match self.fast(shared, now, p, i) {
                    Fate::Keep => {
                        if let Some(port) = p.meta.egress {
                            ctx.trace(p, || TraceWhat::Forwarded { port, how: "gft" });
                        }
                        true
                    }
                    Fate::Drop(r) => ctx.drop_packet(p, r),
                    Fate::Held => false,
                };
                self.keep[i] = keep;
                kept += usize::from(keep);
            }
        }
        if kept != n {
            let (mut i, keep) = (0, &self.keep);
            batch.retain(|_| {
                let k = keep.get(i).copied().unwrap_or(true);
                i += 1;
                k
            });
        }
        self.slow_path(shared, now, batch, ctx);
        self.age(now);
        for q in self.draining.iter_mut().chain(self.queues.iter_mut()) {
            if batch.is_full() {
                break;
            }
            q.dequeue(now, batch);
        }
        self.draining.retain(|q| !q.is_empty());
        self.publish(cell);
    }

    /// Compile queued exception packets, feed TCP copies and evictions, run slow-path timers.
    fn slow_path(
        &mut self,
        shared: &Shared,
        now: Instant,
        batch: &mut Batch,
        ctx: &mut StageCtx<'_>,
    ) {
        let timer_due = self.slow_deadline.is_some_and(|t| t <= now);
        if self.exc.is_empty()
            && self.tcp_events.is_empty()
            && self.evicted.is_empty()
            && !timer_due
        {
            return;
        }
        let mut removals = core::mem::take(&mut self.removals);
        {
            let mut slow = lock(&shared.slow);
            for (k, fl) in self.tcp_events.drain(..) {
                slow.on_tcp(now, &k, fl, &mut removals);
            }
            for k in self.evicted.drain(..) {
                slow.on_evicted(&k, &mut removals);
            }
            if slow.poll_timeout().is_some_and(|t| t <= now) {
                slow.handle_timeout(now, &mut removals);
            }
            let mut budget = self.slow_budget;
            while budget > 0 && !batch.is_full() {
                let Some(mut x) = self.exc.pop_front() else { break };
                budget -= 1;
                if let Some(c) = self.pending.get_mut(&x.key) {
                    *c -= 1;
                    if *c == 0 {
                        self.pending.remove(&x.key);
                    }
                }
                if self.bypass {
                    let fate =
                        match slow.compile(now, x.pkt.data(), &x.pkt.meta.stack, &x.key, x.hash) {
                            Verdict::Forward { forward, .. } => {
                                self.stats.slow_served += 1;
                                let idle = shared.cfg.gft.idle_timeout;
                                slow.served_uncached(now, &x.key, idle);
                                self.serve_uncached(now, &mut x.pkt, &forward.action, x.hash)
                            }
                            Verdict::Deny { reason, .. } => {
                                self.stats.denied += 1;
                                *self.stats.denied_by.entry(reason.name()).or_default() += 1;
                                Fate::Drop(DropReason::PolicyDeny)
                            }
                        };
                    match fate {
                        Fate::Keep => {
                            if let Some(port) = x.pkt.meta.egress {
                                ctx.trace(&x.pkt, || TraceWhat::Forwarded {
                                    port,
                                    how: "slow path (fast path off)",
                                });
                            }
                            batch.push_swap(&mut x.pkt);
                        }
                        Fate::Drop(r) => {
                            ctx.drop_packet(&x.pkt, r);
                        }
                        Fate::Held => {}
                    }
                    self.spare.push(x.pkt);
                    continue;
                }
                let fresh = self
                    .gft
                    .lookup(x.hash, &x.key)
                    .filter(|id| shared.is_current(self.gft.entry(*id)));
                let id = match fresh {
                    Some(id) => {
                        self.stats.late_hits += 1;
                        id
                    }
                    None => {
                        self.stats.compiled += 1;
                        match slow.compile(now, x.pkt.data(), &x.pkt.meta.stack, &x.key, x.hash) {
                            Verdict::Forward { forward, reverse } => {
                                if let Some(r) = reverse {
                                    self.install(now, shared, r, true);
                                    self.stats.reverse_installs += 1;
                                }
                                self.stats.installs += 1;
                                let id = self.install(now, shared, forward, false);
                                slow.cached(&x.key);
                                id
                            }
                            Verdict::Deny { reason, cache } => {
                                self.stats.denied += 1;
                                *self.stats.denied_by.entry(reason.name()).or_default() += 1;
                                if cache {
                                    self.install_drop(now, shared, x.key);
                                }
                                ctx.drop_packet(&x.pkt, DropReason::PolicyDeny);
                                self.spare.push(x.pkt);
                                continue;
                            }
                        }
                    }
                };
                match self.serve(now, &mut x.pkt, id, x.hash) {
                    Fate::Keep => {
                        if let Some(port) = x.pkt.meta.egress {
                            ctx.trace(&x.pkt, || TraceWhat::Forwarded { port, how: "slow path" });
                        }
                        batch.push_swap(&mut x.pkt);
                    }
                    Fate::Drop(r) => {
                        ctx.drop_packet(&x.pkt, r);
                    }
                    Fate::Held => {}
                }
                self.spare.push(x.pkt);
            }
            self.slow_deadline = slow.poll_timeout();
        }
        for k in &removals {
            self.uncache(k);
        }
        shared.broadcast(&removals, Some(self.index));
        removals.clear();
        self.removals = removals;
    }

    /// Incremental idle aging.
    fn age(&mut self, now: Instant) {
        if self.age_budget == 0 {
            return;
        }
        let (actions, evicted, stats) = (&mut self.actions, &mut self.evicted, &mut self.stats);
        self.gft.expire(now, self.age_budget, |e| {
            actions.release(e.action);
            evicted.push(e.key);
            stats.expired += 1;
        });
    }

    fn held(&self) -> usize {
        self.exc.len() + self.queues.iter().chain(&self.draining).map(|q| q.len()).sum::<usize>()
    }

    fn next_deadline(&self) -> Option<Instant> {
        let mut t = self.queues.iter().chain(&self.draining).filter_map(|q| q.poll_timeout()).min();
        if !self.exc.is_empty() {
            t = Some(Instant::ZERO);
        }
        match (t, self.slow_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn publish(&self, cell: &ShardCell) {
        cell.pending.store(self.held(), Ordering::Release);
        let d = self.next_deadline().map_or(u64::MAX, |t| t.as_nanos());
        cell.deadline.store(d, Ordering::Release);
    }
}

/// The (empty) flow table of shard `index`: its own hash seed, derived from the configured one.
fn shard_table(cfg: &VSwitchConfig, index: usize) -> Result<Gft, VSwitchError> {
    Gft::new(GftConfig {
        seed: cfg.gft.seed ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        ..cfg.gft.clone()
    })
    .map_err(VSwitchError::Table)
}

/// What a fast-path restart did ([`VSwitch::restart_fastpath`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Restart {
    /// Fast-path restarts done so far, this one included.
    pub restarts: u64,
    /// Shards whose flow table was rebuilt.
    pub shards: usize,
    /// Cached flows dropped (forward, reverse and drop entries of every shard).
    pub flushed: usize,
    /// Until when (run clock, nanoseconds) the slow path serves every packet.
    pub fastpath_off_until_ns: u64,
}

impl VSwitch {
    /// Restart the fast path (seed 001's servicing: acceleration off, the software path carries
    /// every packet, acceleration on again): from `now` until `now + hold` every flow packet is
    /// served by the slow path alone (compiled per packet, nothing cached), and every shard's
    /// flow table is dropped and rebuilt empty (a fresh allocation, its actions released).
    /// After the window, flows are compiled into the new tables again as their packets come,
    /// as first packets are. The slow path's state (the policy, connections and their TCP
    /// state, SNAT bindings) is not touched, so no connection is reset or re-allocated: the
    /// dropped entries are not reported as evictions. A connection whose packets all fall in
    /// the window has no cached flow to age it: the slow path ages it instead
    /// (`SlowPath::served_uncached`).
    ///
    /// Each shard is swapped between two of its batches; the new tables are allocated and the
    /// old ones freed without holding a shard's lock. A table region the I/O layer had backed
    /// with huge pages is gone with it: the caller advises the new [`VSwitch::table_regions`].
    pub fn restart_fastpath(&self, now: Instant, hold: Duration) -> Result<Restart, VSwitchError> {
        let cells: Vec<Arc<ShardCell>> = lock(&self.shared.shards).clone();
        // Allocate first: a failure changes nothing.
        let mut tables = Vec::with_capacity(cells.len());
        for c in &cells {
            let index = lock(&c.state).index;
            tables.push(shard_table(&self.shared.cfg, index)?);
        }
        // The window opens before the tables go, so no flow is cached in a table about to be
        // dropped.
        let until = now.saturating_add(hold).as_nanos().max(1);
        self.shared.fastpath_off_until.fetch_max(until, Ordering::AcqRel);
        let mut flushed = 0;
        for (c, mut gft) in cells.iter().zip(tables) {
            {
                let mut s = lock(&c.state);
                core::mem::swap(&mut s.gft, &mut gft);
                s.actions = ActionTable::default();
                let n = gft.len();
                s.stats.flushed += n as u64;
                flushed += n;
            }
            // The old table is freed here, outside the shard's lock.
            drop(gft);
        }
        let restarts = self.shared.restarts.fetch_add(1, Ordering::AcqRel) + 1;
        Ok(Restart {
            restarts,
            shards: cells.len(),
            flushed,
            fastpath_off_until_ns: self.shared.fastpath_off_until.load(Ordering::Acquire),
        })
    }

    /// Whether the fast path is on at `now` (no restart window open).
    pub fn fastpath_on(&self, now: Instant) -> bool {
        now.as_nanos() >= self.shared.fastpath_off_until.load(Ordering::Acquire)
    }
}

/// One line for a compiled action: the transposition, meters and the output port.
fn describe(a: &FlowAction) -> String {
    let mut s = String::new();
    let x: &Transposition = &a.transposition;
    s.push_str(&x.to_string());
    if let Some(m) = a.meter {
        s.push_str(&format!(",meter:{}", m.0));
    }
    if let Some(m) = a.vport_meter {
        s.push_str(&format!(",vport_meter:{}", m.0));
    }
    s.push_str(&format!(",output:{}", a.egress));
    s
}

/// The pipeline stage of one vSwitch shard.
#[derive(Debug)]
pub struct VSwitchStage {
    shared: Arc<Shared>,
    cell: Arc<ShardCell>,
}

impl Stage for VSwitchStage {
    fn name(&self) -> &str {
        "vswitch"
    }

    fn process(&mut self, now: Instant, batch: &mut Batch, ctx: &mut StageCtx<'_>) {
        let mut st = lock(&self.cell.state);
        st.process(&self.shared, &self.cell, now, batch, ctx);
    }

    fn pending(&self) -> usize {
        self.cell.pending.load(Ordering::Acquire)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self.cell.deadline.load(Ordering::Acquire) {
            u64::MAX => None,
            t => Some(Instant::from_nanos(t)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::default_policy;
    use snic_pipeline::{StageCounters, TraceRing};
    use snic_wire::stack::Stack;

    /// What packet `i` of the test batch is.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    enum Kind {
        /// UDP from the VM to a mapped CA: encapsulated.
        Flow,
        /// UDP to the unmapped 10.0.0.255: denied.
        Denied,
        /// Not IP on the VM's port: not a flow.
        NotFlow,
        /// On a port the policy does not name: passed through.
        Pass,
    }

    fn kind(i: usize) -> Kind {
        match i {
            _ if i % 7 == 3 => Kind::NotFlow,
            _ if i % 11 == 5 => Kind::Pass,
            _ if i.is_multiple_of(13) => Kind::Denied,
            _ => Kind::Flow,
        }
    }

    /// Frame `i` of the test batch: flows repeat (20 destinations x 3 source ports).
    fn frame(i: usize) -> Vec<u8> {
        let mut f = vec![0u8; 64];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        if kind(i) == Kind::NotFlow {
            f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
            f[14] = i as u8;
            return f;
        }
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let dst = if kind(i) == Kind::Denied { 255 } else { 2 + (i % 20) as u8 };
        let ip = &mut f[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&50u16.to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 0, dst]);
        let c = !snic_wire::checksum::data(ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f[34..36].copy_from_slice(&(1000 + (i % 3) as u16).to_be_bytes());
        f[36..38].copy_from_slice(&9000u16.to_be_bytes());
        f[38..40].copy_from_slice(&30u16.to_be_bytes());
        f
    }

    fn fill(b: &mut Batch, n: usize) {
        b.clear();
        for i in 0..n {
            let f = frame(i);
            let p = b.push_frame(&f).expect("room");
            p.meta.ingress = PortId(if kind(i) == Kind::Pass { 7 } else { 0 });
            p.meta.stack = Stack::parse(&f);
            p.meta.parsed = true;
            p.meta.seq = i as u64;
        }
    }

    /// A full batch spanning several chunks, mixing hits, cached drops, non-flows and
    /// pass-through: the fast path keeps the survivors in order, rewrites exactly the flows,
    /// and counts every packet once.
    #[test]
    fn chunked_batch_keeps_order_and_counts() {
        let vs = VSwitch::new(default_policy(), VSwitchConfig::default()).unwrap();
        let mut stage = vs.stage().unwrap();
        let mut counters = StageCounters::new("vswitch");
        let mut ring = TraceRing::new(16);
        let mut batch = Batch::new(MAX_BATCH);
        let n = MAX_BATCH;
        // First pass: every distinct flow misses once and is compiled by the slow path.
        fill(&mut batch, n);
        stage.process(
            Instant::from_secs(1),
            &mut batch,
            &mut StageCtx::new(&mut counters, &mut ring),
        );
        let first = vs.stats().fast;
        assert_eq!(first.installs, 60, "20 destinations x 3 source ports");
        assert_eq!(vs.stats().exceptions_queued, 0);
        // Second pass: all cached.
        let before = counters.drops.total();
        fill(&mut batch, n);
        stage.process(
            Instant::from_secs(2),
            &mut batch,
            &mut StageCtx::new(&mut counters, &mut ring),
        );
        let st = vs.stats().fast;
        let count = |k| (0..n).filter(|&i| kind(i) == k).count() as u64;
        assert_eq!(st.hits - first.hits, count(Kind::Flow) + count(Kind::Denied));
        assert_eq!(st.misses, first.misses, "no new misses");
        assert_eq!(st.denied_cached - first.denied_cached, count(Kind::Denied));
        assert_eq!(st.not_flow - first.not_flow, count(Kind::NotFlow));
        assert_eq!(st.passthrough - first.passthrough, count(Kind::Pass));
        assert_eq!(counters.drops.total() - before, count(Kind::Denied) + count(Kind::NotFlow));
        assert_eq!(counters.drops.get(DropReason::NotAFlow), 2 * count(Kind::NotFlow));
        let survivors: Vec<usize> =
            (0..n).filter(|&i| matches!(kind(i), Kind::Flow | Kind::Pass)).collect();
        assert_eq!(batch.len(), survivors.len());
        for (p, &i) in batch.iter().zip(&survivors) {
            assert_eq!(p.meta.seq, i as u64, "order kept");
            let f = frame(i);
            if kind(i) == Kind::Pass {
                assert_eq!(p.data(), &f[..], "pass-through untouched");
                continue;
            }
            let d = p.data();
            assert_eq!(d.len(), f.len() + 50, "VXLAN over IPv4 adds 50 bytes");
            assert_eq!(p.meta.egress, Some(PortId(1)));
            // Inner frame: destination MAC set to the CA's mapping, the rest unchanged.
            let dst = 2 + (i % 20) as u8;
            assert_eq!(&d[50..56], &[2, 0, 0, 0, 0, dst]);
            assert_eq!(&d[56..], &f[6..]);
            // Outer: to the CA's PA, VNI 42.
            assert_eq!(&d[14 + 16..14 + 20], &[192, 168, 100, dst]);
            assert_eq!(&d[46..49], &[0, 0, 42]);
        }
    }

    /// The vPort meter's bucket of shard `stage`, as the fast path sees it.
    fn vport_bucket(stage: &VSwitchStage) -> Option<Arc<SharedBucket>> {
        lock(&stage.cell.state).vport_meters.first().cloned().flatten()
    }

    /// Packets of the test batch that left encapsulated (on the underlay port).
    fn encapped(b: &Batch) -> usize {
        b.iter().filter(|p| p.meta.egress == Some(PortId(1))).count()
    }

    /// Two shards of one vSwitch meter a vPort from one bucket: what one shard takes, the other
    /// cannot; the bucket (and its level) survives policy changes that keep the meter.
    #[test]
    fn vport_meter_is_one_bucket_for_all_shards_and_survives_policy_changes() {
        use crate::policy::MeterId;
        let spec = |name: &str, burst| MeterSpec {
            name: name.into(),
            rate_bps: 8_000,
            burst_bytes: burst,
            exceed: Exceed::Drop,
        };
        let metered = |m: Option<MeterSpec>| {
            let mut p = default_policy();
            if let Some(m) = m {
                p.meters.push(m);
                p.vports[0].meter = Some(MeterId(0));
            }
            p
        };
        let vs = VSwitch::new(metered(Some(spec("m", 1_000))), VSwitchConfig::default()).unwrap();
        let mut s0 = vs.stage().unwrap();
        let mut s1 = vs.stage().unwrap();
        let b = vport_bucket(&s0).expect("vPort 0 is metered");
        assert!(Arc::ptr_eq(&b, &vport_bucket(&s1).unwrap()), "one bucket for both shards");
        assert_eq!(b.tokens_bytes(), 1_000);

        let mut counters = StageCounters::new("vswitch");
        let mut ring = TraceRing::new(16);
        let mut batch = Batch::new(MAX_BATCH);
        let n = 64;
        let flows = (0..n).filter(|&i| kind(i) == Kind::Flow).count();
        let t = Instant::from_secs(1);
        // Shard 0 takes the whole burst: fifteen 64-byte frames (960 of 1000 bytes).
        fill(&mut batch, n);
        s0.process(t, &mut batch, &mut StageCtx::new(&mut counters, &mut ring));
        assert_eq!(encapped(&batch), 15);
        assert_eq!(b.tokens_bytes(), 40);
        // Shard 1, at the same instant, finds the bucket as shard 0 left it.
        fill(&mut batch, n);
        s1.process(t, &mut batch, &mut StageCtx::new(&mut counters, &mut ring));
        assert_eq!(encapped(&batch), 0);
        assert_eq!(vs.stats().fast.meter_drops, (2 * flows - 15) as u64);
        assert_eq!(vs.stats().fast.meter_contended, 0);
        // 24 ms later (24 bytes at 8 kbit/s), shard 1 passes one more frame.
        fill(&mut batch, n);
        s1.process(
            t + core::time::Duration::from_millis(24),
            &mut batch,
            &mut StageCtx::new(&mut counters, &mut ring),
        );
        assert_eq!(encapped(&batch), 1);
        assert_eq!(b.tokens_bytes(), 0);

        // Same rate and burst (only the name changed): the same bucket, its level kept.
        let mut empty = Batch::new(1);
        let later = t + core::time::Duration::from_millis(24);
        vs.replace(metered(Some(spec("renamed", 1_000)))).unwrap();
        for s in [&mut s0, &mut s1] {
            s.process(later, &mut empty, &mut StageCtx::new(&mut counters, &mut ring));
            assert!(Arc::ptr_eq(&b, &vport_bucket(s).unwrap()));
        }
        assert_eq!(b.tokens_bytes(), 0);
        // Refilled to 1000 bytes, then a smaller burst: still the same bucket, settings changed
        // in place, the level cut down to the new burst.
        assert!(b.conform(later + core::time::Duration::from_secs(10), 100));
        assert_eq!(b.tokens_bytes(), 900);
        vs.replace(metered(Some(spec("renamed", 500)))).unwrap();
        s0.process(later, &mut empty, &mut StageCtx::new(&mut counters, &mut ring));
        assert!(Arc::ptr_eq(&b, &vport_bucket(&s0).unwrap()));
        assert_eq!((b.burst_bytes(), b.tokens_bytes()), (500, 500));
        // No meter: no bucket; a meter again: a new, full one, shared again.
        vs.replace(metered(None)).unwrap();
        s0.process(later, &mut empty, &mut StageCtx::new(&mut counters, &mut ring));
        assert!(vport_bucket(&s0).is_none());
        vs.replace(metered(Some(spec("m", 2_000)))).unwrap();
        s0.process(later, &mut empty, &mut StageCtx::new(&mut counters, &mut ring));
        s1.process(later, &mut empty, &mut StageCtx::new(&mut counters, &mut ring));
        let c = vport_bucket(&s0).unwrap();
        assert!(!Arc::ptr_eq(&b, &c));
        assert!(Arc::ptr_eq(&c, &vport_bucket(&s1).unwrap()));
        assert_eq!(c.tokens_bytes(), 2_000);
    }
}
