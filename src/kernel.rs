//! `snic kernel list|run|bench`: snic's lookaside kernels through the host library.
//!
//! Without `--socket` each command starts a private device in this process (a
//! `snic_device::Server` on a socket in a fresh temporary directory: no root, no config);
//! with `--socket PATH` it connects to a running `snic serve`. `run` fills the inputs with
//! seeded random data, runs the kernel once through the kernel's control and status FIFOs,
//! checks the output against a reference computed here and prints `verified` (or the first
//! mismatch) with the time taken. `bench` runs the same command N times through the host
//! library and N times by calling the kernel directly in this process
//! (`snic_compute::Kernels::run` over a local address space), and prints both and the ratio.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;
use snic_compute::{Invocation, KernelCmd, KernelStatus, Kernels, dtype, gemm, ids, reduce};
use snic_device::{Server, ServerConfig, ServerHandle};
use snic_dma::{AddressSpace, HostAddr};
use snic_host::{DevKind, Device, HostBuf};

/// Arguments of `snic kernel`.
#[derive(Debug, clap::Args)]
pub struct KernelArgs {
    #[command(subcommand)]
    pub cmd: KernelSub,
}

/// `snic kernel` sub-commands.
#[derive(Debug, clap::Subcommand)]
pub enum KernelSub {
    /// List the kernels: id, name, arguments.
    List(ListArgs),
    /// Run one kernel command on seeded random data and check the result here.
    Run(RunArgs),
    /// Time a kernel through the host library against the same kernel called in-process.
    Bench(BenchArgs),
}

/// Where the device is.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// Connect to a running `snic serve` at this socket (default: a private in-process one).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Compute workers of the private device.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=8))]
    pub compute_workers: u32,
    /// One JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `snic kernel list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub target: Target,
}

/// Where the kernel's arguments live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Location {
    /// Registered host memory of this process.
    #[value(name = "host_mem")]
    HostMem,
    /// snic's device memory (on-board).
    #[value(name = "dev_mem")]
    DevMem,
}

/// What to run.
#[derive(Debug, clap::Args)]
pub struct Spec {
    /// Kernel name: copy, reduce, gemm, vadd, vscale, gather, crc32c, lz4.
    pub name: String,
    /// GEMM: rows of A and C.
    #[arg(short = 'm', long, default_value_t = 256)]
    pub m: u64,
    /// GEMM: columns of B and C.
    #[arg(short = 'n', long, default_value_t = 256)]
    pub n: u64,
    /// GEMM: columns of A, rows of B.
    #[arg(short = 'k', long, default_value_t = 256)]
    pub k: u64,
    /// Element type: i8 (GEMM only), f32, f64, i32, u32, i64, u64.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// GEMM layouts of A, B and C: r (row-major) or c (column-major) each, e.g. `rcr`.
    #[arg(long, default_value = "rrr")]
    pub layout: String,
    /// Bytes of input (every kernel but GEMM; K/M/G suffixes).
    #[arg(long, default_value = "1M", value_parser = crate::serve::parse_size)]
    pub size: u64,
    /// REDUCE operation: sum, min or max.
    #[arg(long, default_value = "sum")]
    pub op: String,
    /// GATHER: number of blocks.
    #[arg(long, default_value_t = 64)]
    pub blocks: u64,
    /// Where the arguments live.
    #[arg(short = 'l', long, value_enum, default_value = "host_mem")]
    pub location: Location,
    /// Wait for statuses on the kernel's eventfd instead of polling.
    #[arg(long)]
    pub interrupt: bool,
    /// Seed of the input data.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Longest one command may take, milliseconds.
    #[arg(long, default_value_t = 60_000)]
    pub timeout_ms: u64,
}

/// Arguments of `snic kernel run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub target: Target,
    #[command(flatten)]
    pub spec: Spec,
}

/// Arguments of `snic kernel bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub target: Target,
    #[command(flatten)]
    pub spec: Spec,
    /// Iterations of each path (after one warm-up run each).
    #[arg(short = 'i', long, default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub iterations: u64,
}

/// Run `snic kernel ...`.
pub fn run(args: KernelArgs) -> Result<()> {
    match args.cmd {
        KernelSub::List(a) => list(&a),
        KernelSub::Run(a) => run_once(&a),
        KernelSub::Bench(a) => bench(&a),
    }
}

/// A connection, and the private device behind it when there is one.
struct Session {
    /// Dropped before the server (fields drop in order).
    dev: Device,
    server: Option<ServerHandle>,
    dir: Option<PathBuf>,
}

