//! XDP programs: loaded from an object, verified, prepared, and run on packets in place.
//!
//! [`XdpProgram::run`] gives the program snic's [`XdpCtx`] over the packet buffer itself (no
//! copy): `data_meta..data_end` is the metadata plus the frame, the headroom in front is where
//! `bpf_xdp_adjust_head`/`_meta` move, the tailroom behind is where `bpf_xdp_adjust_tail`
//! grows. Afterwards the buffer's window is set to where the program left it. The return code
//! becomes an [`XdpAction`]; a code outside `XDP_ABORTED..=XDP_REDIRECT`, a `XDP_REDIRECT`
//! without a target, or a fault is [`XdpAction::Aborted`].
//!
//! Buffer geometry follows the kernel's `BPF_PROG_TEST_RUN`: the first
//! [`crate::helpers::XDP_FRAME_RESERVE`] bytes of the buffer are never given to the program
//! (the kernel keeps its `struct xdp_frame` there), and the frame may grow up to the end of
//! the buffer. [`test_run_buf`] builds a buffer with exactly the kernel's geometry (256 bytes
//! of headroom, 3520 bytes of room for the frame) for the differential test.

use crate::jit::{JitError, JitProgram};
use crate::maps::MapSet;
use crate::object::{LoadError, Object, ProgKind};
use crate::raw::Memory;
use crate::verify::{Refusal, Verdict, verify};
use crate::vm::{CtxKind, Env, Fault, PrepareError, Prepared, Worker, XdpCtx, interpret, prepare};
use snic_pipeline::PacketBuf;
use std::fmt;

/// The kernel's `XDP_PACKET_HEADROOM`.
pub const XDP_PACKET_HEADROOM: usize = 256;
/// Room for the frame in a `BPF_PROG_TEST_RUN` buffer: a 4096-byte page less the headroom and
/// the 320 bytes of `struct skb_shared_info`.
pub const TEST_RUN_FRAME_ROOM: usize = 4096 - XDP_PACKET_HEADROOM - 320;

/// A packet buffer holding a copy of `frame` with the geometry of the kernel's
/// `BPF_PROG_TEST_RUN` for XDP ([`XDP_PACKET_HEADROOM`], [`TEST_RUN_FRAME_ROOM`]).
pub fn test_run_buf(frame: &[u8]) -> PacketBuf {
    let mut p = PacketBuf::with_room(XDP_PACKET_HEADROOM, TEST_RUN_FRAME_ROOM.max(frame.len()));
    let _ = p.set_window(XDP_PACKET_HEADROOM, 0, 0);
    let (buf, head, _, _) = p.raw_parts_mut();
    buf[head..head + frame.len()].copy_from_slice(frame);
    let _ = p.set_window(XDP_PACKET_HEADROOM, frame.len(), 0);
    p
}

/// Why a program could not be loaded to run.
#[derive(Clone, Debug, PartialEq)]
pub enum LoadFailure {
    /// The object or the program in it did not load.
    Load(LoadError),
    /// The verifier refused the program.
    Refused(Refusal),
    /// The program is verified but uses something snic does not run.
    Prepare(PrepareError),
    /// The program is not of the kind asked for (an XDP program where a NIC-core one was
    /// wanted, or the reverse).
    WrongKind {
        /// Kind wanted.
        want: ProgKind,
        /// Kind found.
        found: ProgKind,
    },
}

impl fmt::Display for LoadFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadFailure::Load(e) => write!(f, "{e}"),
            LoadFailure::Refused(r) => write!(f, "verification failed: {r}"),
            LoadFailure::Prepare(e) => write!(f, "{e}"),
            LoadFailure::WrongKind { want, found } => {
                write!(f, "the program is of kind {found:?}, not {want:?}")
            }
        }
    }
}

impl std::error::Error for LoadFailure {}

