//! The P4Runtime server end to end over gRPC (tonic's client): arbitration, pipelines,
//! Write/Read of every entity, errors as the specification gives them, packet I/O and digests
//! through the p4 stage.

use snic_p4rt::proto::p4::v1 as p4;
use snic_p4rt::testing::{
    DELETE, INSERT, Kit, MAC1, MAC2, MODIFY, Stream, TEST_PROGRAM, action, config, eth, exact,
    fwd_entry, ids, names, ready, table_entries, update, write_errors,
};
use tonic::Code;

use p4::entity::Entity as E;

const VERIFY: i32 = 1;
const VERIFY_AND_SAVE: i32 = 2;
const VERIFY_AND_COMMIT: i32 = 3;
const COMMIT: i32 = 4;
const RECONCILE_AND_COMMIT: i32 = 5;
const CONTINUE_ON_ERROR: i32 = 0;
const ROLLBACK_ON_ERROR: i32 = 1;

fn read_table(k: &mut Kit, table: u32) -> Vec<p4::TableEntry> {
    table_entries(k, p4::TableEntry { table_id: table, ..Default::default() }).unwrap()
}

#[test]
fn arbitration_elects_the_highest_id_and_refuses_duplicates() {
    let mut k = Kit::new();
    let mut a = k.stream(5);
    assert_eq!(k.arbitration_code(&mut a), Some(0), "the first client is primary");
    // A lower id: a backup, told another is primary.
    let mut b = k.stream(3);
    assert_eq!(k.arbitration_code(&mut b), Some(Code::AlreadyExists as i32));
    // The same id as a live client: refused, the stream ends with INVALID_ARGUMENT.
    let mut c = k.stream(5);
    assert_eq!(k.recv(&mut c).unwrap_err().code(), Code::InvalidArgument);
    // 7 > 5: the new primary; everyone hears of it.
    let mut d2 = k.stream(7);
    assert_eq!(k.arbitration_code(&mut d2), Some(0));
    assert_eq!(k.arbitration_code(&mut a), Some(Code::AlreadyExists as i32));
    assert_eq!(k.arbitration_code(&mut b), Some(Code::AlreadyExists as i32));
    // Only the primary may write or set a pipeline.
    let e = k.set_pipeline(5, VERIFY_AND_COMMIT, Some(config(TEST_PROGRAM))).unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    k.set_pipeline(7, VERIFY_AND_COMMIT, Some(config(TEST_PROGRAM))).unwrap();
    let n = names();
    let e = k.write(5, 0, vec![update(INSERT, E::TableEntry(fwd_entry(&n, MAC1, 1)))]).unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(read_table(&mut k, n["I.fwd"]).is_empty(), "a refused write changes nothing");
    // The primary leaves: no primary until someone claims an id at least as high as 7.
    drop(d2);
    assert_eq!(k.arbitration_code(&mut a), Some(Code::NotFound as i32));
    k.arbitrate(&a, 1, 7, "");
    assert_eq!(k.arbitration_code(&mut a), Some(0));
    k.write(7, 0, vec![update(INSERT, E::TableEntry(fwd_entry(&n, MAC1, 1)))]).unwrap();
}

#[test]
fn wrong_device_id_is_not_found_and_a_live_stream_cannot_change_it() {
    let mut k = Kit::new();
    // A new stream naming another device: NOT_FOUND, and the stream ends.
    let mut fresh = k.open();
    k.arbitrate(&fresh, 99, 3, "");
    let ended = |k: &Kit, s: &mut Stream| loop {
        match k.recv(s) {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the stream was not refused"),
            Err(st) => break st.code(),
        }
    };
    assert_eq!(ended(&k, &mut fresh), Code::NotFound);
    // A live stream moving to another device: FAILED_PRECONDITION.
    let mut live = k.stream(1);
    assert_eq!(k.arbitration_code(&mut live), Some(0));
    k.arbitrate(&live, 99, 1, "");
    assert_eq!(ended(&k, &mut live), Code::FailedPrecondition);
}

