//! The hitless upgrade of `snic serve`: a new process takes over a running one's host
//! interface, and host programs see a pause, not a reconnect.
//!
//! The protocol and its checks are those of `snic run` (`crate::upgrade`): the new process is
//! started with the same configuration and `--takeover SOCK`, the old one's control socket;
//! it listens on a takeover channel in a private directory and asks the old process, over the
//! control socket, to hand over there (`{"cmd":"upgrade"}`). Both sides check that the peer
//! is a process of their own user, and the new one that its peer is the process that answered
//! on the control socket. Then:
//!
//! 1. The old process pauses its server ([`snic_device::ServerHandle::handover`]): every
//!    worker finishes what its engine took and stops reading doorbells, the setup socket is
//!    no longer served. It sends the handover document (the server's state, see
//!    `snic_device::server::takeover`) with the descriptors: the listening setup socket,
//!    every client's connection, BAR and registered memory, the device memory, the NIC page
//!    and every eventfd.
//! 2. The new process checks the configuration matches ([`snic_device::Server::adopt`]: the
//!    socket, memory sizes, workers, kernels, eBPF core programs) and rebuilds the server
//!    around the same objects; then it says `ready`. Anything failing up to here is an
//!    `abort` with the reason, and the old process resumes as if nothing had happened (the
//!    rollback); so does a new process that dies or says nothing for [`TAKEOVER_TIMEOUT`].
//! 3. The old process answers `committed`: its workers end without touching shared memory
//!    again, and it exits. The new process starts serving at once (clients' doorbells rung
//!    during the pause are found at its workers' first look), waits for the old one to be
//!    gone (SIGKILL after [`TAKEOVER_TIMEOUT`]), and only then binds the control socket.
//!
//! The gap (from the old server's pause to the new one's start) and what moved are printed on
//! stderr and put in the counters document's `takeover` object.
//!
//! With `--rdma ADDR` the RDMA engine of host programs comes along: its QPs (PSNs, outstanding
//! WQEs, timers), CQs and MRs, and its RoCE UDP socket; the peers see a pause and the RC
//! protocol recovers what was in flight.
//!
//! A whole NIC (`--port`) hands over its RDMA engine the same way, and its ports (the wire port
//! and the host netdev, `snic_io::Port::handover`: the same kernel objects, adopted) and its
//! MAC and its neighbour table's known entries; the new process builds its pipeline around
//! them. What was in flight is recovered by the RC protocol.
//!
//! Refused up front, before the old process is paused: `--core-prog`, and stages other than
//! parse, classify and l2fwd. NIC-core eBPF programs' maps and stages' state are not handed
//! over by this version; the old process carries on untouched (it also refuses, naming the
//! reason, if asked anyway, e.g. when its own arguments hold a stateful stage, a core program was loaded into it with `snic ebpf load
//! --core`, or while a chained RDMA command runs).

use crate::handover::{
    Channel, OldProcess, ask_to_hand_over, connect_to_new, unix_ns, wait_gone_or_kill,
};
use crate::upgrade::TAKEOVER_TIMEOUT;
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use snic_device::{Adopted, Server, ServerConfig, ServerHandle};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, SystemTime};

use crate::serve::ServeArgs;

/// Version of the handover document of `snic serve`.
const VERSION: u64 = 1;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What of `snic serve`'s own arguments (beyond the server's configuration, which
/// [`Server::adopt`] checks) must be the same on both sides: core programs, and for a whole
/// NIC its port, RoCE addresses, host netdev, stages and vSwitch policy (the new process
/// builds its pipeline from its own arguments, around the old one's ports).
fn serve_config(args: &ServeArgs) -> Value {
    json!({
        "core_progs": args.core_progs,
        "port": args.port.as_ref().map(|p| p.to_string()),
        "rdma_ip": args.rdma_ip,
        "host_netdev": args.host_netdev,
        "stages": args.stages,
        "policy": args.policy,
    })
}

/// The first difference between two [`serve_config`] documents, for the refusal.
fn config_diff(old: &Value, new: &Value) -> String {
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        return format!("{old} there, {new} here");
    };
    n.iter()
        .filter(|(k, v)| o.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}: {} there, {v} here", o.get(k).unwrap_or(&Value::Null)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Refuse, before the old process is asked to pause (and before anything is opened), what
