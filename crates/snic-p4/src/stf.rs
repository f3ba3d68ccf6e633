//! p4c's STF (Simple Test Framework) test files, read and judged the way p4c's BMv2 test driver
//! does (`backends/bmv2/bmv2stf.py` with `tools/stf/stf_lexer.py` and `stf_parser.py`): one
//! command per line, `#` comments, case-insensitive keywords, hex packet data, per-port expects.
//!
//! - [`parse`] turns the text into a list of [`Line`]s (a 1-based line number and a typed
//!   [`Command`]), or a [`ParseError`] naming the line, the column and what was expected. It
//!   never panics and its work is linear in the input (numbers are capped at
//!   [`MAX_NUMBER_DIGITS`] digits).
//! - [`ExpectPattern::matches`] is the driver's nibble comparison (prefix unless `$`, `*` for any
//!   nibble); [`ExpectPattern::mismatch`] says why a frame fails and [`diff`] renders it.
//! - [`Number::ternary`] and [`Number::lpm`] turn key values into value/mask and value/length as
//!   the driver does (the mask from the digits written, the prefix length from the digit count).
//! - [`Expectations`] is the per-port bookkeeping of the judge: observed ports, expected lists in
//!   file order, received frames, and a [`Verdict`] listing missing, unexpected and wrong packets.
//! - [`table_matches`], [`action_matches`] and [`key_field_matches`] are the name-resolution
//!   rules (suffix matches), on plain strings.
//!
//! Running the commands (tables, multicast, clones, packets) needs the executor and lives there.

use core::fmt;
use std::collections::BTreeMap;

/// The longest number (in digits) [`parse`] accepts; longer ones are a parse error, which keeps
/// decimal-to-binary conversion bounded.
pub const MAX_NUMBER_DIGITS: usize = 1024;

/// BMv2's drop port: frames sent there are never seen by the judge.
pub const DROP_PORT: u32 = 511;

/// One parsed STF line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// 1-based line number in the file.
    pub line: u32,
    /// The command on it.
    pub cmd: Command,
}

/// The radix a [`Number`] was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Radix {
    /// `123`.
    Decimal,
    /// `0x1F`.
    Hex,
    /// `0b1010`.
    Binary,
    /// `0o17`.
    Octal,
}

impl Radix {
    /// Bits per digit for the power-of-two radixes (`None` for decimal).
    pub fn bits_per_digit(self) -> Option<u32> {
        match self {
            Radix::Decimal => None,
            Radix::Hex => Some(4),
            Radix::Binary => Some(1),
            Radix::Octal => Some(3),
        }
    }

    fn base(self) -> u32 {
        match self {
            Radix::Decimal => 10,
            Radix::Hex => 16,
            Radix::Binary => 2,
            Radix::Octal => 8,
        }
    }
}

/// A number as written: its radix and its digits, most significant first, with `None` for a `*`
/// (don't care) digit. Decimal numbers have no `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Number {
    /// How it was written.
    pub radix: Radix,
    /// Digit values (`0..base`), `None` for `*`. Never empty.
    pub digits: Vec<Option<u8>>,
}

/// A ternary key value: `value` and `mask` big-endian, of the same length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ternary {
    /// The value (zero under the mask's zero bits).
    pub value: Vec<u8>,
    /// One bits are compared, zero bits are "don't care".
    pub mask: Vec<u8>,
}

/// An lpm key value: `value` big-endian and the prefix length in bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lpm {
    /// The value (`*` digits read as zero).
    pub value: Vec<u8>,
    /// Prefix length in bits.
    pub len: u32,
}

/// Why a number cannot be used the way asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumberError {
    /// A ternary value written in decimal (the driver rejects it).
    DecimalTernary,
    /// `*` digits where a plain value is needed.
    Wildcard,
    /// The value does not fit the width asked for.
    TooWide,
}

impl fmt::Display for NumberError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NumberError::DecimalTernary => "a ternary value must be hex, binary or octal",
            NumberError::Wildcard => "`*` digits only mean something in ternary and lpm keys",
            NumberError::TooWide => "the value does not fit",
        })
    }
}

/// Packs `bits` (most significant first) into big-endian bytes, right-aligned.
fn pack_bits(bits: &[bool]) -> Vec<u8> {
    let n = bits.len().div_ceil(8);
    let mut out = vec![0u8; n];
    let pad = n * 8 - bits.len();
    for (i, &b) in bits.iter().enumerate() {
        if b {
            let k = pad + i;
            out[k / 8] |= 0x80 >> (k % 8);
        }
    }
    out
}

/// Strips leading zero bytes (an all-zero value becomes empty).
fn trim(v: &[u8]) -> &[u8] {
    let z = v.iter().take_while(|&&b| b == 0).count();
    &v[z..]
}

impl Number {
    /// The value, big-endian with no leading zero bytes (zero is empty); `*` digits read as
    /// zero.
    pub fn value(&self) -> Vec<u8> {
        if let Some(b) = self.radix.bits_per_digit() {
            let mut bits = Vec::with_capacity(self.digits.len() * b as usize);
            for d in &self.digits {
                let d = d.unwrap_or(0);
                for k in (0..b).rev() {
                    bits.push(d >> k & 1 == 1);
                }
            }
            return trim(&pack_bits(&bits)).to_vec();
        }
        // Decimal: multiply-add on a little-endian byte vector (digits are capped, so bounded).
        let mut le: Vec<u8> = Vec::new();
        for d in &self.digits {
            let mut carry = u32::from(d.unwrap_or(0));
            for b in le.iter_mut() {
                let x = u32::from(*b) * 10 + carry;
                *b = x as u8;
                carry = x >> 8;
            }
            while carry > 0 {
                le.push(carry as u8);
                carry >>= 8;
            }
        }
        le.reverse();
        trim(&le).to_vec()
    }

    /// Whether any digit is `*`.
    pub fn has_wildcard(&self) -> bool {
        self.digits.iter().any(Option::is_none)
    }

    /// The value as a `u128`, if it has no `*` and fits.
    pub fn to_u128(&self) -> Result<u128, NumberError> {
        if self.has_wildcard() {
            return Err(NumberError::Wildcard);
        }
        let v = self.value();
        if v.len() > 16 {
            return Err(NumberError::TooWide);
        }
        Ok(v.iter().fold(0u128, |a, &b| a << 8 | u128::from(b)))
    }

