//! The `xdp` pipeline stage: runs an XDP program on every packet of a batch, in place.
//!
//! | return          | what the stage does                                              |
//! |-----------------|------------------------------------------------------------------|
//! | `XDP_DROP`      | counted drop [`DropReason::XdpDrop`]                             |
//! | `XDP_ABORTED`, invalid code, fault | counted drop [`DropReason::XdpAborted`]       |
//! | `XDP_PASS`      | the packet goes on                                               |
//! | `XDP_TX`        | egress = the ingress port                                        |
//! | `XDP_REDIRECT`  | egress = the port `bpf_redirect`/the devmap named ([`DropReason::NoEgress`] if it is not a port number); with `BPF_F_BROADCAST`, [`PortId::FLOOD`] |
//!
//! The context's `ingress_ifindex` is the packet's ingress port number, `rx_queue_index` the
//! worker's index (the queue RSS chose), `bpf_ktime_get_ns` the batch's `now`.
//!
//! **Hot swap.** The stage reads its program from a shared [`XdpSlot`]. [`XdpSlot::swap`]
//! installs a new program and bumps a generation number; each stage checks the number once per
//! batch and picks up the new program only then, so a batch runs entirely on one program and
//! no packet sees a half-installed one. The old program (and any maps only it used) is freed
//! once the last worker lets go of it.
//!
//! Per-action counts and the `bpf_trace_printk` lines of all workers gather in the slot for the
//! control plane ([`XdpSlot::counts`], [`XdpSlot::drain_trace`]); a traced packet's lines also
//! go to the pipeline's trace as [`TraceWhat::Detail`].

use crate::vm::{TraceBuf, Worker};
use crate::xdp::{XdpAction, XdpProgram};
use snic_pipeline::trace::TraceWhat;
use snic_pipeline::{Batch, DropReason, PortId, Stage, StageCtx};
use snic_time::Instant;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Packets per action, over every worker of a slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpCounts {
    /// `XDP_ABORTED`, invalid codes and faults.
    pub aborted: u64,
    /// `XDP_DROP`.
    pub drop: u64,
    /// `XDP_PASS`.
    pub pass: u64,
    /// `XDP_TX`.
    pub tx: u64,
    /// `XDP_REDIRECT`.
    pub redirect: u64,
    /// Runs that ended with a fault (a subset of `aborted`).
    pub faults: u64,
}

#[derive(Debug, Default)]
struct AtomicCounts([AtomicU64; 6]);

impl AtomicCounts {
    fn add(&self, c: &XdpCounts) {
        let v = [c.aborted, c.drop, c.pass, c.tx, c.redirect, c.faults];
        for (a, n) in self.0.iter().zip(v) {
            if n != 0 {
                a.fetch_add(n, Ordering::Relaxed);
            }
        }
    }
    fn get(&self) -> XdpCounts {
        let g = |i: usize| self.0[i].load(Ordering::Relaxed);
        XdpCounts { aborted: g(0), drop: g(1), pass: g(2), tx: g(3), redirect: g(4), faults: g(5) }
    }
}

/// The program an `xdp` stage runs, shared by every worker's stage and the control plane.
#[derive(Debug)]
pub struct XdpSlot {
    prog: Mutex<Arc<XdpProgram>>,
    generation: AtomicU64,
    counts: AtomicCounts,
    trace: Mutex<TraceBuf>,
}

impl XdpSlot {
    /// A slot holding `prog`.
    pub fn new(prog: Arc<XdpProgram>) -> XdpSlot {
        XdpSlot {
            prog: Mutex::new(prog),
            generation: AtomicU64::new(0),
            counts: AtomicCounts::default(),
            trace: Mutex::new(TraceBuf::default()),
        }
    }

    /// Installs `new`; stages pick it up at their next batch. Returns the program it replaced.
    pub fn swap(&self, new: Arc<XdpProgram>) -> Arc<XdpProgram> {
        let mut g = self.prog.lock().unwrap_or_else(PoisonError::into_inner);
        let old = std::mem::replace(&mut *g, new);
        self.generation.fetch_add(1, Ordering::Release);
        old
    }

