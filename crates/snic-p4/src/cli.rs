//! BMv2 `simple_switch_CLI` command lines: table entries files (one command per line) and the
//! runtime commands sent to a running snic, parsed into typed [`Command`]s.
//!
//! The syntax is that of BMv2's `tools/runtime_CLI.py` (and `sswitch_CLI.py` for `mirroring_*`):
//! a command name, then arguments separated by whitespace (Python's `line.split()`). This module
//! only parses; the executor applies the commands once it knows the program's tables, actions,
//! counters, meters and registers.
//!
//! - [`parse_file`] reads a whole file (blank lines and `#` comments skipped: a `#` anywhere
//!   starts a comment running to the end of the line; BMv2's own `cmd` loop knows no comments,
//!   files fed to it by tutorials and scripts use them anyway). The first bad line stops it with a
//!   [`CliError`] naming the line. [`parse_line`] reads one line.
//! - Key fields and action parameters stay text in the [`Command`]: how they read depends on the
//!   field's width and match kind, which only the program knows. The executor converts them with
//!   [`key_match`] and [`param_value`], and takes the priority off the end of a `table_add` with
//!   [`split_priority`].
//! - [`Display`](fmt::Display) prints a command back in the CLI syntax; it re-parses to the same
//!   command.
//!
//! # Values, as BMv2's CLI reads them (`parse_param`)
//!
//! - Integers follow Python's `int(text, 0)`: decimal (no leading zero unless the value is
//!   zero), `0x`/`0o`/`0b` with upper- or lower-case prefix, single `_` between digits (and
//!   after the prefix), an optional `+`. Only ASCII digits are read (Python also takes other
//!   Unicode digits).
//! - A negative number is an error here. (BMv2's `int_to_bytes` skips its loop on a negative
//!   number and silently sends all-zero bytes.)
//! - For a field of exactly 32 bits, text containing `.` is an IPv4 address (four decimal
//!   parts, each 0..=255); of exactly 48 bits, text containing `:` is a MAC address (six hex
//!   parts, each 0..=255); of exactly 128 bits, text containing `:` is an IPv6 address
//!   ([`std::net::Ipv6Addr`] syntax; Python also accepts a `%scope` suffix, rejected here). At any
//!   other width these forms are not recognised and are an error, as in BMv2.
//! - **Width rule**: BMv2's CLI accepts a value that fits in the field's width *rounded up to
//!   whole bytes* (`(bitwidth + 7) // 8` bytes), and rejects a longer one ("Parameter is too
//!   large"). The switch then masks match key bytes to the field's width (`apply_big_mask` in
//!   `bm_sim`'s match units): `0x1ff` for a 9-bit field is accepted and matches as `0x1ff`, but
//!   `0x3ff` is also accepted and matches as `0x1ff`. [`key_match`] and [`param_value`] do the
//!   same: an error past the whole bytes, the bits above the width dropped below that. (BMv2 keeps
//!   an action parameter's extra bits until the parameter is written to a field of its width,
//!   where they are truncated; dropping them at once gives the same result for every use of a
//!   `bit<W>` parameter.)
//!
//! # Keys, by match kind
//!
//! - `exact`: a value.
//! - `ternary`: `VALUE&&&MASK` (no spaces: the line is split on whitespace first).
//! - `lpm`: `VALUE/LEN`, `LEN` a decimal integer (Python `int()`), at most the width.
//! - `range`: `LO->HI`, an error when `LO > HI` (before or after masking to the width).
//!
//! A ternary value's bits outside its mask and an lpm value's bits past its prefix are kept as
//! written (masked to the width only); the table compares only the bits that count.
//! - `optional`: BMv2's CLI has no such match kind (its JSON loader knows exact, lpm, ternary,
//!   valid and range). Here an optional field takes a value (an exact match) or the ternary form
//!   with an all-ones mask (the same) or a zero mask (the wildcard, e.g. `0&&&0`); any other mask
//!   is an error.
//!
//! # Priority
//!
//! `table_add TABLE ACTION KEY... => PARAM... [PRIORITY]`: the priority is the *last* argument,
//! after the action parameters, and BMv2 takes it only when the table's match type is `ternary`
//! or `range` (p4c's BMv2 back end makes a table `ternary` when a key field is ternary or
//! optional, `range` when one is range). It is read with Python's `int()` (decimal, optional
//! sign). Whether the last token is a priority therefore depends on the table: [`split_priority`]
//! takes it off once the executor knows.

use core::fmt;
use std::net::Ipv6Addr;

use crate::table::{FieldMatch, MatchKind};

/// What kind of mistake a [`CliError`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The command name is not one this parser knows.
    UnknownCommand,
    /// Too few or too many arguments, or a missing `=>`.
    Arguments,
    /// A number that does not read as one (syntax).
    BadNumber,
    /// A number that reads but is out of range (too large, negative, `LO > HI`, ...).
    OutOfRange,
    /// A malformed address, key form or boolean.
    BadValue,
    /// A field width outside `1..=128`.
    BadWidth,
}

/// Why a line or a value does not parse: the line (when it came from one), the kind of error, and
/// a message naming the command, argument and text at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    /// 1-based line number, when the error came from [`parse_line`] or [`parse_file`].
    pub line: Option<u32>,
    /// The kind of mistake.
    pub kind: ErrorKind,
    /// What is wrong, in words.
    pub message: String,
}

impl CliError {
    fn new(kind: ErrorKind, message: impl Into<String>) -> CliError {
        CliError { line: None, kind, message: message.into() }
    }

    fn at(mut self, line: u32) -> CliError {
        self.line = Some(line);
        self
    }

    fn context(mut self, what: &str) -> CliError {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "line {l}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for CliError {}

/// One meter rate: `RATE:BURST`, the rate in units (packets or bytes) per microsecond, the burst
/// in units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeterRate {
    /// Units per microsecond (Python `float()`; finite and not negative).
    pub rate: f64,
    /// Burst size in units (Python `int()`).
    pub burst: u32,
}

impl fmt::Display for MeterRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.rate, self.burst)
    }
}

