//! What the policy file reader ([`super::toml`]) and the command-line forms ([`super::cli`])
//! share: the conversion context that places errors at a line, a column and a field ([`Cx`]),
//! the scalars (addresses, MACs, numbers, rates, port ranges, backends, directions, layer kinds,
//! match values) and the word form of actions (`encap vxlan vni 42`, `route vport 1`, ...).
//!
//! Private to [`crate::policy`]. It builds no policy and checks no semantics beyond the syntax
//! of one value ([`super::validate`] does that).

use super::validate::{Class, ConfigError, Invalid, class, class_hint};
use super::{
    Action, Field, LayerKind, Mac, Matcher, MeterId, MeterSpec, RouteTarget, TunnelKind, Value,
};
use crate::key::{Direction, VPortId};
use core::net::{IpAddr, SocketAddr};
use std::collections::HashMap;

/// Conversion context: the text (for line/column), the file name and the position of every
/// field path met, so that errors found later by [`validate`](super::validate::validate) point
/// at the right place.
pub(super) struct Cx<'a> {
    pub(super) text: &'a str,
    pub(super) file: &'a str,
    /// Bytes of `text` that precede the user's input (a wrapper added for parsing).
    pub(super) shift: usize,
    pub(super) spans: HashMap<String, usize>,
}

