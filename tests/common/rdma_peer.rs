//! The host programs of the two-NIC tests: `crates/snic-host/examples/rdma_peer.rs` (Rust) and
//! its C twin `crates/snic-host/tests/c/rdma_peer.c`, built on demand, and a runner that starts
//! two of them and relays their `QP` lines.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The directory of the test's own build (where `snic`, the examples and `libsnic_host.so`
/// are).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    // target/<profile>/deps/<test>: two levels up.
    exe.parent().and_then(Path::parent).expect("target dir").to_path_buf()
}

/// The host programs: the Rust example and the C twin, built if needed; also the C ABI
/// program of the host library's tests (DMA queues, channels, kernels).
pub fn programs(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let root = super::root();
    // `--lib` too: building an example alone makes the rlib, not `libsnic_host.so`.
    let st = Command::new(env!("CARGO"))
        .args(["build", "-p", "snic-host", "--lib", "--example", "rdma_peer"])
        .current_dir(&root)
        .status()
        .expect("cargo build");
    assert!(st.success(), "building the rdma_peer example failed");
    let target = target_dir();
    let target = target.as_path();
    let rust = target.join("examples/rdma_peer");
    assert!(rust.exists(), "{} missing", rust.display());
    // Built against the library of this build, found at run time by the rpath.
    let cc = |src: &str, out: PathBuf| {
        let host = root.join("crates/snic-host");
        super::run_ok(
            Command::new("cc")
                .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-o"])
                .arg(&out)
                .arg(host.join("tests/c").join(src))
                .arg("-I")
                .arg(host.join("include"))
                .arg("-L")
                .arg(target)
                .arg(format!("-Wl,-rpath,{}", target.display()))
                .arg("-lsnic_host"),
        );
        out
    };
    let c = cc("rdma_peer.c", dir.join("rdma_peer_c"));
    let dma = cc("snic_test.c", dir.join("snic_test"));
    (rust, c, dma)
}

/// Run `a` (in namespace 0) and `b` (in namespace 1) against each other: relay their `QP`
/// lines, wait for both, return their outputs.
pub fn rdma_pair(a: Command, b: Command) -> (String, String) {
    let spawn = |mut c: Command| {
        c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        c.spawn().expect("start a host program")
    };
    let (mut pa, mut pb) = (spawn(a), spawn(b));
    let mut ra = BufReader::new(pa.stdout.take().expect("stdout"));
    let mut rb = BufReader::new(pb.stdout.take().expect("stdout"));
    let (mut la, mut lb) = (String::new(), String::new());
    ra.read_line(&mut la).expect("line of a");
    rb.read_line(&mut lb).expect("line of b");
    assert!(la.starts_with("QP ") && lb.starts_with("QP "), "a: {la:?} b: {lb:?}");
    pa.stdin.as_mut().expect("stdin").write_all(lb.as_bytes()).expect("relay to a");
    pb.stdin.as_mut().expect("stdin").write_all(la.as_bytes()).expect("relay to b");
    let rest = |r: &mut BufReader<std::process::ChildStdout>| {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(r, &mut s);
        s
    };
    let (oa, ob) = (rest(&mut ra), rest(&mut rb));
    let (sa, sb) = (pa.wait().expect("wait a"), pb.wait().expect("wait b"));
    assert!(sa.success() && sb.success(), "a ({sa}): {oa}\nb ({sb}): {ob}");
    (oa, ob)
}

/// `examples/c/netmm.c` (peer 2 of networked matrix multiplication in C), built against
/// `snic.h` and this build's `libsnic_host.so`, into `dir`.
pub fn netmm_program(dir: &Path) -> PathBuf {
    let root = super::root();
    let st = Command::new(env!("CARGO"))
        .args(["build", "-p", "snic-host", "--lib"])
        .current_dir(&root)
        .status()
        .expect("cargo build");
    assert!(st.success(), "building libsnic_host.so failed");
    let target = target_dir();
    let out = dir.join("netmm_c");
    super::run_ok(
        Command::new("cc")
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-o"])
            .arg(&out)
            .arg(root.join("examples/c/netmm.c"))
            .arg("-I")
            .arg(root.join("crates/snic-host/include"))
            .arg("-L")
            .arg(&target)
            .arg(format!("-Wl,-rpath,{}", target.display()))
            .args(["-lsnic_host", "-lm"]),
    );
    out
}
