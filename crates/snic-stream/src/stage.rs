//! The kernel stage ([`KernelStage`], one per worker) and its control handle
//! ([`KernelControl`], shared by every worker's stage and the control plane).
//!
//! # Per batch
//!
//! 1. Control commands queued for this worker (register writes, keys, a new results region)
//!    are applied: one atomic load when there are none, one uncontended lock when there are.
//! 2. Every packet goes through the kernel in order; a `Drop` verdict removes it, counted
//!    under the kernel's reason (through [`StageCtx::each`]: exactly one reason per drop).
//! 3. Packets the kernel emitted join the batch after it, each counted in `created`; one that
//!    finds the batch full is a `pipeline_full` drop (counted in `created` too, so the stage's
//!    `in + created == out + drops` holds).
//! 4. The kernel publishes what changed into its results region, and the register mirror the
//!    control plane reads is refreshed.
//!
//! # Control
//!
//! A register write or key is first applied to the handle's *model* kernel (an instance
//! never given packets): a refused write is refused at once with the kernel's reason, and
//! changes nothing anywhere. An accepted one is queued for every worker and applied before
//! its next batch (the stage asks to be polled while commands wait, so an idle worker takes
//! them too). Reads come from each worker's mirror, refreshed after every batch: a counter
//! register reads per worker, and the control plane shows the sum or each value.
//!
//! # Results from several workers
//!
//! Each worker's kernel writes its own region (its own table, its worker number in the
//! header). Flows are pinned to workers by RSS hash, so a table holds disjoint flows and the
//! whole picture is every worker's table together ([`KernelControl::tables`]).

use crate::kernel::{Emit, HeapRegion, KernelError, RegInfo, ResultsRegion, StreamKernel, Verdict};
use snic_pipeline::{Batch, DropReason, MAX_BATCH, Stage, StageCtx};
use snic_time::Instant;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A command for a worker's kernel.
#[derive(Debug)]
enum Cmd {
    Reg(u32, u32),
    Key(u32, Vec<u8>),
    Region(Arc<dyn ResultsRegion>),
}

#[derive(Debug)]
struct Worker {
    queue: Mutex<Vec<Cmd>>,
    pending: AtomicBool,
    regs: Vec<AtomicU32>,
    region: Mutex<Arc<dyn ResultsRegion>>,
    /// Where the region is in device memory, when it is there.
    device_addr: Mutex<Option<u64>>,
}

#[derive(Debug)]
struct Shared {
    kernel: &'static str,
    instance: String,
    spec: String,
    regs: &'static [RegInfo],
    results_len: usize,
    model: Mutex<Box<dyn StreamKernel>>,
    workers: Vec<Worker>,
}

/// The control handle of one kernel stage (every worker's instance). `Clone` shares it.
#[derive(Debug, Clone)]
pub struct KernelControl {
    shared: Arc<Shared>,
}

/// One worker's stage over its kernel instance.
#[derive(Debug)]
pub struct KernelStage {
    name: String,
    kernel: Box<dyn StreamKernel>,
    shared: Arc<Shared>,
    worker: usize,
    region: Arc<dyn ResultsRegion>,
    emitted: Batch,
}

