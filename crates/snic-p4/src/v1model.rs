//! The v1model architecture, as BMv2's `simple_switch` runs it: parser, verifyChecksum,
//! ingress, the traffic manager (clones, resubmits, multicast, drops), egress,
//! computeChecksum, deparser, recirculation.
//!
//! A [`Switch`] holds one compiled program and its state (table entries, registers, counters,
//! meters, multicast groups, mirror sessions). [`Switch::process`] runs one packet to
//! completion, including every packet derived from it, and returns what leaves by which port.
//! Nothing here does I/O or reads a clock: the caller passes the time.
//!
//! The same [`Switch`] runs PNA programs (`PNA_NIC`, [`Arch::Pna`]): per packet the main
//! parser, the pre control, the main control and the main deparser. The packet leaves by the
//! port of the last `send_to_port` (ports are 32 bits); without one, or after `drop_packet`, it
//! is dropped. `recirculate()` sends the deparsed packet back to the main parser with `pass`
//! one more (at most [`PNA_MAX_PASS`] times). A packet whose input port is one of the host
//! ports ([`Switch::set_host_ports`]; none by default) is HOST_TO_NET, any other NET_TO_HOST.
//! The intrinsic metadata's `timestamp` is `now_ns`.
//!
//! Idle timeouts, in both architectures: a table with `support_timeout = true` (v1model) or
//! `pna_idle_timeout` gives each entry a time to live (set by [`Switch::table_set_entry_ttl`],
//! or from an expire time profile by PNA `add_entry` / `set_entry_expire_time`;
//! [`Switch::set_expire_time_profile`], each profile [`DEFAULT_EXPIRE_TIME_NS`] until set). An
//! entry is idle past its TTL once `now_ns` minus the start of its expire timer reaches it. The
//! timer starts when the entry is added; in v1model every hit restarts it (BMv2's ageing), in
//! PNA only `restart_expire_timer()` and `set_entry_expire_time()` do (as the DPDK target;
//! hits still update the last-hit time [`EntryView::idle_ns`] reports). `NOTIFY_CONTROL` and
//! `support_timeout` entries are reported by [`Switch::take_idle_expired`], once per idle
//! period; `AUTO_DELETE` entries are deleted by a lookup that finds them expired, by
//! [`Switch::expire`], and inside [`Switch::process`] every sweep interval
//! ([`DEFAULT_SWEEP_INTERVAL_NS`]).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::algo::{self, Calculation, CrcParams, HashAlgorithm, Meter, MeterKind, MeterRate};
use crate::exec::{BitWriter, Flow, binop, cast, compare, get_bits};
use crate::ir::*;
use crate::table::{EntryHandle, FieldMatch, MatchKind, Table, TableError};

/// The port number that drops (`egress_spec = 511`).
pub const DROP_PORT: u32 = 511;

/// `standard_metadata.instance_type` values (BMv2's).
pub mod instance {
    /// A packet from a port.
    pub const NORMAL: u128 = 0;
    /// An ingress-to-egress clone.
    pub const INGRESS_CLONE: u128 = 1;
    /// An egress-to-egress clone.
    pub const EGRESS_CLONE: u128 = 2;
    /// A recirculated packet.
    pub const RECIRC: u128 = 4;
    /// A multicast replica.
    pub const REPLICATION: u128 = 5;
    /// A resubmitted packet.
    pub const RESUBMIT: u128 = 6;
}

/// A refused runtime operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeError {
    /// No table, action, instance... of that name or index.
    NotFound(String),
    /// The entry's key is already in the table.
    Duplicate,
    /// The table is full.
    Full,
    /// A value does not fit, a key has the wrong shape, an index is out of range...
    Invalid(String),
    /// The program marks it `const`.
    Const(String),
}

impl core::fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RuntimeError::NotFound(s) => write!(f, "not found: {s}"),
            RuntimeError::Duplicate => f.write_str("an entry with this key exists"),
            RuntimeError::Full => f.write_str("the table is full"),
            RuntimeError::Invalid(s) => write!(f, "invalid: {s}"),
            RuntimeError::Const(s) => write!(f, "{s} is const"),
        }
    }
}

impl std::error::Error for RuntimeError {}

/// An entry's handle, stable while the entry exists (the table's
/// [`EntryHandle`] as a number).
pub type Handle = u64;

/// A table entry as the control plane sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct EntryView {
    /// Its handle.
    pub handle: Handle,
    /// Its match, one per key field.
    pub matches: Vec<FieldMatch>,
    /// Its priority (larger wins), for tables that use priorities.
    pub priority: Option<i64>,
    /// Its action and arguments.
    pub call: ActionCall,
    /// Its direct counter: packets and bytes.
    pub counter: (u64, u64),
    /// For a table with an action profile: the member or group it names (`call` is then
    /// meaningless).
    pub indirect: Option<Indirect>,
    /// Its time to live once idle, in a table with idle timeouts (`None`: it never expires).
    pub ttl_ns: Option<u64>,
    /// Nanoseconds since it was last hit (or added), at the time of the last packet.
    pub idle_ns: u64,
}

/// What a table entry holds beside its match: the action, and the direct counter and meter
/// cells, which lookups update through a shared reference.
#[derive(Debug, Clone)]
struct EntryData {
    call: ActionCall,
    indirect: Option<Indirect>,
    counter: Cell<(u64, u64)>,
    meter: Option<RefCell<Meter>>,
    /// Idle timeout state (unused in tables without one).
    idle: IdleState,
}

/// An entry's idle timeout state: when it was last hit, when its expire timer started (every
/// hit in v1model; `add_entry`, `restart_expire_timer` and `set_entry_expire_time` in PNA),
/// its time to live, and whether the control plane was told it is idle.
#[derive(Debug, Clone, Default)]
struct IdleState {
    last_hit: Cell<u64>,
    timer: Cell<u64>,
    ttl: Cell<Option<u64>>,
    notified: Cell<bool>,
}

impl IdleState {
    fn new(now: u64, ttl: Option<u64>) -> Self {
        IdleState {
            last_hit: Cell::new(now),
            timer: Cell::new(now),
            ttl: Cell::new(ttl),
            notified: Cell::new(false),
        }
    }

    /// The expire timer starts again at `now`.
    fn restart(&self, now: u64) {
        self.timer.set(now);
        self.notified.set(false);
    }

    /// Idle past its time to live at `now`.
    fn expired(&self, now: u64) -> bool {
        self.ttl.get().is_some_and(|t| now.saturating_sub(self.timer.get()) >= t)
    }
}

/// What an entry of a table with an action profile names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Indirect {
    /// A member (an action with its arguments) of the profile.
    Member(u32),
    /// A group of members; an action selector picks one by a hash of the selector keys.
    Group(u32),
}

/// An action profile's members and groups.
#[derive(Debug, Clone, Default)]
struct Profile {
    /// Member id -> (the action's global index, its data arguments).
    members: BTreeMap<u32, (u32, Vec<u128>)>,
    /// Group id -> member ids.
    groups: BTreeMap<u32, Vec<u32>>,
    next_member: u32,
    next_group: u32,
}

/// One table's entries and default action.
#[derive(Debug, Clone)]
struct TableState {
    table: Table<EntryData>,
    default: Option<ActionCall>,
    uses_priority: bool,
}

fn table_error(e: TableError) -> RuntimeError {
    match e {
        TableError::Duplicate(_) => RuntimeError::Duplicate,
        TableError::Full { .. } => RuntimeError::Full,
        TableError::UnknownHandle(h) => {
            RuntimeError::NotFound(format!("entry handle {}", h.to_raw()))
        }
        other => RuntimeError::Invalid(other.to_string()),
    }
}

impl TableState {
    fn add(
        &mut self,
        matches: Vec<FieldMatch>,
        priority: Option<i64>,
        call: ActionCall,
        meter: Option<Meter>,
        idle: IdleState,
    ) -> Result<Handle, RuntimeError> {
        let priority = if self.uses_priority { Some(priority.unwrap_or(0)) } else { None };
        let data = EntryData {
            call,
            indirect: None,
            counter: Cell::new((0, 0)),
            meter: meter.map(RefCell::new),
            idle,
        };
        self.table.insert(&matches, priority, data).map(EntryHandle::to_raw).map_err(table_error)
    }
}

/// A multicast node's handle (0, 1, 2... in creation order, as BMv2 numbers them).
pub type NodeHandle = u32;

/// A multicast replica: (replication id, port).
pub type Replica = (u16, u32);

/// Per-packet flags set by externs.
#[derive(Debug, Clone, Default)]
struct Flags {
    clone: Option<(bool, u32, Option<u32>)>,
    resubmit: Option<Option<u32>>,
    recirculate: Option<Option<u32>>,
    truncate: Option<u32>,
    assert_failed: bool,
    /// PNA: the port of the last `send_to_port` (`None`: drop).
    pna_dest: Option<u32>,
    /// Bytes added (or removed) by setValid / setInvalid, as BMv2's packet length register.
    len_delta: i64,
}

/// What a packet trace records, one line per event (like BMv2's `--log-console`).
pub type Trace = Vec<String>;

/// A mirror session's destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MirrorSession {
    /// The egress port of the copies.
    pub port: Option<u32>,
    /// Or a multicast group.
    pub mgrp: Option<u16>,
}

#[derive(Debug, Clone)]
enum Work {
    Ingress {
        data: Vec<u8>,
        port: u32,
        itype: u128,
        keep: Vec<(Slot, Vec<u128>)>,
    },
    Egress {
        frame: Vec<u128>,
        payload: Vec<u8>,
        port: u32,
        itype: u128,
        rid: u16,
        keep: Option<Vec<(Slot, Vec<u128>)>>,
        len: u32,
        truncate: Option<u32>,
    },
}

/// Counters of what the switch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets given to [`Switch::process`].
    pub received: u64,
    /// Packets sent out of a port.
    pub sent: u64,
    /// Dropped by `mark_to_drop` or egress port 511 in ingress.
    pub dropped_ingress: u64,
    /// Dropped by `mark_to_drop` in egress.
    pub dropped_egress: u64,
    /// Packets whose parser ended in an error.
    pub parser_errors: u64,
    /// Derived packets dropped because one packet made too many.
    pub derived_limit: u64,
    /// `assert`/`assume` failures.
    pub assert_failures: u64,
    /// Entries deleted by an idle timeout (PNA `AUTO_DELETE`).
    pub expired: u64,
    /// Entries added by the data plane (PNA `add_entry`).
    pub learned: u64,
}

/// What became of the last packet given to [`Switch::process`] (and the packets derived
/// from it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The parser's error code, when the (first) parse ended in an error.
    pub parser_error: Option<u32>,
    /// Dropped at the end of ingress (`mark_to_drop`, egress_spec 511).
    pub dropped_ingress: bool,
    /// Copies dropped at the end of egress.
    pub dropped_egress: u32,
    /// Packets sent out of a port.
    pub sent: u32,
    /// Derived packets dropped over [`MAX_DERIVED`].
    pub over_limit: bool,
}

/// One packet's work at most: derived packets (clones, replicas, resubmits, recirculations)
/// beyond this are dropped and counted, so a program that loops cannot hang the switch.
pub const MAX_DERIVED: usize = 4096;

/// The parser takes at most this many state transitions per packet (then `ParserTimeout`).
pub const MAX_PARSER_STEPS: u32 = 100_000;

/// A PNA packet recirculates at most this many times (`pass` is 3 bits); one more
/// `recirculate()` drops it (counted in [`Stats::derived_limit`]).
pub const PNA_MAX_PASS: u8 = 7;

/// The time to live of every PNA expire time profile until the control plane sets it
/// ([`Switch::set_expire_time_profile`]): 30 seconds.
pub const DEFAULT_EXPIRE_TIME_NS: u64 = 30_000_000_000;

/// How often [`Switch::process`] looks for entries to delete by idle timeout, at most
/// ([`Switch::set_expiry_sweep_interval`]): every 100 ms of packet time. A hit on an expired
/// entry deletes it (and misses) whenever it happens.
pub const DEFAULT_SWEEP_INTERVAL_NS: u64 = 100_000_000;

