//! Export and import of an engine's state ([`RnicExport`]): what a new process needs to carry
//! on the QPs of a running one (a hitless upgrade).
//!
//! [`Rnic::export`] takes everything that belongs to the NIC's connections: its PDs, CQs (with
//! the CQEs not yet polled), MRs (keys, bounds, access, validity) and RC QPs (attributes,
//! path, the requester's fetched WQEs with their progress, PSNs, window, credits, retry
//! counters and timers; the responder's ePSN, MSN, message in progress, saved READ/atomic
//! resources and queued responses; the WQEs posted to the SQ and RQ rings, as the rings' raw
//! slots). It is plain serde data, versioned ([`EXPORT_VERSION`]).
//!
//! Not in it: the bytes of the MRs and of other buffers (the caller carries them, or maps the
//! same memory again: an import only checks that every MR's range is mapped), counters,
//! latency histograms, SRQs (an engine with an SRQ refuses to export).
//!
//! Time: [`snic_time::Instant`] counts from each process's own clock origin, so the state
//! carries the exporting engine's `now` ([`RnicExport::now_ns`]) beside its instants;
//! [`Rnic::import`] shifts every instant by the difference to its own `now`: a timer due in
//! 3 ms at export is due 3 ms after import.
//!
//! [`Rnic::import`] is all-or-nothing: everything is checked (version, clashes with the
//! engine's own objects, MR ranges, the QPs' internal consistency) and every ring allocated
//! before anything changes; on an error the engine is as it was.

use serde::{Deserialize, Serialize};
use snic_dma::MemError;
use snic_time::Instant;

use crate::nic_core::Cq;
use crate::pkt::Path;
use crate::qp::Qp;
use crate::req_state::ReqState;
use crate::resp_state::RespState;
use crate::ring::Ring;
use crate::rnic::{QPN_BASE, Rnic};
use crate::verbs::{Cqe, MrInfo, QpAttr, QpInit};
use crate::wqe;

/// Version of the [`RnicExport`] format this engine writes and reads.
pub const EXPORT_VERSION: u32 = 1;

/// Most slots a ring of an imported QP may have (the rings are allocated again).
const MAX_RING: u32 = 1 << 16;

/// Everything of an engine's connections (see the module doc).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RnicExport {
    /// Format version ([`EXPORT_VERSION`]).
    pub version: u32,
    /// The exporting engine's `now` (nanoseconds of its clock): the instants in the state are
    /// on that clock.
    pub now_ns: u64,
    /// Live PDs by index.
    pub pds: Vec<bool>,
    /// CQs by index (`None`: a free slot).
    pub cqs: Vec<Option<CqExport>>,
    /// The MR table's key generation (new registrations after import get fresh tags).
    pub mr_generation: u8,
    /// Registered MRs.
    pub mrs: Vec<MrExport>,
    /// RC QPs.
    pub qps: Vec<QpExport>,
}

/// One CQ.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CqExport {
    /// Most CQEs held.
    pub depth: usize,
    /// CQEs not yet polled, oldest first.
    pub cqes: Vec<Cqe>,
    /// A CQE was lost to overflow.
    pub overflowed: bool,
}

/// One MR: its registration (keys, range, access, PD) and whether it is valid (not
/// invalidated by a SEND with invalidate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MrExport {
    /// The registration.
    pub info: MrInfo,
    /// Not invalidated.
    pub valid: bool,
}

/// One RC QP: attributes, rings and the requester's and responder's state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QpExport {
    /// QP number (kept across the import: the peer addresses it).
    pub qpn: u32,
    /// Creation parameters.
    pub init: QpInit,
    /// Attributes and state (remote QPN, address, MTU, PSNs, timeouts, retry limits).
    pub attr: QpAttr,
    /// The send ring's indices and geometry (its base is the exporter's; import allocates).
    pub sq: Ring,
    /// The receive ring's (`None` with an SRQ).
    pub rq: Option<Ring>,
    /// The raw slots `[sq.cidx, sq.pidx)` of the send ring: WQEs posted and not retired.
    pub sq_slots: Vec<Vec<u8>>,
    /// The raw slots `[rq.cidx, rq.pidx)` of the receive ring: receive WQEs posted.
    pub rq_slots: Vec<Vec<u8>>,
    /// Packet addresses (from RTR on).
    pub path: Option<Path>,
    /// Requester and completer state.
    pub req: ReqState,
    /// Responder state.
    pub resp: RespState,
}

