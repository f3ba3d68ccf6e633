//! STF parsing and judging, rule by rule as p4c's BMv2 driver applies them.

use proptest::prelude::*;
use snic_p4::stf::*;

fn one(text: &str) -> Command {
    let lines = parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    assert_eq!(lines.len(), 1, "{text:?}");
    lines.into_iter().next().unwrap().cmd
}

fn err(text: &str) -> ParseError {
    parse(text).expect_err(text)
}

fn n(radix: Radix, digits: &str) -> Number {
    Number {
        radix,
        digits: digits
            .chars()
            .map(|c| if c == '*' { None } else { c.to_digit(16).map(|d| d as u8) })
            .collect(),
    }
}

fn hex(d: &str) -> Number {
    n(Radix::Hex, d)
}

fn dec(d: &str) -> Number {
    n(Radix::Decimal, d)
}

fn pat(text: &str) -> ExpectPattern {
    match one(&format!("expect 0 {text}")) {
        Command::Expect { pattern, .. } => pattern,
        c => panic!("{c:?}"),
    }
}

// ---- lines, comments, case ----

#[test]
fn blank_and_comment_lines_give_nothing_and_lines_keep_their_numbers() {
    let lines = parse("\n# a comment\n   \n\twait  \npacket 1 ab # trailing\r\n").unwrap();
    assert_eq!(
        lines,
        vec![
            Line { line: 4, cmd: Command::Wait },
            Line { line: 5, cmd: Command::Packet { port: 1, data: vec![0xab] } },
        ]
    );
}

#[test]
fn keyword_is_case_insensitive_names_keep_case() {
    assert_eq!(one("PACKET 0 0a"), Command::Packet { port: 0, data: vec![0x0a] });
    assert!(matches!(one("Expect 2 0A"), Command::Expect { port: 2, .. }));
    assert_eq!(
        one("SetDefault Ingress.T NoAction()"),
        Command::SetDefault {
            table: "Ingress.T".into(),
            action: ActionCall { name: "NoAction".into(), args: vec![] }
        }
    );
}

#[test]
fn hash_on_a_data_line_is_a_comment() {
    assert_eq!(one("packet 0 0011 # 2233"), Command::Packet { port: 0, data: vec![0, 0x11] });
    assert_eq!(
        pat("00 ** # $"),
        ExpectPattern { nibbles: vec![Some(0), Some(0), None, None], exact: false }
    );
}

// ---- numbers ----

#[test]
fn numbers_in_decimal_hex_binary_octal_with_wildcards() {
    let Command::RegisterWrite { value, .. } = one("register_write r 0 123") else { panic!() };
    assert_eq!(value, dec("123"));
    let Command::RegisterWrite { value, .. } = one("register_write r 0 0X1f") else { panic!() };
    assert_eq!(value, hex("1f"));
    assert_eq!(value.value(), vec![0x1f]);
    let Command::RegisterWrite { value, .. } = one("register_write r 0 0b1010") else { panic!() };
    assert_eq!(value, n(Radix::Binary, "1010"));
    let Command::RegisterWrite { value, .. } = one("register_write r 0 0o17") else { panic!() };
    assert_eq!(value.to_u128(), Ok(15));
    let Command::RegisterWrite { value, .. } = one("register_write r 0 0x****0101") else {
        panic!()
    };
    assert_eq!(value, hex("****0101"));
    assert_eq!(value.to_u128(), Err(NumberError::Wildcard));
}

#[test]
fn numbers_wider_than_128_bits() {
    let Command::RegisterWrite { value, .. } =
        one("register_write r 0 0x0102030405060708090a0b0c0d0e0f1011")
    else {
        panic!()
    };
    assert_eq!(value.value(), (1..=0x11).collect::<Vec<u8>>());
    assert_eq!(value.to_u128(), Err(NumberError::TooWide));
    assert_eq!(value.to_bytes(18).unwrap()[0], 0);
    assert_eq!(value.to_bytes(16), Err(NumberError::TooWide));
}

#[test]
fn to_bytes_is_the_cli_whole_byte_width_check() {
    assert_eq!(dec("255").to_bytes(1), Ok(vec![0xff]));
    assert_eq!(dec("256").to_bytes(1), Err(NumberError::TooWide));
    assert_eq!(dec("256").to_bytes(2), Ok(vec![1, 0]));
    assert_eq!(hex("0000ff").to_bytes(1), Ok(vec![0xff]));
    assert_eq!(dec("0").to_bytes(2), Ok(vec![0, 0]));
}

