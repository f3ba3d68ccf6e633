//! The include files built into snic: our own `core.p4`, `v1model.p4` and `pna.p4`, found by
//! `#include <core.p4>`, `#include <v1model.p4>` and `#include <pna.p4>` before any `-I`
//! directory.
//!
//! They are written for snic from the P4-16 specification and BMv2's `simple_switch`
//! documentation; the names and signatures are the standard ones, so ordinary v1model programs
//! compile unchanged. As the originals do, `core.p4` defines `_CORE_P4_` and `v1model.p4`
//! defines `V1MODEL_VERSION` (20200408) unless the program set it first.

/// `core.p4`: errors, `packet_in`, `packet_out`, `verify`, `NoAction`, the core match kinds.
pub const CORE_P4: &str = include_str!("../p4include/core.p4");

/// `v1model.p4`: `standard_metadata_t`, the v1model externs and the `V1Switch` package.
pub const V1MODEL_P4: &str = include_str!("../p4include/v1model.p4");

/// `pna.p4`: the Portable NIC Architecture's metadata, externs and the `PNA_NIC` package.
pub const PNA_P4: &str = include_str!("../p4include/pna.p4");

/// The built-in file called `name` (as written between `<>`), if there is one.
pub fn lookup(name: &str) -> Option<&'static str> {
    match name {
        "core.p4" => Some(CORE_P4),
        "v1model.p4" => Some(V1MODEL_P4),
        "pna.p4" => Some(PNA_P4),
        _ => None,
    }
}

/// A [`crate::pre::Loader`] that knows only the built-in files, named `<core.p4>`,
/// `<v1model.p4>` and `<pna.p4>` in diagnostics. Both include forms find them (as p4c's search path does);
/// anything else is not found.
#[derive(Debug, Clone, Copy, Default)]
pub struct Builtins;

impl crate::pre::Loader for Builtins {
    fn load(
        &mut self,
        name: &str,
        _kind: crate::pre::IncludeKind,
        _from: &str,
    ) -> Result<crate::pre::Loaded, crate::pre::LoadError> {
        let text = lookup(name).ok_or(crate::pre::LoadError::NotFound)?;
        Ok(crate::pre::Loaded { name: format!("<{name}>"), text: text.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_ins_guard_themselves_and_define_what_programs_test() {
        assert!(CORE_P4.contains("#ifndef _CORE_P4_\n#define _CORE_P4_"));
        assert!(V1MODEL_P4.contains("#include <core.p4>"));
        assert!(V1MODEL_P4.contains("#define V1MODEL_VERSION 20200408"));
        for name in ["standard_metadata_t", "V1Switch", "mark_to_drop", "verify_checksum"] {
            assert!(V1MODEL_P4.contains(name), "{name}");
        }
        assert_eq!(lookup("core.p4"), Some(CORE_P4));
        assert_eq!(lookup("v1model.p4"), Some(V1MODEL_P4));
        assert_eq!(lookup("pna.p4"), Some(PNA_P4));
        for name in ["PNA_NIC", "send_to_port", "add_entry", "PNA_IdleTimeout_t", "AUTO_DELETE"] {
            assert!(PNA_P4.contains(name), "{name}");
        }
        assert_eq!(lookup("psa.p4"), None);
    }
}
