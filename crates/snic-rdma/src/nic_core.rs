//! [`Core`]: everything of a NIC except its QPs (configuration, memory, MRs, PDs, CQs, SRQs,
//! counters), so a QP and the rest can be borrowed together; and the NIC's configuration,
//! [`RnicConfig`].

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};

use snic_dma::AddressSpace;

use crate::mr::{MrFault, MrTable};
use crate::ring::Ring;
use crate::stats::RdmaStats;
use crate::verbs::{CqId, Cqe, MAX_SGE, Pd, SgList, WcStatus};

/// Configuration of one NIC.
#[derive(Debug, Clone, PartialEq)]
pub struct RnicConfig {
    /// This NIC's address (its GID, as an IP address).
    pub local_ip: IpAddr,
    /// More addresses of this NIC (more GIDs: an IPv6 address beside an IPv4 one). A QP sends
    /// from the first address, `local_ip` then these, of its remote's family.
    pub more_ips: Vec<IpAddr>,
    /// UDP port RoCE listens on and sends to (4791).
    pub udp_port: u16,
    /// Bytes of host memory the NIC manages as a pool (queues and buffers of `alloc_host`).
    /// Zero-filled lazily by the OS.
    pub host_pool: u64,
    /// Address of the host pool in the engine address space.
    pub host_pool_base: u64,
    /// Bytes of on-chip device memory.
    pub on_chip: u64,
    /// Bytes of on-board device memory.
    pub on_board: u64,
    /// DSCP of every packet.
    pub dscp: u8,
    /// Send ECT(0) (ECN-capable) packets, so the network can mark CE.
    pub ecn: bool,
    /// Requester: set AckReq at least every this many packets of a long message (the last
    /// packet of every message always asks for an ACK).
    pub ack_req_every: u32,
    /// Congestion control (DCQCN-style).
    pub cc: crate::cc::CcConfig,
    /// Most QPs.
    pub max_qps: u32,
    /// Most request packets in flight (sent, not acknowledged) per QP.
    pub max_inflight: u32,
    /// Size the send window to the path and run loss probes ([`crate::window`]); on by
    /// default. `false`: the fixed window of `max_inflight` packets, and silent losses wait
    /// for the IBTA timer.
    pub path_window: bool,
    /// Smallest path window, in packets (at least [`crate::window::MIN_WINDOW`]): a few of
    /// the transport's batches ([`crate::window::DEFAULT_FLOOR`], four of 64 datagrams, by
    /// default), so a host whose ends take turns on busy CPUs keeps the pipe full.
    pub window_floor: u32,
}

impl RnicConfig {
    /// The address a QP whose remote is `remote` sends from: the first of `local_ip`, then
    /// `more_ips`, of `remote`'s family.
    pub fn source_for(&self, remote: IpAddr) -> Option<IpAddr> {
        core::iter::once(&self.local_ip)
            .chain(&self.more_ips)
            .copied()
            .find(|ip| ip.is_ipv4() == remote.is_ipv4())
    }
}

impl Default for RnicConfig {
    fn default() -> Self {
        RnicConfig {
            local_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            more_ips: Vec::new(),
            udp_port: snic_wire::roce::UDP_PORT,
            host_pool: 64 << 20,
            host_pool_base: 0x10_0000_0000,
            on_chip: 4 << 20,
            on_board: 256 << 20,
            dscp: 26,
            ecn: true,
            ack_req_every: 16,
            cc: crate::cc::CcConfig::default(),
            max_qps: 1024,
            max_inflight: 1024,
            path_window: true,
            window_floor: crate::window::DEFAULT_FLOOR,
        }
    }
}

/// Where a received payload goes: up to [`MAX_SGE`] ranges of engine memory, in order, their
/// rights and bounds already checked ([`Core::scatter_plan`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Placement {
    ranges: [(u64, u32); MAX_SGE],
    n: usize,
}

impl Placement {
    /// One range (a remote WRITE's target, checked by the caller).
    pub fn one(addr: u64, len: u32) -> Placement {
        let mut p = Placement::default();
        p.ranges[0] = (addr, len);
        p.n = 1;
        p
    }