/// A running v1model program.
#[derive(Debug, Clone)]
pub struct Switch {
    prog: Arc<Compiled>,
    tables: Vec<TableState>,
    registers: Vec<Vec<u128>>,
    counters: Vec<Vec<(u64, u64)>>,
    meters: Vec<Vec<Meter>>,
    meter_last: Vec<u128>,
    calcs: Vec<Calculation>,
    value_sets: Vec<Vec<(u128, u128)>>,
    mc_groups: BTreeMap<u16, Vec<u32>>,
    mc_nodes: BTreeMap<u32, (u16, Vec<u32>)>,
    next_node: u32,
    mirrors: BTreeMap<u32, MirrorSession>,
    rng: u64,
    frame: Vec<u128>,
    key: Vec<u128>,
    errs: Errs,
    stats: Stats,
    trace: Option<Trace>,
    digests: Vec<(u32, Vec<u128>)>,
    now_ns: u64,
    last: Outcome,
    work: VecDeque<Work>,
    scratch: BitWriter,
    profiles: Vec<Profile>,
    default_indirect: Vec<Option<Indirect>>,
    /// PNA: ports whose packets are HOST_TO_NET (sorted).
    host_ports: Vec<u32>,
    /// PNA expire time profiles: time to live by profile id.
    expire_profiles: Vec<u64>,
    /// Some table deletes idle entries.
    auto_delete: bool,
    next_sweep_ns: u64,
    sweep_interval_ns: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Errs {
    packet_too_short: u32,
    no_match: u32,
    stack_oob: u32,
    header_too_short: u32,
    timeout: u32,
}

impl Switch {
    /// A switch running `prog`, with its `const entries` installed.
    pub fn new(prog: Compiled) -> Result<Switch, RuntimeError> {
        let mut tables = Vec::new();
        for t in &prog.tables {
            let kinds: Vec<(MatchKind, u32)> = t.keys.iter().map(|k| (k.kind, k.width)).collect();
            let uses_priority = kinds.iter().any(|k| {
                matches!(k.0, MatchKind::Ternary | MatchKind::Range | MatchKind::Optional)
            });
            let table = Table::new(&kinds, t.size.max(1))
                .map_err(|e| RuntimeError::Invalid(format!("table {}: {e}", t.name)))?;
            tables.push(TableState { table, default: Some(t.default.clone()), uses_priority });
        }
        let mut registers = Vec::new();
        let mut counters = Vec::new();
        let mut meters = Vec::new();
        for i in &prog.instances {
            registers.push(match i.kind {
                InstanceKind::Register { size, .. } => vec![0; size as usize],
                _ => Vec::new(),
            });
            counters.push(match i.kind {
                InstanceKind::Counter { size, .. } => vec![(0, 0); size as usize],
                _ => Vec::new(),
            });
            meters.push(match i.kind {
                InstanceKind::Meter { size, bytes } => {
                    vec![
                        Meter::new(if bytes { MeterKind::Bytes } else { MeterKind::Packets });
                        size as usize
                    ]
                }
                _ => Vec::new(),
            });
        }
        let calcs = prog
            .calcs
            .iter()
            .map(|(_, a)| Calculation::new(HashAlgorithm::ALL[(*a as usize).min(7)]))
            .collect();
        let find = |n: &str| prog.errors.iter().position(|e| e == n).unwrap_or(0) as u32;
        let errs = Errs {
            packet_too_short: find("PacketTooShort"),
            no_match: find("NoMatch"),
            stack_oob: find("StackOutOfBounds"),
            header_too_short: find("HeaderTooShort"),
            timeout: find("ParserTimeout"),
        };
        let n_inst = prog.instances.len();
        let n_tables = prog.tables.len();
        let value_sets = vec![Vec::new(); prog.value_sets.len()];
        let frame = vec![0; prog.frame_len as usize];
        let mut sw = Switch {
            tables,
            registers,
            counters,
            meters,
            meter_last: vec![0; n_inst],
            calcs,
            value_sets,
            mc_groups: BTreeMap::new(),
            mc_nodes: BTreeMap::new(),
            next_node: 0,
            mirrors: BTreeMap::new(),
            rng: 0x9E37_79B9_7F4A_7C15,
            frame,
            key: Vec::new(),
            errs,
            stats: Stats::default(),
            trace: None,
            digests: Vec::new(),
            now_ns: 0,
            last: Outcome::default(),
            work: VecDeque::new(),
            scratch: BitWriter::default(),
            profiles: vec![Profile::default(); n_inst],
            default_indirect: vec![None; n_tables],
            host_ports: Vec::new(),
            expire_profiles: vec![DEFAULT_EXPIRE_TIME_NS; 256],
            auto_delete: prog.tables.iter().any(|t| t.idle == IdleTimeout::AutoDelete),
            next_sweep_ns: 0,
            sweep_interval_ns: DEFAULT_SWEEP_INTERVAL_NS,
            prog: Arc::new(prog),
        };
        for t in 0..sw.prog.tables.len() {
            let entries = sw.prog.tables[t].entries.clone();
            for e in entries {
                sw.add_entry(t, e.matches, e.priority, e.call)?;
            }
        }
        Ok(sw)
    }

    /// The compiled program.
    pub fn program(&self) -> &Compiled {
        &self.prog
    }

    /// What the switch did so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Start (or stop) recording a trace of every packet.
    pub fn set_trace(&mut self, on: bool) {
        self.trace = if on { Some(Vec::new()) } else { None };
    }

    /// What became of the last packet given to [`Switch::process`].
    pub fn outcome(&self) -> Outcome {
        self.last
    }

    /// The trace lines recorded since the last call.
    pub fn take_trace(&mut self) -> Trace {
        self.trace.as_mut().map(core::mem::take).unwrap_or_default()
    }

    /// Put the per-packet scratch state back in shape after a [`Switch::process`] that did not
    /// return (a panic a caller caught): the frame buffer it had taken, the trace. Tables,
    /// externs and every control-plane setting are untouched.
    pub fn recover(&mut self) {
        self.frame = vec![0; self.prog.frame_len as usize];
        self.key.clear();
        if self.trace.is_some() {
            self.trace = Some(Vec::new());
        }
    }

    /// Digests sent since the last call (each the list's values).
    pub fn take_digests(&mut self) -> Vec<(u32, Vec<u128>)> {
        core::mem::take(&mut self.digests)
    }

    // ------------------------------------------------------------------ control plane

    /// The index of the table named `name` (exactly).
    pub fn table_index(&self, name: &str) -> Option<usize> {
        self.prog.tables.iter().position(|t| t.name == name)
    }

    fn table_check(&self, t: usize) -> Result<&TableIr, RuntimeError> {
        self.prog.tables.get(t).ok_or_else(|| RuntimeError::NotFound(format!("table {t}")))
    }

    fn check_call(&self, t: usize, call: &ActionCall, default: bool) -> Result<(), RuntimeError> {
        let ti = self.table_check(t)?;
        let Some(ta) = ti.actions.get(call.action as usize) else {
            return Err(RuntimeError::NotFound(format!(
                "action {} of table {}",
                call.action, ti.name
            )));
        };
        let a = &self.prog.actions[ta.action as usize];
        if default && ta.table_only {
            return Err(RuntimeError::Invalid(format!("{} is @tableonly", a.name)));
        }
        if !default && ta.default_only {
            return Err(RuntimeError::Invalid(format!("{} is @defaultonly", a.name)));
        }
        let data: Vec<&ParamIr> = a.params.iter().filter(|p| p.data).collect();
        if data.len() != call.args.len() {
            return Err(RuntimeError::Invalid(format!(
                "{} takes {} arguments",
                a.name,
                data.len()
            )));
        }
        for (p, v) in data.iter().zip(&call.args) {
            if *v & !mask(p.width) != 0 {
                return Err(RuntimeError::Invalid(format!(
                    "{} does not fit {}'s {} bits",
                    v, p.name, p.width
                )));
            }
        }
        Ok(())
    }

    fn add_entry(
        &mut self,
        t: usize,
        matches: Vec<FieldMatch>,
        priority: Option<i64>,
        call: ActionCall,
    ) -> Result<Handle, RuntimeError> {
        self.check_call(t, &call, false)?;
        let meter =
            self.prog.tables[t].direct_meter.map(|m| match self.prog.instances[m as usize].kind {
                InstanceKind::DirectMeter { bytes: true } => Meter::new(MeterKind::Bytes),
                _ => Meter::new(MeterKind::Packets),
            });
        let idle = IdleState::new(self.now_ns, None);
        self.tables[t].add(matches, priority, call, meter, idle)
    }

    /// Add an entry to table `t`; `priority` (larger wins) matters for tables with ternary,
    /// range or optional keys.
    pub fn table_add(
        &mut self,
        t: usize,
        matches: Vec<FieldMatch>,
        priority: Option<i64>,
        call: ActionCall,
    ) -> Result<Handle, RuntimeError> {
        let ti = self.table_check(t)?;
        if ti.entries_const {
            return Err(RuntimeError::Const(format!("the entries of {}", ti.name)));
        }
        if ti.implementation.is_some() {
            return Err(RuntimeError::Invalid(format!(
                "table {} has an action profile: add members or groups (table_indirect_add)",
                ti.name
            )));
        }
        self.add_entry(t, matches, priority, call)
    }

    /// Change an entry's action.
    pub fn table_modify(
        &mut self,
        t: usize,
        h: Handle,
        call: ActionCall,
    ) -> Result<(), RuntimeError> {
        let ti = self.table_check(t)?;
        if ti.entries_const {
            return Err(RuntimeError::Const(format!("the entries of {}", ti.name)));
        }
        self.check_call(t, &call, false)?;
        let h = EntryHandle::from_raw(h);
        let old = self.tables[t]
            .table
            .get(h)
            .ok_or_else(|| RuntimeError::NotFound(format!("entry handle {}", h.to_raw())))?;
        let data = EntryData {
            call,
            indirect: old.action().indirect,
            counter: old.action().counter.clone(),
            meter: old.action().meter.clone(),
            idle: old.action().idle.clone(),
        };
        self.tables[t].table.modify(h, data).map(|_| ()).map_err(table_error)
    }

    /// Delete an entry.
    pub fn table_delete(&mut self, t: usize, h: Handle) -> Result<(), RuntimeError> {
        let ti = self.table_check(t)?;
        if ti.entries_const {
            return Err(RuntimeError::Const(format!("the entries of {}", ti.name)));
        }
        self.tables[t].table.delete(EntryHandle::from_raw(h)).map(|_| ()).map_err(table_error)
    }

    /// Delete every entry (const entries stay).
    pub fn table_clear(&mut self, t: usize) -> Result<(), RuntimeError> {
        let ti = self.table_check(t)?;
        if ti.entries_const {
            return Err(RuntimeError::Const(format!("the entries of {}", ti.name)));
        }
        self.tables[t].table.clear();
        Ok(())
    }

    /// Set the default action.
    pub fn table_set_default(&mut self, t: usize, call: ActionCall) -> Result<(), RuntimeError> {
        let ti = self.table_check(t)?;
        if ti.default_const {
            return Err(RuntimeError::Const(format!("the default action of {}", ti.name)));
        }
        self.check_call(t, &call, true)?;
        self.tables[t].default = Some(call);
        Ok(())
    }

    /// Restore the program's default action.
    pub fn table_reset_default(&mut self, t: usize) -> Result<(), RuntimeError> {
        let d = self.table_check(t)?.default.clone();
        self.tables[t].default = Some(d);
        Ok(())
    }

    /// The current default action.
    pub fn table_default(&self, t: usize) -> Option<ActionCall> {
        self.tables.get(t).and_then(|s| s.default.clone())
    }

    /// Every entry, in handle order.
    pub fn table_entries(&self, t: usize) -> Vec<EntryView> {
        let Some(s) = self.tables.get(t) else { return Vec::new() };
        let mut v: Vec<EntryView> = s
            .table
            .iter()
            .map(|(h, e)| EntryView {
                handle: h.to_raw(),
                matches: e.matches().to_vec(),
                priority: e.priority(),
                call: e.action().call.clone(),
                counter: e.action().counter.get(),
                indirect: e.action().indirect,
                ttl_ns: e.action().idle.ttl.get(),
                idle_ns: self.now_ns.saturating_sub(e.action().idle.last_hit.get()),
            })
            .collect();
        v.sort_by_key(|e| e.handle);
        v
    }

    /// The handle of the entry with exactly this match (and priority, where it matters).
    pub fn table_find(
        &self,
        t: usize,
        matches: &[FieldMatch],
        priority: Option<i64>,
    ) -> Option<Handle> {
        let s = self.tables.get(t)?;
        let p = if s.uses_priority { Some(priority.unwrap_or(0)) } else { None };
        s.table.find(matches, p).ok().flatten().map(EntryHandle::to_raw)
    }

    /// Whether table `t` orders entries by priority.
    pub fn table_uses_priority(&self, t: usize) -> bool {
        self.tables.get(t).is_some_and(|s| s.uses_priority)
    }

    fn profile_of(&self, inst: usize) -> Result<(), RuntimeError> {
        match self.prog.instances.get(inst).map(|i| &i.kind) {
            Some(InstanceKind::ActionProfile(_) | InstanceKind::ActionSelector { .. }) => Ok(()),
            _ => Err(RuntimeError::NotFound(format!("action profile {inst}"))),
        }
    }

    fn profile_size(&self, inst: usize) -> usize {
        match self.prog.instances.get(inst).map(|i| &i.kind) {
            Some(InstanceKind::ActionProfile(n)) => *n as usize,
            Some(InstanceKind::ActionSelector { size, .. }) => *size as usize,
            _ => 0,
        }
    }

    /// Add a member (an action, by its global index, with its data) to action profile
    /// `inst`; returns the member's id.
    pub fn act_prof_create_member(
        &mut self,
        inst: usize,
        action: u32,
        args: Vec<u128>,
    ) -> Result<u32, RuntimeError> {
        self.profile_of(inst)?;
        self.check_member(action, &args)?;
        let size = self.profile_size(inst);
        let p = &mut self.profiles[inst];
        if p.members.len() >= size {
            return Err(RuntimeError::Full);
        }
        let id = p.next_member;
        p.next_member += 1;
        p.members.insert(id, (action, args));
        Ok(id)
    }

    /// Change a member's action and arguments (the groups holding it follow).
    pub fn act_prof_modify_member(
        &mut self,
        inst: usize,
        member: u32,
        action: u32,
        args: Vec<u128>,
    ) -> Result<(), RuntimeError> {
        self.profile_of(inst)?;
        self.check_member(action, &args)?;
        match self.profiles[inst].members.get_mut(&member) {
            Some(m) => {
                *m = (action, args);
                Ok(())
            }
            None => Err(RuntimeError::NotFound(format!("member {member}"))),
        }
    }

    /// `args` are right for `action`'s data parameters.
    fn check_member(&self, action: u32, args: &[u128]) -> Result<(), RuntimeError> {
        let a = self
            .prog
            .actions
            .get(action as usize)
            .ok_or_else(|| RuntimeError::NotFound(format!("action {action}")))?;
        let data: Vec<&ParamIr> = a.params.iter().filter(|p| p.data).collect();
        if data.len() != args.len() {
            return Err(RuntimeError::Invalid(format!(
                "{} takes {} arguments",
                a.name,
                data.len()
            )));
        }
        for (p, v) in data.iter().zip(args) {
            if *v & !mask(p.width) != 0 {
                return Err(RuntimeError::Invalid(format!(
                    "{v} does not fit {}'s {} bits",
                    p.name, p.width
                )));
            }
        }
        Ok(())
    }

