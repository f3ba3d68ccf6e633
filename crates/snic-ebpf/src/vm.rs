//! The eBPF interpreter, and `prepare`, which turns a verified program into the form both of
//! snic's engines (this interpreter and the JIT) run.
//!
//! **Execution model.** Addresses are host addresses, as in the kernel: `r10` points into the
//! run's stack, the context's `data`/`data_end` into the packet buffer, a map lookup returns
//! the address of a value. Programs are verified by PREVAIL first; the interpreter still checks
//! every load and store against the run's regions ([`crate::raw::Memory`]: the stack, the
//! context, the packet window `data_meta..data_end`, map values, NIC-core arguments) and counts
//! executed instructions against [`MAX_STEPS`], so a fault or a runaway program ends the run
//! with a typed [`Fault`] (XDP: `XDP_ABORTED`), never a panic.
//!
//! **Prepare.** [`prepare`] rewrites what the verifier saw into what runs:
//! - context accesses (the verifier's [`Verdict::ctx_accesses`]) from the Linux layout
//!   (`struct xdp_md`, 32-bit fields) to snic's ([`XdpCtx`], 64-bit pointers), as the kernel
//!   rewrites them; NIC-core programs likewise ([`crate::core::CoreCtx`]);
//! - map references: `lddw src=1` becomes the address of the runtime [`crate::maps::Map`],
//!   `lddw src=2` the address of value 0 plus the offset (global data);
//! - and it refuses what snic does not run (unknown helpers, tail calls, legacy packet loads,
//!   kfuncs) with a [`PrepareError`].
//!
//! **Stack.** [`FRAME_SIZE`] bytes per frame, up to [`MAX_FRAMES`] frames of bpf-to-bpf calls,
//! one [`STACK_SIZE`]-byte stack per worker reused by every run.
//!
//! We wrote our own interpreter rather than using `rbpf`: snic's runs need the region table
//! shared with the helpers, host addresses for map values shared between workers, atomics as
//! real atomics, the v4 instructions clang emits with `-mcpu=v4`, and typed faults; `rbpf`'s
//! memory model (one memory slice plus a packet) does not fit maps shared across workers.

use crate::insn::{Insn, class, pseudo};
use crate::maps::{Map, MapSet};
use crate::object::{ProgKind, Program};
use crate::raw::{AtomicOp, Memory};
use crate::verify::Verdict;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

/// Bytes of stack per frame (the kernel's `MAX_BPF_STACK`).
pub const FRAME_SIZE: usize = 512;
/// Most frames (the main program plus nested bpf-to-bpf calls), as the kernel allows.
pub const MAX_FRAMES: usize = 8;
/// Bytes of stack per run (per worker).
pub const STACK_SIZE: usize = FRAME_SIZE * MAX_FRAMES;
/// Most instructions one run executes before it is ended with [`Fault::Budget`] (defence in
/// depth: the verifier proved termination).
pub const MAX_STEPS: u64 = 1_000_000;
/// Most lines a worker's trace buffer keeps (older lines are dropped and counted).
pub const TRACE_LINES: usize = 1024;

/// snic's XDP context, the runtime layout of `struct xdp_md` (pointers as 64-bit addresses).
/// `prepare` rewrites the program's 32-bit `xdp_md` loads to these fields.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpCtx {
    /// Address of the first byte of the frame (`xdp_md.data`, offset 0 there).
    pub data: u64,
    /// Address one past the frame (`xdp_md.data_end`, offset 4).
    pub data_end: u64,
    /// Address of the metadata in front of the frame; `== data` when there is none
    /// (`xdp_md.data_meta`, offset 8).
    pub data_meta: u64,
    /// Ingress port (`xdp_md.ingress_ifindex`, offset 12).
    pub ingress_ifindex: u32,
    /// Receive queue (`xdp_md.rx_queue_index`, offset 16).
    pub rx_queue_index: u32,
    /// Egress port, 0 in XDP (`xdp_md.egress_ifindex`, offset 20).
    pub egress_ifindex: u32,
    /// Padding to 40 bytes.
    pub pad: u32,
}

impl XdpCtx {
    /// Offset of `data` in [`XdpCtx`].
    pub const DATA: u64 = 0;
    /// Offset of `data_end`.
    pub const DATA_END: u64 = 8;
    /// Offset of `data_meta`.
    pub const DATA_META: u64 = 16;
}

