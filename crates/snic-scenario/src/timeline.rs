//! Running a scenario: the timeline's operations at their times or after their events, the
//! system worked between them, until everything is done and idle or the time limit; then the
//! expectations.
//!
//! The [`Driver`] schedules operations and builds the report; how time moves is an
//! [`Advance`]'s business, so the same driver runs on the simulated clock ([`SimAdvance`]:
//! testbed steps) and on the real one (the real mode supplies its own `Advance`).
//!
//! An operation starts at `at`, or `delay` after the operation `after` names completed, or
//! `delay` after the previous one completed (the first: at `delay`). Host operations
//! (post send / receive, DMA, kernels) complete when the hosts say so; `wait` when its
//! condition holds (checked after every step); every other kind at once. An operation whose
//! predecessor failed fails too, without running.

use crate::hosts::{Hosts, OpId};
use crate::report::{OpReport, Report, Series};
use crate::schema::{Action, LinkState, OpSpec};
use crate::world::{self, BuildOptions, SimPorts, World};
use crate::{Loaded, RunOptions, ScenarioError};
use snic_testbed::Step;
use snic_time::Instant;
use snic_vswitch::policy::wire::{Edit, to_policy_edit};
use std::collections::BTreeMap;

/// How time moves: the simulated clock (testbed steps) or the real one.
pub trait Advance {
    /// The current time.
    fn now(&self, world: &World) -> Instant;
    /// Work and move time forward to the next thing any device has to do, not past
    /// `horizon`; let the hosts work after each step. Returns false (time unmoved) when no
    /// device has anything pending.
    fn advance(&mut self, world: &mut World, horizon: Instant) -> Result<bool, ScenarioError>;
    /// Nothing is pending anywhere: move time to `t` (the next operation, or the time limit).
    fn skip_to(&mut self, world: &mut World, t: Instant) -> Result<(), ScenarioError>;
    /// Whether nothing is pending in any device.
    fn idle(&self, world: &World) -> bool;
}

fn run_err(e: snic_testbed::TestbedError) -> ScenarioError {
    ScenarioError::Run(e.to_string())
}

/// The simulated clock: one testbed step per call.
#[derive(Debug, Default)]
pub struct SimAdvance;

impl Advance for SimAdvance {
    fn now(&self, world: &World) -> Instant {
        world.tb.now()
    }

    fn advance(&mut self, world: &mut World, horizon: Instant) -> Result<bool, ScenarioError> {
        // The hosts work at the instant the devices settled at, before the clock moves: a CQE
        // is polled (and stamped) when it was produced, not at the next deadline.
        world.tb.settle().map_err(run_err)?;
        let now = world.tb.now();
        world.hosts.poll(&mut world.tb, now);
        let step = world.tb.step_until(horizon).map_err(run_err)?;
        Ok(step != Step::Idle)
    }

    fn skip_to(&mut self, world: &mut World, t: Instant) -> Result<(), ScenarioError> {
        if t > world.tb.now() {
            world.tb.run_until(t).map_err(run_err)?;
        }
        let now = world.tb.now();
        world.hosts.poll(&mut world.tb, now);
        Ok(())
    }

    fn idle(&self, world: &World) -> bool {
        world.tb.poll_timeout().is_none()
    }
}

#[derive(Debug, Clone)]
enum Phase {
    Waiting,
    Host(OpId),
    Wait,
    Done,
    Failed(String),
}

#[derive(Debug, Clone)]
struct OpState {
    name: String,
    kind: String,
    phase: Phase,
    started: Option<Instant>,
    done: Option<Instant>,
}

/// Schedules a scenario's operations and builds its report.
#[derive(Debug)]
pub struct Driver {
    ops: Vec<OpState>,
    specs: Vec<OpSpec>,
    limit: Instant,
    errors: Vec<String>,
    /// Notes for the report (the real mode adds its own).
    pub notes: Vec<String>,
}

fn kind_of(a: &Action) -> &'static str {
    match a {
        Action::PostSend { .. } => "post_send",
        Action::PostRecv { .. } => "post_recv",
        Action::Dma { .. } => "dma",
        Action::Kernel { .. } => "kernel",
        Action::Vswitch { .. } => "vswitch",
        Action::P4 { .. } => "p4",
        Action::EbpfMap { .. } => "ebpf_map",
        Action::Link { .. } => "link",
        Action::Wait { .. } => "wait",
    }
}