#[test]
fn bad_numbers_are_errors_with_columns() {
    let e = err("register_write r 0 8w5");
    assert_eq!((e.line, e.col), (1, 21));
    let e = err("register_write r 0 12*4");
    assert_eq!((e.line, e.col), (1, 22));
    let e = err("register_write r 0 0x");
    assert_eq!((e.line, e.col), (1, 22));
    let e = err("register_write r 0 0b102");
    assert_eq!((e.line, e.col), (1, 24));
    let e = err("register_write r 0 -1");
    assert_eq!((e.line, e.col), (1, 20));
    assert!(e.message.contains("expected a number"), "{}", e.message);
}

#[test]
fn overlong_numbers_are_refused() {
    let long = "1".repeat(MAX_NUMBER_DIGITS + 1);
    assert!(err(&format!("register_write r 0 {long}")).message.contains("longer than"));
    let ok = "9".repeat(MAX_NUMBER_DIGITS);
    assert!(parse(&format!("register_write r 0 {ok}")).is_ok());
}

// ---- packet ----

#[test]
fn packet_hex_groups_are_joined() {
    assert_eq!(
        one("packet 0 00 11 2233 445566"),
        Command::Packet { port: 0, data: vec![0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66] }
    );
    assert_eq!(one("packet 3 A b C d"), Command::Packet { port: 3, data: vec![0xab, 0xcd] });
    assert_eq!(one("packet 7"), Command::Packet { port: 7, data: vec![] });
}

#[test]
fn packet_needs_even_digits_decimal_port_and_no_wildcards() {
    let e = err("packet 0 001");
    assert!(e.message.contains("even"), "{e}");
    let e = err("packet 0x1 00");
    assert_eq!(e.col, 9);
    assert!(e.message.contains("decimal"), "{e}");
    let e = err("packet 0 00 **");
    assert_eq!(e.col, 13);
    let e = err("packet 0 00 $");
    assert_eq!(e.col, 13);
    let e = err("packet");
    assert_eq!(e.col, 7);
    assert!(e.message.contains("port"), "{e}");
}

// ---- expect ----

#[test]
fn expect_forms() {
    assert_eq!(
        one("expect 1 0a 0B $"),
        Command::Expect {
            port: 1,
            pattern: ExpectPattern {
                nibbles: vec![Some(0), Some(10), Some(0), Some(11)],
                exact: true
            }
        }
    );
    assert_eq!(pat("**0"), ExpectPattern { nibbles: vec![None, None, Some(0)], exact: false });
    assert_eq!(
        pat("0a0b$"),
        ExpectPattern { nibbles: vec![Some(0), Some(10), Some(0), Some(11)], exact: true }
    );
    assert_eq!(one("expect 4"), Command::Expect { port: 4, pattern: ExpectPattern::default() });
    assert_eq!(pat("$"), ExpectPattern { nibbles: vec![], exact: true });
}

#[test]
fn dollar_must_be_last() {
    let e = err("expect 1 00 $ 11");
    assert_eq!((e.line, e.col), (1, 15));
    assert!(e.message.contains("last"), "{e}");
    let e = err("expect 1 0g");
    assert_eq!(e.col, 11);
}

#[test]
fn expect_is_a_prefix_without_dollar() {
    let p = pat("0011");
    assert!(p.matches(&[0x00, 0x11]));
    assert!(p.matches(&[0x00, 0x11, 0x22, 0x33]));
    assert!(!p.matches(&[0x00, 0x12]));
}

#[test]
fn dollar_asks_for_exact_length() {
    let p = pat("0011 $");
    assert!(p.matches(&[0x00, 0x11]));
    assert!(!p.matches(&[0x00, 0x11, 0x22]));
    assert_eq!(
        p.mismatch(&[0x00, 0x11, 0x22]),
        Some(Mismatch::TooLong { expected: 4, received: 6 })
    );
    // Odd nibble counts can never be exact.
    assert!(!pat("001$").matches(&[0x00, 0x10]));
}

#[test]
fn star_nibbles_match_anything() {
    let p = pat("0*1* ****");
    assert!(p.matches(&[0x0f, 0x1e, 0xab, 0xcd]));
    assert!(!p.matches(&[0x1f, 0x1e, 0xab, 0xcd]));
    assert!(pat("00 1").matches(&[0x00, 0x1f]));
}

#[test]
fn shorter_received_packet_fails() {
    let p = pat("001122");
    assert_eq!(p.mismatch(&[0, 0x11]), Some(Mismatch::TooShort { expected: 6, received: 4 }));
    // Even when the missing part is `*`.
    assert!(!pat("00****").matches(&[0, 0x11]));
}

#[test]
fn bare_expect_matches_any_packet() {
    let p = pat("");
    assert!(p.matches(&[]));
    assert!(p.matches(&[1, 2, 3]));
    assert!(pat("$").matches(&[]));
    assert!(!pat("$").matches(&[0]));
}

