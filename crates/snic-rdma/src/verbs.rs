//! The verbs-style objects and values of the API: access flags, scatter-gather lists, work
//! requests, completions, QP attributes and states, and the errors verbs return.

use std::fmt;
use std::net::IpAddr;

use snic_dma::{MemError, MemKind};

/// MR / QP access flags (IBTA `IBV_ACCESS_*`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub struct Access(pub u8);

impl Access {
    /// No access beyond local read.
    pub const NONE: Access = Access(0);
    /// The NIC may write local memory (needed by RECV and READ/atomic destinations).
    pub const LOCAL_WRITE: Access = Access(1);
    /// Remote peers may WRITE.
    pub const REMOTE_WRITE: Access = Access(2);
    /// Remote peers may READ.
    pub const REMOTE_READ: Access = Access(4);
    /// Remote peers may run atomics.
    pub const REMOTE_ATOMIC: Access = Access(8);
    /// Remote peers may FLUSH with placement type "global visibility" (IBTA 1.5,
    /// `IBV_ACCESS_FLUSH_GLOBAL`).
    pub const FLUSH_GLOBAL: Access = Access(16);
    /// Remote peers may FLUSH with placement type "persistence" (IBTA 1.5,
    /// `IBV_ACCESS_FLUSH_PERSISTENT`).
    pub const FLUSH_PERSISTENT: Access = Access(32);
    /// Everything.
    pub const ALL: Access = Access(63);

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
    /// Union.
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        self.union(rhs)
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Access::LOCAL_WRITE, "LOCAL_WRITE"),
            (Access::REMOTE_WRITE, "REMOTE_WRITE"),
            (Access::REMOTE_READ, "REMOTE_READ"),
            (Access::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
            (Access::FLUSH_GLOBAL, "FLUSH_GLOBAL"),
            (Access::FLUSH_PERSISTENT, "FLUSH_PERSISTENT"),
        ];
        let set: Vec<&str> = names.iter().filter(|(a, _)| self.contains(*a)).map(|x| x.1).collect();
        if set.is_empty() { write!(f, "NONE") } else { write!(f, "{}", set.join("|")) }
    }
}

/// Protection domain handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Pd(pub u32);

/// Completion queue handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct CqId(pub u32);

/// Shared receive queue handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SrqId(pub u32);

/// A registered memory region, as `reg_mr` returns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MrInfo {
    /// Key for local use (in SGEs).
    pub lkey: u32,
    /// Key remote peers put in RETH / AtomicETH.
    pub rkey: u32,
    /// First address (engine address space; device addresses carry the prefix).
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Access flags.
    pub access: Access,
    /// Owning PD.
    pub pd: Pd,
}

/// One scatter-gather element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Sge {
    /// Address in the engine address space.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Local key of the MR that holds it.
    pub lkey: u32,
}

/// Most SGEs in one work request.
pub const MAX_SGE: usize = 4;

/// A scatter-gather list of up to [`MAX_SGE`] elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "Vec<Sge>", into = "Vec<Sge>")]
pub struct SgList {
    sges: [Sge; MAX_SGE],
    n: u8,
}

impl TryFrom<Vec<Sge>> for SgList {
    type Error = VerbsError;
    fn try_from(v: Vec<Sge>) -> Result<SgList, VerbsError> {
        SgList::new(&v)
    }
}

impl From<SgList> for Vec<Sge> {
    fn from(l: SgList) -> Vec<Sge> {
        l.as_slice().to_vec()
    }
}

impl SgList {
    /// An empty list (zero-length SEND/WRITE).
    pub const fn empty() -> SgList {
        SgList { sges: [Sge { addr: 0, len: 0, lkey: 0 }; MAX_SGE], n: 0 }
    }
    /// A list of one element.
    pub const fn one(sge: Sge) -> SgList {
        let mut l = SgList::empty();
        l.sges[0] = sge;
        l.n = 1;
        l
    }
    /// A list from a slice; `Err(TooManySge)` past [`MAX_SGE`].
    pub fn new(sges: &[Sge]) -> Result<SgList, VerbsError> {
        if sges.len() > MAX_SGE {
            return Err(VerbsError::TooManySge { got: sges.len() });
        }
        let mut l = SgList::empty();
        l.sges[..sges.len()].copy_from_slice(sges);
        l.n = sges.len() as u8;
        Ok(l)
    }
    /// The elements.
    pub fn as_slice(&self) -> &[Sge] {
        &self.sges[..usize::from(self.n).min(MAX_SGE)]
    }
    /// Sum of the lengths.
    pub fn total_len(&self) -> u64 {
        self.as_slice().iter().map(|s| u64::from(s.len)).sum()
    }
}

