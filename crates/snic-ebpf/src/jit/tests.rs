//! Instruction-level tests of the JIT: each opcode family against Rust's own arithmetic, with
//! every register as operand (rax, rcx and rdx are special to x86's div and shifts).

use super::*;
use crate::maps::MapSet;
use crate::object::ProgKind;
use crate::vm::{Worker, interpret, prepare_insns};
use proptest::prelude::*;
use snic_pipeline::PacketBuf;

fn ins(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { code, dst, src, off, imm }
}

fn lddw(dst: u8, v: u64) -> [Insn; 2] {
    [ins(0x18, dst, 0, 0, v as u32 as i32), ins(0, 0, 0, 0, (v >> 32) as u32 as i32)]
}

fn mov64(dst: u8, src: u8) -> Insn {
    ins(0xbf, dst, src, 0, 0)
}

const EXIT: Insn = Insn { code: 0x95, dst: 0, src: 0, off: 0, imm: 0 };

/// A test helper: checks the environment pointer and mixes its arguments into the result.
/// Helper id 99 faults.
extern "C" fn test_helper(
    env: *mut u8,
    id: u64,
    r1: u64,
    r2: u64,
    r3: u64,
    r4: u64,
    r5: u64,
) -> HelperRet {
    if env as usize != 0x1234_5678 {
        return HelperRet { r0: u64::MAX, fault: 0 };
    }
    HelperRet { r0: helper_expect(id, [r1, r2, r3, r4, r5]), fault: u64::from(id == 99) }
}

fn helper_expect(id: u64, r: [u64; 5]) -> u64 {
    id.wrapping_mul(1_000_003)
        ^ r[0].rotate_left(1)
        ^ r[1].rotate_left(7)
        ^ r[2].rotate_left(13)
        ^ r[3].rotate_left(29)
        ^ r[4].rotate_left(41)
}

fn run(prog: &[Insn], ctx: &mut [u8]) -> u64 {
    let j = JitProgram::compile_insns(prog, test_helper as *const () as usize as u64)
        .expect("compiles");
    let mut stack = vec![0u64; crate::vm::STACK_SIZE / 8];
    let top = stack.as_mut_ptr_range().end as u64;
    // SAFETY: the test programs only touch their stack frames (inside `stack`) and `ctx`
    // within its length; the helper is `test_helper`, which dereferences nothing.
    unsafe { j.call_raw(ctx.as_mut_ptr(), 0x1234_5678 as *mut u8, top) }
}

/// BPF ALU semantics, written plainly in Rust.
fn alu_ref(op: u8, w: bool, signed: bool, a: u64, b: u64) -> u64 {
    if w {
        match op {
            0x00 => a.wrapping_add(b),
            0x10 => a.wrapping_sub(b),
            0x20 => a.wrapping_mul(b),
            0x30 if b == 0 => 0,
            0x30 if signed => (a as i64).wrapping_div(b as i64) as u64,
            0x30 => a / b,
            0x90 if b == 0 => a,
            0x90 if signed => (a as i64).wrapping_rem(b as i64) as u64,
            0x90 => a % b,
            0x40 => a | b,
            0x50 => a & b,
            0x60 => a.wrapping_shl(b as u32),
            0x70 => a.wrapping_shr(b as u32),
            0xc0 => (a as i64).wrapping_shr(b as u32) as u64,
            0xa0 => a ^ b,
            0xb0 => b,
            _ => unreachable!(),
        }
    } else {
        let (a, b) = (a as u32, b as u32);
        u64::from(match op {
            0x00 => a.wrapping_add(b),
            0x10 => a.wrapping_sub(b),
            0x20 => a.wrapping_mul(b),
            0x30 if b == 0 => 0,
            0x30 if signed => (a as i32).wrapping_div(b as i32) as u32,
            0x30 => a / b,
            0x90 if b == 0 => a,
            0x90 if signed => (a as i32).wrapping_rem(b as i32) as u32,
            0x90 => a % b,
            0x40 => a | b,
            0x50 => a & b,
            0x60 => a.wrapping_shl(b),
            0x70 => a.wrapping_shr(b),
            0xc0 => (a as i32).wrapping_shr(b) as u32,
            0xa0 => a ^ b,
            0xb0 => b,
            _ => unreachable!(),
        })
    }
}

const ALU_OPS: [u8; 13] =
    [0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x90, 0xa0, 0xb0, 0xc0, 0x30];

