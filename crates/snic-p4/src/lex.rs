//! The lexer: P4-16 source text (already through the preprocessor) into [`Token`]s with byte
//! ranges into that text.
//!
//! [`lex`] never fails as a whole and never panics: what it cannot read becomes a
//! [`TokenKind::Error`] token (so the parser can resynchronise) and a [`LexError`] with the byte
//! range; the front end maps ranges back to `file:line:col` through the preprocessor's map. It
//! runs in time linear in the text (an integer literal costs at most [`MAX_WIDTH`] / 64 limb
//! operations per chunk of digits).
//!
//! Choices worth knowing:
//! - `>>` is never one token: it is two [`TokenKind::Gt`], the second starting where the first
//!   ends, like p4c does, so that `bit<8>>` closes two type argument lists. The parser treats
//!   two *adjacent* `>` (see [`Token::is_adjacent_to`]) as a right shift, and `>` adjacent to
//!   `>=` as `>>=`. `<<` is one token ([`TokenKind::Shl`]): no generic closes with `<`.
//! - Integer literals carry their value as a [`BigUint`] (little-endian `u64` limbs), since
//!   `int` is arbitrary-precision and `bit<W>` goes up to [`MAX_WIDTH`] bits; a width or a value
//!   wider than that is an error. Whether a value fits its width is left to the type checker.
//! - An integer literal is read as the whole run of letters, digits and `_` after its first
//!   digit, so `0b102` is one error (bad digit `2`), not `0b10` then `2`.
//! - `@name` (no space) is one [`TokenKind::Annotation`] token; its body (`(...)` or `[...]`) is
//!   ordinary tokens. A lone `@` is [`TokenKind::At`].
//! - Keywords are P4-16 v1.2's reserved words plus `break`, `continue` and `for` (v1.2.5);
//!   `pragma` is only special as `@pragma`, an annotation. Type names are identifiers here.
//! - Compound assignments (`+=`, `|+|=`, `<<=`, ...) are tokens, as in p4c.
//! - A `#` (a directive the preprocessor left) and any other unexpected character are errors.

use core::cmp::Ordering;
use core::fmt;

/// The widest `bit<W>` / `int<W>` a literal may name, and the most bits an integer literal's
/// value may have.
pub const MAX_WIDTH: u32 = 1 << 16;

/// Most limbs a literal's value may take while it is read (one more than [`MAX_WIDTH`] needs, so
/// too large a value is seen as too large).
const MAX_LIMBS: usize = (MAX_WIDTH as usize) / 64 + 1;

/// An unsigned integer of any size: little-endian 64-bit limbs, without high zero limbs (zero is
/// no limb at all), so equal values have equal representations.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct BigUint {
    limbs: Vec<u64>,
}

impl BigUint {
    /// Zero.
    pub fn zero() -> Self {
        BigUint::default()
    }

    /// The value of `v`.
    pub fn from_u128(v: u128) -> Self {
        let mut b = BigUint { limbs: vec![v as u64, (v >> 64) as u64] };
        b.normalize();
        b
    }

    /// From little-endian limbs (high zero limbs are dropped).
    pub fn from_limbs(limbs: Vec<u64>) -> Self {
        let mut b = BigUint { limbs };
        b.normalize();
        b
    }

    /// The little-endian limbs, without high zero limbs.
    pub fn limbs(&self) -> &[u64] {
        &self.limbs
    }

    /// True for zero.
    pub fn is_zero(&self) -> bool {
        self.limbs.is_empty()
    }

    /// How many bits the value needs (0 for zero).
    pub fn bits(&self) -> u64 {
        match self.limbs.last() {
            None => 0,
            Some(&hi) => (self.limbs.len() as u64 - 1) * 64 + (64 - u64::from(hi.leading_zeros())),
        }
    }

    /// Bit `i` (0 is the least significant).
    pub fn bit(&self, i: u64) -> bool {
        let limb = (i / 64) as usize;
        self.limbs.get(limb).is_some_and(|l| (l >> (i % 64)) & 1 == 1)
    }

    /// The value as a `u128`, or `None` when it needs more than 128 bits.
    pub fn to_u128(&self) -> Option<u128> {
        match self.limbs.as_slice() {
            [] => Some(0),
            [lo] => Some(u128::from(*lo)),
            [lo, hi] => Some(u128::from(*lo) | (u128::from(*hi) << 64)),
            _ => None,
        }
    }

