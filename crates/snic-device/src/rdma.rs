//! RDMA hooks of the host interface: QPs and memory regions of snic's RDMA engine for host
//! clients, with QP rings placed in the client's host memory or in device memory.
//!
//! One [`Rnic`] serves the whole snic. Its packets travel one of two ways ([`Link`]):
//! - `snic serve --rdma ADDR`: over a [`RoceTransport`] bound to `ADDR` (kernel UDP; the RoCE
//!   port is `ADDR`'s port);
//! - `snic serve --port`: on the NIC's wire port, through its pipeline ([`NicNode`]): RoCEv2 for the
//!   NIC's addresses is terminated from the wire, the engine's packets leave with an Ethernet
//!   header the NIC's neighbour table resolved, and the same thread moves the host netdev's
//!   traffic through the pipeline.
//!
//! One RDMA thread drives either: lock the engine, receive, run due timers, send, unlock; when
//! nothing moved it waits on the link's descriptors and a wake eventfd (signalled after every
//! post) until the next timer is due.
//!
//! Memory: only one allocator may hand out device memory, so with RDMA on **the engine's
//! address space is the server's master address space**: [`Master`] is then the
//! `Mutex<Rnic>` the control thread and the RDMA thread share, and every master operation of
//! the control thread (device allocations, host registrations, unmaps) locks it. Host
//! registrations are therefore mapped in the engine's space with their owner (`client`), and
//! device allocations and device-placed QP rings come from the same allocators. Without RDMA
//! the master is a plain address space behind an uncontended mutex.
//!
//! Per client: one PD (created on first use), one CQ per QP (send and receive CQ the same).
//! Checks: an MR must lie in one of the client's host registrations or device allocations; a
//! host-placed QP's `host_ring` must lie in one of its registrations (that whole registration
//! becomes a ring pool the rings are carved from); every `qpn` and `lkey` a request names must
//! be the client's. The engine itself keeps clients apart by PD (a WQE can only use MRs of its
//! QP's PD). A registration or device allocation an MR or a QP ring lies in cannot be dropped
//! (`busy`). When the client goes, its QPs, CQs, MRs and PD go first.
//!
//! This first cut posts verbs through the setup socket (the control path); the WQEs still
//! live in the placed rings and the engine fetches them from there. A `PostSendBatch` is one
//! doorbell: all its WQEs are written, the producer index moves once, the thread wakes once.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::ops::{Deref, DerefMut};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};
use snic_compute::Kernels;
use snic_dma::{AddressSpace, MemKind, is_device_address};
use snic_hostif::proto::{
    ChainReadMsg, ChainReport, ChainWriteMsg, KernelCmdMsg, MAX_POST_BATCH, RdmaCqe, RdmaRequest,
    RdmaSendWr, Response, WC_CHAIN,
};
use snic_hostif::shm::EventFd;
use snic_nic::offload::{ChainDone, ChainEnd, ChainOutcome, ChainRead, ChainSpec, Chains};
use snic_rdma::{
    Access, CqId, Cqe, FlushLevel, MrInfo, Mtu, Pd, QpAttr, QpInit, RecvWr, Remote, Rnic,
    RnicConfig, SendWr, SgList, Sge, VerbsError, WcOpcode, WcStatus, WrOp,
};
use snic_time::{Clock, MonotonicClock};

use snic_io::nic::NicNode;
use snic_io::sys::poll::wait_readable;
use snic_roce::transport::{RoceTransport, TransportOpts};

/// Longest the RDMA thread sleeps when idle (it also wakes on packets, posts and shutdown).
const IDLE_WAIT: Duration = Duration::from_millis(50);
/// A wait shorter than this that moved nothing counts as an empty wake-up (see `run_wire`).
const EMPTY_WAKE: Duration = Duration::from_micros(50);
/// Largest SQ or RQ depth a client may ask for.
const MAX_DEPTH: u32 = 4096;
/// Most QPs one client may hold.
const MAX_QPS_PER_CLIENT: usize = 256;
/// Most MRs one client may hold.
const MAX_MRS_PER_CLIENT: usize = 4096;
/// Most CQEs one `PollCq` returns (keeps the answer well inside one message).
const MAX_POLL: u32 = 256;

/// Lock a mutex, going on with the data if a thread panicked while holding it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The server's master address space (the one that allocates device memory): its own, or the
/// RDMA engine's when RDMA is on (see the module doc).
#[derive(Debug)]
pub(crate) struct Master(MasterKind);

#[derive(Debug)]
enum MasterKind {
    Own(Mutex<AddressSpace>),
    Rnic(Arc<Shared>),
}

/// A locked [`Master`]: derefs to the address space.
pub(crate) enum MasterGuard<'a> {
    Own(MutexGuard<'a, AddressSpace>),
    Rnic(MutexGuard<'a, Rnic>),
}

impl Master {
    /// A master that is just `mem` (no RDMA).
    pub(crate) fn own(mem: AddressSpace) -> Master {
        Master(MasterKind::Own(Mutex::new(mem)))
    }

    /// Lock it. Hold the guard for one statement or a short block: the RDMA thread waits.
    pub(crate) fn lock(&self) -> MasterGuard<'_> {
        match &self.0 {
            MasterKind::Own(m) => MasterGuard::Own(lock(m)),
            MasterKind::Rnic(s) => MasterGuard::Rnic(lock(&s.rnic)),
        }
    }
}

impl Deref for MasterGuard<'_> {
    type Target = AddressSpace;
    fn deref(&self) -> &AddressSpace {
        match self {
            MasterGuard::Own(g) => g,
            MasterGuard::Rnic(g) => g.mem(),
        }
    }
}

impl DerefMut for MasterGuard<'_> {
    fn deref_mut(&mut self) -> &mut AddressSpace {
        match self {
            MasterGuard::Own(g) => g,
            MasterGuard::Rnic(g) => g.mem_mut(),
        }
    }
}

/// How the engine's packets travel (see the module doc).
#[derive(Debug)]
pub enum Link {
    /// RoCEv2 over kernel UDP sockets bound to this address.
    Udp(SocketAddr),
    /// RoCEv2 on a wire port, through a NIC's pipeline.
    Wire(Box<Wire>),
}

/// A NIC's data path: the engine then runs on its wire port (`snic serve --port`).
#[derive(Debug)]
pub struct Wire {
    /// The pipeline, the ports (the wire port and the host netdev) and the NIC's own packet
    /// handling, configured with `ips`.
    pub node: NicNode,
    /// The NIC's RoCE addresses (the engine's GIDs; at least one).
    pub ips: Vec<IpAddr>,
    /// The wire port's MTU (IP bytes): a QP connected with MTU 0 gets the largest path MTU
    /// that fits it.
    pub link_mtu: usize,
}

/// What the control thread and the RDMA thread share.
#[derive(Debug)]
struct Shared {
    rnic: Mutex<Rnic>,
    /// The NIC's data path, for [`Link::Wire`] (locked after `rnic`, never before).
    node: Option<Mutex<NicNode>>,
    clock: MonotonicClock,
    /// Signalled after posts and on shutdown.
    wake: EventFd,
    stop: AtomicBool,
    transport_errors: AtomicU64,
    /// Chained commands (locked after `rnic`, never before).
    chains: Mutex<ChainState>,
    /// The pause of a takeover: [`GATE_RUN`], [`GATE_PAUSE`] or [`GATE_ABANDON`] (read
    /// once per round of the RDMA thread; the mutex and condvar only while not running).
    gate: std::sync::atomic::AtomicU8,
    /// The RDMA thread is parked at its gate.
    parked: Mutex<bool>,
    gate_cv: std::sync::Condvar,
}

