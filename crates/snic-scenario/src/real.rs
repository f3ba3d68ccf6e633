//! Running a scenario on real interfaces: one network namespace per NIC and switch, a veth
//! pair per link and per host interface, the NICs' ports as AF_PACKET sockets on the veth
//! ends, the real clock (root only).
//!
//! - [`netns`]: the run's namespaces and veth pairs ([`netns::Net`], deleted on drop) and the
//!   bounded `ip` / `nft` / `tc` commands.
//! - [`impair`]: a link's loss (nftables, netdev ingress) and rate (`tbf`) on its veth pair,
//!   and its counters; what cannot be applied without `netem` becomes a note in the report.
//! - [`ports`]: the port factory of a real run ([`ports::RealPorts`]): AF_PACKET ports opened
//!   inside the namespaces, host interfaces with a [`ports::HostPump`] on the host side.
//!
//! The NICs themselves (pipeline, own packets, RoCE engine, hosts' memory) are the very objects
//! of a simulated run; only their ports and the clock ([`snic_testbed::RealClock`]) differ.

pub mod impair;
pub mod netns;
pub mod ports;

use crate::{Loaded, Report, RunOptions, ScenarioError};

/// Most real time a run may take, whatever its `time_limit` says.
pub const MAX_REAL_SECS: u64 = 60;

/// Run `loaded` on real interfaces.
pub fn run(loaded: &Loaded, opts: &RunOptions) -> Result<Report, ScenarioError> {
    let _ = opts;
    if !netns::is_root() {
        return Err(ScenarioError::Unsupported("--real needs root (network namespaces)".into()));
    }
    Err(ScenarioError::Unsupported(format!(
        "{}: real interfaces are not supported yet",
        loaded.scenario.name
    )))
}
