//! GEMM ([`ids::GEMM`]): C = A x B or C += A x B, the matrix kernel RecoNIC runs on its
//! systolic array, in software, for i8 x i8 -> i32 and f32 matrices in row- or column-major
//! layout each, of any M, N, K from 1 to [`MAX_DIM`].
//!
//! A layout is only a pair of strides: A (M x K) row-major is (K, 1) and column-major (1, M),
//! and likewise for B (K x N) and C (M x N), so every combination of the three layout flags
//! runs through the same code.
//!
//! # f32: `matrixmultiply`
//!
//! f32 products go to the `matrixmultiply` crate (MIT or Apache-2.0, no C dependency): it
//! packs panels into cache-sized blocks, picks an AVX+FMA, AVX or SSE micro-kernel at run
//! time, and takes raw pointers with arbitrary row and column strides, so all eight layout
//! combinations run at full speed without transposing anything, and accumulation is its
//! `beta = 1`. Its inputs are read in place: when A, B and C are 4-byte aligned in memory (and
//! the machine is little-endian) the kernel hands it pointers into the address space's
//! backings, with no copy; a misaligned matrix is first copied into an aligned `Vec<f32>`
//! (and a misaligned C computed there and copied back). That call is the crate's only
//! `unsafe` code; its safety argument is beside it.
//!
//! # i8: a packed, tiled kernel of its own
//!
//! Neither `matrixmultiply` nor `gemm` has integer matrices, so i8 x i8 -> i32 is done here:
//! A is packed into strips of [`MR`] rows and B into panels of [`NR`] columns, both widened to
//! i16 and with K taken in pairs (`[a(i, 2p), a(i, 2p + 1)]`, `[b(2p, j), b(2p + 1, j)]`),
//! zero-padded at the edges so every tile is whole. The micro-kernel then keeps an
//! `MR x NR` tile of i32 sums in registers and, per pair of K, adds `a0 * b0 + a1 * b1` for
//! every tile element: a fixed-size loop over i16 that the compiler vectorizes (the product of
//! two sign-extended i16 becomes `pmaddwd` on x86). K is cut into blocks of [`KC`] so a B
//! panel block stays in L1 and the packed A block in L2 while a column of tiles is computed.
//! Sums wrap on i32 overflow (only reachable with ACCUMULATE or K beyond 2^16: a single
//! product is at most 2^14). The benches compare it with a naive triple loop.

#![allow(
    unsafe_code,
    reason = "one call to matrixmultiply::sgemm on pointers into the address space, with a SAFETY comment"
)]

use snic_dma::mem::Span;
use snic_dma::{AddressSpace, MemError};

use crate::kernel::{Invocation, KernelError, LookasideKernel, dtype, gemm, ids};

/// The GEMM flags ([`crate::kernel::gemm`]), here too, so `snic_compute::gemm::ACCUMULATE`
/// names them beside the kernel.
pub use crate::kernel::gemm::{A_COL_MAJOR, ACCUMULATE, ALL, B_COL_MAJOR, C_COL_MAJOR};

/// Largest M, N or K (larger is [`crate::status::BAD_ARGS`]).
pub const MAX_DIM: u64 = 65536;
/// Rows of the i8 micro-kernel's tile.
pub const MR: usize = 4;
/// Columns of the i8 micro-kernel's tile.
pub const NR: usize = 8;
/// K per block of the i8 kernel (even).
pub const KC: usize = 256;

/// The dimensions and flags of one GEMM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmShape {
    /// Rows of A and C.
    pub m: usize,
    /// Columns of B and C.
    pub n: usize,
    /// Columns of A, rows of B.
    pub k: usize,
    /// [`gemm`] flags.
    pub flags: u64,
}