#[test]
fn pipeline_verify_save_commit_and_get() {
    let mut k = Kit::new();
    let mut s = k.stream(1);
    assert_eq!(k.arbitration_code(&mut s), Some(0));
    // No pipeline yet: writes and reads fail, Get answers an empty config.
    let n = names();
    let e = k.write(1, 0, vec![update(INSERT, E::TableEntry(fwd_entry(&n, MAC1, 1)))]).unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(k.get_pipeline(0).unwrap().p4info.is_none());
    // A program that does not compile, and a P4Info that does not match it.
    let mut bad = config(TEST_PROGRAM);
    bad.p4_device_config = b"control C() {".to_vec();
    let e = k.set_pipeline(1, VERIFY, Some(bad)).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("does not compile"), "{}", e.message());
    let mut wrong = config(TEST_PROGRAM);
    wrong.p4info.as_mut().unwrap().tables[0].match_fields[0].bitwidth = 47;
    let e = k.set_pipeline(1, VERIFY_AND_COMMIT, Some(wrong)).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("does not match"), "{}", e.message());
    // COMMIT with nothing saved; VERIFY changes nothing.
    assert_eq!(k.set_pipeline(1, COMMIT, None).unwrap_err().code(), Code::NotFound);
    k.set_pipeline(1, VERIFY, Some(config(TEST_PROGRAM))).unwrap();
    assert!(k.get_pipeline(0).unwrap().p4info.is_none());
    // Save, then commit.
    k.set_pipeline(1, VERIFY_AND_SAVE, Some(config(TEST_PROGRAM))).unwrap();
    assert!(k.get_pipeline(0).unwrap().p4info.is_none(), "saved is not committed");
    assert_eq!(
        k.set_pipeline(1, COMMIT, Some(config(TEST_PROGRAM))).unwrap_err().code(),
        Code::InvalidArgument,
        "COMMIT takes no config"
    );
    k.set_pipeline(1, COMMIT, None).unwrap();
    let all = k.get_pipeline(0).unwrap();
    assert_eq!(all.p4_device_config, TEST_PROGRAM.as_bytes());
    assert_eq!(all.cookie.unwrap().cookie, 42);
    assert!(all.p4info.is_some());
    let cookie = k.get_pipeline(1).unwrap();
    assert!(cookie.p4info.is_none() && cookie.p4_device_config.is_empty());
    assert_eq!(cookie.cookie.unwrap().cookie, 42);
    let info = k.get_pipeline(2).unwrap();
    assert!(info.p4info.is_some() && info.p4_device_config.is_empty());
    let dev = k.get_pipeline(3).unwrap();
    assert!(dev.p4info.is_none() && !dev.p4_device_config.is_empty());
}

#[test]
fn table_entries_insert_read_modify_delete_and_forward() {
    let (mut k, _s, n) = ready();
    let fwd = n["I.fwd"];
    // Nothing yet: the default (drop) applies.
    assert!(k.run(&[(1, eth(MAC1, MAC2, 0x0800))]).is_empty());
    k.write(10, 0, vec![update(INSERT, E::TableEntry(fwd_entry(&n, MAC1, 3)))]).unwrap();
    let out = k.run(&[(1, eth(MAC1, MAC2, 0x0800))]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, 3);
    // Read back: canonical bytes (the MAC loses its leading zeros).
    let t = read_table(&mut k, fwd);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].r#match, vec![exact(1, &[1])]);
    assert_eq!(t[0].action, action(n["I.forward"], &[(1, &[3])]));
    // Inserting it again: ALREADY_EXISTS in the per-update details.
    let e =
        k.write(10, 0, vec![update(INSERT, E::TableEntry(fwd_entry(&n, MAC1, 4)))]).unwrap_err();
    assert_eq!(e.code(), Code::Unknown);
    let errs = write_errors(&e);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].canonical_code, Code::AlreadyExists as i32);
    // Modify, then delete.
    k.write(10, 0, vec![update(MODIFY, E::TableEntry(fwd_entry(&n, MAC1, 5)))]).unwrap();
    assert_eq!(k.run(&[(1, eth(MAC1, MAC2, 0x0800))])[0].0, 5);
    k.write(10, 0, vec![update(DELETE, E::TableEntry(fwd_entry(&n, MAC1, 5)))]).unwrap();
    assert!(read_table(&mut k, fwd).is_empty());
    let e =
        k.write(10, 0, vec![update(DELETE, E::TableEntry(fwd_entry(&n, MAC1, 5)))]).unwrap_err();
    assert_eq!(write_errors(&e)[0].canonical_code, Code::NotFound as i32);
    let e =
        k.write(10, 0, vec![update(MODIFY, E::TableEntry(fwd_entry(&n, MAC2, 5)))]).unwrap_err();
    assert_eq!(write_errors(&e)[0].canonical_code, Code::NotFound as i32);
}

#[test]
fn bad_entries_get_the_specified_codes_and_change_nothing() {
    let (mut k, _s, n) = ready();
    let fwd = n["I.fwd"];
    let mut cases: Vec<(p4::TableEntry, Code)> = Vec::new();
    // A value wider than the field.
    let mut wide = fwd_entry(&n, MAC1, 1);
    wide.r#match = vec![exact(1, &[1, 0, 0, 0, 0, 0, 0])];
    cases.push((wide, Code::OutOfRange));
    // A parameter wider than its 9 bits.
    let mut wide_param = fwd_entry(&n, MAC1, 1);
    wide_param.action = action(n["I.forward"], &[(1, &[2, 0])]);
    cases.push((wide_param, Code::OutOfRange));
    // An unknown table.
    let mut no_table = fwd_entry(&n, MAC1, 1);
    no_table.table_id = 0x0200_0001;
    cases.push((no_table, Code::NotFound));
    // An action the table does not list.
    let mut not_listed = fwd_entry(&n, MAC1, 1);
    not_listed.action = action(n["I.lb"], &[(1, &[1])]);
    cases.push((not_listed, Code::InvalidArgument));
    // A missing parameter.
    let mut missing = fwd_entry(&n, MAC1, 1);
    missing.action = action(n["I.forward"], &[]);
    cases.push((missing, Code::InvalidArgument));
    // An exact field left out.
    let mut no_match = fwd_entry(&n, MAC1, 1);
    no_match.r#match.clear();
    cases.push((no_match, Code::InvalidArgument));
    // A priority on a table without ternary fields.
    let mut prio = fwd_entry(&n, MAC1, 1);
    prio.priority = 3;
    cases.push((prio, Code::InvalidArgument));
    let updates = cases.iter().map(|(t, _)| update(INSERT, E::TableEntry(t.clone()))).collect();
    let e = k.write(10, CONTINUE_ON_ERROR, updates).unwrap_err();
    let errs = write_errors(&e);
    assert_eq!(errs.len(), cases.len());
    for (err, (_, want)) in errs.iter().zip(&cases) {
        assert_eq!(err.canonical_code, *want as i32, "{}", err.message);
    }
    assert!(read_table(&mut k, fwd).is_empty());
}

