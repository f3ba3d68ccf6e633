//! The deterministic testbed: several nodes joined by virtual links, in one process, on one
//! simulated clock.
//!
//! A node is any [`Device`]: a pipeline and its ports ([`Node`], [`Testbed::add_node`]), or a
//! whole NIC ([`NicDevice`], [`Testbed::add_nic`]): pipeline, ports, the device's own packets
//! ([`snic_nic::Nic`]: `local` stage, neighbour table) and its RoCE engine with its memory
//! ([`Rnic`], owned by the testbed; tests post verbs through [`Testbed::nic_mut`]), or a bare
//! RoCE engine on a port ([`RnicDevice`], [`Testbed::add_rnic`]): the engine's IP packets on
//! the wire with no pipeline in between, optionally tampered with ([`Tamper`]: corrupted bytes,
//! ECN CE marks). Tests may add devices of their own ([`Testbed::add_device`]).
//!
//! Time moves only when the testbed says so: [`Testbed::step`] first lets every node work at the
//! current instant until nothing moves, then jumps the clock to the next deadline any node
//! reports ([`Device::poll_timeout`]: a paced generator's next frame, a link's next delivery, a
//! stage's held packet, the RoCE engine's retransmission timer, the neighbour table's retry).
//! [`Testbed::step_until`] does the same but never moves the clock past a horizon;
//! [`Testbed::run_until`] steps up to an instant;
//! [`Testbed::drive`] steps until nothing is pending, with bounds that turn a livelock (work that
//! never settles at one instant, or steps that never end) into an error instead of a hang.
//!
//! A deadline is a promise of work: a device that reports one at or before the current instant
//! must do something about it when polled (run the timer, which moves or clears the deadline).
//! A deadline that is still due once the instant has settled can never be met, so the testbed
//! stops with [`TestbedError::StaleDeadline`], naming the node, rather than nudging the clock
//! past it: that is a bug in the device. (The RDMA tests once ran their own harness that tolerated such stale
//! deadlines; the engine never produced one, and its tests now run here, under this rule.)
//!
//! [`RealClock`] drives the same testbed with the real clock instead (real ports,
//! `snic scenario run --real`).
//!
//! Given the same seeds, a run is exactly reproducible: nothing reads the real clock or an
//! unseeded RNG.

use core::any::Any;
use core::fmt;
use snic_io::nic::{NicNode, build_pipeline};
use snic_io::port::{Port, PortCounters};
use snic_io::worker::Node;
use snic_nic::{Nic, NicConfig};
use snic_pipeline::pipeline::{PipelineConfig, StageSpec};
use snic_pipeline::{Counters, MAX_BATCH, Pipeline};
use snic_rdma::{Rnic, RnicConfig};
use snic_time::{Clock, Instant, SimClock};

mod engine;
pub mod realtime;

pub use engine::{RnicDevice, RnicDeviceCounters, TX_PER_POLL, Tamper};
pub use realtime::RealClock;

/// Index of a node in a testbed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeId(pub usize);

/// Why the testbed stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TestbedError {
    /// Nodes kept moving packets at one instant for more rounds than allowed.
    Livelock {
        /// The instant that never settled.
        at: Instant,
        /// Rounds run.
        rounds: usize,
    },
    /// A node reported a deadline at or before the current instant, yet did nothing about it
    /// while the instant settled: the deadline can never be met (see the crate doc).
    StaleDeadline {
        /// The instant that settled.
        at: Instant,
        /// The node's name.
        node: String,
        /// The deadline it still reports.
        deadline: Instant,
    },
    /// [`Testbed::drive`] ran out of steps with work still pending.
    StepLimit {
        /// Steps taken.
        steps: usize,
        /// Time reached.
        at: Instant,
    },
    /// A node could not be built; says why.
    Setup(String),
}

impl fmt::Display for TestbedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TestbedError::Livelock { at, rounds } => {
                write!(f, "livelock: still moving packets at {at} after {rounds} rounds")
            }
            TestbedError::StaleDeadline { at, node, deadline } => {
                write!(f, "stale deadline: {node} reports {deadline} at {at} but does nothing")
            }
            TestbedError::StepLimit { steps, at } => {
                write!(f, "step limit: {steps} steps taken, work still pending at {at}")
            }
            TestbedError::Setup(why) => write!(f, "setup: {why}"),
        }
    }
}

impl std::error::Error for TestbedError {}

/// What a step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Work was done and the clock moved to the next deadline.
    Advanced(Instant),
    /// Nothing is pending anywhere: the testbed is idle.
    Idle,
}

