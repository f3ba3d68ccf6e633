//! Interpreter tests: every instruction class against expected values, a proptest of the ALU
//! against a Rust model, faults.
#![allow(
    clippy::manual_checked_ops,
    reason = "the reference model spells out the ISA's division rules"
)]

use super::*;
use crate::testing::asm::*;
use crate::xdp::{XdpAction, XdpProgram};
use proptest::prelude::*;

use snic_pipeline::PacketBuf;

/// Runs `insns` (unverified) as XDP on a 64-byte packet; returns `r0` or the fault.
fn run(insns: Vec<Insn>) -> Result<u64, Fault> {
    let maps = MapSet::default();
    let prep = prepare_insns(&insns, ProgKind::Xdp, &[], &maps, "t".into()).expect("prepares");
    let mut w = Worker::new(0);
    let mut pkt = PacketBuf::from_frame(&[0xab; 64]);
    run_prepared(&prep, &mut w, &mut pkt)
}

fn run_prepared(prep: &Prepared, w: &mut Worker, pkt: &mut PacketBuf) -> Result<u64, Fault> {
    // The raw interpreter in an XDP environment: r0 itself is what we test (the action code
    // `XdpProgram::run` makes of it is too narrow).
    let ran = crate::xdp::run_in_env(prep, w, pkt, (0, 0, 7), |env, ctx| interpret(prep, env, ctx));
    ran.and_then(|(r0, _)| r0)
}

#[test]
fn mov_add_exit() {
    let p = prog([&[mov64(0, 40), alu64_imm(0x00, 0, 2), exit()]]);
    assert_eq!(run(p), Ok(42));
}

#[test]
fn xdp_return_codes_map_to_actions() {
    let maps = MapSet::default();
    for (code, want) in [
        (0, XdpAction::Aborted),
        (1, XdpAction::Drop),
        (2, XdpAction::Pass),
        (3, XdpAction::Tx),
        (4, XdpAction::Aborted), // redirect without a target
        (5, XdpAction::Aborted),
        (-1, XdpAction::Aborted),
    ] {
        let prep = prepare_insns(&[mov64(0, code), exit()], ProgKind::Xdp, &[], &maps, "t".into())
            .unwrap();
        let p = XdpProgram::from_prepared(prep);
        let mut pkt = PacketBuf::from_frame(&[0; 60]);
        let out = p.run(&mut Worker::new(0), &mut pkt, 1, 0, 0);
        assert_eq!(out.action, want, "code {code}");
        assert_eq!(out.fault, None);
    }
}

fn r0(insns: &[Insn]) -> u64 {
    let mut p = insns.to_vec();
    p.push(exit());
    run(p).unwrap_or_else(|f| panic!("fault {f}"))
}

#[test]
fn alu64_immediates_and_registers() {
    let l = |v: u64| lddw(0, v);
    assert_eq!(r0(&[mov64(0, -1)]), u64::MAX, "mov sign-extends");
    assert_eq!(r0(&prog([&l(10), &[alu64_imm(0x10, 0, 3)]])), 7);
    assert_eq!(r0(&prog([&l(6), &[alu64_imm(0x20, 0, 7)]])), 42);
    assert_eq!(r0(&prog([&l(100), &[alu64_imm(0x30, 0, 7)]])), 14);
    assert_eq!(r0(&prog([&l(100), &[alu64_imm(0x30, 0, 0)]])), 0, "div by zero is 0");
    assert_eq!(r0(&prog([&l(100), &[alu64_imm(0x90, 0, 7)]])), 2);
    assert_eq!(r0(&prog([&l(100), &[alu64_imm(0x90, 0, 0)]])), 100, "mod by zero keeps dst");
    assert_eq!(r0(&prog([&l(0xf0), &[alu64_imm(0x40, 0, 0x0f)]])), 0xff);
    assert_eq!(r0(&prog([&l(0xf0), &[alu64_imm(0x50, 0, 0x3c)]])), 0x30);
    assert_eq!(r0(&prog([&l(1), &[alu64_imm(0x60, 0, 65)]])), 2, "shift masked to 63");
    assert_eq!(r0(&prog([&l(1 << 63), &[alu64_imm(0x70, 0, 63)]])), 1);
    assert_eq!(r0(&prog([&l(1 << 63), &[alu64_imm(0xc0, 0, 63)]])), u64::MAX, "arsh");
    assert_eq!(r0(&prog([&l(5), &[alu64_imm(0x80, 0, 0)]])), 5u64.wrapping_neg());
    assert_eq!(r0(&prog([&l(0xff), &[alu64_imm(0xa0, 0, 0x0f)]])), 0xf0);
    assert_eq!(r0(&prog([&l(3), &[mov64(1, 4), alu64_reg(0x20, 0, 1)]])), 12);
}

