//! The hitless upgrade of `snic run`: a new process takes over a running one's ports and
//! vSwitch state, and the old one exits (seed 001's servicing without dropping connections).
//!
//! The new process is started with the same configuration and `--takeover SOCK`, the old
//! one's control socket. It builds its pipelines first (so that costs the old process no
//! pause), listens on a takeover channel of its own ([`Channel`]) and asks the old process,
//! over the control socket, to hand over there (`{"cmd":"upgrade"}`). Then:
//!
//! 1. The old process pauses its run ([`Runtime::run_pausable`](snic_io::runtime::Runtime)):
//!    nothing is received any more, what is in flight is processed and transmitted, the ports
//!    are flushed. Frames that arrive from here on wait in the kernel (the AF_PACKET ring, the
//!    TAP queue, the socket buffer).
//! 2. It sends the handover document: every port's state with duplicates of its descriptors
//!    ([`snic_io::handover`]), the vSwitch's state (policy, connections with their TCP state,
//!    SNAT bindings; the flow tables are not sent, the new slow path compiles them again as
//!    packets come), its configuration's ports, stages and workers, and the time it paused.
//! 3. The new process checks the configuration matches, adopts the descriptors (the same
//!    sockets, rings and queues: nothing is reconfigured), puts its pipelines around them,
//!    imports the vSwitch state, does the rest of its setup that may fail, and says `ready`.
//!    Anything failing up to here is an `abort` with the reason, and the old process resumes
//!    as if nothing had happened (the rollback); so does a new process that dies or says
//!    nothing for [`TAKEOVER_TIMEOUT`].
//! 4. The old process answers `committed`, stops without receiving or transmitting another
//!    frame, prints its final counters (read before it handed the ports over) and exits. The
//!    new process runs as soon as it has `committed`; a thread of its own waits for the old
//!    one to be gone (killing it after [`TAKEOVER_TIMEOUT`]), then binds the control socket
//!    and the metrics address the old one held.
//!
//! The new process reports the gap (from the old one's pause to the start of its run loop),
//! the steps of it, and what the takeover moved on stderr and in the counters document's
//! `takeover` object.
//!
//! AF_XDP ports are handed over whole: the sockets, the memory files behind their UMEMs and
//! the link of the XDP program (see [`snic_io::handover`]). Generators and pcap files are
//! refused up front (they would start again); `null` ports are opened again.

use crate::handover::{
    Channel, OldProcess, ask_to_hand_over, connect_to_new, unix_ns, wait_gone_or_kill,
};
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use snic_io::handover::PortState;
use snic_io::runtime::{AfterPause, OpenPorts, PausedPort, RunConfig};
use snic_io::{Port, PortSpec};
use snic_time::Clock;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Longest either side waits for the other at any step of a takeover.
pub const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// Version of the handover document.
const VERSION: u64 = 1;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------------------------
// The old process's side.

/// What the old process hands over besides its ports.
pub struct OldSide {
    /// The configuration's ports, as spec strings.
    pub specs: Vec<String>,
    /// The configuration's stages ([`stage_list`]).
    pub stages: Vec<String>,
    /// The same as they may be shown ([`stages_shown`]).
    pub stages_shown: Vec<String>,
    /// Workers.
    pub workers: usize,
    /// Each worker owns a queue of every port.
    pub per_worker_queues: bool,
    /// The vSwitch of the run, if it has one.
    pub vswitch: Option<snic_vswitch::engine::VSwitch>,
    /// The run's clock (the vSwitch's times are on it).
    pub clock: snic_time::MonotonicClock,
}

/// The old process's end of a takeover, shared by the control socket (which takes the
/// request) and the run loop (which pauses and hands over).
#[derive(Clone, Default)]
pub struct Handoff {
    inner: Arc<HandoffInner>,
}

#[derive(Default)]
struct HandoffInner {
    pause: AtomicBool,
    pending: Mutex<Option<Channel>>,
    /// The channel of a committed takeover, kept open until this process ends (the new one
    /// waits for it to close).
    committed: Mutex<Option<Channel>>,
    handed: AtomicBool,
    /// When the pending takeover asked for the pause (the gap starts there: the drain before
    /// the handover is part of it).
    requested_at: Mutex<Option<SystemTime>>,
}