/// One command line, as typed arguments. Names (tables, actions, counters, ...) are kept as
/// written: BMv2 also accepts any unique suffix of a dotted name, which the executor resolves.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// `table_add TABLE ACTION KEY... => PARAM... [PRIORITY]`.
    TableAdd {
        /// The table.
        table: String,
        /// The action.
        action: String,
        /// Key field texts, one per key field (read with [`key_match`]).
        keys: Vec<String>,
        /// Everything after `=>`: the action's parameters (read with [`param_value`]), then the
        /// priority when the table needs one (taken off with [`split_priority`]).
        params: Vec<String>,
    },
    /// `table_delete TABLE HANDLE`.
    TableDelete {
        /// The table.
        table: String,
        /// The entry handle.
        handle: u32,
    },
    /// `table_set_timeout TABLE HANDLE MS`: the entry's idle timeout (0: none), for tables with
    /// `support_timeout` / `pna_idle_timeout`.
    TableSetTimeout {
        /// The table.
        table: String,
        /// The entry handle.
        handle: u32,
        /// Milliseconds.
        ms: u32,
    },
    /// `table_modify TABLE ACTION HANDLE [=>] PARAM...` (BMv2 tolerates the `=>`).
    TableModify {
        /// The table.
        table: String,
        /// The new action.
        action: String,
        /// The entry handle.
        handle: u32,
        /// The action's parameters.
        params: Vec<String>,
    },
    /// `table_set_default TABLE ACTION PARAM...`.
    TableSetDefault {
        /// The table.
        table: String,
        /// The action.
        action: String,
        /// The action's parameters.
        params: Vec<String>,
    },
    /// `table_reset_default TABLE`.
    TableResetDefault {
        /// The table.
        table: String,
    },
    /// `table_clear TABLE`: every entry but the default one.
    TableClear {
        /// The table.
        table: String,
    },
    /// `table_dump TABLE`.
    TableDump {
        /// The table.
        table: String,
    },
    /// `table_dump_entry TABLE HANDLE`.
    TableDumpEntry {
        /// The table.
        table: String,
        /// The entry handle.
        handle: u32,
    },
    /// `table_num_entries TABLE`.
    TableNumEntries {
        /// The table.
        table: String,
    },
    /// `table_info TABLE`.
    TableInfo {
        /// The table.
        table: String,
    },
    /// `counter_read NAME INDEX`.
    CounterRead {
        /// The counter array (or direct counter).
        name: String,
        /// The index (an entry handle for a direct counter).
        index: u32,
    },
    /// `counter_reset NAME`.
    CounterReset {
        /// The counter array.
        name: String,
    },
    /// `counter_write NAME INDEX PACKETS BYTES`.
    CounterWrite {
        /// The counter array.
        name: String,
        /// The index.
        index: u32,
        /// Packet count.
        packets: u64,
        /// Byte count.
        bytes: u64,
    },
    /// `register_read NAME [INDEX]` (no index: the whole array).
    RegisterRead {
        /// The register array.
        name: String,
        /// The cell, or all of them.
        index: Option<u32>,
    },
    /// `register_write NAME INDEX VALUE`.
    RegisterWrite {
        /// The register array.
        name: String,
        /// The cell.
        index: u32,
        /// The value (BMv2 reads it with Python `int()`, decimal; `0x`/`0o`/`0b` are accepted
        /// here too). The executor checks it against the register's width.
        value: u128,
    },
    /// `register_reset NAME`: every cell to 0.
    RegisterReset {
        /// The register array.
        name: String,
    },
    /// `meter_set_rates NAME INDEX RATE:BURST...`.
    MeterSetRates {
        /// The meter array (or direct meter).
        name: String,
        /// The index.
        index: u32,
        /// One rate per colour threshold (v1model meters take two).
        rates: Vec<MeterRate>,
    },
    /// `meter_get_rates NAME INDEX`.
    MeterGetRates {
        /// The meter array.
        name: String,
        /// The index.
        index: u32,
    },
    /// `meter_array_set_rates NAME RATE:BURST...`: every meter of the array.
    MeterArraySetRates {
        /// The meter array.
        name: String,
        /// One rate per colour threshold.
        rates: Vec<MeterRate>,
    },
    /// `mc_mgrp_create ID`.
    McMgrpCreate {
        /// The multicast group id.
        mgrp: u16,
    },
    /// `mc_mgrp_destroy ID`.
    McMgrpDestroy {
        /// The multicast group id.
        mgrp: u16,
    },
    /// `mc_node_create RID PORT... [| LAG...]`.
    McNodeCreate {
        /// The replication id.
        rid: u16,
        /// Ports, ascending, no duplicates (BMv2 sorts them into a port map).
        ports: Vec<u32>,
        /// LAG indexes after `|`, ascending, no duplicates (only a `SimplePreLAG` uses them).
        lags: Vec<u32>,
    },
    /// `mc_node_update HANDLE PORT... [| LAG...]`.
    McNodeUpdate {
        /// The node handle.
        handle: u32,
        /// Ports, ascending, no duplicates.
        ports: Vec<u32>,
        /// LAG indexes, ascending, no duplicates.
        lags: Vec<u32>,
    },
    /// `mc_node_associate MGRP HANDLE`.
    McNodeAssociate {
        /// The multicast group id.
        mgrp: u16,
        /// The node handle.
        handle: u32,
    },
    /// `mc_node_dissociate MGRP HANDLE`.
    McNodeDissociate {
        /// The multicast group id.
        mgrp: u16,
        /// The node handle.
        handle: u32,
    },
    /// `mc_node_destroy HANDLE`.
    McNodeDestroy {
        /// The node handle.
        handle: u32,
    },
    /// `mc_dump`.
    McDump,
    /// `mirroring_add SESSION PORT`.
    MirroringAdd {
        /// The mirror (clone) session id.
        session: u32,
        /// The egress port.
        port: u32,
    },
    /// `mirroring_add_mc SESSION MGRP`.
    MirroringAddMc {
        /// The mirror session id.
        session: u32,
        /// The multicast group id.
        mgrp: u16,
    },
    /// `mirroring_delete SESSION`.
    MirroringDelete {
        /// The mirror session id.
        session: u32,
    },
    /// `mirroring_get SESSION`.
    MirroringGet {
        /// The mirror session id.
        session: u32,
    },
    /// `set_crc16_parameters NAME POLY INIT XOR REFLECT_DATA REFLECT_REMAINDER`.
    SetCrc16Parameters {
        /// The `crc16_custom` calculation.
        name: String,
        /// The polynomial.
        polynomial: u16,
        /// The initial remainder.
        initial: u16,
        /// The final XOR value.
        final_xor: u16,
        /// Whether input bytes are reflected.
        reflect_data: bool,
        /// Whether the remainder is reflected.
        reflect_remainder: bool,
    },
    /// `set_crc32_parameters NAME POLY INIT XOR REFLECT_DATA REFLECT_REMAINDER`.
    SetCrc32Parameters {
        /// The `crc32_custom` calculation.
        name: String,
        /// The polynomial.
        polynomial: u32,
        /// The initial remainder.
        initial: u32,
        /// The final XOR value.
        final_xor: u32,
        /// Whether input bytes are reflected.
        reflect_data: bool,
        /// Whether the remainder is reflected.
        reflect_remainder: bool,
    },
    /// `help [COMMAND]` (Python's `cmd` takes an optional command name).
    Help {
        /// The command asked about.
        topic: Option<String>,
    },
    /// `show_tables`.
    ShowTables,
    /// `show_actions`.
    ShowActions,
    /// `act_prof_create_member PROFILE ACTION PARAM...`.
    ActProfCreateMember {
        /// The action profile (or selector).
        profile: String,
        /// The action.
        action: String,
        /// Its parameters.
        params: Vec<String>,
    },
    /// `act_prof_delete_member PROFILE MEMBER`.
    ActProfDeleteMember {
        /// The profile.
        profile: String,
        /// The member.
        member: u32,
    },
    /// `act_prof_create_group PROFILE`.
    ActProfCreateGroup {
        /// The profile.
        profile: String,
    },
    /// `act_prof_delete_group PROFILE GROUP`.
    ActProfDeleteGroup {
        /// The profile.
        profile: String,
        /// The group.
        group: u32,
    },
    /// `act_prof_add_member_to_group PROFILE MEMBER GROUP`.
    ActProfAddMemberToGroup {
        /// The profile.
        profile: String,
        /// The member.
        member: u32,
        /// The group.
        group: u32,
    },
    /// `act_prof_remove_member_from_group PROFILE MEMBER GROUP`.
    ActProfRemoveMemberFromGroup {
        /// The profile.
        profile: String,
        /// The member.
        member: u32,
        /// The group.
        group: u32,
    },
    /// `table_indirect_add TABLE KEY... => MEMBER [PRIORITY]`, or with `_with_group` a group.
    TableIndirectAdd {
        /// The table.
        table: String,
        /// The key values.
        keys: Vec<String>,
        /// The member or group.
        target: u32,
        /// A group rather than a member.
        group: bool,
        /// The priority, for tables that use one.
        priority: Option<i32>,
    },
    /// `table_indirect_set_default TABLE MEMBER`, or with `_with_group` a group.
    TableIndirectSetDefault {
        /// The table.
        table: String,
        /// The member or group.
        target: u32,
        /// A group rather than a member.
        group: bool,
    },
    /// `pvs_add NAME VALUE[&&&MASK]`: add to a parser value set.
    PvsAdd {
        /// The value set.
        name: String,
        /// The value (and mask).
        value: String,
    },
    /// `pvs_clear NAME`.
    PvsClear {
        /// The value set.
        name: String,
    },
}