/// Why a run ended early. XDP reports it as `XDP_ABORTED`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// A load, store or atomic outside the run's regions (or a write to a read-only one, or a
    /// misaligned atomic).
    Memory {
        /// Instruction index.
        pc: usize,
        /// Address.
        addr: u64,
        /// Bytes.
        len: u8,
        /// True for a store.
        write: bool,
    },
    /// An instruction the interpreter does not run (`prepare` should have refused it).
    BadInstruction {
        /// Instruction index.
        pc: usize,
        /// Its opcode.
        code: u8,
    },
    /// Control left the program (a jump or fall-through past its end).
    PcOutOfRange {
        /// The instruction index it reached.
        pc: usize,
    },
    /// More than [`MAX_STEPS`] instructions executed.
    Budget,
    /// More than [`MAX_FRAMES`] nested bpf-to-bpf calls.
    CallDepth {
        /// Instruction index of the call.
        pc: usize,
    },
    /// A helper snic does not provide to this kind of program.
    UnknownHelper {
        /// Helper id.
        id: u32,
    },
    /// A helper refused its arguments (a pointer outside the regions, not one of the
    /// program's maps, ...).
    Helper {
        /// Helper id.
        id: u32,
        /// What was wrong.
        reason: &'static str,
    },
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Memory { pc, addr, len, write } => write!(
                f,
                "instruction {pc}: {} of {len} bytes at {addr:#x} is outside the program's memory",
                if *write { "store" } else { "load" }
            ),
            Fault::BadInstruction { pc, code } => {
                write!(f, "instruction {pc}: opcode {code:#04x} is not runnable")
            }
            Fault::PcOutOfRange { pc } => write!(f, "control reached {pc}, outside the program"),
            Fault::Budget => write!(f, "more than {MAX_STEPS} instructions executed"),
            Fault::CallDepth { pc } => {
                write!(f, "instruction {pc}: more than {MAX_FRAMES} nested calls")
            }
            Fault::UnknownHelper { id } => write!(f, "helper {id} is not available"),
            Fault::Helper { id, reason } => write!(f, "helper {id}: {reason}"),
        }
    }
}

impl std::error::Error for Fault {}

/// Why a verified program cannot be prepared to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrepareError {
    /// Not an XDP or NIC-core program.
    Kind(ProgKind),
    /// A context access outside the fields snic provides (or a store to the context).
    CtxAccess {
        /// Instruction index.
        insn: usize,
        /// Offset in the Linux context.
        off: i16,
        /// Access size in bytes.
        size: u8,
        /// True for a store.
        write: bool,
    },
    /// A call of a helper snic does not provide to this program type.
    UnknownHelper {
        /// Instruction index.
        insn: usize,
        /// Helper id.
        id: i32,
    },
    /// `bpf_tail_call` (snic has no program arrays).
    TailCall {
        /// Instruction index.
        insn: usize,
    },
    /// An instruction the runtime does not run (legacy packet loads, kfunc calls, ...).
    Unsupported {
        /// Instruction index.
        insn: usize,
        /// Opcode.
        code: u8,
    },
    /// A map reference that does not resolve (bad index, no value 0).
    BadMap {
        /// Instruction index.
        insn: usize,
    },
    /// A jump or call out of the program, a jump from one bpf-to-bpf subprogram into another
    /// (or a subprogram that does not end in `exit` or `ja`), or an `lddw` cut in half.
    BadJump {
        /// Instruction index.
        insn: usize,
    },
}

impl fmt::Display for PrepareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrepareError::Kind(k) => write!(f, "cannot run a program of kind {k:?}"),
            PrepareError::CtxAccess { insn, off, size, write } => write!(
                f,
                "instruction {insn}: {} of {size} bytes at context offset {off} is not a field \
                 snic provides",
                if *write { "store" } else { "load" }
            ),
            PrepareError::UnknownHelper { insn, id } => {
                write!(f, "instruction {insn}: helper {id} is not available in snic")
            }
            PrepareError::TailCall { insn } => {
                write!(f, "instruction {insn}: tail calls are not supported")
            }
            PrepareError::Unsupported { insn, code } => {
                write!(f, "instruction {insn}: opcode {code:#04x} is not supported")
            }
            PrepareError::BadMap { insn } => {
                write!(f, "instruction {insn}: map reference does not resolve")
            }
            PrepareError::BadJump { insn } => {
                write!(f, "instruction {insn}: jump or call outside the program or its subprogram")
            }
        }
    }
}

impl std::error::Error for PrepareError {}

/// A program ready to run: instructions with context accesses rewritten and map addresses
/// bound, and the maps they point to (kept alive here).
#[derive(Clone, Debug)]
pub struct Prepared {
    /// Instructions (an `lddw` still takes two slots; its immediates are final addresses).
    pub insns: Vec<Insn>,
    /// XDP or NIC core.
    pub kind: ProgKind,
    /// Bytes of stack a run needs ([`STACK_SIZE`]: [`MAX_FRAMES`] frames of [`FRAME_SIZE`]).
    pub stack_size: usize,
    /// The object's maps; `insns` holds their addresses.
    pub maps: MapSet,
    /// Program name (`section/function`).
    pub name: String,
}

