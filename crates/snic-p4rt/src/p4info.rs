//! P4Info from snic's front end: every object the control plane can name, with the ids the
//! P4Runtime specification asks for.
//!
//! # Ids
//!
//! An id is 32 bits: the object kind's prefix ([`Prefix`]) in the top byte, a 24-bit suffix
//! below. `@id(N)` is honoured first: `N` with the kind's prefix added when its top byte is
//! zero (an `@id` with another kind's prefix is an error). Every other object gets the
//! Jenkins one-at-a-time hash of its fully qualified name, masked to 24 bits (as p4c does),
//! with linear probing past ids already taken and past suffix 0. Ids are therefore stable
//! across runs and across unrelated edits to the program. Match fields, action parameters and
//! controller-header fields are numbered from 1 in declaration order (`@id` on a
//! controller-header field is honoured).
//!
//! # Names
//!
//! Names are the control-plane names the compiler gives (`MyIngress.ipv4_lpm`, `@name`
//! honoured); a key `h.isValid()` is named `h.isValid()` as p4c names it. The alias is the
//! shortest dot-suffix of the name that no other object of the same kind ends with.

use std::collections::{BTreeMap, HashMap, HashSet};

use snic_p4::ir::{Compiled, InstanceKind};
use snic_p4::table::MatchKind;

use crate::proto::p4::config::v1 as cfg;

/// The kind prefixes (`p4.config.v1.P4Ids.Prefix`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Prefix {
    /// Actions.
    Action = 0x01,
    /// Tables.
    Table = 0x02,
    /// Parser value sets.
    ValueSet = 0x03,
    /// `@controller_header` headers.
    ControllerHeader = 0x04,
    /// Action profiles and selectors.
    ActionProfile = 0x11,
    /// Indexed counters.
    Counter = 0x12,
    /// Direct counters.
    DirectCounter = 0x13,
    /// Indexed meters.
    Meter = 0x14,
    /// Direct meters.
    DirectMeter = 0x15,
    /// Registers.
    Register = 0x16,
    /// Digests.
    Digest = 0x17,
}

impl Prefix {
    /// The prefix of an id (its top byte), if it names a kind.
    pub fn of(id: u32) -> Option<Prefix> {
        use Prefix::*;
        [
            Action,
            Table,
            ValueSet,
            ControllerHeader,
            ActionProfile,
            Counter,
            DirectCounter,
            Meter,
            DirectMeter,
            Register,
            Digest,
        ]
        .into_iter()
        .find(|p| *p as u32 == id >> 24)
    }
}

/// Jenkins' one-at-a-time hash (the function p4c uses for P4Runtime ids).
pub fn one_at_a_time(s: &str) -> u32 {
    let mut h: u32 = 0;
    for b in s.bytes() {
        h = h.wrapping_add(u32::from(b));
        h = h.wrapping_add(h << 10);
        h ^= h >> 6;
    }
    h = h.wrapping_add(h << 3);
    h ^= h >> 11;
    h.wrapping_add(h << 15)
}

/// Why a P4Info could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct P4InfoError(pub String);

impl core::fmt::Display for P4InfoError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for P4InfoError {}

/// Assigns ids: requested ones first, then hashed ones (see the module doc).
#[derive(Debug, Default)]
struct Ids {
    taken: HashSet<u32>,
}

impl Ids {
    fn request(&mut self, p: Prefix, name: &str, id: u32) -> Result<u32, P4InfoError> {
        let full = if id >> 24 == 0 { (p as u32) << 24 | id } else { id };
        if full >> 24 != p as u32 {
            return Err(P4InfoError(format!("@id({id:#x}) of {name} has another kind's prefix")));
        }
        if full & 0xff_ffff == 0 {
            return Err(P4InfoError(format!("@id({id}) of {name}: id 0 is reserved")));
        }
        if !self.taken.insert(full) {
            return Err(P4InfoError(format!("@id({id:#x}) of {name} is used twice")));
        }
        Ok(full)
    }

    fn hashed(&mut self, p: Prefix, name: &str) -> u32 {
        let mut suffix = one_at_a_time(name) & 0xff_ffff;
        loop {
            let id = (p as u32) << 24 | suffix;
            if suffix != 0 && self.taken.insert(id) {
                return id;
            }
            suffix = (suffix + 1) & 0xff_ffff;
        }
    }
}

/// One object to give an id: its kind, name and `@id`.
struct Obj {
    prefix: Prefix,
    name: String,
    anno: Option<u32>,
}

