//! The command-line forms of rules, layers, mappings and actions ([`parse_rule`],
//! [`parse_layer`], [`parse_mapping`], [`parse_action`]): how the control plane spells the parts
//! of a policy edit.
//!
//! Each parser checks what it can without the policy ([`super::validate`]); the rest (the
//! layer's kind, meters, vPorts) is checked when the result is applied with
//! [`apply_edits`](super::edit::apply_edits). Errors name [`COMMAND_LINE`] as the file, and the
//! column. This module does not read the policy file ([`super::toml`]) and changes no policy.
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
//!   [`parse_action_with`]), or a TOML inline table as in the file ([`super::toml`]). These are
//!   the spellings of `Action`'s `Display`, so a printed action parses back.

use super::text::{
    Cx, action_words, matcher_from_str, parse_dir, parse_ip, parse_kind, parse_mac, parse_num,
    single_value, words,
};
use super::toml::{MAPPING_KEYS, conv_action, parse_doc};
use super::validate::{
    COMMAND_LINE, ConfigError, MAX_NAME_LEN, ident_ok, inv, join, validate_action,
    validate_mapping, validate_rule,
};
use super::{Action, Field, LayerKind, LayerPolicy, Mapping, Matcher, MeterSpec, Predicate, Rule};

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
/// layer (the layer's kind, meters and vPorts are checked by
/// [`apply_edits`](super::edit::apply_edits)).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{Direction, VPortId};
    use crate::policy::toml::parse_policy;
    use crate::policy::{Exceed, MeterId, RouteTarget, TunnelKind, Value};
    use core::net::{IpAddr, Ipv4Addr};
    use proptest::prelude::*;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

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
    }
}