#[test]
fn batches_continue_or_roll_back() {
    let (mut k, _s, n) = ready();
    let fwd = n["I.fwd"];
    let good = update(INSERT, E::TableEntry(fwd_entry(&n, MAC1, 1)));
    let dup = update(INSERT, E::TableEntry(fwd_entry(&n, MAC1, 2)));
    let other = update(INSERT, E::TableEntry(fwd_entry(&n, MAC2, 2)));
    // Rolled back: nothing stays, the other updates say ABORTED.
    let e =
        k.write(10, ROLLBACK_ON_ERROR, vec![good.clone(), dup.clone(), other.clone()]).unwrap_err();
    let codes: Vec<i32> = write_errors(&e).iter().map(|x| x.canonical_code).collect();
    assert_eq!(codes, vec![10, Code::AlreadyExists as i32, 10]);
    assert!(read_table(&mut k, fwd).is_empty());
    // Continued: the good ones stay.
    let e = k.write(10, CONTINUE_ON_ERROR, vec![good, dup, other]).unwrap_err();
    let codes: Vec<i32> = write_errors(&e).iter().map(|x| x.canonical_code).collect();
    assert_eq!(codes, vec![0, Code::AlreadyExists as i32, 0]);
    assert_eq!(read_table(&mut k, fwd).len(), 2);
}

#[test]
fn ternary_priorities_default_entries_and_direct_counters() {
    let (mut k, _s, n) = ready();
    let acl = n["I.acl"];
    let tern = |v: &[u8], m: &[u8]| p4::FieldMatch {
        field_id: 1,
        field_match_type: Some(p4::field_match::FieldMatchType::Ternary(
            p4::field_match::Ternary { value: v.to_vec(), mask: m.to_vec() },
        )),
    };
    let entry = |prio: i32| p4::TableEntry {
        table_id: acl,
        r#match: vec![tern(&[2], &[0xff])],
        action: action(n["I.set_mcast"], &[(1, &[7])]),
        priority: prio,
        ..Default::default()
    };
    // Priority 0 is refused on a ternary table; two priorities are two entries.
    let e = k.write(10, 0, vec![update(INSERT, E::TableEntry(entry(0)))]).unwrap_err();
    assert_eq!(write_errors(&e)[0].canonical_code, Code::InvalidArgument as i32);
    k.write(
        10,
        0,
        vec![update(INSERT, E::TableEntry(entry(5))), update(INSERT, E::TableEntry(entry(9)))],
    )
    .unwrap();
    let rows = read_table(&mut k, acl);
    let mut prios: Vec<i32> = rows.iter().map(|r| r.priority).collect();
    prios.sort_unstable();
    assert_eq!(prios, vec![5, 9]);
    // A zero mask must be omitted; value bits outside the mask are refused.
    let mut zero = entry(3);
    zero.r#match = vec![tern(&[0], &[0])];
    let mut outside = entry(3);
    outside.r#match = vec![tern(&[3], &[1])];
    let e = k
        .write(
            10,
            0,
            vec![update(INSERT, E::TableEntry(zero)), update(INSERT, E::TableEntry(outside))],
        )
        .unwrap_err();
    assert!(write_errors(&e).iter().all(|x| x.canonical_code == Code::InvalidArgument as i32));
    // The default entry: MODIFY only, read back as set.
    let fwd = n["I.fwd"];
    let def = p4::TableEntry {
        table_id: fwd,
        is_default_action: true,
        action: action(n["I.forward"], &[(1, &[6])]),
        ..Default::default()
    };
    let e = k.write(10, 0, vec![update(INSERT, E::TableEntry(def.clone()))]).unwrap_err();
    assert_eq!(write_errors(&e)[0].canonical_code, Code::InvalidArgument as i32);
    k.write(10, 0, vec![update(MODIFY, E::TableEntry(def.clone()))]).unwrap();
    // (source MAC1: the ACL entries above match source 2 and multicast to a missing group)
    assert_eq!(k.run(&[(1, eth(MAC2, MAC1, 0x0800))])[0].0, 6);
    let q = p4::TableEntry { table_id: fwd, is_default_action: true, ..Default::default() };
    let got = k.read(vec![p4::Entity { entity: Some(E::TableEntry(q)) }]).unwrap();
    let Some(E::TableEntry(t)) = &got[0].entity else { panic!() };
    assert_eq!(t.action, def.action);
    // Direct counters count hits of their entry.
    k.write(10, 0, vec![update(INSERT, E::TableEntry(fwd_entry(&n, MAC1, 1)))]).unwrap();
    k.run(&[(1, eth(MAC1, MAC2, 0x0800)), (1, eth(MAC1, MAC2, 0x0800))]);
    let dc = p4::DirectCounterEntry { table_entry: Some(fwd_entry(&n, MAC1, 1)), data: None };
    let got = k.read(vec![p4::Entity { entity: Some(E::DirectCounterEntry(dc)) }]).unwrap();
    let Some(E::DirectCounterEntry(d)) = &got[0].entity else { panic!() };
    assert_eq!(d.data.unwrap().packet_count, 2);
    assert_eq!(d.data.unwrap().byte_count, 2 * 60);
}

