//! Interop, scapy → snic: scapy builds a corpus of every format we parse (and some deliberately
//! broken frames) together with the fields it put in them; snic-wire parses every frame and each
//! field, the ICRC verdict and the error layer must agree with scapy's.
//!
//! The frame-to-fields code is the one `snic decode` uses (`src/report.rs`, included by path),
//! so this also pins what the CLI reports.

mod common;

#[allow(dead_code, reason = "the CLI's text rendering is not used here")]
#[path = "../src/report.rs"]
mod report;

use serde_json::Value;
use std::net::IpAddr;

const TEST: &str = "interop_scapy";

/// Compare one expected scalar (JSON null = absent) with what snic reported.
fn same<T: Into<Value>>(
    what: &str,
    name: &str,
    expected: &Value,
    got: Option<T>,
    out: &mut Vec<String>,
) {
    let got = got.map_or(Value::Null, Into::into);
    if *expected != got {
        out.push(format!("{name}: {what}: scapy says {expected}, snic says {got}"));
    }
}

fn check_packet(frame: &[u8], e: &Value, out: &mut Vec<String>) {
    let name = e["name"].as_str().unwrap_or("?").to_owned();
    let index = e["index"].as_u64().expect("index");
    let r = report::report(index, frame);

    same("len", &name, &e["len"], Some(r.len as u64), out);
    let layers: Vec<Value> = r.layers.iter().map(|l| Value::from(*l)).collect();
    same("layers", &name, &e["layers"], Some(Value::Array(layers)), out);
    same("error layer", &name, &e["error_layer"], r.error_layer, out);
    same("error kind", &name, &e["error"], r.error_kind, out);
    if let Some(prefix) = e.get("error_prefix").and_then(Value::as_str) {
        let text = r.error.clone().unwrap_or_default();
        if !text.starts_with(prefix) {
            out.push(format!("{name}: error text {text:?} does not start with {prefix:?}"));
        }
    }
    same("outer VLAN id", &name, &e["vlan_id"], r.vlan, out);
    same("VNI", &name, &e["vni"], r.vni, out);

    // Addresses compare as addresses, not strings (IPv6 spelling may differ).
    for (what, exp, got) in [("src", &e["src"], r.src), ("dst", &e["dst"], r.dst)] {
        let exp: Option<IpAddr> = exp.as_str().map(|s| s.parse().expect("scapy address parses"));
        if exp != got {
            out.push(format!("{name}: {what}: scapy says {exp:?}, snic says {got:?}"));
        }
    }
    same("IP protocol", &name, &e["proto"], r.proto, out);
    same("L4 source port", &name, &e["sport"], r.sport, out);
    same("L4 destination port", &name, &e["dport"], r.dport, out);

    if e.get("class_any").is_none() {
        same("class", &name, &e["class"], Some(r.class), out);
    }

    match (&e["roce"], &r.roce) {
        (Value::Null, None) => {}
        (Value::Null, Some(x)) => {
            out.push(format!("{name}: snic found RoCE ({x:?}), scapy built none"))
        }
        (_, None) => out.push(format!("{name}: scapy built RoCE, snic found none")),
        (exp, Some(got)) => {
            let got = serde_json::to_value(got).expect("serialise");
            for key in [
                "opcode",
                "opcode_name",
                "dest_qp",
                "psn",
                "ack_req",
                "se",
                "pkey",
                "fecn",
                "becn",
                "reth",
                "aeth",
                "immdt",
                "ieth",
                "atomiceth",
                "atomicacketh",
                "deth",
            ] {
                let want = exp.get(key).unwrap_or(&Value::Null);
                let have = got.get(key).unwrap_or(&Value::Null);
                if want != have {
                    out.push(format!("{name}: roce.{key}: scapy says {want}, snic says {have}"));
                }
            }
            same("ICRC verdict", &name, &e["icrc_ok"], got.get("icrc_ok").cloned(), out);
        }
    }
}

#[test]
fn every_scapy_frame_parses_to_the_fields_scapy_put_in_it() {
    if !common::have_scapy(TEST) {
        return;
    }
    let dir = common::temp_dir("interop-scapy");
    let (pcap, expect) = common::scapy_corpus(&dir);
    let frames = common::read_pcap(&pcap);
    let packets = expect["packets"].as_array().expect("packets array");
    assert_eq!(frames.len(), packets.len(), "pcap and JSON disagree on the packet count");
    assert!(frames.len() >= 30, "corpus unexpectedly small: {}", frames.len());

    let mut mismatches = Vec::new();
    for (frame, e) in frames.iter().zip(packets) {
        check_packet(frame, e, &mut mismatches);
    }
    assert!(mismatches.is_empty(), "{} mismatch(es):\n{}", mismatches.len(), mismatches.join("\n"));

    // The corpus covers what it claims to: every RoCE extension header, every tunnel, and the
    // broken frames are present (guards against the script silently shrinking).
    let names: Vec<&str> = packets.iter().filter_map(|p| p["name"].as_str()).collect();
    for needed in [
        "qinq_ipv4_udp",
        "ipv6_exthdrs_udp",
        "vxlan_ipv4_tcp",
        "geneve_options_ipv4_udp",
        "nvgre_ipv4_icmp",
        "roce_write_only",
        "roce_read_request",
        "roce_cmp_swap",
        "roce_atomic_ack",
        "roce_send_only_inv",
        "roce_v6_write_only",
        "bad_icrc",
        "bad_ihl",
        "bad_vxlan_flags",
        "truncated_ipv4",
    ] {
        assert!(names.contains(&needed), "corpus lacks {needed}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_prefix_of_every_scapy_frame_is_reported_without_panic() {
    if !common::have_scapy(TEST) {
        return;
    }
    let dir = common::temp_dir("interop-scapy-prefix");
    let (pcap, _) = common::scapy_corpus(&dir);
    for (i, frame) in common::read_pcap(&pcap).iter().enumerate() {
        for cut in 0..frame.len() {
            let r = report::report(i as u64 + 1, &frame[..cut]);
            assert_eq!(r.len, cut);
            // A prefix that lost bytes of a header must say which layer it could not read.
            if cut < 14 {
                assert_eq!(
                    r.error_layer,
                    Some("eth"),
                    "frame {} cut at {cut}: {:?}",
                    i + 1,
                    r.error
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
