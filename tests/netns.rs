//! Real-interface test of the `snic` binary (root only; skipped with a message otherwise).
//!
//! As root, a missing tool (`ip`, `ping`, `iperf3`, `timeout`, `kill`, `sysctl`) fails the test when the
//! `CI` environment variable is set (CI installs them) and skips it with a message otherwise.
//!
//! Topology, made fresh for each run (names carry the pid) and torn down on every exit path:
//!
//! ```text
//!  netns A: veth 10.199.88.1/24 ==(veth)== outer A  (root ns)
//!                                             |  snic run --port afpacket:A --port afpacket:B
//!  netns B: veth 10.199.88.2/24 ==(veth)== outer B  (root ns)       (later: a Linux bridge)
//! ```
//!
//! Kernel default offloads stay on, so TCP crosses snic as GSO super-packets. The test checks
//! that `ping -c 3` crosses snic, runs a 5-second `iperf3` TCP test through it, then replaces
//! snic by a Linux bridge over the same two outer veths and runs the same test, and prints both
//! throughputs and their ratio. It asserts only that ping and both iperf3 runs succeeded and
//! moved data; it makes no timing assertion.

mod common;

use common::netns::{OuterVeths, can_run, iperf3_client, must, run, stop};
use std::time::Duration;

/// One iperf3 TCP test from namespace 0 to 1 through `g`; returns received bits per second.
fn iperf(g: &mut OuterVeths, label: &str) -> f64 {
    let server = g.in_ns(1, &["iperf3", "-s", "-1", "-B", g.addr[1]]);
    let si = g.spawn(&format!("iperf3-server-{label}"), 30, &server);
    let client = g.in_ns(0, &["iperf3", "-c", g.addr[1], "-t", "5", "-J"]);
    iperf3_client(label, &client, 20, &mut g.children[si], &g.dir).1
}

#[test]
fn snic_forwards_between_veths_like_a_bridge() {
    let test = "snic_forwards_between_veths_like_a_bridge";
    if !can_run(test, &["ip", "ping", "iperf3", "timeout", "kill", "sysctl"]) {
        return;
    }
    let mut g = OuterVeths::create("snt", ["10.199.88.1", "10.199.88.2"]);

    // 1. Through snic.
    let a = format!("afpacket:{}", g.outer[0]);
    let b = format!("afpacket:{}", g.outer[1]);
    let snic = env!("CARGO_BIN_EXE_snic");
    let sock = g.dir.join("ctl.sock");
    let sock = sock.to_str().expect("temp dir path is UTF-8").to_string();
    let si = g.spawn("snic", 60, &[snic, "run", "--port", &a, "--port", &b, "--control", &sock]);
    g.wait_ready(si, snic, &sock);
    let ping = g.in_ns(0, &["ping", "-c", "3", "-i", "0.2", "-W", "2", g.addr[1]]);
    let (ok, out, err) = run(15, &ping);
    assert!(ok, "ping through snic failed:\n{out}{err}\n{}", g.log("snic"));
    let via_snic = iperf(&mut g, "snic");
    stop(&mut g.children[si], Duration::from_secs(3));
    eprintln!("{}", g.log("snic"));

    // 2. The same two veths enslaved to a Linux bridge.
    let bridge = format!("snbr{}", std::process::id());
    g.links.push(bridge.clone());
    must(10, &["ip", "link", "add", &bridge, "type", "bridge"]);
    for i in 0..2 {
        must(10, &["ip", "link", "set", &g.outer[i], "master", &bridge]);
    }
    must(10, &["ip", "link", "set", &bridge, "up"]);
    let (ok, out, err) = run(15, &ping);
    assert!(ok, "ping through the bridge failed:\n{out}{err}");
    let via_bridge = iperf(&mut g, "bridge");

    eprintln!(
        "throughput: snic {:.3} Gbit/s, bridge {:.3} Gbit/s, snic/bridge = {:.3}",
        via_snic / 1e9,
        via_bridge / 1e9,
        if via_bridge > 0.0 { via_snic / via_bridge } else { f64::NAN }
    );
    drop(g);
}
