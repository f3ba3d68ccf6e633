//! A takeover of a running server by a new process (the hitless upgrade of `snic serve`).
//!
//! The old process pauses ([`ServerHandle::handover`]): every worker finishes what its engine
//! took and stops reading doorbells, and the control thread stops answering clients. What
//! lives outside shared memory comes back as one JSON document and its descriptors: the
//! listening setup socket, every client's connection, BAR and registered memory (memfds), the
//! device memory (memfds, with every allocation), the NIC page, the workers' kick eventfds,
//! and per worker the queues (configuration, state, indices, the register values last read
//! and written), channels and kernel slots with their eventfds. The new process rebuilds a
//! server around them ([`Server::adopt`], then [`Adopted::prepare`] before the commit and
//! [`Prepared::go`] after it, which cannot fail): the same memory at the
//! same addresses, the same sockets, the same eventfds, so clients keep their sessions and see
//! only a pause; doorbells they rang meanwhile are found when the new workers first look.
//! Counters start again from zero in the new process.
//!
//! With `ServerConfig::rdma` the RDMA engine comes along: its thread parks between two rounds,
//! the engine's connections (`Rnic::export`: QPs with their PSNs, outstanding WQEs and timers,
//! CQs, MRs) and every client's RDMA objects go in the document, its UDP socket with the
//! descriptors; the new engine imports them with the QPs' rings where they were (the memory
//! they are in came along). Packets in flight during the pause are recovered by the RC
//! protocol (the peer retransmits).
//!
//! On a NIC's wire port the engine comes the same way, with the NIC's ports (flushed, then
//! `Port::handover`: duplicates of their descriptors and their state, see [`wire_ports`]) and
//! its MAC and the neighbour table's known entries; the new process builds its NIC around the
//! adopted ports. Stages' state is not carried (the caller refuses stateful stages).
//!
//! Not carried: NIC-core eBPF programs (their maps): a server with one refuses to hand over,
//! naming it; so does one with a chained RDMA command in flight. A worker that cannot stop cleanly (a streaming packet half
//! gathered) refuses too; the server then carries on as before, as it does after
//! [`Handover::resume`].

use super::*;
use snic_dma::{Mode, QueueSnapshot, QueueState};

use crate::worker::{ChanExport, KSlotExport, QueueExport, WorkerExport};

/// Version of the handover document.
const VERSION: u64 = 1;

/// Longest the control thread waits for all workers to pause: their drain
/// (`worker::PAUSE_DRAIN`, run in parallel) and a margin.
const PAUSE_WAIT: Duration = Duration::from_millis(2500);

/// A paused server's state for a new process: [`Handover::doc`] and the descriptors it
/// indexes ([`Handover::fds`], duplicates: this process keeps its own). The server stays
/// paused until [`Handover::resume`] (or this is dropped) or [`Handover::commit`].
#[derive(Debug)]
pub struct Handover {
    /// The state (see the module doc); descriptors are indices into `fds`.
    pub doc: Value,
    /// The descriptors.
    pub fds: Vec<OwnedFd>,
    decide: mpsc::Sender<bool>,
}

impl Handover {
    /// The takeover failed: serve on as before.
    pub fn resume(self) {
        let _ = self.decide.send(false);
    }

    /// The new process took over: the server's threads end without touching shared memory
    /// or the socket file again ([`ServerHandle::shutdown`] then only joins them).
    pub fn commit(self) {
        let _ = self.decide.send(true);
    }
}

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("handover: {}", what.into()))
}

/// A duplicate of `fd` added to `fds`; its index.
fn put(fds: &mut Vec<OwnedFd>, fd: BorrowedFd<'_>) -> io::Result<usize> {
    fds.push(fd.try_clone_to_owned()?);
    Ok(fds.len() - 1)
}

fn put_irq(fds: &mut Vec<OwnedFd>, irq: Option<&Arc<EventFd>>) -> io::Result<Value> {
    Ok(match irq {
        Some(e) => json!(put(fds, e.fd())?),
        None => Value::Null,
    })
}

fn state_json(s: QueueState) -> Value {
    match s {
        QueueState::Added => json!("added"),
        QueueState::Running => json!("running"),
        QueueState::Stopped => json!("stopped"),
        QueueState::Error(st) => json!({ "error": st as u8 }),
    }
}

fn state_from(v: &Value) -> io::Result<QueueState> {
    Ok(match v.as_str() {
        Some("added") => QueueState::Added,
        Some("running") => QueueState::Running,
        Some("stopped") => QueueState::Stopped,
        _ => {
            let code = v["error"].as_u64().and_then(|c| u8::try_from(c).ok());
            QueueState::Error(
                code.and_then(Status::from_code).ok_or_else(|| bad(format!("queue state {v}")))?,
            )
        }
    })
}

fn dir_from(v: &Value) -> io::Result<Dir> {
    v.as_u64()
        .and_then(|c| u8::try_from(c).ok())
        .and_then(Dir::from_code)
        .ok_or_else(|| bad(format!("direction {v}")))
}

fn notify(interrupt: bool) -> Notify {
    if interrupt { Notify::Interrupt } else { Notify::Poll }
}

fn num(v: &Value, key: &str) -> io::Result<u64> {
    v[key].as_u64().ok_or_else(|| bad(format!("`{key}` missing or not a number in {v}")))
}

