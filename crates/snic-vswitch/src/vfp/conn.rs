//! Connections: the table of stateful and TCP flows, and what happens to them after their first
//! packet. A record keeps what its flows are compiled from (not the flows), both keys packed
//! (IPv4 keys in 28 bytes, IPv6 ones stored aside), with one index from either key to the
//! record; a TCP connection keeps its state ([`TcpConn`]) in a side slab. The slow path feeds
//! the copied SYN/FIN/RST segments to that state ([`SlowPath::on_tcp`]), stops counting a
//! connection against the half-open cap once it has been half-open too long, and removes
//! connections after time-wait or a reset ([`SlowPath::handle_timeout`]) and when the fast path
//! evicts one of their keys ([`SlowPath::on_evicted`]).
//!
//! It does not walk the policy ([`super::layer`]) or choose SNAT ports ([`super::snat`]); new
//! connections are opened by [`SlowPath::compile`].

use core::hash::BuildHasher;
use core::time::Duration;
use std::cmp::Reverse;

use hashbrown::{DefaultHashBuilder, HashTable};
use snic_time::Instant;
use snic_wire::stack::Layer;

use super::SlowPath;
use super::layer::Origin;
use crate::key::{Direction, FlowKey};
use crate::policy::Mac;
use crate::tcp::{TcpConn, TcpEvent};

/// Bits of [`PackedKey::flags`] above the [`KeyFlags`](crate::key::KeyFlags) ones.
const PACK_WIDE: u8 = 1 << 7;
/// The key has no outer addresses (both zero).
const PACK_NO_OUTER: u8 = 1 << 6;
/// No index (no TCP state).
pub(super) const NONE: u32 = u32::MAX;

/// A [`FlowKey`] in 28 bytes instead of 80: the addresses as IPv4 (every address of an IPv4
/// key is IPv4-mapped, and a plain packet's outer addresses are zero). A key with an IPv6
/// address is "wide": `addrs[0]` holds the index of the full key in [`Conns::wide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PackedKey {
    /// Inner source, inner destination, outer source, outer destination.
    addrs: [[u8; 4]; 4],
    vni: u32,
    src_port: u16,
    dst_port: u16,
    port: u16,
    proto: u8,
    /// The key's [`KeyFlags`](crate::key::KeyFlags), plus [`PACK_WIDE`] / [`PACK_NO_OUTER`].
    flags: u8,
}

/// The IPv4 address of an IPv4-mapped address.
fn unmap(a: &[u8; 16]) -> Option<[u8; 4]> {
    match a {
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, b0, b1, b2, b3] => Some([*b0, *b1, *b2, *b3]),
        _ => None,
    }
}

fn map4(a: [u8; 4]) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[10] = 0xff;
    m[11] = 0xff;
    m[12..].copy_from_slice(&a);
    m
}

impl PackedKey {
    /// The compact form, when every address is IPv4-mapped (outer ones may be both zero).
    fn pack(k: &FlowKey) -> Option<PackedKey> {
        if k.flags & (PACK_WIDE | PACK_NO_OUTER) != 0 || k.reserved != 0 {
            return None;
        }
        let (src, dst) = (unmap(&k.src)?, unmap(&k.dst)?);
        let (os, od, extra) = if k.outer_src == [0; 16] && k.outer_dst == [0; 16] {
            ([0; 4], [0; 4], PACK_NO_OUTER)
        } else {
            (unmap(&k.outer_src)?, unmap(&k.outer_dst)?, 0)
        };
        Some(PackedKey {
            addrs: [src, dst, os, od],
            vni: k.vni,
            src_port: k.src_port,
            dst_port: k.dst_port,
            port: k.port,
            proto: k.proto,
            flags: k.flags | extra,
        })
    }

    /// A wide key: the full key is `wide[index]`.
    fn wide(index: u32) -> PackedKey {
        PackedKey {
            addrs: [index.to_ne_bytes(), [0; 4], [0; 4], [0; 4]],
            vni: 0,
            src_port: 0,
            dst_port: 0,
            port: 0,
            proto: 0,
            flags: PACK_WIDE,
        }
    }

    fn wide_index(&self) -> Option<u32> {
        (self.flags & PACK_WIDE != 0).then(|| u32::from_ne_bytes(self.addrs[0]))
    }

    /// The key of a compact (not wide) form.
    fn unpack(&self) -> FlowKey {
        let [src, dst, os, od] = self.addrs;
        let (outer_src, outer_dst) =
            if self.flags & PACK_NO_OUTER != 0 { ([0; 16], [0; 16]) } else { (map4(os), map4(od)) };
        FlowKey {
            src: map4(src),
            dst: map4(dst),
            outer_src,
            outer_dst,
            vni: self.vni,
            src_port: self.src_port,
            dst_port: self.dst_port,
            port: self.port,
            proto: self.proto,
            flags: self.flags & !(PACK_WIDE | PACK_NO_OUTER),
            reserved: 0,
        }
    }
}

