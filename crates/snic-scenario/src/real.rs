//! Running a scenario on real interfaces (root only): one network namespace per NIC and
//! switch, a namespace per link in the middle of two veth pairs (its loss and rate applied
//! there), a veth pair per host interface (and per free port) to a host namespace where the
//! scenario's traffic is injected and what arrives is captured with AF_PACKET; the NICs' ports
//! are snic's AF_PACKET ports opened inside their namespaces; the real clock.
//!
//! - [`netns`]: the run's namespaces and veth pairs ([`netns::Net`], deleted on drop) and the
//!   bounded `ip` / `nft` / `tc` commands.
//! - [`impair`]: a link's loss (nftables) and rate (`tbf`), and its counters; what cannot be
//!   applied without `netem` (delay, jitter, reordering, duplication, ECN marking) becomes a
//!   note in the report, never silently ignored.
//! - [`ports`]: the port factory of a real run ([`ports::RealPorts`]), host interfaces with a
//!   [`ports::HostPump`] on the host side.
//!
//! The NICs themselves (pipeline, own packets, RoCE engine, hosts' memory, DMA, kernels) are
//! the very objects of a simulated run, built by [`crate::world::build_with`]; the same
//! [`Driver`] runs the timeline and checks the expectations; only the ports and the clock
//! ([`RealAdvance`], over [`snic_testbed::RealClock`]) differ. The scenario's `time_limit` is
//! real time here, within [`MIN_REAL`]..=[`MAX_REAL`]. Everything is torn down at the end, also on error.

pub mod impair;
pub mod netns;
pub mod ports;

use crate::timeline::{Advance, Driver};
use crate::world::{self, BuildOptions, World};
use crate::{Loaded, Report, RunOptions, ScenarioError};
use core::time::Duration;
use ports::RealPorts;
use snic_testbed::{RealClock, Step};
use snic_time::Instant;

/// Most real time a run may take, whatever its `time_limit` says.
pub const MAX_REAL: Duration = Duration::from_secs(30);
/// Least real time a run is given: a `time_limit` written for the simulated clock (a few
/// milliseconds) leaves real interfaces no time to resolve neighbours or to go quiet.
pub const MIN_REAL: Duration = Duration::from_secs(1);

/// The real clock as the timeline driver's [`Advance`].
#[derive(Debug)]
pub struct RealAdvance {
    clock: RealClock,
}

impl RealAdvance {
    /// A real clock starting now, sleeping on `fds` (the run's AF_PACKET sockets).
    pub fn start(fds: Vec<std::os::fd::RawFd>) -> RealAdvance {
        RealAdvance { clock: RealClock::start(fds) }
    }
}

impl Advance for RealAdvance {
    fn now(&self, world: &World) -> Instant {
        world.tb.now()
    }

    fn advance(&mut self, world: &mut World, horizon: Instant) -> Result<bool, ScenarioError> {
        let step = self
            .clock
            .step_until(&mut world.tb, horizon)
            .map_err(|e| ScenarioError::Run(e.to_string()))?;
        let now = world.tb.now();
        world.hosts.poll(&mut world.tb, now);
        Ok(step != Step::Idle)
    }

    /// Real time cannot be skipped: one more real step towards `t` (it sleeps until a frame
    /// arrives, `t` or a couple of milliseconds).
    fn skip_to(&mut self, world: &mut World, t: Instant) -> Result<(), ScenarioError> {
        self.advance(world, t).map(|_| ())
    }

    fn idle(&self, world: &World) -> bool {
        self.clock.is_quiet(&world.tb)
    }
}

/// Run `loaded` on real interfaces (see the module doc).
pub fn run(loaded: &Loaded, opts: &RunOptions) -> Result<Report, ScenarioError> {
    if !netns::is_root() {
        return Err(ScenarioError::Unsupported("--real needs root (network namespaces)".into()));
    }
    let mut capped = loaded.clone();
    let want = capped.scenario.time_limit.duration();
    let limit = want.clamp(MIN_REAL, MAX_REAL);
    let capped_note = (limit != want).then(|| {
        format!(
            "time_limit {} taken as {} ms of real time (real runs take {}..={} ms)",
            capped.scenario.time_limit,
            limit.as_millis(),
            MIN_REAL.as_millis(),
            MAX_REAL.as_millis()
        )
    });
    capped.scenario.time_limit = crate::schema::SimTime(limit.as_nanos() as u64);
    let mut ports = RealPorts::new()?;
    let result = run_on(&capped, opts, &mut ports);
    // The world (and every socket) is gone by now; the namespaces go next, also on error.
    let left = ports.teardown();
    let mut report = result?;
    report.notes.extend(capped_note);
    if !left.is_empty() {
        report.errors.push(format!("namespaces not deleted: {}", left.join("; ")));
        report.passed = false;
    }
    Ok(report)
}

/// Build the world on `ports`, run it on the real clock, report.
fn run_on(
    loaded: &Loaded,
    opts: &RunOptions,
    ports: &mut RealPorts,
) -> Result<Report, ScenarioError> {
    let seed = opts.seed.unwrap_or(loaded.scenario.seed);
    let bopts = BuildOptions { trace: opts.trace.clone() };
    let mut world = world::build_with(loaded, seed, ports, &bopts)?;
    // Traffic into a host interface goes through its veth: the pump injects it from the host
    // namespace when its time comes (the world queued it for in-process injection).
    let keys: Vec<String> = ports.host_ports().map(str::to_string).collect();
    for key in &keys {
        if let (Some(log), Some(h)) = (world.logs.get(key), ports.handle(key)) {
            let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
            for (at, f) in log.inbox.drain(..) {
                h.push(at, f);
            }
        }
    }
    for pump in ports.take_pumps() {
        world.tb.add_device(Box::new(pump));
    }
    let mut driver = Driver::new(loaded);
    let mut adv = RealAdvance::start(ports.poll_fds().to_vec());
    driver.run(&mut world, &mut adv)?;
    // What a host interface received is what arrived in its namespace.
    for key in &keys {
        if let (Some(log), Some(h)) = (world.logs.get(key), ports.handle(key)) {
            log.lock().unwrap_or_else(|e| e.into_inner()).sent = h.take_sent();
        }
    }
    driver.notes.extend(ports.notes());
    Ok(driver.finish(&mut world, loaded, opts, "real", true))
}
