//! The preprocessor: the subset of the C preprocessor P4 programs use (p4c runs `cpp`).
//!
//! - `#include <name>` / `#include "name"`, resolved by the caller's [`Loader`];
//!   `#pragma once` and include guards work; depth and count are bounded.
//! - Object-like and function-like `#define` (empty arguments, variadic `...` /
//!   `__VA_ARGS__`, stringification `#`, token pasting `##`), `#undef`; a macro is not
//!   expanded again inside its own expansion (hide sets, as in Prosser's algorithm).
//! - `#if` / `#ifdef` / `#ifndef` / `#elif` / `#else` / `#endif` with C integer constant
//!   expressions (64-bit, `defined`, `?:`, undefined names are 0).
//! - `#line N ["file"]` (and GNU `# N "file"`), `#error`, `#warning`; `#pragma` is dropped.
//! - Comments become one space, `\`-newline continuations join lines; every source line still
//!   gives one output line (a directive an empty one, an `#include` the included file's lines;
//!   a joined line's newlines follow it), and [`Expanded::locate`] maps every output byte back
//!   to the original file and offset (text from a macro expansion maps to the macro's use, and
//!   an argument's tokens to the argument).
//!
//! Not supported: a function-like macro whose `(` is on a later line than its name (the
//! arguments themselves may run into up to 500 more lines), `__FILE__` / `__LINE__`,
//! `#include` of a macro-expanded name, `#include_next`, `#ident`. Integer arithmetic in `#if`
//! is signed 64-bit throughout (no unsigned promotion).
//!
//! Nothing here panics on any input, and the work is bounded by [`Limits`].

use crate::diag::{Diagnostic, Severity};
use crate::span::{FileId, SourceMap, Span};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// How an `#include` names its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeKind {
    /// `#include <name>`: the built-ins, then the `-I` directories in order.
    System,
    /// `#include "name"`: the including file's folder first, then as [`IncludeKind::System`].
    Quote,
}

/// A file a [`Loader`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// The name diagnostics print (a path, or `<core.p4>` for a built-in); also the `from` of
    /// the includes inside it, and the key for `#pragma once`.
    pub name: String,
    /// The text.
    pub text: String,
}

/// Why a [`Loader`] gave no file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// No such file on the search path.
    NotFound,
    /// Found but not usable; the reason (an I/O error, text that is not UTF-8, ...).
    Failed(String),
}

/// Resolves `#include`s: the crate reads no file, the caller does (the CLI over the disk and
/// the built-in `core.p4` / `v1model.p4`; tests over a map).
pub trait Loader {
    /// Find `name` as `#include` of `kind` names it, in the file called `from` (the
    /// [`Loaded::name`] of the including file, or the main file's name in the [`SourceMap`]).
    fn load(&mut self, name: &str, kind: IncludeKind, from: &str) -> Result<Loaded, LoadError>;
}

/// Bounds on the work one [`preprocess`] call does; past one, it stops with an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Files open at once through nested `#include`s (the main file counts).
    pub include_depth: usize,
    /// `#include`s in all.
    pub includes: usize,
    /// Nesting of macro arguments being expanded inside macro arguments, and of parentheses
    /// and unary operators in an `#if` expression.
    pub nesting: usize,
    /// Macro expansions in all.
    pub expansions: u64,
    /// Tokens produced by macro expansions in all.
    pub expansion_tokens: u64,
    /// Bytes of output.
    pub output_bytes: usize,
    /// Errors before giving up.
    pub errors: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            include_depth: 64,
            includes: 10_000,
            nesting: 256,
            expansions: 1 << 20,
            expansion_tokens: 1 << 24,
            output_bytes: 64 << 20,
            errors: 100,
        }
    }
}

/// What the caller sets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// Predefined macros, as `-D NAME=VALUE`: `(NAME, VALUE)`, in order (a bare `-D NAME` is
    /// `(NAME, "1")`). `NAME` may be `F(x)` for a function-like macro.
    pub defines: Vec<(String, String)>,
    /// Bounds on the work.
    pub limits: Limits,
}

/// One run of output bytes and where they came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seg {
    out: usize,
    file: FileId,
    at: u32,
    len: u32,
    /// Byte `out + k` came from `at + k` (copied text); otherwise the whole run maps to
    /// `at..at + len` (a macro use, a comment).
    linear: bool,
}

/// Where each byte of the preprocessor's output came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocationMap {
    segs: Vec<Seg>,
    len: usize,
}

impl LocationMap {
    /// The original place of output byte `out_offset` (the end of the text maps to where the
    /// last byte came from): for copied text the byte itself, for a macro expansion the macro's
    /// use, for a joined comment the comment. A `#line`-renumbered place is a file the
    /// preprocessor added to the [`SourceMap`] with [`SourceMap::add_at_line`]. `None` past the
    /// end or for empty output.
    pub fn locate(&self, out_offset: usize) -> Option<Span> {
        if out_offset > self.len {
            return None;
        }
        let off = if out_offset == self.len { out_offset.checked_sub(1)? } else { out_offset };
        let i = self.segs.partition_point(|s| s.out <= off).checked_sub(1)?;
        let s = self.segs[i];
        if s.linear {
            let start = s.at.saturating_add((off - s.out) as u32);
            Some(Span { file: s.file, start, end: start.saturating_add(1) })
        } else {
            Some(Span { file: s.file, start: s.at, end: s.at.saturating_add(s.len.max(1)) })
        }
    }
}

/// The preprocessor's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expanded {
    /// The expanded text.
    pub text: String,
    /// Where each byte of `text` came from.
    pub map: LocationMap,
    /// Warnings (`#warning`, macro redefinitions); errors make [`preprocess`] fail instead.
    pub warnings: Vec<Diagnostic>,
}

impl Expanded {
    /// The original place of output byte `out_offset`; see [`LocationMap::locate`].
    pub fn locate(&self, out_offset: usize) -> Option<Span> {
        self.map.locate(out_offset)
    }
}

/// Preprocess the file `main` of `map`: files `#include`d are added to `map`, and so are the
/// pieces of files renumbered by `#line`, and `-D` definitions as a file `<command line>`.
///
/// Errors (with the warnings) when any error was found, every one with a span where there is
/// a place to name.
pub fn preprocess(
    map: &mut SourceMap,
    main: FileId,
    loader: &mut dyn Loader,
    options: &Options,
) -> Result<Expanded, Vec<Diagnostic>> {
    let mut pre = Pre {
        map,
        loader,
        limits: options.limits,
        macros: HashMap::new(),
        ids: HashMap::new(),
        out: String::new(),
        segs: Vec::new(),
        diags: Vec::new(),
        errors: 0,
        stack: Vec::new(),
        once: HashSet::new(),
        includes: 0,
        expansions: 0,
        tokens: 0,
    };
    let _ = pre.run(main, options);
    let Pre { out, segs, diags, errors, .. } = pre;
    if errors > 0 {
        return Err(diags);
    }
    let len = out.len();
    Ok(Expanded { text: out, map: LocationMap { segs, len }, warnings: diags })
}