#[test]
fn alu32_zero_extends_and_masks() {
    let l = |v: u64| lddw(0, v);
    assert_eq!(r0(&prog([&l(u64::MAX), &[alu32_imm(0x00, 0, 1)]])), 0, "wraps in 32 bits");
    assert_eq!(r0(&prog([&l(0xffff_ffff_0000_0005), &[alu32_imm(0x90, 0, 0)]])), 5, "mod 0");
    assert_eq!(r0(&prog([&l(0xffff_ffff_0000_0005), &[alu32_imm(0x30, 0, 0)]])), 0, "div 0");
    assert_eq!(r0(&prog([&l(1), &[alu32_imm(0x60, 0, 33)]])), 2, "shift masked to 31");
    assert_eq!(r0(&prog([&l(0x8000_0000), &[alu32_imm(0xc0, 0, 31)]])), 0xffff_ffff);
    assert_eq!(r0(&prog([&l(7), &[alu32_imm(0x80, 0, 0)]])), u64::from(7u32.wrapping_neg()));
    assert_eq!(r0(&[alu32_imm(0xb0, 0, -1)]), 0xffff_ffff, "mov32 zero-extends");
}

#[test]
fn signed_division_and_movsx() {
    let sdiv = |a: u64, b: i32| r0(&prog([&lddw(0, a), &[alu_off(0x37, 0, 0, 1, b)]]));
    let smod = |a: u64, b: i32| r0(&prog([&lddw(0, a), &[alu_off(0x97, 0, 0, 1, b)]]));
    assert_eq!(sdiv((-7i64) as u64, 2), (-3i64) as u64);
    assert_eq!(smod((-7i64) as u64, 2), (-1i64) as u64);
    assert_eq!(sdiv(i64::MIN as u64, -1), i64::MIN as u64, "overflow wraps");
    assert_eq!(smod(i64::MIN as u64, -1), 0);
    assert_eq!(sdiv(9, 0), 0);
    assert_eq!(smod(9, 0), 9);
    let sdiv32 = |a: u64, b: i32| r0(&prog([&lddw(0, a), &[alu_off(0x34, 0, 0, 1, b)]]));
    assert_eq!(sdiv32(u64::from((-8i32) as u32), 2), u64::from((-4i32) as u32));
    // movsx: r0 = (s8) r1, (s16), (s32), and the 32-bit form.
    let movsx =
        |code: u8, off: i16, v: u64| r0(&prog([&lddw(1, v), &[alu_off(code, 0, 1, off, 0)]]));
    assert_eq!(movsx(0xbf, 8, 0x80), 0xffff_ffff_ffff_ff80);
    assert_eq!(movsx(0xbf, 16, 0x8000), 0xffff_ffff_ffff_8000);
    assert_eq!(movsx(0xbf, 32, 0x8000_0000), 0xffff_ffff_8000_0000);
    assert_eq!(movsx(0xbc, 8, 0x80), 0xffff_ff80);
}

