//! `snic dma`: DMA transfers between this process and snic's device memory, as Xilinx's
//! `dma_to_device` / `dma_from_device` do with an XDMA card, plus a bandwidth sweep
//! (`snic dma sweep`, with table, JSON and plots) and the host-interface benchmark
//! (`snic dma bench`: DMA vs memcpy, batched vs single doorbells, completion latency).
//!
//! Every run goes through the host library ([`snic_host`]) to a `snic serve` process: the one
//! named by `-d PATH`, or a private child started for the run (and killed at exit), so the
//! transfers always cross a process boundary through shared memory and doorbells.
//!
//! A transfer is a chain of descriptors (at most [`CHUNK`] bytes each) run by an XDMA-like
//! channel (`--channel K`, the default) or posted on a QDMA-like queue (`--queue`); completion
//! is polled unless `--interrupt` asks for an eventfd.

mod bench;
pub(crate) mod plot;
mod point;
mod spawn;
mod sweep;

use anyhow::{Context, Result, anyhow, bail, ensure};
use snic_dma::desc::{DESC_SIZE, flags};
use snic_dma::{Completion, Descriptor, Dir, Status};
use snic_host::{Channel, ChannelResult, DevKind, Device, HostBuf, Queue, QueueOpts};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Bytes one descriptor moves at most (a power of two below the descriptor's length limit).
pub const CHUNK: u64 = 1 << 27;

/// Arguments of `snic dma`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct DmaArgs {
    /// `sweep` or `bench`; without one, a single transfer job as dma_to_device/dma_from_device.
    #[command(subcommand)]
    pub cmd: Option<DmaCmd>,
    /// The transfer job's options.
    #[command(flatten)]
    pub job: JobArgs,
}

/// Sub-commands of `snic dma`.
#[derive(Debug, clap::Subcommand)]
pub enum DmaCmd {
    /// Bandwidth vs transfer size over channels 1..4, both directions, both memories, polled and
    /// interrupt completion: table, JSON, SVG/PNG plots.
    Sweep(sweep::SweepArgs),
    /// The host-interface benchmark: DMA vs memcpy, 64-byte operation rate (single vs batched
    /// doorbells), doorbell-to-completion latency (polled vs interrupt).
    Bench(bench::BenchArgs),
}

/// Device memory kinds on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MemArg {
    /// Small, fast memory (BRAM-like; 4 MiB by default).
    OnChip,
    /// Large memory (DDR-like).
    OnBoard,
}

impl MemArg {
    /// The protocol's kind.
    pub fn kind(self) -> DevKind {
        match self {
            MemArg::OnChip => DevKind::OnChip,
            MemArg::OnBoard => DevKind::OnBoard,
        }
    }
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        self.kind().name()
    }
}

/// Options of one transfer job (`snic dma` without a sub-command).
#[derive(Debug, Clone, clap::Args)]
pub struct JobArgs {
    /// snic's setup socket; when omitted, a private `snic serve` child is started for the run.
    #[arg(short = 'd', long = "device", value_name = "PATH")]
    pub device: Option<PathBuf>,
    /// Device address (hex with 0x, or decimal); when omitted, a device buffer of the transfer
    /// size (plus offset) is allocated in `--mem`.
    #[arg(short = 'a', long = "address", value_name = "ADDR", value_parser = parse_u64)]
    pub address: Option<u64>,
    /// Memory of the allocated device buffer (without `-a`).
    #[arg(long, value_enum, default_value = "on-board")]
    pub mem: MemArg,
    /// Bytes per transfer (K/M/G suffixes: 4K = 4096); default: the size of `-f`, else 4096.
    #[arg(short = 's', long, value_name = "BYTES", value_parser = parse_size)]
    pub size: Option<u64>,
    /// Added to the device address.
    #[arg(short = 'o', long, value_name = "OFF", default_value = "0", value_parser = parse_size)]
    pub offset: u64,
    /// Transfers to run.
    #[arg(short = 'c', long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub count: u64,
    /// H2C: send this file's bytes (default: a byte pattern).
    #[arg(short = 'f', long = "file", value_name = "IN")]
    pub file: Option<PathBuf>,
    /// C2H: write the received bytes (of the last transfer) to this file.
    #[arg(short = 'w', long = "write-file", value_name = "OUT")]
    pub write_file: Option<PathBuf>,
    /// Card to host (C2H, dma_from_device); default host to card (H2C, dma_to_device).
    #[arg(short = 'r', long)]
    pub read: bool,
    /// Print the setup and every step.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// XDMA channel to use (0..3).
    #[arg(long, value_name = "K", default_value_t = 0, conflicts_with = "queue",
          value_parser = clap::value_parser!(u8).range(0..4))]
    pub channel: u8,
    /// Use a QDMA-like queue instead of a channel.
    #[arg(long)]
    pub queue: bool,
    /// Interrupt (eventfd) completion instead of polling.
    #[arg(long)]
    pub interrupt: bool,
    /// Also check the data: H2C reads the device back, C2H first writes the pattern; compare.
    #[arg(long)]
    pub verify: bool,
    /// Give up on a transfer after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub timeout: f64,
}

