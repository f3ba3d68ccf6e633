//! snic's verifier against the Linux kernel's: every program of the corpus
//! (`crates/snic-ebpf/tests/corpus/*.c`, good and deliberately bad) gets the same verdict from
//! `snic_ebpf::verify` as from the kernel's `BPF_PROG_LOAD`, and the verdict its header states
//! (`expect: accept|reject`). Where the two verifiers disagree on purpose, the header says so
//! (`known-difference: snic=V kernel=V: why`) and the test pins both verdicts, so it fails when
//! either changes.
//!
//! The kernel loads as root by default (`Privilege::Root`), how XDP programs are deployed. Root
//! (`CAP_PERFMON`) relaxes two rules snic's verifier always enforces: reading uninitialised
//! stack and leaking pointers (returning or storing them). Programs about those rules say
//! `kernel-privilege: bpf-only`: the kernel verifies them with `CAP_BPF` and `CAP_NET_ADMIN`
//! only, where it enforces both. (Not the whole corpus: without `CAP_PERFMON` the kernel also
//! refuses `data_end - data` and variable packet offsets, its Spectre v1 rules, which every
//! real XDP program needs.)
//!
//! The shipped examples (`examples/ebpf/*.c`) must verify in snic and load in
//! the kernel.
//!
//! Needs clang and root: skips with a message without them, fails under CI.

use std::path::{Path, PathBuf};

use snic_ebpf::testing::{compile, examples_dir, require_clang};
use snic_ebpf::{Object, ProgKind, Program};
use snic_io::bpf::{self, KernelMap, KernelProgram, KernelRefusal, Privilege};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../snic-ebpf/tests/corpus")
}

fn c_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
        .collect();
    v.sort();
    v
}

/// What a corpus file's header says.
#[derive(Debug)]
struct Expect {
    snic: bool,
    kernel: bool,
    why: Option<String>,
    privilege: Privilege,
}

fn header(src: &Path) -> Expect {
    let text = std::fs::read_to_string(src).unwrap();
    let mut expect = None;
    let mut known = None;
    let mut privilege = Privilege::Root;
    for line in text.lines().take_while(|l| l.starts_with("//")) {
        let l = line.trim_start_matches('/').trim();
        if let Some(v) = l.strip_prefix("expect:") {
            expect = Some(match v.trim() {
                "accept" => true,
                "reject" => false,
                other => panic!("{}: bad expect `{other}`", src.display()),
            });
        }
        if let Some(v) = l.strip_prefix("kernel-privilege:") {
            privilege = match v.trim() {
                "root" => Privilege::Root,
                "bpf-only" => Privilege::BpfOnly,
                other => panic!("{}: bad kernel-privilege `{other}`", src.display()),
            };
        }
        if let Some(v) = l.strip_prefix("known-difference:") {
            // snic=accept kernel=reject: why
            let (verdicts, why) =
                v.split_once(':').expect("known-difference: snic=V kernel=V: why");
            let mut snic = None;
            let mut kernel = None;
            for part in verdicts.split_whitespace() {
                match part.split_once('=') {
                    Some(("snic", v)) => snic = Some(v == "accept"),
                    Some(("kernel", v)) => kernel = Some(v == "accept"),
                    _ => panic!("{}: bad known-difference `{v}`", src.display()),
                }
            }
            known = Some(Expect {
                snic: snic.unwrap(),
                kernel: kernel.unwrap(),
                why: Some(why.trim().to_string()),
                privilege: Privilege::Root,
            });
        }
    }
    let expect = expect.unwrap_or_else(|| panic!("{}: no `expect:` line", src.display()));
    let mut e = known.unwrap_or(Expect { snic: expect, kernel: expect, why: None, privilege });
    e.privilege = privilege;
    e
}

/// Creates kernel maps for every map of the object.
fn kernel_maps(obj: &Object) -> Vec<KernelMap> {
    obj.maps
        .iter()
        .map(|m| KernelMap::create(m).unwrap_or_else(|e| panic!("creating map {}: {e}", m.name)))
        .collect()
}

fn kernel_load(
    obj: &Object,
    prog: &Program,
    privilege: Privilege,
) -> Result<KernelProgram, KernelRefusal> {
    let maps = kernel_maps(obj);
    let refs: Vec<&KernelMap> = maps.iter().collect();
    let ty = match prog.kind {
        ProgKind::Xdp => bpf::PROG_TYPE_XDP,
        _ => bpf::PROG_TYPE_SOCKET_FILTER,
    };
    KernelProgram::load_as(prog, &refs, ty, obj.license.as_deref().unwrap_or("GPL"), privilege)
}

fn verdict(ok: bool) -> &'static str {
    if ok { "accept" } else { "reject" }
}

