//! Policy input: the TOML policy file format, the command-line forms of rules, layers, mappings
//! and actions, semantic validation, transactional edits and the embedded default policy.
//!
//! It turns text into the plain data of [`crate::policy`] (and back, with [`to_toml`]); it does
//! not install anything: the engine takes the validated [`Policy`] and bumps the epochs of the
//! vPorts that [`apply_edits`] reports as changed.
//!
//! Every error is a [`ConfigError`] naming the file (or `<command line>` / `<edits>`), the line
//! and column when known, the path of the offending field and what was expected, e.g.
//! `policy.toml:12:5: vport[0].layer[acl].rule[id=3].match.ip.dst: bad prefix length 33 (IPv4
//! allows 0..=32)`. Nothing is applied half-way: [`parse_policy`] returns a whole valid policy
//! or an error, and [`apply_edits`] works on a copy.
//!
//! # Field paths
//!
//! `underlay.ip`, `meter[0].rate`, `queue[1].limit`, `vport[0].mac` (vPorts, meters and queues
//! by position in the file), `vport[0].layer[acl]` (layers by name, by position when the name is
//! unusable), `...rule[id=3].match.ip.dst` (rules by id), `...mapping[2].pa` (mappings by
//! position), `...rule[id=3].action.vni`.
//!
//! # The TOML format
//!
//! A complete example (it is `examples/vnet.toml` of this crate):
//!
//! ```toml
//! # The provider network. Every key is optional (defaults: port 1, ip 0.0.0.0,
//! # mac 00:00:00:00:00:00, gateway_mac ff:ff:ff:ff:ff:ff, vxlan_port 4789, ttl 64).
//! [underlay]
//! port = 1                          # pipeline port of the uplink
//! ip = "192.168.100.1"              # this host's provider address (PA)
//! mac = "02:00:00:00:01:01"
//! gateway_mac = "02:00:00:00:02:01"
//! vxlan_port = 4789
//! ttl = 64
//!
//! # Token-bucket meters, referred to by name.
//! [[meter]]
//! name = "gold"                     # a letter, then letters, digits, '-', '_'
//! rate = "100mbit"                  # bit, kbit, mbit, gbit, tbit (decimal; "1.5gbit" is fine),
//!                                   # or rate_bps = 100000000
//! burst = 15000                     # bucket depth in bytes
//! exceed = "drop"                   # "drop" (default) or "mark" (ECN CE)
//!
//! # Egress queues with ECN marking, per pipeline port.
//! [[queue]]
//! port = 0
//! rate = "1gbit"                    # or rate_bps
//! ecn_threshold = 20                # packets; default 64; 1 <= ecn_threshold <= limit
//! limit = 256                       # packets; default 256; at most 16777216
//!
//! [[vport]]
//! id = 0                            # unique
//! name = "vm-a"                     # default "vport<id>"
//! port = 0                          # unique pipeline port, not the underlay port
//! mac = "02:00:00:00:00:0a"
//! ips = ["10.0.0.1"]                # default []
//! vni = 42                          # default 0; 24 bits
//! meter = "gold"                    # optional: meters all of the vPort's traffic
//!
//!   # Layers in outbound order (inbound packets walk them in reverse).
//!   [[vport.layer]]
//!   name = "acl"                    # unique in the vPort; same characters as meter names
//!   kind = "acl"                    # acl | vnet | nat | route | meter (default: the name,
//!                                   # when the name is a kind)
//!   default = "deny"                # when no rule matches: "deny" for acl, "pass" otherwise
//!   rules = [
//!     # id (unique in the layer) and action are required; priority defaults to 0 (lower first,
//!     # then lower id); dir is "in", "out" or "both" (the default).
//!     { id = 1, priority = 10, dir = "out", match = { "ip.dst" = "10.0.0.0/24", "l4.dst" = "80-90", "ip.proto" = [6, 17] }, action = "allow-stateful" },
//!     { id = 2, priority = 10, dir = "in", match = { "ip.src" = "10.0.0.0/24" }, action = "allow" },
//!     { id = 3, priority = 20, action = "deny" },
//!   ]
//!
//!   [[vport.layer]]
//!   name = "route"
//!   kind = "route"
//!   rules = [
//!     { id = 1, dir = "out", match = { "ip.dst" = "10.0.0.0/8" }, action = { route = "vnet" } },
//!     { id = 2, dir = "out", match = { "ip.dst" = "0.0.0.0/0" }, action = { route = "uplink" } },
//!   ]
//!
//!   [[vport.layer]]
//!   name = "vnet"
//!   kind = "vnet"
//!   # Customer address -> provider address; vni defaults to the vPort's.
//!   mappings = [
//!     { ca = "10.0.0.2", pa = "192.168.100.2", mac = "02:00:00:00:00:0b", vni = 42 },
//!   ]
//!   rules = [
//!     { id = 1, dir = "out", action = { encap = "vxlan", vni = 42 } },
//!     { id = 2, dir = "in", action = "decap" },
//!   ]
//!
//!   [[vport.layer]]
//!   name = "qos"
//!   kind = "meter"
//!   rules = [ { id = 1, match = { "l4.dst" = 5201 }, action = { meter = "gold" } } ]
//! ```
//!
//! Rules and mappings may equally be written as `[[vport.layer.rules]]` /
//! `[[vport.layer.mappings]]` tables.
//!
//! **Match keys** are field names ([`Field::name`]: `eth.src`, `eth.dst`, `eth.type`, `ip.src`,
//! `ip.dst`, `ip.proto`, `l4.src`, `l4.dst` (aliases `tcp.*`, `udp.*`), `vni`,
//! `outer.ip.src`, `outer.ip.dst`), quoted (`"ip.dst" = ...`) or as nested keys
//! (`ip.dst = ...`, `ip = { dst = ... }`). One match per field. **Values**: an exact value
//! (an address or MAC as a string, a number as an integer or a string: decimal, `0x..`, and for
//! `ip.proto` also `tcp`, `udp`, `icmp`, `icmpv6`, for `eth.type` `ipv4`, `ipv6`, `arp`), a
//! prefix `"a.b.c.d/len"` or `"2001:db8::/32"` (host bits must be zero), a range `"lo-hi"` of
//! numbers, or a set (an array of single values).
//!
//! **Actions**: `"pass"`, `"deny"`, `"allow"`, `"allow-stateful"`, `"decap"`,
//! `{ encap = "vxlan" | "nvgre", vni = N }`, `{ dnat = ["10.0.0.5:80", "10.0.0.6", "[2001:db8::5]:80"] }`,
//! `{ snat = "203.0.113.1", ports = "1024-65535" }` (ports default to `1024-65535`),
//! `{ route = "vnet" | "uplink" | "drop" }`, `{ route = { vport = 1 } }`,
//! `{ meter = "gold" }` (by name, or by index). The word forms of the command line (below) are
//! accepted as strings too (`action = "encap vxlan vni 42"`).
//!
//! Which actions a layer may use: acl: allow, allow-stateful, deny, pass; vnet: encap, decap,
//! pass, deny; nat: dnat, snat, pass, deny; route: route, pass, deny; meter: meter, pass.
//! Unknown keys are errors everywhere.
//!
//! # Command-line forms
//!
//! Space-separated `key=value` words; `action=` (in a rule) and `default=` (in a layer) take the
//! rest of the line:
//!
//! - rule: `id=3 priority=10 dir=out ip.dst=10.0.0.0/24 l4.dst=80-90 ip.proto=6,17
//!   action=allow-stateful` (a comma makes a set);
//! - layer: `name=acl2 kind=acl default=deny`;
//! - mapping: `ca=10.0.0.2 pa=192.168.100.2 mac=02:00:00:00:00:02 vni=42`;
//! - action: `pass`, `deny`, `allow`, `allow-stateful`, `decap`, `encap vxlan vni 42`,
//!   `encap nvgre vsid 42`, `dnat 10.0.0.5:80 10.0.0.6`, `snat 203.0.113.1 1024-65535`,
//!   `route vnet|uplink|drop`, `route vport 1`, `meter 0` (names need the policy:
//!   [`parse_action_with`]), or a TOML inline table as in the file. These are the spellings of
//!   `Action`'s `Display`, so a printed action parses back.

use crate::key::{Direction, VPortId};
use crate::policy::{
    Action, Exceed, Field, LayerKind, LayerPolicy, Mac, Mapping, Matcher, MeterId, MeterSpec,
    Policy, Predicate, QueueSpec, RouteTarget, Rule, TunnelKind, Underlay, VPortPolicy, Value,
};
use core::fmt;
use core::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::ops::Range;
use toml::Spanned;

/// The `file` of errors in command-line input.
pub const COMMAND_LINE: &str = "<command line>";
/// The `file` of errors found by [`apply_edits`].
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
    /// for TOML syntax errors and unreadable files. Errors of [`apply_edits`] start with
    /// `edit[N]` (the index of the failing edit).
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

/// One change from the control plane. A list of edits is one transaction ([`apply_edits`]).
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyEdit {
    /// Add a rule to a layer; its id must be new in the layer.
    AddRule {
        /// The vPort.
        vport: VPortId,
        /// The layer's name.
        layer: String,
        /// The rule.
        rule: Rule,
    },
    /// Remove the rule with this id.
    RemoveRule {
        /// The vPort.
        vport: VPortId,
        /// The layer's name.
        layer: String,
        /// The rule's id.
        id: u32,
    },
    /// Insert a layer (with its rules and mappings) at `position` in outbound order.
    AddLayer {
        /// The vPort.
        vport: VPortId,
        /// The layer; its name must be new in the vPort.
        layer: LayerPolicy,
        /// Index in the layer list; `None` appends.
        position: Option<usize>,
    },
    /// Remove the layer called `name`.
    RemoveLayer {
        /// The vPort.
        vport: VPortId,
        /// The layer's name.
        name: String,
    },
    /// Add a CA -> PA mapping to a VNET layer; the CA must be new in the layer.
    AddMapping {
        /// The vPort.
        vport: VPortId,
        /// The (vnet) layer's name.
        layer: String,
        /// The mapping.
        mapping: Mapping,
    },
    /// Remove the mapping of customer address `ca`.
    RemoveMapping {
        /// The vPort.
        vport: VPortId,
        /// The layer's name.
        layer: String,
        /// The customer address.
        ca: IpAddr,
    },
    /// Replace the whole policy.
    Replace(Policy),
}

// ---------------------------------------------------------------------------------------------
// A TOML tree with spans.

/// A TOML value with the spans of every key and value (read with `toml_edit`, which keeps
/// them), converted to the policy by hand so every error knows its path.
#[derive(Debug)]
enum Node {
    Str(String),
    Int(i64),
    Float,
    Bool,
    Array(Vec<Spanned<Node>>),
    Table(Vec<Entry>),
}

impl Node {
    fn what(&self) -> &'static str {
        match self {
            Node::Str(_) => "a string",
            Node::Int(_) => "an integer",
            Node::Float => "a float",
            Node::Bool => "a boolean",
            Node::Array(_) => "an array",
            Node::Table(_) => "a table",
        }
    }
}

/// A span, or `fallback` for items the parser gave none (implicit tables of dotted keys).
fn span_or(s: Option<Range<usize>>, fallback: &Range<usize>) -> Range<usize> {
    s.unwrap_or_else(|| fallback.clone())
}

/// Reads a whole document into a [`Node`] table.
fn parse_doc(cx: &Cx<'_>, text: &str) -> Result<Vec<Entry>, ConfigError> {
    let doc = toml_edit::ImDocument::parse(text).map_err(|e| cx.syntax(&e))?;
    table_entries(cx, doc.as_table(), &(0..0))
}

fn table_entries(
    cx: &Cx<'_>,
    t: &toml_edit::Table,
    fallback: &Range<usize>,
) -> Result<Vec<Entry>, ConfigError> {
    let mut out = Vec::with_capacity(t.len());
    for (k, item) in t.iter() {
        let v = item_node(cx, item, fallback)?;
        let ks = span_or(t.key(k).and_then(toml_edit::Key::span), &v.span());
        out.push((Spanned::new(ks, k.to_owned()), v));
    }
    Ok(out)
}

fn item_node(
    cx: &Cx<'_>,
    item: &toml_edit::Item,
    fallback: &Range<usize>,
) -> Result<Spanned<Node>, ConfigError> {
    let span = span_or(item.span(), fallback);
    let node = match item {
        toml_edit::Item::None => Node::Table(Vec::new()),
        toml_edit::Item::Value(v) => return value_node(cx, v, fallback),
        toml_edit::Item::Table(t) => Node::Table(table_entries(cx, t, &span)?),
        toml_edit::Item::ArrayOfTables(a) => {
            let mut out = Vec::with_capacity(a.len());
            for t in a.iter() {
                let ts = span_or(t.span(), &span);
                let entries = table_entries(cx, t, &ts)?;
                out.push(Spanned::new(ts, Node::Table(entries)));
            }
            Node::Array(out)
        }
    };
    Ok(Spanned::new(span, node))
}

fn value_node(
    cx: &Cx<'_>,
    v: &toml_edit::Value,
    fallback: &Range<usize>,
) -> Result<Spanned<Node>, ConfigError> {
    use toml_edit::Value as V;
    let span = span_or(v.span(), fallback);
    let node = match v {
        V::String(s) => Node::Str(s.value().clone()),
        V::Integer(i) => Node::Int(*i.value()),
        V::Float(_) => Node::Float,
        V::Boolean(_) => Node::Bool,
        V::Datetime(_) => {
            return Err(cx.err(span.start, "", "dates and times are not used in policies"));
        }
        V::Array(a) => {
            let mut out = Vec::with_capacity(a.len());
            for x in a.iter() {
                out.push(value_node(cx, x, &span)?);
            }
            Node::Array(out)
        }
        V::InlineTable(t) => {
            let mut out = Vec::with_capacity(t.len());
            for (k, x) in t.iter() {
                let xv = value_node(cx, x, &span)?;
                let ks = span_or(t.key(k).and_then(toml_edit::Key::span), &xv.span());
                out.push((Spanned::new(ks, k.to_owned()), xv));
            }
            Node::Table(out)
        }
    };
    Ok(Spanned::new(span, node))
}

/// A key and its value.
type Entry = (Spanned<String>, Spanned<Node>);
type Entries = [Entry];

