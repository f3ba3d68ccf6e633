//! The P4Runtime specification's rules, one test each, section by section: the cases an
//! independent review of the server against the specification found wrong (each failed
//! before its fix), kept as regression tests.

use snic_p4rt::proto::p4::v1 as p4;
use snic_p4rt::testing::{
    DELETE, INSERT, Kit, MAC1, MAC2, MODIFY, Stream, TEST_PROGRAM, action, config, eth, exact,
    fwd_entry, ids, ready, table_entries, update, write_errors,
};
use tonic::Code;

use p4::entity::Entity as E;

fn code(e: &tonic::Status) -> i32 {
    write_errors(e).first().map_or(e.code() as i32, |x| x.canonical_code)
}

/// Spec 5.4 "If the election_id is set and is already used..." — an unset election id is
/// allowed (the client is a backup).
#[test]
fn arbitration_without_election_id_is_accepted_as_backup() {
    let mut k = Kit::new();
    let mut a = k.stream(5);
    assert_eq!(k.arbitration_code(&mut a), Some(0));
    let mut b = k.stream(1);
    let _ = k.recv(&mut b);
    let upd =
        p4::MasterArbitrationUpdate { device_id: 1, role: None, election_id: None, status: None };
    // A fresh stream whose first arbitration has no election id.
    let mut c = k.stream(2);
    let _ = k.recv(&mut c);
    drop(b);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut client = k.client.clone();
    let mut rx = k.rt.block_on(async move {
        client
            .stream_channel(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner()
    });
    k.rt.block_on(tx.send(p4::StreamMessageRequest {
        update: Some(p4::stream_message_request::Update::Arbitration(upd)),
    }))
    .unwrap();
    let got = k.rt.block_on(async {
        tokio::time::timeout(std::time::Duration::from_secs(1), rx.message()).await
    });
    match got {
        Ok(Ok(Some(m))) => {
            let Some(p4::stream_message_response::Update::Arbitration(a)) = m.update else {
                panic!()
            };
            assert_eq!(a.status.unwrap().code, Code::AlreadyExists as i32);
        }
        other => panic!("unset election id refused: {other:?}"),
    }
}

/// Spec 5.4 rule 2.1: a live stream changing device_id -> FAILED_PRECONDITION.
#[test]
fn live_stream_changing_device_id_is_failed_precondition() {
    let mut k = Kit::new();
    let mut a = k.stream(5);
    assert_eq!(k.arbitration_code(&mut a), Some(0));
    k.arbitrate(&a, 99, 5, "");
    loop {
        match k.recv(&mut a) {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("not refused"),
            Err(st) => {
                assert_eq!(st.code(), Code::FailedPrecondition);
                break;
            }
        }
    }
}

/// Spec 9.1.2 "Action Specification": action may be left unset for MODIFY (action unchanged).
#[test]
fn modify_without_action_keeps_the_action() {
    let (mut k, _s, n) = ready();
    k.write(10, 0, vec![update(INSERT, E::TableEntry(fwd_entry(&n, MAC1, 3)))]).unwrap();
    let mut m = fwd_entry(&n, MAC1, 3);
    m.action = None;
    m.metadata = b"cookie".to_vec();
    let r = k.write(10, 0, vec![update(MODIFY, E::TableEntry(m))]);
    assert!(r.is_ok(), "MODIFY without action refused: {:?}", r.err().map(|e| write_errors(&e)));
}

/// Spec 9.1.6 Wildcard reads: priority 0 is a wildcard; a read by match on a ternary table
/// without priority must not be an error.
#[test]
fn read_by_match_without_priority_on_ternary_table() {
    let (mut k, _s, n) = ready();
    let acl = n["I.acl"];
    let tern = p4::FieldMatch {
        field_id: 1,
        field_match_type: Some(p4::field_match::FieldMatchType::Ternary(
            p4::field_match::Ternary { value: vec![2], mask: vec![0xff] },
        )),
    };
    let e = |p| p4::TableEntry {
        table_id: acl,
        r#match: vec![tern.clone()],
        action: action(n["I.set_mcast"], &[(1, &[7])]),
        priority: p,
        ..Default::default()
    };
    k.write(10, 0, vec![update(INSERT, E::TableEntry(e(5))), update(INSERT, E::TableEntry(e(9)))])
        .unwrap();
    let q = p4::TableEntry { table_id: acl, r#match: vec![tern.clone()], ..Default::default() };
    let got = table_entries(&mut k, q);
    assert!(got.is_ok(), "read by match, priority 0: {:?}", got.err());
    assert_eq!(got.unwrap().len(), 2);
}

/// Spec 9.1.6: priority alone filters.
#[test]
fn read_filters_by_priority_and_action() {
    let (mut k, _s, n) = ready();
    let acl = n["I.acl"];
    let e = |v: u8, p| p4::TableEntry {
        table_id: acl,
        r#match: vec![p4::FieldMatch {
            field_id: 1,
            field_match_type: Some(p4::field_match::FieldMatchType::Ternary(
                p4::field_match::Ternary { value: vec![v], mask: vec![0xff] },
            )),
        }],
        action: action(n["I.set_mcast"], &[(1, &[7])]),
        priority: p,
        ..Default::default()
    };
    k.write(
        10,
        0,
        vec![update(INSERT, E::TableEntry(e(1, 5))), update(INSERT, E::TableEntry(e(2, 9)))],
    )
    .unwrap();
    let q = p4::TableEntry { table_id: acl, priority: 9, ..Default::default() };
    assert_eq!(table_entries(&mut k, q).unwrap().len(), 1, "priority filter ignored");
}

