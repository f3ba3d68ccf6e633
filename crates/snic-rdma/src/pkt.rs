//! Building and reading whole RoCEv2 packets: IP (v4 or v6) + UDP (destination port 4791) +
//! BTH + extension headers + payload + pad + ICRC. The engine emits and takes packets from the
//! IP header on; Ethernet framing belongs to the port, and a UDP-socket transport strips and
//! rebuilds the IP and UDP headers (see `snic-io`'s RoCE transport).
//!
//! IPv4 headers are written with identification 0 and DF set (what Linux writes for an
//! unconnected UDP socket with path-MTU discovery on), so the ICRC computed here is also right
//! for packets a kernel socket sends on our behalf.

use std::net::IpAddr;

use snic_dma::AddressSpace;
use snic_wire::ipv4::{self, IpProtocol};
use snic_wire::roce::{self, ICRC_LEN, RocePacket, RoceRepr, bth, icrc};
use snic_wire::{ipv6, udp};

use crate::verbs::MAX_SGE;

/// ECN codepoint ECT(0).
pub const ECN_ECT0: u8 = 0b10;
/// ECN codepoint CE.
pub const ECN_CE: u8 = 0b11;

/// Addresses and marks of the packets of one QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Path {
    /// Local address (the source GID).
    pub src: IpAddr,
    /// Remote address (the destination GID).
    pub dst: IpAddr,
    /// UDP source port ([`sport_for`]).
    pub sport: u16,
    /// UDP destination port (4791 on a real network).
    pub dport: u16,
    /// DSCP (6 bits).
    pub dscp: u8,
    /// ECN codepoint to send with (ECT(0) so switches may mark CE instead of dropping).
    pub ecn: u8,
}

/// The UDP source port of a QP pair: a hash of both QP numbers folded into 0xC000..=0xFFFF
/// (the dynamic range, as RoCEv2 Annex A17.2.1 suggests for entropy across ECMP paths).
pub const fn sport_for(local_qpn: u32, remote_qpn: u32) -> u16 {
    let mut h = (local_qpn as u64) << 32 | remote_qpn as u64;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    0xC000 | (h as u16 & 0x3FFF)
}

/// A buffer this long holds any packet the engine builds (IPv6 + UDP + BTH + the longest
/// extension headers + a 4096-byte payload + ICRC).
pub const MAX_PACKET_LEN: usize = 4096 + 160;

/// Bytes of the IP and UDP headers in front of the BTH.
pub const fn l3l4_len(v6: bool) -> usize {
    (if v6 { ipv6::HEADER_LEN } else { ipv4::HEADER_LEN }) + udp::HEADER_LEN
}

/// Why a packet could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildError {
    /// The buffer is too short for the packet.
    BufferTooSmall {
        /// Bytes needed.
        need: usize,
    },
    /// The headers did not emit (an opcode / header mismatch: a bug).
    Wire(snic_wire::Error),
    /// The payload could not be gathered from memory.
    Payload,
    /// Source and destination are of different IP versions.
    MixedFamilies,
}

impl From<snic_wire::Error> for BuildError {
    fn from(e: snic_wire::Error) -> Self {
        BuildError::Wire(e)
    }
}

/// Total bytes of a packet with these headers and `payload_len` bytes of payload.
pub fn packet_len(path: &Path, roce: &RoceRepr, payload_len: usize) -> Option<usize> {
    Some(l3l4_len(path.src.is_ipv6()) + roce.buffer_len(payload_len)?)
}

/// Where [`emit_headers`] put things.
#[derive(Debug, Clone, Copy)]
struct Emitted {
    v6: bool,
    /// Bytes of IP + UDP.
    hl: usize,
    /// Bytes of BTH + extension headers.
    hdr: usize,
    /// Whole packet length.
    total: usize,
    /// Pad bytes after the payload.
    pad: usize,
}

