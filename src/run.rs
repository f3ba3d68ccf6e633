//! `snic run`: ports and pipelines on worker threads, counters on exit and on SIGUSR1.
//!
//! The command line becomes a [`RunConfig`]: from `--config FILE` (TOML) and/or repeated
//! `--port`, `--stage`, `--workers`, `--trace` (the command line wins over the file). With no
//! arguments at all the embedded default runs: generated mixed traffic through parse, classify
//! and l2fwd into a counting null sink; nothing of it needs root or files. Without ports the
//! embedded default's ports are used; without stages the default chain (parse, classify, l2fwd
//! between ports 0 and 1).
//!
//! The run ends when its finite inputs are exhausted, after `--duration`, or on SIGINT/SIGTERM
//! (a clean stop: queues drain, pcap outputs flush, final counters print). SIGUSR1 prints the
//! counters so far on stderr. With `--control PATH`, `snic stats --control PATH` reads them as
//! JSON while the run goes on, and with a `vswitch` stage `snic vswitch ... --control PATH`
//! inspects and changes the vSwitch's policy (`--policy FILE`, `--flows N`, `--flow-idle-ms MS`
//! set it up; they are refused without a `vswitch` stage), and with a `p4` stage
//! `snic p4 table-add ... --control PATH` (and the other `simple_switch_CLI` commands) programs
//! the P4 program's tables; with `kernel:NAME` stages `snic stream ... --control PATH` sets
//! their registers and keys and reads their tables, which the final report also prints.
//!
//! Classes are reported twice. "Classified" comes from the classify stage's own counters (every
//! packet it was handed, by the class it gave, including packets it or a later stage then
//! dropped; merged across workers). "Forwarded by class" counts the packets that actually left a
//! port: every port is wrapped in a [`ClassCountingPort`] that counts, per batch, the class of
//! each packet it transmits. The wrapper stays because the pipeline's counters cannot say it:
//! drops after classification (`no_egress`, `tx_queue_full`, ...) are counted by reason, not by
//! class, and without a classify stage packets leave `unclassified`.

use crate::control::ControlServer;
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use snic_io::runtime::{RunConfig, RunReport, Runtime};
use snic_io::signal::Signals;
use snic_io::{Port, PortCaps, PortCounters, PortSpec};
use snic_pipeline::pipeline::StageSpec;
use snic_pipeline::{Batch, Class, PortId};
use snic_time::{Clock, Instant};
use std::io::{self, Write};
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the control socket's snapshot is refreshed while running.
const CONTROL_REFRESH: Duration = Duration::from_millis(100);

/// Arguments of `snic run`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RunArgs {
    /// TOML run configuration (ports, stages, workers, ...). Command-line options override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    // The help is given as an attribute, not a doc comment: rustdoc would read `[,OUT]` as a link.
    #[arg(
        long = "port",
        value_name = "KIND:ARGS",
        help = "A port: afpacket:IFNAME, tap:NAME, pcap:IN[,OUT], udp:LOCAL,REMOTE, gen:N[,SEED] \
                or null. Repeat for more ports; port ids follow the order given (0, 1, ...)."
    )]
    pub ports: Vec<String>,
    #[arg(
        long = "stage",
        value_name = "NAME",
        help = "A pipeline stage, in order: parse, parse:pass, classify, classify:mark, l2fwd, \
                l2fwd:I=E,..., l2fwd:learn, tap:PATH, vswitch, p4:PROG.p4[,entries=FILE][,I=DIR], \
                kernel:NAME[,KEY=VALUE]... (telemetry, crypt), \
                xdp:PROG.o[,SECTION][,engine=interp|jit] (an eBPF XDP program; its \
                ingress_ifindex is the snic port number). \
                Repeat the option for each stage. Default: parse, classify, l2fwd (between ports \
                0 and 1)."
    )]
    pub stages: Vec<String>,
    /// Worker threads (each runs its own pipeline; flows are spread by RSS hash).
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    /// Trace packets matching a filter, e.g. 'udp dst 4791', 'seq 1-10', 'class rdma'.
    /// The events are printed when the run ends.
    #[arg(long, value_name = "SPEC")]
    pub trace: Option<String>,
    /// Stop after this many seconds (default: until the inputs end or SIGINT/SIGTERM).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Answer `snic stats --control PATH` on this Unix socket while running.
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics while running (e.g. 127.0.0.1:9464;
    /// port 0 picks a free one). The address bound is printed on stderr.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Print the final counters as one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Policy file (TOML) of the `vswitch` stage (default: the embedded default policy).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Flow-table capacity of each worker's vSwitch shard.
    #[arg(long, value_name = "N")]
    pub flows: Option<usize>,
    /// Idle timeout of the vSwitch's cached flows, in milliseconds.
    #[arg(long = "flow-idle-ms", value_name = "MS")]
    pub flow_idle_ms: Option<u64>,
    #[command(flatten)]
    pub p4rt: crate::p4::P4RuntimeArgs,
    /// Take over from the `snic run` answering on this control socket (a hitless upgrade):
    /// its ports' descriptors and its vSwitch state come here, then it exits. Start this one
    /// with the same ports and workers (see the README's "Operating snic").
    #[arg(long, value_name = "SOCK")]
    pub takeover: Option<PathBuf>,
}