fn edge() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(i64::MIN as u64),
        Just(i32::MIN as u32 as u64),
        Just(u32::MAX as u64),
        Just(0xffff_ffff_8000_0000),
        Just(63),
        Just(64),
        Just(31),
        Just(32),
        any::<u64>(),
    ]
}

/// Runs `dst op= src` with the operands in registers `d` and `s` (every other register holds a
/// known value) and returns register `r` afterwards: `r = d` gives the result, any other `r`
/// shows whether the translation clobbered it.
fn alu_case(
    code: u8,
    off: i16,
    (d, s): (u8, u8),
    (a, b): (u64, u64),
    imm: Option<i32>,
    r: u8,
) -> u64 {
    let mut p = Vec::new();
    for k in 0..10u8 {
        p.extend(lddw(k, filler(k)));
    }
    p.extend(lddw(s, b));
    p.extend(lddw(d, a));
    p.push(ins(code, d, if imm.is_some() { 0 } else { s }, off, imm.unwrap_or(0)));
    p.push(mov64(0, r));
    p.push(EXIT);
    run(&p, &mut [0u8; 8])
}

fn filler(r: u8) -> u64 {
    0x0101_0101_0101_0101u64.wrapping_mul(u64::from(r) + 1)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn alu_register_forms_match_rust(
        opi in 0usize..ALU_OPS.len(), w in any::<bool>(), signed in any::<bool>(),
        d in 0u8..10, s in 0u8..10, a in edge(), b in edge(), other in 0u8..10,
    ) {
        let op = ALU_OPS[opi];
        let signed = signed && (op == 0x30 || op == 0x90);
        let code = op | 0x08 | if w { class::ALU64 } else { class::ALU };
        let off = i16::from(signed);
        // With d == s both operands are the same register.
        let b_eff = if d == s { a } else { b };
        let want = alu_ref(op, w, signed, a, b_eff);
        prop_assert_eq!(alu_case(code, off, (d, s), (a, b), None, d), want, "op {:#x} w {} r{} r{}", op, w, d, s);
        if other != d {
            let keep = if other == s { b } else { filler(other) };
            prop_assert_eq!(alu_case(code, off, (d, s), (a, b), None, other), keep, "r{} clobbered", other);
        }
    }

    #[test]
    fn alu_immediate_forms_match_rust(
        opi in 0usize..ALU_OPS.len(), w in any::<bool>(), signed in any::<bool>(),
        d in 0u8..10, a in edge(), imm in prop_oneof![Just(0i32), Just(-1), Just(i32::MIN), Just(1), Just(31), Just(63), any::<i32>()],
    ) {
        let op = ALU_OPS[opi];
        let signed = signed && (op == 0x30 || op == 0x90);
        let code = op | if w { class::ALU64 } else { class::ALU };
        let imm = if matches!(op, 0x60 | 0x70 | 0xc0) { imm & if w { 63 } else { 31 } } else { imm };
        let b = if w { imm as i64 as u64 } else { u64::from(imm as u32) };
        let want = alu_ref(op, w, signed, a, b);
        prop_assert_eq!(alu_case(code, i16::from(signed), (d, 0), (a, 0), Some(imm), d), want, "op {:#x} w {} imm {}", op, w, imm);
    }

    #[test]
    fn jumps_match_rust(
        opi in 0usize..11, w in any::<bool>(), d in 0u8..10, s in 0u8..10,
        a in edge(), b in edge(), use_imm in any::<bool>(), imm in any::<i32>(),
    ) {
        let ops = [0x10u8, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0xa0, 0xb0, 0xc0, 0xd0];
        let op = ops[opi];
        let b = if d == s { a } else { b };
        let (x, y) = if use_imm {
            (a, if w { imm as i64 as u64 } else { u64::from(imm as u32) })
        } else {
            (a, b)
        };
        let (x, y) = if w { (x, y) } else { (u64::from(x as u32), u64::from(y as u32)) };
        let (sx, sy) = if w { (x as i64, y as i64) } else { (i64::from(x as u32 as i32), i64::from(y as u32 as i32)) };
        let taken = match op {
            0x10 => x == y, 0x20 => x > y, 0x30 => x >= y, 0x40 => x & y != 0, 0x50 => x != y,
            0x60 => sx > sy, 0x70 => sx >= sy, 0xa0 => x < y, 0xb0 => x <= y,
            0xc0 => sx < sy, _ => sx <= sy,
        };
        let mut p = Vec::new();
        p.extend(lddw(s, b));
        p.extend(lddw(d, a));
        let code = op | if w { class::JMP } else { class::JMP32 } | if use_imm { 0 } else { 0x08 };
        p.push(ins(code, d, if use_imm { 0 } else { s }, 2, imm));
        p.push(ins(0xb7, 0, 0, 0, 0));
        p.push(EXIT);
        p.push(ins(0xb7, 0, 0, 0, 1));
        p.push(EXIT);
        prop_assert_eq!(run(&p, &mut [0u8; 8]) == 1, taken);
    }

    #[test]
    fn loads_and_stores_on_stack_and_ctx(v in any::<u64>(), off in 0i16..56, d in 1u8..9) {
        let mut ctx = [0u8; 64];
        ctx[off as usize..off as usize + 8].copy_from_slice(&v.to_le_bytes());
        let mut want = Vec::new();
        let mut p = vec![mov64(9, 1)];
        // Each width, zero- and sign-extending, from ctx into dst then through the stack.
        for (k, (sz, mode)) in [(0x18u8, 0x60u8), (0x00, 0x60), (0x08, 0x60), (0x10, 0x60), (0x00, 0x80), (0x08, 0x80), (0x10, 0x80)].into_iter().enumerate() {
            p.push(ins(class::LDX | sz | mode, d, 9, off, 0));
            p.push(ins(class::STX | 0x18 | 0x60, 10, d, -8 * (k as i16 + 1), 0));
            let x = match (sz, mode) {
                (0x18, _) => v,
                (0x00, 0x60) => v as u32 as u64,
                (0x08, 0x60) => v as u16 as u64,
                (0x10, 0x60) => v as u8 as u64,
                (0x00, _) => v as u32 as i32 as i64 as u64,
                (0x08, _) => v as u16 as i16 as i64 as u64,
                _ => v as u8 as i8 as i64 as u64,
            };
            want.push(x);
        }
        // Narrow stores (register and immediate) into ctx[0..8].
        p.push(ins(class::STX | 0x10 | 0x60, 9, d, 0, 0));
        p.push(ins(class::ST | 0x08 | 0x60, 9, 0, 2, -2));
        p.push(ins(class::ST | 0x60, 9, 0, 4, 0x1234_5678));
        // Sum the stack slots into r0 with a mix so order matters.
        p.push(ins(0xb7, 0, 0, 0, 0));
        for k in 0..want.len() {
            p.push(ins(0x79, 2, 10, -8 * (k as i16 + 1), 0));
            p.push(ins(0x27, 0, 0, 0, 31));
            p.push(ins(0x0f, 0, 2, 0, 0));
        }
        p.push(EXIT);
        let got = run(&p, &mut ctx);
        let expect = want.iter().fold(0u64, |acc, x| acc.wrapping_mul(31).wrapping_add(*x));
        prop_assert_eq!(got, expect);
        prop_assert_eq!(ctx[0], want[6] as u8);
        prop_assert_eq!(u16::from_le_bytes([ctx[2], ctx[3]]), 0xfffe);
        prop_assert_eq!(u32::from_le_bytes(ctx[4..8].try_into().unwrap()), 0x1234_5678);
    }

    #[test]
    fn atomics_match_rust(
        opi in 0usize..10, w in any::<bool>(), d in 0u8..10, s in 0u8..10,
        mem in any::<u64>(), val in any::<u64>(), r0 in any::<u64>(),
    ) {
        prop_assume!(d != s);
        let ops = [0x00i32, 0x40, 0x50, 0xa0, 0x01, 0x41, 0x51, 0xa1, 0xe1, 0xf1];
        let imm = ops[opi];
        // r0 is the comparand of cmpxchg, so it must not be the address or value register.
        prop_assume!(imm != 0xf1 || (d != 0 && s != 0));
        let mut ctx = [0u8; 16];
        ctx[8..16].copy_from_slice(&mem.to_le_bytes());
        let r0 = if imm == 0xf1 && val & 1 == 0 { mem } else { r0 }; // make cmpxchg succeed sometimes
        let mut p = Vec::new();
        p.extend(lddw(0, r0));
        p.push(mov64(d, 1));
        p.extend(lddw(s, val));
        p.push(ins(class::STX | 0xc0 | if w { 0x18 } else { 0x00 }, d, s, 8, imm));
        p.push(ins(0x7b, 10, 0, -8, 0));
        p.push(mov64(0, s));
        p.push(EXIT);
        let got_s = run(&p.clone(), &mut ctx.clone());
        let mut p0 = p.clone();
        let n = p0.len();
        p0[n - 2] = ins(0x79, 0, 10, -8, 0);
        let got_r0 = run(&p0, &mut ctx);
        let got_mem = u64::from_le_bytes(ctx[8..16].try_into().unwrap());
        let mask = if w { u64::MAX } else { u64::from(u32::MAX) };
        let (old, v) = (mem & mask, val & mask);
        let new = match imm & !1 {
            0x00 => old.wrapping_add(v) & mask,
            0x40 => old | v,
            0x50 => old & v,
            0xa0 => old ^ v,
            0xe0 => v,
            _ => if old == r0 & mask { v } else { old },
        };
        prop_assert_eq!(got_mem, (mem & !mask) | new, "memory");
        let fetch = imm & 1 != 0 && imm != 0xf1;
        prop_assert_eq!(got_s, if fetch { old } else { val }, "src register");
        if imm == 0xf1 {
            prop_assert_eq!(got_r0, old, "r0 after cmpxchg");
        } else if s == 0 {
            prop_assert_eq!(got_r0, got_s, "r0 is the source");
        } else if d != 0 {
            prop_assert_eq!(got_r0, r0, "r0 untouched");
        }
    }

    #[test]
    fn helper_calls_pass_r1_to_r5_and_the_env(r in any::<[u64; 5]>(), id in 1u32..99, keep in any::<[u64; 4]>()) {
        let mut p = Vec::new();
        for (k, v) in r.iter().enumerate() {
            p.extend(lddw(k as u8 + 1, *v));
        }
        for (k, v) in keep.iter().enumerate() {
            p.extend(lddw(k as u8 + 6, *v));
        }
        p.push(ins(0x85, 0, 0, 0, id as i32));
        // r6..r9 survive the call.
        for k in 6..10u8 {
            p.push(ins(0x27, 0, 0, 0, 3));
            p.push(ins(0x0f, 0, k, 0, 0));
        }
        p.push(EXIT);
        let want = keep.iter().fold(helper_expect(u64::from(id), r), |acc, x| acc.wrapping_mul(3).wrapping_add(*x));
        prop_assert_eq!(run(&p, &mut [0u8; 8]), want);
    }
}