    /// The value in exactly `bytes` big-endian bytes (what BMv2's CLI accepts for a parameter of
    /// that many whole bytes), if it has no `*` and fits.
    pub fn to_bytes(&self, bytes: usize) -> Result<Vec<u8>, NumberError> {
        if self.has_wildcard() {
            return Err(NumberError::Wildcard);
        }
        widen(&self.value(), bytes).ok_or(NumberError::TooWide)
    }

    /// The ternary reading: every digit written gives an all-ones mask digit, every `*` a zero
    /// mask digit and a zero value digit. The mask covers only the digits written
    /// (`0x****0101` is value `0x00000101`, mask `0x0000FFFF`). Decimal is rejected.
    pub fn ternary(&self) -> Result<Ternary, NumberError> {
        let b = self.radix.bits_per_digit().ok_or(NumberError::DecimalTernary)?;
        let mut vbits = Vec::with_capacity(self.digits.len() * b as usize);
        let mut mbits = Vec::with_capacity(vbits.capacity());
        for d in &self.digits {
            for k in (0..b).rev() {
                vbits.push(d.is_some_and(|d| d >> k & 1 == 1));
                mbits.push(d.is_some());
            }
        }
        Ok(Ternary { value: pack_bits(&vbits), mask: pack_bits(&mbits) })
    }

    /// The lpm reading: `len` if the line gave `/LEN`, else (number of non-`*` digits) × bits
    /// per digit, a decimal value counting the digits of its hex form (`10` is `0xa`, `/4`).
    pub fn lpm(&self, len: Option<u32>) -> Lpm {
        let value = self.value();
        let len = len.unwrap_or_else(|| match self.radix.bits_per_digit() {
            Some(b) => self.digits.iter().filter(|d| d.is_some()).count() as u32 * b,
            None => {
                let hex_digits = match value.first() {
                    None => 1,
                    Some(&f) => value.len() as u32 * 2 - u32::from(f < 0x10),
                };
                hex_digits * 4
            }
        });
        Lpm { value, len }
    }
}

/// `v` (big-endian) padded or trimmed to exactly `bytes` bytes, if its significant bytes fit.
pub fn widen(v: &[u8], bytes: usize) -> Option<Vec<u8>> {
    let v = trim(v);
    if v.len() > bytes {
        return None;
    }
    let mut out = vec![0u8; bytes - v.len()];
    out.extend_from_slice(v);
    Some(out)
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.radix {
            Radix::Decimal => "",
            Radix::Hex => "0x",
            Radix::Binary => "0b",
            Radix::Octal => "0o",
        })?;
        for d in &self.digits {
            match d {
                Some(d) => write!(f, "{}", char::from_digit(u32::from(*d), 16).unwrap_or('?'))?,
                None => f.write_str("*")?,
            }
        }
        Ok(())
    }
}

/// A key value in `add`: a number and, for lpm, an optional `/LEN`. How it is read (exact,
/// ternary, lpm) depends on the key's match kind, known only once the table is resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The number as written.
    pub number: Number,
    /// The `/LEN` after it, if any.
    pub prefix_len: Option<u32>,
}

/// An action call: `ACTION(ARG:VALUE, ...)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionCall {
    /// The action name as written (resolved by suffix among the table's actions).
    pub name: String,
    /// `(parameter name, value)` in the order written.
    pub args: Vec<(String, Number)>,
}

/// Which counter field `check_counter` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterKind {
    /// `packets`.
    Packets,
    /// `bytes`.
    Bytes,
}

/// A comparison in `check_counter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// `==`.
    Eq,
    /// `!=`.
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

/// The counter reference in `check_counter NAME(ID_OR_INDEX)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CounterRef {
    /// An entry id (a name given with `= ID`).
    Id(String),
    /// An index.
    Index(Number),
}

/// A meter rate pair `RATE:BURST`, kept as written (rates may be decimals such as `0.5`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rate {
    /// Rate as written.
    pub rate: String,
    /// Burst as written.
    pub burst: String,
}