    /// The value as a `u64`, or `None` when it needs more than 64 bits.
    pub fn to_u64(&self) -> Option<u64> {
        self.to_u128().and_then(|v| u64::try_from(v).ok())
    }

    /// Parse digits in `radix` (2, 8, 10 or 16; `_` separators allowed, at least one digit).
    /// `None` for another radix, no digit, a bad digit, or a value wider than [`MAX_WIDTH`].
    pub fn parse(digits: &str, radix: u32) -> Option<Self> {
        parse_digits(digits, radix).ok()
    }

    /// `self = self * mul + add`.
    fn mul_add(&mut self, mul: u64, add: u64) {
        let mut carry = u128::from(add);
        for limb in &mut self.limbs {
            let t = u128::from(*limb) * u128::from(mul) + carry;
            *limb = t as u64;
            carry = t >> 64;
        }
        if carry != 0 {
            self.limbs.push(carry as u64);
        }
        self.normalize();
    }

    /// Divide by `div` (non-zero) in place; returns the remainder.
    fn div_rem_small(&mut self, div: u64) -> u64 {
        let mut rem: u128 = 0;
        for limb in self.limbs.iter_mut().rev() {
            let cur = (rem << 64) | u128::from(*limb);
            *limb = (cur / u128::from(div)) as u64;
            rem = cur % u128::from(div);
        }
        self.normalize();
        rem as u64
    }

    fn normalize(&mut self) {
        while self.limbs.last() == Some(&0) {
            self.limbs.pop();
        }
    }
}

impl PartialOrd for BigUint {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for BigUint {
    fn cmp(&self, other: &Self) -> Ordering {
        self.limbs
            .len()
            .cmp(&other.limbs.len())
            .then_with(|| self.limbs.iter().rev().cmp(other.limbs.iter().rev()))
    }
}

impl From<u64> for BigUint {
    fn from(v: u64) -> Self {
        BigUint::from_u128(u128::from(v))
    }
}

impl fmt::Display for BigUint {
    /// Decimal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_zero() {
            return f.pad("0");
        }
        const CHUNK: u64 = 10_000_000_000_000_000_000; // 10^19
        let mut v = self.clone();
        let mut parts = Vec::new();
        while !v.is_zero() {
            parts.push(v.div_rem_small(CHUNK));
        }
        let mut s = String::new();
        for (i, p) in parts.iter().rev().enumerate() {
            if i == 0 {
                s.push_str(&p.to_string());
            } else {
                s.push_str(&format!("{p:019}"));
            }
        }
        f.pad(&s)
    }
}

impl fmt::LowerHex for BigUint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        for (i, l) in self.limbs.iter().rev().enumerate() {
            if i == 0 {
                s.push_str(&format!("{l:x}"));
            } else {
                s.push_str(&format!("{l:016x}"));
            }
        }
        if s.is_empty() {
            s.push('0');
        }
        f.pad_integral(true, "0x", &s)
    }
}

/// Why digits did not parse (internal to the literal reader).
enum DigitError {
    NoDigits,
    BadDigit(char),
    TooLarge,
}

fn parse_digits(digits: &str, radix: u32) -> Result<BigUint, DigitError> {
    // Digits per chunk such that radix^chunk fits in a u64.
    let chunk_len = match radix {
        2 => 63,
        8 => 21,
        10 => 19,
        16 => 15,
        _ => return Err(DigitError::NoDigits),
    };
    let mut value = BigUint::zero();
    let mut acc: u64 = 0;
    let mut n: u32 = 0;
    let mut any = false;
    let mut too_large = false;
    let mut bad = None;
    for c in digits.chars() {
        if c == '_' {
            continue;
        }
        let Some(d) = c.to_digit(radix) else {
            bad.get_or_insert(c);
            continue;
        };
        any = true;
        if too_large || bad.is_some() {
            continue;
        }
        acc = acc * u64::from(radix) + u64::from(d);
        n += 1;
        if n == chunk_len {
            value.mul_add(u64::from(radix).pow(n), acc);
            acc = 0;
            n = 0;
            too_large = value.limbs.len() > MAX_LIMBS;
        }
    }
    if let Some(c) = bad {
        return Err(DigitError::BadDigit(c));
    }
    if !any {
        return Err(DigitError::NoDigits);
    }
    if n > 0 && !too_large {
        value.mul_add(u64::from(radix).pow(n), acc);
    }
    if too_large || value.bits() > u64::from(MAX_WIDTH) {
        return Err(DigitError::TooLarge);
    }
    Ok(value)
}

