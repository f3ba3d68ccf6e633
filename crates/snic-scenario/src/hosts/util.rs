//! Small pieces the hosts need: numbers, memory contents, SHA-256, snake-case names (buffer
//! references are parsed by [`crate::load::parse_buf`]).

use crate::schema::Content;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

pub use crate::load::parse_num;

/// Split `HOST.NAME` (a QP, a CQ, a queue, an MR); spaces around it are ignored, as
/// `snic scenario check` ignores them.
pub fn split_obj(s: &str) -> Result<(&str, &str), String> {
    match s.trim().split_once('.') {
        Some((h, n)) if !h.is_empty() && !n.is_empty() && !n.contains('.') => Ok((h, n)),
        _ => Err(format!("{s:?} does not name a host object (HOST.NAME)")),
    }
}

/// Bytes of hex text, as packet specs and `check` read it.
fn hex_bytes(s: &str) -> Result<Vec<u8>, String> {
    crate::packet::from_hex(s).map_err(|e| format!("hex {s:?}: {e}"))
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
            use std::io::Read;
            let path = dir.join(f);
            let what = |e: std::io::Error| format!("file {}: {e}", path.display());
            // One byte more than fits tells a file that is too long, without reading all of
            // it (a device such as /dev/zero never ends).
            let mut data = Vec::new();
            std::fs::File::open(&path)
                .and_then(|file| file.take(len as u64 + 1).read_to_end(&mut data))
                .map_err(what)?;
            if data.len() > len {
                return Err(format!(
                    "file {} has more than the {len} bytes of the buffer",
                    path.display()
                ));
            }
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
    crate::golden::hex(&crate::golden::sha256(data))
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
        // A file longer than the buffer is refused without reading it all.
        let e = content_bytes(&Content::File("/dev/zero".into()), 16, d).expect_err("too long");
        assert!(e.contains("more than the 16 bytes"), "{e}");
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