impl RunArgs {
    /// True when no option at all was given: run the embedded default.
    pub fn is_empty(&self) -> bool {
        self.config.is_none()
            && self.ports.is_empty()
            && self.stages.is_empty()
            && self.workers.is_none()
            && self.trace.is_none()
            && self.duration.is_none()
            && self.control.is_none()
            && self.metrics.is_none()
            && !self.json
            && self.policy.is_none()
            && self.flows.is_none()
            && self.flow_idle_ms.is_none()
            && self.p4rt.p4runtime.is_none()
            && self.takeover.is_none()
    }

    /// The duration as a `Duration`, rejecting negative and non-finite values.
    pub fn duration(&self) -> Result<Option<Duration>> {
        match self.duration {
            None => Ok(None),
            Some(s) if s.is_finite() && s >= 0.0 => Ok(Some(Duration::from_secs_f64(s))),
            Some(s) => bail!("--duration must be a non-negative number of seconds, got {s}"),
        }
    }

    /// Build the run configuration: the file (if any), then the command line on top.
    pub fn config(&self) -> Result<RunConfig> {
        let mut cfg = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                RunConfig::from_toml(&text).with_context(|| format!("{}", path.display()))?
            }
            None => RunConfig::default(),
        };
        if !self.ports.is_empty() {
            cfg.ports = self
                .ports
                .iter()
                .map(|s| s.parse::<PortSpec>().with_context(|| format!("bad --port {s:?}")))
                .collect::<Result<_>>()?;
        }
        if !self.stages.is_empty() {
            cfg.stages = self
                .stages
                .iter()
                .map(|s| {
                    s.parse::<StageSpec>()
                        .map_err(|e| anyhow::anyhow!("bad --stage {s:?}: {}", e.0))
                })
                .collect::<Result<_>>()?;
        }
        if let Some(w) = self.workers {
            cfg.workers = w;
        }
        if let Some(t) = &self.trace {
            cfg.trace = Some(t.clone());
        }
        if let Some(p) = &self.policy {
            cfg.vswitch.policy = Some(p.display().to_string());
        }
        if let Some(n) = self.flows {
            cfg.vswitch.flows = Some(n);
        }
        if let Some(ms) = self.flow_idle_ms {
            cfg.vswitch.idle_timeout_ms = Some(ms);
        }
        let vswitch_flags: Vec<&str> = [
            (self.policy.is_some(), "--policy"),
            (self.flows.is_some(), "--flows"),
            (self.flow_idle_ms.is_some(), "--flow-idle-ms"),
        ]
        .into_iter()
        .filter_map(|(given, name)| given.then_some(name))
        .collect();
        if !vswitch_flags.is_empty() && !cfg.stages.contains(&StageSpec::VSwitch) {
            bail!(
                "{} configure{} the vswitch stage, but the stage list has none (add --stage vswitch)",
                vswitch_flags.join(", "),
                if vswitch_flags.len() == 1 { "s" } else { "" }
            );
        }
        if cfg.ports.len() == 1 && cfg.stages.iter().any(|s| matches!(s, StageSpec::L2Static(_))) {
            tracing::warn!(
                "one port with l2fwd: nothing has another port to go to, so every packet will be \
                 dropped as no_egress or loop_prevented; to process a capture into another file \
                 give two ports, e.g. --port pcap:in.pcap --port pcap:,out.pcap"
            );
        }
        Ok(cfg)
    }
}

/// Packets transmitted, by class, shared between the port wrappers and the reporter.
#[derive(Debug, Default)]
pub struct ClassCounts {
    /// Indexed by [`class_index`].
    counts: [AtomicU64; 3],
}

fn class_index(c: Class) -> usize {
    match c {
        Class::Rdma => 0,
        Class::Other => 1,
        Class::Unclassified => 2,
    }
}

impl ClassCounts {
    /// `{"rdma": n, "other": n, "unclassified": n}`.
    pub fn to_json(&self) -> Value {
        let get = |c: Class| self.counts[class_index(c)].load(Ordering::Relaxed);
        json!({
            "rdma": get(Class::Rdma),
            "other": get(Class::Other),
            "unclassified": get(Class::Unclassified),
        })
    }
}