#[test]
fn byte_swaps() {
    let v = 0x1122_3344_5566_7788u64;
    let end = |code: u8, bits: i32| r0(&prog([&lddw(0, v), &[alu_off(code, 0, 0, 0, bits)]]));
    assert_eq!(end(0xdc, 16), 0x8877, "to_be16");
    assert_eq!(end(0xdc, 32), 0x8877_6655);
    assert_eq!(end(0xdc, 64), 0x8877_6655_4433_2211);
    assert_eq!(end(0xd4, 16), 0x7788, "to_le16 truncates");
    assert_eq!(end(0xd4, 32), 0x5566_7788);
    assert_eq!(end(0xd4, 64), v);
    assert_eq!(end(0xd7, 16), 0x8877, "bswap16");
    assert_eq!(end(0xd7, 64), v.swap_bytes());
}

#[test]
fn jumps_all_conditions() {
    // For each condition, r0 = 1 if taken else 0.
    let cases: [(u8, u64, u64, bool); 11] = [
        (0x10, 5, 5, true),
        (0x20, 6, 5, true),
        (0x30, 5, 5, true),
        (0x40, 6, 2, true),
        (0x50, 5, 5, false),
        (0x60, (-1i64) as u64, 5, false),
        (0x70, 5, 5, true),
        (0xa0, 4, 5, true),
        (0xb0, 6, 5, false),
        (0xc0, (-1i64) as u64, 5, true),
        (0xd0, 5, 5, true),
    ];
    for (op, a, b, taken) in cases {
        let p = prog([
            &lddw(1, a),
            &lddw(2, b),
            &[mov64(0, 0), jmp_reg(op, 1, 2, 1), exit(), mov64(0, 1)],
        ]);
        assert_eq!(r0(&p), u64::from(taken), "op {op:#x}");
        // 32-bit: the upper halves are ignored.
        let p = prog([
            &lddw(1, a | 0xdead_0000_0000_0000),
            &lddw(2, b),
            &[mov64(0, 0), jmp32_reg(op, 1, 2, 1), exit(), mov64(0, 1)],
        ]);
        let (a32, b32) = (a as u32, b as u32);
        let want = super::cond32(op, a32, b32).unwrap();
        assert_eq!(r0(&p), u64::from(want), "jmp32 op {op:#x}");
    }
    // ja and gotol skip one instruction.
    assert_eq!(r0(&[mov64(0, 1), ja(1), mov64(0, 2)]), 1);
    assert_eq!(r0(&[mov64(0, 1), gotol(1), mov64(0, 2)]), 1);
    assert_eq!(r0(&[mov64(0, 0), jmp_imm(0x10, 0, 0, 1), exit(), mov64(0, 9)]), 9);
    assert_eq!(r0(&[mov64(0, 3), jmp32_imm(0x50, 0, 3, 1), mov64(0, 8)]), 8);
}

#[test]
fn loads_and_stores_of_every_size_on_the_stack() {
    let p = [
        lddw(1, 0x8877_6655_4433_2211)[0],
        lddw(1, 0x8877_6655_4433_2211)[1],
        stx(8, 10, -8, 1),
        ldx(1, 0, 10, -8),
        ldx(2, 2, 10, -8),
        alu64_reg(0x00, 0, 2),
        ldx(4, 2, 10, -4),
        alu64_reg(0x00, 0, 2),
        st(2, 10, -16, -2),
        ldxs(2, 2, 10, -16),
        alu64_reg(0x00, 0, 2),
        st(1, 10, -17, 0x80),
        ldxs(1, 2, 10, -17),
        alu64_reg(0x00, 0, 2),
        st(4, 10, -24, -3),
        ldxs(4, 2, 10, -24),
        alu64_reg(0x00, 0, 2),
        st(8, 10, -32, -4),
        ldx(8, 2, 10, -32),
        alu64_reg(0x00, 0, 2),
    ];
    let want = 0x11u64
        .wrapping_add(0x2211)
        .wrapping_add(0x8877_6655)
        .wrapping_sub(2)
        .wrapping_sub(0x80)
        .wrapping_sub(3)
        .wrapping_sub(4);
    assert_eq!(r0(&p), want);
}

