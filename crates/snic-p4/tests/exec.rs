//! The v1model executor on small programs, judged by STF.

mod common;

use common::{SMALL, stf};

#[test]
fn small_forwards_by_exact_match_and_drops_on_miss_with_noaction() {
    let t = "add t hdr.eth.dst:0x000000000001 I.fwd(port:2)\n\
             packet 0 000000000001 000000000002 0800 ab\n\
             expect 2 000000000001 000000000002 0800 ab\n\
             packet 0 000000000009 000000000002 0800 ab\n\
             expect 0 000000000009 000000000002 0800 ab\n";
    assert_eq!(stf(SMALL, t), Ok(true));
}

const PROFILE: &str = r#"#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> k; bit<8> sel; bit<8> res; }
struct headers_t { h_t h; }
struct meta_t { }
parser P(packet_in pkt, out headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
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
    table u {
        key = { hdr.h.k : exact; }
        actions = { set; NoAction; }
        implementation = action_profile(4);
    }
    apply { if (hdr.h.k < 10) { t.apply(); } else { u.apply(); } }
}
control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers_t hdr, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"#;

#[test]
fn action_profiles_and_selectors_pick_members() {
    use snic_p4::table::FieldMatch;
    use snic_p4::v1model::{Indirect, Switch};
    let prog = common::compile(PROFILE);
    let mut sw = Switch::new(prog).unwrap();
    let t = sw.table_index("I.t").unwrap();
    let u = sw.table_index("I.u").unwrap();
    let sel = sw.program().tables[t].implementation.unwrap() as usize;
    let prof = sw.program().tables[u].implementation.unwrap() as usize;
    let set = sw.program().actions.iter().position(|a| a.name == "I.set").unwrap() as u32;
    // Direct entries are refused on a table with a profile.
    let call = snic_p4::ir::ActionCall { action: 0, args: vec![1, 1] };
    assert!(sw.table_add(t, vec![FieldMatch::Exact(1)], None, call).is_err());
    let m0 = sw.act_prof_create_member(sel, set, vec![0xa0, 1]).unwrap();
    let m1 = sw.act_prof_create_member(sel, set, vec![0xa1, 2]).unwrap();
    let g = sw.act_prof_create_group(sel).unwrap();
    sw.act_prof_add_member_to_group(sel, m0, g).unwrap();
    sw.act_prof_add_member_to_group(sel, m1, g).unwrap();
    sw.table_indirect_add(t, vec![FieldMatch::Exact(1)], None, Indirect::Group(g)).unwrap();
    sw.table_indirect_add(t, vec![FieldMatch::Exact(2)], None, Indirect::Member(m1)).unwrap();
    let pm = sw.act_prof_create_member(prof, set, vec![0xb0, 3]).unwrap();
    sw.table_indirect_add(u, vec![FieldMatch::Exact(20)], None, Indirect::Member(pm)).unwrap();
    let mut out = Vec::new();
    // identity hash of the 8-bit selector key: even -> member 0, odd -> member 1.
    for (k, selv, want_port, want) in
        [(1u8, 4u8, 1u32, 0xa0u8), (1, 5, 2, 0xa1), (2, 4, 2, 0xa1), (20, 0, 3, 0xb0)]
    {
        out.clear();
        sw.process(0, &[k, selv, 0], 0, &mut out);
        assert_eq!(out, vec![(want_port, vec![k, selv, want])], "k {k} sel {selv}");
    }
    // A miss runs the default (NoAction): port 0, out unchanged.
    out.clear();
    sw.process(0, &[3, 0, 0], 0, &mut out);
    assert_eq!(out, vec![(0, vec![3, 0, 0])]);
    // A member in a group cannot be deleted.
    assert!(sw.act_prof_delete_member(sel, m0).is_err());
}

#[test]
fn reads_of_locals_never_written_are_warned_once_and_read_as_zero() {
    let src = SMALL.replace(
        "apply { t.apply(); }",
        "apply { bit<8> x; bit<8> y; y = 2; hdr.eth.type = (bit<16>)(x + y + x); t.apply(); }",
    );
    let mut map = snic_p4::span::SourceMap::new();
    let main = map.add("w.p4", src.clone());
    let built = snic_p4::runner::build(
        &mut map,
        main,
        &mut snic_p4::builtin::Builtins,
        &Default::default(),
    )
    .unwrap();
    let w: Vec<String> = built.warnings.iter().map(|d| d.render(&map)).collect();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("`x` may be read before it is written"), "{}", w[0]);
    assert!(w[0].starts_with("w.p4:"), "{}", w[0]);
    // x reads as 0: the type becomes 2.
    let t = "packet 0 000000000009 000000000002 0800\nexpect 0 000000000009 000000000002 0002\n";
    assert_eq!(stf(&src, t), Ok(true));
}