/// Parse an integer: decimal or 0x-hex.
pub fn parse_u64(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(&h.replace('_', ""), 16),
        None => t.replace('_', "").parse::<u64>(),
    };
    r.map_err(|e| format!("`{s}` is not a number: {e}"))
}

/// Parse a byte count: a number (decimal or 0x-hex) with an optional K/M/G suffix (binary:
/// 1K = 1024; `KiB`, `KB`, `k` are accepted too).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let lower = s.trim().to_ascii_lowercase();
    if lower.starts_with("0x") {
        return parse_u64(&lower);
    }
    let stripped = lower.strip_suffix("ib").or_else(|| lower.strip_suffix('b')).unwrap_or(&lower);
    let (num, mult) = match stripped.chars().last() {
        Some('k') => (&stripped[..stripped.len() - 1], 1u64 << 10),
        Some('m') => (&stripped[..stripped.len() - 1], 1 << 20),
        Some('g') => (&stripped[..stripped.len() - 1], 1 << 30),
        _ => (stripped, 1),
    };
    let n = parse_u64(num)?;
    n.checked_mul(mult).ok_or_else(|| format!("`{s}` is too large"))
}

/// A byte count as the largest binary unit that divides it: 64, 4K, 256M, 1G.
pub fn size_label(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// A connection to snic, and the private server behind it when there is one.
#[derive(Debug)]
pub struct Session {
    /// The device (dropped before the child is killed: fields drop in order).
    pub dev: Device,
    child: Option<spawn::ServerChild>,
}

impl Session {
    /// Connect to `device`, or start a private server (2 workers) and connect to it.
    pub fn open(device: Option<&Path>, name: &str, verbose: bool) -> Result<Session> {
        Session::open_with(device, name, 2, verbose)
    }

    /// As [`Session::open`], with `workers` threads in a private server.
    pub fn open_with(
        device: Option<&Path>,
        name: &str,
        workers: u32,
        verbose: bool,
    ) -> Result<Session> {
        let child = match device {
            Some(_) => None,
            None => Some(spawn::ServerChild::spawn(workers, verbose)?),
        };
        let path = device.or(child.as_ref().map(|c| c.socket())).context("no socket path")?;
        let dev = Device::connect(path, name)
            .with_context(|| format!("connecting to snic at {}", path.display()))?;
        Ok(Session { dev, child })
    }

    /// Another connection (another client) to the same server.
    pub fn connect_again(&self, device: Option<&Path>, name: &str) -> Result<Device> {
        let path = device.or(self.child.as_ref().map(|c| c.socket())).context("no socket path")?;
        Device::connect(path, name).with_context(|| format!("connecting to {}", path.display()))
    }
}

/// A failed transfer: the DMA status snic reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaFailure {
    /// The status.
    pub status: Status,
    /// Address of the failing descriptor (channels), 0 when unknown.
    pub fault_desc: u64,
}

impl std::fmt::Display for DmaFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DMA failed: status {:?} ({})", self.status, self.status.reason())?;
        if self.fault_desc != 0 {
            write!(f, ", descriptor at {:#x}", self.fault_desc)?;
        }
        Ok(())
    }
}

impl std::error::Error for DmaFailure {}

/// Split `[src, dst, len)` into descriptors of at most [`CHUNK`] bytes.
pub fn chunks(src: u64, dst: u64, len: u64) -> Vec<(u64, u64, u32)> {
    let mut v = Vec::new();
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(CHUNK);
        v.push((src + done, dst + done, n as u32));
        done += n;
    }
    v
}