/// Helpers available to XDP programs.
pub const XDP_HELPERS: &[u32] =
    &[1, 2, 3, 5, 6, 7, 8, 23, 28, 44, 51, 54, 65, 125, 130, 131, 132, 133];
/// Helpers available to NIC-core programs.
pub const CORE_HELPERS: &[u32] = &[
    1,
    2,
    3,
    5,
    6,
    7,
    8,
    28,
    125,
    130,
    131,
    132,
    133,
    crate::core::HELPER_ARG_READ,
    crate::core::HELPER_ARG_WRITE,
];

/// `bpf_tail_call`.
const HELPER_TAIL_CALL: i32 = 12;

/// Prepares a verified program to run over `maps` (the runtime maps of its object, by
/// [`crate::Object::maps`] index).
pub fn prepare(prog: &Program, verdict: &Verdict, maps: &MapSet) -> Result<Prepared, PrepareError> {
    let name = format!("{}/{}", prog.section, prog.name);
    let prepared = prepare_insns(&prog.insns, prog.kind, &verdict.ctx_accesses, maps, name)?;
    check_subprograms(&prepared.insns)?;
    Ok(prepared)
}

/// [`prepare`] on a bare instruction list: `ctx_accesses` names the context loads to rewrite.
/// Runs no verifier: for tests and fuzzing of the interpreter's own checks (which keep even an
/// unverified program from touching memory outside its regions).
pub fn prepare_insns(
    insns: &[Insn],
    kind: ProgKind,
    ctx_accesses: &[usize],
    maps: &MapSet,
    name: String,
) -> Result<Prepared, PrepareError> {
    let helpers = match kind {
        ProgKind::Xdp => XDP_HELPERS,
        ProgKind::NicCore => CORE_HELPERS,
        k @ ProgKind::Other => return Err(PrepareError::Kind(k)),
    };
    let mut insns = insns.to_vec();
    let n = insns.len();
    // Second halves of `lddw`: no jump may land there.
    let mut second = vec![false; n];
    let mut k = 0;
    while k < n {
        if insns[k].code == 0x18 && k + 1 < n {
            second[k + 1] = true;
            k += 2;
        } else {
            k += 1;
        }
    }
    let mut pc = 0;
    while pc < n {
        let i = insns[pc];
        let wide = i.code == 0x18;
        match i.class() {
            class::LD => {
                if !wide || pc + 1 >= n {
                    return Err(PrepareError::Unsupported { insn: pc, code: i.code });
                }
                match i.src {
                    0 => {}
                    pseudo::MAP_FD | pseudo::MAP_VALUE => {
                        let map = usize::try_from(i.imm)
                            .ok()
                            .and_then(|k| maps.get(k))
                            .ok_or(PrepareError::BadMap { insn: pc })?;
                        let addr = if i.src == pseudo::MAP_FD {
                            Arc::as_ptr(map) as u64
                        } else {
                            let base = map
                                .lookup(&0u32.to_le_bytes(), 0)
                                .ok_or(PrepareError::BadMap { insn: pc })?;
                            let off = insns[pc + 1].imm as u32;
                            if off >= map.spec().value_size {
                                return Err(PrepareError::BadMap { insn: pc });
                            }
                            base + u64::from(off)
                        };
                        insns[pc].src = 0;
                        insns[pc].imm = addr as u32 as i32;
                        insns[pc + 1].imm = (addr >> 32) as u32 as i32;
                    }
                    _ => return Err(PrepareError::Unsupported { insn: pc, code: i.code }),
                }
            }
            class::JMP | class::JMP32 => {
                let op = i.code & 0xf0;
                if op == 0x80 {
                    if i.class() != class::JMP {
                        return Err(PrepareError::Unsupported { insn: pc, code: i.code });
                    }
                    match i.src {
                        0 => {
                            if i.imm == HELPER_TAIL_CALL {
                                return Err(PrepareError::TailCall { insn: pc });
                            }
                            if !u32::try_from(i.imm).is_ok_and(|id| helpers.contains(&id)) {
                                return Err(PrepareError::UnknownHelper { insn: pc, id: i.imm });
                            }
                        }
                        pseudo::CALL => check_target(&second, pc, i64::from(i.imm))?,
                        _ => return Err(PrepareError::Unsupported { insn: pc, code: i.code }),
                    }
                } else if op == 0x90 {
                    // exit
                } else if op == 0x00 && i.class() == class::JMP32 {
                    check_target(&second, pc, i64::from(i.imm))?;
                } else {
                    check_target(&second, pc, i64::from(i.off))?;
                }
            }
            class::LDX | class::ST | class::STX => {
                let mode = i.code & 0xe0;
                let ok = match i.class() {
                    class::LDX => mode == 0x60 || (mode == 0x80 && i.code & 0x18 != 0x18),
                    class::ST => mode == 0x60,
                    _ => {
                        mode == 0x60
                            || (mode == 0xc0
                                && matches!(i.code & 0x18, 0x00 | 0x18)
                                && matches!(
                                    i.imm,
                                    0x00 | 0x01
                                        | 0x40
                                        | 0x41
                                        | 0x50
                                        | 0x51
                                        | 0xa0
                                        | 0xa1
                                        | 0xe1
                                        | 0xf1
                                ))
                    }
                };
                if !ok {
                    return Err(PrepareError::Unsupported { insn: pc, code: i.code });
                }
            }
            _ => {}
        }
        pc += if wide { 2 } else { 1 };
    }
    for &at in ctx_accesses {
        let Some(i) = insns.get(at).copied() else { continue };
        let size = SIZES[usize::from((i.code >> 3) & 3)];
        let write = i.class() != class::LDX;
        let bad = PrepareError::CtxAccess { insn: at, off: i.off, size, write };
        if write || i.code & 0xe0 != 0x60 {
            return Err(bad);
        }
        let (code, off) = match kind {
            ProgKind::Xdp => xdp_ctx_rewrite(i.off, size).ok_or(bad)?,
            _ => crate::core::ctx_rewrite(i.off, size).ok_or(bad)?,
        };
        insns[at].code = code;
        insns[at].off = off;
    }
    Ok(Prepared { insns, kind, stack_size: STACK_SIZE, maps: maps.clone(), name })
}