/// The width prefix of an integer literal: `8w` (unsigned) or `8s` (signed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IntWidth {
    /// The width in bits (at most [`MAX_WIDTH`]).
    pub bits: u32,
    /// `s` (a signed `int<W>`) rather than `w` (an unsigned `bit<W>`).
    pub signed: bool,
}

/// An integer literal's value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IntLit {
    /// The width prefix; `None` for an arbitrary-precision `int` literal.
    pub width: Option<IntWidth>,
    /// The radix it was written in: 2, 8, 10 or 16.
    pub radix: u32,
    /// The value (never negative: `-` is an operator).
    pub value: BigUint,
}

macro_rules! fixed_tokens {
    ($( $(#[$doc:meta])* $name:ident = $text:literal, )*) => {
        /// What a token is. Fixed-text tokens (keywords, punctuation) are unit variants whose
        /// text [`TokenKind::fixed_text`] gives; identifiers and annotations take their text from
        /// the token's range ([`Token::text`]); literals carry their value.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum TokenKind {
            /// An identifier (type names too: the parser knows which names are types).
            Ident,
            /// `@name`: an annotation's name, with the `@` (the name is
            /// `text[start + 1..end]`, which may be a keyword, e.g. `@priority`).
            Annotation,
            /// An integer literal.
            Int(IntLit),
            /// A string literal, with its escapes resolved.
            Str(String),
            /// Text that could not be read (a [`LexError`] says why).
            Error,
            $( $(#[$doc])* $name, )*
        }

        impl TokenKind {
            /// The text of a keyword or punctuation token; `None` for the others.
            pub fn fixed_text(&self) -> Option<&'static str> {
                match self {
                    $( TokenKind::$name => Some($text), )*
                    _ => None,
                }
            }

            /// Every keyword and punctuation token, with its text.
            pub const FIXED: &'static [(&'static str, TokenKind)] = &[
                $( ($text, TokenKind::$name), )*
            ];
        }
    };
}

