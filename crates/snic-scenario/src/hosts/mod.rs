//! Hosts: memory regions with their initial contents, RDMA objects (PDs, MRs, CQs, connected
//! QPs), DMA queues and channels on each NIC's DMA engine, lookaside kernels; the operations that use them
//! (post send / receive, DMA, kernel) and the expectations that read them (memory, CQEs).
//!
//! # One memory per NIC
//!
//! A NIC's RoCE engine owns the NIC's [`snic_dma::AddressSpace`] (host pool, on-chip and
//! on-board memory; `rnic.mem_mut()`). Every region, MR, QP ring, DMA ring and DMA channel
//! descriptor area of the hosts on that NIC is allocated there. The NIC's DMA engine ([`snic_dma::DmaEngine`], one per NIC,
//! kept here) is built over an empty address space, and for every DMA call (adding a queue,
//! a doorbell, a poll, reading completions) the RoCE engine's address space is swapped into
//! the DMA engine's public `mem` field and swapped back after: both engines see the same
//! bytes, and no memory is copied. Lookaside kernels ([`snic_compute::Kernels`], one registry
//! per NIC) run over the same address space, on behalf of the NIC ([`snic_dma::NIC_OWNER`],
//! which owns the host pool).
//!
//! # Buffers
//!
//! A buffer is `HOST.NAME[+OFF][:LEN]`: `NAME` a region or an MR of `HOST`, `OFF` and `LEN`
//! in bytes (decimal, `0x` hex or with a unit, `4KiB`). Without `LEN` it runs to the end of
//! the region or MR (a kernel argument: as long as the kernel needs). A WR's local buffers may
//! leave out `HOST.` (the QP's host). A DMA descriptor's buffer may be `addr:0x...` (a raw
//! address: a bad descriptor). The lkey / rkey of a region buffer is the first MR of the host
//! that covers it.
//!
//! # Operations
//!
//! - `post_send`: the WRs in one batch, one doorbell. A WR with `repeat = N` is posted N
//!   times, each copy's local buffers `len` further on and its remote address the WR's
//!   length further on; its `wr_id` (default: its index among the WRs posted by the
//!   operation) goes up by one per copy. Completes when every signaled WR (every WR on a
//!   `sig_all` QP) has its CQE, an error CQE included (the CQE's status is in the log and
//!   in `HOST.cq.CQ.errors`).
//! - `post_recv`: one receive WR per buffer (`wr_id` = its index), one batch; completes at once.
//! - `dma`: one descriptor per entry written into the queue's H2C or C2H ring, one doorbell;
//!   completes when every descriptor has its completion entry. A bad descriptor completes
//!   with an error status (`HOST.dma.QUEUE.errors`, `NIC.dma.errors.STATUS`): that is an
//!   outcome to check, not a failed operation. A queue-level error (bad doorbell) fails it.
//! - `dma` on a channel (`queue` names one): the descriptors written as one chain into the
//!   channel's descriptor area (allocated in host memory at build, `descs` descriptors; SOP
//!   on the first, EOP on the last, `CHAIN` with the next one's address on the others), the
//!   channel started on the first ([`snic_dma::DmaEngine::channel_run`]); completes on the
//!   engine's [`snic_dma::Event::ChannelDone`]. A chain with a bad descriptor completes the
//!   operation too: the engine validates the whole chain before it moves a byte, so none of
//!   its descriptors moves anything, the good ones before the bad one included; the status is
//!   counted in `HOST.dma.CHANNEL.errors` and `NIC.dma.channel_errors.STATUS`. A chain on a
//!   channel that still runs one, in the wrong direction, or longer than the area fails to
//!   start.
//! - `kernel`: runs at once over the NIC's memory; fails when the kernel refuses the command.
//!
//! Hosts do their work in [`Hosts::poll`], which the driver calls between testbed steps: CQs
//! are drained there (a CQE's time in the log is the time of the poll that found it), DMA
//! engines run there until idle (a batch of descriptors completes within one poll), and
//! kernels run when started. So after a poll the hosts hold no pending work of their own:
//! whatever is still pending (a `post_send` waiting for its CQEs) waits on the testbed.
//!
//! # Kernel arguments
//!
//! | kernel | buffers | other arguments |
//! |---|---|---|
//! | `gemm` | `a` (M x K), `b` (K x N), `c` (M x N) | `m`, `n`, `k`, `dtype` (`i8` or `f32`), `flags` (number, default 0) |
//! | `copy` | `src`, `dst` | `len` (default: `src`'s length) |
//! | `vadd` | `x`, `y`, `out` | `dtype`, `n` elements |
//! | `vscale` | `x`, `out` | `dtype`, `n` elements, `alpha`, `beta` (numbers, as the dtype) |
//! | `reduce` | `x` | `dtype`, `n` elements, `op` (`sum`, `min`, `max`) |
//! | `crc32c` | `data` | `init` (default 0) |
//! | `lz4_compress`, `lz4_decompress` | `src`, `dst` | |
//!
//! `dtype` is `i8`, `f32`, `i32`, `u32`, `i64`, `u64` or `f64`. A buffer without `:LEN` is
//! as long as the dimensions need (`gemm`, the vector kernels) or runs to its region's end.
//!
//! # Counters
//!
//! `HOST.cq.CQ.cqes`, `HOST.cq.CQ.errors`; `HOST.qp.QP.{send_posted, recv_posted,
//! send_cqes, recv_cqes, error_cqes}`; `HOST.dma.QUEUE.{posted, completed, errors, bytes}`;
//! `HOST.dma.CHANNEL.{runs, completed, errors, bytes, descs}` (chains started, done without
//! error, failed; bytes and descriptors moved);
//! `NIC.dma.FIELD` (the fields of [`snic_dma::DmaStats`]; `errors` and `channel_errors` as
//! totals and per status, `NIC.dma.errors.unmapped`); `NIC.kernel.{runs, errors}`.

