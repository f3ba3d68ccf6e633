//! Chained offloads, sans-IO: work the NIC carries out by itself from one host command.
//!
//! RecoNIC's networked matrix multiplication (seed 003, Fig. 6) has the host drive every step:
//! post RDMA READs, poll the CQ, send the kernel command, wait for its status, then act on the
//! result. A chain hands the NIC the whole plan at once:
//!
//! ```text
//!   host: one ChainSpec ──> Chains::start ── RDMA READs, one doorbell ──> peer
//!                           Chains::on_cqe <── READ completions (taken, never shown to the host)
//!                           Chains::progress: every READ done ──> the lookaside kernel
//!                                             ──> RDMA WRITE of the result to the peer (or not)
//!                           Chains::progress <── WRITE completion ──> one ChainDone for the host
//! ```
//!
//! The chain's own work requests carry wr_ids with [`CHAIN_TAG`] set, so the driver can tell
//! their completions from the host's on the same CQ ([`Chains::on_cqe`]). The kernel runs
//! inline in [`Chains::progress`], over the engine's address space (where the READs landed),
//! for the client that posted the chain; the driver measures its time with the [`Clock`] it
//! passes (the testbed's simulated clock says 0).
//!
//! Errors end the chain and are reported in its [`ChainDone`]: a failed READ (the QP then
//! flushes: later completions of the same chain are taken and ignored), a refused kernel
//! command (its status code; nothing was written), a failed WRITE.

use std::collections::BTreeMap;

use serde::Serialize;
use snic_compute::{Invocation, KernelCmd, KernelStatus, Kernels};
use snic_rdma::{Cqe, Remote, Rnic, SendWr, SgList, Sge, VerbsError, WcOpcode, WcStatus, WrOp};
use snic_time::{Clock, Instant};

/// Set in the wr_id of every work request a chain posts.
pub const CHAIN_TAG: u64 = 1 << 63;
/// Most READs one chain may post.
pub const MAX_READS: usize = 64;
/// Most chains in flight at once (per [`Chains`]).
pub const MAX_CHAINS: usize = 256;

/// One RDMA READ of a chain: the peer's `remote` bytes into the local `local` buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainRead {
    /// Where the data is at the peer.
    pub remote: Remote,
    /// Where it lands (usually device memory), inside an MR of the QP's PD.
    pub local: Sge,
}

/// What a chain does once the kernel succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainEnd {
    /// Nothing more: the host is told and fetches the result itself.
    Notify,
    /// RDMA WRITE `local` (the kernel's output) to the peer's `remote`.
    WriteBack {
        /// The result, inside an MR of the QP's PD.
        local: Sge,
        /// Where it goes at the peer.
        remote: Remote,
    },
}

/// The whole plan of one chained command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainSpec {
    /// The connected RC QP the READs and the WRITE go on.
    pub qpn: u32,
    /// The host's id for the chain, echoed in its [`ChainDone`] (any value; the chain's own
    /// work requests use ids of their own).
    pub wr_id: u64,
    /// The READs (1..=[`MAX_READS`]), posted as one batch.
    pub reads: Vec<ChainRead>,
    /// The kernel command run when every READ completed.
    pub kernel: KernelCmd,
    /// What follows a successful kernel.
    pub end: ChainEnd,
}

/// How a chain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum ChainOutcome {
    /// Every step succeeded.
    Done,
    /// A READ completed with an error.
    ReadFailed {
        /// Its status (debug name).
        #[serde(serialize_with = "wc_name")]
        status: WcStatus,
    },
    /// The kernel refused the command or failed (its status code; nothing written).
    KernelFailed {
        /// [`snic_compute::status`] code.
        code: u32,
    },
    /// Posting the WRITE failed.
    PostFailed,
    /// The WRITE completed with an error.
    WriteFailed {
        /// Its status.
        #[serde(serialize_with = "wc_name")]
        status: WcStatus,
    },
}

fn wc_name<S: serde::Serializer>(s: &WcStatus, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(&format!("{s:?}"))
}

/// The one completion of a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ChainDone {
    /// The QP.
    pub qpn: u32,
    /// The host's id.
    pub wr_id: u64,
    /// How it ended.
    pub outcome: ChainOutcome,
    /// The kernel's status (default when the kernel did not run).
    #[serde(skip)]
    pub kernel: KernelStatus,
    /// Kernel result (as in its status).
    pub result: u64,
    /// Bytes fetched by the READs.
    pub fetched: u64,
    /// Bytes written back.
    pub written: u64,
    /// From the start to the last READ completion.
    pub fetch_ns: u64,
    /// The kernel's run time.
    pub kernel_ns: u64,
    /// From posting the WRITE to its completion (0 without one).
    pub write_ns: u64,
}

