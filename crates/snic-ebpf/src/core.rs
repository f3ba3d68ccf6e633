//! NIC-core programs (`SEC("snic/core")`): lookaside work written in C, compiled to BPF and run
//! by a compute worker over *address arguments* (ranges of device or host memory the caller
//! resolved and bounds-checked, as for every kernel command), with up to eight scalars.
//!
//! The context is `struct snic_core_md` (`examples/ebpf/include/snic_core.h`):
//!
//! | C offset | field            | meaning                                            |
//! |---------:|------------------|----------------------------------------------------|
//! | 0        | `__u32 data`     | start of argument 0 (a packet-like pointer)        |
//! | 4        | `__u32 data_end` | end of argument 0                                  |
//! | 8        | `__u32 nargs`    | number of address arguments                        |
//! | 12       | `__u32 id`       | the caller's workload id                           |
//! | 16       | `__u64 scalars[8]` | scalar arguments                                 |
//! | 80       | `__u32 arg_len[8]` | length of each address argument                  |
//!
//! 112 bytes ([`crate::platform::NIC_CORE_CTX`]). Programs read argument 0 directly with the
//! usual verified `data`/`data_end` checks, and copy from or to any argument with
//! `snic_arg_read(arg, offset, dst, len)` / `snic_arg_write(arg, offset, src, len)`
//! ([`HELPER_ARG_READ`], [`HELPER_ARG_WRITE`]), which check the range at run time and return
//! `-EINVAL` (after zeroing `dst`) when it does not fit. At run time the context is
//! [`CoreCtx`]: the same layout with `data`/`data_end` widened to 64-bit addresses, which
//! `prepare` accounts for by rewriting context loads.

use crate::jit::JitError;
use crate::maps::MapSet;
use crate::object::{Object, ProgKind};
use crate::raw::Memory;
use crate::vm::{CtxKind, Env, Fault, LDXDW, Prepared, Worker};
use crate::xdp::{Engine, LoadFailure, Loaded};

/// Helper id of `snic_arg_read(u32 arg, u32 offset, void *dst, u32 len)`.
pub const HELPER_ARG_READ: u32 = 0x7000;
/// Helper id of `snic_arg_write(u32 arg, u32 offset, const void *src, u32 len)`.
pub const HELPER_ARG_WRITE: u32 = 0x7001;
/// Most address arguments.
pub const MAX_ARGS: usize = 8;
/// Size of `struct snic_core_md` as programs see it.
pub const CORE_MD_SIZE: i16 = 112;

/// The runtime layout of `struct snic_core_md`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoreCtx {
    /// Address of argument 0.
    pub data: u64,
    /// One past its end.
    pub data_end: u64,
    /// Number of address arguments.
    pub nargs: u32,
    /// The caller's workload id.
    pub id: u32,
    /// Scalar arguments.
    pub scalars: [u64; 8],
    /// Length of each address argument.
    pub arg_len: [u32; 8],
}

/// The rewritten opcode and offset of a `snic_core_md` load of `size` bytes at `off`.
pub(crate) fn ctx_rewrite(off: i16, size: u8) -> Option<(u8, i16)> {
    match (off, size) {
        (0, 4) => Some((LDXDW, 0)),
        (4, 4) => Some((LDXDW, 8)),
        _ if off >= 8 && off + i16::from(size) <= CORE_MD_SIZE && off % i16::from(size) == 0 => {
            let code = match size {
                1 => 0x71,
                2 => 0x69,
                4 => 0x61,
                _ => 0x79,
            };
            Some((code, off + 8))
        }
        _ => None,
    }
}

/// A loaded, verified and prepared NIC-core program with its maps. Like
/// [`crate::XdpProgram`], it runs as JIT-compiled code when the JIT can compile it, else (or
/// after `set_engine(Engine::Interpreter)`) in the interpreter.
#[derive(Debug)]
pub struct CoreProgram {
    loaded: Loaded,
}

