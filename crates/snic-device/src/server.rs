//! The control thread: the setup socket, clients, device memory, registrations, and the
//! commands that set up queues and channels on the workers.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};
use snic_compute::{Kernels, LookasideKernel, MAX_KERNELS};
use snic_dma::engine::{CHANNELS_PER_DIR, MAX_QUEUES};
use snic_dma::{
    AddressSpace, ChannelConfig, ChannelKey, Dir, HostAddr, MemKind, Notify, QueueConfig, Status,
};
use snic_hostif::abi;
use snic_hostif::proto::{
    DevKind, DeviceRegion, DirName, MAX_MESSAGE, QueueMode, RdmaRequest, Request, Response,
};
use snic_hostif::shm::{EventFd, Mapping, SeqListener, SeqPacket, SharedBacking};

use crate::rdma::{self, Link, Master, RdmaHost, Wire};
use crate::worker::{Ack, Cmd, Op, Worker, WorkerStats};
use snic_io::sys::poll::poll_ready;
pub use takeover::Handover;

pub mod takeover;

/// Server settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Path of the setup socket.
    pub socket: PathBuf,
    /// Bytes of on-chip device memory.
    pub on_chip: u64,
    /// Bytes of on-board device memory.
    pub on_board: u64,
    /// DMA worker threads (queues and channels; 1 ..= [`abi::MAX_WORKERS`] with the compute
    /// workers).
    pub workers: u32,
    /// Compute worker threads (lookaside kernels; at least 1): kernel `k` of every client
    /// runs on compute worker `k % compute_workers`.
    pub compute_workers: u32,
    /// The lookaside kernels each compute worker offers.
    pub kernels: KernelSet,
    /// NIC-core eBPF programs, offered as kernel [`snic_compute::ids::EBPF`] on every compute
    /// worker; `None` leaves that kernel out.
    pub core: Option<crate::ebpf::CorePrograms>,
    /// Try hugetlb pages for device memory.
    pub huge: bool,
    /// Microseconds a worker spins without work before it sleeps.
    pub spin_us: u64,
    /// Serve RDMA (QPs and MRs for clients, RoCEv2 over UDP) on this address; its port is the
    /// RoCE port. `None`: RDMA requests are refused with `rdma_disabled`.
    pub rdma: Option<SocketAddr>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            socket: crate::default_socket_path(),
            on_chip: 4 << 20,
            on_board: 256 << 20,
            workers: 2,
            compute_workers: 1,
            kernels: KernelSet::default(),
            core: None,
            huge: true,
            spin_us: 200,
            rdma: None,
        }
    }
}

/// The kernels a server offers: a function that makes a fresh instance of each (every
/// compute worker gets its own). The default is [`snic_compute::builtins`]; tests and
/// embedders may add their own kernels.
#[derive(Clone, Copy)]
pub struct KernelSet(pub fn() -> Vec<Box<dyn LookasideKernel>>);

impl KernelSet {
    /// A registry of the set's kernels (ids of [`MAX_KERNELS`] and above are left out).
    pub fn registry(&self) -> Kernels {
        let mut k = Kernels::new();
        for kernel in (self.0)() {
            let _ = k.register(kernel);
        }
        k
    }
}

impl Default for KernelSet {
    fn default() -> Self {
        KernelSet(snic_compute::builtins)
    }
}

impl PartialEq for KernelSet {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::fn_addr_eq(self.0, other.0)
    }
}

impl Eq for KernelSet {}

impl std::fmt::Debug for KernelSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.registry().list().map(|(_, name, _)| name).collect();
        f.debug_tuple("KernelSet").field(&names).finish()
    }
}

/// Bits of a client's IOVA window: client `c` registers host memory at `c << 40 ..`.
const CLIENT_WINDOW_BITS: u32 = 40;
/// Largest client id (its window must stay below the device prefix).
const MAX_CLIENT: u32 = (1 << 20) - 1;
/// Registrations are placed on this boundary.
const IOVA_ALIGN: u64 = 4096;
/// How long a response may wait for a client's socket buffer before the client is dropped.
const SEND_TIMEOUT: Duration = Duration::from_secs(2);
/// Malformed messages (or failed receives) in a row before a client is dropped.
const MAX_BAD_IN_A_ROW: u32 = 1000;

/// The host-interface server: entry point.
#[derive(Debug)]
pub struct Server;

impl Server {
    /// Bind the socket, create device memory, start the workers and the control thread.
    pub fn start(cfg: ServerConfig) -> io::Result<ServerHandle> {
        Self::start_with(cfg, None)
    }

