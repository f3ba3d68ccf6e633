//! The type checker and compiler: a parsed v1model program becomes a [`Compiled`] program.
//!
//! One pass in declaration order (P4 declares before use): types are resolved, every name is
//! bound, every expression gets its type and width, constants are folded, and every variable
//! gets its slots. The `main` instantiation of `V1Switch` (or of PNA's `PNA_NIC`) is
//! elaborated block by block; each
//! instance of a parser or control (the six of `main` and any sub-parser or sub-control) is
//! compiled on its own, so two instances never share state.
//!
//! The first error stops compilation; it names the place ([`CompileError::loc`]). Features
//! snic does not implement are errors whose message starts with `unsupported: `.

use std::collections::HashMap;

use crate::ast::{self, BinOp, Decl, DeclKind, Direction, ExprKind, Loc, StmtKind, StructKind};
use crate::ir::*;
use crate::lex::TokenKind;
use crate::table::{FieldMatch, MatchKind};

/// The most slots a program's per-packet state may take (16 bytes each).
pub const MAX_FRAME_SLOTS: u32 = 1 << 20;

/// The most cells an indexed extern (register, counter, meter) may have.
pub const MAX_EXTERN_CELLS: u32 = 1 << 24;

/// A compilation error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileError {
    /// Where, in the lexed text.
    pub loc: Loc,
    /// What.
    pub message: String,
}

type R<T> = Result<T, CompileError>;

fn err<T>(loc: Loc, msg: impl Into<String>) -> R<T> {
    Err(CompileError { loc, message: msg.into() })
}

fn unsupported<T>(loc: Loc, what: impl core::fmt::Display) -> R<T> {
    Err(CompileError { loc, message: format!("unsupported: {what}") })
}

/// Warnings the compiler found (reads of locals never written, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// Where.
    pub loc: Loc,
    /// What.
    pub message: String,
}

/// A resolved type.
#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    /// `bit<W>` / `int<W>`.
    Bits(Arith),
    /// An arbitrary-precision integer (constants only).
    Int,
    /// `bool`
    Bool,
    /// `varbit<W>`
    Varbit(u32),
    /// `string`
    Str,
    /// `error`
    Error,
    /// `match_kind`
    MatchKind,
    /// An enum (index into the compiler's enums); serializable ones have a representation.
    Enum(u32),
    /// A header (index into aggregates).
    Header(u32),
    /// A header union.
    Union(u32),
    /// A struct.
    Struct(u32),
    /// A header stack.
    Stack(Box<Ty>, u32),
    /// A tuple.
    Tuple(Vec<Ty>),
    /// `void`
    Void,
    /// An extern object type with its type arguments.
    Extern(String, Vec<Ty>),
    /// A type variable of a generic declaration (left open).
    Var(String),
    /// `_`
    DontCare,
}

#[derive(Debug, Clone)]
struct Agg {
    name: String,
    fields: Vec<(String, Ty, Vec<ast::Annotation>)>,
    layout: Option<u32>,
}

#[derive(Debug, Clone)]
struct EnumDef {
    name: String,
    members: Vec<(String, u128)>,
    repr: Option<Arith>,
}

/// The bits `lo .. lo + width` of the bit string at `place` (`whole` bits wide).
#[derive(Debug, Clone)]
struct SlicePlace {
    place: Place,
    whole: Arith,
    lo: u32,
    width: Arith,
}

impl SlicePlace {
    /// The slice's value.
    fn read(&self) -> Ex {
        Ex::Slice(Box::new(Ex::Load(self.place.clone())), self.lo, self.width.mask())
    }

    /// Store `v` (of the slice's width) into the slice, the other bits unchanged.
    fn store(&self, v: Ex) -> St {
        let ua = Arith { width: self.whole.width, signed: false };
        let keep = self.whole.mask() & !(self.width.mask() << self.lo);
        let kept =
            Ex::Bin(Op::And, Box::new(Ex::Load(self.place.clone())), Box::new(Ex::Const(keep)), ua);
        let moved = Ex::Bin(
            Op::Shl,
            Box::new(Ex::Cast(Box::new(v), self.width, ua)),
            Box::new(Ex::Const(u128::from(self.lo))),
            ua,
        );
        St::Set(self.place.clone(), Ex::Bin(Op::Or, Box::new(kept), Box::new(moved), ua))
    }
}

/// A typed expression.
#[derive(Debug, Clone)]
struct TE {
    ex: Ex,
    ty: Ty,
}

impl TE {
    fn konst(&self) -> Option<u128> {
        match self.ex {
            Ex::Const(v) => Some(v),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
struct ParamInfo {
    name: String,
    dir: Direction,
    ty: Ty,
    place: Place,
    default: Option<ast::Expr>,
}

#[derive(Debug, Clone)]
enum Ent<'a> {
    Var(Place, Ty),
    Const(TE),
    Type(Ty),
    Decl(&'a Decl),
    Action(u32, Vec<ParamInfo>),
    Function(u32, Vec<ParamInfo>, Ty, Slot),
    Table(u32),
    Extern(u32, String),
    Sub(Body, Vec<ParamInfo>),
    ValueSet(u32),
    PacketIn,
    PacketOut,
    ExternFn,
    GenericFn(&'a Decl),
}

/// Per-block naming context for control-plane names.
#[derive(Debug, Clone, Default)]
struct Ctx {
    prefix: String,
    in_parser: bool,
    ret: Option<(Slot, Ty)>,
}

struct Compiler<'a> {
    aggs: Vec<Agg>,
    enums: Vec<EnumDef>,
    errors: Vec<String>,
    match_kinds: Vec<String>,
    scopes: Vec<HashMap<String, Ent<'a>>>,
    next_slot: u32,
    out: Compiled,
    ctx: Ctx,
    warnings: Vec<Warning>,
    text: &'a str,
    /// Locals declared without a value and not written yet, by first slot.
    uninit: HashMap<Slot, (String, Loc)>,
    /// Generic functions compiled so far, by name and type arguments.
    generics: HashMap<String, (u32, Vec<ParamInfo>, Ty, Slot)>,
    /// PNA `Hash` instances: their algorithm (v1model's `HashAlgorithm` member index) and
    /// output type.
    hash_algos: HashMap<u32, (u32, Ty)>,
    /// PNA `InternetChecksum` instances: the slot of their running sum.
    csum_states: HashMap<u32, Slot>,
    /// PNA `Random` instances: their range and value type.
    randoms: HashMap<u32, (u128, u128, Ty)>,
}

/// The compiled program and the compiler's warnings.
#[derive(Debug, Clone)]
pub struct Output {
    /// The program.
    pub program: Compiled,
    /// Warnings.
    pub warnings: Vec<Warning>,
}

/// Compile a parsed v1model or PNA program. `text` is the lexed text (string annotations are read
/// from it).
pub fn compile(program: &ast::Program, text: &str) -> Result<Output, CompileError> {
    let mut c = Compiler {
        aggs: Vec::new(),
        enums: Vec::new(),
        errors: Vec::new(),
        match_kinds: Vec::new(),
        scopes: vec![HashMap::new()],
        next_slot: 0,
        out: Compiled {
            frame_len: 0,
            parsers: Vec::new(),
            controls: Vec::new(),
            actions: Vec::new(),
            functions: Vec::new(),
            tables: Vec::new(),
            instances: Vec::new(),
            value_sets: Vec::new(),
            layouts: Vec::new(),
            errors: Vec::new(),
            parser: 0,
            verify: 0,
            ingress: 0,
            egress: 0,
            compute: 0,
            deparser: 0,
            std: StdMeta::default(),
            hdr: (0, 0),
            meta: (0, 0),
            field_lists: Vec::new(),
            digests: Vec::new(),
            controller_headers: Vec::new(),
            calcs: Vec::new(),
            arch: Arch::V1Model,
        },
        ctx: Ctx::default(),
        warnings: Vec::new(),
        text,
        uninit: HashMap::new(),
        generics: HashMap::new(),
        hash_algos: HashMap::new(),
        csum_states: HashMap::new(),
        randoms: HashMap::new(),
    };
    let mut main = None;
    for d in &program.decls {
        if let DeclKind::Instance { name, .. } = &d.kind
            && name.text == "main"
        {
            main = Some(d);
            continue;
        }
        c.top_decl(d)?;
    }
    let Some(main) = main else {
        return err(Loc::default(), "the program has no `main` instantiation");
    };
    c.main(main)?;
    if c.next_slot > MAX_FRAME_SLOTS {
        return err(
            main.loc,
            format!(
                "unsupported: a program whose state needs {} slots (the limit is {MAX_FRAME_SLOTS})",
                c.next_slot
            ),
        );
    }
    c.out.frame_len = c.next_slot;
    c.out.errors = c.errors.clone();
    Ok(Output { program: c.out, warnings: c.warnings })
}

fn anno_string(annos: &[ast::Annotation], name: &str) -> Option<String> {
    annos.iter().find(|a| a.name.text == name).and_then(|a| {
        a.body.iter().find_map(|t| match &t.kind {
            TokenKind::Str(s) => Some(s.clone()),
            _ => None,
        })
    })
}

fn anno_ints(annos: &[ast::Annotation], name: &str) -> Option<Vec<i64>> {
    let a = annos.iter().find(|a| a.name.text == name)?;
    let mut out = Vec::new();
    let mut neg = false;
    for t in &a.body {
        match &t.kind {
            TokenKind::Int(i) => {
                let v = i.value.to_u64()? as i64;
                out.push(if neg { -v } else { v });
                neg = false;
            }
            TokenKind::Minus => neg = true,
            _ => {}
        }
    }
    Some(out)
}

/// `@id(N)`: the P4Runtime id the program asks for.
fn anno_id(annos: &[ast::Annotation]) -> Option<u32> {
    anno_ints(annos, "id").and_then(|v| v.first().copied()).and_then(|v| u32::try_from(v).ok())
}

fn has_anno(annos: &[ast::Annotation], name: &str) -> bool {
    annos.iter().any(|a| a.name.text == name)
}

fn bool_ty() -> Ty {
    Ty::Bool
}

const A1: Arith = Arith { width: 1, signed: false };
const A32: Arith = Arith { width: 32, signed: false };
const A8: Arith = Arith { width: 8, signed: false };

/// PNA's `PNA_HashAlgorithm_t` members (TARGET_DEFAULT, CRC32, CRC16, ONES_COMPLEMENT16,
/// IDENTITY, in snic's pna.p4) as v1model `HashAlgorithm` indices (crc32, crc32, crc16, csum16,
/// identity).
const PNA_HASH_ALGOS: [u32; 5] = [0, 0, 2, 6, 5];

/// The items of a list or struct expression.
fn items_of(e: &ast::Expr) -> Vec<&ast::Expr> {
    match &e.kind {
        ExprKind::List(items) => items.iter().collect(),
        ExprKind::StructInit(items) => items.iter().map(|(_, v)| v).collect(),
        _ => Vec::new(),
    }
}

/// A call's arguments in the order of `names` when they are named (`f(b = 1, a = 2)`), as
/// written otherwise.
fn named_args(args: &[ast::Arg], names: &[&str]) -> Vec<ast::Arg> {
    if args.iter().all(|a| a.name.is_none()) {
        return args.to_vec();
    }
    let mut out = Vec::new();
    for n in names {
        match args.iter().find(|a| a.name.as_ref().is_some_and(|x| x.text == *n)) {
            Some(a) => out.push(a.clone()),
            None => break,
        }
    }
    out
}

impl<'a> Compiler<'a> {
    // ---------------------------------------------------------------- scopes and slots

    fn lookup(&self, name: &str) -> Option<&Ent<'a>> {
        self.scopes.iter().rev().find_map(|s| s.get(name))
    }

    fn bind(&mut self, name: &str, e: Ent<'a>) {
        self.scopes.last_mut().expect("a scope").insert(name.to_string(), e);
    }

    fn alloc(&mut self, n: u32) -> Slot {
        let s = self.next_slot;
        self.next_slot += n;
        s
    }

    fn push(&mut self) {
        self.scopes.push(HashMap::new());
    }

    fn pop(&mut self) {
        self.scopes.pop();
    }

    // ---------------------------------------------------------------- types

    fn slots(&self, ty: &Ty) -> u32 {
        match ty {
            Ty::Header(i) | Ty::Struct(i) => {
                let extra = u32::from(matches!(ty, Ty::Header(_)));
                extra + self.aggs[*i as usize].fields.iter().map(|f| self.slots(&f.1)).sum::<u32>()
            }
            Ty::Union(i) => self.aggs[*i as usize].fields.iter().map(|f| self.slots(&f.1)).sum(),
            Ty::Stack(e, n) => 1 + self.slots(e) * n,
            Ty::Tuple(ts) => ts.iter().map(|t| self.slots(t)).sum(),
            Ty::Varbit(w) => 1 + w.div_ceil(128).max(1),
            Ty::Void | Ty::Str | Ty::Extern(..) | Ty::DontCare => 0,
            _ => 1,
        }
    }

    fn is_scalar(&self, ty: &Ty) -> bool {
        matches!(ty, Ty::Bits(_) | Ty::Int | Ty::Bool | Ty::Error | Ty::Enum(_) | Ty::MatchKind)
    }

    /// The arithmetic of a scalar type (bool and enums are compared as plain numbers).
    fn arith(&self, ty: &Ty) -> Arith {
        match ty {
            Ty::Bits(a) => *a,
            Ty::Bool => A1,
            Ty::Enum(e) => self.enums[*e as usize].repr.unwrap_or(A32),
            _ => Arith { width: 128, signed: false },
        }
    }

    /// The width in bits of a scalar for packing (bool is one bit).
    fn width_of(&self, ty: &Ty, loc: Loc) -> R<u32> {
        match ty {
            Ty::Bits(a) => Ok(a.width),
            Ty::Bool => Ok(1),
            Ty::Enum(e) => match self.enums[*e as usize].repr {
                Some(a) => Ok(a.width),
                None => err(loc, "a non-serializable enum has no width"),
            },
            Ty::Error => Ok(32),
            _ => err(loc, format!("`{}` is not a bit string", self.ty_name(ty))),
        }
    }

    fn ty_name(&self, ty: &Ty) -> String {
        match ty {
            Ty::Bits(a) => format!("{}<{}>", if a.signed { "int" } else { "bit" }, a.width),
            Ty::Int => "int".into(),
            Ty::Bool => "bool".into(),
            Ty::Varbit(w) => format!("varbit<{w}>"),
            Ty::Str => "string".into(),
            Ty::Error => "error".into(),
            Ty::MatchKind => "match_kind".into(),
            Ty::Enum(e) => self.enums[*e as usize].name.clone(),
            Ty::Header(i) | Ty::Union(i) | Ty::Struct(i) => self.aggs[*i as usize].name.clone(),
            Ty::Stack(e, n) => format!("{}[{n}]", self.ty_name(e)),
            Ty::Tuple(ts) => {
                format!(
                    "tuple<{}>",
                    ts.iter().map(|t| self.ty_name(t)).collect::<Vec<_>>().join(", ")
                )
            }
            Ty::Void => "void".into(),
            Ty::Extern(n, _) => n.clone(),
            Ty::Var(n) => n.clone(),
            Ty::DontCare => "_".into(),
        }
    }

    fn resolve_ty(&mut self, t: &ast::Type) -> R<Ty> {
        use ast::TypeKind as K;
        Ok(match &t.kind {
            K::Bits { signed, width } => match width {
                None if *signed => Ty::Int,
                None => Ty::Bits(A1),
                Some(w) => {
                    let w = self.const_u32(w)?;
                    if w > 128 {
                        return unsupported(
                            t.loc,
                            format!("bit strings wider than 128 bits ({w})"),
                        );
                    }
                    if *signed && w == 0 {
                        return err(t.loc, "int<0> is not a type");
                    }
                    Ty::Bits(Arith { width: w, signed: *signed })
                }
            },
            K::Varbit(w) => {
                let w = self.const_u32(w)?;
                if w > 16384 {
                    return unsupported(t.loc, "varbit wider than 16384 bits");
                }
                Ty::Varbit(w)
            }
            K::Bool => Ty::Bool,
            K::Error => Ty::Error,
            K::String => Ty::Str,
            K::Void => Ty::Void,
            K::MatchKind => Ty::MatchKind,
            K::DontCare => Ty::DontCare,
            K::Named { name, args } => {
                let mut targs = Vec::new();
                for a in args {
                    targs.push(self.resolve_ty(a)?);
                }
                match self.lookup(&name.text) {
                    Some(Ent::Type(ty)) => ty.clone(),
                    Some(Ent::Decl(d)) => match &d.kind {
                        DeclKind::ExternObject { name, .. } => Ty::Extern(name.text.clone(), targs),
                        _ => Ty::Extern(name.text.clone(), targs),
                    },
                    _ => return err(name.loc, format!("unknown type `{}`", name.text)),
                }
            }
            K::Stack { elem, size } => {
                let e = self.resolve_ty(elem)?;
                if !matches!(e, Ty::Header(_) | Ty::Union(_)) {
                    return unsupported(t.loc, "stacks of anything but headers and header unions");
                }
                let n = self.const_u32(size)?;
                if n > 4096 {
                    return err(size.loc, "header stack larger than 4096 elements");
                }
                Ty::Stack(Box::new(e), n)
            }
            K::Tuple(ts) => {
                let mut v = Vec::new();
                for t in ts {
                    v.push(self.resolve_ty(t)?);
                }
                Ty::Tuple(v)
            }
            K::List(_) => return unsupported(t.loc, "list<T> types"),
        })
    }

    fn const_u32(&mut self, e: &ast::Expr) -> R<u32> {
        let v = self.expr(e, None)?;
        match (v.konst(), &v.ty) {
            (Some(x), Ty::Int) => {
                let x = x as i128;
                if (0..=i128::from(u32::MAX)).contains(&x) {
                    Ok(x as u32)
                } else {
                    err(e.loc, format!("{x} is out of range here"))
                }
            }
            (Some(x), Ty::Bits(_)) => u32::try_from(x).or_else(|_| err(e.loc, "value too large")),
            _ => err(e.loc, "a compile-time constant is needed here"),
        }
    }

    fn const_i128(&mut self, e: &ast::Expr) -> R<i128> {
        let v = self.expr(e, None)?;
        match (v.konst(), &v.ty) {
            (Some(x), Ty::Int) => Ok(x as i128),
            (Some(x), Ty::Bits(a)) => Ok(a.extend(x)),
            (Some(x), Ty::Bool) => Ok(x as i128),
            _ => err(e.loc, "a compile-time constant is needed here"),
        }
    }

    fn layout_of(&mut self, agg: u32) -> u32 {
        if let Some(l) = self.aggs[agg as usize].layout {
            return l;
        }
        let mut fields = Vec::new();
        let mut off = 1;
        let mut varbit = None;
        let mut fixed = 0;
        let a = self.aggs[agg as usize].clone();
        for (i, (_, ty, _)) in a.fields.iter().enumerate() {
            let w = match ty {
                Ty::Varbit(w) => {
                    varbit = Some((i, *w));
                    0
                }
                Ty::Bits(a) => a.width,
                Ty::Bool => 1,
                Ty::Enum(e) => self.enums[*e as usize].repr.map_or(32, |r| r.width),
                _ => 0,
            };
            fields.push((off, w));
            fixed += w;
            off += self.slots(ty);
        }
        let id = self.out.layouts.len() as u32;
        let mut bit_offs = Vec::with_capacity(fields.len());
        let mut at = 0;
        for (_, w) in &fields {
            bit_offs.push(at);
            at += w;
        }
        let fast = varbit.is_none()
            && fixed.is_multiple_of(8)
            && fixed <= 512
            && fields.iter().all(|(_, w)| *w <= 120);
        self.out.layouts.push(HeaderLayout {
            name: a.name.clone(),
            fields,
            varbit,
            slots: off,
            fixed_bits: fixed,
            bit_offs,
            fast,
        });
        self.aggs[agg as usize].layout = Some(id);
        id
    }

    fn shape(&mut self, ty: &Ty) -> Shape {
        match ty {
            Ty::Header(i) => Shape::Header(self.layout_of(*i)),
            Ty::Union(i) | Ty::Struct(i) => {
                let a = self.aggs[*i as usize].clone();
                let mut off = 0;
                let mut v = Vec::new();
                for (_, fty, _) in &a.fields {
                    v.push((off, self.shape(fty)));
                    off += self.slots(fty);
                }
                if matches!(ty, Ty::Union(_)) { Shape::Union(v) } else { Shape::Struct(v) }
            }
            Ty::Stack(e, n) => {
                Shape::Stack { count: *n, stride: self.slots(e), elem: Box::new(self.shape(e)) }
            }
            Ty::Tuple(ts) => {
                let mut off = 0;
                let mut v = Vec::new();
                for t in ts {
                    v.push((off, self.shape(t)));
                    off += self.slots(t);
                }
                Shape::Struct(v)
            }
            _ => Shape::Scalar,
        }
    }

    /// The slot offset and type of field `f` of aggregate type `ty`.
    fn field(&self, ty: &Ty, f: &str) -> Option<(u32, Ty)> {
        let (i, hdr) = match ty {
            Ty::Header(i) => (*i, 1),
            Ty::Struct(i) | Ty::Union(i) => (*i, 0),
            _ => return None,
        };
        let mut off = hdr;
        for (n, fty, _) in &self.aggs[i as usize].fields {
            if n == f {
                return Some((off, fty.clone()));
            }
            off += self.slots(fty);
        }
        None
    }

    // ---------------------------------------------------------------- declarations

    fn top_decl(&mut self, d: &'a Decl) -> R<()> {
        match &d.kind {
            DeclKind::Parser { proto, .. } | DeclKind::Control { proto, .. } => {
                self.bind(&proto.name.text, Ent::Decl(d));
                Ok(())
            }
            DeclKind::ParserType(p) | DeclKind::ControlType(p) | DeclKind::Package(p) => {
                self.bind(&p.name.text, Ent::Decl(d));
                Ok(())
            }
            DeclKind::ExternObject { name, .. } => {
                self.bind(&name.text, Ent::Decl(d));
                Ok(())
            }
            DeclKind::ExternFunction(p) => {
                self.bind(&p.name.text, Ent::ExternFn);
                Ok(())
            }
            _ => self.local_decl(d, &mut Vec::new()),
        }
    }

    /// A declaration inside a block or at the top level; statements that initialise it go to
    /// `init`.
    fn local_decl(&mut self, d: &'a Decl, init: &mut Vec<St>) -> R<()> {
        match &d.kind {
            DeclKind::Struct { kind, name, type_params, fields } => {
                if !type_params.is_empty() {
                    return unsupported(d.loc, "generic structs and headers");
                }
                let id = self.aggs.len() as u32;
                let mut fs = Vec::new();
                for f in fields {
                    let ty = self.resolve_ty(&f.ty)?;
                    if *kind == StructKind::Header
                        && !matches!(ty, Ty::Bits(_) | Ty::Varbit(_) | Ty::Bool)
                        && !matches!(ty, Ty::Enum(e) if self.enums[e as usize].repr.is_some())
                    {
                        return err(
                            f.loc,
                            format!("a header field cannot be `{}`", self.ty_name(&ty)),
                        );
                    }
                    fs.push((f.name.text.clone(), ty, f.annotations.clone()));
                }
                self.aggs.push(Agg { name: name.text.clone(), fields: fs, layout: None });
                let ty = match kind {
                    StructKind::Header => Ty::Header(id),
                    StructKind::HeaderUnion => Ty::Union(id),
                    StructKind::Struct => Ty::Struct(id),
                };
                if *kind == StructKind::Header
                    && let Some(ch) = anno_string(&d.annotations, "controller_header")
                {
                    let mut fields = Vec::new();
                    for (fname, fty, fannos) in &self.aggs[id as usize].fields {
                        let w = match fty {
                            Ty::Bits(a) => a.width,
                            Ty::Bool => 1,
                            Ty::Enum(e) => self.enums[*e as usize].repr.map_or(0, |r| r.width),
                            _ => return unsupported(d.loc, "a controller header with a varbit"),
                        };
                        fields.push(CpField { name: fname.clone(), width: w, id: anno_id(fannos) });
                    }
                    self.out.controller_headers.push(ControllerHeaderIr {
                        name: ch,
                        id: anno_id(&d.annotations),
                        type_name: name.text.clone(),
                        fields,
                    });
                }
                if *kind == StructKind::Header {
                    let l = self.layout_of(id);
                    let layout = &self.out.layouts[l as usize];
                    if layout.varbit.is_none() && !layout.fixed_bits.is_multiple_of(8) {
                        // p4c refuses these for BMv2; we accept and pad nothing (emit packs bits).
                    }
                }
                self.bind(&name.text, Ent::Type(ty));
            }
            DeclKind::Enum { name, repr, members } => {
                let id = self.enums.len() as u32;
                let repr_a = match repr {
                    Some(t) => match self.resolve_ty(t)? {
                        Ty::Bits(a) => Some(a),
                        _ => {
                            return err(t.loc, "a serializable enum needs a bit<W> or int<W> type");
                        }
                    },
                    None => None,
                };
                let mut ms = Vec::new();
                for (i, m) in members.iter().enumerate() {
                    let v = match (&m.value, repr_a) {
                        (Some(e), Some(a)) => {
                            let te = self.expr(e, Some(&Ty::Bits(a)))?;
                            let te = self.coerce(te, &Ty::Bits(a), e.loc)?;
                            match te.konst() {
                                Some(v) => v,
                                None => return err(e.loc, "an enum value must be a constant"),
                            }
                        }
                        (None, Some(_)) => {
                            return err(m.name.loc, "a serializable enum member needs a value");
                        }
                        _ => i as u128,
                    };
                    ms.push((m.name.text.clone(), v));
                }
                self.enums.push(EnumDef { name: name.text.clone(), members: ms, repr: repr_a });
                self.bind(&name.text, Ent::Type(Ty::Enum(id)));
            }
            DeclKind::Error(names) => {
                for n in names {
                    if !self.errors.contains(&n.text) {
                        self.errors.push(n.text.clone());
                    }
                }
            }
            DeclKind::MatchKind(names) => {
                for n in names {
                    self.match_kinds.push(n.text.clone());
                }
            }
            DeclKind::Typedef { name, ty } | DeclKind::NewType { name, ty } => {
                let t = self.resolve_ty(ty)?;
                self.bind(&name.text, Ent::Type(t));
            }
            DeclKind::Const { ty, name, value } => {
                let t = self.resolve_ty(ty)?;
                if self.is_scalar(&t) {
                    let v = self.expr(value, Some(&t))?;
                    let v = self.coerce(v, &t, value.loc)?;
                    if v.konst().is_none() {
                        return err(value.loc, "a constant's value must be known at compile time");
                    }
                    self.bind(&name.text, Ent::Const(v));
                } else {
                    // A composite constant: storage written once at the start of each packet.
                    let n = self.slots(&t);
                    let place = Place::at(self.alloc(n));
                    let sts = self.assign_into(place.clone(), &t, value)?;
                    init.extend(sts);
                    self.bind(&name.text, Ent::Var(place, t));
                }
            }
            DeclKind::Var { ty, name, init: value } => {
                let t = self.resolve_ty(ty)?;
                let n = self.slots(&t);
                let place = Place::at(self.alloc(n));
                match value {
                    Some(v) => {
                        let sts = self.assign_into(place.clone(), &t, v)?;
                        init.extend(sts);
                    }
                    None => {
                        init.push(St::Zero(place.clone(), n));
                        // Headers start invalid, which is well defined; other locals are
                        // watched for a read before any write.
                        if !matches!(t, Ty::Header(_) | Ty::Union(_) | Ty::Stack(..)) {
                            self.uninit.insert(place.base, (name.text.clone(), name.loc));
                        }
                    }
                }
                self.bind(&name.text, Ent::Var(place, t));
            }
            DeclKind::Action { name, params, body } => {
                self.action(d, name, params, body)?;
            }
            DeclKind::Function { proto, body } => {
                if !proto.type_params.is_empty() {
                    // Compiled per type-argument list at its calls.
                    self.bind(&proto.name.text, Ent::GenericFn(d));
                    return Ok(());
                }
                let f = self.function(proto, body, proto.name.text.clone())?;
                self.bind(&proto.name.text, Ent::Function(f.0, f.1, f.2, f.3));
            }
            DeclKind::Table { name, props } => self.table(d, name, props)?,
            DeclKind::Instance { ty, args, name, init: ainit } => {
                if ainit.is_some() {
                    return unsupported(d.loc, "instances with abstract method implementations");
                }
                self.instance(d, ty, args, name)?;
            }
            DeclKind::ValueSet { ty, size, name } => {
                let t = self.resolve_ty(ty)?;
                let width = match &t {
                    Ty::Bits(a) => a.width,
                    _ => return unsupported(ty.loc, "value sets of anything but bit<W>"),
                };
                let size = self.const_u32(size)?;
                let id = self.out.value_sets.len() as u32;
                let nm = self.cp_name(&d.annotations, &name.text);
                self.out.value_sets.push(ValueSetIr {
                    name: nm,
                    size,
                    width,
                    id: anno_id(&d.annotations),
                });
                self.bind(&name.text, Ent::ValueSet(id));
            }
            DeclKind::Parser { proto, .. } | DeclKind::Control { proto, .. } => {
                self.bind(&proto.name.text, Ent::Decl(d));
            }
            DeclKind::ParserType(p) | DeclKind::ControlType(p) | DeclKind::Package(p) => {
                self.bind(&p.name.text, Ent::Decl(d));
            }
            DeclKind::ExternObject { name, .. } => self.bind(&name.text, Ent::Decl(d)),
            DeclKind::ExternFunction(p) => self.bind(&p.name.text, Ent::ExternFn),
        }
        Ok(())
    }

    /// Compile a function body; the function is bound under its name before its body, so a
    /// call to itself resolves (and is refused by P4's no-recursion rule elsewhere).
    fn function(
        &mut self,
        proto: &'a ast::FunctionProto,
        body: &'a ast::Block,
        name: String,
    ) -> R<(u32, Vec<ParamInfo>, Ty, Slot)> {
        let ret = self.resolve_ty(&proto.ret)?;
        let rs = self.slots(&ret);
        let ret_slot = self.alloc(rs.max(1));
        let params = self.params(&proto.params)?;
        let id = self.out.functions.len() as u32;
        self.out.functions.push(FunctionIr { name, body: Vec::new() });
        self.push();
        for p in &params {
            self.bind(&p.name, Ent::Var(p.place.clone(), p.ty.clone()));
        }
        let saved = self.ctx.ret.replace((ret_slot, ret.clone()));
        let b = self.block(&body.stmts);
        self.ctx.ret = saved;
        self.pop();
        self.out.functions[id as usize].body = b?;
        Ok((id, params, ret, ret_slot))
    }

    /// A generic function compiled for the type arguments of one call (explicit, or taken
    /// from the arguments whose parameter type is a type parameter). Specialisations are kept
    /// per type list.
    fn generic_call(
        &mut self,
        d: &'a Decl,
        type_args: &[ast::Type],
        args: &[ast::Arg],
        loc: Loc,
    ) -> R<TE> {
        let DeclKind::Function { proto, body } = &d.kind else { return err(loc, "not a function") };
        let mut tys: Vec<Option<Ty>> = vec![None; proto.type_params.len()];
        for (i, t) in type_args.iter().enumerate() {
            if i < tys.len() {
                tys[i] = Some(self.resolve_ty(t)?);
            }
        }
        for (p, a) in proto.params.iter().zip(args) {
            if let ast::TypeKind::Named { name, args: targs } = &p.ty.kind
                && targs.is_empty()
                && let Some(k) = proto.type_params.iter().position(|t| t.text == name.text)
                && tys[k].is_none()
            {
                let t = self.expr(&a.value, None)?.ty;
                if t == Ty::Int {
                    return err(
                        a.loc,
                        format!("cannot infer `{}` from an integer of unknown width", name.text),
                    );
                }
                tys[k] = Some(t);
            }
        }
        let mut bound = Vec::new();
        for (tp, t) in proto.type_params.iter().zip(tys) {
            match t {
                Some(t) => bound.push((tp.text.clone(), t)),
                None => return err(loc, format!("cannot infer type argument `{}`", tp.text)),
            }
        }
        let key = format!(
            "{}<{}>",
            proto.name.text,
            bound.iter().map(|b| self.ty_name(&b.1)).collect::<Vec<_>>().join(",")
        );
        let f = match self.generics.get(&key) {
            Some(f) => f.clone(),
            None => {
                // The body sees the global scope and the type arguments only.
                let saved_scopes = self.scopes.split_off(1);
                let saved_ctx = core::mem::take(&mut self.ctx);
                self.push();
                for (n, t) in &bound {
                    self.bind(n, Ent::Type(t.clone()));
                }
                let r = self.function(proto, body, key.clone());
                self.scopes.truncate(1);
                self.scopes.extend(saved_scopes);
                self.ctx = saved_ctx;
                let f = r?;
                self.generics.insert(key, f.clone());
                f
            }
        };
        let call = self.call(&f.1, args, Body::Function(f.0), loc)?;
        Ok(TE { ex: Ex::Call(Box::new(call), f.3), ty: f.2 })
    }

    /// The control-plane name of a declaration in the current block: `@name` when given (a
    /// leading `.` makes it global), else `prefix.name`.
    fn cp_name(&self, annos: &[ast::Annotation], name: &str) -> String {
        match anno_string(annos, "name") {
            Some(n) if n.starts_with('.') => n[1..].to_string(),
            Some(n) => self.qualify(&n),
            None => self.qualify(name),
        }
    }

    fn qualify(&self, name: &str) -> String {
        if self.ctx.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.ctx.prefix)
        }
    }

