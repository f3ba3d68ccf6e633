//! The runtime: ports and pipelines on real threads, on the real clock.
//!
//! A [`Runtime`] is built from a [`RunConfig`] (ports, stages, workers, RSS key, batch size,
//! trace filter; deserialisable from TOML). It runs in one of two models:
//!
//! - **Per-worker queues.** With N > 1 workers and every port able to split into queues
//!   ([`PortSpec::open_queues`]: AF_PACKET fanout, AF_XDP queues, multi-queue TAP, null), worker
//!   `k` owns queue `k` of every port and runs the whole loop itself: receive from its queues,
//!   its pipeline, transmit on its own queue of the egress port, `poll(2)` on its own
//!   descriptors when idle (see [`QueuePool`]). The kernel spreads flows over the queues; there
//!   is no I/O thread, no dispatch and no `pipeline_full` drop. The calling thread only watches
//!   the stop flag, the stats flag and the idle timeout.
//! - **One I/O loop** owns every port otherwise (a pcap, generator or UDP port is present, or
//!   one worker). With one worker it runs the pipeline itself; with N > 1 it spreads packets
//!   over N worker threads by RSS hash (so all packets of a flow go to one worker, in order),
//!   through bounded queues: a full queue is a counted `pipeline_full` drop, never a block of
//!   the I/O loop. Replay sources (pcap files, generators) are the exception: they are only read
//!   while every worker queue has room, so a replay is paced by the workers rather than
//!   dropped. When no port has anything, the loop waits in `poll(2)` on the ports' descriptors
//!   with a short timeout instead of spinning.
//!
//! Batches hold up to 256 packets. The report names each port once: with queues, a port's
//! counters are the sum of its queues' ([`PortCounters::merge`]).
//!
//! A run ends when the stop flag is set (SIGINT/SIGTERM, see [`crate::signal`]), or when every
//! finite source (pcap input, generator) is exhausted and all queues are drained, or after
//! [`RunConfig::idle_exit_ms`] without traffic. The [`RunReport`] it returns merges every
//! worker's per-stage and per-port counters with the I/O loop's.
//!
//! With a trace filter, the report's trace holds every traced packet's whole path: the pipeline's
//! events (recorded by the worker that processed it) and the transmit step (`tx`: sent, segmented
//! or dropped at a port), which the I/O loop records in one ring per worker as it transmits that
//! worker's batches (a queue worker records it itself). Packets are grouped by sequence number, the pipeline's stages in order and
//! the transmit step last. Sequence numbers are per pipeline: with several workers, events of
//! the same number from different workers are kept apart, worker by worker.
//!
//! The embedded default ([`RunConfig::default`]) needs no root and no files: a generator feeds
//! parse → classify → l2fwd, which forwards to a null sink.

use crate::p4::P4Program;
use crate::port::{Port, PortCounters};
use crate::spec::PortSpec;
use crate::worker::{Egress, Handler, Inline, Node, PortSet, QueuePool, WorkerPool};
use core::fmt;
use serde::{Deserialize, Serialize};
use snic_pipeline::pipeline::{BuildError, PipelineConfig, StageSpec, parse_rss_key};
use snic_pipeline::rss::{DEFAULT_KEY, Toeplitz};
use snic_pipeline::{Batch, Counters, DropReason, MAX_BATCH, Pipeline, TraceRing};
use snic_time::{Clock, Instant, MonotonicClock};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn default_stages() -> Vec<StageSpec> {
    ["parse", "classify", "l2fwd"].iter().filter_map(|s| s.parse().ok()).collect()
}
fn default_workers() -> usize {
    1
}
fn default_batch_size() -> usize {
    MAX_BATCH
}
/// Most batches a worker queue may hold (each holds up to 256 packets).
pub const MAX_QUEUE_DEPTH: usize = 4096;

fn default_queue_depth() -> usize {
    16
}
fn default_idle_wait_ms() -> u64 {
    10
}
fn default_rx_coalesce_us() -> u64 {
    50
}

/// Packets the embedded default configuration generates.
pub const DEFAULT_GEN_COUNT: u64 = 100_000;

/// Everything `snic run` needs; deserialisable from TOML:
///
/// ```toml
/// ports = ["pcap:in.pcap", "pcap:,out.pcap"]
/// stages = ["parse", "classify", "l2fwd"]
/// workers = 2
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Ports, in order: the first is `PortId(0)`.
    pub ports: Vec<PortSpec>,
    /// Pipeline stages. Default: parse, classify, l2fwd.
    #[serde(default = "default_stages")]
    pub stages: Vec<StageSpec>,
    /// Worker threads. Default 1 (the I/O loop runs the pipeline itself).
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// RSS key as 80 hex digits; default the well-known verification key.
    #[serde(default)]
    pub rss_key: Option<String>,
    /// Most packets per batch, 1..=256. Default 256.
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    /// Trace filter expression (the pipeline's syntax); none traces nothing.
    #[serde(default)]
    pub trace: Option<String>,
    /// Batches each worker's input queue holds. Default 16.
    #[serde(default = "default_queue_depth")]
    pub queue_depth: usize,
    /// Longest `poll(2)` wait of an idle I/O loop, in milliseconds. Default 10.
    #[serde(default = "default_idle_wait_ms")]
    pub idle_wait_ms: u64,
    /// Receive coalescing, in microseconds: a loop that has been receiving at least 64 frames
    /// a millisecond, woken from its idle wait within a millisecond of its last frame, waits
    /// this long before it reads, so that frames gather into fuller batches and a busy link
    /// wakes it less often (what a NIC's adaptive interrupt moderation does). Slower traffic
    /// is read at once. 0 never waits. Default 50.
    #[serde(default = "default_rx_coalesce_us")]
    pub rx_coalesce_us: u64,
    /// Stop after this many milliseconds without receiving anything (once finite sources are
    /// exhausted); none runs until stopped.
    #[serde(default)]
    pub idle_exit_ms: Option<u64>,
    /// Settings of the `vswitch` stage (policy file, flow table), when the pipeline has one.
    #[serde(default)]
    pub vswitch: VSwitchSettings,
    /// Stage tap points a live capture arms (`snic capture --stage`); not serialised.
    #[serde(skip)]
    pub stage_taps: snic_pipeline::trace::TapHandle,
}

/// Settings of the vSwitch (`[vswitch]` in the run configuration).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VSwitchSettings {
    /// Policy file (TOML); none uses the embedded default policy.
    #[serde(default)]
    pub policy: Option<String>,
    /// Flow-table capacity of each worker's shard (default 1,048,576).
    #[serde(default)]
    pub flows: Option<usize>,
    /// Idle timeout of cached flows in milliseconds (default 30,000).
    #[serde(default)]
    pub idle_timeout_ms: Option<u64>,
    /// Packets each shard's exception queue holds (default 1024).
    #[serde(default)]
    pub exception_queue: Option<usize>,
}

impl VSwitchSettings {
    /// Build the vSwitch these settings describe.
    pub fn build(&self) -> Result<snic_vswitch::engine::VSwitch, RunError> {
        use snic_vswitch::engine::{VSwitch, VSwitchConfig};
        let policy = match &self.policy {
            Some(path) => snic_vswitch::policy::toml::load_policy(std::path::Path::new(path))
                .map_err(|e| RunError::Config(e.to_string()))?,
            None => snic_vswitch::policy::default_policy(),
        };
        let mut cfg = VSwitchConfig::default();
        // A secret hash seed per run, so a remote sender cannot aim collisions at one bucket
        // (the engine's default seed is fixed, for reproducible tests).
        cfg.gft.seed = rand::random();
        if let Some(n) = self.flows {
            cfg.gft.capacity = n;
        }
        if let Some(ms) = self.idle_timeout_ms {
            cfg.gft.idle_timeout = Duration::from_millis(ms);
        }
        if let Some(n) = self.exception_queue {
            cfg.exception_queue = n;
        }
        VSwitch::new(policy, cfg).map_err(|e| RunError::Config(format!("vswitch: {e}")))
    }
}

impl Default for RunConfig {
    /// The embedded default: `gen:100000` → parse → classify → l2fwd → `null`.
    fn default() -> Self {
        RunConfig::new(vec![PortSpec::Gen { count: DEFAULT_GEN_COUNT, seed: 1 }, PortSpec::Null])
    }
}

