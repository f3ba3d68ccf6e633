//! PNA programs on the `Switch`: direction by host port, entries the data plane adds
//! (`add_on_miss`), and idle timeouts (PNA `AUTO_DELETE` / `NOTIFY_CONTROL`, v1model
//! `support_timeout`) with explicit packet times.

mod common;

use snic_p4::ir::ActionCall;
use snic_p4::table::FieldMatch;
use snic_p4::v1model::{Handle, Switch};

/// h { op, k, r }: `flows` (exact on k) learns `hit_act(k ^ 0xf0)` on a miss (profile 0) and
/// writes r = 0xee; a hit writes r = v. In the hit action, op 1 restarts the entry's expire
/// timer and op 2 sets its expire time to profile 1. Every packet leaves by port 1.
const LEARN: &str = r#"#include <core.p4>
#include <pna.p4>
header h_t { bit<8> op; bit<8> k; bit<8> r; }
struct headers_t { h_t h; }
struct meta_t { }
parser MP(packet_in pkt, out headers_t hdr, inout meta_t m,
          in pna_main_parser_input_metadata_t istd) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control PC(in headers_t hdr, inout meta_t m, in pna_pre_input_metadata_t istd,
           inout pna_pre_output_metadata_t ostd) { apply { } }
control MC(inout headers_t hdr, inout meta_t m, in pna_main_input_metadata_t istd,
           inout pna_main_output_metadata_t ostd) {
    action hit_act(bit<8> v) {
        hdr.h.r = v;
        if (hdr.h.op == 1) { restart_expire_timer(); }
        if (hdr.h.op == 2) { set_entry_expire_time(1); }
    }
    action learn() {
        hdr.h.r = 0xee;
        add_entry("hit_act", {hdr.h.k ^ 0xf0}, (ExpireTimeProfileId_t) 0);
    }
    table flows {
        key = { hdr.h.k : exact; }
        actions = { hit_act; @defaultonly learn; }
        default_action = learn;
        add_on_miss = true;
        pna_idle_timeout = PNA_IdleTimeout_t.IDLE;
    }
    apply { flows.apply(); send_to_port(1); }
}
control MD(packet_out pkt, in headers_t hdr, in meta_t m, in pna_main_output_metadata_t ostd) {
    apply { pkt.emit(hdr.h); }
}
PNA_NIC(MP(), PC(), MC(), MD()) main;
"#;

fn learner(idle: &str) -> (Switch, usize) {
    let src = LEARN.replace("IDLE", idle);
    let mut sw = Switch::new(common::compile(&src)).expect("switch");
    sw.set_expire_time_profile(0, 1000);
    sw.set_expire_time_profile(1, 5000);
    // Only lookups and explicit calls delete, unless a test says otherwise.
    sw.set_expiry_sweep_interval(u64::MAX);
    let t = sw.table_index("MC.flows").expect("table");
    (sw, t)
}

/// Send h { op, k, 0 } at `now`; the r byte that leaves.
fn send(sw: &mut Switch, op: u8, k: u8, now: u64) -> u8 {
    let mut out = Vec::new();
    sw.process(0, &[op, k, 0], now, &mut out);
    assert_eq!(out.len(), 1, "one packet out");
    assert_eq!(out[0].0, 1);
    out[0].1[2]
}

fn handles(sw: &Switch, t: usize) -> Vec<Handle> {
    sw.table_entries(t).iter().map(|e| e.handle).collect()
}