/// State of one connection: a stateful flow or a TCP flow.
///
/// It keeps what the flows are compiled from (the first packet's fields the walk reads and the
/// NAT binding), not the flows: a re-compile (a cache miss on a known key) walks the policy
/// again with the same binding and hash, which gives the same flows under the same policy, and
/// the current ones after a change. Keys are packed and the TCP state lives in a side slab
/// (only TCP connections have it), which keeps a connection record at 88 bytes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Conn {
    /// The forward key (the first packet's).
    pub(super) fwd: PackedKey,
    /// The key of the replies.
    pub(super) rev: PackedKey,
    pub(super) flow_hash: u64,
    pub(super) eth_src: Mac,
    pub(super) eth_dst: Mac,
    pub(super) ethertype: u16,
    /// SNAT port (meaningful when `snat_pool != NO_POOL`).
    pub(super) snat_port: u16,
    /// SNAT pool (index in `SlowPath::pools`), or `NO_POOL`.
    pub(super) snat_pool: u16,
    pub(super) tunnel: Option<Layer>,
    /// The replies are let through by this connection (else they meet their own policy).
    pub(super) stateful: bool,
    /// Index of the TCP state in `Conns::tcp`, or `NONE`.
    pub(super) tcp: u32,
}

/// The TCP part of a connection.
#[derive(Debug, Clone, Copy)]
pub(super) struct TcpSide {
    pub(super) tcp: TcpConn,
    /// Distinguishes this connection from earlier ones in the same slot (timers).
    pub(super) serial: u64,
    /// Removal scheduled (time-wait, reset).
    pub(super) expires: Option<Instant>,
    /// When the current half-open period ends (the timer that may presume it established).
    pub(super) half_open_until: Instant,
    /// Counted in the half-open gauge.
    pub(super) half_open: bool,
    /// Half-open for longer than `half_open_timeout`: presumed established.
    pub(super) presumed_open: bool,
}

/// The connection table: records in a slab (no allocation per record), one index from both
/// keys of each connection to its slot, the full keys of IPv6 connections and the TCP states
/// in side slabs.
///
/// An index entry is `slot << 1 | is_reply_key`; the key itself is read from the record, so an
/// entry costs 4 bytes. Invariants: at most one entry per key, and an entry's key is the one
/// its record holds at the position it names.
pub(super) struct Conns {
    pub(super) slots: Vec<Option<Conn>>,
    free: Vec<u32>,
    index: HashTable<u32>,
    /// The index's hash secret (random per table).
    seed: u64,
    wide: Vec<FlowKey>,
    wide_free: Vec<u32>,
    pub(super) tcp: Vec<TcpSide>,
    pub(super) tcp_free: Vec<u32>,
}

/// Slots fit an index entry (`slot << 1`).
const MAX_SLOTS: usize = 1 << 31;

pub(super) fn alloc<T>(v: &mut Vec<T>, free: &mut Vec<u32>, x: T) -> Option<u32> {
    if let Some(i) = free.pop()
        && let Some(s) = v.get_mut(i as usize)
    {
        *s = x;
        return Some(i);
    }
    let i = u32::try_from(v.len()).ok().filter(|&i| i != NONE)?;
    v.push(x);
    Some(i)
}

fn key_of(wide: &[FlowKey], p: &PackedKey) -> FlowKey {
    match p.wide_index() {
        Some(i) => wide.get(i as usize).copied().unwrap_or_default(),
        None => p.unpack(),
    }
}

fn entry_key(slots: &[Option<Conn>], wide: &[FlowKey], e: u32) -> Option<FlowKey> {
    let c = slots.get((e >> 1) as usize)?.as_ref()?;
    Some(key_of(wide, if e & 1 == 0 { &c.fwd } else { &c.rev }))
}

/// Cheap test of a compact key against a full one, before unpacking.
fn packed_is(wide: &[FlowKey], p: &PackedKey, k: &FlowKey) -> bool {
    if p.wide_index().is_none()
        && (p.src_port != k.src_port || p.dst_port != k.dst_port || p.port != k.port)
    {
        return false;
    }
    key_of(wide, p) == *k
}

fn entry_is(slots: &[Option<Conn>], wide: &[FlowKey], e: u32, k: &FlowKey) -> bool {
    slots
        .get((e >> 1) as usize)
        .and_then(Option::as_ref)
        .is_some_and(|c| packed_is(wide, if e & 1 == 0 { &c.fwd } else { &c.rev }, k))
}

impl Conns {
    pub(super) fn new() -> Conns {
        Conns {
            slots: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
            seed: DefaultHashBuilder::default().hash_one(0x5eed_u64),
            wide: Vec::new(),
            wide_free: Vec::new(),
            tcp: Vec::new(),
            tcp_free: Vec::new(),
        }
    }

    /// Room for one more record.
    pub(super) fn has_room(&self) -> bool {
        !self.free.is_empty() || self.slots.len() < MAX_SLOTS
    }

    pub(super) fn get(&self, slot: u32) -> Option<&Conn> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    pub(super) fn get_mut(&mut self, slot: u32) -> Option<&mut Conn> {
        self.slots.get_mut(slot as usize).and_then(Option::as_mut)
    }