/// Conversion context: the text (for line/column), the file name and the position of every
/// field path met, so that errors found later by [`validate`] point at the right place.
struct Cx<'a> {
    text: &'a str,
    file: &'a str,
    /// Bytes of `text` that precede the user's input (a wrapper added for parsing).
    shift: usize,
    spans: HashMap<String, usize>,
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
    fn new(text: &'a str, file: &'a str) -> Self {
        Cx { text, file, shift: 0, spans: HashMap::new() }
    }

    fn err(&self, at: usize, field: impl Into<String>, message: impl Into<String>) -> ConfigError {
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

    fn mark(&mut self, path: &str, at: usize) {
        self.spans.insert(path.to_owned(), at);
    }

    /// An error of [`validate`], placed at its field (or the nearest enclosing one).
    fn locate(&self, inv: Invalid) -> ConfigError {
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

    fn syntax(&self, e: &toml_edit::TomlError) -> ConfigError {
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

fn join(path: &str, seg: &str) -> String {
    if path.is_empty() { seg.to_owned() } else { format!("{path}.{seg}") }
}

/// A table being converted: remembers which keys were used so unknown ones are reported.
struct Tbl<'n> {
    entries: &'n Entries,
    used: Vec<bool>,
    at: usize,
    path: String,
    allowed: &'static [&'static str],
}

impl<'n> Tbl<'n> {
    fn of(
        cx: &Cx<'_>,
        v: &'n Spanned<Node>,
        path: &str,
        allowed: &'static [&'static str],
    ) -> Result<Self, ConfigError> {
        match v.get_ref() {
            Node::Table(entries) => Ok(Tbl {
                entries,
                used: vec![false; entries.len()],
                at: v.span().start,
                path: path.to_owned(),
                allowed,
            }),
            other => Err(cx.err(
                v.span().start,
                path,
                format!("expected a table, found {}", other.what()),
            )),
        }
    }

    fn get(&mut self, key: &str) -> Option<&'n Spanned<Node>> {
        let i = self.entries.iter().position(|(k, _)| k.get_ref() == key)?;
        if let Some(u) = self.used.get_mut(i) {
            *u = true;
        }
        self.entries.get(i).map(|(_, v)| v)
    }

    fn req(&mut self, cx: &Cx<'_>, key: &str) -> Result<&'n Spanned<Node>, ConfigError> {
        self.get(key)
            .ok_or_else(|| cx.err(self.at, join(&self.path, key), format!("missing key `{key}`")))
    }

    fn finish(&self, cx: &Cx<'_>) -> Result<(), ConfigError> {
        for ((k, _), used) in self.entries.iter().zip(&self.used) {
            if !used {
                return Err(cx.err(
                    k.span().start,
                    join(&self.path, k.get_ref()),
                    format!(
                        "unknown key `{}` (expected one of: {})",
                        k.get_ref(),
                        self.allowed.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }
}

fn want_str<'n>(cx: &Cx<'_>, v: &'n Spanned<Node>, path: &str) -> Result<&'n str, ConfigError> {
    match v.get_ref() {
        Node::Str(s) => Ok(s),
        other => {
            Err(cx.err(v.span().start, path, format!("expected a string, found {}", other.what())))
        }
    }
}

fn want_uint(cx: &Cx<'_>, v: &Spanned<Node>, path: &str, max: u64) -> Result<u64, ConfigError> {
    match v.get_ref() {
        Node::Int(n) => match u64::try_from(*n) {
            Ok(u) if u <= max => Ok(u),
            _ => Err(cx.err(
                v.span().start,
                path,
                format!("{n} is out of range (expected 0..={max})"),
            )),
        },
        other => Err(cx.err(
            v.span().start,
            path,
            format!("expected an integer, found {}", other.what()),
        )),
    }
}

fn want_array<'n>(
    cx: &Cx<'_>,
    v: &'n Spanned<Node>,
    path: &str,
) -> Result<&'n [Spanned<Node>], ConfigError> {
    match v.get_ref() {
        Node::Array(a) => Ok(a),
        other => {
            Err(cx.err(v.span().start, path, format!("expected an array, found {}", other.what())))
        }
    }
}

/// Converts with `f` a string value; `f`'s error message is placed at the value.
fn str_with<T>(
    cx: &mut Cx<'_>,
    v: &Spanned<Node>,
    path: &str,
    f: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, ConfigError> {
    cx.mark(path, v.span().start);
    let s = want_str(cx, v, path)?;
    f(s).map_err(|m| cx.err(v.span().start, path, m))
}

fn uint(cx: &mut Cx<'_>, v: &Spanned<Node>, path: &str, max: u64) -> Result<u64, ConfigError> {
    cx.mark(path, v.span().start);
    want_uint(cx, v, path, max)
}

// ---------------------------------------------------------------------------------------------
// Scalars shared by the file and the command line.

fn parse_ip(s: &str) -> Result<IpAddr, String> {
    s.trim().parse().map_err(|_| format!("bad IP address `{s}`"))
}

fn parse_mac(s: &str) -> Result<Mac, String> {
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

fn fmt_mac(m: &Mac) -> String {
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

fn parse_num<T: TryFrom<u64>>(s: &str, what: &str) -> Result<T, String> {
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
fn parse_rate(s: &str) -> Result<u64, String> {
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

fn fmt_rate(bps: u64) -> String {
    for (unit, mult) in RATE_UNITS {
        if bps >= mult && bps / mult * mult == bps {
            return format!("{}{unit}", bps / mult);
        }
    }
    format!("{bps}bit")
}

fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    match s.split_once('-') {
        Some((a, b)) => Ok((parse_num(a, "port")?, parse_num(b, "port")?)),
        None => {
            let p = parse_num(s, "port")?;
            Ok((p, p))
        }
    }
}

/// `10.0.0.5`, `10.0.0.5:80`, `2001:db8::5`, `[2001:db8::5]:80`.
fn parse_backend(s: &str) -> Result<(IpAddr, Option<u16>), String> {
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

fn fmt_backend(ip: IpAddr, port: Option<u16>) -> String {
    match port {
        Some(p) => SocketAddr::new(ip, p).to_string(),
        None => ip.to_string(),
    }
}

fn parse_dir(s: &str) -> Result<Option<Direction>, String> {
    match s.trim() {
        "in" => Ok(Some(Direction::In)),
        "out" => Ok(Some(Direction::Out)),
        "both" | "any" => Ok(None),
        _ => Err(format!("bad direction `{s}` (expected in, out or both)")),
    }
}

fn parse_kind(s: &str) -> Result<LayerKind, String> {
    LayerKind::from_name(s.trim())
        .ok_or_else(|| format!("bad layer kind `{s}` (expected acl, vnet, nat, route or meter)"))
}

/// What a field holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Ip,
    Mac,
    /// A number up to this value.
    Int(u64),
}

fn class(f: Field) -> Class {
    match f {
        Field::EthSrc | Field::EthDst => Class::Mac,
        Field::IpSrc | Field::IpDst | Field::OuterIpSrc | Field::OuterIpDst => Class::Ip,
        Field::EtherType | Field::L4Src | Field::L4Dst => Class::Int(0xffff),
        Field::IpProto => Class::Int(0xff),
        Field::Vni => Class::Int(u64::from(MAX_VNI)),
    }
}

fn class_hint(f: Field) -> &'static str {
    match class(f) {
        Class::Ip => "an address \"10.0.0.1\", a prefix \"10.0.0.0/24\" or a list of addresses",
        Class::Mac => "a MAC \"02:00:00:00:00:0a\" or a list of MACs",
        Class::Int(_) => "a number, a range \"lo-hi\" or a list of numbers",
    }
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
fn single_value(f: Field, s: &str) -> Result<Value, String> {
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
fn matcher_from_str(f: Field, s: &str) -> Result<Matcher, String> {
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

fn ident_ok(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|c| c.is_ascii_alphabetic())
        && c.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && s.len() <= MAX_NAME_LEN
}

fn layer_seg(index: usize, name: &str) -> String {
    if ident_ok(name) { format!("layer[{name}]") } else { format!("layer[{index}]") }
}

fn rule_seg(id: u32) -> String {
    format!("rule[id={id}]")
}

// ---------------------------------------------------------------------------------------------
// Actions in words (the command line, and strings in the file).

/// Words of `s` with their byte offsets; commas separate words too.
fn words(s: &str) -> Vec<(usize, &str)> {
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

fn meter_ref(s: &str, meters: Option<&[MeterSpec]>) -> Result<MeterId, String> {
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
fn action_words(s: &str, meters: Option<&[MeterSpec]>) -> Result<Action, (usize, String)> {
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

// ---------------------------------------------------------------------------------------------
// TOML -> policy.

const TOP_KEYS: &[&str] = &["underlay", "meter", "queue", "vport"];
const UNDERLAY_KEYS: &[&str] = &["port", "ip", "mac", "gateway_mac", "vxlan_port", "ttl"];
const METER_KEYS: &[&str] = &["name", "rate", "rate_bps", "burst", "exceed"];
const QUEUE_KEYS: &[&str] = &["port", "rate", "rate_bps", "ecn_threshold", "limit"];
const VPORT_KEYS: &[&str] = &["id", "name", "port", "mac", "ips", "vni", "meter", "layer"];
const LAYER_KEYS: &[&str] = &["name", "kind", "default", "rules", "mappings"];
const RULE_KEYS: &[&str] = &["id", "priority", "dir", "match", "action"];
const MAPPING_KEYS: &[&str] = &["ca", "pa", "mac", "vni"];
const ACTION_KINDS: &[&str] = &["encap", "dnat", "snat", "route", "meter"];

/// An array of tables (or one table) at `v`.
fn tables<'n>(
    cx: &Cx<'_>,
    v: &'n Spanned<Node>,
    path: &str,
) -> Result<Vec<&'n Spanned<Node>>, ConfigError> {
    match v.get_ref() {
        Node::Array(a) => Ok(a.iter().collect()),
        Node::Table(_) => Ok(vec![v]),
        other => Err(cx.err(
            v.span().start,
            path,
            format!("expected an array of tables, found {}", other.what()),
        )),
    }
}

fn rate_of(cx: &mut Cx<'_>, t: &mut Tbl<'_>, path: &str) -> Result<u64, ConfigError> {
    let rp = join(path, "rate");
    match (t.get("rate"), t.get("rate_bps")) {
        (Some(_), Some(b)) => {
            Err(cx.err(b.span().start, rp, "give `rate` or `rate_bps`, not both"))
        }
        (Some(r), None) => str_with(cx, r, &rp, parse_rate),
        (None, Some(b)) => uint(cx, b, &rp, i64::MAX as u64),
        (None, None) => {
            Err(cx.err(t.at, rp, "missing key `rate` (like \"100mbit\"; or `rate_bps`)"))
        }
    }
}

fn conv_underlay(cx: &mut Cx<'_>, v: &Spanned<Node>) -> Result<Underlay, ConfigError> {
    let path = "underlay";
    cx.mark(path, v.span().start);
    let mut t = Tbl::of(cx, v, path, UNDERLAY_KEYS)?;
    let mut u = Underlay::default();
    if let Some(x) = t.get("port") {
        u.port = uint(cx, x, "underlay.port", 0xffff)? as u16;
    }
    if let Some(x) = t.get("ip") {
        u.ip = str_with(cx, x, "underlay.ip", parse_ip)?;
    }
    if let Some(x) = t.get("mac") {
        u.mac = str_with(cx, x, "underlay.mac", parse_mac)?;
    }
    if let Some(x) = t.get("gateway_mac") {
        u.gateway_mac = str_with(cx, x, "underlay.gateway_mac", parse_mac)?;
    }
    if let Some(x) = t.get("vxlan_port") {
        u.vxlan_port = uint(cx, x, "underlay.vxlan_port", 0xffff)? as u16;
    }
    if let Some(x) = t.get("ttl") {
        u.ttl = uint(cx, x, "underlay.ttl", 0xff)? as u8;
    }
    t.finish(cx)?;
    Ok(u)
}

fn conv_meters(cx: &mut Cx<'_>, v: &Spanned<Node>) -> Result<Vec<MeterSpec>, ConfigError> {
    let mut out = Vec::new();
    for (i, m) in tables(cx, v, "meter")?.into_iter().enumerate() {
        let path = format!("meter[{i}]");
        cx.mark(&path, m.span().start);
        let mut t = Tbl::of(cx, m, &path, METER_KEYS)?;
        let np = join(&path, "name");
        let name = str_with(cx, t.req(cx, "name")?, &np, |s| Ok(s.to_owned()))?;
        let rate_bps = rate_of(cx, &mut t, &path)?;
        let burst_bytes = uint(cx, t.req(cx, "burst")?, &join(&path, "burst"), i64::MAX as u64)?;
        let exceed = match t.get("exceed") {
            Some(x) => str_with(cx, x, &join(&path, "exceed"), |s| match s {
                "drop" => Ok(Exceed::Drop),
                "mark" => Ok(Exceed::Mark),
                _ => Err(format!("bad exceed `{s}` (expected drop or mark)")),
            })?,
            None => Exceed::Drop,
        };
        t.finish(cx)?;
        out.push(MeterSpec { name, rate_bps, burst_bytes, exceed });
    }
    Ok(out)
}

fn conv_queues(cx: &mut Cx<'_>, v: &Spanned<Node>) -> Result<Vec<QueueSpec>, ConfigError> {
    let mut out = Vec::new();
    for (i, q) in tables(cx, v, "queue")?.into_iter().enumerate() {
        let path = format!("queue[{i}]");
        cx.mark(&path, q.span().start);
        let mut t = Tbl::of(cx, q, &path, QUEUE_KEYS)?;
        let port = uint(cx, t.req(cx, "port")?, &join(&path, "port"), 0xffff)? as u16;
        let rate_bps = rate_of(cx, &mut t, &path)?;
        let max = MAX_QUEUE_LIMIT as u64;
        let ecn_threshold = match t.get("ecn_threshold") {
            Some(x) => uint(cx, x, &join(&path, "ecn_threshold"), max)? as usize,
            None => 64,
        };
        let limit = match t.get("limit") {
            Some(x) => uint(cx, x, &join(&path, "limit"), max)? as usize,
            None => 256,
        };
        t.finish(cx)?;
        out.push(QueueSpec { port, rate_bps, ecn_threshold, limit });
    }
    Ok(out)
}

fn conv_vports(
    cx: &mut Cx<'_>,
    v: &Spanned<Node>,
    meters: &[MeterSpec],
) -> Result<Vec<VPortPolicy>, ConfigError> {
    let mut out = Vec::new();
    for (i, vp) in tables(cx, v, "vport")?.into_iter().enumerate() {
        let path = format!("vport[{i}]");
        cx.mark(&path, vp.span().start);
        let mut t = Tbl::of(cx, vp, &path, VPORT_KEYS)?;
        let id = VPortId(uint(cx, t.req(cx, "id")?, &join(&path, "id"), 0xffff)? as u16);
        let name = match t.get("name") {
            Some(x) => str_with(cx, x, &join(&path, "name"), |s| Ok(s.to_owned()))?,
            None => format!("vport{}", id.0),
        };
        let port = uint(cx, t.req(cx, "port")?, &join(&path, "port"), 0xffff)? as u16;
        let mac = str_with(cx, t.req(cx, "mac")?, &join(&path, "mac"), parse_mac)?;
        let mut ips = Vec::new();
        if let Some(x) = t.get("ips") {
            let ip_path = join(&path, "ips");
            cx.mark(&ip_path, x.span().start);
            for (j, e) in want_array(cx, x, &ip_path)?.iter().enumerate() {
                ips.push(str_with(cx, e, &format!("{ip_path}[{j}]"), parse_ip)?);
            }
        }
        let vni = match t.get("vni") {
            Some(x) => uint(cx, x, &join(&path, "vni"), u64::from(u32::MAX))? as u32,
            None => 0,
        };
        let meter = match t.get("meter") {
            Some(x) => Some(meter_node(cx, x, &join(&path, "meter"), meters)?),
            None => None,
        };
        let mut layers = Vec::new();
        if let Some(x) = t.get("layer") {
            for (li, l) in tables(cx, x, &join(&path, "layer"))?.into_iter().enumerate() {
                layers.push(conv_layer(cx, l, &path, li, vni, meters)?);
            }
        }
        t.finish(cx)?;
        out.push(VPortPolicy { id, name, port, mac, ips, vni, meter, layers });
    }
    Ok(out)
}

fn meter_node(
    cx: &mut Cx<'_>,
    v: &Spanned<Node>,
    path: &str,
    meters: &[MeterSpec],
) -> Result<MeterId, ConfigError> {
    cx.mark(path, v.span().start);
    match v.get_ref() {
        Node::Int(_) => Ok(MeterId(want_uint(cx, v, path, 0xffff)? as u16)),
        Node::Str(s) => meter_ref(s, Some(meters)).map_err(|m| cx.err(v.span().start, path, m)),
        other => Err(cx.err(
            v.span().start,
            path,
            format!("expected a meter name, found {}", other.what()),
        )),
    }
}

fn conv_layer(
    cx: &mut Cx<'_>,
    v: &Spanned<Node>,
    vpath: &str,
    li: usize,
    vport_vni: u32,
    meters: &[MeterSpec],
) -> Result<LayerPolicy, ConfigError> {
    let ipath = join(vpath, &format!("layer[{li}]"));
    let mut t = Tbl::of(cx, v, &ipath, LAYER_KEYS)?;
    let name = str_with(cx, t.req(cx, "name")?, &join(&ipath, "name"), |s| Ok(s.to_owned()))?;
    let path = join(vpath, &layer_seg(li, &name));
    cx.mark(&path, v.span().start);
    if let Some(&at) = cx.spans.get(&join(&ipath, "name")) {
        cx.mark(&join(&path, "name"), at);
    }
    t.path.clone_from(&path);
    let kind = match t.get("kind") {
        Some(x) => str_with(cx, x, &join(&path, "kind"), parse_kind)?,
        None => LayerKind::from_name(&name).ok_or_else(|| {
            cx.err(t.at, join(&path, "kind"), "missing key `kind` (acl, vnet, nat, route or meter)")
        })?,
    };
    let default = match t.get("default") {
        Some(x) => conv_action(cx, x, &join(&path, "default"), Some(meters))?,
        None if kind == LayerKind::Acl => Action::Deny,
        None => Action::Pass,
    };
    let mut rules = Vec::new();
    if let Some(x) = t.get("rules") {
        for (ri, r) in tables(cx, x, &join(&path, "rules"))?.into_iter().enumerate() {
            rules.push(conv_rule(cx, r, &path, ri, Some(meters))?);
        }
    }
    let mut mappings = Vec::new();
    if let Some(x) = t.get("mappings") {
        for (mi, m) in tables(cx, x, &join(&path, "mappings"))?.into_iter().enumerate() {
            mappings.push(conv_mapping(
                cx,
                m,
                &join(&path, &format!("mapping[{mi}]")),
                Some(vport_vni),
            )?);
        }
    }
    t.finish(cx)?;
    Ok(LayerPolicy { name, kind, rules, default, mappings })
}

fn conv_mapping(
    cx: &mut Cx<'_>,
    v: &Spanned<Node>,
    path: &str,
    default_vni: Option<u32>,
) -> Result<Mapping, ConfigError> {
    cx.mark(path, v.span().start);
    let mut t = Tbl::of(cx, v, path, MAPPING_KEYS)?;
    let ca = str_with(cx, t.req(cx, "ca")?, &join(path, "ca"), parse_ip)?;
    let pa = str_with(cx, t.req(cx, "pa")?, &join(path, "pa"), parse_ip)?;
    let mac = str_with(cx, t.req(cx, "mac")?, &join(path, "mac"), parse_mac)?;
    let vni = match (t.get("vni"), default_vni) {
        (Some(x), _) => uint(cx, x, &join(path, "vni"), u64::from(u32::MAX))? as u32,
        (None, Some(d)) => d,
        (None, None) => return Err(cx.err(t.at, join(path, "vni"), "missing key `vni`")),
    };
    t.finish(cx)?;
    Ok(Mapping { ca, pa, mac, vni })
}

fn conv_rule(
    cx: &mut Cx<'_>,
    v: &Spanned<Node>,
    lpath: &str,
    ri: usize,
    meters: Option<&[MeterSpec]>,
) -> Result<Rule, ConfigError> {
    let ipath = join(lpath, &format!("rule[{ri}]"));
    let mut t = Tbl::of(cx, v, &ipath, RULE_KEYS)?;
    let idv = t.req(cx, "id")?;
    let id = want_uint(cx, idv, &join(&ipath, "id"), u64::from(u32::MAX))? as u32;
    let path = join(lpath, &rule_seg(id));
    cx.mark(&path, v.span().start);
    cx.mark(&join(&path, "id"), idv.span().start);
    t.path.clone_from(&path);
    let priority = match t.get("priority") {
        Some(x) => uint(cx, x, &join(&path, "priority"), u64::from(u32::MAX))? as u32,
        None => 0,
    };
    let dir = match t.get("dir") {
        Some(x) => str_with(cx, x, &join(&path, "dir"), parse_dir)?,
        None => None,
    };
    let mut predicates = Vec::new();
    if let Some(x) = t.get("match") {
        let mpath = join(&path, "match");
        cx.mark(&mpath, x.span().start);
        let Node::Table(entries) = x.get_ref() else {
            return Err(cx.err(
                x.span().start,
                mpath,
                format!("expected a table of field = value, found {}", x.get_ref().what()),
            ));
        };
        conv_match(cx, entries, "", &mpath, &mut predicates)?;
    }
    let action = conv_action(cx, t.req(cx, "action")?, &join(&path, "action"), meters)?;
    t.finish(cx)?;
    Ok(Rule { id, priority, dir, predicates, action })
}

/// The `match` table, flattening nested keys (`ip = { dst = .. }` is `"ip.dst"`).
fn conv_match(
    cx: &mut Cx<'_>,
    entries: &Entries,
    prefix: &str,
    mpath: &str,
    out: &mut Vec<Predicate>,
) -> Result<(), ConfigError> {
    for (k, v) in entries {
        let name = join(prefix, k.get_ref());
        match v.get_ref() {
            Node::Table(inner) if Field::from_name(&name).is_none() => {
                conv_match(cx, inner, &name, mpath, out)?;
                continue;
            }
            _ => {}
        }
        let Some(field) = Field::from_name(&name) else {
            let all: Vec<&str> = Field::ALL.iter().map(|f| f.name()).collect();
            return Err(cx.err(
                k.span().start,
                join(mpath, &name),
                format!("unknown field `{name}` (expected one of: {})", all.join(", ")),
            ));
        };
        let path = join(mpath, field.name());
        if out.iter().any(|p| p.field == field) {
            return Err(cx.err(
                k.span().start,
                path,
                format!(
                    "field {} is matched twice; a rule takes one match per field",
                    field.name()
                ),
            ));
        }
        cx.mark(&path, v.span().start);
        let at = v.span().start;
        let bad_type = |cx: &Cx<'_>, what: &str| {
            cx.err(
                at,
                path.clone(),
                format!("{} takes {}, found {what}", field.name(), class_hint(field)),
            )
        };
        let matcher = match v.get_ref() {
            Node::Str(s) => matcher_from_str(field, s).map_err(|m| cx.err(at, path.clone(), m))?,
            Node::Int(n) => match (class(field), u64::try_from(*n)) {
                (Class::Int(_), Ok(u)) => Matcher::Exact(Value::Int(u)),
                (Class::Int(_), Err(_)) => {
                    return Err(cx.err(at, path, format!("{n} is negative")));
                }
                _ => return Err(bad_type(cx, "an integer")),
            },
            Node::Array(items) => {
                let mut vals = Vec::new();
                for it in items {
                    let ia = it.span().start;
                    let val = match it.get_ref() {
                        Node::Str(s) => {
                            single_value(field, s).map_err(|m| cx.err(ia, path.clone(), m))?
                        }
                        Node::Int(n) => match (class(field), u64::try_from(*n)) {
                            (Class::Int(_), Ok(u)) => Value::Int(u),
                            (Class::Int(_), Err(_)) => {
                                return Err(cx.err(ia, path, format!("{n} is negative")));
                            }
                            _ => return Err(bad_type(cx, "an integer in the list")),
                        },
                        other => {
                            return Err(bad_type(cx, &format!("{} in the list", other.what())));
                        }
                    };
                    vals.push(val);
                }
                Matcher::Set(vals)
            }
            other => return Err(bad_type(cx, other.what())),
        };
        out.push(Predicate { field, matcher });
    }
    Ok(())
}

fn conv_action(
    cx: &mut Cx<'_>,
    v: &Spanned<Node>,
    path: &str,
    meters: Option<&[MeterSpec]>,
) -> Result<Action, ConfigError> {
    cx.mark(path, v.span().start);
    let at = v.span().start;
    match v.get_ref() {
        Node::Str(s) => action_words(s, meters).map_err(|(off, m)| {
            // +1 skips the opening quote of a basic string.
            cx.err(at + 1 + off, path, m)
        }),
        Node::Table(entries) => {
            let Some(kind) = entries.iter().map(|(k, _)| k.get_ref().as_str()).find(|k| ACTION_KINDS.contains(k)) else {
                return Err(cx.err(at, path, "an action table needs one of: encap, dnat, snat, route, meter"));
            };
            let allowed: &'static [&'static str] = match kind {
                "encap" => &["encap", "vni"],
                "snat" => &["snat", "ports"],
                "dnat" => &["dnat"],
                "route" => &["route"],
                _ => &["meter"],
            };
            let mut t = Tbl::of(cx, v, path, allowed)?;
            let kp = join(path, kind);
            let kv = t.req(cx, kind)?;
            cx.mark(&kp, kv.span().start);
            let action = match kind {
                "encap" => {
                    let kind = str_with(cx, kv, &kp, |s| match s {
                        "vxlan" => Ok(TunnelKind::Vxlan),
                        "nvgre" => Ok(TunnelKind::Nvgre),
                        _ => Err(format!("bad tunnel kind `{s}` (expected vxlan or nvgre)")),
                    })?;
                    let vni = uint(cx, t.req(cx, "vni")?, &join(path, "vni"), u64::from(u32::MAX))? as u32;
                    Action::Encap { kind, vni }
                }
                "dnat" => {
                    let mut backends = Vec::new();
                    match kv.get_ref() {
                        Node::Str(s) => backends.push(parse_backend(s).map_err(|m| cx.err(kv.span().start, kp.clone(), m))?),
                        _ => {
                            for b in want_array(cx, kv, &kp)? {
                                backends.push(str_with(cx, b, &kp, parse_backend)?);
                            }
                            cx.mark(&kp, kv.span().start);
                        }
                    }
                    Action::Dnat { backends }
                }
                "snat" => {
                    let ip = str_with(cx, kv, &kp, parse_ip)?;
                    let ports = match t.get("ports") {
                        Some(p) => {
                            let pp = join(path, "ports");
                            cx.mark(&pp, p.span().start);
                            match p.get_ref() {
                                Node::Int(_) => {
                                    let n = want_uint(cx, p, &pp, 0xffff)? as u16;
                                    (n, n)
                                }
                                _ => str_with(cx, p, &pp, parse_port_range)?,
                            }
                        }
                        None => (1024, 65535),
                    };
                    Action::Snat { ip, ports }
                }
                "route" => match kv.get_ref() {
                    Node::Table(_) => {
                        let mut rt = Tbl::of(cx, kv, &kp, &["vport"])?;
                        let id = uint(cx, rt.req(cx, "vport")?, &join(&kp, "vport"), 0xffff)? as u16;
                        rt.finish(cx)?;
                        Action::Route(RouteTarget::VPort(VPortId(id)))
                    }
                    _ => Action::Route(str_with(cx, kv, &kp, |s| match s {
                        "vnet" => Ok(RouteTarget::Vnet),
                        "uplink" => Ok(RouteTarget::Uplink),
                        "drop" => Ok(RouteTarget::Drop),
                        _ => Err(format!("bad route target `{s}` (expected vnet, uplink, drop or {{ vport = N }})")),
                    })?),
                },
                _ => {
                    let ms = meters.unwrap_or(&[]);
                    match kv.get_ref() {
                        Node::Str(s) if meters.is_none() && !s.bytes().all(|b| b.is_ascii_digit()) => {
                            return Err(cx.err(kv.span().start, kp, format!("meter `{s}`: meter names need the policy here; give the meter's index")));
                        }
                        _ => Action::Meter(meter_node(cx, kv, &kp, ms)?),
                    }
                }
            };
            t.finish(cx)?;
            Ok(action)
        }
        other => Err(cx.err(at, path, format!("expected an action (a string like \"allow\" or a table like {{ encap = \"vxlan\", vni = 42 }}), found {}", other.what()))),
    }
}

/// Reads a policy from TOML text (the format of the module documentation) and validates it.
/// `file` names the source in errors.
pub fn parse_policy(text: &str, file: &str) -> Result<Policy, ConfigError> {
    let mut cx = Cx::new(text, file);
    let entries = parse_doc(&cx, text)?;
    let mut t = Tbl {
        entries: &entries,
        used: vec![false; entries.len()],
        at: 0,
        path: String::new(),
        allowed: TOP_KEYS,
    };
    let underlay = match t.get("underlay") {
        Some(v) => conv_underlay(&mut cx, v)?,
        None => Underlay::default(),
    };
    let meters = match t.get("meter") {
        Some(v) => conv_meters(&mut cx, v)?,
        None => Vec::new(),
    };
    let queues = match t.get("queue") {
        Some(v) => conv_queues(&mut cx, v)?,
        None => Vec::new(),
    };
    let vports = match t.get("vport") {
        Some(v) => conv_vports(&mut cx, v, &meters)?,
        None => Vec::new(),
    };
    t.finish(&cx)?;
    let policy = Policy { underlay, vports, meters, queues };
    validate_inner(&policy).map_err(|inv| cx.locate(inv))?;
    Ok(policy)
}

/// Reads and parses the policy file at `path` (errors name the file as given).
pub fn load_policy(path: &std::path::Path) -> Result<Policy, ConfigError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: file.clone(),
        line: None,
        column: None,
        field: String::new(),
        message: format!("cannot read the policy file: {e}"),
    })?;
    parse_policy(&text, &file)
}

// ---------------------------------------------------------------------------------------------
// Validation.

/// A semantic error: the field path and the message.
#[derive(Debug)]
struct Invalid {
    field: String,
    message: String,
}

fn inv(field: impl Into<String>, message: impl Into<String>) -> Invalid {
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

fn validate_inner(p: &Policy) -> Result<(), Invalid> {
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

fn validate_layer(p: &Policy, l: &LayerPolicy, path: &str) -> Result<(), Invalid> {
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

fn validate_mapping(p: Option<&Policy>, m: &Mapping, path: &str) -> Result<(), Invalid> {
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

fn validate_rule(
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

fn action_kind(a: &Action) -> &'static str {
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

fn allowed_actions(k: LayerKind) -> &'static [&'static str] {
    match k {
        LayerKind::Acl => &["allow", "allow-stateful", "deny", "pass"],
        LayerKind::Vnet => &["encap", "decap", "pass", "deny"],
        LayerKind::Nat => &["dnat", "snat", "pass", "deny"],
        LayerKind::Route => &["route", "pass", "deny"],
        LayerKind::Meter => &["meter", "pass"],
    }
}

fn validate_action(
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
// Policy -> TOML.

/// A TOML basic string.
fn q(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

fn value_toml(v: &Value) -> String {
    match v {
        Value::Ip(ip) => q(&ip.to_string()),
        Value::Mac(m) => q(&fmt_mac(m)),
        Value::Int(n) => n.to_string(),
    }
}

fn matcher_toml(m: &Matcher) -> String {
    match m {
        Matcher::Exact(v) => value_toml(v),
        Matcher::Prefix(ip, len) => q(&format!("{ip}/{len}")),
        Matcher::Range(lo, hi) => q(&format!("{lo}-{hi}")),
        Matcher::Set(vs) => {
            let items: Vec<String> = vs.iter().map(value_toml).collect();
            format!("[{}]", items.join(", "))
        }
    }
}

fn meter_toml(m: MeterId, meters: &[MeterSpec]) -> String {
    match meters.get(usize::from(m.0)) {
        Some(spec) if ident_ok(&spec.name) => q(&spec.name),
        _ => m.0.to_string(),
    }
}

fn action_toml(a: &Action, meters: &[MeterSpec]) -> String {
    match a {
        Action::Pass | Action::Deny | Action::Allow | Action::AllowStateful | Action::Decap => {
            q(action_kind(a))
        }
        Action::Encap { kind, vni } => {
            let k = match kind {
                TunnelKind::Vxlan => "vxlan",
                TunnelKind::Nvgre => "nvgre",
            };
            format!("{{ encap = {}, vni = {vni} }}", q(k))
        }
        Action::Dnat { backends } => {
            let b: Vec<String> = backends.iter().map(|(ip, p)| q(&fmt_backend(*ip, *p))).collect();
            format!("{{ dnat = [{}] }}", b.join(", "))
        }
        Action::Snat { ip, ports } => {
            format!(
                "{{ snat = {}, ports = {} }}",
                q(&ip.to_string()),
                q(&format!("{}-{}", ports.0, ports.1))
            )
        }
        Action::Route(RouteTarget::Vnet) => "{ route = \"vnet\" }".to_owned(),
        Action::Route(RouteTarget::Uplink) => "{ route = \"uplink\" }".to_owned(),
        Action::Route(RouteTarget::Drop) => "{ route = \"drop\" }".to_owned(),
        Action::Route(RouteTarget::VPort(v)) => format!("{{ route = {{ vport = {} }} }}", v.0),
        Action::Meter(m) => format!("{{ meter = {} }}", meter_toml(*m, meters)),
    }
}

fn rule_toml(r: &Rule, meters: &[MeterSpec]) -> String {
    let mut s = format!("{{ id = {}", r.id);
    if r.priority != 0 {
        let _ = write!(s, ", priority = {}", r.priority);
    }
    if let Some(d) = r.dir {
        let _ = write!(s, ", dir = {}", q(d.name()));
    }
    if !r.predicates.is_empty() {
        let m: Vec<String> = r
            .predicates
            .iter()
            .map(|p| format!("{} = {}", q(p.field.name()), matcher_toml(&p.matcher)))
            .collect();
        let _ = write!(s, ", match = {{ {} }}", m.join(", "));
    }
    let _ = write!(s, ", action = {} }}", action_toml(&r.action, meters));
    s
}

/// Writes `policy` in the TOML format of this module. For a valid policy,
/// `parse_policy(&to_toml(p), _)` gives `p` back.
pub fn to_toml(policy: &Policy) -> String {
    let mut s = String::new();
    let u = &policy.underlay;
    let _ = writeln!(s, "[underlay]");
    let _ = writeln!(s, "port = {}", u.port);
    let _ = writeln!(s, "ip = {}", q(&u.ip.to_string()));
    let _ = writeln!(s, "mac = {}", q(&fmt_mac(&u.mac)));
    let _ = writeln!(s, "gateway_mac = {}", q(&fmt_mac(&u.gateway_mac)));
    let _ = writeln!(s, "vxlan_port = {}", u.vxlan_port);
    let _ = writeln!(s, "ttl = {}", u.ttl);
    for m in &policy.meters {
        let _ = writeln!(s, "\n[[meter]]");
        let _ = writeln!(s, "name = {}", q(&m.name));
        let _ = writeln!(s, "rate = {}", q(&fmt_rate(m.rate_bps)));
        let _ = writeln!(s, "burst = {}", m.burst_bytes);
        let e = match m.exceed {
            Exceed::Drop => "drop",
            Exceed::Mark => "mark",
        };
        let _ = writeln!(s, "exceed = {}", q(e));
    }
    for qu in &policy.queues {
        let _ = writeln!(s, "\n[[queue]]");
        let _ = writeln!(s, "port = {}", qu.port);
        let _ = writeln!(s, "rate = {}", q(&fmt_rate(qu.rate_bps)));
        let _ = writeln!(s, "ecn_threshold = {}", qu.ecn_threshold);
        let _ = writeln!(s, "limit = {}", qu.limit);
    }
    for v in &policy.vports {
        let _ = writeln!(s, "\n[[vport]]");
        let _ = writeln!(s, "id = {}", v.id.0);
        let _ = writeln!(s, "name = {}", q(&v.name));
        let _ = writeln!(s, "port = {}", v.port);
        let _ = writeln!(s, "mac = {}", q(&fmt_mac(&v.mac)));
        let ips: Vec<String> = v.ips.iter().map(|ip| q(&ip.to_string())).collect();
        let _ = writeln!(s, "ips = [{}]", ips.join(", "));
        let _ = writeln!(s, "vni = {}", v.vni);
        if let Some(m) = v.meter {
            let _ = writeln!(s, "meter = {}", meter_toml(m, &policy.meters));
        }
        for l in &v.layers {
            let _ = writeln!(s, "\n  [[vport.layer]]");
            let _ = writeln!(s, "  name = {}", q(&l.name));
            let _ = writeln!(s, "  kind = {}", q(l.kind.name()));
            let _ = writeln!(s, "  default = {}", action_toml(&l.default, &policy.meters));
            if !l.mappings.is_empty() {
                let _ = writeln!(s, "  mappings = [");
                for m in &l.mappings {
                    let _ = writeln!(
                        s,
                        "    {{ ca = {}, pa = {}, mac = {}, vni = {} }},",
                        q(&m.ca.to_string()),
                        q(&m.pa.to_string()),
                        q(&fmt_mac(&m.mac)),
                        m.vni
                    );
                }
                let _ = writeln!(s, "  ]");
            }
            if !l.rules.is_empty() {
                let _ = writeln!(s, "  rules = [");
                for r in &l.rules {
                    let _ = writeln!(s, "    {},", rule_toml(r, &policy.meters));
                }
                let _ = writeln!(s, "  ]");
            }
        }
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Command-line forms.

/// One `key=value` word of a command line.
struct Kv<'s> {
    key: &'s str,
    key_at: usize,
    val: &'s str,
    val_at: usize,
}

/// Splits `s` into `key=value` words; a key in `rest` takes the rest of the line.
fn kv_words<'s>(cx: &Cx<'_>, s: &'s str, rest: &[&str]) -> Result<Vec<Kv<'s>>, ConfigError> {
    let mut out: Vec<Kv<'s>> = Vec::new();
    for (at, w) in s.split_whitespace().map(|w| (w.as_ptr() as usize - s.as_ptr() as usize, w)) {
        if out.last().is_some_and(|last| rest.contains(&last.key)) {
            break;
        }
        let Some((key, val)) = w.split_once('=') else {
            return Err(cx.err(at, "", format!("expected key=value, found `{w}`")));
        };
        if out.iter().any(|k| k.key == key) {
            return Err(cx.err(at, key, format!("`{key}` is given twice")));
        }
        let val_at = at + key.len() + 1;
        let val = if rest.contains(&key) { s.get(val_at..).unwrap_or("").trim_end() } else { val };
        out.push(Kv { key, key_at: at, val, val_at });
    }
    Ok(out)
}

fn cli_req<'k, 's>(
    cx: &Cx<'_>,
    kvs: &'k [Kv<'s>],
    key: &str,
    path: &str,
) -> Result<&'k Kv<'s>, ConfigError> {
    kvs.iter()
        .find(|k| k.key == key)
        .ok_or_else(|| cx.err(0, join(path, key), format!("missing `{key}=`")))
}

fn cli_get<T>(
    cx: &mut Cx<'_>,
    kvs: &[Kv<'_>],
    key: &str,
    path: &str,
    f: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, ConfigError> {
    let kv = cli_req(cx, kvs, key, path)?;
    cli_val(cx, kv, path, f)
}

fn cli_val<T>(
    cx: &mut Cx<'_>,
    kv: &Kv<'_>,
    path: &str,
    f: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, ConfigError> {
    let p = join(path, kv.key);
    cx.mark(&p, kv.val_at);
    f(kv.val).map_err(|m| cx.err(kv.val_at, p, m))
}

fn cli_action(
    cx: &mut Cx<'_>,
    s: &str,
    at: usize,
    path: &str,
    meters: Option<&[MeterSpec]>,
) -> Result<Action, ConfigError> {
    cx.mark(path, at);
    let t = s.trim_start();
    let lead = s.len() - t.len();
    if t.starts_with(['{', '"', '\'']) {
        let wrapped = format!("action = {t}");
        let mut inner = Cx::new(&wrapped, cx.file);
        inner.shift = "action = ".len();
        // Columns of the wrapped text, moved to where `t` starts in the command line.
        let base = cx.text.get(..at + lead).map_or(0, |x| x.chars().count());
        let entries = parse_doc(&inner, &wrapped).map_err(|e| shifted(e, base))?;
        let [(_, v)] = entries.as_slice() else {
            return Err(cx.err(at, path, "expected one action"));
        };
        return conv_action(&mut inner, v, path, meters).map_err(|e| shifted(e, base));
    }
    action_words(s, meters).map_err(|(off, m)| cx.err(at + off, path, m))
}

/// Moves an error found in a sub-string that starts at `base` of a one-line command.
fn shifted(mut e: ConfigError, base: usize) -> ConfigError {
    if e.line == Some(1) {
        e.column = e.column.map(|c| c + base);
    }
    e
}

/// Parses an action in its command-line form (see the module documentation). Meters are
/// given by index; [`parse_action_with`] also resolves names.
pub fn parse_action(s: &str) -> Result<Action, ConfigError> {
    parse_action_with(s, None)
}

/// [`parse_action`], resolving meter names against `meters` when given.
pub fn parse_action_with(s: &str, meters: Option<&[MeterSpec]>) -> Result<Action, ConfigError> {
    let mut cx = Cx::new(s, COMMAND_LINE);
    let a = cli_action(&mut cx, s, 0, "action", meters)?;
    validate_action(None, None, &a, "action").map_err(|i| cx.locate(i))?;
    Ok(a)
}

/// Parses a rule in its command-line form, e.g. `id=3 priority=10 dir=out ip.dst=10.0.0.0/24
/// l4.dst=80-90 ip.proto=6,17 action=allow-stateful`. Checks what can be checked without the
/// layer (the layer's kind, meters and vPorts are checked by [`apply_edits`]).
pub fn parse_rule(s: &str) -> Result<Rule, ConfigError> {
    parse_rule_with(s, None)
}

/// [`parse_rule`], resolving meter names against `meters` when given.
pub fn parse_rule_with(s: &str, meters: Option<&[MeterSpec]>) -> Result<Rule, ConfigError> {
    let mut cx = Cx::new(s, COMMAND_LINE);
    let kvs = kv_words(&cx, s, &["action"])?;
    let path = "rule";
    let id = cli_get(&mut cx, &kvs, "id", path, |v| parse_num::<u32>(v, "rule id"))?;
    let mut rule =
        Rule { id, priority: 0, dir: None, predicates: Vec::new(), action: Action::Pass };
    let mut action = None;
    for kv in &kvs {
        match kv.key {
            "id" => {}
            "priority" | "prio" => {
                rule.priority = cli_val(&mut cx, kv, path, |v| parse_num(v, "priority"))?
            }
            "dir" => rule.dir = cli_val(&mut cx, kv, path, parse_dir)?,
            "action" => {
                action = Some(cli_action(&mut cx, kv.val, kv.val_at, "rule.action", meters)?)
            }
            key => {
                let Some(field) = Field::from_name(key) else {
                    let all: Vec<&str> = Field::ALL.iter().map(|f| f.name()).collect();
                    return Err(cx.err(kv.key_at, join(path, key), format!("unknown key `{key}` (expected id, priority, dir, action or a field: {})", all.join(", "))));
                };
                let fpath = format!("rule.match.{}", field.name());
                if rule.predicates.iter().any(|p| p.field == field) {
                    return Err(cx.err(
                        kv.key_at,
                        fpath,
                        format!(
                            "field {} is matched twice; a rule takes one match per field",
                            field.name()
                        ),
                    ));
                }
                cx.mark(&fpath, kv.val_at);
                let matcher = if kv.val.contains(',') {
                    let mut vals = Vec::new();
                    for (off, w) in words(kv.val) {
                        vals.push(
                            single_value(field, w)
                                .map_err(|m| cx.err(kv.val_at + off, fpath.clone(), m))?,
                        );
                    }
                    Matcher::Set(vals)
                } else {
                    matcher_from_str(field, kv.val)
                        .map_err(|m| cx.err(kv.val_at, fpath.clone(), m))?
                };
                rule.predicates.push(Predicate { field, matcher });
            }
        }
    }
    rule.action = action
        .ok_or_else(|| cx.err(s.len(), "rule.action", "missing `action=` (it comes last)"))?;
    validate_rule(None, None, &rule, path).map_err(|i| cx.locate(i))?;
    Ok(rule)
}

/// Parses a layer in its command-line form, e.g. `name=acl2 kind=acl default=deny` (kind
/// defaults to the name when the name is a kind; default to deny for acl, pass otherwise). The
/// layer has no rules or mappings.
pub fn parse_layer(s: &str) -> Result<LayerPolicy, ConfigError> {
    let mut cx = Cx::new(s, COMMAND_LINE);
    let kvs = kv_words(&cx, s, &["default"])?;
    let path = "layer";
    let name = cli_get(&mut cx, &kvs, "name", path, |v| Ok(v.to_owned()))?;
    let mut kind = None;
    let mut default = None;
    for kv in &kvs {
        match kv.key {
            "name" => {}
            "kind" => kind = Some(cli_val(&mut cx, kv, path, parse_kind)?),
            "default" => {
                default = Some(cli_action(&mut cx, kv.val, kv.val_at, "layer.default", None)?)
            }
            key => {
                return Err(cx.err(
                    kv.key_at,
                    join(path, key),
                    format!("unknown key `{key}` (expected name, kind, default)"),
                ));
            }
        }
    }
    let kind = match kind.or_else(|| LayerKind::from_name(&name)) {
        Some(k) => k,
        None => {
            return Err(cx.err(
                s.len(),
                "layer.kind",
                "missing `kind=` (acl, vnet, nat, route or meter)",
            ));
        }
    };
    let default =
        default.unwrap_or(if kind == LayerKind::Acl { Action::Deny } else { Action::Pass });
    let layer = LayerPolicy { name, kind, rules: Vec::new(), default, mappings: Vec::new() };
    if !ident_ok(&layer.name) {
        return Err(cx.locate(inv("layer.name", format!("bad layer name {:?} (a letter, then letters, digits, '-' or '_'; at most {MAX_NAME_LEN})", layer.name))));
    }
    validate_action(None, Some(kind), &layer.default, "layer.default").map_err(|i| cx.locate(i))?;
    Ok(layer)
}

/// Parses a mapping in its command-line form: `ca=10.0.0.2 pa=192.168.100.2
/// mac=02:00:00:00:00:02 vni=42` (all four required).
pub fn parse_mapping(s: &str) -> Result<Mapping, ConfigError> {
    let mut cx = Cx::new(s, COMMAND_LINE);
    let kvs = kv_words(&cx, s, &[])?;
    let path = "mapping";
    if let Some(kv) = kvs.iter().find(|k| !MAPPING_KEYS.contains(&k.key)) {
        return Err(cx.err(
            kv.key_at,
            join(path, kv.key),
            format!("unknown key `{}` (expected ca, pa, mac, vni)", kv.key),
        ));
    }
    let ca = cli_get(&mut cx, &kvs, "ca", path, parse_ip)?;
    let pa = cli_get(&mut cx, &kvs, "pa", path, parse_ip)?;
    let mac = cli_get(&mut cx, &kvs, "mac", path, parse_mac)?;
    let vni = cli_get(&mut cx, &kvs, "vni", path, |v| parse_num::<u32>(v, "VNI"))?;
    let m = Mapping { ca, pa, mac, vni };
    validate_mapping(None, &m, path).map_err(|i| cx.locate(i))?;
    Ok(m)
}

// ---------------------------------------------------------------------------------------------
// Edits.

fn find_vport(p: &Policy, id: VPortId) -> Result<usize, Invalid> {
    p.vports.iter().position(|v| v.id == id).ok_or_else(|| {
        let ids: Vec<String> = p.vports.iter().map(|v| v.id.0.to_string()).collect();
        inv(
            "vport",
            format!(
                "no vport with id {} (vports: {})",
                id.0,
                if ids.is_empty() { "none".to_owned() } else { ids.join(", ") }
            ),
        )
    })
}

fn find_layer(p: &Policy, vi: usize, name: &str) -> Result<usize, Invalid> {
    let v = p.vports.get(vi).ok_or_else(|| inv("vport", "no such vport"))?;
    v.layers.iter().position(|l| l.name == name).ok_or_else(|| {
        let names: Vec<&str> = v.layers.iter().map(|l| l.name.as_str()).collect();
        inv(
            format!("vport[{vi}].layer"),
            format!(
                "no layer named `{name}` in vport {} (layers: {})",
                v.id.0,
                if names.is_empty() { "none".to_owned() } else { names.join(", ") }
            ),
        )
    })
}

fn layer_path(p: &Policy, vi: usize, li: usize) -> String {
    let name = p.vports.get(vi).and_then(|v| v.layers.get(li)).map_or("", |l| l.name.as_str());
    format!("vport[{vi}].{}", layer_seg(li, name))
}

fn apply_one(p: &mut Policy, e: &PolicyEdit) -> Result<(), Invalid> {
    match e {
        PolicyEdit::AddRule { vport, layer, rule } => {
            let vi = find_vport(p, *vport)?;
            let li = find_layer(p, vi, layer)?;
            let lpath = layer_path(p, vi, li);
            let rpath = join(&lpath, &rule_seg(rule.id));
            let l = &p.vports[vi].layers[li];
            if l.rules.iter().any(|r| r.id == rule.id) {
                return Err(inv(
                    join(&rpath, "id"),
                    format!("rule id {} already exists in layer {}", rule.id, l.name),
                ));
            }
            validate_rule(Some(p), Some(l.kind), rule, &rpath)?;
            p.vports[vi].layers[li].rules.push(rule.clone());
        }
        PolicyEdit::RemoveRule { vport, layer, id } => {
            let vi = find_vport(p, *vport)?;
            let li = find_layer(p, vi, layer)?;
            let lpath = layer_path(p, vi, li);
            let rules = &mut p.vports[vi].layers[li].rules;
            let Some(ri) = rules.iter().position(|r| r.id == *id) else {
                return Err(inv(
                    join(&lpath, &rule_seg(*id)),
                    format!("no rule with id {id} in layer {layer}"),
                ));
            };
            rules.remove(ri);
        }
        PolicyEdit::AddLayer { vport, layer, position } => {
            let vi = find_vport(p, *vport)?;
            let v = &p.vports[vi];
            let n = v.layers.len();
            let pos = position.unwrap_or(n);
            let lpath = format!("vport[{vi}].{}", layer_seg(pos, &layer.name));
            if v.layers.iter().any(|l| l.name == layer.name) {
                return Err(inv(
                    join(&lpath, "name"),
                    format!("layer `{}` already exists in vport {}", layer.name, vport.0),
                ));
            }
            if pos > n {
                return Err(inv(lpath, format!("position {pos} is past the end ({n} layers)")));
            }
            validate_layer(p, layer, &lpath)?;
            p.vports[vi].layers.insert(pos, layer.clone());
        }
        PolicyEdit::RemoveLayer { vport, name } => {
            let vi = find_vport(p, *vport)?;
            let li = find_layer(p, vi, name)?;
            p.vports[vi].layers.remove(li);
        }
        PolicyEdit::AddMapping { vport, layer, mapping } => {
            let vi = find_vport(p, *vport)?;
            let li = find_layer(p, vi, layer)?;
            let l = &p.vports[vi].layers[li];
            let mpath = join(&layer_path(p, vi, li), &format!("mapping[{}]", l.mappings.len()));
            if l.kind != LayerKind::Vnet {
                return Err(inv(
                    mpath,
                    format!(
                        "layer `{}` is a {} layer; mappings belong to vnet layers",
                        l.name,
                        l.kind.name()
                    ),
                ));
            }
            if l.mappings.iter().any(|m| m.ca == mapping.ca) {
                return Err(inv(
                    join(&mpath, "ca"),
                    format!(
                        "customer address {} is already mapped in layer {}",
                        mapping.ca, l.name
                    ),
                ));
            }
            validate_mapping(Some(p), mapping, &mpath)?;
            p.vports[vi].layers[li].mappings.push(*mapping);
        }
        PolicyEdit::RemoveMapping { vport, layer, ca } => {
            let vi = find_vport(p, *vport)?;
            let li = find_layer(p, vi, layer)?;
            let lpath = layer_path(p, vi, li);
            let maps = &mut p.vports[vi].layers[li].mappings;
            let Some(mi) = maps.iter().position(|m| m.ca == *ca) else {
                return Err(inv(
                    join(&lpath, "mapping"),
                    format!("no mapping for customer address {ca} in layer {layer}"),
                ));
            };
            maps.remove(mi);
        }
        PolicyEdit::Replace(new) => {
            validate_inner(new)?;
            new.clone_into(p);
        }
    }
    Ok(())
}

/// The vPorts whose policy differs between `old` and `new` (all of them when the underlay or
/// the meters changed), sorted.
fn changed_vports(old: &Policy, new: &Policy) -> Vec<VPortId> {
    let global = old.underlay != new.underlay || old.meters != new.meters;
    let mut out: Vec<VPortId> = Vec::new();
    for v in &new.vports {
        match old.vport(v.id) {
            Some(o) if o == v && !global => {}
            _ => out.push(v.id),
        }
    }
    for o in &old.vports {
        if new.vport(o.id).is_none() {
            out.push(o.id);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Applies `edits` in order to a copy of `policy`, checking each one; on any error the
/// original is untouched and the error's `field` starts with `edit[N]` (the failing edit). On
/// success returns the new policy and the vPorts whose policy changed (the engine bumps their
/// epochs), sorted by id.
pub fn apply_edits(
    policy: &Policy,
    edits: &[PolicyEdit],
) -> Result<(Policy, Vec<VPortId>), ConfigError> {
    let edit_err = |field: String, message: String| ConfigError {
        file: EDITS.to_owned(),
        line: None,
        column: None,
        field,
        message,
    };
    let mut p = policy.clone();
    for (i, e) in edits.iter().enumerate() {
        apply_one(&mut p, e)
            .map_err(|x| edit_err(join(&format!("edit[{i}]"), &x.field), x.message))?;
    }
    validate_inner(&p).map_err(|x| {
        edit_err(x.field, format!("the policy after the edits is invalid: {}", x.message))
    })?;
    let changed = changed_vports(policy, &p);
    Ok((p, changed))
}

// ---------------------------------------------------------------------------------------------
// The default policy.

/// The embedded default policy, used by tests, benches and `snic vswitch` without a file:
///
/// - underlay on pipeline port 1: PA 192.168.100.1, MAC 02:00:00:00:01:01, gateway
///   02:00:00:00:02:01, VXLAN port 4789, TTL 64; no meters, no queues;
/// - vPort 0 `vm-a` on pipeline port 0: MAC 02:00:00:00:00:01, CA 10.0.0.1, VNI 42, with the
///   layers, in outbound order:
///   - `acl` (acl, default deny): rule 1 allow-stateful, both directions (allow all);
///   - `nat` (nat, default pass): no rules;
///   - `route` (route, default pass): rule 1 out, `ip.dst` 10.0.0.0/8 -> route vnet;
///   - `vnet` (vnet, default pass): mappings 10.0.0.N -> PA 192.168.100.N, MAC
///     02:00:00:00:00:NN (N in hex), VNI 42, for N = 2..=254; rule 1 out: encap vxlan VNI 42;
///     rule 2 in: decap;
///   - `meter` (meter, default pass): no rules.
pub fn default_policy() -> Policy {
    let mappings = (2u8..=254)
        .map(|n| Mapping {
            ca: IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)),
            pa: IpAddr::V4(Ipv4Addr::new(192, 168, 100, n)),
            mac: [2, 0, 0, 0, 0, n],
            vni: 42,
        })
        .collect();
    let layer = |name: &str, kind, default, rules, mappings| LayerPolicy {
        name: name.to_owned(),
        kind,
        rules,
        default,
        mappings,
    };
    let rule = |id, dir, predicates, action| Rule { id, priority: 0, dir, predicates, action };
    let vport = VPortPolicy {
        id: VPortId(0),
        name: "vm-a".to_owned(),
        port: 0,
        mac: [2, 0, 0, 0, 0, 1],
        ips: vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))],
        vni: 42,
        meter: None,
        layers: vec![
            layer(
                "acl",
                LayerKind::Acl,
                Action::Deny,
                vec![rule(1, None, vec![], Action::AllowStateful)],
                vec![],
            ),
            layer("nat", LayerKind::Nat, Action::Pass, vec![], vec![]),
            layer(
                "route",
                LayerKind::Route,
                Action::Pass,
                vec![rule(
                    1,
                    Some(Direction::Out),
                    vec![Predicate {
                        field: Field::IpDst,
                        matcher: Matcher::Prefix(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0)), 8),
                    }],
                    Action::Route(RouteTarget::Vnet),
                )],
                vec![],
            ),
            layer(
                "vnet",
                LayerKind::Vnet,
                Action::Pass,
                vec![
                    rule(
                        1,
                        Some(Direction::Out),
                        vec![],
                        Action::Encap { kind: TunnelKind::Vxlan, vni: 42 },
                    ),
                    rule(2, Some(Direction::In), vec![], Action::Decap),
                ],
                mappings,
            ),
            layer("meter", LayerKind::Meter, Action::Pass, vec![], vec![]),
        ],
    };
    Policy {
        underlay: Underlay {
            port: 1,
            ip: IpAddr::V4(Ipv4Addr::new(192, 168, 100, 1)),
            mac: [2, 0, 0, 0, 1, 1],
            gateway_mac: [2, 0, 0, 0, 2, 1],
            vxlan_port: 4789,
            ttl: 64,
        },
        vports: vec![vport],
        meters: Vec::new(),
        queues: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv6Addr;
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const VNET: &str = include_str!("../examples/vnet.toml");
    const NAT: &str = include_str!("../examples/nat-slb.toml");

    /// A vPort with one layer whose body starts on line 7 (rule lines from line 8).
    const HEAD: &str =
        "[[vport]]\nid = 0\nport = 0\nmac = \"02:00:00:00:00:01\"\n\n  [[vport.layer]]\n";

    fn err(text: &str) -> String {
        match parse_policy(text, "policy.toml") {
            Ok(p) => panic!("parsed: {p:?}"),
            Err(e) => e.to_string(),
        }
    }

    /// The error of a layer (`name`, `kind`) with these rule lines (line 9 onwards).
    fn rule_err(kind: &str, rules: &str) -> String {
        err(&format!("{HEAD}  name = \"{kind}\"\n  rules = [\n{rules}\n  ]\n"))
    }

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

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

    #[test]
    fn vnet_example_parses_to_the_documented_policy() {
        let p = parse_policy(VNET, "vnet.toml").unwrap();
        assert_eq!(p.underlay.ip, v4(192, 168, 100, 1));
        assert_eq!(p.underlay.gateway_mac, [2, 0, 0, 0, 2, 1]);
        assert_eq!(
            p.meters,
            vec![MeterSpec {
                name: "gold".into(),
                rate_bps: 100_000_000,
                burst_bytes: 15000,
                exceed: Exceed::Drop
            }]
        );
        assert_eq!(
            p.queues,
            vec![QueueSpec { port: 0, rate_bps: 1_000_000_000, ecn_threshold: 20, limit: 256 }]
        );
        let v = &p.vports[0];
        assert_eq!(
            (v.id, v.name.as_str(), v.port, v.vni, v.meter),
            (VPortId(0), "vm-a", 0, 42, Some(MeterId(0)))
        );
        let names: Vec<&str> = v.layers.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["acl", "route", "vnet", "qos"]);
        assert_eq!(v.layers[0].default, Action::Deny);
        assert_eq!(v.layers[1].default, Action::Pass);
        assert_eq!(
            v.layers[0].rules[0],
            Rule {
                id: 1,
                priority: 10,
                dir: Some(Direction::Out),
                predicates: vec![
                    Predicate {
                        field: Field::IpDst,
                        matcher: Matcher::Prefix(v4(10, 0, 0, 0), 24)
                    },
                    Predicate { field: Field::L4Dst, matcher: Matcher::Range(80, 90) },
                    Predicate {
                        field: Field::IpProto,
                        matcher: Matcher::Set(vec![Value::Int(6), Value::Int(17)])
                    },
                ],
                action: Action::AllowStateful,
            }
        );
        assert_eq!(
            v.layers[2].mappings,
            vec![Mapping {
                ca: v4(10, 0, 0, 2),
                pa: v4(192, 168, 100, 2),
                mac: [2, 0, 0, 0, 0, 0x0b],
                vni: 42
            }]
        );
        assert_eq!(v.layers[2].rules[0].action, Action::Encap { kind: TunnelKind::Vxlan, vni: 42 });
        assert_eq!(v.layers[3].kind, LayerKind::Meter);
        assert_eq!(v.layers[3].rules[0].action, Action::Meter(MeterId(0)));
        assert_eq!(parse_policy(&to_toml(&p), "again").unwrap(), p);
    }

    #[test]
    fn nat_example_parses() {
        let p = parse_policy(NAT, "nat-slb.toml").unwrap();
        let slb = &p.vports[0].layers[1];
        assert_eq!(slb.kind, LayerKind::Nat);
        assert_eq!(
            slb.rules[0].action,
            Action::Dnat {
                backends: vec![
                    (v4(10, 0, 0, 5), Some(8080)),
                    (v4(10, 0, 0, 6), Some(8080)),
                    (v4(10, 0, 0, 7), Some(8080))
                ]
            }
        );
        assert_eq!(
            slb.rules[1].action,
            Action::Dnat { backends: vec![(v4(10, 0, 0, 8), None), (v4(10, 0, 0, 9), None)] }
        );
        assert_eq!(
            slb.rules[2].action,
            Action::Snat { ip: v4(203, 0, 113, 1), ports: (1024, 65535) }
        );
        // The [[vport.layer.rules]] table form, with a nested match key.
        assert_eq!(slb.rules[3].id, 4);
        assert_eq!(
            slb.rules[3].predicates,
            vec![Predicate { field: Field::IpDst, matcher: Matcher::Prefix(v4(10, 0, 0, 0), 8) }]
        );
        assert_eq!(
            p.vports[0].layers[0].rules[0].predicates[0].matcher,
            Matcher::Set(vec![Value::Int(6), Value::Int(17), Value::Int(1)])
        );
        assert_eq!(
            p.vports[0].layers[2].rules[1].action,
            Action::Route(RouteTarget::VPort(VPortId(1)))
        );
        // Mapping VNIs default to the vPort's.
        assert!(p.vports[0].layers[3].mappings.iter().all(|m| m.vni == 42));
        assert_eq!(p.vports[0].layers[4].rules[0].action, Action::Meter(MeterId(0)));
        // kind defaults to the name.
        assert_eq!(p.vports[1].layers[0].kind, LayerKind::Acl);
        assert_eq!(parse_policy(&to_toml(&p), "again").unwrap(), p);
    }

    #[test]
    fn default_policy_is_valid_and_as_documented() {
        let p = default_policy();
        validate(&p).unwrap();
        assert_eq!(parse_policy(&to_toml(&p), "default").unwrap(), p);
        let v = &p.vports[0];
        let names: Vec<&str> = v.layers.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["acl", "nat", "route", "vnet", "meter"]);
        let maps = &v.layers[3].mappings;
        assert_eq!(maps.len(), 253);
        assert_eq!(
            maps[0],
            Mapping {
                ca: v4(10, 0, 0, 2),
                pa: v4(192, 168, 100, 2),
                mac: [2, 0, 0, 0, 0, 2],
                vni: 42
            }
        );
        assert_eq!(maps[252].ca, v4(10, 0, 0, 254));
        assert_eq!((p.underlay.port, p.underlay.ip), (1, v4(192, 168, 100, 1)));
    }

    #[test]
    fn bad_prefix_length_names_line_and_field() {
        let e = rule_err(
            "acl",
            "    { id = 3, match = { \"ip.dst\" = \"10.0.0.0/33\" }, action = \"allow\" },",
        );
        assert_eq!(
            e,
            "policy.toml:9:36: vport[0].layer[acl].rule[id=3].match.ip.dst: bad prefix length 33 (IPv4 allows 0..=32)"
        );
        let e = rule_err(
            "acl",
            "    { id = 3, match = { \"ip.src\" = \"2001:db8::/129\" }, action = \"allow\" },",
        );
        assert_eq!(
            e,
            "policy.toml:9:36: vport[0].layer[acl].rule[id=3].match.ip.src: bad prefix length 129 (IPv6 allows 0..=128)"
        );
        let e = rule_err(
            "acl",
            "    { id = 3, match = { \"ip.src\" = \"10.0.0.1/24\" }, action = \"allow\" },",
        );
        assert_eq!(
            e,
            "policy.toml:9:36: vport[0].layer[acl].rule[id=3].match.ip.src: host bits set in 10.0.0.1/24 (the network is 10.0.0.0/24)"
        );
    }

    #[test]
    fn match_value_errors() {
        let e = rule_err(
            "acl",
            "    { id = 1, match = { \"l4.dst\" = \"90-80\" }, action = \"allow\" },",
        );
        assert_eq!(
            e,
            "policy.toml:9:36: vport[0].layer[acl].rule[id=1].match.l4.dst: empty range 90-80 (expected lo <= hi)"
        );
        let e = rule_err(
            "acl",
            "    { id = 1, match = { \"l4.dst\" = \"80-70000\" }, action = \"allow\" },",
        );
        assert_eq!(
            e,
            "policy.toml:9:36: vport[0].layer[acl].rule[id=1].match.l4.dst: range end 70000 is out of range for l4.dst (0..=65535)"
        );
        let e =
            rule_err("acl", "    { id = 1, match = { \"l4.src\" = 70000 }, action = \"allow\" },");
        assert_eq!(
            e,
            "policy.toml:9:36: vport[0].layer[acl].rule[id=1].match.l4.src: 70000 is out of range for l4.src (0..=65535)"
        );
        let e =
            rule_err("acl", "    { id = 1, match = { \"ip.proto\" = [] }, action = \"allow\" },");
        assert_eq!(
            e,
            "policy.toml:9:38: vport[0].layer[acl].rule[id=1].match.ip.proto: an empty set matches nothing"
        );
        let e = rule_err("acl", "    { id = 1, match = { \"ip.dst\" = 5 }, action = \"allow\" },");
        assert!(e.starts_with("policy.toml:9:36: vport[0].layer[acl].rule[id=1].match.ip.dst: ip.dst takes an address"), "{e}");
        let e = rule_err(
            "acl",
            "    { id = 1, match = { \"ip.dsst\" = \"10.0.0.1\" }, action = \"allow\" },",
        );
        assert!(e.starts_with("policy.toml:9:25: vport[0].layer[acl].rule[id=1].match.ip.dsst: unknown field `ip.dsst` (expected one of: eth.src,"), "{e}");
        let e = rule_err(
            "acl",
            "    { id = 1, match = { \"ip.dst\" = \"10.0.0.1\", ip = { dst = \"10.0.0.2\" } }, action = \"allow\" },",
        );
        assert_eq!(
            e,
            "policy.toml:9:55: vport[0].layer[acl].rule[id=1].match.ip.dst: field ip.dst is matched twice; a rule takes one match per field"
        );
        let e = rule_err(
            "acl",
            "    { id = 1, match = { \"eth.src\" = \"02:00:00:00:00\" }, action = \"allow\" },",
        );
        assert_eq!(
            e,
            "policy.toml:9:37: vport[0].layer[acl].rule[id=1].match.eth.src: bad MAC address `02:00:00:00:00` (expected six hex bytes like 02:00:00:00:00:0a)"
        );
        let e = rule_err(
            "acl",
            "    { id = 1, match = { \"ip.src\" = [\"10.0.0.0/8\"] }, action = \"allow\" },",
        );
        assert_eq!(
            e,
            "policy.toml:9:37: vport[0].layer[acl].rule[id=1].match.ip.src: a set holds single addresses, not prefixes like `10.0.0.0/8`"
        );
    }

    #[test]
    fn unknown_and_missing_keys() {
        let e = rule_err(
            "acl",
            "    { id = 3, matchh = { \"ip.dst\" = \"10.0.0.0/8\" }, action = \"allow\" },",
        );
        assert_eq!(
            e,
            "policy.toml:9:15: vport[0].layer[acl].rule[id=3].matchh: unknown key `matchh` (expected one of: id, priority, dir, match, action)"
        );
        let e = rule_err("acl", "    { id = 3 },");
        assert_eq!(
            e,
            "policy.toml:9:5: vport[0].layer[acl].rule[id=3].action: missing key `action`"
        );
        let e = err("[[vport]]\nid = 0\nport = 0\n");
        assert_eq!(e, "policy.toml:1:1: vport[0].mac: missing key `mac`");
        let e = err("[underlay]\nport = 1\nipp = \"10.0.0.1\"\n");
        assert_eq!(
            e,
            "policy.toml:3:1: underlay.ipp: unknown key `ipp` (expected one of: port, ip, mac, gateway_mac, vxlan_port, ttl)"
        );
        let e = err("vports = []\n");
        assert_eq!(
            e,
            "policy.toml:1:1: vports: unknown key `vports` (expected one of: underlay, meter, queue, vport)"
        );
        let e = err(&format!("{HEAD}  name = \"x\"\n"));
        assert_eq!(
            e,
            "policy.toml:6:3: vport[0].layer[x].kind: missing key `kind` (acl, vnet, nat, route or meter)"
        );
    }

    #[test]
    fn syntax_and_type_errors() {
        let e = err("[underlay\nport = 1\n");
        assert!(e.starts_with("policy.toml:1:10: TOML syntax: "), "{e}");
        let e = err("[underlay]\nport = 1\nport = 2\n");
        assert!(e.starts_with("policy.toml:3:1: TOML syntax: "), "{e}");
        let e = err("[underlay]\nwhen = 1979-05-27\n");
        assert_eq!(e, "policy.toml:2:8: dates and times are not used in policies");
        let e = err("[underlay]\nport = \"one\"\n");
        assert_eq!(e, "policy.toml:2:8: underlay.port: expected an integer, found a string");
        let e = err("[underlay]\nport = 70000\n");
        assert_eq!(e, "policy.toml:2:8: underlay.port: 70000 is out of range (expected 0..=65535)");
        let e = err("[underlay]\nip = \"10.0.0.256\"\n");
        assert_eq!(e, "policy.toml:2:6: underlay.ip: bad IP address `10.0.0.256`");
        let e = err("[underlay]\nttl = 0\n");
        assert_eq!(
            e,
            "policy.toml:2:7: underlay.ttl: TTL 0 is dropped by the first hop (expected 1..=255)"
        );
        let e = err("underlay = 3\n");
        assert_eq!(e, "policy.toml:1:12: underlay: expected a table, found an integer");
    }

    /// Regression: implicit tables made by dotted keys carry no span in the parser; they must
    /// parse, and errors inside them still get a line.
    #[test]
    fn dotted_keys_parse_and_errors_inside_them_have_lines() {
        let p = parse_policy("underlay.port = 3\nunderlay.ip = \"10.0.0.1\"\n", "d.toml").unwrap();
        assert_eq!((p.underlay.port, p.underlay.ip), (3, v4(10, 0, 0, 1)));
        let text = format!(
            "{HEAD}  name = \"acl\"\n  [[vport.layer.rules]]\n  id = 1\n  match.ip.dst = \"10.0.0.0/8\"\n  action = \"allow\"\n"
        );
        let p = parse_policy(&text, "d.toml").unwrap();
        assert_eq!(
            p.vports[0].layers[0].rules[0].predicates,
            vec![Predicate { field: Field::IpDst, matcher: Matcher::Prefix(v4(10, 0, 0, 0), 8) }]
        );
        assert_eq!(
            err("underlay.tll = 3\n"),
            "policy.toml:1:10: underlay.tll: unknown key `tll` (expected one of: port, ip, mac, gateway_mac, vxlan_port, ttl)"
        );
        assert_eq!(
            err(&text.replace("10.0.0.0/8", "10.0.0.0/40")),
            "policy.toml:10:18: vport[0].layer[acl].rule[id=1].match.ip.dst: bad prefix length 40 (IPv4 allows 0..=32)"
        );
    }

    #[test]
    fn vport_errors() {
        let two = "[[vport]]\nid = 0\nport = 0\nmac = \"02:00:00:00:00:01\"\n[[vport]]\nid = 0\nport = 2\nmac = \"02:00:00:00:00:02\"\n";
        assert_eq!(err(two), "policy.toml:6:6: vport[1].id: vport id 0 is used twice");
        let two = "[[vport]]\nid = 0\nport = 0\nmac = \"02:00:00:00:00:01\"\n[[vport]]\nid = 1\nport = 0\nmac = \"02:00:00:00:00:02\"\n";
        assert_eq!(err(two), "policy.toml:7:8: vport[1].port: port 0 is already vport 0's");
        let e = err("[[vport]]\nid = 0\nport = 1\nmac = \"02:00:00:00:00:01\"\n");
        assert_eq!(e, "policy.toml:3:8: vport[0].port: port 1 is the underlay port");
        let e = err("[[vport]]\nid = 0\nport = 0\nvni = 16777216\nmac = \"02:00:00:00:00:01\"\n");
        assert_eq!(
            e,
            "policy.toml:4:7: vport[0].vni: VNI 16777216 is out of range (VNIs are 24 bits: 0..=16777215)"
        );
        let e = err("[[vport]]\nid = 0\nport = 0\nmeter = \"gold\"\nmac = \"02:00:00:00:00:01\"\n");
        assert_eq!(e, "policy.toml:4:9: vport[0].meter: no meter named `gold` (meters: none)");
        let e = err("[[vport]]\nid = 0\nport = 0\nmeter = 3\nmac = \"02:00:00:00:00:01\"\n");
        assert_eq!(e, "policy.toml:4:9: vport[0].meter: meter 3 does not exist (0 meters)");
    }

    #[test]
    fn layer_and_rule_errors() {
        let e = err(&format!("{HEAD}  name = \"acl\"\n  [[vport.layer]]\n  name = \"acl\"\n"));
        assert_eq!(
            e,
            "policy.toml:9:10: vport[0].layer[acl].name: layer name `acl` is used twice in the vport"
        );
        let e = rule_err(
            "acl",
            "    { id = 3, action = \"allow\" },\n    { id = 3, action = \"deny\" },",
        );
        assert_eq!(
            e,
            "policy.toml:10:12: vport[0].layer[acl].rule[id=3].id: rule id 3 is used twice in layer acl"
        );
        let e = rule_err("acl", "    { id = 3, action = { encap = \"vxlan\", vni = 42 } },");
        assert_eq!(
            e,
            "policy.toml:9:24: vport[0].layer[acl].rule[id=3].action: action `encap vxlan vni 42` is not allowed in a acl layer (acl layers take allow, allow-stateful, deny, pass)"
        );
        let e = rule_err("meter", "    { id = 3, action = \"deny\" },");
        assert_eq!(
            e,
            "policy.toml:9:24: vport[0].layer[meter].rule[id=3].action: action `deny` is not allowed in a meter layer (meter layers take meter, pass)"
        );
        let e = err(&format!("{HEAD}  name = \"nat\"\n  default = \"allow\"\n"));
        assert_eq!(
            e,
            "policy.toml:8:13: vport[0].layer[nat].default: action `allow` is not allowed in a nat layer (nat layers take dnat, snat, pass, deny)"
        );
        let e = rule_err("vnet", "    { id = 3, action = { encap = \"vxlan\", vni = 16777216 } },");
        assert_eq!(
            e,
            "policy.toml:9:49: vport[0].layer[vnet].rule[id=3].action.vni: VNI 16777216 is out of range (VNIs are 24 bits: 0..=16777215)"
        );
        let e = rule_err("vnet", "    { id = 3, action = { encap = \"gre\", vni = 1 } },");
        assert_eq!(
            e,
            "policy.toml:9:34: vport[0].layer[vnet].rule[id=3].action.encap: bad tunnel kind `gre` (expected vxlan or nvgre)"
        );
        let e = rule_err("nat", "    { id = 3, action = { dnat = [] } },");
        assert_eq!(
            e,
            "policy.toml:9:33: vport[0].layer[nat].rule[id=3].action.dnat: dnat needs at least one backend"
        );
        let e = rule_err(
            "nat",
            "    { id = 3, action = { snat = \"203.0.113.1\", ports = \"2000-1000\" } },",
        );
        assert_eq!(
            e,
            "policy.toml:9:56: vport[0].layer[nat].rule[id=3].action.ports: bad SNAT port range 2000-1000 (expected 1 <= lo <= hi)"
        );
        let e = rule_err("route", "    { id = 3, action = { route = { vport = 9 } } },");
        assert_eq!(
            e,
            "policy.toml:9:34: vport[0].layer[route].rule[id=3].action.route: route to vport 9 which does not exist"
        );
        let e = rule_err("route", "    { id = 3, action = { route = \"vnet\", vni = 1 } },");
        assert_eq!(
            e,
            "policy.toml:9:42: vport[0].layer[route].rule[id=3].action.vni: unknown key `vni` (expected one of: route)"
        );
        let e = rule_err("meter", "    { id = 3, action = { meter = \"silver\" } },");
        assert_eq!(
            e,
            "policy.toml:9:34: vport[0].layer[meter].rule[id=3].action.meter: no meter named `silver` (meters: none)"
        );
        let e = rule_err("vnet", "    { id = 3, action = \"encap vxlan vni x\" },");
        assert_eq!(e, "policy.toml:9:41: vport[0].layer[vnet].rule[id=3].action: bad number `x`");
        let e = rule_err("acl", "    { id = 3, dir = \"up\", action = \"allow\" },");
        assert_eq!(
            e,
            "policy.toml:9:21: vport[0].layer[acl].rule[id=3].dir: bad direction `up` (expected in, out or both)"
        );
    }

    #[test]
    fn mapping_meter_queue_errors() {
        let u = "[underlay]\nip = \"192.168.100.1\"\n";
        let e = err(&format!(
            "{u}{HEAD}  name = \"vnet\"\n  mappings = [\n    {{ ca = \"10.0.0.2\", pa = \"2001:db8::2\", mac = \"02:00:00:00:00:02\" }},\n  ]\n"
        ));
        assert_eq!(
            e,
            "policy.toml:11:29: vport[0].layer[vnet].mapping[0].pa: provider address 2001:db8::2 is IPv6 but the underlay address 192.168.100.1 is IPv4"
        );
        let m = "    { ca = \"10.0.0.2\", pa = \"192.168.100.2\", mac = \"02:00:00:00:00:02\" },\n";
        let e = err(&format!("{u}{HEAD}  name = \"vnet\"\n  mappings = [\n{m}{m}  ]\n"));
        assert_eq!(
            e,
            "policy.toml:12:12: vport[0].layer[vnet].mapping[1].ca: customer address 10.0.0.2 is mapped twice"
        );
        let e = err(&format!("{u}{HEAD}  name = \"acl\"\n  mappings = [\n{m}  ]\n"));
        assert_eq!(
            e,
            "policy.toml:11:5: vport[0].layer[acl].mapping[0]: mappings belong to vnet layers, not to a acl layer"
        );
        let e = err("[[meter]]\nname = \"a\"\nrate = \"0mbit\"\nburst = 1\n");
        assert_eq!(e, "policy.toml:3:8: meter[0].rate: rate must be more than 0");
        let e = err("[[meter]]\nname = \"a\"\nrate = \"10mbps\"\nburst = 1\n");
        assert_eq!(
            e,
            "policy.toml:3:8: meter[0].rate: bad rate `10mbps`: expected a number and a unit (bit, kbit, mbit, gbit, tbit), like \"100mbit\""
        );
        let e = err("[[meter]]\nname = \"a\"\nrate = \"1mbit\"\nrate_bps = 5\nburst = 1\n");
        assert_eq!(e, "policy.toml:4:12: meter[0].rate: give `rate` or `rate_bps`, not both");
        let e = err(
            "[[meter]]\nname = \"a\"\nrate = \"1mbit\"\nburst = 1\n[[meter]]\nname = \"a\"\nrate = \"1mbit\"\nburst = 1\n",
        );
        assert_eq!(e, "policy.toml:6:8: meter[1].name: meter name `a` is used twice");
        let e = err("[[meter]]\nname = \"1a\"\nrate = \"1mbit\"\nburst = 1\n");
        assert!(e.starts_with("policy.toml:2:8: meter[0].name: bad meter name \"1a\""), "{e}");
        let e = err("[[queue]]\nport = 0\nrate = \"1gbit\"\necn_threshold = 30\nlimit = 20\n");
        assert_eq!(
            e,
            "policy.toml:5:9: queue[0].limit: limit 20 is out of range (expected ecn_threshold 30..=16777216)"
        );
        let e = err("[[queue]]\nport = 0\nrate = \"1gbit\"\necn_threshold = 0\n");
        assert_eq!(
            e,
            "policy.toml:4:17: queue[0].ecn_threshold: ecn_threshold must be at least 1 packet"
        );
    }

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

    #[test]
    fn command_line_rule() {
        let r = parse_rule("id=3 priority=10 dir=out ip.dst=10.0.0.0/24 l4.dst=80-90 ip.proto=6,17 action=allow-stateful").unwrap();
        assert_eq!(
            r,
            Rule {
                id: 3,
                priority: 10,
                dir: Some(Direction::Out),
                predicates: vec![
                    Predicate {
                        field: Field::IpDst,
                        matcher: Matcher::Prefix(v4(10, 0, 0, 0), 24)
                    },
                    Predicate { field: Field::L4Dst, matcher: Matcher::Range(80, 90) },
                    Predicate {
                        field: Field::IpProto,
                        matcher: Matcher::Set(vec![Value::Int(6), Value::Int(17)])
                    },
                ],
                action: Action::AllowStateful,
            }
        );
        let r = parse_rule("id=1 eth.src=02:00:00:00:00:01 tcp.src=22 action=dnat 10.0.0.5:80 [2001:db8::5]:80 10.0.0.6").unwrap();
        assert_eq!(r.predicates[0].matcher, Matcher::Exact(Value::Mac([2, 0, 0, 0, 0, 1])));
        assert_eq!(
            r.predicates[1],
            Predicate { field: Field::L4Src, matcher: Matcher::Exact(Value::Int(22)) }
        );
        let v6: IpAddr = "2001:db8::5".parse().unwrap();
        assert_eq!(
            r.action,
            Action::Dnat {
                backends: vec![
                    (v4(10, 0, 0, 5), Some(80)),
                    (v6, Some(80)),
                    (v4(10, 0, 0, 6), None)
                ]
            }
        );
        let r = parse_rule("id=2 action={ encap = \"nvgre\", vni = 7 }").unwrap();
        assert_eq!(r.action, Action::Encap { kind: TunnelKind::Nvgre, vni: 7 });

        let e = |s: &str| parse_rule(s).unwrap_err().to_string();
        assert_eq!(
            e("id=3 ip.dst=10.0.0.0/33 action=allow"),
            "<command line>:1:13: rule.match.ip.dst: bad prefix length 33 (IPv4 allows 0..=32)"
        );
        assert_eq!(
            e("id=3 ip.dst=10.0.0.0/24"),
            "<command line>:1:24: rule.action: missing `action=` (it comes last)"
        );
        assert_eq!(e("priority=3 action=deny"), "<command line>:1:1: rule.id: missing `id=`");
        assert_eq!(
            e("id=3 port=4 action=deny"),
            "<command line>:1:6: rule.port: unknown key `port` (expected id, priority, dir, action or a field: eth.src, eth.dst, eth.type, ip.src, ip.dst, ip.proto, l4.src, l4.dst, vni, outer.ip.src, outer.ip.dst)"
        );
        assert_eq!(
            e("id=3 l4.dst=1,x action=deny"),
            "<command line>:1:15: rule.match.l4.dst: bad number `x` for l4.dst (a number, a range \"lo-hi\" or a list of numbers)"
        );
        assert_eq!(
            e("id=3 action=encap vxlan vni 99999999"),
            "<command line>:1:13: rule.action.vni: VNI 99999999 is out of range (VNIs are 24 bits: 0..=16777215)"
        );
        assert_eq!(
            e("id=3 action=encap vxlan"),
            "<command line>:1:24: rule.action: `encap` needs a VNI"
        );
        assert_eq!(e("id=3 id=4 action=deny"), "<command line>:1:6: id: `id` is given twice");
        assert_eq!(
            e("id=3 nonsense action=deny"),
            "<command line>:1:6: expected key=value, found `nonsense`"
        );
        assert_eq!(
            e("id=3 action={ encap = \"vxlan\", vni = \"x\" }"),
            "<command line>:1:38: rule.action.vni: expected an integer, found a string"
        );
        assert_eq!(
            e("id=3 action=meter gold"),
            "<command line>:1:19: rule.action: meter `gold`: meter names need the policy here; give the meter's index"
        );
        let meters =
            [MeterSpec { name: "gold".into(), rate_bps: 1, burst_bytes: 1, exceed: Exceed::Drop }];
        assert_eq!(
            parse_rule_with("id=3 action=meter gold", Some(&meters)).unwrap().action,
            Action::Meter(MeterId(0))
        );
    }

    #[test]
    fn command_line_layer_mapping_action() {
        assert_eq!(
            parse_layer("name=acl2 kind=acl default=deny").unwrap(),
            LayerPolicy {
                name: "acl2".into(),
                kind: LayerKind::Acl,
                rules: vec![],
                default: Action::Deny,
                mappings: vec![]
            }
        );
        let l = parse_layer("name=route").unwrap();
        assert_eq!((l.kind, l.default), (LayerKind::Route, Action::Pass));
        assert_eq!(
            parse_layer("name=r2 kind=route default=route vport 3").unwrap().default,
            Action::Route(RouteTarget::VPort(VPortId(3)))
        );
        assert_eq!(
            parse_layer("name=x").unwrap_err().to_string(),
            "<command line>:1:7: layer.kind: missing `kind=` (acl, vnet, nat, route or meter)"
        );
        assert_eq!(
            parse_layer("name=a.b kind=acl").unwrap_err().to_string(),
            "<command line>:1:6: layer.name: bad layer name \"a.b\" (a letter, then letters, digits, '-' or '_'; at most 64)"
        );
        assert_eq!(
            parse_layer("name=n kind=nat default=allow").unwrap_err().to_string(),
            "<command line>:1:25: layer.default: action `allow` is not allowed in a nat layer (nat layers take dnat, snat, pass, deny)"
        );
        assert_eq!(
            parse_mapping("ca=10.0.0.2 pa=192.168.100.2 mac=02:00:00:00:00:02 vni=42").unwrap(),
            Mapping {
                ca: v4(10, 0, 0, 2),
                pa: v4(192, 168, 100, 2),
                mac: [2, 0, 0, 0, 0, 2],
                vni: 42
            }
        );
        assert_eq!(
            parse_mapping("ca=10.0.0.2 pa=192.168.100.2 mac=02:00:00:00:00:02")
                .unwrap_err()
                .to_string(),
            "<command line>:1:1: mapping.vni: missing `vni=`"
        );
        assert_eq!(
            parse_mapping("ca=10.0.0.2 pa=192.168.100.2 mac=02:00:00:00:00:02 vni=16777216")
                .unwrap_err()
                .to_string(),
            "<command line>:1:56: mapping.vni: VNI 16777216 is out of range (VNIs are 24 bits: 0..=16777215)"
        );
        assert_eq!(
            parse_mapping("ca=10.0.0.2 pb=1").unwrap_err().to_string(),
            "<command line>:1:13: mapping.pb: unknown key `pb` (expected ca, pa, mac, vni)"
        );

        assert_eq!(parse_action("allow-stateful"), Ok(Action::AllowStateful));
        assert_eq!(
            parse_action("encap nvgre vsid 5"),
            Ok(Action::Encap { kind: TunnelKind::Nvgre, vni: 5 })
        );
        assert_eq!(
            parse_action("encap vxlan 5"),
            Ok(Action::Encap { kind: TunnelKind::Vxlan, vni: 5 })
        );
        assert_eq!(
            parse_action("snat 203.0.113.1"),
            Ok(Action::Snat { ip: v4(203, 0, 113, 1), ports: (1024, 65535) })
        );
        assert_eq!(
            parse_action("snat 203.0.113.1 ports 5000-6000"),
            Ok(Action::Snat { ip: v4(203, 0, 113, 1), ports: (5000, 6000) })
        );
        assert_eq!(parse_action("route uplink"), Ok(Action::Route(RouteTarget::Uplink)));
        assert_eq!(
            parse_action("{ route = { vport = 2 } }"),
            Ok(Action::Route(RouteTarget::VPort(VPortId(2))))
        );
        assert_eq!(parse_action("meter 3"), Ok(Action::Meter(MeterId(3))));
        assert_eq!(
            parse_action("deny now").unwrap_err().to_string(),
            "<command line>:1:6: action: unexpected `now` after the action"
        );
        assert_eq!(
            parse_action("frobnicate").unwrap_err().to_string(),
            "<command line>:1:1: action: unknown action `frobnicate` (expected pass, deny, allow, allow-stateful, decap, encap, dnat, snat, route or meter)"
        );
        assert_eq!(
            parse_action("dnat 10.0.0.1:0").unwrap_err().to_string(),
            "<command line>:1:1: action.dnat: backend 10.0.0.1: port 0 is not usable (omit the port to keep the packet's)"
        );
        assert_eq!(
            parse_action("{ snat = \"1.2.3.4\", ports = \"9-8\" }").unwrap_err().to_string(),
            "<command line>:1:1: action.ports: bad SNAT port range 9-8 (expected 1 <= lo <= hi)"
        );
        assert_eq!(
            parse_action("{ snat = 5 }").unwrap_err().to_string(),
            "<command line>:1:10: action.snat: expected a string, found an integer"
        );
        assert!(parse_action("").is_err());
    }

    #[test]
    fn printed_actions_parse_back() {
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        for a in [
            Action::Pass,
            Action::Deny,
            Action::Allow,
            Action::AllowStateful,
            Action::Decap,
            Action::Encap { kind: TunnelKind::Vxlan, vni: 42 },
            Action::Encap { kind: TunnelKind::Nvgre, vni: 0 },
            Action::Dnat { backends: vec![(v4(10, 0, 0, 5), Some(80)), (v6, None)] },
            Action::Snat { ip: v6, ports: (1, 65535) },
            Action::Route(RouteTarget::Vnet),
            Action::Route(RouteTarget::Uplink),
            Action::Route(RouteTarget::Drop),
            Action::Route(RouteTarget::VPort(VPortId(65535))),
            Action::Meter(MeterId(7)),
        ] {
            assert_eq!(parse_action(&a.to_string()), Ok(a.clone()), "{a}");
            assert_eq!(
                parse_action(&action_toml(&a, &[])),
                Ok(a.clone()),
                "{}",
                action_toml(&a, &[])
            );
        }
    }

    fn two_vports() -> Policy {
        let mut p = default_policy();
        let mut b = p.vports[0].clone();
        b.id = VPortId(1);
        b.port = 2;
        b.name = "vm-b".into();
        p.vports.push(b);
        p
    }

    #[test]
    fn edits_are_transactional() {
        let p = two_vports();
        let before = p.clone();
        let good = parse_rule("id=7 dir=in ip.src=10.0.0.0/24 action=deny").unwrap();
        let edits = [
            PolicyEdit::AddRule { vport: VPortId(0), layer: "acl".into(), rule: good.clone() },
            PolicyEdit::RemoveLayer { vport: VPortId(0), name: "nat".into() },
            PolicyEdit::AddRule {
                vport: VPortId(0),
                layer: "acl".into(),
                rule: Rule { action: Action::Decap, ..good.clone() },
            },
        ];
        let e = apply_edits(&p, &edits).unwrap_err();
        assert_eq!(
            e.to_string(),
            "<edits>: edit[2].vport[0].layer[acl].rule[id=7].id: rule id 7 already exists in layer acl"
        );
        assert_eq!(p, before);
        let edits3 = [
            edits[0].clone(),
            edits[1].clone(),
            PolicyEdit::AddRule {
                vport: VPortId(0),
                layer: "acl".into(),
                rule: Rule { id: 8, action: Action::Decap, ..good.clone() },
            },
        ];
        let e = apply_edits(&p, &edits3).unwrap_err();
        assert_eq!(
            e.to_string(),
            "<edits>: edit[2].vport[0].layer[acl].rule[id=8].action: action `decap` is not allowed in a acl layer (acl layers take allow, allow-stateful, deny, pass)"
        );
        assert_eq!(p, before);

        let (np, changed) = apply_edits(&p, &edits[..2]).unwrap();
        assert_eq!(changed, vec![VPortId(0)]);
        assert_eq!(np.vports[0].layers[0].rules.last(), Some(&good));
        let names: Vec<&str> = np.vports[0].layers.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["acl", "route", "vnet", "meter"]);
        assert_eq!(np.vports[1], p.vports[1]);
    }

    #[test]
    fn every_edit_kind() {
        let p = two_vports();
        let m = parse_mapping("ca=10.1.0.2 pa=192.168.100.9 mac=02:00:00:00:00:09 vni=42").unwrap();
        let layer = LayerPolicy {
            name: "acl2".into(),
            kind: LayerKind::Acl,
            rules: vec![parse_rule("id=1 action=allow").unwrap()],
            default: Action::Deny,
            mappings: vec![],
        };
        let (np, changed) = apply_edits(
            &p,
            &[
                PolicyEdit::AddMapping { vport: VPortId(1), layer: "vnet".into(), mapping: m },
                PolicyEdit::RemoveMapping {
                    vport: VPortId(1),
                    layer: "vnet".into(),
                    ca: v4(10, 0, 0, 2),
                },
                PolicyEdit::AddLayer { vport: VPortId(1), layer: layer.clone(), position: Some(0) },
                PolicyEdit::RemoveRule { vport: VPortId(1), layer: "vnet".into(), id: 2 },
            ],
        )
        .unwrap();
        assert_eq!(changed, vec![VPortId(1)]);
        let v = &np.vports[1];
        assert_eq!(v.layers[0], layer);
        assert_eq!(v.layers[4].mappings.last(), Some(&m));
        assert!(!v.layers[4].mappings.iter().any(|x| x.ca == v4(10, 0, 0, 2)));
        assert_eq!(v.layers[4].rules.len(), 1);

        let e = |edit: PolicyEdit| {
            apply_edits(
                &p,
                &[PolicyEdit::RemoveLayer { vport: VPortId(0), name: "meter".into() }, edit],
            )
            .unwrap_err()
            .to_string()
        };
        assert_eq!(
            e(PolicyEdit::RemoveRule { vport: VPortId(0), layer: "acl".into(), id: 9 }),
            "<edits>: edit[1].vport[0].layer[acl].rule[id=9]: no rule with id 9 in layer acl"
        );
        assert_eq!(
            e(PolicyEdit::RemoveLayer { vport: VPortId(0), name: "meter".into() }),
            "<edits>: edit[1].vport[0].layer: no layer named `meter` in vport 0 (layers: acl, nat, route, vnet)"
        );
        assert_eq!(
            e(PolicyEdit::RemoveLayer { vport: VPortId(5), name: "acl".into() }),
            "<edits>: edit[1].vport: no vport with id 5 (vports: 0, 1)"
        );
        assert_eq!(
            e(PolicyEdit::AddLayer { vport: VPortId(0), layer: layer.clone(), position: Some(9) }),
            "<edits>: edit[1].vport[0].layer[acl2]: position 9 is past the end (4 layers)"
        );
        assert_eq!(
            e(PolicyEdit::AddLayer {
                vport: VPortId(0),
                layer: LayerPolicy { name: "acl".into(), ..layer.clone() },
                position: None
            }),
            "<edits>: edit[1].vport[0].layer[acl].name: layer `acl` already exists in vport 0"
        );
        assert_eq!(
            e(PolicyEdit::AddMapping { vport: VPortId(0), layer: "acl".into(), mapping: m }),
            "<edits>: edit[1].vport[0].layer[acl].mapping[0]: layer `acl` is a acl layer; mappings belong to vnet layers"
        );
        assert_eq!(
            e(PolicyEdit::AddMapping {
                vport: VPortId(0),
                layer: "vnet".into(),
                mapping: Mapping { ca: v4(10, 0, 0, 3), ..m }
            }),
            "<edits>: edit[1].vport[0].layer[vnet].mapping[253].ca: customer address 10.0.0.3 is already mapped in layer vnet"
        );
        assert_eq!(
            e(PolicyEdit::AddMapping {
                vport: VPortId(0),
                layer: "vnet".into(),
                mapping: Mapping { pa: "::1".parse().unwrap(), ..m }
            }),
            "<edits>: edit[1].vport[0].layer[vnet].mapping[253].pa: provider address ::1 is IPv6 but the underlay address 192.168.100.1 is IPv4"
        );
        assert_eq!(
            e(PolicyEdit::RemoveMapping {
                vport: VPortId(0),
                layer: "vnet".into(),
                ca: v4(1, 1, 1, 1)
            }),
            "<edits>: edit[1].vport[0].layer[vnet].mapping: no mapping for customer address 1.1.1.1 in layer vnet"
        );
        let mut bad = p.clone();
        bad.vports[1].port = 0;
        assert_eq!(
            e(PolicyEdit::Replace(bad)),
            "<edits>: edit[1].vport[1].port: port 0 is already vport 0's"
        );
    }

    #[test]
    fn replace_reports_changed_vports() {
        let p = two_vports();
        let mut q = p.clone();
        q.vports[1].vni = 43;
        assert_eq!(apply_edits(&p, &[PolicyEdit::Replace(q.clone())]).unwrap().1, vec![VPortId(1)]);
        q.underlay.ttl = 9;
        assert_eq!(
            apply_edits(&p, &[PolicyEdit::Replace(q.clone())]).unwrap().1,
            vec![VPortId(0), VPortId(1)]
        );
        let mut r = p.clone();
        r.vports.remove(0);
        assert_eq!(apply_edits(&p, &[PolicyEdit::Replace(r)]).unwrap().1, vec![VPortId(0)]);
        // An edit undone in the same transaction changes nothing.
        let rule = parse_rule("id=9 action=deny").unwrap();
        let (same, changed) = apply_edits(
            &p,
            &[
                PolicyEdit::AddRule { vport: VPortId(0), layer: "acl".into(), rule },
                PolicyEdit::RemoveRule { vport: VPortId(0), layer: "acl".into(), id: 9 },
            ],
        )
        .unwrap();
        assert_eq!((same, changed), (p, vec![]));
    }

    #[test]
    fn load_policy_names_the_file() {
        let dir = std::env::temp_dir().join(format!("snic-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("policy.toml");
        std::fs::write(&path, "[underlay]\nttl = 0\n").unwrap();
        let e = load_policy(&path).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}:2:7: underlay.ttl: TTL 0 is dropped by the first hop (expected 1..=255)",
                path.display()
            )
        );
        std::fs::write(&path, NAT).unwrap();
        assert_eq!(load_policy(&path).unwrap(), parse_policy(NAT, "x").unwrap());
        let missing = dir.join("missing.toml");
        let e = load_policy(&missing).unwrap_err();
        assert_eq!((e.file, e.line, e.field.as_str()), (missing.display().to_string(), None, ""));
        assert!(e.message.starts_with("cannot read the policy file: "), "{}", e.message);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    // --- generated policies -------------------------------------------------------------

    fn gen_ip(rng: &mut ChaCha8Rng, v6: bool) -> IpAddr {
        if v6 {
            IpAddr::V6(Ipv6Addr::from(rng.r#gen::<u128>()))
        } else {
            IpAddr::V4(Ipv4Addr::from(rng.r#gen::<u32>()))
        }
    }

    fn gen_ip_any(rng: &mut ChaCha8Rng) -> IpAddr {
        let v6 = rng.gen_bool(0.3);
        gen_ip(rng, v6)
    }

    fn gen_name(rng: &mut ChaCha8Rng) -> String {
        const CHARS: &[char] = &[
            'a', 'Z', '0', '-', '_', ' ', '"', '\\', '\n', '\t', '\'', 'é', '✓', '\u{7f}', '\u{1}',
            '#', '=',
        ];
        (0..rng.gen_range(0..12)).map(|_| CHARS[rng.gen_range(0..CHARS.len())]).collect()
    }

    fn gen_ident(rng: &mut ChaCha8Rng, i: usize) -> String {
        const CHARS: &[u8] = b"abcXYZ019-_";
        let tail: String = (0..rng.gen_range(0..8))
            .map(|_| CHARS[rng.gen_range(0..CHARS.len())] as char)
            .collect();
        format!("n{i}{tail}")
    }

    fn gen_u64(rng: &mut ChaCha8Rng, max: u64) -> u64 {
        match rng.gen_range(0..4) {
            0 => 0,
            1 => max,
            _ => rng.gen_range(0..=max),
        }
    }

    fn gen_value(rng: &mut ChaCha8Rng, f: Field) -> Value {
        match class(f) {
            Class::Ip => Value::Ip(gen_ip_any(rng)),
            Class::Mac => Value::Mac(rng.r#gen()),
            Class::Int(max) => Value::Int(gen_u64(rng, max)),
        }
    }

    fn gen_matcher(rng: &mut ChaCha8Rng, f: Field) -> Matcher {
        match (class(f), rng.gen_range(0..3)) {
            (_, 0) => Matcher::Exact(gen_value(rng, f)),
            (_, 1) => Matcher::Set((0..rng.gen_range(1..4)).map(|_| gen_value(rng, f)).collect()),
            (Class::Ip, _) => {
                let v6 = rng.gen_bool(0.3);
                let len = rng.gen_range(0..=if v6 { 128 } else { 32 });
                let ip = gen_ip(rng, v6);
                let net = match ip {
                    IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(
                        u32::from(a) & u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0),
                    )),
                    IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(
                        u128::from(a) & u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0),
                    )),
                };
                Matcher::Prefix(net, len)
            }
            (Class::Int(max), _) => {
                let a = gen_u64(rng, max);
                let b = gen_u64(rng, max);
                Matcher::Range(a.min(b), a.max(b))
            }
            (Class::Mac, _) => Matcher::Exact(gen_value(rng, f)),
        }
    }

    fn gen_action(
        rng: &mut ChaCha8Rng,
        kind: LayerKind,
        vports: &[VPortId],
        meters: usize,
    ) -> Action {
        let allowed = allowed_actions(kind);
        match allowed[rng.gen_range(0..allowed.len())] {
            "pass" => Action::Pass,
            "deny" => Action::Deny,
            "allow" => Action::Allow,
            "allow-stateful" => Action::AllowStateful,
            "decap" => Action::Decap,
            "encap" => Action::Encap {
                kind: if rng.r#gen() { TunnelKind::Vxlan } else { TunnelKind::Nvgre },
                vni: gen_u64(rng, u64::from(MAX_VNI)) as u32,
            },
            "dnat" => Action::Dnat {
                backends: (0..rng.gen_range(1..4))
                    .map(|_| {
                        (
                            gen_ip_any(rng),
                            if rng.r#gen() { Some(rng.gen_range(1..=65535)) } else { None },
                        )
                    })
                    .collect(),
            },
            "snat" => {
                let a = rng.gen_range(1..=65535u16);
                let b = rng.gen_range(1..=65535u16);
                Action::Snat { ip: gen_ip_any(rng), ports: (a.min(b), a.max(b)) }
            }
            "route" => Action::Route(match rng.gen_range(0..4) {
                0 => RouteTarget::Vnet,
                1 => RouteTarget::Uplink,
                2 => RouteTarget::Drop,
                _ => match vports.first() {
                    Some(_) => RouteTarget::VPort(vports[rng.gen_range(0..vports.len())]),
                    None => RouteTarget::Drop,
                },
            }),
            _ if meters > 0 => Action::Meter(MeterId(rng.gen_range(0..meters) as u16)),
            _ => Action::Pass,
        }
    }

    fn gen_policy(seed: u64) -> Policy {
        let rng = &mut ChaCha8Rng::seed_from_u64(seed);
        let v6 = rng.gen_bool(0.3);
        let underlay = Underlay {
            port: rng.r#gen(),
            ip: gen_ip(rng, v6),
            mac: rng.r#gen(),
            gateway_mac: rng.r#gen(),
            vxlan_port: rng.gen_range(1..=65535),
            ttl: rng.gen_range(1..=255),
        };
        let meters: Vec<MeterSpec> = (0..rng.gen_range(0..3))
            .map(|i| MeterSpec {
                name: gen_ident(rng, i),
                rate_bps: gen_u64(rng, u64::MAX).max(1),
                burst_bytes: gen_u64(rng, i64::MAX as u64).max(1),
                exceed: if rng.r#gen() { Exceed::Drop } else { Exceed::Mark },
            })
            .collect();
        let queues = (0..rng.gen_range(0..3))
            .map(|i| {
                let limit = rng.gen_range(1..=MAX_QUEUE_LIMIT);
                QueueSpec {
                    port: i,
                    rate_bps: rng.gen_range(1..=u64::MAX),
                    ecn_threshold: rng.gen_range(1..=limit),
                    limit,
                }
            })
            .collect();
        let nv = rng.gen_range(0..4u16);
        let ids: Vec<VPortId> = (0..nv).map(|i| VPortId(i * 3 + rng.gen_range(0..3))).collect();
        let vports = ids
            .iter()
            .enumerate()
            .map(|(vi, &id)| {
                let mut port = vi as u16 * 2;
                if port == underlay.port {
                    port += 1;
                }
                let layers = (0..rng.gen_range(0..4))
                    .map(|li| {
                        let kind = LayerKind::ALL[rng.gen_range(0..5)];
                        let mut rules = Vec::new();
                        for ri in 0..rng.gen_range(0..4u32) {
                            let mut fields = Field::ALL.to_vec();
                            let mut predicates = Vec::new();
                            for _ in 0..rng.gen_range(0..4) {
                                let f = fields.swap_remove(rng.gen_range(0..fields.len()));
                                predicates
                                    .push(Predicate { field: f, matcher: gen_matcher(rng, f) });
                            }
                            rules.push(Rule {
                                id: ri * 1000 + rng.gen_range(0..1000),
                                priority: if rng.r#gen() { 0 } else { rng.r#gen() },
                                dir: [None, Some(Direction::In), Some(Direction::Out)]
                                    [rng.gen_range(0..3)],
                                predicates,
                                action: gen_action(rng, kind, &ids, meters.len()),
                            });
                        }
                        let mappings = if kind == LayerKind::Vnet {
                            (0..rng.gen_range(0..3u8))
                                .map(|mi| Mapping {
                                    ca: if rng.r#gen() {
                                        IpAddr::V4(Ipv4Addr::new(10, mi, 0, 1))
                                    } else {
                                        IpAddr::V6(Ipv6Addr::new(
                                            0xfd00,
                                            u16::from(mi),
                                            0,
                                            0,
                                            0,
                                            0,
                                            0,
                                            1,
                                        ))
                                    },
                                    pa: gen_ip(rng, v6),
                                    mac: rng.r#gen(),
                                    vni: gen_u64(rng, u64::from(MAX_VNI)) as u32,
                                })
                                .collect()
                        } else {
                            Vec::new()
                        };
                        LayerPolicy {
                            name: if li == 0 { kind.name().to_owned() } else { gen_ident(rng, li) },
                            kind,
                            rules,
                            default: gen_action(rng, kind, &ids, meters.len()),
                            mappings,
                        }
                    })
                    .collect();
                VPortPolicy {
                    id,
                    name: gen_name(rng),
                    port,
                    mac: rng.r#gen(),
                    ips: (0..rng.gen_range(0..3)).map(|_| gen_ip_any(rng)).collect(),
                    vni: gen_u64(rng, u64::from(MAX_VNI)) as u32,
                    meter: if !meters.is_empty() && rng.r#gen() {
                        Some(MeterId(rng.gen_range(0..meters.len()) as u16))
                    } else {
                        None
                    },
                    layers,
                }
            })
            .collect();
        Policy { underlay, vports, meters, queues }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn generated_policies_round_trip(seed in any::<u64>()) {
            let p = gen_policy(seed);
            prop_assert_eq!(validate(&p), Ok(()));
            let text = to_toml(&p);
            match parse_policy(&text, "gen.toml") {
                Ok(back) => prop_assert_eq!(back, p),
                Err(e) => prop_assert!(false, "{e}\n{text}"),
            }
        }

        #[test]
        fn mutated_policies_never_panic(seed in any::<u64>(), cut in any::<prop::sample::Index>(), junk in "[\\[\\]{}=\",.#a-z0-9/\n -]{0,8}") {
            let text = to_toml(&gen_policy(seed));
            let mut at = cut.index(text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            let mutated = format!("{}{junk}{}", &text[..at], &text[at..]);
            if let Err(e) = parse_policy(&mutated, "m.toml") {
                prop_assert!(e.line.is_some() && !e.message.is_empty(), "{e:?}");
            }
            let truncated = &text[..at];
            let _ = parse_policy(truncated, "t.toml");
        }

        #[test]
        fn arbitrary_text_never_panics(s in any::<String>()) {
            let _ = parse_policy(&s, "any.toml");
            let _ = parse_rule(&s);
            let _ = parse_layer(&s);
            let _ = parse_mapping(&s);
            let _ = parse_action(&s);
        }

        #[test]
        fn command_line_words_never_panic(s in "(id|prio|dir|action|ip\\.dst|l4\\.src|name|kind|default|ca|pa|mac|vni|encap|dnat|snat|route|meter|vport|[=,:/ {}\"0-9a-f.-]){0,24}") {
            if let Ok(r) = parse_rule(&s) {
                prop_assert_eq!(validate_rule(None, None, &r, "rule").is_ok(), true);
            }
            if let Ok(a) = parse_action(&s) {
                prop_assert_eq!(parse_action(&a.to_string()), Ok(a));
            }
            let _ = parse_layer(&s);
            let _ = parse_mapping(&s);
        }

        #[test]
        fn generated_actions_print_and_parse_back(seed in any::<u64>()) {
            let rng = &mut ChaCha8Rng::seed_from_u64(seed);
            let kind = LayerKind::ALL[rng.gen_range(0..5)];
            let target = [VPortId(rng.r#gen())];
            let a = gen_action(rng, kind, &target, 3);
            prop_assert_eq!(parse_action(&a.to_string()), Ok(a.clone()));
            prop_assert_eq!(parse_action(&action_toml(&a, &[])), Ok(a));
        }
    }
}