/// Remote address and key of a WRITE, READ or atomic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Remote {
    /// Remote virtual address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// What a FLUSH covers (the FETH selectivity level, IBTA 1.5 / `ibv_wr_flush`'s `level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum FlushLevel {
    /// The range `[remote.addr, remote.addr + len)` (`IBV_FLUSH_RANGE`, selectivity 0).
    Range,
    /// The whole memory region of `remote.rkey`; the address and length are not checked
    /// (`IBV_FLUSH_MR`, selectivity 1).
    Region,
}

impl FlushLevel {
    /// The FETH selectivity level.
    pub const fn selectivity(self) -> u8 {
        match self {
            FlushLevel::Range => 0,
            FlushLevel::Region => 1,
        }
    }
    /// The level of a FETH selectivity value; `None` for the reserved 2 and 3.
    pub const fn from_selectivity(v: u8) -> Option<FlushLevel> {
        match v {
            0 => Some(FlushLevel::Range),
            1 => Some(FlushLevel::Region),
            _ => None,
        }
    }
}

/// FLUSH placement type bit: make the data globally visible (`IBV_FLUSH_GLOBAL`).
pub const FLUSH_GLOBAL: u8 = snic_wire::roce::ext::FLUSH_GLOBAL_VISIBILITY;
/// FLUSH placement type bit: make the data persistent (`IBV_FLUSH_PERSISTENT`).
pub const FLUSH_PERSISTENT: u8 = snic_wire::roce::ext::FLUSH_PERSISTENCE;

/// The operation of a send-queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum WrOp {
    /// SEND.
    Send,
    /// SEND with immediate data.
    SendImm {
        /// Immediate data (delivered in the receiver's CQE).
        imm: u32,
    },
    /// SEND with invalidate: the receiver invalidates `rkey` and reports it in its CQE.
    SendInv {
        /// The rkey to invalidate at the receiver.
        rkey: u32,
    },
    /// RDMA WRITE.
    Write {
        /// Target.
        remote: Remote,
    },
    /// RDMA WRITE with immediate (consumes a RECV at the receiver).
    WriteImm {
        /// Target.
        remote: Remote,
        /// Immediate data.
        imm: u32,
    },
    /// RDMA READ into the local SG list.
    Read {
        /// Source.
        remote: Remote,
    },
    /// 8-byte compare and swap; the original value lands in the local SGE (8 bytes).
    CmpSwap {
        /// Target (8-byte aligned).
        remote: Remote,
        /// Compare value.
        compare: u64,
        /// Swap value.
        swap: u64,
    },
    /// 8-byte fetch and add; the original value lands in the local SGE (8 bytes).
    FetchAdd {
        /// Target (8-byte aligned).
        remote: Remote,
        /// Addend.
        add: u64,
    },
    /// RC FLUSH (IBTA 1.5, opcode 0x1C): once every earlier WRITE of this QP is placed at the
    /// responder, make the range (or the whole MR) globally visible and/or persistent. Takes
    /// no local buffers (the SG list must be empty). Completes with [`WcOpcode::Flush`].
    Flush {
        /// Start of the range and the MR's rkey.
        remote: Remote,
        /// Bytes of the range (ignored for [`FlushLevel::Region`]).
        len: u32,
        /// Range or whole region.
        level: FlushLevel,
        /// Placement type: [`FLUSH_GLOBAL`], [`FLUSH_PERSISTENT`] or both. The target MR needs
        /// the matching [`Access::FLUSH_GLOBAL`] / [`Access::FLUSH_PERSISTENT`].
        placement: u8,
    },
    /// RC ATOMIC WRITE (IBTA 1.5, opcode 0x1D): write 8 bytes at an 8-byte aligned remote
    /// address as one atomic store. The value travels in the WQE (like `ibv_wr_atomic_write`'s
    /// 8 bytes); the SG list must be empty. The responder writes `value`'s bytes in this
    /// engine's memory order (little-endian), so its `read_u64` gives `value` back. Completes
    /// with [`WcOpcode::AtomicWrite`].
    AtomicWrite {
        /// Target (8-byte aligned; needs REMOTE_WRITE).
        remote: Remote,
        /// The value written.
        value: u64,
    },
}

