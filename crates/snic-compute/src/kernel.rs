//! The kernel trait, the argument checks every kernel starts with, and the registry.

use snic_dma::mem::Span;
use snic_dma::{AddressSpace, MemError};

use crate::cmd::{AddrArg, KernelCmd, KernelStatus};

/// Kernel ids and what their arguments mean (`a0..` address arguments, `s0..` scalars).
///
/// Every id is below [`MAX_KERNELS`]: a kernel has its own FIFOs and registers in the host
/// interface, one slot per id. Element types are the [`dtype`] codes; matrices and vectors are
/// packed little-endian arrays. An address argument may be longer than the kernel needs (it
/// touches only what it needs); an output may not overlap any other argument.
pub mod ids {
    /// `a0` source, `a1` destination (`a1.len >= a0.len`): copy `a0.len` bytes. Result: bytes.
    pub const COPY: u32 = 0;
    /// `a0` vector; `s0` op ([`super::reduce`]), `s1` dtype (i32, u32, i64, u64, f32, f64).
    /// Result: the sum (wrapping for integers), min or max, as the element's bits widened to
    /// 64 (integers sign- or zero-extended, f32 as f32 bits in the low half). An empty vector
    /// or one that is not a whole number of elements is [`super::status::BAD_LENGTH`]. Float
    /// sums are taken over 16 partial sums (not strictly in order); float min and max skip
    /// NaNs (NaN only when every element is). ([`crate::vector::ReduceKernel`])
    pub const REDUCE: u32 = 1;
    /// `a0` A (M x K), `a1` B (K x N), `a2` C (M x N); `s0` M, `s1` N, `s2` K, `s3` dtype
    /// (`I8`: i8 x i8 -> i32 C; `F32`: f32), `s4` [`super::gemm`] flags (layouts, accumulate).
    /// C = A x B, or C += A x B. Result: 2·M·N·K (operations done). M, N, K are 1..=65536
    /// ([`crate::gemm::MAX_DIM`]); `s4` may be left out (0); i32 sums wrap. Arguments shorter
    /// than the dimensions need are [`super::status::BAD_LENGTH`]. ([`crate::gemm::GemmKernel`])
    pub const GEMM: u32 = 2;
    /// `a0` x, `a1` y, `a2` out; `s0` dtype (i32, u32, i64, u64, f32, f64): out = x + y,
    /// element-wise (wrapping for integers) over `a2.len / size` elements (x and y at least
    /// as long). Result: elements. ([`crate::vector::VaddKernel`])
    pub const VADD: u32 = 3;
    /// `a0` x, `a1` out; `s0` dtype (i32, u32, i64, u64, f32, f64), `s1` alpha, `s2` beta
    /// (both as the dtype's bits, f32 in the low half): out = alpha·x + beta, element-wise
    /// over `a1.len / size` elements (integers wrapping). Result: elements.
    /// ([`crate::vector::VscaleKernel`])
    pub const VSCALE: u32 = 4;
    /// `a0` the scatter-gather list (`s0` entries of 16 bytes: addr u64, len u32, reserved
    /// u32), `a1` destination: the blocks, in order, packed into `a1`. Every block is checked
    /// before a byte moves. `s0` is 1..=4096 ([`crate::gather::MAX_SGL_ENTRIES`]); a block the
    /// client may not reach is [`super::status::BAD_ADDRESS`], one overlapping `a1`
    /// [`super::status::OVERLAP`], an `a1` too small [`super::status::NO_SPACE`]. Result:
    /// bytes gathered. ([`crate::gather::GatherKernel`])
    pub const GATHER: u32 = 5;
    /// `a0` data; `s0` initial CRC (0 for a fresh one): CRC-32C (Castagnoli) of `a0`, as
    /// iSCSI / NVMe-oF / ext4 use it. `s0` may be left out (0) and must fit 32 bits; an empty
    /// `a0` gives `s0` back. Result: the CRC. ([`crate::crc::Crc32cKernel`])
    pub const CRC32C: u32 = 6;
    /// `a0` source, `a1` destination: LZ4 block-format compression of `a0` into `a1`.
    /// Result: compressed bytes; [`super::status::NO_SPACE`] when `a1` is too small (nothing
    /// is written then). ([`crate::lz4::Lz4CompressKernel`])
    pub const LZ4_COMPRESS: u32 = 7;
    /// `a0` LZ4 block, `a1` destination: decompression. Result: decompressed bytes;
    /// [`super::status::CORRUPT_INPUT`] for a bad block, [`super::status::NO_SPACE`] when `a1`
    /// is too small (nothing is written then). ([`crate::lz4::Lz4DecompressKernel`])
    pub const LZ4_DECOMPRESS: u32 = 8;
    /// An eBPF NIC-core program (`SEC("snic/core")`) loaded into the device: `s0` the
    /// program's slot (`snic serve --core-prog`, `snic ebpf load --core SLOT`), `s1..s7` the
    /// program's scalars 0..6, `a0..a7` its memory (`a0` is `data..data_end`). Every address
    /// argument may be read and written, so none may overlap another. A program that faults
    /// is [`super::status::BAD_ARGS`] and writes nothing. Result: the program's `r0`. Served
    /// by `snic-device` (the kernel lives there because it needs the eBPF engine), not in
    /// [`crate::builtins`].
    pub const EBPF: u32 = 9;
}

