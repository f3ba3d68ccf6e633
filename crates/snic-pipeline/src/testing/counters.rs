//! Counter assertions: a test names the counters a step must move and by how much, and the
//! check fails when any other counter moved.
//!
//! Any counters that implement `serde::Serialize` ([`crate::Counters`], the vSwitch's and the
//! RDMA engine's statistics) are flattened into dotted paths to their integer
//! leaves: `stages.parse.drops.malformed.truncated`, `ports.1.tx_packets`. An array element
//! with a label field (`name`, `port` or `id`) is keyed by its label (stages by stage name,
//! ports by port number; a label seen again in the same array gets `#2`, `#3`, ...), others by
//! their index; labels are not counters. Floating-point leaves
//! (elapsed times) and strings are not counters either and are left out.
//!
//! ```
//! use snic_pipeline::testing::counters::CounterCheck;
//! # #[derive(serde::Serialize, Default)] struct Stats { rx: u64, drops: u64 }
//! let mut stats = Stats::default();
//! let mut check = CounterCheck::new(&stats);
//! stats.rx += 1;
//! check.assert_moved(&stats, &[("rx", 1)]); // passes; also fails if `drops` had moved
//! ```

use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Every integer counter of a value, by dotted path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot(BTreeMap<String, i128>);

impl Snapshot {
    /// Flatten `counters` (anything that serialises; a value that does not is a test bug and
    /// panics with the serialiser's reason).
    #[track_caller]
    pub fn of(counters: &impl Serialize) -> Snapshot {
        let v = serde_json::to_value(counters).expect("counters serialise to JSON");
        let mut map = BTreeMap::new();
        flatten(&v, &mut String::new(), &mut map);
        Snapshot(map)
    }

    /// The counter at `path` (0 when absent: serialisers leave zero drop reasons out).
    pub fn get(&self, path: &str) -> i128 {
        self.0.get(path).copied().unwrap_or(0)
    }

    /// Every counter whose value differs from `earlier`'s, with the change (absent counts as 0).
    pub fn moved_since(&self, earlier: &Snapshot) -> BTreeMap<String, i128> {
        let mut out = BTreeMap::new();
        for k in self.0.keys().chain(earlier.0.keys()) {
            let d = self.get(k) - earlier.get(k);
            if d != 0 {
                out.insert(k.clone(), d);
            }
        }
        out
    }

    /// The counter paths, in order.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }
}

/// Fields that label an array element instead of counting: the element is keyed by the first
/// one present, and none of them is a counter.
const LABELS: [&str; 3] = ["name", "port", "id"];

fn flatten(v: &Value, path: &mut String, out: &mut BTreeMap<String, i128>) {
    let len = path.len();
    let mut child = |key: &str, v: &Value, path: &mut String| {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key);
        flatten(v, path, out);
        path.truncate(len);
    };
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                child(k, v, path);
            }
        }
        Value::Array(a) => {
            let labels = unique_labels(a.iter().enumerate().map(|(i, v)| {
                LABELS
                    .iter()
                    .find_map(|l| match v.get(l)? {
                        Value::String(s) => Some(s.clone()),
                        Value::Number(n) => Some(n.to_string()),
                        _ => None,
                    })
                    .unwrap_or_else(|| i.to_string())
            }));
            for (v, label) in a.iter().zip(labels) {
                match v {
                    Value::Object(m) => {
                        let mut m = m.clone();
                        for l in LABELS {
                            m.remove(l);
                        }
                        child(&label, &Value::Object(m), path);
                    }
                    _ => child(&label, v, path),
                }
            }
        }
        Value::Number(n) => {
            if let Some(x) = n.as_i64() {
                out.insert(path.clone(), i128::from(x));
            } else if let Some(x) = n.as_u64() {
                out.insert(path.clone(), i128::from(x));
            }
        }
        Value::Bool(_) | Value::String(_) | Value::Null => {}
    }
}

/// The keys of array elements labelled `labels`, in order: a label used again gets `#2`, `#3`,
/// ... (a pipeline may run two `tap` stages), so no element hides another.
pub fn unique_labels(labels: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    labels
        .into_iter()
        .map(|l| {
            let n = seen.entry(l.clone()).or_default();
            *n += 1;
            if *n == 1 { l } else { format!("{l}#{n}") }
        })
        .collect()
}

/// Assert that from `before` to `after` exactly the counters in `expect` moved, each by its
/// amount, and nothing else moved. The message lists every difference.
#[track_caller]
pub fn assert_moved(before: &Snapshot, after: &Snapshot, expect: &[(&str, i128)]) {
    let moved = after.moved_since(before);
    let mut want: BTreeMap<&str, i128> = BTreeMap::new();
    for (k, d) in expect {
        *want.entry(k).or_default() += d;
    }
    let mut problems = String::new();
    for (k, d) in &want {
        let got = moved.get(*k).copied().unwrap_or(0);
        if got != *d {
            let _ = writeln!(problems, "  {k}: expected to move by {d}, moved by {got}");
        }
    }
    for (k, d) in &moved {
        if !want.contains_key(k.as_str()) {
            let _ = writeln!(problems, "  {k}: moved by {d}, expected not to move");
        }
    }
    assert!(problems.is_empty(), "counters did not move as expected:\n{problems}");
}