/// simple_switch_CLI commands this parser knows of but snic does not take: a clearer error than
/// "unknown command".
const UNSUPPORTED: &[&str] = &[
    "table_set_timeout",
    "table_show_actions",
    "table_dump_entry_from_key",
    "table_indirect_delete",
    "table_indirect_reset_default",
    "table_indirect_create_member",
    "table_indirect_delete_member",
    "table_indirect_modify_member",
    "table_indirect_create_group",
    "table_indirect_delete_group",
    "table_indirect_add_member_to_group",
    "table_indirect_remove_member_from_group",
    "table_dump_member",
    "table_dump_group",
    "act_prof_modify_member",
    "act_prof_dump_member",
    "act_prof_dump_group",
    "act_prof_dump",
    "mc_set_lag_membership",
    "load_new_config_file",
    "swap_configs",
    "show_pvs",
    "pvs_add",
    "pvs_remove",
    "pvs_get",
    "pvs_clear",
    "port_add",
    "port_remove",
    "show_ports",
    "switch_info",
    "reset_state",
    "write_config_to_file",
    "serialize_state",
    "set_toeplitz_hash_key",
    "set_queue_depth",
    "set_queue_rate",
    "get_time_elapsed",
    "get_time_since_epoch",
    "shell",
    "greet",
    "EOF",
];

// ---- integers (Python `int()` rules) ----

/// A parsed integer: its sign and magnitude (`None` past `u128`).
#[derive(Debug, Clone, Copy)]
struct PyInt {
    negative: bool,
    magnitude: Option<u128>,
}

/// Reads digits of `base` with Python's underscore rule (single `_` between digits; a leading
/// `_` only when `lead_underscore`, i.e. right after a base prefix).
fn py_digits(s: &str, base: u32, lead_underscore: bool) -> Option<Option<u128>> {
    let mut value: Option<u128> = Some(0);
    let mut any = false;
    let mut prev_underscore = false;
    for (i, c) in s.chars().enumerate() {
        if c == '_' {
            if prev_underscore || (i == 0 && !lead_underscore) {
                return None;
            }
            prev_underscore = true;
            continue;
        }
        let d = c.to_digit(base)?;
        any = true;
        prev_underscore = false;
        value = value.and_then(|v| v.checked_mul(u128::from(base))?.checked_add(u128::from(d)));
    }
    if !any || prev_underscore {
        return None;
    }
    Some(value)
}

fn split_sign(s: &str) -> (bool, &str) {
    if let Some(r) = s.strip_prefix('-') {
        (true, r)
    } else {
        (false, s.strip_prefix('+').unwrap_or(s))
    }
}

/// Python `int(s, 0)`.
fn py_int_auto(s: &str) -> Option<PyInt> {
    let (negative, s) = split_sign(s);
    let b = s.as_bytes();
    let magnitude = if b.len() >= 2 && b[0] == b'0' && b[1].is_ascii_alphabetic() {
        let base = match b[1] {
            b'x' | b'X' => 16,
            b'o' | b'O' => 8,
            b'b' | b'B' => 2,
            _ => return None,
        };
        py_digits(&s[2..], base, true)?
    } else {
        let m = py_digits(s, 10, false)?;
        // Decimal with a leading zero must be all zeros.
        if s.starts_with('0') && m != Some(0) {
            return None;
        }
        m
    };
    Some(PyInt { negative, magnitude })
}

/// Python `int(s)` (base 10: leading zeros allowed).
fn py_int_dec(s: &str) -> Option<PyInt> {
    let (negative, s) = split_sign(s);
    Some(PyInt { negative, magnitude: py_digits(s, 10, false)? })
}

/// Python `int(s, 16)` (an optional `0x` prefix is allowed).
fn py_int_hex(s: &str) -> Option<PyInt> {
    let (negative, s) = split_sign(s);
    let magnitude = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(r) => py_digits(r, 16, true)?,
        None => py_digits(s, 16, false)?,
    };
    Some(PyInt { negative, magnitude })
}

/// An unsigned value no larger than `max`, from a Python integer.
fn unsigned(n: PyInt, text: &str, max: u128) -> Result<u128, CliError> {
    match n.magnitude {
        Some(0) => Ok(0),
        _ if n.negative => {
            Err(CliError::new(ErrorKind::OutOfRange, format!("`{text}` is negative")))
        }
        Some(m) if m <= max => Ok(m),
        _ => Err(CliError::new(ErrorKind::OutOfRange, format!("`{text}` is larger than {max}"))),
    }
}

/// A decimal (Python `int()`) unsigned integer no larger than `max`, for the argument `what`.
fn dec_arg(text: &str, what: &str, max: u128) -> Result<u128, CliError> {
    let n = py_int_dec(text).ok_or_else(|| {
        CliError::new(
            ErrorKind::BadNumber,
            format!("bad {what} `{text}`: expected a decimal integer"),
        )
    })?;
    unsigned(n, text, max).map_err(|e| e.context(&format!("bad {what}")))
}