    fn params(&mut self, ps: &[ast::Param]) -> R<Vec<ParamInfo>> {
        let mut v = Vec::new();
        for p in ps {
            let ty = self.resolve_ty(&p.ty)?;
            let n = self.slots(&ty);
            let place = Place::at(self.alloc(n));
            v.push(ParamInfo {
                name: p.name.text.clone(),
                dir: p.direction,
                ty,
                place,
                default: p.default.clone(),
            });
        }
        Ok(v)
    }

    fn action(
        &mut self,
        d: &Decl,
        name: &ast::Name,
        params: &[ast::Param],
        body: &'a ast::Block,
    ) -> R<()> {
        let ps = self.params(params)?;
        let mut data_seen = false;
        let mut irp = Vec::new();
        for (p, ap) in ps.iter().zip(params) {
            let data = p.dir == Direction::None;
            if data {
                data_seen = true;
            } else if data_seen {
                return err(ap.loc, "directional parameters must come before action data");
            }
            let width = if data {
                match &p.ty {
                    Ty::Bits(a) => a.width,
                    Ty::Bool => 1,
                    Ty::Enum(e) if self.enums[*e as usize].repr.is_some() => {
                        self.enums[*e as usize].repr.map_or(0, |r| r.width)
                    }
                    _ => return unsupported(ap.loc, "action data that is not a bit string"),
                }
            } else {
                0
            };
            irp.push(ParamIr { name: p.name.clone(), slot: p.place.base, width, data });
        }
        let id = self.out.actions.len() as u32;
        let cp = self.cp_name(&d.annotations, &name.text);
        let pid = anno_id(&d.annotations);
        self.out.actions.push(ActionIr { name: cp, params: irp, body: Vec::new(), id: pid });
        self.bind(&name.text, Ent::Action(id, ps.clone()));
        self.push();
        for p in &ps {
            self.bind(&p.name, Ent::Var(p.place.clone(), p.ty.clone()));
        }
        let saved = self.ctx.ret.take();
        let b = self.block(&body.stmts);
        self.ctx.ret = saved;
        self.pop();
        self.out.actions[id as usize].body = b?;
        Ok(())
    }

    fn instance(
        &mut self,
        d: &'a Decl,
        ty: &ast::Type,
        args: &[ast::Arg],
        name: &ast::Name,
    ) -> R<()> {
        let (tname, targs) = match &ty.kind {
            ast::TypeKind::Named { name, args } => (name.text.clone(), args.clone()),
            _ => return err(ty.loc, "only externs, parsers and controls can be instantiated"),
        };
        let decl = match self.lookup(&tname) {
            Some(Ent::Decl(d)) => *d,
            _ => return err(ty.loc, format!("`{tname}` cannot be instantiated")),
        };
        match &decl.kind {
            DeclKind::Parser { proto, .. } | DeclKind::Control { proto, .. } => {
                let prefix = self.qualify(&name.text);
                let mut tb = Vec::new();
                for (tp, ta) in proto.type_params.iter().zip(&targs) {
                    tb.push((tp.text.clone(), self.resolve_ty(ta)?));
                }
                let (body, params) = self.elaborate_block(decl, args, &prefix, None, tb)?;
                self.bind(&name.text, Ent::Sub(body, params));
                Ok(())
            }
            DeclKind::ExternObject { .. } => {
                let cp = self.cp_name(&d.annotations, &name.text);
                let mut targ_tys = Vec::new();
                for t in &targs {
                    targ_tys.push(self.resolve_ty(t)?);
                }
                let kind = self.extern_instance(&tname, &targ_tys, args, ty.loc)?;
                let id = self.out.instances.len() as u32;
                self.out.instances.push(InstanceIr { name: cp, kind, id: anno_id(&d.annotations) });
                if tname == "Random" {
                    let Some(t) = targ_tys.first().cloned() else {
                        return err(ty.loc, "Random needs a value type");
                    };
                    if !matches!(t, Ty::Bits(_)) {
                        return unsupported(ty.loc, format!("Random of `{}`", self.ty_name(&t)));
                    }
                    let mut range = [0u128; 2];
                    for (i, r) in range.iter_mut().enumerate() {
                        let Some(a) = args.get(i) else {
                            return err(ty.loc, "Random takes a minimum and a maximum");
                        };
                        *r = self.const_of_ty(&a.value, &t)?;
                    }
                    self.randoms.insert(id, (range[0], range[1], t));
                }
                if tname == "InternetChecksum" {
                    // Its state lives in the packet's frame: zero (cleared) for every packet.
                    let slot = self.alloc(1);
                    self.csum_states.insert(id, slot);
                }
                if tname == "Hash" {
                    // PNA_HashAlgorithm_t -> v1model's HashAlgorithm: TARGET_DEFAULT and
                    // CRC32 are crc32, then crc16, csum16, identity.
                    let a = match args.first() {
                        Some(a) => self.enum_member_index(&a.value)?,
                        None => return err(ty.loc, "Hash needs an algorithm"),
                    };
                    let algo = PNA_HASH_ALGOS.get(a as usize).copied().unwrap_or(0);
                    let Some(out) = targ_tys.first().cloned() else {
                        return err(ty.loc, "Hash needs an output type");
                    };
                    self.hash_algos.insert(id, (algo, out));
                }
                self.bind(&name.text, Ent::Extern(id, tname));
                Ok(())
            }
            _ => err(ty.loc, format!("`{tname}` cannot be instantiated")),
        }
    }

    fn ctor_arg(&mut self, args: &[ast::Arg], i: usize, loc: Loc) -> R<i128> {
        match args.get(i) {
            Some(a) => self.const_i128(&a.value),
            None => err(loc, "missing constructor argument"),
        }
    }

    fn enum_member_index(&mut self, e: &ast::Expr) -> R<u32> {
        let v = self.expr(e, None)?;
        match (v.konst(), v.ty) {
            (Some(x), Ty::Enum(_)) => Ok(x as u32),
            _ => err(e.loc, "an enum member is needed here"),
        }
    }

    fn extern_instance(
        &mut self,
        tname: &str,
        targs: &[Ty],
        args: &[ast::Arg],
        loc: Loc,
    ) -> R<InstanceKind> {
        let kind = self.extern_kind(tname, targs, args, loc)?;
        let cells = match kind {
            InstanceKind::Register { size, .. }
            | InstanceKind::Counter { size, .. }
            | InstanceKind::Meter { size, .. } => size,
            _ => 0,
        };
        if cells > MAX_EXTERN_CELLS {
            return unsupported(
                loc,
                format!("an extern with {cells} cells (the limit is {MAX_EXTERN_CELLS})"),
            );
        }
        Ok(kind)
    }

    fn extern_kind(
        &mut self,
        tname: &str,
        targs: &[Ty],
        args: &[ast::Arg],
        loc: Loc,
    ) -> R<InstanceKind> {
        Ok(match tname {
            "register" => {
                let size = self.ctor_arg(args, 0, loc)? as u32;
                let width = match targs.first() {
                    Some(Ty::Bits(a)) => a.width,
                    Some(Ty::Bool) => 1,
                    Some(t) => {
                        return unsupported(loc, format!("registers of `{}`", self.ty_name(t)));
                    }
                    None => return err(loc, "register needs a type argument"),
                };
                InstanceKind::Register { size, width }
            }
            "counter" => {
                let size = self.ctor_arg(args, 0, loc)? as u32;
                let kind = match args.get(1) {
                    Some(a) => self.enum_member_index(&a.value)?,
                    None => return err(loc, "counter needs a type"),
                };
                InstanceKind::Counter { size, kind }
            }
            "direct_counter" => {
                let kind = match args.first() {
                    Some(a) => self.enum_member_index(&a.value)?,
                    None => return err(loc, "direct_counter needs a type"),
                };
                InstanceKind::DirectCounter(kind)
            }
            "meter" => {
                let size = self.ctor_arg(args, 0, loc)? as u32;
                let bytes = match args.get(1) {
                    Some(a) => self.enum_member_index(&a.value)? == 1,
                    None => return err(loc, "meter needs a type"),
                };
                InstanceKind::Meter { size, bytes }
            }
            "direct_meter" => {
                let bytes = match args.first() {
                    Some(a) => self.enum_member_index(&a.value)? == 1,
                    None => return err(loc, "direct_meter needs a type"),
                };
                InstanceKind::DirectMeter { bytes }
            }
            "action_profile" => InstanceKind::ActionProfile(self.ctor_arg(args, 0, loc)? as u32),
            "action_selector" => {
                let algo = match args.first() {
                    Some(a) => self.enum_member_index(&a.value)?,
                    None => return err(loc, "action_selector needs an algorithm"),
                };
                InstanceKind::ActionSelector {
                    algo,
                    size: self.ctor_arg(args, 1, loc)? as u32,
                    width: self.ctor_arg(args, 2, loc)? as u32,
                }
            }
            "Checksum16" => InstanceKind::Stateless,
            // PNA's externs that map onto v1model's.
            "Counter" => {
                let size = self.ctor_arg(args, 0, loc)? as u32;
                let kind = match args.get(1) {
                    Some(a) => self.enum_member_index(&a.value)?,
                    None => return err(loc, "Counter needs a type"),
                };
                InstanceKind::Counter { size, kind }
            }
            "DirectCounter" => match args.first() {
                Some(a) => InstanceKind::DirectCounter(self.enum_member_index(&a.value)?),
                None => return err(loc, "DirectCounter needs a type"),
            },
            "Register" => {
                if args.len() > 1 {
                    return unsupported(loc, "Register with an initial value");
                }
                let size = self.ctor_arg(args, 0, loc)? as u32;
                let width = match targs.first() {
                    Some(Ty::Bits(a)) => a.width,
                    Some(Ty::Bool) => 1,
                    Some(t) => {
                        return unsupported(loc, format!("registers of `{}`", self.ty_name(t)));
                    }
                    None => return err(loc, "Register needs a type argument"),
                };
                InstanceKind::Register { size, width }
            }
            "Hash" | "InternetChecksum" | "Random" => InstanceKind::Stateless,
            "ActionProfile" => InstanceKind::ActionProfile(self.ctor_arg(args, 0, loc)? as u32),
            "ActionSelector" => {
                let a = match args.first() {
                    Some(a) => self.enum_member_index(&a.value)?,
                    None => return err(loc, "ActionSelector needs an algorithm"),
                };
                InstanceKind::ActionSelector {
                    algo: PNA_HASH_ALGOS.get(a as usize).copied().unwrap_or(0),
                    size: self.ctor_arg(args, 1, loc)? as u32,
                    width: self.ctor_arg(args, 2, loc)? as u32,
                }
            }
            "Meter" => {
                let size = self.ctor_arg(args, 0, loc)? as u32;
                let bytes = match args.get(1) {
                    Some(a) => self.enum_member_index(&a.value)? == 1,
                    None => return err(loc, "Meter needs a type"),
                };
                InstanceKind::Meter { size, bytes }
            }
            "DirectMeter" => match args.first() {
                Some(a) => {
                    InstanceKind::DirectMeter { bytes: self.enum_member_index(&a.value)? == 1 }
                }
                None => return err(loc, "DirectMeter needs a type"),
            },
            other => return unsupported(loc, format!("extern `{other}`")),
        })
    }

