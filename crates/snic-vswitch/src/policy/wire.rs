//! Policy edits as documents: what `snic vswitch`'s control socket carries in a
//! `vswitch.apply` request and what a scenario's `vswitch` operation writes
//! (`{"op": "add-rule", "vport": 0, "layer": "acl", "rule": "id=3 action=deny"}`). Rules,
//! layers and mappings travel in their command-line spelling ([`super::cli`]) and are parsed
//! by [`to_policy_edit`] into the engine's [`PolicyEdit`].

use super::MeterSpec;
use super::cli::{parse_layer, parse_mapping, parse_rule_with};
use super::edit::PolicyEdit;
use super::toml::parse_policy;
use super::validate::ConfigError;
use crate::key::VPortId;
use serde::{Deserialize, Serialize};

/// One policy edit as a document: `{"op": "...", ...}`. Rules, layers and
/// mappings travel in their command-line spelling and are parsed by the server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Edit {
    /// Add `rule` (e.g. `"id=3 priority=10 ip.dst=10.0.0.0/24 action=deny"`) to a layer.
    AddRule {
        /// vPort id.
        vport: u16,
        /// Layer name.
        layer: String,
        /// The rule, in command-line form.
        rule: String,
    },
    /// Remove the rule with `id` from a layer.
    RemoveRule {
        /// vPort id.
        vport: u16,
        /// Layer name.
        layer: String,
        /// Rule id.
        id: u32,
    },
    /// Add a layer (e.g. `"name=acl2 kind=acl default=deny"`) at `position` (default: last).
    AddLayer {
        /// vPort id.
        vport: u16,
        /// The layer, in command-line form.
        layer: String,
        /// Index among the vPort's layers; none appends.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        position: Option<usize>,
    },
    /// Remove the layer called `name`.
    RemoveLayer {
        /// vPort id.
        vport: u16,
        /// Layer name.
        name: String,
    },
    /// Add a CA -> PA mapping (e.g. `"ca=10.0.0.9 pa=192.168.100.9 mac=02:00:00:00:00:09 vni=42"`).
    AddMapping {
        /// vPort id.
        vport: u16,
        /// Layer name.
        layer: String,
        /// The mapping, in command-line form.
        mapping: String,
    },
    /// Remove the mapping of customer address `ca`.
    RemoveMapping {
        /// vPort id.
        vport: u16,
        /// Layer name.
        layer: String,
        /// Customer address (IPv4 or IPv6).
        ca: String,
    },
    /// Replace the whole policy with `policy` (TOML text); `file` names it in error messages.
    Replace {
        /// The policy document.
        policy: String,
        /// Name of the file it came from (default `<control socket>`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file: Option<String>,
    },
}

impl Edit {
    /// The `op` spelling of this edit (for messages).
    pub fn op(&self) -> &'static str {
        match self {
            Edit::AddRule { .. } => "add-rule",
            Edit::RemoveRule { .. } => "remove-rule",
            Edit::AddLayer { .. } => "add-layer",
            Edit::RemoveLayer { .. } => "remove-layer",
            Edit::AddMapping { .. } => "add-mapping",
            Edit::RemoveMapping { .. } => "remove-mapping",
            Edit::Replace { .. } => "replace",
        }
    }
}

/// One wire edit as a [`PolicyEdit`] (rules, layers, mappings and policies parsed here; meter
/// names in rules are resolved against `meters`, the policy in force). `origin` names where the
/// edit came from in errors (and is the file name of a `replace` that gives none).
pub fn to_policy_edit(
    e: &Edit,
    meters: &[MeterSpec],
    origin: &str,
) -> Result<PolicyEdit, ConfigError> {
    Ok(match e {
        Edit::AddRule { vport, layer, rule } => PolicyEdit::AddRule {
            vport: VPortId(*vport),
            layer: layer.clone(),
            rule: parse_rule_with(rule, Some(meters))?,
        },
        Edit::RemoveRule { vport, layer, id } => {
            PolicyEdit::RemoveRule { vport: VPortId(*vport), layer: layer.clone(), id: *id }
        }
        Edit::AddLayer { vport, layer, position } => PolicyEdit::AddLayer {
            vport: VPortId(*vport),
            layer: parse_layer(layer)?,
            position: *position,
        },
        Edit::RemoveLayer { vport, name } => {
            PolicyEdit::RemoveLayer { vport: VPortId(*vport), name: name.clone() }
        }
        Edit::AddMapping { vport, layer, mapping } => PolicyEdit::AddMapping {
            vport: VPortId(*vport),
            layer: layer.clone(),
            mapping: parse_mapping(mapping)?,
        },
        Edit::RemoveMapping { vport, layer, ca } => PolicyEdit::RemoveMapping {
            vport: VPortId(*vport),
            layer: layer.clone(),
            ca: ca.trim().parse().map_err(|_| ConfigError {
                file: origin.into(),
                line: None,
                column: None,
                field: "ca".into(),
                message: format!("{ca:?} is not an IPv4 or IPv6 address"),
            })?,
        },
        Edit::Replace { policy, file } => {
            PolicyEdit::Replace(parse_policy(policy, file.as_deref().unwrap_or(origin))?)
        }
    })
}
