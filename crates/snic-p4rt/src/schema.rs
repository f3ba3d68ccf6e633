//! A pipeline's P4Info bound to the compiled program: P4Runtime ids to the switch's indices,
//! checked once when the pipeline is set, and the byte-string codec of P4Runtime values.
//!
//! The P4Info a client pushes may come from `snic p4 info` or from p4c: either way every
//! object is looked up by name in the compiled program, and its shape (key fields, their
//! match kinds and widths, action parameters and widths) must agree, or the pipeline is
//! refused (`INVALID_ARGUMENT`). Ids are the client's.

use std::collections::HashMap;

use snic_p4::ir::{Compiled, InstanceKind};

use crate::p4info::{Prefix, key_name};
use crate::proto::p4::config::v1 as cfg;
use crate::status::{Code, Fail};

/// A table's key field.
#[derive(Debug, Clone)]
pub struct FieldSchema {
    /// The P4Info id.
    pub id: u32,
    /// Its width.
    pub width: u32,
    /// Its match kind.
    pub kind: snic_p4::table::MatchKind,
}

/// A table.
#[derive(Debug, Clone)]
pub struct TableSchema {
    /// The switch's table index.
    pub index: usize,
    /// The P4Info name.
    pub name: String,
    /// Key fields in the program's key order.
    pub fields: Vec<FieldSchema>,
    /// Action id -> (position in the table's action list, scope).
    pub actions: HashMap<u32, (u32, i32)>,
    /// Whether entries carry a priority (a ternary, range or optional field).
    pub priority: bool,
    /// The action profile's id, for an indirect table.
    pub profile: Option<u32>,
    /// The direct counter's instance index.
    pub direct_counter: Option<usize>,
    /// The direct meter's instance index.
    pub direct_meter: Option<usize>,
    /// `const entries`.
    pub is_const: bool,
    /// `const default_action`.
    pub default_const: bool,
    /// The P4Info says idle timeout is supported.
    pub idle: bool,
}

/// An action.
#[derive(Debug, Clone)]
pub struct ActionSchema {
    /// The program's action index.
    pub index: u32,
    /// Parameter ids and widths, in order.
    pub params: Vec<(u32, u32)>,
}

/// An extern instance (counter, meter, register, action profile).
#[derive(Debug, Clone, Copy)]
pub struct InstanceSchema {
    /// The switch's instance index.
    pub index: usize,
    /// Cells (indexed instances).
    pub size: u64,
    /// Bits per cell (registers).
    pub width: u32,
    /// Counter unit: 0 packets, 1 bytes, 2 both; meters: 1 bytes.
    pub unit: u32,
}

/// A controller header's field: (id, width), in header order.
pub type HeaderSchema = Vec<(u32, u32)>;

/// Everything the server needs to translate between P4Runtime and the switch.
#[derive(Debug, Clone, Default)]
pub struct Schema {
    /// Tables by id.
    pub tables: HashMap<u32, TableSchema>,
    /// Table index -> id.
    pub table_ids: Vec<u32>,
    /// Actions by id.
    pub actions: HashMap<u32, ActionSchema>,
    /// Program action index -> id.
    pub action_ids: HashMap<u32, u32>,
    /// Counters, meters, registers, action profiles, direct counters and meters by id.
    pub instances: HashMap<u32, InstanceSchema>,
    /// Value sets by id: (index, width, size).
    pub value_sets: HashMap<u32, (usize, u32, u32)>,
    /// Digest type index -> (id, field widths).
    pub digests: Vec<(u32, Vec<u32>)>,
    /// `packet_in` metadata.
    pub packet_in: Option<HeaderSchema>,
    /// `packet_out` metadata.
    pub packet_out: Option<HeaderSchema>,
}

fn mismatch(what: String) -> Fail {
    Fail::new(Code::InvalidArgument, format!("P4Info does not match the program: {what}"))
}

fn pre_name(p: &Option<cfg::Preamble>) -> (u32, &str) {
    p.as_ref().map_or((0, ""), |p| (p.id, p.name.as_str()))
}

