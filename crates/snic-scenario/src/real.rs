//! Running a scenario on real interfaces: one network namespace per NIC and switch, a veth
//! pair per link and per host interface, the NICs' ports as AF_PACKET sockets on the veth
//! ends, the real clock (root only).

use crate::{Loaded, Report, RunOptions, ScenarioError};

/// Run `loaded` on real interfaces.
pub fn run(loaded: &Loaded, opts: &RunOptions) -> Result<Report, ScenarioError> {
    let _ = opts;
    Err(ScenarioError::Unsupported(format!(
        "{}: real interfaces are not supported yet",
        loaded.scenario.name
    )))
}