fn assign(objs: &[Obj]) -> Result<Vec<u32>, P4InfoError> {
    let mut ids = Ids::default();
    let mut out = vec![0; objs.len()];
    for (i, o) in objs.iter().enumerate() {
        if let Some(a) = o.anno {
            out[i] = ids.request(o.prefix, &o.name, a)?;
        }
    }
    for (i, o) in objs.iter().enumerate() {
        if o.anno.is_none() {
            out[i] = ids.hashed(o.prefix, &o.name);
        }
    }
    Ok(out)
}

/// The shortest dot-suffix of each name that no other name of the list ends with.
fn aliases(names: &[&str]) -> Vec<String> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let parts: Vec<&str> = n.split('.').collect();
            for k in 1..=parts.len() {
                let suffix = parts[parts.len() - k..].join(".");
                let clash = names
                    .iter()
                    .enumerate()
                    .any(|(j, m)| j != i && (*m == suffix || m.ends_with(&format!(".{suffix}"))));
                if !clash {
                    return suffix;
                }
            }
            n.to_string()
        })
        .collect()
}

/// A key's P4Info name: `$valid$` is spelled `isValid()`.
pub fn key_name(ir_name: &str) -> String {
    match ir_name.strip_suffix(".$valid$") {
        Some(h) => format!("{h}.isValid()"),
        None => ir_name.to_string(),
    }
}

fn match_type(k: MatchKind) -> cfg::match_field::MatchType {
    use cfg::match_field::MatchType as M;
    match k {
        MatchKind::Exact => M::Exact,
        MatchKind::Ternary => M::Ternary,
        MatchKind::Lpm => M::Lpm,
        MatchKind::Range => M::Range,
        MatchKind::Optional => M::Optional,
    }
}

fn preamble(id: u32, name: &str, alias: &str) -> Option<cfg::Preamble> {
    Some(cfg::Preamble {
        id,
        name: name.to_string(),
        alias: alias.to_string(),
        ..Default::default()
    })
}

fn bits(width: u32) -> cfg::P4BitstringLikeTypeSpec {
    cfg::P4BitstringLikeTypeSpec {
        type_spec: Some(cfg::p4_bitstring_like_type_spec::TypeSpec::Bit(cfg::P4BitTypeSpec {
            bitwidth: width as i32,
        })),
        ..Default::default()
    }
}

fn bits_spec(width: u32) -> Option<cfg::P4DataTypeSpec> {
    Some(cfg::P4DataTypeSpec {
        type_spec: Some(cfg::p4_data_type_spec::TypeSpec::Bitstring(bits(width))),
    })
}

