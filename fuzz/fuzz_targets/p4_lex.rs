//! Fuzz target `p4_lex`: `snic_p4::lex::lex` on arbitrary UTF-8 text (inputs that are not
//! UTF-8 are read lossily).
//!
//! Checked, besides "never panics" (and, through libFuzzer's timeout, linear time): tokens are in
//! order, do not overlap, are not empty, and lie within the text on character boundaries;
//! errors lie within the text on character boundaries; every `Error` token has an error starting
//! where it starts. When the text lexed without error: each token's text lexes alone to the same
//! kind, and the token texts joined by spaces lex to the same kinds (no token depends on its
//! neighbours, whitespace or comments).

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_p4::lex::{TokenKind, lex};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (toks, errs) = lex(&text);
    let mut prev = 0;
    for t in &toks {
        assert!(prev <= t.start && t.start < t.end, "{t:?} after {prev}");
        assert!(text.get(t.start as usize..t.end as usize).is_some(), "{t:?}");
        prev = t.end;
    }
    for e in &errs {
        assert!(e.start <= e.end && text.get(e.start as usize..e.end as usize).is_some(), "{e:?}");
    }
    for t in toks.iter().filter(|t| t.kind == TokenKind::Error) {
        assert!(errs.iter().any(|e| e.start == t.start), "{t:?} without an error");
    }
    if !errs.is_empty() {
        return;
    }
    for t in &toks {
        let (alone, e) = lex(t.text(&text));
        assert!(e.is_empty() && alone.len() == 1 && alone[0].kind == t.kind, "{t:?}");
    }
    let joined = toks.iter().map(|t| t.text(&text)).collect::<Vec<_>>().join(" ");
    let (again, e) = lex(&joined);
    assert!(e.is_empty(), "{joined:?}: {e:?}");
    assert!(again.iter().map(|t| &t.kind).eq(toks.iter().map(|t| &t.kind)), "{joined:?}");
});