/// A port that counts the class of every packet it transmits, then hands the batch on.
/// Counting is a loop over the batch and three atomic adds per batch: no allocation, no lock.
pub struct ClassCountingPort {
    inner: Box<dyn Port>,
    classes: Arc<ClassCounts>,
}

impl std::fmt::Debug for ClassCountingPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClassCountingPort").field("inner", &self.inner.name()).finish()
    }
}

impl ClassCountingPort {
    /// Wrap `inner`, counting into `classes`.
    pub fn new(inner: Box<dyn Port>, classes: Arc<ClassCounts>) -> Self {
        ClassCountingPort { inner, classes }
    }
}

impl Port for ClassCountingPort {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        self.inner.recv(now, batch)
    }
    fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let sent = self.inner.send(now, batch)?;
        // `send` transmits in order: the first `sent` packets left.
        let mut n = [0u64; 3];
        for p in batch.iter().take(sent) {
            n[class_index(p.meta.class)] += 1;
        }
        for (c, k) in self.classes.counts.iter().zip(n) {
            if k != 0 {
                c.fetch_add(k, Ordering::Relaxed);
            }
        }
        Ok(sent)
    }
    fn poll_fd(&self) -> Option<RawFd> {
        self.inner.poll_fd()
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.inner.poll_timeout()
    }
    fn is_exhausted(&self) -> bool {
        self.inner.is_exhausted()
    }
    fn caps(&self) -> PortCaps {
        self.inner.caps()
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
    fn counters(&self) -> PortCounters {
        self.inner.counters()
    }
    fn handover(&mut self) -> Option<io::Result<snic_io::handover::PortHandover>> {
        self.inner.handover()
    }
}

/// The ports' kernel-side counters summed over every port: frames the kernel dropped before
/// snic could read them (`rx_kernel_drops`: socket or ring full, AF_PACKET `PACKET_STATISTICS`
/// and AF_XDP `rx_dropped`; `rx_ring_full`; `rx_fill_empty`), and transmit attempts that found
/// the ring full (`tx_ring_full`, whose frames are also counted as transmit drops).
fn kernel_totals(report: &RunReport) -> PortCounters {
    let mut k = PortCounters::default();
    for p in &report.ports {
        k.merge(&PortCounters {
            rx_kernel_drops: p.counters.rx_kernel_drops,
            rx_ring_full: p.counters.rx_ring_full,
            rx_fill_empty: p.counters.rx_fill_empty,
            tx_ring_full: p.counters.tx_ring_full,
            ..PortCounters::default()
        });
    }
    k
}

/// Every drop of the run: the pipeline's and the I/O side's (by reason), plus the frames the
/// kernel dropped at the ports (they reached snic's ports and never entered a pipeline).
/// `tx_ring_full` is not added: its frames are already counted as `tx_queue_full`.
fn drops_total(report: &RunReport) -> u64 {
    report.counters.total_drops().saturating_add(kernel_totals(report).kernel_drops())
}

/// Sum drop counts by reason over every stage and port, and the ports' kernel-side counters
/// (`rx_kernel_drops`, `rx_ring_full`, `rx_fill_empty`, `tx_ring_full`) when non-zero.
fn drops_by_reason(report: &RunReport) -> serde_json::Map<String, Value> {
    let mut all = serde_json::Map::new();
    let c = &report.counters;
    let sets = c
        .stages
        .iter()
        .map(|s| &s.drops)
        .chain(c.ports.iter().flat_map(|p| [&p.rx_drops, &p.tx_drops]));
    for d in sets {
        for (key, n) in d.nonzero() {
            let e = all.entry(key.to_string()).or_insert(json!(0));
            *e = json!(e.as_u64().unwrap_or(0) + n);
        }
    }
    let k = kernel_totals(report);
    for (key, n) in [
        ("rx_kernel_drops", k.rx_kernel_drops),
        ("rx_ring_full", k.rx_ring_full),
        ("rx_fill_empty", k.rx_fill_empty),
        ("tx_ring_full", k.tx_ring_full),
    ] {
        if n != 0 {
            all.insert(key.to_string(), json!(n));
        }
    }
    all
}

