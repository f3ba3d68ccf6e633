//! Property tests of the engine's packet layer and PSN arithmetic:
//! - `pkt::build` then `pkt::parse` gives back the addresses, ports, ECN mark, headers and
//!   payload (and the IPv6 UDP checksum verifies), for every opcode the table has (but RC ATOMIC WRITE, which `build` refuses), over
//!   IPv4 and IPv6;
//! - `pkt::parse` never panics, on arbitrary bytes and on valid packets with arbitrary tails;
//! - any single-byte change of the RoCE part (BTH to ICRC) of a valid packet is refused;
//! - `psn::add` / `psn::diff` / `psn::before` behave as 24-bit circle arithmetic.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use snic_rdma::pkt::{self, Path, RxError};
use snic_rdma::psn;
use snic_wire::roce::ext::*;
use snic_wire::roce::opcode::{self, ExtHeader};
use snic_wire::roce::{RoceRepr, UDP_PORT, bth};

fn u24() -> impl Strategy<Value = u32> {
    0u32..=psn::MASK
}

/// Opcodes `pkt::build` accepts: all of the table but the fixed-payload RC ATOMIC WRITE.
fn buildable_opcode() -> impl Strategy<Value = u8> {
    let codes: Vec<u8> = opcode::ALL
        .iter()
        .filter(|i| i.fixed_payload_len().is_none_or(|n| n == 0))
        .map(|i| i.code)
        .collect();
    proptest::sample::select(codes)
}

prop_compose! {
    fn bth_repr()(opcode in buildable_opcode(), solicited: bool, mig_req: bool, pkey: u16,
                  fecn: bool, becn: bool, dest_qp in u24(), ack_req: bool, psn in u24())
                  -> bth::Repr {
        bth::Repr { opcode, solicited, mig_req, pad_count: 0, pkey, fecn, becn, dest_qp, ack_req,
                    psn }
    }
}

fn syndrome() -> impl Strategy<Value = Syndrome> {
    prop_oneof![
        (0u8..32).prop_map(|credits| Syndrome::Ack { credits }),
        (0u8..32).prop_map(|timer| Syndrome::RnrNak { timer }),
        (0u8..5).prop_map(|c| Syndrome::Nak(NakCode::from_code(c).unwrap())),
    ]
}

prop_compose! {
    /// A path of one IP family, with arbitrary addresses, ports and marks.
    fn path()(v6: bool, a: u128, b: u128, sport: u16, dscp in 0u8..64, ecn in 0u8..4) -> Path {
        let (src, dst) = if v6 {
            (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b)))
        } else {
            (IpAddr::V4(Ipv4Addr::from(a as u32)), IpAddr::V4(Ipv4Addr::from(b as u32)))
        };
        Path { src, dst, sport, dport: UDP_PORT, dscp, ecn }
    }
}

prop_compose! {
    /// Headers for `bth.opcode` (exactly the extension headers it carries), and a payload
    /// (empty for opcodes without one).
    fn packet()(bth in bth_repr(), aeth_syn in syndrome(), msn in u24(), va: u64, rkey: u32,
                data: u64, imm: u32, qkey: u32, src_qp in u24(),
                payload in proptest::collection::vec(any::<u8>(), 0..300))
                -> (RoceRepr, Vec<u8>) {
        let info = opcode::lookup(bth.opcode).unwrap();
        let has = |e: ExtHeader| info.ext.contains(&e);
        let r = RoceRepr {
            bth,
            reth: has(ExtHeader::Reth).then_some(RethRepr { va, rkey, dma_len: data as u32 }),
            aeth: has(ExtHeader::Aeth).then_some(AethRepr { syndrome: aeth_syn, msn }),
            atomic_eth: has(ExtHeader::AtomicEth)
                .then_some(AtomicEthRepr { va, rkey, swap_add: data, compare: !data }),
            atomic_ack_eth: has(ExtHeader::AtomicAckEth)
                .then_some(AtomicAckEthRepr { orig_data: data }),
            imm_dt: has(ExtHeader::ImmDt).then_some(ImmDtRepr { imm }),
            ieth: has(ExtHeader::Ieth).then_some(IethRepr { rkey }),
            deth: has(ExtHeader::Deth).then_some(DethRepr { qkey, src_qp }),
            feth: has(ExtHeader::Feth).then_some(FethRepr {
                placement_type: imm as u8 & 0xf,
                selectivity_level: (imm >> 4) as u8 & 3,
            }),
        };
        let payload = if info.payload { payload } else { Vec::new() };
        (r, payload)
    }
}

/// Build one packet; panics on a build error (the strategies only make valid inputs).
fn build(path: &Path, r: &RoceRepr, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; pkt::MAX_PACKET_LEN];
    let n = pkt::build(&mut buf, path, r, payload.len(), |b: &mut [u8]| -> Result<(), ()> {
        b.copy_from_slice(payload);
        Ok(())
    })
    .expect("build");
    buf.truncate(n);
    buf
}

