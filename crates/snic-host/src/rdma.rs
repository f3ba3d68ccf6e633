//! RDMA API hooks: memory regions and RC queue pairs of snic's RDMA engine, with each QP's
//! rings placed where the application asks: in one of its registered host buffers, in
//! on-chip or in on-board device memory.
//!
//! snic must run with `--rdma ADDR` (otherwise every call here fails with
//! [`HostError::Refused`] code `rdma_disabled`). Peers are QPs on other snics at the same RoCE
//! port, or QPs on this snic (`remote_ip` = this snic's RDMA address).
//!
//! Honest scope of this first cut: the verbs (post, poll) travel over the setup socket, so
//! every call is one request/response round trip on the control path. The WQEs still live in
//! the placed rings (host or device memory, see [`RdmaQp::sq_addr`]) and the engine fetches
//! them from there; data moves between MRs and the network without the socket.
//!
//! ```no_run
//! # fn main() -> snic_host::Result<()> {
//! use snic_host::{Device, Placement, RdmaSge, rdma_access};
//! let dev = Device::connect(std::path::Path::new("/tmp/snic.sock"), "app")?;
//! let data = dev.alloc_host(1 << 16)?;
//! let rings = dev.alloc_host(1 << 16)?;
//! let (lkey, _) = dev.rdma_reg_mr(data.iova(), 1 << 16, rdma_access::LOCAL_WRITE)?;
//! let a = dev.rdma_create_qp(Placement::Host(&rings), 64)?;
//! let b = dev.rdma_create_qp(Placement::OnChip, 64)?;
//! let ip = "127.0.0.1".parse().expect("an address");
//! dev.rdma_connect(a.qpn, b.qpn, ip, 4096)?;
//! dev.rdma_connect(b.qpn, a.qpn, ip, 4096)?;
//! dev.rdma_post_recv(b.qpn, 1, RdmaSge { addr: data.iova() + 4096, lkey, len: 64 })?;
//! dev.rdma_post_send(a.qpn, 2, RdmaSge { addr: data.iova(), lkey, len: 64 })?;
//! let done = dev.rdma_wait_cq(a.qpn, 1, std::time::Duration::from_secs(5))?;
//! assert_eq!(done[0].status, snic_host::WC_SUCCESS);
//! # Ok(()) }
//! ```

use std::net::IpAddr;
use std::time::{Duration, Instant};

use snic_compute::KernelCmd;
use snic_hostif::proto::{
    ChainReadMsg, ChainWriteMsg, KernelCmdMsg, RdmaRequest, RdmaSendWr, Request, Response,
};

use crate::conn::{HostBuf, unexpected};
use crate::device::Device;
use crate::error::{HostError, Result};

pub use snic_hostif::proto::{ChainReport, RdmaCqe, WC_CHAIN};

/// MR access bits ([`Device::rdma_reg_mr`]); remote write or atomic needs local write too.
pub mod rdma_access {
    /// The NIC may write the MR for local operations (receives, READ results).
    pub const LOCAL_WRITE: u32 = 1;
    /// Peers may WRITE into the MR.
    pub const REMOTE_WRITE: u32 = 2;
    /// Peers may READ the MR.
    pub const REMOTE_READ: u32 = 4;
    /// Peers may run atomics on the MR.
    pub const REMOTE_ATOMIC: u32 = 8;
    /// Peers may FLUSH the MR for global visibility (IBTA 1.5).
    pub const FLUSH_GLOBAL: u32 = 16;
    /// Peers may FLUSH the MR for persistence (IBTA 1.5).
    pub const FLUSH_PERSISTENT: u32 = 32;
    /// All of the above.
    pub const ALL: u32 = 63;
}

/// [`RdmaCqe::status`] of a successful completion (the other values are numbered as verbs'
/// `ibv_wc_status`).
pub const WC_SUCCESS: u32 = 0;
/// [`RdmaCqe::opcode`] of a completed SEND.
pub const WC_SEND: u32 = 0;
/// [`RdmaCqe::opcode`] of a completed RDMA WRITE.
pub const WC_RDMA_WRITE: u32 = 1;
/// [`RdmaCqe::opcode`] of a completed RDMA READ.
pub const WC_RDMA_READ: u32 = 2;
/// [`RdmaCqe::opcode`] of a completed FLUSH (`IBV_WC_FLUSH`).
pub const WC_FLUSH: u32 = 8;
/// [`RdmaCqe::opcode`] of a completed ATOMIC WRITE (`IBV_WC_ATOMIC_WRITE`).
pub const WC_ATOMIC_WRITE: u32 = 9;
/// [`RdmaCqe::opcode`] of a completed receive.
pub const WC_RECV: u32 = 128;

/// How long [`Device::rdma_wait_cq`] sleeps between polls.
const WAIT_STEP: Duration = Duration::from_micros(200);

