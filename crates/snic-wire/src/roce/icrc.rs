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
//! The masked bytes are copied into one 256-byte stack array: the whole packet when it fits
//! (one hasher update), else only LRH, IP, UDP and BTH, the payload then being hashed in place
//! (two updates). No allocation, no copy of a large payload. The end of the packet is taken
//! from the UDP length, which must fit in the IPv4 total length / IPv6 payload length, so
//! Ethernet padding after a short IPv4 packet is not hashed. IPv4 fragments are refused (the
//! ICRC covers a whole datagram).

use super::{ICRC_LEN, bth};
use crate::ipv4::IpProtocol;
use crate::{Error, Result, ipv4, ipv6, udp};

/// Length of the masked LRH that starts the hashed bytes.
const LRH_LEN: usize = 8;
/// Size of the stack scratch buffer the masked bytes are copied into. A packet whose hashed bytes
/// (LRH included) fit is hashed with one update (small packets: ACKs, CNPs, atomics, reads);
/// a longer one has its masked headers hashed from here and its payload in place.
const SCRATCH_LEN: usize = 256;
const _: () = assert!(
    SCRATCH_LEN >= LRH_LEN + ipv4::MAX_HEADER_LEN + udp::HEADER_LEN + bth::HEADER_LEN,
    "the scratch buffer holds the longest masked header chain"
);

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

/// IPv4 flags/fragment-offset bits that make a packet a fragment: MF and the 13-bit offset.
const IPV4_FRAGMENT_BITS: u16 = 0x3fff;

fn layout(ip: &[u8]) -> Result<Layout> {
    let first = *ip.first().ok_or(Error::Truncated { need: 1, got: 0 })?;
    // `ip_end`: one past the IP packet, by its own length field.
    let (v4, ip_len, ip_end) = match first >> 4 {
        4 => {
            Error::need(ipv4::HEADER_LEN, ip.len())?;
            let ihl = usize::from(first & 0x0f) * 4;
            if ihl < ipv4::HEADER_LEN {
                return Err(Error::BadHeaderLen { got: ihl });
            }
            if ip[9] != IpProtocol::UDP.0 {
                return Err(Error::BadValue { field: "ip.protocol" });
            }
            // The ICRC covers one whole datagram: a fragment has only part of it.
            if u16::from_be_bytes([ip[6], ip[7]]) & IPV4_FRAGMENT_BITS != 0 {
                return Err(Error::BadValue { field: "ip.fragment" });
            }
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            if total < ihl {
                return Err(Error::BadTotalLen { got: total });
            }
            (true, ihl, total)
        }
        6 => {
            Error::need(ipv6::HEADER_LEN, ip.len())?;
            if ip[6] != IpProtocol::UDP.0 {
                return Err(Error::BadValue { field: "ipv6.next_header" });
            }
            let payload = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            (false, ipv6::HEADER_LEN, ipv6::HEADER_LEN + payload)
        }
        v => return Err(Error::BadVersion { got: v }),
    };
    Error::need(ip_end, ip.len())?;
    if ip_end < ip_len + udp::HEADER_LEN {
        return Err(Error::BadTotalLen { got: ip_end });
    }
    let udp_len = usize::from(u16::from_be_bytes([ip[ip_len + 4], ip[ip_len + 5]]));
    let end = ip_len + udp_len;
    if udp_len < udp::HEADER_LEN + bth::HEADER_LEN + ICRC_LEN || end > ip_end {
        return Err(Error::BadTotalLen { got: udp_len });
    }
    Ok(Layout { ip_len, v4, end })
}

fn crc_of(ip: &[u8], l: &Layout) -> u32 {
    start(ip, l, l.end - ICRC_LEN).0.finalize()
}

/// Hash the LRH and the packet up to `upto` (clamped to the masked headers at least and the
/// ICRC at most); returns the hasher and where it stopped.
fn start(ip: &[u8], l: &Layout, upto: usize) -> (crc32fast::Hasher, usize) {
    // What is hashed after the LRH: the IP header up to `upto`. Copy it whole into the scratch
    // buffer when it fits, else only the headers that get masked (IP, UDP, BTH); mask there;
    // hash the buffer, then whatever was not copied.
    let covered = l.end - ICRC_LEN;
    let hdr_len = l.ip_len + udp::HEADER_LEN + bth::HEADER_LEN;
    let upto = upto.clamp(hdr_len, covered);
    let copied = if LRH_LEN + upto <= SCRATCH_LEN { upto } else { hdr_len };
    let mut buf = [0xffu8; SCRATCH_LEN];
    let m = &mut buf[..LRH_LEN + copied];
    m[LRH_LEN..].copy_from_slice(&ip[..copied]);
    mask_headers(&mut m[LRH_LEN..], l.v4, l.ip_len);

    let mut h = crc32fast::Hasher::new();
    h.update(m);
    h.update(&ip[copied..upto]);
    (h, upto)
}