#[test]
fn counters_registers_meters_and_value_sets() {
    let (mut k, _s, n) = ready();
    k.run(&[(2, eth(MAC1, MAC2, 0x1234)), (2, eth(MAC1, MAC2, 0x1234))]);
    // port_ctr[2] counted both packets.
    let q = p4::CounterEntry {
        counter_id: n["I.port_ctr"],
        index: Some(p4::Index { index: 2 }),
        data: None,
    };
    let got = k.read(vec![p4::Entity { entity: Some(E::CounterEntry(q)) }]).unwrap();
    let Some(E::CounterEntry(c)) = &got[0].entity else { panic!() };
    assert_eq!(c.data.unwrap().packet_count, 2);
    // A wildcard read gives every cell.
    let all = p4::CounterEntry { counter_id: n["I.port_ctr"], index: None, data: None };
    assert_eq!(k.read(vec![p4::Entity { entity: Some(E::CounterEntry(all)) }]).unwrap().len(), 16);
    // Write a cell, read it back; an index out of range is OUT_OF_RANGE.
    let set =
        p4::CounterEntry { data: Some(p4::CounterData { packet_count: 100, byte_count: 7 }), ..q };
    k.write(10, 0, vec![update(MODIFY, E::CounterEntry(set))]).unwrap();
    let got = k.read(vec![p4::Entity { entity: Some(E::CounterEntry(q)) }]).unwrap();
    let Some(E::CounterEntry(c)) = &got[0].entity else { panic!() };
    assert_eq!((c.data.unwrap().packet_count, c.data.unwrap().byte_count), (100, 7));
    let far = p4::CounterEntry {
        counter_id: n["I.port_ctr"],
        index: Some(p4::Index { index: 16 }),
        data: None,
    };
    let e = k.read(vec![p4::Entity { entity: Some(E::CounterEntry(far)) }]).unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange);
    // The register cell the program wrote (seen[2] = the EtherType).
    let r = p4::RegisterEntry {
        register_id: n["I.seen"],
        index: Some(p4::Index { index: 2 }),
        data: None,
    };
    let got = k.read(vec![p4::Entity { entity: Some(E::RegisterEntry(r.clone())) }]).unwrap();
    let Some(E::RegisterEntry(x)) = &got[0].entity else { panic!() };
    assert_eq!(x.data.as_ref().unwrap().data, Some(p4::p4_data::Data::Bitstring(vec![0x12, 0x34])));
    let w = p4::RegisterEntry {
        data: Some(p4::P4Data { data: Some(p4::p4_data::Data::Bitstring(vec![9])) }),
        ..r.clone()
    };
    k.write(10, 0, vec![update(MODIFY, E::RegisterEntry(w))]).unwrap();
    let got = k.read(vec![p4::Entity { entity: Some(E::RegisterEntry(r)) }]).unwrap();
    let Some(E::RegisterEntry(x)) = &got[0].entity else { panic!() };
    assert_eq!(x.data.as_ref().unwrap().data, Some(p4::p4_data::Data::Bitstring(vec![9])));
    // A meter's rates, in units per second, round-trip.
    let cfg = p4::MeterConfig { cir: 1000, cburst: 10, pir: 2000, pburst: 20, eburst: 0 };
    let m = p4::MeterEntry {
        meter_id: n["I.rate"],
        index: Some(p4::Index { index: 1 }),
        config: Some(cfg),
        counter_data: None,
    };
    k.write(10, 0, vec![update(MODIFY, E::MeterEntry(m))]).unwrap();
    let got = k
        .read(vec![p4::Entity {
            entity: Some(E::MeterEntry(p4::MeterEntry { config: None, ..m })),
        }])
        .unwrap();
    let Some(E::MeterEntry(x)) = &got[0].entity else { panic!() };
    assert_eq!(x.config, Some(cfg));
    // A value set member makes its EtherType go to port 7.
    assert!(k.run(&[(1, eth(MAC2, MAC2, 0x4242))]).is_empty());
    let vs = p4::ValueSetEntry {
        value_set_id: n["P.special_types"],
        members: vec![p4::ValueSetMember { r#match: vec![exact(1, &[0x42, 0x42])] }],
    };
    k.write(10, 0, vec![update(MODIFY, E::ValueSetEntry(vs.clone()))]).unwrap();
    assert_eq!(k.run(&[(1, eth(MAC2, MAC2, 0x4242))])[0].0, 7);
    let got = k
        .read(vec![p4::Entity {
            entity: Some(E::ValueSetEntry(p4::ValueSetEntry { value_set_id: 0, members: vec![] })),
        }])
        .unwrap();
    assert_eq!(got, vec![p4::Entity { entity: Some(E::ValueSetEntry(vs)) }]);
}

#[test]
fn action_profile_members_groups_and_multicast() {
    let (mut k, _s, n) = ready();
    let prof = n["I.sel"];
    let member = |id: u32, port: u8| p4::ActionProfileMember {
        action_profile_id: prof,
        member_id: id,
        action: Some(p4::Action {
            action_id: n["I.lb"],
            params: vec![p4::action::Param { param_id: 1, value: vec![port] }],
        }),
    };
    k.write(10, 0, vec![update(INSERT, E::ActionProfileMember(member(1, 4)))]).unwrap();
    let grp = p4::ActionProfileGroup {
        action_profile_id: prof,
        group_id: 100,
        members: vec![p4::action_profile_group::Member {
            member_id: 1,
            weight: 1,
            ..Default::default()
        }],
        max_size: 4,
    };
    k.write(10, 0, vec![update(INSERT, E::ActionProfileGroup(grp.clone()))]).unwrap();
    // A group naming a missing member: NOT_FOUND.
    let bad = p4::ActionProfileGroup {
        group_id: 101,
        members: vec![p4::action_profile_group::Member {
            member_id: 9,
            weight: 1,
            ..Default::default()
        }],
        ..grp.clone()
    };
    let e = k.write(10, 0, vec![update(INSERT, E::ActionProfileGroup(bad))]).unwrap_err();
    assert_eq!(write_errors(&e)[0].canonical_code, Code::NotFound as i32);
    // An entry naming the group; packets of EtherType 0x8888 go to the member's port.
    let te = p4::TableEntry {
        table_id: n["I.ecmp"],
        r#match: vec![exact(1, &[0x88, 0x88])],
        action: Some(p4::TableAction {
            r#type: Some(p4::table_action::Type::ActionProfileGroupId(100)),
        }),
        ..Default::default()
    };
    k.write(10, 0, vec![update(INSERT, E::TableEntry(te.clone()))]).unwrap();
    assert_eq!(k.run(&[(1, eth(MAC1, MAC2, 0x8888))])[0].0, 4);
    // Modify the member: the group follows.
    k.write(10, 0, vec![update(MODIFY, E::ActionProfileMember(member(1, 6)))]).unwrap();
    assert_eq!(k.run(&[(1, eth(MAC1, MAC2, 0x8888))])[0].0, 6);
    // Read back by the controller's ids.
    assert_eq!(read_table(&mut k, n["I.ecmp"])[0].action, te.action);
    let got = k
        .read(vec![p4::Entity {
            entity: Some(E::ActionProfileGroup(p4::ActionProfileGroup {
                action_profile_id: prof,
                ..Default::default()
            })),
        }])
        .unwrap();
    assert_eq!(got, vec![p4::Entity { entity: Some(E::ActionProfileGroup(grp)) }]);
    // A member in a group cannot be deleted.
    let e = k.write(10, 0, vec![update(DELETE, E::ActionProfileMember(member(1, 6)))]).unwrap_err();
    assert_eq!(write_errors(&e)[0].canonical_code, Code::FailedPrecondition as i32);

    // Multicast: group 5 to ports 1 and 2 (instance 0) and 3 (instance 1).
    let rep = |port: u8, instance: u32| p4::Replica {
        port_kind: Some(p4::replica::PortKind::Port(vec![port])),
        instance,
    };
    let mg = p4::MulticastGroupEntry {
        multicast_group_id: 5,
        replicas: vec![rep(1, 0), rep(2, 0), rep(3, 1)],
    };
    let pre = |m: p4::MulticastGroupEntry| {
        E::PacketReplicationEngineEntry(p4::PacketReplicationEngineEntry {
            r#type: Some(p4::packet_replication_engine_entry::Type::MulticastGroupEntry(m)),
        })
    };
    k.write(10, 0, vec![update(INSERT, pre(mg.clone()))]).unwrap();
    let e = k.write(10, 0, vec![update(INSERT, pre(mg.clone()))]).unwrap_err();
    assert_eq!(write_errors(&e)[0].canonical_code, Code::AlreadyExists as i32);
    // The ACL sends source 00..02 to group 5.
    let acl = p4::TableEntry {
        table_id: n["I.acl"],
        r#match: vec![p4::FieldMatch {
            field_id: 1,
            field_match_type: Some(p4::field_match::FieldMatchType::Ternary(
                p4::field_match::Ternary { value: vec![2], mask: vec![0xff] },
            )),
        }],
        action: action(n["I.set_mcast"], &[(1, &[5])]),
        priority: 1,
        ..Default::default()
    };
    k.write(10, 0, vec![update(INSERT, E::TableEntry(acl))]).unwrap();
    let mut ports: Vec<u16> = k.run(&[(1, eth(MAC1, MAC2, 0x0800))]).iter().map(|x| x.0).collect();
    ports.sort_unstable();
    assert_eq!(ports, vec![1, 2, 3]);
    let got =
        k.read(vec![p4::Entity { entity: Some(pre(p4::MulticastGroupEntry::default())) }]).unwrap();
    assert_eq!(got, vec![p4::Entity { entity: Some(pre(mg)) }]);
}