impl WrOp {
    /// The completion opcode of this operation.
    pub const fn wc_opcode(self) -> WcOpcode {
        match self {
            WrOp::Send | WrOp::SendImm { .. } | WrOp::SendInv { .. } => WcOpcode::Send,
            WrOp::Write { .. } | WrOp::WriteImm { .. } => WcOpcode::RdmaWrite,
            WrOp::Read { .. } => WcOpcode::RdmaRead,
            WrOp::CmpSwap { .. } => WcOpcode::CompSwap,
            WrOp::FetchAdd { .. } => WcOpcode::FetchAdd,
            WrOp::Flush { .. } => WcOpcode::Flush,
            WrOp::AtomicWrite { .. } => WcOpcode::AtomicWrite,
        }
    }
    /// READ, atomic, FLUSH or ATOMIC WRITE: answered by a response of their own (not a plain
    /// ACK), so each needs a responder resource and counts against `max_rd_atomic` (IBTA 1.5
    /// counts FLUSH and ATOMIC WRITE with the READs and atomics).
    pub const fn is_read_or_atomic(self) -> bool {
        matches!(
            self,
            WrOp::Read { .. }
                | WrOp::CmpSwap { .. }
                | WrOp::FetchAdd { .. }
                | WrOp::Flush { .. }
                | WrOp::AtomicWrite { .. }
        )
    }
    /// FLUSH or ATOMIC WRITE: no local buffers, answered by a zero-length READ response.
    pub const fn is_flush_or_atomic_write(self) -> bool {
        matches!(self, WrOp::Flush { .. } | WrOp::AtomicWrite { .. })
    }
    /// CmpSwap or FetchAdd.
    pub const fn is_atomic(self) -> bool {
        matches!(self, WrOp::CmpSwap { .. } | WrOp::FetchAdd { .. })
    }
    /// SEND (any kind) or RDMA WRITE with immediate: consumes a receive WQE at the responder,
    /// so it needs an end-to-end credit (IBTA 9.7.7.2).
    pub const fn consumes_recv(self) -> bool {
        matches!(
            self,
            WrOp::Send | WrOp::SendImm { .. } | WrOp::SendInv { .. } | WrOp::WriteImm { .. }
        )
    }
}

/// A send-queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SendWr {
    /// Caller's id, returned in the CQE.
    pub wr_id: u64,
    /// The operation.
    pub op: WrOp,
    /// Local buffers (gather for SEND/WRITE, scatter for READ/atomic results).
    pub sgl: SgList,
    /// Generate a CQE on success (errors always complete).
    pub signaled: bool,
    /// Set the solicited-event bit on the last packet.
    pub solicited: bool,
    /// Wait for earlier READ/atomics to complete before starting.
    pub fence: bool,
}

impl SendWr {
    /// A signaled work request.
    pub const fn new(wr_id: u64, op: WrOp, sgl: SgList) -> SendWr {
        SendWr { wr_id, op, sgl, signaled: true, solicited: false, fence: false }
    }
    /// With `signaled` set as given.
    pub const fn signaled(mut self, yes: bool) -> SendWr {
        self.signaled = yes;
        self
    }
    /// With `fence` set as given.
    pub const fn fence(mut self, yes: bool) -> SendWr {
        self.fence = yes;
        self
    }
    /// With `solicited` set as given.
    pub const fn solicited(mut self, yes: bool) -> SendWr {
        self.solicited = yes;
        self
    }
}

/// A receive-queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct RecvWr {
    /// Caller's id, returned in the CQE.
    pub wr_id: u64,
    /// Where an incoming SEND's payload is scattered.
    pub sgl: SgList,
}

/// Completion status (IBTA / `ibv_wc_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum WcStatus {
    /// Completed successfully.
    Success,
    /// Local length error (a SEND larger than the RECV buffer, at the receiver).
    LocLenErr,
    /// Local QP operation error (an internal inconsistency, e.g. a malformed WQE).
    LocQpOpErr,
    /// Local protection error (an SGE's lkey, bounds or PD is wrong).
    LocProtErr,
    /// Flushed: the QP entered the error state before this WQE completed.
    WrFlushErr,
    /// Bad response (an unexpected opcode or length in a response).
    BadRespErr,
    /// Local access error (the receiver's side of a remote access violation, e.g. a WRITE
    /// with immediate or SEND with invalidate that fails locally).
    LocAccessErr,
    /// Remote invalid request (NAK: invalid request).
    RemInvReqErr,
    /// Remote access error (NAK: remote access error).
    RemAccessErr,
    /// Remote operational error (NAK: remote operational error).
    RemOpErr,
    /// Transport retry counter exceeded.
    RetryExcErr,
    /// RNR retry counter exceeded.
    RnrRetryExcErr,
    /// Fatal error.
    FatalErr,
}