    /// Append a range; `Bounds` past [`MAX_SGE`].
    fn push(&mut self, addr: u64, len: u32) -> Result<(), MrFault> {
        *self.ranges.get_mut(self.n).ok_or(MrFault::Bounds)? = (addr, len);
        self.n += 1;
        Ok(())
    }

    /// The ranges (address, length).
    pub fn ranges(&self) -> &[(u64, u32)] {
        &self.ranges[..self.n]
    }
}

/// A completion queue.
#[derive(Debug)]
pub struct Cq {
    /// Most CQEs held.
    pub depth: usize,
    /// CQEs not yet polled.
    pub q: VecDeque<Cqe>,
    /// A CQE was lost to overflow.
    pub overflowed: bool,
}

/// A shared receive queue.
#[derive(Debug)]
pub struct Srq {
    /// The ring of receive WQEs.
    pub ring: Ring,
    /// Owning PD.
    pub pd: Pd,
}

/// Everything of a NIC except its QPs, so a QP and the rest can be borrowed together.
#[derive(Debug)]
pub struct Core {
    /// Configuration.
    pub cfg: RnicConfig,
    /// Host and device memory.
    pub mem: AddressSpace,
    /// Memory regions.
    pub mrs: MrTable,
    /// Live PDs (by index).
    pub pds: Vec<bool>,
    /// Completion queues.
    pub cqs: Vec<Option<Cq>>,
    /// Shared receive queues.
    pub srqs: Vec<Option<Srq>>,
    /// Counters.
    pub stats: RdmaStats,
    /// Send work requests' latency, fetch to successful retirement (see `Rnic::msg_latency`).
    pub msg_latency: snic_dma::LatencyHist,
}

impl Core {
    /// Append a CQE. On a full CQ the CQE is lost, the CQ is marked overflowed and `false`
    /// returned (the caller moves the QP to the error state).
    pub fn push_cqe(&mut self, cq: CqId, cqe: Cqe) -> bool {
        let Some(Some(c)) = self.cqs.get_mut(cq.0 as usize) else {
            self.stats.cq_overflows += 1;
            return false;
        };
        if c.q.len() >= c.depth {
            c.overflowed = true;
            self.stats.cq_overflows += 1;
            return false;
        }
        self.stats.cqes += 1;
        if cqe.status != WcStatus::Success {
            self.stats.cqe_errors += 1;
        }
        c.q.push_back(cqe);
        true
    }

    /// Check every SGE of `sgl` against its MR (`write`: the NIC writes there).
    pub fn check_sgl(&self, pd: Pd, sgl: &SgList, write: bool) -> Result<(), MrFault> {
        for s in sgl.as_slice() {
            if s.len == 0 {
                continue;
            }
            self.mrs.check_local(s.lkey, pd, s.addr, u64::from(s.len), write)?;
        }
        Ok(())
    }

    /// Copy `out.len()` bytes of the message described by `sgl`, starting `offset` bytes into
    /// it, into `out` (gather). MR checks are done again here.
    pub fn gather(
        &self,
        pd: Pd,
        sgl: &SgList,
        mut offset: u64,
        mut out: &mut [u8],
    ) -> Result<(), MrFault> {
        for s in sgl.as_slice() {
            if out.is_empty() {
                break;
            }
            let len = u64::from(s.len);
            if offset >= len {
                offset -= len;
                continue;
            }
            let n = ((len - offset) as usize).min(out.len());
            let addr = s.addr + offset;
            self.mrs.check_local(s.lkey, pd, addr, n as u64, false)?;
            let src = self.mem.slice(addr, n).map_err(|_| MrFault::Bounds)?;
            let (head, tail) = out.split_at_mut(n);
            head.copy_from_slice(src);
            out = tail;
            offset = 0;
        }
        if out.is_empty() { Ok(()) } else { Err(MrFault::Bounds) }
    }