/// Where a QP's send and receive rings go.
#[derive(Debug, Clone, Copy)]
pub enum Placement<'a> {
    /// In this registered host buffer: snic makes the whole buffer a ring pool and carves the
    /// rings from it (keep no data of your own in it while the QP lives).
    Host(&'a HostBuf),
    /// In on-chip device memory.
    OnChip,
    /// In on-board device memory.
    OnBoard,
}

impl Placement<'_> {
    /// The protocol's name of the placement.
    pub fn name(&self) -> &'static str {
        match self {
            Placement::Host(_) => "host",
            Placement::OnChip => "on-chip",
            Placement::OnBoard => "on-board",
        }
    }
}

/// A QP snic created ([`Device::rdma_create_qp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaQp {
    /// QP number (what the peer connects to).
    pub qpn: u32,
    /// Where the send ring landed (a host IOVA or a device address).
    pub sq_addr: u64,
    /// Where the receive ring landed.
    pub rq_addr: u64,
}

/// One local buffer of a work request: `len` bytes at `addr` (host IOVA or device address)
/// inside the MR whose lkey is `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RdmaSge {
    /// First byte.
    pub addr: u64,
    /// lkey of the MR holding it.
    pub lkey: u32,
    /// Bytes.
    pub len: u32,
}

/// The operation of a send work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmaOp {
    /// RDMA WRITE of the local buffer to `remote_addr` under `rkey`.
    Write {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// RDMA READ from `remote_addr` under `rkey` into the local buffer.
    Read {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// SEND of the local buffer (consumes a receive posted on the peer QP).
    Send,
    /// RC FLUSH (IBTA 1.5): once every earlier WRITE of the QP is placed at the peer, make
    /// `len` bytes at `remote_addr` (or, with `whole_mr`, all of the MR of `rkey`) globally
    /// visible and/or persistent. No local buffer (give an empty one).
    Flush {
        /// Remote address.
        remote_addr: u64,
        /// Remote key; its MR needs [`rdma_access::FLUSH_GLOBAL`] / `FLUSH_PERSISTENT` as
        /// `placement` asks.
        rkey: u32,
        /// Bytes of the range.
        len: u32,
        /// Flush the whole MR instead of the range.
        whole_mr: bool,
        /// 1 global visibility, 2 persistence, 3 both.
        placement: u8,
    },
    /// RC ATOMIC WRITE (IBTA 1.5): store `value` at the 8-byte aligned `remote_addr` in one
    /// atomic write (the MR needs remote write). No local buffer (give an empty one).
    AtomicWrite {
        /// Remote address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// The value written (its little-endian bytes land at the peer).
        value: u64,
    },
}

/// Most work requests one [`Device::rdma_post_batch`] posts.
pub const RDMA_MAX_BATCH: usize = snic_hostif::proto::MAX_POST_BATCH;

/// Largest message one work request moves: the engine refuses longer READs and WRITEs
/// (split bigger transfers into several WRs).
pub const RDMA_MAX_MSG: u32 = 1 << 31;

/// One send work request of a batch ([`Device::rdma_post_batch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaWr {
    /// Echoed in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: RdmaOp,
    /// The local buffer.
    pub local: RdmaSge,
}

impl RdmaWr {
    /// An RDMA READ of `local.len` bytes at `remote_addr` (under `rkey`) into `local`.
    pub const fn read(wr_id: u64, local: RdmaSge, remote_addr: u64, rkey: u32) -> RdmaWr {
        RdmaWr { wr_id, op: RdmaOp::Read { remote_addr, rkey }, local }
    }

    /// An RDMA WRITE of `local` to `remote_addr` (under `rkey`).
    pub const fn write(wr_id: u64, local: RdmaSge, remote_addr: u64, rkey: u32) -> RdmaWr {
        RdmaWr { wr_id, op: RdmaOp::Write { remote_addr, rkey }, local }
    }

    fn to_proto(self) -> RdmaSendWr {
        let (mut len, mut value, mut flush) = (self.local.len, 0, 0);
        let (opcode, remote_addr, rkey) = match self.op {
            RdmaOp::Write { remote_addr, rkey } => ("write", remote_addr, rkey),
            RdmaOp::Read { remote_addr, rkey } => ("read", remote_addr, rkey),
            RdmaOp::Send => ("send", 0, 0),
            RdmaOp::Flush { remote_addr, rkey, len: l, whole_mr, placement } => {
                len = l;
                flush = (u8::from(whole_mr) << 4) | (placement & 0x0f);
                ("flush", remote_addr, rkey)
            }
            RdmaOp::AtomicWrite { remote_addr, rkey, value: v } => {
                value = v;
                ("atomic_write", remote_addr, rkey)
            }
        };
        RdmaSendWr {
            opcode: opcode.to_string(),
            local_addr: self.local.addr,
            lkey: self.local.lkey,
            len,
            remote_addr,
            rkey,
            wr_id: self.wr_id,
            value,
            flush,
        }
    }
}