impl GemmShape {
    /// A shape, checked: every dimension in 1..=[`MAX_DIM`], only known flags.
    pub fn new(m: u64, n: u64, k: u64, flags: u64) -> Result<GemmShape, KernelError> {
        let dim = |d: u64| {
            if (1..=MAX_DIM).contains(&d) {
                usize::try_from(d).map_err(|_| KernelError::BadArgs("dimension too large"))
            } else {
                Err(KernelError::BadArgs("dimensions must be 1..=65536"))
            }
        };
        if flags & !gemm::ALL != 0 {
            return Err(KernelError::BadArgs("unknown GEMM flags"));
        }
        Ok(GemmShape { m: dim(m)?, n: dim(n)?, k: dim(k)?, flags })
    }

    fn has(&self, flag: u64) -> bool {
        self.flags & flag != 0
    }

    /// Whether C is added to rather than overwritten.
    pub fn accumulate(&self) -> bool {
        self.has(gemm::ACCUMULATE)
    }

    /// (row stride, column stride) of A, in elements.
    pub fn a_strides(&self) -> (usize, usize) {
        if self.has(gemm::A_COL_MAJOR) { (1, self.m) } else { (self.k, 1) }
    }

    /// (row stride, column stride) of B, in elements.
    pub fn b_strides(&self) -> (usize, usize) {
        if self.has(gemm::B_COL_MAJOR) { (1, self.k) } else { (self.n, 1) }
    }

    /// (row stride, column stride) of C, in elements.
    pub fn c_strides(&self) -> (usize, usize) {
        if self.has(gemm::C_COL_MAJOR) { (1, self.m) } else { (self.n, 1) }
    }

    /// Elements of A, B and C.
    pub fn elems(&self) -> Result<(usize, usize, usize), KernelError> {
        let mul = |x: usize, y: usize| x.checked_mul(y).ok_or(KernelError::BadArgs("too large"));
        Ok((mul(self.m, self.k)?, mul(self.k, self.n)?, mul(self.m, self.n)?))
    }

    /// Operations done: 2·M·N·K.
    pub fn ops(&self) -> u64 {
        2 * self.m as u64 * self.n as u64 * self.k as u64
    }
}

// ---------------------------------------------------------------------------------------
// f32

/// matrixmultiply's sgemm on `shape`'s strides.
///
/// # Safety
///
/// `a`, `b` and `c` are valid, 4-byte aligned pointers to at least M·K, K·N and M·N f32
/// (readable; `c` also writable), C shares no byte with A or B, and nothing else reads or
/// writes C, nor writes A or B, while this runs.
unsafe fn sgemm_raw(shape: &GemmShape, a: *const f32, b: *const f32, c: *mut f32) {
    let (rsa, csa) = shape.a_strides();
    let (rsb, csb) = shape.b_strides();
    let (rsc, csc) = shape.c_strides();
    let beta = if shape.accumulate() { 1.0 } else { 0.0 };
    // SAFETY: the caller's guarantees are sgemm's requirements: with these dimensions and
    // strides sgemm reads a[i*rsa + p*csa] for i < M, p < K (all below M·K), b[p*rsb + j*csb]
    // (below K·N) and writes c[i*rsc + j*csc] (below M·N); strides are at most 65536, so they
    // fit isize. With beta = 0 C is only written.
    unsafe {
        matrixmultiply::sgemm(
            shape.m,
            shape.k,
            shape.n,
            1.0,
            a,
            rsa as isize,
            csa as isize,
            b,
            rsb as isize,
            csb as isize,
            beta,
            c,
            rsc as isize,
            csc as isize,
        );
    }
}

/// `C = A x B` (or `+=`) on f32 slices laid out as `shape` says. Short slices are
/// [`KernelError::BadLength`].
pub fn gemm_f32(shape: &GemmShape, a: &[f32], b: &[f32], c: &mut [f32]) -> Result<(), KernelError> {
    let (na, nb, nc) = shape.elems()?;
    if a.len() < na || b.len() < nb || c.len() < nc {
        return Err(KernelError::BadLength("matrix shorter than its dimensions"));
    }
    // SAFETY: the slices are long enough (checked), f32 slices are aligned, and the borrows
    // (shared A and B, exclusive C) rule out overlap and any other access.
    unsafe { sgemm_raw(shape, a.as_ptr(), b.as_ptr(), c.as_mut_ptr()) };
    Ok(())
}