    /// [`Server::start`] as a whole NIC: the RDMA engine runs on `wire`'s wire port, through
    /// its pipeline, beside the host netdev (`cfg.rdma` must then be `None`).
    pub fn start_with(cfg: ServerConfig, wire: Option<Wire>) -> io::Result<ServerHandle> {
        let invalid = |m: &str| io::Error::new(io::ErrorKind::InvalidInput, m.to_string());
        if cfg.workers == 0
            || cfg.compute_workers == 0
            || cfg.workers.saturating_add(cfg.compute_workers) > abi::MAX_WORKERS
        {
            return Err(invalid("workers and compute workers must be at least 1, 64 together"));
        }
        if cfg.on_chip == 0 || cfg.on_board == 0 {
            return Err(invalid("device memory sizes must be non-zero"));
        }
        let mut master = AddressSpace::new();
        // One mirror per worker: the DMA workers first, then the compute workers.
        let mut mirrors: Vec<AddressSpace> =
            (0..cfg.workers + cfg.compute_workers).map(|_| AddressSpace::new()).collect();
        let mut device = Vec::new();
        let mut device_maps = Vec::new();
        let mut device_fds = Vec::new();
        let mut huge = true;
        for (kind, size) in [(DevKind::OnChip, cfg.on_chip), (DevKind::OnBoard, cfg.on_board)] {
            let len = usize::try_from(size).map_err(|_| invalid("device memory too large"))?;
            let (map, fd) = Mapping::memfd(&format!("snic-{}", kind.name()), len, cfg.huge)?;
            // Kept for a takeover, which hands the memory itself to the new process.
            device_fds.push(fd);
            huge &= map.huge();
            // `len`, not the mapping's length: a huge mapping is rounded up to whole pages.
            let backing = SharedBacking { map: Arc::new(map), off: 0, len };
            let err = |e: snic_dma::MemError| io::Error::other(e.to_string());
            // The master places the region (and allocates in it); the mirrors map it there.
            let (_, at) =
                master.map_device(kind.mem_kind(), Box::new(backing.clone())).map_err(err)?;
            for m in mirrors.iter_mut() {
                m.map_device_at(kind.mem_kind(), at, Box::new(backing.clone()), false)
                    .map_err(err)?;
            }
            device.push(DeviceRegion { kind, base: at.raw(), size });
            device_maps.push((kind, at.raw(), Arc::clone(&backing.map)));
        }
        // With RDMA the engine's address space becomes the master (see `rdma`).
        let link = match (cfg.rdma, wire) {
            (Some(_), Some(_)) => {
                return Err(invalid("RDMA runs over kernel UDP or on the wire port, not both"));
            }
            (Some(addr), None) => Some(Link::Udp(addr)),
            (None, Some(w)) => Some(Link::Wire(Box::new(w))),
            (None, None) => None,
        };
        let (rdma, master) = match link {
            Some(link) => {
                let (host, master) = RdmaHost::start(link, master)?;
                (Some(host), master)
            }
            None => (None, Master::own(master)),
        };
        let (nic, nic_fd) = Mapping::memfd("snic-nic-page", abi::NIC_PAGE_SIZE, false)?;
        let nic = Arc::new(nic);
        let listener = SeqListener::bind(&cfg.socket)?;
        listener.set_nonblocking(true)?;
        let mut workers = Vec::new();
        for (i, mem) in mirrors.into_iter().enumerate() {
            workers.push(new_worker(&cfg, i as u32, mem, Arc::new(EventFd::new()?), &nic));
        }
        let parts = Parts {
            cfg,
            listener,
            master,
            rdma,
            nic_fd,
            device,
            device_maps,
            device_fds,
            huge,
            clients: BTreeMap::new(),
            next_client: 1,
            reclaim: Reclaim::default(),
        };
        launch(parts, workers, None)
    }
}

/// A worker, not yet running, with the sending end of its commands and its kick.
type NewWorker = (Worker, mpsc::Sender<Cmd>, Arc<EventFd>);

/// Worker `i` (the DMA workers first, then the compute workers) over `mem`.
fn new_worker(
    cfg: &ServerConfig,
    i: u32,
    mem: AddressSpace,
    kick: Arc<EventFd>,
    nic: &Arc<Mapping>,
) -> NewWorker {
    let (ctx, crx) = mpsc::channel();
    let compute = i.checked_sub(cfg.workers).map(|c| (c, cfg.compute_workers));
    let w = Worker::new(
        i,
        mem,
        crx,
        kick.clone(),
        nic.clone(),
        Duration::from_micros(cfg.spin_us),
        compute,
        // DMA workers run no kernels.
        match (compute, &cfg.core) {
            (Some((c, _)), Some(core)) => {
                let mut k = cfg.kernels.registry();
                let _ = k.register(Box::new(core.kernel(c as usize)));
                k
            }
            (Some(_), None) => cfg.kernels.registry(),
            (None, _) => Kernels::new(),
        },
    );
    (w, ctx, kick)
}

/// What the control thread starts from: a new server's, or what a takeover carried.
struct Parts {
    cfg: ServerConfig,
    listener: SeqListener,
    master: Master,
    rdma: Option<RdmaHost>,
    nic_fd: OwnedFd,
    device: Vec<DeviceRegion>,
    device_maps: Vec<(DevKind, u64, Arc<Mapping>)>,
    device_fds: Vec<OwnedFd>,
    huge: bool,
    clients: BTreeMap<u32, Client>,
    next_client: u32,
    reclaim: Reclaim,
}

/// The kernels a server with `cfg` offers, as the `KERNELS` register shows them.
fn kernel_mask(cfg: &ServerConfig) -> u32 {
    cfg.kernels.registry().mask()
        | if cfg.core.is_some() { 1 << snic_compute::ids::EBPF } else { 0 }
}

/// Start the workers and the control thread.
/// Where the threads of an adopted server wait until the takeover commits: opened, they run;
/// closed, they end without touching shared memory or sockets (the old process resumes).
#[derive(Debug, Default)]
pub(crate) struct Gate {
    open: std::sync::Mutex<Option<bool>>,
    cv: std::sync::Condvar,
}

