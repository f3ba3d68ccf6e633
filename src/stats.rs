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
use serde_json::Value;
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

/// One pipeline port of a counters document: its id, its name, the pipeline's counters of it
/// and, where the document has them, the port's own (kernel-side) counters.
#[derive(Debug, Clone, Copy)]
pub struct DocPort<'a> {
    pub id: u64,
    pub name: &'a str,
    pub counters: &'a Value,
    pub device: Option<&'a Value>,
}

/// The pipeline ports of a counters document, whichever shape it has: a `snic run` document
/// (`ports`, each with its `id`, `name` and `device`) or a `snic serve --port` one (the NIC's
/// `pipeline.ports` by id, named and counted by `nic.ports`). The one reader of that layout
/// for `snic top` and the metrics endpoint.
pub fn doc_ports(doc: &Value) -> Vec<DocPort<'_>> {
    if let Some(ps) = doc["ports"].as_array() {
        return ps
            .iter()
            .map(|p| DocPort {
                id: p["id"].as_u64().unwrap_or(0),
                name: p["name"].as_str().unwrap_or(""),
                counters: p,
                device: p.get("device"),
            })
            .collect();
    }
    let nic = &doc["nic"];
    nic["pipeline"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|pc| {
            let id = pc["port"].as_u64().unwrap_or(0);
            let own = usize::try_from(id).ok().and_then(|i| nic["ports"].get(i));
            DocPort {
                id,
                name: own.and_then(|p| p["name"].as_str()).unwrap_or(""),
                counters: pc,
                device: own.map(|p| &p["counters"]),
            }
        })
        .collect()
}