/// Write the IP, UDP, BTH and extension headers of a packet with `payload_len` payload bytes
/// into `buf` (which must hold the whole packet); the UDP checksum is left zero.
fn emit_headers(
    buf: &mut [u8],
    path: &Path,
    roce: &RoceRepr,
    payload_len: usize,
) -> Result<Emitted, BuildError> {
    let v6 = match (path.src, path.dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => false,
        (IpAddr::V6(_), IpAddr::V6(_)) => true,
        _ => return Err(BuildError::MixedFamilies),
    };
    let hl = l3l4_len(v6);
    let roce_len =
        roce.buffer_len(payload_len).ok_or(snic_wire::Error::BadOpcode { got: roce.bth.opcode })?;
    let total = hl + roce_len;
    if buf.len() < total {
        return Err(BuildError::BufferTooSmall { need: total });
    }
    let pkt = &mut buf[..total];
    // RoCE headers: emit with an empty payload, then place the payload and pad by hand so the
    // payload is gathered straight from memory into the packet (one copy) or not at all.
    let r = &mut pkt[hl..];
    let info = roce.bth.info().ok_or(snic_wire::Error::BadOpcode { got: roce.bth.opcode })?;
    let hdr = bth::HEADER_LEN + info.ext_len();
    match info.fixed_payload_len() {
        None => {}
        // Opcodes without payload (ACK, atomic ACK, READ request, atomics, FLUSH, CNP) and
        // RC ATOMIC WRITE (exactly its 8 bytes).
        Some(n) if payload_len == n => {}
        Some(_) => {
            return Err(BuildError::Wire(snic_wire::Error::BadTotalLen { got: payload_len }));
        }
    }
    // An opcode with a fixed payload (RC ATOMIC WRITE) is emitted with zeros there, which the
    // caller's payload then replaces.
    let fixed = info.fixed_payload_len().unwrap_or(0);
    let zeros = [0u8; roce::opcode::ATOMIC_WRITE_LEN];
    let stand_in = zeros.get(..fixed).ok_or(snic_wire::Error::BadTotalLen { got: fixed })?;
    roce.emit(&mut r[..hdr + fixed + ICRC_LEN], stand_in)?;
    let pad = roce::packet::pad_for(payload_len);
    bth::Header::new_unchecked(&mut r[..bth::HEADER_LEN]).set_pad_count(pad as u8);
    // IP and UDP.
    let udp_len = udp::HEADER_LEN + roce_len;
    match (path.src, path.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut ip = ipv4::Repr::new(s, d, IpProtocol::UDP, udp_len);
            ip.dscp = path.dscp & 0x3f;
            ip.ecn = path.ecn & 3;
            let mut p = ipv4::Packet::new_unchecked(&mut pkt[..]);
            ip.emit(&mut p);
            p.fill_checksum();
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let ip = ipv6::Repr {
                src_addr: s,
                dst_addr: d,
                next_header: IpProtocol::UDP,
                payload_len: udp_len,
                hop_limit: 64,
                traffic_class: (path.dscp << 2) | (path.ecn & 3),
                flow_label: 0,
            };
            ip.emit(&mut ipv6::Packet::new_unchecked(&mut pkt[..]));
        }
        _ => return Err(BuildError::MixedFamilies),
    }
    let ipl = hl - udp::HEADER_LEN;
    let u = udp::Repr { src_port: path.sport, dst_port: path.dport, payload_len: roce_len };
    let mut up = udp::Packet::new_unchecked(&mut pkt[ipl..]);
    u.emit(&mut up);
    Ok(Emitted { v6, hl, hdr, total, pad })
}

