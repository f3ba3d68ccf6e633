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

use core::fmt;
use core::hash::BuildHasher;
use core::net::IpAddr;
use core::time::Duration;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use hashbrown::{DefaultHashBuilder, HashMap, HashTable};
use snic_time::Instant;
use snic_wire::stack::{Layer, Stack};

use crate::classifier::Classifier;
use crate::key::{Direction, FlowKey, KeyFlags, VPortId, from_ip};
use crate::policy::{
    Action, Field, Fields, LayerKind, Mac, Mapping, Matcher, MeterId, Policy, RouteTarget,
    TunnelKind, Value,
};
use crate::tcp::{self, TcpConn, TcpEvent};
use crate::xpose::{Encap, Op, Transposition};

/// What the fast path does for one direction of one flow.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FlowAction {
    /// The header operations.
    pub xpose: Transposition,
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
    /// How long a closed TCP connection stays before its flows are removed. Default 2 s: the
    /// flows only need to outlive retransmitted FINs and the last ACK, not a full 2 MSL (the
    /// hosts keep their own time-wait).
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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
    /// Connections in time-wait (removal scheduled) now (gauge).
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

/// How a packet enters or leaves the vSwitch, seen from one flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hop {
    /// The VM side of a vPort (index in `Policy::vports`).
    VPort(usize),
    /// The underlay, tunnelled to or from a remote provider address.
    Tunnel {
        kind: TunnelKind,
        /// The remote provider address.
        pa: IpAddr,
        vni: u32,
        /// The remote customer MAC (inner Ethernet destination towards it).
        mac: Mac,
    },
    /// The underlay, plain (internet / VIP traffic), through the gateway.
    Uplink,
}

/// Addresses and ports of a packet (inner).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tuple {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
}

/// An allocated SNAT port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct SnatBinding {
    ip: IpAddr,
    proto: u8,
    port: u16,
}

/// The first packet of a flow, as much of it as the walk reads (kept by connections so a new
/// policy can re-walk them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Origin {
    key: FlowKey,
    eth_src: Mac,
    eth_dst: Mac,
    ethertype: u16,
    tunnel: Option<Layer>,
    flow_hash: u64,
}

impl Origin {
    fn new(frame: &[u8], stack: &Stack, key: &FlowKey, flow_hash: u64) -> Origin {
        let inner = stack.innermost();
        let mac_at = |at: usize| -> Mac {
            frame.get(at..at + 6).and_then(|s| s.try_into().ok()).unwrap_or([0; 6])
        };
        let (eth_dst, eth_src) = match inner.eth {
            Some(o) => (mac_at(usize::from(o)), mac_at(usize::from(o) + 6)),
            None => ([0; 6], [0; 6]),
        };
        Origin {
            key: *key,
            eth_src,
            eth_dst,
            ethertype: inner.ethertype,
            tunnel: if key.is_tunnel() { stack.tunnel.map(|t| t.0) } else { None },
            flow_hash,
        }
    }

    fn fields(&self) -> Fields {
        let k = &self.key;
        Fields {
            eth_src: self.eth_src,
            eth_dst: self.eth_dst,
            ethertype: self.ethertype,
            ip_src: Some(k.src_ip()),
            ip_dst: Some(k.dst_ip()),
            proto: k.proto,
            l4_src: k.src_port,
            l4_dst: k.dst_port,
            vni: k.vni(),
            outer_src: k.outer_src_ip(),
            outer_dst: k.outer_dst_ip(),
        }
    }
}

/// The outcome of a successful walk: everything the flows are built from.
#[derive(Debug, Clone, Copy)]
struct Plan {
    vport: usize,
    entry: Hop,
    exit: Hop,
    orig: Tuple,
    fin: Tuple,
    stateful: bool,
    snat: Option<SnatBinding>,
    meter: Option<MeterId>,
}

/// One layer, precomputed for lookups.
#[derive(Debug, Clone)]
struct CompiledLayer {
    classifier: Classifier,
    /// VNET mappings by (VNI, customer address as the key stores it).
    mappings: HashMap<(u32, [u8; 16]), Mapping>,
}

/// The policy, precomputed: per-layer classifiers and the vPort indexes.
#[derive(Debug, Clone, Default)]
struct Compiled {
    /// Per vPort (same index as `Policy::vports`), per layer.
    layers: Vec<Vec<CompiledLayer>>,
    by_port: HashMap<u16, usize>,
    by_vni_ip: HashMap<(u32, [u8; 16]), usize>,
    by_vni_mac: HashMap<(u32, Mac), usize>,
    by_ip: HashMap<[u8; 16], usize>,
    by_id: HashMap<VPortId, usize>,
    /// (vPort, layer, rule) of the DNAT rules that can apply inbound (VIP ownership), by the
    /// address of their exact `ip.dst` predicate ...
    vip_by_ip: HashMap<[u8; 16], Vec<(usize, usize, usize)>>,
    /// ... and those without one (checked one by one).
    vip_rules: Vec<(usize, usize, usize)>,
}

impl Compiled {
    fn build(p: &Policy) -> Compiled {
        let mut c = Compiled::default();
        for (vi, v) in p.vports.iter().enumerate() {
            c.by_port.entry(v.port).or_insert(vi);
            c.by_id.entry(v.id).or_insert(vi);
            c.by_vni_mac.entry((v.vni, v.mac)).or_insert(vi);
            for ip in &v.ips {
                c.by_vni_ip.entry((v.vni, from_ip(*ip))).or_insert(vi);
                c.by_ip.entry(from_ip(*ip)).or_insert(vi);
            }
            let mut layers = Vec::with_capacity(v.layers.len());
            for (li, l) in v.layers.iter().enumerate() {
                let mut mappings = HashMap::with_capacity(l.mappings.len());
                for m in &l.mappings {
                    mappings.entry((m.vni, from_ip(m.ca))).or_insert(*m);
                }
                for (ri, r) in l.rules.iter().enumerate() {
                    if matches!(r.action, Action::Dnat { .. }) && r.dir != Some(Direction::Out) {
                        let vip = r.predicates.iter().find_map(|p| match p.matcher {
                            Matcher::Exact(Value::Ip(ip)) if p.field == Field::IpDst => Some(ip),
                            _ => None,
                        });
                        match vip {
                            Some(ip) => {
                                c.vip_by_ip.entry(from_ip(ip)).or_default().push((vi, li, ri))
                            }
                            None => c.vip_rules.push((vi, li, ri)),
                        }
                    }
                }
                layers.push(CompiledLayer {
                    classifier: Classifier::build(&l.rules, l.kind == LayerKind::Route),
                    mappings,
                });
            }
            c.layers.push(layers);
        }
        c
    }
}

/// A set of 65,536 ports of one (public address, protocol).
#[derive(Clone)]
struct PortPool {
    bits: Box<[u64; 1024]>,
    cursor: u16,
    used: u32,
}

impl fmt::Debug for PortPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PortPool").field("used", &self.used).finish()
    }
}

impl PortPool {
    fn new() -> PortPool {
        PortPool { bits: Box::new([0; 1024]), cursor: 0, used: 0 }
    }

    fn is_used(&self, port: u16) -> bool {
        let p = usize::from(port);
        self.bits[p / 64] & (1 << (p % 64)) != 0
    }

    /// A free port in `lo..=hi`, searching from the cursor and wrapping.
    fn peek(&self, lo: u16, hi: u16) -> Option<u16> {
        if lo > hi {
            return None;
        }
        let start = self.cursor.clamp(lo, hi);
        self.scan(start, hi).or_else(|| if start > lo { self.scan(lo, start - 1) } else { None })
    }

    /// The first free port in `from..=to`, skipping full words.
    fn scan(&self, from: u16, to: u16) -> Option<u16> {
        let mut p = u32::from(from);
        let to = u32::from(to);
        while p <= to {
            let w = self.bits[(p / 64) as usize];
            if w == u64::MAX {
                p = (p / 64 + 1) * 64;
                continue;
            }
            if w & (1 << (p % 64)) == 0 {
                return u16::try_from(p).ok();
            }
            p += 1;
        }
        None
    }

    fn mark(&mut self, port: u16) {
        if !self.is_used(port) {
            let p = usize::from(port);
            self.bits[p / 64] |= 1 << (p % 64);
            self.used += 1;
        }
        self.cursor = port.wrapping_add(1);
    }

    fn free(&mut self, port: u16) {
        if self.is_used(port) {
            let p = usize::from(port);
            self.bits[p / 64] &= !(1 << (p % 64));
            self.used -= 1;
        }
    }
}

/// Bits of [`PackedKey::flags`] above the [`KeyFlags`] ones.
const PACK_WIDE: u8 = 1 << 7;
/// The key has no outer addresses (both zero).
const PACK_NO_OUTER: u8 = 1 << 6;
/// No index (no TCP state, no SNAT pool).
const NONE: u32 = u32::MAX;
const NO_POOL: u16 = u16::MAX;