/// What moves the bytes: a channel with its descriptor chain in a host buffer, or a queue.
#[derive(Debug)]
pub enum Mover {
    /// An XDMA-like channel.
    Channel {
        /// The channel.
        ch: Channel,
        /// Host buffer holding the descriptor chain.
        descs: HostBuf,
        /// Descriptors of the prepared chain.
        n: usize,
    },
    /// A QDMA-like queue.
    Queue {
        /// The queue.
        q: Queue,
        /// Direction of the prepared transfer.
        dir: Dir,
        /// The prepared transfer's ring slots.
        slots: Vec<Descriptor>,
    },
}

/// Most descriptors one channel chain holds here (the chain buffer's size / 32).
const MAX_CHAIN_DESCS: usize = 256;

impl Mover {
    /// Channel `index` of `dir`, with a chain buffer.
    pub fn channel(dev: &Device, dir: Dir, index: u8, interrupt: bool) -> Result<Mover> {
        let ch = dev
            .channel(dir, index, interrupt)
            .with_context(|| format!("setting up {} channel {index}", dir.name()))?;
        let descs =
            dev.alloc_host(MAX_CHAIN_DESCS * DESC_SIZE).context("allocating the chain buffer")?;
        Ok(Mover::Channel { ch, descs, n: 0 })
    }

    /// A new memory-mapped queue.
    pub fn queue(dev: &Device, dir: Dir, interrupt: bool) -> Result<Mover> {
        let opts = QueueOpts { interrupt, ..QueueOpts::default() };
        let q = dev.open_queue(opts).context("opening a queue")?;
        Ok(Mover::Queue { q, dir, slots: Vec::new() })
    }

    /// Prepare the transfer `src -> dst` of `len` bytes in direction `dir` (for channels, the
    /// direction is the channel's).
    pub fn prepare(&mut self, dir: Dir, src: u64, dst: u64, len: u64) -> Result<()> {
        ensure!(len > 0, "transfer size is 0");
        let parts = chunks(src, dst, len);
        match self {
            Mover::Channel { descs, n, .. } => {
                ensure!(
                    parts.len() <= MAX_CHAIN_DESCS,
                    "{len} bytes need {} descriptors; a chain holds {MAX_CHAIN_DESCS}",
                    parts.len()
                );
                let base = descs.iova();
                for (i, &(s, d, l)) in parts.iter().enumerate() {
                    let last = i + 1 == parts.len();
                    let mut f = 0;
                    if i == 0 {
                        f |= flags::SOP;
                    }
                    let next = if last {
                        f |= flags::EOP | flags::STOP;
                        0
                    } else {
                        f |= flags::CHAIN;
                        base + ((i + 1) * DESC_SIZE) as u64
                    };
                    let desc = Descriptor { src: s, dst: d, len: l, flags: f, next };
                    descs.write(i * DESC_SIZE, &desc.encode()).context("writing a descriptor")?;
                }
                *n = parts.len();
            }
            Mover::Queue { q, dir: qdir, slots, .. } => {
                let room = q.free_slots(dir) as usize;
                ensure!(
                    parts.len() <= room.max(1),
                    "{len} bytes need {} descriptors; the ring has {room} free slots",
                    parts.len()
                );
                *qdir = dir;
                slots.clear();
                for (i, &(s, d, l)) in parts.iter().enumerate() {
                    let mut f = 0;
                    if i == 0 {
                        f |= flags::SOP;
                    }
                    if i + 1 == parts.len() {
                        f |= flags::EOP;
                    }
                    slots.push(Descriptor { src: s, dst: d, len: l, flags: f, next: 0 });
                }
            }
        }
        Ok(())
    }