/// Build one packet into `buf` and return its length. `fill` writes exactly `payload_len`
/// payload bytes into the slice it is given (gathered from memory, usually); an `Err` from it
/// aborts the build with [`BuildError::Payload`].
pub fn build<E>(
    buf: &mut [u8],
    path: &Path,
    roce: &RoceRepr,
    payload_len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<usize, BuildError> {
    let e = emit_headers(buf, path, roce, payload_len)?;
    let (total, pad) = (e.total, e.pad);
    let pkt = &mut buf[..total];
    let r = &mut pkt[e.hl..];
    let hdr = e.hdr;
    fill(&mut r[hdr..hdr + payload_len]).map_err(|_| BuildError::Payload)?;
    r[hdr + payload_len..hdr + payload_len + pad].fill(0);
    // The ICRC masks the UDP checksum, so the ICRC goes first and the checksum (IPv6 forbids
    // a zero one) then covers the finished datagram, ICRC included.
    icrc::fill(pkt)?;
    if e.v6 {
        let ipl = e.hl - udp::HEADER_LEN;
        udp::Packet::new_unchecked(&mut pkt[ipl..]).fill_checksum(&path.src, &path.dst);
    }
    Ok(total)
}

/// A packet built for a scatter-gather send: its headers (IP through the extension headers)
/// lie at the start of the buffer given to [`build_sg`], its payload is `payload()` (ranges of
/// engine memory, in order), then come `trailer()` (pad and ICRC).
///
/// For IPv6 the UDP checksum in the headers is left zero: a kernel socket computes its own,
/// and [`TxSg::assemble`] fills it in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxSg {
    /// Header bytes at the start of the buffer.
    pub hdr_len: usize,
    /// Whole packet length (headers + payload + trailer).
    pub len: usize,
    /// Payload ranges (engine address, length); the first `npayload` are used.
    pub ranges: [(u64, u32); MAX_SGE],
    /// Ranges in use.
    pub npayload: usize,
    /// Pad bytes then the ICRC; the first `trailer_len` are used.
    pub trailer: [u8; 8],
    /// Trailer bytes in use.
    pub trailer_len: usize,
}

impl TxSg {
    /// The payload ranges (engine address, length).
    pub fn payload(&self) -> &[(u64, u32)] {
        &self.ranges[..self.npayload]
    }

    /// The pad and ICRC bytes that end the packet.
    pub fn trailer(&self) -> &[u8] {
        &self.trailer[..self.trailer_len]
    }

    /// Copy the payload (from `mem`) and the trailer behind the headers in `buf`, making the
    /// whole packet there (with its IPv6 UDP checksum). Returns its length; `None` when `buf`
    /// is too short or a range is not readable memory.
    pub fn assemble(&self, mem: &AddressSpace, buf: &mut [u8]) -> Option<usize> {
        let pkt = buf.get_mut(..self.len)?;
        let mut at = self.hdr_len;
        for &(addr, len) in self.payload() {
            let src = mem.slice(addr, len as usize).ok()?;
            pkt.get_mut(at..at + src.len())?.copy_from_slice(src);
            at += src.len();
        }
        pkt.get_mut(at..at + self.trailer_len)?.copy_from_slice(self.trailer());
        if at + self.trailer_len != self.len {
            return None;
        }
        if pkt.first()? >> 4 == 6 {
            let ip = ipv6::Packet::new_unchecked(&pkt[..]);
            let (s, d) = (IpAddr::V6(ip.src_addr()), IpAddr::V6(ip.dst_addr()));
            udp::Packet::new_unchecked(&mut pkt[ipv6::HEADER_LEN..]).fill_checksum(&s, &d);
        }
        Some(self.len)
    }
}

/// Build the headers of one packet into `buf` (which must have room for the whole packet, so
/// that [`TxSg::assemble`] can complete it there) for a scatter-gather send. `feed` hashes the
/// `payload_len` payload bytes, in order, into the ICRC and records where they are in the
/// returned [`TxSg`]'s ranges (setting `npayload`); an `Err` from it aborts the build with
/// [`BuildError::Payload`].
pub fn build_sg<E>(
    buf: &mut [u8],
    path: &Path,
    roce: &RoceRepr,
    payload_len: usize,
    feed: impl FnOnce(&mut icrc::Hasher, &mut TxSg) -> Result<(), E>,
) -> Result<TxSg, BuildError> {
    let e = emit_headers(buf, path, roce, payload_len)?;
    let hdr_len = e.hl + e.hdr;
    let mut h = icrc::Hasher::new(&buf[..hdr_len])?;
    let mut sg = TxSg {
        hdr_len,
        len: e.total,
        ranges: [(0, 0); MAX_SGE],
        npayload: 0,
        trailer: [0; 8],
        trailer_len: e.pad + ICRC_LEN,
    };
    feed(&mut h, &mut sg).map_err(|_| BuildError::Payload)?;
    h.update(&[0; 3][..e.pad]);
    sg.trailer[e.pad..e.pad + ICRC_LEN].copy_from_slice(&h.finish().to_le_bytes());
    Ok(sg)
}

