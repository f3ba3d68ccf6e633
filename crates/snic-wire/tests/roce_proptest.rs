//! Property tests for the RoCEv2 headers: emit then parse gives back the same `Repr` for the
//! BTH, every extension header and the CNP; a packet assembled from an opcode's headers walks
//! back to the same headers and payload; `icrc::fill` then `icrc::verify` holds over IPv4 and
//! IPv6, masked fields do not change the ICRC and covered ones do; no input makes the walker or
//! the ICRC code panic.

use proptest::prelude::*;
use snic_wire::Error;
use snic_wire::roce::ext::*;
use snic_wire::roce::opcode::{self, ExtHeader};
use snic_wire::roce::{RocePacket, RoceRepr, bth, cnp, icrc};

fn u24() -> impl Strategy<Value = u32> {
    0u32..=0x00ff_ffff
}

fn opcode_code() -> impl Strategy<Value = u8> {
    (0..opcode::ALL.len()).prop_map(|i| opcode::ALL[i].code)
}

prop_compose! {
    fn bth_repr()(opcode in opcode_code(), solicited: bool, mig_req: bool, pad_count in 0u8..4,
                  pkey: u16, fecn: bool, becn: bool, dest_qp in u24(), ack_req: bool, psn in u24())
                  -> bth::Repr {
        bth::Repr { opcode, solicited, mig_req, pad_count, pkey, fecn, becn, dest_qp, ack_req, psn }
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
    fn aeth_repr()(syndrome in syndrome(), msn in u24()) -> AethRepr {
        AethRepr { syndrome, msn }
    }
}

proptest! {
    #[test]
    fn bth_round_trip(r in bth_repr()) {
        let mut b = [0u8; bth::HEADER_LEN];
        r.emit(&mut bth::Header::new_unchecked(&mut b[..])).unwrap();
        prop_assert_eq!(bth::Repr::parse(&bth::Header::new_checked(&b[..]).unwrap()), Ok(r));
    }

    #[test]
    fn ext_round_trips(va: u64, rkey: u32, len: u32, swap: u64, cmp: u64, imm: u32, qkey: u32,
                       src_qp in u24(), aeth in aeth_repr()) {
        let r = RethRepr { va, rkey, dma_len: len };
        let mut b = [0u8; RETH_LEN];
        r.emit(&mut Reth::new_unchecked(&mut b[..])).unwrap();
        prop_assert_eq!(RethRepr::parse(&Reth::new_checked(&b[..]).unwrap()), Ok(r));

        let mut b = [0u8; AETH_LEN];
        aeth.emit(&mut Aeth::new_unchecked(&mut b[..])).unwrap();
        prop_assert_eq!(AethRepr::parse(&Aeth::new_checked(&b[..]).unwrap()), Ok(aeth));

        let r = AtomicEthRepr { va, rkey, swap_add: swap, compare: cmp };
        let mut b = [0u8; ATOMIC_ETH_LEN];
        r.emit(&mut AtomicEth::new_unchecked(&mut b[..])).unwrap();
        prop_assert_eq!(AtomicEthRepr::parse(&AtomicEth::new_checked(&b[..]).unwrap()), Ok(r));

        let r = AtomicAckEthRepr { orig_data: swap };
        let mut b = [0u8; ATOMIC_ACK_ETH_LEN];
        r.emit(&mut AtomicAckEth::new_unchecked(&mut b[..])).unwrap();
        prop_assert_eq!(AtomicAckEthRepr::parse(&AtomicAckEth::new_checked(&b[..]).unwrap()), Ok(r));

        let r = ImmDtRepr { imm };
        let mut b = [0u8; IMMDT_LEN];
        r.emit(&mut ImmDt::new_unchecked(&mut b[..])).unwrap();
        prop_assert_eq!(ImmDtRepr::parse(&ImmDt::new_checked(&b[..]).unwrap()), Ok(r));

        let r = IethRepr { rkey };
        let mut b = [0u8; IETH_LEN];
        r.emit(&mut Ieth::new_unchecked(&mut b[..])).unwrap();
        prop_assert_eq!(IethRepr::parse(&Ieth::new_checked(&b[..]).unwrap()), Ok(r));

        let r = DethRepr { qkey, src_qp };
        let mut b = [0u8; DETH_LEN];
        r.emit(&mut Deth::new_unchecked(&mut b[..])).unwrap();
        prop_assert_eq!(DethRepr::parse(&Deth::new_checked(&b[..]).unwrap()), Ok(r));
    }

    #[test]
    fn feth_round_trip(placement_type in 0u8..16, selectivity_level in 0u8..4, reserved: u32) {
        let r = FethRepr { placement_type, selectivity_level };
        let mut b = [0u8; FETH_LEN];
        r.emit(&mut Feth::new_unchecked(&mut b[..])).unwrap();
        prop_assert_eq!(u32::from_be_bytes(b) >> 6, 0);
        prop_assert_eq!(FethRepr::parse(&Feth::new_checked(&b[..]).unwrap()), Ok(r));
        // Reserved bits do not change what is read.
        let with_reserved = (u32::from_be_bytes(b) | (reserved << 6)).to_be_bytes();
        prop_assert_eq!(FethRepr::parse(&Feth::new_checked(&with_reserved[..]).unwrap()), Ok(r));
    }

    #[test]
    fn aeth_syndrome_byte_round_trip(b: u8) {
        // Every byte either decodes and re-encodes to itself, or is refused.
        match Syndrome::from_byte(b) {
            Ok(s) => prop_assert_eq!(s.to_byte(), Ok(b)),
            Err(e) => {
                let refused = matches!(e, Error::BadValue { .. });
                prop_assert!(refused);
            }
        }
    }

    #[test]
    fn cnp_round_trip(dest_qp in u24(), pkey: u16) {
        let r = cnp::Repr { dest_qp, pkey };
        let mut b = [0xa5u8; cnp::CNP_LEN + 4];
        r.emit(&mut b).unwrap();
        prop_assert_eq!(cnp::Repr::parse(&b), Ok(r));
        let p = RocePacket::parse(&b).unwrap();
        prop_assert_eq!(p.info().name, "CNP");
        prop_assert!(p.payload().is_empty());
    }

    /// Assemble BTH + the opcode's extension headers + payload + pad + ICRC, then walk it.
    #[test]
    fn walker_round_trip(bth in bth_repr(), aeth in aeth_repr(), va: u64, rkey: u32, imm: u32,
                         qkey: u32, src_qp in u24(), data: u64,
                         payload in proptest::collection::vec(any::<u8>(), 0..64)) {
        let info = opcode::lookup(bth.opcode).unwrap();
        let word = data.to_be_bytes();
        let payload: &[u8] = match info.fixed_payload_len() {
            Some(0) => &[],
            Some(n) => &word[..n],
            None => &payload,
        };
        let pad = if info.payload { (4 - payload.len() % 4) % 4 } else { 0 };
        let bth = bth::Repr { pad_count: pad as u8, ..bth };
        let mut buf = [0u8; 160];
        bth.emit(&mut bth::Header::new_unchecked(&mut buf[..12])).unwrap();
        let mut off = 12;
        for e in info.ext {
            let h = &mut buf[off..off + e.header_len()];
            match e {
                ExtHeader::Reth => RethRepr { va, rkey, dma_len: payload.len() as u32 }
                    .emit(&mut Reth::new_unchecked(h)).unwrap(),
                ExtHeader::Aeth => aeth.emit(&mut Aeth::new_unchecked(h)).unwrap(),
                ExtHeader::AtomicEth => AtomicEthRepr { va, rkey, swap_add: data, compare: !data }
                    .emit(&mut AtomicEth::new_unchecked(h)).unwrap(),
                ExtHeader::AtomicAckEth => AtomicAckEthRepr { orig_data: data }
                    .emit(&mut AtomicAckEth::new_unchecked(h)).unwrap(),
                ExtHeader::ImmDt => ImmDtRepr { imm }.emit(&mut ImmDt::new_unchecked(h)).unwrap(),
                ExtHeader::Ieth => IethRepr { rkey }.emit(&mut Ieth::new_unchecked(h)).unwrap(),
                ExtHeader::Deth => DethRepr { qkey, src_qp }.emit(&mut Deth::new_unchecked(h)).unwrap(),
                ExtHeader::Feth => FethRepr { placement_type: imm as u8 & 0xf, selectivity_level: (imm >> 4) as u8 & 3 }
                    .emit(&mut Feth::new_unchecked(h)).unwrap(),
                ExtHeader::Cnp => h.fill(0),
            }
            off += e.header_len();
        }
        buf[off..off + payload.len()].copy_from_slice(payload);
        let total = off + payload.len() + pad + 4;
        let p = RocePacket::parse(&buf[..total]).unwrap();
        prop_assert_eq!(p.bth(), &bth);
        prop_assert_eq!(p.header_len(), off);
        prop_assert_eq!(p.payload(), payload);
        prop_assert_eq!(p.pad().len(), pad);
        let kinds: Vec<ExtHeader> = p.ext_headers().iter().map(|(e, _)| *e).collect();
        prop_assert_eq!(&kinds[..], info.ext);
        prop_assert_eq!(p.headers().aeth.is_some(), info.ext.contains(&ExtHeader::Aeth));
        if let Some(a) = p.headers().aeth { prop_assert_eq!(a, aeth); }
        if let Some(d) = p.headers().deth { prop_assert_eq!(d, DethRepr { qkey, src_qp }); }
        if let Some(i) = p.headers().imm_dt { prop_assert_eq!(i.imm, imm); }
        // Headers without room for the ICRC are always refused.
        prop_assert_eq!(
            RocePacket::parse(&buf[..off + 3]),
            Err(Error::Truncated { need: off + 4, got: off + 3 })
        );
    }

    /// RoceRepr::emit then RocePacket::parse gives back the same headers and payload.
    #[test]
    fn roce_repr_round_trip(bth in bth_repr(), aeth in aeth_repr(), va: u64, rkey: u32, imm: u32,
                            qkey: u32, src_qp in u24(), data: u64,
                            payload in proptest::collection::vec(any::<u8>(), 0..64)) {
        let info = opcode::lookup(bth.opcode).unwrap();
        let word = data.to_be_bytes();
        let payload: &[u8] = match info.fixed_payload_len() {
            Some(0) => &[],
            Some(n) => &word[..n],
            None => &payload,
        };
        let has = |e: ExtHeader| info.ext.contains(&e);
        let r = RoceRepr {
            bth,
            reth: has(ExtHeader::Reth).then_some(RethRepr { va, rkey, dma_len: data as u32 }),
            aeth: has(ExtHeader::Aeth).then_some(aeth),
            atomic_eth: has(ExtHeader::AtomicEth)
                .then_some(AtomicEthRepr { va, rkey, swap_add: data, compare: !data }),
            atomic_ack_eth: has(ExtHeader::AtomicAckEth).then_some(AtomicAckEthRepr { orig_data: data }),
            imm_dt: has(ExtHeader::ImmDt).then_some(ImmDtRepr { imm }),
            ieth: has(ExtHeader::Ieth).then_some(IethRepr { rkey }),
            deth: has(ExtHeader::Deth).then_some(DethRepr { qkey, src_qp }),
            feth: has(ExtHeader::Feth).then_some(FethRepr {
                placement_type: imm as u8 & 0xf,
                selectivity_level: (imm >> 4) as u8 & 3,
            }),
        };
        let mut buf = [0xa5u8; 160];
        let n = r.emit(&mut buf, payload).unwrap();
        prop_assert_eq!(Some(n), r.buffer_len(payload.len()));
        let p = RocePacket::parse(&buf[..n]).unwrap();
        let pad = (4 - payload.len() % 4) % 4;
        prop_assert_eq!(p.repr(), RoceRepr { bth: bth::Repr { pad_count: pad as u8, ..bth }, ..r });
        prop_assert_eq!(p.payload(), payload);
        prop_assert!(p.pad().iter().all(|&b| b == 0));
        prop_assert_eq!(p.icrc(), 0);
    }

    /// fill then verify, over IPv4 and IPv6; masked fields may change, covered ones may not.
    #[test]
    fn icrc_fill_verify(v6: bool, bth in bth_repr(), tos: u8, ttl: u8, fl in 0u32..0x10_0000,
                        body in proptest::collection::vec(any::<u8>(), 0..48),
                        flip in any::<prop::sample::Index>()) {
        let mut buf = [0u8; 160];
        let ip_len = if v6 { 40 } else { 20 };
        let udp_len = 8 + 12 + body.len() + 4;
        if v6 {
            buf[0] = 0x60 | (tos >> 4);
            buf[1] = (tos << 4) | (fl >> 16) as u8;
            buf[2] = (fl >> 8) as u8;
            buf[3] = fl as u8;
            buf[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            buf[6] = 17;
            buf[7] = ttl;
            buf[8..40].iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
        } else {
            buf[0] = 0x45;
            buf[1] = tos;
            buf[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
            buf[8] = ttl;
            buf[9] = 17;
            buf[12..20].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        }
        buf[ip_len + 2..ip_len + 4].copy_from_slice(&4791u16.to_be_bytes());
        buf[ip_len + 4..ip_len + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
        let bth_at = ip_len + 8;
        bth.emit(&mut bth::Header::new_unchecked(&mut buf[bth_at..bth_at + 12])).unwrap();
        buf[bth_at + 12..bth_at + 12 + body.len()].copy_from_slice(&body);
        let n = ip_len + udp_len;
        let pkt = &mut buf[..n];
        let crc = icrc::fill(pkt).unwrap();
        prop_assert_eq!(icrc::verify(pkt), Ok(()));
        prop_assert_eq!(icrc::read(pkt), Ok(crc));

        // Masked: TTL / hop limit, ECN, UDP checksum, FECN/BECN.
        let mut m = [0u8; 160];
        let m = &mut m[..n];
        m.copy_from_slice(pkt);
        if v6 { m[7] ^= 0xff; m[1] ^= 0x30; } else { m[8] ^= 0xff; m[1] ^= 0x03; m[10] ^= 1; }
        m[ip_len + 6] ^= 0xaa;
        m[bth_at + 4] ^= 0xc0;
        prop_assert_eq!(icrc::verify(m), Ok(()));

        // Covered: any BTH byte but byte 4, and anything after the BTH up to the ICRC.
        let covered: Vec<usize> = (bth_at..n - 4).filter(|&i| i != bth_at + 4).collect();
        let i = covered[flip.index(covered.len())];
        m.copy_from_slice(pkt);
        m[i] ^= 0x01;
        let got = icrc::verify(m);
        let carried_unchanged = matches!(got, Err(Error::BadIcrc { got, .. }) if got == crc);
        prop_assert!(carried_unchanged);
    }

    /// The split check (`begin`, `copy_to` in pieces, `finish`) copies the bytes it is asked
    /// for and agrees with `verify` on good packets and on packets with one covered byte
    /// flipped, for any split of a payload of up to 9000 bytes (past the scratch buffer and
    /// the fused copy's step) at any offsets.
    #[test]
    fn icrc_split_check_matches_verify(v6: bool, len in 0usize..9000, seed: u8,
                                       upto in 0usize..9100,
                                       cuts in proptest::collection::vec(0usize..9000, 0..4),
                                       flip in any::<prop::sample::Index>(), corrupt: bool) {
        let ip_len = if v6 { 40 } else { 20 };
        let udp_len = 8 + 12 + len + 4;
        let n = ip_len + udp_len;
        let mut buf = vec![0u8; n];
        if v6 {
            buf[0] = 0x60;
            buf[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            buf[6] = 17;
        } else {
            buf[0] = 0x45;
            buf[2..4].copy_from_slice(&(n as u16).to_be_bytes());
            buf[9] = 17;
        }
        buf[ip_len + 2..ip_len + 4].copy_from_slice(&4791u16.to_be_bytes());
        buf[ip_len + 4..ip_len + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
        let at = ip_len + 8 + 12;
        buf[at..at + len].iter_mut().enumerate()
            .for_each(|(i, b)| *b = (i as u8).wrapping_mul(13).wrapping_add(seed));
        icrc::fill(&mut buf).unwrap();
        if corrupt {
            let covered = n - 4 - (ip_len + 8);
            buf[ip_len + 8 + flip.index(covered)] ^= 0x10;
        }
        let want = icrc::verify(&buf);
        let mut p = icrc::begin(&buf, upto).unwrap();
        let start = p.next();
        prop_assert_eq!(start, upto.clamp(ip_len + 20, n - 4));
        // Copy the rest up to the ICRC in pieces cut at `cuts`.
        let mut bounds: Vec<usize> =
            cuts.iter().map(|c| start + c % (n - 4 - start + 1)).collect();
        bounds.push(n - 4);
        bounds.sort_unstable();
        let mut out = vec![0u8; n - 4 - start];
        for &b in &bounds[..bounds.len() - 1] {
            let from = p.next();
            p.copy_to(&buf, &mut out[from - start..b - start]).unwrap();
            prop_assert_eq!(p.next(), b);
        }
        let done = p.next();
        prop_assert_eq!(&out[..done - start], &buf[start..done]);
        // Past the ICRC is refused and copies nothing.
        let mut over = vec![0u8; n - 4 - done + 1];
        let before = p.clone();
        prop_assert!(p.copy_to(&buf, &mut over).is_err());
        prop_assert_eq!(p.next(), before.next());
        prop_assert_eq!(p.finish(&buf), want);
    }

    #[test]
    fn no_panic_on_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
        let _ = RocePacket::parse(&bytes);
        let _ = icrc::compute(&bytes);
        let _ = icrc::verify(&bytes);
        let _ = cnp::Repr::parse(&bytes);
        if let Ok(p) = icrc::begin(&bytes, bytes.len() / 2) {
            let mut d = [0u8; 8];
            let mut q = p.clone();
            let _ = q.copy_to(&bytes, &mut d);
            let _ = q.finish(&bytes);
            let _ = p.finish(&bytes[..bytes.len() / 2]);
        }
        let mut b = bytes.clone();
        let _ = icrc::fill(&mut b);
    }
}
