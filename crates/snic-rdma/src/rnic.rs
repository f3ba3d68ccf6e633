//! [`Rnic`]: one RDMA NIC. Verbs on one side; packets, time and timers on the other.

use std::collections::VecDeque;

use snic_dma::{AddressSpace, HostAddr, MemKind};
use snic_time::Instant;
use snic_wire::roce::opcode;

use crate::mr::MrTable;
use crate::nic_core::{Core, Cq, RnicConfig, Srq};
use crate::pkt::{self, RxError};
use crate::qp::{self, Qp};
use crate::req;
use crate::req_state::ReqState;
use crate::resp;
use crate::resp_state::RespState;
use crate::ring::Ring;
use crate::stats::RdmaStats;
use crate::verbs::*;
use crate::wqe;

/// First QP number handed out (QPNs 0 and 1 are special in IB).
pub const QPN_BASE: u32 = 0x11;

/// One RDMA NIC.
#[derive(Debug)]
pub struct Rnic {
    pub(crate) core: Core,
    pub(crate) qps: Vec<Option<Qp>>,
    pub(crate) free_qps: Vec<u32>,
    /// Round-robin start for transmit.
    rr: usize,
    /// Packets the QP at `rr` sent in a row.
    burst: u32,
}

/// Most packets one QP sends in a row while other QPs have packets waiting.
pub const TX_BURST: u32 = 16;

impl Rnic {
    /// A NIC with its host pool and device memory regions mapped.
    pub fn new(cfg: RnicConfig) -> Result<Rnic, VerbsError> {
        let mut mem = AddressSpace::new();
        if cfg.host_pool > 0 {
            let base = HostAddr::new(cfg.host_pool_base)
                .ok_or(VerbsError::InvalidAttr("host_pool_base"))?;
            let size =
                usize::try_from(cfg.host_pool).map_err(|_| VerbsError::InvalidAttr("host_pool"))?;
            mem.map_host_pool(base, Box::new(vec![0u8; size]))?;
        }
        if cfg.on_chip > 0 {
            mem.add_device_region(MemKind::OnChip, cfg.on_chip)?;
        }
        if cfg.on_board > 0 {
            mem.add_device_region(MemKind::OnBoard, cfg.on_board)?;
        }
        Ok(Rnic {
            core: Core {
                cfg,
                mem,
                mrs: MrTable::default(),
                pds: Vec::new(),
                cqs: Vec::new(),
                srqs: Vec::new(),
                stats: RdmaStats::default(),
                msg_latency: snic_dma::LatencyHist::default(),
            },
            qps: Vec::new(),
            free_qps: Vec::new(),
            rr: 0,
            burst: 0,
        })
    }