/// The P4Info of a compiled program named `name` (the package name in `pkg_info`), for its
/// architecture (`v1model`, `pna`).
pub fn for_program(prog: &Compiled, name: &str) -> Result<cfg::P4Info, P4InfoError> {
    let arch = match prog.arch {
        snic_p4::ir::Arch::V1Model => "v1model",
        snic_p4::ir::Arch::Pna(_) => "pna",
    };
    // Which actions the control plane can name: those some table lists.
    let mut used_actions: Vec<u32> = Vec::new();
    for t in &prog.tables {
        for a in &t.actions {
            if !used_actions.contains(&a.action) {
                used_actions.push(a.action);
            }
        }
    }
    used_actions.sort_unstable();
    // Each indirect/direct instance's tables.
    let mut inst_tables: HashMap<u32, Vec<usize>> = HashMap::new();
    for (ti, t) in prog.tables.iter().enumerate() {
        for i in [t.direct_counter, t.direct_meter, t.implementation].into_iter().flatten() {
            inst_tables.entry(i).or_default().push(ti);
        }
    }

    let mut objs = Vec::new();
    for t in &prog.tables {
        objs.push(Obj { prefix: Prefix::Table, name: t.name.clone(), anno: t.id });
    }
    for a in &used_actions {
        let a = &prog.actions[*a as usize];
        objs.push(Obj { prefix: Prefix::Action, name: a.name.clone(), anno: a.id });
    }
    let mut inst_prefix: Vec<Option<Prefix>> = Vec::new();
    for inst in &prog.instances {
        let p = match inst.kind {
            InstanceKind::Register { .. } => Some(Prefix::Register),
            InstanceKind::Counter { .. } => Some(Prefix::Counter),
            InstanceKind::DirectCounter(_) => Some(Prefix::DirectCounter),
            InstanceKind::Meter { .. } => Some(Prefix::Meter),
            InstanceKind::DirectMeter { .. } => Some(Prefix::DirectMeter),
            InstanceKind::ActionProfile(_) | InstanceKind::ActionSelector { .. } => {
                Some(Prefix::ActionProfile)
            }
            InstanceKind::Stateless => None,
        };
        inst_prefix.push(p);
        if let Some(p) = p {
            objs.push(Obj { prefix: p, name: inst.name.clone(), anno: inst.id });
        }
    }
    for v in &prog.value_sets {
        objs.push(Obj { prefix: Prefix::ValueSet, name: v.name.clone(), anno: v.id });
    }
    for d in &prog.digests {
        objs.push(Obj { prefix: Prefix::Digest, name: d.type_name.clone(), anno: None });
    }
    for h in &prog.controller_headers {
        objs.push(Obj { prefix: Prefix::ControllerHeader, name: h.name.clone(), anno: h.id });
    }
    let ids = assign(&objs)?;
    let mut next = ids.into_iter();
    let mut take = || next.next().unwrap_or(0);
    let table_ids: Vec<u32> = prog.tables.iter().map(|_| take()).collect();
    let mut action_ids: HashMap<u32, u32> = HashMap::new();
    for a in &used_actions {
        action_ids.insert(*a, take());
    }
    let inst_ids: Vec<u32> =
        inst_prefix.iter().map(|p| if p.is_some() { take() } else { 0 }).collect();
    let vs_ids: Vec<u32> = prog.value_sets.iter().map(|_| take()).collect();
    let digest_ids: Vec<u32> = prog.digests.iter().map(|_| take()).collect();
    let ch_ids: Vec<u32> = prog.controller_headers.iter().map(|_| take()).collect();

    let mut info = cfg::P4Info {
        pkg_info: Some(cfg::PkgInfo {
            name: name.to_string(),
            arch: arch.to_string(),
            ..Default::default()
        }),
        ..Default::default()
    };

    // Tables.
    let tnames: Vec<&str> = prog.tables.iter().map(|t| t.name.as_str()).collect();
    let talias = aliases(&tnames);
    for (ti, t) in prog.tables.iter().enumerate() {
        let match_fields = t
            .keys
            .iter()
            .enumerate()
            .map(|(k, key)| cfg::MatchField {
                id: k as u32 + 1,
                name: key_name(&key.name),
                bitwidth: key.width as i32,
                r#match: Some(cfg::match_field::Match::MatchType(match_type(key.kind) as i32)),
                ..Default::default()
            })
            .collect();
        let action_refs = t
            .actions
            .iter()
            .map(|a| {
                use cfg::action_ref::Scope;
                let (scope, annotations) = if a.default_only {
                    (Scope::DefaultOnly, vec!["@defaultonly".to_string()])
                } else if a.table_only {
                    (Scope::TableOnly, vec!["@tableonly".to_string()])
                } else {
                    (Scope::TableAndDefault, Vec::new())
                };
                cfg::ActionRef {
                    id: action_ids[&a.action],
                    scope: scope as i32,
                    annotations,
                    ..Default::default()
                }
            })
            .collect();
        let default_action = t.actions.get(t.default.action as usize).map(|a| a.action);
        let const_default_action_id = match (t.default_const, default_action) {
            (true, Some(a)) => action_ids[&a],
            _ => 0,
        };
        let direct_resource_ids = [t.direct_counter, t.direct_meter]
            .into_iter()
            .flatten()
            .map(|i| inst_ids[i as usize])
            .collect();
        info.tables.push(cfg::Table {
            preamble: preamble(table_ids[ti], &t.name, &talias[ti]),
            match_fields,
            action_refs,
            const_default_action_id,
            implementation_id: t.implementation.map_or(0, |i| inst_ids[i as usize]),
            direct_resource_ids,
            size: t.size as i64,
            // Only tables that notify take a controller's idle timeout (PNA's AUTO_DELETE
            // tables expire on their own, with the program's expire-time profiles).
            idle_timeout_behavior: if t.idle == snic_p4::ir::IdleTimeout::Notify {
                cfg::table::IdleTimeoutBehavior::NotifyControl as i32
            } else {
                cfg::table::IdleTimeoutBehavior::NoTimeout as i32
            },
            is_const_table: t.entries_const,
            other_properties: None,
        });
    }

    // Actions.
    let anames: Vec<&str> =
        used_actions.iter().map(|a| prog.actions[*a as usize].name.as_str()).collect();
    let aalias = aliases(&anames);
    for (k, a) in used_actions.iter().enumerate() {
        let act = &prog.actions[*a as usize];
        let params = act
            .params
            .iter()
            .filter(|p| p.data)
            .enumerate()
            .map(|(i, p)| cfg::action::Param {
                id: i as u32 + 1,
                name: p.name.clone(),
                bitwidth: p.width as i32,
                ..Default::default()
            })
            .collect();
        info.actions
            .push(cfg::Action { preamble: preamble(action_ids[a], &act.name, &aalias[k]), params });
    }

    // Extern instances, by kind.
    let mut by_prefix: BTreeMap<Prefix, Vec<usize>> = BTreeMap::new();
    for (i, p) in inst_prefix.iter().enumerate() {
        if let Some(p) = p {
            by_prefix.entry(*p).or_default().push(i);
        }
    }
    for (p, list) in &by_prefix {
        let names: Vec<&str> = list.iter().map(|i| prog.instances[*i].name.as_str()).collect();
        let al = aliases(&names);
        for (k, i) in list.iter().enumerate() {
            let inst = &prog.instances[*i];
            let pre = preamble(inst_ids[*i], &inst.name, &al[k]);
            let tables = inst_tables.get(&(*i as u32)).cloned().unwrap_or_default();
            let direct_table_id = tables.first().map_or(0, |t| table_ids[*t]);
            match (&inst.kind, p) {
                (InstanceKind::Register { size, width }, _) => info.registers.push(cfg::Register {
                    preamble: pre,
                    type_spec: bits_spec(*width),
                    size: *size as i32,
                    index_type_name: None,
                }),
                (InstanceKind::Counter { size, kind }, _) => info.counters.push(cfg::Counter {
                    preamble: pre,
                    spec: Some(cfg::CounterSpec { unit: counter_unit(*kind) }),
                    size: i64::from(*size),
                    index_type_name: None,
                }),
                (InstanceKind::DirectCounter(kind), _) => {
                    info.direct_counters.push(cfg::DirectCounter {
                        preamble: pre,
                        spec: Some(cfg::CounterSpec { unit: counter_unit(*kind) }),
                        direct_table_id,
                    })
                }
                (InstanceKind::Meter { size, bytes }, _) => info.meters.push(cfg::Meter {
                    preamble: pre,
                    spec: Some(cfg::MeterSpec { unit: meter_unit(*bytes) }),
                    size: i64::from(*size),
                    index_type_name: None,
                }),
                (InstanceKind::DirectMeter { bytes }, _) => {
                    info.direct_meters.push(cfg::DirectMeter {
                        preamble: pre,
                        spec: Some(cfg::MeterSpec { unit: meter_unit(*bytes) }),
                        direct_table_id,
                    })
                }
                (InstanceKind::ActionProfile(size), _) => {
                    info.action_profiles.push(cfg::ActionProfile {
                        preamble: pre,
                        table_ids: tables.iter().map(|t| table_ids[*t]).collect(),
                        with_selector: false,
                        size: i64::from(*size),
                        max_group_size: 0,
                        selector_size_semantics: None,
                    })
                }
                (InstanceKind::ActionSelector { size, .. }, _) => {
                    info.action_profiles.push(cfg::ActionProfile {
                        preamble: pre,
                        table_ids: tables.iter().map(|t| table_ids[*t]).collect(),
                        with_selector: true,
                        size: i64::from(*size),
                        max_group_size: *size as i32,
                        selector_size_semantics: Some(
                            cfg::action_profile::SelectorSizeSemantics::SumOfMembers(
                                cfg::action_profile::SumOfMembers { max_member_weight: Some(1) },
                            ),
                        ),
                    })
                }
                (InstanceKind::Stateless, _) => {}
            }
        }
    }

    // Value sets.
    let vnames: Vec<&str> = prog.value_sets.iter().map(|v| v.name.as_str()).collect();
    let valias = aliases(&vnames);
    for (k, v) in prog.value_sets.iter().enumerate() {
        info.value_sets.push(cfg::ValueSet {
            preamble: preamble(vs_ids[k], &v.name, &valias[k]),
            r#match: vec![cfg::MatchField {
                id: 1,
                name: String::new(),
                bitwidth: v.width as i32,
                r#match: Some(cfg::match_field::Match::MatchType(
                    cfg::match_field::MatchType::Exact as i32,
                )),
                ..Default::default()
            }],
            size: v.size as i32,
        });
    }

    // Digests: a struct type each, described in type_info.
    let mut type_info = cfg::P4TypeInfo::default();
    for (k, d) in prog.digests.iter().enumerate() {
        info.digests.push(cfg::Digest {
            preamble: preamble(digest_ids[k], &d.type_name, &d.type_name),
            type_spec: Some(cfg::P4DataTypeSpec {
                type_spec: Some(cfg::p4_data_type_spec::TypeSpec::Struct(cfg::P4NamedType {
                    name: d.type_name.clone(),
                })),
            }),
        });
        type_info.structs.insert(
            d.type_name.clone(),
            cfg::P4StructTypeSpec {
                members: d
                    .fields
                    .iter()
                    .map(|f| cfg::p4_struct_type_spec::Member {
                        name: f.name.clone(),
                        type_spec: bits_spec(f.width),
                    })
                    .collect(),
                ..Default::default()
            },
        );
    }
    if !type_info.structs.is_empty() {
        info.type_info = Some(type_info);
    }

    // Controller packet metadata.
    for (k, h) in prog.controller_headers.iter().enumerate() {
        let mut used = HashSet::new();
        let mut metadata = Vec::new();
        for f in &h.fields {
            if let Some(id) = f.id
                && !used.insert(id)
            {
                return Err(P4InfoError(format!("@id({id}) used twice in header {}", h.type_name)));
            }
        }
        let mut next_id = 1;
        for f in &h.fields {
            let id = match f.id {
                Some(id) => id,
                None => {
                    while used.contains(&next_id) {
                        next_id += 1;
                    }
                    used.insert(next_id);
                    next_id
                }
            };
            metadata.push(cfg::controller_packet_metadata::Metadata {
                id,
                name: f.name.clone(),
                bitwidth: f.width as i32,
                ..Default::default()
            });
        }
        info.controller_packet_metadata.push(cfg::ControllerPacketMetadata {
            preamble: preamble(ch_ids[k], &h.name, &h.name),
            metadata,
        });
    }
    Ok(info)
}