/// Lines a macro call's arguments may run into after the line of its name.
const MAX_CALL_LINES: usize = 500;

/// Processing stops (an error was reported).
struct Stop;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ws,
    Ident,
    Num,
    Str,
    Punct,
    Other,
    /// `##` in a macro body.
    Paste,
    /// An empty argument next to `##`.
    Placemarker,
}

#[derive(Debug, Clone)]
struct Tok {
    kind: Kind,
    text: Rc<str>,
    file: FileId,
    at: u32,
    len: u32,
    /// `text` is the bytes `at..at + len` of `file`.
    verbatim: bool,
    /// Macros (by id) not to expand this token as.
    hide: Rc<[u32]>,
}

impl Tok {
    fn is(&self, p: &str) -> bool {
        self.kind == Kind::Punct && &*self.text == p
    }

    fn span(&self) -> Span {
        Span { file: self.file, start: self.at, end: self.at.saturating_add(self.len.max(1)) }
    }
}

struct Macro {
    id: u32,
    /// `None` for an object-like macro.
    params: Option<Vec<Rc<str>>>,
    variadic: bool,
    body: Vec<Tok>,
}

impl Macro {
    fn same(&self, other: &Macro) -> bool {
        self.params == other.params
            && self.variadic == other.variadic
            && self.body.len() == other.body.len()
            && self.body.iter().zip(&other.body).all(|(a, b)| a.kind == b.kind && a.text == b.text)
    }
}

struct Cond {
    parent: bool,
    taken: bool,
    active: bool,
    else_seen: bool,
    span: Span,
}

/// A `#line` renumbering in effect for a file.
struct Remap {
    name: String,
    /// A line start in the real file and the number it reports.
    anchor: usize,
    anchor_line: u32,
    /// The registered piece `start..end` of the real file holding the current line.
    seg: Option<(FileId, usize, usize)>,
}

/// Turns offsets of the real file into places to report.
#[derive(Clone, Copy)]
struct Locator {
    real: FileId,
    seg: Option<(FileId, usize, usize)>,
}

impl Locator {
    fn at(&self, orig: u32) -> (FileId, u32) {
        match self.seg {
            Some((f, s, e)) if (s..=e).contains(&(orig as usize)) => (f, orig - s as u32),
            _ => (self.real, orig),
        }
    }
}

/// One logical line: continuations removed, comments replaced by a space.
struct Line {
    bytes: Vec<u8>,
    origin: Vec<u32>,
    /// Offset of the terminating newline (or the end of the text).
    end: usize,
    /// Start of the next line.
    next: usize,
    /// Newlines consumed.
    newlines: u32,
    /// Start of a block comment the text ended in.
    open_comment: Option<u32>,
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | 0x0b | 0x0c)
}

fn logical_line(b: &[u8], start: usize) -> Line {
    #[derive(PartialEq)]
    enum St {
        Code,
        Str,
        Block(u32),
        LineComment,
    }
    let n = b.len();
    let mut line = Line {
        bytes: Vec::new(),
        origin: Vec::new(),
        end: n,
        next: n,
        newlines: 0,
        open_comment: None,
    };
    let mut st = St::Code;
    let mut i = start;
    let push = |line: &mut Line, c: u8, at: usize| {
        line.bytes.push(c);
        line.origin.push(at as u32);
    };
    while i < n {
        if b[i] == b'\\' {
            if b.get(i + 1) == Some(&b'\n') {
                i += 2;
                line.newlines += 1;
                continue;
            }
            if b.get(i + 1) == Some(&b'\r') && b.get(i + 2) == Some(&b'\n') {
                i += 3;
                line.newlines += 1;
                continue;
            }
        }
        match st {
            St::Block(s) => {
                if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    i += 2;
                    st = St::Code;
                    push(&mut line, b' ', s as usize);
                } else {
                    if b[i] == b'\n' {
                        line.newlines += 1;
                    }
                    i += 1;
                }
                continue;
            }
            _ if b[i] == b'\n' => {
                line.end = i;
                line.next = i + 1;
                line.newlines += 1;
                return line;
            }
            St::LineComment => i += 1,
            St::Str => {
                push(&mut line, b[i], i);
                if b[i] == b'\\' && i + 1 < n && b[i + 1] != b'\n' {
                    i += 1;
                    push(&mut line, b[i], i);
                } else if b[i] == b'"' {
                    st = St::Code;
                }
                i += 1;
            }
            St::Code => {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    st = St::Block(i as u32);
                    i += 2;
                } else if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
                    push(&mut line, b' ', i);
                    st = St::LineComment;
                    i += 2;
                } else {
                    if b[i] == b'"' {
                        st = St::Str;
                    }
                    push(&mut line, b[i], i);
                    i += 1;
                }
            }
        }
    }
    if let St::Block(s) = st {
        line.open_comment = Some(s);
        push(&mut line, b' ', s as usize);
    }
    line
}

/// Whether the line starting at `p` starts with optional blanks and `#`.
fn hash_line(b: &[u8], p: usize) -> bool {
    b[p..].iter().find(|&&c| c != b' ' && c != b'\t').is_some_and(|&c| c == b'#')
}

fn no_hide() -> Rc<[u32]> {
    Rc::from(Vec::new())
}

/// Tokens of `bytes`, whose byte `k` came from offset `origin[k]` of the real file.
fn tokenize(bytes: &[u8], origin: &[u32], loc: Locator) -> Vec<Tok> {
    let n = bytes.len();
    let hide = no_hide();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < n {
        let c = bytes[i];
        let s = i;
        let kind = if is_ws(c) {
            while i < n && is_ws(bytes[i]) {
                i += 1;
            }
            Kind::Ws
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < n && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            Kind::Ident
        } else if c.is_ascii_digit()
            || (c == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            i += 1;
            while i < n
                && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'.')
            {
                i += 1;
            }
            Kind::Num
        } else if c == b'"' {
            i += 1;
            while i < n {
                if bytes[i] == b'\\' {
                    i += 2;
                    continue;
                }
                i += 1;
                if bytes[i - 1] == b'"' {
                    break;
                }
            }
            i = i.min(n);
            Kind::Str
        } else if c >= 0x80 {
            while i < n && bytes[i] >= 0x80 {
                i += 1;
            }
            Kind::Other
        } else {
            let two = &bytes[i..(i + 2).min(n)];
            let ops: [&[u8]; 9] = [b"##", b"||", b"&&", b"==", b"!=", b"<=", b">=", b"<<", b">>"];
            i += if ops.contains(&two) { 2 } else { 1 };
            Kind::Punct
        };
        let text: Rc<str> = String::from_utf8_lossy(&bytes[s..i]).into();
        let o0 = origin.get(s).copied().unwrap_or(0);
        let o1 = origin.get(i - 1).copied().unwrap_or(0);
        let verbatim = o1.checked_sub(o0) == Some((i - 1 - s) as u32);
        let (file, at) = loc.at(o0);
        let len = if verbatim { (i - s) as u32 } else { 1 };
        toks.push(Tok { kind, text, file, at, len, verbatim, hide: hide.clone() });
    }
    toks
}

