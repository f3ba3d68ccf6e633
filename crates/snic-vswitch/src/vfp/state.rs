//! The slow path's state as one process hands it to the next (a hitless upgrade): every
//! connection (its keys, what its flows are compiled from, its SNAT binding and TCP state), the
//! SNAT pools' search cursors and the cumulative counters. [`SlowPath::export_state`] writes
//! it; [`SlowPath::import_state`] builds a new slow path from it. The engine wraps both
//! ([`crate::engine::VSwitch::export_state`]); this module knows nothing of the flow tables.
//!
//! Times are never stored as instants, since each process's clock has its own origin: a TCP
//! state keeps ages ([`TcpSnapshot`]), a half-open period its remaining time, a connection how
//! long it had been idle. The importer rebases them on its own `now`.
//!
//! Import is all or nothing and trusts nothing: it builds a new slow path with the policy it is
//! given and walks every connection through it again, as a policy change does, with the SNAT
//! binding the connection holds. A connection the policy would not keep, whose reply key,
//! statefulness or SNAT binding is not what the policy gives (a port outside the rule's range,
//! another address), whose keys are already taken, or whose SNAT port is already bound fails
//! the whole import; the caller's slow path is untouched.
//!
//! A carried connection has no cached flow in the new process, and idle aging of cached flows
//! is what removes connections ([`SlowPath::on_evicted`]). Until a packet compiles it again, a
//! carried connection is therefore *adopted*: it is removed when what was left of the idle
//! timeout at export runs out (idle for X before export, it goes `idle_timeout - X` after
//! import, as it would have in the old process). Once compiled, its cached flows age it as
//! usual.

use core::fmt;
use core::net::{IpAddr, Ipv6Addr};
use core::time::Duration;
use std::cmp::Reverse;
use std::sync::Arc;

use snic_time::Instant;
use snic_wire::stack::Layer;

use super::conn::{Conn, NONE, TcpSide, TimerKind, alloc};
use super::layer::Origin;
use super::snat::{NO_POOL, SnatBinding};
use super::{DenyReason, SlowPath, SlowPathConfig, SlowPathStats};
use crate::gft::GftError;
use crate::key::FlowKey;
use crate::policy::validate::ConfigError;
use crate::policy::{Mac, Policy};
use crate::tcp::{TcpConn, TcpSnapshot};

/// A [`FlowKey`] as carried: addresses as IPv6 (IPv4 ones IPv4-mapped, as in the key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeyState {
    /// Inner source address.
    pub src: Ipv6Addr,
    /// Inner destination address.
    pub dst: Ipv6Addr,
    /// Outer source address (`::` for a plain packet).
    pub outer_src: Ipv6Addr,
    /// Outer destination address (`::` for a plain packet).
    pub outer_dst: Ipv6Addr,
    /// VNI / VSID (0 for a plain packet).
    pub vni: u32,
    /// L4 source port (or ICMP identifier, type and code).
    pub src_port: u16,
    /// L4 destination port (or ICMP identifier).
    pub dst_port: u16,
    /// Pipeline port of arrival.
    pub port: u16,
    /// IP protocol (0 for ARP).
    pub proto: u8,
    /// [`KeyFlags`](crate::key::KeyFlags) bits.
    pub flags: u8,
}

impl From<&FlowKey> for KeyState {
    fn from(k: &FlowKey) -> KeyState {
        KeyState {
            src: Ipv6Addr::from(k.src),
            dst: Ipv6Addr::from(k.dst),
            outer_src: Ipv6Addr::from(k.outer_src),
            outer_dst: Ipv6Addr::from(k.outer_dst),
            vni: k.vni,
            src_port: k.src_port,
            dst_port: k.dst_port,
            port: k.port,
            proto: k.proto,
            flags: k.flags,
        }
    }
}