impl Session {
    fn open(t: &Target) -> Result<Session> {
        if let Some(path) = &t.socket {
            let dev = Device::connect(path, "snic-kernel")
                .with_context(|| format!("connecting to snic at {}", path.display()))?;
            return Ok(Session { dev, server: None, dir: None });
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("snic-kernel-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let cfg = ServerConfig {
            socket: dir.join("snic.sock"),
            workers: 1,
            compute_workers: t.compute_workers,
            on_board: 512 << 20,
            huge: false,
            ..ServerConfig::default()
        };
        let server = Server::start(cfg).context("starting the in-process device")?;
        let dev = Device::connect(server.socket_path(), "snic-kernel")
            .context("connecting to the in-process device")?;
        Ok(Session { dev, server: Some(server), dir: Some(dir) })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            let _ = s.shutdown();
        }
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn list(a: &ListArgs) -> Result<()> {
    let s = Session::open(&a.target)?;
    let kernels = s.dev.kernels();
    if a.target.json {
        let v: Vec<_> = kernels
            .iter()
            .map(|k| json!({ "id": k.id, "name": k.name, "usage": k.usage }))
            .collect();
        println!("{}", json!({ "compute_workers": s.dev.compute_workers(), "kernels": v }));
        return Ok(());
    }
    println!("{:>2}  {:<15} arguments", "id", "name");
    for k in &kernels {
        println!("{:>2}  {:<15} {}", k.id, k.name, k.usage);
    }
    Ok(())
}

// ----- test data -----

/// xorshift64*: seeded, reproducible input data.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }
}

/// An element type the CLI fills and checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dt {
    I8,
    F32,
    F64,
    I32,
    U32,
    I64,
    U64,
}

impl Dt {
    fn parse(s: &str) -> Result<Dt> {
        Ok(match s {
            "i8" => Dt::I8,
            "f32" => Dt::F32,
            "f64" => Dt::F64,
            "i32" => Dt::I32,
            "u32" => Dt::U32,
            "i64" => Dt::I64,
            "u64" => Dt::U64,
            _ => bail!("unknown dtype `{s}` (i8, f32, f64, i32, u32, i64, u64)"),
        })
    }
    fn code(self) -> u64 {
        match self {
            Dt::I8 => dtype::I8,
            Dt::F32 => dtype::F32,
            Dt::F64 => dtype::F64,
            Dt::I32 => dtype::I32,
            Dt::U32 => dtype::U32,
            Dt::I64 => dtype::I64,
            Dt::U64 => dtype::U64,
        }
    }
    fn size(self) -> usize {
        dtype::size(self.code()).unwrap_or(1)
    }
    fn float(self) -> bool {
        matches!(self, Dt::F32 | Dt::F64)
    }
    fn signed(self) -> bool {
        matches!(self, Dt::I8 | Dt::I32 | Dt::I64)
    }
    /// Random elements: floats in [-1, 1), integers of any bits.
    fn random(self, r: &mut Rng, n: usize) -> Vec<u8> {
        match self {
            Dt::F32 => (0..n).flat_map(|_| (r.unit() as f32).to_le_bytes()).collect(),
            Dt::F64 => (0..n).flat_map(|_| r.unit().to_le_bytes()).collect(),
            _ => r.bytes(n * self.size()),
        }
    }
    /// Element `i` of `b` as f64 (floats) .
    fn get_f(self, b: &[u8], i: usize) -> f64 {
        let s = self.size();
        let e = &b[i * s..i * s + s];
        match self {
            Dt::F32 => f64::from(f32::from_le_bytes([e[0], e[1], e[2], e[3]])),
            Dt::F64 => f64::from_le_bytes(e.try_into().unwrap_or([0; 8])),
            _ => self.get_i(b, i) as f64,
        }
    }
    /// Element `i` of `b` as i128 (integers, sign- or zero-extended).
    fn get_i(self, b: &[u8], i: usize) -> i128 {
        let s = self.size();
        let mut x = [0u8; 8];
        x[..s].copy_from_slice(&b[i * s..i * s + s]);
        let raw = u64::from_le_bytes(x);
        let bits = 8 * s as u32;
        if self.signed() && bits < 64 {
            i128::from(((raw << (64 - bits)) as i64) >> (64 - bits))
        } else if self.signed() {
            i128::from(raw as i64)
        } else {
            i128::from(raw)
        }
    }
    /// `v` wrapped to the element's width, as its bytes.
    fn int_bytes(self, v: i128) -> Vec<u8> {
        (v as u64).to_le_bytes()[..self.size()].to_vec()
    }
    /// A value in the kernels' scalar form (floats as bits, f32 in the low half).
    fn scalar(self, v: f64) -> u64 {
        match self {
            Dt::F32 => u64::from((v as f32).to_bits()),
            Dt::F64 => v.to_bits(),
            _ => v as i64 as u64,
        }
    }
}

