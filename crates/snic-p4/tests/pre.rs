//! The preprocessor against exact expected output, locations and diagnostics.

use snic_p4::diag::{Diagnostic, Severity};
use snic_p4::pre::{Expanded, IncludeKind, Limits, LoadError, Loaded, Loader, Options, preprocess};
use snic_p4::span::{FileId, SourceMap, Span};
use std::collections::HashMap;

/// Files by path; `<name>` looks in `builtin/` then `inc/`, `"name"` first beside the
/// including file.
#[derive(Default)]
struct MapLoader {
    files: HashMap<String, String>,
    calls: Vec<(String, IncludeKind, String)>,
}

impl MapLoader {
    fn with(files: &[(&str, &str)]) -> Self {
        MapLoader {
            files: files.iter().map(|(n, t)| (n.to_string(), t.to_string())).collect(),
            calls: Vec::new(),
        }
    }
}

impl Loader for MapLoader {
    fn load(&mut self, name: &str, kind: IncludeKind, from: &str) -> Result<Loaded, LoadError> {
        self.calls.push((name.to_string(), kind, from.to_string()));
        let dir = from.rsplit_once('/').map_or("", |(d, _)| d);
        let mut tries = Vec::new();
        if kind == IncludeKind::Quote {
            tries.push(if dir.is_empty() { name.to_string() } else { format!("{dir}/{name}") });
        }
        tries.push(format!("builtin/{name}"));
        tries.push(format!("inc/{name}"));
        for t in tries {
            if let Some(text) = self.files.get(&t) {
                if text == "<unreadable>" {
                    return Err(LoadError::Failed("permission denied".into()));
                }
                return Ok(Loaded { name: t, text: text.clone() });
            }
        }
        Err(LoadError::NotFound)
    }
}

fn run_with(
    main: &str,
    files: &[(&str, &str)],
    options: &Options,
) -> (SourceMap, FileId, Result<Expanded, Vec<Diagnostic>>) {
    let mut map = SourceMap::new();
    let id = map.add("main.p4", main);
    let mut loader = MapLoader::with(files);
    let r = preprocess(&mut map, id, &mut loader, options);
    (map, id, r)
}

fn pre(main: &str) -> String {
    pre_files(main, &[])
}

fn pre_files(main: &str, files: &[(&str, &str)]) -> String {
    match run_with(main, files, &Options::default()) {
        (_, _, Ok(e)) => e.text,
        (map, _, Err(d)) => panic!("{:?}", d.iter().map(|d| d.render(&map)).collect::<Vec<_>>()),
    }
}

/// The rendered errors (and warnings) of a failing run.
fn errors(main: &str, files: &[(&str, &str)]) -> Vec<String> {
    errors_with(main, files, &Options::default())
}

fn errors_with(main: &str, files: &[(&str, &str)], options: &Options) -> Vec<String> {
    match run_with(main, files, options) {
        (_, _, Ok(e)) => panic!("expected errors, got {:?}", e.text),
        (map, _, Err(d)) => d.iter().map(|d| d.render(&map)).collect(),
    }
}

/// `file:line:col` of output byte `off`.
fn place(map: &SourceMap, e: &Expanded, off: usize) -> String {
    let s = e.locate(off).expect("a location");
    let f = map.file(s.file).unwrap();
    let (l, c) = f.line_col(s.start);
    format!("{}:{l}:{c}", f.name)
}

fn ok(main: &str, files: &[(&str, &str)]) -> (SourceMap, FileId, Expanded) {
    let (map, id, r) = run_with(main, files, &Options::default());
    match r {
        Ok(e) => (map, id, e),
        Err(d) => panic!("{:?}", d.iter().map(|d| d.render(&map)).collect::<Vec<_>>()),
    }
}

#[test]
fn plain_text_is_unchanged() {
    let t = "header h_t {\n    bit<8> x;\n}\nconst bit<16> A = 0x10 >> 2;\n\"a string\"";
    assert_eq!(pre(t), t);
}

#[test]
fn comments_become_one_space_and_keep_lines() {
    assert_eq!(pre("a // c\nb /* x */ c\n"), "a  \nb   c\n");
    assert_eq!(pre("a /* one\ntwo\nthree */ b\nc\n"), "a   b\n\n\nc\n");
    assert_eq!(pre("\"// not /* a comment\" x\n"), "\"// not /* a comment\" x\n");
}

