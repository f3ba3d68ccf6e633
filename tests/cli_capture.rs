//! End-to-end tests of `snic capture` and `snic trace` against a running `snic run --control`:
//! captures bounded by a count, with a filter and of a stage, decoded by tshark and scapy;
//! counters that capture leaves alone; clear errors for bad requests; dry-run traces through
//! l2fwd and the vSwitch (an allow and a deny rule) that move no counter. And against a whole
//! NIC (`snic serve --port udp:... --control`): its wire port and a stage captured, its own
//! steering (RoCE to the RDMA engine, ARP to the neighbour table) traced.

mod common;

use serde_json::Value;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Longest wait for a running `snic run` to do something.
const WAIT: Duration = Duration::from_secs(20);

fn snic() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_snic"));
    c.env_remove("RUST_LOG");
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A `snic run --control SOCK ...` in the background, stopped (SIGINT) on drop.
struct Run {
    child: Child,
    sock: PathBuf,
}

impl Run {
    fn start(dir: &Path, args: &[&str]) -> Run {
        Run::spawn(dir, &["run"], args)
    }

    /// `snic serve` (one worker, no huge pages, its setup socket in `dir`) with `args`.
    fn serve(dir: &Path, args: &[&str]) -> Run {
        let setup = dir.join("setup.sock");
        let setup = setup.to_str().unwrap();
        Run::spawn(dir, &["serve", "--no-huge", "--workers", "1", "--socket", setup], args)
    }