    /// Remove a member (it must be in no group).
    pub fn act_prof_delete_member(&mut self, inst: usize, member: u32) -> Result<(), RuntimeError> {
        self.profile_of(inst)?;
        let p = &mut self.profiles[inst];
        if p.groups.values().any(|g| g.contains(&member)) {
            return Err(RuntimeError::Invalid(format!("member {member} is in a group")));
        }
        p.members
            .remove(&member)
            .map(|_| ())
            .ok_or_else(|| RuntimeError::NotFound(format!("member {member}")))
    }

    /// Create an empty group; returns its id.
    pub fn act_prof_create_group(&mut self, inst: usize) -> Result<u32, RuntimeError> {
        self.profile_of(inst)?;
        let p = &mut self.profiles[inst];
        let id = p.next_group;
        p.next_group += 1;
        p.groups.insert(id, Vec::new());
        Ok(id)
    }

    /// Delete a group.
    pub fn act_prof_delete_group(&mut self, inst: usize, group: u32) -> Result<(), RuntimeError> {
        self.profile_of(inst)?;
        self.profiles[inst]
            .groups
            .remove(&group)
            .map(|_| ())
            .ok_or_else(|| RuntimeError::NotFound(format!("group {group}")))
    }

    /// Put a member in a group.
    pub fn act_prof_add_member_to_group(
        &mut self,
        inst: usize,
        member: u32,
        group: u32,
    ) -> Result<(), RuntimeError> {
        self.profile_of(inst)?;
        let p = &mut self.profiles[inst];
        if !p.members.contains_key(&member) {
            return Err(RuntimeError::NotFound(format!("member {member}")));
        }
        group_add(&mut p.groups, group, member)
    }

    /// Take a member out of a group.
    pub fn act_prof_remove_member_from_group(
        &mut self,
        inst: usize,
        member: u32,
        group: u32,
    ) -> Result<(), RuntimeError> {
        self.profile_of(inst)?;
        group_remove(&mut self.profiles[inst].groups, group, member, "member")
    }

    /// Add an entry naming a member or group of the table's action profile.
    pub fn table_indirect_add(
        &mut self,
        t: usize,
        matches: Vec<FieldMatch>,
        priority: Option<i64>,
        target: Indirect,
    ) -> Result<Handle, RuntimeError> {
        let ti = self.table_check(t)?;
        let Some(inst) = ti.implementation else {
            return Err(RuntimeError::Invalid(format!("table {} has no action profile", ti.name)));
        };
        self.check_indirect(inst as usize, target)?;
        let ts = &mut self.tables[t];
        let priority = if ts.uses_priority { Some(priority.unwrap_or(0)) } else { None };
        let data = EntryData {
            call: ActionCall { action: 0, args: Vec::new() },
            indirect: Some(target),
            counter: Cell::new((0, 0)),
            meter: None,
            idle: IdleState::new(self.now_ns, None),
        };
        ts.table.insert(&matches, priority, data).map(EntryHandle::to_raw).map_err(table_error)
    }

    /// Change the member or group an entry of a table with an action profile names.
    pub fn table_indirect_modify(
        &mut self,
        t: usize,
        h: Handle,
        target: Indirect,
    ) -> Result<(), RuntimeError> {
        let ti = self.table_check(t)?;
        let Some(inst) = ti.implementation else {
            return Err(RuntimeError::Invalid(format!("table {} has no action profile", ti.name)));
        };
        self.check_indirect(inst as usize, target)?;
        let h = EntryHandle::from_raw(h);
        let old = self.tables[t]
            .table
            .get(h)
            .ok_or_else(|| RuntimeError::NotFound(format!("entry handle {}", h.to_raw())))?;
        let data = EntryData { indirect: Some(target), ..old.action().clone() };
        self.tables[t].table.modify(h, data).map(|_| ()).map_err(table_error)
    }

    /// The member or group a table with an action profile uses when no entry matches.
    pub fn table_indirect_default(&self, t: usize) -> Option<Indirect> {
        self.default_indirect.get(t).copied().flatten()
    }

    /// Make a member or group the table's default.
    pub fn table_indirect_set_default(
        &mut self,
        t: usize,
        target: Indirect,
    ) -> Result<(), RuntimeError> {
        let ti = self.table_check(t)?;
        let Some(inst) = ti.implementation else {
            return Err(RuntimeError::Invalid(format!("table {} has no action profile", ti.name)));
        };
        self.check_indirect(inst as usize, target)?;
        self.default_indirect[t] = Some(target);
        Ok(())
    }

    fn check_indirect(&self, inst: usize, target: Indirect) -> Result<(), RuntimeError> {
        let p = &self.profiles[inst];
        let ok = match target {
            Indirect::Member(m) => p.members.contains_key(&m),
            Indirect::Group(g) => p.groups.contains_key(&g),
        };
        if ok { Ok(()) } else { Err(RuntimeError::NotFound(format!("{target:?}"))) }
    }

    /// The index of the extern instance named `name`.
    pub fn instance_index(&self, name: &str) -> Option<usize> {
        self.prog.instances.iter().position(|i| i.name == name)
    }

    /// Read an indexed counter cell (packets, bytes).
    pub fn counter_read(&self, inst: usize, index: usize) -> Result<(u64, u64), RuntimeError> {
        self.counters
            .get(inst)
            .and_then(|c| c.get(index))
            .copied()
            .ok_or_else(|| RuntimeError::Invalid(format!("counter {inst}[{index}]")))
    }

    /// Set an indexed counter cell.
    pub fn counter_write(
        &mut self,
        inst: usize,
        index: usize,
        v: (u64, u64),
    ) -> Result<(), RuntimeError> {
        match self.counters.get_mut(inst).and_then(|c| c.get_mut(index)) {
            Some(c) => {
                *c = v;
                Ok(())
            }
            None => Err(RuntimeError::Invalid(format!("counter {inst}[{index}]"))),
        }
    }

    /// Zero every cell of a counter (indexed or direct).
    pub fn counter_reset(&mut self, inst: usize) -> Result<(), RuntimeError> {
        if inst >= self.counters.len() {
            return Err(RuntimeError::NotFound(format!("counter {inst}")));
        }
        self.counters[inst].iter_mut().for_each(|c| *c = (0, 0));
        for (t, ti) in self.prog.tables.iter().enumerate() {
            if ti.direct_counter == Some(inst as u32) {
                self.tables[t].table.iter().for_each(|(_, e)| e.action().counter.set((0, 0)));
            }
        }
        Ok(())
    }

    /// The direct counter of table `t`'s entry `h`.
    pub fn direct_counter_read(&self, t: usize, h: Handle) -> Result<(u64, u64), RuntimeError> {
        self.tables
            .get(t)
            .and_then(|s| s.table.get(EntryHandle::from_raw(h)))
            .map(|e| e.action().counter.get())
            .ok_or_else(|| RuntimeError::NotFound(format!("entry handle {h}")))
    }

    /// Set an entry's direct counter: (packets, bytes).
    pub fn direct_counter_write(
        &mut self,
        t: usize,
        h: Handle,
        v: (u64, u64),
    ) -> Result<(), RuntimeError> {
        self.tables
            .get(t)
            .and_then(|s| s.table.get(EntryHandle::from_raw(h)))
            .map(|e| e.action().counter.set(v))
            .ok_or_else(|| RuntimeError::NotFound(format!("entry handle {h}")))
    }

    /// Read a register cell.
    pub fn register_read(&self, inst: usize, index: usize) -> Result<u128, RuntimeError> {
        self.registers
            .get(inst)
            .and_then(|r| r.get(index))
            .copied()
            .ok_or_else(|| RuntimeError::Invalid(format!("register {inst}[{index}]")))
    }

    /// Write a register cell.
    pub fn register_write(
        &mut self,
        inst: usize,
        index: usize,
        v: u128,
    ) -> Result<(), RuntimeError> {
        let w = match self.prog.instances.get(inst).map(|i| &i.kind) {
            Some(InstanceKind::Register { width, .. }) => *width,
            _ => return Err(RuntimeError::NotFound(format!("register {inst}"))),
        };
        if v & !mask(w) != 0 {
            return Err(RuntimeError::Invalid(format!("{v} does not fit {w} bits")));
        }
        match self.registers.get_mut(inst).and_then(|r| r.get_mut(index)) {
            Some(c) => {
                *c = v;
                Ok(())
            }
            None => Err(RuntimeError::Invalid(format!("register index {index}"))),
        }
    }

    /// Zero a register.
    pub fn register_reset(&mut self, inst: usize) -> Result<(), RuntimeError> {
        match self.registers.get_mut(inst) {
            Some(r) => {
                r.iter_mut().for_each(|c| *c = 0);
                Ok(())
            }
            None => Err(RuntimeError::NotFound(format!("register {inst}"))),
        }
    }

    /// Set an indexed meter's rates (`None`: every cell); rates per microsecond.
    pub fn meter_set_rates(
        &mut self,
        inst: usize,
        index: Option<usize>,
        cir: MeterRate,
        pir: MeterRate,
    ) -> Result<(), RuntimeError> {
        for m in self.meter_cells(inst, index)? {
            m.set_rates(cir, pir).map_err(|e| RuntimeError::Invalid(format!("{e:?}")))?;
        }
        Ok(())
    }

    /// Cell `index` of meter `inst` (`None`: every cell).
    fn meter_cells(
        &mut self,
        inst: usize,
        index: Option<usize>,
    ) -> Result<&mut [Meter], RuntimeError> {
        let cells = self
            .meters
            .get_mut(inst)
            .ok_or_else(|| RuntimeError::NotFound(format!("meter {inst}")))?;
        match index {
            Some(i) if i < cells.len() => Ok(&mut cells[i..i + 1]),
            Some(i) => Err(RuntimeError::Invalid(format!("meter index {i}"))),
            None => Ok(&mut cells[..]),
        }
    }

    /// Return an indexed meter's cells (`None`: every cell) to their default: no rates, every
    /// packet green.
    pub fn meter_reset_rates(
        &mut self,
        inst: usize,
        index: Option<usize>,
    ) -> Result<(), RuntimeError> {
        self.meter_cells(inst, index)?.iter_mut().for_each(Meter::reset_rates);
        Ok(())
    }

    /// Return table `t`'s entry `h`'s direct meter to its default (every packet green).
    pub fn direct_meter_reset_rates(&mut self, t: usize, h: Handle) -> Result<(), RuntimeError> {
        let e = self
            .tables
            .get(t)
            .and_then(|s| s.table.get(EntryHandle::from_raw(h)))
            .ok_or_else(|| RuntimeError::NotFound(format!("entry {h}")))?;
        match &e.action().meter {
            Some(m) => {
                m.borrow_mut().reset_rates();
                Ok(())
            }
            None => Err(RuntimeError::Invalid("the table has no direct meter".into())),
        }
    }

    /// An indexed meter cell's (committed, peak) rates, `None` when never set.
    pub fn meter_get_rates(
        &self,
        inst: usize,
        index: usize,
    ) -> Result<Option<(MeterRate, MeterRate)>, RuntimeError> {
        self.meters
            .get(inst)
            .and_then(|m| m.get(index))
            .map(Meter::rates)
            .ok_or_else(|| RuntimeError::Invalid(format!("meter {inst}[{index}]")))
    }

    /// Table `t`'s entry `h`'s direct meter rates, `None` when never set.
    pub fn direct_meter_get_rates(
        &self,
        t: usize,
        h: Handle,
    ) -> Result<Option<(MeterRate, MeterRate)>, RuntimeError> {
        let e = self
            .tables
            .get(t)
            .and_then(|s| s.table.get(EntryHandle::from_raw(h)))
            .ok_or_else(|| RuntimeError::NotFound(format!("entry {h}")))?;
        match &e.action().meter {
            Some(m) => Ok(m.borrow().rates()),
            None => Err(RuntimeError::Invalid("the table has no direct meter".into())),
        }
    }

    /// Set a direct meter's rates for table `t`'s entry `h`.
    pub fn direct_meter_set_rates(
        &mut self,
        t: usize,
        h: Handle,
        cir: MeterRate,
        pir: MeterRate,
    ) -> Result<(), RuntimeError> {
        let e = self
            .tables
            .get(t)
            .and_then(|s| s.table.get(EntryHandle::from_raw(h)))
            .ok_or_else(|| RuntimeError::NotFound(format!("entry {h}")))?;
        match &e.action().meter {
            Some(m) => m
                .borrow_mut()
                .set_rates(cir, pir)
                .map_err(|e| RuntimeError::Invalid(format!("{e:?}"))),
            None => Err(RuntimeError::Invalid("the table has no direct meter".into())),
        }
    }

    /// Configure a custom CRC calculation by its name (`calc`, `calc_0`, ...) or index.
    pub fn set_crc_parameters(&mut self, calc: usize, p: CrcParams) -> Result<(), RuntimeError> {
        match self.calcs.get_mut(calc) {
            Some(c) => c.set_crc_params(p).map_err(|e| RuntimeError::Invalid(format!("{e:?}"))),
            None => Err(RuntimeError::NotFound(format!("calculation {calc}"))),
        }
    }

    /// Add a value (and mask) to a parser value set.
    pub fn value_set_add(
        &mut self,
        vs: usize,
        value: u128,
        mask_: u128,
    ) -> Result<(), RuntimeError> {
        let info = self
            .prog
            .value_sets
            .get(vs)
            .ok_or_else(|| RuntimeError::NotFound(format!("value set {vs}")))?;
        let set = &mut self.value_sets[vs];
        if set.len() >= info.size as usize {
            return Err(RuntimeError::Full);
        }
        set.push((value & mask_, mask_));
        Ok(())
    }

