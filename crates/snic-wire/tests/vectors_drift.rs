//! The pasted test vectors still match the scripts that made them: re-run the generators with
//! scapy and diff their output against the constants in the Rust tests, so neither side can
//! drift unnoticed (a hand edit of a vector, a script change that was never re-pasted, or a
//! scapy release that builds these packets differently).
//!
//! - `roce_icrc_scapy.py` prints the `&[u8]` vectors of `roce_icrc_scapy.rs` (IP header to ICRC);
//! - `stack_common/gen_vectors.py` prints the hex frames of `stack_common/mod.rs`;
//! - `scripts/icrc_kat.py` (standard library only) prints snic-io's `generator.rs` ICRC known answer.
//!
//! python3 (with scapy, for the first two) is needed: without it a test prints a skip note and
//! passes, unless the environment variable `CI` is set, when it fails (CI must never pass by
//! skipping).

mod stack_common;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Rust source holding the ICRC vectors.
const ROCE_ICRC_RS: &str = include_str!("roce_icrc_scapy.rs");
/// snic-io's traffic generator, whose unit tests hold the ICRC known answer.
const GENERATOR_RS: &str = include_str!("../../snic-io/src/generator.rs");

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

/// True when `python3 -c code` succeeds. When it does not: panic if `CI` is set, else print a
/// skip note straight to stderr (libtest captures `eprintln!` of passing tests).
fn have_python(code: &str, what: &str, test: &str) -> bool {
    let ok = Command::new("python3").args(["-c", code]).output().is_ok_and(|o| o.status.success());
    if ok {
        return true;
    }
    if let Some(ci) = std::env::var_os("CI") {
        panic!("{test}: {what} is required when CI is set (CI={ci:?}), but missing");
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIP {test}: {what} is not installed (set CI=1 to make this a failure)"
    );
    false
}

/// python3 with scapy's RoCE support.
fn have_scapy(test: &str) -> bool {
    have_python("import scapy.all, scapy.contrib.roce", "python3 with scapy", test)
}

/// Run a generator script and return its stdout; panic with its stderr if it fails.
fn run_script(path: &Path) -> String {
    let out = Command::new("python3")
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 {}: {e}", path.display()));
    assert!(
        out.status.success(),
        "{} failed ({}):\n{}",
        path.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("script output is UTF-8")
}

/// Every `const NAME: &[u8] = &[0x.., ...];` in `src` (with or without `pub`, on one line or
/// several), by name.
fn byte_consts(src: &str) -> BTreeMap<String, Vec<u8>> {
    let mut map = BTreeMap::new();
    let mut rest = src;
    while let Some(at) = rest.find("const ") {
        rest = &rest[at + "const ".len()..];
        let Some((name, after)) = rest.split_once(": &[u8] = &[") else { break };
        if name.contains(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            continue; // another kind of const (e.g. `ALL: &[(&str, &[u8])]`)
        }
        let (body, tail) = after.split_once("];").expect("unterminated byte array");
        let bytes = body
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| {
                let hex = t.strip_prefix("0x").unwrap_or_else(|| panic!("{name}: {t:?}"));
                u8::from_str_radix(hex, 16).unwrap_or_else(|e| panic!("{name}: {t:?}: {e}"))
            })
            .collect();
        assert!(map.insert(name.to_owned(), bytes).is_none(), "{name} defined twice");
        rest = tail;
    }
    map
}

/// Every `const NAME: &str = "HEX";` in `src`, by name.
fn hex_consts(src: &str) -> BTreeMap<String, String> {
    src.lines()
        .filter_map(|l| l.trim().strip_prefix("pub ").unwrap_or(l.trim()).strip_prefix("const "))
        .filter_map(|l| l.split_once(": &str = \""))
        .map(|(name, v)| {
            let hex = v.strip_suffix("\";").unwrap_or_else(|| panic!("{name}: {v:?}"));
            (name.to_owned(), hex.to_owned())
        })
        .collect()
}

