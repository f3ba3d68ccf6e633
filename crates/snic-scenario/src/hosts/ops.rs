//! Host operations: posting WRs and DMA descriptors, running kernels, and polling what they
//! produce (CQEs, DMA completions).

use super::{Hosts, Op, PendingWr, Resolved, util};
use crate::schema::{Action, DescSpec, DmaDir, WrKind, WrSpec};
use snic_dma::desc::{CMPT_SIZE, DESC_SIZE, DIR_QUEUE, flags};
use snic_dma::{ChannelKey, Completion, Descriptor, Dir, Event, Status};
use snic_rdma::{Cqe, RecvWr, Remote, SendWr, SgList, Sge, WcOpcode, WcStatus, WrOp};
use snic_testbed::Testbed;
use snic_time::Instant;

/// Most descriptors one `poll` moves per NIC before it looks at CQs again.
const DMA_BUDGET: usize = 4096;

impl Hosts {
    pub(super) fn new_op(&mut self, waiting: u64, now: Instant) -> usize {
        let status = (waiting == 0).then_some(Ok(now));
        self.ops.push(Op { waiting, status });
        self.ops.len() - 1
    }

    pub(super) fn start_op(
        &mut self,
        tb: &mut Testbed,
        now: Instant,
        action: &Action,
    ) -> Result<super::OpId, String> {
        let op = match action {
            Action::PostSend { qp, wrs } => self.post_send(tb, now, qp, wrs),
            Action::PostRecv { qp, bufs } => self.post_recv(tb, now, qp, bufs),
            Action::Dma { queue, dir, descs } => self.dma(tb, now, queue, *dir, descs),
            Action::Kernel { nic, kernel, args } => self.kernel(tb, now, nic, kernel, args),
            _ => Err("not a host operation".into()),
        }?;
        Ok(super::OpId(op))
    }

    /// The host, QP name and QPN of `HOST.QP`.
    fn qp(&self, qp: &str) -> Result<(String, String, u32, bool), String> {
        let (h, q) = util::split_obj(qp)?;
        let host = self.hosts.get(h).ok_or_else(|| format!("no host {h}"))?;
        let p = host.qps.get(q).ok_or_else(|| format!("host {h} has no QP {q}"))?;
        Ok((h.to_string(), q.to_string(), p.qpn, p.sig_all))
    }

    fn sge(&self, s: &str, host: &str, default_len: Option<u64>) -> Result<Sge, String> {
        let r = self.resolve(s, Some(host), None)?;
        if r.node != Some(self.hosts[host].node) {
            return Err(format!("local buffer {s:?} is not on the QP's NIC"));
        }
        let mr = r.mr.ok_or_else(|| format!("local buffer {s:?}: no MR covers it"))?;
        let len = if r.explicit { r.len } else { default_len.map_or(r.len, |d| d.min(r.len)) };
        let len = u32::try_from(len)
            .map_err(|_| format!("local buffer {s:?}: {len} bytes is too long for an SGE"))?;
        Ok(Sge { addr: r.addr, len, lkey: mr.lkey })
    }

    fn remote(&self, s: &str) -> Result<Remote, String> {
        let r = self.resolve(s, None, None)?;
        let mr = r.mr.ok_or_else(|| format!("remote buffer {s:?}: no MR covers it"))?;
        Ok(Remote { addr: r.addr, rkey: mr.rkey })
    }