/// A [`FlowKey`] in 28 bytes instead of 80: the addresses as IPv4 (every address of an IPv4
/// key is IPv4-mapped, and a plain packet's outer addresses are zero). A key with an IPv6
/// address is "wide": `addrs[0]` holds the index of the full key in [`Conns::wide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PackedKey {
    /// Inner source, inner destination, outer source, outer destination.
    addrs: [[u8; 4]; 4],
    vni: u32,
    src_port: u16,
    dst_port: u16,
    port: u16,
    proto: u8,
    /// The key's [`KeyFlags`], plus [`PACK_WIDE`] / [`PACK_NO_OUTER`].
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
struct Conn {
    /// The forward key (the first packet's).
    fwd: PackedKey,
    /// The key of the replies.
    rev: PackedKey,
    flow_hash: u64,
    eth_src: Mac,
    eth_dst: Mac,
    ethertype: u16,
    /// SNAT port (meaningful when `snat_pool != NO_POOL`).
    snat_port: u16,
    /// SNAT pool (index in `SlowPath::pools`), or `NO_POOL`.
    snat_pool: u16,
    tunnel: Option<Layer>,
    /// The replies are let through by this connection (else they meet their own policy).
    stateful: bool,
    /// Index of the TCP state in `Conns::tcp`, or `NONE`.
    tcp: u32,
}

/// The TCP part of a connection.
#[derive(Debug, Clone, Copy)]
struct TcpSide {
    tcp: TcpConn,
    /// Distinguishes this connection from earlier ones in the same slot (timers).
    serial: u64,
    /// Removal scheduled (time-wait, reset).
    expires: Option<Instant>,
    /// When the current half-open period ends (the timer that may presume it established).
    half_open_until: Instant,
    /// Counted in the half-open gauge.
    half_open: bool,
    /// Half-open for longer than `half_open_timeout`: presumed established.
    presumed_open: bool,
}

/// The connection table: records in a slab (no allocation per record), one index from both
/// keys of each connection to its slot, the full keys of IPv6 connections and the TCP states
/// in side slabs.
///
/// An index entry is `slot << 1 | is_reply_key`; the key itself is read from the record, so an
/// entry costs 4 bytes. Invariants: at most one entry per key, and an entry's key is the one
/// its record holds at the position it names.
struct Conns {
    slots: Vec<Option<Conn>>,
    free: Vec<u32>,
    index: HashTable<u32>,
    /// The index's hash secret (random per table).
    seed: u64,
    wide: Vec<FlowKey>,
    wide_free: Vec<u32>,
    tcp: Vec<TcpSide>,
    tcp_free: Vec<u32>,
}

/// Slots fit an index entry (`slot << 1`).
const MAX_SLOTS: usize = 1 << 31;