/// Why an export failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportError {
    /// The engine has SRQs, which the format does not carry.
    SrqUnsupported,
    /// A ring slot could not be read.
    Mem(MemError),
}

impl std::fmt::Display for ExportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExportError::SrqUnsupported => write!(f, "an engine with SRQs cannot be exported"),
            ExportError::Mem(e) => write!(f, "ring memory: {e}"),
        }
    }
}

impl std::error::Error for ExportError {}

/// Why an import failed (the engine is unchanged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportError {
    /// The state is of another format version.
    Version {
        /// The state's version.
        got: u32,
        /// This engine's ([`EXPORT_VERSION`]).
        want: u32,
    },
    /// The engine already has a QP with this number (or the number is not one it hands out).
    QpnClash(u32),
    /// The engine already has this PD.
    PdClash(u32),
    /// The engine already has this CQ.
    CqClash(u32),
    /// The engine already has an MR in the slot of this lkey.
    MrClash(u32),
    /// The MR with this lkey covers memory the engine has not mapped.
    MrOutOfRange(u32),
    /// The state contradicts itself (the field or rule is named).
    Inconsistent(&'static str),
    /// The engine's limits (e.g. `max_qps`) do not admit the state.
    Limit(&'static str),
    /// No memory for the QPs' rings.
    Mem(MemError),
}

impl std::fmt::Display for ImportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ImportError::Version { got, want } => {
                write!(f, "state format version {got} (this engine reads {want})")
            }
            ImportError::QpnClash(q) => write!(f, "QP number {q:#x} is taken or invalid here"),
            ImportError::PdClash(p) => write!(f, "PD {p} exists here"),
            ImportError::CqClash(c) => write!(f, "CQ {c} exists here"),
            ImportError::MrClash(k) => write!(f, "an MR exists in the slot of lkey {k:#x}"),
            ImportError::MrOutOfRange(k) => {
                write!(f, "the MR of lkey {k:#x} covers unmapped memory")
            }
            ImportError::Inconsistent(w) => write!(f, "inconsistent state: {w}"),
            ImportError::Limit(w) => write!(f, "over this engine's limit: {w}"),
            ImportError::Mem(e) => write!(f, "ring memory: {e}"),
        }
    }
}

impl std::error::Error for ImportError {}

/// Shift an instant of the exporter's clock to the importer's: `to + (t - from)`, saturating
/// at the clock's origin and end.
fn shift(t: Instant, from: Instant, to: Instant) -> Instant {
    let d = i128::from(t.as_nanos()) - i128::from(from.as_nanos());
    let v = (i128::from(to.as_nanos()) + d).clamp(0, i128::from(u64::MAX));
    Instant::from_nanos(v as u64)
}

impl Rnic {
    /// Export the engine's PDs, CQs, MRs and QPs at `now` (see the module doc). Nothing
    /// changes; the caller stops driving the engine before (what happens after is not in the
    /// state).
    pub fn export(&self, now: Instant) -> Result<RnicExport, ExportError> {
        let core = &self.core;
        if core.srqs.iter().any(Option::is_some) {
            return Err(ExportError::SrqUnsupported);
        }
        let slots = |ring: &Ring, size: usize| -> Result<Vec<Vec<u8>>, ExportError> {
            (0..ring.len())
                .map(|k| {
                    let a = ring.slot_addr(ring.cidx.wrapping_add(k));
                    core.mem.slice(a, size).map(<[u8]>::to_vec).map_err(ExportError::Mem)
                })
                .collect()
        };
        let mut qps = Vec::new();
        for qp in self.qps.iter().flatten() {
            let rq_slots = match &qp.rq {
                Some(r) => slots(r, wqe::RQ_SLOT)?,
                None => Vec::new(),
            };
            qps.push(QpExport {
                qpn: qp.qpn,
                init: qp.init,
                attr: qp.attr,
                sq: qp.sq,
                rq: qp.rq,
                sq_slots: slots(&qp.sq, wqe::SQ_SLOT)?,
                rq_slots,
                path: qp.path,
                req: qp.req.clone(),
                resp: qp.resp.clone(),
            });
        }
        let cqs = core
            .cqs
            .iter()
            .map(|c| {
                c.as_ref().map(|c| CqExport {
                    depth: c.depth,
                    cqes: c.q.iter().copied().collect(),
                    overflowed: c.overflowed,
                })
            })
            .collect();
        Ok(RnicExport {
            version: EXPORT_VERSION,
            now_ns: now.as_nanos(),
            pds: core.pds.clone(),
            cqs,
            mr_generation: core.mrs.generation(),
            mrs: core.mrs.entries().map(|(info, valid)| MrExport { info, valid }).collect(),
            qps,
        })
    }

