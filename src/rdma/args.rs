//! The command line of `snic rdma`: the benchmark, its options, and the message sizes they
//! ask for.

use anyhow::{Context, Result};
use snic_dma::MemKind;
use snic_rdma::Mtu;
use std::net::IpAddr;

/// perftest's default TCP port.
pub const DEFAULT_TCP_PORT: u16 = 18515;
/// Largest message of `--sweep` (perftest `-a`: 2 bytes .. 8 MiB; the issue asks for 1 MiB).
const SWEEP_MAX: u32 = 1 << 20;

/// The benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RdmaOp {
    /// RDMA WRITE (ib_write_bw / ib_write_lat).
    Write,
    /// RDMA READ (ib_read_bw / ib_read_lat).
    Read,
    /// SEND / RECV (ib_send_bw / ib_send_lat).
    Send,
    /// 8-byte FETCH_ADD, or CMP_SWAP with `--cmp-swap` (ib_atomic_bw / ib_atomic_lat).
    Atomic,
    /// Raw UDP with the same sizes and batching: the socket layer's ceiling.
    Blast,
}

impl RdmaOp {
    pub(super) fn code(self) -> u64 {
        match self {
            RdmaOp::Write => 1,
            RdmaOp::Read => 2,
            RdmaOp::Send => 3,
            RdmaOp::Atomic => 4,
            RdmaOp::Blast => 5,
        }
    }
    pub(super) fn name(self) -> &'static str {
        match self {
            RdmaOp::Write => "write",
            RdmaOp::Read => "read",
            RdmaOp::Send => "send",
            RdmaOp::Atomic => "atomic",
            RdmaOp::Blast => "blast",
        }
    }
}

/// Where buffers and QP rings live (perftest's `--mem` spelling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MemArg {
    /// The NIC's host memory pool.
    #[value(name = "host_mem")]
    HostMem,
    /// Device on-board memory (addresses carry the device prefix).
    #[value(name = "dev_mem")]
    DevMem,
}

impl MemArg {
    pub(super) fn kind(self) -> MemKind {
        match self {
            MemArg::HostMem => MemKind::Host,
            MemArg::DevMem => MemKind::OnBoard,
        }
    }
}

/// Arguments of `snic rdma`.
#[derive(Debug, Clone, clap::Args)]
pub struct RdmaArgs {
    /// The benchmark: write, read, send, atomic, or blast (raw UDP ceiling).
    #[arg(value_enum)]
    pub op: RdmaOp,
    /// Wait for a client on the TCP port.
    #[arg(long, conflicts_with = "client", required_unless_present = "client")]
    pub server: bool,
    /// Connect to the server at ADDR (IP address or host name).
    #[arg(long, value_name = "ADDR")]
    pub client: Option<String>,
    /// TCP port of the connection setup (perftest's default).
    #[arg(short = 'p', long = "tcp-port", value_name = "PORT", default_value_t = DEFAULT_TCP_PORT)]
    pub tcp_port: u16,
    /// UDP port RoCE uses on both sides.
    #[arg(long, value_name = "PORT", default_value_t = snic_wire::roce::UDP_PORT)]
    pub port: u16,
    /// This side's RoCE address (default: 127.0.0.2 for a client of a loopback server, else the
    /// control connection's local address).
    #[arg(long = "local-ip", value_name = "IP")]
    pub local_ip: Option<IpAddr>,
    /// Message size in bytes (default 65536 for bandwidth, 2 for latency; atomics are 8).
    #[arg(short = 's', long, value_name = "BYTES", conflicts_with = "sweep",
          value_parser = clap::value_parser!(u32).range(1..=(1 << 24)))]
    pub size: Option<u32>,
    /// Every power of two from 2 bytes to 1 MiB (perftest -a).
    #[arg(long)]
    pub sweep: bool,
    /// Iterations per size.
    #[arg(short = 'n', long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub iters: u64,
    /// Work requests posted per doorbell (post_send_batch).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub batch: u32,
    /// Most outstanding work requests.
    #[arg(short = 't', long = "tx-depth", value_name = "N", default_value_t = 128,
          value_parser = clap::value_parser!(u32).range(1..=8192))]
    pub tx_depth: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096. Default: the largest whose packets fit the
    /// route to the peer (its interface's MTU less the IP, UDP and RoCE headers, as rxe derives
    /// it from the netdev); the two sides use the smaller of their two values.
    #[arg(long, value_name = "BYTES", value_parser = parse_mtu)]
    pub mtu: Option<u32>,
    /// Memory of buffers and QP rings.
    #[arg(short = 'l', long = "mem", value_enum, default_value = "host_mem")]
    pub mem: MemArg,
    /// Latency mode (ib_*_lat) instead of bandwidth.
    #[arg(long)]
    pub lat: bool,
    /// Bandwidth in Gb/sec instead of MB/sec.
    #[arg(long = "report-gbits")]
    pub report_gbits: bool,
    /// One JSON object per size instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Check the transferred data (the default).
    #[arg(long, overrides_with = "no_verify")]
    pub verify: bool,
    /// Do not check the transferred data.
    #[arg(long = "no-verify", overrides_with = "verify")]
    pub no_verify: bool,
    /// Atomic benchmark with CMP_SWAP (a chain of expected values) instead of FETCH_ADD.
    #[arg(long = "cmp-swap")]
    pub cmp_swap: bool,
    /// Use IPv6 (listen on `::`, prefer IPv6 addresses of ADDR).
    #[arg(long)]
    pub ipv6: bool,
    /// Do not use UDP segmentation offload.
    #[arg(long = "no-gso")]
    pub no_gso: bool,
    /// Keep a fixed send window of 1024 packets without loss probes (silent losses wait for
    /// the IBTA timer) instead of the default window sized to the path.
    #[arg(long = "fixed-window")]
    pub fixed_window: bool,
    /// Smallest path window, in packets (default 16; the window also grows by the ACK
    /// aggregation it measures).
    #[arg(long = "window-floor", value_name = "PACKETS")]
    pub window_floor: Option<u32>,
    /// Server: listen for a new server process at this Unix socket path while serving; one
    /// that connects (`--takeover PATH`) takes over the connection mid-run and this process
    /// exits, or resumes if the new one refuses or fails before it is ready.
    #[arg(long, value_name = "PATH", requires = "server")]
    pub handover: Option<std::path::PathBuf>,
    /// Server: take over the run of the server listening at this path (`--handover`): its
    /// QP, buffer, UDP socket and control connection, then serve on to the end.
    #[arg(long, value_name = "PATH", requires = "server")]
    pub takeover: Option<std::path::PathBuf>,
    /// Give up with an error after this many seconds without progress.
    #[arg(long, value_name = "SECS", default_value_t = 30.0, value_parser = parse_secs)]
    pub timeout: f64,
}

