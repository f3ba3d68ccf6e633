//! The parser: tokens from [`crate::lex`] into an [`crate::ast::Program`], by recursive descent.
//!
//! [`parse`] never panics. A syntax error is reported with the byte range of the offending
//! token ("expected `;`, found `}`"); the parser then skips to the end of that top-level
//! declaration (its closing `}` or `;`) and goes on, so each broken declaration gives one error
//! (at most [`MAX_ERRORS`]). [`to_diagnostics`] maps errors back to their files. Nesting deeper than [`MAX_DEPTH`] (expressions, statements, types) is an
//! error, not a stack overflow.
//!
//! Operator precedence, loosest first. The specification's grammar (appendix) leaves precedence
//! out; this is the reference compiler's (the `%left` declarations of p4c's
//! `frontends/parsers/p4/p4parser.ypp`). Unlike C, `&`, `^` and `|` bind tighter than the
//! comparisons, so `x == y & z` is `x == (y & z)`:
//!
//! | level | operators                 | associativity |
//! |-------|---------------------------|---------------|
//! | 0     | `&&&` `..` (keysets only) | left          |
//! | 1     | `?:`                      | right         |
//! | 2     | `\|\|`                    | left          |
//! | 3     | `&&`                      | left          |
//! | 4     | `==` `!=`                 | left          |
//! | 5     | `<` `>` `<=` `>=`         | left          |
//! | 6     | `\|`                      | left          |
//! | 7     | `^`                       | left          |
//! | 8     | `&`                       | left          |
//! | 9     | `<<` `>>`                 | left          |
//! | 10    | `++` `+` `-` `\|+\|` `\|-\|` | left       |
//! | 11    | `*` `/` `%`               | left          |
//! | 12    | prefix `!` `~` `-` `+`, casts | right     |
//! | 13    | postfix `.m` `[i]` `[h:l]` `(args)` | left |
//!
//! Ambiguities, without a table of type names:
//! - `<` after a name is a type argument list only when the list parses and is followed by `(`
//!   (a call `f<bit<8>>(x)`); otherwise it is less-than.
//! - `(T) e` is a cast when `T` is a built-in type (or has type arguments), or when `T` is a
//!   plain name and the token after `)` starts an operand other than `+`/`-` (so `(a) - b` is a
//!   subtraction).
//! - A statement starting with a name is a declaration when it reads as `Type name` or
//!   `Type(args) name`, and an assignment or call otherwise.
//! - `>>` is two adjacent `>` tokens: a right shift in an expression, two closings in types.

use crate::ast::*;
use crate::diag::Diagnostic;
use crate::lex::{Token, TokenKind};
use crate::pre::Expanded;

/// The deepest nesting of expressions, statements and types accepted, in levels: each operator,
/// statement or type argument list is one; a parenthesis, brace, block or `for` two (their
/// frames are larger), so about 100 nested parentheses or blocks fit. The limit keeps the
/// parser within a 2 MiB thread stack even in a debug build.
pub const MAX_DEPTH: u32 = 200;

/// A syntax error: the bytes `start..end` of the parsed text and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// First byte.
    pub start: u32,
    /// One past the last byte.
    pub end: u32,
    /// What is wrong (`expected `;`, found `}``).
    pub message: String,
}

impl core::fmt::Display for ParseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} (bytes {}..{})", self.message, self.start, self.end)
    }
}

/// Parse `tokens`, lexed from `text`, into a program.
pub fn parse(text: &str, tokens: &[Token]) -> Result<Program, Vec<ParseError>> {
    let mut p = Parser { text, toks: tokens, pos: 0, depth: 0 };
    let mut decls = Vec::new();
    let mut errors = Vec::new();
    while p.pos < p.toks.len() {
        let start = p.pos;
        match p.top_decl() {
            Ok(Some(d)) => decls.push(d),
            Ok(None) => {}
            Err(e) => {
                errors.push(e);
                if errors.len() >= MAX_ERRORS {
                    break;
                }
                p.depth = 0;
                p.resync(start);
            }
        }
    }
    if errors.is_empty() { Ok(Program { decls }) } else { Err(errors) }
}

/// At most this many errors are reported (one per top-level declaration).
pub const MAX_ERRORS: usize = 20;

/// Parse errors as diagnostics, located through the preprocessor's map.
pub fn to_diagnostics(errors: &[ParseError], expanded: &Expanded) -> Vec<Diagnostic> {
    errors
        .iter()
        .map(|e| {
            let span = expanded.locate(e.start as usize).map(|mut s| {
                s.end = s.start.saturating_add(e.end.saturating_sub(e.start).max(1));
                s
            });
            Diagnostic::error(span, e.message.clone())
        })
        .collect()
}

type R<T> = Result<T, ParseError>;

struct Parser<'a> {
    text: &'a str,
    toks: &'a [Token],
    pos: usize,
    depth: u32,
}

fn is_name_kw(k: &TokenKind) -> bool {
    matches!(
        k,
        TokenKind::Ident
            | TokenKind::KwApply
            | TokenKind::KwKey
            | TokenKind::KwActions
            | TokenKind::KwState
            | TokenKind::KwEntries
            | TokenKind::KwType
            | TokenKind::KwPriority
            | TokenKind::KwList
    )
}

fn binop(k: &TokenKind) -> Option<(BinOp, u8)> {
    use TokenKind as T;
    Some(match k {
        T::Mask => (BinOp::Mask, 0),
        T::DotDot => (BinOp::Range, 0),
        T::OrOr => (BinOp::Or, 2),
        T::AndAnd => (BinOp::And, 3),
        T::EqEq => (BinOp::Eq, 4),
        T::Ne => (BinOp::Ne, 4),
        T::Lt => (BinOp::Lt, 5),
        T::Le => (BinOp::Le, 5),
        T::Gt => (BinOp::Gt, 5),
        T::Ge => (BinOp::Ge, 5),
        T::Pipe => (BinOp::BitOr, 6),
        T::Caret => (BinOp::BitXor, 7),
        T::Amp => (BinOp::BitAnd, 8),
        T::Shl => (BinOp::Shl, 9),
        T::PlusPlus => (BinOp::Concat, 10),
        T::Plus => (BinOp::Add, 10),
        T::Minus => (BinOp::Sub, 10),
        T::PlusSat => (BinOp::AddSat, 10),
        T::MinusSat => (BinOp::SubSat, 10),
        T::Star => (BinOp::Mul, 11),
        T::Slash => (BinOp::Div, 11),
        T::Percent => (BinOp::Mod, 11),
        _ => return None,
    })
}

