//! Semantic validation of a [`Policy`], and [`ConfigError`], the error of every kind of policy
//! input (the policy file, the command line, edits).
//!
//! [`validate`] checks a whole policy: the underlay's TTL and VXLAN port are usable; meter names
//! are well-formed and unique, rates and bursts are positive; a port has at most one queue,
//! whose ECN threshold is at least 1 and at most its limit; vPort ids and ports are unique and
//! not the underlay's; VNIs fit in 24 bits; layer names are well-formed and unique in their
//! vPort; rule ids are unique in their layer; a rule matches each field once, with values of
//! the field's type and range (prefix lengths in range, no host bits, ranges and sets not
//! empty); every action is one its layer's kind takes and refers to meters and vPorts that
//! exist; DNAT has backends and no port 0, SNAT ports `lo-hi` with 1 <= lo <= hi; mappings
//! belong to VNET layers, map each customer address once, and their provider address is of the
//! underlay's family.
//!
//! The engine validates a policy before it installs it; [`super::edit`] checks every edit and
//! the policy after them; the readers ([`super::toml`], [`super::cli`]) check what they parsed,
//! so that their errors point at a line and column. This module reads no text and changes no
//! policy.
//!
//! Every error is a [`ConfigError`] naming the file (or `<command line>` / `<edits>`), the line
//! and column when known, the path of the offending field and what was expected, e.g.
//! `policy.toml:12:5: vport[0].layer[acl].rule[id=3].match.ip.dst: bad prefix length 33 (IPv4
//! allows 0..=32)`.
//!
//! # Field paths
//!
//! `underlay.ip`, `meter[0].rate`, `queue[1].limit`, `vport[0].mac` (vPorts, meters and queues
//! by position in the file), `vport[0].layer[acl]` (layers by name, by position when the name is
//! unusable), `...rule[id=3].match.ip.dst` (rules by id), `...mapping[2].pa` (mappings by
//! position), `...rule[id=3].action.vni`.

use super::{
    Action, Field, LayerKind, LayerPolicy, Mapping, Matcher, Policy, RouteTarget, Rule, Value,
};
use core::fmt;
use core::net::{IpAddr, Ipv4Addr};
use std::collections::{HashMap, HashSet};

/// The `file` of errors in command-line input.
pub const COMMAND_LINE: &str = "<command line>";
/// The `file` of errors found by [`apply_edits`](super::edit::apply_edits).
pub const EDITS: &str = "<edits>";
/// The `file` of errors found by [`validate`] on a policy that came from no text.
pub const NO_FILE: &str = "<policy>";

/// Largest VNI / VSID (24 bits).
pub const MAX_VNI: u32 = (1 << 24) - 1;
/// Largest queue limit, in packets.
pub const MAX_QUEUE_LIMIT: usize = 1 << 24;
/// Longest layer or meter name.
pub const MAX_NAME_LEN: usize = 64;

/// Bad policy input: where it is and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    /// `"policy.toml"`, [`COMMAND_LINE`], [`EDITS`] or [`NO_FILE`].
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column (in characters), when known.
    pub column: Option<usize>,
    /// Path of the offending field, e.g. `vport[0].layer[acl].rule[id=3].match.ip.dst`; empty
    /// for TOML syntax errors and unreadable files. Errors of
    /// [`apply_edits`](super::edit::apply_edits) start with `edit[N]` (the index of the failing
    /// edit).
    pub field: String,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
            if let Some(c) = self.column {
                write!(f, ":{c}")?;
            }
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// A semantic error: the field path and the message.
#[derive(Debug)]
pub(super) struct Invalid {
    pub(super) field: String,
    pub(super) message: String,
}

pub(super) fn inv(field: impl Into<String>, message: impl Into<String>) -> Invalid {
    Invalid { field: field.into(), message: message.into() }
}

fn check_vni(vni: u32, path: String) -> Result<(), Invalid> {
    if vni > MAX_VNI {
        return Err(inv(
            path,
            format!("VNI {vni} is out of range (VNIs are 24 bits: 0..={MAX_VNI})"),
        ));
    }
    Ok(())
}

fn family(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() { "IPv4" } else { "IPv6" }
}

/// Semantic checks of a whole policy (see the module documentation for the list). Errors name
/// the field; the file is [`NO_FILE`] and there is no line.
pub fn validate(policy: &Policy) -> Result<(), ConfigError> {
    validate_inner(policy).map_err(|i| ConfigError {
        file: NO_FILE.to_owned(),
        line: None,
        column: None,
        field: i.field,
        message: i.message,
    })
}