#[test]
fn line_continuations_join_lines() {
    assert_eq!(pre("#define A 1 + \\\n 2\nA\n"), "\n\n1 + 2\n");
    assert_eq!(pre("ab\\\ncd\n"), "abcd\n\n");
}

#[test]
fn object_like_macros() {
    assert_eq!(pre("#define W 8\nbit<W> x;\n"), "\nbit<8> x;\n");
    assert_eq!(pre("#define E\n[E]\n"), "\n[]\n");
    // Whole identifiers only, never in strings or comments.
    assert_eq!(pre("#define W 8\nWW W_ xW \"W\" /* W */ W\n"), "\nWW W_ xW \"W\"   8\n");
    // Nested, expanded at use.
    assert_eq!(pre("#define A B + 1\n#define B 2\nA\n"), "\n\n2 + 1\n");
}

#[test]
fn function_like_macros() {
    assert_eq!(
        pre("#define F(a, b) (a * b)\nF(1, 2) F( x , (y, z) )\n"),
        "\n(1 * 2) (x * (y, z))\n"
    );
    assert_eq!(pre("#define F() 7\nF() F\n"), "\n7 F\n");
    assert_eq!(pre("#define F(x) [x]\nF() F( )\n"), "\n[] []\n");
    assert_eq!(pre("#define F(x, y) x|y\nF(,) F(a,)\n"), "\n| a|\n");
    // Not a call without `(`; a space between name and `(` is a call.
    assert_eq!(pre("#define F(x) x\nF + F (3)\n"), "\nF + 3\n");
    // Arguments are expanded before substitution, and the result rescanned.
    assert_eq!(pre("#define ONE 1\n#define F(x) x+x\nF(ONE)\n"), "\n\n1+1\n");
    assert_eq!(pre("#define G(x) <x>\n#define F G\nF(2)\n"), "\n\n<2>\n");
    assert_eq!(pre("#define V(...) f(__VA_ARGS__)\nV(1, 2, 3) V()\n"), "\nf(1, 2, 3) f()\n");
}

#[test]
fn a_call_may_span_lines() {
    assert_eq!(pre("#define F(a, b) a+b\nF(1,\n  2) x\ny\n"), "\n1+2 x\n\ny\n");
}

#[test]
fn no_recursive_self_expansion() {
    assert_eq!(pre("#define X X + 1\nX\n"), "\nX + 1\n");
    assert_eq!(pre("#define A B\n#define B A\nA B\n"), "\n\nA B\n");
    assert_eq!(pre("#define F(x) F(x) + x\nF(F(1))\n"), "\nF(F(1) + 1) + F(1) + 1\n");
    assert_eq!(pre("#define f(a) a*g\n#define g(a) f(a)\nf(2)(9)\n"), "\n\n2*9*g\n");
}

#[test]
fn undef_removes_a_macro() {
    assert_eq!(pre("#define A 1\nA\n#undef A\nA\n"), "\n1\n\nA\n");
}

#[test]
fn stringification_and_pasting() {
    assert_eq!(pre("#define S(x) #x\nS(a  +  \"b\\n\")\n"), "\n\"a + \\\"b\\\\n\\\"\"\n");
    assert_eq!(pre("#define C(a, b) a ## b\nC(x, 1) C(, y) C(z, ) C(,)\n"), "\nx1 y z \n");
    assert_eq!(pre("#define H(n) h_ ## n ## _t\nH(eth)\n"), "\nh_eth_t\n");
    // Operands of ## are not expanded first.
    assert_eq!(pre("#define N 1\n#define C(a) a ## 2 a\nC(N)\n"), "\n\nN2 1\n");
}

#[test]
fn redefinition_warns_identical_does_not() {
    let (_, _, e) = ok("#define A 1\n#define A  1\nA\n", &[]);
    assert!(e.warnings.is_empty());
    let (map, _, e) = ok("#define A 1\n#define A 2\nA\n", &[]);
    assert_eq!(e.text, "\n\n2\n");
    assert_eq!(e.warnings.len(), 1);
    assert_eq!(
        e.warnings[0].render(&map),
        "main.p4:2:9: warning: macro `A` redefined\n#define A 2\n        ^"
    );
}

