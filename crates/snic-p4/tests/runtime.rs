//! `simple_switch_CLI` commands applied to a running switch: names, keys, priorities, the
//! CLI's answers, refused commands that change nothing, several workers, entries files.

mod common;

use common::{SMALL, compile};
use snic_p4::cli::{Command, parse_line};
use snic_p4::runtime::{ApplyError, FileErrorKind, apply, apply_all, apply_file};
use snic_p4::v1model::{RuntimeError, Switch};

/// Two tables (exact; ternary + lpm with a direct counter), an indexed counter, a register, a
/// meter, multicast.
const RT: &str = r#"#include <core.p4>
#include <v1model.p4>
header ethernet_t { bit<48> dst; bit<48> src; bit<16> type; }
struct headers_t { ethernet_t eth; }
struct meta_t { }
parser P(packet_in pkt, out headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.eth); transition accept; }
}
control VC(inout headers_t hdr, inout meta_t m) { apply { } }
control I(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    counter(4, CounterType.packets_and_bytes) hits;
    register<bit<32>>(4) seen;
    meter(2, MeterType.packets) rate;
    direct_counter(CounterType.packets_and_bytes) acl_hits;
    action fwd(bit<9> port) { sm.egress_spec = port; }
    action drop() { mark_to_drop(sm); }
    action set_mc(bit<16> grp) { sm.mcast_grp = grp; }
    action mirror(bit<32> session) { clone(CloneType.I2E, session); }
    table l2 {
        key = { hdr.eth.dst : exact; }
        actions = { fwd; drop; set_mc; mirror; NoAction; }
        default_action = drop();
    }
    table acl {
        key = { hdr.eth.type : ternary; hdr.eth.src : lpm; }
        actions = { fwd; drop; NoAction; }
        counters = acl_hits;
        default_action = NoAction();
    }
    apply { hits.count(0); seen.write(0, 7); l2.apply(); acl.apply(); }
}
control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers_t hdr, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.eth); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"#;

fn switch(src: &str) -> Switch {
    Switch::new(compile(src)).expect("switch")
}

fn cmd(line: &str) -> Command {
    parse_line(line, 1).expect("parses").expect("a command")
}

fn run(sw: &mut Switch, line: &str) -> Result<String, ApplyError> {
    apply(sw, &cmd(line))
}

fn ok(sw: &mut Switch, line: &str) -> String {
    run(sw, line).unwrap_or_else(|e| panic!("{line}: {e}"))
}

/// An Ethernet frame to `dst` from `src` of type `ty`, 64 bytes.
fn frame(dst: u64, src: u64, ty: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(64);
    f.extend_from_slice(&dst.to_be_bytes()[2..]);
    f.extend_from_slice(&src.to_be_bytes()[2..]);
    f.extend_from_slice(&ty.to_be_bytes());
    f.resize(64, 0xab);
    f
}

fn send(sw: &mut Switch, port: u32, f: &[u8]) -> Vec<u32> {
    let mut out = Vec::new();
    sw.process(port, f, 1_000, &mut out);
    out.iter().map(|(p, _)| *p).collect()
}

/// Everything the control plane can see, to check that a refused command changed nothing.
fn state(sw: &Switch) -> String {
    let mut s = String::new();
    for t in 0..sw.program().tables.len() {
        s.push_str(&format!("{:?} {:?}\n", sw.table_entries(t), sw.table_default(t)));
    }
    s.push_str(&format!("{:?}", sw.mc_groups()));
    s
}

#[test]
fn table_add_by_suffix_forwards_and_prints_the_handle() {
    let mut sw = switch(RT);
    let f = frame(1, 0x10, 0x800);
    assert_eq!(send(&mut sw, 0, &f), Vec::<u32>::new(), "the default action drops");
    let text = ok(&mut sw, "table_add l2 fwd 00:00:00:00:00:01 => 3");
    assert_eq!(
        text,
        "Adding entry to exact match table l2\n\
         match key:           EXACT-00:00:00:00:00:01\n\
         action:              fwd\n\
         runtime data:        00:03\n\
         Entry has been added with handle 0\n"
    );
    assert_eq!(send(&mut sw, 0, &f), vec![3]);
    // Full names work too, and the next handle follows.
    let text = ok(&mut sw, "table_add I.l2 I.fwd 0x2 => 4");
    assert!(text.ends_with("Entry has been added with handle 1\n"), "{text}");
    assert_eq!(send(&mut sw, 0, &frame(2, 0x10, 0x800)), vec![4]);
    assert_eq!(ok(&mut sw, "table_num_entries l2"), "2\n");
}