    /// Empty a parser value set.
    pub fn value_set_clear(&mut self, vs: usize) -> Result<(), RuntimeError> {
        match self.value_sets.get_mut(vs) {
            Some(set) => {
                set.clear();
                Ok(())
            }
            None => Err(RuntimeError::NotFound(format!("value set {vs}"))),
        }
    }

    /// Create a multicast group.
    pub fn mc_group_create(&mut self, g: u16) -> Result<(), RuntimeError> {
        if self.mc_groups.contains_key(&g) {
            return Err(RuntimeError::Duplicate);
        }
        self.mc_groups.insert(g, Vec::new());
        Ok(())
    }

    /// Destroy a multicast group.
    pub fn mc_group_destroy(&mut self, g: u16) -> Result<(), RuntimeError> {
        self.mc_groups
            .remove(&g)
            .map(|_| ())
            .ok_or_else(|| RuntimeError::NotFound(format!("group {g}")))
    }

    /// Create a node (a replication id and its ports); returns its handle.
    pub fn mc_node_create(&mut self, rid: u16, mut ports: Vec<u32>) -> NodeHandle {
        // A node's ports are a set (BMv2 keeps a bitmap): one copy per port.
        ports.sort_unstable();
        ports.dedup();
        let h = self.next_node;
        self.next_node += 1;
        self.mc_nodes.insert(h, (rid, ports));
        h
    }

    /// Change a node's ports.
    pub fn mc_node_update(
        &mut self,
        h: NodeHandle,
        mut ports: Vec<u32>,
    ) -> Result<(), RuntimeError> {
        ports.sort_unstable();
        ports.dedup();
        match self.mc_nodes.get_mut(&h) {
            Some(n) => {
                n.1 = ports;
                Ok(())
            }
            None => Err(RuntimeError::NotFound(format!("node {h}"))),
        }
    }

    /// Destroy a node (and remove it from every group).
    pub fn mc_node_destroy(&mut self, h: NodeHandle) -> Result<(), RuntimeError> {
        self.mc_nodes.remove(&h).ok_or_else(|| RuntimeError::NotFound(format!("node {h}")))?;
        for g in self.mc_groups.values_mut() {
            g.retain(|n| *n != h);
        }
        Ok(())
    }

    /// Put a node in a group.
    pub fn mc_node_associate(&mut self, g: u16, h: NodeHandle) -> Result<(), RuntimeError> {
        if !self.mc_nodes.contains_key(&h) {
            return Err(RuntimeError::NotFound(format!("node {h}")));
        }
        group_add(&mut self.mc_groups, g, h)
    }

    /// Take a node out of a group.
    pub fn mc_node_dissociate(&mut self, g: u16, h: NodeHandle) -> Result<(), RuntimeError> {
        group_remove(&mut self.mc_groups, g, h, "node")
    }

    /// Every multicast group and its nodes, in group order.
    pub fn mc_groups(&self) -> Vec<(u16, Vec<NodeHandle>)> {
        self.mc_groups.iter().map(|(g, n)| (*g, n.clone())).collect()
    }

    /// A multicast node's replication id and ports.
    pub fn mc_node(&self, h: NodeHandle) -> Option<(u16, Vec<u32>)> {
        self.mc_nodes.get(&h).cloned()
    }

    /// The replicas of a group, in order.
    pub fn mc_replicas(&self, g: u16) -> Vec<Replica> {
        let mut v = Vec::new();
        if let Some(nodes) = self.mc_groups.get(&g) {
            for n in nodes {
                if let Some((rid, ports)) = self.mc_nodes.get(n) {
                    let mut ps = ports.clone();
                    ps.sort_unstable();
                    for p in ps {
                        v.push((*rid, p));
                    }
                }
            }
        }
        v
    }

    /// Add (or replace) a mirror session.
    pub fn mirroring_add(&mut self, session: u32, s: MirrorSession) {
        self.mirrors.insert(session, s);
    }

    /// Remove a mirror session.
    pub fn mirroring_delete(&mut self, session: u32) -> Result<(), RuntimeError> {
        self.mirrors
            .remove(&session)
            .map(|_| ())
            .ok_or_else(|| RuntimeError::NotFound(format!("session {session}")))
    }

    /// A mirror session.
    pub fn mirroring_get(&self, session: u32) -> Option<MirrorSession> {
        self.mirrors.get(&session).copied()
    }

    // ------------------------------------------------------------------ idle timeouts

    /// The switch's time: that of the last packet, or of [`Switch::advance_clock`].
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Move the switch's time forward to `now_ns` (never back), so that control-plane changes
    /// made between packets (an entry's time to live) start at the right time.
    pub fn advance_clock(&mut self, now_ns: u64) {
        self.now_ns = self.now_ns.max(now_ns);
    }

    /// Whether table `t`'s entries can time out (v1model `support_timeout = true`, PNA
    /// `pna_idle_timeout` other than `NO_TIMEOUT`).
    pub fn table_supports_idle_timeout(&self, t: usize) -> bool {
        self.prog.tables.get(t).is_some_and(|ti| ti.idle != IdleTimeout::None)
    }

    /// Set an entry's time to live once idle (`None`: it never expires). Its idle time
    /// starts again from the time of the last packet.
    pub fn table_set_entry_ttl(
        &mut self,
        t: usize,
        h: Handle,
        ttl_ns: Option<u64>,
    ) -> Result<(), RuntimeError> {
        let ti = self.table_check(t)?;
        if ti.idle == IdleTimeout::None {
            return Err(RuntimeError::Invalid(format!(
                "table {} does not support idle timeouts",
                ti.name
            )));
        }
        let e = self.tables[t]
            .table
            .get(EntryHandle::from_raw(h))
            .ok_or_else(|| RuntimeError::NotFound(format!("entry handle {h}")))?;
        e.action().idle.ttl.set(ttl_ns);
        e.action().idle.restart(self.now_ns);
        Ok(())
    }

    /// The entries of tables that notify (`support_timeout`, `NOTIFY_CONTROL`) idle past their
    /// time to live at `now_ns`. Each is reported once per idle period: again only after its
    /// expire timer restarted (a hit in v1model, `restart_expire_timer` in PNA) and it went
    /// idle again.
    pub fn take_idle_expired(&mut self, now_ns: u64) -> Vec<(usize, Handle)> {
        let mut out = Vec::new();
        for (t, ti) in self.prog.tables.iter().enumerate() {
            if ti.idle != IdleTimeout::Notify {
                continue;
            }
            let mut hs: Vec<Handle> = self.tables[t]
                .table
                .iter()
                .filter(|(_, e)| {
                    let i = &e.action().idle;
                    !i.notified.get() && i.expired(now_ns)
                })
                .map(|(h, e)| {
                    e.action().idle.notified.set(true);
                    h.to_raw()
                })
                .collect();
            hs.sort_unstable();
            out.extend(hs.into_iter().map(|h| (t, h)));
        }
        out
    }

    /// Delete the entries of `AUTO_DELETE` tables idle past their time to live at `now_ns`;
    /// returns them. [`Switch::process`] does this too, every
    /// [`Switch::set_expiry_sweep_interval`] of packet time.
    pub fn expire(&mut self, now_ns: u64) -> Vec<(usize, Handle)> {
        let mut out = Vec::new();
        for (t, ti) in self.prog.tables.iter().enumerate() {
            if ti.idle != IdleTimeout::AutoDelete {
                continue;
            }
            let mut hs: Vec<EntryHandle> = self.tables[t]
                .table
                .iter()
                .filter(|(_, e)| e.action().idle.expired(now_ns))
                .map(|(h, _)| h)
                .collect();
            hs.sort_unstable_by_key(|h| h.to_raw());
            for h in hs {
                if self.tables[t].table.delete(h).is_ok() {
                    self.stats.expired += 1;
                    out.push((t, h.to_raw()));
                }
            }
        }
        out
    }

    /// Set PNA expire time profile `id`'s time to live (every profile starts at
    /// [`DEFAULT_EXPIRE_TIME_NS`]).
    pub fn set_expire_time_profile(&mut self, id: u8, ttl_ns: u64) {
        self.expire_profiles[usize::from(id)] = ttl_ns;
    }

    /// PNA expire time profile `id`'s time to live.
    pub fn expire_time_profile(&self, id: u8) -> u64 {
        self.expire_profiles[usize::from(id)]
    }

    /// How often (in packet time) [`Switch::process`] deletes idle `AUTO_DELETE` entries
    /// ([`DEFAULT_SWEEP_INTERVAL_NS`] until set; 0: at every packet).
    pub fn set_expiry_sweep_interval(&mut self, ns: u64) {
        self.sweep_interval_ns = ns;
        self.next_sweep_ns = self.now_ns;
    }

    // ------------------------------------------------------------------ PNA

    /// PNA: the ports whose packets go HOST_TO_NET (the host's vports); packets from any
    /// other port are NET_TO_HOST. None until set.
    pub fn set_host_ports(&mut self, ports: &[u32]) {
        self.host_ports = ports.to_vec();
        self.host_ports.sort_unstable();
        self.host_ports.dedup();
    }

    /// PNA: the host ports.
    pub fn host_ports(&self) -> &[u32] {
        &self.host_ports
    }

    // ------------------------------------------------------------------ data plane

    /// Run one packet arriving on `port` at time `now_ns` to completion; the packets that
    /// leave are appended to `out` as (port, bytes), in the order they leave.
    pub fn process(&mut self, port: u32, data: &[u8], now_ns: u64, out: &mut Vec<(u32, Vec<u8>)>) {
        self.stats.received += 1;
        self.now_ns = now_ns;
        self.last = Outcome::default();
        if self.auto_delete && now_ns >= self.next_sweep_ns {
            self.expire(now_ns);
            self.next_sweep_ns = now_ns.saturating_add(self.sweep_interval_ns);
        }
        if let Arch::Pna(pna) = self.prog.arch {
            self.process_pna(&pna, port, data, out);
            return;
        }
        let mut work = core::mem::take(&mut self.work);
        work.clear();
        // The common case runs on the switch's own frame and the caller's bytes: ingress, then
        // (unless ingress made other packets, which must keep their order) egress in place.
        if let Some(u) = self.ingress(data, port, instance::NORMAL, &[], &mut work) {
            let mut frame = core::mem::take(&mut self.frame);
            if work.is_empty() {
                self.egress(
                    &mut frame,
                    &data[u.off..],
                    u.port,
                    instance::NORMAL,
                    0,
                    None,
                    u.len,
                    u.truncate,
                    &mut work,
                    out,
                );
            } else {
                work.push_back(Work::Egress {
                    frame: frame.clone(),
                    payload: data[u.off..].to_vec(),
                    port: u.port,
                    itype: instance::NORMAL,
                    rid: 0,
                    keep: None,
                    len: u.len,
                    truncate: u.truncate,
                });
            }
            self.frame = frame;
        }
        let mut done = 1usize;
        while let Some(w) = work.pop_front() {
            done += 1;
            if done > MAX_DERIVED {
                self.stats.derived_limit += work.len() as u64 + 1;
                self.last.over_limit = true;
                work.clear();
                break;
            }
            match w {
                Work::Ingress { data, port, itype, keep } => {
                    if let Some(u) = self.ingress(&data, port, itype, &keep, &mut work) {
                        // BMv2 sets instance_type to NORMAL before the unicast enqueue.
                        work.push_back(Work::Egress {
                            frame: self.frame.clone(),
                            payload: data[u.off..].to_vec(),
                            port: u.port,
                            itype: instance::NORMAL,
                            rid: 0,
                            keep: None,
                            len: u.len,
                            truncate: u.truncate,
                        });
                    }
                }
                Work::Egress { mut frame, payload, port, itype, rid, keep, len, truncate } => self
                    .egress(
                        &mut frame, &payload, port, itype, rid, keep, len, truncate, &mut work, out,
                    ),
            }
        }
        self.work = work;
    }

    /// One PNA packet: main parser, pre control, main control, main deparser; it leaves by
    /// the port of the last `send_to_port`, or is dropped. After `recirculate()` the deparsed
    /// packet runs again (pass + 1), at most [`PNA_MAX_PASS`] times.
    fn process_pna(
        &mut self,
        pna: &PnaMeta,
        port: u32,
        data: &[u8],
        out: &mut Vec<(u32, Vec<u8>)>,
    ) {
        let mut r = self.pna_pass(pna, port, data, 0);
        let mut pass = 0;
        while let PnaEnd::Recirculate(bytes) = r {
            if pass == PNA_MAX_PASS {
                self.stats.derived_limit += 1;
                self.last.over_limit = true;
                self.tr(|| "recirculate: too many passes: dropped".into());
                return;
            }
            pass += 1;
            self.tr(|| format!("recirculate: pass {pass}"));
            r = self.pna_pass(pna, port, &bytes, pass);
        }
        match r {
            PnaEnd::Send(p, bytes) => {
                self.stats.sent += 1;
                self.last.sent += 1;
                self.tr(|| format!("transmit: port {p}, {} bytes", bytes.len()));
                out.push((p, bytes));
            }
            PnaEnd::Drop => {
                self.stats.dropped_ingress += 1;
                self.last.dropped_ingress = true;
                self.tr(|| "main control: dropped".into());
            }
            PnaEnd::Recirculate(_) => {}
        }
    }

