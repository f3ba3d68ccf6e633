//! A mixed batch (UDP, TCP, VXLAN, RoCEv2 with good and bad ICRC, truncated, garbage) through
//! parse -> classify -> l2fwd, asserting classes, RoCE fields, egress ports and exact drop
//! counters; the per-stage invariant `in == out + drops`; tracing; RSS over inner headers.

use core::net::IpAddr;
use proptest::prelude::*;
use snic_pipeline::stages::classify;
use snic_pipeline::testing::frames::*;
use snic_pipeline::{
    Batch, Class, ClassCounts, Counters, DropReason, PacketBuf, Pipeline, PipelineConfig, PortId,
    StageSpec, TraceWhat,
};
use snic_time::Instant;
use snic_wire::Error as WireError;
use snic_wire::stack::Layer;

const TRUNC: DropReason = DropReason::Malformed(WireError::Truncated { need: 0, got: 0 });

fn push(b: &mut Batch, port: u16, frame: &[u8]) {
    b.push_frame(frame).unwrap().meta.ingress = PortId(port);
}

/// What each packet of the mixed batch is, in order.
fn mixed() -> (Batch, Vec<&'static str>) {
    let mut b = Batch::new(32);
    let mut names = Vec::new();
    let mut add = |b: &mut Batch, name, port, f: Vec<u8>| {
        push(b, port, &f);
        names.push(name);
    };
    add(&mut b, "udp", 0, udp64(1234, 5678));
    add(&mut b, "tcp", 1, tcp_frame(40000, 80, b"GET / HTTP/1.1\r\n\r\n"));
    add(&mut b, "vxlan", 0, vxlan(42, &tcp_frame(40001, 443, b"inner")));
    add(&mut b, "roce", 0, roce_write(Write::default(), false));
    add(&mut b, "roce_bad_icrc", 1, roce_write(Write::default(), true));
    // Cut inside the IPv4 header.
    add(&mut b, "truncated_ip", 0, udp64(1, 2)[..24].to_vec());
    // Shorter than an Ethernet header.
    add(&mut b, "runt", 1, vec![0xde, 0xad, 0xbe]);
    // IPv4 EtherType followed by garbage (version nibble 0xf).
    add(&mut b, "garbage", 0, eth(MAC_B, MAC_A, 0x0800, &[0xff; 46]));
    // Well-formed, but from a port with no static egress.
    add(&mut b, "no_egress", 5, udp64(9, 9));
    // UDP to 4791 with an opcode outside RC (UD SEND ONLY, 0x64): parses, but is not RDMA here.
    let mut ud = roce_write(Write::default(), false);
    ud[42] = 0x64;
    add(&mut b, "roce_ud", 1, ud);
    (b, names)
}

fn assert_stage_invariant(c: &Counters) {
    for s in &c.stages {
        assert_eq!(
            s.packets_in + s.created,
            s.packets_out + s.drops.total() + s.held + s.local,
            "stage {}: in {} != out {} + drops {} + held + local",
            s.name,
            s.packets_in,
            s.packets_out,
            s.drops.total()
        );
    }
}

