//! The [`Stage`] trait and the context a stage works in.
//!
//! A stage takes a whole [`Batch`] at a time. It reads and writes each packet's metadata (and,
//! if it must, its bytes), and removes the packets it drops. Drops go through one function,
//! [`StageCtx::each`] (or [`StageCtx::drop_packet`] inside a custom `Batch::retain`), which
//! counts the drop under exactly one [`DropReason`] and records it in the trace, so that for
//! every stage `packets_in + created == packets_out + sum(drops) + held` (`created`: packets a
//! stage made itself, a P4 program's replicas and clones, counted in
//! [`StageCounters::created`]).
//!
//! A stage may *hold* packets (an exception queue waiting for the slow path, a shaped egress
//! queue): it removes them from one batch and releases them into a later one. It reports how
//! many it holds with [`Stage::pending`] and when it next wants to run with
//! [`Stage::poll_timeout`]; the driver then calls `process` with an empty batch.

use crate::counters::StageCounters;
use crate::drop::DropReason;
use crate::trace::{TraceEvent, TraceRing, TraceWhat};
use crate::{Batch, PacketBuf};
use snic_time::Instant;

/// What a stage gets besides the batch: its counters and the trace sink.
#[derive(Debug)]
pub struct StageCtx<'a> {
    /// The stage's counters. The pipeline counts `packets_in`, `bytes_in` and `packets_out`;
    /// the stage counts drops (through [`StageCtx::drop_packet`]) and `errors`.
    pub counters: &'a mut StageCounters,
    /// Where trace events go.
    pub trace: &'a mut TraceRing,
}

impl<'a> StageCtx<'a> {
    /// A context over `counters` and `trace`.
    pub fn new(counters: &'a mut StageCounters, trace: &'a mut TraceRing) -> Self {
        StageCtx { counters, trace }
    }

    /// Record what the stage did to `pkt`, if `pkt` is traced. `what` is only called for traced
    /// packets, so an untraced packet costs one branch.
    #[inline]
    pub fn trace(&mut self, pkt: &PacketBuf, what: impl FnOnce() -> TraceWhat) {
        if pkt.meta.trace {
            self.trace_slow(pkt.meta.seq, what());
        }
    }

    #[cold]
    fn trace_slow(&mut self, seq: u64, what: TraceWhat) {
        self.trace.push(TraceEvent { seq, stage: self.counters.name.clone(), what });
    }

    /// Count `pkt` as dropped for `reason` and trace it. Returns `false`, so that inside
    /// `batch.retain(|p| ...)` a stage can write `return ctx.drop_packet(p, reason)`.
    #[inline]
    pub fn drop_packet(&mut self, pkt: &PacketBuf, reason: DropReason) -> bool {
        self.counters.drops.add(reason);
        self.trace(pkt, || TraceWhat::Dropped(reason));
        false
    }

    /// Count a non-fatal problem (the packet goes on).
    #[inline]
    pub fn error(&mut self) {
        self.counters.errors += 1;
    }

    /// Run `f` on every live packet in order; a packet for which it returns `Err(reason)` is
    /// removed from the batch and counted as one drop for `reason`. This is the one way built-in
    /// stages drop packets.
    #[inline]
    pub fn each(
        &mut self,
        batch: &mut Batch,
        mut f: impl FnMut(&mut PacketBuf, &mut Self) -> Result<(), DropReason>,
    ) {
        batch.retain(|p| match f(p, self) {
            Ok(()) => true,
            Err(reason) => self.drop_packet(p, reason),
        });
    }
}

/// One step of a pipeline over batches of packets.
///
/// Contract: `process` leaves in `batch` only the packets that go on, in order; each packet it
/// removed was counted once through [`StageCtx::drop_packet`] (or [`StageCtx::each`]), or is
/// held (counted by [`Stage::pending`]). A stage
/// adds packets only to release ones it held earlier, or as copies it made (multicast
/// replicas, clones), each counted in [`StageCounters::created`]. Stages are sans-IO: they read no clock (time is `now`) and open nothing.
pub trait Stage: Send {
    /// A short name for counters and traces (`"parse"`, `"l2fwd"`).
    fn name(&self) -> &str;

    /// Process one batch at time `now`.
    fn process(&mut self, now: Instant, batch: &mut Batch, ctx: &mut StageCtx<'_>);

    /// Packets the stage holds now, to release into a later batch.
    fn pending(&self) -> usize {
        0
    }

    /// When the stage next wants `process` called even without new packets: a shaper's next
    /// departure, a timer, or [`Instant::ZERO`] when it holds packets it could release at once.
    /// `None`: only when packets arrive.
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// True for a stage that may give packets the egress [`crate::PortId::LOCAL`] (the
    /// device itself). The pipeline takes such packets out after this stage only, so other
    /// stages cost nothing.
    fn delivers_local(&self) -> bool {
        false
    }

    /// Push out anything buffered (a capture writer). Called by [`crate::Pipeline::flush`].
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_drops_and_counts_exactly_once() {
        let mut b = Batch::new(8);
        for i in 0..6u8 {
            b.push_frame(&[i]).unwrap().meta.trace = i == 3;
        }
        let mut c = StageCounters::new("odd");
        let mut ring = TraceRing::new(8);
        let mut ctx = StageCtx::new(&mut c, &mut ring);
        ctx.each(
            &mut b,
            |p, _| {
                if p.data()[0] % 2 == 1 { Err(DropReason::Filtered) } else { Ok(()) }
            },
        );
        assert_eq!(b.iter().map(|p| p.data()[0]).collect::<Vec<_>>(), vec![0, 2, 4]);
        assert_eq!(c.drops.get(DropReason::Filtered), 3);
        assert_eq!(c.drops.total(), 3);
        let ev: Vec<TraceEvent> = ring.drain().collect();
        assert_eq!(ev.len(), 1, "only the traced packet is recorded");
        assert_eq!(ev[0].stage, "odd");
        assert_eq!(ev[0].what, TraceWhat::Dropped(DropReason::Filtered));
    }
}