#[test]
fn learned_entries_are_visible_to_the_control_plane() {
    let (mut sw, t) = learner("AUTO_DELETE");
    assert!(sw.table_supports_idle_timeout(t));
    assert_eq!(send(&mut sw, 0, 7, 0), 0xee);
    let es = sw.table_entries(t);
    assert_eq!(es.len(), 1);
    assert_eq!(es[0].matches, vec![FieldMatch::Exact(7)]);
    let hit_act = sw.program().tables[t]
        .actions
        .iter()
        .position(|a| sw.program().actions[a.action as usize].name == "MC.hit_act")
        .expect("hit_act") as u32;
    assert_eq!(es[0].call, ActionCall { action: hit_act, args: vec![0xf7] });
    assert_eq!(es[0].ttl_ns, Some(1000));
    assert_eq!(send(&mut sw, 0, 7, 10), 0xf7);
    assert_eq!(sw.stats().learned, 1);
    // The control plane deletes it: the next packet learns it again.
    sw.table_delete(t, es[0].handle).expect("delete");
    assert_eq!(send(&mut sw, 0, 7, 20), 0xee);
    assert_eq!(sw.table_entries(t).len(), 1);
}

#[test]
fn auto_delete_removes_an_entry_idle_past_its_ttl() {
    let (mut sw, t) = learner("AUTO_DELETE");
    assert_eq!(send(&mut sw, 0, 1, 0), 0xee);
    // Hits do not restart a PNA entry's timer: it expires 1000 ns after it was added.
    assert_eq!(send(&mut sw, 0, 1, 500), 0xf1);
    assert_eq!(send(&mut sw, 0, 1, 999), 0xf1);
    assert_eq!(send(&mut sw, 0, 1, 1000), 0xee, "expired at its TTL: deleted, learned again");
    assert_eq!(sw.stats().expired, 1);
    assert_eq!(sw.table_entries(t).len(), 1);
    assert_eq!(send(&mut sw, 0, 1, 1001), 0xf1);
}

#[test]
fn expire_deletes_idle_entries_without_a_lookup() {
    let (mut sw, t) = learner("AUTO_DELETE");
    send(&mut sw, 0, 1, 0);
    send(&mut sw, 0, 2, 600);
    assert!(sw.expire(999).is_empty());
    let h1 = handles(&sw, t)[0];
    assert_eq!(sw.expire(1000), vec![(t, h1)]);
    assert_eq!(sw.table_entries(t).len(), 1);
    assert_eq!(sw.table_entries(t)[0].matches, vec![FieldMatch::Exact(2)]);
    assert_eq!(sw.expire(1600).len(), 1);
    assert!(sw.table_entries(t).is_empty());
    assert_eq!(sw.stats().expired, 2);
}

#[test]
fn process_sweeps_idle_entries_at_the_sweep_interval() {
    let (mut sw, t) = learner("AUTO_DELETE");
    sw.set_expiry_sweep_interval(0);
    send(&mut sw, 0, 1, 0);
    send(&mut sw, 0, 2, 1000);
    // k 1 was never looked up again, but the sweep at 1000 deleted it.
    let es = sw.table_entries(t);
    assert_eq!(es.len(), 1);
    assert_eq!(es[0].matches, vec![FieldMatch::Exact(2)]);
}

#[test]
fn restart_expire_timer_keeps_an_entry_alive() {
    let (mut sw, _) = learner("AUTO_DELETE");
    send(&mut sw, 0, 1, 0);
    assert_eq!(send(&mut sw, 1, 1, 800), 0xf1, "hit; restarts the timer at 800");
    assert_eq!(send(&mut sw, 0, 1, 1500), 0xf1, "alive: 700 ns idle");
    assert_eq!(send(&mut sw, 0, 1, 1800), 0xee, "expired 1000 ns after the restart");

    // The same hits without the restart: the entry is gone at 1500.
    let (mut sw, _) = learner("AUTO_DELETE");
    send(&mut sw, 0, 1, 0);
    assert_eq!(send(&mut sw, 0, 1, 800), 0xf1);
    assert_eq!(send(&mut sw, 0, 1, 1500), 0xee);
}

#[test]
fn set_entry_expire_time_changes_the_ttl() {
    let (mut sw, t) = learner("AUTO_DELETE");
    send(&mut sw, 0, 1, 0);
    assert_eq!(send(&mut sw, 2, 1, 100), 0xf1, "profile 1: 5000 ns from 100");
    assert_eq!(sw.table_entries(t)[0].ttl_ns, Some(5000));
    assert_eq!(send(&mut sw, 0, 1, 5099), 0xf1);
    assert_eq!(send(&mut sw, 0, 1, 5100), 0xee);
}

