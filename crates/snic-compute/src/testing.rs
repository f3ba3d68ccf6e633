//! Test kits for the kernels, behind the `testing` feature, for this crate's tests and benches
//! and for other crates' tests (the host interface's, the device's).
//!
//! - [`Space`]: an address space with one host region for each of two clients and one device
//!   region, a snapshot of every byte (to check a refused command changed nothing) and a
//!   runner.
//! - Reference kernels written the obvious way: [`gemm_ref_i8`] (also the naive triple loop
//!   the benches compare the packed kernel with), [`gemm_ref_f32`].
//! - Matrices: seeded generators ([`rng`], [`random_i8`], [`random_f32`]) and layout helpers
//!   that store a logical row-major matrix row- or column-major ([`lay_out`], [`lay_in`]).

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use snic_dma::{AddressSpace, DevAddr, HostAddr, MemKind, RegionId};

use crate::cmd::{KernelCmd, KernelStatus};
use crate::gemm::GemmShape;
use crate::kernel::{Invocation, Kernels, gemm};

/// Base of client 1's host region.
pub const HOST_A: u64 = 1 << 40;
/// Base of client 2's host region.
pub const HOST_B: u64 = 2 << 40;
/// Client 1.
pub const OWNER_A: u32 = 1;
/// Client 2.
pub const OWNER_B: u32 = 2;

/// An address space with a host region of client [`OWNER_A`] at [`HOST_A`], one of client
/// [`OWNER_B`] at [`HOST_B`] and an on-board device region, and the built-in kernels.
#[derive(Debug)]
pub struct Space {
    /// The memory.
    pub mem: AddressSpace,
    /// The kernels.
    pub kernels: Kernels,
    /// Raw address of the device region.
    pub dev: u64,
    /// Bytes of each host region.
    pub host_size: usize,
    /// Bytes of the device region.
    pub dev_size: usize,
    regions: Vec<RegionId>,
}

impl Space {
    /// Host regions of `host_size` bytes, a device region of `dev_size` bytes, all zero.
    pub fn new(host_size: usize, dev_size: usize) -> Space {
        let mut mem = AddressSpace::new();
        let h = |a| HostAddr::new(a).expect("host address");
        let a = mem.map_host_owned(h(HOST_A), Box::new(vec![0u8; host_size]), OWNER_A);
        let b = mem.map_host_owned(h(HOST_B), Box::new(vec![0u8; host_size]), OWNER_B);
        let (d, dev) =
            mem.map_device(MemKind::OnBoard, Box::new(vec![0u8; dev_size])).expect("device region");
        Space {
            mem,
            kernels: Kernels::with_builtins(),
            dev: dev.raw(),
            host_size,
            dev_size,
            regions: vec![a.expect("host region A"), b.expect("host region B"), d],
        }
    }

    /// Device address `offset` bytes into the device region.
    pub fn dev_at(&self, offset: u64) -> u64 {
        DevAddr::from_raw(self.dev).map_or(self.dev, |d| d.raw()) + offset
    }

    /// Run `cmd` for client `owner`.
    pub fn run(&mut self, owner: u32, cmd: &KernelCmd) -> KernelStatus {
        self.kernels.run(&mut self.mem, &Invocation::new(owner, cmd))
    }

    /// Write `data` at `addr` (panics outside the regions: a test bug).
    pub fn put(&mut self, addr: u64, data: &[u8]) {
        self.mem.write(addr, data).expect("write inside the fixture");
    }

    /// The `len` bytes at `addr` (panics outside the regions: a test bug).
    pub fn get(&self, addr: u64, len: usize) -> Vec<u8> {
        self.mem.slice(addr, len).expect("read inside the fixture").to_vec()
    }

    /// Every byte of every region, in region order.
    pub fn snapshot(&self) -> Vec<Vec<u8>> {
        self.mem
            .regions()
            .filter(|r| self.regions.contains(&r.id))
            .map(|r| self.get(r.base, r.len as usize))
            .collect()
    }

    /// Fill every region with bytes from a seeded generator.
    pub fn scribble(&mut self, seed: u64) {
        let mut r = rng(seed);
        let regions: Vec<_> = self.mem.regions().map(|r| (r.base, r.len as usize)).collect();
        for (base, len) in regions {
            let mut bytes = vec![0u8; len];
            r.fill_bytes(&mut bytes);
            self.put(base, &bytes);
        }
    }
}

/// The seeded generator the kits use.
pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// `n` random i8 (the full range).
pub fn random_i8(r: &mut ChaCha8Rng, n: usize) -> Vec<i8> {
    (0..n).map(|_| r.r#gen()).collect()
}

/// `n` random f32 in [-1, 1).
pub fn random_f32(r: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| r.gen_range(-1.0f32..1.0)).collect()
}

