//! The P4-16 lexer: every token kind, literal values, longest match, errors, a v1model snippet,
//! and properties (no panic, ordered ranges, round trip).

use proptest::prelude::*;
use snic_p4::lex::{
    BigUint, IntLit, IntWidth, LexError, LexErrorKind, MAX_WIDTH, Token, TokenKind, lex,
};

/// Kinds of `text`, which must lex without error.
fn kinds(text: &str) -> Vec<TokenKind> {
    let (toks, errs) = lex(text);
    assert!(errs.is_empty(), "{text:?}: {errs:?}");
    toks.into_iter().map(|t| t.kind).collect()
}

/// The one token of `text`, which must lex without error.
fn one(text: &str) -> TokenKind {
    let k = kinds(text);
    assert_eq!(k.len(), 1, "{text:?}: {k:?}");
    k.into_iter().next().unwrap()
}

fn int(text: &str) -> IntLit {
    match one(text) {
        TokenKind::Int(lit) => lit,
        other => panic!("{text:?}: {other:?}"),
    }
}

/// The errors of `text`.
fn errors(text: &str) -> Vec<LexError> {
    lex(text).1
}

#[test]
fn every_keyword_and_punctuation_lexes_alone() {
    for (text, kind) in TokenKind::FIXED {
        assert_eq!(&one(text), kind, "{text}");
    }
}

#[test]
fn keywords_are_whole_words() {
    assert_eq!(one("header_union"), TokenKind::KwHeaderUnion);
    assert_eq!(one("match_kind"), TokenKind::KwMatchKind);
    assert_eq!(one("value_set"), TokenKind::KwValueSet);
    for w in ["headers", "header_", "Header", "actionx", "_x", "x_", "__", "int8", "bit_t"] {
        assert_eq!(one(w), TokenKind::Ident, "{w}");
    }
    assert_eq!(one("_"), TokenKind::DontCare);
    // Type names are identifiers at this level.
    assert_eq!(kinds("packet_in pkt"), [TokenKind::Ident, TokenKind::Ident]);
}

#[test]
fn identifier_text_comes_from_the_range() {
    let src = "  foo_1 /* c */ Bar2";
    let (toks, _) = lex(src);
    assert_eq!(toks.iter().map(|t| t.text(src)).collect::<Vec<_>>(), ["foo_1", "Bar2"]);
    assert_eq!((toks[0].start, toks[0].end), (2, 7));
}

#[test]
fn integer_literal_forms() {
    let d = int("255");
    assert_eq!((d.width, d.radix, d.value.to_u128()), (None, 10, Some(255)));
    assert_eq!(int("0xFf").value.to_u64(), Some(255));
    assert_eq!(int("0XfF").radix, 16);
    assert_eq!(int("0o17").value.to_u64(), Some(15));
    assert_eq!(int("0O17").radix, 8);
    assert_eq!(int("0b1010").value.to_u64(), Some(10));
    assert_eq!(int("0B1").radix, 2);
    assert_eq!(int("0d99").value.to_u64(), Some(99));
    assert_eq!(int("0D99").radix, 10);
    assert_eq!(int("1_000_000").value.to_u64(), Some(1_000_000));
    assert_eq!(int("0xdead_beef").value.to_u64(), Some(0xdead_beef));
    assert_eq!(int("0").value, BigUint::zero());
    assert_eq!(int("007").value.to_u64(), Some(7));
}

#[test]
fn integer_literal_width_prefixes() {
    let w = int("8w255");
    assert_eq!(w.width, Some(IntWidth { bits: 8, signed: false }));
    assert_eq!(w.value.to_u64(), Some(255));
    let s = int("16s0x10");
    assert_eq!(s.width, Some(IntWidth { bits: 16, signed: true }));
    assert_eq!((s.radix, s.value.to_u64()), (16, Some(16)));
    assert_eq!(int("32w0b1_0").value.to_u64(), Some(2));
    assert_eq!(int("4w0o7").value.to_u64(), Some(7));
    assert_eq!(int("1w0d1").value.to_u64(), Some(1));
    assert_eq!(int("0w0").width, Some(IntWidth { bits: 0, signed: false }));
    assert_eq!(int(&format!("{MAX_WIDTH}w1")).width.unwrap().bits, MAX_WIDTH);
    // A value too big for its width is the type checker's business.
    assert_eq!(int("8w256").value.to_u64(), Some(256));
    // `-` is an operator: a negative literal is two tokens, and `8s-1` is no literal.
    assert!(matches!(kinds("-8s1")[..], [TokenKind::Minus, TokenKind::Int(_)]));
    let (toks, errs) = lex("8s-1");
    assert_eq!(errs[0].kind, LexErrorKind::MissingDigits);
    assert!(matches!(
        toks.iter().map(|t| &t.kind).collect::<Vec<_>>()[..],
        [TokenKind::Error, TokenKind::Minus, TokenKind::Int(_)]
    ));
}

