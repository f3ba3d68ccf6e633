//! Known vectors for the v1model computations in `snic_p4::algo`: the buffer layout of a field
//! list, the CRC check values, the Internet checksum of real headers, v1model `hash`'s
//! base/max rule, and the meter's colours over time.

use snic_p4::algo::{
    BitBuf, Calculation, Crc, CrcConfigError, CrcParams, CrcWidth, HashAlgorithm, Meter,
    MeterColor, MeterError, MeterKind, MeterRate, crc16, crc32, csum16, hash_result, identity,
    truncate, update_checksum, verify_checksum, xor16,
};

const CHECK: &[u8] = b"123456789";

/// A random source for the algorithms that never use it.
fn no_rng() -> impl FnMut() -> u64 {
    || panic!("the random source was called")
}

fn bytes(fields: &[(u128, u32)]) -> Vec<u8> {
    let mut b = BitBuf::new();
    for &(v, w) in fields {
        b.push(v, w);
    }
    b.into_bytes()
}

// ---- the buffer ----

#[test]
fn fields_pack_msb_first_with_no_alignment() {
    assert_eq!(bytes(&[(0xA, 4), (0xB, 4)]), [0xAB]);
    assert_eq!(bytes(&[(0x1234, 16), (0x56, 8)]), [0x12, 0x34, 0x56]);
    // 101 then sixteen ones: 1011_1111 1111_1111 111(0_0000)
    assert_eq!(bytes(&[(0b101, 3), (0xFFFF, 16)]), [0xBF, 0xFF, 0xE0]);
    assert_eq!(bytes(&[(1, 1), (0, 1), (1, 1), (1, 1), (0, 4), (0xF, 4)]), [0xB0, 0xF0]);
}

#[test]
fn an_odd_total_width_is_padded_with_zeros_at_the_end() {
    // BMv2's BufBuilder: a lone bit<12> 0xABC is AB C0, not 0A BC.
    let mut b = BitBuf::new();
    b.push(0xABC, 12);
    assert_eq!(b.bit_len(), 12);
    assert_eq!(b.as_bytes(), [0xAB, 0xC0]);
}

#[test]
fn values_are_cut_to_their_width_and_zero_widths_add_nothing() {
    assert_eq!(bytes(&[(0xFFF, 4), (0, 0), (0x1FF, 4)]), [0xFF]);
    assert_eq!(bytes(&[(u128::MAX, 128)]), [0xFF; 16]);
    assert_eq!(bytes(&[(1, 1), (u128::MAX, 128)]).len(), 17);
    assert!(BitBuf::new().as_bytes().is_empty());
}

#[test]
fn wide_fields_go_in_as_right_aligned_bytes() {
    let mut b = BitBuf::new();
    b.push(0xF, 4);
    b.push_bytes(&[0x0A, 0xBC], 12);
    assert_eq!(b.as_bytes(), [0xFA, 0xBC]);

    // Wider than the bytes given: zeros on the left.
    let mut b = BitBuf::new();
    b.push_bytes(&[0xFF], 12);
    assert_eq!(b.as_bytes(), [0x0F, 0xF0]);

    // 200 bits.
    let mut b = BitBuf::new();
    let mut v = vec![0u8; 25];
    v[0] = 0x80;
    v[24] = 0x01;
    b.push_bytes(&v, 200);
    assert_eq!(b.bit_len(), 200);
    assert_eq!(b.as_bytes(), v.as_slice());
}

#[test]
fn the_payload_follows_the_padded_fields() {
    let mut b = BitBuf::new();
    b.push(0xABC, 12);
    b.push_payload(&[1, 2, 3]);
    assert_eq!(b.as_bytes(), [0xAB, 0xC0, 1, 2, 3]);
    assert_eq!(b.bit_len(), 40);
    b.clear();
    assert!(b.as_bytes().is_empty() && b.bit_len() == 0);
}

// ---- the CRCs ----

