//! The built-in `core.p4` and `v1model.p4` through the front end as far as it goes: a v1model
//! program that includes them preprocesses and lexes without an error, sees the macros the
//! originals define, and its tokens map back to the file they came from.

use snic_p4::builtin::Builtins;
use snic_p4::lex::{TokenKind, lex};
use snic_p4::pre::{Options, preprocess};
use snic_p4::span::SourceMap;

mod common;

/// The shared program, with checks that the built-ins define what the originals define.
fn program() -> String {
    let checks = "#if V1MODEL_VERSION < 20200408\n#error \"an older v1model\"\n#endif\n\
                  #ifndef _CORE_P4_\n#error \"core.p4 did not define _CORE_P4_\"\n#endif\n";
    common::SMALL.replacen(
        "#include <v1model.p4>\n",
        &format!("#include <v1model.p4>\n{checks}"),
        1,
    )
}

#[test]
fn a_v1model_program_with_the_built_ins_preprocesses_and_lexes_cleanly() {
    let mut map = SourceMap::new();
    let main = map.add("prog.p4", program());
    let out = preprocess(&mut map, main, &mut Builtins, &Options::default()).unwrap_or_else(|d| {
        panic!("{}", d.iter().map(|d| d.render(&map)).collect::<Vec<_>>().join("\n"))
    });
    let (tokens, errors) = lex(&out.text);
    assert!(errors.is_empty(), "{errors:?}");
    // The declarations of the built-ins are there, and map back to their files.
    let find = |name: &str| {
        tokens
            .iter()
            .find(|t| t.kind == TokenKind::Ident && t.text(&out.text) == name)
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let file_of = |name: &str| {
        let span = out.locate(find(name).start as usize).expect("a location");
        map.file(span.file).expect("a file").name.clone()
    };
    assert_eq!(file_of("packet_in"), "<core.p4>");
    assert_eq!(file_of("standard_metadata_t"), "<v1model.p4>");
    assert_eq!(file_of("ethernet_t"), "prog.p4");
    // The program's own `main` is the last identifier before the final `;`.
    assert_eq!(tokens[tokens.len() - 2].text(&out.text), "main");
}

#[test]
fn an_unknown_include_is_an_error_at_its_line() {
    let mut map = SourceMap::new();
    let main = map.add("prog.p4", "#include <core.p4>\n#include <psa.p4>\n");
    let errs = preprocess(&mut map, main, &mut Builtins, &Options::default()).unwrap_err();
    let text = errs.iter().map(|d| d.render(&map)).collect::<Vec<_>>().join("\n");
    assert!(text.contains("prog.p4:2:"), "{text}");
}