#[test]
fn conditionals() {
    let t = "#if 1\na\n#else\nb\n#endif\n#ifdef X\nc\n#elif 2 > 1\nd\n#else\ne\n#endif\n";
    assert_eq!(pre(t), "\na\n\n\n\n\n\n\nd\n\n\n\n");
    let t = "#define X\n#ifndef X\na\n#elif defined X && defined(X)\nb\n#endif\n";
    assert_eq!(pre(t), "\n\n\n\nb\n\n");
    // Nested, inactive groups ignore everything but conditionals.
    let t = "#if 0\n#if 1\na\n#else\nb\n#endif\n#bogus\n#else\nc\n#endif\n";
    assert_eq!(pre(t), "\n\n\n\n\n\n\n\nc\n\n");
}

fn eval(expr: &str) -> bool {
    match pre(&format!("#if {expr}\ny\n#else\nn\n#endif\n")).trim() {
        "y" => true,
        "n" => false,
        other => panic!("{other:?}"),
    }
}

#[test]
fn if_expressions_follow_c() {
    for e in [
        "1 + 2 * 3 == 7",
        "(1 + 2) * 3 == 9",
        "0x10 == 16 && 010 == 8 && 0b11 == 3",
        "10 / 3 == 3 && 10 % 3 == 1 && -7 / 2 == -3",
        "1 << 4 == 16 && 256 >> 4 == 16",
        "(6 & 3) == 2 && (6 | 3) == 7 && (6 ^ 3) == 5",
        "!0 && ~0 == -1 && -(-1) == 1 && +2 == 2",
        "1 < 2 && 2 <= 2 && 3 > 2 && 3 >= 3 && 1 != 2",
        "1 || 1 / 0",
        "!(0 && 1 / 0)",
        "UNDEFINED == 0",
        "1 ? 2 : 0",
        "0 ? 1 / 0 : 1",
        "1 | 2 ^ 3 & 4 == 4",
        "10UL == 10",
    ] {
        assert!(eval(e), "{e}");
    }
    for e in ["0", "1 - 1", "2 < 1", "defined NOPE", "0 && 1"] {
        assert!(!eval(e), "{e}");
    }
    assert_eq!(pre("#define N 4\n#if N * 2 == 8 && defined(N)\nok\n#endif\n"), "\n\nok\n\n");
    assert_eq!(pre("#define F(x) (x + 1)\n#if F(2) == 3\nok\n#endif\n"), "\n\nok\n\n");
}

#[test]
fn if_errors_name_the_place() {
    assert_eq!(
        errors("#if 1 / (2 - 2)\n#endif\n", &[]),
        ["main.p4:1:7: error: division by zero in #if\n#if 1 / (2 - 2)\n      ^"]
    );
    assert_eq!(
        errors("#if 1 +\n#endif\n", &[]),
        ["main.p4:1:7: error: expected a value at the end of #if\n#if 1 +\n      ^"]
    );
    assert_eq!(
        errors("#if (1\n#endif\n", &[]),
        ["main.p4:1:6: error: expected `)` at the end of #if\n#if (1\n     ^"]
    );
    assert_eq!(
        errors("#if 1 2\n#endif\n", &[]),
        ["main.p4:1:7: error: unexpected `2` in #if\n#if 1 2\n      ^"]
    );
    assert_eq!(
        errors("#if 8w3\n#endif\n", &[]),
        ["main.p4:1:5: error: invalid integer `8w3` in #if\n#if 8w3\n    ^^^"]
    );
    assert_eq!(
        errors("#if\n#endif\n", &[]),
        ["main.p4:1:2: error: expected a value at the end of #if\n#if\n ^^"]
    );
}

#[test]
fn unbalanced_conditionals_are_errors() {
    assert_eq!(
        errors("a\n#ifdef X\nb\n", &[]),
        ["main.p4:2:2: error: unterminated conditional: no #endif\n#ifdef X\n ^^^^^"]
    );
    assert_eq!(errors("#endif\n", &[]), ["main.p4:1:2: error: #endif without #if\n#endif\n ^^^^^"]);
    assert_eq!(
        errors("  #else\n", &[]),
        ["main.p4:1:4: error: #else without #if\n  #else\n   ^^^^"]
    );
    assert_eq!(
        errors("#if 1\n#else\n#elif 1\n#endif\n", &[]),
        ["main.p4:3:2: error: #elif after #else\n#elif 1\n ^^^^"]
    );
    // An #if left open in an included file is reported there.
    let e = errors("#include \"a.p4\"\n#endif\n", &[("a.p4", "#if 1\n")]);
    assert_eq!(
        e,
        [
            "a.p4:1:2: error: unterminated conditional: no #endif\n#if 1\n ^^",
            "main.p4:2:2: error: #endif without #if\n#endif\n ^^^^^",
        ]
    );
}