pub(super) fn validate_inner(p: &Policy) -> Result<(), Invalid> {
    let u = &p.underlay;
    if u.ttl == 0 {
        return Err(inv("underlay.ttl", "TTL 0 is dropped by the first hop (expected 1..=255)"));
    }
    if u.vxlan_port == 0 {
        return Err(inv("underlay.vxlan_port", "UDP port 0 is not usable (expected 1..=65535)"));
    }
    if p.meters.len() > usize::from(u16::MAX) + 1 {
        return Err(inv("meter", format!("{} meters; at most 65536", p.meters.len())));
    }
    for (i, m) in p.meters.iter().enumerate() {
        let path = format!("meter[{i}]");
        if !ident_ok(&m.name) {
            return Err(inv(
                join(&path, "name"),
                format!(
                    "bad meter name {:?} (a letter, then letters, digits, '-' or '_'; at most {MAX_NAME_LEN})",
                    m.name
                ),
            ));
        }
        if p.meters.iter().take(i).any(|o| o.name == m.name) {
            return Err(inv(join(&path, "name"), format!("meter name `{}` is used twice", m.name)));
        }
        if m.rate_bps == 0 {
            return Err(inv(join(&path, "rate"), "rate must be more than 0"));
        }
        if m.burst_bytes == 0 || m.burst_bytes > i64::MAX as u64 {
            return Err(inv(
                join(&path, "burst"),
                format!(
                    "burst {} is out of range (expected 1..={} bytes)",
                    m.burst_bytes,
                    i64::MAX
                ),
            ));
        }
    }
    for (i, q) in p.queues.iter().enumerate() {
        let path = format!("queue[{i}]");
        if p.queues.iter().take(i).any(|o| o.port == q.port) {
            return Err(inv(join(&path, "port"), format!("port {} has two queues", q.port)));
        }
        if q.rate_bps == 0 {
            return Err(inv(join(&path, "rate"), "rate must be more than 0"));
        }
        if q.ecn_threshold == 0 {
            return Err(inv(
                join(&path, "ecn_threshold"),
                "ecn_threshold must be at least 1 packet",
            ));
        }
        if q.limit < q.ecn_threshold || q.limit > MAX_QUEUE_LIMIT {
            return Err(inv(
                join(&path, "limit"),
                format!(
                    "limit {} is out of range (expected ecn_threshold {}..={MAX_QUEUE_LIMIT})",
                    q.limit, q.ecn_threshold
                ),
            ));
        }
    }
    let mut ids = HashSet::with_capacity(p.vports.len());
    let mut ports = HashMap::with_capacity(p.vports.len());
    for (vi, v) in p.vports.iter().enumerate() {
        let path = format!("vport[{vi}]");
        if !ids.insert(v.id) {
            return Err(inv(join(&path, "id"), format!("vport id {} is used twice", v.id.0)));
        }
        if let Some(o) = ports.insert(v.port, v.id) {
            return Err(inv(
                join(&path, "port"),
                format!("port {} is already vport {}'s", v.port, o.0),
            ));
        }
        if v.port == u.port {
            return Err(inv(join(&path, "port"), format!("port {} is the underlay port", v.port)));
        }
        check_vni(v.vni, join(&path, "vni"))?;
        if let Some(m) = v.meter.filter(|m| usize::from(m.0) >= p.meters.len()) {
            return Err(inv(
                join(&path, "meter"),
                format!("meter {} does not exist ({} meters)", m.0, p.meters.len()),
            ));
        }
        for (li, l) in v.layers.iter().enumerate() {
            let lpath = join(&path, &layer_seg(li, &l.name));
            if v.layers.iter().take(li).any(|o| o.name == l.name) {
                return Err(inv(
                    join(&lpath, "name"),
                    format!("layer name `{}` is used twice in the vport", l.name),
                ));
            }
        }
        for (li, l) in v.layers.iter().enumerate() {
            validate_layer(p, l, &join(&path, &layer_seg(li, &l.name)))?;
        }
    }
    Ok(())
}

pub(super) fn validate_layer(p: &Policy, l: &LayerPolicy, path: &str) -> Result<(), Invalid> {
    if !ident_ok(&l.name) {
        return Err(inv(
            join(path, "name"),
            format!(
                "bad layer name {:?} (a letter, then letters, digits, '-' or '_'; at most {MAX_NAME_LEN})",
                l.name
            ),
        ));
    }
    validate_action(Some(p), Some(l.kind), &l.default, &join(path, "default"))?;
    if l.kind != LayerKind::Vnet && !l.mappings.is_empty() {
        return Err(inv(
            join(path, "mapping[0]"),
            format!("mappings belong to vnet layers, not to a {} layer", l.kind.name()),
        ));
    }
    let mut ids = HashSet::with_capacity(l.rules.len());
    for r in &l.rules {
        if !ids.insert(r.id) {
            return Err(inv(
                join(&join(path, &rule_seg(r.id)), "id"),
                format!("rule id {} is used twice in layer {}", r.id, l.name),
            ));
        }
    }
    for r in &l.rules {
        validate_rule(Some(p), Some(l.kind), r, &join(path, &rule_seg(r.id)))?;
    }
    let mut cas = HashSet::with_capacity(l.mappings.len());
    for (mi, m) in l.mappings.iter().enumerate() {
        let mpath = join(path, &format!("mapping[{mi}]"));
        if !cas.insert(m.ca) {
            return Err(inv(
                join(&mpath, "ca"),
                format!("customer address {} is mapped twice", m.ca),
            ));
        }
        validate_mapping(Some(p), m, &mpath)?;
    }
    Ok(())
}