/// The kernel's rule for bpf-to-bpf calls: the program splits into subprograms at the
/// targets of its local calls (sorted); a jump must stay inside its subprogram, each
/// subprogram must end in `exit` or an unconditional jump, and nothing may call the entry.
/// Both engines rely on it: the JIT compiles each subprogram as a function with its own
/// return, so a jump from one into another would run a `ret` in the wrong frame.
pub(crate) fn check_subprograms(insns: &[Insn]) -> Result<(), PrepareError> {
    let n = insns.len();
    let mut starts = vec![0usize];
    for (pc, i) in insns.iter().enumerate() {
        if i.code == (class::JMP | 0x80) && i.src == pseudo::CALL {
            // `check_target` already put the target inside the program.
            let t = usize::try_from(pc as i64 + 1 + i64::from(i.imm))
                .map_err(|_| PrepareError::BadJump { insn: pc })?;
            if t == 0 {
                return Err(PrepareError::BadJump { insn: pc });
            }
            starts.push(t);
        }
    }
    starts.sort_unstable();
    starts.dedup();
    for (k, &start) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(n);
        let last = insns.get(end.wrapping_sub(1)).filter(|_| end > start);
        if !last.is_some_and(|l| matches!(l.code, 0x95 | 0x05 | 0x06)) {
            return Err(PrepareError::BadJump { insn: end.saturating_sub(1) });
        }
        let mut pc = start;
        while pc < end {
            let i = insns[pc];
            let op = i.code & 0xf0;
            let jump = matches!(i.class(), class::JMP | class::JMP32) && op != 0x80 && op != 0x90;
            if jump {
                let rel = if i.code == 0x06 { i64::from(i.imm) } else { i64::from(i.off) };
                let t = pc as i64 + 1 + rel;
                if t < start as i64 || t >= end as i64 {
                    return Err(PrepareError::BadJump { insn: pc });
                }
            }
            pc += if i.code == 0x18 { 2 } else { 1 };
        }
    }
    Ok(())
}

/// Sizes by the 2-bit size field (W, H, B, DW).
const SIZES: [u8; 4] = [4, 2, 1, 8];

/// `ldxdw` opcode.
pub(crate) const LDXDW: u8 = 0x79;
/// `ldxw` opcode.
pub(crate) const LDXW: u8 = 0x61;

/// The rewritten opcode and offset of an `xdp_md` load.
fn xdp_ctx_rewrite(off: i16, size: u8) -> Option<(u8, i16)> {
    if size != 4 {
        return None;
    }
    Some(match off {
        0 => (LDXDW, 0),
        4 => (LDXDW, 8),
        8 => (LDXDW, 16),
        12 => (LDXW, 24),
        16 => (LDXW, 28),
        20 => (LDXW, 32),
        _ => return None,
    })
}

fn check_target(second: &[bool], pc: usize, off: i64) -> Result<(), PrepareError> {
    let t = pc as i64 + 1 + off;
    let ok = usize::try_from(t).is_ok_and(|t| t < second.len() && !second[t]);
    if ok { Ok(()) } else { Err(PrepareError::BadJump { insn: pc }) }
}

/// Lines written by `bpf_trace_printk`, bounded: when full the oldest line goes and is counted.
#[derive(Clone, Debug, Default)]
pub struct TraceBuf {
    lines: VecDeque<String>,
    dropped: u64,
}

impl TraceBuf {
    /// Appends one line.
    pub fn push(&mut self, line: String) {
        if self.lines.len() >= TRACE_LINES {
            self.lines.pop_front();
            self.dropped += 1;
        }
        self.lines.push_back(line);
    }