    /// The WRs `w` posts (its `repeat` copies); `index` is the WR index of the first.
    fn wrs(&self, host: &str, w: &WrSpec, index: u64) -> Result<Vec<SendWr>, String> {
        let atomic = matches!(w.op, WrKind::CmpSwap | WrKind::FetchAdd);
        let sges = w
            .local
            .iter()
            .map(|s| self.sge(s, host, atomic.then_some(8)))
            .collect::<Result<Vec<_>, _>>()?;
        let remote = || {
            let r = w.remote.as_deref().ok_or_else(|| format!("{:?} needs `remote`", w.op))?;
            self.remote(r)
        };
        let imm = || w.imm.ok_or_else(|| format!("{:?} needs `imm`", w.op));
        let op = match w.op {
            WrKind::Send => WrOp::Send,
            WrKind::SendImm => WrOp::SendImm { imm: imm()? },
            WrKind::SendInv => {
                let mr = w.invalidate.as_deref().ok_or("send_inv needs `invalidate` (HOST.MR)")?;
                let (h, m) = util::split_obj(mr)?;
                let info = self
                    .hosts
                    .get(h)
                    .and_then(|x| x.mrs.get(m))
                    .ok_or_else(|| format!("invalidate: no MR {mr}"))?;
                WrOp::SendInv { rkey: info.info.rkey }
            }
            WrKind::Write => WrOp::Write { remote: remote()? },
            WrKind::WriteImm => WrOp::WriteImm { remote: remote()?, imm: imm()? },
            WrKind::Read => WrOp::Read { remote: remote()? },
            WrKind::CmpSwap => WrOp::CmpSwap {
                remote: remote()?,
                compare: w.compare.unwrap_or(0),
                swap: w.swap.unwrap_or(0),
            },
            WrKind::FetchAdd => WrOp::FetchAdd { remote: remote()?, add: w.add.unwrap_or(0) },
        };
        let total: u64 = sges.iter().map(|s| u64::from(s.len)).sum();
        let mut out = Vec::new();
        for r in 0..u64::from(w.repeat) {
            let moved: Vec<Sge> =
                sges.iter().map(|s| Sge { addr: s.addr + r * u64::from(s.len), ..*s }).collect();
            let shift = |rm: Remote| Remote { addr: rm.addr + r * total, ..rm };
            let op = match op {
                WrOp::Write { remote } => WrOp::Write { remote: shift(remote) },
                WrOp::WriteImm { remote, imm } => WrOp::WriteImm { remote: shift(remote), imm },
                WrOp::Read { remote } => WrOp::Read { remote: shift(remote) },
                WrOp::CmpSwap { remote, compare, swap } => {
                    WrOp::CmpSwap { remote: shift(remote), compare, swap }
                }
                WrOp::FetchAdd { remote, add } => WrOp::FetchAdd { remote: shift(remote), add },
                other => other,
            };
            let sgl = SgList::new(&moved).map_err(|e| e.to_string())?;
            let wr_id = w.wr_id.map_or(index + r, |id| id.wrapping_add(r));
            out.push(
                SendWr::new(wr_id, op, sgl)
                    .signaled(w.signaled)
                    .fence(w.fence)
                    .solicited(w.solicited),
            );
        }
        Ok(out)
    }

    fn post_send(
        &mut self,
        tb: &mut Testbed,
        now: Instant,
        qp: &str,
        specs: &[WrSpec],
    ) -> Result<usize, String> {
        let (host, qname, qpn, sig_all) = self.qp(qp)?;
        let mut wrs = Vec::new();
        for (i, w) in specs.iter().enumerate() {
            let more =
                self.wrs(&host, w, wrs.len() as u64).map_err(|e| format!("{qp}: WR {i}: {e}"))?;
            wrs.extend(more);
        }
        let node = self.hosts[&host].node;
        let nic = tb.nic_mut(node).ok_or_else(|| format!("{qp}: its NIC is not in the testbed"))?;
        nic.rnic
            .post_send_batch(qpn, &wrs, now)
            .map_err(|e| format!("{qp}: post {} WRs: {e}", wrs.len()))?;
        let waiting = wrs.iter().filter(|w| w.signaled || sig_all).count() as u64;
        let op = self.new_op(waiting, now);
        let q = self.pending.entry((node.0, qpn)).or_default();
        q.extend(wrs.iter().map(|w| PendingWr {
            op,
            wr_id: w.wr_id,
            signaled: w.signaled || sig_all,
        }));
        if let Some(p) = self.hosts.get_mut(&host).and_then(|h| h.qps.get_mut(&qname)) {
            p.counters.send_posted += wrs.len() as u64;
        }
        Ok(op)
    }