    /// Take over the state `st` of another engine at `now`: its PDs, CQs, MRs and QPs join this
    /// engine's own under the same numbers and keys, and the QPs carry on where they were
    /// (timers shifted to this engine's clock). The MRs' memory must be mapped here already
    /// (same engine addresses); the QPs' rings are allocated anew and their posted WQEs copied
    /// in. All or nothing: on an error nothing changed.
    pub fn import(&mut self, st: &RnicExport, now: Instant) -> Result<(), ImportError> {
        self.import_with(st, now, false)
    }

    /// [`Self::import`] with the QPs' rings left where they were: the memory they lie in was
    /// carried whole (the same bytes at the same engine addresses, their allocations already
    /// taken), as when a process hands its host interface over with its memory. Each ring
    /// must be mapped; its slots are not copied.
    pub fn import_in_place(&mut self, st: &RnicExport, now: Instant) -> Result<(), ImportError> {
        self.import_with(st, now, true)
    }

    fn import_with(
        &mut self,
        st: &RnicExport,
        now: Instant,
        keep: bool,
    ) -> Result<(), ImportError> {
        if st.version != EXPORT_VERSION {
            return Err(ImportError::Version { got: st.version, want: EXPORT_VERSION });
        }
        self.check_import(st)?;
        // Allocate every ring before anything changes; undo on failure.
        let mut rings: Vec<(u64, Option<u64>)> = Vec::with_capacity(st.qps.len());
        for q in st.qps.iter().filter(|_| keep) {
            for r in std::iter::once(&q.sq).chain(q.rq.as_ref()) {
                let len = u64::from(r.depth) * r.slot as u64;
                self.core.mem.check(r.base, len).map_err(ImportError::Mem)?;
            }
            rings.push((q.sq.base, q.rq.map(|r| r.base)));
        }
        for q in st.qps.iter().filter(|_| !keep) {
            match self.alloc_rings(q) {
                Ok(r) => rings.push(r),
                Err(e) => {
                    for (sq, rq) in rings {
                        let _ = self.core.mem.free(sq);
                        if let Some(rq) = rq {
                            let _ = self.core.mem.free(rq);
                        }
                    }
                    return Err(ImportError::Mem(e));
                }
            }
        }
        // From here on nothing fails.
        let core = &mut self.core;
        if core.pds.len() < st.pds.len() {
            core.pds.resize(st.pds.len(), false);
        }
        for (i, live) in st.pds.iter().enumerate() {
            core.pds[i] |= *live;
        }
        if core.cqs.len() < st.cqs.len() {
            core.cqs.resize_with(st.cqs.len(), || None);
        }
        for (i, c) in st.cqs.iter().enumerate() {
            if let Some(c) = c {
                core.cqs[i] = Some(Cq {
                    depth: c.depth,
                    q: c.cqes.iter().copied().collect(),
                    overflowed: c.overflowed,
                });
            }
        }
        core.mrs.set_generation(st.mr_generation);
        for m in &st.mrs {
            core.mrs.insert(m.info, m.valid);
        }
        let (from, to) = (Instant::from_nanos(st.now_ns), now);
        let retime = |t: Instant| shift(t, from, to);
        for (q, (sq_base, rq_base)) in st.qps.iter().zip(rings) {
            let mut sq = q.sq;
            sq.base = sq_base;
            for (k, s) in q.sq_slots.iter().enumerate().filter(|_| !keep) {
                let a = sq.slot_addr(sq.cidx.wrapping_add(k as u32));
                if let Ok(dst) = core.mem.slice_mut(a, wqe::SQ_SLOT) {
                    dst.copy_from_slice(s);
                }
            }
            let rq = q.rq.zip(rq_base).map(|(mut r, base)| {
                r.base = base;
                for (k, s) in q.rq_slots.iter().enumerate().filter(|_| !keep) {
                    let a = r.slot_addr(r.cidx.wrapping_add(k as u32));
                    if let Ok(dst) = core.mem.slice_mut(a, wqe::RQ_SLOT) {
                        dst.copy_from_slice(s);
                    }
                }
                r
            });
            let mut req = q.req.clone();
            req.retime(&retime);
            let mut resp = q.resp.clone();
            resp.retime(&retime);
            let idx = (q.qpn - QPN_BASE) as usize;
            if self.qps.len() <= idx {
                self.qps.resize_with(idx + 1, || None);
            }
            self.qps[idx] = Some(Qp {
                qpn: q.qpn,
                init: q.init,
                attr: q.attr,
                sq,
                rq,
                path: q.path,
                req,
                resp,
            });
        }
        self.free_qps =
            (0..self.qps.len() as u32).rev().filter(|&i| self.qps[i as usize].is_none()).collect();
        Ok(())
    }

