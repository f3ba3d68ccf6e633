//! Element-wise vector kernels: VADD ([`ids::VADD`]), VSCALE ([`ids::VSCALE`]) and REDUCE
//! ([`ids::REDUCE`]) over i32, u32, i64, u64, f32 and f64 vectors.
//!
//! The loops are plain slice loops over little-endian bytes (`chunks_exact` and
//! `from_le_bytes`), which the compiler turns into vector code on its own. An output is
//! computed a block at a time into a small scratch buffer that stays in L1 and then copied to
//! the destination span, so that the inputs (shared borrows of the address space) and the
//! output (a mutable one) are never borrowed at once, and without `unsafe`. Float sums run
//! over [`LANES`] partial sums (so they vectorize); their rounding therefore differs from a
//! strictly sequential sum by the usual reassociation error. Float min and max ignore NaNs
//! (IEEE-754 minNum/maxNum): the result is NaN only when every element is.

use snic_dma::mem::Span;
use snic_dma::{AddressSpace, MemError};

use crate::kernel::{Invocation, KernelError, LookasideKernel, dtype, ids, reduce};

/// Partial sums a float reduction keeps (one vector register's worth, twice).
pub const LANES: usize = 16;

/// Bytes of output computed per step (the scratch block; a multiple of every element size).
const BLOCK: usize = 8192;

/// One element type of the vector kernels.
trait Elem: Copy + Default {
    /// Bytes per element.
    const SIZE: usize;
    /// The element's little-endian bytes.
    type Arr: Copy;
    /// The whole elements at the start of `b`.
    fn split(b: &[u8]) -> &[Self::Arr];
    /// The whole elements at the start of `b`, writable.
    fn split_mut(b: &mut [u8]) -> &mut [Self::Arr];
    fn from_arr(a: Self::Arr) -> Self;
    fn to_arr(self) -> Self::Arr;
    /// Wrapping for integers.
    fn add(self, o: Self) -> Self;
    /// Wrapping for integers.
    fn mul(self, o: Self) -> Self;
    fn min(self, o: Self) -> Self;
    fn max(self, o: Self) -> Self;
    /// The element from a scalar argument's bits (the low bits for 32-bit types).
    fn from_scalar(bits: u64) -> Self;
    /// The element's bits widened to 64 (integers sign- or zero-extended).
    fn result(self) -> u64;
}

/// The parts every element type implements alike.
macro_rules! elem_common {
    ($t:ty) => {
        const SIZE: usize = std::mem::size_of::<$t>();
        type Arr = [u8; std::mem::size_of::<$t>()];
        #[inline(always)]
        fn split(b: &[u8]) -> &[Self::Arr] {
            b.as_chunks().0
        }
        #[inline(always)]
        fn split_mut(b: &mut [u8]) -> &mut [Self::Arr] {
            b.as_chunks_mut().0
        }
        #[inline(always)]
        fn from_arr(a: Self::Arr) -> Self {
            <$t>::from_le_bytes(a)
        }
        #[inline(always)]
        fn to_arr(self) -> Self::Arr {
            self.to_le_bytes()
        }
    };
}

macro_rules! int_elem {
    ($t:ty, $bits:ty) => {
        impl Elem for $t {
            elem_common!($t);
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline(always)]
            fn min(self, o: Self) -> Self {
                Ord::min(self, o)
            }
            #[inline(always)]
            fn max(self, o: Self) -> Self {
                Ord::max(self, o)
            }
            #[inline(always)]
            fn from_scalar(bits: u64) -> Self {
                bits as $bits as $t
            }
            #[inline(always)]
            fn result(self) -> u64 {
                // Sign-extended for signed types, zero-extended for unsigned ones.
                self as i128 as u64
            }
        }
    };
}

int_elem!(i32, u32);
int_elem!(u32, u32);
int_elem!(i64, u64);
int_elem!(u64, u64);

macro_rules! float_elem {
    ($t:ty, $bits:ty) => {
        impl Elem for $t {
            elem_common!($t);
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self * o
            }
            #[inline(always)]
            fn min(self, o: Self) -> Self {
                <$t>::min(self, o)
            }
            #[inline(always)]
            fn max(self, o: Self) -> Self {
                <$t>::max(self, o)
            }
            #[inline(always)]
            fn from_scalar(bits: u64) -> Self {
                <$t>::from_bits(bits as $bits)
            }
            #[inline(always)]
            fn result(self) -> u64 {
                u64::from(self.to_bits())
            }
        }
    };
}

float_elem!(f32, u32);
float_elem!(f64, u64);

/// Call `$f::<T>($args)` with `T` the element type of dtype `$code`; `BadArgs` for any other
/// code.
macro_rules! by_dtype {
    ($code:expr, $f:ident ( $($arg:expr),* )) => {
        match $code {
            dtype::I32 => $f::<i32>($($arg),*),
            dtype::U32 => $f::<u32>($($arg),*),
            dtype::I64 => $f::<i64>($($arg),*),
            dtype::U64 => $f::<u64>($($arg),*),
            dtype::F32 => $f::<f32>($($arg),*),
            dtype::F64 => $f::<f64>($($arg),*),
            _ => Err(KernelError::BadArgs("dtype must be i32, u32, i64, u64, f32 or f64")),
        }
    };
}