impl From<LoadError> for LoadFailure {
    fn from(e: LoadError) -> Self {
        LoadFailure::Load(e)
    }
}
impl From<Refusal> for LoadFailure {
    fn from(e: Refusal) -> Self {
        LoadFailure::Refused(e)
    }
}
impl From<PrepareError> for LoadFailure {
    fn from(e: PrepareError) -> Self {
        LoadFailure::Prepare(e)
    }
}

/// Finds, verifies and prepares the program of kind `want` in `section`.
pub(crate) fn load_program(
    obj: &Object,
    section: Option<&str>,
    maps: &MapSet,
    want: ProgKind,
) -> Result<(Prepared, Verdict), LoadFailure> {
    let prog = match section {
        Some(s) => obj.program(Some(s), None)?,
        None => obj
            .programs
            .iter()
            .find(|p| p.kind == want)
            .ok_or_else(|| LoadError::NoProgram(format!("of kind {want:?}")))?,
    };
    if prog.kind != want {
        return Err(LoadFailure::WrongKind { want, found: prog.kind });
    }
    let verdict = verify(prog)?;
    let prepared = prepare(prog, &verdict, maps)?;
    Ok((prepared, verdict))
}

/// Builds one XDP run's environment over `pkt` (the context on the packet's window in its
/// buffer, the worker's stack, the region table), calls `f` with it and the context's address,
/// then releases ring-buffer records the run leaked and writes the window the helpers moved
/// back to `pkt`. `(ingress_ifindex, rx_queue, now_ns)` fill the context and the clock.
/// Returns what `f` returned and the redirect target; a fault when the environment cannot be
/// built.
pub(crate) fn run_in_env<R>(
    prepared: &Prepared,
    w: &mut Worker,
    pkt: &mut PacketBuf,
    (ingress_ifindex, rx_queue, now_ns): (u32, u32, u64),
    f: impl FnOnce(&mut Env<'_>, u64) -> R,
) -> Result<(R, Option<u32>), Fault> {
    let (buf, head, len, meta_len) = pkt.raw_parts_mut();
    let base = buf.as_ptr() as u64;
    let mut ctx = XdpCtx {
        data: base + head as u64,
        data_end: base + (head + len) as u64,
        data_meta: base + (head - meta_len) as u64,
        ingress_ifindex,
        rx_queue_index: rx_queue,
        egress_ifindex: 0,
        pad: 0,
    };
    let maps = prepared.maps.iter().as_slice();
    let mut mem = Memory::new(maps);
    let stack = mem.add_words(&mut w.stack).ok_or(Fault::Budget)?;
    mem.set_packet_buf(buf, head - meta_len, head + len);
    let ctx_addr = mem.set_ctx(&mut ctx);
    let run = (w.index, w.prng, now_ns);
    let mut env = Env::new(mem, maps, CtxKind::Xdp(ctx_addr), stack.end(), &mut w.trace, run);
    let r = f(&mut env, ctx_addr);
    let leaked = env.release_leaked();
    let (prng, redirect) = (env.prng, env.redirect);
    w.prng = prng;
    w.ringbuf_leaked += leaked;
    // The helpers keep the window inside the buffer; set it on the buffer.
    // (`set_window` refuses anything outside the buffer; wrapping keeps a broken
    // invariant from panicking.)
    let head = ctx.data.wrapping_sub(base) as usize;
    let _ = pkt.set_window(
        head,
        ctx.data_end.wrapping_sub(ctx.data) as usize,
        ctx.data.wrapping_sub(ctx.data_meta) as usize,
    );
    Ok((r, redirect))
}

/// What an XDP program decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum XdpAction {
    /// `XDP_ABORTED` (0): an error; the packet is dropped and counted apart.
    Aborted,
    /// `XDP_DROP` (1).
    Drop,
    /// `XDP_PASS` (2): on through the pipeline.
    Pass,
    /// `XDP_TX` (3): back out of the port it came in by.
    Tx,
    /// `XDP_REDIRECT` (4) to this port (`bpf_redirect` ifindex or devmap value).
    Redirect(u32),
}