// ----- plans -----

/// Makes the command and the buffers' initial contents from the buffers' addresses.
type Build = dyn Fn(&[u64]) -> (KernelCmd, Vec<Vec<u8>>);
/// Checks the read-back outputs and the status: `Err(first mismatch)`.
type Verify = dyn Fn(&[Vec<u8>], &KernelStatus) -> std::result::Result<(), String>;

/// How one kernel run is set up and checked.
struct Plan {
    label: String,
    kernel: u32,
    /// Byte sizes of the buffers.
    bufs: Vec<usize>,
    /// The command and the buffers' initial contents (empty: zeros), from their addresses.
    build: Box<Build>,
    /// Buffers read back after the run, for `verify`.
    outputs: Vec<usize>,
    /// `Err(first mismatch)` when the outputs or result are wrong.
    verify: Box<Verify>,
    /// Input bytes the kernel reads (for GB/s).
    bytes: u64,
    /// Arithmetic operations (GEMM: 2MNK), for GFLOP/s.
    ops: Option<u64>,
}

fn plan(spec: &Spec) -> Result<Plan> {
    let size = usize::try_from(spec.size).context("size too large")?;
    if size == 0 {
        bail!("--size must be non-zero");
    }
    let mut r = Rng::new(spec.seed);
    match spec.name.as_str() {
        "copy" => {
            let data = r.bytes(size);
            let want = data.clone();
            Ok(Plan {
                label: format!("copy {}", crate::dma::size_label(spec.size)),
                kernel: ids::COPY,
                bufs: vec![size, size],
                build: Box::new(move |a| {
                    let cmd = KernelCmd::new(ids::COPY, 1)
                        .addr(a[0], data.len() as u64)
                        .addr(a[1], data.len() as u64);
                    (cmd, vec![data.clone(), vec![]])
                }),
                outputs: vec![1],
                verify: Box::new(move |out, st| {
                    expect_result(st, want.len() as u64)?;
                    first_diff(&out[0], &want)
                }),
                bytes: spec.size,
                ops: None,
            })
        }
        "crc32c" => {
            let data = r.bytes(size);
            let want = crc32c_ref(&data);
            Ok(Plan {
                label: format!("crc32c {}", crate::dma::size_label(spec.size)),
                kernel: ids::CRC32C,
                bufs: vec![size],
                build: Box::new(move |a| {
                    let cmd = KernelCmd::new(ids::CRC32C, 1).addr(a[0], data.len() as u64);
                    (cmd, vec![data.clone()])
                }),
                outputs: vec![],
                verify: Box::new(move |_, st| expect_result(st, u64::from(want))),
                bytes: spec.size,
                ops: None,
            })
        }
        "lz4" | "lz4_compress" => {
            // Compressible input: runs of repeated random words.
            let mut data = Vec::with_capacity(size);
            while data.len() < size {
                let w = r.next().to_le_bytes();
                let reps = 1 + (r.next() % 16) as usize;
                for _ in 0..reps {
                    data.extend_from_slice(&w);
                }
            }
            data.truncate(size);
            let cap = size + size / 255 + 64;
            let original = data.clone();
            Ok(Plan {
                label: format!("lz4_compress {}", crate::dma::size_label(spec.size)),
                kernel: ids::LZ4_COMPRESS,
                bufs: vec![size, cap],
                build: Box::new(move |a| {
                    let cmd = KernelCmd::new(ids::LZ4_COMPRESS, 1)
                        .addr(a[0], data.len() as u64)
                        .addr(a[1], cap as u64);
                    (cmd, vec![data.clone(), vec![]])
                }),
                outputs: vec![1],
                verify: Box::new(move |out, st| {
                    expect_ok(st)?;
                    let n = usize::try_from(st.result).unwrap_or(usize::MAX).min(out[0].len());
                    let back = lz4_flex::block::decompress(&out[0][..n], original.len())
                        .map_err(|e| format!("the compressed block does not decode: {e}"))?;
                    first_diff(&back, &original)
                }),
                bytes: spec.size,
                ops: None,
            })
        }
        "reduce" => plan_reduce(spec, size, &mut r),
        "vadd" | "vscale" => plan_vector(spec, size, &mut r),
        "gather" => plan_gather(spec, size, &mut r),
        "gemm" => plan_gemm(spec, &mut r),
        other => bail!(
            "no CLI plan for kernel `{other}` (copy, reduce, gemm, vadd, vscale, gather, crc32c, \
             lz4)"
        ),
    }
}

