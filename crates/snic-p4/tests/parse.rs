//! The parser: each construct group into the AST, precedence, the `>>` and cast ambiguities,
//! error messages with positions, and whole v1model programs (with the built-ins) parsing
//! cleanly.

use snic_p4::ast::*;
use snic_p4::builtin::{Builtins, CORE_P4, V1MODEL_P4};
use snic_p4::lex::TokenKind;
use snic_p4::lex::lex;
use snic_p4::parse::{ParseError, parse, to_diagnostics};
use snic_p4::pre::{Options, preprocess};
use snic_p4::span::SourceMap;

mod common;
use common::SMALL;

fn try_parse(src: &str) -> Result<Program, Vec<ParseError>> {
    let (tokens, errors) = lex(src);
    assert!(errors.is_empty(), "{errors:?}");
    parse(src, &tokens)
}

fn ok(src: &str) -> Program {
    try_parse(src).unwrap_or_else(|e| {
        let e = &e[0];
        panic!("{} at {:?}: {}", e.message, &src[e.start as usize..], src)
    })
}

/// The first error's message and the text at its start.
fn fail(src: &str) -> (String, String) {
    let e = try_parse(src).expect_err("an error").remove(0);
    (e.message, src[e.start as usize..e.end as usize].to_string())
}

/// Preprocess with the built-ins, lex and parse.
fn full(src: &str) -> Program {
    let mut map = SourceMap::new();
    let main = map.add("prog.p4", src);
    let out = preprocess(&mut map, main, &mut Builtins, &Options::default()).unwrap_or_else(|d| {
        panic!("{}", d.iter().map(|d| d.render(&map)).collect::<Vec<_>>().join("\n"))
    });
    let (tokens, errors) = lex(&out.text);
    assert!(errors.is_empty(), "{errors:?}");
    parse(&out.text, &tokens).unwrap_or_else(|e| {
        panic!(
            "{}",
            to_diagnostics(&e, &out).iter().map(|d| d.render(&map)).collect::<Vec<_>>().join("\n")
        )
    })
}