/// An unsigned integer in Python `int(x, 0)` syntax (or decimal with leading zeros), no larger
/// than `max`.
fn auto_arg(text: &str, what: &str, max: u128) -> Result<u128, CliError> {
    let n = py_int_auto(text).or_else(|| py_int_dec(text)).ok_or_else(|| {
        CliError::new(
            ErrorKind::BadNumber,
            format!("bad {what} `{text}`: expected an integer (decimal, 0x, 0o or 0b)"),
        )
    })?;
    unsigned(n, text, max).map_err(|e| e.context(&format!("bad {what}")))
}

fn u32_arg(text: &str, what: &str) -> Result<u32, CliError> {
    dec_arg(text, what, u128::from(u32::MAX)).map(|v| v as u32)
}

fn u16_arg(text: &str, what: &str) -> Result<u16, CliError> {
    dec_arg(text, what, u128::from(u16::MAX)).map(|v| v as u16)
}

fn u64_arg(text: &str, what: &str) -> Result<u64, CliError> {
    dec_arg(text, what, u128::from(u64::MAX)).map(|v| v as u64)
}

// ---- values (BMv2's `parse_param`) ----

fn check_width(width: u32) -> Result<(), CliError> {
    if width == 0 || width > 128 {
        return Err(CliError::new(
            ErrorKind::BadWidth,
            format!("field width {width} is not in 1..=128"),
        ));
    }
    Ok(())
}

fn width_mask(width: u32) -> u128 {
    if width >= 128 { u128::MAX } else { (1u128 << width) - 1 }
}

fn ipv4(text: &str) -> Result<u128, CliError> {
    let bad =
        || CliError::new(ErrorKind::BadValue, format!("`{text}` is not a valid IPv4 address"));
    let parts: Vec<&str> = text.split('.').collect();
    if parts.len() != 4 {
        return Err(bad());
    }
    let mut v = 0u128;
    for p in parts {
        let n = py_int_dec(p).ok_or_else(bad)?;
        let b = unsigned(n, p, 255).map_err(|_| bad())?;
        v = v << 8 | b;
    }
    Ok(v)
}

fn mac(text: &str) -> Result<u128, CliError> {
    let bad = || CliError::new(ErrorKind::BadValue, format!("`{text}` is not a valid MAC address"));
    let parts: Vec<&str> = text.split(':').collect();
    if parts.len() != 6 {
        return Err(bad());
    }
    let mut v = 0u128;
    for p in parts {
        let n = py_int_hex(p).ok_or_else(bad)?;
        let b = unsigned(n, p, 255).map_err(|_| bad())?;
        v = v << 8 | b;
    }
    Ok(v)
}

/// The value BMv2's CLI reads from `text` for a field of `width` bits, before masking: the
/// number, an error past `width` rounded up to whole bytes.
fn raw_value(text: &str, width: u32) -> Result<u128, CliError> {
    check_width(width)?;
    match width {
        32 if text.contains('.') => return ipv4(text),
        48 if text.contains(':') => return mac(text),
        128 if text.contains(':') => {
            return text.parse::<Ipv6Addr>().map(u128::from).map_err(|_| {
                CliError::new(ErrorKind::BadValue, format!("`{text}` is not a valid IPv6 address"))
            });
        }
        _ => {}
    }
    let n = py_int_auto(text).ok_or_else(|| {
        CliError::new(
            ErrorKind::BadNumber,
            format!("`{text}` is not an integer (decimal, 0x, 0o or 0b){}", forms(width)),
        )
    })?;
    let bytes = width.div_ceil(8);
    match n.magnitude {
        Some(0) => Ok(0),
        _ if n.negative => Err(CliError::new(
            ErrorKind::OutOfRange,
            format!("`{text}` is negative (a bit<{width}> value cannot be)"),
        )),
        Some(m) if m <= width_mask(bytes * 8) => Ok(m),
        _ => Err(CliError::new(
            ErrorKind::OutOfRange,
            format!("`{text}` does not fit in {bytes} byte(s) (a {width}-bit field)"),
        )),
    }
}

fn forms(width: u32) -> &'static str {
    match width {
        32 => " or an IPv4 address",
        48 => " or a MAC address",
        128 => " or an IPv6 address",
        _ => "",
    }
}

/// An action parameter (or any plain value) of `width` bits as BMv2's CLI reads it: an integer
/// in Python `int(x, 0)` syntax, or for widths 32 / 48 / 128 an IPv4 / MAC / IPv6 address. Errors
/// when the value does not fit the width rounded up to whole bytes, or is negative; bits above
/// the width are dropped (see the module documentation).
pub fn param_value(text: &str, width: u32) -> Result<u128, CliError> {
    Ok(raw_value(text, width)? & width_mask(width))
}

fn split2<'a>(text: &'a str, sep: &str, form: &str) -> Result<(&'a str, &'a str), CliError> {
    let mut it = text.split(sep);
    match (it.next(), it.next(), it.next()) {
        (Some(a), Some(b), None) => Ok((a, b)),
        _ => Err(CliError::new(
            ErrorKind::BadValue,
            format!("`{text}` is not of the form {form} (exactly one `{sep}`)"),
        )),
    }
}

/// A key field's text read for its match kind and width (see the module documentation for the
/// forms): `VALUE` (exact), `VALUE&&&MASK` (ternary), `VALUE/LEN` (lpm), `LO->HI` (range),
/// `VALUE` or `VALUE&&&MASK` with an all-ones or zero mask (optional). Values read as
/// [`param_value`] does.
pub fn key_match(text: &str, kind: MatchKind, width: u32) -> Result<FieldMatch, CliError> {
    check_width(width)?;
    key_match_inner(text, kind, width).map_err(|e| {
        if e.message.contains(&format!("`{text}`")) {
            e
        } else {
            e.context(&format!("key `{text}`"))
        }
    })
}

