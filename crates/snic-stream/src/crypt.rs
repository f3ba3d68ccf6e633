//! `crypt`: encrypt or decrypt UDP payloads with ChaCha20-Poly1305 (RFC 8439, the RustCrypto
//! `chacha20poly1305` crate), keys from the control plane.
//!
//! # On the wire
//!
//! An encrypted packet keeps its Ethernet, IP and UDP headers; its UDP payload becomes
//!
//! ```text
//! +------+------------------+--------------------------+-----------+
//! | slot | nonce (12 bytes) | ciphertext (= plaintext) | tag (16)  |
//! +------+------------------+--------------------------+-----------+
//! ```
//!
//! 29 bytes longer than the plaintext. `slot` (0..=3) names the key; it is the associated
//! data, so a changed slot fails authentication. The nonce is `salt (4 bytes) || counter (8
//! bytes, big-endian)`: the salt is chosen per process by the I/O layer (random), the counter
//! starts at `worker << 48` and counts packets, so two workers or two runs under one key do
//! not repeat a nonce (two runs repeat one only if their random salts collide, one chance in
//! 2^32 per pair of runs: rotate keys, `snic stream key`, well before that matters). The
//! UDP length, the IPv4 total length and header checksum or the IPv6 payload length are
//! fixed, and the UDP checksum is computed over the new datagram (IPv4 and IPv6 alike).
//!
//! # What it takes
//!
//! Outermost IPv4 or IPv6 UDP datagrams that are not fragments, not RoCEv2 (its ICRC covers
//! the payload) and, with `port` set, to that destination port. Everything else passes
//! untouched. Drops, each under one reason: no key in the slot (`kernel_no_key`: never sent
//! in the clear), a grown packet above `mtu` or the buffer's room, or a super-packet
//! (`too_big`), and on decryption a payload shorter than 29 bytes, an unknown slot or a tag
//! that does not verify (`kernel_auth`).
//!
//! Registers: 0 `mode` (0 encrypt, 1 decrypt), 1 `slot` (the slot encryption uses), 2 `port`
//! (0: every UDP datagram), 3 `mtu` (largest IP packet after growth), 4 `keys` (ro: bit i set
//! when slot i holds a key), 5 `packets` (ro: packets transformed, low 32 bits).

use crate::kernel::{Access, Emit, KernelError, RegInfo, StreamKernel, Verdict};
use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{ChaCha20Poly1305, Key, KeyInit, Nonce, Tag};
use core::net::{IpAddr, Ipv6Addr};
use snic_pipeline::{DropReason, PacketBuf};
use snic_time::Instant;
use snic_wire::Error as WireError;
use snic_wire::stack::Layer;

/// Key slots.
pub const SLOTS: usize = 4;
/// Key length (ChaCha20-Poly1305).
pub const KEY_LEN: usize = 32;
/// Bytes before the ciphertext: slot and nonce.
pub const HEADER_LEN: usize = 13;
/// Bytes of the tag.
pub const TAG_LEN: usize = 16;
/// Bytes an encrypted payload adds.
pub const OVERHEAD: usize = HEADER_LEN + TAG_LEN;
/// Default `mtu`.
pub const DEFAULT_MTU: u32 = 1500;

/// Register numbers.
pub mod reg {
    /// 0 encrypt, 1 decrypt.
    pub const MODE: u32 = 0;
    /// The key slot encryption uses.
    pub const SLOT: u32 = 1;
    /// Destination port to transform (0: all).
    pub const PORT: u32 = 2;
    /// Largest IP packet after growth.
    pub const MTU: u32 = 3;
    /// Bit i: slot i holds a key.
    pub const KEYS: u32 = 4;
    /// Packets transformed (low 32 bits).
    pub const PACKETS: u32 = 5;
}

