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
//! (and a misaligned C computed there and copied back). The safety argument of that call is
//! beside it.
//!
//! # i8: a packed, tiled kernel of its own
//!
//! Neither `matrixmultiply` nor `gemm` has integer matrices, so i8 x i8 -> i32 is done here.
//! A is packed into strips of [`MR`] rows and B into panels of [`NR`] columns, widened to
//! i16 with K taken in pairs (A: one i32 word `[a(i, 2p), a(i, 2p + 1)]` per row and pair;
//! B: `[b(2p, j), b(2p + 1, j)]` for the panel's columns), zero-padded at the edges so every
//! tile is whole. That is the operand form of x86's `pmaddwd`, which multiplies eight i16
//! pairs and adds each pair's two products into an i32: an i8 product is at most 2^14, so
//! this is exact. The micro-kernel keeps the `MR x NR` tile of i32 sums in registers for a
//! whole block of [`KC`] values of K and, per pair of K, broadcasts each row's A word against
//! the B vectors; a B panel block (KC·NR·2 bytes) stays in L1 while every A strip streams
//! past it.
//!
//! The loops were first left to the auto-vectorizer: it fully unrolled the tile and
//! vectorized it across K with lane-by-lane gathers (about 13 GOP/s at 256³, 4x a naive
//! triple loop). The micro-kernel is therefore written with SSE2 intrinsics, which every
//! x86_64 CPU has and which take no pointers (the packing and blocking stay plain Rust),
//! compiled a second time for AVX (the same operations in three-operand VEX form, about 6%
//! faster) and picked at run time; other architectures use the same loops in plain Rust
//! (`micro_portable`, also the reference the SIMD kernels are tested against). Sums wrap on i32 overflow, reachable only
//! with ACCUMULATE or K beyond 2^16. The benches compare the kernel with a naive triple loop.

#![allow(
    unsafe_code,
    reason = "matrixmultiply::sgemm on pointers into the address space, and the SSE2 \
              micro-kernel's target_feature call; each block has a SAFETY comment"
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
pub const MR: usize = 6;
/// Columns of the i8 micro-kernel's tile.
pub const NR: usize = 8;
/// K per block of the i8 kernel (even).
pub const KC: usize = 512;

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
    //   the call, so nothing in this process maps, unmaps or writes the backings meanwhile
    //   (a host process writing a shared-memory region at the same time races with every
    //   kernel alike; containing that is the shared-memory backing's job).
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

/// The i32 word holding the pair `(lo, hi)` as two i16 (`lo` in the low half), the form
/// `pmaddwd` multiplies.
#[inline(always)]
fn pair_word(lo: i8, hi: i8) -> i32 {
    (u32::from(lo as i16 as u16) | u32::from(hi as i16 as u16) << 16) as i32
}

