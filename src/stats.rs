//! `snic stats`: the counters of a running `snic run`.
//!
//! `snic stats --control PATH` prints the counters document its control socket answers (see
//! [`crate::control`]; the same document as `snic run --json`). Frames the kernel dropped at the
//! ports are drops of the run: `drops_total` and `drops` include them (`rx_kernel_drops`,
//! `rx_ring_full`, `rx_fill_empty`), `kernel` sums the ports' kernel-side counters (with
//! `tx_ring_full`), and each port's `device` has its own. `snic stats --pid PID` instead sends SIGUSR1 to the process, which
//! prints its counters on its own stderr.

use crate::control::query;
use anyhow::{Context, Result, bail};
use std::path::PathBuf;

/// Arguments of `snic stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// Control socket of the running `snic run` (its `--control PATH`); prints its counters as JSON.
    #[arg(long, value_name = "PATH", required_unless_present = "pid", conflicts_with = "pid")]
    pub control: Option<PathBuf>,
    /// Process id of a running `snic run`: send it SIGUSR1 so it prints its counters on its stderr.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
}

/// Entry point of `snic stats`.
pub fn run(args: StatsArgs) -> Result<()> {
    if let Some(path) = &args.control {
        let doc = query(path)?;
        println!("{doc}");
        return Ok(());
    }
    if let Some(pid) = args.pid {
        let status = std::process::Command::new("kill")
            .arg("-USR1")
            .arg(pid.to_string())
            .status()
            .context("cannot run kill(1)")?;
        if !status.success() {
            bail!("could not signal process {pid} (is it running, and ours?)");
        }
        eprintln!("sent SIGUSR1 to {pid}: it prints its counters on its stderr");
        return Ok(());
    }
    bail!("give --control PATH or --pid PID")
}