pub(super) fn validate_mapping(p: Option<&Policy>, m: &Mapping, path: &str) -> Result<(), Invalid> {
    check_vni(m.vni, join(path, "vni"))?;
    if let Some(p) = p.filter(|p| m.pa.is_ipv4() != p.underlay.ip.is_ipv4()) {
        return Err(inv(
            join(path, "pa"),
            format!(
                "provider address {} is {} but the underlay address {} is {}",
                m.pa,
                family(m.pa),
                p.underlay.ip,
                family(p.underlay.ip)
            ),
        ));
    }
    Ok(())
}

pub(super) fn validate_rule(
    p: Option<&Policy>,
    kind: Option<LayerKind>,
    r: &Rule,
    path: &str,
) -> Result<(), Invalid> {
    for (i, pr) in r.predicates.iter().enumerate() {
        let fpath = join(&join(path, "match"), pr.field.name());
        if r.predicates.iter().take(i).any(|o| o.field == pr.field) {
            return Err(inv(
                fpath,
                format!(
                    "field {} is matched twice; a rule takes one match per field",
                    pr.field.name()
                ),
            ));
        }
        validate_matcher(pr.field, &pr.matcher).map_err(|m| inv(fpath, m))?;
    }
    validate_action(p, kind, &r.action, &join(path, "action"))
}

fn check_value(f: Field, v: &Value) -> Result<(), String> {
    match (class(f), v) {
        (Class::Ip, Value::Ip(_)) | (Class::Mac, Value::Mac(_)) => Ok(()),
        (Class::Int(max), Value::Int(n)) if *n <= max => Ok(()),
        (Class::Int(max), Value::Int(n)) => {
            Err(format!("{n} is out of range for {} (0..={max})", f.name()))
        }
        _ => Err(format!("{} takes {}", f.name(), class_hint(f))),
    }
}

fn validate_matcher(f: Field, m: &Matcher) -> Result<(), String> {
    match m {
        Matcher::Exact(v) => check_value(f, v),
        Matcher::Prefix(ip, len) => {
            if class(f) != Class::Ip {
                return Err(format!(
                    "{} is not an address field; prefixes go on ip.src, ip.dst, outer.ip.src, outer.ip.dst",
                    f.name()
                ));
            }
            let max = if ip.is_ipv4() { 32 } else { 128 };
            if *len > max {
                return Err(format!("bad prefix length {len} ({} allows 0..={max})", family(*ip)));
            }
            let net = match ip {
                IpAddr::V4(a) => {
                    let mask = if *len == 0 { 0 } else { u32::MAX << (32 - u32::from(*len)) };
                    IpAddr::V4(Ipv4Addr::from(u32::from(*a) & mask))
                }
                IpAddr::V6(a) => {
                    let mask = if *len == 0 { 0 } else { u128::MAX << (128 - u32::from(*len)) };
                    IpAddr::V6((u128::from(*a) & mask).into())
                }
            };
            if net != *ip {
                return Err(format!("host bits set in {ip}/{len} (the network is {net}/{len})"));
            }
            Ok(())
        }
        Matcher::Range(lo, hi) => {
            let Class::Int(max) = class(f) else {
                return Err(format!(
                    "{} is not a number field; ranges go on eth.type, ip.proto, l4.src, l4.dst, vni",
                    f.name()
                ));
            };
            if lo > hi {
                return Err(format!("empty range {lo}-{hi} (expected lo <= hi)"));
            }
            if *hi > max {
                return Err(format!("range end {hi} is out of range for {} (0..={max})", f.name()));
            }
            Ok(())
        }
        Matcher::Set(vals) => {
            if vals.is_empty() {
                return Err("an empty set matches nothing".to_owned());
            }
            vals.iter().try_for_each(|v| check_value(f, v))
        }
    }
}

pub(super) fn action_kind(a: &Action) -> &'static str {
    match a {
        Action::Pass => "pass",
        Action::Deny => "deny",
        Action::Allow => "allow",
        Action::AllowStateful => "allow-stateful",
        Action::Encap { .. } => "encap",
        Action::Decap => "decap",
        Action::Dnat { .. } => "dnat",
        Action::Snat { .. } => "snat",
        Action::Route(_) => "route",
        Action::Meter(_) => "meter",
    }
}