/// Element size of a vector dtype (i8 is GEMM-only).
fn vector_size(code: u64) -> Result<usize, KernelError> {
    match code {
        dtype::I8 => Err(KernelError::BadArgs("dtype must be i32, u32, i64, u64, f32 or f64")),
        c => dtype::size(c).ok_or(KernelError::BadArgs("unknown dtype")),
    }
}

/// Elements of an output of `len` bytes: non-zero, a whole number of elements.
fn out_elems(len: usize, size: usize) -> Result<usize, KernelError> {
    if len == 0 {
        return Err(KernelError::BadLength("empty output"));
    }
    if !len.is_multiple_of(size) {
        return Err(KernelError::BadLength("output is not a whole number of elements"));
    }
    Ok(len / size)
}

fn mem_err(arg: usize) -> impl Fn(MemError) -> KernelError {
    move |err| KernelError::BadAddress { arg, err }
}

/// `out[i] = x[i] + y[i]` over whole elements of `out`.
#[inline(always)]
fn add_block<T: Elem>(x: &[u8], y: &[u8], out: &mut [u8]) {
    for ((o, a), b) in T::split_mut(out).iter_mut().zip(T::split(x)).zip(T::split(y)) {
        *o = T::from_arr(*a).add(T::from_arr(*b)).to_arr();
    }
}

/// `out[i] = alpha * x[i] + beta` over whole elements of `out`.
#[inline(always)]
fn scale_block<T: Elem>(x: &[u8], alpha: T, beta: T, out: &mut [u8]) {
    for (o, a) in T::split_mut(out).iter_mut().zip(T::split(x)) {
        *o = alpha.mul(T::from_arr(*a)).add(beta).to_arr();
    }
}

/// Run `f(inputs, scratch)` a block at a time over the first `n` bytes of the input spans
/// and copy each scratch block to `out`.
fn blockwise<const N: usize>(
    mem: &mut AddressSpace,
    inputs: [&Span; N],
    out: &Span,
    n: usize,
    mut f: impl FnMut([&[u8]; N], &mut [u8]),
) -> Result<(), KernelError> {
    let mut scratch = vec![0u8; n.min(BLOCK)];
    let mut off = 0;
    while off < n {
        let end = (off + BLOCK).min(n);
        let tmp = &mut scratch[..end - off];
        {
            let mut slices: [&[u8]; N] = [&[]; N];
            for (i, (s, span)) in slices.iter_mut().zip(inputs).enumerate() {
                *s = &mem.span_bytes(span, end).map_err(mem_err(i))?[off..];
            }
            f(slices, tmp);
        }
        let dst = mem.span_bytes_mut(out, end).map_err(mem_err(N))?;
        dst[off..].copy_from_slice(tmp);
        off = end;
    }
    Ok(())
}

fn vadd<T: Elem>(mem: &mut AddressSpace, s: &[Span]) -> Result<u64, KernelError> {
    let n = out_elems(s[2].len(), T::SIZE)?;
    let bytes = n * T::SIZE;
    if s[0].len() < bytes || s[1].len() < bytes {
        return Err(KernelError::BadLength("x or y shorter than the output"));
    }
    blockwise(mem, [&s[0], &s[1]], &s[2], bytes, |[x, y], out| add_block::<T>(x, y, out))?;
    Ok(n as u64)
}

fn vscale<T: Elem>(
    mem: &mut AddressSpace,
    s: &[Span],
    alpha: u64,
    beta: u64,
) -> Result<u64, KernelError> {
    let n = out_elems(s[1].len(), T::SIZE)?;
    let bytes = n * T::SIZE;
    if s[0].len() < bytes {
        return Err(KernelError::BadLength("x shorter than the output"));
    }
    let (alpha, beta) = (T::from_scalar(alpha), T::from_scalar(beta));
    blockwise(mem, [&s[0]], &s[1], bytes, |[x], out| scale_block::<T>(x, alpha, beta, out))?;
    Ok(n as u64)
}

/// Reduce whole elements of `x` with `op` (an empty `x` gives the default value).
fn reduce_bytes<T: Elem>(x: &[u8], op: u64) -> T {
    match op {
        reduce::MIN => fold(x, T::min, true),
        reduce::MAX => fold(x, T::max, true),
        _ => fold(x, T::add, false),
    }
}

/// Fold the elements of `x` with `f` over [`LANES`] partial results (started from the first
/// element, or from zero), then fold the lanes and the tail.
#[inline(always)]
fn fold<T: Elem>(x: &[u8], f: impl Fn(T, T) -> T, from_first: bool) -> T {
    let xs = T::split(x);
    let init = match xs.first() {
        Some(&a) if from_first => T::from_arr(a),
        _ => T::default(),
    };
    let mut lanes = [init; LANES];
    let (blocks, tail) = xs.as_chunks::<LANES>();
    for block in blocks {
        for (l, e) in lanes.iter_mut().zip(block) {
            *l = f(*l, T::from_arr(*e));
        }
    }
    let mut acc = lanes[0];
    for &l in &lanes[1..] {
        acc = f(acc, l);
    }
    for e in tail {
        acc = f(acc, T::from_arr(*e));
    }
    acc
}