    fn spawn(dir: &Path, sub: &[&str], args: &[&str]) -> Run {
        let sock = dir.join("ctl.sock");
        let child = snic()
            .args(sub)
            .args(args)
            .arg("--control")
            .arg(&sock)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut run = Run { child, sock };
        let t0 = Instant::now();
        loop {
            if let Some(st) = run.child.try_wait().unwrap() {
                panic!("snic run exited early: {st:?}");
            }
            let ok = snic()
                .args(["stats", "--control"])
                .arg(&run.sock)
                .output()
                .is_ok_and(|o| o.status.success());
            if ok {
                return run;
            }
            assert!(t0.elapsed() < WAIT, "snic run did not answer on its control socket");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn cmd(&self, sub: &str) -> Command {
        let mut c = snic();
        c.arg(sub).arg("--control").arg(&self.sock);
        c
    }

    fn stats(&self) -> Value {
        let o = self.cmd("stats").output().unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    }

    /// Stop with SIGINT and return the final `--json` document, if it printed one.
    fn stop(mut self) -> Output {
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        let t0 = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(t0.elapsed() < WAIT, "snic run did not stop on SIGINT");
            std::thread::sleep(Duration::from_millis(20));
        }
        let child = std::mem::replace(&mut self.child, Command::new("true").spawn().unwrap());
        child.wait_with_output().unwrap()
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn capture(run: &Run, args: &[&str], file: &Path) -> Output {
    run.cmd("capture").args(args).arg("-w").arg(file).output().unwrap()
}

/// `tshark -r FILE -T fields -e F...`: one row per frame.
fn tshark_fields(file: &Path, fields: &[&str]) -> Vec<Vec<String>> {
    let mut c = Command::new("tshark");
    c.arg("-r").arg(file).args(["-T", "fields", "-E", "separator=|"]);
    for f in fields {
        c.args(["-e", f]);
    }
    let o = common::run_ok(&mut c);
    text(&o.stdout).lines().map(|l| l.split('|').map(str::to_owned).collect()).collect()
}

/// A tshark hex field (`0x00000001`) as a number.
fn hex(s: &str) -> u32 {
    u32::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

fn scapy_count(file: &Path) -> usize {
    let o = common::run_ok(
        Command::new("python3")
            .arg("-c")
            .arg("import sys; from scapy.all import rdpcap; print(len(rdpcap(sys.argv[1])))")
            .arg(file),
    );
    text(&o.stdout).trim().parse().unwrap()
}

/// A generator that runs until stopped (the count is far more than a test sends in time).
const ENDLESS_GEN: &str = "gen:4000000000";

#[test]
fn capture_by_count_writes_pcapng_with_one_interface_per_port_and_directions() {
    let test = "capture_by_count";
    if !common::have_tshark(test) || !common::have_scapy(test) {
        return;
    }
    let dir = common::temp_dir("cap-count");
    let run = Run::start(&dir, &["--port", ENDLESS_GEN, "--port", "null", "--duration", "60"]);
    let file = dir.join("c.pcapng");
    let o = capture(&run, &["-c", "1000"], &file);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.starts_with("captured 1000, dropped "), "{err}");
    assert!(err.contains("(count); 2 interface(s)"), "{err}");

    let rows = tshark_fields(
        &file,
        &["frame.interface_id", "frame.interface_name", "frame.packet_flags_direction", "eth.type"],
    );
    assert_eq!(rows.len(), 1000, "tshark reads every frame");
    // Port 0 only receives (the generator), port 1 only sends (the null sink), and each
    // frame is on its port's interface.
    let mut seen = [0usize; 2];
    for r in &rows {
        match r[0].as_str() {
            "0" => {
                assert!(r[1].starts_with("port 0 (gen"), "{r:?}");
                assert_eq!(hex(&r[2]), 1, "port 0's frames are inbound: {r:?}");
                seen[0] += 1;
            }
            "1" => {
                assert_eq!(r[1], "port 1 (null)", "{r:?}");
                assert_eq!(hex(&r[2]), 2, "port 1's frames are outbound: {r:?}");
                seen[1] += 1;
            }
            other => panic!("frame on interface {other}: {r:?}"),
        }
    }
    assert!(seen[0] > 0 && seen[1] > 0, "both ports captured: {seen:?}");
    assert_eq!(scapy_count(&file), 1000, "scapy reads every frame");
    run.stop();
}

#[test]
fn capture_with_a_filter_keeps_only_matching_frames() {
    let test = "capture_with_a_filter";
    if !common::have_tshark(test) {
        return;
    }
    let dir = common::temp_dir("cap-filter");
    let run = Run::start(&dir, &["--port", ENDLESS_GEN, "--port", "null", "--duration", "60"]);
    let file = dir.join("f.pcapng");
    let o = capture(&run, &["--port", "0", "--filter", "udp dst 4791", "-c", "50"], &file);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("1 interface(s)"), "{}", text(&o.stderr));
    let rows = tshark_fields(&file, &["frame.interface_name", "udp.dstport"]);
    assert_eq!(rows.len(), 50);
    for r in &rows {
        assert!(r[0].starts_with("port 0 ("), "{r:?}");
        assert_eq!(r[1], "4791", "only RoCEv2 frames: {r:?}");
    }
    run.stop();
}

#[test]
fn capture_of_a_stage_has_one_interface_named_after_the_stage() {
    let test = "capture_of_a_stage";
    if !common::have_tshark(test) {
        return;
    }
    let dir = common::temp_dir("cap-stage");
    let run = Run::start(&dir, &["--port", ENDLESS_GEN, "--port", "null", "--duration", "60"]);
    let file = dir.join("s.pcapng");
    let o = capture(&run, &["--stage", "classify", "-c", "40"], &file);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let rows = tshark_fields(&file, &["frame.interface_id", "frame.interface_name"]);
    assert_eq!(rows.len(), 40);
    assert!(rows.iter().all(|r| r[0] == "0" && r[1] == "stage 1 (classify)"), "{rows:?}");
    // A duration bound ends a capture too.
    let o = capture(&run, &["--stage", "#2", "--duration", "0.3"], &file);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("(duration)"), "{}", text(&o.stderr));
    run.stop();
}

#[test]
fn bad_capture_requests_get_clear_errors_and_the_run_goes_on() {
    let dir = common::temp_dir("cap-bad");
    let run = Run::start(&dir, &["--port", "null", "--port", "null"]);
    let file = dir.join("x.pcapng");
    for (args, msg) in [
        (&["--port", "7"][..], "no port 7 (this snic has 2 port(s): 0..1)"),
        (&["--stage", "nope"][..], "no stage \"nope\" (stages: parse, classify, l2fwd)"),
        (&["--stage", "#9"][..], "no stage #9"),
        (&["--filter", "udp dst x"][..], "bad trace filter: bad port number in `udp dst x`"),
        (&["--port", "0", "--stage", "parse"][..], "give ports or a stage, not both"),
        (&["-c", "0"][..], "count must be at least 1"),
    ] {
        let o = capture(&run, args, &file);
        assert!(!o.status.success(), "{args:?} was accepted");
        assert!(text(&o.stderr).contains(msg), "{args:?}: {}", text(&o.stderr));
        assert!(!file.exists(), "no file is left behind by a refused capture");
    }
    // The run still answers, and a good capture still works (bounded by time: no traffic).
    run.stats();
    let o = capture(&run, &["--duration", "0.2"], &file);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).starts_with("captured 0, dropped 0 by capture (duration)"));
    run.stop();
}