    fn post_recv(
        &mut self,
        tb: &mut Testbed,
        now: Instant,
        qp: &str,
        bufs: &[String],
    ) -> Result<usize, String> {
        let (host, qname, qpn, _) = self.qp(qp)?;
        let wrs = bufs
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let sge = self.sge(b, &host, None).map_err(|e| format!("{qp}: buffer {i}: {e}"))?;
                Ok(RecvWr { wr_id: i as u64, sgl: SgList::one(sge) })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let node = self.hosts[&host].node;
        let nic = tb.nic_mut(node).ok_or_else(|| format!("{qp}: its NIC is not in the testbed"))?;
        nic.rnic
            .post_recv_batch(qpn, &wrs, now)
            .map_err(|e| format!("{qp}: post {} receives: {e}", wrs.len()))?;
        if let Some(p) = self.hosts.get_mut(&host).and_then(|h| h.qps.get_mut(&qname)) {
            p.counters.recv_posted += wrs.len() as u64;
        }
        Ok(self.new_op(0, now))
    }

    fn dma(
        &mut self,
        tb: &mut Testbed,
        now: Instant,
        queue: &str,
        dir: DmaDir,
        descs: &[DescSpec],
    ) -> Result<usize, String> {
        let (h, q) = util::split_obj(queue)?;
        let host = self.hosts.get(h).ok_or_else(|| format!("no host {h}"))?;
        if host.channels.contains_key(q) {
            return self.dma_chain(tb, now, queue, dir, descs);
        }
        let dq =
            host.dma.get(q).ok_or_else(|| format!("host {h} has no DMA queue or channel {q}"))?;
        let node = host.node;
        let list = self.descriptors(queue, descs)?;
        let di = match dir {
            DmaDir::H2c => 0,
            DmaDir::C2h => 1,
        };
        let outstanding: u32 = dq.waiting[di].iter().map(|w| w.1).sum();
        if outstanding as usize + list.len() > dq.ring_size as usize {
            return Err(format!(
                "{queue}: {} descriptors do not fit the {:?} ring ({} slots, {outstanding} outstanding)",
                list.len(),
                dir,
                dq.ring_size
            ));
        }
        let (ring, size, qid, pidx) =
            (if di == 0 { dq.h2c_ring } else { dq.c2h_ring }, dq.ring_size, dq.qid, dq.pidx[di]);
        let nic_name = host.nic.clone();
        let d =
            tb.nic_mut(node).ok_or_else(|| format!("{queue}: its NIC is not in the testbed"))?;
        for (k, desc) in list.iter().enumerate() {
            let slot = pidx.wrapping_add(k as u32) & (size - 1);
            let addr = ring + u64::from(slot) * DESC_SIZE as u64;
            d.rnic
                .mem_mut()
                .write(addr, &desc.encode())
                .map_err(|e| format!("{queue}: ring: {e}"))?;
        }
        let new_pidx = pidx.wrapping_add(list.len() as u32);
        let eng = self.nics.get_mut(&nic_name).ok_or_else(|| format!("{queue}: no DMA engine"))?;
        let mem = d.rnic.mem_mut();
        std::mem::swap(mem, &mut eng.dma.mem);
        let ddir = if di == 0 { Dir::H2c } else { Dir::C2h };
        eng.dma.doorbell(qid, ddir, new_pidx);
        std::mem::swap(mem, &mut eng.dma.mem);
        let n = list.len() as u64;
        let op = self.new_op(n, now);
        let dq = self.hosts.get_mut(h).and_then(|x| x.dma.get_mut(q)).ok_or("queue vanished")?;
        dq.pidx[di] = new_pidx;
        dq.posted += n;
        if n > 0 {
            dq.waiting[di].push_back((op, n as u32));
        }
        Ok(op)
    }

