//! P4Info from snic's front end: ids with the specification's prefixes, `@id` honoured, stable;
//! every object kind described; the text format round-trips.

use snic_p4rt::p4info::{Prefix, from_text, one_at_a_time, to_text};
use snic_p4rt::proto::p4::config::v1 as cfg;
use snic_p4rt::testing::{TEST_PROGRAM, config, ids};

fn info(src: &str) -> cfg::P4Info {
    config(src).p4info.expect("p4info")
}

#[test]
fn every_kind_is_described_with_its_prefix() {
    let i = info(TEST_PROGRAM);
    let n = ids(&i);
    let want = [
        ("I.fwd", Prefix::Table),
        ("I.acl", Prefix::Table),
        ("I.ecmp", Prefix::Table),
        ("I.forward", Prefix::Action),
        ("NoAction", Prefix::Action),
        ("I.sel", Prefix::ActionProfile),
        ("I.port_ctr", Prefix::Counter),
        ("I.fwd_ctr", Prefix::DirectCounter),
        ("I.rate", Prefix::Meter),
        ("I.seen", Prefix::Register),
        ("learn_t", Prefix::Digest),
        ("P.special_types", Prefix::ValueSet),
        ("packet_in", Prefix::ControllerHeader),
        ("packet_out", Prefix::ControllerHeader),
    ];
    for (name, p) in want {
        let id = *n.get(name).unwrap_or_else(|| panic!("{name} missing: {n:?}"));
        assert_eq!(Prefix::of(id), Some(p), "{name}: {id:#x}");
        // Hashed ids: the name's one-at-a-time hash, unless probing moved it.
        assert_eq!(id & 0xff_ffff, one_at_a_time(name) & 0xff_ffff, "{name}");
    }
    // Shapes: keys with match kinds and widths, the selector key left out; parameters.
    let fwd = i.tables.iter().find(|t| t.preamble.as_ref().unwrap().name == "I.fwd").unwrap();
    assert_eq!(fwd.match_fields.len(), 1);
    assert_eq!(fwd.match_fields[0].name, "h.eth.dst");
    assert_eq!(fwd.match_fields[0].bitwidth, 48);
    assert_eq!(fwd.direct_resource_ids, vec![n["I.fwd_ctr"]]);
    assert_eq!(fwd.size, 1024);
    let acl = i.tables.iter().find(|t| t.preamble.as_ref().unwrap().name == "I.acl").unwrap();
    let kinds: Vec<_> = acl.match_fields.iter().map(|m| m.r#match.clone()).collect();
    use cfg::match_field::{Match, MatchType};
    assert_eq!(
        kinds,
        vec![
            Some(Match::MatchType(MatchType::Ternary as i32)),
            Some(Match::MatchType(MatchType::Range as i32))
        ]
    );
    let ecmp = i.tables.iter().find(|t| t.preamble.as_ref().unwrap().name == "I.ecmp").unwrap();
    assert_eq!(ecmp.match_fields.len(), 1, "the selector key is not a match field");
    assert_eq!(ecmp.implementation_id, n["I.sel"]);
    let prof = &i.action_profiles[0];
    assert!(prof.with_selector);
    assert_eq!(prof.table_ids, vec![n["I.ecmp"]]);
    let fwd_act =
        i.actions.iter().find(|a| a.preamble.as_ref().unwrap().name == "I.forward").unwrap();
    assert_eq!(fwd_act.params.len(), 1);
    assert_eq!((fwd_act.params[0].id, fwd_act.params[0].bitwidth), (1, 9));
    let ctr = &i.counters[0];
    assert_eq!(ctr.size, 16);
    assert_eq!(ctr.spec.unwrap().unit, cfg::counter_spec::Unit::Both as i32);
    assert_eq!(i.registers[0].size, 8);
    let pi = i
        .controller_packet_metadata
        .iter()
        .find(|c| c.preamble.as_ref().unwrap().name == "packet_in")
        .unwrap();
    let fields: Vec<(u32, &str, i32)> =
        pi.metadata.iter().map(|m| (m.id, m.name.as_str(), m.bitwidth)).collect();
    assert_eq!(fields, vec![(1, "ingress_port", 9), (2, "_pad", 7)]);
    // The digest's struct is in type_info.
    let ti = i.type_info.as_ref().unwrap();
    let learn = &ti.structs["learn_t"];
    assert_eq!(
        learn.members.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
        vec!["src", "port"]
    );
}

#[test]
fn ids_are_stable_and_at_id_is_honoured() {
    assert_eq!(info(TEST_PROGRAM), info(TEST_PROGRAM));
    let with_ids = TEST_PROGRAM
        .replace("    table fwd {", "    @id(0x77) table fwd {")
        .replace("    action drop() {", "    @id(0x01000099) action drop() {");
    let n = ids(&info(&with_ids));
    assert_eq!(n["I.fwd"], 0x0200_0077, "the prefix is added");
    assert_eq!(n["I.drop"], 0x0100_0099, "an id with the right prefix is kept");
    // Other objects keep their ids.
    assert_eq!(n["I.acl"], ids(&info(TEST_PROGRAM))["I.acl"]);
    // An @id with another kind's prefix is refused.
    let bad = TEST_PROGRAM.replace("    table fwd {", "    @id(0x01000001) table fwd {");
    let (built, _) = snic_io::p4::compile_source("bad.p4", bad, &[], Vec::new()).unwrap();
    assert!(snic_p4rt::p4info::for_program(&built.program, "bad").is_err());
}

#[test]
fn text_format_round_trips() {
    let i = info(TEST_PROGRAM);
    let text = to_text(&i);
    assert!(text.contains("tables {\n"), "one block per element");
    assert!(!text.contains(": ["), "no list syntax");
    assert_eq!(from_text(&text).unwrap(), i);
    assert!(from_text("tables { preamble { id: \"x\" } }").is_err());
}
