//! VADD, VSCALE, REDUCE, GATHER, CRC32C and LZ4 through the kernel registry against
//! straightforward references on random inputs.

use proptest::prelude::*;
use snic_compute::gather::{SglEntry, encode_sgl};
use snic_compute::testing::{HOST_A, OWNER_A, Space, rng};
use snic_compute::{KernelCmd, dtype, ids, reduce, status};

const SIZE: usize = 1 << 16;

/// The six vector dtypes.
const DTYPES: [u64; 6] = [dtype::I32, dtype::U32, dtype::I64, dtype::U64, dtype::F32, dtype::F64];

/// Reference element-wise and reduction arithmetic on one element of `dt`, as u64 bits.
fn elem(dt: u64, b: &[u8]) -> u64 {
    match dt {
        dtype::I32 => i32::from_le_bytes(b[..4].try_into().unwrap()) as i64 as u64,
        dtype::U32 | dtype::F32 => u64::from(u32::from_le_bytes(b[..4].try_into().unwrap())),
        _ => u64::from_le_bytes(b[..8].try_into().unwrap()),
    }
}

fn vadd_ref(dt: u64, x: u64, y: u64) -> u64 {
    match dt {
        dtype::I32 | dtype::U32 => u64::from((x as u32).wrapping_add(y as u32)),
        dtype::F32 => u64::from((f32::from_bits(x as u32) + f32::from_bits(y as u32)).to_bits()),
        dtype::F64 => (f64::from_bits(x) + f64::from_bits(y)).to_bits(),
        _ => x.wrapping_add(y),
    }
}

fn vscale_ref(dt: u64, x: u64, a: u64, b: u64) -> u64 {
    match dt {
        dtype::I32 | dtype::U32 => {
            u64::from((a as u32).wrapping_mul(x as u32).wrapping_add(b as u32))
        }
        dtype::F32 => {
            let f = |v: u64| f32::from_bits(v as u32);
            u64::from((f(a) * f(x) + f(b)).to_bits())
        }
        dtype::F64 => {
            let f = f64::from_bits;
            (f(a) * f(x) + f(b)).to_bits()
        }
        _ => a.wrapping_mul(x).wrapping_add(b),
    }
}

fn write_elem(dt: u64, v: u64) -> Vec<u8> {
    let size = dtype::size(dt).unwrap();
    v.to_le_bytes()[..size].to_vec()
}

