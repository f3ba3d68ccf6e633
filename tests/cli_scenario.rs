//! `snic scenario check|run|record|regress` and `snic tour` as a user runs them: the built
//! binary on scenario files written into a temporary directory, exit codes, the readable
//! failure diffs, JUnit XML parsed back, the tour's plot.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SNIC: &str = env!("CARGO_BIN_EXE_snic");

fn snic(args: &[&str], cwd: &Path) -> Output {
    Command::new(SNIC).args(args).current_dir(cwd).output().expect("run snic")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A fresh temporary directory for one test.
fn tmp(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("snic-cli-scenario-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("mkdir");
    d
}

/// A NIC and a host that sends five frames into it; two expectations that hold (`want` 5
/// frames, buffer filled with 1) unless changed.
fn small(frames_wanted: u32, fill_wanted: u8) -> String {
    format!(
        r#"name = "small"
[[nic]]
name = "nic0"
[[host]]
name = "h0"
nic = "nic0"
port = "host"
  [[host.region]]
  name = "buf"
  size = 64
  init = {{ fill = 1 }}
[[traffic]]
into = "h0"
packets = [{{ layers = 'Ether()/IP(src="10.0.0.1",dst="10.0.0.2")/UDP(dport=7)/Raw(len=32)', count = 5 }}]
[[expect]]
counter = "nic0.port.host.rx_packets"
eq = {frames_wanted}
[[expect]]
memory = "h0.buf"
content = {{ fill = {fill_wanted} }}
"#
    )
}

const BROKEN: &str = "name = \"broken\"\n[[nic]]\nname = \"nic0\"\nprots = [\"wire\"]\n";

#[test]
fn check_says_ok_or_names_file_line_and_field() {
    let d = tmp("check");
    std::fs::write(d.join("ok.toml"), small(5, 1)).unwrap();
    std::fs::write(d.join("broken.toml"), BROKEN).unwrap();
    let o = snic(&["scenario", "check", "ok.toml"], &d);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains(
            "ok.toml: ok (1 nic, 1 host, 0 links, 1 traffic source, 0 ops, 2 expectations)"
        ),
        "{}",
        text(&o)
    );
    let o = snic(&["scenario", "check", "ok.toml", "broken.toml"], &d);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("ok.toml: ok"), "{t}");
    assert!(t.contains("broken.toml:4: nic[0].prots: unknown field `prots`"), "{t}");
    // `run` refuses it the same way, with exit code 2.
    let o = snic(&["scenario", "run", "broken.toml"], &d);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("broken.toml:4: nic[0].prots"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn run_passes_or_fails_with_a_readable_diff() {
    let d = tmp("run");
    std::fs::write(d.join("pass.toml"), small(5, 1)).unwrap();
    std::fs::write(d.join("fail.toml"), small(6, 2)).unwrap();
    let o = snic(&["scenario", "run", "pass.toml"], &d);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let t = text(&o);
    assert!(t.starts_with("scenario small (sim mode, seed 1): PASS"), "{t}");
    assert!(t.contains("ok   nic0.port.host.rx_packets"), "{t}");

    let o = snic(&["scenario", "run", "fail.toml"], &d);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("FAIL nic0.port.host.rx_packets: want nic0.port.host.rx_packets == 6, got 5"),
        "{t}"
    );
    assert!(t.contains("first difference at byte 0"), "{t}");

    // --json: the report as one document, every counter by name; --seed overrides.
    let o = snic(&["scenario", "run", "--json", "--seed", "9", "pass.toml"], &d);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON report");
    assert_eq!(v["passed"], true);
    assert_eq!(v["seed"], 9);
    assert_eq!(v["counters"]["nic0.port.host.rx_packets"], 5);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn record_writes_golden_data_that_run_then_compares() {
    let d = tmp("record");
    let s = small(5, 1) + "[golden]\ncounters = [\"nic0.port.host.*\"]\n";
    std::fs::write(d.join("g.toml"), s).unwrap();
    // Before recording, the golden data are missing: the run fails.
    let o = snic(&["scenario", "run", "g.toml"], &d);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = snic(&["scenario", "record", "g.toml"], &d);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let t = text(&o);
    assert!(t.starts_with("wrote 1 golden file(s):"), "{t}");
    let written = t.lines().nth(1).expect("a file").trim().to_string();
    assert!(d.join(&written).is_file() || Path::new(&written).is_file(), "{written}");
    let o = snic(&["scenario", "run", "g.toml"], &d);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&d);
}

/// One element of a parsed XML document.
#[derive(Debug)]
struct Element {
    name: String,
    attrs: BTreeMap<String, String>,
    text: String,
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let end = rest[i..].find(';').unwrap_or_else(|| panic!("unterminated entity in {s:?}"));
        out.push(match &rest[i + 1..i + end] {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            e => panic!("unknown entity &{e}; in {s:?}"),
        });
        rest = &rest[i + end + 1..];
    }
    out.push_str(rest);
    out
}

