//! Compile `tests/c/snic_test.c` against `include/snic.h`, link it to the cdylib and run it
//! against an in-process snic server.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::TestServer;

/// The directory holding `libsnic_host.so` (next to this test executable), building it
/// first when it is missing.
fn lib_dir() -> PathBuf {
    let find = || {
        let exe = std::env::current_exe().expect("test executable path");
        exe.ancestors()
            .skip(1)
            .take(3)
            .find(|d| d.join("libsnic_host.so").exists())
            .map(Path::to_path_buf)
    };
    if let Some(d) = find() {
        return d;
    }
    let st = Command::new(env!("CARGO"))
        .args(["build", "-p", "snic-host"])
        .status()
        .expect("run cargo build");
    assert!(st.success(), "cargo build -p snic-host failed");
    find().expect("libsnic_host.so after cargo build")
}

fn have_cc() -> bool {
    Command::new("cc").arg("--version").output().is_ok_and(|o| o.status.success())
}

#[test]
fn c_program_against_live_server() {
    if !have_cc() {
        assert!(
            std::env::var("CI").map(|v| v != "true").unwrap_or(true),
            "no C compiler (cc) but CI=true"
        );
        eprintln!("SKIP: no C compiler (cc) found; the C ABI test did not run");
        return;
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = lib_dir();
    let s = TestServer::start("cprog", 2);
    let exe = s.dir.join("snic_test");
    let out = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-o"])
        .arg(&exe)
        .arg(manifest.join("tests/c/snic_test.c"))
        .arg("-I")
        .arg(manifest.join("include"))
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lsnic_host")
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).arg(s.socket()).output().expect("run the C program");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "C program failed ({}):\n{stdout}\n{stderr}", run.status);
    assert!(stdout.lines().any(|l| l == "ALL OK"), "{stdout}");
    for step in [
        "ok round trip matches",
        "ok queue data matches",
        "ok kernel copy result",
        "ok kernel wait by interrupt",
        "ok kernel reduce sum",
    ] {
        assert!(stdout.lines().any(|l| l == step), "missing {step:?} in:\n{stdout}");
    }
}
