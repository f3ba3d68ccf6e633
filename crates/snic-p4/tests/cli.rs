//! BMv2 `simple_switch_CLI` command lines: every command, every value syntax, every error, and
//! properties (printing re-parses to the same command; no input panics).

use proptest::prelude::*;
use snic_p4::cli::*;
use snic_p4::table::{FieldMatch, MatchKind};

fn one(text: &str) -> Command {
    match parse_line(text, 1) {
        Ok(Some(c)) => c,
        other => panic!("{text:?}: {other:?}"),
    }
}

fn err(text: &str) -> CliError {
    let e = parse_line(text, 7).expect_err(text);
    assert_eq!(e.line, Some(7), "{text:?}");
    e
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn rt(c: &Command) {
    let text = c.to_string();
    assert_eq!(parse_line(&text, 1), Ok(Some(c.clone())), "{text:?}");
}

// ---- lines, comments, files ----

#[test]
fn blank_and_comment_lines_give_nothing() {
    for l in ["", "   ", "\t\r", "# a comment", "   # indented", "#table_add t a 1 => 2"] {
        assert_eq!(parse_line(l, 1), Ok(None), "{l:?}");
    }
}

#[test]
fn trailing_comment_and_crlf_and_extra_whitespace() {
    assert_eq!(
        one("  table_clear\t ipv4_lpm   # wipe it\r"),
        Command::TableClear { table: "ipv4_lpm".into() }
    );
}

#[test]
fn file_keeps_line_numbers() {
    let text = "# entries\n\ntable_clear t\r\nmc_mgrp_create 1 # group\n\nshow_tables";
    let cmds = parse_file(text).unwrap();
    assert_eq!(
        cmds,
        vec![
            (3, Command::TableClear { table: "t".into() }),
            (4, Command::McMgrpCreate { mgrp: 1 }),
            (6, Command::ShowTables),
        ]
    );
    assert_eq!(parse_file(""), Ok(vec![]));
}

#[test]
fn file_stops_at_first_error_naming_the_line() {
    let e = parse_file("table_clear t\n\nbogus 1\ntable_delete t x").unwrap_err();
    assert_eq!(e.line, Some(3));
    assert_eq!(e.kind, ErrorKind::UnknownCommand);
    assert!(e.to_string().starts_with("line 3: "), "{e}");
    assert!(e.message.contains("bogus"), "{e}");
}

#[test]
fn unknown_and_unsupported_commands() {
    let e = err("frobnicate x");
    assert_eq!(e.kind, ErrorKind::UnknownCommand);
    assert!(e.message.contains("unknown command `frobnicate`"), "{e}");
    let e = err("act_prof_dump p");
    assert_eq!(e.kind, ErrorKind::UnknownCommand);
    assert!(e.message.contains("does not support"), "{e}");
    // Command names are case-sensitive, as in Python's `cmd`.
    assert_eq!(err("TABLE_CLEAR t").kind, ErrorKind::UnknownCommand);
}

// ---- action profiles and value sets ----

#[test]
fn action_profile_and_value_set_commands() {
    assert_eq!(
        one("act_prof_create_member sel set 0xa0 1"),
        Command::ActProfCreateMember {
            profile: "sel".into(),
            action: "set".into(),
            params: s(&["0xa0", "1"])
        }
    );
    assert_eq!(
        one("act_prof_add_member_to_group sel 3 4"),
        Command::ActProfAddMemberToGroup { profile: "sel".into(), member: 3, group: 4 }
    );
    assert_eq!(
        one("table_indirect_add_with_group t 1 0x0a&&&0xff => 7 10"),
        Command::TableIndirectAdd {
            table: "t".into(),
            keys: s(&["1", "0x0a&&&0xff"]),
            target: 7,
            group: true,
            priority: Some(10)
        }
    );
    assert_eq!(
        one("table_indirect_set_default t 2"),
        Command::TableIndirectSetDefault { table: "t".into(), target: 2, group: false }
    );
    assert_eq!(
        one("pvs_add vs 0x30&&&0xf0"),
        Command::PvsAdd { name: "vs".into(), value: "0x30&&&0xf0".into() }
    );
    assert_eq!(err("table_indirect_add t 1 2").kind, ErrorKind::Arguments);
    assert_eq!(err("table_indirect_add t 1 => 2 3 4").kind, ErrorKind::Arguments);
    for c in [
        "act_prof_create_group sel",
        "act_prof_delete_group sel 1",
        "pvs_clear vs",
        "table_indirect_add t 1 => 2",
    ] {
        assert_eq!(one(c).to_string(), c);
    }
}

// ---- table commands ----

#[test]
fn table_add() {
    assert_eq!(
        one("table_add MyIngress.ipv4_lpm ipv4_forward 10.0.0.1/32 => 00:00:00:00:01:01 1"),
        Command::TableAdd {
            table: "MyIngress.ipv4_lpm".into(),
            action: "ipv4_forward".into(),
            keys: s(&["10.0.0.1/32"]),
            params: s(&["00:00:00:00:01:01", "1"]),
        }
    );
    // Ternary with a priority at the end; no parameters; no key.
    assert_eq!(
        one("table_add t a 0x0800&&&0xffff 1->5 => 10"),
        Command::TableAdd {
            table: "t".into(),
            action: "a".into(),
            keys: s(&["0x0800&&&0xffff", "1->5"]),
            params: s(&["10"]),
        }
    );
    assert_eq!(
        one("table_add t NoAction =>"),
        Command::TableAdd {
            table: "t".into(),
            action: "NoAction".into(),
            keys: vec![],
            params: vec![],
        }
    );
    // The first `=>` after the action splits; later ones are parameters.
    assert_eq!(
        one("table_add t a k => => x"),
        Command::TableAdd {
            table: "t".into(),
            action: "a".into(),
            keys: s(&["k"]),
            params: s(&["=>", "x"]),
        }
    );
}

#[test]
fn table_add_errors() {
    let e = err("table_add t a");
    assert_eq!(e.kind, ErrorKind::Arguments);
    assert!(e.message.contains("at least 3"), "{e}");
    let e = err("table_add t a 1 2");
    assert_eq!(e.kind, ErrorKind::Arguments);
    assert!(e.message.contains("missing `=>`"), "{e}");
}

#[test]
fn table_delete_modify_and_default() {
    assert_eq!(one("table_delete t 3"), Command::TableDelete { table: "t".into(), handle: 3 });
    assert_eq!(
        one("table_modify t a 0 => 1 2"),
        Command::TableModify {
            table: "t".into(),
            action: "a".into(),
            handle: 0,
            params: s(&["1", "2"])
        }
    );
    // `=>` is optional for table_modify, and parameters may be absent.
    assert_eq!(one("table_modify t a 0 1 2"), one("table_modify t a 0 => 1 2"));
    assert_eq!(
        one("table_modify t a 4294967295"),
        Command::TableModify {
            table: "t".into(),
            action: "a".into(),
            handle: u32::MAX,
            params: vec![]
        }
    );
    assert_eq!(
        one("table_set_default t drop"),
        Command::TableSetDefault { table: "t".into(), action: "drop".into(), params: vec![] }
    );
    assert_eq!(
        one("table_set_default t fwd 1 0x2"),
        Command::TableSetDefault {
            table: "t".into(),
            action: "fwd".into(),
            params: s(&["1", "0x2"])
        }
    );
    assert_eq!(one("table_reset_default t"), Command::TableResetDefault { table: "t".into() });
}

#[test]
fn table_inspection_commands() {
    assert_eq!(one("table_clear t"), Command::TableClear { table: "t".into() });
    assert_eq!(one("table_dump t"), Command::TableDump { table: "t".into() });
    assert_eq!(
        one("table_dump_entry t 0012"),
        Command::TableDumpEntry { table: "t".into(), handle: 12 }
    );
    assert_eq!(one("table_num_entries t"), Command::TableNumEntries { table: "t".into() });
    assert_eq!(one("table_info t"), Command::TableInfo { table: "t".into() });
}

#[test]
fn table_command_errors() {
    for l in [
        "table_delete t",
        "table_delete t 1 2",
        "table_modify t a",
        "table_set_default t",
        "table_reset_default",
        "table_reset_default t u",
        "table_clear",
        "table_dump t u",
        "table_dump_entry t",
        "table_num_entries",
        "table_info",
    ] {
        assert_eq!(err(l).kind, ErrorKind::Arguments, "{l:?}");
    }
    // Handles are decimal (Python `int()`), unsigned, 32-bit.
    let e = err("table_delete t 0x1");
    assert_eq!(e.kind, ErrorKind::BadNumber);
    assert!(e.message.contains("table_delete: bad entry handle `0x1`"), "{e}");
    assert_eq!(err("table_delete t -1").kind, ErrorKind::OutOfRange);
    assert_eq!(err("table_delete t 4294967296").kind, ErrorKind::OutOfRange);
    assert_eq!(err("table_modify t a x").kind, ErrorKind::BadNumber);
    assert_eq!(err("table_dump_entry t 1_").kind, ErrorKind::BadNumber);
}

// ---- counters, registers, meters ----

#[test]
fn counters() {
    assert_eq!(one("counter_read c 5"), Command::CounterRead { name: "c".into(), index: 5 });
    assert_eq!(one("counter_reset c"), Command::CounterReset { name: "c".into() });
    assert_eq!(
        one("counter_write c 1 18446744073709551615 1_000"),
        Command::CounterWrite { name: "c".into(), index: 1, packets: u64::MAX, bytes: 1000 }
    );
    assert_eq!(err("counter_read c").kind, ErrorKind::Arguments);
    assert_eq!(err("counter_reset").kind, ErrorKind::Arguments);
    assert_eq!(err("counter_write c 1 2").kind, ErrorKind::Arguments);
    let e = err("counter_write c 1 x 2");
    assert!(e.message.contains("packet count"), "{e}");
    let e = err("counter_write c 1 2 18446744073709551616");
    assert_eq!(e.kind, ErrorKind::OutOfRange);
    assert!(e.message.contains("byte count"), "{e}");
    assert_eq!(err("counter_read c a").kind, ErrorKind::BadNumber);
}

#[test]
fn registers() {
    assert_eq!(one("register_read r"), Command::RegisterRead { name: "r".into(), index: None });
    assert_eq!(
        one("register_read r 3"),
        Command::RegisterRead { name: "r".into(), index: Some(3) }
    );
    assert_eq!(
        one("register_write r 3 42"),
        Command::RegisterWrite { name: "r".into(), index: 3, value: 42 }
    );
    // Hex and leading zeros both read (BMv2 itself reads decimal only).
    assert_eq!(one("register_write r 3 0x2A"), one("register_write r 3 042"));
    assert_eq!(
        one("register_write r 0 340282366920938463463374607431768211455"),
        Command::RegisterWrite { name: "r".into(), index: 0, value: u128::MAX }
    );
    assert_eq!(one("register_reset r"), Command::RegisterReset { name: "r".into() });
    assert_eq!(err("register_read").kind, ErrorKind::Arguments);
    assert_eq!(err("register_read r 1 2").kind, ErrorKind::Arguments);
    assert_eq!(err("register_write r 1").kind, ErrorKind::Arguments);
    assert_eq!(err("register_reset").kind, ErrorKind::Arguments);
    assert_eq!(err("register_write r 1 -5").kind, ErrorKind::OutOfRange);
    assert_eq!(err("register_write r 1 0xg").kind, ErrorKind::BadNumber);
    assert_eq!(
        err("register_write r 1 340282366920938463463374607431768211456").kind,
        ErrorKind::OutOfRange
    );
}

#[test]
fn meters() {
    assert_eq!(
        one("meter_set_rates m 2 0.0001:1 .5:1500"),
        Command::MeterSetRates {
            name: "m".into(),
            index: 2,
            rates: vec![MeterRate { rate: 0.0001, burst: 1 }, MeterRate { rate: 0.5, burst: 1500 }],
        }
    );
    assert_eq!(
        one("meter_array_set_rates m 1e-3:10 2:20"),
        Command::MeterArraySetRates {
            name: "m".into(),
            rates: vec![MeterRate { rate: 0.001, burst: 10 }, MeterRate { rate: 2.0, burst: 20 }],
        }
    );
    assert_eq!(one("meter_get_rates m 0"), Command::MeterGetRates { name: "m".into(), index: 0 });
    assert_eq!(err("meter_set_rates m").kind, ErrorKind::Arguments);
    assert_eq!(err("meter_get_rates m").kind, ErrorKind::Arguments);
    assert_eq!(err("meter_array_set_rates").kind, ErrorKind::Arguments);
    for bad in ["1", "1:2:3", "x:1", "1:x", "1:1.5", "1:-1"] {
        let e = err(&format!("meter_set_rates m 0 {bad}"));
        assert!(e.message.contains(&format!("`{bad}`")), "{bad}: {e}");
    }
    for bad in ["inf:1", "nan:1", "-1:1", "1e999:1"] {
        let e = err(&format!("meter_array_set_rates m {bad}"));
        assert_eq!(e.kind, ErrorKind::OutOfRange, "{bad}: {e}");
    }
}

// ---- multicast, mirroring, crc, misc ----

#[test]
fn multicast() {
    assert_eq!(one("mc_mgrp_create 1"), Command::McMgrpCreate { mgrp: 1 });
    assert_eq!(one("mc_mgrp_destroy 65535"), Command::McMgrpDestroy { mgrp: 65535 });
    assert_eq!(
        one("mc_node_create 0 3 1 2"),
        Command::McNodeCreate { rid: 0, ports: vec![1, 2, 3], lags: vec![] }
    );
    assert_eq!(
        one("mc_node_create 7"),
        Command::McNodeCreate { rid: 7, ports: vec![], lags: vec![] }
    );
    assert_eq!(
        one("mc_node_create 7 1 | 4 2"),
        Command::McNodeCreate { rid: 7, ports: vec![1], lags: vec![2, 4] }
    );
    assert_eq!(
        one("mc_node_update 5 2 1"),
        Command::McNodeUpdate { handle: 5, ports: vec![1, 2], lags: vec![] }
    );
    assert_eq!(
        one("mc_node_update 5 |"),
        Command::McNodeUpdate { handle: 5, ports: vec![], lags: vec![] }
    );
    assert_eq!(one("mc_node_associate 1 0"), Command::McNodeAssociate { mgrp: 1, handle: 0 });
    assert_eq!(one("mc_node_dissociate 1 0"), Command::McNodeDissociate { mgrp: 1, handle: 0 });
    assert_eq!(one("mc_node_destroy 9"), Command::McNodeDestroy { handle: 9 });
    assert_eq!(one("mc_dump"), Command::McDump);
}

#[test]
fn multicast_errors() {
    for l in [
        "mc_mgrp_create",
        "mc_mgrp_destroy 1 2",
        "mc_node_create",
        "mc_node_update 5",
        "mc_node_associate 1",
        "mc_node_dissociate 1 2 3",
        "mc_node_destroy",
        "mc_dump x",
    ] {
        assert_eq!(err(l).kind, ErrorKind::Arguments, "{l:?}");
    }
    assert_eq!(err("mc_mgrp_create 65536").kind, ErrorKind::OutOfRange);
    assert_eq!(err("mc_node_create 65536 1").kind, ErrorKind::OutOfRange);
    let e = err("mc_node_create 1 2 x");
    assert!(e.message.contains("bad port `x`"), "{e}");
    let e = err("mc_node_create 1 2 -3");
    assert!(e.message.contains("negative"), "{e}");
    let e = err("mc_node_create 1 2 3 2");
    assert_eq!(e.kind, ErrorKind::BadValue);
    assert!(e.message.contains("duplicate port 2"), "{e}");
    let e = err("mc_node_update 1 2 | 3 3");
    assert!(e.message.contains("duplicate lag 3"), "{e}");
    assert!(err("mc_node_create 1 2 | 3 | 4").message.contains("bad lag `|`"));
    assert_eq!(err("mc_node_associate x 1").kind, ErrorKind::BadNumber);
}

#[test]
fn mirroring() {
    assert_eq!(one("mirroring_add 5 3"), Command::MirroringAdd { session: 5, port: 3 });
    assert_eq!(one("mirroring_add_mc 5 1"), Command::MirroringAddMc { session: 5, mgrp: 1 });
    assert_eq!(one("mirroring_delete 5"), Command::MirroringDelete { session: 5 });
    assert_eq!(one("mirroring_get 5"), Command::MirroringGet { session: 5 });
    for l in ["mirroring_add 5", "mirroring_add_mc 5", "mirroring_delete", "mirroring_get 1 2"] {
        assert_eq!(err(l).kind, ErrorKind::Arguments, "{l:?}");
    }
    assert!(err("mirroring_add x 1").message.contains("mirror id"));
    assert!(err("mirroring_add 1 x").message.contains("egress port"));
}

#[test]
fn crc_parameters() {
    assert_eq!(
        one("set_crc16_parameters calc 0x1021 0xffff 0 false True"),
        Command::SetCrc16Parameters {
            name: "calc".into(),
            polynomial: 0x1021,
            initial: 0xffff,
            final_xor: 0,
            reflect_data: false,
            reflect_remainder: true,
        }
    );
    assert_eq!(
        one("set_crc32_parameters c 0x04C11DB7 4294967295 0xffffffff 1 0"),
        Command::SetCrc32Parameters {
            name: "c".into(),
            polynomial: 0x04c1_1db7,
            initial: u32::MAX,
            final_xor: u32::MAX,
            reflect_data: true,
            reflect_remainder: false,
        }
    );
    assert_eq!(err("set_crc16_parameters c 1 2 3 true").kind, ErrorKind::Arguments);
    assert_eq!(err("set_crc16_parameters c 0x10000 0 0 true true").kind, ErrorKind::OutOfRange);
    assert_eq!(err("set_crc32_parameters c 0x100000000 0 0 true true").kind, ErrorKind::OutOfRange);
    assert_eq!(err("set_crc16_parameters c zz 0 0 true true").kind, ErrorKind::BadNumber);
    let e = err("set_crc32_parameters c 1 0 0 yes true");
    assert_eq!(e.kind, ErrorKind::BadValue);
    assert!(e.message.contains("reflect data flag `yes`"), "{e}");
    assert!(err("set_crc32_parameters c 1 0 0 true TRUE").message.contains("reflect remainder"));
}

#[test]
fn help_and_show() {
    assert_eq!(one("help"), Command::Help { topic: None });
    assert_eq!(one("help table_add"), Command::Help { topic: Some("table_add".into()) });
    assert_eq!(one("show_tables"), Command::ShowTables);
    assert_eq!(one("show_actions"), Command::ShowActions);
    assert_eq!(err("help a b").kind, ErrorKind::Arguments);
    assert_eq!(err("show_tables x").kind, ErrorKind::Arguments);
    assert_eq!(err("show_actions x").kind, ErrorKind::Arguments);
}

#[test]
fn display_examples() {
    let cases = [
        ("table_add t a 1 2&&&3 => 4 5", "table_add t a 1 2&&&3 => 4 5"),
        ("table_modify t a 1 2", "table_modify t a 1 => 2"),
        ("set_crc16_parameters c 4129 0 0 1 0", "set_crc16_parameters c 0x1021 0x0 0x0 true false"),
        ("mc_node_create 1 3 2 | 1", "mc_node_create 1 2 3 | 1"),
        ("mc_node_update 1 |", "mc_node_update 1 |"),
        ("meter_set_rates m 0 0.50:01", "meter_set_rates m 0 0.5:1"),
        ("register_write r 0 0x10", "register_write r 0 16"),
    ];
    for (input, printed) in cases {
        let c = one(input);
        assert_eq!(c.to_string(), printed);
        rt(&c);
    }
}

// ---- values ----

#[test]
fn integers_follow_python_int_base_0() {
    let ok = [
        ("0", 0),
        ("000", 0),
        ("0_0", 0),
        ("-0", 0),
        ("+7", 7),
        ("255", 255),
        ("1_000", 1000),
        ("0x1F", 31),
        ("0XfF", 255),
        ("0x_f", 15),
        ("0o17", 15),
        ("0O17", 15),
        ("0b101", 5),
        ("0B1_1", 3),
    ];
    for (t, v) in ok {
        assert_eq!(param_value(t, 16), Ok(v), "{t}");
    }
    for t in [
        "", "010", "1__0", "_1", "1_", "0x", "0x_", "0x1__2", "0b2", "0o8", "1.5", "x", "--1",
        "+-1", "0y1", "١",
    ] {
        let e = param_value(t, 16).expect_err(t);
        assert_eq!(e.kind, ErrorKind::BadNumber, "{t}: {e}");
        assert_eq!(e.line, None);
    }
}

#[test]
fn negative_values_are_errors() {
    let e = param_value("-1", 8).unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutOfRange);
    assert!(e.message.contains("negative"), "{e}");
    assert!(param_value("-0x10", 8).is_err());
}