#[test]
fn dump_modify_delete_and_default() {
    let mut sw = switch(RT);
    ok(&mut sw, "table_add l2 fwd 00:00:00:00:00:01 => 3");
    let dump = ok(&mut sw, "table_dump l2");
    assert!(
        dump.contains(
            "Dumping entry 0x0\nMatch key:\n* hdr.eth.dst         : EXACT     000000000001\n"
        ),
        "{dump}"
    );
    assert!(dump.contains("Action entry: I.fwd - 0003\n"), "{dump}");
    assert!(dump.contains("Dumping default entry\nAction entry: I.drop - \n"), "{dump}");
    let text = ok(&mut sw, "table_modify l2 fwd 0 => 5");
    assert!(text == "Modifying entry 0 for exact match table l2\n", "{text}");
    assert_eq!(send(&mut sw, 0, &frame(1, 0, 0)), vec![5]);
    let entry = ok(&mut sw, "table_dump_entry l2 0");
    assert!(entry.contains("Action entry: I.fwd - 0005"), "{entry}");
    assert_eq!(ok(&mut sw, "table_delete l2 0"), "Deleting entry 0 from l2\n");
    assert_eq!(send(&mut sw, 0, &frame(1, 0, 0)), Vec::<u32>::new());
    let text = ok(&mut sw, "table_set_default l2 fwd 7");
    assert_eq!(
        text,
        "Setting default action of l2\naction:              fwd\nruntime data:        00:07\n"
    );
    assert_eq!(send(&mut sw, 0, &frame(9, 0, 0)), vec![7]);
    ok(&mut sw, "table_reset_default l2");
    assert_eq!(send(&mut sw, 0, &frame(9, 0, 0)), Vec::<u32>::new());
    ok(&mut sw, "table_add l2 fwd 1 => 1");
    ok(&mut sw, "table_clear l2");
    assert_eq!(ok(&mut sw, "table_num_entries l2"), "0\n");
}

#[test]
fn cli_priorities_smaller_wins_and_dump_shows_them_as_given() {
    let mut sw = switch(RT);
    ok(&mut sw, "table_add l2 NoAction 00:00:00:00:00:01 =>");
    // Both match type 0x800 from 10:..; priority 1 beats priority 5 as in BMv2.
    let text = ok(&mut sw, "table_add acl fwd 0x800&&&0xffff 0x100000000000/8 => 2 5");
    assert!(text.starts_with("Adding entry to ternary match table acl\n"), "{text}");
    ok(&mut sw, "table_add acl fwd 0x800&&&0xffff 0x100000000000/4 => 6 1");
    assert_eq!(send(&mut sw, 0, &frame(1, 0x1000_0000_0001, 0x800)), vec![6]);
    let dump = ok(&mut sw, "table_dump acl");
    assert!(dump.contains("Priority: 5\n") && dump.contains("Priority: 1\n"), "{dump}");
    // A priority is required for this table.
    let e = run(&mut sw, "table_add acl fwd 0x800&&&0xffff 0x100000000000/8 =>").unwrap_err();
    assert!(matches!(e, ApplyError::Value(_)), "{e}");
}

/// What a refused command's error must look like.
type Want = fn(&ApplyError) -> bool;