/// The counters of a run as one JSON document (what `--json` and the control socket give):
/// `classified` is the classify stage's count by class, `classes` the packets forwarded by class,
/// `created` the packets stages made (P4 replicas and clones: what left plus what was dropped
/// is what arrived plus this). `drops_total` counts the pipeline's drops and the frames the
/// kernel dropped at the ports (`kernel`: the ports' kernel-side counters summed; each port's
/// own are in its `device`); `drops` lists both by reason. `per_worker` has one entry per
/// worker when the ports split into per-worker queues: that worker's queues of every port,
/// counters summed (empty when one I/O loop serves the ports).
pub fn report_json(report: &RunReport, classes: &ClassCounts) -> Value {
    let ports: Vec<Value> = report
        .ports
        .iter()
        .map(|p| {
            let pc = report.counters.port(PortId(p.id)).cloned().unwrap_or_default();
            json!({
                "id": p.id,
                "name": p.name,
                "rx_packets": pc.rx_packets,
                "rx_bytes": pc.rx_bytes,
                "tx_packets": pc.tx_packets,
                "tx_bytes": pc.tx_bytes,
                "rx_drops": pc.rx_drops,
                "tx_drops": pc.tx_drops,
                "tunnel_segmented": pc.tunnel_segmented,
                "tunnel_udp_gso": pc.tunnel_udp_gso,
                "gro_coalesced": pc.gro_coalesced,
                "device": p.counters,
            })
        })
        .collect();
    json!({
        "workers": report.workers,
        "elapsed_secs": report.elapsed_secs,
        "ports": ports,
        "per_worker": report.per_worker,
        "stages": report.counters.stages,
        "drops_total": drops_total(report),
        "kernel": {
            "rx_kernel_drops": kernel_totals(report).rx_kernel_drops,
            "rx_ring_full": kernel_totals(report).rx_ring_full,
            "rx_fill_empty": kernel_totals(report).rx_fill_empty,
            "tx_ring_full": kernel_totals(report).tx_ring_full,
        },
        "created": report.counters.created_total(),
        "drops": drops_by_reason(report),
        "classified": report.counters.classified(),
        "classes": classes.to_json(),
        "trace": report.trace,
    })
}

/// The counters of a run as a human-readable table.
pub fn report_text(report: &RunReport, classes: &ClassCounts) -> String {
    let mut s = report.to_string();
    let rx: u64 = report.counters.ports.iter().map(|p| p.rx_packets).sum();
    let rx_bytes: u64 = report.counters.ports.iter().map(|p| p.rx_bytes).sum();
    if report.elapsed_secs > 0.0 {
        s.push_str(&format!(
            "received {rx} packets ({rx_bytes} bytes) in {:.3} s: {:.3} Mpps, {:.3} Gbit/s\n",
            report.elapsed_secs,
            rx as f64 / report.elapsed_secs / 1e6,
            rx_bytes as f64 * 8.0 / report.elapsed_secs / 1e9
        ));
    }
    let cl = report.counters.classified();
    s.push_str(&format!("classified: rdma {} other {}\n", cl.rdma, cl.other));
    let c = classes.to_json();
    s.push_str(&format!(
        "forwarded by class: rdma {} other {} unclassified {}\n",
        c["rdma"], c["other"], c["unclassified"]
    ));
    let drops = drops_by_reason(report);
    if drops.is_empty() {
        s.push_str("drops: none\n");
    } else {
        let parts: Vec<String> = drops.iter().map(|(k, v)| format!("{k} {v}")).collect();
        s.push_str(&format!("drops ({}): {}\n", drops_total(report), parts.join(", ")));
    }
    s
}