fn key_match_inner(text: &str, kind: MatchKind, width: u32) -> Result<FieldMatch, CliError> {
    let m = width_mask(width);
    let r = match kind {
        MatchKind::Exact => FieldMatch::Exact(param_value(text, width)?),
        MatchKind::Ternary => {
            let (v, k) = split2(text, "&&&", "VALUE&&&MASK")?;
            FieldMatch::Ternary { value: param_value(v, width)?, mask: param_value(k, width)? }
        }
        MatchKind::Lpm => {
            let (v, l) = split2(text, "/", "VALUE/LEN")?;
            let len = dec_arg(l, "prefix length", u128::from(width))? as u32;
            FieldMatch::Lpm { value: param_value(v, width)?, len }
        }
        MatchKind::Range => {
            let (lo, hi) = split2(text, "->", "LO->HI")?;
            let (lo, hi) = (raw_value(lo, width)?, raw_value(hi, width)?);
            if lo > hi || lo & m > hi & m {
                return Err(CliError::new(
                    ErrorKind::OutOfRange,
                    format!("range `{text}`: the start is greater than the end"),
                ));
            }
            FieldMatch::Range { lo: lo & m, hi: hi & m }
        }
        MatchKind::Optional => {
            if !text.contains("&&&") {
                FieldMatch::Optional(Some(param_value(text, width)?))
            } else {
                let (v, k) = split2(text, "&&&", "VALUE&&&MASK")?;
                let (v, k) = (param_value(v, width)?, param_value(k, width)?);
                if k == 0 {
                    FieldMatch::Optional(None)
                } else if k == m {
                    FieldMatch::Optional(Some(v))
                } else {
                    return Err(CliError::new(
                        ErrorKind::BadValue,
                        format!(
                            "optional key `{text}`: the mask must be all ones (exact) or 0 \
                             (wildcard)"
                        ),
                    ));
                }
            }
        }
    };
    Ok(r)
}

/// A key field written back in the CLI syntax, the values in hex: `key_match(&key_text(m), kind,
/// width)` gives `m` back for the kind `m` is of and any width its values fit.
pub fn key_text(m: &FieldMatch) -> String {
    match *m {
        FieldMatch::Exact(v) | FieldMatch::Optional(Some(v)) => format!("{v:#x}"),
        FieldMatch::Ternary { value, mask } => format!("{value:#x}&&&{mask:#x}"),
        FieldMatch::Lpm { value, len } => format!("{value:#x}/{len}"),
        FieldMatch::Range { lo, hi } => format!("{lo:#x}->{hi:#x}"),
        FieldMatch::Optional(None) => "0&&&0".to_string(),
    }
}

/// Takes the priority off the end of a `table_add`'s `params` when the table has one (a table
/// whose match type is ternary or range, i.e. with a ternary, optional or range key field), as
/// BMv2's CLI does: the last token, a Python `int()` (decimal, optional sign). Returns the action
/// parameters and the priority (`None` when `has_priority` is false).
pub fn split_priority(
    params: &[String],
    has_priority: bool,
) -> Result<(&[String], Option<i32>), CliError> {
    if !has_priority {
        return Ok((params, None));
    }
    let Some((last, rest)) = params.split_last() else {
        return Err(CliError::new(
            ErrorKind::Arguments,
            "the table needs a priority after the action parameters",
        ));
    };
    let n = py_int_dec(last).ok_or_else(|| {
        CliError::new(
            ErrorKind::BadNumber,
            format!("bad priority `{last}`: expected a decimal integer"),
        )
    })?;
    let p = match n.magnitude {
        Some(m) if !n.negative && m <= i32::MAX as u128 => m as i32,
        Some(m) if n.negative && m <= 1u128 << 31 => (m as i64).wrapping_neg() as i32,
        _ => {
            return Err(CliError::new(
                ErrorKind::OutOfRange,
                format!("bad priority `{last}`: not a 32-bit integer"),
            ));
        }
    };
    Ok((rest, Some(p)))
}

// ---- commands ----

fn rate(text: &str) -> Result<MeterRate, CliError> {
    let bad =
        |why: &str| CliError::new(ErrorKind::BadValue, format!("bad meter rate `{text}`: {why}"));
    let (r, b) = split2(text, ":", "RATE:BURST").map_err(|_| bad("expected RATE:BURST"))?;
    let rate: f64 = r.parse().map_err(|_| bad("the rate is not a number"))?;
    if !rate.is_finite() || rate < 0.0 {
        return Err(CliError::new(
            ErrorKind::OutOfRange,
            format!("bad meter rate `{text}`: the rate must be finite and not negative"),
        ));
    }
    let burst = u32_arg(b, "burst size").map_err(|e| e.context(&format!("meter rate `{text}`")))?;
    // -0.0 prints as "-0"; keep one zero.
    Ok(MeterRate { rate: if rate == 0.0 { 0.0 } else { rate }, burst })
}

/// Python `parse_bool` of runtime_CLI: `true`/`True`/`false`/`False` or an integer (non-zero is
/// true).
fn boolean(text: &str, what: &str) -> Result<bool, CliError> {
    match text {
        "true" | "True" => Ok(true),
        "false" | "False" => Ok(false),
        _ => match py_int_auto(text) {
            Some(n) => Ok(n.magnitude != Some(0)),
            None => Err(CliError::new(
                ErrorKind::BadValue,
                format!("bad {what} `{text}`: expected true or false"),
            )),
        },
    }
}

/// Ports (or LAGs): non-negative decimal integers, duplicates an error, sorted.
fn port_list(args: &[&str], what: &str) -> Result<Vec<u32>, CliError> {
    let mut v = Vec::with_capacity(args.len());
    for a in args {
        v.push(u32_arg(a, what)?);
    }
    v.sort_unstable();
    if let Some(w) = v.windows(2).find(|w| w[0] == w[1]) {
        return Err(CliError::new(ErrorKind::BadValue, format!("duplicate {what} {}", w[0])));
    }
    Ok(v)
}

