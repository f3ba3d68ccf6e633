//! Programs PREVAIL accepts that snic must still refuse, because running them would be
//! unsafe under the JIT (found by review): a context pointer moved by arithmetic, an access
//! whose base is the context on one path or call and other memory on another, and jumps
//! between bpf-to-bpf subprograms. The kernel refuses all of them too.
use crate::testing::{compile_str, require_clang};
use crate::vm::PrepareError;
use crate::xdp::LoadFailure;
use crate::{Engine, Insn, MapSet, Object, Worker, XdpProgram};
use snic_pipeline::PacketBuf;

fn i(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { code, dst, src, off, imm }
}

fn object_with(insns: &[Insn]) -> Object {
    let src = "#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n\
               SEC(\"xdp\") int p(struct xdp_md *c) { return 2; }\n\
               char _license[] SEC(\"license\") = \"GPL\";\n";
    let bytes = compile_str("review_stub", src, &[]);
    let mut obj = Object::parse(&bytes, "stub").expect("parses");
    let p = &mut obj.programs[0];
    p.insns = insns.to_vec();
    p.raw.prog = insns
        .iter()
        .map(|x| prevail::spec::vm_isa::EbpfInst {
            opcode: x.code,
            dst_src: (x.src << 4) | x.dst,
            offset: x.off,
            imm: x.imm,
        })
        .collect();
    obj
}

fn load(obj: &Object) -> Result<XdpProgram, LoadFailure> {
    let maps = MapSet::new(obj, 1).expect("maps");
    XdpProgram::load(obj, None, maps)
}

fn refusal_at(obj: &Object) -> Option<usize> {
    match load(obj) {
        Err(LoadFailure::Refused(r)) => r.insn,
        other => panic!("expected a verifier refusal, got {other:?}"),
    }
}

fn bad_jump_at(obj: &Object) -> usize {
    match load(obj) {
        Err(LoadFailure::Prepare(PrepareError::BadJump { insn })) => insn,
        other => panic!("expected a refused jump, got {other:?}"),
    }
}

/// r2 = ctx + 4; r3 = *(u32 *)(r2 + 0): PREVAIL types r3 as data_end (ctx offset 4);
/// prepare rewrites by `off` alone (0 -> ldxdw ctx+0), so at run time r3 is 8 bytes at ctx+4.
#[test]
fn ctx_pointer_arithmetic_defeats_the_rewrite() {
    if !require_clang("review") {
        return;
    }
    let prog = [
        i(0xbf, 2, 1, 0, 0),    // r2 = r1
        i(0x07, 2, 0, 0, 4),    // r2 += 4
        i(0x61, 3, 2, 0, 0),    // r3 = *(u32 *)(r2 + 0)   "data_end"
        i(0x61, 4, 1, 0, 0),    // r4 = *(u32 *)(r1 + 0)   data
        i(0xbf, 5, 4, 0, 0),    // r5 = r4
        i(0x07, 5, 0, 0, 3000), // r5 += 3000
        i(0x2d, 5, 3, 3, 0),    // if r5 > r3 goto +3
        i(0x71, 6, 4, 2999, 0), // r6 = *(u8 *)(r4 + 2999)
        i(0xb7, 0, 0, 0, 2),    // r0 = XDP_PASS
        i(0x95, 0, 0, 0, 0),    // exit
        i(0xb7, 0, 0, 0, 1),    // r0 = XDP_DROP
        i(0x95, 0, 0, 0, 0),    // exit
    ];
    let obj = object_with(&prog);
    assert_eq!(refusal_at(&obj), Some(2));
}

/// A store whose base is ctx on one path and the stack on another is neither rewritten nor
/// refused by prepare; PREVAIL allows it to `ingress_ifindex` (Linux offset 12), which in
/// snic's layout is the high half of `data_end`.
#[test]
fn mixed_base_store_overwrites_data_end() {
    if !require_clang("review") {
        return;
    }
    let prog = [
        i(0xbf, 6, 1, 0, 0),     // 0: r6 = r1
        i(0xbf, 2, 10, 0, 0),    // 1: r2 = r10
        i(0x07, 2, 0, 0, -16),   // 2: r2 += -16
        i(0x61, 0, 1, 16, 0),    // 3: r0 = rx_queue_index
        i(0x15, 0, 0, 1, 12345), // 4: if r0 == 12345 goto +1
        i(0xbf, 2, 6, 0, 0),     // 5: r2 = r6 (ctx)
        i(0xb4, 3, 0, 0, -1),    // 6: w3 = 0xffffffff
        i(0x63, 2, 3, 12, 0),    // 7: *(u32 *)(r2 + 12) = r3
        i(0x61, 3, 6, 4, 0),     // 8: r3 = data_end
        i(0x61, 4, 6, 0, 0),     // 9: r4 = data
        i(0xbf, 5, 4, 0, 0),     // 10: r5 = r4
        i(0x07, 5, 0, 0, 3000),  // 11: r5 += 3000
        i(0x2d, 5, 3, 3, 0),     // 12: if r5 > r3 goto +3
        i(0x71, 7, 4, 2999, 0),  // 13: r7 = *(u8 *)(r4 + 2999)
        i(0xb7, 0, 0, 0, 2),     // 14
        i(0x95, 0, 0, 0, 0),     // 15
        i(0xb7, 0, 0, 0, 1),     // 16
        i(0x95, 0, 0, 0, 0),     // 17
    ];
    let obj = object_with(&prog);
    assert_eq!(refusal_at(&obj), Some(7));
}

