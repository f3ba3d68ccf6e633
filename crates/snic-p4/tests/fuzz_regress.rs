//! Inputs the fuzz targets `p4_compile` and `p4_exec` found, pinned as tests named after the bug.
//!
//! (A test that overflowed the stack would abort the whole test binary: each is un-ignored
//! with its fix.)

mod common;

use common::{SMALL, try_compile};

/// `SMALL` with the ingress control's `apply` block replaced by `body`.
fn ingress(body: &str) -> String {
    let s = SMALL.replace("apply { t.apply(); }", &format!("apply {{ {body} }}"));
    assert_ne!(s, SMALL, "SMALL changed");
    s
}

/// `x.emit(...)` or `x.apply(...)` as a statement, where `x` is not a `packet_out`, table or
/// parser/control instance (a struct, a header, a control's own type name, an undeclared
/// name): `call_stmt` finds no entity for `x` and falls through to the plain-call path, whose
/// `call_stmt_member` sends every `emit`/`apply` member call back to `call_stmt`: the two
/// recursed until the stack overflowed (found by `p4_compile` in its first minute; fixed). Each
/// must be a compile error.
#[test]
fn method_call_emit_or_apply_on_a_non_instance_overflows_the_stack() {
    for body in [
        "hdr.emit();",
        "hdr.eth.emit();",
        "sm.emit(hdr.eth);",
        "m.apply();",
        "I.apply(hdr, m, sm);",
        "nothing.apply();",
    ] {
        assert!(try_compile(&ingress(body)).is_err(), "{body} compiled");
    }
}

/// Beside it: another method name on the same bases is an error (passes today: only `emit`
/// and `apply` are sent back to `call_stmt`).
#[test]
fn method_call_with_another_name_on_a_non_instance_is_an_error() {
    assert!(try_compile(&ingress("hdr.foo();")).is_err());
    assert!(try_compile(&ingress("nothing.foo();")).is_err());
    assert!(try_compile(&ingress("")).is_ok());
}