#[test]
fn width_rule_is_whole_bytes_then_masked() {
    // 9 bits: two bytes accepted, bits above 9 dropped.
    assert_eq!(param_value("0x1ff", 9), Ok(0x1ff));
    assert_eq!(param_value("0x3ff", 9), Ok(0x1ff));
    assert_eq!(param_value("0xffff", 9), Ok(0x1ff));
    let e = param_value("0x10000", 9).unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutOfRange);
    assert!(e.message.contains("2 byte(s)"), "{e}");
    assert_eq!(param_value("1", 1), Ok(1));
    assert_eq!(param_value("255", 1), Ok(1));
    assert!(param_value("256", 1).is_err());
    assert_eq!(param_value("0xff", 8), Ok(0xff));
    assert!(param_value("0x100", 8).is_err());
    let max = u128::MAX.to_string();
    assert_eq!(param_value(&max, 128), Ok(u128::MAX));
    assert_eq!(param_value(&max, 121), Ok(u128::MAX >> 7));
    assert!(param_value(&max, 120).is_err());
    // Past u128 at all.
    assert!(param_value("340282366920938463463374607431768211456", 128).is_err());
    assert!(param_value(&format!("0x1{}", "0".repeat(40)), 128).is_err());
}

#[test]
fn widths_outside_1_to_128_are_errors() {
    for w in [0, 129, u32::MAX] {
        let e = param_value("1", w).unwrap_err();
        assert_eq!(e.kind, ErrorKind::BadWidth, "{w}");
        assert_eq!(key_match("1", MatchKind::Exact, w).unwrap_err().kind, ErrorKind::BadWidth);
    }
}

