//! Fuzz target `p4_pre`: `snic_p4::pre::preprocess` on arbitrary UTF-8 text (non-UTF-8 inputs
//! are skipped). The input is split at NUL bytes: the main file, then `a.p4` and `b.p4`, which
//! `#include "a.p4"` / `#include <b.p4>` reach (any other name is not found).
//!
//! A bug is any panic, hang or stack overflow, and: `Ok` with an error among the warnings;
//! `Err` without an error; an output byte that `locate` does not place inside a file of the
//! source map.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_p4::diag::Severity;
use snic_p4::pre::{IncludeKind, Limits, LoadError, Loaded, Loader, Options, preprocess};
use snic_p4::span::SourceMap;

struct Files<'a> {
    a: &'a str,
    b: &'a str,
}

impl Loader for Files<'_> {
    fn load(&mut self, name: &str, _: IncludeKind, _: &str) -> Result<Loaded, LoadError> {
        let text = match name {
            "a.p4" => self.a,
            "b.p4" => self.b,
            _ => return Err(LoadError::NotFound),
        };
        Ok(Loaded { name: name.to_string(), text: text.to_string() })
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let mut parts = s.splitn(3, '\0');
    let main = parts.next().unwrap_or("");
    let mut files = Files { a: parts.next().unwrap_or(""), b: parts.next().unwrap_or("") };
    let mut map = SourceMap::new();
    let id = map.add("main.p4", main);
    // Smaller bounds than the defaults keep each run fast; the code paths are the same.
    let limits = Limits {
        expansions: 20_000,
        expansion_tokens: 200_000,
        output_bytes: 1 << 20,
        ..Limits::default()
    };
    let options = Options { defines: vec![("D".into(), "1".into())], limits };
    match preprocess(&mut map, id, &mut files, &options) {
        Ok(e) => {
            assert!(e.warnings.iter().all(|w| w.severity == Severity::Warning));
            for off in 0..=e.text.len() {
                match e.locate(off) {
                    Some(span) => {
                        let f = map.file(span.file).expect("a file of the map");
                        assert!(span.start as usize <= f.text.len() && span.start <= span.end);
                    }
                    None => assert!(e.text.is_empty()),
                }
            }
            for w in &e.warnings {
                let _ = w.render(&map);
            }
        }
        Err(diags) => {
            assert!(diags.iter().any(|d| d.severity == Severity::Error));
            for d in &diags {
                let _ = d.render(&map);
            }
        }
    }
});