#[test]
fn packet_out_comes_back_as_packet_in_with_metadata() {
    let (mut k, mut s, n) = ready();
    let po_id = n["packet_out"];
    let pi_id = n["packet_in"];
    assert_ne!(po_id, 0);
    // Sent to the CPU port (255): the program loops it back to the controller.
    let payload = eth(MAC1, MAC2, 0x0800);
    let po = p4::PacketOut {
        payload: payload.clone(),
        metadata: vec![
            p4::PacketMetadata { metadata_id: 1, value: vec![0, 255] },
            p4::PacketMetadata { metadata_id: 2, value: vec![0] },
        ],
    };
    k.send(&s, p4::stream_message_request::Update::Packet(po));
    // The stage takes it at its next call.
    let mut got = None;
    for _ in 0..50 {
        assert!(k.run(&[]).is_empty());
        if let Ok(Some(m)) = k.recv(&mut s) {
            got = Some(m);
            break;
        }
    }
    let Some(p4::StreamMessageResponse {
        update: Some(p4::stream_message_response::Update::Packet(pi)),
    }) = got
    else {
        panic!("no packet-in: {got:?}");
    };
    assert_eq!(pi.payload, payload);
    // Every field of the packet_in header, padding included, in header order.
    assert_ne!(pi_id, 0);
    assert_eq!(
        pi.metadata,
        vec![
            p4::PacketMetadata { metadata_id: 1, value: vec![255] },
            p4::PacketMetadata { metadata_id: 2, value: vec![0] }
        ]
    );
    // Sent to port 3 instead: it leaves there, without the packet_out header.
    let po = p4::PacketOut {
        payload: payload.clone(),
        metadata: vec![
            p4::PacketMetadata { metadata_id: 1, value: vec![3] },
            p4::PacketMetadata { metadata_id: 2, value: vec![0] },
        ],
    };
    k.send(&s, p4::stream_message_request::Update::Packet(po));
    let mut out = Vec::new();
    for _ in 0..50 {
        out = k.run(&[]);
        if !out.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(out, vec![(3, payload)]);
    // Unknown metadata: a StreamError, nothing sent.
    let bad = p4::PacketOut {
        payload: vec![1],
        metadata: vec![p4::PacketMetadata { metadata_id: 9, value: vec![1] }],
    };
    k.send(&s, p4::stream_message_request::Update::Packet(bad));
    let Ok(Some(p4::StreamMessageResponse {
        update: Some(p4::stream_message_response::Update::Error(e)),
    })) = k.recv(&mut s)
    else {
        panic!("no stream error");
    };
    assert_eq!(e.canonical_code, Code::InvalidArgument as i32);
}

#[test]
fn digests_are_listed_after_a_digest_entry_and_deduplicated_until_acked() {
    let (mut k, mut s, n) = ready();
    let id = n["learn_t"];
    // Before a DigestEntry, digests are not sent.
    k.run(&[(4, eth(MAC1, MAC2, 0x9999))]);
    assert!(matches!(k.recv(&mut s), Ok(None)));
    let de = p4::DigestEntry {
        digest_id: id,
        config: Some(p4::digest_entry::Config {
            max_timeout_ns: 0,
            max_list_size: 1,
            ack_timeout_ns: 10_000_000_000,
        }),
    };
    k.write(10, 0, vec![update(INSERT, E::DigestEntry(de))]).unwrap();
    k.run(&[(4, eth(MAC1, MAC2, 0x9999))]);
    let Ok(Some(p4::StreamMessageResponse {
        update: Some(p4::stream_message_response::Update::Digest(d)),
    })) = k.recv(&mut s)
    else {
        panic!("no digest list");
    };
    assert_eq!(d.digest_id, id);
    let want = p4::P4Data {
        data: Some(p4::p4_data::Data::Struct(p4::P4StructLike {
            members: vec![
                p4::P4Data { data: Some(p4::p4_data::Data::Bitstring(vec![2])) },
                p4::P4Data { data: Some(p4::p4_data::Data::Bitstring(vec![4])) },
            ],
        })),
    };
    assert_eq!(d.data, vec![want]);
    // The same data again before the ack: not sent.
    k.run(&[(4, eth(MAC1, MAC2, 0x9999))]);
    assert!(matches!(k.recv(&mut s), Ok(None)));
    // After the ack it is.
    k.send(
        &s,
        p4::stream_message_request::Update::DigestAck(p4::DigestListAck {
            digest_id: id,
            list_id: d.list_id,
        }),
    );
    std::thread::sleep(std::time::Duration::from_millis(50));
    k.run(&[(4, eth(MAC1, MAC2, 0x9999))]);
    assert!(matches!(k.recv(&mut s), Ok(Some(_))));
}

#[test]
fn reconcile_and_commit_keeps_entries_and_a_new_program_clears_them() {
    let (mut k, _s, n) = ready();
    k.write(10, 0, vec![update(INSERT, E::TableEntry(fwd_entry(&n, MAC1, 3)))]).unwrap();
    k.set_pipeline(10, RECONCILE_AND_COMMIT, Some(config(TEST_PROGRAM))).unwrap();
    assert_eq!(read_table(&mut k, n["I.fwd"]).len(), 1);
    assert_eq!(k.run(&[(1, eth(MAC1, MAC2, 0x0800))])[0].0, 3);
    k.set_pipeline(10, VERIFY_AND_COMMIT, Some(config(TEST_PROGRAM))).unwrap();
    assert!(read_table(&mut k, n["I.fwd"]).is_empty());
    assert!(k.run(&[(1, eth(MAC1, MAC2, 0x0800))]).is_empty());
}

#[test]
fn capabilities_names_the_api_version() {
    let k = Kit::new();
    let mut c = k.client.clone();
    let v =
        k.rt.block_on(async move { c.capabilities(p4::CapabilitiesRequest {}).await })
            .unwrap()
            .into_inner();
    assert_eq!(v.p4runtime_api_version, "1.4.1");
}

#[test]
fn every_worker_gets_the_writes_and_counters_are_summed() {
    let mut k = Kit::with_workers(2);
    let _s = k.primary_with(10, TEST_PROGRAM);
    let n = names();
    k.write(10, 0, vec![update(INSERT, E::TableEntry(fwd_entry(&n, MAC1, 3)))]).unwrap();
    assert_eq!(k.run_on(0, &[(2, eth(MAC1, MAC2, 0x0800))])[0].0, 3);
    assert_eq!(k.run_on(1, &[(2, eth(MAC1, MAC2, 0x0800)), (2, eth(MAC1, MAC2, 0x0800))])[0].0, 3);
    let q = p4::CounterEntry {
        counter_id: n["I.port_ctr"],
        index: Some(p4::Index { index: 2 }),
        data: None,
    };
    let got = k.read(vec![p4::Entity { entity: Some(E::CounterEntry(q)) }]).unwrap();
    let Some(E::CounterEntry(c)) = &got[0].entity else { panic!() };
    assert_eq!(c.data.unwrap().packet_count, 3, "1 on worker 0 + 2 on worker 1");
    let q = p4::TableEntry {
        table_id: n["I.fwd"],
        counter_data: Some(p4::CounterData::default()),
        ..Default::default()
    };
    let got = k.read(vec![p4::Entity { entity: Some(E::TableEntry(q)) }]).unwrap();
    let Some(E::TableEntry(t)) = &got[0].entity else { panic!() };
    assert_eq!(t.counter_data.unwrap().packet_count, 3);
}

#[test]
fn idle_entries_are_notified_once_and_report_their_idle_time() {
    let (mut k, mut s, n) = ready();
    // A table without support_timeout refuses a time to live.
    let acl = p4::TableEntry {
        table_id: n["I.acl"],
        r#match: vec![p4::FieldMatch {
            field_id: 1,
            field_match_type: Some(p4::field_match::FieldMatchType::Ternary(
                p4::field_match::Ternary { value: vec![2], mask: vec![0xff] },
            )),
        }],
        action: action(n["I.set_mcast"], &[(1, &[5])]),
        priority: 1,
        idle_timeout_ns: 1_000_000,
        ..Default::default()
    };
    let e = k.write(10, 0, vec![update(INSERT, E::TableEntry(acl))]).unwrap_err();
    assert_eq!(write_errors(&e)[0].canonical_code, Code::InvalidArgument as i32);
    // MAC1 with a 50 ms time to live, MAC2 without one.
    let mut short = fwd_entry(&n, MAC1, 1);
    short.idle_timeout_ns = 50_000_000;
    short.metadata = b"cookie".to_vec();
    k.write(
        10,
        0,
        vec![
            update(INSERT, E::TableEntry(short)),
            update(INSERT, E::TableEntry(fwd_entry(&n, MAC2, 2))),
        ],
    )
    .unwrap();
    let q = p4::TableEntry {
        table_id: n["I.fwd"],
        time_since_last_hit: Some(p4::table_entry::IdleTimeout { elapsed_ns: 0 }),
        ..Default::default()
    };
    let rows = k.read(vec![p4::Entity { entity: Some(E::TableEntry(q)) }]).unwrap();
    let ttls: Vec<i64> = rows
        .iter()
        .filter_map(|r| match &r.entity {
            Some(E::TableEntry(t)) => Some(t.idle_timeout_ns),
            _ => None,
        })
        .collect();
    assert!(ttls.contains(&50_000_000) && ttls.contains(&0), "{ttls:?}");
    assert!(
        rows.iter().all(
            |r| matches!(&r.entity, Some(E::TableEntry(t)) if t.time_since_last_hit.is_some())
        )
    );
    // No packets: MAC1 expires and is notified, with its key and metadata; MAC2 never is.
    let mut note = None;
    for _ in 0..5 {
        if let Ok(Some(p4::StreamMessageResponse {
            update: Some(p4::stream_message_response::Update::IdleTimeoutNotification(n)),
        })) = k.recv(&mut s)
        {
            note = Some(n);
            break;
        }
    }
    let note = note.expect("an idle timeout notification");
    assert_eq!(note.table_entry.len(), 1);
    let t = &note.table_entry[0];
    assert_eq!(t.r#match, vec![exact(1, &[1])]);
    assert_eq!(t.idle_timeout_ns, 50_000_000);
    assert_eq!(t.metadata, b"cookie");
    // Once per idle period: nothing more while it stays idle.
    assert!(!matches!(
        k.recv(&mut s),
        Ok(Some(p4::StreamMessageResponse {
            update: Some(p4::stream_message_response::Update::IdleTimeoutNotification(_))
        }))
    ));
}