#[test]
fn a_faulting_helper_ends_the_run_there() {
    // r6 = ctx; call 98 (fine); ctx[0] = 1; call 99 (faults); ctx[1] = 1; exit
    let mut p = vec![mov64(6, 1)];
    p.push(ins(0x85, 0, 0, 0, 98));
    p.push(ins(0x72, 6, 0, 0, 1));
    p.push(ins(0x85, 0, 0, 0, 99));
    p.push(ins(0x72, 6, 0, 1, 1));
    p.push(ins(0xb7, 0, 0, 0, 2));
    p.push(EXIT);
    let mut ctx = [0u8; 8];
    run(&p, &mut ctx);
    assert_eq!(ctx[..2], [1, 0]);
}

#[test]
fn byte_swaps_and_sign_extending_moves() {
    let v = 0x1122_3344_5566_8788u64;
    let cases: [(Insn, u64); 12] = [
        (ins(0xd4, 1, 0, 0, 16), 0x8788),
        (ins(0xd4, 1, 0, 0, 32), 0x5566_8788),
        (ins(0xd4, 1, 0, 0, 64), v),
        (ins(0xdc, 1, 0, 0, 16), 0x8887),
        (ins(0xdc, 1, 0, 0, 32), 0x8887_6655),
        (ins(0xdc, 1, 0, 0, 64), v.swap_bytes()),
        (ins(0xd7, 1, 0, 0, 16), 0x8887),
        (ins(0xd7, 1, 0, 0, 64), v.swap_bytes()),
        (ins(0xbf, 1, 2, 8, 0), 0xffff_ffff_ffff_ff88),
        (ins(0xbf, 1, 2, 16, 0), 0xffff_ffff_ffff_8788),
        (ins(0xbf, 1, 2, 32, 0), 0x5566_8788),
        (ins(0xbc, 1, 2, 8, 0), 0xffff_ff88),
    ];
    for (x, want) in cases {
        let mut p = Vec::new();
        p.extend(lddw(1, v));
        p.extend(lddw(2, v));
        p.push(x);
        p.push(mov64(0, 1));
        p.push(EXIT);
        assert_eq!(run(&p, &mut [0u8; 8]), want, "{x:?}");
    }
}

