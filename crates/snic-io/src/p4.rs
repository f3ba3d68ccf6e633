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
//! `digest` messages have no receiver yet: each counts as one of the stage's `errors` (and
//! shows in the trace), none is kept.
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

use std::path::{Path, PathBuf};
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
    let mut map = SourceMap::new();
    let main = map.add(path.display().to_string(), text);
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
        let (built, map) = compile(program, include, Vec::new())?;
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
        Ok(P4Program { switches: Arc::new(switches), warnings, entries_output })
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
        self.switches.get(k).map(|sw| P4Stage::new(Arc::clone(sw)))
    }

    /// The control plane of every worker's switch.
    pub fn control(&self) -> P4Control {
        P4Control { switches: Arc::clone(&self.switches) }
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
}

impl P4Control {
    /// Run `f` with every worker's switch locked, in worker order.
    fn with_all<T>(&self, f: impl FnOnce(&mut [&mut Switch]) -> T) -> T {
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
}

/// One worker's P4 stage (see the module doc).
#[derive(Debug)]
pub struct P4Stage {
    sw: Arc<Mutex<Switch>>,
    out: Vec<(u32, Vec<u8>)>,
    verdicts: Vec<Option<DropReason>>,
    extra: Vec<(Metadata, PortId, Vec<u8>)>,
}

impl P4Stage {
    fn new(sw: Arc<Mutex<Switch>>) -> Self {
        P4Stage { sw, out: Vec::new(), verdicts: Vec::new(), extra: Vec::new() }
    }
}

/// A P4 egress port as a snic port; the reserved numbers (flood, local) are not ports.
fn port(p: u32) -> Option<PortId> {
    u16::try_from(p).ok().filter(|p| *p < PortId::LOCAL.0).map(PortId)
}

impl Stage for P4Stage {
    fn name(&self) -> &str {
        "p4"
    }

    fn process(&mut self, now: Instant, batch: &mut Batch, ctx: &mut StageCtx<'_>) {
        let P4Stage { sw, out, verdicts, extra } = self;
        let mut sw = lock(sw);
        let now_ns = now.as_nanos();
        verdicts.clear();
        extra.clear();
        for p in batch.iter_mut() {
            out.clear();
            let traced = p.meta.trace;
            if traced {
                sw.set_trace(true);
            }
            let ingress = u32::from(p.meta.ingress.0);
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                sw.process(ingress, p.data(), now_ns, out)
            }));
            if ran.is_err() {
                // A bug in the executor must not take the worker down: drop the packet, count
                // it, and restore the switch's scratch state (its tables are untouched).
                sw.recover();
                sw.set_trace(false);
                out.clear();
                verdicts.push(Some(DropReason::P4Fault));
                continue;
            }
            if traced {
                for line in sw.take_trace() {
                    ctx.trace(p, || TraceWhat::Detail(line));
                }
                sw.set_trace(false);
            }
            // Digests have no receiver yet: each is counted (and traced), never kept, so a
            // program that sends them cannot grow the switch's memory.
            for d in sw.take_digests() {
                ctx.error();
                ctx.trace(p, || TraceWhat::Detail(format!("digest {d:?} (no receiver)")));
            }
            let mut outs = out.drain(..);
            let Some((first_port, first)) = outs.next() else {
                let reason = if sw.outcome().parser_error.is_some() {
                    DropReason::P4ParserError
                } else {
                    DropReason::P4Drop
                };
                verdicts.push(Some(reason));
                continue;
            };
            let changed = first != p.data();
            for (q, bytes) in outs {
                let mut meta = p.meta.clone();
                meta.stack = Default::default();
                meta.parsed = false;
                match port(q) {
                    Some(q) => extra.push((meta, q, bytes)),
                    None => {
                        ctx.counters.created += 1;
                        ctx.counters.drops.add(DropReason::P4Drop);
                    }
                }
            }
            let Some(first_port) = port(first_port) else {
                verdicts.push(Some(DropReason::P4Drop));
                continue;
            };
            if changed {
                p.set_frame(&first);
                p.meta.stack = Default::default();
                p.meta.parsed = false;
            }
            p.meta.egress = Some(first_port);
            ctx.trace(p, || TraceWhat::Forwarded { port: first_port, how: "p4" });
            verdicts.push(None);
        }
        drop(sw);
        let mut i = 0;
        batch.retain(|p| {
            let v = verdicts.get(i).copied().flatten();
            i += 1;
            match v {
                None => true,
                Some(r) => ctx.drop_packet(p, r),
            }
        });
        for (meta, q, bytes) in extra.drain(..) {
            ctx.counters.created += 1;
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