/// Spec 9.2.2: group DELETE while a table entry references it -> FAILED_PRECONDITION; same for
/// a member (9.2.1).
#[test]
fn delete_group_or_member_referenced_by_entry_fails() {
    let (mut k, _s, n) = ready();
    let prof = n["I.sel"];
    let member = p4::ActionProfileMember {
        action_profile_id: prof,
        member_id: 1,
        action: Some(p4::Action {
            action_id: n["I.lb"],
            params: vec![p4::action::Param { param_id: 1, value: vec![4] }],
        }),
    };
    k.write(10, 0, vec![update(INSERT, E::ActionProfileMember(member.clone()))]).unwrap();
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
    let te = p4::TableEntry {
        table_id: n["I.ecmp"],
        r#match: vec![exact(1, &[0x88, 0x88])],
        action: Some(p4::TableAction {
            r#type: Some(p4::table_action::Type::ActionProfileGroupId(100)),
        }),
        ..Default::default()
    };
    k.write(10, 0, vec![update(INSERT, E::TableEntry(te))]).unwrap();
    let r = k.write(10, 0, vec![update(DELETE, E::ActionProfileGroup(grp))]);
    let after =
        table_entries(&mut k, p4::TableEntry { table_id: n["I.ecmp"], ..Default::default() })
            .unwrap();
    eprintln!("entry after group delete: {:?}", after.first().map(|t| &t.action));
    eprintln!("packet after group delete: {:?}", k.run(&[(1, eth(MAC1, MAC2, 0x8888))]));
    assert_eq!(r.map_err(|e| code(&e)), Err(Code::FailedPrecondition as i32));
}

/// Spec 9.2.2: weight 0 is INVALID_ARGUMENT.
#[test]
fn group_member_weight_zero_is_invalid() {
    let (mut k, _s, n) = ready();
    let prof = n["I.sel"];
    let member = p4::ActionProfileMember {
        action_profile_id: prof,
        member_id: 1,
        action: Some(p4::Action {
            action_id: n["I.lb"],
            params: vec![p4::action::Param { param_id: 1, value: vec![4] }],
        }),
    };
    k.write(10, 0, vec![update(INSERT, E::ActionProfileMember(member))]).unwrap();
    let grp = p4::ActionProfileGroup {
        action_profile_id: prof,
        group_id: 100,
        members: vec![p4::action_profile_group::Member {
            member_id: 1,
            weight: 0,
            ..Default::default()
        }],
        max_size: 4,
    };
    let r = k.write(10, 0, vec![update(INSERT, E::ActionProfileGroup(grp))]);
    assert_eq!(r.map_err(|e| code(&e)), Err(Code::InvalidArgument as i32));
}

