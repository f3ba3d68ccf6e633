//! Building the hosts: regions, PDs, MRs, CQs, QPs (connected in RC pairs), DMA queues.

use super::{
    CqLog, DmaChannel, DmaQueue, Host, Hosts, Mr, NicEngines, Qp, QpCounters, Region, kind, util,
};
use crate::load::Loaded;
use crate::schema::DmaDir;
use crate::schema::{AccessFlag, HostSpec, QpSpec};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use snic_dma::desc::{CMPT_SIZE, DESC_SIZE, MAX_CHAIN};
use snic_dma::engine::MAX_RING;
use snic_dma::{
    AddressSpace, ChannelConfig, ChannelKey, Dir, DmaEngine, MemKind, Mode, NIC_OWNER, Notify,
    QueueConfig,
};
use snic_rdma::{Access, Mtu, QpAttr, QpInit, QpState, psn};
use snic_testbed::{NicDevice, NodeId, Testbed};
use std::collections::{BTreeMap, VecDeque};

pub(super) fn access(flags: &[AccessFlag]) -> Access {
    flags.iter().fold(Access::NONE, |a, f| {
        a | match f {
            AccessFlag::LocalWrite => Access::LOCAL_WRITE,
            AccessFlag::RemoteWrite => Access::REMOTE_WRITE,
            AccessFlag::RemoteRead => Access::REMOTE_READ,
            AccessFlag::RemoteAtomic => Access::REMOTE_ATOMIC,
        }
    })
}

fn nic_mut<'a>(tb: &'a mut Testbed, node: NodeId, name: &str) -> Result<&'a mut NicDevice, String> {
    tb.nic_mut(node).ok_or_else(|| format!("{name} is not a NIC with a RoCE engine"))
}

pub(super) fn build(
    loaded: &Loaded,
    seed: u64,
    tb: &mut Testbed,
    nics: &BTreeMap<String, NodeId>,
) -> Result<Hosts, String> {
    let mut hosts = Hosts::empty();
    for (name, &node) in nics {
        if tb.nic(node).is_some() {
            hosts.nics.insert(
                name.clone(),
                NicEngines {
                    node,
                    dma: DmaEngine::new(AddressSpace::new()),
                    kernels: snic_compute::Kernels::with_builtins(),
                    queues: BTreeMap::new(),
                    channels: BTreeMap::new(),
                },
            );
        }
    }
    for spec in &loaded.scenario.hosts {
        build_host(&mut hosts, loaded, tb, nics, spec)
            .map_err(|e| format!("host {}: {e}", spec.name))?;
    }
    connect(&mut hosts, loaded, seed, tb)?;
    Ok(hosts)
}