/// Bytes copied and hashed per step of [`Pending::copy_to`]: small enough that a step's source
/// stays in the L1 cache between the hash and the copy.
const FUSE_CHUNK: usize = 2048;

/// An ICRC check begun over a packet's headers and left open over the rest ([`begin`]), so a
/// receiver can hash the payload while it copies it to its destination ([`Pending::copy_to`]):
/// one pass over the payload instead of a check pass and a copy pass. [`Pending::finish`]
/// hashes whatever was not copied and compares with the carried ICRC.
///
/// Every method takes the packet again (the same bytes [`begin`] was given); the bytes hashed
/// are always the packet's own, in order, so the result is what [`verify`] gives.
#[derive(Debug, Clone)]
pub struct Pending {
    h: crc32fast::Hasher,
    /// Offset in the packet of the next byte to hash.
    next: usize,
    /// Where the ICRC starts (one past the last hashed byte).
    covered: usize,
    /// The ICRC the packet carries.
    carried: u32,
}

/// Begin checking the ICRC of a packet (from its IP header on): its layout is checked as by
/// [`verify`], and the masked headers and the bytes up to `upto` are hashed (`upto` is raised to
/// the end of the BTH and lowered to the start of the ICRC when outside them). Errors as
/// [`compute`].
pub fn begin(ip: &[u8], upto: usize) -> Result<Pending> {
    let l = layout(ip)?;
    let (h, next) = start(ip, &l, upto);
    let covered = l.end - ICRC_LEN;
    let t = &ip[covered..l.end];
    let carried = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
    Ok(Pending { h, next, covered, carried })
}

impl Pending {
    /// Offset in the packet of the next byte to be hashed.
    pub fn next(&self) -> usize {
        self.next
    }

    /// Copy the packet's next `dst.len()` bytes into `dst` and hash them, in one pass (in
    /// cache-sized steps: hash a step, then copy it while it is in the L1 cache).
    ///
    /// Errors: `Truncated` (nothing copied) when those bytes run past the start of the ICRC
    /// or past `ip`.
    pub fn copy_to(&mut self, ip: &[u8], dst: &mut [u8]) -> Result<()> {
        let end = self.next + dst.len();
        if end > self.covered || self.covered > ip.len() {
            return Err(Error::Truncated { need: end, got: self.covered.min(ip.len()) });
        }
        let src = &ip[self.next..end];
        for (d, s) in dst.chunks_mut(FUSE_CHUNK).zip(src.chunks(FUSE_CHUNK)) {
            self.h.update(s);
            d.copy_from_slice(s);
        }
        self.next = end;
        Ok(())
    }

    /// Hash the rest of the packet up to its ICRC and compare: `Err(BadIcrc { expected:
    /// computed, got: carried })` when they differ, `Truncated` when `ip` is shorter than the
    /// packet [`begin`] saw.
    pub fn finish(mut self, ip: &[u8]) -> Result<()> {
        let rest = ip
            .get(self.next..self.covered)
            .ok_or(Error::Truncated { need: self.covered, got: ip.len() })?;
        self.h.update(rest);
        let expected = self.h.finalize();
        if expected == self.carried {
            Ok(())
        } else {
            Err(Error::BadIcrc { expected, got: self.carried })
        }
    }
}

/// Set the variant fields of the IP, UDP and BTH headers at the start of `ip_m` to 1s.
fn mask_headers(ip_m: &mut [u8], v4: bool, ip_len: usize) {
    // IPv4 options (rare on RoCE) are hashed as they are.
    if v4 {
        ip_m[1] = 0xff; // TOS (DSCP, ECN)
        ip_m[8] = 0xff; // TTL
        ip_m[10] = 0xff; // header checksum
        ip_m[11] = 0xff;
    } else {
        ip_m[0] |= 0x0f; // traffic class, high nibble
        ip_m[1] = 0xff; // traffic class low nibble, flow label
        ip_m[2] = 0xff;
        ip_m[3] = 0xff;
        ip_m[7] = 0xff; // hop limit
    }
    let udp_at = ip_len;
    ip_m[udp_at + 6] = 0xff; // UDP checksum
    ip_m[udp_at + 7] = 0xff;
    ip_m[udp_at + udp::HEADER_LEN + bth::CONGESTION_BYTE] = 0xff; // FECN, BECN, reserved
}