/// A PNA program over P4Runtime: GFT (`examples/p4/gft_pna.p4`) with its policy written by the
/// controller; the first packet of a flow installs it from the data plane (add-on-miss), and
/// the controller reads the learned entry back.
#[test]
fn pna_gft_learns_flows_the_controller_can_read() {
    const GFT: &str = include_str!("../../../examples/p4/gft_pna.p4");
    let mut k = Kit::new();
    let _s = k.primary_with(1, GFT);
    let cfg = config(GFT);
    assert_eq!(cfg.p4info.as_ref().unwrap().pkg_info.as_ref().unwrap().arch, "pna");
    let n = ids(cfg.p4info.as_ref().unwrap());
    let tern = |id: u32, v: &[u8], m: &[u8]| p4::FieldMatch {
        field_id: id,
        field_match_type: Some(p4::field_match::FieldMatchType::Ternary(
            p4::field_match::Ternary { value: v.to_vec(), mask: m.to_vec() },
        )),
    };
    // Allow 10.0.0.0/8; map 10.0.0.2 to provider address 192.168.100.2, VNI 42.
    let acl = p4::TableEntry {
        table_id: n["MainControlImpl.acl"],
        r#match: vec![tern(2, &[10, 0, 0, 0], &[0xff, 0, 0, 0])],
        action: action(n["MainControlImpl.allow"], &[]),
        priority: 10,
        ..Default::default()
    };
    let vnet = p4::TableEntry {
        table_id: n["MainControlImpl.vnet"],
        r#match: vec![exact(1, &[10, 0, 0, 2])],
        action: action(
            n["MainControlImpl.map"],
            &[(1, &[192, 168, 100, 2]), (2, &[2, 0, 0, 0, 0, 2]), (3, &[42])],
        ),
        ..Default::default()
    };
    k.write(1, 0, vec![update(INSERT, E::TableEntry(acl)), update(INSERT, E::TableEntry(vnet))])
        .unwrap();
    // Flow A (UDP 10.0.0.1:1000 -> 10.0.0.2:9000) from the VM port, as in gft_pna.stf.
    let hex = "02000000000202000000000108004500003200000000401166b90a0000010a00000203e82328001e000000000000000000000000000000000000000000000000";
    let pkt: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let out = k.run(&[(0, pkt.clone())]);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].0, 1, "to the uplink");
    assert_eq!(&out[0].1[out[0].1.len() - pkt.len()..], &pkt[..], "the inner frame, encapsulated");
    // The flow table learned the flow: the controller sees it, with the encap action.
    let flows = read_table(&mut k, n["MainControlImpl.flows"]);
    assert_eq!(flows.len(), 1, "{flows:?}");
    let Some(p4::table_action::Type::Action(a)) =
        flows[0].action.as_ref().and_then(|a| a.r#type.clone())
    else {
        panic!("no action");
    };
    assert_eq!(a.action_id, n["MainControlImpl.encap"]);
    assert_eq!(a.params[0].value, vec![192, 168, 100, 2]);
    // The second packet hits the learned entry: the same output.
    assert_eq!(k.run(&[(0, pkt)]), out);
    assert_eq!(read_table(&mut k, n["MainControlImpl.flows"]).len(), 1);
}

