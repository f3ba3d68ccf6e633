//! Setup messages between a host process and snic.
//!
//! Transport: a `SOCK_SEQPACKET` Unix socket ([`crate::shm::SeqPacket`]). Every message is one
//! packet holding one JSON document ([`Request`] from the host, [`Response`] from snic), with
//! file descriptors attached by `SCM_RIGHTS` where the message says so. One request, one
//! response, in order. Only setup travels here; the data path is shared memory and doorbells.
//!
//! When the host's socket closes (the process exits or dies), snic reclaims everything the
//! client had: queues, channels, registrations, device allocations.

use serde::{Deserialize, Serialize};

/// Largest message, bytes.
pub const MAX_MESSAGE: usize = 64 * 1024;
/// Most file descriptors one message carries.
pub const MAX_FDS: usize = 8;

/// Device memory kinds, as named in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DevKind {
    /// Small, fast device memory.
    OnChip,
    /// Large device memory.
    OnBoard,
}

impl DevKind {
    /// The memory model's kind.
    pub const fn mem_kind(self) -> snic_dma::MemKind {
        match self {
            DevKind::OnChip => snic_dma::MemKind::OnChip,
            DevKind::OnBoard => snic_dma::MemKind::OnBoard,
        }
    }
    /// Lower-case name (the memory kind's).
    pub const fn name(self) -> &'static str {
        self.mem_kind().name()
    }
}

/// Queue mode, as named in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QueueMode {
    /// Memory-mapped.
    Mm,
    /// Streaming.
    St,
}

impl QueueMode {
    /// The engine's queue mode.
    pub const fn mode(self) -> snic_dma::Mode {
        match self {
            QueueMode::Mm => snic_dma::Mode::Mm,
            QueueMode::St => snic_dma::Mode::St,
        }
    }
}

/// Direction, as named in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DirName {
    /// Host to card.
    H2c,
    /// Card to host.
    C2h,
}

impl DirName {
    /// The engine's direction.
    pub const fn dir(self) -> snic_dma::Dir {
        match self {
            DirName::H2c => snic_dma::Dir::H2c,
            DirName::C2h => snic_dma::Dir::C2h,
        }
    }
}

/// A request from a host process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// First message. Response: [`Response::Welcome`] with fds `[bar, nic_page, kick_0 ..
    /// kick_{workers + compute_workers - 1}]` (the DMA workers' kicks, then the compute
    /// workers').
    Hello {
        /// Free-form client name (for stats and logs).
        name: String,
        /// Protocol version the client speaks ([`crate::abi::VERSION_VALUE`]).
        version: u32,
    },
    /// Register host memory: one fd attached (a memfd the host mapped shared), `len` bytes from
    /// offset 0. Response: [`Response::Registered`] with the IOVA descriptors use for it.
    RegisterHost {
        /// Bytes (at most the fd's size).
        len: u64,
    },
    /// Drop a registration (by the IOVA it got). Response: `Ok`.
    UnregisterHost {
        /// The registration's IOVA.
        iova: u64,
    },
    /// Allocate device memory. Response: [`Response::Allocated`].
    AllocDevice {
        /// On-chip or on-board.
        kind: DevKind,
        /// Bytes.
        size: u64,
        /// Alignment (power of two).
        align: u64,
    },
    /// Free device memory allocated by this client. Response: `Ok`.
    FreeDevice {
        /// The address [`Response::Allocated`] gave.
        addr: u64,
    },
    /// Add a queue (the engine picks the qid). With `interrupt`, one eventfd is attached and
    /// snic signals it when completions are written. Response: [`Response::Queue`].
    AddQueue {
        /// Memory-mapped or streaming.
        mode: QueueMode,
        /// Descriptors per ring (power of two).
        ring_size: u32,
        /// Completion entries (power of two).
        cmpt_size: u32,
        /// IOVA of the H2C ring.
        h2c_ring: u64,
        /// IOVA of the C2H ring.
        c2h_ring: u64,
        /// IOVA of the completion ring.
        cmpt_ring: u64,
        /// Alignment rule for descriptors (power of two).
        align: u32,
        /// Interrupt (eventfd attached) or polled completion.
        interrupt: bool,
        /// Streaming: deliver H2C packets to this queue's C2H ring (None: to itself).
        stream_to: Option<u16>,
    },
    /// Start a queue. Response: `Ok`.
    StartQueue {
        /// Queue.
        qid: u16,
    },
    /// Stop a queue. Response: `Ok`.
    StopQueue {
        /// Queue.
        qid: u16,
    },
    /// Delete a queue. Response: `Ok`.
    DeleteQueue {
        /// Queue.
        qid: u16,
    },
    /// Configure (and enable) channel `index` of `dir`. With `interrupt`, one eventfd is
    /// attached. Response: [`Response::Channel`].
    SetChannel {
        /// Direction.
        dir: DirName,
        /// 0 .. 4.
        index: u8,
        /// Alignment rule.
        align: u32,
        /// Interrupt (eventfd attached) or polled.
        interrupt: bool,
    },
    /// Attach an eventfd that snic signals when it writes kernel `kernel`'s status FIFO while
    /// bit [`crate::abi::K_CONTROL_IRQ`] of its [`crate::abi::K_CONTROL`] register is set.
    /// One eventfd attached (it replaces an earlier one). Response: `Ok`.
    KernelIrq {
        /// Kernel id (below [`crate::abi::MAX_KERNELS`]).
        kernel: u32,
    },
    /// snic's counters. Response: [`Response::Stats`].
    Stats,
    /// RDMA hooks (see [`RdmaRequest`]).
    Rdma(RdmaRequest),
}

