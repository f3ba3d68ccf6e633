//! Scenarios: whole systems of NICs, switches, hosts and impaired links described in one file
//! (JSON or TOML, [`schema`]), run deterministically on the testbed's simulated clock (or on
//! real interfaces, [`real`]) and checked against expectations and golden data.
//!
//! - [`schema`]: the format; [`load`]: reading and validating a file (errors name the file,
//!   line and field); [`packet`]: scapy-like packet specs.
//! - [`world`]: building the testbed (NICs, switches, links, traffic) from a scenario;
//!   [`hosts`]: hosts' memory, RDMA objects, DMA queues and kernels; [`timeline`]: running the
//!   operations; [`expect`]: checking expectations; [`golden`]: recording and comparing golden
//!   data; [`report`]: what a run produced.
//!
//! Given the same file and seed, a simulated run is byte-identical from run to run: nothing reads
//! the real clock or an unseeded RNG.

pub mod expect;
pub mod golden;
pub mod hosts;
pub mod load;
pub mod packet;
pub mod real;
pub mod report;
pub mod schema;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod timeline;
pub mod world;

pub use load::{LoadError, Loaded};
pub use report::Report;
pub use schema::Scenario;

use std::path::PathBuf;

/// How to run a scenario.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Overrides the scenario's seed.
    pub seed: Option<u64>,
    /// Write every link's and port's traffic as pcap files here.
    pub pcap_dir: Option<PathBuf>,
    /// Packet-trace filter (as `snic run --trace`); trace lines go to the report's notes.
    pub trace: Option<String>,
    /// Run on real interfaces (namespaces and veths; root) instead of the simulated clock.
    pub real: bool,
}

/// Why a scenario could not be run at all (a failed expectation is not an error: it is in the
/// [`Report`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum ScenarioError {
    /// The file could not be read or is not a valid scenario.
    Load(LoadError),
    /// Something the scenario describes could not be built; says what and why.
    Setup(String),
    /// The run itself failed (an I/O error on real interfaces, a testbed livelock).
    Run(String),
    /// The scenario needs something this mode cannot give (says what).
    Unsupported(String),
}

impl core::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ScenarioError::Load(e) => write!(f, "{e}"),
            ScenarioError::Setup(w) => write!(f, "setup: {w}"),
            ScenarioError::Run(w) => write!(f, "run: {w}"),
            ScenarioError::Unsupported(w) => write!(f, "unsupported: {w}"),
        }
    }
}

impl std::error::Error for ScenarioError {}

impl From<LoadError> for ScenarioError {
    fn from(e: LoadError) -> Self {
        ScenarioError::Load(e)
    }
}

/// Run a loaded scenario: build it, run its timeline to the end (every operation done and
/// nothing pending, or the time limit), check every expectation and golden datum.
pub fn run(loaded: &Loaded, opts: &RunOptions) -> Result<Report, ScenarioError> {
    if opts.real {
        return real::run(loaded, opts);
    }
    timeline::run_sim(loaded, opts)
}

/// Run a scenario and write its golden data (what [`schema::GoldenSpec`] lists) next to it;
/// returns the report and the files written.
pub fn record(loaded: &Loaded, opts: &RunOptions) -> Result<(Report, Vec<PathBuf>), ScenarioError> {
    golden::record(loaded, opts)
}
