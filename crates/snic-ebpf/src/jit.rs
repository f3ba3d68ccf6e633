//! An x86-64 JIT for prepared eBPF programs.
//!
//! # Why our own
//!
//! rbpf's JIT, the only Rust one, panics on atomic instructions (its XADD arm is
//! `unimplemented!()`), has no bpf-to-bpf calls, and calls helpers without a context pointer,
//! so helpers could not reach the run's maps, packet bounds or fault flag. Cranelift would do
//! the code generation well but is a very heavy dependency for a few hundred lines of
//! straight-line translation, and dynasm is MPL-licensed. eBPF maps almost one to one onto
//! x86-64, so a direct translator is small.
//!
//! # Design
//!
//! The shape follows the Linux kernel's x86-64 JIT:
//!
//! - BPF registers live in x86 registers for the whole run: r0 = rax, r1 = rdi, r2 = rsi,
//!   r3 = rdx, r4 = rcx, r5 = r8, r6 = rbx, r7 = r13, r8 = r14, r9 = r15, r10 = rbp. The
//!   argument registers of BPF are the SysV argument registers, so the context pointer arrives
//!   in r1 for free. r12 holds the run's `Env` (for helper calls); r9, r10 and r11 are scratch.
//! - The BPF stack is the run's own stack (the worker's, as for the interpreter: r10 starts at
//!   [`Env::stack_top`]), so helpers see stack pointers inside the run's regions and both
//!   engines leave the same bytes behind. The prologue saves the callee-saved registers on the
//!   native stack; a bpf-to-bpf call saves the caller's r6-r10 there too, moves r10 down one
//!   512-byte frame and `call`s the callee, whose `exit` is a `ret`. The verifier bounds the
//!   call depth (8 frames).
//! - Helpers go through a small entry of ours around [`helpers::dispatch`]
//!   (`extern "C" fn(env, id, r1..r5)`, which also returns the fault flag in rdx): r1-r4 are moved to the SysV argument registers, r5 is
//!   pushed, the stack stays 16-byte aligned; the result lands in rax = r0. r1-r5 are
//!   clobbered, as BPF's calling convention allows. When the helper faulted, the code jumps to
//!   the epilogue at once, so a run ends at the same instruction as in the interpreter.
//! - `bpf_map_lookup_elem` on a plain array map is inlined, as the kernel's JIT does: when r1
//!   is certainly that map (an `lddw` of its address earlier in the same basic block), the
//!   call becomes `key < max_entries ? base + key * stride : NULL` (the layout is checked
//!   against the map's own lookup when compiling). Other helpers go through the entry above.
//! - Jumps: the code is emitted repeatedly, each pass using the previous pass's instruction
//!   addresses to pick 2-byte short or 5/6-byte near jumps, until the addresses stop changing
//!   (sizes only ever shrink, so this converges; the last pass is exact).
//! - Semantics that x86 does not give directly are spelled out: division by zero gives 0 and
//!   modulo by zero leaves the destination (zero-extended for 32 bits), `INT_MIN / -1` wraps and
//!   `INT_MIN % -1` is 0 (x86 would trap), 32-bit operations zero-extend, shifts take their count
//!   in `cl` (BPF r4 is saved around them), byte swaps use `bswap`/`rol`.
//! - Atomics use `lock`-prefixed instructions: `lock add/or/and/xor` without fetch,
//!   `lock xadd` for fetch-add, `xchg`, `lock cmpxchg`, and a `lock cmpxchg` loop for fetch-or,
//!   fetch-and and fetch-xor.
//! - The code is written into an anonymous read-write mapping, which is then made read +
//!   execute (never writable and executable at once), through `memmap2`.
//!
//! Like the kernel's JIT, the compiled code does not bounds-check memory accesses: it is only
//! for programs the verifier accepted. The interpreter keeps its run-time checks. There is no
//! instruction budget either (the verifier proved termination).
//!
//! # Use
//!
//! [`JitProgram::compile`] takes a [`Prepared`] program and refuses, with a [`JitError`], what
//! it does not translate (legacy packet loads, kfunc and register calls, unknown opcodes, and
//! every program on a target other than x86-64); callers fall back to the interpreter.
//! [`JitProgram::run`] (unsafe: the program must be verified) runs it over a run's [`Env`].
//! [`crate::XdpProgram`] and [`crate::core::CoreProgram`] compile every program they load
//! and run it natively unless told otherwise (`set_engine(Engine::Interpreter)`).
//!
//! Measured (benches/jit.rs, thread CPU time per packet, whole run included; the kernel's
//! `BPF_PROG_TEST_RUN` with `repeat` on the same machine): the array-map counter 32 ns
//! (kernel 23 ns, interpreter 236 ns), the MAC swap 34 ns (kernel 25, interpreter 364), the
//! UDP firewall 61-64 ns (kernel 39-45, interpreter 215-332); of that, about 35 ns is the fixed
//! cost of one `XdpProgram::run` (a program that only returns XDP_PASS; kernel 21 ns).
#![allow(
    unsafe_code,
    reason = "executes generated machine code through a function pointer and gives its helper \
              entry the run's Env back; the SAFETY comments say why each use is sound"
)]