impl Driver {
    /// A driver for `loaded`'s timeline.
    pub fn new(loaded: &Loaded) -> Driver {
        let sc = &loaded.scenario;
        let ops = sc
            .timeline
            .iter()
            .enumerate()
            .map(|(i, o)| OpState {
                name: o.name.clone().unwrap_or_else(|| format!("op{i}")),
                kind: kind_of(&o.action).to_string(),
                phase: Phase::Waiting,
                started: None,
                done: None,
            })
            .collect();
        Driver {
            ops,
            specs: sc.timeline.clone(),
            limit: Instant::ZERO + sc.time_limit.duration(),
            errors: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// When operation `i` may start: `Ok(None)` not yet known, `Err` its predecessor failed.
    fn start_time(&self, i: usize) -> Result<Option<Instant>, String> {
        let o = &self.specs[i];
        if let Some(at) = o.at {
            return Ok(Some(Instant::ZERO + at.duration()));
        }
        let dep = match &o.after {
            Some(name) => Some(
                self.ops
                    .iter()
                    .position(|s| &s.name == name)
                    .ok_or_else(|| format!("no operation {name:?} to start after"))?,
            ),
            None if i == 0 => None,
            None => Some(i - 1),
        };
        let Some(d) = dep else { return Ok(Some(Instant::ZERO + o.delay.duration())) };
        match (&self.ops[d].phase, self.ops[d].done) {
            (Phase::Failed(_), _) => Err(format!("{} failed", self.ops[d].name)),
            (Phase::Done, Some(t)) => Ok(Some(t + o.delay.duration())),
            _ => Ok(None),
        }
    }

    fn all_done(&self) -> bool {
        self.ops.iter().all(|o| matches!(o.phase, Phase::Done | Phase::Failed(_)))
    }

    /// Start what is due at `now`, collect completions; repeat until nothing changes.
    fn progress(&mut self, world: &mut World, now: Instant, idle: bool) -> bool {
        let mut counters: Option<BTreeMap<String, u64>> = None;
        let mut any = false;
        loop {
            let mut changed = false;
            for i in 0..self.ops.len() {
                match self.ops[i].phase.clone() {
                    Phase::Waiting => match self.start_time(i) {
                        Err(why) => {
                            self.ops[i].phase = Phase::Failed(format!("not run: {why}"));
                            changed = true;
                        }
                        Ok(Some(t)) if t <= now => {
                            self.ops[i].started = Some(now);
                            let action = self.specs[i].action.clone();
                            self.ops[i].phase = match start(world, now, &action) {
                                Ok(Started::Host(id)) => Phase::Host(id),
                                Ok(Started::Wait) => Phase::Wait,
                                Ok(Started::Done) => {
                                    self.ops[i].done = Some(now);
                                    Phase::Done
                                }
                                Err(e) => Phase::Failed(e),
                            };
                            counters = None;
                            changed = true;
                        }
                        Ok(_) => {}
                    },
                    Phase::Host(id) => match world.hosts.status(id) {
                        None => {}
                        Some(Ok(t)) => {
                            self.ops[i].done = Some(t);
                            self.ops[i].phase = Phase::Done;
                            changed = true;
                        }
                        Some(Err(e)) => {
                            self.ops[i].done = Some(now);
                            self.ops[i].phase = Phase::Failed(e);
                            changed = true;
                        }
                    },
                    Phase::Wait => {
                        let Action::Wait { cq, counter, count, idle: want_idle } =
                            &self.specs[i].action
                        else {
                            continue;
                        };
                        let host_busy = self.ops.iter().any(|o| matches!(o.phase, Phase::Host(_)));
                        let mut held = true;
                        if let Some(cq) = cq {
                            let n = world.hosts.cqes(cq).map_or(0, |c| c.len() as u64);
                            held &= n >= count.unwrap_or(1);
                        }
                        if let Some(c) = counter {
                            let map = counters.get_or_insert_with(|| world::counters(world));
                            held &= map.get(c).copied().unwrap_or(0) >= count.unwrap_or(1);
                        }
                        if *want_idle {
                            held &= idle && !host_busy;
                        }
                        if held {
                            self.ops[i].done = Some(now);
                            self.ops[i].phase = Phase::Done;
                            changed = true;
                        }
                    }
                    Phase::Done | Phase::Failed(_) => {}
                }
            }
            if !changed {
                return any;
            }
            any = true;
        }
    }

    /// The earliest start time of an operation not yet started.
    fn next_start(&self) -> Option<Instant> {
        (0..self.ops.len())
            .filter(|&i| matches!(self.ops[i].phase, Phase::Waiting))
            .filter_map(|i| self.start_time(i).ok().flatten())
            .min()
    }

    /// Run the timeline to its end: every operation done and nothing pending, or the time
    /// limit (then an error in the report).
    pub fn run(&mut self, world: &mut World, adv: &mut dyn Advance) -> Result<(), ScenarioError> {
        let mut stalled = false;
        loop {
            let now = adv.now(world);
            let idle = adv.idle(world);
            if self.progress(world, now, idle) {
                stalled = false;
            }
            if self.all_done() && adv.idle(world) {
                return Ok(());
            }
            if now >= self.limit {
                let pending: Vec<String> = self
                    .ops
                    .iter()
                    .filter(|o| !matches!(o.phase, Phase::Done | Phase::Failed(_)))
                    .map(|o| o.name.clone())
                    .collect();
                let what = if pending.is_empty() {
                    "devices still busy".to_string()
                } else {
                    format!("operations not done: {}", pending.join(", "))
                };
                self.errors.push(format!(
                    "time limit {} reached: {what}",
                    crate::schema::SimTime(self.limit.as_nanos())
                ));
                // A wait on a counter that never came to exist is most likely a misspelt name.
                let all = world::counters(world);
                for (o, spec) in self.ops.iter().zip(&self.specs) {
                    if let (Phase::Wait, Action::Wait { counter: Some(c), .. }) =
                        (&o.phase, &spec.action)
                        && !all.contains_key(c)
                    {
                        self.errors.push(format!(
                            "{}: there is no counter {c:?} (`snic scenario run --json` lists them)",
                            o.name
                        ));
                    }
                }
                return Ok(());
            }
            let horizon = self.next_start().map_or(self.limit, |t| t.min(self.limit));
            if stalled {
                // Nothing pending and nothing started: on to the next operation's time, or
                // (only conditions left, which nothing can make hold now) the time limit.
                adv.skip_to(world, horizon)?;
                stalled = false;
            } else {
                stalled = !adv.advance(world, horizon)?;
            }
        }
    }

    /// The report: counters, operations, expectations (and golden data unless
    /// `golden` is false), series, trace notes; `end` is the run's end.
    pub fn finish(
        self,
        world: &mut World,
        loaded: &Loaded,
        opts: &RunOptions,
        mode: &str,
        golden: bool,
    ) -> Report {
        let end = world.tb.now();
        world.end = end;
        let mut report = Report {
            scenario: loaded.scenario.name.clone(),
            seed: world.seed,
            mode: mode.to_string(),
            end_ns: end.as_nanos(),
            steps: if mode == "sim" { world.tb.steps() } else { 0 },
            counters: world::counters(world),
            errors: self.errors,
            notes: self.notes,
            ..Report::default()
        };
        for o in &self.ops {
            let error = match &o.phase {
                Phase::Failed(e) => Some(e.clone()),
                _ => None,
            };
            report.ops.push(OpReport {
                name: o.name.clone(),
                kind: o.kind.clone(),
                started_ns: o.started.map(Instant::as_nanos),
                done_ns: o.done.map(Instant::as_nanos),
                error,
            });
        }
        report.expectations = crate::expect::check_all(world, loaded, &report.counters, mode);
        let skipped = loaded.scenario.expect.len() - report.expectations.len();
        if skipped > 0 {
            report.notes.push(format!(
                "{skipped} expectation(s) apply only to the other mode ({}): not checked",
                if mode == "sim" { "real" } else { "sim" }
            ));
        }
        let golden_here = loaded
            .scenario
            .golden
            .as_ref()
            .is_none_or(|g| g.only.is_none_or(|m| m.as_str() == mode));
        if golden && !golden_here {
            report.notes.push(format!(
                "golden data applies only to the other mode: not compared in {mode} mode"
            ));
        }
        if golden && golden_here {
            report.expectations.extend(crate::golden::compare(world, loaded));
        }
        report.series = series(world, loaded);
        if opts.trace.is_some() {
            report.notes.extend(trace_lines(world));
        }
        if let Some(dir) = &opts.pcap_dir
            && let Err(e) = write_pcaps(world, dir)
        {
            report.errors.push(e);
        }
        report.passed = report.errors.is_empty()
            && report.ops.iter().all(|o| o.error.is_none())
            && report.expectations.iter().all(|e| e.passed);
        report
    }
}

enum Started {
    Host(OpId),
    Wait,
    Done,
}

/// Start one operation at `now`.
fn start(world: &mut World, now: Instant, action: &Action) -> Result<Started, String> {
    if Hosts::handles(action) {
        return world
            .hosts
            .start(&mut world.tb, now, action)
            .map(Started::Host)
            .map_err(|e| e.to_string());
    }
    let node_ctl = |world: &World, node: &str| {
        world.controls.get(node).ok_or_else(|| format!("no node {node:?}")).map(|_| ())
    };
    match action {
        Action::Wait { .. } => Ok(Started::Wait),
        Action::Link { link, state, set } => {
            let l = world.links.get(link).ok_or_else(|| format!("no link {link:?}"))?;
            let c = l
                .control
                .as_ref()
                .ok_or_else(|| format!("link {link} cannot be changed in this mode"))?;
            if let Some(imp) = set {
                c.set(imp).map_err(|e| format!("link {link}: {e}"))?;
            }
            if let Some(s) = state {
                c.set_down(*s == LinkState::Down).map_err(|e| format!("link {link}: {e}"))?;
            }
            Ok(Started::Done)
        }
        Action::Vswitch { node, policy, edits } => {
            node_ctl(world, node)?;
            let vs = world.controls[node]
                .vswitch
                .as_ref()
                .ok_or_else(|| format!("node {node} has no vswitch stage"))?;
            if let Some(src) = policy {
                let p = crate::world::policy_of(&world.dir, Some(src))?;
                vs.replace(p).map_err(|e| e.to_string())?;
            }
            if !edits.is_empty() {
                let meters = vs.policy().meters.clone();
                let mut parsed = Vec::new();
                for (i, e) in edits.iter().enumerate() {
                    let edit: Edit = serde_json::from_value(e.clone())
                        .map_err(|err| format!("edit {i}: {err}"))?;
                    parsed.push(
                        to_policy_edit(&edit, &meters, "<scenario>")
                            .map_err(|err| format!("edit {i}: {err}"))?,
                    );
                }
                vs.apply(&parsed).map_err(|e| e.to_string())?;
            }
            Ok(Started::Done)
        }
        Action::P4 { node, commands } => {
            node_ctl(world, node)?;
            let p4 = world.controls[node]
                .p4
                .as_ref()
                .ok_or_else(|| format!("node {node} has no p4 stage"))?;
            let ctl = p4.control();
            for c in commands {
                ctl.apply_text(c).map_err(|e| format!("{c:?}: {e}"))?;
            }
            Ok(Started::Done)
        }
        Action::EbpfMap { node, map, key, value } => {
            node_ctl(world, node)?;
            let x = world.controls[node]
                .xdp
                .first()
                .ok_or_else(|| format!("node {node} has no xdp stage"))?;
            let maps = x.maps();
            let m = maps.by_name(map).ok_or_else(|| format!("node {node}: no map {map:?}"))?;
            let spec = m.spec();
            let k = snic_ebpf::maps::parse_bytes(key, spec.key_size as usize)
                .map_err(|e| format!("key {key:?}: {e}"))?;
            match value {
                Some(v) => {
                    let v = snic_ebpf::maps::parse_bytes(v, spec.value_size as usize)
                        .map_err(|e| format!("value {v:?}: {e}"))?;
                    m.set(&k, &v, 0).map_err(|e| format!("update {map}: {e}"))?;
                }
                None => m.remove(&k).map_err(|e| format!("delete {map}: {e}"))?,
            }
            Ok(Started::Done)
        }
        other => {
            Err(format!("{} is a host operation but the hosts do not take it", kind_of(other)))
        }
    }
}

/// Bytes delivered per link direction and CQEs per CQ, per bucket.
fn series(world: &World, loaded: &Loaded) -> Series {
    let iv = loaded.scenario.sample_interval.0.max(1);
    let end = world.end.as_nanos();
    let buckets = usize::try_from(end / iv + 1).unwrap_or(usize::MAX).min(100_000);
    let bucket =
        |t: Instant| usize::try_from(t.as_nanos() / iv).unwrap_or(usize::MAX).min(buckets - 1);
    let mut s = Series { interval_ns: iv, ..Series::default() };
    for (name, l) in &world.links {
        for (from, to, dir) in [(&l.a, &l.b, "a->b"), (&l.b, &l.a, "b->a")] {
            let _ = from;
            let Some(log) = world.logs.get(to) else { continue };
            let mut v = vec![0u64; buckets];
            for (t, len) in &log.lock().unwrap_or_else(|e| e.into_inner()).received {
                v[bucket(*t)] += u64::from(*len);
            }
            s.links.insert(format!("{name} {dir}"), v);
        }
    }
    for h in &loaded.scenario.hosts {
        for cq in &h.cqs {
            let name = format!("{}.{}", h.name, cq.name);
            let mut v = vec![0u64; buckets];
            for (t, _) in world.hosts.cqes(&name).unwrap_or(&[]) {
                v[bucket(*t)] += 1;
            }
            s.completions.insert(name, v);
        }
    }
    s
}

/// Every node's trace events, formatted, prefixed with the node.
fn trace_lines(world: &mut World) -> Vec<String> {
    let mut out = Vec::new();
    for (name, id) in &world.nodes {
        let events = if let Some(n) = world.tb.nic_mut(*id) {
            n.node.drain_trace()
        } else if let Some(n) = world.tb.node_mut(*id) {
            n.drain_trace()
        } else {
            continue;
        };
        out.extend(events.iter().map(|e| format!("trace {name}: {e}")));
    }
    out
}

/// Write into `dir` every port's sent frames (`NODE.PORT.pcap`), every link direction
/// (`link.LINK.a_to_b.pcap`: what end a sent onto the link), and every host interface's
/// traffic (`host.HOST.rx.pcap`: what it received; `host.HOST.tx.pcap`: what its traffic
/// sources sent).
fn write_pcaps(world: &World, dir: &std::path::Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (port, log) in &world.logs {
        let sent = log.lock().unwrap_or_else(|e| e.into_inner()).sent.clone();
        world::write_capture(&dir.join(format!("{port}.pcap")), &sent)?;
    }
    for (host, port) in &world.host_ports {
        if let Some(log) = world.logs.get(port) {
            let log = log.lock().unwrap_or_else(|e| e.into_inner());
            world::write_capture(&dir.join(format!("host.{host}.rx.pcap")), &log.sent)?;
            world::write_capture(&dir.join(format!("host.{host}.tx.pcap")), &log.injected_frames)?;
        }
    }
    for (name, l) in &world.links {
        for (from, d) in [(&l.a, "a_to_b"), (&l.b, "b_to_a")] {
            if let Some(sent) = world.sent(from) {
                world::write_capture(&dir.join(format!("link.{name}.{d}.pcap")), &sent)?;
            }
        }
    }
    Ok(())
}

/// Build `loaded` on simulated ports and run it; the world is returned for golden data.
pub fn run_world(
    loaded: &Loaded,
    opts: &RunOptions,
    golden: bool,
) -> Result<(Report, World), ScenarioError> {
    let seed = opts.seed.unwrap_or(loaded.scenario.seed);
    let bopts = BuildOptions { trace: opts.trace.clone() };
    let mut world = world::build_with(loaded, seed, &mut SimPorts::default(), &bopts)?;
    let mut driver = Driver::new(loaded);
    driver.run(&mut world, &mut SimAdvance)?;
    let report = driver.finish(&mut world, loaded, opts, "sim", golden);
    Ok((report, world))
}

/// Run `loaded` on the simulated clock.
pub fn run_sim(loaded: &Loaded, opts: &RunOptions) -> Result<Report, ScenarioError> {
    run_world(loaded, opts, true).map(|(r, _)| r)
}
