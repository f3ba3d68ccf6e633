//! The VFP slow path: walks a vPort's policy layers for the first packet of a flow and compiles
//! the result into a unified flow (an exact-match key and one header transposition), plus the
//! connection state that stateful actions need (NAT bindings, the reverse flow, TCP state).
//!
//! [`SlowPath::compile`] is called by the engine for an exception packet: a packet whose flow is
//! not in the GFT, or whose cached entry is stale. It finds the vPort (from the ingress port for
//! outbound packets; from the VNI and inner destination, or a matching DNAT rule, for inbound
//! ones), walks the vPort's layers (in order outbound, in reverse inbound), and returns a
//! [`Verdict`]: forward with a [`UnifiedFlow`] (and, for stateful flows, the reverse flow the
//! replies will hit), or deny with a [`DenyReason`] and whether a drop entry may be cached.
//!
//! How the layers compose (the [`crate::policy`] module doc is the contract for rule matching):
//! - Predicates of a layer see the packet as the earlier layers left it: after a DNAT the later
//!   layers see the backend address; after a decapsulation they see no tunnel.
//! - ACL: `Deny` (in any layer) denies with the layer index and rule id; `AllowStateful` makes
//!   the connection stateful.
//! - NAT: `Dnat` applies in both directions (the VIP case is inbound; a VM sending to an
//!   internal VIP is the outbound one) and picks the backend `flow_hash % backends.len()`;
//!   `Snat` applies outbound only and allocates a public port unique per (public address,
//!   protocol) for TCP and UDP (other protocols are translated by address only). Both are
//!   stateful.
//! - ROUTE decides where an outbound packet goes (longest prefix match on the current
//!   destination). Route layers are skipped inbound: inbound packets go to their vPort. With no
//!   route layer an outbound packet is routed through the VNET; a route layer that decides
//!   nothing (default `Pass`) is `NoRoute`.
//! - VNET: `Encap` records the tunnel; the mapping is looked up at the end of the walk with the
//!   final inner destination, so a VNET layer may come before or after NAT and ROUTE. A route
//!   through the VNET without an `Encap` action, or without a mapping, is `NoMapping`. `Decap`
//!   (inbound) checks the VNI and that the outer source is the provider address mapped to the
//!   inner source (else `Spoofed`); an inbound tunnelled packet that no layer decapsulated is
//!   `Spoofed` too. `Encap` inbound, `Decap` outbound and `Decap` of a plain packet are
//!   no-ops. A tunnelled packet from a VM is `UnsupportedTunnel`.
//! - A route to another local vPort delivers there directly; that vPort's inbound layers are
//!   not run (a simplification: the sender's policy decides).
//!
//! The ops of a flow are emitted in one fixed order: pop the outer headers, then set Ethernet,
//! IP and L4 fields, then push the encapsulation.
//!
//! Stateful flows keep a connection: both directions' keys map to it, and a later `compile` of
//! the reply key (on a worker whose cache lacks it) returns the reverse flow without consulting
//! the inbound policy. Every TCP flow keeps a connection too (for its TCP state), stateful or
//! not; for a non-stateful one the reply is still judged by its own direction's policy.
//! `compile` feeds the TCP flags of the packet it is given to the connection's state; feeding
//! the same segment again through [`SlowPath::on_tcp`] is harmless (the tracker ignores a
//! repeated SYN, FIN or RST). Since the fast path copies only SYN, FIN and RST, the last ACK of
//! a handshake is usually unseen: a connection still half-open after
//! [`SlowPathConfig::half_open_timeout`] is presumed established (no longer counted against the
//! half-open cap).
//!
//! This module is not the fast path: it allocates (the ops vector, connection entries) and is
//! called once per flow. It does not meter or count packets; it assigns meters.
//!
//! The code is split by concern: `layer.rs` walks a flow through the layers (the precomputed
//! policy, the walk, the flows and their transpositions); `conn.rs` keeps the connection table
//! (packed keys, TCP state, the half-open cap and its aging, time-wait); `snat.rs` allocates
//! SNAT ports; [`state`] exports and imports the connection state for a hitless upgrade. This
//! file holds the API ([`SlowPath`], [`Verdict`] and the types they use) and `compile`, which
//! ties the three together.

