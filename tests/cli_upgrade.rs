//! The hitless upgrade of `snic run` (`--takeover SOCK`) on UDP tunnel ports, which need no
//! root: a new process takes a running one's sockets over while frames keep coming, and every
//! frame sent is received by one of the two (none lost, none twice); a takeover the new process
//! refuses leaves the old one running. (Under TCP and RDMA load through the vSwitch between
//! namespaces: `tests/netns_vswitch.rs`.)

mod common;

use serde_json::Value;
use std::net::UdpSocket;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const SNIC: &str = env!("CARGO_BIN_EXE_snic");

/// A child process stopped (SIGTERM, then SIGKILL) on drop.
struct Proc(Option<Child>);

impl Proc {
    /// Wait for it to exit (at most `secs`) and take its output.
    fn output(&mut self, secs: u64) -> Output {
        let mut c = self.0.take().expect("running");
        let t0 = Instant::now();
        while c.try_wait().expect("wait").is_none() {
            if t0.elapsed() > Duration::from_secs(secs) {
                common::netns::stop(&mut c, Duration::from_secs(2));
                panic!("snic did not exit within {secs} s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        c.wait_with_output().expect("output")
    }

    fn running(&mut self) -> bool {
        self.0.as_mut().is_some_and(|c| c.try_wait().expect("wait").is_none())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            common::netns::stop(c, Duration::from_secs(5));
        }
    }
}

/// `snic run` from a UDP tunnel port (bound to `local`, from `peer`) to a null port, with a
/// control socket, JSON counters at the end, and `extra` arguments.
fn snic_run(local: &str, peer: &str, sock: &Path, extra: &[&str]) -> Proc {
    let port = format!("udp:{local},{peer}");
    let mut args = vec!["run", "--port", &port, "--port", "null", "--json", "--duration", "60"];
    let s = sock.to_str().expect("UTF-8 path");
    args.extend(["--control", s]);
    args.extend_from_slice(extra);
    let child = Command::new(SNIC)
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn snic");
    Proc(Some(child))
}

/// The counters document from the control socket, once it has port counters.
fn stats(sock: &Path) -> Option<Value> {
    let out = Command::new(SNIC)
        .args(["stats", "--control", sock.to_str().expect("UTF-8")])
        .output()
        .ok()?;
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v["ports"][0]["rx_packets"].is_u64().then_some(v)
}

/// Poll the control socket (at most 30 s) until `f` accepts its document.
fn wait_stats(sock: &Path, what: &str, mut f: impl FnMut(&Value) -> bool) -> Value {
    let t0 = Instant::now();
    loop {
        if let Some(v) = stats(sock)
            && f(&v)
        {
            return v;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no {what} within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A 64-byte Ethernet/IPv4/UDP frame carrying `seq`.
fn frame(seq: u64) -> Vec<u8> {
    let mut f = Vec::new();
    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 9, 0, 1], [10, 9, 0, 2], 64)
        .udp(4000, 4001)
        .write(&mut f, &seq.to_be_bytes())
        .expect("frame");
    f
}

#[test]
fn takeover_of_udp_ports_loses_and_repeats_no_frame() {
    let dir = common::temp_dir("cli-upgrade");
    let sock = dir.join("ctl.sock");
    // The peer: a socket snic's port is connected to, sending one frame every 200 us.
    let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
    let local = {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap()
    };
    let peer_addr = peer.local_addr().unwrap().to_string();
    let local = local.to_string();
    let mut old = snic_run(&local, &peer_addr, &sock, &[]);
    wait_stats(&sock, "first counters", |_| true);
    peer.connect(&local).unwrap();
    let (stop, sent) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let sender = {
        let (stop, sent) = (Arc::clone(&stop), Arc::clone(&sent));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let n = sent.load(Ordering::Relaxed);
                if peer.send(&frame(n)).is_ok() {
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    wait_stats(&sock, "received frames", |v| v["ports"][0]["rx_packets"].as_u64() > Some(100));

    // Refused: another port list, other stages. The old process carries on each time, and
    // says it rolled back.
    let port = format!("udp:{local},{peer_addr}");
    for (extra, why) in [
        (["--port", "null"], "start the new process with the same ports"),
        (["--stage", "parse"], "start the new process with the same stages"),
    ] {
        let out = Command::new(SNIC)
            .args(["run", "--port", &port, "--port", "null"])
            .args(extra)
            .arg("--control")
            .arg(dir.join("other.sock"))
            .arg("--takeover")
            .arg(&sock)
            .output()
            .expect("run snic");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "a takeover with {extra:?} was refused: {err}");
        assert!(err.contains(why), "{err}");
        assert!(old.running(), "the old process carries on after a refused takeover");
    }
    let before = wait_stats(&sock, "counters after the rollback", |v| v.get("takeover").is_none());
    let rx_before = before["ports"][0]["rx_packets"].as_u64().unwrap();
    wait_stats(&sock, "frames after the rollback", |v| {
        v["ports"][0]["rx_packets"].as_u64() > Some(rx_before + 50)
    });

    // The takeover.
    let mut new = snic_run(&local, &peer_addr, &sock, &["--takeover", sock.to_str().unwrap()]);
    let old_out = old.output(30);
    let old_err = String::from_utf8_lossy(&old_out.stderr);
    assert!(old_out.status.success(), "the old process exits cleanly: {old_err}");
    assert!(old_err.contains("handed over to the new process"), "{old_err}");
    let old_doc: Value = serde_json::from_slice(&old_out.stdout).expect("the old one's JSON");
    let doc = wait_stats(&sock, "the new process's takeover report", |v| {
        v["takeover"].is_object() && v["ports"][0]["rx_packets"].as_u64() > Some(50)
    });
    assert_eq!(doc["takeover"]["ports_adopted"], 1, "{}", doc["takeover"]);
    assert_eq!(doc["takeover"]["ports_reopened"], 1, "the null port: {}", doc["takeover"]);
    assert!(doc["takeover"]["gap_ms"].as_f64().is_some(), "{}", doc["takeover"]);
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    let total = sent.load(Ordering::Relaxed);
    let old_rx = old_doc["ports"][0]["rx_packets"].as_u64().unwrap();
    // Every frame sent is received once: by the old process before the takeover, by the new
    // one after it (what came during the gap waited in the socket).
    let new_doc = wait_stats(&sock, "the last frames", |v| {
        v["ports"][0]["rx_packets"].as_u64().unwrap_or(0) + old_rx >= total
    });
    let new_rx = new_doc["ports"][0]["rx_packets"].as_u64().unwrap();
    assert_eq!(old_rx + new_rx, total, "old {old_rx} + new {new_rx} frames, {total} sent");
    assert_eq!(new_doc["drops_total"], 0, "{}", new_doc["drops"]);
    assert_eq!(old_doc["drops_total"], 0, "{}", old_doc["drops"]);
    eprintln!(
        "takeover of a UDP port: old {old_rx} + new {new_rx} = {total} frames sent; {}",
        new_doc["takeover"]
    );
    let _ = new.running();
}

/// Ports that cannot be taken over are refused before the running process is asked to pause
/// (no control socket needs to answer): a generator would replay, a pcap port start its file
/// again.
#[test]
fn takeover_of_replaying_ports_is_refused_up_front() {
    let dir = common::temp_dir("cli-upgrade-refused");
    let nobody = dir.join("nobody.sock");
    for port in ["gen:10", "pcap:in.pcap"] {
        let out = Command::new(SNIC)
            .args(["run", "--port", port, "--port", "null", "--takeover"])
            .arg(&nobody)
            .output()
            .expect("run snic");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{port}: {err}");
        assert!(err.contains("cannot be taken over"), "{port}: {err}");
    }
    // Stages whose run-time state would not be carried (refused before anything is loaded:
    // the xdp object need not exist).
    let p4 = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/p4/l3_router.p4");
    for (stage, why) in [
        (format!("p4:{p4}"), "a run with a p4 stage cannot be taken over"),
        ("xdp:/nonexistent/prog.o".to_string(), "a run with an xdp stage cannot be taken over"),
    ] {
        let out = Command::new(SNIC)
            .args(["run", "--port", "null", "--stage", &stage, "--takeover"])
            .arg(&nobody)
            .output()
            .expect("run snic");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stage}: {err}");
        assert!(err.contains(why), "{stage}: {err}");
    }
}