/// One STF command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `packet PORT HEXDATA...`: send `data` on ingress port `port`.
    Packet {
        /// Ingress port.
        port: u32,
        /// The frame, exactly as given.
        data: Vec<u8>,
    },
    /// `expect PORT [HEXDATA... [$]]`: one more expected packet on `port`.
    Expect {
        /// Egress port.
        port: u32,
        /// What the packet must look like.
        pattern: ExpectPattern,
    },
    /// `add TABLE [PRIO] KEY:VALUE... ACTION(ARG:VALUE, ...) [= ID]`.
    Add {
        /// Table name as written (resolved by suffix).
        table: String,
        /// The optional decimal priority (larger wins; used on ternary tables only).
        priority: Option<u32>,
        /// `(key name, value)` in the order written.
        keys: Vec<(String, KeyValue)>,
        /// The action.
        action: ActionCall,
        /// The `= ID` name (BMv2 ignores it).
        id: Option<String>,
    },
    /// `setdefault TABLE ACTION(ARG:VALUE, ...)`.
    SetDefault {
        /// Table name as written.
        table: String,
        /// The action.
        action: ActionCall,
    },
    /// `wait`: parsed and ignored.
    Wait,
    /// `remove all`: parsed and ignored.
    RemoveAll,
    /// `check_counter NAME(ID_OR_INDEX) [packets|bytes] [OP] N`: parsed and ignored by the
    /// BMv2 driver.
    CheckCounter {
        /// Counter name.
        name: String,
        /// Entry id or index.
        counter: CounterRef,
        /// Which field, if given.
        kind: Option<CounterKind>,
        /// The comparison, if given.
        op: Option<CmpOp>,
        /// The value compared with.
        value: Number,
    },
    /// `no_packet`: breaks the BMv2 driver (the test errors out).
    NoPacket,
    /// `mirroring_add SESSION PORT`.
    MirroringAdd {
        /// Clone session id.
        session: u32,
        /// Port copies go to.
        port: u32,
    },
    /// `mirroring_add_mc SESSION MGID`.
    MirroringAddMc {
        /// Clone session id.
        session: u32,
        /// Multicast group copies go to.
        mgid: u32,
    },
    /// `mirroring_delete SESSION`.
    MirroringDelete {
        /// Clone session id.
        session: u32,
    },
    /// `mirroring_get SESSION` (output not checked).
    MirroringGet {
        /// Clone session id.
        session: u32,
    },
    /// `mc_mgrp_create MGID`.
    McMgrpCreate {
        /// Multicast group id.
        mgid: u32,
    },
    /// `mc_node_create RID PORT...`: node handles are 0, 1, 2, ... in creation order.
    McNodeCreate {
        /// `egress_rid` of the copies.
        rid: u32,
        /// Ports.
        ports: Vec<u32>,
    },
    /// `mc_node_update HANDLE PORT...`: replaces the node's ports.
    McNodeUpdate {
        /// Node handle.
        handle: u32,
        /// New ports.
        ports: Vec<u32>,
    },
    /// `mc_node_associate MGID HANDLE`.
    McNodeAssociate {
        /// Multicast group id.
        mgid: u32,
        /// Node handle.
        handle: u32,
    },
    /// `counter_read NAME INDEX` (nothing checked).
    CounterRead {
        /// Counter name.
        name: String,
        /// Index.
        index: u32,
    },
    /// `counter_write NAME INDEX PKTS BYTES`.
    CounterWrite {
        /// Counter name.
        name: String,
        /// Index.
        index: u32,
        /// Packet count.
        packets: Number,
        /// Byte count.
        bytes: Number,
    },
    /// `register_read NAME INDEX` (not checked).
    RegisterRead {
        /// Register name.
        name: String,
        /// Index.
        index: u32,
    },
    /// `register_write NAME INDEX VALUE`.
    RegisterWrite {
        /// Register name.
        name: String,
        /// Index.
        index: u32,
        /// Value.
        value: Number,
    },
    /// `register_reset NAME`.
    RegisterReset {
        /// Register name.
        name: String,
    },
    /// `meter_get_rates NAME INDEX` (not checked).
    MeterGetRates {
        /// Meter name.
        name: String,
        /// Index.
        index: u32,
    },
    /// `meter_set_rates NAME INDEX RATE:BURST...`.
    MeterSetRates {
        /// Meter name.
        name: String,
        /// Index.
        index: u32,
        /// Rates.
        rates: Vec<Rate>,
    },
    /// `meter_array_set_rates NAME RATE:BURST...`.
    MeterArraySetRates {
        /// Meter array name.
        name: String,
        /// Rates.
        rates: Vec<Rate>,
    },
}

impl Command {
    /// Whether the BMv2 driver parses the command and then ignores it (`wait`, `remove all`,
    /// `check_counter`).
    pub fn ignored_by_bmv2(&self) -> bool {
        matches!(self, Command::Wait | Command::RemoveAll | Command::CheckCounter { .. })
    }
}

impl fmt::Display for KeyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.number)?;
        match self.prefix_len {
            Some(len) => write!(f, "/{len}"),
            None => Ok(()),
        }
    }
}

impl fmt::Display for ActionCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(", self.name)?;
        for (i, (name, value)) in self.args.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{name}:{value}")?;
        }
        f.write_str(")")
    }
}

impl fmt::Display for CmpOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        })
    }
}

fn write_list(f: &mut fmt::Formatter<'_>, items: &[u32]) -> fmt::Result {
    items.iter().try_for_each(|p| write!(f, " {p}"))
}

fn write_rates(f: &mut fmt::Formatter<'_>, rates: &[Rate]) -> fmt::Result {
    rates.iter().try_for_each(|r| write!(f, " {}:{}", r.rate, r.burst))
}

impl fmt::Display for Command {
    /// The command as one STF line (no newline) that [`parse_line`] reads back to the same
    /// value: lower-case keyword, single spaces, hex data in lower case.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Packet { port, data } => {
                write!(f, "packet {port}")?;
                if !data.is_empty() {
                    f.write_str(" ")?;
                    data.iter().try_for_each(|b| write!(f, "{b:02x}"))?;
                }
                Ok(())
            }
            Command::Expect { port, pattern } => {
                write!(f, "expect {port}")?;
                if !pattern.nibbles.is_empty() || pattern.exact {
                    write!(f, " {pattern}")?;
                }
                Ok(())
            }
            Command::Add { table, priority, keys, action, id } => {
                write!(f, "add {table}")?;
                if let Some(p) = priority {
                    write!(f, " {p}")?;
                }
                for (name, value) in keys {
                    write!(f, " {name}:{value}")?;
                }
                write!(f, " {action}")?;
                match id {
                    Some(id) => write!(f, " = {id}"),
                    None => Ok(()),
                }
            }
            Command::SetDefault { table, action } => write!(f, "setdefault {table} {action}"),
            Command::Wait => f.write_str("wait"),
            Command::RemoveAll => f.write_str("remove all"),
            Command::CheckCounter { name, counter, kind, op, value } => {
                write!(f, "check_counter {name}(")?;
                match counter {
                    CounterRef::Id(id) => write!(f, "{id})")?,
                    CounterRef::Index(n) => write!(f, "{n})")?,
                }
                match kind {
                    Some(CounterKind::Packets) => f.write_str(" packets")?,
                    Some(CounterKind::Bytes) => f.write_str(" bytes")?,
                    None => {}
                }
                if let Some(op) = op {
                    write!(f, " {op}")?;
                }
                write!(f, " {value}")
            }
            Command::NoPacket => f.write_str("no_packet"),
            Command::MirroringAdd { session, port } => write!(f, "mirroring_add {session} {port}"),
            Command::MirroringAddMc { session, mgid } => {
                write!(f, "mirroring_add_mc {session} {mgid}")
            }
            Command::MirroringDelete { session } => write!(f, "mirroring_delete {session}"),
            Command::MirroringGet { session } => write!(f, "mirroring_get {session}"),
            Command::McMgrpCreate { mgid } => write!(f, "mc_mgrp_create {mgid}"),
            Command::McNodeCreate { rid, ports } => {
                write!(f, "mc_node_create {rid}")?;
                write_list(f, ports)
            }
            Command::McNodeUpdate { handle, ports } => {
                write!(f, "mc_node_update {handle}")?;
                write_list(f, ports)
            }
            Command::McNodeAssociate { mgid, handle } => {
                write!(f, "mc_node_associate {mgid} {handle}")
            }
            Command::CounterRead { name, index } => write!(f, "counter_read {name} {index}"),
            Command::CounterWrite { name, index, packets, bytes } => {
                write!(f, "counter_write {name} {index} {packets} {bytes}")
            }
            Command::RegisterRead { name, index } => write!(f, "register_read {name} {index}"),
            Command::RegisterWrite { name, index, value } => {
                write!(f, "register_write {name} {index} {value}")
            }
            Command::RegisterReset { name } => write!(f, "register_reset {name}"),
            Command::MeterGetRates { name, index } => write!(f, "meter_get_rates {name} {index}"),
            Command::MeterSetRates { name, index, rates } => {
                write!(f, "meter_set_rates {name} {index}")?;
                write_rates(f, rates)
            }
            Command::MeterArraySetRates { name, rates } => {
                write!(f, "meter_array_set_rates {name}")?;
                write_rates(f, rates)
            }
        }
    }
}