impl KernelControl {
    /// A handle over `workers` kernels made by `make(worker)`, each publishing into a heap
    /// region of the kernel's `results_len`. `instance` names the stage for the control plane
    /// (`telemetry`, or `telemetry.1` for a second one); `spec` is its stage string.
    pub fn new(
        instance: &str,
        spec: &str,
        workers: usize,
        mut make: impl FnMut(u32) -> Result<Box<dyn StreamKernel>, KernelError>,
    ) -> Result<(KernelControl, Vec<KernelStage>), KernelError> {
        let workers = workers.max(1);
        let model = make(0)?;
        let regs = model.registers();
        let results_len = model.results_len();
        let mut kernels = Vec::with_capacity(workers);
        let mut shared_workers = Vec::with_capacity(workers);
        for w in 0..workers {
            let k = make(w as u32)?;
            let region: Arc<dyn ResultsRegion> = Arc::new(HeapRegion::new(results_len));
            shared_workers.push(Worker {
                queue: Mutex::new(Vec::new()),
                pending: AtomicBool::new(false),
                regs: (0..regs.len() as u32)
                    .map(|i| AtomicU32::new(k.read_reg(i).unwrap_or(0)))
                    .collect(),
                region: Mutex::new(Arc::clone(&region)),
                device_addr: Mutex::new(None),
            });
            kernels.push((k, region));
        }
        let shared = Arc::new(Shared {
            kernel: model.name(),
            instance: instance.to_owned(),
            spec: spec.to_owned(),
            regs,
            results_len,
            model: Mutex::new(model),
            workers: shared_workers,
        });
        let stages = kernels
            .into_iter()
            .enumerate()
            .map(|(worker, (mut kernel, region))| {
                // A first publish, so the region holds a valid (empty) table from the start.
                kernel.publish(&*region);
                KernelStage {
                    name: format!("kernel:{instance}"),
                    kernel,
                    shared: Arc::clone(&shared),
                    worker,
                    region,
                    emitted: Batch::new(MAX_BATCH),
                }
            })
            .collect();
        Ok((KernelControl { shared }, stages))
    }

    /// The instance name the control plane addresses (`telemetry`, `crypt.1`).
    pub fn instance(&self) -> &str {
        &self.shared.instance
    }

    /// The kernel's name (`telemetry`).
    pub fn kernel(&self) -> &'static str {
        self.shared.kernel
    }

    /// The stage string it was built from.
    pub fn spec(&self) -> &str {
        &self.shared.spec
    }

    /// Workers (kernel instances).
    pub fn workers(&self) -> usize {
        self.shared.workers.len()
    }

    /// The register file's layout.
    pub fn registers(&self) -> &'static [RegInfo] {
        self.shared.regs
    }

    /// Bytes of results memory one worker's kernel needs (0: none).
    pub fn results_len(&self) -> usize {
        self.shared.results_len
    }

    /// Register `idx` as each worker last published it.
    pub fn read_reg(&self, idx: u32) -> Result<Vec<u32>, KernelError> {
        if idx as usize >= self.shared.regs.len() {
            return Err(KernelError::NoRegister(idx));
        }
        Ok(self
            .shared
            .workers
            .iter()
            .map(|w| w.regs[idx as usize].load(Ordering::Relaxed))
            .collect())
    }

    /// Write register `idx` on every worker (checked on the model first; see the module doc).
    pub fn write_reg(&self, idx: u32, value: u32) -> Result<(), KernelError> {
        lock(&self.shared.model).write_reg(idx, value)?;
        self.broadcast(|| Cmd::Reg(idx, value));
        Ok(())
    }

    /// Load `key` into `slot` on every worker (empty: clear the slot).
    pub fn set_key(&self, slot: u32, key: &[u8]) -> Result<(), KernelError> {
        lock(&self.shared.model).set_key(slot, key)?;
        self.broadcast(|| Cmd::Key(slot, key.to_vec()));
        Ok(())
    }

    /// Move worker `worker`'s results into `region` (device memory), at device address
    /// `device_addr`. The kernel writes its whole table there before its next batch.
    pub fn attach_region(
        &self,
        worker: usize,
        region: Arc<dyn ResultsRegion>,
        device_addr: Option<u64>,
    ) -> Result<(), KernelError> {
        let w = self.shared.workers.get(worker).ok_or_else(|| KernelError::BadArg {
            key: "worker".into(),
            why: format!("no worker {worker}"),
        })?;
        if region.len() < self.shared.results_len {
            return Err(KernelError::BadArg {
                key: "region".into(),
                why: format!(
                    "{} bytes, the kernel needs {}",
                    region.len(),
                    self.shared.results_len
                ),
            });
        }
        *lock(&w.region) = Arc::clone(&region);
        *lock(&w.device_addr) = device_addr;
        lock(&w.queue).push(Cmd::Region(region));
        w.pending.store(true, Ordering::Release);
        Ok(())
    }

    /// Each worker's results region and its device address (when in device memory).
    pub fn regions(&self) -> Vec<(Arc<dyn ResultsRegion>, Option<u64>)> {
        self.shared
            .workers
            .iter()
            .map(|w| (Arc::clone(&lock(&w.region)), *lock(&w.device_addr)))
            .collect()
    }

    /// Every worker's telemetry table, decoded (an error for a worker whose region does not
    /// hold one: another kernel, or a region not yet written).
    pub fn tables(&self) -> Vec<Result<crate::table::Table, crate::table::TableError>> {
        self.regions().iter().map(|(r, _)| crate::table::read_consistent(&**r, 8)).collect()
    }

    /// True while some worker has commands it has not applied yet.
    pub fn pending(&self) -> bool {
        self.shared.workers.iter().any(|w| w.pending.load(Ordering::Acquire))
    }

    fn broadcast(&self, cmd: impl Fn() -> Cmd) {
        for w in &self.shared.workers {
            lock(&w.queue).push(cmd());
            w.pending.store(true, Ordering::Release);
        }
    }
}

