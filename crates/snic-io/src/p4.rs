//! The `p4` stage: a P4-16 v1model program (`snic-p4`) run on every packet, and the control
//! plane that changes its tables while the run goes on.
//!
//! The stage lives here, not in `snic-pipeline` or `snic-p4`, because it needs both (the
//! [`Stage`] trait and the [`Switch`]) and because the program and its entries file are files:
//! this layer reads and compiles them once ([`P4Program::load`]) and gives each worker its own
//! copy of the switch. Tables, counters and registers are then per worker; the control plane
//! ([`P4Control`]) changes every worker's switch at once and reads counters as their sum.
//!
//! # Per packet
//!
//! The packet's ingress port is the P4 ingress port; [`Switch::process`] runs it to completion
//! (clones, multicast replicas, resubmits and recirculations included). The first packet out
//! becomes this packet: its bytes and its egress port (a changed frame loses what the parse
//! stage found, so a later stage walks it again). Every further packet out (a replica, a
//! clone) is a new packet appended to the batch and counted in the stage's `created`, so the
//! stage's invariant reads `in + created == out + drops`; one that finds the batch full is a
//! `pipeline_full` drop. A packet with no output is dropped as `p4_parser_error` when its
//! parser ended in an error (v1model goes on into ingress after a parser error, so the error
//! alone drops nothing), else as `p4_drop` (`mark_to_drop`, port 511, an empty multicast
//! group). A traced packet carries the switch's own trace lines (parser states, tables,
//! actions, the egress decision) as [`TraceWhat::Detail`] events.
//!
//! A panic in the executor (a bug) is caught: the packet is a `p4_fault` drop and the switch's
//! scratch state is restored ([`Switch::recover`]), so one bad packet never takes a worker
//! down.
//!
//! # The controller's packets and digests ([`P4Io`])
//!
//! With a CPU port set ([`P4Io::set_cpu_port`], by the P4Runtime server), a packet the program
//! sends to that port goes to the controller instead of a snic port: it leaves the batch and is
//! counted in the stage's `local` (delivered to the device itself), or is a `p4_cpu_full` drop
//! when no controller listens or its queue is full. Packets from the controller
//! ([`P4Io::packet_out`]) enter the program on the CPU port at the stage's next call (the stage
//! asks to be polled while any wait); what they produce joins the batch as `created`.
//! `digest` messages go to the controller the same way; without one listening, each counts
//! as one of the stage's `errors` (and shows in the trace), none is kept.
//!
//! The executor allocates per packet (it copies the frame into its own state): the P4 stage is
//! the documented exception to "no allocation on the fast path", as the vSwitch's slow path is.
//!
//! # Control
//!
//! Each worker's switch sits behind its own mutex, taken by the stage once per batch. A control
//! command takes every worker's mutex, in worker order, and applies the command to all of them
//! with [`snic_p4::runtime::apply_all`]: between two batches of every worker, all or none
//! (the first worker decides; a refused command changes nothing anywhere).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use snic_p4::builtin;
use snic_p4::cli::{self, Command};
use snic_p4::pre::{IncludeKind, LoadError, Loaded, Loader, Options};
use snic_p4::runner::{self, Built};
use snic_p4::runtime::{self, ApplyError, FileError};
use snic_p4::span::SourceMap;
use snic_p4::v1model::Switch;
use snic_pipeline::meta::Metadata;
use snic_pipeline::trace::TraceWhat;
use snic_pipeline::{Batch, DropReason, PortId, Stage, StageCtx};
use snic_time::Instant;

/// Resolves includes on disk: `<name>` in the built-ins then the `-I` directories, `"name"` in
/// the including file's folder first.
#[derive(Debug, Clone, Default)]
pub struct DiskLoader {
    /// The `-I` directories in order.
    pub dirs: Vec<PathBuf>,
}

