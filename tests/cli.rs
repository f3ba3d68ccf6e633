//! End-to-end tests of the `snic` binary: `--help`, `decode` (pcap, pcapng, JSON, text, errors,
//! the scapy corpus), `run` (the embedded default, explicit ports, pcap in/out, trace) and
//! `stats` over the control socket.

mod common;

use serde_json::Value;
use snic_io::generator::FrameKind;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

fn snic() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_snic"));
    c.env_remove("RUST_LOG");
    c
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn write_pcapng(path: &Path, frames: &[Vec<u8>]) {
    use pcap_file::DataLink;
    use pcap_file::pcapng::PcapNgWriter;
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
    let mut w = PcapNgWriter::new(std::fs::File::create(path).unwrap()).unwrap();
    w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::ETHERNET, 65535)).unwrap();
    for (i, f) in frames.iter().enumerate() {
        let epb = EnhancedPacketBlock {
            interface_id: 0,
            timestamp: Duration::from_millis(i as u64),
            original_len: f.len() as u32,
            data: std::borrow::Cow::Borrowed(f),
            options: vec![],
        };
        w.write_pcapng_block(epb).unwrap();
    }
}

#[test]
fn every_subcommand_has_help() {
    for (args, needle) in [
        (&["--help"][..], "decode"),
        (&["decode", "--help"][..], "--json"),
        (&["run", "--help"][..], "--port"),
        (&["stats", "--help"][..], "--control"),
    ] {
        let out = common::run_ok(snic().args(args));
        let text = stdout(&out);
        assert!(text.contains(needle), "snic {args:?} help lacks {needle}:\n{text}");
    }
}

