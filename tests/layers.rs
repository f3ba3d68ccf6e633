//! The workspace's shape, checked: every crate sits in a layer and depends only on crates in
//! lower layers (nothing depends upward); the engine crates depend on no I/O crate; and the list
//! of modules allowed `unsafe` in ARCHITECTURE.md is exactly the set of modules that allow it.
//!
//! Dev-dependencies are exempt from the layering: a crate's tests may use a higher crate's test
//! kit (the testbed drives the RDMA engine, the host library's tests start a device).

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Layer of every workspace crate: a crate may depend on crates of lower layers only.
const LAYERS: &[(&str, u8)] = &[
    // Foundations: no snic dependency.
    ("snic-time", 0),
    ("snic-wire", 0),
    ("snic-dma", 0),
    // Engines over them (sans-IO).
    ("snic-pipeline", 1),
    ("snic-rdma", 1),
    ("snic-compute", 1),
    ("snic-p4", 1),
    ("snic-ebpf", 2),
    ("snic-vswitch", 2),
    ("snic-hostif", 2),
    ("snic-nic", 2),
    ("snic-stream", 2),
    // I/O: ports and run loop; the host library.
    ("snic-io", 3),
    ("snic-host", 3),
    // What is built on the I/O layer.
    ("snic-roce", 4),
    ("snic-testbed", 4),
    ("snic-p4rt", 4),
    ("snic-device", 5),
    ("snic-scenario", 5),
    // The binary.
    ("snic", 6),
];

/// The sans-IO engines: no sockets, threads or clocks of their own.
const ENGINES: &[&str] = &[
    "snic-time",
    "snic-wire",
    "snic-dma",
    "snic-pipeline",
    "snic-rdma",
    "snic-compute",
    "snic-vswitch",
    "snic-nic",
    "snic-p4",
    "snic-stream",
    "snic-ebpf",
];

/// Crates that do I/O (system calls, signals, devices); no engine may depend on them.
const IO_CRATES: &[&str] = &["libc", "signal-hook", "tun-rs", "tokio", "mio", "nix", "socket2"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn metadata() -> Value {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

/// Each workspace package's normal (not dev, not build) dependencies.
fn normal_deps() -> BTreeMap<String, Vec<String>> {
    let m = metadata();
    let mut out = BTreeMap::new();
    for p in m["packages"].as_array().expect("packages") {
        let name = p["name"].as_str().expect("name").to_string();
        let deps = p["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(|d| d["kind"].is_null())
            .map(|d| d["name"].as_str().expect("dependency name").to_string())
            .collect();
        out.insert(name, deps);
    }
    out
}

#[test]
fn every_crate_has_a_layer_and_nothing_depends_upward() {
    let layer: BTreeMap<&str, u8> = LAYERS.iter().copied().collect();
    let mut problems = Vec::new();
    for (krate, deps) in normal_deps() {
        let Some(&mine) = layer.get(krate.as_str()) else {
            problems.push(format!("{krate} has no layer in tests/layers.rs LAYERS"));
            continue;
        };
        for d in deps.iter().filter(|d| d.starts_with("snic")) {
            match layer.get(d.as_str()) {
                Some(&theirs) if theirs < mine => {}
                Some(&theirs) => problems.push(format!(
                    "{krate} (layer {mine}) depends on {d} (layer {theirs}): upward or sideways"
                )),
                None => problems.push(format!("{krate} depends on {d}, which has no layer")),
            }
        }
    }
    assert!(problems.is_empty(), "layering broken:\n{}", problems.join("\n"));
}

#[test]
fn engines_depend_on_no_io_crate() {
    let deps = normal_deps();
    for e in ENGINES {
        let d = deps.get(*e).unwrap_or_else(|| panic!("{e} is not in the workspace"));
        let io: Vec<&String> = d.iter().filter(|d| IO_CRATES.contains(&d.as_str())).collect();
        assert!(io.is_empty(), "engine crate {e} depends on I/O crates {io:?}");
    }
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "target") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Whether `text` lifts the `unsafe_code` lint anywhere: `#![allow(..)]`, `#[allow(..)]`,
/// `expect`, or `warn` of it, possibly over several lines.
fn allows_unsafe(text: &str) -> bool {
    ["#![allow(", "#[allow(", "#![expect(", "#[expect(", "#![warn(", "#[warn("].iter().any(|a| {
        text.split(a)
            .skip(1)
            .any(|rest| rest.split(')').next().is_some_and(|args| args.contains("unsafe_code")))
    })
}

#[test]
fn the_unsafe_scan_sees_every_way_to_allow_it() {
    assert!(allows_unsafe("#![allow(unsafe_code, reason = \"x\")]"));
    assert!(allows_unsafe("#![allow(\n    unsafe_code,\n    reason = \"x\"\n)]"));
    assert!(allows_unsafe("#[allow(unsafe_code)]\nfn f() {}"));
    assert!(allows_unsafe("#[expect(unsafe_code)]"));
    assert!(!allows_unsafe("#![allow(dead_code)] // unsafe_code is denied"));
}

#[test]
fn every_crate_takes_the_workspace_lints() {
    // A crate's own `[lints]` table could lift `unsafe_code = "deny"` for the whole crate.
    let mut problems = Vec::new();
    let mut manifests = vec![root().join("Cargo.toml")];
    for e in std::fs::read_dir(root().join("crates")).expect("crates/").flatten() {
        manifests.push(e.path().join("Cargo.toml"));
    }
    for m in manifests {
        let text = std::fs::read_to_string(&m).unwrap_or_default();
        let v: toml::Value = text.parse().unwrap_or_else(|e| panic!("{}: {e}", m.display()));
        let lints = v.get("lints");
        let inherits =
            lints.and_then(|l| l.get("workspace")).and_then(toml::Value::as_bool).unwrap_or(false);
        let own = lints.and_then(toml::Value::as_table).is_some_and(|t| t.len() > 1);
        if !inherits || own {
            problems.push(format!("{}: [lints] must be exactly `workspace = true`", m.display()));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn architecture_lists_exactly_the_modules_allowed_unsafe() {
    let root = root();
    // Library and binary code (tests calling the C ABI are not modules of snic).
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    rust_files(&root.join("src"), &mut files);
    let allowed: BTreeSet<String> = files
        .iter()
        .filter(|f| !f.components().any(|c| c.as_os_str() == "tests" || c.as_os_str() == "benches"))
        .filter(|f| allows_unsafe(&std::fs::read_to_string(f).unwrap_or_default()))
        .map(|f| f.strip_prefix(&root).unwrap().to_string_lossy().into_owned())
        .collect();

    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let section = doc
        .split("<!-- unsafe-modules -->")
        .nth(1)
        .expect("ARCHITECTURE.md marks its unsafe list with <!-- unsafe-modules -->");
    let listed: BTreeSet<String> = section
        .lines()
        .take_while(|l| !l.starts_with("<!--"))
        .filter_map(|l| l.strip_prefix("- `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect();
    assert_eq!(
        listed, allowed,
        "ARCHITECTURE.md's list of modules allowed unsafe (left) differs from the code (right)"
    );
}