impl RunConfig {
    /// These ports with every other setting at its default.
    pub fn new(ports: Vec<PortSpec>) -> Self {
        RunConfig {
            ports,
            stages: default_stages(),
            workers: default_workers(),
            rss_key: None,
            batch_size: default_batch_size(),
            trace: None,
            queue_depth: default_queue_depth(),
            idle_wait_ms: default_idle_wait_ms(),
            rx_coalesce_us: default_rx_coalesce_us(),
            idle_exit_ms: None,
            vswitch: VSwitchSettings::default(),
            stage_taps: snic_pipeline::trace::TapHandle::default(),
        }
    }

    /// Parse a TOML document.
    pub fn from_toml(text: &str) -> Result<Self, RunError> {
        toml::from_str(text).map_err(|e| RunError::Config(e.to_string()))
    }

    /// The pipeline configuration each worker builds from.
    pub fn pipeline_config(&self) -> PipelineConfig {
        let mut p = PipelineConfig::new(self.stages.clone());
        p.ports = u16::try_from(self.ports.len()).unwrap_or(u16::MAX);
        p.rss_key = self.rss_key.clone();
        p.trace = self.trace.clone();
        p.stage_taps = self.stage_taps.clone();
        p
    }

    fn check(&self) -> Result<(), RunError> {
        if self.ports.is_empty() {
            return Err(RunError::Config("no ports".into()));
        }
        if self.ports.len() >= usize::from(u16::MAX) {
            return Err(RunError::Config("too many ports".into()));
        }
        if self.workers == 0 || self.workers > 256 {
            return Err(RunError::Config(format!("workers must be 1..=256, got {}", self.workers)));
        }
        if self.queue_depth == 0 || self.queue_depth > MAX_QUEUE_DEPTH {
            return Err(RunError::Config(format!(
                "queue_depth must be 1..={MAX_QUEUE_DEPTH}, got {}",
                self.queue_depth
            )));
        }
        if self.batch_size == 0 || self.batch_size > MAX_BATCH {
            return Err(RunError::Config(format!(
                "batch_size must be 1..={MAX_BATCH}, got {}",
                self.batch_size
            )));
        }
        Ok(())
    }
}

/// Why a run could not start or failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunError {
    /// The configuration is invalid; says why.
    Config(String),
    /// A port could not be opened.
    Port {
        /// The port's spec.
        spec: String,
        /// What went wrong.
        err: io::Error,
    },
    /// A pipeline could not be built.
    Pipeline(BuildError),
    /// A thread could not be started, or another I/O failure of the runtime itself.
    Io(io::Error),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Config(why) => write!(f, "bad run configuration: {why}"),
            RunError::Port { spec, err } => write!(f, "cannot open port {spec}: {err}"),
            RunError::Pipeline(e) => write!(f, "cannot build pipeline: {e}"),
            RunError::Io(e) => write!(f, "runtime I/O error: {e}"),
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Port { err, .. } | RunError::Io(err) => Some(err),
            RunError::Pipeline(e) => Some(e),
            RunError::Config(_) => None,
        }
    }
}

/// One port's line in a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PortReport {
    /// Port number in the pipeline.
    pub id: u16,
    /// The port's name.
    pub name: String,
    /// The port's own counters (receive errors the pipeline never saw are here).
    pub counters: PortCounters,
}

/// What a run did: every worker's counters merged with the I/O loop's, and each port's own.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// Per-stage and per-port pipeline counters, merged across workers.
    pub counters: Counters,
    /// Each port's own counters.
    pub ports: Vec<PortReport>,
    /// Each queue worker's own queues (its queue of every split port) with their counters
    /// summed, in worker order: how the kernel spread the flows over the workers and which
    /// worker's sockets it dropped at. With two ports a worker's `rx_packets` counts what it
    /// read on both. Empty when the ports are not split into queues (one I/O loop spreads
    /// packets to the workers); after a handover, the counts as they stood at the handover.
    pub per_worker: Vec<PortCounters>,
    /// Worker threads used.
    pub workers: usize,
    /// Wall-clock duration of the run, in seconds.
    pub elapsed_secs: f64,
    /// Trace events recorded (if a trace filter was set), formatted.
    pub trace: Vec<String>,
    /// Trace events lost because a trace ring was full (pipelines' and transmit step's).
    pub trace_lost: u64,
}

impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} worker(s), {:.3} s", self.workers, self.elapsed_secs)?;
        for p in &self.ports {
            writeln!(f, "port {} {}: {}", p.id, p.name, p.counters)?;
        }
        for (k, q) in self.per_worker.iter().enumerate() {
            writeln!(f, "worker {k} (its queues): {q}")?;
        }
        write!(f, "{}", self.counters)?;
        for t in &self.trace {
            writeln!(f, "trace {t}")?;
        }
        if self.trace_lost > 0 {
            writeln!(f, "trace: {} older events lost (trace ring full)", self.trace_lost)?;
        }
        Ok(())
    }
}

/// Where the run's pipelines are: one, run by the I/O loop itself, or one per worker thread
/// behind the pool, fed by RSS hash through per-worker staging batches.
#[derive(Debug)]
enum Pipelines {
    Inline(Box<Pipeline>),
    Workers {
        pool: WorkerPool,
        staging: Vec<Batch>,
        rss: Toeplitz,
    },
    /// Worker `k` owns queue `k` of every port and runs its own loop (a [`Node`]); the nodes
    /// start when the run does.
    Queues(Vec<Node>),
}

/// The configured ports, opened: one port each, driven by one I/O loop, or one queue of every
/// port per worker (see [`open_ports`]).
#[derive(Debug)]
pub enum OpenPorts {
    /// One port per spec, in order.
    Shared(Vec<Box<dyn Port>>),
    /// `queues[k][i]` is worker `k`'s queue of port `i`.
    Queues(Vec<Vec<Box<dyn Port>>>),
}

impl OpenPorts {
    /// Apply `f` to every port (or every queue), e.g. to wrap it.
    pub fn map(self, mut f: impl FnMut(Box<dyn Port>) -> Box<dyn Port>) -> OpenPorts {
        match self {
            OpenPorts::Shared(p) => OpenPorts::Shared(p.into_iter().map(&mut f).collect()),
            OpenPorts::Queues(q) => OpenPorts::Queues(
                q.into_iter().map(|w| w.into_iter().map(&mut f).collect()).collect(),
            ),
        }
    }
}

/// Open `specs` for `workers` workers: with more than one worker and every port able to split
/// ([`PortSpec::open_queues`] gives `Some`), one queue of every port per worker
/// ([`OpenPorts::Queues`]); otherwise one port each ([`OpenPorts::Shared`]), for the I/O loop
/// that spreads packets over the workers by RSS hash.
pub fn open_ports(specs: &[PortSpec], workers: usize) -> Result<OpenPorts, RunError> {
    fn err(spec: &PortSpec) -> impl FnOnce(io::Error) -> RunError + '_ {
        move |err| RunError::Port { spec: spec.to_string(), err }
    }
    // Kinds that never split are known without opening anything.
    let splittable = |s: &PortSpec| {
        !matches!(s, PortSpec::Pcap { .. } | PortSpec::Udp { .. } | PortSpec::Gen { .. })
    };
    if workers > 1 && !specs.is_empty() && specs.iter().all(splittable) {
        let mut per_port = Vec::with_capacity(specs.len());
        for spec in specs {
            match spec.open_queues(workers) {
                Ok(Some(q)) if q.len() == workers => per_port.push(q),
                // A kind that cannot split (yet): the queues opened so far close here.
                Ok(_) => {
                    per_port.clear();
                    break;
                }
                // A port that exists but cannot be split (a TAP device made without
                // `IFF_MULTI_QUEUE` refuses a multi-queue attach): one I/O loop for all
                // workers, as before per-worker queues. A port that cannot be opened at all
                // fails below with its own error.
                Err(e) => {
                    eprintln!("snic: {spec}: no per-worker queues ({e}); one I/O loop serves all");
                    per_port.clear();
                    break;
                }
            }
        }
        if per_port.len() == specs.len() {
            // Transpose: [port][worker] -> [worker][port].
            let mut queues: Vec<Vec<Box<dyn Port>>> =
                (0..workers).map(|_| Vec::with_capacity(specs.len())).collect();
            for q in per_port {
                for (w, port) in queues.iter_mut().zip(q) {
                    w.push(port);
                }
            }
            return Ok(OpenPorts::Queues(queues));
        }
    }
    let ports = specs.iter().map(|s| s.open().map_err(err(s))).collect::<Result<_, _>>()?;
    Ok(OpenPorts::Shared(ports))
}