mod conn;
mod layer;
mod snat;
pub mod state;
#[cfg(test)]
pub(crate) mod testutil;

use core::fmt;
use core::net::IpAddr;
use core::time::Duration;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use hashbrown::HashMap;
use snic_time::Instant;
use snic_wire::stack::{Layer, Stack};

use crate::key::{Direction, FlowKey, VPortId};
use crate::policy::{MeterId, Policy};
use crate::tcp::{self, TcpConn, TcpEvent};
use crate::transposition::Transposition;

use conn::{Conn, Conns, NONE, TcpSide, TimerKind, alloc};
use layer::{Compiled, Origin, Plan};
use snat::{NO_POOL, PortPool, SnatBinding};

/// What the fast path does for one direction of one flow.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FlowAction {
    /// The header operations.
    pub transposition: Transposition,
    /// Pipeline port the packet leaves by.
    pub egress: u16,
    /// The vPort whose policy (and epoch) produced it.
    pub vport: VPortId,
    /// Per-flow meter (metering layer).
    pub meter: Option<MeterId>,
    /// The vPort's meter.
    pub vport_meter: Option<MeterId>,
    /// Copy SYN/FIN/RST of this flow to the slow path.
    pub track_tcp: bool,
}

/// One direction of one flow: its exact-match key and what to do with it.
#[derive(Debug, Clone, PartialEq)]
pub struct UnifiedFlow {
    /// The key packets of this direction carry when they arrive.
    pub key: FlowKey,
    /// What the fast path does with them.
    pub action: FlowAction,
}

/// Why the slow path dropped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DenyReason {
    /// No vPort owns the packet (unknown ingress port, VNI or destination).
    NoVPort,
    /// A `Deny` action: layer index (outbound order) and rule id (`None`: the layer default).
    Acl {
        /// Index of the layer in the vPort's outbound order.
        layer: u8,
        /// The rule, or `None` for the layer's default.
        rule: Option<u32>,
    },
    /// A route layer decided nothing, or routed to a vPort that does not exist.
    NoRoute,
    /// A blackhole route.
    RouteDrop,
    /// Routed through the VNET but no mapping (or no `Encap`) for the destination.
    NoMapping,
    /// A tunnelled packet whose VNI or outer source does not match a mapping of its inner
    /// source, or that no layer decapsulated.
    Spoofed,
    /// The half-open TCP connection cap was reached.
    HalfOpenCap,
    /// No free SNAT port.
    SnatExhausted,
    /// Not an IP (or ARP) packet.
    NotIp,
    /// The ops the layers produced do not form a valid transposition.
    BadTransposition,
    /// A TCP segment the connection state does not allow (e.g. a RST for an unknown flow).
    TcpInvalid,
    /// The connection table is full.
    ConnLimit,
    /// A tunnel other than VXLAN or NVGRE.
    UnsupportedTunnel,
}

impl DenyReason {
    /// Short name for counters: `"no_vport"`, `"acl"`, `"no_route"`, ...
    pub const fn name(self) -> &'static str {
        match self {
            DenyReason::NoVPort => "no_vport",
            DenyReason::Acl { .. } => "acl",
            DenyReason::NoRoute => "no_route",
            DenyReason::RouteDrop => "route_drop",
            DenyReason::NoMapping => "no_mapping",
            DenyReason::Spoofed => "spoofed",
            DenyReason::HalfOpenCap => "half_open_cap",
            DenyReason::SnatExhausted => "snat_exhausted",
            DenyReason::NotIp => "not_ip",
            DenyReason::BadTransposition => "bad_transposition",
            DenyReason::TcpInvalid => "tcp_invalid",
            DenyReason::ConnLimit => "conn_limit",
            DenyReason::UnsupportedTunnel => "unsupported_tunnel",
        }
    }

    /// True when the reason is a property of the policy (a drop entry may be cached), false for
    /// transient conditions (caps, exhaustion, TCP state).
    pub const fn cacheable(self) -> bool {
        !matches!(
            self,
            DenyReason::HalfOpenCap
                | DenyReason::SnatExhausted
                | DenyReason::BadTransposition
                | DenyReason::TcpInvalid
                | DenyReason::ConnLimit
        )
    }
}

