//! What a run produced: per-node and per-link counters, each operation's times, each
//! expectation's verdict with a readable diff, and time series for the plot. Serialisable
//! (`snic scenario run --json`) and printable ([`Report::to_text`]).

use serde::Serialize;
use std::collections::BTreeMap;

/// The outcome of one scenario run.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// The seed the run used.
    pub seed: u64,
    /// `sim` or `real`.
    pub mode: String,
    /// Every expectation held and nothing went wrong.
    pub passed: bool,
    /// Simulated (or, with `--real`, elapsed) time at the end, in nanoseconds.
    pub end_ns: u64,
    /// Testbed steps taken (0 on real interfaces).
    pub steps: u64,
    /// Every counter by its scenario name (`nic0.drop.policy_deny`, `link.wire.a_to_b.lost`,
    /// ...), sorted.
    pub counters: BTreeMap<String, u64>,
    /// The timeline's operations, in order.
    pub ops: Vec<OpReport>,
    /// Every expectation (written ones first, then golden data).
    pub expectations: Vec<ExpectReport>,
    /// What went wrong outside the expectations (an operation that failed, the time limit).
    pub errors: Vec<String>,
    /// Notes that do not fail the run (on real interfaces: impairments not applied, ...).
    pub notes: Vec<String>,
    /// Time series for plots.
    pub series: Series,
}

/// One operation of the timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct OpReport {
    /// Its name.
    pub name: String,
    /// What it did (`post_send`, `dma`, ...).
    pub kind: String,
    /// When it started (ns), if it did.
    pub started_ns: Option<u64>,
    /// When it completed (ns), if it did.
    pub done_ns: Option<u64>,
    /// A failure, if any.
    pub error: Option<String>,
}

/// One expectation's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct ExpectReport {
    /// Its name.
    pub name: String,
    /// `counter`, `memory`, `pcap`, `cqes`, `end_time`, or `golden:...`.
    pub kind: String,
    /// Whether it held.
    pub passed: bool,
    /// What was wanted, in a line.
    pub want: String,
    /// What the run got, in a line.
    pub got: String,
    /// When it failed: a readable diff (first differing packet with both decodes, first
    /// differing byte of a buffer, first differing CQE).
    pub diff: Option<String>,
}

/// Time series sampled every `interval_ns` of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Series {
    /// Bucket width in nanoseconds.
    pub interval_ns: u64,
    /// Bytes delivered per bucket, per link direction (`wire a->b`).
    pub links: BTreeMap<String, Vec<u64>>,
    /// CQEs per bucket, per CQ (`h0.cq`).
    pub completions: BTreeMap<String, Vec<u64>>,
}

impl Report {
    /// The report as text: verdict, counters that moved (grouped by node and link), the
    /// operations, the expectations with their diffs.
    pub fn to_text(&self) -> String {
        use core::fmt::Write;
        let mut s = String::new();
        let verdict = if self.passed { "PASS" } else { "FAIL" };
        let _ = writeln!(
            s,
            "scenario {} ({} mode, seed {}): {verdict} at {} ns, {} steps",
            self.scenario, self.mode, self.seed, self.end_ns, self.steps
        );
        let mut group = String::new();
        for (k, v) in &self.counters {
            if *v == 0 {
                continue;
            }
            let g = k.split('.').next().unwrap_or("");
            if g != group {
                group = g.to_string();
                let _ = writeln!(s, "  {group}:");
            }
            let _ = writeln!(s, "    {:<48} {v}", k.get(g.len() + 1..).unwrap_or(k));
        }
        if !self.ops.is_empty() {
            let _ = writeln!(s, "  operations:");
            for o in &self.ops {
                let t = |x: Option<u64>| x.map_or("-".to_string(), |n| format!("{n} ns"));
                let _ = writeln!(
                    s,
                    "    {:<24} {:<10} start {:<14} done {:<14} {}",
                    o.name,
                    o.kind,
                    t(o.started_ns),
                    t(o.done_ns),
                    o.error.as_deref().unwrap_or("")
                );
            }
        }
        if !self.expectations.is_empty() {
            let _ = writeln!(s, "  expectations:");
            // Golden counters are many; the ones that held are summed up in one line.
            let held = |e: &&ExpectReport| e.passed && e.kind == "golden:counter";
            let golden_held = self.expectations.iter().filter(held).count();
            if golden_held > 0 {
                let _ = writeln!(s, "    ok   golden counters: {golden_held} held");
            }
            for e in self.expectations.iter().filter(|e| !held(e)) {
                let mark = if e.passed { "ok  " } else { "FAIL" };
                let _ = writeln!(s, "    {mark} {}: want {}, got {}", e.name, e.want, e.got);
                if let Some(d) = &e.diff {
                    for line in d.lines() {
                        let _ = writeln!(s, "         {line}");
                    }
                }
            }
        }
        for n in &self.notes {
            let _ = writeln!(s, "  note: {n}");
        }
        for e in &self.errors {
            let _ = writeln!(s, "  error: {e}");
        }
        s
    }
}
