//! Programs shared by the front end's tests.

#![allow(dead_code, reason = "each test binary uses a different subset")]

/// A small v1model program: one header, an exact table with two actions, every block of
/// `V1Switch`, including the built-ins.
pub const SMALL: &str = r#"#include <core.p4>
#include <v1model.p4>
header ethernet_t { bit<48> dst; bit<48> src; bit<16> type; }
struct headers_t { ethernet_t eth; }
struct meta_t { }

parser P(packet_in pkt, out headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.eth); transition accept; }
}
control VC(inout headers_t hdr, inout meta_t m) { apply { } }
control I(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    action fwd(PortId_t port) { sm.egress_spec = port; }
    table t { key = { hdr.eth.dst : exact; } actions = { fwd; NoAction; } default_action = NoAction(); }
    apply { t.apply(); }
}
control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers_t hdr, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.eth); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"#;

/// Compile a v1model program given as text (built-in includes only); panics with the rendered
/// diagnostics when it does not compile.
pub fn compile(src: &str) -> snic_p4::ir::Compiled {
    try_compile(src).unwrap_or_else(|e| panic!("compile failed:\n{e}"))
}

/// Compile a program; `Err` is the rendered diagnostics.
pub fn try_compile(src: &str) -> Result<snic_p4::ir::Compiled, String> {
    let mut map = snic_p4::span::SourceMap::new();
    let main = map.add("test.p4", src);
    snic_p4::runner::build(&mut map, main, &mut snic_p4::builtin::Builtins, &Default::default())
        .map(|b| b.program)
        .map_err(|d| d.iter().map(|d| d.render(&map)).collect::<Vec<_>>().join("\n"))
}

/// Run an STF text against a program; `Ok(true)` when the verdict passes. Failures print the
/// verdict.
pub fn stf(src: &str, stf: &str) -> Result<bool, String> {
    let prog = try_compile(src)?;
    let run = snic_p4::runner::run_stf(prog, stf, false).map_err(|e| e.to_string())?;
    if !run.verdict.passed() {
        eprintln!("{:#?}\nnotes: {:?}", run.verdict, run.notes);
    }
    Ok(run.verdict.passed())
}

/// Includes from the built-ins, then from `dir` (for programs on disk).
#[derive(Debug)]
pub struct DirLoader(pub std::path::PathBuf);

impl snic_p4::pre::Loader for DirLoader {
    fn load(
        &mut self,
        name: &str,
        kind: snic_p4::pre::IncludeKind,
        from: &str,
    ) -> Result<snic_p4::pre::Loaded, snic_p4::pre::LoadError> {
        if kind == snic_p4::pre::IncludeKind::System
            && let Some(t) = snic_p4::builtin::lookup(name)
        {
            return Ok(snic_p4::pre::Loaded { name: format!("<{name}>"), text: t.to_string() });
        }
        let dir =
            std::path::Path::new(from).parent().map(|p| p.to_path_buf()).unwrap_or(self.0.clone());
        for c in [dir.join(name), self.0.join(name)] {
            if let Ok(text) = std::fs::read_to_string(&c) {
                return Ok(snic_p4::pre::Loaded { name: c.display().to_string(), text });
            }
        }
        match snic_p4::builtin::lookup(name) {
            Some(t) => Ok(snic_p4::pre::Loaded { name: format!("<{name}>"), text: t.to_string() }),
            None => Err(snic_p4::pre::LoadError::NotFound),
        }
    }
}

/// Every `X.p4` with an `X.stf` beside it in `dir`, sorted.
pub fn stf_pairs(dir: &std::path::Path) -> Vec<(std::path::PathBuf, std::path::PathBuf)> {
    let mut v = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "p4") {
                let s = p.with_extension("stf");
                if s.exists() {
                    v.push((p, s));
                }
            }
        }
    }
    v.sort();
    v
}

/// Compile the program at `p4` and run the STF at `stf`: `Err` says what failed.
pub fn run_stf_files(p4: &std::path::Path, stf: &std::path::Path) -> Result<(), String> {
    let src = std::fs::read_to_string(p4).map_err(|e| e.to_string())?;
    let stf_text = std::fs::read_to_string(stf).map_err(|e| e.to_string())?;
    let mut map = snic_p4::span::SourceMap::new();
    let main = map.add(p4.display().to_string(), src);
    let dir = p4.parent().map(|d| d.to_path_buf()).unwrap_or_default();
    let built = snic_p4::runner::build(&mut map, main, &mut DirLoader(dir), &Default::default())
        .map_err(|d| d.iter().map(|d| d.render(&map)).collect::<Vec<_>>().join("\n"))?;
    let run =
        snic_p4::runner::run_stf(built.program, &stf_text, false).map_err(|e| e.to_string())?;
    if run.verdict.passed() {
        Ok(())
    } else {
        Err(format!("{:#?}\nnotes: {:?}", run.verdict.failures, run.notes))
    }
}
