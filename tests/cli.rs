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
                | FrameKind::RoceV6Send
                | FrameKind::RoceV6Write
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

/// The numbers of a text line of the form `... KEY N ...`: the first whitespace-separated token
/// after `key` on the first line starting with `prefix`, as a u64.
fn num_after(text: &str, prefix: &str, key: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix:?}:\n{text}"));
    let mut words = line.split_whitespace();
    words.by_ref().find(|w| *w == key).unwrap_or_else(|| panic!("no {key:?} in {line:?}"));
    let n = words.next().unwrap_or_else(|| panic!("nothing after {key:?} in {line:?}"));
    let n = n.trim_start_matches('(').trim_end_matches(['(', ')', ':']);
    n.parse().unwrap_or_else(|e| panic!("{key:?} in {line:?} is not a number ({e})"))
}

#[test]
fn run_without_arguments_runs_the_embedded_default_and_reports() {
    let out = common::run_ok(snic().arg("run"));
    let text = stdout(&out);
    assert!(text.starts_with("snic run: embedded default"), "{text}");
    // The embedded default is 100000 generated frames into a null sink: every one is received,
    // and every one is either sent out of port 1 or dropped with a reason.
    assert_eq!(num_after(&text, "port 0 gen:", "rx"), 100_000, "{text}");
    assert_eq!(num_after(&text, "received ", "received"), 100_000, "{text}");
    let tx = num_after(&text, "port 1 null", "tx");
    let drops = num_after(&text, "drops (", "drops");
    assert_eq!(tx + drops, 100_000, "{text}");
    assert!(drops > 0, "the generator's truncated and bad-ICRC frames are dropped: {text}");
    // Classified: both classes, adding up to what the classify stage was handed.
    let (c_rdma, c_other) =
        (num_after(&text, "classified:", "rdma"), num_after(&text, "classified:", "other"));
    assert!(c_rdma > 0 && c_other > 0, "{text}");
    assert_eq!(c_rdma + c_other, num_after(&text, "classify ", "classify"), "{text}");
    // Forwarded by class: what left port 1, all of it classified.
    let (f_rdma, f_other) = (
        num_after(&text, "forwarded by class:", "rdma"),
        num_after(&text, "forwarded by class:", "other"),
    );
    assert_eq!(num_after(&text, "forwarded by class:", "unclassified"), 0, "{text}");
    assert!(f_rdma > 0 && f_other > 0, "{text}");
    assert_eq!(f_rdma + f_other, tx, "{text}");
    assert!(c_rdma > f_rdma, "bad-ICRC RDMA frames are classified, then dropped: {text}");
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
    let c = run_json(&["--port", &spec_in, "--port", &spec_out]);
    assert_eq!(c["ports"][0]["rx_packets"], good.len(), "{c}");
    assert_eq!(c["ports"][1]["tx_packets"], good.len(), "{c}");
    assert_eq!(c["drops_total"], 0, "{c}");
    let out = common::read_pcap(&output);
    assert_eq!(
        out, good,
        "l2fwd between two ports forwards every good frame unchanged and in order"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// How long a readiness wait may take before the test fails.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Ask a running `snic run --control SOCK` for its counters until it answers with a real
/// snapshot (not the `{"status":"starting"}` placeholder served before the first refresh) that
/// satisfies `ok`. Panics if `child` exits first or nothing qualifies within [`READY_TIMEOUT`]
/// (then `child` is killed first).
fn wait_for_stats(
    sock: &Path,
    child: &mut std::process::Child,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + READY_TIMEOUT;
    let mut last = String::new();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "snic run exited ({status:?}) before its counters were ready; last answer: {last}"
            );
        }
        let out = snic().arg("stats").arg("--control").arg(sock).output().unwrap();
        if out.status.success() {
            last = stdout(&out);
            let v: Value = serde_json::from_str(last.trim())
                .unwrap_or_else(|e| panic!("stats is not JSON ({e}): {last}"));
            if v.get("status").is_none() && ok(&v) {
                return v;
            }
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill(); // don't leave it running after the test
            let _ = child.wait();
            panic!("snic stats gave no qualifying snapshot within {READY_TIMEOUT:?}; last: {last}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Port 0's received packets in a counters document.
fn rx0(v: &Value) -> u64 {
    v["ports"][0]["rx_packets"].as_u64().unwrap_or_else(|| panic!("no ports[0].rx_packets: {v}"))
}

#[test]
fn stats_reads_counters_over_the_control_socket() {
    let dir = common::temp_dir("cli-stats");
    let sock = dir.join("ctl.sock");
    let mut child = snic()
        .args(["run", "--port", "gen:100000000", "--port", "null", "--duration", "60", "--control"])
        .arg(&sock)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // A real snapshot with traffic in it, then a later one: the counters move while it runs.
    let first = wait_for_stats(&sock, &mut child, |v| rx0(v) > 0);
    let second = wait_for_stats(&sock, &mut child, |v| rx0(v) > rx0(&first));
    let _ = Command::new("kill").arg("-INT").arg(child.id().to_string()).status();
    let status = child.wait().unwrap();
    for v in [&first, &second] {
        let ports = v["ports"].as_array().unwrap_or_else(|| panic!("no ports: {v}"));
        assert_eq!(ports.len(), 2, "{v}");
        assert_eq!(ports[0]["name"], "gen:100000000,1", "{v}");
        assert_eq!(ports[1]["name"], "null", "{v}");
        let tx1 = ports[1]["tx_packets"].as_u64().unwrap_or_else(|| panic!("{v}"));
        assert!(tx1 <= rx0(v), "port 1 cannot send more than port 0 received: {v}");
        assert!(v["stages"].as_array().is_some_and(|s| !s.is_empty()), "{v}");
    }
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

/// True once process `pid` catches SIGUSR1 (its bit in `SigCgt` of `/proc/PID/status`): from
/// then on SIGUSR1 no longer takes its default action (terminating the process).
fn catches_sigusr1(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return false };
    let Some(mask) = status.lines().find_map(|l| l.strip_prefix("SigCgt:")) else { return false };
    let mask = u64::from_str_radix(mask.trim(), 16).unwrap_or(0);
    // Signal n is bit n - 1; SIGUSR1 is 10 on Linux.
    mask & (1 << (10 - 1)) != 0
}

#[test]
fn sigusr1_prints_counters_and_sigterm_stops_with_final_counters() {
    use std::io::BufRead;
    let mut child = snic()
        .args(["run", "--port", "gen:1000000000", "--port", "null"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Stderr is read on a thread, line by line, so the test can wait for the stats block.
    let stderr = child.stderr.take().unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    // Readiness: the SIGUSR1 handler is installed (else the signal would kill snic).
    let deadline = std::time::Instant::now() + READY_TIMEOUT;
    while !catches_sigusr1(pid) {
        assert!(child.try_wait().unwrap().is_none(), "snic run exited early");
        assert!(std::time::Instant::now() < deadline, "snic never installed its SIGUSR1 handler");
        std::thread::sleep(Duration::from_millis(10));
    }
    common::run_ok(snic().args(["stats", "--pid", &pid.to_string()]));
    // Wait for the whole stats block (up to its last line, the drops), then stop snic.
    let mut err = Vec::new();
    let mut in_block = false;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = lines_rx
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("no stats block on SIGUSR1 ({e}):\n{}", err.join("\n")));
        in_block |= line == "--- snic stats (SIGUSR1)";
        let end = in_block && line.starts_with("drops");
        err.push(line);
        if end {
            break;
        }
    }
    common::run_ok(Command::new("kill").args(["-TERM", &pid.to_string()]));
    let out = child.wait_with_output().unwrap();
    reader.join().unwrap();
    err.extend(lines_rx.try_iter());
    let err = err.join("\n");
    assert!(out.status.success(), "clean exit on SIGTERM: {:?}\n{err}", out.status);
    // The SIGUSR1 block has real counters: port 0 has received traffic by then.
    let block = &err[err.find("--- snic stats (SIGUSR1)").unwrap()..];
    assert!(num_after(block, "port 0 gen:", "rx") > 0, "{block}");
    let text = stdout(&out);
    assert!(text.contains("stopped (signal or --duration); final counters:"), "{text}");
    assert!(text.contains("port 1 null"), "{text}");
    assert!(
        num_after(&text, "port 0 gen:", "rx") >= num_after(block, "port 0 gen:", "rx"),
        "{text}"
    );
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
    let sock = dir.join("ctl.sock");
    let mut child = snic()
        .args(["run", "--json", "--duration", "5", "--port"])
        .arg(format!("udp:{snic_addr},{}", peer.local_addr().unwrap()))
        .arg("--port")
        .arg(format!("pcap:,{}", out_pcap.display()))
        .arg("--control")
        .arg(&sock)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Readiness: the control socket answers with real counters only once the ports are open
    // (so snic's UDP socket is bound) and the run loop is going.
    let ready = wait_for_stats(&sock, &mut child, |_| true);
    assert_eq!(rx0(&ready), 0, "nothing was sent yet: {ready}");
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

/// Run `snic testbed --json` with `args`; return its stdout and the parsed document.
fn testbed_json(args: &[&str]) -> (String, Value) {
    let out = common::run_ok(snic().arg("testbed").arg("--json").args(args));
    let text = stdout(&out);
    let v: Value =
        serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (text, v)
}

fn num(v: &Value, path: &[&str]) -> u64 {
    let mut x = v;
    for k in path {
        x = &x[*k];
    }
    x.as_u64().unwrap_or_else(|| panic!("{path:?} is not a number in {v}"))
}

/// Sum of every stage and port drop of one node, recomputed from the per-reason counts.
fn node_drops(node: &Value) -> u64 {
    let sum = |d: &Value| -> u64 {
        d.as_object().map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
    };
    let stages: u64 = node["stages"].as_array().unwrap().iter().map(|s| sum(&s["drops"])).sum();
    let ports: u64 = node["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| sum(&p["rx_drops"]) + sum(&p["tx_drops"]))
        .sum();
    stages + ports
}

/// Same seed and flags: byte-identical JSON; and every packet is accounted for exactly.
#[test]
fn testbed_is_reproducible_and_accounts_for_every_packet() {
    let args = ["--count", "3000", "--seed", "5", "--loss", "0.02", "--dup", "0.01"];
    let (t1, v) = testbed_json(&args);
    let (t2, _) = testbed_json(&args);
    assert_eq!(t1, t2, "same seed and flags must print identical output");

    let a = &v["nodes"][0];
    let b = &v["nodes"][1];
    let generated = a["ports"][0]["device"]["rx_packets"].as_u64().unwrap();
    assert_eq!(generated, 3000);
    let sink = b["ports"][1]["device"]["tx_packets"].as_u64().unwrap();
    let lost = num(&v, &["link", "lost"]);
    let dup = num(&v, &["link", "duplicated"]);
    let tail = num(&v, &["link", "tail_dropped"]);
    let (drops_a, drops_b) = (node_drops(a), node_drops(b));
    assert!(lost > 0 && dup > 0, "{}", v["link"]);
    assert_eq!(generated + dup, sink + drops_a + drops_b + lost + tail, "{v}");
    // The link's own books balance too: A sent what the link was offered, B got what it
    // delivered.
    assert_eq!(a["ports"][1]["device"]["tx_packets"], v["link"]["sent"]);
    assert_eq!(b["ports"][0]["device"]["rx_packets"], v["link"]["delivered"]);
    assert_eq!(num(&v, &["link", "sent"]) + dup, num(&v, &["link", "delivered"]) + lost + tail);
    assert_eq!(v["accounting"]["balanced"], true);
    assert_eq!(num(&v, &["accounting", "dropped_a"]), drops_a);
}

#[test]
fn testbed_other_seed_other_losses() {
    let (_, v1) = testbed_json(&["--count", "3000", "--seed", "1", "--loss", "0.02"]);
    let (_, v2) = testbed_json(&["--count", "3000", "--seed", "2", "--loss", "0.02"]);
    assert_ne!(v1["link"]["lost"], v2["link"]["lost"], "{} vs {}", v1["link"], v2["link"]);
}

#[test]
fn testbed_bad_flag_values_are_clear_errors() {
    for (flag, value) in [("--loss", "1.5"), ("--dup", "-1"), ("--queue-limit", "0")] {
        let out = snic().args(["testbed", flag, value]).output().unwrap();
        assert!(!out.status.success(), "{flag} {value} must fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "error must name {flag}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let help = stdout(&common::run_ok(snic().args(["testbed", "--help"])));
    for flag in ["--count", "--seed", "--loss", "--dup", "--reorder", "--delay-us", "--jitter-us"] {
        assert!(help.contains(flag), "help lacks {flag}:\n{help}");
    }
    for flag in ["--rate-mbps", "--queue-limit", "--interval-ns", "--json"] {
        assert!(help.contains(flag), "help lacks {flag}:\n{help}");
    }
}

/// At 100 Mbit/s a byte takes exactly 80 ns on the wire. All frames are offered at time zero
/// (`--interval-ns 0`), so the wire is busy from 0 until the last frame is serialised, and with
/// no delay the run ends then: elapsed = bytes * 80 ns, with no slack (simulated time is exact;
/// at this rate each frame's serialisation time is a whole number of nanoseconds).
#[test]
fn testbed_rate_limit_gives_exact_serialisation_time() {
    let (_, v) = testbed_json(&["--count", "1000", "--rate-mbps", "100", "--interval-ns", "0"]);
    let bytes = v["nodes"][0]["ports"][1]["device"]["tx_bytes"].as_u64().unwrap();
    assert_eq!(num(&v, &["link", "delivered_bytes"]), bytes);
    assert_eq!(num(&v, &["link", "tail_dropped"]), 0);
    assert!(bytes > 100_000, "{bytes}");
    assert_eq!(num(&v, &["sim_elapsed_ns"]), bytes * 8 * 1_000_000_000 / 100_000_000);
    assert_eq!(num(&v, &["sim_throughput_bps"]), 100_000_000);
}

/// A command whose standard output is closed before it prints ends quietly with 141 (as a
/// shell reports a process killed by SIGPIPE), not with a panic.
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let p4 = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/p4/ecn_incast.p4");
    // A pipe whose read end is closed before the command even starts.
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = snic().args(["p4", "check", p4]).stdout(writer).output().expect("run snic");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // A command that writes through a buffered writer and returns the error.
    let frames: Vec<Vec<u8>> =
        snic_io::generator::frames(2000, 3).into_iter().map(|(_, f)| f).collect();
    let dir = common::temp_dir("cli-closed-stdout");
    let pcap = dir.join("g.pcap");
    common::write_pcap(&pcap, &frames);
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = snic().args(["decode", "--json"]).arg(&pcap).stdout(writer).output().expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(err.is_empty(), "nothing said on stderr: {err}");
}