/// The counters of a finished run, without what varies from run to run.
fn counters(doc: &Value) -> Value {
    let mut d = doc.clone();
    let o = d.as_object_mut().unwrap();
    o.remove("elapsed_secs");
    o.remove("trace");
    d
}

#[test]
fn capture_machinery_off_leaves_the_counters_unchanged() {
    // The same finite run with and without a control socket (ports wrapped, stage taps in
    // the pipeline, nothing armed) counts exactly the same.
    let dir = common::temp_dir("cap-off");
    let plain =
        common::run_ok(snic().args(["run", "--port", "gen:20000", "--port", "null", "--json"]));
    let sock = dir.join("off.sock");
    let wrapped = common::run_ok(
        snic()
            .args(["run", "--port", "gen:20000", "--port", "null", "--json", "--control"])
            .arg(&sock),
    );
    let a: Value = serde_json::from_slice(&plain.stdout).unwrap();
    let b: Value = serde_json::from_slice(&wrapped.stdout).unwrap();
    assert_eq!(a["ports"][0]["rx_packets"], 20000);
    assert_eq!(counters(&a), counters(&b));
}

#[test]
fn a_capture_moves_no_counter_of_the_nic() {
    // While a capture copies frames, the NIC's counters go on as without it: nothing is
    // dropped for the capture (its own drops are its own).
    let dir = common::temp_dir("cap-on");
    let run = Run::start(&dir, &["--port", ENDLESS_GEN, "--port", "null", "--duration", "60"]);
    let file = dir.join("on.pcapng");
    let o = capture(&run, &["-c", "3000"], &file);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let c = &run.stats();
    let drops = c["drops_total"].as_u64().unwrap();
    let rx0 = c["ports"][0]["rx_packets"].as_u64().unwrap();
    let tx1 = c["ports"][1]["tx_packets"].as_u64().unwrap();
    assert!(rx0 > 0);
    // Everything received was sent or dropped by a stage for its own reason, never by the
    // capture (the snapshot may be mid-batch: in flight is at most one batch).
    assert!(rx0 >= tx1 + drops && rx0 - tx1 - drops <= 256, "rx {rx0} tx {tx1} drops {drops}");
    let reasons = c["drops"].as_object().unwrap();
    assert!(reasons.keys().all(|k| !k.contains("capture")), "{reasons:?}");
    run.stop();
}

fn trace(run: &Run, args: &[&str]) -> Output {
    run.cmd("trace").args(args).output().unwrap()
}

