//! `snic scenario regress DIR`: every scenario under a directory, run on N threads, a summary
//! table, JUnit XML for CI systems, a progress bar on a terminal.
//!
//! Which files are cases: every `*.toml` and `*.json` under DIR (recursively, in sorted order,
//! skipping `*.golden` directories and hidden ones) that is a scenario. A file that parses as
//! TOML/JSON but has none of a scenario's top-level keys (`nic`, `host`, `link`, `op`,
//! `expect`, ...) is another kind of file kept beside scenarios (a vSwitch policy, say) and is
//! skipped; a file that does not parse at all, or looks like a scenario but does not load, is a
//! failed case.

use super::{EXIT_ERROR, EXIT_FAIL, EXIT_PASS, looks_like_scenario};
use snic_scenario::{RunOptions, load};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Arguments of `snic scenario regress`.
#[derive(Debug, Clone, clap::Args)]
pub struct RegressArgs {
    /// The directory holding the scenarios.
    pub dir: PathBuf,
    /// Scenarios run at once (threads). Default: the machine's available parallelism.
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: Option<u32>,
    /// Also write the results as JUnit XML here.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Seed of every scenario (overrides each one's `seed`).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
}

/// How one case ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Every expectation held.
    Passed,
    /// The scenario ran; these expectations (or run errors) failed.
    Failed {
        /// Names of the failed expectations, then the run's errors.
        failed: Vec<String>,
        /// The failures with their diffs, readable.
        detail: String,
    },
    /// The scenario could not be loaded, built or run.
    Error {
        /// Why (a load error names file, line and field).
        message: String,
    },
}

/// One scenario's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// The scenario's name (or the file's stem when it does not load).
    pub name: String,
    /// Its file.
    pub path: PathBuf,
    /// How it ended.
    pub outcome: Outcome,
    /// Simulated time at the end, when it ran.
    pub sim_ns: Option<u64>,
    /// Wall-clock time the case took.
    pub wall: Duration,
    /// The whole report as text, when it ran.
    pub report: String,
}

impl Case {
    fn passed(&self) -> bool {
        self.outcome == Outcome::Passed
    }
}

/// The cases under `dir` (sorted) and how many TOML/JSON files were skipped as non-scenarios.
pub fn discover(dir: &Path) -> std::io::Result<(Vec<PathBuf>, usize)> {
    let mut files = Vec::new();
    walk(dir, &mut files)?;
    files.sort();
    let mut cases = Vec::new();
    let mut skipped = 0;
    for f in files {
        match looks_like_scenario(&f) {
            Ok(false) => skipped += 1,
            Ok(true) | Err(_) => cases.push(f),
        }
    }
    Ok((cases, skipped))
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') {
            continue;
        }
        if entry.file_type()?.is_dir() {
            if !name.ends_with(".golden") {
                walk(&path, out)?;
            }
        } else if path.extension().is_some_and(|e| e == "toml" || e == "json") {
            out.push(path);
        }
    }
    Ok(())
}

/// Load and run one file.
pub fn run_case(path: &Path, opts: &RunOptions) -> Case {
    let start = Instant::now();
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let mut case = Case {
        name: stem,
        path: path.to_path_buf(),
        outcome: Outcome::Passed,
        sim_ns: None,
        wall: Duration::ZERO,
        report: String::new(),
    };
    match load::load_file(path) {
        Err(e) => case.outcome = Outcome::Error { message: e.to_string() },
        Ok(loaded) => {
            case.name = loaded.scenario.name.clone();
            match snic_scenario::run(&loaded, opts) {
                Err(e) => case.outcome = Outcome::Error { message: e.to_string() },
                Ok(r) => {
                    case.sim_ns = Some(r.end_ns);
                    case.report = r.to_text();
                    if !r.passed {
                        let mut failed = Vec::new();
                        let mut detail = String::new();
                        for e in r.expectations.iter().filter(|e| !e.passed) {
                            failed.push(e.name.clone());
                            detail
                                .push_str(&format!("{}: want {}, got {}\n", e.name, e.want, e.got));
                            if let Some(d) = &e.diff {
                                for line in d.lines() {
                                    detail.push_str(&format!("  {line}\n"));
                                }
                            }
                        }
                        for e in &r.errors {
                            failed.push(format!("error: {e}"));
                            detail.push_str(&format!("error: {e}\n"));
                        }
                        if failed.is_empty() {
                            failed.push("(not passed)".into());
                        }
                        case.outcome = Outcome::Failed { failed, detail };
                    }
                }
            }
        }
    }
    case.wall = start.elapsed();
    case
}

/// Run `files` on `jobs` threads; results in the files' order. `done` is called after each.
pub fn run_all(
    files: &[PathBuf],
    jobs: usize,
    opts: &RunOptions,
    done: &(dyn Fn(&Case) + Sync),
) -> Vec<Case> {
    run_all_with(files, jobs, &|f: &Path| run_case(f, opts), done)
}