#[test]
fn diff_names_port_reason_and_nibbles() {
    let p = pat("0011 22** 44 $");
    assert_eq!(diff(1, &p, &[0x00, 0x11, 0x22, 0x33, 0x44]), None);
    let d = diff(1, &p, &[0x00, 0x11, 0x23, 0x33, 0x44]).unwrap();
    assert_eq!(
        d,
        "port 1: differs at nibble 5 (byte 2)\n  expected: 001122**44 $\n  received: 0011233344\n                 ^"
    );
    let d = diff(2, &pat("00112233"), &[0x00, 0x11]).unwrap();
    assert_eq!(
        d,
        "port 2: too short: 4 nibbles received, 8 expected\n  expected: 00112233\n  received: 0011\n                ^^^^"
    );
    let d = diff(3, &pat("00$"), &[0x00, 0xab]).unwrap();
    assert!(d.starts_with("port 3: too long: 4 nibbles received, exactly 2 expected ($)"), "{d}");
    assert!(d.ends_with("  ^^"), "{d:?}");
}

#[test]
fn diff_groups_long_frames_by_eight_bytes() {
    let frame: Vec<u8> = (0..10).collect();
    let mut p = pat("00010203040506070809");
    p.nibbles[19] = Some(0);
    let d = diff(0, &p, &frame).unwrap();
    assert!(d.contains("expected: 0001020304050607 0800\n"), "{d}");
    assert!(d.contains("received: 0001020304050607 0809\n"), "{d}");
}

// ---- add / setdefault ----

#[test]
fn add_exact_with_action_args() {
    assert_eq!(
        one("add ingress.t hdr.ethernet.dstAddr:0x000000000001 ingress.fwd(port:2, mac : 0xAb)"),
        Command::Add {
            table: "ingress.t".into(),
            priority: None,
            keys: vec![(
                "hdr.ethernet.dstAddr".into(),
                KeyValue { number: hex("000000000001"), prefix_len: None }
            )],
            action: ActionCall {
                name: "ingress.fwd".into(),
                args: vec![("port".into(), dec("2")), ("mac".into(), hex("Ab"))]
            },
            id: None,
        }
    );
}

#[test]
fn add_with_priority_ternary_lpm_and_id() {
    let cmd =
        one("add .t 110 h.a:0x****0101 ipv4.dst:0x0a01****  f:10/8 b:0b1**0 setb1(val:0x7f) = e1");
    let Command::Add { table, priority, keys, action, id } = cmd else { panic!() };
    assert_eq!(table, ".t");
    assert_eq!(priority, Some(110));
    assert_eq!(id.as_deref(), Some("e1"));
    assert_eq!(action, ActionCall { name: "setb1".into(), args: vec![("val".into(), hex("7f"))] });
    let names: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["h.a", "ipv4.dst", "f", "b"]);
    assert_eq!(keys[2].1, KeyValue { number: dec("10"), prefix_len: Some(8) });
    assert_eq!(keys[3].1.number, n(Radix::Binary, "1**0"));
}

#[test]
fn add_key_names_with_stack_index_and_valid() {
    let Command::Add { keys, .. } =
        one("add t extra$0.h:1 hdrs.extra[1].h:2 h.$valid$:1 u.valid:0 a()")
    else {
        panic!()
    };
    let names: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["extra$0.h", "hdrs.extra[1].h", "h.$valid$", "u.valid"]);
}

#[test]
fn add_without_keys() {
    assert!(
        matches!(one("add t a()"), Command::Add { priority: None, ref keys, .. } if keys.is_empty())
    );
}

#[test]
fn add_errors_say_what_was_expected() {
    let e = err("add t k:1");
    assert_eq!(e.col, 10);
    assert!(e.message.contains("expected a key `NAME:VALUE` or an action"), "{e}");
    let e = err("add t k:1 a(x:1");
    assert_eq!(e.col, 16);
    assert!(e.message.contains("`,` or `)`"), "{e}");
    let e = err("add t k 1 a()");
    assert_eq!(e.col, 9);
    let e = err("add t 0x10 k:1 a()");
    assert_eq!(e.col, 7);
    assert!(e.message.contains("decimal"), "{e}");
    let e = err("add t k:1/x a()");
    assert_eq!(e.col, 11);
    let e = err("add t a() junk");
    assert_eq!(e.col, 11);
    assert!(e.message.contains("end of line"), "{e}");
    let e = err("add t a() =");
    assert!(e.message.contains("entry id"), "{e}");
}

#[test]
fn setdefault_form() {
    assert_eq!(
        one("setdefault ingress.t ingress.drop(code:3)"),
        Command::SetDefault {
            table: "ingress.t".into(),
            action: ActionCall {
                name: "ingress.drop".into(),
                args: vec![("code".into(), dec("3"))]
            }
        }
    );
    assert!(err("setdefault t").message.contains("action name"));
    assert!(err("setdefault t a").message.contains("`(`"));
}