mod build;
mod check;
mod kernel;
mod ops;
pub mod util;

use crate::ScenarioError;
use crate::load::Loaded;
use crate::load::{Buf, BufRef};
use crate::report::ExpectReport;
use crate::schema::{Action, ExpectSpec, Place};
use snic_dma::{DmaEngine, MemKind};
use snic_rdma::{CqId, Cqe, MrInfo, Pd};
use snic_testbed::{NodeId, Testbed};
use snic_time::Instant;
use std::collections::{BTreeMap, VecDeque};

/// Every host of a scenario: their memory, RDMA objects, DMA queues, the operations started on
/// them and what those produced (CQEs, DMA completions).
#[derive(Debug, Default)]
pub struct Hosts {
    hosts: BTreeMap<String, Host>,
    nics: BTreeMap<String, NicEngines>,
    /// CQ logs by `HOST.CQ`.
    cqs: BTreeMap<String, CqLog>,
    /// Send WRs posted and not yet completed, by (NIC node, QPN), oldest first.
    pending: BTreeMap<(usize, u32), VecDeque<PendingWr>>,
    ops: Vec<Op>,
}

/// An operation started by [`Hosts::start`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub usize);

#[derive(Debug)]
struct Host {
    nic: String,
    node: NodeId,
    regions: BTreeMap<String, Region>,
    pds: BTreeMap<String, Pd>,
    mrs: BTreeMap<String, Mr>,
    qps: BTreeMap<String, Qp>,
    dma: BTreeMap<String, DmaQueue>,
    channels: BTreeMap<String, DmaChannel>,
}

#[derive(Debug, Clone, Copy)]
struct Region {
    addr: u64,
    size: u64,
}

#[derive(Debug, Clone, Copy)]
struct Mr {
    info: MrInfo,
}

#[derive(Debug, Clone, Default)]
struct QpCounters {
    send_posted: u64,
    recv_posted: u64,
    send_cqes: u64,
    recv_cqes: u64,
    error_cqes: u64,
}

#[derive(Debug, Clone)]
struct Qp {
    qpn: u32,
    sig_all: bool,
    counters: QpCounters,
}

