//! A host-interface worker thread over its own mirror of the address space (device memory and
//! every client's registered host memory). A DMA worker runs one [`DmaEngine`] for the queues
//! and channels [`abi::queue_worker`] / [`abi::channel_worker`] give it; a compute worker
//! serves the kernel slots [`abi::kernel_worker`] gives it, for every client, so a long kernel
//! never holds up a DMA queue and kernels on different compute workers run at once.
//!
//! The loop: take control commands (each acknowledged, so the control thread's response means
//! "done"); a DMA worker reads the doorbell registers of its queues and channels from the
//! owners' BARs and hands changes to the engine, lets the engine work, writes back indices,
//! queue states and channel results and signals eventfds; a compute worker takes commands from
//! its kernels' control FIFOs, runs them, and writes statuses and counters. When idle for
//! `spin` a worker raises its sleeping flag in the NIC page and waits on its kick eventfd (at
//! most 10 ms at a time).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use snic_compute::{Invocation, KernelCmd, KernelStatus, Kernels, MAX_KERNELS, USER_REGS};
use snic_dma::engine::QueueIndices;
use snic_dma::{
    AddressSpace, ChannelConfig, ChannelKey, Dir, DmaEngine, DmaError, DmaStats, Event, HostAddr,
    LatencyHist, QueueConfig, QueueSnapshot, QueueState,
};
use snic_hostif::abi;
use snic_hostif::shm::{EventFd, Mapping, SharedBacking};

/// Descriptors one [`DmaEngine::poll`] call may process.
const POLL_BUDGET: usize = 256;
/// Kernel commands served per client per loop turn (so one client cannot starve the others).
const KERNEL_BUDGET: u32 = 16;
/// An idle, spinning worker yields its core once per this many empty turns.
const IDLE_YIELD_EVERY: u32 = 8;

/// Longest a sleeping worker waits before it looks at its doorbells again.
const SLEEP_MAX: Duration = Duration::from_millis(10);

/// What the control thread asks of a worker.
#[derive(Debug)]
pub(crate) enum Op {
    /// Map a client's registered host memory at `iova`.
    MapHost { owner: u32, iova: u64, backing: SharedBacking },
    /// Unmap the host region at `iova`.
    UnmapHost { iova: u64 },
    /// Add a queue (state "added"); its BAR slot is cleared.
    AddQueue { qid: u16, cfg: QueueConfig, bar: Arc<Mapping>, irq: Option<Arc<EventFd>> },
    /// Start a queue: indices and its BAR slot back to 0.
    StartQueue { qid: u16 },
    /// Stop a queue (outstanding descriptors flushed).
    StopQueue { qid: u16 },
    /// Delete a queue.
    DeleteQueue { qid: u16 },
    /// Configure (or reconfigure) a channel; `block` is its register block in `bar`.
    SetChannel {
        key: ChannelKey,
        cfg: ChannelConfig,
        bar: Arc<Mapping>,
        block: usize,
        irq: Option<Arc<EventFd>>,
    },
    /// Remove a channel.
    RemoveChannel { key: ChannelKey },
    /// Serve this client's slots of the kernels this compute worker runs.
    AddKernelClient { client: u32, bar: Arc<Mapping> },
    /// Attach the eventfd of the client's kernel `kernel` (a compute worker serving it).
    SetKernelIrq { client: u32, kernel: u32, irq: Arc<EventFd> },
    /// Stop serving the client's kernel slots.
    RemoveKernelClient { client: u32 },
    /// Counters.
    Stats,
    /// Pause at a clean point for a takeover: finish what the engine has taken (no transfer
    /// half done, no event unhandled), answer [`Ack::Paused`] with this worker's state, and
    /// take nothing but [`Op::Resume`], [`Op::Abandon`] or [`Op::Shutdown`] until then.
    Pause,
    /// Carry on after a pause (the takeover failed).
    Resume,
    /// Leave the loop without touching shared memory again (a new process took over).
    Abandon,
    /// Leave the loop.
    Shutdown,
}