#[test]
fn refused_commands_change_nothing_and_say_why() {
    let mut sw = switch(RT);
    ok(&mut sw, "table_add l2 fwd 1 => 3");
    ok(&mut sw, "mc_mgrp_create 1");
    let before = state(&sw);
    let cases: &[(&str, Want)] = &[
        ("table_add l2 fwd 1 => 4", |e| matches!(e, ApplyError::Refused(RuntimeError::Duplicate))),
        ("table_add nope fwd 1 => 4", |e| matches!(e, ApplyError::NotFound { what: "table", .. })),
        ("table_add l2 frob 1 => 4", |e| matches!(e, ApplyError::NotFound { what: "action", .. })),
        ("table_add l2 fwd 1 => 4 5", |e| matches!(e, ApplyError::Arguments(_))),
        ("table_add l2 fwd 1 2 => 4", |e| matches!(e, ApplyError::Arguments(_))),
        ("table_add l2 fwd 1 => 0x10000", |e| matches!(e, ApplyError::Value(_))),
        ("table_add l2 fwd 1.2.3.4 => 1", |e| matches!(e, ApplyError::Value(_))),
        ("table_delete l2 9", |e| matches!(e, ApplyError::Refused(RuntimeError::NotFound(_)))),
        ("table_modify l2 fwd 9 => 1", |e| matches!(e, ApplyError::Refused(_))),
        ("mc_mgrp_create 1", |e| matches!(e, ApplyError::Refused(RuntimeError::Duplicate))),
        ("mc_node_associate 1 4", |e| matches!(e, ApplyError::Refused(_))),
        ("counter_read seen 0", |e| matches!(e, ApplyError::NotFound { .. })),
        ("register_write seen 9 1", |e| matches!(e, ApplyError::Refused(_))),
        ("register_write seen 0 0x100000000", |e| matches!(e, ApplyError::Refused(_))),
        ("meter_set_rates rate 0 0.5:10", |e| matches!(e, ApplyError::Arguments(_))),
        ("mc_node_create 1 2 | 3", |e| matches!(e, ApplyError::Unsupported(_))),
    ];
    for (line, want) in cases {
        let e = run(&mut sw, line).expect_err(line);
        assert!(want(&e), "{line}: {e:?}");
        assert!(!e.to_string().is_empty());
        assert_eq!(state(&sw), before, "{line} changed something");
    }
}

#[test]
fn ambiguous_suffixes_are_refused() {
    // SMALL's action `fwd` and table `t` are unique; NoAction is exact.
    let mut sw = switch(SMALL);
    ok(&mut sw, "table_add t fwd 1 => 2");
    let src = RT.replace("control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }",
        "control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { table l2 { key = { hdr.eth.src : exact; } actions = { NoAction; } } apply { l2.apply(); } }");
    let mut sw = switch(&src);
    match run(&mut sw, "table_add l2 NoAction 1 =>") {
        Err(ApplyError::Ambiguous { candidates, .. }) => assert_eq!(candidates, ["I.l2", "E.l2"]),
        other => panic!("{other:?}"),
    }
    ok(&mut sw, "table_add E.l2 NoAction 1 =>");
}

#[test]
fn counters_registers_and_meters() {
    let mut sw = switch(RT);
    ok(&mut sw, "table_add l2 fwd 1 => 3");
    ok(&mut sw, "table_add acl NoAction 0&&&0 0/0 => 1");
    for _ in 0..2 {
        send(&mut sw, 0, &frame(1, 0, 0));
    }
    assert_eq!(
        ok(&mut sw, "counter_read hits 0"),
        "hits[0]=  BmCounterValue(packets=2, bytes=128)\n"
    );
    assert_eq!(
        ok(&mut sw, "counter_read acl_hits 0"),
        "this is the direct counter for table I.acl\nacl_hits[0]=  BmCounterValue(packets=2, bytes=128)\n",
        "a direct counter is read by entry handle"
    );
    assert_eq!(ok(&mut sw, "counter_write hits 1 5 500"), "hits[1] has been updated\n");
    assert_eq!(
        ok(&mut sw, "counter_read hits 1"),
        "hits[1]=  BmCounterValue(packets=5, bytes=500)\n"
    );
    ok(&mut sw, "counter_reset hits");
    assert!(ok(&mut sw, "counter_read hits 0").contains("packets=0, bytes=0"));
    assert_eq!(ok(&mut sw, "register_read seen 0"), "seen[0]= 7\n");
    ok(&mut sw, "register_write seen 2 42");
    assert_eq!(ok(&mut sw, "register_read seen"), "seen= 7, 0, 42, 0\n");
    ok(&mut sw, "register_reset seen");
    assert_eq!(ok(&mut sw, "register_read seen 2"), "seen[2]= 0\n");
    assert_eq!(ok(&mut sw, "meter_get_rates rate 1"), "no rates set\n");
    ok(&mut sw, "meter_set_rates rate 1 0.5:10 1:20");
    assert_eq!(
        ok(&mut sw, "meter_get_rates rate 1"),
        "0: info rate = 0.5, burst size = 10\n1: info rate = 1, burst size = 20\n"
    );
    ok(&mut sw, "meter_array_set_rates rate 0.25:5 0.5:5");
    assert!(ok(&mut sw, "meter_get_rates rate 0").starts_with("0: info rate = 0.25"));
    let e = run(&mut sw, "meter_set_rates rate 0 2:10 1:10").unwrap_err();
    assert!(matches!(e, ApplyError::Refused(_)), "committed above peak: {e:?}");
}