#[test]
fn ipv4_at_32_bits_only() {
    assert_eq!(param_value("10.0.0.1", 32), Ok(0x0a00_0001));
    assert_eq!(param_value("255.255.255.255", 32), Ok(0xffff_ffff));
    assert_eq!(param_value("010.000.0.1", 32), Ok(0x0a00_0001));
    assert_eq!(param_value("0x0a000001", 32), Ok(0x0a00_0001));
    for bad in ["10.0.0", "10.0.0.1.2", "256.0.0.1", "1.2.3.x", "1..2.3", "-1.0.0.0"] {
        let e = param_value(bad, 32).unwrap_err();
        assert_eq!(e.kind, ErrorKind::BadValue, "{bad}");
        assert!(e.message.contains("IPv4"), "{e}");
    }
    // At another width the dotted form is not recognised.
    assert_eq!(param_value("10.0.0.1", 31).unwrap_err().kind, ErrorKind::BadNumber);
}

#[test]
fn mac_at_48_bits_only() {
    assert_eq!(param_value("00:11:22:aa:BB:ff", 48), Ok(0x0011_22aa_bbff));
    assert_eq!(param_value("0:1:2:3:4:5", 48), Ok(0x0001_0203_0405));
    assert_eq!(param_value("0x0a:0:0:0:0:1", 48), Ok(0x0a00_0000_0001));
    assert_eq!(param_value("0xffffffffffff", 48), Ok(0xffff_ffff_ffff));
    for bad in
        ["00:11:22:33:44", "00:11:22:33:44:55:66", "100:0:0:0:0:0", "gg:0:0:0:0:0", ":0:0:0:0:0"]
    {
        let e = param_value(bad, 48).unwrap_err();
        assert_eq!(e.kind, ErrorKind::BadValue, "{bad}");
        assert!(e.message.contains("MAC"), "{e}");
    }
    assert_eq!(param_value("00:11:22:33:44:55", 64).unwrap_err().kind, ErrorKind::BadNumber);
}

