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

    same("class", &name, &e["class"], Some(r.class), out);

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

/// What a clean frame cut at `cut` (before its payload) must report, given the whole frame's
/// layers, their offsets and the payload offset: the index of the blamed layer in the layer
/// list, its name, the error kind and the exact error text.
///
/// - At or behind the outermost IP header, that header is blamed, because its length field
///   announces every byte after it: inside the header the cut is `truncated` (needing the fixed
///   20/40 bytes first, then the IHL-announced end); past it, the announced length runs past
///   the buffer: `bad_total_len` with the IPv4 Total Length or IPv6 Payload Length read from
///   the frame's own bytes.
/// - Before any IP header, the header the cut falls in is `truncated`, needing the bytes up to
///   where the next header starts.
fn expected_cut(
    frame: &[u8],
    full: &[&'static str],
    offsets: &[u16],
    payload: usize,
    cut: usize,
) -> (usize, &'static str, &'static str, String) {
    let be16 = |at: usize| u16::from_be_bytes([frame[at], frame[at + 1]]);
    let started: Vec<(usize, &'static str, usize)> = full
        .iter()
        .zip(offsets)
        .enumerate()
        .map(|(i, (l, o))| (i, *l, usize::from(*o)))
        .filter(|(_, _, o)| *o <= cut)
        .collect();
    if let Some(&(k, layer, off)) = started.iter().find(|(_, l, _)| matches!(*l, "ipv4" | "ipv6")) {
        let (header_end, announced) = if layer == "ipv4" {
            (off + usize::from(frame[off] & 0x0f) * 4, be16(off + 2))
        } else {
            (off + 40, be16(off + 4))
        };
        // The fixed 20/40 bytes are needed before the IHL can be read.
        let fixed = if layer == "ipv4" { 20 } else { 40 };
        let need = if cut < off + fixed { off + fixed } else { header_end };
        return if cut < header_end {
            (k, layer, "truncated", format!("{layer}: truncated: need {need} bytes, got {cut}"))
        } else {
            (k, layer, "bad_total_len", format!("{layer}: bad total length {announced}"))
        };
    }
    let &(k, layer, _) = started.last().expect("the Ethernet header starts at 0");
    let need = offsets.get(k + 1).map_or(payload, |o| usize::from(*o));
    (k, layer, "truncated", format!("{layer}: truncated: need {need} bytes, got {cut}"))
}

#[test]
fn every_prefix_of_every_scapy_frame_blames_the_header_it_cuts() {
    if !common::have_scapy(TEST) {
        return;
    }
    let dir = common::temp_dir("interop-scapy-prefix");
    let (pcap, expect) = common::scapy_corpus(&dir);
    let packets = expect["packets"].as_array().expect("packets array");
    let mut clean_frames = 0;
    let mut checked_cuts = 0;
    for (i, (frame, e)) in common::read_pcap(&pcap).iter().zip(packets).enumerate() {
        let name = e["name"].as_str().unwrap_or("?");
        let whole = report::report(i as u64 + 1, frame);
        let stack = snic_wire::stack::parse(frame);
        let offsets: Vec<u16> = stack.layers().iter().map(|l| l.offset).collect();
        let payload = usize::from(stack.payload);
        let clean = whole.error.is_none();
        clean_frames += usize::from(clean);
        for cut in 0..frame.len() {
            // Every prefix is reported without a panic, whatever the frame.
            let r = report::report(i as u64 + 1, &frame[..cut]);
            if !clean || cut >= payload {
                continue;
            }
            // A clean frame cut before its payload lost bytes of a header: the report must say
            // which layer could not be read, keep exactly the layers before it, and say how
            // many bytes it needed and got.
            checked_cuts += 1;
            let (k, layer, kind, text) = expected_cut(frame, &whole.layers, &offsets, payload, cut);
            let ctx = format!("{name} (frame {}) cut at {cut}", i + 1);
            assert_eq!(r.error.as_deref(), Some(text.as_str()), "{ctx}");
            assert_eq!(r.error_layer, Some(layer), "{ctx}");
            assert_eq!(r.error_kind, Some(kind), "{ctx}");
            // Every complete layer before the cut stays recorded (QinQ's outer tag included).
            assert_eq!(r.layers, &whole.layers[..k], "{ctx}");
        }
    }
    // Guard against the checks above silently covering nothing.
    assert!(clean_frames >= 20, "only {clean_frames} clean frames in the corpus");
    assert!(checked_cuts >= 20 * 34, "only {checked_cuts} header cuts checked");
    let _ = std::fs::remove_dir_all(&dir);
}