#[test]
fn atomics_with_and_without_fetch() {
    let run_atomic = |bytes: u8, init: u64, op: i32, operand: u64, cmp: u64| -> (u64, u64, u64) {
        // Stack slot at r10-8 = init; r1 = operand; r0 = cmp; atomic; returns via memory.
        let mut p = prog([&lddw(2, init), &lddw(1, operand), &lddw(0, cmp)]);
        p.extend([
            stx(8, 10, -8, 2),
            atomic(bytes, 10, -8, 1, op),
            // r3 = memory, r4 = r1 (fetched), r5 = r0; pack into r0 via stack reads in test.
            ldx(8, 3, 10, -8),
            stx(8, 10, -16, 1),
            stx(8, 10, -24, 0),
            stx(8, 10, -32, 3),
        ]);
        let mem = r0(&prog([&p, &[ldx(8, 0, 10, -32)]]));
        let fetched = r0(&prog([&p, &[ldx(8, 0, 10, -16)]]));
        let r0v = r0(&prog([&p, &[ldx(8, 0, 10, -24)]]));
        (mem, fetched, r0v)
    };
    assert_eq!(run_atomic(8, 5, 0x00, 3, 0).0, 8);
    assert_eq!(run_atomic(8, 5, 0x01, 3, 0), (8, 5, 0), "fetch_add");
    assert_eq!(run_atomic(8, 0b1100, 0x41, 0b1010, 0), (0b1110, 0b1100, 0), "fetch_or");
    assert_eq!(run_atomic(8, 0b1100, 0x51, 0b1010, 0), (0b1000, 0b1100, 0), "fetch_and");
    assert_eq!(run_atomic(8, 0b1100, 0xa1, 0b1010, 0), (0b0110, 0b1100, 0), "fetch_xor");
    assert_eq!(run_atomic(8, 7, 0xe1, 9, 0), (9, 7, 0), "xchg");
    assert_eq!(run_atomic(8, 7, 0xf1, 9, 7), (9, 9, 7), "cmpxchg hit");
    assert_eq!(run_atomic(8, 7, 0xf1, 9, 6), (7, 9, 7), "cmpxchg miss");
    // 32-bit: upper half of memory untouched, fetched value zero-extended.
    let (mem, fetched, _) = run_atomic(4, 0xaaaa_aaaa_ffff_ffff, 0x01, 1, 0);
    assert_eq!(mem, 0xaaaa_aaaa_0000_0000);
    assert_eq!(fetched, 0xffff_ffff);
    let (mem, _, r0v) = run_atomic(4, 0x1_0000_0005, 0xf1, 9, 0xffff_ffff_0000_0005);
    assert_eq!((mem, r0v), (0x1_0000_0009, 5), "cmpxchg32 compares the low halves");
}

#[test]
fn bpf_to_bpf_calls_keep_callee_saved_registers_and_frames() {
    // main: r6 = 10; *(r10-8) = 1; call f; r0 += r6 + *(r10-8); exit
    // f: r6 = 99; *(r10-8) = 50 (its own frame); r0 = r1 * 2 -> with r1 = 21; exit
    let p = vec![
        mov64(6, 10),
        st(8, 10, -8, 1),
        mov64(1, 21),
        call_local(5),
        alu64_reg(0x00, 0, 6),
        ldx(8, 2, 10, -8),
        alu64_reg(0x00, 0, 2),
        exit(),
        // padding never executed
        exit(),
        mov64(6, 99),
        st(8, 10, -8, 50),
        mov64_reg(0, 1),
        alu64_imm(0x20, 0, 2),
        exit(),
    ];
    assert_eq!(run(p), Ok(42 + 10 + 1));
}