fn expect_ok(st: &KernelStatus) -> std::result::Result<(), String> {
    if st.is_ok() {
        Ok(())
    } else {
        Err(format!("status {} ({})", st.status, snic_compute::status::name(st.status)))
    }
}

fn expect_result(st: &KernelStatus, want: u64) -> std::result::Result<(), String> {
    expect_ok(st)?;
    if st.result == want {
        Ok(())
    } else {
        Err(format!("result {:#x}, expected {want:#x}", st.result))
    }
}

fn first_diff(got: &[u8], want: &[u8]) -> std::result::Result<(), String> {
    match got.iter().zip(want).position(|(a, b)| a != b) {
        Some(i) => Err(format!("byte {i}: got {:#04x}, expected {:#04x}", got[i], want[i])),
        None if got.len() < want.len() => {
            Err(format!("{} bytes, expected {}", got.len(), want.len()))
        }
        None => Ok(()),
    }
}

/// CRC-32C, bit by bit (the reference the kernel is checked against).
fn crc32c_ref(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { crc >> 1 ^ 0x82F6_3B78 } else { crc >> 1 };
        }
    }
    !crc
}

/// Whether float `got` is `want` within `tol` (relative to `scale`).
fn close(got: f64, want: f64, scale: f64, tol: f64) -> bool {
    (got - want).abs() <= tol * (1.0 + scale)
}

fn plan_reduce(spec: &Spec, size: usize, r: &mut Rng) -> Result<Plan> {
    let dt = Dt::parse(&spec.dtype)?;
    if dt == Dt::I8 {
        bail!("reduce takes f32, f64, i32, u32, i64 or u64");
    }
    let op = match spec.op.as_str() {
        "sum" => reduce::SUM,
        "min" => reduce::MIN,
        "max" => reduce::MAX,
        o => bail!("unknown reduce op `{o}` (sum, min, max)"),
    };
    let n = size / dt.size();
    if n == 0 {
        bail!("--size is smaller than one element");
    }
    let data = dt.random(r, n);
    let (want_f, want_i, scale) = if dt.float() {
        let xs: Vec<f64> = (0..n).map(|i| dt.get_f(&data, i)).collect();
        let v = match op {
            reduce::SUM => xs.iter().sum(),
            reduce::MIN => xs.iter().copied().fold(f64::INFINITY, f64::min),
            _ => xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        };
        (v, 0, xs.iter().map(|x| x.abs()).sum::<f64>())
    } else {
        let xs = (0..n).map(|i| dt.get_i(&data, i));
        let v = match op {
            reduce::SUM => xs.fold(0i128, |a, x| a.wrapping_add(x)),
            reduce::MIN => xs.min().unwrap_or(0),
            _ => xs.max().unwrap_or(0),
        };
        // Wrapped to the width, then sign- or zero-extended to 64 bits, as the kernel does.
        let w = dt.get_i(&dt.int_bytes(v), 0);
        (0.0, w as i64 as u64, 0.0)
    };
    let len = (n * dt.size()) as u64;
    Ok(Plan {
        label: format!("reduce {} {} x{n}", spec.op, spec.dtype),
        kernel: ids::REDUCE,
        bufs: vec![n * dt.size()],
        build: Box::new(move |a| {
            let cmd = KernelCmd::new(ids::REDUCE, 1).addr(a[0], len).scalar(op).scalar(dt.code());
            (cmd, vec![data.clone()])
        }),
        outputs: vec![],
        verify: Box::new(move |_, st| {
            expect_ok(st)?;
            if !dt.float() {
                return expect_result(st, want_i);
            }
            let got = match dt {
                Dt::F32 => f64::from(f32::from_bits(st.result as u32)),
                _ => f64::from_bits(st.result),
            };
            let tol = if dt == Dt::F32 { 1e-5 } else { 1e-12 };
            if close(got, want_f, scale, tol) {
                Ok(())
            } else {
                Err(format!("result {got}, expected {want_f}"))
            }
        }),
        bytes: len,
        ops: None,
    })
}