#[test]
fn multicast_and_mirroring() {
    let mut sw = switch(RT);
    ok(&mut sw, "table_add l2 set_mc 0xffffffffffff => 1");
    assert_eq!(ok(&mut sw, "mc_mgrp_create 1"), "Creating multicast group 1\n");
    let text = ok(&mut sw, "mc_node_create 0 1 2 3");
    assert_eq!(
        text,
        "Creating node with rid 0 , port map 1110 and lag map \nnode was created with handle 0\n"
    );
    ok(&mut sw, "mc_node_associate 1 0");
    assert_eq!(send(&mut sw, 0, &frame(0xffff_ffff_ffff, 5, 0)), vec![1, 2, 3]);
    let dump = ok(&mut sw, "mc_dump");
    assert!(dump.contains("mgrp(1)\n  -> (L1h=0, rid=0) -> (ports=[1, 2, 3], lags=[])"), "{dump}");
    ok(&mut sw, "mc_node_update 0 4");
    assert_eq!(send(&mut sw, 0, &frame(0xffff_ffff_ffff, 5, 0)), vec![4]);
    ok(&mut sw, "mc_node_dissociate 1 0");
    ok(&mut sw, "mc_node_destroy 0");
    ok(&mut sw, "mc_mgrp_destroy 1");
    assert_eq!(ok(&mut sw, "mirroring_add 5 3"), "");
    assert_eq!(ok(&mut sw, "mirroring_get 5"), "MirroringSessionConfig(port=3, mgid=None)\n");
    ok(&mut sw, "mirroring_delete 5");
    assert!(run(&mut sw, "mirroring_get 5").is_err());
}

/// Found by the `p4_runtime` fuzz target: an ingress clone to a configured mirror session
/// re-parsed the packet into the frame buffer the ingress run had taken (empty), and panicked
/// with an index out of bounds.
#[test]
fn ingress_clone_to_a_mirror_session_does_not_panic() {
    let mut sw = switch(RT);
    ok(&mut sw, "mirroring_add 5 3");
    ok(&mut sw, "table_add l2 mirror 1 => 5");
    let mut out = Vec::new();
    sw.process(0, &frame(1, 2, 0x800), 1_000, &mut out);
    let mut ports: Vec<u32> = out.iter().map(|(p, _)| *p).collect();
    ports.sort_unstable();
    assert_eq!(ports, vec![0, 3], "the packet (egress_spec 0) and its clone");
    assert!(out.iter().all(|(_, f)| f == &frame(1, 2, 0x800)));
}

#[test]
fn recover_keeps_the_control_plane_and_the_switch_runs_on() {
    let mut sw = switch(RT);
    ok(&mut sw, "table_add l2 fwd 1 => 3");
    let before = state(&sw);
    sw.recover();
    assert_eq!(state(&sw), before);
    assert_eq!(send(&mut sw, 0, &frame(1, 0, 0x800)), vec![3]);
}