#[test]
fn mixed_batch_through_parse_classify_l2fwd() {
    let mut p = Pipeline::from_strs(&["parse", "classify", "l2fwd"]).unwrap();
    let (mut b, names) = mixed();
    let n = b.len() as u64;
    p.process(Instant::from_secs(1), &mut b);

    // Survivors, in order, with their egress and class.
    let got: Vec<(u64, Option<PortId>, Class)> =
        b.iter().map(|p| (p.meta.seq, p.meta.egress, p.meta.class)).collect();
    let seq = |name: &str| names.iter().position(|n| *n == name).unwrap() as u64 + 1;
    assert_eq!(
        got,
        vec![
            (seq("udp"), Some(PortId(1)), Class::Other),
            (seq("tcp"), Some(PortId(0)), Class::Other),
            (seq("vxlan"), Some(PortId(1)), Class::Other),
            (seq("roce"), Some(PortId(1)), Class::Rdma),
            (seq("roce_ud"), Some(PortId(0)), Class::Other),
        ]
    );

    // The RDMA WRITE's fields.
    let roce = b.packets()[3].roce().expect("roce meta");
    let w = Write::default();
    assert_eq!(roce.ip_src, IpAddr::V4(IP_A));
    assert_eq!(roce.ip_dst, IpAddr::V4(IP_B));
    assert_eq!((roce.udp_src, roce.udp_dst), (w.udp_src, 4791));
    assert_eq!(roce.opcode, 0x0a);
    assert_eq!((roce.se, roce.ack_req), (true, true));
    assert_eq!(roce.dest_qp, w.dest_qp);
    assert_eq!(roce.psn, w.psn);
    assert_eq!(roce.va, Some(w.va));
    assert_eq!(roce.rkey, Some(w.rkey));
    assert_eq!(roce.dma_len, Some(64));
    assert_eq!((roce.msn, roce.syndrome, roce.imm), (None, None, None));
    assert!(roce.icrc_ok);
    // VXLAN: parsed through the tunnel.
    let vx = &b.packets()[2].meta;
    assert_eq!(vx.stack.vni, Some(42));
    assert_eq!(vx.stack.inner.and_then(|h| h.l4).map(|l| l.0), Some(Layer::Tcp));
    assert!(b.packets().iter().all(|p| p.meta.roce.is_none() || p.meta.class == Class::Rdma));

    // Exact drop counters by reason, per stage.
    let c = p.counters();
    assert_stage_invariant(&c);
    let parse = c.stage("parse").unwrap();
    assert_eq!(parse.packets_in, n);
    assert_eq!(parse.drops.get(TRUNC), 2, "truncated_ip and runt");
    assert_eq!(parse.drops.get(DropReason::Malformed(WireError::BadVersion { got: 0 })), 1);
    assert_eq!(parse.drops.total(), 3);
    let cl = c.stage("classify").unwrap();
    assert_eq!(cl.drops.get(DropReason::BadIcrc), 1);
    assert_eq!(cl.drops.total(), 1);
    // Classified, per class, of the 7 packets that got past parse: the good RDMA WRITE and the
    // bad-ICRC one (classified rdma, then dropped) are rdma; udp, tcp, vxlan, no_egress and the
    // UD-opcode RoCE packet are other.
    assert_eq!(cl.packets_in, 7);
    assert_eq!(cl.classes, ClassCounts { rdma: 2, other: 5 });
    assert_eq!(cl.classes.total(), cl.packets_in);
    assert_eq!(c.classified(), ClassCounts { rdma: 2, other: 5 });
    // No other stage classifies.
    assert!(c.stages.iter().filter(|s| s.name != "classify").all(|s| s.classes.is_zero()));
    let l2 = c.stage("l2fwd").unwrap();
    assert_eq!(l2.drops.total(), 0);
    let out = c.stage("output").unwrap();
    assert_eq!(out.drops.get(DropReason::NoEgress), 1);
    assert_eq!(out.drops.total(), 1);
    assert_eq!(out.packets_out, 5);
    assert_eq!(c.total_drops(), n - 5);
    // Ports: rx counted by ingress.
    assert_eq!(c.port(PortId(0)).unwrap().rx_packets, 5);
    assert_eq!(c.port(PortId(1)).unwrap().rx_packets, 4);
    assert_eq!(c.port(PortId(5)).unwrap().rx_packets, 1);

    // JSON names the reasons.
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(v["stages"][0]["drops"]["malformed.truncated"], 2);
    assert_eq!(v["stages"][0]["drops"]["malformed.bad_version"], 1);
    assert_eq!(v["stages"][1]["drops"]["bad_icrc"], 1);
    assert_eq!(v["stages"][1]["classes"], serde_json::json!({"rdma": 2, "other": 5}));
    // Merged across workers like the rest: two pipelines, the same batch each.
    let mut p2 = Pipeline::from_strs(&["parse", "classify", "l2fwd"]).unwrap();
    let (mut b2, _) = mixed();
    p2.process(Instant::from_secs(1), &mut b2);
    let mut merged = c.clone();
    merged.merge(&p2.counters());
    assert_eq!(merged.classified(), ClassCounts { rdma: 4, other: 10 });
    assert_eq!(v["stages"][3]["drops"]["no_egress"], 1);
}