#[test]
fn crc32_is_the_ieee_crc() {
    assert_eq!(crc32(CHECK), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
    assert_eq!(crc32(b"The quick brown fox jumps over the lazy dog"), 0x414F_A339);
}

#[test]
fn crc16_is_crc16_arc() {
    assert_eq!(crc16(CHECK), 0xBB3D);
    assert_eq!(crc16(b""), 0);
    // crc16 of one byte 0x01 with a reflected 0x8005 table: 0xC0C1.
    assert_eq!(crc16(&[0x01]), 0xC0C1);
}

/// Catalogue check values, for the named CRCs BMv2's `CrcMap` also knows.
#[test]
fn custom_parameters_give_the_catalogue_check_values() {
    let p = |width, polynomial, init, xor, refin, refout| CrcParams {
        width,
        polynomial,
        initial_remainder: init,
        final_xor: xor,
        reflect_data: refin,
        reflect_remainder: refout,
    };
    use CrcWidth::*;
    let cases = [
        ("CRC-8", p(W8, 0x07, 0, 0, false, false), 0xF4),
        ("CRC-8/MAXIM", p(W8, 0x31, 0, 0, true, true), 0xA1),
        ("CRC-16/MODBUS", p(W16, 0x8005, 0xFFFF, 0, true, true), 0x4B37),
        ("CRC-16/XMODEM", p(W16, 0x1021, 0, 0, false, false), 0x31C3),
        ("CRC-16/KERMIT", p(W16, 0x1021, 0, 0, true, true), 0x2189),
        ("CRC-16/GENIBUS", p(W16, 0x1021, 0xFFFF, 0xFFFF, false, false), 0xD64E),
        ("CRC-16/USB", p(W16, 0x8005, 0xFFFF, 0xFFFF, true, true), 0xB4C8),
        ("CRC-16/ARC", CrcParams::CRC16, 0xBB3D),
        ("CRC-32", CrcParams::CRC32, 0xCBF4_3926),
        ("CRC-32C", p(W32, 0x1EDC_6F41, 0xFFFF_FFFF, 0xFFFF_FFFF, true, true), 0xE306_9283),
        (
            "CRC-32/BZIP2",
            p(W32, 0x04C1_1DB7, !0u32 as u64, !0u32 as u64, false, false),
            0xFC89_1918,
        ),
        ("CRC-32/MPEG-2", p(W32, 0x04C1_1DB7, 0xFFFF_FFFF, 0, false, false), 0x0376_E6E7),
        ("CRC-32/JAMCRC", p(W32, 0x04C1_1DB7, 0xFFFF_FFFF, 0, true, true), 0x340B_C6D9),
        (
            "CRC-64/XZ",
            p(W64, 0x42F0_E1EB_A9EA_3693, u64::MAX, u64::MAX, true, true),
            0x995D_C9BB_DF19_39FA,
        ),
        (
            "CRC-64/WE",
            p(W64, 0x42F0_E1EB_A9EA_3693, u64::MAX, u64::MAX, false, false),
            0x62EC_59E3_F1A4_F00A,
        ),
    ];
    for (name, params, check) in cases {
        assert_eq!(Crc::new(params).unwrap().checksum(CHECK), check, "{name}");
    }
}

#[test]
fn custom_crc_calculations_default_to_crc16_and_crc32_and_take_new_parameters() {
    let mut c16 = Calculation::new(HashAlgorithm::Crc16Custom);
    let mut c32 = Calculation::new(HashAlgorithm::Crc32Custom);
    assert_eq!(c16.crc_params(), Some(CrcParams::CRC16));
    assert_eq!(c16.compute(CHECK, &mut no_rng()), 0xBB3D);
    assert_eq!(c32.compute(CHECK, &mut no_rng()), 0xCBF4_3926);

    // set_crc16_parameters calc 0x1021 0xffff 0xffff false false (CRC-16/GENIBUS)
    let genibus = CrcParams {
        polynomial: 0x1021,
        initial_remainder: 0xFFFF,
        final_xor: 0xFFFF,
        reflect_data: false,
        reflect_remainder: false,
        ..CrcParams::CRC16
    };
    c16.set_crc_params(genibus).unwrap();
    assert_eq!(c16.compute(CHECK, &mut no_rng()), 0xD64E);
    // Another calculation of the same algorithm keeps its own parameters.
    assert_eq!(Calculation::new(HashAlgorithm::Crc16Custom).compute(CHECK, &mut no_rng()), 0xBB3D);

    assert_eq!(
        c32.set_crc_params(genibus),
        Err(CrcConfigError::WidthMismatch { expected: CrcWidth::W32, got: CrcWidth::W16 })
    );
    assert_eq!(
        c16.set_crc_params(CrcParams { polynomial: 0x1_8005, ..CrcParams::CRC16 }),
        Err(CrcConfigError::ValueTooWide)
    );
    assert_eq!(c16.crc_params(), Some(genibus), "a refused configuration changes nothing");
    assert_eq!(
        Calculation::new(HashAlgorithm::Crc16).set_crc_params(CrcParams::CRC16),
        Err(CrcConfigError::NotCustomCrc)
    );
    assert_eq!(Calculation::new(HashAlgorithm::Crc16).crc_params(), None);
}

// ---- the other algorithms ----

#[test]
fn csum16_of_rfc1071s_example() {
    // RFC 1071 section 3: the sum of 0001 f203 f4f5 f6f7 is ddf2, the checksum its complement.
    assert_eq!(csum16(&[0x00, 0x01, 0xF2, 0x03, 0xF4, 0xF5, 0xF6, 0xF7]), !0xDDF2);
}

/// A real IPv4 header (20 bytes, checksum 0xB861), given as v1model's `ipv4_t` fields
/// without the checksum, as p4c's tutorials pass it to `verify_checksum`.
fn ipv4_fields(b: &mut BitBuf) {
    b.push(4, 4); // version
    b.push(5, 4); // ihl
    b.push(0, 8); // diffserv
    b.push(0x0073, 16); // totalLen
    b.push(0, 16); // identification
    b.push(0b010, 3); // flags: DF
    b.push(0, 13); // fragOffset
    b.push(0x40, 8); // ttl
    b.push(0x11, 8); // protocol: UDP
    b.push(0xC0A8_0001, 32); // 192.168.0.1
    b.push(0xC0A8_00C7, 32); // 192.168.0.199
}

#[test]
fn csum16_of_a_real_ipv4_header() {
    let header = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xB8, 0x61, 0xC0, 0xA8, 0x00,
        0x01, 0xC0, 0xA8, 0x00, 0xC7,
    ];
    // Over the whole header, checksum included, the checksum is 0.
    assert_eq!(csum16(&header), 0);
    let mut b = BitBuf::new();
    ipv4_fields(&mut b);
    assert_eq!(b.bit_len(), 144);
    assert_eq!(csum16(b.as_bytes()), 0xB861);

    let calc = Calculation::new(HashAlgorithm::Csum16);
    assert!(verify_checksum(&calc, true, true, b.as_bytes(), 0xB861, &mut no_rng()));
    assert!(!verify_checksum(&calc, true, true, b.as_bytes(), 0xB862, &mut no_rng()));
    // A false condition or an invalid header passes whatever the field holds.
    assert!(verify_checksum(&calc, false, true, b.as_bytes(), 0, &mut no_rng()));
    assert!(verify_checksum(&calc, true, false, b.as_bytes(), 0, &mut no_rng()));
    assert_eq!(update_checksum(&calc, true, b.as_bytes(), 16, &mut no_rng()), Some(0xB861));
    assert_eq!(update_checksum(&calc, false, b.as_bytes(), 16, &mut no_rng()), None);
}

