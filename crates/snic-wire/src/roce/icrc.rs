//! The RoCEv2 invariant CRC (IBTA Annex A17.3.3): a CRC-32 over the packet with every field that
//! routers may change masked to 1s, carried in the last 4 bytes of the UDP payload.
//!
//! What is hashed, in order (as the Linux rxe driver and scapy do it):
//! 1. 8 bytes of `0xff` (the masked LRH of native InfiniBand);
//! 2. the IP header with, for IPv4, TOS, TTL and header checksum set to 1s, or, for IPv6,
//!    traffic class, flow label and hop limit set to 1s;
//! 3. the UDP header with its checksum set to 1s;
//! 4. the BTH with byte 4 (FECN, BECN, 6 reserved bits) set to 1s;
//! 5. everything after the BTH up to the ICRC (extension headers, payload, pad).
//!
//! The CRC is the Ethernet CRC-32 (reflected polynomial 0xEDB88320, init and final XOR all 1s:
//! `crc32fast`), and it goes on the wire least-significant byte first (what rxe does on a
//! little-endian host and scapy's `pack_icrc` does). [`compute`] returns the CRC as a number;
//! the trailer bytes are `crc.to_le_bytes()`.
//!
//! The masked headers are copied into small stack arrays and fed to the hasher piece by piece:
//! no allocation, no copy of the payload. The end of the packet is taken from the UDP length, so
//! Ethernet padding after a short IPv4 packet is not hashed.

use super::{ICRC_LEN, bth};
use crate::{Error, Result};

/// Length of the UDP header.
const UDP_LEN: usize = 8;
/// Length of the IPv6 fixed header.
const IPV6_LEN: usize = 40;
/// IP protocol number of UDP.
const PROTO_UDP: u8 = 17;

/// Where the pieces of a RoCEv2 packet lie, from the IP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    /// IP header length (IPv4 IHL * 4, or 40).
    ip_len: usize,
    /// IPv4 (true) or IPv6 (false).
    v4: bool,
    /// One past the last ICRC byte (IP header length + UDP length).
    end: usize,
}

fn layout(ip: &[u8]) -> Result<Layout> {
    let first = *ip.first().ok_or(Error::Truncated { need: 1, got: 0 })?;
    let (v4, ip_len) = match first >> 4 {
        4 => {
            Error::need(20, ip.len())?;
            let ihl = usize::from(first & 0x0f) * 4;
            if ihl < 20 {
                return Err(Error::BadHeaderLen { got: ihl });
            }
            if ip[9] != PROTO_UDP {
                return Err(Error::BadValue { field: "ip.protocol" });
            }
            (true, ihl)
        }
        6 => {
            Error::need(IPV6_LEN, ip.len())?;
            if ip[6] != PROTO_UDP {
                return Err(Error::BadValue { field: "ipv6.next_header" });
            }
            (false, IPV6_LEN)
        }
        v => return Err(Error::BadVersion { got: v }),
    };
    Error::need(ip_len + UDP_LEN, ip.len())?;
    let udp_len = usize::from(u16::from_be_bytes([ip[ip_len + 4], ip[ip_len + 5]]));
    if udp_len < UDP_LEN + bth::HEADER_LEN + ICRC_LEN {
        return Err(Error::BadTotalLen { got: udp_len });
    }
    let end = ip_len + udp_len;
    Error::need(end, ip.len())?;
    Ok(Layout { ip_len, v4, end })
}