/// An ICRC computed piece by piece, for a packet that is not in one buffer (headers in one
/// place, payload in others: a scatter-gather send). Start it with the headers, feed the rest
/// of the hashed bytes (extension headers not in the start buffer, payload, pad) in order, then
/// [`Hasher::finish`]. Gives what [`compute`] gives for the assembled packet.
#[derive(Debug, Clone)]
pub struct Hasher(crc32fast::Hasher);

impl Hasher {
    /// Start with `hdr`: the packet from its IP header on, at least through the BTH (its IP
    /// and UDP length fields already counting what will follow). All of `hdr` is hashed, so it
    /// must end before the ICRC.
    ///
    /// Errors: `Truncated` when `hdr` ends before the BTH does; `BadVersion`, `BadHeaderLen`,
    /// `BadValue` as [`compute`]. Lengths are not checked against the bytes fed later.
    pub fn new(hdr: &[u8]) -> Result<Self> {
        let first = *hdr.first().ok_or(Error::Truncated { need: 1, got: 0 })?;
        let (v4, ip_len) = match first >> 4 {
            4 => {
                Error::need(ipv4::HEADER_LEN, hdr.len())?;
                let ihl = usize::from(first & 0x0f) * 4;
                if ihl < ipv4::HEADER_LEN {
                    return Err(Error::BadHeaderLen { got: ihl });
                }
                if hdr[9] != IpProtocol::UDP.0 {
                    return Err(Error::BadValue { field: "ip.protocol" });
                }
                if u16::from_be_bytes([hdr[6], hdr[7]]) & IPV4_FRAGMENT_BITS != 0 {
                    return Err(Error::BadValue { field: "ip.fragment" });
                }
                (true, ihl)
            }
            6 => {
                Error::need(ipv6::HEADER_LEN, hdr.len())?;
                if hdr[6] != IpProtocol::UDP.0 {
                    return Err(Error::BadValue { field: "ipv6.next_header" });
                }
                (false, ipv6::HEADER_LEN)
            }
            v => return Err(Error::BadVersion { got: v }),
        };
        let masked_len = ip_len + udp::HEADER_LEN + bth::HEADER_LEN;
        Error::need(masked_len, hdr.len())?;
        // Copy as much of `hdr` as fits (always the masked headers) and hash the rest in place.
        let copied = hdr.len().min(SCRATCH_LEN - LRH_LEN);
        let mut buf = [0xffu8; SCRATCH_LEN];
        let m = &mut buf[..LRH_LEN + copied];
        m[LRH_LEN..].copy_from_slice(&hdr[..copied]);
        mask_headers(&mut m[LRH_LEN..], v4, ip_len);
        let mut h = crc32fast::Hasher::new();
        h.update(m);
        h.update(&hdr[copied..]);
        Ok(Hasher(h))
    }

    /// Hash the next bytes of the packet (unmasked: everything after the BTH is hashed as is).
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The ICRC (the trailer holds `crc.to_le_bytes()`).
    pub fn finish(self) -> u32 {
        self.0.finalize()
    }
}