fn match_kind(m: &cfg::MatchField) -> Option<snic_p4::table::MatchKind> {
    use cfg::match_field::{Match, MatchType};
    use snic_p4::table::MatchKind as K;
    match m.r#match {
        Some(Match::MatchType(t)) => match MatchType::try_from(t).ok()? {
            MatchType::Exact => Some(K::Exact),
            MatchType::Lpm => Some(K::Lpm),
            MatchType::Ternary => Some(K::Ternary),
            MatchType::Range => Some(K::Range),
            MatchType::Optional => Some(K::Optional),
            MatchType::Unspecified => None,
        },
        _ => None,
    }
}

impl Schema {
    /// Bind `info` to `prog`.
    pub fn bind(info: &cfg::P4Info, prog: &Compiled) -> Result<Schema, Fail> {
        let mut s = Schema::default();
        // Actions first: tables refer to them.
        for a in &info.actions {
            let (id, name) = pre_name(&a.preamble);
            check_prefix(id, Prefix::Action, name)?;
            let Some(index) = prog.actions.iter().position(|x| x.name == name) else {
                return Err(mismatch(format!("no action {name}")));
            };
            let ir = &prog.actions[index];
            let data: Vec<_> = ir.params.iter().filter(|p| p.data).collect();
            if data.len() != a.params.len() {
                return Err(mismatch(format!("action {name} has {} parameters", data.len())));
            }
            let mut params = Vec::new();
            for (p, ip) in a.params.iter().zip(&data) {
                if p.name != ip.name || p.bitwidth != ip.width as i32 {
                    return Err(mismatch(format!(
                        "parameter {} of {name} is {} bit<{}>",
                        p.name, ip.name, ip.width
                    )));
                }
                params.push((p.id, ip.width));
            }
            s.actions.insert(id, ActionSchema { index: index as u32, params });
            s.action_ids.insert(index as u32, id);
        }
        let inst_index = |name: &str| prog.instances.iter().position(|i| i.name == name);
        // Extern instances.
        let add_inst = |s: &mut Schema, p: &Option<cfg::Preamble>, prefix: Prefix| {
            let (id, name) = pre_name(p);
            check_prefix(id, prefix, name)?;
            let Some(index) = inst_index(name) else {
                return Err(mismatch(format!("no extern instance {name}")));
            };
            let (size, width, unit) = match prog.instances[index].kind {
                InstanceKind::Register { size, width } => (u64::from(size), width, 0),
                InstanceKind::Counter { size, kind } => (u64::from(size), 0, kind),
                InstanceKind::DirectCounter(kind) => (0, 0, kind),
                InstanceKind::Meter { size, bytes } => (u64::from(size), 0, u32::from(bytes)),
                InstanceKind::DirectMeter { bytes } => (0, 0, u32::from(bytes)),
                InstanceKind::ActionProfile(size) => (u64::from(size), 0, 0),
                InstanceKind::ActionSelector { size, .. } => (u64::from(size), 0, 1),
                InstanceKind::Stateless => (0, 0, 0),
            };
            s.instances.insert(id, InstanceSchema { index, size, width, unit });
            Ok(())
        };
        for x in &info.counters {
            add_inst(&mut s, &x.preamble, Prefix::Counter)?;
        }
        for x in &info.direct_counters {
            add_inst(&mut s, &x.preamble, Prefix::DirectCounter)?;
        }
        for x in &info.meters {
            add_inst(&mut s, &x.preamble, Prefix::Meter)?;
        }
        for x in &info.direct_meters {
            add_inst(&mut s, &x.preamble, Prefix::DirectMeter)?;
        }
        for x in &info.registers {
            add_inst(&mut s, &x.preamble, Prefix::Register)?;
        }
        for x in &info.action_profiles {
            add_inst(&mut s, &x.preamble, Prefix::ActionProfile)?;
        }
        // Tables.
        s.table_ids = vec![0; prog.tables.len()];
        for t in &info.tables {
            let (id, name) = pre_name(&t.preamble);
            check_prefix(id, Prefix::Table, name)?;
            let Some(index) = prog.tables.iter().position(|x| x.name == name) else {
                return Err(mismatch(format!("no table {name}")));
            };
            let ir = &prog.tables[index];
            if ir.keys.len() != t.match_fields.len() {
                return Err(mismatch(format!("table {name} has {} key fields", ir.keys.len())));
            }
            let mut fields = Vec::new();
            let mut priority = false;
            for (m, k) in t.match_fields.iter().zip(&ir.keys) {
                let kind = match_kind(m);
                if m.name != key_name(&k.name)
                    || m.bitwidth != k.width as i32
                    || kind != Some(k.kind)
                {
                    return Err(mismatch(format!(
                        "key field {} of {name}: the program has {} {}: bit<{}>",
                        m.name,
                        key_name(&k.name),
                        k.kind,
                        k.width
                    )));
                }
                use snic_p4::table::MatchKind as K;
                priority |= matches!(k.kind, K::Ternary | K::Range | K::Optional);
                fields.push(FieldSchema { id: m.id, width: k.width, kind: k.kind });
            }
            let mut actions = HashMap::new();
            for r in &t.action_refs {
                let Some(a) = s.actions.get(&r.id) else {
                    return Err(mismatch(format!("table {name} lists unknown action id {}", r.id)));
                };
                let Some(pos) = ir.actions.iter().position(|x| x.action == a.index) else {
                    return Err(mismatch(format!("table {name} does not list action {}", r.id)));
                };
                actions.insert(r.id, (pos as u32, r.scope));
            }
            let inst_of = |i: Option<u32>| i.map(|i| i as usize);
            let profile = match (ir.implementation, t.implementation_id) {
                (None, 0) => None,
                (Some(_), id) if id != 0 => Some(id),
                _ => return Err(mismatch(format!("table {name}'s implementation"))),
            };
            s.table_ids[index] = id;
            s.tables.insert(
                id,
                TableSchema {
                    index,
                    name: name.to_string(),
                    fields,
                    actions,
                    priority,
                    profile,
                    direct_counter: inst_of(ir.direct_counter),
                    direct_meter: inst_of(ir.direct_meter),
                    is_const: ir.entries_const,
                    default_const: ir.default_const,
                    idle: t.idle_timeout_behavior
                        == cfg::table::IdleTimeoutBehavior::NotifyControl as i32,
                },
            );
        }
        for v in &info.value_sets {
            let (id, name) = pre_name(&v.preamble);
            check_prefix(id, Prefix::ValueSet, name)?;
            let Some(index) = prog.value_sets.iter().position(|x| x.name == name) else {
                return Err(mismatch(format!("no value set {name}")));
            };
            let ir = &prog.value_sets[index];
            s.value_sets.insert(id, (index, ir.width, ir.size));
        }
        s.digests =
            prog.digests.iter().map(|d| (0, d.fields.iter().map(|f| f.width).collect())).collect();
        for d in &info.digests {
            let (id, name) = pre_name(&d.preamble);
            check_prefix(id, Prefix::Digest, name)?;
            let Some(index) = prog.digests.iter().position(|x| x.type_name == name) else {
                return Err(mismatch(format!("no digest {name}")));
            };
            s.digests[index].0 = id;
        }
        for h in &info.controller_packet_metadata {
            let (id, name) = pre_name(&h.preamble);
            check_prefix(id, Prefix::ControllerHeader, name)?;
            let Some(ir) = prog.controller_headers.iter().find(|x| x.name == name) else {
                return Err(mismatch(format!("no @controller_header(\"{name}\")")));
            };
            if ir.fields.len() != h.metadata.len() {
                return Err(mismatch(format!("controller header {name}'s fields")));
            }
            let mut fields = Vec::new();
            for (m, f) in h.metadata.iter().zip(&ir.fields) {
                if m.name != f.name || m.bitwidth != f.width as i32 {
                    return Err(mismatch(format!("field {} of controller header {name}", m.name)));
                }
                fields.push((m.id, f.width));
            }
            match name {
                "packet_in" => s.packet_in = Some(fields),
                "packet_out" => s.packet_out = Some(fields),
                _ => {}
            }
        }
        Ok(s)
    }