/// The RDMA thread runs.
const GATE_RUN: u8 = 0;
/// The RDMA thread parks between two rounds (a takeover pauses it).
const GATE_PAUSE: u8 = 1;
/// The RDMA thread ends without another round (a new process took over).
const GATE_ABANDON: u8 = 2;

/// Longest the control thread waits for the RDMA thread to park.
const PARK_WAIT: Duration = Duration::from_secs(2);

impl Shared {
    /// The RDMA thread's gate, at the top of each round: false when it must end at once.
    fn pass_gate(&self) -> bool {
        if self.gate.load(Ordering::Acquire) == GATE_RUN {
            return true;
        }
        let mut parked = lock(&self.parked);
        loop {
            match self.gate.load(Ordering::Acquire) {
                GATE_RUN => {
                    *parked = false;
                    self.gate_cv.notify_all();
                    return true;
                }
                GATE_ABANDON => return false,
                _ => {
                    *parked = true;
                    self.gate_cv.notify_all();
                    parked = self
                        .gate_cv
                        .wait_timeout(parked, IDLE_WAIT)
                        .map_or_else(|p| p.into_inner().0, |(g, _)| g);
                }
            }
        }
    }
}

/// What a host sees of a CQ, in order: the engine's completions the chains' service took
/// off the CQ (they were not the chains'), and finished chains.
#[derive(Debug)]
enum HostCqe {
    Engine(Cqe),
    Chain(ChainDone),
}

/// The chained commands in flight, the kernels they run, and the completions their service
/// holds for the host.
#[derive(Debug, Default)]
struct ChainState {
    chains: Chains,
    kernels: Kernels,
    /// CQ of every QP with a chain in flight.
    cq_of: BTreeMap<u32, CqId>,
    /// Completions held for the host, per CQ.
    held: BTreeMap<u32, VecDeque<HostCqe>>,
    /// Chains started and ended.
    started: u64,
    ended: u64,
}

impl ChainState {
    /// A QP (and its CQ) went away: its chains end unreported, held completions go.
    fn forget_qp(&mut self, qpn: u32, cq: CqId) {
        self.ended += self.chains.abort_qp(qpn).len() as u64;
        self.cq_of.remove(&qpn);
        self.held.remove(&cq.0);
    }

    fn new() -> ChainState {
        ChainState { kernels: Kernels::with_builtins(), ..ChainState::default() }
    }

    /// Take every completion of the CQs with chains in flight (the chains' to the chains,
    /// the host's into `held`), move the chains on, hold their ends for the host. True when
    /// anything moved.
    fn service(&mut self, rnic: &mut Rnic, clock: &MonotonicClock) -> bool {
        if self.chains.is_empty() {
            return false;
        }
        let mut moved = false;
        let now = clock.now();
        let mut out = [blank_cqe(); 32];
        for &cq in self.cq_of.values() {
            loop {
                let n = rnic.poll_cq(cq, &mut out).unwrap_or(0);
                for c in &out[..n] {
                    moved = true;
                    if !self.chains.on_cqe(c, now) {
                        self.held.entry(cq.0).or_default().push_back(HostCqe::Engine(*c));
                    }
                }
                if n < out.len() {
                    break;
                }
            }
        }
        for done in self.chains.progress(rnic, &mut self.kernels, clock) {
            moved = true;
            self.ended += 1;
            if let Some(&cq) = self.cq_of.get(&done.qpn) {
                self.held.entry(cq.0).or_default().push_back(HostCqe::Chain(done));
            }
        }
        let chains = &self.chains;
        self.cq_of.retain(|&qpn, _| chains.on_qp(qpn));
        moved
    }
}

fn blank_cqe() -> Cqe {
    Cqe {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        byte_len: 0,
        qpn: 0,
        src_qp: 0,
        imm: None,
        invalidated_rkey: None,
    }
}

/// A finished chain as the host's completion.
fn chain_out(d: &ChainDone) -> RdmaCqe {
    let (status, name) = match d.outcome {
        ChainOutcome::Done => (0, "done"),
        ChainOutcome::ReadFailed { status } => (status_code(status), "read_failed"),
        ChainOutcome::WriteFailed { status } => (status_code(status), "write_failed"),
        ChainOutcome::KernelFailed { .. } => (status_code(WcStatus::LocQpOpErr), "kernel_failed"),
        ChainOutcome::PostFailed => (status_code(WcStatus::LocQpOpErr), "post_failed"),
    };
    RdmaCqe {
        wr_id: d.wr_id,
        status,
        status_name: name.to_string(),
        opcode: WC_CHAIN,
        byte_len: u32::try_from(d.written).unwrap_or(u32::MAX),
        // The kernel's status code, so C callers (whose CQE has no report) see it too.
        imm: Some(d.kernel.status),
        chain: Some(ChainReport {
            outcome: name.to_string(),
            kernel_status: d.kernel.status,
            result: d.result,
            fetched: d.fetched,
            written: d.written,
            fetch_ns: d.fetch_ns,
            kernel_ns: d.kernel_ns,
            write_ns: d.write_ns,
        }),
    }
}

impl Shared {
    fn kick(&self) {
        // A failed signal only delays the RDMA thread until its next timeout.
        let _ = self.wake.signal();
    }
}

#[derive(Debug, Clone, Copy)]
struct QpEntry {
    cq: CqId,
    sq: u64,
    rq: Option<u64>,
    sq_len: u64,
    rq_len: u64,
}

/// Most QPs listed in the counters document's `rdma.qp_list`.
const QP_LIST: usize = 256;

