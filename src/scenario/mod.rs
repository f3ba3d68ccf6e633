//! `snic scenario`: whole systems of NICs, hosts and links described in a file (`snic_scenario`),
//! run on the simulated clock (or real interfaces) and checked against their expectations.
//!
//! - `run FILE`: load, run, print the report (text or `--json`);
//! - `record FILE`: run and write the golden data next to the scenario;
//! - `regress DIR`: every scenario under a directory on N threads, a summary table, JUnit XML;
//! - `check FILE...`: load and validate only.
//!
//! Exit codes (every sub-command): **0** every scenario ran and every expectation held;
//! **1** a scenario ran but an expectation failed (or the run reported an error, such as the
//! time limit); **2** a scenario could not be run at all: it does not load (the message names
//! file, line and field), its system cannot be built, or the mode is unsupported. `regress`
//! exits 1 when any case failed, including cases that did not load; 2 only when the directory
//! cannot be read or holds no scenario. `check` exits 0 when every file is valid, else 2.

pub mod plot;
pub mod regress;
pub mod tour;

use snic_scenario::{Loaded, Report, RunOptions, ScenarioError, load};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Every expectation held.
pub const EXIT_PASS: i32 = 0;
/// A scenario ran and an expectation (or the run) failed.
pub const EXIT_FAIL: i32 = 1;
/// A scenario could not be loaded, built or run.
pub const EXIT_ERROR: i32 = 2;

/// Arguments of `snic scenario`.
#[derive(Debug, clap::Args)]
pub struct ScenarioArgs {
    #[command(subcommand)]
    command: ScenarioCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ScenarioCommand {
    /// Run a scenario and print its report; exit 0 only when every expectation held
    /// (1: an expectation failed; 2: the file does not load or the system cannot be built).
    Run(RunArgs),
    /// Run a scenario and write its golden data (its `[golden]` table) next to it, for a person
    /// to review and commit; print the files written and the report.
    Record(RunArgs),
    /// Run every scenario (`*.toml`, `*.json`) under a directory: a summary table, JUnit XML,
    /// exit 0 only when all passed.
    Regress(regress::RegressArgs),
    /// Load and validate scenario files without running them; exit 0 only when all are valid.
    Check(CheckArgs),
}

/// Arguments of `snic scenario run` and `record`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The scenario file (TOML or JSON).
    pub file: PathBuf,
    /// Seed of every random choice (overrides the scenario's `seed`).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Write every link direction's and host port's traffic as pcap files into this directory.
    #[arg(long, value_name = "DIR")]
    pub pcap: Option<PathBuf>,
    /// Packet-trace filter (as `snic run --trace`); trace lines go to the report's notes.
    #[arg(long, value_name = "FILTER")]
    pub trace: Option<String>,
    /// Print the report as one JSON document (every counter by name) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Run on real interfaces: network namespaces and veths built from the links (root).
    #[arg(long)]
    pub real: bool,
}

impl RunArgs {
    fn options(&self) -> RunOptions {
        RunOptions {
            seed: self.seed,
            pcap_dir: self.pcap.clone(),
            trace: self.trace.clone(),
            real: self.real,
        }
    }
}

/// Arguments of `snic scenario check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Scenario files.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Run `snic scenario ...`; returns the exit code.
pub fn run(args: ScenarioArgs) -> i32 {
    match args.command {
        ScenarioCommand::Run(a) => run_one(&a, false),
        ScenarioCommand::Record(a) => run_one(&a, true),
        ScenarioCommand::Regress(a) => regress::run(&a),
        ScenarioCommand::Check(a) => check(&a),
    }
}

/// The exit code of a finished run.
pub fn verdict(report: &Report) -> i32 {
    if report.passed { EXIT_PASS } else { EXIT_FAIL }
}

/// Print `text` to stdout; a closed pipe is not an error worth a panic.
fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

fn run_one(a: &RunArgs, record: bool) -> i32 {
    let loaded = match load::load_file(&a.file) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{e}");
            return EXIT_ERROR;
        }
    };
    let opts = a.options();
    let (report, written) = if record {
        match snic_scenario::record(&loaded, &opts) {
            Ok(r) => r,
            Err(e) => return error_exit(&loaded, &e),
        }
    } else {
        match snic_scenario::run(&loaded, &opts) {
            Ok(r) => (r, Vec::new()),
            Err(e) => return error_exit(&loaded, &e),
        }
    };
    if a.json {
        let mut v = serde_json::to_value(&report).unwrap_or_default();
        if record && let Some(o) = v.as_object_mut() {
            o.insert(
                "written".into(),
                written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().into(),
            );
        }
        print(&format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default()));
    } else {
        let mut s = String::new();
        if record {
            s.push_str(&format!("wrote {} golden file(s):\n", written.len()));
            for p in &written {
                s.push_str(&format!("  {}\n", p.display()));
            }
        }
        s.push_str(&report.to_text());
        print(&s);
    }
    verdict(&report)
}