/// `PORT... [| LAG...]`.
fn ports_and_lags(args: &[&str]) -> Result<(Vec<u32>, Vec<u32>), CliError> {
    match args.iter().position(|a| *a == "|") {
        Some(i) => Ok((port_list(&args[..i], "port")?, port_list(&args[i + 1..], "lag")?)),
        None => Ok((port_list(args, "port")?, Vec::new())),
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn exactly(cmd: &str, args: &[&str], n: usize, usage: &str) -> Result<(), CliError> {
    if args.len() != n {
        return Err(CliError::new(
            ErrorKind::Arguments,
            format!("{cmd} takes {n} argument(s), got {}: usage: {cmd} {usage}", args.len()),
        ));
    }
    Ok(())
}

fn at_least(cmd: &str, args: &[&str], n: usize, usage: &str) -> Result<(), CliError> {
    if args.len() < n {
        return Err(CliError::new(
            ErrorKind::Arguments,
            format!(
                "{cmd} takes at least {n} argument(s), got {}: usage: {cmd} {usage}",
                args.len()
            ),
        ));
    }
    Ok(())
}

fn at_most(cmd: &str, args: &[&str], n: usize, usage: &str) -> Result<(), CliError> {
    if args.len() > n {
        return Err(CliError::new(
            ErrorKind::Arguments,
            format!(
                "{cmd} takes at most {n} argument(s), got {}: usage: {cmd} {usage}",
                args.len()
            ),
        ));
    }
    Ok(())
}

fn parse_tokens(cmd: &str, a: &[&str]) -> Result<Command, CliError> {
    let s = |i: usize| a[i].to_string();
    let c = match cmd {
        "table_add" => {
            at_least(cmd, a, 3, "TABLE ACTION KEY... => PARAM... [PRIORITY]")?;
            let Some(arrow) = a[2..].iter().position(|t| *t == "=>") else {
                return Err(CliError::new(
                    ErrorKind::Arguments,
                    "table_add: missing `=>` between the key and the action parameters",
                ));
            };
            Command::TableAdd {
                table: s(0),
                action: s(1),
                keys: strings(&a[2..2 + arrow]),
                params: strings(&a[3 + arrow..]),
            }
        }
        "act_prof_create_member" => {
            at_least(cmd, a, 2, "PROFILE ACTION PARAM...")?;
            Command::ActProfCreateMember { profile: s(0), action: s(1), params: strings(&a[2..]) }
        }
        "act_prof_delete_member" => {
            exactly(cmd, a, 2, "PROFILE MEMBER")?;
            Command::ActProfDeleteMember { profile: s(0), member: u32_arg(a[1], "member")? }
        }
        "act_prof_create_group" => {
            exactly(cmd, a, 1, "PROFILE")?;
            Command::ActProfCreateGroup { profile: s(0) }
        }
        "act_prof_delete_group" => {
            exactly(cmd, a, 2, "PROFILE GROUP")?;
            Command::ActProfDeleteGroup { profile: s(0), group: u32_arg(a[1], "group")? }
        }
        "act_prof_add_member_to_group" | "act_prof_remove_member_from_group" => {
            exactly(cmd, a, 3, "PROFILE MEMBER GROUP")?;
            let (profile, member, group) =
                (s(0), u32_arg(a[1], "member")?, u32_arg(a[2], "group")?);
            if cmd == "act_prof_add_member_to_group" {
                Command::ActProfAddMemberToGroup { profile, member, group }
            } else {
                Command::ActProfRemoveMemberFromGroup { profile, member, group }
            }
        }
        "table_indirect_add" | "table_indirect_add_with_group" => {
            at_least(cmd, a, 3, "TABLE KEY... => MEMBER|GROUP [PRIORITY]")?;
            let Some(arrow) = a[1..].iter().position(|t| *t == "=>") else {
                return Err(CliError::new(
                    ErrorKind::Arguments,
                    format!("{cmd}: missing `=>` before the member or group"),
                ));
            };
            let rest = &a[2 + arrow..];
            if rest.is_empty() || rest.len() > 2 {
                return Err(CliError::new(
                    ErrorKind::Arguments,
                    format!(
                        "{cmd}: `=>` is followed by a member or group and an optional priority"
                    ),
                ));
            }
            let priority = match rest.get(1) {
                Some(p) => Some(p.parse::<i32>().map_err(|_| {
                    CliError::new(ErrorKind::BadNumber, format!("bad priority {p}"))
                })?),
                None => None,
            };
            Command::TableIndirectAdd {
                table: s(0),
                keys: strings(&a[1..1 + arrow]),
                target: u32_arg(rest[0], "member or group")?,
                group: cmd.ends_with("_with_group"),
                priority,
            }
        }
        "table_indirect_set_default" | "table_indirect_set_default_with_group" => {
            exactly(cmd, a, 2, "TABLE MEMBER|GROUP")?;
            Command::TableIndirectSetDefault {
                table: s(0),
                target: u32_arg(a[1], "member or group")?,
                group: cmd.ends_with("_with_group"),
            }
        }
        "pvs_add" => {
            exactly(cmd, a, 2, "NAME VALUE[&&&MASK]")?;
            Command::PvsAdd { name: s(0), value: s(1) }
        }
        "pvs_clear" => {
            exactly(cmd, a, 1, "NAME")?;
            Command::PvsClear { name: s(0) }
        }
        "table_delete" => {
            exactly(cmd, a, 2, "TABLE HANDLE")?;
            Command::TableDelete { table: s(0), handle: u32_arg(a[1], "entry handle")? }
        }
        "table_set_timeout" => {
            exactly(cmd, a, 3, "TABLE HANDLE MS")?;
            Command::TableSetTimeout {
                table: s(0),
                handle: u32_arg(a[1], "entry handle")?,
                ms: u32_arg(a[2], "timeout")?,
            }
        }
        "table_modify" => {
            at_least(cmd, a, 3, "TABLE ACTION HANDLE [=>] PARAM...")?;
            let skip = if a.get(3) == Some(&"=>") { 4 } else { 3 };
            Command::TableModify {
                table: s(0),
                action: s(1),
                handle: u32_arg(a[2], "entry handle")?,
                params: strings(&a[skip..]),
            }
        }
        "table_set_default" => {
            at_least(cmd, a, 2, "TABLE ACTION PARAM...")?;
            Command::TableSetDefault { table: s(0), action: s(1), params: strings(&a[2..]) }
        }
        "table_reset_default" => {
            exactly(cmd, a, 1, "TABLE")?;
            Command::TableResetDefault { table: s(0) }
        }
        "table_clear" => {
            exactly(cmd, a, 1, "TABLE")?;
            Command::TableClear { table: s(0) }
        }
        "table_dump" => {
            exactly(cmd, a, 1, "TABLE")?;
            Command::TableDump { table: s(0) }
        }
        "table_dump_entry" => {
            exactly(cmd, a, 2, "TABLE HANDLE")?;
            Command::TableDumpEntry { table: s(0), handle: u32_arg(a[1], "entry handle")? }
        }
        "table_num_entries" => {
            exactly(cmd, a, 1, "TABLE")?;
            Command::TableNumEntries { table: s(0) }
        }
        "table_info" => {
            exactly(cmd, a, 1, "TABLE")?;
            Command::TableInfo { table: s(0) }
        }
        "counter_read" => {
            exactly(cmd, a, 2, "NAME INDEX")?;
            Command::CounterRead { name: s(0), index: u32_arg(a[1], "index")? }
        }
        "counter_reset" => {
            exactly(cmd, a, 1, "NAME")?;
            Command::CounterReset { name: s(0) }
        }
        "counter_write" => {
            exactly(cmd, a, 4, "NAME INDEX PACKETS BYTES")?;
            Command::CounterWrite {
                name: s(0),
                index: u32_arg(a[1], "index")?,
                packets: u64_arg(a[2], "packet count")?,
                bytes: u64_arg(a[3], "byte count")?,
            }
        }
        "register_read" => {
            at_least(cmd, a, 1, "NAME [INDEX]")?;
            at_most(cmd, a, 2, "NAME [INDEX]")?;
            let index = a.get(1).map(|i| u32_arg(i, "index")).transpose()?;
            Command::RegisterRead { name: s(0), index }
        }
        "register_write" => {
            exactly(cmd, a, 3, "NAME INDEX VALUE")?;
            Command::RegisterWrite {
                name: s(0),
                index: u32_arg(a[1], "index")?,
                value: auto_arg(a[2], "register value", u128::MAX)?,
            }
        }
        "register_reset" => {
            exactly(cmd, a, 1, "NAME")?;
            Command::RegisterReset { name: s(0) }
        }
        "meter_set_rates" => {
            at_least(cmd, a, 2, "NAME INDEX RATE:BURST...")?;
            Command::MeterSetRates {
                name: s(0),
                index: u32_arg(a[1], "index")?,
                rates: a[2..].iter().map(|r| rate(r)).collect::<Result<_, _>>()?,
            }
        }
        "meter_get_rates" => {
            exactly(cmd, a, 2, "NAME INDEX")?;
            Command::MeterGetRates { name: s(0), index: u32_arg(a[1], "index")? }
        }
        "meter_array_set_rates" => {
            at_least(cmd, a, 1, "NAME RATE:BURST...")?;
            Command::MeterArraySetRates {
                name: s(0),
                rates: a[1..].iter().map(|r| rate(r)).collect::<Result<_, _>>()?,
            }
        }
        "mc_mgrp_create" => {
            exactly(cmd, a, 1, "MGRP")?;
            Command::McMgrpCreate { mgrp: u16_arg(a[0], "multicast group id")? }
        }
        "mc_mgrp_destroy" => {
            exactly(cmd, a, 1, "MGRP")?;
            Command::McMgrpDestroy { mgrp: u16_arg(a[0], "multicast group id")? }
        }
        "mc_node_create" => {
            at_least(cmd, a, 1, "RID PORT... [| LAG...]")?;
            let rid = u16_arg(a[0], "rid")?;
            let (ports, lags) = ports_and_lags(&a[1..])?;
            Command::McNodeCreate { rid, ports, lags }
        }
        "mc_node_update" => {
            at_least(cmd, a, 2, "HANDLE PORT... [| LAG...]")?;
            let handle = u32_arg(a[0], "node handle")?;
            let (ports, lags) = ports_and_lags(&a[1..])?;
            Command::McNodeUpdate { handle, ports, lags }
        }
        "mc_node_associate" | "mc_node_dissociate" => {
            exactly(cmd, a, 2, "MGRP HANDLE")?;
            let mgrp = u16_arg(a[0], "multicast group id")?;
            let handle = u32_arg(a[1], "node handle")?;
            if cmd == "mc_node_associate" {
                Command::McNodeAssociate { mgrp, handle }
            } else {
                Command::McNodeDissociate { mgrp, handle }
            }
        }
        "mc_node_destroy" => {
            exactly(cmd, a, 1, "HANDLE")?;
            Command::McNodeDestroy { handle: u32_arg(a[0], "node handle")? }
        }
        "mc_dump" => {
            exactly(cmd, a, 0, "")?;
            Command::McDump
        }
        "mirroring_add" => {
            exactly(cmd, a, 2, "SESSION PORT")?;
            Command::MirroringAdd {
                session: u32_arg(a[0], "mirror id")?,
                port: u32_arg(a[1], "egress port")?,
            }
        }
        "mirroring_add_mc" => {
            exactly(cmd, a, 2, "SESSION MGRP")?;
            Command::MirroringAddMc {
                session: u32_arg(a[0], "mirror id")?,
                mgrp: u16_arg(a[1], "multicast group id")?,
            }
        }
        "mirroring_delete" => {
            exactly(cmd, a, 1, "SESSION")?;
            Command::MirroringDelete { session: u32_arg(a[0], "mirror id")? }
        }
        "mirroring_get" => {
            exactly(cmd, a, 1, "SESSION")?;
            Command::MirroringGet { session: u32_arg(a[0], "mirror id")? }
        }
        "set_crc16_parameters" => {
            exactly(cmd, a, 6, "NAME POLY INIT XOR REFLECT_DATA REFLECT_REMAINDER")?;
            let v = |i: usize, what: &str| auto_arg(a[i], what, 0xffff).map(|v| v as u16);
            Command::SetCrc16Parameters {
                name: s(0),
                polynomial: v(1, "polynomial")?,
                initial: v(2, "initial remainder")?,
                final_xor: v(3, "final xor value")?,
                reflect_data: boolean(a[4], "reflect data flag")?,
                reflect_remainder: boolean(a[5], "reflect remainder flag")?,
            }
        }
        "set_crc32_parameters" => {
            exactly(cmd, a, 6, "NAME POLY INIT XOR REFLECT_DATA REFLECT_REMAINDER")?;
            let v = |i: usize, what: &str| auto_arg(a[i], what, 0xffff_ffff).map(|v| v as u32);
            Command::SetCrc32Parameters {
                name: s(0),
                polynomial: v(1, "polynomial")?,
                initial: v(2, "initial remainder")?,
                final_xor: v(3, "final xor value")?,
                reflect_data: boolean(a[4], "reflect data flag")?,
                reflect_remainder: boolean(a[5], "reflect remainder flag")?,
            }
        }
        "help" => {
            at_most(cmd, a, 1, "[COMMAND]")?;
            Command::Help { topic: a.first().map(|t| t.to_string()) }
        }
        "show_tables" => {
            exactly(cmd, a, 0, "")?;
            Command::ShowTables
        }
        "show_actions" => {
            exactly(cmd, a, 0, "")?;
            Command::ShowActions
        }
        _ if UNSUPPORTED.contains(&cmd) => {
            return Err(CliError::new(
                ErrorKind::UnknownCommand,
                format!("`{cmd}` is a simple_switch_CLI command snic does not support"),
            ));
        }
        _ => {
            return Err(CliError::new(
                ErrorKind::UnknownCommand,
                format!("unknown command `{cmd}`"),
            ));
        }
    };
    Ok(c)
}

/// Parses one line (`line` is its 1-based number, put in errors). `Ok(None)` for a blank or
/// comment-only line; a `#` anywhere starts a comment.
pub fn parse_line(text: &str, line: u32) -> Result<Option<Command>, CliError> {
    let code = text.split('#').next().unwrap_or("");
    let mut tokens = code.split_whitespace();
    let Some(cmd) = tokens.next() else { return Ok(None) };
    let args: Vec<&str> = tokens.collect();
    parse_tokens(cmd, &args).map(Some).map_err(|e| {
        let named = e.kind == ErrorKind::UnknownCommand || e.message.starts_with(cmd);
        if named { e } else { e.context(cmd) }.at(line)
    })
}

/// Parses a whole file: every command with its 1-based line number, blank and comment lines
/// skipped. The first bad line stops it.
pub fn parse_file(text: &str) -> Result<Vec<(u32, Command)>, CliError> {
    let mut out = Vec::new();
    for (i, l) in text.split('\n').enumerate() {
        let n = u32::try_from(i + 1).unwrap_or(u32::MAX);
        if let Some(c) = parse_line(l, n)? {
            out.push((n, c));
        }
    }
    Ok(out)
}

// ---- printing ----

fn join(f: &mut fmt::Formatter<'_>, items: &[String]) -> fmt::Result {
    for i in items {
        write!(f, " {i}")?;
    }
    Ok(())
}

fn ports(f: &mut fmt::Formatter<'_>, ports: &[u32], lags: &[u32], force_bar: bool) -> fmt::Result {
    for p in ports {
        write!(f, " {p}")?;
    }
    if !lags.is_empty() || force_bar {
        f.write_str(" |")?;
        for l in lags {
            write!(f, " {l}")?;
        }
    }
    Ok(())
}

fn rates(f: &mut fmt::Formatter<'_>, rates: &[MeterRate]) -> fmt::Result {
    for r in rates {
        write!(f, " {r}")?;
    }
    Ok(())
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::ActProfCreateMember { profile, action, params } => {
                write!(f, "act_prof_create_member {profile} {action}")?;
                join(f, params)
            }
            Command::ActProfDeleteMember { profile, member } => {
                write!(f, "act_prof_delete_member {profile} {member}")
            }
            Command::ActProfCreateGroup { profile } => write!(f, "act_prof_create_group {profile}"),
            Command::ActProfDeleteGroup { profile, group } => {
                write!(f, "act_prof_delete_group {profile} {group}")
            }
            Command::ActProfAddMemberToGroup { profile, member, group } => {
                write!(f, "act_prof_add_member_to_group {profile} {member} {group}")
            }
            Command::ActProfRemoveMemberFromGroup { profile, member, group } => {
                write!(f, "act_prof_remove_member_from_group {profile} {member} {group}")
            }
            Command::TableIndirectAdd { table, keys, target, group, priority } => {
                write!(f, "table_indirect_add{} {table}", if *group { "_with_group" } else { "" })?;
                join(f, keys)?;
                write!(f, " => {target}")?;
                match priority {
                    Some(p) => write!(f, " {p}"),
                    None => Ok(()),
                }
            }
            Command::TableIndirectSetDefault { table, target, group } => {
                write!(
                    f,
                    "table_indirect_set_default{} {table} {target}",
                    if *group { "_with_group" } else { "" }
                )
            }
            Command::PvsAdd { name, value } => write!(f, "pvs_add {name} {value}"),
            Command::PvsClear { name } => write!(f, "pvs_clear {name}"),
            Command::TableAdd { table, action, keys, params } => {
                write!(f, "table_add {table} {action}")?;
                join(f, keys)?;
                f.write_str(" =>")?;
                join(f, params)
            }
            Command::TableDelete { table, handle } => write!(f, "table_delete {table} {handle}"),
            Command::TableSetTimeout { table, handle, ms } => {
                write!(f, "table_set_timeout {table} {handle} {ms}")
            }
            Command::TableModify { table, action, handle, params } => {
                write!(f, "table_modify {table} {action} {handle} =>")?;
                join(f, params)
            }
            Command::TableSetDefault { table, action, params } => {
                write!(f, "table_set_default {table} {action}")?;
                join(f, params)
            }
            Command::TableResetDefault { table } => write!(f, "table_reset_default {table}"),
            Command::TableClear { table } => write!(f, "table_clear {table}"),
            Command::TableDump { table } => write!(f, "table_dump {table}"),
            Command::TableDumpEntry { table, handle } => {
                write!(f, "table_dump_entry {table} {handle}")
            }
            Command::TableNumEntries { table } => write!(f, "table_num_entries {table}"),
            Command::TableInfo { table } => write!(f, "table_info {table}"),
            Command::CounterRead { name, index } => write!(f, "counter_read {name} {index}"),
            Command::CounterReset { name } => write!(f, "counter_reset {name}"),
            Command::CounterWrite { name, index, packets, bytes } => {
                write!(f, "counter_write {name} {index} {packets} {bytes}")
            }
            Command::RegisterRead { name, index: Some(i) } => write!(f, "register_read {name} {i}"),
            Command::RegisterRead { name, index: None } => write!(f, "register_read {name}"),
            Command::RegisterWrite { name, index, value } => {
                write!(f, "register_write {name} {index} {value}")
            }
            Command::RegisterReset { name } => write!(f, "register_reset {name}"),
            Command::MeterSetRates { name, index, rates: r } => {
                write!(f, "meter_set_rates {name} {index}")?;
                rates(f, r)
            }
            Command::MeterGetRates { name, index } => write!(f, "meter_get_rates {name} {index}"),
            Command::MeterArraySetRates { name, rates: r } => {
                write!(f, "meter_array_set_rates {name}")?;
                rates(f, r)
            }
            Command::McMgrpCreate { mgrp } => write!(f, "mc_mgrp_create {mgrp}"),
            Command::McMgrpDestroy { mgrp } => write!(f, "mc_mgrp_destroy {mgrp}"),
            Command::McNodeCreate { rid, ports: p, lags } => {
                write!(f, "mc_node_create {rid}")?;
                ports(f, p, lags, false)
            }
            Command::McNodeUpdate { handle, ports: p, lags } => {
                write!(f, "mc_node_update {handle}")?;
                // It needs one argument after the handle: an empty update is `HANDLE |`.
                ports(f, p, lags, p.is_empty())
            }
            Command::McNodeAssociate { mgrp, handle } => {
                write!(f, "mc_node_associate {mgrp} {handle}")
            }
            Command::McNodeDissociate { mgrp, handle } => {
                write!(f, "mc_node_dissociate {mgrp} {handle}")
            }
            Command::McNodeDestroy { handle } => write!(f, "mc_node_destroy {handle}"),
            Command::McDump => f.write_str("mc_dump"),
            Command::MirroringAdd { session, port } => {
                write!(f, "mirroring_add {session} {port}")
            }
            Command::MirroringAddMc { session, mgrp } => {
                write!(f, "mirroring_add_mc {session} {mgrp}")
            }
            Command::MirroringDelete { session } => write!(f, "mirroring_delete {session}"),
            Command::MirroringGet { session } => write!(f, "mirroring_get {session}"),
            Command::SetCrc16Parameters {
                name,
                polynomial,
                initial,
                final_xor,
                reflect_data,
                reflect_remainder,
            } => write!(
                f,
                "set_crc16_parameters {name} {polynomial:#x} {initial:#x} {final_xor:#x} \
                 {reflect_data} {reflect_remainder}"
            ),
            Command::SetCrc32Parameters {
                name,
                polynomial,
                initial,
                final_xor,
                reflect_data,
                reflect_remainder,
            } => write!(
                f,
                "set_crc32_parameters {name} {polynomial:#x} {initial:#x} {final_xor:#x} \
                 {reflect_data} {reflect_remainder}"
            ),
            Command::Help { topic: Some(t) } => write!(f, "help {t}"),
            Command::Help { topic: None } => f.write_str("help"),
            Command::ShowTables => f.write_str("show_tables"),
            Command::ShowActions => f.write_str("show_actions"),
        }
    }
}