/// RDMA requests: QPs and memory regions of snic's RDMA engine, placed in this client's host
/// memory or in device memory.
///
/// In this first cut verbs are posted through the setup socket (the control path): snic writes
/// the WQE into the QP's ring (wherever it was placed) and the engine fetches it from there.
/// Every `qpn` and `lkey` must be this client's; snic refuses others' with an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rdma", rename_all = "snake_case")]
pub enum RdmaRequest {
    /// Register an MR over `[addr, addr + len)` (a host IOVA of this client or a device
    /// address). Response: [`Response::Mr`].
    RegMr {
        /// Start address.
        addr: u64,
        /// Length.
        len: u64,
        /// Access bits as `snic_rdma::verbs::access` (LOCAL_WRITE, REMOTE_READ, ...).
        access: u32,
    },
    /// Create an RC QP whose SQ/RQ rings are placed in `placement`. Response: [`Response::Qp`].
    CreateQp {
        /// "host" (rings allocated in a host buffer of this client: `host_ring` IOVA), or
        /// "on-chip" / "on-board".
        placement: String,
        /// For host placement: IOVA of a registered buffer big enough for both rings.
        host_ring: Option<u64>,
        /// SQ depth.
        sq_depth: u32,
        /// RQ depth.
        rq_depth: u32,
    },
    /// Connect a QP to a peer QP (RESET -> RTS). Response: `Ok`.
    Connect {
        /// Local QP.
        qpn: u32,
        /// Remote QP.
        remote_qpn: u32,
        /// Remote IP (a QP on this same snic when it is this snic's address).
        remote_ip: String,
        /// Path MTU.
        mtu: u32,
    },
    /// Post a work request. Response: `Ok`.
    PostSend {
        /// QP.
        qpn: u32,
        /// "write", "read" or "send".
        opcode: String,
        /// Local address and lkey.
        local_addr: u64,
        /// lkey of the local MR.
        lkey: u32,
        /// Length.
        len: u32,
        /// Remote address (write/read).
        remote_addr: u64,
        /// rkey (write/read).
        rkey: u32,
        /// Caller's id, echoed in the completion.
        wr_id: u64,
    },
    /// Post several work requests on one QP with one doorbell (RecoNIC's batch mode): snic
    /// writes every WQE into the SQ ring, then moves the producer index once and wakes the
    /// RDMA engine once. All or nothing: a bad WR (opcode, lkey) or too little room in the
    /// ring posts none. At most [`MAX_POST_BATCH`] WRs. Response: `Ok`.
    PostSendBatch {
        /// QP.
        qpn: u32,
        /// The work requests, in ring order.
        wrs: Vec<RdmaSendWr>,
    },
    /// Post a receive buffer. Response: `Ok`.
    PostRecv {
        /// QP.
        qpn: u32,
        /// Address.
        addr: u64,
        /// lkey.
        lkey: u32,
        /// Length.
        len: u32,
        /// Caller's id.
        wr_id: u64,
    },
    /// A chained command (RDMA READs into local memory, then a lookaside kernel, then an
    /// RDMA WRITE of the result or nothing), carried out by snic by itself: one request (one
    /// doorbell), one completion on the QP's CQ (opcode [`WC_CHAIN`], with
    /// [`RdmaCqe::chain`]). Response: `Ok` once the READs are posted.
    Chain {
        /// The connected QP the READs and the WRITE go on.
        qpn: u32,
        /// Echoed in the completion.
        wr_id: u64,
        /// The READs (1 ..= 64), posted as one batch.
        reads: Vec<ChainReadMsg>,
        /// The kernel command run when every READ is in.
        kernel: KernelCmdMsg,
        /// WRITE the kernel's output back to the peer (else: notify only).
        write_back: Option<ChainWriteMsg>,
    },
    /// Poll the QP's CQ. Response: [`Response::Cqes`].
    PollCq {
        /// QP whose CQ to poll.
        qpn: u32,
        /// At most this many.
        max: u32,
    },
    /// Destroy a QP (and its CQ); its rings are freed. Response: `Ok`.
    DestroyQp {
        /// QP.
        qpn: u32,
    },
    /// Deregister an MR. Response: `Ok`.
    DeregMr {
        /// The MR's lkey.
        lkey: u32,
    },
}