#[test]
fn ipv6_at_128_bits_only() {
    assert_eq!(param_value("::1", 128), Ok(1));
    assert_eq!(
        param_value("2001:db8::ff00:42:8329", 128),
        Ok(0x2001_0db8_0000_0000_0000_ff00_0042_8329)
    );
    assert_eq!(param_value("::ffff:10.0.0.1", 128), Ok(0xffff_0a00_0001));
    for bad in ["2001:db8::1::2", "fe80::1%eth0", ":::", "12345::"] {
        let e = param_value(bad, 128).unwrap_err();
        assert_eq!(e.kind, ErrorKind::BadValue, "{bad}");
        assert!(e.message.contains("IPv6"), "{e}");
    }
    assert_eq!(param_value("::1", 64).unwrap_err().kind, ErrorKind::BadNumber);
}

// ---- keys ----

#[test]
fn exact_keys() {
    assert_eq!(key_match("0x0800", MatchKind::Exact, 16), Ok(FieldMatch::Exact(0x800)));
    assert_eq!(key_match("10.0.0.1", MatchKind::Exact, 32), Ok(FieldMatch::Exact(0x0a00_0001)));
    assert_eq!(key_match("0x3ff", MatchKind::Exact, 9), Ok(FieldMatch::Exact(0x1ff)));
    assert!(key_match("1&&&1", MatchKind::Exact, 8).is_err());
}