    /// [`Self::gather`] without the copy: check the same rights and bounds, hash the `len`
    /// bytes `offset` bytes into `sgl` into `h` and record where they lie in `sg`'s ranges
    /// (for a scatter-gather send).
    pub fn gather_sg(
        &self,
        pd: Pd,
        sgl: &SgList,
        mut offset: u64,
        mut len: usize,
        h: &mut snic_wire::roce::icrc::Hasher,
        sg: &mut crate::pkt::TxSg,
    ) -> Result<(), MrFault> {
        for s in sgl.as_slice() {
            if len == 0 {
                break;
            }
            let sl = u64::from(s.len);
            if offset >= sl {
                offset -= sl;
                continue;
            }
            let n = ((sl - offset) as usize).min(len);
            let addr = s.addr + offset;
            self.mrs.check_local(s.lkey, pd, addr, n as u64, false)?;
            h.update(self.mem.slice(addr, n).map_err(|_| MrFault::Bounds)?);
            let slot = sg.ranges.get_mut(sg.npayload).ok_or(MrFault::Bounds)?;
            *slot = (addr, n as u32);
            sg.npayload += 1;
            len -= n;
            offset = 0;
        }
        if len == 0 { Ok(()) } else { Err(MrFault::Bounds) }
    }

    /// Plan a [`Self::scatter`] of `len` bytes without writing: the same rights and bounds
    /// checks, and the ranges of memory the bytes would go to, in order.
    pub fn scatter_plan(
        &self,
        pd: Pd,
        sgl: &SgList,
        offset: u64,
        len: usize,
    ) -> Result<Placement, MrFault> {
        if offset.saturating_add(len as u64) > sgl.total_len() {
            return Err(MrFault::Bounds);
        }
        let mut p = Placement::default();
        let mut off = offset;
        let mut left = len as u64;
        for s in sgl.as_slice() {
            if left == 0 {
                break;
            }
            let sl = u64::from(s.len);
            if off >= sl {
                off -= sl;
                continue;
            }
            let n = (sl - off).min(left);
            self.mrs.check_local(s.lkey, pd, s.addr + off, n, true)?;
            self.mem.check(s.addr + off, n).map_err(|_| MrFault::Bounds)?;
            p.push(s.addr + off, n as u32)?;
            left -= n;
            off = 0;
        }
        Ok(p)
    }

    /// Hand the memory of `p`'s ranges, in order, to `copy` (which fills them); false when a
    /// range is not memory (nothing further is handed) or `copy` refused one.
    pub fn place(&mut self, p: &Placement, copy: &mut dyn FnMut(&mut [u8]) -> bool) -> bool {
        p.ranges().iter().all(|&(a, n)| self.mem.slice_mut(a, n as usize).is_ok_and(&mut *copy))
    }

    /// Write `data` into the buffers of `sgl`, starting `offset` bytes into them (scatter).
    /// Needs LOCAL_WRITE on every MR touched. Fails (having written nothing) when `data` does
    /// not fit.
    pub fn scatter(
        &mut self,
        pd: Pd,
        sgl: &SgList,
        offset: u64,
        data: &[u8],
    ) -> Result<(), MrFault> {
        // Check first (the plan), then write: a failure leaves memory untouched.
        let plan = self.scatter_plan(pd, sgl, offset, data.len())?;
        let mut rest = data;
        for &(addr, n) in plan.ranges() {
            let (head, tail) = rest.split_at(n as usize);
            self.mem.write(addr, head).map_err(|_| MrFault::Bounds)?;
            rest = tail;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_qp_sends_from_the_first_address_of_its_remotes_family() {
        let v4: IpAddr = "10.0.0.1".parse().unwrap();
        let v6a: IpAddr = "fd00::1".parse().unwrap();
        let v6b: IpAddr = "fd00::2".parse().unwrap();
        let cfg = RnicConfig { local_ip: v4, more_ips: vec![v6a, v6b], ..Default::default() };
        assert_eq!(cfg.source_for("10.0.0.9".parse().unwrap()), Some(v4));
        assert_eq!(cfg.source_for("fd00::9".parse().unwrap()), Some(v6a));
        let only_v4 = RnicConfig { local_ip: v4, ..Default::default() };
        assert_eq!(only_v4.source_for("fd00::9".parse().unwrap()), None);
    }
}
