//! One NIC's data path on one thread: its ports, its pipeline, its own packets
//! ([`snic_nic::Nic`]) and its RDMA engine, driven by the one receive -> process -> transmit
//! loop ([`crate::worker::PortSet::round`]).
//!
//! A round: receive a batch from each port and run it through the pipeline; the packets the
//! `local` stage delivered to the device go to the engine or the neighbour table
//! ([`Nic::deliver`]), the rest leave by their egress ports. Then the stages' held packets
//! that are due, the engine's and the neighbour table's timers, and what the engine and the
//! table send ([`Nic::transmit`]), in batches, to the wire port.
//!
//! The engine is passed in (`&mut Rnic`) rather than owned: the device (`snic-device`) shares
//! it with its control thread behind a mutex and locks it for one round; the testbed owns it.
//! The same [`NicNode`] runs on real ports with the real clock and on virtual links with the
//! simulated one.

use crate::port::{Port, PortCounters};
use crate::runtime::RunError;
use crate::worker::{Egress, Handler, Node};
use snic_nic::{Nic, NicCounters};
use snic_pipeline::pipeline::{BuildError, PipelineConfig, StageSpec};
use snic_pipeline::trace::{TraceEvent, TraceRing};
use snic_pipeline::{Batch, Counters, MAX_BATCH, Pipeline, Stage};
use snic_rdma::Rnic;
use snic_time::Instant;
use std::io;

/// Most engine and neighbour-table frames sent per round (then the ports are read again, so
/// a long message does not starve the host's traffic).
const TX_PER_ROUND: usize = 4 * MAX_BATCH;

/// A NIC's pipeline, ports and own-packet handling (see the module doc).
#[derive(Debug)]
pub struct NicNode {
    /// The pipeline, its ports and the transmit trace, as any node has them.
    node: Node,
    nic: Nic,
    local: Batch,
    tx: Batch,
}

/// The handler of a NIC round: pipeline, then the device's packets to the device.
struct NicInline<'a> {
    pipeline: &'a mut Pipeline,
    trace: &'a mut TraceRing,
    nic: &'a mut Nic,
    rnic: &'a mut Rnic,
    local: &'a mut Batch,
}

impl Handler for NicInline<'_> {
    fn handle(&mut self, now: Instant, rx: &mut Batch, out: &mut Egress<'_>) {
        self.pipeline.process(now, rx);
        deliver(now, self.pipeline, self.nic, self.rnic, self.local);
        out.transmit(now, rx, self.trace);
    }
}

/// Hand everything the pipeline delivered to the device to `nic`.
fn deliver(now: Instant, pipeline: &mut Pipeline, nic: &mut Nic, rnic: &mut Rnic, b: &mut Batch) {
    while pipeline.local_pending() > 0 {
        pipeline.take_local(b);
        nic.deliver(now, b, rnic);
    }
}

impl NicNode {
    /// A NIC running `pipeline` (which should hold `nic`'s [`Nic::local_stage`] after
    /// `classify`) over `ports` (port `i` is `PortId(i)`), receiving batches of up to
    /// `batch_size` packets.
    pub fn new(
        name: impl Into<String>,
        pipeline: Pipeline,
        ports: Vec<Box<dyn Port>>,
        nic: Nic,
        batch_size: usize,
    ) -> Self {
        NicNode {
            node: Node::new(name, pipeline, ports, batch_size),
            nic,
            local: Batch::new(MAX_BATCH),
            tx: Batch::new(MAX_BATCH),
        }
    }

    /// The NIC's name.
    pub fn name(&self) -> &str {
        self.node.name()
    }

    /// One round (see the module doc). Returns how many packets moved: received, released by
    /// stages, or sent by the engine and the neighbour table.
    pub fn poll(&mut self, now: Instant, rnic: &mut Rnic) -> usize {
        let NicNode { node, nic, local, tx } = self;
        let Node { pipeline, ports, trace, .. } = node;
        let mut moved = ports.round(now, &mut NicInline { pipeline, trace, nic, rnic, local });
        if let Some(n) = ports.release_held(now, pipeline, trace) {
            moved += n;
            deliver(now, pipeline, nic, rnic, local);
        }
        if rnic.poll_timeout().is_some_and(|t| t <= now) {
            rnic.handle_timeout(now);
        }
        if nic.poll_timeout().is_some_and(|t| t <= now) {
            nic.handle_timeout(now);
        }
        let mut sent = 0;
        while sent < TX_PER_ROUND {
            tx.clear();
            let n = nic.transmit(now, rnic, tx);
            if n == 0 {
                break;
            }
            sent += n;
            ports.transmit(now, tx, trace);
        }
        moved + sent
    }