#[test]
fn ternary_keys() {
    assert_eq!(
        key_match("0x0800&&&0xff00", MatchKind::Ternary, 16),
        Ok(FieldMatch::Ternary { value: 0x800, mask: 0xff00 })
    );
    assert_eq!(
        key_match("10.0.0.0&&&255.0.0.0", MatchKind::Ternary, 32),
        Ok(FieldMatch::Ternary { value: 0x0a00_0000, mask: 0xff00_0000 })
    );
    assert_eq!(
        key_match("0xff&&&0xff", MatchKind::Ternary, 4),
        Ok(FieldMatch::Ternary { value: 0xf, mask: 0xf })
    );
    for bad in ["1", "1&&&2&&&3", "&&&1"] {
        let e = key_match(bad, MatchKind::Ternary, 8).unwrap_err();
        assert!(e.message.contains(&format!("`{bad}`")), "{e}");
    }
    let e = key_match("1&&&0x100", MatchKind::Ternary, 8).unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutOfRange);
    assert_eq!(
        key_match("1&&&2", MatchKind::Ternary, 8),
        Ok(FieldMatch::Ternary { value: 1, mask: 2 })
    );
    assert_eq!(key_match("1", MatchKind::Ternary, 8).unwrap_err().kind, ErrorKind::BadValue);
}

