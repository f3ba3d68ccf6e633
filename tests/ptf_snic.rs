//! PTF against snic's P4Runtime server, as BMv2 users test their P4 programs (root only).
//!
//! In a fresh network namespace (torn down on every exit path, with everything in it):
//! three veth pairs from `scripts/veth-setup.sh` (veth0<->veth1, veth2<->veth3,
//! veth4<->veth5), one `snic run --port afpacket:veth1 --port afpacket:veth3 --port
//! afpacket:veth5 --stage p4 --p4runtime 127.0.0.1:9559 --workers 2` with no program, and
//! PTF (from the venv of `scripts/ptf-venv.sh`) on the other ends: `ptf --test-dir tests/ptf
//! --interface 0@veth0 --interface 1@veth2 --interface 2@veth4`, once per program, each test
//! pushing its program over P4Runtime (so PTF port N is P4 port N). The P4Info comes from
//! `snic p4 info PROG.p4 --p4info OUT`.
//!
//! Checked: every test of `tests/ptf/l3_router.py`, `tests/ptf/reconic_classifier.py`,
//! `tests/ptf/cpu_port.py` (packet-in/out, program `tests/ptf/p4/cpu_port.p4`) and
//! `tests/ptf/acl.py` (ternary/range/optional keys and priorities, `tests/ptf/p4/acl.p4`) and
//! `tests/ptf/learn.py` (digests, `tests/ptf/p4/learn.p4`) ran, and every one passed but the known failures listed in [`KNOWN_FAILURES`] (reported, and
//! reported again when one starts passing).
//!
//! Not root, the venv missing, or tools missing: the test prints why and passes, unless the
//! `CI` environment variable is set: then it fails. A snic without `--p4runtime` is skipped
//! with a message.

mod common;

use common::netns::{have, is_root, note, run, stop};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The P4Runtime port inside the namespace: the namespace is new, so it is free.
const GRPC_PORT: u16 = 9559;
/// Veth pairs: P4 ports 0, 1, 2.
const PAIRS: usize = 3;
/// Upper bound of one ptf run (the tests take a few seconds each).
const PTF_SECS: u32 = 240;
/// snic's own bound, in seconds, whatever happens to this test process.
const SNIC_SECS: u32 = 600;

/// The PTF modules run (each named after its program), the program, and the tests each must
/// run.
const PROGRAMS: &[(&str, &str, &[&str])] = &[
    (
        "l3_router",
        "examples/p4/l3_router.p4",
        &[
            "Forward",
            "LongestPrefix",
            "Ttl",
            "MissDrop",
            "BadPackets",
            "DefaultAction",
            "ModifyDelete",
            "PaddedValues",
            "ReadBack",
            "WriteErrors",
            "GetPipeline",
            "VerifyOnly",
            "WrongDevice",
            "BatchPartial",
            "ValueWidths",
            "DefaultReset",
            "ReadFilters",
            "PrimaryChange",
            "LpmAndActionErrors",
            "ManyRoutes",
            "ReconcileAndCapabilities",
            "MismatchedP4Info",
        ],
    ),
    (
        "reconic_classifier",
        "examples/p4/reconic_classifier.p4",
        &["Rdma", "VlanTags", "Other", "StfPackets", "StfVlanPackets"],
    ),
    (
        "cpu_port",
        "tests/ptf/p4/cpu_port.p4",
        &["PacketOut", "PacketIn", "PuntTable", "BackupPacketIO", "BadPacketOut"],
    ),
    (
        "acl",
        "tests/ptf/p4/acl.p4",
        &["TernaryPriority", "RangeMatch", "OptionalMatch", "MatchErrors", "Counters", "Multicast"],
    ),
    ("learn", "tests/ptf/p4/learn.p4", &["Learn", "NotConfigured", "Batched"]),
];

/// Tests known to fail, and why. They still run; their failure does not fail this test.
const KNOWN_FAILURES: &[(&str, &str)] = &[];