/// Spec 9.3.2: CounterEntry MODIFY with data unset: the counter value is not modified.
#[test]
fn counter_modify_without_data_keeps_values() {
    let (mut k, _s, n) = ready();
    k.run(&[(2, eth(MAC1, MAC2, 0x1234))]);
    let q = p4::CounterEntry {
        counter_id: n["I.port_ctr"],
        index: Some(p4::Index { index: 2 }),
        data: None,
    };
    k.write(10, 0, vec![update(MODIFY, E::CounterEntry(q))]).unwrap();
    let got = k.read(vec![p4::Entity { entity: Some(E::CounterEntry(q)) }]).unwrap();
    let Some(E::CounterEntry(c)) = &got[0].entity else { panic!() };
    assert_eq!(c.data.unwrap().packet_count, 1, "counter zeroed by a MODIFY without data");
}

/// Spec 9.1: `const` must be false in writes, else INVALID_ARGUMENT.
#[test]
fn const_true_in_insert_is_invalid() {
    let (mut k, _s, n) = ready();
    let mut e = fwd_entry(&n, MAC1, 3);
    e.r#const = true;
    let r = k.write(10, 0, vec![update(INSERT, E::TableEntry(e))]);
    assert_eq!(r.map_err(|e| code(&e)), Err(Code::InvalidArgument as i32));
}

/// Spec 9.3.1: DirectCounterEntry MODIFY with data unset: value not modified.
#[test]
fn direct_counter_modify_without_data_keeps_values() {
    let (mut k, _s, n) = ready();
    k.write(10, 0, vec![update(INSERT, E::TableEntry(fwd_entry(&n, MAC1, 3)))]).unwrap();
    k.run(&[(1, eth(MAC1, MAC2, 0x1234))]);
    let mut key = fwd_entry(&n, MAC1, 3);
    key.action = None;
    let dc = p4::DirectCounterEntry { table_entry: Some(key.clone()), data: None };
    k.write(10, 0, vec![update(MODIFY, E::DirectCounterEntry(dc.clone()))]).unwrap();
    let got = k.read(vec![p4::Entity { entity: Some(E::DirectCounterEntry(dc)) }]).unwrap();
    let Some(E::DirectCounterEntry(c)) = &got[0].entity else { panic!() };
    assert_eq!(c.data.unwrap().packet_count, 1, "direct counter zeroed");
}

/// Spec 5.4: the primary re-sending its arbitration notifies every controller of the role.
#[test]
fn primary_reasserting_notifies_backups() {
    let mut k = Kit::new();
    let mut a = k.stream(5);
    assert_eq!(k.arbitration_code(&mut a), Some(0));
    let mut b = k.stream(3);
    assert_eq!(k.arbitration_code(&mut b), Some(Code::AlreadyExists as i32));
    k.arbitrate(&a, 1, 5, "");
    assert_eq!(k.arbitration_code(&mut a), Some(0));
    assert_eq!(k.arbitration_code(&mut b), Some(Code::AlreadyExists as i32), "backup not told");
}

/// Spec 9.1.2: a read of a non-existent DirectCounterEntry match -> NOT_FOUND.
#[test]
fn direct_counter_read_of_missing_entry_is_not_found() {
    let (mut k, _s, n) = ready();
    let mut key = fwd_entry(&n, MAC2, 3);
    key.action = None;
    let dc = p4::DirectCounterEntry { table_entry: Some(key), data: None };
    let r = k.read(vec![p4::Entity { entity: Some(E::DirectCounterEntry(dc)) }]);
    assert_eq!(r.map(|v| v.len()).map_err(|e| e.code()), Err(Code::NotFound));
}

fn next_digest(k: &Kit, s: &mut Stream) -> Option<p4::DigestList> {
    match k.recv(s) {
        Ok(Some(p4::StreamMessageResponse {
            update: Some(p4::stream_message_response::Update::Digest(d)),
        })) => Some(d),
        _ => None,
    }
}