/// Most work requests one [`RdmaRequest::PostSendBatch`] carries (their JSON stays well
/// inside [`MAX_MESSAGE`]).
pub const MAX_POST_BATCH: usize = 256;

/// One work request of [`RdmaRequest::PostSendBatch`] (the fields of
/// [`RdmaRequest::PostSend`] but the QP).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaSendWr {
    /// "write", "read", "send", "flush" or "atomic_write" (the last two: IBTA 1.5, no local
    /// buffer: `lkey` and `len` of the local side are unused, a FLUSH's length is `len`).
    pub opcode: String,
    /// Local address.
    pub local_addr: u64,
    /// lkey of the local MR.
    pub lkey: u32,
    /// Length.
    pub len: u32,
    /// Remote address (write/read).
    pub remote_addr: u64,
    /// rkey (write/read).
    pub rkey: u32,
    /// Caller's id, echoed in the completion.
    pub wr_id: u64,
    /// "atomic_write": the 8-byte value written (absent means 0).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub value: u64,
    /// "flush": selectivity level in bits 7:4 (0 the range, 1 the whole MR) and placement
    /// type in bits 3:0 (1 global visibility, 2 persistence, 3 both); absent means 0.
    #[serde(default, skip_serializing_if = "is_zero_u8")]
    pub flush: u8,
}

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

fn is_zero_u8(v: &u8) -> bool {
    *v == 0
}