const REGS: &[RegInfo] = &[
    RegInfo { name: "mode", access: Access::ReadWrite, doc: "0 encrypt, 1 decrypt" },
    RegInfo { name: "slot", access: Access::ReadWrite, doc: "key slot encryption uses (0..=3)" },
    RegInfo {
        name: "port",
        access: Access::ReadWrite,
        doc: "UDP destination port to transform (0: all)",
    },
    RegInfo {
        name: "mtu",
        access: Access::ReadWrite,
        doc: "largest IP packet after encryption (68..=65535)",
    },
    RegInfo { name: "keys", access: Access::ReadOnly, doc: "bit i set: slot i holds a key" },
    RegInfo { name: "packets", access: Access::ReadOnly, doc: "packets transformed (low 32 bits)" },
];

/// Encrypt or decrypt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Plaintext in, ciphertext out.
    Encrypt,
    /// Ciphertext in (verified), plaintext out.
    Decrypt,
}

/// The crypt kernel (see the module doc).
pub struct Crypt {
    mode: Mode,
    slot: u8,
    port: u16,
    mtu: u32,
    keys: [Option<ChaCha20Poly1305>; SLOTS],
    salt: [u8; 4],
    counter: u64,
    packets: u64,
}

impl core::fmt::Debug for Crypt {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Never the keys.
        f.debug_struct("Crypt")
            .field("mode", &self.mode)
            .field("slot", &self.slot)
            .field("port", &self.port)
            .field("mtu", &self.mtu)
            .field("keys", &self.keys_mask())
            .finish_non_exhaustive()
    }
}

/// Parse a key written as 64 hex digits.
pub fn parse_key(hex: &str) -> Result<[u8; KEY_LEN], KernelError> {
    let hex = hex.trim();
    let bad = || KernelError::BadKey(format!("a key is {} hex digits", 2 * KEY_LEN));
    if hex.len() != 2 * KEY_LEN || !hex.is_ascii() {
        return Err(bad());
    }
    let mut k = [0u8; KEY_LEN];
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(k)
}

/// Where the datagram sits in the frame.
struct Udp {
    v4: bool,
    l3: usize,
    l4: usize,
    /// UDP length (header and payload).
    len: usize,
}

impl Crypt {
    /// A kernel in `mode` with no keys; nonces start at `worker << 48` under `salt`.
    pub fn new(mode: Mode, worker: u32, salt: [u8; 4]) -> Crypt {
        Crypt {
            mode,
            slot: 0,
            port: 0,
            mtu: DEFAULT_MTU,
            keys: Default::default(),
            salt,
            counter: u64::from(worker & 0xffff) << 48,
            packets: 0,
        }
    }

    /// Build from stage arguments: `mode=encrypt|decrypt` (required), `key=HEX` (slot 0, or
    /// the slot `slot=N` names), `slot=N`, `port=N`, `mtu=N`.
    pub fn from_args(
        args: &[(String, String)],
        worker: u32,
        salt: [u8; 4],
    ) -> Result<Crypt, KernelError> {
        let bad = |k: &str, why: &str| KernelError::BadArg { key: k.into(), why: why.into() };
        let mut mode = None;
        let mut key = None;
        let mut c = Crypt::new(Mode::Encrypt, worker, salt);
        for (k, v) in args {
            let num = |max: u32| -> Result<u32, KernelError> {
                v.parse::<u32>()
                    .ok()
                    .filter(|n| *n <= max)
                    .ok_or_else(|| bad(k, &format!("{v:?} is not a number in 0..={max}")))
            };
            match k.as_str() {
                "mode" => {
                    mode = Some(match v.as_str() {
                        "encrypt" => Mode::Encrypt,
                        "decrypt" => Mode::Decrypt,
                        _ => return Err(bad(k, "encrypt or decrypt")),
                    })
                }
                "key" => key = Some(parse_key(v)?),
                "slot" => c.write_reg(reg::SLOT, num(SLOTS as u32 - 1)?)?,
                "port" => c.write_reg(reg::PORT, num(65535)?)?,
                "mtu" => c.write_reg(reg::MTU, num(65535)?)?,
                _ => return Err(bad(k, "crypt takes mode, key, slot, port, mtu")),
            }
        }
        c.mode = mode.ok_or_else(|| bad("mode", "crypt needs mode=encrypt or mode=decrypt"))?;
        if let Some(k) = key {
            c.set_key(u32::from(c.slot), &k)?;
        }
        Ok(c)
    }