impl XdpAction {
    /// The kernel's return code.
    pub fn code(self) -> u32 {
        match self {
            XdpAction::Aborted => 0,
            XdpAction::Drop => 1,
            XdpAction::Pass => 2,
            XdpAction::Tx => 3,
            XdpAction::Redirect(_) => 4,
        }
    }

    /// Lower-case name (`aborted`, `drop`, `pass`, `tx`, `redirect`).
    pub fn name(self) -> &'static str {
        match self {
            XdpAction::Aborted => "aborted",
            XdpAction::Drop => "drop",
            XdpAction::Pass => "pass",
            XdpAction::Tx => "tx",
            XdpAction::Redirect(_) => "redirect",
        }
    }
}

/// The result of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdpOutcome {
    /// The action.
    pub action: XdpAction,
    /// Why the run aborted, when it faulted.
    pub fault: Option<Fault>,
}

/// Which engine runs a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Engine {
    /// The interpreter ([`crate::vm::interpret`]): checks every memory access.
    Interpreter,
    /// The x86-64 JIT ([`JitProgram`]): native code, for verified programs.
    Jit,
}

/// A loaded, verified and prepared XDP program with its maps. Share it between workers in an
/// `Arc`; each worker runs it with its own [`Worker`].
///
/// A program loaded (and so verified) by [`XdpProgram::load`] is compiled by the JIT when the
/// JIT can (x86-64, every instruction supported) and then runs as native code; otherwise, and
/// after `set_engine(Engine::Interpreter)`, the interpreter runs it. A program whose object has
/// read-only data (`.rodata`) stays in the interpreter unless `set_engine(Engine::Jit)` asks:
/// only the interpreter enforces that the data is read-only.
#[derive(Debug)]
pub struct XdpProgram {
    loaded: Loaded,
}

/// What XDP and NIC-core programs share: the prepared program, whether the verifier accepted
/// it, its JIT code and the engine that runs it.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub(crate) prepared: Prepared,
    verify_time: std::time::Duration,
    /// Whether the verifier accepted it (only then may the JIT run it).
    verified: bool,
    jit: Option<JitProgram>,
    engine: Engine,
}

impl Loaded {
    /// Loads, verifies and prepares the program of kind `want` in `section` over `maps`, and
    /// compiles it with the JIT when the JIT can.
    pub(crate) fn load(
        obj: &Object,
        section: Option<&str>,
        maps: &MapSet,
        want: ProgKind,
    ) -> Result<Loaded, LoadFailure> {
        let (prepared, verdict) = load_program(obj, section, maps, want)?;
        // PREVAIL does not know which map values are read-only (`.rodata`), so it accepts a
        // store into them that the kernel refuses. The interpreter faults on such a store
        // (the region is read-only); JIT code would do it. So a program with read-only data
        // runs in the interpreter unless the JIT is asked for by name (`set_engine`).
        let readonly = prepared.maps.iter().any(|m| m.spec().readonly);
        let jit = if readonly { None } else { JitProgram::compile(&prepared).ok() };
        let engine = if jit.is_some() { Engine::Jit } else { Engine::Interpreter };
        Ok(Loaded { prepared, verify_time: verdict.took, verified: true, jit, engine })
    }

    /// See [`XdpProgram::set_engine`].
    pub(crate) fn set_engine(&mut self, engine: Engine) -> Result<(), JitError> {
        if engine == Engine::Jit {
            if !self.verified {
                return Err(JitError::Unverified);
            }
            if self.jit.is_none() {
                self.jit = Some(JitProgram::compile(&self.prepared)?);
            }
        }
        self.engine = engine;
        Ok(())
    }

