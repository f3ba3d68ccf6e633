//! The `p4` stage in a pipeline: forwarding and drops by reason, replicas as created packets
//! (the stage invariant `in + created == out + drops`), traces, and the control plane over
//! several workers.

use snic_io::p4::P4Program;
use snic_pipeline::{Batch, DropReason, Pipeline, TraceFilter};
use snic_time::Instant;
use std::path::PathBuf;

const PROG: &str = r#"#include <core.p4>
#include <v1model.p4>
header ethernet_t { bit<48> dst; bit<48> src; bit<16> type; }
struct headers_t { ethernet_t eth; }
struct meta_t { }
parser P(packet_in pkt, out headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.eth); verify(hdr.eth.type == 0x800, error.NoMatch); transition accept; }
}
control VC(inout headers_t hdr, inout meta_t m) { apply { } }
control I(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    counter(1, CounterType.packets_and_bytes) seen;
    action fwd(bit<9> port) { sm.egress_spec = port; }
    action drop() { mark_to_drop(sm); }
    action set_mc(bit<16> grp) { sm.mcast_grp = grp; }
    table l2 {
        key = { hdr.eth.dst : exact; }
        actions = { fwd; drop; set_mc; }
        default_action = drop();
    }
    apply { seen.count(0); l2.apply(); hdr.eth.src = 0x0200000000ff; }
}
control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers_t hdr, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.eth); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"#;

struct Files {
    _dir: tempfile::TempDir,
    prog: PathBuf,
    entries: PathBuf,
}

fn files(entries: &str) -> Files {
    files_with(PROG, entries)
}

fn files_with(src: &str, entries: &str) -> Files {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("l2.p4");
    std::fs::write(&prog, src).unwrap();
    let e = dir.path().join("entries.txt");
    std::fs::write(&e, entries).unwrap();
    Files { prog, entries: e, _dir: dir }
}

fn frame(dst: u64, ty: u16) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst.to_be_bytes()[2..]);
    f.extend_from_slice(&[2, 0, 0, 0, 0, 1]);
    f.extend_from_slice(&ty.to_be_bytes());
    f.resize(60, 0);
    f
}

fn pipeline(prog: &P4Program, k: usize) -> Pipeline {
    let mut p = Pipeline::new();
    p.push(Box::new(prog.stage(k).unwrap()));
    p
}

fn run(p: &mut Pipeline, frames: &[Vec<u8>]) -> Vec<(u16, Vec<u8>)> {
    let mut b = Batch::new(64);
    for f in frames {
        b.push_frame(f).unwrap();
    }
    p.process(Instant::from_secs(1), &mut b);
    b.iter().map(|x| (x.meta.egress.unwrap().0, x.data().to_vec())).collect()
}

#[test]
fn forwards_rewrites_and_counts_drops_by_reason() {
    let f = files("# l2\ntable_add l2 fwd 00:00:00:00:00:01 => 1\n");
    let prog = P4Program::load(&f.prog, Some(&f.entries), &[], 1).unwrap();
    assert!(prog.entries_output().contains("handle 0"));
    let mut p = pipeline(&prog, 0);
    let out = run(
        &mut p,
        &[
            frame(1, 0x800),  // forwarded to 1, source rewritten
            frame(2, 0x800),  // no entry: the default drops (p4_drop)
            frame(2, 0x1234), // parser error (verify: NoMatch), then no output (p4_parser_error)
            frame(1, 0x1234), // parser error, but ingress still forwards it
        ],
    );
    assert_eq!(out.iter().map(|o| o.0).collect::<Vec<_>>(), vec![1, 1]);
    assert_eq!(&out[0].1[6..12], &[2, 0, 0, 0, 0, 0xff], "the program's rewrite");
    let c = p.counters();
    let s = c.stage("p4").unwrap();
    assert_eq!((s.packets_in, s.packets_out, s.created), (4, 2, 0));
    assert_eq!(s.drops.get(DropReason::P4Drop), 1);
    assert_eq!(s.drops.get(DropReason::P4ParserError), 1);
    assert!(s.balanced(), "{s:?}");
}

#[test]
fn multicast_replicas_are_created_packets() {
    let f = files(
        "table_add l2 set_mc 0xffffffffffff => 7\nmc_mgrp_create 7\nmc_node_create 0 1 2 3\nmc_node_associate 7 0\n",
    );
    let prog = P4Program::load(&f.prog, Some(&f.entries), &[], 1).unwrap();
    let mut p = pipeline(&prog, 0);
    let out = run(&mut p, &[frame(0xffff_ffff_ffff, 0x800), frame(9, 0x800)]);
    let mut ports: Vec<u16> = out.iter().map(|o| o.0).collect();
    ports.sort_unstable();
    assert_eq!(ports, vec![1, 2, 3]);
    let c = p.counters();
    let s = c.stage("p4").unwrap();
    assert_eq!((s.packets_in, s.created, s.packets_out, s.drops.total()), (2, 2, 3, 1));
    assert!(s.balanced(), "{s:?}");
    assert_eq!(c.created_total(), 2);
}