// ---- control commands ----

#[test]
fn wait_remove_no_packet() {
    assert_eq!(one("wait"), Command::Wait);
    assert_eq!(one("remove all"), Command::RemoveAll);
    assert_eq!(one("no_packet"), Command::NoPacket);
    assert_eq!(err("remove t").col, 8);
    assert_eq!(err("wait 3").col, 6);
}

#[test]
fn check_counter_forms() {
    assert_eq!(
        one("check_counter ingress.c(3) packets == 2"),
        Command::CheckCounter {
            name: "ingress.c".into(),
            counter: CounterRef::Index(dec("3")),
            kind: Some(CounterKind::Packets),
            op: Some(CmpOp::Eq),
            value: dec("2"),
        }
    );
    assert_eq!(
        one("check_counter c(e1) bytes >= 0x40"),
        Command::CheckCounter {
            name: "c".into(),
            counter: CounterRef::Id("e1".into()),
            kind: Some(CounterKind::Bytes),
            op: Some(CmpOp::Ge),
            value: hex("40"),
        }
    );
    let Command::CheckCounter { kind, op, .. } = one("check_counter c(0)packets<=5") else {
        panic!()
    };
    assert_eq!((kind, op), (Some(CounterKind::Packets), Some(CmpOp::Le)));
    let Command::CheckCounter { kind, op, .. } = one("check_counter c(0) 5") else { panic!() };
    assert_eq!((kind, op), (None, None));
    for (t, o) in [("!=", CmpOp::Ne), ("<", CmpOp::Lt), ("<=", CmpOp::Le), (">", CmpOp::Gt)] {
        let Command::CheckCounter { op, .. } = one(&format!("check_counter c(0) {t} 5")) else {
            panic!()
        };
        assert_eq!(op, Some(o));
    }
}

#[test]
fn mirroring_and_multicast_commands() {
    assert_eq!(one("mirroring_add 5 0x3"), Command::MirroringAdd { session: 5, port: 3 });
    assert_eq!(one("mirroring_add_mc 5 7"), Command::MirroringAddMc { session: 5, mgid: 7 });
    assert_eq!(one("mirroring_delete 5"), Command::MirroringDelete { session: 5 });
    assert_eq!(one("mirroring_get 5"), Command::MirroringGet { session: 5 });
    assert_eq!(one("mc_mgrp_create 1"), Command::McMgrpCreate { mgid: 1 });
    assert_eq!(
        one("mc_node_create 0 1 2 3"),
        Command::McNodeCreate { rid: 0, ports: vec![1, 2, 3] }
    );
    assert_eq!(one("mc_node_create 4"), Command::McNodeCreate { rid: 4, ports: vec![] });
    assert_eq!(one("mc_node_update 0 6"), Command::McNodeUpdate { handle: 0, ports: vec![6] });
    assert_eq!(one("mc_node_associate 1 0"), Command::McNodeAssociate { mgid: 1, handle: 0 });
    let e = err("mc_node_associate 1");
    assert_eq!(e.col, 20);
    assert!(e.message.contains("node handle"), "{e}");
    assert!(err("mirroring_add 4294967296 1").message.contains("below 2^32"));
    assert!(err("mc_mgrp_create 0x1*").message.contains("without `*`"));
}

#[test]
fn counter_register_meter_commands() {
    assert_eq!(
        one("counter_read ingress.c 2"),
        Command::CounterRead { name: "ingress.c".into(), index: 2 }
    );
    assert_eq!(
        one("counter_write c 2 10 640"),
        Command::CounterWrite { name: "c".into(), index: 2, packets: dec("10"), bytes: dec("640") }
    );
    assert_eq!(one("register_read r 1"), Command::RegisterRead { name: "r".into(), index: 1 });
    assert_eq!(
        one("register_write r 1 0xff"),
        Command::RegisterWrite { name: "r".into(), index: 1, value: hex("ff") }
    );
    assert_eq!(one("register_reset r"), Command::RegisterReset { name: "r".into() });
    assert_eq!(one("meter_get_rates m 0"), Command::MeterGetRates { name: "m".into(), index: 0 });
    let r = |a: &str, b: &str| Rate { rate: a.into(), burst: b.into() };
    assert_eq!(
        one("meter_set_rates m 0 0.5:1 10:20"),
        Command::MeterSetRates {
            name: "m".into(),
            index: 0,
            rates: vec![r("0.5", "1"), r("10", "20")]
        }
    );
    assert_eq!(
        one("meter_array_set_rates m 0.0001 : 1"),
        Command::MeterArraySetRates { name: "m".into(), rates: vec![r("0.0001", "1")] }
    );
    assert!(err("meter_set_rates m 0").message.contains("RATE:BURST"));
}