#[derive(Debug)]
struct DmaQueue {
    qid: u16,
    ring_size: u32,
    h2c_ring: u64,
    c2h_ring: u64,
    /// Producer counters of the H2C and C2H rings (what the host has doorbelled).
    pidx: [u32; 2],
    /// Completion entries consumed.
    cmpt_cidx: u32,
    posted: u64,
    completed: u64,
    errors: u64,
    bytes: u64,
    /// Dma operations waiting for completions, per direction (H2C, C2H): (op, descriptors
    /// still to complete).
    waiting: [VecDeque<(usize, u32)>; 2],
}

#[derive(Debug)]
struct DmaChannel {
    key: u32,
    dir: snic_dma::Dir,
    /// Most descriptors of one chain (the descriptor area's size).
    max_descs: u32,
    /// Where chains are written (host memory, `max_descs` descriptors).
    area: u64,
    runs: u64,
    completed: u64,
    errors: u64,
    bytes: u64,
    descs: u64,
    /// The dma operation whose chain is running.
    waiting: Option<usize>,
}

/// The engines of one NIC besides its RoCE engine.
#[derive(Debug)]
struct NicEngines {
    node: NodeId,
    dma: DmaEngine,
    kernels: snic_compute::Kernels,
    /// Queue id -> (host, queue name).
    queues: BTreeMap<u16, (String, String)>,
    /// Channel key -> (host, channel name).
    channels: BTreeMap<u32, (String, String)>,
}

#[derive(Debug)]
struct CqLog {
    node: NodeId,
    id: CqId,
    log: Vec<(Instant, Cqe)>,
    errors: u64,
}

#[derive(Debug, Clone, Copy)]
struct PendingWr {
    op: usize,
    wr_id: u64,
    signaled: bool,
}

#[derive(Debug)]
struct Op {
    /// Signaled WRs or descriptors still to complete.
    waiting: u64,
    status: Option<Result<Instant, String>>,
}

/// A buffer resolved to engine memory.
#[derive(Debug, Clone, Copy)]
struct Resolved {
    node: Option<NodeId>,
    addr: u64,
    /// The length written, or the rest of the region / MR.
    len: u64,
    /// Whether the length was written.
    explicit: bool,
    /// The MR named, or the first one covering a region buffer.
    mr: Option<MrInfo>,
}

fn kind(place: Place) -> MemKind {
    match place {
        Place::Host => MemKind::Host,
        Place::OnChip => MemKind::OnChip,
        Place::OnBoard => MemKind::OnBoard,
    }
}

impl Hosts {
    /// Build every host's regions (allocated in its NIC's engine memory, filled from `init`),
    /// PDs, MRs, CQs, QPs (connected RC pairs), DMA queues on a per-NIC DMA engine.
    pub fn build(
        loaded: &Loaded,
        seed: u64,
        tb: &mut Testbed,
        nics: &BTreeMap<String, NodeId>,
    ) -> Result<Hosts, ScenarioError> {
        build::build(loaded, seed, tb, nics).map_err(ScenarioError::Setup)
    }

    /// An empty set (a scenario without hosts).
    pub fn empty() -> Hosts {
        Hosts::default()
    }

    /// Whether this action is a host operation (PostSend, PostRecv, Dma, Kernel).
    pub fn handles(action: &Action) -> bool {
        matches!(
            action,
            Action::PostSend { .. }
                | Action::PostRecv { .. }
                | Action::Dma { .. }
                | Action::Kernel { .. }
        )
    }

    /// Start a host operation at `now`.
    pub fn start(
        &mut self,
        tb: &mut Testbed,
        now: Instant,
        action: &Action,
    ) -> Result<OpId, ScenarioError> {
        self.start_op(tb, now, action).map_err(ScenarioError::Run)
    }

    /// Work between testbed steps at `now`: drain every CQ into its log, run DMA engines,
    /// finish ops. Returns work done (0: none).
    pub fn poll(&mut self, tb: &mut Testbed, now: Instant) -> usize {
        self.poll_cqs(tb, now) + self.poll_dma(tb, now)
    }

