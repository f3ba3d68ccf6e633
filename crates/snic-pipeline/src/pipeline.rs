//! A pipeline: a chain of stages built from configuration, with its counters and trace.
//!
//! The contract with the I/O layer: **after [`Pipeline::process`], the batch holds only packets to
//! transmit, each with `meta.egress = Some(port)`**; every other packet was removed and counted
//! under exactly one drop reason. A packet no stage gave an egress port is dropped as
//! `no_egress` by the final `output` step (which has its own counters). An egress of
//! [`PortId::FLOOD`] means "every port but `meta.ingress`"; the I/O layer fans it out.
//!
//! The pipeline also assigns each packet its sequence number (`meta.seq`, from 1), counts it
//! received on its ingress port, and applies the trace filter. The I/O layer counts what it does
//! after `process` (transmitted packets, transmit and receive drops) with
//! [`Pipeline::count_tx`], [`Pipeline::count_tx_drop`] and [`Pipeline::count_rx_drop`].
//!
//! A pipeline is `Send`; each worker builds its own from the same [`PipelineConfig`] and the
//! monitor sums their [`Counters`] with [`Counters::merge`].
//!
//! Stages are written as strings ([`StageSpec`]), in code or in TOML:
//!
//! ```toml
//! stages = ["parse", "classify", "l2fwd:learn", "tap:/tmp/out.pcap"]
//! ports = 2
//! trace = "udp dst 4791"
//! ```

use crate::Batch;
use crate::counters::{Counters, StageCounters};
use crate::drop::DropReason;
use crate::meta::PortId;
use crate::rss::{DEFAULT_KEY, Toeplitz};
use crate::stage::{Stage, StageCtx};
use crate::stages::{Classify, L2Fwd, Parse, Tap, l2fwd};
use crate::trace::{FilterError, TraceEvent, TraceFilter, TraceRing, TraceWhat};
use core::fmt;
use core::str::FromStr;
use core::time::Duration;
use snic_time::Instant;
use std::io::Write;

/// One stage of a pipeline, as configured. Written and read as a string:
///
/// | string | stage |
/// |---|---|
/// | `parse` | parse; drop malformed packets |
/// | `parse:pass` | parse; keep malformed packets (error in `meta.stack.error`) |
/// | `classify` | RDMA/other classification, drop bad ICRC |
/// | `classify:mark` | same, but only mark bad ICRC (`roce.icrc_ok = false`) |
/// | `l2fwd` | static forwarding, default map (0 <-> 1, 2 <-> 3, ...) |
/// | `l2fwd:0=1,1=0` | static forwarding with this map |
/// | `l2fwd:learn` | MAC learning and flooding |
/// | `tap:PATH` | copy packets to a pcap capture opened by the I/O layer |
/// | `vswitch` | the vSwitch (VFP slow path + GFT fast path); built by the I/O layer, which owns the policy |
/// | `local` | the NIC's own packets to the device (RoCE engine, neighbour table); built by the NIC, which owns the addresses |
/// | `p4:PROG.p4[,entries=FILE][,I=DIR]...` | a P4-16 v1model program; compiled and run by the I/O layer (`snic-io`), which reads the files |
/// | `kernel:NAME[,KEY=VALUE]...` | a streaming kernel (`snic-stream`: `telemetry`, `crypt`) run on every packet; built by the I/O layer, which owns its results memory and control handle |
/// | `xdp:PROG.o[,SECTION][,section=S][,engine=interp\|jit]` | an eBPF XDP program (`snic-ebpf`) run on every packet; loaded, verified and hot-swapped by the I/O layer, which reads the object file |
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum StageSpec {
    /// `parse` / `parse:pass`.
    Parse {
        /// Keep packets whose headers did not all parse.
        pass_malformed: bool,
    },
    /// `classify` / `classify:mark`.
    Classify {
        /// Drop RDMA packets whose ICRC does not verify.
        enforce_icrc: bool,
    },
    /// `l2fwd` / `l2fwd:I=E,...`: static map; empty means the default pairs.
    L2Static(Vec<(u16, u16)>),
    /// `l2fwd:learn`.
    L2Learn,
    /// `tap:PATH`.
    Tap(String),
    /// `vswitch`: a shard of the I/O layer's vSwitch (`snic-vswitch`), one per worker.
    VSwitch,
    /// `local`: the NIC's own packets (RoCEv2 and ARP / ND for its RoCE addresses) go to the
    /// device ([`crate::PortId::LOCAL`]); built by the layer that runs a whole NIC
    /// (`snic-nic`), which knows the addresses.
    Local,
    /// `p4:PROG.p4[,entries=FILE][,I=DIR]...`: a P4-16 program (v1model) run on every packet;
    /// the I/O layer reads and compiles the files and gives each worker its own switch. `p4`
    /// alone (an empty `program`) starts with no program: every packet is a `p4_drop` until a
    /// P4Runtime client pushes one.
    P4 {
        /// The program's path.
        program: String,
        /// A `simple_switch_CLI` entries file applied before the first packet.
        entries: Option<String>,
        /// `#include` search directories, in order.
        include: Vec<String>,
    },
    /// `kernel:NAME[,KEY=VALUE]...`: a streaming kernel run on every packet of a batch. This
    /// crate only carries the name and the arguments, in order; the kernel's crate
    /// (`snic-stream`) checks them when the I/O layer builds the stage.
    Kernel {
        /// The kernel's name (`telemetry`, `crypt`).
        name: String,
        /// `KEY=VALUE` arguments, in the order given.
        args: Vec<(String, String)>,
    },
    /// `xdp:PROG.o[,SECTION][,section=S][,engine=interp|jit]`: an eBPF XDP program (an object
    /// built by `clang -target bpf`) run on every packet. This crate only carries the path and
    /// the options; the I/O layer reads, verifies and runs the program (`snic-ebpf`).
    Xdp {
        /// The object file's path.
        program: String,
        /// The ELF section of the program (`xdp`, `xdp/fw`); none picks the object's only XDP
        /// program.
        section: Option<String>,
        /// The engine: `Some(true)` = `engine=jit` (a program the JIT cannot compile is an
        /// error), `Some(false)` = `engine=interp` (the interpreter, which checks every memory
        /// access again at run time), `None` (the default) = the JIT when it compiles the
        /// program, the interpreter otherwise, as the kernel with `bpf_jit_enable=1`.
        jit: Option<bool>,
    },
}

