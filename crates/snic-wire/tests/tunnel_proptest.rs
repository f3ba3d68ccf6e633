//! Property tests for the tunnel headers: emit then parse gives back the same `Repr` for VXLAN,
//! GRE (every flag combination), NVGRE and Geneve (with generated option TLVs); GRE checksums
//! filled by `fill_checksum` verify; no input makes the views panic.

use proptest::prelude::*;
use snic_wire::{geneve, gre, vxlan};

fn u24() -> impl Strategy<Value = u32> {
    0u32..=0x00ff_ffff
}

prop_compose! {
    fn gre_repr()(protocol: u16, checksum: bool, key: Option<u32>, seq_number: Option<u32>)
                 -> gre::Repr {
        gre::Repr { protocol, checksum, key, seq_number }
    }
}

/// Geneve option TLVs: (class, type, data words 0..=31, low reserved bits), serialised.
fn geneve_options() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec((any::<u16>(), any::<u8>(), 0usize..6, 0u8..8, any::<u8>()), 0..6)
        .prop_map(|opts| {
            let mut out = Vec::new();
            for (class, typ, words, rsvd, fill) in opts {
                if out.len() + 4 + 4 * words > 252 {
                    break;
                }
                out.extend_from_slice(&class.to_be_bytes());
                out.push(typ);
                out.push((rsvd << 5) | words as u8);
                out.extend(std::iter::repeat_n(fill, 4 * words));
            }
            out
        })
}

proptest! {
    #[test]
    fn vxlan_round_trip(vni in u24(), tail in proptest::collection::vec(any::<u8>(), 0..16)) {
        let r = vxlan::Repr { vni };
        let mut b = vec![0u8; r.buffer_len() + tail.len()];
        b[vxlan::HEADER_LEN..].copy_from_slice(&tail);
        r.emit(&mut vxlan::Packet::new_unchecked(&mut b[..])).unwrap();
        let p = vxlan::Packet::new_checked(&b[..]).unwrap();
        prop_assert_eq!(vxlan::Repr::parse(&p), Ok(r));
        prop_assert_eq!(p.payload(), &tail[..]);
    }

    #[test]
    fn gre_round_trip(r in gre_repr(), payload in proptest::collection::vec(any::<u8>(), 0..32)) {
        let mut b = vec![0u8; r.buffer_len() + payload.len()];
        b[r.buffer_len()..].copy_from_slice(&payload);
        let mut p = gre::Packet::new_unchecked(&mut b[..]);
        r.emit(&mut p).unwrap();
        p.fill_checksum();
        let p = gre::Packet::new_checked(&b[..]).unwrap();
        prop_assert_eq!(p.header_len(), r.buffer_len());
        prop_assert_eq!(gre::Repr::parse(&p), Ok(r));
        prop_assert!(p.verify_checksum());
        prop_assert_eq!(p.payload(), &payload[..]);
    }

    #[test]
    fn nvgre_round_trip(vsid in u24(), flow_id: u8) {
        let r = gre::NvgreRepr { vsid, flow_id };
        let mut b = [0u8; gre::NVGRE_HEADER_LEN];
        r.emit(&mut gre::Packet::new_unchecked(&mut b[..])).unwrap();
        let p = gre::Packet::new_checked(&b[..]).unwrap();
        prop_assert_eq!(gre::NvgreRepr::parse(&p), Ok(r));
        prop_assert_eq!(p.protocol(), gre::PROTO_TEB);
    }

    #[test]
    fn geneve_round_trip(oam: bool, critical: bool, protocol: u16, vni in u24(),
                         options in geneve_options()) {
        let r = geneve::Repr { oam, critical, protocol, vni, options: &options };
        let mut b = vec![0u8; r.buffer_len() + 3];
        r.emit(&mut geneve::Packet::new_unchecked(&mut b[..])).unwrap();
        let p = geneve::Packet::new_checked(&b[..]).unwrap();
        prop_assert_eq!(p.header_len(), 8 + options.len());
        prop_assert_eq!(geneve::Repr::parse(&p), Ok(r));
        // The iterator yields every TLV and their sizes add up to the option area.
        let total: usize = p.options().map(|o| 4 + o.unwrap().data.len()).sum();
        prop_assert_eq!(total, options.len());
    }

    #[test]
    fn no_panic_on_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(p) = vxlan::Packet::new_checked(&bytes[..]) {
            let _ = vxlan::Repr::parse(&p);
            let _ = p.payload();
        }
        if let Ok(p) = gre::Packet::new_checked(&bytes[..]) {
            let _ = gre::Repr::parse(&p);
            let _ = gre::NvgreRepr::parse(&p);
            let _ = (p.key(), p.seq_number(), p.checksum(), p.verify_checksum(), p.payload());
        }
        if let Ok(p) = geneve::Packet::new_checked(&bytes[..]) {
            let _ = geneve::Repr::parse(&p);
            for o in p.options() {
                let _ = o;
            }
            let _ = p.payload();
        }
        for o in geneve::Options::new(&bytes) {
            let _ = o;
        }
    }
}
