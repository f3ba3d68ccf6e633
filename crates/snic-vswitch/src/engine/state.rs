//! Handing a running vSwitch's state to a new process (a hitless upgrade):
//! [`VSwitch::export_state`] in the old process, which has paused (no packet is being
//! processed), and [`VSwitch::import_state`] in the new one, on a fresh vSwitch built with the
//! same settings, before its workers start. The state is plain data ([`VSwitchState`], serde)
//! that the caller carries between the processes, as JSON.
//!
//! What moves: the policy in force (it may have been changed live since start; carried as its
//! TOML text, [`crate::policy::toml::to_toml`], and read back and validated on import), the
//! policy generation and the vPort epochs (so the numbers the control plane reports carry on),
//! every connection with its TCP state and SNAT binding, the SNAT pools' search cursors, the
//! vPort meters' bucket levels, and the slow path's and fast path's cumulative counters and
//! restarts (so `snic vswitch show` keeps counting). Times are carried as ages and remaining
//! times relative to the exporter's `now` and rebased on the importer's: each process's clock
//! has its own origin.
//!
//! What does not: the flow tables (GFT) of the shards. A cached flow is a compiled product of
//! the policy and a connection, bound to one process's action table and shard layout and
//! validated by epochs; the new process rebuilds it exactly as it does after a fast-path
//! restart: the first packet of each flow after the takeover misses, the slow path finds the
//! carried connection (its TCP state and SNAT port intact, so a mid-connection segment is not
//! `tcp_invalid` and keeps its public port) and compiles and caches the flow again (a per-flow
//! meter's bucket, kept in the cached flow, starts full). Nor do egress queues or packets in
//! flight.
//!
//! Import does not merge: it refuses a vSwitch that has connections or cached flows
//! ([`ImportError::NotEmpty`]), and it is all or nothing: the whole state is checked (version,
//! policy, every connection re-walked through the policy, see [`crate::vfp::state`]) before
//! anything changes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use hashbrown::HashMap;
use snic_time::Instant;

use super::{Shard, ShardStats, VSwitch, entry_flags, lock, sync_vport_meters};
use crate::key::FlowKey;
use crate::policy::toml::{parse_policy, to_toml};
use crate::qos::BucketSnapshot;
use crate::vfp::state::{ImportError, SlowPathState};
use crate::vfp::{DENY_NAMES, SlowPath};

/// The format version of [`VSwitchState`] this build writes and reads.
pub const STATE_VERSION: u32 = 1;

/// The epoch of one vPort.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VPortEpoch {
    /// The vPort id.
    pub vport: u16,
    /// Its epoch.
    pub epoch: u32,
}

/// The bucket of one vPort's meter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VPortMeterState {
    /// The vPort id.
    pub vport: u16,
    /// Its bucket, time as an age.
    pub bucket: BucketSnapshot,
}

/// A vSwitch's state, as one process hands it to the next ([`VSwitch::export_state`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct VSwitchState {
    /// Format version ([`STATE_VERSION`]); import refuses any other.
    pub version: u32,
    /// The policy in force, as TOML ([`crate::policy::toml`]).
    pub policy: String,
    /// The policy generation.
    pub generation: u64,
    /// Epochs of the vPorts whose epoch moved from its initial 1.
    pub epochs: Vec<VPortEpoch>,
    /// Connections, SNAT pools and the slow path's counters.
    pub slow: SlowPathState,
    /// The fast path's counters, summed over the shards (and what the exporter had carried).
    pub fast: ShardStats,
    /// Fast-path restarts done.
    pub restarts: u64,
    /// The vPort meters' buckets (vPorts with a meter).
    pub vport_meters: Vec<VPortMeterState>,
}

/// What an import moved, for the caller to print.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ImportSummary {
    /// Connections carried.
    pub connections: usize,
    /// Of them, TCP connections.
    pub tcp_connections: usize,
    /// SNAT ports bound.
    pub snat_bindings: usize,
    /// SNAT pools (public address, protocol).
    pub snat_pools: usize,
    /// Half-open TCP connections now.
    pub half_open: u64,
    /// Connections in time-wait or reset now.
    pub time_wait: u64,
    /// The policy generation now.
    pub generation: u64,
}

/// Reads [`ShardStats::denied_by`] back: its keys are [`crate::vfp::DenyReason`] names.
pub(super) fn deny_names<'de, D>(d: D) -> Result<BTreeMap<&'static str, u64>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let named: BTreeMap<String, u64> = serde::Deserialize::deserialize(d)?;
    named
        .into_iter()
        .map(|(name, n)| match DENY_NAMES.iter().find(|&&k| k == name) {
            Some(&k) => Ok((k, n)),
            None => Err(serde::de::Error::custom(format!("unknown deny reason {name:?}"))),
        })
        .collect()
}