#[test]
fn unknown_command_names_line_and_column() {
    let e = err("wait\n\n  frobnicate 1");
    assert_eq!((e.line, e.col), (3, 3));
    assert_eq!(e.message, "unknown STF command `frobnicate`");
    assert_eq!(e.to_string(), "3:3: unknown STF command `frobnicate`");
}

#[test]
fn columns_count_characters_not_bytes() {
    let e = err("add tä k:1 a() x");
    assert_eq!(e.col, 6);
    // U+3000 is whitespace of three bytes.
    let e = err("packet\u{3000}0\u{3000}zz");
    assert_eq!(e.col, 10);
    let e = err("packet 0 éé");
    assert_eq!(e.col, 10);
}

// ---- key value conversions ----

#[test]
fn ternary_mask_covers_only_written_digits() {
    let t = hex("0101").ternary().unwrap();
    assert_eq!((t.value, t.mask), (vec![1, 1], vec![0xff, 0xff]));
    let t = hex("****0101").ternary().unwrap();
    assert_eq!((t.value, t.mask), (vec![0, 0, 1, 1], vec![0, 0, 0xff, 0xff]));
    let t = hex("*1").ternary().unwrap();
    assert_eq!((t.value, t.mask), (vec![0x01], vec![0x0f]));
    let t = n(Radix::Octal, "7*").ternary().unwrap();
    assert_eq!((&t.value[..], &t.mask[..]), (&[0b111000u8][..], &[0b111000u8][..]));
    assert_eq!(dec("5").ternary(), Err(NumberError::DecimalTernary));
    assert_eq!(widen(&t.mask, 4), Some(vec![0, 0, 0, 0b111000]));
}

#[test]
fn lpm_from_slash_or_digit_count() {
    assert_eq!(hex("0a010065").lpm(None), Lpm { value: vec![10, 1, 0, 0x65], len: 32 });
    assert_eq!(hex("0a01****").lpm(None), Lpm { value: vec![10, 1, 0, 0], len: 16 });
    assert_eq!(hex("0a000000").lpm(Some(8)), Lpm { value: vec![10, 0, 0, 0], len: 8 });
    assert_eq!(n(Radix::Binary, "101").lpm(None).len, 3);
    assert_eq!(dec("10").lpm(None), Lpm { value: vec![10], len: 4 });
    assert_eq!(dec("4096").lpm(None).len, 16);
}

#[test]
fn bigger_stf_priority_wins_in_bmv2() {
    assert!(bmv2_priority(110) < bmv2_priority(100));
    assert_eq!(bmv2_priority(1), 9999);
}

// ---- name resolution ----

#[test]
fn table_name_is_a_unique_suffix() {
    let t = ["ingress.ipv4_da_lpm", "ingress.t", "egress.t", ".global"];
    assert_eq!(table_matches("ipv4_da_lpm", &t), Ok(0));
    assert_eq!(table_matches("ingress.ipv4_da_lpm", &t), Ok(0));
    assert_eq!(table_matches("ingress.t", &t), Ok(1));
    assert_eq!(table_matches("t", &t), Err(vec![1, 2]));
    assert_eq!(table_matches("global", &t), Ok(3));
    assert_eq!(table_matches("nope", &t), Err(vec![]));
    // Plain string suffix: `_lpm` matches too.
    assert_eq!(table_matches("_lpm", &t), Ok(0));
}

#[test]
fn action_exact_match_wins_over_suffixes() {
    let a = ["ingress.setb1", "setb1", "ingress.drop", "egress.drop"];
    assert_eq!(action_matches("setb1", &a), Ok(1));
    assert_eq!(action_matches("ingress.setb1", &a), Ok(0));
    assert_eq!(action_matches("drop", &a), Err(vec![2, 3]));
    assert_eq!(action_matches("egress.drop", &a), Ok(3));
}

#[test]
fn key_field_rules_in_order() {
    let f = [
        "hdr.ipv4.dstAddr",
        "hdrs.extra[0].h",
        "hdr.u.short.$valid$",
        "meta.x[7:0]",
        "h.h.count",
        "x.dstAddr",
    ];
    // 1. equal.
    assert_eq!(key_field_matches("hdr.ipv4.dstAddr", &f), Some(0));
    assert_eq!(key_field_matches("meta.x[7:0]", &f), Some(3));
    // 2. without trailing `$` or `.$valid$`.
    assert_eq!(key_field_matches("hdr.u.short.$valid", &f), Some(2));
    assert_eq!(key_field_matches("hdr.u.short", &f), Some(2));
    // 3. `.valid` for `.$valid$`.
    assert_eq!(key_field_matches("hdr.u.short.valid", &f), Some(2));
    // 4. suffix after a `.`; `valid` for any `X.$valid$`.
    assert_eq!(key_field_matches("ipv4.dstAddr", &f), Some(0));
    assert_eq!(key_field_matches("count", &f), Some(4));
    assert_eq!(key_field_matches("valid", &f), Some(2));
    assert_eq!(key_field_matches("ount", &f), None);
    // Rule 1 beats rule 4: `x.dstAddr` equals field 5 though it is also no suffix of field 0.
    assert_eq!(key_field_matches("x.dstAddr", &f), Some(5));
    // `NAME$N` is `NAME[N]`.
    assert_eq!(key_field_matches("extra$0.h", &f), Some(1));
    assert_eq!(key_field_matches("hdrs.extra$0.h", &f), Some(1));
}

