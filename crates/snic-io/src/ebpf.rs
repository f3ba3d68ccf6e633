//! The `xdp:PROG.o[,SECTION]` stages of a run: eBPF XDP programs (`snic-ebpf`) run on every
//! packet, one stage instance per worker, and their control handles for the control plane
//! (hot swap, maps, ring-buffer events, trace lines).
//!
//! # Building
//!
//! [`XdpPrograms::from_stages`] reads, verifies and prepares the program of every `xdp:` stage
//! once, with one [`MapSet`] per stage shared by all workers (per-CPU maps keep one value per
//! worker, indexed by the worker number), in one [`XdpSlot`]. Each worker gets its own
//! [`XdpWorkerStage`] (the engine's [`XdpStage`], with its own VM state: stack, PRNG, trace
//! buffer) over the slot. A file that does not load, a
//! program the verifier refuses (with the instruction index and the abstract state) and a
//! program `prepare` cannot run are errors naming the stage, before any packet moves.
//!
//! The stage runs the program with snic's x86-64 JIT when it compiles it (as the kernel does
//! with `bpf_jit_enable=1`), otherwise with the interpreter; `engine=interp` asks for the
//! interpreter (which checks every memory access again at run time), `engine=jit` for the JIT
//! (a program it cannot compile is then an error). Hot swaps keep the stage's choice.
//!
//! # Per packet
//!
//! The engine's stage ([`snic_ebpf::stage`]) runs the program: the XDP context is the
//! packet's window in its buffer (`data_meta`..`data`..`data_end`, the headroom in front for
//! `bpf_xdp_adjust_head/meta`), `ingress_ifindex` = the snic port number the packet came in
//! by. `XDP_PASS` goes on, `XDP_TX` sets the egress to the ingress port, `XDP_REDIRECT` to the
//! port `bpf_redirect` or a DEVMAP value names (snic port numbers; one that is not a port is a
//! `no_egress` drop), `XDP_DROP` is an `xdp_drop` drop, `XDP_ABORTED` and faults `xdp_aborted`.
//! The verdicts are counted per action ([`XdpControl::actions`]).
//!
//! # Hot swap ([`XdpControl::load`])
//!
//! The new object is read, its maps rebound ([`MapSet::rebind`]: maps with the same name,
//! type and sizes are kept, shared with the running program, the others created), and the
//! program verified and prepared, all on the caller's thread while the workers go on with the
//! old program. Anything that fails returns an error and changes nothing. Then the new program
//! is published in the slot ([`XdpSlot::swap`]: one mutex-protected `Arc` and a generation
//! number); every worker compares the generation once per batch, before its first packet, and
//! takes the new program for the whole batch. So a batch, and each packet in it, is handled entirely by one program, never a
//! mix. [`XdpControl::wait_picked_up`] then tells when every worker runs it. The old program
//! (and any map only it used) is freed when the last worker lets go of it.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant as WallInstant};

use snic_ebpf::maps::Origin;
use snic_ebpf::stage::{XdpSlot, XdpStage};
use snic_ebpf::xdp::Engine;
use snic_ebpf::{MapSet, Object, XdpProgram};
use snic_pipeline::{Batch, BuildError, Stage, StageCtx, StageSpec};
use snic_time::Instant;

/// How long the control plane waits for busy workers to take a new program
/// ([`XdpControl::wait_picked_up`]) before it answers.
pub const PICKUP_WAIT: Duration = Duration::from_millis(200);

/// The actions counted per stage, in the kernel's return-code order.
pub const ACTIONS: [&str; 5] = ["aborted", "drop", "pass", "tx", "redirect"];

/// Why an `xdp:` program could not be loaded.
#[derive(Debug, Clone, PartialEq)]
pub enum XdpError {
    /// The object file could not be read.
    Read(String),
    /// The object, verification or preparation failed (the engine's explanation).
    Load(snic_ebpf::LoadFailure),
    /// `engine=jit` and the JIT cannot compile the program.
    Jit(String),
    /// The object's maps could not be created.
    Maps(snic_ebpf::MapError),
}

impl std::fmt::Display for XdpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            XdpError::Read(e) => f.write_str(e),
            XdpError::Load(e) => write!(f, "{e}"),
            XdpError::Jit(e) => write!(f, "engine=jit: {e}"),
            XdpError::Maps(e) => write!(f, "creating maps: {e}"),
        }
    }
}

impl std::error::Error for XdpError {}

/// What the control plane tells about the running program.
#[derive(Debug, Clone, Default)]
struct Meta {
    path: String,
    name: String,
    insns: usize,
    swaps: u64,
}

/// What every worker's stage and the control handle share.
#[derive(Debug)]
struct Shared {
    slot: Arc<XdpSlot>,
    /// Held only to read or replace (never across a load: the run loop reads it for stats).
    meta: Mutex<Meta>,
    /// Serialises loads (each rebinds the maps of the program it replaces).
    loading: Mutex<()>,
    /// Generation each worker ran its last batch with.
    running: Vec<AtomicU64>,
    workers: usize,
    engine: Option<Engine>,
}