proptest! {
    #[test]
    fn build_then_parse_round_trips(p in path(), (r, payload) in packet()) {
        let bytes = build(&p, &r, &payload);
        prop_assert_eq!(Some(bytes.len()), pkt::packet_len(&p, &r, payload.len()));
        let rx = pkt::parse(&bytes, UDP_PORT).expect("a built packet parses");
        prop_assert_eq!(rx.src, p.src);
        prop_assert_eq!(rx.dst, p.dst);
        prop_assert_eq!(rx.sport, p.sport);
        prop_assert_eq!(rx.ce, p.ecn == pkt::ECN_CE);
        let pad = snic_wire::roce::packet::pad_for(payload.len()) as u8;
        let want = RoceRepr { bth: bth::Repr { pad_count: pad, ..r.bth }, ..r };
        prop_assert_eq!(rx.roce.repr(), want);
        prop_assert_eq!(rx.payload(), &payload[..]);
        // The IP header carries the marks asked for.
        let (dscp, ecn) = match p.src {
            IpAddr::V4(_) => (bytes[1] >> 2, bytes[1] & 3),
            IpAddr::V6(_) => {
                let tc = (bytes[0] << 4) | (bytes[1] >> 4);
                (tc >> 2, tc & 3)
            }
        };
        prop_assert_eq!((dscp, ecn), (p.dscp, p.ecn));
        // The UDP checksum (IPv6 must have one; IPv4 sends 0) covers the finished datagram.
        let l3 = pkt::l3l4_len(p.src.is_ipv6()) - 8;
        let udp = snic_wire::udp::Packet::new_checked(&bytes[l3..]).unwrap();
        if p.src.is_ipv6() {
            prop_assert!(udp.verify_checksum(&p.src, &p.dst), "IPv6 UDP checksum");
        } else {
            prop_assert_eq!(udp.checksum(), 0);
        }
        // Another listening port refuses it.
        prop_assert_eq!(pkt::parse(&bytes, UDP_PORT ^ 1).unwrap_err(), RxError::NotRoce);
    }

    #[test]
    fn parse_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = pkt::parse(&bytes, UDP_PORT);
    }

    /// A valid packet's first `keep` bytes, then arbitrary bytes: deeper than random bytes get.
    #[test]
    fn parse_never_panics_on_mangled_packets(p in path(), (r, payload) in packet(),
                                             keep in 0usize..400,
                                             tail in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut bytes = build(&p, &r, &payload);
        bytes.truncate(keep);
        bytes.extend_from_slice(&tail);
        let _ = pkt::parse(&bytes, UDP_PORT);
    }

    /// Every byte of the RoCE part is covered by the ICRC, except BTH byte 4 (FECN, BECN and
    /// the reserved bits), which the ICRC masks as switches may set FECN/BECN in flight.
    #[test]
    fn any_single_byte_change_of_the_roce_part_is_refused(p in path(), (r, payload) in packet(),
                                                           at: prop::sample::Index,
                                                           flip in 1u8..=255) {
        let bytes = build(&p, &r, &payload);
        let start = pkt::l3l4_len(p.src.is_ipv6());
        let mut i = start + at.index(bytes.len() - start);
        if i == start + 4 {
            i += 1;
        }
        let mut bad = bytes.clone();
        bad[i] ^= flip;
        prop_assert_eq!(pkt::parse(&bad, UDP_PORT).err(), Some(RxError::BadIcrc),
                        "byte {} of {} changed", i, bytes.len());
    }

    /// The masked BTH byte may change without breaking the packet (what the ICRC promises).
    #[test]
    fn the_masked_bth_byte_may_change(p in path(), (r, payload) in packet(), v: u8) {
        let mut bytes = build(&p, &r, &payload);
        let at = pkt::l3l4_len(p.src.is_ipv6()) + 4;
        bytes[at] = v;
        prop_assert!(pkt::parse(&bytes, UDP_PORT).is_ok());
    }

    #[test]
    fn psn_add_stays_in_24_bits_and_composes(a in u24(), n: u32, m: u32) {
        prop_assert!(psn::add(a, n) <= psn::MASK);
        prop_assert_eq!(psn::add(psn::add(a, n), m), psn::add(a, n.wrapping_add(m)));
        prop_assert_eq!(psn::add(a, 0), a);
        prop_assert_eq!(psn::add(a, 1 << 24), a);
    }

    #[test]
    fn psn_diff_inverts_add(a in u24(), n in 0u32..(1 << 23)) {
        let b = psn::add(a, n);
        prop_assert_eq!(psn::diff(b, a), n as i32);
        prop_assert_eq!(psn::diff(a, b), -(n as i32));
        prop_assert_eq!(psn::before(a, b), n != 0);
        prop_assert!(!psn::before(b, a));
        // Half a circle ahead counts as behind (the window is -2^23..2^23).
        prop_assert_eq!(psn::diff(psn::add(a, 1 << 23), a), -(1 << 23));
    }

    #[test]
    fn psn_diff_is_antisymmetric_and_bounded(a in u24(), b in u24()) {
        let d = psn::diff(a, b);
        prop_assert!((-(1 << 23)..(1 << 23)).contains(&d));
        prop_assert_eq!(psn::add(b, d as u32), a);
        if d != -(1 << 23) {
            prop_assert_eq!(psn::diff(b, a), -d);
        }
        prop_assert_eq!(psn::before(a, b), d < 0);
    }
}