impl VSwitch {
    /// The state to hand to another process, times relative to `now` (this process's clock).
    /// Call it with the workers paused: it takes every shard's lock, then the slow path's, and
    /// reads a consistent snapshot. A connection's idle time is that of the latest packet of
    /// its cached flows in any shard.
    pub fn export_state(&self, now: Instant) -> VSwitchState {
        let cells = lock(&self.shared.shards).clone();
        let shards: Vec<_> = cells.iter().map(|c| lock(&c.state)).collect();
        let mut seen: HashMap<FlowKey, Instant> = HashMap::new();
        let mut fast = lock(&self.shared.carried).clone();
        for s in &shards {
            for (_, e) in s.gft.iter() {
                if e.flags & entry_flags::DROP == 0 {
                    let t = seen.entry(e.key).or_insert(e.last_seen);
                    *t = (*t).max(e.last_seen);
                }
            }
            fast.merge(&s.stats);
        }
        let slow = lock(&self.shared.slow);
        let idle_timeout = self.shared.cfg.gft.idle_timeout;
        let slow_state = slow.export_state(now, idle_timeout, |k| seen.get(k).copied());
        let policy = to_toml(slow.policy());
        let generation = self.generation();
        let vport_meters = lock(&self.shared.vport_meters)
            .iter()
            .enumerate()
            .filter_map(|(v, b)| {
                let bucket = b.as_ref()?.snapshot(now);
                Some(VPortMeterState { vport: u16::try_from(v).ok()?, bucket })
            })
            .collect();
        drop(slow);
        drop(shards);
        let epochs = self
            .shared
            .epochs
            .iter()
            .enumerate()
            .filter_map(|(v, e)| {
                let epoch = e.load(Ordering::Acquire);
                let vport = u16::try_from(v).ok()?;
                (epoch != 1).then_some(VPortEpoch { vport, epoch })
            })
            .collect();
        VSwitchState {
            version: STATE_VERSION,
            policy,
            generation,
            epochs,
            slow: slow_state,
            fast,
            restarts: self.shared.restarts.load(Ordering::Acquire),
            vport_meters,
        }
    }