fn num32(v: &Value, key: &str) -> io::Result<u32> {
    u32::try_from(num(v, key)?).map_err(|_| bad(format!("`{key}` out of range")))
}

fn words<const N: usize>(v: &Value, key: &str) -> io::Result<[u32; N]> {
    let a = v[key].as_array().filter(|a| a.len() == N).ok_or_else(|| bad(format!("`{key}`")))?;
    let mut out = [0u32; N];
    for (o, x) in out.iter_mut().zip(a) {
        *o = x
            .as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .ok_or_else(|| bad(format!("`{key}`")))?;
    }
    Ok(out)
}

fn worker_json(ex: &WorkerExport, fds: &mut Vec<OwnedFd>) -> io::Result<Value> {
    let mut queues = Vec::new();
    for q in &ex.queues {
        let (c, i) = (&q.snap.cfg, &q.snap.idx);
        queues.push(json!({
            "qid": q.qid,
            "owner": c.owner,
            "st": c.mode == Mode::St,
            "ring_size": c.ring_size,
            "cmpt_size": c.cmpt_size,
            "h2c_ring": c.h2c_ring,
            "c2h_ring": c.c2h_ring,
            "cmpt_ring": c.cmpt_ring,
            "align": c.align,
            "interrupt": c.notify == Notify::Interrupt,
            "stream_to": c.stream_to,
            "state": state_json(q.snap.state),
            "idx": [i.h2c_pidx, i.h2c_cidx, i.c2h_pidx, i.c2h_cidx, i.cmpt_pidx, i.cmpt_cidx],
            "seen": q.seen,
            "wrote": q.wrote,
            "irq": put_irq(fds, q.irq.as_ref())?,
        }));
    }
    let mut chans = Vec::new();
    for c in &ex.chans {
        chans.push(json!({
            "key": c.key.0,
            "owner": c.cfg.owner,
            "dir": c.cfg.dir.code(),
            "align": c.cfg.align,
            "interrupt": c.cfg.notify == Notify::Interrupt,
            "block": c.block,
            "seen_seq": c.seen_seq,
            "irq": put_irq(fds, c.irq.as_ref())?,
        }));
    }
    let mut kslots = Vec::new();
    for k in &ex.kslots {
        kslots.push(json!({
            "client": k.client,
            "kernel": k.kernel,
            "cidx": k.cidx,
            "sts_pidx": k.sts_pidx,
            "bad_pidx": k.bad_pidx,
            "runs": k.runs,
            "errors": k.errors,
            "busy_ns": k.busy_ns,
            "irq": put_irq(fds, k.irq.as_ref())?,
        }));
    }
    Ok(json!({ "queues": queues, "channels": chans, "kernel_slots": kslots }))
}

impl Control {
    /// The handover request: pause, send the state, wait for the decision. True when the new
    /// process took over (the control thread then ends).
    pub(super) fn handover_pause(&mut self, reply: mpsc::Sender<io::Result<Handover>>) -> bool {
        let (exports, doc) = match self.pause_and_export() {
            Ok(x) => x,
            Err(e) => {
                let _ = reply.send(Err(e));
                return false;
            }
        };
        let (dtx, drx) = mpsc::channel();
        let (doc, fds) = doc;
        if reply.send(Ok(Handover { doc, fds, decide: dtx })).is_err() {
            self.resume_workers(exports);
            return false;
        }
        // No decision (the handle dropped) is a resume.
        if drx.recv().unwrap_or(false) {
            if let Some(r) = &self.rdma {
                r.abandon();
            }
            return true;
        }
        self.resume_workers(exports);
        false
    }

    /// Resume the first `paused` workers and the RDMA thread.
    fn resume_workers(&self, paused: usize) {
        for w in &self.workers[..paused] {
            let _ = w.call(Op::Resume);
        }
        if let Some(r) = &self.rdma {
            r.resume();
        }
    }