    /// The descriptors of a dma operation on `HOST.QUEUE` or `HOST.CHANNEL` (single ones,
    /// SOP | EOP, not chained).
    fn descriptors(&self, queue: &str, descs: &[DescSpec]) -> Result<Vec<Descriptor>, String> {
        let (h, _) = util::split_obj(queue)?;
        let node = self.hosts.get(h).ok_or_else(|| format!("no host {h}"))?.node;
        let buf = |s: &str| -> Result<Resolved, String> {
            let r = self.resolve(s, Some(h), Some(node))?;
            if r.node != Some(node) {
                return Err(format!("buffer {s:?} is not on the queue's NIC"));
            }
            Ok(r)
        };
        let mut list = Vec::new();
        for (i, d) in descs.iter().enumerate() {
            let e = |m: String| format!("{queue}: descriptor {i}: {m}");
            let (src, dst) = (buf(&d.src).map_err(e)?, buf(&d.dst).map_err(e)?);
            let len =
                u32::try_from(d.len.0).map_err(|_| e(format!("{} bytes is too long", d.len.0)))?;
            list.push(Descriptor::new(src.addr, dst.addr, len));
        }
        Ok(list)
    }

    /// A dma operation on a channel: the descriptors written as one chain into the channel's
    /// descriptor area (SOP on the first, EOP on the last, CHAIN with `next` on all but the
    /// last), then the channel started on the first. Completes on the channel's
    /// `ChannelDone`, a failed chain included.
    fn dma_chain(
        &mut self,
        tb: &mut Testbed,
        now: Instant,
        chan: &str,
        dir: DmaDir,
        descs: &[DescSpec],
    ) -> Result<usize, String> {
        let (h, c) = util::split_obj(chan)?;
        let host = self.hosts.get(h).ok_or_else(|| format!("no host {h}"))?;
        let ch = host.channels.get(c).ok_or_else(|| format!("host {h} has no DMA channel {c}"))?;
        let want = match dir {
            DmaDir::H2c => Dir::H2c,
            DmaDir::C2h => Dir::C2h,
        };
        if want != ch.dir {
            return Err(format!("{chan}: a {:?} channel cannot run a {dir:?} chain", ch.dir));
        }
        if descs.is_empty() {
            return Err(format!("{chan}: a chain needs at least one descriptor"));
        }
        if descs.len() > ch.max_descs as usize {
            return Err(format!(
                "{chan}: {} descriptors do not fit its area ({} descriptors)",
                descs.len(),
                ch.max_descs
            ));
        }
        if ch.waiting.is_some() {
            return Err(format!("{chan}: the channel is still running a chain"));
        }
        let (node, key, area) = (host.node, ch.key, ch.area);
        let nic_name = host.nic.clone();
        let mut list = self.descriptors(chan, descs)?;
        let last = list.len() - 1;
        for (k, d) in list.iter_mut().enumerate() {
            d.flags = 0;
            if k == 0 {
                d.flags |= flags::SOP;
            }
            if k == last {
                d.flags |= flags::EOP;
            } else {
                d.flags |= flags::CHAIN;
                d.next = area + (k as u64 + 1) * DESC_SIZE as u64;
            }
        }
        let d = tb.nic_mut(node).ok_or_else(|| format!("{chan}: its NIC is not in the testbed"))?;
        for (k, desc) in list.iter().enumerate() {
            d.rnic
                .mem_mut()
                .write(area + k as u64 * DESC_SIZE as u64, &desc.encode())
                .map_err(|e| format!("{chan}: descriptor area: {e}"))?;
        }
        let eng = self.nics.get_mut(&nic_name).ok_or_else(|| format!("{chan}: no DMA engine"))?;
        eng.dma.channel_run(ChannelKey(key), area).map_err(|e| format!("{chan}: {e}"))?;
        let op = self.new_op(1, now);
        let ch =
            self.hosts.get_mut(h).and_then(|x| x.channels.get_mut(c)).ok_or("channel vanished")?;
        ch.runs += 1;
        ch.waiting = Some(op);
        Ok(op)
    }

