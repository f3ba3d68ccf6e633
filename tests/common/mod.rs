//! Helpers shared by the interop tests: finding external tools (python3 + scapy, tshark), temp
//! directories, running the scapy corpus script, and reading pcap files.
//!
//! A missing tool makes a test print a skip message and return, unless the environment variable
//! `CI` is set: then the test fails, so CI can never pass by skipping.

#![allow(dead_code, reason = "each test binary uses a different subset of these helpers")]

pub mod netns;
pub mod rdma_peer;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Root of the workspace (where `scripts/` lives).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// True when `cmd args...` runs and exits with status 0.
fn runs_ok(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd).args(args).output().map(|o| o.status.success()).unwrap_or(false)
}

/// Decide what to do about a missing tool: panic under CI, else print a skip message.
/// Returns true when the tool is present.
pub fn need(present: bool, what: &str, test: &str) -> bool {
    if present {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {what} is required when CI is set, but it is missing");
    }
    // Written straight to the process's stderr, not through `eprintln!`: libtest captures
    // `eprintln!` output of passing tests, so a plain `cargo test` would never show the skip.
    let _ = writeln!(
        std::io::stderr(),
        "SKIP {test}: {what} is not installed (set CI=1 to make this a failure)"
    );
    false
}

/// python3 with scapy importable.
pub fn have_scapy(test: &str) -> bool {
    need(
        runs_ok("python3", &["-c", "import scapy.all, scapy.contrib.roce"]),
        "python3 with scapy",
        test,
    )
}

/// tshark.
pub fn have_tshark(test: &str) -> bool {
    need(runs_ok("tshark", &["--version"]), "tshark", test)
}

/// A fresh, empty directory under the system temp dir, unique to this process and `name`.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("snic-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// Run a command, panic with its output if it fails, return its output.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{cmd:?} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// Build the scapy corpus into `dir`: returns the pcap path and the parsed expectations.
pub fn scapy_corpus(dir: &Path) -> (PathBuf, serde_json::Value) {
    let pcap = dir.join("corpus.pcap");
    let json = dir.join("corpus.json");
    run_ok(
        Command::new("python3").arg(root().join("scripts/scapy_corpus.py")).arg(&pcap).arg(&json),
    );
    let expect: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("read corpus json"))
            .expect("corpus json parses");
    (pcap, expect)
}

/// Every frame of a classic pcap file, in order.
pub fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let file = std::fs::File::open(path).expect("open pcap");
    let mut reader = pcap_file::pcap::PcapReader::new(file).expect("pcap header");
    let mut frames = Vec::new();
    while let Some(pkt) = reader.next_packet() {
        frames.push(pkt.expect("pcap record").data.into_owned());
    }
    frames
}

/// Write frames to a classic pcap file (Ethernet link type).
pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    use pcap_file::pcap::{PcapPacket, PcapWriter};
    let file = std::fs::File::create(path).expect("create pcap");
    let mut w = PcapWriter::new(file).expect("pcap writer");
    for (i, f) in frames.iter().enumerate() {
        let len = u32::try_from(f.len()).expect("frame fits u32");
        let ts = std::time::Duration::from_millis(1_700_000_000_000 + i as u64);
        w.write_packet(&PcapPacket::new(ts, len, f)).expect("write packet");
    }
}

/// The protocols tshark tries as heuristics on InfiniBand payloads (RPC-over-RDMA, SMB Direct,
/// NVMe-oF, ...): they guess an upper protocol from the payload bytes and call our test data
/// malformed when it looks like theirs, which says nothing about RoCE. They are disabled
/// (`--disable-protocol`: the heuristics' own short names differ between tshark versions), all
/// but `ethertype`, which the IP layers need.
pub fn tshark_payload_heuristics() -> Vec<String> {
    let out = run_ok(Command::new("tshark").args(["-G", "heuristic-decodes"]));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let wanted = f.len() == 3 && f[0] == "infiniband.payload" && f[1] != "ethertype";
            wanted.then(|| f[1].to_owned())
        })
        .collect()
}
