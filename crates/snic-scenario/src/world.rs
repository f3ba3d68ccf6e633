//! Building the testbed a scenario describes: NICs (pipeline with vSwitch / P4 / XDP / kernel
//! stages, the NIC's own packets, RoCE engine and memory), switches, links with impairments,
//! traffic sources, and a capture of every port's output.
//!
//! Every port of every node is wrapped in a recording adaptor ([`PortLog`]): it keeps the
//! frames the node sent out of the port (with their times), the times and lengths of the frames
//! it received, and feeds the port's traffic sources (frames injected as if received at their
//! times). Captures (`pcap` expectations, `--pcap DIR`, golden data) and the report's time
//! series are read from these logs, so they work the same over virtual links and real
//! interfaces.
//!
//! Where the ports come from is a [`PortFactory`]'s business: [`SimPorts`] makes virtual links
//! ([`snic_io::vlink`]) and null ports on the simulated clock; the real mode supplies AF_PACKET
//! sockets on veths.

use crate::hosts::Hosts;
use crate::schema::{Impairments, LinkSpec, NicSpec, PolicySource, SwitchSpec, TrafficSpec};
use crate::{Loaded, ScenarioError};
use core::time::Duration;
use snic_io::ebpf::{XdpControl, XdpPrograms};
use snic_io::p4::P4Program;
use snic_io::port::{Port, PortCaps, PortCounters};
use snic_io::stream::StreamKernels;
use snic_io::vlink::{LinkConfig, LinkStats, VLink, VLinkControl};
use snic_io::worker::Node;
use snic_nic::neigh::NeighConfig;
use snic_nic::{Nic, NicConfig};
use snic_pipeline::pipeline::{BuildError, PipelineConfig, StageSpec};
use snic_pipeline::{Batch, MAX_BATCH, Pipeline, PortId, Stage};
use snic_rdma::{Rnic, RnicConfig};
use snic_testbed::{NodeId, Testbed};
use snic_time::Instant;
use snic_vswitch::engine::{VSwitch, VSwitchConfig};
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// A link's two ends, a then b.
pub type LinkPorts = (Box<dyn Port>, Box<dyn Port>);

/// Where a world's ports come from: a link's two ends and the ports with no link (a host's
/// interface, a free port).
pub trait PortFactory {
    /// The two ends of `link` (`a`, then `b`), with its impairments where the mode can apply
    /// them; `seed` seeds its random choices.
    fn link(&mut self, link: &LinkSpec, seed: u64) -> Result<LinkPorts, ScenarioError>;
    /// The port `port` of `node` that no link joins (a host's interface or a free port).
    fn host_port(&mut self, node: &str, port: &str) -> Result<Box<dyn Port>, ScenarioError>;
    /// The control of a link made by [`PortFactory::link`] (cut, restore, impairments,
    /// counters); `None` when this mode cannot control it.
    fn link_control(&mut self, link: &str) -> Option<Box<dyn LinkHandle>> {
        let _ = link;
        None
    }
}

/// Changes a running link and reads its counters (direction 0 is a -> b, 1 is b -> a).
pub trait LinkHandle: core::fmt::Debug {
    /// Cut (`true`) or restore the link.
    fn set_down(&self, down: bool) -> Result<(), String>;
    /// Change both directions' impairments (fields left out keep their values).
    fn set(&self, imp: &Impairments) -> Result<(), String>;
    /// The counters of direction `dir`.
    fn stats(&self, dir: usize) -> Option<LinkStats>;
}

impl LinkHandle for VLinkControl {
    fn set_down(&self, down: bool) -> Result<(), String> {
        VLinkControl::set_down(self, down);
        Ok(())
    }
    fn set(&self, imp: &Impairments) -> Result<(), String> {
        for dir in 0..2 {
            let mut cfg = self.config(dir);
            apply_impairments(&mut cfg, imp)?;
            self.set_config(dir, cfg);
        }
        Ok(())
    }
    fn stats(&self, dir: usize) -> Option<LinkStats> {
        Some(VLinkControl::stats(self, dir))
    }
}

/// The simulated ports: virtual links with the scenario's impairments, null ports elsewhere.
#[derive(Debug, Default)]
pub struct SimPorts {
    controls: BTreeMap<String, VLinkControl>,
}

impl PortFactory for SimPorts {
    fn link(&mut self, link: &LinkSpec, seed: u64) -> Result<LinkPorts, ScenarioError> {
        let (ab, ba) = link_configs(link).map_err(|e| setup(format!("link {}: {e}", link.name)))?;
        let (a, b) = VLink::pair(&link.name, ab, ba, seed);
        self.controls.insert(link.name.clone(), a.control());
        Ok((Box::new(a), Box::new(b)))
    }

    fn host_port(&mut self, node: &str, port: &str) -> Result<Box<dyn Port>, ScenarioError> {
        let _ = (node, port);
        Ok(Box::new(snic_io::null::NullPort::new()))
    }

    fn link_control(&mut self, link: &str) -> Option<Box<dyn LinkHandle>> {
        self.controls.get(link).map(|c| Box::new(c.clone()) as Box<dyn LinkHandle>)
    }
}