#[test]
fn csum16_pads_an_odd_byte_after_it() {
    assert_eq!(csum16(&[0x12]), !0x1200);
    assert_eq!(csum16(&[0x12, 0x34, 0x56]), !(0x1234 + 0x5600));
    assert_eq!(csum16(&[]), 0xFFFF);
    assert_eq!(csum16(&[0, 0, 0]), 0xFFFF);
    // End-around carry: ffff + 0001 = 1 0000 -> 0001.
    assert_eq!(csum16(&[0xFF, 0xFF, 0x00, 0x01]), !0x0001);
}

#[test]
fn csum16_with_payload_covers_a_udp_datagram() {
    // A UDP datagram checksummed the v1model way: pseudo-header fields and the UDP header
    // fields (checksum left out), then the payload, an odd number of bytes.
    let payload = b"hello";
    let udp_len = 8 + payload.len() as u128;
    let mut b = BitBuf::new();
    b.push(0xC0A8_0001, 32);
    b.push(0xC0A8_00C7, 32);
    b.push(0, 8);
    b.push(17, 8);
    b.push(udp_len, 16);
    b.push(1234, 16);
    b.push(5678, 16);
    b.push(udp_len, 16);
    b.push_payload(payload);
    let sum = csum16(b.as_bytes());
    // The receiver's check: everything, the checksum included, sums to zero.
    let mut full = b.as_bytes()[..b.as_bytes().len() - payload.len()].to_vec();
    full.extend_from_slice(&sum.to_be_bytes());
    full.extend_from_slice(payload);
    assert_eq!(csum16(&full), 0);
}

