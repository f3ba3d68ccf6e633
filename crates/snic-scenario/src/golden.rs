//! Golden data: `snic scenario record` runs a scenario and writes what its `[golden]` table
//! lists (captures, buffers' SHA-256, CQE lists, counters) into the golden directory; `run`
//! compares against it.

use crate::{Loaded, Report, RunOptions, ScenarioError};
use std::path::PathBuf;

/// Run and record.
pub fn record(loaded: &Loaded, opts: &RunOptions) -> Result<(Report, Vec<PathBuf>), ScenarioError> {
    let _ = opts;
    Err(ScenarioError::Unsupported(format!("{}: recording is not built yet", loaded.scenario.name)))
}