    /// One pass of a PNA packet through the four blocks.
    fn pna_pass(&mut self, pna: &PnaMeta, port: u32, data: &[u8], pass: u8) -> PnaEnd {
        let h2n = self.host_ports.binary_search(&port).is_ok();
        self.tr(|| {
            let dir = if h2n { "HOST_TO_NET" } else { "NET_TO_HOST" };
            format!("main parser: port {port}, {} bytes, {dir}, pass {pass}", data.len())
        });
        let mut frame = core::mem::take(&mut self.frame);
        frame.clear();
        frame.resize(self.prog.frame_len as usize, 0);
        for i in 0..3 {
            set(&mut frame, pna.input_port[i], u128::from(port));
            set(&mut frame, pna.direction[i], u128::from(h2n));
            set(&mut frame, pna.pass[i], u128::from(pass));
        }
        set(&mut frame, pna.timestamp, u128::from(self.now_ns));
        set(&mut frame, self.prog.std.packet_length, data.len() as u128);
        let prog = Arc::clone(&self.prog);
        let mut flags = Flags::default();
        let (r, cursor) = {
            let mut ex = Exec::new(&prog, self, &mut frame, data, &mut flags);
            let r = ex.parser(prog.parser);
            (r, ex.cursor)
        };
        if let Err(e) = r {
            self.stats.parser_errors += 1;
            if self.last.parser_error.is_none() {
                self.last.parser_error = Some(e);
            }
            for s in pna.parser_error {
                set(&mut frame, s, u128::from(e));
            }
            let name = self.prog.errors.get(e as usize).cloned().unwrap_or_default();
            self.tr(|| format!("main parser: error {name}"));
        }
        let off = cursor.div_ceil(8).min(data.len());
        let payload = &data[off..];
        for k in [pna.pre, prog.ingress] {
            let mut ex = Exec::new(&prog, self, &mut frame, payload, &mut flags);
            ex.control(k);
        }
        if flags.assert_failed {
            self.stats.assert_failures += 1;
        }
        let dest = match (flags.recirculate.is_some(), flags.pna_dest) {
            (false, None) => {
                self.frame = frame;
                return PnaEnd::Drop;
            }
            (true, _) => None,
            (false, Some(p)) => Some(p),
        };
        let bytes = {
            let mut flags2 = Flags::default();
            let mut ex = Exec::new(&prog, self, &mut frame, payload, &mut flags2);
            ex.out.clear();
            ex.out.reserve(payload.len() + 64);
            ex.control(prog.deparser);
            let mut b = ex.out.take();
            b.extend_from_slice(payload);
            b
        };
        self.frame = frame;
        match dest {
            Some(p) => PnaEnd::Send(p, bytes),
            None => PnaEnd::Recirculate(bytes),
        }
    }

    fn tr(&mut self, f: impl FnOnce() -> String) {
        if let Some(t) = &mut self.trace {
            t.push(f());
        }
    }

    fn keep_list(&self, list: Option<u32>, frame: &[u128]) -> Vec<(Slot, Vec<u128>)> {
        let Some(id) = list else { return Vec::new() };
        self.prog
            .field_lists
            .iter()
            .filter(|l| l.0 == id)
            .flat_map(|l| l.1.iter())
            .map(|&(s, n)| (s, frame[s as usize..(s + n) as usize].to_vec()))
            .collect()
    }

    /// Parse `data` into the (zeroed) frame; returns the payload offset in bytes.
    /// Parse `data` into a fresh frame. A packet from a port has its `ingress_port`; a derived
    /// packet (resubmit, recirculation, clone) starts from reset metadata, as BMv2's does, with
    /// only the preserved fields (`keep`) set, before the parser runs.
    fn parse(
        &mut self,
        data: &[u8],
        port: Option<u32>,
        itype: u128,
        keep: &[(Slot, Vec<u128>)],
    ) -> usize {
        let std = self.prog.std;
        let mut frame = core::mem::take(&mut self.frame);
        frame.clear();
        frame.resize(self.prog.frame_len as usize, 0);
        if let Some(port) = port {
            set(&mut frame, std.ingress_port, u128::from(port));
        }
        for (s, vals) in keep {
            frame[*s as usize..*s as usize + vals.len()].copy_from_slice(vals);
        }
        set(&mut frame, std.instance_type, itype);
        set(&mut frame, std.packet_length, data.len() as u128);
        set(&mut frame, std.ingress_global_timestamp, u128::from(self.now_ns / 1000) & mask(48));
        let mut flags = Flags::default();
        let prog = Arc::clone(&self.prog);
        let mut ex = Exec::new(&prog, self, &mut frame, data, &mut flags);
        let r = ex.parser(prog.parser);
        let cursor = ex.cursor;
        if let Err(e) = r {
            self.stats.parser_errors += 1;
            if self.last.parser_error.is_none() {
                self.last.parser_error = Some(e);
            }
            set(&mut frame, std.parser_error, u128::from(e));
            let name = self.prog.errors.get(e as usize).cloned().unwrap_or_default();
            self.tr(|| format!("parser: error {name}"));
        }
        self.frame = frame;
        cursor.div_ceil(8).min(data.len())
    }