/// [`run_all`] with `runner` running one file.
fn run_all_with(
    files: &[PathBuf],
    jobs: usize,
    runner: &(dyn Fn(&Path) -> Case + Sync),
    done: &(dyn Fn(&Case) + Sync),
) -> Vec<Case> {
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Case>>> = files.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, files.len().max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(f) = files.get(i) else { break };
                    // A case that panics is that case's error: the other cases still run and
                    // the table and JUnit XML still come out (a panicking scoped thread would
                    // make `scope` panic too).
                    let case = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runner(f)))
                        .unwrap_or_else(|p| Case {
                            name: f.display().to_string(),
                            path: f.clone(),
                            outcome: Outcome::Error {
                                message: format!("panicked: {}", panic_text(&*p)),
                            },
                            sim_ns: None,
                            wall: Duration::ZERO,
                            report: String::new(),
                        });
                    done(&case);
                    *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(case);
                }
            });
        }
    });
    slots
        .into_iter()
        .zip(files)
        .map(|(m, f)| {
            m.into_inner().unwrap_or_else(|e| e.into_inner()).unwrap_or_else(|| Case {
                name: f.display().to_string(),
                path: f.clone(),
                outcome: Outcome::Error { message: "the worker running it panicked".into() },
                sim_ns: None,
                wall: Duration::ZERO,
                report: String::new(),
            })
        })
        .collect()
}

/// What a panic said.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// A simulated time for the table (`1.250 ms`).
pub fn fmt_ns(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.3} us", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.3} ms", ns as f64 / 1e6),
        _ => format!("{:.3} s", ns as f64 / 1e9),
    }
}

/// The summary table and its last line.
pub fn table(cases: &[Case], skipped: usize) -> String {
    let w = cases.iter().map(|c| c.name.len()).max().unwrap_or(0).max(8);
    let mut s = format!(
        "{:<w$}  {:<6}  {:>12}  {:>9}  {}\n",
        "scenario", "result", "sim time", "wall", "failed"
    );
    for c in cases {
        let (result, failed) = match &c.outcome {
            Outcome::Passed => ("pass", String::new()),
            Outcome::Failed { failed, .. } => ("FAIL", failed.join(", ")),
            Outcome::Error { message } => ("ERROR", message.clone()),
        };
        let sim = c.sim_ns.map_or("-".to_string(), fmt_ns);
        let wall = format!("{:.2} s", c.wall.as_secs_f64());
        s.push_str(&format!("{:<w$}  {result:<6}  {sim:>12}  {wall:>9}  {failed}\n", c.name));
    }
    let passed = cases.iter().filter(|c| c.passed()).count();
    let errors = cases.iter().filter(|c| matches!(c.outcome, Outcome::Error { .. })).count();
    s.push_str(&format!(
        "{} scenarios: {passed} passed, {} failed, {errors} could not run",
        cases.len(),
        cases.len() - passed - errors
    ));
    if skipped > 0 {
        s.push_str(&format!(" ({skipped} other TOML/JSON files skipped)"));
    }
    s.push('\n');
    s
}

/// Escape text for XML 1.0 content and attribute values. Characters XML 1.0 cannot carry at
/// all (control characters other than tab, newline, carriage return) become U+FFFD.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// The cases as JUnit XML: one `testsuite` named `suite`, one `testcase` per scenario, a
/// `failure` (failed expectations with their diffs) or an `error` (could not run).
pub fn junit(suite: &str, cases: &[Case]) -> String {
    let failures = cases.iter().filter(|c| matches!(c.outcome, Outcome::Failed { .. })).count();
    let errors = cases.iter().filter(|c| matches!(c.outcome, Outcome::Error { .. })).count();
    let time: f64 = cases.iter().map(|c| c.wall.as_secs_f64()).sum();
    let x = xml_escape;
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    s.push_str(&format!(
        "<testsuites name=\"snic scenarios\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{time:.3}\">\n",
        cases.len()
    ));
    s.push_str(&format!(
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"0\" time=\"{time:.3}\">\n",
        x(suite),
        cases.len()
    ));
    for c in cases {
        s.push_str(&format!(
            "    <testcase name=\"{}\" classname=\"scenario\" file=\"{}\" time=\"{:.3}\"",
            x(&c.name),
            x(&c.path.display().to_string()),
            c.wall.as_secs_f64()
        ));
        match &c.outcome {
            Outcome::Passed => s.push_str("/>\n"),
            Outcome::Failed { failed, detail } => {
                s.push_str(">\n");
                s.push_str(&format!(
                    "      <failure type=\"expectation\" message=\"{}\">{}</failure>\n",
                    x(&format!("failed: {}", failed.join(", "))),
                    x(detail)
                ));
                s.push_str(&format!("      <system-out>{}</system-out>\n", x(&c.report)));
                s.push_str("    </testcase>\n");
            }
            Outcome::Error { message } => {
                s.push_str(">\n");
                s.push_str(&format!(
                    "      <error type=\"setup\" message=\"{}\">{}</error>\n",
                    x(message),
                    x(message)
                ));
                s.push_str("    </testcase>\n");
            }
        }
    }
    s.push_str("  </testsuite>\n</testsuites>\n");
    s
}