#[test]
fn mark_mode_keeps_bad_icrc_and_pass_mode_keeps_malformed() {
    let mut p = Pipeline::from_strs(&["parse:pass", "classify:mark", "l2fwd"]).unwrap();
    let (mut b, names) = mixed();
    p.process(Instant::ZERO, &mut b);
    let c = p.counters();
    assert_stage_invariant(&c);
    assert_eq!(c.stage("parse").unwrap().drops.total(), 0);
    assert_eq!(c.stage("classify").unwrap().drops.total(), 0);
    // Only the port-5 packet has no egress now; the malformed ones are bridged at L2.
    assert_eq!(c.stage("output").unwrap().drops.get(DropReason::NoEgress), 1);
    assert_eq!(b.len(), names.len() - 1);
    let bad = b.iter().find(|p| p.meta.seq == 5).unwrap();
    assert_eq!(bad.meta.class, Class::Rdma);
    assert_eq!(bad.meta.roce, Some(false));
    assert!(!bad.roce().unwrap().icrc_ok);
    let runt = b.iter().find(|p| p.meta.seq == 7).unwrap();
    assert_eq!(runt.meta.stack.error().map(|e| e.0), Some(Layer::Eth));
    assert_eq!(runt.meta.class, Class::Other);
}

#[test]
fn learning_mode_floods_then_learns() {
    let mut p = Pipeline::from_strs(&["parse", "classify", "l2fwd:learn"]).unwrap();
    let mut b = Batch::new(8);
    push(&mut b, 0, &udp64(1, 2)); // A -> B, B unknown: flood
    push(&mut b, 1, &eth(MAC_A, MAC_B, 0x0800, &ipv4_udp(IP_B, IP_A, 2, 1, b"x", false))); // B -> A
    push(&mut b, 0, &udp64(1, 2)); // A -> B, B known on 1
    push(&mut b, 1, &udp64(1, 2)); // "A -> B" arriving on B's port: would loop
    p.process(Instant::from_secs(1), &mut b);
    let eg: Vec<Option<PortId>> = b.iter().map(|p| p.meta.egress).collect();
    assert_eq!(eg, vec![Some(PortId::FLOOD), Some(PortId(0)), Some(PortId(1))]);
    let c = p.counters();
    assert_stage_invariant(&c);
    assert_eq!(c.stage("l2fwd").unwrap().drops.get(DropReason::LoopPrevented), 1);
}

#[test]
fn trace_says_where_the_packet_went() {
    let mut cfg = PipelineConfig::new(vec![
        StageSpec::Parse { pass_malformed: false },
        StageSpec::Classify { enforce_icrc: true },
        StageSpec::L2Static(vec![]),
    ]);
    cfg.trace = Some("udp dst 4791".into());
    let mut p = Pipeline::build(&cfg, &mut |_: &str| unreachable!("no taps")).unwrap();
    let (mut b, _) = mixed();
    p.process(Instant::ZERO, &mut b);
    let ev: Vec<_> = p.drain_trace().collect();
    let text: Vec<String> = ev.iter().map(|e| e.to_string()).collect();
    // Selected after parse (the filter needs the headers); seq 4 = good RoCE, 5 = bad ICRC,
    // 10 = UD opcode.
    let for_seq = |s: u64| {
        ev.iter().filter(|e| e.seq == s).map(|e| (e.stage.as_str(), &e.what)).collect::<Vec<_>>()
    };
    let good = for_seq(4);
    assert_eq!(good.len(), 3, "{text:#?}");
    assert!(matches!(good[0], ("parse", TraceWhat::Selected { .. })));
    assert!(matches!(good[1], ("classify", TraceWhat::Classified { class: Class::Rdma, .. })));
    assert_eq!(good[2], ("l2fwd", &TraceWhat::Forwarded { port: PortId(1), how: "static" }));
    let bad = for_seq(5);
    assert_eq!(bad.last().unwrap(), &("classify", &TraceWhat::Dropped(DropReason::BadIcrc)));
    assert_eq!(for_seq(10).len(), 3);
    assert!(ev.iter().all(|e| [4, 5, 10].contains(&e.seq)), "{text:#?}");
    assert!(
        text[0].starts_with("#4 parse: selected for trace: eth/ipv4/udp/bth/reth"),
        "{}",
        text[0]
    );
}

#[test]
fn trace_by_sequence_records_parse() {
    let mut cfg = PipelineConfig::from_strs(&["parse", "classify", "l2fwd"]).unwrap();
    cfg.trace = Some("seq 6".into());
    let mut p = Pipeline::build(&cfg, &mut |_: &str| unreachable!("no taps")).unwrap();
    let (mut b, _) = mixed();
    p.process(Instant::ZERO, &mut b);
    let ev: Vec<String> = p.drain_trace().map(|e| e.to_string()).collect();
    assert_eq!(ev.len(), 3, "{ev:#?}");
    assert_eq!(ev[0], "#6 input: selected for trace (not parsed yet)");
    assert!(ev[1].starts_with("#6 parse: parsed as eth [error in ipv4: truncated"), "{}", ev[1]);
    assert_eq!(ev[2], "#6 parse: dropped: malformed.truncated");
}

