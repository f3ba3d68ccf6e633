//! `snic serve`: run the host-interface server (setup socket, shared-memory DMA queues and
//! channels, lookaside kernels) until SIGINT/SIGTERM, then print the counters as one JSON line.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use snic_device::{Server, ServerConfig, default_socket_path};
use snic_io::signal::Signals;

use crate::dma::size_label;

/// Arguments of `snic serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Setup socket path [default: $XDG_RUNTIME_DIR/snic.sock, else /tmp/snic-$UID.sock].
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// On-chip device memory (bytes; K/M/G suffixes).
    #[arg(long, value_name = "SIZE", default_value = "4M", value_parser = parse_size)]
    pub on_chip: u64,
    /// On-board device memory (bytes; K/M/G suffixes).
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = parse_size)]
    pub on_board: u64,
    /// Worker threads (each serves its share of queues and channels).
    #[arg(long, value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: u32,
    /// Do not try huge pages for device memory.
    #[arg(long)]
    pub no_huge: bool,
    /// Microseconds a worker busy-polls without work before it sleeps.
    #[arg(long, value_name = "N", default_value_t = 200)]
    pub spin_us: u64,
    /// Serve RDMA to clients (QPs and MRs, RoCEv2 over UDP) on this address, e.g.
    /// 127.0.0.1:4791 (the port is the RoCE port every peer uses).
    #[arg(long, value_name = "ADDR")]
    pub rdma: Option<std::net::SocketAddr>,
}

/// Parse a memory size as [`crate::dma::parse_size`] does (e.g. `4M`: K, M and G are powers
/// of 1024); zero is refused.
pub fn parse_size(s: &str) -> Result<u64, String> {
    match crate::dma::parse_size(s)? {
        0 => Err("size must be non-zero".into()),
        v => Ok(v),
    }
}

/// Run the server until a signal.
pub fn run(args: ServeArgs) -> Result<()> {
    let cfg = ServerConfig {
        socket: args.socket.unwrap_or_else(default_socket_path),
        on_chip: args.on_chip,
        on_board: args.on_board,
        workers: args.workers,
        huge: !args.no_huge,
        spin_us: args.spin_us,
        rdma: args.rdma,
    };
    let signals = Signals::install().context("installing signal handlers")?;
    let (on_chip, on_board, workers) = (cfg.on_chip, cfg.on_board, cfg.workers);
    let server = Server::start(cfg.clone())
        .with_context(|| format!("starting the server on {}", cfg.socket.display()))?;
    let huge = server.stats().get("huge_pages").and_then(|v| v.as_bool()).unwrap_or(false);
    {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "snic serve: listening on {} (workers {workers}, on-chip {}, on-board {}, huge pages {})",
            server.socket_path().display(),
            size_label(on_chip),
            size_label(on_board),
            if huge { "yes" } else { "no" },
        )?;
        if let Some(a) = cfg.rdma {
            writeln!(out, "snic serve: RDMA (RoCEv2 over UDP) on {a}")?;
        }
        out.flush()?;
    }
    while !signals.stop_requested() {
        if signals.take_stats_request() {
            println!("{}", server.stats());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = server.stats();
    server.shutdown().context("shutting down")?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{stats}")?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("4M"), Ok(4 << 20));
        assert_eq!(parse_size("256m"), Ok(256 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("0").is_err());
        assert!(parse_size("4X").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("99999999999G").is_err());
        assert_eq!(size_label(256 << 20), "256M");
        assert_eq!(size_label(1 << 30), "1G");
        assert_eq!(size_label(1000), "1000");
    }
}