/// Spec 9.8 DigestEntry: "If ack_timeout_ns is set to 0, the cache must always be an empty set."
#[test]
fn ack_timeout_zero_means_no_dedup_cache() {
    let (mut k, mut s, n) = ready();
    let de = p4::DigestEntry {
        digest_id: n["learn_t"],
        config: Some(p4::digest_entry::Config {
            max_timeout_ns: 0,
            max_list_size: 1,
            ack_timeout_ns: 0,
        }),
    };
    k.write(10, 0, vec![update(INSERT, E::DigestEntry(de))]).unwrap();
    k.run(&[(4, eth(MAC1, MAC2, 0x9999))]);
    assert!(next_digest(&k, &mut s).is_some());
    k.run(&[(4, eth(MAC1, MAC2, 0x9999))]);
    assert!(next_digest(&k, &mut s).is_some(), "same data suppressed forever without an ack");
}

/// Spec 9.8: max_list_size 0 = no size limit; the server honours max_timeout_ns (batches).
#[test]
fn max_list_size_zero_batches_until_timeout() {
    let (mut k, mut s, n) = ready();
    let de = p4::DigestEntry {
        digest_id: n["learn_t"],
        config: Some(p4::digest_entry::Config {
            max_timeout_ns: 500_000_000,
            max_list_size: 0,
            ack_timeout_ns: 0,
        }),
    };
    k.write(10, 0, vec![update(INSERT, E::DigestEntry(de))]).unwrap();
    k.run(&[(4, eth(MAC1, MAC2, 0x9999))]);
    std::thread::sleep(std::time::Duration::from_millis(50));
    k.run(&[(5, eth(MAC1, MAC1, 0x9999))]);
    let d = next_digest(&k, &mut s).expect("a list");
    assert_eq!(d.data.len(), 2, "lists of one sent at once, max_timeout_ns ignored");
}

/// Spec 9.1.4 Default entry: it is treated like a regular entry; its metadata is kept.
#[test]
fn default_entry_keeps_its_metadata() {
    let (mut k, _s, n) = ready();
    let d = p4::TableEntry {
        table_id: n["I.fwd"],
        action: action(n["I.to_cpu"], &[]),
        is_default_action: true,
        metadata: b"m".to_vec(),
        ..Default::default()
    };
    k.write(10, 0, vec![update(MODIFY, E::TableEntry(d))]).unwrap();
    let got = table_entries(
        &mut k,
        p4::TableEntry { table_id: n["I.fwd"], is_default_action: true, ..Default::default() },
    )
    .unwrap();
    assert_eq!(got[0].metadata, b"m".to_vec());
}

/// Spec 9.4.1: a multicast group id of 0 in a Write is INVALID_ARGUMENT.
#[test]
fn mcast_group_zero_is_invalid_argument() {
    let (mut k, _s, _n) = ready();
    let g = p4::PacketReplicationEngineEntry {
        r#type: Some(p4::packet_replication_engine_entry::Type::MulticastGroupEntry(
            p4::MulticastGroupEntry { multicast_group_id: 0, replicas: vec![] },
        )),
    };
    let r = k.write(10, 0, vec![update(INSERT, E::PacketReplicationEngineEntry(g))]);
    assert_eq!(r.map_err(|e| code(&e)), Err(Code::InvalidArgument as i32));
}

/// Spec 9.3.2: a negative counter index is INVALID_ARGUMENT.
#[test]
fn negative_index_is_invalid_argument() {
    let (mut k, _s, n) = ready();
    let q = p4::CounterEntry {
        counter_id: n["I.port_ctr"],
        index: Some(p4::Index { index: -1 }),
        data: Some(p4::CounterData { byte_count: 1, packet_count: 1 }),
    };
    let r = k.write(10, 0, vec![update(MODIFY, E::CounterEntry(q))]);
    assert_eq!(r.map_err(|e| code(&e)), Err(Code::InvalidArgument as i32));
}