impl Loader for DiskLoader {
    fn load(&mut self, name: &str, kind: IncludeKind, from: &str) -> Result<Loaded, LoadError> {
        let mut candidates = Vec::new();
        if kind == IncludeKind::Quote {
            let dir = Path::new(from).parent().map(Path::to_path_buf).unwrap_or_default();
            candidates.push(dir.join(name));
        }
        if let Some(text) = builtin::lookup(name) {
            let local = candidates.first().is_some_and(|c| c.exists());
            if kind == IncludeKind::System || !local {
                return Ok(Loaded { name: format!("<{name}>"), text: text.to_string() });
            }
        }
        candidates.extend(self.dirs.iter().map(|d| d.join(name)));
        for c in candidates {
            match std::fs::read(&c) {
                Ok(bytes) => {
                    let text = String::from_utf8(bytes)
                        .map_err(|_| LoadError::Failed(format!("{} is not UTF-8", c.display())))?;
                    return Ok(Loaded { name: c.display().to_string(), text });
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(LoadError::Failed(format!("{}: {e}", c.display()))),
            }
        }
        Err(LoadError::NotFound)
    }
}

/// Why a program could not be loaded: every message, rendered (`file:line:col` with a caret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct P4Error(pub String);

impl core::fmt::Display for P4Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for P4Error {}

/// Compile the program at `path` (includes from the built-ins and `include`; `defines` as
/// `-D NAME=VALUE`). `Err` holds the rendered diagnostics; `Ok` the program, its source map
/// (to render the warnings) and the warnings.
pub fn compile(
    path: &Path,
    include: &[PathBuf],
    defines: Vec<(String, String)>,
) -> Result<(Built, SourceMap), P4Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| P4Error(format!("error: {}: {e}", path.display())))?;
    compile_source(&path.display().to_string(), text, include, defines)
}

/// The program a `p4` stage without one runs until a controller pushes one: it drops every
/// packet (`p4_drop`).
pub const NO_PROGRAM: &str = "#include <core.p4>
#include <v1model.p4>
struct no_headers_t {}
struct no_meta_t {}
parser NoParser(packet_in p, out no_headers_t h, inout no_meta_t m,
                inout standard_metadata_t s) { state start { transition accept; } }
control NoChecksum(inout no_headers_t h, inout no_meta_t m) { apply {} }
control NoIngress(inout no_headers_t h, inout no_meta_t m, inout standard_metadata_t s) {
    apply { mark_to_drop(s); }
}
control NoEgress(inout no_headers_t h, inout no_meta_t m, inout standard_metadata_t s) {
    apply {}
}
control NoDeparser(packet_out p, in no_headers_t h) { apply {} }
V1Switch(NoParser(), NoChecksum(), NoIngress(), NoEgress(), NoChecksum(), NoDeparser()) main;
";

/// Compile program text `text` named `name` (includes from the built-ins, the folder of
/// `name`, and `include`).
pub fn compile_source(
    name: &str,
    text: String,
    include: &[PathBuf],
    defines: Vec<(String, String)>,
) -> Result<(Built, SourceMap), P4Error> {
    let mut map = SourceMap::new();
    let main = map.add(name.to_string(), text);
    let mut loader = DiskLoader { dirs: include.to_vec() };
    let o = Options { defines, ..Options::default() };
    match runner::build(&mut map, main, &mut loader, &o) {
        Ok(b) => Ok((b, map)),
        Err(d) => Err(P4Error(d.iter().map(|x| x.render(&map)).collect::<Vec<_>>().join("\n"))),
    }
}

/// A loaded program: one switch per worker, each behind its own mutex.
#[derive(Debug, Clone)]
pub struct P4Program {
    switches: Arc<Vec<Arc<Mutex<Switch>>>>,
    io: Arc<P4Io>,
    warnings: Vec<String>,
    entries_output: String,
}

impl P4Program {
    /// Compile `program`, apply the `entries` file (if any) and make `workers` switches.
    pub fn load(
        program: &Path,
        entries: Option<&Path>,
        include: &[PathBuf],
        workers: usize,
    ) -> Result<P4Program, P4Error> {
        let (built, map) = if program.as_os_str().is_empty() {
            compile_source("<no program>", NO_PROGRAM.to_string(), include, Vec::new())?
        } else {
            compile(program, include, Vec::new())?
        };
        let warnings = built.warnings.iter().map(|w| w.render(&map)).collect();
        let mut sw = Switch::new(built.program)
            .map_err(|e| P4Error(format!("{}: {e}", program.display())))?;
        let mut entries_output = String::new();
        if let Some(path) = entries {
            let text = std::fs::read_to_string(path)
                .map_err(|e| P4Error(format!("{}: {e}", path.display())))?;
            entries_output = runtime::apply_file(&mut sw, &text)
                .map_err(|e: FileError| P4Error(format!("{}: {e}", path.display())))?;
        }
        let switches =
            (0..workers.max(1)).map(|_| Arc::new(Mutex::new(sw.clone()))).collect::<Vec<_>>();
        Ok(P4Program {
            switches: Arc::new(switches),
            io: Arc::new(P4Io::default()),
            warnings,
            entries_output,
        })
    }