/// Load the program and select `engine` for it (none: the JIT when it compiles the program).
fn load_program(
    obj: &Object,
    section: Option<&str>,
    maps: MapSet,
    engine: Option<Engine>,
) -> Result<XdpProgram, XdpError> {
    let mut program = XdpProgram::load(obj, section, maps).map_err(XdpError::Load)?;
    if let Some(engine) = engine {
        program.set_engine(engine).map_err(|e| XdpError::Jit(e.to_string()))?;
    }
    Ok(program)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What [`XdpControl::load`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadReport {
    /// `section/function` of the new program.
    pub program: String,
    /// Its instruction count.
    pub insns: usize,
    /// Verification time.
    pub verify: Duration,
    /// Reading, loading, verifying, preparing and publishing, in all.
    pub load: Duration,
    /// The new program's generation (see [`XdpControl::wait_picked_up`]).
    pub generation: u64,
    /// Every map of the new program and whether it was kept (`true`) or created.
    pub maps: Vec<(String, bool)>,
}

/// What [`XdpControl::info`] tells about the running program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdpInfo {
    /// The object file.
    pub path: String,
    /// `section/function`.
    pub program: String,
    /// Instruction count.
    pub insns: usize,
    /// `interp` or `jit`.
    pub engine: &'static str,
    /// Hot swaps so far.
    pub swaps: u64,
}

/// The control handle of one `xdp:` stage: hot swap, maps, counters, trace.
#[derive(Debug, Clone)]
pub struct XdpControl {
    name: String,
    shared: Arc<Shared>,
}

fn read_object(path: &Path) -> Result<(Object, String), XdpError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| XdpError::Read(format!("{name}: {e}")))?;
    let obj = Object::parse(&bytes, &name)
        .map_err(|e| XdpError::Load(snic_ebpf::LoadFailure::Load(e)))?;
    Ok((obj, name))
}

fn program_name(obj: &Object, section: Option<&str>) -> (String, usize) {
    let p = match section {
        Some(s) => obj.programs.iter().find(|p| p.section == s),
        None => obj.programs.iter().find(|p| p.kind == snic_ebpf::ProgKind::Xdp),
    };
    p.map_or((String::new(), 0), |p| (format!("{}/{}", p.section, p.name), p.insns.len()))
}

impl XdpControl {
    /// Load the program of `path` (in `section`, or its XDP program) for `workers` workers,
    /// with new maps: the start of a stage.
    /// `jit`: `Some(true)` requires the JIT, `Some(false)` the interpreter, `None` takes the
    /// JIT when it compiles the program (every swap then does the same).
    pub fn open(
        name: &str,
        path: &Path,
        section: Option<&str>,
        workers: usize,
        jit: Option<bool>,
    ) -> Result<XdpControl, XdpError> {
        let workers = workers.max(1);
        let engine = jit.map(|jit| if jit { Engine::Jit } else { Engine::Interpreter });
        let (obj, path_name) = read_object(path)?;
        let maps = MapSet::new(&obj, workers).map_err(XdpError::Maps)?;
        let program = load_program(&obj, section, maps, engine)?;
        let (pname, insns) = program_name(&obj, section);
        Ok(XdpControl {
            name: name.to_owned(),
            shared: Arc::new(Shared {
                slot: Arc::new(XdpSlot::new(Arc::new(program))),
                meta: Mutex::new(Meta { path: path_name, name: pname, insns, swaps: 0 }),
                loading: Mutex::new(()),
                running: (0..workers).map(|_| AtomicU64::new(0)).collect(),
                workers,
                engine,
            }),
        })
    }

    /// The stage's name (`xdp`, `xdp.1` for a second one).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Worker `worker`'s stage over the slot.
    pub fn stage(&self, worker: usize) -> XdpWorkerStage {
        XdpWorkerStage {
            inner: XdpStage::new(Arc::clone(&self.shared.slot), worker),
            shared: Arc::clone(&self.shared),
            index: worker,
        }
    }

    /// The slot the workers run their program from.
    pub fn slot(&self) -> &Arc<XdpSlot> {
        &self.shared.slot
    }

    /// The running program's maps (shared: changes are seen by the program at once).
    pub fn maps(&self) -> MapSet {
        self.shared.slot.current().maps().clone()
    }

    /// The running program.
    pub fn info(&self) -> XdpInfo {
        let m = lock(&self.shared.meta).clone();
        let engine = match self.shared.slot.current().engine() {
            Engine::Jit => "jit",
            Engine::Interpreter => "interp",
        };
        XdpInfo { path: m.path, program: m.name, insns: m.insns, engine, swaps: m.swaps }
    }

    /// Packets per action ([`ACTIONS`] order) over every worker, as of their last batch.
    pub fn actions(&self) -> [u64; 5] {
        let c = self.shared.slot.counts();
        [c.aborted, c.drop, c.pass, c.tx, c.redirect]
    }

    /// The `bpf_trace_printk` lines written since the last call (bounded by the engine).
    pub fn take_trace(&self) -> Vec<String> {
        self.shared.slot.drain_trace()
    }