    /// The table with this id.
    pub fn table(&self, id: u32) -> Result<&TableSchema, Fail> {
        self.tables.get(&id).ok_or_else(|| Fail::new(Code::NotFound, format!("no table id {id}")))
    }

    /// The instance with this id, which must have `prefix`.
    pub fn instance(&self, id: u32, prefix: Prefix) -> Result<InstanceSchema, Fail> {
        if Prefix::of(id) != Some(prefix) {
            return Err(Fail::new(Code::NotFound, format!("id {id:#x} is not a {prefix:?}")));
        }
        self.instances
            .get(&id)
            .copied()
            .ok_or_else(|| Fail::new(Code::NotFound, format!("no {prefix:?} id {id:#x}")))
    }
}

fn check_prefix(id: u32, p: Prefix, name: &str) -> Result<(), Fail> {
    if id >> 24 != p as u32 {
        return Err(Fail::new(
            Code::InvalidArgument,
            format!("P4Info: id {id:#x} of {name} does not have the {p:?} prefix"),
        ));
    }
    Ok(())
}

/// Decode a P4Runtime byte string (big-endian, any leading zeros) of a `width`-bit value.
pub fn decode(bytes: &[u8], width: u32, what: &str) -> Result<u128, Fail> {
    // P4Runtime 1.4, 8.4 Bytestrings: an empty string is rejected, as a value out of range is.
    if bytes.is_empty() {
        return Err(Fail::new(Code::OutOfRange, format!("{what}: empty byte string")));
    }
    let first = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
    let sig = &bytes[first..];
    if sig.len() > 16 || width > 128 {
        return Err(Fail::new(Code::OutOfRange, format!("{what}: more than 128 bits")));
    }
    let mut v: u128 = 0;
    for b in sig {
        v = v << 8 | u128::from(*b);
    }
    if width < 128 && v >> width != 0 {
        return Err(Fail::new(
            Code::OutOfRange,
            format!("{what}: value {v:#x} does not fit in {width} bits"),
        ));
    }
    Ok(v)
}