impl KeyState {
    /// The flow key.
    pub fn key(&self) -> FlowKey {
        FlowKey {
            src: self.src.octets(),
            dst: self.dst.octets(),
            outer_src: self.outer_src.octets(),
            outer_dst: self.outer_dst.octets(),
            vni: self.vni,
            src_port: self.src_port,
            dst_port: self.dst_port,
            port: self.port,
            proto: self.proto,
            flags: self.flags,
            reserved: 0,
        }
    }
}

/// A connection's SNAT port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SnatState {
    /// Public address.
    pub ip: IpAddr,
    /// IP protocol (6 or 17).
    pub proto: u8,
    /// Public port.
    pub port: u16,
}

/// The TCP part of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TcpSideState {
    /// The tracked state, its times as ages.
    pub conn: TcpSnapshot,
    /// Nanoseconds left of the current half-open period (0 when over).
    pub half_open_left_ns: u64,
    /// Half-open for longer than the half-open timeout: presumed established.
    pub presumed_open: bool,
}

/// One connection: what its flows are compiled from, its keys, binding and TCP state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConnState {
    /// The forward key (its first packet's).
    pub fwd: KeyState,
    /// The key of its replies.
    pub rev: KeyState,
    /// The first packet's flow hash (SLB/ECMP choices).
    pub flow_hash: u64,
    /// The first packet's Ethernet source.
    pub eth_src: Mac,
    /// The first packet's Ethernet destination.
    pub eth_dst: Mac,
    /// The first packet's EtherType.
    pub ethertype: u16,
    /// The first packet's tunnel (a [`Layer::name`]: `"vxlan"`, `"nvgre"`), if any.
    pub tunnel: Option<String>,
    /// The replies are let through by this connection.
    pub stateful: bool,
    /// Its SNAT port, if any.
    pub snat: Option<SnatState>,
    /// Its TCP state (TCP connections).
    pub tcp: Option<TcpSideState>,
    /// Nanoseconds since the latest packet of either direction (as far as the exporter knows).
    pub idle_ns: u64,
}

/// A SNAT pool: one (public address, protocol). Its used ports are the connections' bindings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SnatPoolState {
    /// Public address.
    pub ip: IpAddr,
    /// IP protocol.
    pub proto: u8,
    /// Where the next free-port search starts.
    pub cursor: u16,
}

/// The slow path's state ([`SlowPath::export_state`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SlowPathState {
    /// Every connection, in slot order.
    pub conns: Vec<ConnState>,
    /// Every SNAT pool, in creation order.
    pub snat_pools: Vec<SnatPoolState>,
    /// The counters (the gauges among them are recomputed on import).
    pub stats: SlowPathStats,
}

/// What is wrong with one carried connection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnProblem {
    /// Its forward and reply keys are equal, or one belongs to an earlier connection.
    DuplicateKey,
    /// Its tunnel is not a header this build knows.
    UnknownTunnel(String),
    /// The policy denies its first packet.
    Denied(DenyReason),
    /// The policy would keep no connection for it (neither stateful nor TCP).
    NotKept,
    /// Its reply key is not the one the policy gives.
    ReplyKey,
    /// Its statefulness is not the one the policy gives.
    Stateful,
    /// Its SNAT binding is not the one the policy gives (a port outside the rule's range,
    /// another address, a binding where none is due or none where one is).
    SnatBinding,
    /// Its SNAT port is bound by an earlier connection.
    SnatTaken,
    /// A TCP connection without TCP state, or TCP state on another protocol.
    TcpState,
    /// The connection table is full.
    TableFull,
}

impl fmt::Display for ConnProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnProblem::DuplicateKey => f.write_str("its key is taken"),
            ConnProblem::UnknownTunnel(t) => write!(f, "unknown tunnel {t:?}"),
            ConnProblem::Denied(r) => write!(f, "the policy denies it ({r})"),
            ConnProblem::NotKept => f.write_str("the policy keeps no connection for it"),
            ConnProblem::ReplyKey => f.write_str("its reply key is not the policy's"),
            ConnProblem::Stateful => f.write_str("its statefulness is not the policy's"),
            ConnProblem::SnatBinding => f.write_str("its SNAT binding is not the policy's"),
            ConnProblem::SnatTaken => f.write_str("its SNAT port is bound twice"),
            ConnProblem::TcpState => f.write_str("TCP state does not match its protocol"),
            ConnProblem::TableFull => f.write_str("the connection table is full"),
        }
    }
}