#[test]
fn bpf_to_bpf_calls_get_their_own_frame_and_keep_r6_to_r9() {
    // main: r6 = 7, stack[-8] = 100, r1 = 5, call f, r0 += r6 + stack[-8]
    // f:    r6 = 1000, stack[-8] = 2000 (its own frame), r0 = r1 * 2 + stack[-8]
    let p = vec![
        ins(0xb7, 6, 0, 0, 7),
        ins(0x7a, 10, 0, -8, 100),
        ins(0xb7, 1, 0, 0, 5),
        ins(0x85, 0, 1, 0, 4), // call f (insn 8)
        ins(0x0f, 0, 6, 0, 0),
        ins(0x79, 2, 10, -8, 0),
        ins(0x0f, 0, 2, 0, 0),
        EXIT,
        ins(0xb7, 6, 0, 0, 1000),
        ins(0x7a, 10, 0, -8, 2000),
        mov64(0, 1),
        ins(0x27, 0, 0, 0, 2),
        ins(0x79, 3, 10, -8, 0),
        ins(0x0f, 0, 3, 0, 0),
        EXIT,
    ];
    assert_eq!(run(&p, &mut [0u8; 8]), 5 * 2 + 2000 + 7 + 100);
}

#[test]
fn long_jumps_use_near_encodings() {
    // A forward jump over 100 wide adds needs rel32; the loop after it uses rel8.
    let mut p = vec![ins(0xb7, 0, 0, 0, 0), ins(0xb7, 1, 0, 0, 3)];
    p.push(ins(0x05, 0, 0, 100, 0));
    p.extend((0..100).map(|_| ins(0x07, 0, 0, 0, 1000)));
    // loop: r0 += 1; r1 -= 1; if r1 != 0 goto loop (over the 100 padding adds, not taken)
    p.push(ins(0x07, 0, 0, 0, 1));
    p.push(ins(0x17, 1, 0, 0, 1));
    p.push(ins(0x55, 1, 0, -3, 0));
    p.push(EXIT);
    assert_eq!(run(&p, &mut [0u8; 8]), 3);
    let j = JitProgram::compile_insns(&p, 0).unwrap();
    assert!(j.code_len() > 100 * 4);
}

