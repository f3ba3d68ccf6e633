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