mod x86;

#[cfg(all(test, target_arch = "x86_64"))]
mod tests;

use std::fmt;

use crate::helpers;
use crate::insn::{Insn, class, pseudo};
use crate::maps::{Map, MapSet};
use crate::object::MapKind;
use crate::vm::{Env, Fault, Prepared};
use std::sync::Arc;
use x86::{Alu, Asm, Shift, Size, cc};

/// Why a program was not compiled (the caller runs it with the interpreter instead).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JitError {
    /// The JIT only targets x86-64.
    Unsupported,
    /// An instruction the JIT does not translate.
    Opcode {
        /// Instruction index.
        insn: usize,
        /// Its opcode byte.
        code: u8,
        /// What is wrong.
        what: &'static str,
    },
    /// A jump or call target outside the program or inside a wide instruction.
    BadTarget {
        /// Instruction index of the jump or call.
        insn: usize,
    },
    /// Jump sizes did not settle (a program far larger than verified programs can be).
    NoFixpoint,
    /// The executable mapping could not be created.
    Memory(String),
    /// The program did not come through the verifier; the JIT only runs verified programs.
    Unverified,
}

impl fmt::Display for JitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JitError::Unsupported => write!(f, "the eBPF JIT only supports x86-64"),
            JitError::Opcode { insn, code, what } => {
                write!(f, "instruction {insn} (opcode {code:#04x}): {what}")
            }
            JitError::BadTarget { insn } => {
                write!(f, "instruction {insn}: jump or call target out of the program")
            }
            JitError::NoFixpoint => write!(f, "jump offsets did not converge"),
            JitError::Memory(e) => write!(f, "executable memory: {e}"),
            JitError::Unverified => write!(f, "the JIT only runs verified programs"),
        }
    }
}

impl std::error::Error for JitError {}

/// The signature of compiled code: `r1 = ctx`, the run's environment (for helper calls), the
/// top of the run's stack (`r10`); returns r0.
type Entry = unsafe extern "C" fn(ctx: *mut u8, env: *mut u8, stack_top: u64) -> u64;

/// What the JIT's helper entry returns: r0, and in rdx whether the helper faulted (the run then
/// ends at once, as in the interpreter).
#[repr(C)]
pub(crate) struct HelperRet {
    /// The helper's result (r0).
    pub(crate) r0: u64,
    /// Nonzero when the helper set the run's fault.
    pub(crate) fault: u64,
}

/// The helper entry the compiled code calls: [`helpers::dispatch`] on the run's `Env`, plus
/// the fault flag in rdx so the code can stop right after a faulting helper.
extern "C" fn jit_helper(
    env: *mut Env<'_>,
    id: u64,
    r1: u64,
    r2: u64,
    r3: u64,
    r4: u64,
    r5: u64,
) -> HelperRet {
    // SAFETY: the compiled code passes the `env` given to `JitProgram::call`, whose contract
    // is that it is the live environment of this run, not otherwise borrowed meanwhile.
    let env = unsafe { &mut *env };
    let r0 = helpers::dispatch(env, id as u32, [r1, r2, r3, r4, r5]);
    HelperRet { r0, fault: u64::from(env.fault().is_some()) }
}

/// A compiled program: read + execute memory holding its machine code.
pub struct JitProgram {
    code: memmap2::Mmap,
    len: usize,
    /// The maps whose addresses the code holds (kept alive as long as the code).
    maps: Option<MapSet>,
}

/// What the code generator knows about the run-time side: the helper entry, and the plain
/// array maps whose lookups it inlines.
struct CodeEnv {
    helper: u64,
    /// (address of the `Map`, its inline lookup).
    arrays: Vec<(u64, ArrayInline)>,
}

/// An array map's layout for an inlined `bpf_map_lookup_elem`: value `i` is at
/// `base + i * stride` for `i < max`.
#[derive(Clone, Copy, Debug)]
struct ArrayInline {
    base: u64,
    max: u32,
    stride: u32,
}

/// The inline lookup of a plain (not per-CPU) array map, checked against the map's own lookup.
fn array_inline(m: &Arc<Map>) -> Option<(u64, ArrayInline)> {
    if m.kind() != MapKind::Array {
        return None;
    }
    let stride = m.spec().value_size.checked_add(7)? & !7;
    // The code multiplies by a sign-extended 32-bit immediate.
    i32::try_from(stride).ok()?;
    let max = m.spec().max_entries;
    let at = |i: u32| m.lookup(&i.to_ne_bytes(), 0);
    // Trust the layout only if the map agrees at both ends and just past them.
    let base = at(0)?;
    let last = u64::from(max.checked_sub(1)?);
    if at(max - 1)? != base + last * u64::from(stride) || at(max).is_some() {
        return None;
    }
    Some((Arc::as_ptr(m) as u64, ArrayInline { base, max, stride }))
}