/// `n` random i32 in [-2^20, 2^20) (a C to accumulate into).
pub fn random_i32(r: &mut ChaCha8Rng, n: usize) -> Vec<i32> {
    (0..n).map(|_| r.gen_range(-(1 << 20)..1 << 20)).collect()
}

/// A `rows x cols` matrix given row-major (`m[i * cols + j]`) stored row- or column-major.
pub fn lay_out<T: Copy>(m: &[T], rows: usize, cols: usize, col_major: bool) -> Vec<T> {
    if !col_major {
        return m[..rows * cols].to_vec();
    }
    (0..cols).flat_map(|j| (0..rows).map(move |i| m[i * cols + j])).collect()
}

/// The row-major form of a `rows x cols` matrix stored row- or column-major.
pub fn lay_in<T: Copy>(s: &[T], rows: usize, cols: usize, col_major: bool) -> Vec<T> {
    if !col_major {
        return s[..rows * cols].to_vec();
    }
    (0..rows).flat_map(|i| (0..cols).map(move |j| s[j * rows + i])).collect()
}

/// Little-endian bytes of i8 values.
pub fn i8_bytes(v: &[i8]) -> Vec<u8> {
    v.iter().map(|&x| x as u8).collect()
}

/// Little-endian bytes of i32 values.
pub fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Little-endian bytes of f32 values.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// i32 values of little-endian bytes.
pub fn i32s(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes"))).collect()
}

/// f32 values of little-endian bytes.
pub fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect()
}

/// Element `(i, j)` of a matrix with `(row stride, column stride)`.
fn at<T: Copy>(m: &[T], (rs, cs): (usize, usize), i: usize, j: usize) -> T {
    m[i * rs + j * cs]
}

/// The obvious i8 GEMM: a triple loop over the layouts `shape` names, i32 sums wrapping like
/// the kernel's. `c` is in C's layout.
pub fn gemm_ref_i8(shape: &GemmShape, a: &[i8], b: &[i8], c: &mut [i32]) {
    let (sa, sb, sc) = (shape.a_strides(), shape.b_strides(), shape.c_strides());
    for i in 0..shape.m {
        for j in 0..shape.n {
            let mut s = if shape.flags & gemm::ACCUMULATE != 0 { at(c, sc, i, j) } else { 0 };
            for p in 0..shape.k {
                let prod = i32::from(at(a, sa, i, p)) * i32::from(at(b, sb, p, j));
                s = s.wrapping_add(prod);
            }
            c[i * sc.0 + j * sc.1] = s;
        }
    }
}

/// The obvious f32 GEMM (sums in f64, so it is the more exact of the two). `c` is in C's
/// layout.
pub fn gemm_ref_f32(shape: &GemmShape, a: &[f32], b: &[f32], c: &mut [f32]) {
    let (sa, sb, sc) = (shape.a_strides(), shape.b_strides(), shape.c_strides());
    for i in 0..shape.m {
        for j in 0..shape.n {
            let mut s =
                if shape.flags & gemm::ACCUMULATE != 0 { f64::from(at(c, sc, i, j)) } else { 0.0 };
            for p in 0..shape.k {
                s += f64::from(at(a, sa, i, p)) * f64::from(at(b, sb, p, j));
            }
            c[i * sc.0 + j * sc.1] = s as f32;
        }
    }
}

/// Whether `got` is within the error an f32 sum of `k` products of magnitude at most `scale`
/// may carry of `want` (relative to the sum of magnitudes, plus a floor).
pub fn f32_close(got: f32, want: f32, k: usize, scale: f32) -> bool {
    let tol = (k as f32 + 2.0) * f32::EPSILON * 4.0 * scale.max(1.0);
    (got - want).abs() <= tol
}

/// A GEMM command: A at `a`, B at `b`, C at `c`, lengths exactly what `shape` and the dtype
/// need.
pub fn gemm_cmd(shape: &GemmShape, dtype: u64, a: u64, b: u64, c: u64) -> KernelCmd {
    let isz = if dtype == crate::kernel::dtype::I8 { 1 } else { 4 };
    let (m, n, k) = (shape.m as u64, shape.n as u64, shape.k as u64);
    KernelCmd::new(crate::kernel::ids::GEMM, 1)
        .addr(a, m * k * isz)
        .addr(b, k * n * isz)
        .addr(c, m * n * 4)
        .scalar(m)
        .scalar(n)
        .scalar(k)
        .scalar(dtype)
        .scalar(shape.flags)
}
