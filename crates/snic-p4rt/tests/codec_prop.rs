//! Property tests of the P4Runtime byte-string codec and the controller-header packing.

use proptest::prelude::*;
use snic_p4rt::schema::{decode, encode, pack, unpack};
use snic_p4rt::status::Code;

proptest! {
    /// Any value of a width encodes canonically and decodes back, with any leading zeros.
    #[test]
    fn encode_decode_round_trip(width in 1u32..=128, raw in any::<u128>(), pad in 0usize..4) {
        let v = if width == 128 { raw } else { raw & ((1u128 << width) - 1) };
        let e = encode(v);
        prop_assert!(!e.is_empty());
        prop_assert!(e.len() == 1 || e[0] != 0, "canonical: no leading zero byte");
        let mut padded = vec![0u8; pad];
        padded.extend_from_slice(&e);
        prop_assert_eq!(decode(&padded, width, "x").unwrap(), v);
    }

    /// A value wider than its field is OUT_OF_RANGE, never truncated.
    #[test]
    fn too_wide_is_out_of_range(width in 1u32..127, extra in 0u32..8) {
        let v = 1u128 << (width + extra.min(127 - width));
        let err = decode(&encode(v), width, "x").unwrap_err();
        prop_assert_eq!(err.code, Code::OutOfRange);
    }

    /// Fields packed MSB first unpack to the same values, whatever their widths.
    #[test]
    fn pack_unpack_round_trip(fields in prop::collection::vec((1u32..=64, any::<u64>()), 1..8)) {
        let f: Vec<(u128, u32)> = fields
            .iter()
            .map(|(w, v)| (u128::from(*v) & ((1u128 << w) - 1), *w))
            .collect();
        let bytes = pack(&f);
        let widths: Vec<u32> = f.iter().map(|x| x.1).collect();
        prop_assert_eq!(bytes.len() as u32, widths.iter().sum::<u32>().div_ceil(8));
        let back = unpack(&bytes, &widths).unwrap();
        prop_assert_eq!(back, f.iter().map(|x| x.0).collect::<Vec<_>>());
        // One byte short: refused, not read past the end.
        if !bytes.is_empty() && widths.iter().sum::<u32>() % 8 == 0 {
            prop_assert!(unpack(&bytes[..bytes.len() - 1], &widths).is_none());
        }
    }
}