/// Most rounds at one instant before [`TestbedError::Livelock`], by default.
pub const DEFAULT_MAX_ROUNDS: usize = 10_000;

/// One node of a testbed: something that works at an instant and says when it next has work.
///
/// The testbed calls [`Device::poll`] at one instant until no node moves anything, then moves
/// the clock to the earliest [`Device::poll_timeout`]. A device reads no clock and no unseeded
/// RNG, so runs are reproducible.
pub trait Device: fmt::Debug + Any {
    /// The node's name.
    fn name(&self) -> &str;
    /// Work at `now`: one round. Returns how many packets moved (0: nothing to do at `now`).
    fn poll(&mut self, now: Instant) -> usize;
    /// When the device next has work without being given anything; `None`: never.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Pipeline counters merged with the I/O side's (empty for a device without a pipeline).
    fn counters(&self) -> Counters;
    /// Each port's name and own counters.
    fn port_counters(&self) -> Vec<(String, PortCounters)>;
    /// The device as `Any`, to get its concrete type back ([`Testbed::device`]).
    fn as_any(&self) -> &dyn Any;
    /// The device as `Any`, mutably ([`Testbed::device_mut`]).
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl Device for Node {
    fn name(&self) -> &str {
        Node::name(self)
    }
    fn poll(&mut self, now: Instant) -> usize {
        Node::poll(self, now)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Node::poll_timeout(self)
    }
    fn counters(&self) -> Counters {
        Node::counters(self)
    }
    fn port_counters(&self) -> Vec<(String, PortCounters)> {
        Node::port_counters(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A whole NIC as a testbed node: its data path ([`NicNode`]: pipeline, ports, neighbour
/// table) and its RoCE engine with its memory. The fields are public so a test can post verbs
/// on `rnic` and read `node`'s counters between steps.
#[derive(Debug)]
pub struct NicDevice {
    /// Pipeline, ports and the NIC's own packets.
    pub node: NicNode,
    /// The RoCE engine and its memory.
    pub rnic: Rnic,
}

impl Device for NicDevice {
    fn name(&self) -> &str {
        self.node.name()
    }
    fn poll(&mut self, now: Instant) -> usize {
        self.node.poll(now, &mut self.rnic)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.node.poll_timeout(&self.rnic)
    }
    fn counters(&self) -> Counters {
        self.node.counters()
    }
    fn port_counters(&self) -> Vec<(String, PortCounters)> {
        self.node.port_counters()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Nodes, links and one simulated clock.
#[derive(Debug)]
pub struct Testbed {
    clock: SimClock,
    nodes: Vec<Box<dyn Device>>,
    max_rounds: usize,
    steps: u64,
}

impl Default for Testbed {
    fn default() -> Self {
        Self::new()
    }
}

impl Testbed {
    /// An empty testbed at time zero.
    pub fn new() -> Self {
        Testbed {
            clock: SimClock::new(),
            nodes: Vec::new(),
            max_rounds: DEFAULT_MAX_ROUNDS,
            steps: 0,
        }
    }

    /// Change the livelock bound: most rounds of work at one instant.
    pub fn with_max_rounds(mut self, rounds: usize) -> Self {
        self.max_rounds = rounds.max(1);
        self
    }

    /// Add a node running `pipeline` over `ports` (port `i` is `PortId(i)` in the pipeline).
    pub fn add_node(
        &mut self,
        name: &str,
        pipeline: Pipeline,
        ports: Vec<Box<dyn Port>>,
    ) -> NodeId {
        self.add_device(Box::new(Node::new(name, pipeline, ports, MAX_BATCH)))
    }

    /// Add a NIC: `stages` (empty: parse, classify, l2fwd; `local` is put after `classify`,
    /// see [`snic_io::nic::nic_stages`]) over `ports` (port `i` is `PortId(i)`; `nic.wire`
    /// names the wire), the NIC's own packets as `nic` says, and a RoCE engine built from
    /// `rnic`. Every address of the engine must be one of `nic.ips` (else its packets would
    /// never reach it).
    pub fn add_nic(
        &mut self,
        name: &str,
        nic: NicConfig,
        rnic: RnicConfig,
        stages: &[StageSpec],
        ports: Vec<Box<dyn Port>>,
    ) -> Result<NodeId, TestbedError> {
        let setup = |why: String| TestbedError::Setup(format!("NIC {name}: {why}"));
        if let Some(ip) =
            core::iter::once(&rnic.local_ip).chain(&rnic.more_ips).find(|ip| !nic.ips.contains(ip))
        {
            return Err(setup(format!("the engine's address {ip} is not one of the NIC's")));
        }
        let engine = Rnic::new(rnic).map_err(|e| setup(format!("RoCE engine: {e:?}")))?;
        let nic = Nic::new(nic);
        let pipeline = build_pipeline(&PipelineConfig::new(stages.to_vec()), &nic, None)
            .map_err(|e| setup(e.to_string()))?;
        let node = NicNode::new(name, pipeline, ports, nic, MAX_BATCH);
        Ok(self.add_device(Box::new(NicDevice { node, rnic: engine })))
    }

    /// Add a NIC built by the caller: a [`NicNode`] (its pipeline with whatever stages it
    /// needs: a vSwitch, a P4 program, XDP programs, kernels; see
    /// [`snic_io::nic::build_nic_pipeline`]) and its RoCE engine.
    pub fn add_nic_device(&mut self, node: NicNode, rnic: Rnic) -> NodeId {
        self.add_device(Box::new(NicDevice { node, rnic }))
    }

    /// Add a bare RoCE engine built from `rnic` on `port`, which carries the engine's IP
    /// packets as they are (see [`RnicDevice`]).
    pub fn add_rnic(
        &mut self,
        name: &str,
        rnic: RnicConfig,
        port: Box<dyn Port>,
    ) -> Result<NodeId, TestbedError> {
        let engine = Rnic::new(rnic)
            .map_err(|e| TestbedError::Setup(format!("engine {name}: RoCE engine: {e:?}")))?;
        Ok(self.add_device(Box::new(RnicDevice::new(name, engine, port))))
    }

    /// Add any device.
    pub fn add_device(&mut self, device: Box<dyn Device>) -> NodeId {
        self.nodes.push(device);
        NodeId(self.nodes.len() - 1)
    }

    /// The simulated clock (clones share its time).
    pub fn clock(&self) -> &SimClock {
        &self.clock
    }

    /// The current simulated time.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// A device, as its concrete type (`None` when `id` is not a `T`).
    pub fn device<T: Device>(&self, id: NodeId) -> Option<&T> {
        self.nodes.get(id.0)?.as_any().downcast_ref()
    }

    /// A device, mutably, as its concrete type (`None` when `id` is not a `T`).
    pub fn device_mut<T: Device>(&mut self, id: NodeId) -> Option<&mut T> {
        self.nodes.get_mut(id.0)?.as_any_mut().downcast_mut()
    }

    /// A pipeline node (`None` for another kind of node).
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.device(id)
    }

    /// A pipeline node, mutably (to change its pipeline between steps).
    pub fn node_mut(&mut self, id: NodeId) -> Option<&mut Node> {
        self.device_mut(id)
    }

    /// A NIC node (`None` for another kind of node).
    pub fn nic(&self, id: NodeId) -> Option<&NicDevice> {
        self.device(id)
    }

    /// A NIC node, mutably: post verbs on its engine (at [`Testbed::now`]), read its counters.
    pub fn nic_mut(&mut self, id: NodeId) -> Option<&mut NicDevice> {
        self.device_mut(id)
    }

    /// A bare engine node (`None` for another kind of node).
    pub fn rnic(&self, id: NodeId) -> Option<&RnicDevice> {
        self.device(id)
    }

    /// A bare engine node, mutably: post verbs on its engine (at [`Testbed::now`]), set its
    /// [`Tamper`].
    pub fn rnic_mut(&mut self, id: NodeId) -> Option<&mut RnicDevice> {
        self.device_mut(id)
    }

    /// Run every node at the current instant until none receives anything (what
    /// [`Self::step_until`] does before it moves the clock; a driver that works outside the
    /// testbed, such as a scenario's hosts polling their CQs, settles, works, then steps).
    pub fn settle(&mut self) -> Result<(), TestbedError> {
        let now = self.clock.now();
        for round in 0.. {
            let moved: usize = self.nodes.iter_mut().map(|n| n.poll(now)).sum();
            if moved == 0 {
                return Ok(());
            }
            if round + 1 >= self.max_rounds {
                return Err(TestbedError::Livelock { at: now, rounds: round + 1 });
            }
        }
        Ok(())
    }

    /// The earliest deadline of any node, or `None` when nothing is pending.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.nodes.iter().filter_map(|n| n.poll_timeout()).min()
    }

    /// Work at the current instant until it settles, then jump to the next deadline.
    pub fn step(&mut self) -> Result<Step, TestbedError> {
        self.step_until(Instant::MAX)
    }

    /// Work at the current instant until it settles, then move the clock to the next deadline
    /// but not past `horizon` (nor backwards, when `horizon` has passed). Returns the time
    /// reached, or [`Step::Idle`] (the clock unmoved) when nothing is pending.
    pub fn step_until(&mut self, horizon: Instant) -> Result<Step, TestbedError> {
        self.settle()?;
        self.steps += 1;
        match self.next_deadline()? {
            None => Ok(Step::Idle),
            Some(t) => {
                let to = t.min(horizon).max(self.clock.now());
                self.clock.advance_to(to);
                Ok(Step::Advanced(to))
            }
        }
    }

    /// Step until the next deadline would be after `t`, then move the clock to `t` and settle.
    pub fn run_until(&mut self, t: Instant) -> Result<(), TestbedError> {
        loop {
            self.settle()?;
            match self.next_deadline()? {
                Some(next) if next <= t => {
                    self.steps += 1;
                    self.clock.advance_to(next);
                }
                _ => break,
            }
        }
        self.clock.advance_to(t);
        self.settle()?;
        self.next_deadline().map(|_| ())
    }

    /// The earliest deadline, once the current instant has settled. A deadline not after now
    /// is a device that said it has work but did nothing while settling: it can never make
    /// progress (see the crate doc on deadlines).
    fn next_deadline(&self) -> Result<Option<Instant>, TestbedError> {
        let now = self.clock.now();
        match self.poll_timeout() {
            Some(deadline) if deadline <= now => {
                let stale = self.nodes.iter().find(|n| n.poll_timeout().is_some_and(|d| d <= now));
                Err(TestbedError::StaleDeadline {
                    at: now,
                    node: stale.map_or_else(String::new, |n| n.name().to_string()),
                    deadline,
                })
            }
            next => Ok(next),
        }
    }

    /// Step until idle, at most `max_steps` steps. Returns the steps taken.
    pub fn drive(&mut self, max_steps: usize) -> Result<usize, TestbedError> {
        for n in 0..max_steps {
            if self.step()? == Step::Idle {
                return Ok(n + 1);
            }
        }
        Err(TestbedError::StepLimit { steps: max_steps, at: self.clock.now() })
    }

    /// Every node's counters (pipeline and I/O side merged), by node name.
    pub fn counters(&self) -> Vec<(String, Counters)> {
        self.nodes.iter().map(|n| (n.name().to_string(), n.counters())).collect()
    }

    /// Every node's ports' own counters, by node name.
    pub fn port_counters(&self) -> Vec<(String, Vec<(String, PortCounters)>)> {
        self.nodes.iter().map(|n| (n.name().to_string(), n.port_counters())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;
    use snic_io::generator::GenPort;
    use snic_io::null::NullPort;
    use snic_io::vlink::{LinkConfig, VLink, VLinkPort};
    use snic_pipeline::PortId;
    use snic_time::Instant;

    fn lossy() -> LinkConfig {
        LinkConfig {
            loss: 0.05,
            duplicate: 0.01,
            reorder: 0.02,
            delay: Duration::from_micros(20),
            jitter: Duration::from_micros(5),
            rate_bps: 10_000_000_000,
            queue_limit: 64,
            ..Default::default()
        }
    }

    /// gen -> node A -> lossy link -> node B -> null.
    fn chain(link_seed: u64) -> Testbed {
        let mut tb = Testbed::new();
        let (la, lb): (VLinkPort, VLinkPort) = VLink::symmetric("ab", lossy(), link_seed);
        let gen_port = GenPort::new(5_000, 99).with_pace(Instant::ZERO, Duration::from_micros(1));
        let a = Pipeline::from_strs(&["parse", "classify", "l2fwd"]).unwrap();
        let b = Pipeline::from_strs(&["parse", "l2fwd"]).unwrap();
        tb.add_node("a", a, vec![Box::new(gen_port), Box::new(la)]);
        tb.add_node("b", b, vec![Box::new(lb), Box::new(NullPort::new())]);
        tb
    }

    type Snapshot = (Vec<(String, Counters)>, Vec<(String, Vec<(String, PortCounters)>)>, Instant);

    fn run(seed: u64) -> Snapshot {
        let mut tb = chain(seed);
        tb.drive(1_000_000).unwrap();
        (tb.counters(), tb.port_counters(), tb.now())
    }

    #[test]
    fn same_seed_same_counters_other_seed_differs() {
        let (c1, p1, t1) = run(7);
        let (c2, p2, t2) = run(7);
        let (c3, p3, _) = run(8);
        assert_eq!(c1, c2);
        assert_eq!(p1, p2);
        assert_eq!(t1, t2);
        assert_ne!(p1, p3, "a different link seed must change what B received");
        // ... and so what B's pipeline counted.
        assert_ne!(c1[1], c3[1], "a different link seed must change B's pipeline counters");
        eprintln!("{}\n{}", c1[0].1, c1[1].1);

        // Conservation: what A sent on the link is what the link was offered; what B got is
        // what the link delivered; B forwarded everything it received into the sink.
        let a_link = &p1[0].1[1].1;
        let b_link = &p1[1].1[0].1;
        let sink = &p1[1].1[1].1;
        assert!(a_link.tx_packets > 4_000, "{a_link:?}");
        assert!(b_link.rx_packets < a_link.tx_packets + a_link.tx_packets / 50);
        assert!(b_link.rx_packets > a_link.tx_packets * 9 / 10);
        let b_counters = &c1[1].1;
        let b_fwd = b_counters.port(PortId(1)).map_or(0, |p| p.tx_packets);
        assert_eq!(sink.tx_packets, b_fwd);
        assert_eq!(b_counters.port(PortId(0)).unwrap().rx_packets, b_link.rx_packets);
        assert!(t1 >= Instant::from_micros(5_000));
    }

    #[test]
    fn run_until_stops_at_the_given_time() {
        let mut tb = chain(1);
        tb.run_until(Instant::from_micros(100)).unwrap();
        assert_eq!(tb.now(), Instant::from_micros(100));
        let p = tb.port_counters();
        // Frames due at 0..=100 us were generated: 101 of them.
        assert_eq!(p[0].1[0].1.rx_packets, 101);
    }

    #[test]
    fn step_until_never_passes_its_horizon() {
        let mut tb = chain(1);
        // The generator's frames are due every microsecond: a horizon between two of them
        // stops the clock there, and a horizon already passed does not move it.
        let h = Instant::from_nanos(2_500);
        assert_eq!(tb.step_until(h), Ok(Step::Advanced(Instant::from_micros(1))));
        assert_eq!(tb.step_until(h), Ok(Step::Advanced(Instant::from_micros(2))));
        assert_eq!(tb.step_until(h), Ok(Step::Advanced(h)));
        assert_eq!(tb.step_until(Instant::ZERO), Ok(Step::Advanced(h)));
        let mut idle = Testbed::new();
        assert_eq!(idle.step_until(h), Ok(Step::Idle));
        assert_eq!(idle.now(), Instant::ZERO);
    }

    /// A port that claims to be ready now but never produces anything.
    #[derive(Debug)]
    struct Stuck;
    impl Port for Stuck {
        fn name(&self) -> &str {
            "stuck"
        }
        fn recv(&mut self, _: Instant, _: &mut snic_pipeline::Batch) -> std::io::Result<usize> {
            Ok(0)
        }
        fn send(&mut self, _: Instant, b: &mut snic_pipeline::Batch) -> std::io::Result<usize> {
            Ok(b.len())
        }
        fn poll_timeout(&self) -> Option<Instant> {
            Some(Instant::ZERO)
        }
        fn caps(&self) -> snic_io::PortCaps {
            snic_io::PortCaps::default()
        }
    }

    /// A port that always has another packet.
    #[derive(Debug)]
    struct Firehose;
    impl Port for Firehose {
        fn name(&self) -> &str {
            "firehose"
        }
        fn recv(&mut self, _: Instant, b: &mut snic_pipeline::Batch) -> std::io::Result<usize> {
            b.push_frame(&[0u8; 60]);
            Ok(1)
        }
        fn send(&mut self, _: Instant, b: &mut snic_pipeline::Batch) -> std::io::Result<usize> {
            Ok(b.len())
        }
        fn caps(&self) -> snic_io::PortCaps {
            snic_io::PortCaps::default()
        }
    }

    #[test]
    fn a_nic_node_is_found_by_its_kind_and_checks_its_addresses() {
        use snic_nic::neigh::NeighConfig;
        use snic_wire::ethernet::EthernetAddress;
        let rnic = RnicConfig { host_pool: 1 << 20, ..RnicConfig::default() };
        let nic = |ips| NicConfig {
            mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            ips,
            wire: PortId(0),
            neigh: NeighConfig::default(),
        };
        let mut tb = Testbed::new();
        // The engine's address must be one the NIC terminates.
        let other = vec!["10.9.9.9".parse().unwrap()];
        let e = tb.add_nic("bad", nic(other), rnic.clone(), &[], vec![]).unwrap_err();
        assert!(matches!(e, TestbedError::Setup(ref why) if why.contains("not one of")), "{e}");
        let ports: Vec<Box<dyn Port>> = vec![Box::new(NullPort::new())];
        let id = tb.add_nic("n", nic(vec![rnic.local_ip]), rnic, &[], ports).unwrap();
        let p = tb.add_node("p", Pipeline::new(), vec![]);
        assert_eq!((id, p), (NodeId(0), NodeId(1)));
        assert!(tb.node(id).is_none() && tb.nic(p).is_none());
        let names: Vec<_> =
            tb.nic(id).unwrap().node.counters().stages.iter().map(|s| s.name.clone()).collect();
        assert_eq!(names[..4], ["parse", "classify", "local", "l2fwd"]);
        assert_eq!(tb.poll_timeout(), None);

        // A WRITE to a peer that never answers: the neighbour table's retries and the engine's
        // retransmissions are the testbed's deadlines, until the WQE fails.
        use snic_rdma::testing::{EndOpts, connect_qp, drain_cq};
        use snic_rdma::{Access, QpAttr, SendWr, WcStatus, WrOp};
        let d = tb.nic_mut(id).unwrap();
        let pd = d.rnic.alloc_pd();
        let cq = d.rnic.create_cq(4);
        let qpn = d.rnic.create_qp(EndOpts::default().qp_init(pd, cq, cq)).unwrap();
        let attr = QpAttr { access: Access::ALL, retry_cnt: 2, ..QpAttr::default() };
        connect_qp(&mut d.rnic, qpn, 7, snic_rdma::testing::ip(false, 2), 0, 0, attr);
        let buf = d.rnic.alloc_buf(snic_dma::MemKind::Host, 4096, 4096).unwrap();
        let mr = d.rnic.reg_mr(pd, buf, 4096, Access::ALL).unwrap();
        let sgl = snic_rdma::SgList::one(snic_rdma::Sge { addr: buf, len: 100, lkey: mr.lkey });
        let remote = snic_rdma::Remote { addr: 0, rkey: 1 };
        d.rnic.post_send(qpn, &SendWr::new(1, WrOp::Write { remote }, sgl), Instant::ZERO).unwrap();
        assert!(tb.drive(1_000).unwrap() > 3);
        let d = tb.nic_mut(id).unwrap();
        let cqes = drain_cq(&mut d.rnic, cq);
        assert_eq!(cqes.iter().map(|c| c.status).collect::<Vec<_>>(), [WcStatus::RetryExcErr]);
        let neigh = *d.node.nic().neighbours().counters();
        assert!(neigh.solicits_sent >= 2 && neigh.failed >= 1, "{neigh:?}");
        assert!(tb.now() > Instant::from_millis(10), "{}", tb.now());
    }

    #[test]
    fn livelock_and_step_limit_are_errors_not_hangs() {
        let mut tb = Testbed::new();
        tb.add_node("ok", Pipeline::new(), vec![]);
        tb.add_node("s", Pipeline::new(), vec![Box::new(Stuck)]);
        let stale = TestbedError::StaleDeadline {
            at: Instant::ZERO,
            node: "s".into(),
            deadline: Instant::ZERO,
        };
        assert_eq!(tb.drive(10), Err(stale.clone()));
        // run_until does not step over it either.
        assert_eq!(tb.run_until(Instant::from_micros(1)), Err(stale));

        let mut tb = Testbed::new().with_max_rounds(50);
        tb.add_node("f", Pipeline::new(), vec![Box::new(Firehose)]);
        assert_eq!(tb.step(), Err(TestbedError::Livelock { at: Instant::ZERO, rounds: 50 }));

        let mut tb = Testbed::new();
        let g = GenPort::new(1_000, 1).with_pace(Instant::ZERO, Duration::from_micros(1));
        tb.add_node("g", Pipeline::new(), vec![Box::new(g)]);
        assert!(matches!(tb.drive(10), Err(TestbedError::StepLimit { steps: 10, .. })));
        // Frames 10..=999 remain: one step each, the last finding nothing pending.
        assert_eq!(tb.drive(10_000), Ok(990));
    }
}