/// A minimal XML reader: checks that tags nest and close, attributes are quoted and entities
/// are known; returns every element in document order with its attributes and direct text.
fn parse_xml(doc: &str) -> Vec<Element> {
    let mut out: Vec<Element> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    let mut rest = doc.trim_start();
    if let Some(r) = rest.strip_prefix("<?xml") {
        rest = &r[r.find("?>").expect("end of the declaration") + 2..];
    }
    while !rest.is_empty() {
        let lt = rest.find('<').unwrap_or(rest.len());
        let t = &rest[..lt];
        assert!(!t.contains('>'), "raw '>' in text is legal but our writer escapes it: {t:?}");
        if let Some(&i) = open.last() {
            out[i].text.push_str(&unescape(t));
        } else {
            assert!(t.trim().is_empty(), "text outside the root: {t:?}");
        }
        rest = &rest[lt..];
        if rest.is_empty() {
            break;
        }
        let gt = rest.find('>').expect("tag closes");
        let tag = &rest[1..gt];
        rest = &rest[gt + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            let i = open.pop().expect("a close tag closes an open element");
            assert_eq!(out[i].name, name.trim(), "tags nest");
            continue;
        }
        let (tag, empty) = match tag.strip_suffix('/') {
            Some(t) => (t, true),
            None => (tag, false),
        };
        let name_end = tag.find(char::is_whitespace).unwrap_or(tag.len());
        let mut e = Element {
            name: tag[..name_end].to_string(),
            attrs: BTreeMap::new(),
            text: String::new(),
        };
        let mut a = tag[name_end..].trim();
        while !a.is_empty() {
            let eq = a.find("=\"").expect("attribute is name=\"value\"");
            let key = a[..eq].trim().to_string();
            let close = a[eq + 2..].find('"').expect("attribute value closes");
            let value = &a[eq + 2..eq + 2 + close];
            assert!(!value.contains('<'), "raw '<' in an attribute");
            e.attrs.insert(key, unescape(value));
            a = a[eq + 2 + close + 1..].trim();
        }
        out.push(e);
        if !empty {
            open.push(out.len() - 1);
        }
    }
    assert!(open.is_empty(), "every element closes");
    out
}