/// An STF line that does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line.
    pub line: u32,
    /// 1-based column (in characters).
    pub col: u32,
    /// What was expected or what is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.col, self.message)
    }
}

impl std::error::Error for ParseError {}

/// Parses a whole STF file. Blank lines and comments give no [`Line`].
pub fn parse(text: &str) -> Result<Vec<Line>, ParseError> {
    let mut out = Vec::new();
    for (i, raw) in text.split('\n').enumerate() {
        let line = u32::try_from(i + 1).unwrap_or(u32::MAX);
        if let Some(cmd) = parse_line(raw, line)? {
            out.push(Line { line, cmd });
        }
    }
    Ok(out)
}

/// Parses one line (without its newline; `line` is used for errors). `Ok(None)` for a blank or
/// comment-only line.
pub fn parse_line(raw: &str, line: u32) -> Result<Option<Command>, ParseError> {
    let text = raw.split('#').next().unwrap_or("");
    let mut c = Cur { s: text, pos: 0, line };
    c.ws();
    if c.at_end() {
        return Ok(None);
    }
    let kw_at = c.pos;
    let kw = c.word();
    let cmd = match kw.to_ascii_lowercase().as_str() {
        "packet" => {
            let port = c.port()?;
            let (nibbles, _) = c.hex_data(false)?;
            if nibbles.len() % 2 != 0 {
                return Err(c.err_at(c.pos, "packet data needs an even number of hex digits"));
            }
            let data =
                nibbles.chunks(2).map(|p| p[0].unwrap_or(0) << 4 | p[1].unwrap_or(0)).collect();
            Command::Packet { port, data }
        }
        "expect" => {
            let port = c.port()?;
            let (nibbles, exact) = c.hex_data(true)?;
            Command::Expect { port, pattern: ExpectPattern { nibbles, exact } }
        }
        "add" => {
            let table = c.name("a table name")?;
            c.ws();
            let priority = if c.peek().is_some_and(|ch| ch.is_ascii_digit()) {
                let at = c.pos;
                let n = c.number()?;
                if n.radix != Radix::Decimal {
                    return Err(c.err_at(at, "a priority must be a decimal number"));
                }
                Some(
                    u32::try_from(n.to_u128().unwrap_or(u128::MAX))
                        .map_err(|_| c.err_at(at, "priority too large"))?,
                )
            } else {
                None
            };
            let mut keys = Vec::new();
            let action = loop {
                let name = c.name("a key `NAME:VALUE` or an action `NAME(...)`")?;
                c.ws();
                match c.peek() {
                    Some(':') => {
                        c.pos += 1;
                        c.ws();
                        let number = c.number()?;
                        c.ws();
                        let prefix_len = if c.eat('/') {
                            c.ws();
                            Some(c.small_decimal("a prefix length")?)
                        } else {
                            None
                        };
                        keys.push((name, KeyValue { number, prefix_len }));
                    }
                    Some('(') => break c.action_args(name)?,
                    _ => return Err(c.err("`:` after a key name or `(` after an action name")),
                }
            };
            c.ws();
            let id = if c.eat('=') {
                c.ws();
                let w = c.word();
                if w.is_empty() {
                    return Err(c.err("an entry id after `=`"));
                }
                Some(w.to_string())
            } else {
                None
            };
            Command::Add { table, priority, keys, action, id }
        }
        "setdefault" => {
            let table = c.name("a table name")?;
            let name = c.name("an action name")?;
            c.ws();
            if c.peek() != Some('(') {
                return Err(c.err("`(` after the action name"));
            }
            Command::SetDefault { table, action: c.action_args(name)? }
        }
        "wait" => Command::Wait,
        "no_packet" => Command::NoPacket,
        "remove" => {
            c.ws();
            let at = c.pos;
            if !c.word().eq_ignore_ascii_case("all") {
                return Err(c.err_at(at, "`all` after `remove`"));
            }
            Command::RemoveAll
        }
        "check_counter" => {
            let name = c.name("a counter name")?;
            c.ws();
            if !c.eat('(') {
                return Err(c.err("`(` after the counter name"));
            }
            c.ws();
            let counter = if c.peek().is_some_and(|ch| ch.is_ascii_digit()) {
                CounterRef::Index(c.number()?)
            } else {
                CounterRef::Id(c.name("an entry id or an index")?)
            };
            c.ws();
            if !c.eat(')') {
                return Err(c.err("`)`"));
            }
            c.ws();
            let rest = &c.s[c.pos..];
            let kind = if rest.starts_with("packets") {
                c.pos += "packets".len();
                Some(CounterKind::Packets)
            } else if rest.starts_with("bytes") {
                c.pos += "bytes".len();
                Some(CounterKind::Bytes)
            } else {
                None
            };
            c.ws();
            let op = c.cmp_op();
            c.ws();
            let value = c.number()?;
            Command::CheckCounter { name, counter, kind, op, value }
        }
        "mirroring_add" => {
            Command::MirroringAdd { session: c.u32("a session id")?, port: c.u32("a port")? }
        }
        "mirroring_add_mc" => Command::MirroringAddMc {
            session: c.u32("a session id")?,
            mgid: c.u32("a multicast group id")?,
        },
        "mirroring_delete" => Command::MirroringDelete { session: c.u32("a session id")? },
        "mirroring_get" => Command::MirroringGet { session: c.u32("a session id")? },
        "mc_mgrp_create" => Command::McMgrpCreate { mgid: c.u32("a multicast group id")? },
        "mc_node_create" => {
            let rid = c.u32("a replication id")?;
            Command::McNodeCreate { rid, ports: c.u32_list("a port")? }
        }
        "mc_node_update" => {
            let handle = c.u32("a node handle")?;
            Command::McNodeUpdate { handle, ports: c.u32_list("a port")? }
        }
        "mc_node_associate" => Command::McNodeAssociate {
            mgid: c.u32("a multicast group id")?,
            handle: c.u32("a node handle")?,
        },
        "counter_read" => {
            Command::CounterRead { name: c.name("a counter name")?, index: c.u32("an index")? }
        }
        "counter_write" => Command::CounterWrite {
            name: c.name("a counter name")?,
            index: c.u32("an index")?,
            packets: c.ws_number()?,
            bytes: c.ws_number()?,
        },
        "register_read" => {
            Command::RegisterRead { name: c.name("a register name")?, index: c.u32("an index")? }
        }
        "register_write" => Command::RegisterWrite {
            name: c.name("a register name")?,
            index: c.u32("an index")?,
            value: c.ws_number()?,
        },
        "register_reset" => Command::RegisterReset { name: c.name("a register name")? },
        "meter_get_rates" => {
            Command::MeterGetRates { name: c.name("a meter name")?, index: c.u32("an index")? }
        }
        "meter_set_rates" => Command::MeterSetRates {
            name: c.name("a meter name")?,
            index: c.u32("an index")?,
            rates: c.rates()?,
        },
        "meter_array_set_rates" => {
            Command::MeterArraySetRates { name: c.name("a meter name")?, rates: c.rates()? }
        }
        _ => return Err(c.err_at(kw_at, format!("unknown STF command `{kw}`"))),
    };
    c.ws();
    if !c.at_end() {
        return Err(c.err("end of line"));
    }
    Ok(Some(cmd))
}