#[test]
fn corpus_verdicts_match_the_kernel() {
    if !require_clang("corpus_verdicts_match_the_kernel")
        || !bpf::require_bpf("corpus_verdicts_match_the_kernel")
    {
        return;
    }
    let files = c_files(&corpus_dir());
    let (mut good, mut bad, mut known) = (0, 0, 0);
    let mut problems = Vec::new();
    for src in &files {
        let want = header(src);
        let name = src.file_stem().unwrap().to_string_lossy().into_owned();
        let obj = match Object::parse(&compile(src, &[]), &name) {
            Ok(o) => o,
            Err(e) => {
                problems.push(format!("{name}: snic cannot load the object: {e}"));
                continue;
            }
        };
        let progs: Vec<&Program> = obj.programs.iter().filter(|p| p.section != ".text").collect();
        assert_eq!(progs.len(), 1, "{name}: one program per corpus file");
        let prog = progs[0];
        let snic = snic_ebpf::verify(prog);
        let kernel = kernel_load(&obj, prog, want.privilege);
        let (s, k) = (snic.is_ok(), kernel.is_ok());
        if s != want.snic || k != want.kernel {
            problems.push(format!(
                "{name}: snic {} (want {}), kernel {} (want {}){}\n--- snic:\n{}\n--- kernel:\n{}",
                verdict(s),
                verdict(want.snic),
                verdict(k),
                verdict(want.kernel),
                want.why
                    .as_deref()
                    .map(|w| format!(" [known difference: {w}]"))
                    .unwrap_or_default(),
                match &snic {
                    Ok(v) => format!("accepted, {} insns", v.insns),
                    Err(r) => r.to_string(),
                },
                match &kernel {
                    Ok(p) => format!("accepted\n{}", p.log),
                    Err(r) => format!("errno {}\n{}", r.errno, r.log),
                },
            ));
        }
        match (want.why.is_some(), want.kernel) {
            (true, _) => known += 1,
            (false, true) => good += 1,
            (false, false) => bad += 1,
        }
    }
    eprintln!(
        "corpus: {} programs: {good} good, {bad} bad, {known} known differences",
        files.len()
    );
    assert!(
        problems.is_empty(),
        "{} verdict mismatches:\n\n{}",
        problems.len(),
        problems.join("\n\n")
    );
    assert!(good >= 20 && bad >= 15, "corpus too small: {good} good, {bad} bad");
}

/// Every shipped example compiles, passes snic's verifier, and (XDP programs) loads in the
/// kernel.
#[test]
fn examples_verify_in_snic_and_load_in_the_kernel() {
    if !require_clang("examples_verify_in_snic_and_load_in_the_kernel") {
        return;
    }
    let kernel = bpf::require_bpf("examples_verify_in_snic_and_load_in_the_kernel");
    let files = c_files(&examples_dir());
    assert!(files.len() >= 5, "expected at least 5 examples, found {}", files.len());
    for src in &files {
        let name = src.file_stem().unwrap().to_string_lossy().into_owned();
        let obj = Object::parse(&compile(src, &[]), &name)
            .unwrap_or_else(|e| panic!("{name}: snic cannot load the object: {e}"));
        assert!(!obj.programs.is_empty(), "{name}: no program");
        for prog in obj.programs.iter().filter(|p| p.section != ".text") {
            let v = snic_ebpf::verify(prog)
                .unwrap_or_else(|r| panic!("{name}/{}: snic refuses it:\n{r}", prog.name));
            assert!(v.insns > 0);
            if kernel && prog.kind == ProgKind::Xdp {
                kernel_load(&obj, prog, Privilege::Root).unwrap_or_else(|r| {
                    panic!("{name}/{}: the kernel refuses it:\n{r}", prog.name)
                });
            }
        }
    }
}

/// Why some corpus programs say `kernel-privilege: bpf-only`: as root the kernel accepts
/// reading uninitialised stack and returning a pointer; with `CAP_BPF` only it refuses both,
/// as snic does. And the reverse cost: without `CAP_PERFMON` it refuses `data_end - data`,
/// which every real XDP program computes, so the corpus is not loaded that way as a whole.
#[test]
fn kernel_privilege_modes_differ_as_documented() {
    if !require_clang("kernel_privilege_modes_differ_as_documented")
        || !bpf::require_bpf("kernel_privilege_modes_differ_as_documented")
    {
        return;
    }
    let load = |name: &str, p: Privilege| {
        let obj =
            Object::parse(&compile(&corpus_dir().join(format!("{name}.c")), &[]), name).unwrap();
        let prog = obj.programs.iter().find(|p| p.section != ".text").unwrap();
        kernel_load(&obj, prog, p).map(drop).map_err(|r| r.log)
    };
    for name in ["bad_uninit_stack", "bad_return_pointer"] {
        assert!(load(name, Privilege::Root).is_ok(), "{name}: root should be allowed");
        assert!(load(name, Privilege::BpfOnly).is_err(), "{name}: CAP_BPF only should refuse");
    }
    let strict = load("good_array_lookup", Privilege::BpfOnly);
    assert!(
        strict.as_ref().is_err_and(|log| log.contains("pointer -= pointer prohibited")),
        "{strict:?}"
    );
    assert!(load("good_array_lookup", Privilege::Root).is_ok());
}