enum Expansion {
    Done(Vec<Tok>),
    /// A call's arguments ran past the end: `out` is final, `pending` (from the macro name on)
    /// is to be expanded again with more tokens after it.
    NeedMore {
        out: Vec<Tok>,
        pending: Vec<Tok>,
    },
}

struct Pre<'a> {
    map: &'a mut SourceMap,
    loader: &'a mut dyn Loader,
    limits: Limits,
    macros: HashMap<Rc<str>, Rc<Macro>>,
    ids: HashMap<Rc<str>, u32>,
    out: String,
    segs: Vec<Seg>,
    diags: Vec<Diagnostic>,
    errors: usize,
    /// Names of the files being read, outermost first.
    stack: Vec<String>,
    once: HashSet<String>,
    includes: usize,
    expansions: u64,
    tokens: u64,
}

fn trim_ws(mut v: Vec<Tok>) -> Vec<Tok> {
    while v.last().is_some_and(|t| t.kind == Kind::Ws) {
        v.pop();
    }
    let lead = v.iter().take_while(|t| t.kind == Kind::Ws).count();
    v.drain(..lead);
    v
}

fn union(a: &[u32], b: &[u32], extra: Option<u32>) -> Rc<[u32]> {
    let mut v: Vec<u32> = a.iter().chain(b).copied().chain(extra).collect();
    v.sort_unstable();
    v.dedup();
    v.into()
}