impl fmt::Debug for JitProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JitProgram").field("code_len", &self.len).finish()
    }
}

impl JitProgram {
    /// Compiles a prepared program (context accesses rewritten, map addresses bound). What the
    /// JIT does not translate is refused with a [`JitError`]; run the interpreter instead.
    /// Compiling is harmless; running the code ([`JitProgram::run`]) is only sound for a program
    /// the verifier accepted.
    pub fn compile(prepared: &Prepared) -> Result<JitProgram, JitError> {
        let arrays = prepared.maps.iter().filter_map(array_inline).collect();
        let env = CodeEnv { helper: jit_helper as *const () as usize as u64, arrays };
        let mut j = JitProgram::compile_with(&prepared.insns, &env)?;
        j.maps = Some(prepared.maps.clone());
        Ok(j)
    }

    /// Compiles instructions whose helper calls go to `helper` (an
    /// `extern "C" fn(env, id, r1, r2, r3, r4, r5) -> HelperRet`).
    #[cfg(all(test, target_arch = "x86_64"))]
    pub(crate) fn compile_insns(insns: &[Insn], helper: u64) -> Result<JitProgram, JitError> {
        JitProgram::compile_with(insns, &CodeEnv { helper, arrays: Vec::new() })
    }

    fn compile_with(insns: &[Insn], env: &CodeEnv) -> Result<JitProgram, JitError> {
        if !cfg!(target_arch = "x86_64") {
            return Err(JitError::Unsupported);
        }
        let code = assemble(insns, env)?;
        let mut mem = memmap2::MmapMut::map_anon(code.len().max(1))
            .map_err(|e| JitError::Memory(e.to_string()))?;
        mem[..code.len()].copy_from_slice(&code);
        let code_map = mem.make_exec().map_err(|e| JitError::Memory(e.to_string()))?;
        Ok(JitProgram { code: code_map, len: code.len(), maps: None })
    }

    /// Bytes of machine code.
    pub fn code_len(&self) -> usize {
        self.len
    }

    /// Runs the code with `ctx` in r1, the stack of `env` and its helpers; returns r0. A helper
    /// fault ends the run early and stays in `env` (see [`Env::take_fault`]).
    ///
    /// # Safety
    ///
    /// The program must have passed the verifier and then `prepare` over the maps and context
    /// layout of this run: `ctx` must point to a live context of that layout (its packet
    /// pointers inside a live buffer), `env` to this run's live environment, not otherwise
    /// borrowed during the call, whose stack is at least [`crate::vm::STACK_SIZE`] bytes. The
    /// generated code does not check its memory accesses.
    pub unsafe fn call(&self, ctx: *mut u8, env: *mut Env<'_>) -> u64 {
        // SAFETY: the caller's contract: `env` is live.
        let top = unsafe { (*env).stack_top() };
        // SAFETY: as above; the stack below `top` belongs to this run.
        unsafe { self.call_raw(ctx, env.cast::<u8>(), top) }
    }

    /// [`JitProgram::call`] with the fault check: r0, or the fault a helper reported.
    ///
    /// # Safety
    ///
    /// As for [`JitProgram::call`], with `ctx` the context address the run's `env` knows.
    pub unsafe fn run(&self, env: &mut Env<'_>, ctx: u64) -> Result<u64, Fault> {
        // SAFETY: forwarded contract.
        let r0 = unsafe { self.call(ctx as *mut u8, env) };
        match env.take_fault() {
            Some(f) => Err(f),
            None => Ok(r0),
        }
    }

    /// Runs a program the verifier accepted (callers inside the crate that loaded it through
    /// [`crate::verify::verify`] and `prepare`, with `env` built for this very run).
    pub(crate) fn run_verified(&self, env: &mut Env<'_>, ctx: u64) -> Result<u64, Fault> {
        // SAFETY: the crate only calls this for verified programs, with the environment it
        // built for the run over the program's own maps and context (see `XdpProgram`).
        unsafe { self.run(env, ctx) }
    }

    /// Runs the code: r1 = `ctx`, helpers get `env`, r10 = `stack_top`.
    ///
    /// # Safety
    ///
    /// As for [`JitProgram::call`]; `stack_top` is one past a writable region of at least
    /// [`crate::vm::STACK_SIZE`] bytes, and helper calls must suit the helper it was compiled
    /// with.
    pub(crate) unsafe fn call_raw(&self, ctx: *mut u8, env: *mut u8, stack_top: u64) -> u64 {
        // SAFETY: `code` is a read + execute mapping holding a complete function assembled by
        // `assemble` with the `Entry` calling convention (SysV, callee-saved registers restored,
        // stack balanced); it lives as long as `self`. The caller upholds the memory contract.
        unsafe {
            let f: Entry = std::mem::transmute::<*const u8, Entry>(self.code.as_ptr());
            f(ctx, env, stack_top)
        }
    }
}

