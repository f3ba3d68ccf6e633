//! `snic tour`: the built-in tour scenario (`scenarios/tour.toml`, compiled in): two NICs with
//! their hosts over a lossy link, VXLAN traffic through both vSwitches, RDMA WRITE / READ /
//! atomics into device memory, DMA and a lookaside kernel, every part checked by an
//! expectation. Prints what each engine did and whether every expectation held, and plots
//! the run (throughput per link direction, completions per CQ) as SVG or PNG.
//!
//! It needs no files, no root and no network, and runs on the simulated clock: the same seed
//! gives the same report.

use super::plot;
use super::{EXIT_ERROR, verdict};
use snic_scenario::{Report, RunOptions, load};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The tour scenario.
pub const TOUR: &str = include_str!("../../scenarios/tour.toml");

/// Arguments of `snic tour`.
#[derive(Debug, Clone, clap::Args)]
pub struct TourArgs {
    /// Seed of the link's losses and the seeded memory (the tour's default is 1).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Where the plot goes: SVG, or PNG when the name ends in `.png`.
    #[arg(long, value_name = "PATH", default_value = "snic-tour.svg")]
    pub plot: PathBuf,
    /// Print one JSON document (engine summary, plot path, the whole report) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Load the tour (it needs no files; relative paths would be relative to `scenarios/`).
pub fn load_tour() -> Result<snic_scenario::Loaded, snic_scenario::LoadError> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    load::load_str(TOUR, load::Format::Toml, Path::new("<builtin>/scenarios/tour.toml"), &dir)
}

/// Counters grouped for the summary: engine -> subject (node, link direction, host) -> field
/// -> value; only counters that moved.
pub type Engines = BTreeMap<&'static str, BTreeMap<String, Vec<(String, u64)>>>;

/// Engines in the order the summary lists them, with the fields shown first.
const ENGINES: &[(&str, &str, &[&str])] = &[
    ("vswitch", "vSwitch", &["hits", "misses", "flows", "installs", "encap", "decap"]),
    (
        "rdma",
        "RDMA",
        &[
            "req_packets",
            "tx_bytes",
            "rx_bytes",
            "retransmits",
            "timeouts",
            "seq_naks_sent",
            "read_resp_rcvd",
        ],
    ),
    ("dma", "DMA", &["descs", "h2c_bytes", "c2h_bytes", "completions", "error"]),
    ("kernel", "kernels", &["runs", "ops", "errors"]),
    ("xdp", "XDP", &["pass", "drop", "tx", "redirect"]),
    ("cq", "CQEs", &["cqes"]),
    ("link", "links", &["offered", "delivered", "delivered_bytes", "lost", "duplicated"]),
    ("drop", "drops", &[]),
];

/// Group the report's counters by engine.
pub fn engines(report: &Report) -> Engines {
    let mut out = Engines::new();
    for (k, &v) in &report.counters {
        if v == 0 {
            continue;
        }
        let p: Vec<&str> = k.split('.').collect();
        let (engine, subject, field) = match p.as_slice() {
            ["link", link, dir, rest @ ..] if !rest.is_empty() => {
                ("link", format!("{link} {}", dir.replace("_to_", "->")), rest.join("."))
            }
            [host, "cq", cq, "cqes"] => ("cq", format!("{host}.{cq}"), "cqes".to_string()),
            [node, engine, rest @ ..] if !rest.is_empty() => {
                let Some(&(e, _, _)) = ENGINES.iter().find(|(e, _, _)| e == engine) else {
                    continue;
                };
                (e, node.to_string(), rest.join("."))
            }
            _ => continue,
        };
        out.entry(engine).or_default().entry(subject).or_default().push((field, v));
    }
    for (engine, subjects) in &mut out {
        let pref = ENGINES.iter().find(|(e, _, _)| e == engine).map_or(&[][..], |x| x.2);
        let rank = |f: &str| pref.iter().position(|p| f.contains(p)).unwrap_or(pref.len());
        for fields in subjects.values_mut() {
            fields.sort_by(|a, b| rank(&a.0).cmp(&rank(&b.0)).then_with(|| a.0.cmp(&b.0)));
        }
    }
    out
}

fn value(field: &str, v: u64) -> String {
    if field.ends_with("bytes") && v >= 10 * 1024 {
        if v >= 10 << 20 { format!("{} MiB", v >> 20) } else { format!("{} KiB", v >> 10) }
    } else {
        v.to_string()
    }
}