#[test]
fn xor16_xors_big_endian_words() {
    assert_eq!(xor16(&[0x12, 0x34, 0x56, 0x78]), 0x1234 ^ 0x5678);
    assert_eq!(xor16(&[0x12, 0x34, 0x56]), 0x1234 ^ 0x5600);
    assert_eq!(xor16(&[]), 0);
}

#[test]
fn identity_keeps_the_leading_eight_bytes() {
    assert_eq!(identity(&[0x12, 0x34]), 0x1234);
    assert_eq!(identity(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]), 0x0102_0304_0506_0708);
    assert_eq!(identity(&[]), 0);
    // A lone bit<12> is padded at the end, so identity gives it shifted left by 4.
    assert_eq!(identity(&bytes(&[(0xABC, 12)])), 0xABC0);
}

#[test]
fn random_draws_from_the_callers_source() {
    let calc = Calculation::new(HashAlgorithm::Random);
    let mut next = 41u64;
    let mut rng = || {
        next += 1;
        next
    };
    assert_eq!(calc.compute(b"ignored", &mut rng), 42);
    assert_eq!(calc.hash(b"", 100, 10, 16, &mut rng), 103);
}

#[test]
fn algorithm_names_are_v1models() {
    for a in HashAlgorithm::ALL {
        assert_eq!(HashAlgorithm::from_name(a.name()), Some(a));
        assert_eq!(a.to_string(), a.name());
    }
    assert_eq!(HashAlgorithm::from_name("crc16"), Some(HashAlgorithm::Crc16));
    assert_eq!(HashAlgorithm::from_name("xxh64"), None);
    assert_eq!(HashAlgorithm::Crc32Custom.custom_crc_width(), Some(CrcWidth::W32));
    assert_eq!(HashAlgorithm::Xor16.custom_crc_width(), None);
}

// ---- hash() ----

#[test]
fn hash_is_base_plus_value_mod_max_cut_to_the_width() {
    assert_eq!(hash_result(0xBB3D, 0, 1024, 16), 0xBB3D % 1024);
    assert_eq!(hash_result(0xBB3D, 5, 10, 16), 5 + 0xBB3D % 10);
    // max 0 is taken as 1: the result is base.
    assert_eq!(hash_result(0xBB3D, 7, 0, 16), 7);
    // The sum wraps in 64 bits, then the destination keeps its low bits.
    assert_eq!(hash_result(3, u64::MAX, 10, 64), 2);
    assert_eq!(hash_result(0x1_2345, 0x10_0000, 0x10_0000, 16), 0x2345);
    assert_eq!(hash_result(0xFFFF_FFFF, 0, u64::MAX, 8), 0xFF);
    assert_eq!(truncate(0x1FF, 8), 0xFF);
    assert_eq!(truncate(u64::MAX, 64), u64::MAX);
    assert_eq!(truncate(u64::MAX, 0), 0);
}

#[test]
fn hash_over_a_five_tuple() {
    // hash(meta.h, HashAlgorithm.crc16, (bit<16>)0, {src, dst, proto, sport, dport}, 32w64)
    let mut b = BitBuf::new();
    b.push(0x0A00_0001, 32);
    b.push(0x0A00_0002, 32);
    b.push(6, 8);
    b.push(1234, 16);
    b.push(80, 16);
    let data = b.as_bytes();
    assert_eq!(data, [10, 0, 0, 1, 10, 0, 0, 2, 6, 0x04, 0xD2, 0x00, 0x50]);
    for alg in [HashAlgorithm::Crc16, HashAlgorithm::Crc32, HashAlgorithm::Csum16] {
        let calc = Calculation::new(alg);
        let h = calc.compute(data, &mut no_rng());
        assert_eq!(calc.hash(data, 0, 64, 16, &mut no_rng()), h % 64);
        assert_eq!(calc.hash(data, 100, 64, 16, &mut no_rng()), 100 + h % 64);
    }
    assert_eq!(
        Calculation::new(HashAlgorithm::Crc32).compute(data, &mut no_rng()),
        u64::from(crc32(data))
    );
    assert_eq!(
        Calculation::new(HashAlgorithm::Identity).compute(data, &mut no_rng()),
        0x0A00_0001_0A00_0002
    );
    assert_eq!(
        Calculation::new(HashAlgorithm::Xor16).compute(data, &mut no_rng()),
        u64::from(0x0A00 ^ 0x0001 ^ 0x0A00 ^ 0x0002 ^ 0x0604 ^ 0xD200 ^ 0x5000u16)
    );
}

// ---- meters ----

const US: u64 = 1000;