    fn keys_mask(&self) -> u32 {
        self.keys.iter().enumerate().filter(|(_, k)| k.is_some()).map(|(i, _)| 1 << i).sum()
    }

    /// The outer UDP datagram this kernel transforms, if `pkt` carries one.
    fn udp(&self, pkt: &PacketBuf) -> Option<Udp> {
        let s = &pkt.meta.stack;
        if s.tunnel.is_some() || s.bth.is_some() {
            return None;
        }
        let (l3, l3_at) = s.outer.l3?;
        let v4 = match l3 {
            Layer::Ipv4 => true,
            Layer::Ipv6 => false,
            _ => return None,
        };
        let (Layer::Udp, l4) = s.outer.l4? else { return None };
        let (l3, l4) = (usize::from(l3_at), usize::from(l4));
        let f = pkt.data();
        let hdr = f.get(l4..l4 + 8)?;
        if self.port != 0 && u16::from_be_bytes([hdr[2], hdr[3]]) != self.port {
            return None;
        }
        let len = usize::from(u16::from_be_bytes([hdr[4], hdr[5]]));
        if len < 8 || l4 + len > f.len() || l4 < l3 + if v4 { 20 } else { 40 } {
            return None;
        }
        Some(Udp { v4, l3, l4, len })
    }

    fn encrypt(&mut self, pkt: &mut PacketBuf, u: &Udp) -> Verdict {
        let Some(cipher) = &self.keys[usize::from(self.slot)] else {
            return Verdict::Drop(DropReason::KernelNoKey);
        };
        let end = u.l4 + u.len;
        let ip_len = end - u.l3;
        if ip_len + OVERHEAD > self.mtu as usize || u.len + OVERHEAD > usize::from(u16::MAX) {
            return Verdict::Drop(DropReason::TooBig);
        }
        // Ethernet padding after the datagram goes: the frame ends where the datagram does.
        pkt.truncate(end);
        if pkt.push_back(OVERHEAD).is_err() {
            return Verdict::Drop(DropReason::TooBig);
        }
        let mut nonce = [0u8; 12];
        nonce[..4].copy_from_slice(&self.salt);
        nonce[4..].copy_from_slice(&self.counter.to_be_bytes());
        self.counter = self.counter.wrapping_add(1);
        let f = pkt.data_mut();
        let p = u.l4 + 8;
        let n = u.len - 8;
        f.copy_within(p..p + n, p + HEADER_LEN);
        f[p] = self.slot;
        f[p + 1..p + HEADER_LEN].copy_from_slice(&nonce);
        let (head, rest) = f.split_at_mut(p + HEADER_LEN);
        let aad = [head[p]];
        match cipher.encrypt_in_place_detached(Nonce::from_slice(&nonce), &aad, &mut rest[..n]) {
            Ok(tag) => rest[n..n + TAG_LEN].copy_from_slice(&tag),
            // Only for payloads beyond ChaCha20's 256 GiB limit: not a packet.
            Err(_) => return Verdict::Drop(DropReason::TooBig),
        }
        self.packets += 1;
        fix_headers(pkt, u, u.len + OVERHEAD)
    }

    fn decrypt(&mut self, pkt: &mut PacketBuf, u: &Udp) -> Verdict {
        let p = u.l4 + 8;
        let total = u.len - 8;
        if total < OVERHEAD {
            return Verdict::Drop(DropReason::KernelAuth);
        }
        let n = total - OVERHEAD;
        let f = pkt.data_mut();
        let slot = f[p];
        let Some(slot_key) = self.keys.get(usize::from(slot)) else {
            return Verdict::Drop(DropReason::KernelAuth);
        };
        let Some(cipher) = slot_key else { return Verdict::Drop(DropReason::KernelNoKey) };
        let mut nonce = [0u8; 12];
        nonce.copy_from_slice(&f[p + 1..p + HEADER_LEN]);
        let (_, rest) = f.split_at_mut(p + HEADER_LEN);
        let (ct, tail) = rest.split_at_mut(n);
        let tag = Tag::clone_from_slice(&tail[..TAG_LEN]);
        if cipher.decrypt_in_place_detached(Nonce::from_slice(&nonce), &[slot], ct, &tag).is_err() {
            return Verdict::Drop(DropReason::KernelAuth);
        }
        f.copy_within(p + HEADER_LEN..p + HEADER_LEN + n, p);
        pkt.truncate(p + n);
        self.packets += 1;
        fix_headers(pkt, u, u.len - OVERHEAD)
    }
}