/// A stage string that does not name a stage; says what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError(pub String);

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SpecError {}

impl FromStr for StageSpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        let s = s.trim();
        let (kind, arg) = match s.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (s, None),
        };
        let bad = |why: &str| SpecError(format!("stage `{s}`: {why}"));
        match (kind, arg) {
            ("parse", None | Some("drop")) => Ok(StageSpec::Parse { pass_malformed: false }),
            ("parse", Some("pass")) => Ok(StageSpec::Parse { pass_malformed: true }),
            ("classify", None | Some("enforce")) => Ok(StageSpec::Classify { enforce_icrc: true }),
            ("classify", Some("mark")) => Ok(StageSpec::Classify { enforce_icrc: false }),
            ("l2fwd", None) => Ok(StageSpec::L2Static(Vec::new())),
            ("l2fwd", Some("learn")) => Ok(StageSpec::L2Learn),
            ("l2fwd", Some(map)) => {
                let mut pairs = Vec::new();
                for pair in map.split(',') {
                    let (i, e) =
                        pair.split_once('=').ok_or_else(|| bad("expected IN=OUT pairs"))?;
                    let i = i.trim().parse::<u16>().map_err(|_| bad("bad port number"))?;
                    let e = e.trim().parse::<u16>().map_err(|_| bad("bad port number"))?;
                    if i == u16::MAX || e == u16::MAX {
                        return Err(bad("port 65535 is reserved for flooding"));
                    }
                    pairs.push((i, e));
                }
                Ok(StageSpec::L2Static(pairs))
            }
            ("tap", Some(path)) if !path.is_empty() => Ok(StageSpec::Tap(path.to_owned())),
            ("tap", _) => Err(bad("needs a path: tap:PATH")),
            ("vswitch", None) => Ok(StageSpec::VSwitch),
            ("vswitch", Some(_)) => Err(bad("takes no option (the policy is a run setting)")),
            ("local", None) => Ok(StageSpec::Local),
            ("local", Some(_)) => Err(bad("takes no option (the addresses are the NIC's)")),
            ("p4", Some(args)) => {
                let mut parts = args.split(',');
                let program = parts.next().unwrap_or_default();
                if program.is_empty() || program.contains('=') {
                    return Err(bad("needs a program first: p4:PROG.p4[,entries=FILE][,I=DIR]"));
                }
                let (mut entries, mut include) = (None, Vec::new());
                for part in parts {
                    match part.split_once('=') {
                        Some(("entries", f)) if !f.is_empty() && entries.is_none() => {
                            entries = Some(f.to_owned())
                        }
                        Some(("entries", _)) => {
                            return Err(bad("entries= takes one non-empty file, once"));
                        }
                        Some(("I", d)) if !d.is_empty() => include.push(d.to_owned()),
                        _ => return Err(bad("options are entries=FILE and I=DIR")),
                    }
                }
                Ok(StageSpec::P4 { program: program.to_owned(), entries, include })
            }
            // No program yet: a P4Runtime client pushes one (SetForwardingPipelineConfig).
            ("p4", None) => {
                Ok(StageSpec::P4 { program: String::new(), entries: None, include: Vec::new() })
            }
            ("kernel", Some(args)) => {
                let mut parts = args.split(',');
                let name = parts.next().unwrap_or_default();
                let name_ok = !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                if !name_ok {
                    return Err(bad("needs a kernel name first: kernel:NAME[,KEY=VALUE]..."));
                }
                let mut kv = Vec::new();
                for part in parts {
                    match part.split_once('=') {
                        Some((k, v)) if !k.is_empty() && !v.contains(',') => {
                            if kv.iter().any(|(x, _): &(String, String)| x == k) {
                                return Err(bad(&format!("argument {k} given twice")));
                            }
                            kv.push((k.to_owned(), v.to_owned()))
                        }
                        _ => return Err(bad("kernel arguments are KEY=VALUE")),
                    }
                }
                Ok(StageSpec::Kernel { name: name.to_owned(), args: kv })
            }
            ("kernel", None) => Err(bad("needs a kernel name: kernel:NAME[,KEY=VALUE]...")),
            ("xdp", Some(args)) => {
                let usage = "xdp:PROG.o[,SECTION][,section=S][,engine=interp|jit]";
                let mut parts = args.split(',');
                let program = parts.next().unwrap_or_default();
                if program.is_empty() || program.contains('=') {
                    return Err(bad(&format!("needs an object file first: {usage}")));
                }
                let (mut section, mut engine) = (None, None);
                for part in parts {
                    match part.split_once('=') {
                        _ if part.is_empty() => return Err(bad("empty option")),
                        None | Some(("section", _)) if section.is_some() => {
                            return Err(bad("section given twice"));
                        }
                        None => section = Some(part.to_owned()),
                        Some(("section", s)) if !s.is_empty() => section = Some(s.to_owned()),
                        Some(("engine", _)) if engine.is_some() => {
                            return Err(bad("engine given twice"));
                        }
                        Some(("engine", e @ ("interp" | "jit"))) => engine = Some(e == "jit"),
                        Some(("engine", _)) => return Err(bad("engine is interp or jit")),
                        _ => return Err(bad(&format!("options: {usage}"))),
                    }
                }
                Ok(StageSpec::Xdp { program: program.to_owned(), section, jit: engine })
            }
            ("xdp", None) => {
                Err(bad("needs an object file: xdp:PROG.o[,SECTION][,engine=interp|jit]"))
            }
            ("parse" | "classify", Some(_)) => Err(bad("unknown option")),
            _ => Err(bad(
                "unknown stage (parse, classify, l2fwd, tap, vswitch, local, p4, kernel, xdp)",
            )),
        }
    }
}