impl Pre<'_> {
    fn report(&mut self, d: Diagnostic) -> Result<(), Stop> {
        let error = d.severity == Severity::Error;
        self.diags.push(d);
        if error {
            self.errors += 1;
            if self.errors >= self.limits.errors {
                return Err(Stop);
            }
        }
        Ok(())
    }

    fn error(&mut self, span: Option<Span>, msg: impl Into<String>) -> Result<(), Stop> {
        self.report(Diagnostic::error(span, msg))
    }

    fn fatal(&mut self, span: Option<Span>, msg: impl Into<String>) -> Stop {
        self.diags.push(Diagnostic::error(span, msg));
        self.errors += 1;
        Stop
    }

    fn run(&mut self, main: FileId, options: &Options) -> Result<(), Stop> {
        if !options.defines.is_empty() {
            let mut text = String::new();
            for (name, value) in &options.defines {
                let value = value.replace(['\n', '\r'], " ");
                text.push_str(&format!("#define {name} {value}\n"));
            }
            let id = self.map.add("<command line>", text);
            self.file(id, "<command line>".into())?;
            self.out.clear();
            self.segs.clear();
        }
        let Some(name) = self.map.file(main).map(|f| f.name.clone()) else {
            return Err(self.fatal(None, "no such main file in the source map"));
        };
        self.file(main, name)
    }

    fn emit_raw(
        &mut self,
        text: &str,
        file: FileId,
        at: u32,
        len: u32,
        linear: bool,
    ) -> Result<(), Stop> {
        if text.is_empty() {
            return Ok(());
        }
        if self.out.len() + text.len() > self.limits.output_bytes {
            let span = Span { file, start: at, end: at.saturating_add(len.max(1)) };
            return Err(self.fatal(
                Some(span),
                format!("the preprocessor's output exceeds {} bytes", self.limits.output_bytes),
            ));
        }
        let out = self.out.len();
        let merge = self.segs.last().is_some_and(|s| {
            s.file == file
                && s.linear == linear
                && if linear {
                    s.at as usize + (out - s.out) == at as usize
                } else {
                    s.at == at && s.len == len
                }
        });
        if !merge {
            self.segs.push(Seg { out, file, at, len, linear });
        }
        self.out.push_str(text);
        Ok(())
    }

    fn emit(&mut self, t: &Tok) -> Result<(), Stop> {
        if t.kind == Kind::Placemarker {
            return Ok(());
        }
        self.emit_raw(&t.text, t.file, t.at, t.len, t.verbatim)
    }

    fn newlines(&mut self, n: u32, loc: Locator, text: &[u8], end: usize) -> Result<(), Stop> {
        let (file, at) = loc.at(end as u32);
        for k in 0..n {
            let linear = k == 0 && text.get(end) == Some(&b'\n');
            self.emit_raw("\n", file, at, 1, linear)?;
        }
        Ok(())
    }

    /// Read a logical line, reporting a comment left open.
    fn line(&mut self, text: &[u8], pos: usize, loc: Locator) -> Result<Line, Stop> {
        let line = logical_line(text, pos);
        if let Some(s) = line.open_comment {
            let (file, at) = loc.at(s);
            self.error(Some(Span { file, start: at, end: at + 2 }), "unterminated comment")?;
        }
        Ok(line)
    }

    /// Make `remap`'s registered piece cover `start..next`.
    fn cover(&mut self, remap: &mut Option<Remap>, b: &[u8], start: usize, next: usize) {
        let Some(r) = remap else { return };
        if r.seg.is_some_and(|(_, s, e)| s <= start && next <= e) {
            return;
        }
        if start >= r.anchor {
            let count = b[r.anchor..start].iter().filter(|&&c| c == b'\n').count();
            r.anchor_line = r.anchor_line.saturating_add(count as u32);
            r.anchor = start;
        }
        let mut end = next;
        while end < b.len() && !hash_line(b, end) {
            end = b[end..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| end + p + 1);
        }
        let text = String::from_utf8_lossy(&b[start..end]).into_owned();
        let id = self.map.add_at_line(r.name.clone(), text, r.anchor_line);
        r.seg = Some((id, start, end));
    }

    fn file(&mut self, id: FileId, name: String) -> Result<(), Stop> {
        let Some(text) = self.map.file(id).map(|f| f.text.clone()) else { return Ok(()) };
        let b = text.as_bytes();
        self.stack.push(name);
        let mut conds: Vec<Cond> = Vec::new();
        let mut remap: Option<Remap> = None;
        let mut pos = 0;
        while pos < b.len() {
            let mut loc = Locator { real: id, seg: remap.as_ref().and_then(|r| r.seg) };
            if remap.is_some() {
                let probe = logical_line(b, pos);
                self.cover(&mut remap, b, pos, probe.next);
            }
            loc.seg = remap.as_ref().and_then(|r| r.seg);
            let line = self.line(b, pos, loc)?;
            pos = line.next;
            let active = conds.last().is_none_or(|c| c.active);
            let toks = tokenize(&line.bytes, &line.origin, loc);
            let first = toks.iter().position(|t| t.kind != Kind::Ws);
            if let Some(h) = first.filter(|&h| toks[h].is("#")) {
                let included = self.directive(
                    &toks[h + 1..],
                    &toks[h],
                    &line,
                    active,
                    &mut conds,
                    &mut remap,
                )?;
                if !included {
                    self.newlines(line.newlines, loc, b, line.end)?;
                }
            } else if active {
                pos = self.text_line(toks, line, b, &mut remap, loc)?;
            } else {
                self.newlines(line.newlines, loc, b, line.end)?;
            }
        }
        for c in conds {
            self.error(Some(c.span), "unterminated conditional: no #endif")?;
        }
        self.stack.pop();
        Ok(())
    }

    /// Expand and emit a text line (and the lines a macro call's arguments run into); returns
    /// where the next line starts.
    fn text_line(
        &mut self,
        toks: Vec<Tok>,
        mut line: Line,
        b: &[u8],
        remap: &mut Option<Remap>,
        mut loc: Locator,
    ) -> Result<usize, Stop> {
        let mut newlines = line.newlines;
        let mut pending = toks;
        let mut more = 0;
        loop {
            let can_more = line.next < b.len() && !hash_line(b, line.next) && more < MAX_CALL_LINES;
            match self.expand(pending, 0, can_more)? {
                Expansion::Done(out) => {
                    for t in &out {
                        self.emit(t)?;
                    }
                    break;
                }
                Expansion::NeedMore { out, pending: mut p } => {
                    for t in &out {
                        self.emit(t)?;
                    }
                    more += 1;
                    let (file, at) = loc.at(line.end as u32);
                    let ws = Tok {
                        kind: Kind::Ws,
                        text: " ".into(),
                        file,
                        at,
                        len: 1,
                        verbatim: false,
                        hide: no_hide(),
                    };
                    if remap.is_some() {
                        let probe = logical_line(b, line.next);
                        self.cover(remap, b, line.next, probe.next);
                    }
                    loc.seg = remap.as_ref().and_then(|r| r.seg);
                    line = self.line(b, line.next, loc)?;
                    newlines += line.newlines;
                    p.push(ws);
                    p.extend(tokenize(&line.bytes, &line.origin, loc));
                    pending = p;
                }
            }
        }
        self.newlines(newlines, loc, b, line.end)?;
        Ok(line.next)
    }

    fn count_expansion(&mut self, at: &Tok, produced: usize) -> Result<(), Stop> {
        self.expansions += 1;
        self.tokens = self.tokens.saturating_add(produced as u64);
        if self.expansions > self.limits.expansions {
            return Err(self.fatal(
                Some(at.span()),
                format!("more than {} macro expansions", self.limits.expansions),
            ));
        }
        if self.tokens > self.limits.expansion_tokens {
            return Err(self.fatal(
                Some(at.span()),
                format!(
                    "macro expansions produce more than {} tokens",
                    self.limits.expansion_tokens
                ),
            ));
        }
        Ok(())
    }

    fn expand_full(&mut self, toks: Vec<Tok>, depth: usize) -> Result<Vec<Tok>, Stop> {
        match self.expand(toks, depth, false)? {
            Expansion::Done(v) => Ok(v),
            Expansion::NeedMore { mut out, pending } => {
                out.extend(pending);
                Ok(out)
            }
        }
    }

    fn expand(
        &mut self,
        mut input: Vec<Tok>,
        depth: usize,
        can_more: bool,
    ) -> Result<Expansion, Stop> {
        if depth > self.limits.nesting {
            let span = input.first().map(Tok::span);
            return Err(self.fatal(
                span,
                format!("macro arguments nested deeper than {}", self.limits.nesting),
            ));
        }
        input.reverse();
        let mut out = Vec::new();
        while let Some(tok) = input.pop() {
            if tok.kind != Kind::Ident {
                out.push(tok);
                continue;
            }
            let Some(m) = self.macros.get(&tok.text).cloned() else {
                out.push(tok);
                continue;
            };
            if tok.hide.contains(&m.id) {
                out.push(tok);
                continue;
            }
            let Some(params) = &m.params else {
                self.count_expansion(&tok, m.body.len())?;
                let hide = union(&tok.hide, &[], Some(m.id));
                for bt in m.body.iter().rev() {
                    input.push(relocate(bt, &tok, &hide));
                }
                continue;
            };
            // A call needs `(` next (blanks between are fine).
            let mut skipped = Vec::new();
            let mut open = None;
            while let Some(t) = input.pop() {
                if t.kind == Kind::Ws {
                    skipped.push(t);
                } else {
                    if t.is("(") {
                        open = Some(t);
                    } else {
                        input.push(t);
                    }
                    break;
                }
            }
            let Some(open) = open else {
                out.push(tok);
                out.extend(skipped);
                continue;
            };
            let mut args: Vec<Vec<Tok>> = vec![Vec::new()];
            let mut collected = vec![open];
            let mut level = 0usize;
            let mut close = None;
            while let Some(t) = input.pop() {
                collected.push(t.clone());
                if t.is("(") {
                    level += 1;
                } else if t.is(")") {
                    if level == 0 {
                        close = Some(t);
                        break;
                    }
                    level -= 1;
                } else if t.is(",") && level == 0 && !(m.variadic && args.len() == params.len()) {
                    args.push(Vec::new());
                    continue;
                }
                if let Some(a) = args.last_mut() {
                    a.push(t);
                }
            }
            let Some(close) = close else {
                if can_more {
                    let mut pending = vec![tok];
                    pending.extend(skipped);
                    pending.extend(collected);
                    return Ok(Expansion::NeedMore { out, pending });
                }
                self.error(
                    Some(tok.span()),
                    format!("unterminated argument list invoking macro `{}`", tok.text),
                )?;
                out.push(tok);
                out.extend(skipped);
                input.extend(collected.into_iter().rev());
                continue;
            };
            let mut args: Vec<Vec<Tok>> = args.into_iter().map(trim_ws).collect();
            if params.is_empty() && args.len() == 1 && args[0].is_empty() {
                args.clear();
            }
            if m.variadic && args.len() + 1 == params.len() {
                args.push(Vec::new());
            }
            if args.len() != params.len() {
                self.error(
                    Some(tok.span()),
                    format!(
                        "macro `{}` takes {} argument{}, got {}",
                        tok.text,
                        params.len(),
                        if params.len() == 1 { "" } else { "s" },
                        args.len()
                    ),
                )?;
                out.push(tok);
                out.extend(skipped);
                input.extend(collected.into_iter().rev());
                continue;
            }
            let hide: Vec<u32> =
                tok.hide.iter().filter(|h| close.hide.contains(h)).copied().collect();
            let hide = union(&hide, &[], Some(m.id));
            let body = self.substitute(&m, params, &args, depth, &tok, &hide)?;
            self.count_expansion(&tok, body.len())?;
            input.extend(body.into_iter().rev());
        }
        Ok(Expansion::Done(out))
    }

    fn substitute(
        &mut self,
        m: &Macro,
        params: &[Rc<str>],
        args: &[Vec<Tok>],
        depth: usize,
        at: &Tok,
        hide: &Rc<[u32]>,
    ) -> Result<Vec<Tok>, Stop> {
        let param = |t: &Tok| {
            if t.kind == Kind::Ident { params.iter().position(|p| *p == t.text) } else { None }
        };
        let body = &m.body;
        let mut expanded: Vec<Option<Vec<Tok>>> = vec![None; args.len()];
        let mut res = Vec::new();
        let mut pastes = false;
        let mut k = 0;
        while k < body.len() {
            let bt = &body[k];
            if bt.is("#") {
                let next = (k + 1..body.len()).find(|&j| body[j].kind != Kind::Ws);
                if let Some((j, p)) = next.and_then(|j| Some((j, param(&body[j])?))) {
                    res.push(stringify(&args[p], at, hide));
                    k = j + 1;
                    continue;
                }
            }
            if bt.kind == Kind::Paste {
                pastes = true;
            }
            if let Some(p) = param(bt) {
                let prev = body[..k].iter().rev().find(|t| t.kind != Kind::Ws);
                let next = body[k + 1..].iter().find(|t| t.kind != Kind::Ws);
                let raw = prev.is_some_and(|t| t.kind == Kind::Paste)
                    || next.is_some_and(|t| t.kind == Kind::Paste);
                if raw {
                    if args[p].is_empty() {
                        let mut pm = relocate(bt, at, hide);
                        pm.kind = Kind::Placemarker;
                        pm.text = "".into();
                        res.push(pm);
                    } else {
                        res.extend(args[p].iter().map(|t| with_hide(t, hide)));
                    }
                } else {
                    if expanded[p].is_none() {
                        expanded[p] = Some(self.expand_full(args[p].clone(), depth + 1)?);
                    }
                    if let Some(e) = &expanded[p] {
                        res.extend(e.iter().map(|t| with_hide(t, hide)));
                    }
                }
            } else {
                res.push(relocate(bt, at, hide));
            }
            k += 1;
        }
        if pastes {
            res = paste(res, at, hide);
        }
        res.retain(|t| t.kind != Kind::Placemarker);
        Ok(res)
    }

    /// Handle a directive line; returns whether an `#include` replaced it.
    fn directive(
        &mut self,
        rest: &[Tok],
        hash: &Tok,
        line: &Line,
        active: bool,
        conds: &mut Vec<Cond>,
        remap: &mut Option<Remap>,
    ) -> Result<bool, Stop> {
        let rest = trim_ws(rest.to_vec());
        let Some(name) = rest.first() else { return Ok(false) };
        let args = trim_ws(rest[1..].to_vec());
        let dname = if name.kind == Kind::Ident { &*name.text } else { "" };
        match dname {
            "if" | "ifdef" | "ifndef" => {
                let value = if !active {
                    false
                } else if dname == "if" {
                    self.condition(&args, name)?
                } else {
                    match args.first() {
                        Some(t) if t.kind == Kind::Ident => {
                            if args.len() > 1 {
                                self.report(Diagnostic::warning(
                                    Some(args[1].span()),
                                    format!("extra tokens after #{dname}"),
                                ))?;
                            }
                            self.macros.contains_key(&t.text) == (dname == "ifdef")
                        }
                        _ => {
                            self.error(Some(name.span()), format!("#{dname} needs a macro name"))?;
                            false
                        }
                    }
                };
                conds.push(Cond {
                    parent: active,
                    taken: !active || value,
                    active: value,
                    else_seen: false,
                    span: name.span(),
                });
            }
            "elif" | "else" => {
                let Some(c) = conds.last_mut() else {
                    self.error(Some(name.span()), format!("#{dname} without #if"))?;
                    return Ok(false);
                };
                if c.else_seen {
                    self.error(Some(name.span()), format!("#{dname} after #else"))?;
                    return Ok(false);
                }
                let (parent, taken) = (c.parent, c.taken);
                let value = if dname == "else" {
                    !taken
                } else if parent && !taken {
                    self.condition(&args, name)?
                } else {
                    false
                };
                if let Some(c) = conds.last_mut() {
                    c.active = parent && value;
                    c.taken |= value;
                    c.else_seen = dname == "else";
                }
            }
            "endif" => {
                if conds.pop().is_none() {
                    self.error(Some(name.span()), "#endif without #if")?;
                }
            }
            _ if !active => {}
            "define" => self.define(&args, name)?,
            "undef" => match args.first() {
                Some(t) if t.kind == Kind::Ident => {
                    self.macros.remove(&t.text);
                }
                _ => self.error(Some(name.span()), "#undef needs a macro name")?,
            },
            "include" => return self.include(&args, name),
            "line" => self.line_directive(&args, name, line, remap)?,
            "error" | "warning" => {
                let msg = args.iter().map(|t| &*t.text).collect::<String>();
                let msg = format!("#{dname} {msg}");
                let d = if dname == "error" {
                    Diagnostic::error(Some(name.span()), msg.trim_end())
                } else {
                    Diagnostic::warning(Some(name.span()), msg.trim_end())
                };
                self.report(d)?;
            }
            "pragma" => {
                if args.first().is_some_and(|t| &*t.text == "once")
                    && let Some(f) = self.stack.last()
                {
                    self.once.insert(f.clone());
                }
            }
            "" if name.kind == Kind::Num => self.line_directive(&rest, hash, line, remap)?,
            _ => self.error(Some(name.span()), format!("unknown directive #{}", name.text))?,
        }
        Ok(false)
    }

    fn define(&mut self, args: &[Tok], directive: &Tok) -> Result<(), Stop> {
        let Some(name) = args.first().filter(|t| t.kind == Kind::Ident) else {
            return self.error(Some(directive.span()), "#define needs a macro name");
        };
        if &*name.text == "defined" {
            return self.error(Some(name.span()), "`defined` cannot be a macro name");
        }
        let mut k = 1;
        let mut params = None;
        let mut variadic = false;
        if args.get(1).is_some_and(|t| t.is("(")) {
            let mut ps: Vec<Rc<str>> = Vec::new();
            k = 2;
            let bad = |s: &mut Self, t: Option<&Tok>| {
                s.error(Some(t.unwrap_or(name).span()), "bad macro parameter list")
            };
            loop {
                while args.get(k).is_some_and(|t| t.kind == Kind::Ws) {
                    k += 1;
                }
                match args.get(k) {
                    Some(t) if t.is(")") && ps.is_empty() => {
                        k += 1;
                        break;
                    }
                    Some(t) if t.kind == Kind::Ident && !variadic => {
                        if ps.contains(&t.text) {
                            return self.error(
                                Some(t.span()),
                                format!("duplicate macro parameter `{}`", t.text),
                            );
                        }
                        ps.push(t.text.clone());
                    }
                    Some(t)
                        if t.is(".")
                            && args.get(k + 1).is_some_and(|t| t.is("."))
                            && args.get(k + 2).is_some_and(|t| t.is(".")) =>
                    {
                        variadic = true;
                        ps.push("__VA_ARGS__".into());
                        k += 2;
                    }
                    t => return bad(self, t),
                }
                k += 1;
                while args.get(k).is_some_and(|t| t.kind == Kind::Ws) {
                    k += 1;
                }
                match args.get(k) {
                    Some(t) if t.is(")") => {
                        k += 1;
                        break;
                    }
                    Some(t) if t.is(",") && !variadic => k += 1,
                    t => return bad(self, t),
                }
            }
            params = Some(ps);
        }
        let mut body: Vec<Tok> = Vec::new();
        for t in trim_ws(args.get(k..).unwrap_or(&[]).to_vec()) {
            if t.kind == Kind::Ws {
                if body.last().is_some_and(|l| l.kind != Kind::Ws) {
                    body.push(Tok { text: " ".into(), ..t });
                }
            } else if t.is("##") {
                body.push(Tok { kind: Kind::Paste, ..t });
            } else {
                body.push(t);
            }
        }
        if body.first().is_some_and(|t| t.kind == Kind::Paste)
            || body.last().is_some_and(|t| t.kind == Kind::Paste)
        {
            let t = if body[0].kind == Kind::Paste { &body[0] } else { &body[body.len() - 1] };
            return self.error(Some(t.span()), "`##` cannot be at either end of a macro body");
        }
        if let Some(ps) = &params {
            for (j, t) in body.iter().enumerate() {
                if t.is("#") {
                    let next = body[j + 1..].iter().find(|t| t.kind != Kind::Ws);
                    if !next.is_some_and(|n| n.kind == Kind::Ident && ps.contains(&n.text)) {
                        return self
                            .error(Some(t.span()), "`#` is not followed by a macro parameter");
                    }
                }
            }
        }
        let next_id = self.ids.len() as u32;
        let id = *self.ids.entry(name.text.clone()).or_insert(next_id);
        let m = Macro { id, params, variadic, body };
        if self.macros.get(&name.text).is_some_and(|old| !old.same(&m)) {
            self.report(Diagnostic::warning(
                Some(name.span()),
                format!("macro `{}` redefined", name.text),
            ))?;
        }
        self.macros.insert(name.text.clone(), Rc::new(m));
        Ok(())
    }

    fn condition(&mut self, args: &[Tok], directive: &Tok) -> Result<bool, Stop> {
        // `defined X` and `defined(X)` first, before macros are expanded.
        let mut toks = Vec::new();
        let mut k = 0;
        while k < args.len() {
            let t = &args[k];
            if t.kind == Kind::Ident && &*t.text == "defined" {
                let mut j = k + 1;
                let skip = |j: &mut usize| {
                    while args.get(*j).is_some_and(|t| t.kind == Kind::Ws) {
                        *j += 1;
                    }
                };
                skip(&mut j);
                let paren = args.get(j).is_some_and(|t| t.is("("));
                if paren {
                    j += 1;
                    skip(&mut j);
                }
                let Some(name) = args.get(j).filter(|t| t.kind == Kind::Ident) else {
                    self.error(Some(t.span()), "`defined` needs a macro name")?;
                    return Ok(false);
                };
                j += 1;
                if paren {
                    skip(&mut j);
                    if !args.get(j).is_some_and(|t| t.is(")")) {
                        self.error(Some(name.span()), "missing `)` after `defined(`")?;
                        return Ok(false);
                    }
                    j += 1;
                }
                let v = if self.macros.contains_key(&name.text) { "1" } else { "0" };
                toks.push(Tok { kind: Kind::Num, text: v.into(), ..t.clone() });
                k = j;
            } else {
                toks.push(t.clone());
                k += 1;
            }
        }
        let toks: Vec<Tok> =
            self.expand_full(toks, 0)?.into_iter().filter(|t| t.kind != Kind::Ws).collect();
        let mut e = Eval { toks: &toks, pos: 0, depth: 0, max: self.limits.nesting };
        let r = e.ternary(true).and_then(|v| match toks.get(e.pos) {
            None => Ok(v),
            Some(t) => Err((Some(t.span()), format!("unexpected `{}` in #if", t.text))),
        });
        match r {
            Ok(v) => Ok(v != 0),
            Err((span, msg)) => {
                self.error(span.or(Some(directive.span())), msg)?;
                Ok(false)
            }
        }
    }

    fn include(&mut self, args: &[Tok], directive: &Tok) -> Result<bool, Stop> {
        let (target, kind, span) = match args.first() {
            Some(t) if t.kind == Kind::Str && t.text.len() >= 2 && t.text.ends_with('"') => {
                (t.text[1..t.text.len() - 1].to_string(), IncludeKind::Quote, t.span())
            }
            Some(t) if t.is("<") => {
                // The raw text up to `>` (tokens would have dropped nothing, but join them).
                let Some(end) = args.iter().position(|t| t.is(">") || t.is(">>") || t.is(">="))
                else {
                    self.error(Some(t.span()), "missing `>` in #include")?;
                    return Ok(false);
                };
                let name: String = args[1..end].iter().map(|t| &*t.text).collect();
                (name, IncludeKind::System, t.span())
            }
            _ => {
                self.error(Some(directive.span()), "#include expects \"FILE\" or <FILE>")?;
                return Ok(false);
            }
        };
        let from = self.stack.last().cloned().unwrap_or_default();
        let loaded = match self.loader.load(&target, kind, &from) {
            Ok(l) => l,
            Err(LoadError::NotFound) => {
                self.error(Some(span), format!("cannot find include file `{target}`"))?;
                return Ok(false);
            }
            Err(LoadError::Failed(why)) => {
                self.error(Some(span), format!("cannot read include file `{target}`: {why}"))?;
                return Ok(false);
            }
        };
        let start = self.out.len();
        if !self.once.contains(&loaded.name) {
            if self.stack.len() >= self.limits.include_depth {
                let msg = if let Some(i) = self.stack.iter().rposition(|s| *s == loaded.name) {
                    let mut chain = self.stack[i..].to_vec();
                    chain.push(loaded.name.clone());
                    format!("#include cycle: {}", chain.join(" -> "))
                } else {
                    format!("#include nested deeper than {} files", self.limits.include_depth)
                };
                return Err(self.fatal(Some(span), msg));
            }
            self.includes += 1;
            if self.includes > self.limits.includes {
                return Err(
                    self.fatal(Some(span), format!("more than {} #includes", self.limits.includes))
                );
            }
            let id = self.map.add(loaded.name.clone(), loaded.text);
            self.file(id, loaded.name)?;
        }
        if self.out.len() == start || !self.out.ends_with('\n') {
            self.emit_raw("\n", span.file, span.start, span.end - span.start, false)?;
        }
        Ok(true)
    }

    fn line_directive(
        &mut self,
        args: &[Tok],
        directive: &Tok,
        line: &Line,
        remap: &mut Option<Remap>,
    ) -> Result<(), Stop> {
        let toks: Vec<Tok> = self
            .expand_full(args.to_vec(), 0)?
            .into_iter()
            .filter(|t| t.kind != Kind::Ws)
            .collect();
        let n =
            toks.first().filter(|t| t.kind == Kind::Num).and_then(|t| t.text.parse::<u32>().ok());
        let Some(n) = n.filter(|&n| n > 0 && n <= i32::MAX as u32) else {
            let span = toks.first().map_or(directive.span(), Tok::span);
            return self.error(Some(span), "#line needs a line number from 1 to 2147483647");
        };
        let name = match toks.get(1) {
            Some(t) if t.kind == Kind::Str && t.text.len() >= 2 && t.text.ends_with('"') => {
                unescape(&t.text[1..t.text.len() - 1])
            }
            // A GNU line marker (`# 12 "f" 1 3`) may have flags; `#line` may not.
            Some(t) if !directive.is("#") => {
                return self.error(Some(t.span()), "#line expects a file name in quotes");
            }
            _ => remap
                .as_ref()
                .map_or_else(|| self.stack.last().cloned().unwrap_or_default(), |r| r.name.clone()),
        };
        *remap = Some(Remap { name, anchor: line.next, anchor_line: n, seg: None });
        Ok(())
    }
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(d) = chars.next() {
                out.push(d);
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn relocate(t: &Tok, at: &Tok, hide: &Rc<[u32]>) -> Tok {
    Tok {
        kind: t.kind,
        text: t.text.clone(),
        file: at.file,
        at: at.at,
        len: at.len,
        verbatim: false,
        hide: union(&t.hide, hide, None),
    }
}

fn with_hide(t: &Tok, hide: &Rc<[u32]>) -> Tok {
    Tok { hide: union(&t.hide, hide, None), ..t.clone() }
}

fn stringify(arg: &[Tok], at: &Tok, hide: &Rc<[u32]>) -> Tok {
    let mut s = String::from("\"");
    for t in arg {
        match t.kind {
            Kind::Ws => s.push(' '),
            Kind::Str => {
                for c in t.text.chars() {
                    if c == '"' || c == '\\' {
                        s.push('\\');
                    }
                    s.push(c);
                }
            }
            _ => s.push_str(&t.text),
        }
    }
    s.push('"');
    let mut r = relocate(at, at, hide);
    r.kind = Kind::Str;
    r.text = s.into();
    r
}

fn paste(toks: Vec<Tok>, at: &Tok, hide: &Rc<[u32]>) -> Vec<Tok> {
    let mut out: Vec<Tok> = Vec::new();
    let mut it = toks.into_iter().peekable();
    while let Some(t) = it.next() {
        if t.kind != Kind::Paste {
            out.push(t);
            continue;
        }
        while out.last().is_some_and(|t| t.kind == Kind::Ws) {
            out.pop();
        }
        while it.peek().is_some_and(|t| t.kind == Kind::Ws) {
            it.next();
        }
        let lhs = out.pop();
        let rhs = it.next();
        match (lhs, rhs) {
            (Some(l), Some(r)) if l.kind == Kind::Placemarker => out.push(r),
            (Some(l), Some(r)) if r.kind == Kind::Placemarker => out.push(l),
            (Some(l), Some(r)) => {
                let text = format!("{}{}", l.text, r.text);
                let origin = vec![0; text.len()];
                let loc = Locator { real: at.file, seg: None };
                let h = union(&l.hide, &r.hide, None);
                for t in tokenize(text.as_bytes(), &origin, loc) {
                    out.push(relocate(&Tok { hide: h.clone(), ..t }, at, hide));
                }
            }
            (l, r) => out.extend(l.into_iter().chain(r)),
        }
    }
    out
}

type ExprResult = Result<i64, (Option<Span>, String)>;

/// An `#if` expression over tokens without blanks.
struct Eval<'t> {
    toks: &'t [Tok],
    pos: usize,
    depth: usize,
    max: usize,
}