fixed_tokens! {
    /// `_`, the don't-care.
    DontCare = "_",
    /// `abstract`
    KwAbstract = "abstract",
    /// `action`
    KwAction = "action",
    /// `actions`
    KwActions = "actions",
    /// `apply`
    KwApply = "apply",
    /// `bit`
    KwBit = "bit",
    /// `bool`
    KwBool = "bool",
    /// `break`
    KwBreak = "break",
    /// `const`
    KwConst = "const",
    /// `continue`
    KwContinue = "continue",
    /// `control`
    KwControl = "control",
    /// `default`
    KwDefault = "default",
    /// `else`
    KwElse = "else",
    /// `entries`
    KwEntries = "entries",
    /// `enum`
    KwEnum = "enum",
    /// `error`
    KwError = "error",
    /// `exit`
    KwExit = "exit",
    /// `extern`
    KwExtern = "extern",
    /// `false`
    KwFalse = "false",
    /// `for`
    KwFor = "for",
    /// `header`
    KwHeader = "header",
    /// `header_union`
    KwHeaderUnion = "header_union",
    /// `if`
    KwIf = "if",
    /// `in`
    KwIn = "in",
    /// `inout`
    KwInout = "inout",
    /// `int`
    KwInt = "int",
    /// `key`
    KwKey = "key",
    /// `list`
    KwList = "list",
    /// `match_kind`
    KwMatchKind = "match_kind",
    /// `out`
    KwOut = "out",
    /// `package`
    KwPackage = "package",
    /// `parser`
    KwParser = "parser",
    /// `priority`
    KwPriority = "priority",
    /// `return`
    KwReturn = "return",
    /// `select`
    KwSelect = "select",
    /// `state`
    KwState = "state",
    /// `string`
    KwString = "string",
    /// `struct`
    KwStruct = "struct",
    /// `switch`
    KwSwitch = "switch",
    /// `table`
    KwTable = "table",
    /// `this`
    KwThis = "this",
    /// `transition`
    KwTransition = "transition",
    /// `true`
    KwTrue = "true",
    /// `tuple`
    KwTuple = "tuple",
    /// `type`
    KwType = "type",
    /// `typedef`
    KwTypedef = "typedef",
    /// `value_set`
    KwValueSet = "value_set",
    /// `varbit`
    KwVarbit = "varbit",
    /// `void`
    KwVoid = "void",
    /// `(`
    LParen = "(",
    /// `)`
    RParen = ")",
    /// `[`
    LBracket = "[",
    /// `]`
    RBracket = "]",
    /// `{`
    LBrace = "{",
    /// `}`
    RBrace = "}",
    /// `<`
    Lt = "<",
    /// `>` (also each half of a right shift: see the module documentation)
    Gt = ">",
    /// `,`
    Comma = ",",
    /// `;`
    Semi = ";",
    /// `:`
    Colon = ":",
    /// `.`
    Dot = ".",
    /// `..` (a range in `select` keysets and entries)
    DotDot = "..",
    /// `?`
    Question = "?",
    /// `=`
    Assign = "=",
    /// `==`
    EqEq = "==",
    /// `!=`
    Ne = "!=",
    /// `<=`
    Le = "<=",
    /// `>=`
    Ge = ">=",
    /// `&&`
    AndAnd = "&&",
    /// `||`
    OrOr = "||",
    /// `!`
    Not = "!",
    /// `~`
    Tilde = "~",
    /// `&`
    Amp = "&",
    /// `&&&` (a ternary mask)
    Mask = "&&&",
    /// `|`
    Pipe = "|",
    /// `^`
    Caret = "^",
    /// `+`
    Plus = "+",
    /// `-`
    Minus = "-",
    /// `*`
    Star = "*",
    /// `/`
    Slash = "/",
    /// `%`
    Percent = "%",
    /// `<<`
    Shl = "<<",
    /// `++` (concatenation)
    PlusPlus = "++",
    /// `|+|` (saturating addition)
    PlusSat = "|+|",
    /// `|-|` (saturating subtraction)
    MinusSat = "|-|",
    /// `@` not followed by a name
    At = "@",
    /// `+=`
    PlusAssign = "+=",
    /// `-=`
    MinusAssign = "-=",
    /// `*=`
    StarAssign = "*=",
    /// `/=`
    SlashAssign = "/=",
    /// `%=`
    PercentAssign = "%=",
    /// `<<=`
    ShlAssign = "<<=",
    /// `&=`
    AmpAssign = "&=",
    /// `|=`
    PipeAssign = "|=",
    /// `^=`
    CaretAssign = "^=",
    /// `|+|=`
    PlusSatAssign = "|+|=",
    /// `|-|=`
    MinusSatAssign = "|-|=",
}

/// Punctuation, longest first within each starting character's candidates (the lexer takes the
/// first that matches).
const PUNCT: &[(&str, TokenKind)] = &[
    ("|+|=", TokenKind::PlusSatAssign),
    ("|-|=", TokenKind::MinusSatAssign),
    ("|+|", TokenKind::PlusSat),
    ("|-|", TokenKind::MinusSat),
    ("&&&", TokenKind::Mask),
    ("<<=", TokenKind::ShlAssign),
    ("==", TokenKind::EqEq),
    ("!=", TokenKind::Ne),
    ("<=", TokenKind::Le),
    (">=", TokenKind::Ge),
    ("&&", TokenKind::AndAnd),
    ("||", TokenKind::OrOr),
    ("<<", TokenKind::Shl),
    ("++", TokenKind::PlusPlus),
    ("..", TokenKind::DotDot),
    ("+=", TokenKind::PlusAssign),
    ("-=", TokenKind::MinusAssign),
    ("*=", TokenKind::StarAssign),
    ("/=", TokenKind::SlashAssign),
    ("%=", TokenKind::PercentAssign),
    ("&=", TokenKind::AmpAssign),
    ("|=", TokenKind::PipeAssign),
    ("^=", TokenKind::CaretAssign),
    ("(", TokenKind::LParen),
    (")", TokenKind::RParen),
    ("[", TokenKind::LBracket),
    ("]", TokenKind::RBracket),
    ("{", TokenKind::LBrace),
    ("}", TokenKind::RBrace),
    ("<", TokenKind::Lt),
    (">", TokenKind::Gt),
    (",", TokenKind::Comma),
    (";", TokenKind::Semi),
    (":", TokenKind::Colon),
    (".", TokenKind::Dot),
    ("?", TokenKind::Question),
    ("=", TokenKind::Assign),
    ("!", TokenKind::Not),
    ("~", TokenKind::Tilde),
    ("&", TokenKind::Amp),
    ("|", TokenKind::Pipe),
    ("^", TokenKind::Caret),
    ("+", TokenKind::Plus),
    ("-", TokenKind::Minus),
    ("*", TokenKind::Star),
    ("/", TokenKind::Slash),
    ("%", TokenKind::Percent),
];

