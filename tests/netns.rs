//! Real-interface test of the `snic` binary (root only; skipped with a message otherwise).
//!
//! As root, a missing tool (`ip`, `ping`, `iperf3`, `timeout`, `kill`) fails the test when the
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

use common::netns::{have, is_root, must, run, stop};
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Everything one run creates: namespaces, links, the bridge, processes and log files. Drop
/// removes all of it, whatever the exit path (assertion failure included).
struct Guard {
    ns: [String; 2],
    outer: [String; 2],
    inner: [String; 2],
    addr: [&'static str; 2],
    bridge: String,
    children: Vec<Child>,
    dir: PathBuf,
}

impl Guard {
    fn create() -> Guard {
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("snic-netns-{pid}"));
        let _ = std::fs::create_dir_all(&dir);
        let g = Guard {
            ns: [format!("snicnt{pid}a"), format!("snicnt{pid}b")],
            outer: [format!("sno{pid}a"), format!("sno{pid}b")],
            inner: [format!("sni{pid}a"), format!("sni{pid}b")],
            addr: ["10.199.88.1", "10.199.88.2"],
            bridge: format!("snbr{pid}"),
            children: Vec::new(),
            dir,
        };
        for i in 0..2 {
            must(10, &["ip", "netns", "add", &g.ns[i]]);
            must(
                10,
                &["ip", "link", "add", &g.outer[i], "type", "veth", "peer", "name", &g.inner[i]],
            );
            must(10, &["ip", "link", "set", &g.inner[i], "netns", &g.ns[i]]);
            must(10, &["ip", "link", "set", &g.outer[i], "up"]);
            let cidr = format!("{}/24", g.addr[i]);
            g.must_in(i, &["ip", "addr", "add", &cidr, "dev", &g.inner[i]]);
            g.must_in(i, &["ip", "link", "set", &g.inner[i], "up"]);
            g.must_in(i, &["ip", "link", "set", "lo", "up"]);
        }
        g
    }

    /// `args` prefixed with `ip netns exec NS`.
    fn in_ns(&self, i: usize, args: &[&str]) -> Vec<String> {
        ["ip", "netns", "exec", self.ns[i].as_str()]
            .iter()
            .chain(args)
            .map(|s| s.to_string())
            .collect()
    }

    fn must_in(&self, i: usize, args: &[&str]) {
        must(10, &self.in_ns(i, args));
    }

    /// Start a long-running process bounded by `timeout`, output to log files; returns its index.
    fn spawn<S: AsRef<str> + std::fmt::Debug>(
        &mut self,
        label: &str,
        secs: u32,
        args: &[S],
    ) -> usize {
        let out = File::create(self.dir.join(format!("{label}.out"))).expect("log file");
        let err = File::create(self.dir.join(format!("{label}.err"))).expect("log file");
        let child = Command::new("timeout")
            .args(["-k", "2", &secs.to_string()])
            .args(args.iter().map(|a| a.as_ref()))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {args:?}: {e}"));
        self.children.push(child);
        self.children.len() - 1
    }

    fn log(&self, label: &str) -> String {
        let read = |ext: &str| {
            std::fs::read_to_string(self.dir.join(format!("{label}.{ext}"))).unwrap_or_default()
        };
        format!("--- {label} stdout ---\n{}--- {label} stderr ---\n{}", read("out"), read("err"))
    }