#[test]
fn lpm_keys() {
    assert_eq!(
        key_match("10.0.0.0/8", MatchKind::Lpm, 32),
        Ok(FieldMatch::Lpm { value: 0x0a00_0000, len: 8 })
    );
    assert_eq!(
        key_match("2001:db8::/32", MatchKind::Lpm, 128),
        Ok(FieldMatch::Lpm { value: 0x2001_0db8 << 96, len: 32 })
    );
    assert_eq!(key_match("0/0", MatchKind::Lpm, 32), Ok(FieldMatch::Lpm { value: 0, len: 0 }));
    assert_eq!(key_match("0/032", MatchKind::Lpm, 32), Ok(FieldMatch::Lpm { value: 0, len: 32 }));
    let e = key_match("0/33", MatchKind::Lpm, 32).unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutOfRange);
    assert!(e.message.contains("prefix length"), "{e}");
    assert_eq!(key_match("0/x", MatchKind::Lpm, 32).unwrap_err().kind, ErrorKind::BadNumber);
    assert_eq!(key_match("0/0x8", MatchKind::Lpm, 32).unwrap_err().kind, ErrorKind::BadNumber);
    assert_eq!(key_match("0/-1", MatchKind::Lpm, 32).unwrap_err().kind, ErrorKind::OutOfRange);
    assert_eq!(key_match("10.0.0.0", MatchKind::Lpm, 32).unwrap_err().kind, ErrorKind::BadValue);
    assert_eq!(key_match("1/2/3", MatchKind::Lpm, 32).unwrap_err().kind, ErrorKind::BadValue);
}

#[test]
fn range_keys() {
    assert_eq!(key_match("1->0x10", MatchKind::Range, 16), Ok(FieldMatch::Range { lo: 1, hi: 16 }));
    assert_eq!(key_match("5->5", MatchKind::Range, 8), Ok(FieldMatch::Range { lo: 5, hi: 5 }));
    let e = key_match("6->5", MatchKind::Range, 8).unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutOfRange);
    assert!(e.message.contains("greater"), "{e}");
    // Masking to 7 bits would turn 0x7f->0x80 upside down: an error too.
    assert!(key_match("0x7f->0x80", MatchKind::Range, 7).is_err());
    assert_eq!(key_match("5", MatchKind::Range, 8).unwrap_err().kind, ErrorKind::BadValue);
    assert_eq!(key_match("-1->5", MatchKind::Range, 8).unwrap_err().kind, ErrorKind::OutOfRange);
}

#[test]
fn optional_keys() {
    assert_eq!(key_match("5", MatchKind::Optional, 8), Ok(FieldMatch::Optional(Some(5))));
    assert_eq!(key_match("5&&&0xff", MatchKind::Optional, 8), Ok(FieldMatch::Optional(Some(5))));
    assert_eq!(key_match("0&&&0", MatchKind::Optional, 8), Ok(FieldMatch::Optional(None)));
    assert_eq!(key_match("7&&&0", MatchKind::Optional, 8), Ok(FieldMatch::Optional(None)));
    let e = key_match("5&&&0xf0", MatchKind::Optional, 8).unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadValue);
    assert!(e.message.contains("all ones"), "{e}");
    assert!(key_match("5&&&", MatchKind::Optional, 8).is_err());
}

#[test]
fn key_text_reads_back() {
    let cases = [
        (FieldMatch::Exact(0x800), MatchKind::Exact),
        (FieldMatch::Ternary { value: 1, mask: 0xff }, MatchKind::Ternary),
        (FieldMatch::Lpm { value: 0x0a00_0000, len: 8 }, MatchKind::Lpm),
        (FieldMatch::Range { lo: 1, hi: 2 }, MatchKind::Range),
        (FieldMatch::Optional(Some(3)), MatchKind::Optional),
        (FieldMatch::Optional(None), MatchKind::Optional),
    ];
    for (m, k) in cases {
        assert_eq!(key_match(&key_text(&m), k, 32), Ok(m), "{}", key_text(&m));
    }
}