/// Every [`DenyReason::name`], for reading counters back ([`state`]).
pub(crate) const DENY_NAMES: [&str; 13] = [
    "no_vport",
    "acl",
    "no_route",
    "route_drop",
    "no_mapping",
    "spoofed",
    "half_open_cap",
    "snat_exhausted",
    "not_ip",
    "bad_transposition",
    "tcp_invalid",
    "conn_limit",
    "unsupported_tunnel",
];

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DenyReason::Acl { layer, rule: Some(r) } => write!(f, "acl (layer {layer}, rule {r})"),
            DenyReason::Acl { layer, rule: None } => write!(f, "acl (layer {layer}, default)"),
            r => f.write_str(r.name()),
        }
    }
}

/// The slow path's answer for one exception packet.
#[allow(clippy::large_enum_variant, reason = "returned once per flow setup, never stored")]
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Forward this packet with `forward`; also cache `reverse` (stateful flows) when present.
    Forward {
        /// The flow of this packet.
        forward: UnifiedFlow,
        /// The flow its replies will hit, for stateful flows.
        reverse: Option<UnifiedFlow>,
    },
    /// Drop this packet. `cache` = true when caching a drop entry for the flow is safe (policy
    /// denies; not transient conditions like `HalfOpenCap`).
    Deny {
        /// Why.
        reason: DenyReason,
        /// Whether a drop entry may be cached.
        cache: bool,
    },
}

/// Limits of the slow path's connection state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlowPathConfig {
    /// Most half-open TCP connections (SYN seen, not established); further SYNs are denied
    /// (not cached). Default 65,536.
    pub max_half_open: usize,
    /// How long a closed (both FINs) or reset TCP connection stays before its flows are
    /// removed. Default 2 s: the flows only need to outlive retransmitted FINs, the last ACK,
    /// and after a reset the segments still in flight and the RSTs answering them, not a full
    /// 2 MSL (the hosts keep their own time-wait).
    pub time_wait: Duration,
    /// Most connections (stateful flows and TCP flows). Default 1,048,576.
    pub max_conns: usize,
    /// How long a connection counts as half-open at most. The fast path copies only SYN, FIN
    /// and RST, so the last ACK of a handshake is usually not seen: a connection still
    /// half-open after this long is presumed established and no longer counts against
    /// `max_half_open` (it is kept). Default 10 s.
    pub half_open_timeout: Duration,
}

impl Default for SlowPathConfig {
    fn default() -> Self {
        SlowPathConfig {
            max_half_open: 65_536,
            time_wait: Duration::from_secs(2),
            max_conns: 1 << 20,
            half_open_timeout: Duration::from_secs(10),
        }
    }
}

/// Counters and gauges of the slow path.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SlowPathStats {
    /// Forward verdicts (new flows and re-compiled ones).
    pub compiled: u64,
    /// Deny verdicts.
    pub denied: u64,
    /// Connections now (gauge).
    pub conns: u64,
    /// Half-open TCP connections now (gauge).
    pub half_open: u64,
    /// SYNs denied by the half-open cap.
    pub half_open_rejected: u64,
    /// Connections in time-wait or reset (removal scheduled) now (gauge).
    pub time_wait: u64,
    /// Connections removed (closed, reset, evicted, denied by a new policy).
    pub closed: u64,
    /// SNAT ports allocated now (gauge).
    pub snat_in_use: u64,
    /// TCP segments the connection state rejected.
    pub tcp_invalid: u64,
    /// Replies served from a connection's reverse flow by `compile`.
    pub reverse_hits: u64,
    /// `on_tcp` calls for keys with no connection.
    pub tcp_untracked: u64,
    /// Connections created.
    pub opened: u64,
}