impl Gate {
    /// Wait until the gate is opened (true) or closed (false).
    pub(crate) fn wait(&self) -> bool {
        let mut g = self.open.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(go) = *g {
                return go;
            }
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Open (`go`) or close the gate, once.
    pub(crate) fn set(&self, go: bool) {
        let mut g = self.open.lock().unwrap_or_else(|p| p.into_inner());
        g.get_or_insert(go);
        self.cv.notify_all();
    }
}

/// Start the server's threads; with a `gate`, they wait there before doing anything.
fn launch(
    mut p: Parts,
    workers: Vec<NewWorker>,
    gate: Option<Arc<Gate>>,
) -> io::Result<ServerHandle> {
    if let Some(r) = p.rdma.as_mut() {
        r.start_thread(gate.clone())?;
    }
    let wake = Arc::new(EventFd::new()?);
    let (tx, rx) = mpsc::channel();
    let compute_from = p.cfg.workers;
    let mut handles = Vec::new();
    for (i, (w, ctx, kick)) in workers.into_iter().enumerate() {
        let i = i as u32;
        let name = match i.checked_sub(compute_from) {
            Some(c) => format!("snic-hostif-c{c}"),
            None => format!("snic-hostif-w{i}"),
        };
        let g = gate.clone();
        let join = std::thread::Builder::new().name(name).spawn(move || {
            if g.is_none_or(|g| g.wait()) {
                w.run();
            }
        })?;
        handles.push(WorkerHandle { tx: ctx, kick, join: Some(join) });
    }
    let mut queue_owner = vec![None; usize::from(MAX_QUEUES)];
    for c in p.clients.values() {
        for &qid in c.queues.keys() {
            queue_owner[usize::from(qid)] = Some(c.id);
        }
    }
    let path = p.cfg.socket.clone();
    let control = Control {
        kernel_mask: kernel_mask(&p.cfg),
        cfg: p.cfg,
        listener: p.listener,
        wake: wake.clone(),
        rx,
        master: p.master,
        rdma: p.rdma,
        workers: handles,
        nic_fd: p.nic_fd,
        device: p.device,
        device_maps: p.device_maps,
        device_fds: p.device_fds,
        huge: p.huge,
        clients: p.clients,
        next_client: p.next_client,
        queue_owner,
        reclaim: p.reclaim,
        buf: vec![0u8; MAX_MESSAGE],
        handed: false,
    };
    let thread = std::thread::Builder::new()
        .name("snic-hostif-ctl".into())
        .spawn(move || if gate.is_none_or(|g| g.wait()) { control.run() } else { Ok(()) })?;
    Ok(ServerHandle { path, tx, wake, thread: Some(thread) })
}

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    path: PathBuf,
    tx: mpsc::Sender<HandleMsg>,
    wake: Arc<EventFd>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

#[derive(Debug)]
enum HandleMsg {
    Stats(mpsc::Sender<Value>),
    AllocDevice(DevKind, u64, mpsc::Sender<io::Result<DeviceBlock>>),
    Handover(mpsc::Sender<io::Result<Handover>>),
    Shutdown,
}

/// Device memory the snic process itself holds (not a client's): a streaming kernel's
/// results table. It lives as long as the server; hosts read it at `addr` with the memory
/// API, as any device memory.
#[derive(Debug, Clone)]
pub struct DeviceBlock {
    /// Device address.
    pub addr: u64,
    /// The device memory's mapping in this process.
    pub map: Arc<Mapping>,
    /// Offset of the block in `map`.
    pub off: usize,
    /// Bytes.
    pub len: usize,
}

impl ServerHandle {
    /// The setup socket's path.
    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    /// The counters document (as `Request::Stats` answers it).
    pub fn stats(&self) -> Value {
        let (rtx, rrx) = mpsc::channel();
        if self.tx.send(HandleMsg::Stats(rtx)).is_err() || self.wake.signal().is_err() {
            return json!({ "error": "server stopped" });
        }
        rrx.recv().unwrap_or_else(|_| json!({ "error": "server stopped" }))
    }

    /// Allocate `size` bytes (zeroed, 4 KiB aligned) of `kind` device memory for snic
    /// itself (see [`DeviceBlock`]).
    pub fn alloc_device(&self, kind: DevKind, size: u64) -> io::Result<DeviceBlock> {
        let (rtx, rrx) = mpsc::channel();
        let gone = || io::Error::other("server stopped");
        self.tx.send(HandleMsg::AllocDevice(kind, size, rtx)).map_err(|_| gone())?;
        self.wake.signal()?;
        rrx.recv().map_err(|_| gone())?
    }

    /// Pause for a takeover (see [`Handover`]): the workers stop at a clean point, and the
    /// state and descriptors a new process needs come back. The server serves nothing until
    /// [`Handover::resume`] or [`Handover::commit`].
    pub fn handover(&self) -> io::Result<Handover> {
        let (rtx, rrx) = mpsc::channel();
        let gone = || io::Error::other("server stopped");
        self.tx.send(HandleMsg::Handover(rtx)).map_err(|_| gone())?;
        self.wake.signal()?;
        rrx.recv().map_err(|_| gone())?
    }

