//! Receive-side scaling: the Toeplitz hash that pins every packet of a flow to one worker.
//!
//! [`Toeplitz`] holds a 40-byte key and a lookup table built from it once: for each input byte
//! position and byte value, the 32-bit word that byte contributes. Hashing is then one table
//! lookup and one XOR per input byte (12 bytes for IPv4 with ports, 36 for IPv6).
//!
//! [`Toeplitz::hash_packet`] hashes the innermost IP header of a parsed frame (the inner frame of
//! a VXLAN/Geneve/NVGRE tunnel when it carries IP, so tunnelled flows spread like their inner
//! flows; otherwise the outer IP header): source and
//! destination addresses, plus source and destination ports for TCP and UDP (the 4-tuple), in
//! the field order of the Microsoft RSS specification. IPv4 fragments hash the 2-tuple only, so a
//! fragmented datagram stays on one worker. Non-IP frames hash to 0.
//!
//! [`Toeplitz::parse_and_hash`] is the one place a packet is walked and hashed: the I/O layer's
//! dispatch to workers and the `parse` stage both call it, and only the first call does work.

use crate::PacketBuf;
use snic_wire::stack::{Layer, Stack};

/// The Microsoft RSS verification key, the usual default.
pub const DEFAULT_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// Longest hash input: IPv6 source and destination plus two ports.
pub const MAX_INPUT: usize = 36;

/// A Toeplitz hasher for one key, with its precomputed table.
#[derive(Clone)]
pub struct Toeplitz {
    key: [u8; 40],
    table: Box<[[u32; 256]; MAX_INPUT]>,
}

impl core::fmt::Debug for Toeplitz {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Toeplitz").field("key", &self.key).finish_non_exhaustive()
    }
}

impl Default for Toeplitz {
    fn default() -> Self {
        Self::new(DEFAULT_KEY)
    }
}

/// The 32 key bits starting at bit `bit` (bit 0 = most significant bit of key byte 0).
fn key_window(key: &[u8; 40], bit: usize) -> u32 {
    let mut w = 0u32;
    for i in 0..32 {
        let b = bit + i;
        let set = key.get(b / 8).is_some_and(|k| k & (0x80 >> (b % 8)) != 0);
        w = (w << 1) | u32::from(set);
    }
    w
}

impl Toeplitz {
    /// A hasher for `key`; builds the 36 KiB table (once per pipeline, not per packet).
    pub fn new(key: [u8; 40]) -> Self {
        let mut table = Box::new([[0u32; 256]; MAX_INPUT]);
        for (pos, row) in table.iter_mut().enumerate() {
            // Contribution of each of the 8 bits of the byte at `pos`.
            let mut bits = [0u32; 8];
            for (j, b) in bits.iter_mut().enumerate() {
                *b = key_window(&key, pos * 8 + j);
            }
            for (v, slot) in row.iter_mut().enumerate() {
                let mut h = 0;
                for (j, b) in bits.iter().enumerate() {
                    if v & (0x80 >> j) != 0 {
                        h ^= b;
                    }
                }
                *slot = h;
            }
        }
        Toeplitz { key, table }
    }

    /// The key.
    pub fn key(&self) -> &[u8; 40] {
        &self.key
    }

    /// Hash `input` (at most [`MAX_INPUT`] bytes; later bytes are ignored).
    #[inline]
    pub fn hash(&self, input: &[u8]) -> u32 {
        input.iter().zip(self.table.iter()).fold(0, |h, (b, row)| h ^ row[usize::from(*b)])
    }

    /// Hash the bit-by-bit reference way, without the table (for tests).
    pub fn hash_slow(&self, input: &[u8]) -> u32 {
        let mut h = 0;
        for (i, byte) in input.iter().enumerate() {
            for j in 0..8 {
                if byte & (0x80 >> j) != 0 {
                    h ^= key_window(&self.key, i * 8 + j);
                }
            }
        }
        h
    }

    /// Hash a parsed frame's innermost IP header (4-tuple for TCP/UDP, else 2-tuple); 0 for
    /// non-IP frames. Reads only bytes inside `frame`.
    pub fn hash_packet(&self, frame: &[u8], stack: &Stack) -> u32 {
        let mut buf = [0u8; MAX_INPUT];
        let n = tuple(frame, stack, &mut buf);
        self.hash(&buf[..n])
    }

