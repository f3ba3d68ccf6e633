//! Every STF test we ship passes: the feature tests in `tests/stf/` and the example programs
//! in the repository's `examples/p4/`.

mod common;

use std::path::Path;

fn run_dir(dir: &Path) -> usize {
    let pairs = common::stf_pairs(dir);
    let mut failed = Vec::new();
    for (p4, stf) in &pairs {
        if let Err(e) = common::run_stf_files(p4, stf) {
            failed.push(format!("{}: {e}", p4.display()));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} STF tests failed:\n{}",
        failed.len(),
        pairs.len(),
        failed.join("\n\n")
    );
    pairs.len()
}

#[test]
fn feature_stf_tests_pass() {
    let n = run_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stf"));
    assert!(n >= 3, "only {n} feature tests found");
}

#[test]
fn example_programs_pass_their_stf_tests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/p4");
    if dir.exists() {
        run_dir(&dir);
    }
}