    /// Pause every worker at once and collect their answers against one deadline (each drains
    /// for at most `PAUSE_DRAIN`, in parallel; a compute worker in a long kernel does not
    /// answer in time): the pause is bounded by [`PAUSE_WAIT`] whatever the worker count. On
    /// a refusal or a timeout every worker is told to resume (a worker that did not pause
    /// takes that as a no-op, one that pauses late finds it waiting) and the reason returned.
    fn pause_workers(&self) -> io::Result<Vec<WorkerExport>> {
        let deadline = std::time::Instant::now() + PAUSE_WAIT;
        let asked: Vec<Option<mpsc::Receiver<Ack>>> = self
            .workers
            .iter()
            .map(|w| {
                let (rtx, rrx) = mpsc::channel();
                let sent = w.tx.send(Cmd { op: Op::Pause, reply: rtx }).is_ok();
                let _ = w.kick.signal();
                sent.then_some(rrx)
            })
            .collect();
        let mut exports = Vec::new();
        let mut why = None;
        for (i, rx) in asked.into_iter().enumerate() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let ack = match rx {
                Some(rx) => rx.recv_timeout(left).map_err(|e| match e {
                    mpsc::RecvTimeoutError::Timeout => format!("no answer within {PAUSE_WAIT:?}"),
                    mpsc::RecvTimeoutError::Disconnected => "worker thread is gone".to_string(),
                }),
                None => Err("worker thread is gone".to_string()),
            };
            match ack {
                Ok(Ack::Paused(ex)) => exports.push(*ex),
                Ok(Ack::Failed(_, m)) | Err(m) => {
                    why.get_or_insert(format!("worker {i} cannot pause: {m}"));
                }
                Ok(_) => {
                    why.get_or_insert(format!("worker {i} cannot pause: unexpected answer"));
                }
            }
        }
        match why {
            None => Ok(exports),
            Some(why) => {
                for w in &self.workers {
                    w.post(Op::Resume);
                }
                Err(io::Error::new(io::ErrorKind::WouldBlock, why))
            }
        }
    }

    /// Pause every worker and build the document; on an error the paused workers resume.
    /// The number of workers paused, and the document with its descriptors.
    #[allow(clippy::type_complexity)]
    fn pause_and_export(&mut self) -> io::Result<(usize, (Value, Vec<OwnedFd>))> {
        // A NIC-core program's maps live in this process only.
        if let Some((slot, e)) = self.cfg.core.as_ref().and_then(|c| c.list().into_iter().next()) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "NIC-core eBPF program {} is loaded in slot {slot}: its maps are not handed \
                     over, so a server with core programs cannot be taken over",
                    e.name
                ),
            ));
        }
        let exports = self.pause_workers()?;
        let n = exports.len();
        if let Some(r) = &self.rdma
            && let Err(e) = r.pause()
        {
            self.resume_workers(n);
            return Err(e);
        }
        match self.export(&exports) {
            Ok(d) => Ok((n, d)),
            Err(e) => {
                self.resume_workers(n);
                Err(e)
            }
        }
    }

    fn export(&self, exports: &[WorkerExport]) -> io::Result<(Value, Vec<OwnedFd>)> {
        let mut fds = Vec::new();
        let master = self.master.lock();
        let mut device = Vec::new();
        for ((kind, base, map), fd) in self.device_maps.iter().zip(&self.device_fds) {
            let size = self.device.iter().find(|d| d.kind == *kind).map_or(0, |d| d.size);
            device.push(json!({
                "kind": kind.name(),
                "base": base,
                "size": size,
                "map_len": map.len(),
                "fd": put(&mut fds, fd.as_fd())?,
                "allocs": master.allocations_in(*base).map_err(|e| bad(e.to_string()))?,
            }));
        }
        drop(master);
        let mut clients = Vec::new();
        for c in self.clients.values() {
            let mut regions = Vec::new();
            for (&iova, &len) in &c.regions {
                let fd = c.region_fds.get(&iova).ok_or_else(|| bad("a region without its fd"))?;
                regions.push(json!({ "iova": iova, "len": len, "fd": put(&mut fds, fd.as_fd())? }));
            }
            let bar = match &c.bar_fd {
                Some(f) => json!(put(&mut fds, f.as_fd())?),
                None => Value::Null,
            };
            let queues: Vec<Value> = c
                .queues
                .iter()
                .map(|(&qid, i)| {
                    json!({
                        "qid": qid,
                        "worker": i.worker,
                        "st": i.mode == QueueMode::St,
                        "stream_to": i.stream_to,
                    })
                })
                .collect();
            let channels: Vec<Value> =
                c.channels.iter().map(|&(d, i)| json!([d.code(), i])).collect();
            clients.push(json!({
                "id": c.id,
                "name": c.name,
                "pid": c.pid,
                "sock": put(&mut fds, c.sock.fd())?,
                "bar": bar,
                "regions": regions,
                "next_iova": c.next_iova,
                "device": c.device.iter().map(|(&a, &s)| json!([a, s])).collect::<Vec<_>>(),
                "queues": queues,
                "channels": channels,
            }));
        }
        let mut workers = Vec::new();
        for ex in exports {
            workers.push(worker_json(ex, &mut fds)?);
        }
        let kicks: Vec<usize> =
            self.workers.iter().map(|w| put(&mut fds, w.kick.fd())).collect::<io::Result<_>>()?;
        let rdma = match &self.rdma {
            Some(r) => r.export(&mut fds)?,
            None => Value::Null,
        };
        let r = &self.reclaim;
        let doc = json!({
            "rdma": rdma,
            "version": VERSION,
            "config": config_json(&self.cfg),
            "huge": self.huge,
            "listener": put(&mut fds, self.listener.fd())?,
            "nic_page": put(&mut fds, self.nic_fd.as_fd())?,
            "kicks": kicks,
            "device": device,
            "next_client": self.next_client,
            "reclaim": [r.clients, r.queues, r.channels, r.regions, r.device_bytes],
            "clients": clients,
            "workers": workers,
        });
        Ok((doc, fds))
    }
}

/// What of a configuration must be the same on both sides of a takeover.
fn config_json(cfg: &ServerConfig) -> Value {
    json!({
        "socket": cfg.socket,
        "on_chip": cfg.on_chip,
        "on_board": cfg.on_board,
        "workers": cfg.workers,
        "compute_workers": cfg.compute_workers,
        "kernels": kernel_mask(cfg),
        "rdma": cfg.rdma.map(|a| a.to_string()),
    })
}

/// A server rebuilt from a handover, not yet running ([`Adopted::start`]).
pub struct Adopted {
    parts: Parts,
    workers: Vec<NewWorker>,
}

impl std::fmt::Debug for Adopted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adopted")
            .field("cfg", &self.parts.cfg)
            .field("clients", &self.parts.clients.len())
            .finish_non_exhaustive()
    }
}