/// Why carried vSwitch state was refused. Nothing was changed.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ImportError {
    /// The state has a format version this build does not read.
    Version {
        /// The state's version.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The carried policy does not read back or is invalid.
    Policy(ConfigError),
    /// The vSwitch is not fresh: it has connections or cached flows (import does not merge).
    NotEmpty {
        /// Its connections.
        conns: u64,
        /// Its cached flows.
        flows: usize,
    },
    /// More connections than this vSwitch's `max_conns`.
    TooManyConns {
        /// Carried connections.
        conns: usize,
        /// This vSwitch's limit.
        max: usize,
    },
    /// A SNAT pool is listed twice, or there are more pools than a slow path holds.
    SnatPool {
        /// Its public address.
        ip: IpAddr,
        /// Its protocol.
        proto: u8,
    },
    /// Connection `index` of the state is not one this policy would have.
    Conn {
        /// Its index in [`SlowPathState::conns`].
        index: usize,
        /// What is wrong.
        problem: ConnProblem,
    },
    /// The flow tables could not be set up.
    Table(GftError),
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImportError::Version { found, supported } => {
                write!(
                    f,
                    "vSwitch state version {found} is not supported (this build reads {supported})"
                )
            }
            ImportError::Policy(e) => write!(f, "carried policy: {e}"),
            ImportError::NotEmpty { conns, flows } => write!(
                f,
                "vSwitch state can only be imported into a fresh vSwitch ({conns} connections, \
                 {flows} cached flows)"
            ),
            ImportError::TooManyConns { conns, max } => {
                write!(f, "{conns} connections exceed max_conns {max}")
            }
            ImportError::SnatPool { ip, proto } => {
                write!(f, "SNAT pool {ip} proto {proto} listed twice (or too many pools)")
            }
            ImportError::Conn { index, problem } => write!(f, "connection {index}: {problem}"),
            ImportError::Table(e) => write!(f, "flow table: {e}"),
        }
    }
}

impl std::error::Error for ImportError {}

