//! `snic`: the command-line front end of the software SmartNIC.
//!
//! Sub-commands:
//! - `decode`: read a pcap/pcapng file and print every packet's layers, class, RoCEv2 fields and
//!   parse error (text, verbose text, or one JSON object per line).
//! - `run`: open ports, build pipelines, run them on worker threads until the input ends, a
//!   duration passes or a signal arrives; print counters on exit and on SIGUSR1. With no
//!   arguments it runs an embedded default (generated traffic, default chain, null sink).
//! - `top`: a live terminal view of a running snic over its control socket (rates per port and
//!   stage, drops by reason, top flows, RDMA, DMA); `--once` prints one text frame.
//! - `stats`: fetch the counters of a running `snic run` over its control socket (or ask it by
//!   SIGUSR1 to print them).
//! - `capture`: a live capture of a running snic's ports or of what leaves one of its stages,
//!   into a pcapng file (one interface block per port, direction flags).
//! - `trace`: what every stage of a running snic would do with a described packet (a dry run:
//!   nothing is sent, no state changes).
//! - `vswitch`: the vSwitch control plane of a running `snic run --stage vswitch --control PATH`:
//!   counters, flow dumps, the policy, rule/layer/mapping edits and whole-policy loads; `check`
//!   validates a policy file offline.
//! - `testbed`: two NIC nodes joined by an impaired virtual link, driven on the simulated clock;
//!   prints counters, link statistics, simulated time and the packet accounting (reproducible).
//! - `rdma`: perftest-style RDMA benchmarks (WRITE, READ, SEND, atomics; bandwidth or latency)
//!   between two snic processes over RoCEv2 on UDP, plus the raw UDP ceiling (`blast`).
//! - `dma`: DMA transfers between this process and snic's device memory through the host
//!   library (as Xilinx's dma_to_device / dma_from_device), `dma sweep` (bandwidth vs size,
//!   table/JSON/plots) and `dma bench` (DMA vs memcpy, batching, completion latency).
//! - `serve`: the host-interface server: host processes connect to its setup socket and move
//!   data with shared-memory DMA queues and channels; lookaside kernels; until SIGINT/SIGTERM.
//! - `kernel`: lookaside kernels through the host library: `list`, `run NAME ...` (seeded
//!   inputs, result checked here), `bench NAME ...` (host library vs the kernel called
//!   in-process); a private in-process device unless `--socket` names a running `snic serve`.
//! - `p4`: P4-16 programs (v1model, PNA): `check`, `info`, STF `test`, and `simple_switch_CLI`
//!   commands (`table-add`, `counter-read`, `cli`, ...) for the `p4` stage of a running
//!   `snic run --control PATH`.
//! - `compute mm`: networked matrix multiplication between two `snic serve` (RecoNIC's
//!   lookaside example): RDMA READs into device memory, the GEMM kernel, C back by C2H DMA.
//!
//! - `ebpf`: eBPF programs: `verify` an object offline; `load` (hot swap), `map`, `events`
//!   and `trace` for the `xdp:` stages of a running snic over its control socket.
//!
//! - `stream`: the streaming kernels (`--stage kernel:NAME`) of a running snic: registers,
//!   keys, and the telemetry tables read from results memory.
//!
//! - `scenario`: whole systems of NICs, hosts and links described in a file: `run`, `record`
//!   (golden data), `regress` (a directory, JUnit XML) and `check`.
//! - `tour`: the built-in tour scenario: two NICs and their hosts over a lossy link (vSwitch,
//!   RDMA, DMA, a kernel), what each engine did, a plot of the run.
//!
//! `anyhow` is used here only; the libraries return their own typed errors.