#[test]
fn faults_end_the_run_without_panicking() {
    // Load from address 0.
    assert!(matches!(
        run(vec![mov64(1, 0), ldx(8, 0, 1, 0), exit()]),
        Err(Fault::Memory { pc: 1, .. })
    ));
    // Store past the top of the stack.
    assert!(matches!(
        run(vec![st(8, 10, 0, 1), mov64(0, 0), exit()]),
        Err(Fault::Memory { write: true, .. })
    ));
    // Below the bottom of the stack.
    let below = -(STACK_SIZE as i16) - 8;
    assert!(matches!(run(vec![st(8, 10, below, 1), exit()]), Err(Fault::Memory { .. })));
    // Store to the read-only context.
    assert!(matches!(run(vec![st(4, 1, 0, 1), exit()]), Err(Fault::Memory { write: true, .. })));
    // Misaligned atomic.
    assert!(matches!(
        run(vec![mov64(1, 1), atomic(8, 10, -12, 1, 0), exit()]),
        Err(Fault::Memory { .. })
    ));
    // Infinite loop: the budget ends it.
    assert_eq!(run(vec![ja(-1), exit()]), Err(Fault::Budget));
    // Unbounded recursion: the call depth ends it.
    assert!(matches!(run(vec![call_local(-1), exit()]), Err(Fault::CallDepth { .. })));
    // Falling off the end.
    assert!(matches!(run(vec![mov64(0, 0)]), Err(Fault::PcOutOfRange { .. })));
    // A bad register number.
    assert!(matches!(
        run(vec![Insn { code: 0xb7, dst: 11, ..Insn::default() }, exit()]),
        Err(Fault::BadInstruction { .. })
    ));
    // Writing r10.
    assert!(matches!(run(vec![mov64(10, 0), exit()]), Err(Fault::BadInstruction { .. })));
}