/// BPF register -> x86 register.
const REG: [u8; 11] = [
    x86::RAX,
    x86::RDI,
    x86::RSI,
    x86::RDX,
    x86::RCX,
    x86::R8,
    x86::RBX,
    x86::R13,
    x86::R14,
    x86::R15,
    x86::RBP,
];
/// Points at the native stack slot holding the run's `Env` pointer, just above which the
/// callee-saved registers are (callee-saved itself, so it survives helper calls).
const ENV: u8 = x86::R12;
/// Scratch registers.
const AUX: u8 = x86::R11;
const AUX2: u8 = x86::R10;
const AUX3: u8 = x86::R9;
/// Bytes of one BPF stack frame.
const FRAME: i32 = 512;
/// Passes before giving up on jump sizes.
const MAX_PASSES: usize = 32;

/// Assembles the whole program: repeat until the instruction addresses are stable.
fn assemble(insns: &[Insn], env: &CodeEnv) -> Result<Vec<u8>, JitError> {
    let funcs = functions(insns)?;
    let inline = inline_lookups(insns, env)?;
    let mut prev: Option<Vec<usize>> = None;
    for _ in 0..MAX_PASSES {
        let (code, starts) = pass(insns, &funcs, &inline, env.helper, prev.as_deref())?;
        if prev.as_deref() == Some(&starts[..]) {
            return Ok(code);
        }
        prev = Some(starts);
    }
    Err(JitError::NoFixpoint)
}

/// For each instruction, whether it is in the main function (false: in a bpf-to-bpf callee).
fn functions(insns: &[Insn]) -> Result<Vec<bool>, JitError> {
    // Each subprogram becomes a function with its own return: no jump may cross between them.
    crate::vm::check_subprograms(insns).map_err(|e| match e {
        crate::vm::PrepareError::BadJump { insn } => JitError::BadTarget { insn },
        _ => JitError::BadTarget { insn: 0 },
    })?;
    let n = insns.len();
    let mut starts = vec![false; n];
    for (i, x) in insns.iter().enumerate() {
        if x.code == (class::JMP | 0x80) && x.src == pseudo::CALL {
            let t = target(i, i64::from(x.imm), n).ok_or(JitError::BadTarget { insn: i })?;
            starts[t] = true;
        }
    }
    let mut main = true;
    Ok((0..n)
        .map(|i| {
            if starts[i] && i > 0 {
                main = false;
            }
            main
        })
        .collect())
}

fn target(i: usize, rel: i64, n: usize) -> Option<usize> {
    let t = i as i64 + 1 + rel;
    (0..n as i64).contains(&t).then_some(t as usize)
}

fn size_of(code: u8) -> Size {
    match code & 0x18 {
        0x00 => Size::W,
        0x08 => Size::H,
        0x10 => Size::B,
        _ => Size::Dw,
    }
}

/// Where jumps go: code offsets of instruction starts, the previous pass's for forward targets.
struct Targets<'a> {
    cur: &'a [usize],
    prev: Option<&'a [usize]>,
    i: usize,
}

impl Targets<'_> {
    /// The (possibly estimated) code offset of instruction `t`; `None` in the first pass.
    fn addr(&self, t: usize) -> Option<usize> {
        if t <= self.i { Some(self.cur[t]) } else { self.prev.map(|p| p[t]) }
    }
}

fn jump_to(a: &mut Asm, cond: Option<u8>, t: &Targets<'_>, to: usize) {
    match t.addr(to) {
        None => a.jump(cond, false, 0),
        Some(dest) => {
            let short_rel = dest as i64 - (a.pos() + Asm::jump_len(cond, true)) as i64;
            if i8::try_from(short_rel).is_ok() {
                a.jump(cond, true, short_rel);
            } else {
                let rel = dest as i64 - (a.pos() + Asm::jump_len(cond, false)) as i64;
                a.jump(cond, false, rel);
            }
        }
    }
}

fn prologue(a: &mut Asm) {
    for r in [x86::RBP, x86::RBX, x86::R12, x86::R13, x86::R14, x86::R15] {
        a.push(r);
    }
    // Entry rsp is 8 mod 16; seven pushes make it 0 mod 16 for the body. r12 = &env slot,
    // which also tells the epilogue where the saved registers are from any call depth.
    a.push(x86::RSI);
    a.mov_rr(true, ENV, x86::RSP);
    a.mov_rr(true, x86::RBP, x86::RDX);
    a.mov_ri(false, x86::RAX, 0);
}