#[test]
fn notify_control_reports_each_idle_entry_once_per_idle_period() {
    let (mut sw, t) = learner("NOTIFY_CONTROL");
    send(&mut sw, 0, 1, 0);
    let h = handles(&sw, t)[0];
    assert!(sw.take_idle_expired(999).is_empty());
    assert_eq!(sw.take_idle_expired(1000), vec![(t, h)]);
    assert!(sw.take_idle_expired(2000).is_empty(), "reported once");
    // Notified entries stay; a hit still hits.
    assert_eq!(send(&mut sw, 0, 1, 2000), 0xf1);
    assert!(sw.take_idle_expired(2100).is_empty(), "a hit alone does not restart the timer");
    assert_eq!(send(&mut sw, 1, 1, 2500), 0xf1, "restart at 2500");
    assert!(sw.take_idle_expired(3499).is_empty());
    assert_eq!(sw.take_idle_expired(3500), vec![(t, h)], "idle again: reported again");
    assert_eq!(sw.stats().expired, 0);
}

#[test]
fn no_timeout_tables_keep_entries_and_refuse_ttls() {
    let (mut sw, t) = learner("NO_TIMEOUT");
    assert!(!sw.table_supports_idle_timeout(t));
    send(&mut sw, 0, 1, 0);
    assert_eq!(sw.table_entries(t)[0].ttl_ns, None);
    assert_eq!(send(&mut sw, 0, 1, 1_000_000_000), 0xf1);
    assert!(sw.take_idle_expired(u64::MAX).is_empty());
    let h = handles(&sw, t)[0];
    assert!(sw.table_set_entry_ttl(t, h, Some(5)).is_err());
}

/// v1model: `support_timeout = true` on `t`; the control plane sets each entry's TTL and
/// every hit restarts the timer (BMv2's ageing).
#[test]
fn v1model_support_timeout_notifies_idle_entries() {
    let src = common::SMALL.replace(
        "default_action = NoAction(); }",
        "default_action = NoAction(); support_timeout = true; }",
    );
    let mut sw = Switch::new(common::compile(&src)).expect("switch");
    let t = sw.table_index("I.t").expect("t");
    assert!(sw.table_supports_idle_timeout(t));
    let dst = 0x0000_0000_0001u128;
    let h = sw
        .table_add(t, vec![FieldMatch::Exact(dst)], None, ActionCall { action: 0, args: vec![2] })
        .expect("add");
    assert_eq!(sw.table_entries(t)[0].ttl_ns, None);
    assert!(sw.take_idle_expired(u64::MAX).is_empty(), "no TTL: never idle");
    sw.table_set_entry_ttl(t, h, Some(1000)).expect("ttl");
    assert_eq!(sw.table_entries(t)[0].ttl_ns, Some(1000));
    let mut pkt = vec![0u8; 14];
    pkt[5] = 1;
    let mut out = Vec::new();
    sw.process(0, &pkt, 500, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, 2);
    assert_eq!(sw.table_entries(t)[0].idle_ns, 0);
    assert!(sw.take_idle_expired(1499).is_empty(), "the hit at 500 restarted the timer");
    assert_eq!(sw.take_idle_expired(1500), vec![(t, h)]);
    assert!(sw.take_idle_expired(1600).is_empty());
    out.clear();
    sw.process(0, &pkt, 2000, &mut out);
    assert_eq!(sw.take_idle_expired(3000), vec![(t, h)]);
    // The entry is still there (v1model tables only notify).
    assert_eq!(sw.table_entries(t).len(), 1);
    assert!(sw.table_set_entry_ttl(99, h, None).is_err(), "no table 99");
    assert!(sw.table_set_entry_ttl(t, h + 1, None).is_err(), "no such entry");
}