#[test]
fn prepare_refuses_what_snic_does_not_run() {
    let maps = MapSet::default();
    let p = |insns: &[Insn]| prepare_insns(insns, ProgKind::Xdp, &[], &maps, "t".into());
    assert_eq!(p(&[call(12), exit()]).unwrap_err(), PrepareError::TailCall { insn: 0 });
    assert_eq!(
        p(&[call(999), exit()]).unwrap_err(),
        PrepareError::UnknownHelper { insn: 0, id: 999 }
    );
    assert!(matches!(
        p(&[Insn { code: 0x20, ..Insn::default() }, exit()]),
        Err(PrepareError::Unsupported { .. })
    ));
    assert!(matches!(p(&[ja(5), exit()]), Err(PrepareError::BadJump { .. })));
    // Load-acquire (atomic imm 0x100) and an atomic of 2 bytes are not run.
    assert!(matches!(
        p(&[atomic(8, 10, -8, 1, 0x100), exit()]),
        Err(PrepareError::Unsupported { .. })
    ));
    assert!(matches!(
        p(&[atomic(2, 10, -8, 1, 0x00), exit()]),
        Err(PrepareError::Unsupported { .. })
    ));
    assert!(matches!(
        p(&prog([&[ja(1)], &lddw(0, 1), &[exit()]])),
        Err(PrepareError::BadJump { .. })
    ));
    assert!(matches!(p(&prog([&lddw_map(1, 3), &[exit()]])), Err(PrepareError::BadMap { .. })));
    // NIC-core helpers are not for XDP, XDP helpers are not for the NIC core.
    assert!(p(&[call(0x7000), exit()]).is_err());
    let core = prepare_insns(&[call(44), exit()], ProgKind::NicCore, &[], &maps, "t".into());
    assert!(matches!(core, Err(PrepareError::UnknownHelper { id: 44, .. })));
    // A context store, and a load of a field snic does not have.
    let ctx = |i: Insn| prepare_insns(&[i, exit()], ProgKind::Xdp, &[0], &maps, "t".into());
    assert!(matches!(ctx(stx(4, 1, 0, 2)), Err(PrepareError::CtxAccess { write: true, .. })));
    assert!(matches!(ctx(ldx(4, 2, 1, 24)), Err(PrepareError::CtxAccess { off: 24, .. })));
    assert!(matches!(ctx(ldx(8, 2, 1, 0)), Err(PrepareError::CtxAccess { size: 8, .. })));
    let ok = ctx(ldx(4, 2, 1, 4)).unwrap();
    assert_eq!((ok.insns[0].code, ok.insns[0].off), (LDXDW, 8));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn alu_matches_a_reference_model(a: u64, b: u64, op in 0usize..12, wide: bool) {
        let ops = [0x00u8, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x90, 0xa0, 0xc0, 0xb0];
        let op = ops[op];
        let want = if wide {
            match op {
                0x00 => a.wrapping_add(b),
                0x10 => a.wrapping_sub(b),
                0x20 => a.wrapping_mul(b),
                0x30 => if b == 0 { 0 } else { a / b },
                0x40 => a | b,
                0x50 => a & b,
                0x60 => a << (b % 64),
                0x70 => a >> (b % 64),
                0x90 => if b == 0 { a } else { a % b },
                0xa0 => a ^ b,
                0xc0 => ((a as i64) >> (b % 64)) as u64,
                _ => b,
            }
        } else {
            let (x, y) = (a as u32, b as u32);
            u64::from(match op {
                0x00 => x.wrapping_add(y),
                0x10 => x.wrapping_sub(y),
                0x20 => x.wrapping_mul(y),
                0x30 => if y == 0 { 0 } else { x / y },
                0x40 => x | y,
                0x50 => x & y,
                0x60 => x << (y % 32),
                0x70 => x >> (y % 32),
                0x90 => if y == 0 { x } else { x % y },
                0xa0 => x ^ y,
                0xc0 => ((x as i32) >> (y % 32)) as u32,
                _ => y,
            })
        };
        let alu = if wide { alu64_reg(op, 0, 1) } else { alu32_reg(op, 0, 1) };
        let got = r0(&prog([&lddw(0, a), &lddw(1, b), &[alu]]));
        prop_assert_eq!(got, want);
    }

    #[test]
    fn arbitrary_instructions_never_panic(words in proptest::collection::vec(any::<[u8; 8]>(), 1..40)) {
        let insns: Vec<Insn> = words.into_iter().map(Insn::decode).collect();
        let maps = MapSet::default();
        if let Ok(prep) = prepare_insns(&insns, ProgKind::Xdp, &[], &maps, "t".into()) {
            let mut w = Worker::new(0);
            let mut pkt = PacketBuf::from_frame(&[1; 60]);
            let _ = run_prepared(&prep, &mut w, &mut pkt);
        }
    }
}

fn maps_of(specs: &[(&str, crate::MapKind, u32, u32, u32)]) -> MapSet {
    let obj = crate::Object {
        programs: Vec::new(),
        maps: specs
            .iter()
            .map(|&(name, kind, key_size, value_size, max_entries)| crate::MapSpec {
                name: name.into(),
                kind,
                key_size,
                value_size,
                max_entries,
                data: None,
                readonly: false,
            })
            .collect(),
        license: None,
    };
    MapSet::new(&obj, 1).unwrap()
}

fn run_maps(insns: Vec<Insn>, maps: &MapSet) -> Result<u64, Fault> {
    let prep = prepare_insns(&insns, ProgKind::Xdp, &[], maps, "t".into()).expect("prepares");
    let mut w = Worker::new(0);
    let mut pkt = PacketBuf::from_frame(&[0xab; 64]);
    run_prepared(&prep, &mut w, &mut pkt)
}

fn helper_fault(r: Result<u64, Fault>) -> u32 {
    match r {
        Err(Fault::Helper { id, .. }) => id,
        other => panic!("expected a helper fault, got {other:?}"),
    }
}