#[derive(Debug)]
struct RdmaClient {
    pd: Pd,
    mrs: BTreeMap<u32, MrInfo>,
    qps: BTreeMap<u32, QpEntry>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Reclaimed {
    clients: u64,
    qps: u64,
    mrs: u64,
}

/// The RDMA side of the server: the engine, its thread, and each client's RDMA objects.
#[derive(Debug)]
pub(crate) struct RdmaHost {
    shared: Arc<Shared>,
    /// `ADDR` of `--rdma ADDR`, or the NIC's first RoCE address.
    addr: SocketAddr,
    /// The wire port's MTU, for [`Link::Wire`].
    link_mtu: Option<usize>,
    thread: Option<JoinHandle<()>>,
    clients: BTreeMap<u32, RdmaClient>,
    reclaimed: Reclaimed,
    /// A duplicate of the UDP transport's receive socket (`Link::Udp`).
    rx: Option<std::net::UdpSocket>,
    /// An adopted host's thread, not yet started ([`RdmaHost::start_thread`]): over this
    /// transport (`Some`), or on the wire port (`None`).
    pending: Option<Option<RoceTransport>>,
    /// The gate its thread waits at, if started held ([`RdmaHost::start_thread`]): closed
    /// on drop, so that the join below does not wait for a gate nobody opens.
    gate: Option<Arc<crate::server::Gate>>,
}

/// The answer to every RDMA request when the server runs without `--rdma`.
pub(crate) fn disabled() -> Response {
    Response::error("rdma_disabled", "RDMA is off (start snic serve with --rdma ADDR)")
}

fn verbs_error(what: &str, e: VerbsError) -> Response {
    let code = match e {
        VerbsError::QueueFull => "ring_full",
        VerbsError::BadState(_) | VerbsError::InvalidTransition { .. } => "bad_state",
        VerbsError::Exhausted(_) => "no_memory",
        VerbsError::Mem(snic_dma::MemError::NoDeviceMemory { .. }) => "no_memory",
        VerbsError::Mem(_) => "bad_address",
        _ => "bad_request",
    };
    Response::error(code, format!("{what}: {e}"))
}

/// `ibv_wc_status` number of a completion status.
fn status_code(s: WcStatus) -> u32 {
    match s {
        WcStatus::Success => 0,
        WcStatus::LocLenErr => 1,
        WcStatus::LocQpOpErr => 2,
        WcStatus::LocProtErr => 4,
        WcStatus::WrFlushErr => 5,
        WcStatus::BadRespErr => 7,
        WcStatus::LocAccessErr => 8,
        WcStatus::RemInvReqErr => 9,
        WcStatus::RemAccessErr => 10,
        WcStatus::RemOpErr => 11,
        WcStatus::RetryExcErr => 12,
        WcStatus::RnrRetryExcErr => 13,
        WcStatus::FatalErr => 19,
    }
}

/// `ibv_wc_opcode` number of a completion opcode.
fn opcode_code(o: WcOpcode) -> u32 {
    match o {
        WcOpcode::Send => 0,
        WcOpcode::RdmaWrite => 1,
        WcOpcode::RdmaRead => 2,
        WcOpcode::CompSwap => 3,
        WcOpcode::FetchAdd => 4,
        WcOpcode::Flush => 8,
        WcOpcode::AtomicWrite => 9,
        WcOpcode::Recv => 128,
        WcOpcode::RecvRdmaWithImm => 129,
    }
}

/// A RoCE engine on `addr` (and `more_ips`) with no memory pools of its own: `mem`, the address
/// space that allocates device memory and maps registrations, takes the place of the empty one
/// it starts with.
fn engine(addr: SocketAddr, more_ips: Vec<IpAddr>, mut mem: AddressSpace) -> io::Result<Rnic> {
    let cfg = RnicConfig {
        local_ip: addr.ip(),
        more_ips,
        udp_port: addr.port(),
        host_pool: 0,
        on_chip: 0,
        on_board: 0,
        ..RnicConfig::default()
    };
    let mut rnic = Rnic::new(cfg).map_err(|e| io::Error::other(e.to_string()))?;
    std::mem::swap(rnic.mem_mut(), &mut mem);
    Ok(rnic)
}

fn cqe_out(c: &Cqe) -> RdmaCqe {
    RdmaCqe {
        wr_id: c.wr_id,
        status: status_code(c.status),
        status_name: c.status.name().to_string(),
        opcode: opcode_code(c.opcode),
        byte_len: c.byte_len,
        imm: c.imm,
        chain: None,
    }
}

fn overlaps(a: u64, alen: u64, b: u64, blen: u64) -> bool {
    a < b.saturating_add(blen) && b < a.saturating_add(alen)
}

impl RdmaHost {
    /// Start the engine on `link`, make `mem` (the master address space, device memory
    /// already mapped with allocators) the engine's memory, start the RDMA thread. Returns the
    /// host and the [`Master`] the control thread uses from now on.
    pub(crate) fn start(link: Link, mem: AddressSpace) -> io::Result<(RdmaHost, Master)> {
        let port = snic_wire::roce::UDP_PORT;
        let (addr, more_ips, transport, node, link_mtu) = match link {
            Link::Udp(addr) => {
                let t = RoceTransport::bind(addr, TransportOpts::default())?;
                (addr, Vec::new(), Some(t), None, None)
            }
            Link::Wire(w) => {
                let Wire { node, ips, link_mtu } = *w;
                let Some((&first, more)) = ips.split_first() else {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "a NIC needs at least one RoCE address",
                    ));
                };
                let addr = SocketAddr::new(first, port);
                (addr, more.to_vec(), None, Some(Mutex::new(node)), Some(link_mtu))
            }
        };
        // A duplicate of the receive socket, for a takeover to hand over.
        let rx = transport.as_ref().map(|t| t.rx_socket().try_clone()).transpose()?;
        let rnic = engine(addr, more_ips, mem)?;
        let shared = Arc::new(Shared {
            rnic: Mutex::new(rnic),
            node,
            clock: MonotonicClock::new(),
            wake: EventFd::new()?,
            stop: AtomicBool::new(false),
            transport_errors: AtomicU64::new(0),
            chains: Mutex::new(ChainState::new()),
            gate: std::sync::atomic::AtomicU8::new(GATE_RUN),
            parked: Mutex::new(false),
            gate_cv: std::sync::Condvar::new(),
        });
        let s = shared.clone();
        let thread =
            std::thread::Builder::new().name("snic-hostif-rdma".into()).spawn(move || {
                match transport {
                    Some(t) => run(&s, t),
                    None => run_wire(&s),
                }
            })?;
        let host = RdmaHost {
            shared: shared.clone(),
            addr,
            link_mtu,
            thread: Some(thread),
            clients: BTreeMap::new(),
            reclaimed: Reclaimed::default(),
            rx,
            pending: None,
            gate: None,
        };
        Ok((host, Master(MasterKind::Rnic(shared))))
    }

    /// Answer one RDMA request of `client`, whose device allocations (address -> bytes) are
    /// `device`.
    pub(crate) fn request(
        &mut self,
        client: u32,
        device: &BTreeMap<u64, u64>,
        req: RdmaRequest,
    ) -> Response {
        let r = match req {
            RdmaRequest::RegMr { addr, len, access } => {
                self.reg_mr(client, device, addr, len, access)
            }
            RdmaRequest::DeregMr { lkey } => self.dereg_mr(client, lkey),
            RdmaRequest::CreateQp { placement, host_ring, sq_depth, rq_depth } => {
                self.create_qp(client, &placement, host_ring, sq_depth, rq_depth)
            }
            RdmaRequest::DestroyQp { qpn } => self.destroy_qp(client, qpn),
            RdmaRequest::Connect { qpn, remote_qpn, remote_ip, mtu } => {
                self.connect(client, qpn, remote_qpn, &remote_ip, mtu)
            }
            RdmaRequest::PostSend {
                qpn,
                opcode,
                local_addr,
                lkey,
                len,
                remote_addr,
                rkey,
                wr_id,
            } => {
                let wr = RdmaSendWr {
                    opcode,
                    local_addr,
                    lkey,
                    len,
                    remote_addr,
                    rkey,
                    wr_id,
                    value: 0,
                    flush: 0,
                };
                self.post_send(client, qpn, std::slice::from_ref(&wr))
            }
            RdmaRequest::PostSendBatch { qpn, wrs } => self.post_send(client, qpn, &wrs),
            RdmaRequest::PostRecv { qpn, addr, lkey, len, wr_id } => {
                self.post_recv(client, qpn, addr, lkey, len, wr_id)
            }
            RdmaRequest::PollCq { qpn, max } => self.poll_cq(client, qpn, max),
            RdmaRequest::Chain { qpn, wr_id, reads, kernel, write_back } => {
                self.chain(client, qpn, wr_id, &reads, &kernel, write_back)
            }
        };
        r.unwrap_or_else(|e| e)
    }

    fn owned_qp(&self, client: u32, qpn: u32) -> Result<QpEntry, Response> {
        self.clients
            .get(&client)
            .and_then(|c| c.qps.get(&qpn).copied())
            .ok_or_else(|| Response::error("no_qp", format!("QP {qpn:#x} is not yours")))
    }

    /// `lkey` must name an MR of this client.
    fn owned_key(&self, client: u32, lkey: u32) -> Result<(), Response> {
        if self.clients.get(&client).is_some_and(|c| c.mrs.contains_key(&lkey)) {
            Ok(())
        } else {
            Err(Response::error("bad_key", format!("lkey {lkey:#x} is not yours")))
        }
    }

    /// The client's RDMA state, with its PD created on first use.
    fn client_mut(&mut self, client: u32, rnic: &mut Rnic) -> &mut RdmaClient {
        self.clients.entry(client).or_insert_with(|| RdmaClient {
            pd: rnic.alloc_pd(),
            mrs: BTreeMap::new(),
            qps: BTreeMap::new(),
        })
    }

    fn reg_mr(
        &mut self,
        client: u32,
        device: &BTreeMap<u64, u64>,
        addr: u64,
        len: u64,
        access: u32,
    ) -> Result<Response, Response> {
        let access =
            u8::try_from(access).ok().filter(|&a| a <= Access::ALL.0).map(Access).ok_or_else(
                || Response::error("bad_request", format!("access bits {access:#x}")),
            )?;
        if len == 0 || addr.checked_add(len).is_none() {
            return Err(Response::error("bad_request", format!("MR length {len} at {addr:#x}")));
        }
        let shared = self.shared.clone();
        let mut rnic = lock(&shared.rnic);
        if is_device_address(addr) {
            let mine = device
                .range(..=addr)
                .next_back()
                .is_some_and(|(&base, &size)| addr - base < size && len <= size - (addr - base));
            if !mine {
                return Err(Response::error(
                    "bad_address",
                    format!("{len} bytes at {addr:#x} are not in one of your device allocations"),
                ));
            }
        } else {
            // Below the device space every region is host memory: check_owned then requires
            // the client to own it.
            if rnic.mem().check_owned(addr, len, client).is_err() {
                return Err(Response::error(
                    "bad_address",
                    format!("{len} bytes at {addr:#x} are not in one of your registrations"),
                ));
            }
        }
        let c = self.client_mut(client, &mut rnic);
        if c.mrs.len() >= MAX_MRS_PER_CLIENT {
            return Err(Response::error("no_memory", "too many MRs"));
        }
        let pd = c.pd;
        let mr = rnic.reg_mr(pd, addr, len, access).map_err(|e| verbs_error("reg_mr", e))?;
        c.mrs.insert(mr.lkey, mr);
        Ok(Response::Mr { lkey: mr.lkey, rkey: mr.rkey })
    }

    fn dereg_mr(&mut self, client: u32, lkey: u32) -> Result<Response, Response> {
        self.owned_key(client, lkey)?;
        let mut rnic = lock(&self.shared.rnic);
        rnic.dereg_mr(lkey).map_err(|e| verbs_error("dereg_mr", e))?;
        if let Some(c) = self.clients.get_mut(&client) {
            c.mrs.remove(&lkey);
        }
        Ok(Response::Ok)
    }

    fn create_qp(
        &mut self,
        client: u32,
        placement: &str,
        host_ring: Option<u64>,
        sq_depth: u32,
        rq_depth: u32,
    ) -> Result<Response, Response> {
        for (what, d) in [("sq_depth", sq_depth), ("rq_depth", rq_depth)] {
            if d == 0 || d > MAX_DEPTH {
                return Err(Response::error(
                    "bad_request",
                    format!("{what} {d} must be 1 ..= {MAX_DEPTH}"),
                ));
            }
        }
        let shared = self.shared.clone();
        let mut rnic = lock(&shared.rnic);
        let (kind, pool) = match (placement, host_ring) {
            ("host", Some(ring)) => {
                let mine = rnic
                    .mem()
                    .region_of(ring)
                    .is_some_and(|r| r.kind == MemKind::Host && r.owner == client);
                if !mine {
                    return Err(Response::error(
                        "bad_address",
                        format!("host_ring {ring:#x} is not in one of your registrations"),
                    ));
                }
                rnic.mem_mut()
                    .make_pool(ring)
                    .map_err(|e| Response::error("bad_address", e.to_string()))?;
                (MemKind::Host, Some(ring))
            }
            ("host", None) => {
                return Err(Response::error("bad_request", "host placement needs host_ring"));
            }
            ("on-chip", None) => (MemKind::OnChip, None),
            ("on-board", None) => (MemKind::OnBoard, None),
            ("on-chip" | "on-board", Some(_)) => {
                return Err(Response::error("bad_request", "host_ring is for host placement"));
            }
            (p, _) => {
                return Err(Response::error(
                    "bad_request",
                    format!("placement {p:?} (expected host, on-chip or on-board)"),
                ));
            }
        };
        let c = self.client_mut(client, &mut rnic);
        if c.qps.len() >= MAX_QPS_PER_CLIENT {
            return Err(Response::error("no_qp", "too many QPs"));
        }
        let pd = c.pd;
        let cq = rnic.create_cq((sq_depth + rq_depth) as usize);
        let init = QpInit {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            max_send_wr: sq_depth,
            max_recv_wr: rq_depth,
            placement: kind,
            sq_sig_all: false,
        };
        let qpn = match rnic.create_qp_in(init, pool) {
            Ok(q) => q,
            Err(e) => {
                let _ = rnic.destroy_cq(cq);
                return Err(verbs_error("create_qp", e));
            }
        };
        let (sq, rq) = rnic.qp_rings(qpn).map_err(|e| verbs_error("create_qp", e))?;
        let entry = QpEntry {
            cq,
            sq,
            rq,
            sq_len: u64::from(sq_depth.next_power_of_two()) * snic_rdma::wqe::SQ_SLOT as u64,
            rq_len: u64::from(rq_depth.next_power_of_two()) * snic_rdma::wqe::RQ_SLOT as u64,
        };
        c.qps.insert(qpn, entry);
        Ok(Response::Qp { qpn, sq_addr: sq, rq_addr: rq.unwrap_or(0) })
    }

    fn destroy_qp(&mut self, client: u32, qpn: u32) -> Result<Response, Response> {
        let q = self.owned_qp(client, qpn)?;
        let mut rnic = lock(&self.shared.rnic);
        rnic.destroy_qp(qpn).map_err(|e| verbs_error("destroy_qp", e))?;
        let _ = rnic.destroy_cq(q.cq);
        lock(&self.shared.chains).forget_qp(qpn, q.cq);
        if let Some(c) = self.clients.get_mut(&client) {
            c.qps.remove(&qpn);
        }
        Ok(Response::Ok)
    }

    fn connect(
        &mut self,
        client: u32,
        qpn: u32,
        remote_qpn: u32,
        remote_ip: &str,
        mtu: u32,
    ) -> Result<Response, Response> {
        self.owned_qp(client, qpn)?;
        let ip: IpAddr = remote_ip
            .parse()
            .map_err(|_| Response::error("bad_request", format!("remote_ip {remote_ip:?}")))?;
        let (family_ok, own) = {
            let rnic = lock(&self.shared.rnic);
            let cfg = rnic.config();
            (cfg.source_for(ip).is_some(), ip == cfg.local_ip || cfg.more_ips.contains(&ip))
        };
        if !family_ok || !snic_nic::is_unicast(ip) {
            return Err(Response::error(
                "bad_request",
                format!(
                    "remote_ip {ip}: a unicast address of a family this snic's RDMA addresses \
                     ({}) have",
                    self.addr
                ),
            ));
        }
        if own && self.link_mtu.is_some() {
            // Over kernel UDP the loopback carries it; a NIC's wire does not loop back.
            return Err(Response::error(
                "bad_request",
                format!(
                    "remote_ip {ip} is this NIC's own address (connect QPs on one NIC over kernel UDP, --rdma)"
                ),
            ));
        }
        // 0: the largest path MTU the wire port's MTU (on a NIC) or the route to the peer (over
        // kernel UDP) carries, as rxe derives it from its netdev.
        let path_mtu = if mtu == 0 {
            let m = match self.link_mtu {
                Some(link) => snic_roce::cm::mtu_for_link(link, ip.is_ipv6()).ok_or_else(|| {
                    io::Error::other(format!("link MTU {link} is too small for RoCE"))
                }),
                None => snic_roce::cm::path_mtu_to(ip),
            };
            m.map_err(|e| Response::error("bad_request", format!("path MTU towards {ip}: {e}")))?
        } else {
            let m = Mtu::from_bytes(mtu).ok_or_else(|| {
                Response::error(
                    "bad_request",
                    format!("mtu {mtu} (0 for the route's, or 256, 512, 1024, 2048, 4096)"),
                )
            })?;
            // On a NIC, no larger than its wire carries (rxe refuses a path MTU above its
            // port's too): bigger packets would all be dropped at the port.
            if let Some(link) = self.link_mtu {
                let most = snic_roce::cm::mtu_for_link(link, ip.is_ipv6());
                if most.is_none_or(|most| m.bytes() > most.bytes()) {
                    return Err(Response::error(
                        "bad_request",
                        format!(
                            "mtu {mtu} is more than the wire (MTU {link}) carries: {}",
                            most.map_or("none".into(), |m| format!("at most {}", m.bytes()))
                        ),
                    ));
                }
            }
            m
        };
        let attr = QpAttr {
            access: Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC
                | Access::FLUSH_GLOBAL
                | Access::FLUSH_PERSISTENT,
            path_mtu,
            dest_qpn: remote_qpn,
            rq_psn: 0,
            sq_psn: 0,
            remote: Some(ip),
            ..QpAttr::default()
        };
        let mut rnic = lock(&self.shared.rnic);
        let now = self.shared.clock.now();
        rnic.connect_rc(qpn, &attr, now).map_err(|e| verbs_error("connect", e))?;
        drop(rnic);
        // On a NIC, resolve the peer's MAC now, so the QP's first packets find it known.
        if let Some(node) = &self.shared.node {
            lock(node).nic_mut().prepare(now, ip);
        }
        self.shared.kick();
        Ok(Response::Ok)
    }

    fn sgl(&self, client: u32, addr: u64, lkey: u32, len: u32) -> Result<SgList, Response> {
        if len == 0 {
            return Ok(SgList::empty());
        }
        self.owned_key(client, lkey)?;
        Ok(SgList::one(Sge { addr, len, lkey }))
    }

    /// The engine's work request for `w`, a WR of `client` (opcode known, lkey its own).
    fn send_wr(&self, client: u32, w: &RdmaSendWr) -> Result<SendWr, Response> {
        let remote = Remote { addr: w.remote_addr, rkey: w.rkey };
        let op = match w.opcode.as_str() {
            "write" => WrOp::Write { remote },
            "read" => WrOp::Read { remote },
            "send" => WrOp::Send,
            "flush" => {
                let level = FlushLevel::from_selectivity(w.flush >> 4).ok_or_else(|| {
                    Response::error("bad_request", format!("flush level {}", w.flush >> 4))
                })?;
                let placement = w.flush & 0x0f;
                let op = WrOp::Flush { remote, len: w.len, level, placement };
                return Ok(SendWr::new(w.wr_id, op, SgList::empty()));
            }
            "atomic_write" => {
                let op = WrOp::AtomicWrite { remote, value: w.value };
                return Ok(SendWr::new(w.wr_id, op, SgList::empty()));
            }
            o => {
                return Err(Response::error(
                    "bad_request",
                    format!("opcode {o:?} (expected write, read, send, flush or atomic_write)"),
                ));
            }
        };
        let sgl = self.sgl(client, w.local_addr, w.lkey, w.len)?;
        Ok(SendWr::new(w.wr_id, op, sgl))
    }

    /// Post `wrs` on `qpn` with one doorbell and one wake-up of the RDMA thread, all or none
    /// (a `PostSend` is a batch of one).
    fn post_send(
        &mut self,
        client: u32,
        qpn: u32,
        wrs: &[RdmaSendWr],
    ) -> Result<Response, Response> {
        self.owned_qp(client, qpn)?;
        if wrs.is_empty() || wrs.len() > MAX_POST_BATCH {
            return Err(Response::error(
                "bad_request",
                format!("{} work requests in one post (1 ..= {MAX_POST_BATCH})", wrs.len()),
            ));
        }
        let wrs = wrs.iter().map(|w| self.send_wr(client, w)).collect::<Result<Vec<_>, _>>()?;
        let mut rnic = lock(&self.shared.rnic);
        let now = self.shared.clock.now();
        rnic.post_send_batch(qpn, &wrs, now).map_err(|e| verbs_error("post_send", e))?;
        drop(rnic);
        self.shared.kick();
        Ok(Response::Ok)
    }

    fn post_recv(
        &mut self,
        client: u32,
        qpn: u32,
        addr: u64,
        lkey: u32,
        len: u32,
        wr_id: u64,
    ) -> Result<Response, Response> {
        self.owned_qp(client, qpn)?;
        let sgl = self.sgl(client, addr, lkey, len)?;
        let mut rnic = lock(&self.shared.rnic);
        let now = self.shared.clock.now();
        rnic.post_recv(qpn, &RecvWr { wr_id, sgl }, now)
            .map_err(|e| verbs_error("post_recv", e))?;
        drop(rnic);
        self.shared.kick();
        Ok(Response::Ok)
    }

    fn poll_cq(&mut self, client: u32, qpn: u32, max: u32) -> Result<Response, Response> {
        let q = self.owned_qp(client, qpn)?;
        let n = max.min(MAX_POLL) as usize;
        let mut rnic = lock(&self.shared.rnic);
        let mut st = lock(&self.shared.chains);
        // First what the chains' service held for the host, in order.
        let mut cqes = Vec::with_capacity(n);
        if let Some(held) = st.held.get_mut(&q.cq.0) {
            while cqes.len() < n {
                match held.pop_front() {
                    Some(HostCqe::Engine(c)) => cqes.push(cqe_out(&c)),
                    Some(HostCqe::Chain(d)) => cqes.push(chain_out(&d)),
                    None => break,
                }
            }
        }
        // Then the CQ itself, without the completions of chains in flight.
        let mut out = vec![blank_cqe(); n - cqes.len()];
        let now = self.shared.clock.now();
        let mut taken = false;
        while cqes.len() < n {
            let want = n - cqes.len();
            let got =
                rnic.poll_cq(q.cq, &mut out[..want]).map_err(|e| verbs_error("poll_cq", e))?;
            for c in &out[..got] {
                if st.chains.on_cqe(c, now) {
                    taken = true;
                } else {
                    cqes.push(cqe_out(c));
                }
            }
            if got < want {
                break;
            }
        }
        drop((st, rnic));
        if taken {
            // A chain may be ready for its kernel: the RDMA thread moves it on.
            self.shared.kick();
        }
        Ok(Response::Cqes { cqes })
    }

    /// Start a chained command (see [`snic_nic::offload`]).
    fn chain(
        &mut self,
        client: u32,
        qpn: u32,
        wr_id: u64,
        reads: &[ChainReadMsg],
        kernel: &KernelCmdMsg,
        write_back: Option<ChainWriteMsg>,
    ) -> Result<Response, Response> {
        let q = self.owned_qp(client, qpn)?;
        let cmd = kernel
            .to_cmd()
            .ok_or_else(|| Response::error("bad_request", "more than 8 kernel arguments"))?;
        let mut chain_reads = Vec::with_capacity(reads.len());
        for r in reads {
            if r.len == 0 {
                return Err(Response::error("bad_request", "a chained READ of 0 bytes"));
            }
            self.owned_key(client, r.lkey)?;
            chain_reads.push(ChainRead {
                remote: Remote { addr: r.remote_addr, rkey: r.rkey },
                local: Sge { addr: r.local_addr, len: r.len, lkey: r.lkey },
            });
        }
        let end = match write_back {
            None => ChainEnd::Notify,
            Some(w) => {
                if w.len == 0 {
                    return Err(Response::error("bad_request", "a chained WRITE of 0 bytes"));
                }
                self.owned_key(client, w.lkey)?;
                ChainEnd::WriteBack {
                    local: Sge { addr: w.local_addr, len: w.len, lkey: w.lkey },
                    remote: Remote { addr: w.remote_addr, rkey: w.rkey },
                }
            }
        };
        let spec = ChainSpec { qpn, wr_id, reads: chain_reads, kernel: cmd, end };
        let mut rnic = lock(&self.shared.rnic);
        let mut st = lock(&self.shared.chains);
        let now = self.shared.clock.now();
        st.chains.start(&mut rnic, client, spec, now).map_err(|e| {
            let code = match e {
                snic_nic::offload::ChainError::Post(VerbsError::QueueFull) => "ring_full",
                snic_nic::offload::ChainError::TooMany => "busy",
                _ => "bad_request",
            };
            Response::error(code, e.to_string())
        })?;
        st.cq_of.insert(qpn, q.cq);
        st.started += 1;
        drop((st, rnic));
        self.shared.kick();
        Ok(Response::Ok)
    }

    /// `Some(busy error)` when an MR or a QP ring of `client` lies in `[base, base + len)` (a
    /// registration or device allocation about to be dropped).
    pub(crate) fn busy(&self, client: u32, base: u64, len: u64) -> Option<Response> {
        let c = self.clients.get(&client)?;
        if let Some(m) = c.mrs.values().find(|m| overlaps(m.addr, m.len, base, len)) {
            return Some(Response::error(
                "busy",
                format!("MR {:#x} lies in {base:#x}; deregister it first", m.lkey),
            ));
        }
        let ring_in = |q: &QpEntry| {
            overlaps(q.sq, q.sq_len, base, len)
                || q.rq.is_some_and(|rq| overlaps(rq, q.rq_len, base, len))
        };
        if let Some((qpn, _)) = c.qps.iter().find(|(_, q)| ring_in(q)) {
            return Some(Response::error(
                "busy",
                format!("QP {qpn:#x} has its rings in {base:#x}; destroy it first"),
            ));
        }
        None
    }

    /// Reclaim every RDMA object of `client`: QPs (their rings freed), CQs, MRs, the PD.
    pub(crate) fn disconnect(&mut self, client: u32) {
        let Some(c) = self.clients.remove(&client) else { return };
        let mut rnic = lock(&self.shared.rnic);
        for (&qpn, q) in &c.qps {
            let _ = rnic.destroy_qp(qpn);
            let _ = rnic.destroy_cq(q.cq);
            lock(&self.shared.chains).forget_qp(qpn, q.cq);
            self.reclaimed.qps += 1;
        }
        for &lkey in c.mrs.keys() {
            let _ = rnic.dereg_mr(lkey);
            self.reclaimed.mrs += 1;
        }
        let _ = rnic.dealloc_pd(c.pd);
        self.reclaimed.clients += 1;
    }

    /// The `rdma` part of the counters document.
    pub(crate) fn stats(&self) -> Value {
        let rnic = lock(&self.shared.rnic);
        let chains = lock(&self.shared.chains);
        let s = rnic.stats();
        json!({
            "enabled": true,
            "addr": self.addr.to_string(),
            "qps": self.clients.values().map(|c| c.qps.len()).sum::<usize>(),
            "mrs": self.clients.values().map(|c| c.mrs.len()).sum::<usize>(),
            "clients": self.clients.len(),
            "qps_reclaimed": self.reclaimed.qps,
            "mrs_reclaimed": self.reclaimed.mrs,
            "clients_reclaimed": self.reclaimed.clients,
            "transport_errors": self.shared.transport_errors.load(Ordering::Relaxed),
            "chains": {
                "started": chains.started,
                "ended": chains.ended,
                "in_flight": chains.chains.len(),
                "stray_completions": chains.chains.stray(),
            },
            "engine": serde_json::to_value(s).unwrap_or(Value::Null),
            "message_latency": crate::server::hist_json(rnic.msg_latency()),
            // Each QP's state and PSNs (the first QP_LIST of them): a tool's rates per QP are
            // the PSN advances between two documents (requests sent, requests received).
            "qp_list": self
                .clients
                .iter()
                .flat_map(|(&client, c)| c.qps.keys().map(move |&qpn| (client, qpn)))
                .take(QP_LIST)
                .filter_map(|(client, qpn)| {
                    let qp = rnic.qp(qpn)?;
                    Some(json!({
                        "qpn": qpn,
                        "client": client,
                        "state": format!("{:?}", qp.state()),
                        "dest_qpn": qp.attr.dest_qpn,
                        "next_psn": qp.req.next_psn(),
                        "una": qp.req.una(),
                        "expected_psn": qp.resp.expected_psn(),
                        "outstanding": qp.req.outstanding_wqes(),
                    }))
                })
                .collect::<Vec<_>>(),
        })
    }

    /// The NIC's data path counters (pipeline, ports, own packets, neighbours), for
    /// [`Link::Wire`]; `None` over kernel UDP.
    pub(crate) fn nic_stats(&self) -> Option<Value> {
        let node = lock(self.shared.node.as_ref()?);
        let ports: Vec<Value> = node
            .port_counters()
            .into_iter()
            .map(|(name, c)| json!({ "name": name, "counters": c }))
            .collect();
        Some(json!({
            "pipeline": node.counters(),
            "ports": ports,
            "nic": node.nic_counters(),
            "neighbours": node.nic().neighbours().counters(),
        }))
    }
}

