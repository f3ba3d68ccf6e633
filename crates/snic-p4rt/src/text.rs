//! The protobuf text format of our messages, through the descriptor set protox made.

use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, DynamicMessage, Kind, MapKey, MessageDescriptor, Value};

/// The descriptor pool of every `.proto` file of this crate.
pub fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    // The set is made by build.rs from the same files: decoding it cannot fail.
    POOL.get_or_init(|| {
        DescriptorPool::decode(crate::proto::DESCRIPTOR_SET).expect("descriptor set from build.rs")
    })
}

/// The descriptor of message `name` (`p4.config.v1.P4Info`), which our files define.
pub fn message(name: &str) -> MessageDescriptor {
    pool().get_message_by_name(name).unwrap_or_else(|| panic!("{name} is not in our protos"))
}

/// `msg` in protobuf text format, one `field { ... }` block per element of a repeated
/// message field (the style protoc, p4c and Python's `text_format` write; prost-reflect's own
/// printer uses the `field: [...]` list form, which some older parsers refuse).
pub fn to_text(msg: &DynamicMessage) -> String {
    let mut out = String::new();
    write_message(msg, 0, &mut out);
    out
}

fn write_message(msg: &DynamicMessage, depth: usize, out: &mut String) {
    for (field, value) in msg.fields() {
        match value {
            Value::List(items) => {
                for v in items {
                    write_field(field.name(), &field.kind(), v, depth, out);
                }
            }
            Value::Map(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by_key(|e| key_text(e.0));
                let value_kind = match field.kind() {
                    Kind::Message(m) => m.map_entry_value_field().kind(),
                    k => k,
                };
                for (k, v) in entries {
                    indent(depth, out);
                    out.push_str(field.name());
                    out.push_str(" {\n");
                    indent(depth + 1, out);
                    out.push_str("key: ");
                    out.push_str(&key_text(k));
                    out.push('\n');
                    write_field("value", &value_kind, v, depth + 1, out);
                    indent(depth, out);
                    out.push_str("}\n");
                }
            }
            v => write_field(field.name(), &field.kind(), v, depth, out),
        }
    }
}

fn key_text(k: &MapKey) -> String {
    match k {
        MapKey::String(s) => quote(s.as_bytes()),
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(v) => v.to_string(),
        MapKey::I64(v) => v.to_string(),
        MapKey::U32(v) => v.to_string(),
        MapKey::U64(v) => v.to_string(),
    }
}

fn indent(depth: usize, out: &mut String) {
    for _ in 0..depth {
        out.push_str("  ");
    }
}

fn write_field(name: &str, kind: &Kind, v: &Value, depth: usize, out: &mut String) {
    indent(depth, out);
    out.push_str(name);
    match v {
        Value::Message(m) => {
            out.push_str(" {\n");
            write_message(m, depth + 1, out);
            indent(depth, out);
            out.push_str("}\n");
            return;
        }
        Value::EnumNumber(n) => {
            let name = match kind {
                Kind::Enum(e) => e.get_value(*n).map(|v| v.name().to_string()),
                _ => None,
            };
            out.push_str(": ");
            out.push_str(&name.unwrap_or_else(|| n.to_string()));
        }
        Value::String(s) => {
            out.push_str(": ");
            out.push_str(&quote(s.as_bytes()));
        }
        Value::Bytes(b) => {
            out.push_str(": ");
            out.push_str(&quote(b));
        }
        Value::Bool(b) => out.push_str(&format!(": {b}")),
        Value::I32(x) => out.push_str(&format!(": {x}")),
        Value::I64(x) => out.push_str(&format!(": {x}")),
        Value::U32(x) => out.push_str(&format!(": {x}")),
        Value::U64(x) => out.push_str(&format!(": {x}")),
        Value::F32(x) => out.push_str(&format!(": {x}")),
        Value::F64(x) => out.push_str(&format!(": {x}")),
        Value::List(_) | Value::Map(_) => {}
    }
    out.push('\n');
}

/// A text-format string literal: printable ASCII as is, the rest as octal escapes.
fn quote(b: &[u8]) -> String {
    let mut s = String::from("\"");
    for c in b {
        match c {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b'\n' => s.push_str("\\n"),
            0x20..=0x7e => s.push(*c as char),
            _ => s.push_str(&format!("\\{c:03o}")),
        }
    }
    s.push('"');
    s
}