#[test]
fn helpers_fault_on_bad_arguments_without_panicking() {
    let maps = maps_of(&[
        ("a", crate::MapKind::Array, 4, 8, 4),
        ("rb", crate::MapKind::RingBuf, 0, 0, 4096),
        ("h", crate::MapKind::Hash, 4, 8, 4),
    ]);
    // Not a map: a stack address as the map pointer.
    let p = vec![mov64_reg(1, 10), mov64_reg(2, 10), alu64_imm(0x00, 2, -8), call(1), exit()];
    assert_eq!(helper_fault(run_maps(p, &maps)), 1);
    // A map, but the key pointer is null.
    let p = prog([&lddw_map(1, 0), &[mov64(2, 0), call(1), exit()]]);
    assert_eq!(helper_fault(run_maps(p, &maps)), 1);
    // Update with the value past the top of the stack.
    let p = prog([
        &lddw_map(1, 0),
        &[
            st(4, 10, -4, 0),
            mov64_reg(2, 10),
            alu64_imm(0x00, 2, -4),
            mov64_reg(3, 10),
            mov64(4, 0),
        ],
        &[call(2), exit()],
    ]);
    assert_eq!(helper_fault(run_maps(p, &maps)), 2);
    // A well-formed lookup works: key 1 of the array, the value is writable, in bounds only.
    let p = prog([
        &lddw_map(1, 0),
        &[st(4, 10, -4, 1), mov64_reg(2, 10), alu64_imm(0x00, 2, -4), call(1)],
        &[jmp_imm(0x10, 0, 0, 3), st(8, 0, 0, 77), ldx(8, 0, 0, 0), exit(), mov64(0, -1), exit()],
    ]);
    assert_eq!(run_maps(p, &maps), Ok(77));
    let p = prog([
        &lddw_map(1, 0),
        &[st(4, 10, -4, 3), mov64_reg(2, 10), alu64_imm(0x00, 2, -4), call(1)],
        &[jmp_imm(0x10, 0, 0, 2), st(8, 0, 8, 1), exit(), exit()],
    ]);
    // (The region check is per map memory: a store into a neighbouring value is the
    // verifier's to refuse; past the last value it is a fault.)
    assert!(matches!(run_maps(p, &maps), Err(Fault::Memory { write: true, .. })), "past the map");
    // A missing hash key: lookup returns NULL, delete returns -ENOENT.
    let p = prog([
        &lddw_map(1, 2),
        &[st(4, 10, -4, 9), mov64_reg(2, 10), alu64_imm(0x00, 2, -4), call(3), exit()],
    ]);
    assert_eq!(run_maps(p, &maps), Ok((-2i64) as u64));
    // Ring buffer helpers on a non-ring map, and submit of a pointer that is no record.
    let p = prog([&lddw_map(1, 0), &[mov64(2, 8), mov64(3, 0), call(131), exit()]]);
    assert_eq!(helper_fault(run_maps(p, &maps)), 131);
    let p = vec![mov64_reg(1, 10), alu64_imm(0x00, 1, -8), mov64(2, 0), call(132), exit()];
    assert_eq!(helper_fault(run_maps(p, &maps)), 132);
    // A zero-size record can be reserved and submitted (found by its ring, not its bytes).
    let p = prog([
        &lddw_map(1, 1),
        &[mov64(2, 0), mov64(3, 0), call(131), jmp_imm(0x10, 0, 0, 3)],
        &[mov64_reg(1, 0), mov64(2, 0), call(132), exit()],
    ]);
    assert_eq!(run_maps(p, &maps), Ok(0));
    assert_eq!(maps.get(1).unwrap().ringbuf_drain(4), vec![Vec::<u8>::new()]);
    // Output of bytes outside memory.
    let p = prog([&lddw_map(1, 1), &[mov64(2, 0), mov64(3, 8), mov64(4, 0), call(130), exit()]]);
    assert_eq!(helper_fault(run_maps(p, &maps)), 130);
    // adjust_head with something other than the context.
    let p = vec![mov64_reg(1, 10), mov64(2, 4), call(44), exit()];
    assert_eq!(helper_fault(run_maps(p, &maps)), 44);
    // csum_diff over memory the program does not have.
    let p =
        vec![mov64(1, 0), mov64(2, 0), mov64(3, 64), mov64(4, 4), mov64(5, 0), call(28), exit()];
    assert_eq!(helper_fault(run_maps(p, &maps)), 28);
    // trace_printk: a bad format pointer faults, a format without NUL is -EINVAL.
    let p = vec![mov64(1, 64), mov64(2, 4), call(6), exit()];
    assert_eq!(helper_fault(run_maps(p, &maps)), 6);
    let p = vec![
        st(4, 10, -4, 0x41414141),
        mov64_reg(1, 10),
        alu64_imm(0x00, 1, -4),
        mov64(2, 4),
        call(6),
        exit(),
    ];
    assert_eq!(run_maps(p, &maps), Ok((-22i64) as u64));
    // An id prepare would refuse, reached anyway (a hand-built Prepared): a typed fault.
    let mut prep =
        prepare_insns(&[call(5), exit()], ProgKind::Xdp, &[], &maps, "t".into()).unwrap();
    prep.insns[0].imm = 9999;
    let mut w = Worker::new(0);
    let mut pkt = PacketBuf::from_frame(&[0; 20]);
    assert_eq!(run_prepared(&prep, &mut w, &mut pkt), Err(Fault::UnknownHelper { id: 9999 }));
}