fn counter_unit(kind: u32) -> i32 {
    use cfg::counter_spec::Unit;
    match kind {
        0 => Unit::Packets as i32,
        1 => Unit::Bytes as i32,
        _ => Unit::Both as i32,
    }
}

fn meter_unit(bytes: bool) -> i32 {
    use cfg::meter_spec::Unit;
    if bytes { Unit::Bytes as i32 } else { Unit::Packets as i32 }
}

/// The P4Info in protobuf text format (what p4runtime-shell and finsy read).
pub fn to_text(info: &cfg::P4Info) -> String {
    let desc = crate::text::message("p4.config.v1.P4Info");
    let bytes = prost::Message::encode_to_vec(info);
    match prost_reflect::DynamicMessage::decode(desc, bytes.as_slice()) {
        Ok(m) => crate::text::to_text(&m),
        // The bytes were just encoded from the same descriptor: this cannot fail.
        Err(e) => format!("# encode error: {e}\n"),
    }
}

/// Parse a P4Info in protobuf text format.
pub fn from_text(text: &str) -> Result<cfg::P4Info, P4InfoError> {
    let desc = crate::text::message("p4.config.v1.P4Info");
    let m = prost_reflect::DynamicMessage::parse_text_format(desc, text)
        .map_err(|e| P4InfoError(format!("P4Info text: {e}")))?;
    m.transcode_to::<cfg::P4Info>().map_err(|e| P4InfoError(format!("P4Info text: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_at_a_time_known_values() {
        // Reference values of Jenkins' one-at-a-time hash.
        assert_eq!(one_at_a_time("a"), 0xca2e_9442);
        assert_eq!(one_at_a_time("The quick brown fox jumps over the lazy dog"), 0x519e_91f5);
    }

    #[test]
    fn aliases_are_shortest_unique_suffixes() {
        let a = aliases(&["s.c1.t", "s.c2.t", "s.c1.u"]);
        assert_eq!(a, vec!["c1.t", "c2.t", "u"]);
    }

    #[test]
    fn ids_probe_past_collisions_and_honour_requests() {
        let objs = [
            Obj { prefix: Prefix::Table, name: "x".into(), anno: None },
            Obj {
                prefix: Prefix::Table,
                name: "y".into(),
                anno: Some(one_at_a_time("x") & 0xff_ffff),
            },
        ];
        let ids = assign(&objs).unwrap();
        // The requested id wins; the hashed one moves to the next suffix.
        assert_eq!(ids[1], 0x0200_0000 | (one_at_a_time("x") & 0xff_ffff));
        assert_eq!(ids[0], ids[1] + 1);
        let bad = [Obj { prefix: Prefix::Table, name: "z".into(), anno: Some(0x0100_0001) }];
        assert!(assign(&bad).is_err());
    }
}