/// Kernel ids are below this (the host interface has one FIFO slot per id).
pub const MAX_KERNELS: u32 = 16;

/// Element type codes of the kernels' scalar `dtype` arguments.
pub mod dtype {
    /// Signed 8-bit (GEMM input only; its C is i32).
    pub const I8: u64 = 0;
    /// IEEE-754 single.
    pub const F32: u64 = 1;
    /// Signed 32-bit.
    pub const I32: u64 = 2;
    /// Unsigned 32-bit.
    pub const U32: u64 = 3;
    /// Signed 64-bit.
    pub const I64: u64 = 4;
    /// Unsigned 64-bit.
    pub const U64: u64 = 5;
    /// IEEE-754 double.
    pub const F64: u64 = 6;

    /// Bytes per element of `code`, if it is one.
    pub const fn size(code: u64) -> Option<usize> {
        match code {
            I8 => Some(1),
            F32 | I32 | U32 => Some(4),
            I64 | U64 | F64 => Some(8),
            _ => None,
        }
    }

    /// Name of `code` (`"i8"`, `"f32"`, ...).
    pub const fn name(code: u64) -> Option<&'static str> {
        match code {
            I8 => Some("i8"),
            F32 => Some("f32"),
            I32 => Some("i32"),
            U32 => Some("u32"),
            I64 => Some("i64"),
            U64 => Some("u64"),
            F64 => Some("f64"),
            _ => None,
        }
    }
}

/// REDUCE operations (`s0`).
pub mod reduce {
    /// Sum.
    pub const SUM: u64 = 0;
    /// Minimum.
    pub const MIN: u64 = 1;
    /// Maximum.
    pub const MAX: u64 = 2;
}

/// GEMM flags (`s4`).
pub mod gemm {
    /// A is stored column-major (else row-major).
    pub const A_COL_MAJOR: u64 = 1;
    /// B is stored column-major.
    pub const B_COL_MAJOR: u64 = 2;
    /// C is stored column-major.
    pub const C_COL_MAJOR: u64 = 4;
    /// C += A x B (else C = A x B).
    pub const ACCUMULATE: u64 = 8;
    /// Every flag bit; others are [`super::status::BAD_ARGS`].
    pub const ALL: u64 = 15;
}

/// Status codes of a kernel run.
pub mod status {
    /// Done.
    pub const OK: u32 = 0;
    /// No such kernel.
    pub const UNKNOWN_KERNEL: u32 = 1;
    /// An address is not memory the client may use.
    pub const BAD_ADDRESS: u32 = 2;
    /// A length does not fit what the kernel needs (too short for the dimensions, zero, not
    /// a multiple of the element size).
    pub const BAD_LENGTH: u32 = 3;
    /// Wrong number of arguments, or a scalar out of its range (dtype, op, flags, dimension).
    pub const BAD_ARGS: u32 = 4;
    /// An output overlaps another argument.
    pub const OVERLAP: u32 = 5;
    /// The input is not what the kernel decodes (a corrupt LZ4 block).
    pub const CORRUPT_INPUT: u32 = 6;
    /// The output is too small for the result.
    pub const NO_SPACE: u32 = 7;