#[test]
fn unsupported_instructions_are_refused() {
    let legacy = [ins(0x30, 0, 0, 0, 0), EXIT]; // ld abs
    assert!(matches!(JitProgram::compile_insns(&legacy, 0), Err(JitError::Opcode { insn: 0, .. })));
    let unknown = [ins(0xfd, 0, 0, 0, 0), EXIT];
    assert!(matches!(JitProgram::compile_insns(&unknown, 0), Err(JitError::Opcode { .. })));
    let far = [ins(0x05, 0, 0, 5, 0), EXIT];
    assert_eq!(JitProgram::compile_insns(&far, 0).unwrap_err(), JitError::BadTarget { insn: 0 });
    let bad_atomic = [ins(0xdb, 1, 2, 0, 0x31), EXIT];
    assert!(JitProgram::compile_insns(&bad_atomic, 0).is_err());
}

/// One step of a random program, lowered to instructions by [`lower`].
#[derive(Clone, Debug)]
pub(super) enum Op {
    /// An ALU or ALU64 instruction (`code` without the class), register or immediate source.
    Alu { w: bool, op: u8, off: i16, dst: u8, src: Option<u8>, imm: i32 },
    /// A 64-bit constant.
    Lddw { dst: u8, v: u64 },
    /// A conditional or unconditional forward jump over `skip` ops.
    Jmp { w: bool, op: u8, dst: u8, src: Option<u8>, imm: i32, skip: usize },
    /// A load from the stack frame (slot 0..64, byte offset inside the slot).
    Load { size: u8, signed: bool, dst: u8, slot: i16, at: i16 },
    /// A store to the stack frame.
    Store { size: u8, src: Option<u8>, imm: i32, slot: i16, at: i16 },
    /// An atomic on a stack slot.
    Atomic { w: bool, imm: i32, src: u8, slot: i16 },
    /// A helper without pointer arguments (ktime, prandom, processor id), then r1-r5 are
    /// set again (a call leaves them undefined).
    Call { id: i32, after: [u32; 5] },
}