/// After VERIFY_AND_SAVE, writes and reads go to the saved pipeline while the data plane runs
/// the committed one; COMMIT makes them live.
#[test]
fn writes_after_save_apply_at_commit() {
    let (mut k, _s, n) = ready();
    k.write(10, 0, vec![update(INSERT, E::TableEntry(fwd_entry(&n, MAC1, 3)))]).unwrap();
    k.set_pipeline(10, VERIFY_AND_SAVE, Some(config(TEST_PROGRAM))).unwrap();
    // The saved pipeline starts empty; the committed one still forwards MAC1.
    assert!(read_table(&mut k, n["I.fwd"]).is_empty());
    k.write(10, 0, vec![update(INSERT, E::TableEntry(fwd_entry(&n, MAC2, 4)))]).unwrap();
    assert_eq!(read_table(&mut k, n["I.fwd"]).len(), 1);
    assert_eq!(k.run(&[(1, eth(MAC1, MAC1, 0x0800))])[0].0, 3);
    assert!(k.run(&[(1, eth(MAC2, MAC1, 0x0800))]).is_empty(), "not live before COMMIT");
    k.set_pipeline(10, COMMIT, None).unwrap();
    assert!(k.run(&[(1, eth(MAC1, MAC1, 0x0800))]).is_empty(), "the old entry went");
    assert_eq!(k.run(&[(1, eth(MAC2, MAC1, 0x0800))])[0].0, 4);
}