    /// Name of `code` (for logs and the CLI).
    pub const fn name(code: u32) -> &'static str {
        match code {
            OK => "ok",
            UNKNOWN_KERNEL => "unknown_kernel",
            BAD_ADDRESS => "bad_address",
            BAD_LENGTH => "bad_length",
            BAD_ARGS => "bad_args",
            OVERLAP => "overlap",
            CORRUPT_INPUT => "corrupt_input",
            NO_SPACE => "no_space",
            _ => "unknown_status",
        }
    }
}

/// Why a command failed; [`KernelError::code`] is its status code. A kernel returns one only
/// before it wrote anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelError {
    /// No kernel has the command's id.
    UnknownKernel(u32),
    /// Address argument `arg` is not the client's memory.
    BadAddress {
        /// Which address argument.
        arg: usize,
        /// What the address space said.
        err: MemError,
    },
    /// A length does not fit.
    BadLength(&'static str),
    /// An argument count or scalar is wrong.
    BadArgs(&'static str),
    /// Output `output` overlaps argument `other`.
    Overlap {
        /// The output's index.
        output: usize,
        /// The other argument's index.
        other: usize,
    },
    /// The input does not decode.
    Corrupt(&'static str),
    /// The output is too small.
    NoSpace,
}

impl KernelError {
    /// The [`status`] code.
    pub const fn code(&self) -> u32 {
        match self {
            KernelError::UnknownKernel(_) => status::UNKNOWN_KERNEL,
            KernelError::BadAddress { .. } => status::BAD_ADDRESS,
            KernelError::BadLength(_) => status::BAD_LENGTH,
            KernelError::BadArgs(_) => status::BAD_ARGS,
            KernelError::Overlap { .. } => status::OVERLAP,
            KernelError::Corrupt(_) => status::CORRUPT_INPUT,
            KernelError::NoSpace => status::NO_SPACE,
        }
    }
}

impl std::fmt::Display for KernelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelError::UnknownKernel(id) => write!(f, "no kernel {id}"),
            KernelError::BadAddress { arg, err } => write!(f, "address argument {arg}: {err}"),
            KernelError::BadLength(why) => write!(f, "bad length: {why}"),
            KernelError::BadArgs(why) => write!(f, "bad arguments: {why}"),
            KernelError::Overlap { output, other } => {
                write!(f, "output {output} overlaps argument {other}")
            }
            KernelError::Corrupt(why) => write!(f, "corrupt input: {why}"),
            KernelError::NoSpace => f.write_str("output too small"),
        }
    }
}

impl std::error::Error for KernelError {}

/// Registers of one kernel that the host writes and the kernel reads (configuration), as the
/// host interface exposes them.
pub const USER_REGS: usize = 8;

/// One command as a kernel sees it.
#[derive(Debug, Clone, Copy)]
pub struct Invocation<'a> {
    /// The client on whose behalf it runs (whose host memory it may touch, besides device
    /// memory).
    pub owner: u32,
    /// The command.
    pub cmd: &'a KernelCmd,
    /// The kernel's host-written registers at the time the command was taken.
    pub regs: [u32; USER_REGS],
}

