//! Properties of `snic_p4::algo` on random inputs: each computation against a plain
//! transliteration of BMv2's own code or a bit-at-a-time reference, and the invariants a
//! checksum and a meter must keep.

use proptest::prelude::*;
use snic_p4::algo::{
    BitBuf, Calculation, Crc, CrcParams, CrcWidth, HashAlgorithm, Meter, MeterColor, MeterKind,
    MeterRate, csum16, hash_result, identity, update_checksum, verify_checksum, xor16,
};

fn no_rng() -> impl FnMut() -> u64 {
    || panic!("the random source was called")
}

/// The CRC one bit at a time (Rocksoft model, direct form): the reference for the table.
fn crc_bitwise(p: &CrcParams, data: &[u8]) -> u64 {
    let bits = p.width.bits();
    let mask = p.width.mask();
    let top = 1u64 << (bits - 1);
    let mut r = p.initial_remainder;
    for &b in data {
        let b = if p.reflect_data { b.reverse_bits() } else { b };
        for i in (0..8).rev() {
            let feedback = (r & top != 0) != ((b >> i) & 1 == 1);
            r = (r << 1) & mask;
            if feedback {
                r ^= p.polynomial;
            }
        }
    }
    if p.reflect_remainder {
        let mut out = 0;
        for i in 0..bits {
            if r & (1 << i) != 0 {
                out |= 1 << (bits - 1 - i);
            }
        }
        r = out;
    }
    r ^ p.final_xor
}

/// BMv2's `cksum16` as written: little-endian 64-bit words with end-around carry, then the
/// 4-, 2- and 1-byte tails, a fold to 16 bits, complement and `ntohs`.
fn bmv2_cksum16(buf: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    let mut add = |s: u64| {
        sum = sum.wrapping_add(s);
        if sum < s {
            sum += 1;
        }
    };
    let mut chunks = buf.chunks_exact(8);
    for c in &mut chunks {
        add(u64::from_le_bytes(c.try_into().unwrap()));
    }
    let mut tail = chunks.remainder();
    if tail.len() & 4 != 0 {
        add(u64::from(u32::from_le_bytes(tail[..4].try_into().unwrap())));
        tail = &tail[4..];
    }
    if tail.len() & 2 != 0 {
        add(u64::from(u16::from_le_bytes(tail[..2].try_into().unwrap())));
        tail = &tail[2..];
    }
    if tail.len() & 1 != 0 {
        add(u64::from(tail[0]));
    }
    let (mut t1, t2) = (sum as u32, (sum >> 32) as u32);
    t1 = t1.wrapping_add(t2);
    if t1 < t2 {
        t1 += 1;
    }
    let (mut t3, t4) = (t1 as u16, (t1 >> 16) as u16);
    t3 = t3.wrapping_add(t4);
    if t3 < t4 {
        t3 += 1;
    }
    // ~t3 is in host (little-endian) order; ntohs swaps it.
    (!t3).swap_bytes()
}

/// BMv2's `xor_hash<uint16_t>`: `emitAsInteger` on each 2 bytes, zeros padded at the tail.
fn bmv2_xor16(buf: &[u8]) -> u16 {
    let emit = |b: &[u8]| {
        let mut r: u16 = 0;
        for &x in b {
            r = (r << 8) | u16::from(x);
        }
        if b.is_empty() { 0 } else { r << ((2 - b.len()) * 8) }
    };
    let mut v = 0;
    let mut rest = buf;
    while rest.len() >= 2 {
        v ^= emit(&rest[..2]);
        rest = &rest[2..];
    }
    v ^ emit(rest)
}

/// Fields packed a bit at a time, then the bits cut into bytes with zeros at the end.
fn pack_reference(fields: &[(u128, u32)]) -> Vec<u8> {
    let mut bits = Vec::new();
    for &(v, w) in fields {
        for i in (0..w).rev() {
            bits.push((v >> i) & 1 == 1);
        }
    }
    bits.chunks(8)
        .map(|c| c.iter().enumerate().fold(0u8, |b, (i, &bit)| b | (u8::from(bit) << (7 - i))))
        .collect()
}

fn field() -> impl Strategy<Value = (u128, u32)> {
    (any::<u128>(), 0u32..=128)
}

fn width() -> impl Strategy<Value = CrcWidth> {
    prop::sample::select(vec![CrcWidth::W8, CrcWidth::W16, CrcWidth::W32, CrcWidth::W64])
}

