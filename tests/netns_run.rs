//! `snic run` on real interfaces: frames the kernel drops at snic's AF_PACKET sockets are snic's
//! drops (root only; skipped with a message otherwise; under CI a missing tool fails the test).
//!
//! Two namespaces joined by a veth. In B, `snic run --port afpacket:VETH --port null` is frozen
//! with SIGSTOP; in A, another `snic run` sends 80,000 generated frames into the veth, more
//! than B's receive ring holds (8 MiB), then B is thawed. The kernel dropped what
//! did not fit, and snic must say so: on its control socket (`snic stats --control`), in the
//! final report's summary line (never `drops: none`) and on the port's line. Every frame the
//! sender's port sent is either received by B's port or counted as a kernel drop.
//!
//! Also: with `--workers 2` the port splits into two fanout queues whose own counters appear
//! in the live stats and the final report (`per_worker`).

mod common;

use common::netns::{VethPair, have, is_root, note, stop, wait_for};
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const FRAMES: u64 = 80_000;

fn ready() -> bool {
    if !is_root() {
        note("skipping netns_run: needs root");
        return false;
    }
    let missing: Vec<&str> = ["ip", "timeout", "kill"].into_iter().filter(|t| !have(t)).collect();
    if missing.is_empty() {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "CI is set but tools are missing: {missing:?}");
    note(&format!("skipping netns_run: missing {missing:?}"));
    false
}

fn signal(sig: &str, pid: u32) {
    let ok = Command::new("kill").args([sig, &pid.to_string()]).status().is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid}");
}

/// The receiver, thawed and stopped on every exit path (a frozen process would outlive its
/// `--duration`).
struct Receiver(Option<Child>);

impl Receiver {
    fn pid(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = Command::new("kill").args(["-CONT", &c.id().to_string()]).status();
            stop(c, Duration::from_secs(3));
        }
    }
}

fn stats(sock: &Path) -> Option<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_snic"))
        .args(["stats", "--control"])
        .arg(sock)
        .output()
        .ok()?;
    serde_json::from_slice(&out.stdout).ok()
}

fn num(v: &Value, ptr: &str) -> u64 {
    v.pointer(ptr).and_then(Value::as_u64).unwrap_or_else(|| panic!("no {ptr} in {v}"))
}

/// `snic run --port afpacket:VETH --port null --workers N --control SOCK` (and `extra`) in the
/// pair's second namespace, returned once its control socket answers. `ip netns exec` execs
/// snic: the child's pid is snic's. `--duration` bounds it.
fn start_receiver(pair: &VethPair, sock: &Path, workers: &str, extra: &[&str]) -> Receiver {
    let rx = Command::new("ip")
        .args(["netns", "exec", &pair.ns[1]])
        .arg(env!("CARGO_BIN_EXE_snic"))
        .args(["run", "--port", &format!("afpacket:{}", pair.veth[1]), "--port", "null"])
        .args(["--workers", workers, "--duration", "90", "--control"])
        .arg(sock)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = Receiver(Some(rx));
    wait_for(20, "the receiver's control socket", || stats(sock).is_some());
    rx
}

/// Send `n` generated frames into the pair's first veth end; returns how many its port sent
/// (at least half, or the test fails).
fn send_generated(pair: &VethPair, n: u64) -> u64 {
    let sent = pair
        .exec(0)
        .arg(env!("CARGO_BIN_EXE_snic"))
        .args(["run", "--json", "--port", &format!("gen:{n}"), "--port"])
        .arg(format!("afpacket:{}", pair.veth[0]))
        .args(["--stage", "l2fwd"])
        .output()
        .unwrap();
    assert!(sent.status.success(), "sender: {}", String::from_utf8_lossy(&sent.stderr));
    let sent: Value = serde_json::from_slice(&sent.stdout).unwrap();
    let offered = num(&sent, "/ports/1/device/tx_packets");
    assert!(offered > n / 2, "the sender sent only {offered} frames: {sent}");
    offered
}