#[test]
fn tap_captures_at_its_point_in_the_chain() {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let shared = Shared::default();
    let cfg =
        PipelineConfig::from_strs(&["parse", "classify", "tap:after-classify", "l2fwd"]).unwrap();
    let s2 = shared.clone();
    let mut p = Pipeline::build(&cfg, &mut move |path: &str| {
        assert_eq!(path, "after-classify");
        Ok(Box::new(s2.clone()) as Box<dyn std::io::Write + Send>)
    })
    .unwrap();
    let (mut b, _) = mixed();
    p.process(Instant::from_secs(2), &mut b);
    drop(p);
    let bytes = shared.0.lock().unwrap().clone();
    let mut r = pcap_file::pcap::PcapReader::new(&bytes[..]).unwrap();
    let mut n = 0;
    while let Some(pkt) = r.next_packet() {
        pkt.unwrap();
        n += 1;
    }
    // 10 in, 3 malformed, 1 bad ICRC: 6 reach the tap (including the one l2fwd leaves without
    // egress).
    assert_eq!(n, 6);
}

#[test]
fn rss_uses_inner_headers_and_is_symmetric_to_the_plain_flow() {
    let inner = tcp_frame(40001, 443, b"inner");
    let t = snic_pipeline::rss::Toeplitz::default();
    let h = |f: &[u8]| t.hash_packet(f, &snic_wire::stack::parse(f));
    let plain = h(&inner);
    assert_ne!(plain, 0);
    assert_eq!(h(&vxlan(42, &inner)), plain);
    assert_eq!(h(&vxlan(7, &tcp_frame(40001, 443, b"other"))), plain);
    assert_ne!(h(&tcp_frame(40002, 443, b"inner")), plain);
    // Self-consistency check, not a known answer: the packet path (`hash_packet` on a parsed
    // frame) gives the same value as our own `Toeplitz::hash` over the 4-tuple laid out in the
    // Microsoft field order (10.0.0.1:40001 -> 10.0.0.2:443), an input this test builds itself.
    // The hash values themselves are pinned against the Microsoft RSS verification suite in
    // `src/rss.rs` (`microsoft_verification_ipv4`/`_ipv6`).
    let mut input = Vec::new();
    input.extend_from_slice(&IP_A.octets());
    input.extend_from_slice(&IP_B.octets());
    input.extend_from_slice(&40001u16.to_be_bytes());
    input.extend_from_slice(&443u16.to_be_bytes());
    assert_eq!(plain, t.hash(&input));
}

#[test]
fn classify_alone_reads_only_what_parse_found() {
    // A frame that was never parsed (default stack) is Other, without reading bytes.
    let p = PacketBuf::from_frame(&roce_write(Write::default(), false));
    assert_eq!(classify::roce_meta(p.data(), &p.meta.stack), None);
}

proptest! {
    #[test]
    fn one_flow_one_hash(
        payload in proptest::collection::vec(any::<u8>(), 0..200),
        sp in any::<u16>(), dp in any::<u16>(), vni in 0u32..(1 << 24),
        outer_sp in any::<u16>(),
    ) {
        prop_assume!(![4789, 6081, 4791].contains(&dp));
        let t = snic_pipeline::rss::Toeplitz::default();
        let h = |f: &[u8]| t.hash_packet(f, &snic_wire::stack::parse(f));
        let reference = h(&eth(MAC_B, MAC_A, 0x0800, &ipv4_udp(IP_A, IP_B, sp, dp, &[], false)));
        // Any payload, any MAC, any tunnel around it: the same 5-tuple hashes the same.
        let plain = eth(MAC_A, MAC_B, 0x0800, &ipv4_udp(IP_A, IP_B, sp, dp, &payload, false));
        prop_assert_eq!(h(&plain), reference);
        let mut tunnelled = vxlan(vni, &plain);
        // Vary the outer source port (the tunnel's entropy) as a real VTEP does.
        tunnelled[34..36].copy_from_slice(&outer_sp.to_be_bytes());
        prop_assert_eq!(h(&tunnelled), reference);
    }

    #[test]
    fn pipeline_never_panics_and_counts_every_drop(
        frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..120), 1..32),
    ) {
        let mut p = Pipeline::from_strs(&["parse:pass", "classify", "l2fwd:learn"]).unwrap();
        let mut b = Batch::new(32);
        for (i, f) in frames.iter().enumerate() {
            push(&mut b, (i % 3) as u16, f);
        }
        let n = b.len() as u64;
        p.process(Instant::ZERO, &mut b);
        let c = p.counters();
        assert_stage_invariant(&c);
        prop_assert_eq!(b.len() as u64 + c.total_drops(), n);
        prop_assert!(b.iter().all(|p| p.meta.egress.is_some()));
    }
}