    /// Take over `state` (exported by another process with the same settings), its times
    /// rebased on `now` (this process's clock). Only into a fresh vSwitch: no connection, no
    /// cached flow ([`ImportError::NotEmpty`]); shards may exist already. All or nothing: on
    /// error nothing changed.
    ///
    /// Afterwards the carried policy is in force (the shards pick it up at their next batch),
    /// the generation and epochs are at least the carried ones, the counters continue from the
    /// carried ones, and every carried connection is known to the slow path: the first packet
    /// of each flow compiles it again from its connection. A carried connection no packet
    /// comes for is removed when what was left of its idle timeout runs out.
    pub fn import_state(
        &self,
        state: &VSwitchState,
        now: Instant,
    ) -> Result<ImportSummary, ImportError> {
        if state.version != STATE_VERSION {
            return Err(ImportError::Version { found: state.version, supported: STATE_VERSION });
        }
        let policy =
            Arc::new(parse_policy(&state.policy, "vswitch state").map_err(ImportError::Policy)?);
        // Lock order: every shard, then the slow path (as `export_state`).
        let cells = lock(&self.shared.shards).clone();
        let mut shards: Vec<_> = cells.iter().map(|c| lock(&c.state)).collect();
        let flows = shards.iter().map(|s| s.gft.len()).sum::<usize>();
        let mut slow = lock(&self.shared.slow);
        let conns = slow.stats().conns;
        if conns > 0 || flows > 0 {
            return Err(ImportError::NotEmpty { conns, flows });
        }
        let mut next = SlowPath::import_state(
            policy.clone(),
            self.shared.cfg.slow.clone(),
            &state.slow,
            now,
            self.shared.cfg.gft.idle_timeout,
        )?;
        // Nothing fails from here on.
        next.absorb_counters(&slow.stats());
        let st = next.stats();
        let summary_of = |generation| ImportSummary {
            connections: state.slow.conns.len(),
            tcp_connections: state.slow.conns.iter().filter(|c| c.tcp.is_some()).count(),
            snat_bindings: st.snat_in_use as usize,
            snat_pools: state.slow.snat_pools.len(),
            half_open: st.half_open,
            time_wait: st.time_wait,
            generation,
        };
        {
            let mut buckets = lock(&self.shared.vport_meters);
            sync_vport_meters(&mut buckets, &policy);
            for m in &state.vport_meters {
                if let Some(Some(b)) = buckets.get(usize::from(m.vport)) {
                    b.restore(&m.bucket, now);
                }
            }
        }
        *slow = next;
        for e in &state.epochs {
            if let Some(a) = self.shared.epochs.get(usize::from(e.vport)) {
                a.fetch_max(e.epoch, Ordering::AcqRel);
            }
        }
        self.shared.generation.fetch_max(state.generation, Ordering::AcqRel);
        let generation = self.generation();
        let deadline = slow.poll_timeout();
        drop(slow);
        lock(&self.shared.carried).merge(&state.fast);
        self.shared.restarts.fetch_add(state.restarts, Ordering::AcqRel);
        for (s, c) in shards.iter_mut().zip(&cells) {
            let s: &mut Shard = s;
            // Pick up the carried policy at the next batch, whatever the generation number.
            s.generation = 0;
            s.slow_deadline = match (s.slow_deadline, deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            s.publish(c);
        }
        Ok(summary_of(generation))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{VSwitchConfig, VSwitchStage};
    use crate::gft::GftConfig;
    use crate::key::Direction;
    use crate::policy::Field as F;
    use crate::policy::{Action, LayerKind, Matcher, Policy, RouteTarget, Value};
    use crate::tcp::TcpState;
    use crate::tcp::flags::{ACK, FIN, PSH, SYN};
    use crate::vfp::state::ConnProblem;
    use crate::vfp::testutil::*;
    use core::time::Duration;
    use proptest::prelude::*;
    use snic_pipeline::{Batch, PortId, Stage, StageCounters, StageCtx, TraceRing};
    use snic_wire::stack::Stack;

    const PUBLIC: [u8; 4] = [198, 51, 100, 1];
    const DNS: [u8; 4] = [8, 8, 8, 8];
    const IDLE: Duration = Duration::from_secs(30);

    /// VM A: every outbound flow stateful (inbound only as replies), SNAT to [`PUBLIC`] for
    /// 8.8.8.8 out of the uplink, everything else through the VNET.
    fn handover_policy() -> Policy {
        let acl = layer(
            "acl",
            LayerKind::Acl,
            vec![rule(1, 10, Some(Direction::Out), vec![], Action::AllowStateful)],
            Action::Deny,
        );
        let nat = layer(
            "nat",
            LayerKind::Nat,
            vec![rule(
                1,
                1,
                Some(Direction::Out),
                vec![pred(F::IpDst, Matcher::Exact(Value::Ip(IpAddr::from(DNS))))],
                Action::Snat { ip: IpAddr::from(PUBLIC), ports: (2000, 2999) },
            )],
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
                    vec![pred(F::IpDst, Matcher::Prefix(IpAddr::from(DNS), 32))],
                    Action::Route(RouteTarget::Uplink),
                ),
                rule(
                    2,
                    1,
                    None,
                    vec![pred(F::IpDst, Matcher::Prefix(v4(0, 0, 0, 0), 0))],
                    Action::Route(RouteTarget::Vnet),
                ),
            ],
            Action::Pass,
        );
        policy(vec![acl, nat, route, vnet_layer()])
    }

    use core::net::IpAddr;

    fn cfg() -> VSwitchConfig {
        VSwitchConfig {
            gft: GftConfig { capacity: 4096, idle_timeout: IDLE, ..GftConfig::default() },
            ..VSwitchConfig::default()
        }
    }

    /// One packet through `stage` at `now`: where it left and what it looked like.
    fn send(
        stage: &mut VSwitchStage,
        now: Instant,
        port: u16,
        frame: &[u8],
    ) -> Option<(u16, Vec<u8>)> {
        let mut counters = StageCounters::new("vswitch");
        let mut ring = TraceRing::new(4);
        let mut batch = Batch::new(4);
        let p = batch.push_frame(frame).expect("room");
        p.meta.ingress = PortId(port);
        p.meta.stack = Stack::parse(frame);
        p.meta.parsed = true;
        stage.process(now, &mut batch, &mut StageCtx::new(&mut counters, &mut ring));
        batch.iter().next().map(|p| (p.meta.egress.map_or(u16::MAX, |e| e.0), p.data().to_vec()))
    }

    /// A batch of nothing: runs the shard's timers.
    fn tick(stage: &mut VSwitchStage, now: Instant) {
        let mut counters = StageCounters::new("vswitch");
        let mut ring = TraceRing::new(4);
        let mut batch = Batch::new(1);
        stage.process(now, &mut batch, &mut StageCtx::new(&mut counters, &mut ring));
    }

    /// The L4 source port of a plain (not tunnelled) IPv4 frame.
    fn sport(frame: &[u8]) -> u16 {
        u16::from_be_bytes([frame[34], frame[35]])
    }

    fn out_tcp(sp: u16, dst: [u8; 4], dp: u16, fl: u8) -> Vec<u8> {
        tcp_frame(GW_MAC, A_MAC, A_IP, dst, sp, dp, fl)
    }