/// A cursor over one line.
struct Cur<'a> {
    s: &'a str,
    pos: usize,
    line: u32,
}

fn is_name_char(ch: char) -> bool {
    ch.is_ascii_alphanumeric() || matches!(ch, '_' | '.' | '$' | '[' | ']')
}

impl<'a> Cur<'a> {
    fn peek(&self) -> Option<char> {
        self.s[self.pos..].chars().next()
    }

    fn at_end(&self) -> bool {
        self.pos >= self.s.len()
    }

    fn ws(&mut self) {
        while let Some(ch) = self.peek().filter(|c| c.is_whitespace()) {
            self.pos += ch.len_utf8();
        }
    }

    fn eat(&mut self, ch: char) -> bool {
        if self.peek() == Some(ch) {
            self.pos += ch.len_utf8();
            true
        } else {
            false
        }
    }

    fn err_at(&self, pos: usize, message: impl Into<String>) -> ParseError {
        let col = self.s.get(..pos).map_or(pos, |p| p.chars().count());
        ParseError {
            line: self.line,
            col: u32::try_from(col + 1).unwrap_or(u32::MAX),
            message: message.into(),
        }
    }

    /// "expected `what`" at the cursor, saying what was found.
    fn err(&self, what: impl fmt::Display) -> ParseError {
        let found = match self.peek() {
            None => "end of line".to_string(),
            Some(ch) => format!("`{ch}`"),
        };
        self.err_at(self.pos, format!("expected {what}, found {found}"))
    }

