//! The data of networked matrix multiplication (RecoNIC Fig. 6): both peers derive A and B
//! from a seed, so only the seed travels beside the RDMA READs, and the side that gets C
//! checks it against A x B computed on the host. `snic compute mm`, `examples/c/netmm.c`
//! (which makes the same streams in C) and the testbed's networked GEMM share it.

use serde::Serialize;

use crate::kernel::dtype;

/// splitmix64 stream `which` (1: A, 2: B) of `seed`.
pub fn stream(seed: u64, which: u64) -> impl Iterator<Item = u64> {
    let mut state = seed ^ which.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    std::iter::repeat_with(move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    })
}

/// `len` elements (little-endian bytes) of dtype `dt` ([`dtype::I8`], else f32) from stream
/// `which` of `seed`: i8 the top byte of each draw, f32 its top 24 bits mapped to [-1, 1). `examples/c/netmm.c` makes
/// the same.
pub fn matrix(seed: u64, which: u64, len: usize, dt: u64) -> Vec<u8> {
    let s = stream(seed, which).take(len);
    if dt == dtype::I8 {
        s.map(|x| (x >> 56) as u8).collect()
    } else {
        s.flat_map(|x| ((x >> 40) as f32 / 16_777_216.0 * 2.0 - 1.0).to_le_bytes()).collect()
    }
}

/// Where C first differs from A x B.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Mismatch {
    /// Row.
    pub row: usize,
    /// Column.
    pub col: usize,
    /// C's element.
    pub got: f64,
    /// The reference's.
    pub want: f64,
}

/// Check C (row-major, i32 for [`dtype::I8`] else f32, M x N) against A (M x K) x B (K x N), all row-major: i8
/// exactly, f32 within `(K + 2) * eps * sum |a * b|` (the rounding bound of the dot product in
/// any order). `None` when it verifies.
pub fn verify(
    (m, n, k): (usize, usize, usize),
    dt: u64,
    a: &[u8],
    b: &[u8],
    c: &[u8],
) -> Option<Mismatch> {
    let word = |v: &[u8], i: usize| [v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]];
    let int8 = dt == dtype::I8;
    let elem = |v: &[u8], i: usize| {
        if int8 { f64::from(v[i] as i8) } else { f64::from(f32::from_le_bytes(word(v, i))) }
    };
    let mut want = vec![0f64; n];
    let mut mag = vec![0f64; n];
    for i in 0..m {
        want.fill(0.0);
        mag.fill(0.0);
        for l in 0..k {
            let x = elem(a, i * k + l);
            for j in 0..n {
                let y = elem(b, l * n + j);
                want[j] += x * y;
                mag[j] += (x * y).abs();
            }
        }
        for j in 0..n {
            let got = if int8 {
                f64::from(i32::from_le_bytes(word(c, i * n + j)))
            } else {
                f64::from(f32::from_le_bytes(word(c, i * n + j)))
            };
            let tol = if int8 { 0.0 } else { (k as f64 + 2.0) * f64::from(f32::EPSILON) * mag[j] };
            let off = (got - want[j]).abs();
            if off.is_nan() || off > tol {
                return Some(Mismatch { row: i, col: j, got, want: want[j] });
            }
        }
    }
    None
}
