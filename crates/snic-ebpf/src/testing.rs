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

/// A tiny assembler for hand-written test programs: one function per instruction form,
/// returning [`crate::Insn`]s (`lddw` returns two).
pub mod asm {
    use crate::Insn;

    fn i(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn { code, dst, src, off, imm }
    }

    /// 64-bit ALU `op` (high nibble, e.g. `0x00` add) of an immediate: `dst op= imm`.
    pub fn alu64_imm(op: u8, dst: u8, imm: i32) -> Insn {
        i(0x07 | op, dst, 0, 0, imm)
    }
    /// 64-bit ALU `op` of a register: `dst op= src`.
    pub fn alu64_reg(op: u8, dst: u8, src: u8) -> Insn {
        i(0x0f | op, dst, src, 0, 0)
    }
    /// 32-bit ALU `op` of an immediate.
    pub fn alu32_imm(op: u8, dst: u8, imm: i32) -> Insn {
        i(0x04 | op, dst, 0, 0, imm)
    }
    /// 32-bit ALU `op` of a register.
    pub fn alu32_reg(op: u8, dst: u8, src: u8) -> Insn {
        i(0x0c | op, dst, src, 0, 0)
    }
    /// Any ALU instruction with its `off` (signed division, `movsx`).
    pub fn alu_off(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        i(code, dst, src, off, imm)
    }
    /// `dst = imm` (64-bit, sign-extended).
    pub fn mov64(dst: u8, imm: i32) -> Insn {
        alu64_imm(0xb0, dst, imm)
    }
    /// `dst = src`.
    pub fn mov64_reg(dst: u8, src: u8) -> Insn {
        alu64_reg(0xb0, dst, src)
    }
    /// `lddw dst, imm64` (two slots).
    pub fn lddw(dst: u8, imm: u64) -> [Insn; 2] {
        [i(0x18, dst, 0, 0, imm as u32 as i32), i(0, 0, 0, 0, (imm >> 32) as u32 as i32)]
    }
    /// `lddw dst, map` (`src` = 1, `imm` = the map's index in the object).
    pub fn lddw_map(dst: u8, index: i32) -> [Insn; 2] {
        [i(0x18, dst, 1, 0, index), i(0, 0, 0, 0, 0)]
    }
    /// Size code of a byte count (1, 2, 4, 8).
    pub fn size(bytes: u8) -> u8 {
        match bytes {
            1 => 0x10,
            2 => 0x08,
            4 => 0x00,
            _ => 0x18,
        }
    }
    /// `dst = *(size *)(src + off)`.
    pub fn ldx(bytes: u8, dst: u8, src: u8, off: i16) -> Insn {
        i(0x61 | size(bytes), dst, src, off, 0)
    }
    /// `dst = *(signed size *)(src + off)`, sign-extended (v4).
    pub fn ldxs(bytes: u8, dst: u8, src: u8, off: i16) -> Insn {
        i(0x81 | size(bytes), dst, src, off, 0)
    }
    /// `*(size *)(dst + off) = src`.
    pub fn stx(bytes: u8, dst: u8, off: i16, src: u8) -> Insn {
        i(0x63 | size(bytes), dst, src, off, 0)
    }
    /// `*(size *)(dst + off) = imm`.
    pub fn st(bytes: u8, dst: u8, off: i16, imm: i32) -> Insn {
        i(0x62 | size(bytes), dst, 0, off, imm)
    }
    /// Atomic `op` (`imm`: 0x00 add, 0x40 or, 0x50 and, 0xa0 xor, | 0x01 fetch, 0xe1 xchg,
    /// 0xf1 cmpxchg) of `src` at `dst + off`, 4 or 8 bytes.
    pub fn atomic(bytes: u8, dst: u8, off: i16, src: u8, op: i32) -> Insn {
        i(0xc3 | size(bytes), dst, src, off, op)
    }
    /// Conditional jump `op` (high nibble) on `dst` and an immediate, 64-bit.
    pub fn jmp_imm(op: u8, dst: u8, imm: i32, off: i16) -> Insn {
        i(0x05 | op, dst, 0, off, imm)
    }
    /// Conditional jump `op` on `dst` and `src`, 64-bit.
    pub fn jmp_reg(op: u8, dst: u8, src: u8, off: i16) -> Insn {
        i(0x0d | op, dst, src, off, 0)
    }
    /// Conditional jump `op` on `dst` and an immediate, 32-bit.
    pub fn jmp32_imm(op: u8, dst: u8, imm: i32, off: i16) -> Insn {
        i(0x06 | op, dst, 0, off, imm)
    }
    /// Conditional jump `op` on `dst` and `src`, 32-bit.
    pub fn jmp32_reg(op: u8, dst: u8, src: u8, off: i16) -> Insn {
        i(0x0e | op, dst, src, off, 0)
    }
    /// `goto +off`.
    pub fn ja(off: i16) -> Insn {
        i(0x05, 0, 0, off, 0)
    }
    /// `gotol +imm` (v4, 32-bit offset).
    pub fn gotol(imm: i32) -> Insn {
        i(0x06, 0, 0, 0, imm)
    }
    /// `call helper`.
    pub fn call(helper: i32) -> Insn {
        i(0x85, 0, 0, 0, helper)
    }
    /// `call +imm` (bpf-to-bpf).
    pub fn call_local(imm: i32) -> Insn {
        i(0x85, 0, 1, 0, imm)
    }
    /// `exit`.
    pub fn exit() -> Insn {
        i(0x95, 0, 0, 0, 0)
    }
    /// Flattens a program written as a list of instruction groups.
    pub fn prog<const N: usize>(parts: [&[Insn]; N]) -> Vec<Insn> {
        parts.iter().flat_map(|p| p.iter().copied()).collect()
    }
}

/// Prepares `insns` as an XDP program over `maps` *without* verification (`ctx_accesses`
/// names the context loads to rewrite), for tests of the interpreter's own checks.
pub fn unverified_xdp(
    insns: Vec<crate::Insn>,
    ctx_accesses: Vec<usize>,
    maps: &crate::MapSet,
) -> Result<crate::XdpProgram, crate::PrepareError> {
    unverified(insns, ctx_accesses, maps, crate::ProgKind::Xdp)
        .map(crate::XdpProgram::from_prepared)
}

/// Prepares `insns` of `kind` without verification.
pub fn unverified(
    insns: Vec<crate::Insn>,
    ctx_accesses: Vec<usize>,
    maps: &crate::MapSet,
    kind: crate::ProgKind,
) -> Result<crate::Prepared, crate::PrepareError> {
    crate::vm::prepare_insns(&insns, kind, &ctx_accesses, maps, "test".into())
}
