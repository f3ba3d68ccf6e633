//! `snic kernel list|run|bench` as a user runs them: the binary with its private in-process
//! device, and against a `snic serve` started by the test (`--socket`).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

const SNIC: &str = env!("CARGO_BIN_EXE_snic");

fn snic(args: &[&str]) -> Output {
    Command::new(SNIC).args(args).output().expect("run snic")
}

fn ok(args: &[&str]) -> String {
    let o = snic(args);
    assert!(
        o.status.success(),
        "snic {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("utf-8 output")
}

fn json(args: &[&str]) -> Value {
    let out = ok(args);
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn list_names_every_builtin_kernel() {
    let text = ok(&["kernel", "list"]);
    for name in ["copy", "reduce", "gemm", "vadd", "vscale", "gather", "crc32c", "lz4_compress"] {
        assert!(text.lines().any(|l| l.contains(name)), "{name} missing:\n{text}");
    }
    let v = json(&["kernel", "list", "--json", "--compute-workers", "2"]);
    assert_eq!(v["compute_workers"], 2);
    let gemm = v["kernels"].as_array().unwrap().iter().find(|k| k["name"] == "gemm").cloned();
    let gemm = gemm.expect("gemm listed");
    assert_eq!(gemm["id"], 2);
    assert!(gemm["usage"].as_str().unwrap().contains("s0 M"), "{gemm}");
}

#[test]
fn run_verifies_results_in_both_memories_and_modes() {
    let text =
        ok(&["kernel", "run", "gemm", "-m", "48", "-n", "40", "-k", "32", "--layout", "rcr"]);
    assert!(text.contains("gemm 48x40x32 f32 rcr") && text.contains("verified"), "{text}");
    let cases: &[&[&str]] = &[
        &["gemm", "-m", "33", "-n", "17", "-k", "65", "--dtype", "i8", "-l", "dev_mem"],
        &["crc32c", "--size", "64K", "--interrupt"],
        &["lz4", "--size", "64K"],
        &["reduce", "--op", "max", "--dtype", "i64", "--size", "16K"],
        &["reduce", "--op", "sum", "--dtype", "f32", "--size", "16K", "-l", "dev_mem"],
        &["vadd", "--dtype", "u32", "--size", "16K"],
        &["vscale", "--dtype", "f64", "--size", "16K", "--interrupt"],
        &["gather", "--size", "32K", "--blocks", "20"],
        &["copy", "--size", "100000", "-l", "dev_mem"],
    ];
    for case in cases {
        let mut args = vec!["kernel", "run", "--json"];
        args.extend_from_slice(case);
        let v = json(&args);
        assert_eq!(v["verified"], true, "{case:?}: {v}");
        assert_eq!(v["status"], "ok", "{case:?}: {v}");
        assert!(v["time_ns"].as_u64().unwrap() >= v["busy_ns"].as_u64().unwrap(), "{v}");
    }
}

#[test]
fn bad_requests_fail_with_a_reason() {
    for (args, want) in [
        (&["kernel", "run", "nosuch"][..], "no CLI plan"),
        (&["kernel", "run", "gemm", "-m", "0"][..], "must be 1"),
        (&["kernel", "run", "gemm", "--layout", "rx"][..], "layout"),
        (&["kernel", "run", "reduce", "--op", "avg"][..], "reduce op"),
        (&["kernel", "run", "vadd", "--dtype", "f16"][..], "dtype"),
    ] {
        let o = snic(args);
        assert!(!o.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn bench_reports_both_paths_and_their_ratio() {
    let v =
        json(&["kernel", "bench", "gemm", "-m", "32", "-n", "32", "-k", "32", "-i", "3", "--json"]);
    assert_eq!(v["iterations"], 3);
    for key in ["offload_ns", "direct_ns", "offload_busy_ns"] {
        assert!(v[key].as_u64().unwrap() > 0, "{key}: {v}");
    }
    let ratio = v["ratio"].as_f64().unwrap();
    let want = v["direct_ns"].as_f64().unwrap() / v["offload_ns"].as_f64().unwrap();
    assert!((ratio - want).abs() < 0.01 * want + 1e-3, "{v}");
    let text = ok(&["kernel", "bench", "crc32c", "--size", "16K", "-i", "2"]);
    assert!(
        text.contains("offload") && text.contains("direct") && text.contains("ratio"),
        "{text}"
    );
}

/// A `snic serve` started by the test; killed on drop.
struct Served {
    child: Child,
    dir: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn socket_names_a_running_server() {
    let dir = std::env::temp_dir().join(format!("snic-cli-kernel-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("snic.sock");
    let mut child = Command::new(SNIC)
        .args(["serve", "--no-huge", "--on-board", "16M", "--compute-workers", "3", "--socket"])
        .arg(&socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn snic serve");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let served = Served { child, dir };
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.contains("listening") && line.contains("compute workers 3"), "{line:?}");
    let sock = socket.to_str().unwrap();
    let v = json(&["kernel", "list", "--json", "--socket", sock]);
    assert_eq!(v["compute_workers"], 3);
    let v = json(&["kernel", "run", "crc32c", "--size", "4K", "--json", "--socket", sock]);
    assert_eq!(v["verified"], true, "{v}");
    drop(served);
}
