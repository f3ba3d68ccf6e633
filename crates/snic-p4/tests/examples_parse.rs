//! Every P4 program shipped with snic (`examples/p4`) and every STF feature test
//! (`crates/snic-p4/tests/stf`) preprocesses, lexes and parses without an error, and every
//! `.stf` next to them parses, each program has its STF and back. `stf_corpus.rs` runs them
//! (names resolve there through the compiled program).

use snic_p4::ast::Program;
use snic_p4::builtin::Builtins;
use snic_p4::lex::lex;
use snic_p4::parse::{parse, to_diagnostics};
use snic_p4::pre::{Options, preprocess};
use snic_p4::span::SourceMap;
use std::path::{Path, PathBuf};

/// The folders that hold the programs, from this crate's manifest directory.
fn dirs() -> [PathBuf; 2] {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    [here.join("../../examples/p4"), here.join("tests/stf")]
}

/// The files in `dir` whose name ends in `.ext`, sorted.
fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    out.sort();
    out
}

/// Preprocess (with the built-in `core.p4` / `v1model.p4`), lex and parse one program; the
/// preprocessed text and the program, or the rendered errors.
fn front_end(path: &Path) -> Result<(String, Program), String> {
    let src = std::fs::read_to_string(path).unwrap();
    let mut map = SourceMap::new();
    let main = map.add(path.display().to_string(), &src);
    let out = preprocess(&mut map, main, &mut Builtins, &Options::default())
        .map_err(|d| d.iter().map(|d| d.render(&map)).collect::<Vec<_>>().join("\n"))?;
    let (tokens, errors) = lex(&out.text);
    if !errors.is_empty() {
        return Err(format!("{}: lexer errors {errors:?}", path.display()));
    }
    match parse(&out.text, &tokens) {
        Ok(p) => Ok((out.text.clone(), p)),
        Err(e) => Err(to_diagnostics(&e, &out)
            .iter()
            .map(|d| d.render(&map))
            .collect::<Vec<_>>()
            .join("\n")),
    }
}

#[test]
fn every_program_parses() {
    let mut failures = Vec::new();
    let mut n = 0;
    for dir in dirs() {
        for p in files(&dir, "p4") {
            n += 1;
            if let Err(e) = front_end(&p) {
                failures.push(e);
            }
        }
    }
    assert!(n >= 10, "only {n} programs found");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_stf_parses() {
    let mut failures = Vec::new();
    for dir in dirs() {
        for p in files(&dir, "stf") {
            let text = std::fs::read_to_string(&p).unwrap();
            if let Err(e) = snic_p4::stf::parse(&text) {
                failures.push(format!("{}:{e}", p.display()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_program_has_an_stf_and_back() {
    for dir in dirs() {
        for p in files(&dir, "p4") {
            assert!(p.with_extension("stf").is_file(), "{} has no .stf", p.display());
        }
        for s in files(&dir, "stf") {
            assert!(s.with_extension("p4").is_file(), "{} has no .p4", s.display());
        }
    }
}