impl TryFrom<String> for StageSpec {
    type Error = SpecError;
    fn try_from(s: String) -> Result<Self, SpecError> {
        s.parse()
    }
}

impl fmt::Display for StageSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StageSpec::Parse { pass_malformed: false } => f.write_str("parse"),
            StageSpec::Parse { pass_malformed: true } => f.write_str("parse:pass"),
            StageSpec::Classify { enforce_icrc: true } => f.write_str("classify"),
            StageSpec::Classify { enforce_icrc: false } => f.write_str("classify:mark"),
            StageSpec::L2Static(pairs) if pairs.is_empty() => f.write_str("l2fwd"),
            StageSpec::L2Static(pairs) => {
                f.write_str("l2fwd:")?;
                for (n, (i, e)) in pairs.iter().enumerate() {
                    if n > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{i}={e}")?;
                }
                Ok(())
            }
            StageSpec::L2Learn => f.write_str("l2fwd:learn"),
            StageSpec::Tap(path) => write!(f, "tap:{path}"),
            StageSpec::VSwitch => f.write_str("vswitch"),
            StageSpec::Local => f.write_str("local"),
            StageSpec::P4 { program, .. } if program.is_empty() => f.write_str("p4"),
            StageSpec::P4 { program, entries, include } => {
                write!(f, "p4:{program}")?;
                if let Some(e) = entries {
                    write!(f, ",entries={e}")?;
                }
                for d in include {
                    write!(f, ",I={d}")?;
                }
                Ok(())
            }
            StageSpec::Kernel { name, args } => {
                write!(f, "kernel:{name}")?;
                for (k, v) in args {
                    write!(f, ",{k}={v}")?;
                }
                Ok(())
            }
            StageSpec::Xdp { program, section, jit } => {
                write!(f, "xdp:{program}")?;
                if let Some(s) = section {
                    write!(f, ",section={s}")?;
                }
                match jit {
                    Some(true) => f.write_str(",engine=jit")?,
                    Some(false) => f.write_str(",engine=interp")?,
                    None => {}
                }
                Ok(())
            }
        }
    }
}

impl From<StageSpec> for String {
    fn from(s: StageSpec) -> String {
        s.to_string()
    }
}

fn default_ports() -> u16 {
    2
}
fn default_trace_capacity() -> usize {
    1024
}
fn default_mac_capacity() -> usize {
    l2fwd::DEFAULT_MAC_CAPACITY
}
fn default_mac_age_secs() -> u64 {
    l2fwd::DEFAULT_MAC_AGE.as_secs()
}

/// Everything needed to build a pipeline; deserialisable from TOML or JSON.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    /// The stages, in order.
    pub stages: Vec<StageSpec>,
    /// Number of ports (for the default `l2fwd` map). Default 2.
    #[serde(default = "default_ports")]
    pub ports: u16,
    /// RSS key as 80 hex digits; default the Microsoft verification key.
    #[serde(default)]
    pub rss_key: Option<String>,
    /// Trace filter expression (see [`TraceFilter::parse`]); none traces nothing.
    #[serde(default)]
    pub trace: Option<String>,
    /// Most trace events kept before the oldest are dropped. Default 1024.
    #[serde(default = "default_trace_capacity")]
    pub trace_capacity: usize,
    /// MAC-table capacity of `l2fwd:learn`. Default 4096.
    #[serde(default = "default_mac_capacity")]
    pub mac_capacity: usize,
    /// Seconds before a learned MAC expires. Default 300.
    #[serde(default = "default_mac_age_secs")]
    pub mac_age_secs: u64,
    /// Stage tap points for live captures (not serialised; none by default).
    #[serde(skip)]
    pub stage_taps: crate::trace::TapHandle,
}

impl PipelineConfig {
    /// A configuration with these stages and every other setting at its default.
    pub fn new(stages: Vec<StageSpec>) -> Self {
        PipelineConfig {
            stages,
            ports: default_ports(),
            rss_key: None,
            trace: None,
            trace_capacity: default_trace_capacity(),
            mac_capacity: default_mac_capacity(),
            mac_age_secs: default_mac_age_secs(),
            stage_taps: crate::trace::TapHandle::default(),
        }
    }

    /// Parse stage strings (`["parse", "classify", "l2fwd"]`) into a default configuration.
    pub fn from_strs(stages: &[&str]) -> Result<Self, SpecError> {
        Ok(Self::new(stages.iter().map(|s| s.parse()).collect::<Result<_, _>>()?))
    }
}