    /// Run the prepared transfer once and wait for it; returns the bytes moved.
    pub fn run(&mut self, timeout: Duration) -> Result<u64> {
        match self {
            Mover::Channel { ch, descs, n } => {
                ensure!(*n > 0, "no transfer prepared");
                ch.start(descs.iova()).context("starting the channel")?;
                let r = ch.wait(timeout).context("waiting for the channel")?;
                check_channel(&r)?;
                Ok(r.bytes)
            }
            Mover::Queue { q, dir, slots } => {
                ensure!(!slots.is_empty(), "no transfer prepared");
                for d in slots.iter() {
                    q.post(*dir, d).context("posting a descriptor")?;
                }
                q.doorbell(*dir);
                let target = q.pidx(*dir);
                let mut bytes = 0u64;
                let mut failure = None;
                let mut out = [Completion::default(); 16];
                let deadline = Instant::now() + timeout;
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    ensure!(!left.is_zero(), "timed out waiting for a completion");
                    let got = q.wait(&mut out, left).context("waiting for a completion")?;
                    let mut done = false;
                    for c in &out[..got] {
                        // A failed transfer is reported once the last completion is in.
                        match check(c) {
                            Ok(()) => bytes += u64::from(c.len),
                            Err(e) if e.is::<DmaFailure>() => {
                                failure.get_or_insert(e);
                            }
                            Err(e) => return Err(e),
                        }
                        if c.index == target || c.dir == snic_dma::desc::DIR_QUEUE {
                            done = true;
                        }
                    }
                    if done {
                        break;
                    }
                }
                match failure {
                    Some(f) => Err(f),
                    None => Ok(bytes),
                }
            }
        }
    }
}

/// A completion's status: `Ok` for success, a [`DmaFailure`] for an error status, another
/// error for a code snic does not define.
pub fn check(c: &Completion) -> Result<()> {
    match c.status() {
        Some(Status::Ok) => Ok(()),
        Some(status) => Err(DmaFailure { status, fault_desc: 0 }.into()),
        None => bail!("completion with unknown status {}", c.status),
    }
}

/// A channel run's status, as [`check`] (the failure names the faulting descriptor).
pub fn check_channel(r: &ChannelResult) -> Result<()> {
    match r.status() {
        Some(Status::Ok) => Ok(()),
        Some(status) => Err(DmaFailure { status, fault_desc: r.fault_desc }.into()),
        None => bail!("channel run ended with unknown status {}", r.status),
    }
}

/// The default H2C data: byte `i` of the transfer is `i * 7 + i / 251` (mod 256), so shifted or
/// repeated blocks do not compare equal by accident.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(7).wrapping_add(i / 251)) as u8).collect()
}

/// GB/s as bytes per nanosecond.
pub fn gbps(bytes: u64, secs: f64) -> f64 {
    if secs <= 0.0 { 0.0 } else { bytes as f64 / secs / 1e9 }
}

/// A bandwidth for people: two decimals, or three significant digits when that would print a
/// slow transfer as 0.00 (a 4 KiB job on a loaded machine can take a millisecond).
pub fn fmt_gbps(g: f64) -> String {
    if g >= 0.1 || g <= 0.0 || !g.is_finite() {
        return format!("{g:.2}");
    }
    let decimals = (2.0 - g.log10().floor()).clamp(2.0, 12.0) as usize;
    format!("{g:.decimals$}")
}

/// Iterations to fill `target`: starting at `first`, double the count of a run until it takes
/// a tenth of the target, then scale it to the target (at least `first`).
pub fn iterations_for(
    first: u64,
    target: Duration,
    mut run: impl FnMut(u64) -> Result<Duration>,
) -> Result<u64> {
    let mut k = first;
    let mut t = run(k)?;
    while t < target / 10 && k < 1 << 30 {
        k *= 2;
        t = run(k)?;
    }
    let per = t.as_secs_f64() / k as f64;
    Ok(if per > 0.0 { ((target.as_secs_f64() / per) as u64).clamp(first, 1 << 32) } else { k })
}

/// Measure `run` for about `target`: [`iterations_for`] from 8 iterations (`quick`: 8, no
/// calibration), then one measured run. Returns the iterations and the measured time.
pub fn calibrated(
    quick: bool,
    target: Duration,
    mut run: impl FnMut(u64) -> Result<Duration>,
) -> Result<(u64, Duration)> {
    let n = if quick { 8 } else { iterations_for(8, target, &mut run)? };
    Ok((n, run(n)?))
}

/// `snic dma ...`
pub fn run(args: DmaArgs) -> Result<()> {
    match args.cmd {
        Some(DmaCmd::Sweep(a)) => sweep::run(a),
        Some(DmaCmd::Bench(a)) => bench::run(a),
        None => run_job(args.job),
    }
}

