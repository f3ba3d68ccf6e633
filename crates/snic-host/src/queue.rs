//! DMA queues (rings in registered host memory, doorbells in the BAR) and channels.

use std::sync::Arc;
use std::time::Duration;

use snic_dma::desc::{CMPT_SIZE, DESC_SIZE, Descriptor, Dir, cmpt_word};
use snic_dma::engine::{CHANNELS_PER_DIR, MAX_QUEUES, MAX_RING};
use snic_dma::{Completion, Status};
use snic_hostif::abi;
use snic_hostif::proto::{DirName, QueueMode, Request, Response};
use snic_hostif::shm::EventFd;

use crate::conn::{HostBuf, Inner, unexpected};
use crate::deadline::Deadline;
use crate::error::{HostError, Result};

/// How to open a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueOpts {
    /// Memory-mapped or streaming.
    pub mode: QueueMode,
    /// Descriptors per ring (power of two, 2 ..= 32768).
    pub ring_size: u32,
    /// Completion entries (power of two, 2 ..= 32768).
    pub cmpt_size: u32,
    /// Alignment rule for descriptor addresses and lengths (power of two).
    pub align: u32,
    /// Interrupt (an eventfd snic signals) instead of polled completion.
    pub interrupt: bool,
    /// Streaming: deliver H2C packets to this queue's C2H ring (`None`: to the queue itself).
    pub stream_to: Option<u16>,
}

impl Default for QueueOpts {
    fn default() -> QueueOpts {
        QueueOpts {
            mode: QueueMode::Mm,
            ring_size: 256,
            cmpt_size: 512,
            align: 1,
            interrupt: false,
            stream_to: None,
        }
    }
}

/// A DMA queue. Its H2C ring, C2H ring and completion ring live (in that order) in one
/// registered [`HostBuf`] it owns. Dropping it deletes the queue (best effort).
#[derive(Debug)]
pub struct Queue {
    inner: Arc<Inner>,
    ring: HostBuf,
    qid: u16,
    worker: u32,
    ring_size: u32,
    cmpt_size: u32,
    /// Producer indices written (H2C, C2H), free-running.
    pidx: [u32; 2],
    /// Completion entries consumed, free-running.
    cmpt_cidx: u32,
    /// Ring consumer indices (H2C, C2H) learnt from completion entries: they can be ahead
    /// of the BAR write-back, which snic updates after writing the entries.
    seen_cidx: [u32; 2],
    irq: Option<EventFd>,
}

impl Queue {
    pub(crate) fn open(inner: &Arc<Inner>, opts: QueueOpts) -> Result<Queue> {
        let pow2 = |v: u32| v.is_power_of_two() && (2..=MAX_RING).contains(&v);
        if !pow2(opts.ring_size) || !pow2(opts.cmpt_size) {
            return Err(HostError::OutOfRange(format!(
                "ring sizes {} / {} (powers of two in 2..={MAX_RING})",
                opts.ring_size, opts.cmpt_size
            )));
        }
        let ring_bytes = opts.ring_size as usize * DESC_SIZE;
        let total = 2 * ring_bytes + opts.cmpt_size as usize * CMPT_SIZE;
        let ring = inner.alloc_host(total)?;
        let irq = if opts.interrupt { Some(EventFd::new()?) } else { None };
        let req = Request::AddQueue {
            mode: opts.mode,
            ring_size: opts.ring_size,
            cmpt_size: opts.cmpt_size,
            h2c_ring: ring.iova(),
            c2h_ring: ring.iova() + ring_bytes as u64,
            cmpt_ring: ring.iova() + 2 * ring_bytes as u64,
            align: opts.align,
            interrupt: opts.interrupt,
            stream_to: opts.stream_to,
        };
        let fds: Vec<_> = irq.iter().map(|e| e.fd()).collect();
        let resp = inner.request(&req, &fds)?.0;
        let Response::Queue { qid, worker } = resp else { return Err(unexpected(&resp)) };
        let mut q = Queue {
            inner: Arc::clone(inner),
            ring,
            qid,
            worker,
            ring_size: opts.ring_size,
            cmpt_size: opts.cmpt_size,
            pidx: [0; 2],
            cmpt_cidx: 0,
            seen_cidx: [0; 2],
            irq,
        };
        // From here on, dropping `q` deletes the queue.
        if qid >= MAX_QUEUES || worker >= inner.workers() {
            return Err(HostError::Protocol(format!("queue {qid} on worker {worker}")));
        }
        q.start()?;
        Ok(q)
    }

