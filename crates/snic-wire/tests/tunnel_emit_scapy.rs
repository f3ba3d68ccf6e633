//! Our emitters write what scapy writes: each header is parsed out of a scapy-built frame
//! (`stack_common`), emitted again from its `Repr` into a fresh buffer, and compared byte for
//! byte with scapy's bytes. Covers VXLAN, Geneve (with an option), NVGRE, plain GRE, BTH, RETH,
//! AETH, AtomicAckETH and the CNP.

use snic_wire::roce::{bth, cnp, ext};
use snic_wire::{geneve, gre, vxlan};

mod stack_common;
use stack_common::*;

#[test]
fn vxlan_emit_matches_scapy() {
    let f = hex(VXLAN);
    let h = &f[42..50];
    let r = vxlan::Repr::parse(&vxlan::Packet::new_checked(h).unwrap()).unwrap();
    assert_eq!(r.vni, 0x12_3456);
    let mut out = [0xffu8; 8];
    r.emit(&mut vxlan::Packet::new_unchecked(&mut out[..])).unwrap();
    assert_eq!(&out[..], h);
}

#[test]
fn geneve_emit_matches_scapy() {
    let f = hex(GENEVE);
    let h = &f[62..78];
    let p = geneve::Packet::new_checked(h).unwrap();
    let r = geneve::Repr::parse(&p).unwrap();
    let o = r.options().next().unwrap().unwrap();
    assert_eq!((o.class, o.typ, o.data), (0x0102, 0x80, &[1u8, 2, 3, 4][..]));
    let mut out = [0xffu8; 16];
    r.emit(&mut geneve::Packet::new_unchecked(&mut out[..])).unwrap();
    assert_eq!(&out[..], h);
}

#[test]
fn nvgre_and_gre_emit_match_scapy() {
    let f = hex(NVGRE);
    let h = &f[34..42];
    let r = gre::NvgreRepr::parse(&gre::Packet::new_checked(h).unwrap()).unwrap();
    assert_eq!(r, gre::NvgreRepr { vsid: 0xbeef, flow_id: 0x2a });
    let mut out = [0xffu8; 8];
    r.emit(&mut gre::Packet::new_unchecked(&mut out[..])).unwrap();
    assert_eq!(&out[..], h);

    let f = hex(GRE_IP);
    let h = &f[34..38];
    let r = gre::Repr::parse(&gre::Packet::new_checked(h).unwrap()).unwrap();
    let mut out = [0xffu8; 4];
    r.emit(&mut gre::Packet::new_unchecked(&mut out[..])).unwrap();
    assert_eq!(&out[..], h);
}

#[test]
fn roce_headers_emit_match_scapy() {
    let f = hex(ROCE_WRITE);
    let h = &f[42..54];
    let b = bth::Repr::parse(&bth::Header::new_checked(h).unwrap()).unwrap();
    assert_eq!((b.opcode, b.dest_qp, b.psn, b.ack_req), (0x0a, 0x12, 100, true));
    let mut out = [0xffu8; 12];
    b.emit(&mut bth::Header::new_unchecked(&mut out[..])).unwrap();
    assert_eq!(&out[..], h);
    let h = &f[54..70];
    let r = ext::RethRepr::parse(&ext::Reth::new_checked(h).unwrap()).unwrap();
    assert_eq!(r, ext::RethRepr { va: 0x1000, rkey: 0x1234, dma_len: 4 });
    let mut out = [0xffu8; 16];
    r.emit(&mut ext::Reth::new_unchecked(&mut out[..])).unwrap();
    assert_eq!(&out[..], h);

    let f = hex(ROCE_ATOMIC_ACK6);
    let h = &f[74..86];
    let a = ext::AethRepr::parse(&ext::Aeth::new_checked(&h[..4]).unwrap()).unwrap();
    assert_eq!(a, ext::AethRepr { syndrome: ext::Syndrome::Ack { credits: 0 }, msn: 3 });
    let k = ext::AtomicAckEthRepr::parse(&ext::AtomicAckEth::new_checked(&h[4..]).unwrap());
    assert_eq!(k, Ok(ext::AtomicAckEthRepr { orig_data: 0x55 }));
    let mut out = [0xffu8; 12];
    a.emit(&mut ext::Aeth::new_unchecked(&mut out[..4])).unwrap();
    k.unwrap().emit(&mut ext::AtomicAckEth::new_unchecked(&mut out[4..])).unwrap();
    assert_eq!(&out[..], h);
}

#[test]
fn cnp_emit_matches_scapy() {
    // scapy's cnp(0x12): BTH opcode 0x81, BECN, P_Key 0xffff, 16 zero bytes.
    let f = hex(ROCE_CNP);
    let h = &f[42..70];
    assert_eq!(cnp::Repr::parse(h), Ok(cnp::Repr { dest_qp: 0x12, pkey: 0xffff }));
    let mut out = [0xffu8; cnp::CNP_LEN];
    cnp::Repr { dest_qp: 0x12, pkey: 0xffff }.emit(&mut out).unwrap();
    assert_eq!(&out[..], h);
}
