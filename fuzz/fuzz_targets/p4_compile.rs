//! Fuzz target `p4_compile`: arbitrary text (lossy UTF-8) through the whole front end,
//! `snic_p4::runner::build` (preprocess, lex, parse, compile; `#include <core.p4>` and
//! `<v1model.p4>` reach the built-in files, nothing else is found), with smaller preprocessor
//! bounds than the defaults.
//!
//! A bug is any panic or stack overflow: arbitrary text must give a program or diagnostics.
//! Every diagnostic must render. A program that compiles is also started (`Switch::new`, which
//! installs its `const entries`) and given one 64-byte frame and the input's own first bytes,
//! so that compiled code the examples never produce runs too; the switch's counters must say
//! it received both.
//!
//! Seeds: the programs of `examples/p4/` and `crates/snic-p4/tests/stf/` (given as corpus
//! directories, see `README.md`; no copies are kept here).

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_p4::builtin::Builtins;
use snic_p4::pre::{Limits, Options};
use snic_p4::span::SourceMap;
use snic_p4::v1model::Switch;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut map = SourceMap::new();
    let id = map.add("main.p4", text.as_ref());
    let limits = Limits {
        expansions: 20_000,
        expansion_tokens: 200_000,
        output_bytes: 1 << 20,
        ..Limits::default()
    };
    let options = Options { defines: Vec::new(), limits };
    let built = match snic_p4::runner::build(&mut map, id, &mut Builtins, &options) {
        Ok(b) => b,
        Err(diags) => {
            assert!(!diags.is_empty(), "Err without a diagnostic");
            for d in &diags {
                let _ = d.render(&map);
            }
            return;
        }
    };
    for w in &built.warnings {
        let _ = w.render(&map);
    }
    let Ok(mut sw) = Switch::new(built.program) else { return };
    let mut out = Vec::new();
    let mut frame = [0u8; 64];
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    frame[14] = 0x45;
    sw.process(0, &frame, 1_000, &mut out);
    sw.process(1, &data[..data.len().min(128)], 2_000, &mut out);
    assert_eq!(sw.stats().received, 2);
});
