//! Fuzz target `vswitch_policy`: the vSwitch's policy input on one arbitrary UTF-8 string
//! (non-UTF-8 inputs are skipped):
//!
//! - `snic_vswitch::policy::toml::parse_policy`: `Ok` must pass `validate`, print with
//!   `to_toml` and parse back to the same policy, and replace itself through `apply_edits` with
//!   no vPort reported changed; `Err` must carry a message.
//! - `parse_action`: `Ok` must print (`Display`) and parse back to the same action.
//! - `parse_rule`, `parse_layer`, `parse_mapping`: `Ok` is added to the default policy with
//!   `apply_edits`; that gives a valid policy with vPort 0 changed, or an error that names the
//!   edit (`edit[0]`).
//!
//! Any panic is a bug: arbitrary text must give `Ok` or a typed error.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_vswitch::key::VPortId;
use snic_vswitch::policy::cli::{parse_action, parse_layer, parse_mapping, parse_rule};
use snic_vswitch::policy::edit::{PolicyEdit, apply_edits};
use snic_vswitch::policy::toml::{parse_policy, to_toml};
use snic_vswitch::policy::validate::validate;
use snic_vswitch::policy::{Policy, default_policy};
use std::sync::OnceLock;

fn base() -> &'static Policy {
    static BASE: OnceLock<Policy> = OnceLock::new();
    BASE.get_or_init(default_policy)
}

/// Applies one edit to the default policy and checks the outcome.
fn check_edit(edit: PolicyEdit) {
    match apply_edits(base(), &[edit]) {
        Ok((p, changed)) => {
            validate(&p).unwrap_or_else(|e| panic!("edited policy invalid: {e}"));
            assert_eq!(changed, vec![VPortId(0)], "an added item changes vport 0 only");
        }
        Err(e) => assert!(e.field.starts_with("edit[0]"), "edit error without its index: {e}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };

    match parse_policy(s, "fuzz.toml") {
        Ok(p) => {
            validate(&p).unwrap_or_else(|e| panic!("parse_policy gave an invalid policy: {e}"));
            let text = to_toml(&p);
            let again = parse_policy(&text, "again.toml")
                .unwrap_or_else(|e| panic!("re-parse of {text:?}: {e}"));
            assert_eq!(again, p, "round trip through {text:?}");
            let (same, changed) = apply_edits(&p, &[PolicyEdit::Replace(p.clone())])
                .unwrap_or_else(|e| panic!("replacing a valid policy by itself: {e}"));
            assert_eq!(same, p);
            assert!(changed.is_empty(), "nothing changed, yet {changed:?}");
        }
        Err(e) => assert!(!e.message.is_empty() && !e.to_string().is_empty()),
    }

    if let Ok(a) = parse_action(s) {
        let text = a.to_string();
        assert_eq!(parse_action(&text), Ok(a), "action {s:?} -> {text:?}");
    }
    if let Ok(rule) = parse_rule(s) {
        check_edit(PolicyEdit::AddRule { vport: VPortId(0), layer: "acl".into(), rule });
    }
    if let Ok(layer) = parse_layer(s) {
        check_edit(PolicyEdit::AddLayer { vport: VPortId(0), layer, position: Some(1) });
    }
    if let Ok(mapping) = parse_mapping(s) {
        check_edit(PolicyEdit::AddMapping { vport: VPortId(0), layer: "vnet".into(), mapping });
    }
});