/// The VFP slow path: the policy, its precomputed classifiers, and the connection state.
///
/// Sans-IO and single-threaded: the caller passes the time and the packet, and applies the
/// removals it is handed (keys whose cached flows must go). Connections live in a slab indexed
/// by both of their keys; timers (time-wait, reset, half-open aging) in a min-heap whose stale
/// entries are skipped.
pub struct SlowPath {
    policy: Arc<Policy>,
    compiled: Compiled,
    cfg: SlowPathConfig,
    conns_tab: Conns,
    /// SNAT pools by (public address, protocol): index in `pools`.
    pool_ids: HashMap<(IpAddr, u8), u16>,
    pools: Vec<((IpAddr, u8), PortPool)>,
    timers: BinaryHeap<Reverse<(Instant, u32, u64, TimerKind)>>,
    /// Keys to remove that `compile` could not hand out (it has no `removals`).
    pending: Vec<FlowKey>,
    /// Connections the slow path ages because no cached flow does, by slot: carried over from
    /// another process ([`SlowPath::import_state`]) and not cached since, or served only while
    /// the fast path was off ([`SlowPath::served_uncached`]). The value is when they are
    /// removed unless a packet comes (an `Idle` timer). Once a flow of theirs is cached
    /// ([`SlowPath::cached`]), its idle aging takes over.
    adopted: HashMap<u32, Instant>,
    next_serial: u64,
    conns: usize,
    half_open: usize,
    time_wait: usize,
    snat_in_use: usize,
    stats: SlowPathStats,
}

impl fmt::Debug for SlowPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlowPath")
            .field("vports", &self.policy.vports.len())
            .field("cfg", &self.cfg)
            .field("stats", &self.stats())
            .finish()
    }
}

const SYN: u8 = tcp::flags::SYN;
const ACK: u8 = tcp::flags::ACK;
const RST: u8 = tcp::flags::RST;
const FIN: u8 = tcp::flags::FIN;

/// The TCP flags byte of the packet, when it is TCP and the header parsed.
fn tcp_flags(frame: &[u8], stack: &Stack, key: &FlowKey) -> Option<u8> {
    if key.proto != 6 || key.is_arp() {
        return None;
    }
    match stack.innermost().l4 {
        Some((Layer::Tcp, o)) => frame.get(usize::from(o) + 13).copied(),
        _ => None,
    }
}

fn is_syn(flags: u8) -> bool {
    flags & (SYN | ACK | RST) == SYN
}