/// pna_forward's blocks, with host ports: port 2 is HOST_TO_NET.
#[test]
fn host_ports_set_the_direction() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stf/pna_forward.p4");
    let src = std::fs::read_to_string(dir).expect("pna_forward.p4");
    let mut sw = Switch::new(common::compile(&src)).expect("switch");
    sw.set_host_ports(&[2, 3]);
    assert_eq!(sw.host_ports(), &[2, 3]);
    let pkt = [1, 0, 0, 0, 5, 0, 0, 0];
    let mut out = Vec::new();
    sw.process(2, &pkt, 0, &mut out);
    assert_eq!(out, vec![(5, vec![1, 0, 0, 0, 5, 1, 0x77, 0xb2])]);
    out.clear();
    sw.process(1, &pkt, 0, &mut out);
    assert_eq!(out, vec![(5, vec![1, 0, 0, 0, 5, 0, 0x77, 0xa1])]);
    // op 5 recirculates forever: dropped, counted.
    out.clear();
    sw.process(1, &[5, 0, 0, 0, 5, 0, 0, 0], 0, &mut out);
    assert!(out.is_empty());
    assert!(sw.outcome().over_limit);
    assert_eq!(sw.stats().derived_limit, 1);
}

#[test]
fn pna_externs_snic_does_not_run_are_refused_as_unsupported() {
    let with = |decl: &str, stmt: &str| {
        LEARN
            .replace("IDLE", "NO_TIMEOUT")
            .replace("    action hit_act", &format!("    {decl}\n    action hit_act"))
            .replace("apply { flows.apply();", &format!("apply {{ {stmt} flows.apply();"))
    };
    let e = common::try_compile(&with("Digest<bit<8>>() dg;", "")).expect_err("refused");
    assert!(e.contains("unsupported: extern `Digest`"), "{e}");
    let e = common::try_compile(&with("", "allocate_flow_id();")).expect_err("refused");
    assert!(e.contains("unsupported: extern function `allocate_flow_id`"), "{e}");
    let e = common::try_compile(&with("", "mirror_packet(0, 1);")).expect_err("refused");
    assert!(e.contains("unsupported: extern function `mirror_packet`"), "{e}");
    let e = common::try_compile(&with("Register<bit<8>, bit<32>>(4, 8w1) r;", ""))
        .expect_err("refused");
    assert!(e.contains("unsupported: Register with an initial value"), "{e}");
}

#[test]
fn add_entry_checks_its_action_and_parameters_at_compile_time() {
    let bad = LEARN.replace("IDLE", "NO_TIMEOUT").replace("\"hit_act\"", "\"nope\"");
    let e = common::try_compile(&bad).expect_err("refused");
    assert!(e.contains("no action `nope`"), "{e}");
    let bad = LEARN.replace("IDLE", "NO_TIMEOUT").replace("{hdr.h.k ^ 0xf0}", "{hdr.h.k, hdr.h.k}");
    let e = common::try_compile(&bad).expect_err("refused");
    assert!(e.contains("takes 1 action parameters"), "{e}");
}