/// Random values of `dt`, as the bytes and the widened bits (small floats, so float sums are
/// well conditioned).
fn values(dt: u64, n: usize, seed: u64) -> (Vec<u8>, Vec<u64>) {
    use rand::Rng;
    let mut r = rng(seed);
    let bits: Vec<u64> = (0..n)
        .map(|_| match dt {
            dtype::F32 => u64::from(r.gen_range(-100.0f32..100.0).to_bits()),
            dtype::F64 => r.gen_range(-100.0f64..100.0).to_bits(),
            dtype::I32 => r.r#gen::<i32>() as i64 as u64,
            dtype::U32 => u64::from(r.r#gen::<u32>()),
            _ => r.r#gen::<u64>(),
        })
        .collect();
    let bytes = bits.iter().flat_map(|&v| write_elem(dt, v)).collect();
    (bytes, bits)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn vadd_and_vscale_match_elementwise(d in 0usize..6, n in 1usize..3000, seed in any::<u64>(), skew in 0u64..8) {
        let dt = DTYPES[d];
        let size = dtype::size(dt).unwrap();
        let (xb, x) = values(dt, n, seed);
        let (yb, y) = values(dt, n, seed ^ 1);
        let mut s = Space::new(SIZE, SIZE);
        let (px, py, out) = (HOST_A + skew, s.dev_at(skew), HOST_A + 32768 + skew);
        s.put(px, &xb);
        s.put(py, &yb);
        let len = (n * size) as u64;
        let st = s.run(OWNER_A, &KernelCmd::new(ids::VADD, 3).addr(px, len).addr(py, len + 5).addr(out, len).scalar(dt));
        prop_assert_eq!((st.status, st.result), (status::OK, n as u64));
        let got = s.get(out, n * size);
        for i in 0..n {
            prop_assert_eq!(elem(dt, &got[i * size..]) & mask(dt), vadd_ref(dt, x[i], y[i]) & mask(dt));
        }
        let (alpha, beta) = (y[0], x[n / 2]);
        let st = s.run(OWNER_A, &KernelCmd::new(ids::VSCALE, 4).addr(px, len).addr(out, len).scalar(dt).scalar(alpha).scalar(beta));
        prop_assert_eq!((st.status, st.result), (status::OK, n as u64));
        let got = s.get(out, n * size);
        for i in 0..n {
            prop_assert_eq!(elem(dt, &got[i * size..]) & mask(dt), vscale_ref(dt, x[i], alpha, beta) & mask(dt));
        }
        // Only whole elements of the output were written.
        prop_assert_eq!(s.get(out + len, 1), vec![0]);
    }

    #[test]
    fn reduce_matches_a_fold(d in 0usize..6, n in 1usize..3000, seed in any::<u64>(), op in 0u64..3) {
        let dt = DTYPES[d];
        let size = dtype::size(dt).unwrap();
        let (xb, x) = values(dt, n, seed);
        let mut s = Space::new(SIZE, SIZE);
        let px = s.dev_at(4);
        s.put(px, &xb);
        let st = s.run(OWNER_A, &KernelCmd::new(ids::REDUCE, 9).addr(px, (n * size) as u64).scalar(op).scalar(dt));
        prop_assert!(st.is_ok());
        match dt {
            dtype::F32 | dtype::F64 => {
                let v: Vec<f64> = x.iter().map(|&b| if dt == dtype::F32 { f64::from(f32::from_bits(b as u32)) } else { f64::from_bits(b) }).collect();
                let got = if dt == dtype::F32 { f64::from(f32::from_bits(st.result as u32)) } else { f64::from_bits(st.result) };
                let want = match op {
                    reduce::SUM => v.iter().sum(),
                    reduce::MIN => v.iter().copied().fold(f64::INFINITY, f64::min),
                    _ => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                };
                let eps = if dt == dtype::F32 { 1e-4 * n as f64 } else { 1e-10 * n as f64 };
                prop_assert!((got - want).abs() <= eps * 100.0, "{} vs {}", got, want);
            }
            dtype::I32 | dtype::I64 => {
                let v: Vec<i64> = x.iter().map(|&b| b as i64).collect();
                let want = match op {
                    reduce::SUM if dt == dtype::I32 => v.iter().fold(0i32, |a, &b| a.wrapping_add(b as i32)) as i64,
                    reduce::SUM => v.iter().fold(0i64, |a, &b| a.wrapping_add(b)),
                    reduce::MIN => *v.iter().min().unwrap(),
                    _ => *v.iter().max().unwrap(),
                };
                prop_assert_eq!(st.result, want as u64);
            }
            _ => {
                let want = match op {
                    reduce::SUM if dt == dtype::U32 => u64::from(x.iter().fold(0u32, |a, &b| a.wrapping_add(b as u32))),
                    reduce::SUM => x.iter().fold(0u64, |a, &b| a.wrapping_add(b)),
                    reduce::MIN => *x.iter().min().unwrap(),
                    _ => *x.iter().max().unwrap(),
                };
                prop_assert_eq!(st.result, want);
            }
        }
    }

    #[test]
    fn gather_packs_blocks_in_order(blocks in prop::collection::vec((0u64..8000, 0u32..600, any::<bool>()), 1..30)) {
        let mut s = Space::new(SIZE, SIZE);
        s.scribble(5);
        let entries: Vec<SglEntry> = blocks
            .iter()
            .map(|&(off, len, dev)| SglEntry { addr: if dev { s.dev_at(off) } else { HOST_A + off }, len })
            .collect();
        let list = HOST_A + 20000;
        s.put(list, &encode_sgl(&entries));
        let dst = s.dev_at(32768);
        let before = s.snapshot();
        let total: usize = entries.iter().map(|e| e.len as usize).sum();
        let st = s.run(OWNER_A, &KernelCmd::new(ids::GATHER, 1).addr(list, 16 * entries.len() as u64).addr(dst, 20000).scalar(entries.len() as u64));
        prop_assert_eq!((st.status, st.result), (status::OK, total as u64));
        let want: Vec<u8> = entries.iter().flat_map(|e| s.get(e.addr, e.len as usize)).collect();
        prop_assert_eq!(s.get(dst, total), want);
        // Only the gathered bytes of the destination changed.
        prop_assert_eq!(s.get(dst + total as u64, 20000 - total), before[2][32768 + total..52768].to_vec());
    }

    #[test]
    fn crc32c_matches_a_bitwise_crc(len in 0usize..5000, seed in any::<u64>(), split in 0usize..5000) {
        let mut s = Space::new(SIZE, SIZE);
        s.scribble(seed);
        let data = s.get(HOST_A + 3, len);
        let st = s.run(OWNER_A, &KernelCmd::new(ids::CRC32C, 2).addr(HOST_A + 3, len as u64).scalar(0));
        prop_assert_eq!((st.status, st.result), (status::OK, u64::from(crc32c_bitwise(0, &data))));
        // Continued from a prefix's CRC.
        let split = split.min(len);
        let pre = crc32c_bitwise(0, &data[..split]);
        let st = s.run(OWNER_A, &KernelCmd::new(ids::CRC32C, 2).addr(HOST_A + 3 + split as u64, (len - split) as u64).scalar(u64::from(pre)));
        prop_assert_eq!(st.result, u64::from(crc32c_bitwise(0, &data)));
    }

    #[test]
    fn lz4_round_trips(len in 1usize..6000, alphabet in 1u8..=255, seed in any::<u64>()) {
        use rand::Rng;
        let mut r = rng(seed);
        let data: Vec<u8> = (0..len).map(|_| r.gen_range(0..alphabet)).collect();
        let mut s = Space::new(SIZE, SIZE);
        s.put(HOST_A, &data);
        let block = s.dev_at(0);
        let st = s.run(OWNER_A, &KernelCmd::new(ids::LZ4_COMPRESS, 1).addr(HOST_A, len as u64).addr(block, 8000));
        prop_assert!(st.is_ok());
        let clen = st.result as usize;
        prop_assert_eq!(lz4_flex::block::decompress(&s.get(block, clen), len).unwrap(), data.clone());
        let out = HOST_A + 16384;
        let st = s.run(OWNER_A, &KernelCmd::new(ids::LZ4_DECOMPRESS, 1).addr(block, clen as u64).addr(out, 16000));
        prop_assert_eq!((st.status, st.result), (status::OK, len as u64));
        prop_assert_eq!(s.get(out, len), data);
    }
}

/// All-ones in the low bits an element of `dt` holds.
fn mask(dt: u64) -> u64 {
    if dtype::size(dt) == Some(4) { u64::from(u32::MAX) } else { u64::MAX }
}

/// CRC-32C one bit at a time (reflected polynomial 0x82F63B78).
fn crc32c_bitwise(init: u32, data: &[u8]) -> u32 {
    let mut c = !init;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
        }
    }
    !c
}

