//! Properties of the preprocessor on arbitrary text: it never panics and always ends, and text
//! without directives, comments or continuations comes out unchanged, located byte for byte.

use proptest::prelude::*;
use snic_p4::pre::{IncludeKind, Limits, LoadError, Loaded, Loader, Options, preprocess};
use snic_p4::span::{SourceMap, Span};

/// `a.p4` and `b.p4` by either kind of include; nothing else.
struct TwoFiles {
    a: String,
    b: String,
}

impl Loader for TwoFiles {
    fn load(&mut self, name: &str, _: IncludeKind, _: &str) -> Result<Loaded, LoadError> {
        let text = match name {
            "a.p4" => self.a.clone(),
            "b.p4" => self.b.clone(),
            _ => return Err(LoadError::NotFound),
        };
        Ok(Loaded { name: name.to_string(), text })
    }
}

/// Text built from pieces the preprocessor cares about, and arbitrary characters.
fn cpp_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        prop::sample::select(vec![
            "#define ",
            "#undef ",
            "#if ",
            "#ifdef ",
            "#ifndef ",
            "#elif ",
            "#else",
            "#endif",
            "#include \"a.p4\"",
            "#include <b.p4>",
            "#include \"c.p4\"",
            "#line 5 \"x.p4\"",
            "# 3 \"y.p4\"",
            "#line 9",
            "#error e",
            "#warning w",
            "#pragma once",
            "#",
            "##",
            "A",
            "B",
            "F",
            "F(",
            "G(x,y)",
            "A B",
            "(",
            ")",
            ",",
            "\n",
            " ",
            "/*",
            "*/",
            "//",
            "\\\n",
            "\"",
            "1",
            "0x1f",
            "/",
            "%",
            "&&",
            "||",
            "?",
            ":",
            "!",
            "-",
            "<",
            ">",
            "defined",
            "__VA_ARGS__",
            "...",
            "é",
            "\r\n",
            "x",
            "\t",
        ])
        .prop_map(str::to_string),
        "[ -~]{0,6}",
    ];
    prop::collection::vec(piece, 0..80).prop_map(|v| v.concat())
}

fn small_limits() -> Options {
    Options {
        limits: Limits { expansions: 5_000, expansion_tokens: 50_000, ..Limits::default() },
        ..Options::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(main in cpp_text(), a in cpp_text(), b in cpp_text()) {
        let mut map = SourceMap::new();
        let id = map.add("main.p4", main);
        let mut loader = TwoFiles { a, b };
        match preprocess(&mut map, id, &mut loader, &small_limits()) {
            Ok(e) => {
                // Every output byte has a place, inside a file of the map.
                for off in 0..=e.text.len() {
                    if let Some(s) = e.locate(off) {
                        let f = map.file(s.file).expect("a file of the map");
                        prop_assert!(s.start as usize <= f.text.len());
                        prop_assert!(s.start <= s.end);
                    } else {
                        prop_assert!(e.text.is_empty());
                    }
                }
                for w in &e.warnings {
                    let _ = w.render(&map);
                }
            }
            Err(diags) => {
                prop_assert!(!diags.is_empty());
                for d in &diags {
                    let _ = d.render(&map);
                }
            }
        }
    }

    #[test]
    fn text_without_directives_is_unchanged(text in "([^#/\\\\]|/[^*/#\\\\])*") {
        let mut map = SourceMap::new();
        let id = map.add("main.p4", text.clone());
        let mut loader = TwoFiles { a: String::new(), b: String::new() };
        let e = preprocess(&mut map, id, &mut loader, &Options::default()).expect("no errors");
        prop_assert_eq!(&e.text, &text);
        for off in 0..text.len() {
            prop_assert_eq!(e.locate(off), Some(Span { file: id, start: off as u32, end: off as u32 + 1 }));
        }
    }

    #[test]
    fn comments_keep_the_line_count(text in "([^#\\\\]|/\\*[^#\\\\]*\\*/)*") {
        let mut map = SourceMap::new();
        let id = map.add("main.p4", text.clone());
        let mut loader = TwoFiles { a: String::new(), b: String::new() };
        if let Ok(e) = preprocess(&mut map, id, &mut loader, &Options::default()) {
            prop_assert_eq!(e.text.matches('\n').count(), text.matches('\n').count());
        }
    }
}