    /// A run of non-whitespace characters.
    fn word(&mut self) -> &'a str {
        let start = self.pos;
        while let Some(ch) = self.peek().filter(|c| !c.is_whitespace()) {
            self.pos += ch.len_utf8();
        }
        &self.s[start..self.pos]
    }

    /// A name (table, action, key field, counter...): letters, digits, `_ . $ [ ]`, not starting
    /// with a digit.
    fn name(&mut self, what: &str) -> Result<String, ParseError> {
        self.ws();
        if !self.peek().is_some_and(|c| is_name_char(c) && !c.is_ascii_digit()) {
            return Err(self.err(what));
        }
        let start = self.pos;
        while let Some(ch) = self.peek().filter(|&c| is_name_char(c)) {
            self.pos += ch.len_utf8();
        }
        Ok(self.s[start..self.pos].to_string())
    }

    /// A number at the cursor: decimal, `0x`, `0b` or `0o`, with `*` digits in the last three.
    fn number(&mut self) -> Result<Number, ParseError> {
        let start = self.pos;
        if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
            return Err(self.err("a number"));
        }
        while let Some(ch) = self.peek().filter(|&c| c.is_ascii_alphanumeric() || c == '*') {
            self.pos += ch.len_utf8();
        }
        let tok = &self.s[start..self.pos];
        let (radix, body, off) = match tok.get(..2).map(str::to_ascii_lowercase).as_deref() {
            Some("0x") => (Radix::Hex, &tok[2..], 2),
            Some("0b") => (Radix::Binary, &tok[2..], 2),
            Some("0o") => (Radix::Octal, &tok[2..], 2),
            _ => (Radix::Decimal, tok, 0),
        };
        if body.is_empty() {
            return Err(self.err_at(start + off, "expected digits after the radix prefix"));
        }
        if body.len() > MAX_NUMBER_DIGITS {
            return Err(
                self.err_at(start, format!("number longer than {MAX_NUMBER_DIGITS} digits"))
            );
        }
        let mut digits = Vec::with_capacity(body.len());
        for (i, ch) in body.char_indices() {
            let at = start + off + i;
            if ch == '*' {
                if radix == Radix::Decimal {
                    return Err(
                        self.err_at(at, "`*` is only allowed in hex, binary or octal numbers")
                    );
                }
                digits.push(None);
                continue;
            }
            match ch.to_digit(radix.base()) {
                Some(d) => digits.push(Some(d as u8)),
                None => {
                    return Err(self
                        .err_at(at, format!("`{ch}` is not a {:?} digit", radix).to_lowercase()));
                }
            }
        }
        Ok(Number { radix, digits })
    }

    fn ws_number(&mut self) -> Result<Number, ParseError> {
        self.ws();
        self.number()
    }

    /// A decimal number that fits in `u32`.
    fn small_decimal(&mut self, what: &str) -> Result<u32, ParseError> {
        let start = self.pos;
        if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
            return Err(self.err(what));
        }
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == '*') {
            return Err(self.err_at(self.pos, format!("{what} must be a decimal number")));
        }
        self.s[start..self.pos]
            .parse()
            .map_err(|_| self.err_at(start, format!("{what} is too large")))
    }

    /// A port in `packet` / `expect`: decimal only.
    fn port(&mut self) -> Result<u32, ParseError> {
        self.ws();
        self.small_decimal("a decimal port number")
    }

    /// A number (any radix, no `*`) that fits in `u32`.
    fn u32(&mut self, what: &str) -> Result<u32, ParseError> {
        self.ws();
        let start = self.pos;
        if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
            return Err(self.err(what));
        }
        let n = self.number()?;
        n.to_u128().ok().and_then(|v| u32::try_from(v).ok()).ok_or_else(|| {
            self.err_at(start, format!("{what} must be a number below 2^32 without `*`"))
        })
    }

    fn u32_list(&mut self, what: &str) -> Result<Vec<u32>, ParseError> {
        let mut out = Vec::new();
        loop {
            self.ws();
            if self.at_end() {
                return Ok(out);
            }
            out.push(self.u32(what)?);
        }
    }

    /// The rest of the line as hex nibbles (`*` allowed when `expect`), with a final `$`.
    fn hex_data(&mut self, expect: bool) -> Result<(Vec<Option<u8>>, bool), ParseError> {
        let mut nibbles = Vec::new();
        let mut exact = false;
        loop {
            self.ws();
            let Some(ch) = self.peek() else { break };
            if exact {
                return Err(self.err_at(self.pos, "`$` must be the last token"));
            }
            if let Some(d) = ch.to_digit(16) {
                nibbles.push(Some(d as u8));
            } else if expect && ch == '*' {
                nibbles.push(None);
            } else if expect && ch == '$' {
                exact = true;
            } else {
                let what = if expect { "a hex digit, `*` or a final `$`" } else { "a hex digit" };
                return Err(self.err(what));
            }
            self.pos += ch.len_utf8();
        }
        Ok((nibbles, exact))
    }

    /// `(ARG:VALUE, ...)` after an action name; the cursor is on `(`.
    fn action_args(&mut self, name: String) -> Result<ActionCall, ParseError> {
        self.eat('(');
        let mut args = Vec::new();
        self.ws();
        if self.eat(')') {
            return Ok(ActionCall { name, args });
        }
        loop {
            let arg = self.name("a parameter name")?;
            self.ws();
            if !self.eat(':') {
                return Err(self.err("`:` after the parameter name"));
            }
            args.push((arg, self.ws_number()?));
            self.ws();
            if self.eat(')') {
                return Ok(ActionCall { name, args });
            }
            if !self.eat(',') {
                return Err(self.err("`,` or `)`"));
            }
        }
    }

    fn cmp_op(&mut self) -> Option<CmpOp> {
        let rest = &self.s[self.pos..];
        let (op, n) = [
            ("==", CmpOp::Eq),
            ("!=", CmpOp::Ne),
            ("<=", CmpOp::Le),
            (">=", CmpOp::Ge),
            ("<", CmpOp::Lt),
            (">", CmpOp::Gt),
        ]
        .into_iter()
        .find(|(t, _)| rest.starts_with(t))
        .map(|(t, op)| (op, t.len()))?;
        self.pos += n;
        Some(op)
    }

    /// One or more `RATE:BURST` pairs of decimals.
    fn rates(&mut self) -> Result<Vec<Rate>, ParseError> {
        let mut out = Vec::new();
        loop {
            self.ws();
            if self.at_end() {
                break;
            }
            let rate = self.decimal_text("a rate")?;
            self.ws();
            if !self.eat(':') {
                return Err(self.err("`:` between rate and burst"));
            }
            self.ws();
            let burst = self.decimal_text("a burst")?;
            out.push(Rate { rate, burst });
        }
        if out.is_empty() {
            return Err(self.err("a `RATE:BURST` pair"));
        }
        Ok(out)
    }

    /// `123` or `0.5`, as text.
    fn decimal_text(&mut self, what: &str) -> Result<String, ParseError> {
        let start = self.pos;
        if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
            return Err(self.err(what));
        }
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if self.eat('.') {
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.pos += 1;
            }
        }
        Ok(self.s[start..self.pos].to_string())
    }
}

/// An expected packet: nibbles, `None` for `*`, and whether a final `$` asked for an exact
/// length. No nibbles and no `$` (a bare `expect PORT`) matches any packet.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExpectPattern {
    /// Expected nibbles, most significant first; `None` matches any nibble.
    pub nibbles: Vec<Option<u8>>,
    /// `$`: the received packet may not be longer.
    pub exact: bool,
}

/// Why a received frame does not match an [`ExpectPattern`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// The frame has fewer nibbles than the pattern.
    TooShort {
        /// Nibbles expected.
        expected: usize,
        /// Nibbles received.
        received: usize,
    },
    /// `$` was given and the frame has more nibbles than the pattern.
    TooLong {
        /// Nibbles expected.
        expected: usize,
        /// Nibbles received.
        received: usize,
    },
    /// The nibble at this (0-based) index differs.
    Nibble {
        /// Index of the first differing nibble.
        index: usize,
    },
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Mismatch::TooShort { expected, received } => {
                write!(f, "too short: {received} nibbles received, {expected} expected")
            }
            Mismatch::TooLong { expected, received } => {
                write!(f, "too long: {received} nibbles received, exactly {expected} expected ($)")
            }
            Mismatch::Nibble { index } => {
                write!(f, "differs at nibble {index} (byte {})", index / 2)
            }
        }
    }
}

fn nibble(frame: &[u8], i: usize) -> u8 {
    let b = frame[i / 2];
    if i.is_multiple_of(2) { b >> 4 } else { b & 0xf }
}

impl ExpectPattern {
    /// The driver's comparison: the frame must have at least as many nibbles as the pattern
    /// (and no more with `$`); every non-`*` nibble must be equal; extra bytes are unchecked.
    pub fn matches(&self, frame: &[u8]) -> bool {
        self.mismatch(frame).is_none()
    }