impl KernelStage {
    /// Apply the commands queued for this worker. Returns whether there were any.
    fn apply_commands(&mut self) -> bool {
        let w = &self.shared.workers[self.worker];
        if !w.pending.load(Ordering::Acquire) {
            return false;
        }
        // Clear the flag before taking the queue: a command queued in between sets it again
        // and is taken at the next batch, never left behind a cleared flag.
        w.pending.store(false, Ordering::Release);
        let cmds = std::mem::take(&mut *lock(&w.queue));
        for c in cmds {
            // The model accepted each of these already; a worker refusing one (it cannot, the
            // kernels are alike) would leave that worker as it was.
            let _ = match c {
                Cmd::Reg(i, v) => self.kernel.write_reg(i, v),
                Cmd::Key(s, k) => self.kernel.set_key(s, &k),
                Cmd::Region(r) => {
                    self.region = r;
                    // The new region starts empty: write everything.
                    self.kernel.republish();
                    self.kernel.publish(&*self.region);
                    Ok(())
                }
            };
        }
        true
    }

    fn mirror_registers(&self) {
        let w = &self.shared.workers[self.worker];
        for (i, r) in w.regs.iter().enumerate() {
            if let Some(v) = self.kernel.read_reg(i as u32) {
                r.store(v, Ordering::Relaxed);
            }
        }
    }
}

impl Stage for KernelStage {
    fn name(&self) -> &str {
        &self.name
    }

    fn process(&mut self, now: Instant, batch: &mut Batch, ctx: &mut StageCtx<'_>) {
        let changed = self.apply_commands();
        if batch.is_empty() && !changed {
            return;
        }
        let KernelStage { kernel, emitted, .. } = self;
        emitted.clear();
        ctx.each(batch, |p, ctx| {
            if !p.meta.parsed && p.meta.stack.layers().is_empty() {
                p.meta.stack = snic_wire::stack::parse(p.data());
            }
            match kernel.process(now, p, &mut Emit { out: emitted }) {
                Verdict::Pass => Ok(()),
                Verdict::Drop(r) => {
                    ctx.trace(p, || snic_pipeline::TraceWhat::Detail(format!("kernel drop: {r}")));
                    Err(r)
                }
            }
        });
        if !emitted.is_empty() {
            for p in emitted.packets_mut() {
                ctx.counters.created += 1;
                if !batch.push_swap(p) {
                    ctx.drop_packet(p, DropReason::PipelineFull);
                }
            }
            emitted.clear();
        }
        kernel.publish(&*self.region);
        self.mirror_registers();
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let w = &self.shared.workers[self.worker];
        w.pending.load(Ordering::Acquire).then_some(Instant::ZERO)
    }
}