#[test]
fn wide_integer_literals_keep_every_bit() {
    // 2^200 - 1: 200 one bits.
    let hex = format!("0x{}", "f".repeat(50));
    let v = int(&hex).value;
    assert_eq!(v.bits(), 200);
    assert_eq!(v.to_u128(), None);
    assert_eq!(v.limbs(), [u64::MAX, u64::MAX, u64::MAX, 0xff]);
    let dec = "1606938044258990275541962092341162602522202993782792835301375";
    assert_eq!(int(dec).value, v);
    assert_eq!(v.to_string(), dec);
    let w = int(&format!("200w{dec}"));
    assert_eq!(w.width.unwrap().bits, 200);
    assert_eq!(w.value, v);
    let bin = format!("0b1{}", "0".repeat(199));
    assert!(int(&bin).value < v && int(&bin).value.bit(199));
    // Values up to MAX_WIDTH bits are fine; one more bit is an error.
    let max = format!("0x{}", "f".repeat(MAX_WIDTH as usize / 4));
    assert_eq!(int(&max).value.bits(), u64::from(MAX_WIDTH));
    let over = format!("0x1{}", "0".repeat(MAX_WIDTH as usize / 4));
    assert_eq!(errors(&over)[0].kind, LexErrorKind::ValueTooLarge);
}

#[test]
fn bad_integer_literals_are_errors() {
    let cases: &[(&str, LexErrorKind)] = &[
        ("0b102", LexErrorKind::BadDigit { ch: '2', radix: 2 }),
        ("0o8", LexErrorKind::BadDigit { ch: '8', radix: 8 }),
        ("0xfg", LexErrorKind::BadDigit { ch: 'g', radix: 16 }),
        ("12ab", LexErrorKind::BadDigit { ch: 'a', radix: 10 }),
        ("8wff", LexErrorKind::BadDigit { ch: 'f', radix: 10 }),
        ("8W1", LexErrorKind::BadDigit { ch: 'W', radix: 10 }),
        ("0x", LexErrorKind::MissingDigits),
        ("0b_", LexErrorKind::MissingDigits),
        ("8w", LexErrorKind::MissingDigits),
        ("8s0x", LexErrorKind::MissingDigits),
        ("65537w1", LexErrorKind::WidthTooLarge),
        ("99999999999999999999w1", LexErrorKind::WidthTooLarge),
    ];
    for (text, kind) in cases {
        let (toks, errs) = lex(text);
        assert_eq!(errs.len(), 1, "{text}: {errs:?}");
        assert_eq!(&errs[0].kind, kind, "{text}");
        // One error token over the whole literal.
        assert_eq!(toks.len(), 1, "{text}");
        assert_eq!(toks[0].kind, TokenKind::Error);
        assert_eq!((toks[0].start, toks[0].end), (0, text.len() as u32));
        assert_eq!((errs[0].start, errs[0].end), (0, text.len() as u32));
    }
    // The lexer goes on after a bad literal.
    assert_eq!(lex("0x; x").0.len(), 3);
}

#[test]
fn operators_take_the_longest_match() {
    use TokenKind::*;
    let cases: &[(&str, &[TokenKind])] = &[
        ("|+|", &[PlusSat]),
        ("|-|", &[MinusSat]),
        ("|+", &[Pipe, Plus]),
        ("||+|", &[OrOr, Plus, Pipe]),
        ("&&&", &[Mask]),
        ("&&&&", &[Mask, Amp]),
        ("&&", &[AndAnd]),
        ("++", &[PlusPlus]),
        ("+++", &[PlusPlus, Plus]),
        ("..", &[DotDot]),
        ("...", &[DotDot, Dot]),
        ("1..5", &[]),
        (">>", &[Gt, Gt]),
        (">>=", &[Gt, Ge]),
        ("<<", &[Shl]),
        ("<<=", &[ShlAssign]),
        ("<=", &[Le]),
        ("===", &[EqEq, Assign]),
        ("!==", &[Ne, Assign]),
        ("|+|=", &[PlusSatAssign]),
        ("|-|=", &[MinusSatAssign]),
        ("+=", &[PlusAssign]),
        ("a.b", &[Ident, Dot, Ident]),
        ("@", &[At]),
        ("@ name", &[At, Ident]),
    ];
    for (text, want) in cases {
        if text == &"1..5" {
            let k = kinds(text);
            assert!(matches!(k[..], [Int(_), DotDot, Int(_)]), "{k:?}");
            continue;
        }
        assert_eq!(&kinds(text)[..], *want, "{text}");
    }
}

