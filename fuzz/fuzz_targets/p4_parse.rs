//! Fuzz target `p4_parse`: `snic_p4::parse::parse` on the tokens of arbitrary UTF-8 text (inputs
//! that are not UTF-8 are read lossily).
//!
//! Checked, besides "never panics" (no stack overflow: nesting is bounded, deep input is an
//! error): errors lie within the text and are at most `MAX_ERRORS`; an accepted program's
//! top-level declarations lie within the text, in order, without overlapping.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_p4::lex::lex;
use snic_p4::parse::{MAX_ERRORS, parse};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (tokens, _) = lex(&text);
    match parse(&text, &tokens) {
        Ok(program) => {
            let mut prev = 0;
            for d in &program.decls {
                let (s, e) = (d.loc.start as usize, d.loc.end as usize);
                assert!(prev <= s && s <= e && e <= text.len(), "{:?} after {prev}", d.loc);
                prev = e;
            }
        }
        Err(errors) => {
            assert!(!errors.is_empty() && errors.len() <= MAX_ERRORS, "{} errors", errors.len());
            for e in &errors {
                assert!(e.start <= e.end && e.end as usize <= text.len(), "{e:?}");
            }
        }
    }
});
