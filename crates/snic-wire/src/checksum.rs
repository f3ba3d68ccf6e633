//! The Internet checksum (RFC 1071): one's-complement sums, pseudo-header sums for IPv4 and IPv6,
//! and incremental updates (RFC 1624) for rewriting a field without re-summing the packet.
//!
//! Conventions used throughout `snic-wire`:
//! - [`data`], [`combine`], [`pseudo_header_v4`], [`pseudo_header_v6`] return a *folded sum*
//!   (16 bits, not yet complemented). The value stored in a packet is `!combine(&[...])`.
//! - The incremental functions ([`update16`], [`update32`], [`update_bytes`], ...) take and return
//!   the checksum *as stored in the packet* (complemented).
//! - Header `emit` functions in this crate never compute checksums; they zero the checksum field.
//!   After the payload is in place, call the packet's `fill_checksum` (IPv4 header, ICMPv4:
//!   no arguments; UDP, TCP, ICMPv6: the pseudo-header addresses). `verify_checksum` is the
//!   matching check; `Repr::parse` never verifies checksums (checksum offload is the caller's
//!   choice).

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Fold a wide one's-complement accumulator down to 16 bits (end-around carry).
#[inline]
const fn fold(mut sum: u64) -> u16 {
    // 2^16 == 1 (mod 0xffff), so adding the high part to the low part preserves the sum.
    sum = (sum & 0xffff_ffff) + (sum >> 32);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum as u16
}

/// Add two values in one's-complement arithmetic on 64 bits.
#[inline]
const fn add64(a: u64, b: u64) -> u64 {
    let (s, carry) = a.overflowing_add(b);
    s + carry as u64
}

/// One's-complement sum of `data` taken as big-endian 16-bit words, folded to 16 bits (not
/// complemented). An odd trailing byte is padded with a zero byte, as RFC 1071 says.
///
/// Words are summed eight bytes at a time in a 64-bit accumulator with end-around carry; since
/// 2^64 - 1 is a multiple of 2^16 - 1 this equals the 16-bit word sum.
pub fn data(data: &[u8]) -> u16 {
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(32);
    for c in &mut chunks {
        // Four independent 64-bit lanes; each lane value < 2^64, carried back in.
        let mut words = [0u64; 4];
        for (w, b) in words.iter_mut().zip(c.chunks_exact(8)) {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            *w = u64::from_be_bytes(a);
        }
        acc = add64(acc, words[0]);
        acc = add64(acc, words[1]);
        acc = add64(acc, words[2]);
        acc = add64(acc, words[3]);
    }
    let rest = chunks.remainder();
    let mut eights = rest.chunks_exact(8);
    for b in &mut eights {
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        acc = add64(acc, u64::from_be_bytes(a));
    }
    let tail = eights.remainder();
    // Pad the tail (< 8 bytes) to 8 with zeros on the right: same word alignment as before.
    let mut a = [0u8; 8];
    a[..tail.len()].copy_from_slice(tail);
    acc = add64(acc, u64::from_be_bytes(a));
    fold(acc)
}

/// One's-complement sum of several folded sums (e.g. a pseudo-header sum and a data sum).
pub fn combine(sums: &[u16]) -> u16 {
    let mut acc: u64 = 0;
    for &s in sums {
        acc += u64::from(s);
    }
    fold(acc)
}

/// Folded sum of the IPv4 pseudo-header (RFC 768 / RFC 793): source, destination, zero byte,
/// protocol, and the upper-layer length.
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, length: u32) -> u16 {
    let s = u32::from(src);
    let d = u32::from(dst);
    let acc = u64::from(s >> 16)
        + u64::from(s & 0xffff)
        + u64::from(d >> 16)
        + u64::from(d & 0xffff)
        + u64::from(protocol)
        + u64::from(length >> 16)
        + u64::from(length & 0xffff);
    fold(acc)
}

/// Folded sum of the IPv6 pseudo-header (RFC 8200 section 8.1): source, destination, 32-bit
/// upper-layer length, three zero bytes, next header.
pub fn pseudo_header_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, length: u32) -> u16 {
    let mut acc: u64 = 0;
    for w in src.segments().into_iter().chain(dst.segments()) {
        acc += u64::from(w);
    }
    acc += u64::from(length >> 16) + u64::from(length & 0xffff) + u64::from(next_header);
    fold(acc)
}