impl WcStatus {
    /// The `ibv_wc_status_str` spelling.
    pub const fn name(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::FatalErr => "fatal error",
        }
    }
}

/// Completion opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum WcOpcode {
    /// A SEND (any kind) completed at the requester.
    Send,
    /// A WRITE (any kind) completed at the requester.
    RdmaWrite,
    /// A READ completed.
    RdmaRead,
    /// A compare-and-swap completed.
    CompSwap,
    /// A fetch-and-add completed.
    FetchAdd,
    /// A FLUSH completed (`IBV_WC_FLUSH`).
    Flush,
    /// An ATOMIC WRITE completed (`IBV_WC_ATOMIC_WRITE`).
    AtomicWrite,
    /// A RECV consumed by a SEND.
    Recv,
    /// A RECV consumed by a WRITE with immediate.
    RecvRdmaWithImm,
}

/// A completion queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Cqe {
    /// The work request's id.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Bytes received (receive side) or transferred (READ).
    pub byte_len: u32,
    /// The local QP.
    pub qpn: u32,
    /// The remote QP (receive side).
    pub src_qp: u32,
    /// Immediate data, when the sender gave some.
    pub imm: Option<u32>,
    /// The rkey a SEND with invalidate invalidated.
    pub invalidated_rkey: Option<u32>,
}

/// QP states (IBTA 10.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum QpState {
    /// Reset.
    Reset,
    /// Initialized: may post RECVs.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drain.
    Sqd,
    /// Send queue error.
    Sqe,
    /// Error: everything is flushed.
    Err,
}

/// Path MTU.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Mtu {
    /// 256 bytes.
    M256,
    /// 512 bytes.
    M512,
    /// 1024 bytes.
    M1024,
    /// 2048 bytes.
    M2048,
    /// 4096 bytes.
    M4096,
}

impl Mtu {
    /// Payload bytes per packet.
    pub const fn bytes(self) -> u32 {
        match self {
            Mtu::M256 => 256,
            Mtu::M512 => 512,
            Mtu::M1024 => 1024,
            Mtu::M2048 => 2048,
            Mtu::M4096 => 4096,
        }
    }
    /// The MTU of exactly `n` bytes.
    pub const fn from_bytes(n: u32) -> Option<Mtu> {
        match n {
            256 => Some(Mtu::M256),
            512 => Some(Mtu::M512),
            1024 => Some(Mtu::M1024),
            2048 => Some(Mtu::M2048),
            4096 => Some(Mtu::M4096),
            _ => None,
        }
    }
}

/// Which attributes a `modify_qp` sets (`IBV_QP_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AttrMask(pub u32);

impl AttrMask {
    /// `state`.
    pub const STATE: AttrMask = AttrMask(1);
    /// `access`.
    pub const ACCESS: AttrMask = AttrMask(1 << 1);
    /// `path_mtu`.
    pub const PATH_MTU: AttrMask = AttrMask(1 << 2);
    /// `dest_qpn`.
    pub const DEST_QPN: AttrMask = AttrMask(1 << 3);
    /// `rq_psn`.
    pub const RQ_PSN: AttrMask = AttrMask(1 << 4);
    /// `sq_psn`.
    pub const SQ_PSN: AttrMask = AttrMask(1 << 5);
    /// `remote` (the address vector).
    pub const AV: AttrMask = AttrMask(1 << 6);
    /// `timeout`.
    pub const TIMEOUT: AttrMask = AttrMask(1 << 7);
    /// `retry_cnt`.
    pub const RETRY_CNT: AttrMask = AttrMask(1 << 8);
    /// `rnr_retry`.
    pub const RNR_RETRY: AttrMask = AttrMask(1 << 9);
    /// `min_rnr_timer`.
    pub const MIN_RNR_TIMER: AttrMask = AttrMask(1 << 10);
    /// `max_rd_atomic`.
    pub const MAX_RD_ATOMIC: AttrMask = AttrMask(1 << 11);
    /// `max_dest_rd_atomic`.
    pub const MAX_DEST_RD_ATOMIC: AttrMask = AttrMask(1 << 12);

    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: AttrMask) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for AttrMask {
    type Output = AttrMask;
    fn bitor(self, rhs: AttrMask) -> AttrMask {
        AttrMask(self.0 | rhs.0)
    }
}