fn width(size: u8) -> i16 {
    match size {
        0x18 => 8,
        0x00 => 4,
        0x08 => 2,
        _ => 1,
    }
}

/// A strategy for valid programs: every register initialised, stack initialised, forward jumps
/// only, memory accesses inside the frame, atomics aligned; the program ends by folding every
/// register and eight stack slots into r0.
pub(super) fn program() -> impl Strategy<Value = Vec<Insn>> {
    let reg = 0u8..10;
    let val = prop_oneof![
        Just(0i32),
        Just(-1),
        Just(1),
        Just(i32::MIN),
        Just(i32::MAX),
        Just(31),
        Just(32),
        Just(63),
        any::<i32>()
    ];
    let alu_op = prop_oneof![
        Just((0x00u8, 0i16)),
        Just((0x10, 0)),
        Just((0x20, 0)),
        Just((0x30, 0)),
        Just((0x30, 1)),
        Just((0x40, 0)),
        Just((0x50, 0)),
        Just((0x60, 0)),
        Just((0x70, 0)),
        Just((0x80, 0)),
        Just((0x90, 0)),
        Just((0x90, 1)),
        Just((0xa0, 0)),
        Just((0xb0, 0)),
        Just((0xb0, 8)),
        Just((0xb0, 16)),
        Just((0xb0, 32)),
        Just((0xc0, 0)),
        Just((0xd0, 16)),
        Just((0xd0, 32)),
        Just((0xd0, 64)),
    ];
    let op = prop_oneof![
        4 => (any::<bool>(), alu_op, reg.clone(), proptest::option::of(reg.clone()), val.clone(), any::<bool>())
            .prop_map(|(w, (op, off), dst, src, imm, be)| {
                // Shapes the kernel accepts: neg and byte swaps take no register source (the
                // swap's "source" bit selects the direction), sign-extending moves register only.
                let (src, imm, off) = match op {
                    0x80 => (None, 0, off),
                    0xd0 => (if be && !w { Some(0) } else { None }, i32::from(off), 0),
                    0xb0 if off != 0 => (Some(src.unwrap_or(1)), 0, if !w && off == 32 { 0 } else { off }),
                    0x60 | 0x70 | 0xc0 if src.is_none() => (None, imm & if w { 63 } else { 31 }, off),
                    _ => (src, imm, off),
                };
                Op::Alu { w, op, off, dst, src, imm }
            }),
        1 => (reg.clone(), any::<u64>()).prop_map(|(dst, v)| Op::Lddw { dst, v }),
        2 => (any::<bool>(), prop_oneof![Just(0x00u8), Just(0x10), Just(0x20), Just(0x30), Just(0x40), Just(0x50), Just(0x60), Just(0x70), Just(0xa0), Just(0xb0), Just(0xc0), Just(0xd0)],
              reg.clone(), proptest::option::of(reg.clone()), val.clone(), 0usize..6)
            .prop_map(|(w, op, dst, src, imm, skip)| Op::Jmp { w, op, dst, src, imm, skip }),
        2 => (prop_oneof![Just(0x18u8), Just(0x00), Just(0x08), Just(0x10)], any::<bool>(), reg.clone(), 1i16..=64, 0i16..8)
            .prop_map(|(size, signed, dst, slot, at)| Op::Load { size, signed: signed && size != 0x18, dst, slot, at: at / width(size) * width(size) }),
        2 => (prop_oneof![Just(0x18u8), Just(0x00), Just(0x08), Just(0x10)], proptest::option::of(reg.clone()), val.clone(), 1i16..=64, 0i16..8)
            .prop_map(|(size, src, imm, slot, at)| Op::Store { size, src, imm, slot, at: at / width(size) * width(size) }),
        1 => (any::<bool>(), prop_oneof![Just(0x00i32), Just(0x40), Just(0x50), Just(0xa0), Just(0x01), Just(0x41), Just(0x51), Just(0xa1), Just(0xe1), Just(0xf1)], 1u8..10, 1i16..=64)
            .prop_map(|(w, imm, src, slot)| Op::Atomic { w, imm, src, slot }),
    ];
    let op = prop_oneof![
        12 => op,
        1 => (prop_oneof![Just(5i32), Just(7), Just(8)], any::<[u32; 5]>())
            .prop_map(|(id, after)| Op::Call { id, after }),
    ];
    (proptest::collection::vec(op, 1..60), any::<[u64; 10]>())
        .prop_map(|(ops, init)| lower(&ops, &init))
}