#[test]
fn kernel_drops_at_the_socket_are_reported_as_drops() {
    if !ready() {
        return;
    }
    let pair = VethPair::create("fprk", "fprk", 60);
    let dir = std::env::temp_dir().join(format!("snic-netns-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("ctl.sock");
    let mut rx = start_receiver(&pair, &sock, "1", &[]);
    let pid = rx.pid();
    signal("-STOP", pid);
    let offered = send_generated(&pair, FRAMES);
    signal("-CONT", pid);

    // Live: the control socket shows the kernel's drops once the receiver caught up.
    let mut live = Value::Null;
    wait_for(20, "the receiver to drain its rings", || {
        live = stats(&sock).unwrap_or(Value::Null);
        live.pointer("/ports/0/device/rx_packets").and_then(Value::as_u64).is_some_and(|rx| {
            rx + live.pointer("/kernel/rx_kernel_drops").and_then(Value::as_u64).unwrap_or(0)
                >= offered
        })
    });
    let dropped = num(&live, "/kernel/rx_kernel_drops");
    assert!(dropped > 0, "a frozen receiver dropped nothing? {live}");
    assert_eq!(num(&live, "/drops/rx_kernel_drops"), dropped, "{live}");
    assert!(num(&live, "/drops_total") >= dropped, "{live}");

    // Final report: the summary line counts them, the port's line names them.
    signal("-INT", pid);
    let out = rx.0.take().unwrap().wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(!text.contains("drops: none"), "{text}");
    let line = text.lines().find(|l| l.starts_with("drops (")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains(&format!("rx_kernel_drops {dropped}")), "{text}");
    let port0 = text.lines().find(|l| l.starts_with("port 0 ")).unwrap_or_else(|| panic!("{text}"));
    assert!(port0.contains(&format!("kernel: {dropped} socket drops")), "{text}");
    // Every frame sent was received or counted as dropped by the kernel.
    let rx_line = |l: &str| l.split("rx ").nth(1)?.split(' ').next()?.parse::<u64>().ok();
    let received = rx_line(port0).unwrap_or_else(|| panic!("{port0}"));
    assert_eq!(received + dropped, offered, "{text}");
    note(&format!(
        "netns_run: {offered} frames offered, {received} received, {dropped} dropped by the kernel"
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// With `--workers 2` an AF_PACKET port splits into two fanout queues, one per worker: the
/// kernel spreads the generator's flows over both, and the live stats and the final report
/// give each worker's queues (`per_worker`), which add up to the ports' own counters.
#[test]
fn queue_workers_report_their_own_queues() {
    if !ready() {
        return;
    }
    const SENT: u64 = 20_000;
    let pair = VethPair::create("fprq", "fprq", 60);
    let dir = std::env::temp_dir().join(format!("snic-netns-runq-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("ctl.sock");
    let mut rx = start_receiver(&pair, &sock, "2", &["--json"]);
    let pid = rx.pid();
    let offered = send_generated(&pair, SENT);

    // Live: once every frame is in (received or dropped by the kernel), two queues that add up.
    let mut live = Value::Null;
    wait_for(20, "the receiver to take every frame", || {
        live = stats(&sock).unwrap_or(Value::Null);
        let rx = live.pointer("/ports/0/device/rx_packets").and_then(Value::as_u64);
        let dropped = live.pointer("/kernel/rx_kernel_drops").and_then(Value::as_u64);
        rx.zip(dropped).is_some_and(|(r, d)| r + d >= offered)
    });
    let sum = |doc: &Value, key: &str| -> (Vec<u64>, u64) {
        let q = doc["per_worker"].as_array().unwrap_or_else(|| panic!("no per_worker in {doc}"));
        let each: Vec<u64> = q.iter().map(|w| w[key].as_u64().unwrap()).collect();
        let sum = each.iter().sum();
        (each, sum)
    };
    let (each, total) = sum(&live, "rx_packets");
    assert_eq!(each.len(), 2, "{live}");
    assert_eq!(total, num(&live, "/ports/0/device/rx_packets"), "{live}");

    signal("-INT", pid);
    let out = rx.0.take().unwrap().wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let done: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (each, total) = sum(&done, "rx_packets");
    assert_eq!(each.len(), 2, "{done}");
    assert!(each.iter().all(|&n| n > 0), "the kernel gave one queue nothing: {each:?}");
    let port_rx =
        num(&done, "/ports/0/device/rx_packets") + num(&done, "/ports/1/device/rx_packets");
    assert_eq!(total, port_rx, "{done}");
    let (_, kernel) = sum(&done, "rx_kernel_drops");
    assert_eq!(kernel, num(&done, "/kernel/rx_kernel_drops"), "{done}");
    assert_eq!(total + kernel, offered, "every frame received by a queue or dropped: {done}");
    note(&format!("netns_run: {offered} frames over two queue workers: {each:?}"));
    let _ = std::fs::remove_dir_all(&dir);
}