#[test]
fn includes_search_and_replace_the_line() {
    let files = [
        ("builtin/core.p4", "error { NoError }\n"),
        ("inc/lib.p4", "const bit<8> L = 1;"),
        ("dir/local.p4", "#include \"sub.p4\"\nlocal\n"),
        ("dir/sub.p4", "sub\n"),
        ("sub.p4", "wrong\n"),
    ];
    let main = "#include <core.p4>\n#include <lib.p4>\n#include \"dir/local.p4\"\nend\n";
    assert_eq!(
        pre_files(main, &files),
        "error { NoError }\nconst bit<8> L = 1;\nsub\nlocal\nend\n"
    );
    let mut map = SourceMap::new();
    let id = map.add("main.p4", main);
    let mut loader = MapLoader::with(&files);
    preprocess(&mut map, id, &mut loader, &Options::default()).unwrap();
    assert_eq!(
        loader.calls,
        [
            ("core.p4".to_string(), IncludeKind::System, "main.p4".to_string()),
            ("lib.p4".to_string(), IncludeKind::System, "main.p4".to_string()),
            ("dir/local.p4".to_string(), IncludeKind::Quote, "main.p4".to_string()),
            ("sub.p4".to_string(), IncludeKind::Quote, "dir/local.p4".to_string()),
        ]
    );
}

#[test]
fn include_guards_and_pragma_once() {
    let files =
        [("g.p4", "#ifndef G\n#define G\nguarded\n#endif\n"), ("o.p4", "#pragma once\nonce\n")];
    let main = "#include \"g.p4\"\n#include \"g.p4\"\n#include \"o.p4\"\n#include \"o.p4\"\n";
    // The second g.p4 gives its four lines empty, the second o.p4 one empty line.
    assert_eq!(pre_files(main, &files), "\n\nguarded\n\n\n\n\n\n\nonce\n\n");
}

#[test]
fn include_errors() {
    assert_eq!(
        errors("#include <nope.p4>\n", &[]),
        ["main.p4:1:10: error: cannot find include file `nope.p4`\n#include <nope.p4>\n         ^"]
    );
    assert_eq!(
        errors("#include \"x.p4\"\n", &[("x.p4", "<unreadable>")]),
        ["main.p4:1:10: error: cannot read include file `x.p4`: permission denied\n\
             #include \"x.p4\"\n         ^^^^^^"]
    );
    assert_eq!(
        errors("#include x\n", &[]),
        ["main.p4:1:2: error: #include expects \"FILE\" or <FILE>\n#include x\n ^^^^^^^"]
    );
}

#[test]
fn include_cycle_is_an_error() {
    let files = [("a.p4", "#include \"b.p4\"\n"), ("b.p4", "\n#include \"a.p4\"\n")];
    let e = errors("#include \"a.p4\"\n", &files);
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with("a.p4:1:10: error: #include cycle: b.p4 -> a.p4 -> b.p4\n"),
        "{}",
        e[0]
    );
    assert!(e[0].ends_with("#include \"b.p4\"\n         ^^^^^^"), "{}", e[0]);
    // A guarded cycle is fine.
    let files = [
        ("a.p4", "#ifndef A\n#define A\n#include \"b.p4\"\na\n#endif\n"),
        ("b.p4", "#include \"a.p4\"\nb\n"),
    ];
    // a.p4 inside b.p4 gives its five lines empty.
    assert_eq!(pre_files("#include \"a.p4\"\n", &files), "\n\n\n\n\n\n\nb\na\n\n");
}

#[test]
fn include_depth_is_bounded() {
    let files: Vec<(String, String)> =
        (0..100).map(|i| (format!("f{i}.p4"), format!("#include \"f{}.p4\"\n", i + 1))).collect();
    let files: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let e = errors("#include \"f0.p4\"\n", &files);
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with("f62.p4:1:10: error: #include nested deeper than 64 files"),
        "{}",
        e[0]
    );
    let options =
        Options { limits: Limits { include_depth: 3, ..Limits::default() }, ..Options::default() };
    let e = errors_with("#include \"f0.p4\"\n", &files, &options);
    assert!(e[0].starts_with("f1.p4:1:10: error: #include nested deeper than 3 files"), "{}", e[0]);
}