/// A received RoCEv2 packet, checked (IP, UDP port, ICRC) and walked.
#[derive(Debug, Clone, Copy)]
pub struct RxPkt<'a> {
    /// Its payload is already in place (written while its ICRC was checked: [`OpenPkt`]);
    /// whoever would write it skips the copy (the rights and bounds were checked before).
    pub placed: bool,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// UDP source port.
    pub sport: u16,
    /// The IP header carried ECN CE.
    pub ce: bool,
    /// The RoCE headers and payload.
    pub roce: RocePacket<'a>,
}

impl RxPkt<'_> {
    /// The BTH.
    pub fn bth(&self) -> &bth::Repr {
        self.roce.bth()
    }
    /// The payload (after the extension headers, before the pad).
    pub fn payload(&self) -> &[u8] {
        self.roce.payload()
    }
}

/// Why a received packet was dropped (each has a counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxError {
    /// Not IPv4/IPv6 + UDP, or truncated / inconsistent lengths, or fragmented.
    Malformed,
    /// UDP destination port is not the RoCEv2 port.
    NotRoce,
    /// The ICRC does not match.
    BadIcrc,
    /// BTH / extension headers do not parse.
    BadHeaders,
}

/// Check and walk one packet that starts at its IP header. `dport` is the UDP port RoCE
/// listens on (4791).
pub fn parse(ip: &[u8], dport: u16) -> Result<RxPkt<'_>, RxError> {
    parse_open(ip, dport)?.verify()
}

/// A received packet walked, with its ICRC check begun over the headers and still open over
/// the payload ([`parse_open`]). Nothing may act on it before the check is done: either
/// [`OpenPkt::verify`] (hash the payload in place), or [`OpenPkt::place`] (copy the payload
/// to its destination and hash it in the same pass, then compare).
#[derive(Debug, Clone)]
pub struct OpenPkt<'a> {
    pkt: RxPkt<'a>,
    ip: &'a [u8],
    icrc: icrc::Pending,
    /// Offset of the payload in `ip`.
    payload_at: usize,
}

impl<'a> OpenPkt<'a> {
    /// The packet, to look at before its ICRC is checked (never to act on).
    pub fn peek(&self) -> &RxPkt<'a> {
        &self.pkt
    }

    /// Finish the ICRC check over the payload in place.
    pub fn verify(self) -> Result<RxPkt<'a>, RxError> {
        match self.icrc.finish(self.ip) {
            Ok(()) => Ok(self.pkt),
            Err(snic_wire::Error::BadIcrc { .. }) => Err(RxError::BadIcrc),
            Err(_) => Err(RxError::Malformed),
        }
    }

    /// Copy the payload into the destinations `write` is handed, hashing it in the same pass,
    /// then finish the ICRC check. `write(copy)` calls `copy(dst)` for consecutive pieces of
    /// the payload, in order, each `dst` the place the next `dst.len()` bytes belong; it
    /// returns false when it could not place them all (then the check is finished in place).
    ///
    /// On `Ok` the packet comes back marked [`RxPkt::placed`] when the whole payload was
    /// placed. On `Err(BadIcrc)` the bytes copied are garbage in the places `write` chose: a
    /// caller places only what a good copy of the same packet would overwrite.
    pub fn place(
        mut self,
        write: impl FnOnce(&mut dyn FnMut(&mut [u8]) -> bool) -> bool,
    ) -> Result<RxPkt<'a>, RxError> {
        let (ip, at, len) = (self.ip, self.payload_at, self.pkt.payload().len());
        let mut fed = 0usize;
        let icrc = &mut self.icrc;
        let mut copy = |dst: &mut [u8]| {
            if fed + dst.len() > len || icrc.copy_to(ip, dst).is_err() {
                return false;
            }
            fed += dst.len();
            true
        };
        let all = write(&mut copy) && fed == len && self.icrc.next() == at + len;
        let mut pkt = self.verify()?;
        pkt.placed = all;
        Ok(pkt)
    }
}