/// f32 values of little-endian bytes.
fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap_or_default())).collect()
}

/// Whether `bytes` can be read in place as f32.
fn f32_in_place(bytes: &[u8]) -> bool {
    cfg!(target_endian = "little") && bytes.as_ptr().cast::<f32>().is_aligned()
}

fn gemm_f32_spans(
    mem: &mut AddressSpace,
    shape: &GemmShape,
    spans: &[Span],
    (na, nb, nc): (usize, usize, usize),
) -> Result<(), KernelError> {
    let err = |arg| move |err: MemError| KernelError::BadAddress { arg, err };
    // C first, as a raw pointer: the mutable borrow of the address space ends here, and the
    // shared borrows of A and B below keep the address space from changing until sgemm has
    // returned.
    let c_bytes = mem.span_bytes_mut(&spans[2], nc * 4).map_err(err(2))?;
    if !f32_in_place(c_bytes) {
        return gemm_f32_copied(mem, shape, spans, (na, nb, nc));
    }
    let c_ptr = c_bytes.as_mut_ptr().cast::<f32>();
    let a_bytes = mem.span_bytes(&spans[0], na * 4).map_err(err(0))?;
    let b_bytes = mem.span_bytes(&spans[1], nb * 4).map_err(err(1))?;
    let a_copy = (!f32_in_place(a_bytes)).then(|| f32s(a_bytes));
    let b_copy = (!f32_in_place(b_bytes)).then(|| f32s(b_bytes));
    let a_ptr = a_copy.as_ref().map_or(a_bytes.as_ptr().cast::<f32>(), |v| v.as_ptr());
    let b_ptr = b_copy.as_ref().map_or(b_bytes.as_ptr().cast::<f32>(), |v| v.as_ptr());
    // SAFETY:
    // - Valid and aligned: each pointer comes from a slice of exactly the bytes its matrix
    //   needs (the caller checked the spans against the dimensions) or from our own Vec, and
    //   those from the address space were checked 4-byte aligned.
    // - No overlap: `Invocation::check` refused a C whose address range meets A's or B's;
    //   regions of one address space never share addresses and each has its own backing, so
    //   C's bytes are not A's or B's (and the copies are our own).
    // - No other access: `mem` stays borrowed through `a_bytes` and `b_bytes` until after
    //   the call, so nothing maps, unmaps or writes the backings meanwhile.
    unsafe { sgemm_raw(shape, a_ptr, b_ptr, c_ptr) };
    Ok(())
}

/// f32 GEMM with a misaligned C: everything through aligned copies, C written back whole.
fn gemm_f32_copied(
    mem: &mut AddressSpace,
    shape: &GemmShape,
    spans: &[Span],
    (na, nb, nc): (usize, usize, usize),
) -> Result<(), KernelError> {
    let err = |arg| move |err: MemError| KernelError::BadAddress { arg, err };
    let a = f32s(mem.span_bytes(&spans[0], na * 4).map_err(err(0))?);
    let b = f32s(mem.span_bytes(&spans[1], nb * 4).map_err(err(1))?);
    let mut c = if shape.accumulate() {
        f32s(mem.span_bytes(&spans[2], nc * 4).map_err(err(2))?)
    } else {
        vec![0f32; nc]
    };
    gemm_f32(shape, &a, &b, &mut c)?;
    let out: Vec<u8> = c.iter().flat_map(|v| v.to_le_bytes()).collect();
    mem.write_span(&spans[2], &out).map_err(err(2))
}

// ---------------------------------------------------------------------------------------
// i8

/// An element an i8 matrix may be given as (i8 itself, or its byte).
pub trait I8Like: Copy {
    /// The value.
    fn get(self) -> i8;
}

impl I8Like for i8 {
    #[inline(always)]
    fn get(self) -> i8 {
        self
    }
}

impl I8Like for u8 {
    #[inline(always)]
    fn get(self) -> i8 {
        self as i8
    }
}