fn packets_meter(cir: f64, cbs: u64, pir: f64, pbs: u64) -> Meter {
    let mut m = Meter::new(MeterKind::Packets);
    m.set_rates(MeterRate::new(cir, cbs), MeterRate::new(pir, pbs)).unwrap();
    m
}

/// Sends `n` packets `gap_ns` apart starting at `start_ns`; counts (green, yellow, red).
fn stream(m: &mut Meter, start_ns: u64, gap_ns: u64, n: u64, len: u64) -> [u64; 3] {
    let mut counts = [0; 3];
    for i in 0..n {
        counts[m.execute(start_ns + i * gap_ns, len).value() as usize] += 1;
    }
    counts
}

#[test]
fn an_unconfigured_meter_is_green() {
    let mut m = Meter::new(MeterKind::Bytes);
    assert_eq!(m.rates(), None);
    for t in 0..10 {
        assert_eq!(m.execute(t, 1_000_000), MeterColor::Green);
    }
    assert_eq!(MeterColor::Green.value(), 0);
    assert_eq!(MeterColor::Yellow.value(), 1);
    assert_eq!(MeterColor::Red.value(), 2);
}

#[test]
fn below_the_committed_rate_everything_is_green() {
    // CIR 1000 packets/s, PIR 2000 packets/s; a stream of 500 packets/s.
    let mut m = packets_meter(0.001, 5, 0.002, 5);
    assert_eq!(stream(&mut m, 0, 2000 * US, 1000, 0), [1000, 0, 0]);
}

#[test]
fn between_the_rates_the_excess_is_yellow() {
    // 1500 packets/s for 10 s against CIR 1000/s (CBS 10) and PIR 2000/s: none red, and the
    // greens are what the committed bucket can give in that time (its burst plus its rate).
    let mut m = packets_meter(0.001, 10, 0.002, 10);
    let gap = 2_000_000 / 3; // ns
    let n = 15_000;
    let [g, y, r] = stream(&mut m, 0, gap, n, 0);
    assert_eq!(r, 0);
    let span_us = (n - 1) * gap / 1000;
    let earned = span_us / 1000; // tokens at 0.001 per µs
    assert!(g <= earned + 10 && g + 2 >= earned, "green {g}, earned {earned}");
    assert_eq!(g + y, n);
}

#[test]
fn above_the_peak_rate_the_excess_is_red() {
    // 4000 packets/s against CIR 1000/s and PIR 2000/s: about a quarter green, a quarter
    // yellow, half red.
    let mut m = packets_meter(0.001, 10, 0.002, 10);
    let n = 40_000;
    let [g, y, r] = stream(&mut m, 0, 250 * US, n, 0);
    let secs = 10;
    assert!(g <= 1000 * secs + 10 && g + 2 >= 1000 * secs, "green {g}");
    assert!(g + y <= 2000 * secs + 10 && g + y + 2 >= 2000 * secs, "green+yellow {}", g + y);
    assert_eq!(g + y + r, n);
}

#[test]
fn a_burst_drains_the_committed_bucket_then_the_peak_bucket() {
    // All at once: CBS greens, then PBS - CBS yellows, then reds.
    let mut m = packets_meter(0.001, 10, 0.002, 12);
    let colours: Vec<_> = (0..15).map(|_| m.execute(5 * US, 0)).collect();
    let mut want = vec![MeterColor::Green; 10];
    want.extend([MeterColor::Yellow; 2]);
    want.extend([MeterColor::Red; 3]);
    assert_eq!(colours, want);
    // A red takes no token: one committed token later (1000 µs), one more green.
    assert_eq!(m.execute(1005 * US, 0), MeterColor::Green);
    assert_eq!(m.execute(1005 * US, 0), MeterColor::Yellow);
    assert_eq!(m.execute(1005 * US, 0), MeterColor::Red);
    // After a long silence both buckets are full again, and no fuller than their bursts.
    let colours: Vec<_> = (0..15).map(|_| m.execute(1_000_000 * US, 0)).collect();
    assert_eq!(colours, want);
}