    /// The TCP state of a connection.
    fn tcp(&self, slot: u32) -> Option<&TcpSide> {
        self.get(slot).and_then(|c| self.tcp.get(c.tcp as usize))
    }

    fn tcp_mut(&mut self, slot: u32) -> Option<&mut TcpSide> {
        let i = self.get(slot)?.tcp;
        self.tcp.get_mut(i as usize)
    }

    pub(super) fn key(&self, p: &PackedKey) -> FlowKey {
        key_of(&self.wide, p)
    }

    pub(super) fn fwd_key(&self, c: &Conn) -> FlowKey {
        self.key(&c.fwd)
    }

    fn rev_key(&self, c: &Conn) -> FlowKey {
        self.key(&c.rev)
    }

    /// The compact form of `k`, storing it in the wide slab when it has IPv6 addresses.
    pub(super) fn pack(&mut self, k: &FlowKey) -> Option<PackedKey> {
        match PackedKey::pack(k) {
            Some(p) => Some(p),
            None => alloc(&mut self.wide, &mut self.wide_free, *k).map(PackedKey::wide),
        }
    }

    pub(super) fn unpack_free(&mut self, p: &PackedKey) {
        if let Some(i) = p.wide_index() {
            self.wide_free.push(i);
        }
    }

    /// The slot of the connection `k` belongs to.
    pub(super) fn find(&self, k: &FlowKey) -> Option<u32> {
        if self.index.is_empty() {
            return None;
        }
        let h = k.hash_with(self.seed);
        self.index.find(h, |&e| entry_is(&self.slots, &self.wide, e, k)).map(|&e| e >> 1)
    }

    /// Point `k` (the forward or reply key of `slot`'s record) at `slot`.
    fn index_insert(&mut self, k: &FlowKey, slot: u32, reply: bool) {
        let h = k.hash_with(self.seed);
        let e = slot << 1 | u32::from(reply);
        let (slots, wide, seed) = (&self.slots, &self.wide, self.seed);
        match self.index.find_mut(h, |&x| entry_is(slots, wide, x, k)) {
            Some(x) => *x = e,
            None => {
                self.index.insert_unique(h, e, |&x| {
                    entry_key(slots, wide, x).map_or(0, |k| k.hash_with(seed))
                });
            }
        }
    }

    /// Forget `k` if it points at `slot`.
    fn index_remove(&mut self, k: &FlowKey, slot: u32) {
        let h = k.hash_with(self.seed);
        let (slots, wide) = (&self.slots, &self.wide);
        if let Ok(entry) = self.index.find_entry(h, |&x| entry_is(slots, wide, x, k))
            && *entry.get() >> 1 == slot
        {
            entry.remove();
        }
    }

    /// Store a record (its keys already packed) and index both keys.
    pub(super) fn insert(&mut self, conn: Conn) -> Option<u32> {
        let slot = alloc(&mut self.slots, &mut self.free, Some(conn))?;
        let (fwd, rev) = (self.fwd_key(&conn), self.rev_key(&conn));
        self.index_insert(&fwd, slot, false);
        self.index_insert(&rev, slot, true);
        Some(slot)
    }

    /// Replace the reply key of `slot` (the old one leaves the index if it pointed here).
    pub(super) fn set_rev(&mut self, slot: u32, rev: &FlowKey) -> bool {
        let Some(old) = self.get(slot).map(|c| c.rev) else { return false };
        let Some(packed) = self.pack(rev) else { return false };
        let old_key = self.key(&old);
        self.index_remove(&old_key, slot);
        self.unpack_free(&old);
        if let Some(c) = self.get_mut(slot) {
            c.rev = packed;
        }
        self.index_insert(rev, slot, true);
        true
    }

    /// Take a record out: its keys leave the index (where they point at it), its side
    /// entries are freed. Returns the record, its two keys, and its TCP state.
    fn remove(&mut self, slot: u32) -> Option<(Conn, FlowKey, FlowKey, Option<TcpSide>)> {
        let conn = *self.get(slot)?;
        let (fwd, rev) = (self.fwd_key(&conn), self.rev_key(&conn));
        self.index_remove(&fwd, slot);
        self.index_remove(&rev, slot);
        self.unpack_free(&conn.fwd);
        self.unpack_free(&conn.rev);
        let tcp = self.tcp.get(conn.tcp as usize).copied();
        if tcp.is_some() {
            self.tcp_free.push(conn.tcp);
        }
        if let Some(s) = self.slots.get_mut(slot as usize) {
            *s = None;
        }
        self.free.push(slot);
        Some((conn, fwd, rev, tcp))
    }
}

/// What a timer does when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum TimerKind {
    /// Remove the connection (time-wait over, or reset).
    Expire,
    /// Stop counting the connection as half-open.
    HalfOpen,
    /// Remove a connection carried over from another process that no packet has touched
    /// since (it has no cached flow whose idle aging would remove it).
    Idle,
}

impl SlowPath {
    /// The first packet of a connection, as the walk reads it.
    pub(super) fn origin(&self, c: &Conn) -> Origin {
        Origin {
            key: self.conns_tab.fwd_key(c),
            eth_src: c.eth_src,
            eth_dst: c.eth_dst,
            ethertype: c.ethertype,
            tunnel: c.tunnel,
            flow_hash: c.flow_hash,
        }
    }