impl ChainDone {
    /// Whether every step succeeded.
    pub fn is_ok(&self) -> bool {
        self.outcome == ChainOutcome::Done
    }
}

/// Why a chain could not start (nothing was posted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainError {
    /// No READs, or more than [`MAX_READS`].
    BadReads,
    /// [`MAX_CHAINS`] are in flight.
    TooMany,
    /// The engine refused the batch (bad QP, state, SQ full, bad SGE).
    Post(VerbsError),
}

impl std::fmt::Display for ChainError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChainError::BadReads => write!(f, "a chain takes 1..={MAX_READS} READs"),
            ChainError::TooMany => write!(f, "{MAX_CHAINS} chains are already in flight"),
            ChainError::Post(e) => write!(f, "posting the READs: {e}"),
        }
    }
}

impl std::error::Error for ChainError {}

#[derive(Debug)]
enum Phase {
    /// READs outstanding.
    Fetching { left: usize },
    /// Every READ done: run the kernel at the next `progress`.
    Ready,
    /// The WRITE is outstanding.
    Writing { since: Instant },
    /// Finished (reported at the next `progress`).
    Finished(ChainOutcome),
}

#[derive(Debug)]
struct Job {
    spec: ChainSpec,
    owner: u32,
    phase: Phase,
    started: Instant,
    fetch_ns: u64,
    kernel: KernelStatus,
    kernel_ns: u64,
    write_ns: u64,
}

/// The chains in flight on one engine.
#[derive(Debug, Default)]
pub struct Chains {
    jobs: BTreeMap<u32, Job>,
    next: u32,
    /// Tagged completions of chains that already ended (flushes after an error).
    stray: u64,
}

/// wr_id of READ `index` (or the WRITE, `index = u32::MAX >> 1`) of chain `id`.
const fn tag(id: u32, index: u32) -> u64 {
    CHAIN_TAG | (id as u64) << 31 | (index as u64 & 0x7FFF_FFFF)
}

const WRITE_INDEX: u32 = 0x7FFF_FFFF;

impl Chains {
    /// No chains.
    pub fn new() -> Chains {
        Chains::default()
    }

    /// Whether a wr_id is one a chain posted.
    pub const fn is_chain_wr(wr_id: u64) -> bool {
        wr_id & CHAIN_TAG != 0
    }

    /// Chains in flight.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether none is in flight.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Whether a chain is in flight on `qpn`.
    pub fn on_qp(&self, qpn: u32) -> bool {
        self.jobs.values().any(|j| j.spec.qpn == qpn)
    }

    /// Completions taken for chains that had already ended.
    pub fn stray(&self) -> u64 {
        self.stray
    }

    /// Start a chain for client `owner`: post its READs on `spec.qpn` as one batch (one
    /// doorbell). Returns the chain's id.
    pub fn start(
        &mut self,
        rnic: &mut Rnic,
        owner: u32,
        spec: ChainSpec,
        now: Instant,
    ) -> Result<u32, ChainError> {
        if spec.reads.is_empty() || spec.reads.len() > MAX_READS {
            return Err(ChainError::BadReads);
        }
        if self.jobs.len() >= MAX_CHAINS {
            return Err(ChainError::TooMany);
        }
        let id = self.free_id();
        let wrs: Vec<SendWr> = spec
            .reads
            .iter()
            .enumerate()
            .map(|(i, r)| {
                SendWr::new(
                    tag(id, i as u32),
                    WrOp::Read { remote: r.remote },
                    SgList::one(r.local),
                )
            })
            .collect();
        rnic.post_send_batch(spec.qpn, &wrs, now).map_err(ChainError::Post)?;
        let left = spec.reads.len();
        self.jobs.insert(
            id,
            Job {
                spec,
                owner,
                phase: Phase::Fetching { left },
                started: now,
                fetch_ns: 0,
                kernel: KernelStatus::default(),
                kernel_ns: 0,
                write_ns: 0,
            },
        );
        Ok(id)
    }

    fn free_id(&mut self) -> u32 {
        loop {
            let id = self.next & 0xFFFF_FFFF >> 1;
            self.next = self.next.wrapping_add(1);
            if !self.jobs.contains_key(&id) {
                return id;
            }
        }
    }

