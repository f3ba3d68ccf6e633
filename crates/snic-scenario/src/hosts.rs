//! Hosts: memory regions with their initial contents, RDMA objects (PDs, MRs, CQs, connected
//! QPs), DMA queues on each NIC's DMA engine, lookaside kernels; the operations that use them
//! (post send / receive, DMA, kernel) and the expectations that read them (memory, CQEs).

use crate::ScenarioError;
use crate::load::Loaded;
use crate::report::ExpectReport;
use crate::schema::{Action, ExpectSpec};
use snic_testbed::{NodeId, Testbed};
use snic_time::Instant;
use std::collections::BTreeMap;

/// Every host of a scenario: their memory, RDMA objects, DMA queues, the operations started on
/// them and what those produced (CQEs, DMA completions).
#[derive(Debug, Default)]
pub struct Hosts {
    cq_logs: BTreeMap<String, Vec<(Instant, snic_rdma::Cqe)>>,
}

/// An operation started by [`Hosts::start`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub usize);

impl Hosts {
    /// Build every host's regions (allocated in its NIC's engine memory, filled from `init`),
    /// PDs, MRs, CQs, QPs (connected RC pairs), DMA queues on a per-NIC DMA engine.
    pub fn build(
        loaded: &Loaded,
        seed: u64,
        tb: &mut Testbed,
        nics: &BTreeMap<String, NodeId>,
    ) -> Result<Hosts, ScenarioError> {
        let _ = (seed, tb, nics);
        if loaded.scenario.hosts.is_empty() {
            return Ok(Hosts::empty());
        }
        Err(ScenarioError::Unsupported("hosts are not built yet".into()))
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
        let _ = (tb, now, action);
        Err(ScenarioError::Unsupported("host operations are not implemented yet".into()))
    }

    /// Work between testbed steps at `now`: drain every CQ into its log, run DMA engines,
    /// finish ops. Returns work done (0: none).
    pub fn poll(&mut self, tb: &mut Testbed, now: Instant) -> usize {
        let _ = (tb, now);
        0
    }

    /// None: pending; Some(Ok(t)): completed at t; Some(Err(why)): failed.
    pub fn status(&self, op: OpId) -> Option<Result<Instant, String>> {
        Some(Err(format!("no operation {}", op.0)))
    }

    /// `HOST.cq.CQ.cqes`, `NIC.dma.FIELD`, `HOST.dma.QUEUE.FIELD`, ...
    pub fn counters(&self, out: &mut BTreeMap<String, u64>) {
        let _ = out;
    }

    /// CQEs polled so far from `HOST.CQ`, with when.
    pub fn cqes(&self, cq: &str) -> Option<&[(Instant, snic_rdma::Cqe)]> {
        self.cq_logs.get(cq).map(Vec::as_slice)
    }

    /// Bytes of `HOST.REGION[+OFF][:LEN]`.
    pub fn read(&self, tb: &Testbed, buf: &str) -> Result<Vec<u8>, ScenarioError> {
        let _ = tb;
        Err(ScenarioError::Run(format!("no buffer {buf}")))
    }

    /// Check a `memory` or `cqes` expectation (None for other kinds).
    pub fn check(&self, tb: &Testbed, loaded: &Loaded, spec: &ExpectSpec) -> Option<ExpectReport> {
        let _ = (tb, loaded, spec);
        None
    }
}