    /// A copied TCP SYN/FIN/RST of a cached flow (`flags` = the TCP flags byte).
    pub fn on_tcp(&mut self, now: Instant, key: &FlowKey, flags: u8, removals: &mut Vec<FlowKey>) {
        removals.append(&mut self.pending);
        let Some(slot) = self.conns_tab.find(key) else {
            self.stats.tcp_untracked += 1;
            return;
        };
        let Some(conn) = self.conns_tab.get(slot) else { return };
        if conn.tcp == NONE {
            self.stats.tcp_untracked += 1;
            return;
        }
        let dir = if self.conns_tab.fwd_key(conn) == *key { Direction::Out } else { Direction::In };
        self.tcp_segment(now, slot, dir, flags);
        removals.append(&mut self.pending);
    }

    /// Feed one segment to a connection's TCP state; keeps the gauges and the timers (removal
    /// after time-wait or reset, half-open aging) in step with the state.
    pub(super) fn tcp_segment(
        &mut self,
        now: Instant,
        slot: u32,
        dir: Direction,
        flags: u8,
    ) -> TcpEvent {
        let (time_wait, half_open_timeout) = (self.cfg.time_wait, self.cfg.half_open_timeout);
        let Some(side) = self.conns_tab.tcp_mut(slot) else {
            return TcpEvent::None;
        };
        let tcp = &mut side.tcp;
        let was_half_open = tcp.is_half_open();
        let ev = tcp.on_segment(now, dir, flags);
        let is_half_open = tcp.is_half_open();
        let expires = tcp.expires(time_wait);
        let old = core::mem::replace(&mut side.expires, expires);
        let serial = side.serial;
        if ev == TcpEvent::Invalid {
            self.stats.tcp_invalid += 1;
        }
        if is_half_open && !was_half_open {
            // Reopened (a new SYN on the tuple after time-wait or reset).
            side.presumed_open = false;
            let t = now.saturating_add(half_open_timeout);
            side.half_open_until = t;
            self.timers.push(Reverse((t, slot, serial, TimerKind::HalfOpen)));
        }
        let counted = is_half_open && !side.presumed_open;
        match (core::mem::replace(&mut side.half_open, counted), counted) {
            (true, false) => self.half_open -= 1,
            (false, true) => self.half_open += 1,
            _ => {}
        }
        match (old, expires) {
            (None, Some(t)) => {
                self.time_wait += 1;
                self.timers.push(Reverse((t, slot, serial, TimerKind::Expire)));
            }
            (Some(_), None) => self.time_wait -= 1,
            (Some(a), Some(b)) if a != b => {
                self.timers.push(Reverse((b, slot, serial, TimerKind::Expire)))
            }
            _ => {}
        }
        self.prune_timers();
        ev
    }

    /// A packet of `key`'s connection was served by the slow path alone, not cached (a
    /// fast-path restart window): no cached flow's idle aging will remove the connection, so
    /// the slow path ages it, as a connection carried from another process, until a packet
    /// compiles it into the flow table again. Its deadline moves only when it gains at least
    /// a second (one timer per second of a connection's traffic, not per packet), so it goes
    /// after at least `idle_timeout - 1 s` without packets.
    pub fn served_uncached(&mut self, now: Instant, key: &FlowKey, idle_timeout: Duration) {
        let Some(slot) = self.conns_tab.find(key) else { return };
        let deadline = now.saturating_add(idle_timeout);
        let moves = match self.adopted.get(&slot) {
            Some(&d) => deadline.saturating_duration_since(d) >= Duration::from_secs(1),
            None => true,
        };
        if moves {
            self.adopted.insert(slot, deadline);
            self.timers.push(Reverse((deadline, slot, 0, TimerKind::Idle)));
        }
    }

    /// The fast path cached a flow of `key`'s connection (after [`SlowPath::compile`]): from
    /// now on the flow table's idle aging removes it, not the slow path's.
    pub fn cached(&mut self, key: &FlowKey) {
        if self.adopted.is_empty() {
            return;
        }
        if let Some(slot) = self.conns_tab.find(key) {
            self.adopted.remove(&slot);
        }
    }

    /// The fast path aged out or evicted `key`'s entry: its connection goes, and the other
    /// key of the connection is pushed to `removals`.
    pub fn on_evicted(&mut self, key: &FlowKey, removals: &mut Vec<FlowKey>) {
        removals.append(&mut self.pending);
        let Some(slot) = self.conns_tab.find(key) else { return };
        // The evicted key itself is already gone from the cache.
        self.remove_conn(slot, Some(key), removals);
    }