/// A worker's answer.
#[derive(Debug)]
pub(crate) enum Ack {
    /// Done.
    Done,
    /// Refused: (stable code, reason).
    Failed(&'static str, String),
    /// Counters.
    Stats(Box<WorkerStats>),
    /// Paused; its state.
    Paused(Box<WorkerExport>),
}

/// What a paused worker keeps outside shared memory, for a new process to carry on (see
/// `crate::takeover`).
#[derive(Debug, Default)]
pub(crate) struct WorkerExport {
    pub queues: Vec<QueueExport>,
    pub chans: Vec<ChanExport>,
    pub kslots: Vec<KSlotExport>,
}

/// A queue of a paused worker.
#[derive(Debug)]
pub(crate) struct QueueExport {
    pub qid: u16,
    pub snap: QueueSnapshot,
    /// Host registers last read, NIC registers last written (see `QueueSlot`).
    pub seen: [u32; 3],
    pub wrote: [u32; 4],
    pub irq: Option<Arc<EventFd>>,
}

/// A channel of a paused worker (none runs: the pause finished every run).
#[derive(Debug)]
pub(crate) struct ChanExport {
    pub key: ChannelKey,
    pub cfg: ChannelConfig,
    pub block: usize,
    pub seen_seq: u32,
    pub irq: Option<Arc<EventFd>>,
}

/// A client's kernel slot on a paused compute worker.
#[derive(Debug)]
pub(crate) struct KSlotExport {
    pub client: u32,
    pub kernel: u32,
    pub irq: Option<Arc<EventFd>>,
    pub cidx: u32,
    pub sts_pidx: u32,
    pub bad_pidx: Option<u32>,
    pub runs: u32,
    pub errors: u32,
    pub busy_ns: u64,
}

/// Longest a pausing worker keeps serving what its engine already took.
const PAUSE_DRAIN: Duration = Duration::from_secs(2);

/// One command and where to acknowledge it.
#[derive(Debug)]
pub(crate) struct Cmd {
    pub op: Op,
    pub reply: mpsc::Sender<Ack>,
}

/// A worker's counters.
#[derive(Debug, Clone, Default)]
pub(crate) struct WorkerStats {
    pub engine: DmaStats,
    pub kernels_run: u64,
    pub kernel_errors: u64,
    pub kernel_fifo_ignored: u64,
    /// Per kernel this worker serves: (id, name, runs, errors, busy ns).
    pub kernels: Vec<KernelStat>,
    pub sleeps: u64,
    pub queues: usize,
    pub channels: usize,
    /// Doorbell to completion of queues' descriptors (one sample per queue and ring in flight).
    pub queue_latency: LatencyHist,
    /// Run request to done of channel chains.
    pub channel_latency: LatencyHist,
}

/// Counters of one kernel on one compute worker.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct KernelStat {
    pub id: u32,
    pub name: &'static str,
    pub runs: u64,
    pub errors: u64,
    pub busy_ns: u64,
}

/// The refusal code and text for an engine error.
pub(crate) fn dma_error(e: &DmaError) -> Ack {
    let code = match e {
        DmaError::BadQid(_) | DmaError::NoQueue(_) => "no_queue",
        DmaError::QidInUse(_) | DmaError::ChannelInUse(_) | DmaError::ChannelBusy(_) => "busy",
        DmaError::NoChannel(_) => "no_channel",
        DmaError::BadConfig(_) => "bad_request",
        DmaError::RingMemory(_) => "bad_address",
        DmaError::BadState(_) => "bad_state",
    };
    Ack::Failed(code, e.to_string())
}

#[derive(Debug)]
struct QueueSlot {
    bar: Arc<Mapping>,
    slot: usize,
    irq: Option<Arc<EventFd>>,
    /// Last values read from the host registers: H2C PIDX, C2H PIDX, CMPT CIDX.
    seen: [u32; 3],
    /// Last values written to the NIC registers: H2C CIDX, C2H CIDX, CMPT PIDX, state.
    wrote: [u32; 4],
    /// Latency sample in flight per ring (H2C, C2H): the producer index a doorbell posted up
    /// to and when the worker handed it to the engine. Done when the ring's consumer index
    /// reaches it; one at a time per ring, so a steady stream costs two clock reads per
    /// completed sample, not per descriptor.
    lat_mark: [Option<(u32, Instant)>; 2],
}

#[derive(Debug)]
struct ChanSlot {
    bar: Arc<Mapping>,
    block: usize,
    irq: Option<Arc<EventFd>>,
    /// Last CH_RUN_SEQ value acted on.
    seen_seq: u32,
    /// The run in flight, by its sequence number.
    running: Option<u32>,
    /// When the run in flight was handed to the engine.
    started: Option<Instant>,
}

/// Finish the latency samples of queue `qid` whose rings' consumer index reached the marked
/// producer index (the descriptors of that doorbell are done); a queue out of the running
/// state drops its samples.
fn sample_queue(hist: &mut LatencyHist, q: &mut QueueSlot, engine: &DmaEngine, qid: u16) {
    if q.lat_mark.iter().all(Option::is_none) {
        return;
    }
    let (Some(idx), Some(QueueState::Running)) =
        (engine.queue_indices(qid), engine.queue_state(qid))
    else {
        q.lat_mark = [None; 2];
        return;
    };
    for (m, cidx) in q.lat_mark.iter_mut().zip([idx.h2c_cidx, idx.c2h_cidx]) {
        if let Some((pidx, t)) = *m
            && cidx.wrapping_sub(pidx) < 1 << 31
        {
            hist.observe(t.elapsed());
            *m = None;
        }
    }
}