    /// Every check of [`Self::import`] that needs no allocation.
    fn check_import(&self, st: &RnicExport) -> Result<(), ImportError> {
        let core = &self.core;
        let pd_live = |p: u32| st.pds.get(p as usize).copied().unwrap_or(false);
        let cq_live = |c: u32| matches!(st.cqs.get(c as usize), Some(Some(_)));
        let live = self.qps.iter().flatten().count();
        if live + st.qps.len() > core.cfg.max_qps as usize {
            return Err(ImportError::Limit("max_qps"));
        }
        let mut qpns = std::collections::HashSet::new();
        for q in &st.qps {
            let idx = q.qpn.checked_sub(QPN_BASE).ok_or(ImportError::QpnClash(q.qpn))?;
            if q.qpn > crate::psn::MASK || !qpns.insert(q.qpn) {
                return Err(ImportError::QpnClash(q.qpn));
            }
            if matches!(self.qps.get(idx as usize), Some(Some(_))) {
                return Err(ImportError::QpnClash(q.qpn));
            }
            check_qp(q, &pd_live, &cq_live)?;
        }
        for (i, live) in st.pds.iter().enumerate() {
            if *live && core.pds.get(i).copied().unwrap_or(false) {
                return Err(ImportError::PdClash(i as u32));
            }
        }
        for (i, c) in st.cqs.iter().enumerate() {
            let Some(c) = c else { continue };
            if matches!(core.cqs.get(i), Some(Some(_))) {
                return Err(ImportError::CqClash(i as u32));
            }
            if c.depth == 0 || c.cqes.len() > c.depth {
                return Err(ImportError::Inconsistent("a CQ holds more CQEs than its depth"));
            }
        }
        let mut keys = std::collections::HashSet::new();
        for m in &st.mrs {
            let i = m.info;
            if i.lkey >> 8 != i.rkey >> 8 || !keys.insert(i.lkey >> 8) {
                return Err(ImportError::Inconsistent("MR keys"));
            }
            if !pd_live(i.pd.0) {
                return Err(ImportError::Inconsistent("an MR of a PD that is not live"));
            }
            if core.mrs.slot_taken(i.lkey) {
                return Err(ImportError::MrClash(i.lkey));
            }
            if i.len > 0 && core.mem.check(i.addr, i.len).is_err() {
                return Err(ImportError::MrOutOfRange(i.lkey));
            }
        }
        Ok(())
    }

    /// Allocate the rings of an imported QP: (SQ base, RQ base).
    fn alloc_rings(&mut self, q: &QpExport) -> Result<(u64, Option<u64>), MemError> {
        let mem = &mut self.core.mem;
        let place = q.init.placement;
        let sq = mem.alloc(place, u64::from(q.sq.depth) * wqe::SQ_SLOT as u64, 64)?;
        let rq = match q.rq {
            Some(r) => match mem.alloc(place, u64::from(r.depth) * wqe::RQ_SLOT as u64, 64) {
                Ok(b) => Some(b),
                Err(e) => {
                    let _ = mem.free(sq);
                    return Err(e);
                }
            },
            None => None,
        };
        Ok((sq, rq))
    }
}