    /// Takes every line.
    pub fn drain(&mut self) -> Vec<String> {
        self.lines.drain(..).collect()
    }

    /// Copies of the lines from index `from` on (oldest first).
    pub fn peek_from(&self, from: usize) -> Vec<String> {
        self.lines.iter().skip(from).cloned().collect()
    }

    /// Lines held.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// True when no line is held.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Lines lost to the bound so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// Per-worker state reused by every run: the stack, the PRNG, the trace lines.
#[derive(Debug)]
pub struct Worker {
    /// Worker index (per-CPU maps, `bpf_get_smp_processor_id`).
    pub index: usize,
    pub(crate) stack: Box<[u64]>,
    pub(crate) prng: u64,
    /// `bpf_trace_printk` output.
    pub trace: TraceBuf,
    /// Ring-buffer records runs on this worker reserved and never released (discarded at
    /// the end of their run; see [`Reserved`]).
    pub ringbuf_leaked: u64,
}

impl Worker {
    /// A worker with index `index`.
    pub fn new(index: usize) -> Worker {
        Worker {
            index,
            stack: vec![0u64; STACK_SIZE / 8].into_boxed_slice(),
            prng: 0x9e37_79b9_7f4a_7c15 ^ (index as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9),
            trace: TraceBuf::default(),
            ringbuf_leaked: 0,
        }
    }

    /// Reseeds the PRNG (`bpf_get_prandom_u32`), for reproducible tests.
    pub fn seed(&mut self, seed: u64) {
        self.prng = seed | 1;
    }
}

/// What kind of context a run has (which helpers may touch it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CtxKind {
    /// An [`XdpCtx`] at this address.
    Xdp(u64),
    /// A [`crate::core::CoreCtx`] at this address.
    Core(u64),
}

/// The state one run gives its helpers: memory regions, maps, worker, time, PRNG, trace,
/// redirect target, packet bounds, fault. Both engines pass it to
/// [`crate::helpers::dispatch`] (the JIT through its `extern "C"` helper entry).
#[derive(Debug)]
pub struct Env<'a> {
    pub(crate) mem: Memory<'a>,
    pub(crate) maps: &'a [Arc<Map>],
    pub(crate) worker: usize,
    pub(crate) now_ns: u64,
    pub(crate) prng: u64,
    pub(crate) trace: &'a mut TraceBuf,
    pub(crate) ctx: CtxKind,
    pub(crate) stack_top: u64,
    /// XDP: the port `bpf_redirect`/`bpf_redirect_map` chose.
    pub(crate) redirect: Option<u32>,
    /// NIC core: the arguments' regions, by index.
    pub(crate) args: [(u64, u64, bool); 8],
    pub(crate) nargs: usize,
    /// Set by a helper that faulted; the run ends with it.
    pub(crate) fault: Option<Fault>,
    /// Ring-buffer records this run reserved and has not submitted or discarded yet.
    pub(crate) reserved: Reserved,
}

/// Most ring-buffer records one run may hold reserved at once; `bpf_ringbuf_reserve` returns
/// NULL beyond it (programs must handle NULL anyway: the verifier makes them check).
pub const MAX_RESERVED: usize = 8;

/// The records a run holds reserved. The kernel's verifier proves every reservation is
/// released on every path; PREVAIL does not track references, so snic enforces it at run
/// time instead: whatever a run leaves reserved is discarded when the run ends (and counted
/// in [`Worker::ringbuf_leaked`]), so a leaking program cannot block a ring for its consumers.
#[derive(Clone, Copy, Debug, Default)]
pub struct Reserved {
    addrs: [u64; MAX_RESERVED],
    len: usize,
}

impl Reserved {
    /// Remembers a reservation; false when the run already holds [`MAX_RESERVED`].
    pub(crate) fn push(&mut self, addr: u64) -> bool {
        if self.len == MAX_RESERVED {
            return false;
        }
        self.addrs[self.len] = addr;
        self.len += 1;
        true
    }

    /// Whether the run holds room for one more reservation.
    pub(crate) fn full(&self) -> bool {
        self.len == MAX_RESERVED
    }

    /// Forgets a reservation the program released.
    pub(crate) fn remove(&mut self, addr: u64) {
        if let Some(i) = self.addrs[..self.len].iter().position(|&a| a == addr) {
            self.addrs[i] = self.addrs[self.len - 1];
            self.len -= 1;
        }
    }
}