fn build_host(
    hosts: &mut Hosts,
    loaded: &Loaded,
    tb: &mut Testbed,
    nics: &BTreeMap<String, NodeId>,
    spec: &HostSpec,
) -> Result<(), String> {
    if hosts.hosts.contains_key(&spec.name) {
        return Err("a second host of that name".into());
    }
    let node = *nics.get(&spec.nic).ok_or_else(|| format!("no NIC {}", spec.nic))?;
    let d = nic_mut(tb, node, &spec.nic)?;
    let mut host = Host {
        nic: spec.nic.clone(),
        node,
        regions: BTreeMap::new(),
        pds: BTreeMap::new(),
        mrs: BTreeMap::new(),
        qps: BTreeMap::new(),
        dma: BTreeMap::new(),
        channels: BTreeMap::new(),
    };
    for r in &spec.regions {
        let what = format!("region {}", r.name);
        if host.regions.contains_key(&r.name) {
            return Err(format!("{what}: a second region of that name"));
        }
        let size = r.size.0;
        let len = usize::try_from(size).map_err(|_| format!("{what}: too large"))?;
        let addr = d
            .rnic
            .alloc_buf(kind(r.place), size, r.align.0)
            .map_err(|e| format!("{what}: {size} bytes in {} memory: {e}", kind(r.place).name()))?;
        let bytes = util::content_bytes(&r.init, len, &loaded.dir)
            .map_err(|e| format!("{what}: init: {e}"))?;
        d.rnic.mem_mut().write(addr, &bytes).map_err(|e| format!("{what}: {e}"))?;
        host.regions.insert(r.name.clone(), Region { addr, size });
    }
    for p in &spec.pds {
        let pd = d.rnic.alloc_pd();
        host.pds.insert(p.clone(), pd);
    }
    let pd_of = |host: &Host, pd: &str, what: &str| {
        host.pds.get(pd).copied().ok_or_else(|| format!("{what}: no PD {pd}"))
    };
    for m in &spec.mrs {
        let what = format!("MR {}", m.name);
        if host.mrs.contains_key(&m.name) || host.regions.contains_key(&m.name) {
            return Err(format!("{what}: the name is taken by another MR or a region"));
        }
        let r =
            host.regions.get(&m.region).ok_or_else(|| format!("{what}: no region {}", m.region))?;
        let off = m.offset.0;
        let len = m.len.map_or(r.size.saturating_sub(off), |l| l.0);
        if off.checked_add(len).is_none_or(|e| e > r.size) {
            return Err(format!(
                "{what}: {len} bytes at offset {off} run past region {} ({} bytes)",
                m.region, r.size
            ));
        }
        let pd = pd_of(&host, &m.pd, &what)?;
        let info = d
            .rnic
            .reg_mr(pd, r.addr + off, len, access(&m.access))
            .map_err(|e| format!("{what}: {e}"))?;
        host.mrs.insert(m.name.clone(), Mr { info });
    }
    for c in &spec.cqs {
        let key = format!("{}.{}", spec.name, c.name);
        if hosts.cqs.contains_key(&key) {
            return Err(format!("CQ {}: a second CQ of that name", c.name));
        }
        let id = d.rnic.create_cq(c.depth as usize);
        hosts.cqs.insert(key, CqLog { node, id, log: Vec::new(), errors: 0 });
    }
    for q in &spec.qps {
        let what = format!("QP {}", q.name);
        if host.qps.contains_key(&q.name) {
            return Err(format!("{what}: a second QP of that name"));
        }
        let cq = |name: &str| {
            hosts
                .cqs
                .get(&format!("{}.{name}", spec.name))
                .map(|c| c.id)
                .ok_or_else(|| format!("{what}: no CQ {name}"))
        };
        let init = QpInit {
            pd: pd_of(&host, &q.pd, &what)?,
            send_cq: cq(&q.send_cq)?,
            recv_cq: cq(q.recv_cq.as_deref().unwrap_or(&q.send_cq))?,
            srq: None,
            max_send_wr: q.sq_depth,
            max_recv_wr: q.rq_depth,
            placement: kind(q.rings),
            sq_sig_all: q.sig_all,
        };
        let qpn = d.rnic.create_qp(init).map_err(|e| format!("{what}: {e}"))?;
        host.qps.insert(
            q.name.clone(),
            Qp { qpn, sig_all: q.sig_all, counters: QpCounters::default() },
        );
    }
    for dq in &spec.dma {
        let what = format!("DMA queue {}", dq.name);
        if host.dma.contains_key(&dq.name) {
            return Err(format!("{what}: a second queue of that name"));
        }
        let ring_size = dq.ring_size;
        if !ring_size.is_power_of_two() || !(2..=MAX_RING).contains(&ring_size) {
            return Err(format!(
                "{what}: ring_size {ring_size} is not a power of two in 2..={MAX_RING}"
            ));
        }
        let cmpt_size = (ring_size * 2).min(MAX_RING);
        let ring = u64::from(ring_size) * DESC_SIZE as u64;
        let bytes = 2 * ring + u64::from(cmpt_size) * CMPT_SIZE as u64;
        let base = d
            .rnic
            .alloc_buf(kind(dq.rings), bytes, 4096)
            .map_err(|e| format!("{what}: rings in {} memory: {e}", kind(dq.rings).name()))?;
        let eng = hosts
            .nics
            .get_mut(&spec.nic)
            .ok_or_else(|| format!("{what}: NIC {} has no DMA engine", spec.nic))?;
        let qid = match dq.qid {
            Some(q) => q,
            None => (0..snic_dma::engine::MAX_QUEUES)
                .find(|q| !eng.queues.contains_key(q))
                .ok_or_else(|| format!("{what}: no free queue id"))?,
        };
        if let Some((h, n)) = eng.queues.get(&qid) {
            return Err(format!("{what}: queue id {qid} is taken by {h}.{n}"));
        }
        let cfg = QueueConfig {
            owner: NIC_OWNER,
            mode: Mode::Mm,
            ring_size,
            cmpt_size,
            h2c_ring: base,
            c2h_ring: base + ring,
            cmpt_ring: base + 2 * ring,
            align: 1,
            notify: Notify::Poll,
            stream_to: None,
        };
        let mem = d.rnic.mem_mut();
        std::mem::swap(mem, &mut eng.dma.mem);
        let r = eng.dma.add_queue(qid, cfg).and_then(|()| eng.dma.start_queue(qid));
        std::mem::swap(mem, &mut eng.dma.mem);
        r.map_err(|e| format!("{what}: {e}"))?;
        eng.queues.insert(qid, (spec.name.clone(), dq.name.clone()));
        host.dma.insert(
            dq.name.clone(),
            DmaQueue {
                qid,
                ring_size,
                h2c_ring: cfg.h2c_ring,
                c2h_ring: cfg.c2h_ring,
                pidx: [0; 2],
                cmpt_cidx: 0,
                posted: 0,
                completed: 0,
                errors: 0,
                bytes: 0,
                waiting: [VecDeque::new(), VecDeque::new()],
            },
        );
    }
    for c in &spec.channels {
        let what = format!("DMA channel {}", c.name);
        if host.dma.contains_key(&c.name) || host.channels.contains_key(&c.name) {
            return Err(format!("{what}: the name is taken by another DMA queue or channel"));
        }
        if !(1..=MAX_CHAIN).contains(&c.descs) {
            return Err(format!("{what}: descs {} is not in 1..={MAX_CHAIN}", c.descs));
        }
        let bytes = u64::from(c.descs) * DESC_SIZE as u64;
        let area = d
            .rnic
            .alloc_buf(MemKind::Host, bytes, 4096)
            .map_err(|e| format!("{what}: descriptor area in host memory: {e}"))?;
        let eng = hosts
            .nics
            .get_mut(&spec.nic)
            .ok_or_else(|| format!("{what}: NIC {} has no DMA engine", spec.nic))?;
        let key = match c.key {
            Some(k) => k,
            None => (0..=u32::MAX)
                .find(|k| !eng.channels.contains_key(k))
                .ok_or_else(|| format!("{what}: no free channel key"))?,
        };
        if let Some((h, n)) = eng.channels.get(&key) {
            return Err(format!("{what}: channel key {key} is taken by {h}.{n}"));
        }
        let dir = match c.dir {
            DmaDir::H2c => Dir::H2c,
            DmaDir::C2h => Dir::C2h,
        };
        let cfg = ChannelConfig { owner: NIC_OWNER, dir, align: 1, notify: Notify::Poll };
        eng.dma.add_channel(ChannelKey(key), cfg).map_err(|e| format!("{what}: {e}"))?;
        eng.channels.insert(key, (spec.name.clone(), c.name.clone()));
        host.channels.insert(
            c.name.clone(),
            DmaChannel {
                key,
                dir,
                max_descs: c.descs,
                area,
                runs: 0,
                completed: 0,
                errors: 0,
                bytes: 0,
                descs: 0,
                waiting: None,
            },
        );
    }
    hosts.hosts.insert(spec.name.clone(), host);
    Ok(())
}