/// A packed into strips of MR rows, K in pairs: strip s, pair p holds `[a(i, 2p), a(i, 2p+1)]`
/// for the MR rows i of the strip, as i16 (zero beyond M and K).
fn pack_a<T: I8Like>(a: &[T], m: usize, k: usize, (rs, cs): (usize, usize)) -> Vec<i16> {
    let kp = k.div_ceil(2);
    let strips = m.div_ceil(MR);
    let mut out = vec![0i16; strips * kp * 2 * MR];
    for (s, strip) in out.chunks_exact_mut(kp * 2 * MR).enumerate() {
        for (p, pair) in strip.chunks_exact_mut(2 * MR).enumerate() {
            for r in 0..MR.min(m - s * MR) {
                let i = s * MR + r;
                for h in 0..2.min(k - 2 * p) {
                    let kk = 2 * p + h;
                    pair[2 * r + h] = a.get(i * rs + kk * cs).map_or(0, |v| i16::from(v.get()));
                }
            }
        }
    }
    out
}

/// B packed into panels of NR columns, K in pairs: panel q, pair p holds
/// `[b(2p, j), b(2p+1, j)]` for the NR columns j of the panel, as i16 (zero beyond N and K).
fn pack_b<T: I8Like>(b: &[T], n: usize, k: usize, (rs, cs): (usize, usize)) -> Vec<i16> {
    let kp = k.div_ceil(2);
    let panels = n.div_ceil(NR);
    let mut out = vec![0i16; panels * kp * 2 * NR];
    for (q, panel) in out.chunks_exact_mut(kp * 2 * NR).enumerate() {
        for (p, pair) in panel.chunks_exact_mut(2 * NR).enumerate() {
            for h in 0..2.min(k - 2 * p) {
                let kk = 2 * p + h;
                for c in 0..NR.min(n - q * NR) {
                    let j = q * NR + c;
                    pair[2 * c + h] = b.get(kk * rs + j * cs).map_or(0, |v| i16::from(v.get()));
                }
            }
        }
    }
    out
}

/// The MR x NR tile of sums of one A strip block and one B panel block (same K pairs).
#[inline(always)]
fn micro(a: &[i16], b: &[i16], acc: &mut [[i32; NR]; MR]) {
    let (a, _) = a.as_chunks::<{ 2 * MR }>();
    let (b, _) = b.as_chunks::<{ 2 * NR }>();
    for (ap, bp) in a.iter().zip(b) {
        for (r, row) in acc.iter_mut().enumerate() {
            let a0 = i32::from(ap[2 * r]);
            let a1 = i32::from(ap[2 * r + 1]);
            for (j, s) in row.iter_mut().enumerate() {
                let p = a0 * i32::from(bp[2 * j]) + a1 * i32::from(bp[2 * j + 1]);
                *s = s.wrapping_add(p);
            }
        }
    }
}

/// C (laid out with `shape`'s C strides, `c.len() >= M·N`) += A x B, from packed A and B.
fn igemm_packed(shape: &GemmShape, ap: &[i16], bp: &[i16], c: &mut [i32]) {
    let (m, n, k) = (shape.m, shape.n, shape.k);
    let (rsc, csc) = shape.c_strides();
    let kp = k.div_ceil(2);
    let (strips, panels) = (m.div_ceil(MR), n.div_ceil(NR));
    let kcp = KC / 2;
    for p0 in (0..kp).step_by(kcp) {
        let p1 = (p0 + kcp).min(kp);
        for q in 0..panels {
            let bq = &bp[(q * kp + p0) * 2 * NR..(q * kp + p1) * 2 * NR];
            for s in 0..strips {
                let as_ = &ap[(s * kp + p0) * 2 * MR..(s * kp + p1) * 2 * MR];
                let mut acc = [[0i32; NR]; MR];
                micro(as_, bq, &mut acc);
                for (r, row) in acc.iter().enumerate().take(m - s * MR) {
                    let i = s * MR + r;
                    for (cj, v) in row.iter().enumerate().take(n - q * NR) {
                        let at = i * rsc + (q * NR + cj) * csc;
                        if let Some(e) = c.get_mut(at) {
                            *e = e.wrapping_add(*v);
                        }
                    }
                }
            }
        }
    }
}