fn epilogue(a: &mut Asm) {
    a.lea(x86::RSP, ENV, 8);
    for r in [x86::R15, x86::R14, x86::R13, x86::R12, x86::RBX, x86::RBP] {
        a.pop(r);
    }
    a.ret();
}

/// One pass over the program; returns the code and the start offset of every instruction
/// (index `n` is the epilogue).
/// For each `call bpf_map_lookup_elem`, the array map it looks up when r1 is certainly the
/// address of one of `env.arrays` (set by an `lddw` earlier in the same basic block).
fn inline_lookups(insns: &[Insn], env: &CodeEnv) -> Result<Vec<Option<ArrayInline>>, JitError> {
    let n = insns.len();
    let mut out = vec![None; n];
    if env.arrays.is_empty() {
        return Ok(out);
    }
    // Instructions control can reach other than from the one before: jump and call targets.
    let mut entry = vec![false; n + 1];
    for (i, x) in insns.iter().enumerate() {
        let jmp = matches!(x.class(), class::JMP | class::JMP32);
        let op = x.code & 0xf0;
        if !jmp || op == 0x90 || (op == 0x80 && x.src != pseudo::CALL) {
            continue;
        }
        let rel = if op == 0x80 || (op == 0x00 && x.class() == class::JMP32) {
            i64::from(x.imm)
        } else {
            i64::from(x.off)
        };
        let t = target(i, rel, n).ok_or(JitError::BadTarget { insn: i })?;
        entry[t] = true;
    }
    for (i, x) in insns.iter().enumerate() {
        if x.code != 0x85 || x.src != 0 || x.imm != helpers::MAP_LOOKUP_ELEM as i32 {
            continue;
        }
        let mut k = i;
        while k > 0 && !entry[k] {
            k -= 1;
            let y = insns[k];
            if k > 0 && insns[k - 1].code == 0x18 && y.code == 0 {
                continue; // second half of an lddw; its first half is looked at next
            }
            let writes_r1 = match y.class() {
                class::ALU | class::ALU64 | class::LD | class::LDX => y.dst == 1,
                class::STX => y.code & 0xe0 == 0xc0 && y.src == 1 && y.imm & 1 != 0,
                class::JMP | class::JMP32 => matches!(y.code & 0xf0, 0x80 | 0x90),
                _ => false,
            };
            if writes_r1 {
                if y.code == 0x18 && y.src == 0 && y.dst == 1 {
                    let v = u64::from(y.imm as u32) | (u64::from(insns[k + 1].imm as u32) << 32);
                    out[i] = env.arrays.iter().find(|(addr, _)| *addr == v).map(|(_, a)| *a);
                }
                break;
            }
        }
    }
    Ok(out)
}

/// `r0 = key < max ? base + key * stride : 0`, key the u32 at r2: the array map lookup.
fn array_lookup(a: &mut Asm, m: ArrayInline) {
    a.load(Size::W, x86::RAX, x86::RSI, 0);
    a.alu_ri(Alu::Cmp, false, x86::RAX, m.max as i32);
    let null = a.jump8_fwd(Some(cc::AE));
    if m.stride.is_power_of_two() {
        a.shift_ri(Shift::Shl, true, x86::RAX, m.stride.trailing_zeros() as u8);
    } else {
        a.imul_ri(true, x86::RAX, m.stride as i32);
    }
    a.mov_ri64(AUX, m.base);
    a.alu_rr(Alu::Add, true, x86::RAX, AUX);
    let done = a.jump8_fwd(None);
    a.patch8(null);
    a.mov_ri(false, x86::RAX, 0);
    a.patch8(done);
}