impl TokenKind {
    /// The keyword spelled `word`, if it is one (`_` gives [`TokenKind::DontCare`]).
    pub fn keyword(word: &str) -> Option<TokenKind> {
        let first = *word.as_bytes().first()?;
        if !(first == b'_' || first.is_ascii_lowercase()) {
            return None;
        }
        Self::FIXED.iter().find(|(text, _)| *text == word).map(|(_, kind)| kind.clone())
    }

    /// True for a keyword (not `_`, not punctuation).
    pub fn is_keyword(&self) -> bool {
        self.fixed_text().is_some_and(|t| t.as_bytes()[0].is_ascii_lowercase())
    }
}

/// One token: what it is and the bytes `start..end` of the lexed text it came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Token {
    /// What it is.
    pub kind: TokenKind,
    /// First byte.
    pub start: u32,
    /// One past the last byte.
    pub end: u32,
}

impl Token {
    /// The token's text in `text` (the string given to [`lex`]); empty if the range does not
    /// fit it.
    pub fn text<'a>(&self, text: &'a str) -> &'a str {
        text.get(self.start as usize..self.end as usize).unwrap_or("")
    }

    /// True when `next` starts exactly where this token ends (no space or comment between):
    /// two adjacent [`TokenKind::Gt`] are a right shift.
    pub fn is_adjacent_to(&self, next: &Token) -> bool {
        self.end == next.start
    }
}

/// Why some text could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LexErrorKind {
    /// A character no token starts with.
    UnexpectedChar(char),
    /// A `#`: a preprocessor directive reached the lexer.
    StrayHash,
    /// `/*` without `*/`.
    UnterminatedComment,
    /// `"` without its closing `"`.
    UnterminatedString,
    /// A `\` escape a string literal does not know.
    BadEscape(char),
    /// An integer literal without digits after its base or width prefix (`0x`, `8w`).
    MissingDigits,
    /// A character that is no digit of the literal's radix (`0b102`, `12ab`).
    BadDigit {
        /// The character.
        ch: char,
        /// The radix.
        radix: u32,
    },
    /// A width prefix over [`MAX_WIDTH`] bits.
    WidthTooLarge,
    /// A value over [`MAX_WIDTH`] bits.
    ValueTooLarge,
    /// Text longer than `u32::MAX` bytes: nothing was lexed.
    InputTooLarge,
}

/// A lexical error with the bytes `start..end` of the lexed text it is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LexError {
    /// What is wrong.
    pub kind: LexErrorKind,
    /// First byte.
    pub start: u32,
    /// One past the last byte.
    pub end: u32,
}

impl fmt::Display for LexErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LexErrorKind::UnexpectedChar(c) => write!(f, "unexpected character {c:?}"),
            LexErrorKind::StrayHash => {
                write!(f, "stray '#': unknown or misplaced preprocessor directive")
            }
            LexErrorKind::UnterminatedComment => write!(f, "unterminated /* comment"),
            LexErrorKind::UnterminatedString => write!(f, "unterminated string literal"),
            LexErrorKind::BadEscape(c) => write!(f, "unknown escape sequence \\{c}"),
            LexErrorKind::MissingDigits => write!(f, "integer literal without digits"),
            LexErrorKind::BadDigit { ch, radix } => {
                write!(f, "invalid digit {ch:?} in base-{radix} integer literal")
            }
            LexErrorKind::WidthTooLarge => {
                write!(f, "integer literal width over {MAX_WIDTH} bits")
            }
            LexErrorKind::ValueTooLarge => {
                write!(f, "integer literal value over {MAX_WIDTH} bits")
            }
            LexErrorKind::InputTooLarge => write!(f, "input over 4 GiB"),
        }
    }
}