    /// Load the program of the `p4` stage among `stages`, if there is one (at most one: a
    /// second is an error), with a switch per worker.
    pub fn from_stages(
        stages: &[snic_pipeline::StageSpec],
        workers: usize,
    ) -> Result<Option<P4Program>, P4Error> {
        let mut specs = stages.iter().filter_map(|s| match s {
            snic_pipeline::StageSpec::P4 { program, entries, include } => {
                Some((program, entries, include))
            }
            _ => None,
        });
        let Some((program, entries, include)) = specs.next() else { return Ok(None) };
        if specs.next().is_some() {
            return Err(P4Error("one p4 stage per run".into()));
        }
        let include: Vec<PathBuf> = include.iter().map(Into::into).collect();
        P4Program::load(Path::new(program), entries.as_deref().map(Path::new), &include, workers)
            .map(Some)
    }

    /// What the compiler warned about, rendered.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// What the entries file's commands printed.
    pub fn entries_output(&self) -> &str {
        &self.entries_output
    }

    /// The stage of worker `k` (`None` past the number of workers).
    pub fn stage(&self, k: usize) -> Option<P4Stage> {
        self.switches.get(k).map(|sw| P4Stage::new(Arc::clone(sw), Arc::clone(&self.io)))
    }

    /// The control plane of every worker's switch.
    pub fn control(&self) -> P4Control {
        P4Control { switches: Arc::clone(&self.switches), io: Arc::clone(&self.io) }
    }
}

fn lock(m: &Mutex<Switch>) -> MutexGuard<'_, Switch> {
    // A worker that panicked mid-batch leaves a consistent switch (every change is made whole
    // before it returns); take it anyway rather than stop the control plane.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Applies `simple_switch_CLI` commands to every worker's switch at once (see the module doc).
#[derive(Debug, Clone)]
pub struct P4Control {
    switches: Arc<Vec<Arc<Mutex<Switch>>>>,
    io: Arc<P4Io>,
}

impl P4Control {
    /// Run `f` with every worker's switch locked, in worker order: no worker runs a batch
    /// while `f` runs, so packets see the switches as they were before or after `f`.
    pub fn with_all<T>(&self, f: impl FnOnce(&mut [&mut Switch]) -> T) -> T {
        let mut guards: Vec<MutexGuard<'_, Switch>> =
            self.switches.iter().map(|m| lock(m)).collect();
        let mut refs: Vec<&mut Switch> = guards.iter_mut().map(|g| &mut **g).collect();
        f(&mut refs)
    }

    /// Apply one command to every worker; returns what `simple_switch_CLI` prints.
    pub fn apply(&self, cmd: &Command) -> Result<String, ApplyError> {
        self.with_all(|sws| runtime::apply_all(sws, cmd))
    }