/// One READ of a chained command ([`Device::rdma_chain`]): the peer's `remote_addr` (under
/// `rkey`) into `local`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainRead {
    /// Peer address.
    pub remote_addr: u64,
    /// Peer's rkey.
    pub rkey: u32,
    /// Where the bytes land (usually device memory), in one of this client's MRs.
    pub local: RdmaSge,
}

/// The WRITE that ends a chained command: `local` (the kernel's output) to the peer's
/// `remote_addr` (under `rkey`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainWrite {
    /// The result, in one of this client's MRs.
    pub local: RdmaSge,
    /// Peer address.
    pub remote_addr: u64,
    /// Peer's rkey.
    pub rkey: u32,
}

impl Device {
    fn rdma_call(&self, r: RdmaRequest) -> Result<Response> {
        Ok(self.request(&Request::Rdma(r), &[])?.0)
    }

    fn rdma_ok(&self, r: RdmaRequest) -> Result<()> {
        match self.rdma_call(r)? {
            Response::Ok => Ok(()),
            r => Err(unexpected(&r)),
        }
    }

    /// Register `len` bytes at `addr` (in one of this client's host buffers, by IOVA, or in
    /// one of its device allocations) as an MR with `access` ([`rdma_access`] bits). Returns
    /// `(lkey, rkey)`.
    pub fn rdma_reg_mr(&self, addr: u64, len: u64, access: u32) -> Result<(u32, u32)> {
        match self.rdma_call(RdmaRequest::RegMr { addr, len, access })? {
            Response::Mr { lkey, rkey } => Ok((lkey, rkey)),
            r => Err(unexpected(&r)),
        }
    }

    /// Deregister an MR.
    pub fn rdma_dereg_mr(&self, lkey: u32) -> Result<()> {
        self.rdma_ok(RdmaRequest::DeregMr { lkey })
    }

    /// Create an RC QP with room for `depth` send and `depth` receive WRs (rounded up to a
    /// power of two), its rings in `placement`. It starts in RESET: connect it with
    /// [`Self::rdma_connect`].
    pub fn rdma_create_qp(&self, placement: Placement<'_>, depth: u32) -> Result<RdmaQp> {
        let host_ring = match placement {
            Placement::Host(b) => Some(b.iova()),
            _ => None,
        };
        let req = RdmaRequest::CreateQp {
            placement: placement.name().to_string(),
            host_ring,
            sq_depth: depth,
            rq_depth: depth,
        };
        match self.rdma_call(req)? {
            Response::Qp { qpn, sq_addr, rq_addr } => Ok(RdmaQp { qpn, sq_addr, rq_addr }),
            r => Err(unexpected(&r)),
        }
    }

    /// Destroy a QP (its rings are freed; outstanding WRs are dropped).
    pub fn rdma_destroy_qp(&self, qpn: u32) -> Result<()> {
        self.rdma_ok(RdmaRequest::DestroyQp { qpn })
    }

    /// Connect QP `qpn` to QP `remote_qpn` of the snic at `remote_ip` (RESET -> INIT -> RTR ->
    /// RTS; both sides start at PSN 0) with path MTU `mtu` (256 ..= 4096, a power of two; 0:
    /// the largest the route to `remote_ip` carries, as rxe derives it from the netdev).
    /// The peer must connect its QP back to this one.
    pub fn rdma_connect(
        &self,
        qpn: u32,
        remote_qpn: u32,
        remote_ip: IpAddr,
        mtu: u32,
    ) -> Result<()> {
        let remote_ip = remote_ip.to_string();
        self.rdma_ok(RdmaRequest::Connect { qpn, remote_qpn, remote_ip, mtu })
    }

    /// Post one send work request on `qpn`; its completion carries `wr_id`.
    pub fn rdma_post(&self, qpn: u32, wr_id: u64, op: RdmaOp, local: RdmaSge) -> Result<()> {
        if matches!(op, RdmaOp::Flush { .. } | RdmaOp::AtomicWrite { .. }) {
            // Their fields travel in a batch's work request.
            return self.rdma_post_batch(qpn, &[RdmaWr { wr_id, op, local }]);
        }
        let w = RdmaWr { wr_id, op, local }.to_proto();
        self.rdma_ok(RdmaRequest::PostSend {
            qpn,
            opcode: w.opcode,
            local_addr: w.local_addr,
            lkey: w.lkey,
            len: w.len,
            remote_addr: w.remote_addr,
            rkey: w.rkey,
            wr_id: w.wr_id,
        })
    }