impl fmt::Display for LexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.kind.fmt(f)
    }
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_ident_continue(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Lex `text` (preprocessed P4-16): every token in order, and every error. Tokens do not
/// overlap and lie within the text; whitespace and comments give none.
pub fn lex(text: &str) -> (Vec<Token>, Vec<LexError>) {
    let mut lx = Lexer { text, bytes: text.as_bytes(), pos: 0, tokens: Vec::new(), errors: vec![] };
    if u32::try_from(text.len()).is_err() {
        lx.errors.push(LexError { kind: LexErrorKind::InputTooLarge, start: 0, end: 0 });
        return (lx.tokens, lx.errors);
    }
    lx.run();
    (lx.tokens, lx.errors)
}

struct Lexer<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    tokens: Vec<Token>,
    errors: Vec<LexError>,
}

impl Lexer<'_> {
    fn push(&mut self, kind: TokenKind, start: usize) {
        self.tokens.push(Token { kind, start: start as u32, end: self.pos as u32 });
    }

    fn error(&mut self, kind: LexErrorKind, start: usize, end: usize) {
        self.errors.push(LexError { kind, start: start as u32, end: end as u32 });
    }

    fn run(&mut self) {
        while let Some(&b) = self.bytes.get(self.pos) {
            let start = self.pos;
            match b {
                b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c' => self.pos += 1,
                b'/' if self.bytes.get(start + 1) == Some(&b'/') => {
                    self.pos =
                        self.text[start..].find('\n').map_or(self.bytes.len(), |i| start + i);
                }
                b'/' if self.bytes.get(start + 1) == Some(&b'*') => {
                    match self.text[start + 2..].find("*/") {
                        Some(i) => self.pos = start + 2 + i + 2,
                        None => {
                            self.pos = self.bytes.len();
                            self.error(LexErrorKind::UnterminatedComment, start, start + 2);
                        }
                    }
                }
                b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                    self.eat_word();
                    let kind =
                        TokenKind::keyword(&self.text[start..self.pos]).unwrap_or(TokenKind::Ident);
                    self.push(kind, start);
                }
                b'0'..=b'9' => self.number(start),
                b'"' => self.string(start),
                b'@' => {
                    self.pos += 1;
                    if self.bytes.get(self.pos).is_some_and(|&c| is_ident_start(c)) {
                        self.eat_word();
                        self.push(TokenKind::Annotation, start);
                    } else {
                        self.push(TokenKind::At, start);
                    }
                }
                b'#' => {
                    self.pos += 1;
                    self.error(LexErrorKind::StrayHash, start, self.pos);
                    self.push(TokenKind::Error, start);
                }
                _ => {
                    let rest = &self.text[start..];
                    if let Some((p, kind)) = PUNCT.iter().find(|(p, _)| rest.starts_with(p)) {
                        self.pos += p.len();
                        self.push(kind.clone(), start);
                    } else {
                        // Not ASCII punctuation: skip one whole character (ranges stay on
                        // character boundaries).
                        let c = rest.chars().next().unwrap_or('\u{fffd}');
                        self.pos += c.len_utf8().max(1);
                        self.error(LexErrorKind::UnexpectedChar(c), start, self.pos);
                        self.push(TokenKind::Error, start);
                    }
                }
            }
        }
    }

    fn eat_word(&mut self) {
        while self.bytes.get(self.pos).is_some_and(|&c| is_ident_continue(c)) {
            self.pos += 1;
        }
    }

    fn number(&mut self, start: usize) {
        self.eat_word();
        let end = self.pos;
        match parse_int(&self.text[start..end]) {
            Ok(lit) => self.push(TokenKind::Int(lit), start),
            Err(kind) => {
                self.error(kind, start, end);
                self.push(TokenKind::Error, start);
            }
        }
    }

    fn string(&mut self, start: usize) {
        self.pos += 1;
        let mut value = String::new();
        loop {
            let Some(c) = self.text[self.pos..].chars().next() else {
                self.error(LexErrorKind::UnterminatedString, start, self.pos);
                self.push(TokenKind::Error, start);
                return;
            };
            self.pos += c.len_utf8();
            match c {
                '"' => break,
                '\\' => {
                    let esc_start = self.pos - 1;
                    let Some(e) = self.text[self.pos..].chars().next() else { continue };
                    self.pos += e.len_utf8();
                    match e {
                        '"' => value.push('"'),
                        '\\' => value.push('\\'),
                        'n' => value.push('\n'),
                        't' => value.push('\t'),
                        'r' => value.push('\r'),
                        '0' => value.push('\0'),
                        // A backslash-newline left in a string joins the lines.
                        '\n' => {}
                        other => {
                            self.error(LexErrorKind::BadEscape(other), esc_start, self.pos);
                            value.push(other);
                        }
                    }
                }
                c => value.push(c),
            }
        }
        self.push(TokenKind::Str(value), start);
    }
}