impl Adopted {
    /// Clients taken over.
    pub fn clients(&self) -> usize {
        self.parts.clients.len()
    }

    /// Queues taken over.
    pub fn queues(&self) -> usize {
        self.parts.clients.values().map(|c| c.queues.len()).sum()
    }

    /// RDMA QPs taken over.
    pub fn rdma_qps(&self) -> usize {
        self.parts.rdma.as_ref().map_or(0, |r| r.qps())
    }

    /// Start serving (once the old process has let go: its workers must not run beside these).
    pub fn start(self) -> io::Result<ServerHandle> {
        launch(self.parts, self.workers, None)
    }

    /// Start the server's threads held at a gate, before the takeover commits, so that what
    /// can fail (spawning threads) fails while the old process can still resume; then
    /// [`Prepared::go`] cannot fail.
    pub fn prepare(self) -> io::Result<Prepared> {
        let gate = CloseOnDrop(Arc::new(Gate::default()));
        // On an error, threads spawned before are let go at the closed gate.
        let handle = launch(self.parts, self.workers, Some(Arc::clone(&gate.0)))?;
        Ok(Prepared { gate, handle })
    }
}

/// An adopted server whose threads are started but wait ([`Adopted::prepare`]): they serve
/// from [`Prepared::go`]; dropped without it, they end without touching shared memory, the
/// socket or the ports.
#[derive(Debug)]
pub struct Prepared {
    // Dropped first: the gate closes, then the handle's drop joins the control thread,
    // which ends at once, dropping what it held (the workers and RDMA thread end there too).
    gate: CloseOnDrop,
    handle: ServerHandle,
}

impl Prepared {
    /// Let the threads serve (the takeover committed).
    pub fn go(self) -> ServerHandle {
        let Prepared { gate, handle } = self;
        // Opened first, the gate's closing on drop is a no-op.
        gate.0.set(true);
        handle
    }
}