impl<'a> Env<'a> {
    /// A run's environment: `mem` its region table, `maps` the program's maps, `ctx` the
    /// context kind and address, `stack_top` the initial `r10`, `trace` the worker's trace
    /// buffer, `(worker, prng, now_ns)` the worker index, its PRNG state and the clock.
    pub(crate) fn new(
        mem: Memory<'a>,
        maps: &'a [Arc<Map>],
        ctx: CtxKind,
        stack_top: u64,
        trace: &'a mut TraceBuf,
        (worker, prng, now_ns): (usize, u64, u64),
    ) -> Env<'a> {
        Env {
            mem,
            maps,
            worker,
            now_ns,
            prng,
            trace,
            ctx,
            stack_top,
            redirect: None,
            args: [(0, 0, false); 8],
            nargs: 0,
            fault: None,
            reserved: Reserved::default(),
        }
    }

    /// Discards every record the run left reserved; returns how many there were.
    pub(crate) fn release_leaked(&mut self) -> u64 {
        let leaked = self.reserved;
        self.reserved = Reserved::default();
        for &addr in &leaked.addrs[..leaked.len] {
            if let Some(m) = self.maps.iter().find(|m| m.ringbuf_owns(addr)) {
                let _ = m.ringbuf_commit(addr, true);
            }
        }
        leaked.len as u64
    }
}

impl<'a> Env<'a> {
    /// Address one past the top of the run's stack (the initial `r10`).
    pub fn stack_top(&self) -> u64 {
        self.stack_top
    }

    /// The fault a helper reported, if any.
    pub fn fault(&self) -> Option<&Fault> {
        self.fault.as_ref()
    }

    /// Takes the fault a helper reported (engines check after each helper call).
    pub fn take_fault(&mut self) -> Option<Fault> {
        self.fault.take()
    }

    /// The map at `addr`, if it is one of this program's maps (borrowed for the run, not
    /// from `self`, so helpers can use it while they change the environment).
    pub(crate) fn map_at(&self, addr: u64) -> Option<&'a Map> {
        let maps: &'a [Arc<Map>] = self.maps;
        maps.iter().find(|m| Arc::as_ptr(m) as u64 == addr).map(|m| &**m)
    }
}

#[derive(Clone, Copy, Default)]
struct Frame {
    ret: usize,
    saved: [u64; 4],
    r10: u64,
}

#[inline]
fn mem_fault(pc: usize, addr: u64, len: u8, write: bool) -> Fault {
    Fault::Memory { pc, addr, len, write }
}

