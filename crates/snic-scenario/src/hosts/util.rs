//! Small pieces the hosts need: numbers, memory contents, SHA-256, snake-case names (buffer
//! references are parsed by [`crate::load::parse_buf`]).

use crate::schema::{Content, Size};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

/// A number: decimal, `0x` hex, or a size with a binary unit (`4KiB`).
pub fn parse_num(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return u64::from_str_radix(h, 16).map_err(|_| format!("{s:?} is not a hex number"));
    }
    t.parse::<Size>().map(|z| z.0)
}

/// Split `HOST.NAME` (a QP, a CQ, a queue, an MR).
pub fn split_obj(s: &str) -> Result<(&str, &str), String> {
    match s.split_once('.') {
        Some((h, n)) if !h.is_empty() && !n.is_empty() && !n.contains('.') => Ok((h, n)),
        _ => Err(format!("{s:?} does not name a host object (HOST.NAME)")),
    }
}

/// Bytes of hex text (spaces, `:` and `_` allowed between bytes).
pub fn hex_bytes(s: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> =
        s.bytes().filter(|b| !matches!(b, b' ' | b'\t' | b'\n' | b':' | b'_')).collect();
    if !digits.len().is_multiple_of(2) {
        return Err(format!("hex {s:?} has an odd number of digits"));
    }
    digits
        .chunks(2)
        .map(|p| {
            let t = core::str::from_utf8(p).map_err(|_| format!("hex {s:?} is not text"))?;
            u8::from_str_radix(t, 16).map_err(|_| format!("{t:?} in {s:?} is not a hex byte"))
        })
        .collect()
}

/// `len` bytes as `content` describes them (files relative to `dir`).
pub fn content_bytes(content: &Content, len: usize, dir: &Path) -> Result<Vec<u8>, String> {
    let padded = |data: Vec<u8>, what: &str| {
        if data.len() > len {
            return Err(format!(
                "{what} has {} bytes, more than the {len} of the buffer",
                data.len()
            ));
        }
        let mut v = data;
        v.resize(len, 0);
        Ok(v)
    };
    match content {
        Content::Zero => Ok(vec![0; len]),
        Content::Fill(b) => Ok(vec![*b; len]),
        Content::Seed(seed) => {
            let mut v = vec![0; len];
            ChaCha8Rng::seed_from_u64(*seed).fill_bytes(&mut v);
            Ok(v)
        }
        Content::Counter => Ok((0..len).map(|i| i as u8).collect()),
        Content::Pattern(p) => {
            let pat = hex_bytes(p)?;
            if pat.is_empty() {
                return Err("an empty pattern".into());
            }
            Ok(pat.iter().copied().cycle().take(len).collect())
        }
        Content::Hex(h) => padded(hex_bytes(h)?, "the hex"),
        Content::File(f) => {
            let path = dir.join(f);
            let data = std::fs::read(&path).map_err(|e| format!("file {}: {e}", path.display()))?;
            padded(data, &format!("file {}", path.display()))
        }
    }
}

/// A short description of `content` for reports.
pub fn describe(content: &Content) -> String {
    match content {
        Content::Zero => "zeros".into(),
        Content::Fill(b) => format!("fill {b:#04x}"),
        Content::Seed(s) => format!("seed {s}"),
        Content::Counter => "counter".into(),
        Content::Pattern(p) => format!("pattern {p}"),
        Content::Hex(h) => format!("hex {h}"),
        Content::File(f) => format!("file {f}"),
    }
}

/// `CamelCase` as `snake_case` (`LocProtErr` -> `loc_prot_err`).
pub fn snake(camel: &str) -> String {
    let mut s = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                s.push('_');
            }
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