#[test]
fn priority_is_the_last_parameter_when_the_table_has_one() {
    let p = s(&["1", "2", "10"]);
    assert_eq!(split_priority(&p, false), Ok((&p[..], None)));
    assert_eq!(split_priority(&p, true), Ok((&p[..2], Some(10))));
    assert_eq!(split_priority(&s(&["-5"]), true), Ok((&[][..], Some(-5))));
    assert_eq!(split_priority(&s(&["2147483647"]), true).unwrap().1, Some(i32::MAX));
    assert_eq!(split_priority(&s(&["-2147483648"]), true).unwrap().1, Some(i32::MIN));
    assert_eq!(split_priority(&s(&["2147483648"]), true).unwrap_err().kind, ErrorKind::OutOfRange);
    assert_eq!(split_priority(&s(&["0x1"]), true).unwrap_err().kind, ErrorKind::BadNumber);
    let e = split_priority(&[], true).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Arguments);
    assert!(e.message.contains("priority"), "{e}");
    // A whole line: ternary table entry with one parameter and a priority.
    let Command::TableAdd { params, .. } = one("table_add t a 1&&&1 => 9 100") else { panic!() };
    assert_eq!(split_priority(&params, true), Ok((&params[..1], Some(100))));
}

// ---- properties ----

fn name() -> impl Strategy<Value = String> {
    "[A-Za-z_][A-Za-z0-9_.]{0,10}"
}

/// A whitespace-free token without `#` (it would start a comment).
fn token() -> impl Strategy<Value = String> {
    "[!-\"$-~]{1,8}"
}

fn key_token() -> impl Strategy<Value = String> {
    token().prop_filter("`=>` ends the key", |t| t != "=>")
}

fn sorted(v: std::collections::BTreeSet<u32>) -> Vec<u32> {
    v.into_iter().collect()
}

fn meter_rate() -> impl Strategy<Value = MeterRate> {
    (prop_oneof![Just(0.0), 0.0f64..1e9, (0u32..1000).prop_map(f64::from)], any::<u32>())
        .prop_map(|(rate, burst)| MeterRate { rate, burst })
}

fn table_command() -> impl Strategy<Value = Command> {
    let toks = || prop::collection::vec(token(), 0..5);
    prop_oneof![
        (name(), name(), prop::collection::vec(key_token(), 0..4), toks()).prop_map(
            |(table, action, keys, params)| Command::TableAdd { table, action, keys, params }
        ),
        (name(), any::<u32>()).prop_map(|(table, handle)| Command::TableDelete { table, handle }),
        (name(), name(), any::<u32>(), toks()).prop_map(|(table, action, handle, params)| {
            Command::TableModify { table, action, handle, params }
        }),
        (name(), name(), toks()).prop_map(|(table, action, params)| Command::TableSetDefault {
            table,
            action,
            params
        }),
        name().prop_map(|table| Command::TableResetDefault { table }),
        name().prop_map(|table| Command::TableClear { table }),
        name().prop_map(|table| Command::TableDump { table }),
        (name(), any::<u32>())
            .prop_map(|(table, handle)| Command::TableDumpEntry { table, handle }),
        name().prop_map(|table| Command::TableNumEntries { table }),
        name().prop_map(|table| Command::TableInfo { table }),
    ]
}