/// Closes a gate when dropped (unless it was opened before).
#[derive(Debug)]
struct CloseOnDrop(Arc<Gate>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// The handed descriptors, each taken once.
struct Fds(Vec<Option<OwnedFd>>);

impl Fds {
    fn take(&mut self, v: &Value) -> io::Result<OwnedFd> {
        let i = v.as_u64().and_then(|i| usize::try_from(i).ok());
        i.and_then(|i| self.0.get_mut(i))
            .and_then(Option::take)
            .ok_or_else(|| bad(format!("descriptor {v} missing or used twice")))
    }

    fn irq(&mut self, v: &Value) -> io::Result<Option<Arc<EventFd>>> {
        if v.is_null() {
            return Ok(None);
        }
        Ok(Some(Arc::new(EventFd::from_fd(self.take(v)?))))
    }
}

impl Server {
    /// Rebuild a server from a [`Handover`] of another process (its `doc` and `fds`; a
    /// descriptor already taken, e.g. a wire port's, is `None`), with `cfg`, which must match
    /// the old server's in socket, memory sizes, workers, kernels and RDMA address, and for a
    /// whole NIC with `wire`, built around the handed ports ([`wire_ports`]).
    /// The document is checked as input from another process: every queue on the worker
    /// its qid maps to and owned once, kernel slots on the compute worker of their kernel,
    /// channel blocks inside the BAR, client ids unique and below `next_client`, every
    /// descriptor used; anything else is an `InvalidData` error, never a later panic.
    /// Nothing runs until [`Adopted::start`]; an error leaves nothing behind (the old process
    /// can resume).
    pub fn adopt(
        cfg: ServerConfig,
        wire: Option<Wire>,
        doc: &Value,
        fds: Vec<Option<OwnedFd>>,
    ) -> io::Result<Adopted> {
        if doc["version"].as_u64() != Some(VERSION) {
            return Err(bad(format!("version {} (this process reads {VERSION})", doc["version"])));
        }
        let want = config_json(&cfg);
        if doc["config"] != want {
            let mut diff = Vec::new();
            if let (Some(old), Some(new)) = (doc["config"].as_object(), want.as_object()) {
                for (k, v) in new {
                    if old.get(k) != Some(v) {
                        diff.push(format!(
                            "{k}: {} there, {v} here",
                            old.get(k).unwrap_or(&Value::Null)
                        ));
                    }
                }
            }
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the configuration differs from the running server's ({})",
                    diff.join("; ")
                ),
            ));
        }
        let mut fds = Fds(fds);
        let err = |e: snic_dma::MemError| bad(e.to_string());
        let mut master = AddressSpace::new();
        let mut mirrors: Vec<AddressSpace> =
            (0..cfg.workers + cfg.compute_workers).map(|_| AddressSpace::new()).collect();
        let (mut device, mut device_maps, mut device_fds) = (Vec::new(), Vec::new(), Vec::new());
        let empty = Vec::new();
        for d in doc["device"].as_array().unwrap_or(&empty) {
            let kind = match d["kind"].as_str() {
                Some(k) if k == DevKind::OnChip.name() => DevKind::OnChip,
                Some(k) if k == DevKind::OnBoard.name() => DevKind::OnBoard,
                _ => return Err(bad(format!("device memory kind {}", d["kind"]))),
            };
            let fd = fds.take(&d["fd"])?;
            let size = num(d, "size")?;
            let len = usize::try_from(size).map_err(|_| bad("device memory too large"))?;
            let map_len = usize::try_from(num(d, "map_len")?).map_err(|_| bad("map_len"))?;
            if map_len < len {
                return Err(bad("device memory mapping shorter than the memory"));
            }
            let map = Arc::new(Mapping::map_fd(fd.as_fd(), map_len)?);
            let backing = SharedBacking { map: Arc::clone(&map), off: 0, len };
            let (_, at) =
                master.map_device(kind.mem_kind(), Box::new(backing.clone())).map_err(err)?;
            if at.raw() != num(d, "base")? {
                return Err(bad(format!(
                    "{} memory lands at {:#x}, not {}",
                    kind.name(),
                    at.raw(),
                    d["base"]
                )));
            }
            for m in mirrors.iter_mut() {
                m.map_device_at(kind.mem_kind(), at, Box::new(backing.clone()), false)
                    .map_err(err)?;
            }
            for a in d["allocs"].as_array().unwrap_or(&empty) {
                let (addr, n) = (a[0].as_u64(), a[1].as_u64());
                let (Some(addr), Some(n)) = (addr, n) else { return Err(bad("an allocation")) };
                master.alloc_at(addr, n).map_err(err)?;
            }
            device.push(DeviceRegion { kind, base: at.raw(), size });
            device_maps.push((kind, at.raw(), map));
            device_fds.push(fd);
        }
        if device.len() != 2 {
            return Err(bad("device memory missing"));
        }
        let nic_fd = fds.take(&doc["nic_page"])?;
        let nic = Arc::new(Mapping::map_fd(nic_fd.as_fd(), abi::NIC_PAGE_SIZE)?);
        let listener = SeqListener::from_fd(fds.take(&doc["listener"])?);
        listener.set_nonblocking(true)?;
        let mut clients = BTreeMap::new();
        for c in doc["clients"].as_array().unwrap_or(&empty) {
            let client = adopt_client(&cfg, c, &mut fds, &mut master, &mut mirrors)?;
            let id = client.id;
            if clients.insert(id, client).is_some() {
                return Err(bad(format!("client {id} twice")));
            }
        }
        let mut owned = BTreeSet::new();
        for qid in clients.values().flat_map(|c| c.queues.keys()) {
            if !owned.insert(*qid) {
                return Err(bad(format!("queue {qid} of two clients")));
            }
        }
        let next_client = num32(doc, "next_client")?;
        if clients.last_key_value().is_some_and(|(&id, _)| id >= next_client) {
            return Err(bad(format!("next client id {next_client} not above every client's")));
        }
        let kicks = doc["kicks"].as_array().unwrap_or(&empty);
        let wdocs = doc["workers"].as_array().unwrap_or(&empty);
        if kicks.len() != mirrors.len() || wdocs.len() != mirrors.len() {
            return Err(bad("worker count"));
        }
        let bar_of = |owner: u32| -> io::Result<Arc<Mapping>> {
            clients
                .get(&owner)
                .and_then(|c: &Client| c.bar.clone())
                .ok_or_else(|| bad(format!("no BAR of client {owner}")))
        };
        let mut workers = Vec::new();
        // Every queue on one worker, the one its qid maps to.
        let mut qids = BTreeSet::new();
        for (i, ((mem, kick), wd)) in mirrors.into_iter().zip(kicks).zip(wdocs).enumerate() {
            let kick = Arc::new(EventFd::from_fd(fds.take(kick)?));
            let (mut w, tx, kick) = new_worker(&cfg, i as u32, mem, kick, &nic);
            for q in wd["queues"].as_array().unwrap_or(&empty) {
                let qx = queue_from(q, &mut fds)?;
                if i as u32 >= cfg.workers || abi::queue_worker(qx.qid, cfg.workers) != i as u32 {
                    return Err(bad(format!("queue {} on worker {i}", qx.qid)));
                }
                if !qids.insert(qx.qid) {
                    return Err(bad(format!("queue {} on two workers", qx.qid)));
                }
                let bar = bar_of(qx.snap.cfg.owner)?;
                w.restore_queue(qx, bar).map_err(|e| bad(format!("queue {}: {e}", q["qid"])))?;
            }
            for c in wd["channels"].as_array().unwrap_or(&empty) {
                let cx = ChanExport {
                    key: ChannelKey(num32(c, "key")?),
                    cfg: ChannelConfig {
                        owner: num32(c, "owner")?,
                        dir: dir_from(&c["dir"])?,
                        align: num32(c, "align")?,
                        notify: notify(c["interrupt"].as_bool().unwrap_or(false)),
                    },
                    block: usize::try_from(num(c, "block")?).map_err(|_| bad("block"))?,
                    seen_seq: num32(c, "seen_seq")?,
                    irq: fds.irq(&c["irq"])?,
                };
                if cx.block.checked_add(abi::CHANNEL_STRIDE).is_none_or(|end| end > abi::BAR_SIZE) {
                    return Err(bad("channel block outside the BAR"));
                }
                let bar = bar_of(cx.cfg.owner)?;
                w.restore_channel(cx, bar).map_err(|e| bad(format!("channel: {e}")))?;
            }
            for k in wd["kernel_slots"].as_array().unwrap_or(&empty) {
                let kernel = num32(k, "kernel")?;
                if kernel >= MAX_KERNELS {
                    return Err(bad("kernel id"));
                }
                // Kernel `k` runs on compute worker `kernel_worker(k)` only.
                let serves = (i as u32).checked_sub(cfg.workers)
                    == Some(abi::kernel_worker(kernel, cfg.compute_workers));
                if !serves {
                    return Err(bad(format!("kernel {kernel}'s slot on worker {i}")));
                }
                let kx = KSlotExport {
                    client: num32(k, "client")?,
                    kernel,
                    irq: fds.irq(&k["irq"])?,
                    cidx: num32(k, "cidx")?,
                    sts_pidx: num32(k, "sts_pidx")?,
                    bad_pidx: k["bad_pidx"].as_u64().and_then(|v| u32::try_from(v).ok()),
                    runs: num32(k, "runs")?,
                    errors: num32(k, "errors")?,
                    busy_ns: num(k, "busy_ns")?,
                };
                let bar = bar_of(kx.client)?;
                w.restore_kslot(kx, bar);
            }
            workers.push((w, tx, kick));
        }
        let r = |i: usize| doc["reclaim"][i].as_u64().unwrap_or(0);
        let reclaim = Reclaim {
            clients: r(0),
            queues: r(1),
            channels: r(2),
            regions: r(3),
            device_bytes: r(4),
        };
        let link = match (cfg.rdma, wire) {
            (Some(_), Some(_)) => return Err(bad("RDMA over kernel UDP or on a wire, not both")),
            (Some(addr), None) => Some(Link::Udp(addr)),
            (None, Some(w)) => Some(Link::Wire(Box::new(w))),
            (None, None) => None,
        };
        if link.is_some() == doc["rdma"].is_null() {
            return Err(bad("the old server's RDMA engine and this one's differ"));
        }
        let (rdma, master) = match link {
            Some(link) => {
                let udp = &doc["rdma"]["link"]["udp"];
                let rx = if udp.is_null() { None } else { Some(fds.take(udp)?) };
                let (host, master) = RdmaHost::adopt(link, master, rx, &doc["rdma"])?;
                (Some(host), master)
            }
            None => (None, Master::own(master)),
        };
        let parts = Parts {
            huge: doc["huge"].as_bool().unwrap_or(false),
            cfg,
            listener,
            master,
            rdma,
            nic_fd,
            device,
            device_maps,
            device_fds,
            clients,
            next_client,
            reclaim,
        };
        // Every descriptor handed must have been taken: one left over means the document
        // and the descriptors do not match.
        if let Some(i) = fds.0.iter().position(Option::is_some) {
            return Err(bad(format!("descriptor {i} handed but not used")));
        }
        Ok(Adopted { parts, workers })
    }
}