/// Lowers ops to instructions, resolving jump skips to instruction offsets.
pub(super) fn lower(ops: &[Op], init: &[u64; 10]) -> Vec<Insn> {
    let mut p = Vec::new();
    for (r, v) in init.iter().enumerate() {
        p.extend(lddw(r as u8, *v));
    }
    for slot in 1..=64i16 {
        p.push(ins(0x7a, 10, 0, -8 * slot, i32::from(slot) * 0x0101_0101));
    }
    let size = |o: &Op| match o {
        Op::Lddw { .. } => 2,
        Op::Call { .. } => 6,
        _ => 1,
    };
    let mut at = Vec::with_capacity(ops.len() + 1);
    let mut pos = p.len();
    for o in ops {
        at.push(pos);
        pos += size(o);
    }
    at.push(pos);
    for (i, o) in ops.iter().enumerate() {
        let x = match *o {
            Op::Alu { w, op, off, dst, src, imm } => {
                let class = if w { class::ALU64 } else { class::ALU };
                ins(
                    op | class | if src.is_some() { 0x08 } else { 0 },
                    dst,
                    src.unwrap_or(0),
                    off,
                    imm,
                )
            }
            Op::Lddw { dst, v } => {
                p.extend(lddw(dst, v));
                continue;
            }
            Op::Call { id, after } => {
                p.push(ins(0x85, 0, 0, 0, id));
                for (k, v) in after.iter().enumerate() {
                    p.push(ins(0xb4, k as u8 + 1, 0, 0, *v as i32));
                }
                continue;
            }
            Op::Jmp { w, op, dst, src, imm, skip } => {
                let to = at[(i + 1 + skip).min(ops.len())];
                let rel = (to - (at[i] + 1)) as i16;
                if op == 0x00 {
                    ins(class::JMP, 0, 0, rel, 0)
                } else {
                    let class = if w { class::JMP } else { class::JMP32 };
                    ins(
                        op | class | if src.is_some() { 0x08 } else { 0 },
                        dst,
                        src.unwrap_or(0),
                        rel,
                        imm,
                    )
                }
            }
            Op::Load { size, signed, dst, slot, at } => ins(
                class::LDX | size | if signed { 0x80 } else { 0x60 },
                dst,
                10,
                -8 * slot + at,
                0,
            ),
            Op::Store { size, src: Some(s), slot, at, .. } => {
                ins(class::STX | size | 0x60, 10, s, -8 * slot + at, 0)
            }
            Op::Store { size, src: None, imm, slot, at } => {
                ins(class::ST | size | 0x60, 10, 0, -8 * slot + at, imm)
            }
            Op::Atomic { w, imm, src, slot } => {
                ins(class::STX | 0xc0 | if w { 0x18 } else { 0x00 }, 10, src, -8 * slot, imm)
            }
        };
        p.push(x);
    }
    for r in 1..10u8 {
        p.push(ins(0x27, 0, 0, 0, 31));
        p.push(ins(0x0f, 0, r, 0, 0));
    }
    for slot in (1..=64i16).step_by(8) {
        p.push(ins(0x79, 1, 10, -8 * slot, 0));
        p.push(ins(0x27, 0, 0, 0, 31));
        p.push(ins(0x0f, 0, 1, 0, 0));
    }
    p.push(EXIT);
    p
}

/// What one run left behind: r0 (or the fault), the stack, the packet bytes.
#[derive(Debug, PartialEq)]
struct Outcome {
    r0: Result<u64, Fault>,
    stack: Vec<u64>,
    packet: Vec<u8>,
}

/// Runs a prepared program once with the interpreter and once with the JIT, each on a fresh
/// worker and a fresh copy of `frame`.
fn both(prep: &Prepared, frame: &[u8]) -> (Outcome, Outcome) {
    let jit = JitProgram::compile(prep).expect("the JIT compiles it");
    let one = |use_jit: bool| {
        let mut w = Worker::new(0);
        let mut pkt = PacketBuf::from_frame(frame);
        let ran = crate::xdp::run_in_env(prep, &mut w, &mut pkt, (0, 0, 7), |env, ctx| {
            if use_jit {
                // SAFETY: the generated programs only access their initialised stack frame (the
                // worker's stack, which `env` was built over) and no packet memory.
                unsafe { jit.run(env, ctx) }
            } else {
                interpret(prep, env, ctx)
            }
        });
        let r0 = ran.and_then(|(r0, _)| r0);
        Outcome { r0, stack: w.stack.to_vec(), packet: pkt.data().to_vec() }
    };
    (one(false), one(true))
}