fn reduce_span<T: Elem>(mem: &AddressSpace, x: &Span, op: u64) -> Result<u64, KernelError> {
    let n = x.len() / T::SIZE;
    if n == 0 {
        return Err(KernelError::BadLength("empty vector"));
    }
    if !x.len().is_multiple_of(T::SIZE) {
        return Err(KernelError::BadLength("vector is not a whole number of elements"));
    }
    let bytes = mem.span_bytes(x, x.len()).map_err(mem_err(0))?;
    Ok(reduce_bytes::<T>(bytes, op).result())
}

/// VADD (see [`ids::VADD`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct VaddKernel;

impl LookasideKernel for VaddKernel {
    fn id(&self) -> u32 {
        ids::VADD
    }
    fn name(&self) -> &'static str {
        "vadd"
    }
    fn usage(&self) -> &'static str {
        "a0 x, a1 y, a2 out; s0 dtype: out = x + y; result = elements"
    }
    fn run(&mut self, mem: &mut AddressSpace, inv: &Invocation<'_>) -> Result<u64, KernelError> {
        let spans = inv.check(mem, 3..=3, 1..=1, &[2])?;
        vector_size(inv.scalar(0))?;
        by_dtype!(inv.scalar(0), vadd(mem, &spans))
    }
}

/// VSCALE (see [`ids::VSCALE`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct VscaleKernel;

impl LookasideKernel for VscaleKernel {
    fn id(&self) -> u32 {
        ids::VSCALE
    }
    fn name(&self) -> &'static str {
        "vscale"
    }
    fn usage(&self) -> &'static str {
        "a0 x, a1 out; s0 dtype, s1 alpha, s2 beta: out = alpha*x + beta; result = elements"
    }
    fn run(&mut self, mem: &mut AddressSpace, inv: &Invocation<'_>) -> Result<u64, KernelError> {
        let spans = inv.check(mem, 2..=2, 3..=3, &[1])?;
        vector_size(inv.scalar(0))?;
        by_dtype!(inv.scalar(0), vscale(mem, &spans, inv.scalar(1), inv.scalar(2)))
    }
}

/// REDUCE (see [`ids::REDUCE`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct ReduceKernel;

impl LookasideKernel for ReduceKernel {
    fn id(&self) -> u32 {
        ids::REDUCE
    }
    fn name(&self) -> &'static str {
        "reduce"
    }
    fn usage(&self) -> &'static str {
        "a0 x; s0 op (0 sum, 1 min, 2 max), s1 dtype; result = the value's bits"
    }
    fn run(&mut self, mem: &mut AddressSpace, inv: &Invocation<'_>) -> Result<u64, KernelError> {
        let spans = inv.check(mem, 1..=1, 2..=2, &[])?;
        let op = inv.scalar(0);
        if !matches!(op, reduce::SUM | reduce::MIN | reduce::MAX) {
            return Err(KernelError::BadArgs("op must be sum, min or max"));
        }
        vector_size(inv.scalar(1))?;
        by_dtype!(inv.scalar(1), reduce_span(mem, &spans[0], op))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of<T: Elem>(v: &[T]) -> Vec<u8> {
        let mut b = vec![0u8; v.len() * T::SIZE];
        for (c, &e) in T::split_mut(&mut b).iter_mut().zip(v) {
            *c = e.to_arr();
        }
        b
    }

    #[test]
    fn results_widen_by_signedness() {
        assert_eq!((-2i32).result(), u64::MAX - 1);
        assert_eq!(u32::MAX.result(), 0xFFFF_FFFF);
        assert_eq!((-1i64).result(), u64::MAX);
        assert_eq!(1.5f32.result(), u64::from(1.5f32.to_bits()));
        assert_eq!(i32::from_scalar((-3i64) as u64), -3);
        assert_eq!(f32::from_scalar(u64::from(2.5f32.to_bits())), 2.5);
    }

    #[test]
    fn reductions_cover_lanes_and_tail() {
        let v: Vec<i64> = (0..(LANES as i64 * 3 + 5)).map(|i| (i * 37) % 101 - 50).collect();
        let b = bytes_of(&v);
        assert_eq!(reduce_bytes::<i64>(&b, reduce::SUM), v.iter().sum::<i64>());
        assert_eq!(reduce_bytes::<i64>(&b, reduce::MIN), *v.iter().min().unwrap());
        assert_eq!(reduce_bytes::<i64>(&b, reduce::MAX), *v.iter().max().unwrap());
        let f = [f32::NAN, 3.0, -7.5, f32::NAN];
        assert_eq!(reduce_bytes::<f32>(&bytes_of(&f), reduce::MIN), -7.5);
        assert_eq!(reduce_bytes::<f32>(&bytes_of(&f), reduce::MAX), 3.0);
        let w = [u32::MAX, 2];
        assert_eq!(reduce_bytes::<u32>(&bytes_of(&w), reduce::SUM), 1);
    }
}