/// Entry point of `snic run`.
pub fn run(args: RunArgs) -> Result<()> {
    let duration = args.duration()?;
    let embedded = args.is_empty();
    let mut cfg = args.config()?;
    let ports_desc: Vec<String> = cfg.ports.iter().map(ToString::to_string).collect();
    let stage_list = crate::upgrade::stage_list(&cfg.stages);
    // Kernel stages are shown without their keys.
    let stages_desc = crate::upgrade::stages_shown(&cfg.stages);
    if embedded {
        println!(
            "snic run: embedded default (no root, no files): ports {} -> stages {}",
            ports_desc.join(" + "),
            stages_desc.join(" -> ")
        );
    }
    tracing::info!(
        "ports [{}], stages [{}], {} worker(s)",
        ports_desc.join(", "),
        stages_desc.join(", "),
        cfg.workers
    );

    let classes = Arc::new(ClassCounts::default());
    // With several workers and ports that split (AF_PACKET fanout, AF_XDP queues, multi-queue
    // TAP, null), each worker gets its own queue of every port; every queue is class-counted.
    let finite: Vec<bool> = cfg.ports.iter().map(PortSpec::is_finite_source).collect();
    // With a control socket, ports and stages can be captured (`snic capture`) and packets
    // traced through a dry run (`snic trace`).
    let capture =
        args.control.as_ref().map(|_| crate::capture::CaptureHub::new(stages_desc.clone()));
    if let Some(hub) = &capture {
        cfg.stage_taps = hub.stage_taps();
    }
    let trace_cfg = cfg.pipeline_config();
    let p4_stage = crate::p4::p4_stage(&cfg.stages);
    let cfg_in_force = cfg.clone();
    // A takeover adopts the old process's ports instead of opening them (src/upgrade.rs); it
    // builds the pipelines first, before the old process pauses.
    let prebuilt = match &args.takeover {
        Some(_) => {
            crate::upgrade::check_takeover_ports(&cfg)?;
            Some(Runtime::prebuild(cfg.clone()).context("cannot build the pipelines")?)
        }
        None => None,
    };
    let mut takeover = match &args.takeover {
        Some(sock) => Some(crate::upgrade::Takeover::begin(sock, &cfg)?),
        None => None,
    };
    let opened = match &mut takeover {
        Some(t) => t.open_ports(&cfg).inspect_err(|e| t.abort(e))?,
        None => {
            snic_io::runtime::open_ports(&cfg.ports, cfg.workers).map_err(anyhow::Error::new)?
        }
    };
    let ports = opened
        .map(|port| Box::new(ClassCountingPort::new(port, Arc::clone(&classes))) as Box<dyn Port>);
    let ports = match &capture {
        Some(hub) => hub.wrap(ports, cfg.ports.len()),
        None => ports,
    };
    let runtime = match prebuilt {
        Some(pre) => Runtime::with_prebuilt(pre, ports, finite),
        None => Runtime::with_open(cfg, ports, finite),
    }
    .context("cannot start the runtime");
    let runtime = match (&mut takeover, runtime) {
        (Some(t), Err(e)) => {
            t.abort(&e);
            return Err(e);
        }
        (Some(t), Ok(r)) => {
            t.step("pipelines");
            r
        }
        (None, r) => r?,
    };
    if let Some(t) = &mut takeover {
        t.import_vswitch(runtime.vswitch(), runtime.clock().now()).inspect_err(|e| t.abort(e))?;
    }
    // (In a takeover, everything that may fail is done before `commit`, further down: a
    // failure before it returns here and the old process, seeing the channel close, resumes.)
    if runtime.per_worker_queues() {
        tracing::info!("each worker owns a queue of every port");
    }
    if let Some(p4) = runtime.p4() {
        for w in p4.warnings() {
            eprintln!("{w}");
        }
    }

    let _p4runtime = args.p4rt.start(
        runtime.p4().map(|p| p.control()),
        p4_stage.as_ref().map(|(p, i)| (p.as_str(), i.as_slice())),
    )?;

    let signals = Signals::install().context("cannot install signal handlers")?;
    // SIGHUP: read the configuration again and apply what can change live (src/reload.rs).
    let reread = args.clone();
    let reloader = crate::reload::Reloader::start(
        cfg_in_force,
        move || reread.config(),
        runtime.vswitch().cloned(),
    )
    .context("cannot install the SIGHUP handler")?;
    let done = Arc::new(AtomicBool::new(false));
    if let Some(d) = duration {
        let stop = Arc::clone(&signals.stop);
        let done = Arc::clone(&done);
        std::thread::Builder::new().name("snic-duration".into()).spawn(move || {
            let end = std::time::Instant::now() + d;
            while !done.load(Ordering::Relaxed) {
                let now = std::time::Instant::now();
                if now >= end {
                    stop.store(true, Ordering::Relaxed);
                    break;
                }
                std::thread::sleep((end - now).min(Duration::from_millis(50)));
            }
        })?;
    }

    // With a control socket or a metrics endpoint, a refresher asks the run loop for a
    // snapshot every CONTROL_REFRESH (through its stats flag); SIGUSR1 is then relayed by the
    // same callback.
    let latest = Arc::new(Mutex::new(json!({"status": "starting", "ports": []}).to_string()));
    let poke = Arc::new(AtomicBool::new(false));
    let snapshots = args.control.is_some() || args.metrics.is_some();
    // With a control socket, a newer process can take this one over (src/upgrade.rs).
    let handoff = crate::upgrade::Handoff::default();
    let old_side = crate::upgrade::OldSide {
        specs: ports_desc.clone(),
        stages: stage_list,
        stages_shown: stages_desc.clone(),
        workers: runtime.config().workers,
        per_worker_queues: runtime.per_worker_queues(),
        vswitch: runtime.vswitch().cloned(),
        clock: runtime.clock(),
    };
    let metrics = args.metrics.clone().map(|addr| {
        (addr, crate::metrics::run_renderer(Arc::clone(&latest), runtime.vswitch().cloned()))
    });
    // vSwitch requests are answered with the vSwitch's control handle (a clone: the runtime is
    // consumed by `run`), timed with the run's clock so flow ages are right.
    let control = match &args.control {
        Some(path) => {
            let handler = crate::vswitch::control_handler(
                Arc::clone(&latest),
                runtime.vswitch().cloned(),
                runtime.p4().map(|p| p.control()),
                runtime.stream_kernels().to_vec(),
                crate::ebpf::Targets { xdp: runtime.xdp().to_vec(), core: None },
                runtime.clock(),
            );
            let ops = capture.as_ref().map(|hub| {
                let target = crate::trace::TraceTarget::new(
                    trace_cfg.clone(),
                    hub.port_names(),
                    runtime.vswitch().cloned(),
                    runtime.p4().map(|p| p.control()),
                    runtime.clock(),
                );
                crate::capture::ops_handler(Arc::clone(hub), target)
            });
            let mut handler = handler;
            let h = handoff.clone();
            let handler = move |incoming| match incoming {
                crate::control::Incoming::Request(crate::control::Request::Upgrade { channel }) => {
                    h.request(&channel).to_string()
                }
                other => handler(other),
            };
            Some((path.clone(), handler, ops))
        }
        None => None,
    };
    // The listeners (metrics, control socket): bound now, or in a takeover once the old
    // process is gone (it holds the addresses until it exits), so that the data path starts
    // as soon as the old process has committed.
    let listen = move || -> Result<Listeners> {
        let metrics = match metrics {
            Some((addr, render)) => {
                let server = crate::metrics::MetricsServer::spawn(&addr, render)?;
                eprintln!("snic run: metrics on http://{}/metrics", server.local_addr());
                Some(server)
            }
            None => None,
        };
        let control = match control {
            Some((path, handler, ops)) => Some(ControlServer::spawn_with_ops(&path, handler, ops)?),
            None => None,
        };
        Ok(Listeners { _metrics: metrics, _control: control })
    };
    let mut listen = Some(listen);
    let _listeners =
        if takeover.is_none() { listen.take().map(|l| l()).transpose()? } else { None };
    if snapshots {
        let poke = Arc::clone(&poke);
        let done = Arc::clone(&done);
        std::thread::Builder::new().name("snic-control-refresh".into()).spawn(move || {
            while !done.load(Ordering::Relaxed) {
                poke.store(true, Ordering::Relaxed);
                std::thread::sleep(CONTROL_REFRESH);
            }
        })?;
    }
    let stats_flag: &AtomicBool = if snapshots { &poke } else { &signals.stats };
    let xdp_final = runtime.xdp().to_vec();
    let takeover_doc: Mutex<Option<Value>> = Mutex::new(None);
    let with_xdp = |mut doc: Value| {
        if let (false, Some(obj)) = (xdp_final.is_empty(), doc.as_object_mut()) {
            obj.insert("xdp".into(), crate::ebpf::actions_json(&xdp_final));
        }
        if let (Ok(t), Some(obj)) = (takeover_doc.lock(), doc.as_object_mut())
            && let Some(t) = t.as_ref()
        {
            obj.insert("takeover".into(), t.clone());
        }
        reloader.annotate(&mut doc);
        doc
    };
    let on_stats = |r: &RunReport| {
        let print = !snapshots || signals.take_stats_request();
        if snapshots && let Ok(mut l) = latest.lock() {
            *l = with_xdp(report_json(r, &classes)).to_string();
        }
        if print {
            let mut err = io::stderr().lock();
            let _ = writeln!(
                err,
                "--- snic stats (SIGUSR1)\n{}{}",
                report_text(r, &classes),
                crate::ebpf::actions_text(&xdp_final)
            );
        }
    };
    let vswitch_final = runtime.vswitch().cloned();
    let kernels_final = runtime.stream_kernels().to_vec();
    // In a takeover: wait for the old process to be gone, then bind the listeners, while
    // the run goes on.
    let mut after_old = None;
    if let Some(mut t) = takeover.take() {
        t.commit()?;
        t.step("started");
        let report = t.report(t.gap());
        eprintln!("snic: took over: {report}");
        if let Ok(mut l) = takeover_doc.lock() {
            *l = Some(report);
        }
        let listen = listen.take();
        // The ports are this process's now: nothing after this point may end the run early.
        let spawned = std::thread::Builder::new().name("snic-takeover".into()).spawn(
            move || -> Option<Listeners> {
                let bound = t.wait_old().and_then(|()| listen.map(|l| l()).transpose());
                bound.unwrap_or_else(|e| {
                    eprintln!("snic: after the takeover: {e:#}");
                    None
                })
            },
        );
        match spawned {
            Ok(h) => after_old = Some(h),
            Err(e) => eprintln!("snic: after the takeover: no control socket: {e}"),
        }
    }
    let result =
        runtime.run_pausable(&signals.stop, stats_flag, on_stats, handoff.pause_flag(), |ports| {
            handoff.on_pause(ports, &old_side)
        });
    done.store(true, Ordering::Relaxed);
    // The listeners bound after a takeover close with the run (what kept them from binding
    // was said when it happened).
    if let Some(h) = after_old
        && h.join().is_err()
    {
        eprintln!("snic: the takeover thread panicked");
    }
    if let Some(hub) = &capture {
        hub.close(Duration::from_secs(2));
    }
    let report = result.context("run failed")?;

    let stdout = io::stdout();
    let mut out = stdout.lock();
    if args.json {
        let mut doc = with_xdp(report_json(&report, &classes));
        if let (Some(vs), Some(obj)) = (&vswitch_final, doc.as_object_mut()) {
            obj.insert("vswitch".into(), crate::vswitch::show_json(vs));
        }
        let tables = crate::stream::final_tables(&kernels_final);
        if let (false, Some(obj)) = (tables.is_empty(), doc.as_object_mut()) {
            obj.insert("stream".into(), serde_json::Value::Object(tables));
        }
        writeln!(out, "{doc}")?;
    } else {
        if handoff.handed_over() {
            writeln!(out, "handed over to a new process (takeover); final counters:")?;
        } else if signals.stop_requested() {
            writeln!(out, "stopped (signal or --duration); final counters:")?;
        }
        write!(out, "{}", report_text(&report, &classes))?;
        if let Some(vs) = &vswitch_final {
            writeln!(out, "--- vswitch")?;
            write!(out, "{}", crate::vswitch::show_text(&crate::vswitch::show_json(vs)))?;
        }
        if !xdp_final.is_empty() {
            writeln!(out, "--- xdp")?;
            write!(out, "{}", crate::ebpf::actions_text(&xdp_final))?;
        }
        for (stage, t) in crate::stream::final_tables(&kernels_final) {
            writeln!(out, "--- kernel {stage}")?;
            write!(out, "{}", crate::stream::table_text(&t))?;
        }
    }
    out.flush()?;
    Ok(())
}