/// [`parse`] with the ICRC check left open over the payload (see [`OpenPkt`]).
pub fn parse_open(ip: &[u8], dport: u16) -> Result<OpenPkt<'_>, RxError> {
    let first = *ip.first().ok_or(RxError::Malformed)?;
    let (src, dst, ecn, l4_at, l4) = match first >> 4 {
        4 => {
            let p = ipv4::Packet::new_checked(ip).map_err(|_| RxError::Malformed)?;
            if p.protocol() != IpProtocol::UDP {
                return Err(RxError::Malformed);
            }
            let (hl, tl) = (p.header_len(), usize::from(p.total_len()));
            if tl > ip.len() || tl < hl {
                return Err(RxError::Malformed);
            }
            (IpAddr::V4(p.src_addr()), IpAddr::V4(p.dst_addr()), p.ecn(), hl, &ip[hl..tl])
        }
        6 => {
            let p = ipv6::Packet::new_checked(ip).map_err(|_| RxError::Malformed)?;
            if p.next_header() != IpProtocol::UDP {
                return Err(RxError::Malformed);
            }
            let end = ipv6::HEADER_LEN + usize::from(p.payload_len());
            if end > ip.len() {
                return Err(RxError::Malformed);
            }
            (
                IpAddr::V6(p.src_addr()),
                IpAddr::V6(p.dst_addr()),
                p.ecn(),
                ipv6::HEADER_LEN,
                &ip[ipv6::HEADER_LEN..end],
            )
        }
        _ => return Err(RxError::Malformed),
    };
    let u = udp::Packet::new_checked(l4).map_err(|_| RxError::Malformed)?;
    let ul = usize::from(u.len());
    if ul < udp::HEADER_LEN || ul > l4.len() {
        return Err(RxError::Malformed);
    }
    if u.dst_port() != dport {
        return Err(RxError::NotRoce);
    }
    let sport = u.src_port();
    let roce = RocePacket::parse(&l4[udp::HEADER_LEN..ul]);
    // The payload's offset; the check is begun up to it (headers only when the RoCE headers
    // do not parse: the ICRC is still checked first, as it decides the drop's counter).
    let payload_at = l4_at + udp::HEADER_LEN + roce.as_ref().map_or(0, |r| r.header_len());
    let icrc = match icrc::begin(ip, payload_at) {
        Ok(p) => p,
        Err(snic_wire::Error::BadIcrc { .. }) => return Err(RxError::BadIcrc),
        Err(_) => return Err(RxError::Malformed),
    };
    let roce = match roce {
        Ok(r) => r,
        Err(_) => {
            // A bad ICRC is counted before unparsable headers.
            return match icrc.finish(ip) {
                Ok(()) => Err(RxError::BadHeaders),
                Err(snic_wire::Error::BadIcrc { .. }) => Err(RxError::BadIcrc),
                Err(_) => Err(RxError::Malformed),
            };
        }
    };
    let pkt = RxPkt { placed: false, src, dst, sport, ce: ecn == ECN_CE, roce };
    Ok(OpenPkt { pkt, ip, icrc, payload_at })
}

#[cfg(test)]
mod tests {
    use super::*;
    use snic_wire::roce::ext::RethRepr;
    use snic_wire::roce::opcode;