/// examples/p4/gft_pna.p4 on a switch: the first packet of a flow takes the slow path and
/// installs the flow; later packets hit it (its direct counter counts them) and keep it alive;
/// idle past its expire time, it is deleted.
#[test]
fn gft_example_learns_flows_and_ages_them_out() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/p4");
    let src = std::fs::read_to_string(dir.join("gft_pna.p4")).expect("gft_pna.p4");
    let mut sw = Switch::new(common::compile(&src)).expect("switch");
    sw.set_host_ports(&[0]);
    sw.set_expire_time_profile(0, 1_000_000_000);
    for line in [
        "table_add acl allow 0&&&0 0x0a000000&&&0xff000000 0&&&0 0&&&0 => 10",
        "table_add vnet map 0x0a000002 => 0xc0a86402 0x020000000002 42",
    ] {
        let cmd = snic_p4::cli::parse_line(line, 1).expect("parses").expect("a command");
        snic_p4::runtime::apply(&mut sw, &cmd).unwrap_or_else(|e| panic!("{line}: {e}"));
    }
    let flows = sw.table_index("MainControlImpl.flows").expect("flows");
    // UDP 10.0.0.1:1000 -> 10.0.0.2:9000, 64 bytes.
    let mut f = vec![0u8; 64];
    f[0..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[8, 0]);
    f[14..34]
        .copy_from_slice(&[0x45, 0, 0, 50, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    f[34..42].copy_from_slice(&[0x03, 0xe8, 0x23, 0x28, 0, 30, 0, 0]);
    let mut out = Vec::new();
    sw.process(0, &f, 0, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, 1);
    assert_eq!(out[0].1.len(), 114, "50 bytes of outer headers");
    assert_eq!(sw.stats().learned, 1);
    let es = sw.table_entries(flows);
    assert_eq!(es.len(), 1);
    // direction HOST_TO_NET (1), port 0, the 5-tuple.
    assert_eq!(
        es[0].matches,
        [1, 0, 0x0a00_0001, 0x0a00_0002, 17, 1000, 9000].map(FieldMatch::Exact).to_vec()
    );
    assert_eq!(es[0].counter.0, 0, "the first packet took the slow path");
    let first = out[0].1.clone();
    for t in [1, 2, 3] {
        out.clear();
        sw.process(0, &f, t * 900_000_000, &mut out);
        assert_eq!(out, vec![(1, first.clone())], "a hit at {t}");
    }
    assert_eq!(sw.table_entries(flows)[0].counter.0, 3);
    assert_eq!(sw.stats().learned, 1, "hits add nothing");
    // Hits restarted the timer at 2.7 s: the flow lives until 3.7 s.
    assert!(sw.expire(3_699_999_999).is_empty());
    assert_eq!(sw.expire(3_700_000_000).len(), 1);
    assert!(sw.table_entries(flows).is_empty());
}

/// h { a, b, c, full, inc, state }: full = InternetChecksum of {a, b, c}; inc = the same
/// checksum updated incrementally (RFC 1624) for b + 1: clear, subtract the old checksum and
/// b, add b + 1; state = get_state() after set_state(0x1234) and add(0x0001).
const CSUM: &str = r#"#include <core.p4>
#include <pna.p4>
header h_t { bit<16> a; bit<16> b; bit<16> c; bit<16> full; bit<16> inc; bit<16> state; }
struct headers_t { h_t h; }
struct meta_t { }
parser MP(packet_in pkt, out headers_t hdr, inout meta_t m,
          in pna_main_parser_input_metadata_t istd) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control PC(in headers_t hdr, inout meta_t m, in pna_pre_input_metadata_t istd,
           inout pna_pre_output_metadata_t ostd) { apply { } }
control MC(inout headers_t hdr, inout meta_t m, in pna_main_input_metadata_t istd,
           inout pna_main_output_metadata_t ostd) {
    InternetChecksum() ck;
    apply {
        ck.add({hdr.h.a, hdr.h.b, hdr.h.c});
        hdr.h.full = ck.get();
        ck.clear();
        ck.subtract(hdr.h.full);
        ck.subtract(hdr.h.b);
        ck.add(hdr.h.b + 1);
        hdr.h.inc = ck.get();
        ck.set_state(0x1234);
        ck.add(16w1);
        hdr.h.state = ck.get_state();
        send_to_port(1);
    }
}
control MD(packet_out pkt, in headers_t hdr, in meta_t m, in pna_main_output_metadata_t ostd) {
    apply { pkt.emit(hdr.h); }
}
PNA_NIC(MP(), PC(), MC(), MD()) main;
"#;

/// RFC 1071's checksum of 16-bit words.
fn internet_checksum(words: &[u16]) -> u16 {
    let mut s: u32 = words.iter().map(|&w| u32::from(w)).sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

#[test]
fn internet_checksum_computes_and_updates_incrementally() {
    let mut sw = Switch::new(common::compile(CSUM)).expect("switch");
    for (a, b, c) in [(0x4500u16, 0x0054u16, 0xbeefu16), (0xffff, 0xffff, 0x0001), (0, 0, 0)] {
        let mut pkt = Vec::new();
        for w in [a, b, c, 0, 0, 0] {
            pkt.extend_from_slice(&w.to_be_bytes());
        }
        let mut out = Vec::new();
        sw.process(0, &pkt, 0, &mut out);
        assert_eq!(out.len(), 1);
        let o = &out[0].1;
        let w = |i: usize| u16::from_be_bytes([o[2 * i], o[2 * i + 1]]);
        assert_eq!(w(3), internet_checksum(&[a, b, c]), "full, {a:#x} {b:#x} {c:#x}");
        let inc = w(4);
        let want = internet_checksum(&[a, b.wrapping_add(1), c]);
        // Ones' complement has two zeros: 0x0000 and 0xffff are the same checksum.
        assert!(
            inc == want || inc ^ want == 0xffff && (inc == 0 || want == 0),
            "{inc:#x} {want:#x}"
        );
        assert_eq!(w(5), 0x1235);
    }
}

/// h { k, indexed, direct }: indexed = Meter cell 0's colour, direct = the colour of the
/// direct meter of the entry `t` hits (PNA_MeterColor_t: RED 0, GREEN 1, YELLOW 2).
const METERS: &str = r#"#include <core.p4>
#include <pna.p4>
header h_t { bit<8> k; bit<8> indexed; bit<8> direct; }
struct headers_t { h_t h; }
struct meta_t { }
parser MP(packet_in pkt, out headers_t hdr, inout meta_t m,
          in pna_main_parser_input_metadata_t istd) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control PC(in headers_t hdr, inout meta_t m, in pna_pre_input_metadata_t istd,
           inout pna_pre_output_metadata_t ostd) { apply { } }
control MC(inout headers_t hdr, inout meta_t m, in pna_main_input_metadata_t istd,
           inout pna_main_output_metadata_t ostd) {
    Meter<bit<32>>(2, PNA_MeterType_t.PACKETS) rate;
    DirectMeter(PNA_MeterType_t.PACKETS) per_entry;
    action hit() {
        PNA_MeterColor_t d = per_entry.execute();
        hdr.h.direct = d == PNA_MeterColor_t.RED ? 8w0 : (d == PNA_MeterColor_t.GREEN ? 8w1 : 8w2);
    }
    table t {
        key = { hdr.h.k : exact; }
        actions = { hit; NoAction; }
        default_action = NoAction;
        pna_direct_meter = per_entry;
    }
    apply {
        PNA_MeterColor_t c = rate.execute(0);
        hdr.h.indexed = c == PNA_MeterColor_t.GREEN ? 8w1 : (c == PNA_MeterColor_t.YELLOW ? 8w2 : 8w0);
        t.apply();
        send_to_port(1);
    }
}
control MD(packet_out pkt, in headers_t hdr, in meta_t m, in pna_main_output_metadata_t ostd) {
    apply { pkt.emit(hdr.h); }
}
PNA_NIC(MP(), PC(), MC(), MD()) main;
"#;

#[test]
fn pna_meters_give_pna_colours() {
    use snic_p4::algo::MeterRate;
    let src = METERS;
    let mut sw = Switch::new(common::compile(src)).expect("switch");
    let t = sw.table_index("MC.t").expect("t");
    let h = sw
        .table_add(t, vec![FieldMatch::Exact(1)], None, ActionCall { action: 0, args: vec![] })
        .expect("add");
    let send = |sw: &mut Switch, now: u64| {
        let mut out = Vec::new();
        sw.process(0, &[1, 9, 9], now, &mut out);
        (out[0].1[1], out[0].1[2])
    };
    assert_eq!(send(&mut sw, 0), (1, 1), "unconfigured meters are GREEN");
    let one = MeterRate { per_us: 0.000_001, burst: 1 };
    let two = MeterRate { per_us: 0.000_002, burst: 2 };
    let rate = sw.instance_index("MC.rate").expect("rate");
    sw.meter_set_rates(rate, Some(0), one, two).expect("rates");
    sw.direct_meter_set_rates(t, h, one, one).expect("rates");
    // Indexed: committed 1, peak 2 tokens. Direct: 1 and 1.
    assert_eq!(send(&mut sw, 10), (1, 1), "both buckets full: GREEN");
    assert_eq!(send(&mut sw, 10), (2, 0), "indexed over committed: YELLOW; direct over peak: RED");
    assert_eq!(send(&mut sw, 10), (0, 0), "indexed over peak: RED");
    let e = common::try_compile(
        &METERS.replace("rate.execute(0)", "rate.execute(0, PNA_MeterColor_t.GREEN)"),
    )
    .expect_err("refused");
    assert!(e.contains("unsupported: colour-aware Meter.execute"), "{e}");
}

#[test]
fn pna_action_profiles_name_members() {
    let src = LEARN
        .replace("IDLE", "NO_TIMEOUT")
        .replace("    action hit_act", "    ActionProfile(16) prof;\n    action hit_act")
        .replace("add_on_miss = true;", "pna_implementation = prof;")
        .replace("@defaultonly learn;", "learn;");
    let mut sw = Switch::new(common::compile(&src)).expect("switch");
    let t = sw.table_index("MC.flows").expect("flows");
    let inst = sw.instance_index("MC.prof").expect("prof");
    let hit_act =
        sw.program().actions.iter().position(|a| a.name == "MC.hit_act").expect("hit_act");
    let m = sw.act_prof_create_member(inst, hit_act as u32, vec![0x42]).expect("member");
    sw.table_indirect_add(
        t,
        vec![FieldMatch::Exact(5)],
        None,
        snic_p4::v1model::Indirect::Member(m),
    )
    .expect("entry");
    assert_eq!(send(&mut sw, 0, 5, 0), 0x42);
    assert_eq!(send(&mut sw, 0, 6, 0), 0xee, "a miss runs the default action");
}

#[test]
fn malformed_pna_mains_are_errors_not_panics() {
    let base = LEARN.replace("IDLE", "NO_TIMEOUT");
    let cases = [
        ("PNA_NIC(MP(), PC(), MC(), MD()) main;", "PNA_NIC(MP(), PC(), MC()) main;", "four blocks"),
        (
            "PNA_NIC(MP(), PC(), MC(), MD()) main;",
            "PNA_NIC(PC(), MP(), MC(), MD()) main;",
            "parser",
        ),
        ("PNA_NIC(MP(), PC(), MC(), MD()) main;", "PNA_NIC(MP(), MC(), PC(), MD()) main;", ""),
        (
            "control PC(in headers_t hdr,",
            "struct other_t { bit<8> x; }\ncontrol PC(in other_t hdr,",
            "unsupported: a PNA pre control parameter of type `other_t`",
        ),
        (
            "inout pna_main_output_metadata_t ostd) {\n    action",
            "inout pna_main_output_metadata_t ostd, in bit<8> extra) {\n    action",
            "four parameters",
        ),
    ];
    for (from, to, want) in cases {
        assert!(base.contains(from), "{from}");
        let src = base.replace(from, to);
        let e = common::try_compile(&src).expect_err(to);
        assert!(e.contains(want), "{to}: {e}");
    }
}

#[test]
fn pna_random_stays_in_its_range() {
    let src = LEARN
        .replace("IDLE", "NO_TIMEOUT")
        .replace("    action hit_act", "    Random<bit<8>>(8w3, 8w5) rnd;\n    action hit_act")
        .replace("apply { flows.apply();", "apply { hdr.h.op = rnd.read(); flows.apply();");
    let mut sw = Switch::new(common::compile(&src)).expect("switch");
    let mut seen = [false; 256];
    for i in 0..200u64 {
        let mut out = Vec::new();
        sw.process(0, &[0, 1, 0], i, &mut out);
        seen[usize::from(out[0].1[0])] = true;
    }
    let got: Vec<usize> = (0..256).filter(|&v| seen[v]).collect();
    assert_eq!(got, vec![3, 4, 5]);
}