    /// Offer a completion: true when it belongs to a chain (the chain takes it; the host must
    /// not see it), false when it is the host's.
    pub fn on_cqe(&mut self, cqe: &Cqe, now: Instant) -> bool {
        if !Self::is_chain_wr(cqe.wr_id) {
            return false;
        }
        let id = ((cqe.wr_id & !CHAIN_TAG) >> 31) as u32;
        let index = (cqe.wr_id & 0x7FFF_FFFF) as u32;
        let Some(job) = self.jobs.get_mut(&id) else {
            self.stray += 1;
            return true;
        };
        match (&mut job.phase, index) {
            (Phase::Fetching { left }, i) if i != WRITE_INDEX => {
                if cqe.status != WcStatus::Success || cqe.opcode != WcOpcode::RdmaRead {
                    job.phase = Phase::Finished(ChainOutcome::ReadFailed { status: cqe.status });
                } else {
                    *left -= 1;
                    if *left == 0 {
                        job.fetch_ns = now.saturating_duration_since(job.started).as_nanos() as u64;
                        job.phase = Phase::Ready;
                    }
                }
            }
            (Phase::Writing { since }, WRITE_INDEX) => {
                job.write_ns = now.saturating_duration_since(*since).as_nanos() as u64;
                job.phase = Phase::Finished(if cqe.status == WcStatus::Success {
                    ChainOutcome::Done
                } else {
                    ChainOutcome::WriteFailed { status: cqe.status }
                });
            }
            // A flushed completion after the chain already failed.
            _ => self.stray += 1,
        }
        true
    }

    /// Move every chain on: run the kernels of chains whose READs are all in, post their
    /// WRITEs, and return the chains that ended (each exactly once).
    pub fn progress(
        &mut self,
        rnic: &mut Rnic,
        kernels: &mut Kernels,
        clock: &dyn Clock,
    ) -> Vec<ChainDone> {
        let mut done = Vec::new();
        let ids: Vec<u32> = self.jobs.keys().copied().collect();
        for id in ids {
            let Some(job) = self.jobs.get_mut(&id) else { continue };
            if matches!(job.phase, Phase::Ready) {
                let t0 = clock.now();
                let inv = Invocation::new(job.owner, &job.spec.kernel);
                job.kernel = kernels.run(rnic.mem_mut(), &inv);
                let t1 = clock.now();
                job.kernel_ns = t1.saturating_duration_since(t0).as_nanos() as u64;
                job.kernel.busy_ns = job.kernel_ns;
                job.phase = if !job.kernel.is_ok() {
                    Phase::Finished(ChainOutcome::KernelFailed { code: job.kernel.status })
                } else {
                    match job.spec.end {
                        ChainEnd::Notify => Phase::Finished(ChainOutcome::Done),
                        ChainEnd::WriteBack { local, remote } => {
                            let wr = SendWr::new(
                                tag(id, WRITE_INDEX),
                                WrOp::Write { remote },
                                SgList::one(local),
                            );
                            match rnic.post_send(job.spec.qpn, &wr, t1) {
                                Ok(()) => Phase::Writing { since: t1 },
                                Err(_) => Phase::Finished(ChainOutcome::PostFailed),
                            }
                        }
                    }
                };
            }
            if let Phase::Finished(outcome) = job.phase {
                let job = self.jobs.remove(&id).expect("present");
                let fetched = job.spec.reads.iter().map(|r| u64::from(r.local.len)).sum();
                let written = match (outcome, job.spec.end) {
                    (ChainOutcome::Done, ChainEnd::WriteBack { local, .. }) => u64::from(local.len),
                    _ => 0,
                };
                done.push(ChainDone {
                    qpn: job.spec.qpn,
                    wr_id: job.spec.wr_id,
                    outcome,
                    kernel: job.kernel,
                    result: job.kernel.result,
                    fetched,
                    written,
                    fetch_ns: job.fetch_ns,
                    kernel_ns: job.kernel_ns,
                    write_ns: job.write_ns,
                });
            }
        }
        done
    }

    /// End every chain on `qpn` (the QP is going away): each is reported as a failed READ
    /// or WRITE with [`WcStatus::WrFlushErr`], whatever phase it was in.
    pub fn abort_qp(&mut self, qpn: u32) -> Vec<ChainDone> {
        let ids: Vec<u32> =
            self.jobs.iter().filter(|(_, j)| j.spec.qpn == qpn).map(|(&id, _)| id).collect();
        ids.into_iter()
            .filter_map(|id| self.jobs.remove(&id))
            .map(|job| ChainDone {
                qpn,
                wr_id: job.spec.wr_id,
                outcome: ChainOutcome::ReadFailed { status: WcStatus::WrFlushErr },
                kernel: job.kernel,
                result: 0,
                fetched: 0,
                written: 0,
                fetch_ns: job.fetch_ns,
                kernel_ns: job.kernel_ns,
                write_ns: 0,
            })
            .collect()
    }
}