    /// Hot swap: replace the running program with the one in `path` (see the module docs).
    /// On error nothing changed.
    pub fn load(&self, path: &Path, section: Option<&str>) -> Result<LoadReport, XdpError> {
        let start = WallInstant::now();
        // One load at a time: each rebinds the maps of the program it replaces.
        let _loading = lock(&self.shared.loading);
        let (obj, path_name) = read_object(path)?;
        let old_maps = self.maps();
        let maps = MapSet::rebind(&obj, &old_maps, self.shared.workers).map_err(XdpError::Maps)?;
        let report: Vec<(String, bool)> =
            maps.report().into_iter().map(|(n, o)| (n, o == Origin::Kept)).collect();
        let program = load_program(&obj, section, maps, self.shared.engine)?;
        let verify = program.verify_time();
        let (pname, insns) = program_name(&obj, section);
        {
            let mut meta = lock(&self.shared.meta);
            self.shared.slot.swap(Arc::new(program));
            *meta = Meta { path: path_name, name: pname.clone(), insns, swaps: meta.swaps + 1 };
        }
        let generation = self.shared.slot.generation();
        let load = start.elapsed();
        Ok(LoadReport { program: pname, insns, verify, load, generation, maps: report })
    }

    /// Wait up to `timeout` until every worker has run a batch with program `generation` (a
    /// worker takes a new program before its next batch: an idle one only when packets come).
    /// The time waited when they all did, `None` when some had not by then.
    pub fn wait_picked_up(&self, generation: u64, timeout: Duration) -> Option<Duration> {
        let start = WallInstant::now();
        loop {
            let all = self.shared.running.iter().all(|g| g.load(Ordering::Acquire) >= generation);
            if all {
                return Some(start.elapsed());
            }
            if start.elapsed() >= timeout {
                return None;
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// The generation of the running program (0 for the first, one more per swap).
    pub fn generation(&self) -> u64 {
        self.shared.slot.generation()
    }
}

/// One worker's instance of an `xdp:` stage: the engine's [`XdpStage`], which also tells the
/// control plane which program generation it ran its last batch with.
#[derive(Debug)]
pub struct XdpWorkerStage {
    inner: XdpStage,
    shared: Arc<Shared>,
    index: usize,
}

impl Stage for XdpWorkerStage {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn process(&mut self, now: Instant, batch: &mut Batch, ctx: &mut StageCtx<'_>) {
        self.inner.process(now, batch, ctx);
        if let Some(g) = self.shared.running.get(self.index) {
            g.store(self.inner.generation(), Ordering::Release);
        }
    }
}

/// Every `xdp:` stage of a stage list: controls and the not yet placed worker stages.
#[derive(Debug, Default)]
pub struct XdpPrograms {
    controls: Vec<XdpControl>,
    /// `stages[n][k]`: worker `k`'s instance of xdp stage `n`.
    stages: Vec<Vec<Option<XdpWorkerStage>>>,
}

impl XdpPrograms {
    /// Load every `xdp:` stage of `stages` for `workers` workers. A file that does not load
    /// or a refused program is an error naming the stage.
    pub fn from_stages(stages: &[StageSpec], workers: usize) -> Result<XdpPrograms, String> {
        let mut out = XdpPrograms::default();
        for spec in stages {
            let StageSpec::Xdp { program, section, jit } = spec else { continue };
            let n = out.controls.len();
            let name = if n == 0 { "xdp".to_string() } else { format!("xdp.{n}") };
            let ctl =
                XdpControl::open(&name, Path::new(program), section.as_deref(), workers, *jit)
                    .map_err(|e| format!("stage {spec}: {e}"))?;
            out.stages.push((0..workers.max(1)).map(|k| Some(ctl.stage(k))).collect());
            out.controls.push(ctl);
        }
        Ok(out)
    }

    /// True when the stage list had no `xdp:` stage.
    pub fn is_empty(&self) -> bool {
        self.controls.is_empty()
    }

    /// The control handles, in stage order.
    pub fn controls(&self) -> &[XdpControl] {
        &self.controls
    }

    /// Worker `worker`'s instance of the `n`-th xdp stage (each is taken once).
    pub fn take(&mut self, n: usize, worker: usize) -> Option<XdpWorkerStage> {
        self.stages.get_mut(n)?.get_mut(worker)?.take()
    }

    /// A pipeline factory step for worker `worker`: counts the `xdp:` specs it is shown (the
    /// pipeline builds stages in order) and hands out the matching instance.
    pub fn factory_for(
        &mut self,
        worker: usize,
    ) -> impl FnMut(&StageSpec) -> Option<Result<Box<dyn Stage>, BuildError>> + '_ {
        let mut n = 0;
        move |spec| {
            let StageSpec::Xdp { .. } = spec else { return None };
            let got = self.take(n, worker);
            n += 1;
            Some(got.map(|s| Box::new(s) as Box<dyn Stage>).ok_or_else(|| BuildError::Stage {
                stage: spec.to_string(),
                why: format!("no xdp instance for worker {worker}"),
            }))
        }
    }
}
