//! Fuzz target `nic`: arbitrary frames into a NIC's pipeline (parse, classify, local) and what
//! the pipeline delivers to the device through `snic_nic::Nic::deliver`, with an RDMA engine
//! whose QP is connected to the address the frames may come from.
//!
//! Input: byte 0 says whether classify enforces the ICRC (bit 0) and picks the NIC's
//! addresses (bit 1: IPv4 only, else IPv4 and IPv6); then frames, each as `length (2 bytes
//! LE)`, `bytes` (a short last frame takes what is left), in batches of up to 8 at increasing
//! times; after each batch the NIC's timers run and `Nic::transmit` drains what it sends.
//!
//! Checked, besides "never panics": for the `local` stage `packets_in == packets_out + local +
//! drops`; every packet the pipeline delivered is taken by the engine or the neighbour table
//! (`roce_rx + neigh_rx` moves by the number delivered, `local_unknown` stays 0: the stage and
//! `deliver` agree); every frame `transmit` adds leaves by the wire port, at most
//! `snic_nic::MAX_FRAME` bytes, and starts with the NIC's MAC as its source.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_dma::MemKind;
use snic_nic::neigh::NeighConfig;
use snic_nic::{MAX_FRAME, Nic, NicConfig};
use snic_pipeline::{Batch, Pipeline, PortId};
use snic_rdma::testing::{EndOpts, connect_qp};
use snic_rdma::{Access, QpAttr, Remote, Rnic, RnicConfig, SendWr, SgList, Sge, WrOp};
use snic_time::Instant;
use snic_wire::ethernet::EthernetAddress;
use std::net::IpAddr;

const MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x0b]);
const BATCH: usize = 8;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, mut rest)) = data.split_first() else { return };
    let ours: IpAddr = "10.0.0.2".parse().expect("address");
    let ours6: IpAddr = "fd00::2".parse().expect("address");
    let ips = if sel & 2 != 0 { vec![ours] } else { vec![ours, ours6] };
    let classify = if sel & 1 != 0 { "classify" } else { "classify:mark" };
    let mut p = Pipeline::from_strs(&["parse", classify]).expect("fixed stages");
    let mut nic = Nic::new(NicConfig {
        mac: MAC,
        ips: ips.clone(),
        wire: PortId(0),
        neigh: NeighConfig::default(),
    });
    p.push(Box::new(nic.local_stage()));
    // An engine with one QP connected to 10.0.0.1, so well-formed RoCE can reach a QP.
    let opts = EndOpts { host_pool: 1 << 20, on_chip: 0, on_board: 0, ..EndOpts::default() };
    let cfg = RnicConfig { local_ip: ours, more_ips: ips[1..].to_vec(), ..opts.config(2) };
    let mut rnic = Rnic::new(cfg).expect("engine");
    let pd = rnic.alloc_pd();
    let cq = rnic.create_cq(64);
    let qpn = rnic.create_qp(opts.qp_init(pd, cq, cq)).expect("qp");
    let peer = "10.0.0.1".parse().expect("address");
    connect_qp(&mut rnic, qpn, 0x11, peer, 0, 0x123456, QpAttr::default());
    // Work outstanding, so the engine sends (and its next hop must be resolved).
    let buf = rnic.alloc_buf(MemKind::Host, 4096, 64).expect("buffer");
    let mr = rnic.reg_mr(pd, buf, 4096, Access::ALL).expect("mr");
    let sgl = SgList::one(Sge { addr: buf, len: 4096, lkey: mr.lkey });
    let wr = SendWr::new(1, WrOp::Write { remote: Remote { addr: 0x1000, rkey: 1 } }, sgl);
    rnic.post_send(qpn, &wr, Instant::ZERO).expect("post");

    let mut batch = Batch::new(BATCH);
    let mut local = Batch::new(snic_pipeline::MAX_BATCH);
    let mut tx = Batch::new(snic_pipeline::MAX_BATCH);
    let mut t = 0u64;
    let mut delivered = 0u64;
    while !rest.is_empty() {
        batch.clear();
        while !batch.is_full() && rest.len() >= 2 {
            let len = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
            batch.push_frame(&rest[2..2 + len]).expect("batch not full");
            rest = &rest[2 + len..];
        }
        if batch.is_empty() {
            break;
        }
        t += 1_000_000;
        let now = Instant::from_nanos(t);
        p.process(now, &mut batch);
        while p.local_pending() > 0 {
            p.take_local(&mut local);
            delivered += local.len() as u64;
            nic.deliver(now, &mut local, &mut rnic);
        }
        if rnic.poll_timeout().is_some_and(|d| d <= now) {
            rnic.handle_timeout(now);
        }
        if nic.poll_timeout().is_some_and(|d| d <= now) {
            nic.handle_timeout(now);
        }
        for _ in 0..64 {
            tx.clear();
            if nic.transmit(now, &mut rnic, &mut tx) == 0 {
                break;
            }
            for f in tx.iter() {
                assert_eq!(f.meta.egress, Some(PortId(0)), "a NIC frame not for the wire");
                assert!(f.len() <= MAX_FRAME && f.len() >= 14, "frame of {} bytes", f.len());
                assert_eq!(&f.data()[6..12], &MAC.0, "source MAC is not the NIC's");
            }
        }
    }
    let c = p.counters();
    let s = c.stages.iter().find(|s| s.name == "local").expect("local stage");
    assert_eq!(s.packets_in, s.packets_out + s.local + s.drops.total(), "local stage: {s:?}");
    assert_eq!(s.local, delivered, "local count vs packets delivered");
    let n = nic.counters();
    assert_eq!(n.local_unknown, 0, "deliver disagreed with the local stage: {n:?}");
    assert_eq!(n.roce_rx + n.neigh_rx, delivered, "{n:?}");
});