/// Why a pipeline could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// The RSS key is not 80 hex digits.
    BadRssKey(String),
    /// The trace filter does not parse.
    BadTrace(FilterError),
    /// The I/O layer could not open a tap's sink.
    Sink {
        /// The tap's path.
        path: String,
        /// What went wrong.
        err: std::io::Error,
    },
    /// A size setting is outside what snic accepts (names the setting and its limit).
    OutOfRange {
        /// The setting (`trace_capacity`, `mac_capacity`).
        field: &'static str,
        /// The value given.
        value: usize,
        /// The largest value accepted.
        max: usize,
    },
    /// The stage is built by a layer above the pipeline (the vSwitch by the I/O layer), and no
    /// builder for it was given.
    Unsupported(&'static str),
    /// A stage builder failed (names the stage and says why).
    Stage {
        /// The stage.
        stage: String,
        /// Why.
        why: String,
    },
    /// The pcap header could not be written to a tap's sink.
    Pcap {
        /// The tap's path.
        path: String,
        /// What went wrong.
        err: pcap_file::PcapError,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::BadRssKey(why) => write!(f, "bad RSS key: {why}"),
            BuildError::BadTrace(e) => write!(f, "{e}"),
            BuildError::Sink { path, err } => write!(f, "cannot open tap sink {path}: {err}"),
            BuildError::OutOfRange { field, value, max } => {
                write!(f, "{field} = {value} is out of range (1..={max})")
            }
            BuildError::Unsupported(what) => write!(f, "{what}"),
            BuildError::Stage { stage, why } => write!(f, "cannot build stage {stage}: {why}"),
            BuildError::Pcap { path, err } => {
                write!(f, "cannot write pcap header to {path}: {err}")
            }
        }
    }
}

impl std::error::Error for BuildError {}

/// Parse an RSS key written as 80 hex digits.
pub fn parse_rss_key(hex: &str) -> Result<[u8; 40], BuildError> {
    let hex = hex.trim();
    if hex.len() != 80 || !hex.is_ascii() {
        return Err(BuildError::BadRssKey(format!(
            "need 80 hex digits, got {} characters",
            hex.len()
        )));
    }
    let mut key = [0u8; 40];
    for (i, k) in key.iter_mut().enumerate() {
        *k = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| BuildError::BadRssKey(format!("not hex at position {}", 2 * i)))?;
    }
    Ok(key)
}

/// After a stage that [`Stage::delivers_local`]: move its `LOCAL` packets from `batch` into
/// `local` and count them in the stage's `local`. A packet that does not fit (the driver has
/// not taken the earlier ones) is dropped as `local_full`, counted by the same stage.
fn take_local(batch: &mut Batch, local: &mut Batch, c: &mut StageCounters, trace: &mut TraceRing) {
    let is_local = |p: &crate::PacketBuf| p.meta.egress.is_some_and(PortId::is_local);
    let before = batch.len();
    batch.drain_into(local, is_local);
    c.local += (before - batch.len()) as u64;
    if batch.iter().any(is_local) {
        StageCtx::new(c, trace)
            .each(batch, |p, _| if is_local(p) { Err(DropReason::LocalFull) } else { Ok(()) });
    }
}

/// Opens the sink of a `tap:PATH` stage; supplied by the I/O layer (the pipeline opens nothing).
pub type SinkOpener<'a> = dyn FnMut(&str) -> std::io::Result<Box<dyn Write + Send>> + 'a;

/// Builds the stages the pipeline crate does not own (`vswitch`): `Some(stage)` for the specs it
/// knows, `None` for the others.
pub type StageFactory<'a> =
    dyn FnMut(&StageSpec) -> Option<Result<Box<dyn Stage>, BuildError>> + 'a;

/// A chain of stages with its counters and trace ring.
pub struct Pipeline {
    stages: Vec<Box<dyn Stage>>,
    counters: Counters,
    output: StageCounters,
    trace: TraceRing,
    filter: Option<TraceFilter>,
    next_seq: u64,
    /// Packets delivered to the device ([`PortId::LOCAL`]) since the last
    /// [`Pipeline::take_local`].
    local: Batch,
    /// Stage tap points of live captures (read once per batch).
    taps: Option<std::sync::Arc<crate::trace::StageTaps>>,
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("stages", &self.stages.iter().map(|s| s.name()).collect::<Vec<_>>())
            .field("next_seq", &self.next_seq)
            .finish_non_exhaustive()
    }
}

impl Default for Pipeline {
    fn default() -> Self {
        Self::new()
    }
}

/// Most trace events a pipeline keeps before the oldest are overwritten.
pub const MAX_TRACE_CAPACITY: usize = 1 << 20;
/// Most entries a learning `l2fwd` MAC table may be configured with.
pub const MAX_MAC_CAPACITY: usize = 1 << 24;

impl Pipeline {
    /// An empty pipeline (every packet is dropped as `no_egress`); add stages with
    /// [`Pipeline::push`].
    pub fn new() -> Self {
        Pipeline {
            stages: Vec::new(),
            counters: Counters::default(),
            output: StageCounters::new("output"),
            trace: TraceRing::new(default_trace_capacity()),
            filter: None,
            next_seq: 0,
            local: Batch::new(crate::MAX_BATCH),
            taps: None,
        }
    }

    /// Build the pipeline `cfg` describes. `open_sink` opens the sink of each `tap:PATH`.
    pub fn build(cfg: &PipelineConfig, open_sink: &mut SinkOpener<'_>) -> Result<Self, BuildError> {
        Self::build_with(cfg, open_sink, &mut |_| None)
    }