/// A packed into strips of MR rows, K in pairs: strip s, pair p holds one word per row i of
/// the strip, [`pair_word`]`(a(i, 2p), a(i, 2p+1))` (zero beyond M and K).
fn pack_a<T: I8Like>(a: &[T], m: usize, k: usize, (rs, cs): (usize, usize)) -> Vec<i32> {
    let kp = k.div_ceil(2);
    let strips = m.div_ceil(MR);
    let get = |i: usize, kk: usize| {
        if kk < k { a.get(i * rs + kk * cs).map_or(0, |v| v.get()) } else { 0 }
    };
    let mut out = vec![0i32; strips * kp * MR];
    for (s, strip) in out.chunks_exact_mut(kp * MR).enumerate() {
        for (p, pair) in strip.chunks_exact_mut(MR).enumerate() {
            for (r, w) in pair.iter_mut().enumerate().take(m - s * MR) {
                let i = s * MR + r;
                *w = pair_word(get(i, 2 * p), get(i, 2 * p + 1));
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

/// The MR x NR tile of sums of one A strip block and one B panel block (same K pairs), in
/// plain Rust: the kernel on other architectures and the reference for the SSE2 one.
#[cfg_attr(target_arch = "x86_64", allow(dead_code, reason = "tested against the SSE2 kernel"))]
fn micro_portable(a: &[i32], b: &[i16], acc: &mut [[i32; NR]; MR]) {
    let (a, _) = a.as_chunks::<MR>();
    let (b, _) = b.as_chunks::<{ 2 * NR }>();
    for (ap, bp) in a.iter().zip(b) {
        for (row, &w) in acc.iter_mut().zip(ap) {
            let (a0, a1) = (i32::from(w as i16), i32::from((w >> 16) as i16));
            for (j, s) in row.iter_mut().enumerate() {
                let p = a0 * i32::from(bp[2 * j]) + a1 * i32::from(bp[2 * j + 1]);
                *s = s.wrapping_add(p);
            }
        }
    }
}

/// The MR x NR tile of sums of one A strip block and one B panel block, on SSE2 (part of
/// every x86_64 CPU): per pair of K, each row's A pair is broadcast and `pmaddwd` multiplies
/// it with NR/4 vectors of B pairs, adding both products into i32 lanes; the tile's
/// MR·NR/4 accumulators stay in registers for the whole block. (Left to the compiler, the
/// fully unrolled tile was vectorized across K with lane-by-lane gathers, at a third of
/// the speed.) The intrinsics take no pointers, so no `unsafe` is needed.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn micro_sse2(a: &[i32], b: &[i16], acc: &mut [[i32; NR]; MR]) {
    use std::arch::x86_64::{
        __m128i, _mm_add_epi32, _mm_cvtsi128_si32, _mm_madd_epi16, _mm_set1_epi32, _mm_setr_epi16,
        _mm_setzero_si128, _mm_shuffle_epi32,
    };
    const V: usize = NR / 4;
    let (a, _) = a.as_chunks::<MR>();
    let (b, _) = b.as_chunks::<{ 2 * NR }>();
    let mut c: [[__m128i; V]; MR] = [[_mm_setzero_si128(); V]; MR];
    for (ap, bp) in a.iter().zip(b) {
        let bv: [__m128i; V] = std::array::from_fn(|v| {
            let e = |i: usize| bp[8 * v + i];
            _mm_setr_epi16(e(0), e(1), e(2), e(3), e(4), e(5), e(6), e(7))
        });
        for (cr, &w) in c.iter_mut().zip(ap) {
            let av = _mm_set1_epi32(w);
            for (cv, &bw) in cr.iter_mut().zip(&bv) {
                *cv = _mm_add_epi32(*cv, _mm_madd_epi16(av, bw));
            }
        }
    }
    for (row, cr) in acc.iter_mut().zip(&c) {
        for (v, &cv) in cr.iter().enumerate() {
            let lanes = [
                _mm_cvtsi128_si32(cv),
                _mm_cvtsi128_si32(_mm_shuffle_epi32::<0b01>(cv)),
                _mm_cvtsi128_si32(_mm_shuffle_epi32::<0b10>(cv)),
                _mm_cvtsi128_si32(_mm_shuffle_epi32::<0b11>(cv)),
            ];
            for (s, l) in row[4 * v..4 * v + 4].iter_mut().zip(lanes) {
                *s = s.wrapping_add(l);
            }
        }
    }
}

/// C (laid out with `shape`'s C strides, `c.len() >= M·N`) += A x B, from packed A and B.
fn igemm_packed(shape: &GemmShape, ap: &[i32], bp: &[i16], c: &mut [i32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU has AVX (checked just above).
        unsafe { igemm_avx(shape, ap, bp, c) }
    } else {
        // SAFETY: SSE2 is part of the x86_64 baseline; every x86_64 CPU has it.
        unsafe { igemm_sse2(shape, ap, bp, c) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    igemm_blocks(shape, ap, bp, c, micro_portable)
}

/// [`igemm_blocks`] with the SSE2 micro-kernel inlined.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn igemm_sse2(shape: &GemmShape, ap: &[i32], bp: &[i16], c: &mut [i32]) {
    igemm_blocks(shape, ap, bp, c, |a, b, acc| micro_sse2(a, b, acc))
}

/// [`igemm_sse2`] compiled for AVX: the same 128-bit operations in the three-operand VEX
/// encoding, which saves the register copies two-operand SSE needs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
fn igemm_avx(shape: &GemmShape, ap: &[i32], bp: &[i16], c: &mut [i32]) {
    igemm_blocks(shape, ap, bp, c, |a, b, acc| micro_sse2(a, b, acc))
}

/// The blocked loops around a micro-kernel: K in blocks of KC, then B panels, then A strips.
#[inline(always)]
fn igemm_blocks(
    shape: &GemmShape,
    ap: &[i32],
    bp: &[i16],
    c: &mut [i32],
    micro: impl Fn(&[i32], &[i16], &mut [[i32; NR]; MR]),
) {
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
                let as_ = &ap[(s * kp + p0) * MR..(s * kp + p1) * MR];
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> i8 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (*seed >> 56) as i8
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn sse2_avx_and_portable_micro_kernels_agree() {
        let mut seed = 1;
        for (m, n, k) in
            [(1, 1, 1), (6, 8, 2), (13, 17, 301), (7, 9, 512), (25, 3, 3), (5, 11, 1100)]
        {
            let shape = GemmShape::new(m, n, k, gemm::C_COL_MAJOR).unwrap();
            let (m, n, k) = (m as usize, n as usize, k as usize);
            let a: Vec<i8> = (0..m * k).map(|_| lcg(&mut seed)).collect();
            let b: Vec<i8> = (0..k * n).map(|_| lcg(&mut seed)).collect();
            let ap = pack_a(&a, m, k, shape.a_strides());
            let bp = pack_b(&b, n, k, shape.b_strides());
            let (mut fast, mut plain) = (vec![3; m * n], vec![3; m * n]);
            let mut sse2 = fast.clone();
            igemm_packed(&shape, &ap, &bp, &mut fast);
            // SAFETY: every x86_64 CPU has SSE2.
            unsafe { igemm_sse2(&shape, &ap, &bp, &mut sse2) };
            igemm_blocks(&shape, &ap, &bp, &mut plain, micro_portable);
            assert_eq!(fast, plain, "{m}x{n}x{k}");
            assert_eq!(sse2, plain, "{m}x{n}x{k}");
            // And both are the plain sum.
            let want = |i: usize, j: usize| {
                3 + (0..k).map(|p| i32::from(a[i * k + p]) * i32::from(b[p * n + j])).sum::<i32>()
            };
            assert_eq!(plain[(n - 1) * m + m - 1], want(m - 1, n - 1));
            assert_eq!(plain[0], want(0, 0));
        }
        assert_eq!(pair_word(-1, 1), 0x0001_FFFF);
        assert_eq!(pair_word(-128, -128), 0xFF80_FF80u32 as i32);
    }
}