fn venv() -> PathBuf {
    std::env::var_os("SNIC_PTF_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/snic-venv/ptf"))
}

/// Skip (or, under CI, fail) with `why`.
fn skip(why: &str) -> bool {
    assert!(std::env::var_os("CI").is_none(), "ptf_snic: CI is set but {why}");
    note(&format!("SKIP ptf_snic: {why} (set CI=1 to make this a failure)"));
    false
}

fn ready() -> bool {
    if !is_root() {
        return skip("it needs root (network namespaces, veths, AF_PACKET)");
    }
    let missing: Vec<&str> = ["ip", "timeout", "bash"].into_iter().filter(|t| !have(t)).collect();
    if !missing.is_empty() {
        return skip(&format!("tools are missing: {missing:?}"));
    }
    let v = venv();
    let ok = Command::new(v.join("bin/python"))
        .args(["-c", "import ptf, scapy, grpc; from p4.v1 import p4runtime_pb2_grpc"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok || !v.join("bin/ptf").is_file() {
        return skip(&format!(
            "the PTF venv {} is missing or incomplete (run scripts/ptf-venv.sh)",
            v.display()
        ));
    }
    true
}

/// A network namespace with the veth pairs in it; Drop deletes it and all its links.
struct Netns {
    name: String,
}

impl Netns {
    fn create() -> Netns {
        let ns = Netns { name: format!("snicptf{}", std::process::id()) };
        let (ok, _, err) = run(10, &["ip", "netns", "add", &ns.name]);
        assert!(ok, "ip netns add {}: {err}", ns.name);
        ns.must(&["ip", "link", "set", "lo", "up"]);
        let script = common::root().join("scripts/veth-setup.sh");
        let pairs = PAIRS.to_string();
        ns.must(&["sh", script.to_str().expect("utf-8 path"), "up", &pairs]);
        ns
    }

    /// `args` in the namespace, bounded to 20 s; panics on failure.
    fn must(&self, args: &[&str]) -> String {
        let mut v = vec!["ip", "netns", "exec", &self.name];
        v.extend_from_slice(args);
        let (ok, out, err) = run(20, &v);
        assert!(ok, "failed: {v:?}: {err}{out}");
        out
    }

    /// A command in the namespace, bounded by `timeout` to `secs`.
    fn command(&self, secs: u32) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, "timeout", "--foreground", "-k", "5"]);
        c.arg(secs.to_string());
        c
    }

    /// Whether something accepts TCP connections on 127.0.0.1:`port` in the namespace.
    fn tcp_open(&self, port: u16) -> bool {
        let probe = format!("exec 3<>/dev/tcp/127.0.0.1/{port}");
        run(3, &["ip", "netns", "exec", &self.name, "bash", "-c", &probe]).0
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(10, &["ip", "netns", "del", &self.name]);
    }
}

/// The snic process; Drop stops it (SIGTERM, then SIGKILL), whatever the exit path.
struct Snic {
    child: Child,
    out: PathBuf,
}

impl Snic {
    fn start(ns: &Netns, dir: &Path) -> Snic {
        let out = dir.join("snic.out");
        let mut cmd = ns.command(SNIC_SECS + 10);
        cmd.arg(env!("CARGO_BIN_EXE_snic")).arg("run");
        for i in 0..PAIRS {
            cmd.args(["--port", &format!("afpacket:veth{}", 2 * i + 1)]);
        }
        let child = cmd
            .args(["--stage", "p4", "--p4runtime", &format!("127.0.0.1:{GRPC_PORT}")])
            // Two workers: every write must reach both switches, reads sum their counters.
            .args(["--workers", "2"])
            .args(["--duration", &SNIC_SECS.to_string()])
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).expect("snic output file"))
            .stderr(std::fs::File::create(dir.join("snic.err")).expect("snic error file"))
            .spawn()
            .expect("start snic run");
        Snic { child, out }
    }

    fn output(&self) -> String {
        let err = self.out.with_file_name("snic.err");
        format!(
            "--- snic stdout\n{}\n--- snic stderr\n{}",
            std::fs::read_to_string(&self.out).unwrap_or_default(),
            std::fs::read_to_string(err).unwrap_or_default()
        )
    }

    /// Wait up to `secs` for the gRPC port; panics when snic exits or the time runs out.
    fn wait_grpc(&mut self, ns: &Netns, secs: u64) {
        let t0 = Instant::now();
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("snic exited ({st}) before its P4Runtime port opened\n{}", self.output());
            }
            if ns.tcp_open(GRPC_PORT) {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(secs),
                "the P4Runtime port did not open in {secs} s\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Snic {
    fn drop(&mut self) {
        stop(&mut self.child, Duration::from_secs(5));
    }
}

