//! Fuzz target `scenario_load`: a scenario file (arbitrary UTF-8; non-UTF-8 inputs are
//! skipped) through `snic_scenario::load::check_str` as TOML and as JSON, and the same text
//! through the reference parsers (`parse_buf`, `parse_buf_ref`, `parse_host_ref`,
//! `parse_port_ref`).
//!
//! - `check_str`: `Err` must carry at least one error, each naming the file, with a message,
//!   and a line (when given) inside the text; `Ok` must re-validate with `validate`.
//! - The reference parsers: `Ok` must print (`BufRef`'s `Display`) and parse back to itself.
//!
//! Any panic is a bug: arbitrary text must give a scenario or typed errors.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_scenario::load::{
    Buf, Format, check_str, parse_buf, parse_buf_ref, parse_host_ref, parse_port_ref, validate,
};
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = core::str::from_utf8(data) else { return };
    let lines = text.lines().count().max(1) + 1;
    for format in [Format::Toml, Format::Json] {
        match check_str(text, format, Path::new("fuzz.scn"), Path::new("/nonexistent")) {
            Ok(loaded) => {
                assert!(validate(&loaded.scenario, Path::new("/nonexistent")).is_ok());
            }
            Err(errors) => {
                assert!(!errors.is_empty(), "an error list without errors");
                for e in &errors {
                    assert_eq!(e.file, Path::new("fuzz.scn"));
                    assert!(!e.message.is_empty(), "{e:?}");
                    if let Some(l) = e.line {
                        assert!((1..=lines).contains(&l), "line {l} outside the text: {e}");
                    }
                }
            }
        }
    }
    for host in [None, Some("h0")] {
        if let Ok(Buf::Named(b)) = parse_buf(text, host) {
            let again = parse_buf_ref(&b.to_string(), None).expect("a printed ref parses");
            assert_eq!(again, b);
        }
        let _ = parse_buf_ref(text, host);
        if let Ok((h, n)) = parse_host_ref(text, host) {
            assert_eq!(parse_host_ref(&format!("{h}.{n}"), None), Ok((h, n)));
        }
    }
    if let Ok((node, port)) = parse_port_ref(text) {
        assert_eq!(parse_port_ref(&format!("{node}.{port}")), Ok((node, port)));
    }
});