fn plan_vector(spec: &Spec, size: usize, r: &mut Rng) -> Result<Plan> {
    let dt = Dt::parse(&spec.dtype)?;
    if dt == Dt::I8 {
        bail!("{} takes f32, f64, i32, u32, i64 or u64", spec.name);
    }
    let n = size / dt.size();
    if n == 0 {
        bail!("--size is smaller than one element");
    }
    let len = n * dt.size();
    let x = dt.random(r, n);
    let vadd = spec.name == "vadd";
    let y = dt.random(r, n);
    let (alpha, beta) = if dt.float() { (1.5, -0.25) } else { (3.0, 7.0) };
    // Expected output, element by element.
    let mut want = Vec::with_capacity(len);
    for i in 0..n {
        if dt.float() {
            let v = if vadd {
                dt.get_f(&x, i) + dt.get_f(&y, i)
            } else {
                alpha * dt.get_f(&x, i) + beta
            };
            match dt {
                Dt::F32 => want.extend_from_slice(&(v as f32).to_le_bytes()),
                _ => want.extend_from_slice(&v.to_le_bytes()),
            }
        } else {
            let v = if vadd {
                dt.get_i(&x, i).wrapping_add(dt.get_i(&y, i))
            } else {
                (alpha as i128).wrapping_mul(dt.get_i(&x, i)).wrapping_add(beta as i128)
            };
            want.extend(dt.int_bytes(v));
        }
    }
    let (kernel, bufs, outputs) = if vadd {
        (ids::VADD, vec![len, len, len], vec![2])
    } else {
        (ids::VSCALE, vec![len, len], vec![1])
    };
    let (sa, sb) = (dt.scalar(alpha), dt.scalar(beta));
    Ok(Plan {
        label: format!("{} {} x{n}", spec.name, spec.dtype),
        kernel,
        bufs,
        build: Box::new(move |a| {
            let l = len as u64;
            if vadd {
                let cmd = KernelCmd::new(ids::VADD, 1)
                    .addr(a[0], l)
                    .addr(a[1], l)
                    .addr(a[2], l)
                    .scalar(dt.code());
                (cmd, vec![x.clone(), y.clone(), vec![]])
            } else {
                let cmd = KernelCmd::new(ids::VSCALE, 1)
                    .addr(a[0], l)
                    .addr(a[1], l)
                    .scalar(dt.code())
                    .scalar(sa)
                    .scalar(sb);
                (cmd, vec![x.clone(), vec![]])
            }
        }),
        outputs,
        verify: Box::new(move |out, st| {
            expect_result(st, n as u64)?;
            let got = &out[0];
            for i in 0..n {
                let ok = if dt.float() {
                    let (g, w) = (dt.get_f(got, i), dt.get_f(&want, i));
                    close(g, w, w.abs(), if dt == Dt::F32 { 1e-6 } else { 1e-14 })
                } else {
                    dt.get_i(got, i) == dt.get_i(&want, i)
                };
                if !ok {
                    return Err(format!(
                        "element {i}: got {}, expected {}",
                        dt.get_f(got, i),
                        dt.get_f(&want, i)
                    ));
                }
            }
            Ok(())
        }),
        bytes: len as u64 * if vadd { 2 } else { 1 },
        ops: None,
    })
}

fn plan_gather(spec: &Spec, size: usize, r: &mut Rng) -> Result<Plan> {
    let blocks = usize::try_from(spec.blocks).context("too many blocks")?;
    if blocks == 0 || blocks > size {
        bail!("--blocks must be 1 ..= --size");
    }
    // Source: `size` bytes after the list in buffer 0; blocks of random lengths covering it
    // in a shuffled order.
    let list_len = blocks * 16;
    let src = r.bytes(size);
    let mut cuts: Vec<usize> =
        (0..blocks - 1).map(|_| 1 + (r.next() as usize) % size.max(2)).collect();
    cuts.push(0);
    cuts.push(size);
    cuts.sort_unstable();
    cuts.dedup();
    let mut pieces: Vec<(usize, usize)> = cuts.windows(2).map(|w| (w[0], w[1] - w[0])).collect();
    for i in (1..pieces.len()).rev() {
        pieces.swap(i, (r.next() as usize) % (i + 1));
    }
    let want: Vec<u8> = pieces.iter().flat_map(|&(at, len)| src[at..at + len].to_vec()).collect();
    let n = pieces.len();
    Ok(Plan {
        label: format!("gather {n} blocks, {}", crate::dma::size_label(spec.size)),
        kernel: ids::GATHER,
        bufs: vec![list_len + size, size],
        build: Box::new(move |a| {
            let base = a[0] + list_len as u64;
            let mut buf0 = Vec::with_capacity(list_len + src.len());
            for &(at, len) in &pieces {
                buf0.extend_from_slice(&(base + at as u64).to_le_bytes());
                buf0.extend_from_slice(&(len as u32).to_le_bytes());
                buf0.extend_from_slice(&0u32.to_le_bytes());
            }
            buf0.resize(list_len, 0);
            buf0.extend_from_slice(&src);
            let cmd = KernelCmd::new(ids::GATHER, 1)
                .addr(a[0], (n * 16) as u64)
                .addr(a[1], src.len() as u64)
                .scalar(n as u64);
            (cmd, vec![buf0, vec![]])
        }),
        outputs: vec![1],
        verify: Box::new(move |out, st| {
            expect_result(st, want.len() as u64)?;
            first_diff(&out[0], &want)
        }),
        bytes: spec.size,
        ops: None,
    })
}