    /// Post `wrs` on `qpn` with one doorbell, as RecoNIC's batch mode: one setup request, snic
    /// writes every WQE into the SQ ring, moves the producer index once and wakes its RDMA
    /// engine once. All or nothing: when snic refuses one WR (or the ring lacks room for all)
    /// none is posted. At most [`RDMA_MAX_BATCH`] WRs ([`HostError::OutOfRange`] otherwise,
    /// and for an empty batch).
    pub fn rdma_post_batch(&self, qpn: u32, wrs: &[RdmaWr]) -> Result<()> {
        if wrs.is_empty() || wrs.len() > RDMA_MAX_BATCH {
            return Err(HostError::OutOfRange(format!(
                "{} work requests in one batch (1 ..= {RDMA_MAX_BATCH})",
                wrs.len()
            )));
        }
        let wrs = wrs.iter().map(|w| w.to_proto()).collect();
        self.rdma_ok(RdmaRequest::PostSendBatch { qpn, wrs })
    }

    /// Post an RDMA WRITE of `local` to `remote_addr` (under `rkey`).
    pub fn rdma_post_write(
        &self,
        qpn: u32,
        wr_id: u64,
        local: RdmaSge,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<()> {
        self.rdma_post(qpn, wr_id, RdmaOp::Write { remote_addr, rkey }, local)
    }

    /// Post an RDMA READ of `remote_addr` (under `rkey`) into `local`.
    pub fn rdma_post_read(
        &self,
        qpn: u32,
        wr_id: u64,
        local: RdmaSge,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<()> {
        self.rdma_post(qpn, wr_id, RdmaOp::Read { remote_addr, rkey }, local)
    }

    /// Post a SEND of `local`.
    pub fn rdma_post_send(&self, qpn: u32, wr_id: u64, local: RdmaSge) -> Result<()> {
        self.rdma_post(qpn, wr_id, RdmaOp::Send, local)
    }

    /// Post a receive buffer on `qpn`.
    pub fn rdma_post_recv(&self, qpn: u32, wr_id: u64, local: RdmaSge) -> Result<()> {
        self.rdma_ok(RdmaRequest::PostRecv {
            qpn,
            addr: local.addr,
            lkey: local.lkey,
            len: local.len,
            wr_id,
        })
    }

    /// Hand snic a chained command on the connected QP `qpn`: it READs every `reads` entry
    /// (one batch, one doorbell), runs `kernel` once all are in (checked for this client like
    /// any kernel command), then WRITEs `write_back` to the peer when given. The host rings
    /// one doorbell (this call) and gets one completion on `qpn`'s CQ: opcode [`WC_CHAIN`],
    /// `wr_id`, status 0 when every step succeeded, and [`RdmaCqe::chain`] saying what each
    /// step did and took. The chain's own READ and WRITE completions never reach the host.
    pub fn rdma_chain(
        &self,
        qpn: u32,
        wr_id: u64,
        reads: &[ChainRead],
        kernel: &KernelCmd,
        write_back: Option<ChainWrite>,
    ) -> Result<()> {
        let reads = reads
            .iter()
            .map(|r| ChainReadMsg {
                remote_addr: r.remote_addr,
                rkey: r.rkey,
                local_addr: r.local.addr,
                lkey: r.local.lkey,
                len: r.local.len,
            })
            .collect();
        let write_back = write_back.map(|w| ChainWriteMsg {
            local_addr: w.local.addr,
            lkey: w.local.lkey,
            len: w.local.len,
            remote_addr: w.remote_addr,
            rkey: w.rkey,
        });
        let kernel = KernelCmdMsg::from_cmd(kernel);
        self.rdma_ok(RdmaRequest::Chain { qpn, wr_id, reads, kernel, write_back })
    }

    /// Take up to `max` completions of `qpn`'s CQ (sends and receives share it) without
    /// waiting.
    pub fn rdma_poll_cq(&self, qpn: u32, max: u32) -> Result<Vec<RdmaCqe>> {
        match self.rdma_call(RdmaRequest::PollCq { qpn, max })? {
            Response::Cqes { cqes } => Ok(cqes),
            r => Err(unexpected(&r)),
        }
    }

    /// Poll `qpn`'s CQ (sleeping briefly between polls) until at least one completion comes
    /// or `timeout` passes ([`HostError::Timeout`]); returns up to `max`.
    pub fn rdma_wait_cq(&self, qpn: u32, max: u32, timeout: Duration) -> Result<Vec<RdmaCqe>> {
        let start = Instant::now();
        loop {
            let got = self.rdma_poll_cq(qpn, max.max(1))?;
            if !got.is_empty() {
                return Ok(got);
            }
            if start.elapsed() >= timeout {
                return Err(HostError::Timeout);
            }
            std::thread::sleep(WAIT_STEP);
        }
    }
}