/// Runs `prog` with `r1` = `ctx`; returns `r0` at exit, or the fault that ended the run.
pub fn interpret(prog: &Prepared, env: &mut Env<'_>, ctx: u64) -> Result<u64, Fault> {
    let insns = &prog.insns[..];
    let mut r = [0u64; 11];
    r[1] = ctx;
    r[10] = env.stack_top;
    let mut frames = [Frame::default(); MAX_FRAMES];
    let mut depth = 0usize;
    let mut pc = 0usize;
    let mut steps = 0u64;
    loop {
        let Some(&i) = insns.get(pc) else { return Err(Fault::PcOutOfRange { pc }) };
        steps += 1;
        if steps > MAX_STEPS {
            return Err(Fault::Budget);
        }
        let at = pc;
        pc += 1;
        let d = usize::from(i.dst);
        let s = usize::from(i.src);
        if d > 10 || s > 10 {
            return Err(Fault::BadInstruction { pc: at, code: i.code });
        }
        let bad = Fault::BadInstruction { pc: at, code: i.code };
        match i.class() {
            class::ALU64 => {
                let src = if i.code & 0x08 != 0 { r[s] } else { i.imm as i64 as u64 };
                if d == 10 {
                    return Err(bad);
                }
                r[d] =
                    alu64(i.code & 0xf0, i.code & 0x08 != 0, i.off, i.imm, r[d], src).ok_or(bad)?;
            }
            class::ALU => {
                let src = if i.code & 0x08 != 0 { r[s] } else { i.imm as i64 as u64 };
                if d == 10 {
                    return Err(bad);
                }
                r[d] =
                    alu32(i.code & 0xf0, i.code & 0x08 != 0, i.off, i.imm, r[d], src).ok_or(bad)?;
            }
            class::LD => {
                if i.code != 0x18 {
                    return Err(bad);
                }
                let Some(next) = insns.get(pc) else { return Err(Fault::PcOutOfRange { pc }) };
                if d == 10 || i.src != 0 {
                    return Err(bad);
                }
                r[d] = u64::from(i.imm as u32) | (u64::from(next.imm as u32) << 32);
                pc += 1;
            }
            class::LDX => {
                let size = SIZES[usize::from((i.code >> 3) & 3)];
                let addr = r[s].wrapping_add(i.off as i64 as u64);
                if d == 10 {
                    return Err(bad);
                }
                let v = env.mem.load(addr, size).ok_or_else(|| mem_fault(at, addr, size, false))?;
                r[d] = match i.code & 0xe0 {
                    0x60 => v,
                    0x80 => match size {
                        1 => v as i8 as i64 as u64,
                        2 => v as i16 as i64 as u64,
                        4 => v as i32 as i64 as u64,
                        _ => return Err(bad),
                    },
                    _ => return Err(bad),
                };
            }
            class::ST => {
                let size = SIZES[usize::from((i.code >> 3) & 3)];
                if i.code & 0xe0 != 0x60 {
                    return Err(bad);
                }
                let addr = r[d].wrapping_add(i.off as i64 as u64);
                env.mem
                    .store(addr, size, i.imm as i64 as u64)
                    .ok_or_else(|| mem_fault(at, addr, size, true))?;
            }
            class::STX => {
                let size = SIZES[usize::from((i.code >> 3) & 3)];
                let addr = r[d].wrapping_add(i.off as i64 as u64);
                match i.code & 0xe0 {
                    0x60 => env
                        .mem
                        .store(addr, size, r[s])
                        .ok_or_else(|| mem_fault(at, addr, size, true))?,
                    0xc0 => {
                        if size != 4 && size != 8 {
                            return Err(bad);
                        }
                        let f = || mem_fault(at, addr, size, true);
                        let fetch = i.imm & 0x01 != 0;
                        let op = match i.imm & !0x01 {
                            0x00 => AtomicOp::Add,
                            0x40 => AtomicOp::Or,
                            0x50 => AtomicOp::And,
                            0xa0 => AtomicOp::Xor,
                            0xe0 if fetch => AtomicOp::Xchg,
                            0xf0 if fetch => {
                                let old = env
                                    .mem
                                    .cmpxchg(addr, size, trunc(r[0], size), r[s])
                                    .ok_or_else(f)?;
                                r[0] = old;
                                continue;
                            }
                            _ => return Err(bad),
                        };
                        let old = env.mem.atomic(addr, size, op, r[s]).ok_or_else(f)?;
                        if fetch {
                            if s == 10 {
                                return Err(bad);
                            }
                            r[s] = old;
                        }
                    }
                    _ => return Err(bad),
                }
            }
            class::JMP | class::JMP32 => {
                let op = i.code & 0xf0;
                let wide = i.class() == class::JMP;
                match op {
                    0x00 => {
                        let off = if wide { i64::from(i.off) } else { i64::from(i.imm) };
                        pc = jump(pc, off).ok_or(Fault::PcOutOfRange { pc: at })?;
                        continue;
                    }
                    0x80 if wide => {
                        if i.src == pseudo::CALL {
                            if depth + 1 >= MAX_FRAMES {
                                return Err(Fault::CallDepth { pc: at });
                            }
                            frames[depth] =
                                Frame { ret: pc, saved: [r[6], r[7], r[8], r[9]], r10: r[10] };
                            depth += 1;
                            r[10] = r[10].wrapping_sub(FRAME_SIZE as u64);
                            pc =
                                jump(pc, i64::from(i.imm)).ok_or(Fault::PcOutOfRange { pc: at })?;
                        } else if i.src == 0 {
                            let v = crate::helpers::dispatch(
                                env,
                                i.imm as u32,
                                [r[1], r[2], r[3], r[4], r[5]],
                            );
                            if let Some(f) = env.fault.take() {
                                return Err(f);
                            }
                            r[0] = v;
                            // r1-r5 are clobbered by calls; the verifier forbids reading them.
                        } else {
                            return Err(bad);
                        }
                        continue;
                    }
                    0x90 if wide => {
                        if depth == 0 {
                            return Ok(r[0]);
                        }
                        depth -= 1;
                        let f = frames[depth];
                        [r[6], r[7], r[8], r[9]] = f.saved;
                        r[10] = f.r10;
                        pc = f.ret;
                        continue;
                    }
                    _ => {}
                }
                let b = if i.code & 0x08 != 0 { r[s] } else { i.imm as i64 as u64 };
                let a = r[d];
                let taken = if wide { cond64(op, a, b) } else { cond32(op, a as u32, b as u32) };
                match taken {
                    Some(true) => {
                        pc = jump(pc, i64::from(i.off)).ok_or(Fault::PcOutOfRange { pc: at })?
                    }
                    Some(false) => {}
                    None => return Err(bad),
                }
            }
            _ => return Err(bad),
        }
    }
}

#[inline]
fn trunc(v: u64, size: u8) -> u64 {
    if size == 4 { v & 0xffff_ffff } else { v }
}

#[inline]
fn jump(pc: usize, off: i64) -> Option<usize> {
    usize::try_from(pc as i64 + off).ok()
}