fn plan_gemm(spec: &Spec, r: &mut Rng) -> Result<Plan> {
    let dt = Dt::parse(&spec.dtype)?;
    if !matches!(dt, Dt::F32 | Dt::I8) {
        bail!("gemm takes f32 or i8");
    }
    let lay: Vec<bool> = spec.layout.chars().map(|c| c == 'c').collect();
    if spec.layout.len() != 3 || !spec.layout.chars().all(|c| c == 'r' || c == 'c') {
        bail!("--layout is three letters r or c (A, B, C), e.g. rrr");
    }
    let (m, n, k) = (spec.m, spec.n, spec.k);
    let max = gemm::MAX_DIM;
    if !(1..=max).contains(&m) || !(1..=max).contains(&n) || !(1..=max).contains(&k) {
        bail!("-m, -n and -k must be 1 ..= {max}");
    }
    let (mu, nu, ku) = (m as usize, n as usize, k as usize);
    let flags = u64::from(lay[0]) * gemm::A_COL_MAJOR
        + u64::from(lay[1]) * gemm::B_COL_MAJOR
        + u64::from(lay[2]) * gemm::C_COL_MAJOR;
    let a = dt.random(r, mu * ku);
    let b = dt.random(r, ku * nu);
    // C is i32 for i8 inputs, f32 for f32: four bytes either way.
    let c_len = mu * nu * 4;
    // Logical element offsets for the layouts.
    let (la, lb, lc) = (lay[0], lay[1], lay[2]);
    let ai = move |i: usize, p: usize| if la { p * mu + i } else { i * ku + p };
    let bi = move |p: usize, j: usize| if lb { j * ku + p } else { p * nu + j };
    let ci = move |i: usize, j: usize| if lc { j * mu + i } else { i * nu + j };
    // Entries checked: all for small matrices, else a seeded sample.
    let mut picks: Vec<(usize, usize)> = Vec::new();
    if mu * nu <= 4096 {
        picks = (0..mu).flat_map(|i| (0..nu).map(move |j| (i, j))).collect();
    } else {
        for _ in 0..2048 {
            picks.push(((r.next() as usize) % mu, (r.next() as usize) % nu));
        }
    }
    let (a2, b2) = (a.clone(), b.clone());
    let verify = move |out: &[Vec<u8>], st: &KernelStatus| -> std::result::Result<(), String> {
        expect_result(st, 2 * m * n * k)?;
        let c = &out[0];
        for &(i, j) in &picks {
            if dt == Dt::I8 {
                let want = (0..ku).fold(0i32, |s, p| {
                    let x = i32::from(a2[ai(i, p)] as i8) * i32::from(b2[bi(p, j)] as i8);
                    s.wrapping_add(x)
                });
                let got = Dt::I32.get_i(c, ci(i, j)) as i32;
                if got != want {
                    return Err(format!("C[{i}][{j}] = {got}, expected {want}"));
                }
            } else {
                let (mut want, mut scale) = (0f64, 0f64);
                for p in 0..ku {
                    let x = dt.get_f(&a2, ai(i, p)) * dt.get_f(&b2, bi(p, j));
                    want += x;
                    scale += x.abs();
                }
                let got = dt.get_f(c, ci(i, j));
                if !close(got, want, scale, 1e-5) {
                    return Err(format!("C[{i}][{j}] = {got}, expected {want}"));
                }
            }
        }
        Ok(())
    };
    let (alen, blen) = (a.len() as u64, b.len() as u64);
    Ok(Plan {
        label: format!("gemm {m}x{n}x{k} {} {}", spec.dtype, spec.layout),
        kernel: ids::GEMM,
        bufs: vec![a.len(), b.len(), c_len],
        build: Box::new(move |x| {
            let cmd = KernelCmd::new(ids::GEMM, 1)
                .addr(x[0], alen)
                .addr(x[1], blen)
                .addr(x[2], c_len as u64)
                .scalar(m)
                .scalar(n)
                .scalar(k)
                .scalar(dt.code())
                .scalar(flags);
            (cmd, vec![a.clone(), b.clone(), vec![]])
        }),
        outputs: vec![2],
        verify: Box::new(verify),
        bytes: alen + blen,
        ops: Some(2 * m * n * k),
    })
}

// ----- the two paths -----

/// The plan's buffers in snic (registered host memory or device memory), filled.
enum Placed {
    Host(Vec<HostBuf>),
    Dev(Vec<u64>),
}