/// Report a scenario that could not be run; returns [`EXIT_ERROR`].
fn error_exit(loaded: &Loaded, e: &ScenarioError) -> i32 {
    match e {
        // A load error names its file already.
        ScenarioError::Load(_) => eprintln!("{e}"),
        _ => eprintln!("{}: {e}", loaded.path.display()),
    }
    EXIT_ERROR
}

/// One line saying what a valid scenario holds.
pub fn summary(loaded: &Loaded) -> String {
    let s = &loaded.scenario;
    let n = |k: usize, one: &str, many: &str| format!("{k} {}", if k == 1 { one } else { many });
    let mut parts = vec![n(s.nics.len(), "nic", "nics")];
    if !s.switches.is_empty() {
        parts.push(n(s.switches.len(), "switch", "switches"));
    }
    parts.push(n(s.hosts.len(), "host", "hosts"));
    parts.push(n(s.links.len(), "link", "links"));
    if !s.traffic.is_empty() {
        parts.push(n(s.traffic.len(), "traffic source", "traffic sources"));
    }
    parts.push(n(s.timeline.len(), "op", "ops"));
    parts.push(n(s.expect.len(), "expectation", "expectations"));
    if s.golden.is_some() {
        parts.push("golden data".into());
    }
    parts.join(", ")
}

fn check(a: &CheckArgs) -> i32 {
    let mut code = EXIT_PASS;
    let mut s = String::new();
    for f in &a.files {
        match load::load_file(f) {
            Ok(l) => s.push_str(&format!("{}: ok ({})\n", f.display(), summary(&l))),
            Err(e) => {
                // The error starts with the file's name (and line, and field).
                s.push_str(&format!("{e}\n"));
                code = EXIT_ERROR;
            }
        }
    }
    print(&s);
    code
}

/// Whether `path` looks like a scenario of `snic_scenario`'s format: a TOML or JSON document
/// with at least one top-level key only scenarios have. `Err` when it is not even valid TOML
/// or JSON (with the parser's message).
pub fn looks_like_scenario(path: &Path) -> Result<bool, String> {
    const KEYS: &[&str] = &[
        "nic",
        "nics",
        "switch",
        "switches",
        "host",
        "hosts",
        "link",
        "links",
        "traffic",
        "op",
        "ops",
        "expect",
        "golden",
        "time_limit",
        "sample_interval",
    ];
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let json = path.extension().is_some_and(|e| e == "json");
    let keys: Vec<String> = if json {
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        v.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default()
    } else {
        let v: toml::Table = toml::from_str(&text).map_err(|e| e.to_string())?;
        v.keys().cloned().collect()
    };
    Ok(keys.iter().any(|k| KEYS.contains(&k.as_str())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(text: &str) -> Loaded {
        load::load_str(text, load::Format::Toml, Path::new("t.toml"), Path::new("."))
            .expect("loads")
    }

    #[test]
    fn summary_counts_what_the_scenario_holds() {
        let l = loaded(
            "[[nic]]\nname = \"a\"\n[[nic]]\nname = \"b\"\n[[host]]\nname = \"h\"\nnic = \"a\"\n\
             [[link]]\nname = \"w\"\na = \"a.wire\"\nb = \"b.wire\"\n",
        );
        assert_eq!(summary(&l), "2 nics, 1 host, 1 link, 0 ops, 0 expectations");
    }

    #[test]
    fn policy_files_are_not_taken_for_scenarios() {
        let dir = std::env::temp_dir().join(format!("snic-looks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let policy = dir.join("policy.toml");
        std::fs::write(&policy, "[underlay]\nport = 1\n[[vport]]\nid = 0\nport = 0\n").unwrap();
        let scen = dir.join("s.json");
        std::fs::write(&scen, r#"{"nic": [{"name": "a"}]}"#).unwrap();
        let broken = dir.join("b.toml");
        std::fs::write(&broken, "[[nic]\n").unwrap();
        assert_eq!(looks_like_scenario(&policy), Ok(false));
        assert_eq!(looks_like_scenario(&scen), Ok(true));
        assert!(looks_like_scenario(&broken).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