/// 1-based line and column (in characters) of byte offset `off` of `text`.
fn line_col(text: &str, off: usize) -> (usize, usize) {
    let mut o = off.min(text.len());
    while !text.is_char_boundary(o) {
        o -= 1;
    }
    let before = text.get(..o).unwrap_or("");
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

impl<'a> Cx<'a> {
    pub(super) fn new(text: &'a str, file: &'a str) -> Self {
        Cx { text, file, shift: 0, spans: HashMap::new() }
    }

    pub(super) fn err(
        &self,
        at: usize,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        let (line, column) = line_col(self.text, at);
        let column = if line == 1 { column.saturating_sub(self.shift).max(1) } else { column };
        ConfigError {
            file: self.file.to_owned(),
            line: Some(line),
            column: Some(column),
            field: field.into(),
            message: message.into(),
        }
    }

    pub(super) fn mark(&mut self, path: &str, at: usize) {
        self.spans.insert(path.to_owned(), at);
    }

    /// An error of [`validate`](super::validate::validate), placed at its field (or the nearest
    /// enclosing one).
    pub(super) fn locate(&self, inv: Invalid) -> ConfigError {
        let mut p = inv.field.as_str();
        loop {
            if let Some(&at) = self.spans.get(p) {
                return self.err(at, inv.field, inv.message);
            }
            match p.rfind(['.', '[']) {
                Some(i) => p = &p[..i],
                None => break,
            }
        }
        ConfigError {
            file: self.file.to_owned(),
            line: None,
            column: None,
            field: inv.field,
            message: inv.message,
        }
    }

    pub(super) fn syntax(&self, e: &toml_edit::TomlError) -> ConfigError {
        let msg = format!("TOML syntax: {}", e.message().trim().replace('\n', "; "));
        match e.span() {
            Some(s) => self.err(s.start, "", msg),
            None => ConfigError {
                file: self.file.to_owned(),
                line: None,
                column: None,
                field: String::new(),
                message: msg,
            },
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Scalars shared by the file and the command line.

pub(super) fn parse_ip(s: &str) -> Result<IpAddr, String> {
    s.trim().parse().map_err(|_| format!("bad IP address `{s}`"))
}

pub(super) fn parse_mac(s: &str) -> Result<Mac, String> {
    let bad = || format!("bad MAC address `{s}` (expected six hex bytes like 02:00:00:00:00:0a)");
    let mut mac = [0u8; 6];
    let mut parts = s.trim().split([':', '-']);
    for b in &mut mac {
        let p = parts.next().ok_or_else(bad)?;
        if p.is_empty() || p.len() > 2 {
            return Err(bad());
        }
        *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(mac)
}

pub(super) fn fmt_mac(m: &Mac) -> String {
    format!("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5])
}

fn parse_u64(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse::<u64>(),
    };
    r.map_err(|_| format!("bad number `{s}`"))
}

pub(super) fn parse_num<T: TryFrom<u64>>(s: &str, what: &str) -> Result<T, String> {
    let n = parse_u64(s)?;
    T::try_from(n).map_err(|_| format!("{what} {n} is too large"))
}

const RATE_UNITS: [(&str, u64); 5] = [
    ("tbit", 1_000_000_000_000),
    ("gbit", 1_000_000_000),
    ("mbit", 1_000_000),
    ("kbit", 1_000),
    ("bit", 1),
];

/// `"100mbit"`, `"1.5gbit"`, `"64000bit"` -> bits per second.
pub(super) fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim();
    let Some(&(_, mult)) = RATE_UNITS.iter().find(|(u, _)| *u == unit) else {
        return Err(format!(
            "bad rate `{s}`: expected a number and a unit (bit, kbit, mbit, gbit, tbit), like \"100mbit\""
        ));
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(format!("bad rate `{s}`: bad number `{num}`"));
    }
    let too_big = || format!("rate `{s}` is too large");
    let int: u128 = int.parse().map_err(|_| too_big())?;
    let mut total = int.checked_mul(u128::from(mult)).ok_or_else(too_big)?;
    if !frac.is_empty() {
        let digits = u32::try_from(frac.len()).map_err(|_| too_big())?;
        let den = 10u128.checked_pow(digits).ok_or_else(too_big)?;
        let f: u128 = frac.parse().map_err(|_| too_big())?;
        let scaled = f.checked_mul(u128::from(mult)).ok_or_else(too_big)?;
        if scaled % den != 0 {
            return Err(format!("rate `{s}` is not a whole number of bits per second"));
        }
        total = total.checked_add(scaled / den).ok_or_else(too_big)?;
    }
    u64::try_from(total).map_err(|_| too_big())
}

pub(super) fn fmt_rate(bps: u64) -> String {
    for (unit, mult) in RATE_UNITS {
        if bps >= mult && bps / mult * mult == bps {
            return format!("{}{unit}", bps / mult);
        }
    }
    format!("{bps}bit")
}

pub(super) fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    match s.split_once('-') {
        Some((a, b)) => Ok((parse_num(a, "port")?, parse_num(b, "port")?)),
        None => {
            let p = parse_num(s, "port")?;
            Ok((p, p))
        }
    }
}

/// `10.0.0.5`, `10.0.0.5:80`, `2001:db8::5`, `[2001:db8::5]:80`.
pub(super) fn parse_backend(s: &str) -> Result<(IpAddr, Option<u16>), String> {
    let t = s.trim();
    if let Ok(sa) = t.parse::<SocketAddr>() {
        return Ok((sa.ip(), Some(sa.port())));
    }
    if let Ok(ip) = t.parse::<IpAddr>() {
        return Ok((ip, None));
    }
    Err(format!(
        "bad backend `{s}` (expected an address with an optional port: 10.0.0.5:80, [2001:db8::5]:80)"
    ))
}

pub(super) fn fmt_backend(ip: IpAddr, port: Option<u16>) -> String {
    match port {
        Some(p) => SocketAddr::new(ip, p).to_string(),
        None => ip.to_string(),
    }
}

pub(super) fn parse_dir(s: &str) -> Result<Option<Direction>, String> {
    match s.trim() {
        "in" => Ok(Some(Direction::In)),
        "out" => Ok(Some(Direction::Out)),
        "both" | "any" => Ok(None),
        _ => Err(format!("bad direction `{s}` (expected in, out or both)")),
    }
}

pub(super) fn parse_kind(s: &str) -> Result<LayerKind, String> {
    LayerKind::from_name(s.trim())
        .ok_or_else(|| format!("bad layer kind `{s}` (expected acl, vnet, nat, route or meter)"))
}

fn int_value(f: Field, s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let named = match (f, t.as_str()) {
        (Field::IpProto, "icmp") => Some(1),
        (Field::IpProto, "tcp") => Some(6),
        (Field::IpProto, "udp") => Some(17),
        (Field::IpProto, "icmpv6") => Some(58),
        (Field::EtherType, "ipv4") => Some(0x0800),
        (Field::EtherType, "arp") => Some(0x0806),
        (Field::EtherType, "ipv6") => Some(0x86dd),
        _ => None,
    };
    match named {
        Some(n) => Ok(n),
        None => parse_u64(&t)
            .map_err(|_| format!("bad number `{s}` for {} ({})", f.name(), class_hint(f))),
    }
}

/// One value of a set (no prefixes, no ranges).
pub(super) fn single_value(f: Field, s: &str) -> Result<Value, String> {
    match class(f) {
        Class::Ip if s.contains('/') => {
            Err(format!("a set holds single addresses, not prefixes like `{s}`"))
        }
        Class::Ip => Ok(Value::Ip(parse_ip(s)?)),
        Class::Mac => Ok(Value::Mac(parse_mac(s)?)),
        Class::Int(_) if s.contains('-') => {
            Err(format!("a set holds single numbers, not ranges like `{s}`"))
        }
        Class::Int(_) => Ok(Value::Int(int_value(f, s)?)),
    }
}

/// An exact value, a prefix or a range written as a string.
pub(super) fn matcher_from_str(f: Field, s: &str) -> Result<Matcher, String> {
    match class(f) {
        Class::Ip => match s.split_once('/') {
            Some((a, l)) => {
                let len = l.trim().parse::<u8>().map_err(|_| format!("bad prefix length `{l}`"))?;
                Ok(Matcher::Prefix(parse_ip(a)?, len))
            }
            None => Ok(Matcher::Exact(Value::Ip(parse_ip(s)?))),
        },
        Class::Mac => Ok(Matcher::Exact(Value::Mac(parse_mac(s)?))),
        Class::Int(_) => match s.split_once('-') {
            Some((a, b)) => Ok(Matcher::Range(int_value(f, a)?, int_value(f, b)?)),
            None => Ok(Matcher::Exact(Value::Int(int_value(f, s)?))),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Actions in words (the command line, and strings in the file).

/// Words of `s` with their byte offsets; commas separate words too.
pub(super) fn words(s: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices() {
        let sep = c.is_whitespace() || c == ',';
        match (sep, start) {
            (true, Some(st)) => {
                out.push((st, &s[st..i]));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(st) = start {
        out.push((st, &s[st..]));
    }
    out
}

pub(super) fn meter_ref(s: &str, meters: Option<&[MeterSpec]>) -> Result<MeterId, String> {
    let t = s.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(MeterId(parse_num(t, "meter index")?));
    }
    match meters {
        Some(ms) => match ms.iter().position(|m| m.name == t) {
            Some(i) => Ok(MeterId(u16::try_from(i).map_err(|_| "too many meters".to_owned())?)),
            None => {
                let names: Vec<&str> = ms.iter().map(|m| m.name.as_str()).collect();
                Err(format!(
                    "no meter named `{t}` (meters: {})",
                    if names.is_empty() { "none".to_owned() } else { names.join(", ") }
                ))
            }
        },
        None => {
            Err(format!("meter `{t}`: meter names need the policy here; give the meter's index"))
        }
    }
}

/// Parses the word form of an action; errors carry the byte offset of the bad word.
pub(super) fn action_words(
    s: &str,
    meters: Option<&[MeterSpec]>,
) -> Result<Action, (usize, String)> {
    let w = words(s);
    let Some(&(at0, kw)) = w.first() else {
        return Err((0, "missing action".to_owned()));
    };
    let arg = |i: usize, what: &str| -> Result<(usize, &str), (usize, String)> {
        w.get(i).copied().ok_or((s.len(), format!("`{kw}` needs {what}")))
    };
    let at = |i: usize| w.get(i).map_or(s.len(), |x| x.0);
    let (action, used) = match kw {
        "pass" => (Action::Pass, 1),
        "deny" | "drop" => (Action::Deny, 1),
        "allow" => (Action::Allow, 1),
        "allow-stateful" => (Action::AllowStateful, 1),
        "decap" => (Action::Decap, 1),
        "encap" => {
            let (a, k) = arg(1, "a tunnel kind (vxlan or nvgre)")?;
            let kind = match k {
                "vxlan" => TunnelKind::Vxlan,
                "nvgre" => TunnelKind::Nvgre,
                _ => return Err((a, format!("bad tunnel kind `{k}` (expected vxlan or nvgre)"))),
            };
            let mut i = 2;
            if matches!(w.get(2), Some((_, "vni" | "vsid"))) {
                i = 3;
            }
            let (a, n) = arg(i, "a VNI")?;
            let vni = parse_num(n, "VNI").map_err(|m| (a, m))?;
            (Action::Encap { kind, vni }, i + 1)
        }
        "dnat" => {
            let mut backends = Vec::new();
            for &(a, b) in w.iter().skip(1) {
                backends.push(parse_backend(b).map_err(|m| (a, m))?);
            }
            if backends.is_empty() {
                return Err((at(1), "`dnat` needs at least one backend".to_owned()));
            }
            let n = w.len();
            (Action::Dnat { backends }, n)
        }
        "snat" => {
            let (a, ip) = arg(1, "an address")?;
            let ip = parse_ip(ip).map_err(|m| (a, m))?;
            let mut i = 2;
            if matches!(w.get(2), Some((_, "ports"))) {
                i = 3;
            }
            let ports = match w.get(i) {
                Some(&(a, r)) => {
                    i += 1;
                    parse_port_range(r).map_err(|m| (a, m))?
                }
                None => (1024, 65535),
            };
            (Action::Snat { ip, ports }, i)
        }
        "route" => {
            let (a, t) = arg(1, "a target (vnet, uplink, drop or vport N)")?;
            match t {
                "vnet" => (Action::Route(RouteTarget::Vnet), 2),
                "uplink" => (Action::Route(RouteTarget::Uplink), 2),
                "drop" => (Action::Route(RouteTarget::Drop), 2),
                "vport" => {
                    let (a, n) = arg(2, "a vPort id")?;
                    let id = parse_num(n, "vPort id").map_err(|m| (a, m))?;
                    (Action::Route(RouteTarget::VPort(VPortId(id))), 3)
                }
                _ => {
                    return Err((
                        a,
                        format!("bad route target `{t}` (expected vnet, uplink, drop or vport N)"),
                    ));
                }
            }
        }
        "meter" => {
            let (a, m) = arg(1, "a meter")?;
            (Action::Meter(meter_ref(m, meters).map_err(|e| (a, e))?), 2)
        }
        _ => {
            return Err((
                at0,
                format!(
                    "unknown action `{kw}` (expected pass, deny, allow, allow-stateful, decap, encap, dnat, snat, route or meter)"
                ),
            ));
        }
    };
    if let Some(&(a, extra)) = w.get(used) {
        return Err((a, format!("unexpected `{extra}` after the action")));
    }
    Ok(action)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_print() {
        assert_eq!(parse_rate("100mbit"), Ok(100_000_000));
        assert_eq!(parse_rate("1.5gbit"), Ok(1_500_000_000));
        assert_eq!(parse_rate("64000 bit"), Ok(64_000));
        assert_eq!(parse_rate("2TBIT"), Ok(2_000_000_000_000));
        assert!(parse_rate("1.5bit").is_err());
        assert!(parse_rate("99999999999999999999gbit").is_err());
        assert!(parse_rate("mbit").is_err());
        assert_eq!(fmt_rate(1_500_000_000), "1500mbit");
        assert_eq!(fmt_rate(7), "7bit");
        assert_eq!(fmt_rate(u64::MAX), format!("{}bit", u64::MAX));
    }
}
