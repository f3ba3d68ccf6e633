//! Fuzz target `roce_packet`: `snic_wire::roce::RocePacket::parse` on arbitrary bytes as the
//! UDP payload of a RoCEv2 packet (BTH through ICRC), then the `RoceRepr` re-emit.
//!
//! Checked, besides "never panics": on `Ok`, the pieces tile the input (headers, payload, pad
//! and the 4-byte ICRC add up to the input length; extension headers in order, inside the
//! headers); the repr
//! carries exactly the extension headers the opcode implies; `RoceRepr::emit` of the repr and
//! payload succeeds with `buffer_len` bytes and parses back to the same repr (pad count
//! recomputed from the payload length) and payload; a second emit from that gives the same
//! bytes. The same bytes wrapped in IPv4/UDP 4791 get an ICRC with `icrc::fill` that then
//! verifies, and the stack walker agrees that the RoCE part parses.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_wire::roce::packet::pad_for;
use snic_wire::roce::{RocePacket, icrc};
use snic_wire::{checksum, stack};

/// Ethernet + IPv4 + UDP (to 4791) in front of `roce`.
fn wrap(roce: &[u8]) -> Option<Vec<u8>> {
    let udp_len = u16::try_from(8 + roce.len()).ok()?;
    let ip_len = udp_len.checked_add(20)?;
    let mut f = vec![0u8; 14 + 28];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    f[14 + 8] = 64;
    f[14 + 9] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&49152u16.to_be_bytes());
    f[36..38].copy_from_slice(&4791u16.to_be_bytes());
    f[38..40].copy_from_slice(&udp_len.to_be_bytes());
    let c = !checksum::data(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(roce);
    Some(f)
}

fuzz_target!(|data: &[u8]| {
    let Ok(p) = RocePacket::parse(data) else {
        // The stack walker must not call it a complete RoCE packet either.
        if let Some(f) = wrap(data) {
            assert_eq!(stack::parse(&f).bth, None);
        }
        return;
    };
    let hl = p.header_len();
    let pl = p.payload().len();
    let pad = p.pad().len();
    assert_eq!(hl + pl + pad + 4, data.len(), "pieces do not tile the packet");
    assert_eq!(pad, usize::from(p.bth().pad_count));
    assert_eq!(p.payload(), &data[hl..hl + pl]);
    assert_eq!(p.bytes(), data);
    let _ = p.icrc();
    let mut end = 12;
    for &(e, at) in p.ext_headers() {
        assert_eq!(usize::from(at), end, "extension headers not back to back");
        end += e.header_len();
    }
    assert_eq!(end, hl);
    assert_eq!(p.ext_headers().len(), p.info().ext.len());

    // Re-emit: the repr and payload rebuild a packet that parses to the same thing.
    let r = p.repr();
    let n = r.buffer_len(pl).expect("a parsed opcode is in the table");
    let mut out = vec![0u8; n];
    assert_eq!(r.emit(&mut out, p.payload()), Ok(n));
    assert!(r.emit(&mut out[..n - 1], p.payload()).is_err(), "emit into a short buffer");
    let q = RocePacket::parse(&out).unwrap_or_else(|e| panic!("emitted packet fails: {e:?}"));
    let mut want = r;
    want.bth.pad_count = pad_for(pl) as u8;
    assert_eq!(q.repr(), want);
    assert_eq!(q.payload(), p.payload());
    assert_eq!(q.header_len(), hl);
    let mut out2 = vec![0u8; n];
    assert_eq!(q.repr().emit(&mut out2, q.payload()), Ok(n));
    assert_eq!(out, out2, "emit is not stable");

    // In a frame: the walker agrees, and a filled ICRC verifies.
    if let Some(mut f) = wrap(data) {
        let s = stack::parse(&f);
        assert_eq!(s.bth, Some(42), "stack walk disagrees: {:?}", s.error());
        assert_eq!(s.verify_icrc(&f).map(|r| r.is_ok()), Some(icrc::verify(&f[14..]).is_ok()));
        icrc::fill(&mut f[14..]).expect("fill on a packet the walker accepted");
        assert_eq!(icrc::verify(&f[14..]), Ok(()));
        assert_eq!(s.verify_icrc(&f), Some(Ok(())));
    }
});