/// One transfer job, as dma_to_device / dma_from_device.
fn run_job(a: JobArgs) -> Result<()> {
    ensure!(a.timeout > 0.0 && a.timeout.is_finite(), "--timeout must be positive");
    let timeout = Duration::from_secs_f64(a.timeout);
    let dir = if a.read { Dir::C2h } else { Dir::H2c };
    if a.file.is_some() && a.read {
        bail!("-f/--file is the H2C source; with -r use -w/--write-file for the received data");
    }
    if a.write_file.is_some() && !a.read {
        bail!("-w/--write-file writes C2H data; add -r");
    }
    let file_data = match &a.file {
        Some(p) => Some(std::fs::read(p).with_context(|| format!("reading {}", p.display()))?),
        None => None,
    };
    let size = match (a.size, &file_data) {
        (Some(s), _) => s,
        (None, Some(d)) => d.len() as u64,
        (None, None) => 4096,
    };
    ensure!(size > 0, "transfer size is 0");
    ensure!(size <= 1 << 32, "transfer size {size} is above 4 GiB");
    let len = size as usize;
    let data = match file_data {
        Some(mut d) => {
            ensure!(
                d.len() >= len,
                "{} has {} bytes, fewer than the transfer size {size}",
                a.file.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
                d.len()
            );
            d.truncate(len);
            d
        }
        None => pattern(len),
    };

    let session = Session::open(a.device.as_deref(), "snic-dma", a.verbose)?;
    let dev = &session.dev;
    let (dev_addr, allocated) = match a.address {
        Some(addr) => (addr.wrapping_add(a.offset), None),
        None => {
            let total = size.checked_add(a.offset).context("offset + size overflows")?;
            let base = dev
                .alloc_device(a.mem.kind(), total, 4096)
                .with_context(|| format!("allocating {total} bytes of {} memory", a.mem.name()))?;
            (base + a.offset, Some(base))
        }
    };
    let host = dev.alloc_host(len).context("allocating the host buffer")?;
    if a.verbose {
        for r in dev.device_regions() {
            println!("device memory: {} {:#x} ({} bytes)", r.kind.name(), r.base, r.size);
        }
        println!(
            "device {}, client {}, {} via {}, {} completion, device address {dev_addr:#x}, host \
             IOVA {:#x}, {size} bytes x {}",
            a.device.as_ref().map(|p| p.display().to_string()).unwrap_or("(private)".into()),
            dev.client_id(),
            dir.name().to_uppercase(),
            if a.queue { "a queue".to_string() } else { format!("channel {}", a.channel) },
            if a.interrupt { "interrupt" } else { "polled" },
            host.iova(),
            a.count
        );
    }
    let open = |d: Dir| -> Result<Mover> {
        if a.queue {
            Mover::queue(dev, d, a.interrupt)
        } else {
            Mover::channel(dev, d, a.channel, a.interrupt)
        }
    };

    // C2H with --verify: put the pattern on the device first.
    if dir == Dir::C2h && a.verify {
        host.write(0, &data).context("filling the host buffer")?;
        let mut m = open(Dir::H2c)?;
        m.prepare(Dir::H2c, host.iova(), dev_addr, size)?;
        m.run(timeout)?;
        host.write(0, &vec![0u8; len]).context("clearing the host buffer")?;
    } else if dir == Dir::H2c {
        host.write(0, &data).context("filling the host buffer")?;
    }

    let mut mover = open(dir)?;
    let (src, dst) = match dir {
        Dir::H2c => (host.iova(), dev_addr),
        Dir::C2h => (dev_addr, host.iova()),
    };
    mover.prepare(dir, src, dst, size)?;
    let mut total_bytes = 0u64;
    let mut total_secs = 0.0f64;
    for i in 0..a.count {
        let t0 = Instant::now();
        let moved = mover.run(timeout).map_err(|e| annotate(e, i))?;
        let secs = t0.elapsed().as_secs_f64();
        total_bytes += moved;
        total_secs += secs;
        println!(
            "#{i}: CLOCK_MONOTONIC {secs:.9} s, {moved} bytes, {} GB/s",
            fmt_gbps(gbps(moved, secs))
        );
    }
    println!(
        "** Average BW = {} GB/s, size = {size}, count = {}, total {total_secs:.9} s",
        fmt_gbps(gbps(total_bytes, total_secs)),
        a.count
    );

    let mut received = Vec::new();
    if dir == Dir::C2h {
        received = vec![0u8; len];
        host.read(0, &mut received).context("reading the host buffer")?;
        if let Some(p) = &a.write_file {
            std::fs::write(p, &received).with_context(|| format!("writing {}", p.display()))?;
            if a.verbose {
                println!("wrote {len} bytes to {}", p.display());
            }
        }
    }
    if a.verify {
        if dir == Dir::H2c {
            let back = dev.alloc_host(len).context("allocating the read-back buffer")?;
            let mut m = open(Dir::C2h)?;
            m.prepare(Dir::C2h, dev_addr, back.iova(), size)?;
            m.run(timeout)?;
            received = vec![0u8; len];
            back.read(0, &mut received).context("reading the read-back buffer")?;
        }
        match data.iter().zip(&received).position(|(x, y)| x != y) {
            None => println!("verify: OK ({len} bytes)"),
            Some(p) => bail!(
                "verify: data mismatch at byte {p}: sent {:#04x}, read back {:#04x}",
                data[p],
                received[p]
            ),
        }
    }
    if let Some(base) = allocated {
        dev.free_device(base).context("freeing the device buffer")?;
    }
    Ok(())
}

