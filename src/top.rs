//! `snic top`: a live view of a running `snic run` or `snic serve` over its control socket.
//!
//! Every `--interval` it takes the counters document (the one `snic stats` prints) and, with
//! a vSwitch, the top flows (`vswitch.top-flows`), and shows rates between the last two
//! samples: per port (packets and bits per second in and out), per stage (packets in and out
//! per second, drops), drops by reason, the top flows by packets and by bytes, the RDMA
//! engine (packets, retransmissions, NAKs, CNPs, timeouts; QPs) and DMA. Rates need two
//! samples, so the first screen comes one interval after the start.
//!
//! The screen is drawn with ratatui on crossterm (alternate screen, raw mode; `q`, Esc or
//! Ctrl-C quit). `--once` prints one frame as plain text (two samples `--interval` apart) and
//! exits, for scripts. Both draw the same [`Frame`].

use crate::control::{Request, TopBy, query, request};
use crate::stats::{DocPort, doc_ports};
use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Arguments of `snic top`.
#[derive(Debug, clap::Args)]
pub struct TopArgs {
    /// Control socket of the running `snic run` or `snic serve` (its `--control PATH`).
    #[arg(long, value_name = "PATH")]
    pub control: PathBuf,
    /// Milliseconds between samples (and screen refreshes).
    #[arg(long, value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    pub interval: u64,
    /// Print one frame as text (two samples an interval apart) and exit.
    #[arg(long)]
    pub once: bool,
    /// Flows shown in each top-flows table.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub flows: usize,
}

/// One sample: the counters document, the top flows (by packets, by bytes; none without a
/// vSwitch) and when it was taken.
#[derive(Debug, Clone)]
pub struct Sample {
    doc: Value,
    flows: Option<(Vec<Value>, Vec<Value>)>,
    at: Instant,
}

/// Take a sample over the control socket.
pub fn sample(path: &Path, n: usize) -> Result<Sample> {
    let text = query(path)?;
    let doc: Value = serde_json::from_str(&text).context("counters document")?;
    let top = |by| {
        request(path, &Request::TopFlows { n, by })
            .ok()
            .and_then(|v| v["flows"].as_array().cloned())
    };
    let flows = top(TopBy::Packets).zip(top(TopBy::Bytes));
    Ok(Sample { doc, flows, at: Instant::now() })
}

/// One table of a frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// Its title.
    pub title: String,
    /// Column headers.
    pub header: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
}

impl Section {
    fn new(title: &str, header: &[&str], rows: Vec<Vec<String>>) -> Section {
        let header = header.iter().map(|h| h.to_string()).collect();
        Section { title: title.into(), header, rows }
    }
}

/// What one screen shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// The first line: what is watched, over what interval.
    pub title: String,
    /// The tables, top to bottom.
    pub sections: Vec<Section>,
}