    /// The earliest deadline of the ports, the stages, the engine and the neighbour table.
    pub fn poll_timeout(&self, rnic: &Rnic) -> Option<Instant> {
        self.node
            .poll_timeout()
            .into_iter()
            .chain(rnic.poll_timeout())
            .chain(self.nic.poll_timeout())
            .min()
    }

    /// The NIC's ports, in port order (the wire first), for a takeover to hand over
    /// ([`crate::Port::handover`]) once the node is quiet (after [`Self::flush`]).
    pub fn ports_mut(&mut self) -> &mut [Box<dyn crate::Port>] {
        self.node.ports.ports_mut()
    }

    /// The poll descriptors of the ports that have one.
    pub fn poll_fds(&self, out: &mut Vec<std::os::fd::RawFd>) {
        self.node.poll_fds(out);
    }

    /// Pipeline counters merged with the I/O side's.
    pub fn counters(&self) -> Counters {
        self.node.counters()
    }

    /// The NIC's own counters (engine and neighbour traffic).
    pub fn nic_counters(&self) -> NicCounters {
        *self.nic.counters()
    }

    /// The NIC's own-packet handling (its neighbour table, its configuration).
    pub fn nic(&self) -> &Nic {
        &self.nic
    }

    /// The NIC's own-packet handling, mutably (to start resolving a peer ahead of time).
    pub fn nic_mut(&mut self) -> &mut Nic {
        &mut self.nic
    }

    /// Each port's name and own counters.
    pub fn port_counters(&self) -> Vec<(String, PortCounters)> {
        self.node.port_counters()
    }

    /// Take the trace events recorded so far, by packet sequence number.
    pub fn drain_trace(&mut self) -> Vec<TraceEvent> {
        self.node.drain_trace()
    }

    /// Flush the ports and the pipeline's capture stages.
    pub fn flush(&mut self) -> io::Result<()> {
        self.node.flush()
    }

    /// The pipeline (for control-plane changes between rounds).
    pub fn pipeline_mut(&mut self) -> &mut Pipeline {
        self.node.pipeline_mut()
    }
}

/// The stage list of a NIC: `stages` (empty: parse, classify, l2fwd) with `local` right after
/// `classify` when it is not already there. A NIC's pipeline needs `parse` and `classify`
/// before `local` (it reads what they found).
pub fn nic_stages(stages: &[StageSpec]) -> Result<Vec<StageSpec>, RunError> {
    let mut s = if stages.is_empty() {
        vec![
            StageSpec::Parse { pass_malformed: false },
            StageSpec::Classify { enforce_icrc: true },
            StageSpec::L2Static(Vec::new()),
        ]
    } else {
        stages.to_vec()
    };
    let find = |s: &[StageSpec], f: fn(&StageSpec) -> bool| s.iter().position(f);
    let parse = find(&s, |x| matches!(x, StageSpec::Parse { .. }));
    let classify = find(&s, |x| matches!(x, StageSpec::Classify { .. }));
    let (Some(parse), Some(classify)) = (parse, classify) else {
        return Err(RunError::Config(
            "a NIC's stages need parse and classify (the local stage reads what they found)".into(),
        ));
    };
    if parse > classify {
        return Err(RunError::Config("parse must come before classify".into()));
    }
    let vswitch = find(&s, |x| *x == StageSpec::VSwitch);
    match find(&s, |x| *x == StageSpec::Local) {
        Some(at) if at < classify => {
            return Err(RunError::Config("local must come after classify".into()));
        }
        // The vSwitch rewrites headers: after it, what parse found no longer describes the
        // packet, and the NIC's packets must be taken as they came off the wire.
        Some(at) if vswitch.is_some_and(|v| v < at) => {
            return Err(RunError::Config("local must come before vswitch".into()));
        }
        Some(_) => {}
        None => s.insert(classify + 1, StageSpec::Local),
    }
    // A P4 program rewrites headers too: the NIC's packets are taken before it.
    let local = find(&s, |x| *x == StageSpec::Local);
    let p4 = find(&s, |x| matches!(x, StageSpec::P4 { .. }));
    if p4.is_some_and(|p| local.is_some_and(|l| p < l)) {
        return Err(RunError::Config("local must come before p4 (after classify)".into()));
    }
    Ok(s)
}