impl Handoff {
    /// The flag the run loop pauses on.
    pub fn pause_flag(&self) -> &AtomicBool {
        &self.inner.pause
    }

    /// True once the run was handed over (the run then ended without the usual drain).
    pub fn handed_over(&self) -> bool {
        self.inner.handed.load(Ordering::Acquire)
    }

    /// The control socket's `upgrade` request: connect to the new process's channel and ask
    /// the run to pause. The answer for the control client.
    pub fn request(&self, channel: &str) -> Value {
        if self.handed_over() {
            return json!({"ok": false, "error": "this process has already handed over"});
        }
        let mut pending = lock(&self.inner.pending);
        if pending.is_some() {
            return json!({"ok": false, "error": "a takeover is already under way"});
        }
        let chan = match connect_to_new(Path::new(channel)) {
            Ok(c) => c,
            Err(e) => return json!({"ok": false, "error": e}),
        };
        *pending = Some(chan);
        *lock(&self.inner.requested_at) = Some(SystemTime::now());
        self.inner.pause.store(true, Ordering::Release);
        json!({"ok": true, "pid": std::process::id()})
    }

    /// The run loop's pause: hand the ports and the vSwitch state over the pending channel.
    /// [`AfterPause::Stop`] once the new process has taken over; [`AfterPause::Resume`] when
    /// there was nothing pending or the takeover failed (the rollback: the ports were only
    /// lent, their own descriptors are untouched).
    pub fn on_pause(&self, ports: &mut [PausedPort<'_>], old: &OldSide) -> AfterPause {
        let Some(chan) = lock(&self.inner.pending).take() else { return AfterPause::Resume };
        let paused_at = lock(&self.inner.requested_at).take().unwrap_or_else(SystemTime::now);
        match self.hand_over(&chan, ports, old, paused_at) {
            Ok(()) => {
                self.inner.handed.store(true, Ordering::Release);
                *lock(&self.inner.committed) = Some(chan);
                eprintln!(
                    "snic: handed over to the new process after {:.1} ms paused; exiting",
                    paused_at.elapsed().unwrap_or_default().as_secs_f64() * 1e3
                );
                AfterPause::Stop
            }
            Err(e) => {
                let _ = chan.send(&json!({"op": "abort", "error": format!("{e:#}")}), &[]);
                eprintln!("snic: takeover failed, carrying on as before: {e:#}");
                AfterPause::Resume
            }
        }
    }

    fn hand_over(
        &self,
        chan: &Channel,
        ports: &mut [PausedPort<'_>],
        old: &OldSide,
        paused_at: SystemTime,
    ) -> Result<()> {
        let mut entries = Vec::with_capacity(ports.len());
        let mut fds: Vec<OwnedFd> = Vec::new();
        for p in ports.iter_mut() {
            let name = p.inner.name().to_string();
            match p.inner.handover() {
                None => entries
                    .push(json!({"port": p.port, "queue": p.queue, "name": name, "reopen": true})),
                Some(Ok(h)) => {
                    entries.push(json!({"port": p.port, "queue": p.queue, "name": name,
                        "state": h.state, "fds": h.fds.len()}));
                    fds.extend(h.fds);
                }
                Some(Err(e)) => bail!("port {} ({name}) cannot be handed over: {e}", p.port),
            }
        }
        let vswitch = match &old.vswitch {
            Some(vs) => Some(export_vswitch(vs, old.clock.now())?),
            None => None,
        };
        let doc = json!({
            "op": "handover",
            "version": VERSION,
            "pid": std::process::id(),
            "ports_spec": old.specs,
            "stages": old.stages,
            "stages_shown": old.stages_shown,
            "workers": old.workers,
            "per_worker_queues": old.per_worker_queues,
            "ports": entries,
            "vswitch": vswitch,
            "paused_at_unix_ns": unix_ns(paused_at),
        });
        let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(AsFd::as_fd).collect();
        chan.send(&doc, &borrowed).context("sending the handover")?;
        drop(fds);
        let (reply, _) = chan.recv(TAKEOVER_TIMEOUT).context("waiting for the new process")?;
        match reply["op"].as_str() {
            Some("ready") => {}
            Some("abort") => bail!("the new process refused: {}", reply["error"]),
            _ => bail!("unexpected answer from the new process: {reply}"),
        }
        chan.send(&json!({"op": "committed"}), &[]).context("confirming the takeover")?;
        Ok(())
    }
}

/// The vSwitch's state as the handover carries it.
fn export_vswitch(vs: &snic_vswitch::engine::VSwitch, now: snic_time::Instant) -> Result<Value> {
    serde_json::to_value(vs.export_state(now)).context("encoding the vSwitch state")
}

// ---------------------------------------------------------------------------------------------
// The new process's side.

/// A takeover under way, on the new process's side.
pub struct Takeover {
    chan: Channel,
    doc: Value,
    /// The handed descriptors, taken by [`Takeover::open_ports`].
    fds: Vec<OwnedFd>,
    /// The old process.
    old: OldProcess,
    /// What moved, for the report.
    summary: serde_json::Map<String, Value>,
    /// When each step of the takeover ended, in ms since the old process paused (the
    /// report's `steps_ms`: where the gap goes).
    steps: serde_json::Map<String, Value>,
}

/// The stages of a configuration as the handover compares them (in full: a kernel stage's
/// key too; the handover goes to a process of the same user only).
pub fn stage_list(stages: &[snic_pipeline::StageSpec]) -> Vec<String> {
    stages.iter().map(|s| String::from(s.clone())).collect()
}

/// The stages of a configuration as they may be shown (a kernel stage without its key).
pub fn stages_shown(stages: &[snic_pipeline::StageSpec]) -> Vec<String> {
    stages
        .iter()
        .map(|s| match s {
            snic_pipeline::StageSpec::Kernel { name, args } => snic_stream::spec_text(name, args),
            s => String::from(s.clone()),
        })
        .collect()
}

/// Refuse, before the old process is asked to pause, a configuration that cannot be taken
/// over: ports that would start again from nothing (a pcap file would be read again from its
/// start, or its output truncated under the old process; a generator would replay), and
/// stages whose state changed at run time is not carried (a `p4` stage's table entries,
/// counters and registers; an `xdp` stage's maps): the new process would run them from their
/// start-up state, silently.
pub fn check_takeover_ports(cfg: &RunConfig) -> Result<()> {
    for s in &cfg.stages {
        match s {
            snic_pipeline::StageSpec::P4 { .. } => bail!(
                "stage p4: its tables, counters and registers are not carried by a takeover \
                 (a run with a p4 stage cannot be taken over)"
            ),
            snic_pipeline::StageSpec::Xdp { .. } => bail!(
                "stage xdp: its maps are not carried by a takeover (a run with an xdp stage \
                 cannot be taken over)"
            ),
            _ => {}
        }
    }
    for s in &cfg.ports {
        match s {
            PortSpec::Pcap { .. } | PortSpec::Gen { .. } => bail!(
                "{s}: a pcap or generator port cannot be taken over (it would start again \
                 from the beginning)"
            ),
            _ => {}
        }
    }
    Ok(())
}

impl Takeover {
    /// Ask the process answering on `control` to hand over, and receive what it hands. The
    /// configuration's ports are checked first (see [`check_takeover_ports`]), so a run that
    /// cannot be taken over is not paused for nothing.
    pub fn begin(control: &Path, cfg: &RunConfig) -> Result<Takeover> {
        check_takeover_ports(cfg)?;
        let (chan, old) = ask_to_hand_over(control, TAKEOVER_TIMEOUT)?;
        let (doc, fds) = chan.recv(TAKEOVER_TIMEOUT).context("receiving the handover")?;
        match doc["op"].as_str() {
            Some("handover") if doc["version"].as_u64() == Some(VERSION) => {}
            Some("abort") => bail!("the old process could not hand over: {}", doc["error"]),
            _ => bail!("not a handover document (version {VERSION}): {}", doc["op"]),
        }
        let mut t = Takeover {
            chan,
            doc,
            fds,
            old,
            summary: serde_json::Map::new(),
            steps: serde_json::Map::new(),
        };
        t.step("received");
        Ok(t)
    }

    /// Tell the old process this takeover failed; it carries on.
    pub fn abort(&self, why: &anyhow::Error) {
        let _ = self.chan.send(&json!({"op": "abort", "error": format!("{why:#}")}), &[]);
    }

    /// The ports, adopted from the handed descriptors (or opened again for kinds that are not
    /// handed over), laid out as the old process had them. The configuration must name the
    /// same ports and workers.
    pub fn open_ports(&mut self, cfg: &RunConfig) -> Result<OpenPorts> {
        let specs: Vec<String> = cfg.ports.iter().map(ToString::to_string).collect();
        if self.doc["ports_spec"] != json!(specs) {
            bail!(
                "the old process runs ports {}, this one is configured with {}: start the new \
                 process with the same ports",
                self.doc["ports_spec"],
                json!(specs)
            );
        }
        // (A handover from a build that did not send its stages is not checked.)
        let stages = stage_list(&cfg.stages);
        if !self.doc["stages"].is_null() && self.doc["stages"] != json!(stages) {
            bail!(
                "the old process runs stages {}, this one is configured with {}: start the new \
                 process with the same stages",
                self.doc["stages_shown"],
                json!(stages_shown(&cfg.stages))
            );
        }
        if self.doc["workers"].as_u64() != Some(cfg.workers as u64) {
            bail!(
                "the old process runs {} worker(s), this one {}: start it with the same --workers",
                self.doc["workers"],
                cfg.workers
            );
        }
        let queues = self.doc["per_worker_queues"].as_bool() == Some(true);
        let per_port = if queues { cfg.workers } else { 1 };
        let entries = self.doc["ports"].as_array().cloned().unwrap_or_default();
        if entries.len() != cfg.ports.len() * per_port {
            bail!(
                "the handover has {} port entries, {} expected",
                entries.len(),
                cfg.ports.len() * per_port
            );
        }
        let mut fds = std::mem::take(&mut self.fds).into_iter();
        // grid[port][queue]
        let mut grid: Vec<Vec<Option<Box<dyn Port>>>> =
            (0..cfg.ports.len()).map(|_| (0..per_port).map(|_| None).collect()).collect();
        let (mut adopted, mut reopened) = (0u64, 0u64);
        for e in &entries {
            let (Some(port), Some(queue)) = (e["port"].as_u64(), e["queue"].as_u64()) else {
                bail!("bad port entry {e}");
            };
            let (port, queue) = (port as usize, queue as usize);
            let Some(spec) = cfg.ports.get(port) else { bail!("bad port entry {e}") };
            if queue >= per_port || grid[port][queue].is_some() {
                bail!("bad port entry {e}");
            }
            if e["reopen"] == json!(true) {
                continue;
            }
            let state: PortState = serde_json::from_value(e["state"].clone())
                .with_context(|| format!("port {port}'s state"))?;
            let n = e["fds"].as_u64().unwrap_or(0) as usize;
            let mine: Vec<OwnedFd> = fds.by_ref().take(n).collect();
            if mine.len() != n {
                bail!("port {port}: {n} descriptors announced, fewer handed");
            }
            // An AF_XDP socket of one queue must be the one this slot binds (worker `k` has
            // queue `QUEUE + k`; a port of every queue starts at 0).
            if let (PortState::AfXdp(s), PortSpec::AfXdp { queue: first, .. }) = (&state, spec) {
                let want: Vec<u64> = if s.all_queues {
                    (0..s.sockets.len() as u64).collect()
                } else {
                    vec![u64::from(*first) + queue as u64]
                };
                let got: Vec<u64> = s.sockets.iter().map(|x| u64::from(x.queue)).collect();
                if got != want {
                    bail!(
                        "port {port} ({spec}): sockets of queues {got:?} handed, {want:?} expected"
                    );
                }
            }
            grid[port][queue] = Some(spec.adopt(&state, mine)?);
            adopted += 1;
        }
        // Kinds that are not handed over are opened again, whole.
        for (port, spec) in cfg.ports.iter().enumerate() {
            if grid[port].iter().all(Option::is_some) {
                continue;
            }
            if grid[port].iter().any(Option::is_some) {
                bail!("port {port} ({spec}): some queues handed over, some not");
            }
            let opened = if queues {
                spec.open_queues(per_port)?.context("a port kind that does not split")?
            } else {
                vec![spec.open()?]
            };
            for (slot, p) in grid[port].iter_mut().zip(opened) {
                *slot = Some(p);
                reopened += 1;
            }
        }
        self.step("ports");
        self.summary.insert("ports_adopted".into(), json!(adopted));
        self.summary.insert("ports_reopened".into(), json!(reopened));
        let mut grid: Vec<Vec<Box<dyn Port>>> =
            grid.into_iter().map(|q| q.into_iter().flatten().collect()).collect();
        Ok(if queues {
            // [port][queue] -> [queue][port]
            let mut per_worker: Vec<Vec<Box<dyn Port>>> =
                (0..per_port).map(|_| Vec::new()).collect();
            for q in grid {
                for (w, p) in per_worker.iter_mut().zip(q) {
                    w.push(p);
                }
            }
            OpenPorts::Queues(per_worker)
        } else {
            OpenPorts::Shared(grid.iter_mut().filter_map(|q| q.pop()).collect())
        })
    }

    /// Import the vSwitch state into `vs` (the new run's, before it starts).
    pub fn import_vswitch(
        &mut self,
        vs: Option<&snic_vswitch::engine::VSwitch>,
        now: snic_time::Instant,
    ) -> Result<()> {
        let state = &self.doc["vswitch"];
        match (vs, state.is_null()) {
            (None, true) => Ok(()),
            (None, false) => bail!("the old process has a vswitch stage, this one has none"),
            (Some(_), true) => bail!("this process has a vswitch stage, the old one had none"),
            (Some(vs), false) => {
                let state =
                    serde_json::from_value(state.clone()).context("the handed vSwitch state")?;
                let s = vs.import_state(&state, now).context("importing the vSwitch state")?;
                self.summary
                    .insert("vswitch".into(), serde_json::to_value(s).unwrap_or(Value::Null));
                self.step("vswitch");
                Ok(())
            }
        }
    }

    /// Say `ready` and wait for `committed`. The ports are this process's from then on (the
    /// old process sends and receives nothing more); [`Takeover::wait_old`] waits for it to
    /// be gone.
    pub fn commit(&mut self) -> Result<()> {
        self.chan.send(&json!({"op": "ready"}), &[])?;
        let (reply, _) = self.chan.recv(TAKEOVER_TIMEOUT).context("waiting for `committed`")?;
        if reply["op"] != "committed" {
            bail!("the old process did not commit: {reply}");
        }
        self.step("committed");
        Ok(())
    }

    /// Wait (at most [`TAKEOVER_TIMEOUT`]) for the old process, which committed, to be gone,
    /// and kill it if it is not: it must not serve on, and its listeners would keep this
    /// process from binding the control socket.
    pub fn wait_old(&self) -> Result<()> {
        wait_gone_or_kill(&self.chan, &self.old, TAKEOVER_TIMEOUT, "snic")
    }

    /// Note that step `name` ended now (see [`Takeover::report`]).
    pub fn step(&mut self, name: &str) {
        let ms = (self.gap().as_secs_f64() * 1e4).round() / 10.0;
        self.steps.insert(name.into(), json!(ms));
    }

    /// The gap so far: from the old process's pause until now.
    pub fn gap(&self) -> Duration {
        let paused = self.doc["paused_at_unix_ns"].as_u64().unwrap_or(0);
        Duration::from_nanos(unix_ns(SystemTime::now()).saturating_sub(paused))
    }

    /// What moved, and the gap: for stderr and the counters document.
    pub fn report(&self, gap: Duration) -> Value {
        let mut m = self.summary.clone();
        m.insert("old_pid".into(), json!(self.old.pid));
        m.insert("gap_ms".into(), json!((gap.as_secs_f64() * 1e6).round() / 1e3));
        m.insert("steps_ms".into(), Value::Object(self.steps.clone()));
        Value::Object(m)
    }
}