/// SHA-256 (FIPS 180-4) of `data`, as lower-case hex.
pub fn sha256_hex(data: &[u8]) -> String {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let bits = (data.len() as u64).wrapping_mul(8);
    let mut tail = data[data.len() / 64 * 64..].to_vec();
    tail.push(0x80);
    while tail.len() % 64 != 56 {
        tail.push(0);
    }
    tail.extend_from_slice(&bits.to_be_bytes());
    let blocks = data[..data.len() / 64 * 64].chunks_exact(64).chain(tail.chunks_exact(64));
    for block in blocks {
        let mut w = [0u32; 64];
        for (i, c) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh.wrapping_add(s1).wrapping_add(ch).wrapping_add(K[i]).wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    h.iter().map(|x| format!("{x:08x}")).collect()
}

/// The first offset where `got` and `want` differ (the shorter length when one is a prefix of
/// the other), or `None` when they are equal.
pub fn first_difference(got: &[u8], want: &[u8]) -> Option<usize> {
    match got.iter().zip(want).position(|(a, b)| a != b) {
        Some(i) => Some(i),
        None if got.len() != want.len() => Some(got.len().min(want.len())),
        None => None,
    }
}

/// A readable diff of two byte strings: the first differing offset, both bytes there, and up
/// to 8 bytes of context each side as hex.
pub fn byte_diff(got: &[u8], want: &[u8]) -> Option<String> {
    let at = first_difference(got, want)?;
    let byte = |v: &[u8]| v.get(at).map_or("(end)".to_string(), |b| format!("{b:#04x}"));
    let ctx = |v: &[u8]| {
        let lo = at.saturating_sub(8).min(v.len());
        let hi = (at + 9).min(v.len());
        let mut s = String::new();
        for (i, b) in v[lo..hi].iter().enumerate() {
            if lo + i == at {
                s += &format!("[{b:02x}] ");
            } else {
                s += &format!("{b:02x} ");
            }
        }
        format!("@{lo:#x}: {}", s.trim_end())
    };
    let mut d = format!(
        "first difference at byte {at} ({at:#x}): got {}, want {}\n  got  {}\n  want {}",
        byte(got),
        byte(want),
        ctx(got),
        ctx(want)
    );
    if got.len() != want.len() {
        d += &format!("\n  lengths: got {} bytes, want {}", got.len(), want.len());
    }
    let differing = got.iter().zip(want).filter(|(a, b)| a != b).count();
    d += &format!("\n  {differing} differing bytes in the common length");
    Some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_matches_the_fips_vectors() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            sha256_hex(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
        let million = vec![b'a'; 1_000_000];
        assert_eq!(
            sha256_hex(&million),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        );
    }

    #[test]
    fn contents_fill_as_described() {
        let d = Path::new(".");
        assert_eq!(content_bytes(&Content::Counter, 258, d).unwrap()[257], 1);
        assert_eq!(
            content_bytes(&Content::Pattern("dead".into()), 5, d).unwrap(),
            [0xde, 0xad, 0xde, 0xad, 0xde]
        );
        assert_eq!(content_bytes(&Content::Hex("01 02".into()), 3, d).unwrap(), [1, 2, 0]);
        assert!(content_bytes(&Content::Hex("01 02".into()), 1, d).is_err());
        assert!(content_bytes(&Content::Pattern(String::new()), 4, d).is_err());
        let a = content_bytes(&Content::Seed(7), 64, d).unwrap();
        assert_eq!(a, content_bytes(&Content::Seed(7), 64, d).unwrap());
        assert_ne!(a, content_bytes(&Content::Seed(8), 64, d).unwrap());
        assert_eq!(&content_bytes(&Content::Seed(7), 128, d).unwrap()[..64], &a[..]);
    }

    #[test]
    fn diffs_name_the_first_differing_byte() {
        assert_eq!(byte_diff(b"abc", b"abc"), None);
        let d = byte_diff(b"abcdef", b"abXdef").unwrap();
        assert!(d.contains("byte 2") && d.contains("0x63") && d.contains("0x58"), "{d}");
        let d = byte_diff(b"ab", b"abc").unwrap();
        assert!(d.contains("byte 2") && d.contains("(end)") && d.contains("lengths"), "{d}");
        assert_eq!(snake("RecvRdmaWithImm"), "recv_rdma_with_imm");
        assert_eq!(snake("LocProtErr"), "loc_prot_err");
    }
}