fn pass(
    insns: &[Insn],
    main: &[bool],
    inline: &[Option<ArrayInline>],
    helper: u64,
    prev: Option<&[usize]>,
) -> Result<(Vec<u8>, Vec<usize>), JitError> {
    let n = insns.len();
    let mut a = Asm::default();
    prologue(&mut a);
    let mut starts = vec![0usize; n + 1];
    let mut i = 0;
    while i < n {
        starts[i] = a.pos();
        let x = insns[i];
        let bad = |what| JitError::Opcode { insn: i, code: x.code, what };
        if x.dst > 10 || x.src > 10 {
            return Err(bad("register out of range"));
        }
        let t = Targets { cur: &starts, prev, i };
        let mut step = 1;
        match x.class() {
            class::ALU | class::ALU64 => alu(&mut a, x, x.class() == class::ALU64).map_err(bad)?,
            class::LD => {
                if x.code != 0x18 || x.src != 0 {
                    return Err(bad("only plain lddw is supported (legacy packet loads are not)"));
                }
                let hi = insns.get(i + 1).ok_or(bad("lddw without its second half"))?;
                let v = u64::from(x.imm as u32) | (u64::from(hi.imm as u32) << 32);
                a.mov_ri64(REG[x.dst as usize], v);
                step = 2;
            }
            class::LDX => {
                let size = size_of(x.code);
                let (d, s, off) = (REG[x.dst as usize], REG[x.src as usize], i32::from(x.off));
                match x.code & 0xe0 {
                    0x60 => a.load(size, d, s, off),
                    0x80 if size != Size::Dw => a.load_sx(size, d, s, off),
                    _ => return Err(bad("unsupported load mode")),
                }
            }
            class::ST => {
                if x.code & 0xe0 != 0x60 {
                    return Err(bad("unsupported store mode"));
                }
                a.store_imm(size_of(x.code), REG[x.dst as usize], i32::from(x.off), x.imm);
            }
            class::STX => {
                let size = size_of(x.code);
                let (d, s, off) = (REG[x.dst as usize], REG[x.src as usize], i32::from(x.off));
                match x.code & 0xe0 {
                    0x60 => a.store(size, d, off, s),
                    0xc0 if matches!(size, Size::W | Size::Dw) => {
                        atomic(&mut a, size == Size::Dw, d, off, s, x.imm).map_err(bad)?
                    }
                    _ => return Err(bad("unsupported store mode or atomic size")),
                }
            }
            class::JMP | class::JMP32 => {
                let w = x.class() == class::JMP;
                let op = x.code & 0xf0;
                match op {
                    0x00 => {
                        let rel = if w { i64::from(x.off) } else { i64::from(x.imm) };
                        let to = target(i, rel, n).ok_or(JitError::BadTarget { insn: i })?;
                        check_target(insns, to, i)?;
                        jump_to(&mut a, None, &t, to);
                    }
                    0x80 if w => {
                        if x.code & 0x08 != 0 {
                            return Err(bad("call by register is not supported"));
                        }
                        match x.src {
                            0 if let Some(m) = inline[i] => array_lookup(&mut a, m),
                            0 => {
                                helper_call(&mut a, helper, x.imm as u32);
                                // A faulting helper ends the run here, as in the interpreter.
                                a.test_rr(true, x86::RDX, x86::RDX);
                                jump_to(&mut a, Some(cc::NE), &t, n);
                            }
                            pseudo::CALL => {
                                let to = target(i, i64::from(x.imm), n)
                                    .ok_or(JitError::BadTarget { insn: i })?;
                                local_call(&mut a, &t, to);
                            }
                            _ => return Err(bad("kfunc calls are not supported")),
                        }
                    }
                    0x90 if w => {
                        if main[i] {
                            jump_to(&mut a, None, &t, n);
                        } else {
                            a.ret();
                        }
                    }
                    _ => {
                        let cond = condition(op).ok_or(bad("unknown jump operation"))?;
                        let d = REG[x.dst as usize];
                        if x.code & 0x08 != 0 {
                            let s = REG[x.src as usize];
                            if op == 0x40 {
                                a.test_rr(w, d, s);
                            } else {
                                a.alu_rr(Alu::Cmp, w, d, s);
                            }
                        } else if op == 0x40 {
                            a.test_ri(w, d, x.imm);
                        } else {
                            a.alu_ri(Alu::Cmp, w, d, x.imm);
                        }
                        let to = target(i, i64::from(x.off), n)
                            .ok_or(JitError::BadTarget { insn: i })?;
                        check_target(insns, to, i)?;
                        jump_to(&mut a, Some(cond), &t, to);
                    }
                }
            }
            _ => return Err(bad("unknown instruction class")),
        }
        if step == 2 {
            starts[i + 1] = a.pos();
        }
        i += step;
    }
    starts[n] = a.pos();
    epilogue(&mut a);
    Ok((a.code, starts))
}

/// A jump into the second half of an `lddw` has no code of its own.
fn check_target(insns: &[Insn], to: usize, i: usize) -> Result<(), JitError> {
    if to > 0 && insns[to - 1].code == 0x18 {
        // Only a real lddw start makes `to` a second half; walk from the start to be sure.
        let mut k = 0;
        while k < to {
            k += if insns[k].code == 0x18 { 2 } else { 1 };
        }
        if k != to {
            return Err(JitError::BadTarget { insn: i });
        }
    }
    Ok(())
}

fn condition(op: u8) -> Option<u8> {
    Some(match op {
        0x10 => cc::E,
        0x20 => cc::A,
        0x30 => cc::AE,
        0x40 | 0x50 => cc::NE,
        0x60 => cc::G,
        0x70 => cc::GE,
        0xa0 => cc::B,
        0xb0 => cc::BE,
        0xc0 => cc::L,
        0xd0 => cc::LE,
        _ => return None,
    })
}