/// Compute the ICRC of a RoCEv2 packet given the bytes from its IP header to (at least) the end
/// of its ICRC. Bytes past the UDP length are ignored. The trailer should hold
/// `crc.to_le_bytes()`.
///
/// Errors: `Truncated` when the buffer ends before the IPv4 total length / IPv6 payload length
/// says; `BadVersion` for an IP version other than 4 or 6; `BadHeaderLen` for an IHL below 5;
/// `BadValue { field: "ip.protocol" }` / `{ field: "ipv6.next_header" }` when the IP protocol /
/// IPv6 next header is not UDP (IPv6 extension headers are not supported, as in rxe);
/// `BadValue { field: "ip.fragment" }` for an IPv4 fragment (MF set or a non-zero offset);
/// `BadTotalLen` when the IP length cannot hold the UDP header (`got`: the IP length) or the UDP
/// length cannot hold a BTH and an ICRC or runs past the IP length (`got`: the UDP length).
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
        v4[3] = 64; // total length 64
        v4[24] = 0;
        v4[25] = 23; // UDP length 23 < 8 + 12 + 4
        assert_eq!(compute(&v4), Err(Error::BadTotalLen { got: 23 }));
        v4[25] = 44; // 20 + 44 = 64: fits
        assert!(compute(&v4).is_ok());
        v4[3] = 80; // total length past the buffer
        assert_eq!(compute(&v4), Err(Error::Truncated { need: 80, got: 64 }));
        v4[3] = 19; // total length below the header
        assert_eq!(compute(&v4), Err(Error::BadTotalLen { got: 19 }));
        v4[3] = 24; // room for only half of the UDP header
        assert_eq!(compute(&v4), Err(Error::BadTotalLen { got: 24 }));
    }

    #[test]
    fn udp_length_past_ip_total_length_is_refused() {
        // IPv4 total length 60, UDP length 44: the datagram would end at 64, past the IP packet
        // (the last 4 bytes are Ethernet padding, not the ICRC).
        let mut v4 = [0u8; 64];
        v4[0] = 0x45;
        v4[3] = 60;
        v4[9] = 17;
        v4[25] = 44;
        assert_eq!(compute(&v4), Err(Error::BadTotalLen { got: 44 }));
        assert_eq!(verify(&v4), Err(Error::BadTotalLen { got: 44 }));
        assert_eq!(fill(&mut v4), Err(Error::BadTotalLen { got: 44 }));
        v4[25] = 40;
        assert!(compute(&v4).is_ok());

        // IPv6 payload length 40, UDP length 44.
        let mut v6 = [0u8; 84];
        v6[0] = 0x60;
        v6[5] = 40;
        v6[6] = 17;
        v6[45] = 44;
        assert_eq!(compute(&v6), Err(Error::BadTotalLen { got: 44 }));
        v6[45] = 40;
        assert!(compute(&v6).is_ok());
        v6[5] = 48; // payload length past the buffer
        assert_eq!(compute(&v6), Err(Error::Truncated { need: 88, got: 84 }));
    }

    #[test]
    fn ipv4_fragments_are_refused() {
        let mut v4 = [0u8; 64];
        v4[0] = 0x45;
        v4[3] = 64;
        v4[9] = 17;
        v4[25] = 44;
        assert!(compute(&v4).is_ok());
        v4[6] = 0x40; // DF: not a fragment
        assert!(compute(&v4).is_ok());
        v4[6] = 0x20; // MF: first fragment
        assert_eq!(compute(&v4), Err(Error::BadValue { field: "ip.fragment" }));
        v4[6] = 0x00;
        v4[7] = 0x01; // offset 8: a later fragment
        assert_eq!(verify(&v4), Err(Error::BadValue { field: "ip.fragment" }));
    }

    #[test]
    fn masked_header_buffer_matches_piecewise_hash() {
        // The one-buffer hash equals hashing the masked pieces one by one (the definition), for
        // IPv4 with options (the longest header) and IPv6.
        // Payloads of 5 bytes (hashed from the scratch buffer) and 300 (headers from there,
        // payload in place).
        for (ip_len, v6, payload) in
            [(60usize, false, 5usize), (40, true, 5), (60, false, 300), (40, true, 300)]
        {
            let n = ip_len + 8 + 12 + payload + 4;
            let mut p = [0u8; 400];
            let p = &mut p[..n];
            p.iter_mut().enumerate().for_each(|(i, b)| *b = (i as u8).wrapping_mul(37));
            if v6 {
                p[0] = 0x6a;
                p[4..6].copy_from_slice(&((n - 40) as u16).to_be_bytes());
                p[6] = 17;
            } else {
                p[0] = 0x4f;
                p[2..4].copy_from_slice(&(n as u16).to_be_bytes());
                p[6] = 0;
                p[7] = 0;
                p[9] = 17;
            }
            p[ip_len + 4..ip_len + 6].copy_from_slice(&((n - ip_len) as u16).to_be_bytes());
            let mut m = p.to_vec();
            let masked: &[usize] = if v6 { &[1, 2, 3, 7] } else { &[1, 8, 10, 11] };
            masked.iter().for_each(|&i| m[i] = 0xff);
            if v6 {
                m[0] |= 0x0f;
            }
            m[ip_len + 6] = 0xff;
            m[ip_len + 7] = 0xff;
            m[ip_len + 8 + 4] = 0xff;
            let mut h = crc32fast::Hasher::new();
            h.update(&[0xff; 8]);
            h.update(&m[..n - 4]);
            assert_eq!(compute(p), Ok(h.finalize()), "v6 {v6} payload {payload}");
            // Piecewise: headers (with some payload) from one slice, the rest in two pieces.
            for cut in [ip_len + 20, ip_len + 23, n - 4] {
                let mut ph = Hasher::new(&p[..cut]).unwrap();
                let mid = cut + (n - 4 - cut) / 2;
                ph.update(&p[cut..mid]);
                ph.update(&p[mid..n - 4]);
                assert_eq!(Ok(ph.finish()), compute(p), "v6 {v6} payload {payload} cut {cut}");
            }
            assert!(Hasher::new(&p[..ip_len + 19]).is_err());
        }
    }
}