    fn path(v6: bool) -> Path {
        let (src, dst) = if v6 {
            ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap())
        } else {
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap())
        };
        Path {
            src,
            dst,
            sport: sport_for(0x11, 0x22),
            dport: roce::UDP_PORT,
            dscp: 26,
            ecn: ECN_ECT0,
        }
    }

    #[test]
    fn build_then_parse_v4_v6() {
        for v6 in [false, true] {
            let p = path(v6);
            let mut r = RoceRepr::new(bth::Repr {
                opcode: opcode::RC_RDMA_WRITE_ONLY,
                solicited: false,
                mig_req: false,
                pad_count: 0,
                pkey: bth::PKEY_DEFAULT,
                fecn: false,
                becn: false,
                dest_qp: 0x22,
                ack_req: true,
                psn: 0xff_fffe,
            });
            r.reth = Some(RethRepr { va: 0x1000, rkey: 0xabcd, dma_len: 5 });
            let mut buf = [0u8; 256];
            let n = build(&mut buf, &p, &r, 5, |b: &mut [u8]| -> Result<(), ()> {
                b.copy_from_slice(b"hello");
                Ok(())
            })
            .unwrap();
            assert_eq!(n, packet_len(&p, &r, 5).unwrap());
            let rx = parse(&buf[..n], roce::UDP_PORT).unwrap();
            assert_eq!(rx.payload(), b"hello");
            assert_eq!(rx.bth().psn, 0xff_fffe);
            assert_eq!(rx.bth().pad_count, 3);
            assert_eq!(rx.sport, p.sport);
            assert!(!rx.ce);
            // One flipped payload bit: ICRC error.
            let mut bad = buf;
            bad[n - 8] ^= 1;
            assert_eq!(parse(&bad[..n], roce::UDP_PORT).unwrap_err(), RxError::BadIcrc);
            // Wrong port.
            assert_eq!(parse(&buf[..n], 4792).unwrap_err(), RxError::NotRoce);
            // Truncations never panic.
            for cut in 0..n {
                assert!(parse(&buf[..cut], roce::UDP_PORT).is_err());
            }
        }
    }

    #[test]
    fn build_sg_matches_build() {
        let mut mem = AddressSpace::new();
        let base = 0x1_0000u64;
        let host = snic_dma::HostAddr::new(base).unwrap();
        mem.map_host(host, Box::new(vec![0u8; 4096])).unwrap();
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
        mem.slice_mut(base, 300).unwrap().copy_from_slice(&data);
        for v6 in [false, true] {
            for len in [0usize, 1, 5, 299] {
                let p = path(v6);
                let op = if len == 0 { opcode::RC_RDMA_WRITE_ONLY } else { opcode::RC_SEND_ONLY };
                let mut r = RoceRepr::new(bth::Repr {
                    opcode: op,
                    solicited: false,
                    mig_req: false,
                    pad_count: 0,
                    pkey: bth::PKEY_DEFAULT,
                    fecn: false,
                    becn: false,
                    dest_qp: 0x22,
                    ack_req: true,
                    psn: 7,
                });
                if op == opcode::RC_RDMA_WRITE_ONLY {
                    r.reth = Some(RethRepr { va: 0x1000, rkey: 0xabcd, dma_len: len as u32 });
                }
                let mut want = [0u8; 512];
                let n = build(&mut want, &p, &r, len, |b: &mut [u8]| -> Result<(), ()> {
                    b.copy_from_slice(&data[..len]);
                    Ok(())
                })
                .unwrap();
                let mut got = [0u8; 512];
                let sg = build_sg(&mut got, &p, &r, len, |h, sg| -> Result<(), ()> {
                    // Two pieces, to check the ranges are walked in order.
                    let cut = len / 2;
                    for (a, l) in [(base, cut), (base + cut as u64, len - cut)] {
                        if l > 0 {
                            h.update(mem.slice(a, l).unwrap());
                            sg.ranges[sg.npayload] = (a, l as u32);
                            sg.npayload += 1;
                        }
                    }
                    Ok(())
                })
                .unwrap();
                assert_eq!(sg.len, n);
                assert_eq!(&sg.trailer()[sg.trailer_len - 4..], &want[n - 4..n]);
                assert_eq!(sg.assemble(&mem, &mut got), Some(n));
                assert_eq!(&got[..n], &want[..n], "v6 {v6} len {len}");
                assert_eq!(sg.assemble(&mem, &mut got[..n - 1]), None);
            }
        }
    }

    #[test]
    fn sport_in_dynamic_range() {
        for q in 0..1000 {
            assert!(sport_for(q, q * 7 + 1) >= 0xC000);
        }
        assert_ne!(sport_for(1, 2), sport_for(2, 1));
    }
}