    /// A reply from the VNET peer, tunnelled to this host.
    fn in_vnet_tcp(sp: u16, dp: u16, fl: u8) -> Vec<u8> {
        vxlan(PA_REMOTE, PA_LOCAL, VNI, &tcp_frame(A_MAC, REMOTE_MAC, REMOTE_IP, A_IP, sp, dp, fl))
    }

    /// A reply from the internet to the public address.
    fn in_public(proto_tcp: bool, sp: u16, dp: u16, fl: u8) -> Vec<u8> {
        if proto_tcp {
            tcp_frame(UL_MAC, GW_MAC, DNS, PUBLIC, sp, dp, fl)
        } else {
            udp_frame(UL_MAC, GW_MAC, DNS, PUBLIC, sp, dp)
        }
    }

    /// What the old process did before it paused.
    struct Old {
        vs: VSwitch,
        /// SNAT ports of the TCP flow (40001 -> 8.8.8.8:443) and the UDP flows (5000, 5001).
        tcp_port: u16,
        udp_ports: [u16; 2],
        /// When it exported.
        at: Instant,
    }

    /// An old process on its own clock: a policy changed live, a VNET TCP connection
    /// (40000 -> REMOTE:80) through its handshake and some data, an SNAT'd TCP connection
    /// (40001 -> 8.8.8.8:443), two SNAT'd UDP flows (5000 last used 10 s before export, 5001
    /// 5 s before), all established before `at`.
    fn old_process() -> Old {
        let vs = VSwitch::new(handover_policy(), cfg()).unwrap();
        // Changed live: an extra ACL rule the new process's own config lacks.
        let mut live = handover_policy();
        live.vports[0].layers[0].rules.push(rule(
            9,
            20,
            Some(Direction::Out),
            vec![pred(F::IpDst, Matcher::Exact(Value::Ip(v4(10, 9, 9, 9))))],
            Action::Deny,
        ));
        vs.replace(live).unwrap();
        let mut st = vs.stage().unwrap();
        let t0 = Instant::from_secs(7);
        // VNET TCP: handshake and data.
        assert_eq!(
            send(&mut st, t0, A_PORT, &out_tcp(40000, REMOTE_IP, 80, SYN)).unwrap().0,
            UL_PORT
        );
        assert_eq!(
            send(&mut st, t0, UL_PORT, &in_vnet_tcp(80, 40000, SYN | ACK)).unwrap().0,
            A_PORT
        );
        assert_eq!(
            send(&mut st, t0, A_PORT, &out_tcp(40000, REMOTE_IP, 80, ACK)).unwrap().0,
            UL_PORT
        );
        assert_eq!(
            send(&mut st, t0, A_PORT, &out_tcp(40000, REMOTE_IP, 80, ACK | PSH)).unwrap().0,
            UL_PORT
        );
        // SNAT'd TCP.
        let (e, f) = send(&mut st, t0, A_PORT, &out_tcp(40001, DNS, 443, SYN)).unwrap();
        assert_eq!(e, UL_PORT);
        let tcp_port = sport(&f);
        assert!((2000..=2999).contains(&tcp_port));
        assert_eq!(
            send(&mut st, t0, UL_PORT, &in_public(true, 443, tcp_port, SYN | ACK)).unwrap().0,
            A_PORT
        );
        assert_eq!(send(&mut st, t0, A_PORT, &out_tcp(40001, DNS, 443, ACK)).unwrap().0, UL_PORT);
        // SNAT'd UDP, used last at t0 and t0 + 5 s.
        let f = udp_frame(GW_MAC, A_MAC, A_IP, DNS, 5000, 53);
        let u0 = sport(&send(&mut st, t0, A_PORT, &f).unwrap().1);
        let f = udp_frame(GW_MAC, A_MAC, A_IP, DNS, 5001, 53);
        let u1 = sport(&send(&mut st, t0, A_PORT, &f).unwrap().1);
        assert_eq!(send(&mut st, t0 + Duration::from_secs(5), A_PORT, &f).unwrap().0, UL_PORT);
        let s = vs.stats();
        assert_eq!((s.slow.conns, s.slow.half_open, s.slow.snat_in_use), (4, 0, 3));
        assert_eq!(s.fast.denied, 0);
        Old { vs, tcp_port, udp_ports: [u0, u1], at: t0 + Duration::from_secs(10) }
    }