    // ---------------------------------------------------------------- main and blocks

    fn main(&mut self, d: &'a Decl) -> R<()> {
        let DeclKind::Instance { ty, args, .. } = &d.kind else { unreachable!() };
        let tname = match &ty.kind {
            ast::TypeKind::Named { name, .. } => name.text.as_str(),
            _ => "",
        };
        if tname == "PNA_NIC" {
            return self.main_pna(d, args);
        }
        if tname != "V1Switch" {
            return unsupported(
                ty.loc,
                format!("the `{tname}` architecture (snic runs v1model's V1Switch and PNA_NIC)"),
            );
        }
        if args.len() != 6 {
            return err(d.loc, "V1Switch takes six blocks");
        }
        // The shared storage: standard_metadata, the headers and the metadata, typed from the
        // parser's parameters.
        let (pdecl, pargs) = self.block_arg(&args[0])?;
        let (pparams, _) = match &pdecl.kind {
            DeclKind::Parser { proto, ctor_params, .. } => (&proto.params, ctor_params),
            _ => return err(args[0].loc, "the first block of V1Switch must be a parser"),
        };
        if pparams.len() != 4 {
            return err(pdecl.loc, "a v1model parser takes four parameters");
        }
        // H and M from the parser, or, when it is generic, from the first block that names them.
        let mut candidates: Vec<(&ast::Type, &ast::Type)> = vec![(&pparams[1].ty, &pparams[2].ty)];
        for a in &args[1..5] {
            if let Ok((d, _)) = self.block_arg(a)
                && let DeclKind::Control { proto, .. } = &d.kind
                && proto.params.len() >= 2
            {
                candidates.push((&proto.params[0].ty, &proto.params[1].ty));
            }
        }
        let mut hm = (None, None);
        for (ht, mt) in &candidates {
            if hm.0.is_none() {
                hm.0 = self.resolve_ty(ht).ok();
            }
            if hm.1.is_none() {
                hm.1 = self.resolve_ty(mt).ok();
            }
        }
        let h = match hm.0 {
            Some(t) => t,
            None => {
                return Err(self
                    .resolve_ty(&pparams[1].ty)
                    .err()
                    .unwrap_or(CompileError { loc: d.loc, message: "no header type".into() }));
            }
        };
        let m = match hm.1 {
            Some(t) => t,
            None => {
                return Err(self
                    .resolve_ty(&pparams[2].ty)
                    .err()
                    .unwrap_or(CompileError { loc: d.loc, message: "no metadata type".into() }));
            }
        };
        let s = self.resolve_ty(&pparams[3].ty)?;
        let hn = self.slots(&h);
        let hdr = self.alloc(hn);
        let mn = self.slots(&m);
        let meta = self.alloc(mn);
        let sn = self.slots(&s);
        let std = self.alloc(sn);
        self.out.hdr = (hdr, hn);
        self.out.meta = (meta, mn);
        let f = |c: &Self, n: &str| c.field(&s, n).map_or(u32::MAX, |(o, _)| std + o);
        self.out.std = StdMeta {
            base: std,
            len: sn,
            ingress_port: f(self, "ingress_port"),
            egress_spec: f(self, "egress_spec"),
            egress_port: f(self, "egress_port"),
            instance_type: f(self, "instance_type"),
            packet_length: f(self, "packet_length"),
            enq_timestamp: f(self, "enq_timestamp"),
            enq_qdepth: f(self, "enq_qdepth"),
            deq_timedelta: f(self, "deq_timedelta"),
            deq_qdepth: f(self, "deq_qdepth"),
            ingress_global_timestamp: f(self, "ingress_global_timestamp"),
            egress_global_timestamp: f(self, "egress_global_timestamp"),
            mcast_grp: f(self, "mcast_grp"),
            egress_rid: f(self, "egress_rid"),
            checksum_error: f(self, "checksum_error"),
            parser_error: f(self, "parser_error"),
            priority: f(self, "priority"),
        };
        // Field lists (@field_list(N) on metadata fields, at any depth: an annotated struct
        // field keeps all of it).
        if let Ty::Struct(_) = m {
            let mut lists: Vec<(u32, Vec<(Slot, u32)>)> = Vec::new();
            self.collect_field_lists(&m, meta, &mut lists);
            self.out.field_lists = lists;
        }
        let shared = [Place::at(hdr), Place::at(meta), Place::at(std)];
        let tys = [h, m, s];
        // The six blocks, each with its parameters bound to the shared storage.
        let roles: [(&str, &[usize]); 6] = [
            ("parser", &[9, 0, 1, 2]),
            ("verifyChecksum", &[0, 1]),
            ("ingress", &[0, 1, 2]),
            ("egress", &[0, 1, 2]),
            ("computeChecksum", &[0, 1]),
            ("deparser", &[8, 0]),
        ];
        let mut ids = [0u32; 6];
        for (i, (role, binds)) in roles.iter().enumerate() {
            let (decl, cargs) =
                if i == 0 { (pdecl, pargs.clone()) } else { self.block_arg(&args[i])? };
            let proto_params = match &decl.kind {
                DeclKind::Parser { proto, .. } if i == 0 => &proto.params,
                DeclKind::Control { proto, .. } if i > 0 => &proto.params,
                _ => {
                    return err(args[i].loc, format!("V1Switch's {role} block has the wrong kind"));
                }
            };
            if proto_params.len() != binds.len() {
                return err(decl.loc, format!("the {role} block takes {} parameters", binds.len()));
            }
            let mut bound = Vec::new();
            // A generic block's type parameters take the types of the storage they are bound
            // to (`control C<H>(inout H hdr, ...)`).
            let type_params: &[ast::Name] = match &decl.kind {
                DeclKind::Parser { proto, .. } | DeclKind::Control { proto, .. } => {
                    &proto.type_params
                }
                _ => &[],
            };
            let mut tb: Vec<(String, Ty)> = Vec::new();
            for (p, &b) in proto_params.iter().zip(binds.iter()) {
                if b < 3
                    && let ast::TypeKind::Named { name: tn, args } = &p.ty.kind
                    && args.is_empty()
                    && type_params.iter().any(|t| t.text == tn.text)
                    && !tb.iter().any(|x| x.0 == tn.text)
                {
                    tb.push((tn.text.clone(), tys[b].clone()));
                }
            }
            for (p, &b) in proto_params.iter().zip(binds.iter()) {
                let e = match b {
                    9 => Ent::PacketIn,
                    8 => Ent::PacketOut,
                    k => Ent::Var(shared[k].clone(), tys[k].clone()),
                };
                bound.push((p.name.text.clone(), e));
            }
            let name = match &decl.kind {
                DeclKind::Parser { proto, .. } | DeclKind::Control { proto, .. } => {
                    proto.name.text.clone()
                }
                _ => String::new(),
            };
            let name = anno_string(&decl.annotations, "name").unwrap_or(name);
            let (body, _) = self.elaborate_block(decl, &cargs, &name, Some(bound), tb)?;
            ids[i] = match body {
                Body::Parser(p) | Body::Control(p) => p,
                _ => 0,
            };
        }
        self.out.parser = ids[0];
        self.out.verify = ids[1];
        self.out.ingress = ids[2];
        self.out.egress = ids[3];
        self.out.compute = ids[4];
        self.out.deparser = ids[5];
        Ok(())
    }

    /// `PNA_NIC(main_parser, pre_control, main_control, main_deparser) main`: the headers
    /// and metadata are shared by the four blocks (the pre control runs on the main parser's);
    /// each intrinsic metadata struct gets its own storage.
    fn main_pna(&mut self, d: &'a Decl, args: &[ast::Arg]) -> R<()> {
        if args.len() != 4 {
            return err(d.loc, "PNA_NIC takes four blocks");
        }
        let (pdecl, _) = self.block_arg(&args[0])?;
        let pparams = match &pdecl.kind {
            DeclKind::Parser { proto, .. } if proto.params.len() == 4 => &proto.params,
            DeclKind::Parser { .. } => {
                return err(pdecl.loc, "a PNA main parser takes four parameters");
            }
            _ => return err(args[0].loc, "the first block of PNA_NIC must be a parser"),
        };
        // MH and MM from the parser, or from the main control when the parser is generic.
        let mut hm = (self.resolve_ty(&pparams[1].ty).ok(), self.resolve_ty(&pparams[2].ty).ok());
        if (hm.0.is_none() || hm.1.is_none())
            && let Ok((cd, _)) = self.block_arg(&args[2])
            && let DeclKind::Control { proto, .. } = &cd.kind
            && proto.params.len() == 4
        {
            if hm.0.is_none() {
                hm.0 = self.resolve_ty(&proto.params[0].ty).ok();
            }
            if hm.1.is_none() {
                hm.1 = self.resolve_ty(&proto.params[1].ty).ok();
            }
        }
        let (Some(h), Some(m)) = hm else {
            return err(d.loc, "the PNA main parser's header and metadata types are not known");
        };
        let hn = self.slots(&h);
        let hdr = self.alloc(hn);
        let mn = self.slots(&m);
        let meta = self.alloc(mn);
        self.out.hdr = (hdr, hn);
        self.out.meta = (meta, mn);
        // The v1model standard metadata does not exist; only its packet length (a hidden
        // slot, for byte counters) is kept.
        let plen = self.alloc(1);
        self.out.std = StdMeta {
            base: plen,
            len: 1,
            ingress_port: u32::MAX,
            egress_spec: u32::MAX,
            egress_port: u32::MAX,
            instance_type: u32::MAX,
            packet_length: plen,
            enq_timestamp: u32::MAX,
            enq_qdepth: u32::MAX,
            deq_timedelta: u32::MAX,
            deq_qdepth: u32::MAX,
            ingress_global_timestamp: u32::MAX,
            egress_global_timestamp: u32::MAX,
            mcast_grp: u32::MAX,
            egress_rid: u32::MAX,
            checksum_error: u32::MAX,
            parser_error: u32::MAX,
            priority: u32::MAX,
        };
        // The blocks: parser(pkt, hdr, meta, parser istd), pre(hdr, meta, pre istd, pre ostd),
        // main(hdr, meta, main istd, main ostd), deparser(pkt, hdr, meta, main ostd).
        // Storage indices: 0 hdr, 1 meta, 2 parser istd, 3 pre istd, 4 pre ostd, 5 main istd,
        // 6 main ostd; 9 packet_in, 8 packet_out.
        let roles: [(&str, [usize; 4]); 4] = [
            ("main parser", [9, 0, 1, 2]),
            ("pre control", [0, 1, 3, 4]),
            ("main control", [0, 1, 5, 6]),
            ("main deparser", [8, 0, 1, 6]),
        ];
        let mut shared: Vec<Option<(Place, Ty)>> = vec![None; 7];
        shared[0] = Some((Place::at(hdr), h));
        shared[1] = Some((Place::at(meta), m));
        let mut decls = Vec::new();
        for (i, (role, _)) in roles.iter().enumerate() {
            let (decl, cargs) = self.block_arg(&args[i])?;
            let params = match &decl.kind {
                DeclKind::Parser { proto, .. } if i == 0 => &proto.params,
                DeclKind::Control { proto, .. } if i > 0 => &proto.params,
                _ => return err(args[i].loc, format!("PNA_NIC's {role} has the wrong kind")),
            };
            if params.len() != 4 {
                return err(decl.loc, format!("the {role} takes four parameters"));
            }
            decls.push((decl, cargs));
        }
        // The intrinsic metadata, typed from the blocks that take it.
        for (i, (_, binds)) in roles.iter().enumerate() {
            let (DeclKind::Parser { proto, .. } | DeclKind::Control { proto, .. }) =
                &decls[i].0.kind
            else {
                continue;
            };
            for (p, &b) in proto.params.iter().zip(binds.iter()) {
                if (2..7).contains(&b) && shared[b].is_none() {
                    let ty = self.resolve_ty(&p.ty)?;
                    let n = self.slots(&ty);
                    let base = self.alloc(n);
                    shared[b] = Some((Place::at(base), ty));
                }
            }
        }
        let field = |c: &Self, k: usize, n: &str| match &shared[k] {
            Some((p, ty)) => c.field(ty, n).map_or(u32::MAX, |(o, _)| p.base + o),
            None => u32::MAX,
        };
        let three = |c: &Self, n: &str| [field(c, 2, n), field(c, 3, n), field(c, 5, n)];
        let pna = PnaMeta {
            pre: 0,
            input_port: three(self, "input_port"),
            direction: three(self, "direction"),
            pass: three(self, "pass"),
            loopedback: three(self, "loopedback"),
            parser_error: [field(self, 3, "parser_error"), field(self, 5, "parser_error")],
            timestamp: field(self, 5, "timestamp"),
        };
        let mut ids = [0u32; 4];
        for (i, (role, binds)) in roles.iter().enumerate() {
            let (decl, cargs) = decls[i].clone();
            let (proto_params, type_params) = match &decl.kind {
                DeclKind::Parser { proto, .. } | DeclKind::Control { proto, .. } => {
                    (&proto.params, &proto.type_params)
                }
                _ => continue,
            };
            let mut tb: Vec<(String, Ty)> = Vec::new();
            let mut bound = Vec::new();
            for (p, &b) in proto_params.iter().zip(binds.iter()) {
                let e = match b {
                    9 => Ent::PacketIn,
                    8 => Ent::PacketOut,
                    k => {
                        let Some((place, ty)) = shared[k].clone() else {
                            return err(p.loc, "this parameter's storage is missing");
                        };
                        let generic = matches!(&p.ty.kind,
                            ast::TypeKind::Named { name: tn, args }
                                if args.is_empty() && type_params.iter().any(|t| t.text == tn.text));
                        if generic {
                            if let ast::TypeKind::Named { name: tn, .. } = &p.ty.kind
                                && !tb.iter().any(|x| x.0 == tn.text)
                            {
                                tb.push((tn.text.clone(), ty.clone()));
                            }
                        } else {
                            let declared = self.resolve_ty(&p.ty)?;
                            if !self.same_type(&declared, &ty) {
                                return unsupported(
                                    p.loc,
                                    format!(
                                        "a PNA {role} parameter of type `{}` where the main \
                                         parser's is `{}` (snic shares one storage)",
                                        self.ty_name(&declared),
                                        self.ty_name(&ty)
                                    ),
                                );
                            }
                        }
                        Ent::Var(place, ty)
                    }
                };
                bound.push((p.name.text.clone(), e));
            }
            let name = match &decl.kind {
                DeclKind::Parser { proto, .. } | DeclKind::Control { proto, .. } => {
                    proto.name.text.clone()
                }
                _ => String::new(),
            };
            let name = anno_string(&decl.annotations, "name").unwrap_or(name);
            let (body, _) = self.elaborate_block(decl, &cargs, &name, Some(bound), tb)?;
            ids[i] = match body {
                Body::Parser(p) | Body::Control(p) => p,
                _ => 0,
            };
        }
        self.out.parser = ids[0];
        self.out.verify = ids[1];
        self.out.ingress = ids[2];
        self.out.egress = ids[2];
        self.out.compute = ids[1];
        self.out.deparser = ids[3];
        self.out.arch = Arch::Pna(PnaMeta { pre: ids[1], ..pna });
        Ok(())
    }

    fn collect_field_lists(&self, ty: &Ty, base: Slot, lists: &mut Vec<(u32, Vec<(Slot, u32)>)>) {
        let Ty::Struct(mi) = ty else { return };
        let mut off = 0;
        for (_, fty, annos) in &self.aggs[*mi as usize].fields {
            let n = self.slots(fty);
            if let Some(ids) = anno_ints(annos, "field_list") {
                for id in ids {
                    let id = id as u32;
                    match lists.iter_mut().find(|l| l.0 == id) {
                        Some(l) => l.1.push((base + off, n)),
                        None => lists.push((id, vec![(base + off, n)])),
                    }
                }
            } else {
                self.collect_field_lists(fty, base + off, lists);
            }
            off += n;
        }
    }

    /// A block argument of a package: `P(args)` or the name of an instance.
    fn block_arg(&mut self, a: &ast::Arg) -> R<(&'a Decl, Vec<ast::Arg>)> {
        match &a.value.kind {
            ExprKind::Call { callee, args, .. } => match &callee.kind {
                ExprKind::Name(n) => match self.lookup(n) {
                    Some(Ent::Decl(d)) => Ok((*d, args.clone())),
                    _ => err(callee.loc, format!("`{n}` is not a parser or control")),
                },
                _ => err(callee.loc, "a parser or control is needed here"),
            },
            _ => unsupported(a.loc, "package arguments that are not `Block()` instantiations"),
        }
    }