mod capture;
mod compute;
mod control;
mod decode;
mod dma;
mod ebpf;
mod handover;
mod kernel;
mod metrics;
mod p4;
mod rdma;
mod reload;
mod report;
mod run;
mod scenario;
mod serve;
mod serve_upgrade;
mod stats;
mod stream;
mod testbed;
mod top;
mod trace;
mod upgrade;
mod vswitch;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// snic: a programmable SmartNIC in software.
#[derive(Debug, Parser)]
#[command(name = "snic", version, about, long_about = None, propagate_version = true)]
struct Cli {
    /// Log level filter for stderr logs (overridden by RUST_LOG), e.g. `info`, `debug`, `snic_io=trace`.
    #[arg(long, global = true, default_value = "info")]
    log: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode a pcap or pcapng file: layers, class, RoCEv2 fields and errors of every packet.
    Decode(DecodeArgs),
    /// Run ports and pipelines; with no arguments, an embedded default that needs no root and no files.
    Run(run::RunArgs),
    /// Print the counters of a running `snic run`.
    Stats(stats::StatsArgs),
    /// A live view of a running `snic run` or `snic serve` (its control socket): rates per
    /// port and stage, drops by reason, top flows, RDMA and DMA; `--once` prints one frame.
    Top(top::TopArgs),

    /// Capture a running snic's ports (or what leaves a stage) into a pcapng file, like
    /// tcpdump on a NIC port.
    Capture(capture::CaptureArgs),
    /// Show what every stage of a running snic would do with a described packet, without
    /// sending it (like `ovs-appctl ofproto/trace`).
    Trace(trace::TraceArgs),
    /// Run two NIC nodes joined by an impaired virtual link on the simulated clock (deterministic).
    Testbed(testbed::TestbedArgs),
    /// RDMA benchmarks between two snic processes over RoCEv2/UDP, as perftest's ib_*_bw / ib_*_lat.
    Rdma(rdma::args::RdmaArgs),
    /// Control the vSwitch of a running `snic run --stage vswitch --control PATH`; check policies.
    #[command(name = "vswitch")]
    VSwitch(vswitch::VSwitchArgs),
    /// Serve host processes: setup socket, shared-memory DMA queues/channels, lookaside kernels.
    Serve(serve::ServeArgs),
    /// DMA transfers to/from snic device memory (as Xilinx dma_to_device/dma_from_device),
    /// bandwidth sweeps with plots, and the host-interface benchmark.
    Dma(dma::DmaArgs),
    /// P4-16 programs (v1model, PNA): run STF tests, check programs, print their tables, and
    /// program the tables of a running `snic run --stage p4:... --control PATH`.
    P4(p4::P4Args),
    /// Streaming kernels (`--stage kernel:NAME`) of a running snic: list them, read and write
    /// their registers, load keys, print the telemetry tables from results memory.
    Stream(stream::StreamArgs),
    /// Lookaside compute between two snics: `mm`, networked matrix multiplication (RecoNIC
    /// Fig. 6: RDMA READ of A and B into device memory, GEMM kernel, C back by DMA).
    Compute(compute::ComputeArgs),
    /// Lookaside kernels through the host library: list them, run one with a check of its
    /// result, or time one against the same kernel called in-process.
    Kernel(kernel::KernelArgs),
    /// eBPF programs: verify an object; hot-swap the program of a running `xdp:` stage, read
    /// and change its maps, stream its ring-buffer events and trace lines.
    Ebpf(ebpf::EbpfArgs),
    /// Scenarios: whole systems of NICs, hosts and links in a file, run on the simulated clock
    /// and checked against expectations (`run`, `record`, `regress`, `check`). Exit 0: passed;
    /// 1: an expectation failed; 2: the scenario could not be loaded or built.
    Scenario(scenario::ScenarioArgs),
    /// The built-in tour: two NICs with hosts over a lossy link (VXLAN through the vSwitch,
    /// RDMA into device memory, DMA, a kernel); what each engine did, and a plot of the run.
    Tour(scenario::tour::TourArgs),
}

/// Arguments of `snic decode`.
#[derive(Debug, clap::Args)]
pub struct DecodeArgs {
    /// Print one JSON object per packet per line.
    #[arg(long)]
    json: bool,
    /// Print every header's fields (text output).
    #[arg(short, long)]
    verbose: bool,
    /// The capture file (pcap or pcapng, told apart by magic number).
    file: PathBuf,
}