#[test]
fn tokens_are_counted_from_the_origin_in_whole_microseconds() {
    // CIR 0.5/µs, PIR 1/µs, one-token buckets.
    let mut m = packets_meter(0.5, 1, 1.0, 1);
    assert_eq!(m.execute(0, 0), MeterColor::Green);
    // 1 µs: the peak bucket has earned 1, the committed floor(0.5) = 0.
    assert_eq!(m.execute(1000, 0), MeterColor::Yellow);
    // 1.999 µs is still 1 µs: nothing new.
    assert_eq!(m.execute(1999, 0), MeterColor::Red);
    // 2 µs: one more peak token, and the committed bucket's first (floor(1.0)).
    assert_eq!(m.execute(2000, 0), MeterColor::Green);
    // 3 µs: peak +1, committed floor(1.5) = 1, nothing new.
    assert_eq!(m.execute(3000, 0), MeterColor::Yellow);
    // 4 µs: floor(2.0) = 2, one new committed token.
    assert_eq!(m.execute(4000, 0), MeterColor::Green);
}

#[test]
fn the_origin_sets_where_microseconds_start() {
    let mut m = Meter::with_origin(MeterKind::Packets, 500);
    m.set_rates(MeterRate::new(0.5, 1), MeterRate::new(1.0, 1)).unwrap();
    assert_eq!(m.execute(500, 0), MeterColor::Green);
    // 1400 ns on the clock is 0.9 µs after the origin: nothing earned yet.
    assert_eq!(m.execute(1400, 0), MeterColor::Red);
    assert_eq!(m.execute(1500, 0), MeterColor::Yellow);
    m.reset_time_origin(10_000);
    // Before the origin counts as the origin; the buckets have no new tokens.
    assert_eq!(m.execute(0, 0), MeterColor::Red);
}

#[test]
fn a_bytes_meter_takes_the_packet_length() {
    // CIR 100 B/µs with a 1500 B bucket, PIR 200 B/µs with a 3000 B bucket.
    let mut m = Meter::new(MeterKind::Bytes);
    m.set_rates(MeterRate::new(100.0, 1500), MeterRate::new(200.0, 3000)).unwrap();
    assert_eq!(m.kind(), MeterKind::Bytes);
    assert_eq!(m.execute(0, 1000), MeterColor::Green); // committed 500 left, peak 2000
    assert_eq!(m.execute(0, 1000), MeterColor::Yellow); // peak 1000 left
    assert_eq!(m.execute(0, 1001), MeterColor::Red);
    assert_eq!(m.execute(0, 500), MeterColor::Green); // peak 500, committed 0
    // Bigger than the peak bucket: red however long the meter rested.
    assert_eq!(m.execute(1_000_000 * US, 3001), MeterColor::Red);
    assert_eq!(m.execute(1_000_000 * US, 3000), MeterColor::Yellow);
}

#[test]
fn rates_are_checked_and_read_back() {
    let mut m = Meter::new(MeterKind::Packets);
    assert_eq!(
        m.set_rates(MeterRate::new(2.0, 1), MeterRate::new(1.0, 1)),
        Err(MeterError::CommittedAbovePeak)
    );
    assert_eq!(
        m.set_rates(MeterRate::new(-1.0, 1), MeterRate::new(1.0, 1)),
        Err(MeterError::InvalidRate)
    );
    assert_eq!(
        m.set_rates(MeterRate::new(0.0, 1), MeterRate::new(f64::NAN, 1)),
        Err(MeterError::InvalidRate)
    );
    assert_eq!(m.rates(), None);
    // Equal rates are allowed.
    m.set_rates(MeterRate::new(1.0, 3), MeterRate::new(1.0, 4)).unwrap();
    assert_eq!(m.rates(), Some((MeterRate::new(1.0, 3), MeterRate::new(1.0, 4))));
    // A refused reconfiguration leaves the old one.
    assert!(m.set_rates(MeterRate::new(2.0, 1), MeterRate::new(1.0, 1)).is_err());
    assert_eq!(m.rates(), Some((MeterRate::new(1.0, 3), MeterRate::new(1.0, 4))));
    m.reset_rates();
    assert_eq!(m.rates(), None);
    assert_eq!(m.execute(0, 0), MeterColor::Green);
}

#[test]
fn setting_rates_refills_both_buckets() {
    let mut m = packets_meter(0.0, 2, 0.0, 3);
    let drain: Vec<_> = (0..4).map(|_| m.execute(0, 0)).collect();
    assert_eq!(drain, [MeterColor::Green, MeterColor::Green, MeterColor::Yellow, MeterColor::Red]);
    // Zero rates never refill.
    assert_eq!(m.execute(1_000_000 * US, 0), MeterColor::Red);
    m.set_rates(MeterRate::new(0.0, 2), MeterRate::new(0.0, 3)).unwrap();
    assert_eq!(m.execute(1_000_000 * US, 0), MeterColor::Green);
}