/// Set the UDP length to `udp_len`, fix the IP length (and the IPv4 header checksum) and
/// compute the UDP checksum over the new datagram.
fn fix_headers(pkt: &mut PacketBuf, u: &Udp, udp_len: usize) -> Verdict {
    let malformed = Verdict::Drop(DropReason::Malformed(WireError::BadValue { field: "length" }));
    let f = pkt.data_mut();
    let Ok(udp_len16) = u16::try_from(udp_len) else { return malformed };
    // The IP length first (raw bytes): the checked views below compare it with the buffer.
    let (ip_len, at) =
        if u.v4 { (u.l4 - u.l3 + udp_len, 2) } else { (u.l4 - u.l3 - 40 + udp_len, 4) };
    let Ok(ip_len) = u16::try_from(ip_len) else { return malformed };
    let Some(field) = f.get_mut(u.l3 + at..u.l3 + at + 2) else { return malformed };
    field.copy_from_slice(&ip_len.to_be_bytes());
    let (src, dst) = if u.v4 {
        let Ok(mut ip) = snic_wire::ipv4::Packet::new_checked(&mut f[u.l3..]) else {
            return malformed;
        };
        ip.fill_checksum();
        (IpAddr::V4(ip.src_addr()), IpAddr::V4(ip.dst_addr()))
    } else {
        let Some(h) = f.get(u.l3..u.l3 + 40) else { return malformed };
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&h[8..24]);
        d.copy_from_slice(&h[24..40]);
        (IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d)))
    };
    let Some(dgram) = f.get_mut(u.l4..u.l4 + udp_len) else { return malformed };
    dgram[4..6].copy_from_slice(&udp_len16.to_be_bytes());
    let Ok(mut udp) = snic_wire::udp::Packet::new_checked(dgram) else { return malformed };
    udp.fill_checksum(&src, &dst);
    pkt.meta.offload.csum_partial = None;
    Verdict::Pass
}

impl StreamKernel for Crypt {
    fn name(&self) -> &'static str {
        "crypt"
    }

    fn process(&mut self, _now: Instant, pkt: &mut PacketBuf, _emit: &mut Emit<'_>) -> Verdict {
        let Some(u) = self.udp(pkt) else { return Verdict::Pass };
        if pkt.meta.offload.gso.is_some() {
            return Verdict::Drop(DropReason::TooBig);
        }
        if u.v4 && is_fragment_v4(pkt.data(), u.l3) {
            return Verdict::Pass;
        }
        match self.mode {
            Mode::Encrypt => self.encrypt(pkt, &u),
            Mode::Decrypt => self.decrypt(pkt, &u),
        }
    }

    fn registers(&self) -> &'static [RegInfo] {
        REGS
    }

    fn read_reg(&self, idx: u32) -> Option<u32> {
        Some(match idx {
            reg::MODE => u32::from(self.mode == Mode::Decrypt),
            reg::SLOT => u32::from(self.slot),
            reg::PORT => u32::from(self.port),
            reg::MTU => self.mtu,
            reg::KEYS => self.keys_mask(),
            reg::PACKETS => self.packets as u32,
            _ => return None,
        })
    }

    fn write_reg(&mut self, idx: u32, value: u32) -> Result<(), KernelError> {
        let info = REGS.get(idx as usize).ok_or(KernelError::NoRegister(idx))?;
        let bad = |why| KernelError::BadValue { reg: info.name, value, why };
        match idx {
            reg::MODE => {
                self.mode = match value {
                    0 => Mode::Encrypt,
                    1 => Mode::Decrypt,
                    _ => return Err(bad("takes 0 (encrypt) or 1 (decrypt)")),
                }
            }
            reg::SLOT => {
                self.slot = u8::try_from(value)
                    .ok()
                    .filter(|s| usize::from(*s) < SLOTS)
                    .ok_or_else(|| bad("takes a slot 0..=3"))?
            }
            reg::PORT => self.port = u16::try_from(value).map_err(|_| bad("takes 0..=65535"))?,
            reg::MTU if (68..=65535).contains(&value) => self.mtu = value,
            reg::MTU => return Err(bad("takes 68..=65535")),
            _ => return Err(KernelError::ReadOnly(info.name)),
        }
        Ok(())
    }

    fn set_key(&mut self, slot: u32, key: &[u8]) -> Result<(), KernelError> {
        let s = self
            .keys
            .get_mut(slot as usize)
            .ok_or_else(|| KernelError::BadKey(format!("no key slot {slot} (slots 0..=3)")))?;
        match key.len() {
            0 => *s = None,
            KEY_LEN => *s = Some(ChaCha20Poly1305::new(Key::from_slice(key))),
            n => return Err(KernelError::BadKey(format!("a key is {KEY_LEN} bytes, not {n}"))),
        }
        Ok(())
    }
}