/// A running check: remembers the counters, and after each step asserts what moved and takes
/// the new values as the next baseline.
#[derive(Debug, Clone)]
pub struct CounterCheck {
    last: Snapshot,
    ignored: Vec<String>,
}

impl CounterCheck {
    /// Start from `counters` as they are now.
    #[track_caller]
    pub fn new(counters: &impl Serialize) -> CounterCheck {
        CounterCheck { last: Snapshot::of(counters), ignored: Vec::new() }
    }

    /// Leave counters whose path starts with `prefix` out of every check (gauges such as a
    /// stage's `held`, which rise and fall by design).
    pub fn ignore(mut self, prefix: &str) -> CounterCheck {
        self.ignored.push(prefix.to_string());
        self
    }

    /// Assert that since the last check exactly the counters in `expect` moved, by their
    /// amounts, and nothing else (but ignored prefixes) did; then take `counters` as the new
    /// baseline.
    #[track_caller]
    pub fn assert_moved(&mut self, counters: &impl Serialize, expect: &[(&str, i128)]) {
        let now = Snapshot::of(counters);
        let last = core::mem::replace(&mut self.last, now.clone());
        assert_moved(&self.filtered(last), &self.filtered(now), expect);
    }

    /// What moved since the last check (ignored prefixes left out), and take `counters` as
    /// the new baseline: for tests that judge the moves themselves.
    #[track_caller]
    pub fn take_moved(&mut self, counters: &impl Serialize) -> BTreeMap<String, i128> {
        let now = Snapshot::of(counters);
        let moved = self.filtered(now.clone()).moved_since(&self.filtered(self.last.clone()));
        self.last = now;
        moved
    }

    fn filtered(&self, mut s: Snapshot) -> Snapshot {
        s.0.retain(|k, _| !self.ignored.iter().any(|p| k.starts_with(p.as_str())));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Counters, DropReason, PortId, StageCounters};

    fn counters() -> Counters {
        let mut c = Counters::default();
        c.stages.push(StageCounters { name: "parse".into(), ..Default::default() });
        c.stages.push(StageCounters { name: "l2fwd".into(), ..Default::default() });
        c.port_mut(PortId(1));
        c
    }

    #[test]
    fn flattens_stages_by_name_and_ports_by_index() {
        let mut c = counters();
        c.stages[0].drops.add(DropReason::NoEgress);
        c.ports[1].tx_packets = 3;
        let s = Snapshot::of(&c);
        assert_eq!(s.get("stages.parse.drops.no_egress"), 1);
        assert_eq!(s.get("ports.1.tx_packets"), 3);
        assert_eq!(s.get("stages.l2fwd.packets_in"), 0);
        assert!(s.paths().any(|p| p == "stages.l2fwd.packets_in"), "zero counters are listed too");
        assert!(!s.paths().any(|p| p.ends_with(".port")), "labels are not counters");
    }

    #[test]
    fn passes_when_exactly_the_named_counters_moved() {
        let mut c = counters();
        let mut check = CounterCheck::new(&c);
        c.stages[0].packets_in += 2;
        c.stages[0].drops.add(DropReason::NoEgress);
        check.assert_moved(
            &c,
            &[("stages.parse.packets_in", 2), ("stages.parse.drops.no_egress", 1)],
        );
        // The baseline moved on: nothing changed since.
        check.assert_moved(&c, &[]);
    }

    #[test]
    #[should_panic(expected = "stages.l2fwd.packets_out: moved by 1, expected not to move")]
    fn fails_when_another_counter_moved() {
        let mut c = counters();
        let mut check = CounterCheck::new(&c);
        c.stages[0].packets_in += 1;
        c.stages[1].packets_out += 1;
        check.assert_moved(&c, &[("stages.parse.packets_in", 1)]);
    }

    #[test]
    #[should_panic(expected = "stages.parse.packets_in: expected to move by 2, moved by 1")]
    fn fails_when_a_named_counter_moved_by_another_amount() {
        let mut c = counters();
        let mut check = CounterCheck::new(&c);
        c.stages[0].packets_in += 1;
        check.assert_moved(&c, &[("stages.parse.packets_in", 2)]);
    }

    #[test]
    #[should_panic(expected = "ports.1.rx_packets: expected to move by 1, moved by 0")]
    fn fails_when_a_named_counter_did_not_move() {
        let c = counters();
        let mut check = CounterCheck::new(&c);
        check.assert_moved(&c, &[("ports.1.rx_packets", 1)]);
    }

    #[test]
    #[should_panic(expected = "stages.tap#2.packets_in: moved by 5, expected not to move")]
    fn a_stage_name_used_twice_hides_nothing() {
        let mut c = counters();
        c.stages.push(StageCounters { name: "tap".into(), ..Default::default() });
        c.stages.push(StageCounters { name: "tap".into(), ..Default::default() });
        let mut check = CounterCheck::new(&c);
        c.stages[3].packets_in += 5;
        check.assert_moved(&c, &[]);
    }

    #[test]
    fn ignored_prefixes_are_left_out() {
        let mut c = counters();
        let mut check = CounterCheck::new(&c).ignore("stages.parse.held");
        c.stages[0].held = 5;
        check.assert_moved(&c, &[]);
        c.stages[0].held = 0;
        c.stages[1].errors += 1;
        assert_eq!(
            check.take_moved(&c).into_iter().collect::<Vec<_>>(),
            [("stages.l2fwd.errors".to_string(), 1)]
        );
    }
}