fn setup(why: impl Into<String>) -> ScenarioError {
    ScenarioError::Setup(why.into())
}

/// Apply the given impairments over `cfg`.
pub fn apply_impairments(cfg: &mut LinkConfig, imp: &Impairments) -> Result<(), String> {
    for (what, p) in [("loss", imp.loss), ("duplicate", imp.duplicate), ("reorder", imp.reorder)] {
        if let Some(p) = p
            && !(0.0..=1.0).contains(&p)
        {
            return Err(format!("{what} {p} is not a probability in 0..=1"));
        }
    }
    if let Some(v) = imp.loss {
        cfg.loss = v;
    }
    if let Some(v) = imp.duplicate {
        cfg.duplicate = v;
    }
    if let Some(v) = imp.reorder {
        cfg.reorder = v;
    }
    if let Some(v) = imp.reorder_delay {
        cfg.reorder_delay = v.duration();
    }
    if let Some(v) = imp.delay {
        cfg.delay = v.duration();
    }
    if let Some(v) = imp.jitter {
        cfg.jitter = v.duration();
    }
    if let Some(v) = imp.rate_mbps {
        cfg.rate_bps = v.checked_mul(1_000_000).ok_or(format!("rate_mbps {v} is too large"))?;
    }
    if let Some(v) = imp.queue_limit {
        cfg.queue_limit =
            usize::try_from(v).map_err(|_| format!("queue_limit {v} is too large"))?;
    }
    if let Some(v) = imp.ecn_threshold {
        cfg.ecn_threshold =
            Some(usize::try_from(v).map_err(|_| format!("ecn_threshold {v} is too large"))?);
    }
    Ok(())
}

/// The a -> b and b -> a impairments of a link.
pub fn link_configs(link: &LinkSpec) -> Result<(LinkConfig, LinkConfig), String> {
    let base = Impairments {
        loss: Some(link.loss),
        duplicate: Some(link.duplicate),
        reorder: Some(link.reorder),
        reorder_delay: Some(link.reorder_delay),
        delay: Some(link.delay),
        jitter: Some(link.jitter),
        rate_mbps: Some(link.rate_mbps),
        queue_limit: Some(link.queue_limit),
        ecn_threshold: link.ecn_threshold,
    };
    let mut cfg = LinkConfig::default();
    apply_impairments(&mut cfg, &base)?;
    let mut ab = cfg;
    let mut ba = cfg;
    if let Some(i) = &link.a_to_b {
        apply_impairments(&mut ab, i)?;
    }
    if let Some(i) = &link.b_to_a {
        apply_impairments(&mut ba, i)?;
    }
    Ok((ab, ba))
}

/// The seed of link `index` (its impairments' random choices) in a run seeded `seed`.
pub fn link_seed(seed: u64, index: usize) -> u64 {
    let mut z = seed ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

// ---------------------------------------------------------------------------------------------
// The recording port adaptor
// ---------------------------------------------------------------------------------------------

/// What one port of one node did: frames sent (with times), frames received (times and
/// lengths), and the traffic still to inject.
#[derive(Debug, Default)]
pub struct PortLog {
    /// Frames the node sent out of this port, with when.
    pub sent: Vec<(Instant, Vec<u8>)>,
    /// Frames the node received from this port (injected traffic included): when, bytes.
    pub received: Vec<(Instant, u32)>,
    /// Traffic not yet injected, in time order.
    pub inbox: VecDeque<(Instant, Vec<u8>)>,
    /// Frames injected so far (the traffic sources' frames), with when.
    pub injected_frames: Vec<(Instant, Vec<u8>)>,
    /// Frames injected so far.
    pub injected: u64,
    /// Bytes injected so far.
    pub injected_bytes: u64,
}

/// A shared [`PortLog`].
pub type SharedLog = Arc<Mutex<PortLog>>;

fn lock(l: &SharedLog) -> MutexGuard<'_, PortLog> {
    l.lock().unwrap_or_else(|e| e.into_inner())
}

/// A port wrapped to record what passes and to inject traffic.
#[derive(Debug)]
struct Recorded {
    inner: Box<dyn Port>,
    log: SharedLog,
}

impl Port for Recorded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let start = batch.len();
        let mut n = 0;
        {
            let mut log = lock(&self.log);
            while !batch.is_full() && log.inbox.front().is_some_and(|(t, _)| *t <= now) {
                let Some((_, f)) = log.inbox.pop_front() else { break };
                if let Some(p) = batch.push_frame(&f) {
                    p.meta.rx_time = now;
                }
                log.injected += 1;
                log.injected_bytes += f.len() as u64;
                log.injected_frames.push((now, f));
                n += 1;
            }
        }
        n += self.inner.recv(now, batch)?;
        let mut log = lock(&self.log);
        for p in &batch.packets()[start..] {
            log.received.push((now, p.len() as u32));
        }
        Ok(n)
    }

    fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        {
            let mut log = lock(&self.log);
            for p in batch.iter() {
                log.sent.push((now, p.data().to_vec()));
            }
        }
        self.inner.send(now, batch)
    }

    fn poll_fd(&self) -> Option<std::os::fd::RawFd> {
        self.inner.poll_fd()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let inbox = lock(&self.log).inbox.front().map(|(t, _)| *t);
        inbox.into_iter().chain(self.inner.poll_timeout()).min()
    }

    fn is_exhausted(&self) -> bool {
        self.inner.is_exhausted() && lock(&self.log).inbox.is_empty()
    }

    fn caps(&self) -> PortCaps {
        self.inner.caps()
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    fn counters(&self) -> PortCounters {
        let mut c = self.inner.counters();
        let log = lock(&self.log);
        c.rx_packets += log.injected;
        c.rx_bytes += log.injected_bytes;
        c
    }
}