fn compound(k: &TokenKind) -> Option<BinOp> {
    use TokenKind as T;
    Some(match k {
        T::PlusAssign => BinOp::Add,
        T::MinusAssign => BinOp::Sub,
        T::StarAssign => BinOp::Mul,
        T::SlashAssign => BinOp::Div,
        T::PercentAssign => BinOp::Mod,
        T::ShlAssign => BinOp::Shl,
        T::AmpAssign => BinOp::BitAnd,
        T::PipeAssign => BinOp::BitOr,
        T::CaretAssign => BinOp::BitXor,
        T::PlusSatAssign => BinOp::AddSat,
        T::MinusSatAssign => BinOp::SubSat,
        _ => return None,
    })
}

impl<'a> Parser<'a> {
    // ---- token helpers ----

    fn peek(&self) -> Option<&'a TokenKind> {
        self.toks.get(self.pos).map(|t| &t.kind)
    }

    fn peek_at(&self, n: usize) -> Option<&'a TokenKind> {
        self.toks.get(self.pos + n).map(|t| &t.kind)
    }

    fn at(&self, k: &TokenKind) -> bool {
        self.peek() == Some(k)
    }

    fn loc_here(&self) -> Loc {
        match self.toks.get(self.pos) {
            Some(t) => Loc { start: t.start, end: t.end },
            None => {
                let end = self.toks.last().map_or(0, |t| t.end);
                Loc { start: end, end }
            }
        }
    }

    fn prev_end(&self) -> u32 {
        self.pos.checked_sub(1).and_then(|i| self.toks.get(i)).map_or(0, |t| t.end)
    }

    fn since(&self, start: Loc) -> Loc {
        Loc { start: start.start, end: self.prev_end().max(start.start) }
    }

    fn describe(&self) -> String {
        match self.toks.get(self.pos) {
            None => "end of input".to_string(),
            Some(t) => match &t.kind {
                TokenKind::Ident => format!("identifier `{}`", t.text(self.text)),
                TokenKind::Annotation => format!("annotation `{}`", t.text(self.text)),
                TokenKind::Int(_) => format!("integer `{}`", t.text(self.text)),
                TokenKind::Str(_) => "string literal".to_string(),
                TokenKind::Error => format!("unreadable text `{}`", t.text(self.text)),
                k => format!("`{}`", k.fixed_text().unwrap_or("?")),
            },
        }
    }

    fn err<T>(&self, what: &str) -> R<T> {
        let loc = self.loc_here();
        Err(ParseError {
            start: loc.start,
            end: loc.end,
            message: format!("expected {what}, found {}", self.describe()),
        })
    }

    fn eat(&mut self, k: &TokenKind) -> bool {
        if self.at(k) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, k: &TokenKind) -> R<Loc> {
        if self.at(k) {
            let l = self.loc_here();
            self.pos += 1;
            Ok(l)
        } else {
            self.err(&format!("`{}`", k.fixed_text().unwrap_or("?")))
        }
    }

    fn enter(&mut self) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            let loc = self.loc_here();
            return Err(ParseError {
                start: loc.start,
                end: loc.end,
                message: format!("nesting deeper than {MAX_DEPTH} levels"),
            });
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    fn name(&mut self) -> R<Name> {
        match self.toks.get(self.pos) {
            Some(t) if is_name_kw(&t.kind) => {
                self.pos += 1;
                Ok(Name {
                    text: t.text(self.text).to_string(),
                    loc: Loc { start: t.start, end: t.end },
                })
            }
            _ => self.err("a name"),
        }
    }

    /// A member name after `.`: any identifier or keyword.
    fn member_name(&mut self) -> R<Name> {
        match self.toks.get(self.pos) {
            Some(t) if t.kind == TokenKind::Ident || t.kind.is_keyword() => {
                self.pos += 1;
                Ok(Name {
                    text: t.text(self.text).to_string(),
                    loc: Loc { start: t.start, end: t.end },
                })
            }
            _ => self.err("a member name"),
        }
    }

    /// After an error in the top-level declaration that started at token `start`: skip past
    /// its end, the first `;` or `}` that closes back to the brace depth it started at (or
    /// past the token of the error, whichever is later).
    fn resync(&mut self, start: usize) {
        let err_pos = self.pos.max(start + 1);
        let mut depth = 0usize;
        let mut i = start;
        while let Some(t) = self.toks.get(i) {
            match t.kind {
                TokenKind::LBrace => depth += 1,
                TokenKind::RBrace => depth = depth.saturating_sub(1),
                _ => {}
            }
            i += 1;
            if i >= err_pos && depth == 0 && matches!(t.kind, TokenKind::Semi | TokenKind::RBrace) {
                break;
            }
        }
        self.pos = i;
    }

    // ---- annotations ----

    fn annotations(&mut self) -> R<Vec<Annotation>> {
        let mut out = Vec::new();
        while let Some(t) = self.toks.get(self.pos) {
            if t.kind != TokenKind::Annotation {
                break;
            }
            let start = Loc { start: t.start, end: t.end };
            let text = t.text(self.text);
            let name = Name {
                text: text.get(1..).unwrap_or("").to_string(),
                loc: Loc { start: t.start.saturating_add(1), end: t.end },
            };
            self.pos += 1;
            let mut body = Vec::new();
            if name.text == "pragma" {
                // The rest of the line.
                let mut last_end = t.end;
                while let Some(n) = self.toks.get(self.pos) {
                    let gap = self.text.get(last_end as usize..n.start as usize).unwrap_or("\n");
                    if gap.contains('\n') {
                        break;
                    }
                    body.push(n.clone());
                    last_end = n.end;
                    self.pos += 1;
                }
            } else if let Some(open @ (TokenKind::LParen | TokenKind::LBracket)) = self.peek() {
                let close = if *open == TokenKind::LParen {
                    TokenKind::RParen
                } else {
                    TokenKind::RBracket
                };
                let open = open.clone();
                self.pos += 1;
                let mut depth = 1usize;
                loop {
                    let Some(n) = self.toks.get(self.pos) else {
                        return self.err(&format!("`{}`", close.fixed_text().unwrap_or("?")));
                    };
                    if n.kind == open {
                        depth += 1;
                    } else if n.kind == close {
                        depth -= 1;
                        if depth == 0 {
                            self.pos += 1;
                            break;
                        }
                    }
                    body.push(n.clone());
                    self.pos += 1;
                }
            }
            out.push(Annotation { name, body, loc: self.since(start) });
        }
        Ok(out)
    }

    // ---- types ----

    fn type_params(&mut self) -> R<Vec<Name>> {
        let mut out = Vec::new();
        if self.eat(&TokenKind::Lt) {
            loop {
                out.push(self.name()?);
                if !self.eat(&TokenKind::Comma) {
                    break;
                }
            }
            self.expect(&TokenKind::Gt)?;
        }
        Ok(out)
    }

    fn ty(&mut self) -> R<Type> {
        self.enter()?;
        let r = self.ty_inner();
        self.leave();
        r
    }

    fn ty_inner(&mut self) -> R<Type> {
        let mut t = self.base_ty()?;
        // Header stacks: `T[n]` (possibly `T[n][m]`).
        while self.at(&TokenKind::LBracket) {
            self.pos += 1;
            let size = self.expr()?;
            self.expect(&TokenKind::RBracket)?;
            let loc = self.since(t.loc);
            t = Type { kind: TypeKind::Stack { elem: Box::new(t), size: Box::new(size) }, loc };
        }
        Ok(t)
    }

    /// `<W>` after `bit`, `int`, `varbit`: an integer, or a parenthesised expression.
    fn width(&mut self) -> R<Expr> {
        self.expect(&TokenKind::Lt)?;
        let e = match self.peek() {
            Some(TokenKind::LParen) => {
                self.pos += 1;
                let e = self.expr()?;
                self.expect(&TokenKind::RParen)?;
                e
            }
            Some(TokenKind::Int(_)) | Some(TokenKind::Ident) => self.primary()?,
            _ => return self.err("a width"),
        };
        self.expect(&TokenKind::Gt)?;
        Ok(e)
    }

    fn base_ty(&mut self) -> R<Type> {
        let start = self.loc_here();
        let kind = match self.peek() {
            Some(TokenKind::KwBit) | Some(TokenKind::KwInt) => {
                let signed = self.at(&TokenKind::KwInt);
                self.pos += 1;
                let width =
                    if self.at(&TokenKind::Lt) { Some(Box::new(self.width()?)) } else { None };
                TypeKind::Bits { signed, width }
            }
            Some(TokenKind::KwVarbit) => {
                self.pos += 1;
                TypeKind::Varbit(Box::new(self.width()?))
            }
            Some(TokenKind::KwBool) => {
                self.pos += 1;
                TypeKind::Bool
            }
            Some(TokenKind::KwError) => {
                self.pos += 1;
                TypeKind::Error
            }
            Some(TokenKind::KwString) => {
                self.pos += 1;
                TypeKind::String
            }
            Some(TokenKind::KwVoid) => {
                self.pos += 1;
                TypeKind::Void
            }
            Some(TokenKind::KwMatchKind) => {
                self.pos += 1;
                TypeKind::MatchKind
            }
            Some(TokenKind::DontCare) => {
                self.pos += 1;
                TypeKind::DontCare
            }
            Some(TokenKind::KwTuple) => {
                self.pos += 1;
                TypeKind::Tuple(self.type_args()?)
            }
            Some(TokenKind::KwList) if self.peek_at(1) == Some(&TokenKind::Lt) => {
                self.pos += 1;
                self.expect(&TokenKind::Lt)?;
                let t = self.ty()?;
                self.expect(&TokenKind::Gt)?;
                TypeKind::List(Box::new(t))
            }
            Some(TokenKind::Dot) | Some(TokenKind::Ident) | Some(TokenKind::KwType) => {
                self.eat(&TokenKind::Dot);
                let name = self.name()?;
                let args = if self.at(&TokenKind::Lt) { self.type_args()? } else { Vec::new() };
                TypeKind::Named { name, args }
            }
            _ => return self.err("a type"),
        };
        Ok(Type { kind, loc: self.since(start) })
    }

    fn type_args(&mut self) -> R<Vec<Type>> {
        self.expect(&TokenKind::Lt)?;
        let mut out = Vec::new();
        if !self.at(&TokenKind::Gt) {
            loop {
                out.push(self.ty()?);
                if !self.eat(&TokenKind::Comma) {
                    break;
                }
            }
        }
        self.expect(&TokenKind::Gt)?;
        Ok(out)
    }

    // ---- parameters and arguments ----

    fn params(&mut self) -> R<Vec<Param>> {
        self.expect(&TokenKind::LParen)?;
        let mut out = Vec::new();
        if !self.eat(&TokenKind::RParen) {
            loop {
                let annotations = self.annotations()?;
                let start = self.loc_here();
                let direction = match self.peek() {
                    Some(TokenKind::KwIn) => Direction::In,
                    Some(TokenKind::KwOut) => Direction::Out,
                    Some(TokenKind::KwInout) => Direction::InOut,
                    _ => Direction::None,
                };
                if direction != Direction::None {
                    self.pos += 1;
                }
                let ty = self.ty()?;
                let name = self.name()?;
                let default = if self.eat(&TokenKind::Assign) { Some(self.expr()?) } else { None };
                out.push(Param {
                    annotations,
                    direction,
                    ty,
                    name,
                    default,
                    loc: self.since(start),
                });
                if !self.eat(&TokenKind::Comma) {
                    break;
                }
            }
            self.expect(&TokenKind::RParen)?;
        }
        Ok(out)
    }

    fn args(&mut self) -> R<Vec<Arg>> {
        self.expect(&TokenKind::LParen)?;
        let mut out = Vec::new();
        if !self.eat(&TokenKind::RParen) {
            loop {
                let start = self.loc_here();
                let name = if self.peek().is_some_and(is_name_kw)
                    && self.peek_at(1) == Some(&TokenKind::Assign)
                {
                    let n = self.name()?;
                    self.pos += 1;
                    Some(n)
                } else {
                    None
                };
                let value = self.expr()?;
                out.push(Arg { name, value, loc: self.since(start) });
                if !self.eat(&TokenKind::Comma) {
                    break;
                }
            }
            self.expect(&TokenKind::RParen)?;
        }
        Ok(out)
    }

    // ---- expressions ----

    fn expr(&mut self) -> R<Expr> {
        self.expr_bp(0)
    }

    /// An expression whose binary operators bind at least as tight as `min`.
    fn expr_bp(&mut self, min: u8) -> R<Expr> {
        self.enter()?;
        let r = self.expr_bp_inner(min);
        self.leave();
        r
    }

    fn expr_bp_inner(&mut self, min: u8) -> R<Expr> {
        let mut lhs = self.unary()?;
        while let Some(k) = self.peek() {
            // `?:` at level 1, right-associative.
            if *k == TokenKind::Question {
                if min > 1 {
                    break;
                }
                self.pos += 1;
                let then = self.expr_bp(1)?;
                self.expect(&TokenKind::Colon)?;
                let els = self.expr_bp(1)?;
                let loc = lhs.loc.to(els.loc);
                lhs = Expr {
                    kind: ExprKind::Ternary {
                        cond: Box::new(lhs),
                        then: Box::new(then),
                        els: Box::new(els),
                    },
                    loc,
                };
                continue;
            }
            // `>>`: two adjacent `>`.
            let (op, prec, width) = if *k == TokenKind::Gt
                && self.peek_at(1) == Some(&TokenKind::Gt)
                && self.toks[self.pos].is_adjacent_to(&self.toks[self.pos + 1])
            {
                (BinOp::Shr, 9, 2)
            } else if let Some((op, prec)) = binop(k) {
                (op, prec, 1)
            } else {
                break;
            };
            if prec < min {
                break;
            }
            // `a >>= b` is a compound assignment, not a comparison: leave it.
            if op == BinOp::Gt
                && self.peek_at(1) == Some(&TokenKind::Ge)
                && self.toks[self.pos].is_adjacent_to(&self.toks[self.pos + 1])
            {
                break;
            }
            self.pos += width;
            let rhs = self.expr_bp(prec + 1)?;
            let loc = lhs.loc.to(rhs.loc);
            lhs =
                Expr { kind: ExprKind::Binary { op, lhs: Box::new(lhs), rhs: Box::new(rhs) }, loc };
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> R<Expr> {
        let start = self.loc_here();
        let op = match self.peek() {
            Some(TokenKind::Not) => Some(UnOp::Not),
            Some(TokenKind::Tilde) => Some(UnOp::BitNot),
            Some(TokenKind::Minus) => Some(UnOp::Neg),
            Some(TokenKind::Plus) => Some(UnOp::Plus),
            _ => None,
        };
        if let Some(op) = op {
            self.pos += 1;
            self.enter()?;
            let e = self.unary();
            self.leave();
            let e = e?;
            return Ok(Expr {
                kind: ExprKind::Unary { op, expr: Box::new(e) },
                loc: self.since(start),
            });
        }
        if self.at(&TokenKind::LParen)
            && let Some(ty) = self.try_cast_type()
        {
            self.enter()?;
            let e = self.unary();
            self.leave();
            let e = e?;
            return Ok(Expr {
                kind: ExprKind::Cast { ty, expr: Box::new(e) },
                loc: self.since(start),
            });
        }
        self.postfix()
    }

    /// At `(`: the type of a cast `(T)`, consumed, or `None` with nothing consumed.
    fn try_cast_type(&mut self) -> Option<Type> {
        let save = self.pos;
        self.pos += 1;
        let Ok(ty) = self.ty() else {
            self.pos = save;
            return None;
        };
        if !self.eat(&TokenKind::RParen) {
            self.pos = save;
            return None;
        }
        let is_cast = match &ty.kind {
            TypeKind::Named { args, .. } if args.is_empty() => matches!(
                self.peek(),
                Some(
                    TokenKind::Ident
                        | TokenKind::Int(_)
                        | TokenKind::Str(_)
                        | TokenKind::KwTrue
                        | TokenKind::KwFalse
                        | TokenKind::KwThis
                        | TokenKind::KwError
                        | TokenKind::LParen
                        | TokenKind::LBrace
                        | TokenKind::Not
                        | TokenKind::Tilde
                )
            ),
            TypeKind::DontCare => false,
            _ => true,
        };
        if is_cast {
            Some(ty)
        } else {
            self.pos = save;
            None
        }
    }

    fn postfix(&mut self) -> R<Expr> {
        let mut e = self.primary()?;
        loop {
            match self.peek() {
                Some(TokenKind::Dot) => {
                    self.pos += 1;
                    let member = self.member_name()?;
                    let loc = e.loc.to(member.loc);
                    e = Expr { kind: ExprKind::Member { base: Box::new(e), member }, loc };
                }
                Some(TokenKind::LBracket) => {
                    self.pos += 1;
                    let first = self.expr()?;
                    let kind = if self.eat(&TokenKind::Colon) {
                        let lo = self.expr()?;
                        ExprKind::Slice {
                            base: Box::new(e.clone()),
                            hi: Box::new(first),
                            lo: Box::new(lo),
                        }
                    } else {
                        ExprKind::Index { base: Box::new(e.clone()), index: Box::new(first) }
                    };
                    let end = self.expect(&TokenKind::RBracket)?;
                    e = Expr { kind, loc: e.loc.to(end) };
                }
                Some(TokenKind::LParen) => {
                    let args = self.args()?;
                    let loc = self.since(e.loc);
                    e = Expr {
                        kind: ExprKind::Call { callee: Box::new(e), type_args: Vec::new(), args },
                        loc,
                    };
                }
                Some(TokenKind::Lt)
                    if matches!(e.kind, ExprKind::Name(_) | ExprKind::Member { .. }) =>
                {
                    // Type arguments of a call, if they parse and a `(` follows.
                    let save = self.pos;
                    match self.type_args() {
                        Ok(type_args) if self.at(&TokenKind::LParen) => {
                            let args = self.args()?;
                            let loc = self.since(e.loc);
                            e = Expr {
                                kind: ExprKind::Call { callee: Box::new(e), type_args, args },
                                loc,
                            };
                        }
                        _ => {
                            self.pos = save;
                            break;
                        }
                    }
                }
                _ => break,
            }
        }
        Ok(e)
    }

    fn primary(&mut self) -> R<Expr> {
        // Parentheses and braces nest through more (and larger) frames than operators do: they
        // count twice towards MAX_DEPTH.
        let nests = matches!(self.peek(), Some(TokenKind::LParen | TokenKind::LBrace));
        if nests {
            self.enter()?;
        }
        let r = self.primary_inner();
        if nests {
            self.leave();
        }
        r
    }

    fn primary_inner(&mut self) -> R<Expr> {
        let start = self.loc_here();
        let Some(t) = self.toks.get(self.pos) else { return self.err("an expression") };
        let kind = match &t.kind {
            TokenKind::Int(v) => {
                self.pos += 1;
                ExprKind::Int(v.clone())
            }
            TokenKind::Str(s) => {
                self.pos += 1;
                ExprKind::Str(s.clone())
            }
            TokenKind::KwTrue => {
                self.pos += 1;
                ExprKind::Bool(true)
            }
            TokenKind::KwFalse => {
                self.pos += 1;
                ExprKind::Bool(false)
            }
            TokenKind::KwThis => {
                self.pos += 1;
                ExprKind::This
            }
            TokenKind::KwDefault => {
                self.pos += 1;
                ExprKind::Default
            }
            TokenKind::DontCare => {
                self.pos += 1;
                ExprKind::DontCare
            }
            TokenKind::KwError => {
                self.pos += 1;
                ExprKind::Name("error".to_string())
            }
            TokenKind::Dot => {
                self.pos += 1;
                ExprKind::Name(self.name()?.text)
            }
            k if is_name_kw(k) => {
                self.pos += 1;
                ExprKind::Name(t.text(self.text).to_string())
            }
            TokenKind::KwBit
            | TokenKind::KwInt
            | TokenKind::KwVarbit
            | TokenKind::KwBool
            | TokenKind::KwTuple => ExprKind::Type(self.ty()?),
            TokenKind::LParen => {
                self.pos += 1;
                let e = self.expr()?;
                self.expect(&TokenKind::RParen)?;
                return Ok(Expr { kind: e.kind, loc: self.since(start) });
            }
            TokenKind::LBrace => {
                self.pos += 1;
                self.brace_expr()?
            }
            _ => return self.err("an expression"),
        };
        Ok(Expr { kind, loc: self.since(start) })
    }

    /// After `{`: a list `{a, b}` or a struct initialiser `{f = 1, g = 2}`, through `}`.
    fn brace_expr(&mut self) -> R<ExprKind> {
        if self.eat(&TokenKind::RBrace) {
            return Ok(ExprKind::List(Vec::new()));
        }
        let is_struct =
            self.peek().is_some_and(is_name_kw) && self.peek_at(1) == Some(&TokenKind::Assign);
        let mut items = Vec::new();
        let mut fields = Vec::new();
        loop {
            if is_struct {
                let n = self.name()?;
                self.expect(&TokenKind::Assign)?;
                fields.push((n, self.expr()?));
            } else {
                items.push(self.expr()?);
            }
            if !self.eat(&TokenKind::Comma) || self.at(&TokenKind::RBrace) {
                break;
            }
        }
        self.expect(&TokenKind::RBrace)?;
        Ok(if is_struct { ExprKind::StructInit(fields) } else { ExprKind::List(items) })
    }

    // ---- statements ----

    /// A block; it counts as a nesting level of its own (besides its statements').
    fn block(&mut self) -> R<Block> {
        self.enter()?;
        let r = self.block_inner();
        self.leave();
        r
    }

    fn block_inner(&mut self) -> R<Block> {
        let start = self.expect(&TokenKind::LBrace)?;
        let mut stmts = Vec::new();
        while !self.eat(&TokenKind::RBrace) {
            if self.pos >= self.toks.len() {
                return self.err("`}`");
            }
            stmts.push(self.stmt()?);
        }
        Ok(Block { stmts, loc: self.since(start) })
    }

    fn stmt(&mut self) -> R<Stmt> {
        self.enter()?;
        let r = self.stmt_inner();
        self.leave();
        r
    }

    fn stmt_inner(&mut self) -> R<Stmt> {
        let annotations = self.annotations()?;
        let start = self.loc_here();
        let kind = match self.peek() {
            Some(TokenKind::LBrace) => StmtKind::Block(self.block()?),
            Some(TokenKind::Semi) => {
                self.pos += 1;
                StmtKind::Empty
            }
            Some(TokenKind::KwExit) => {
                self.pos += 1;
                self.expect(&TokenKind::Semi)?;
                StmtKind::Exit
            }
            Some(TokenKind::KwBreak) => {
                self.pos += 1;
                self.expect(&TokenKind::Semi)?;
                StmtKind::Break
            }
            Some(TokenKind::KwContinue) => {
                self.pos += 1;
                self.expect(&TokenKind::Semi)?;
                StmtKind::Continue
            }
            Some(TokenKind::KwReturn) => {
                self.pos += 1;
                let e = if self.at(&TokenKind::Semi) { None } else { Some(self.expr()?) };
                self.expect(&TokenKind::Semi)?;
                StmtKind::Return(e)
            }
            Some(TokenKind::KwIf) => {
                self.pos += 1;
                self.expect(&TokenKind::LParen)?;
                let cond = self.expr()?;
                self.expect(&TokenKind::RParen)?;
                let then = Box::new(self.stmt()?);
                let els =
                    if self.eat(&TokenKind::KwElse) { Some(Box::new(self.stmt()?)) } else { None };
                StmtKind::If { cond, then, els }
            }
            Some(TokenKind::KwSwitch) => self.switch()?,
            Some(TokenKind::KwFor) => self.for_stmt()?,
            Some(TokenKind::KwConst) => {
                let d = self.const_decl(Vec::new())?;
                StmtKind::Decl(Box::new(d))
            }
            _ => {
                if let Some(d) = self.try_local_decl()? {
                    StmtKind::Decl(Box::new(d))
                } else {
                    self.expr_stmt(true)?
                }
            }
        };
        Ok(Stmt { annotations, kind, loc: self.since(start) })
    }

    #[inline(never)]
    fn switch(&mut self) -> R<StmtKind> {
        self.expect(&TokenKind::KwSwitch)?;
        self.expect(&TokenKind::LParen)?;
        let expr = self.expr()?;
        self.expect(&TokenKind::RParen)?;
        self.expect(&TokenKind::LBrace)?;
        let mut cases = Vec::new();
        while !self.eat(&TokenKind::RBrace) {
            let _ = self.annotations()?;
            let start = self.loc_here();
            let label = self.expr()?;
            self.expect(&TokenKind::Colon)?;
            let body = if self.at(&TokenKind::LBrace) { Some(self.block()?) } else { None };
            cases.push(SwitchCase { label, body, loc: self.since(start) });
        }
        Ok(StmtKind::Switch { expr, cases })
    }

    /// `for (init; cond; update) body` or `for (T x in range) body` (P4-16 v1.2.5).
    #[inline(never)]
    fn for_stmt(&mut self) -> R<StmtKind> {
        self.enter()?;
        let r = self.for_stmt_inner();
        self.leave();
        r
    }

    fn for_stmt_inner(&mut self) -> R<StmtKind> {
        self.expect(&TokenKind::KwFor)?;
        self.expect(&TokenKind::LParen)?;
        // `for (T x in e)` / `for (x in e)`.
        let save = self.pos;
        let _ = self.annotations()?;
        let ty = if self.peek().is_some_and(is_name_kw) && self.peek_at(1) == Some(&TokenKind::KwIn)
        {
            Ok(None)
        } else {
            self.ty().map(Some)
        };
        if let Ok(ty) = ty
            && self.peek().is_some_and(is_name_kw)
            && self.peek_at(1) == Some(&TokenKind::KwIn)
        {
            let name = self.name()?;
            self.pos += 1;
            let range = self.expr()?;
            self.expect(&TokenKind::RParen)?;
            let body = Box::new(self.stmt()?);
            return Ok(StmtKind::ForIn { ty, name, range, body });
        }
        self.pos = save;
        let init = self.for_list(&TokenKind::Semi)?;
        self.expect(&TokenKind::Semi)?;
        let cond = if self.at(&TokenKind::Semi) { None } else { Some(self.expr()?) };
        self.expect(&TokenKind::Semi)?;
        let update = self.for_list(&TokenKind::RParen)?;
        self.expect(&TokenKind::RParen)?;
        let body = Box::new(self.stmt()?);
        Ok(StmtKind::For { init, cond, update, body })
    }

    /// The comma-separated declarations, assignments and calls of a `for` header, up to `end`.
    fn for_list(&mut self, end: &TokenKind) -> R<Vec<Stmt>> {
        let mut out = Vec::new();
        if self.at(end) {
            return Ok(out);
        }
        loop {
            let annotations = self.annotations()?;
            let start = self.loc_here();
            let kind = match self.try_local_decl_with(false)? {
                Some(d) => StmtKind::Decl(Box::new(d)),
                None => self.expr_stmt(false)?,
            };
            out.push(Stmt { annotations, kind, loc: self.since(start) });
            if !self.eat(&TokenKind::Comma) {
                return Ok(out);
            }
        }
    }

    /// An assignment or a call statement, through its `;` when `semi`.
    #[inline(never)]
    fn expr_stmt(&mut self, semi: bool) -> R<StmtKind> {
        let lhs = self.expr_bp(1)?;
        let kind = if self.eat(&TokenKind::Assign) {
            StmtKind::Assign { lhs, op: None, rhs: self.expr()? }
        } else if let Some(op) = self.peek().and_then(compound) {
            self.pos += 1;
            StmtKind::Assign { lhs, op: Some(op), rhs: self.expr()? }
        } else if self.at(&TokenKind::Gt)
            && self.peek_at(1) == Some(&TokenKind::Ge)
            && self.toks[self.pos].is_adjacent_to(&self.toks[self.pos + 1])
        {
            self.pos += 2;
            StmtKind::Assign { lhs, op: Some(BinOp::Shr), rhs: self.expr()? }
        } else if matches!(lhs.kind, ExprKind::Call { .. }) {
            StmtKind::Call(lhs)
        } else {
            return self.err("`=` or a call");
        };
        if semi {
            self.expect(&TokenKind::Semi)?;
        }
        Ok(kind)
    }

    /// A variable declaration `T x [= e];` or an instantiation `T(args) x;`, if the tokens
    /// read as one; otherwise nothing is consumed.
    fn try_local_decl(&mut self) -> R<Option<Decl>> {
        self.try_local_decl_with(true)
    }

    /// As [`Self::try_local_decl`]; without `semi` (a `for` initialiser), only a variable
    /// declaration, which ends before its `;` or `,`.
    #[inline(never)]
    fn try_local_decl_with(&mut self, semi: bool) -> R<Option<Decl>> {
        let save = self.pos;
        let start = self.loc_here();
        let Ok(ty) = self.ty() else {
            self.pos = save;
            return Ok(None);
        };
        if self.peek().is_some_and(is_name_kw)
            && (matches!(self.peek_at(1), Some(TokenKind::Semi | TokenKind::Assign))
                || (!semi && self.peek_at(1) == Some(&TokenKind::Comma)))
        {
            let name = self.name()?;
            let init = if self.eat(&TokenKind::Assign) { Some(self.expr()?) } else { None };
            if semi {
                self.expect(&TokenKind::Semi)?;
            }
            return Ok(Some(Decl {
                annotations: Vec::new(),
                kind: DeclKind::Var { ty, name, init },
                loc: self.since(start),
            }));
        }
        if semi
            && self.at(&TokenKind::LParen)
            && let Ok(args) = self.args()
            && self.peek().is_some_and(is_name_kw)
            && matches!(self.peek_at(1), Some(TokenKind::Semi | TokenKind::Assign))
        {
            let name = self.name()?;
            let init = if self.eat(&TokenKind::Assign) {
                self.expect(&TokenKind::LBrace)?;
                let mut fns = Vec::new();
                while !self.eat(&TokenKind::RBrace) {
                    if self.pos >= self.toks.len() {
                        return self.err("`}`");
                    }
                    let annotations = self.annotations()?;
                    let fstart = self.loc_here();
                    let proto = self.function_proto()?;
                    let body = self.block()?;
                    let kind = DeclKind::Function { proto, body };
                    fns.push(Decl { annotations, kind, loc: self.since(fstart) });
                }
                Some(fns)
            } else {
                None
            };
            self.expect(&TokenKind::Semi)?;
            return Ok(Some(Decl {
                annotations: Vec::new(),
                kind: DeclKind::Instance { ty, args, name, init },
                loc: self.since(start),
            }));
        }
        self.pos = save;
        Ok(None)
    }

    // ---- declarations ----

    #[inline(never)]
    fn const_decl(&mut self, annotations: Vec<Annotation>) -> R<Decl> {
        let start = self.expect(&TokenKind::KwConst)?;
        let ty = self.ty()?;
        let name = self.name()?;
        self.expect(&TokenKind::Assign)?;
        let value = self.expr()?;
        self.expect(&TokenKind::Semi)?;
        Ok(Decl { annotations, kind: DeclKind::Const { ty, name, value }, loc: self.since(start) })
    }

    fn top_decl(&mut self) -> R<Option<Decl>> {
        let annotations = self.annotations()?;
        if self.pos >= self.toks.len() {
            return if annotations.is_empty() { Ok(None) } else { self.err("a declaration") };
        }
        if annotations.is_empty() && self.eat(&TokenKind::Semi) {
            return Ok(None);
        }
        let start = self.loc_here();
        let kind = match self.peek() {
            Some(TokenKind::KwHeader) => self.struct_decl(StructKind::Header)?,
            Some(TokenKind::KwHeaderUnion) => self.struct_decl(StructKind::HeaderUnion)?,
            Some(TokenKind::KwStruct) => self.struct_decl(StructKind::Struct)?,
            Some(TokenKind::KwEnum) => self.enum_decl()?,
            Some(TokenKind::KwError) if self.peek_at(1) == Some(&TokenKind::LBrace) => {
                self.pos += 1;
                DeclKind::Error(self.name_list()?)
            }
            Some(TokenKind::KwMatchKind) => {
                self.pos += 1;
                DeclKind::MatchKind(self.name_list()?)
            }
            Some(TokenKind::KwTypedef) | Some(TokenKind::KwType) => {
                let is_typedef = self.at(&TokenKind::KwTypedef);
                self.pos += 1;
                let ty = self.ty()?;
                let name = self.name()?;
                self.expect(&TokenKind::Semi)?;
                if is_typedef {
                    DeclKind::Typedef { name, ty }
                } else {
                    DeclKind::NewType { name, ty }
                }
            }
            Some(TokenKind::KwConst) => return self.const_decl(annotations).map(Some),
            Some(TokenKind::KwExtern) => self.extern_decl()?,
            Some(TokenKind::KwParser) => self.parser_decl()?,
            Some(TokenKind::KwControl) => self.control_decl()?,
            Some(TokenKind::KwPackage) => {
                self.pos += 1;
                let proto = self.block_proto()?;
                self.expect(&TokenKind::Semi)?;
                DeclKind::Package(proto)
            }
            Some(TokenKind::KwAction) => self.action_decl()?,
            _ => {
                // A function `T f(...) { }` or an instantiation `T(args) x;`.
                let save = self.pos;
                if let Some(mut d) = self.try_local_decl()? {
                    if matches!(d.kind, DeclKind::Instance { .. }) {
                        d.annotations = annotations;
                        return Ok(Some(d));
                    }
                    self.pos = save;
                }
                let proto = self.function_proto()?;
                let body = self.block()?;
                DeclKind::Function { proto, body }
            }
        };
        Ok(Some(Decl { annotations, kind, loc: self.since(start) }))
    }

    fn name_list(&mut self) -> R<Vec<Name>> {
        self.expect(&TokenKind::LBrace)?;
        let mut out = Vec::new();
        while !self.eat(&TokenKind::RBrace) {
            out.push(self.name()?);
            if !self.eat(&TokenKind::Comma) {
                self.expect(&TokenKind::RBrace)?;
                break;
            }
        }
        Ok(out)
    }

    fn struct_decl(&mut self, kind: StructKind) -> R<DeclKind> {
        self.pos += 1;
        let name = self.name()?;
        let type_params = self.type_params()?;
        self.expect(&TokenKind::LBrace)?;
        let mut fields = Vec::new();
        while !self.eat(&TokenKind::RBrace) {
            let annotations = self.annotations()?;
            let start = self.loc_here();
            let ty = self.ty()?;
            let name = self.name()?;
            self.expect(&TokenKind::Semi)?;
            fields.push(Field { annotations, ty, name, loc: self.since(start) });
        }
        Ok(DeclKind::Struct { kind, name, type_params, fields })
    }

    fn enum_decl(&mut self) -> R<DeclKind> {
        self.pos += 1;
        let repr =
            if self.peek().is_some_and(is_name_kw) && self.peek_at(1) == Some(&TokenKind::LBrace) {
                None
            } else {
                Some(self.ty()?)
            };
        let name = self.name()?;
        self.expect(&TokenKind::LBrace)?;
        let mut members = Vec::new();
        while !self.eat(&TokenKind::RBrace) {
            let annotations = self.annotations()?;
            let name = self.name()?;
            let value = if self.eat(&TokenKind::Assign) { Some(self.expr()?) } else { None };
            members.push(EnumMember { annotations, name, value });
            if !self.eat(&TokenKind::Comma) {
                self.expect(&TokenKind::RBrace)?;
                break;
            }
        }
        Ok(DeclKind::Enum { name, repr, members })
    }

    fn function_proto(&mut self) -> R<FunctionProto> {
        let ret = self.ty()?;
        let name = self.name()?;
        let type_params = self.type_params()?;
        let params = self.params()?;
        Ok(FunctionProto { ret, name, type_params, params })
    }

    fn block_proto(&mut self) -> R<BlockProto> {
        let name = self.name()?;
        let type_params = self.type_params()?;
        let params = self.params()?;
        Ok(BlockProto { name, type_params, params })
    }

    fn extern_decl(&mut self) -> R<DeclKind> {
        self.expect(&TokenKind::KwExtern)?;
        // An object: `extern Name<T> {`; otherwise a function.
        let is_object = self.peek().is_some_and(is_name_kw)
            && matches!(self.peek_at(1), Some(TokenKind::LBrace | TokenKind::Lt))
            && {
                let save = self.pos;
                self.pos += 1;
                let ok = self.type_params().is_ok() && self.at(&TokenKind::LBrace);
                self.pos = save;
                ok
            };
        if !is_object {
            let proto = self.function_proto()?;
            self.expect(&TokenKind::Semi)?;
            return Ok(DeclKind::ExternFunction(proto));
        }
        let name = self.name()?;
        let type_params = self.type_params()?;
        self.expect(&TokenKind::LBrace)?;
        let mut methods = Vec::new();
        while !self.eat(&TokenKind::RBrace) {
            let annotations = self.annotations()?;
            let start = self.loc_here();
            let (kind, proto) = if self.eat(&TokenKind::KwAbstract) {
                (MethodKind::Abstract, self.function_proto()?)
            } else if self.peek().is_some_and(is_name_kw)
                && self.peek_at(1) == Some(&TokenKind::LParen)
            {
                let n = self.name()?;
                let params = self.params()?;
                let ret = Type { kind: TypeKind::Void, loc: n.loc };
                (
                    MethodKind::Constructor,
                    FunctionProto { ret, name: n, type_params: vec![], params },
                )
            } else {
                (MethodKind::Method, self.function_proto()?)
            };
            self.expect(&TokenKind::Semi)?;
            methods.push(Method { annotations, kind, proto, loc: self.since(start) });
        }
        Ok(DeclKind::ExternObject { name, type_params, methods })
    }

    fn action_decl(&mut self) -> R<DeclKind> {
        self.expect(&TokenKind::KwAction)?;
        let name = self.name()?;
        let params = self.params()?;
        let body = self.block()?;
        Ok(DeclKind::Action { name, params, body })
    }

    fn ctor_params(&mut self) -> R<Vec<Param>> {
        if self.at(&TokenKind::LParen) { self.params() } else { Ok(Vec::new()) }
    }

    fn parser_decl(&mut self) -> R<DeclKind> {
        self.expect(&TokenKind::KwParser)?;
        let proto = self.block_proto()?;
        if self.eat(&TokenKind::Semi) {
            return Ok(DeclKind::ParserType(proto));
        }
        let ctor_params = self.ctor_params()?;
        self.expect(&TokenKind::LBrace)?;
        let mut locals = Vec::new();
        let mut states = Vec::new();
        while !self.eat(&TokenKind::RBrace) {
            if self.pos >= self.toks.len() {
                return self.err("`}`");
            }
            let annotations = self.annotations()?;
            if self.at(&TokenKind::KwState) {
                states.push(self.state(annotations)?);
            } else {
                locals.push(self.local(annotations)?);
            }
        }
        Ok(DeclKind::Parser { proto, ctor_params, locals, states })
    }

    fn control_decl(&mut self) -> R<DeclKind> {
        self.expect(&TokenKind::KwControl)?;
        let proto = self.block_proto()?;
        if self.eat(&TokenKind::Semi) {
            return Ok(DeclKind::ControlType(proto));
        }
        let ctor_params = self.ctor_params()?;
        self.expect(&TokenKind::LBrace)?;
        let mut locals = Vec::new();
        loop {
            let annotations = self.annotations()?;
            if self.eat(&TokenKind::KwApply) {
                let apply = self.block()?;
                self.expect(&TokenKind::RBrace)?;
                return Ok(DeclKind::Control { proto, ctor_params, locals, apply });
            }
            if self.pos >= self.toks.len() || self.at(&TokenKind::RBrace) {
                return self.err("`apply`");
            }
            locals.push(self.local(annotations)?);
        }
    }

    /// A declaration local to a parser or control.
    fn local(&mut self, annotations: Vec<Annotation>) -> R<Decl> {
        let start = self.loc_here();
        let kind = match self.peek() {
            Some(TokenKind::KwConst) => return self.const_decl(annotations),
            Some(TokenKind::KwAction) => self.action_decl()?,
            Some(TokenKind::KwTable) => self.table()?,
            Some(TokenKind::KwValueSet) => {
                self.pos += 1;
                self.expect(&TokenKind::Lt)?;
                let ty = self.ty()?;
                self.expect(&TokenKind::Gt)?;
                self.expect(&TokenKind::LParen)?;
                let size = self.expr()?;
                self.expect(&TokenKind::RParen)?;
                let name = self.name()?;
                self.expect(&TokenKind::Semi)?;
                DeclKind::ValueSet { ty, size, name }
            }
            _ => match self.try_local_decl()? {
                Some(d) => d.kind,
                None => return self.err("a declaration"),
            },
        };
        Ok(Decl { annotations, kind, loc: self.since(start) })
    }

    fn state(&mut self, annotations: Vec<Annotation>) -> R<State> {
        let start = self.expect(&TokenKind::KwState)?;
        let name = self.name()?;
        self.expect(&TokenKind::LBrace)?;
        let mut stmts = Vec::new();
        let mut transition = None;
        while !self.eat(&TokenKind::RBrace) {
            if self.pos >= self.toks.len() {
                return self.err("`}`");
            }
            if self.eat(&TokenKind::KwTransition) {
                transition = Some(self.transition()?);
                self.expect(&TokenKind::RBrace)?;
                break;
            }
            stmts.push(self.stmt()?);
        }
        Ok(State { annotations, name, stmts, transition, loc: self.since(start) })
    }

    fn transition(&mut self) -> R<Transition> {
        if !self.at(&TokenKind::KwSelect) {
            let n = self.name()?;
            self.expect(&TokenKind::Semi)?;
            return Ok(Transition::Goto(n));
        }
        let start = self.expect(&TokenKind::KwSelect)?;
        self.expect(&TokenKind::LParen)?;
        let mut exprs = Vec::new();
        if !self.at(&TokenKind::RParen) {
            loop {
                exprs.push(self.expr()?);
                if !self.eat(&TokenKind::Comma) {
                    break;
                }
            }
        }
        self.expect(&TokenKind::RParen)?;
        self.expect(&TokenKind::LBrace)?;
        let mut cases = Vec::new();
        while !self.eat(&TokenKind::RBrace) {
            let _ = self.annotations()?;
            let cstart = self.loc_here();
            let keyset = self.keyset()?;
            self.expect(&TokenKind::Colon)?;
            let next = self.name()?;
            self.expect(&TokenKind::Semi)?;
            cases.push(SelectCase { keyset, next, loc: self.since(cstart) });
        }
        Ok(Transition::Select { exprs, cases, loc: self.since(start) })
    }

    /// A keyset: `(a, b)` (one expression each), or a single expression.
    fn keyset(&mut self) -> R<Vec<Expr>> {
        if self.at(&TokenKind::LParen) {
            // A tuple keyset, unless the parentheses just group one expression that goes on.
            let save = self.pos;
            self.pos += 1;
            let mut out = Vec::new();
            let mut ok = true;
            loop {
                match self.expr() {
                    Ok(e) => out.push(e),
                    Err(_) => {
                        ok = false;
                        break;
                    }
                }
                if !self.eat(&TokenKind::Comma) {
                    break;
                }
            }
            if ok && self.eat(&TokenKind::RParen) && self.at(&TokenKind::Colon) {
                return Ok(out);
            }
            self.pos = save;
        }
        Ok(vec![self.expr()?])
    }

    fn table(&mut self) -> R<DeclKind> {
        self.expect(&TokenKind::KwTable)?;
        let name = self.name()?;
        self.expect(&TokenKind::LBrace)?;
        let mut props = Vec::new();
        while !self.eat(&TokenKind::RBrace) {
            if self.pos >= self.toks.len() {
                return self.err("`}`");
            }
            let annotations = self.annotations()?;
            let start = self.loc_here();
            let is_const = self.eat(&TokenKind::KwConst);
            let kind = match self.peek() {
                Some(TokenKind::KwKey) => {
                    self.pos += 1;
                    self.expect(&TokenKind::Assign)?;
                    self.expect(&TokenKind::LBrace)?;
                    let mut elems = Vec::new();
                    while !self.eat(&TokenKind::RBrace) {
                        let kstart = self.loc_here();
                        let expr = self.expr()?;
                        self.expect(&TokenKind::Colon)?;
                        let match_kind = self.name()?;
                        let annotations = self.annotations()?;
                        self.expect(&TokenKind::Semi)?;
                        elems.push(KeyElem {
                            expr,
                            match_kind,
                            annotations,
                            loc: self.since(kstart),
                        });
                    }
                    TablePropKind::Key(elems)
                }
                Some(TokenKind::KwActions) => {
                    self.pos += 1;
                    self.expect(&TokenKind::Assign)?;
                    self.expect(&TokenKind::LBrace)?;
                    let mut refs = Vec::new();
                    while !self.eat(&TokenKind::RBrace) {
                        let annotations = self.annotations()?;
                        let astart = self.loc_here();
                        let expr = self.expr()?;
                        self.expect(&TokenKind::Semi)?;
                        refs.push(ActionRef { annotations, expr, loc: self.since(astart) });
                    }
                    TablePropKind::Actions(refs)
                }
                Some(TokenKind::KwEntries) => {
                    self.pos += 1;
                    self.expect(&TokenKind::Assign)?;
                    self.expect(&TokenKind::LBrace)?;
                    let mut entries = Vec::new();
                    while !self.eat(&TokenKind::RBrace) {
                        entries.push(self.entry()?);
                    }
                    TablePropKind::Entries(entries)
                }
                _ => {
                    let name = self.name()?;
                    self.expect(&TokenKind::Assign)?;
                    let value = self.expr()?;
                    self.expect(&TokenKind::Semi)?;
                    TablePropKind::Other { name, value }
                }
            };
            props.push(TableProp { annotations, is_const, kind, loc: self.since(start) });
        }
        Ok(DeclKind::Table { name, props })
    }

    fn entry(&mut self) -> R<Entry> {
        let annotations = self.annotations()?;
        let start = self.loc_here();
        let is_const = self.eat(&TokenKind::KwConst);
        let priority = if self.eat(&TokenKind::KwPriority) {
            self.expect(&TokenKind::Assign)?;
            let p = self.expr()?;
            self.expect(&TokenKind::Colon)?;
            Some(p)
        } else {
            None
        };
        let keyset = self.keyset()?;
        self.expect(&TokenKind::Colon)?;
        let action = self.expr()?;
        let _ = self.annotations()?;
        self.expect(&TokenKind::Semi)?;
        Ok(Entry { annotations, is_const, priority, keyset, action, loc: self.since(start) })
    }
}