/// `C = A x B` (or `+=`) on i8 matrices with an i32 C, laid out as `shape` says. Short
/// slices are [`KernelError::BadLength`].
pub fn gemm_i8<T: I8Like>(
    shape: &GemmShape,
    a: &[T],
    b: &[T],
    c: &mut [i32],
) -> Result<(), KernelError> {
    let (na, nb, nc) = shape.elems()?;
    if a.len() < na || b.len() < nb || c.len() < nc {
        return Err(KernelError::BadLength("matrix shorter than its dimensions"));
    }
    let ap = pack_a(a, shape.m, shape.k, shape.a_strides());
    let bp = pack_b(b, shape.n, shape.k, shape.b_strides());
    if !shape.accumulate() {
        c[..nc].fill(0);
    }
    igemm_packed(shape, &ap, &bp, c);
    Ok(())
}

fn gemm_i8_spans(
    mem: &mut AddressSpace,
    shape: &GemmShape,
    spans: &[Span],
    (na, nb, nc): (usize, usize, usize),
) -> Result<(), KernelError> {
    let err = |arg| move |err: MemError| KernelError::BadAddress { arg, err };
    let ap =
        pack_a(mem.span_bytes(&spans[0], na).map_err(err(0))?, shape.m, shape.k, shape.a_strides());
    let bp =
        pack_b(mem.span_bytes(&spans[1], nb).map_err(err(1))?, shape.n, shape.k, shape.b_strides());
    let mut c = vec![0i32; nc];
    let out = mem.span_bytes_mut(&spans[2], nc * 4).map_err(err(2))?;
    if shape.accumulate() {
        for (v, b) in c.iter_mut().zip(out.chunks_exact(4)) {
            *v = i32::from_le_bytes(b.try_into().unwrap_or_default());
        }
    }
    igemm_packed(shape, &ap, &bp, &mut c);
    for (b, v) in out.chunks_exact_mut(4).zip(&c) {
        b.copy_from_slice(&v.to_le_bytes());
    }
    Ok(())
}

/// GEMM (see [`ids::GEMM`]). `s4` (flags) may be left out (0: all row-major, C = A x B).
#[derive(Debug, Default, Clone, Copy)]
pub struct GemmKernel;

impl LookasideKernel for GemmKernel {
    fn id(&self) -> u32 {
        ids::GEMM
    }
    fn name(&self) -> &'static str {
        "gemm"
    }
    fn usage(&self) -> &'static str {
        "a0 A (MxK), a1 B (KxN), a2 C (MxN); s0 M, s1 N, s2 K, s3 dtype (i8|f32), s4 flags; \
         result = 2MNK"
    }
    fn run(&mut self, mem: &mut AddressSpace, inv: &Invocation<'_>) -> Result<u64, KernelError> {
        let spans = inv.check(mem, 3..=3, 4..=5, &[2])?;
        let shape = GemmShape::new(inv.scalar(0), inv.scalar(1), inv.scalar(2), inv.scalar(4))?;
        let in_size = match inv.scalar(3) {
            dtype::I8 => 1,
            dtype::F32 => 4,
            _ => return Err(KernelError::BadArgs("GEMM dtype must be i8 or f32")),
        };
        let (na, nb, nc) = shape.elems()?;
        let bytes = |n: usize, size: usize| n.saturating_mul(size);
        if spans[0].len() < bytes(na, in_size)
            || spans[1].len() < bytes(nb, in_size)
            || spans[2].len() < bytes(nc, 4)
        {
            return Err(KernelError::BadLength("matrix shorter than its dimensions"));
        }
        if in_size == 1 {
            gemm_i8_spans(mem, &shape, &spans, (na, nb, nc))?;
        } else {
            gemm_f32_spans(mem, &shape, &spans, (na, nb, nc))?;
        }
        Ok(shape.ops())
    }
}