// ---------------------------------------------------------------------------------------------
// The world
// ---------------------------------------------------------------------------------------------

/// One node's control handles.
#[derive(Debug, Default)]
pub struct NodeControls {
    /// The `vswitch` stage's vSwitch.
    pub vswitch: Option<VSwitch>,
    /// The `p4` stage's program.
    pub p4: Option<P4Program>,
    /// The `xdp:` stages, in order.
    pub xdp: Vec<XdpControl>,
    /// Port names; port `i` is `PortId(i)`.
    pub ports: Vec<String>,
    /// Whether it is a NIC.
    pub is_nic: bool,
}

/// One link as built: its ends and its control.
#[derive(Debug)]
pub struct LinkEnds {
    /// `NODE.PORT` of end a.
    pub a: String,
    /// `NODE.PORT` of end b.
    pub b: String,
    /// Its control, when the mode gives one.
    pub control: Option<Box<dyn LinkHandle>>,
}

/// The built system.
#[derive(Debug)]
pub struct World {
    /// The testbed (the simulated clock, every node).
    pub tb: Testbed,
    /// Every NIC and switch by name.
    pub nodes: BTreeMap<String, NodeId>,
    /// The NICs only (`tb.nic_mut(id)` gives `NicDevice { node, rnic }`).
    pub nics: BTreeMap<String, NodeId>,
    /// The hosts.
    pub hosts: Hosts,
    /// Each node's control handles, by name.
    pub controls: BTreeMap<String, NodeControls>,
    /// Each link's ends and control, by name.
    pub links: BTreeMap<String, LinkEnds>,
    /// Each port's log, by `NODE.PORT`.
    pub logs: BTreeMap<String, SharedLog>,
    /// Each host's interface port (`NODE.PORT`), by host name.
    pub host_ports: BTreeMap<String, String>,
    /// The seed the world was built with.
    pub seed: u64,
    /// The directory relative paths are relative to (the scenario's).
    pub dir: PathBuf,
    /// When the run ended (set by the driver).
    pub end: Instant,
    /// Temporary files to remove (compiled XDP objects).
    temp: Vec<PathBuf>,
}