/// Name the failing run in an error.
fn annotate(e: anyhow::Error, run: u64) -> anyhow::Error {
    match e.downcast_ref::<DmaFailure>() {
        Some(f) => anyhow!("#{run}: {f}"),
        None => e.context(format!("transfer #{run}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_keeps_significant_digits() {
        assert_eq!(fmt_gbps(8.4912), "8.49");
        assert_eq!(fmt_gbps(0.1), "0.10");
        assert_eq!(fmt_gbps(0.004096), "0.00410");
        assert_eq!(fmt_gbps(0.000_123_4), "0.000123");
        assert_eq!(fmt_gbps(0.0), "0.00");
    }

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("0x1000").unwrap(), 4096);
        assert_eq!(parse_size("64B").unwrap(), 64);
        assert_eq!(parse_size("0xab").unwrap(), 0xab);
        assert_eq!(parse_size("4KB").unwrap(), 4096);
        assert!(parse_size("x").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
        assert_eq!(parse_u64("0xD000000000001000").unwrap(), 0xD000_0000_0000_1000);
    }

    #[test]
    fn chunks_cover_the_range_exactly() {
        let c = chunks(0x1000, 0x9000, 3 * CHUNK + 5);
        assert_eq!(c.len(), 4);
        assert_eq!(c[0], (0x1000, 0x9000, CHUNK as u32));
        assert_eq!(c[3], (0x1000 + 3 * CHUNK, 0x9000 + 3 * CHUNK, 5));
        assert_eq!(c.iter().map(|x| u64::from(x.2)).sum::<u64>(), 3 * CHUNK + 5);
        assert_eq!(chunks(0, 0, 64), vec![(0, 0, 64)]);
    }

    #[test]
    fn calibration_scales_to_the_target() {
        let mut calls = Vec::new();
        let mut fake = |k: u64| {
            calls.push(k);
            Ok(Duration::from_millis(k))
        };
        let (n, t) = calibrated(false, Duration::from_millis(100), &mut fake).unwrap();
        // 8 ms < 10 ms -> 16 ms; 1 ms each -> 100 iterations.
        assert_eq!(calls, vec![8, 16, 100]);
        assert_eq!((n, t), (100, Duration::from_millis(100)));
        let (n, _) =
            calibrated(true, Duration::from_secs(9), |k| Ok(Duration::from_millis(k))).unwrap();
        assert_eq!(n, 8);
        assert!(calibrated(false, Duration::from_secs(1), |_| Err(anyhow!("boom"))).is_err());
    }

    #[test]
    fn pattern_does_not_repeat_every_256_bytes() {
        let p = pattern(1024);
        assert_ne!(p[..256], p[256..512]);
        assert_eq!(p[1], 7);
    }

    #[test]
    fn gbps_is_bytes_per_nanosecond() {
        assert!((gbps(1_000_000_000, 1.0) - 1.0).abs() < 1e-12);
        assert_eq!(gbps(5, 0.0), 0.0);
    }
}