const CSUM: &str = r#"#include <core.p4>
#include <v1model.p4>
header h_t { bit<3> a; bit<5> b; bit<13> c; bit<7> d; bit<4> e; bit<72> f; bit<16> g; bit<16> sum; }
header o_t { bit<8> x; }
struct headers_t { h_t h; o_t o; }
struct meta_t { }
parser P(packet_in pkt, out headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); pkt.extract(hdr.o); transition accept; }
}
control VC(inout headers_t hdr, inout meta_t m) { apply { } }
control I(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    apply { if (hdr.o.x == 0) { hdr.o.setInvalid(); } }
}
control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers_t hdr, inout meta_t m) {
    apply {
        update_checksum(true, { hdr.h.a, hdr.h.b, hdr.h.c, hdr.h.d, hdr.h.e, hdr.h.f, hdr.o.x, hdr.h.g },
                        hdr.h.sum, HashAlgorithm.csum16);
    }
}
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"#;

proptest::proptest! {
    /// The fused csum16 of a field list equals `algo::csum16` over the BMv2 buffer of the same
    /// fields (odd widths, a field wider than 64 bits, a field of an invalid header left out).
    #[test]
    fn csum16_of_fields_matches_the_buffer_checksum(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 20..=20), x in 0u8..3) {
        use snic_p4::algo::{BitBuf, csum16};
        use snic_p4::exec::get_bits as gb;
        let mut sw = snic_p4::v1model::Switch::new(common::compile(CSUM)).unwrap();
        // h is 17 bytes (its checksum field last), then o.x, then payload.
        let mut pkt = bytes[..17].to_vec();
        pkt.push(x);
        pkt.extend_from_slice(&bytes[17..]);
        let mut out = Vec::new();
        sw.process(0, &pkt, 0, &mut out);
        let widths = [3u32, 5, 13, 7, 4, 72];
        let mut buf = BitBuf::new();
        let mut at = 0;
        for w in widths {
            buf.push(gb(&bytes, at, w), w);
            at += w as usize;
        }
        if x != 0 {
            buf.push(u128::from(x), 8);
        }
        buf.push(gb(&bytes, at, 16), 16);
        let want = csum16(buf.as_bytes());
        let got = u16::from_be_bytes([out[0].1[15], out[0].1[16]]);
        proptest::prop_assert_eq!(got, want);
    }
}

#[test]
fn parser_value_sets_match_what_the_control_plane_adds() {
    let src = SMALL.replace(
        "state start { pkt.extract(hdr.eth); transition accept; }",
        "value_set<bit<16>>(4) types;\n    state start { pkt.extract(hdr.eth); transition select(hdr.eth.type) { types: reject; default: accept; } }",
    );
    let mut sw = snic_p4::v1model::Switch::new(common::compile(&src)).unwrap();
    let pkt = |t: u16| {
        let mut p = vec![0u8; 14];
        p[12..14].copy_from_slice(&t.to_be_bytes());
        p
    };
    let mut out = Vec::new();
    sw.process(0, &pkt(0x88b5), 0, &mut out);
    assert_eq!(sw.outcome().parser_error, None);
    sw.value_set_add(0, 0x88b5, 0xffff).unwrap();
    sw.value_set_add(0, 0x9000, 0xff00).unwrap();
    for (t, rejected) in [(0x88b5u16, true), (0x9042, true), (0x0800, false)] {
        out.clear();
        sw.process(0, &pkt(t), 0, &mut out);
        // An explicit reject leaves parser_error NoError but counts as a parser error.
        assert_eq!(sw.outcome().parser_error.is_some(), rejected, "type {t:#x}");
        assert_eq!(out.len(), 1, "the packet still goes on after a reject");
    }
    // A value set holds at most its size.
    sw.value_set_add(0, 1, 0xffff).unwrap();
    sw.value_set_add(0, 2, 0xffff).unwrap();
    assert!(sw.value_set_add(0, 3, 0xffff).is_err());
}