#[test]
fn command_line_defines() {
    let options = Options {
        defines: vec![
            ("W".into(), "16".into()),
            ("DEBUG".into(), "1".into()),
            ("F(x)".into(), "x x".into()),
        ],
        ..Options::default()
    };
    let (_, _, r) = run_with("#if DEBUG\nbit<W> F(y)\n#endif\n", &[], &options);
    assert_eq!(r.unwrap().text, "\nbit<16> y y\n\n");
    let options = Options { defines: vec![("1X".into(), "1".into())], ..Options::default() };
    assert_eq!(
        errors_with("", &[], &options),
        ["<command line>:1:2: error: #define needs a macro name\n#define 1X 1\n ^^^^^^"]
    );
}

#[test]
fn error_warning_pragma_and_unknown_directives() {
    let (map, _, e) = ok("#pragma foo bar\n#warning careful  now\nx\n", &[]);
    assert_eq!(e.text, "\n\nx\n");
    assert_eq!(e.warnings.len(), 1);
    assert_eq!(e.warnings[0].severity, Severity::Warning);
    assert_eq!(
        e.warnings[0].render(&map),
        "main.p4:2:2: warning: #warning careful  now\n#warning careful  now\n ^^^^^^^"
    );
    assert_eq!(
        errors("a\n  #  error stop here\n", &[]),
        ["main.p4:2:6: error: #error stop here\n  #  error stop here\n     ^^^^^"]
    );
    assert_eq!(
        errors("#frob\n", &[]),
        ["main.p4:1:2: error: unknown directive #frob\n#frob\n ^^^^"]
    );
    // The null directive is fine.
    assert_eq!(pre("#\nx\n"), "\nx\n");
}

#[test]
fn macro_errors() {
    assert_eq!(
        errors("#define F(x) x\nF(1, 2)\n", &[]),
        ["main.p4:2:1: error: macro `F` takes 1 argument, got 2\nF(1, 2)\n^"]
    );
    assert_eq!(
        errors("#define F(x) x\nF(1\n#define G\n", &[]),
        ["main.p4:2:1: error: unterminated argument list invoking macro `F`\nF(1\n^"]
    );
    assert_eq!(
        errors("#define F(x, x) x\n", &[]),
        ["main.p4:1:14: error: duplicate macro parameter `x`\n#define F(x, x) x\n             ^"]
    );
    assert_eq!(
        errors("#define F(x) # y\n", &[]),
        [
            "main.p4:1:14: error: `#` is not followed by a macro parameter\n#define F(x) # y\n             ^"
        ]
    );
    assert_eq!(
        errors("#define F ## x\n", &[]),
        [
            "main.p4:1:11: error: `##` cannot be at either end of a macro body\n#define F ## x\n          ^^"
        ]
    );
    assert_eq!(errors("/* open\n", &[]), ["main.p4:1:1: error: unterminated comment\n/* open\n^^"]);
}

#[test]
fn locations_map_back_through_includes_and_macros() {
    let files = [("inc/lib.p4", "// lib\n#define M(x) (x + 1)\nlib_tok M(2)\n")];
    let main = "#include <lib.p4>\n  mainTok /* c */ M(  a  )\n";
    let (map, _, e) = ok(main, &files);
    assert_eq!(e.text, " \n\nlib_tok (2 + 1)\n  mainTok   (a + 1)\n");
    let at = |s: &str| e.text.find(s).unwrap();
    assert_eq!(place(&map, &e, at("lib_tok")), "inc/lib.p4:3:1");
    assert_eq!(place(&map, &e, at("lib_tok") + 4), "inc/lib.p4:3:5");
    assert_eq!(place(&map, &e, at("(2")), "inc/lib.p4:3:9");
    assert_eq!(place(&map, &e, at("2 +")), "inc/lib.p4:3:11");
    assert_eq!(place(&map, &e, at("+ 1)")), "inc/lib.p4:3:9");
    assert_eq!(place(&map, &e, at("mainTok")), "main.p4:2:3");
    assert_eq!(place(&map, &e, at("mainTok") + 7), "main.p4:2:10");
    assert_eq!(place(&map, &e, at("(a")), "main.p4:2:19");
    assert_eq!(place(&map, &e, at("a +")), "main.p4:2:23");
    // The macro use is the span of its name.
    let span = e.locate(at("(a")).unwrap();
    let d = Diagnostic::error(Some(span), "here");
    assert_eq!(
        d.render(&map),
        "main.p4:2:19: error: here\n  mainTok /* c */ M(  a  )\n                  ^"
    );
    assert_eq!(e.locate(e.text.len() + 1), None);
    assert!(e.locate(e.text.len()).is_some());
}