/// A response from snic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "r", rename_all = "snake_case")]
pub enum Response {
    /// Done.
    Ok,
    /// Refused; nothing changed.
    Error {
        /// Stable machine-readable code (for example "bad_request", "no_memory", "no_queue").
        code: String,
        /// Human-readable reason.
        message: String,
    },
    /// Answer to `Hello`.
    Welcome {
        /// This client's id.
        client: u32,
        /// Protocol version.
        version: u32,
        /// DMA worker threads (one kick eventfd each).
        workers: u32,
        /// Compute worker threads serving the kernel slots (one kick eventfd each, after the
        /// DMA workers').
        compute_workers: u32,
        /// Queue ids.
        max_queues: u32,
        /// Channels per direction.
        channels_per_dir: u32,
        /// Device memory regions.
        device: Vec<DeviceRegion>,
        /// Whether device memory got huge pages.
        huge_pages: bool,
    },
    /// Answer to `RegisterHost`.
    Registered {
        /// IOVA of the first byte.
        iova: u64,
    },
    /// Answer to `AllocDevice`.
    Allocated {
        /// Device address (carries the device prefix).
        addr: u64,
    },
    /// Answer to `AddQueue`.
    Queue {
        /// The queue id.
        qid: u16,
        /// The worker serving it (whose kick eventfd to use).
        worker: u32,
    },
    /// Answer to `SetChannel`.
    Channel {
        /// The worker serving it.
        worker: u32,
    },
    /// Answer to `Stats`.
    Stats {
        /// The counters document.
        stats: serde_json::Value,
    },
    /// Answer to `Rdma(RegMr)`.
    Mr {
        /// lkey.
        lkey: u32,
        /// rkey.
        rkey: u32,
    },
    /// Answer to `Rdma(CreateQp)`.
    Qp {
        /// QP number.
        qpn: u32,
        /// Where the SQ ring landed.
        sq_addr: u64,
        /// Where the RQ ring landed.
        rq_addr: u64,
    },
    /// Answer to `Rdma(PollCq)`.
    Cqes {
        /// Completions, oldest first.
        cqes: Vec<RdmaCqe>,
    },
}

/// One READ of a chained command: `len` bytes at the peer's `remote_addr` (under `rkey`)
/// into `local_addr` (under `lkey`, an MR of this client).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainReadMsg {
    /// Peer address.
    pub remote_addr: u64,
    /// Peer's rkey.
    pub rkey: u32,
    /// Local address.
    pub local_addr: u64,
    /// lkey of the local MR.
    pub lkey: u32,
    /// Bytes.
    pub len: u32,
}

/// The WRITE of a chained command: `len` local bytes at `local_addr` (under `lkey`) to the
/// peer's `remote_addr` (under `rkey`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainWriteMsg {
    /// Local address (the kernel's output).
    pub local_addr: u64,
    /// lkey of the local MR.
    pub lkey: u32,
    /// Bytes.
    pub len: u32,
    /// Peer address.
    pub remote_addr: u64,
    /// Peer's rkey.
    pub rkey: u32,
}

/// A lookaside-kernel command in a setup message (the FIFO's [`snic_compute::KernelCmd`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelCmdMsg {
    /// Caller's workload id.
    pub workload: u32,
    /// Kernel id.
    pub kernel: u32,
    /// Address arguments: (address, length), at most 8.
    pub addrs: Vec<(u64, u64)>,
    /// Scalar arguments, at most 8.
    pub scalars: Vec<u64>,
}

impl KernelCmdMsg {
    /// The message of `cmd`.
    pub fn from_cmd(cmd: &snic_compute::KernelCmd) -> KernelCmdMsg {
        KernelCmdMsg {
            workload: cmd.workload,
            kernel: cmd.kernel,
            addrs: cmd.addr_args().iter().map(|a| (a.addr, a.len)).collect(),
            scalars: cmd.scalar_args().to_vec(),
        }
    }

    /// The command, or `None` with more than 8 address or scalar arguments.
    pub fn to_cmd(&self) -> Option<snic_compute::KernelCmd> {
        let mut c = snic_compute::KernelCmd::new(self.kernel, self.workload);
        for &(addr, len) in &self.addrs {
            if !c.try_addr(addr, len) {
                return None;
            }
        }
        for &v in &self.scalars {
            if !c.try_scalar(v) {
                return None;
            }
        }
        Some(c)
    }
}

/// [`RdmaCqe::opcode`] of a chained command's completion.
pub const WC_CHAIN: u32 = 64;