fn init_logging(level: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // A second init (never happens in the binary) is harmless, so the error is ignored.
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

/// Exit code of a command whose standard output was closed under it: what a shell reports for
/// a process killed by SIGPIPE (128 + 13), as `yes | head -1` gives for `yes`.
const EXIT_BROKEN_PIPE: i32 = 141;

/// A command whose reader went away (`snic p4 check x.p4 | head -0`) ends quietly with
/// [`EXIT_BROKEN_PIPE`], as Unix tools do, instead of a panic. Rust ignores SIGPIPE, and the
/// long-running commands rely on that (a control client that goes away must not kill a run),
/// so a closed stdout shows as an error, which `println!` turns into a panic; this hook catches
/// exactly that panic. Other panics keep the default report.
fn quiet_broken_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let p = info.payload();
        let msg = p
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| p.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(EXIT_BROKEN_PIPE);
        }
        default(info)
    }));
}

fn main() -> Result<()> {
    quiet_broken_stdout();
    let result = run_command();
    // A command that wrote to a standard output whose reader went away (`snic decode f | head`)
    // stops there quietly too, as it would have been killed by SIGPIPE.
    if let Err(e) = &result
        && broken_stdout(e)
    {
        std::process::exit(EXIT_BROKEN_PIPE);
    }
    result
}

/// Whether `e` is a broken pipe and standard output is a pipe or socket whose reader has gone
/// (a broken pipe to anything else, a control socket say, is reported as usual).
fn broken_stdout(e: &anyhow::Error) -> bool {
    // (serde_json keeps the I/O error inside its own, and says its kind.)
    let pipe = e.chain().any(|c| {
        let kind = c
            .downcast_ref::<std::io::Error>()
            .map(std::io::Error::kind)
            .or_else(|| c.downcast_ref::<serde_json::Error>().and_then(|j| j.io_error_kind()));
        kind == Some(std::io::ErrorKind::BrokenPipe)
    });
    pipe && snic_io::sys::poll::peer_closed(1)
}

fn run_command() -> Result<()> {
    let cli = Cli::parse();
    init_logging(&cli.log);
    match cli.command {
        Command::Decode(args) => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            decode::run(&args.file, args.json, args.verbose, &mut out)
        }
        Command::Run(args) => run::run(args),
        Command::Stats(args) => stats::run(args),
        Command::Top(args) => top::run(args),

        Command::Capture(args) => capture::run(args),
        Command::Trace(args) => trace::run(args),
        Command::Testbed(args) => testbed::run(args),
        Command::VSwitch(args) => vswitch::run(args),
        Command::Rdma(args) => rdma::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Dma(args) => dma::run(args),
        Command::Stream(args) => stream::run(args),
        Command::Compute(args) => compute::run(args),
        Command::Kernel(args) => kernel::run(args),
        Command::Ebpf(args) => ebpf::run(args),
        Command::Scenario(args) => exit_with(scenario::run(args)),
        Command::Tour(args) => exit_with(scenario::tour::run(&args)),
        Command::P4(args) => match p4::run(args) {
            0 => Ok(()),
            code => std::process::exit(i32::from(code)),
        },
    }
}

/// Exit with `code` (0 returns normally, so buffered output is flushed the usual way).
fn exit_with(code: i32) -> Result<()> {
    if code == 0 { Ok(()) } else { std::process::exit(code) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_without_arguments_parses_to_the_embedded_default() {
        let cli = Cli::try_parse_from(["snic", "run"]).expect("parses");
        match cli.command {
            Command::Run(args) => assert!(args.is_empty()),
            other => panic!("expected run, got {other:?}"),
        }
    }

    #[test]
    fn decode_flags_parse() {
        let cli =
            Cli::try_parse_from(["snic", "decode", "--json", "-v", "x.pcap"]).expect("parses");
        match cli.command {
            Command::Decode(a) => {
                assert!(a.json && a.verbose);
                assert_eq!(a.file, PathBuf::from("x.pcap"));
            }
            other => panic!("expected decode, got {other:?}"),
        }
    }
}
