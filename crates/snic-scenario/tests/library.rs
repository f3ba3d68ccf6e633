//! The scenario library (`scenarios/` at the workspace root): every scenario file there is
//! loaded and run on the simulated clock, and must pass; a run is repeated to show it is
//! deterministic; the networked matrix multiplication's result is checked against A x B
//! computed here.
//!
//! Scenario files are found by listing the directory, so a new one is picked up without
//! touching this test.

use snic_compute::kernel::dtype;
use snic_compute::netmm;
use snic_scenario::schema::{Content, ExpectSpec};
use snic_scenario::{RunOptions, load};
use std::path::{Path, PathBuf};

fn library() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios")
}

/// Every `.toml` and `.json` file in `scenarios/`, sorted.
fn scenario_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(library())
        .expect("scenarios/ exists")
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.is_file())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("toml" | "json")))
        .collect();
    files.sort();
    files
}

use snic_scenario::testing::{load_path as load, run};

#[test]
fn the_library_has_every_scenario_the_issue_asks_for() {
    let names: Vec<String> = scenario_files()
        .iter()
        .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_owned))
        .collect();
    for want in [
        "accelnet_vnet.toml",
        "ecn_incast.toml",
        "rdma_opcodes_loss.toml",
        "device_memory.toml",
        "dma_bad_descriptor.toml",
        "netmm.json",
        "p4_router.toml",
        "xdp_firewall.toml",
    ] {
        assert!(names.iter().any(|n| n == want), "scenarios/{want} is missing: {names:?}");
    }
}

#[test]
fn every_scenario_in_the_library_loads() {
    let errors: Vec<String> = scenario_files()
        .iter()
        .filter_map(|p| load::load_file(p).err().map(|e| e.to_string()))
        .collect();
    assert!(errors.is_empty(), "scenarios that do not load:\n{}", errors.join("\n"));
}

#[test]
fn every_scenario_in_the_library_passes() {
    let mut failed = Vec::new();
    for path in scenario_files() {
        let loaded = load(&path);
        assert!(
            !loaded.scenario.description.trim().is_empty(),
            "{}: a library scenario says what it shows",
            path.display()
        );
        assert!(
            !loaded.scenario.expect.is_empty() || loaded.scenario.golden.is_some(),
            "{}: a library scenario checks something",
            path.display()
        );
        let report = run(&loaded);
        if report.passed {
            // A pass must rest on expectations that were checked, every one of them holding.
            assert!(!report.expectations.is_empty(), "{}: nothing was checked", path.display());
            assert!(report.expectations.iter().all(|e| e.passed));
        } else {
            eprintln!("{}", report.to_text());
            failed.push(path.display().to_string());
        }
    }
    assert!(failed.is_empty(), "scenarios that failed (reports above): {failed:?}");
}

#[test]
fn a_scenario_runs_the_same_twice() {
    // The lossy one: random loss, retransmission timers and every opcode.
    let loaded = load(&library().join("rdma_opcodes_loss.toml"));
    let a = serde_json::to_string(&run(&loaded)).expect("the report serialises");
    let b = serde_json::to_string(&run(&loaded)).expect("the report serialises");
    assert!(a == b, "two runs of the same scenario and seed differ:\n{a}\n---\n{b}");
    // A different seed loses other frames: the run is not the same (the seed is used).
    let other = snic_scenario::run(&loaded, &RunOptions { seed: Some(99), ..Default::default() })
        .expect("runs with another seed");
    let c = serde_json::to_string(&other).expect("the report serialises");
    assert_ne!(a, c, "the seed changes nothing");
}

#[test]
fn the_expectations_catch_a_run_that_differs() {
    // AccelNet without its mid-flow policy change: flow A is never denied. The counters, the
    // captures and the GFT statistics the scenario expects must all notice.
    let mut loaded = load(&library().join("accelnet_vnet.toml"));
    loaded.scenario.timeline.retain(|op| op.name.as_deref() != Some("deny_flow_a"));
    loaded.scenario.timeline.retain(|op| op.name.as_deref() != Some("allow_flow_a"));
    let report = run(&loaded);
    assert!(!report.passed, "{}", report.to_text());
    let failed: Vec<&str> =
        report.expectations.iter().filter(|e| !e.passed).map(|e| e.name.as_str()).collect();
    for want in [
        "flow A denied only while the rule was in force",
        "h1 receives flow A, decapsulated",
        "nic0: flows compiled by the slow path",
    ] {
        assert!(failed.contains(&want), "{want:?} did not fail: {failed:?}");
    }
    // An atomic that finds another value does not swap: the memory expectations notice.
    let mut loaded = load(&library().join("rdma_opcodes_loss.toml"));
    for op in &mut loaded.scenario.timeline {
        if let snic_scenario::schema::Action::PostSend { wrs, .. } = &mut op.action {
            for wr in wrs.iter_mut().filter(|w| w.compare.is_some()) {
                wr.compare = Some(99);
            }
        }
    }
    let report = run(&loaded);
    let ctr = report
        .expectations
        .iter()
        .find(|e| e.name.starts_with("atomics ran exactly once"))
        .expect("the counter expectation");
    assert!(!ctr.passed && ctr.diff.is_some(), "{}", report.to_text());
}

/// netmm.json's dimensions and seed.
const M: usize = 64;
const N: usize = 48;
const K: usize = 80;
const SEED: u64 = 2024;

/// C = A x B, int8 inputs, int32 accumulation, row-major, little-endian: the reference.
fn reference_product(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut c = Vec::with_capacity(M * N * 4);
    for i in 0..M {
        for j in 0..N {
            let mut acc = 0i32;
            for l in 0..K {
                acc += i32::from(a[i * K + l] as i8) * i32::from(b[l * N + j] as i8);
            }
            c.extend_from_slice(&acc.to_le_bytes());
        }
    }
    c
}

#[test]
fn networked_matrix_multiplication_computes_a_times_b() {
    let path = library().join("netmm.json");
    let mut loaded = load(&path);
    // The input files are netmm's streams 1 (A) and 2 (B) of the scenario's seed.
    let a = netmm::matrix(SEED, 1, M * K, dtype::I8);
    let b = netmm::matrix(SEED, 2, K * N, dtype::I8);
    let dir = library().join("netmm");
    assert_eq!(std::fs::read(dir.join("a.bin")).expect("a.bin"), a, "netmm/a.bin is not A");
    assert_eq!(std::fs::read(dir.join("b.bin")).expect("b.bin"), b, "netmm/b.bin is not B");
    let c = reference_product(&a, &b);
    assert_eq!(netmm::verify((M, N, K), dtype::I8, &a, &b, &c), None, "the reference itself");
    // Ask the run for C = the reference, byte for byte (int8 GEMM is exact).
    let out = std::env::temp_dir().join(format!("snic-netmm-c-{}.bin", std::process::id()));
    std::fs::write(&out, &c).expect("write the reference");
    loaded.scenario.expect.push(ExpectSpec {
        name: Some("C equals A x B computed on the host".into()),
        memory: Some("h2.dc".into()),
        content: Some(Content::File(out.display().to_string())),
        ..ExpectSpec::default()
    });
    let report = run(&loaded);
    let _ = std::fs::remove_file(&out);
    assert!(report.passed, "{}", report.to_text());
    let checked = report
        .expectations
        .iter()
        .find(|e| e.name == "C equals A x B computed on the host")
        .expect("the added expectation is in the report");
    assert!(checked.passed);
}