/// Connect every QP that names a peer (or is named by one) to it, RC, to RTS; initial PSNs
/// come from the run's seed.
fn connect(hosts: &mut Hosts, loaded: &Loaded, seed: u64, tb: &mut Testbed) -> Result<(), String> {
    let specs: BTreeMap<(String, String), &QpSpec> = loaded
        .scenario
        .hosts
        .iter()
        .flat_map(|h| h.qps.iter().map(move |q| ((h.name.clone(), q.name.clone()), q)))
        .collect();
    // Pairs, each once, in file order.
    let mut pairs: Vec<((String, String), (String, String))> = Vec::new();
    for (key, q) in &specs {
        let Some(peer) = &q.peer else { continue };
        let (ph, pq) =
            util::split_obj(peer).map_err(|e| format!("QP {}.{}: peer: {e}", key.0, key.1))?;
        let pkey = (ph.to_string(), pq.to_string());
        let Some(pspec) = specs.get(&pkey) else {
            return Err(format!("QP {}.{}: no peer QP {peer}", key.0, key.1));
        };
        if pkey == *key {
            return Err(format!("QP {}.{} names itself as its peer", key.0, key.1));
        }
        if let Some(back) = &pspec.peer
            && back.trim() != format!("{}.{}", key.0, key.1)
        {
            return Err(format!(
                "QP {}.{} names {peer} as its peer, but {peer} names {back}",
                key.0, key.1
            ));
        }
        if let Some((a, b)) =
            pairs.iter().find(|(a, b)| *a == pkey || *b == pkey || *a == *key || *b == *key)
        {
            let same = (*a == *key && *b == pkey) || (*a == pkey && *b == *key);
            if !same {
                return Err(format!(
                    "QP {}.{} and {peer}: one of them is already connected ({}.{} - {}.{})",
                    key.0, key.1, a.0, a.1, b.0, b.1
                ));
            }
            continue;
        }
        pairs.push((key.clone(), pkey));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for (a, b) in pairs {
        let psns = [rng.next_u32() & psn::MASK, rng.next_u32() & psn::MASK];
        let ends = [&a, &b];
        for i in 0..2 {
            let (me, peer) = (ends[i], ends[1 - i]);
            let spec = specs[me];
            let my_host = &hosts.hosts[&me.0];
            let peer_host = &hosts.hosts[&peer.0];
            let peer_qpn = peer_host.qps[&peer.1].qpn;
            let peer_ip = tb
                .nic(peer_host.node)
                .map(|d| d.rnic.config().local_ip)
                .ok_or_else(|| format!("QP {}.{}: its NIC is gone", peer.0, peer.1))?;
            let what = format!("QP {}.{} (to {}.{})", me.0, me.1, peer.0, peer.1);
            let mtu = Mtu::from_bytes(spec.mtu).ok_or_else(|| {
                format!("{what}: MTU {} is not 256, 512, 1024, 2048 or 4096", spec.mtu)
            })?;
            let attr = QpAttr {
                state: QpState::Rts,
                access: access(&spec.access),
                path_mtu: mtu,
                dest_qpn: peer_qpn,
                rq_psn: psns[1 - i],
                sq_psn: psns[i],
                remote: Some(peer_ip),
                timeout: spec.timeout,
                retry_cnt: spec.retry_cnt,
                rnr_retry: spec.rnr_retry,
                min_rnr_timer: spec.min_rnr_timer,
                max_rd_atomic: spec.max_rd_atomic,
                max_dest_rd_atomic: spec.max_rd_atomic,
            };
            let qpn = my_host.qps[&me.1].qpn;
            let node = my_host.node;
            let now = tb.now();
            nic_mut(tb, node, &my_host.nic)?
                .rnic
                .connect_rc(qpn, &attr, now)
                .map_err(|e| format!("{what}: {e}"))?;
        }
    }
    Ok(())
}