/// One client's slot of one kernel.
#[derive(Debug)]
struct KernelSlot {
    client: u32,
    kernel: u32,
    bar: Arc<Mapping>,
    /// The slot's offset in the BAR.
    base: usize,
    irq: Option<Arc<EventFd>>,
    /// KCTL_PIDX as read at the start of the turn (before its control commands were taken).
    pidx: u32,
    /// Commands taken (NIC's copy of KCTL_CIDX).
    cidx: u32,
    /// Statuses written (NIC's copy of KSTS_PIDX).
    sts_pidx: u32,
    /// A producer value that claimed more than the FIFO holds (already counted).
    bad_pidx: Option<u32>,
    /// This client's counters of this kernel (NIC's copies of K_RUNS, K_ERRORS, K_BUSY_NS).
    runs: u32,
    errors: u32,
    busy_ns: u64,
}

impl KernelSlot {
    fn reg(&self, off: usize) -> u32 {
        self.bar.load_u32(self.base + off)
    }
    fn set(&self, off: usize, v: u32) {
        self.bar.store_u32(self.base + off, v);
    }
}

/// The register value of a queue state.
fn state_value(s: Option<QueueState>) -> u32 {
    match s {
        Some(QueueState::Added) | None => abi::QSTATE_ADDED,
        Some(QueueState::Running) => abi::QSTATE_RUNNING,
        Some(QueueState::Stopped) => abi::QSTATE_STOPPED,
        Some(QueueState::Error(st)) => abi::QSTATE_ERROR | st as u32,
    }
}

fn clear_words(bar: &Mapping, at: usize, bytes: usize) {
    for off in (at..at + bytes).step_by(4) {
        bar.store_u32(off, 0);
    }
}

fn add_ignored(bar: &Mapping, n: u64) {
    if n > 0
        && let Some(a) = bar.atomic_u32(abi::DOORBELLS_IGNORED)
    {
        a.fetch_add(n as u32, Ordering::Release);
    }
}

fn signal(irq: Option<&Arc<EventFd>>) {
    if let Some(e) = irq {
        // A full eventfd counter (never in practice) only loses a wake-up the host already has.
        let _ = e.signal();
    }
}

/// One worker thread's state.
#[derive(Debug)]
pub(crate) struct Worker {
    id: u32,
    engine: DmaEngine,
    rx: mpsc::Receiver<Cmd>,
    kick: Arc<EventFd>,
    nic: Arc<Mapping>,
    spin: Duration,
    queues: BTreeMap<u16, QueueSlot>,
    chans: BTreeMap<ChannelKey, ChanSlot>,
    /// `Some(i)`: compute worker `i` (serves kernel slots, no DMA).
    compute: Option<(u32, u32)>,
    kslots: Vec<KernelSlot>,
    kernels: Kernels,
    /// Nanoseconds each kernel id ran here.
    busy_ns: [u64; MAX_KERNELS as usize],
    kernel_fifo_ignored: u64,
    sleeps: u64,
    queue_latency: LatencyHist,
    channel_latency: LatencyHist,
    stop: bool,
    /// Stopped by [`Op::Abandon`]: shared memory is another process's now.
    abandoned: bool,
}