    /// Why `frame` does not match, or `None` if it does. Length is checked before content, as
    /// the driver does.
    pub fn mismatch(&self, frame: &[u8]) -> Option<Mismatch> {
        let (expected, received) = (self.nibbles.len(), frame.len() * 2);
        if received < expected {
            return Some(Mismatch::TooShort { expected, received });
        }
        if self.exact && received > expected {
            return Some(Mismatch::TooLong { expected, received });
        }
        self.nibbles.iter().enumerate().find_map(|(i, want)| match want {
            Some(w) if *w != nibble(frame, i) => Some(Mismatch::Nibble { index: i }),
            _ => None,
        })
    }
}

impl fmt::Display for ExpectPattern {
    /// The nibbles in upper-case hex, `*` for don't care, then ` $` if exact.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for n in &self.nibbles {
            match n {
                Some(n) => write!(f, "{n:X}")?,
                None => f.write_str("*")?,
            }
        }
        if self.exact {
            f.write_str(if self.nibbles.is_empty() { "$" } else { " $" })?;
        }
        Ok(())
    }
}

/// A readable diff for a frame that fails `pattern` on `port`: the reason, then expected and
/// received nibbles in groups of eight bytes, with a `^` line under differing nibbles. Returns
/// `None` if the frame matches.
pub fn diff(port: u32, pattern: &ExpectPattern, frame: &[u8]) -> Option<String> {
    let why = pattern.mismatch(frame)?;
    let exp: Vec<char> = pattern
        .nibbles
        .iter()
        .map(|n| n.map_or('*', |n| char::from_digit(u32::from(n), 16).unwrap_or('?')))
        .map(|c| c.to_ascii_uppercase())
        .collect();
    let rx: Vec<char> = (0..frame.len() * 2)
        .map(|i| char::from_digit(u32::from(nibble(frame, i)), 16).unwrap_or('?'))
        .map(|c| c.to_ascii_uppercase())
        .collect();
    let n = exp.len().max(rx.len());
    let (mut e, mut r, mut m) = (String::new(), String::new(), String::new());
    for i in 0..n {
        if i > 0 && i % 16 == 0 {
            e.push(' ');
            r.push(' ');
            m.push(' ');
        }
        let ec = exp.get(i).copied();
        let rc = rx.get(i).copied();
        e.push(ec.unwrap_or(' '));
        r.push(rc.unwrap_or(' '));
        let bad = match (ec, rc) {
            (Some('*'), Some(_)) => false,
            (Some(a), Some(b)) => a != b,
            (None, Some(_)) => pattern.exact,
            (Some(_), None) => true,
            (None, None) => false,
        };
        m.push(if bad { '^' } else { ' ' });
    }
    let suffix = if pattern.exact { " $" } else { "" };
    Some(format!(
        "port {port}: {why}\n  expected: {}{suffix}\n  received: {}\n            {}",
        e.trim_end(),
        r.trim_end(),
        m.trim_end()
    ))
}

/// One expected packet with the line it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// The `expect` line.
    pub line: u32,
    /// The pattern.
    pub pattern: ExpectPattern,
}

/// The judge's bookkeeping: which ports are observed, what each expects (in file order), and
/// what each received (in arrival order).
#[derive(Debug, Clone, Default)]
pub struct Expectations {
    ports: BTreeMap<u32, (Vec<Expected>, Vec<Vec<u8>>)>,
}

/// Whether a frame handed to [`Expectations::receive`] was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// The port is observed; the frame will be judged.
    Recorded,
    /// The port is not named by any `packet` or `expect` (or is the drop port): never seen.
    NotObserved,
}

/// A failed check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The `index`-th expect on `port` got no packet.
    Missing {
        /// Port.
        port: u32,
        /// 0-based position in the port's expect list.
        index: usize,
        /// The expect.
        expected: Expected,
    },
    /// The `index`-th packet on `port` had no expect.
    Unexpected {
        /// Port.
        port: u32,
        /// 0-based position in the port's received list.
        index: usize,
        /// The frame.
        frame: Vec<u8>,
    },
    /// The `index`-th packet on `port` does not match the `index`-th expect.
    Wrong {
        /// Port.
        port: u32,
        /// 0-based position.
        index: usize,
        /// The expect.
        expected: Expected,
        /// The frame.
        frame: Vec<u8>,
        /// Why.
        mismatch: Mismatch,
    },
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Missing { port, index, expected } => write!(
                f,
                "port {port}: packet {index} expected (line {}: {}) but not received",
                expected.line, expected.pattern
            ),
            Failure::Unexpected { port, index, frame } => {
                write!(f, "port {port}: packet {index} received but not expected: ")?;
                frame.iter().try_for_each(|b| write!(f, "{b:02X}"))
            }
            Failure::Wrong { port, index, expected, frame, .. } => {
                let d = diff(*port, &expected.pattern, frame).unwrap_or_default();
                write!(f, "packet {index} (expect on line {}) on {d}", expected.line)
            }
        }
    }
}

/// The outcome of a test's packet checks.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verdict {
    /// Every failed check, by port then position (the driver stops at the first; all are listed
    /// here for a better report; pass/fail is the same).
    pub failures: Vec<Failure>,
}

impl Verdict {
    /// No failures.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

impl Expectations {
    /// Collects the observed ports (every `packet` and `expect` port) and each port's expects
    /// in file order, wherever they sit relative to the packets.
    pub fn from_lines(lines: &[Line]) -> Self {
        let mut e = Expectations::default();
        for l in lines {
            match &l.cmd {
                Command::Packet { port, .. } => {
                    e.ports.entry(*port).or_default();
                }
                Command::Expect { port, pattern } => {
                    e.ports
                        .entry(*port)
                        .or_default()
                        .0
                        .push(Expected { line: l.line, pattern: pattern.clone() });
                }
                _ => {}
            }
        }
        e
    }

    /// The observed ports (every port a `packet` or `expect` names), ascending. The drop port
    /// is listed if named, but nothing is ever received on it.
    pub fn observed_ports(&self) -> impl Iterator<Item = u32> + '_ {
        self.ports.keys().copied()
    }