/// What became of each test of a ptf run (unittest's verbose output): "ok", "FAIL",
/// "ERROR" or "skipped". A test with a failing subtest is "FAIL".
fn outcomes(module: &str, text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut current: Option<String> = None;
    let prefix = format!("{module}.");
    for line in text.lines() {
        // `mod.Test ... ok` (the verdict may come on a later line when something printed).
        let padded = format!("{line} ");
        if let Some((name, rest)) = padded.split_once(" ... ") {
            if let Some(test) = name.strip_prefix(&prefix)
                && !test.contains(' ')
            {
                current = Some(test.to_owned());
                out.insert(test.to_owned(), String::new());
            }
            if let Some(t) = &current {
                verdict(&mut out, t, rest);
            }
            continue;
        }
        if line.starts_with("====") || line.starts_with("----") {
            current = None;
        }
        if let Some(t) = &current {
            verdict(&mut out, t, line);
        }
        // The summary: `FAIL: mod.Test [subtest]` / `ERROR: mod.Test (params)`.
        for kind in ["FAIL", "ERROR"] {
            if let Some(rest) = line.strip_prefix(&format!("{kind}: {prefix}")) {
                let test = rest.split([' ', '(']).next().unwrap_or(rest);
                out.insert(test.to_owned(), kind.to_owned());
            }
        }
    }
    out
}