/// this version cannot take over.
pub fn check_takeover(args: &ServeArgs) -> Result<()> {
    if let Some(p) = args.core_progs.first() {
        bail!(
            "--core-prog {p}: NIC-core eBPF programs (their maps) are not handed over; a server \
             with core programs cannot be taken over"
        );
    }
    // Stages that keep no state; the others' (flows, tables, maps, learnt MACs) is not
    // handed over.
    for st in &args.stages {
        if !matches!(st.as_str(), "parse" | "classify" | "l2fwd" | "local") {
            bail!(
                "--stage {st}: a pipeline stage's state is not handed over; a NIC with stages \
                 other than parse, classify, l2fwd cannot be taken over"
            );
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The old process's side.

/// The old process's end of a takeover, shared by the control socket (which takes the
/// request) and the serve loop (which pauses the server and hands over).
#[derive(Clone)]
pub struct ServeHandoff {
    inner: Arc<Inner>,
}

struct Inner {
    /// The channel of the takeover asked for, and when it was asked.
    pending: Mutex<Option<(Channel, SystemTime)>>,
    /// Wakes the serve loop.
    wake: Mutex<mpsc::Sender<()>>,
    /// The channel of a committed takeover, kept open until this process ends (the new one
    /// waits for it to close).
    committed: Mutex<Option<Channel>>,
    handed: AtomicBool,
    /// A takeover is asked for or under way (from the request until the serve loop's turn
    /// is over): another request is refused meanwhile.
    busy: AtomicBool,
}

impl ServeHandoff {
    /// A handoff, and what wakes the serve loop when a takeover is asked for.
    pub fn new() -> (ServeHandoff, mpsc::Receiver<()>) {
        let (tx, rx) = mpsc::channel();
        let inner = Inner {
            pending: Mutex::new(None),
            wake: Mutex::new(tx),
            committed: Mutex::new(None),
            handed: AtomicBool::new(false),
            busy: AtomicBool::new(false),
        };
        (ServeHandoff { inner: Arc::new(inner) }, rx)
    }

    /// True once the server was handed over.
    pub fn handed_over(&self) -> bool {
        self.inner.handed.load(Ordering::Acquire)
    }

    /// The control socket's `upgrade` request: connect to the new process's channel and
    /// wake the serve loop. The answer for the control client.
    pub fn request(&self, channel: &str) -> Value {
        if self.handed_over() {
            return json!({"ok": false, "error": "this process has already handed over"});
        }
        let mut pending = lock(&self.inner.pending);
        if pending.is_some() || self.inner.busy.load(Ordering::Acquire) {
            return json!({"ok": false, "error": "a takeover is already under way"});
        }
        let chan = match connect_to_new(Path::new(channel)) {
            Ok(c) => c,
            Err(e) => return json!({"ok": false, "error": e}),
        };
        self.inner.busy.store(true, Ordering::Release);
        *pending = Some((chan, SystemTime::now()));
        let _ = lock(&self.inner.wake).send(());
        json!({"ok": true, "pid": std::process::id()})
    }

    /// The serve loop's turn: hand the server over if a takeover is pending. True when the
    /// new process took over (this one must then exit); false when nothing was pending or
    /// the takeover failed (the rollback: the server resumed as it was).
    pub fn serve_turn(&self, server: &ServerHandle, args: &ServeArgs) -> bool {
        let Some((chan, asked)) = lock(&self.inner.pending).take() else { return false };
        let handed = self.hand_over(chan, asked, server, args);
        if !handed {
            self.inner.busy.store(false, Ordering::Release);
        }
        handed
    }

    /// Hand the server over on `chan` (asked for at `asked`); true when it was.
    fn hand_over(
        &self,
        chan: Channel,
        asked: SystemTime,
        server: &ServerHandle,
        args: &ServeArgs,
    ) -> bool {
        // This process's own arguments may hold what cannot be taken over (a stateful stage,
        // a core program) even when the new one's do not: refuse before pausing.
        if let Err(e) = check_takeover(args) {
            let _ = chan.send(&json!({"op": "abort", "error": format!("{e:#}")}), &[]);
            eprintln!("snic serve: takeover refused, carrying on: {e:#}");
            return false;
        }
        let paused_at = SystemTime::now();
        let handover = match server.handover() {
            Ok(h) => h,
            Err(e) => {
                let e = anyhow::anyhow!("the server cannot hand over: {e}");
                let _ = chan.send(&json!({"op": "abort", "error": format!("{e:#}")}), &[]);
                eprintln!("snic serve: takeover refused, carrying on: {e:#}");
                return false;
            }
        };
        let doc = json!({
            "op": "handover",
            "version": VERSION,
            "pid": std::process::id(),
            "serve": serve_config(args),
            "server": handover.doc,
            "asked_at_unix_ns": unix_ns(asked),
            "paused_at_unix_ns": unix_ns(paused_at),
        });
        match exchange(&chan, &doc, &handover.fds) {
            Ok(()) => {
                handover.commit();
                self.inner.handed.store(true, Ordering::Release);
                *lock(&self.inner.committed) = Some(chan);
                eprintln!(
                    "snic serve: handed over to the new process after {:.1} ms paused; exiting",
                    paused_at.elapsed().unwrap_or_default().as_secs_f64() * 1e3
                );
                true
            }
            Err(e) => {
                handover.resume();
                let _ = chan.send(&json!({"op": "abort", "error": format!("{e:#}")}), &[]);
                eprintln!("snic serve: takeover failed, carrying on as before: {e:#}");
                false
            }
        }
    }
}

/// Send the handover, wait for `ready`, answer `committed`.
fn exchange(chan: &Channel, doc: &Value, fds: &[OwnedFd]) -> Result<()> {
    let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(AsFd::as_fd).collect();
    chan.send(doc, &borrowed).context("sending the handover")?;
    let (reply, _) = chan.recv(TAKEOVER_TIMEOUT).context("waiting for the new process")?;
    match reply["op"].as_str() {
        Some("ready") => {}
        Some("abort") => {
            bail!("the new process refused: {}", reply["error"].as_str().unwrap_or("?"))
        }
        _ => bail!("unexpected answer from the new process: {reply}"),
    }
    chan.send(&json!({"op": "committed"}), &[]).context("confirming the takeover")?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The new process's side.

/// A whole NIC's adopted ports (wire first, then the host netdev) and its MAC.
pub type HandedNic = (Vec<Box<dyn snic_io::Port>>, [u8; 6]);

/// A takeover of `snic serve` under way, on the new process's side.
pub struct ServeTakeover {
    chan: Channel,
    doc: Value,
    /// The handed descriptors not yet taken.
    fds: Vec<Option<OwnedFd>>,
    /// The old process.
    old: OldProcess,
    /// What moved, for the report.
    summary: serde_json::Map<String, Value>,
}

impl ServeTakeover {
    /// Ask the process answering on `control` to hand over, and receive what it hands.
    /// What cannot be taken over is refused first ([`check_takeover`]), so a server is not
    /// paused for nothing.
    pub fn begin(control: &Path, args: &ServeArgs) -> Result<ServeTakeover> {
        check_takeover(args)?;
        let (chan, old) = ask_to_hand_over(control, TAKEOVER_TIMEOUT)?;
        let (doc, fds) = chan.recv(TAKEOVER_TIMEOUT).context("receiving the handover")?;
        match doc["op"].as_str() {
            Some("handover") if doc["version"].as_u64() == Some(VERSION) => {}
            Some("abort") => bail!(
                "the old process could not hand over: {}",
                doc["error"].as_str().unwrap_or("?")
            ),
            _ => bail!("not a `snic serve` handover document (version {VERSION}): {}", doc["op"]),
        }
        let fds = fds.into_iter().map(Some).collect();
        let t = ServeTakeover { chan, doc, fds, old, summary: serde_json::Map::new() };
        // Checked before anything is built around the handed objects.
        let mine = serve_config(args);
        if t.doc["serve"] != mine {
            let e = anyhow::anyhow!(
                "the old process runs with other arguments ({}): start the new process with \
                 the same arguments",
                config_diff(&t.doc["serve"], &mine)
            );
            t.abort(&e);
            return Err(e);
        }
        Ok(t)
    }

    /// Tell the old process this takeover failed; it carries on.
    pub fn abort(&self, why: &anyhow::Error) {
        let _ = self.chan.send(&json!({"op": "abort", "error": format!("{why:#}")}), &[]);
    }

    /// Rebuild the server from the handover with `cfg` (which must match the old one's) and,
    /// for a whole NIC, `wire` (built around [`Self::wire_ports`]), not yet running.
    /// A whole NIC's handed ports (wire first, then the host netdev) as `--port` and
    /// `--host-netdev` name them, adopted, and its MAC; `None` when the old server was no NIC.
    pub fn wire_ports(
        &mut self,
        spec: &snic_io::PortSpec,
        args: &ServeArgs,
    ) -> Result<Option<HandedNic>> {
        let handed = snic_device::server::takeover::wire_ports(&self.doc["server"], &mut self.fds)
            .context("the handed ports")?;
        let Some((ports, mac)) = handed else {
            bail!("this process runs a NIC (--port {spec}), the old one did not");
        };
        let mut specs = vec![spec.clone()];
        specs.extend(args.host_netdev.iter().map(|n| snic_io::PortSpec::Tap { name: n.clone() }));
        if ports.len() != specs.len() {
            bail!(
                "the old NIC has {} port(s), this one {}: start it with the same --port and \
                 --host-netdev",
                ports.len(),
                specs.len()
            );
        }
        let mut out = Vec::new();
        for (spec, (name, state, fds)) in specs.iter().zip(ports) {
            let state: snic_io::handover::PortState = serde_json::from_value(state)
                .with_context(|| format!("the state of the old NIC's port {name}"))?;
            out.push(spec.adopt(&state, fds).with_context(|| format!("adopting {name}"))?);
        }
        self.summary.insert("ports_adopted".into(), json!(out.len()));
        Ok(Some((out, mac)))
    }

    pub fn adopt(
        &mut self,
        cfg: ServerConfig,
        wire: Option<snic_device::Wire>,
        args: &ServeArgs,
    ) -> Result<Adopted> {
        if self.doc["serve"] != serve_config(args) {
            bail!(
                "the old process runs with other arguments ({})",
                config_diff(&self.doc["serve"], &serve_config(args))
            );
        }
        let fds = std::mem::take(&mut self.fds);
        let adopted = Server::adopt(cfg, wire, &self.doc["server"], fds)
            .context("rebuilding the server from the handover")?;
        self.summary.insert("clients".into(), json!(adopted.clients()));
        self.summary.insert("queues".into(), json!(adopted.queues()));
        self.summary.insert("rdma_qps".into(), json!(adopted.rdma_qps()));
        Ok(adopted)
    }

    /// Say `ready` and wait for `committed`: from then on the server is this process's.
    pub fn confirm(&self) -> Result<()> {
        self.chan.send(&json!({"op": "ready"}), &[])?;
        let (reply, _) = self.chan.recv(TAKEOVER_TIMEOUT).context("waiting for `committed`")?;
        if reply["op"] != "committed" {
            bail!("the old process did not commit: {reply}");
        }
        Ok(())
    }

    /// Wait (at most [`TAKEOVER_TIMEOUT`]) for the old process to be gone; kill it if it
    /// is not (it committed: it must not serve on, and its control socket must be free).
    pub fn wait_old_gone(&self) -> Result<()> {
        wait_gone_or_kill(&self.chan, &self.old, TAKEOVER_TIMEOUT, "snic serve")
    }

    /// The gap so far: from the old server's pause until now.
    pub fn gap(&self) -> Duration {
        let paused = self.doc["paused_at_unix_ns"].as_u64().unwrap_or(0);
        Duration::from_nanos(unix_ns(SystemTime::now()).saturating_sub(paused))
    }

    /// What moved, and the gap: for stderr and the counters document.
    pub fn report(&self, gap: Duration) -> Value {
        let mut m = self.summary.clone();
        m.insert("old_pid".into(), json!(self.old.pid));
        m.insert("gap_ms".into(), json!((gap.as_secs_f64() * 1e6).round() / 1e3));
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second `upgrade` request is refused from the first one's acceptance until the serve
    /// loop's turn is over, not only while the first waits to be taken up.
    #[test]
    fn a_second_upgrade_request_is_refused_while_one_is_under_way() {
        let dir = crate::handover::PrivateDir::new().unwrap();
        let path = dir.0.join("channel.sock");
        let _listener = Channel::listen(&path).unwrap();
        let (handoff, wake) = ServeHandoff::new();
        let first = handoff.request(path.to_str().unwrap());
        assert_eq!(first["ok"], true, "{first}");
        assert!(wake.try_recv().is_ok(), "the serve loop is woken");
        // The serve loop took it up (serve_turn's first step) and is exchanging.
        let taken = lock(&handoff.inner.pending).take();
        assert!(taken.is_some());
        let second = handoff.request(path.to_str().unwrap());
        assert_eq!(second["ok"], false, "{second}");
        assert!(second["error"].as_str().unwrap().contains("already under way"), "{second}");
        // Its turn over without a takeover: a new request is taken again.
        handoff.inner.busy.store(false, Ordering::Release);
        let third = handoff.request(path.to_str().unwrap());
        assert_eq!(third["ok"], true, "{third}");
    }
}