/// Pipelines built before their ports are open ([`Runtime::prebuild`]).
pub struct Prebuilt {
    cfg: RunConfig,
    built: Built,
}

impl fmt::Debug for Prebuilt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prebuilt").field("workers", &self.cfg.workers).finish_non_exhaustive()
    }
}

/// What every pipeline model shares: the per-worker pipelines and the control planes of their
/// stages.
struct Built {
    pipelines: Vec<Pipeline>,
    trace_capacity: usize,
    vswitch: Option<snic_vswitch::engine::VSwitch>,
    p4: Option<P4Program>,
    kernels: Vec<snic_stream::KernelControl>,
    xdp: Vec<crate::ebpf::XdpControl>,
}

/// The handler that spreads received batches over the workers (see [`dispatch`]); a finite
/// replay source is not read while the workers' queues are short of room (backpressure), live
/// ports always are (their overflow is a counted drop).
struct Dispatch<'a> {
    pool: &'a mut WorkerPool,
    staging: &'a mut [Batch],
    rss: &'a Toeplitz,
    finite: &'a [bool],
}

impl Handler for Dispatch<'_> {
    fn accepts(&self, port: usize) -> bool {
        // One batch from a port makes at most two submissions per worker (a staging batch that
        // fills, then the rest).
        !self.finite[port] || self.pool.has_room(2)
    }

    fn handle(&mut self, _now: Instant, rx: &mut Batch, out: &mut Egress<'_>) {
        dispatch(rx, self.pool, self.staging, self.rss, out.io());
    }
}

/// Opens the sink of a pipeline `tap:PATH` stage. Worker `k > 0` writes `PATH.k` so that
/// workers never share a file.
fn open_tap(worker: usize) -> impl FnMut(&str) -> io::Result<Box<dyn Write + Send>> {
    move |path: &str| {
        let p = if worker == 0 { path.to_string() } else { format!("{path}.{worker}") };
        Ok(Box::new(io::BufWriter::new(File::create(p)?)) as Box<dyn Write + Send>)
    }
}

/// Longest a pause waits for the packets in flight before it hands the ports over.
const PAUSE_DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// What a run does after a pause (see [`Runtime::run_pausable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterPause {
    /// Carry on with the same ports and pipelines.
    Resume,
    /// End the run now: nothing more is received or transmitted.
    Stop,
}

/// One port (or one queue of it) of a paused run.
pub struct PausedPort<'a> {
    /// The port's id (its place in the configuration).
    pub port: usize,
    /// The queue (worker) it belongs to; 0 when one loop serves every worker.
    pub queue: usize,
    /// The port.
    pub inner: &'a mut dyn Port,
}

impl std::fmt::Debug for PausedPort<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PausedPort")
            .field("port", &self.port)
            .field("queue", &self.queue)
            .field("name", &self.inner.name())
            .finish()
    }
}

/// Ports, pipelines and the I/O loop.
#[derive(Debug)]
pub struct Runtime {
    cfg: RunConfig,
    ports: PortSet,
    finite: Vec<bool>,
    pipelines: Pipelines,
    /// The transmit step's trace events, one ring per worker (batches of worker `k` are traced
    /// into ring `k`, so the report can keep them with that worker's pipeline events).
    tx_trace: Vec<TraceRing>,
    clock: MonotonicClock,
    fds: Vec<RawFd>,
    vswitch: Option<snic_vswitch::engine::VSwitch>,
    p4: Option<P4Program>,
    kernels: Vec<snic_stream::KernelControl>,
    xdp: Vec<crate::ebpf::XdpControl>,
}

impl Runtime {
    /// Open the configured ports (as per-worker queues when they can split, see
    /// [`open_ports`]) and build the pipelines.
    pub fn new(cfg: RunConfig) -> Result<Self, RunError> {
        cfg.check()?;
        let finite = cfg.ports.iter().map(PortSpec::is_finite_source).collect();
        match open_ports(&cfg.ports, cfg.workers)? {
            OpenPorts::Shared(ports) => Self::with_ports(cfg, ports, finite),
            OpenPorts::Queues(queues) => Self::with_queues(cfg, queues),
        }
    }

    /// [`Runtime::with_ports`] or [`Runtime::with_queues`], whichever `ports` needs.
    pub fn with_open(
        cfg: RunConfig,
        ports: OpenPorts,
        finite: Vec<bool>,
    ) -> Result<Self, RunError> {
        match ports {
            OpenPorts::Shared(ports) => Self::with_ports(cfg, ports, finite),
            OpenPorts::Queues(queues) => Self::with_queues(cfg, queues),
        }
    }

    /// Build the pipelines of `cfg` before its ports are open, for [`Runtime::with_prebuilt`]
    /// (a takeover builds them before the old process pauses, so they cost no gap).
    pub fn prebuild(cfg: RunConfig) -> Result<Prebuilt, RunError> {
        cfg.check()?;
        let built = build(&cfg)?;
        Ok(Prebuilt { cfg, built })
    }

    /// [`Runtime::with_open`] with pipelines built by [`Runtime::prebuild`]: the ports must
    /// be the configuration's (one per spec; for per-worker queues, one queue per worker).
    pub fn with_prebuilt(
        pre: Prebuilt,
        ports: OpenPorts,
        finite: Vec<bool>,
    ) -> Result<Self, RunError> {
        let Prebuilt { cfg, built } = pre;
        let (n, workers) = match &ports {
            OpenPorts::Shared(p) => (p.len(), cfg.workers),
            OpenPorts::Queues(q) => {
                let n = q.first().map_or(0, Vec::len);
                if q.iter().any(|w| w.len() != n) {
                    return Err(RunError::Config(
                        "every worker needs a queue of every port".into(),
                    ));
                }
                (n, q.len())
            }
        };
        if n != cfg.ports.len() || workers != cfg.workers {
            return Err(RunError::Config(format!(
                "{n} port(s) for {workers} worker(s) given, the pipelines were built for {} and {}",
                cfg.ports.len(),
                cfg.workers
            )));
        }
        match ports {
            OpenPorts::Shared(ports) => Self::assemble(cfg, built, ports, finite),
            OpenPorts::Queues(queues) => Self::assemble_queues(cfg, built, queues),
        }
    }

    /// Use ports opened by the caller (`cfg.ports` is ignored); `finite[i]` says whether port
    /// `i` is a finite source whose exhaustion may end the run.
    pub fn with_ports(
        cfg: RunConfig,
        ports: Vec<Box<dyn Port>>,
        finite: Vec<bool>,
    ) -> Result<Self, RunError> {
        let mut cfg = cfg;
        if cfg.ports.len() != ports.len() {
            // Keep the pipeline's port count (default l2fwd map) right.
            cfg.ports = ports.iter().map(|_| PortSpec::Null).collect();
        }
        cfg.check()?;
        let built = build(&cfg)?;
        Self::assemble(cfg, built, ports, finite)
    }

    /// The runtime around built pipelines and the shared ports.
    fn assemble(
        cfg: RunConfig,
        built: Built,
        ports: Vec<Box<dyn Port>>,
        finite: Vec<bool>,
    ) -> Result<Self, RunError> {
        let Built { mut pipelines, trace_capacity, vswitch, p4, kernels, xdp } = built;
        let clock = MonotonicClock::new();
        let pipelines = if cfg.workers == 1 {
            match pipelines.pop() {
                Some(p) => Pipelines::Inline(Box::new(p)),
                None => return Err(RunError::Config("no pipeline".into())),
            }
        } else {
            let key = match &cfg.rss_key {
                Some(hex) => parse_rss_key(hex).map_err(RunError::Pipeline)?,
                None => DEFAULT_KEY,
            };
            let pool = WorkerPool::start(pipelines, cfg.queue_depth, cfg.batch_size, clock)
                .map_err(RunError::Io)?;
            let staging = (0..cfg.workers).map(|_| Batch::new(cfg.batch_size)).collect();
            Pipelines::Workers { pool, staging, rss: Toeplitz::new(key) }
        };
        let mut finite = finite;
        finite.resize(ports.len(), false);
        let fds = ports.iter().filter_map(|p| p.poll_fd()).collect();
        let tx_trace = (0..cfg.workers).map(|_| TraceRing::new(trace_capacity)).collect();
        Ok(Runtime {
            ports: PortSet::new(ports, cfg.batch_size),
            cfg,
            finite,
            pipelines,
            tx_trace,
            clock,
            fds,
            vswitch,
            p4,
            kernels,
            xdp,
        })
    }