#[test]
fn decode_refuses_a_file_that_is_not_a_capture() {
    let dir = common::temp_dir("cli-notpcap");
    let p = dir.join("x.pcap");
    std::fs::write(&p, b"this is not a capture file").unwrap();
    let out = snic().arg("decode").arg(&p).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a pcap or pcapng file"), "stderr: {err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Generated traffic (no external tools needed): pcap and pcapng decode to the same JSON, one
/// line per frame, and the class split matches the generator's own record of what it made.
#[test]
fn decode_json_of_generated_traffic_in_pcap_and_pcapng() {
    let generated = snic_io::generator::frames(300, 7);
    let frames: Vec<Vec<u8>> = generated.iter().map(|(_, f)| f.clone()).collect();
    let dir = common::temp_dir("cli-gen-decode");
    let (pcap, pcapng) = (dir.join("g.pcap"), dir.join("g.pcapng"));
    common::write_pcap(&pcap, &frames);
    write_pcapng(&pcapng, &frames);

    let a = stdout(&common::run_ok(snic().args(["decode", "--json"]).arg(&pcap)));
    let b = stdout(&common::run_ok(snic().args(["decode", "--json"]).arg(&pcapng)));
    assert_eq!(a, b, "pcap and pcapng of the same frames decode differently");
    let lines = json_lines(&a);
    assert_eq!(lines.len(), frames.len());
    for (i, ((kind, frame), line)) in generated.iter().zip(&lines).enumerate() {
        assert_eq!(line["index"], i + 1);
        assert_eq!(line["len"], frame.len());
        let rdma_kind = matches!(
            kind,
            FrameKind::RoceSend
                | FrameKind::RoceWrite
                | FrameKind::RoceReadReq
                | FrameKind::RoceReadResp
                | FrameKind::RoceAck
                | FrameKind::RoceAtomic
                | FrameKind::RoceAtomicAck
                | FrameKind::BadIcrc
        );
        let want = if rdma_kind { "rdma" } else { "other" };
        assert_eq!(line["class"], want, "frame {} ({kind:?}): {line}", i + 1);
        match kind {
            FrameKind::Truncated => {
                assert!(line["error"].is_string(), "truncated frame without error: {line}")
            }
            FrameKind::BadIcrc => assert_eq!(line["roce"]["icrc_ok"], false, "{line}"),
            k if rdma_kind => {
                assert_eq!(line["roce"]["icrc_ok"], true, "{k:?}: {line}");
                assert!(line.get("error").is_none(), "{k:?}: {line}");
            }
            _ => assert!(line.get("error").is_none(), "{kind:?}: {line}"),
        }
    }

    // Text mode: one line per frame; verbose mode adds a line per header.
    let text = stdout(&common::run_ok(snic().arg("decode").arg(&pcap)));
    assert_eq!(text.lines().count(), frames.len());
    let verbose = stdout(&common::run_ok(snic().args(["decode", "-v"]).arg(&pcap)));
    assert!(verbose.lines().count() > 3 * frames.len(), "verbose output too short");
    assert!(verbose.contains("src_addr"), "verbose output lacks header fields");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `snic decode --json` on the scapy corpus: spot-check lines against what scapy built.
#[test]
fn decode_json_of_the_scapy_corpus() {
    if !common::have_scapy("cli decode_json_of_the_scapy_corpus") {
        return;
    }
    let dir = common::temp_dir("cli-scapy-decode");
    let (pcap, expect) = common::scapy_corpus(&dir);
    let packets = expect["packets"].as_array().unwrap();
    let out = common::run_ok(snic().args(["decode", "--json"]).arg(&pcap));
    let lines = json_lines(&stdout(&out));
    assert_eq!(lines.len(), packets.len());
    let by_name = |name: &str| -> &Value {
        let i =
            packets.iter().position(|p| p["name"] == name).unwrap_or_else(|| panic!("no {name}"));
        &lines[i]
    };

    let w = by_name("roce_write_only");
    assert_eq!(w["layers"], serde_json::json!(["eth", "ipv4", "udp", "bth", "reth"]));
    assert_eq!(w["class"], "rdma");
    assert_eq!(w["roce"]["opcode"], 0x0a);
    assert_eq!(w["roce"]["opcode_name"], "RC_RDMA_WRITE_ONLY");
    assert_eq!(w["roce"]["ack_req"], true);
    assert_eq!(w["roce"]["icrc_ok"], true);
    assert_eq!(
        w["roce"]["reth"],
        serde_json::json!({"va": 0x0000_7f00_1234_5000u64, "rkey": 0x1000_abcd, "dma_len": 16})
    );
    assert_eq!(w["dport"], 4791);

    let v = by_name("vxlan_ipv4_tcp");
    assert_eq!(
        v["layers"],
        serde_json::json!(["eth", "ipv4", "udp", "vxlan", "eth", "ipv4", "tcp"])
    );
    assert_eq!(v["vni"], 0x123456);
    assert_eq!(v["src"], "172.16.0.1");
    assert_eq!(v["dport"], 8080);
    assert_eq!(v["class"], "other");

    let a = by_name("roce_atomic_ack");
    assert_eq!(a["roce"]["aeth"], serde_json::json!({"syndrome": 0, "msn": 9}));
    assert_eq!(a["roce"]["atomicacketh"], 0x0bad_f00d_0bad_f00du64);

    assert_eq!(by_name("bad_icrc")["roce"]["icrc_ok"], false);
    let t = by_name("truncated_ipv4");
    assert_eq!(t["layers"], serde_json::json!(["eth"]));
    assert!(t["error"].as_str().unwrap().starts_with("ipv4: truncated: need "), "{t}");
    assert_eq!(by_name("bad_vxlan_flags")["error"], "vxlan: bad flags");
    assert_eq!(by_name("roce_ud_send_only")["class"], "other");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Parse the JSON counters `snic run --json` prints on exit.
fn run_json(args: &[&str]) -> Value {
    let out = common::run_ok(snic().arg("run").arg("--json").args(args));
    serde_json::from_str(stdout(&out).trim())
        .unwrap_or_else(|e| panic!("run --json output is not JSON ({e}):\n{}", stdout(&out)))
}

#[test]
fn run_without_arguments_runs_the_embedded_default_and_reports() {
    let out = common::run_ok(snic().arg("run"));
    let text = stdout(&out);
    for needle in ["gen:", "null", "parse", "classify", "rdma", "other"] {
        assert!(text.contains(needle), "embedded default output lacks {needle:?}:\n{text}");
    }
}

#[test]
fn run_gen_into_null_accounts_for_every_packet() {
    for workers in ["1", "2"] {
        check_accounting(&run_json(&[
            "--port",
            "gen:2000,3",
            "--port",
            "null",
            "--workers",
            workers,
        ]));
    }
}

fn check_accounting(c: &Value) {
    let rx: u64 = c["ports"][0]["rx_packets"].as_u64().expect("rx_packets of port 0");
    assert_eq!(rx, 2000, "{c}");
    let classes = &c["classes"];
    let rdma = classes["rdma"].as_u64().unwrap_or(0);
    let other = classes["other"].as_u64().unwrap_or(0);
    assert!(rdma > 0 && other > 0, "both classes expected: {c}");
    let tx = c["ports"][1]["tx_packets"].as_u64().unwrap_or(0);
    let drops = c["drops_total"].as_u64().unwrap_or(0);
    assert_eq!(tx + drops, 2000, "every packet is sent or counted as a drop: {c}");
    assert!(drops > 0, "the generator's truncated/bad-ICRC frames are dropped with a reason: {c}");
    assert_eq!(rdma + other, tx, "every forwarded packet has a class: {c}");
    // Classified by the classify stage: every packet it was handed, merged over the workers;
    // at least as many of each class as were forwarded (some were dropped after).
    let classify = c["stages"].as_array().unwrap().iter().find(|s| s["name"] == "classify");
    let classify_in = classify.expect("a classify stage")["packets_in"].as_u64().unwrap();
    let (c_rdma, c_other) =
        (c["classified"]["rdma"].as_u64().unwrap(), c["classified"]["other"].as_u64().unwrap());
    assert_eq!(c_rdma + c_other, classify_in, "{c}");
    assert!(c_rdma >= rdma && c_other >= other, "{c}");
    assert!(c_rdma > rdma, "bad-ICRC RDMA packets are classified, then dropped: {c}");
    let by_reason: u64 =
        c["drops"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(by_reason, drops, "drops by reason add up: {c}");
}

#[test]
fn run_pcap_in_pcap_out_forwards_the_frames() {
    let generated = snic_io::generator::frames(200, 11);
    let good: Vec<Vec<u8>> = generated
        .into_iter()
        .filter(|(k, _)| !matches!(k, FrameKind::Truncated | FrameKind::BadIcrc))
        .map(|(_, f)| f)
        .collect();
    let dir = common::temp_dir("cli-run-pcap");
    let (input, output) = (dir.join("in.pcap"), dir.join("out.pcap"));
    common::write_pcap(&input, &good);
    let spec_in = format!("pcap:{}", input.display());
    let spec_out = format!("pcap:,{}", output.display());
    let _ = run_json(&["--port", &spec_in, "--port", &spec_out]);
    let out = common::read_pcap(&output);
    assert_eq!(
        out, good,
        "l2fwd between two ports forwards every good frame unchanged and in order"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stats_reads_counters_over_the_control_socket() {
    let dir = common::temp_dir("cli-stats");
    let sock = dir.join("ctl.sock");
    let mut child = snic()
        .args(["run", "--port", "gen:100000000", "--port", "null", "--duration", "20", "--control"])
        .arg(&sock)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut doc = None;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(100));
        let out = snic().arg("stats").arg("--control").arg(&sock).output().unwrap();
        if out.status.success() {
            doc = Some(stdout(&out));
            break;
        }
    }
    let _ = Command::new("kill").arg("-INT").arg(child.id().to_string()).status();
    let status = child.wait().unwrap();
    let doc = doc.expect("snic stats never answered");
    let v: Value = serde_json::from_str(doc.trim()).expect("stats is JSON");
    assert!(v["ports"].is_array(), "{v}");
    assert!(status.success(), "snic run exits cleanly on SIGINT: {status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_trace_prints_the_path_of_matching_packets() {
    // With several workers the transmit step is recorded on the I/O thread: it must still be
    // there, right after the same packet's pipeline events.
    for workers in ["1", "2"] {
        let out = common::run_ok(snic().args([
            "run",
            "--port",
            "gen:60",
            "--port",
            "null",
            "--workers",
            workers,
            "--trace",
            "udp dst 4791",
        ]));
        let text = stdout(&out);
        let trace: Vec<&str> = text.lines().filter(|l| l.starts_with("trace #")).collect();
        assert!(!trace.is_empty(), "no trace events:\n{text}");
        assert!(trace.iter().any(|l| l.contains("classify: classified as rdma")), "{text}");
        assert!(trace.iter().any(|l| l.contains("l2fwd: forwarded to port 1")), "{text}");
        // Only packets to UDP port 4791 are selected: every selection shows a UDP layer.
        let selected: Vec<&&str> =
            trace.iter().filter(|l| l.contains("selected for trace")).collect();
        assert!(!selected.is_empty());
        assert!(selected.iter().all(|l| l.contains("/udp")), "{text}");
        // Every packet l2fwd forwarded is then sent out of port 1 by the I/O layer: the next
        // line is that packet's transmit step.
        let mut forwarded = 0;
        for (i, l) in trace.iter().enumerate() {
            let Some((seq, _)) = l.split_once(" l2fwd: forwarded to port 1") else { continue };
            forwarded += 1;
            assert_eq!(
                trace.get(i + 1).copied(),
                Some(format!("{seq} tx: sent out port 1 (null)").as_str()),
                "workers {workers}:\n{text}"
            );
        }
        assert!(forwarded > 0, "{text}");
        let sent = trace.iter().filter(|l| l.contains(" tx: sent out port 1 (null)")).count();
        assert_eq!(sent, forwarded, "workers {workers}:\n{text}");
    }
}

#[test]
fn sigusr1_prints_counters_and_sigterm_stops_with_final_counters() {
    let child = snic()
        .args(["run", "--port", "gen:1000000000", "--port", "null"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    common::run_ok(snic().args(["stats", "--pid", &child.id().to_string()]));
    std::thread::sleep(Duration::from_millis(500));
    common::run_ok(Command::new("kill").args(["-TERM", &child.id().to_string()]));
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "clean exit on SIGTERM: {:?}", out.status);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--- snic stats (SIGUSR1)"), "no stats on SIGUSR1:\n{err}");
    let text = stdout(&out);
    assert!(text.contains("final counters"), "{text}");
    assert!(text.contains("port 1 null"), "{text}");
}

/// A pcapng written by a tool nobody here wrote (tshark/editcap's writer) decodes exactly as the
/// pcap it was converted from.
#[test]
fn decode_reads_tshark_written_pcapng() {
    let test = "cli decode_reads_tshark_written_pcapng";
    if !common::have_scapy(test) || !common::have_tshark(test) {
        return;
    }
    let dir = common::temp_dir("cli-pcapng");
    let (pcap, _) = common::scapy_corpus(&dir);
    let ng = dir.join("corpus.pcapng");
    common::run_ok(
        Command::new("tshark").arg("-r").arg(&pcap).args(["-F", "pcapng", "-w"]).arg(&ng),
    );
    let magic = std::fs::read(&ng).unwrap();
    assert_eq!(magic.get(..4), Some(&[0x0a, 0x0d, 0x0d, 0x0a][..]), "tshark wrote pcapng");
    let a = stdout(&common::run_ok(snic().args(["decode", "--json"]).arg(&pcap)));
    let b = stdout(&common::run_ok(snic().args(["decode", "--json"]).arg(&ng)));
    assert!(!a.is_empty());
    assert_eq!(a, b);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_reads_a_toml_config_and_the_command_line_overrides_it() {
    let dir = common::temp_dir("cli-config");
    let cfg = dir.join("snic.toml");
    std::fs::write(&cfg, "ports = [\"gen:500,5\", \"null\"]\nstages = [\"parse\", \"classify:mark\", \"l2fwd\"]\nworkers = 2\n")
        .unwrap();
    let c = run_json(&["--config", cfg.to_str().unwrap()]);
    assert_eq!(c["workers"], 2);
    let stages: Vec<&str> =
        c["stages"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(&stages[..3], ["parse", "classify", "l2fwd"], "{c}");
    assert_eq!(c["ports"][0]["rx_packets"], 500);
    // classify:mark keeps bad-ICRC packets: no bad_icrc drops.
    assert!(c["drops"].get("bad_icrc").is_none(), "{c}");

    let c = run_json(&[
        "--config",
        cfg.to_str().unwrap(),
        "--workers",
        "1",
        "--stage",
        "parse",
        "--stage",
        "classify",
    ]);
    assert_eq!(c["workers"], 1);
    assert!(
        c["drops"]["bad_icrc"].as_u64().unwrap_or(0) > 0,
        "enforcing classify drops bad ICRCs: {c}"
    );

    std::fs::write(&cfg, "ports = [\"gen:5\"]\nnot_a_key = 1\n").unwrap();
    let out = snic().args(["run", "--config"]).arg(&cfg).output().unwrap();
    assert!(!out.status.success(), "unknown config keys are refused");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--port udp:LOCAL,REMOTE` end to end: frames sent to snic's UDP port as datagrams come out of
/// the pcap port, byte for byte and in order, and the run stops cleanly after `--duration`.
#[test]
fn run_udp_port_into_pcap_port() {
    use std::net::UdpSocket;
    let frames: Vec<Vec<u8>> = snic_io::generator::frames(50, 21)
        .into_iter()
        .filter(|(k, _)| !matches!(k, FrameKind::Truncated | FrameKind::BadIcrc))
        .map(|(_, f)| f)
        .collect();
    let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
    // Find a free port for snic (tiny race with other processes; fine in a test).
    let snic_addr = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let dir = common::temp_dir("cli-udp");
    let out_pcap = dir.join("out.pcap");
    let child = snic()
        .args(["run", "--json", "--duration", "3", "--port"])
        .arg(format!("udp:{snic_addr},{}", peer.local_addr().unwrap()))
        .arg("--port")
        .arg(format!("pcap:,{}", out_pcap.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    for f in &frames {
        peer.send_to(f, snic_addr).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(c["ports"][0]["rx_packets"], frames.len(), "{c}");
    assert_eq!(common::read_pcap(&out_pcap), frames);
    let _ = std::fs::remove_dir_all(&dir);
}