/// `x` per second with a k/M/G prefix and `unit` (`0pps`, `12.3kpps`, `1.20Gbit/s`).
pub fn rate(x: f64, unit: &str) -> String {
    let x = if x.is_finite() && x > 0.0 { x } else { 0.0 };
    let (v, p) = if x >= 1e9 {
        (x / 1e9, "G")
    } else if x >= 1e6 {
        (x / 1e6, "M")
    } else if x >= 1e3 {
        (x / 1e3, "k")
    } else {
        (x, "")
    };
    if x == 0.0 {
        format!("0{unit}")
    } else if v >= 100.0 {
        format!("{v:.0}{p}{unit}")
    } else if v >= 10.0 {
        format!("{v:.1}{p}{unit}")
    } else {
        format!("{v:.2}{p}{unit}")
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Per second between two values of a counter (a counter that went back, as after a
/// restart, gives 0).
fn per_sec(new: u64, old: u64, secs: f64) -> f64 {
    if secs > 0.0 { new.saturating_sub(old) as f64 / secs } else { 0.0 }
}

/// The stages of a run's or a server's document.
fn stages(doc: &Value) -> Vec<Value> {
    let s =
        if doc["stages"].is_array() { &doc["stages"] } else { &doc["nic"]["pipeline"]["stages"] };
    s.as_array().cloned().unwrap_or_default()
}

/// Drops by reason: the run's `drops`, or the sum over stages and ports (a server).
fn drops(doc: &Value) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    if let Some(d) = doc["drops"].as_object() {
        for (k, v) in d {
            m.insert(k.clone(), u(v));
        }
        return m;
    }
    let mut add = |d: &Value| {
        for (k, v) in d.as_object().into_iter().flatten() {
            *m.entry(k.clone()).or_insert(0) += u(v);
        }
    };
    for s in stages(doc) {
        add(&s["drops"]);
    }
    for p in doc_ports(doc) {
        add(&p.counters["rx_drops"]);
        add(&p.counters["tx_drops"]);
    }
    m
}

/// Seconds between two samples: by the documents' own clock (`elapsed_secs`, when each
/// snapshot was taken) when both have it, else by when they were fetched. The control socket
/// answers from a snapshot refreshed every 100 ms, so fetch times alone are off by up to that
/// much, and rates with them.
fn interval_secs(old: &Sample, new: &Sample) -> f64 {
    match (old.doc["elapsed_secs"].as_f64(), new.doc["elapsed_secs"].as_f64()) {
        (Some(a), Some(b)) if b > a => b - a,
        _ => new.at.saturating_duration_since(old.at).as_secs_f64(),
    }
}

/// The frame between samples `old` and `new`.
pub fn frame(control: &Path, old: &Sample, new: &Sample) -> Frame {
    let secs = interval_secs(old, new);
    let (o, n) = (&old.doc, &new.doc);
    let mut sections = Vec::new();

    let old_ports: BTreeMap<u64, &Value> =
        doc_ports(o).iter().map(|p| (p.id, p.counters)).collect();
    let mut rows = Vec::new();
    for DocPort { id, name, counters: p, .. } in doc_ports(n) {
        let q = old_ports.get(&id).copied().unwrap_or(&Value::Null);
        let r = |k: &str| per_sec(u(&p[k]), u(&q[k]), secs);
        rows.push(vec![
            id.to_string(),
            name.to_owned(),
            rate(r("rx_packets"), "pps"),
            rate(r("rx_bytes") * 8.0, "bit/s"),
            rate(r("tx_packets"), "pps"),
            rate(r("tx_bytes") * 8.0, "bit/s"),
            u(&p["rx_packets"]).to_string(),
            u(&p["tx_packets"]).to_string(),
        ]);
    }
    sections.push(Section::new(
        "ports",
        &["port", "name", "rx", "rx", "tx", "tx", "rx total", "tx total"],
        rows,
    ));

    // Queue workers (`snic run` with ports split per worker): each worker's queues, summed.
    // (A server's `per_worker` are DMA workers, without `rx_packets`: not shown here.)
    let queue_workers = |d: &Value| -> Vec<Value> {
        let all = d["per_worker"].as_array().cloned().unwrap_or_default();
        all.into_iter().filter(|w| w.get("rx_packets").is_some()).collect()
    };
    let (old_workers, workers) = (queue_workers(o), queue_workers(n));
    if !workers.is_empty() {
        let kernel = |w: &Value| -> u64 {
            ["rx_kernel_drops", "rx_ring_full", "rx_fill_empty"].iter().map(|k| u(&w[k])).sum()
        };
        let rows = workers
            .iter()
            .enumerate()
            .map(|(k, w)| {
                let q = old_workers.get(k).cloned().unwrap_or(Value::Null);
                let r = |key: &str| per_sec(u(&w[key]), u(&q[key]), secs);
                vec![
                    k.to_string(),
                    rate(r("rx_packets"), "pps"),
                    rate(r("tx_packets"), "pps"),
                    rate(per_sec(kernel(w), kernel(&q), secs), "pps"),
                    u(&w["rx_packets"]).to_string(),
                    kernel(w).to_string(),
                ]
            })
            .collect();
        sections.push(Section::new(
            "workers (their queues of every port)",
            &["worker", "rx", "tx", "kernel drops", "rx total", "kernel drops total"],
            rows,
        ));
    }

    let old_stages = stages(o);
    let mut rows = Vec::new();
    for (i, s) in stages(n).iter().enumerate() {
        let q = old_stages.get(i).cloned().unwrap_or(Value::Null);
        let r = |k: &str| per_sec(u(&s[k]), u(&q[k]), secs);
        let total =
            |v: &Value| v["drops"].as_object().map_or(0, |d| d.values().map(u).sum::<u64>());
        rows.push(vec![
            s["name"].as_str().unwrap_or("?").to_owned(),
            rate(r("packets_in"), "pps"),
            rate(r("packets_out"), "pps"),
            rate(per_sec(total(s), total(&q), secs), "pps"),
            u(&s["packets_in"]).to_string(),
            total(s).to_string(),
        ]);
    }
    sections.push(Section::new(
        "stages",
        &["stage", "in", "out", "drops", "in total", "drops total"],
        rows,
    ));

    let od = drops(o);
    let rows: Vec<Vec<String>> = drops(n)
        .into_iter()
        .filter(|(_, v)| *v > 0)
        .map(|(k, v)| {
            let was = od.get(&k).copied().unwrap_or(0);
            vec![k, rate(per_sec(v, was, secs), "pps"), v.to_string()]
        })
        .collect();
    sections.push(Section::new("drops by reason", &["reason", "rate", "total"], rows));

    if let Some((by_packets, by_bytes)) = &new.flows {
        let old_flows: BTreeMap<(u64, String), (u64, u64)> = old
            .flows
            .iter()
            .flat_map(|(a, b)| a.iter().chain(b))
            .map(|f| {
                (
                    (u(&f["shard"]), f["key"].as_str().unwrap_or("").to_owned()),
                    (u(&f["packets"]), u(&f["bytes"])),
                )
            })
            .collect();
        for (title, list) in
            [("top flows by packets", by_packets), ("top flows by bytes", by_bytes)]
        {
            let rows = list
                .iter()
                .map(|f| {
                    let key = (u(&f["shard"]), f["key"].as_str().unwrap_or("").to_owned());
                    let (p, b) = (u(&f["packets"]), u(&f["bytes"]));
                    let (rp, rb) = match old_flows.get(&key) {
                        Some(&(op, ob)) => (
                            rate(per_sec(p, op, secs), "pps"),
                            rate(per_sec(b, ob, secs) * 8.0, "bit/s"),
                        ),
                        None => ("new".into(), "new".into()),
                    };
                    vec![key.1, rp, rb, p.to_string(), b.to_string()]
                })
                .collect();
            sections.push(Section::new(title, &["flow", "rate", "rate", "packets", "bytes"], rows));
        }
    }

    let re = &n["rdma"]["engine"];
    if re.is_object() {
        let qe = &o["rdma"]["engine"];
        let r = |k: &str| per_sec(u(&re[k]), u(&qe[k]), secs);
        let naks = |e: &Value| {
            ["seq_naks_rcvd", "rnr_naks_rcvd", "err_naks_rcvd"]
                .iter()
                .map(|k| u(&e[*k]))
                .sum::<u64>()
        };
        sections.push(Section {
            title: "rdma".into(),
            header: ["qps", "tx", "tx", "rx", "retransmits", "naks rcvd", "cnps", "timeouts"]
                .map(String::from)
                .to_vec(),
            rows: vec![vec![
                u(&n["rdma"]["qps"]).to_string(),
                rate(r("tx_packets"), "pps"),
                rate(r("tx_bytes") * 8.0, "bit/s"),
                rate(r("rx_packets"), "pps"),
                rate(r("retransmits"), "/s"),
                rate(per_sec(naks(re), naks(qe), secs), "/s"),
                rate(r("cnps_rcvd") + r("cnps_sent"), "/s"),
                u(&re["timeouts"]).to_string(),
            ]],
        });
    }
    if let Some(list) = n["rdma"]["qp_list"].as_array() {
        let old_qps: BTreeMap<u64, &Value> = o["rdma"]["qp_list"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|q| (u(&q["qpn"]), q))
            .collect();
        // PSNs are 24 bits: an advance is the difference modulo 2^24.
        let psn_rate = |new: &Value, old: &Value, k: &str| {
            let d = (u(&new[k]).wrapping_sub(u(&old[k]))) & 0xff_ffff;
            rate(if secs > 0.0 { d as f64 / secs } else { 0.0 }, "pps")
        };
        let rows = list
            .iter()
            .map(|q| {
                let (sent, rcvd) = match old_qps.get(&u(&q["qpn"])) {
                    Some(old) => (psn_rate(q, old, "next_psn"), psn_rate(q, old, "expected_psn")),
                    None => ("new".into(), "new".into()),
                };
                vec![
                    u(&q["qpn"]).to_string(),
                    q["state"].as_str().unwrap_or("?").to_owned(),
                    u(&q["dest_qpn"]).to_string(),
                    sent,
                    rcvd,
                    u(&q["outstanding"]).to_string(),
                ]
            })
            .collect();
        sections.push(Section::new(
            "rdma qps (PSN advance: requests sent, requests received)",
            &["qpn", "state", "dest", "sent", "received", "wqes"],
            rows,
        ));
    }
    let de = &n["engine"];
    if de.is_object() {
        let qe = &o["engine"];
        let r = |k: &str| per_sec(u(&de[k]), u(&qe[k]), secs);
        sections.push(Section {
            title: "dma".into(),
            header: ["descs", "h2c", "c2h", "completions", "clients"].map(String::from).to_vec(),
            rows: vec![vec![
                rate(r("descs"), "/s"),
                rate(r("h2c_bytes") * 8.0, "bit/s"),
                rate(r("c2h_bytes") * 8.0, "bit/s"),
                rate(r("completions"), "/s"),
                u(&n["clients"]).to_string(),
            ]],
        });
    }
    Frame {
        title: format!(
            "snic top: {}  interval {:.0} ms  (q quits)",
            control.display(),
            secs * 1000.0
        ),
        sections,
    }
}

/// The frame as plain text: each section's title, then its table with aligned columns.
pub fn text(f: &Frame) -> String {
    let mut out = format!("{}\n", f.title);
    for s in &f.sections {
        out.push_str(&format!("\n{}\n", s.title));
        let cols = s.header.len();
        let mut w = vec![0usize; cols];
        for row in std::iter::once(&s.header).chain(&s.rows) {
            for (i, c) in row.iter().enumerate().take(cols) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        if s.rows.is_empty() {
            out.push_str("  (none)\n");
            continue;
        }
        for row in std::iter::once(&s.header).chain(&s.rows) {
            let cells: Vec<String> =
                row.iter().enumerate().map(|(i, c)| format!("{c:<width$}", width = w[i])).collect();
            out.push_str(&format!("  {}\n", cells.join("  ").trim_end()));
        }
    }
    out
}

/// Entry point of `snic top`.
pub fn run(args: TopArgs) -> Result<()> {
    let interval = Duration::from_millis(args.interval);
    let first = sample(&args.control, args.flows)?;
    if args.once {
        std::thread::sleep(interval);
        let second = sample(&args.control, args.flows)?;
        print!("{}", text(&frame(&args.control, &first, &second)));
        return Ok(());
    }
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        bail!("snic top needs a terminal (use --once for a text frame)");
    }
    tui(&args, first, interval)
}

/// Leaves raw mode and the alternate screen however the view ends.
struct TermGuard;

impl Drop for TermGuard {
    fn drop(&mut self) {
        let _ = crossterm::terminal::disable_raw_mode();
        let _ = crossterm::execute!(
            std::io::stdout(),
            crossterm::terminal::LeaveAlternateScreen,
            crossterm::cursor::Show
        );
    }
}

fn tui(args: &TopArgs, first: Sample, interval: Duration) -> Result<()> {
    use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
    use ratatui::backend::CrosstermBackend;
    crossterm::terminal::enable_raw_mode().context("raw mode")?;
    let _guard = TermGuard;
    // Cleared here, not with `Terminal::clear`, which asks the terminal for the cursor
    // position (and fails on a terminal that does not answer).
    crossterm::execute!(
        std::io::stdout(),
        crossterm::terminal::EnterAlternateScreen,
        crossterm::terminal::Clear(crossterm::terminal::ClearType::All)
    )?;
    let mut term = ratatui::Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
    let mut last = first;
    let mut shown: Option<Frame> = None;
    let mut error: Option<String> = None;
    let mut next = Instant::now() + interval;
    loop {
        term.draw(|f| draw(f, shown.as_ref(), error.as_deref()))?;
        let wait = next.saturating_duration_since(Instant::now());
        if event::poll(wait)? {
            if let Event::Key(k) = event::read()?
                && k.kind == KeyEventKind::Press
            {
                let ctrl_c =
                    k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                if matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c {
                    return Ok(());
                }
            }
            continue;
        }
        next = Instant::now() + interval;
        match sample(&args.control, args.flows) {
            Ok(s) => {
                shown = Some(frame(&args.control, &last, &s));
                last = s;
                error = None;
            }
            Err(e) => error = Some(format!("{e:#}")),
        }
    }
}

fn draw(f: &mut ratatui::Frame, frame: Option<&Frame>, error: Option<&str>) {
    use ratatui::layout::{Constraint, Layout};
    use ratatui::style::{Modifier, Style};
    use ratatui::widgets::{Block, Paragraph, Row, Table};
    let Some(fr) = frame else {
        let msg = error.unwrap_or("snic top: sampling (rates need two samples)...");
        f.render_widget(Paragraph::new(msg.to_owned()), f.area());
        return;
    };
    let mut heights = vec![Constraint::Length(1)];
    heights.extend(fr.sections.iter().map(|s| Constraint::Length(s.rows.len().max(1) as u16 + 3)));
    heights.push(Constraint::Min(0));
    let areas = Layout::vertical(heights).split(f.area());
    let title = match error {
        Some(e) => format!("{}  [error: {e}]", fr.title),
        None => fr.title.clone(),
    };
    f.render_widget(Paragraph::new(title), areas[0]);
    for (s, area) in fr.sections.iter().zip(areas.iter().skip(1)) {
        let cols = s.header.len();
        let mut w = vec![0u16; cols];
        for row in std::iter::once(&s.header).chain(&s.rows) {
            for (i, c) in row.iter().enumerate().take(cols) {
                w[i] = w[i].max(c.chars().count() as u16);
            }
        }
        let rows: Vec<Row> = if s.rows.is_empty() {
            vec![Row::new(vec!["(none)".to_owned()])]
        } else {
            s.rows.iter().map(|r| Row::new(r.clone())).collect()
        };
        let table = Table::new(rows, w.into_iter().map(Constraint::Length).collect::<Vec<_>>())
            .header(Row::new(s.header.clone()).style(Style::default().add_modifier(Modifier::BOLD)))
            .column_spacing(2)
            .block(Block::bordered().title(s.title.clone()));
        f.render_widget(table, *area);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rates_are_formatted_with_prefixes() {
        assert_eq!(rate(0.0, "pps"), "0pps");
        assert_eq!(rate(f64::NAN, "pps"), "0pps");
        assert_eq!(rate(-3.0, "pps"), "0pps");
        assert_eq!(rate(5.0, "pps"), "5.00pps");
        assert_eq!(rate(12_345.0, "pps"), "12.3kpps");
        assert_eq!(rate(999_000.0, "pps"), "999kpps");
        assert_eq!(rate(1.5e9, "bit/s"), "1.50Gbit/s");
    }

    #[test]
    fn a_frame_has_rates_between_two_samples() {
        let t0 = Instant::now();
        let doc = |rx: u64, drop: u64| {
            json!({"ports": [{"id": 0, "name": "gen:9", "rx_packets": rx, "rx_bytes": rx * 100,
                              "tx_packets": 0, "tx_bytes": 0}],
                   "stages": [{"name": "parse", "packets_in": rx, "packets_out": rx - drop,
                               "drops": {"malformed.truncated": drop}}],
                   "drops": {"malformed.truncated": drop}})
        };
        let a = Sample { doc: doc(1000, 0), flows: None, at: t0 };
        let b = Sample { doc: doc(3000, 10), flows: None, at: t0 + Duration::from_secs(2) };
        let f = frame(Path::new("ctl"), &a, &b);
        assert_eq!(
            f.sections[0].rows[0],
            ["0", "gen:9", "1.00kpps", "800kbit/s", "0pps", "0bit/s", "3000", "0"]
        );
        assert_eq!(f.sections[1].rows[0][..4], ["parse", "1.00kpps", "995pps", "5.00pps"]);
        assert_eq!(f.sections[2].rows, [["malformed.truncated", "5.00pps", "10"]]);
        assert_eq!(f.sections.len(), 3, "no vSwitch, RDMA or DMA sections without them");
        let t = text(&f);
        assert!(t.contains("\nports\n  port  name   rx        rx"), "{t}");

        // Queue workers: a section after the ports, one row per worker.
        let with_workers = |rx: [u64; 2], drops: u64| {
            let mut d = doc(rx[0] + rx[1], 0);
            d["per_worker"] = json!([
                {"rx_packets": rx[0], "tx_packets": rx[0], "rx_kernel_drops": drops},
                {"rx_packets": rx[1], "tx_packets": 0, "rx_ring_full": 1},
            ]);
            d
        };
        let a = Sample { doc: with_workers([400, 600], 2), flows: None, at: t0 };
        let b = Sample {
            doc: with_workers([2400, 600], 6),
            flows: None,
            at: t0 + Duration::from_secs(2),
        };
        let f = frame(Path::new("ctl"), &a, &b);
        assert_eq!(f.sections[1].title, "workers (their queues of every port)");
        assert_eq!(f.sections[1].rows[0], ["0", "1.00kpps", "1.00kpps", "2.00pps", "2400", "6"]);
        assert_eq!(f.sections[1].rows[1], ["1", "0pps", "0pps", "0pps", "600", "1"]);
        // A server's DMA workers have no packet counters: no such section.
        let mut d = doc(10, 0);
        d["per_worker"] = json!([{"descs": 5}]);
        let s = Sample { doc: d, flows: None, at: t0 };
        assert!(
            frame(Path::new("ctl"), &s, &s)
                .sections
                .iter()
                .all(|x| !x.title.starts_with("workers"))
        );
    }

    #[test]
    fn rates_use_the_documents_clock_when_they_have_one() {
        let t0 = Instant::now();
        let doc = |rx: u64, at: Option<f64>| {
            let mut d = json!({"ports": [{"id": 0, "name": "p", "rx_packets": rx}]});
            if let Some(at) = at {
                d["elapsed_secs"] = json!(at);
            }
            d
        };
        let rx_rate = |a: Value, b: Value| {
            let a = Sample { doc: a, flows: None, at: t0 };
            let b = Sample { doc: b, flows: None, at: t0 + Duration::from_secs(1) };
            frame(Path::new("ctl"), &a, &b).sections[0].rows[0][2].clone()
        };
        // Fetched 1 s apart, taken 2 s apart: 2000 packets in 2 s.
        assert_eq!(rx_rate(doc(0, Some(1.0)), doc(2000, Some(3.0))), "1.00kpps");
        // No clock (or the same snapshot twice): the fetch times.
        assert_eq!(rx_rate(doc(0, None), doc(2000, None)), "2.00kpps");
        assert_eq!(rx_rate(doc(0, Some(1.0)), doc(0, Some(1.0))), "0pps");
    }

    #[test]
    fn qp_rates_are_psn_advances_across_the_24_bit_wrap() {
        let t0 = Instant::now();
        let doc = |psn: u64, epsn: u64, more: bool| {
            let mut qps = vec![json!({"qpn": 17, "state": "Rts", "dest_qpn": 18,
                                      "next_psn": psn, "expected_psn": epsn, "outstanding": 2})];
            if more {
                qps.push(json!({"qpn": 19, "state": "Init", "next_psn": 0, "expected_psn": 0}));
            }
            json!({"rdma": {"engine": {"tx_packets": psn}, "qps": qps.len(), "qp_list": qps}})
        };
        let a = Sample { doc: doc(0xff_fff0, 100, false), flows: None, at: t0 };
        let b = Sample { doc: doc(0x10, 100, true), flows: None, at: t0 + Duration::from_secs(1) };
        let f = frame(Path::new("ctl"), &a, &b);
        let s = f.sections.iter().find(|s| s.title.starts_with("rdma qps")).expect("qp section");
        assert_eq!(s.rows[0], ["17", "Rts", "18", "32.0pps", "0pps", "2"]);
        assert_eq!(s.rows[1][3..5], ["new", "new"]);
    }
}