/// An expression as an S-expression: `(+ a (* b c))`.
fn sx(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Int(v) => v.value.to_u128().map_or("big".into(), |v| v.to_string()),
        ExprKind::Bool(b) => b.to_string(),
        ExprKind::Str(s) => format!("{s:?}"),
        ExprKind::Name(n) => n.clone(),
        ExprKind::This => "this".into(),
        ExprKind::Default => "default".into(),
        ExprKind::DontCare => "_".into(),
        ExprKind::Member { base, member } => format!("{}.{}", sx(base), member.text),
        ExprKind::Index { base, index } => format!("{}[{}]", sx(base), sx(index)),
        ExprKind::Slice { base, hi, lo } => format!("{}[{}:{}]", sx(base), sx(hi), sx(lo)),
        ExprKind::Call { callee, type_args, args } => {
            let ta = if type_args.is_empty() {
                String::new()
            } else {
                format!("<{}>", type_args.iter().map(ty).collect::<Vec<_>>().join(", "))
            };
            let args = args
                .iter()
                .map(|a| match &a.name {
                    Some(n) => format!("{}={}", n.text, sx(&a.value)),
                    None => sx(&a.value),
                })
                .collect::<Vec<_>>()
                .join(", ");
            format!("{}{ta}({args})", sx(callee))
        }
        ExprKind::Cast { ty: t, expr } => format!("(cast {} {})", ty(t), sx(expr)),
        ExprKind::Unary { op, expr } => format!("({op:?} {})", sx(expr)),
        ExprKind::Binary { op, lhs, rhs } => format!("({op:?} {} {})", sx(lhs), sx(rhs)),
        ExprKind::Ternary { cond, then, els } => {
            format!("(? {} {} {})", sx(cond), sx(then), sx(els))
        }
        ExprKind::List(items) => {
            format!("{{{}}}", items.iter().map(sx).collect::<Vec<_>>().join(", "))
        }
        ExprKind::StructInit(fields) => format!(
            "{{{}}}",
            fields
                .iter()
                .map(|(n, e)| format!("{} = {}", n.text, sx(e)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        ExprKind::Type(t) => ty(t),
    }
}

/// A type as text.
fn ty(t: &Type) -> String {
    match &t.kind {
        TypeKind::Bits { signed, width } => {
            let base = if *signed { "int" } else { "bit" };
            match width {
                Some(w) => format!("{base}<{}>", sx(w)),
                None => base.to_string(),
            }
        }
        TypeKind::Varbit(w) => format!("varbit<{}>", sx(w)),
        TypeKind::Bool => "bool".into(),
        TypeKind::Error => "error".into(),
        TypeKind::String => "string".into(),
        TypeKind::Void => "void".into(),
        TypeKind::MatchKind => "match_kind".into(),
        TypeKind::DontCare => "_".into(),
        TypeKind::Named { name, args } if args.is_empty() => name.text.clone(),
        TypeKind::Named { name, args } => {
            format!("{}<{}>", name.text, args.iter().map(ty).collect::<Vec<_>>().join(", "))
        }
        TypeKind::Stack { elem, size } => format!("{}[{}]", ty(elem), sx(size)),
        TypeKind::Tuple(ts) => {
            format!("tuple<{}>", ts.iter().map(ty).collect::<Vec<_>>().join(", "))
        }
        TypeKind::List(t) => format!("list<{}>", ty(t)),
    }
}

/// The expression `e` parsed inside a function body, as an S-expression.
fn expr(e: &str) -> String {
    let src = format!("void f() {{ x = {e}; }}");
    let p = ok(&src);
    let DeclKind::Function { body, .. } = &p.decls[0].kind else { panic!() };
    let StmtKind::Assign { rhs, .. } = &body.stmts[0].kind else { panic!("{:?}", body.stmts[0]) };
    sx(rhs)
}

/// The statements of `body` inside a function.
fn stmts(body: &str) -> Vec<Stmt> {
    let src = format!("void f() {{ {body} }}");
    let p = ok(&src);
    let DeclKind::Function { body, .. } = &p.decls[0].kind else { panic!() };
    body.stmts.clone()
}

// ---- declarations ----

#[test]
fn headers_structs_and_unions_with_annotated_fields() {
    let p = ok(r#"
        header eth_t { bit<48> dst; @name("s") bit<48> src; bit<16> type; }
        header_union ip_t { ipv4_t v4; ipv6_t v6; }
        @metadata struct m_t<T> { T t; varbit<320> opts; h_t[4] stack; bit flag; int<8> i; }
    "#);
    let DeclKind::Struct { kind, name, fields, .. } = &p.decls[0].kind else { panic!() };
    assert_eq!((*kind, name.text.as_str(), fields.len()), (StructKind::Header, "eth_t", 3));
    assert_eq!(fields[1].annotations[0].name.text, "name");
    assert!(matches!(&fields[1].annotations[0].body[0].kind, TokenKind::Str(s) if s == "s"));
    assert_eq!(fields[2].name.text, "type");
    assert_eq!(ty(&fields[0].ty), "bit<48>");
    let DeclKind::Struct { kind, .. } = &p.decls[1].kind else { panic!() };
    assert_eq!(*kind, StructKind::HeaderUnion);
    let d = &p.decls[2];
    assert_eq!(d.annotations[0].name.text, "metadata");
    let DeclKind::Struct { type_params, fields, .. } = &d.kind else { panic!() };
    assert_eq!(type_params[0].text, "T");
    let tys: Vec<_> = fields.iter().map(|f| ty(&f.ty)).collect();
    assert_eq!(tys, ["T", "varbit<320>", "h_t[4]", "bit", "int<8>"]);
}

#[test]
fn enums_errors_match_kinds_typedefs_types_and_constants() {
    let p = ok(r#"
        enum Color { Red, Green, }
        enum bit<8> E { A = 1, B = 0x2 }
        error { Oops, Bad }
        match_kind { exact, lpm }
        typedef bit<9> port_t;
        type bit<32> id_t;
        const bit<16> ETH_IPV4 = 16w0x800;
        const tuple<bit<8>, bool> T = { 1, true };
    "#);
    let DeclKind::Enum { name, repr, members } = &p.decls[0].kind else { panic!() };
    assert_eq!((name.text.as_str(), repr.is_none(), members.len()), ("Color", true, 2));
    let DeclKind::Enum { repr, members, .. } = &p.decls[1].kind else { panic!() };
    assert_eq!(ty(repr.as_ref().unwrap()), "bit<8>");
    assert_eq!(sx(members[1].value.as_ref().unwrap()), "2");
    let DeclKind::Error(names) = &p.decls[2].kind else { panic!() };
    assert_eq!(names.len(), 2);
    assert!(matches!(&p.decls[3].kind, DeclKind::MatchKind(n) if n[1].text == "lpm"));
    assert!(matches!(&p.decls[4].kind, DeclKind::Typedef { name, .. } if name.text == "port_t"));
    assert!(matches!(&p.decls[5].kind, DeclKind::NewType { name, .. } if name.text == "id_t"));
    let DeclKind::Const { ty: t, value, .. } = &p.decls[6].kind else { panic!() };
    assert_eq!((ty(t).as_str(), sx(value).as_str()), ("bit<16>", "2048"));
    let DeclKind::Const { ty: t, value, .. } = &p.decls[7].kind else { panic!() };
    assert_eq!((ty(t).as_str(), sx(value).as_str()), ("tuple<bit<8>, bool>", "{1, true}"));
}

#[test]
fn externs_functions_objects_constructors_overloads_and_generics() {
    let p = ok(r#"
        extern void f<T>(in T x, out bit<8> y);
        extern Thing<T, I> {
            Thing(bit<32> size);
            Thing();
            @noSideEffects void read(out T result, in I index);
            void read(out T result);
            abstract T compute(in T x);
            T get<D>(in D d);
        }
        extern plain { plain(); }
    "#);
    let DeclKind::ExternFunction(proto) = &p.decls[0].kind else { panic!() };
    assert_eq!(proto.name.text, "f");
    assert_eq!(proto.type_params[0].text, "T");
    assert_eq!(proto.params[0].direction, Direction::In);
    assert_eq!(proto.params[1].direction, Direction::Out);
    let DeclKind::ExternObject { name, type_params, methods } = &p.decls[1].kind else { panic!() };
    assert_eq!(name.text, "Thing");
    assert_eq!(type_params.len(), 2);
    let kinds: Vec<_> = methods.iter().map(|m| (m.kind, m.proto.name.text.as_str())).collect();
    assert_eq!(
        kinds,
        [
            (MethodKind::Constructor, "Thing"),
            (MethodKind::Constructor, "Thing"),
            (MethodKind::Method, "read"),
            (MethodKind::Method, "read"),
            (MethodKind::Abstract, "compute"),
            (MethodKind::Method, "get"),
        ]
    );
    assert_eq!(methods[2].annotations[0].name.text, "noSideEffects");
    assert!(
        matches!(&p.decls[2].kind, DeclKind::ExternObject { methods, .. } if methods.len() == 1)
    );
}

#[test]
fn parser_control_package_types_and_instantiation() {
    let p = ok(r#"
        parser Parser<H, M>(packet_in b, out H parsedHdr, inout M meta);
        control Ingress<H>(inout H hdr, bit<8> x = 3);
        package Switch<H>(Parser<H, bit<8>> p, Ingress<H> ig);
        control C(inout h_t h)(bit<32> size, bool flag) { apply { } }
        Switch(P(), C(1024, true)) main;
        @name("x") register<bit<32>, bit<8>>(1024) r;
    "#);
    let DeclKind::ParserType(proto) = &p.decls[0].kind else { panic!() };
    assert_eq!(proto.params.len(), 3);
    let DeclKind::ControlType(proto) = &p.decls[1].kind else { panic!() };
    assert_eq!(proto.params[1].direction, Direction::None);
    assert_eq!(sx(proto.params[1].default.as_ref().unwrap()), "3");
    let DeclKind::Package(proto) = &p.decls[2].kind else { panic!() };
    assert_eq!(ty(&proto.params[0].ty), "Parser<H, bit<8>>");
    let DeclKind::Control { ctor_params, .. } = &p.decls[3].kind else { panic!() };
    assert_eq!(ctor_params.len(), 2);
    let DeclKind::Instance { ty: t, args, name, .. } = &p.decls[4].kind else { panic!() };
    assert_eq!((ty(t).as_str(), name.text.as_str()), ("Switch", "main"));
    assert_eq!(sx(&args[1].value), "C(1024, true)");
    let d = &p.decls[5];
    assert_eq!(d.annotations[0].name.text, "name");
    let DeclKind::Instance { ty: t, .. } = &d.kind else { panic!() };
    assert_eq!(ty(t), "register<bit<32>, bit<8>>");
}

#[test]
fn actions_functions_and_pragmas_at_top_level() {
    let p = ok(r#"
        @pragma foo bar 1
        @noWarn("unused") action NoAction() {}
        action set(inout bit<8> x, bit<8> v) { x = v; }
        bit<8> add1(in bit<8> x) { return x + 1; }
        void nothing() { }
    "#);
    let d = &p.decls[0];
    assert_eq!(d.annotations.len(), 2);
    assert_eq!(d.annotations[0].name.text, "pragma");
    assert_eq!(d.annotations[0].body.len(), 3);
    assert!(matches!(&d.kind, DeclKind::Action { name, .. } if name.text == "NoAction"));
    let DeclKind::Action { params, .. } = &p.decls[1].kind else { panic!() };
    assert_eq!((params[0].direction, params[1].direction), (Direction::InOut, Direction::None));
    let DeclKind::Function { proto, body } = &p.decls[2].kind else { panic!() };
    assert_eq!(ty(&proto.ret), "bit<8>");
    assert!(matches!(&body.stmts[0].kind, StmtKind::Return(Some(e)) if sx(e) == "(Add x 1)"));
    assert!(
        matches!(&p.decls[3].kind, DeclKind::Function { proto, .. } if proto.name.text == "nothing")
    );
}

// ---- types ----

#[test]
fn types_with_nested_arguments_expression_widths_and_dont_care() {
    let p = ok(r#"
        typedef register<bit<32>, bit<8>> r_t;
        typedef tuple<bit<8>, tuple<bool, int>> t_t;
        typedef bit<(W + 1)> w_t;
        typedef Foo<_, bit<8>> f_t;
        typedef h_t[4] s_t;
        typedef list<bit<8>> l_t;
        typedef .Top top_t;
        typedef bit<W> v_t;
    "#);
    let tys: Vec<_> = p
        .decls
        .iter()
        .map(|d| match &d.kind {
            DeclKind::Typedef { ty: t, .. } => ty(t),
            _ => panic!(),
        })
        .collect();
    assert_eq!(
        tys,
        [
            "register<bit<32>, bit<8>>",
            "tuple<bit<8>, tuple<bool, int>>",
            "bit<(Add W 1)>",
            "Foo<_, bit<8>>",
            "h_t[4]",
            "list<bit<8>>",
            "Top",
            "bit<W>",
        ]
    );
}

// ---- expressions ----

#[test]
fn precedence_follows_the_p4_table() {
    assert_eq!(expr("a + b * c"), "(Add a (Mul b c))");
    assert_eq!(expr("a * b + c"), "(Add (Mul a b) c)");
    assert_eq!(expr("a << 2 + 1"), "(Shl a (Add 2 1))");
    // Unlike C: `&` binds tighter than `==`.
    assert_eq!(expr("x == y & z"), "(Eq x (BitAnd y z))");
    assert_eq!(expr("a | b ^ c & d"), "(BitOr a (BitXor b (BitAnd c d)))");
    assert_eq!(expr("a < b | c"), "(Lt a (BitOr b c))");
    assert_eq!(expr("a == b < c"), "(Eq a (Lt b c))");
    assert_eq!(expr("a || b && c == d"), "(Or a (And b (Eq c d)))");
    assert_eq!(expr("a - b - c"), "(Sub (Sub a b) c)");
    assert_eq!(expr("a ++ b + c"), "(Add (Concat a b) c)");
    assert_eq!(expr("a |+| b |-| c * d"), "(SubSat (AddSat a b) (Mul c d))");
    assert_eq!(expr("a & b << 1"), "(BitAnd a (Shl b 1))");
    assert_eq!(expr("a ? b : c ? d : e"), "(? a b (? c d e))");
    assert_eq!(expr("a || b ? c : d"), "(? (Or a b) c d)");
    assert_eq!(expr("-a * !b"), "(Mul (Neg a) (Not b))");
    assert_eq!(expr("~a.b[1]"), "(BitNot a.b[1])");
    assert_eq!(expr("a % b / c"), "(Div (Mod a b) c)");
    assert_eq!(expr("a >= b != c <= d"), "(Ne (Ge a b) (Le c d))");
}

#[test]
fn right_shift_is_two_adjacent_gt_and_closes_generics() {
    assert_eq!(expr("a >> 2"), "(Shr a 2)");
    assert_eq!(expr("a >> 2 >> 1"), "(Shr (Shr a 2) 1)");
    // Not adjacent: a comparison whose right operand is missing.
    assert_eq!(fail("const bit<8> x = a > > 2;").0, "expected an expression, found `>`");
    assert_eq!(expr("a > b"), "(Gt a b)");
    assert_eq!(expr("f<bit<8>>(x)"), "f<bit<8>>(x)");
    assert_eq!(expr("f<register<bit<8>, bit<4>>>(x)"), "f<register<bit<8>, bit<4>>>(x)");
    assert_eq!(expr("a < b"), "(Lt a b)");
    assert_eq!(expr("a < b && c > d"), "(And (Lt a b) (Gt c d))");
    let s = stmts("x >>= 2; y <<= 1; z |+|= 3;");
    let ops: Vec<_> = s
        .iter()
        .map(|s| match &s.kind {
            StmtKind::Assign { op, .. } => *op,
            _ => panic!(),
        })
        .collect();
    assert_eq!(ops, [Some(BinOp::Shr), Some(BinOp::Shl), Some(BinOp::AddSat)]);
}

#[test]
fn casts_and_parenthesised_expressions() {
    assert_eq!(expr("(bit<8>) x"), "(cast bit<8> x)");
    assert_eq!(expr("(bit<8>) x + 1"), "(Add (cast bit<8> x) 1)");
    assert_eq!(expr("(int<8>) -x"), "(cast int<8> (Neg x))");
    assert_eq!(expr("(bool) 1"), "(cast bool 1)");
    assert_eq!(expr("(port_t) x"), "(cast port_t x)");
    assert_eq!(expr("(port_t) (x + 1)"), "(cast port_t (Add x 1))");
    assert_eq!(expr("(bit<16>)(bit<8>) x"), "(cast bit<16> (cast bit<8> x))");
    assert_eq!(expr("(a) - b"), "(Sub a b)");
    assert_eq!(expr("(a) + b"), "(Add a b)");
    assert_eq!(expr("(a + b) * c"), "(Mul (Add a b) c)");
    assert_eq!(expr("(a)"), "a");
    assert_eq!(expr("(a).b"), "a.b");
}

#[test]
fn primaries_members_slices_calls_lists_and_struct_initialisers() {
    assert_eq!(expr("h.eth.dst[47:40]"), "h.eth.dst[47:40]");
    assert_eq!(expr("h.stack[2].f"), "h.stack[2].f");
    assert_eq!(expr("t.apply().hit"), "t.apply().hit");
    assert_eq!(expr("f(a = 1, b = x)"), "f(a=1, b=x)");
    assert_eq!(expr("f(_, 2)"), "f(_, 2)");
    assert_eq!(expr("{a, b, }"), "{a, b}");
    assert_eq!(expr("{}"), "{}");
    assert_eq!(expr("{ f = 1, g = 2 }"), "{f = 1, g = 2}");
    assert_eq!(expr("error.NoMatch"), "error.NoMatch");
    assert_eq!(expr("T.minSizeInBits()"), "T.minSizeInBits()");
    assert_eq!(expr("h.minSizeInBytes()"), "h.minSizeInBytes()");
    assert_eq!(expr("bit<8>.maxSizeInBits()"), "bit<8>.maxSizeInBits()");
    assert_eq!(expr("this"), "this");
    assert_eq!(expr("\"str\""), "\"str\"");
    assert_eq!(expr("true != false"), "(Ne true false)");
    assert_eq!(expr("8w255"), "255");
    assert_eq!(expr(".top"), "top");
    assert_eq!(expr("a.b.c<T>(x).d"), "a.b.c<T>(x).d");
}

// ---- statements ----

#[test]
fn statements_of_every_kind() {
    let s = stmts(
        r#"
        bit<8> x = 1;
        h_t[4] hs;
        const bit<8> C = 2;
        counter(32, CounterType.packets) c;
        x = x + 1;
        hs[0].f = 3;
        h.f[7:0] = 1;
        f<bit<8>>(x);
        if (x == 1) { exit; } else if (x == 2) return; else { return 3; }
        ;
        @name("blk") { x = 2; }
        switch (t.apply().action_run) { a: { x = 1; } b: c: { } default: { } }
        switch (x) { 1: { } 2: 3: { } }
        "#,
    );
    let kinds: Vec<&str> = s
        .iter()
        .map(|s| match &s.kind {
            StmtKind::Decl(d) => match d.kind {
                DeclKind::Var { .. } => "var",
                DeclKind::Const { .. } => "const",
                DeclKind::Instance { .. } => "instance",
                _ => "decl?",
            },
            StmtKind::Assign { .. } => "assign",
            StmtKind::Call(_) => "call",
            StmtKind::If { .. } => "if",
            StmtKind::Empty => "empty",
            StmtKind::Block(_) => "block",
            StmtKind::Switch { .. } => "switch",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "var", "var", "const", "instance", "assign", "assign", "assign", "call", "if", "empty",
            "block", "switch", "switch"
        ]
    );
    let StmtKind::Decl(d) = &s[1].kind else { panic!() };
    assert!(matches!(&d.kind, DeclKind::Var { ty: t, init: None, .. } if ty(t) == "h_t[4]"));
    let StmtKind::If { els: Some(els), .. } = &s[8].kind else { panic!() };
    let StmtKind::If { then, els: Some(last), .. } = &els.kind else { panic!() };
    assert_eq!(then.kind, StmtKind::Return(None));
    assert!(
        matches!(&last.kind, StmtKind::Block(b) if matches!(b.stmts[0].kind, StmtKind::Return(Some(_))))
    );
    assert_eq!(s[10].annotations[0].name.text, "name");
    let StmtKind::Switch { expr: e, cases } = &s[11].kind else { panic!() };
    assert_eq!(sx(e), "t.apply().action_run");
    let labels: Vec<_> = cases.iter().map(|c| (sx(&c.label), c.body.is_some())).collect();
    assert_eq!(
        labels,
        [
            ("a".to_string(), true),
            ("b".to_string(), false),
            ("c".to_string(), true),
            ("default".to_string(), true)
        ]
    );
}

// ---- parsers ----

#[test]
fn parser_states_selects_value_sets_and_sub_parsers() {
    let p = ok(r#"
        parser P(packet_in pkt, out h_t h) {
            value_set<bit<16>>(4) vs;
            Sub() sub;
            bit<8> n = 0;
            state start {
                pkt.extract(h.eth);
                transition select(h.eth.type, h.x) {
                    (1, 2): s2;
                    (_, 0x800 &&& 0xfff): s3;
                    (1..5, default): s4;
                    vs: s5;
                    default: accept;
                }
            }
            state s2 { sub.apply(pkt, h); transition s3; }
            state s3 { transition select(h.x) { 1..5: s4; 0 &&& 1: accept; _: reject; } }
            @name("last") state s4 { }
        }
    "#);
    let DeclKind::Parser { locals, states, .. } = &p.decls[0].kind else { panic!() };
    assert!(matches!(&locals[0].kind, DeclKind::ValueSet { ty: t, size, name }
        if ty(t) == "bit<16>" && sx(size) == "4" && name.text == "vs"));
    assert!(matches!(&locals[1].kind, DeclKind::Instance { name, .. } if name.text == "sub"));
    assert!(matches!(&locals[2].kind, DeclKind::Var { .. }));
    assert_eq!(states.len(), 4);
    let Some(Transition::Select { exprs, cases, .. }) = &states[0].transition else { panic!() };
    assert_eq!(exprs.len(), 2);
    let cases: Vec<_> = cases
        .iter()
        .map(|c| (c.keyset.iter().map(sx).collect::<Vec<_>>().join(" "), c.next.text.as_str()))
        .collect();
    assert_eq!(
        cases,
        [
            ("1 2".to_string(), "s2"),
            ("_ (Mask 2048 4095)".to_string(), "s3"),
            ("(Range 1 5) default".to_string(), "s4"),
            ("vs".to_string(), "s5"),
            ("default".to_string(), "accept"),
        ]
    );
    assert!(matches!(&states[1].transition, Some(Transition::Goto(n)) if n.text == "s3"));
    assert!(matches!(&states[1].stmts[0].kind, StmtKind::Call(e) if sx(e) == "sub.apply(pkt, h)"));
    assert_eq!(states[3].annotations[0].name.text, "name");
    assert!(states[3].transition.is_none());
}

// ---- controls and tables ----

#[test]
fn controls_with_actions_tables_and_apply() {
    let p = ok(r#"
        control C(inout h_t h, inout sm_t sm) {
            direct_counter(CounterType.packets) dc;
            action drop() { mark_to_drop(sm); }
            action fwd(bit<9> port, in bit<8> x) { sm.egress_spec = port; }
            table t {
                key = { h.ip.dst : lpm @name("dst"); h.ip.proto : exact; h.x & 0xf : ternary; }
                actions = { fwd; @defaultonly drop; fwd(1); }
                const default_action = fwd(1, 2);
                const entries = {
                    (0x01, _) : fwd(1, 2);
                    priority = 10 : (2, 3 &&& 4) : drop();
                    5 : drop;
                }
                size = 1024;
                implementation = action_profile(32w128);
                counters = dc;
                meters = m;
                support_timeout = true;
            }
            apply { if (!t.apply().hit) { drop(); } }
        }
    "#);
    let DeclKind::Control { locals, apply, .. } = &p.decls[0].kind else { panic!() };
    assert_eq!(locals.len(), 4);
    let DeclKind::Table { name, props } = &locals[3].kind else { panic!() };
    assert_eq!(name.text, "t");
    let TablePropKind::Key(keys) = &props[0].kind else { panic!() };
    let keys: Vec<_> = keys.iter().map(|k| (sx(&k.expr), k.match_kind.text.as_str())).collect();
    assert_eq!(
        keys,
        [
            ("h.ip.dst".to_string(), "lpm"),
            ("h.ip.proto".to_string(), "exact"),
            ("(BitAnd h.x 15)".to_string(), "ternary")
        ]
    );
    let TablePropKind::Actions(acts) = &props[1].kind else { panic!() };
    assert_eq!(acts.iter().map(|a| sx(&a.expr)).collect::<Vec<_>>(), ["fwd", "drop", "fwd(1)"]);
    assert_eq!(acts[1].annotations[0].name.text, "defaultonly");
    assert!(props[2].is_const);
    assert!(matches!(&props[2].kind, TablePropKind::Other { name, value }
        if name.text == "default_action" && sx(value) == "fwd(1, 2)"));
    let TablePropKind::Entries(entries) = &props[3].kind else { panic!() };
    assert!(props[3].is_const);
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[0].keyset.iter().map(sx).collect::<Vec<_>>(), ["1", "_"]);
    assert_eq!(sx(entries[1].priority.as_ref().unwrap()), "10");
    assert_eq!(entries[1].keyset.iter().map(sx).collect::<Vec<_>>(), ["2", "(Mask 3 4)"]);
    assert_eq!(sx(&entries[2].action), "drop");
    let others: Vec<_> = props[4..]
        .iter()
        .map(|p| match &p.kind {
            TablePropKind::Other { name, value } => format!("{}={}", name.text, sx(value)),
            _ => panic!(),
        })
        .collect();
    assert_eq!(
        others,
        [
            "size=1024",
            "implementation=action_profile(128)",
            "counters=dc",
            "meters=m",
            "support_timeout=true"
        ]
    );
    assert!(
        matches!(&apply.stmts[0].kind, StmtKind::If { cond, .. } if sx(cond) == "(Not t.apply().hit)")
    );
}

// ---- positions ----

#[test]
fn nodes_keep_their_byte_ranges() {
    let src = "const bit<8> X = a + b;";
    let p = ok(src);
    let d = &p.decls[0];
    assert_eq!((d.loc.start, d.loc.end), (0, src.len() as u32));
    let DeclKind::Const { ty: t, name, value } = &d.kind else { panic!() };
    assert_eq!(&src[t.loc.start as usize..t.loc.end as usize], "bit<8>");
    assert_eq!(&src[name.loc.start as usize..name.loc.end as usize], "X");
    assert_eq!(&src[value.loc.start as usize..value.loc.end as usize], "a + b");
}

// ---- errors ----

#[test]
fn errors_say_what_was_expected_and_where() {
    assert_eq!(
        fail("header h { bit<8> x }"),
        ("expected `;`, found `}`".to_string(), "}".to_string())
    );
    assert_eq!(
        fail("control C() { apply { x = ; } }"),
        ("expected an expression, found `;`".to_string(), ";".to_string())
    );
    assert_eq!(fail("struct { }"), ("expected a name, found `{`".to_string(), "{".to_string()));
    assert_eq!(
        fail("control C() { apply { f(1) } }"),
        ("expected `;`, found `}`".to_string(), "}".to_string())
    );
    assert_eq!(fail("parser P() { state s { transition select(x) { 1 s; } } }").1, "s");
    let e = try_parse("header h { bit<8> x }").unwrap_err().remove(0);
    assert_eq!(e.to_string(), "expected `;`, found `}` (bytes 20..21)");
    assert_eq!(fail("control C() { }").0, "expected `apply`, found `}`");
    assert_eq!(fail("action a() {").0, "expected `}`, found end of input");
    assert_eq!(fail("void f() { x + 1; }").0, "expected `=` or a call, found `;`");
    assert_eq!(fail("typedef bit<8 t;").0, "expected `>`, found identifier `t`");
    assert_eq!(fail("@name(\"x\"").0, "expected `)`, found end of input");
}

#[test]
fn errors_map_back_to_file_line_and_column() {
    let mut map = SourceMap::new();
    let main = map.add("prog.p4", "#include <core.p4>\nheader h_t {\n    bit<8> x\n}\n");
    let out = preprocess(&mut map, main, &mut Builtins, &Options::default()).unwrap();
    let (tokens, _) = lex(&out.text);
    let errs = parse(&out.text, &tokens).unwrap_err();
    let d = to_diagnostics(&errs, &out);
    assert_eq!(d[0].render(&map), "prog.p4:4:1: error: expected `;`, found `}`\n}\n^");
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    for (open, close) in [("(", ")"), ("{", "}"), ("-", ""), ("!", "")] {
        let src = format!("const bit<8> x = {}1{};", open.repeat(5000), close.repeat(5000));
        let (msg, _) = fail(&src);
        assert!(msg.contains("nesting deeper"), "{msg}");
    }
    let src = format!("void f() {}{};", "{".repeat(5000), "}".repeat(5000));
    assert!(fail(&src).0.contains("nesting deeper"));
    let src = format!("void f() {{ {} x = 1; }}", "if (a) ".repeat(5000));
    assert!(fail(&src).0.contains("nesting deeper"));
    let src = format!("typedef {}bit<8>{} t;", "tuple<".repeat(5000), ">".repeat(5000));
    assert!(fail(&src).0.contains("nesting deeper"));
    let src = format!("void f() {{ {} x = 1; }}", "for (;;) ".repeat(5000));
    assert!(fail(&src).0.contains("nesting deeper"));
    let src = format!("const bit<8> x = {}1;", "a ? b : ".repeat(5000));
    assert!(fail(&src).0.contains("nesting deeper"));
    // Moderate nesting is fine.
    ok(&format!("const bit<8> x = {}1{};", "(".repeat(90), ")".repeat(90)));
}

// ---- whole programs ----

#[test]
fn the_built_in_core_and_v1model_parse() {
    let strip = |s: &str| {
        s.lines().filter(|l| !l.trim_start().starts_with('#')).collect::<Vec<_>>().join("\n")
    };
    let core = ok(&strip(CORE_P4));
    assert_eq!(core.decls.len(), 8);
    let v1 = full("#include <v1model.p4>\n");
    let names: Vec<_> = v1
        .decls
        .iter()
        .filter_map(|d| match &d.kind {
            DeclKind::Package(p) => Some(p.name.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(names, ["V1Switch"]);
    let _ = V1MODEL_P4;
}

/// An IPv4 router: lpm table, checksum verify and update, an MPLS header stack, select with
/// masks and ranges, switch on action_run, registers, counters, casts and slices.
const ROUTER: &str = r#"#include <core.p4>
#include <v1model.p4>

const bit<16> TYPE_IPV4 = 0x800;
const bit<16> TYPE_MPLS = 0x8847;
#define MAX_LABELS 4

typedef bit<32> ip4Addr_t;
typedef bit<48> macAddr_t;

header ethernet_t { macAddr_t dstAddr; macAddr_t srcAddr; bit<16> etherType; }
header mpls_t { bit<20> label; bit<3> tc; bit<1> bos; bit<8> ttl; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> totalLen;
    bit<16> identification; bit<3> flags; bit<13> fragOffset;
    bit<8> ttl; bit<8> protocol; bit<16> hdrChecksum;
    ip4Addr_t srcAddr; ip4Addr_t dstAddr;
}
struct metadata { bit<32> nhop; @name("seen") bool seen; }
struct headers { ethernet_t ethernet; mpls_t[MAX_LABELS] mpls; ipv4_t ipv4; }

enum bit<8> Proto { TCP = 6, UDP = 17 }

parser MyParser(packet_in packet, out headers hdr, inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            TYPE_IPV4: parse_ipv4;
            TYPE_MPLS: parse_mpls;
            0x8100 &&& 0xefff: accept;
            0x0000 .. 0x05dc: accept;
            default: accept;
        }
    }
    state parse_mpls {
        packet.extract(hdr.mpls.next);
        transition select(hdr.mpls.last.bos) { 1w1: parse_ipv4; default: parse_mpls; }
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        verify(hdr.ipv4.ihl >= 5, error.NoMatch);
        transition select(hdr.ipv4.fragOffset, hdr.ipv4.protocol) {
            (0, (bit<8>) Proto.TCP): accept;
            (_, _): accept;
        }
    }
}

control MyVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply {
        verify_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

control MyIngress(inout headers hdr, inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    counter(512, CounterType.packets_and_bytes) port_counter;
    register<bit<32>, bit<9>>(512) last_seen;
    direct_counter(CounterType.packets) lpm_counter;
    bit<32> tmp;

    action drop() { mark_to_drop(standard_metadata); }
    action ipv4_forward(macAddr_t dstAddr, PortId_t port) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = dstAddr;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
    action pop_mpls() {
        hdr.mpls.pop_front(1);
        hdr.ethernet.etherType = TYPE_IPV4;
    }

    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr: lpm; hdr.ipv4.protocol: ternary @name("proto"); }
        actions = { ipv4_forward; drop; @defaultonly NoAction; }
        size = 1024;
        counters = lpm_counter;
        default_action = drop();
    }
    table fixed {
        key = { hdr.ethernet.etherType: exact; }
        actions = { pop_mpls; NoAction; }
        const entries = {
            TYPE_MPLS: pop_mpls();
            priority = 1: 0x0800 &&& 0xffff: NoAction();
        }
    }

    apply {
        port_counter.count((bit<32>) standard_metadata.ingress_port);
        last_seen.read(tmp, standard_metadata.ingress_port);
        last_seen.write(standard_metadata.ingress_port, tmp |+| 1);
        if (hdr.mpls[0].isValid()) {
            fixed.apply();
        }
        if (hdr.ipv4.isValid() && hdr.ipv4.ttl > 1) {
            switch (ipv4_lpm.apply().action_run) {
                ipv4_forward: { meta.nhop = hdr.ipv4.dstAddr[31:24] ++ 24w0; }
                drop: { exit; }
                default: { }
            }
        } else if (!hdr.ipv4.isValid()) {
            drop();
        }
        bit<16> h = hdr.ipv4.srcAddr[15:0] ^ (bit<16>) (hdr.ipv4.dstAddr >> 16);
        meta.seen = h & 0xff == 0 ? true : false;
    }
}

control MyEgress(inout headers hdr, inout metadata meta,
                 inout standard_metadata_t standard_metadata) {
    apply { }
}

control MyComputeChecksum(inout headers hdr, inout metadata meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.mpls);
        packet.emit(hdr.ipv4);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
"#;

#[test]
fn the_builtin_test_program_parses_with_the_built_ins() {
    let p = full(SMALL);
    let DeclKind::Instance { ty: t, args, name, .. } = &p.decls.last().unwrap().kind else {
        panic!()
    };
    assert_eq!((ty(t).as_str(), name.text.as_str(), args.len()), ("V1Switch", "main", 6));
}

#[test]
fn an_ipv4_router_parses_with_the_built_ins() {
    let p = full(ROUTER);
    let ingress = p
        .decls
        .iter()
        .find_map(|d| match &d.kind {
            DeclKind::Control { proto, locals, apply, .. } if proto.name.text == "MyIngress" => {
                Some((locals, apply))
            }
            _ => None,
        })
        .expect("MyIngress");
    let (locals, apply) = ingress;
    assert_eq!(locals.len(), 9);
    let StmtKind::If { then, .. } = &apply.stmts[4].kind else { panic!("{:?}", apply.stmts[4]) };
    let StmtKind::Block(b) = &then.kind else { panic!() };
    let StmtKind::Switch { expr: e, cases } = &b.stmts[0].kind else { panic!() };
    assert_eq!(sx(e), "ipv4_lpm.apply().action_run");
    assert_eq!(cases.len(), 3);
    let StmtKind::Assign { rhs, .. } = &apply.stmts[6].kind else { panic!() };
    assert_eq!(sx(rhs), "(? (Eq (BitAnd h 255) 0) true false)");
    let StmtKind::Decl(d) = &apply.stmts[5].kind else { panic!() };
    let DeclKind::Var { init: Some(init), .. } = &d.kind else { panic!() };
    assert_eq!(
        sx(init),
        "(BitXor hdr.ipv4.srcAddr[15:0] (cast bit<16> (Shr hdr.ipv4.dstAddr 16)))"
    );
}

#[test]
fn each_broken_declaration_gives_one_error_and_parsing_goes_on() {
    let src = "header h { bit<8> x }\nstruct s { bit<8> y; }\ncontrol C() { apply { x = ; } }\n\
               const bit<8> z = 1;\ntypedef bit<8 t;\nheader g { }";
    let errs = try_parse(src).expect_err("errors");
    let at: Vec<_> = errs.iter().map(|e| (e.message.as_str(), &src[e.start as usize..])).collect();
    assert_eq!(at.len(), 3, "{at:?}");
    assert_eq!(at[0].0, "expected `;`, found `}`");
    assert!(at[1].1.starts_with("; } }"));
    assert!(at[2].1.starts_with("t;"));
}

#[test]
fn generic_member_calls_and_comparisons_in_parentheses() {
    assert_eq!(expr("pkt.lookahead<bit<16>>()"), "pkt.lookahead<bit<16>>()");
    assert_eq!(expr("pkt.lookahead<bit<16>>()[15:12]"), "pkt.lookahead<bit<16>>()[15:12]");
    assert_eq!(expr("(a < b) && (c > d)"), "(And (Lt a b) (Gt c d))");
    assert_eq!(expr("a > b ? c : d"), "(? (Gt a b) c d)");
    assert_eq!(expr("{ a = { b = 1 }, c = {1, 2} }"), "{a = {b = 1}, c = {1, 2}}");
    assert_eq!(expr("-8s1"), "(Neg 1)");
    assert_eq!(expr("key + priority"), "(Add key priority)");
    assert_eq!(expr("f<T, _>(x)"), "f<T, _>(x)");
}

#[test]
fn instances_with_abstract_method_implementations() {
    let p = ok(r#"
        control C() {
            Virtual() v = {
                bit<16> f(in bit<16> ix) { return ix + 1; }
                @name("g") void g() { }
            };
            apply { }
        }
    "#);
    let DeclKind::Control { locals, .. } = &p.decls[0].kind else { panic!() };
    let DeclKind::Instance { name, init: Some(fns), .. } = &locals[0].kind else { panic!() };
    assert_eq!(name.text, "v");
    assert_eq!(fns.len(), 2);
    assert_eq!(fns[1].annotations[0].name.text, "name");
}

#[test]
fn for_loops_break_and_continue() {
    let s = stmts(
        "for (bit<8> i = 0, j = 1; i < 4; i = i + 1, f(j)) { if (i == 2) { continue; } break; }
         for (bit<8> i in 0 .. 3) x = x + i;
         for (h in hdr.stack) { }
         for (;;) { }",
    );
    let StmtKind::For { init, cond, update, body } = &s[0].kind else { panic!("{:?}", s[0]) };
    assert_eq!(init.len(), 2);
    assert!(matches!(&init[0].kind, StmtKind::Decl(d) if matches!(&d.kind, DeclKind::Var { .. })));
    assert!(matches!(&init[1].kind, StmtKind::Assign { .. }));
    assert_eq!(sx(cond.as_ref().unwrap()), "(Lt i 4)");
    assert!(matches!(&update[1].kind, StmtKind::Call(e) if sx(e) == "f(j)"));
    let StmtKind::Block(b) = &body.kind else { panic!() };
    assert_eq!(b.stmts[1].kind, StmtKind::Break);
    let StmtKind::ForIn { ty: Some(t), name, range, .. } = &s[1].kind else { panic!() };
    assert_eq!(
        (ty(t).as_str(), name.text.as_str(), sx(range).as_str()),
        ("bit<8>", "i", "(Range 0 3)")
    );
    assert!(
        matches!(&s[2].kind, StmtKind::ForIn { ty: None, range, .. } if sx(range) == "hdr.stack")
    );
    assert!(
        matches!(&s[3].kind, StmtKind::For { init, cond: None, update, .. } if init.is_empty() && update.is_empty())
    );
}