fn queue_from(q: &Value, fds: &mut Fds) -> io::Result<QueueExport> {
    let qid = u16::try_from(num(q, "qid")?).map_err(|_| bad("qid"))?;
    let st = q["st"].as_bool().unwrap_or(false);
    let stream_to = match &q["stream_to"] {
        Value::Null => None,
        v => Some(v.as_u64().and_then(|v| u16::try_from(v).ok()).ok_or_else(|| bad("stream_to"))?),
    };
    let cfg = QueueConfig {
        owner: num32(q, "owner")?,
        mode: if st { Mode::St } else { Mode::Mm },
        ring_size: num32(q, "ring_size")?,
        cmpt_size: num32(q, "cmpt_size")?,
        h2c_ring: num(q, "h2c_ring")?,
        c2h_ring: num(q, "c2h_ring")?,
        cmpt_ring: num(q, "cmpt_ring")?,
        align: num32(q, "align")?,
        notify: notify(q["interrupt"].as_bool().unwrap_or(false)),
        stream_to,
    };
    let i = words::<6>(q, "idx")?;
    let idx = snic_dma::QueueIndices {
        h2c_pidx: i[0],
        h2c_cidx: i[1],
        c2h_pidx: i[2],
        c2h_cidx: i[3],
        cmpt_pidx: i[4],
        cmpt_cidx: i[5],
    };
    let snap = QueueSnapshot { cfg, state: state_from(&q["state"])?, idx };
    Ok(QueueExport {
        qid,
        snap,
        seen: words(q, "seen")?,
        wrote: words(q, "wrote")?,
        irq: fds.irq(&q["irq"])?,
    })
}

