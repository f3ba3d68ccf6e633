//! Test kit (feature `testing`): compiling C to BPF objects with the machine's clang, once per
//! source and flags, for every test that needs a program.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Directory of the shipped example programs (`examples/ebpf`).
pub fn examples_dir() -> PathBuf {
    repo_root().join("examples/ebpf")
}

/// Whether clang with the BPF target is on this machine.
pub fn have_clang() -> bool {
    Command::new("clang").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// True when tests run under CI (`CI` set), where a missing tool is a failure, not a skip.
pub fn under_ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// Returns false (after saying why) when clang is missing outside CI; panics under CI, where
/// `.ci/run` installs it.
pub fn require_clang(test: &str) -> bool {
    if have_clang() {
        return true;
    }
    assert!(!under_ci(), "{test}: clang is missing under CI (.ci/run installs it)");
    eprintln!("skipping {test}: clang is not installed");
    false
}

/// Compiles one C source with `clang -O2 -g -target bpf` (plus `extra` flags) and returns the
/// object's bytes. Objects are cached under the target directory by source path, contents and
/// flags. Panics with clang's messages when it fails: a test program that does not compile is
/// a broken test.
pub fn compile(src: &Path, extra: &[&str]) -> Vec<u8> {
    let source = std::fs::read(src).unwrap_or_else(|e| panic!("reading {}: {e}", src.display()));
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hash::hash(&(src, &source, extra), &mut h);
    let key = std::hash::Hasher::finish(&h);
    let dir = std::env::temp_dir().join("snic-ebpf-objs");
    let _ = std::fs::create_dir_all(&dir);
    let stem = src.file_stem().and_then(|s| s.to_str()).unwrap_or("prog");
    let out = dir.join(format!("{stem}-{key:016x}.o"));
    if let Ok(bytes) = std::fs::read(&out) {
        return bytes;
    }
    let tmp = dir.join(format!("{stem}-{key:016x}.{}.tmp", std::process::id()));
    let multiarch = format!("/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    let status = Command::new("clang")
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        .arg(format!("-I{multiarch}"))
        .arg(format!("-I{}", examples_dir().join("include").display()))
        .args(extra)
        .arg("-c")
        .arg(src)
        .arg("-o")
        .arg(&tmp)
        .output()
        .unwrap_or_else(|e| panic!("running clang: {e}"));
    assert!(
        status.status.success(),
        "clang failed on {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&status.stderr)
    );
    std::fs::rename(&tmp, &out).unwrap_or_else(|e| panic!("caching {}: {e}", out.display()));
    std::fs::read(&out).unwrap_or_else(|e| panic!("reading {}: {e}", out.display()))
}

/// Compiles C source text (written to a file under the temp directory first).
pub fn compile_str(name: &str, c: &str, extra: &[&str]) -> Vec<u8> {
    let dir = std::env::temp_dir().join("snic-ebpf-src");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{name}.c"));
    if std::fs::read_to_string(&path).ok().as_deref() != Some(c) {
        let tmp = dir.join(format!("{name}.c.{}.tmp", std::process::id()));
        std::fs::write(&tmp, c).unwrap_or_else(|e| panic!("writing {}: {e}", tmp.display()));
        std::fs::rename(&tmp, &path).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
    compile(&path, extra)
}