/// Run `snic scenario regress`; returns the exit code.
pub fn run(a: &RegressArgs) -> i32 {
    let (files, skipped) = match discover(&a.dir) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{}: {e}", a.dir.display());
            return EXIT_ERROR;
        }
    };
    if files.is_empty() {
        eprintln!("{}: no scenario files (*.toml, *.json) here", a.dir.display());
        return EXIT_ERROR;
    }
    let jobs = a.jobs.map(|j| j as usize).unwrap_or_else(|| {
        std::thread::available_parallelism().map(std::num::NonZeroUsize::get).unwrap_or(1)
    });
    let pb = if std::io::stderr().is_terminal() {
        let pb = indicatif::ProgressBar::with_draw_target(
            Some(files.len() as u64),
            indicatif::ProgressDrawTarget::stderr(),
        );
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} scenarios {msg}")
        {
            pb.set_style(style);
        }
        pb
    } else {
        indicatif::ProgressBar::hidden()
    };
    let opts = RunOptions { seed: a.seed, ..RunOptions::default() };
    let cases = run_all(&files, jobs, &opts, &|c: &Case| {
        pb.set_message(c.name.clone());
        pb.inc(1);
    });
    pb.finish_and_clear();
    let mut out = table(&cases, skipped);
    for c in &cases {
        if let Outcome::Failed { detail, .. } = &c.outcome {
            out.push_str(&format!("\n{} ({}):\n", c.name, c.path.display()));
            for line in detail.lines() {
                out.push_str(&format!("  {line}\n"));
            }
        }
    }
    super::print(&out);
    if let Some(path) = &a.junit {
        let xml = junit(&a.dir.display().to_string(), &cases);
        if let Err(e) = std::fs::File::create(path).and_then(|mut f| f.write_all(xml.as_bytes())) {
            eprintln!("{}: {e}", path.display());
            return EXIT_ERROR;
        }
    }
    if cases.iter().all(Case::passed) { EXIT_PASS } else { EXIT_FAIL }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(name: &str, outcome: Outcome) -> Case {
        Case {
            name: name.into(),
            path: PathBuf::from(format!("s/{name}.toml")),
            outcome,
            sim_ns: Some(1_500_000),
            wall: Duration::from_millis(20),
            report: "scenario <x> & \"y\"".into(),
        }
    }

    #[test]
    fn a_case_that_panics_is_an_error_and_the_others_still_run() {
        let files: Vec<PathBuf> = ["a.toml", "boom.toml", "c.toml"].map(PathBuf::from).to_vec();
        let runner = |f: &Path| {
            assert!(!f.ends_with("boom.toml"), "the engine fell over");
            case(&f.display().to_string(), Outcome::Passed)
        };
        let cases = run_all_with(&files, 2, &runner, &|_: &Case| {});
        assert_eq!(cases.len(), 3);
        assert!(cases[0].passed() && cases[2].passed());
        match &cases[1].outcome {
            Outcome::Error { message } => assert!(message.contains("fell over"), "{message}"),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn xml_escaping_covers_markup_quotes_and_control_characters() {
        assert_eq!(xml_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
        assert_eq!(xml_escape("x\u{1}y\tz\n"), "x\u{FFFD}y\tz\n");
    }

    #[test]
    fn junit_counts_failures_and_errors_and_escapes_diffs() {
        let cases = [
            case("ok", Outcome::Passed),
            case(
                "bad",
                Outcome::Failed {
                    failed: vec!["rx<count>".into()],
                    detail: "want 3, got 2 & more\n".into(),
                },
            ),
            case("broken", Outcome::Error { message: "b.toml:3: nic[0]: \"x\"".into() }),
        ];
        let x = junit("dir", &cases);
        assert!(x.contains("tests=\"3\" failures=\"1\" errors=\"1\""), "{x}");
        assert!(x.contains("<testcase name=\"ok\" classname=\"scenario\""), "{x}");
        assert!(x.contains("message=\"failed: rx&lt;count&gt;\">want 3, got 2 &amp; more"), "{x}");
        assert!(x.contains("<error type=\"setup\" message=\"b.toml:3: nic[0]: &quot;x&quot;\""));
        assert!(!x.contains("<x>"), "{x}");
    }

    #[test]
    fn the_table_says_what_failed() {
        let t = table(
            &[
                case("ok", Outcome::Passed),
                case("bad", Outcome::Failed { failed: vec!["e1".into()], detail: String::new() }),
            ],
            2,
        );
        assert!(t.lines().nth(1).unwrap().contains("pass") && t.contains("1.500 ms"), "{t}");
        assert!(t.lines().nth(2).unwrap().ends_with("e1"), "{t}");
        assert!(t.contains("2 scenarios: 1 passed, 1 failed, 0 could not run (2 other"), "{t}");
    }
}