    /// Compile one instance of a parser or control. With `bound`, its parameters are bound to
    /// those entities (the top-level blocks); otherwise they get their own slots (sub-blocks,
    /// called with copy-in/copy-out).
    fn elaborate_block(
        &mut self,
        decl: &'a Decl,
        cargs: &[ast::Arg],
        prefix: &str,
        bound: Option<Vec<(String, Ent<'a>)>>,
        type_args: Vec<(String, Ty)>,
    ) -> R<(Body, Vec<ParamInfo>)> {
        let saved_ctx = core::mem::take(&mut self.ctx);
        self.ctx.prefix = prefix.to_string();
        // Blocks see only the global scope and their own names.
        let saved_scopes = self.scopes.split_off(1);
        self.push();
        for (n, t) in type_args {
            self.bind(&n, Ent::Type(t));
        }
        let r = self.elaborate_inner(decl, cargs, bound);
        self.scopes.truncate(1);
        self.scopes.extend(saved_scopes);
        self.ctx = saved_ctx;
        r
    }

    fn elaborate_inner(
        &mut self,
        decl: &'a Decl,
        cargs: &[ast::Arg],
        bound: Option<Vec<(String, Ent<'a>)>>,
    ) -> R<(Body, Vec<ParamInfo>)> {
        let (proto, ctor_params) = match &decl.kind {
            DeclKind::Parser { proto, ctor_params, .. }
            | DeclKind::Control { proto, ctor_params, .. } => (proto, ctor_params),
            _ => return err(decl.loc, "not a parser or control"),
        };
        if let Some(tp) =
            proto.type_params.iter().find(|t| !matches!(self.lookup(&t.text), Some(Ent::Type(_))))
        {
            return unsupported(
                tp.loc,
                format!("a generic parser or control whose `{}` is not known here", tp.text),
            );
        }
        // Constructor parameters are compile-time constants.
        if ctor_params.len() != cargs.len() {
            return err(
                decl.loc,
                format!("`{}` takes {} constructor arguments", proto.name.text, ctor_params.len()),
            );
        }
        for (p, a) in ctor_params.iter().zip(cargs) {
            let ty = self.resolve_ty(&p.ty)?;
            if !self.is_scalar(&ty) {
                return unsupported(p.loc, "constructor parameters that are not constants");
            }
            let v = self.expr(&a.value, Some(&ty))?;
            let v = self.coerce(v, &ty, a.loc)?;
            self.bind(&p.name.text, Ent::Const(v));
        }
        let mut params = Vec::new();
        match bound {
            Some(b) => {
                for (n, e) in b {
                    self.bind(&n, e);
                }
            }
            None => {
                for p in &proto.params {
                    let ty = self.resolve_ty(&p.ty)?;
                    if let Ty::Extern(n, _) = &ty {
                        let e = match n.as_str() {
                            "packet_in" => Ent::PacketIn,
                            "packet_out" => Ent::PacketOut,
                            _ => return unsupported(p.loc, "extern parameters"),
                        };
                        self.bind(&p.name.text, e);
                        params.push(ParamInfo {
                            name: p.name.text.clone(),
                            dir: p.direction,
                            ty,
                            place: Place::at(0),
                            default: None,
                        });
                        continue;
                    }
                    let n = self.slots(&ty);
                    let place = Place::at(self.alloc(n));
                    self.bind(&p.name.text, Ent::Var(place.clone(), ty.clone()));
                    params.push(ParamInfo {
                        name: p.name.text.clone(),
                        dir: p.direction,
                        ty,
                        place,
                        default: p.default.clone(),
                    });
                }
            }
        }
        match &decl.kind {
            DeclKind::Parser { locals, states, .. } => {
                self.ctx.in_parser = true;
                let mut init = Vec::new();
                for l in locals {
                    self.local_decl(l, &mut init)?;
                }
                let id = self.out.parsers.len() as u32;
                self.out
                    .parsers
                    .push(ParserIr { name: self.ctx.prefix.clone(), states: Vec::new() });
                let mut names: Vec<&str> = vec!["start"];
                for s in states {
                    if s.name.text == "accept" || s.name.text == "reject" {
                        return err(s.name.loc, "`accept` and `reject` cannot be defined");
                    }
                    if s.name.text != "start" {
                        if names.contains(&s.name.text.as_str()) {
                            return err(
                                s.name.loc,
                                format!("state `{}` is defined twice", s.name.text),
                            );
                        }
                        names.push(&s.name.text);
                    }
                }
                if !states.iter().any(|s| s.name.text == "start") {
                    return err(decl.loc, "the parser has no `start` state");
                }
                let mut compiled: Vec<Option<StateIr>> = vec![None; names.len()];
                for s in states {
                    let idx = names.iter().position(|n| *n == s.name.text).unwrap_or(0);
                    self.push();
                    let mut body = Vec::new();
                    if idx == 0 {
                        body.append(&mut init);
                    }
                    // The state's statements and its transition share one scope.
                    let mut r = Ok(());
                    for st in &s.stmts {
                        r = self.stmt(st, &mut body);
                        if r.is_err() {
                            break;
                        }
                    }
                    let next = match r {
                        Ok(()) => self.transition(&s.transition, &names),
                        Err(e) => Err(e),
                    };
                    self.pop();
                    compiled[idx] = Some(StateIr { name: s.name.text.clone(), body, next: next? });
                }
                self.out.parsers[id as usize].states = compiled.into_iter().flatten().collect();
                Ok((Body::Parser(id), params))
            }
            DeclKind::Control { locals, apply, .. } => {
                self.ctx.in_parser = false;
                let id = self.out.controls.len() as u32;
                self.out
                    .controls
                    .push(ControlIr { name: self.ctx.prefix.clone(), body: Vec::new() });
                let mut body = Vec::new();
                for l in locals {
                    self.local_decl(l, &mut body)?;
                }
                let b = self.block(&apply.stmts)?;
                body.extend(b);
                self.out.controls[id as usize].body = body;
                Ok((Body::Control(id), params))
            }
            _ => err(decl.loc, "not a parser or control"),
        }
    }

    fn next_state(&self, n: &ast::Name, names: &[&str]) -> R<Next> {
        match n.text.as_str() {
            "accept" => Ok(Next::Accept),
            "reject" => Ok(Next::Reject),
            s => match names.iter().position(|x| *x == s) {
                Some(i) => Ok(Next::State(i as u32)),
                None => err(n.loc, format!("no state `{s}`")),
            },
        }
    }

    fn transition(&mut self, t: &Option<ast::Transition>, names: &[&str]) -> R<Trans> {
        match t {
            None => Ok(Trans::Goto(Next::Reject)),
            Some(ast::Transition::Goto(n)) => Ok(Trans::Goto(self.next_state(n, names)?)),
            Some(ast::Transition::Select { exprs, cases, .. }) => {
                let mut keys = Vec::new();
                let mut tys = Vec::new();
                for e in exprs {
                    let te = self.expr(e, None)?;
                    let w = match &te.ty {
                        Ty::Int => return err(e.loc, "select on an integer of unknown width"),
                        t => self.width_of(t, e.loc).or_else(|_| match t {
                            Ty::Error | Ty::Enum(_) => Ok(32),
                            _ => err(e.loc, "select needs bit strings, booleans, enums or errors"),
                        })?,
                    };
                    tys.push(te.ty.clone());
                    keys.push((te.ex, w));
                }
                let mut out = Vec::new();
                for c in cases {
                    let next = self.next_state(&c.next, names)?;
                    let sets = if c.keyset.len() == 1
                        && matches!(c.keyset[0].kind, ExprKind::Default | ExprKind::DontCare)
                    {
                        vec![KeySet::Any; keys.len()]
                    } else if c.keyset.len() == 1 && keys.len() > 1 {
                        match &c.keyset[0].kind {
                            ExprKind::List(items) if items.len() == keys.len() => {
                                let mut v = Vec::new();
                                for (i, it) in items.iter().enumerate() {
                                    v.push(self.keyset(it, &tys[i], keys[i].1)?);
                                }
                                v
                            }
                            _ => {
                                return err(
                                    c.loc,
                                    format!("this case needs {} values", keys.len()),
                                );
                            }
                        }
                    } else {
                        if c.keyset.len() != keys.len() {
                            return err(c.loc, format!("this case needs {} values", keys.len()));
                        }
                        let mut v = Vec::new();
                        for (i, it) in c.keyset.iter().enumerate() {
                            v.push(self.keyset(it, &tys[i], keys[i].1)?);
                        }
                        v
                    };
                    out.push((sets, next));
                }
                Ok(Trans::Select(keys, out))
            }
        }
    }

    fn keyset(&mut self, e: &ast::Expr, ty: &Ty, width: u32) -> R<KeySet> {
        let m = mask(width);
        match &e.kind {
            ExprKind::Default | ExprKind::DontCare => Ok(KeySet::Any),
            ExprKind::Binary { op: BinOp::Mask, lhs, rhs } => {
                let v = self.const_of_ty(lhs, ty)?;
                let k = self.const_of_ty(rhs, ty)?;
                Ok(KeySet::Mask(v & k & m, k & m))
            }
            ExprKind::Binary { op: BinOp::Range, lhs, rhs } => {
                let lo = self.const_of_ty(lhs, ty)?;
                let hi = self.const_of_ty(rhs, ty)?;
                Ok(KeySet::Range(lo, hi))
            }
            ExprKind::Name(n) => {
                if let Some(Ent::ValueSet(id)) = self.lookup(n) {
                    return Ok(KeySet::ValueSet(*id));
                }
                let v = self.const_of_ty(e, ty)?;
                Ok(KeySet::Mask(v & m, m))
            }
            _ => {
                let v = self.const_of_ty(e, ty)?;
                Ok(KeySet::Mask(v & m, m))
            }
        }
    }

    fn const_of_ty(&mut self, e: &ast::Expr, ty: &Ty) -> R<u128> {
        let te = self.expr(e, Some(ty))?;
        let te = self.coerce(te, ty, e.loc)?;
        te.konst().map_or_else(|| err(e.loc, "a compile-time constant is needed here"), Ok)
    }

    // ---------------------------------------------------------------- tables

    fn table(&mut self, d: &Decl, name: &ast::Name, props: &'a [ast::TableProp]) -> R<()> {
        let cp = self.cp_name(&d.annotations, &name.text);
        let id = self.out.tables.len() as u32;
        let hit_slot = self.alloc(2);
        let mut t = TableIr {
            name: cp,
            id: anno_id(&d.annotations),
            keys: Vec::new(),
            actions: Vec::new(),
            default: ActionCall { action: 0, args: Vec::new() },
            default_const: false,
            entries: Vec::new(),
            entries_const: false,
            size: 1024,
            direct_counter: None,
            direct_meter: None,
            implementation: None,
            selector_keys: Vec::new(),
            hit_slot,
            action_slot: hit_slot + 1,
            meter_out: None,
            add_on_miss: false,
            idle: IdleTimeout::None,
        };
        let mut default_expr = None;
        let mut entries = None;
        let mut largest_wins = true;
        let mut priority_delta = 1i64;
        for p in props {
            match &p.kind {
                ast::TablePropKind::Key(keys) => {
                    for k in keys {
                        let te = self.expr(&k.expr, None)?;
                        let width = match &te.ty {
                            Ty::Bits(a) => a.width,
                            Ty::Bool => 1,
                            Ty::Enum(e) if self.enums[*e as usize].repr.is_some() => {
                                self.enums[*e as usize].repr.map_or(0, |r| r.width)
                            }
                            Ty::Error | Ty::Enum(_) => 32,
                            t => {
                                return err(
                                    k.expr.loc,
                                    format!("a key cannot be `{}`", self.ty_name(t)),
                                );
                            }
                        };
                        let kind = match k.match_kind.text.as_str() {
                            "exact" => MatchKind::Exact,
                            "ternary" => MatchKind::Ternary,
                            "lpm" => MatchKind::Lpm,
                            "range" => MatchKind::Range,
                            "optional" => MatchKind::Optional,
                            "selector" => {
                                // Selector keys feed the action selector's hash; they do not
                                // match.
                                self.leaves(&k.expr, &mut t.selector_keys)?;
                                continue;
                            }
                            other => {
                                return unsupported(
                                    k.match_kind.loc,
                                    format!("match kind `{other}`"),
                                );
                            }
                        };
                        let kname = anno_string(&k.annotations, "name")
                            .unwrap_or_else(|| self.key_name(&k.expr));
                        t.keys.push(KeyIr { name: kname, ex: te.ex, width, kind });
                    }
                }
                ast::TablePropKind::Actions(refs) => {
                    for r in refs {
                        let (aname, args, loc) = match &r.expr.kind {
                            ExprKind::Name(n) => (n.clone(), Vec::new(), r.expr.loc),
                            ExprKind::Call { callee, args, .. } => match &callee.kind {
                                ExprKind::Name(n) => (n.clone(), args.clone(), callee.loc),
                                _ => return err(r.loc, "an action name is needed here"),
                            },
                            _ => return err(r.loc, "an action name is needed here"),
                        };
                        let (aid, params) = match self.lookup(&aname) {
                            Some(Ent::Action(a, ps)) => (*a, ps.clone()),
                            _ => return err(loc, format!("no action `{aname}`")),
                        };
                        let mut bound = Vec::new();
                        for (i, a) in args.iter().enumerate() {
                            let Some(p) = params.get(i) else {
                                return err(a.loc, "too many arguments");
                            };
                            if p.dir == Direction::None {
                                return unsupported(
                                    a.loc,
                                    "action data bound in an `actions` list",
                                );
                            }
                            if matches!(p.dir, Direction::Out | Direction::InOut) {
                                return unsupported(
                                    a.loc,
                                    "out arguments bound in an `actions` list",
                                );
                            }
                            bound.extend(self.assign_into(p.place.clone(), &p.ty, &a.value)?);
                        }
                        t.actions.push(TableAction {
                            action: aid,
                            bound,
                            default_only: has_anno(&r.annotations, "defaultonly"),
                            table_only: has_anno(&r.annotations, "tableonly"),
                        });
                    }
                }
                ast::TablePropKind::Entries(es) => {
                    entries = Some(es);
                    t.entries_const = p.is_const;
                }
                ast::TablePropKind::Other { name: pn, value } => match pn.text.as_str() {
                    "default_action" => {
                        default_expr = Some(value);
                        t.default_const = p.is_const;
                    }
                    "size" => t.size = self.const_u32(value)? as usize,
                    "counters" => t.direct_counter = Some(self.instance_ref(value, &t.name)?),
                    "meters" => t.direct_meter = Some(self.instance_ref(value, &t.name)?),
                    "implementation" | "pna_implementation" => {
                        t.implementation = Some(self.instance_ref(value, &t.name)?);
                        let k = &self.out.instances[t.implementation.unwrap_or(0) as usize].kind;
                        if !matches!(
                            k,
                            InstanceKind::ActionProfile(_) | InstanceKind::ActionSelector { .. }
                        ) {
                            return err(
                                value.loc,
                                "`implementation` needs an action_profile or action_selector",
                            );
                        }
                    }
                    "largest_priority_wins" => largest_wins = self.const_i128(value)? != 0,
                    "priority_delta" => priority_delta = self.const_i128(value)? as i64,
                    "pna_direct_counter" => {
                        t.direct_counter = Some(self.instance_ref(value, &t.name)?);
                    }
                    "pna_direct_meter" => t.direct_meter = Some(self.instance_ref(value, &t.name)?),
                    "add_on_miss" => t.add_on_miss = self.const_i128(value)? != 0,
                    "support_timeout" | "idle_timeout" | "idle_timeout_with_auto_delete" => {
                        let on = self.const_i128(value)? != 0;
                        t.idle = match (on, pn.text.as_str()) {
                            (false, _) => t.idle,
                            (true, "idle_timeout_with_auto_delete") => IdleTimeout::AutoDelete,
                            (true, _) => IdleTimeout::Notify,
                        };
                    }
                    "pna_idle_timeout" => {
                        t.idle = match self.enum_member_index(value)? {
                            0 => IdleTimeout::None,
                            1 => IdleTimeout::Notify,
                            _ => IdleTimeout::AutoDelete,
                        };
                    }
                    "psa_direct_counter" | "psa_direct_meter" => {}
                    _ => {}
                },
            }
        }
        // The default action: NoAction unless given.
        t.default = match default_expr {
            Some(e) => self.action_call(&mut t, e, true)?,
            None => {
                let noaction = ast::Expr { kind: ExprKind::Name("NoAction".into()), loc: name.loc };
                if !matches!(self.lookup("NoAction"), Some(Ent::Action(..))) {
                    return err(
                        name.loc,
                        "the table has no default_action and NoAction is not declared",
                    );
                }
                self.action_call(&mut t, &noaction, true)?
            }
        };
        if let Some(es) = entries {
            let n = es.len() as i64;
            let mut last: Option<i64> = None;
            for (i, e) in es.iter().enumerate() {
                let matches = self.entry_keys(&t, &e.keyset, e.loc)?;
                let call = self.action_call(&mut t, &e.action, false)?;
                let explicit = match &e.priority {
                    Some(p) => Some(self.const_i128(p)? as i64),
                    None => anno_ints(&e.annotations, "priority").and_then(|v| v.first().copied()),
                };
                let prio = match explicit {
                    Some(p) => p,
                    None => match last {
                        None => n - i as i64,
                        Some(l) => {
                            if largest_wins {
                                l - priority_delta
                            } else {
                                l + priority_delta
                            }
                        }
                    },
                };
                last = Some(prio);
                let prio =
                    if largest_wins || explicit.is_none() && last.is_none() { prio } else { -prio };
                t.entries.push(ConstEntry { matches, priority: Some(prio), call });
            }
        }
        let _ = id;
        self.out.tables.push(t);
        self.bind(&name.text, Ent::Table(id));
        Ok(())
    }

    /// The extern instance a table property names, or creates (`counters =
    /// direct_counter(CounterType.packets)`, named after the table).
    fn instance_ref(&mut self, e: &ast::Expr, table: &str) -> R<u32> {
        match &e.kind {
            ExprKind::Name(n) => match self.lookup(n) {
                Some(Ent::Extern(id, _)) => Ok(*id),
                _ => err(e.loc, format!("`{n}` is not an extern instance")),
            },
            ExprKind::Call { callee, args, type_args } => {
                let tname = match &callee.kind {
                    ExprKind::Name(n) => n.clone(),
                    _ => return err(e.loc, "an extern instantiation is needed here"),
                };
                let mut targs = Vec::new();
                for t in type_args {
                    targs.push(self.resolve_ty(t)?);
                }
                let kind = self.extern_instance(&tname, &targs, args, e.loc)?;
                let id = self.out.instances.len() as u32;
                self.out.instances.push(InstanceIr {
                    name: format!("{table}_{tname}"),
                    kind,
                    id: None,
                });
                Ok(id)
            }
            _ => err(e.loc, "an extern instance is needed here"),
        }
    }

    fn key_name(&self, e: &ast::Expr) -> String {
        match &e.kind {
            ExprKind::Name(n) => n.clone(),
            ExprKind::Member { base, member } => format!("{}.{}", self.key_name(base), member.text),
            ExprKind::Index { base, index } => {
                format!("{}[{}]", self.key_name(base), self.src(index.loc))
            }
            ExprKind::Call { callee, args, .. } if args.is_empty() => match &callee.kind {
                ExprKind::Member { base, member } if member.text == "isValid" => {
                    format!("{}.$valid$", self.key_name(base))
                }
                _ => self.src(e.loc),
            },
            _ => self.src(e.loc),
        }
    }

    fn src(&self, loc: Loc) -> String {
        self.text
            .get(loc.start as usize..loc.end as usize)
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn entry_keys(&mut self, t: &TableIr, ks: &[ast::Expr], loc: Loc) -> R<Vec<FieldMatch>> {
        let items: Vec<&ast::Expr> = if ks.len() == 1 && t.keys.len() != 1 {
            match &ks[0].kind {
                ExprKind::List(items) => items.iter().collect(),
                ExprKind::Default | ExprKind::DontCare => vec![&ks[0]; t.keys.len()],
                _ => vec![&ks[0]],
            }
        } else {
            ks.iter().collect()
        };
        if items.len() != t.keys.len() {
            return err(
                loc,
                format!("the entry has {} key values, the table {}", items.len(), t.keys.len()),
            );
        }
        let mut out = Vec::new();
        for (k, e) in t.keys.iter().zip(items) {
            let ty = Ty::Bits(Arith { width: k.width, signed: false });
            let m = mask(k.width);
            let any = matches!(e.kind, ExprKind::Default | ExprKind::DontCare);
            let fm = match k.kind {
                MatchKind::Exact => FieldMatch::Exact(self.const_key(e, &ty)?),
                MatchKind::Optional => {
                    if any {
                        FieldMatch::Optional(None)
                    } else {
                        FieldMatch::Optional(Some(self.const_key(e, &ty)?))
                    }
                }
                MatchKind::Ternary | MatchKind::Lpm => {
                    let (v, mk) = if any {
                        (0, 0)
                    } else if let ExprKind::Binary { op: BinOp::Mask, lhs, rhs } = &e.kind {
                        (self.const_key(lhs, &ty)?, self.const_key(rhs, &ty)?)
                    } else {
                        (self.const_key(e, &ty)?, m)
                    };
                    if k.kind == MatchKind::Lpm {
                        let len = mk.count_ones();
                        if mk != (mask(len) << (k.width - len)) & m && len != 0 {
                            return err(e.loc, "an lpm mask must be a prefix");
                        }
                        FieldMatch::Lpm { value: v & mk, len }
                    } else {
                        FieldMatch::Ternary { value: v & mk, mask: mk }
                    }
                }
                MatchKind::Range => {
                    if any {
                        FieldMatch::Range { lo: 0, hi: m }
                    } else if let ExprKind::Binary { op: BinOp::Range, lhs, rhs } = &e.kind {
                        FieldMatch::Range {
                            lo: self.const_key(lhs, &ty)?,
                            hi: self.const_key(rhs, &ty)?,
                        }
                    } else {
                        let v = self.const_key(e, &ty)?;
                        FieldMatch::Range { lo: v, hi: v }
                    }
                }
            };
            out.push(fm);
        }
        Ok(out)
    }

    fn const_key(&mut self, e: &ast::Expr, ty: &Ty) -> R<u128> {
        let te = self.expr(e, Some(ty))?;
        let te = match te.ty {
            Ty::Bool | Ty::Enum(_) | Ty::Error => te,
            _ => self.coerce(te, ty, e.loc)?,
        };
        te.konst().map_or_else(|| err(e.loc, "a key value must be a constant"), Ok)
    }

    /// `a(args)` in `default_action` or an entry: the action's index in the table and its
    /// data arguments.
    fn action_call(&mut self, t: &mut TableIr, e: &ast::Expr, default: bool) -> R<ActionCall> {
        let (aname, args, loc) = match &e.kind {
            ExprKind::Name(n) => (n.clone(), Vec::new(), e.loc),
            ExprKind::Call { callee, args, .. } => match &callee.kind {
                ExprKind::Name(n) => (n.clone(), args.clone(), callee.loc),
                _ => return err(e.loc, "an action call is needed here"),
            },
            _ => return err(e.loc, "an action call is needed here"),
        };
        let (aid, params) = match self.lookup(&aname) {
            Some(Ent::Action(a, ps)) => (*a, ps.clone()),
            _ => return err(loc, format!("no action `{aname}`")),
        };
        let idx = match t.actions.iter().position(|a| a.action == aid) {
            Some(i) => i,
            None => {
                if default && aname == "NoAction" {
                    t.actions.push(TableAction {
                        action: aid,
                        bound: Vec::new(),
                        default_only: false,
                        table_only: false,
                    });
                    t.actions.len() - 1
                } else {
                    return err(loc, format!("action `{aname}` is not in the table's actions"));
                }
            }
        };
        let n_bound = t.actions[idx].bound.len();
        let data: Vec<&ParamInfo> = params.iter().filter(|p| p.dir == Direction::None).collect();
        let given = &args[n_bound.min(args.len())..];
        if given.len() != data.len() {
            return err(e.loc, format!("action `{aname}` needs {} data arguments", data.len()));
        }
        let mut vals = Vec::new();
        for (p, a) in data.iter().zip(given) {
            let te = self.expr(&a.value, Some(&p.ty))?;
            let te = self.coerce(te, &p.ty, a.loc)?;
            match te.konst() {
                Some(v) => vals.push(v),
                None => return err(a.loc, "action data here must be a constant"),
            }
        }
        Ok(ActionCall { action: idx as u32, args: vals })
    }

    // ---------------------------------------------------------------- statements

    fn block(&mut self, stmts: &'a [ast::Stmt]) -> R<Vec<St>> {
        self.push();
        let mut out = Vec::new();
        let r = (|| {
            for s in stmts {
                self.stmt(s, &mut out)?;
            }
            Ok(())
        })();
        self.pop();
        r.map(|_| out)
    }

    fn stmt(&mut self, s: &'a ast::Stmt, out: &mut Vec<St>) -> R<()> {
        match &s.kind {
            StmtKind::Block(b) => out.push(St::Block(self.block(&b.stmts)?)),
            StmtKind::Empty => {}
            StmtKind::Assign { lhs, op, rhs } => {
                if let ExprKind::Slice { base, hi, lo } = &lhs.kind {
                    let sl = self.slice_place(base, hi, lo, lhs.loc)?;
                    let sw = sl.width;
                    let cur = TE { ex: sl.read(), ty: Ty::Bits(sw) };
                    let v = self.expr(rhs, Some(&Ty::Bits(sw)))?;
                    let v = match op {
                        None => self.coerce(v, &Ty::Bits(sw), rhs.loc)?,
                        Some(op) => {
                            let r = self.binary(*op, cur, v, s.loc)?;
                            self.coerce(r, &Ty::Bits(sw), s.loc)?
                        }
                    };
                    out.push(sl.store(v.ex));
                    return Ok(());
                }
                let (place, ty) = self.place(lhs)?;
                match op {
                    None => {
                        let sts = self.assign_into(place.clone(), &ty, rhs)?;
                        self.note_write(lhs);
                        out.extend(sts);
                    }
                    Some(op) => {
                        let cur = TE { ex: Ex::Load(place.clone()), ty: ty.clone() };
                        let v = self.expr(rhs, Some(&ty))?;
                        let r = self.binary(*op, cur, v, s.loc)?;
                        let r = self.coerce(r, &ty, s.loc)?;
                        out.push(St::Set(place.clone(), r.ex));
                    }
                }
                self.union_fixup(lhs, &ty, out)?;
            }
            StmtKind::Call(e) => {
                let st = self.call_stmt(e)?;
                out.push(st);
            }
            StmtKind::If { cond, then, els } => {
                let c = self.expr(cond, Some(&Ty::Bool))?;
                let c = self.coerce(c, &bool_ty(), cond.loc)?;
                let mut t = Vec::new();
                self.push();
                let r = self.stmt(then, &mut t);
                self.pop();
                r?;
                let mut f = Vec::new();
                if let Some(e) = els {
                    self.push();
                    let r = self.stmt(e, &mut f);
                    self.pop();
                    r?;
                }
                out.push(St::If(c.ex, t, f));
            }
            StmtKind::Switch { expr, cases } => out.push(self.switch(expr, cases, s.loc)?),
            StmtKind::Exit => out.push(St::Exit),
            StmtKind::Return(v) => match (v, self.ctx.ret.clone()) {
                (None, _) => out.push(St::Return),
                (Some(e), Some((slot, ty))) => {
                    let sts = self.assign_into(Place::at(slot), &ty, e)?;
                    out.extend(sts);
                    out.push(St::Return);
                }
                (Some(e), None) => return err(e.loc, "return with a value outside a function"),
            },
            StmtKind::Decl(d) => self.local_decl(d, out)?,
            StmtKind::Break => out.push(St::Break),
            StmtKind::Continue => out.push(St::Continue),
            StmtKind::For { init, cond, update, body } => {
                self.push();
                let r = (|| {
                    for s in init {
                        self.stmt(s, out)?;
                    }
                    let c = match cond {
                        Some(c) => {
                            let t = self.expr(c, Some(&Ty::Bool))?;
                            Some(self.coerce(t, &bool_ty(), c.loc)?.ex)
                        }
                        None => None,
                    };
                    let mut u = Vec::new();
                    for s in update {
                        self.stmt(s, &mut u)?;
                    }
                    let mut b = Vec::new();
                    self.stmt(body, &mut b)?;
                    out.push(St::Loop { cond: c, body: b, update: u });
                    Ok(())
                })();
                self.pop();
                r?;
            }
            StmtKind::ForIn { ty, name, range, body } => {
                self.push();
                let r = (|| {
                    let (lo, hi, vty) = match &range.kind {
                        ExprKind::Binary { op: BinOp::Range, lhs, rhs } => {
                            let want = match ty {
                                Some(t) => Some(self.resolve_ty(t)?),
                                None => None,
                            };
                            let l = self.expr(lhs, want.as_ref())?;
                            let h = self.expr(rhs, want.as_ref())?;
                            let vty = want.unwrap_or_else(|| {
                                if l.ty == Ty::Int { h.ty.clone() } else { l.ty.clone() }
                            });
                            if vty == Ty::Int {
                                return err(range.loc, "the loop variable needs a type");
                            }
                            (
                                self.coerce(l, &vty, range.loc)?,
                                self.coerce(h, &vty, range.loc)?,
                                vty,
                            )
                        }
                        _ => return unsupported(range.loc, "for-in over anything but a range"),
                    };
                    let slot = self.alloc(1);
                    self.bind(&name.text, Ent::Var(Place::at(slot), vty.clone()));
                    let a = self.arith(&vty);
                    out.push(St::Set(Place::at(slot), lo.ex));
                    let hi_slot = self.alloc(1);
                    out.push(St::Set(Place::at(hi_slot), hi.ex));
                    let mut b = Vec::new();
                    self.stmt(body, &mut b)?;
                    let cond = Ex::Cmp(
                        Cmp::Le,
                        Box::new(Ex::Load(Place::at(slot))),
                        Box::new(Ex::Load(Place::at(hi_slot))),
                        a,
                    );
                    // Stop before wrapping around at the top of the type.
                    let at_top = Ex::Cmp(
                        Cmp::Eq,
                        Box::new(Ex::Load(Place::at(slot))),
                        Box::new(Ex::Load(Place::at(hi_slot))),
                        a,
                    );
                    let done = self.alloc(1);
                    out.push(St::Set(Place::at(done), Ex::Const(0)));
                    let cond = Ex::And(
                        Box::new(Ex::Not(Box::new(Ex::Load(Place::at(done))))),
                        Box::new(cond),
                    );
                    let update = vec![
                        St::Set(Place::at(done), at_top),
                        St::Set(
                            Place::at(slot),
                            Ex::Bin(
                                Op::Add,
                                Box::new(Ex::Load(Place::at(slot))),
                                Box::new(Ex::Const(1)),
                                a,
                            ),
                        ),
                    ];
                    out.push(St::Loop { cond: Some(cond), body: b, update });
                    Ok(())
                })();
                self.pop();
                r?;
            }
        }
        Ok(())
    }

    /// After writing a member of a header union (`u.h = x`, `u.h.f = x`), the other members
    /// become invalid when it is valid.
    fn union_fixup(&mut self, lhs: &ast::Expr, _ty: &Ty, out: &mut Vec<St>) -> R<()> {
        let mut e = lhs;
        loop {
            match &e.kind {
                ExprKind::Member { base, .. } => {
                    if let Ok((bp, bty)) = self.place(base)
                        && let Ty::Union(u) = bty
                    {
                        // e is base.member where base is a union.
                        if let ExprKind::Member { member, .. } = &e.kind {
                            let members = self.union_members(u);
                            let (off, _) =
                                self.field(&Ty::Union(u), &member.text).unwrap_or((0, Ty::Void));
                            out.push(St::UnionFixup { union: bp, members, at: off });
                        }
                        return Ok(());
                    }
                    e = base;
                }
                ExprKind::Index { base, .. } | ExprKind::Slice { base, .. } => e = base,
                _ => return Ok(()),
            }
        }
    }

    fn union_members(&self, u: u32) -> Vec<u32> {
        let mut off = 0;
        let mut v = Vec::new();
        for (_, fty, _) in &self.aggs[u as usize].fields {
            v.push(off);
            off += self.slots(fty);
        }
        v
    }

    fn switch(&mut self, expr: &ast::Expr, cases: &'a [ast::SwitchCase], loc: Loc) -> R<St> {
        // `switch (t.apply().action_run)`: labels are action names.
        let table = match &expr.kind {
            ExprKind::Member { base, member } if member.text == "action_run" => match &base.kind {
                ExprKind::Call { callee, .. } => match &callee.kind {
                    ExprKind::Member { base: tb, member: m } if m.text == "apply" => match &tb.kind
                    {
                        ExprKind::Name(n) => match self.lookup(n) {
                            Some(Ent::Table(t)) => Some(*t),
                            _ => None,
                        },
                        _ => None,
                    },
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        };
        let (value, ty) = match table {
            Some(t) => (Ex::Apply(t, ApplyResult::ActionRun), None),
            None => {
                let te = self.expr(expr, None)?;
                if !matches!(te.ty, Ty::Bits(_) | Ty::Enum(_) | Ty::Error | Ty::Bool) {
                    return err(
                        expr.loc,
                        "switch needs a table's action_run, a bit string or an enum",
                    );
                }
                (te.ex, Some(te.ty))
            }
        };
        let mut arms: Vec<(Vec<u128>, u32)> = Vec::new();
        let mut blocks = Vec::new();
        let mut default = None;
        let mut pending: Vec<u128> = Vec::new();
        let mut pending_default = false;
        for c in cases {
            let is_default = matches!(c.label.kind, ExprKind::Default);
            if is_default {
                pending_default = true;
            } else {
                let v = match (table, &ty) {
                    (Some(t), _) => {
                        let n = match &c.label.kind {
                            ExprKind::Name(n) => n.clone(),
                            _ => return err(c.label.loc, "an action name is needed here"),
                        };
                        let aid = match self.lookup(&n) {
                            Some(Ent::Action(a, _)) => *a,
                            _ => return err(c.label.loc, format!("no action `{n}`")),
                        };
                        match self.out.tables[t as usize]
                            .actions
                            .iter()
                            .position(|a| a.action == aid)
                        {
                            Some(i) => i as u128,
                            None => {
                                return err(
                                    c.label.loc,
                                    format!("`{n}` is not an action of this table"),
                                );
                            }
                        }
                    }
                    (None, Some(ty)) => self.const_of_ty(&c.label, ty)?,
                    _ => 0,
                };
                pending.push(v);
            }
            if let Some(b) = &c.body {
                let bi = blocks.len() as u32;
                blocks.push(self.block(&b.stmts)?);
                if !pending.is_empty() {
                    arms.push((core::mem::take(&mut pending), bi));
                }
                if pending_default {
                    default = Some(bi);
                    pending_default = false;
                }
            }
        }
        if !pending.is_empty() || pending_default {
            // Trailing labels without a body do nothing.
            let bi = blocks.len() as u32;
            blocks.push(Vec::new());
            if !pending.is_empty() {
                arms.push((pending, bi));
            }
            if pending_default {
                default = Some(bi);
            }
        }
        let _ = loc;
        Ok(St::Switch(value, arms, default, blocks))
    }

    /// Store the value of `src` (of type `ty`) into `dst`: scalars by `Set`, places by `Copy`,
    /// lists and struct initialisers field by field.
    fn assign_into(&mut self, dst: Place, ty: &Ty, src: &ast::Expr) -> R<Vec<St>> {
        // A list or struct initialiser is built aside and copied in whole, so items that read
        // the destination see its old value (`h = {h.b, h.a}` swaps).
        if matches!(src.kind, ExprKind::List(_) | ExprKind::StructInit(_)) && !self.is_scalar(ty) {
            let n = self.slots(ty);
            let tmp = Place::at(self.alloc(n));
            let mut out = vec![St::Zero(tmp.clone(), n)];
            out.extend(self.assign_direct(tmp.clone(), ty, src)?);
            out.push(St::Copy(dst, tmp, n));
            return Ok(out);
        }
        self.assign_direct(dst, ty, src)
    }

    fn assign_direct(&mut self, dst: Place, ty: &Ty, src: &ast::Expr) -> R<Vec<St>> {
        let mut out = Vec::new();
        match &src.kind {
            ExprKind::List(items) if !self.is_scalar(ty) => {
                let fields = self.fields_of(ty, src.loc)?;
                if fields.len() != items.len() {
                    return err(
                        src.loc,
                        format!(
                            "`{}` has {} fields, the list {}",
                            self.ty_name(ty),
                            fields.len(),
                            items.len()
                        ),
                    );
                }
                if matches!(ty, Ty::Header(_)) {
                    out.push(St::Set(dst.clone(), Ex::Const(1)));
                }
                for ((off, fty), it) in fields.into_iter().zip(items) {
                    out.extend(self.assign_into(dst.offset(off), &fty, it)?);
                }
            }
            ExprKind::StructInit(items) if !self.is_scalar(ty) => {
                if matches!(ty, Ty::Header(_)) {
                    out.push(St::Set(dst.clone(), Ex::Const(1)));
                }
                for (n, it) in items {
                    let Some((off, fty)) = self.field(ty, &n.text) else {
                        return err(
                            n.loc,
                            format!("`{}` has no field `{}`", self.ty_name(ty), n.text),
                        );
                    };
                    out.extend(self.assign_into(dst.offset(off), &fty, it)?);
                }
            }
            _ => {
                let te = self.expr(src, Some(ty))?;
                if self.is_scalar(ty)
                    || matches!(ty, Ty::Varbit(_)) && !matches!(te.ex, Ex::Load(_))
                {
                    let te = self.coerce(te, ty, src.loc)?;
                    out.push(St::Set(dst, te.ex));
                } else {
                    if !self.same_type(&te.ty, ty) {
                        return err(
                            src.loc,
                            format!(
                                "cannot assign `{}` to `{}`",
                                self.ty_name(&te.ty),
                                self.ty_name(ty)
                            ),
                        );
                    }
                    match te.ex {
                        Ex::Load(p) => out.push(St::Copy(dst, p, self.slots(ty))),
                        Ex::Call(call, ret) => {
                            out.push(St::Call(call));
                            out.push(St::Copy(dst, Place::at(ret), self.slots(ty)));
                        }
                        Ex::Seq(sts, inner) => {
                            out.extend(sts.into_vec());
                            if let Ex::Load(p) = *inner {
                                out.push(St::Copy(dst, p, self.slots(ty)));
                            }
                        }
                        _ => return err(src.loc, "this value cannot be assigned"),
                    }
                }
            }
        }
        Ok(out)
    }

    fn same_type(&self, a: &Ty, b: &Ty) -> bool {
        a == b
    }

    /// The fields of an aggregate (slot offset, type) in order; tuples too.
    fn fields_of(&self, ty: &Ty, loc: Loc) -> R<Vec<(u32, Ty)>> {
        match ty {
            Ty::Header(i) | Ty::Struct(i) | Ty::Union(i) => {
                let mut off = u32::from(matches!(ty, Ty::Header(_)));
                let mut v = Vec::new();
                for (_, fty, _) in &self.aggs[*i as usize].fields {
                    v.push((off, fty.clone()));
                    off += self.slots(fty);
                }
                Ok(v)
            }
            Ty::Tuple(ts) => {
                let mut off = 0;
                let mut v = Vec::new();
                for t in ts {
                    v.push((off, t.clone()));
                    off += self.slots(t);
                }
                Ok(v)
            }
            Ty::Stack(e, n) => {
                let s = self.slots(e);
                Ok((0..*n).map(|i| (1 + i * s, (**e).clone())).collect())
            }
            _ => err(loc, format!("`{}` has no fields", self.ty_name(ty))),
        }
    }

    // ---------------------------------------------------------------- places

    /// An lvalue (or any storage the expression names).
    fn place(&mut self, e: &ast::Expr) -> R<(Place, Ty)> {
        match &e.kind {
            ExprKind::Name(n) => match self.lookup(n) {
                Some(Ent::Var(p, t)) => Ok((p.clone(), t.clone())),
                Some(_) => err(e.loc, format!("`{n}` is not a variable")),
                None => err(e.loc, format!("no variable `{n}`")),
            },
            ExprKind::Member { base, member } => {
                let (bp, bty) = self.place(base)?;
                if let Ty::Stack(elem, n) = &bty {
                    let stride = self.slots(elem);
                    return match member.text.as_str() {
                        "next" | "last" => {
                            let ni = Ex::Load(bp.clone());
                            let idx = if member.text == "last" {
                                Ex::Bin(Op::Sub, Box::new(ni), Box::new(Ex::Const(1)), A32)
                            } else {
                                ni
                            };
                            if bp.index.is_some() {
                                return unsupported(e.loc, "nested run-time indices");
                            }
                            Ok((
                                Place {
                                    base: bp.base + 1,
                                    index: Some(Box::new(DynIndex {
                                        index: idx,
                                        stride,
                                        count: *n,
                                    })),
                                },
                                (**elem).clone(),
                            ))
                        }
                        _ => err(
                            member.loc,
                            format!("a header stack has no member `{}`", member.text),
                        ),
                    };
                }
                match self.field(&bty, &member.text) {
                    Some((off, fty)) => Ok((bp.offset(off), fty)),
                    None => err(
                        member.loc,
                        format!("`{}` has no field `{}`", self.ty_name(&bty), member.text),
                    ),
                }
            }
            ExprKind::Index { base, index } => {
                let (bp, bty) = self.place(base)?;
                match &bty {
                    Ty::Stack(elem, n) => {
                        let stride = self.slots(elem);
                        let iv = self.expr(index, None)?;
                        if let Some(k) = iv.konst() {
                            let k = match &iv.ty {
                                Ty::Bits(a) => a.extend(k),
                                _ => k as i128,
                            };
                            if k < 0 || k >= i128::from(*n) {
                                return err(
                                    index.loc,
                                    format!("index {k} is out of the stack's bounds (size {n})"),
                                );
                            }
                            Ok((bp.offset(1 + k as u32 * stride), (**elem).clone()))
                        } else {
                            if bp.index.is_some() {
                                return unsupported(e.loc, "nested run-time indices");
                            }
                            Ok((
                                Place {
                                    base: bp.base + 1,
                                    index: Some(Box::new(DynIndex {
                                        index: iv.ex,
                                        stride,
                                        count: *n,
                                    })),
                                },
                                (**elem).clone(),
                            ))
                        }
                    }
                    Ty::Tuple(ts) => {
                        let k = self.const_u32(index)? as usize;
                        let Some(t) = ts.get(k) else {
                            return err(index.loc, "tuple index out of range");
                        };
                        let off: u32 = ts[..k].iter().map(|t| self.slots(t)).sum();
                        Ok((bp.offset(off), t.clone()))
                    }
                    _ => err(base.loc, "only header stacks and tuples can be indexed"),
                }
            }
            ExprKind::Slice { .. } => unsupported(e.loc, "assignment to a slice"),
            _ => err(e.loc, "this expression is not a place that can be written"),
        }
    }

    // ---------------------------------------------------------------- expressions

    /// Give an arbitrary-precision constant the type `want`, or check that `te` has it.
    fn coerce(&self, te: TE, want: &Ty, loc: Loc) -> R<TE> {
        match (&te.ty, want) {
            (Ty::Int, Ty::Bits(a)) => match te.konst() {
                Some(v) => Ok(TE { ex: Ex::Const(v & a.mask()), ty: want.clone() }),
                None => err(loc, "an integer of unknown width"),
            },
            (Ty::Int, Ty::Int) => Ok(te),
            (Ty::Int, Ty::Bool) => err(loc, "an integer is not a bool"),
            (Ty::Bits(a), Ty::Bits(b)) if a.width == b.width => {
                Ok(TE { ex: te.ex, ty: want.clone() })
            }
            (Ty::Bits(a), Ty::Bits(b)) => err(
                loc,
                format!(
                    "width mismatch: `{}` where `{}` is expected",
                    self.ty_name(&Ty::Bits(*a)),
                    self.ty_name(&Ty::Bits(*b))
                ),
            ),
            (Ty::Enum(e), Ty::Bits(b))
                if self.enums[*e as usize].repr.is_some_and(|r| r.width == b.width) =>
            {
                Ok(TE { ex: te.ex, ty: want.clone() })
            }
            (Ty::Int, Ty::Enum(e)) if self.enums[*e as usize].repr.is_some() => {
                let r = self.enums[*e as usize].repr.unwrap_or(A32);
                match te.konst() {
                    Some(v) => Ok(TE { ex: Ex::Const(v & r.mask()), ty: want.clone() }),
                    None => err(loc, "an integer of unknown width"),
                }
            }
            (a, b) if a == b => Ok(te),
            (_, Ty::Var(_)) | (_, Ty::DontCare) => Ok(te),
            (a, b) => {
                err(loc, format!("`{}` where `{}` is expected", self.ty_name(a), self.ty_name(b)))
            }
        }
    }

    /// `base[hi:lo]` as a place that can be read and written.
    fn slice_place(
        &mut self,
        base: &ast::Expr,
        hi: &ast::Expr,
        lo: &ast::Expr,
        loc: Loc,
    ) -> R<SlicePlace> {
        let (place, ty) = self.place(base)?;
        let Ty::Bits(whole) = ty else {
            return err(base.loc, "only bit strings can be sliced");
        };
        let h = self.const_u32(hi)?;
        let l = self.const_u32(lo)?;
        if h < l || h >= whole.width {
            return err(loc, format!("slice [{h}:{l}] out of a {}-bit value", whole.width));
        }
        Ok(SlicePlace { place, whole, lo: l, width: Arith { width: h - l + 1, signed: false } })
    }

    /// The variable at the root of a place expression (`m` in `m.a.b[1]`), as its first slot.
    fn root_slot(&self, e: &ast::Expr) -> Option<Slot> {
        let mut e = e;
        loop {
            match &e.kind {
                ExprKind::Name(n) => {
                    return match self.lookup(n) {
                        Some(Ent::Var(p, _)) => Some(p.base),
                        _ => None,
                    };
                }
                ExprKind::Member { base, .. }
                | ExprKind::Index { base, .. }
                | ExprKind::Slice { base, .. } => e = base,
                _ => return None,
            }
        }
    }

    /// A read of `e`: warn once if it reads a local that was never written.
    fn note_read(&mut self, e: &ast::Expr) {
        if self.uninit.is_empty() {
            return;
        }
        if let Some(s) = self.root_slot(e)
            && let Some((name, _)) = self.uninit.remove(&s)
        {
            self.warnings.push(Warning {
                loc: e.loc,
                message: format!("`{name}` may be read before it is written (it reads as 0)"),
            });
        }
    }

    /// A write of `e`: its variable is initialised from here on.
    fn note_write(&mut self, e: &ast::Expr) {
        if let Some(s) = self.root_slot(e) {
            self.uninit.remove(&s);
        }
    }

    fn expr(&mut self, e: &ast::Expr, want: Option<&Ty>) -> R<TE> {
        if matches!(
            e.kind,
            ExprKind::Name(_)
                | ExprKind::Member { .. }
                | ExprKind::Index { .. }
                | ExprKind::Slice { .. }
        ) {
            self.note_read(e);
        }
        match &e.kind {
            ExprKind::Int(lit) => {
                let Some(v) = lit.value.to_u128() else {
                    return unsupported(e.loc, "integer literals wider than 128 bits");
                };
                match lit.width {
                    Some(w) => {
                        if w.bits > 128 {
                            return unsupported(e.loc, "bit strings wider than 128 bits");
                        }
                        let a = Arith { width: w.bits, signed: w.signed };
                        Ok(TE { ex: Ex::Const(v & a.mask()), ty: Ty::Bits(a) })
                    }
                    None => {
                        if v > i128::MAX as u128 {
                            if let Some(Ty::Bits(a)) = want {
                                return Ok(TE { ex: Ex::Const(v & a.mask()), ty: Ty::Bits(*a) });
                            }
                            return unsupported(e.loc, "integer constants above 2^127");
                        }
                        Ok(TE { ex: Ex::Const(v), ty: Ty::Int })
                    }
                }
            }
            ExprKind::Bool(b) => Ok(TE { ex: Ex::Const(u128::from(*b)), ty: Ty::Bool }),
            ExprKind::Str(_) => Ok(TE { ex: Ex::Const(0), ty: Ty::Str }),
            ExprKind::Name(n) => self.name_expr(n, e.loc),
            ExprKind::This => unsupported(e.loc, "`this`"),
            ExprKind::Default | ExprKind::DontCare => Ok(TE { ex: Ex::Const(0), ty: Ty::DontCare }),
            ExprKind::Member { base, member } => self.member_expr(e, base, member, want),
            ExprKind::Index { .. } => {
                let (p, t) = self.place(e)?;
                Ok(TE { ex: Ex::Load(p), ty: t })
            }
            ExprKind::Slice { base, hi, lo } => {
                let b = self.expr(base, None)?;
                let a = match b.ty {
                    Ty::Bits(a) => a,
                    Ty::Int => {
                        return match b.konst() {
                            Some(v) => {
                                let h = self.const_u32(hi)?;
                                let l = self.const_u32(lo)?;
                                if h < l || h >= 128 {
                                    return err(e.loc, "bad slice bounds");
                                }
                                let w = h - l + 1;
                                let a = Arith { width: w, signed: false };
                                Ok(TE {
                                    ex: Ex::Const(((v as i128) >> l) as u128 & a.mask()),
                                    ty: Ty::Bits(a),
                                })
                            }
                            None => err(e.loc, "slice of a non-constant integer"),
                        };
                    }
                    _ => return err(base.loc, "only bit strings can be sliced"),
                };
                let h = self.const_u32(hi)?;
                let l = self.const_u32(lo)?;
                if h < l || h >= a.width {
                    return err(e.loc, format!("slice [{h}:{l}] out of a {}-bit value", a.width));
                }
                let w = h - l + 1;
                let ra = Arith { width: w, signed: false };
                Ok(self.fold(TE { ex: Ex::Slice(Box::new(b.ex), l, ra.mask()), ty: Ty::Bits(ra) }))
            }
            ExprKind::Call { callee, type_args, args } => {
                self.call_expr(e, callee, type_args, args)
            }
            ExprKind::Cast { ty, expr } => {
                let t = self.resolve_ty(ty)?;
                let v = self.expr(expr, Some(&t))?;
                self.cast(v, &t, e.loc)
            }
            ExprKind::Unary { op, expr } => {
                let v = self.expr(expr, want)?;
                match op {
                    ast::UnOp::Not => {
                        if v.ty != Ty::Bool {
                            return err(e.loc, "`!` needs a bool");
                        }
                        Ok(self.fold(TE { ex: Ex::Not(Box::new(v.ex)), ty: Ty::Bool }))
                    }
                    ast::UnOp::BitNot => match v.ty {
                        Ty::Bits(a) => {
                            Ok(self.fold(TE { ex: Ex::BitNot(Box::new(v.ex), a), ty: v.ty }))
                        }
                        Ty::Int => match v.konst() {
                            Some(x) => Ok(TE { ex: Ex::Const(!(x as i128) as u128), ty: Ty::Int }),
                            None => err(e.loc, "`~` of an integer of unknown width"),
                        },
                        _ => err(e.loc, "`~` needs a bit string"),
                    },
                    ast::UnOp::Neg => match v.ty {
                        Ty::Bits(a) => {
                            Ok(self.fold(TE { ex: Ex::Neg(Box::new(v.ex), a), ty: v.ty }))
                        }
                        Ty::Int => match v.konst() {
                            Some(x) => Ok(TE {
                                ex: Ex::Const((x as i128).wrapping_neg() as u128),
                                ty: Ty::Int,
                            }),
                            None => err(e.loc, "`-` of an unknown integer"),
                        },
                        _ => err(e.loc, "`-` needs a number"),
                    },
                    ast::UnOp::Plus => Ok(v),
                }
            }
            ExprKind::Binary { op, lhs, rhs } => {
                let (l, r) = self.operands(*op, lhs, rhs, want)?;
                self.binary(*op, l, r, e.loc)
            }
            ExprKind::Ternary { cond, then, els } => {
                let c = self.expr(cond, Some(&Ty::Bool))?;
                let c = self.coerce(c, &bool_ty(), cond.loc)?;
                let mut t = self.expr(then, want)?;
                let mut f = self.expr(els, want)?;
                if t.ty == Ty::Int && f.ty != Ty::Int {
                    t = self.coerce(t, &f.ty.clone(), then.loc)?;
                } else if f.ty == Ty::Int && t.ty != Ty::Int {
                    f = self.coerce(f, &t.ty.clone(), els.loc)?;
                }
                if t.ty == Ty::Int
                    && f.ty == Ty::Int
                    && let Some(w @ (Ty::Bits(_) | Ty::Enum(_))) = want
                    && c.konst().is_none()
                {
                    t = self.coerce(t, w, then.loc)?;
                    f = self.coerce(f, w, els.loc)?;
                }
                if t.ty == Ty::Int && f.ty == Ty::Int {
                    return match c.konst() {
                        Some(cv) => Ok(if cv != 0 { t } else { f }),
                        None => err(e.loc, "`?:` with integers of unknown width"),
                    };
                }
                if !self.is_scalar(&t.ty) {
                    // Composite values: the chosen one is copied into a temporary.
                    if !self.same_type(&t.ty, &f.ty) {
                        return err(e.loc, "the two sides of `?:` have different types");
                    }
                    let n = self.slots(&t.ty);
                    let tmp = Place::at(self.alloc(n));
                    let (mut ts, pt) = self.materialize(t.ex, e.loc)?;
                    let (mut fs, pf) = self.materialize(f.ex, e.loc)?;
                    ts.push(St::Copy(tmp.clone(), pt, n));
                    fs.push(St::Copy(tmp.clone(), pf, n));
                    let st = St::If(c.ex, ts, fs);
                    return Ok(TE {
                        ex: Ex::Seq(vec![st].into_boxed_slice(), Box::new(Ex::Load(tmp))),
                        ty: t.ty,
                    });
                }
                let f = self.coerce(f, &t.ty, els.loc)?;
                let ty = t.ty.clone();
                Ok(self
                    .fold(TE { ex: Ex::Cond(Box::new(c.ex), Box::new(t.ex), Box::new(f.ex)), ty }))
            }
            ExprKind::List(_) | ExprKind::StructInit(_) => match want {
                Some(t) if !self.is_scalar(t) => {
                    let n = self.slots(t);
                    let tmp = Place::at(self.alloc(n));
                    let sts = self.assign_into(tmp.clone(), t, e)?;
                    Ok(TE {
                        ex: Ex::Seq(sts.into_boxed_slice(), Box::new(Ex::Load(tmp))),
                        ty: t.clone(),
                    })
                }
                _ => err(e.loc, "a list or struct initialiser needs a known type here"),
            },
            ExprKind::Type(_) => err(e.loc, "a type is not a value"),
        }
    }

    fn operands(
        &mut self,
        op: BinOp,
        lhs: &ast::Expr,
        rhs: &ast::Expr,
        want: Option<&Ty>,
    ) -> R<(TE, TE)> {
        let shift = matches!(op, BinOp::Shl | BinOp::Shr);
        let cmp =
            matches!(op, BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge);
        let lwant = if cmp || op == BinOp::Concat || op == BinOp::And || op == BinOp::Or {
            None
        } else {
            want
        };
        let mut l = self.expr(lhs, lwant)?;
        let r_want = if shift || op == BinOp::Concat {
            None
        } else if l.ty != Ty::Int {
            Some(l.ty.clone())
        } else {
            lwant.cloned()
        };
        let mut r = self.expr(rhs, r_want.as_ref())?;
        if !shift && op != BinOp::Concat {
            if l.ty == Ty::Int && r.ty != Ty::Int && self.is_scalar(&r.ty) {
                l = self.coerce(l, &r.ty.clone(), lhs.loc)?;
            } else if r.ty == Ty::Int && l.ty != Ty::Int && self.is_scalar(&l.ty) {
                r = self.coerce(r, &l.ty.clone(), rhs.loc)?;
            } else if l.ty == Ty::Int
                && r.ty == Ty::Int
                && !cmp
                && let Some(w @ Ty::Bits(_)) = want
                && (l.konst().is_none() || r.konst().is_none())
            {
                l = self.coerce(l, w, lhs.loc)?;
                r = self.coerce(r, w, rhs.loc)?;
            }
        }
        Ok((l, r))
    }

    fn binary(&mut self, op: BinOp, l: TE, r: TE, loc: Loc) -> R<TE> {
        use BinOp as B;
        // Both arbitrary-precision constants: fold in i128.
        if l.ty == Ty::Int && r.ty == Ty::Int {
            let (Some(a), Some(b)) = (l.konst(), r.konst()) else {
                return err(loc, "an integer of unknown width");
            };
            let (a, b) = (a as i128, b as i128);
            let v: i128 = match op {
                B::Add => a.checked_add(b).ok_or(()).or_else(|_| err(loc, "constant overflow"))?,
                B::Sub => a.checked_sub(b).ok_or(()).or_else(|_| err(loc, "constant overflow"))?,
                B::Mul => a.checked_mul(b).ok_or(()).or_else(|_| err(loc, "constant overflow"))?,
                B::Div | B::Mod => {
                    if b <= 0 || a < 0 {
                        return err(loc, "division of constants needs positive operands");
                    }
                    if op == B::Div { a / b } else { a % b }
                }
                B::Shl => {
                    if !(0..127).contains(&b) {
                        return err(loc, "shift amount out of range");
                    }
                    a.checked_shl(b as u32)
                        .filter(|v| v >> b == a)
                        .ok_or(())
                        .or_else(|_| err(loc, "constant overflow"))?
                }
                B::Shr => {
                    if b < 0 {
                        return err(loc, "negative shift");
                    }
                    a >> b.min(127)
                }
                B::BitAnd => a & b,
                B::BitOr => a | b,
                B::BitXor => a ^ b,
                B::Eq => return Ok(TE { ex: Ex::Const(u128::from(a == b)), ty: Ty::Bool }),
                B::Ne => return Ok(TE { ex: Ex::Const(u128::from(a != b)), ty: Ty::Bool }),
                B::Lt => return Ok(TE { ex: Ex::Const(u128::from(a < b)), ty: Ty::Bool }),
                B::Le => return Ok(TE { ex: Ex::Const(u128::from(a <= b)), ty: Ty::Bool }),
                B::Gt => return Ok(TE { ex: Ex::Const(u128::from(a > b)), ty: Ty::Bool }),
                B::Ge => return Ok(TE { ex: Ex::Const(u128::from(a >= b)), ty: Ty::Bool }),
                B::AddSat | B::SubSat => return err(loc, "saturating arithmetic needs a width"),
                B::Concat => return err(loc, "`++` needs bit strings of known width"),
                B::And | B::Or => return err(loc, "`&&` and `||` need bools"),
                B::Mask | B::Range => return err(loc, "`&&&` and `..` only go in keysets"),
            };
            return Ok(TE { ex: Ex::Const(v as u128), ty: Ty::Int });
        }
        let ty = l.ty.clone();
        let te = match op {
            B::And | B::Or => {
                if l.ty != Ty::Bool || r.ty != Ty::Bool {
                    return err(loc, "`&&` and `||` need bools");
                }
                let ex = if op == B::And {
                    Ex::And(Box::new(l.ex), Box::new(r.ex))
                } else {
                    Ex::Or(Box::new(l.ex), Box::new(r.ex))
                };
                TE { ex, ty: Ty::Bool }
            }
            B::Eq | B::Ne => {
                if !self.is_scalar(&l.ty) && !matches!(l.ty, Ty::Varbit(_)) {
                    if !self.same_type(&l.ty, &r.ty) {
                        return err(loc, "`==` of different types");
                    }
                    let shape = Box::new(self.shape(&l.ty));
                    let (mut pre, a) = self.materialize(l.ex, loc)?;
                    let (pre_b, b) = self.materialize(r.ex, loc)?;
                    pre.extend(pre_b);
                    let eq = Ex::EqShape(a, b, shape);
                    let eq = if pre.is_empty() {
                        eq
                    } else {
                        Ex::Seq(pre.into_boxed_slice(), Box::new(eq))
                    };
                    let ex = if op == B::Eq { eq } else { Ex::Not(Box::new(eq)) };
                    return Ok(TE { ex, ty: Ty::Bool });
                }
                let r = self.coerce(r, &ty, loc)?;
                let c = if op == B::Eq { Cmp::Eq } else { Cmp::Ne };
                TE { ex: Ex::Cmp(c, Box::new(l.ex), Box::new(r.ex), self.arith(&ty)), ty: Ty::Bool }
            }
            B::Lt | B::Le | B::Gt | B::Ge => {
                let Ty::Bits(a) = ty else {
                    return err(loc, "ordering comparisons need bit strings");
                };
                let r = self.coerce(r, &ty, loc)?;
                let c = match op {
                    B::Lt => Cmp::Lt,
                    B::Le => Cmp::Le,
                    B::Gt => Cmp::Gt,
                    _ => Cmp::Ge,
                };
                TE { ex: Ex::Cmp(c, Box::new(l.ex), Box::new(r.ex), a), ty: Ty::Bool }
            }
            B::Shl | B::Shr => {
                let Ty::Bits(a) = ty else {
                    return err(loc, "shifting an integer of unknown width by a variable amount");
                };
                let r = match r.ty {
                    Ty::Int => match r.konst() {
                        Some(v) if (v as i128) >= 0 => TE { ex: Ex::Const(v), ty: Ty::Bits(A32) },
                        _ => return err(loc, "a shift amount must not be negative"),
                    },
                    Ty::Bits(ra) if !ra.signed => r,
                    _ => return err(loc, "a shift amount must be unsigned"),
                };
                let o = if op == B::Shl { Op::Shl } else { Op::Shr };
                TE { ex: Ex::Bin(o, Box::new(l.ex), Box::new(r.ex), a), ty }
            }
            B::Concat => {
                let (Ty::Bits(a), Ty::Bits(b)) = (&l.ty, &r.ty) else {
                    return err(loc, "`++` needs bit strings of known width");
                };
                let w = a.width + b.width;
                if w > 128 {
                    return unsupported(loc, "concatenations wider than 128 bits");
                }
                let ra = Arith { width: w, signed: a.signed };
                TE { ex: Ex::Concat(Box::new(l.ex), Box::new(r.ex), b.width), ty: Ty::Bits(ra) }
            }
            B::Mask | B::Range => return err(loc, "`&&&` and `..` only go in keysets"),
            _ => {
                let Ty::Bits(a) = ty else {
                    return err(loc, format!("arithmetic on `{}`", self.ty_name(&ty)));
                };
                let r = self.coerce(r, &ty, loc)?;
                let o = match op {
                    B::Add => Op::Add,
                    B::Sub => Op::Sub,
                    B::Mul => Op::Mul,
                    B::Div => Op::Div,
                    B::Mod => Op::Mod,
                    B::AddSat => Op::AddSat,
                    B::SubSat => Op::SubSat,
                    B::BitAnd => Op::And,
                    B::BitOr => Op::Or,
                    _ => Op::Xor,
                };
                TE { ex: Ex::Bin(o, Box::new(l.ex), Box::new(r.ex), a), ty }
            }
        };
        Ok(self.fold(te))
    }

    /// A composite value as statements that compute it and the place that then holds it.
    fn materialize(&mut self, ex: Ex, loc: Loc) -> R<(Vec<St>, Place)> {
        match ex {
            Ex::Load(p) => Ok((Vec::new(), p)),
            Ex::Seq(sts, inner) => match *inner {
                Ex::Load(p) => Ok((sts.into_vec(), p)),
                _ => unsupported(loc, "this composite value"),
            },
            Ex::Call(c, ret) => Ok((vec![St::Call(c)], Place::at(ret))),
            _ => unsupported(loc, "this composite value"),
        }
    }

    /// Fold an expression whose operands are constants.
    fn fold(&self, te: TE) -> TE {
        let all_const = match &te.ex {
            Ex::Bin(_, a, b, _)
            | Ex::Cmp(_, a, b, _)
            | Ex::Concat(a, b, _)
            | Ex::And(a, b)
            | Ex::Or(a, b) => matches!(**a, Ex::Const(_)) && matches!(**b, Ex::Const(_)),
            Ex::Not(a)
            | Ex::BitNot(a, _)
            | Ex::Neg(a, _)
            | Ex::Slice(a, _, _)
            | Ex::Cast(a, _, _)
            | Ex::NonZero(a) => {
                matches!(**a, Ex::Const(_))
            }
            Ex::Cond(c, a, b) => {
                matches!(**c, Ex::Const(_))
                    && matches!(**a, Ex::Const(_))
                    && matches!(**b, Ex::Const(_))
            }
            _ => false,
        };
        if !all_const {
            return te;
        }
        let v = crate::exec::eval_const(&te.ex);
        match v {
            Some(v) => TE { ex: Ex::Const(v), ty: te.ty },
            None => te,
        }
    }

    fn cast(&mut self, v: TE, t: &Ty, loc: Loc) -> R<TE> {
        let out = match (&v.ty, t) {
            (Ty::Int, Ty::Bits(a)) => match v.konst() {
                Some(x) => TE { ex: Ex::Const(x & a.mask()), ty: t.clone() },
                None => return err(loc, "cast of an unknown integer"),
            },
            (Ty::Bits(a), Ty::Bits(b)) => {
                TE { ex: Ex::Cast(Box::new(v.ex), *a, *b), ty: t.clone() }
            }
            (Ty::Bool, Ty::Bits(b)) if b.width == 1 => TE { ex: v.ex, ty: t.clone() },
            (Ty::Bits(a), Ty::Bool) if a.width == 1 => TE { ex: v.ex, ty: Ty::Bool },
            (Ty::Int, Ty::Bool) => match v.konst() {
                Some(0) => TE { ex: Ex::Const(0), ty: Ty::Bool },
                Some(1) => TE { ex: Ex::Const(1), ty: Ty::Bool },
                _ => return err(loc, "only 0 and 1 cast to bool"),
            },
            (Ty::Enum(e), Ty::Bits(b)) => match self.enums[*e as usize].repr {
                Some(r) => TE { ex: Ex::Cast(Box::new(v.ex), r, *b), ty: t.clone() },
                None => return err(loc, "a non-serializable enum cannot be cast"),
            },
            (Ty::Bits(a), Ty::Enum(e)) => match self.enums[*e as usize].repr {
                Some(r) => TE { ex: Ex::Cast(Box::new(v.ex), *a, r), ty: t.clone() },
                None => return err(loc, "cannot cast to a non-serializable enum"),
            },
            (Ty::Int, Ty::Enum(e)) => match (self.enums[*e as usize].repr, v.konst()) {
                (Some(r), Some(x)) => TE { ex: Ex::Const(x & r.mask()), ty: t.clone() },
                _ => return err(loc, "cannot cast to a non-serializable enum"),
            },
            (Ty::Int, Ty::Int) => v,
            (a, b) if a == b => v,
            (a, b)
                if !self.is_scalar(a)
                    && matches!(v.ex, Ex::Load(_) | Ex::Seq(..))
                    && self.slots(a) == self.slots(b) =>
            {
                TE { ex: v.ex, ty: t.clone() }
            }
            (a, b) => {
                return err(
                    loc,
                    format!("cannot cast `{}` to `{}`", self.ty_name(a), self.ty_name(b)),
                );
            }
        };
        Ok(self.fold(out))
    }

    fn name_expr(&mut self, n: &str, loc: Loc) -> R<TE> {
        match self.lookup(n) {
            Some(Ent::Var(p, t)) => Ok(TE { ex: Ex::Load(p.clone()), ty: t.clone() }),
            Some(Ent::Const(v)) => Ok(v.clone()),
            Some(_) => err(loc, format!("`{n}` is not a value")),
            None => err(loc, format!("unknown name `{n}`")),
        }
    }

    fn member_expr(
        &mut self,
        e: &ast::Expr,
        base: &ast::Expr,
        member: &ast::Name,
        _want: Option<&Ty>,
    ) -> R<TE> {
        // Type-qualified members: error.X, Enum.X.
        if let ExprKind::Name(n) = &base.kind {
            if n == "error" {
                return match self.errors.iter().position(|x| *x == member.text) {
                    Some(i) => Ok(TE { ex: Ex::Const(i as u128), ty: Ty::Error }),
                    None => err(member.loc, format!("no error `{}`", member.text)),
                };
            }
            if let Some(Ent::Type(Ty::Enum(id))) = self.lookup(n) {
                let id = *id;
                let en = &self.enums[id as usize];
                return match en.members.iter().find(|m| m.0 == member.text) {
                    Some((_, v)) => Ok(TE { ex: Ex::Const(*v), ty: Ty::Enum(id) }),
                    None => {
                        err(member.loc, format!("`{}` has no member `{}`", en.name, member.text))
                    }
                };
            }
        }
        // t.apply().hit / .miss / .action_run
        if let ExprKind::Call { callee, .. } = &base.kind
            && let ExprKind::Member { base: tb, member: m } = &callee.kind
            && m.text == "apply"
            && let ExprKind::Name(tn) = &tb.kind
            && let Some(Ent::Table(t)) = self.lookup(tn)
        {
            let t = *t;
            return match member.text.as_str() {
                "hit" => Ok(TE { ex: Ex::Apply(t, ApplyResult::Hit), ty: Ty::Bool }),
                "miss" => Ok(TE { ex: Ex::Apply(t, ApplyResult::Miss), ty: Ty::Bool }),
                "action_run" => err(member.loc, "action_run is only for switch"),
                _ => err(member.loc, format!("a table's result has no `{}`", member.text)),
            };
        }
        // Stack properties that are values.
        if matches!(member.text.as_str(), "size" | "lastIndex") {
            let (bp, bty) = self.place(base)?;
            if let Ty::Stack(_, n) = bty {
                return Ok(if member.text == "size" {
                    TE { ex: Ex::Const(u128::from(n)), ty: Ty::Bits(A32) }
                } else {
                    TE { ex: Ex::LastIndex(bp), ty: Ty::Bits(A32) }
                });
            }
        }
        // A field of a call's result: `pkt.lookahead<h_t>().f`, `f().x`.
        if let ExprKind::Call { .. } = &base.kind {
            let te = self.expr(base, None)?;
            let Some((off, fty)) = self.field(&te.ty, &member.text) else {
                return err(
                    member.loc,
                    format!("`{}` has no field `{}`", self.ty_name(&te.ty), member.text),
                );
            };
            return match te.ex {
                Ex::Seq(sts, inner) => match *inner {
                    Ex::Load(p) => {
                        Ok(TE { ex: Ex::Seq(sts, Box::new(Ex::Load(p.offset(off)))), ty: fty })
                    }
                    _ => err(e.loc, "this value has no fields"),
                },
                Ex::Call(call, ret) => Ok(TE {
                    ex: Ex::Seq(
                        vec![St::Call(call)].into_boxed_slice(),
                        Box::new(Ex::Load(Place::at(ret + off))),
                    ),
                    ty: fty,
                }),
                _ => err(e.loc, "this value has no fields"),
            };
        }
        let (p, t) = self.place(e)?;
        Ok(TE { ex: Ex::Load(p), ty: t })
    }

    // ---------------------------------------------------------------- calls

    fn call_stmt(&mut self, e: &ast::Expr) -> R<St> {
        let ExprKind::Call { callee, type_args, args } = &e.kind else {
            return err(e.loc, "not a call");
        };
        // Method calls on headers, stacks, tables, externs, packet_in/out, sub-blocks.
        if let ExprKind::Member { base, member } = &callee.kind {
            if let ExprKind::Name(n) = &base.kind {
                match self.lookup(n).cloned() {
                    Some(Ent::PacketIn) => return self.packet_in(member, type_args, args, e.loc),
                    Some(Ent::PacketOut) => {
                        if member.text != "emit" || args.len() != 1 {
                            return err(e.loc, "packet_out has one method, emit(x)");
                        }
                        let (p, t) = self.place(&args[0].value)?;
                        let sh = self.shape(&t);
                        return Ok(St::Extern(Box::new(ExternCall::Emit(p, sh))));
                    }
                    Some(Ent::Table(t)) => {
                        if member.text != "apply" {
                            return err(member.loc, "a table has one method, apply()");
                        }
                        return Ok(St::Apply(t));
                    }
                    Some(Ent::Extern(id, tname)) => {
                        return self.extern_method(id, &tname, member, args, e.loc);
                    }
                    Some(Ent::Sub(body, params)) => {
                        if member.text != "apply" {
                            return err(
                                member.loc,
                                "a parser or control instance has one method, apply()",
                            );
                        }
                        let call = self.call(&params, args, body, e.loc)?;
                        return Ok(St::Call(Box::new(call)));
                    }
                    _ => {}
                }
            }
            match member.text.as_str() {
                "setValid" | "setInvalid" => {
                    let (p, t) = self.place(base)?;
                    let Ty::Header(_) = t else {
                        return err(base.loc, "setValid/setInvalid need a header");
                    };
                    let len = self.slots(&t);
                    let union = self.union_siblings(base)?;
                    let Ty::Header(hi) = t else { unreachable!() };
                    let l = self.layout_of(hi);
                    let bytes = self.out.layouts[l as usize].fixed_bits / 8;
                    return Ok(St::SetValid {
                        bytes,
                        hdr: p,
                        valid: member.text == "setValid",
                        len,
                        union,
                    });
                }
                "push_front" | "pop_front" => {
                    let (p, t) = self.place(base)?;
                    let Ty::Stack(elem, n) = t else {
                        return err(base.loc, "push_front/pop_front need a header stack");
                    };
                    let k = match args.first() {
                        Some(a) => self.const_i128(&a.value)? as i64,
                        None => return err(e.loc, "push_front/pop_front need a count"),
                    };
                    let stride = self.slots(&elem);
                    return Ok(St::StackShift {
                        stack: p,
                        count: n,
                        stride,
                        by: if member.text == "push_front" { k } else { -k },
                    });
                }
                _ => {}
            }
        }
        // Anything else is a call evaluated for its effect.
        let te = self.call_expr(e, callee, type_args, args)?;
        match te.ex {
            Ex::Call(c, _) => Ok(St::Call(c)),
            Ex::Apply(t, _) => Ok(St::Apply(t)),
            Ex::Extern(x) => Ok(St::Extern(x)),
            Ex::Seq(sts, _) => Ok(St::Block(sts.into_vec())),
            _ => Ok(St::Block(Vec::new())),
        }
    }

    /// For a header inside a union: the other members' validity offsets relative to it.
    fn union_siblings(&mut self, hdr: &ast::Expr) -> R<Vec<(i32, u32)>> {
        if let ExprKind::Member { base, member } = &hdr.kind
            && let Ok((_, Ty::Union(u))) = self.place(base)
        {
            let (me, _) = self.field(&Ty::Union(u), &member.text).unwrap_or((0, Ty::Void));
            let a = self.aggs[u as usize].clone();
            let mut off = 0;
            let mut v = Vec::new();
            for (n, fty, _) in &a.fields {
                let len = self.slots(fty);
                if *n != member.text {
                    v.push((off as i32 - me as i32, len));
                }
                off += len;
            }
            return Ok(v);
        }
        Ok(Vec::new())
    }

    fn packet_in(
        &mut self,
        member: &ast::Name,
        type_args: &[ast::Type],
        args: &[ast::Arg],
        loc: Loc,
    ) -> R<St> {
        match member.text.as_str() {
            "extract" => {
                let Some(a0) = args.first() else { return err(loc, "extract needs a header") };
                let (next_of, hp, ht) = match &a0.value.kind {
                    ExprKind::Member { base, member: m } if m.text == "next" => {
                        let (sp, st) = self.place(base)?;
                        let Ty::Stack(elem, n) = st else {
                            return err(a0.loc, "`.next` needs a header stack");
                        };
                        let stride = self.slots(&elem);
                        let (hp, ht) = self.place(&a0.value)?;
                        (Some((sp, n, stride, 0)), hp, ht)
                    }
                    ExprKind::Member { base: nb, member: um } if matches!(&nb.kind, ExprKind::Member { member: m, .. } if m.text == "next") =>
                    {
                        // `stack.next.member` on a stack of header unions.
                        let ExprKind::Member { base: sb, .. } = &nb.kind else { unreachable!() };
                        let (sp, st) = self.place(sb)?;
                        let Ty::Stack(elem, n) = st else {
                            return err(a0.loc, "`.next` needs a header stack");
                        };
                        let stride = self.slots(&elem);
                        let Some((off, _)) = self.field(&elem, &um.text) else {
                            return err(um.loc, format!("no member `{}`", um.text));
                        };
                        let (hp, ht) = self.place(&a0.value)?;
                        (Some((sp, n, stride, off)), hp, ht)
                    }
                    _ => {
                        let (hp, ht) = self.place(&a0.value)?;
                        (None, hp, ht)
                    }
                };
                let Ty::Header(h) = ht else {
                    return err(a0.loc, "extract needs a header");
                };
                let layout = self.layout_of(h);
                let varbits = match args.get(1) {
                    Some(a) => {
                        let v = self.expr(&a.value, Some(&Ty::Bits(A32)))?;
                        let v = match v.ty {
                            Ty::Int => self.coerce(v, &Ty::Bits(A32), a.loc)?,
                            Ty::Bits(_) => v,
                            _ => return err(a.loc, "the varbit size must be a number"),
                        };
                        if self.out.layouts[layout as usize].varbit.is_none() {
                            return err(
                                a.loc,
                                "two-argument extract needs a header with a varbit field",
                            );
                        }
                        Some(v.ex)
                    }
                    None => None,
                };
                // Extracting into a member of a header union invalidates the other members.
                let union = match &a0.value.kind {
                    ExprKind::Member { member, .. } if member.text != "next" => {
                        self.union_siblings(&a0.value)?
                    }
                    _ => Vec::new(),
                };
                Ok(St::Extern(Box::new(ExternCall::Extract {
                    hdr: hp,
                    layout,
                    varbits,
                    next_of,
                    union,
                })))
            }
            "advance" => {
                let Some(a) = args.first() else { return err(loc, "advance needs a size") };
                let v = self.expr(&a.value, Some(&Ty::Bits(A32)))?;
                let v = if v.ty == Ty::Int { self.coerce(v, &Ty::Bits(A32), a.loc)? } else { v };
                Ok(St::Extern(Box::new(ExternCall::Advance(v.ex))))
            }
            "lookahead" => {
                // As a statement, its value is discarded.
                let _ = type_args;
                Ok(St::Block(Vec::new()))
            }
            other => err(member.loc, format!("packet_in has no method `{other}`")),
        }
    }

    fn lookahead(&mut self, type_args: &[ast::Type], loc: Loc) -> R<TE> {
        let Some(t) = type_args.first() else { return err(loc, "lookahead needs a type argument") };
        let ty = self.resolve_ty(t)?;
        match &ty {
            Ty::Bits(a) => Ok(TE { ex: Ex::Lookahead(a.width), ty }),
            Ty::Bool => Ok(TE { ex: Ex::Lookahead(1), ty }),
            Ty::Header(_) | Ty::Struct(_) => {
                let n = self.slots(&ty);
                let dst = Place::at(self.alloc(n));
                let mut fields = Vec::new();
                let base = u32::from(matches!(ty, Ty::Header(_)));
                for (off, fty) in self.fields_of(&ty, loc)? {
                    let w = match fty {
                        Ty::Bits(a) => a.width,
                        Ty::Bool => 1,
                        _ => return unsupported(loc, "lookahead of structs with non-bit fields"),
                    };
                    fields.push((off, w));
                }
                let _ = base;
                let valid = if matches!(ty, Ty::Header(_)) { Some(0) } else { None };
                let st = St::Extern(Box::new(ExternCall::LookaheadInto {
                    dst: dst.clone(),
                    fields,
                    valid,
                }));
                Ok(TE { ex: Ex::Seq(vec![st].into_boxed_slice(), Box::new(Ex::Load(dst))), ty })
            }
            _ => unsupported(loc, format!("lookahead of `{}`", self.ty_name(&ty))),
        }
    }

    fn call_expr(
        &mut self,
        e: &ast::Expr,
        callee: &ast::Expr,
        type_args: &[ast::Type],
        args: &[ast::Arg],
    ) -> R<TE> {
        if let ExprKind::Member { base, member } = &callee.kind {
            if let ExprKind::Name(n) = &base.kind {
                match self.lookup(n).cloned() {
                    Some(Ent::PacketIn) => {
                        return match member.text.as_str() {
                            "lookahead" => self.lookahead(type_args, e.loc),
                            "length" => Ok(TE { ex: Ex::PacketLength, ty: Ty::Bits(A32) }),
                            _ => {
                                let st = self.packet_in(member, type_args, args, e.loc)?;
                                Ok(TE {
                                    ex: Ex::Seq(
                                        vec![st].into_boxed_slice(),
                                        Box::new(Ex::Const(0)),
                                    ),
                                    ty: Ty::Void,
                                })
                            }
                        };
                    }
                    Some(Ent::Table(t)) if member.text == "apply" => {
                        return Ok(TE { ex: Ex::Apply(t, ApplyResult::Hit), ty: Ty::Void });
                    }
                    Some(Ent::Extern(_, tname))
                        if tname == "Checksum16" && member.text == "get" =>
                    {
                        let mut data = Vec::new();
                        match args.first() {
                            Some(a) => self.leaves(&a.value, &mut data)?,
                            None => return err(e.loc, "get needs data"),
                        }
                        let dst = Place::at(self.alloc(1));
                        let st = St::Extern(Box::new(ExternCall::Checksum16Get {
                            dst: dst.clone(),
                            data,
                        }));
                        return Ok(TE {
                            ex: Ex::Seq(vec![st].into_boxed_slice(), Box::new(Ex::Load(dst))),
                            ty: Ty::Bits(Arith { width: 16, signed: false }),
                        });
                    }
                    Some(Ent::Extern(id, tname))
                        if matches!(tname.as_str(), "Meter" | "DirectMeter")
                            && member.text == "execute" =>
                    {
                        return self.pna_meter(id, &tname, args, e.loc);
                    }
                    Some(Ent::Extern(id, tname)) if tname == "Random" && member.text == "read" => {
                        let Some((lo, hi, ty)) = self.randoms.get(&id).cloned() else {
                            return err(e.loc, "Random's range is not known");
                        };
                        let width = match ty {
                            Ty::Bits(a) => a.width,
                            _ => 32,
                        };
                        let dst = Place::at(self.alloc(1));
                        let st =
                            ExternCall::Random(dst.clone(), width, Ex::Const(lo), Ex::Const(hi));
                        return Ok(TE {
                            ex: Ex::Seq(
                                vec![St::Extern(Box::new(st))].into_boxed_slice(),
                                Box::new(Ex::Load(dst)),
                            ),
                            ty,
                        });
                    }
                    Some(Ent::Extern(id, tname))
                        if tname == "InternetChecksum"
                            && matches!(member.text.as_str(), "get" | "get_state") =>
                    {
                        let state = self.csum_states.get(&id).copied().unwrap_or(u32::MAX);
                        let a16 = Arith { width: 16, signed: false };
                        let sum = Ex::Load(Place::at(state));
                        let ex =
                            if member.text == "get" { Ex::BitNot(Box::new(sum), a16) } else { sum };
                        return Ok(TE { ex, ty: Ty::Bits(a16) });
                    }
                    Some(Ent::Extern(id, tname))
                        if (tname == "Register" && member.text == "read")
                            || (tname == "Hash" && member.text == "get_hash") =>
                    {
                        return self.pna_value_method(id, &tname, type_args, args, e.loc);
                    }
                    Some(Ent::Extern(id, tname)) => {
                        let st = self.extern_method(id, &tname, member, args, e.loc)?;
                        return match st {
                            St::Extern(x) => Ok(TE { ex: Ex::Extern(x), ty: Ty::Void }),
                            other => Ok(TE {
                                ex: Ex::Seq(vec![other].into_boxed_slice(), Box::new(Ex::Const(0))),
                                ty: Ty::Void,
                            }),
                        };
                    }
                    _ => {}
                }
            }
            match member.text.as_str() {
                "isValid" => {
                    let (p, t) = self.place(base)?;
                    return match t {
                        Ty::Header(_) => Ok(TE { ex: Ex::Load(p), ty: Ty::Bool }),
                        Ty::Union(u) => {
                            let members = self.union_members(u);
                            Ok(TE { ex: Ex::AnyValid(p, members), ty: Ty::Bool })
                        }
                        _ => err(base.loc, "isValid needs a header or header union"),
                    };
                }
                "minSizeInBits" | "minSizeInBytes" | "maxSizeInBits" | "maxSizeInBytes" => {
                    let t = match &base.kind {
                        ExprKind::Type(t) => self.resolve_ty(t)?,
                        ExprKind::Name(n) if matches!(self.lookup(n), Some(Ent::Type(_))) => {
                            match self.lookup(n) {
                                Some(Ent::Type(t)) => t.clone(),
                                _ => Ty::Void,
                            }
                        }
                        _ => self.expr(base, None)?.ty,
                    };
                    let (min, max) = self.size_bits(&t, base.loc)?;
                    let v = match member.text.as_str() {
                        "minSizeInBits" => min,
                        "minSizeInBytes" => min.div_ceil(8),
                        "maxSizeInBits" => max,
                        _ => max.div_ceil(8),
                    };
                    return Ok(TE { ex: Ex::Const(u128::from(v)), ty: Ty::Int });
                }
                _ => {}
            }
            let st = self.call_stmt_member(e)?;
            return Ok(TE {
                ex: Ex::Seq(vec![st].into_boxed_slice(), Box::new(Ex::Const(0))),
                ty: Ty::Void,
            });
        }
        let ExprKind::Name(n) = &callee.kind else {
            return err(callee.loc, "this cannot be called");
        };
        match self.lookup(n).cloned() {
            Some(Ent::Action(id, params)) => {
                let call = self.call(&params, args, Body::Action(id), e.loc)?;
                Ok(TE { ex: Ex::Call(Box::new(call), 0), ty: Ty::Void })
            }
            Some(Ent::Function(id, params, ret, slot)) => {
                let call = self.call(&params, args, Body::Function(id), e.loc)?;
                Ok(TE { ex: Ex::Call(Box::new(call), slot), ty: ret })
            }
            Some(Ent::ExternFn) => self.extern_function(n, type_args, args, e.loc),
            Some(Ent::GenericFn(d)) => self.generic_call(d, type_args, args, e.loc),
            _ => err(callee.loc, format!("`{n}` cannot be called")),
        }
    }

    fn call_stmt_member(&mut self, e: &ast::Expr) -> R<St> {
        // Only what `call_stmt` handles without coming back here: methods of a packet_out,
        // table or sub-block instance, and header / stack methods.
        let ExprKind::Call { callee, .. } = &e.kind else { return err(e.loc, "not a call") };
        if let ExprKind::Member { base, member } = &callee.kind {
            let instance = match &base.kind {
                ExprKind::Name(n) => {
                    matches!(self.lookup(n), Some(Ent::PacketOut | Ent::Table(_) | Ent::Sub(..)))
                }
                _ => false,
            };
            if instance
                || matches!(
                    member.text.as_str(),
                    "setValid" | "setInvalid" | "push_front" | "pop_front"
                )
            {
                return self.call_stmt(e);
            }
            return err(member.loc, format!("no method `{}` here", member.text));
        }
        err(e.loc, "unknown method")
    }

    fn size_bits(&self, t: &Ty, loc: Loc) -> R<(u32, u32)> {
        Ok(match t {
            Ty::Bits(a) => (a.width, a.width),
            Ty::Bool => (1, 1),
            Ty::Varbit(w) => (0, *w),
            Ty::Header(i) | Ty::Struct(i) | Ty::Union(i) => {
                let mut min = 0;
                let mut max = 0;
                for (_, fty, _) in &self.aggs[*i as usize].fields {
                    let (a, b) = self.size_bits(fty, loc)?;
                    if matches!(t, Ty::Union(_)) {
                        min = if min == 0 { a } else { min.min(a) };
                        max = max.max(b);
                    } else {
                        min += a;
                        max += b;
                    }
                }
                (min, max)
            }
            Ty::Stack(e, n) => {
                let (a, b) = self.size_bits(e, loc)?;
                (a * n, b * n)
            }
            Ty::Enum(e) => {
                let w = self.enums[*e as usize].repr.map_or(0, |r| r.width);
                (w, w)
            }
            _ => return err(loc, "this type has no size in bits"),
        })
    }

    /// A call with copy-in/copy-out.
    fn call(&mut self, params: &[ParamInfo], args: &[ast::Arg], body: Body, loc: Loc) -> R<Call> {
        // Match arguments to parameters (positional or named).
        let mut given: Vec<Option<&ast::Arg>> = vec![None; params.len()];
        for (i, a) in args.iter().enumerate() {
            let idx = match &a.name {
                Some(n) => match params.iter().position(|p| p.name == n.text) {
                    Some(k) => k,
                    None => return err(n.loc, format!("no parameter `{}`", n.text)),
                },
                None => i,
            };
            if idx >= params.len() {
                return err(a.loc, "too many arguments");
            }
            given[idx] = Some(a);
        }
        let mut copy_in = Vec::new();
        let mut copy_out = Vec::new();
        for (p, a) in params.iter().zip(given) {
            if matches!(p.ty, Ty::Extern(..)) {
                continue; // packet_in / packet_out are shared
            }
            let n = self.slots(&p.ty);
            let value = match (a, &p.default) {
                (Some(a), _) => Some(a.value.clone()),
                (None, Some(d)) => Some(d.clone()),
                (None, None) => None,
            };
            match p.dir {
                Direction::None | Direction::In => match value {
                    Some(v) => copy_in.extend(self.assign_into(p.place.clone(), &p.ty, &v)?),
                    None => return err(loc, format!("missing argument `{}`", p.name)),
                },
                Direction::Out | Direction::InOut => {
                    let Some(v) = value else {
                        return err(loc, format!("missing argument `{}`", p.name));
                    };
                    if matches!(v.kind, ExprKind::DontCare) {
                        copy_in.push(St::Zero(p.place.clone(), n));
                        continue;
                    }
                    if p.dir == Direction::InOut {
                        self.note_read(&v);
                    }
                    if let ExprKind::Slice { base, hi, lo } = &v.kind {
                        // A slice as an out/inout argument: its bits are read at the call and
                        // written back into the rest of the value after it.
                        let sl = self.slice_place(base, hi, lo, v.loc)?;
                        let sw = sl.width;
                        if !matches!(&p.ty, Ty::Bits(pa) if pa.width == sw.width) {
                            return err(
                                v.loc,
                                format!("a {}-bit slice passed for `{}`", sw.width, p.name),
                            );
                        }
                        if p.dir == Direction::InOut {
                            copy_in.push(St::Set(p.place.clone(), sl.read()));
                        } else {
                            copy_in.push(St::Zero(p.place.clone(), n));
                        }
                        copy_out.push(sl.store(Ex::Load(p.place.clone())));
                        continue;
                    }
                    self.note_write(&v);
                    let (mut ap, aty) = self.place(&v)?;
                    // The argument's place is evaluated once, at the call: a run-time index is
                    // kept aside for the copy-out.
                    if let Some(d) = &mut ap.index {
                        let ts = self.alloc(1);
                        copy_in.push(St::Set(Place::at(ts), d.index.clone()));
                        d.index = Ex::Load(Place::at(ts));
                    }
                    let same_bits =
                        matches!((&aty, &p.ty), (Ty::Bits(a), Ty::Bits(b)) if a.width == b.width);
                    if !(self.same_type(&aty, &p.ty) || same_bits) {
                        return err(
                            v.loc,
                            format!(
                                "`{}` passed for `{}` of type `{}`",
                                self.ty_name(&aty),
                                p.name,
                                self.ty_name(&p.ty)
                            ),
                        );
                    }
                    if p.dir == Direction::InOut {
                        copy_in.push(St::Copy(p.place.clone(), ap.clone(), n));
                    } else {
                        copy_in.push(St::Zero(p.place.clone(), n));
                    }
                    copy_out.push(St::Copy(ap, p.place.clone(), n));
                    let mut fix = Vec::new();
                    self.union_fixup(&v, &aty, &mut fix)?;
                    copy_out.extend(fix);
                }
            }
        }
        Ok(Call { copy_in, body, copy_out })
    }

    fn leaves(&mut self, e: &ast::Expr, out: &mut Vec<Leaf>) -> R<()> {
        match &e.kind {
            ExprKind::List(items) => {
                for it in items {
                    self.leaves(it, out)?;
                }
                Ok(())
            }
            ExprKind::StructInit(items) => {
                for (_, it) in items {
                    self.leaves(it, out)?;
                }
                Ok(())
            }
            _ => {
                let te = self.expr(e, None)?;
                let valid = self.header_of(e);
                match &te.ty {
                    Ty::Bits(a) => {
                        out.push(Leaf { ex: te.ex, width: a.width, valid });
                        Ok(())
                    }
                    Ty::Bool => {
                        out.push(Leaf { ex: te.ex, width: 1, valid });
                        Ok(())
                    }
                    Ty::Enum(en) if self.enums[*en as usize].repr.is_some() => {
                        let w = self.enums[*en as usize].repr.map_or(0, |r| r.width);
                        out.push(Leaf { ex: te.ex, width: w, valid });
                        Ok(())
                    }
                    Ty::Int => err(e.loc, "an integer of unknown width in a field list"),
                    Ty::Header(_) | Ty::Struct(_) | Ty::Union(_) | Ty::Stack(..) | Ty::Tuple(_) => {
                        let Ex::Load(p) = te.ex else {
                            return unsupported(e.loc, "this value in a field list");
                        };
                        self.place_leaves(&p, &te.ty, valid, out);
                        Ok(())
                    }
                    t => err(e.loc, format!("`{}` in a field list", self.ty_name(t))),
                }
            }
        }
    }

    fn place_leaves(&self, p: &Place, ty: &Ty, valid: Option<Place>, out: &mut Vec<Leaf>) {
        match ty {
            Ty::Bits(a) => out.push(Leaf { ex: Ex::Load(p.clone()), width: a.width, valid }),
            Ty::Bool => out.push(Leaf { ex: Ex::Load(p.clone()), width: 1, valid }),
            Ty::Enum(en) => {
                if let Some(r) = self.enums[*en as usize].repr {
                    out.push(Leaf { ex: Ex::Load(p.clone()), width: r.width, valid });
                }
            }
            Ty::Header(_) | Ty::Struct(_) | Ty::Union(_) | Ty::Tuple(_) | Ty::Stack(..) => {
                if let Ok(fs) = self.fields_of(ty, Loc::default()) {
                    let inner = if matches!(ty, Ty::Header(_)) { Some(p.clone()) } else { valid };
                    for (off, fty) in fs {
                        self.place_leaves(&p.offset(off), &fty, inner.clone(), out);
                    }
                }
            }
            _ => {}
        }
    }

    /// For `h.f` where `h` is a header: `h`'s validity slot.
    fn header_of(&mut self, e: &ast::Expr) -> Option<Place> {
        if let ExprKind::Member { base, .. } = &e.kind
            && let Ok((p, Ty::Header(_))) = self.place(base)
        {
            return Some(p);
        }
        None
    }

    /// The digest type of a `digest<T>(receiver, data)` call: `T` (or the data's own struct or
    /// header type) by name with its fields, one per leaf; a list expression without a type is
    /// an anonymous digest named after its position. Calls with the same type share an index.
    fn digest_type(
        &mut self,
        type_args: &[ast::Type],
        data: Option<&ast::Arg>,
        leaves: &[Leaf],
    ) -> R<u32> {
        let ty = match type_args.first() {
            Some(t) => Some(self.resolve_ty(t)?),
            None => match data {
                Some(a) => self.place(&a.value).ok().map(|(_, t)| t),
                None => None,
            },
        };
        let (name, names) = match &ty {
            Some(t @ (Ty::Struct(_) | Ty::Header(_))) => {
                let mut names = Vec::new();
                self.leaf_names(t, "", &mut names);
                (self.ty_name(t), names)
            }
            _ => (format!("digest_{}", self.out.digests.len()), Vec::new()),
        };
        if let Some(i) = self.out.digests.iter().position(|d| d.type_name == name) {
            return Ok(i as u32);
        }
        let fields = leaves
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let n = names.get(i).cloned().unwrap_or_else(|| format!("f{i}"));
                CpField { name: n, width: l.width, id: None }
            })
            .collect();
        let id = self.out.digests.len() as u32;
        self.out.digests.push(DigestIr { type_name: name, fields });
        Ok(id)
    }

    /// The names of the scalar leaves of `ty`, in field-list order (`a.b` for nested ones).
    fn leaf_names(&self, ty: &Ty, prefix: &str, out: &mut Vec<String>) {
        match ty {
            Ty::Header(i) | Ty::Struct(i) => {
                for (n, fty, _) in &self.aggs[*i as usize].fields {
                    let full = if prefix.is_empty() { n.clone() } else { format!("{prefix}.{n}") };
                    match fty {
                        Ty::Header(_) | Ty::Struct(_) => self.leaf_names(fty, &full, out),
                        _ => out.push(full),
                    }
                }
            }
            _ => out.push(prefix.to_string()),
        }
    }

    fn new_calc(&mut self, algo: u32) -> u32 {
        let id = self.out.calcs.len() as u32;
        let name = if id == 0 { "calc".to_string() } else { format!("calc_{}", id - 1) };
        self.out.calcs.push((name, algo));
        id
    }

    fn scalar_arg(&mut self, args: &[ast::Arg], i: usize, want: &Ty, loc: Loc) -> R<Ex> {
        let Some(a) = args.get(i) else { return err(loc, format!("missing argument {}", i + 1)) };
        let v = self.expr(&a.value, Some(want))?;
        let v = match (&v.ty, want) {
            (Ty::Int, _) => self.coerce(v, want, a.loc)?,
            _ => v,
        };
        Ok(v.ex)
    }

    fn any_scalar_arg(&mut self, args: &[ast::Arg], i: usize, loc: Loc) -> R<(Ex, Ty)> {
        let Some(a) = args.get(i) else { return err(loc, format!("missing argument {}", i + 1)) };
        let v = self.expr(&a.value, None)?;
        Ok((v.ex, v.ty))
    }

    fn out_arg(&mut self, args: &[ast::Arg], i: usize, loc: Loc) -> R<(Place, u32)> {
        let Some(a) = args.get(i) else { return err(loc, format!("missing argument {}", i + 1)) };
        self.note_write(&a.value);
        let (p, t) = self.place(&a.value)?;
        let w = self.width_of(&t, a.loc)?;
        Ok((p, w))
    }

    fn algo_arg(&mut self, args: &[ast::Arg], i: usize, loc: Loc) -> R<u32> {
        let Some(a) = args.get(i) else { return err(loc, "missing hash algorithm") };
        self.enum_member_index(&a.value)
    }

    fn extern_function(
        &mut self,
        n: &str,
        type_args: &[ast::Type],
        args: &[ast::Arg],
        loc: Loc,
    ) -> R<TE> {
        let x = |c: ExternCall| Ok(TE { ex: Ex::Extern(Box::new(c)), ty: Ty::Void });
        match n {
            "mark_to_drop" => x(ExternCall::MarkToDrop),
            "send_to_port" => {
                let args = named_args(args, &["dest_port"]);
                let p = self.scalar_arg(&args, 0, &Ty::Bits(A32), loc)?;
                x(ExternCall::SendToPort(p))
            }
            "drop_packet" => x(ExternCall::DropPacket),
            "restart_expire_timer" => x(ExternCall::RestartExpireTimer),
            "set_entry_expire_time" => {
                let args = named_args(args, &["expire_time_profile_id"]);
                let p = self.scalar_arg(&args, 0, &Ty::Bits(A8), loc)?;
                x(ExternCall::SetEntryExpireTime(p))
            }
            "add_entry" => self.add_entry(args, loc),
            "SelectByDirection" => {
                let args = named_args(args, &["direction", "n2h_value", "h2n_value"]);
                let Some(d) = args.first() else { return err(loc, "a direction is needed") };
                let dir = self.expr(&d.value, None)?;
                if !matches!(dir.ty, Ty::Enum(_)) {
                    return err(d.loc, "the direction must be a PNA_Direction_t");
                }
                let (a, ty) = self.any_scalar_arg(&args, 1, loc)?;
                let b = self.scalar_arg(&args, 2, &ty, loc)?;
                let n2h = Ex::Cmp(Cmp::Eq, Box::new(dir.ex), Box::new(Ex::Const(0)), A32);
                Ok(TE { ex: Ex::Cond(Box::new(n2h), Box::new(a), Box::new(b)), ty })
            }
            "verify" => {
                let c = self.scalar_arg(args, 0, &Ty::Bool, loc)?;
                let e = self.scalar_arg(args, 1, &Ty::Error, loc)?;
                x(ExternCall::Verify(c, e))
            }
            "hash" => {
                let (dst, width) = self.out_arg(args, 0, loc)?;
                let algo = self.algo_arg(args, 1, loc)?;
                let (base, _) = self.any_scalar_arg(args, 2, loc)?;
                let mut data = Vec::new();
                match args.get(3) {
                    Some(a) => self.leaves(&a.value, &mut data)?,
                    None => return err(loc, "hash needs data"),
                }
                let (max, _) = self.any_scalar_arg(args, 4, loc)?;
                let calc = self.new_calc(algo);
                x(ExternCall::Hash { calc, dst, width, algo, base, data, max })
            }
            "verify_checksum"
            | "update_checksum"
            | "verify_checksum_with_payload"
            | "update_checksum_with_payload" => {
                let cond = self.scalar_arg(args, 0, &Ty::Bool, loc)?;
                let mut data = Vec::new();
                match args.get(1) {
                    Some(a) => self.leaves(&a.value, &mut data)?,
                    None => return err(loc, "checksum needs data"),
                }
                let (field, width) = self.out_arg(args, 2, loc)?;
                let field_valid = match args.get(2) {
                    Some(a) => self.header_of(&a.value),
                    None => None,
                };
                let algo = self.algo_arg(args, 3, loc)?;
                let calc = self.new_calc(algo);
                x(ExternCall::Checksum {
                    calc,
                    field_valid,
                    update: n.starts_with("update"),
                    with_payload: n.ends_with("payload"),
                    cond,
                    data,
                    field,
                    width,
                    algo,
                })
            }
            "random" => {
                let (dst, width) = self.out_arg(args, 0, loc)?;
                let t = Ty::Bits(Arith { width, signed: false });
                let lo = self.scalar_arg(args, 1, &t, loc)?;
                let hi = self.scalar_arg(args, 2, &t, loc)?;
                x(ExternCall::Random(dst, width, lo, hi))
            }
            "clone" | "clone3" | "clone_preserving_field_list" => {
                let kind = match args.first() {
                    Some(a) => self.enum_member_index(&a.value)?,
                    None => return err(loc, "clone needs a type"),
                };
                let session = self.scalar_arg(args, 1, &Ty::Bits(A32), loc)?;
                let list = if n == "clone_preserving_field_list" {
                    Some(self.list_id(args, 2, loc)?)
                } else if n == "clone3" {
                    match args.get(2) {
                        Some(a) => Some(self.data_field_list(&a.value)?),
                        None => return err(loc, "clone3 needs data"),
                    }
                } else {
                    None
                };
                x(ExternCall::Clone { e2e: kind == 1, session, list })
            }
            "resubmit_preserving_field_list" => {
                let l = self.list_id(args, 0, loc)?;
                x(ExternCall::Resubmit(Some(l)))
            }
            "recirculate_preserving_field_list" => {
                let l = self.list_id(args, 0, loc)?;
                x(ExternCall::Recirculate(Some(l)))
            }
            "resubmit" | "recirculate" => {
                // The old form names the fields to keep; they become a field list of their own.
                let list = match args.first() {
                    Some(a) => Some(self.data_field_list(&a.value)?),
                    None => None,
                };
                x(if n == "resubmit" {
                    ExternCall::Resubmit(list)
                } else {
                    ExternCall::Recirculate(list)
                })
            }
            "truncate" => {
                let l = self.scalar_arg(args, 0, &Ty::Bits(A32), loc)?;
                x(ExternCall::Truncate(l))
            }
            "digest" => {
                let mut data = Vec::new();
                if let Some(a) = args.get(1) {
                    self.leaves(&a.value, &mut data)?;
                }
                let d = self.digest_type(type_args, args.get(1), &data)?;
                x(ExternCall::Digest(d, data))
            }
            "assert" | "assume" => {
                let c = self.scalar_arg(args, 0, &Ty::Bool, loc)?;
                x(ExternCall::Assert(c))
            }
            "log_msg" => {
                let msg = match args.first().map(|a| &a.value.kind) {
                    Some(ExprKind::Str(s)) => s.clone(),
                    _ => return err(loc, "log_msg needs a string"),
                };
                let mut data = Vec::new();
                if let Some(a) = args.get(1) {
                    let mut leaves = Vec::new();
                    self.leaves(&a.value, &mut leaves)?;
                    data = leaves.into_iter().map(|l| (l.ex, l.width)).collect();
                }
                Ok(TE {
                    ex: Ex::Seq(
                        vec![St::Log(msg, data)].into_boxed_slice(),
                        Box::new(Ex::Const(0)),
                    ),
                    ty: Ty::Void,
                })
            }
            "static_assert" => {
                let c = self.const_i128(&args.first().map_or_else(
                    || ast::Expr { kind: ExprKind::Bool(false), loc },
                    |a| a.value.clone(),
                ))?;
                if c == 0 {
                    return err(loc, "static_assert failed");
                }
                Ok(TE { ex: Ex::Const(1), ty: Ty::Bool })
            }
            _ => {
                let _ = type_args;
                unsupported(loc, format!("extern function `{n}`"))
            }
        }
    }

    /// PNA's extern methods that give a value: `Register.read(index)` and
    /// `Hash.get_hash(data)` / `get_hash(base, data, max)`.
    fn pna_value_method(
        &mut self,
        id: u32,
        tname: &str,
        type_args: &[ast::Type],
        args: &[ast::Arg],
        loc: Loc,
    ) -> R<TE> {
        let _ = type_args;
        let ty = match (&self.out.instances[id as usize].kind, self.hash_algos.get(&id)) {
            (InstanceKind::Register { width, .. }, _) => {
                Ty::Bits(Arith { width: *width, signed: false })
            }
            (_, Some((_, t))) => t.clone(),
            _ => return err(loc, format!("{tname}'s value type is not known")),
        };
        let width = match &ty {
            Ty::Bits(a) => a.width,
            Ty::Bool => 1,
            t => return unsupported(loc, format!("{tname} of `{}`", self.ty_name(t))),
        };
        let dst = Place::at(self.alloc(1));
        let st = if tname == "Register" {
            let (i, _) = self.any_scalar_arg(args, 0, loc)?;
            ExternCall::RegisterRead(id, dst.clone(), i)
        } else {
            let algo = self.hash_algos.get(&id).map_or(0, |h| h.0);
            let (base, data_arg, max) = match args.len() {
                1 => {
                    // No modulo: the hash cut to the result's width.
                    let max = if width < 64 { 1u128 << width } else { u128::from(u64::MAX) };
                    (Ex::Const(0), &args[0], Ex::Const(max))
                }
                3 => {
                    let (b, _) = self.any_scalar_arg(args, 0, loc)?;
                    let (m, _) = self.any_scalar_arg(args, 2, loc)?;
                    (b, &args[1], m)
                }
                _ => return err(loc, "get_hash takes data, or base, data and max"),
            };
            let mut data = Vec::new();
            self.leaves(&data_arg.value, &mut data)?;
            let calc = self.new_calc(algo);
            ExternCall::Hash { calc, dst: dst.clone(), width, algo, base, data, max }
        };
        Ok(TE {
            ex: Ex::Seq(vec![St::Extern(Box::new(st))].into_boxed_slice(), Box::new(Ex::Load(dst))),
            ty,
        })
    }

    /// PNA `Meter.execute(index)` / `DirectMeter.execute()`: the colour-blind meter's colour
    /// as a `PNA_MeterColor_t` (RED, GREEN, YELLOW; the executor's meters give v1model's
    /// GREEN 0, YELLOW 1, RED 2).
    fn pna_meter(&mut self, id: u32, tname: &str, args: &[ast::Arg], loc: Loc) -> R<TE> {
        let direct = tname == "DirectMeter";
        if args.len() != usize::from(!direct) {
            return unsupported(loc, format!("colour-aware {tname}.execute"));
        }
        let ty = match self.lookup("PNA_MeterColor_t") {
            Some(Ent::Type(t)) => t.clone(),
            _ => return err(loc, "PNA_MeterColor_t is not declared"),
        };
        let tmp = Place::at(self.alloc(1));
        let st = if direct {
            ExternCall::DirectMeterRead(id, tmp.clone(), 8)
        } else {
            let (i, _) = self.any_scalar_arg(args, 0, loc)?;
            ExternCall::Meter(id, i, tmp.clone(), 8)
        };
        let a8 = Arith { width: 8, signed: false };
        let is = |v: u128| {
            Box::new(Ex::Cmp(Cmp::Eq, Box::new(Ex::Load(tmp.clone())), Box::new(Ex::Const(v)), a8))
        };
        // v1model GREEN (0) -> 1, YELLOW (1) -> 2, RED (2) -> 0.
        let colour = Ex::Cond(
            is(0),
            Box::new(Ex::Const(1)),
            Box::new(Ex::Cond(is(1), Box::new(Ex::Const(2)), Box::new(Ex::Const(0)))),
        );
        Ok(TE {
            ex: Ex::Seq(vec![St::Extern(Box::new(st))].into_boxed_slice(), Box::new(colour)),
            ty,
        })
    }

    /// PNA `add_entry(action_name, action_params, expire_time_profile_id)`: a bool.
    fn add_entry(&mut self, args: &[ast::Arg], loc: Loc) -> R<TE> {
        let args = named_args(args, &["action_name", "action_params", "expire_time_profile_id"]);
        if args.len() != 3 {
            return err(loc, "add_entry takes an action name, its parameters and a profile");
        }
        let ExprKind::Str(aname) = &args[0].value.kind else {
            return err(args[0].loc, "add_entry's action name must be a string literal");
        };
        let (action, params) = match self.lookup(aname) {
            Some(Ent::Action(a, ps)) => (*a, ps.clone()),
            _ => return err(args[0].loc, format!("no action `{aname}`")),
        };
        let data: Vec<ParamInfo> =
            params.into_iter().filter(|p| p.dir == Direction::None).collect();
        let pe = &args[1].value;
        let mut vals = Vec::new();
        match &pe.kind {
            ExprKind::List(_) | ExprKind::StructInit(_) => {
                let items = items_of(pe);
                if items.len() != data.len() {
                    return err(
                        pe.loc,
                        format!("`{aname}` takes {} action parameters", data.len()),
                    );
                }
                for (it, p) in items.iter().zip(&data) {
                    let v = self.expr(it, Some(&p.ty))?;
                    let v = self.coerce(v, &p.ty, it.loc)?;
                    vals.push(v.ex);
                }
            }
            _ => {
                let mut leaves = Vec::new();
                self.leaves(pe, &mut leaves)?;
                if leaves.len() != data.len() {
                    return err(
                        pe.loc,
                        format!("`{aname}` takes {} action parameters", data.len()),
                    );
                }
                vals = leaves.into_iter().map(|l| l.ex).collect();
            }
        }
        let profile = self.scalar_arg(&args, 2, &Ty::Bits(A8), loc)?;
        let dst = self.alloc(1);
        let st = St::Extern(Box::new(ExternCall::AddEntry { action, args: vals, profile, dst }));
        Ok(TE {
            ex: Ex::Seq(vec![st].into_boxed_slice(), Box::new(Ex::Load(Place::at(dst)))),
            ty: Ty::Bool,
        })
    }

    /// The fields of a `clone3` / `resubmit(data)` / `recirculate(data)` list as a field list
    /// of their own (an id above any `@field_list` a program can write).
    fn data_field_list(&mut self, e: &ast::Expr) -> R<u32> {
        let mut leaves = Vec::new();
        self.leaves(e, &mut leaves)?;
        let mut slots = Vec::new();
        for l in leaves {
            match l.ex {
                Ex::Load(Place { base, index: None }) => slots.push((base, 1)),
                _ => return unsupported(e.loc, "a preserved field that is not a variable's field"),
            }
        }
        let id = 0x1_0000 + self.out.field_lists.len() as u32;
        self.out.field_lists.push((id, slots));
        Ok(id)
    }

    fn list_id(&mut self, args: &[ast::Arg], i: usize, loc: Loc) -> R<u32> {
        match args.get(i) {
            Some(a) => Ok(self.const_i128(&a.value)? as u32),
            None => err(loc, "missing field list index"),
        }
    }

    fn extern_method(
        &mut self,
        id: u32,
        tname: &str,
        member: &ast::Name,
        args: &[ast::Arg],
        loc: Loc,
    ) -> R<St> {
        let x = |c: ExternCall| Ok(St::Extern(Box::new(c)));
        let kind = self.out.instances[id as usize].kind.clone();
        match (tname, member.text.as_str()) {
            ("register", "read") => {
                let (dst, _) = self.out_arg(args, 0, loc)?;
                let (i, _) = self.any_scalar_arg(args, 1, loc)?;
                x(ExternCall::RegisterRead(id, dst, i))
            }
            ("register", "write") => {
                let (i, _) = self.any_scalar_arg(args, 0, loc)?;
                let w = match kind {
                    InstanceKind::Register { width, .. } => width,
                    _ => 32,
                };
                let v =
                    self.scalar_arg(args, 1, &Ty::Bits(Arith { width: w, signed: false }), loc)?;
                x(ExternCall::RegisterWrite(id, i, v))
            }
            ("counter", "count") => {
                let (i, _) = self.any_scalar_arg(args, 0, loc)?;
                x(ExternCall::Count(id, i))
            }
            ("direct_counter" | "DirectCounter", "count") => x(ExternCall::DirectCount(id)),
            ("Counter", "count") => {
                if args.len() > 1 {
                    return unsupported(loc, "Counter.count with an increment");
                }
                let (i, _) = self.any_scalar_arg(args, 0, loc)?;
                x(ExternCall::Count(id, i))
            }
            ("Register", "write") => {
                let (i, _) = self.any_scalar_arg(args, 0, loc)?;
                let w = match kind {
                    InstanceKind::Register { width, .. } => width,
                    _ => 32,
                };
                let v =
                    self.scalar_arg(args, 1, &Ty::Bits(Arith { width: w, signed: false }), loc)?;
                x(ExternCall::RegisterWrite(id, i, v))
            }
            ("InternetChecksum", m @ ("clear" | "add" | "subtract" | "set_state")) => {
                let state = self.csum_states.get(&id).copied().unwrap_or(u32::MAX);
                match m {
                    "clear" => Ok(St::Set(Place::at(state), Ex::Const(0))),
                    "set_state" => {
                        let a16 = Arith { width: 16, signed: false };
                        let v = self.scalar_arg(args, 0, &Ty::Bits(a16), loc)?;
                        Ok(St::Set(Place::at(state), v))
                    }
                    _ => {
                        let mut data = Vec::new();
                        match args.first() {
                            Some(a) => self.leaves(&a.value, &mut data)?,
                            None => return err(loc, format!("{m} needs data")),
                        }
                        x(ExternCall::CsumAdd { state, data, subtract: m == "subtract" })
                    }
                }
            }
            ("Register", "read")
            | ("Hash", "get_hash")
            | ("InternetChecksum", _)
            | ("Random", "read") => {
                err(loc, format!("{tname}.{} gives a value: use it in an expression", member.text))
            }
            ("meter", "execute_meter") => {
                let (i, _) = self.any_scalar_arg(args, 0, loc)?;
                let (dst, w) = self.out_arg(args, 1, loc)?;
                x(ExternCall::Meter(id, i, dst, w))
            }
            ("direct_meter", "read") => {
                let (dst, w) = self.out_arg(args, 0, loc)?;
                x(ExternCall::DirectMeterRead(id, dst, w))
            }
            ("Checksum16", "get") => {
                let _ = kind;
                err(loc, "Checksum16.get gives a value: use it in an expression")
            }
            (t, m) => unsupported(member.loc, format!("method `{m}` of extern `{t}`")),
        }
    }
}