impl Drop for RdmaHost {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.kick();
        if let Some(g) = &self.gate {
            g.set(false);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The RDMA thread on a NIC's wire port (see the module doc).
fn run_wire(shared: &Shared) {
    let Some(node) = shared.node.as_ref() else { return };
    let mut fds = Vec::new();
    lock(node).poll_fds(&mut fds);
    fds.push(shared.wake.fd().as_raw_fd());
    let mut floor = Duration::ZERO;
    while !shared.stop.load(Ordering::Acquire) && shared.pass_gate() {
        let (moved, next) = {
            let mut rnic = lock(&shared.rnic);
            let mut node = lock(node);
            let now = shared.clock.now();
            let mut moved = node.poll(now, &mut rnic);
            if lock(&shared.chains).service(&mut rnic, &shared.clock) {
                moved += 1;
            }
            let next = node.poll_timeout(&rnic).map(|t| t.saturating_duration_since(now));
            (moved, next)
        };
        if moved > 0 {
            floor = Duration::ZERO;
            continue;
        }
        // Nothing moved. A descriptor that keeps waking us for nothing (a TAP device deleted
        // under us reports POLLERR for ever; a stage whose deadline stays due) must not make
        // this a busy loop: each such empty round doubles a floor under the wait, up to
        // IDLE_WAIT, and any movement resets it.
        let wait = next.map_or(IDLE_WAIT, |d| d.min(IDLE_WAIT)).max(floor);
        let t0 = std::time::Instant::now();
        if wait_readable(&fds, wait).unwrap_or(false) {
            let _ = shared.wake.take();
        }
        if t0.elapsed() < EMPTY_WAKE {
            floor = (floor * 2).clamp(EMPTY_WAKE, IDLE_WAIT);
        }
    }
    // After a takeover the ports are the new process's: nothing more goes out here.
    if shared.gate.load(Ordering::Acquire) != GATE_ABANDON {
        let _ = lock(node).flush();
    }
}

/// The RDMA thread over kernel UDP (see the module doc).
fn run(shared: &Shared, mut tr: RoceTransport) {
    let fds = [tr.rx_fd(), shared.wake.fd().as_raw_fd()];
    let count_err = |r: io::Result<usize>| {
        r.unwrap_or_else(|_| {
            shared.transport_errors.fetch_add(1, Ordering::Relaxed);
            0
        })
    };
    while !shared.stop.load(Ordering::Acquire) && shared.pass_gate() {
        let (moved, next) = {
            let mut rnic = lock(&shared.rnic);
            let now = shared.clock.now();
            let got = count_err(tr.recv(&mut rnic, now));
            if rnic.poll_timeout().is_some_and(|t| t <= now) {
                rnic.handle_timeout(now);
            }
            let chained = lock(&shared.chains).service(&mut rnic, &shared.clock);
            let sent = count_err(tr.send(&mut rnic, now));
            let next = rnic.poll_timeout().map(|t| t.saturating_duration_since(now));
            (got + sent > 0 || chained, next)
        };
        if moved {
            continue;
        }
        let wait = if tr.tx_pending() > 0 {
            Duration::ZERO
        } else {
            next.map_or(IDLE_WAIT, |d| d.min(IDLE_WAIT))
        };
        // Something is ready: drain the wake eventfd (a no-op when it was not that).
        if wait_readable(&fds, wait).unwrap_or(false) {
            let _ = shared.wake.take();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Takeover (see `crate::server::takeover`).

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("handover: {}", what.into()))
}

impl RdmaHost {
    /// Park the RDMA thread between two rounds (nothing received, sent or timed out until
    /// [`Self::resume`]).
    pub(crate) fn pause(&self) -> io::Result<()> {
        self.shared.gate.store(GATE_PAUSE, Ordering::Release);
        self.shared.kick();
        let end = std::time::Instant::now() + PARK_WAIT;
        let mut parked = lock(&self.shared.parked);
        while !*parked && self.thread.is_some() {
            let left = end.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                drop(parked);
                self.resume();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the RDMA thread did not park",
                ));
            }
            parked = self
                .shared
                .gate_cv
                .wait_timeout(parked, left)
                .map_or_else(|p| p.into_inner().0, |(g, _)| g);
        }
        Ok(())
    }