impl CoreProgram {
    /// Loads the NIC-core program in `section` (or the object's first one) over `maps`.
    pub fn load(
        obj: &Object,
        section: Option<&str>,
        maps: MapSet,
    ) -> Result<CoreProgram, LoadFailure> {
        Ok(CoreProgram { loaded: Loaded::load(obj, section, &maps, ProgKind::NicCore)? })
    }

    /// Selects the engine; [`Engine::Jit`] compiles the program first if needed and fails
    /// (leaving the engine as it was) when the JIT cannot compile it.
    pub fn set_engine(&mut self, engine: Engine) -> Result<(), JitError> {
        self.loaded.set_engine(engine)
    }

    /// The engine that runs the program.
    pub fn engine(&self) -> Engine {
        self.loaded.engine()
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

    /// Runs the program over `args` (address arguments, already resolved and bounds-checked by
    /// the caller, at most [`MAX_ARGS`]) and `scalars`; returns `r0`.
    pub fn run(
        &self,
        w: &mut Worker,
        args: &mut [&mut [u8]],
        scalars: &[u64; 8],
    ) -> Result<u64, Fault> {
        self.run_with(w, args, scalars, 0, 0)
    }

    /// [`CoreProgram::run`] with the workload id the program sees in `snic_core_md.id` and the
    /// time `bpf_ktime_get_ns` returns.
    pub fn run_with(
        &self,
        w: &mut Worker,
        args: &mut [&mut [u8]],
        scalars: &[u64; 8],
        id: u32,
        now_ns: u64,
    ) -> Result<u64, Fault> {
        if args.len() > MAX_ARGS {
            return Err(Fault::Helper { id: 0, reason: "more than 8 address arguments" });
        }
        let mut ctx =
            CoreCtx { nargs: args.len() as u32, id, scalars: *scalars, ..CoreCtx::default() };
        let mut table = [(0u64, 0u64, false); 8];
        for (k, a) in args.iter().enumerate() {
            table[k] = (a.as_ptr() as u64, a.len() as u64, true);
            ctx.arg_len[k] = u32::try_from(a.len()).unwrap_or(u32::MAX);
        }
        if let Some(&(start, len, _)) = table.first().filter(|_| !args.is_empty()) {
            ctx.data = start;
            ctx.data_end = start + len;
        }
        let nargs = args.len();
        let maps = self.loaded.prepared.maps.iter().as_slice();
        let mut mem = Memory::new(maps);
        let stack = mem
            .add_words(&mut w.stack)
            .ok_or(Fault::Helper { id: 0, reason: "too many regions" })?;
        for a in args.iter_mut() {
            mem.add(a).ok_or(Fault::Helper { id: 0, reason: "too many regions" })?;
        }
        let ctx_addr = mem.set_ctx(&mut ctx);
        let run = (w.index, w.prng, now_ns);
        let mut env = Env::new(mem, maps, CtxKind::Core(ctx_addr), stack.end(), &mut w.trace, run);
        env.args = table;
        env.nargs = nargs;
        let r = self.loaded.execute(&mut env, ctx_addr);
        let leaked = env.release_leaked();
        w.prng = env.prng;
        w.ringbuf_leaked += leaked;
        r
    }
}

/// `snic_arg_read` / `snic_arg_write`.
pub(crate) fn arg_copy(
    env: &mut Env<'_>,
    id: u32,
    arg: u64,
    offset: u64,
    ptr: u64,
    len: u64,
) -> u64 {
    const EINVAL: u64 = (-22i64) as u64;
    let (arg, offset, len) = (arg as u32 as usize, offset as u32 as u64, len as u32 as u64);
    let fits = arg < env.nargs && offset.checked_add(len).is_some_and(|e| e <= env.args[arg].1);
    let write = id == HELPER_ARG_WRITE;
    if !fits {
        if !write {
            // The destination counts as written on every path (the verifier assumes so).
            for k in 0..len {
                if env.mem.store(ptr.wrapping_add(k), 1, 0).is_none() {
                    env.fault.get_or_insert(Fault::Helper {
                        id,
                        reason: "destination outside the program's memory",
                    });
                    return 0;
                }
            }
        }
        return EINVAL;
    }
    let at = env.args[arg].0 + offset;
    let (dst, src) = if write { (at, ptr) } else { (ptr, at) };
    if write && !env.args[arg].2 {
        return EINVAL;
    }
    match env.mem.copy(dst, src, len) {
        Some(()) => 0,
        None => {
            env.fault
                .get_or_insert(Fault::Helper { id, reason: "buffer outside the program's memory" });
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{compile_str, require_clang};

    fn load(name: &str, body: &str) -> CoreProgram {
        let src = format!(
            "#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n#include \"snic_core.h\"\n{body}\n\
             char _license[] SEC(\"license\") = \"GPL\";\n"
        );
        let bytes = compile_str(name, &src, &[]);
        let obj = Object::parse(&bytes, name).expect("parses");
        let maps = MapSet::new(&obj, 1).expect("maps");
        CoreProgram::load(&obj, None, maps).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    #[test]
    fn checksum_over_argument_zero_and_copies_between_arguments() {
        if !require_clang("nic_core") {
            return;
        }
        let prog = load(
            "core_sum",
            r#"
SEC("snic/core") int sum(struct snic_core_md *md) {
    unsigned char *d = (void *)(long)md->data, *end = (void *)(long)md->data_end;
    __u64 s = md->scalars[0];
    for (int i = 0; i < 256; i++) {
        if (d + i + 1 > end) break;
        s += d[i];
    }
    __u64 buf[2] = { s, md->nargs | ((__u64)md->arg_len[1] << 32) };
    if (snic_arg_write(1, 0, buf, sizeof(buf))) return -1;
    __u32 back = 0;
    if (snic_arg_read(1, 12, &back, 4)) return -2;
    __u32 junk = 5;
    if (snic_arg_read(1, 14, &junk, 4) == 0 || junk != 0) return -3;
    if (snic_arg_write(2, 0, buf, 8) == 0) return -4;
    return s + back + md->id;
}"#,
        );
        let mut data: Vec<u8> = (1..=100).collect();
        let mut out = vec![0u8; 16];
        let mut w = Worker::new(0);
        let r =
            prog.run_with(&mut w, &mut [&mut data, &mut out], &[1000, 0, 0, 0, 0, 0, 0, 0], 7, 0);
        let sum = 1000 + 5050u64;
        assert_eq!(r, Ok(sum + 16 + 7), "arg_len[1] read back through the second argument");
        assert_eq!(&out[..8], &sum.to_le_bytes());
        assert_eq!(&out[8..], &(2u64 | (16 << 32)).to_le_bytes());
        // Too many arguments is a typed error.
        let mut a: Vec<Vec<u8>> = vec![vec![0u8; 4]; 9];
        let mut refs: Vec<&mut [u8]> = a.iter_mut().map(|v| v.as_mut_slice()).collect();
        assert!(prog.run(&mut w, &mut refs, &[0; 8]).is_err());
    }

    #[test]
    fn ctx_rewrite_widens_pointers_and_shifts_the_rest() {
        assert_eq!(ctx_rewrite(0, 4), Some((LDXDW, 0)));
        assert_eq!(ctx_rewrite(4, 4), Some((LDXDW, 8)));
        assert_eq!(ctx_rewrite(8, 4), Some((0x61, 16)));
        assert_eq!(ctx_rewrite(16, 8), Some((0x79, 24)));
        assert_eq!(ctx_rewrite(80, 4), Some((0x61, 88)));
        assert_eq!(ctx_rewrite(108, 4), Some((0x61, 116)));
        assert_eq!(ctx_rewrite(110, 4), None);
        assert_eq!(ctx_rewrite(112, 1), None);
        assert_eq!(ctx_rewrite(0, 8), None);
        assert_eq!(ctx_rewrite(17, 8), None);
        assert_eq!(std::mem::size_of::<CoreCtx>(), CORE_MD_SIZE as usize + 8);
        assert_eq!(crate::platform::NIC_CORE_CTX.size, i32::from(CORE_MD_SIZE));
    }
}
