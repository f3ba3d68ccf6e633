//! The policy file: a TOML reader ([`parse_policy`], [`load_policy`]) and writer ([`to_toml`]).
//!
//! The reader turns text into the plain data of [`crate::policy`] and validates it
//! ([`super::validate`]); its errors are [`ConfigError`]s naming the file, line, column and
//! field. Nothing is applied half-way: [`parse_policy`] returns a whole valid policy or an
//! error. The writer prints a policy so that it reads back the same.
//!
//! This module installs nothing (the engine does) and does not read command lines
//! ([`super::cli`]), although an action given there as an inline table is read with the same
//! code as in the file.
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
//! `{ meter = "gold" }` (by name, or by index). The word forms of the command line
//! ([`super::cli`]) are accepted as strings too (`action = "encap vxlan vni 42"`).
//!
//! Which actions a layer may use: acl: allow, allow-stateful, deny, pass; vnet: encap, decap,
//! pass, deny; nat: dnat, snat, pass, deny; route: route, pass, deny; meter: meter, pass.
//! Unknown keys are errors everywhere.

use super::text::{
    Cx, action_words, fmt_backend, fmt_mac, fmt_rate, matcher_from_str, meter_ref, parse_backend,
    parse_dir, parse_ip, parse_kind, parse_mac, parse_port_range, parse_rate, single_value,
};
use super::validate::{
    Class, ConfigError, MAX_QUEUE_LIMIT, action_kind, class, class_hint, ident_ok, join, layer_seg,
    rule_seg, validate_inner,
};
use super::{
    Action, Exceed, Field, LayerKind, LayerPolicy, Mapping, Matcher, MeterId, MeterSpec, Policy,
    Predicate, QueueSpec, RouteTarget, Rule, TunnelKind, Underlay, VPortPolicy, Value,
};
use crate::key::VPortId;
use ::toml::Spanned;
use std::fmt::Write as _;
use std::ops::Range;

// ---------------------------------------------------------------------------------------------
// A TOML tree with spans.

/// A TOML value with the spans of every key and value (read with `toml_edit`, which keeps
/// them), converted to the policy by hand so every error knows its path.
#[derive(Debug)]
pub(super) enum Node {
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
pub(super) fn parse_doc(cx: &Cx<'_>, text: &str) -> Result<Vec<Entry>, ConfigError> {
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
pub(super) type Entry = (Spanned<String>, Spanned<Node>);
type Entries = [Entry];

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
// TOML -> policy.

const TOP_KEYS: &[&str] = &["underlay", "meter", "queue", "vport"];
const UNDERLAY_KEYS: &[&str] = &["port", "ip", "mac", "gateway_mac", "vxlan_port", "ttl"];
const METER_KEYS: &[&str] = &["name", "rate", "rate_bps", "burst", "exceed"];
const QUEUE_KEYS: &[&str] = &["port", "rate", "rate_bps", "ecn_threshold", "limit"];
const VPORT_KEYS: &[&str] = &["id", "name", "port", "mac", "ips", "vni", "meter", "layer"];
const LAYER_KEYS: &[&str] = &["name", "kind", "default", "rules", "mappings"];
const RULE_KEYS: &[&str] = &["id", "priority", "dir", "match", "action"];
pub(super) const MAPPING_KEYS: &[&str] = &["ca", "pa", "mac", "vni"];
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

pub(super) fn conv_action(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::Direction;
    use crate::policy::cli::parse_action;
    use crate::policy::validate::{MAX_VNI, allowed_actions, validate};
    use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const VNET: &str = include_str!("../../examples/vnet.toml");
    const NAT: &str = include_str!("../../examples/nat-slb.toml");

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