    /// One iperf3 TCP test from namespace A to B; returns received bits per second.
    fn iperf(&mut self, label: &str) -> f64 {
        let server = self.in_ns(1, &["iperf3", "-s", "-1", "-B", self.addr[1]]);
        let si = self.spawn(&format!("iperf3-server-{label}"), 30, &server);
        let client = self.in_ns(0, &["iperf3", "-c", self.addr[1], "-t", "5", "-J"]);
        let mut result = (false, String::new(), String::new());
        for _ in 0..20 {
            // The server needs a moment to listen; retry only while it refuses connections.
            thread::sleep(Duration::from_millis(250));
            result = run(20, &client);
            if result.0 || !result.1.contains("Connection refused") {
                break;
            }
        }
        let (ok, json, err) = result;
        stop(&mut self.children[si], Duration::from_secs(2));
        assert!(ok, "iperf3 {label} failed: {err}\n{json}\n{}", self.log("snic"));
        let v: serde_json::Value = serde_json::from_str(&json).expect("iperf3 -J output is JSON");
        let recv = &v["end"]["sum_received"];
        let bytes = recv["bytes"].as_f64().unwrap_or(0.0);
        let bps = recv["bits_per_second"].as_f64().unwrap_or(0.0);
        assert!(bytes > 0.0, "iperf3 {label} moved no data: {json}");
        eprintln!("iperf3 {label}: {:.0} bytes, {:.3} Gbit/s", bytes, bps / 1e9);
        bps
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        for c in &mut self.children {
            stop(c, Duration::from_secs(3));
        }
        let _ = run(10, &["ip", "link", "del", &self.bridge]);
        for i in 0..2 {
            let _ = run(10, &["ip", "link", "del", &self.outer[i]]);
            let _ = run(10, &["ip", "netns", "del", &self.ns[i]]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether the test can run: false (after a message on stderr) when not root, or when root but a
/// tool is missing and `CI` is unset. Panics when root, `CI` is set and a tool is missing.
///
/// The message goes straight to stderr, not through `eprintln!`, which libtest captures for
/// passing tests: a plain `cargo test` must show that the test was skipped.
fn can_run(tools: &[&str]) -> bool {
    if !is_root() {
        let _ = writeln!(std::io::stderr(), "skipping netns test: needs root");
        return false;
    }
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !have(t)).collect();
    if missing.is_empty() {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "CI is set but these tools are missing: {missing:?}");
    let _ = writeln!(std::io::stderr(), "skipping netns test: missing tools {missing:?}");
    false
}

/// How long `snic run` may take to open its ports and answer on its control socket.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Wait until the `snic run` child `si` answers `snic stats --control SOCK` with real counters
/// for both ports (not the `{"status":"starting"}` placeholder served before the run loop's
/// first refresh): its sockets are then open and it forwards. Panics (with snic's log) if it
/// exits first or is not ready within [`READY_TIMEOUT`].
fn wait_ready(g: &mut Guard, si: usize, snic: &str, sock: &str) {
    let t0 = Instant::now();
    let mut last = String::new();
    loop {
        if let Ok(Some(status)) = g.children[si].try_wait() {
            panic!("snic run exited early ({status}); last stats: {last}\n{}", g.log("snic"));
        }
        let (ok, out, err) = run(5, &[snic, "stats", "--control", sock]);
        if ok {
            let v: serde_json::Value = serde_json::from_str(out.trim())
                .unwrap_or_else(|e| panic!("snic stats is not JSON ({e}): {out}"));
            let ports = v["ports"]
                .as_array()
                .map_or(0, |p| p.iter().filter(|p| p["rx_packets"].is_u64()).count());
            if v.get("status").is_none() && ports == 2 {
                return;
            }
            last = out;
        } else {
            last = err;
        }
        assert!(
            t0.elapsed() < READY_TIMEOUT,
            "snic run not ready within {READY_TIMEOUT:?}; last stats: {last}\n{}",
            g.log("snic")
        );
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn snic_forwards_between_veths_like_a_bridge() {
    if !can_run(&["ip", "ping", "iperf3", "timeout", "kill"]) {
        return;
    }
    let mut g = Guard::create();

    // 1. Through snic.
    let a = format!("afpacket:{}", g.outer[0]);
    let b = format!("afpacket:{}", g.outer[1]);
    let snic = env!("CARGO_BIN_EXE_snic");
    let sock = g.dir.join("ctl.sock");
    let sock = sock.to_str().expect("temp dir path is UTF-8").to_string();
    let si = g.spawn("snic", 60, &[snic, "run", "--port", &a, "--port", &b, "--control", &sock]);
    wait_ready(&mut g, si, snic, &sock);
    let ping = g.in_ns(0, &["ping", "-c", "3", "-i", "0.2", "-W", "2", g.addr[1]]);
    let (ok, out, err) = run(15, &ping);
    assert!(ok, "ping through snic failed:\n{out}{err}\n{}", g.log("snic"));
    let via_snic = g.iperf("snic");
    stop(&mut g.children[si], Duration::from_secs(3));
    eprintln!("{}", g.log("snic"));

    // 2. The same two veths enslaved to a Linux bridge.
    must(10, &["ip", "link", "add", &g.bridge, "type", "bridge"]);
    for i in 0..2 {
        must(10, &["ip", "link", "set", &g.outer[i], "master", &g.bridge]);
    }
    must(10, &["ip", "link", "set", &g.bridge, "up"]);
    let (ok, out, err) = run(15, &ping);
    assert!(ok, "ping through the bridge failed:\n{out}{err}");
    let via_bridge = g.iperf("bridge");

    eprintln!(
        "throughput: snic {:.3} Gbit/s, bridge {:.3} Gbit/s, snic/bridge = {:.3}",
        via_snic / 1e9,
        via_bridge / 1e9,
        if via_bridge > 0.0 { via_snic / via_bridge } else { f64::NAN }
    );
    drop(g);
}