    /// Queue id.
    pub fn qid(&self) -> u16 {
        self.qid
    }
    /// The worker serving this queue.
    pub fn worker(&self) -> u32 {
        self.worker
    }
    /// Descriptors per ring.
    pub fn ring_size(&self) -> u32 {
        self.ring_size
    }
    /// The buffer holding the rings (H2C ring at 0, C2H ring after it, then completions).
    pub fn ring_buf(&self) -> &HostBuf {
        &self.ring
    }

    fn reg(&self, r: usize) -> usize {
        abi::queue_slot(self.qid) + r
    }

    fn ring_off(&self, dir: Dir, slot: u32) -> usize {
        let base = usize::from(dir.code()) * self.ring_size as usize * DESC_SIZE;
        base + (slot & (self.ring_size - 1)) as usize * DESC_SIZE
    }

    fn cmpt_off(&self) -> usize {
        2 * self.ring_size as usize * DESC_SIZE
    }

    /// Free slots of a ring: ring size minus the descriptors posted that snic has not
    /// finished (by its consumer-index write-back in the BAR, or the index of the last
    /// completion consumed for the ring, whichever is further).
    pub fn free_slots(&self, dir: Dir) -> u32 {
        let cidx_reg = match dir {
            Dir::H2c => abi::Q_H2C_CIDX,
            Dir::C2h => abi::Q_C2H_CIDX,
        };
        let i = usize::from(dir.code());
        let p = self.pidx[i];
        let wb = p.wrapping_sub(self.inner.bar.load_u32(self.reg(cidx_reg)));
        let seen = p.wrapping_sub(self.seen_cidx[i]);
        // A value "ahead" of pidx wraps to a huge distance: never trust it.
        let out = wb.min(seen);
        self.ring_size.saturating_sub(out)
    }

    /// Write `d` into the next slot of the `dir` ring (no doorbell).
    /// [`HostError::RingFull`] when no slot is free (by [`Queue::free_slots`], which reads the
    /// write-back register only when the completions consumed say the ring is full).
    pub fn post(&mut self, dir: Dir, d: &Descriptor) -> Result<()> {
        let i = usize::from(dir.code());
        let p = self.pidx[i];
        if p.wrapping_sub(self.seen_cidx[i]) >= self.ring_size && self.free_slots(dir) == 0 {
            return Err(HostError::RingFull);
        }
        self.ring.write(self.ring_off(dir, p), &d.encode())?;
        self.pidx[i] = p.wrapping_add(1);
        Ok(())
    }

    /// Producer index of the `dir` ring: descriptors posted since the queue (re)started,
    /// free-running. A completion whose `index` equals it finished everything posted.
    pub fn pidx(&self, dir: Dir) -> u32 {
        self.pidx[usize::from(dir.code())]
    }

    /// Ring the `dir` doorbell: publish the producer index, kick the worker if it sleeps.
    pub fn doorbell(&mut self, dir: Dir) {
        self.store_pidx(dir, self.pidx(dir));
    }

    fn store_pidx(&self, dir: Dir, pidx: u32) {
        let r = match dir {
            Dir::H2c => abi::Q_H2C_PIDX,
            Dir::C2h => abi::Q_C2H_PIDX,
        };
        self.inner.bar.store_u32(self.reg(r), pidx);
        self.inner.kick(self.worker);
    }

    /// Write any producer index to the `dir` doorbell (for tests of bad input); the
    /// host-side index [`Queue::post`] uses is not changed.
    pub fn raw_doorbell(&mut self, dir: Dir, pidx: u32) {
        self.store_pidx(dir, pidx);
    }

    /// Write raw bytes into slot `slot` of the `dir` ring (for tests of bad input).
    pub fn write_slot(&mut self, dir: Dir, slot: u32, bytes: &[u8; DESC_SIZE]) -> Result<()> {
        if slot >= self.ring_size {
            return Err(HostError::OutOfRange(format!("slot {slot} of {}", self.ring_size)));
        }
        self.ring.write(self.ring_off(dir, slot), bytes)
    }