#[test]
fn workers_built_from_one_config_merge_to_the_single_pipeline_counts() {
    let cfg = PipelineConfig::from_strs(&["parse", "classify", "l2fwd"]).unwrap();
    let mut no_taps =
        |_: &str| -> std::io::Result<Box<dyn std::io::Write + Send>> { unreachable!() };
    let mut single = Pipeline::build(&cfg, &mut no_taps).unwrap();
    let (mut all, _) = mixed();
    single.process(Instant::ZERO, &mut all);

    // Two workers, each with its own pipeline (moved to a thread: pipelines are Send), each
    // given half of the packets.
    let (whole, _) = mixed();
    let frames: Vec<(u16, Vec<u8>)> =
        whole.iter().map(|p| (p.meta.ingress.0, p.data().to_vec())).collect();
    let mut merged = Counters::default();
    let handles: Vec<_> = frames
        .chunks(frames.len() / 2)
        .map(|part| {
            let part = part.to_vec();
            let mut w = Pipeline::build(&cfg, &mut no_taps).unwrap();
            std::thread::spawn(move || {
                let mut b = Batch::new(32);
                for (port, f) in &part {
                    push(&mut b, *port, f);
                }
                w.process(Instant::ZERO, &mut b);
                w.counters()
            })
        })
        .collect();
    for h in handles {
        merged.merge(&h.join().unwrap());
    }
    assert_eq!(merged, single.counters());
    let table = merged.to_string();
    assert!(table.contains("drop malformed.truncated"), "{table}");
    assert!(table.lines().nth(1).unwrap().starts_with("parse "), "{table}");
}

#[test]
fn trace_filters_on_tunnel_and_address_terms() {
    for (expr, want) in [
        ("vni 42", vec![3]),
        ("layer vxlan", vec![3]),
        ("tcp dst 443", vec![3]),
        ("tcp dst 80 and ingress 1", vec![2]),
        ("ip src 10.0.0.1 and class rdma", vec![4]),
        ("class other and udp dst 4791", vec![10]),
    ] {
        let mut cfg = PipelineConfig::from_strs(&["parse", "classify", "l2fwd"]).unwrap();
        cfg.trace = Some(expr.into());
        let mut p = Pipeline::build(&cfg, &mut |_: &str| unreachable!("no taps")).unwrap();
        let (mut b, _) = mixed();
        p.process(Instant::ZERO, &mut b);
        let mut seqs: Vec<u64> = p.drain_trace().map(|e| e.seq).collect();
        seqs.dedup();
        assert_eq!(seqs, want, "{expr}");
    }
}

/// With more than one worker the runtime's I/O loop walks each frame and hashes it to choose a
/// worker; the parse stage must take that work as done (`meta.parsed`) instead of repeating it,
/// and must still walk frames nobody parsed.
#[test]
fn parse_stage_reuses_a_walk_done_on_receive() {
    let mut p = Pipeline::from_strs(&["parse", "l2fwd"]).unwrap();
    let mut b = Batch::new(4);
    // A valid frame whose metadata says the receive side found it truncated: the parse stage
    // believes the metadata, so it is dropped as malformed.
    push(&mut b, 0, &udp64(1, 2));
    let pkt = &mut b.packets_mut()[0];
    pkt.meta.parsed = true;
    pkt.meta.stack.set_error(Some((Layer::Ipv4, WireError::Truncated { need: 34, got: 20 })));
    pkt.meta.rss_hash = 0x1234_5678;
    // The same frame, not parsed on receive: walked here and forwarded.
    push(&mut b, 0, &udp64(1, 2));
    p.process(Instant::ZERO, &mut b);
    assert_eq!(b.len(), 1);
    assert!(b.packets()[0].meta.parsed);
    assert!(b.packets()[0].meta.stack.is_ok());
    let c = p.counters();
    let parse = c.stage("parse").unwrap();
    assert_eq!(parse.drops.get(TRUNC), 1);
}