fn helper_call(a: &mut Asm, helper: u64, id: u32) {
    // trampoline(env, id, r1, r2, r3, r4, r5): r5 (r8) goes to the stack, padded to keep the
    // 16-byte alignment; then r4 -> r9, r3 -> r8, r2 -> rcx, r1 -> rdx, in an order that reads
    // every BPF register before overwriting it.
    a.alu_ri(Alu::Sub, true, x86::RSP, 8);
    a.push(x86::R8);
    a.mov_rr(true, x86::R9, x86::RCX);
    a.mov_rr(true, x86::R8, x86::RDX);
    a.mov_rr(true, x86::RCX, x86::RSI);
    a.mov_rr(true, x86::RDX, x86::RDI);
    a.load(Size::Dw, x86::RDI, ENV, 0);
    a.mov_ri(false, x86::RSI, id as i32);
    a.mov_ri64(x86::RAX, helper);
    a.call_r(x86::RAX);
    a.alu_ri(Alu::Add, true, x86::RSP, 16);
}

fn local_call(a: &mut Asm, t: &Targets<'_>, to: usize) {
    // Keep the caller's r6-r10 on the native stack, open the next BPF frame below the
    // caller's (r10 -= 512, as the interpreter does), call, restore. Five pushes and the return
    // address keep the callee's rsp 16-byte aligned.
    for r in [x86::RBX, x86::R13, x86::R14, x86::R15, x86::RBP] {
        a.push(r);
    }
    a.alu_ri(Alu::Sub, true, x86::RBP, FRAME);
    a.call_rel(t.addr(to).unwrap_or(0));
    for r in [x86::RBP, x86::R15, x86::R14, x86::R13, x86::RBX] {
        a.pop(r);
    }
}

/// ALU and ALU64 instructions; `w` = 64-bit.
fn alu(a: &mut Asm, x: Insn, w: bool) -> Result<(), &'static str> {
    let d = REG[x.dst as usize];
    let reg_src = x.code & 0x08 != 0;
    let s = REG[x.src as usize];
    let op = x.code & 0xf0;
    let simple = |op| match op {
        0x00 => Some(Alu::Add),
        0x10 => Some(Alu::Sub),
        0x40 => Some(Alu::Or),
        0x50 => Some(Alu::And),
        0xa0 => Some(Alu::Xor),
        _ => None,
    };
    if op != 0x30 && op != 0x90 && op != 0xb0 && x.off != 0 {
        return Err("nonzero offset on an ALU instruction");
    }
    if let Some(o) = simple(op) {
        if reg_src {
            a.alu_rr(o, w, d, s);
        } else {
            a.alu_ri(o, w, d, x.imm);
        }
        return Ok(());
    }
    match op {
        0x20 => {
            if reg_src {
                a.imul_rr(w, d, s);
            } else {
                a.imul_ri(w, d, x.imm);
            }
        }
        0x30 | 0x90 => {
            if x.off != 0 && x.off != 1 {
                return Err("bad offset on div/mod");
            }
            divmod(a, w, op == 0x90, x.off == 1, d, reg_src.then_some(s), x.imm);
        }
        0x60 | 0x70 | 0xc0 => {
            let sh = match op {
                0x60 => Shift::Shl,
                0x70 => Shift::Shr,
                _ => Shift::Sar,
            };
            if reg_src {
                shift_cl(a, sh, w, d, s);
            } else {
                let n = (x.imm as u8) & if w { 63 } else { 31 };
                if n == 0 {
                    if !w {
                        a.mov_rr(false, d, d);
                    }
                } else {
                    a.shift_ri(sh, w, d, n);
                }
            }
        }
        0x80 => {
            if reg_src {
                return Err("neg with a register source");
            }
            a.neg(w, d);
        }
        0xb0 => {
            if reg_src {
                match (x.off, w) {
                    (0, _) => a.mov_rr(w, d, s),
                    (8 | 16, _) | (32, true) => a.movsx_rr(w, x.off as u8, d, s),
                    _ => return Err("bad sign-extension width on mov"),
                }
            } else {
                if x.off != 0 {
                    return Err("nonzero offset on mov immediate");
                }
                a.mov_ri(w, d, x.imm);
            }
        }
        0xd0 => {
            // ALU64 END is the unconditional byte swap; ALU END swaps for "to big endian".
            let be = w || reg_src;
            match x.imm {
                16 => {
                    if be {
                        a.rol16_8(d);
                    }
                    a.movzx16(d, d);
                }
                32 => {
                    if be {
                        a.bswap(false, d);
                    } else {
                        a.mov_rr(false, d, d);
                    }
                }
                64 => {
                    if be {
                        a.bswap(true, d);
                    }
                }
                _ => return Err("bad byte-swap width"),
            }
        }
        _ => return Err("unknown ALU operation"),
    }
    Ok(())
}