    /// Consume the completion entries snic wrote (up to `out.len()`), then publish the new
    /// completion consumer index. Returns how many were consumed.
    pub fn poll(&mut self, out: &mut [Completion]) -> usize {
        let base = self.cmpt_off();
        let map = self.ring.map();
        let mut n = 0;
        while n < out.len() {
            let c = self.cmpt_cidx;
            // Colour 1 on the first pass over the ring, 0 on the second, and so on.
            let want = if (c / self.cmpt_size) & 1 == 0 { cmpt_word::COLOR } else { 0 };
            let off = base + (c & (self.cmpt_size - 1)) as usize * CMPT_SIZE;
            let word = map.load_u32(off + 12);
            if word & cmpt_word::COLOR != want {
                break;
            }
            let mut b = [0u8; CMPT_SIZE];
            if map.read(off, &mut b[..12]).is_none() {
                break;
            }
            b[12..].copy_from_slice(&word.to_le_bytes());
            let entry = Completion::decode(&b);
            if let Some(d) = Dir::from_code(entry.dir) {
                // Only a forward move within the posted window counts.
                let i = usize::from(d.code());
                let ahead = entry.index.wrapping_sub(self.seen_cidx[i]);
                if ahead <= self.pidx[i].wrapping_sub(self.seen_cidx[i]) {
                    self.seen_cidx[i] = entry.index;
                }
            }
            out[n] = entry;
            n += 1;
            self.cmpt_cidx = c.wrapping_add(1);
        }
        if n > 0 {
            self.inner.bar.store_u32(self.reg(abi::Q_CMPT_CIDX), self.cmpt_cidx);
            // The worker may be stalled on a full completion ring.
            self.inner.kick(self.worker);
        }
        n
    }

    /// Wait for at least one completion (up to `timeout`): busy-poll for a polled queue;
    /// for an interrupt queue, sleep on its eventfd between polls.
    pub fn wait(&mut self, out: &mut [Completion], timeout: Duration) -> Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        let mut deadline = Deadline::new(timeout);
        loop {
            let n = self.poll(out);
            if n > 0 {
                return Ok(n);
            }
            deadline.pause(self.irq.as_ref())?;
        }
    }

    /// Stop the queue (snic flushes outstanding descriptors with `Flushed` completions).
    pub fn stop(&mut self) -> Result<()> {
        self.inner.request_ok(&Request::StopQueue { qid: self.qid }, &[])
    }

    /// Start the queue: host-side indices and colour start over, the queue's host registers
    /// are zeroed, then snic starts it (zeroing the completion ring).
    pub fn start(&mut self) -> Result<()> {
        self.pidx = [0; 2];
        self.cmpt_cidx = 0;
        self.seen_cidx = [0; 2];
        let bar = &self.inner.bar;
        bar.store_u32(self.reg(abi::Q_H2C_PIDX), 0);
        bar.store_u32(self.reg(abi::Q_C2H_PIDX), 0);
        bar.store_u32(self.reg(abi::Q_CMPT_CIDX), 0);
        if let Some(e) = &self.irq {
            e.take()?;
        }
        self.inner.request_ok(&Request::StartQueue { qid: self.qid }, &[])
    }

    /// The queue's state register (Q_STATE: [`abi::QSTATE_RUNNING`] ...).
    pub fn state(&self) -> u32 {
        self.inner.bar.load_u32(self.reg(abi::Q_STATE))
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        let _ = self.inner.request_ok(&Request::DeleteQueue { qid: self.qid }, &[]);
    }
}

/// What one channel run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelResult {
    /// Raw [`Status`] code of the run (0 = OK).
    pub status: u32,
    /// Descriptors completed.
    pub descs: u32,
    /// Bytes moved.
    pub bytes: u64,
    /// Address of the failing descriptor (0 on success).
    pub fault_desc: u64,
}