struct Offload<'a> {
    dev: &'a Device,
    placed: Placed,
    cmd: KernelCmd,
    timeout: Duration,
}

impl<'a> Offload<'a> {
    fn new(dev: &'a Device, p: &Plan, spec: &Spec) -> Result<Offload<'a>> {
        let (placed, addrs) = match spec.location {
            Location::HostMem => {
                let bufs = p
                    .bufs
                    .iter()
                    .map(|&n| dev.alloc_host(n))
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .context("allocating host buffers")?;
                let addrs: Vec<u64> = bufs.iter().map(HostBuf::iova).collect();
                (Placed::Host(bufs), addrs)
            }
            Location::DevMem => {
                let mut addrs = Vec::new();
                for &n in &p.bufs {
                    addrs.push(
                        dev.alloc_device(DevKind::OnBoard, n as u64, 4096)
                            .context("allocating device memory")?,
                    );
                }
                (Placed::Dev(addrs.clone()), addrs)
            }
        };
        let (cmd, contents) = (p.build)(&addrs);
        for (i, data) in contents.iter().enumerate().filter(|(_, d)| !d.is_empty()) {
            match &placed {
                Placed::Host(b) => b[i].write(0, data)?,
                Placed::Dev(_) => dev.write_device(addrs[i], data)?,
            }
        }
        if spec.interrupt {
            dev.kernel_set_interrupt(p.kernel, true)?;
        }
        Ok(Offload { dev, placed, cmd, timeout: Duration::from_millis(spec.timeout_ms) })
    }

    fn run(&self) -> Result<KernelStatus> {
        Ok(self.dev.kernel_run(&self.cmd, self.timeout)?)
    }

    fn outputs(&self, p: &Plan) -> Result<Vec<Vec<u8>>> {
        p.outputs
            .iter()
            .map(|&i| {
                let mut v = vec![0u8; p.bufs[i]];
                match &self.placed {
                    Placed::Host(b) => b[i].read(0, &mut v)?,
                    Placed::Dev(a) => self.dev.read_device(a[i], &mut v)?,
                }
                Ok(v)
            })
            .collect()
    }
}

/// The same command run by calling the kernel in this process, over a local address space
/// holding the buffers as host memory of client 1.
struct Direct {
    mem: AddressSpace,
    kernels: Kernels,
    cmd: KernelCmd,
    addrs: Vec<u64>,
}

impl Direct {
    fn new(p: &Plan) -> Result<Direct> {
        let mut mem = AddressSpace::new();
        let mut addrs = Vec::new();
        let mut at = 1u64 << 40;
        for &n in &p.bufs {
            let base = HostAddr::new(at).context("host address")?;
            mem.map_host_owned(base, Box::new(vec![0u8; n]), 1)
                .map_err(|e| anyhow::anyhow!("mapping a local buffer: {e}"))?;
            addrs.push(at);
            at += (n as u64).next_multiple_of(1 << 20);
        }
        let (cmd, contents) = (p.build)(&addrs);
        for (i, data) in contents.iter().enumerate().filter(|(_, d)| !d.is_empty()) {
            mem.write(addrs[i], data).map_err(|e| anyhow::anyhow!("filling a buffer: {e}"))?;
        }
        Ok(Direct { mem, kernels: Kernels::with_builtins(), cmd, addrs })
    }

    fn run(&mut self) -> KernelStatus {
        self.kernels.run(&mut self.mem, &Invocation::new(1, &self.cmd))
    }

    fn outputs(&self, p: &Plan) -> Result<Vec<Vec<u8>>> {
        p.outputs
            .iter()
            .map(|&i| {
                let mut v = vec![0u8; p.bufs[i]];
                self.mem
                    .read(self.addrs[i], &mut v)
                    .map_err(|e| anyhow::anyhow!("reading a buffer: {e}"))?;
                Ok(v)
            })
            .collect()
    }
}

fn rates(p: &Plan, secs: f64) -> (Option<f64>, f64) {
    let secs = secs.max(1e-12);
    (p.ops.map(|o| o as f64 / secs / 1e9), p.bytes as f64 / secs / 1e9)
}

fn rate_text(p: &Plan, secs: f64) -> String {
    match rates(p, secs) {
        (Some(g), _) => format!("{g:.2} GFLOP/s"),
        (None, gb) => format!("{gb:.2} GB/s"),
    }
}

fn loc_name(l: Location) -> &'static str {
    match l {
        Location::HostMem => "host_mem",
        Location::DevMem => "dev_mem",
    }
}