/// QP attributes (the ones that matter for RC over RoCEv2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QpAttr {
    /// Target state of a `modify_qp`, current state of a `query_qp`.
    pub state: QpState,
    /// Remote access the QP allows (REMOTE_WRITE / READ / ATOMIC).
    pub access: Access,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Remote QP number.
    pub dest_qpn: u32,
    /// Expected PSN of the next incoming request (responder).
    pub rq_psn: u32,
    /// PSN of the next request this QP sends (requester).
    pub sq_psn: u32,
    /// Remote GID, as an IP address (RoCEv2).
    pub remote: Option<IpAddr>,
    /// Local ACK timeout: 4.096 us x 2^timeout; 0 means infinite.
    pub timeout: u8,
    /// Transport retries (0..=7).
    pub retry_cnt: u8,
    /// RNR retries (0..=7; 7 means infinite).
    pub rnr_retry: u8,
    /// RNR NAK timer code this QP advertises (0..=31, IBTA table 45).
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomic requests this QP may have as requester.
    pub max_rd_atomic: u8,
    /// READ/atomic requests this QP accepts as responder (saved responder resources).
    pub max_dest_rd_atomic: u8,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            state: QpState::Reset,
            access: Access::NONE,
            path_mtu: Mtu::M1024,
            dest_qpn: 0,
            rq_psn: 0,
            sq_psn: 0,
            remote: None,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
        }
    }
}

/// What `create_qp` needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QpInit {
    /// Protection domain.
    pub pd: Pd,
    /// CQ of send completions.
    pub send_cq: CqId,
    /// CQ of receive completions.
    pub recv_cq: CqId,
    /// Shared receive queue instead of the QP's own RQ.
    pub srq: Option<SrqId>,
    /// Send queue depth (rounded up to a power of two).
    pub max_send_wr: u32,
    /// Receive queue depth (rounded up to a power of two; ignored with an SRQ).
    pub max_recv_wr: u32,
    /// Where the SQ and RQ rings live: host memory or device memory (on-chip / on-board).
    #[serde(with = "crate::export::mem_kind")]
    pub placement: MemKind,
    /// Every send WQE generates a CQE, whatever its `signaled` flag.
    pub sq_sig_all: bool,
}

/// Why a verb failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerbsError {
    /// No such PD.
    NoSuchPd(u32),
    /// No such CQ.
    NoSuchCq(u32),
    /// No such QP.
    NoSuchQp(u32),
    /// No such MR (by lkey).
    NoSuchMr(u32),
    /// No such SRQ.
    NoSuchSrq(u32),
    /// The object is still referenced (a PD with MRs/QPs, a CQ with QPs).
    InUse,
    /// A state transition the QP state machine does not allow.
    InvalidTransition {
        /// Current state.
        from: QpState,
        /// Asked-for state.
        to: QpState,
    },
    /// An attribute is missing, not allowed in this transition, or out of range.
    InvalidAttr(&'static str),
    /// The QP's state does not allow this verb (e.g. `post_send` before RTS).
    BadState(QpState),
    /// The work queue is full.
    QueueFull,
    /// More than [`MAX_SGE`] elements.
    TooManySge {
        /// How many were given.
        got: usize,
    },
    /// A bad work request (e.g. an atomic whose SGE is not 8 bytes).
    InvalidWr(&'static str),
    /// A memory error (registration outside mapped memory, allocation failure).
    Mem(MemError),
    /// A limit was reached (QPs, CQs, MRs).
    Exhausted(&'static str),
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            VerbsError::NoSuchPd(x) => write!(f, "no PD {x}"),
            VerbsError::NoSuchCq(x) => write!(f, "no CQ {x}"),
            VerbsError::NoSuchQp(x) => write!(f, "no QP {x:#x}"),
            VerbsError::NoSuchMr(x) => write!(f, "no MR with key {x:#x}"),
            VerbsError::NoSuchSrq(x) => write!(f, "no SRQ {x}"),
            VerbsError::InUse => write!(f, "object still in use"),
            VerbsError::InvalidTransition { from, to } => {
                write!(f, "QP transition {from:?} -> {to:?} is not allowed")
            }
            VerbsError::InvalidAttr(a) => write!(f, "invalid or missing QP attribute: {a}"),
            VerbsError::BadState(s) => write!(f, "not allowed in QP state {s:?}"),
            VerbsError::QueueFull => write!(f, "work queue full"),
            VerbsError::TooManySge { got } => write!(f, "{got} SGEs (at most {MAX_SGE})"),
            VerbsError::InvalidWr(w) => write!(f, "invalid work request: {w}"),
            VerbsError::Mem(e) => write!(f, "{e}"),
            VerbsError::Exhausted(w) => write!(f, "out of {w}"),
        }
    }
}

impl std::error::Error for VerbsError {}

impl From<MemError> for VerbsError {
    fn from(e: MemError) -> Self {
        VerbsError::Mem(e)
    }
}