    /// Parse and apply the commands of `text` (one a line, `#` comments) in order, stopping at
    /// the first error (a line that does not parse stops it before anything is applied).
    /// The error message names the line.
    pub fn apply_text(&self, text: &str) -> Result<String, String> {
        let cmds = cli::parse_file(text).map_err(|e| e.to_string())?;
        if cmds.is_empty() {
            return Err("no command given".into());
        }
        let many = cmds.len() > 1;
        let mut out = String::new();
        for (line, cmd) in &cmds {
            match self.apply(cmd) {
                Ok(s) => out.push_str(&s),
                Err(e) if many => return Err(format!("line {line}: {e}\n{out}")),
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(out)
    }

    /// Number of workers (switches).
    pub fn workers(&self) -> usize {
        self.switches.len()
    }

    /// A copy of the first worker's switch (tables, registers, counters as they are now),
    /// taken under that worker's lock only: a long read works on the copy while every worker
    /// goes on. Counters of other workers are not summed in ([`P4Control::snapshots`]).
    pub fn snapshot(&self) -> Option<Switch> {
        self.switches.first().map(|m| lock(m).clone())
    }

    /// A copy of every worker's switch, each taken under its own lock (counters are per
    /// worker: a reader sums them).
    pub fn snapshots(&self) -> Vec<Switch> {
        self.switches.iter().map(|m| lock(m).clone()).collect()
    }

    /// Replace every worker's switch by a copy of `sw` (a new program), between two batches
    /// of each worker: no packet of another stage is lost, and every packet runs wholly on
    /// the old program or wholly on the new one.
    pub fn replace(&self, sw: &Switch) {
        self.with_all(|sws| {
            for s in sws.iter_mut() {
                **s = sw.clone();
            }
        });
    }

    /// The controller's packet and digest queues.
    pub fn io(&self) -> &Arc<P4Io> {
        &self.io
    }
}

/// Most packets (or digests) waiting for the controller; more are dropped (or counted).
pub const IO_QUEUE: usize = 4096;

/// What the controller sends and receives through the stage (see the module doc).
pub struct P4Io {
    /// The CPU port, `u64::MAX` for none.
    cpu_port: AtomicU64,
    /// Packet-outs waiting (mirrors `queues.packet_out.len()`, read without the lock).
    out_pending: AtomicUsize,
    queues: Mutex<IoQueues>,
    waker: Mutex<Option<Waker>>,
    /// The pipeline time the stage last saw, and when (for [`P4Io::now_ns`]).
    clock: Mutex<Option<(u64, std::time::Instant)>>,
}

/// Called (from a worker) when something was queued for the controller.
pub type Waker = Arc<dyn Fn() + Send + Sync>;

#[derive(Debug, Default)]
struct IoQueues {
    packet_out: VecDeque<Vec<u8>>,
    packet_in: VecDeque<(u32, Vec<u8>)>,
    digests: VecDeque<(u32, Vec<u128>)>,
    listening: bool,
    dropped_in: u64,
}

impl Default for P4Io {
    /// No CPU port (a derived default would make port 0 the CPU port).
    fn default() -> P4Io {
        P4Io {
            cpu_port: AtomicU64::new(u64::MAX),
            out_pending: AtomicUsize::new(0),
            queues: Mutex::new(IoQueues::default()),
            waker: Mutex::new(None),
            clock: Mutex::new(None),
        }
    }
}

impl core::fmt::Debug for P4Io {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("P4Io")
            .field("cpu_port", &self.cpu_port())
            .field("out_pending", &self.out_pending.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl P4Io {
    fn q(&self) -> MutexGuard<'_, IoQueues> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The CPU port, if one is set.
    pub fn cpu_port(&self) -> Option<u32> {
        u32::try_from(self.cpu_port.load(Ordering::Relaxed)).ok()
    }

    /// Set (or clear) the CPU port.
    pub fn set_cpu_port(&self, port: Option<u32>) {
        self.cpu_port.store(port.map_or(u64::MAX, u64::from), Ordering::Relaxed);
    }

    /// A controller starts (`true`) or stops listening; `waker` is called when something
    /// is queued for it. Stopping empties the queues.
    pub fn set_listener(&self, waker: Option<Waker>) {
        let mut q = self.q();
        q.listening = waker.is_some();
        if !q.listening {
            q.packet_in.clear();
            q.digests.clear();
        }
        *self.waker.lock().unwrap_or_else(|p| p.into_inner()) = waker;
    }

    fn wake(&self) {
        let w = self.waker.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(w) = w {
            w();
        }
    }

    /// Queue a packet from the controller (its `packet_out` header already built). `false`
    /// when the queue is full.
    pub fn packet_out(&self, frame: Vec<u8>) -> bool {
        let mut q = self.q();
        if q.packet_out.len() >= IO_QUEUE {
            return false;
        }
        q.packet_out.push_back(frame);
        self.out_pending.store(q.packet_out.len(), Ordering::Release);
        true
    }

    fn take_packet_outs(&self) -> VecDeque<Vec<u8>> {
        let mut q = self.q();
        self.out_pending.store(0, Ordering::Release);
        core::mem::take(&mut q.packet_out)
    }

    /// Hand a packet the program sent to the CPU port to the controller. `false`: nobody
    /// listens or the queue is full (the caller drops it).
    fn packet_in(&self, ingress: u32, frame: Vec<u8>) -> bool {
        let mut q = self.q();
        if !q.listening || q.packet_in.len() >= IO_QUEUE {
            q.dropped_in += 1;
            return false;
        }
        q.packet_in.push_back((ingress, frame));
        drop(q);
        self.wake();
        true
    }

    /// Hand a digest to the controller; `Err` gives it back when nobody listens or the queue
    /// is full.
    fn digest(&self, d: u32, vals: Vec<u128>) -> Result<(), Vec<u128>> {
        let mut q = self.q();
        if !q.listening || q.digests.len() >= IO_QUEUE {
            return Err(vals);
        }
        q.digests.push_back((d, vals));
        drop(q);
        self.wake();
        Ok(())
    }

    /// Take the packets for the controller: (the P4 ingress port of the packet that made
    /// each, its bytes with the `packet_in` header).
    pub fn take_packet_ins(&self) -> Vec<(u32, Vec<u8>)> {
        self.q().packet_in.drain(..).collect()
    }

    /// Take the digests for the controller: (digest type index, values).
    pub fn take_digests(&self) -> Vec<(u32, Vec<u128>)> {
        self.q().digests.drain(..).collect()
    }

    /// The stage saw pipeline time `now_ns`.
    fn saw(&self, now_ns: u64) {
        *self.clock.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((now_ns, std::time::Instant::now()));
    }

    /// The pipeline's time now: the last time the stage saw, moved on by the wall time since
    /// (0 plus the wall time since the first call when the stage never ran).
    pub fn now_ns(&self) -> u64 {
        let mut c = self.clock.lock().unwrap_or_else(|p| p.into_inner());
        let (t, at) = *c.get_or_insert((0, std::time::Instant::now()));
        t.saturating_add(at.elapsed().as_nanos() as u64)
    }

    /// Packets for the controller dropped so far (nobody listening, or a full queue).
    pub fn packet_ins_dropped(&self) -> u64 {
        self.q().dropped_in
    }
}

/// One worker's P4 stage (see the module doc).
#[derive(Debug)]
pub struct P4Stage {
    sw: Arc<Mutex<Switch>>,
    io: Arc<P4Io>,
    out: Vec<(u32, Vec<u8>)>,
    verdicts: Vec<Verdict>,
    extra: Vec<(Metadata, PortId, Vec<u8>)>,
}

/// What became of one packet of the batch.
#[derive(Debug, Clone, Copy)]
enum Verdict {
    Keep,
    Drop(DropReason),
    /// Taken by the controller (counted in `local`).
    Cpu,
}

impl P4Stage {
    fn new(sw: Arc<Mutex<Switch>>, io: Arc<P4Io>) -> Self {
        P4Stage { sw, io, out: Vec::new(), verdicts: Vec::new(), extra: Vec::new() }
    }
}

/// A P4 egress port as a snic port; the reserved numbers (flood, local) are not ports.
fn port(p: u32) -> Option<PortId> {
    u16::try_from(p).ok().filter(|p| *p < PortId::LOCAL.0).map(PortId)
}

/// Run the switch on one packet, catching a panic of the executor (a bug): `false` then, with
/// the switch's scratch state restored and `out` empty.
fn run_one(
    sw: &mut Switch,
    ingress: u32,
    data: &[u8],
    now_ns: u64,
    out: &mut Vec<(u32, Vec<u8>)>,
) -> bool {
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        sw.process(ingress, data, now_ns, out)
    }));
    if ran.is_err() {
        sw.recover();
        sw.set_trace(false);
        out.clear();
        return false;
    }
    true
}

/// Hand the program's digests to the controller; returns the ones nobody took (the caller
/// counts each as an error, never keeps it, so a program that sends them cannot grow memory).
fn digests_to_controller(sw: &mut Switch, io: &P4Io) -> Vec<(u32, Vec<u128>)> {
    let mut refused = Vec::new();
    for (d, vals) in sw.take_digests() {
        if let Err(vals) = io.digest(d, vals) {
            refused.push((d, vals));
        }
    }
    refused
}

/// A packet the program made beside the one it was handed (a replica, a clone, what a
/// packet-out became), counted in `created`: to the controller when it goes to the CPU port
/// (`local`, or a `p4_cpu_full` drop), to a snic port (queued in `extra` with the metadata
/// `meta` makes), or a `p4_drop` for a port that is not one.
fn made(
    io: &P4Io,
    cpu: Option<u32>,
    ingress: u32,
    (q, bytes): (u32, Vec<u8>),
    meta: impl FnOnce() -> Metadata,
    extra: &mut Vec<(Metadata, PortId, Vec<u8>)>,
    ctx: &mut StageCtx<'_>,
) {
    ctx.counters.created += 1;
    if Some(q) == cpu {
        if io.packet_in(ingress, bytes) {
            ctx.counters.local += 1;
        } else {
            ctx.counters.drops.add(DropReason::P4CpuFull);
        }
        return;
    }
    match port(q) {
        Some(q) => extra.push((meta(), q, bytes)),
        None => ctx.counters.drops.add(DropReason::P4Drop),
    }
}

impl Stage for P4Stage {
    fn name(&self) -> &str {
        "p4"
    }

