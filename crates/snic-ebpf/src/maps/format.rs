//! Keys and values as text, for `snic ebpf map dump|update|delete`.
//!
//! [`format_hex`] prints bytes as `0a 00 00 01`; [`parse_bytes`] reads that back and a few
//! friendlier forms (see its docs).

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Bytes as space-separated two-digit hex (`0a 00 00 01`), the form [`parse_hex`] reads back
/// (and [`parse_bytes`] too, for two bytes or more: a lone `10` is decimal there).
pub fn format_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 3);
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Why text is not a key or value of the wanted size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseBytesError(String);

impl fmt::Display for ParseBytesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseBytesError {}

fn err<T>(msg: String) -> Result<T, ParseBytesError> {
    Err(ParseBytesError(msg))
}

/// One byte: `0x`-prefixed hex, or decimal when `hex` is false, else hex.
fn byte(tok: &str, hex: bool) -> Result<u8, ParseBytesError> {
    let r = match tok.strip_prefix("0x").or_else(|| tok.strip_prefix("0X")) {
        Some(h) => u8::from_str_radix(h, 16),
        None if hex => u8::from_str_radix(tok, 16),
        None => tok.parse::<u8>(),
    };
    r.or_else(|_| err(format!("{tok:?} is not a byte")))
}

/// Parses exactly `size` whitespace-separated hex bytes (with or without `0x`), the form
/// [`format_hex`] prints.
pub fn parse_hex(text: &str, size: usize) -> Result<Vec<u8>, ParseBytesError> {
    let bytes: Vec<u8> =
        text.split_whitespace().map(|t| byte(t, true)).collect::<Result<_, _>>()?;
    if bytes.len() != size {
        return err(format!("{:?} is {} bytes, {size} expected", text.trim(), bytes.len()));
    }
    Ok(bytes)
}

/// Parses a key or value of exactly `size` bytes from text:
///
/// - `01 02 03`: space-separated hex bytes (what [`format_hex`] prints; `0x` prefixes allowed);
/// - `10,0,0,1` or `10.0.0.1`: comma- or dot-separated decimal bytes (an IPv4 address);
/// - `0x0a000001`: hex digits, bytes in the order written (here `0a 00 00 01`);
/// - `42`: a decimal number, in host byte order (little-endian here) over `size` bytes, as
///   an array index or a counter is stored;
/// - `10.0.0.0/8` (size 8) or `2001:db8::/32` (size 20): an LPM trie key (prefix length in host
///   order, then the address).
///
/// A single byte is a decimal number (`16`) or `0x10`: a lone `10` is ten, not hex.
pub fn parse_bytes(text: &str, size: usize) -> Result<Vec<u8>, ParseBytesError> {
    let t = text.trim();
    let bytes = if t.is_empty() {
        Vec::new()
    } else if let Some((addr, plen)) = t.split_once('/') {
        let plen: u32 =
            plen.parse().or_else(|_| err(format!("{plen:?} is not a prefix length")))?;
        let data: Vec<u8> = if let Ok(a) = addr.parse::<Ipv4Addr>() {
            a.octets().to_vec()
        } else if let Ok(a) = addr.parse::<Ipv6Addr>() {
            a.octets().to_vec()
        } else {
            return err(format!("{addr:?} is not an IPv4 or IPv6 address"));
        };
        if plen as usize > 8 * data.len() {
            return err(format!("prefix length {plen} is longer than {addr}"));
        }
        let mut v = plen.to_ne_bytes().to_vec();
        v.extend_from_slice(&data);
        v
    } else if t.contains(char::is_whitespace) {
        t.split_whitespace().map(|tok| byte(tok, true)).collect::<Result<_, _>>()?
    } else if t.contains(',') || t.contains('.') {
        t.split([',', '.']).map(|tok| byte(tok.trim(), false)).collect::<Result<_, _>>()?
    } else if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        if h.len() % 2 != 0 {
            return err(format!("{t:?} has an odd number of hex digits"));
        }
        (0..h.len())
            .step_by(2)
            .map(|i| {
                h.get(i..i + 2)
                    .and_then(|d| u8::from_str_radix(d, 16).ok())
                    .ok_or_else(|| ParseBytesError(format!("{t:?} is not hex")))
            })
            .collect::<Result<_, _>>()?
    } else {
        let n: u128 = t.parse().or_else(|_| err(format!("{t:?} is not a number")))?;
        let le = n.to_le_bytes();
        if size > 16 || le[size..].iter().any(|&b| b != 0) {
            return err(format!("{n} does not fit in {size} bytes"));
        }
        le[..size].to_vec()
    };
    if bytes.len() != size {
        return err(format!("{t:?} is {} bytes, {size} expected", bytes.len()));
    }
    Ok(bytes)
}