/// What a chained command did, in its completion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainReport {
    /// "done", "read_failed", "kernel_failed", "post_failed" or "write_failed".
    pub outcome: String,
    /// The kernel's status code (`snic_compute::status`; 0 when it did not run or succeeded).
    pub kernel_status: u32,
    /// The kernel's result.
    pub result: u64,
    /// Bytes fetched.
    pub fetched: u64,
    /// Bytes written back.
    pub written: u64,
    /// Start to the last READ completion, ns.
    pub fetch_ns: u64,
    /// Kernel run time, ns.
    pub kernel_ns: u64,
    /// WRITE post to completion, ns.
    pub write_ns: u64,
}

/// One RDMA completion, as [`Response::Cqes`] carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaCqe {
    /// The work request's `wr_id`.
    pub wr_id: u64,
    /// Status code, numbered as verbs' `ibv_wc_status` (0 = success, 4 local protection
    /// error, 5 flushed, 10 remote access error, 12 retry exceeded, ...).
    pub status: u32,
    /// Status in words.
    pub status_name: String,
    /// Opcode, numbered as verbs' `ibv_wc_opcode` (0 send, 1 write, 2 read, 3 compare-swap,
    /// 4 fetch-add, 128 receive, 129 receive of a write with immediate).
    pub opcode: u32,
    /// Bytes (receives: bytes received; reads: bytes read).
    pub byte_len: u32,
    /// Immediate data, when the message carried some.
    pub imm: Option<u32>,
    /// For a chained command's completion ([`WC_CHAIN`]): what it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<ChainReport>,
}

/// A device memory region, as `Welcome` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceRegion {
    /// On-chip or on-board.
    pub kind: DevKind,
    /// First device address.
    pub base: u64,
    /// Bytes.
    pub size: u64,
}

impl Request {
    /// Encode as one message.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("requests always serialize")
    }
    /// Decode one message.
    pub fn from_bytes(b: &[u8]) -> Result<Request, serde_json::Error> {
        serde_json::from_slice(b)
    }
}

impl Response {
    /// Encode as one message.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("responses always serialize")
    }
    /// Decode one message.
    pub fn from_bytes(b: &[u8]) -> Result<Response, serde_json::Error> {
        serde_json::from_slice(b)
    }
    /// An error response.
    pub fn error(code: &str, message: impl Into<String>) -> Response {
        Response::Error { code: code.to_string(), message: message.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let reqs = [
            Request::Hello { name: "t".into(), version: 1 },
            Request::AllocDevice { kind: DevKind::OnChip, size: 4096, align: 64 },
            Request::Rdma(RdmaRequest::PollCq { qpn: 5, max: 4 }),
            Request::KernelIrq { kernel: 6 },
        ];
        for r in reqs {
            assert_eq!(Request::from_bytes(&r.to_bytes()).unwrap(), r);
        }
        let j = String::from_utf8(
            Request::AllocDevice { kind: DevKind::OnBoard, size: 1, align: 1 }.to_bytes(),
        )
        .unwrap();
        assert!(j.contains(r#""op":"alloc_device""#) && j.contains(r#""kind":"on-board""#), "{j}");
        assert!(Request::from_bytes(b"{\"op\":\"nope\"}").is_err());
    }

    #[test]
    fn a_full_batch_fits_one_message() {
        let wr = RdmaSendWr {
            opcode: "write".into(),
            local_addr: u64::MAX,
            lkey: u32::MAX,
            len: u32::MAX,
            remote_addr: u64::MAX,
            rkey: u32::MAX,
            wr_id: u64::MAX,
            value: u64::MAX,
            flush: u8::MAX,
        };
        let r = Request::Rdma(RdmaRequest::PostSendBatch {
            qpn: u32::MAX,
            wrs: vec![wr; MAX_POST_BATCH],
        });
        let b = r.to_bytes();
        assert!(b.len() < MAX_MESSAGE, "{} bytes", b.len());
        assert_eq!(Request::from_bytes(&b).unwrap(), r);
    }
}