    fn poll_timeout(&self) -> Option<Instant> {
        (self.io.out_pending.load(Ordering::Acquire) > 0).then_some(Instant::ZERO)
    }

    fn process(&mut self, now: Instant, batch: &mut Batch, ctx: &mut StageCtx<'_>) {
        let P4Stage { sw, io, out, verdicts, extra } = self;
        let mut sw = lock(sw);
        let now_ns = now.as_nanos();
        io.saw(now_ns);
        let cpu = io.cpu_port();
        verdicts.clear();
        extra.clear();
        for p in batch.iter_mut() {
            out.clear();
            let traced = p.meta.trace;
            if traced {
                sw.set_trace(true);
            }
            let ingress = u32::from(p.meta.ingress.0);
            if !run_one(&mut sw, ingress, p.data(), now_ns, out) {
                // A bug in the executor must not take the worker down: drop the packet, count
                // it; the switch's tables are untouched.
                verdicts.push(Verdict::Drop(DropReason::P4Fault));
                continue;
            }
            if traced {
                for line in sw.take_trace() {
                    ctx.trace(p, || TraceWhat::Detail(line));
                }
                sw.set_trace(false);
            }
            // Digests go to the controller; without one, each is counted (and traced).
            for (d, vals) in digests_to_controller(&mut sw, io) {
                ctx.error();
                if traced {
                    ctx.trace(p, || {
                        TraceWhat::Detail(format!("digest {d} {vals:?} (no receiver)"))
                    });
                }
            }
            let mut outs = out.drain(..);
            let Some((first_port, first)) = outs.next() else {
                let reason = if sw.outcome().parser_error.is_some() {
                    DropReason::P4ParserError
                } else {
                    DropReason::P4Drop
                };
                verdicts.push(Verdict::Drop(reason));
                continue;
            };
            let changed = first != p.data();
            for o in outs {
                let meta =
                    || Metadata { stack: Default::default(), parsed: false, ..p.meta.clone() };
                made(io, cpu, ingress, o, meta, extra, ctx);
            }
            if Some(first_port) == cpu {
                let v = if io.packet_in(ingress, first) {
                    Verdict::Cpu
                } else {
                    Verdict::Drop(DropReason::P4CpuFull)
                };
                verdicts.push(v);
                continue;
            }
            let Some(first_port) = port(first_port) else {
                verdicts.push(Verdict::Drop(DropReason::P4Drop));
                continue;
            };
            if changed {
                p.set_frame(&first);
                p.meta.stack = Default::default();
                p.meta.parsed = false;
            }
            p.meta.egress = Some(first_port);
            ctx.trace(p, || TraceWhat::Forwarded { port: first_port, how: "p4" });
            verdicts.push(Verdict::Keep);
        }
        // Packets from the controller enter on the CPU port; what they make is new.
        if let Some(cpu) = cpu
            && io.out_pending.load(Ordering::Acquire) > 0
        {
            for frame in io.take_packet_outs() {
                out.clear();
                if !run_one(&mut sw, cpu, &frame, now_ns, out) {
                    ctx.error();
                    continue;
                }
                for _ in digests_to_controller(&mut sw, io) {
                    ctx.error();
                }
                for o in out.drain(..) {
                    let meta = || Metadata {
                        ingress: port(cpu).unwrap_or_default(),
                        ..Metadata::default()
                    };
                    made(io, Some(cpu), cpu, o, meta, extra, ctx);
                }
            }
        }
        drop(sw);
        let mut i = 0;
        batch.retain(|p| {
            let v = verdicts.get(i).copied().unwrap_or(Verdict::Keep);
            i += 1;
            match v {
                Verdict::Keep => true,
                Verdict::Drop(r) => ctx.drop_packet(p, r),
                Verdict::Cpu => {
                    ctx.counters.local += 1;
                    false
                }
            }
        });
        for (meta, q, bytes) in extra.drain(..) {
            // Replicas and clones were counted in `created` when made; packet-out results too.
            match batch.push_slot() {
                Some(slot) => {
                    slot.set_frame(&bytes);
                    slot.meta = meta;
                    slot.meta.egress = Some(q);
                    ctx.trace(slot, || TraceWhat::Forwarded { port: q, how: "p4 copy" });
                }
                None => {
                    ctx.counters.drops.add(DropReason::PipelineFull);
                }
            }
        }
    }
}