    /// Configuration.
    pub fn config(&self) -> &RnicConfig {
        &self.core.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &RdmaStats {
        &self.core.stats
    }

    /// Send work requests' latency, from the WQE's fetch (the first transmit poll after its
    /// doorbell) to its successful retirement (its CQE, when signalled), on the engine's clock.
    pub fn msg_latency(&self) -> &snic_dma::LatencyHist {
        &self.core.msg_latency
    }

    /// The engine's memory (read results, fill buffers).
    pub fn mem(&self) -> &snic_dma::AddressSpace {
        &self.core.mem
    }

    /// The engine's memory, writable (map host buffers, fill buffers).
    pub fn mem_mut(&mut self) -> &mut snic_dma::AddressSpace {
        &mut self.core.mem
    }

    /// Allocate a buffer of `size` bytes in `kind` memory (the host pool, on-chip or on-board),
    /// aligned to `align`. Returns its engine address.
    pub fn alloc_buf(&mut self, kind: MemKind, size: u64, align: u64) -> Result<u64, VerbsError> {
        Ok(self.core.mem.alloc(kind, size, align)?)
    }

    /// Free a buffer of [`Self::alloc_buf`].
    pub fn free_buf(&mut self, addr: u64) -> Result<(), VerbsError> {
        self.core.mem.free(addr)?;
        Ok(())
    }

    // ----- PD / MR -----

    /// Allocate a protection domain.
    pub fn alloc_pd(&mut self) -> Pd {
        if let Some(i) = self.core.pds.iter().position(|live| !live) {
            self.core.pds[i] = true;
            return Pd(i as u32);
        }
        self.core.pds.push(true);
        Pd(self.core.pds.len() as u32 - 1)
    }

    fn pd_live(&self, pd: Pd) -> Result<(), VerbsError> {
        if self.core.pds.get(pd.0 as usize).copied().unwrap_or(false) {
            Ok(())
        } else {
            Err(VerbsError::NoSuchPd(pd.0))
        }
    }

    /// Free a PD. `InUse` while MRs or QPs belong to it.
    pub fn dealloc_pd(&mut self, pd: Pd) -> Result<(), VerbsError> {
        self.pd_live(pd)?;
        let qp_uses = self.qps.iter().flatten().any(|q| q.init.pd == pd);
        let srq_uses = self.core.srqs.iter().flatten().any(|s| s.pd == pd);
        if self.core.mrs.pd_in_use(pd) || qp_uses || srq_uses {
            return Err(VerbsError::InUse);
        }
        self.core.pds[pd.0 as usize] = false;
        Ok(())
    }

    /// Register `[addr, addr + len)` (mapped engine memory) with `access`.
    pub fn reg_mr(
        &mut self,
        pd: Pd,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<MrInfo, VerbsError> {
        self.pd_live(pd)?;
        if access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC) {
            // IBTA 10.6.3.1: remote write/atomic access needs local write.
            if !access.contains(Access::LOCAL_WRITE) {
                return Err(VerbsError::InvalidAttr("REMOTE_WRITE/REMOTE_ATOMIC need LOCAL_WRITE"));
            }
        }
        if len > 0 {
            self.core.mem.check(addr, len)?;
        }
        self.core.mrs.reg(pd, addr, len, access).ok_or(VerbsError::Exhausted("MRs"))
    }

    /// Deregister an MR by its lkey.
    pub fn dereg_mr(&mut self, lkey: u32) -> Result<MrInfo, VerbsError> {
        self.core.mrs.dereg(lkey).ok_or(VerbsError::NoSuchMr(lkey))
    }

    /// Make an MR invalidated by a SEND with invalidate usable again.
    pub fn revalidate_mr(&mut self, lkey: u32) -> Result<(), VerbsError> {
        self.core.mrs.revalidate(lkey).map_err(|_| VerbsError::NoSuchMr(lkey))
    }

    // ----- CQ / SRQ -----

    /// Create a CQ holding up to `depth` CQEs.
    pub fn create_cq(&mut self, depth: usize) -> CqId {
        let cq = Cq {
            depth: depth.max(1),
            q: VecDeque::with_capacity(depth.clamp(1, 1 << 16)),
            overflowed: false,
        };
        if let Some(i) = self.core.cqs.iter().position(Option::is_none) {
            self.core.cqs[i] = Some(cq);
            return CqId(i as u32);
        }
        self.core.cqs.push(Some(cq));
        CqId(self.core.cqs.len() as u32 - 1)
    }

    /// Destroy a CQ. `InUse` while a QP uses it.
    pub fn destroy_cq(&mut self, cq: CqId) -> Result<(), VerbsError> {
        if !matches!(self.core.cqs.get(cq.0 as usize), Some(Some(_))) {
            return Err(VerbsError::NoSuchCq(cq.0));
        }
        if self.qps.iter().flatten().any(|q| q.init.send_cq == cq || q.init.recv_cq == cq) {
            return Err(VerbsError::InUse);
        }
        self.core.cqs[cq.0 as usize] = None;
        Ok(())
    }

    /// Move up to `out.len()` CQEs of `cq` into `out`; returns how many.
    pub fn poll_cq(&mut self, cq: CqId, out: &mut [Cqe]) -> Result<usize, VerbsError> {
        let c = self
            .core
            .cqs
            .get_mut(cq.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(VerbsError::NoSuchCq(cq.0))?;
        let n = out.len().min(c.q.len());
        for (slot, cqe) in out.iter_mut().zip(c.q.drain(..n)) {
            *slot = cqe;
        }
        Ok(n)
    }

    /// CQEs waiting in `cq`.
    pub fn cq_len(&self, cq: CqId) -> usize {
        self.core.cqs.get(cq.0 as usize).and_then(Option::as_ref).map_or(0, |c| c.q.len())
    }

    /// Whether `cq` lost a CQE to overflow.
    pub fn cq_overflowed(&self, cq: CqId) -> bool {
        self.core.cqs.get(cq.0 as usize).and_then(Option::as_ref).is_some_and(|c| c.overflowed)
    }

    /// Create an SRQ of `depth` receive WQEs (rounded up to a power of two) in `placement` memory.
    pub fn create_srq(
        &mut self,
        pd: Pd,
        depth: u32,
        placement: MemKind,
    ) -> Result<SrqId, VerbsError> {
        self.pd_live(pd)?;
        let depth =
            depth.max(1).checked_next_power_of_two().ok_or(VerbsError::InvalidAttr("depth"))?;
        let base = self.core.mem.alloc(placement, u64::from(depth) * wqe::RQ_SLOT as u64, 64)?;
        let srq = Srq { ring: Ring::new(base, depth, wqe::RQ_SLOT), pd };
        if let Some(i) = self.core.srqs.iter().position(Option::is_none) {
            self.core.srqs[i] = Some(srq);
            return Ok(SrqId(i as u32));
        }
        self.core.srqs.push(Some(srq));
        Ok(SrqId(self.core.srqs.len() as u32 - 1))
    }

    /// Post receive WQEs to an SRQ (one doorbell).
    pub fn post_srq_recv(&mut self, srq: SrqId, wrs: &[RecvWr]) -> Result<(), VerbsError> {
        let core = &mut self.core;
        let s = core
            .srqs
            .get_mut(srq.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(VerbsError::NoSuchSrq(srq.0))?;
        if (s.ring.room() as usize) < wrs.len() {
            return Err(VerbsError::QueueFull);
        }
        let mut ring = s.ring;
        for wr in wrs {
            let slot = core.mem.slice_mut(ring.slot_addr(ring.pidx), wqe::RQ_SLOT)?;
            wqe::encode_recv(wr, slot);
            ring.pidx = ring.pidx.wrapping_add(1);
        }
        // Doorbell: publish the new producer index once.
        if let Some(Some(s)) = core.srqs.get_mut(srq.0 as usize) {
            s.ring.pidx = ring.pidx;
        }
        Ok(())
    }

    // ----- QP -----

    /// Create an RC QP in RESET. Its SQ and RQ rings are allocated in `init.placement` memory.
    pub fn create_qp(&mut self, init: QpInit) -> Result<u32, VerbsError> {
        self.create_qp_in(init, None)
    }

    /// [`Self::create_qp`] with the rings carved from a chosen pool: with `Some(pool)` both
    /// rings are allocated ([`AddressSpace::alloc_in`](snic_dma::AddressSpace::alloc_in)) from
    /// the region holding address `pool` (a device region, a host pool, or a host buffer given
    /// an allocator with `make_pool`), whose kind must be `init.placement`; with `None` they
    /// come from any region of `init.placement` memory.
    pub fn create_qp_in(&mut self, init: QpInit, pool: Option<u64>) -> Result<u32, VerbsError> {
        self.pd_live(init.pd)?;
        if let Some(p) = pool
            && self.core.mem.kind_of(p) != Some(init.placement)
        {
            return Err(VerbsError::InvalidAttr("placement: the pool is not memory of that kind"));
        }
        let place = init.placement;
        let alloc = |mem: &mut AddressSpace, size: u64| match pool {
            Some(p) => mem.alloc_in(p, size, 64),
            None => mem.alloc(place, size, 64),
        };
        for cq in [init.send_cq, init.recv_cq] {
            if !matches!(self.core.cqs.get(cq.0 as usize), Some(Some(_))) {
                return Err(VerbsError::NoSuchCq(cq.0));
            }
        }
        if let Some(s) = init.srq
            && !matches!(self.core.srqs.get(s.0 as usize), Some(Some(_)))
        {
            return Err(VerbsError::NoSuchSrq(s.0));
        }
        let live = self.qps.iter().flatten().count();
        if live >= self.core.cfg.max_qps as usize {
            return Err(VerbsError::Exhausted("QPs"));
        }
        // Both depths are checked before anything is allocated, so a bad one leaks nothing.
        let sq_depth = ring_depth(init.max_send_wr, "max_send_wr")?;
        let rq_depth = match init.srq {
            None => Some(ring_depth(init.max_recv_wr, "max_recv_wr")?),
            Some(_) => None,
        };
        let sq_base = alloc(&mut self.core.mem, u64::from(sq_depth) * wqe::SQ_SLOT as u64)?;
        let rq = match rq_depth {
            Some(d) => match alloc(&mut self.core.mem, u64::from(d) * wqe::RQ_SLOT as u64) {
                Ok(b) => Some(Ring::new(b, d, wqe::RQ_SLOT)),
                Err(e) => {
                    let _ = self.core.mem.free(sq_base);
                    return Err(e.into());
                }
            },
            None => None,
        };
        let idx = match self.free_qps.pop() {
            Some(i) => i as usize,
            None => {
                self.qps.push(None);
                self.qps.len() - 1
            }
        };
        let qpn = QPN_BASE + idx as u32;
        self.qps[idx] = Some(Qp {
            qpn,
            init,
            attr: QpAttr::default(),
            sq: Ring::new(sq_base, sq_depth, wqe::SQ_SLOT),
            rq,
            path: None,
            req: ReqState::default(),
            resp: RespState::default(),
        });
        Ok(qpn)
    }

    fn qp_index(&self, qpn: u32) -> Option<usize> {
        let i = qpn.checked_sub(QPN_BASE)? as usize;
        self.qps.get(i)?.as_ref().map(|_| i)
    }

    fn qp_mut(&mut self, qpn: u32) -> Result<(&mut Core, &mut Qp), VerbsError> {
        let i = self.qp_index(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let qp = self.qps[i].as_mut().ok_or(VerbsError::NoSuchQp(qpn))?;
        Ok((&mut self.core, qp))
    }

    /// Destroy a QP; its rings are freed. Outstanding WQEs are dropped without completions.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), VerbsError> {
        let i = self.qp_index(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        if let Some(qp) = self.qps[i].take() {
            let _ = self.core.mem.free(qp.sq.base);
            if let Some(rq) = qp.rq {
                let _ = self.core.mem.free(rq.base);
            }
        }
        self.free_qps.push(i as u32);
        Ok(())
    }

    /// Bring a QP in RESET to RTS in the three steps the state machine requires, taking every
    /// attribute from `attr` (its `state` is ignored): INIT with `access`; RTR with the address
    /// vector, path MTU, remote QPN, `rq_psn`, `max_dest_rd_atomic` and `min_rnr_timer`; RTS
    /// with `sq_psn`, `timeout`, `retry_cnt`, `rnr_retry` and `max_rd_atomic`. The first
    /// refused step's error is returned (the QP stays in the state reached).
    pub fn connect_rc(&mut self, qpn: u32, attr: &QpAttr, now: Instant) -> Result<(), VerbsError> {
        use QpState::{Init, Rtr, Rts};
        let steps = [
            (Init, AttrMask::STATE | AttrMask::ACCESS),
            (Rtr, AttrMask::STATE | qp::required(Init, Rtr)),
            (Rts, AttrMask::STATE | qp::required(Rtr, Rts)),
        ];
        for (state, mask) in steps {
            self.modify_qp(qpn, &QpAttr { state, ..*attr }, mask, now)?;
        }
        Ok(())
    }

    /// Change a QP's state and attributes (`ibv_modify_qp`). `now` starts timers.
    pub fn modify_qp(
        &mut self,
        qpn: u32,
        attr: &QpAttr,
        mask: AttrMask,
        now: Instant,
    ) -> Result<(), VerbsError> {
        let (core, qp) = self.qp_mut(qpn)?;
        qp::modify(core, qp, attr, mask, now)
    }

    /// A QP, to read its state and PSNs (tools: `snic top` shows rates from PSN advances).
    pub fn qp(&self, qpn: u32) -> Option<&crate::qp::Qp> {
        self.qps.get(self.qp_index(qpn)?)?.as_ref()
    }

    /// A QP's current attributes (state included).
    pub fn query_qp(&self, qpn: u32) -> Result<QpAttr, VerbsError> {
        let i = self.qp_index(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        Ok(self.qps[i].as_ref().map(|q| q.attr).unwrap_or_default())
    }

    /// The QP's SQ and RQ ring addresses (for placement checks and tools).
    pub fn qp_rings(&self, qpn: u32) -> Result<(u64, Option<u64>), VerbsError> {
        let i = self.qp_index(qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let q = self.qps[i].as_ref().ok_or(VerbsError::NoSuchQp(qpn))?;
        Ok((q.sq.base, q.rq.map(|r| r.base)))
    }

    /// Post one send WQE and ring the doorbell.
    pub fn post_send(&mut self, qpn: u32, wr: &SendWr, now: Instant) -> Result<(), VerbsError> {
        self.post_send_batch(qpn, std::slice::from_ref(wr), now)
    }

    /// Post a batch of send WQEs with one doorbell (RecoNIC's batch mode): all are written to
    /// the SQ ring, then the producer index moves once. All or nothing: a bad WR or a full ring
    /// posts none.
    pub fn post_send_batch(
        &mut self,
        qpn: u32,
        wrs: &[SendWr],
        now: Instant,
    ) -> Result<(), VerbsError> {
        let (core, qp) = self.qp_mut(qpn)?;
        match qp.attr.state {
            QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err => {}
            s => return Err(VerbsError::BadState(s)),
        }
        if (qp.sq.room() as usize) < wrs.len() {
            return Err(VerbsError::QueueFull);
        }
        for wr in wrs {
            validate_send(wr)?;
        }
        let mut pidx = qp.sq.pidx;
        for wr in wrs {
            let slot = core.mem.slice_mut(qp.sq.slot_addr(pidx), wqe::SQ_SLOT)?;
            wqe::encode_send(wr, slot);
            pidx = pidx.wrapping_add(1);
        }
        qp.sq.pidx = pidx; // the doorbell
        if qp.attr.state == QpState::Err {
            qp::flush_send(core, qp, now);
        }
        Ok(())
    }

    /// Post one receive WQE.
    pub fn post_recv(&mut self, qpn: u32, wr: &RecvWr, now: Instant) -> Result<(), VerbsError> {
        self.post_recv_batch(qpn, std::slice::from_ref(wr), now)
    }

    /// Post a batch of receive WQEs with one doorbell.
    pub fn post_recv_batch(
        &mut self,
        qpn: u32,
        wrs: &[RecvWr],
        now: Instant,
    ) -> Result<(), VerbsError> {
        let (core, qp) = self.qp_mut(qpn)?;
        if qp.attr.state == QpState::Reset {
            return Err(VerbsError::BadState(QpState::Reset));
        }
        let Some(rq) = qp.rq.as_mut() else {
            return Err(VerbsError::InvalidWr("the QP uses an SRQ: post to the SRQ"));
        };
        if (rq.room() as usize) < wrs.len() {
            return Err(VerbsError::QueueFull);
        }
        let mut pidx = rq.pidx;
        for wr in wrs {
            let slot = core.mem.slice_mut(rq.slot_addr(pidx), wqe::RQ_SLOT)?;
            wqe::encode_recv(wr, slot);
            pidx = pidx.wrapping_add(1);
        }
        rq.pidx = pidx;
        if qp.attr.state == QpState::Err {
            qp::flush_recv(core, qp, now);
        }
        Ok(())
    }

    // ----- packets and time -----

    /// Take one packet (from its IP header on). Bad packets are counted drops.
    pub fn handle_packet(&mut self, now: Instant, ip: &[u8]) {
        self.core.stats.rx_packets += 1;
        self.core.stats.rx_bytes += ip.len() as u64;
        let p = match pkt::parse_open(ip, self.core.cfg.udp_port).and_then(|o| self.check(o)) {
            Ok(p) => p,
            Err(e) => {
                let s = &mut self.core.stats;
                match e {
                    RxError::Malformed => s.rx_malformed += 1,
                    RxError::NotRoce => s.rx_not_roce += 1,
                    RxError::BadIcrc => s.rx_bad_icrc += 1,
                    RxError::BadHeaders => s.rx_bad_headers += 1,
                }
                return;
            }
        };
        let bth = *p.bth();
        let Some(i) = self.qp_index(bth.dest_qp) else {
            self.core.stats.rx_unknown_qp += 1;
            return;
        };
        let Some(qp) = self.qps[i].as_mut() else {
            self.core.stats.rx_unknown_qp += 1;
            return;
        };
        let core = &mut self.core;
        if qp.path.is_none_or(|path| path.dst != p.src) {
            core.stats.rx_wrong_peer += 1;
            return;
        }
        if p.ce {
            core.stats.ecn_ce_rcvd += 1;
        }
        if bth.opcode == opcode::CNP {
            core.stats.cnps_rcvd += 1;
            if matches!(qp.attr.state, QpState::Rts | QpState::Sqd | QpState::Sqe) {
                req::on_cnp(core, qp, now);
            }
            return;
        }
        if p.roce.info().transport() != 0 {
            // Not RC (UC, UD, ...): not served here.
            core.stats.rx_bad_opcode += 1;
            return;
        }
        if p.roce.info().is_request() {
            match qp.attr.state {
                QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe => {
                    resp::on_request(core, qp, now, &p)
                }
                _ => core.stats.rx_bad_state += 1,
            }
        } else {
            match qp.attr.state {
                QpState::Rts | QpState::Sqd | QpState::Sqe => req::on_response(core, qp, now, &p),
                _ => core.stats.rx_bad_state += 1,
            }
        }
    }

    /// Finish a received packet's ICRC check. The payload of an in-order packet that
    /// continues a message (a SEND or WRITE, a READ response) is copied to its destination in
    /// the same pass ([`resp::placement`], [`req::read_placement`]); any other packet is
    /// checked in place. Either way nothing acts on a packet before its ICRC is known good.
    fn check<'a>(&mut self, open: pkt::OpenPkt<'a>) -> Result<pkt::RxPkt<'a>, RxError> {
        let p = open.peek();
        let qp = self.qp_index(p.bth().dest_qp).and_then(|i| self.qps[i].as_ref());
        let target = qp.filter(|qp| qp.path.is_some_and(|path| path.dst == p.src)).and_then(|qp| {
            if p.roce.info().transport() != 0 || p.bth().opcode == opcode::CNP {
                None
            } else if p.roce.info().is_request() {
                resp::placement(&self.core, qp, p)
            } else {
                req::read_placement(&self.core, qp, p)
            }
        });
        match target {
            Some(t) => {
                let core = &mut self.core;
                let p = open.place(|copy| core.place(&t, copy))?;
                if p.placed {
                    core.stats.rx_placed += 1;
                }
                Ok(p)
            }
            None => open.verify(),
        }
    }

    /// Write the next packet to send into `buf` (from its IP header on) and return its length;
    /// `None` when nothing is ready now. Responses (ACKs, READ responses, CNPs) go before new
    /// requests; QPs take turns.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let sg = self.poll_transmit_sg(now, buf)?;
        // The ranges were readable when the packet was built, just now.
        sg.assemble(&self.core.mem, buf)
    }

    /// [`Self::poll_transmit`] for a scatter-gather send: only the headers go into `buf` (which
    /// must still have room for the whole packet); the payload is left in engine memory
    /// ([`TxSg::payload`](crate::pkt::TxSg::payload), read it through [`Self::mem`]) and the
    /// pad and ICRC come in the returned descriptor. The ranges stay valid while the memory is
    /// not unmapped; their bytes are the ones the ICRC covers until the application writes
    /// them.
    pub fn poll_transmit_sg(&mut self, now: Instant, buf: &mut [u8]) -> Option<crate::pkt::TxSg> {
        let n = self.qps.len();
        for k in 0..n {
            let i = (self.rr + k) % n;
            let Some(qp) = self.qps[i].as_mut() else { continue };
            let core = &mut self.core;
            let got = resp::poll_transmit(core, qp, now, buf)
                .or_else(|| req::poll_transmit(core, qp, now, buf));
            if let Some(sg) = got {
                self.core.stats.tx_packets += 1;
                self.core.stats.tx_bytes += sg.len as u64;
                // A QP keeps the turn for up to TX_BURST packets (runs of equal-sized packets
                // of one QP become one GSO send), then the next QP's turn comes.
                if i == self.rr && k == 0 {
                    self.burst += 1;
                } else {
                    self.burst = 1;
                }
                if self.burst >= TX_BURST {
                    self.rr = (i + 1) % n;
                    self.burst = 0;
                } else {
                    self.rr = i;
                }
                return Some(sg);
            }
        }
        self.rr = self.rr.wrapping_add(1) % n.max(1);
        self.burst = 0;
        None
    }

    /// The earliest deadline of any timer (retransmission, RNR wait, pacing, ACK coalescing).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.qps
            .iter()
            .flatten()
            .filter_map(|q| {
                [req::poll_timeout(q), resp::poll_timeout(q)].into_iter().flatten().min()
            })
            .min()
    }

    /// Run the timers that are due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        for qp in self.qps.iter_mut().flatten() {
            if req::poll_timeout(qp).is_some_and(|t| t <= now) {
                req::handle_timeout(&mut self.core, qp, now);
            }
            if resp::poll_timeout(qp).is_some_and(|t| t <= now) {
                resp::handle_timeout(&mut self.core, qp, now);
            }
        }
    }