impl RdmaArgs {
    /// The path MTU to use towards `peer`: `--mtu`, or the one the route's MTU allows.
    pub(super) fn mtu_towards(&self, peer: IpAddr) -> Result<u32> {
        if let Some(m) = self.mtu {
            return Ok(m);
        }
        let m = snic_roce::cm::path_mtu_to(peer)
            .with_context(|| format!("path MTU towards {peer} (give --mtu)"))?;
        Ok(m.bytes())
    }
}

fn parse_mtu(s: &str) -> Result<u32, String> {
    let n: u32 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    Mtu::from_bytes(n).map(|_| n).ok_or_else(|| "must be 256, 512, 1024, 2048 or 4096".into())
}

fn parse_secs(s: &str) -> Result<f64, String> {
    let t: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if t > 0.0 && t <= 86_400.0 { Ok(t) } else { Err("must be in (0, 86400]".into()) }
}

/// The message sizes of a run.
pub(super) fn sizes(a: &RdmaArgs) -> Vec<u32> {
    if a.op == RdmaOp::Atomic {
        return vec![8];
    }
    if a.sweep {
        return (1..=SWEEP_MAX.trailing_zeros()).map(|k| 1u32 << k).collect();
    }
    vec![a.size.unwrap_or(if a.lat { 2 } else { 65536 })]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_sizes_are_perftest_powers_of_two() {
        use clap::Parser;
        #[derive(Debug, clap::Parser)]
        struct T {
            #[command(flatten)]
            a: RdmaArgs,
        }
        let t = T::try_parse_from(["t", "write", "--server", "--sweep"]).unwrap();
        let s = sizes(&t.a);
        assert_eq!((s[0], *s.last().unwrap(), s.len()), (2, 1 << 20, 20));
        let t = T::try_parse_from(["t", "atomic", "--client", "h", "-s", "4096"]).unwrap();
        assert_eq!(sizes(&t.a), vec![8]);
        assert!(T::try_parse_from(["t", "write", "--mtu", "1500", "--server"]).is_err());
        assert!(T::try_parse_from(["t", "write"]).is_err());
        let t = T::try_parse_from(["t", "read", "--server", "--lat", "-l", "dev_mem"]).unwrap();
        assert_eq!((sizes(&t.a), t.a.mem), (vec![2], MemArg::DevMem));
    }
}
