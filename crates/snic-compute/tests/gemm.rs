//! GEMM through the kernel registry against the triple-loop references: every layout
//! combination, with and without ACCUMULATE, i8 exactly and f32 within a K-scaled tolerance,
//! aligned and misaligned matrices, host and device memory.

use proptest::prelude::*;
use snic_compute::testing::{
    HOST_A, OWNER_A, Space, f32_bytes, f32_close, f32s, gemm_cmd, gemm_ref_f32, gemm_ref_i8,
    i8_bytes, i32_bytes, i32s, lay_out, random_f32, random_i8, random_i32, rng,
};
use snic_compute::{GemmShape, dtype, gemm, status};

const HOST: usize = 64 << 10;
const DEV: usize = 64 << 10;

/// Where the three matrices go: A in client 1's host memory, B in device memory, C back in
/// host memory, each `skew` bytes past a 64-byte boundary.
fn places(s: &Space, skew: u64) -> (u64, u64, u64) {
    (HOST_A + skew, s.dev_at(skew), HOST_A + 32768 + skew)
}

fn run_i8(m: usize, n: usize, k: usize, flags: u64, seed: u64, skew: u64) {
    let shape = GemmShape::new(m as u64, n as u64, k as u64, flags).unwrap();
    let mut r = rng(seed);
    let (a, b) = (random_i8(&mut r, m * k), random_i8(&mut r, k * n));
    let c0 = random_i32(&mut r, m * n);
    let mut s = Space::new(HOST, DEV);
    let (pa, pb, pc) = places(&s, skew);
    s.put(pa, &i8_bytes(&a));
    s.put(pb, &i8_bytes(&b));
    s.put(pc, &i32_bytes(&c0));
    let st = s.run(OWNER_A, &gemm_cmd(&shape, dtype::I8, pa, pb, pc));
    assert_eq!((st.status, st.result), (status::OK, 2 * (m * n * k) as u64));
    let mut want = c0.clone();
    gemm_ref_i8(&shape, &a, &b, &mut want);
    assert_eq!(i32s(&s.get(pc, m * n * 4)), want, "{m}x{n}x{k} flags {flags}");
    // Nothing past C moved.
    assert_eq!(s.get(pc + (m * n * 4) as u64, 4), vec![0; 4]);
}

fn run_f32(m: usize, n: usize, k: usize, flags: u64, seed: u64, skew: u64) {
    let shape = GemmShape::new(m as u64, n as u64, k as u64, flags).unwrap();
    let mut r = rng(seed);
    let (a, b) = (random_f32(&mut r, m * k), random_f32(&mut r, k * n));
    let c0 = random_f32(&mut r, m * n);
    let mut s = Space::new(HOST, DEV);
    let (pa, pb, pc) = places(&s, skew);
    s.put(pa, &f32_bytes(&a));
    s.put(pb, &f32_bytes(&b));
    s.put(pc, &f32_bytes(&c0));
    let st = s.run(OWNER_A, &gemm_cmd(&shape, dtype::F32, pa, pb, pc));
    assert_eq!((st.status, st.result), (status::OK, 2 * (m * n * k) as u64));
    let mut want = c0.clone();
    gemm_ref_f32(&shape, &a, &b, &mut want);
    let got = f32s(&s.get(pc, m * n * 4));
    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
        assert!(f32_close(g, w, k, k as f32 + 1.0), "{m}x{n}x{k} flags {flags} [{i}]: {g} vs {w}");
    }
    assert_eq!(s.get(pc + (m * n * 4) as u64, 4), vec![0; 4]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn i8_matches_the_triple_loop(
        m in 1usize..=70, n in 1usize..=70, k in 1usize..=70,
        flags in 0u64..=gemm::ALL, seed in any::<u64>(), skew in 0u64..4,
    ) {
        run_i8(m, n, k, flags, seed, skew);
    }

    #[test]
    fn f32_matches_the_triple_loop(
        m in 1usize..=70, n in 1usize..=70, k in 1usize..=70,
        flags in 0u64..=gemm::ALL, seed in any::<u64>(), skew in 0u64..4,
    ) {
        run_f32(m, n, k, flags, seed, skew);
    }
}