#[test]
fn info_commands_list_tables_and_actions() {
    let mut sw = switch(RT);
    let t = ok(&mut sw, "show_tables");
    assert!(t.contains("I.l2") && t.contains("mk=hdr.eth.dst(exact, 48)"), "{t}");
    let a = ok(&mut sw, "show_actions");
    assert!(a.contains("I.fwd") && a.contains("port(9)"), "{a}");
    assert!(ok(&mut sw, "table_info acl").contains("I.drop"));
    assert!(ok(&mut sw, "help").contains("table_add"));
}

#[test]
fn several_workers_change_together_and_counters_sum() {
    let mut a = switch(RT);
    let mut b = switch(RT);
    let c = |l: &str| cmd(l);
    apply_all(&mut [&mut a, &mut b], &c("table_add l2 fwd 1 => 3")).unwrap();
    assert_eq!(send(&mut a, 0, &frame(1, 0, 0)), vec![3]);
    assert_eq!(send(&mut b, 0, &frame(1, 0, 0)), vec![3]);
    send(&mut b, 0, &frame(1, 0, 0));
    let text = apply_all(&mut [&mut a, &mut b], &c("counter_read hits 0")).unwrap();
    assert_eq!(text, "hits[0]=  BmCounterValue(packets=3, bytes=192)\n");
    // A refused change reaches neither.
    let e = apply_all(&mut [&mut a, &mut b], &c("table_add l2 fwd 1 => 4")).unwrap_err();
    assert!(matches!(e, ApplyError::Refused(RuntimeError::Duplicate)));
    assert_eq!(state(&a), state(&b));
    // counter_write: the sum reads back what was written.
    apply_all(&mut [&mut a, &mut b], &c("counter_write hits 0 9 90")).unwrap();
    let text = apply_all(&mut [&mut a, &mut b], &c("counter_read hits 0")).unwrap();
    assert!(text.contains("packets=9, bytes=90"), "{text}");
    let h = apply_all(&mut [&mut a, &mut b], &c("mc_node_create 0 1")).unwrap();
    assert!(h.ends_with("handle 0\n"));
    assert!(matches!(apply_all(&mut [], &c("show_tables")), Err(ApplyError::NoSwitch)));
}

#[test]
fn entries_files_stop_at_the_first_error_and_name_the_line() {
    let mut sw = switch(RT);
    let text =
        "# entries\ntable_add l2 fwd 1 => 3\n\ntable_add l2 fwd 1 => 4\ntable_add l2 fwd 2 => 4\n";
    let e = apply_file(&mut sw, text).unwrap_err();
    assert_eq!(e.line, 4);
    assert!(matches!(e.kind, FileErrorKind::Apply(ApplyError::Refused(RuntimeError::Duplicate))));
    assert!(e.to_string().starts_with("line 4: "), "{e}");
    assert!(e.output.contains("handle 0"));
    assert_eq!(sw.table_entries(0).len(), 1, "line 2 stays applied, line 5 never ran");
    // A line that does not parse stops the file before anything is applied.
    let mut sw = switch(RT);
    let e = apply_file(&mut sw, "table_add l2 fwd 1 => 3\ntable_frob\n").unwrap_err();
    assert_eq!(e.line, 2);
    assert!(matches!(e.kind, FileErrorKind::Parse(_)));
    assert!(sw.table_entries(0).is_empty());
    let out = apply_file(&mut sw, "table_add l2 fwd 1 => 3\nmc_mgrp_create 2\n").unwrap();
    assert!(out.ends_with("Creating multicast group 2\n"), "{out}");
}

const PROFILED: &str = r#"#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> k; bit<8> sel; bit<8> res; }
struct headers_t { h_t h; }
struct meta_t { bit<1> drop; }
parser P(packet_in pkt, out headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    value_set<bit<8>>(4) drop_keys;
    state start { pkt.extract(hdr.h); transition select(hdr.h.k) { drop_keys: mark; default: accept; } }
    state mark { m.drop = 1; transition accept; }
}
control VC(inout headers_t hdr, inout meta_t m) { apply { } }
control I(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    action set(bit<8> v, PortId_t p) { hdr.h.res = v; sm.egress_spec = p; }
    action_selector(HashAlgorithm.identity, 16, 8) sel;
    table t {
        key = { hdr.h.k : exact; hdr.h.sel : selector; }
        actions = { set; NoAction; }
        implementation = sel;
    }
    apply { if (m.drop == 1) { mark_to_drop(sm); } else { t.apply(); } }
}
control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers_t hdr, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"#;