impl ChannelResult {
    /// The status, decoded (`None` for a code snic does not define).
    pub fn status(&self) -> Option<Status> {
        u8::try_from(self.status).ok().and_then(Status::from_code)
    }
    /// Whether the run succeeded.
    pub fn ok(&self) -> bool {
        self.status == Status::Ok as u32
    }
}

/// An XDMA-like channel: runs one descriptor chain at a time.
#[derive(Debug)]
pub struct Channel {
    inner: Arc<Inner>,
    block: usize,
    worker: u32,
    /// Last run sequence written.
    seq: u32,
    /// A run was started and its result not yet returned.
    pending: bool,
    irq: Option<EventFd>,
}

impl Channel {
    pub(crate) fn open(
        inner: &Arc<Inner>,
        dir: Dir,
        index: u8,
        interrupt: bool,
    ) -> Result<Channel> {
        if index >= CHANNELS_PER_DIR {
            return Err(HostError::OutOfRange(format!(
                "channel {index} (there are {CHANNELS_PER_DIR} per direction)"
            )));
        }
        let irq = if interrupt { Some(EventFd::new()?) } else { None };
        let dname = match dir {
            Dir::H2c => DirName::H2c,
            Dir::C2h => DirName::C2h,
        };
        let req = Request::SetChannel { dir: dname, index, align: 1, interrupt };
        let fds: Vec<_> = irq.iter().map(|e| e.fd()).collect();
        let resp = inner.request(&req, &fds)?.0;
        let Response::Channel { worker } = resp else { return Err(unexpected(&resp)) };
        if worker >= inner.workers() {
            return Err(HostError::Protocol(format!("channel on worker {worker}")));
        }
        let block = abi::channel_block(dir, index);
        let seq = inner.bar.load_u32(block + abi::CH_RUN_SEQ);
        Ok(Channel { inner: Arc::clone(inner), block, worker, seq, pending: false, irq })
    }

    /// Run the chain whose first descriptor is at `first_desc`: write DESC_LO/HI, increment
    /// RUN_SEQ, kick the worker if it sleeps. Refused (`channel_busy`) while a run is going.
    pub fn start(&mut self, first_desc: u64) -> Result<()> {
        let bar = &self.inner.bar;
        if self.pending && bar.load_u32(self.block + abi::CH_DONE_SEQ) != self.seq {
            return Err(HostError::Refused {
                code: "channel_busy".into(),
                message: "the channel still runs its previous chain".into(),
            });
        }
        if let Some(e) = &self.irq {
            e.take()?;
        }
        bar.store_u32(self.block + abi::CH_DESC_LO, first_desc as u32);
        bar.store_u32(self.block + abi::CH_DESC_HI, (first_desc >> 32) as u32);
        self.seq = self.seq.wrapping_add(1);
        bar.store_u32(self.block + abi::CH_RUN_SEQ, self.seq);
        self.pending = true;
        self.inner.kick(self.worker);
        Ok(())
    }

    /// The result of the run started last, once snic finished it (returned once).
    pub fn poll(&mut self) -> Option<ChannelResult> {
        if !self.pending {
            return None;
        }
        let bar = &self.inner.bar;
        let b = self.block;
        if bar.load_u32(b + abi::CH_DONE_SEQ) != self.seq {
            return None;
        }
        self.pending = false;
        let u64_at = |lo: usize, hi: usize| {
            u64::from(bar.load_u32(b + lo)) | (u64::from(bar.load_u32(b + hi)) << 32)
        };
        Some(ChannelResult {
            status: bar.load_u32(b + abi::CH_STATUS),
            descs: bar.load_u32(b + abi::CH_DESCS),
            bytes: u64_at(abi::CH_BYTES_LO, abi::CH_BYTES_HI),
            fault_desc: u64_at(abi::CH_FAULT_LO, abi::CH_FAULT_HI),
        })
    }

    /// Wait for the run's result: busy-poll, or sleep on the interrupt eventfd.
    pub fn wait(&mut self, timeout: Duration) -> Result<ChannelResult> {
        if !self.pending {
            return Err(HostError::OutOfRange("no channel run to wait for".into()));
        }
        let mut deadline = Deadline::new(timeout);
        loop {
            if let Some(r) = self.poll() {
                return Ok(r);
            }
            deadline.pause(self.irq.as_ref())?;
        }
    }
}
