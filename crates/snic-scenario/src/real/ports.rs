//! The ports of a real run: every scenario link two veth pairs from its nodes' namespaces to a
//! namespace of its own in the middle, where its impairments are (see `impair`), every host
//! interface (or traffic port) a veth pair from its NIC's namespace to a host
//! namespace of its own; the NICs' ends are snic's AF_PACKET ports opened inside their
//! namespaces.
//!
//! The host end of a host interface is an AF_PACKET socket too, moved by a [`HostPump`]: a
//! testbed device that injects the frames queued on the interface's [`ScriptHandle`] when
//! their time comes (on the real clock) and records every frame that arrives there on the
//! same handle, with its time. So the scenario's traffic and its captures go through one
//! handle in both modes: a simulated host port is a `ScriptPort` on that handle, a real one
//! the NIC's AF_PACKET port, with the pump on the other side of the veth.

use super::impair::{End, MID, RealLink};
use super::netns::{Net, ifname, in_netns};
use crate::ScenarioError;
use crate::schema::{Impairments, LinkSpec, LinkState};
use crate::world::{LinkHandle, LinkPorts, PortFactory};
use snic_io::afpacket::{AfPacketMode, AfPacketOptions, AfPacketPort, RingSizes};
use snic_io::port::{Port, PortCounters};
use snic_io::script::{ScriptHandle, ScriptPort};
use snic_io::vlink::LinkStats;
use snic_pipeline::{Batch, Counters, MAX_BATCH};
use snic_testbed::Device;
use snic_time::Instant;
use std::any::Any;
use std::collections::BTreeMap;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard};

/// Notes shared by a run's factory and its link handles.
type Notes = Arc<Mutex<Vec<String>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Open an AF_PACKET port on `dev` inside namespace `ns`.
///
/// With the low-latency `TPACKET_V2` receive ring (as `snic run` by default), not the
/// `TPACKET_V3` one: a V3 ring hands frames over a block at a time, after up to its 1 ms
/// block timeout on a quiet link, and a scenario's timeline places operations (a rule added,
/// a link cut) between frames microseconds apart. Frames must reach the NIC when they arrive;
/// a V2 slot is user space's as soon as the kernel wrote it. 512 slots of 16 KiB (8 MiB): room for an
/// incast burst, each slot a jumbo frame (RDMA with a 4096-byte path MTU); a larger frame (a
/// kernel's TCP super-packet on a host link) is read whole from the socket's queue.
pub fn open_in(ns: &str, dev: &str) -> Result<AfPacketPort, ScenarioError> {
    let sizes =
        RingSizes { rx_v2_slots: 512, rx_v2_slot_size: 16 << 10, ..RingSizes::low_latency() };
    let opts = AfPacketOptions { mode: AfPacketMode::Ring(sizes), ..AfPacketOptions::default() };
    in_netns(ns, || AfPacketPort::open_with(dev, opts))
        .map_err(|e| ScenarioError::Setup(format!("AF_PACKET on {dev} in {ns}: {e}")))
}

/// `NODE.PORT` split at its first dot.
fn split_port(s: &str) -> Result<(&str, &str), ScenarioError> {
    s.split_once('.').ok_or_else(|| ScenarioError::Setup(format!("{s:?} is not NODE.PORT")))
}

/// The host side of one host interface: the AF_PACKET socket in the host namespace and the
/// mirror of the scenario's [`ScriptHandle`] (see the module doc). A testbed device.
#[derive(Debug)]
pub struct HostPump {
    name: String,
    wire: AfPacketPort,
    mirror: ScriptPort,
    batch: Batch,
}

impl HostPump {
    /// A pump between `wire` (the host end) and `mirror` (a script port whose handle queues
    /// the frames to inject and receives the frames captured).
    pub fn new(name: &str, wire: AfPacketPort, mirror: ScriptPort) -> HostPump {
        HostPump { name: format!("host:{name}"), wire, mirror, batch: Batch::new(MAX_BATCH) }
    }
}

impl Device for HostPump {
    fn name(&self) -> &str {
        &self.name
    }

    fn poll(&mut self, now: Instant) -> usize {
        let mut moved = 0;
        // Frames due now leave by the host end.
        self.batch.clear();
        if let Ok(n @ 1..) = self.mirror.recv(now, &mut self.batch) {
            // The AF_PACKET port counts refused frames itself (tx_dropped).
            let _ = self.wire.send(now, &mut self.batch);
            moved += n;
        }
        // What arrived is recorded on the handle.
        self.batch.clear();
        if let Ok(n @ 1..) = self.wire.recv(now, &mut self.batch) {
            let _ = self.mirror.send(now, &mut self.batch);
            moved += n;
        }
        self.batch.clear();
        moved
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.mirror.poll_timeout()
    }

    fn counters(&self) -> Counters {
        Counters::default()
    }

