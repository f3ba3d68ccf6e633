//! Interpreter tests: every instruction class against expected values, a proptest of the ALU
//! against a Rust model, faults.

use super::*;
use crate::testing::asm::*;
use crate::xdp::{XdpAction, XdpProgram};

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
    // Through XdpProgram to get a real environment; the return code is what we test, so read
    // r0 through a final `exit` as the action code is too narrow: use the raw interpreter.
    let (buf, head, len, meta) = pkt.raw_parts_mut();
    let base = buf.as_ptr() as u64;
    let mut ctx = XdpCtx {
        data: base + head as u64,
        data_end: base + (head + len) as u64,
        data_meta: base + (head - meta) as u64,
        ..XdpCtx::default()
    };
    let maps = prep.maps.iter().as_slice();
    let mut mem = Memory::new(maps);
    let stack = mem.add_words(&mut w.stack).unwrap();
    mem.set_packet_buf(buf, head - meta, head + len);
    let ctx_addr = mem.set_ctx(&mut ctx);
    let mut env = Env {
        mem,
        maps,
        worker: w.index,
        now_ns: 7,
        prng: w.prng,
        trace: &mut w.trace,
        ctx: CtxKind::Xdp(ctx_addr),
        stack_top: stack.end(),
        redirect: None,
        args: [(0, 0, false); 8],
        nargs: 0,
        fault: None,
    };
    interpret(prep, &mut env, ctx_addr)
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