// ---- judging ----

fn expectations(text: &str) -> Expectations {
    Expectations::from_lines(&parse(text).unwrap())
}

#[test]
fn observed_ports_are_packet_and_expect_ports() {
    let e = expectations("packet 0 00\nexpect 2 00\nmirroring_add 1 9\n");
    assert_eq!(e.observed_ports().collect::<Vec<_>>(), [0, 2]);
    assert!(e.observes(0) && e.observes(2) && !e.observes(9));
}

#[test]
fn packets_to_unobserved_ports_and_the_drop_port_are_never_seen() {
    let mut e = expectations("packet 0 00\nexpect 511 00\n");
    assert_eq!(e.receive(9, &[0]), Received::NotObserved);
    assert_eq!(e.receive(DROP_PORT, &[0]), Received::NotObserved);
    assert!(!e.observes(DROP_PORT));
    // The expect on 511 is then missing.
    let v = e.verdict();
    assert!(matches!(v.failures.as_slice(), [Failure::Missing { port: 511, index: 0, .. }]));
}

#[test]
fn observed_port_without_expects_must_stay_silent() {
    let mut e = expectations("packet 0 0011\n");
    assert!(e.verdict().passed());
    assert_eq!(e.receive(0, &[0, 0x11]), Received::Recorded);
    let v = e.verdict();
    assert_eq!(v.failures, vec![Failure::Unexpected { port: 0, index: 0, frame: vec![0, 0x11] }]);
    assert_eq!(v.failures[0].to_string(), "port 0: packet 0 received but not expected: 0011");
}

#[test]
fn expects_anywhere_in_the_file_form_the_port_list_in_order() {
    let text = "expect 1 01\npacket 0 00\npacket 0 00\nexpect 2 aa\nexpect 1 02 $\n";
    let mut e = expectations(text);
    // Across ports order does not matter.
    e.receive(2, &[0xaa, 0xbb]);
    e.receive(1, &[0x01, 0xff]);
    e.receive(1, &[0x02]);
    assert!(e.verdict().passed(), "{:?}", e.verdict());
}

#[test]
fn order_within_a_port_matters() {
    let mut e = expectations("expect 1 01\nexpect 1 02\n");
    e.receive(1, &[0x02]);
    e.receive(1, &[0x01]);
    let v = e.verdict();
    assert!(!v.passed());
    assert_eq!(v.failures.len(), 2);
    let Failure::Wrong { port, index, expected, mismatch, .. } = &v.failures[0] else { panic!() };
    assert_eq!((*port, *index, expected.line, *mismatch), (1, 0, 1, Mismatch::Nibble { index: 1 }));
    assert!(
        v.failures[1].to_string().starts_with("packet 1 (expect on line 2) on port 1: differs")
    );
}

#[test]
fn expected_but_not_received_is_missing() {
    let mut e = expectations("packet 0 00\nexpect 1 01\nexpect 1\n");
    e.receive(1, &[1]);
    let v = e.verdict();
    assert_eq!(
        v.failures,
        vec![Failure::Missing {
            port: 1,
            index: 1,
            expected: Expected { line: 3, pattern: ExpectPattern::default() }
        }]
    );
    assert_eq!(v.failures[0].to_string(), "port 1: packet 1 expected (line 3: ) but not received");
}

#[test]
fn bare_expect_still_counts_toward_the_port() {
    let mut e = expectations("expect 3\n");
    assert!(!e.verdict().passed());
    e.receive(3, &[1, 2, 3, 4]);
    assert!(e.verdict().passed());
    e.receive(3, &[1]);
    assert!(!e.verdict().passed());
}

#[test]
fn count_mismatch_and_content_are_both_reported() {
    let mut e = expectations("expect 1 01\nexpect 2 aa\n");
    e.receive(1, &[0x09]);
    e.receive(1, &[0x01]);
    let v = e.verdict();
    assert_eq!(v.failures.len(), 3, "{v:?}");
    assert!(matches!(v.failures[0], Failure::Wrong { port: 1, index: 0, .. }));
    assert!(matches!(v.failures[1], Failure::Unexpected { port: 1, index: 1, .. }));
    assert!(matches!(v.failures[2], Failure::Missing { port: 2, index: 0, .. }));
}