    fn through_json(s: &VSwitchState) -> VSwitchState {
        let text = serde_json::to_string(s).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn round_trip_keeps_connections_snat_ports_and_counters() {
        let old = old_process();
        let state = through_json(&old.vs.export_state(old.at));
        assert_eq!(state.version, STATE_VERSION);
        assert_eq!(state.slow.conns.len(), 4);
        let before = old.vs.stats();

        // The new process: same config, its own clock (the takeover at 1000 s of it).
        let vs = VSwitch::new(handover_policy(), cfg()).unwrap();
        let mut st = vs.stage().unwrap();
        let now = Instant::from_secs(1000);
        let sum = vs.import_state(&state, now).unwrap();
        assert_eq!(
            sum,
            ImportSummary {
                connections: 4,
                tcp_connections: 2,
                snat_bindings: 3,
                snat_pools: 2,
                half_open: 0,
                time_wait: 0,
                generation: 2,
            }
        );
        assert_eq!(*vs.policy(), *old.vs.policy(), "the live policy, not the config's");
        let s = vs.stats();
        assert_eq!(s.generation, before.generation);
        assert_eq!(
            (s.slow.opened, s.slow.compiled, s.slow.conns, s.slow.snat_in_use),
            (before.slow.opened, before.slow.compiled, 4, 3)
        );
        assert_eq!(s.fast, before.fast, "fast-path counters carried");

        // The established VNET connection's next segments, both ways: served, no SYN needed.
        let t = now + Duration::from_millis(1);
        assert_eq!(
            send(&mut st, t, A_PORT, &out_tcp(40000, REMOTE_IP, 80, ACK | PSH)).unwrap().0,
            UL_PORT
        );
        // The inbound reply is let through by the carried connection (the ACL denies inbound).
        assert_eq!(send(&mut st, t, UL_PORT, &in_vnet_tcp(80, 40000, ACK)).unwrap().0, A_PORT);
        // The SNAT'd TCP connection keeps its public port, and its replies reach the VM.
        let (e, f) = send(&mut st, t, A_PORT, &out_tcp(40001, DNS, 443, ACK | PSH)).unwrap();
        assert_eq!((e, sport(&f)), (UL_PORT, old.tcp_port));
        let (e, f) = send(&mut st, t, UL_PORT, &in_public(true, 443, old.tcp_port, ACK)).unwrap();
        assert_eq!((e, u16::from_be_bytes([f[36], f[37]])), (A_PORT, 40001));
        // So does the UDP flow; its reply to the public port reaches the VM.
        let f = udp_frame(GW_MAC, A_MAC, A_IP, DNS, 5000, 53);
        assert_eq!(sport(&send(&mut st, t, A_PORT, &f).unwrap().1), old.udp_ports[0]);
        assert_eq!(
            send(&mut st, t, UL_PORT, &in_public(false, 53, old.udp_ports[0], 0)).unwrap().0,
            A_PORT
        );
        // New SNAT flows get ports no carried connection of their protocol holds (a pool per
        // public address and protocol).
        let (_, f) = send(&mut st, t, A_PORT, &out_tcp(40002, DNS, 443, SYN)).unwrap();
        let fresh = sport(&f);
        assert!(fresh != old.tcp_port && (2000..=2999).contains(&fresh), "{fresh}");
        let f = udp_frame(GW_MAC, A_MAC, A_IP, DNS, 5002, 53);
        let fresh = sport(&send(&mut st, t, A_PORT, &f).unwrap().1);
        assert!(!old.udp_ports.contains(&fresh) && (2000..=2999).contains(&fresh), "{fresh}");

        let s = vs.stats();
        assert_eq!(s.fast.denied, 0, "{:?}", s.fast.denied_by);
        assert_eq!(s.slow.tcp_invalid, 0);
        assert_eq!(s.slow.opened, before.slow.opened + 2, "only the new flows opened");
        assert_eq!(s.slow.conns, 6);
        assert_eq!(s.fast.installs, before.fast.installs + 5, "counting on");
        // The carried TCP state is the old one (established), not a mid-stream pick-up.
        let again = vs.export_state(t);
        let tcp = again.slow.conns[0].tcp.expect("tcp");
        assert_eq!(tcp.conn.state, TcpState::Established);
        assert_eq!(tcp.conn.since_age_ns, Duration::from_secs(10).as_nanos() as u64 + 1_000_000);

        // The connection still closes normally afterwards.
        send(&mut st, t, A_PORT, &out_tcp(40000, REMOTE_IP, 80, FIN | ACK));
        send(&mut st, t, UL_PORT, &in_vnet_tcp(80, 40000, FIN | ACK));
        assert_eq!(vs.stats().slow.time_wait, 1);
    }

    #[test]
    fn carried_idle_connections_expire_after_what_was_left_of_their_timeout() {
        let old = old_process();
        let state = through_json(&old.vs.export_state(old.at));
        let vs = VSwitch::new(handover_policy(), cfg()).unwrap();
        let mut st = vs.stage().unwrap();
        let now = Instant::from_secs(3);
        vs.import_state(&state, now).unwrap();
        // Every flow but UDP 5001 was last used 10 s before export; 5001 5 s before.
        let first = now + (IDLE - Duration::from_secs(10));
        assert_eq!(st.poll_timeout(), Some(first), "the shard wakes for the carried timers");
        // A packet of the SNAT'd TCP connection after import: from now on its cached flow ages.
        let t = now + Duration::from_secs(1);
        send(&mut st, t, A_PORT, &out_tcp(40001, DNS, 443, ACK));
        tick(&mut st, Instant::from_nanos(first.as_nanos() - 1));
        assert_eq!(vs.stats().slow.conns, 4);
        tick(&mut st, first);
        // The VNET TCP connection and UDP 5000 went, 20 s after import; the used one stays.
        let s = vs.stats().slow;
        assert_eq!((s.conns, s.snat_in_use), (2, 2));
        let second = now + (IDLE - Duration::from_secs(5));
        tick(&mut st, Instant::from_nanos(second.as_nanos() - 1));
        assert_eq!(vs.stats().slow.conns, 2);
        tick(&mut st, second);
        assert_eq!(vs.stats().slow.conns, 1, "UDP 5001 went 25 s after import");
        // The touched connection is aged by its cached flow: 30 s after its packet.
        let mut t = second;
        for _ in 0..100 {
            if vs.stats().slow.conns == 0 {
                break;
            }
            t += Duration::from_millis(100);
            tick(&mut st, t);
        }
        assert_eq!(vs.stats().slow.conns, 0);
        assert!(t >= now + Duration::from_secs(1) + IDLE, "not before its own idle timeout: {t}");
        // Its port is free again and the SNAT pool empty.
        assert_eq!(vs.stats().slow.snat_in_use, 0);
    }

    /// Connections whose packets all fall in a fast-path restart window have no cached flow
    /// whose idle aging would remove them: the slow path ages them. A carried connection
    /// first hit in the window and a new UDP flow made there go after their idle timeout, and
    /// their SNAT ports with them.
    #[test]
    fn connections_served_only_in_a_restart_window_age() {
        let old = old_process();
        let state = through_json(&old.vs.export_state(old.at));
        let vs = VSwitch::new(handover_policy(), cfg()).unwrap();
        let mut st = vs.stage().unwrap();
        let now = Instant::from_secs(3);
        vs.import_state(&state, now).unwrap();
        let carried = vs.stats().slow.conns;
        let t = now + Duration::from_secs(1);
        vs.restart_fastpath(t, Duration::from_millis(300)).unwrap();
        assert!(send(&mut st, t, A_PORT, &out_tcp(40001, DNS, 443, ACK)).is_some());
        let udp = udp_frame(GW_MAC, A_MAC, A_IP, DNS, 6000, 53);
        assert!(send(&mut st, t, A_PORT, &udp).is_some());
        assert_eq!(vs.stats().slow.conns, carried + 1, "the UDP flow is a connection");
        assert_eq!(vs.stats().fast.slow_served, 2, "both served by the slow path alone");
        // More packets within the same second arm no more timers.
        let timers = lock(&vs.shared.slow).timers_pending();
        for k in 1..=50u64 {
            let at = t + Duration::from_millis(k);
            assert!(send(&mut st, at, A_PORT, &udp).is_some());
        }
        assert_eq!(lock(&vs.shared.slow).timers_pending(), timers, "one timer per second");
        let mut at = t;
        for _ in 0..200 {
            if vs.stats().slow.conns == 0 {
                break;
            }
            at += Duration::from_millis(500);
            tick(&mut st, at);
        }
        let s = vs.stats().slow;
        assert_eq!((s.conns, s.snat_in_use), (0, 0), "every connection aged out");
        assert!(at >= t + (IDLE - Duration::from_secs(1)), "not before its idle timeout: {at}");
    }

    /// The carried bindings are taken in the new process's pools, not only skipped by the
    /// cursor: with the cursor back at the first carried port, a new flow gets the next free one.
    #[test]
    fn carried_snat_ports_are_never_handed_out_again() {
        let old = old_process();
        let mut state = old.vs.export_state(old.at);
        let udp = state.slow.snat_pools.iter_mut().find(|p| p.proto == 17).expect("UDP pool");
        let lowest = old.udp_ports[0].min(old.udp_ports[1]);
        udp.cursor = lowest;
        let vs = VSwitch::new(handover_policy(), cfg()).unwrap();
        let mut st = vs.stage().unwrap();
        let now = Instant::from_secs(1);
        vs.import_state(&state, now).unwrap();
        let mut got = Vec::new();
        for sp in 0..3 {
            let f = udp_frame(GW_MAC, A_MAC, A_IP, DNS, 7000 + sp, 53);
            got.push(sport(&send(&mut st, now, A_PORT, &f).unwrap().1));
        }
        assert!(got.iter().all(|p| !old.udp_ports.contains(p)), "{got:?} vs {:?}", old.udp_ports);
        assert_eq!(got[0], lowest + 2, "the first free port after the carried two");
        assert_eq!(vs.stats().slow.snat_in_use, 6);
    }

    /// A vPort meter's bucket moves with its level: a VM that used up its burst before the
    /// takeover does not get a fresh one after it.
    #[test]
    fn vport_meter_level_is_carried() {
        use crate::policy::{Exceed, MeterId, MeterSpec};
        let metered = || {
            let mut p = handover_policy();
            p.meters.push(MeterSpec {
                name: "m".into(),
                rate_bps: 8_000,
                burst_bytes: 200,
                exceed: Exceed::Drop,
            });
            p.vports[0].meter = Some(MeterId(0));
            p
        };
        let old = VSwitch::new(metered(), cfg()).unwrap();
        let mut st = old.stage().unwrap();
        let t0 = Instant::from_secs(9);
        // Four 46-byte frames take 184 of the 200 bytes.
        for sp in 0..4 {
            let f = udp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 6000 + sp, 53);
            assert_eq!(f.len(), 46);
            assert!(send(&mut st, t0, A_PORT, &f).is_some());
        }
        let bucket = |vs: &VSwitch| lock(&vs.shared.vport_meters)[1].clone().expect("metered");
        assert_eq!(bucket(&old).tokens_bytes(), 16);
        let state = through_json(&old.export_state(t0));
        assert_eq!(state.vport_meters.len(), 1);

        let vs = VSwitch::new(metered(), cfg()).unwrap();
        let mut st = vs.stage().unwrap();
        let now = Instant::from_secs(2);
        vs.import_state(&state, now).unwrap();
        assert_eq!(bucket(&vs).snapshot(now), bucket(&old).snapshot(t0));
        // 16 bytes left and no time to refill: the next frame is over the rate.
        let f = udp_frame(GW_MAC, A_MAC, A_IP, REMOTE_IP, 6000, 53);
        assert!(send(&mut st, now, A_PORT, &f).is_none());
        assert_eq!(vs.stats().fast.meter_drops, 1);
        // 30 ms later (30 bytes at 8 kbit/s) it passes.
        assert!(send(&mut st, now + Duration::from_millis(30), A_PORT, &f).is_some());
    }