    /// None: pending; Some(Ok(t)): completed at t; Some(Err(why)): failed.
    pub fn status(&self, op: OpId) -> Option<Result<Instant, String>> {
        match self.ops.get(op.0) {
            Some(o) => o.status.clone(),
            None => Some(Err(format!("no host operation {}", op.0))),
        }
    }

    /// `HOST.cq.CQ.cqes`, `NIC.dma.FIELD`, `HOST.dma.QUEUE.FIELD`, ...
    pub fn counters(&self, out: &mut BTreeMap<String, u64>) {
        for (name, cq) in &self.cqs {
            let (h, c) = name.split_once('.').unwrap_or((name, ""));
            out.insert(format!("{h}.cq.{c}.cqes"), cq.log.len() as u64);
            out.insert(format!("{h}.cq.{c}.errors"), cq.errors);
        }
        for (h, host) in &self.hosts {
            for (q, qp) in &host.qps {
                let c = &qp.counters;
                for (f, v) in [
                    ("send_posted", c.send_posted),
                    ("recv_posted", c.recv_posted),
                    ("send_cqes", c.send_cqes),
                    ("recv_cqes", c.recv_cqes),
                    ("error_cqes", c.error_cqes),
                ] {
                    out.insert(format!("{h}.qp.{q}.{f}"), v);
                }
            }
            for (q, dq) in &host.dma {
                for (f, v) in [
                    ("posted", dq.posted),
                    ("completed", dq.completed),
                    ("errors", dq.errors),
                    ("bytes", dq.bytes),
                ] {
                    out.insert(format!("{h}.dma.{q}.{f}"), v);
                }
            }
            for (c, ch) in &host.channels {
                for (f, v) in [
                    ("runs", ch.runs),
                    ("completed", ch.completed),
                    ("errors", ch.errors),
                    ("bytes", ch.bytes),
                    ("descs", ch.descs),
                ] {
                    out.insert(format!("{h}.dma.{c}.{f}"), v);
                }
            }
        }
        for (n, e) in &self.nics {
            dma_counters(n, e.dma.stats(), out);
            out.insert(format!("{n}.kernel.runs"), e.kernels.runs());
            out.insert(format!("{n}.kernel.errors"), e.kernels.errors());
        }
    }

    /// CQEs polled so far from `HOST.CQ`, with when.
    pub fn cqes(&self, cq: &str) -> Option<&[(Instant, Cqe)]> {
        self.cqs.get(cq.trim()).map(|c| c.log.as_slice())
    }

    /// Bytes of `HOST.REGION[+OFF][:LEN]`.
    pub fn read(&self, tb: &Testbed, buf: &str) -> Result<Vec<u8>, ScenarioError> {
        self.read_buf(tb, buf).map_err(ScenarioError::Run)
    }

    /// Check a `memory` or `cqes` expectation (None for other kinds).
    pub fn check(&self, tb: &Testbed, loaded: &Loaded, spec: &ExpectSpec) -> Option<ExpectReport> {
        if let Some(buf) = &spec.memory {
            return Some(self.check_memory(tb, loaded, spec, buf));
        }
        if let Some(cq) = &spec.cqes {
            return Some(self.check_cqes(spec, cq));
        }
        None
    }

    /// SHA-256 (lower-case hex) of a buffer's bytes now (golden data).
    pub fn memory_sha256(&self, tb: &Testbed, buf: &str) -> Result<String, ScenarioError> {
        Ok(util::sha256_hex(&self.read(tb, buf)?))
    }

    /// The CQEs polled from `HOST.CQ` as JSON (golden data): an array of objects with
    /// `wr_id`, `status`, `opcode`, `byte_len` and, when set, `imm`; `null` for an unknown CQ.
    pub fn cqe_json(&self, cq: &str) -> serde_json::Value {
        match self.cqes(cq) {
            Some(log) => log.iter().map(|(_, c)| check::cqe_to_json(c)).collect(),
            None => serde_json::Value::Null,
        }
    }

