//! Fuzz target `p4_runtime`: arbitrary `simple_switch_CLI` command lines applied with
//! `snic_p4::runtime::apply_all` to two switches running one small program (an exact table, a
//! ternary + lpm table with a direct counter and a priority, a counter, a register, a meter,
//! multicast, mirroring), with a packet run through both after every command. The input is the
//! text, then (after a `0xff` byte, never part of UTF-8) the packet's bytes; without one the
//! packet is a 60-byte frame to a destination that changes with each command.
//!
//! Checks, besides "never panics": a refused command leaves the control-plane state of both
//! switches as it was (entries, defaults, multicast groups); the two switches' control-plane
//! state stays the same after every command; the answer of an accepted command is text.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use snic_p4::cli::parse_file;
use snic_p4::ir::Compiled;
use snic_p4::runtime::apply_all;
use snic_p4::v1model::Switch;

const PROG: &str = r#"#include <core.p4>
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
    action mirror(bit<32> s) { clone(CloneType.I2E, s); }
    table l2 {
        key = { hdr.eth.dst : exact; }
        actions = { fwd; drop; set_mc; mirror; NoAction; }
        default_action = drop();
        size = 64;
    }
    table acl {
        key = { hdr.eth.type : ternary; hdr.eth.src : lpm; }
        actions = { fwd; drop; NoAction; }
        counters = acl_hits;
        default_action = NoAction();
        size = 64;
    }
    apply { hits.count(0); seen.write(0, 7); l2.apply(); acl.apply(); }
}
control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers_t hdr, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.eth); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"#;

fn program() -> &'static Compiled {
    static P: OnceLock<Compiled> = OnceLock::new();
    P.get_or_init(|| {
        let mut map = snic_p4::span::SourceMap::new();
        let main = map.add("fuzz.p4", PROG);
        snic_p4::runner::build(&mut map, main, &mut snic_p4::builtin::Builtins, &Default::default())
            .expect("the fuzz program compiles")
            .program
    })
}

/// The control-plane state a command may change.
fn state(sw: &Switch) -> String {
    let mut s = String::new();
    for t in 0..sw.program().tables.len() {
        let entries: Vec<_> = sw
            .table_entries(t)
            .into_iter()
            .map(|e| (e.handle, e.matches, e.priority, e.call))
            .collect();
        s.push_str(&format!("{entries:?} {:?}\n", sw.table_default(t)));
    }
    s.push_str(&format!("{:?}", sw.mc_groups()));
    s
}

fuzz_target!(|data: &[u8]| {
    let (text, packet) = match data.iter().position(|&b| b == 0xff) {
        Some(i) => (&data[..i], Some(&data[i + 1..])),
        None => (data, None),
    };
    let Ok(text) = std::str::from_utf8(text) else { return };
    let Ok(cmds) = parse_file(text) else { return };
    let mut a = Switch::new(program().clone()).expect("switch");
    let mut b = a.clone();
    let mut out = Vec::new();
    for (n, (_, cmd)) in cmds.iter().take(64).enumerate() {
        let before = state(&a);
        match apply_all(&mut [&mut a, &mut b], cmd) {
            Ok(answer) => assert!(answer.is_empty() || answer.ends_with('\n'), "{cmd}: {answer:?}"),
            Err(e) => {
                let _ = e.to_string();
                assert_eq!(state(&a), before, "refused {cmd} changed worker 0");
            }
        }
        assert_eq!(state(&a), state(&b), "workers diverged after {cmd}");
        let frame = match packet {
            Some(p) => p.to_vec(),
            None => [&[0u8, 0, 0, 0, 0, (n % 4) as u8][..], &[2, 0, 0, 0, 0, 1, 8, 0], &[0; 46]]
                .concat(),
        };
        out.clear();
        a.process(n as u32 % 4, &frame, n as u64 * 1000, &mut out);
        for (port, f) in &out {
            assert!(*port < 512, "port {port}");
            let _ = f.len();
        }
    }
});