#[test]
fn i32_results_are_sign_extended() {
    let mut s = Space::new(SIZE, SIZE);
    let v: Vec<u8> = [-5i32, 3, -9, 4].iter().flat_map(|x| x.to_le_bytes()).collect();
    s.put(HOST_A, &v);
    let red = |op| KernelCmd::new(ids::REDUCE, 1).addr(HOST_A, 16).scalar(op).scalar(dtype::I32);
    assert_eq!(s.run(OWNER_A, &red(reduce::MIN)).result, (-9i64) as u64);
    assert_eq!(s.run(OWNER_A, &red(reduce::SUM)).result, (-7i64) as u64);
    assert_eq!(s.run(OWNER_A, &red(reduce::MAX)).result, 4);
    // As u32 the same bytes are large and zero-extended.
    let red =
        KernelCmd::new(ids::REDUCE, 1).addr(HOST_A, 16).scalar(reduce::MAX).scalar(dtype::U32);
    assert_eq!(s.run(OWNER_A, &red).result, u64::from(-5i32 as u32));
}

#[test]
fn lz4_compresses_repetitive_data_and_checks_space() {
    let mut s = Space::new(SIZE, SIZE);
    let data = vec![b'z'; 10000];
    s.put(HOST_A, &data);
    let block = s.dev_at(0);
    let st =
        s.run(OWNER_A, &KernelCmd::new(ids::LZ4_COMPRESS, 1).addr(HOST_A, 10000).addr(block, 200));
    assert!(st.is_ok() && st.result < 100, "{st:?}");
    // Destination one byte short of the result: no space, nothing written.
    let clen = st.result;
    let out = s.dev_at(4096);
    let st =
        s.run(OWNER_A, &KernelCmd::new(ids::LZ4_DECOMPRESS, 1).addr(block, clen).addr(out, 9999));
    assert_eq!(st.status, status::NO_SPACE);
    assert_eq!(s.get(out, 9999), vec![0; 9999]);
    let st = s.run(
        OWNER_A,
        &KernelCmd::new(ids::LZ4_COMPRESS, 1).addr(HOST_A, 10000).addr(out, clen - 1),
    );
    assert_eq!(st.status, status::NO_SPACE);
    assert_eq!(s.get(out, clen as usize), vec![0; clen as usize]);
}