    /// Resolve a buffer; `host` is the host a reference without `HOST.` belongs to; `node`
    /// the NIC a raw address is in.
    fn resolve(
        &self,
        s: &str,
        host: Option<&str>,
        node: Option<NodeId>,
    ) -> Result<Resolved, String> {
        match crate::load::parse_buf(s, host)? {
            Buf::Raw { addr, len } => Ok(Resolved {
                node,
                addr,
                len: len.unwrap_or(0),
                explicit: len.is_some(),
                mr: None,
            }),
            Buf::Named(BufRef { host: hname, name, offset: off, len }) => {
                let hs = self
                    .hosts
                    .get(&hname)
                    .ok_or_else(|| format!("buffer {s:?}: no host {hname}"))?;
                let (base, size, mr) = if let Some(r) = hs.regions.get(&name) {
                    (r.addr, r.size, None)
                } else if let Some(m) = hs.mrs.get(&name) {
                    (m.info.addr, m.info.len, Some(m.info))
                } else {
                    return Err(format!("buffer {s:?}: host {hname} has no region or MR {name}"));
                };
                let rest = size.checked_sub(off).ok_or_else(|| {
                    format!("buffer {s:?}: offset {off} is past its end ({size} bytes)")
                })?;
                let l = len.unwrap_or(rest);
                if l > rest {
                    return Err(format!(
                        "buffer {s:?}: {l} bytes at offset {off} run past its end ({size} bytes)"
                    ));
                }
                let addr = base + off;
                let mr = mr.or_else(|| {
                    hs.mrs
                        .values()
                        .map(|m| m.info)
                        .find(|m| m.addr <= addr && addr + l <= m.addr + m.len)
                });
                Ok(Resolved { node: Some(hs.node), addr, len: l, explicit: len.is_some(), mr })
            }
        }
    }

    fn read_buf(&self, tb: &Testbed, buf: &str) -> Result<Vec<u8>, String> {
        let r = self.resolve(buf, None, None)?;
        let node = r.node.ok_or_else(|| format!("buffer {buf:?}: a raw address names no NIC"))?;
        let nic =
            tb.nic(node).ok_or_else(|| format!("buffer {buf:?}: its NIC is not in the testbed"))?;
        let len = usize::try_from(r.len).map_err(|_| format!("buffer {buf:?} is too long"))?;
        nic.rnic
            .mem()
            .slice(r.addr, len)
            .map(<[u8]>::to_vec)
            .map_err(|e| format!("buffer {buf:?}: {e}"))
    }
}

/// `NIC.dma.FIELD` for every field of the engine's counters.
fn dma_counters(nic: &str, s: &snic_dma::DmaStats, out: &mut BTreeMap<String, u64>) {
    let snic_dma::DmaStats {
        descs,
        h2c_bytes,
        c2h_bytes,
        completions,
        errors,
        doorbells,
        doorbells_ignored,
        cmpt_full_stalls,
        stream_rx,
        stream_tx,
        stream_drops,
        channel_runs,
        channel_errors,
        flushed_silent,
    } = s;
    for (f, v) in [
        ("descs", descs),
        ("h2c_bytes", h2c_bytes),
        ("c2h_bytes", c2h_bytes),
        ("completions", completions),
        ("doorbells", doorbells),
        ("doorbells_ignored", doorbells_ignored),
        ("cmpt_full_stalls", cmpt_full_stalls),
        ("stream_rx", stream_rx),
        ("stream_tx", stream_tx),
        ("channel_runs", channel_runs),
        ("flushed_silent", flushed_silent),
    ] {
        out.insert(format!("{nic}.dma.{f}"), *v);
    }
    for (f, arr) in [("errors", errors), ("channel_errors", channel_errors)] {
        out.insert(format!("{nic}.dma.{f}"), arr.iter().sum());
        for (code, v) in arr.iter().enumerate().skip(1) {
            if let Some(st) = snic_dma::Status::from_code(code as u8) {
                out.insert(format!("{nic}.dma.{f}.{}", util::snake(&format!("{st:?}"))), *v);
            }
        }
    }
    out.insert(format!("{nic}.dma.stream_drops"), stream_drops.iter().sum());
}