#[test]
fn trace_through_l2fwd_names_every_stage_and_sends_nothing() {
    let dir = common::temp_dir("trace-l2");
    let run = Run::start(&dir, &["--port", "null", "--port", "null"]);
    let before = run.stats();
    let pkt = r#"Ether(dst="02:00:00:00:00:02")/IP(src="10.0.0.1",dst="10.0.0.2")/UDP(dport=7)/Raw(len=8)"#;
    let o = trace(&run, &["--port", "0", pkt]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    for want in [
        "packet of 50 bytes on port 0 (dry run",
        "parse      parsed as eth/ipv4/udp",
        "classify   classified as other",
        "l2fwd      forwarded to port 1 (static)",
        "tx         would be sent out port 1 (null), 50 bytes (not sent: dry run)",
        "verdict: would be sent out port 1",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    let o = trace(&run, &["--port", "1", "--json", "--hex", &"ff".repeat(14)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["port"], 1);
    assert!(v["steps"].as_array().unwrap().iter().any(|s| s["stage"] == "parse"), "{v}");
    // Bad requests: clear errors.
    for (args, msg) in [
        (&["--port", "5", "Ether()"][..], "no port 5"),
        (&["Ether()/Bogus()"][..], "bad packet"),
        (&["--hex", "zz"][..], "bad hex frame"),
    ] {
        let o = trace(&run, args);
        assert!(!o.status.success(), "{args:?}");
        assert!(text(&o.stderr).contains(msg), "{args:?}: {}", text(&o.stderr));
    }
    // Nothing moved: no packet received, sent or dropped.
    let mut after = run.stats();
    after["elapsed_secs"] = before["elapsed_secs"].clone();
    assert_eq!(before, after);
    run.stop();
}

#[test]
fn trace_through_the_vswitch_shows_the_allow_and_the_deny_and_changes_nothing() {
    let dir = common::temp_dir("trace-vs");
    let run = Run::start(
        &dir,
        &["--port", "null", "--port", "null", "--stage", "parse", "--stage", "vswitch"],
    );
    let vs = |args: &[&str]| {
        let o = snic()
            .args(["vswitch", args[0], "--control"])
            .arg(&run.sock)
            .args(&args[1..])
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
    };
    // The default policy allows (acl rule 1); a second ACL layer denies 10.0.0.3.
    vs(&["add-layer", "--vport", "0", "--position", "1", "name=acl2", "kind=acl", "default=pass"]);
    vs(&["add-rule", "--vport", "0", "--layer", "acl2", "id=50", "ip.dst=10.0.0.3", "action=deny"]);
    let show = || {
        let o = snic()
            .args(["vswitch", "show", "--json", "--control"])
            .arg(&run.sock)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        serde_json::from_slice::<Value>(&o.stdout).unwrap()
    };
    let vs_before = show();
    let before = run.stats();
    let vm = |dst: &str| {
        format!(
            r#"Ether(src="02:00:00:00:00:01",dst="02:00:00:00:00:02")/IP(src="10.0.0.1",dst="{dst}")/UDP(sport=1000,dport=2000)/Raw(len=18)"#
        )
    };
    let o = trace(&run, &["--port", "0", &vm("10.0.0.2")]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    for want in [
        "vswitch    flow key ",
        "vswitch    running NIC: no cached flow (GFT miss)",
        "vswitch    slow path (policy generation 3, no connection state): allow via vport 0, transposition ",
        "out port 1",
        "vswitch    forwarded to port 1 (slow path)",
        "verdict: would be sent out port 1 (null)",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    let o = trace(&run, &["--port", "0", &vm("10.0.0.3")]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    for want in [
        "deny: acl (layer 1, rule 50) (layer \"acl2\")",
        "vswitch    dropped: ",
        "verdict: dropped",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    // No flow compiled into the running NIC, no counter moved.
    let vs_after = show();
    assert_eq!(vs_before, vs_after);
    let mut after = run.stats();
    after["elapsed_secs"] = before["elapsed_secs"].clone();
    assert_eq!(before, after);
    run.stop();
}

/// The MAC of the NIC in the `snic serve` tests.
const NIC_MAC: &str = "02:00:00:00:aa:01";

/// A RoCEv2 SEND ONLY (no payload) from 10.0.0.1 to the NIC's RoCE address 10.9.9.9, with a
/// good ICRC, as hex.
fn roce_send_hex() -> String {
    // BTH: SEND ONLY, default P_Key, dest QP 0x11, PSN 5; then room for the ICRC.
    let bth = "04 00 ffff 00 000011 00 000005 00000000".replace(' ', "");
    let spec = format!(
        r#"Ether(src="02:00:00:00:00:01",dst="{NIC_MAC}")/IP(src="10.0.0.1",dst="10.9.9.9")/UDP(sport=49152,dport=4791,chksum=0)/Raw(hex="{bth}")"#
    );
    let mut f = snic_scenario::packet::build(&spec).unwrap();
    snic_wire::roce::icrc::fill(&mut f[14..]).unwrap();
    f.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn serve_captures_its_wire_port_and_a_stage_and_traces_its_own_steering() {
    let test = "serve_captures";
    if !common::have_tshark(test) {
        return;
    }
    let dir = common::temp_dir("cap-serve");
    let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
    // A free port for the NIC's wire end (bound and released; snic binds it right after).
    let wire = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let port = format!("udp:{wire},{}", peer.local_addr().unwrap());
    let run = Run::serve(&dir, &["--port", &port, "--rdma-ip", "10.9.9.9", "--mac", NIC_MAC]);
    // The peer sends ordinary frames to the NIC until the captures are done (bounded).
    let frame = snic_scenario::packet::build(&format!(
        r#"Ether(src="02:00:00:00:00:01",dst="{NIC_MAC}")/IP(src="10.0.0.1",dst="10.0.0.2")/UDP(sport=1000,dport=2000)/Raw(len=18)"#
    ))
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let t0 = Instant::now();
            while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(60) {
                peer.send_to(&frame, wire).unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };

    // Port 0, the wire: what the peer sent, inbound.
    let file = dir.join("wire.pcapng");
    let o = capture(&run, &["--port", "0", "-c", "20"], &file);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.starts_with("captured 20, dropped 0 by capture (count); 1 interface(s)"), "{err}");
    let rows = tshark_fields(
        &file,
        &["frame.interface_name", "frame.packet_flags_direction", "ip.dst", "udp.dstport"],
    );
    assert_eq!(rows.len(), 20, "{rows:?}");
    for r in &rows {
        assert!(r[0].starts_with("port 0 ("), "{r:?}");
        assert_eq!(hex(&r[1]), 1, "received frames are inbound: {r:?}");
        assert_eq!(r[2..], ["10.0.0.2", "2000"], "{r:?}");
    }

    // A stage of the NIC's pipeline (`local` in place after classify): what leaves classify.
    let file = dir.join("stage.pcapng");
    let o = capture(&run, &["--stage", "classify", "-c", "5"], &file);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let rows = tshark_fields(&file, &["frame.interface_name", "ip.dst"]);
    assert_eq!(rows.len(), 5, "{rows:?}");
    assert!(rows.iter().all(|r| r[0] == "stage 1 (classify)" && r[1] == "10.0.0.2"), "{rows:?}");
    let o = capture(&run, &["--stage", "nope"], &file);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("no stage \"nope\" (stages: parse, classify, local, l2fwd)"), "{err}");
    let o = capture(&run, &["--port", "1"], &file);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("no port 1 (this snic has 1 port(s)"), "{}", text(&o.stderr));
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();

    // Trace: the NIC's own steering runs in the dry run. RoCE for its address goes to the
    // RDMA engine, ARP for it to the neighbour table; neither is delivered.
    let o = trace(&run, &["--port", "0", "--hex", &roce_send_hex()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    for want in [
        "classify   classified as rdma",
        "(local: rdma engine)",
        "verdict: would be taken by the NIC: its RDMA engine (not delivered: dry run)",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    assert!(!out.contains("not run"), "{out}");
    let arp = r#"Ether(src="02:00:00:00:00:01")/ARP(psrc="10.0.0.1",pdst="10.9.9.9")"#;
    let o = trace(&run, &["--port", "0", arp]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("(local: neighbour table)"), "{out}");
    assert!(out.contains("verdict: would be taken by the NIC: its neighbour table"), "{out}");
    // Another address's traffic passes `local` and goes on through the stages.
    let other = r#"Ether(dst="02:00:00:00:00:02")/IP(src="10.0.0.1",dst="10.0.0.2")/UDP(dport=7)"#;
    let o = trace(&run, &["--port", "0", other]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("l2fwd "), "{out}");
    assert!(!out.contains("local:") && !out.contains("taken by the NIC"), "{out}");
    // Nothing traced reached the device.
    let st = run.stats();
    assert_eq!(st["nic"]["nic"]["roce_rx"], 0, "{st}");
    assert_eq!(st["nic"]["nic"]["neigh_rx"], 0, "{st}");
    run.stop();
}