// ---- properties ----

proptest! {
    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,200}") {
        let _ = parse(&s);
    }

    #[test]
    fn stf_like_text_never_panics(
        lines in prop::collection::vec(
            prop::collection::vec(
                prop::sample::select(vec![
                    "packet", "expect", "add", "setdefault", "check_counter", "mc_node_create",
                    "meter_set_rates", "0x1*", "0b1", "12", "$", "*", "(", ")", ":", ",", "/",
                    "=", "==", "#", "t.a", "a$0", " ", "\t", "ab", "0.5",
                ]),
                0..12,
            ),
            0..8,
        )
    ) {
        let text = lines.iter().map(|l| l.join(" ")).collect::<Vec<_>>().join("\n");
        if let Ok(ls) = parse(&text) {
            let mut e = Expectations::from_lines(&ls);
            for l in &ls {
                if let Command::Packet { port, data } = &l.cmd {
                    e.receive(*port, data);
                }
                if let Command::Add { keys, .. } = &l.cmd {
                    for (_, k) in keys {
                        let _ = (k.number.ternary(), k.number.lpm(k.prefix_len), k.number.value());
                    }
                }
            }
            for f in e.verdict().failures {
                let _ = f.to_string();
            }
        }
    }

    #[test]
    fn packet_data_round_trips(port in 0u32..512, data in prop::collection::vec(any::<u8>(), 0..64)) {
        let text: String = data.iter().map(|b| format!("{b:02x} ")).collect();
        prop_assert_eq!(one(&format!("packet {port} {text}")), Command::Packet { port, data: data.clone() });
        // An expect made from the frame matches it, exactly and as a prefix.
        let exact = format!("{text} $");
        prop_assert!(pat(&exact).matches(&data));
        let half: String = text.chars().take(text.len() / 2).collect();
        prop_assert!(pat(&half).matches(&data));
    }

    #[test]
    fn expect_pattern_display_reparses(
        nibbles in prop::collection::vec(prop::option::of(0u8..16), 0..40),
        exact in any::<bool>(),
    ) {
        let p = ExpectPattern { nibbles, exact };
        prop_assert_eq!(pat(&p.to_string()), p);
    }

    #[test]
    fn number_display_reparses_and_values_agree(v in any::<u128>()) {
        for text in [format!("{v}"), format!("0x{v:x}"), format!("0b{v:b}"), format!("0o{v:o}")] {
            let Command::RegisterWrite { value, .. } = one(&format!("register_write r 0 {text}")) else {
                panic!()
            };
            prop_assert_eq!(value.to_string(), text);
            prop_assert_eq!(value.to_u128(), Ok(v));
        }
    }
}

// ---- rendering ----

fn number_strategy() -> impl Strategy<Value = Number> {
    prop_oneof![
        prop::collection::vec((0u8..10).prop_map(Some), 1..30)
            .prop_map(|digits| Number { radix: Radix::Decimal, digits }),
        prop::collection::vec(prop::option::weighted(0.8, 0u8..16), 1..30)
            .prop_map(|digits| Number { radix: Radix::Hex, digits }),
        prop::collection::vec(prop::option::weighted(0.8, 0u8..2), 1..30)
            .prop_map(|digits| Number { radix: Radix::Binary, digits }),
        prop::collection::vec(prop::option::weighted(0.8, 0u8..8), 1..30)
            .prop_map(|digits| Number { radix: Radix::Octal, digits }),
    ]
}

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z_.][a-zA-Z0-9_.$]{0,8}(\\[[0-9]\\])?"
}

fn rates() -> impl Strategy<Value = Vec<Rate>> {
    prop::collection::vec(
        ("[0-9]{1,4}(\\.[0-9]{0,3})?", "[0-9]{1,4}").prop_map(|(rate, burst)| Rate { rate, burst }),
        1..4,
    )
}

fn action() -> impl Strategy<Value = ActionCall> {
    (name(), prop::collection::vec((name(), number_strategy()), 0..4))
        .prop_map(|(name, args)| ActionCall { name, args })
}