    fn port_counters(&self) -> Vec<(String, PortCounters)> {
        vec![(self.wire.name().to_string(), self.wire.counters())]
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// One host interface (or traffic port) of a real run.
#[derive(Debug)]
struct HostSide {
    handle: ScriptHandle,
    pump: Option<HostPump>,
    /// The NIC's end.
    nic_end: End,
    /// The host's end.
    host_end: End,
}

/// The real ports' factory and everything it built (see the module doc). Dropping it deletes
/// every namespace.
#[derive(Debug)]
pub struct RealPorts {
    links: BTreeMap<String, Arc<Mutex<RealLink>>>,
    hosts: BTreeMap<String, HostSide>,
    /// Interface names used per namespace.
    used: BTreeMap<String, Vec<String>>,
    notes: Notes,
    fds: Vec<RawFd>,
    /// Last: the namespaces go after everything in them is closed.
    net: Net,
}

impl RealPorts {
    /// A new run's factory. Fails (`Unsupported`) when not root.
    pub fn new() -> Result<RealPorts, ScenarioError> {
        Ok(RealPorts {
            net: Net::new()?,
            links: BTreeMap::new(),
            hosts: BTreeMap::new(),
            used: BTreeMap::new(),
            notes: Notes::default(),
            fds: Vec::new(),
        })
    }

    /// The namespace of node `node` (a NIC or a switch).
    pub fn node_ns(&mut self, node: &str) -> Result<String, ScenarioError> {
        self.net.ns(&format!("n-{node}"))
    }

    /// An interface name for `port` in namespace `ns`, unused there so far.
    fn dev_for(&mut self, ns: &str, port: &str) -> String {
        // Every namespace has its loopback `lo` already.
        let used = self.used.entry(ns.to_string()).or_insert_with(|| vec!["lo".into()]);
        let mut dev = ifname(port, "");
        if dev.is_empty() || used.contains(&dev) {
            // The first `pN` not taken (a port may itself be called `p1`).
            dev = (0..)
                .map(|k| format!("p{k}"))
                .find(|d| !used.contains(d))
                .unwrap_or_else(|| "p".into());
        }
        used.push(dev.clone());
        dev
    }

    fn open(&mut self, end: &End) -> Result<AfPacketPort, ScenarioError> {
        let p = open_in(&end.ns, &end.dev)?;
        self.fds.extend(p.poll_fd());
        Ok(p)
    }

    /// The two ports of `link` (its `a` end, its `b` end): veth pairs from the nodes'
    /// namespaces to the link's, with the link's loss and rate applied (see `impair`); notes
    /// say what was not applied.
    pub fn link(&mut self, link: &LinkSpec, _seed: u64) -> Result<LinkPorts, ScenarioError> {
        let (na, pa) = split_port(&link.a)?;
        let (nb, pb) = split_port(&link.b)?;
        let ns_a = self.node_ns(na)?;
        let ns_b = self.node_ns(nb)?;
        let a = End { dev: self.dev_for(&ns_a, pa), ns: ns_a };
        let b = End { dev: self.dev_for(&ns_b, pb), ns: ns_b };
        let mid = self.net.ns(&format!("l-{}", link.name))?;
        self.net.veth((&a.ns, &a.dev), (&mid, MID[0]))?;
        self.net.veth((&mid, MID[1]), (&b.ns, &b.dev))?;
        let (real, notes) = RealLink::new(link, [a.clone(), b.clone()], &mid)?;
        lock(&self.notes).extend(notes);
        self.links.insert(link.name.clone(), Arc::new(Mutex::new(real)));
        let pa = self.open(&a)?;
        let pb = self.open(&b)?;
        Ok((Box::new(pa), Box::new(pb)))
    }

    /// The NIC's port `port` of node `node` as a host interface, and the handle its traffic
    /// is queued on and its captures are read from (see the module doc).
    pub fn host_port_with_handle(
        &mut self,
        node: &str,
        port: &str,
    ) -> Result<(Box<dyn Port>, ScriptHandle), ScenarioError> {
        let key = format!("{node}.{port}");
        if self.hosts.contains_key(&key) {
            return Err(ScenarioError::Setup(format!("{key}: a second host interface")));
        }
        let ns_n = self.node_ns(node)?;
        let ns_h = self.net.ns(&format!("h-{key}"))?;
        let nic_end = End { dev: self.dev_for(&ns_n, port), ns: ns_n };
        let host_end = End { dev: self.dev_for(&ns_h, "host"), ns: ns_h };
        self.net.veth((&nic_end.ns, &nic_end.dev), (&host_end.ns, &host_end.dev))?;
        let nic_port = self.open(&nic_end)?;
        let host_port = self.open(&host_end)?;
        let (mirror, handle) = ScriptPort::new(&key);
        let pump = HostPump::new(&key, host_port, mirror);
        self.hosts
            .insert(key, HostSide { handle: handle.clone(), pump: Some(pump), nic_end, host_end });
        Ok((Box::new(nic_port), handle))
    }

    /// [`RealPorts::host_port_with_handle`] without the handle (see [`RealPorts::handle`]).
    pub fn host_port(&mut self, node: &str, port: &str) -> Result<Box<dyn Port>, ScenarioError> {
        self.host_port_with_handle(node, port).map(|(p, _)| p)
    }

    /// The handle of host interface `NODE.PORT`.
    pub fn handle(&self, node_port: &str) -> Option<ScriptHandle> {
        self.hosts.get(node_port).map(|h| h.handle.clone())
    }

    /// Every host interface (`NODE.PORT`).
    pub fn host_ports(&self) -> impl Iterator<Item = &str> {
        self.hosts.keys().map(String::as_str)
    }

    /// The pumps of the host interfaces (once), to be added to the testbed as devices.
    pub fn take_pumps(&mut self) -> Vec<HostPump> {
        self.hosts.values_mut().filter_map(|h| h.pump.take()).collect()
    }

    /// The descriptors of every AF_PACKET socket opened (for the real clock to sleep on).
    pub fn poll_fds(&self) -> &[RawFd] {
        &self.fds
    }

    /// Notes for the report: impairments not applied, ...
    pub fn notes(&self) -> Vec<String> {
        lock(&self.notes).clone()
    }

    /// A `link` operation on link `name`.
    pub fn change_link(
        &mut self,
        name: &str,
        state: Option<LinkState>,
        set: Option<&Impairments>,
    ) -> Result<(), ScenarioError> {
        let link =
            self.links.get(name).ok_or_else(|| ScenarioError::Run(format!("no link {name:?}")))?;
        let notes = lock(link).change(state, set).map_err(|e| ScenarioError::Run(e.to_string()))?;
        lock(&self.notes).extend(notes);
        Ok(())
    }

    /// `link.LINK.a_to_b.FIELD` / `link.LINK.b_to_a.FIELD` for every link, and
    /// `host.NODE.PORT.FIELD` (the host end's interface counters) into `out`.
    pub fn counters(&self, out: &mut BTreeMap<String, u64>) {
        for (name, l) in &self.links {
            for (dir, s) in ["a_to_b", "b_to_a"].iter().zip(lock(l).stats()) {
                let k = |f: &str| format!("link.{name}.{dir}.{f}");
                out.insert(k("offered"), s.offered);
                out.insert(k("delivered"), s.delivered);
                out.insert(k("delivered_bytes"), s.delivered_bytes);
                out.insert(k("lost"), s.lost);
                out.insert(k("tail_dropped"), s.tail_dropped);
            }
        }
    }

    /// The ports' interfaces of link `name` (`[a, b]`: namespace, interface).
    pub fn link_ends(&self, name: &str) -> Option<[(String, String); 2]> {
        self.links.get(name).map(|l| lock(l).ends.clone().map(|e| (e.ns, e.dev)))
    }

    /// The veth ends of host interface `NODE.PORT` (`[NIC's end, host's end]`).
    pub fn host_ends(&self, node_port: &str) -> Option<[(String, String); 2]> {
        self.hosts.get(node_port).map(|h| {
            [
                (h.nic_end.ns.clone(), h.nic_end.dev.clone()),
                (h.host_end.ns.clone(), h.host_end.dev.clone()),
            ]
        })
    }

    /// Delete every namespace now; returns the ones that would not go (drop does the same,
    /// silently).
    pub fn teardown(&mut self) -> Vec<String> {
        self.hosts.clear();
        self.fds.clear();
        self.net.teardown()
    }

    /// The namespaces of this run.
    pub fn namespaces(&self) -> &[String] {
        self.net.namespaces()
    }
}

impl PortFactory for RealPorts {
    fn link(&mut self, link: &LinkSpec, seed: u64) -> Result<LinkPorts, ScenarioError> {
        RealPorts::link(self, link, seed)
    }

    fn host_port(&mut self, node: &str, port: &str) -> Result<Box<dyn Port>, ScenarioError> {
        RealPorts::host_port(self, node, port)
    }

    fn link_control(&mut self, link: &str) -> Option<Box<dyn LinkHandle>> {
        let link = self.links.get(link)?.clone();
        Some(Box::new(RealLinkHandle { link, notes: self.notes.clone() }))
    }
}

/// The control of a real link: `link` operations rewrite its rules, its counters come from
/// the interfaces, nftables and the qdisc (see `impair`).
#[derive(Debug)]
pub struct RealLinkHandle {
    link: Arc<Mutex<RealLink>>,
    notes: Notes,
}

impl LinkHandle for RealLinkHandle {
    fn set_down(&self, down: bool) -> Result<(), String> {
        let state = if down { LinkState::Down } else { LinkState::Up };
        let notes = lock(&self.link).change(Some(state), None).map_err(|e| e.to_string())?;
        lock(&self.notes).extend(notes);
        Ok(())
    }

    fn set(&self, imp: &Impairments) -> Result<(), String> {
        let notes = lock(&self.link).change(None, Some(imp)).map_err(|e| e.to_string())?;
        lock(&self.notes).extend(notes);
        Ok(())
    }

    fn stats(&self, dir: usize) -> Option<LinkStats> {
        if dir > 1 {
            return None;
        }
        let s = lock(&self.link).dir_stats(dir);
        Some(LinkStats {
            offered: s.offered,
            delivered: s.delivered,
            delivered_bytes: s.delivered_bytes,
            lost: s.lost,
            tail_dropped: s.tail_dropped,
            ..LinkStats::default()
        })
    }
}