    /// Let the RDMA thread run on after [`Self::pause`].
    pub(crate) fn resume(&self) {
        self.shared.gate.store(GATE_RUN, Ordering::Release);
        let _g = lock(&self.shared.parked);
        self.shared.gate_cv.notify_all();
    }

    /// End the paused RDMA thread without another round (a new process took over: the
    /// engine's state and socket are its own now).
    pub(crate) fn abandon(&self) {
        self.shared.gate.store(GATE_ABANDON, Ordering::Release);
        let _g = lock(&self.shared.parked);
        self.shared.gate_cv.notify_all();
    }

    /// The paused engine's state (its connections, see [`Rnic::export`]), every client's
    /// RDMA objects, and what it sends and receives through: the UDP receive socket, or the
    /// NIC's ports (flushed, then [`snic_io::Port::handover`]) and MAC. Descriptors are added
    /// to `fds` and named by their index there. Refused while a chained command runs or holds
    /// completions (those are not carried), or when a port cannot be handed over.
    pub(crate) fn export(&self, fds: &mut Vec<std::os::fd::OwnedFd>) -> io::Result<Value> {
        // The cheap refusal first, before the ports are flushed and handed over.
        {
            let chains = lock(&self.shared.chains);
            if !chains.chains.is_empty() || chains.held.values().any(|h| !h.is_empty()) {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "a chained RDMA command is in flight; try again when it is done",
                ));
            }
        }
        let link = match (&self.rx, &self.shared.node) {
            (Some(rx), _) => {
                fds.push(std::os::fd::OwnedFd::from(rx.try_clone()?));
                json!({ "udp": fds.len() - 1 })
            }
            (None, Some(node)) => {
                let mut node = lock(node);
                node.flush()?;
                let mac = node.nic().config().mac;
                let neigh: Vec<Value> = node
                    .nic()
                    .neighbours()
                    .known()
                    .into_iter()
                    .map(|(ip, m)| json!([ip.to_string(), m.0]))
                    .collect();
                let mut ports = Vec::new();
                for (i, p) in node.ports_mut().iter_mut().enumerate() {
                    let name = p.name().to_string();
                    let h = match p.handover() {
                        Some(Ok(h)) => h,
                        Some(Err(e)) => {
                            return Err(io::Error::new(
                                e.kind(),
                                format!("port {i} ({name}) cannot be handed over: {e}"),
                            ));
                        }
                        None => {
                            return Err(io::Error::new(
                                io::ErrorKind::Unsupported,
                                format!("port {i} ({name}) is of a kind that is not handed over"),
                            ));
                        }
                    };
                    let first = fds.len();
                    fds.extend(h.fds);
                    let state = serde_json::to_value(&h.state).map_err(|e| bad(e.to_string()))?;
                    ports.push(json!({"name": name, "state": state,
                                      "fds": (first..fds.len()).collect::<Vec<_>>()}));
                }
                json!({ "wire": { "mac": mac.0, "ports": ports, "neigh": neigh } })
            }
            (None, None) => return Err(bad("the engine has no link")),
        };
        let st = lock(&self.shared.rnic)
            .export(self.shared.clock.now())
            .map_err(|e| io::Error::new(io::ErrorKind::Unsupported, format!("RDMA engine: {e}")))?;
        let engine = serde_json::to_value(&st).map_err(|e| bad(e.to_string()))?;
        let clients: Vec<Value> = self
            .clients
            .iter()
            .map(|(&id, c)| {
                let qps: Vec<Value> = c
                    .qps
                    .iter()
                    .map(|(&qpn, q)| {
                        json!({"qpn": qpn, "cq": q.cq.0, "sq": q.sq, "rq": q.rq,
                               "sq_len": q.sq_len, "rq_len": q.rq_len})
                    })
                    .collect();
                json!({"id": id, "pd": c.pd.0, "mrs": c.mrs.values().collect::<Vec<_>>(), "qps": qps})
            })
            .collect();
        Ok(
            json!({"addr": self.addr.to_string(), "link": link, "engine": engine, "clients": clients}),
        )
    }

    /// An RDMA host rebuilt from [`Self::export`] of another process over `mem` (the master
    /// address space: the same device memory with its allocations, the clients' registrations)
    /// and `link`: for `Link::Udp`, `rx` is the handed receive socket; for `Link::Wire`, the
    /// NIC built around the handed ports. The engine imports the state with the QPs' rings in
    /// place; the thread starts with [`Self::start_thread`].
    pub(crate) fn adopt(
        link: Link,
        mem: AddressSpace,
        rx: Option<std::os::fd::OwnedFd>,
        doc: &Value,
    ) -> io::Result<(RdmaHost, Master)> {
        let clock = MonotonicClock::new();
        let (addr, more_ips, node, link_mtu, dup, transport) = match link {
            Link::Udp(addr) => {
                let sock = std::net::UdpSocket::from(rx.ok_or_else(|| bad("no RoCE socket"))?);
                if sock.local_addr()? != addr {
                    return Err(bad("the handed RoCE socket is bound elsewhere"));
                }
                let dup = sock.try_clone()?;
                let t = RoceTransport::adopt(sock, TransportOpts::default())?;
                (addr, Vec::new(), None, None, Some(dup), Some(t))
            }
            Link::Wire(w) => {
                let Wire { mut node, ips, link_mtu } = *w;
                let Some((&first, more)) = ips.split_first() else {
                    return Err(bad("a NIC needs at least one RoCE address"));
                };
                let addr = SocketAddr::new(first, snic_wire::roce::UDP_PORT);
                // The neighbours the old NIC knew, as stale entries (confirmed on first use).
                let mut known = Vec::new();
                for n in doc["link"]["wire"]["neigh"].as_array().into_iter().flatten() {
                    let ip = n[0].as_str().and_then(|s| s.parse::<IpAddr>().ok());
                    let mac: Option<Vec<u8>> = n[1]
                        .as_array()
                        .map(|m| m.iter().filter_map(|b| b.as_u64()?.try_into().ok()).collect());
                    match (ip, mac.and_then(|m| <[u8; 6]>::try_from(m).ok())) {
                        (Some(ip), Some(m)) => {
                            known.push((ip, snic_wire::ethernet::EthernetAddress(m)));
                        }
                        _ => return Err(bad(format!("neighbour {n}"))),
                    }
                }
                node.nic_mut().neighbours_mut().adopt_known(clock.now(), &known);
                (addr, more.to_vec(), Some(Mutex::new(node)), Some(link_mtu), None, None)
            }
        };
        if doc["addr"].as_str() != Some(addr.to_string().as_str()) {
            return Err(bad(format!("RDMA address {} there, {addr} here", doc["addr"])));
        }
        let wire = node.is_some();
        let mut rnic = engine(addr, more_ips, mem)?;
        let empty = Vec::new();
        let mut clients = BTreeMap::new();
        for c in doc["clients"].as_array().unwrap_or(&empty) {
            let id = c["id"]
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| bad("client"))?;
            let pd = Pd(c["pd"]
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| bad("pd"))?);
            let mut mrs = BTreeMap::new();
            for m in c["mrs"].as_array().unwrap_or(&empty) {
                let info: MrInfo =
                    serde_json::from_value(m.clone()).map_err(|e| bad(e.to_string()))?;
                mrs.insert(info.lkey, info);
            }
            let mut qps = BTreeMap::new();
            for q in c["qps"].as_array().unwrap_or(&empty) {
                let n = |k: &str| q[k].as_u64().ok_or_else(|| bad(format!("qp `{k}`")));
                let e = QpEntry {
                    cq: CqId(u32::try_from(n("cq")?).map_err(|_| bad("cq"))?),
                    sq: n("sq")?,
                    rq: q["rq"].as_u64(),
                    sq_len: n("sq_len")?,
                    rq_len: n("rq_len")?,
                };
                // Rings in a client's registration: that region is a pool again, with the
                // rings' allocations (device rings came back with device memory's).
                let m = rnic.mem_mut();
                let rings = std::iter::once((e.sq, e.sq_len)).chain(e.rq.map(|r| (r, e.rq_len)));
                for (at, len) in rings {
                    if m.kind_of(at) == Some(MemKind::Host) {
                        let err = |e: snic_dma::MemError| bad(format!("QP ring {at:#x}: {e}"));
                        m.make_pool(at).map_err(err)?;
                        m.alloc_at(at, len).map_err(err)?;
                    }
                }
                let qpn = u32::try_from(n("qpn")?).map_err(|_| bad("qpn"))?;
                qps.insert(qpn, e);
            }
            clients.insert(id, RdmaClient { pd, mrs, qps });
        }
        let st: snic_rdma::RnicExport =
            serde_json::from_value(doc["engine"].clone()).map_err(|e| bad(e.to_string()))?;
        rnic.import_in_place(&st, clock.now())
            .map_err(|e| bad(format!("importing the RDMA engine: {e}")))?;
        let shared = Arc::new(Shared {
            rnic: Mutex::new(rnic),
            node,
            clock,
            wake: EventFd::new()?,
            stop: AtomicBool::new(false),
            transport_errors: AtomicU64::new(0),
            chains: Mutex::new(ChainState::new()),
            gate: std::sync::atomic::AtomicU8::new(GATE_RUN),
            parked: Mutex::new(false),
            gate_cv: std::sync::Condvar::new(),
        });
        let host = RdmaHost {
            shared: shared.clone(),
            addr,
            link_mtu,
            thread: None,
            clients,
            reclaimed: Reclaimed::default(),
            rx: dup,
            pending: Some(if wire { None } else { transport }),
            gate: None,
        };
        Ok((host, Master(MasterKind::Rnic(shared))))
    }

    /// QPs of all clients.
    pub(crate) fn qps(&self) -> usize {
        self.clients.values().map(|c| c.qps.len()).sum()
    }

    /// Start the RDMA thread of an adopted host (nothing to do for one already running).
    /// With a `gate`, the thread runs only once it opens ([`crate::server::Gate`]), and
    /// ends untouched when it closes.
    pub(crate) fn start_thread(
        &mut self,
        gate: Option<Arc<crate::server::Gate>>,
    ) -> io::Result<()> {
        let Some(t) = self.pending.take() else { return Ok(()) };
        let s = self.shared.clone();
        self.gate = gate.clone();
        let thread =
            std::thread::Builder::new().name("snic-hostif-rdma".into()).spawn(move || {
                if !gate.is_none_or(|g| g.wait()) {
                    return;
                }
                match t {
                    Some(t) => run(&s, t),
                    None => run_wire(&s),
                }
            })?;
        self.thread = Some(thread);
        Ok(())
    }
}