/// Callee jumps back into main-program code that ends in `exit`: the JIT compiles that exit
/// as the main program's (jump to the epilogue), so the callee's exit ends the whole run.
#[test]
fn callee_sharing_a_main_exit() {
    if !require_clang("review") {
        return;
    }
    let prog = [
        i(0x85, 0, 1, 0, 2),  // 0: call +2 (local) -> 3
        i(0x07, 0, 0, 0, 1),  // 1: r0 += 1
        i(0x95, 0, 0, 0, 0),  // 2: exit
        i(0xb7, 0, 0, 0, 1),  // 3: r0 = 1
        i(0x05, 0, 0, -3, 0), // 4: goto 2
    ];
    let obj = object_with(&prog);
    assert_eq!(bad_jump_at(&obj), 4, "the callee jumps back into the main program");
}

/// Main jumps forward into the callee's code and exits there: the JIT compiled that exit as
/// the callee's `ret`, which in the main frame would crash the process.
#[test]
fn main_reaching_a_callee_exit() {
    if !require_clang("review") {
        return;
    }
    let prog = [
        i(0xb7, 0, 0, 0, 2), // 0: r0 = 2
        i(0x85, 0, 1, 0, 1), // 1: call +1 (local) -> 3
        i(0x05, 0, 0, 1, 0), // 2: goto 4
        i(0xb7, 0, 0, 0, 2), // 3: r0 = 2
        i(0x95, 0, 0, 0, 0), // 4: exit
    ];
    let obj = object_with(&prog);
    assert_eq!(bad_jump_at(&obj), 2, "main jumps into the callee");
}

/// One callee, called with ctx at one site and a stack pointer at another: PREVAIL's per-call
/// invariants make the load "ctx" at one label, so prepare rewrites it for both calls.
#[test]
fn callee_load_rewritten_for_every_call_site() {
    if !require_clang("review") {
        return;
    }
    let prog = [
        i(0xbf, 6, 1, 0, 0),   // 0: r6 = r1
        i(0x85, 0, 1, 0, 7),   // 1: call 9 (r1 = ctx)
        i(0xbf, 7, 0, 0, 0),   // 2: r7 = r0
        i(0x7a, 10, 0, -8, 0), // 3: *(u64 *)(r10 - 8) = 0
        i(0xbf, 1, 10, 0, 0),  // 4: r1 = r10
        i(0x07, 1, 0, 0, -8),  // 5: r1 += -8
        i(0x85, 0, 1, 0, 2),   // 6: call 9 (r1 = stack)
        i(0xb7, 0, 0, 0, 2),   // 7: r0 = 2
        i(0x95, 0, 0, 0, 0),   // 8: exit
        i(0x61, 2, 1, 4, 0),   // 9: r2 = *(u32 *)(r1 + 4)
        i(0xb7, 0, 0, 0, 0),   // 10: r0 = 0
        i(0x95, 0, 0, 0, 0),   // 11: exit
    ];
    let obj = object_with(&prog);
    assert_eq!(refusal_at(&obj), Some(9));
}

/// The same call pattern with the callee's own `exit` loads and runs, with both engines
/// agreeing (the rule refuses only jumps between subprograms).
#[test]
fn a_well_formed_call_still_runs() {
    if !require_clang("review") {
        return;
    }
    let prog = [
        i(0x85, 0, 1, 0, 2), // 0: call +2 -> 3
        i(0x07, 0, 0, 0, 1), // 1: r0 += 1
        i(0x95, 0, 0, 0, 0), // 2: exit
        i(0xb7, 0, 0, 0, 1), // 3: r0 = 1
        i(0x95, 0, 0, 0, 0), // 4: exit
    ];
    let obj = object_with(&prog);
    for engine in [Engine::Interpreter, Engine::Jit] {
        let mut p = load(&obj).expect("loads");
        if p.set_engine(engine).is_err() {
            continue; // no JIT on this architecture
        }
        let mut w = Worker::new(0);
        let mut pkt = PacketBuf::from_frame(&[0u8; 64]);
        assert_eq!(p.run(&mut w, &mut pkt, 1, 1, 0).action, crate::XdpAction::Pass, "{engine:?}");
    }
}

#[test]
fn base_register_facts_are_read_from_prevails_notation() {
    use crate::verify::classify_base as of;
    let f = "[r1.ctx_offset=0, r1.type=ctx, r10.type=stack, r2.ctx_offset=4, r2.type=ctx,\n\
             r3.type in {ctx, stack}, r4.type in {packet, stack}, r5.type=packet, r6.type=number]";
    assert_eq!(of(f, 1), "ctx");
    assert_eq!(of(f, 10), "other", "r1.type is not r10's");
    assert_eq!(of(f, 2), "moved ctx");
    assert_eq!(of(f, 3), "mixed");
    assert_eq!(of(f, 4), "other");
    assert_eq!(of(f, 5), "other");
    assert_eq!(of(f, 7), "other", "no fact: not the context");
    assert_eq!(of("[r1.type=ctx]", 1), "moved ctx", "no offset fact: refused");
    assert_eq!(of("[r1.type=[-4, -2]]", 1), "mixed", "an unrecognised type: refused");
}
