//! The parser never panics: arbitrary text, arbitrary token sequences, and deep nesting (an
//! error, not a stack overflow).

use proptest::prelude::*;
use snic_p4::lex::{TokenKind, lex};
use snic_p4::parse::parse;

/// Token texts the parser cares about, to build token soups from.
const PIECES: &[&str] = &[
    "header",
    "struct",
    "control",
    "parser",
    "state",
    "transition",
    "select",
    "table",
    "key",
    "actions",
    "apply",
    "action",
    "extern",
    "enum",
    "const",
    "typedef",
    "if",
    "else",
    "switch",
    "default",
    "return",
    "exit",
    "bit",
    "int",
    "tuple",
    "<",
    ">",
    ">",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    ";",
    ":",
    ",",
    ".",
    "=",
    "==",
    "+",
    "-",
    "*",
    "&&&",
    "..",
    "?",
    "!",
    "@name",
    "x",
    "y",
    "T",
    "1",
    "8w3",
    "\"s\"",
    "_",
    "entries",
    "priority",
    "value_set",
    "package",
    "error",
];

fn run(text: &str) {
    let (tokens, _) = lex(text);
    let _ = parse(text, &tokens);
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,300}") {
        run(&text);
    }

    #[test]
    fn token_soups_never_panic(idx in proptest::collection::vec(0..PIECES.len(), 0..120)) {
        let text = idx.iter().map(|&i| PIECES[i]).collect::<Vec<_>>().join(" ");
        run(&text);
    }

    #[test]
    fn deep_nesting_of_any_bracket_is_an_error(
        open in proptest::sample::select(vec!["(", "{", "-", "!", "tuple<", "(bit<8>)"]),
        depth in 300usize..2000,
    ) {
        let text = format!("const bit<8> x = {}1;", open.repeat(depth));
        let (tokens, _) = lex(&text);
        let errs = parse(&text, &tokens).expect_err("an error");
        prop_assert!(errs.iter().any(|e| e.message.contains("nesting")) || tokens.iter().any(|t| t.kind == TokenKind::Error));
    }
}

#[test]
fn a_valid_program_parses() {
    let text = "control C() { apply { } }";
    let (tokens, _) = lex(text);
    assert!(parse(text, &tokens).is_ok());
}