/// Pseudo-header sum for either IP version.
///
/// When `src` and `dst` are of different families (which no real packet has) the sum is taken
/// over both addresses' bytes with the IPv6 layout; the result is then meaningless but never
/// panics.
pub fn pseudo_header(src: &IpAddr, dst: &IpAddr, protocol: u8, length: u32) -> u16 {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => pseudo_header_v4(*s, *d, protocol, length),
        _ => pseudo_header_v6(to_v6(src), to_v6(dst), protocol, length),
    }
}

fn to_v6(a: &IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => *v6,
    }
}

/// The checksum to store in an upper-layer header: `!(pseudo + data)`.
///
/// `data` is the whole upper-layer message with its checksum field zeroed (or holding the old
/// value, when verifying: then the result is zero for a correct packet).
pub fn upper_layer(src: &IpAddr, dst: &IpAddr, protocol: u8, message: &[u8]) -> u16 {
    // Lengths above u32 cannot occur in a packet; saturate rather than panic.
    let len = u32::try_from(message.len()).unwrap_or(u32::MAX);
    !combine(&[pseudo_header(src, dst, protocol, len), data(message)])
}

/// RFC 1624 eqn. 3: the new stored checksum after one 16-bit word of the covered data changes
/// from `old_word` to `new_word`. `old_csum` is the checksum as stored in the packet.
pub fn update16(old_csum: u16, old_word: u16, new_word: u16) -> u16 {
    // HC' = ~(~HC + ~m + m')
    !combine(&[!old_csum, !old_word, new_word])
}

/// Incremental update for a 32-bit field (two 16-bit words), e.g. a TCP sequence number.
pub fn update32(old_csum: u16, old: u32, new: u32) -> u16 {
    let acc = u64::from(!old_csum)
        + u64::from(!(old >> 16) as u16)
        + u64::from(!old as u16)
        + u64::from((new >> 16) as u16)
        + u64::from(new as u16);
    !fold(acc)
}

/// Incremental update when a run of bytes at an even offset of the covered data changes from
/// `old` to `new` (e.g. an address rewrite). Both slices must have the same length; if they do
/// not, the shorter length is used for both.
pub fn update_bytes(old_csum: u16, old: &[u8], new: &[u8]) -> u16 {
    let n = old.len().min(new.len());
    // ~m is the one's-complement negation of the old sum: subtracting it.
    !combine(&[!old_csum, !data(&old[..n]), data(&new[..n])])
}

/// Incremental update for an IPv4 address rewrite (covered by the IPv4 header checksum and by
/// UDP/TCP pseudo-headers).
pub fn update_ipv4_addr(old_csum: u16, old: Ipv4Addr, new: Ipv4Addr) -> u16 {
    update32(old_csum, u32::from(old), u32::from(new))
}

/// Incremental update for an IPv6 address rewrite (covered by UDP/TCP/ICMPv6 pseudo-headers).
pub fn update_ipv6_addr(old_csum: u16, old: Ipv6Addr, new: Ipv6Addr) -> u16 {
    update_bytes(old_csum, &old.octets(), &new.octets())
}

