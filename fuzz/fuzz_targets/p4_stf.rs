//! Fuzz target `p4_stf`: `snic_p4::stf::parse` on an arbitrary UTF-8 string (non-UTF-8 inputs
//! are skipped), then everything the judge does with what parsed:
//!
//! - line numbers strictly increase and lie inside the text;
//! - every command's `Display` re-parses (`parse_line`) to the same command;
//! - every `expect` pattern's `Display` re-parses to the same pattern;
//! - every number (key values, action arguments, counter and register values) re-parses from
//!   its `Display` to the same `Number`, and its value, ternary and lpm readings are computed;
//! - the `Expectations` built from the lines receive every `packet` frame on its port, and the
//!   verdict's failures render; a frame matches the pattern built from its own bytes.
//!
//! Any panic is a bug: arbitrary text must give `Ok` or a `ParseError` with a line inside the
//! text and a column of at least 1.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_p4::stf::{Command, ExpectPattern, Expectations, Number, diff, parse, parse_line};

fn reparse_number(n: &Number) {
    let text = format!("register_write r 0 {n}");
    let lines = parse(&text).unwrap_or_else(|e| panic!("number {n} does not re-parse: {e}"));
    match &lines[0].cmd {
        Command::RegisterWrite { value, .. } => assert_eq!(value, n, "{text:?}"),
        c => panic!("{text:?} parsed as {c:?}"),
    }
    let _ = (n.value(), n.ternary(), n.lpm(None), n.to_u128(), n.to_bytes(4));
}

fn reparse_pattern(p: &ExpectPattern) {
    let text = format!("expect 0 {p}");
    let lines = parse(&text).unwrap_or_else(|e| panic!("pattern {p} does not re-parse: {e}"));
    match &lines[0].cmd {
        Command::Expect { pattern, .. } => assert_eq!(pattern, p, "{text:?}"),
        c => panic!("{text:?} parsed as {c:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let line_count = s.split('\n').count() as u32;
    let lines = match parse(s) {
        Ok(lines) => lines,
        Err(e) => {
            assert!(e.line >= 1 && e.line <= line_count && e.col >= 1, "{e:?}");
            return;
        }
    };
    let mut last = 0;
    for l in &lines {
        assert!(l.line > last && l.line <= line_count, "line {} after {last}", l.line);
        last = l.line;
        let text = l.cmd.to_string();
        assert_eq!(parse_line(&text, 1), Ok(Some(l.cmd.clone())), "{text:?}");
        match &l.cmd {
            Command::Expect { pattern, .. } => reparse_pattern(pattern),
            Command::Packet { data, .. } => {
                let nibbles = data.iter().flat_map(|b| [Some(b >> 4), Some(b & 0xf)]).collect();
                let own = ExpectPattern { nibbles, exact: true };
                assert!(own.matches(data));
                assert_eq!(diff(0, &own, data), None);
            }
            Command::Add { keys, action, .. } => {
                for (_, k) in keys {
                    reparse_number(&k.number);
                    let _ = k.number.lpm(k.prefix_len);
                }
                action.args.iter().for_each(|(_, v)| reparse_number(v));
            }
            Command::SetDefault { action, .. } => {
                action.args.iter().for_each(|(_, v)| reparse_number(v))
            }
            Command::RegisterWrite { value, .. } | Command::CheckCounter { value, .. } => {
                reparse_number(value)
            }
            Command::CounterWrite { packets, bytes, .. } => {
                reparse_number(packets);
                reparse_number(bytes);
            }
            _ => {}
        }
    }
    let mut e = Expectations::from_lines(&lines);
    for l in &lines {
        if let Command::Packet { port, data } = &l.cmd {
            e.receive(*port, data);
        }
    }
    for f in e.verdict().failures {
        let _ = f.to_string();
    }
});