fn alloc<T>(v: &mut Vec<T>, free: &mut Vec<u32>, x: T) -> Option<u32> {
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
    fn new() -> Conns {
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
    fn has_room(&self) -> bool {
        !self.free.is_empty() || self.slots.len() < MAX_SLOTS
    }

    fn get(&self, slot: u32) -> Option<&Conn> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    fn get_mut(&mut self, slot: u32) -> Option<&mut Conn> {
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

    fn key(&self, p: &PackedKey) -> FlowKey {
        key_of(&self.wide, p)
    }

    fn fwd_key(&self, c: &Conn) -> FlowKey {
        self.key(&c.fwd)
    }

    fn rev_key(&self, c: &Conn) -> FlowKey {
        self.key(&c.rev)
    }

    /// The compact form of `k`, storing it in the wide slab when it has IPv6 addresses.
    fn pack(&mut self, k: &FlowKey) -> Option<PackedKey> {
        match PackedKey::pack(k) {
            Some(p) => Some(p),
            None => alloc(&mut self.wide, &mut self.wide_free, *k).map(PackedKey::wide),
        }
    }

    fn unpack_free(&mut self, p: &PackedKey) {
        if let Some(i) = p.wide_index() {
            self.wide_free.push(i);
        }
    }

    /// The slot of the connection `k` belongs to.
    fn find(&self, k: &FlowKey) -> Option<u32> {
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
    fn insert(&mut self, conn: Conn) -> Option<u32> {
        let slot = alloc(&mut self.slots, &mut self.free, Some(conn))?;
        let (fwd, rev) = (self.fwd_key(&conn), self.rev_key(&conn));
        self.index_insert(&fwd, slot, false);
        self.index_insert(&rev, slot, true);
        Some(slot)
    }

    /// Replace the reply key of `slot` (the old one leaves the index if it pointed here).
    fn set_rev(&mut self, slot: u32, rev: &FlowKey) -> bool {
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
enum TimerKind {
    /// Remove the connection (time-wait over, or reset).
    Expire,
    /// Stop counting the connection as half-open.
    HalfOpen,
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

fn has_ports(proto: u8) -> bool {
    proto == 6 || proto == 17
}

fn layer_index(i: usize) -> u8 {
    u8::try_from(i).unwrap_or(u8::MAX)
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

    /// The first packet of a connection, as the walk reads it.
    fn origin(&self, c: &Conn) -> Origin {
        Origin {
            key: self.conns_tab.fwd_key(c),
            eth_src: c.eth_src,
            eth_dst: c.eth_dst,
            ethertype: c.ethertype,
            tunnel: c.tunnel,
            flow_hash: c.flow_hash,
        }
    }

    /// The SNAT binding of a connection.
    fn snat_of(&self, c: &Conn) -> Option<SnatBinding> {
        let ((ip, proto), _) = self.pools.get(usize::from(c.snat_pool))?;
        Some(SnatBinding { ip: *ip, proto: *proto, port: c.snat_port })
    }

    /// The pool of `(ip, proto)`, made on first use; `None` when there are too many pools.
    fn pool_id(&mut self, ip: IpAddr, proto: u8) -> Option<u16> {
        if let Some(&id) = self.pool_ids.get(&(ip, proto)) {
            return Some(id);
        }
        let id = u16::try_from(self.pools.len()).ok().filter(|&i| i != NO_POOL)?;
        self.pools.push(((ip, proto), PortPool::new()));
        self.pool_ids.insert((ip, proto), id);
        Some(id)
    }

    fn pool(&self, ip: IpAddr, proto: u8) -> Option<&PortPool> {
        let &id = self.pool_ids.get(&(ip, proto))?;
        self.pools.get(usize::from(id)).map(|(_, p)| p)
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
    fn tcp_segment(&mut self, now: Instant, slot: u32, dir: Direction, flags: u8) -> TcpEvent {
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
            }
        }
        self.prune_timers();
    }

    /// True while a timer entry still refers to a pending deadline of its connection.
    fn timer_live(&self, t: Instant, slot: u32, serial: u64, kind: TimerKind) -> bool {
        self.conns_tab.tcp(slot).is_some_and(|c| {
            c.serial == serial
                && match kind {
                    TimerKind::Expire => c.expires.is_some(),
                    TimerKind::HalfOpen => c.half_open && c.half_open_until == t,
                }
        })
    }

    /// Drop stale timers from the top of the heap, so `poll_timeout` names a real deadline.
    fn prune_timers(&mut self) {
        while let Some(&Reverse((t, slot, serial, kind))) = self.timers.peek() {
            if self.timer_live(t, slot, serial, kind) {
                break;
            }
            self.timers.pop();
        }
    }

    /// The next time `handle_timeout` has work (`Instant::ZERO` when removals are pending).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.pending.is_empty() {
            return Some(Instant::ZERO);
        }
        self.timers.peek().map(|Reverse((t, ..))| *t)
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

    /// Drop a connection: both keys to `removals`, its SNAT port freed, gauges updated.
    /// `skip` is a key not to push (already gone from the cache).
    fn remove_conn(&mut self, slot: u32, skip: Option<&FlowKey>, removals: &mut Vec<FlowKey>) {
        let Some((conn, fwd, rev, tcp)) = self.conns_tab.remove(slot) else { return };
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

    fn free_snat(&mut self, b: SnatBinding) {
        if let Some(&id) = self.pool_ids.get(&(b.ip, b.proto))
            && let Some((_, pool)) = self.pools.get_mut(usize::from(id))
            && pool.is_used(b.port)
        {
            pool.free(b.port);
            self.snat_in_use -= 1;
        }
    }

    /// Move a connection's SNAT binding from `old` to `new`.
    fn rebind_snat(&mut self, old: Option<SnatBinding>, new: Option<SnatBinding>) {
        if old == new {
            return;
        }
        if let Some(b) = old {
            self.free_snat(b);
        }
        if let Some(b) = new
            && let Some(id) = self.pool_id(b.ip, b.proto)
            && let Some((_, pool)) = self.pools.get_mut(usize::from(id))
        {
            if !pool.is_used(b.port) {
                self.snat_in_use += 1;
            }
            pool.mark(b.port);
        }
    }

    /// The vPort a packet belongs to and its direction.
    fn resolve(&self, o: &Origin, f: &Fields) -> Result<(usize, Direction), DenyReason> {
        let k = &o.key;
        let c = &self.compiled;
        if let Some(&vi) = c.by_port.get(&k.port) {
            return Ok((vi, Direction::Out));
        }
        if k.port != self.policy.underlay.port {
            return Err(DenyReason::NoVPort);
        }
        // A DNAT rule that matches the packet owns it (a VIP); for tunnelled packets only the
        // vPorts of the packet's VNI.
        let vip = |vni: Option<u32>| {
            let exact = c.vip_by_ip.get(&k.dst).map_or(&[][..], Vec::as_slice);
            exact.iter().chain(&c.vip_rules).find_map(|&(vi, li, ri)| {
                let v = self.policy.vports.get(vi)?;
                if vni.is_some_and(|n| n != v.vni) {
                    return None;
                }
                let rule = v.layers.get(li)?.rules.get(ri)?;
                rule.matches(f, Direction::In).then_some(vi)
            })
        };
        let vi = if k.is_tunnel() {
            c.by_vni_ip
                .get(&(k.vni, k.dst))
                .or_else(|| c.by_vni_mac.get(&(k.vni, o.eth_dst)))
                .copied()
                .or_else(|| vip(Some(k.vni)))
        } else {
            c.by_ip.get(&k.dst).copied().or_else(|| vip(None))
        };
        vi.map(|vi| (vi, Direction::In)).ok_or(DenyReason::NoVPort)
    }

    /// Walk the layers of the packet's vPort. `reuse` is the SNAT binding the connection
    /// already holds (a re-walk keeps it when the new policy still allows it).
    fn walk(&self, o: &Origin, reuse: Option<SnatBinding>) -> Result<Plan, DenyReason> {
        let mut f = o.fields();
        let (vi, dir) = self.resolve(o, &f)?;
        let vport = self.policy.vports.get(vi).ok_or(DenyReason::NoVPort)?;
        let clayers = self.compiled.layers.get(vi).ok_or(DenyReason::NoVPort)?;
        let k = &o.key;
        let orig = Tuple { src: k.src_ip(), dst: k.dst_ip(), sport: k.src_port, dport: k.dst_port };
        let ports = has_ports(k.proto) && !k.is_arp();
        let entry = match dir {
            // A VM's own tunnels: the key describes the inner frame, the ops would edit the
            // outer one.
            Direction::Out if k.is_tunnel() => return Err(DenyReason::UnsupportedTunnel),
            Direction::Out => Hop::VPort(vi),
            Direction::In => match (k.outer_src_ip(), o.tunnel) {
                (None, _) => Hop::Uplink,
                (Some(pa), Some(Layer::Vxlan)) => {
                    Hop::Tunnel { kind: TunnelKind::Vxlan, pa, vni: k.vni, mac: o.eth_src }
                }
                (Some(pa), Some(Layer::Nvgre)) => {
                    Hop::Tunnel { kind: TunnelKind::Nvgre, pa, vni: k.vni, mac: o.eth_src }
                }
                (Some(_), _) => return Err(DenyReason::UnsupportedTunnel),
            },
        };
        let mut stateful = false;
        let mut snat = None;
        let mut meter = None;
        let mut route: Option<RouteTarget> = None;
        let mut route_layer = false;
        let mut encap: Option<(TunnelKind, u32, usize)> = None;
        let mut decapped = false;
        let n = vport.layers.len().min(clayers.len());
        for step in 0..n {
            let li = match dir {
                Direction::Out => step,
                Direction::In => n - 1 - step,
            };
            let (layer, cl) = (&vport.layers[li], &clayers[li]);
            if layer.kind == LayerKind::Route {
                if dir == Direction::In {
                    continue;
                }
                route_layer = true;
            }
            let (action, rule_id) =
                match cl.classifier.lookup(&f, dir).and_then(|i| layer.rules.get(i)) {
                    Some(r) => (&r.action, Some(r.id)),
                    None => (&layer.default, None),
                };
            match action {
                Action::Pass | Action::Allow => {}
                Action::Deny => {
                    return Err(DenyReason::Acl { layer: layer_index(li), rule: rule_id });
                }
                Action::AllowStateful => stateful = true,
                Action::Encap { kind, vni } => {
                    if dir == Direction::Out {
                        encap = Some((*kind, *vni, li));
                    }
                }
                Action::Decap => {
                    // Plain packets (VIP traffic) have nothing to strip.
                    if dir == Direction::In && k.is_tunnel() {
                        let ok = k.vni == vport.vni
                            && cl
                                .mappings
                                .get(&(k.vni, k.src))
                                .is_some_and(|m| Some(m.pa) == k.outer_src_ip());
                        if !ok {
                            return Err(DenyReason::Spoofed);
                        }
                        decapped = true;
                        f.vni = None;
                        f.outer_src = None;
                        f.outer_dst = None;
                    }
                }
                Action::Dnat { backends } => {
                    if backends.is_empty() {
                        continue;
                    }
                    let i = (o.flow_hash % backends.len() as u64) as usize;
                    if let Some(&(ip, port)) = backends.get(i) {
                        f.ip_dst = Some(ip);
                        if let (Some(p), true) = (port, ports) {
                            f.l4_dst = p;
                        }
                        stateful = true;
                    }
                }
                Action::Snat { ip, ports: (lo, hi) } => {
                    if dir == Direction::Out {
                        f.ip_src = Some(*ip);
                        stateful = true;
                        if ports {
                            let port = match reuse {
                                Some(b)
                                    if b.ip == *ip
                                        && b.proto == k.proto
                                        && (*lo..=*hi).contains(&b.port) =>
                                {
                                    b.port
                                }
                                _ => self
                                    .pool(*ip, k.proto)
                                    .map_or(Some((*lo).min(*hi)), |p| p.peek(*lo, *hi))
                                    .filter(|_| lo <= hi)
                                    .ok_or(DenyReason::SnatExhausted)?,
                            };
                            f.l4_src = port;
                            snat = Some(SnatBinding { ip: *ip, proto: k.proto, port });
                        }
                    }
                }
                Action::Route(t) => {
                    if *t == RouteTarget::Drop {
                        return Err(DenyReason::RouteDrop);
                    }
                    route = Some(*t);
                }
                Action::Meter(m) => meter = Some(*m),
            }
        }
        let fin = Tuple {
            src: f.ip_src.unwrap_or(orig.src),
            dst: f.ip_dst.unwrap_or(orig.dst),
            sport: f.l4_src,
            dport: f.l4_dst,
        };
        let exit = match dir {
            Direction::In => {
                if k.is_tunnel() && !decapped {
                    return Err(DenyReason::Spoofed);
                }
                Hop::VPort(vi)
            }
            Direction::Out => match route {
                None if route_layer => return Err(DenyReason::NoRoute),
                Some(RouteTarget::Uplink) => Hop::Uplink,
                Some(RouteTarget::VPort(id)) => {
                    Hop::VPort(*self.compiled.by_id.get(&id).ok_or(DenyReason::NoRoute)?)
                }
                Some(RouteTarget::Drop) => return Err(DenyReason::RouteDrop),
                None | Some(RouteTarget::Vnet) => {
                    let (kind, vni, li) = encap.ok_or(DenyReason::NoMapping)?;
                    let m = clayers
                        .get(li)
                        .and_then(|cl| cl.mappings.get(&(vni, from_ip(fin.dst))))
                        .ok_or(DenyReason::NoMapping)?;
                    Hop::Tunnel { kind, pa: m.pa, vni, mac: m.mac }
                }
            },
        };
        Ok(Plan { vport: vi, entry, exit, orig, fin, stateful, snat, meter })
    }

    /// The forward flow (for `o.key`) of a plan, the key of its replies, and for a stateful
    /// plan the reverse flow (what the replies get).
    fn build_flows(
        &self,
        o: &Origin,
        p: &Plan,
    ) -> Result<(UnifiedFlow, FlowKey, Option<UnifiedFlow>), DenyReason> {
        let vport = self.policy.vports.get(p.vport).ok_or(DenyReason::NoVPort)?;
        let k = &o.key;
        let track_tcp = k.proto == 6 && !k.is_arp();
        let action = |xpose: Transposition, egress: u16| FlowAction {
            xpose,
            egress,
            vport: vport.id,
            meter: p.meter,
            vport_meter: vport.meter,
            track_tcp,
        };
        // Forward: from the entry hop, translated orig -> fin, to the exit hop.
        let (fops, fegress) = self.ops(p.entry, p.orig, p.fin, p.exit)?;
        let forward = UnifiedFlow { key: *k, action: action(fops, fegress) };
        // Reverse: the reply arrives at the exit hop addressed to fin, leaves by the entry hop.
        let swap = |t: Tuple| Tuple { src: t.dst, dst: t.src, sport: t.dport, dport: t.sport };
        let rkey = self.arrival_key(p.exit, swap(p.fin), k);
        let reverse = if p.stateful {
            let (rops, regress) = self.ops(p.exit, swap(p.fin), swap(p.orig), p.entry)?;
            Some(UnifiedFlow { key: rkey, action: action(rops, regress) })
        } else {
            None
        };
        Ok((forward, rkey, reverse))
    }

    /// The key of a packet with tuple `t` arriving by `hop` (protocol and ARP-ness from `like`).
    fn arrival_key(&self, hop: Hop, t: Tuple, like: &FlowKey) -> FlowKey {
        let u = &self.policy.underlay;
        let mut k = FlowKey {
            proto: like.proto,
            flags: like.flags & KeyFlags::ARP,
            src_port: t.sport,
            dst_port: t.dport,
            ..FlowKey::default()
        };
        k.set_src_ip(t.src);
        k.set_dst_ip(t.dst);
        match hop {
            Hop::VPort(vi) => {
                k.port = self.policy.vports.get(vi).map_or(0, |v| v.port);
                k.set_direction(Direction::Out);
            }
            Hop::Tunnel { pa, vni, .. } => {
                k.port = u.port;
                k.set_direction(Direction::In);
                k.set_tunnel(Some((pa, u.ip, vni)));
            }
            Hop::Uplink => {
                k.port = u.port;
                k.set_direction(Direction::In);
            }
        }
        k
    }

    /// The transposition of a packet entering by `from` with tuple `a`, translated to tuple
    /// `b`, leaving by `to`; and its egress port. Pops, then modifies, then pushes.
    fn ops(
        &self,
        from: Hop,
        a: Tuple,
        b: Tuple,
        to: Hop,
    ) -> Result<(Transposition, u16), DenyReason> {
        let u = &self.policy.underlay;
        let (egress, eth_src, eth_dst, push) = match to {
            Hop::VPort(vi) => {
                let v = self.policy.vports.get(vi).ok_or(DenyReason::NoVPort)?;
                (v.port, None, v.mac, None)
            }
            Hop::Tunnel { kind, pa, vni, mac } => {
                let e = Encap {
                    kind,
                    src_mac: u.mac,
                    dst_mac: u.gateway_mac,
                    src_ip: u.ip,
                    dst_ip: pa,
                    vni,
                    ttl: u.ttl,
                    udp_dst: u.vxlan_port,
                };
                (u.port, None, mac, Some(e))
            }
            Hop::Uplink => (u.port, Some(u.mac), u.gateway_mac, None),
        };
        // Exactly sized: the vector becomes the transposition's boxed slice without a realloc.
        let pop = matches!(from, Hop::Tunnel { .. });
        let n = usize::from(pop)
            + usize::from(eth_src.is_some())
            + 1
            + usize::from(a.src != b.src)
            + usize::from(a.dst != b.dst)
            + usize::from(a.sport != b.sport)
            + usize::from(a.dport != b.dport)
            + usize::from(push.is_some());
        let mut ops = Vec::with_capacity(n);
        if pop {
            ops.push(Op::PopOuter);
        }
        if let Some(m) = eth_src {
            ops.push(Op::SetEthSrc(m));
        }
        ops.push(Op::SetEthDst(eth_dst));
        if a.src != b.src {
            ops.push(Op::SetIpSrc(b.src));
        }
        if a.dst != b.dst {
            ops.push(Op::SetIpDst(b.dst));
        }
        if a.sport != b.sport {
            ops.push(Op::SetL4Src(b.sport));
        }
        if a.dport != b.dport {
            ops.push(Op::SetL4Dst(b.dport));
        }
        if let Some(e) = push {
            ops.push(Op::PushEncap(e));
        }
        let x = Transposition::new(ops).map_err(|_| DenyReason::BadTransposition)?;
        Ok((x, egress))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::extract;
    use crate::policy::{LayerPolicy, Matcher, Predicate, Rule, Underlay, VPortPolicy, Value};
    use core::net::Ipv4Addr;
    use proptest::prelude::*;

    const UL_MAC: Mac = [0x02, 0, 0, 0, 0, 0x01];
    const GW_MAC: Mac = [0x02, 0, 0, 0, 0, 0xfe];
    const A_MAC: Mac = [0x02, 0, 0, 0, 0xa, 0x01];
    const B_MAC: Mac = [0x02, 0, 0, 0, 0xb, 0x01];
    const REMOTE_MAC: Mac = [0x02, 0, 0, 0, 0xc, 0x02];
    const UL_PORT: u16 = 1;
    const A_PORT: u16 = 2;
    const B_PORT: u16 = 3;
    const VNI: u32 = 42;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }
    fn o4(ip: IpAddr) -> [u8; 4] {
        match ip {
            IpAddr::V4(a) => a.octets(),
            IpAddr::V6(_) => unreachable!("tests use IPv4"),
        }
    }

    const PA_LOCAL: [u8; 4] = [192, 0, 2, 1];
    const PA_REMOTE: [u8; 4] = [192, 0, 2, 2];
    const A_IP: [u8; 4] = [10, 0, 0, 1];
    const B_IP: [u8; 4] = [10, 0, 0, 5];
    const REMOTE_IP: [u8; 4] = [10, 0, 0, 2];

    // ---- frames ---------------------------------------------------------------------------

    fn eth(dst: Mac, src: Mac, ty: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::with_capacity(14 + payload.len());
        f.extend_from_slice(&dst);
        f.extend_from_slice(&src);
        f.extend_from_slice(&ty.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
        let mut h = vec![0u8; 20];
        h[0] = 0x45;
        h[2..4].copy_from_slice(&(20 + payload.len() as u16).to_be_bytes());
        h[8] = 64;
        h[9] = proto;
        h[12..16].copy_from_slice(&src);
        h[16..20].copy_from_slice(&dst);
        let c = snic_wire::checksum::data(&h);
        h[10..12].copy_from_slice(&(!c).to_be_bytes());
        h.extend_from_slice(payload);
        h
    }

    fn udp(sp: u16, dp: u16, payload: &[u8]) -> Vec<u8> {
        let mut u = Vec::with_capacity(8 + payload.len());
        u.extend_from_slice(&sp.to_be_bytes());
        u.extend_from_slice(&dp.to_be_bytes());
        u.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
        u.extend_from_slice(&[0, 0]);
        u.extend_from_slice(payload);
        u
    }

    fn tcp_seg(sp: u16, dp: u16, flags: u8) -> Vec<u8> {
        let mut t = vec![0u8; 20];
        t[0..2].copy_from_slice(&sp.to_be_bytes());
        t[2..4].copy_from_slice(&dp.to_be_bytes());
        t[12] = 5 << 4;
        t[13] = flags;
        t[14..16].copy_from_slice(&1024u16.to_be_bytes());
        t
    }

    /// An inner Ethernet/IPv4/UDP frame.
    fn udp_frame(dmac: Mac, smac: Mac, s: [u8; 4], d: [u8; 4], sp: u16, dp: u16) -> Vec<u8> {
        eth(dmac, smac, 0x0800, &ipv4(s, d, 17, &udp(sp, dp, b"data")))
    }

    /// An inner Ethernet/IPv4/TCP frame.
    fn tcp_frame(
        dmac: Mac,
        smac: Mac,
        s: [u8; 4],
        d: [u8; 4],
        sp: u16,
        dp: u16,
        fl: u8,
    ) -> Vec<u8> {
        eth(dmac, smac, 0x0800, &ipv4(s, d, 6, &tcp_seg(sp, dp, fl)))
    }

    /// `inner` in VXLAN from `os` to `od`.
    fn vxlan(os: [u8; 4], od: [u8; 4], vni: u32, inner: &[u8]) -> Vec<u8> {
        let mut v = vec![0x08, 0, 0, 0];
        v.extend_from_slice(&(vni << 8).to_be_bytes());
        v.extend_from_slice(inner);
        eth(UL_MAC, GW_MAC, 0x0800, &ipv4(os, od, 17, &udp(49152, 4789, &v)))
    }

    fn key_of(frame: &[u8], port: u16, dir: Direction) -> FlowKey {
        extract(frame, &Stack::parse(frame), port, dir).expect("test frame has a key")
    }

    fn compile(sp: &mut SlowPath, now: Instant, frame: &[u8], port: u16) -> (FlowKey, Verdict) {
        let dir = sp.role(port).expect("port has a role");
        let k = key_of(frame, port, dir);
        let v = sp.compile(now, frame, &Stack::parse(frame), &k, k.hash_with(7));
        (k, v)
    }

    fn forward(v: Verdict) -> (UnifiedFlow, Option<UnifiedFlow>) {
        match v {
            Verdict::Forward { forward, reverse } => (forward, reverse),
            Verdict::Deny { reason, .. } => panic!("denied: {reason}"),
        }
    }

    fn deny(v: Verdict) -> (DenyReason, bool) {
        match v {
            Verdict::Deny { reason, cache } => (reason, cache),
            Verdict::Forward { forward, .. } => panic!("forwarded: {:?}", forward.key),
        }
    }

    // ---- policies -------------------------------------------------------------------------

    fn rule(
        id: u32,
        priority: u32,
        dir: Option<Direction>,
        preds: Vec<Predicate>,
        action: Action,
    ) -> Rule {
        Rule { id, priority, dir, predicates: preds, action }
    }

    fn pred(field: crate::policy::Field, matcher: Matcher) -> Predicate {
        Predicate { field, matcher }
    }

    fn layer(name: &str, kind: LayerKind, rules: Vec<Rule>, default: Action) -> LayerPolicy {
        LayerPolicy { name: name.into(), kind, rules, default, mappings: Vec::new() }
    }

    fn remote_mapping() -> Mapping {
        Mapping {
            ca: IpAddr::from(REMOTE_IP),
            pa: IpAddr::from(PA_REMOTE),
            mac: REMOTE_MAC,
            vni: VNI,
        }
    }

    fn vnet_layer() -> LayerPolicy {
        let mut l = layer(
            "vnet",
            LayerKind::Vnet,
            vec![
                rule(
                    1,
                    10,
                    Some(Direction::Out),
                    vec![],
                    Action::Encap { kind: TunnelKind::Vxlan, vni: VNI },
                ),
                rule(2, 10, Some(Direction::In), vec![], Action::Decap),
            ],
            Action::Pass,
        );
        l.mappings.push(remote_mapping());
        l
    }

    fn vport(id: u16, port: u16, mac: Mac, ip: [u8; 4], layers: Vec<LayerPolicy>) -> VPortPolicy {
        VPortPolicy {
            id: VPortId(id),
            name: format!("vm{id}"),
            port,
            mac,
            ips: vec![IpAddr::from(ip)],
            vni: VNI,
            meter: None,
            layers,
        }
    }

    fn policy(a_layers: Vec<LayerPolicy>) -> Policy {
        Policy {
            underlay: Underlay {
                port: UL_PORT,
                ip: IpAddr::from(PA_LOCAL),
                mac: UL_MAC,
                gateway_mac: GW_MAC,
                vxlan_port: 4789,
                ttl: 64,
            },
            vports: vec![
                vport(1, A_PORT, A_MAC, A_IP, a_layers),
                vport(
                    2,
                    B_PORT,
                    B_MAC,
                    B_IP,
                    vec![layer("acl", LayerKind::Acl, vec![], Action::Allow)],
                ),
            ],
            meters: Vec::new(),
            queues: Vec::new(),
        }
    }

    fn slow(p: Policy) -> SlowPath {
        SlowPath::new(Arc::new(p), SlowPathConfig::default())
    }

    fn encap_to_remote() -> Op {
        Op::PushEncap(Encap {
            kind: TunnelKind::Vxlan,
            src_mac: UL_MAC,
            dst_mac: GW_MAC,
            src_ip: IpAddr::from(PA_LOCAL),
            dst_ip: IpAddr::from(PA_REMOTE),
            vni: VNI,
            ttl: 64,
            udp_dst: 4789,
        })
    }

    use crate::policy::Field as F;

    // ---- tests ----------------------------------------------------------------------------

    #[test]
    fn outbound_vxlan_encap_flow_has_exact_ops() {
        let mut p = policy(vec![
            layer("acl", LayerKind::Acl, vec![], Action::Allow),
            vnet_layer(),
            layer(
                "meter",
                LayerKind::Meter,
                vec![rule(1, 1, None, vec![], Action::Meter(MeterId(3)))],
                Action::Pass,
            ),
        ]);
        p.vports[0].meter = Some(MeterId(9));
        let mut sp = slow(p);
        assert_eq!(sp.role(A_PORT), Some(Direction::Out));
        assert_eq!(sp.role(UL_PORT), Some(Direction::In));
        assert_eq!(sp.role(9), None);
        let f = udp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 5000, 53);
        let (k, v) = compile(&mut sp, Instant::ZERO, &f, A_PORT);
        let (fwd, rev) = forward(v);
        assert_eq!(rev, None, "plain allow is not stateful");
        assert_eq!(fwd.key, k);
        assert_eq!(fwd.action.xpose.ops(), &[Op::SetEthDst(REMOTE_MAC), encap_to_remote()]);
        assert_eq!(fwd.action.egress, UL_PORT);
        assert_eq!(fwd.action.vport, VPortId(1));
        assert_eq!(fwd.action.meter, Some(MeterId(3)));
        assert_eq!(fwd.action.vport_meter, Some(MeterId(9)));
        assert!(!fwd.action.track_tcp);
        assert_eq!(sp.stats().conns, 0);
        // No mapping for the destination.
        let f = udp_frame(GW_MAC, A_MAC, A_IP, [10, 0, 0, 9], 5000, 53);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &f, A_PORT).1),
            (DenyReason::NoMapping, true)
        );
        let s = sp.stats();
        assert_eq!((s.compiled, s.denied), (1, 1));
    }

    #[test]
    fn outbound_arp_is_encapsulated_by_target_address() {
        let mut sp = slow(policy(vec![vnet_layer()]));
        let mut arp = vec![0, 1, 8, 0, 6, 4, 0, 1];
        arp.extend_from_slice(&A_MAC);
        arp.extend_from_slice(&A_IP);
        arp.extend_from_slice(&[0; 6]);
        arp.extend_from_slice(&REMOTE_IP);
        let f = eth([0xff; 6], A_MAC, 0x0806, &arp);
        let (k, v) = compile(&mut sp, Instant::ZERO, &f, A_PORT);
        assert!(k.is_arp());
        let (fwd, _) = forward(v);
        assert_eq!(fwd.action.xpose.ops(), &[Op::SetEthDst(REMOTE_MAC), encap_to_remote()]);
    }

    #[test]
    fn inbound_decap_checks_vni_and_outer_source() {
        let mut sp =
            slow(policy(vec![layer("acl", LayerKind::Acl, vec![], Action::Allow), vnet_layer()]));
        let inner = udp_frame(A_MAC, REMOTE_MAC, REMOTE_IP, A_IP, 53, 5000);
        let f = vxlan(PA_REMOTE, PA_LOCAL, VNI, &inner);
        let (k, v) = compile(&mut sp, Instant::ZERO, &f, UL_PORT);
        assert!(k.is_tunnel());
        let (fwd, rev) = forward(v);
        assert_eq!(rev, None);
        assert_eq!(fwd.action.xpose.ops(), &[Op::PopOuter, Op::SetEthDst(A_MAC)]);
        assert_eq!((fwd.action.egress, fwd.action.vport), (A_PORT, VPortId(1)));
        // Outer source is not the PA mapped to the inner source.
        let f = vxlan([192, 0, 2, 99], PA_LOCAL, VNI, &inner);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &f, UL_PORT).1),
            (DenyReason::Spoofed, true)
        );
        // Inner source not mapped at all.
        let inner2 = udp_frame(A_MAC, REMOTE_MAC, [10, 0, 0, 77], A_IP, 53, 5000);
        let f = vxlan(PA_REMOTE, PA_LOCAL, VNI, &inner2);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &f, UL_PORT).1),
            (DenyReason::Spoofed, true)
        );
        // Another VNI: no vPort there.
        let f = vxlan(PA_REMOTE, PA_LOCAL, VNI + 1, &inner);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &f, UL_PORT).1),
            (DenyReason::NoVPort, true)
        );
        // Plain inbound to an address nobody owns.
        let f = udp_frame(UL_MAC, GW_MAC, [8, 8, 8, 8], [10, 9, 9, 9], 53, 5000);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &f, UL_PORT).1),
            (DenyReason::NoVPort, true)
        );
    }

    /// `inner` in NVGRE (GRE key = VSID << 8 | flow id) from `os` to `od`.
    fn nvgre(os: [u8; 4], od: [u8; 4], vsid: u32, inner: &[u8]) -> Vec<u8> {
        let mut g = vec![0x20, 0x00, 0x65, 0x58];
        g.extend_from_slice(&(vsid << 8 | 0x17).to_be_bytes());
        g.extend_from_slice(inner);
        eth(UL_MAC, GW_MAC, 0x0800, &ipv4(os, od, 47, &g))
    }

    #[test]
    fn inbound_stateful_nvgre_reply_is_re_encapsulated() {
        let acl = layer(
            "acl",
            LayerKind::Acl,
            vec![rule(
                3,
                1,
                Some(Direction::In),
                vec![pred(F::L4Dst, Matcher::Exact(Value::Int(22)))],
                Action::AllowStateful,
            )],
            Action::Deny,
        );
        let mut sp = slow(policy(vec![acl, vnet_layer()]));
        let inner = tcp_frame(A_MAC, REMOTE_MAC, REMOTE_IP, A_IP, 50000, 22, tcp::flags::SYN);
        let f = nvgre(PA_REMOTE, PA_LOCAL, VNI, &inner);
        let (k, v) = compile(&mut sp, Instant::ZERO, &f, UL_PORT);
        assert_eq!(k.vni(), Some(VNI));
        let (fwd, rev) = forward(v);
        assert_eq!(fwd.action.xpose.ops(), &[Op::PopOuter, Op::SetEthDst(A_MAC)]);
        let rev = rev.expect("stateful");
        let reply = tcp_frame(REMOTE_MAC, A_MAC, A_IP, REMOTE_IP, 22, 50000, 0x12);
        assert_eq!(rev.key, key_of(&reply, A_PORT, Direction::Out));
        let Op::PushEncap(e) = encap_to_remote() else { unreachable!() };
        let back = Op::PushEncap(Encap { kind: TunnelKind::Nvgre, ..e });
        assert_eq!(rev.action.xpose.ops(), &[Op::SetEthDst(REMOTE_MAC), back]);
        assert_eq!(rev.action.egress, UL_PORT);
        // The VM's own reply, compiled: the reverse flow, although its outbound ACL denies all.
        let (f2, _) = forward(compile(&mut sp, Instant::ZERO, &reply, A_PORT).1);
        assert_eq!(f2, rev);
        // A VM sending its own VXLAN is refused.
        let own = vxlan(A_IP, REMOTE_IP, 7, &udp_frame(A_MAC, REMOTE_MAC, A_IP, REMOTE_IP, 1, 2));
        let mut own = own;
        own[6..12].copy_from_slice(&A_MAC);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &own, A_PORT).1),
            (DenyReason::UnsupportedTunnel, true)
        );
    }

    #[test]
    fn tunnelled_packet_no_layer_decapsulates_is_spoofed() {
        let mut sp = slow(policy(vec![layer("acl", LayerKind::Acl, vec![], Action::Allow)]));
        let inner = udp_frame(A_MAC, REMOTE_MAC, REMOTE_IP, A_IP, 53, 5000);
        let f = vxlan(PA_REMOTE, PA_LOCAL, VNI, &inner);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &f, UL_PORT).1),
            (DenyReason::Spoofed, true)
        );
    }

    #[test]
    fn acl_deny_names_layer_and_rule() {
        let acl = layer(
            "acl",
            LayerKind::Acl,
            vec![
                rule(
                    7,
                    10,
                    None,
                    vec![pred(F::L4Dst, Matcher::Exact(Value::Int(53)))],
                    Action::Deny,
                ),
                rule(
                    8,
                    20,
                    None,
                    vec![pred(F::IpProto, Matcher::Exact(Value::Int(17)))],
                    Action::Allow,
                ),
            ],
            Action::Deny,
        );
        let mut sp = slow(policy(vec![
            layer("meter", LayerKind::Meter, vec![], Action::Pass),
            acl,
            vnet_layer(),
        ]));
        let f = udp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 5000, 53);
        let r = deny(compile(&mut sp, Instant::ZERO, &f, A_PORT).1);
        assert_eq!(r, (DenyReason::Acl { layer: 1, rule: Some(7) }, true));
        assert_eq!(r.0.name(), "acl");
        // UDP elsewhere: allowed by rule 8.
        let f = udp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 5000, 54);
        forward(compile(&mut sp, Instant::ZERO, &f, A_PORT).1);
        // TCP: the layer default denies.
        let f = tcp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 5000, 80, tcp::flags::SYN);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &f, A_PORT).1),
            (DenyReason::Acl { layer: 1, rule: None }, true)
        );
        assert_eq!(sp.stats().conns, 0, "a denied SYN opens nothing");
    }

    /// ACL allowing outbound TCP to port 80 statefully, and nothing inbound.
    fn stateful_policy() -> Policy {
        let acl = layer(
            "acl",
            LayerKind::Acl,
            vec![rule(
                1,
                10,
                Some(Direction::Out),
                vec![pred(F::L4Dst, Matcher::Exact(Value::Int(80)))],
                Action::AllowStateful,
            )],
            Action::Deny,
        );
        policy(vec![acl, vnet_layer()])
    }

    #[test]
    fn stateful_allow_installs_the_exact_reverse_flow() {
        let mut sp = slow(stateful_policy());
        let syn = tcp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 40000, 80, tcp::flags::SYN);
        let (k, v) = compile(&mut sp, Instant::ZERO, &syn, A_PORT);
        let (fwd, rev) = forward(v);
        let rev = rev.expect("stateful");
        assert_eq!(fwd.key, k);
        assert!(fwd.action.track_tcp && rev.action.track_tcp);
        assert_eq!(fwd.action.xpose.ops(), &[Op::SetEthDst(REMOTE_MAC), encap_to_remote()]);
        // The reply as it really arrives: tunnelled from the remote PA.
        let reply_inner = tcp_frame(
            A_MAC,
            REMOTE_MAC,
            REMOTE_IP,
            A_IP,
            80,
            40000,
            tcp::flags::SYN | tcp::flags::ACK,
        );
        let reply = vxlan(PA_REMOTE, PA_LOCAL, VNI, &reply_inner);
        let rk = key_of(&reply, UL_PORT, Direction::In);
        assert_eq!(rev.key, rk);
        assert_eq!(rev.action.xpose.ops(), &[Op::PopOuter, Op::SetEthDst(A_MAC)]);
        assert_eq!((rev.action.egress, rev.action.vport), (A_PORT, VPortId(1)));
        let s = sp.stats();
        assert_eq!((s.conns, s.half_open), (1, 1));
        // The reply, compiled on a worker that lacks it, gets the reverse flow although the
        // inbound ACL denies everything.
        let (f2, r2) = forward(sp.compile(Instant::ZERO, &reply, &Stack::parse(&reply), &rk, 1));
        assert_eq!(f2, rev);
        assert_eq!(r2, Some(fwd));
        assert_eq!(sp.stats().reverse_hits, 1);
        assert_eq!(sp.stats().half_open, 1, "SYN-ACK: still half-open");
        // A non-matching inbound packet (another source port) is denied by the inbound ACL.
        let other_inner = tcp_frame(A_MAC, REMOTE_MAC, REMOTE_IP, A_IP, 81, 40000, tcp::flags::SYN);
        let other = vxlan(PA_REMOTE, PA_LOCAL, VNI, &other_inner);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &other, UL_PORT).1),
            (DenyReason::Acl { layer: 0, rule: None }, true)
        );
    }

    #[test]
    fn dnat_backend_is_stable_per_flow_and_spread() {
        let vip = v4(203, 0, 113, 10);
        let backends = vec![
            (IpAddr::from(A_IP), Some(8080)),
            (v4(10, 0, 0, 3), Some(8080)),
            (v4(10, 0, 0, 4), None),
        ];
        let nat = layer(
            "nat",
            LayerKind::Nat,
            vec![rule(
                1,
                1,
                Some(Direction::In),
                vec![
                    pred(F::IpDst, Matcher::Exact(Value::Ip(vip))),
                    pred(F::L4Dst, Matcher::Exact(Value::Int(80))),
                ],
                Action::Dnat { backends: backends.clone() },
            )],
            Action::Pass,
        );
        // The VNET layer's decap rule matches plain VIP traffic too: nothing to strip.
        let mut sp = slow(policy(vec![
            layer("acl", LayerKind::Acl, vec![], Action::Allow),
            nat,
            vnet_layer(),
        ]));
        let mut seen = [0usize; 3];
        for i in 0..64u16 {
            let f = tcp_frame(
                UL_MAC,
                GW_MAC,
                [198, 51, 100, 7],
                o4(vip),
                30000 + i,
                80,
                tcp::flags::SYN,
            );
            let k = key_of(&f, UL_PORT, Direction::In);
            let h = k.hash_with(99);
            let want = (h % 3) as usize;
            seen[want] += 1;
            let (fwd, rev) = forward(sp.compile(Instant::ZERO, &f, &Stack::parse(&f), &k, h));
            let (ip, port) = backends[want];
            let mut ops = vec![Op::SetEthDst(A_MAC), Op::SetIpDst(ip)];
            if let Some(p) = port {
                ops.push(Op::SetL4Dst(p));
            }
            assert_eq!(fwd.action.xpose.ops(), &ops[..]);
            assert_eq!(fwd.action.egress, A_PORT);
            // The reply from the DIP, as the VM sends it.
            let rf = tcp_frame(
                GW_MAC,
                A_MAC,
                o4(ip),
                [198, 51, 100, 7],
                port.unwrap_or(80),
                30000 + i,
                0x12,
            );
            let rev = rev.expect("dnat is stateful");
            assert_eq!(rev.key, key_of(&rf, A_PORT, Direction::Out));
            let mut rops = vec![Op::SetEthSrc(UL_MAC), Op::SetEthDst(GW_MAC), Op::SetIpSrc(vip)];
            if port.is_some() {
                rops.push(Op::SetL4Src(80));
            }
            assert_eq!(rev.action.xpose.ops(), &rops[..]);
            assert_eq!(rev.action.egress, UL_PORT);
            // Stable: the same flow compiled again (retransmitted SYN) gets the same backend.
            let (again, _) = forward(sp.compile(Instant::ZERO, &f, &Stack::parse(&f), &k, h));
            assert_eq!(again, fwd);
        }
        assert!(seen.iter().all(|&n| n > 5), "backends unevenly used: {seen:?}");
        // A VIP port the rule does not cover finds no vPort.
        let f = tcp_frame(UL_MAC, GW_MAC, [198, 51, 100, 7], o4(vip), 30000, 81, tcp::flags::SYN);
        assert_eq!(deny(compile(&mut sp, Instant::ZERO, &f, UL_PORT).1).0, DenyReason::NoVPort);
    }

    fn snat_policy(lo: u16, hi: u16) -> Policy {
        let nat = layer(
            "nat",
            LayerKind::Nat,
            vec![rule(
                1,
                1,
                Some(Direction::Out),
                vec![],
                Action::Snat { ip: v4(198, 51, 100, 1), ports: (lo, hi) },
            )],
            Action::Pass,
        );
        let route = layer(
            "route",
            LayerKind::Route,
            vec![rule(
                1,
                1,
                None,
                vec![pred(F::IpDst, Matcher::Prefix(v4(0, 0, 0, 0), 0))],
                Action::Route(RouteTarget::Uplink),
            )],
            Action::Pass,
        );
        policy(vec![layer("acl", LayerKind::Acl, vec![], Action::Allow), nat, route])
    }

    #[test]
    fn snat_ports_are_unique_and_freed_on_close() {
        let mut sp = slow(snat_policy(1024, 1026));
        let mut keys = Vec::new();
        for i in 0..3u16 {
            let f = udp_frame(GW_MAC, A_MAC, A_IP, [8, 8, 8, 8], 5000 + i, 53);
            let (k, v) = compile(&mut sp, Instant::ZERO, &f, A_PORT);
            let (fwd, rev) = forward(v);
            assert_eq!(
                fwd.action.xpose.ops(),
                &[
                    Op::SetEthSrc(UL_MAC),
                    Op::SetEthDst(GW_MAC),
                    Op::SetIpSrc(v4(198, 51, 100, 1)),
                    Op::SetL4Src(1024 + i),
                ]
            );
            let rev = rev.expect("snat is stateful");
            let reply = udp_frame(UL_MAC, GW_MAC, [8, 8, 8, 8], [198, 51, 100, 1], 53, 1024 + i);
            assert_eq!(rev.key, key_of(&reply, UL_PORT, Direction::In));
            assert_eq!(
                rev.action.xpose.ops(),
                &[Op::SetEthDst(A_MAC), Op::SetIpDst(IpAddr::from(A_IP)), Op::SetL4Dst(5000 + i)]
            );
            keys.push((k, rev.key));
        }
        assert_eq!(sp.stats().snat_in_use, 3);
        let f = udp_frame(GW_MAC, A_MAC, A_IP, [8, 8, 8, 8], 6000, 53);
        assert_eq!(
            deny(compile(&mut sp, Instant::ZERO, &f, A_PORT).1),
            (DenyReason::SnatExhausted, false)
        );
        // The reverse entry of the second flow ages out: the connection goes, its port is free.
        let mut removals = Vec::new();
        sp.on_evicted(&keys[1].1, &mut removals);
        assert_eq!(removals, vec![keys[1].0]);
        let s = sp.stats();
        assert_eq!((s.snat_in_use, s.conns, s.closed), (2, 2, 1));
        let (_, v) = compile(&mut sp, Instant::ZERO, &f, A_PORT);
        let (fwd, _) = forward(v);
        assert_eq!(fwd.action.xpose.ops().last(), Some(&Op::SetL4Src(1025)));
    }

    /// `f` after `x` (via the real transposition code).
    fn apply(x: &Transposition, f: &[u8]) -> Vec<u8> {
        let mut p = snic_pipeline::PacketBuf::from_frame(f);
        p.meta.stack = Stack::parse(f);
        x.apply(&mut p, 0x1234).expect("transposition applies");
        p.data().to_vec()
    }

    /// The reply a peer sends back to frame `f`: MACs, IPv4 addresses and L4 ports swapped at
    /// every level, except the outer UDP ports of a tunnel (the reply goes to UDP 4789 too).
    /// Swapping keeps every checksum valid.
    fn reply_to(f: &[u8]) -> Vec<u8> {
        let mut r = f.to_vec();
        let st = Stack::parse(f);
        let mut swap = |a: usize, b: usize, n: usize| {
            for i in 0..n {
                r.swap(a + i, b + i);
            }
        };
        let levels = [Some((st.outer, st.inner.is_some())), st.inner.map(|h| (h, false))];
        for (h, tunnel) in levels.into_iter().flatten() {
            if let Some(e) = h.eth {
                swap(usize::from(e), usize::from(e) + 6, 6);
            }
            if let Some((Layer::Ipv4, o)) = h.l3 {
                swap(usize::from(o) + 12, usize::from(o) + 16, 4);
            }
            if let Some((Layer::Udp | Layer::Tcp, o)) = h.l4
                && !tunnel
            {
                swap(usize::from(o), usize::from(o) + 2, 2);
            }
        }
        r
    }

    #[test]
    fn applied_forward_and_reverse_flows_round_trip_through_snat_and_vxlan() {
        let nat = layer(
            "nat",
            LayerKind::Nat,
            vec![rule(
                1,
                1,
                Some(Direction::Out),
                vec![],
                Action::Snat { ip: IpAddr::from([10, 0, 0, 100]), ports: (2000, 2010) },
            )],
            Action::Pass,
        );
        let mut sp = slow(policy(vec![
            layer("acl", LayerKind::Acl, vec![], Action::Allow),
            nat,
            vnet_layer(),
        ]));
        let f = udp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 5000, 53);
        let (k, v) = compile(&mut sp, Instant::ZERO, &f, A_PORT);
        let (fwd, rev) = forward(v);
        let rev = rev.expect("snat is stateful");
        // What leaves: VXLAN to the remote PA, inner source translated.
        let out = apply(&fwd.action.xpose, &f);
        let wire = key_of(&out, UL_PORT, Direction::Out);
        assert_eq!(wire.outer_dst_ip(), Some(IpAddr::from(PA_REMOTE)));
        assert_eq!(wire.vni(), Some(VNI));
        assert_eq!((wire.src_ip(), wire.src_port), (IpAddr::from([10, 0, 0, 100]), 2000));
        // The peer's reply to exactly those bytes hits the reverse flow ...
        let back = reply_to(&out);
        assert_eq!(key_of(&back, UL_PORT, Direction::In), rev.key);
        assert_eq!(rev.key, wire.mirror(UL_PORT));
        // ... which delivers to the VM the reply of its own packet.
        let delivered = apply(&rev.action.xpose, &back);
        assert_eq!(key_of(&delivered, A_PORT, Direction::In), k.mirror(A_PORT));
        assert_eq!(&delivered[..6], &A_MAC);
    }

    #[test]
    fn route_longest_prefix_wins_and_targets_apply() {
        let route = layer(
            "route",
            LayerKind::Route,
            vec![
                rule(
                    1,
                    1,
                    None,
                    vec![pred(F::IpDst, Matcher::Prefix(v4(10, 0, 0, 0), 8))],
                    Action::Route(RouteTarget::Uplink),
                ),
                rule(
                    2,
                    100,
                    None,
                    vec![pred(F::IpDst, Matcher::Prefix(v4(10, 1, 0, 0), 16))],
                    Action::Route(RouteTarget::Drop),
                ),
                rule(
                    3,
                    200,
                    None,
                    vec![pred(F::IpDst, Matcher::Prefix(v4(10, 1, 2, 0), 24))],
                    Action::Route(RouteTarget::VPort(VPortId(2))),
                ),
                rule(
                    4,
                    1,
                    None,
                    vec![pred(F::IpDst, Matcher::Prefix(v4(10, 0, 0, 2), 32))],
                    Action::Route(RouteTarget::Vnet),
                ),
            ],
            Action::Pass,
        );
        let mut sp = slow(policy(vec![route, vnet_layer()]));
        let go = |sp: &mut SlowPath, d: [u8; 4]| {
            compile(sp, Instant::ZERO, &udp_frame(GW_MAC, A_MAC, A_IP, d, 1, 2), A_PORT).1
        };
        let (fwd, _) = forward(go(&mut sp, [10, 2, 0, 1]));
        assert_eq!(fwd.action.xpose.ops(), &[Op::SetEthSrc(UL_MAC), Op::SetEthDst(GW_MAC)]);
        assert_eq!(fwd.action.egress, UL_PORT);
        assert_eq!(deny(go(&mut sp, [10, 1, 9, 9])), (DenyReason::RouteDrop, true));
        let (fwd, _) = forward(go(&mut sp, [10, 1, 2, 3]));
        assert_eq!(fwd.action.xpose.ops(), &[Op::SetEthDst(B_MAC)]);
        assert_eq!((fwd.action.egress, fwd.action.vport), (B_PORT, VPortId(1)));
        let (fwd, _) = forward(go(&mut sp, REMOTE_IP));
        assert_eq!(fwd.action.xpose.ops(), &[Op::SetEthDst(REMOTE_MAC), encap_to_remote()]);
        assert_eq!(deny(go(&mut sp, [11, 0, 0, 1])), (DenyReason::NoRoute, true));
    }

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
    fn reset_removes_at_once_and_rst_first_is_invalid() {
        let mut sp = slow(stateful_policy());
        let now = Instant::from_secs(1);
        let syn = tcp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 40001, 80, tcp::flags::SYN);
        let (k, v) = compile(&mut sp, now, &syn, A_PORT);
        let rk = forward(v).1.expect("stateful").key;
        let mut rem = Vec::new();
        sp.on_tcp(now, &rk, tcp::flags::RST, &mut rem);
        assert_eq!(sp.poll_timeout(), Some(now));
        sp.handle_timeout(now, &mut rem);
        assert_eq!(rem.len(), 2);
        assert!(rem.contains(&k) && rem.contains(&rk));
        assert_eq!(sp.stats().half_open, 0);
        let rst = tcp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 40002, 80, tcp::flags::RST);
        assert_eq!(deny(compile(&mut sp, now, &rst, A_PORT).1), (DenyReason::TcpInvalid, false));
        // An invalid segment of a known connection is denied, not cached, and counted.
        let (k, _) = compile(&mut sp, now, &syn, A_PORT);
        sp.on_tcp(now, &k, tcp::flags::ACK, &mut rem);
        let bad =
            tcp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 40001, 80, tcp::flags::SYN | tcp::flags::FIN);
        assert_eq!(deny(compile(&mut sp, now, &bad, A_PORT).1), (DenyReason::TcpInvalid, false));
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
        let Some(Op::PushEncap(e)) = fwd.action.xpose.ops().last() else { panic!("no encap") };
        assert_eq!(e.dst_ip, v4(192, 0, 2, 3));
        let rev = rev.expect("stateful");
        assert_eq!(rev.key.outer_src_ip(), Some(v4(192, 0, 2, 3)));
        assert_eq!(sp.stats().half_open, 1);
        // The new reply key reaches the connection; the old one does not.
        let mut rem = Vec::new();
        sp.on_tcp(Instant::ZERO, &rev.key, tcp::flags::RST, &mut rem);
        sp.handle_timeout(Instant::ZERO, &mut rem);
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
    }

    /// One vPort with every kind of layer: all traffic stateful; SNAT to the internet, DNAT
    /// from a VIP, VXLAN inside 10/8.
    fn full_policy() -> Policy {
        let vip = v4(203, 0, 113, 10);
        let nat = layer(
            "nat",
            LayerKind::Nat,
            vec![
                rule(
                    1,
                    1,
                    Some(Direction::Out),
                    vec![pred(F::IpDst, Matcher::Prefix(v4(10, 0, 0, 0), 8))],
                    Action::Pass,
                ),
                rule(
                    2,
                    2,
                    Some(Direction::Out),
                    vec![],
                    Action::Snat { ip: v4(198, 51, 100, 1), ports: (1024, 65535) },
                ),
                rule(
                    3,
                    1,
                    Some(Direction::In),
                    vec![pred(F::IpDst, Matcher::Exact(Value::Ip(vip)))],
                    Action::Dnat { backends: vec![(IpAddr::from(A_IP), Some(8080))] },
                ),
            ],
            Action::Pass,
        );
        let route = layer(
            "route",
            LayerKind::Route,
            vec![
                rule(
                    1,
                    1,
                    None,
                    vec![pred(F::IpDst, Matcher::Prefix(v4(10, 0, 0, 0), 8))],
                    Action::Route(RouteTarget::Vnet),
                ),
                rule(
                    2,
                    1,
                    None,
                    vec![pred(F::IpDst, Matcher::Prefix(v4(0, 0, 0, 0), 0))],
                    Action::Route(RouteTarget::Uplink),
                ),
            ],
            Action::Pass,
        );
        policy(vec![
            layer("acl", LayerKind::Acl, vec![], Action::AllowStateful),
            nat,
            route,
            vnet_layer(),
            layer("meter", LayerKind::Meter, vec![], Action::Pass),
        ])
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

        /// For every kind of stateful flow, the real transpositions compose: the peer's reply to
        /// the bytes the forward flow emits carries the reverse flow's key, and the reverse flow
        /// turns it into the reply of the original packet, delivered where that came from.
        #[test]
        fn reverse_flow_undoes_forward_flow(
            scenario in 0u8..3,
            tcp in any::<bool>(),
            sport in 1u16..,
            dport in 1u16..,
            public in (11u32..=99).prop_flat_map(|a| (Just(a), any::<u32>())),
        ) {
            let mut sp = slow(full_policy());
            let l4 = |s: [u8; 4], d: [u8; 4], dm: Mac, sm: Mac| {
                if tcp {
                    tcp_frame(dm, sm, s, d, sport, dport, tcp::flags::SYN)
                } else {
                    udp_frame(dm, sm, s, d, sport, dport)
                }
            };
            let public = (public.0 << 24 | public.1 & 0x00ff_ffff).to_be_bytes();
            let (f, port, dir_back) = match scenario {
                // VM to a remote VM (VXLAN).
                0 => (l4(A_IP, REMOTE_IP, GW_MAC, A_MAC), A_PORT, Direction::In),
                // VM to the internet (SNAT, uplink).
                1 => (l4(A_IP, public, GW_MAC, A_MAC), A_PORT, Direction::In),
                // Internet client to the VIP (DNAT).
                _ => (l4(public, [203, 0, 113, 10], UL_MAC, GW_MAC), UL_PORT, Direction::Out),
            };
            let (k, v) = compile(&mut sp, Instant::ZERO, &f, port);
            let (fwd, rev) = forward(v);
            let rev = rev.expect("everything is stateful here");
            prop_assert_eq!(fwd.action.track_tcp, tcp);
            let out = apply(&fwd.action.xpose, &f);
            let reply = reply_to(&out);
            let arrive = rev.key.port;
            prop_assert_eq!(key_of(&reply, arrive, rev.key.direction()), rev.key);
            let back = apply(&rev.action.xpose, &reply);
            prop_assert_eq!(rev.action.egress, port);
            prop_assert_eq!(key_of(&back, port, dir_back), k.mirror(port));
            prop_assert_eq!(sp.stats().conns, 1);
        }


        /// The port pool hands out each free port of the range once, in any order of
        /// allocations and frees, and never a port outside the range.
        #[test]
        fn port_pool_matches_a_set(ops in proptest::collection::vec((any::<bool>(), 0u16..40), 1..300)) {
            let (lo, hi) = (1000u16, 1031u16);
            let mut pool = PortPool::new();
            let mut model = std::collections::BTreeSet::new();
            for (alloc, pick) in ops {
                if alloc {
                    match pool.peek(lo, hi) {
                        Some(p) => {
                            prop_assert!((lo..=hi).contains(&p));
                            prop_assert!(model.insert(p), "port {} handed out twice", p);
                            pool.mark(p);
                        }
                        None => prop_assert_eq!(model.len(), usize::from(hi - lo + 1)),
                    }
                } else {
                    let p = lo + pick;
                    pool.free(p);
                    model.remove(&p);
                }
                prop_assert_eq!(pool.used as usize, model.len());
            }
        }

        /// SNAT bindings of live connections are unique and counted, whatever the order of
        /// new flows and evictions.
        #[test]
        fn snat_bindings_stay_unique(ops in proptest::collection::vec((any::<bool>(), 0u16..24), 1..120)) {
            let mut sp = slow(snat_policy(3000, 3015));
            let mut live: std::collections::HashMap<u16, (FlowKey, FlowKey, u16)> = Default::default();
            for (open, sport) in ops {
                let f = udp_frame(GW_MAC, A_MAC, A_IP, [8, 8, 8, 8], 7000 + sport, 53);
                let k = key_of(&f, A_PORT, Direction::Out);
                if open {
                    match sp.compile(Instant::ZERO, &f, &Stack::parse(&f), &k, 0) {
                        Verdict::Forward { forward, reverse: Some(rev) } => {
                            let port = rev.key.dst_port;
                            if let Some(old) = live.get(&sport) {
                                prop_assert_eq!(old.2, port, "a live flow keeps its port");
                            }
                            live.insert(sport, (forward.key, rev.key, port));
                        }
                        Verdict::Deny { reason, .. } => {
                            prop_assert_eq!(reason, DenyReason::SnatExhausted);
                            prop_assert_eq!(live.len(), 16);
                        }
                        v => prop_assert!(false, "unexpected {:?}", v),
                    }
                } else if let Some((fk, _, _)) = live.remove(&sport) {
                    let mut rem = Vec::new();
                    sp.on_evicted(&fk, &mut rem);
                    prop_assert_eq!(rem.len(), 1);
                }
                let ports: std::collections::HashSet<u16> = live.values().map(|v| v.2).collect();
                prop_assert_eq!(ports.len(), live.len());
                prop_assert_eq!(sp.stats().snat_in_use as usize, live.len());
                prop_assert_eq!(sp.stats().conns as usize, live.len());
            }
        }
    }
}