fn run_once(a: &RunArgs) -> Result<()> {
    let p = plan(&a.spec)?;
    let s = Session::open(&a.target)?;
    let off = Offload::new(&s.dev, &p, &a.spec)?;
    let t = Instant::now();
    let st = off.run()?;
    let secs = t.elapsed().as_secs_f64();
    let out = off.outputs(&p)?;
    let verdict = (p.verify)(&out, &st);
    let (gflops, gbps) = rates(&p, secs);
    if a.target.json {
        let v = json!({
            "kernel": a.spec.name,
            "what": p.label,
            "location": loc_name(a.spec.location),
            "interrupt": a.spec.interrupt,
            "status": snic_compute::status::name(st.status),
            "result": st.result,
            "verified": verdict.is_ok(),
            "mismatch": verdict.as_ref().err(),
            "time_ns": (secs * 1e9) as u64,
            "busy_ns": st.busy_ns,
            "gflops": gflops,
            "gbps": gbps,
        });
        println!("{v}");
    } else {
        let what = match &verdict {
            Ok(()) => "verified".to_string(),
            Err(e) => format!("MISMATCH: {e}"),
        };
        println!(
            "{} ({}{}): {what}; {:.3} ms ({:.3} ms in the kernel), {}",
            p.label,
            loc_name(a.spec.location),
            if a.spec.interrupt { ", interrupt" } else { "" },
            secs * 1e3,
            st.busy_ns as f64 / 1e6,
            rate_text(&p, secs),
        );
    }
    if let Err(e) = verdict {
        bail!("{} did not verify: {e}", p.label);
    }
    Ok(())
}

fn bench(a: &BenchArgs) -> Result<()> {
    let p = plan(&a.spec)?;
    let s = Session::open(&a.target)?;
    let n = a.iterations;
    let off = Offload::new(&s.dev, &p, &a.spec)?;
    let mut direct = Direct::new(&p)?;
    // One warm-up run of each, checked.
    let st = off.run()?;
    (p.verify)(&off.outputs(&p)?, &st).map_err(|e| anyhow::anyhow!("offload: {e}"))?;
    let st = direct.run();
    (p.verify)(&direct.outputs(&p)?, &st).map_err(|e| anyhow::anyhow!("direct: {e}"))?;
    // Alternate the two paths in rounds so both see the same machine state.
    let (mut t_off, mut t_dir) = (Duration::ZERO, Duration::ZERO);
    let mut busy = 0u64;
    for _ in 0..n {
        let t = Instant::now();
        let st = off.run()?;
        t_off += t.elapsed();
        if !st.is_ok() {
            bail!("offload run failed: {}", snic_compute::status::name(st.status));
        }
        busy += st.busy_ns;
        let t = Instant::now();
        let st = direct.run();
        t_dir += t.elapsed();
        if !st.is_ok() {
            bail!("direct run failed: {}", snic_compute::status::name(st.status));
        }
    }
    let per = |d: Duration| d.as_secs_f64() / n as f64;
    let (o, d) = (per(t_off), per(t_dir));
    let ratio = d / o.max(1e-12);
    if a.target.json {
        let v = json!({
            "kernel": a.spec.name,
            "what": p.label,
            "location": loc_name(a.spec.location),
            "interrupt": a.spec.interrupt,
            "iterations": n,
            "offload_ns": (o * 1e9) as u64,
            "offload_busy_ns": busy / n,
            "direct_ns": (d * 1e9) as u64,
            "ratio": ratio,
            "offload_gflops": rates(&p, o).0,
            "direct_gflops": rates(&p, d).0,
            "offload_gbps": rates(&p, o).1,
            "direct_gbps": rates(&p, d).1,
        });
        println!("{v}");
    } else {
        println!("{} ({}), {n} iterations:", p.label, loc_name(a.spec.location));
        println!(
            "  offload (host library, compute worker): {:>10.3} ms  {}",
            o * 1e3,
            rate_text(&p, o)
        );
        println!(
            "  direct  (in this process):              {:>10.3} ms  {}",
            d * 1e3,
            rate_text(&p, d)
        );
        println!("  ratio direct/offload: {ratio:.3}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_reference_matches_the_standard_check_value() {
        assert_eq!(crc32c_ref(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn dtype_elements_extend_by_sign() {
        assert_eq!(Dt::I32.get_i(&(-5i32).to_le_bytes(), 0), -5);
        assert_eq!(Dt::U32.get_i(&u32::MAX.to_le_bytes(), 0), i128::from(u32::MAX));
        assert_eq!(Dt::I32.int_bytes(-1), vec![0xFF; 4]);
        assert_eq!(Dt::F32.scalar(1.5), u64::from(1.5f32.to_bits()));
    }
}