/// 64-bit ALU operation `op` (the opcode's high nibble). `None` for an invalid encoding.
#[inline]
pub(crate) fn alu64(op: u8, reg: bool, off: i16, imm: i32, dst: u64, src: u64) -> Option<u64> {
    Some(match op {
        0x00 => dst.wrapping_add(src),
        0x10 => dst.wrapping_sub(src),
        0x20 => dst.wrapping_mul(src),
        0x30 => match off {
            0 => dst.checked_div(src).unwrap_or(0),
            1 => {
                if src == 0 {
                    0
                } else {
                    (dst as i64).wrapping_div(src as i64) as u64
                }
            }
            _ => return None,
        },
        0x40 => dst | src,
        0x50 => dst & src,
        0x60 => dst.wrapping_shl(src as u32 & 63),
        0x70 => dst.wrapping_shr(src as u32 & 63),
        0x80 => dst.wrapping_neg(),
        0x90 => match off {
            0 => dst.checked_rem(src).unwrap_or(dst),
            1 => {
                if src == 0 {
                    dst
                } else {
                    (dst as i64).wrapping_rem(src as i64) as u64
                }
            }
            _ => return None,
        },
        0xa0 => dst ^ src,
        0xb0 => match off {
            0 => src,
            8 if reg => src as i8 as i64 as u64,
            16 if reg => src as i16 as i64 as u64,
            32 if reg => src as i32 as i64 as u64,
            _ => return None,
        },
        0xc0 => ((dst as i64).wrapping_shr(src as u32 & 63)) as u64,
        0xd0 if !reg => bswap(dst, imm)?,
        _ => return None,
    })
}

/// 32-bit ALU operation: operates on the low halves, zero-extends the result.
#[inline]
pub(crate) fn alu32(op: u8, reg: bool, off: i16, imm: i32, dst: u64, src: u64) -> Option<u64> {
    let (a, b) = (dst as u32, src as u32);
    let v: u32 = match op {
        0x00 => a.wrapping_add(b),
        0x10 => a.wrapping_sub(b),
        0x20 => a.wrapping_mul(b),
        0x30 => match off {
            0 => a.checked_div(b).unwrap_or(0),
            1 => {
                if b == 0 {
                    0
                } else {
                    (a as i32).wrapping_div(b as i32) as u32
                }
            }
            _ => return None,
        },
        0x40 => a | b,
        0x50 => a & b,
        0x60 => a.wrapping_shl(b & 31),
        0x70 => a.wrapping_shr(b & 31),
        0x80 => a.wrapping_neg(),
        0x90 => match off {
            0 => a.checked_rem(b).unwrap_or(a),
            1 => {
                if b == 0 {
                    a
                } else {
                    (a as i32).wrapping_rem(b as i32) as u32
                }
            }
            _ => return None,
        },
        0xa0 => a ^ b,
        0xb0 => match off {
            0 => b,
            8 if reg => b as i8 as i32 as u32,
            16 if reg => b as i16 as i32 as u32,
            _ => return None,
        },
        0xc0 => (a as i32).wrapping_shr(b & 31) as u32,
        0xd0 => {
            // Byte order: source bit 0 = to little endian, 1 = to big endian (host is LE).
            return if reg { bswap(dst, imm) } else { truncate(dst, imm) };
        }
        _ => return None,
    };
    Some(u64::from(v))
}

/// Swaps the low `bits` bits' bytes, zero-extending (big-endian conversion on a LE host, and
/// the v4 unconditional `bswap`).
#[inline]
fn bswap(v: u64, bits: i32) -> Option<u64> {
    Some(match bits {
        16 => u64::from((v as u16).swap_bytes()),
        32 => u64::from((v as u32).swap_bytes()),
        64 => v.swap_bytes(),
        _ => return None,
    })
}

/// Keeps the low `bits` bits (little-endian conversion on a LE host).
#[inline]
fn truncate(v: u64, bits: i32) -> Option<u64> {
    Some(match bits {
        16 => v & 0xffff,
        32 => v & 0xffff_ffff,
        64 => v,
        _ => return None,
    })
}

/// Whether jump condition `op` holds: `a`/`b` are the operands zero-extended to 64 bits,
/// `sa`/`sb` sign-extended (the same values for 64-bit jumps).
#[inline]
fn cond(op: u8, a: u64, b: u64, sa: i64, sb: i64) -> Option<bool> {
    Some(match op {
        0x10 => a == b,
        0x20 => a > b,
        0x30 => a >= b,
        0x40 => a & b != 0,
        0x50 => a != b,
        0x60 => sa > sb,
        0x70 => sa >= sb,
        0xa0 => a < b,
        0xb0 => a <= b,
        0xc0 => sa < sb,
        0xd0 => sa <= sb,
        _ => return None,
    })
}

#[inline]
fn cond64(op: u8, a: u64, b: u64) -> Option<bool> {
    cond(op, a, b, a as i64, b as i64)
}

#[inline]
fn cond32(op: u8, a: u32, b: u32) -> Option<bool> {
    cond(op, u64::from(a), u64::from(b), i64::from(a as i32), i64::from(b as i32))
}

#[cfg(test)]
#[path = "vm_tests.rs"]
mod tests;
