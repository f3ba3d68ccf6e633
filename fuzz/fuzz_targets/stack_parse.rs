//! Fuzz target `stack_parse`: walk arbitrary bytes as an Ethernet frame with `stack::parse`,
//! check what it recorded is consistent, verify (and re-fill) the RoCE ICRC, and re-emit every
//! parsed tunnel and RoCE `Repr`, asserting that parsing the emitted bytes gives the same `Repr`.
//! Any panic (including a failed assertion) is a bug.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_wire::roce::{RocePacket, bth, ext, icrc};
use snic_wire::stack::{self, Layer};
use snic_wire::{geneve, gre, vxlan};

/// Parse a fixed-size RoCE header `Repr` at `at`, emit it into a scratch buffer, parse it back.
macro_rules! round_trip {
    ($frame:expr, $at:expr, $($view:ident)::+, $repr:ty, $len:expr) => {{
        let bytes = &$frame[$at..];
        let r = <$repr>::parse(&$($view)::+::new_checked(bytes).expect("stack checked the length"))
            .expect("stack accepted this header");
        let mut out = [0u8; $len];
        r.emit(&mut $($view)::+::new_unchecked(&mut out[..])).expect("emit of a parsed repr");
        let again = <$repr>::parse(&$($view)::+::new_checked(&out[..]).unwrap()).unwrap();
        assert_eq!(r, again);
    }};
}

fuzz_target!(|data: &[u8]| {
    let s = stack::parse(data);

    // Consistency: increasing offsets inside the frame; the payload offset inside the frame.
    let mut prev: Option<u16> = None;
    for l in s.layers() {
        assert!(usize::from(l.offset) < data.len());
        if let Some(p) = prev {
            assert!(l.offset > p);
        }
        prev = Some(l.offset);
    }
    assert!(usize::from(s.payload) <= data.len());

    // Re-emit every tunnel and RoCE header that parsed.
    for l in s.layers() {
        let at = usize::from(l.offset);
        match l.layer {
            Layer::Vxlan => {
                let p = vxlan::Packet::new_checked(&data[at..]).unwrap();
                let r = vxlan::Repr::parse(&p).unwrap();
                let mut out = [0u8; vxlan::HEADER_LEN];
                r.emit(&mut vxlan::Packet::new_unchecked(&mut out[..])).unwrap();
                assert_eq!(
                    vxlan::Repr::parse(&vxlan::Packet::new_checked(&out[..]).unwrap()),
                    Ok(r)
                );
            }
            Layer::Geneve => {
                let p = geneve::Packet::new_checked(&data[at..]).unwrap();
                let r = geneve::Repr::parse(&p).unwrap();
                let mut out = [0u8; geneve::MAX_HEADER_LEN];
                let out = &mut out[..r.buffer_len()];
                r.emit(&mut geneve::Packet::new_unchecked(&mut out[..])).unwrap();
                let p2 = geneve::Packet::new_checked(&out[..]).unwrap();
                assert_eq!(geneve::Repr::parse(&p2), Ok(r));
            }
            Layer::Nvgre | Layer::Gre => {
                let p = gre::Packet::new_checked(&data[at..]).unwrap();
                let r = gre::Repr::parse(&p).unwrap();
                let mut out = [0u8; gre::MAX_HEADER_LEN];
                let out = &mut out[..r.buffer_len()];
                let mut w = gre::Packet::new_unchecked(&mut out[..]);
                r.emit(&mut w).unwrap();
                w.fill_checksum();
                let p2 = gre::Packet::new_checked(&out[..]).unwrap();
                assert!(p2.verify_checksum());
                let mut again = gre::Repr::parse(&p2).unwrap();
                again.checksum = r.checksum;
                assert_eq!(again, r);
                if l.layer == Layer::Nvgre {
                    let nv = gre::NvgreRepr::parse(&p).unwrap();
                    assert_eq!(Some(nv.vsid), s.vni);
                }
            }
            Layer::Bth => round_trip!(data, at, bth::Header, bth::Repr, bth::HEADER_LEN),
            Layer::Reth => round_trip!(data, at, ext::Reth, ext::RethRepr, ext::RETH_LEN),
            Layer::Aeth => round_trip!(data, at, ext::Aeth, ext::AethRepr, ext::AETH_LEN),
            Layer::AtomicEth => {
                round_trip!(data, at, ext::AtomicEth, ext::AtomicEthRepr, ext::ATOMIC_ETH_LEN)
            }
            Layer::AtomicAckEth => round_trip!(
                data,
                at,
                ext::AtomicAckEth,
                ext::AtomicAckEthRepr,
                ext::ATOMIC_ACK_ETH_LEN
            ),
            Layer::ImmDt => {
                round_trip!(data, at, ext::ImmDt, ext::ImmDtRepr, ext::IMMDT_LEN)
            }
            Layer::Ieth => round_trip!(data, at, ext::Ieth, ext::IethRepr, ext::IETH_LEN),
            Layer::Deth => round_trip!(data, at, ext::Deth, ext::DethRepr, ext::DETH_LEN),
            _ => {}
        }
    }

    // A complete RoCE packet: the walker agrees, and the ICRC verifies once filled.
    if let (Some(b), true) = (s.bth, s.is_ok()) {
        let udp_at = s.innermost().l4.map(|(_, off)| usize::from(off));
        let udp_len = udp_at.and_then(|u| data.get(u + 4..u + 6));
        if let (Some(u), Some(len)) = (udp_at, udp_len) {
            let udp_end = u + usize::from(u16::from_be_bytes([len[0], len[1]]));
            let p = RocePacket::parse(&data[usize::from(b)..udp_end]).expect("stack accepted it");
            assert!(p.header_len() + p.payload().len() + 4 <= udp_end - usize::from(b));
        }
        if let Some(Err(_)) = s.verify_icrc(data) {
            // Fill the ICRC into a copy: then it must verify.
            let mut copy = data.to_vec();
            let l3 = usize::from(s.innermost().l3.expect("verify_icrc needs an IP header").1);
            if icrc::fill(&mut copy[l3..]).is_ok() {
                assert_eq!(s.verify_icrc(&copy), Some(Ok(())));
            }
        }
    }
});