/// Incremental update for an address of either family (same family on both sides; a mixed pair
/// updates over the shorter address and gives a meaningless result, never a panic).
pub fn update_ip_addr(old_csum: u16, old: &IpAddr, new: &IpAddr) -> u16 {
    match (old, new) {
        (IpAddr::V4(o), IpAddr::V4(n)) => update_ipv4_addr(old_csum, *o, *n),
        (IpAddr::V6(o), IpAddr::V6(n)) => update_ipv6_addr(old_csum, *o, *n),
        (IpAddr::V4(o), IpAddr::V6(n)) => update_bytes(old_csum, &o.octets(), &n.octets()),
        (IpAddr::V6(o), IpAddr::V4(n)) => update_bytes(old_csum, &o.octets(), &n.octets()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The obvious 16-bit-word reference implementation.
    fn reference(data: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        for c in data.chunks(2) {
            let w =
                if c.len() == 2 { u16::from_be_bytes([c[0], c[1]]) } else { u16::from(c[0]) << 8 };
            acc += u32::from(w);
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3 example: bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2.
        assert_eq!(data(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]), 0xddf2);
    }

    #[test]
    fn odd_length_pads_right() {
        assert_eq!(data(&[0x12]), 0x1200);
        assert_eq!(data(&[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
    }

    #[test]
    fn known_ipv4_header() {
        // IPv4 header from a scapy-built packet; checksum field holds b861.
        let hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(data(&hdr), 0xffff);
        let mut z = hdr;
        z[10] = 0;
        z[11] = 0;
        assert_eq!(!data(&z), 0xb861);
    }

    #[test]
    fn update16_matches_rfc1624_example() {
        // RFC 1624 section 4: HC = 0xDD2F, m = 0x5555 -> m' = 0x3285 gives HC' = 0x0000.
        assert_eq!(update16(0xdd2f, 0x5555, 0x3285), 0x0000);
    }

    #[test]
    fn pseudo_v4_known() {
        let s =
            pseudo_header_v4(Ipv4Addr::new(192, 168, 0, 1), Ipv4Addr::new(192, 168, 0, 199), 17, 8);
        let want = reference(&[192, 168, 0, 1, 192, 168, 0, 199, 0, 17, 0, 8]);
        assert_eq!(s, want);
    }

    proptest! {
        #[test]
        fn fast_sum_equals_reference(v in proptest::collection::vec(any::<u8>(), 0..300)) {
            // Folded sums can differ as 0x0000 vs 0xffff (both are one's-complement zero) only
            // for an all-zero input, where both implementations give 0.
            prop_assert_eq!(data(&v), reference(&v));
        }

        #[test]
        fn pseudo_v6_equals_reference(s in any::<[u8; 16]>(), d in any::<[u8; 16]>(), nh in any::<u8>(), len in any::<u32>()) {
            let mut buf = Vec::new();
            buf.extend_from_slice(&s);
            buf.extend_from_slice(&d);
            buf.extend_from_slice(&len.to_be_bytes());
            buf.extend_from_slice(&[0, 0, 0, nh]);
            prop_assert_eq!(
                pseudo_header_v6(Ipv6Addr::from(s), Ipv6Addr::from(d), nh, len),
                reference(&buf)
            );
        }

        #[test]
        fn update16_equals_recompute(mut v in proptest::collection::vec(any::<u8>(), 2..100), idx in any::<prop::sample::Index>(), new in any::<u16>()) {
            let words = v.len() / 2;
            let i = idx.index(words) * 2;
            let before = !data(&v);
            let old = u16::from_be_bytes([v[i], v[i + 1]]);
            v[i..i + 2].copy_from_slice(&new.to_be_bytes());
            let after = !data(&v);
            // Equal as one's-complement numbers: 0x0000 and 0xffff both denote zero.
            let inc = update16(before, old, new);
            prop_assert!(inc == after || (inc | after) == 0xffff && (inc & after) == 0, "inc {inc:#x} full {after:#x}");
        }

        #[test]
        fn update32_and_bytes_equal_recompute(mut v in proptest::collection::vec(any::<u8>(), 16..100), idx in any::<prop::sample::Index>(), new in any::<[u8; 16]>()) {
            let i = idx.index(v.len() / 2 - 7) * 2;
            let before = !data(&v);
            let old4 = u32::from_be_bytes([v[i], v[i + 1], v[i + 2], v[i + 3]]);
            let old16: [u8; 16] = v[i..i + 16].try_into().unwrap();
            let new4 = u32::from_be_bytes([new[0], new[1], new[2], new[3]]);

            let mut w = v.clone();
            w[i..i + 4].copy_from_slice(&new4.to_be_bytes());
            let full = !data(&w);
            let inc = update32(before, old4, new4);
            prop_assert!(inc == full || (inc ^ full) == 0xffff && (inc == 0 || full == 0));

            v[i..i + 16].copy_from_slice(&new);
            let full = !data(&v);
            let inc = update_ipv6_addr(before, Ipv6Addr::from(old16), Ipv6Addr::from(new));
            prop_assert!(inc == full || (inc ^ full) == 0xffff && (inc == 0 || full == 0));
        }
    }
}