/// Whole nanoseconds of `d`, saturating.
fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl SlowPath {
    /// The state to hand to another process, times relative to `now`. `last_seen` gives when
    /// a key's cached flow last carried a packet (`None`: not cached); a connection's idle time
    /// is counted from the later of its two keys. An adopted connection that no packet touched
    /// since its import keeps what is left of its idle time (`idle_timeout` is the flow
    /// table's); one with no cached flow otherwise counts as just active.
    pub fn export_state(
        &self,
        now: Instant,
        idle_timeout: Duration,
        last_seen: impl Fn(&FlowKey) -> Option<Instant>,
    ) -> SlowPathState {
        let mut conns = Vec::with_capacity(self.conns);
        for (slot, c) in self.conns_tab.slots.iter().enumerate() {
            let Some(c) = c else { continue };
            let (fwd, rev) = (self.conns_tab.key(&c.fwd), self.conns_tab.key(&c.rev));
            let seen = match (last_seen(&fwd), last_seen(&rev)) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            let idle = match (seen, u32::try_from(slot).ok().and_then(|s| self.adopted.get(&s))) {
                (Some(t), _) => now - t,
                (None, Some(&deadline)) => idle_timeout.saturating_sub(deadline - now),
                (None, None) => Duration::ZERO,
            };
            let tcp = (c.tcp != NONE).then(|| self.conns_tab.tcp.get(c.tcp as usize)).flatten();
            conns.push(ConnState {
                fwd: KeyState::from(&fwd),
                rev: KeyState::from(&rev),
                flow_hash: c.flow_hash,
                eth_src: c.eth_src,
                eth_dst: c.eth_dst,
                ethertype: c.ethertype,
                tunnel: c.tunnel.map(|t| t.name().to_string()),
                stateful: c.stateful,
                snat: self.snat_of(c).map(|b| SnatState { ip: b.ip, proto: b.proto, port: b.port }),
                tcp: tcp.map(|s| TcpSideState {
                    conn: s.tcp.snapshot(now),
                    half_open_left_ns: ns(s.half_open_until - now),
                    presumed_open: s.presumed_open,
                }),
                idle_ns: ns(idle),
            });
        }
        let snat_pools = self
            .pools
            .iter()
            .map(|((ip, proto), p)| SnatPoolState { ip: *ip, proto: *proto, cursor: p.cursor() })
            .collect();
        SlowPathState { conns, snat_pools, stats: self.stats() }
    }

    /// A slow path for `policy` (already validated) holding the connections of `state`, its
    /// times rebased on `now`; every connection is adopted until a packet compiles it again
    /// (see the module doc; `idle_timeout` is the flow table's). On error nothing is built.
    pub fn import_state(
        policy: Arc<Policy>,
        cfg: SlowPathConfig,
        state: &SlowPathState,
        now: Instant,
        idle_timeout: Duration,
    ) -> Result<SlowPath, ImportError> {
        let mut sp = SlowPath::new(policy, cfg);
        if state.conns.len() > sp.cfg.max_conns {
            return Err(ImportError::TooManyConns {
                conns: state.conns.len(),
                max: sp.cfg.max_conns,
            });
        }
        for p in &state.snat_pools {
            if sp.pool_ids.contains_key(&(p.ip, p.proto)) || sp.pool_id(p.ip, p.proto).is_none() {
                return Err(ImportError::SnatPool { ip: p.ip, proto: p.proto });
            }
        }
        for (index, c) in state.conns.iter().enumerate() {
            sp.adopt(c, now, idle_timeout)
                .map_err(|problem| ImportError::Conn { index, problem })?;
        }
        // Marking the bindings moved the cursors; put them where the exporter had them.
        for p in &state.snat_pools {
            if let Some(&id) = sp.pool_ids.get(&(p.ip, p.proto))
                && let Some((_, pool)) = sp.pools.get_mut(usize::from(id))
            {
                pool.set_cursor(p.cursor);
            }
        }
        sp.stats = SlowPathStats {
            conns: 0,
            half_open: 0,
            time_wait: 0,
            snat_in_use: 0,
            ..state.stats.clone()
        };
        sp.prune_timers();
        Ok(sp)
    }

    /// Add the cumulative counters of `other` (a slow path this one replaces) to this one's.
    pub(crate) fn absorb_counters(&mut self, other: &SlowPathStats) {
        let s = &mut self.stats;
        s.compiled += other.compiled;
        s.denied += other.denied;
        s.half_open_rejected += other.half_open_rejected;
        s.closed += other.closed;
        s.tcp_invalid += other.tcp_invalid;
        s.reverse_hits += other.reverse_hits;
        s.tcp_untracked += other.tcp_untracked;
        s.opened += other.opened;
    }

    /// Check one carried connection against the policy and add it, adopted.
    fn adopt(
        &mut self,
        c: &ConnState,
        now: Instant,
        idle_timeout: Duration,
    ) -> Result<(), ConnProblem> {
        let (fwd, rev) = (c.fwd.key(), c.rev.key());
        if fwd == rev || self.conns_tab.find(&fwd).is_some() || self.conns_tab.find(&rev).is_some()
        {
            return Err(ConnProblem::DuplicateKey);
        }
        if (fwd.proto == 6 && !fwd.is_arp()) != c.tcp.is_some() {
            return Err(ConnProblem::TcpState);
        }
        let tunnel = match &c.tunnel {
            None => None,
            Some(name) => Some(
                Layer::from_name(name).ok_or_else(|| ConnProblem::UnknownTunnel(name.clone()))?,
            ),
        };
        let origin = Origin {
            key: fwd,
            eth_src: c.eth_src,
            eth_dst: c.eth_dst,
            ethertype: c.ethertype,
            tunnel,
            flow_hash: c.flow_hash,
        };
        let snat = c.snat.map(|s| SnatBinding { ip: s.ip, proto: s.proto, port: s.port });
        let plan = self.walk(&origin, snat).map_err(ConnProblem::Denied)?;
        if !plan.stateful && c.tcp.is_none() {
            return Err(ConnProblem::NotKept);
        }
        let (_, rev_key, reverse) =
            self.build_flows(&origin, &plan).map_err(ConnProblem::Denied)?;
        // The binding first: a port the walk did not keep changes the reply key too.
        if plan.snat != snat {
            return Err(ConnProblem::SnatBinding);
        }
        if rev_key != rev {
            return Err(ConnProblem::ReplyKey);
        }
        if reverse.is_some() != c.stateful {
            return Err(ConnProblem::Stateful);
        }
        let pool = match plan.snat {
            Some(b) => {
                let id = self.pool_id(b.ip, b.proto).ok_or(ConnProblem::SnatBinding)?;
                let taken = self.pools.get(usize::from(id)).is_none_or(|(_, p)| p.is_used(b.port));
                if taken {
                    return Err(ConnProblem::SnatTaken);
                }
                Some((id, b.port))
            }
            None => None,
        };
        if !self.conns_tab.has_room() {
            return Err(ConnProblem::TableFull);
        }
        let (Some(pf), Some(pr)) = (self.conns_tab.pack(&fwd), self.conns_tab.pack(&rev)) else {
            // The slow path under construction is dropped on error: nothing to free.
            return Err(ConnProblem::TableFull);
        };
        let side = c.tcp.map(|t| {
            let tcp = TcpConn::restore(&t.conn, now);
            let serial = self.next_serial;
            self.next_serial += 1;
            TcpSide {
                tcp,
                serial,
                expires: tcp.expires(self.cfg.time_wait),
                half_open_until: now.saturating_add(Duration::from_nanos(t.half_open_left_ns)),
                half_open: tcp.is_half_open() && !t.presumed_open,
                presumed_open: t.presumed_open,
            }
        });
        let tcp_index = match side {
            Some(s) => {
                let t = &mut self.conns_tab;
                alloc(&mut t.tcp, &mut t.tcp_free, s).ok_or(ConnProblem::TableFull)?
            }
            None => NONE,
        };
        let (snat_pool, snat_port) = pool.unwrap_or((NO_POOL, 0));
        let conn = Conn {
            fwd: pf,
            rev: pr,
            flow_hash: c.flow_hash,
            eth_src: c.eth_src,
            eth_dst: c.eth_dst,
            ethertype: c.ethertype,
            snat_port,
            snat_pool,
            tunnel,
            stateful: c.stateful,
            tcp: tcp_index,
        };
        let slot = self.conns_tab.insert(conn).ok_or(ConnProblem::TableFull)?;
        if let Some((id, port)) = pool
            && let Some((_, p)) = self.pools.get_mut(usize::from(id))
        {
            p.mark(port);
            self.snat_in_use += 1;
        }
        self.conns += 1;
        if let Some(s) = side {
            if s.half_open {
                self.half_open += 1;
                self.timers.push(Reverse((s.half_open_until, slot, s.serial, TimerKind::HalfOpen)));
            }
            if let Some(t) = s.expires {
                self.time_wait += 1;
                self.timers.push(Reverse((t, slot, s.serial, TimerKind::Expire)));
            }
        }
        let left = idle_timeout.saturating_sub(Duration::from_nanos(c.idle_ns));
        let deadline = now.saturating_add(left);
        self.adopted.insert(slot, deadline);
        self.timers.push(Reverse((deadline, slot, 0, TimerKind::Idle)));
        Ok(())
    }
}