fn state_command() -> impl Strategy<Value = Command> {
    let rates = || prop::collection::vec(meter_rate(), 0..3);
    prop_oneof![
        (name(), any::<u32>()).prop_map(|(name, index)| Command::CounterRead { name, index }),
        name().prop_map(|name| Command::CounterReset { name }),
        (name(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
            |(name, index, packets, bytes)| Command::CounterWrite { name, index, packets, bytes }
        ),
        (name(), any::<Option<u32>>())
            .prop_map(|(name, index)| Command::RegisterRead { name, index }),
        (name(), any::<u32>(), any::<u128>())
            .prop_map(|(name, index, value)| Command::RegisterWrite { name, index, value }),
        name().prop_map(|name| Command::RegisterReset { name }),
        (name(), any::<u32>(), rates()).prop_map(|(name, index, rates)| Command::MeterSetRates {
            name,
            index,
            rates
        }),
        (name(), any::<u32>()).prop_map(|(name, index)| Command::MeterGetRates { name, index }),
        (name(), rates()).prop_map(|(name, rates)| Command::MeterArraySetRates { name, rates }),
    ]
}

fn other_command() -> impl Strategy<Value = Command> {
    let set = || prop::collection::btree_set(any::<u32>(), 0..4).prop_map(sorted);
    prop_oneof![
        any::<u16>().prop_map(|mgrp| Command::McMgrpCreate { mgrp }),
        any::<u16>().prop_map(|mgrp| Command::McMgrpDestroy { mgrp }),
        (any::<u16>(), set(), set()).prop_map(|(rid, ports, lags)| Command::McNodeCreate {
            rid,
            ports,
            lags
        }),
        (any::<u32>(), set(), set()).prop_map(|(handle, ports, lags)| Command::McNodeUpdate {
            handle,
            ports,
            lags
        }),
        (any::<u16>(), any::<u32>())
            .prop_map(|(mgrp, handle)| Command::McNodeAssociate { mgrp, handle }),
        (any::<u16>(), any::<u32>())
            .prop_map(|(mgrp, handle)| Command::McNodeDissociate { mgrp, handle }),
        any::<u32>().prop_map(|handle| Command::McNodeDestroy { handle }),
        Just(Command::McDump),
        (any::<u32>(), any::<u32>())
            .prop_map(|(session, port)| Command::MirroringAdd { session, port }),
        (any::<u32>(), any::<u16>())
            .prop_map(|(session, mgrp)| Command::MirroringAddMc { session, mgrp }),
    ]
}

fn misc_command() -> impl Strategy<Value = Command> {
    prop_oneof![
        any::<u32>().prop_map(|session| Command::MirroringDelete { session }),
        any::<u32>().prop_map(|session| Command::MirroringGet { session }),
        (name(), any::<[u16; 3]>(), any::<[bool; 2]>()).prop_map(|(name, v, b)| {
            Command::SetCrc16Parameters {
                name,
                polynomial: v[0],
                initial: v[1],
                final_xor: v[2],
                reflect_data: b[0],
                reflect_remainder: b[1],
            }
        }),
        (name(), any::<[u32; 3]>(), any::<[bool; 2]>()).prop_map(|(name, v, b)| {
            Command::SetCrc32Parameters {
                name,
                polynomial: v[0],
                initial: v[1],
                final_xor: v[2],
                reflect_data: b[0],
                reflect_remainder: b[1],
            }
        }),
        proptest::option::of(token()).prop_map(|topic| Command::Help { topic }),
        Just(Command::ShowTables),
        Just(Command::ShowActions),
    ]
}

fn command() -> impl Strategy<Value = Command> {
    prop_oneof![table_command(), state_command(), other_command(), misc_command()]
}

fn kind() -> impl Strategy<Value = MatchKind> {
    prop_oneof![
        Just(MatchKind::Exact),
        Just(MatchKind::Ternary),
        Just(MatchKind::Lpm),
        Just(MatchKind::Range),
        Just(MatchKind::Optional),
    ]
}

/// Soups of command names, values and separators, more likely to reach deep paths than random
/// text.
fn soup() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("table_add".to_string()),
        Just("table_modify".to_string()),
        Just("mc_node_create".to_string()),
        Just("meter_set_rates".to_string()),
        Just("set_crc16_parameters".to_string()),
        Just("register_read".to_string()),
        Just("=>".to_string()),
        Just("|".to_string()),
        Just("#".to_string()),
        Just("\n".to_string()),
        Just("1:2".to_string()),
        Just("true".to_string()),
        "-?[0-9]{1,40}",
        "0[xob][0-9a-fA-F_]{0,10}",
        token(),
    ];
    prop::collection::vec(piece, 0..12).prop_map(|v| v.join(" "))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn printed_commands_parse_back(c in command()) {
        let text = c.to_string();
        prop_assert_eq!(parse_line(&text, 1), Ok(Some(c.clone())), "{:?}", text);
        let file = format!("# header\n{text} # note\n\n{text}\n");
        prop_assert_eq!(parse_file(&file), Ok(vec![(2, c.clone()), (4, c)]));
    }

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        let lines = text.split('\n').count() as u32;
        match parse_file(&text) {
            Ok(cmds) => {
                let mut last = 0;
                for (n, c) in cmds {
                    prop_assert!(n > last && n <= lines);
                    last = n;
                    prop_assert_eq!(parse_line(&c.to_string(), 1), Ok(Some(c)));
                }
            }
            Err(e) => {
                let l = e.line.unwrap();
                prop_assert!(l >= 1 && l <= lines);
                prop_assert!(!e.message.is_empty());
            }
        }
    }

    #[test]
    fn token_soups_never_panic_and_reprint(text in soup()) {
        if let Ok(cmds) = parse_file(&text) {
            for (_, c) in cmds {
                prop_assert_eq!(parse_line(&c.to_string(), 1), Ok(Some(c)));
            }
        }
    }

    #[test]
    fn values_never_panic(text in "\\PC{0,24}", width in 0u32..140, k in kind()) {
        let _ = param_value(&text, width);
        if let Ok(m) = key_match(&text, k, width) {
            prop_assert_eq!(key_match(&key_text(&m), k, width), Ok(m));
        }
    }

    #[test]
    fn integers_read_in_every_radix(v in any::<u128>(), width in 1u32..=128) {
        let bytes = width.div_ceil(8);
        let fits = bytes >= 16 || v >> (bytes * 8) == 0;
        let mask = if width == 128 { u128::MAX } else { (1u128 << width) - 1 };
        for text in [format!("{v}"), format!("{v:#x}"), format!("{v:#X}"), format!("{v:#o}"), format!("{v:#b}")] {
            match param_value(&text, width) {
                Ok(x) => prop_assert!(fits && x == v & mask, "{} at {}", text, width),
                Err(e) => prop_assert!(!fits && e.kind == ErrorKind::OutOfRange, "{}: {}", text, e),
            }
        }
    }

    #[test]
    fn key_forms_read_back(
        a in any::<u128>(),
        b in any::<u128>(),
        width in 1u32..=128,
        len in 0u32..=128,
    ) {
        let mask = if width == 128 { u128::MAX } else { (1u128 << width) - 1 };
        let (a, b) = (a & mask, b & mask);
        let (lo, hi) = (a.min(b), a.max(b));
        let len = len.min(width);
        let cases = [
            (FieldMatch::Exact(a), MatchKind::Exact),
            (FieldMatch::Ternary { value: a, mask: b }, MatchKind::Ternary),
            (FieldMatch::Lpm { value: a, len }, MatchKind::Lpm),
            (FieldMatch::Range { lo, hi }, MatchKind::Range),
            (FieldMatch::Optional(Some(a)), MatchKind::Optional),
            (FieldMatch::Optional(None), MatchKind::Optional),
        ];
        for (m, k) in cases {
            prop_assert_eq!(key_match(&key_text(&m), k, width), Ok(m));
        }
    }
}