#[test]
fn printk_formats_like_the_kernel() {
    let mem = b"str\0\x0a\x00\x00\x01";
    let f = |fmt: &str, args: [u64; 3]| {
        crate::helpers::format_printk(fmt.as_bytes(), args, |a| mem.get(a as usize).copied())
    };
    assert_eq!(
        f("a %d b %u c %x", [(-5i64) as u64, u64::MAX, 255]).unwrap(),
        "a -5 b 4294967295 c ff"
    );
    assert_eq!(
        f("%lld %llu %llx", [(-5i64) as u64, u64::MAX, u64::MAX]).unwrap(),
        "-5 18446744073709551615 ffffffffffffffff"
    );
    assert_eq!(f("[%5d|%-4u|%04x]", [42, 7, 0xa]).unwrap(), "[   42|7   |000a]");
    assert_eq!(f("%+d % d", [3, 4, 0]).unwrap(), "+3  4");
    assert_eq!(f("%s %c %%", [0, u64::from(b'z'), 0]).unwrap(), "str z %");
    assert_eq!(f("%p", [0x1234, 0, 0]).unwrap(), "0x1234");
    assert_eq!(f("%px", [0x1234, 0, 0]).unwrap(), "0000000000001234");
    assert_eq!(f("src %pI4.", [4, 0, 0]).unwrap(), "src 10.0.0.1.");
    assert_eq!(f("%s|%s", [0, 1, 0]).unwrap(), "str|tr");
    assert_eq!(f("%px", [0x1234, 0, 0]).unwrap(), "0000000000001234");
    assert_eq!(f("src %pI4.", [4, 0, 0]).unwrap(), "src 10.0.0.1.");
    assert_eq!(f("%s|%s", [0, 1, 0]).unwrap(), "str|tr");
    assert_eq!(f("%d %d %d %d", [1, 2, 3]), None, "at most three arguments");
    assert_eq!(f("%q", [1, 2, 3]), None);
    assert_eq!(f("%", [1, 2, 3]), None);
}

#[test]
fn csum_helpers_follow_ones_complement_rules() {
    use crate::helpers::{csum_from32to16, csum_partial};
    // Words add with end-around carry.
    assert_eq!(csum_partial(&[0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0], 0), 2);
    assert_eq!(csum_partial(&[1, 2, 3], 0), 0x0003_0201, "tail zero-padded");
    assert_eq!(csum_partial(&[], 7), 7);
    assert_eq!(csum_from32to16(0x0001_fffe), 0xffff);
    assert_eq!(csum_from32to16(0), 0);
    assert_eq!(csum_from32to16(0x1234_0001), 0x1235);
}
