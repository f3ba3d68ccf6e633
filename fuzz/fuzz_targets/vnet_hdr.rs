//! Fuzz target `vnet_hdr`: the virtio-net header of AF_PACKET / TAP ports
//! (`snic_io::vnet::VnetHdr`). The first bytes of the input are the header, the rest the frame
//! it travels with.
//!
//! Checked: `parse` fails only for fewer than 10 bytes, with `Truncated { need: 10, got }`;
//! `to_bytes`/`emit` give back the 10 input bytes exactly; `to_offload` either maps the header
//! or names what was wrong (the error variant is cross-checked against the fields); and
//! `from_offload(to_offload(h))` maps back to the same `Offload`, keeping every field the
//! offload carries and setting the ECN bit exactly when the frame's TCP header has CWR.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_io::vnet::{
    FLAG_DATA_VALID, FLAG_NEEDS_CSUM, GSO_ECN, GSO_NONE, GSO_TCPV4, GSO_TCPV6, GSO_UDP_L4,
    GSO_UDP_TUNNEL_IPV4, GSO_UDP_TUNNEL_IPV6, VNET_HDR_LEN, VNET_HDR_TNL_LEN, VnetError, VnetHdr,
};
use snic_pipeline::meta::GsoKind;

fuzz_target!(|data: &[u8]| {
    // The 24-byte UDP-tunnel header: parsed and re-emitted exactly (but the unused fields), and
    // an accepted tunnel header maps back to itself.
    if let Ok(t) = VnetHdr::parse_sized(data, VNET_HDR_TNL_LEN) {
        let b = t.to_tnl_bytes();
        assert_eq!(b[..VNET_HDR_LEN], data[..VNET_HDR_LEN]);
        assert_eq!(b[20..24], data[20..24]);
        let frame = &data[VNET_HDR_TNL_LEN..];
        if let Ok(off) = t.to_offload()
            && off.gso.is_some_and(|g| g.tunnel.is_some())
            && VnetHdr::tunnel_whole(&off, frame)
        {
            assert_eq!(VnetHdr::from_offload(&off, frame).to_offload(), Ok(off));
        }
    } else {
        assert!(data.len() < VNET_HDR_TNL_LEN);
    }
    let h = match VnetHdr::parse(data) {
        Ok(h) => h,
        Err(e) => {
            assert!(data.len() < VNET_HDR_LEN);
            assert_eq!(e, VnetError::Truncated { need: VNET_HDR_LEN, got: data.len() });
            return;
        }
    };
    let frame = &data[VNET_HDR_LEN..];

    // Byte-exact re-emit, both ways of writing it.
    assert_eq!(h.to_bytes()[..], data[..VNET_HDR_LEN]);
    let mut out = [0u8; VNET_HDR_LEN + 1];
    h.emit(&mut out).expect("11 bytes hold a header");
    assert_eq!(out[..VNET_HDR_LEN], data[..VNET_HDR_LEN]);
    assert_eq!(
        h.emit(&mut out[..VNET_HDR_LEN - 1]),
        Err(VnetError::Truncated { need: VNET_HDR_LEN, got: VNET_HDR_LEN - 1 })
    );
    assert_eq!(VnetHdr::parse(&out), Ok(h));
    assert_eq!(h.ecn(), h.gso_type & GSO_ECN != 0);

    let gso_base = h.gso_type & !GSO_ECN;
    match h.to_offload() {
        Err(VnetError::UnknownFlags(f)) => {
            assert_eq!(f, h.flags);
            assert_ne!(f & !(FLAG_NEEDS_CSUM | FLAG_DATA_VALID), 0);
        }
        Err(VnetError::UnsupportedGsoType(t)) => {
            assert_eq!(t, h.gso_type);
            assert!(![GSO_NONE, GSO_TCPV4, GSO_TCPV6, GSO_UDP_L4].contains(&gso_base));
        }
        Err(VnetError::ZeroGsoSize) => {
            assert_eq!(h.gso_size, 0);
            assert_ne!(gso_base, GSO_NONE);
        }
        // A 10-byte header has no tunnel offsets: every UDP-tunnel type is refused.
        Err(VnetError::UnsupportedTunnel(t)) => {
            assert_eq!(t, h.gso_type);
            assert_ne!(t & (GSO_UDP_TUNNEL_IPV4 | GSO_UDP_TUNNEL_IPV6), 0);
        }
        Err(e) => panic!("to_offload gave an error it never should: {e:?}"),
        Ok(off) => {
            // Only known flag bits, only known GSO kinds, never a zero segment size.
            assert_eq!(h.flags & !(FLAG_NEEDS_CSUM | FLAG_DATA_VALID), 0);
            let needs_csum = h.flags & FLAG_NEEDS_CSUM != 0;
            assert_eq!(off.csum_partial, needs_csum.then_some((h.csum_start, h.csum_offset)));
            let kind = match gso_base {
                GSO_NONE => None,
                GSO_TCPV4 => Some(GsoKind::TcpV4),
                GSO_TCPV6 => Some(GsoKind::TcpV6),
                GSO_UDP_L4 => Some(GsoKind::UdpL4),
                other => panic!("to_offload accepted gso_type {other:#x}"),
            };
            assert_eq!(off.gso.map(|g| g.kind), kind);
            if let Some(g) = off.gso {
                assert_ne!(g.size, 0);
                assert_eq!((g.size, g.hdr_len), (h.gso_size, h.hdr_len));
            }

            // Back to a header: the same offload, the carried fields unchanged.
            let back = VnetHdr::from_offload(&off, frame);
            assert_eq!(back.to_offload(), Ok(off));
            assert_eq!(VnetHdr::parse(&back.to_bytes()), Ok(back));
            assert_eq!(back.flags, h.flags & FLAG_NEEDS_CSUM);
            if needs_csum {
                assert_eq!((back.csum_start, back.csum_offset), (h.csum_start, h.csum_offset));
            } else {
                assert_eq!((back.csum_start, back.csum_offset), (0, 0));
            }
            match off.gso {
                None => assert_eq!(back.gso_type, GSO_NONE),
                Some(g) => {
                    assert_eq!(back.gso_type & !GSO_ECN, gso_base);
                    assert_eq!((back.gso_size, back.hdr_len), (h.gso_size, h.hdr_len));
                    // ECN: TCP, a checksum start to find the TCP header by, CWR set there.
                    let cwr =
                        frame.get(usize::from(h.csum_start) + 13).is_some_and(|f| f & 0x80 != 0);
                    let tcp = matches!(g.kind, GsoKind::TcpV4 | GsoKind::TcpV6);
                    assert_eq!(back.ecn(), tcp && needs_csum && cwr);
                }
            }
        }
    }
});