pub(super) fn allowed_actions(k: LayerKind) -> &'static [&'static str] {
    match k {
        LayerKind::Acl => &["allow", "allow-stateful", "deny", "pass"],
        LayerKind::Vnet => &["encap", "decap", "pass", "deny"],
        LayerKind::Nat => &["dnat", "snat", "pass", "deny"],
        LayerKind::Route => &["route", "pass", "deny"],
        LayerKind::Meter => &["meter", "pass"],
    }
}

pub(super) fn validate_action(
    p: Option<&Policy>,
    kind: Option<LayerKind>,
    a: &Action,
    path: &str,
) -> Result<(), Invalid> {
    if let Some(k) = kind {
        let allowed = allowed_actions(k);
        if !allowed.contains(&action_kind(a)) {
            return Err(inv(
                path,
                format!(
                    "action `{a}` is not allowed in a {} layer ({} layers take {})",
                    k.name(),
                    k.name(),
                    allowed.join(", ")
                ),
            ));
        }
    }
    match a {
        Action::Encap { vni, .. } => check_vni(*vni, join(path, "vni")),
        Action::Dnat { backends } => {
            if backends.is_empty() {
                return Err(inv(join(path, "dnat"), "dnat needs at least one backend"));
            }
            if let Some((ip, _)) = backends.iter().find(|(_, port)| *port == Some(0)) {
                return Err(inv(
                    join(path, "dnat"),
                    format!(
                        "backend {ip}: port 0 is not usable (omit the port to keep the packet's)"
                    ),
                ));
            }
            Ok(())
        }
        Action::Snat { ports: (lo, hi), .. } => {
            if *lo == 0 || lo > hi {
                return Err(inv(
                    join(path, "ports"),
                    format!("bad SNAT port range {lo}-{hi} (expected 1 <= lo <= hi)"),
                ));
            }
            Ok(())
        }
        Action::Route(RouteTarget::VPort(v)) => match p {
            Some(p) if p.vport(*v).is_none() => Err(inv(
                join(path, "route"),
                format!("route to vport {} which does not exist", v.0),
            )),
            _ => Ok(()),
        },
        Action::Meter(m) => match p {
            Some(p) if usize::from(m.0) >= p.meters.len() => Err(inv(
                join(path, "meter"),
                format!("meter {} does not exist ({} meters)", m.0, p.meters.len()),
            )),
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------------
// Field classes and path segments, shared with the readers.

/// What a field holds.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    Ip,
    Mac,
    /// A number up to this value.
    Int(u64),
}

pub(super) fn class(f: Field) -> Class {
    match f {
        Field::EthSrc | Field::EthDst => Class::Mac,
        Field::IpSrc | Field::IpDst | Field::OuterIpSrc | Field::OuterIpDst => Class::Ip,
        Field::EtherType | Field::L4Src | Field::L4Dst => Class::Int(0xffff),
        Field::IpProto => Class::Int(0xff),
        Field::Vni => Class::Int(u64::from(MAX_VNI)),
    }
}

pub(super) fn class_hint(f: Field) -> &'static str {
    match class(f) {
        Class::Ip => "an address \"10.0.0.1\", a prefix \"10.0.0.0/24\" or a list of addresses",
        Class::Mac => "a MAC \"02:00:00:00:00:0a\" or a list of MACs",
        Class::Int(_) => "a number, a range \"lo-hi\" or a list of numbers",
    }
}

pub(super) fn ident_ok(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|c| c.is_ascii_alphabetic())
        && c.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && s.len() <= MAX_NAME_LEN
}

pub(super) fn layer_seg(index: usize, name: &str) -> String {
    if ident_ok(name) { format!("layer[{name}]") } else { format!("layer[{index}]") }
}

pub(super) fn rule_seg(id: u32) -> String {
    format!("rule[id={id}]")
}

pub(super) fn join(path: &str, seg: &str) -> String {
    if path.is_empty() { seg.to_owned() } else { format!("{path}.{seg}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_display_names_file_line_column_field() {
        let e = ConfigError {
            file: "policy.toml".into(),
            line: Some(12),
            column: Some(5),
            field: "vport[0].layer[acl].rule[id=3].match.ip.dst".into(),
            message: "bad prefix length 33 (IPv4 allows 0..=32)".into(),
        };
        assert_eq!(
            e.to_string(),
            "policy.toml:12:5: vport[0].layer[acl].rule[id=3].match.ip.dst: bad prefix length 33 (IPv4 allows 0..=32)"
        );
        let e = ConfigError { line: None, column: None, field: String::new(), ..e };
        assert_eq!(e.to_string(), "policy.toml: bad prefix length 33 (IPv4 allows 0..=32)");
    }
}