/// A client as the old process had it: its connection, BAR, registered memory (mapped in the
/// master and every mirror at the same IOVAs), device allocations, queues and channels.
fn adopt_client(
    cfg: &ServerConfig,
    c: &Value,
    fds: &mut Fds,
    master: &mut AddressSpace,
    mirrors: &mut [AddressSpace],
) -> io::Result<Client> {
    let id = num32(c, "id")?;
    if id == 0 || id > MAX_CLIENT {
        return Err(bad(format!("client id {id}")));
    }
    let sock = SeqPacket::from_fd(fds.take(&c["sock"])?);
    sock.set_write_timeout(Some(SEND_TIMEOUT))?;
    let (bar, bar_fd) = match &c["bar"] {
        Value::Null => (None, None),
        v => {
            let fd = fds.take(v)?;
            (Some(Arc::new(Mapping::map_fd(fd.as_fd(), abi::BAR_SIZE)?)), Some(fd))
        }
    };
    let empty = Vec::new();
    let (mut regions, mut region_fds) = (BTreeMap::new(), BTreeMap::new());
    let window = u64::from(id) << CLIENT_WINDOW_BITS..(u64::from(id) + 1) << CLIENT_WINDOW_BITS;
    for r in c["regions"].as_array().unwrap_or(&empty) {
        let (iova, len) = (num(r, "iova")?, num(r, "len")?);
        if !window.contains(&iova) {
            return Err(bad(format!("region {iova:#x} outside client {id}'s window")));
        }
        let fd = fds.take(&r["fd"])?;
        let ulen = usize::try_from(len).map_err(|_| bad("region too long"))?;
        let map = Mapping::map_fd(fd.as_fd(), ulen)?;
        if !map.shrink_sealed() {
            return Err(bad("host memory not sealed against shrinking"));
        }
        let backing = SharedBacking::whole(Arc::new(map));
        let base = HostAddr::new(iova).ok_or_else(|| bad("region address"))?;
        let err = |e: snic_dma::MemError| bad(e.to_string());
        master.map_host_owned(base, Box::new(backing.clone()), id).map_err(err)?;
        for m in mirrors.iter_mut() {
            m.map_host_owned(base, Box::new(backing.clone()), id).map_err(err)?;
        }
        regions.insert(iova, len);
        region_fds.insert(iova, fd);
    }
    let mut device = BTreeMap::new();
    for d in c["device"].as_array().unwrap_or(&empty) {
        let (Some(a), Some(s)) = (d[0].as_u64(), d[1].as_u64()) else {
            return Err(bad("device allocation"));
        };
        device.insert(a, s);
    }
    let mut queues = BTreeMap::new();
    for q in c["queues"].as_array().unwrap_or(&empty) {
        let qid = u16::try_from(num(q, "qid")?).map_err(|_| bad("qid"))?;
        if qid >= MAX_QUEUES {
            return Err(bad("qid"));
        }
        let mode = if q["st"].as_bool().unwrap_or(false) { QueueMode::St } else { QueueMode::Mm };
        let stream_to = q["stream_to"].as_u64().and_then(|v| u16::try_from(v).ok());
        let worker = num32(q, "worker")?;
        if worker != abi::queue_worker(qid, cfg.workers) {
            return Err(bad(format!("queue {qid} of client {id} on worker {worker}")));
        }
        if queues.insert(qid, QueueInfo { worker, mode, stream_to }).is_some() {
            return Err(bad(format!("queue {qid} twice in client {id}")));
        }
    }
    let mut channels = BTreeSet::new();
    for ch in c["channels"].as_array().unwrap_or(&empty) {
        let index =
            ch[1].as_u64().and_then(|i| u8::try_from(i).ok()).ok_or_else(|| bad("channel"))?;
        channels.insert((dir_from(&ch[0])?, index));
    }
    Ok(Client {
        id,
        sock,
        name: c["name"].as_str().map(str::to_string),
        pid: c["pid"].as_u64().and_then(|p| u32::try_from(p).ok()),
        bar,
        bar_fd,
        regions,
        region_fds,
        next_iova: num(c, "next_iova")?,
        device,
        queues,
        channels,
        bad_in_a_row: 0,
    })
}