/// Spec 9.6 ValueSetEntry: duplicate members -> ALREADY_EXISTS.
#[test]
fn value_set_duplicate_members_already_exists() {
    let (mut k, _s, _n) = ready();
    let info = config(TEST_PROGRAM).p4info.unwrap();
    let vs = info.value_sets[0].preamble.as_ref().unwrap().id;
    let m = p4::ValueSetMember { r#match: vec![exact(1, &[0x12, 0x34])] };
    let e = p4::ValueSetEntry { value_set_id: vs, members: vec![m.clone(), m] };
    let r = k.write(10, 0, vec![update(MODIFY, E::ValueSetEntry(e))]);
    assert_eq!(r.map_err(|e| code(&e)), Err(Code::AlreadyExists as i32));
}

/// Spec 13 GetForwardingPipelineConfig: with no config, the top-level `config` is unset.
#[test]
fn get_without_pipeline_leaves_config_unset() {
    let k = Kit::new();
    let mut c = k.client.clone();
    let r =
        k.rt.block_on(async move {
            c.get_forwarding_pipeline_config(p4::GetForwardingPipelineConfigRequest {
                device_id: 1,
                response_type: 0,
            })
            .await
        })
        .unwrap()
        .into_inner();
    assert!(r.config.is_none(), "config set: {:?}", r.config);
}

/// Spec 5.3 Role Config: an unset role.config is full pipeline access; the primary of a
/// named role (e.g. PINS' "sdn_controller") can do packet I/O.
#[test]
fn named_role_primary_can_packet_out_and_gets_packet_ins() {
    let mut k = Kit::new();
    let mut s = k.stream_role(5, "sdn");
    assert_eq!(k.arbitration_code(&mut s), Some(0));
    let req = p4::SetForwardingPipelineConfigRequest {
        device_id: 1,
        role: "sdn".into(),
        election_id: snic_p4rt::testing::eid(5),
        action: 3,
        config: Some(config(TEST_PROGRAM)),
        ..Default::default()
    };
    let mut c = k.client.clone();
    k.rt.block_on(async move { c.set_forwarding_pipeline_config(req).await }).unwrap();
    let po = p4::PacketOut {
        payload: eth(MAC1, MAC2, 0x0800),
        metadata: vec![
            p4::PacketMetadata { metadata_id: 1, value: vec![3] },
            p4::PacketMetadata { metadata_id: 2, value: vec![0] },
        ],
    };
    k.send(&s, p4::stream_message_request::Update::Packet(po));
    let got = k.recv(&mut s);
    assert!(
        !matches!(
            got,
            Ok(Some(p4::StreamMessageResponse {
                update: Some(p4::stream_message_response::Update::Error(_))
            }))
        ),
        "packet-out refused: {got:?}"
    );
}

/// Spec 15.1 Packet I/O: a PacketOut must carry precisely one metadata per P4Info field, else
/// it is dropped (and may be reported).
#[test]
fn packet_out_missing_metadata_is_dropped() {
    let (mut k, mut s, _n) = ready();
    let po = p4::PacketOut {
        payload: eth(MAC1, MAC2, 0x0800),
        metadata: vec![p4::PacketMetadata { metadata_id: 2, value: vec![0] }], // egress_port missing
    };
    k.send(&s, p4::stream_message_request::Update::Packet(po));
    let mut out = Vec::new();
    for _ in 0..20 {
        out = k.run(&[]);
        if !out.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = k.recv(&mut s);
    assert!(out.is_empty(), "sent anyway: {:?}", out.iter().map(|x| x.0).collect::<Vec<_>>());
}

/// Spec 11.2 Read batch: a bad request in a batch still returns the good ones' entities,
/// then UNKNOWN with one p4.Error per request.
#[test]
fn read_batch_with_one_bad_request() {
    let (mut k, _s, n) = ready();
    k.write(10, 0, vec![update(INSERT, E::TableEntry(fwd_entry(&n, MAC1, 3)))]).unwrap();
    let good = p4::Entity {
        entity: Some(E::TableEntry(p4::TableEntry { table_id: n["I.fwd"], ..Default::default() })),
    };
    let bad = p4::Entity {
        entity: Some(E::TableEntry(p4::TableEntry { table_id: 0x0200_ffff, ..Default::default() })),
    };
    let r = k.read(vec![good, bad]);
    let st = r.unwrap_err();
    assert_eq!(st.code(), Code::Unknown, "{st:?}");
}

/// Spec 9.1.5 Idle-timeout: a default entry with idle_timeout_ns != 0 is INVALID_ARGUMENT.
#[test]
fn default_entry_with_idle_timeout_is_invalid() {
    let (mut k, _s, n) = ready();
    let d = p4::TableEntry {
        table_id: n["I.fwd"],
        action: action(n["I.to_cpu"], &[]),
        is_default_action: true,
        idle_timeout_ns: 1_000_000,
        ..Default::default()
    };
    let r = k.write(10, 0, vec![update(MODIFY, E::TableEntry(d))]);
    assert_eq!(r.map_err(|e| code(&e)), Err(Code::InvalidArgument as i32));
}

/// Spec 12 SetForwardingPipelineConfig: COMMIT without a saved config is NOT_FOUND.
#[test]
fn commit_without_saved_is_not_found() {
    let (mut k, _s, _n) = ready();
    let e = k.set_pipeline(10, 4, None).unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
}

/// Spec 9.1.4 Constant tables: const entries read back with priorities 1.. (lowest = 1 =
/// last declared), `const` set; and a default entry of a `const default_action` reads const.
#[test]
fn const_table_read_priorities() {
    let src = TEST_PROGRAM
        .replace(
            "    apply {\n        if (h.po.isValid()) {",
            "    table ct {\n        key = { h.eth.etype: ternary; }\n        actions = { forward; drop; }\n        const default_action = drop();\n        const entries = {\n            0x0800 &&& 0xffff : forward(1);\n            0x0806 &&& 0xffff : forward(2);\n            0x0000 &&& 0x0000 : forward(3);\n        }\n    }\n    apply {\n        ct.apply();\n        if (h.po.isValid()) {",
        );
    let mut k = Kit::new();
    let _s = k.primary_with(10, &src);
    let info = config(&src).p4info.unwrap();
    let n = ids(&info);
    let t = info.tables.iter().find(|t| t.preamble.as_ref().unwrap().name == "I.ct").unwrap();
    eprintln!(
        "is_const_table={} const_default_action_id={:#x}",
        t.is_const_table, t.const_default_action_id
    );
    let rows = table_entries(&mut k, p4::TableEntry { table_id: n["I.ct"], ..Default::default() })
        .unwrap();
    for r in &rows {
        eprintln!("prio={} const={} match={:?}", r.priority, r.r#const, r.r#match);
    }
    let d = table_entries(
        &mut k,
        p4::TableEntry { table_id: n["I.ct"], is_default_action: true, ..Default::default() },
    )
    .unwrap();
    eprintln!("default const={}", d[0].r#const);
    // Modify of the const default with the action unset (reset): PERMISSION_DENIED.
    let reset =
        p4::TableEntry { table_id: n["I.ct"], is_default_action: true, ..Default::default() };
    let r = k.write(10, 0, vec![update(MODIFY, E::TableEntry(reset))]);
    eprintln!("reset const default: {:?}", r.as_ref().map_err(code));
    let prios: Vec<i32> = rows.iter().map(|r| r.priority).collect();
    assert!(prios.contains(&1) && prios.contains(&3), "priorities {prios:?}");
    assert!(d[0].r#const, "const default entry not flagged const");
    assert_eq!(r.map_err(|e| code(&e)), Err(Code::PermissionDenied as i32));
}

/// Spec 9.2.1: a member may be bound only to the actions of the tables the profile implements.
#[test]
fn member_with_foreign_action_is_invalid() {
    let (mut k, _s, n) = ready();
    let m = p4::ActionProfileMember {
        action_profile_id: n["I.sel"],
        member_id: 1,
        action: Some(p4::Action {
            action_id: n["I.set_mcast"],
            params: vec![p4::action::Param { param_id: 1, value: vec![4] }],
        }),
    };
    let r = k.write(10, 0, vec![update(INSERT, E::ActionProfileMember(m))]);
    assert_eq!(r.map_err(|e| code(&e)), Err(Code::InvalidArgument as i32));
}