    /// [`Pipeline::build`], with `factory` building the stages this crate does not own.
    pub fn build_with(
        cfg: &PipelineConfig,
        open_sink: &mut SinkOpener<'_>,
        factory: &mut StageFactory<'_>,
    ) -> Result<Self, BuildError> {
        let key = match &cfg.rss_key {
            Some(hex) => parse_rss_key(hex)?,
            None => DEFAULT_KEY,
        };
        let in_range = |field, value: usize, max| {
            if (1..=max).contains(&value) {
                Ok(value)
            } else {
                Err(BuildError::OutOfRange { field, value, max })
            }
        };
        let trace_capacity = in_range("trace_capacity", cfg.trace_capacity, MAX_TRACE_CAPACITY)?;
        in_range("mac_capacity", cfg.mac_capacity, MAX_MAC_CAPACITY)?;
        let mut p = Pipeline::new();
        p.trace = TraceRing::new(trace_capacity);
        p.taps = cfg.stage_taps.0.clone();
        if let Some(expr) = &cfg.trace {
            p.filter = Some(TraceFilter::parse(expr).map_err(BuildError::BadTrace)?);
        }
        let mut rss = None;
        for spec in &cfg.stages {
            let stage: Box<dyn Stage> = match spec {
                StageSpec::Parse { pass_malformed } => {
                    let t = rss.get_or_insert_with(|| Toeplitz::new(key)).clone();
                    Box::new(Parse::new(t, *pass_malformed))
                }
                StageSpec::Classify { enforce_icrc } => Box::new(Classify::new(*enforce_icrc)),
                StageSpec::L2Static(pairs) if pairs.is_empty() => {
                    let pairs: Vec<(u16, u16)> =
                        (0..cfg.ports / 2 * 2).map(|i| (i, i ^ 1)).collect();
                    Box::new(L2Fwd::with_map(&pairs))
                }
                StageSpec::L2Static(pairs) => Box::new(L2Fwd::with_map(pairs)),
                StageSpec::L2Learn => Box::new(L2Fwd::learning(
                    cfg.mac_capacity,
                    Duration::from_secs(cfg.mac_age_secs),
                )),
                StageSpec::Tap(path) => {
                    let sink = open_sink(path)
                        .map_err(|err| BuildError::Sink { path: path.clone(), err })?;
                    let tap = Tap::new(sink)
                        .map_err(|err| BuildError::Pcap { path: path.clone(), err })?;
                    Box::new(tap.named(format!("tap:{path}")))
                }
                StageSpec::VSwitch => match factory(spec) {
                    Some(stage) => stage?,
                    None => {
                        return Err(BuildError::Unsupported(
                            "the vswitch stage is built by the I/O layer (snic run), not here",
                        ));
                    }
                },
                StageSpec::P4 { .. } => match factory(spec) {
                    Some(stage) => stage?,
                    None => {
                        return Err(BuildError::Unsupported(
                            "the p4 stage is built by the I/O layer (snic run), which reads and \
                             compiles the program",
                        ));
                    }
                },
                StageSpec::Kernel { .. } => match factory(spec) {
                    Some(stage) => stage?,
                    None => {
                        return Err(BuildError::Unsupported(
                            "a kernel stage is built by the I/O layer (snic run, snic serve), \
                             which owns its results memory and its control handle",
                        ));
                    }
                },
                StageSpec::Xdp { .. } => match factory(spec) {
                    Some(stage) => stage?,
                    None => {
                        return Err(BuildError::Unsupported(
                            "an xdp stage is built by the I/O layer (snic run, snic serve), \
                             which loads and verifies the program and shares its maps",
                        ));
                    }
                },
                StageSpec::Local => match factory(spec) {
                    Some(stage) => stage?,
                    None => {
                        return Err(BuildError::Unsupported(
                            "the local stage belongs to a whole NIC (snic serve --port), which \
                             knows its RoCE addresses",
                        ));
                    }
                },
            };
            p.push(stage);
        }
        Ok(p)
    }