    /// The receive-side walk, done once per packet: parse `p`'s headers into `meta.stack`,
    /// hash them into `meta.rss_hash` and mark the packet parsed. The I/O layer calls this to
    /// choose a worker (as a NIC hashes before it chooses a queue) and the `parse` stage calls
    /// it for packets nobody walked yet; a packet already walked is left as it is.
    pub fn parse_and_hash(&self, p: &mut PacketBuf) {
        if p.meta.parsed {
            return;
        }
        p.meta.stack = snic_wire::stack::parse(p.data());
        p.meta.rss_hash = self.hash_packet(p.data(), &p.meta.stack);
        p.meta.parsed = true;
    }
}

/// Write the RSS input of `frame` into `out`; returns its length (0 for non-IP).
pub fn tuple(frame: &[u8], stack: &Stack, out: &mut [u8; MAX_INPUT]) -> usize {
    // The inner frame when it has an IP header, else the outer one (a tunnel carrying ARP or a
    // payload that did not parse spreads by its outer header).
    let h = match &stack.inner {
        Some(i) if matches!(i.l3, Some((Layer::Ipv4 | Layer::Ipv6, _))) => i,
        _ => &stack.outer,
    };
    let Some((l3, off)) = h.l3 else { return 0 };
    let off = usize::from(off);
    let (addrs, fragment) = match l3 {
        Layer::Ipv4 => {
            let Some(a) = frame.get(off + 12..off + 20) else { return 0 };
            // Flags and fragment offset: a fragment is MF set or a non-zero offset.
            let frag = frame
                .get(off + 6..off + 8)
                .is_some_and(|f| u16::from_be_bytes([f[0], f[1]]) & 0x3fff != 0);
            (a, frag)
        }
        Layer::Ipv6 => {
            let Some(a) = frame.get(off + 8..off + 40) else { return 0 };
            (a, false)
        }
        _ => return 0,
    };
    let mut n = addrs.len();
    out[..n].copy_from_slice(addrs);
    if let (false, Some((Layer::Tcp | Layer::Udp, l4))) = (fragment, h.l4) {
        let l4 = usize::from(l4);
        if let Some(ports) = frame.get(l4..l4 + 4) {
            out[n..n + 4].copy_from_slice(ports);
            n += 4;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};

    fn v4(src: &str, sp: u16, dst: &str, dp: u16, ports: bool) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&src.parse::<Ipv4Addr>().unwrap().octets());
        v.extend_from_slice(&dst.parse::<Ipv4Addr>().unwrap().octets());
        if ports {
            v.extend_from_slice(&sp.to_be_bytes());
            v.extend_from_slice(&dp.to_be_bytes());
        }
        v
    }

    fn v6(src: &str, sp: u16, dst: &str, dp: u16, ports: bool) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&src.parse::<Ipv6Addr>().unwrap().octets());
        v.extend_from_slice(&dst.parse::<Ipv6Addr>().unwrap().octets());
        if ports {
            v.extend_from_slice(&sp.to_be_bytes());
            v.extend_from_slice(&dp.to_be_bytes());
        }
        v
    }

    // The Microsoft RSS verification suite ("Verifying the RSS Hash Calculation"): destination
    // and source as listed there, hashed in the order source address, destination address,
    // source port, destination port.
    const V4: [(&str, u16, &str, u16, u32, u32); 5] = [
        ("66.9.149.187", 2794, "161.142.100.80", 1766, 0x51ccc178, 0x323e8fc2),
        ("199.92.111.2", 14230, "65.69.140.83", 4739, 0xc626b0ea, 0xd718262a),
        ("24.19.198.95", 12898, "12.22.207.184", 38024, 0x5c2b394a, 0xd2d0a5de),
        ("38.27.205.30", 48228, "209.142.163.6", 2217, 0xafc7327f, 0x82989176),
        ("153.39.163.191", 44251, "202.188.127.2", 1303, 0x10e828a2, 0x5d1809c5),
    ];

    const V6: [(&str, u16, &str, u16, u32, u32); 3] = [
        ("3ffe:2501:200:1fff::7", 2794, "3ffe:2501:200:3::1", 1766, 0x40207d3d, 0x2cc18cd5),
        ("3ffe:501:8::260:97ff:fe40:efab", 14230, "ff02::1", 4739, 0xdde51bbf, 0x0f0c461c),
        (
            "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
            44251,
            "fe80::200:f8ff:fe21:67cf",
            38024,
            0x02d1feef,
            0x4b61e985,
        ),
    ];

    #[test]
    fn microsoft_verification_ipv4() {
        let t = Toeplitz::default();
        for (src, sp, dst, dp, with_ports, ip_only) in V4 {
            assert_eq!(t.hash(&v4(src, sp, dst, dp, true)), with_ports, "{src}:{sp} tcp");
            assert_eq!(t.hash(&v4(src, sp, dst, dp, false)), ip_only, "{src} ip");
        }
    }

    #[test]
    fn microsoft_verification_ipv6() {
        let t = Toeplitz::default();
        for (src, sp, dst, dp, with_ports, ip_only) in V6 {
            assert_eq!(t.hash(&v6(src, sp, dst, dp, true)), with_ports, "{src}:{sp} tcp");
            assert_eq!(t.hash(&v6(src, sp, dst, dp, false)), ip_only, "{src} ip");
        }
    }

    /// Ethernet + `ip` (an IPv4 or IPv6 header) + a TCP/UDP header with these ports.
    fn frame(ethertype: u16, ip: &[u8], sp: u16, dp: u16, tcp: bool) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(ip);
        f.extend_from_slice(&sp.to_be_bytes());
        f.extend_from_slice(&dp.to_be_bytes());
        if tcp {
            f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
        } else {
            f.extend_from_slice(&[0, 8, 0, 0]);
        }
        f
    }

    fn ipv4_hdr(src: &str, dst: &str, proto: u8, l4_len: u16, frag: u16) -> Vec<u8> {
        let total = 20 + l4_len;
        let mut h = vec![0x45, 0, (total >> 8) as u8, total as u8, 0, 1];
        h.extend_from_slice(&frag.to_be_bytes());
        h.extend_from_slice(&[64, proto, 0, 0]);
        h.extend_from_slice(&src.parse::<Ipv4Addr>().unwrap().octets());
        h.extend_from_slice(&dst.parse::<Ipv4Addr>().unwrap().octets());
        let c = !snic_wire::checksum::data(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h
    }

    fn ipv6_hdr(src: &str, dst: &str, proto: u8, l4_len: u16) -> Vec<u8> {
        let mut h = vec![0x60, 0, 0, 0];
        h.extend_from_slice(&l4_len.to_be_bytes());
        h.extend_from_slice(&[proto, 64]);
        h.extend_from_slice(&src.parse::<Ipv6Addr>().unwrap().octets());
        h.extend_from_slice(&dst.parse::<Ipv6Addr>().unwrap().octets());
        h
    }

    fn hash_frame(f: &[u8]) -> u32 {
        let stack = snic_wire::stack::parse(f);
        assert!(stack.is_ok(), "{:?}", stack.error());
        Toeplitz::default().hash_packet(f, &stack)
    }

    #[test]
    fn parsed_frames_hash_like_the_verification_suite() {
        let (src, sp, dst, dp, with_ports, ip_only) = V4[0];
        let tcp = frame(0x0800, &ipv4_hdr(src, dst, 6, 20, 0), sp, dp, true);
        assert_eq!(hash_frame(&tcp), with_ports);
        let udp = frame(0x0800, &ipv4_hdr(src, dst, 17, 8, 0), sp, dp, false);
        assert_eq!(hash_frame(&udp), with_ports, "UDP hashes its ports too");
        // A first fragment (MF set) hashes addresses only, like the later fragments will.
        let frag = frame(0x0800, &ipv4_hdr(src, dst, 17, 8, 0x2000), sp, dp, false);
        assert_eq!(hash_frame(&frag), ip_only);
        // ICMP: no ports.
        let mut icmp = frame(0x0800, &ipv4_hdr(src, dst, 1, 8, 0), 0x0800, 0, false);
        icmp.truncate(14 + 20 + 8);
        assert_eq!(hash_frame(&icmp), ip_only);

        let (src, sp, dst, dp, with_ports, ip_only) = V6[0];
        let tcp6 = frame(0x86dd, &ipv6_hdr(src, dst, 6, 20), sp, dp, true);
        assert_eq!(hash_frame(&tcp6), with_ports);
        let mut icmp6 = frame(0x86dd, &ipv6_hdr(src, dst, 58, 8), 0x8000, 0, false);
        icmp6.truncate(14 + 40 + 8);
        assert_eq!(hash_frame(&icmp6), ip_only);
        // Not IP: 0.
        let arp_like = frame(0x88b5, &[0; 28], 0, 0, false);
        assert_eq!(hash_frame(&arp_like), 0);
    }

    #[test]
    fn table_agrees_with_bitwise() {
        let t = Toeplitz::new([0xa5; 40]);
        let input: Vec<u8> = (0..36u8).map(|i| i.wrapping_mul(37)).collect();
        for n in 0..=36 {
            assert_eq!(t.hash(&input[..n]), t.hash_slow(&input[..n]));
        }
    }
}