/// Build a NIC's pipeline: `cfg`'s stages (see [`nic_stages`]) with `nic`'s `local` stage and,
/// when the stages name it, a shard of `vswitch`.
pub fn build_pipeline(
    cfg: &PipelineConfig,
    nic: &Nic,
    vswitch: Option<&snic_vswitch::engine::VSwitch>,
) -> Result<Pipeline, RunError> {
    build_pipeline_with(cfg, nic, vswitch, None)
}

/// [`build_pipeline`], with the program of a `p4` stage (worker 0's switch: a NIC runs one
/// pipeline).
pub fn build_pipeline_with(
    cfg: &PipelineConfig,
    nic: &Nic,
    vswitch: Option<&snic_vswitch::engine::VSwitch>,
    p4: Option<&crate::p4::P4Program>,
) -> Result<Pipeline, RunError> {
    build_nic_pipeline(cfg, nic, vswitch, p4, None, None)
}

/// [`build_pipeline_with`], with the instances of the `kernel:` and `xdp:` stages (built for
/// one worker: a NIC runs one pipeline).
pub fn build_nic_pipeline(
    cfg: &PipelineConfig,
    nic: &Nic,
    vswitch: Option<&snic_vswitch::engine::VSwitch>,
    p4: Option<&crate::p4::P4Program>,
    kernels: Option<&mut crate::stream::StreamKernels>,
    xdp: Option<&mut crate::ebpf::XdpPrograms>,
) -> Result<Pipeline, RunError> {
    let mut none = crate::stream::StreamKernels::default();
    let mut kernel_stage = kernels.unwrap_or(&mut none).factory_for(0);
    let mut no_xdp = crate::ebpf::XdpPrograms::default();
    let mut xdp_stage = xdp.unwrap_or(&mut no_xdp).factory_for(0);
    let mut cfg = cfg.clone();
    cfg.stages = nic_stages(&cfg.stages)?;
    let mut opener = |path: &str| -> io::Result<Box<dyn std::io::Write + Send>> {
        Ok(Box::new(std::io::BufWriter::new(std::fs::File::create(path)?)))
    };
    let mut factory = |spec: &StageSpec| match spec {
        StageSpec::Kernel { .. } => kernel_stage(spec),
        StageSpec::Xdp { .. } => xdp_stage(spec),
        StageSpec::Local => Some(Ok(Box::new(nic.local_stage()) as Box<dyn Stage>)),
        StageSpec::VSwitch => vswitch.map(|vs| {
            vs.stage()
                .map(|s| Box::new(s) as Box<dyn Stage>)
                .map_err(|e| BuildError::Stage { stage: "vswitch".into(), why: e.to_string() })
        }),
        StageSpec::P4 { .. } => p4.map(|p| {
            p.stage(0).map(|s| Box::new(s) as Box<dyn Stage>).ok_or_else(|| BuildError::Stage {
                stage: "p4".into(),
                why: "the program has no switch".into(),
            })
        }),
        _ => None,
    };
    Pipeline::build_with(&cfg, &mut opener, &mut factory).map_err(RunError::Pipeline)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(s: &[&str]) -> Vec<StageSpec> {
        s.iter().map(|x| x.parse().unwrap()).collect()
    }

    #[test]
    fn local_goes_right_after_classify() {
        let names = |v: Vec<StageSpec>| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(names(nic_stages(&[]).unwrap()), ["parse", "classify", "local", "l2fwd"]);
        assert_eq!(
            names(nic_stages(&specs(&["parse", "classify:mark", "vswitch"])).unwrap()),
            ["parse", "classify:mark", "local", "vswitch"]
        );
        let given = specs(&["parse", "classify", "tap:x.pcap", "local", "l2fwd"]);
        assert_eq!(nic_stages(&given).unwrap(), given);
        assert_eq!(
            names(nic_stages(&specs(&["parse", "classify", "p4:x.p4"])).unwrap()),
            ["parse", "classify", "local", "p4:x.p4"]
        );
        for bad in [
            &["parse", "l2fwd"][..],
            &["classify", "parse"],
            &["parse", "local", "classify"],
            &["parse", "p4:x.p4", "classify"],
        ] {
            assert!(nic_stages(&specs(bad)).is_err(), "{bad:?}");
        }
    }
}