    /// Build from stage strings with default settings and no taps allowed to open files: a
    /// `tap:` stage makes this fail with [`BuildError::Sink`].
    pub fn from_strs(stages: &[&str]) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let cfg = PipelineConfig::from_strs(stages)?;
        let mut no_sinks = |_: &str| -> std::io::Result<Box<dyn Write + Send>> {
            Err(std::io::Error::other("no sink opener given"))
        };
        Ok(Self::build(&cfg, &mut no_sinks).map_err(|e| e.to_string())?)
    }

    /// Append a stage (a custom one: vSwitch, P4 program, ...).
    pub fn push(&mut self, stage: Box<dyn Stage>) {
        self.counters.stages.push(StageCounters::new(stage.name()));
        self.stages.push(stage);
    }

    /// The stages' names, in order.
    pub fn stage_names(&self) -> impl Iterator<Item = &str> {
        self.stages.iter().map(|s| s.name())
    }

    /// Feed the stage tap points `taps` (a live capture's) from now on (`None`: no taps).
    pub fn set_stage_taps(&mut self, taps: Option<std::sync::Arc<crate::trace::StageTaps>>) {
        self.taps = taps;
    }

    /// Trace packets matching `filter` from now on (`None`: stop tracing).
    pub fn set_trace_filter(&mut self, filter: Option<TraceFilter>) {
        self.filter = filter;
    }

    /// Run `batch` through every stage. Afterwards the batch holds only packets to transmit, each
    /// with `meta.egress = Some(port)`; every other packet was counted under one drop reason.
    pub fn process(&mut self, now: Instant, batch: &mut Batch) {
        for p in batch.iter_mut() {
            self.next_seq += 1;
            p.meta.seq = self.next_seq;
            self.counters.port_mut(p.meta.ingress).rx(p.len());
        }
        if let Some(f) = self.filter.filter(TraceFilter::is_entry_only) {
            select(&f, batch, &mut self.trace, "input");
        }
        // One relaxed load per batch; zero when no capture taps a stage.
        let tapped = self.taps.as_ref().map_or(0, |t| t.armed());
        for (i, (stage, c)) in
            self.stages.iter_mut().zip(self.counters.stages.iter_mut()).enumerate()
        {
            c.packets_in += batch.len() as u64;
            c.bytes_in += batch.iter().map(|p| p.len() as u64).sum::<u64>();
            stage.process(now, batch, &mut StageCtx::new(c, &mut self.trace));
            if stage.delivers_local() {
                take_local(batch, &mut self.local, c, &mut self.trace);
            }
            c.packets_out += batch.len() as u64;
            c.held = stage.pending() as u64;
            if tapped != 0
                && let Some(t) = &self.taps
            {
                t.after_stage(tapped, i, stage.name(), batch);
            }
            if let Some(f) = self.filter.filter(|f| !f.is_entry_only()) {
                select(&f, batch, &mut self.trace, stage.name());
            }
        }
        let c = &mut self.output;
        c.packets_in += batch.len() as u64;
        c.bytes_in += batch.iter().map(|p| p.len() as u64).sum::<u64>();
        let mut ctx = StageCtx::new(c, &mut self.trace);
        ctx.each(batch, |p, _| match p.meta.egress {
            Some(_) => Ok(()),
            None => Err(DropReason::NoEgress),
        });
        c.packets_out += batch.len() as u64;
    }

    /// Move the packets delivered to the device ([`PortId::LOCAL`]) since the last call into
    /// `out` (until it is full; the rest wait for the next call). The driver calls it after
    /// every [`Pipeline::process`].
    pub fn take_local(&mut self, out: &mut Batch) {
        self.local.drain_into(out, |_| true);
    }

    /// Packets delivered to the device and not yet taken with [`Pipeline::take_local`].
    pub fn local_pending(&self) -> usize {
        self.local.len()
    }

    /// Packets the stages hold (to be released by a later [`Pipeline::process`], possibly of an
    /// empty batch).
    pub fn pending(&self) -> usize {
        self.stages.iter().map(|s| s.pending()).sum()
    }

    /// The earliest time a stage wants to run without new packets ([`Stage::poll_timeout`];
    /// a stage holding packets it could release now answers [`Instant::ZERO`]).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.stages.iter().filter_map(|s| s.poll_timeout()).min()
    }

    /// True when a stage holds packets or has a timer due at `now`: the driver should call
    /// [`Pipeline::process`] with an empty batch.
    pub fn wants_poll(&self, now: Instant) -> bool {
        self.poll_timeout().is_some_and(|t| t <= now)
    }

    /// Count a packet the I/O layer transmitted on `port`.
    pub fn count_tx(&mut self, port: PortId, bytes: usize) {
        self.counters.port_mut(port).tx(bytes);
    }

    /// Count a packet that was to leave by `port` and did not (queue full, transmit error).
    pub fn count_tx_drop(&mut self, port: PortId, reason: DropReason) {
        self.counters.port_mut(port).tx_drops.add(reason);
    }

    /// Count a packet dropped on `port` before it entered the pipeline.
    pub fn count_rx_drop(&mut self, port: PortId, reason: DropReason) {
        self.counters.port_mut(port).rx_drops.add(reason);
    }

    /// A snapshot of the counters: one entry per stage, then `output` (the `no_egress` drops),
    /// then ports.
    pub fn counters(&self) -> Counters {
        let mut c = self.counters.clone();
        c.stages.push(self.output.clone());
        c
    }

    /// Set every counter to zero.
    pub fn reset_counters(&mut self) {
        self.counters.reset();
        self.output = StageCounters::new("output");
    }

    /// Take the trace events recorded so far, oldest first.
    pub fn drain_trace(&mut self) -> impl Iterator<Item = TraceEvent> + '_ {
        self.trace.drain()
    }

    /// Trace events lost because the ring was full.
    pub fn trace_lost(&self) -> u64 {
        self.trace.lost()
    }

    /// Flush every stage (capture writers).
    pub fn flush(&mut self) -> std::io::Result<()> {
        for s in &mut self.stages {
            s.flush()?;
        }
        Ok(())
    }
}