fn prep(insns: &[Insn]) -> Prepared {
    prepare_insns(insns, ProgKind::Xdp, &[], &MapSet::default(), "t".into()).expect("prepares")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn random_programs_agree_with_the_interpreter(p in program()) {
        let (interp, jit) = both(&prep(&p), &[0u8; 64]);
        prop_assert!(interp.r0.is_ok(), "the interpreter faulted: {:?}", interp.r0);
        prop_assert_eq!(jit, interp);
    }
}

#[test]
fn gotol_takes_its_offset_from_imm() {
    // r0 = 1; gotol +1; r0 = 2; exit
    let p = [ins(0xb7, 0, 0, 0, 1), ins(0x06, 0, 0, 0, 1), ins(0xb7, 0, 0, 0, 2), EXIT];
    assert_eq!(run(&p, &mut [0u8; 8]), 1);
}

#[test]
fn unverified_programs_stay_on_the_interpreter() {
    use crate::xdp::{Engine, XdpProgram};
    let mut p = XdpProgram::from_prepared(prep(&[ins(0xb7, 0, 0, 0, 2), EXIT]));
    assert_eq!(p.engine(), Engine::Interpreter);
    assert_eq!(p.set_engine(Engine::Jit), Err(JitError::Unverified));
    assert_eq!(p.engine(), Engine::Interpreter);
    assert!(p.jit().is_none());
}

#[test]
fn a_fault_inside_a_bpf_to_bpf_call_unwinds_every_frame() {
    // main: r6 = ctx; call f; ctx[1] = 1; exit.  f: call g; exit.  g: ctx[0] = 1; call 99
    // (faults); ctx[2] = 1; exit. The run must return through the epilogue from two frames deep
    // with the native stack and callee-saved registers intact (or this test would crash).
    let p = vec![
        mov64(6, 1),
        ins(0x85, 0, 1, 0, 3), // call f (insn 5)
        ins(0x72, 6, 0, 1, 1),
        ins(0xb7, 0, 0, 0, 2),
        EXIT,
        ins(0x85, 0, 1, 0, 1), // f: call g (insn 7)
        EXIT,
        ins(0x72, 6, 0, 0, 1), // g
        ins(0x85, 0, 0, 0, 99),
        ins(0x72, 6, 0, 2, 1),
        EXIT,
    ];
    for _ in 0..3 {
        let mut ctx = [0u8; 8];
        run(&p, &mut ctx);
        assert_eq!(ctx[..3], [1, 0, 0]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    /// A random program as a bpf-to-bpf callee (its own frame, r6-r9 clobbered inside),
    /// called twice from a main function that keeps values in r6-r9 and its own frame.
    #[test]
    fn random_subprograms_agree_with_the_interpreter(sub in program(), keep in any::<[u64; 4]>()) {
        let mut p = Vec::new();
        for (k, v) in keep.iter().enumerate() {
            p.extend(lddw(k as u8 + 6, *v));
        }
        p.push(ins(0x7b, 10, 6, -8, 0)); // main's frame: stack[-8] = r6
        let call1 = p.len();
        p.push(ins(0x85, 0, 1, 0, 0));
        p.push(mov64(7, 0)); // r7 = first result (r7 saved before: folded below via r8/r9)
        let call2 = p.len();
        p.push(ins(0x85, 0, 1, 0, 0));
        p.push(ins(0x0f, 0, 7, 0, 0));
        for r in [6u8, 8, 9] {
            p.push(ins(0x27, 0, 0, 0, 31));
            p.push(ins(0x0f, 0, r, 0, 0));
        }
        p.push(ins(0x79, 1, 10, -8, 0));
        p.push(ins(0xaf, 0, 1, 0, 0));
        p.push(EXIT);
        let start = p.len();
        p[call1].imm = (start - call1 - 1) as i32;
        p[call2].imm = (start - call2 - 1) as i32;
        p.extend(sub);
        let (interp, jit) = both(&prep(&p), &[0u8; 64]);
        prop_assert!(interp.r0.is_ok(), "the interpreter faulted: {:?}", interp.r0);
        prop_assert_eq!(jit, interp);
    }
}