fn prec(op: &str) -> Option<u8> {
    Some(match op {
        "||" => 1,
        "&&" => 2,
        "|" => 3,
        "^" => 4,
        "&" => 5,
        "==" | "!=" => 6,
        "<" | "<=" | ">" | ">=" => 7,
        "<<" | ">>" => 8,
        "+" | "-" => 9,
        "*" | "/" | "%" => 10,
        _ => return None,
    })
}

impl Eval<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn err_here(&self, msg: &str) -> (Option<Span>, String) {
        match self.peek() {
            Some(t) => (Some(t.span()), format!("{msg} in #if, found `{}`", t.text)),
            None => (self.toks.last().map(Tok::span), format!("{msg} at the end of #if")),
        }
    }

    fn ternary(&mut self, live: bool) -> ExprResult {
        self.depth += 1;
        if self.depth > self.max {
            return Err(self.err_here("expression nested too deeply"));
        }
        let c = self.binary(1, live)?;
        let r = if self.peek().is_some_and(|t| t.is("?")) {
            self.pos += 1;
            let a = self.ternary(live && c != 0)?;
            if !self.peek().is_some_and(|t| t.is(":")) {
                return Err(self.err_here("expected `:`"));
            }
            self.pos += 1;
            let b = self.ternary(live && c == 0)?;
            if c != 0 { a } else { b }
        } else {
            c
        };
        self.depth -= 1;
        Ok(r)
    }

    fn binary(&mut self, min: u8, live: bool) -> ExprResult {
        let mut lhs = self.unary(live)?;
        loop {
            let Some(op) = self.peek().filter(|t| t.kind == Kind::Punct).map(|t| t.text.clone())
            else {
                return Ok(lhs);
            };
            let Some(p) = prec(&op).filter(|&p| p >= min) else { return Ok(lhs) };
            let op_tok = self.pos;
            self.pos += 1;
            let rhs_live = live
                && match &*op {
                    "&&" => lhs != 0,
                    "||" => lhs == 0,
                    _ => true,
                };
            let rhs = self.binary(p + 1, rhs_live)?;
            lhs = match &*op {
                "||" => i64::from(lhs != 0 || rhs != 0),
                "&&" => i64::from(lhs != 0 && rhs != 0),
                "|" => lhs | rhs,
                "^" => lhs ^ rhs,
                "&" => lhs & rhs,
                "==" => i64::from(lhs == rhs),
                "!=" => i64::from(lhs != rhs),
                "<" => i64::from(lhs < rhs),
                "<=" => i64::from(lhs <= rhs),
                ">" => i64::from(lhs > rhs),
                ">=" => i64::from(lhs >= rhs),
                "<<" => u32::try_from(rhs).ok().and_then(|r| lhs.checked_shl(r)).unwrap_or(0),
                ">>" => u32::try_from(rhs)
                    .ok()
                    .and_then(|r| lhs.checked_shr(r))
                    .unwrap_or(if lhs < 0 { -1 } else { 0 }),
                "+" => lhs.wrapping_add(rhs),
                "-" => lhs.wrapping_sub(rhs),
                "*" => lhs.wrapping_mul(rhs),
                _ if rhs == 0 => {
                    if live {
                        let t = &self.toks[op_tok];
                        return Err((Some(t.span()), "division by zero in #if".into()));
                    }
                    0
                }
                "/" => lhs.wrapping_div(rhs),
                _ => lhs.wrapping_rem(rhs),
            };
        }
    }

    fn unary(&mut self, live: bool) -> ExprResult {
        let Some(t) = self.peek().cloned() else { return Err(self.err_here("expected a value")) };
        self.depth += 1;
        if self.depth > self.max {
            return Err(self.err_here("expression nested too deeply"));
        }
        self.pos += 1;
        let v = match t.kind {
            Kind::Punct if matches!(&*t.text, "!" | "~" | "-" | "+") => {
                let v = self.unary(live)?;
                match &*t.text {
                    "!" => i64::from(v == 0),
                    "~" => !v,
                    "-" => v.wrapping_neg(),
                    _ => v,
                }
            }
            Kind::Punct if t.is("(") => {
                let v = self.ternary(live)?;
                if !self.peek().is_some_and(|t| t.is(")")) {
                    return Err(self.err_here("expected `)`"));
                }
                self.pos += 1;
                v
            }
            Kind::Num => parse_int(&t.text)
                .ok_or_else(|| (Some(t.span()), format!("invalid integer `{}` in #if", t.text)))?,
            Kind::Ident => 0,
            _ => {
                self.pos -= 1;
                return Err(self.err_here("expected a value"));
            }
        };
        self.depth -= 1;
        Ok(v)
    }
}