    /// Whether frames sent to `port` are seen (the port is named in the file and is not the
    /// drop port).
    pub fn observes(&self, port: u32) -> bool {
        port != DROP_PORT && self.ports.contains_key(&port)
    }

    /// Records a frame transmitted on `port`, in arrival order.
    pub fn receive(&mut self, port: u32, frame: &[u8]) -> Received {
        if port == DROP_PORT {
            return Received::NotObserved;
        }
        match self.ports.get_mut(&port) {
            Some((_, rx)) => {
                rx.push(frame.to_vec());
                Received::Recorded
            }
            None => Received::NotObserved,
        }
    }

    /// Judges: on every observed port, the i-th received frame against the i-th expect; extra
    /// frames are unexpected, missing ones are missing. A port with no expects must receive
    /// nothing.
    pub fn verdict(&self) -> Verdict {
        let mut failures = Vec::new();
        for (&port, (exp, rx)) in &self.ports {
            for (index, e) in exp.iter().enumerate() {
                match rx.get(index) {
                    None => failures.push(Failure::Missing { port, index, expected: e.clone() }),
                    Some(frame) => {
                        if let Some(mismatch) = e.pattern.mismatch(frame) {
                            failures.push(Failure::Wrong {
                                port,
                                index,
                                expected: e.clone(),
                                frame: frame.clone(),
                                mismatch,
                            });
                        }
                    }
                }
            }
            for (index, frame) in rx.iter().enumerate().skip(exp.len()) {
                failures.push(Failure::Unexpected { port, index, frame: frame.clone() });
            }
        }
        Verdict { failures }
    }
}

/// Table name resolution: the STF name matches a full control-plane name if it equals it or is
/// a plain string suffix of it. Returns the index of the only match; `Err` lists the matches
/// (none, or more than one).
pub fn table_matches<S: AsRef<str>>(stf: &str, tables: &[S]) -> Result<usize, Vec<usize>> {
    let hits: Vec<usize> =
        (0..tables.len()).filter(|&i| tables[i].as_ref().ends_with(stf)).collect();
    match hits.as_slice() {
        [one] => Ok(*one),
        _ => Err(hits),
    }
}

/// Action name resolution among a table's actions: an exact match wins, else a unique suffix
/// match. `Err` lists the suffix matches (none, or more than one).
pub fn action_matches<S: AsRef<str>>(stf: &str, actions: &[S]) -> Result<usize, Vec<usize>> {
    if let Some(i) = actions.iter().position(|a| a.as_ref() == stf) {
        return Ok(i);
    }
    table_matches(stf, actions)
}

/// `NAME$N` in STF stands for `NAME[N]`.
fn stf_key_name(stf: &str) -> String {
    let mut out = String::with_capacity(stf.len());
    let mut rest = stf;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let n = after.bytes().take_while(u8::is_ascii_digit).count();
        let at_end = after.as_bytes().get(n).is_none_or(|&b| b == b'.' || b == b'[');
        if n > 0 && at_end {
            out.push('[');
            out.push_str(&after[..n]);
            out.push(']');
            rest = &after[n..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Key field resolution: the index of the first field matching the STF key name under the
/// first rule that matches any field, in the order STF.md lists (equal; equal without a
/// trailing `$` or `.$valid$`; `.valid` for `.$valid$`; suffix after a `.`, and `valid` for any
/// `X.$valid$`). `NAME$N` is read as `NAME[N]` first.
pub fn key_field_matches<S: AsRef<str>>(stf: &str, fields: &[S]) -> Option<usize> {
    let name = stf_key_name(stf);
    let name = name.as_str();
    let rules: [&dyn Fn(&str) -> bool; 4] = [
        &|f| f == name,
        &|f| f.strip_suffix('$') == Some(name) || f.strip_suffix(".$valid$") == Some(name),
        &|f| name.strip_suffix(".valid").is_some_and(|s| f.strip_suffix(".$valid$") == Some(s)),
        &|f| {
            f.strip_suffix(name).is_some_and(|p| p.ends_with('.'))
                || (name == "valid" && f.ends_with(".$valid$"))
        },
    ];
    rules.iter().find_map(|rule| fields.iter().position(|f| rule(f.as_ref())))
}

/// The priority the BMv2 driver sends for an STF priority (smaller wins in BMv2, so a larger
/// STF priority wins).
pub fn bmv2_priority(stf: u32) -> i64 {
    10000 - i64::from(stf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(s: &str) -> Number {
        Cur { s, pos: 0, line: 1 }.number().unwrap()
    }

    #[test]
    fn decimal_value_is_big_endian_without_leading_zeros() {
        assert_eq!(num("0").value(), Vec::<u8>::new());
        assert_eq!(num("256").value(), vec![1, 0]);
        assert_eq!(
            num("340282366920938463463374607431768211456").value(),
            [&[1u8][..], &[0u8; 16][..]].concat()
        );
    }

    #[test]
    fn ternary_mask_from_written_digits() {
        let t = num("0x****0101").ternary().unwrap();
        assert_eq!(t.value, vec![0, 0, 1, 1]);
        assert_eq!(t.mask, vec![0, 0, 0xff, 0xff]);
        let t = num("0b1**0").ternary().unwrap();
        assert_eq!((t.value, t.mask), (vec![0b1000], vec![0b1001]));
        assert_eq!(num("12").ternary(), Err(NumberError::DecimalTernary));
    }

    #[test]
    fn lpm_length_from_digit_count() {
        assert_eq!(num("0x0a010065").lpm(None).len, 32);
        assert_eq!(num("0x0a01****").lpm(None), Lpm { value: vec![0x0a, 0x01, 0, 0], len: 16 });
        assert_eq!(num("10").lpm(None).len, 4);
        assert_eq!(num("256").lpm(None).len, 12);
        assert_eq!(num("0").lpm(None).len, 4);
        assert_eq!(num("0o17").lpm(None).len, 6);
        assert_eq!(num("0x0a").lpm(Some(3)).len, 3);
    }

    #[test]
    fn stf_dollar_index_is_a_stack_index() {
        assert_eq!(stf_key_name("extra$0.h"), "extra[0].h");
        assert_eq!(stf_key_name("h.$valid$"), "h.$valid$");
        assert_eq!(stf_key_name("a$12"), "a[12]");
    }
}