    /// The program installed now.
    pub fn current(&self) -> Arc<XdpProgram> {
        self.prog.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// How many swaps happened.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Packets per action so far.
    pub fn counts(&self) -> XdpCounts {
        self.counts.get()
    }

    /// Takes the `bpf_trace_printk` lines gathered so far (bounded; see [`TraceBuf`]).
    pub fn drain_trace(&self) -> Vec<String> {
        self.trace.lock().unwrap_or_else(PoisonError::into_inner).drain()
    }

    /// The program and its generation, read together.
    fn load(&self) -> (Arc<XdpProgram>, u64) {
        let g = self.prog.lock().unwrap_or_else(PoisonError::into_inner);
        (g.clone(), self.generation.load(Ordering::Acquire))
    }
}

/// The `xdp` stage of one worker.
#[derive(Debug)]
pub struct XdpStage {
    name: String,
    slot: Arc<XdpSlot>,
    prog: Arc<XdpProgram>,
    generation: u64,
    worker: Worker,
}

impl XdpStage {
    /// A stage for worker `worker` (its index selects per-CPU map values, so it must be below
    /// the worker count the program's maps were created for: a lookup from any other index
    /// finds nothing) running the program in `slot`.
    pub fn new(slot: Arc<XdpSlot>, worker: usize) -> XdpStage {
        let (prog, generation) = slot.load();
        XdpStage { name: "xdp".into(), slot, prog, generation, worker: Worker::new(worker) }
    }

    /// The slot this stage reads its program from.
    pub fn slot(&self) -> &Arc<XdpSlot> {
        &self.slot
    }

    /// The generation of the program this stage runs now.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

impl Stage for XdpStage {
    fn name(&self) -> &str {
        &self.name
    }