    /// Runs the program in `env` with the selected engine.
    pub(crate) fn execute(&self, env: &mut Env<'_>, ctx_addr: u64) -> Result<u64, Fault> {
        match (&self.jit, self.engine) {
            // `jit` is only set for verified programs (`load`, `set_engine`).
            (Some(jit), Engine::Jit) => jit.run_verified(env, ctx_addr),
            _ => interpret(&self.prepared, env, ctx_addr),
        }
    }

    pub(crate) fn engine(&self) -> Engine {
        self.engine
    }

    pub(crate) fn jit(&self) -> Option<&JitProgram> {
        self.jit.as_ref()
    }

    pub(crate) fn verify_time(&self) -> std::time::Duration {
        self.verify_time
    }
}

impl XdpProgram {
    /// Loads the XDP program in `section` (or the object's first XDP program) over `maps`
    /// (the object's runtime maps, e.g. `MapSet::new(&obj, workers)` or a rebind of a running
    /// program's maps).
    pub fn load(
        obj: &Object,
        section: Option<&str>,
        maps: MapSet,
    ) -> Result<XdpProgram, LoadFailure> {
        Ok(XdpProgram { loaded: Loaded::load(obj, section, &maps, ProgKind::Xdp)? })
    }

    /// An XDP program from an already prepared one (e.g. [`crate::vm::prepare_insns`]). It
    /// was not verified here, so only the interpreter runs it.
    pub fn from_prepared(prepared: Prepared) -> XdpProgram {
        XdpProgram {
            loaded: Loaded {
                prepared,
                verify_time: std::time::Duration::ZERO,
                verified: false,
                jit: None,
                engine: Engine::Interpreter,
            },
        }
    }

    /// Selects the engine. [`Engine::Jit`] compiles the program first if needed and fails
    /// (leaving the engine as it was) when the JIT cannot compile it or the program did not
    /// come through the verifier ([`XdpProgram::from_prepared`]).
    pub fn set_engine(&mut self, engine: Engine) -> Result<(), JitError> {
        self.loaded.set_engine(engine)
    }

    /// The engine that runs the program.
    pub fn engine(&self) -> Engine {
        self.loaded.engine()
    }

    /// The compiled code, when the JIT compiled the program.
    pub fn jit(&self) -> Option<&JitProgram> {
        self.loaded.jit()
    }

    /// The prepared program (for the JIT).
    pub fn prepared(&self) -> &Prepared {
        &self.loaded.prepared
    }

    /// The program's maps.
    pub fn maps(&self) -> &MapSet {
        &self.loaded.prepared.maps
    }

    /// How long verification took.
    pub fn verify_time(&self) -> std::time::Duration {
        self.loaded.verify_time()
    }

    /// Runs the program on `pkt` in place.
    pub fn run(
        &self,
        w: &mut Worker,
        pkt: &mut PacketBuf,
        ingress_ifindex: u32,
        rx_queue: u32,
        now_ns: u64,
    ) -> XdpOutcome {
        let ran = run_in_env(
            &self.loaded.prepared,
            w,
            pkt,
            (ingress_ifindex, rx_queue, now_ns),
            |env, ctx_addr| self.loaded.execute(env, ctx_addr),
        );
        let (r, redirect) = match ran {
            Ok((r, redirect)) => (r, redirect),
            Err(f) => return XdpOutcome { action: XdpAction::Aborted, fault: Some(f) },
        };
        match r {
            Err(f) => XdpOutcome { action: XdpAction::Aborted, fault: Some(f) },
            Ok(code) => {
                let action = match code as u32 {
                    1 => XdpAction::Drop,
                    2 => XdpAction::Pass,
                    3 => XdpAction::Tx,
                    4 => match redirect {
                        Some(port) => XdpAction::Redirect(port),
                        None => XdpAction::Aborted,
                    },
                    _ => XdpAction::Aborted,
                };
                XdpOutcome { action, fault: None }
            }
        }
    }
}

#[cfg(test)]
#[path = "xdp_tests.rs"]
mod tests;