    /// Drain every CQ into its log; finish post_send operations.
    pub(super) fn poll_cqs(&mut self, tb: &mut Testbed, now: Instant) -> usize {
        let mut work = 0;
        let mut buf = [placeholder(); 64];
        let mut got: Vec<(String, Cqe)> = Vec::new();
        for (name, cq) in &mut self.cqs {
            let Some(d) = tb.nic_mut(cq.node) else { continue };
            loop {
                let n = d.rnic.poll_cq(cq.id, &mut buf).unwrap_or(0);
                for c in &buf[..n] {
                    cq.log.push((now, *c));
                    if c.status != WcStatus::Success {
                        cq.errors += 1;
                    }
                    got.push((name.clone(), *c));
                }
                work += n;
                if n < buf.len() {
                    break;
                }
            }
        }
        for (name, c) in got {
            let node = self.cqs[&name].node;
            self.count_qp(node.0, &c);
            if matches!(c.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
                continue;
            }
            let Some(q) = self.pending.get_mut(&(node.0, c.qpn)) else { continue };
            let Some(pos) = q.iter().position(|p| p.wr_id == c.wr_id) else { continue };
            let done: Vec<PendingWr> = q.drain(..=pos).collect();
            for p in done {
                if !p.signaled && p.wr_id != c.wr_id {
                    continue;
                }
                if let Some(op) = self.ops.get_mut(p.op)
                    && p.signaled
                {
                    op.waiting = op.waiting.saturating_sub(1);
                    if op.waiting == 0 && op.status.is_none() {
                        op.status = Some(Ok(now));
                    }
                }
            }
        }
        work
    }

    fn count_qp(&mut self, node: usize, c: &Cqe) {
        for h in self.hosts.values_mut().filter(|h| h.node.0 == node) {
            if let Some(q) = h.qps.values_mut().find(|q| q.qpn == c.qpn) {
                if matches!(c.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
                    q.counters.recv_cqes += 1;
                } else {
                    q.counters.send_cqes += 1;
                }
                if c.status != WcStatus::Success {
                    q.counters.error_cqes += 1;
                }
                return;
            }
        }
    }