impl Drop for World {
    fn drop(&mut self) {
        for p in &self.temp {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

impl World {
    /// The port (`NODE.PORT`) a capture name refers to: a port, or a host (its interface).
    pub fn capture_port(&self, name: &str) -> Option<String> {
        // Spaces around it are ignored, as `snic scenario check` ignores them.
        let name = name.trim();
        if self.logs.contains_key(name) {
            return Some(name.to_string());
        }
        self.host_ports.get(name).cloned()
    }

    /// The frames the port (or host) `name` was sent so far: what its node sent out of it.
    pub fn sent(&self, name: &str) -> Option<Vec<(Instant, Vec<u8>)>> {
        let port = self.capture_port(name)?;
        self.logs.get(&port).map(|l| lock(l).sent.clone())
    }
}

/// How to build.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// Packet-trace filter of every pipeline (the pipeline's syntax).
    pub trace: Option<String>,
}

/// Build the world `loaded` describes, with ports from `ports`.
pub fn build(
    loaded: &Loaded,
    seed: u64,
    ports: &mut dyn PortFactory,
) -> Result<World, ScenarioError> {
    build_with(loaded, seed, ports, &BuildOptions::default())
}

/// [`build`] with options.
pub fn build_with(
    loaded: &Loaded,
    seed: u64,
    factory: &mut dyn PortFactory,
    opts: &BuildOptions,
) -> Result<World, ScenarioError> {
    let sc = &loaded.scenario;
    // Every node's port names, to resolve `NODE.PORT`.
    let mut node_ports: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for n in &sc.nics {
        if node_ports.insert(n.name.clone(), n.ports.clone()).is_some() {
            return Err(setup(format!("node {} is defined twice", n.name)));
        }
    }
    for s in &sc.switches {
        if node_ports.insert(s.name.clone(), s.ports.clone()).is_some() {
            return Err(setup(format!("node {} is defined twice", s.name)));
        }
    }
    let resolve = |what: &str, s: &str| -> Result<(String, usize), ScenarioError> {
        let (node, port) =
            s.split_once('.').ok_or_else(|| setup(format!("{what}: {s:?} is not NODE.PORT")))?;
        let ports =
            node_ports.get(node).ok_or_else(|| setup(format!("{what}: no node {node:?}")))?;
        let i = ports.iter().position(|p| p == port).ok_or_else(|| {
            setup(format!("{what}: node {node} has no port {port:?} (it has {})", ports.join(", ")))
        })?;
        Ok((node.to_string(), i))
    };

    // Links first: their ends take ports.
    let mut made: BTreeMap<(String, usize), Box<dyn Port>> = BTreeMap::new();
    let mut links = BTreeMap::new();
    for (i, l) in sc.links.iter().enumerate() {
        let a = resolve(&format!("link {}", l.name), &l.a)?;
        let b = resolve(&format!("link {}", l.name), &l.b)?;
        if a == b || made.contains_key(&a) || made.contains_key(&b) {
            return Err(setup(format!("link {}: a port carries one link at most", l.name)));
        }
        let (pa, pb) = factory.link(l, link_seed(seed, i))?;
        made.insert(a, pa);
        made.insert(b, pb);
        let control = factory.link_control(&l.name);
        links.insert(l.name.clone(), LinkEnds { a: l.a.clone(), b: l.b.clone(), control });
    }
    let mut host_ports = BTreeMap::new();
    for h in &sc.hosts {
        if let Some(p) = &h.port {
            let key = resolve(&format!("host {}", h.name), &format!("{}.{p}", h.nic))?;
            if made.contains_key(&key) {
                return Err(setup(format!(
                    "host {}: port {}.{p} already carries a link",
                    h.name, h.nic
                )));
            }
            host_ports.insert(h.name.clone(), format!("{}.{p}", h.nic));
        }
    }

    // Every port, wrapped in its log.
    let mut logs: BTreeMap<String, SharedLog> = BTreeMap::new();
    let mut node_port_list: BTreeMap<String, Vec<Box<dyn Port>>> = BTreeMap::new();
    for (node, names) in &node_ports {
        let mut list: Vec<Box<dyn Port>> = Vec::new();
        for (i, pname) in names.iter().enumerate() {
            let inner = match made.remove(&(node.clone(), i)) {
                Some(p) => p,
                None => factory.host_port(node, pname)?,
            };
            let log = SharedLog::default();
            logs.insert(format!("{node}.{pname}"), log.clone());
            list.push(Box::new(Recorded { inner, log }));
        }
        node_port_list.insert(node.clone(), list);
    }

    // Traffic into the logs' inboxes.
    let mut inject: BTreeMap<String, Vec<(Instant, usize, Vec<u8>)>> = BTreeMap::new();
    for (i, t) in sc.traffic.iter().enumerate() {
        let name = t.name.clone().unwrap_or_else(|| format!("traffic{i}"));
        let port = match host_ports.get(&t.into) {
            Some(p) => p.clone(),
            None if logs.contains_key(&t.into) => t.into.clone(),
            None => {
                return Err(setup(format!(
                    "traffic {name}: {:?} is neither a host with a port nor NODE.PORT",
                    t.into
                )));
            }
        };
        let frames =
            traffic_frames(loaded, t, seed).map_err(|e| setup(format!("traffic {name}: {e}")))?;
        let list = inject.entry(port).or_default();
        list.extend(frames.into_iter().map(|(at, f)| (at, i, f)));
    }
    for (port, mut frames) in inject {
        frames.sort_by_key(|(at, i, _)| (*at, *i));
        if let Some(log) = logs.get(&port) {
            lock(log).inbox.extend(frames.into_iter().map(|(at, _, f)| (at, f)));
        }
    }

    let mut tb = Testbed::new();
    let mut nodes = BTreeMap::new();
    let mut nics = BTreeMap::new();
    let mut controls = BTreeMap::new();
    let mut temp = Vec::new();
    for (index, n) in sc.nics.iter().enumerate() {
        let ports = node_port_list.remove(&n.name).unwrap_or_default();
        let (id, ctl) = build_nic(loaded, index, n, ports, opts, &mut tb, &mut temp)?;
        nodes.insert(n.name.clone(), id);
        nics.insert(n.name.clone(), id);
        controls.insert(n.name.clone(), ctl);
    }
    for s in &sc.switches {
        let ports = node_port_list.remove(&s.name).unwrap_or_default();
        let (id, ctl) = build_switch(loaded, s, ports, opts, &mut tb, &mut temp)?;
        nodes.insert(s.name.clone(), id);
        controls.insert(s.name.clone(), ctl);
    }
    let hosts = Hosts::build(loaded, seed, &mut tb, &nics)?;
    Ok(World {
        tb,
        nodes,
        nics,
        hosts,
        controls,
        links,
        logs,
        host_ports,
        seed,
        dir: loaded.dir.clone(),
        end: Instant::ZERO,
        temp,
    })
}

/// A NIC's default MAC: `02:00:00:00:NN:01`, `NN` its index + 1.
pub fn default_mac(index: usize) -> [u8; 6] {
    [2, 0, 0, 0, (index + 1) as u8, 1]
}

/// A NIC's default address: `192.0.2.(index + 1)`.
pub fn default_ip(index: usize) -> IpAddr {
    IpAddr::from([192, 0, 2, (index + 1) as u8])
}

/// Resolve `p` relative to the scenario's directory.
fn rel(dir: &Path, p: &str) -> String {
    let path = Path::new(p);
    if path.is_absolute() || p.is_empty() {
        p.to_string()
    } else {
        dir.join(path).display().to_string()
    }
}

/// Parse stage strings, resolving their paths relative to the scenario's directory, compiling
/// `xdp:` C sources with clang.
fn stage_specs(
    loaded: &Loaded,
    node: &str,
    stages: &[String],
    temp: &mut Vec<PathBuf>,
) -> Result<Vec<StageSpec>, ScenarioError> {
    let dir = &loaded.dir;
    let mut out = Vec::new();
    for (i, s) in stages.iter().enumerate() {
        let mut spec: StageSpec =
            s.parse().map_err(|e| setup(format!("node {node}: stage {s:?}: {e}")))?;
        match &mut spec {
            StageSpec::Tap(p) => *p = rel(dir, p),
            StageSpec::P4 { program, entries, include } => {
                *program = rel(dir, program);
                if let Some(e) = entries {
                    *e = rel(dir, e);
                }
                for inc in include.iter_mut() {
                    *inc = rel(dir, inc);
                }
            }
            StageSpec::Xdp { program, .. } => {
                let p = rel(dir, program);
                *program =
                    if p.ends_with(".c") { compile_c(Path::new(&p), node, i, temp)? } else { p };
            }
            _ => {}
        }
        out.push(spec);
    }
    Ok(out)
}

/// Compile an XDP program's C source with `clang -O2 -target bpf` into a temporary directory.
fn compile_c(
    src: &Path,
    node: &str,
    i: usize,
    temp: &mut Vec<PathBuf>,
) -> Result<String, ScenarioError> {
    // Unique per process and call: scenarios may be built on several threads at once.
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir()
        .join(format!("snic-scenario-{}-{call}-{node}-{i}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| setup(format!("{}: {e}", dir.display())))?;
    temp.push(dir.clone());
    let obj = dir.join("prog.o");
    let out = std::process::Command::new("clang")
        .args(["-O2", "-g", "-target", "bpf", "-c"])
        // Debian and Ubuntu keep `asm/types.h` under the multiarch directory.
        .arg(format!("-I/usr/include/{}-linux-gnu", std::env::consts::ARCH))
        .arg(src)
        .arg("-o")
        .arg(&obj)
        .output()
        .map_err(|e| setup(format!("node {node}: clang for {}: {e}", src.display())))?;
    if !out.status.success() {
        return Err(setup(format!(
            "node {node}: clang failed on {}:\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(obj.display().to_string())
}

/// The `kernel:` stages of a node; the nonce salt of `crypt` comes from the scenario's seed
/// and the node's name, not from the system, so runs are reproducible.
fn kernels_of(stages: &[StageSpec], loaded: &Loaded, node: &str) -> Result<StreamKernels, String> {
    let mut h: u64 = loaded.scenario.seed ^ 0xcbf2_9ce4_8422_2325;
    for b in node.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let salt = (h as u32).to_le_bytes();
    StreamKernels::with_salt(&snic_stream::Registry::with_builtins(), stages, 1, salt)
}

/// The vSwitch of a `vswitch` stage from its policy source (the default policy without one).
fn build_vswitch(
    loaded: &Loaded,
    node: &str,
    src: Option<&PolicySource>,
) -> Result<VSwitch, ScenarioError> {
    let policy = policy_of(&loaded.dir, src).map_err(|e| setup(format!("node {node}: {e}")))?;
    // The engine's default hash seed is fixed: runs are reproducible.
    VSwitch::new(policy, VSwitchConfig::default())
        .map_err(|e| setup(format!("node {node}: vswitch: {e}")))
}

/// A policy from its source (as `snic vswitch check` reads files; inline documents are the same
/// document as a table).
pub fn policy_of(
    dir: &Path,
    src: Option<&PolicySource>,
) -> Result<snic_vswitch::policy::Policy, String> {
    match src {
        None => Ok(snic_vswitch::policy::default_policy()),
        Some(PolicySource::File(f)) => {
            snic_vswitch::policy::toml::load_policy(&dir.join(f)).map_err(|e| e.to_string())
        }
        Some(PolicySource::Inline(v)) => {
            let text = toml::to_string(v).map_err(|e| format!("inline policy: {e}"))?;
            snic_vswitch::policy::toml::parse_policy(&text, "<inline policy>")
                .map_err(|e| e.to_string())
        }
    }
}

fn pipeline_config(stages: Vec<StageSpec>, ports: usize, opts: &BuildOptions) -> PipelineConfig {
    let mut cfg = PipelineConfig::new(stages);
    cfg.ports = ports as u16;
    cfg.trace = opts.trace.clone();
    cfg
}

fn build_nic(
    loaded: &Loaded,
    index: usize,
    n: &NicSpec,
    ports: Vec<Box<dyn Port>>,
    opts: &BuildOptions,
    tb: &mut Testbed,
    temp: &mut Vec<PathBuf>,
) -> Result<(NodeId, NodeControls), ScenarioError> {
    let name = &n.name;
    let err = |w: String| setup(format!("NIC {name}: {w}"));
    let stages = stage_specs(loaded, name, &n.stages, temp)?;
    let mac = n.mac.map_or_else(|| default_mac(index), |m| m.0);
    let ips = if n.ips.is_empty() { vec![default_ip(index)] } else { n.ips.clone() };
    let wire = match &n.wire {
        None => 0,
        Some(w) => n
            .ports
            .iter()
            .position(|p| p == w)
            .ok_or_else(|| err(format!("wire port {w:?} is not one of its ports")))?,
    };
    let nic_cfg = NicConfig {
        mac: snic_wire::ethernet::EthernetAddress(mac),
        ips: ips.clone(),
        wire: PortId(wire as u16),
        neigh: NeighConfig { retry_interval: n.neigh_retry.duration(), ..NeighConfig::default() },
    };
    let cc = snic_rdma::cc::CcConfig { enabled: n.rdma.dcqcn, ..Default::default() };
    let rcfg = RnicConfig {
        local_ip: ips[0],
        more_ips: ips[1..].to_vec(),
        host_pool: n.memory.host.0,
        on_chip: n.memory.on_chip.0,
        on_board: n.memory.on_board.0,
        dscp: n.rdma.dscp,
        ecn: n.rdma.ecn,
        max_inflight: n.rdma.max_inflight,
        cc,
        ..RnicConfig::default()
    };
    let rnic = Rnic::new(rcfg).map_err(|e| err(format!("RoCE engine: {e:?}")))?;
    let nic = Nic::new(nic_cfg);
    let vswitch = if stages.contains(&StageSpec::VSwitch) {
        Some(build_vswitch(loaded, name, n.vswitch.as_ref())?)
    } else {
        None
    };
    let p4 = P4Program::from_stages(&stages, 1).map_err(|e| err(e.to_string()))?;
    let mut kernels = kernels_of(&stages, loaded, name).map_err(err)?;
    let mut xdp = XdpPrograms::from_stages(&stages, 1).map_err(err)?;
    let cfg = pipeline_config(stages, ports.len(), opts);
    let pipeline = snic_io::nic::build_nic_pipeline(
        &cfg,
        &nic,
        vswitch.as_ref(),
        p4.as_ref(),
        Some(&mut kernels),
        Some(&mut xdp),
    )
    .map_err(|e| err(e.to_string()))?;
    let node = snic_io::nic::NicNode::new(name.clone(), pipeline, ports, nic, MAX_BATCH);
    let id = tb.add_nic_device(node, rnic);
    let ctl = NodeControls {
        vswitch,
        p4,
        xdp: xdp.controls().to_vec(),
        ports: n.ports.clone(),
        is_nic: true,
    };
    Ok((id, ctl))
}

fn build_switch(
    loaded: &Loaded,
    s: &SwitchSpec,
    ports: Vec<Box<dyn Port>>,
    opts: &BuildOptions,
    tb: &mut Testbed,
    temp: &mut Vec<PathBuf>,
) -> Result<(NodeId, NodeControls), ScenarioError> {
    let name = &s.name;
    let err = |w: String| setup(format!("switch {name}: {w}"));
    let strs: Vec<String> = if s.stages.is_empty() {
        vec!["parse".into(), "l2fwd:learn".into()]
    } else {
        s.stages.clone()
    };
    let stages = stage_specs(loaded, name, &strs, temp)?;
    if stages.contains(&StageSpec::Local) {
        return Err(err("a switch has no local stage (no RoCE engine)".into()));
    }
    let vswitch = if stages.contains(&StageSpec::VSwitch) {
        Some(build_vswitch(loaded, name, s.vswitch.as_ref())?)
    } else {
        None
    };
    let p4 = P4Program::from_stages(&stages, 1).map_err(|e| err(e.to_string()))?;
    let mut kernels = kernels_of(&stages, loaded, name).map_err(err)?;
    let mut xdp = XdpPrograms::from_stages(&stages, 1).map_err(err)?;
    let cfg = pipeline_config(stages, ports.len(), opts);
    let pipeline = {
        let mut kernel_stage = kernels.factory_for(0);
        let mut xdp_stage = xdp.factory_for(0);
        let mut opener = |path: &str| -> io::Result<Box<dyn std::io::Write + Send>> {
            Ok(Box::new(std::io::BufWriter::new(std::fs::File::create(path)?)))
        };
        let mut factory = |spec: &StageSpec| match spec {
            StageSpec::Kernel { .. } => kernel_stage(spec),
            StageSpec::Xdp { .. } => xdp_stage(spec),
            StageSpec::VSwitch => vswitch.as_ref().map(|vs| {
                vs.stage()
                    .map(|s| Box::new(s) as Box<dyn Stage>)
                    .map_err(|e| BuildError::Stage { stage: "vswitch".into(), why: e.to_string() })
            }),
            StageSpec::P4 { .. } => p4.as_ref().map(|p| {
                p.stage(0).map(|s| Box::new(s) as Box<dyn Stage>).ok_or_else(|| BuildError::Stage {
                    stage: "p4".into(),
                    why: "the program has no switch".into(),
                })
            }),
            _ => None,
        };
        Pipeline::build_with(&cfg, &mut opener, &mut factory).map_err(|e| err(e.to_string()))?
    };
    let id = tb.add_device(Box::new(Node::new(name.clone(), pipeline, ports, MAX_BATCH)));
    let ctl = NodeControls {
        vswitch,
        p4,
        xdp: xdp.controls().to_vec(),
        ports: s.ports.clone(),
        is_nic: false,
    };
    Ok((id, ctl))
}

/// The frames of one traffic source with the times they enter.
pub fn traffic_frames(
    loaded: &Loaded,
    t: &TrafficSpec,
    seed: u64,
) -> Result<Vec<(Instant, Vec<u8>)>, String> {
    let start = Instant::ZERO + t.start.duration();
    let mut out = Vec::new();
    if let Some(p) = &t.pcap {
        let path = loaded.dir.join(p);
        for (ts, f) in read_capture(&path)? {
            out.push((start + ts, f));
        }
    }
    if let Some(g) = &t.generator {
        let count = usize::try_from(g.count).map_err(|_| "generator count too large")?;
        let frames = snic_io::generator::frames(count, g.seed.unwrap_or(seed));
        for (i, (_, f)) in frames.into_iter().enumerate() {
            out.push((start + g.interval.duration() * i as u32, f));
        }
    }
    out.extend(packet_frames(&t.packets, start)?);
    Ok(out)
}

/// Scripted frames (`packets`) from `start`, each spec after the previous one unless it says
/// `at`.
pub fn packet_frames(
    packets: &[crate::schema::PacketSpec],
    start: Instant,
) -> Result<Vec<(Instant, Vec<u8>)>, String> {
    let mut out = Vec::new();
    let mut cursor = start;
    for (i, p) in packets.iter().enumerate() {
        let frame = match (&p.layers, &p.hex) {
            (Some(l), None) => crate::packet::build(l).map_err(|e| format!("packet {i}: {e}"))?,
            (None, Some(h)) => {
                crate::packet::from_hex(h).map_err(|e| format!("packet {i}: {e}"))?
            }
            _ => return Err(format!("packet {i}: give exactly one of layers and hex")),
        };
        let t0 = p.at.map_or(cursor, |at| start + at.duration());
        let iv = p.interval.duration();
        for k in 0..p.count {
            out.push((t0 + iv * k, frame.clone()));
        }
        cursor = t0 + iv * p.count;
    }
    Ok(out)
}

/// Every frame of a pcap or pcapng file with its time relative to the first frame, read by
/// snic's one capture reader (`snic_io::pcap::read`). A block that does not parse is an error
/// here (a golden capture or a traffic source must be read whole), and so is a capture of
/// more than 1 GiB of frames: every frame is held in memory.
pub fn read_capture(path: &Path) -> Result<Vec<(Duration, Vec<u8>)>, String> {
    use snic_io::pcap::read::{CaptureReader, Record};
    const MAX_CAPTURE: u64 = 1 << 30;
    let name = path.display();
    let mut r = CaptureReader::open(path).map_err(|e| format!("{name}: {e}"))?;
    let mut frames: Vec<(Duration, Vec<u8>)> = Vec::new();
    let mut bytes = 0u64;
    while let Some(rec) = r.next_record().map_err(|e| format!("{name}: {e}"))? {
        match rec {
            Record::Frame { timestamp, data, .. } => {
                bytes += data.len() as u64;
                if bytes > MAX_CAPTURE {
                    return Err(format!("{name}: more than {MAX_CAPTURE} bytes of frames"));
                }
                frames.push((timestamp, data.to_vec()));
            }
            Record::Unreadable { reason } => return Err(format!("{name}: {reason}")),
        }
    }
    let first = frames.first().map_or(Duration::ZERO, |f| f.0);
    Ok(frames.into_iter().map(|(t, f)| (t.saturating_sub(first), f)).collect())
}

/// Write frames as a pcap file (nanosecond timestamps).
pub fn write_capture(path: &Path, frames: &[(Instant, Vec<u8>)]) -> Result<(), String> {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let header =
        PcapHeader { ts_resolution: pcap_file::TsResolution::NanoSecond, ..Default::default() };
    let mut w = PcapWriter::with_header(std::io::BufWriter::new(file), header)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    for (t, f) in frames {
        let ts = Duration::from_nanos(t.as_nanos());
        w.write_packet(&PcapPacket::new(ts, f.len() as u32, f))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Counters
// ---------------------------------------------------------------------------------------------

/// Add every numeric leaf of `v` under `prefix` (`prefix.key.sub`).
fn flatten(prefix: &str, v: &serde_json::Value, out: &mut BTreeMap<String, u64>) {
    match v {
        serde_json::Value::Number(n) => {
            if let Some(x) = n.as_u64() {
                out.insert(prefix.to_string(), x);
            }
        }
        serde_json::Value::Bool(b) => {
            out.insert(prefix.to_string(), u64::from(*b));
        }
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                flatten(&format!("{prefix}.{k}"), x, out);
            }
        }
        _ => {}
    }
}

fn flatten_ser<T: serde::Serialize>(prefix: &str, v: &T, out: &mut BTreeMap<String, u64>) {
    if let Ok(j) = serde_json::to_value(v) {
        flatten(prefix, &j, out);
    }
}

/// Every counter of the world by its scenario name (see the crate doc of the report):
/// `NODE.pipeline.{rx_packets,rx_bytes,tx_packets,tx_bytes,drops}`,
/// `NODE.stage.STAGE.FIELD`, `NODE.drop.REASON` (every reason, zero or not),
/// `NODE.port.PORT.FIELD`, `NIC.nic.FIELD`, `NIC.neigh.FIELD`, `NIC.rdma.FIELD`,
/// `NODE.vswitch.FIELD`, `NODE.xdp.ACTION`, `link.LINK.a_to_b.FIELD`, and the hosts'.
pub fn counters(world: &World) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let tb = &world.tb;
    for (name, id) in &world.nodes {
        let ctl = world.controls.get(name);
        let (c, io) = if let Some(nic) = tb.nic(*id) {
            flatten_ser(&format!("{name}.nic"), &nic.node.nic_counters(), &mut out);
            flatten_ser(&format!("{name}.neigh"), nic.node.nic().neighbours().counters(), &mut out);
            flatten_ser(&format!("{name}.rdma"), nic.rnic.stats(), &mut out);
            (nic.node.counters(), nic.node.port_counters())
        } else if let Some(node) = tb.node(*id) {
            (node.counters(), node.port_counters())
        } else {
            continue;
        };
        for i in 0..snic_pipeline::drop::DROP_REASONS {
            if let Some(k) = snic_pipeline::DropReason::slot_key(i) {
                out.insert(format!("{name}.drop.{k}"), 0);
            }
        }
        let mut drops = 0;
        let mut add_drops = |d: &snic_pipeline::DropCounts, out: &mut BTreeMap<String, u64>| {
            for (k, n) in d.nonzero() {
                *out.entry(format!("{name}.drop.{k}")).or_default() += n;
                drops += n;
            }
        };
        for s in &c.stages {
            add_drops(&s.drops, &mut out);
            for (f, v) in [
                ("packets_in", s.packets_in),
                ("packets_out", s.packets_out),
                ("bytes_in", s.bytes_in),
                ("errors", s.errors),
                ("held", s.held),
                ("local", s.local),
                ("created", s.created),
            ] {
                *out.entry(format!("{name}.stage.{}.{f}", s.name)).or_default() += v;
            }
        }
        let port_names = ctl.map(|c| c.ports.clone()).unwrap_or_default();
        let (mut rxp, mut rxb, mut txp, mut txb) = (0, 0, 0, 0);
        for p in &c.ports {
            add_drops(&p.rx_drops, &mut out);
            add_drops(&p.tx_drops, &mut out);
            let pname =
                port_names.get(usize::from(p.port)).cloned().unwrap_or_else(|| p.port.to_string());
            for (f, v) in [
                ("rx_packets", p.rx_packets),
                ("rx_bytes", p.rx_bytes),
                ("tx_packets", p.tx_packets),
                ("tx_bytes", p.tx_bytes),
                ("rx_drops", p.rx_drops.total()),
                ("tx_drops", p.tx_drops.total()),
            ] {
                out.insert(format!("{name}.port.{pname}.{f}"), v);
            }
            rxp += p.rx_packets;
            rxb += p.rx_bytes;
            txp += p.tx_packets;
            txb += p.tx_bytes;
        }
        for (i, (_, pc)) in io.iter().enumerate() {
            let pname = port_names.get(i).cloned().unwrap_or_else(|| i.to_string());
            out.insert(format!("{name}.port.{pname}.rx_errors"), pc.rx_errors);
            out.insert(format!("{name}.port.{pname}.tx_dropped"), pc.tx_dropped);
        }
        for (f, v) in [
            ("rx_packets", rxp),
            ("rx_bytes", rxb),
            ("tx_packets", txp),
            ("tx_bytes", txb),
            ("drops", drops),
        ] {
            out.insert(format!("{name}.pipeline.{f}"), v);
        }
        if let Some(ctl) = ctl {
            if let Some(vs) = &ctl.vswitch {
                let st = vs.stats();
                flatten_ser(&format!("{name}.vswitch"), &st.fast, &mut out);
                for (k, v) in [
                    ("generation", st.generation),
                    ("flows", st.flows as u64),
                    ("actions", st.actions as u64),
                    ("exceptions_queued", st.exceptions_queued as u64),
                ] {
                    out.insert(format!("{name}.vswitch.{k}"), v);
                }
            }
            for x in &ctl.xdp {
                let stage =
                    if x.name() == "xdp" { "xdp".to_string() } else { x.name().to_string() };
                for (a, n) in snic_io::ebpf::ACTIONS.iter().zip(x.actions()) {
                    out.insert(format!("{name}.{stage}.{a}"), n);
                }
            }
        }
    }
    for (lname, l) in &world.links {
        if let Some(c) = &l.control {
            for (dir, d) in [(0, "a_to_b"), (1, "b_to_a")] {
                if let Some(s) = c.stats(dir) {
                    flatten_ser(&format!("link.{lname}.{d}"), &s, &mut out);
                }
            }
        }
    }
    world.hosts.counters(&mut out);
    out
}