#[test]
fn action_profile_and_value_set_commands_program_the_switch() {
    let mut sw = snic_p4::v1model::Switch::new(common::compile(PROFILED)).unwrap();
    let out = snic_p4::runtime::apply_file(
        &mut sw,
        "act_prof_create_member sel set 0xa0 1\n\
         act_prof_create_member sel set 0xa1 2\n\
         act_prof_create_group sel\n\
         act_prof_add_member_to_group sel 0 0\n\
         act_prof_add_member_to_group sel 1 0\n\
         table_indirect_add_with_group t 1 => 0\n\
         table_indirect_add t 2 => 1\n\
         pvs_add drop_keys 0x30&&&0xf0\n",
    )
    .unwrap();
    assert!(out.contains("Member has been created with handle 1"), "{out}");
    assert!(out.contains("Group has been created with handle 0"), "{out}");
    let mut got = Vec::new();
    for (k, s) in [(1u8, 4u8), (1, 5), (2, 4), (0x35, 0), (3, 0)] {
        let mut out = Vec::new();
        sw.process(0, &[k, s, 0], 0, &mut out);
        got.push(out);
    }
    assert_eq!(got[0], vec![(1, vec![1, 4, 0xa0])]);
    assert_eq!(got[1], vec![(2, vec![1, 5, 0xa1])]);
    assert_eq!(got[2], vec![(2, vec![2, 4, 0xa1])]);
    assert_eq!(got[3], vec![], "the value set matches 0x3X and ingress drops it");
    assert_eq!(got[4], vec![(0, vec![3, 0, 0])], "a miss runs NoAction");
    // A refused command changes nothing: member 0 is in a group.
    assert!(
        snic_p4::runtime::apply(
            &mut sw,
            &snic_p4::cli::parse_line("act_prof_delete_member sel 0", 1).unwrap().unwrap()
        )
        .is_err()
    );
    snic_p4::runtime::apply(
        &mut sw,
        &snic_p4::cli::parse_line("pvs_clear drop_keys", 1).unwrap().unwrap(),
    )
    .unwrap();
    let mut out = Vec::new();
    sw.process(0, &[0x35, 0, 0], 0, &mut out);
    assert_eq!(out.len(), 1);
}

#[test]
fn table_set_timeout_sets_an_entry_ttl_in_tables_that_support_it() {
    let src = RT.replace(
        "        default_action = drop();\n    }",
        "        default_action = drop();\n        support_timeout = true;\n    }",
    );
    let mut sw = switch(&src);
    ok(&mut sw, "table_add l2 fwd 0x1 => 3");
    assert_eq!(ok(&mut sw, "table_set_timeout l2 0 250"), "Setting a 250 ms timeout for entry 0\n");
    let t = sw.table_index("I.l2").expect("l2");
    assert_eq!(sw.table_entries(t)[0].ttl_ns, Some(250_000_000));
    assert!(sw.take_idle_expired(249_999_999).is_empty());
    assert_eq!(sw.take_idle_expired(250_000_000), vec![(t, 0)]);
    ok(&mut sw, "table_set_timeout l2 0 0");
    assert_eq!(sw.table_entries(t)[0].ttl_ns, None, "0 ms: no timeout");
    assert!(matches!(
        run(&mut sw, "table_set_timeout l2 7 10"),
        Err(ApplyError::Refused(RuntimeError::NotFound(_)))
    ));
    // acl has no support_timeout.
    ok(&mut sw, "table_add acl fwd 0x800&&&0xffff 0x0/0 => 2 1");
    assert!(matches!(
        run(&mut sw, "table_set_timeout acl 0 10"),
        Err(ApplyError::Refused(RuntimeError::Invalid(_)))
    ));
    assert_eq!(
        cmd("table_set_timeout l2 3 100"),
        Command::TableSetTimeout { table: "l2".into(), handle: 3, ms: 100 }
    );
}
