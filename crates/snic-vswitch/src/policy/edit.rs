//! Changes to a policy from the control plane: [`PolicyEdit`] (add or remove a rule, a layer or a
//! mapping, or replace the whole policy) and [`apply_edits`], which applies a list of them as one
//! transaction.
//!
//! The edits work on a copy: each is checked where it lands ([`super::validate`]) and the
//! result as a whole, and on any error the original is untouched. On success the caller gets the
//! new policy and the vPorts whose policy changed, whose epochs the engine bumps.
//!
//! This module parses no text ([`super::cli`] turns command lines into rules, layers and
//! mappings) and installs nothing (the engine does).

use super::validate::{
    ConfigError, EDITS, Invalid, inv, join, layer_seg, rule_seg, validate_inner, validate_layer,
    validate_mapping, validate_rule,
};
use super::{LayerKind, LayerPolicy, Mapping, Policy, Rule};
use crate::key::VPortId;
use core::net::IpAddr;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::cli::{parse_mapping, parse_rule};
    use crate::policy::{Action, default_policy};
    use core::net::Ipv4Addr;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
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
}