    /// Time-wait expiry and other timers; pushes the keys whose cached flows must be removed.
    /// Spurious calls are no-ops.
    pub fn handle_timeout(&mut self, now: Instant, removals: &mut Vec<FlowKey>) {
        removals.append(&mut self.pending);
        while let Some(&Reverse((t, slot, serial, kind))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            if kind == TimerKind::Idle {
                if self.adopted.get(&slot) == Some(&t) {
                    self.remove_conn(slot, None, removals);
                }
                continue;
            }
            let Some(side) = self.conns_tab.tcp_mut(slot) else {
                continue;
            };
            if side.serial != serial {
                continue;
            }
            match kind {
                TimerKind::Expire => {
                    if side.expires.is_some_and(|e| e <= now) {
                        self.remove_conn(slot, None, removals);
                    }
                }
                TimerKind::HalfOpen => {
                    if side.half_open && side.half_open_until == t {
                        side.half_open = false;
                        side.presumed_open = true;
                        self.half_open -= 1;
                    }
                }
                // Handled above (an adopted connection may have no TCP state).
                TimerKind::Idle => {}
            }
        }
        self.prune_timers();
    }

    /// True while a timer entry still refers to a pending deadline of its connection.
    fn timer_live(&self, t: Instant, slot: u32, serial: u64, kind: TimerKind) -> bool {
        if kind == TimerKind::Idle {
            return self.adopted.get(&slot) == Some(&t);
        }
        self.conns_tab.tcp(slot).is_some_and(|c| {
            c.serial == serial
                && match kind {
                    TimerKind::Expire => c.expires.is_some(),
                    TimerKind::HalfOpen => c.half_open && c.half_open_until == t,
                    TimerKind::Idle => false,
                }
        })
    }

    /// Drop stale timers from the top of the heap, so `poll_timeout` names a real deadline.
    pub(super) fn prune_timers(&mut self) {
        while let Some(&Reverse((t, slot, serial, kind))) = self.timers.peek() {
            if self.timer_live(t, slot, serial, kind) {
                break;
            }
            self.timers.pop();
        }
    }

    /// Timers pending (live or stale), for tests that bound their growth.
    #[cfg(test)]
    pub(crate) fn timers_pending(&self) -> usize {
        self.timers.len()
    }