fn verdict(out: &mut BTreeMap<String, String>, test: &str, text: &str) {
    let text = text.trim();
    let v = if text == "ok" {
        "ok"
    } else if text.starts_with("skipped") {
        "skipped"
    } else if text == "FAIL" {
        "FAIL"
    } else if text == "ERROR" {
        "ERROR"
    } else {
        return;
    };
    let e = out.entry(test.to_owned()).or_default();
    // A failure (of a subtest) is not undone by a later `ok`.
    if e.is_empty() || e == "ok" {
        *e = v.to_owned();
    }
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[test]
fn ptf_against_snic_p4runtime() {
    if !ready() {
        return;
    }
    let snic = env!("CARGO_BIN_EXE_snic");
    let help = Command::new(snic).args(["run", "--help"]).output().expect("snic run --help");
    if !String::from_utf8_lossy(&help.stdout).contains("--p4runtime") {
        // Not a missing tool: this snic has no P4Runtime server to test.
        note("SKIP ptf_snic: this snic has no `run --p4runtime` (no P4Runtime server)");
        return;
    }
    let root = common::root();
    let dir = common::temp_dir("ptf");

    // The P4Info of each program, from snic itself.
    for (prog, path, _) in PROGRAMS {
        let src = root.join(path);
        let info = dir.join(format!("{prog}.p4info.txt"));
        let o = Command::new(snic)
            .args(["p4", "info"])
            .arg(&src)
            .arg("--p4info")
            .arg(&info)
            .output()
            .expect("snic p4 info");
        assert!(
            o.status.success() && info.is_file(),
            "snic p4 info {} --p4info failed ({}):\n{}{}",
            src.display(),
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }

    let ns = Netns::create();
    let mut nic = Snic::start(&ns, &dir);
    nic.wait_grpc(&ns, 30);

    let venv = venv();
    let mut failures = Vec::new();
    let mut summary = Vec::new();
    for (prog, path, tests) in PROGRAMS {
        let params = format!(
            "grpcaddr='127.0.0.1:{GRPC_PORT}';device_id=1;p4info='{}';program='{}'",
            dir.join(format!("{prog}.p4info.txt")).display(),
            root.join(path).display()
        );
        let mut cmd = ns.command(PTF_SECS);
        cmd.arg(venv.join("bin/ptf")).arg("--test-dir").arg(root.join("tests/ptf"));
        for i in 0..PAIRS {
            cmd.args(["--interface", &format!("{i}@veth{}", 2 * i)]);
        }
        let log = dir.join(format!("ptf-{prog}.log"));
        let t0 = Instant::now();
        let o = cmd
            .args(["--test-params", &params])
            .arg("--log-file")
            .arg(&log)
            .args(["--default-timeout", "2", "--default-negative-timeout", "0.3"])
            .args(["--test-case-timeout", "60", prog])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .output()
            .expect("run ptf");
        let stdout = String::from_utf8_lossy(&o.stdout);
        let stderr = String::from_utf8_lossy(&o.stderr);
        let text = format!("{stderr}\n{stdout}");
        assert_ne!(
            o.status.code(),
            Some(124),
            "ptf on {prog} ran out of its {PTF_SECS} s:\n{}",
            tail(&text, 60)
        );
        let got = outcomes(prog, &text);
        let mut passed = 0;
        for t in *tests {
            let name = format!("{prog}.{t}");
            let known = KNOWN_FAILURES.iter().find(|(k, _)| *k == name);
            match (got.get(*t).map(String::as_str), known) {
                (Some("ok"), None) => passed += 1,
                (Some("ok"), Some(_)) => {
                    passed += 1;
                    note(&format!(
                        "ptf_snic: {name} passes now: take it off KNOWN_FAILURES in {}",
                        file!()
                    ));
                }
                (Some(v @ ("FAIL" | "ERROR")), Some((_, why))) => {
                    note(&format!("ptf_snic: {name}: {v} (known: {why})"));
                }
                (v, _) => failures.push(format!("{name}: {}", v.unwrap_or("did not run"))),
            }
        }
        let unexpected: Vec<&String> =
            got.keys().filter(|k| !tests.contains(&k.as_str())).collect();
        assert!(
            unexpected.is_empty(),
            "ptf ran tests this file does not know: {unexpected:?} (add them to PROGRAMS)"
        );
        summary.push(format!(
            "{prog} {passed}/{} passed in {:.1} s (ptf {})",
            tests.len(),
            t0.elapsed().as_secs_f64(),
            o.status
        ));
        if failures.iter().any(|f| f.starts_with(prog)) {
            note(&format!("--- ptf output for {prog}:\n{}", tail(&text, 200)));
        }
    }
    assert!(
        matches!(nic.child.try_wait(), Ok(None)),
        "snic exited during the tests\n{}",
        nic.output()
    );
    note(&format!("ptf_snic: {}", summary.join("; ")));
    assert!(failures.is_empty(), "PTF tests failed: {failures:#?}\n{}", nic.output());
    drop(nic);
    drop(ns);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ptf_output_is_parsed() {
    let text = "\
l3_router.Forward ... ok
l3_router.Ttl ... WARNING: something printed
ok
l3_router.MissDrop ... FAIL
l3_router.ReadBack ... skipped 'no'
l3_router.Sub ...
  l3_router.Sub [a] ... FAIL
l3_router.Err ... ERROR
======================================================================
FAIL: l3_router.Sub [a]
----------------------------------------------------------------------
ok
ERROR: l3_router.Late (x=1)
";
    let got = outcomes("l3_router", text);
    let want: BTreeMap<String, String> = [
        ("Forward", "ok"),
        ("Ttl", "ok"),
        ("MissDrop", "FAIL"),
        ("ReadBack", "skipped"),
        ("Sub", "FAIL"),
        ("Err", "ERROR"),
        ("Late", "ERROR"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_owned(), b.to_owned()))
    .collect();
    assert_eq!(got, want);
}