    /// Stop: the control thread stops the workers and joins them, the socket file is removed.
    pub fn shutdown(mut self) -> io::Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> io::Result<()> {
        let Some(t) = self.thread.take() else { return Ok(()) };
        let _ = self.tx.send(HandleMsg::Shutdown);
        let _ = self.wake.signal();
        match t.join() {
            Ok(r) => r,
            Err(_) => Err(io::Error::other("control thread panicked")),
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

#[derive(Debug)]
struct WorkerHandle {
    tx: mpsc::Sender<Cmd>,
    kick: Arc<EventFd>,
    join: Option<JoinHandle<()>>,
}

impl WorkerHandle {
    /// Send `op` and kick the worker without waiting for its answer (compute workers, which
    /// may be in the middle of a long kernel; see `Worker::turn` for why the order holds).
    fn post(&self, op: Op) {
        let _ = self.tx.send(Cmd { op, reply: mpsc::channel().0 });
        let _ = self.kick.signal();
    }

    /// Send `op`, kick the worker, wait for its answer.
    fn call(&self, op: Op) -> Ack {
        let (rtx, rrx) = mpsc::channel();
        if self.tx.send(Cmd { op, reply: rtx }).is_err() {
            return Ack::Failed("internal", "worker thread is gone".into());
        }
        let _ = self.kick.signal();
        rrx.recv().unwrap_or_else(|_| Ack::Failed("internal", "worker thread is gone".into()))
    }
}

fn ack_response(a: Ack) -> Result<(), Response> {
    match a {
        Ack::Done | Ack::Stats(_) | Ack::Paused(_) => Ok(()),
        Ack::Failed(code, msg) => Err(Response::error(code, msg)),
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Reclaim {
    clients: u64,
    queues: u64,
    channels: u64,
    regions: u64,
    device_bytes: u64,
}

#[derive(Debug, Clone, Copy)]
struct QueueInfo {
    worker: u32,
    mode: QueueMode,
    /// For streaming queues: the queue its H2C packets go to.
    stream_to: Option<u16>,
}

#[derive(Debug)]
struct Client {
    id: u32,
    sock: SeqPacket,
    name: Option<String>,
    pid: Option<u32>,
    bar: Option<Arc<Mapping>>,
    /// The BAR's memfd (kept for a takeover).
    bar_fd: Option<OwnedFd>,
    /// Host registrations: IOVA -> bytes.
    regions: BTreeMap<u64, u64>,
    /// The memfds of `regions` (kept for a takeover).
    region_fds: BTreeMap<u64, OwnedFd>,
    next_iova: u64,
    /// Device allocations: address -> bytes.
    device: BTreeMap<u64, u64>,
    queues: BTreeMap<u16, QueueInfo>,
    /// (direction, index) of configured channels.
    channels: BTreeSet<(Dir, u8)>,
    bad_in_a_row: u32,
}

struct Control {
    cfg: ServerConfig,
    listener: SeqListener,
    wake: Arc<EventFd>,
    rx: mpsc::Receiver<HandleMsg>,
    /// The address space that allocates device memory and maps registrations (the RDMA
    /// engine's when RDMA is on).
    master: Master,
    rdma: Option<RdmaHost>,
    workers: Vec<WorkerHandle>,
    nic_fd: OwnedFd,
    device: Vec<DeviceRegion>,
    /// Each device memory kind's base address and mapping.
    device_maps: Vec<(DevKind, u64, Arc<Mapping>)>,
    /// The memfds of `device_maps`, in the same order.
    device_fds: Vec<OwnedFd>,
    huge: bool,
    clients: BTreeMap<u32, Client>,
    next_client: u32,
    queue_owner: Vec<Option<u32>>,
    reclaim: Reclaim,
    kernel_mask: u32,
    /// Receive buffer for client messages ([`MAX_MESSAGE`] bytes), reused for each one.
    buf: Vec<u8>,
    /// A new process took over: nothing shared is touched or removed on the way out.
    handed: bool,
}

impl Control {
    fn run(mut self) -> io::Result<()> {
        let r = self.serve();
        // Stop the workers whatever happened.
        let op = || if self.handed { Op::Abandon } else { Op::Shutdown };
        for w in &self.workers {
            let _ = w.tx.send(Cmd { op: op(), reply: mpsc::channel().0 });
            let _ = w.kick.signal();
        }
        for w in self.workers.iter_mut() {
            if let Some(j) = w.join.take() {
                let _ = j.join();
            }
        }
        // The socket is the new process's after a takeover.
        if !self.handed {
            let _ = std::fs::remove_file(&self.cfg.socket);
        }
        r
    }

    fn serve(&mut self) -> io::Result<()> {
        loop {
            let ids: Vec<u32> = self.clients.keys().copied().collect();
            let ready = {
                let mut fds: Vec<BorrowedFd<'_>> = vec![self.wake.fd(), self.listener.fd()];
                fds.extend(self.clients.values().map(|c| c.sock.fd()));
                poll_ready(&fds, Duration::from_secs(1))?
            };
            if ready[0] {
                let _ = self.wake.take();
                while let Ok(m) = self.rx.try_recv() {
                    match m {
                        HandleMsg::Stats(reply) => {
                            let _ = reply.send(self.stats());
                        }
                        HandleMsg::AllocDevice(kind, size, reply) => {
                            let _ = reply.send(self.alloc_own(kind, size));
                        }
                        HandleMsg::Handover(reply) => {
                            if self.handover_pause(reply) {
                                self.handed = true;
                                return Ok(());
                            }
                        }
                        HandleMsg::Shutdown => return Ok(()),
                    }
                }
            }
            if ready[1] {
                self.accept_all();
            }
            for (i, id) in ids.into_iter().enumerate() {
                if ready[2 + i] {
                    self.service_client(id);
                }
            }
        }
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok(sock) => {
                    let id = self.next_client;
                    if id > MAX_CLIENT {
                        let _ = sock.send(
                            &Response::error("no_client_ids", "client ids exhausted").to_bytes(),
                            &[],
                        );
                        continue;
                    }
                    self.next_client += 1;
                    let _ = sock.set_write_timeout(Some(SEND_TIMEOUT));
                    let pid = sock.peer_pid();
                    self.clients.insert(
                        id,
                        Client {
                            id,
                            sock,
                            name: None,
                            pid,
                            bar: None,
                            bar_fd: None,
                            regions: BTreeMap::new(),
                            region_fds: BTreeMap::new(),
                            next_iova: u64::from(id) << CLIENT_WINDOW_BITS,
                            device: BTreeMap::new(),
                            queues: BTreeMap::new(),
                            channels: BTreeSet::new(),
                            bad_in_a_row: 0,
                        },
                    );
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // ECONNABORTED and friends: that connection is gone; try the next.
                Err(_) => return,
            }
        }
    }

    /// Read one message of client `id` and answer it (or reclaim the client on EOF).
    fn service_client(&mut self, id: u32) {
        let got = match self.clients.get(&id) {
            Some(c) => c.sock.recv(&mut self.buf),
            None => return,
        };
        let mut bad = false;
        let (resp, fds_out) = match got {
            Ok((0, fds)) if fds.is_empty() => {
                self.disconnect(id);
                return;
            }
            Ok((n, fds)) => match Request::from_bytes(&self.buf[..n]) {
                Ok(req) => self.request(id, req, fds),
                Err(e) => {
                    bad = true;
                    (Response::error("bad_request", format!("malformed message: {e}")), vec![])
                }
            },
            Err(e) => match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => return,
                io::ErrorKind::ConnectionReset
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::NotConnected
                | io::ErrorKind::ConnectionAborted => {
                    self.disconnect(id);
                    return;
                }
                _ => {
                    bad = true;
                    (Response::error("bad_request", format!("bad message: {e}")), vec![])
                }
            },
        };
        let Some(c) = self.clients.get_mut(&id) else { return };
        c.bad_in_a_row = if bad { c.bad_in_a_row + 1 } else { 0 };
        let fds: Vec<BorrowedFd<'_>> = fds_out.iter().map(|f| f.as_fd()).collect();
        let sent = c.sock.send(&resp.to_bytes(), &fds);
        if sent.is_err() || c.bad_in_a_row >= MAX_BAD_IN_A_ROW {
            self.disconnect(id);
        }
    }

    /// Answer one request. The second value: fds to attach (kept alive until sent).
    fn request(&mut self, id: u32, req: Request, fds: Vec<OwnedFd>) -> (Response, Vec<OwnedFd>) {
        let hello = self.clients.get(&id).is_some_and(|c| c.bar.is_some());
        let r = match req {
            Request::Hello { name, version } => {
                if hello {
                    Err(Response::error("bad_state", "hello already done"))
                } else {
                    return self.hello(id, name, version, fds);
                }
            }
            _ if !hello => Err(Response::error("bad_state", "the first request must be hello")),
            Request::Stats => Ok(Response::Stats { stats: self.stats() }),
            Request::RegisterHost { len } => self.register_host(id, len, fds),
            Request::UnregisterHost { iova } => no_fds(&fds).and_then(|()| {
                self.unregister_host(id, iova)?;
                Ok(Response::Ok)
            }),
            Request::AllocDevice { kind, size, align } => {
                no_fds(&fds).and_then(|()| self.alloc_device(id, kind, size, align))
            }
            Request::FreeDevice { addr } => no_fds(&fds).and_then(|()| self.free_device(id, addr)),
            Request::AddQueue {
                mode,
                ring_size,
                cmpt_size,
                h2c_ring,
                c2h_ring,
                cmpt_ring,
                align,
                interrupt,
                stream_to,
            } => one_fd_if(interrupt, fds).and_then(|irq| {
                let q = QueueReq {
                    mode,
                    ring_size,
                    cmpt_size,
                    h2c_ring,
                    c2h_ring,
                    cmpt_ring,
                    align,
                    stream_to,
                };
                self.add_queue(id, q, irq)
            }),
            Request::StartQueue { qid } => no_fds(&fds).and_then(|()| {
                let w = self.owned_queue(id, qid)?.worker;
                ack_response(self.workers[w as usize].call(Op::StartQueue { qid }))?;
                Ok(Response::Ok)
            }),
            Request::StopQueue { qid } => no_fds(&fds).and_then(|()| {
                let w = self.owned_queue(id, qid)?.worker;
                ack_response(self.workers[w as usize].call(Op::StopQueue { qid }))?;
                Ok(Response::Ok)
            }),
            Request::DeleteQueue { qid } => no_fds(&fds).and_then(|()| self.delete_queue(id, qid)),
            Request::SetChannel { dir, index, align, interrupt } => one_fd_if(interrupt, fds)
                .and_then(|irq| self.set_channel(id, dir, index, align, irq)),
            Request::KernelIrq { kernel } => one_fd_if(true, fds).and_then(|irq| {
                let irq = irq.ok_or_else(|| Response::error("bad_request", "one fd expected"))?;
                if kernel >= MAX_KERNELS {
                    return Err(Response::error(
                        "bad_request",
                        format!("kernel id {kernel} is not below {MAX_KERNELS}"),
                    ));
                }
                self.compute_worker(kernel).post(Op::SetKernelIrq { client: id, kernel, irq });
                Ok(Response::Ok)
            }),
            Request::Rdma(r) => Ok(self.rdma(id, r)),
        };
        (r.unwrap_or_else(|e| e), vec![])
    }

    fn hello(
        &mut self,
        id: u32,
        name: String,
        version: u32,
        fds: Vec<OwnedFd>,
    ) -> (Response, Vec<OwnedFd>) {
        if !fds.is_empty() {
            return (Response::error("bad_request", "hello carries no fds"), vec![]);
        }
        if version != abi::VERSION_VALUE {
            let m = format!(
                "protocol version {version} not supported (this is {})",
                abi::VERSION_VALUE
            );
            return (Response::error("version", m), vec![]);
        }
        let (bar, bar_fd) = match Mapping::memfd(&format!("snic-bar-{id}"), abi::BAR_SIZE, false) {
            Ok(x) => x,
            Err(e) => return (Response::error("internal", format!("BAR: {e}")), vec![]),
        };
        let nic_fd = match self.nic_fd.try_clone() {
            Ok(f) => f,
            Err(e) => return (Response::error("internal", format!("NIC page: {e}")), vec![]),
        };
        let mut kicks = Vec::new();
        for w in &self.workers {
            match w.kick.fd().try_clone_to_owned() {
                Ok(f) => kicks.push(f),
                Err(e) => return (Response::error("internal", format!("kick: {e}")), vec![]),
            }
        }
        bar.store_u32(abi::ID, abi::ID_VALUE);
        bar.store_u32(abi::VERSION, abi::VERSION_VALUE);
        bar.store_u32(abi::CLIENT, id);
        bar.store_u32(abi::MAX_QUEUES_REG, u32::from(MAX_QUEUES));
        bar.store_u32(abi::WORKERS, self.cfg.workers);
        bar.store_u32(abi::KERNELS, self.kernel_mask);
        bar.store_u32(abi::COMPUTE_WORKERS, self.cfg.compute_workers);
        let kept = match bar_fd.try_clone() {
            Ok(f) => f,
            Err(e) => return (Response::error("internal", format!("BAR: {e}")), vec![]),
        };
        let bar = Arc::new(bar);
        for w in self.compute_workers() {
            w.post(Op::AddKernelClient { client: id, bar: bar.clone() });
        }
        if let Some(c) = self.clients.get_mut(&id) {
            c.bar = Some(bar);
            c.bar_fd = Some(kept);
            c.name = Some(name.chars().take(128).collect());
        }
        let resp = Response::Welcome {
            client: id,
            version: abi::VERSION_VALUE,
            workers: self.cfg.workers,
            compute_workers: self.cfg.compute_workers,
            max_queues: u32::from(MAX_QUEUES),
            channels_per_dir: u32::from(CHANNELS_PER_DIR),
            device: self.device.clone(),
            huge_pages: self.huge,
        };
        let mut out = vec![bar_fd, nic_fd];
        out.extend(kicks);
        (resp, out)
    }

    fn register_host(
        &mut self,
        id: u32,
        len: u64,
        mut fds: Vec<OwnedFd>,
    ) -> Result<Response, Response> {
        if fds.len() != 1 {
            return Err(Response::error("bad_request", "register_host needs exactly one fd"));
        }
        let c = self.clients.get(&id).ok_or_else(gone)?;
        let window_end = (u64::from(id) + 1) << CLIENT_WINDOW_BITS;
        let span = len.checked_next_multiple_of(IOVA_ALIGN).unwrap_or(u64::MAX);
        if len == 0 || span > window_end - c.next_iova {
            return Err(Response::error(
                "bad_request",
                format!("length {len} is zero or does not fit the client's IOVA window"),
            ));
        }
        let ulen = usize::try_from(len).map_err(|_| Response::error("bad_request", "too long"))?;
        let fd = fds.pop().ok_or_else(gone)?;
        let map = Mapping::map_fd(fd.as_fd(), ulen)
            .map_err(|e| Response::error("bad_fd", format!("cannot map the fd: {e}")))?;
        // A file the client could still shrink would turn snic's accesses into SIGBUS: only
        // memory sealed against shrinking (a memfd with F_SEAL_SHRINK, as snic-host makes) is
        // accepted.
        if !map.shrink_sealed() {
            return Err(Response::error(
                "bad_fd",
                "host memory must be a memfd sealed against shrinking (F_SEAL_SHRINK)",
            ));
        }
        let iova = c.next_iova;
        let backing = SharedBacking::whole(Arc::new(map));
        let base = HostAddr::new(iova).ok_or_else(gone)?;
        self.master
            .lock()
            .map_host_owned(base, Box::new(backing.clone()), id)
            .map_err(|e| Response::error("bad_address", e.to_string()))?;
        for (i, w) in self.workers.iter().enumerate() {
            let op = Op::MapHost { owner: id, iova, backing: backing.clone() };
            if i >= self.cfg.workers as usize {
                // The master mapped it: a compute worker's mirror cannot refuse.
                w.post(op);
                continue;
            }
            if let Err(e) = ack_response(w.call(op)) {
                // Undo what was done.
                self.unmap_host(iova);
                return Err(e);
            }
        }
        let c = self.clients.get_mut(&id).ok_or_else(gone)?;
        c.regions.insert(iova, len);
        c.region_fds.insert(iova, fd);
        c.next_iova = iova + span;
        Ok(Response::Registered { iova })
    }

    fn unregister_host(&mut self, id: u32, iova: u64) -> Result<(), Response> {
        let len = self.clients.get(&id).and_then(|c| c.regions.get(&iova).copied());
        self.rdma_busy(id, iova, len)?;
        let c = self.clients.get_mut(&id).ok_or_else(gone)?;
        if c.regions.remove(&iova).is_none() {
            return Err(Response::error("no_region", format!("no registration at {iova:#x}")));
        }
        c.region_fds.remove(&iova);
        self.unmap_host(iova);
        Ok(())
    }

    /// Unmap the host registration at `iova` from every worker, then from the master. A
    /// worker that does not have it (a registration undone halfway) answers `no_region`,
    /// which is ignored.
    fn unmap_host(&self, iova: u64) {
        for (i, w) in self.workers.iter().enumerate() {
            if i >= self.cfg.workers as usize {
                // The mapping holds its memory: a kernel still running over it is safe.
                w.post(Op::UnmapHost { iova });
            } else {
                let _ = w.call(Op::UnmapHost { iova });
            }
        }
        let mut m = self.master.lock();
        if let Some(r) = m.region_of(iova).filter(|r| r.base == iova) {
            let _ = m.unmap(r.id);
        }
    }

    /// Device memory for snic itself ([`ServerHandle::alloc_device`]).
    fn alloc_own(&mut self, kind: DevKind, size: u64) -> io::Result<DeviceBlock> {
        let (_, base, map) = self
            .device_maps
            .iter()
            .find(|(k, _, _)| *k == kind)
            .ok_or_else(|| io::Error::other("no such device memory"))?;
        let len = usize::try_from(size).map_err(|_| io::Error::other("size too large"))?;
        let mut master = self.master.lock();
        let addr = master.alloc(kind.mem_kind(), size, 4096).map_err(io::Error::other)?;
        let _ = master.fill(addr, len, 0);
        let off = addr
            .checked_sub(*base)
            .and_then(|o| usize::try_from(o).ok())
            .ok_or_else(|| io::Error::other("allocation outside its region"))?;
        Ok(DeviceBlock { addr, map: Arc::clone(map), off, len })
    }

    fn alloc_device(
        &mut self,
        id: u32,
        kind: DevKind,
        size: u64,
        align: u64,
    ) -> Result<Response, Response> {
        if size == 0 || !align.is_power_of_two() {
            return Err(Response::error(
                "bad_request",
                format!("size {size} must be non-zero and align {align} a power of two"),
            ));
        }
        let mut master = self.master.lock();
        let addr = master.alloc(kind.mem_kind(), size, align).map_err(|e| {
            let code = match e {
                snic_dma::MemError::Alloc(_) => "bad_request",
                _ => "no_memory",
            };
            Response::error(code, format!("{} allocation of {size}: {e}", kind.name()))
        })?;
        // Fresh memory must not show what an earlier client left there.
        if let Ok(n) = usize::try_from(size) {
            let _ = master.fill(addr, n, 0);
        }
        drop(master);
        self.clients.get_mut(&id).ok_or_else(gone)?.device.insert(addr, size);
        Ok(Response::Allocated { addr })
    }

    fn free_device(&mut self, id: u32, addr: u64) -> Result<Response, Response> {
        let size = self.clients.get(&id).and_then(|c| c.device.get(&addr).copied());
        self.rdma_busy(id, addr, size)?;
        let c = self.clients.get_mut(&id).ok_or_else(gone)?;
        if c.device.remove(&addr).is_none() {
            return Err(Response::error(
                "not_owner",
                format!("{addr:#x} is not a device allocation of this client"),
            ));
        }
        self.master.lock().free(addr).map_err(|e| Response::error("internal", e.to_string()))?;
        Ok(Response::Ok)
    }

    /// The compute workers (after the DMA workers).
    fn compute_workers(&self) -> &[WorkerHandle] {
        &self.workers[self.cfg.workers as usize..]
    }

    /// The compute worker serving kernel `kernel`.
    fn compute_worker(&self, kernel: u32) -> &WorkerHandle {
        let c = abi::kernel_worker(kernel, self.cfg.compute_workers);
        &self.workers[(self.cfg.workers + c) as usize]
    }

    fn owned_queue(&self, id: u32, qid: u16) -> Result<QueueInfo, Response> {
        self.clients
            .get(&id)
            .and_then(|c| c.queues.get(&qid).copied())
            .ok_or_else(|| Response::error("no_queue", format!("queue {qid} is not yours")))
    }

    fn add_queue(
        &mut self,
        id: u32,
        q: QueueReq,
        irq: Option<Arc<EventFd>>,
    ) -> Result<Response, Response> {
        let bar = self.clients.get(&id).and_then(|c| c.bar.clone()).ok_or_else(gone)?;
        let workers = self.cfg.workers;
        // A streaming queue that sends to another queue must live on that queue's worker (the
        // engine delivers in one step): its qid is chosen so.
        let want_worker = match (q.mode, q.stream_to) {
            (QueueMode::Mm, Some(_)) => {
                return Err(Response::error("bad_request", "stream_to needs streaming mode"));
            }
            (QueueMode::St, Some(t)) => {
                let info = self.owned_queue(id, t)?;
                if info.mode != QueueMode::St {
                    return Err(Response::error("bad_request", "stream_to names an MM queue"));
                }
                Some(info.worker)
            }
            _ => None,
        };
        let qid = (0..MAX_QUEUES)
            .find(|&qid| {
                self.queue_owner[usize::from(qid)].is_none()
                    && want_worker.is_none_or(|w| abi::queue_worker(qid, workers) == w)
            })
            .ok_or_else(|| Response::error("no_queue", "no free queue id"))?;
        let stream_to = match q.mode {
            QueueMode::Mm => None,
            QueueMode::St => Some(q.stream_to.unwrap_or(qid)),
        };
        let cfg = QueueConfig {
            owner: id,
            mode: q.mode.mode(),
            ring_size: q.ring_size,
            cmpt_size: q.cmpt_size,
            h2c_ring: q.h2c_ring,
            c2h_ring: q.c2h_ring,
            cmpt_ring: q.cmpt_ring,
            align: q.align,
            notify: if irq.is_some() { Notify::Interrupt } else { Notify::Poll },
            stream_to,
        };
        let worker = abi::queue_worker(qid, workers);
        ack_response(self.workers[worker as usize].call(Op::AddQueue { qid, cfg, bar, irq }))?;
        self.queue_owner[usize::from(qid)] = Some(id);
        let info = QueueInfo { worker, mode: q.mode, stream_to };
        self.clients.get_mut(&id).ok_or_else(gone)?.queues.insert(qid, info);
        Ok(Response::Queue { qid, worker })
    }

    fn delete_queue(&mut self, id: u32, qid: u16) -> Result<Response, Response> {
        let info = self.owned_queue(id, qid)?;
        let c = self.clients.get(&id).ok_or_else(gone)?;
        if let Some((&other, _)) =
            c.queues.iter().find(|&(&o, i)| o != qid && i.stream_to == Some(qid))
        {
            return Err(Response::error(
                "busy",
                format!("queue {other} streams to queue {qid}; delete it first"),
            ));
        }
        ack_response(self.workers[info.worker as usize].call(Op::DeleteQueue { qid }))?;
        self.queue_owner[usize::from(qid)] = None;
        self.clients.get_mut(&id).ok_or_else(gone)?.queues.remove(&qid);
        Ok(Response::Ok)
    }

    fn set_channel(
        &mut self,
        id: u32,
        dir: DirName,
        index: u8,
        align: u32,
        irq: Option<Arc<EventFd>>,
    ) -> Result<Response, Response> {
        if index >= CHANNELS_PER_DIR {
            return Err(Response::error(
                "bad_request",
                format!("channel index {index} is not below {CHANNELS_PER_DIR}"),
            ));
        }
        let bar = self.clients.get(&id).and_then(|c| c.bar.clone()).ok_or_else(gone)?;
        let dir = dir.dir();
        let key = channel_key(id, dir, index);
        let worker = abi::channel_worker(dir, index, self.cfg.workers);
        let cfg = ChannelConfig {
            owner: id,
            dir,
            align,
            notify: if irq.is_some() { Notify::Interrupt } else { Notify::Poll },
        };
        let block = abi::channel_block(dir, index);
        let op = Op::SetChannel { key, cfg, bar, block, irq };
        ack_response(self.workers[worker as usize].call(op))?;
        self.clients.get_mut(&id).ok_or_else(gone)?.channels.insert((dir, index));
        Ok(Response::Channel { worker })
    }

    /// RDMA requests: served by [`RdmaHost`] (`rdma_disabled` without `--rdma`).
    fn rdma(&mut self, id: u32, req: RdmaRequest) -> Response {
        let (Some(r), Some(c)) = (self.rdma.as_mut(), self.clients.get(&id)) else {
            return rdma::disabled();
        };
        r.request(id, &c.device, req)
    }

    /// A `busy` error when an RDMA MR or QP ring of client `id` lies in the `len` bytes at
    /// `base` (a registration or device allocation about to go; `None`: no such thing).
    fn rdma_busy(&self, id: u32, base: u64, len: Option<u64>) -> Result<(), Response> {
        match (self.rdma.as_ref(), len) {
            (Some(r), Some(len)) => r.busy(id, base, len).map_or(Ok(()), Err),
            _ => Ok(()),
        }
    }

    /// Reclaim everything client `id` had; other clients are untouched.
    fn disconnect(&mut self, id: u32) {
        let Some(c) = self.clients.remove(&id) else { return };
        if c.bar.is_none() {
            return;
        }
        // RDMA objects first: their rings and MRs lie in the memory reclaimed below.
        if let Some(r) = self.rdma.as_mut() {
            r.disconnect(id);
        }
        // Queues that stream to another queue go first (so no delivery finds a reused qid).
        let mut qids: Vec<(u16, QueueInfo)> = c.queues.iter().map(|(&q, &i)| (q, i)).collect();
        qids.sort_by_key(|(q, i)| i.stream_to == Some(*q));
        for (qid, info) in qids {
            let _ = self.workers[info.worker as usize].call(Op::DeleteQueue { qid });
            self.queue_owner[usize::from(qid)] = None;
            self.reclaim.queues += 1;
        }
        for &(dir, index) in &c.channels {
            let w = abi::channel_worker(dir, index, self.cfg.workers);
            let _ = self.workers[w as usize]
                .call(Op::RemoveChannel { key: channel_key(id, dir, index) });
            self.reclaim.channels += 1;
        }
        for w in self.compute_workers() {
            w.post(Op::RemoveKernelClient { client: id });
        }
        for &iova in c.regions.keys() {
            self.unmap_host(iova);
            self.reclaim.regions += 1;
        }
        for (&addr, &size) in &c.device {
            if self.master.lock().free(addr).is_ok() {
                self.reclaim.device_bytes += size;
            }
        }
        self.reclaim.clients += 1;
    }

    fn stats(&self) -> Value {
        let mut sum = WorkerStats::default();
        let mut per_worker = Vec::new();
        let mut per_kernel = serde_json::Map::new();
        for (i, w) in self.workers.iter().enumerate() {
            if let Ack::Stats(s) = w.call(Op::Stats) {
                add_stats(&mut sum, &s);
                let compute = i >= self.cfg.workers as usize;
                per_worker.push(json!({
                    "role": if compute { "compute" } else { "dma" },
                    "queues": s.queues,
                    "channels": s.channels,
                    "descs": s.engine.descs,
                    "kernels_run": s.kernels.iter().map(|k| k.runs).sum::<u64>(),
                    "sleeps": s.sleeps,
                }));
                for k in &s.kernels {
                    per_kernel.insert(
                        k.name.to_string(),
                        json!({
                            "id": k.id,
                            "worker": i,
                            "runs": k.runs,
                            "errors": k.errors,
                            "busy_ns": k.busy_ns,
                        }),
                    );
                }
            }
        }
        let mut device = serde_json::Map::new();
        for r in self.master.lock().regions() {
            if let (Some(a), kind @ (MemKind::OnChip | MemKind::OnBoard)) = (r.alloc, r.kind) {
                device.insert(
                    kind.name().into(),
                    json!({
                        "base": r.base,
                        "size": a.size,
                        "used": a.used,
                        "free": a.size - a.used,
                        "largest_free": a.largest_free,
                        "allocations": a.allocations,
                    }),
                );
            }
        }
        let e = &sum.engine;
        let by_status = |counts: &[u64; 17]| {
            let mut m = serde_json::Map::new();
            for (code, &n) in counts.iter().enumerate().skip(1) {
                if let Some(s) = Status::from_code(code as u8) {
                    m.insert(format!("{s:?}"), json!(n));
                }
            }
            Value::Object(m)
        };
        let clients: Vec<Value> = self
            .clients
            .values()
            .filter(|c| c.bar.is_some())
            .map(|c| {
                json!({
                    "id": c.id,
                    "name": c.name,
                    "pid": c.pid,
                    "queues": c.queues.len(),
                    "channels": c.channels.len(),
                    "regions": c.regions.len(),
                    "host_bytes": c.regions.values().sum::<u64>(),
                    "device_bytes": c.device.values().sum::<u64>(),
                })
            })
            .collect();
        json!({
            "clients": clients.len(),
            "client_list": clients,
            "queues": self.queue_owner.iter().filter(|q| q.is_some()).count(),
            "channels": sum.channels,
            "workers": self.cfg.workers,
            "compute_workers": self.cfg.compute_workers,
            "huge_pages": self.huge,
            "device": device,
            "engine": {
                "descs": e.descs,
                "bytes": e.h2c_bytes + e.c2h_bytes,
                "h2c_bytes": e.h2c_bytes,
                "c2h_bytes": e.c2h_bytes,
                "completions": e.completions,
                "errors": by_status(&e.errors),
                "doorbells": e.doorbells,
                "doorbells_ignored": e.doorbells_ignored,
                "cmpt_full_stalls": e.cmpt_full_stalls,
                "stream_rx": e.stream_rx,
                "stream_tx": e.stream_tx,
                "stream_drops": {
                    "no_queue": e.stream_drops[0],
                    "no_buffer": e.stream_drops[1],
                    "cmpt_full": e.stream_drops[2],
                    "empty": e.stream_drops[3],
                },
                "channel_runs": e.channel_runs,
                "channel_errors": by_status(&e.channel_errors),
                "flushed_silent": e.flushed_silent,
                "queue_latency": hist_json(&sum.queue_latency),
                "channel_latency": hist_json(&sum.channel_latency),
            },
            "kernels_run": sum.kernels_run,
            "kernel_errors": sum.kernel_errors,
            "kernel_fifo_ignored": sum.kernel_fifo_ignored,
            "kernels": per_kernel,
            "worker_sleeps": sum.sleeps,
            "per_worker": per_worker,
            "clients_reclaimed": self.reclaim.clients,
            "queues_reclaimed": self.reclaim.queues,
            "channels_reclaimed": self.reclaim.channels,
            "regions_reclaimed": self.reclaim.regions,
            "device_bytes_freed": self.reclaim.device_bytes,
            "rdma": self.rdma.as_ref().map_or_else(|| json!({ "enabled": false }), RdmaHost::stats),
            "nic": self.rdma.as_ref().and_then(RdmaHost::nic_stats),
        })
    }
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("cfg", &self.cfg)
            .field("clients", &self.clients.len())
            .finish_non_exhaustive()
    }
}

/// The fields of an `AddQueue` request.
#[derive(Debug, Clone, Copy)]
struct QueueReq {
    mode: QueueMode,
    ring_size: u32,
    cmpt_size: u32,
    h2c_ring: u64,
    c2h_ring: u64,
    cmpt_ring: u64,
    align: u32,
    stream_to: Option<u16>,
}

/// The engine key of a client's channel: `client * CHANNELS + channel_index(dir, index)`.
fn channel_key(client: u32, dir: Dir, index: u8) -> ChannelKey {
    ChannelKey(client * abi::CHANNELS as u32 + abi::channel_index(dir, index) as u32)
}

fn add_stats(sum: &mut WorkerStats, s: &WorkerStats) {
    sum.engine.add(&s.engine);
    sum.kernels_run += s.kernels_run;
    sum.kernel_errors += s.kernel_errors;
    sum.kernel_fifo_ignored += s.kernel_fifo_ignored;
    sum.sleeps += s.sleeps;
    sum.queues += s.queues;
    sum.channels += s.channels;
    sum.queue_latency.merge(&s.queue_latency);
    sum.channel_latency.merge(&s.channel_latency);
}

/// A latency histogram in the counters document: `{"count", "sum_ns", "le_ns": [bounds],
/// "counts": [per bucket, not cumulative; the last one is above the last bound]}`.
pub fn hist_json(h: &snic_dma::LatencyHist) -> Value {
    json!({
        "count": h.count(),
        "sum_ns": h.sum_ns(),
        "le_ns": snic_dma::latency::BOUNDS_NS,
        "counts": h.counts(),
    })
}

fn gone() -> Response {
    Response::error("internal", "client state missing")
}

fn no_fds(fds: &[OwnedFd]) -> Result<(), Response> {
    if fds.is_empty() {
        Ok(())
    } else {
        Err(Response::error("bad_request", "this request carries no fds"))
    }
}

/// With `want`, exactly one fd (an eventfd) is expected; without, none.
fn one_fd_if(want: bool, mut fds: Vec<OwnedFd>) -> Result<Option<Arc<EventFd>>, Response> {
    match (want, fds.len()) {
        (false, 0) => Ok(None),
        (true, 1) => Ok(fds.pop().map(|f| Arc::new(EventFd::from_fd(f)))),
        (true, n) => Err(Response::error("bad_request", format!("one eventfd expected, got {n}"))),
        (false, n) => Err(Response::error("bad_request", format!("no fds expected, got {n}"))),
    }
}