    /// Use per-worker queues opened by the caller: `queues[k][i]` is worker `k`'s queue of port
    /// `i` (`cfg.ports` is ignored; `cfg.workers` becomes `queues.len()`). Each worker thread
    /// owns its queues and runs its own receive, pipeline, transmit loop (see [`QueuePool`]);
    /// no port of such a run is a finite source (it ends when stopped or idle).
    pub fn with_queues(cfg: RunConfig, queues: Vec<Vec<Box<dyn Port>>>) -> Result<Self, RunError> {
        let mut cfg = cfg;
        let nports = queues.first().map_or(0, Vec::len);
        if queues.iter().any(|w| w.len() != nports) {
            return Err(RunError::Config("every worker needs a queue of every port".into()));
        }
        if cfg.ports.len() != nports {
            cfg.ports = (0..nports).map(|_| PortSpec::Null).collect();
        }
        cfg.workers = queues.len();
        cfg.check()?;
        let built = build(&cfg)?;
        Self::assemble_queues(cfg, built, queues)
    }

    /// The runtime around built pipelines and the workers' queues.
    fn assemble_queues(
        cfg: RunConfig,
        built: Built,
        queues: Vec<Vec<Box<dyn Port>>>,
    ) -> Result<Self, RunError> {
        let nports = queues.first().map_or(0, Vec::len);
        let Built { pipelines, trace_capacity, vswitch, p4, kernels, xdp } = built;
        let nodes = pipelines
            .into_iter()
            .zip(queues)
            .enumerate()
            .map(|(k, (p, q))| {
                let mut node = Node::new(format!("worker-{k}"), p, q, cfg.batch_size);
                node.trace = TraceRing::new(trace_capacity);
                node
            })
            .collect();
        Ok(Runtime {
            ports: PortSet::new(Vec::new(), cfg.batch_size),
            finite: vec![false; nports],
            pipelines: Pipelines::Queues(nodes),
            tx_trace: Vec::new(),
            clock: MonotonicClock::new(),
            fds: Vec::new(),
            cfg,
            vswitch,
            p4,
            kernels,
            xdp,
        })
    }

    /// True when each worker owns a queue of every port (see [`Runtime::with_queues`]).
    pub fn per_worker_queues(&self) -> bool {
        matches!(self.pipelines, Pipelines::Queues(_))
    }

    /// The control handles of the pipeline's `kernel:` stages, in stage order.
    pub fn stream_kernels(&self) -> &[snic_stream::KernelControl] {
        &self.kernels
    }

    /// The control handles of the pipeline's `xdp:` stages, in stage order.
    pub fn xdp(&self) -> &[crate::ebpf::XdpControl] {
        &self.xdp
    }

    /// The program of the pipeline's `p4` stage, for the control plane.
    pub fn p4(&self) -> Option<&P4Program> {
        self.p4.as_ref()
    }

    /// The clock the run uses (packet times, flow ages).
    pub fn clock(&self) -> MonotonicClock {
        self.clock
    }

    /// The vSwitch of the pipeline's `vswitch` stage, for the control plane.
    pub fn vswitch(&self) -> Option<&snic_vswitch::engine::VSwitch> {
        self.vswitch.as_ref()
    }

    /// The configuration.
    pub fn config(&self) -> &RunConfig {
        &self.cfg
    }

    /// True when there is at least one finite source and all of them are exhausted.
    fn sources_done(&self) -> bool {
        self.finite.iter().any(|f| *f)
            && self
                .ports
                .ports()
                .iter()
                .zip(&self.finite)
                .filter(|(_, f)| **f)
                .all(|(p, _)| p.is_exhausted())
    }

    /// One pass over every port. Returns packets received.
    fn round(&mut self, now: Instant) -> usize {
        match &mut self.pipelines {
            Pipelines::Inline(p) => {
                let trace = tx_ring(&mut self.tx_trace, 0);
                self.ports.round(now, &mut Inline { pipeline: p, trace })
            }
            Pipelines::Workers { pool, staging, rss } => {
                let finite = &self.finite;
                let received = self.ports.round(now, &mut Dispatch { pool, staging, rss, finite });
                for (k, s) in staging.iter_mut().enumerate() {
                    if !s.is_empty() {
                        submit(pool, k, s, self.ports.io_mut());
                    }
                }
                received
            }
            // Queue workers receive for themselves.
            Pipelines::Queues(_) => 0,
        }
    }

    /// Transmit batches the workers finished, waiting at most `wait` for the first.
    fn collect(&mut self, wait: Duration) -> usize {
        let Pipelines::Workers { pool, .. } = &mut self.pipelines else { return 0 };
        let mut n = 0;
        let mut w = wait;
        while let Some((k, mut b)) = pool.completed(w) {
            let now = self.clock.now();
            let trace = tx_ring(&mut self.tx_trace, k);
            self.ports.transmit(now, &mut b, trace);
            pool.give_batch(b);
            n += 1;
            w = Duration::ZERO;
        }
        n
    }

    /// An inline pipeline whose stages hold packets due at `now` (a shaper, an exception queue)
    /// runs on an empty batch and what it releases is transmitted: `Some(released)`. `None`
    /// when nothing was due (or the pipelines run on workers, which poll themselves).
    fn release_held(&mut self, now: Instant) -> Option<usize> {
        let Pipelines::Inline(p) = &mut self.pipelines else { return None };
        self.ports.release_held(now, p, tx_ring(&mut self.tx_trace, 0))
    }

    fn in_flight(&self) -> usize {
        match &self.pipelines {
            // Packets a stage holds (a shaper, an exception queue) are still in flight: the
            // run does not end before they are released.
            Pipelines::Inline(p) => p.pending(),
            Pipelines::Workers { pool, .. } => pool.in_flight(),
            Pipelines::Queues(nodes) => nodes.iter().map(|n| n.pipeline.pending()).sum(),
        }
    }

    /// A snapshot of the counters so far (workers publish theirs every 100 ms).
    pub fn snapshot(&self, started: Instant) -> RunReport {
        let mut counters = match &self.pipelines {
            Pipelines::Inline(p) => p.counters(),
            Pipelines::Workers { pool, .. } => pool.snapshot(),
            Pipelines::Queues(nodes) => {
                // Not started yet: the nodes' own counters.
                let names = port_names(nodes);
                let (mut c, mut ports, mut per_worker) =
                    (Counters::default(), Vec::new(), Vec::new());
                for n in nodes {
                    c.merge(&n.counters());
                    merge_worker(&mut ports, &mut per_worker, &n.ports.port_counters_only());
                }
                let mut report = self.report(c, port_reports(&names, &ports), started, Vec::new());
                report.per_worker = per_worker;
                return report;
            }
        };
        counters.merge(self.ports.io());
        self.report(counters, self.shared_port_reports(), started, Vec::new())
    }

    /// A snapshot of a run whose queue workers are running.
    fn queue_snapshot(&self, pool: &QueuePool, started: Instant) -> RunReport {
        let (counters, ports, per_worker) = pool.snapshot();
        let mut report =
            self.report(counters, port_reports(pool.port_names(), &ports), started, Vec::new());
        report.per_worker = per_worker;
        report
    }

    /// Each port of the shared I/O loop with its own counters.
    fn shared_port_reports(&self) -> Vec<PortReport> {
        let names: Vec<String> = self.ports.ports().iter().map(|p| p.name().to_string()).collect();
        port_reports(&names, &self.ports.port_counters_only())
    }

    fn report(
        &self,
        counters: Counters,
        ports: Vec<PortReport>,
        started: Instant,
        trace: Vec<String>,
    ) -> RunReport {
        RunReport {
            counters,
            ports,
            per_worker: Vec::new(),
            workers: self.cfg.workers,
            elapsed_secs: (self.clock.now() - started).as_secs_f64(),
            trace,
            trace_lost: 0,
        }
    }