/// `d <<= s` (or >>) with the count in cl; BPF r4 (rcx) is kept in r11 around it.
fn shift_cl(a: &mut Asm, sh: Shift, w: bool, d: u8, s: u8) {
    if s == x86::RCX && d != x86::RCX {
        a.shift_cl(sh, w, d);
        if !w {
            a.mov_rr(false, d, d);
        }
        return;
    }
    a.mov_rr(true, AUX, x86::RCX);
    a.mov_rr(true, x86::RCX, s);
    let on = if d == x86::RCX { AUX } else { d };
    a.shift_cl(sh, w, on);
    if !w {
        a.mov_rr(false, on, on);
    }
    // Either the shifted value (d was rcx) or the saved rcx goes back.
    a.mov_rr(true, x86::RCX, AUX);
}

/// Division and modulo with BPF's rules: `/0` = 0, `%0` = dst (zero-extended for 32 bits),
/// signed `MIN / -1` = MIN, `MIN % -1` = 0.
fn divmod(a: &mut Asm, w: bool, modulo: bool, signed: bool, d: u8, s: Option<u8>, imm: i32) {
    // rax and rdx (BPF r0 and r3) are needed by div; keep them in r10 and r9.
    a.mov_rr(true, AUX2, x86::RAX);
    a.mov_rr(true, AUX3, x86::RDX);
    match s {
        Some(s) => a.mov_rr(true, AUX, s),
        None => a.mov_ri(w, AUX, imm),
    }
    if d != x86::RAX {
        a.mov_rr(true, x86::RAX, d);
    }
    a.test_rr(w, AUX, AUX);
    let nonzero = a.jump8_fwd(Some(cc::NE));
    if modulo {
        if !w {
            a.mov_rr(false, x86::RAX, x86::RAX);
        }
    } else {
        a.mov_ri(false, x86::RAX, 0);
    }
    let done_zero = a.jump8_fwd(None);
    a.patch8(nonzero);
    let mut done_minus1 = None;
    if signed {
        a.alu_ri(Alu::Cmp, w, AUX, -1);
        let normal = a.jump8_fwd(Some(cc::NE));
        if modulo {
            a.mov_ri(false, x86::RAX, 0);
        } else {
            a.neg(w, x86::RAX);
        }
        done_minus1 = Some(a.jump8_fwd(None));
        a.patch8(normal);
        a.cqo(w);
    } else {
        a.mov_ri(false, x86::RDX, 0);
    }
    a.div(w, signed, AUX);
    if modulo {
        a.mov_rr(true, x86::RAX, x86::RDX);
    }
    a.patch8(done_zero);
    if let Some(j) = done_minus1 {
        a.patch8(j);
    }
    a.mov_rr(true, AUX, x86::RAX);
    a.mov_rr(true, x86::RAX, AUX2);
    a.mov_rr(true, x86::RDX, AUX3);
    a.mov_rr(true, d, AUX);
}

/// `STX | ATOMIC`: `imm` selects the operation (kernel encoding).
fn atomic(a: &mut Asm, w: bool, d: u8, off: i32, s: u8, imm: i32) -> Result<(), &'static str> {
    const FETCH: i32 = 0x01;
    let op = match imm & !FETCH {
        0x00 => Some(Alu::Add),
        0x40 => Some(Alu::Or),
        0x50 => Some(Alu::And),
        0xa0 => Some(Alu::Xor),
        _ => None,
    };
    match (op, imm & FETCH != 0) {
        (Some(o), false) => a.lock_alu_mem(o, w, d, off, s),
        (Some(Alu::Add), true) => a.lock_xadd(w, d, off, s),
        (Some(o), true) => {
            // Loop: rax = old; new = old op s; lock cmpxchg until no one raced us; s = old.
            a.mov_rr(true, AUX2, x86::RAX);
            a.mov_rr(true, AUX3, d);
            let sv = if s == x86::RAX { AUX2 } else { s };
            a.load(if w { Size::Dw } else { Size::W }, x86::RAX, AUX3, off);
            let top = a.pos();
            a.mov_rr(true, AUX, x86::RAX);
            a.alu_rr(o, w, AUX, sv);
            a.lock_cmpxchg(w, AUX3, off, AUX);
            a.jump8_back(Some(cc::NE), top);
            // With s = r0 the old value is already in rax (zero-extended for 32 bits).
            if s != x86::RAX {
                a.mov_rr(w, s, x86::RAX);
                a.mov_rr(true, x86::RAX, AUX2);
            }
        }
        (None, _) if imm == 0xe1 => a.xchg_mem(w, d, off, s),
        (None, _) if imm == 0xf1 => {
            a.lock_cmpxchg(w, d, off, s);
            if !w {
                a.mov_rr(false, x86::RAX, x86::RAX);
            }
        }
        _ => return Err("unknown atomic operation"),
    }
    Ok(())
}