impl<'a> Invocation<'a> {
    /// A command for `owner` with all registers zero.
    pub fn new(owner: u32, cmd: &'a KernelCmd) -> Invocation<'a> {
        Invocation { owner, cmd, regs: [0; USER_REGS] }
    }

    /// Check the argument counts, resolve every address argument for the owner (in order,
    /// so the first bad one is named), and check that no argument listed in `outputs`
    /// overlaps another argument. Nothing is read or written.
    pub fn check(
        &self,
        mem: &AddressSpace,
        addrs: std::ops::RangeInclusive<usize>,
        scalars: std::ops::RangeInclusive<usize>,
        outputs: &[usize],
    ) -> Result<Vec<Span>, KernelError> {
        let cmd = self.cmd;
        if !cmd.counts_ok() {
            return Err(KernelError::BadArgs("more than 8 address or scalar arguments"));
        }
        if !addrs.contains(&usize::from(cmd.n_addrs)) {
            return Err(KernelError::BadArgs("wrong number of address arguments"));
        }
        if !scalars.contains(&usize::from(cmd.n_scalars)) {
            return Err(KernelError::BadArgs("wrong number of scalar arguments"));
        }
        let args = cmd.addr_args();
        let spans = args
            .iter()
            .enumerate()
            .map(|(arg, a)| {
                mem.resolve(a.addr, a.len, self.owner)
                    .map_err(|err| KernelError::BadAddress { arg, err })
            })
            .collect::<Result<Vec<_>, _>>()?;
        for &output in outputs {
            let Some(out) = args.get(output) else { continue };
            if let Some(other) =
                args.iter().enumerate().position(|(i, a)| i != output && out.overlaps(a))
            {
                return Err(KernelError::Overlap { output, other });
            }
        }
        Ok(spans)
    }

    /// Scalar `i` (0 when the command has fewer).
    pub fn scalar(&self, i: usize) -> u64 {
        self.cmd.scalar_args().get(i).copied().unwrap_or(0)
    }

    /// Address argument `i` (empty when the command has fewer).
    pub fn arg(&self, i: usize) -> AddrArg {
        self.cmd.addr_args().get(i).copied().unwrap_or_default()
    }
}

/// A lookaside kernel: runs one command over the address space.
pub trait LookasideKernel: Send + std::fmt::Debug {
    /// Kernel id (below [`MAX_KERNELS`]).
    fn id(&self) -> u32;
    /// Short name, for the CLI, stats and logs.
    fn name(&self) -> &'static str;
    /// One line on the arguments it takes.
    fn usage(&self) -> &'static str;
    /// Run `inv`. Must check every argument first (usually with [`Invocation::check`]),
    /// write nothing when it returns an error, and not panic on any command.
    fn run(&mut self, mem: &mut AddressSpace, inv: &Invocation<'_>) -> Result<u64, KernelError>;
}

/// COPY (see [`ids::COPY`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct CopyKernel;

impl LookasideKernel for CopyKernel {
    fn id(&self) -> u32 {
        ids::COPY
    }
    fn name(&self) -> &'static str {
        "copy"
    }
    fn usage(&self) -> &'static str {
        "a0 src, a1 dst (a1.len >= a0.len); result = bytes copied"
    }
    fn run(&mut self, mem: &mut AddressSpace, inv: &Invocation<'_>) -> Result<u64, KernelError> {
        let spans = inv.check(mem, 2..=2, 0..=0, &[1])?;
        let (src, dst) = (&spans[0], &spans[1]);
        if src.is_empty() {
            return Err(KernelError::BadLength("nothing to copy"));
        }
        if dst.len() < src.len() {
            return Err(KernelError::NoSpace);
        }
        mem.copy_span(src, dst, src.len())
            .map_err(|err| KernelError::BadAddress { arg: 0, err })?;
        Ok(src.len() as u64)
    }
}

/// Counters of one kernel in a registry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelCounters {
    /// Commands run (including failed ones).
    pub runs: u64,
    /// Commands that failed.
    pub errors: u64,
}

/// The kernels one runner offers, by id, with counters.
#[derive(Debug, Default)]
pub struct Kernels {
    kernels: Vec<(Box<dyn LookasideKernel>, KernelCounters)>,
    unknown: u64,
}

impl Kernels {
    /// No kernels.
    pub fn new() -> Kernels {
        Kernels::default()
    }

    /// Every built-in kernel ([`crate::builtins`]).
    pub fn with_builtins() -> Kernels {
        let mut k = Kernels::new();
        for kernel in crate::builtins() {
            // Built-in ids are all below MAX_KERNELS.
            let _ = k.register(kernel);
        }
        k
    }