    /// Run until `stop` is set, or the finite sources are exhausted and the queues drained, or
    /// the idle timeout passes. Each time `stats` is found set it is cleared and `on_stats` gets
    /// a snapshot. Returns the final counters.
    pub fn run(
        self,
        stop: &AtomicBool,
        stats: &AtomicBool,
        on_stats: impl FnMut(&RunReport),
    ) -> Result<RunReport, RunError> {
        let never = AtomicBool::new(false);
        self.run_pausable(stop, stats, on_stats, &never, |_| AfterPause::Resume)
    }

    /// [`Runtime::run`] that also pauses each time `pause` is found set (it is cleared): no port
    /// is read any more, the packets in flight are processed and transmitted, the ports are
    /// flushed, and `on_pause` gets every port (by port and queue) while nothing else runs
    /// (what a takeover needs to hand the ports over, see [`crate::handover`]). It says
    /// whether to carry on ([`AfterPause::Resume`]) or to end the run now
    /// ([`AfterPause::Stop`]: nothing more is received or transmitted, the final counters are
    /// returned).
    pub fn run_pausable(
        mut self,
        stop: &AtomicBool,
        stats: &AtomicBool,
        mut on_stats: impl FnMut(&RunReport),
        pause: &AtomicBool,
        mut on_pause: impl FnMut(&mut [PausedPort<'_>]) -> AfterPause,
    ) -> Result<RunReport, RunError> {
        if let Pipelines::Queues(nodes) = &mut self.pipelines {
            let nodes = core::mem::take(nodes);
            return self.run_queues(nodes, stop, stats, on_stats, pause, on_pause);
        }
        let started = self.clock.now();
        let idle_wait = Duration::from_millis(self.cfg.idle_wait_ms.max(1));
        let mut moderation =
            crate::worker::Moderation::new(Duration::from_micros(self.cfg.rx_coalesce_us));
        let idle_exit = self.cfg.idle_exit_ms.map(Duration::from_millis);
        let mut last_rx = started;
        // Set when a pause handed the ports over: from then on no frame is sent or flushed, and
        // the ports' counters are the ones read before the handover (reading the kernel's
        // again, `PACKET_STATISTICS` resets them, would take drops from the new owner).
        let mut handed: Option<Vec<PortReport>> = None;
        while !stop.load(Ordering::Relaxed) {
            if pause.swap(false, Ordering::Relaxed) {
                self.drain(PAUSE_DRAIN_LIMIT);
                // A port that could not flush stays as it is; the handover says so.
                let _ = self.ports.flush();
                let before = self.shared_port_reports();
                let mut paused: Vec<PausedPort<'_>> = self
                    .ports
                    .ports_mut()
                    .iter_mut()
                    .enumerate()
                    .map(|(port, p)| PausedPort { port, queue: 0, inner: &mut **p })
                    .collect();
                if on_pause(&mut paused) == AfterPause::Stop {
                    handed = Some(before);
                    break;
                }
                continue;
            }
            let now = self.clock.now();
            let received = self.round(now) + self.release_held(now).unwrap_or(0);
            let collected = self.collect(Duration::ZERO);
            if stats.swap(false, Ordering::Relaxed) {
                on_stats(&self.snapshot(started));
            }
            if received > 0 {
                last_rx = now;
                moderation.received(now, received);
                continue;
            }
            if self.sources_done() && self.in_flight() == 0 {
                break;
            }
            if let Some(limit) = idle_exit {
                let all_done = self.finite.iter().all(|f| !f) || self.sources_done();
                if all_done && self.in_flight() == 0 && now - last_rx >= limit {
                    break;
                }
            }
            if collected > 0 {
                continue;
            }
            if self.in_flight() > 0 {
                self.collect(Duration::from_millis(1));
            } else if !self.sources_unpaced_pending() {
                let woken =
                    crate::sys::poll::wait_readable(&self.fds, idle_wait).map_err(RunError::Io)?;
                moderation.after_wait(self.clock.now(), woken);
            }
        }
        // Drain: every batch handed to a worker comes back and is transmitted. Not after a
        // handover: the ports are another process's now (the pause drained what was in flight).
        let mut flush_err = None;
        if handed.is_none() {
            self.drain(Duration::from_secs(10));
            flush_err = self.ports.flush().err();
        }
        let placed = core::mem::replace(&mut self.pipelines, Pipelines::Inline(Box::default()));
        let mut pipelines: Vec<Pipeline> = match placed {
            Pipelines::Inline(p) => vec![*p],
            Pipelines::Workers { pool, .. } => pool.join(),
            Pipelines::Queues(_) => Vec::new(),
        };
        let mut counters = Counters::default();
        // (seq, worker, event): worker `k`'s pipeline events, then the transmit step of its
        // batches (recorded by this loop in ring `k`).
        let mut events = Vec::new();
        let mut lost = 0;
        for (k, p) in pipelines.iter_mut().enumerate() {
            if let Err(e) = p.flush() {
                flush_err.get_or_insert(e);
            }
            counters.merge(&p.counters());
            lost += p.trace_lost();
            events.extend(p.drain_trace().map(|e| (e.seq, k, e)));
            if let Some(r) = self.tx_trace.get_mut(k) {
                lost += r.lost();
                events.extend(r.drain().map(|e| (e.seq, k, e)));
            }
        }
        // One packet's story in one place: group the events by packet, stages in order, the
        // transmit step last (the sort is stable, each pipeline records a packet's stages in
        // the order they ran, and a worker's transmit events follow its pipeline events).
        events.sort_by_key(|(seq, k, _)| (*seq, *k));
        let trace = events.iter().map(|(_, _, e)| e.to_string()).collect();
        counters.merge(self.ports.io());
        if let Some(e) = flush_err {
            return Err(RunError::Io(e));
        }
        let ports = handed.unwrap_or_else(|| self.shared_port_reports());
        let mut report = self.report(counters, ports, started, trace);
        report.trace_lost = lost;
        Ok(report)
    }

    /// Wait (at most `limit`) until every batch handed to a worker has come back and been
    /// transmitted and the stages hold nothing due.
    fn drain(&mut self, limit: Duration) {
        let deadline = self.clock.now() + limit;
        while self.in_flight() > 0 && self.clock.now() < deadline {
            self.collect(Duration::from_millis(50));
            if self.release_held(self.clock.now()).is_none() {
                std::thread::yield_now();
            }
        }
    }

    /// [`Runtime::run`] with per-worker queues: the workers run their own loops (see
    /// [`QueuePool`]); this thread only watches the stop flag, the stats flag and the idle
    /// timeout, then merges what the workers did. A pause stops the workers (they release
    /// what their stages hold), hands their ports to `on_pause`, and starts them again on
    /// [`AfterPause::Resume`].
    fn run_queues(
        self,
        nodes: Vec<Node>,
        stop: &AtomicBool,
        stats: &AtomicBool,
        mut on_stats: impl FnMut(&RunReport),
        pause: &AtomicBool,
        mut on_pause: impl FnMut(&mut [PausedPort<'_>]) -> AfterPause,
    ) -> Result<RunReport, RunError> {
        let started = self.clock.now();
        let idle_wait = Duration::from_millis(self.cfg.idle_wait_ms.max(1));
        let coalesce = Duration::from_micros(self.cfg.rx_coalesce_us);
        let idle_exit = self.cfg.idle_exit_ms.map(Duration::from_millis);
        let has_finite = self.finite.iter().any(|f| *f);
        let mut pool = QueuePool::start(nodes, &self.finite, self.clock, idle_wait, coalesce)
            .map_err(RunError::Io)?;
        let tick = idle_wait.min(Duration::from_millis(10));
        let (mut seen, mut last_rx) = (0, started);
        while !stop.load(Ordering::Relaxed) {
            if pause.swap(false, Ordering::Relaxed) {
                let (mut nodes, err) = pool.join();
                if let Some(e) = err {
                    return Err(RunError::Io(e));
                }
                // A port that could not flush stays as it is; the handover says so.
                for n in &mut nodes {
                    let _ = n.flush();
                }
                // The counters as they stand before a handover (see `run_pausable`).
                let (mut before, mut before_workers) = (Vec::new(), Vec::new());
                for n in &nodes {
                    merge_worker(&mut before, &mut before_workers, &n.ports.port_counters_only());
                }
                let mut paused: Vec<PausedPort<'_>> = Vec::new();
                for (queue, n) in nodes.iter_mut().enumerate() {
                    for (port, p) in n.ports.ports_mut().iter_mut().enumerate() {
                        paused.push(PausedPort { port, queue, inner: &mut **p });
                    }
                }
                paused.sort_by_key(|p| (p.port, p.queue));
                let after = on_pause(&mut paused);
                if after == AfterPause::Stop {
                    let handed = Some((before, before_workers));
                    return self.finish_queues(nodes, None, started, handed);
                }
                pool = QueuePool::start(nodes, &self.finite, self.clock, idle_wait, coalesce)
                    .map_err(RunError::Io)?;
                continue;
            }
            // A worker that died leaves its queues unserved: stop, and `join` says why.
            if pool.any_exited() {
                break;
            }
            let now = self.clock.now();
            if stats.swap(false, Ordering::Relaxed) {
                on_stats(&self.queue_snapshot(&pool, started));
            }
            let received = pool.received();
            if received != seen {
                (seen, last_rx) = (received, now);
            } else {
                let sources_done = has_finite && pool.sources_done();
                if sources_done && pool.pending() == 0 {
                    break;
                }
                if let Some(limit) = idle_exit
                    && (!has_finite || sources_done)
                    && pool.pending() == 0
                    && now - last_rx >= limit
                {
                    break;
                }
            }
            std::thread::sleep(tick);
        }
        // The workers release what their stages hold, then stop.
        let (nodes, first_err) = pool.join();
        self.finish_queues(nodes, first_err, started, None)
    }

    /// The end of a run of queue workers: their nodes flushed and merged into the report. After
    /// a handover (`handed`: the port counters read before it, per port and per worker) the
    /// ports are another process's: they are neither flushed nor read again.
    fn finish_queues(
        &self,
        mut nodes: Vec<Node>,
        mut first_err: Option<io::Error>,
        started: Instant,
        handed: Option<(Vec<PortCounters>, Vec<PortCounters>)>,
    ) -> Result<RunReport, RunError> {
        let flush_ports = handed.is_none();
        let names = port_names(&nodes);
        let mut counters = Counters::default();
        let mut ports = Vec::new();
        let mut per_worker = Vec::new();
        let mut events = Vec::new();
        let mut lost = 0;
        for (k, node) in nodes.iter_mut().enumerate() {
            let flushed = if flush_ports { node.flush() } else { node.pipeline_mut().flush() };
            if let Err(e) = flushed {
                first_err.get_or_insert(e);
            }
            counters.merge(&node.counters());
            if flush_ports {
                merge_worker(&mut ports, &mut per_worker, &node.ports.port_counters_only());
            }
            lost += node.pipeline.trace_lost() + node.trace.lost();
            events.extend(node.pipeline.drain_trace().map(|e| (e.seq, k, e)));
            events.extend(node.trace.drain().map(|e| (e.seq, k, e)));
        }
        events.sort_by_key(|(seq, k, _)| (*seq, *k));
        let trace = events.iter().map(|(_, _, e)| e.to_string()).collect();
        if let Some(e) = first_err {
            return Err(RunError::Io(e));
        }
        let (ports, per_worker) = handed.unwrap_or((ports, per_worker));
        let mut report = self.report(counters, port_reports(&names, &ports), started, trace);
        report.trace_lost = lost;
        report.per_worker = per_worker;
        Ok(report)
    }

    /// True when a finite source without a descriptor (a generator) still has packets: the
    /// loop must not sleep in `poll(2)` then.
    fn sources_unpaced_pending(&self) -> bool {
        self.ports
            .ports()
            .iter()
            .zip(&self.finite)
            .any(|(p, f)| *f && p.poll_fd().is_none() && !p.is_exhausted())
    }
}

/// Build one pipeline per worker, with the control planes their stages share.
fn build(cfg: &RunConfig) -> Result<Built, RunError> {
    let pcfg = cfg.pipeline_config();
    let vswitch =
        if cfg.stages.contains(&StageSpec::VSwitch) { Some(cfg.vswitch.build()?) } else { None };
    let p4 = P4Program::from_stages(&cfg.stages, cfg.workers)
        .map_err(|e| RunError::Config(format!("p4 stage: {e}")))?;
    let mut kernels = crate::stream::StreamKernels::from_stages(&cfg.stages, cfg.workers)
        .map_err(RunError::Config)?;
    let mut xdp = crate::ebpf::XdpPrograms::from_stages(&cfg.stages, cfg.workers)
        .map_err(RunError::Config)?;
    let mut pipelines = Vec::with_capacity(cfg.workers);
    for k in 0..cfg.workers {
        let mut opener = open_tap(k);
        let mut kernel_stage = kernels.factory_for(k);
        let mut xdp_stage = xdp.factory_for(k);
        let mut factory = |spec: &StageSpec| match (spec, &vswitch, &p4) {
            (StageSpec::Kernel { .. }, _, _) => kernel_stage(spec),
            (StageSpec::Xdp { .. }, _, _) => xdp_stage(spec),
            (StageSpec::VSwitch, Some(vs), _) => Some(
                vs.stage()
                    .map(|s| Box::new(s) as Box<dyn snic_pipeline::Stage>)
                    .map_err(|e| BuildError::Stage { stage: "vswitch".into(), why: e.to_string() }),
            ),
            (StageSpec::P4 { .. }, _, Some(prog)) => Some(
                prog.stage(k).map(|s| Box::new(s) as Box<dyn snic_pipeline::Stage>).ok_or_else(
                    || BuildError::Stage {
                        stage: "p4".into(),
                        why: format!("no switch for worker {k}"),
                    },
                ),
            ),
            _ => None,
        };
        pipelines.push(
            Pipeline::build_with(&pcfg, &mut opener, &mut factory).map_err(RunError::Pipeline)?,
        );
    }
    if let Some(vs) = &vswitch {
        // Flow tables of a million flows and more are TLB-bound on 4 KiB pages.
        match crate::sys::hugepage::advise(&vs.table_regions()) {
            Ok(_) => {}
            Err(e) => eprintln!("snic: flow tables stay on small pages (madvise: {e})"),
        }
    }
    Ok(Built {
        pipelines,
        trace_capacity: pcfg.trace_capacity,
        vswitch,
        p4,
        kernels: kernels.controls().to_vec(),
        xdp: xdp.controls().to_vec(),
    })
}

/// The ports' names (worker 0's queues).
fn port_names(nodes: &[Node]) -> Vec<String> {
    nodes
        .first()
        .map(|n| n.ports.ports().iter().map(|p| p.name().to_string()).collect())
        .unwrap_or_default()
}

/// Add one worker's per-queue counters (`queues[i]`: its queue of port `i`) into the per-port
/// totals, and their sum as the worker's entry of `per_worker`.
pub(crate) fn merge_worker(
    ports: &mut Vec<PortCounters>,
    per_worker: &mut Vec<PortCounters>,
    queues: &[PortCounters],
) {
    merge_ports(ports, queues);
    let mut own = PortCounters::default();
    for q in queues {
        own.merge(q);
    }
    per_worker.push(own);
}

/// Add one worker's per-queue counters into the per-port totals.
fn merge_ports(total: &mut Vec<PortCounters>, queues: &[PortCounters]) {
    if total.len() < queues.len() {
        total.resize(queues.len(), PortCounters::default());
    }
    for (t, q) in total.iter_mut().zip(queues) {
        t.merge(q);
    }
}

/// The report's port lines.
fn port_reports(names: &[String], counters: &[PortCounters]) -> Vec<PortReport> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| PortReport {
            id: i as u16,
            name: name.clone(),
            counters: counters.get(i).copied().unwrap_or_default(),
        })
        .collect()
}

/// The transmit-step trace ring of worker `k` (ring 0 if there is no such worker, which the
/// pool never reports).
fn tx_ring(rings: &mut [TraceRing], k: usize) -> &mut TraceRing {
    let k = if k < rings.len() { k } else { 0 };
    &mut rings[k]
}

/// Spread the packets of `rx` over the workers' staging batches by RSS hash, submitting a
/// staging batch when it fills.
fn dispatch(
    rx: &mut Batch,
    pool: &mut WorkerPool,
    stage: &mut [Batch],
    rss: &Toeplitz,
    io: &mut Counters,
) {
    let n = stage.len().max(1) as u32;
    // The walk and hash that choose the worker are kept in the metadata, so the worker's parse
    // stage does not repeat them.
    for p in rx.iter_mut() {
        rss.parse_and_hash(p);
    }
    for (k, s) in stage.iter_mut().enumerate() {
        loop {
            rx.drain_into(s, |p| (p.meta.rss_hash % n) as usize == k);
            if !s.is_full() {
                break;
            }
            submit(pool, k, s, io);
        }
    }
    rx.clear();
}

/// Hand staging batch `s` to worker `k`, replacing it with an empty one; on a full queue count
/// its packets as `pipeline_full` drops and keep the batch.
fn submit(pool: &mut WorkerPool, k: usize, s: &mut Batch, io: &mut Counters) {
    let fresh = pool.take_batch();
    let full = core::mem::replace(s, fresh);
    if let Err(mut back) = pool.submit(k, full) {
        for p in back.iter() {
            io.port_mut(p.meta.ingress).rx_drops.add(DropReason::PipelineFull);
        }
        back.clear();
        let fresh = core::mem::replace(s, back);
        pool.give_batch(fresh);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use snic_pipeline::PortId;

    fn no_stop() -> AtomicBool {
        AtomicBool::new(false)
    }

    /// Found in review of the fuzz targets: `queue_depth` went unchecked into
    /// `sync_channel`, so a huge value panicked when the worker pool started.
    #[test]
    fn oversized_queue_depth_is_a_config_error_not_a_panic() {
        let c = RunConfig::from_toml(
            r#"
            ports = ["gen:10", "null"]
            workers = 2
            queue_depth = 9223372036854775807
            "#,
        )
        .unwrap();
        match Runtime::new(c) {
            Err(RunError::Config(why)) => assert!(why.contains("queue_depth"), "{why}"),
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn toml_config_parses_with_defaults_and_rejects_bad_fields() {
        let c = RunConfig::from_toml(
            r#"
            ports = ["gen:10", "null"]
            workers = 2
            "#,
        )
        .unwrap();
        assert_eq!(c.ports, vec![PortSpec::Gen { count: 10, seed: 1 }, PortSpec::Null]);
        assert_eq!(c.workers, 2);
        assert_eq!(c.batch_size, 256);
        assert_eq!(c.stages, default_stages());
        let e = RunConfig::from_toml("ports = [\"null\"]\nworkrs = 2").unwrap_err();
        assert!(e.to_string().contains("workrs"), "{e}");
        let e = RunConfig::from_toml("ports = [\"bogus\"]").unwrap_err();
        assert!(e.to_string().contains("unknown port kind"), "{e}");
        let c = RunConfig { workers: 0, ..Default::default() };
        assert!(matches!(Runtime::new(c), Err(RunError::Config(_))));
    }

    fn check_default_run(workers: usize) {
        let mut cfg =
            RunConfig::new(vec![PortSpec::Gen { count: 20_000, seed: 3 }, PortSpec::Null]);
        cfg.workers = workers;
        let rt = Runtime::new(cfg).unwrap();
        let r = rt.run(&no_stop(), &no_stop(), |_| {}).unwrap();
        let gen_rx = r.ports[0].counters.rx_packets;
        assert_eq!(gen_rx, 20_000);
        let sink = r.ports[1].counters.tx_packets;
        let c = &r.counters;
        // Every generated packet is forwarded to the sink or counted as exactly one drop.
        assert_eq!(
            c.port(PortId(0)).unwrap().rx_packets + c.port(PortId(0)).unwrap().rx_drops.total(),
            20_000
        );
        assert_eq!(c.port(PortId(1)).unwrap().tx_packets, sink);
        // GRO: packets merged into an earlier one left inside it (the null port takes GSO).
        let merged = c.port(PortId(1)).unwrap().gro_coalesced;
        assert_eq!(sink + merged + c.total_drops(), 20_000, "{r}");
        // Only the generator's malformed share is dropped (by parse/classify): the replay
        // source is paced by the workers, never dropped for lack of queue room.
        let malformed: u64 =
            crate::generator::frames(20_000, 3).iter().filter(|(k, _)| k.is_malformed()).count()
                as u64;
        assert_eq!(c.total_drops(), malformed, "{r}");
    }

    #[test]
    fn embedded_default_one_worker_accounts_for_every_packet() {
        check_default_run(1);
    }

    #[test]
    fn embedded_default_three_workers_accounts_for_every_packet() {
        check_default_run(3);
    }

    #[test]
    fn dispatch_pins_flows_to_workers_by_the_pipelines_rss_hash() {
        let n = 3;
        let pipes =
            (0..n).map(|_| Pipeline::from_strs(&["parse:pass", "l2fwd"]).unwrap()).collect();
        let mut pool = WorkerPool::start(pipes, 64, 64, MonotonicClock::new()).unwrap();
        let mut stage: Vec<Batch> = (0..n).map(|_| Batch::new(64)).collect();
        let rss = Toeplitz::new(DEFAULT_KEY);
        let mut io = Counters::default();
        let mut rx = Batch::new(256);
        for (_, f) in crate::generator::frames(200, 8) {
            rx.push_frame(&f).unwrap();
        }
        dispatch(&mut rx, &mut pool, &mut stage, &rss, &mut io);
        for (k, s) in stage.iter_mut().enumerate() {
            if !s.is_empty() {
                submit(&mut pool, k, s, &mut io);
            }
        }
        assert!(rx.is_empty());
        let mut seen = 0;
        let mut per_worker = vec![0; n];
        while pool.in_flight() > 0 {
            let Some((k, b)) = pool.completed(Duration::from_secs(5)) else { continue };
            for p in b.iter() {
                // The parse stage recomputed the hash with the same key: same worker.
                assert_eq!(p.meta.rss_hash as usize % n, k);
                seen += 1;
                per_worker[k] += 1;
            }
        }
        assert_eq!(seen, 200);
        assert!(per_worker.iter().all(|c| *c > 0), "{per_worker:?}");
        assert_eq!(io.total_drops(), 0);
        pool.join();
    }

    /// A queue that reports kernel drops of its own (as an AF_PACKET socket's
    /// `PACKET_STATISTICS` would), to check that the report merges queue counters exactly.
    #[derive(Debug)]
    struct KernelDropping(crate::vlink::VLinkPort, u64);

    impl Port for KernelDropping {
        fn name(&self) -> &str {
            self.0.name()
        }
        fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
            self.0.recv(now, batch)
        }
        fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
            self.0.send(now, batch)
        }
        fn poll_timeout(&self) -> Option<Instant> {
            self.0.poll_timeout()
        }
        fn caps(&self) -> crate::port::PortCaps {
            self.0.caps()
        }
        fn counters(&self) -> PortCounters {
            PortCounters { rx_kernel_drops: self.1, ..self.0.counters() }
        }
    }

    /// Two workers, each owning one queue of each of two ports (virtual links whose far ends
    /// the test holds). Worker `k` is given `100 + 50k` frames tagged `k` on its queue of port
    /// 0. Returns the runtime and, per worker, the far end of its queue of port 0 and port 1.
    fn two_queue_workers(
        cfg: RunConfig,
    ) -> (Runtime, Vec<crate::vlink::VLinkPort>, Vec<crate::vlink::VLinkPort>) {
        use crate::vlink::VLink;
        let (mut queues, mut inject, mut observe) = (Vec::new(), Vec::new(), Vec::new());
        for k in 0..2u8 {
            let (a0, mut b0) = VLink::symmetric(&format!("in{k}"), Default::default(), 1);
            let (a1, b1) = VLink::symmetric(&format!("out{k}"), Default::default(), 2);
            let mut batch = Batch::new(MAX_BATCH);
            for i in 0..(100 + 50 * usize::from(k)) {
                let mut f = [k; 60];
                f[1..3].copy_from_slice(&(i as u16).to_be_bytes());
                batch.push_frame(&f).unwrap();
            }
            b0.send(Instant::ZERO, &mut batch).unwrap();
            let q0: Box<dyn Port> = Box::new(KernelDropping(a0, 7 + u64::from(k)));
            queues.push(vec![q0, Box::new(a1)]);
            inject.push(b0);
            observe.push(b1);
        }
        (Runtime::with_queues(cfg, queues).unwrap(), inject, observe)
    }

    fn l2fwd_config() -> RunConfig {
        let mut cfg = RunConfig::new(vec![PortSpec::Null, PortSpec::Null]);
        cfg.stages = vec!["l2fwd".parse().unwrap()];
        cfg
    }

    /// Each worker's packets leave on its own queue of the egress port, in order; the report
    /// names each port once with its queues' counters summed, and the pipelines' counters
    /// account for every packet; the trace keeps each worker's packet 1 with its own transmit.
    #[test]
    fn queue_workers_send_their_own_packets_and_counters_merge() {
        let mut cfg = l2fwd_config();
        cfg.idle_exit_ms = Some(50);
        cfg.trace = Some("seq 1".into());
        let (rt, _inject, mut observe) = two_queue_workers(cfg);
        assert!(rt.per_worker_queues());
        let r = rt.run(&no_stop(), &no_stop(), |_| {}).unwrap();
        assert_eq!(r.workers, 2);
        for (k, far) in observe.iter_mut().enumerate() {
            let mut got = Batch::new(MAX_BATCH);
            far.recv(Instant::MAX, &mut got).unwrap();
            let tags: Vec<(u8, u16)> = got
                .iter()
                .map(|p| (p.data()[0], u16::from_be_bytes([p.data()[1], p.data()[2]])))
                .collect();
            let want: Vec<(u8, u16)> = (0..(100 + 50 * k) as u16).map(|i| (k as u8, i)).collect();
            assert_eq!(tags, want, "worker {k}'s queue of port 1");
        }
        assert_eq!(r.ports.len(), 2);
        assert_eq!((r.ports[0].name.as_str(), r.ports[1].name.as_str()), ("in0:a", "out0:a"));
        let p0 = &r.ports[0].counters;
        assert_eq!((p0.rx_packets, p0.rx_bytes, p0.rx_kernel_drops), (250, 250 * 60, 7 + 8));
        assert_eq!(r.ports[1].counters.tx_packets, 250);
        assert_eq!(r.counters.port(PortId(0)).unwrap().rx_packets, 250);
        assert_eq!(r.counters.port(PortId(1)).unwrap().tx_packets, 250);
        assert_eq!(r.counters.total_drops(), 0, "{r}");
        // Each worker's own queues of both ports, summed: what it read, the kernel dropped at
        // its socket, and what it sent.
        let own: Vec<(u64, u64, u64)> =
            r.per_worker.iter().map(|q| (q.rx_packets, q.rx_kernel_drops, q.tx_packets)).collect();
        assert_eq!(own, [(100, 7, 100), (150, 8, 150)], "{r}");
        let seq1: Vec<&str> = r.trace.iter().map(String::as_str).collect();
        let one = [
            "#1 input: selected for trace (not parsed yet)",
            "#1 l2fwd: forwarded to port 1 (static)",
        ];
        assert_eq!(seq1.len(), 6, "{seq1:?}");
        for (k, w) in seq1.chunks(3).enumerate() {
            assert_eq!(w[..2], one, "{seq1:?}");
            assert_eq!(w[2], format!("#1 tx: sent out port 1 (out{k}:a)"), "{seq1:?}");
        }
    }

    /// The stop flag ends a run of queue workers that would go on forever; snapshots asked for
    /// while it runs name each port once.
    #[test]
    fn stop_flag_ends_a_queue_worker_run_cleanly() {
        let (rt, _inject, mut observe) = two_queue_workers(l2fwd_config());
        let stop = AtomicBool::new(false);
        let stats = AtomicBool::new(true);
        let mut snapshots = Vec::new();
        let report = std::thread::scope(|s| {
            let run = s.spawn(|| {
                rt.run(&stop, &stats, |r| {
                    // A live snapshot: one entry per worker, adding up to the ports' totals.
                    let rx: u64 = r.per_worker.iter().map(|q| q.rx_packets).sum();
                    let port_rx: u64 = r.ports.iter().map(|p| p.counters.rx_packets).sum();
                    snapshots.push((r.ports.len(), r.per_worker.len(), rx == port_rx));
                })
            });
            // Stop once every frame came out (or, if that never happens, after a bound: the
            // counts below then fail with the numbers).
            let mut seen = 0;
            for _ in 0..2000 {
                for far in &mut observe {
                    let mut got = Batch::new(MAX_BATCH);
                    seen += far.recv(Instant::MAX, &mut got).unwrap();
                }
                if seen == 250 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            stop.store(true, Ordering::Relaxed);
            run.join().unwrap()
        })
        .unwrap();
        assert_eq!(snapshots, vec![(2, 2, true)]);
        assert_eq!(report.ports[1].counters.tx_packets, 250, "{report}");
        assert_eq!(report.counters.port(PortId(1)).unwrap().tx_packets, 250);
    }

    /// A queue whose receive panics (a bug in a port or a stage takes its worker down).
    #[derive(Debug)]
    struct Dies(crate::vlink::VLinkPort);

    impl Port for Dies {
        fn name(&self) -> &str {
            self.0.name()
        }
        fn recv(&mut self, _: Instant, _: &mut Batch) -> io::Result<usize> {
            panic!("receive failed for the test");
        }
        fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
            self.0.send(now, batch)
        }
        fn caps(&self) -> crate::port::PortCaps {
            self.0.caps()
        }
    }

    /// A queue worker that dies ends the run with its error while the others would go on
    /// forever (no stop flag, no idle exit); a watchdog bounds the test if it did not.
    #[test]
    fn a_dead_queue_worker_stops_the_run_with_its_error() {
        use crate::vlink::VLink;
        let mut queues = Vec::new();
        for k in 0..2 {
            let (a0, _) = VLink::symmetric(&format!("in{k}"), Default::default(), 1);
            let (a1, _) = VLink::symmetric(&format!("out{k}"), Default::default(), 2);
            let q0: Box<dyn Port> = if k == 1 { Box::new(Dies(a0)) } else { Box::new(a0) };
            queues.push(vec![q0, Box::new(a1)]);
        }
        let rt = Runtime::with_queues(l2fwd_config(), queues).unwrap();
        let stop = AtomicBool::new(false);
        let done = AtomicBool::new(false);
        let fired = AtomicBool::new(false);
        let r = std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..600 {
                    if done.load(Ordering::Relaxed) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                fired.store(true, Ordering::Relaxed);
                stop.store(true, Ordering::Relaxed);
            });
            let r = rt.run(&stop, &no_stop(), |_| {});
            done.store(true, Ordering::Relaxed);
            r
        });
        assert!(!fired.load(Ordering::Relaxed), "the run went on after its worker died");
        let e = r.unwrap_err().to_string();
        assert!(e.contains("queue worker 1 panicked: receive failed for the test"), "{e}");
    }