    /// `vs` is as fresh as when it was built with [`handover_policy`].
    fn assert_untouched(vs: &VSwitch) {
        let s = vs.stats();
        assert_eq!(s.slow, crate::vfp::SlowPathStats::default());
        assert_eq!(s.fast, ShardStats::default());
        assert_eq!(s.generation, 1);
        assert_eq!(*vs.policy(), handover_policy());
        let e = vs.export_state(Instant::from_secs(1));
        assert!(e.slow.conns.is_empty() && e.slow.snat_pools.is_empty() && e.epochs.is_empty());
    }

    #[test]
    fn bad_state_is_refused_and_changes_nothing() {
        let old = old_process();
        let good = old.vs.export_state(old.at);
        let vs = VSwitch::new(handover_policy(), cfg()).unwrap();
        let _st = vs.stage().unwrap();
        let now = Instant::from_secs(1);
        let refused = |s: &VSwitchState| {
            let e = vs.import_state(s, now).unwrap_err();
            assert_untouched(&vs);
            e
        };
        let mut s = good.clone();
        s.version = 2;
        assert_eq!(refused(&s), ImportError::Version { found: 2, supported: STATE_VERSION });
        assert!(refused(&s).to_string().contains("version 2"));

        let mut s = good.clone();
        s.policy.push_str("\n[[vport]]\nid = 1\n");
        assert!(matches!(refused(&s), ImportError::Policy(_)));

        // The same connection twice (the failure is at the copy, after the others went in).
        let mut s = good.clone();
        s.slow.conns.push(s.slow.conns[1].clone());
        assert_eq!(refused(&s), ImportError::Conn { index: 4, problem: ConnProblem::DuplicateKey });

        // A corrupted reply key.
        let mut s = good.clone();
        s.slow.conns[0].rev.dst_port ^= 1;
        assert_eq!(refused(&s), ImportError::Conn { index: 0, problem: ConnProblem::ReplyKey });

        // A SNAT port outside the rule's range (2000-2999), its reply key to match.
        let mut s = good.clone();
        let c = &mut s.slow.conns[2];
        assert_eq!(c.snat.map(|b| b.port), Some(old.udp_ports[0]));
        c.snat.as_mut().unwrap().port = 3000;
        c.rev.dst_port = 3000;
        assert_eq!(refused(&s), ImportError::Conn { index: 2, problem: ConnProblem::SnatBinding });

        // Two UDP flows on one public port: to the same remote their reply keys collide; to
        // another remote port, the binding itself is refused.
        let mut s = good.clone();
        let p = old.udp_ports[0];
        let c = &mut s.slow.conns[3];
        c.snat.as_mut().unwrap().port = p;
        c.rev.dst_port = p;
        assert_eq!(refused(&s), ImportError::Conn { index: 3, problem: ConnProblem::DuplicateKey });
        let c = &mut s.slow.conns[3];
        (c.fwd.dst_port, c.rev.src_port) = (54, 54);
        assert_eq!(refused(&s), ImportError::Conn { index: 3, problem: ConnProblem::SnatTaken });

        // A TCP connection without its TCP state.
        let mut s = good.clone();
        s.slow.conns[0].tcp = None;
        assert_eq!(refused(&s), ImportError::Conn { index: 0, problem: ConnProblem::TcpState });

        // An unknown tunnel name.
        let mut s = good.clone();
        s.slow.conns[0].tunnel = Some("carrier-pigeon".into());
        assert!(matches!(
            refused(&s),
            ImportError::Conn { index: 0, problem: ConnProblem::UnknownTunnel(_) }
        ));

        // Unknown counter names do not even parse.
        let text = serde_json::to_string(&good)
            .unwrap()
            .replace("\"denied_by\":{}", "\"denied_by\":{\"gremlins\":1}");
        assert!(text.contains("gremlins"));
        assert!(serde_json::from_str::<VSwitchState>(&text).is_err());

        // After all that, the good state goes in; a second import is refused (no merging).
        vs.import_state(&good, now).unwrap();
        assert_eq!(
            vs.import_state(&good, now).unwrap_err(),
            ImportError::NotEmpty { conns: 4, flows: 0 }
        );
    }