/// The text summary: verdict, what each engine did (a line per engine and subject), the
/// timeline, the expectations.
pub fn summary(report: &Report, groups: &Engines) -> String {
    use core::fmt::Write;
    let mut s = String::new();
    let held = report.expectations.iter().filter(|e| e.passed).count();
    let _ = writeln!(
        s,
        "snic tour (seed {}): {} — {held}/{} expectations held, {} simulated, {} steps",
        report.seed,
        if report.passed { "PASS" } else { "FAIL" },
        report.expectations.len(),
        super::regress::fmt_ns(report.end_ns),
        report.steps
    );
    for &(engine, title, _) in ENGINES {
        let Some(subjects) = groups.get(engine) else { continue };
        for (i, (subject, fields)) in subjects.iter().enumerate() {
            const SHOWN: usize = 6;
            let mut line: Vec<String> =
                fields.iter().take(SHOWN).map(|(f, v)| format!("{f} {}", value(f, *v))).collect();
            if fields.len() > SHOWN {
                line.push(format!("+{} more", fields.len() - SHOWN));
            }
            let head = if i == 0 { title } else { "" };
            let _ = writeln!(s, "  {head:<9} {subject:<14} {}", line.join(", "));
        }
    }
    let mut kinds: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for o in &report.ops {
        let k = kinds.entry(o.kind.as_str()).or_default();
        k.0 += 1;
        k.1 += usize::from(o.done_ns.is_some() && o.error.is_none());
    }
    if !kinds.is_empty() {
        let list: Vec<String> =
            kinds.iter().map(|(k, (n, done))| format!("{k} {done}/{n}")).collect();
        let _ =
            writeln!(s, "  {:<9} {:<14} {} (done/all)", "timeline", "operations", list.join(", "));
    }
    for e in &report.expectations {
        let mark = if e.passed { "ok  " } else { "FAIL" };
        let _ = writeln!(s, "  {mark} {}: {}", e.name, e.got);
        if !e.passed
            && let Some(d) = &e.diff
        {
            for line in d.lines() {
                let _ = writeln!(s, "         {line}");
            }
        }
    }
    for e in &report.errors {
        let _ = writeln!(s, "  error: {e}");
    }
    s
}

/// Run `snic tour`; returns the exit code.
pub fn run(a: &TourArgs) -> i32 {
    let loaded = match load_tour() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("the built-in tour does not load: {e}");
            return EXIT_ERROR;
        }
    };
    let opts = RunOptions { seed: a.seed, ..RunOptions::default() };
    let report = match snic_scenario::run(&loaded, &opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("the tour could not run: {e}");
            return EXIT_ERROR;
        }
    };
    let groups = engines(&report);
    let title = format!("snic tour (seed {})", report.seed);
    let plotted = match plot::plot(&report.series, &title, &a.plot) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{}: {e}", a.plot.display());
            return EXIT_ERROR;
        }
    };
    if a.json {
        let engines: serde_json::Map<String, serde_json::Value> = groups
            .iter()
            .map(|(e, subjects)| {
                let subjects: serde_json::Map<String, serde_json::Value> = subjects
                    .iter()
                    .map(|(s, f)| {
                        let f: serde_json::Map<String, serde_json::Value> =
                            f.iter().map(|(k, v)| (k.clone(), (*v).into())).collect();
                        (s.clone(), f.into())
                    })
                    .collect();
                (e.to_string(), subjects.into())
            })
            .collect();
        let v = serde_json::json!({
            "passed": report.passed,
            "plot": plotted.path.display().to_string(),
            "plot_text": plotted.text,
            "engines": engines,
            "report": report,
        });
        super::print(&format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default()));
    } else {
        let mut s = summary(&report, &groups);
        s.push_str(&format!("plot: {}", plotted.path.display()));
        if !plotted.text {
            s.push_str(&format!(" (drawn without text: {})", plotted.note));
        }
        s.push('\n');
        s.push_str("the whole report: snic tour --json; the scenario: scenarios/tour.toml\n");
        super::print(&s);
    }
    verdict(&report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use snic_scenario::report::ExpectReport;

    #[test]
    fn the_tour_loads_and_needs_no_files() {
        let l = load_tour().expect("the tour loads");
        let s = &l.scenario;
        assert_eq!(s.nics.len(), 2);
        assert!(s.hosts.len() >= 2 && !s.links.is_empty() && !s.expect.is_empty());
        assert!(s.links.iter().any(|l| l.loss > 0.0), "the link is lossy");
        assert!(TOUR.contains("inline"), "the vSwitch policy is inline");
        for t in &s.traffic {
            assert!(t.pcap.is_none(), "traffic is scripted, not read from files");
        }
    }

    #[test]
    fn counters_group_by_engine_with_the_important_fields_first() {
        let mut r = Report { seed: 3, passed: true, ..Report::default() };
        for (k, v) in [
            ("nic0.rdma.tx_bytes", 70_000),
            ("nic0.rdma.acks_rcvd", 4),
            ("nic0.rdma.req_packets", 70),
            ("nic0.rdma.retransmits", 0),
            ("link.wire.a_to_b.lost", 2),
            ("h0.cq.cq.cqes", 5),
            ("nic1.port.wire.rx_packets", 9),
        ] {
            r.counters.insert(k.into(), v);
        }
        r.expectations.push(ExpectReport {
            name: "x".into(),
            passed: true,
            got: "5".into(),
            ..ExpectReport::default()
        });
        let g = engines(&r);
        let rdma = &g["rdma"]["nic0"];
        let names: Vec<&str> = rdma.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(names, ["req_packets", "tx_bytes", "acks_rcvd"]);
        assert_eq!(g["link"]["wire a->b"], [("lost".to_string(), 2)]);
        assert_eq!(g["cq"]["h0.cq"], [("cqes".to_string(), 5)]);
        assert!(!g.contains_key("port"));
        let text = summary(&r, &g);
        assert!(text.starts_with("snic tour (seed 3): PASS — 1/1 expectations held"), "{text}");
        assert!(text.contains("req_packets 70, tx_bytes 68 KiB, acks_rcvd 4"), "{text}");
    }
}