#[test]
fn nested_generics_close_with_adjacent_gt() {
    let src = "tuple<bit<8>> t; x = y >> 2; z = y > > 2;";
    let (toks, errs) = lex(src);
    assert!(errs.is_empty());
    let gts: Vec<&Token> = toks.iter().filter(|t| t.kind == TokenKind::Gt).collect();
    assert_eq!(gts.len(), 6);
    assert!(gts[0].is_adjacent_to(gts[1]));
    assert!(gts[2].is_adjacent_to(gts[3]));
    assert!(!gts[4].is_adjacent_to(gts[5]));
}

#[test]
fn annotations() {
    let src = "@name(\"ingress.t\") @priority(3) @pragma p @ x @my_anno[k = 1]";
    let (toks, errs) = lex(src);
    assert!(errs.is_empty());
    let anns: Vec<&str> =
        toks.iter().filter(|t| t.kind == TokenKind::Annotation).map(|t| t.text(src)).collect();
    assert_eq!(anns, ["@name", "@priority", "@pragma", "@my_anno"]);
    assert_eq!(toks[2].kind, TokenKind::Str("ingress.t".into()));
    assert!(toks.iter().any(|t| t.kind == TokenKind::At));
}

#[test]
fn string_literals_and_escapes() {
    assert_eq!(one(r#""hello""#), TokenKind::Str("hello".into()));
    assert_eq!(one(r#""""#), TokenKind::Str(String::new()));
    assert_eq!(one(r#""a\"b\\c\n\t\r""#), TokenKind::Str("a\"b\\c\n\t\r".into()));
    assert_eq!(one("\"two\nlines é\""), TokenKind::Str("two\nlines é".into()));
    assert_eq!(one("\"/* not a comment */\""), TokenKind::Str("/* not a comment */".into()));
    let e = errors(r#""a\qb""#);
    assert_eq!(e[0].kind, LexErrorKind::BadEscape('q'));
    assert_eq!((e[0].start, e[0].end), (2, 4));
    let (toks, e) = lex("x \"open");
    assert_eq!(e[0].kind, LexErrorKind::UnterminatedString);
    assert_eq!(toks[1].kind, TokenKind::Error);
    assert_eq!(errors("\"ends in \\")[0].kind, LexErrorKind::UnterminatedString);
}

#[test]
fn comments_and_whitespace_give_no_tokens() {
    assert!(kinds("").is_empty());
    assert!(kinds(" \t\r\n\x0b\x0c // line\n/* block\n * more */ // end").is_empty());
    assert_eq!(kinds("a/**/b//c\nd"), [TokenKind::Ident, TokenKind::Ident, TokenKind::Ident]);
    assert_eq!(kinds("/* /* not nested */ x"), [TokenKind::Ident]);
    assert_eq!(kinds("a / b"), [TokenKind::Ident, TokenKind::Slash, TokenKind::Ident]);
    let (toks, e) = lex("x /* open");
    assert_eq!(toks.len(), 1);
    assert_eq!(e[0].kind, LexErrorKind::UnterminatedComment);
    assert_eq!((e[0].start, e[0].end), (2, 4));
}

#[test]
fn stray_characters_are_error_tokens() {
    let (toks, e) = lex("#include <x>\nfoo $ é `");
    assert_eq!(e[0].kind, LexErrorKind::StrayHash);
    assert_eq!((e[0].start, e[0].end), (0, 1));
    assert_eq!(toks[0].kind, TokenKind::Error);
    assert_eq!(toks[1].kind, TokenKind::Ident);
    let kinds: Vec<&LexErrorKind> = e.iter().map(|e| &e.kind).collect();
    assert_eq!(
        kinds[1..],
        [
            &LexErrorKind::UnexpectedChar('$'),
            &LexErrorKind::UnexpectedChar('é'),
            &LexErrorKind::UnexpectedChar('`')
        ]
    );
    // A multi-byte character is one error token over all its bytes.
    let eacute = e.iter().find(|e| e.kind == LexErrorKind::UnexpectedChar('é')).unwrap();
    assert_eq!(eacute.end - eacute.start, 2);
    assert!(e[0].to_string().contains('#'));
}

#[test]
fn v1model_snippet_lexes_to_the_expected_tokens() {
    use TokenKind::*;
    let src = r#"
header ethernet_t { bit<48> dst; bit<16> etherType; }
parser P(packet_in pkt, out headers_t hdr, inout metadata_t m,
         inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) { 16w0x0800: accept; default: reject; }
    }
}
control C(inout headers_t hdr) {
    @name("C.fwd") action fwd(bit<9> port) { sm.egress_spec = port; }
    table t {
        key = { hdr.ethernet.dst: exact; }
        actions = { fwd; NoAction; }
        const entries = { 48w0x0000_0000_0001 &&& 48w0xff: fwd(1); _ : NoAction(); }
    }
    apply { if (hdr.ethernet.isValid()) { t.apply(); } else { exit; } }
}
V1Switch(P(), C()) main;
"#;
    let (toks, errs) = lex(src);
    assert!(errs.is_empty(), "{errs:?}");
    let got: Vec<String> = toks
        .iter()
        .map(|t| match &t.kind {
            Ident => format!("id:{}", t.text(src)),
            Annotation => format!("ann:{}", t.text(src)),
            Int(l) => format!(
                "int:{}{}",
                l.width.map_or(String::new(), |w| format!(
                    "{}{}",
                    w.bits,
                    if w.signed { 's' } else { 'w' }
                )),
                l.value
            ),
            Str(s) => format!("str:{s}"),
            k => k.fixed_text().unwrap().to_string(),
        })
        .collect();
    let want = "header id:ethernet_t { bit < int:48 > id:dst ; bit < int:16 > id:etherType ; } \
        parser id:P ( id:packet_in id:pkt , out id:headers_t id:hdr , inout id:metadata_t id:m , \
        inout id:standard_metadata_t id:sm ) { \
        state id:start { \
        id:pkt . id:extract ( id:hdr . id:ethernet ) ; \
        transition select ( id:hdr . id:ethernet . id:etherType ) { int:16w2048 : id:accept ; \
        default : id:reject ; } \
        } \
        } \
        control id:C ( inout id:headers_t id:hdr ) { \
        ann:@name ( str:C.fwd ) action id:fwd ( bit < int:9 > id:port ) { \
        id:sm . id:egress_spec = id:port ; } \
        table id:t { \
        key = { id:hdr . id:ethernet . id:dst : id:exact ; } \
        actions = { id:fwd ; id:NoAction ; } \
        const entries = { int:48w1 &&& int:48w255 : id:fwd ( int:1 ) ; _ : id:NoAction ( ) ; } \
        } \
        apply { if ( id:hdr . id:ethernet . id:isValid ( ) ) { id:t . apply ( ) ; } else { exit ; } } \
        } \
        id:V1Switch ( id:P ( ) , id:C ( ) ) id:main ;";
    assert_eq!(got, want.split_whitespace().collect::<Vec<_>>());
}

#[test]
fn huge_inputs_stay_fast() {
    // Linear time: a megabyte of digits, of open comments, of strings, of operators.
    let digits = "9".repeat(1 << 20);
    assert_eq!(errors(&digits)[0].kind, LexErrorKind::ValueTooLarge);
    let mut s = "/* ".repeat(1 << 19);
    s.push('x');
    assert_eq!(errors(&s).len(), 1);
    assert_eq!(kinds(&"|+|".repeat(1 << 18)).len(), 1 << 18);
    assert_eq!(errors(&"\"".repeat(1 << 20 | 1)).len(), 1);
}

/// A valid token and its text.
fn valid_token() -> impl Strategy<Value = (String, TokenKind)> {
    let fixed =
        proptest::sample::select(TokenKind::FIXED.to_vec()).prop_map(|(t, k)| (t.to_string(), k));
    let ident = "[a-zA-Z_][a-zA-Z0-9_]{0,8}".prop_map(|s| {
        let k = TokenKind::keyword(&s).unwrap_or(TokenKind::Ident);
        (s, k)
    });
    let ann = "[a-zA-Z_][a-zA-Z0-9_]{0,8}".prop_map(|s| (format!("@{s}"), TokenKind::Annotation));
    let int = (
        proptest::option::of((0u32..=MAX_WIDTH, any::<bool>())),
        proptest::sample::select(vec![2u32, 8, 10, 16]),
        proptest::collection::vec(any::<u64>(), 0..5),
        any::<bool>(),
    )
        .prop_map(|(width, radix, limbs, unders)| {
            let value = BigUint::from_limbs(limbs);
            let mut digits = match radix {
                16 => format!("{value:x}"),
                10 => value.to_string(),
                // Only small values in binary and octal, printed through u64.
                8 => format!("{:o}", value.limbs().first().copied().unwrap_or(0)),
                _ => format!("{:b}", value.limbs().first().copied().unwrap_or(0)),
            };
            let value = match radix {
                2 | 8 => BigUint::from(value.limbs().first().copied().unwrap_or(0)),
                _ => value,
            };
            if unders {
                digits.insert(digits.len().div_ceil(2), '_');
            }
            let prefix = match radix {
                16 => "0x",
                8 => "0o",
                2 => "0b",
                _ if width.is_some() => "0d",
                _ => "",
            };
            let w =
                width.map_or(String::new(), |(b, s)| format!("{b}{}", if s { 's' } else { 'w' }));
            let lit = IntLit {
                width: width.map(|(bits, signed)| IntWidth { bits, signed }),
                radix,
                value,
            };
            (format!("{w}{prefix}{digits}"), TokenKind::Int(lit))
        });
    let string = "[a-z \"\\\\\n\t]{0,10}".prop_map(|s| {
        let escaped = s.replace('\\', "\\\\").replace('"', "\\\"").replace('\t', "\\t");
        (format!("\"{escaped}\""), TokenKind::Str(s))
    });
    prop_oneof![4 => fixed, 3 => ident, 1 => ann, 2 => int, 1 => string]
}

fn check_ranges(text: &str, toks: &[Token], errs: &[LexError]) {
    let mut prev = 0u32;
    for t in toks {
        assert!(t.start >= prev && t.start < t.end && t.end as usize <= text.len(), "{t:?}");
        assert!(text.get(t.start as usize..t.end as usize).is_some());
        prev = t.end;
    }
    for e in errs {
        assert!(e.start <= e.end && e.end as usize <= text.len(), "{e:?}");
        assert!(text.get(e.start as usize..e.end as usize).is_some());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics_and_ranges_are_ordered(text in "\\PC{0,200}") {
        let (toks, errs) = lex(&text);
        check_ranges(&text, &toks, &errs);
    }

    #[test]
    fn p4ish_text_never_panics_and_ranges_are_ordered(
        text in "[a-z0-9_xXoObBwsdD@#\"\\\\/*<>=|+&.:;(){} \n-]{0,200}"
    ) {
        let (toks, errs) = lex(&text);
        check_ranges(&text, &toks, &errs);
        // Every error token has an error over the same start.
        for t in toks.iter().filter(|t| t.kind == TokenKind::Error) {
            prop_assert!(errs.iter().any(|e| e.start == t.start));
        }
        // Error-free text: no token depends on its neighbours, whitespace or comments.
        if errs.is_empty() {
            let joined = toks.iter().map(|t| t.text(&text)).collect::<Vec<_>>().join(" ");
            let again: Vec<TokenKind> = lex(&joined).0.into_iter().map(|t| t.kind).collect();
            let first: Vec<TokenKind> = toks.iter().map(|t| t.kind.clone()).collect();
            prop_assert_eq!(again, first);
        }
    }

    #[test]
    fn valid_tokens_round_trip(seq in proptest::collection::vec(valid_token(), 0..30)) {
        let text = seq.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>().join(" ");
        let (toks, errs) = lex(&text);
        prop_assert!(errs.is_empty(), "{:?}: {:?}", text, errs);
        let got: Vec<TokenKind> = toks.iter().map(|t| t.kind.clone()).collect();
        let want: Vec<TokenKind> = seq.iter().map(|(_, k)| k.clone()).collect();
        prop_assert_eq!(got, want);
        // And the token texts are the texts given.
        let texts: Vec<&str> = toks.iter().map(|t| t.text(&text)).collect();
        let given: Vec<&str> = seq.iter().map(|(t, _)| t.as_str()).collect();
        prop_assert_eq!(texts, given);
    }
}