/// Encode a value in canonical form: the shortest big-endian string (one zero byte for 0).
pub fn encode(v: u128) -> Vec<u8> {
    let b = v.to_be_bytes();
    let first = b.iter().position(|x| *x != 0).unwrap_or(15);
    b[first..].to_vec()
}

/// Pack `(value, width)` fields MSB-first into bytes (a controller header).
pub fn pack(fields: &[(u128, u32)]) -> Vec<u8> {
    let total: u32 = fields.iter().map(|f| f.1).sum();
    let mut out = vec![0u8; total.div_ceil(8) as usize];
    let mut bit = 0u32;
    for (v, w) in fields {
        for i in (0..*w).rev() {
            if (v >> i) & 1 == 1 {
                out[(bit / 8) as usize] |= 0x80 >> (bit % 8);
            }
            bit += 1;
        }
    }
    out
}

/// Unpack MSB-first fields of these widths from the front of `data`: `None` if too short.
pub fn unpack(data: &[u8], widths: &[u32]) -> Option<Vec<u128>> {
    let total: u32 = widths.iter().sum();
    if data.len() * 8 < total as usize {
        return None;
    }
    let mut bit = 0u32;
    let mut out = Vec::new();
    for w in widths {
        let mut v: u128 = 0;
        for _ in 0..*w {
            let b = (data[(bit / 8) as usize] >> (7 - bit % 8)) & 1;
            v = v << 1 | u128::from(b);
            bit += 1;
        }
        out.push(v);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codec_round_trips_and_checks_widths() {
        assert_eq!(encode(0), vec![0]);
        assert_eq!(encode(0x0a00_0001), vec![0x0a, 0, 0, 1]);
        assert_eq!(decode(&[0, 0, 0x0a, 0, 0, 1], 32, "x").unwrap(), 0x0a00_0001);
        assert_eq!(decode(&[1, 0], 9, "x").unwrap(), 256);
        assert_eq!(decode(&[2, 0], 9, "x").unwrap_err().code, Code::OutOfRange);
        assert_eq!(decode(&[], 9, "x").unwrap_err().code, Code::OutOfRange);
    }

    #[test]
    fn pack_unpack_round_trip() {
        let f = [(0x1ff, 9), (0x5, 7), (0xabcd, 16)];
        let b = pack(&f);
        assert_eq!(b.len(), 4);
        assert_eq!(unpack(&b, &[9, 7, 16]).unwrap(), vec![0x1ff, 0x5, 0xabcd]);
        assert!(unpack(&b[..3], &[9, 7, 16]).is_none());
    }
}
