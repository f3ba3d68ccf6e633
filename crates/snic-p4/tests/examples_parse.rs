//! Every P4 program shipped with snic (`examples/p4`) and every STF feature test
//! (`crates/snic-p4/tests/stf`) preprocesses, lexes and parses without an error, and every
//! `.stf` next to them parses. This catches syntax slips now; the executor runs the STF tests.
//! A light name check also resolves each STF table command against its program the way the
//! BMv2 STF driver does (table, action and key names by suffix, action parameter names), and
//! the register and counter names the STF uses.

use snic_p4::ast::{DeclKind, Expr, ExprKind, Program, TablePropKind};
use snic_p4::builtin::Builtins;
use snic_p4::lex::lex;
use snic_p4::parse::{parse, to_diagnostics};
use snic_p4::pre::{Options, preprocess};
use snic_p4::span::SourceMap;
use snic_p4::stf::{ActionCall, Command};
use std::collections::HashMap;
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

/// A table as the control plane sees it.
struct CpTable {
    /// `Control.table`.
    name: String,
    /// The key expressions as written, blanks removed.
    keys: Vec<String>,
    /// The actions' full names (`Control.a`, or `NoAction` for a top-level one).
    actions: Vec<String>,
}

/// The control-plane names of a program (no `@name` support: the programs here use none).
#[derive(Default)]
struct ControlPlane {
    tables: Vec<CpTable>,
    /// Action full name -> parameter names.
    params: HashMap<String, Vec<String>>,
    /// `Control.instance` of every extern instance (registers, counters, ...).
    instances: Vec<String>,
}

/// The name an action reference in `actions = { ... }` or a table property uses.
fn called_name(e: &Expr) -> Option<&str> {
    match &e.kind {
        ExprKind::Name(n) => Some(n),
        ExprKind::Call { callee, .. } => called_name(callee),
        _ => None,
    }
}

fn control_plane(text: &str, program: &Program) -> ControlPlane {
    let mut cp = ControlPlane::default();
    for d in &program.decls {
        if let DeclKind::Action { name, params, .. } = &d.kind {
            cp.params
                .insert(name.text.clone(), params.iter().map(|p| p.name.text.clone()).collect());
        }
    }
    for d in &program.decls {
        let DeclKind::Control { proto, locals, .. } = &d.kind else { continue };
        let c = &proto.name.text;
        for l in locals {
            match &l.kind {
                DeclKind::Action { name, params, .. } => {
                    cp.params.insert(
                        format!("{c}.{}", name.text),
                        params.iter().map(|p| p.name.text.clone()).collect(),
                    );
                }
                DeclKind::Instance { name, .. } => cp.instances.push(format!("{c}.{}", name.text)),
                _ => {}
            }
        }
        for l in locals {
            let DeclKind::Table { name, props } = &l.kind else { continue };
            let mut t =
                CpTable { name: format!("{c}.{}", name.text), keys: vec![], actions: vec![] };
            for p in props {
                match &p.kind {
                    TablePropKind::Key(keys) => {
                        for k in keys {
                            let src = &text[k.expr.loc.start as usize..k.expr.loc.end as usize];
                            t.keys.push(src.split_whitespace().collect());
                        }
                    }
                    TablePropKind::Actions(refs) => {
                        for r in refs {
                            let n = called_name(&r.expr).expect("an action name");
                            let local = format!("{c}.{n}");
                            t.actions.push(if cp.params.contains_key(&local) {
                                local
                            } else {
                                n.to_string()
                            });
                        }
                    }
                    _ => {}
                }
            }
            cp.tables.push(t);
        }
    }
    cp
}

/// The one name in `names` that is `want` or ends with it (exact first), as the STF driver
/// resolves table and action names.
fn by_suffix<'a>(
    names: impl Iterator<Item = &'a str> + Clone,
    want: &str,
) -> Result<&'a str, String> {
    if let Some(n) = names.clone().find(|n| *n == want) {
        return Ok(n);
    }
    let hits: Vec<&str> = names.filter(|n| n.ends_with(want)).collect();
    match hits.as_slice() {
        [one] => Ok(one),
        [] => Err(format!("`{want}` matches nothing")),
        _ => Err(format!("`{want}` is ambiguous: {hits:?}")),
    }
}

/// Resolve one `add` / `setdefault` against the program.
fn check_table_command(
    cp: &ControlPlane,
    table: &str,
    keys: &[String],
    action: &ActionCall,
) -> Result<(), String> {
    let tname = by_suffix(cp.tables.iter().map(|t| t.name.as_str()), table)?;
    let t = cp.tables.iter().find(|t| t.name == tname).unwrap();
    for k in keys {
        let ok = t.keys.iter().any(|key| key == k || key.ends_with(&format!(".{k}")));
        if !ok {
            return Err(format!("key `{k}` is not a key of {tname} ({:?})", t.keys));
        }
    }
    let a = by_suffix(t.actions.iter().map(String::as_str), &action.name)?;
    let mut want: Vec<&str> = cp.params[a].iter().map(String::as_str).collect();
    let mut got: Vec<&str> = action.args.iter().map(|(n, _)| n.as_str()).collect();
    want.sort_unstable();
    got.sort_unstable();
    if want != got {
        return Err(format!("{a} takes {want:?}, the STF gives {got:?}"));
    }
    Ok(())
}

/// The name errors of one STF against its program.
fn check_names(cp: &ControlPlane, stf: &str) -> Vec<String> {
    let mut errors = Vec::new();
    for line in snic_p4::stf::parse(stf).unwrap() {
        let r = match &line.cmd {
            Command::Add { table, keys, action, .. } => {
                let keys: Vec<String> = keys.iter().map(|(k, _)| k.clone()).collect();
                check_table_command(cp, table, &keys, action)
            }
            Command::SetDefault { table, action } => check_table_command(cp, table, &[], action),
            Command::RegisterWrite { name, .. } | Command::CheckCounter { name, .. } => {
                if cp.instances.iter().any(|i| i == name) {
                    Ok(())
                } else {
                    Err(format!("no instance `{name}` ({:?})", cp.instances))
                }
            }
            _ => Ok(()),
        };
        if let Err(e) = r {
            errors.push(format!("line {}: {e}", line.line));
        }
    }
    errors
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
fn stf_names_resolve_in_their_programs() {
    let mut failures = Vec::new();
    for dir in dirs() {
        for p in files(&dir, "p4") {
            let Ok((text, program)) = front_end(&p) else { continue };
            let Ok(stf) = std::fs::read_to_string(p.with_extension("stf")) else { continue };
            let cp = control_plane(&text, &program);
            for e in check_names(&cp, &stf) {
                failures.push(format!("{}: {e}", p.with_extension("stf").display()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
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