    /// Add (or replace) a kernel; ids of [`MAX_KERNELS`] and above are refused (returned).
    pub fn register(
        &mut self,
        kernel: Box<dyn LookasideKernel>,
    ) -> Result<(), Box<dyn LookasideKernel>> {
        if kernel.id() >= MAX_KERNELS {
            return Err(kernel);
        }
        self.kernels.retain(|(k, _)| k.id() != kernel.id());
        self.kernels.push((kernel, KernelCounters::default()));
        self.kernels.sort_by_key(|(k, _)| k.id());
        Ok(())
    }

    /// One bit per available kernel id.
    pub fn mask(&self) -> u32 {
        self.kernels.iter().fold(0, |m, (k, _)| m | 1 << k.id())
    }

    /// Name of kernel `id`.
    pub fn name(&self, id: u32) -> Option<&'static str> {
        self.kernels.iter().find(|(k, _)| k.id() == id).map(|(k, _)| k.name())
    }

    /// The id of the kernel called `name`.
    pub fn by_name(&self, name: &str) -> Option<u32> {
        self.kernels.iter().find(|(k, _)| k.name() == name).map(|(k, _)| k.id())
    }

    /// (id, name, usage) of every kernel, by id.
    pub fn list(&self) -> impl Iterator<Item = (u32, &'static str, &'static str)> + '_ {
        self.kernels.iter().map(|(k, _)| (k.id(), k.name(), k.usage()))
    }

    /// Run `inv`; the status carries its workload id (busy_ns is left 0 for the caller).
    pub fn run(&mut self, mem: &mut AddressSpace, inv: &Invocation<'_>) -> KernelStatus {
        self.try_run(mem, inv).map_or_else(
            |e| KernelStatus::err(inv.cmd.workload, e.code()),
            |r| KernelStatus::ok(inv.cmd.workload, r),
        )
    }

    /// Run `inv`, with the error itself on failure.
    pub fn try_run(
        &mut self,
        mem: &mut AddressSpace,
        inv: &Invocation<'_>,
    ) -> Result<u64, KernelError> {
        let Some((k, c)) = self.kernels.iter_mut().find(|(k, _)| k.id() == inv.cmd.kernel) else {
            self.unknown += 1;
            return Err(KernelError::UnknownKernel(inv.cmd.kernel));
        };
        c.runs += 1;
        let r = k.run(mem, inv);
        if r.is_err() {
            c.errors += 1;
        }
        r
    }

    /// Counters of kernel `id`.
    pub fn counters(&self, id: u32) -> Option<KernelCounters> {
        self.kernels.iter().find(|(k, _)| k.id() == id).map(|(_, c)| *c)
    }

    /// Commands run by all kernels (unknown ids included).
    pub fn runs(&self) -> u64 {
        self.kernels.iter().map(|(_, c)| c.runs).sum::<u64>() + self.unknown
    }

    /// Commands that failed (unknown ids included).
    pub fn errors(&self) -> u64 {
        self.kernels.iter().map(|(_, c)| c.errors).sum::<u64>() + self.unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use snic_dma::{HostAddr, MemKind};

    const A: u64 = 1 << 40;
    const B: u64 = 2 << 40;

    fn space() -> (AddressSpace, u64) {
        let mut m = AddressSpace::new();
        m.map_host_owned(HostAddr::new(A).unwrap(), Box::new(vec![0u8; 4096]), 1).unwrap();
        m.map_host_owned(HostAddr::new(B).unwrap(), Box::new(vec![0u8; 4096]), 2).unwrap();
        let (_, d) = m.add_device_region(MemKind::OnChip, 8192).unwrap();
        (m, d.raw())
    }

    fn run(k: &mut Kernels, m: &mut AddressSpace, owner: u32, cmd: KernelCmd) -> KernelStatus {
        k.run(m, &Invocation::new(owner, &cmd))
    }

    fn copy(src: u64, dst: u64, len: u64) -> KernelCmd {
        KernelCmd::new(ids::COPY, 77).addr(src, len).addr(dst, len)
    }

    #[test]
    fn copy_host_to_device_and_back() {
        let (mut m, d) = space();
        let mut k = Kernels::with_builtins();
        m.write(A + 8, b"lookaside").unwrap();
        assert_eq!(run(&mut k, &mut m, 1, copy(A + 8, d + 100, 9)), KernelStatus::ok(77, 9));
        assert_eq!(m.slice(d + 100, 9).unwrap(), b"lookaside");
        assert!(run(&mut k, &mut m, 1, copy(d + 100, A + 1000, 9)).is_ok());
        assert_eq!(m.slice(A + 1000, 9).unwrap(), b"lookaside");
        assert_eq!(k.counters(ids::COPY), Some(KernelCounters { runs: 2, errors: 0 }));
    }

    #[test]
    fn checks_before_touching_memory() {
        let (mut m, d) = space();
        let mut k = Kernels::with_builtins();
        m.write(B, b"secret").unwrap();
        let code = |k: &mut Kernels, m: &mut AddressSpace, c| run(k, m, 1, c).status;
        // Client 1 may not read or write client 2's memory.
        assert_eq!(code(&mut k, &mut m, copy(B, d, 6)), status::BAD_ADDRESS);
        assert_eq!(m.slice(d, 6).unwrap(), &[0u8; 6]);
        m.write(d, b"intrud").unwrap();
        assert_eq!(code(&mut k, &mut m, copy(d, B, 6)), status::BAD_ADDRESS);
        assert_eq!(m.slice(B, 6).unwrap(), b"secret");
        // Out of bounds, unmapped, overflowing.
        assert_eq!(code(&mut k, &mut m, copy(A + 4090, d, 16)), status::BAD_ADDRESS);
        assert_eq!(code(&mut k, &mut m, copy(0x1000, d, 4)), status::BAD_ADDRESS);
        assert_eq!(code(&mut k, &mut m, copy(A, d, u64::MAX)), status::BAD_ADDRESS);
        // Overlap, space, counts.
        assert_eq!(code(&mut k, &mut m, copy(d, d + 3, 6)), status::OVERLAP);
        let short = KernelCmd::new(ids::COPY, 1).addr(A, 16).addr(d, 8);
        assert_eq!(code(&mut k, &mut m, short), status::NO_SPACE);
        assert_eq!(code(&mut k, &mut m, copy(A, d, 0)), status::BAD_LENGTH);
        let three = copy(A, d, 4).addr(d + 64, 4);
        assert_eq!(code(&mut k, &mut m, three), status::BAD_ARGS);
        let mut raw = copy(A, d, 4).encode();
        raw[8] = 9;
        assert_eq!(code(&mut k, &mut m, KernelCmd::decode(&raw)), status::BAD_ARGS);
        assert_eq!(m.slice(d, 6).unwrap(), b"intrud");
        let unknown = run(&mut k, &mut m, 1, KernelCmd::new(13, 5).addr(A, 4));
        assert_eq!(unknown, KernelStatus::err(5, status::UNKNOWN_KERNEL));
        assert_eq!(k.counters(ids::COPY), Some(KernelCounters { runs: 10, errors: 10 }));
        assert_eq!((k.runs(), k.errors()), (11, 11));
    }

    #[test]
    fn registry_mask_names_and_limits() {
        let k = Kernels::with_builtins();
        assert_eq!(k.mask() & 1 << ids::COPY, 1 << ids::COPY);
        assert_eq!(k.name(ids::COPY), Some("copy"));
        assert_eq!(k.by_name("copy"), Some(ids::COPY));
        assert_eq!(k.name(15), None);
        #[derive(Debug)]
        struct Big;
        impl LookasideKernel for Big {
            fn id(&self) -> u32 {
                MAX_KERNELS
            }
            fn name(&self) -> &'static str {
                "big"
            }
            fn usage(&self) -> &'static str {
                ""
            }
            fn run(
                &mut self,
                _: &mut AddressSpace,
                _: &Invocation<'_>,
            ) -> Result<u64, KernelError> {
                Ok(0)
            }
        }
        let mut k = Kernels::new();
        assert!(k.register(Box::new(Big)).is_err());
        assert_eq!(k.mask(), 0);
        assert_eq!(status::name(status::OVERLAP), "overlap");
        assert_eq!(dtype::size(dtype::F64), Some(8));
        assert_eq!(dtype::size(99), None);
    }
}
