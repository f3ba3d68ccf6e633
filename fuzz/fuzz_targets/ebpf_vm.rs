//! Fuzz target `ebpf_vm`: arbitrary bytes as an eBPF program, through everything snic does
//! before and while running it.
//!
//! Input layout: byte 0 selects the path, bytes 1..3 (LE16) the packet length `n` (cut to
//! what is left), then `n` packet bytes, then the program:
//! - byte 0 even: the program bytes are an ELF object: `Object::parse`, then for the first
//!   XDP program `verify`, `prepare`, and a run on the packet;
//! - byte 0 odd: the program bytes are raw instructions (8 bytes each), prepared without the
//!   verifier (`prepare_insns`) and run on the packet, so the interpreter's own checks (every
//!   access against the run's regions, the instruction budget, the call depth) meet programs
//!   no verifier would pass.
//!
//! A bug is any panic, and a run that leaves the packet window outside the buffer.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_ebpf::vm::prepare_insns;
use snic_ebpf::{Insn, MapSet, Object, ProgKind, Worker, XdpProgram, prepare, verify};
use snic_pipeline::PacketBuf;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let elf = data[0] % 2 == 0;
    let n = usize::from(u16::from_le_bytes([data[1], data[2]])).min(data.len() - 3);
    let (frame, prog) = data[3..].split_at(n);
    let mut pkt = PacketBuf::from_frame(frame);
    let program = if elf {
        let Ok(obj) = Object::parse(prog, "fuzz.o") else { return };
        let Some(p) = obj.programs.iter().find(|p| p.kind == ProgKind::Xdp) else { return };
        let Ok(maps) = MapSet::new(&obj, 1) else { return };
        let Ok(verdict) = verify(p) else { return };
        let Ok(prepared) = prepare(p, &verdict, &maps) else { return };
        XdpProgram::from_prepared(prepared)
    } else {
        let insns = Insn::decode_all(prog);
        let maps = MapSet::default();
        let Ok(prepared) = prepare_insns(&insns, ProgKind::Xdp, &[], &maps, "fuzz".into()) else {
            return;
        };
        XdpProgram::from_prepared(prepared)
    };
    let mut w = Worker::new(0);
    let _ = program.run(&mut w, &mut pkt, 1, 0, 0);
    assert!(pkt.headroom() + pkt.len() <= pkt.capacity());
    assert!(pkt.meta_len() <= pkt.headroom());
});