impl SlowPath {
    /// A slow path for `policy` (already validated).
    pub fn new(policy: Arc<Policy>, cfg: SlowPathConfig) -> SlowPath {
        let compiled = Compiled::build(&policy);
        SlowPath {
            policy,
            compiled,
            cfg,
            conns_tab: Conns::new(),
            pool_ids: HashMap::new(),
            pools: Vec::new(),
            timers: BinaryHeap::new(),
            pending: Vec::new(),
            adopted: HashMap::new(),
            next_serial: 0,
            conns: 0,
            half_open: 0,
            time_wait: 0,
            snat_in_use: 0,
            stats: SlowPathStats::default(),
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// Swap in a new policy (per-layer classifiers are precomputed here, not per packet).
    /// Connection state (NAT bindings, TCP state) survives, but every later compile uses only
    /// the new policy: each connection is re-walked now; one the new policy denies is removed
    /// (both keys pushed to `removals`), and one whose reply key changed has its old reply key
    /// pushed.
    pub fn set_policy(&mut self, policy: Arc<Policy>, removals: &mut Vec<FlowKey>) {
        removals.append(&mut self.pending);
        self.compiled = Compiled::build(&policy);
        self.policy = policy;
        for slot in 0..self.conns_tab.slots.len() {
            let slot = slot as u32;
            let Some(conn) = self.conns_tab.get(slot).copied() else { continue };
            let origin = self.origin(&conn);
            let old_snat = self.snat_of(&conn);
            let keep = match self.walk(&origin, old_snat) {
                Ok(plan) if plan.stateful || conn.tcp != NONE => {
                    match self.build_flows(&origin, &plan) {
                        Ok((_, rev_key, reverse)) => {
                            self.rekey(slot, old_snat, &plan, rev_key, reverse.is_some(), removals)
                        }
                        Err(_) => false,
                    }
                }
                _ => false,
            };
            if !keep {
                self.remove_conn(slot, None, removals);
            }
        }
    }

    /// Update a connection after a re-walk under a new policy; false when it cannot be kept.
    fn rekey(
        &mut self,
        slot: u32,
        old_snat: Option<SnatBinding>,
        plan: &Plan,
        rev_key: FlowKey,
        stateful: bool,
        removals: &mut Vec<FlowKey>,
    ) -> bool {
        let pool = match plan.snat {
            Some(b) => match self.pool_id(b.ip, b.proto) {
                Some(id) => Some((id, b.port)),
                None => return false,
            },
            None => None,
        };
        self.rebind_snat(old_snat, plan.snat);
        let Some(conn) = self.conns_tab.get_mut(slot) else { return false };
        (conn.snat_pool, conn.snat_port) = pool.unwrap_or((NO_POOL, 0));
        conn.stateful = stateful;
        let old = conn.rev;
        let old_rev = self.conns_tab.key(&old);
        if rev_key != old_rev {
            removals.push(old_rev);
            if !self.conns_tab.set_rev(slot, &rev_key) {
                return false;
            }
        }
        true
    }

    /// Direction of packets arriving on pipeline port `port`: a vPort's port -> Out, the
    /// underlay port -> In.
    pub fn role(&self, port: u16) -> Option<Direction> {
        if self.compiled.by_port.contains_key(&port) {
            Some(Direction::Out)
        } else if port == self.policy.underlay.port {
            Some(Direction::In)
        } else {
            None
        }
    }

    /// The first packet of a flow (or of a flow whose cached entry is stale). `key` was
    /// extracted by the engine (`key::extract`, direction from `role`); `frame`/`stack` are the
    /// packet as received (for the fields the key lacks: MACs, EtherType); `flow_hash` is
    /// `key`'s hash for SLB/ECMP choices. A TCP packet's flags drive its connection's state.
    pub fn compile(
        &mut self,
        now: Instant,
        frame: &[u8],
        stack: &Stack,
        key: &FlowKey,
        flow_hash: u64,
    ) -> Verdict {
        let flags = tcp_flags(frame, stack, key);
        if let Some(slot) = self.conns_tab.find(key) {
            // (A connection the slow path ages stays so until the engine says its flow is
            // cached: `cached`.)
            return self.compile_known(now, slot, key, flags, frame, stack, flow_hash);
        }
        let origin = Origin::new(frame, stack, key, flow_hash);
        let plan = match self.walk(&origin, None) {
            Ok(p) => p,
            Err(r) => return self.deny(r),
        };
        let (forward, rev_key, reverse) = match self.build_flows(&origin, &plan) {
            Ok(f) => f,
            Err(r) => return self.deny(r),
        };
        let is_tcp = key.proto == 6 && !key.is_arp();
        if !plan.stateful && !is_tcp {
            self.stats.compiled += 1;
            return Verdict::Forward { forward, reverse: None };
        }
        let tcp = match (is_tcp, flags) {
            (false, _) => None,
            (true, Some(f)) if f & RST != 0 || (f & SYN != 0 && f & FIN != 0) => {
                self.stats.tcp_invalid += 1;
                return self.deny(DenyReason::TcpInvalid);
            }
            (true, Some(f)) => {
                if is_syn(f) && self.half_open >= self.cfg.max_half_open {
                    self.stats.half_open_rejected += 1;
                    return self.deny(DenyReason::HalfOpenCap);
                }
                // A SYN opens it; anything else is picked up mid-stream (after a policy change
                // or an eviction) as established.
                Some(TcpConn::new(now, Direction::Out, f))
            }
            // No TCP header (a non-first fragment): mid-stream.
            (true, None) => Some(TcpConn::new(now, Direction::Out, ACK)),
        };
        // Slots are named by u32 (timers, key index): the table can never outgrow that.
        if self.conns >= self.cfg.max_conns || !self.conns_tab.has_room() {
            return self.deny(DenyReason::ConnLimit);
        }
        let pool = match plan.snat {
            Some(b) => match self.pool_id(b.ip, b.proto) {
                Some(id) => Some((id, b.port)),
                None => return self.deny(DenyReason::SnatExhausted),
            },
            None => None,
        };
        // A reply key held by another connection: that one is stale (its peer reused the
        // tuple); replace it.
        if let Some(other) = self.conns_tab.find(&rev_key) {
            let mut pending = core::mem::take(&mut self.pending);
            self.remove_conn(other, None, &mut pending);
            self.pending = pending;
        }
        let (fwd, rev) = match (self.conns_tab.pack(key), self.conns_tab.pack(&rev_key)) {
            (Some(f), Some(r)) => (f, r),
            (f, r) => {
                // Only when the wide-key slab is full (2^32 IPv6 keys).
                for p in [f, r].into_iter().flatten() {
                    self.conns_tab.unpack_free(&p);
                }
                return self.deny(DenyReason::ConnLimit);
            }
        };
        let half_open = tcp.as_ref().is_some_and(TcpConn::is_half_open);
        let half_open_until = now.saturating_add(self.cfg.half_open_timeout);
        let serial = self.next_serial;
        let tcp_index = match tcp {
            Some(tcp) => {
                self.next_serial += 1;
                let side = TcpSide {
                    tcp,
                    serial,
                    expires: None,
                    half_open_until,
                    half_open,
                    presumed_open: false,
                };
                let t = &mut self.conns_tab;
                alloc(&mut t.tcp, &mut t.tcp_free, side).unwrap_or(NONE)
            }
            None => NONE,
        };
        let (snat_pool, snat_port) = pool.unwrap_or((NO_POOL, 0));
        let conn = Conn {
            fwd,
            rev,
            flow_hash: origin.flow_hash,
            eth_src: origin.eth_src,
            eth_dst: origin.eth_dst,
            ethertype: origin.ethertype,
            snat_port,
            snat_pool,
            tunnel: origin.tunnel,
            stateful: reverse.is_some(),
            tcp: tcp_index,
        };
        let Some(slot) = self.conns_tab.insert(conn) else {
            self.conns_tab.unpack_free(&fwd);
            self.conns_tab.unpack_free(&rev);
            if tcp_index != NONE {
                self.conns_tab.tcp_free.push(tcp_index);
            }
            return self.deny(DenyReason::ConnLimit);
        };
        if let Some(b) = plan.snat
            && let Some(p) = self.pools.get_mut(usize::from(snat_pool))
        {
            p.1.mark(b.port);
            self.snat_in_use += 1;
        }
        self.conns += 1;
        self.stats.opened += 1;
        if half_open {
            self.half_open += 1;
            self.timers.push(Reverse((half_open_until, slot, serial, TimerKind::HalfOpen)));
        }
        self.stats.compiled += 1;
        Verdict::Forward { forward, reverse }
    }

    /// `compile` of a key that belongs to a connection.
    #[allow(clippy::too_many_arguments, reason = "compile's arguments, passed through")]
    fn compile_known(
        &mut self,
        now: Instant,
        slot: u32,
        key: &FlowKey,
        flags: Option<u8>,
        frame: &[u8],
        stack: &Stack,
        flow_hash: u64,
    ) -> Verdict {
        let Some(conn) = self.conns_tab.get(slot) else {
            return self.deny(DenyReason::NoVPort);
        };
        let is_fwd = self.conns_tab.fwd_key(conn) == *key;
        if let Some(f) = flags
            && conn.tcp != NONE
        {
            let dir = if is_fwd { Direction::Out } else { Direction::In };
            if self.tcp_segment(now, slot, dir, f) == TcpEvent::Invalid {
                return self.deny(DenyReason::TcpInvalid);
            }
        }
        let Some(conn) = self.conns_tab.get(slot).copied() else {
            return self.deny(DenyReason::TcpInvalid);
        };
        if is_fwd || conn.stateful {
            let (origin, snat) = (self.origin(&conn), self.snat_of(&conn));
            let flows = self.walk(&origin, snat).and_then(|p| self.build_flows(&origin, &p));
            return match flows {
                Ok((forward, _, reverse)) if is_fwd => {
                    self.stats.compiled += 1;
                    Verdict::Forward { forward, reverse }
                }
                Ok((forward, _, Some(reverse))) => {
                    self.stats.compiled += 1;
                    self.stats.reverse_hits += 1;
                    Verdict::Forward { forward: reverse, reverse: Some(forward) }
                }
                // `set_policy` re-walked every connection, so neither happens; deny safely.
                Ok((_, _, None)) => self.deny(DenyReason::NoRoute),
                Err(r) => self.deny(r),
            };
        }
        // The reply of a non-stateful TCP connection: its own direction's policy decides.
        let origin = Origin::new(frame, stack, key, flow_hash);
        // A stateful action there needs no second connection (the replies of this one are
        // known); an SNAT there would need a port binding nobody owns, so it is refused.
        let verdict = match self.walk(&origin, None) {
            Ok(plan) if plan.snat.is_some() => Err(DenyReason::SnatExhausted),
            Ok(plan) => self.build_flows(&origin, &plan).map(|(forward, ..)| forward),
            Err(r) => Err(r),
        };
        match verdict {
            Ok(forward) => {
                self.stats.compiled += 1;
                Verdict::Forward { forward, reverse: None }
            }
            Err(r) => self.deny(r),
        }
    }

    /// Counters and gauges.
    pub fn stats(&self) -> SlowPathStats {
        SlowPathStats {
            conns: self.conns as u64,
            half_open: self.half_open as u64,
            time_wait: self.time_wait as u64,
            snat_in_use: self.snat_in_use as u64,
            ..self.stats.clone()
        }
    }

    fn deny(&mut self, reason: DenyReason) -> Verdict {
        self.stats.denied += 1;
        Verdict::Deny { reason, cache: reason.cacheable() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Field as F;
    use crate::policy::{Action, LayerKind, Matcher, Value};
    use crate::transposition::Op;
    use crate::vfp::testutil::*;

    #[test]
    fn set_policy_removes_connections_the_new_acl_denies() {
        let mut sp = slow(snat_policy(2000, 2999));
        let f = udp_frame(GW_MAC, A_MAC, A_IP, [8, 8, 8, 8], 5000, 53);
        let (k1, v) = compile(&mut sp, Instant::ZERO, &f, A_PORT);
        let r1 = forward(v).1.expect("stateful").key;
        let f = udp_frame(GW_MAC, A_MAC, A_IP, [8, 8, 8, 8], 5001, 443);
        let (k2, v) = compile(&mut sp, Instant::ZERO, &f, A_PORT);
        let (fwd2, rev2) = forward(v);
        let mut next = snat_policy(2000, 2999);
        next.vports[0].layers[0] = layer(
            "acl",
            LayerKind::Acl,
            vec![rule(
                5,
                1,
                None,
                vec![pred(F::L4Dst, Matcher::Exact(Value::Int(53)))],
                Action::Deny,
            )],
            Action::Allow,
        );
        let mut rem = Vec::new();
        sp.set_policy(Arc::new(next), &mut rem);
        rem.sort_by_key(|k| k.port);
        assert_eq!(rem, vec![r1, k1]);
        let s = sp.stats();
        assert_eq!((s.conns, s.snat_in_use), (1, 1));
        // The surviving connection keeps its binding and flows.
        let (again, rev) = forward(compile(&mut sp, Instant::ZERO, &f, A_PORT).1);
        assert_eq!((again, rev), (fwd2, rev2));
        assert_eq!(k2, again_key(&f));
        // And the denied flow is now denied by the new policy.
        let f = udp_frame(GW_MAC, A_MAC, A_IP, [8, 8, 8, 8], 5000, 53);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &f, A_PORT).1).0,
            DenyReason::Acl { layer: 0, rule: Some(5) }
        );
    }

    #[test]
    fn set_policy_moves_a_connection_to_a_new_mapping() {
        let mut sp = slow(stateful_policy());
        let syn = tcp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 40000, 80, tcp::flags::SYN);
        let (k, v) = compile(&mut sp, Instant::ZERO, &syn, A_PORT);
        let old_rev = forward(v).1.expect("stateful").key;
        // The remote VM moved to another host.
        let mut next = stateful_policy();
        next.vports[0].layers[1].mappings[0].pa = v4(192, 0, 2, 3);
        let mut rem = Vec::new();
        sp.set_policy(Arc::new(next), &mut rem);
        assert_eq!(rem, vec![old_rev], "only the stale reply key goes");
        assert_eq!(sp.stats().conns, 1);
        // A miss on the forward key compiles against the new mapping, TCP state kept.
        let (fwd, rev) = forward(sp.compile(Instant::ZERO, &syn, &Stack::parse(&syn), &k, 1));
        let Some(Op::PushEncap(e)) = fwd.action.transposition.ops().last() else {
            panic!("no encap")
        };
        assert_eq!(e.dst_ip, v4(192, 0, 2, 3));
        let rev = rev.expect("stateful");
        assert_eq!(rev.key.outer_src_ip(), Some(v4(192, 0, 2, 3)));
        assert_eq!(sp.stats().half_open, 1);
        // The new reply key reaches the connection; the old one does not.
        let mut rem = Vec::new();
        sp.on_tcp(Instant::ZERO, &rev.key, tcp::flags::RST, &mut rem);
        // Reset: the connection lingers for the time-wait period, then both keys go.
        sp.handle_timeout(Instant::ZERO + SlowPathConfig::default().time_wait, &mut rem);
        assert_eq!(rem.len(), 2);
        assert!(rem.contains(&k) && rem.contains(&rev.key));
        assert_eq!(sp.stats().conns, 0);
    }

    fn again_key(f: &[u8]) -> FlowKey {
        key_of(f, A_PORT, Direction::Out)
    }

    #[test]
    fn deny_reason_names_are_distinct() {
        let all = [
            DenyReason::NoVPort,
            DenyReason::Acl { layer: 0, rule: None },
            DenyReason::NoRoute,
            DenyReason::RouteDrop,
            DenyReason::NoMapping,
            DenyReason::Spoofed,
            DenyReason::HalfOpenCap,
            DenyReason::SnatExhausted,
            DenyReason::NotIp,
            DenyReason::BadTransposition,
            DenyReason::TcpInvalid,
            DenyReason::ConnLimit,
            DenyReason::UnsupportedTunnel,
        ];
        let names: std::collections::HashSet<_> = all.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), all.len());
        let listed: std::collections::HashSet<_> = DENY_NAMES.into_iter().collect();
        assert_eq!(listed, names, "DENY_NAMES lists every reason");
    }
}