#[test]
fn regress_runs_a_directory_with_a_table_and_junit_xml() {
    let d = tmp("regress");
    let s = d.join("scenarios");
    std::fs::create_dir_all(s.join("nested")).unwrap();
    std::fs::create_dir_all(s.join("pass.golden")).unwrap();
    std::fs::write(s.join("pass.toml"), small(5, 1)).unwrap();
    // A failing case whose name and diff need escaping in XML.
    let fail = small(6, 1).replace("name = \"small\"", "name = \"fail <&> \\\"q\\\"\"");
    std::fs::write(s.join("nested/fail.toml"), fail).unwrap();
    std::fs::write(s.join("broken.toml"), BROKEN).unwrap();
    // Not scenarios: a vSwitch policy beside them, and a file in a golden directory.
    std::fs::write(s.join("policy.toml"), "[underlay]\nport = 1\n").unwrap();
    std::fs::write(s.join("pass.golden/x.toml"), BROKEN).unwrap();
    let o = snic(&["scenario", "regress", "scenarios", "--jobs", "2", "--junit", "out.xml"], &d);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let t = text(&o);
    let row = |name: &str| {
        t.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name}: {t}")).to_string()
    };
    assert!(row("small").contains("pass"), "{t}");
    assert!(
        row("fail <&>").contains("FAIL") && row("fail <&>").contains("nic0.port.host.rx_packets"),
        "{t}"
    );
    assert!(row("broken").contains("ERROR") && row("broken").contains("broken.toml:4"), "{t}");
    assert!(t.contains("3 scenarios: 1 passed, 1 failed, 1 could not run (1 other"), "{t}");
    assert!(t.contains("want nic0.port.host.rx_packets == 6, got 5"), "{t}");

    let xml = std::fs::read_to_string(d.join("out.xml")).expect("JUnit written");
    let els = parse_xml(&xml);
    let suite = els.iter().find(|e| e.name == "testsuite").expect("a testsuite");
    assert_eq!(suite.attrs["tests"], "3");
    assert_eq!(suite.attrs["failures"], "1");
    assert_eq!(suite.attrs["errors"], "1");
    let cases: Vec<&Element> = els.iter().filter(|e| e.name == "testcase").collect();
    let names: Vec<&str> = cases.iter().map(|c| c.attrs["name"].as_str()).collect();
    assert_eq!(names, ["broken", "fail <&> \"q\"", "small"]);
    let failure = els.iter().find(|e| e.name == "failure").expect("a failure");
    assert!(failure.attrs["message"].contains("nic0.port.host.rx_packets"), "{failure:?}");
    assert!(failure.text.contains("want nic0.port.host.rx_packets == 6, got 5"), "{failure:?}");
    let error = els.iter().find(|e| e.name == "error").expect("an error");
    assert!(error.attrs["message"].contains("prots"), "{error:?}");

    // Only the passing one: exit 0. An empty directory: exit 2.
    std::fs::write(s.join("nested/fail.toml"), small(5, 1)).unwrap();
    std::fs::remove_file(s.join("broken.toml")).unwrap();
    let o = snic(&["scenario", "regress", "scenarios"], &d);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    std::fs::create_dir_all(d.join("empty")).unwrap();
    let o = snic(&["scenario", "regress", "empty"], &d);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn the_tour_passes_reports_every_engine_and_plots() {
    let d = tmp("tour");
    let o = snic(&["tour"], &d);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let t = text(&o);
    assert!(t.starts_with("snic tour (seed 1): PASS"), "{t}");
    for engine in ["vSwitch", "RDMA", "DMA", "kernels", "links"] {
        assert!(t.lines().any(|l| l.trim_start().starts_with(engine)), "{engine}: {t}");
    }
    assert!(!t.contains("FAIL"), "{t}");
    let svg = std::fs::read_to_string(d.join("snic-tour.svg")).expect("the default plot");
    assert!(svg.starts_with("<svg") || svg.starts_with("<?xml"), "{}", &svg[..60.min(svg.len())]);

    // The same seed gives the same report; --plot chooses the file (PNG by extension).
    let a = snic(&["tour", "--json", "--seed", "4", "--plot", "a.png"], &d);
    let b = snic(&["tour", "--json", "--seed", "4", "--plot", "a.png"], &d);
    assert_eq!(a.status.code(), Some(0), "{}", text(&a));
    assert_eq!(a.stdout, b.stdout);
    let v: serde_json::Value = serde_json::from_slice(&a.stdout).expect("JSON");
    assert_eq!(v["report"]["seed"], 4);
    assert!(v["engines"]["rdma"]["nic0"]["req_packets"].as_u64().unwrap_or(0) > 0, "{v}");
    let png = std::fs::read(d.join("a.png")).expect("PNG written");
    assert_eq!(&png[1..4], b"PNG");
    let _ = std::fs::remove_dir_all(&d);
}