    /// Ports that split open as per-worker queues when there are several workers; a port that
    /// cannot split (a generator) keeps the one I/O loop for all of them.
    #[test]
    fn open_ports_splits_only_when_every_port_can() {
        let null2 = [PortSpec::Null, PortSpec::Null];
        match open_ports(&null2, 3).unwrap() {
            OpenPorts::Queues(q) => {
                assert_eq!(q.len(), 3);
                assert!(q.iter().all(|w| w.len() == 2));
            }
            other => panic!("expected queues, got {other:?}"),
        }
        assert!(matches!(open_ports(&null2, 1).unwrap(), OpenPorts::Shared(p) if p.len() == 2));
        let mixed = [PortSpec::Gen { count: 1, seed: 1 }, PortSpec::Null];
        assert!(matches!(open_ports(&mixed, 2).unwrap(), OpenPorts::Shared(p) if p.len() == 2));
        let mut cfg = RunConfig::new(null2.to_vec());
        cfg.workers = 2;
        cfg.idle_exit_ms = Some(1);
        let rt = Runtime::new(cfg).unwrap();
        assert!(rt.per_worker_queues());
        let r = rt.run(&no_stop(), &no_stop(), |_| {}).unwrap();
        assert_eq!((r.workers, r.ports.len(), r.counters.total_drops()), (2, 2, 0));
    }

    #[test]
    fn stop_flag_ends_a_run_that_would_not_end() {
        let (a, b) = crate::vlink::VLink::symmetric("x", Default::default(), 1);
        let cfg = RunConfig::new(vec![PortSpec::Null, PortSpec::Null]);
        let rt =
            Runtime::with_ports(cfg, vec![Box::new(a), Box::new(b)], vec![false, false]).unwrap();
        let stop = AtomicBool::new(false);
        let stats = AtomicBool::new(true);
        let mut snapshots = 0;
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                stop.store(true, Ordering::Relaxed);
            });
            rt.run(&stop, &stats, |_| snapshots += 1).unwrap();
        });
        assert_eq!(snapshots, 1);
    }
}