/// The handed ports of a whole NIC, in port order (the wire first): each one's name, state
/// (as [`snic_io::handover::PortState`] JSON) and descriptors, taken out of `fds`; and the
/// NIC's MAC. `None` when the old server was not a whole NIC.
#[allow(clippy::type_complexity)]
pub fn wire_ports(
    doc: &Value,
    fds: &mut [Option<OwnedFd>],
) -> io::Result<Option<(Vec<(String, Value, Vec<OwnedFd>)>, [u8; 6])>> {
    let w = &doc["rdma"]["link"]["wire"];
    if w.is_null() {
        return Ok(None);
    }
    let mut take = Fds(fds.iter_mut().map(Option::take).collect());
    let mut out = Vec::new();
    let empty = Vec::new();
    let r = (|| -> io::Result<[u8; 6]> {
        for p in w["ports"].as_array().unwrap_or(&empty) {
            let mut mine = Vec::new();
            for i in p["fds"].as_array().unwrap_or(&empty) {
                mine.push(take.take(i)?);
            }
            let name = p["name"].as_str().unwrap_or("").to_string();
            out.push((name, p["state"].clone(), mine));
        }
        let mut mac = [0u8; 6];
        let m = w["mac"].as_array().filter(|m| m.len() == 6).ok_or_else(|| bad("MAC"))?;
        for (o, b) in mac.iter_mut().zip(m) {
            *o = b.as_u64().and_then(|b| u8::try_from(b).ok()).ok_or_else(|| bad("MAC"))?;
        }
        Ok(mac)
    })();
    // What was not taken goes back.
    for (slot, f) in fds.iter_mut().zip(take.0) {
        *slot = f;
    }
    Ok(Some((out, r?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(dir: &Path) -> ServerConfig {
        ServerConfig {
            socket: dir.join("snic.sock"),
            on_chip: 64 << 10,
            on_board: 1 << 20,
            huge: false,
            spin_us: 0,
            ..ServerConfig::default()
        }
    }

    fn copies(fds: &[OwnedFd]) -> Vec<Option<OwnedFd>> {
        fds.iter().map(|f| Some(f.try_clone().expect("dup"))).collect()
    }

    fn queue(qid: u16) -> Value {
        json!({
            "qid": qid, "owner": 1, "st": false, "ring_size": 64, "cmpt_size": 64,
            "h2c_ring": 0, "c2h_ring": 0, "cmpt_ring": 0, "align": 1, "interrupt": false,
            "stream_to": null, "state": "added", "idx": [0, 0, 0, 0, 0, 0],
            "seen": [0, 0, 0], "wrote": [0, 0, 0, 0], "irq": null,
        })
    }

    /// A handover document doctored the ways a confused or hostile peer could is refused with
    /// an `InvalidData` error naming what is wrong, never a panic; the document as sent is
    /// adopted (so each refusal is the doctoring's).
    #[test]
    fn a_doctored_handover_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let server = Server::start(cfg(dir.path())).expect("server");
        let h = server.handover().expect("pause");
        let adopt = |doc: &Value, fds: Vec<Option<OwnedFd>>| {
            Server::adopt(cfg(dir.path()), None, doc, fds).map(|_| ())
        };
        adopt(&h.doc, copies(&h.fds)).expect("the document as sent");

        let refused = |h: &Handover, what: &str, doc: Value, extra: bool| {
            let mut fds = copies(&h.fds);
            if extra {
                fds.push(Some(h.fds[0].try_clone().unwrap()));
            }
            let e = adopt(&doc, fds).expect_err(what);
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{what}: {e}");
            e.to_string()
        };
        // A kernel slot on a DMA worker (kernels run on compute workers only).
        let mut d = h.doc.clone();
        d["workers"][0]["kernel_slots"] = json!([{
            "client": 1, "kernel": 0, "cidx": 0, "sts_pidx": 0, "bad_pidx": null,
            "runs": 0, "errors": 0, "busy_ns": 0, "irq": null,
        }]);
        assert!(refused(&h, "kslot", d, false).contains("slot on worker 0"));
        // Queue 1 belongs on worker 1 of 2, not worker 0.
        let mut d = h.doc.clone();
        d["workers"][0]["queues"] = json!([queue(1)]);
        assert!(refused(&h, "queue", d, false).contains("queue 1 on worker 0"));
        // A channel block whose end overflows.
        let mut d = h.doc.clone();
        d["workers"][0]["channels"] = json!([{
            "key": 0, "owner": 1, "dir": 0, "align": 1, "interrupt": false,
            "block": u64::MAX, "seen_seq": 0, "irq": null,
        }]);
        assert!(refused(&h, "block", d, false).contains("outside the BAR"));
        // A descriptor nothing in the document uses.
        assert!(refused(&h, "extra fd", h.doc.clone(), true).contains("not used"));
        h.resume();

        // With a client (a connection is one as soon as it is accepted): its queue on a
        // worker out of range, the client twice, the next id not above it.
        let _conn = SeqPacket::connect(&dir.path().join("snic.sock")).expect("connect");
        let mut tries = 0;
        let h = loop {
            let h = server.handover().expect("pause");
            if h.doc["clients"].as_array().is_some_and(|c| c.len() == 1) {
                break h;
            }
            h.resume();
            tries += 1;
            assert!(tries < 500, "the connection was never accepted");
            std::thread::sleep(Duration::from_millis(2));
        };
        adopt(&h.doc, copies(&h.fds)).expect("the document with a client");
        let mut d = h.doc.clone();
        d["clients"][0]["queues"] = json!([{ "qid": 0, "worker": 7, "st": false }]);
        assert!(refused(&h, "client queue", d, false).contains("on worker 7"));
        let mut d = h.doc.clone();
        let c = d["clients"][0].clone();
        d["clients"].as_array_mut().unwrap().push(c);
        assert!(refused(&h, "client twice", d, false).contains("twice"));
        let mut d = h.doc.clone();
        d["next_client"] = d["clients"][0]["id"].clone();
        assert!(refused(&h, "next id", d, false).contains("next client id"));
        h.resume();
        server.shutdown().unwrap();
    }

    /// Run `f` on a thread of its own; its result, or a failure when it takes longer than
    /// 10 s (a thread left waiting at a gate would hang).
    fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(10)).expect("did not finish")
    }

    /// Threads prepared before a commit and dropped (the takeover failed) end at once, and
    /// the old server carries on; prepared and let go, they serve.
    #[test]
    fn a_prepared_server_ends_untouched_when_dropped_and_serves_when_let_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let server = Server::start(cfg(&path)).expect("server");
        let h = server.handover().expect("pause");
        let (doc, fds) = (h.doc.clone(), copies(&h.fds));
        let p = Server::adopt(cfg(&path), None, &doc, fds).unwrap().prepare().expect("prepare");
        bounded(move || drop(p));
        h.resume();
        assert!(path.join("snic.sock").exists(), "the dropped server left the socket alone");
        // The old server's workers serve on: they pause again and answer.
        let h = server.handover().expect("the old server pauses again");
        let (doc, fds) = (h.doc.clone(), copies(&h.fds));
        let p = Server::adopt(cfg(&path), None, &doc, fds).unwrap().prepare().expect("prepare");
        let new = p.go();
        let st = bounded(move || {
            let st = new.stats();
            new.shutdown().map(|()| st)
        })
        .expect("shutdown");
        assert_eq!(st["workers"], 2, "the new server's control thread answers: {st}");
        h.commit();
        server.shutdown().unwrap();
    }
}
