//! Running a scenario on the simulated clock: the timeline's operations at their times or
//! after their events, the testbed stepped between them, until everything is done and idle or
//! the time limit; then the expectations.

use crate::{Loaded, Report, RunOptions, ScenarioError};

/// Run `loaded` on the simulated clock.
pub fn run_sim(loaded: &Loaded, opts: &RunOptions) -> Result<Report, ScenarioError> {
    let _ = opts;
    Err(ScenarioError::Unsupported(format!(
        "{}: the simulated run is not built yet",
        loaded.scenario.name
    )))
}