    /// Parse and run ingress; the frame is left in `self.frame`. Packets other than the
    /// original (clones, replicas, resubmits) go to `work`; a unicast original is returned.
    fn ingress(
        &mut self,
        data: &[u8],
        port: u32,
        itype: u128,
        keep: &[(Slot, Vec<u128>)],
        work: &mut VecDeque<Work>,
    ) -> Option<Unicast> {
        self.tr(|| format!("ingress: port {port}, {} bytes, instance_type {itype}", data.len()));
        let from_port = (itype == instance::NORMAL).then_some(port);
        let off = self.parse(data, from_port, itype, keep);
        let std = self.prog.std;
        let mut frame = core::mem::take(&mut self.frame);
        let mut flags = Flags::default();
        {
            let prog = Arc::clone(&self.prog);
            let mut ex = Exec::new(&prog, self, &mut frame, data, &mut flags);
            ex.cursor = off * 8;
            ex.control(prog.verify);
            ex.control(prog.ingress);
        }
        if flags.assert_failed {
            self.stats.assert_failures += 1;
        }
        // Ingress clone: the packet as it arrived, parsed again, to the session's port.
        if let Some((false, session, list)) = flags.clone {
            if let Some(ms) = self.mirrors.get(&session).copied() {
                let kept = self.keep_list(list, &frame);
                let off2 = self.parse(data, None, itype, &[]);
                let mut cf = self.frame.clone();
                set(&mut cf, std.instance_type, instance::INGRESS_CLONE);
                for (s, vals) in &kept {
                    cf[*s as usize..*s as usize + vals.len()].copy_from_slice(vals);
                }
                let p2 = data[off2..].to_vec();
                self.enqueue_mirror(
                    ms,
                    cf,
                    p2,
                    instance::INGRESS_CLONE,
                    Some(kept),
                    data.len() as u32,
                    work,
                );
            } else {
                self.tr(|| format!("clone: session {session} is not configured"));
            }
        }
        let plen = (data.len() as i64 + flags.len_delta).clamp(0, i64::from(u32::MAX)) as u32;
        let result = if let Some(list) = flags.resubmit {
            let kept = self.keep_list(list, &frame);
            self.tr(|| "resubmit".into());
            work.push_back(Work::Ingress {
                data: data.to_vec(),
                port,
                itype: instance::RESUBMIT,
                keep: kept,
            });
            None
        } else {
            let mgrp = get(&frame, std.mcast_grp) as u16;
            let spec = get(&frame, std.egress_spec) as u32;
            if mgrp != 0 {
                let reps = self.mc_replicas(mgrp);
                self.tr(|| format!("multicast group {mgrp}: {} replicas", reps.len()));
                for (rid, p) in reps {
                    work.push_back(Work::Egress {
                        frame: frame.clone(),
                        payload: data[off..].to_vec(),
                        port: p,
                        itype: instance::REPLICATION,
                        rid,
                        keep: None,
                        len: plen,
                        truncate: flags.truncate,
                    });
                }
                None
            } else if spec == DROP_PORT {
                self.stats.dropped_ingress += 1;
                self.last.dropped_ingress = true;
                self.tr(|| "ingress: dropped".into());
                None
            } else {
                self.tr(|| format!("ingress: egress_spec {spec}"));
                Some(Unicast { port: spec, off, truncate: flags.truncate, len: plen })
            }
        };
        self.frame = frame;
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn enqueue_mirror(
        &mut self,
        ms: MirrorSession,
        frame: Vec<u128>,
        payload: Vec<u8>,
        itype: u128,
        keep: Option<Vec<(Slot, Vec<u128>)>>,
        len: u32,
        work: &mut VecDeque<Work>,
    ) {
        if let Some(p) = ms.port {
            work.push_back(Work::Egress {
                frame: frame.clone(),
                payload: payload.clone(),
                port: p,
                itype,
                rid: 0,
                keep: keep.clone(),
                len,
                truncate: None,
            });
        }
        if let Some(g) = ms.mgrp {
            for (rid, p) in self.mc_replicas(g) {
                work.push_back(Work::Egress {
                    frame: frame.clone(),
                    payload: payload.clone(),
                    port: p,
                    itype,
                    rid,
                    keep: keep.clone(),
                    len,
                    truncate: None,
                });
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn egress(
        &mut self,
        frame: &mut [u128],
        payload: &[u8],
        port: u32,
        itype: u128,
        rid: u16,
        keep: Option<Vec<(Slot, Vec<u128>)>>,
        len: u32,
        truncate: Option<u32>,
        work: &mut VecDeque<Work>,
        out: &mut Vec<(u32, Vec<u8>)>,
    ) {
        let std = self.prog.std;
        if let Some(keep) = &keep {
            // A clone: metadata (standard metadata included) starts from zero, with the
            // preserved fields, as BMv2's reset_metadata leaves it.
            let (mb, ml) = self.prog.meta;
            frame[mb as usize..(mb + ml) as usize].iter_mut().for_each(|v| *v = 0);
            frame[std.base as usize..(std.base + std.len) as usize].iter_mut().for_each(|v| *v = 0);
            for (s, vals) in keep {
                frame[*s as usize..*s as usize + vals.len()].copy_from_slice(vals);
            }
        }
        set(frame, std.egress_port, u128::from(port));
        set(frame, std.egress_spec, 0);
        set(frame, std.instance_type, itype);
        set(frame, std.egress_rid, u128::from(rid));
        set(frame, std.packet_length, u128::from(len));
        set(frame, std.egress_global_timestamp, u128::from(self.now_ns / 1000) & mask(48));
        self.tr(|| format!("egress: port {port}, instance_type {itype}, rid {rid}"));
        let mut flags = Flags { truncate, ..Flags::default() };
        let prog = Arc::clone(&self.prog);
        {
            let mut ex = Exec::new(&prog, self, frame, payload, &mut flags);
            ex.control(prog.egress);
        }
        if flags.assert_failed {
            self.stats.assert_failures += 1;
        }
        if let Some((true, session, list)) = flags.clone {
            if let Some(ms) = self.mirrors.get(&session).copied() {
                let kept = self.keep_list(list, frame);
                self.enqueue_mirror(
                    ms,
                    frame.to_vec(),
                    payload.to_vec(),
                    instance::EGRESS_CLONE,
                    Some(kept),
                    len,
                    work,
                );
            } else {
                self.tr(|| format!("clone: session {session} is not configured"));
            }
        }
        if get(frame, std.egress_spec) as u32 == DROP_PORT {
            self.stats.dropped_egress += 1;
            self.last.dropped_egress += 1;
            self.tr(|| "egress: dropped".into());
            return;
        }
        // computeChecksum, then the deparser.
        let mut flags2 = Flags::default();
        let mut bytes = {
            let mut ex = Exec::new(&prog, self, frame, payload, &mut flags2);
            ex.control(prog.compute);
            ex.out.clear();
            ex.out.reserve(payload.len() + 64);
            ex.control(prog.deparser);
            let mut b = ex.out.take();
            b.extend_from_slice(payload);
            b
        };
        if let Some(list) = flags.recirculate {
            let kept = self.keep_list(list, frame);
            self.tr(|| "recirculate".into());
            let p = get(frame, std.ingress_port) as u32;
            work.push_back(Work::Ingress {
                data: bytes,
                port: p,
                itype: instance::RECIRC,
                keep: kept,
            });
            return;
        }
        if let Some(t) = flags.truncate {
            bytes.truncate(t as usize);
        }
        self.stats.sent += 1;
        self.last.sent += 1;
        self.tr(|| format!("transmit: port {port}, {} bytes", bytes.len()));
        out.push((port, bytes));
    }
}

/// How one pass of a PNA packet ended.
#[derive(Debug)]
enum PnaEnd {
    /// Out of a port.
    Send(u32, Vec<u8>),
    /// Dropped.
    Drop,
    /// Back to the main parser, deparsed.
    Recirculate(Vec<u8>),
}

/// The original packet leaving ingress for one port.
#[derive(Debug, Clone, Copy)]
struct Unicast {
    port: u32,
    off: usize,
    truncate: Option<u32>,
    /// The packet length egress sees (BMv2's length register).
    len: u32,
}

/// Put `item` in `groups[group]` (multicast groups' nodes, action profile groups' members).
fn group_add<K: Ord + core::fmt::Display>(
    groups: &mut BTreeMap<K, Vec<u32>>,
    group: K,
    item: u32,
) -> Result<(), RuntimeError> {
    let g =
        groups.get_mut(&group).ok_or_else(|| RuntimeError::NotFound(format!("group {group}")))?;
    if g.contains(&item) {
        return Err(RuntimeError::Duplicate);
    }
    g.push(item);
    Ok(())
}

/// Take `item` (a `what`) out of `groups[group]`.
fn group_remove<K: Ord + core::fmt::Display>(
    groups: &mut BTreeMap<K, Vec<u32>>,
    group: K,
    item: u32,
    what: &str,
) -> Result<(), RuntimeError> {
    let g =
        groups.get_mut(&group).ok_or_else(|| RuntimeError::NotFound(format!("group {group}")))?;
    let before = g.len();
    g.retain(|m| *m != item);
    if g.len() == before {
        return Err(RuntimeError::NotFound(format!("{what} {item} in group {group}")));
    }
    Ok(())
}

/// Write an action call's data arguments into the action's parameter slots.
fn write_data(prog: &Compiled, ti: usize, call: &ActionCall, f: &mut [u128]) {
    let Some(ta) = prog.tables[ti].actions.get(call.action as usize) else { return };
    let mut args = call.args.iter();
    for p in &prog.actions[ta.action as usize].params {
        if p.data {
            set(f, p.slot, args.next().copied().unwrap_or(0));
        }
    }
}

fn set(frame: &mut [u128], s: Slot, v: u128) {
    if let Some(x) = frame.get_mut(s as usize) {
        *x = v;
    }
}

fn get(frame: &[u128], s: Slot) -> u128 {
    frame.get(s as usize).copied().unwrap_or(0)
}

/// One block's execution over a frame.
struct Exec<'s> {
    prog: &'s Compiled,
    sw: &'s mut Switch,
    f: &'s mut [u128],
    pkt: &'s [u8],
    cursor: usize,
    out: BitWriter,
    flags: &'s mut Flags,
    pending: Option<u32>,
    /// An `exit` happened where no flow could carry it (a table applied or an action called
    /// inside an expression): the enclosing block stops at its next statement.
    exiting: bool,
    /// The table whose action runs, and the entry hit (`None`: its default action).
    applying: Option<(usize, Option<EntryHandle>)>,
}

impl<'s> Exec<'s> {
    fn new(
        prog: &'s Compiled,
        sw: &'s mut Switch,
        f: &'s mut [u128],
        pkt: &'s [u8],
        flags: &'s mut Flags,
    ) -> Self {
        Exec {
            prog,
            sw,
            f,
            pkt,
            cursor: 0,
            out: BitWriter::default(),
            flags,
            pending: None,
            exiting: false,
            applying: None,
        }
    }

    fn slot(&mut self, p: &Place) -> Option<usize> {
        match &p.index {
            None => Some(p.base as usize),
            Some(d) => {
                let i = self.ev(&d.index);
                if i >= u128::from(d.count) {
                    None
                } else {
                    Some(p.base as usize + i as usize * d.stride as usize)
                }
            }
        }
    }

    fn load(&mut self, p: &Place) -> u128 {
        match self.slot(p) {
            Some(s) => self.f.get(s).copied().unwrap_or(0),
            None => 0,
        }
    }

    fn ev(&mut self, e: &Ex) -> u128 {
        match e {
            Ex::Const(v) => *v,
            Ex::Load(p) => self.load(p),
            Ex::Not(a) => u128::from(self.ev(a) == 0),
            Ex::BitNot(a, ar) => !self.ev(a) & ar.mask(),
            Ex::Neg(a, ar) => self.ev(a).wrapping_neg() & ar.mask(),
            Ex::Bin(op, a, b, ar) => {
                let x = self.ev(a);
                let y = self.ev(b);
                binop(*op, x, y, *ar)
            }
            Ex::Cmp(c, a, b, ar) => {
                let x = self.ev(a);
                let y = self.ev(b);
                u128::from(compare(*c, x, y, *ar))
            }
            Ex::EqSlots(a, b, n) => {
                let (Some(x), Some(y)) = (self.slot(a), self.slot(b)) else { return 0 };
                let n = *n as usize;
                u128::from(self.f.get(x..x + n) == self.f.get(y..y + n))
            }
            Ex::EqShape(a, b, shape) => {
                let (Some(x), Some(y)) = (self.slot(a), self.slot(b)) else { return 0 };
                u128::from(self.eq_shape(x, y, shape))
            }
            Ex::And(a, b) => u128::from(self.ev(a) != 0 && self.ev(b) != 0),
            Ex::Or(a, b) => u128::from(self.ev(a) != 0 || self.ev(b) != 0),
            Ex::Cond(c, a, b) => {
                if self.ev(c) != 0 {
                    self.ev(a)
                } else {
                    self.ev(b)
                }
            }
            Ex::Slice(a, lo, m) => (self.ev(a) >> lo) & m,
            Ex::Concat(a, b, lw) => {
                let hi = self.ev(a);
                let lo = self.ev(b);
                if *lw >= 128 { lo } else { (hi << lw) | lo }
            }
            Ex::Cast(a, from, to) => cast(self.ev(a), *from, *to),
            Ex::NonZero(a) => u128::from(self.ev(a) != 0),
            Ex::Apply(t, what) => {
                let (hit, action, flow) = self.apply(*t);
                if flow == Flow::Exit {
                    self.exiting = true;
                }
                match what {
                    ApplyResult::Hit => u128::from(hit),
                    ApplyResult::Miss => u128::from(!hit),
                    ApplyResult::ActionRun => u128::from(action),
                }
            }
            Ex::Call(c, ret) => {
                if self.call(c) == Flow::Exit {
                    self.exiting = true;
                }
                self.f.get(*ret as usize).copied().unwrap_or(0)
            }
            Ex::AnyValid(p, members) => {
                let Some(s) = self.slot(p) else { return 0 };
                u128::from(
                    members.iter().any(|m| self.f.get(s + *m as usize).copied().unwrap_or(0) != 0),
                )
            }
            Ex::LastIndex(p) => self.load(p).wrapping_sub(1) & 0xffff_ffff,
            Ex::Lookahead(w) => {
                if self.cursor + *w as usize > self.pkt.len() * 8 {
                    self.pending = Some(self.sw.errs.packet_too_short);
                    0
                } else {
                    get_bits(self.pkt, self.cursor, *w)
                }
            }
            Ex::PacketLength => self.pkt.len() as u128,
            Ex::Extern(x) => {
                let _ = self.ext(x);
                0
            }
            Ex::Seq(sts, v) => {
                for s in sts.iter() {
                    if self.st(s) == Flow::Exit {
                        self.exiting = true;
                    }
                }
                self.ev(v)
            }
        }
    }

    fn eq_shape(&self, a: usize, b: usize, shape: &Shape) -> bool {
        let f = |i: usize| self.f.get(i).copied().unwrap_or(0);
        match shape {
            Shape::Header(l) => {
                if f(a) != f(b) {
                    return false;
                }
                if f(a) == 0 {
                    return true;
                }
                let n = self.prog.layouts[*l as usize].slots as usize;
                (1..n).all(|k| f(a + k) == f(b + k))
            }
            Shape::Union(ms) | Shape::Struct(ms) => {
                ms.iter().all(|(off, s)| self.eq_shape(a + *off as usize, b + *off as usize, s))
            }
            Shape::Stack { count, stride, elem } => (0..*count as usize).all(|i| {
                self.eq_shape(a + 1 + i * *stride as usize, b + 1 + i * *stride as usize, elem)
            }),
            Shape::Scalar => f(a) == f(b),
        }
    }

    fn block(&mut self, sts: &[St]) -> Flow {
        for s in sts {
            let fl = self.st(s);
            if self.exiting {
                return Flow::Exit;
            }
            if fl != Flow::Next {
                return fl;
            }
            if let Some(e) = self.pending.take() {
                return Flow::Reject(e);
            }
        }
        Flow::Next
    }

    fn st(&mut self, s: &St) -> Flow {
        match s {
            St::Set(p, e) => {
                let v = self.ev(e);
                if let Some(i) = self.slot(p)
                    && let Some(x) = self.f.get_mut(i)
                {
                    *x = v;
                }
            }
            St::Copy(d, sp, n) => {
                let (Some(di), Some(si)) = (self.slot(d), self.slot(sp)) else { return Flow::Next };
                let n = *n as usize;
                if di + n <= self.f.len() && si + n <= self.f.len() {
                    self.f.copy_within(si..si + n, di);
                }
            }
            St::Zero(p, n) => {
                if let Some(i) = self.slot(p)
                    && let Some(r) = self.f.get_mut(i..i + *n as usize)
                {
                    r.iter_mut().for_each(|v| *v = 0);
                }
            }
            St::SetValid { bytes, hdr, valid, len, union } => {
                let Some(i) = self.slot(hdr) else { return Flow::Next };
                // BMv2's add_header / remove_header move the packet's length register.
                match (self.f[i] != 0, *valid) {
                    (false, true) => self.flags.len_delta += i64::from(*bytes),
                    (true, false) => self.flags.len_delta -= i64::from(*bytes),
                    _ => {}
                }
                if *valid {
                    if self.f[i] == 0 {
                        self.f[i + 1..i + *len as usize].iter_mut().for_each(|v| *v = 0);
                    }
                    self.f[i] = 1;
                    for (off, _) in union {
                        let j = (i as i64 + i64::from(*off)) as usize;
                        if let Some(v) = self.f.get_mut(j) {
                            *v = 0;
                        }
                    }
                } else {
                    self.f[i] = 0;
                }
            }
            St::If(c, t, e) => {
                let v = self.ev(c);
                if self.exiting {
                    return Flow::Exit;
                }
                return if v != 0 { self.block(t) } else { self.block(e) };
            }
            St::Switch(v, arms, default, blocks) => {
                let x = self.ev(v);
                if self.exiting {
                    return Flow::Exit;
                }
                let b = arms.iter().find(|(vals, _)| vals.contains(&x)).map(|a| a.1).or(*default);
                if let Some(b) = b {
                    return self.block(&blocks[b as usize]);
                }
            }
            St::Apply(t) => {
                let (_, _, fl) = self.apply(*t);
                return fl;
            }
            St::Call(c) => return self.call(c),
            St::Extern(x) => return self.ext(x),
            St::Exit => return Flow::Exit,
            St::Return => return Flow::Return,
            St::Break => return Flow::Break,
            St::Continue => return Flow::Continue,
            St::Loop { cond, body, update } => {
                let mut guard = 0u32;
                loop {
                    guard += 1;
                    if guard > 1_000_000 {
                        break;
                    }
                    if let Some(c) = cond
                        && self.ev(c) == 0
                    {
                        break;
                    }
                    match self.block(body) {
                        Flow::Break => break,
                        Flow::Next | Flow::Continue => {}
                        other => return other,
                    }
                    let _ = self.block(update);
                }
            }
            St::Block(b) => return self.block(b),
            St::StackShift { stack, count, stride, by } => {
                let Some(s) = self.slot(stack) else { return Flow::Next };
                let (count, stride) = (*count as usize, *stride as usize);
                let base = s + 1;
                let ni = self.f[s] as usize;
                if *by > 0 {
                    let k = (*by as usize).min(count);
                    for i in (0..count).rev() {
                        let dst = base + i * stride;
                        if i >= k {
                            let src = base + (i - k) * stride;
                            self.f.copy_within(src..src + stride, dst);
                        } else {
                            self.f[dst..dst + stride].iter_mut().for_each(|v| *v = 0);
                        }
                    }
                    self.f[s] = (ni + k).min(count) as u128;
                } else if *by < 0 {
                    let k = ((-*by) as usize).min(count);
                    for i in 0..count {
                        let dst = base + i * stride;
                        if i + k < count {
                            let src = base + (i + k) * stride;
                            self.f.copy_within(src..src + stride, dst);
                        } else {
                            self.f[dst..dst + stride].iter_mut().for_each(|v| *v = 0);
                        }
                    }
                    self.f[s] = ni.saturating_sub(k) as u128;
                }
            }
            St::UnionFixup { union, members, at } => {
                let Some(u) = self.slot(union) else { return Flow::Next };
                if self.f.get(u + *at as usize).copied().unwrap_or(0) != 0 {
                    for m in members {
                        if m != at
                            && let Some(v) = self.f.get_mut(u + *m as usize)
                        {
                            *v = 0;
                        }
                    }
                }
            }
            St::Log(msg, data) => {
                if self.sw.trace.is_some() {
                    let vals: Vec<String> =
                        data.iter().map(|(e, _)| format!("{}", self.ev(e))).collect();
                    let line = format!("log_msg: {msg} {}", vals.join(", "));
                    self.sw.tr(|| line);
                }
            }
        }
        Flow::Next
    }

    fn call(&mut self, c: &Call) -> Flow {
        for s in &c.copy_in {
            let _ = self.st(s);
        }
        let fl = match c.body {
            Body::Action(a) => {
                let prog = self.prog;
                self.block(&prog.actions[a as usize].body)
            }
            Body::Function(f) => {
                let prog = self.prog;
                self.block(&prog.functions[f as usize].body)
            }
            Body::Control(k) => {
                let prog = self.prog;
                self.block(&prog.controls[k as usize].body)
            }
            Body::Parser(p) => match self.parser(p) {
                Ok(()) => Flow::Next,
                Err(e) => Flow::Reject(e),
            },
        };
        for s in &c.copy_out {
            let _ = self.st(s);
        }
        match fl {
            Flow::Exit => Flow::Exit,
            Flow::Reject(e) => Flow::Reject(e),
            _ => Flow::Next,
        }
    }

    fn control(&mut self, k: u32) {
        self.exiting = false;
        let prog = self.prog;
        let _ = self.block(&prog.controls[k as usize].body);
    }

    fn parser(&mut self, p: u32) -> Result<(), u32> {
        let prog = self.prog;
        let parser = &prog.parsers[p as usize];
        let mut state = 0usize;
        let mut steps = 0u32;
        loop {
            let Some(s) = parser.states.get(state) else { return Err(self.sw.errs.no_match) };
            self.sw.tr(|| format!("parser {}: state {}", parser.name, s.name));
            if let Flow::Reject(e) = self.block(&s.body) {
                return Err(e);
            }
            if let Some(e) = self.pending.take() {
                return Err(e);
            }
            let next = match &s.next {
                Trans::Goto(n) => *n,
                Trans::Select(keys, cases) => {
                    let mut vals = [0u128; 16];
                    let mut big = Vec::new();
                    for (i, (k, _)) in keys.iter().enumerate() {
                        let v = self.ev(k);
                        if i < 16 {
                            vals[i] = v;
                        } else {
                            big.push(v);
                        }
                    }
                    if let Some(e) = self.pending.take() {
                        return Err(e);
                    }
                    let val = |i: usize| if i < 16 { vals[i] } else { big[i - 16] };
                    let found = cases.iter().find(|(sets, _)| {
                        sets.iter().enumerate().all(|(i, ks)| match ks {
                            KeySet::Any => true,
                            KeySet::Mask(v, m) => val(i) & m == *v,
                            KeySet::Range(lo, hi) => *lo <= val(i) && val(i) <= *hi,
                            KeySet::ValueSet(vs) => self.sw.value_sets[*vs as usize]
                                .iter()
                                .any(|(v, m)| val(i) & m == *v),
                        })
                    });
                    match found {
                        Some((_, n)) => *n,
                        // BMv2 (with p4c's simple_switch back end) ends the parse without an
                        // error when no case matches and there is no default, where the spec
                        // says reject with NoMatch; snic does what the target does.
                        None => Next::Accept,
                    }
                }
            };
            match next {
                Next::Accept => return Ok(()),
                Next::Reject => {
                    let e = get(self.f, self.prog.std.parser_error) as u32;
                    return Err(e);
                }
                Next::State(i) => state = i as usize,
            }
            steps += 1;
            if steps > MAX_PARSER_STEPS {
                return Err(self.sw.errs.timeout);
            }
        }
    }

    /// Apply a table: (hit, action index in the table's list, flow of the action).
    fn apply(&mut self, t: u32) -> (bool, u32, Flow) {
        loop {
            if let Some(r) = self.apply_once(t) {
                return r;
            }
        }
    }

    /// [`Exec::apply`], or `None` after deleting an expired `AUTO_DELETE` entry the lookup
    /// found (the lookup is then made again without it; each round deletes one entry).
    fn apply_once(&mut self, t: u32) -> Option<(bool, u32, Flow)> {
        let ti = t as usize;
        let mut key = core::mem::take(&mut self.sw.key);
        key.clear();
        let nkeys = self.prog.tables[ti].keys.len();
        for k in 0..nkeys {
            let prog = self.prog;
            let v = self.ev(&prog.tables[ti].keys[k].ex);
            key.push(v);
        }
        let len = get(self.f, self.prog.std.packet_length) as u64;
        let mut matched = None;
        // The common case writes the entry's data straight into the action's parameter slots
        // while the entry is borrowed: no copy of the arguments.
        enum Chosen {
            Direct(u32),
            Indirect(Indirect),
            DefaultIndirect(Indirect),
            /// An entry idle past its time to live in an `AUTO_DELETE` table.
            Expired(EntryHandle),
        }
        let (mut hit, chosen) = {
            let prog = self.prog;
            let sw = &mut *self.sw;
            let f = &mut *self.f;
            let idle = prog.tables[ti].idle;
            match sw.tables[ti].table.lookup(&key) {
                Some((h, e)) if idle == IdleTimeout::AutoDelete && e.idle.expired(sw.now_ns) => {
                    (false, Chosen::Expired(h))
                }
                Some((h, e)) => {
                    matched = Some(h.to_raw());
                    if idle != IdleTimeout::None {
                        e.idle.last_hit.set(sw.now_ns);
                        if matches!(prog.arch, Arch::V1Model) {
                            e.idle.restart(sw.now_ns);
                        }
                    }
                    if prog.tables[ti].direct_counter.is_some() {
                        let (p, b) = e.counter.get();
                        e.counter.set((p + 1, b + len));
                    }
                    if let Some(m) = &e.meter
                        && let Some(mi) = prog.tables[ti].direct_meter
                    {
                        let c = m.borrow_mut().execute(sw.now_ns, len);
                        sw.meter_last[mi as usize] = u128::from(c.value());
                    }
                    match e.indirect {
                        None => {
                            write_data(prog, ti, &e.call, f);
                            (true, Chosen::Direct(e.call.action))
                        }
                        Some(ind) => (true, Chosen::Indirect(ind)),
                    }
                }
                None => match (sw.default_indirect[ti], &sw.tables[ti].default) {
                    (Some(ind), _) => (false, Chosen::DefaultIndirect(ind)),
                    (None, Some(d)) => {
                        write_data(prog, ti, d, f);
                        (false, Chosen::Direct(d.action))
                    }
                    (None, None) => (false, Chosen::Direct(0)),
                },
            }
        };
        let action = match chosen {
            Chosen::Expired(h) => {
                // Deleted now, and the lookup runs again without it.
                self.sw.key = key;
                if self.sw.tables[ti].table.delete(h).is_ok() {
                    self.sw.stats.expired += 1;
                    return None;
                }
                // Not reachable (the lookup just found it); a miss rather than a loop.
                let c = self.table_default(ti);
                write_data(self.prog, ti, &c, self.f);
                let fl = self.run_action(ti, c.action);
                return Some((false, c.action, fl));
            }
            Chosen::Direct(a) => a,
            Chosen::Indirect(ind) | Chosen::DefaultIndirect(ind) => {
                let c = match self.resolve_indirect(ti, ind) {
                    Some(c) => Some(c),
                    None => {
                        hit = false;
                        Some(self.table_default(ti))
                    }
                };
                let c = c.unwrap_or(ActionCall { action: 0, args: Vec::new() });
                write_data(self.prog, ti, &c, self.f);
                c.action
            }
        };
        if self.sw.trace.is_some() {
            let prog = self.prog;
            let tn = prog.tables[ti].name.clone();
            let ks: Vec<String> = prog.tables[ti]
                .keys
                .iter()
                .zip(&key)
                .map(|(k, v)| format!("{} = 0x{:x}", k.name, v))
                .collect();
            let aid = prog.tables[ti].actions.get(action as usize).map(|a| a.action as usize);
            let an = aid.map(|a| prog.actions[a].name.clone()).unwrap_or_default();
            let args: Vec<String> = aid
                .map(|a| {
                    prog.actions[a]
                        .params
                        .iter()
                        .filter(|p| p.data)
                        .map(|p| format!("0x{:x}", get(self.f, p.slot)))
                        .collect()
                })
                .unwrap_or_default();
            let line = format!(
                "table {tn}: key {{{}}} {} action {an}({})",
                ks.join(", "),
                match matched {
                    Some(h) if hit => format!("hit entry {h}"),
                    Some(h) => format!("hit entry {h} (empty group: default)"),
                    None => "miss".to_string(),
                },
                args.join(", ")
            );
            self.sw.tr(|| line);
        }
        self.sw.key = key;
        set(self.f, self.prog.tables[ti].hit_slot, u128::from(hit));
        set(self.f, self.prog.tables[ti].action_slot, u128::from(action));
        let saved = self.applying.replace((ti, matched.filter(|_| hit).map(EntryHandle::from_raw)));
        let fl = self.run_action(ti, action);
        self.applying = saved;
        Some((hit, action, fl))
    }

    fn table_default(&mut self, ti: usize) -> ActionCall {
        if let Some(ind) = self.sw.default_indirect[ti]
            && let Some(c) = self.resolve_indirect(ti, ind)
        {
            return c;
        }
        self.sw.tables[ti].default.clone().unwrap_or(ActionCall { action: 0, args: Vec::new() })
    }

    /// The action a member or group names, as the table's action index and arguments; a
    /// group's member is chosen by the selector's hash of the selector keys.
    fn resolve_indirect(&mut self, ti: usize, ind: Indirect) -> Option<ActionCall> {
        let prog = self.prog;
        let inst = prog.tables[ti].implementation? as usize;
        let member = match ind {
            Indirect::Member(m) => m,
            Indirect::Group(g) => {
                let n = self.sw.profiles[inst].groups.get(&g)?.len();
                if n == 0 {
                    return None;
                }
                let h = match prog.instances[inst].kind {
                    InstanceKind::ActionSelector { algo, .. } => {
                        let mut buf = core::mem::take(&mut self.sw.scratch);
                        buf.clear();
                        self.leaves(&prog.tables[ti].selector_keys, &mut buf);
                        let calc = Calculation::new(HashAlgorithm::ALL[(algo as usize).min(7)]);
                        let r = self.next_random();
                        let h = calc.compute(buf.finish(), &mut move || r);
                        self.sw.scratch = buf;
                        h
                    }
                    _ => 0,
                };
                self.sw.profiles[inst].groups.get(&g)?[(h % n as u64) as usize]
            }
        };
        let (action, args) = self.sw.profiles[inst].members.get(&member)?.clone();
        let idx = prog.tables[ti].actions.iter().position(|a| a.action == action)?;
        Some(ActionCall { action: idx as u32, args })
    }

    /// The idle state of the entry whose action runs, in a table with idle timeouts.
    fn hit_idle(&self) -> Option<&IdleState> {
        let (ti, Some(h)) = self.applying? else { return None };
        if self.prog.tables[ti].idle == IdleTimeout::None {
            return None;
        }
        self.sw.tables[ti].table.get(h).map(|e| &e.action().idle)
    }

    /// PNA `add_entry` in the default action of an `add_on_miss` table: an entry keyed by the
    /// table's key values of this lookup. False outside such an action, for an action the
    /// table does not list, and when the table is full.
    fn add_entry(&mut self, action: u32, args: &[Ex], profile: &Ex) -> bool {
        let Some((ti, None)) = self.applying else { return false };
        let prog = self.prog;
        let t = &prog.tables[ti];
        if !t.add_on_miss {
            return false;
        }
        let Some(idx) = t.actions.iter().position(|a| a.action == action) else { return false };
        let params: Vec<u32> = prog.actions[action as usize]
            .params
            .iter()
            .filter(|p| p.data)
            .map(|p| p.width)
            .collect();
        let mut vals = Vec::with_capacity(args.len());
        for (a, w) in args.iter().zip(params) {
            vals.push(self.ev(a) & mask(w));
        }
        let p = (self.ev(profile) & 0xff) as usize;
        let matches: Vec<FieldMatch> = t
            .keys
            .iter()
            .zip(&self.sw.key)
            .map(|(k, &v)| match k.kind {
                MatchKind::Exact => FieldMatch::Exact(v),
                MatchKind::Ternary => FieldMatch::Ternary { value: v, mask: mask(k.width) },
                MatchKind::Lpm => FieldMatch::Lpm { value: v, len: k.width },
                MatchKind::Range => FieldMatch::Range { lo: v, hi: v },
                MatchKind::Optional => FieldMatch::Optional(Some(v)),
            })
            .collect();
        let call = ActionCall { action: idx as u32, args: vals };
        let ttl = (t.idle != IdleTimeout::None).then(|| self.sw.expire_profiles[p]);
        let now = self.sw.now_ns;
        let r = self.sw.add_entry(ti, matches, None, call);
        let Ok(h) = r else {
            self.sw.tr(|| format!("add_entry: {}: not added", t.name));
            return false;
        };
        if let Some(e) = self.sw.tables[ti].table.get(EntryHandle::from_raw(h)) {
            e.action().idle.ttl.set(ttl);
            e.action().idle.restart(now);
        }
        self.sw.stats.learned += 1;
        self.sw.tr(|| format!("add_entry: {}: entry {h}", t.name));
        true
    }

    /// Run the table's action `action` (its data parameters already written).
    fn run_action(&mut self, ti: usize, action: u32) -> Flow {
        let prog = self.prog;
        let Some(ta) = prog.tables[ti].actions.get(action as usize) else {
            return Flow::Next;
        };
        for s in &ta.bound {
            let _ = self.st(s);
        }
        match self.block(&prog.actions[ta.action as usize].body) {
            Flow::Exit => Flow::Exit,
            _ => Flow::Next,
        }
    }

    /// A field list leaf's value, or `None` when it belongs to an invalid header (BMv2 leaves
    /// those fields out).
    #[inline]
    fn leaf_value(&mut self, l: &Leaf) -> Option<u128> {
        if let Some(v) = &l.valid
            && self.load(v) == 0
        {
            return None;
        }
        Some(match &l.ex {
            Ex::Load(p) => self.load(p),
            ex => self.ev(ex),
        })
    }

    fn leaves(&mut self, data: &[Leaf], buf: &mut BitWriter) {
        for l in data {
            if let Some(v) = self.leaf_value(l) {
                buf.push(v, l.width);
            }
        }
    }

    /// RFC 1071's checksum of the leaves' bit string (zero-padded to whole 16-bit words), the
    /// fields of invalid headers left out: what `csum16` gives over the same bytes.
    fn csum16_leaves(&mut self, data: &[Leaf]) -> u16 {
        let mut acc: u64 = 0;
        let mut nacc: u32 = 0;
        let mut sum: u64 = 0;
        for l in data {
            let Some(v) = self.leaf_value(l) else { continue };
            let w = l.width;
            let v = v & mask(w);
            // Feed at most 48 bits at a time so the 64-bit accumulator (under 16 bits between
            // feeds) never overflows.
            #[inline(always)]
            fn feed(acc: &mut u64, nacc: &mut u32, sum: &mut u64, v: u64, w: u32) {
                *acc = (*acc << w) | v;
                *nacc += w;
                while *nacc >= 16 {
                    *nacc -= 16;
                    *sum += (*acc >> *nacc) & 0xffff;
                }
                *acc &= (1u64 << *nacc) - 1;
            }
            if w <= 48 {
                feed(&mut acc, &mut nacc, &mut sum, v as u64, w);
            } else {
                let mut rem = w;
                while rem > 0 {
                    let take = if rem % 32 == 0 { 32 } else { rem % 32 };
                    rem -= take;
                    let part = ((v >> rem) as u64) & ((1u64 << take) - 1);
                    feed(&mut acc, &mut nacc, &mut sum, part, take);
                }
            }
        }
        if nacc > 0 {
            sum += (acc << (16 - nacc)) & 0xffff;
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.sw.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.sw.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn extract(
        &mut self,
        hdr: &Place,
        layout: u32,
        varbits: Option<&Ex>,
        next_of: &Option<(Place, u32, u32, u32)>,
        union: &[(i32, u32)],
    ) -> Result<(), u32> {
        let base = match next_of {
            Some((sp, count, stride, member)) => {
                let Some(s) = self.slot(sp) else { return Err(self.sw.errs.stack_oob) };
                let ni = self.f[s];
                if ni >= u128::from(*count) {
                    return Err(self.sw.errs.stack_oob);
                }
                s + 1 + ni as usize * *stride as usize + *member as usize
            }
            None => match self.slot(hdr) {
                Some(s) => s,
                None => return Err(self.sw.errs.stack_oob),
            },
        };
        let lv = self.prog.layouts[layout as usize].varbit;
        let fixed = self.prog.layouts[layout as usize].fixed_bits;
        let vb = match (varbits, lv) {
            (Some(e), Some((_, max))) => {
                let n = self.ev(e);
                if n > u128::from(max) {
                    return Err(self.sw.errs.header_too_short);
                }
                n as usize
            }
            _ => 0,
        };
        let total = fixed as usize + vb;
        if self.cursor + total > self.pkt.len() * 8 {
            return Err(self.sw.errs.packet_too_short);
        }
        let mut at = self.cursor;
        let prog = self.prog;
        let l = &prog.layouts[layout as usize];
        if l.fast && at.is_multiple_of(8) {
            // Whole bytes at a byte boundary: every field through a 16-byte window.
            let start = at / 8;
            let n = (l.fixed_bits / 8) as usize;
            // Read 16-byte windows straight from the packet when they fit, else from a copy
            // padded with zeros.
            let mut buf = [0u8; 80];
            let src: &[u8] = if self.pkt.len() >= start + n + 16 {
                &self.pkt[start..]
            } else {
                buf[..n].copy_from_slice(&self.pkt[start..start + n]);
                &buf
            };
            for ((off, w), bo) in l.fields.iter().zip(&l.bit_offs) {
                let b = (bo / 8) as usize;
                let win = u128::from_be_bytes(src[b..b + 16].try_into().unwrap_or([0; 16]));
                self.f[base + *off as usize] =
                    if *w == 0 { 0 } else { (win << (bo % 8)) >> (128 - w) };
            }
            self.f[base] = 1;
            self.invalidate_siblings(base, union);
            self.cursor = at + n * 8;
            if let Some((sp, _, _, _)) = next_of
                && let Some(s) = self.slot(sp)
            {
                self.f[s] += 1;
            }
            return Ok(());
        }
        for (i, (off, w)) in l.fields.iter().enumerate() {
            let s = base + *off as usize;
            if l.varbit.is_some_and(|v| v.0 == i) {
                self.f[s] = vb as u128;
                let mut rem = vb;
                let mut k = 1;
                while rem > 0 {
                    let take = rem.min(128);
                    self.f[s + k] = get_bits(self.pkt, at, take as u32);
                    at += take;
                    rem -= take;
                    k += 1;
                }
                continue;
            }
            self.f[s] = get_bits(self.pkt, at, *w);
            at += *w as usize;
        }
        self.f[base] = 1;
        self.invalidate_siblings(base, union);
        self.cursor = at;
        if let Some((sp, _, _, _)) = next_of
            && let Some(s) = self.slot(sp)
        {
            self.f[s] += 1;
        }
        Ok(())
    }

    /// The other members of a header union become invalid.
    fn invalidate_siblings(&mut self, base: usize, union: &[(i32, u32)]) {
        for (off, _) in union {
            let j = (base as i64 + i64::from(*off)) as usize;
            if let Some(v) = self.f.get_mut(j) {
                *v = 0;
            }
        }
    }

    fn emit(&mut self, base: usize, shape: &Shape) {
        match shape {
            Shape::Header(l) => {
                if self.f.get(base).copied().unwrap_or(0) == 0 {
                    return;
                }
                let l = &self.prog.layouts[*l as usize];
                for (i, (off, w)) in l.fields.iter().enumerate() {
                    let s = base + *off as usize;
                    if l.varbit.is_some_and(|v| v.0 == i) {
                        let mut rem = self.f[s] as usize;
                        let mut k = 1;
                        while rem > 0 {
                            let take = rem.min(128);
                            self.out.push(self.f[s + k], take as u32);
                            rem -= take;
                            k += 1;
                        }
                        continue;
                    }
                    self.out.push(self.f[s], *w);
                }
            }
            Shape::Union(ms) | Shape::Struct(ms) => {
                for (off, s) in ms {
                    self.emit(base + *off as usize, s);
                }
            }
            Shape::Stack { count, stride, elem } => {
                for i in 0..*count {
                    self.emit(base + 1 + (i * stride) as usize, elem);
                }
            }
            Shape::Scalar => {}
        }
    }

    fn ext(&mut self, x: &ExternCall) -> Flow {
        let std = self.prog.std;
        match x {
            ExternCall::Extract { hdr, layout, varbits, next_of, union } => {
                if let Err(e) = self.extract(hdr, *layout, varbits.as_ref(), next_of, union) {
                    return Flow::Reject(e);
                }
            }
            ExternCall::LookaheadInto { dst, fields, valid } => {
                let total: usize = fields.iter().map(|f| f.1 as usize).sum();
                if self.cursor + total > self.pkt.len() * 8 {
                    self.pending = Some(self.sw.errs.packet_too_short);
                    return Flow::Next;
                }
                let Some(b) = self.slot(dst) else { return Flow::Next };
                let mut at = self.cursor;
                for (off, w) in fields {
                    self.f[b + *off as usize] = get_bits(self.pkt, at, *w);
                    at += *w as usize;
                }
                if let Some(v) = valid {
                    self.f[b + *v as usize] = 1;
                }
            }
            ExternCall::Advance(e) => {
                let n = self.ev(e) as usize;
                if self.cursor + n > self.pkt.len() * 8 {
                    return Flow::Reject(self.sw.errs.packet_too_short);
                }
                self.cursor += n;
            }
            ExternCall::Verify(c, e) => {
                if self.ev(c) == 0 {
                    let e = self.ev(e) as u32;
                    return Flow::Reject(e);
                }
            }
            ExternCall::Emit(p, shape) => {
                if let Some(b) = self.slot(p) {
                    self.emit(b, shape);
                }
            }
            ExternCall::SendToPort(p) => {
                let p = self.ev(p) as u32;
                self.flags.pna_dest = Some(p);
            }
            ExternCall::DropPacket => self.flags.pna_dest = None,
            ExternCall::AddEntry { action, args, profile, dst } => {
                let ok = self.add_entry(*action, args, profile);
                set(self.f, *dst, u128::from(ok));
            }
            ExternCall::CsumAdd { state, data, subtract } => {
                let sum = u32::from(!self.csum16_leaves(data));
                let add = if *subtract { !sum & 0xffff } else { sum };
                let mut v = get(self.f, *state) as u32 + add;
                while v > 0xffff {
                    v = (v & 0xffff) + (v >> 16);
                }
                set(self.f, *state, u128::from(v));
            }
            ExternCall::RestartExpireTimer => {
                let now = self.sw.now_ns;
                if let Some(i) = self.hit_idle() {
                    i.restart(now);
                }
            }
            ExternCall::SetEntryExpireTime(p) => {
                let p = (self.ev(p) & 0xff) as usize;
                let ttl = self.sw.expire_profiles[p];
                let now = self.sw.now_ns;
                if let Some(i) = self.hit_idle() {
                    i.ttl.set(Some(ttl));
                    i.restart(now);
                }
            }
            ExternCall::MarkToDrop => {
                set(self.f, std.egress_spec, u128::from(DROP_PORT));
                set(self.f, std.mcast_grp, 0);
            }
            ExternCall::RegisterRead(r, dst, i) => {
                let i = self.ev(i) as usize;
                let v = self.sw.registers[*r as usize].get(i).copied().unwrap_or(0);
                if let Some(s) = self.slot(dst) {
                    self.f[s] = v;
                }
            }
            ExternCall::RegisterWrite(r, i, v) => {
                let i = self.ev(i) as usize;
                let v = self.ev(v);
                if let Some(c) = self.sw.registers[*r as usize].get_mut(i) {
                    *c = v;
                }
            }
            ExternCall::Count(c, i) => {
                let i = self.ev(i) as usize;
                let len = get(self.f, std.packet_length) as u64;
                if let Some(c) = self.sw.counters[*c as usize].get_mut(i) {
                    c.0 += 1;
                    c.1 += len;
                }
            }
            ExternCall::DirectCount(_) => {}
            ExternCall::Meter(m, i, dst, w) => {
                let i = self.ev(i) as usize;
                let len = get(self.f, std.packet_length) as u64;
                let now = self.sw.now_ns;
                let c = self.sw.meters[*m as usize]
                    .get_mut(i)
                    .map_or(0, |m| m.execute(now, len).value());
                if let Some(s) = self.slot(dst) {
                    self.f[s] = u128::from(c) & mask(*w);
                }
            }
            ExternCall::DirectMeterRead(m, dst, w) => {
                let v = self.sw.meter_last[*m as usize];
                if let Some(s) = self.slot(dst) {
                    self.f[s] = v & mask(*w);
                }
            }
            ExternCall::Hash { calc, dst, width, algo: _, base, data, max } => {
                let mut buf = core::mem::take(&mut self.sw.scratch);
                buf.clear();
                self.leaves(data, &mut buf);
                let b = self.ev(base) as u64;
                let m = self.ev(max) as u64;
                let r = self.next_random();
                let mut rng = move || r;
                let h = self.sw.calcs[*calc as usize].hash(
                    buf.finish(),
                    b,
                    m,
                    (*width).min(64),
                    &mut rng,
                );
                self.sw.scratch = buf;
                if let Some(s) = self.slot(dst) {
                    self.f[s] = u128::from(h) & mask(*width);
                }
            }
            ExternCall::Checksum {
                calc,
                field_valid,
                update,
                with_payload,
                cond,
                data,
                field,
                width,
                algo: _,
            } => {
                let c = self.ev(cond) != 0;
                if !c {
                    // Neither form does anything when the condition is false.
                    return Flow::Next;
                }
                let ci = *calc as usize;
                if !*with_payload && self.sw.calcs[ci].algorithm() == HashAlgorithm::Csum16 {
                    // The Internet checksum straight from the fields, no buffer.
                    let sum = self.csum16_leaves(data);
                    if *update {
                        if let Some(s) = self.slot(field) {
                            self.f[s] = u128::from(sum) & mask(*width);
                        }
                    } else {
                        let target_valid = match field_valid {
                            Some(p) => self.load(p) != 0,
                            None => true,
                        };
                        if target_valid && u128::from(sum) != self.load(field) {
                            set(self.f, std.checksum_error, 1);
                        }
                    }
                    return Flow::Next;
                }
                let mut buf = core::mem::take(&mut self.sw.scratch);
                buf.clear();
                self.leaves(data, &mut buf);
                if *with_payload {
                    let pl = self.pkt_payload();
                    buf.extend_bytes(pl);
                }
                let r = self.next_random();
                let mut rng = move || r;
                let ci = *calc as usize;
                if *update {
                    let v = algo::update_checksum(
                        &self.sw.calcs[ci],
                        c,
                        buf.finish(),
                        *width,
                        &mut rng,
                    );
                    self.sw.scratch = buf;
                    if let Some(v) = v
                        && let Some(s) = self.slot(field)
                    {
                        self.f[s] = u128::from(v);
                    }
                } else {
                    let target_valid = match field_valid {
                        Some(p) => self.load(p) != 0,
                        None => true,
                    };
                    let cur = self.load(field) as u64;
                    let ok = algo::verify_checksum(
                        &self.sw.calcs[ci],
                        c,
                        target_valid,
                        buf.finish(),
                        cur,
                        &mut rng,
                    );
                    self.sw.scratch = buf;
                    if !ok {
                        set(self.f, std.checksum_error, 1);
                    }
                }
            }
            ExternCall::Checksum16Get { dst, data } => {
                let mut buf = core::mem::take(&mut self.sw.scratch);
                buf.clear();
                self.leaves(data, &mut buf);
                let v = algo::csum16(buf.finish());
                self.sw.scratch = buf;
                if let Some(s) = self.slot(dst) {
                    self.f[s] = u128::from(v);
                }
            }
            ExternCall::Random(dst, w, lo, hi) => {
                let lo = self.ev(lo);
                let hi = self.ev(hi);
                let r = u128::from(self.next_random());
                let v = if hi <= lo {
                    lo
                } else {
                    match (hi - lo).checked_add(1) {
                        Some(span) => lo + r % span,
                        None => r,
                    }
                };
                if let Some(s) = self.slot(dst) {
                    self.f[s] = v & mask(*w);
                }
            }
            ExternCall::Clone { e2e, session, list } => {
                let s = self.ev(session) as u32;
                self.flags.clone = Some((*e2e, s, *list));
            }
            ExternCall::Resubmit(l) => self.flags.resubmit = Some(*l),
            ExternCall::Recirculate(l) => self.flags.recirculate = Some(*l),
            ExternCall::Truncate(l) => {
                let l = self.ev(l) as u32;
                self.flags.truncate = Some(l);
            }
            ExternCall::Digest(d, data) => {
                let vals: Vec<u128> = data.iter().map(|l| self.ev(&l.ex)).collect();
                self.sw.digests.push((*d, vals));
            }
            ExternCall::Assert(c) => {
                if self.ev(c) == 0 {
                    self.flags.assert_failed = true;
                    self.sw.tr(|| "assert failed".into());
                }
            }
        }
        Flow::Next
    }

    /// The packet's bytes after the headers: in a parser-side block the unparsed rest, in the
    /// deparser the payload.
    fn pkt_payload(&self) -> &[u8] {
        self.pkt.get(self.cursor.div_ceil(8)..).unwrap_or(&[])
    }
}