fn parse_int(s: &str) -> Option<i64> {
    let s = s.trim_end_matches(['u', 'U', 'l', 'L']);
    let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()?
    } else if let Some(b) = s.strip_prefix("0b").or_else(|| s.strip_prefix("0B")) {
        u64::from_str_radix(b, 2).ok()?
    } else if s.len() > 1 && s.starts_with('0') {
        u64::from_str_radix(&s[1..], 8).ok()?
    } else {
        s.parse::<u64>().ok()?
    };
    Some(v as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logical_lines_track_origins() {
        let b = b"ab\\\ncd /* x\ny */ e // f\ng";
        let l = logical_line(b, 0);
        assert_eq!(l.bytes, b"abcd   e  ");
        assert_eq!(l.origin, [0, 1, 4, 5, 6, 7, 16, 17, 18, 19]);
        assert_eq!((l.end, l.next, l.newlines), (23, 24, 3));
        let l = logical_line(b, 24);
        assert_eq!((l.bytes.as_slice(), l.end, l.next, l.newlines), (&b"g"[..], 25, 25, 0));
        let l = logical_line(b"\"a // b\" /* c", 0);
        assert_eq!(l.bytes, b"\"a // b\"  ");
        assert_eq!(l.open_comment, Some(9));
    }

    #[test]
    fn tokens_and_integers() {
        let b = b"a_1 ## 8w3 \"s\\\"\" <<= x";
        let origin: Vec<u32> = (0..b.len() as u32).collect();
        let toks = tokenize(b, &origin, Locator { real: FileId(0), seg: None });
        let kinds: Vec<(Kind, &str)> = toks.iter().map(|t| (t.kind, &*t.text)).collect();
        assert_eq!(
            kinds,
            [
                (Kind::Ident, "a_1"),
                (Kind::Ws, " "),
                (Kind::Punct, "##"),
                (Kind::Ws, " "),
                (Kind::Num, "8w3"),
                (Kind::Ws, " "),
                (Kind::Str, "\"s\\\"\""),
                (Kind::Ws, " "),
                (Kind::Punct, "<<"),
                (Kind::Punct, "="),
                (Kind::Ws, " "),
                (Kind::Ident, "x"),
            ]
        );
        assert!(toks.iter().all(|t| t.verbatim));
        assert_eq!(parse_int("0x1F"), Some(31));
        assert_eq!(parse_int("017"), Some(15));
        assert_eq!(parse_int("0"), Some(0));
        assert_eq!(parse_int("42UL"), Some(42));
        assert_eq!(parse_int("0xFFFFFFFFFFFFFFFF"), Some(-1));
        assert_eq!(parse_int("99999999999999999999"), None);
        assert_eq!(parse_int("8w3"), None);
        assert_eq!(parse_int("09"), None);
    }
}
