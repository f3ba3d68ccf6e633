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
//! As root, a missing tool (`ip`, `ping`, `timeout`, `kill`) fails the test when `CI` is set
//! and skips it with a message otherwise.

mod common;

use common::netns::{have, is_root, must, note, run, stop};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Namespaces, links, snic and its log directory; all removed on drop.
struct Guard {
    ns: [String; 2],
    outer: [String; 2],
    inner: [String; 2],
    addr: [&'static str; 2],
    snic: Option<Child>,
    dir: std::path::PathBuf,
}

impl Guard {
    fn create() -> Guard {
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("snic-fpx-{pid}"));
        let _ = std::fs::create_dir_all(&dir);
        let g = Guard {
            ns: [format!("fpxrun{pid}a"), format!("fpxrun{pid}b")],
            outer: [format!("fpxro{pid}a"), format!("fpxro{pid}b")]
                .map(|s| s.chars().take(15).collect()),
            inner: [format!("fpxri{pid}a"), format!("fpxri{pid}b")]
                .map(|s| s.chars().take(15).collect()),
            addr: ["10.199.89.1", "10.199.89.2"],
            snic: None,
            dir,
        };
        for i in 0..2 {
            must(10, &["ip", "netns", "add", &g.ns[i]]);
            must(
                10,
                &["ip", "link", "add", &g.outer[i], "type", "veth", "peer", "name", &g.inner[i]],
            );
            std::fs::write(format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", g.outer[i]), "1")
                .expect("disable IPv6 on the outer veth");
            must(10, &["ip", "link", "set", &g.inner[i], "netns", &g.ns[i]]);
            must(10, &["ip", "link", "set", &g.outer[i], "up"]);
            let cidr = format!("{}/24", g.addr[i]);
            g.must_in(i, &["ip", "addr", "add", &cidr, "dev", &g.inner[i]]);
            g.must_in(i, &["ip", "link", "set", &g.inner[i], "up"]);
            g.must_in(i, &["ip", "link", "set", "lo", "up"]);
        }
        g
    }

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

    fn log(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
        format!(
            "--- snic stdout ---\n{}--- snic stderr ---\n{}",
            read("snic.out"),
            read("snic.err")
        )
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = &mut self.snic {
            stop(c, Duration::from_secs(3));
        }
        for i in 0..2 {
            let _ = run(10, &["ip", "link", "del", &self.outer[i]]);
            let _ = run(10, &["ip", "netns", "del", &self.ns[i]]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn snic_run_forwards_between_afxdp_ports() {
    if !is_root() {
        note("skipping snic_run_forwards_between_afxdp_ports: needs root");
        return;
    }
    let missing: Vec<&str> =
        ["ip", "ping", "timeout", "kill"].into_iter().filter(|t| !have(t)).collect();
    if !missing.is_empty() {
        assert!(std::env::var_os("CI").is_none(), "CI is set but tools are missing: {missing:?}");
        note(&format!("skipping snic_run_forwards_between_afxdp_ports: missing {missing:?}"));
        return;
    }
    let mut g = Guard::create();
    let snic = env!("CARGO_BIN_EXE_snic");
    let sock = g.dir.join("ctl.sock").to_str().expect("UTF-8 temp dir").to_string();
    let a = format!("afxdp:{}", g.outer[0]);
    let b = format!("afxdp:{}", g.outer[1]);
    let out = std::fs::File::create(g.dir.join("snic.out")).expect("log");
    let err = std::fs::File::create(g.dir.join("snic.err")).expect("log");
    g.snic = Some(
        Command::new("timeout")
            .args(["-k", "2", "60", snic, "run", "--port", &a, "--port", &b, "--control", &sock])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("start snic"),
    );

    // Ready when `snic stats` shows both ports with counters.
    let t0 = Instant::now();
    loop {
        if let Some(Ok(Some(st))) = g.snic.as_mut().map(Child::try_wait) {
            panic!("snic run exited early ({st})\n{}", g.log());
        }
        let (ok, out, _) = run(5, &[snic, "stats", "--control", &sock]);
        if ok
            && let Ok(v) = serde_json::from_str::<serde_json::Value>(out.trim())
            && v.get("status").is_none()
            && v["ports"].as_array().is_some_and(|p| p.len() == 2)
        {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "snic not ready\n{}", g.log());
        thread::sleep(Duration::from_millis(50));
    }
    for o in &g.outer {
        let link = must(10, &["ip", "-d", "link", "show", "dev", o]);
        assert!(link.contains("prog/xdp"), "no XDP program on {o}:\n{link}");
    }

    let ping = g.in_ns(0, &["ping", "-c", "5", "-i", "0.2", "-W", "2", g.addr[1]]);
    let (ok, out, err) = run(15, &ping);
    assert!(ok, "ping through snic's AF_XDP ports failed:\n{out}{err}\n{}", g.log());
    assert!(out.contains("5 received"), "{out}");

    let (ok, stats, _) = run(5, &[snic, "stats", "--control", &sock]);
    assert!(ok, "snic stats failed");
    let v: serde_json::Value = serde_json::from_str(stats.trim()).expect("stats JSON");
    for p in v["ports"].as_array().expect("ports") {
        // 5 echo requests or replies and at least one ARP exchange each way.
        let rx = p["rx_packets"].as_u64().unwrap_or(0);
        assert!(rx >= 6, "port counters did not move: {p}");
    }

    if let Some(c) = &mut g.snic {
        stop(c, Duration::from_secs(3));
    }
    for o in &g.outer {
        let link = must(10, &["ip", "-d", "link", "show", "dev", o]);
        assert!(!link.contains("xdp"), "XDP program left on {o} after snic exited:\n{link}");
    }
    note(&format!("snic run with AF_XDP ports: ping crossed; stats {}", stats.trim()));
}