fn is_fragment_v4(f: &[u8], l3: usize) -> bool {
    f.get(l3 + 6..l3 + 8).is_some_and(|b| u16::from_be_bytes([b[0], b[1]]) & 0x3fff != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use snic_pipeline::Batch;

    const KEY: [u8; 32] = [7; 32];

    fn frame(v6: bool, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let b = if v6 {
            b.ipv6([1; 16], [2; 16], 64)
        } else {
            b.ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        };
        b.udp(sport, dport).write(&mut f, payload).unwrap();
        f
    }

    fn pkt(f: &[u8]) -> PacketBuf {
        let mut p = PacketBuf::from_frame(f);
        p.meta.stack = snic_wire::stack::parse(p.data());
        p
    }

    fn run(k: &mut Crypt, p: &mut PacketBuf) -> Verdict {
        let mut out = Batch::new(4);
        let v = k.process(Instant::ZERO, p, &mut Emit { out: &mut out });
        // A rewritten frame is walked again by whoever reads it next.
        p.meta.stack = snic_wire::stack::parse(p.data());
        v
    }

    fn pair() -> (Crypt, Crypt) {
        let mut e = Crypt::new(Mode::Encrypt, 1, [1, 2, 3, 4]);
        let mut d = Crypt::new(Mode::Decrypt, 0, [9, 9, 9, 9]);
        e.set_key(0, &KEY).unwrap();
        d.set_key(0, &KEY).unwrap();
        (e, d)
    }

    /// The UDP payload of a frame, checking with etherparse that IP and UDP lengths and
    /// checksums are right.
    fn checked_payload(f: &[u8]) -> Vec<u8> {
        let s = etherparse::SlicedPacket::from_ethernet(f).unwrap();
        let Some(etherparse::TransportSlice::Udp(u)) = &s.transport else { panic!("not UDP") };
        match &s.net {
            Some(etherparse::NetSlice::Ipv4(ip)) => {
                let h = ip.header().to_header();
                assert_eq!(h.header_checksum, h.calc_header_checksum(), "IPv4 header checksum");
                let c = u.to_header().calc_checksum_ipv4(&h, u.payload()).unwrap();
                assert_eq!(u.checksum(), c, "UDP checksum");
            }
            Some(etherparse::NetSlice::Ipv6(ip)) => {
                let h = ip.header().to_header();
                let c = u.to_header().calc_checksum_ipv6(&h, u.payload()).unwrap();
                assert_eq!(u.checksum(), c, "UDP checksum");
            }
            _ => panic!("not IP"),
        }
        u.payload().to_vec()
    }

    proptest! {
        /// Encrypt then decrypt gives the datagram back, for IPv4 and IPv6 and any payload;
        /// the encrypted packet has right lengths and checksums and follows the documented
        /// format (checked by decrypting it independently of the kernel).
        #[test]
        fn encrypt_then_decrypt_round_trips(
            v6: bool,
            payload in proptest::collection::vec(any::<u8>(), 0..1400),
            ports: (u16, u16),
        ) {
            let (mut e, mut d) = pair();
            let plain = frame(v6, ports.0, ports.1, &payload);
            let mut p = pkt(&plain);
            prop_assert_eq!(run(&mut e, &mut p), Verdict::Pass);
            prop_assert_eq!(p.len(), plain.len().max(14) + OVERHEAD);
            let wire = checked_payload(p.data());
            prop_assert_eq!(wire.len(), payload.len() + OVERHEAD);
            prop_assert_eq!(wire[0], 0);
            let mut ct = wire[HEADER_LEN..wire.len() - TAG_LEN].to_vec();
            let tag = Tag::clone_from_slice(&wire[wire.len() - TAG_LEN..]);
            ChaCha20Poly1305::new(Key::from_slice(&KEY))
                .decrypt_in_place_detached(Nonce::from_slice(&wire[1..13]), &[0], &mut ct, &tag)
                .unwrap();
            prop_assert_eq!(&ct, &payload);
            prop_assert_eq!(run(&mut d, &mut p), Verdict::Pass);
            prop_assert_eq!(p.data(), &plain[..]);
            prop_assert_eq!(e.read_reg(reg::PACKETS), Some(1));
            prop_assert_eq!(d.read_reg(reg::PACKETS), Some(1));
        }

        /// Any change to the encrypted payload (slot, nonce, ciphertext or tag) is a
        /// `kernel_auth` drop, or `kernel_no_key` when the slot it now names is empty.
        #[test]
        fn tampering_is_dropped(
            v6: bool,
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            at in any::<prop::sample::Index>(),
            flip in 1u8..=255,
        ) {
            let (mut e, mut d) = pair();
            let mut p = pkt(&frame(v6, 5, 6, &payload));
            run(&mut e, &mut p);
            let start = p.len() - payload.len() - OVERHEAD;
            let i = start + at.index(payload.len() + OVERHEAD);
            p.data_mut()[i] ^= flip;
            let want = if i == start && usize::from(p.data()[i]) < SLOTS {
                DropReason::KernelNoKey
            } else {
                DropReason::KernelAuth
            };
            prop_assert_eq!(run(&mut d, &mut p), Verdict::Drop(want));
        }

        /// Whatever a decrypting kernel is given, it answers, never panics.
        #[test]
        fn decrypt_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), v6: bool) {
            let (_, mut d) = pair();
            let mut f = frame(v6, 1, 2, &[]);
            f.extend_from_slice(&bytes);
            let mut p = pkt(&f);
            let _ = run(&mut d, &mut p);
        }
    }

    #[test]
    fn nonces_never_repeat_across_packets_and_workers() {
        let mut a = Crypt::new(Mode::Encrypt, 0, [1; 4]);
        let mut b = Crypt::new(Mode::Encrypt, 1, [1; 4]);
        a.set_key(0, &KEY).unwrap();
        b.set_key(0, &KEY).unwrap();
        let mut seen = std::collections::HashSet::new();
        for k in [&mut a, &mut b] {
            for _ in 0..3 {
                let mut p = pkt(&frame(false, 1, 2, b"x"));
                run(k, &mut p);
                let w = checked_payload(p.data());
                assert!(seen.insert(w[1..13].to_vec()), "nonce repeated");
            }
        }
    }

    #[test]
    fn missing_keys_size_limits_and_other_traffic() {
        let mut e = Crypt::new(Mode::Encrypt, 0, [0; 4]);
        let mut p = pkt(&frame(false, 1, 2, b"secret"));
        assert_eq!(run(&mut e, &mut p), Verdict::Drop(DropReason::KernelNoKey));
        e.set_key(2, &KEY).unwrap();
        assert_eq!(e.read_reg(reg::KEYS), Some(0b100));
        e.write_reg(reg::SLOT, 2).unwrap();
        assert_eq!(run(&mut e, &mut p), Verdict::Pass);
        assert_eq!(checked_payload(p.data())[0], 2);
        // A decrypting peer with the key in another slot cannot read it.
        let mut d = Crypt::new(Mode::Decrypt, 0, [0; 4]);
        d.set_key(0, &KEY).unwrap();
        assert_eq!(run(&mut d, &mut p), Verdict::Drop(DropReason::KernelNoKey));
        d.set_key(2, &[8; 32]).unwrap();
        assert_eq!(run(&mut d, &mut p), Verdict::Drop(DropReason::KernelAuth));
        // Growth past the MTU is a drop, not a fragment or a panic.
        e.write_reg(reg::MTU, 100).unwrap();
        let mut big = pkt(&frame(false, 1, 2, &[0; 60]));
        assert_eq!(run(&mut e, &mut big), Verdict::Drop(DropReason::TooBig));
        // No room in the buffer: the same drop.
        e.write_reg(reg::MTU, 65535).unwrap();
        let f = frame(false, 1, 2, &[0; 100]);
        let mut tight = PacketBuf::with_room(0, f.len());
        tight.set_frame(&f);
        tight.meta.stack = snic_wire::stack::parse(tight.data());
        assert_eq!(run(&mut e, &mut tight), Verdict::Drop(DropReason::TooBig));
        // Other ports (with a port set), TCP and ARP pass untouched.
        e.write_reg(reg::PORT, 4500).unwrap();
        let f = frame(false, 1, 2, b"not mine");
        let mut other = pkt(&f);
        assert_eq!(run(&mut e, &mut other), Verdict::Pass);
        assert_eq!(other.data(), &f[..]);
        let mut tcp = Vec::new();
        etherparse::PacketBuilder::ethernet2([2; 6], [4; 6])
            .ipv4([1; 4], [2; 4], 9)
            .tcp(1, 2, 3, 4)
            .write(&mut tcp, b"tcp")
            .unwrap();
        let mut t = pkt(&tcp);
        e.write_reg(reg::PORT, 0).unwrap();
        assert_eq!(run(&mut e, &mut t), Verdict::Pass);
        assert_eq!(t.data(), &tcp[..]);
        // A truncated ciphertext cannot be authenticated.
        let mut short = pkt(&frame(false, 1, 2, &[0; OVERHEAD - 1]));
        assert_eq!(run(&mut d, &mut short), Verdict::Drop(DropReason::KernelAuth));
    }

    #[test]
    fn registers_and_arguments_are_checked() {
        let args = |s: &[(&str, &str)]| -> Vec<(String, String)> {
            s.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let hex = "07".repeat(32);
        let c = Crypt::from_args(
            &args(&[("mode", "decrypt"), ("key", &hex), ("slot", "3"), ("port", "4500")]),
            0,
            [0; 4],
        )
        .unwrap();
        assert_eq!(
            (0..6).map(|i| c.read_reg(i).unwrap()).collect::<Vec<_>>(),
            [1, 3, 4500, DEFAULT_MTU, 0b1000, 0]
        );
        assert!(format!("{c:?}").contains("keys: 8"), "debug shows the mask, never keys");
        for bad in [
            &[("key", hex.as_str())][..],
            &[("mode", "sideways")],
            &[("mode", "encrypt"), ("key", "00")],
            &[("mode", "encrypt"), ("slot", "4")],
            &[("mode", "encrypt"), ("mtu", "10")],
            &[("mode", "encrypt"), ("frob", "1")],
        ] {
            assert!(Crypt::from_args(&args(bad), 0, [0; 4]).is_err(), "{bad:?}");
        }
        let mut c = Crypt::new(Mode::Encrypt, 0, [0; 4]);
        assert!(c.write_reg(reg::MODE, 2).is_err());
        assert_eq!(c.write_reg(reg::KEYS, 1), Err(KernelError::ReadOnly("keys")));
        assert_eq!(c.write_reg(6, 1), Err(KernelError::NoRegister(6)));
        assert!(c.set_key(4, &KEY).is_err());
        assert!(c.set_key(0, &KEY[..16]).is_err());
        c.set_key(0, &KEY).unwrap();
        c.set_key(0, &[]).unwrap();
        assert_eq!(c.read_reg(reg::KEYS), Some(0));
    }
}