fn command() -> impl Strategy<Value = Command> {
    let ports = || prop::collection::vec(any::<u32>(), 0..5);
    prop_oneof![
        (any::<u32>(), prop::collection::vec(any::<u8>(), 0..20))
            .prop_map(|(port, data)| Command::Packet { port, data }),
        (any::<u32>(), prop::collection::vec(prop::option::of(0u8..16), 0..20), any::<bool>())
            .prop_map(|(port, nibbles, exact)| Command::Expect {
                port,
                pattern: ExpectPattern { nibbles, exact }
            }),
        (
            name(),
            prop::option::of(any::<u32>()),
            prop::collection::vec(
                (name(), number_strategy(), prop::option::of(0u32..200))
                    .prop_map(|(k, number, prefix_len)| (k, KeyValue { number, prefix_len })),
                0..4
            ),
            action(),
            prop::option::of("[a-z0-9_]{1,5}"),
        )
            .prop_map(|(table, priority, keys, action, id)| Command::Add {
                table,
                priority,
                keys,
                action,
                id
            }),
        (name(), action()).prop_map(|(table, action)| Command::SetDefault { table, action }),
        Just(Command::Wait),
        Just(Command::RemoveAll),
        Just(Command::NoPacket),
        (
            name(),
            prop_oneof![
                name().prop_map(CounterRef::Id),
                number_strategy().prop_map(CounterRef::Index)
            ],
            prop::option::of(prop::sample::select(vec![CounterKind::Packets, CounterKind::Bytes])),
            prop::option::of(prop::sample::select(vec![
                CmpOp::Eq,
                CmpOp::Ne,
                CmpOp::Lt,
                CmpOp::Le,
                CmpOp::Gt,
                CmpOp::Ge
            ])),
            number_strategy(),
        )
            .prop_map(|(name, counter, kind, op, value)| Command::CheckCounter {
                name,
                counter,
                kind,
                op,
                value
            }),
        (any::<u32>(), any::<u32>())
            .prop_map(|(session, port)| Command::MirroringAdd { session, port }),
        (any::<u32>(), any::<u32>())
            .prop_map(|(session, mgid)| Command::MirroringAddMc { session, mgid }),
        any::<u32>().prop_map(|session| Command::MirroringDelete { session }),
        any::<u32>().prop_map(|session| Command::MirroringGet { session }),
        any::<u32>().prop_map(|mgid| Command::McMgrpCreate { mgid }),
        (any::<u32>(), ports()).prop_map(|(rid, ports)| Command::McNodeCreate { rid, ports }),
        (any::<u32>(), ports()).prop_map(|(handle, ports)| Command::McNodeUpdate { handle, ports }),
        (any::<u32>(), any::<u32>())
            .prop_map(|(mgid, handle)| Command::McNodeAssociate { mgid, handle }),
        (name(), any::<u32>()).prop_map(|(name, index)| Command::CounterRead { name, index }),
        (name(), any::<u32>(), number_strategy(), number_strategy()).prop_map(
            |(name, index, packets, bytes)| Command::CounterWrite { name, index, packets, bytes }
        ),
        (name(), any::<u32>()).prop_map(|(name, index)| Command::RegisterRead { name, index }),
        (name(), any::<u32>(), number_strategy())
            .prop_map(|(name, index, value)| Command::RegisterWrite { name, index, value }),
        name().prop_map(|name| Command::RegisterReset { name }),
        (name(), any::<u32>()).prop_map(|(name, index)| Command::MeterGetRates { name, index }),
        (name(), any::<u32>(), rates()).prop_map(|(name, index, rates)| Command::MeterSetRates {
            name,
            index,
            rates
        }),
        (name(), rates()).prop_map(|(name, rates)| Command::MeterArraySetRates { name, rates }),
    ]
}

#[test]
fn display_renders_one_stf_line() {
    let text = "add .t 110 h.a:0x****0101 f:10/8 setb1(val:0x7f, p:2) = e1";
    assert_eq!(one(text).to_string(), text);
    assert_eq!(one("EXPECT 1 0A 0b$").to_string(), "expect 1 0A0B $");
    assert_eq!(one("expect 1").to_string(), "expect 1");
    assert_eq!(one("packet 2 AB cd").to_string(), "packet 2 abcd");
    assert_eq!(
        one("check_counter c(e1)bytes>=0X40").to_string(),
        "check_counter c(e1) bytes >= 0x40"
    );
}

#[test]
fn only_wait_remove_and_check_counter_are_ignored_by_bmv2() {
    assert!(one("wait").ignored_by_bmv2());
    assert!(one("remove all").ignored_by_bmv2());
    assert!(one("check_counter c(1) 2").ignored_by_bmv2());
    assert!(!one("no_packet").ignored_by_bmv2());
    assert!(!one("register_write r 0 1").ignored_by_bmv2());
}

proptest! {
    #[test]
    fn parse_of_render_round_trips(cmds in prop::collection::vec(command(), 0..10)) {
        let text: String = cmds.iter().map(|c| format!("{c}\n# comment\n\n")).collect();
        let lines = parse(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let got: Vec<Command> = lines.iter().map(|l| l.cmd.clone()).collect();
        prop_assert_eq!(got, cmds);
        let numbers: Vec<u32> = lines.iter().map(|l| l.line).collect();
        prop_assert_eq!(numbers, (0..lines.len() as u32).map(|i| 3 * i + 1).collect::<Vec<_>>());
    }
}