/// Mark the untraced packets of `batch` that `f` matches, recording where they were selected.
#[cold]
fn select(f: &TraceFilter, batch: &mut Batch, ring: &mut TraceRing, at: &str) {
    for p in batch.iter_mut() {
        if !p.meta.trace && f.matches(p) {
            p.meta.trace = true;
            ring.push(TraceEvent {
                seq: p.meta.seq,
                stage: at.to_owned(),
                what: TraceWhat::Selected { stack: p.meta.stack },
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `control_input` fuzz target's review: a huge `trace_capacity` or
    /// `mac_capacity` in a config panicked (capacity overflow) or exhausted memory while the
    /// pipeline was built; it is now a typed error naming the setting.
    #[test]
    fn oversized_capacities_are_a_build_error_not_a_panic() {
        let mut cfg = PipelineConfig::from_strs(&["l2fwd:learn"]).unwrap();
        cfg.trace_capacity = usize::MAX / 2;
        let err = Pipeline::build(&cfg, &mut |_: &str| unreachable!("no taps")).unwrap_err();
        assert!(matches!(err, BuildError::OutOfRange { field: "trace_capacity", .. }), "{err}");
        cfg.trace_capacity = 1024;
        cfg.mac_capacity = usize::MAX / 2;
        let err = Pipeline::build(&cfg, &mut |_: &str| unreachable!("no taps")).unwrap_err();
        assert!(matches!(err, BuildError::OutOfRange { field: "mac_capacity", .. }), "{err}");
        cfg.mac_capacity = 0;
        assert!(Pipeline::build(&cfg, &mut |_: &str| unreachable!("no taps")).is_err());
        cfg.mac_capacity = MAX_MAC_CAPACITY;
        cfg.trace_capacity = MAX_TRACE_CAPACITY;
        assert!(Pipeline::build(&cfg, &mut |_: &str| unreachable!("no taps")).is_ok());
    }

    #[test]
    fn specs_round_trip() {
        for s in [
            "parse",
            "parse:pass",
            "classify",
            "classify:mark",
            "l2fwd",
            "l2fwd:0=1,1=0,2=3",
            "l2fwd:learn",
            "tap:/tmp/x.pcap",
            "p4:a.p4",
            "p4:dir/a.p4,entries=e.txt,I=inc,I=/usr/share/p4",
            "kernel:telemetry",
            "kernel:crypt,mode=encrypt,key=00ff",
            "kernel:telemetry,capacity=16,report=1",
            "xdp:prog.o",
            "xdp:dir/prog.o,section=xdp/fw",
            "xdp:prog.o,engine=jit",
            "xdp:prog.o,section=xdp,engine=jit",
            "xdp:prog.o,engine=interp",
        ] {
            let spec: StageSpec = s.parse().unwrap();
            assert_eq!(spec.to_string(), s);
        }
        assert_eq!("l2fwd:0=1".parse::<StageSpec>(), Ok(StageSpec::L2Static(vec![(0, 1)])));
        assert_eq!(
            "kernel:crypt,mode=decrypt,mtu=1500".parse::<StageSpec>(),
            Ok(StageSpec::Kernel {
                name: "crypt".into(),
                args: vec![("mode".into(), "decrypt".into()), ("mtu".into(), "1500".into())],
            })
        );
        // The issue's shorthand: a bare second part is the section.
        assert_eq!(
            "xdp:fw.o,xdp/fw,engine=interp".parse::<StageSpec>(),
            Ok(StageSpec::Xdp {
                program: "fw.o".into(),
                section: Some("xdp/fw".into()),
                jit: Some(false)
            })
        );
        assert_eq!(
            "parse:drop".parse::<StageSpec>(),
            Ok(StageSpec::Parse { pass_malformed: false })
        );
    }

    #[test]
    fn bad_specs_say_why() {
        for (s, why) in [
            ("frob", "unknown stage"),
            ("tap", "needs a path"),
            ("tap:", "needs a path"),
            ("l2fwd:0-1", "IN=OUT"),
            ("l2fwd:0=x", "bad port"),
            ("l2fwd:0=65535", "reserved"),
            ("parse:maybe", "unknown option"),
            ("p4:", "needs a program"),
            ("p4:entries=x", "needs a program"),
            ("p4:a.p4,frob=1", "options are"),
            ("p4:a.p4,entries=a,entries=b", "once"),
            ("kernel", "needs a kernel name"),
            ("kernel:", "needs a kernel name"),
            ("kernel:mode=x", "needs a kernel name"),
            ("kernel:crypt,mode", "KEY=VALUE"),
            ("kernel:crypt,=1", "KEY=VALUE"),
            ("kernel:crypt,mode=a,mode=b", "twice"),
            ("xdp", "needs an object file"),
            ("xdp:", "needs an object file"),
            ("xdp:section=x", "needs an object file"),
            ("xdp:a.o,xdp,section=y", "twice"),
            ("xdp:a.o,engine=fast", "interp or jit"),
            ("xdp:a.o,engine=jit,engine=jit", "twice"),
            ("xdp:a.o,frob=1", "options"),
            ("xdp:a.o,", "empty option"),
        ] {
            let e = s.parse::<StageSpec>().unwrap_err();
            assert!(e.0.contains(why), "{s}: {e}");
        }
    }

    #[test]
    fn config_from_toml() {
        let cfg: PipelineConfig = toml::from_str(
            r#"
            stages = ["parse", "classify:mark", "l2fwd:learn", "tap:/tmp/t.pcap"]
            ports = 4
            trace = "class rdma"
            "#,
        )
        .unwrap();
        assert_eq!(
            cfg.stages,
            vec![
                StageSpec::Parse { pass_malformed: false },
                StageSpec::Classify { enforce_icrc: false },
                StageSpec::L2Learn,
                StageSpec::Tap("/tmp/t.pcap".into())
            ]
        );
        assert_eq!(cfg.ports, 4);
        assert_eq!(cfg.mac_capacity, l2fwd::DEFAULT_MAC_CAPACITY);
        assert!(toml::from_str::<PipelineConfig>(r#"stages = ["nope"]"#).is_err());
        assert!(toml::from_str::<PipelineConfig>("stages = []\nfrob = 1").is_err());
    }

    #[test]
    fn build_opens_taps_through_the_opener_and_checks_settings() {
        let mut cfg = PipelineConfig::from_strs(&["parse", "tap:a.pcap", "l2fwd"]).unwrap();
        let mut opened = Vec::new();
        let p = Pipeline::build(&cfg, &mut |path: &str| {
            opened.push(path.to_owned());
            Ok(Box::new(std::io::sink()) as Box<dyn Write + Send>)
        })
        .unwrap();
        assert_eq!(opened, vec!["a.pcap"]);
        assert_eq!(p.stage_names().collect::<Vec<_>>(), vec!["parse", "tap:a.pcap", "l2fwd"]);
        assert!(Pipeline::from_strs(&["tap:x"]).is_err());
        cfg.rss_key = Some("00".into());
        assert!(matches!(
            Pipeline::build(&cfg, &mut |_: &str| Ok(
                Box::new(std::io::sink()) as Box<dyn Write + Send>
            )),
            Err(BuildError::BadRssKey(_))
        ));
        cfg.rss_key = None;
        cfg.trace = Some("udp sideways 1".into());
        assert!(matches!(
            Pipeline::build(&cfg, &mut |_: &str| Ok(
                Box::new(std::io::sink()) as Box<dyn Write + Send>
            )),
            Err(BuildError::BadTrace(_))
        ));
    }

    /// Delivers even-first-byte packets to the device, passes the others to port 1.
    struct Even;
    impl Stage for Even {
        fn name(&self) -> &str {
            "even"
        }
        fn process(&mut self, _: Instant, batch: &mut Batch, _: &mut StageCtx<'_>) {
            for p in batch.iter_mut() {
                let local = p.data()[0] % 2 == 0;
                p.meta.egress = Some(if local { PortId::LOCAL } else { PortId(1) });
            }
        }
        fn delivers_local(&self) -> bool {
            true
        }
    }

    /// Counts what it sees in `errors` (a stage after the local one must not see local packets).
    struct Count;
    impl Stage for Count {
        fn name(&self) -> &str {
            "count"
        }
        fn process(&mut self, _: Instant, batch: &mut Batch, ctx: &mut StageCtx<'_>) {
            for p in batch.iter() {
                assert!(!p.meta.egress.is_some_and(PortId::is_local), "a local packet went on");
                ctx.error();
            }
        }
    }

    #[test]
    fn local_packets_leave_after_their_stage_and_are_counted_there() {
        let mut p = Pipeline::new();
        p.push(Box::new(Even));
        p.push(Box::new(Count));
        let mut b = Batch::new(8);
        for i in 0..6u8 {
            b.push_frame(&[i]);
        }
        p.process(Instant::ZERO, &mut b);
        assert_eq!(b.iter().map(|p| p.data()[0]).collect::<Vec<_>>(), vec![1, 3, 5]);
        assert_eq!(p.local_pending(), 3);
        let mut local = Batch::new(8);
        p.take_local(&mut local);
        assert_eq!(local.iter().map(|p| p.data()[0]).collect::<Vec<_>>(), vec![0, 2, 4]);
        assert_eq!(p.local_pending(), 0);
        let c = p.counters();
        let even = &c.stages[0];
        assert_eq!((even.packets_in, even.packets_out, even.local), (6, 3, 3));
        assert_eq!((c.stages[1].packets_in, c.stages[1].errors), (3, 3));
        // The sequence numbers were given before the local stage.
        assert_eq!(local.iter().map(|p| p.meta.seq).collect::<Vec<_>>(), vec![1, 3, 5]);
    }

    #[test]
    fn local_packets_the_driver_never_takes_are_counted_drops_not_lost() {
        let mut p = Pipeline::new();
        p.push(Box::new(Even));
        let mut fed = 0u64;
        // MAX_BATCH local packets fill the queue; the next ones are dropped as local_full.
        for _ in 0..3 {
            let mut b = Batch::new(crate::MAX_BATCH);
            for _ in 0..crate::MAX_BATCH / 2 + 10 {
                b.push_frame(&[0]);
                fed += 1;
            }
            p.process(Instant::ZERO, &mut b);
            assert!(b.is_empty());
        }
        let c = p.counters();
        let even = &c.stages[0];
        assert_eq!(even.local, crate::MAX_BATCH as u64);
        assert_eq!(even.drops.get(DropReason::LocalFull), fed - crate::MAX_BATCH as u64);
        assert_eq!(even.packets_in, even.packets_out + even.local + even.drops.total());
    }

    #[test]
    fn rss_key_parses() {
        let hex =
            "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa";
        assert_eq!(parse_rss_key(hex).unwrap(), DEFAULT_KEY);
        assert!(parse_rss_key(&hex.replace('6', "g")).is_err());
    }

    #[test]
    fn pipeline_is_send() {
        fn is_send<T: Send>() {}
        is_send::<Pipeline>();
    }

    #[test]
    fn empty_pipeline_drops_everything_as_no_egress() {
        let mut p = Pipeline::new();
        let mut b = Batch::new(4);
        b.push_frame(&[0; 10]).unwrap();
        b.push_frame(&[0; 10]).unwrap().meta.egress = Some(PortId(3));
        p.process(Instant::ZERO, &mut b);
        assert_eq!(b.len(), 1);
        let c = p.counters();
        let out = c.stage("output").unwrap();
        assert_eq!((out.packets_in, out.packets_out), (2, 1));
        assert_eq!(out.drops.get(DropReason::NoEgress), 1);
        assert_eq!(c.port(PortId(0)).unwrap().rx_packets, 2);
        assert_eq!(b.packets()[0].meta.seq, 2);
    }
}
