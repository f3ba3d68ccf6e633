//! Networked matrix multiplication between two whole NICs (root only; skipped with a message
//! otherwise; under CI a missing tool fails the test).
//!
//! Two network namespaces joined by a veth pair; in each, one `snic serve --port afpacket:veth
//! --rdma-ip ... --host-netdev snic0` process is the whole NIC (as `tests/netns_nic.rs`). The
//! peers' TCP exchange goes between the host netdevs through both NICs' pipelines; the RDMA
//! READs of A and B (and, chained, the WRITE of C) go between the NICs' RDMA engines over the
//! wire ports. Peer 1 (`snic compute mm --serve --once`) runs in namespace 0, peer 2 in
//! namespace 1: both element types, A and B in peer 1's host and device memory, kernel status
//! by polling and by interrupt, a non-square non-power-of-two shape, the chained command, and
//! the C example `examples/c/netmm.c` as peer 2.

mod common;

use common::netns::{VethPair, have, is_root, note, stop, wait_for};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Stdio};
use std::time::Duration;

const HOST: [&str; 2] = ["10.78.0.1", "10.78.0.2"];
const ROCE: [&str; 2] = ["10.78.0.11", "10.78.0.12"];

fn ready() -> bool {
    if !is_root() {
        note("skipping netns_compute: needs root");
        return false;
    }
    let missing: Vec<&str> = ["ip", "cc", "ping"].into_iter().filter(|t| !have(t)).collect();
    if missing.is_empty() {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "CI is set but tools are missing: {missing:?}");
    note(&format!("skipping netns_compute: missing {missing:?}"));
    false
}

/// A NIC process and the file its output goes to; stopped on drop.
struct Nic {
    child: Child,
    out: PathBuf,
}

impl Nic {
    fn start(t: &VethPair, i: usize, dir: &Path) -> Nic {
        let out = dir.join(format!("nic{i}.out"));
        let child = t
            .exec(i)
            .arg(env!("CARGO_BIN_EXE_snic"))
            .args(["serve", "--no-huge", "--workers", "1", "--on-board", "64M", "--socket"])
            .arg(dir.join(format!("nic{i}.sock")))
            .args(["--port", &format!("afpacket:{}", t.veth[i]), "--rdma-ip", ROCE[i]])
            .args(["--host-netdev", "snic0"])
            .env_remove("RUST_LOG")
            .stdout(std::fs::File::create(&out).expect("output file"))
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start snic serve");
        Nic { child, out }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }
}

impl Drop for Nic {
    fn drop(&mut self) {
        stop(&mut self.child, Duration::from_secs(3));
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Peer 1 in namespace 0 on TCP `tcp`, once it listens.
fn peer1(t: &VethPair, dir: &Path, tcp: u16) -> (Child, BufReader<ChildStdout>) {
    let mut c = t
        .exec(0)
        .arg(env!("CARGO_BIN_EXE_snic"))
        .args(["compute", "mm", "--serve", "--once", "--timeout", "60", "--listen"])
        .arg(format!("{}:{tcp}", HOST[0]))
        .arg("--socket")
        .arg(dir.join("nic0.sock"))
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn peer 1");
    let mut out = BufReader::new(c.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("peer 1's first line");
    assert!(line.contains(&format!("RoCE {}", ROCE[0])), "peer 1 said {line:?}");
    (c, out)
}

/// Peer 1's output after its peer and whether it exited 0.
fn finish(mut c: Child, mut out: BufReader<ChildStdout>) -> (bool, String) {
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut out, &mut rest);
    if let Some(mut e) = c.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut rest);
    }
    (c.wait().expect("peer 1 exits").success(), rest)
}

/// (dtype, peer 1's memory, extra flags, M, N, K)
type Case = (&'static str, &'static str, &'static [&'static str], u32, u32, u32);