#[test]
fn line_directive_renumbers_following_lines() {
    let main = "a\n#line 100 \"gen.p4\"\nb\n\n  c\n#line 7\nd\n";
    let (map, _, e) = ok(main, &[]);
    assert_eq!(e.text, "a\n\nb\n\n  c\n\nd\n");
    let at = |s: &str| e.text.find(s).unwrap();
    assert_eq!(place(&map, &e, at("a")), "main.p4:1:1");
    assert_eq!(place(&map, &e, at("b")), "gen.p4:100:1");
    assert_eq!(place(&map, &e, at("c")), "gen.p4:102:3");
    assert_eq!(place(&map, &e, at("d")), "gen.p4:7:1");
    let d = Diagnostic::error(e.locate(at("c")), "bad c");
    assert_eq!(d.render(&map), "gen.p4:102:3: error: bad c\n  c\n  ^");
    // Errors after #line carry the new place, also past other directives.
    assert_eq!(
        errors("#line 40 \"x.p4\"\n#define A\n\n#error oops\n", &[]),
        ["x.p4:42:2: error: #error oops\n#error oops\n ^^^^^"]
    );
    assert_eq!(
        errors("# 9 \"y.p4\" 1\n#error e\n", &[]),
        ["y.p4:9:2: error: #error e\n#error e\n ^^^^^"]
    );
    assert_eq!(
        errors("#line x\n", &[]),
        ["main.p4:1:7: error: #line needs a line number from 1 to 2147483647\n#line x\n      ^"]
    );
    // An unterminated name ending in a multi-byte character is an error, not a panic.
    assert_eq!(
        errors("#line 3 \"\u{e9}\n", &[]),
        ["main.p4:1:9: error: #line expects a file name in quotes\n#line 3 \"\u{e9}\n        ^^"]
    );
}

#[test]
fn expansion_is_bounded() {
    // 2^40 tokens if unbounded.
    let mut t = String::from("#define A0 x\n");
    for i in 1..=40 {
        t.push_str(&format!("#define A{i} A{} A{}\n", i - 1, i - 1));
    }
    t.push_str("A40\n");
    let limits = Limits { expansions: 1000, ..Limits::default() };
    let e = errors_with(&t, &[], &Options { limits, ..Options::default() });
    assert_eq!(e, ["main.p4:42:1: error: more than 1000 macro expansions\nA40\n^^^"]);
    let limits = Limits { expansion_tokens: 1000, ..Limits::default() };
    let e = errors_with(&t, &[], &Options { limits, ..Options::default() });
    assert_eq!(
        e,
        ["main.p4:42:1: error: macro expansions produce more than 1000 tokens\nA40\n^^^"]
    );
    let options =
        Options { limits: Limits { output_bytes: 10, ..Limits::default() }, ..Options::default() };
    let e = errors_with("0123456789abc\n", &[], &options);
    assert!(
        e[0].starts_with("main.p4:1:1: error: the preprocessor's output exceeds 10 bytes"),
        "{}",
        e[0]
    );
    // Deeply nested arguments and #if parentheses give errors, not stack overflows.
    let deep = format!("#define F(x) x\n{}1{}\n", "F(".repeat(1000), ")".repeat(1000));
    assert!(errors(&deep, &[])[0].contains("nested deeper than 256"));
    let deep = format!("#if {}1{}\n#endif\n", "(".repeat(5000), ")".repeat(5000));
    assert!(errors(&deep, &[])[0].contains("expression nested too deeply"));
    let deep = format!("#if {}1\n#endif\n", "!".repeat(5000));
    assert!(errors(&deep, &[])[0].contains("expression nested too deeply"));
}

#[test]
fn locate_spans_are_in_the_right_file() {
    let (map, main, e) = ok("x\n", &[]);
    assert_eq!(e.locate(0), Some(Span { file: main, start: 0, end: 1 }));
    assert_eq!(map.len(), 1);
}