fn crc_of(ip: &[u8], l: &Layout) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&[0xff; 8]);

    // IP header, masked. IPv4 options (rare on RoCE) are hashed as they are.
    let mut hdr = [0u8; 60];
    let hdr = &mut hdr[..l.ip_len];
    hdr.copy_from_slice(&ip[..l.ip_len]);
    if l.v4 {
        hdr[1] = 0xff; // TOS (DSCP, ECN)
        hdr[8] = 0xff; // TTL
        hdr[10] = 0xff; // header checksum
        hdr[11] = 0xff;
    } else {
        hdr[0] |= 0x0f; // traffic class, high nibble
        hdr[1] = 0xff; // traffic class low nibble, flow label
        hdr[2] = 0xff;
        hdr[3] = 0xff;
        hdr[7] = 0xff; // hop limit
    }
    h.update(hdr);

    let mut udp = [0u8; UDP_LEN];
    udp.copy_from_slice(&ip[l.ip_len..l.ip_len + UDP_LEN]);
    udp[6] = 0xff; // checksum
    udp[7] = 0xff;
    h.update(&udp);

    let bth_at = l.ip_len + UDP_LEN;
    let mut b = [0u8; bth::HEADER_LEN];
    b.copy_from_slice(&ip[bth_at..bth_at + bth::HEADER_LEN]);
    b[bth::CONGESTION_BYTE] = 0xff;
    h.update(&b);

    h.update(&ip[bth_at + bth::HEADER_LEN..l.end - ICRC_LEN]);
    h.finalize()
}

/// Compute the ICRC of a RoCEv2 packet given the bytes from its IP header to (at least) the end
/// of its ICRC. Bytes past the UDP length are ignored. The trailer should hold
/// `crc.to_le_bytes()`.
///
/// Errors: `Truncated` when the buffer ends before the UDP length says; `BadVersion` for an IP
/// version other than 4 or 6; `BadHeaderLen` for an IHL below 5; `BadValue` when the IP protocol
/// / IPv6 next header is not UDP (IPv6 extension headers are not supported, as in rxe);
/// `BadTotalLen` when the UDP length cannot hold a BTH and an ICRC.
pub fn compute(ip: &[u8]) -> Result<u32> {
    let l = layout(ip)?;
    Ok(crc_of(ip, &l))
}

/// The ICRC the packet carries (its last 4 bytes by UDP length, read least-significant first).
pub fn read(ip: &[u8]) -> Result<u32> {
    let l = layout(ip)?;
    let t = &ip[l.end - ICRC_LEN..l.end];
    Ok(u32::from_le_bytes([t[0], t[1], t[2], t[3]]))
}

/// Check the ICRC: `Err(BadIcrc { expected: computed, got: carried })` when they differ; errors of
/// [`compute`] otherwise.
pub fn verify(ip: &[u8]) -> Result<()> {
    let l = layout(ip)?;
    let expected = crc_of(ip, &l);
    let t = &ip[l.end - ICRC_LEN..l.end];
    let got = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
    if expected == got { Ok(()) } else { Err(Error::BadIcrc { expected, got }) }
}

/// Compute the ICRC and write it into the trailer (the 4 bytes that end the UDP payload).
/// Returns the CRC. Errors as [`compute`].
pub fn fill(ip: &mut [u8]) -> Result<u32> {
    let l = layout(ip)?;
    let crc = crc_of(ip, &l);
    ip[l.end - ICRC_LEN..l.end].copy_from_slice(&crc.to_le_bytes());
    Ok(crc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_errors() {
        assert_eq!(compute(&[]), Err(Error::Truncated { need: 1, got: 0 }));
        assert_eq!(compute(&[0x55; 64]), Err(Error::BadVersion { got: 5 }));
        let mut v4 = [0u8; 64];
        v4[0] = 0x44;
        assert_eq!(compute(&v4), Err(Error::BadHeaderLen { got: 16 }));
        v4[0] = 0x45;
        v4[9] = 6;
        assert_eq!(compute(&v4), Err(Error::BadValue { field: "ip.protocol" }));
        v4[9] = 17;
        v4[24] = 0;
        v4[25] = 23; // UDP length 23 < 8 + 12 + 4
        assert_eq!(compute(&v4), Err(Error::BadTotalLen { got: 23 }));
        v4[25] = 60; // 20 + 60 > 64
        assert_eq!(compute(&v4), Err(Error::Truncated { need: 80, got: 64 }));
    }
}
