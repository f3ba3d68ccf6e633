//! Real-interface test of `snic run` with AF_XDP ports (root only; skipped with a message
//! otherwise).
//!
//! ```text
//!  netns A: veth 10.199.89.1/24 ==(veth)== outer A  (root ns)
//!                                             |  snic run --port afxdp:A --port afxdp:B
//!  netns B: veth 10.199.89.2/24 ==(veth)== outer B  (root ns)
//! ```
//!
//! Ping crosses snic both ways (ARP included: the XDP program hands snic every frame of the
//! outer ends), snic's counters show it, and once snic has stopped no XDP program is left on
//! either outer end.
//!
//! As root, a missing tool (`ip`, `ping`, `timeout`, `kill`, `sysctl`) fails the test when `CI` is set
//! and skips it with a message otherwise.

mod common;

use common::netns::{OuterVeths, can_run, must, note, run, stop};
use std::time::Duration;

#[test]
fn snic_run_forwards_between_afxdp_ports() {
    let test = "snic_run_forwards_between_afxdp_ports";
    if !can_run(test, &["ip", "ping", "timeout", "kill", "sysctl"]) {
        return;
    }
    let mut g = OuterVeths::create("fpx", ["10.199.89.1", "10.199.89.2"]);
    let snic = env!("CARGO_BIN_EXE_snic");
    let sock = g.dir.join("ctl.sock").to_str().expect("UTF-8 temp dir").to_string();
    let a = format!("afxdp:{}", g.outer[0]);
    let b = format!("afxdp:{}", g.outer[1]);
    let si = g.spawn("snic", 60, &[snic, "run", "--port", &a, "--port", &b, "--control", &sock]);
    g.wait_ready(si, snic, &sock);
    for o in &g.outer {
        let link = must(10, &["ip", "-d", "link", "show", "dev", o]);
        assert!(link.contains("prog/xdp"), "no XDP program on {o}:\n{link}");
    }

    let ping = g.in_ns(0, &["ping", "-c", "5", "-i", "0.2", "-W", "2", g.addr[1]]);
    let (ok, out, err) = run(15, &ping);
    assert!(ok, "ping through snic's AF_XDP ports failed:\n{out}{err}\n{}", g.log("snic"));
    assert!(out.contains("5 received"), "{out}");

    // 5 echo requests or replies and at least one ARP exchange each way. The counters document
    // is a snapshot refreshed every 100 ms (from counters the worker publishes every 100 ms):
    // read it until it shows them, for at most about 5 s.
    let enough = |v: &serde_json::Value| {
        v["ports"]
            .as_array()
            .is_some_and(|ps| ps.iter().all(|p| p["rx_packets"].as_u64().unwrap_or(0) >= 6))
    };
    let mut stats = String::new();
    let mut v = serde_json::Value::Null;
    for _ in 0..50 {
        let (ok, out, _) = run(5, &[snic, "stats", "--control", &sock]);
        assert!(ok, "snic stats failed");
        v = serde_json::from_str(out.trim()).expect("stats JSON");
        stats = out;
        if enough(&v) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for p in v["ports"].as_array().expect("ports") {
        let rx = p["rx_packets"].as_u64().unwrap_or(0);
        assert!(rx >= 6, "port counters did not move: {p}");
    }

    stop(&mut g.children[si], Duration::from_secs(3));
    for o in &g.outer {
        let link = must(10, &["ip", "-d", "link", "show", "dev", o]);
        assert!(!link.contains("xdp"), "XDP program left on {o} after snic exited:\n{link}");
    }
    note(&format!("snic run with AF_XDP ports: ping crossed; stats {}", stats.trim()));
}

/// The hitless upgrade with AF_XDP ports (`snic run --takeover`): while an iperf3 TCP stream
/// crosses snic's two AF_XDP ports, a new process takes the sockets, their UMEMs and the XDP
/// programs' links over and the old one exits. The stream finishes (no reset), the programs
/// stayed attached through the change (the old process's exit detached nothing), and they go
/// when the new process stops.
#[test]
fn takeover_of_afxdp_ports_keeps_tcp_and_the_program() {
    afxdp_takeover("takeover_of_afxdp_ports_keeps_tcp_and_the_program", 1);
}

/// The same with two workers on two-queue veths: each worker's own socket of each port (one
/// per interface queue) is handed over.
#[test]
fn takeover_of_per_worker_afxdp_queues_keeps_tcp() {
    afxdp_takeover("takeover_of_per_worker_afxdp_queues_keeps_tcp", 2);
}

fn afxdp_takeover(test: &str, workers: u32) {
    if !can_run(test, &["ip", "ping", "iperf3", "timeout", "kill", "sysctl", "ethtool"]) {
        return;
    }
    let tag = if workers == 1 { "fxt" } else { "fxw" };
    // (Namespaces apart: both tests may use the same addresses at once.)
    let mut g = OuterVeths::create_with_queues(tag, ["10.199.88.1", "10.199.88.2"], workers);
    // A veth hands XDP its local stack's frames with the TCP checksum left to offload (an
    // AF_XDP frame carries no note of that): the senders compute their checksums.
    for i in 0..2 {
        let inner = g.inner[i].clone();
        g.must_in(i, &["ethtool", "-K", &inner, "tx", "off"]);
    }
    let snic = env!("CARGO_BIN_EXE_snic");
    let sock = g.dir.join("ctl.sock").to_str().expect("UTF-8 temp dir").to_string();
    let a = format!("afxdp:{}", g.outer[0]);
    let b = format!("afxdp:{}", g.outer[1]);
    let w = workers.to_string();
    let cmd = |extra: &[&str]| -> Vec<String> {
        let mut v =
            vec![snic, "run", "--port", &a, "--port", &b, "--control", &sock, "--workers", &w];
        v.extend_from_slice(extra);
        v.into_iter().map(String::from).collect()
    };
    let si = g.spawn("snic", 60, &cmd(&["--duration", "50"]));
    g.wait_ready(si, snic, &sock);
    let ping = g.in_ns(0, &["ping", "-c", "3", "-i", "0.2", "-W", "2", g.addr[1]]);
    let (ok, out, err) = run(15, &ping);
    assert!(ok, "ping through snic's AF_XDP ports failed:\n{out}{err}\n{}", g.log("snic"));
    let server = g.in_ns(1, &["iperf3", "-s", "-1", "-B", g.addr[1]]);
    g.spawn("iperf3-server", 40, &server);
    std::thread::sleep(Duration::from_millis(500));
    let client = g.in_ns(0, &["iperf3", "-c", g.addr[1], "-t", "5", "-J"]);
    let ci = g.spawn("iperf3-client", 30, &client);
    std::thread::sleep(Duration::from_secs(2));
    let ni = g.spawn("snic-new", 60, &cmd(&["--duration", "50", "--takeover", &sock]));
    let old = wait_exit(&mut g, si, "snic", 20);
    assert!(old.success(), "the old snic failed:\n{}\n{}", g.log("snic"), g.log("snic-new"));
    assert!(g.log("snic").contains("handed over"), "{}", g.log("snic"));
    // Its final report keeps each queue worker's counters as they stood at the handover (one
    // worker: one I/O loop, no queue workers, no such line).
    let old_log = g.log("snic");
    let worker_rx = |k: u32| -> Option<u64> {
        let head = format!("worker {k} (its queues): rx ");
        let line = old_log.lines().find_map(|l| l.strip_prefix(&head).map(str::to_string))?;
        line.split(' ').next()?.parse().ok()
    };
    if workers > 1 {
        let rx: Vec<Option<u64>> = (0..workers).map(worker_rx).collect();
        assert!(rx.iter().all(Option::is_some), "per-worker lines {rx:?} in\n{old_log}");
        assert!(rx.iter().flatten().sum::<u64>() > 0, "nothing read before the handover: {rx:?}");
    } else {
        assert_eq!(worker_rx(0), None, "{old_log}");
    }
    // The old process is gone: the programs are still attached, by the new one's links.
    for o in &g.outer {
        let link = must(10, &["ip", "-d", "link", "show", "dev", o]);
        assert!(link.contains("prog/xdp"), "no XDP program on {o} after the old exit:\n{link}");
    }
    if common::netns::exit_within(&mut g.children[ci], Duration::from_secs(25)).is_none() {
        let (_, st, _) = run(5, &[snic, "stats", "--control", &sock]);
        panic!(
            "iperf3 did not finish in 25 s:\n{}\n--- old: {}\n--- new: {}\nstats {st}",
            g.log("iperf3-client"),
            g.log("snic"),
            g.log("snic-new")
        );
    }
    let status = wait_exit(&mut g, ci, "iperf3-client", 1);
    let (v, bytes) =
        common::netns::iperf3_report(&g.dir, "iperf3-client", status, &g.log("snic-new"));
    assert!(bytes > 1e6, "the stream moved only {bytes} bytes");
    let (ok, out, err) = run(5, &[snic, "stats", "--control", &sock]);
    assert!(ok, "snic stats after the takeover: {err}");
    let stats: serde_json::Value = serde_json::from_str(out.trim()).expect("stats JSON");
    let t = &stats["takeover"];
    // One socket per port and worker.
    assert_eq!(t["ports_adopted"], 2 * workers, "{t}");
    assert_eq!(t["ports_reopened"], 0, "{t}");
    let (ok, out, err) = run(15, &ping);
    assert!(ok, "ping after the takeover:\n{out}{err}\n{}", g.log("snic-new"));
    stop(&mut g.children[ni], Duration::from_secs(3));
    for o in &g.outer {
        let link = must(10, &["ip", "-d", "link", "show", "dev", o]);
        assert!(!link.contains("xdp"), "XDP program left on {o} after snic exited:\n{link}");
    }
    note(&format!(
        "AF_XDP takeover under iperf3, {workers} worker(s): {t}; {bytes:.0} bytes, retransmits {}",
        v["end"]["sum_sent"]["retransmits"]
    ));
}

/// Wait (at most `secs`) for child `i` to exit; panics with its log if it does not.
fn wait_exit(
    g: &mut common::netns::OuterVeths,
    i: usize,
    label: &str,
    secs: u64,
) -> std::process::ExitStatus {
    match common::netns::exit_within(&mut g.children[i], Duration::from_secs(secs)) {
        Some(s) => s,
        None => panic!("{label} did not finish in {secs} s:\n{}", g.log(label)),
    }
}