    /// QP numbers in use.
    pub fn qpns(&self) -> impl Iterator<Item = u32> + '_ {
        self.qps.iter().flatten().map(|q| q.qpn)
    }

    /// Whether the QP has sent everything it was asked to and all of it is acknowledged.
    pub fn sq_idle(&self, qpn: u32) -> bool {
        self.qp_index(qpn).and_then(|i| self.qps[i].as_ref()).is_some_and(|q| q.sq.is_empty())
    }
}

/// Ring depth for `n` work requests: `n` rounded up to a power of two (at least 1), or
/// `InvalidAttr(what)` when that does not fit a `u32`.
fn ring_depth(n: u32, what: &'static str) -> Result<u32, VerbsError> {
    n.max(1).checked_next_power_of_two().ok_or(VerbsError::InvalidAttr(what))
}

/// Checks a WR before it is posted (the ones a post can reject at once).
fn validate_send(wr: &SendWr) -> Result<(), VerbsError> {
    if wr.sgl.total_len() > u64::from(u32::MAX >> 1) {
        return Err(VerbsError::InvalidWr("message longer than 2^31 bytes"));
    }
    if wr.op.is_atomic() && wr.sgl.total_len() != 8 {
        return Err(VerbsError::InvalidWr("atomic needs one 8-byte local buffer"));
    }
    if wr.op.is_flush_or_atomic_write() && !wr.sgl.as_slice().is_empty() {
        return Err(VerbsError::InvalidWr("FLUSH and ATOMIC WRITE take no local buffers"));
    }
    if let WrOp::Flush { placement, .. } = wr.op
        && (placement == 0 || placement & !(FLUSH_GLOBAL | FLUSH_PERSISTENT) != 0)
    {
        return Err(VerbsError::InvalidWr("FLUSH placement: FLUSH_GLOBAL and/or FLUSH_PERSISTENT"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init(rnic: &mut Rnic, placement: MemKind) -> QpInit {
        let pd = rnic.alloc_pd();
        let cq = rnic.create_cq(16);
        QpInit {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            max_send_wr: 8,
            max_recv_wr: 8,
            placement,
            sq_sig_all: false,
        }
    }

    #[test]
    fn create_qp_with_a_bad_depth_allocates_nothing() {
        let cfg =
            RnicConfig { host_pool: 0, on_chip: 64 << 10, on_board: 1 << 20, ..Default::default() };
        let mut rnic = Rnic::new(cfg).unwrap();
        let stats = |r: &Rnic| r.mem().regions().map(|g| g.alloc).collect::<Vec<_>>();
        let before = stats(&rnic);
        let mut i = init(&mut rnic, MemKind::OnChip);
        // A valid SQ depth, an RQ depth that does not fit: refused before the SQ ring exists.
        i.max_recv_wr = u32::MAX;
        assert!(matches!(rnic.create_qp(i), Err(VerbsError::InvalidAttr("max_recv_wr"))));
        assert_eq!(stats(&rnic), before);
        i.max_recv_wr = 8;
        i.max_send_wr = u32::MAX;
        assert!(matches!(rnic.create_qp(i), Err(VerbsError::InvalidAttr("max_send_wr"))));
        assert_eq!(stats(&rnic), before);
        // The same QP with sane depths is created, and does allocate.
        i.max_send_wr = 8;
        rnic.create_qp(i).unwrap();
        assert_ne!(stats(&rnic), before);
    }

    #[test]
    fn create_qp_in_carves_rings_from_the_named_pool() {
        let cfg =
            RnicConfig { host_pool: 0, on_chip: 64 << 10, on_board: 1 << 20, ..Default::default() };
        let mut rnic = Rnic::new(cfg).unwrap();
        // A host buffer (no allocator yet) becomes the pool.
        let buf = HostAddr::new(0x4000_0000).unwrap();
        rnic.mem_mut().map_host_owned(buf, Box::new(vec![0u8; 1 << 16]), 3).unwrap();
        let i = init(&mut rnic, MemKind::Host);
        assert!(rnic.create_qp_in(i, Some(buf.raw())).is_err(), "no allocator yet");
        rnic.mem_mut().make_pool(buf.raw()).unwrap();
        let qpn = rnic.create_qp_in(i, Some(buf.raw())).unwrap();
        let (sq, rq) = rnic.qp_rings(qpn).unwrap();
        let inside = |a: u64| (buf.raw()..buf.raw() + (1 << 16)).contains(&a);
        assert!(inside(sq) && rq.is_some_and(inside), "{sq:#x} {rq:?}");
        // The placement must be the pool's kind.
        let dev = init(&mut rnic, MemKind::OnChip);
        assert!(matches!(rnic.create_qp_in(dev, Some(buf.raw())), Err(VerbsError::InvalidAttr(_))));
        // Without a pool: any region of the placement's kind.
        let q2 = rnic.create_qp_in(dev, None).unwrap();
        let (sq2, _) = rnic.qp_rings(q2).unwrap();
        assert_eq!(rnic.mem().kind_of(sq2), Some(MemKind::OnChip));
        // Destroying the QP gives the pool its room back.
        rnic.destroy_qp(qpn).unwrap();
        let used = rnic.mem().region_of(buf.raw()).and_then(|r| r.alloc).map(|a| a.used);
        assert_eq!(used, Some(0));
    }
}