    /// The next time `handle_timeout` has work (`Instant::ZERO` when removals are pending).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.pending.is_empty() {
            return Some(Instant::ZERO);
        }
        self.timers.peek().map(|Reverse((t, ..))| *t)
    }

    /// Drop a connection: both keys to `removals`, its SNAT port freed, gauges updated.
    /// `skip` is a key not to push (already gone from the cache).
    pub(super) fn remove_conn(
        &mut self,
        slot: u32,
        skip: Option<&FlowKey>,
        removals: &mut Vec<FlowKey>,
    ) {
        let Some((conn, fwd, rev, tcp)) = self.conns_tab.remove(slot) else { return };
        self.adopted.remove(&slot);
        for k in [fwd, rev] {
            if skip != Some(&k) {
                removals.push(k);
            }
        }
        if let Some(b) = self.snat_of(&conn) {
            self.free_snat(b);
        }
        if let Some(side) = tcp {
            if side.half_open {
                self.half_open -= 1;
            }
            if side.expires.is_some() {
                self.time_wait -= 1;
            }
        }
        self.conns -= 1;
        self.stats.closed += 1;
        self.prune_timers();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{LayerKind, Mapping};
    use crate::tcp;
    use crate::vfp::snat::NO_POOL;
    use crate::vfp::testutil::*;
    use crate::vfp::{DenyReason, SlowPathConfig};
    use core::net::IpAddr;
    use core::time::Duration;
    use proptest::prelude::*;
    use std::sync::Arc;

    #[test]
    fn tcp_lifecycle_ends_in_removal_of_both_keys() {
        let mut sp = slow(stateful_policy());
        let t0 = Instant::from_secs(10);
        let syn = tcp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 40000, 80, tcp::flags::SYN);
        let (k, v) = compile(&mut sp, t0, &syn, A_PORT);
        let rk = forward(v).1.expect("stateful").key;
        assert_eq!(sp.stats().half_open, 1);
        let mut rem = Vec::new();
        use tcp::flags::{ACK, FIN, SYN};
        sp.on_tcp(t0, &rk, SYN | ACK, &mut rem);
        assert_eq!(sp.stats().half_open, 1);
        sp.on_tcp(t0, &k, ACK, &mut rem);
        assert_eq!(sp.stats().half_open, 0, "established");
        sp.on_tcp(t0, &k, FIN | ACK, &mut rem);
        assert_eq!(sp.poll_timeout(), None);
        let t1 = t0 + Duration::from_millis(5);
        sp.on_tcp(t1, &rk, FIN | ACK, &mut rem);
        assert!(rem.is_empty());
        assert_eq!(sp.stats().time_wait, 1);
        let due = t1 + SlowPathConfig::default().time_wait;
        assert_eq!(sp.poll_timeout(), Some(due));
        sp.handle_timeout(Instant::from_nanos(due.as_nanos() - 1), &mut rem);
        assert!(rem.is_empty());
        sp.handle_timeout(due, &mut rem);
        rem.sort_by_key(|k| k.port);
        assert_eq!(rem, vec![rk, k]);
        let s = sp.stats();
        assert_eq!((s.conns, s.time_wait, s.half_open, s.closed, s.tcp_invalid), (0, 0, 0, 1, 0));
        assert_eq!(sp.poll_timeout(), None);
        // Spurious calls are no-ops.
        sp.handle_timeout(due + Duration::from_secs(5), &mut rem);
        assert_eq!(rem.len(), 2);
    }

    /// An IPv6 header from `src` to `dst` around `payload`.
    fn ipv6(src: [u8; 16], dst: [u8; 16], proto: u8, payload: &[u8]) -> Vec<u8> {
        let mut h = vec![0u8; 40];
        h[0] = 0x60;
        h[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
        h[6] = proto;
        h[7] = 64;
        h[8..24].copy_from_slice(&src);
        h[24..40].copy_from_slice(&dst);
        h.extend_from_slice(payload);
        h
    }

    /// IPv6 connections keep their full keys aside (wide keys): the reply is compiled from the
    /// connection, the lifecycle ends in removal of both keys, and the aside slots are freed.
    #[test]
    fn ipv6_stateful_connection_lives_and_dies_like_an_ipv4_one() {
        let a6 = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let r6 = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let mut p = stateful_policy();
        for l in &mut p.vports[0].layers {
            if l.kind == LayerKind::Vnet {
                l.mappings.push(Mapping { ca: IpAddr::from(r6), ..remote_mapping() });
            }
        }
        let mut sp = slow(p);
        let t0 = Instant::from_secs(10);
        use tcp::flags::{ACK, FIN, SYN};
        let syn = eth(REMOTE_MAC, A_MAC, 0x86dd, &ipv6(a6, r6, 6, &tcp_seg(40000, 80, SYN)));
        let (k, v) = compile(&mut sp, t0, &syn, A_PORT);
        assert_eq!(k.src_ip(), IpAddr::from(a6));
        let (fwd, rev) = forward(v);
        let rev = rev.expect("stateful");
        let rk = rev.key;
        assert_eq!((rk.src_ip(), rk.dst_ip()), (IpAddr::from(r6), IpAddr::from(a6)));
        assert_eq!(sp.conns_tab.wide.len(), 2, "both keys kept aside");
        assert!(rk.is_tunnel(), "the reply arrives tunnelled");
        assert_eq!((PackedKey::pack(&k), PackedKey::pack(&rk)), (None, None));
        assert_eq!(sp.conns_tab.find(&rk), sp.conns_tab.find(&k));
        let mut rem = Vec::new();
        sp.on_tcp(t0, &rk, SYN | ACK, &mut rem);
        sp.on_tcp(t0, &k, ACK, &mut rem);
        assert_eq!(sp.stats().half_open, 0, "established");
        // Re-compiling the forward key gives the same flows.
        let ack = eth(REMOTE_MAC, A_MAC, 0x86dd, &ipv6(a6, r6, 6, &tcp_seg(40000, 80, ACK)));
        let (again, v) = compile(&mut sp, t0, &ack, A_PORT);
        assert_eq!((again, forward(v)), (k, (fwd, Some(rev.clone()))));
        sp.on_tcp(t0, &k, FIN | ACK, &mut rem);
        sp.on_tcp(t0, &rk, FIN | ACK, &mut rem);
        let due = sp.poll_timeout().expect("time-wait");
        sp.handle_timeout(due, &mut rem);
        rem.sort_by_key(|k| k.port);
        assert_eq!(rem, vec![rk, k]);
        assert_eq!((sp.stats().conns, sp.conns_tab.wide_free.len()), (0, 2));
        assert_eq!((sp.conns_tab.find(&k), sp.conns_tab.find(&rk)), (None, None));
    }

    #[test]
    fn reset_lingers_for_trailing_segments_then_goes_and_rst_first_is_invalid() {
        let mut sp = slow(stateful_policy());
        let now = Instant::from_secs(1);
        let syn = tcp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 40001, 80, tcp::flags::SYN);
        let (k, v) = compile(&mut sp, now, &syn, A_PORT);
        let rk = forward(v).1.expect("stateful").key;
        let mut rem = Vec::new();
        sp.on_tcp(now, &rk, tcp::flags::RST, &mut rem);
        let due = now + SlowPathConfig::default().time_wait;
        assert_eq!(sp.poll_timeout(), Some(due));
        sp.handle_timeout(now, &mut rem);
        assert!(rem.is_empty(), "a reset connection lingers: {rem:?}");
        assert_eq!((sp.stats().half_open, sp.stats().time_wait, sp.stats().conns), (0, 1, 1));
        // The segments still in flight when it was reset pass while it lingers: data from the
        // originator (uncached by then) and the RSTs the peer answers it with.
        let data = tcp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 40001, 80, tcp::flags::ACK);
        assert!(matches!(
            compile(&mut sp, now, &data, A_PORT).1,
            super::super::Verdict::Forward { .. }
        ));
        let later = now + Duration::from_millis(5);
        sp.on_tcp(later, &rk, tcp::flags::RST, &mut rem);
        sp.on_tcp(later, &rk, tcp::flags::RST | tcp::flags::ACK, &mut rem);
        assert_eq!(sp.stats().tcp_invalid, 0);
        assert_eq!(sp.poll_timeout(), Some(due), "trailing RSTs do not extend the linger");
        sp.handle_timeout(due, &mut rem);
        assert_eq!(rem.len(), 2);
        assert!(rem.contains(&k) && rem.contains(&rk));
        assert_eq!((sp.stats().conns, sp.stats().time_wait), (0, 0));
        // An RST of a tuple nobody knows is still invalid.
        let rst = tcp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 40002, 80, tcp::flags::RST);
        assert_eq!(deny(compile(&mut sp, due, &rst, A_PORT).1), (DenyReason::TcpInvalid, false));
        // An invalid segment of a known connection is denied, not cached, and counted.
        let (k, _) = compile(&mut sp, due, &syn, A_PORT);
        sp.on_tcp(due, &k, tcp::flags::ACK, &mut rem);
        let bad =
            tcp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 40001, 80, tcp::flags::SYN | tcp::flags::FIN);
        assert_eq!(deny(compile(&mut sp, due, &bad, A_PORT).1), (DenyReason::TcpInvalid, false));
        assert_eq!(sp.stats().tcp_invalid, 2);
    }

    #[test]
    fn half_open_cap_denies_new_syns_only() {
        let cfg = SlowPathConfig { max_half_open: 2, ..SlowPathConfig::default() };
        let mut sp = SlowPath::new(Arc::new(stateful_policy()), cfg);
        for p in 0..2 {
            let syn = tcp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 41000 + p, 80, tcp::flags::SYN);
            forward(compile(&mut sp, Instant::ZERO, &syn, A_PORT).1);
        }
        let syn = tcp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 41002, 80, tcp::flags::SYN);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &syn, A_PORT).1),
            (DenyReason::HalfOpenCap, false)
        );
        // Mid-stream pick-up is not half-open and not capped.
        let mid = tcp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 41003, 80, tcp::flags::ACK);
        forward(compile(&mut sp, Instant::ZERO, &mid, A_PORT).1);
        let s = sp.stats();
        assert_eq!((s.half_open, s.half_open_rejected, s.conns), (2, 1, 3));
        // The handshakes' last ACKs are never seen: after `half_open_timeout` the connections
        // are presumed established (kept, no longer counted) and new SYNs pass again.
        let due = Instant::ZERO + SlowPathConfig::default().half_open_timeout;
        assert_eq!(sp.poll_timeout(), Some(due));
        let mut rem = Vec::new();
        sp.handle_timeout(due, &mut rem);
        assert!(rem.is_empty());
        let s = sp.stats();
        assert_eq!((s.half_open, s.conns), (0, 3));
        assert_eq!(sp.poll_timeout(), None);
        forward(compile(&mut sp, due, &syn, A_PORT).1);
        assert_eq!(sp.stats().half_open, 1);
    }

    /// A key of family `v6` (inner) / `outer_v6`, tunnelled or not, from `seed` bytes.
    fn any_key(seed: [u8; 16], v6: bool, tunnel: Option<bool>, port: u16) -> FlowKey {
        let ip = |b: u8| -> IpAddr {
            if v6 {
                let mut a = seed;
                a[15] = b;
                IpAddr::from(a)
            } else {
                IpAddr::from([seed[0], seed[1], seed[2], b])
            }
        };
        let mut k = FlowKey {
            proto: 17,
            src_port: u16::from_be_bytes([seed[3], seed[4]]),
            dst_port: u16::from_be_bytes([seed[5], seed[6]]),
            port,
            ..FlowKey::default()
        };
        k.set_src_ip(ip(1));
        k.set_dst_ip(ip(2));
        if let Some(outer_v6) = tunnel {
            let (s, d) = if outer_v6 {
                (
                    IpAddr::from([0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, seed[7]]),
                    IpAddr::from([0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]),
                )
            } else {
                (IpAddr::from([192, 0, 2, seed[7]]), IpAddr::from([192, 0, 2, 9]))
            };
            k.set_tunnel(Some((s, d, u32::from(seed[8]) << 8)));
            k.set_direction(Direction::In);
        }
        k
    }

    fn conn_with(fwd: PackedKey, rev: PackedKey) -> Conn {
        Conn {
            fwd,
            rev,
            flow_hash: 0,
            eth_src: [0; 6],
            eth_dst: [0; 6],
            ethertype: 0x0800,
            snat_port: 0,
            snat_pool: NO_POOL,
            tunnel: None,
            stateful: true,
            tcp: NONE,
        }
    }

    #[test]
    fn conn_record_stays_compact() {
        assert_eq!(core::mem::size_of::<PackedKey>(), 28);
        assert!(
            core::mem::size_of::<Option<Conn>>() <= 88,
            "{}",
            core::mem::size_of::<Option<Conn>>()
        );
        // An index entry is a u32 (the key is read back from the record).
        assert_eq!(core::mem::size_of::<u32>(), 4);
    }

    #[test]
    fn packed_key_forms() {
        let v4 = any_key([10, 0, 0, 1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0], false, None, 3);
        let p = PackedKey::pack(&v4).expect("IPv4 packs");
        assert_eq!(p.addrs[0], [10, 0, 0, 1]);
        assert_eq!(p.flags & PACK_NO_OUTER, PACK_NO_OUTER);
        assert_eq!(p.unpack(), v4);
        let tun = any_key([10, 0, 0, 1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0], false, Some(false), 3);
        let p = PackedKey::pack(&tun).expect("IPv4 in IPv4 packs");
        assert_eq!(p.addrs[2], [192, 0, 2, 5]);
        assert_eq!(p.unpack(), tun);
        // Any IPv6 address, inner or outer, makes the key wide.
        let seed = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(PackedKey::pack(&any_key(seed, true, None, 3)), None);
        assert_eq!(PackedKey::pack(&any_key(seed, false, Some(true), 3)), None);
        // Bits the packed form uses for itself are never taken from a key.
        let odd = FlowKey { flags: v4.flags | PACK_NO_OUTER, ..v4 };
        assert_eq!(PackedKey::pack(&odd), None);
        let odd = FlowKey { reserved: 1, ..v4 };
        assert_eq!(PackedKey::pack(&odd), None);
        // An IPv4 key whose outer addresses are not both zero nor both IPv4 is wide.
        let mut half = tun;
        half.outer_dst = [0; 16];
        assert_eq!(PackedKey::pack(&half), None);
    }

    #[test]
    fn wide_keys_are_stored_aside_and_freed_with_their_connection() {
        let seed = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut t = Conns::new();
        let f = any_key(seed, true, None, 1);
        let r = any_key(seed, true, Some(false), 2);
        let (pf, pr) = (t.pack(&f).unwrap(), t.pack(&r).unwrap());
        assert_eq!((pf.wide_index(), pr.wide_index()), (Some(0), Some(1)));
        let slot = t.insert(conn_with(pf, pr)).unwrap();
        assert_eq!((t.find(&f), t.find(&r)), (Some(slot), Some(slot)));
        let (_, kf, kr, tcp) = t.remove(slot).unwrap();
        assert_eq!((kf, kr, tcp.is_none()), (f, r, true));
        assert_eq!((t.find(&f), t.find(&r)), (None, None));
        assert_eq!(t.wide_free.len(), 2);
        // Reused, not grown.
        let g = any_key(seed, true, None, 7);
        assert!(t.pack(&g).unwrap().wide_index().is_some());
        assert_eq!(t.wide.len(), 2);
    }

    proptest! {
        /// Packing a key and reading it back gives the same key, for every family and tunnel.
        #[test]
        fn packed_keys_round_trip(
            seed in any::<[u8; 16]>(),
            v6 in any::<bool>(),
            tunnel in proptest::option::of(any::<bool>()),
            port in any::<u16>(),
        ) {
            let k = any_key(seed, v6, tunnel, port);
            let mut t = Conns::new();
            let p = t.pack(&k).unwrap();
            prop_assert_eq!(p.wide_index().is_some(), v6 || tunnel == Some(true));
            prop_assert_eq!(t.key(&p), k);
        }

        /// The one index over both keys of every record behaves like a map from key to slot
        /// (a later insert of a key takes it over; a removal forgets only keys pointing at the
        /// removed record), through slot and wide-key reuse and table growth.
        #[test]
        fn conn_index_matches_a_map(
            ops in proptest::collection::vec((any::<bool>(), 0u8..40, 0u8..40, any::<bool>()), 1..400),
        ) {
            let seed = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            let key = |n: u8| any_key(seed, n.is_multiple_of(3), n.is_multiple_of(5).then_some(false), u16::from(n));
            let mut t = Conns::new();
            let mut model: std::collections::HashMap<FlowKey, u32> = Default::default();
            let mut live: Vec<u32> = Vec::new();
            for (add, a, b, pick) in ops {
                if add || live.is_empty() {
                    let (f, r) = (key(a), key(b));
                    let (pf, pr) = (t.pack(&f).unwrap(), t.pack(&r).unwrap());
                    let slot = t.insert(conn_with(pf, pr)).unwrap();
                    model.insert(f, slot);
                    model.insert(r, slot);
                    live.push(slot);
                } else {
                    let i = usize::from(a) % live.len();
                    let slot = live.swap_remove(i);
                    let (c, f, r, _) = t.remove(slot).unwrap();
                    prop_assert_eq!((t.key(&c.fwd), t.key(&c.rev)), (f, r));
                    for k in [f, r] {
                        if model.get(&k) == Some(&slot) {
                            model.remove(&k);
                        }
                    }
                    // Sometimes retarget the reply key of another live record.
                    if pick && let Some(&s) = live.first() {
                        let nk = key(b);
                        let old = t.rev_key(t.get(s).unwrap());
                        prop_assert!(t.set_rev(s, &nk));
                        if model.get(&old) == Some(&s) {
                            model.remove(&old);
                        }
                        model.insert(nk, s);
                    }
                }
                for n in 0..40 {
                    let k = key(n);
                    prop_assert_eq!(t.find(&k), model.get(&k).copied(), "key {}", n);
                }
                prop_assert_eq!(t.index.len(), model.len());
            }
        }
    }
}