    /// Drive `flows` (kind, source port, how far through the handshake) through a fresh old
    /// process at `t0 + i ms`, then export at `at`.
    fn random_old(flows: &[(u8, u16, u8)], at_ms: u64) -> (VSwitch, VSwitchState) {
        let vs = VSwitch::new(handover_policy(), cfg()).unwrap();
        let mut st = vs.stage().unwrap();
        let t0 = Instant::from_secs(1);
        for (i, &(kind, sp, stage)) in flows.iter().enumerate() {
            let t = t0 + Duration::from_millis(i as u64);
            let sp = 10_000 + sp;
            match kind % 3 {
                0 => {
                    send(&mut st, t, A_PORT, &out_tcp(sp, REMOTE_IP, 80, SYN));
                    if stage > 0 {
                        send(&mut st, t, UL_PORT, &in_vnet_tcp(80, sp, SYN | ACK));
                    }
                    if stage > 1 {
                        send(&mut st, t, A_PORT, &out_tcp(sp, REMOTE_IP, 80, ACK));
                    }
                    if stage > 2 {
                        send(&mut st, t, A_PORT, &out_tcp(sp, REMOTE_IP, 80, FIN | ACK));
                    }
                }
                1 => {
                    let p = send(&mut st, t, A_PORT, &out_tcp(sp, DNS, 443, SYN))
                        .map(|(_, f)| sport(&f));
                    if let (Some(p), true) = (p, stage > 0) {
                        send(&mut st, t, UL_PORT, &in_public(true, 443, p, SYN | ACK));
                    }
                }
                _ => {
                    send(&mut st, t, A_PORT, &udp_frame(GW_MAC, A_MAC, A_IP, DNS, sp, 53));
                }
            }
        }
        let at = t0 + Duration::from_millis(at_ms);
        let s = vs.export_state(at);
        (vs, s)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// Export, JSON, import into a process on another clock, export again at the
        /// corresponding instant: the same state.
        #[test]
        fn export_import_export_is_identity(
            flows in proptest::collection::vec((0u8..3, 0u16..40, 0u8..4), 0..24),
            at_ms in 24u64..20_000,
            origin_s in 0u64..1_000,
        ) {
            let (_old, state) = random_old(&flows, at_ms);
            let vs = VSwitch::new(handover_policy(), cfg()).unwrap();
            let _st = vs.stage().unwrap();
            // The importer's clock must be past the oldest age for ages to survive unclamped.
            let now = Instant::from_secs(60 + origin_s);
            let sum = vs.import_state(&through_json(&state), now).unwrap();
            prop_assert_eq!(sum.connections, state.slow.conns.len());
            let again = vs.export_state(now);
            prop_assert_eq!(again, state);
        }
    }
}