/// The listeners of a run, closed when dropped.
struct Listeners {
    _metrics: Option<crate::metrics::MetricsServer>,
    _control: Option<ControlServer>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        run: RunArgs,
    }

    fn parse(args: &[&str]) -> RunArgs {
        T::try_parse_from(std::iter::once("run").chain(args.iter().copied())).expect("parses").run
    }

    #[test]
    fn no_arguments_is_the_embedded_default() {
        let a = parse(&[]);
        assert!(a.is_empty());
        assert_eq!(a.config().unwrap(), RunConfig::default());
    }

    #[test]
    fn command_line_overrides_ports_stages_workers_trace() {
        let a = parse(&[
            "--port",
            "gen:10",
            "--port",
            "null",
            "--stage",
            "parse",
            "--stage",
            "classify:mark",
            "--workers",
            "3",
            "--trace",
            "udp dst 4791",
        ]);
        let c = a.config().unwrap();
        assert_eq!(c.ports, vec![PortSpec::Gen { count: 10, seed: 1 }, PortSpec::Null]);
        assert_eq!(c.stages.len(), 2);
        assert_eq!(String::from(c.stages[1].clone()), "classify:mark");
        assert_eq!(c.workers, 3);
        assert_eq!(c.trace.as_deref(), Some("udp dst 4791"));
    }

    #[test]
    fn two_ports_without_stages_get_the_default_chain() {
        let c = parse(&["--port", "gen:10", "--port", "null"]).config().unwrap();
        let names: Vec<String> = c.stages.iter().map(|s| String::from(s.clone())).collect();
        assert_eq!(names, ["parse", "classify", "l2fwd"]);
    }

    #[test]
    fn bad_port_and_stage_and_duration_are_reported() {
        let e = parse(&["--port", "bogus:1"]).config().unwrap_err();
        assert!(format!("{e:#}").contains("bad --port \"bogus:1\""), "{e:#}");
        let e = parse(&["--stage", "nonsense"]).config().unwrap_err();
        assert!(e.to_string().contains("bad --stage \"nonsense\""), "{e}");
        assert!(parse(&["--duration=-1"]).duration().is_err());
        assert_eq!(
            parse(&["--duration", "1.5"]).duration().unwrap(),
            Some(Duration::from_millis(1500))
        );
    }

    #[test]
    fn vswitch_flags_set_the_vswitch_settings_and_need_the_stage() {
        let c = parse(&[
            "--port",
            "gen:10",
            "--port",
            "null",
            "--stage",
            "parse",
            "--stage",
            "vswitch",
            "--policy",
            "p.toml",
            "--flows",
            "4096",
            "--flow-idle-ms",
            "250",
        ])
        .config()
        .unwrap();
        assert_eq!(c.vswitch.policy.as_deref(), Some("p.toml"));
        assert_eq!(c.vswitch.flows, Some(4096));
        assert_eq!(c.vswitch.idle_timeout_ms, Some(250));
        assert!(!parse(&["--flows", "1"]).is_empty());
        let e = parse(&["--policy", "p.toml"]).config().unwrap_err();
        assert_eq!(
            e.to_string(),
            "--policy configures the vswitch stage, but the stage list has none (add --stage vswitch)"
        );
        let e = parse(&["--stage", "parse", "--flows", "1", "--flow-idle-ms", "2"])
            .config()
            .unwrap_err();
        assert!(e.to_string().starts_with("--flows, --flow-idle-ms configure the vswitch"), "{e}");
    }

    #[test]
    fn config_file_is_read_and_the_command_line_wins() {
        let p = std::env::temp_dir().join(format!("snic-run-cfg-{}.toml", std::process::id()));
        std::fs::write(&p, "ports = [\"gen:5\", \"null\"]\nworkers = 2\n").unwrap();
        let a = parse(&["--config", p.to_str().unwrap(), "--workers", "4"]);
        let c = a.config().unwrap();
        assert_eq!(c.ports, vec![PortSpec::Gen { count: 5, seed: 1 }, PortSpec::Null]);
        assert_eq!(c.workers, 4);
        std::fs::write(&p, "ports = [\"gen:5\"]\nbogus = 1\n").unwrap();
        assert!(parse(&["--config", p.to_str().unwrap()]).config().is_err());
        std::fs::remove_file(&p).unwrap();
    }

    /// Frames the kernel dropped at a port are drops of the run: the summary line says so
    /// instead of `drops: none`, and the JSON document counts them in `drops_total`.
    #[test]
    fn kernel_drops_are_in_the_summary_and_the_json() {
        use snic_io::runtime::PortReport;
        let port =
            |id: u16, c: PortCounters| PortReport { id, name: format!("p{id}"), counters: c };
        let mut report = RunReport {
            counters: snic_pipeline::Counters::default(),
            ports: vec![port(0, PortCounters::default()), port(1, PortCounters::default())],
            per_worker: Vec::new(),
            workers: 1,
            elapsed_secs: 1.0,
            trace: Vec::new(),
            trace_lost: 0,
        };
        let classes = ClassCounts::default();
        assert!(report_text(&report, &classes).contains("drops: none\n"));
        report.ports[0].counters.rx_kernel_drops = 1_000_000;
        report.ports[1].counters.rx_fill_empty = 3;
        report.ports[1].counters.tx_ring_full = 2;
        let text = report_text(&report, &classes);
        assert!(!text.contains("drops: none"), "{text}");
        assert!(
            text.contains(
                "drops (1000003): rx_fill_empty 3, rx_kernel_drops 1000000, tx_ring_full 2\n"
            ),
            "{text}"
        );
        assert!(text.contains("kernel: 1000000 socket drops"), "{text}");
        let doc = report_json(&report, &classes);
        assert_eq!(doc["drops_total"], 1_000_003);
        assert_eq!(doc["drops"]["rx_kernel_drops"], 1_000_000);
        assert_eq!(doc["kernel"]["rx_kernel_drops"], 1_000_000);
        assert_eq!(doc["kernel"]["rx_ring_full"], 0);
        assert_eq!(doc["kernel"]["tx_ring_full"], 2);
        assert_eq!(doc["ports"][0]["device"]["rx_kernel_drops"], 1_000_000);
        assert_eq!(doc["per_worker"], json!([]));
        assert!(!text.contains("(its queues)"), "{text}");

        // Queue workers: one entry each, in the JSON and the table, in worker order.
        let q = |rx, drops| PortCounters {
            rx_packets: rx,
            rx_kernel_drops: drops,
            ..Default::default()
        };
        report.per_worker = vec![q(10, 1), q(20, 0)];
        let doc = report_json(&report, &classes);
        assert_eq!(doc["per_worker"][0]["rx_packets"], 10);
        assert_eq!(doc["per_worker"][0]["rx_kernel_drops"], 1);
        assert_eq!(doc["per_worker"][1]["rx_packets"], 20);
        assert_eq!(doc["per_worker"].as_array().map(Vec::len), Some(2));
        let text = report_text(&report, &classes);
        let line = |k: usize| {
            let head = format!("worker {k} (its queues): ");
            text.lines().find_map(|l| l.strip_prefix(&head).map(str::to_string))
        };
        assert_eq!(line(0), Some(q(10, 1).to_string()), "{text}");
        assert_eq!(line(1), Some(q(20, 0).to_string()), "{text}");
        assert!(line(0).is_some_and(|l| l.contains("kernel: 1 socket drops")), "{text}");
    }

    #[test]
    fn class_counting_port_counts_what_it_sends_by_class() {
        let classes = Arc::new(ClassCounts::default());
        let mut port =
            ClassCountingPort::new(Box::new(snic_io::null::NullPort::new()), Arc::clone(&classes));
        let mut b = Batch::new(8);
        for c in [Class::Rdma, Class::Other, Class::Other, Class::Unclassified] {
            b.push_frame(&[0u8; 60]).expect("room").meta.class = c;
        }
        let sent = port.send(Instant::ZERO, &mut b).unwrap();
        assert_eq!(sent, 4);
        assert_eq!(classes.to_json(), json!({"rdma": 1, "other": 2, "unclassified": 1}));
    }
}