#[test]
fn replicas_that_find_the_batch_full_are_counted_drops() {
    let f = files(
        "table_add l2 set_mc 0xffffffffffff => 7\nmc_mgrp_create 7\nmc_node_create 0 1 2 3 4\nmc_node_associate 7 0\n",
    );
    let prog = P4Program::load(&f.prog, Some(&f.entries), &[], 1).unwrap();
    let mut p = pipeline(&prog, 0);
    let mut b = Batch::new(2);
    b.push_frame(&frame(0xffff_ffff_ffff, 0x800)).unwrap();
    p.process(Instant::from_secs(1), &mut b);
    assert_eq!(b.len(), 2);
    let c = p.counters();
    let s = c.stage("p4").unwrap();
    assert_eq!((s.created, s.drops.get(DropReason::PipelineFull)), (3, 2));
    assert!(s.balanced(), "{s:?}");
}

#[test]
fn traced_packets_carry_the_programs_trace() {
    let f = files("table_add l2 fwd 00:00:00:00:00:01 => 1\n");
    let prog = P4Program::load(&f.prog, Some(&f.entries), &[], 1).unwrap();
    let mut p = pipeline(&prog, 0);
    p.set_trace_filter(Some(TraceFilter::parse("all").unwrap()));
    run(&mut p, &[frame(1, 0x800)]);
    let events: Vec<String> = p.drain_trace().map(|e| e.to_string()).collect();
    let text = events.join("\n");
    assert!(text.contains("p4: ") && text.contains("l2"), "{text}");
    assert!(text.contains("forwarded to port 1 (p4)"), "{text}");
    assert!(events.len() > 3, "{text}");
}

#[test]
fn control_changes_every_worker_or_none() {
    let f = files("");
    let prog = P4Program::load(&f.prog, Some(&f.entries), &[], 2).unwrap();
    let (mut a, mut b) = (pipeline(&prog, 0), pipeline(&prog, 1));
    assert!(prog.stage(2).is_none());
    let ctl = prog.control();
    assert_eq!(ctl.workers(), 2);
    let text = ctl.apply_text("table_add l2 fwd 00:00:00:00:00:01 => 2").unwrap();
    assert!(text.contains("Entry has been added with handle 0"), "{text}");
    assert_eq!(run(&mut a, &[frame(1, 0x800)])[0].0, 2);
    assert_eq!(run(&mut b, &[frame(1, 0x800), frame(1, 0x800)])[0].0, 2);
    let e = ctl.apply_text("table_add l2 fwd 00:00:00:00:00:01 => 3").unwrap_err();
    assert!(e.contains("exists"), "{e}");
    assert_eq!(run(&mut a, &[frame(1, 0x800)])[0].0, 2, "the refused entry changed nothing");
    let text = ctl.apply_text("counter_read seen 0").unwrap();
    assert_eq!(text, "seen[0]=  BmCounterValue(packets=4, bytes=240)\n", "summed over workers");
    let e = ctl.apply_text("table_add l2 fwd 1 => 3\ntable_frob").unwrap_err();
    assert!(e.contains("line 2"), "{e}");
}

#[test]
fn load_errors_name_the_file() {
    let f = files("table_add l2 fwd 1 => 1\ntable_add l2 nope 2 => 1\n");
    let e = P4Program::load(&f.prog, Some(&f.entries), &[], 1).unwrap_err();
    assert!(e.0.contains("entries.txt: line 2"), "{e}");
    let bad = f.prog.with_file_name("bad.p4");
    std::fs::write(&bad, "control {").unwrap();
    let e = P4Program::load(&bad, None, &[], 1).unwrap_err();
    assert!(e.0.contains("bad.p4"), "{e}");
    let e = P4Program::load(&f.prog.with_file_name("missing.p4"), None, &[], 1).unwrap_err();
    assert!(e.0.contains("missing.p4"), "{e}");
}

/// Any bytes from any port: every packet leaves or counts exactly one drop, copies included.
#[test]
fn any_frames_leave_or_count_one_drop() {
    use rand::{Rng, SeedableRng};
    let f = files(
        "table_add l2 fwd 00:00:00:00:00:01 => 1\ntable_add l2 set_mc 0xffffffffffff => 7\n\
         mc_mgrp_create 7\nmc_node_create 0 0 1 2\nmc_node_associate 7 0\n\
         table_add l2 fwd 00:00:00:00:00:02 => 511\n",
    );
    let prog = P4Program::load(&f.prog, Some(&f.entries), &[], 1).unwrap();
    let mut p = pipeline(&prog, 0);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let (mut sent, mut left) = (0u64, 0u64);
    for _ in 0..40 {
        let mut b = Batch::new(64);
        for _ in 0..rng.gen_range(1..48) {
            let mut fr = frame(rng.gen_range(0..4), if rng.gen_bool(0.8) { 0x800 } else { 0x86dd });
            if rng.gen_bool(0.2) {
                fr[..6].fill(0xff);
            }
            fr.truncate(rng.gen_range(0..fr.len() + 1));
            b.push_frame(&fr).unwrap().meta.ingress = snic_pipeline::PortId(rng.gen_range(0..3));
            sent += 1;
        }
        p.process(Instant::from_secs(1), &mut b);
        assert!(b.iter().all(|x| x.meta.egress.is_some()));
        left += b.len() as u64;
    }
    let c = p.counters();
    let s = c.stage("p4").unwrap();
    assert!(s.balanced(), "{s:?}");
    assert_eq!(left + c.total_drops(), sent + c.created_total(), "{c}");
    assert!(s.created > 0 && s.drops.get(DropReason::P4Drop) > 0, "{s:?}");
    assert!(s.drops.get(DropReason::P4ParserError) > 0, "{s:?}");
}