#[test]
fn every_layout_and_accumulate_on_prime_shapes() {
    for flags in 0..=gemm::ALL {
        for &(m, n, k) in &[(1, 1, 1), (7, 13, 5), (31, 2, 67), (67, 61, 59), (4, 8, 256)] {
            run_i8(m, n, k, flags, flags * 31 + m as u64, 0);
            run_f32(m, n, k, flags, flags * 17 + n as u64, 0);
        }
    }
    // Misaligned f32 matrices take the copying path, C too.
    run_f32(9, 11, 13, 0, 5, 1);
    run_f32(9, 11, 13, gemm::ACCUMULATE | gemm::C_COL_MAJOR, 6, 3);
}

#[test]
fn i8_extremes_are_exact_and_accumulate_wraps() {
    // Every product is (-128)·(-128) = 2^14; K = 1100 crosses two KC blocks.
    let (m, n, k) = (5, 9, 1100);
    let shape = GemmShape::new(m, n, k, gemm::ACCUMULATE).unwrap();
    let mut s = Space::new(HOST, DEV);
    let (pa, pb, pc) = places(&s, 0);
    s.put(pa, &[0x80; 5 * 1100]);
    s.put(pb, &[0x80; 1100 * 9]);
    s.put(pc, &i32_bytes(&[i32::MAX; 45]));
    assert!(s.run(OWNER_A, &gemm_cmd(&shape, dtype::I8, pa, pb, pc)).is_ok());
    let want = i32::MAX.wrapping_add(1100 << 14);
    assert_eq!(i32s(&s.get(pc, 45 * 4)), vec![want; 45]);
}

#[test]
fn direct_slice_calls_agree_with_the_references() {
    let shape = GemmShape::new(33, 17, 45, gemm::B_COL_MAJOR).unwrap();
    let mut r = rng(11);
    let (a, b) = (random_f32(&mut r, 33 * 45), random_f32(&mut r, 45 * 17));
    let mut c = vec![f32::NAN; 33 * 17];
    snic_compute::gemm::gemm_f32(&shape, &a, &b, &mut c).unwrap();
    let mut want = vec![0.0; 33 * 17];
    gemm_ref_f32(&shape, &a, &b, &mut want);
    assert!(c.iter().zip(&want).all(|(&g, &w)| f32_close(g, w, 45, 46.0)));
    let (ai, bi) = (random_i8(&mut r, 33 * 45), random_i8(&mut r, 45 * 17));
    let mut ci = vec![7; 33 * 17];
    snic_compute::gemm::gemm_i8(&shape, &ai, &bi, &mut ci).unwrap();
    let mut want = vec![0; 33 * 17];
    gemm_ref_i8(&shape, &ai, &bi, &mut want);
    assert_eq!(ci, want);
    // Layout helpers: a column-major store is the transpose's row-major one.
    let t = lay_out(&[1, 2, 3, 4, 5, 6], 2, 3, true);
    assert_eq!(t, vec![1, 4, 2, 5, 3, 6]);
    assert!(snic_compute::gemm::gemm_i8(&shape, &ai[1..], &bi, &mut ci).is_err());
}

#[test]
fn inputs_may_share_bytes_and_c_may_sit_beside_them() {
    // C = A x A with A given twice (inputs may overlap), A and C in one device region.
    let (d, k) = (23usize, 23u64);
    let shape = GemmShape::new(k, k, k, gemm::B_COL_MAJOR).unwrap();
    let mut r = rng(99);
    let a = random_f32(&mut r, d * d);
    let ai = random_i8(&mut r, d * d);
    let mut s = Space::new(HOST, DEV);
    let (pa, pc) = (s.dev_at(0), s.dev_at((d * d * 4) as u64));
    s.put(pa, &f32_bytes(&a));
    assert!(s.run(OWNER_A, &gemm_cmd(&shape, dtype::F32, pa, pa, pc)).is_ok());
    let mut want = vec![0.0; d * d];
    gemm_ref_f32(&shape, &a, &a, &mut want);
    let got = f32s(&s.get(pc, d * d * 4));
    assert!(got.iter().zip(&want).all(|(&g, &w)| f32_close(g, w, d, d as f32)));
    s.put(pa, &i8_bytes(&ai));
    assert!(s.run(OWNER_A, &gemm_cmd(&shape, dtype::I8, pa, pa, pc)).is_ok());
    let mut want = vec![0; d * d];
    gemm_ref_i8(&shape, &ai, &ai, &mut want);
    assert_eq!(i32s(&s.get(pc, d * d * 4)), want);
}
