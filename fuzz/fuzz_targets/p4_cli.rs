//! Fuzz target `p4_cli`: `snic_p4::cli::parse_file` on arbitrary text (BMv2 `simple_switch_CLI`
//! command lines), then the value conversions the executor runs on what parsed.
//!
//! Layout: the first two bytes seed a small generator of field widths (0..=130, so the invalid
//! widths 0 and > 128 are hit too) and match kinds; the rest is the text (non-UTF-8 inputs are
//! skipped). Checks:
//!
//! - line numbers strictly increase and lie inside the text; an error names a line inside it;
//! - every command's `Display` re-parses (`parse_line`) to the same command;
//! - for every `table_add`, each key is read with `key_match` at a generated width and kind, and
//!   a key that reads prints back (`key_text`) to text that reads to the same match; each
//!   parameter is read with `param_value` and lies under the width; `split_priority` either way;
//! - the same conversions on `table_modify` / `table_set_default` parameters.
//!
//! Any panic is a bug: arbitrary text must give `Ok` or a `CliError`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_p4::cli::{
    Command, key_match, key_text, param_value, parse_file, parse_line, split_priority,
};
use snic_p4::table::MatchKind;

struct Gen(u32);

impl Gen {
    fn next(&mut self) -> u32 {
        // xorshift32 (never zero: the seed is or-ed with 1).
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0
    }

    fn width(&mut self) -> u32 {
        // Mostly the widths with address forms, else anything in 0..=130.
        match self.next() % 8 {
            0 => 32,
            1 => 48,
            2 => 128,
            _ => self.next() % 131,
        }
    }

    fn kind(&mut self) -> MatchKind {
        [
            MatchKind::Exact,
            MatchKind::Ternary,
            MatchKind::Lpm,
            MatchKind::Range,
            MatchKind::Optional,
        ][(self.next() % 5) as usize]
    }
}

fn params(g: &mut Gen, params: &[String]) {
    for p in params {
        let w = g.width();
        if let Ok(v) = param_value(p, w) {
            assert!(w >= 1 && w <= 128, "{p:?} read at width {w}");
            assert!(w == 128 || v >> w == 0, "{p:?} at width {w} gave {v:#x}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let (seed, text) = match data {
        [a, b, rest @ ..] => (u32::from(*a) << 8 | u32::from(*b), rest),
        _ => (0, data),
    };
    let Ok(s) = std::str::from_utf8(text) else { return };
    let mut g = Gen(seed << 8 | 1);
    let line_count = s.split('\n').count() as u32;
    let cmds = match parse_file(s) {
        Ok(cmds) => cmds,
        Err(e) => {
            let l = e.line.expect("a file error names its line");
            assert!(l >= 1 && l <= line_count, "{e}");
            let _ = e.to_string();
            return;
        }
    };
    let mut last = 0;
    for (n, cmd) in &cmds {
        assert!(*n > last && *n <= line_count, "line {n} after {last}");
        last = *n;
        let printed = cmd.to_string();
        assert_eq!(parse_line(&printed, 1), Ok(Some(cmd.clone())), "{printed:?}");
        match cmd {
            Command::TableAdd { keys, params: p, .. } => {
                for k in keys {
                    let (kind, w) = (g.kind(), g.width());
                    if let Ok(m) = key_match(k, kind, w) {
                        let again = key_text(&m);
                        assert_eq!(key_match(&again, kind, w), Ok(m), "{k:?} -> {again:?}");
                    }
                }
                let has_priority = g.next() % 2 == 0;
                if let Ok((rest, prio)) = split_priority(p, has_priority) {
                    assert_eq!(prio.is_some(), has_priority);
                    assert_eq!(rest.len() + usize::from(has_priority), p.len());
                    params(&mut g, rest);
                }
            }
            Command::TableModify { params: p, .. } | Command::TableSetDefault { params: p, .. } => {
                params(&mut g, p)
            }
            _ => {}
        }
    }
});
