//! A hitless upgrade of `snic rdma --server` over loopback UDP: a WRITE bandwidth stream runs
//! against a server started with `--handover PATH`; a second server process started with
//! `--takeover PATH` takes over its QP, buffer, UDP socket and control connection mid-run. The
//! old server exits 0 saying it handed over, the new one and the client finish with the data
//! verified, and the new one reports the gap. And the rollback: a new process that refuses
//! (another benchmark) leaves the old one serving to the end as if nothing happened.
//!
//! The server listens on 127.0.0.1, the client takes 127.0.0.2 (see `cli_rdma.rs`). No root
//! needed. Every wait is bounded by the processes' `--timeout`.

mod common;

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// WRITE iterations of 64 KiB: a few seconds in a debug build (ten times more in an optimised
/// one), so the takeover started half a second in comes mid-stream.
const ITERS: &str = if cfg!(debug_assertions) { "4000" } else { "40000" };

fn snic() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_snic"));
    c.env_remove("RUST_LOG").env("RUST_BACKTRACE", "0");
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Ports of test `k`, away from `cli_rdma.rs`'s, perftest's and RoCE's.
fn common_args(k: u16) -> Vec<String> {
    let (udp, tcp) = (24_900 + k, 28_900 + k);
    ["--port", &udp.to_string(), "--tcp-port", &tcp.to_string(), "--timeout", "30"]
        .map(String::from)
        .to_vec()
}

fn spawn(args: &[&str], common: &[String]) -> Child {
    snic()
        .args(args)
        .args(common)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn snic rdma")
}

fn show(name: &str, o: &Output) -> String {
    format!("--- {name}: {}\nstdout:\n{}\nstderr:\n{}", o.status, text(&o.stdout), text(&o.stderr))
}

/// The old server with `--handover`, the client (WRITE, 64 KiB, JSON rows), and after half a
/// second a new server with `--takeover` and `new_args`; returns (old, client, new) outputs.
fn upgrade_run(k: u16, new_args: &[&str]) -> (Output, Output, Output) {
    let dir = common::temp_dir(&format!("rdma-upgrade-{k}"));
    let sock: PathBuf = dir.join("handover.sock");
    let sock = sock.to_str().expect("utf-8 path").to_string();
    let common = common_args(k);
    let old = spawn(&["rdma", "write", "--server", "--json", "--handover", &sock], &common);
    let client = spawn(
        &["rdma", "write", "--client", "127.0.0.1", "-s", "65536", "-n", ITERS, "--json"],
        &common,
    );
    std::thread::sleep(Duration::from_millis(500));
    let mut args = vec!["rdma"];
    args.extend_from_slice(new_args);
    args.extend_from_slice(&["--server", "--json", "--takeover", &sock]);
    let new = spawn(&args, &common);
    let new = new.wait_with_output().expect("new server output");
    let old = old.wait_with_output().expect("old server output");
    let client = client.wait_with_output().expect("client output");
    let _ = std::fs::remove_dir_all(&dir);
    (old, client, new)
}

/// The JSON rows a process printed.
fn rows(o: &Output) -> Vec<Value> {
    text(&o.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("a JSON row"))
        .collect()
}

#[test]
fn write_stream_survives_a_server_takeover() {
    let (old, client, new) = upgrade_run(1, &["write"]);
    let all =
        [show("old server", &old), show("client", &client), show("new server", &new)].join("\n");
    assert!(old.status.success(), "the old server exits 0\n{all}");
    assert!(text(&old.stderr).contains("handed over to the new server"), "{all}");
    assert!(new.status.success(), "the new server exits 0\n{all}");
    assert!(client.status.success(), "the client exits 0\n{all}");
    assert!(text(&client.stderr).contains("data verified: OK"), "{all}");
    assert!(text(&new.stderr).contains("data verified: OK"), "{all}");
    // The client's verdict came from the new server, which checked the buffer it took over.
    let c = rows(&client);
    assert_eq!(c.len(), 1, "{all}");
    assert_eq!(c[0]["verified"], Value::Bool(true), "{all}");
    // The old server printed no row of its own: the size ended at the new one.
    assert!(rows(&old).is_empty(), "the old server handed over mid-size\n{all}");
    // The gap: on stderr and in the new server's row.
    assert!(text(&new.stderr).contains("takeover gap:"), "{all}");
    let n = rows(&new);
    assert_eq!(n.len(), 1, "{all}");
    let gap = n[0]["handover"]["gap_ms"].as_f64().expect("handover.gap_ms");
    assert!(gap > 0.0, "{all}");
    for counter in ["dup_requests", "out_of_seq_dropped", "seq_naks_sent"] {
        assert!(n[0]["handover"][counter].is_u64(), "handover.{counter}\n{all}");
    }
    eprintln!(
        "gap {gap:.1} ms; client retransmits {}, timeouts {}; new server saw {} duplicates",
        c[0]["engine"]["retransmits"], c[0]["engine"]["timeouts"], n[0]["handover"]["dup_requests"]
    );
}

#[test]
fn a_refused_takeover_rolls_back_and_the_old_server_serves_on() {
    // The new process runs another benchmark: it refuses the state.
    let (old, client, new) = upgrade_run(2, &["read"]);
    let all =
        [show("old server", &old), show("client", &client), show("new server", &new)].join("\n");
    assert!(!new.status.success(), "the new server refuses\n{all}");
    assert!(text(&new.stderr).contains("takeover refused"), "{all}");
    assert!(text(&old.stderr).contains("serving on"), "the old server resumed\n{all}");
    assert!(old.status.success(), "the old server exits 0\n{all}");
    assert!(!text(&old.stderr).contains("handed over"), "{all}");
    assert_eq!(rows(&old).len(), 1, "the old server finished the size\n{all}");
    assert!(client.status.success(), "the client exits 0\n{all}");
    assert!(text(&client.stderr).contains("data verified: OK"), "{all}");
    assert_eq!(rows(&old)[0]["verified"], Value::Bool(true), "{all}");
}