impl Worker {
    /// A worker over `mem` (its mirror of device memory, no host regions yet). `compute`:
    /// `Some((i, n))` makes it compute worker `i` of `n`, serving the kernel slots
    /// [`abi::kernel_worker`] gives it with `kernels`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: u32,
        mem: AddressSpace,
        rx: mpsc::Receiver<Cmd>,
        kick: Arc<EventFd>,
        nic: Arc<Mapping>,
        spin: Duration,
        compute: Option<(u32, u32)>,
        kernels: Kernels,
    ) -> Worker {
        Worker {
            id,
            engine: DmaEngine::new(mem),
            rx,
            kick,
            nic,
            spin,
            queues: BTreeMap::new(),
            chans: BTreeMap::new(),
            compute,
            kslots: Vec::new(),
            kernels,
            busy_ns: [0; MAX_KERNELS as usize],
            kernel_fifo_ignored: 0,
            sleeps: 0,
            queue_latency: LatencyHist::default(),
            channel_latency: LatencyHist::default(),
            stop: false,
            abandoned: false,
        }
    }

    /// Run until [`Op::Shutdown`] (or until the control thread is gone).
    pub(crate) fn run(mut self) {
        let flag = abi::worker_sleeping(self.id);
        // When the current idle spell started (taken at its first yield, so a busy worker
        // never reads the clock).
        let mut idle_since: Option<Instant> = None;
        let mut idle_turns = 0u32;
        while !self.stop {
            if self.turn() {
                idle_since = None;
                idle_turns = 0;
                continue;
            }
            // Spin, but hand the core over now and then: with more spinning threads than cores
            // (a host polling its completions, several workers), a worker that only spins would
            // keep a busy peer off the CPU for a whole scheduler slice. The clock is read only
            // then too: a read costs as much as a turn, and idle turns are the doorbell latency.
            idle_turns = idle_turns.wrapping_add(1);
            if !idle_turns.is_multiple_of(IDLE_YIELD_EVERY) {
                std::hint::spin_loop();
                continue;
            }
            std::thread::yield_now();
            if idle_since.get_or_insert_with(Instant::now).elapsed() < self.spin {
                continue;
            }
            // Going to sleep: raise the flag, then look once more (a host that stored its
            // doorbell before our fence either is seen now or sees the flag and kicks).
            self.nic.store_u32(flag, 1);
            fence(Ordering::SeqCst);
            if self.turn() {
                self.nic.store_u32(flag, 0);
                idle_since = None;
                continue;
            }
            self.sleeps += 1;
            if self.kick.wait(Some(SLEEP_MAX)).is_err() {
                // The kick eventfd failing means something is badly wrong; do not spin hot.
                std::thread::sleep(SLEEP_MAX);
            }
            self.nic.store_u32(flag, 0);
        }
        if !self.abandoned {
            self.nic.store_u32(flag, 0);
        }
    }

    /// One pass over everything; true when anything happened.
    fn turn(&mut self) -> bool {
        if self.compute.is_some() {
            // The control thread does not wait for compute workers (a long kernel would hold
            // up every setup request): it posts mappings and eventfds and answers the host at
            // once. Reading the producer indices before taking those posts keeps the order:
            // a command the host wrote after its answer is seen here only if the post, sent
            // before the answer, is taken below, before the command runs.
            for k in self.kslots.iter_mut() {
                k.pidx = k.reg(abi::KCTL_PIDX);
            }
            let work = self.drain_commands();
            if self.stop {
                return true;
            }
            return work | self.serve_kernels();
        }
        let mut work = self.drain_commands();
        if self.stop {
            return true;
        }
        work |= self.scan_doorbells();
        work |= self.engine.poll(POLL_BUDGET) > 0;
        work |= self.handle_events();
        work |= self.write_back();
        work
    }

    fn drain_commands(&mut self) -> bool {
        let mut any = false;
        loop {
            match self.rx.try_recv() {
                Ok(cmd) => {
                    any = true;
                    let pause = matches!(cmd.op, Op::Pause);
                    let ack = self.command(cmd.op);
                    let paused = pause && matches!(ack, Ack::Paused(_));
                    // The control thread may have given up waiting (it never does today).
                    let _ = cmd.reply.send(ack);
                    if paused {
                        self.paused();
                    }
                    if self.stop {
                        return true;
                    }
                }
                Err(mpsc::TryRecvError::Empty) => return any,
                Err(mpsc::TryRecvError::Disconnected) => {
                    self.stop = true;
                    return true;
                }
            }
        }
    }

    fn command(&mut self, op: Op) -> Ack {
        match op {
            Op::MapHost { owner, iova, backing } => {
                let Some(base) = HostAddr::new(iova) else {
                    return Ack::Failed("bad_address", format!("{iova:#x} is not a host address"));
                };
                match self.engine.mem.map_host_owned(base, Box::new(backing), owner) {
                    Ok(_) => Ack::Done,
                    Err(e) => Ack::Failed("bad_address", e.to_string()),
                }
            }
            Op::UnmapHost { iova } => {
                let Some(r) = self.engine.mem.region_of(iova).filter(|r| r.base == iova) else {
                    return Ack::Failed("no_region", format!("no region at {iova:#x}"));
                };
                match self.engine.mem.unmap(r.id) {
                    Ok(_) => Ack::Done,
                    Err(e) => Ack::Failed("no_region", e.to_string()),
                }
            }
            Op::AddQueue { qid, cfg, bar, irq } => {
                let slot = abi::queue_slot(qid);
                if let Err(e) = self.engine.add_queue(qid, cfg) {
                    return dma_error(&e);
                }
                clear_words(&bar, slot, abi::QUEUE_STRIDE);
                let wrote = [0, 0, 0, abi::QSTATE_ADDED];
                self.queues.insert(
                    qid,
                    QueueSlot { bar, slot, irq, seen: [0; 3], wrote, lat_mark: [None; 2] },
                );
                Ack::Done
            }
            Op::StartQueue { qid } => {
                if let Err(e) = self.engine.start_queue(qid) {
                    return dma_error(&e);
                }
                if let Some(q) = self.queues.get_mut(&qid) {
                    clear_words(&q.bar, q.slot, abi::QUEUE_STRIDE);
                    q.bar.store_u32(q.slot + abi::Q_STATE, abi::QSTATE_RUNNING);
                    q.seen = [0; 3];
                    q.wrote = [0, 0, 0, abi::QSTATE_RUNNING];
                }
                Ack::Done
            }
            Op::StopQueue { qid } => match self.engine.stop_queue(qid) {
                Ok(()) => {
                    self.handle_events();
                    self.write_back();
                    Ack::Done
                }
                Err(e) => dma_error(&e),
            },
            Op::DeleteQueue { qid } => match self.engine.delete_queue(qid) {
                Ok(_) => {
                    self.handle_events();
                    self.write_back();
                    if let Some(q) = self.queues.remove(&qid) {
                        clear_words(&q.bar, q.slot, abi::QUEUE_STRIDE);
                    }
                    Ack::Done
                }
                Err(e) => dma_error(&e),
            },
            Op::SetChannel { key, cfg, bar, block, irq } => {
                if self.chans.remove(&key).is_some() {
                    // Reconfiguring: an unfinished run is abandoned.
                    let _ = self.engine.remove_channel(key);
                }
                if let Err(e) = self.engine.add_channel(key, cfg) {
                    return dma_error(&e);
                }
                clear_words(&bar, block, abi::CHANNEL_STRIDE);
                bar.store_u32(block + abi::CH_CONTROL, u32::from(irq.is_some()));
                self.chans.insert(
                    key,
                    ChanSlot { bar, block, irq, seen_seq: 0, running: None, started: None },
                );
                Ack::Done
            }
            Op::RemoveChannel { key } => {
                self.chans.remove(&key);
                match self.engine.remove_channel(key) {
                    Ok(_) => Ack::Done,
                    Err(e) => dma_error(&e),
                }
            }
            Op::AddKernelClient { client, bar } => {
                let Some((index, of)) = self.compute else {
                    return Ack::Failed("internal", "kernel slots go to compute workers".into());
                };
                self.kslots.retain(|k| k.client != client);
                // A client's BAR starts zeroed, and the host may already have written commands
                // (this op is posted, not awaited): nothing is cleared.
                for kernel in (0..MAX_KERNELS).filter(|&k| abi::kernel_worker(k, of) == index) {
                    self.kslots.push(KernelSlot {
                        client,
                        kernel,
                        bar: bar.clone(),
                        base: abi::kernel_slot(kernel),
                        irq: None,
                        pidx: 0,
                        cidx: 0,
                        sts_pidx: 0,
                        bad_pidx: None,
                        runs: 0,
                        errors: 0,
                        busy_ns: 0,
                    });
                }
                Ack::Done
            }
            Op::SetKernelIrq { client, kernel, irq } => {
                match self.kslots.iter_mut().find(|k| k.client == client && k.kernel == kernel) {
                    Some(k) => {
                        k.irq = Some(irq);
                        Ack::Done
                    }
                    None => Ack::Failed(
                        "no_kernel",
                        format!("kernel {kernel} of client {client} is not served here"),
                    ),
                }
            }
            Op::RemoveKernelClient { client } => {
                self.kslots.retain(|k| k.client != client);
                Ack::Done
            }
            Op::Stats => Ack::Stats(Box::new(WorkerStats {
                engine: self.engine.stats().clone(),
                kernels_run: self.kernels.runs(),
                kernel_errors: self.kernels.errors(),
                kernel_fifo_ignored: self.kernel_fifo_ignored,
                kernels: self.kernel_stats(),
                sleeps: self.sleeps,
                queues: self.queues.len(),
                channels: self.chans.len(),
                queue_latency: self.queue_latency,
                channel_latency: self.channel_latency,
            })),
            Op::Pause => match self.pause() {
                Ok(ex) => Ack::Paused(Box::new(ex)),
                Err(why) => Ack::Failed("busy", why),
            },
            // Not paused: nothing to resume or abandon.
            Op::Resume => Ack::Done,
            Op::Abandon => {
                self.stop = true;
                self.abandoned = true;
                Ack::Done
            }
            Op::Shutdown => {
                self.stop = true;
                Ack::Done
            }
        }
    }

    /// Finish what the engine took (bounded by [`PAUSE_DRAIN`]), write every result back,
    /// and export the state. No doorbell is read: what the host posts from now on waits in
    /// its rings for whoever carries on. An error (a streaming packet half gathered, a
    /// channel run that did not finish) leaves the worker running as it was.
    fn pause(&mut self) -> Result<WorkerExport, String> {
        let end = Instant::now() + PAUSE_DRAIN;
        loop {
            let n = self.engine.poll(POLL_BUDGET);
            self.handle_events();
            self.write_back();
            if n == 0 {
                break;
            }
            if Instant::now() >= end {
                return Err("the engine did not finish its outstanding work in time".into());
            }
        }
        let mut ex = WorkerExport::default();
        for (&qid, q) in &self.queues {
            let snap = self.engine.queue_snapshot(qid).map_err(|_| {
                format!("queue {qid} is in the middle of a streaming packet; try again")
            })?;
            let irq = q.irq.clone();
            ex.queues.push(QueueExport { qid, snap, seen: q.seen, wrote: q.wrote, irq });
        }
        for (&key, c) in &self.chans {
            let cfg = self.engine.channel_config(key).copied();
            let (Some(cfg), None) = (cfg, c.running) else {
                return Err(format!("channel {} is still running a chain", key.0));
            };
            let (block, seen_seq, irq) = (c.block, c.seen_seq, c.irq.clone());
            ex.chans.push(ChanExport { key, cfg, block, seen_seq, irq });
        }
        for k in &self.kslots {
            ex.kslots.push(KSlotExport {
                client: k.client,
                kernel: k.kernel,
                irq: k.irq.clone(),
                cidx: k.cidx,
                sts_pidx: k.sts_pidx,
                bad_pidx: k.bad_pidx,
                runs: k.runs,
                errors: k.errors,
                busy_ns: k.busy_ns,
            });
        }
        for q in self.queues.values_mut() {
            q.lat_mark = [None; 2];
        }
        Ok(ex)
    }

    /// Paused: wait for the control thread's word (at most the control thread's life).
    fn paused(&mut self) {
        loop {
            let Ok(cmd) = self.rx.recv() else {
                self.stop = true;
                return;
            };
            let (ack, done) = match cmd.op {
                Op::Resume => (Ack::Done, true),
                Op::Abandon => {
                    self.stop = true;
                    self.abandoned = true;
                    (Ack::Done, true)
                }
                Op::Shutdown => {
                    self.stop = true;
                    (Ack::Done, true)
                }
                _ => (Ack::Failed("bad_state", "the worker is paused".into()), false),
            };
            let _ = cmd.reply.send(ack);
            if done {
                return;
            }
        }
    }

    /// Take over a queue a paused worker of another process had ([`Op::Pause`]): the engine
    /// gets its state and indices, the slot its register values; nothing in the BAR changes.
    pub(crate) fn restore_queue(
        &mut self,
        q: QueueExport,
        bar: Arc<Mapping>,
    ) -> Result<(), DmaError> {
        self.engine.restore_queue(q.qid, &q.snap)?;
        let slot = abi::queue_slot(q.qid);
        let qs =
            QueueSlot { bar, slot, irq: q.irq, seen: q.seen, wrote: q.wrote, lat_mark: [None; 2] };
        self.queues.insert(q.qid, qs);
        Ok(())
    }

    /// Take over a channel (none was running), its registers untouched.
    pub(crate) fn restore_channel(
        &mut self,
        c: ChanExport,
        bar: Arc<Mapping>,
    ) -> Result<(), DmaError> {
        self.engine.add_channel(c.key, c.cfg)?;
        let slot = ChanSlot {
            bar,
            block: c.block,
            irq: c.irq,
            seen_seq: c.seen_seq,
            running: None,
            started: None,
        };
        self.chans.insert(c.key, slot);
        Ok(())
    }

    /// Take over a client's kernel slot, its registers untouched.
    pub(crate) fn restore_kslot(&mut self, k: KSlotExport, bar: Arc<Mapping>) {
        self.kslots.retain(|s| !(s.client == k.client && s.kernel == k.kernel));
        self.kslots.push(KernelSlot {
            client: k.client,
            kernel: k.kernel,
            bar,
            base: abi::kernel_slot(k.kernel),
            irq: k.irq,
            pidx: 0,
            cidx: k.cidx,
            sts_pidx: k.sts_pidx,
            bad_pidx: k.bad_pidx,
            runs: k.runs,
            errors: k.errors,
            busy_ns: k.busy_ns,
        });
    }

    /// Read every queue's and channel's host registers; hand changes to the engine.
    fn scan_doorbells(&mut self) -> bool {
        let mut any = false;
        // Every queue's H2C doorbell is read before any C2H doorbell. A host that posts
        // receive buffers on queue A and then sends on queue B (which streams into A) wrote
        // A's C2H doorbell before B's H2C doorbell (release stores, in program order): having
        // seen B's new H2C value (acquire), a later read of A's C2H doorbell sees A's new value
        // too, so the looped-back packet finds its buffers. Reading queue by queue could see
        // B's send but miss A's buffers and drop the packet.
        let regs = [abi::Q_H2C_PIDX, abi::Q_C2H_PIDX, abi::Q_CMPT_CIDX];
        for (i, reg) in regs.into_iter().enumerate() {
            for (&qid, q) in self.queues.iter_mut() {
                let v = q.bar.load_u32(q.slot + reg);
                if v == q.seen[i] {
                    continue;
                }
                q.seen[i] = v;
                any = true;
                let before = self.engine.stats().doorbells_ignored;
                match i {
                    0 => self.engine.doorbell(qid, Dir::H2c, v),
                    1 => self.engine.doorbell(qid, Dir::C2h, v),
                    _ => self.engine.cmpt_doorbell(qid, v),
                }
                let ignored = self.engine.stats().doorbells_ignored - before;
                add_ignored(&q.bar, ignored);
                // A producer doorbell the engine took starts a latency sample on its ring
                // unless one is in flight.
                if let Some(m) = q.lat_mark.get_mut(i)
                    && m.is_none()
                    && ignored == 0
                    && self.engine.queue_state(qid) == Some(QueueState::Running)
                {
                    *m = Some((v, Instant::now()));
                }
            }
        }
        for (&key, c) in self.chans.iter_mut() {
            if c.running.is_some() {
                continue;
            }
            let seq = c.bar.load_u32(c.block + abi::CH_RUN_SEQ);
            if seq == c.seen_seq {
                continue;
            }
            c.seen_seq = seq;
            any = true;
            let lo = c.bar.load_u32(c.block + abi::CH_DESC_LO);
            let hi = c.bar.load_u32(c.block + abi::CH_DESC_HI);
            match self.engine.channel_run(key, u64::from(hi) << 32 | u64::from(lo)) {
                Ok(()) => {
                    c.running = Some(seq);
                    c.started = Some(Instant::now());
                }
                Err(_) => add_ignored(&c.bar, 1),
            }
        }
        any
    }

    /// Act on the engine's events: interrupts and channel results.
    fn handle_events(&mut self) -> bool {
        let mut any = false;
        while let Some(ev) = self.engine.poll_event() {
            any = true;
            match ev {
                // Completions for a queue that wants interrupts, or a failed queue: write its
                // indices and state back before signalling it.
                Event::Completed { qid, interrupt: true, .. } | Event::QueueError { qid, .. } => {
                    if let Some(q) = self.queues.get_mut(&qid) {
                        sample_queue(&mut self.queue_latency, q, &self.engine, qid);
                        write_queue(
                            q,
                            self.engine.queue_indices(qid),
                            self.engine.queue_state(qid),
                        );
                        signal(q.irq.as_ref());
                    }
                }
                Event::Completed { qid, interrupt: false, .. } => {
                    if let Some(q) = self.queues.get_mut(&qid) {
                        sample_queue(&mut self.queue_latency, q, &self.engine, qid);
                    }
                }
                Event::ChannelDone { key, descs, bytes, status, fault_desc, interrupt } => {
                    let Some(c) = self.chans.get_mut(&key) else { continue };
                    let Some(seq) = c.running.take() else { continue };
                    if let Some(t) = c.started.take() {
                        self.channel_latency.observe(t.elapsed());
                    }
                    let (b, r) = (&c.bar, c.block);
                    b.store_u32(r + abi::CH_STATUS, status as u32);
                    b.store_u32(r + abi::CH_DESCS, descs);
                    b.store_u32(r + abi::CH_BYTES_LO, bytes as u32);
                    b.store_u32(r + abi::CH_BYTES_HI, (bytes >> 32) as u32);
                    b.store_u32(r + abi::CH_FAULT_LO, fault_desc as u32);
                    b.store_u32(r + abi::CH_FAULT_HI, (fault_desc >> 32) as u32);
                    b.store_u32(r + abi::CH_DONE_SEQ, seq);
                    if interrupt && b.load_u32(r + abi::CH_CONTROL) & 1 != 0 {
                        signal(c.irq.as_ref());
                    }
                }
            }
        }
        any
    }

    /// Write back the indices and state of every queue that changed.
    fn write_back(&mut self) -> bool {
        let mut any = false;
        for (&qid, q) in self.queues.iter_mut() {
            any |= write_queue(q, self.engine.queue_indices(qid), self.engine.queue_state(qid));
        }
        any
    }

    /// Counters of the kernels this worker serves (none for a DMA worker).
    fn kernel_stats(&self) -> Vec<KernelStat> {
        let Some((index, of)) = self.compute else { return Vec::new() };
        self.kernels
            .list()
            .filter(|&(id, _, _)| abi::kernel_worker(id, of) == index)
            .map(|(id, name, _)| {
                let c = self.kernels.counters(id).unwrap_or_default();
                KernelStat {
                    id,
                    name,
                    runs: c.runs,
                    errors: c.errors,
                    busy_ns: self.busy_ns[id as usize],
                }
            })
            .collect()
    }

    /// Serve the kernel slots of every client: take commands from the control FIFOs, run
    /// them, write statuses and counters, signal the kernels' eventfds where asked.
    fn serve_kernels(&mut self) -> bool {
        let mut any = false;
        for k in self.kslots.iter_mut() {
            let pidx = k.pidx;
            let pending = pidx.wrapping_sub(k.cidx);
            if pending == 0 {
                continue;
            }
            if pending > abi::KFIFO_DEPTH {
                // The host claims more commands than the FIFO holds: ignore this producer
                // value (counted once) until the host writes another.
                if k.bad_pidx != Some(pidx) {
                    k.bad_pidx = Some(pidx);
                    self.kernel_fifo_ignored += 1;
                    add_ignored(&k.bar, 1);
                }
                continue;
            }
            k.bad_pidx = None;
            let mut done = 0;
            while k.cidx != pidx && done < KERNEL_BUDGET {
                if k.sts_pidx.wrapping_sub(k.reg(abi::KSTS_CIDX)) >= abi::KFIFO_DEPTH {
                    break; // status FIFO full: wait for the host
                }
                let mut raw = [0u8; abi::KCMD_SIZE];
                if k.bar.read(abi::kctl_slot(k.kernel, k.cidx), &mut raw).is_none() {
                    break;
                }
                let cmd = KernelCmd::decode(&raw);
                let mut regs = [0u32; USER_REGS];
                for (i, r) in regs.iter_mut().enumerate() {
                    *r = k.bar.load_u32(abi::kernel_user_reg(k.kernel, i));
                }
                let start = Instant::now();
                let mut st = if cmd.kernel == k.kernel {
                    let inv = Invocation { owner: k.client, cmd: &cmd, regs };
                    self.kernels.run(&mut self.engine.mem, &inv)
                } else {
                    // A command in another kernel's FIFO: refused untouched.
                    KernelStatus::err(cmd.workload, snic_compute::status::BAD_ARGS)
                };
                st.busy_ns = start.elapsed().as_nanos().try_into().unwrap_or(u64::MAX);
                self.busy_ns[k.kernel as usize] += st.busy_ns;
                let _ = k.bar.write(abi::ksts_slot(k.kernel, k.sts_pidx), &st.encode());
                k.runs = k.runs.wrapping_add(1);
                k.errors = k.errors.wrapping_add(u32::from(!st.is_ok()));
                k.busy_ns = k.busy_ns.wrapping_add(st.busy_ns);
                k.set(abi::K_RUNS, k.runs);
                k.set(abi::K_ERRORS, k.errors);
                k.set(abi::K_LAST_STATUS, st.status);
                k.set(abi::K_BUSY_NS_LO, k.busy_ns as u32);
                k.set(abi::K_BUSY_NS_HI, (k.busy_ns >> 32) as u32);
                k.sts_pidx = k.sts_pidx.wrapping_add(1);
                k.cidx = k.cidx.wrapping_add(1);
                // The status entry and counters above are visible before the index (release).
                k.set(abi::KSTS_PIDX, k.sts_pidx);
                k.set(abi::KCTL_CIDX, k.cidx);
                done += 1;
            }
            if done > 0 {
                any = true;
                if k.reg(abi::K_CONTROL) & abi::K_CONTROL_IRQ != 0 {
                    signal(k.irq.as_ref());
                }
            }
        }
        any
    }
}

/// Write a queue's changed NIC registers (indices first, state last); true when any changed.
fn write_queue(q: &mut QueueSlot, idx: Option<QueueIndices>, state: Option<QueueState>) -> bool {
    let Some(idx) = idx else { return false };
    let now = [idx.h2c_cidx, idx.c2h_cidx, idx.cmpt_pidx, state_value(state)];
    if now == q.wrote {
        return false;
    }
    let regs = [abi::Q_H2C_CIDX, abi::Q_C2H_CIDX, abi::Q_CMPT_PIDX, abi::Q_STATE];
    for i in 0..4 {
        if now[i] != q.wrote[i] {
            q.bar.store_u32(q.slot + regs[i], now[i]);
        }
    }
    q.wrote = now;
    true
}