    fn process(&mut self, now: Instant, batch: &mut Batch, ctx: &mut StageCtx<'_>) {
        if self.slot.generation.load(Ordering::Acquire) != self.generation {
            (self.prog, self.generation) = self.slot.load();
        }
        let prog = &self.prog;
        let w = &mut self.worker;
        let now_ns = now.as_nanos();
        let mut counts = XdpCounts::default();
        ctx.each(batch, |p, c| {
            let before = (p.headroom(), p.len());
            let lines = w.trace.len();
            let ingress = p.meta.ingress;
            // The worker stands for the receive queue (RSS chose it).
            let queue = u32::try_from(w.index).unwrap_or(u32::MAX);
            let out = prog.run(w, p, u32::from(ingress.0), queue, now_ns);
            if (p.headroom(), p.len()) != before {
                p.meta.parsed = false;
            }
            if p.meta.trace {
                if w.trace.len() > lines {
                    let new: Vec<String> = w.trace.peek_from(lines);
                    for line in new {
                        c.trace(p, || TraceWhat::Detail(format!("bpf_trace_printk: {line}")));
                    }
                }
                if let Some(f) = &out.fault {
                    let f = f.to_string();
                    c.trace(p, || TraceWhat::Detail(format!("xdp fault: {f}")));
                }
            }
            match out.action {
                XdpAction::Aborted => {
                    counts.aborted += 1;
                    counts.faults += u64::from(out.fault.is_some());
                    Err(DropReason::XdpAborted)
                }
                XdpAction::Drop => {
                    counts.drop += 1;
                    Err(DropReason::XdpDrop)
                }
                XdpAction::Pass => {
                    counts.pass += 1;
                    Ok(())
                }
                XdpAction::Tx => {
                    counts.tx += 1;
                    p.meta.egress = Some(ingress);
                    c.trace(p, || TraceWhat::Forwarded { port: ingress, how: "xdp_tx" });
                    Ok(())
                }
                XdpAction::Redirect(port) => {
                    counts.redirect += 1;
                    match u16::try_from(port) {
                        Ok(n) if !PortId(n).is_local() => {
                            p.meta.egress = Some(PortId(n));
                            c.trace(p, || TraceWhat::Forwarded {
                                port: PortId(n),
                                how: "xdp_redirect",
                            });
                            Ok(())
                        }
                        _ => Err(DropReason::NoEgress),
                    }
                }
            }
        });
        self.slot.counts.add(&counts);
        if !self.worker.trace.is_empty() {
            let lines = self.worker.trace.drain();
            let mut t = self.slot.trace.lock().unwrap_or_else(PoisonError::into_inner);
            for l in lines {
                t.push(l);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maps::MapSet;
    use crate::testing::asm::*;
    use crate::testing::unverified_xdp;
    use snic_pipeline::{StageCounters, TraceRing};

    /// A program that writes `tag` into the frame's first byte and returns `action`; with
    /// `redirect`, calls `bpf_redirect(port, 0)` and returns its result.
    fn tagger(tag: u8, action: i32, redirect: Option<i32>) -> Arc<XdpProgram> {
        let mut p = vec![ldx(4, 2, 1, 0), st(1, 2, 0, i32::from(tag)), mov64(0, action)];
        if let Some(port) = redirect {
            p.extend([mov64(1, port), mov64(2, 0), call(23)]);
        }
        p.push(exit());
        Arc::new(unverified_xdp(p, vec![0], &MapSet::default()).unwrap())
    }

    fn batch(n: usize) -> Batch {
        let mut b = Batch::new(n);
        for i in 0..n {
            let p = b.push_frame(&[0; 60]).unwrap();
            p.meta.ingress = PortId(i as u16 % 3);
        }
        b
    }

    fn process(stage: &mut XdpStage, b: &mut Batch) -> StageCounters {
        let mut c = StageCounters::new("xdp");
        let mut ring = TraceRing::new(8);
        stage.process(Instant::ZERO, b, &mut StageCtx::new(&mut c, &mut ring));
        c
    }

    #[test]
    fn actions_become_egress_ports_and_counted_drops() {
        let cases = [
            (tagger(1, 2, None), 0, 0),
            (tagger(1, 1, None), 8, 0),
            (tagger(1, 0, None), 0, 8),
            (tagger(1, 9, None), 0, 8),
        ];
        for (prog, drops, aborts) in cases {
            let slot = Arc::new(XdpSlot::new(prog));
            let mut stage = XdpStage::new(slot.clone(), 0);
            let mut b = batch(8);
            let c = process(&mut stage, &mut b);
            assert_eq!(c.drops.get(DropReason::XdpDrop), drops);
            assert_eq!(c.drops.get(DropReason::XdpAborted), aborts);
            assert_eq!(b.len() as u64, 8 - drops - aborts);
        }
        // TX: back out of the ingress port.
        let slot = Arc::new(XdpSlot::new(tagger(1, 3, None)));
        let mut b = batch(6);
        process(&mut XdpStage::new(slot.clone(), 0), &mut b);
        assert!(b.iter().all(|p| p.meta.egress == Some(p.meta.ingress)));
        assert_eq!(slot.counts().tx, 6);
        // REDIRECT: to the named port.
        let slot = Arc::new(XdpSlot::new(tagger(1, 0, Some(7))));
        let mut b = batch(4);
        process(&mut XdpStage::new(slot.clone(), 0), &mut b);
        assert!(b.iter().all(|p| p.meta.egress == Some(PortId(7))));
        assert_eq!(slot.counts(), XdpCounts { redirect: 4, ..XdpCounts::default() });
        // To the flood port (broadcast); never to the device itself or past u16.
        let mut b = batch(2);
        process(&mut XdpStage::new(Arc::new(XdpSlot::new(tagger(1, 0, Some(0xffff)))), 0), &mut b);
        assert!(b.iter().all(|p| p.meta.egress == Some(PortId::FLOOD)));
        for port in [0xfffe, 0x1_0000] {
            let mut b = batch(2);
            let s = XdpStage::new(Arc::new(XdpSlot::new(tagger(1, 0, Some(port)))), 0);
            let c = process(&mut { s }, &mut b);
            assert_eq!((b.len(), c.drops.get(DropReason::NoEgress)), (0, 2), "port {port:#x}");
        }
        // A fault: counted as aborted and as a fault.
        let bad = Arc::new(
            unverified_xdp(vec![mov64(1, 0), ldx(8, 0, 1, 0), exit()], vec![], &MapSet::default())
                .unwrap(),
        );
        let slot = Arc::new(XdpSlot::new(bad));
        let mut b = batch(3);
        let c = process(&mut XdpStage::new(slot.clone(), 0), &mut b);
        assert_eq!(c.drops.get(DropReason::XdpAborted), 3);
        assert_eq!(slot.counts().faults, 3);
    }

    #[test]
    fn swap_takes_effect_between_batches_only() {
        let a = tagger(b'A', 2, None);
        let slot = Arc::new(XdpSlot::new(a.clone()));
        let mut stage = XdpStage::new(slot.clone(), 0);
        let mut b = batch(4);
        process(&mut stage, &mut b);
        assert!(b.iter().all(|p| p.data()[0] == b'A'));
        let old = slot.swap(tagger(b'B', 2, None));
        assert!(Arc::ptr_eq(&old, &a));
        assert_eq!(slot.generation(), 1);
        let mut b = batch(4);
        process(&mut stage, &mut b);
        assert!(b.iter().all(|p| p.data()[0] == b'B'));
        assert_eq!(stage.generation(), 1);
    }

    #[test]
    fn concurrent_swaps_never_split_a_batch_or_lose_a_packet() {
        let slot = Arc::new(XdpSlot::new(tagger(0, 2, None)));
        let swapper = {
            let slot = slot.clone();
            std::thread::spawn(move || {
                for i in 1..=100u8 {
                    slot.swap(tagger(i, 2, None));
                    std::thread::yield_now();
                }
            })
        };
        let mut stage = XdpStage::new(slot.clone(), 0);
        let mut seen = 0u64;
        let mut last = 0u8;
        while !swapper.is_finished() || seen < 1000 {
            let mut b = batch(16);
            process(&mut stage, &mut b);
            assert_eq!(b.len(), 16, "no packet lost");
            let tag = b.packets()[0].data()[0];
            assert!(b.iter().all(|p| p.data()[0] == tag), "one program per batch");
            assert!(tag >= last, "programs only move forward");
            last = tag;
            seen += 16;
        }
        swapper.join().unwrap();
        let mut b = batch(1);
        process(&mut stage, &mut b);
        assert_eq!(b.packets()[0].data()[0], 100);
        assert_eq!(slot.counts().pass, seen + 1);
    }

    #[test]
    fn trace_lines_reach_the_slot_and_traced_packets() {
        // bpf_trace_printk("hi %d", 6, 42): the format on the stack.
        let fmt = u64::from_le_bytes(*b"hi %d\0\0\0");
        let p = prog([
            &lddw(3, fmt),
            &[
                stx(8, 10, -8, 3),
                mov64_reg(1, 10),
                alu64_imm(0x00, 1, -8),
                mov64(2, 6),
                mov64(3, 42),
            ],
            &[call(6), mov64(0, 2), exit()],
        ]);
        let prog = Arc::new(unverified_xdp(p, vec![], &MapSet::default()).unwrap());
        let slot = Arc::new(XdpSlot::new(prog));
        let mut stage = XdpStage::new(slot.clone(), 0);
        let mut b = batch(2);
        b.packets_mut()[1].meta.trace = true;
        let mut c = StageCounters::new("xdp");
        let mut ring = TraceRing::new(8);
        stage.process(Instant::ZERO, &mut b, &mut StageCtx::new(&mut c, &mut ring));
        assert_eq!(slot.drain_trace(), vec!["hi 42", "hi 42"]);
        let ev: Vec<_> = ring.drain().collect();
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].what, TraceWhat::Detail("bpf_trace_printk: hi 42".into()));
    }
}