/// The run configuration takes the stage as a string; one `p4` stage per run.
#[test]
fn runtime_builds_the_stage_from_its_spec_and_refuses_two() {
    use snic_io::runtime::{RunConfig, RunError, Runtime};
    let f = files(
        "table_add l2 set_mc 0xffffffffffff => 7\nmc_mgrp_create 7\nmc_node_create 0 0 1\nmc_node_associate 7 0\n",
    );
    let stage = format!("p4:{},entries={}", f.prog.display(), f.entries.display());
    let cfg = RunConfig::from_toml(&format!(
        "ports = [\"gen:10\", \"null\"]\nstages = [{:?}]\nworkers = 2\n",
        stage
    ))
    .unwrap();
    let rt = Runtime::new(cfg.clone()).unwrap();
    assert!(rt.p4().is_some_and(|p| p.control().workers() == 2));
    let never = std::sync::atomic::AtomicBool::new(false);
    let r = rt.run(&never, &never, |_| {}).unwrap();
    let c = &r.counters;
    // Every generated frame leaves or is one counted drop, copies included.
    assert_eq!(c.port(snic_pipeline::PortId(0)).map_or(0, |p| p.rx_packets), 10);
    assert_eq!(
        c.total_drops() + c.port(snic_pipeline::PortId(1)).map_or(0, |p| p.tx_packets),
        10 + c.created_total()
    );
    let mut two = cfg;
    two.stages.push(stage.parse().unwrap());
    match Runtime::new(two) {
        Err(RunError::Config(why)) => assert!(why.contains("one p4 stage"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// A whole NIC's pipeline takes the stage too, after its `local` stage.
#[test]
fn nic_pipeline_takes_the_p4_stage_after_local() {
    use snic_nic::{Nic, NicConfig};
    let f = files("table_add l2 fwd 00:00:00:00:00:01 => 1\n");
    let stage = format!("p4:{},entries={}", f.prog.display(), f.entries.display());
    let cfg = snic_pipeline::PipelineConfig::from_strs(&["parse", "classify", &stage]).unwrap();
    let prog = P4Program::from_stages(&cfg.stages, 1).unwrap().unwrap();
    let nic = Nic::new(NicConfig {
        mac: snic_wire::ethernet::EthernetAddress([2, 0, 0, 0, 9, 1]),
        ips: vec!["10.9.0.1".parse().unwrap()],
        wire: snic_pipeline::PortId(0),
        neigh: Default::default(),
    });
    let mut p = snic_io::nic::build_pipeline_with(&cfg, &nic, None, Some(&prog)).unwrap();
    assert_eq!(p.stage_names().collect::<Vec<_>>(), ["parse", "classify", "local", "p4"]);
    assert!(snic_io::nic::build_pipeline(&cfg, &nic, None).is_err(), "no program, no stage");
    let mut b = Batch::new(4);
    b.push_frame(&frame(1, 0x800)).unwrap();
    p.process(Instant::from_secs(1), &mut b);
    let c = p.counters();
    let s = c.stage("p4").unwrap();
    assert!(s.balanced(), "{s:?}");
    assert_eq!(s.packets_in, c.stage("local").unwrap().packets_out, "{c}");
}

/// Digests without a controller listening: each is counted as an error of the stage and traced, none kept.
#[test]
fn digests_are_counted_not_kept() {
    let src = PROG.replace("seen.count(0);", "seen.count(0); digest<bit<48>>(1, hdr.eth.dst);");
    let f = files_with(&src, "table_add l2 fwd 00:00:00:00:00:01 => 1\n");
    let prog = P4Program::load(&f.prog, Some(&f.entries), &[], 1).unwrap();
    let mut p = pipeline(&prog, 0);
    p.set_trace_filter(Some(TraceFilter::parse("seq 2").unwrap()));
    assert_eq!(run(&mut p, &[frame(1, 0x800), frame(1, 0x800), frame(9, 0x800)]).len(), 2);
    let c = p.counters();
    assert_eq!(c.stage("p4").unwrap().errors, 3);
    let text: Vec<String> = p.drain_trace().map(|e| e.to_string()).collect();
    assert!(text.iter().any(|l| l.contains("digest 0 [1] (no receiver)")), "{text:?}");
}