/// The differences between what a script printed and what is pasted, one line each.
fn diff<V: PartialEq + std::fmt::Debug>(
    script: &BTreeMap<String, V>,
    pasted: &BTreeMap<String, V>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, v) in script {
        match pasted.get(name) {
            None => out.push(format!("{name}: printed by the script, not pasted")),
            Some(p) if p != v => out.push(format!("{name}: script {v:02x?}\n   pasted {p:02x?}")),
            Some(_) => {}
        }
    }
    for name in pasted.keys().filter(|n| !script.contains_key(*n)) {
        out.push(format!("{name}: pasted, but the script no longer prints it"));
    }
    out
}

#[test]
fn roce_icrc_vectors_match_their_scapy_script() {
    if !have_scapy("vectors_drift::roce_icrc_vectors_match_their_scapy_script") {
        return;
    }
    let script = byte_consts(&run_script(&tests_dir().join("roce_icrc_scapy.py")));
    let pasted = byte_consts(ROCE_ICRC_RS);
    assert_eq!(script.len(), 7, "the script prints 7 vectors: {:?}", script.keys());
    let d = diff(&script, &pasted);
    assert!(d.is_empty(), "roce_icrc_scapy.rs drifted from its script:\n{}", d.join("\n"));
}

#[test]
fn stack_vectors_match_their_scapy_script() {
    if !have_scapy("vectors_drift::stack_vectors_match_their_scapy_script") {
        return;
    }
    let script = hex_consts(&run_script(&tests_dir().join("stack_common/gen_vectors.py")));
    let pasted: BTreeMap<String, String> =
        stack_common::ALL.iter().map(|(n, h)| ((*n).to_owned(), (*h).to_owned())).collect();
    assert_eq!(pasted.len(), stack_common::ALL.len(), "duplicate names in stack_common::ALL");
    assert_eq!(script.len(), 18, "the script prints 18 frames: {:?}", script.keys());
    let d = diff(&script, &pasted);
    assert!(d.is_empty(), "stack_common/mod.rs drifted from its script:\n{}", d.join("\n"));
}

#[test]
fn gen_icrc_known_answer_matches_its_script() {
    // Standard library only: needs python3 but not scapy.
    if !have_python("pass", "python3", "vectors_drift::gen_icrc_known_answer_matches_its_script") {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let printed = run_script(&root.join("scripts/icrc_kat.py"));
    let printed = printed.trim().strip_prefix("0x").expect("0x-prefixed hex");
    let printed = u32::from_str_radix(printed, 16).expect("hex");
    let line = GENERATOR_RS
        .lines()
        .find_map(|l| l.trim().strip_prefix("const ICRC_KAT: u32 = 0x"))
        .expect("generator.rs defines ICRC_KAT");
    let pasted = line.strip_suffix(';').expect("one-line const").replace('_', "");
    let pasted = u32::from_str_radix(&pasted, 16).expect("hex");
    assert_eq!(
        pasted, printed,
        "generator.rs ICRC_KAT {pasted:#010x}, icrc_kat.py {printed:#010x}"
    );
}

/// The parsers above find what they should (so an empty parse cannot pass as "no drift").
#[test]
fn the_const_parsers_read_both_layouts() {
    let one_line = "/// x\npub const A_1: &[u8] = &[0x01, 0xff];\nconst B: &str = \"0a0b\";\n";
    let wrapped = "const A_1: &[u8] = &[\n    0x01,\n    0xfe,\n];\nconst ALL: &[(&str, &[u8])] = &[(\"A_1\", A_1)];\n";
    assert_eq!(byte_consts(one_line), BTreeMap::from([("A_1".to_owned(), vec![1, 0xff])]));
    assert_eq!(byte_consts(wrapped), BTreeMap::from([("A_1".to_owned(), vec![1, 0xfe])]));
    assert_eq!(hex_consts(one_line), BTreeMap::from([("B".to_owned(), "0a0b".to_owned())]));
    let d = diff(&byte_consts(one_line), &byte_consts(wrapped));
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].starts_with("A_1: script [01, ff]"), "{d:?}");
    assert_eq!(byte_consts(ROCE_ICRC_RS).len(), 7);
}