fn crc_params() -> impl Strategy<Value = CrcParams> {
    (width(), any::<u64>(), any::<u64>(), any::<u64>(), any::<bool>(), any::<bool>()).prop_map(
        |(width, poly, init, xor, refin, refout)| CrcParams {
            width,
            polynomial: poly & width.mask(),
            initial_remainder: init & width.mask(),
            final_xor: xor & width.mask(),
            reflect_data: refin,
            reflect_remainder: refout,
        },
    )
}

/// BMv2's `Meter::execute` for two rates, as written: rates stored peak first, each bucket
/// refilled from `floor(micros * rate)` since the origin, the loop stopping at the first
/// bucket that is short.
struct Bmv2Meter {
    /// (rate, burst, tokens, tokens_last, colour), peak first.
    rates: Vec<(f64, u64, u64, u64, u8)>,
    bytes: bool,
}

impl Bmv2Meter {
    fn new(bytes: bool, cir: MeterRate, pir: MeterRate) -> Self {
        let mut rates: Vec<_> = [cir, pir]
            .iter()
            .enumerate()
            .map(|(i, r)| (r.per_us, r.burst, r.burst, 0, i as u8 + 1))
            .collect();
        rates.reverse();
        Self { rates, bytes }
    }

    fn execute(&mut self, now_ns: u64, len: u64) -> u8 {
        let micros = (now_ns / 1000) as i64;
        let input = if self.bytes { len } else { 1 };
        for (rate, burst, tokens, last, colour) in &mut self.rates {
            let since = (micros as f64 * *rate) as u64;
            let new = since - *last;
            *last = since;
            *tokens = (*tokens + new).min(*burst);
            if *tokens < input {
                return *colour;
            }
            *tokens -= input;
        }
        0
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn table_crc_equals_the_bitwise_crc(p in crc_params(), data in prop::collection::vec(any::<u8>(), 0..64)) {
        prop_assert_eq!(Crc::new(p).unwrap().checksum(&data), crc_bitwise(&p, &data));
    }

    #[test]
    fn custom_crc_calculations_use_their_parameters(p in crc_params(), data in prop::collection::vec(any::<u8>(), 0..32)) {
        let alg = match p.width {
            CrcWidth::W16 => HashAlgorithm::Crc16Custom,
            CrcWidth::W32 => HashAlgorithm::Crc32Custom,
            _ => return Ok(()),
        };
        let mut calc = Calculation::new(alg);
        calc.set_crc_params(p).unwrap();
        prop_assert_eq!(calc.compute(&data, &mut no_rng()), crc_bitwise(&p, &data));
    }

    #[test]
    fn fixed_crcs_equal_their_parameters(data in prop::collection::vec(any::<u8>(), 0..64)) {
        prop_assert_eq!(
            Calculation::new(HashAlgorithm::Crc16).compute(&data, &mut no_rng()),
            crc_bitwise(&CrcParams::CRC16, &data)
        );
        prop_assert_eq!(
            Calculation::new(HashAlgorithm::Crc32).compute(&data, &mut no_rng()),
            crc_bitwise(&CrcParams::CRC32, &data)
        );
    }

    #[test]
    fn csum16_equals_bmv2s_little_endian_sum(data in prop::collection::vec(any::<u8>(), 0..80)) {
        prop_assert_eq!(csum16(&data), bmv2_cksum16(&data));
    }

    #[test]
    fn csum16_equals_bmv2s_near_the_carries(data in prop::collection::vec(prop::sample::select(vec![0x00u8, 0x01, 0xFE, 0xFF]), 0..80)) {
        prop_assert_eq!(csum16(&data), bmv2_cksum16(&data));
    }

    #[test]
    fn xor16_and_identity_equal_bmv2s(data in prop::collection::vec(any::<u8>(), 0..40)) {
        prop_assert_eq!(xor16(&data), bmv2_xor16(&data));
        let mut first = [0u8; 8];
        let n = data.len().min(8);
        first[8 - n..].copy_from_slice(&data[..n]);
        prop_assert_eq!(identity(&data), u64::from_be_bytes(first));
    }

    #[test]
    fn an_updated_ipv4_header_verifies(
        tos in any::<u8>(), len in any::<u16>(), id in any::<u16>(), flags in 0u128..8,
        frag in 0u128..8192, ttl in any::<u8>(), proto in any::<u8>(),
        src in any::<u32>(), dst in any::<u32>(),
    ) {
        let mut b = BitBuf::new();
        b.push(4, 4);
        b.push(5, 4);
        b.push(tos.into(), 8);
        b.push(len.into(), 16);
        b.push(id.into(), 16);
        b.push(flags, 3);
        b.push(frag, 13);
        b.push(ttl.into(), 8);
        b.push(proto.into(), 8);
        b.push(src.into(), 32);
        b.push(dst.into(), 32);
        let calc = Calculation::new(HashAlgorithm::Csum16);
        let sum = update_checksum(&calc, true, b.as_bytes(), 16, &mut no_rng()).unwrap();
        prop_assert!(verify_checksum(&calc, true, true, b.as_bytes(), sum, &mut no_rng()));
        prop_assert!(!verify_checksum(&calc, true, true, b.as_bytes(), sum ^ 1, &mut no_rng()));
        // With the checksum in its place the whole header sums to zero.
        let mut header = b.as_bytes()[..10].to_vec();
        header.extend_from_slice(&(sum as u16).to_be_bytes());
        header.extend_from_slice(&b.as_bytes()[10..]);
        prop_assert_eq!(csum16(&header), 0);
    }

    #[test]
    fn bitbuf_packs_like_the_bit_reference(fields in prop::collection::vec(field(), 0..12)) {
        let mut b = BitBuf::new();
        for &(v, w) in &fields {
            b.push(v, w);
        }
        prop_assert_eq!(b.bit_len(), fields.iter().map(|f| f.1 as usize).sum::<usize>());
        let want = pack_reference(&fields);
        prop_assert_eq!(b.as_bytes(), want.as_slice());
    }

    #[test]
    fn push_bytes_equals_push(lead in field(), (v, w) in field()) {
        let mut a = BitBuf::new();
        a.push(lead.0, lead.1);
        a.push(v, w);
        let mut b = BitBuf::new();
        b.push(lead.0, lead.1);
        let nbytes = (w as usize).div_ceil(8);
        b.push_bytes(&v.to_be_bytes()[16 - nbytes..], w as usize);
        prop_assert_eq!(a, b);
    }

    #[test]
    fn hash_lands_in_base_to_base_plus_max(h in any::<u64>(), base in 0u64..1 << 32, max in 0u64..1 << 32) {
        let r = hash_result(h, base, max, 64);
        if max == 0 {
            prop_assert_eq!(r, base);
        } else {
            prop_assert!(base <= r && r < base + max);
        }
    }

    #[test]
    fn the_meter_equals_bmv2s_loop(
        bytes in any::<bool>(),
        cir in 0.0f64..2.0, extra in 0.0f64..2.0, cbs in 0u64..3000, pbs in 0u64..3000,
        packets in prop::collection::vec((0u64..5_000, 0u64..2000), 1..200),
    ) {
        let (c, p) = (MeterRate::new(cir, cbs), MeterRate::new(cir + extra, pbs));
        let mut ours = Meter::new(if bytes { MeterKind::Bytes } else { MeterKind::Packets });
        ours.set_rates(c, p).unwrap();
        let mut theirs = Bmv2Meter::new(bytes, c, p);
        let mut now = 0;
        for (gap, len) in packets {
            now += gap;
            prop_assert_eq!(ours.execute(now, len).value(), theirs.execute(now, len));
        }
    }

    #[test]
    fn a_meter_never_passes_more_than_its_rates_allow(
        gaps in prop::collection::vec(0u64..3_000, 1..300),
    ) {
        // CIR 1 per 1000 µs with CBS 5, PIR 2 per 1000 µs with PBS 8, packets.
        let mut m = Meter::new(MeterKind::Packets);
        m.set_rates(MeterRate::new(0.001, 5), MeterRate::new(0.002, 8)).unwrap();
        let (mut now, mut green, mut passed) = (0u64, 0u64, 0u64);
        for gap in gaps {
            now += gap * 1000;
            match m.execute(now, 0) {
                MeterColor::Green => { green += 1; passed += 1; }
                MeterColor::Yellow => passed += 1,
                MeterColor::Red => {}
            }
            let micros = now / 1000;
            prop_assert!(green <= 5 + micros / 1000);
            prop_assert!(passed <= 8 + micros * 2 / 1000);
        }
    }
}