    /// Run every NIC's DMA engine until idle; read the completion rings; finish dma
    /// operations.
    pub(super) fn poll_dma(&mut self, tb: &mut Testbed, now: Instant) -> usize {
        let mut work = 0;
        // (host, queue, completion) and (host, queue, queue error).
        let mut cmpts: Vec<(String, String, Completion)> = Vec::new();
        let mut qerrs: Vec<(String, String, String)> = Vec::new();
        // (host, channel, descriptors, bytes, status) of every chain that finished.
        let mut chans: Vec<(String, String, u32, u64, Status)> = Vec::new();
        for eng in self.nics.values_mut() {
            if eng.queues.is_empty() && eng.channels.is_empty() {
                continue;
            }
            let Some(d) = tb.nic_mut(eng.node) else { continue };
            let mem = d.rnic.mem_mut();
            std::mem::swap(mem, &mut eng.dma.mem);
            loop {
                let n = eng.dma.poll(DMA_BUDGET);
                work += n;
                if n == 0 {
                    break;
                }
            }
            while let Some(ev) = eng.dma.poll_event() {
                match ev {
                    Event::QueueError { qid, status } => {
                        if let Some((h, q)) = eng.queues.get(&qid) {
                            qerrs.push((h.clone(), q.clone(), status.reason().to_string()));
                        }
                    }
                    Event::ChannelDone { key, descs, bytes, status, .. } => {
                        if let Some((h, c)) = eng.channels.get(&key.0) {
                            chans.push((h.clone(), c.clone(), descs, bytes, status));
                        }
                    }
                    Event::Completed { .. } => {}
                }
            }
            for (&qid, (h, q)) in &eng.queues {
                let (Some(idx), Some(cfg)) =
                    (eng.dma.queue_indices(qid), eng.dma.queue_config(qid).copied())
                else {
                    continue;
                };
                let Some(dq) = self.hosts.get(h).and_then(|x| x.dma.get(q)) else { continue };
                let mut c = dq.cmpt_cidx;
                while c != idx.cmpt_pidx {
                    let slot = c & (cfg.cmpt_size - 1);
                    let mut b = [0u8; CMPT_SIZE];
                    if eng
                        .dma
                        .mem
                        .read(cfg.cmpt_ring + u64::from(slot) * CMPT_SIZE as u64, &mut b)
                        .is_err()
                    {
                        break;
                    }
                    cmpts.push((h.clone(), q.clone(), Completion::decode(&b)));
                    c = c.wrapping_add(1);
                }
                if c != dq.cmpt_cidx {
                    eng.dma.cmpt_doorbell(qid, c);
                    if let Some(dq) = self.hosts.get_mut(h).and_then(|x| x.dma.get_mut(q)) {
                        dq.cmpt_cidx = c;
                    }
                }
            }
            std::mem::swap(mem, &mut eng.dma.mem);
            debug_assert_eq!(eng.dma.mem.regions().count(), 0, "the NIC's memory went back");
        }
        work += cmpts.len() + chans.len();
        for (h, c, descs, bytes, status) in chans {
            let Some(ch) = self.hosts.get_mut(&h).and_then(|x| x.channels.get_mut(&c)) else {
                continue;
            };
            if status == Status::Ok {
                ch.completed += 1;
            } else {
                ch.errors += 1;
            }
            ch.bytes += bytes;
            ch.descs += u64::from(descs);
            if let Some(op) = ch.waiting.take()
                && let Some(o) = self.ops.get_mut(op)
            {
                o.waiting = 0;
                if o.status.is_none() {
                    o.status = Some(Ok(now));
                }
            }
        }
        for (h, q, c) in cmpts {
            let Some(dq) = self.hosts.get_mut(&h).and_then(|x| x.dma.get_mut(&q)) else { continue };
            if c.dir == DIR_QUEUE {
                qerrs.push((
                    h,
                    q,
                    c.status().map_or("queue error".into(), |s| s.reason().to_string()),
                ));
                continue;
            }
            let ok = c.status == 0;
            if ok {
                dq.completed += 1;
                dq.bytes += u64::from(c.len);
            } else {
                dq.errors += 1;
            }
            let Some(front) = dq.waiting.get_mut(usize::from(c.dir)).and_then(|w| w.front_mut())
            else {
                continue;
            };
            front.1 -= 1;
            let (op, left) = *front;
            if left == 0 {
                dq.waiting[usize::from(c.dir)].pop_front();
            }
            if let Some(o) = self.ops.get_mut(op) {
                o.waiting = o.waiting.saturating_sub(1);
                if o.waiting == 0 && o.status.is_none() {
                    o.status = Some(Ok(now));
                }
            }
        }
        for (h, q, why) in qerrs {
            let Some(dq) = self.hosts.get_mut(&h).and_then(|x| x.dma.get_mut(&q)) else { continue };
            for w in &mut dq.waiting {
                for (op, _) in w.drain(..) {
                    if let Some(o) = self.ops.get_mut(op)
                        && o.status.is_none()
                    {
                        o.status = Some(Err(format!("DMA queue {h}.{q}: {why}")));
                    }
                }
            }
        }
        work
    }
}

/// A CQE for `poll_cq`'s output array (never read unless written).
fn placeholder() -> Cqe {
    Cqe {
        wr_id: 0,
        status: WcStatus::FatalErr,
        opcode: WcOpcode::Send,
        byte_len: 0,
        qpn: 0,
        src_qp: 0,
        imm: None,
        invalidated_rkey: None,
    }
}