/// Parse one integer literal's whole text (`[0-9][A-Za-z0-9_]*`).
fn parse_int(t: &str) -> Result<IntLit, LexErrorKind> {
    let b = t.as_bytes();
    let lead = b.iter().take_while(|c| c.is_ascii_digit()).count();
    let (width, rest) = match b.get(lead) {
        Some(&s @ (b'w' | b's')) if lead > 0 => {
            let bits = t[..lead]
                .parse::<u32>()
                .ok()
                .filter(|&w| w <= MAX_WIDTH)
                .ok_or(LexErrorKind::WidthTooLarge)?;
            (Some(IntWidth { bits, signed: s == b's' }), &t[lead + 1..])
        }
        _ => (None, t),
    };
    if rest.is_empty() {
        return Err(LexErrorKind::MissingDigits);
    }
    let rb = rest.as_bytes();
    let (radix, digits) = match (rb.first(), rb.get(1)) {
        (Some(b'0'), Some(b'x' | b'X')) => (16, &rest[2..]),
        (Some(b'0'), Some(b'o' | b'O')) => (8, &rest[2..]),
        (Some(b'0'), Some(b'b' | b'B')) => (2, &rest[2..]),
        (Some(b'0'), Some(b'd' | b'D')) => (10, &rest[2..]),
        _ => (10, rest),
    };
    let value = parse_digits(digits, radix).map_err(|e| match e {
        DigitError::NoDigits => LexErrorKind::MissingDigits,
        DigitError::BadDigit(ch) => LexErrorKind::BadDigit { ch, radix },
        DigitError::TooLarge => LexErrorKind::ValueTooLarge,
    })?;
    Ok(IntLit { width, radix, value })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<TokenKind> {
        let (toks, errs) = lex(text);
        assert!(errs.is_empty(), "{errs:?}");
        toks.into_iter().map(|t| t.kind).collect()
    }

    #[test]
    fn biguint_parses_compares_and_prints() {
        let v = BigUint::parse("1_0000_0000_0000_0000_0000_0000_0000_0000", 16).unwrap();
        assert_eq!(v.bits(), 129);
        assert_eq!(v.to_u128(), None);
        assert_eq!(v.to_string(), "340282366920938463463374607431768211456");
        assert_eq!(format!("{v:x}"), "100000000000000000000000000000000");
        assert!(v > BigUint::from_u128(u128::MAX));
        assert_eq!(BigUint::parse("0", 10), Some(BigUint::zero()));
        assert_eq!(BigUint::zero().to_string(), "0");
        assert_eq!(BigUint::parse("_", 10), None);
        assert_eq!(BigUint::parse("12", 3), None);
        assert_eq!(BigUint::from(255).to_u64(), Some(255));
        assert!(BigUint::from(4).bit(2) && !BigUint::from(4).bit(1000));
    }

    #[test]
    fn keyword_table_is_consistent() {
        for (text, kind) in TokenKind::FIXED {
            assert_eq!(kind.fixed_text(), Some(*text));
            let alpha = text.as_bytes()[0].is_ascii_alphabetic() || *text == "_";
            assert_eq!(TokenKind::keyword(text).is_some(), alpha, "{text}");
            if !alpha {
                assert!(PUNCT.iter().any(|(p, k)| p == text && k == kind) || *text == "@");
            }
        }
        assert_eq!(TokenKind::keyword("pragma"), None);
        assert!(TokenKind::KwHeaderUnion.is_keyword() && !TokenKind::DontCare.is_keyword());
    }

    #[test]
    fn shift_right_is_two_adjacent_gt() {
        let (toks, _) = lex("a >> b > > c");
        assert_eq!(toks[1].kind, TokenKind::Gt);
        assert!(toks[1].is_adjacent_to(&toks[2]));
        assert!(!toks[4].is_adjacent_to(&toks[5]));
        assert_eq!(kinds("x>>=1")[1..3], [TokenKind::Gt, TokenKind::Ge]);
    }
}