#[test]
fn networked_mm_between_two_nics() {
    if !ready() {
        return;
    }
    let dir = common::temp_dir("netns-compute");
    let netmm_c = common::rdma_peer::netmm_program(&dir);
    let t = VethPair::create("snicmm", "sm", 120);
    let nics = [Nic::start(&t, 0, &dir), Nic::start(&t, 1, &dir)];
    for (i, nic) in nics.iter().enumerate() {
        wait_for(20, "the NIC to start", || nic.output().contains("snic serve: NIC"));
        t.must(i, &["ip", "addr", "add", &format!("{}/24", HOST[i]), "dev", "snic0"]);
        t.must(i, &["ip", "link", "set", "snic0", "up"]);
    }
    let ping = t.must(1, &["ping", "-c", "1", "-W", "5", HOST[0]]);
    assert!(ping.contains("1 received"), "{ping}");

    // (dtype, peer 1's memory, flags, M, N, K)
    let cases: [Case; 5] = [
        ("f32", "host_mem", &[], 100, 75, 130),
        ("i8", "dev_mem", &["--interrupt"], 96, 128, 64),
        ("f32", "dev_mem", &["--interrupt"], 128, 128, 128),
        ("i8", "host_mem", &["--chunk", "16K"], 150, 33, 257),
        ("f32", "host_mem", &["--chained"], 80, 60, 100),
    ];
    for (i, (dt, mem, extra, m, n, k)) in cases.into_iter().enumerate() {
        let tcp = 28_800 + i as u16;
        let (p1, out) = peer1(&t, &dir, tcp);
        let dims = [m.to_string(), n.to_string(), k.to_string()];
        let p2 = t
            .exec(1)
            .arg(env!("CARGO_BIN_EXE_snic"))
            .args(["compute", "mm", "--json", "--timeout", "60", "--peer"])
            .arg(format!("{}:{tcp}", HOST[0]))
            .arg("--socket")
            .arg(dir.join("nic1.sock"))
            .args(["--dtype", dt, "-l", mem, "--seed", "11"])
            .args(["-m", &dims[0], "-n", &dims[1], "-k", &dims[2]])
            .args(extra)
            .env_remove("RUST_LOG")
            .output()
            .expect("run peer 2");
        let (ok1, out1) = finish(p1, out);
        let what = format!("{m}x{n}x{k} {dt} {mem} {extra:?}");
        assert!(
            p2.status.success() && ok1,
            "{what}: peer 2 {}: {}{}\npeer 1: {out1}",
            p2.status,
            text(&p2.stdout),
            text(&p2.stderr)
        );
        let v: Value = serde_json::from_slice(&p2.stdout).expect("peer 2's JSON");
        assert_eq!(v["verified"], Value::Bool(true), "{what}: {v}");
        assert!(out1.contains(": verified"), "{what}: {out1}");
        if extra.contains(&"--chained") {
            assert!(out1.contains("the C written back verified"), "{what}: {out1}");
        }
        note(&format!(
            "netns_compute {what}: {} READs, fetch {} us, kernel {} us, notify {} us, read-back {} us",
            v["reads"],
            v["fetch_ns"].as_u64().unwrap_or(0) / 1000,
            v["kernel_ns"].as_u64().unwrap_or(0) / 1000,
            v["notify_ns"].as_u64().unwrap_or(0) / 1000,
            v["readback_ns"].as_u64().unwrap_or(0) / 1000
        ));
    }

    // The C example as peer 2.
    let tcp = 28_810;
    let (p1, out) = peer1(&t, &dir, tcp);
    let c = t
        .exec(1)
        .arg(&netmm_c)
        .arg(dir.join("nic1.sock"))
        .args([HOST[0], &tcp.to_string(), ROCE[1], "77", "51", "93", "i8", "dev_mem", "4"])
        .arg("interrupt")
        .output()
        .expect("run netmm_c");
    let (ok1, out1) = finish(p1, out);
    let stdout = text(&c.stdout);
    assert!(c.status.success() && ok1, "netmm_c {}: {stdout}\npeer 1: {out1}", c.status);
    assert!(stdout.lines().any(|l| l == "verified"), "{stdout}");
}