/// The rules an imported QP must keep so the engine never indexes out of its state.
fn check_qp(
    q: &QpExport,
    pd_live: &dyn Fn(u32) -> bool,
    cq_live: &dyn Fn(u32) -> bool,
) -> Result<(), ImportError> {
    use ImportError::Inconsistent as Bad;
    if !pd_live(q.init.pd.0) {
        return Err(Bad("a QP of a PD that is not live"));
    }
    if !cq_live(q.init.send_cq.0) || !cq_live(q.init.recv_cq.0) {
        return Err(Bad("a QP's CQ is not in the state"));
    }
    if q.init.srq.is_some() {
        return Err(Bad("a QP with an SRQ (SRQs are not carried)"));
    }
    let ring_ok = |r: &Ring, slot: usize, slots: &[Vec<u8>]| {
        r.depth.is_power_of_two()
            && r.depth <= MAX_RING
            && r.slot == slot
            && r.len() <= r.depth
            && slots.len() == r.len() as usize
            && slots.iter().all(|s| s.len() == slot)
    };
    if !ring_ok(&q.sq, wqe::SQ_SLOT, &q.sq_slots) {
        return Err(Bad("send ring"));
    }
    match &q.rq {
        Some(r) if !ring_ok(r, wqe::RQ_SLOT, &q.rq_slots) => return Err(Bad("receive ring")),
        None if !q.rq_slots.is_empty() => return Err(Bad("receive slots without a ring")),
        _ => {}
    }
    if q.attr.dest_qpn > crate::psn::MASK {
        return Err(Bad("dest_qpn"));
    }
    q.req.check(q.sq.len()).map_err(Bad)?;
    q.resp.check().map_err(Bad)?;
    Ok(())
}

/// Serde of [`snic_dma::MemKind`] (a foreign type) by name.
pub(crate) mod mem_kind {
    use serde::{Deserialize, Deserializer, Serializer};
    use snic_dma::MemKind;

    pub(crate) fn serialize<S: Serializer>(k: &MemKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match k {
            MemKind::Host => "host",
            MemKind::OnChip => "on_chip",
            MemKind::OnBoard => "on_board",
        })
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<MemKind, D::Error> {
        match String::deserialize(d)?.as_str() {
            "host" => Ok(MemKind::Host),
            "on_chip" => Ok(MemKind::OnChip),
            "on_board" => Ok(MemKind::OnBoard),
            other => Err(serde::de::Error::custom(format!("unknown memory kind {other:?}"))),
        }
    }
}

/// Serde of an [`Instant`] as nanoseconds of its clock.
pub(crate) mod instant {
    use serde::{Deserialize, Deserializer, Serializer};
    use snic_time::Instant;

    pub(crate) fn serialize<S: Serializer>(t: &Instant, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(t.as_nanos())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Instant, D::Error> {
        Ok(Instant::from_nanos(u64::deserialize(d)?))
    }
}

/// Serde of an `Option<Instant>` as nanoseconds of its clock.
pub(crate) mod opt_instant {
    use serde::{Deserialize, Deserializer, Serializer};
    use snic_time::Instant;

    pub(crate) fn serialize<S: Serializer>(t: &Option<Instant>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_some(&t.as_nanos()),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Instant>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Instant::from_nanos))
    }
}

/// Serde of an AETH [`Syndrome`](snic_wire::roce::ext::Syndrome) as its wire byte.
pub(crate) mod syndrome {
    use serde::{Deserialize, Deserializer, Serializer};
    use snic_wire::roce::ext::Syndrome;

    pub(crate) fn serialize<S: Serializer>(y: &Syndrome, s: S) -> Result<S::Ok, S::Error> {
        let b = y.to_byte().map_err(|_| serde::ser::Error::custom("syndrome out of range"))?;
        s.serialize_u8(b)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Syndrome, D::Error> {
        Syndrome::from_byte(u8::deserialize(d)?)
            .map_err(|_| serde::de::Error::custom("reserved AETH syndrome"))
    }
}
