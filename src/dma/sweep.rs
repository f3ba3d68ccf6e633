//! `snic dma sweep`: bandwidth vs transfer size, as the XDMA figures of "In-Network Memory
//! Access: Bridging SmartNIC and Host Memory" (64 B .. 1 MiB, 1..4 channels, H2C and C2H,
//! on-chip and on-board memory, polled and interrupt completion).
//!
//! A point with N channels starts the transfer on all N channels at once (each moving the
//! transfer size to or from its own device buffer; the channels are spread over snic's
//! workers), waits for all of them, and repeats `iters` times; bandwidth is all bytes moved
//! over the wall time.

use super::point::Point;
use super::{MemArg, Session, check_channel, gbps, iterations_for, parse_size, plot};
use anyhow::{Context, Result, ensure};
use snic_dma::desc::{DESC_SIZE, flags};
use snic_dma::{Descriptor, Dir};
use snic_host::{Channel, Device, HostBuf};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Directions on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DirSel {
    /// Host to card only.
    H2c,
    /// Card to host only.
    C2h,
    /// Both.
    Both,
}

/// Memories on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MemSel {
    /// On-chip only.
    OnChip,
    /// On-board only.
    OnBoard,
    /// Both.
    Both,
}

/// Completion modes on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompletionSel {
    /// Busy-polled.
    Poll,
    /// Interrupt (eventfd).
    Interrupt,
    /// Both.
    Both,
}

/// Arguments of `snic dma sweep`.
#[derive(Debug, Clone, clap::Args)]
pub struct SweepArgs {
    /// snic's setup socket; when omitted, a private `snic serve` child is started.
    #[arg(short = 'd', long = "device", value_name = "PATH")]
    pub device: Option<PathBuf>,
    /// Workers of the private server (without `-d`).
    #[arg(long, value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: u32,
    /// Smallest transfer size (rounded up to a power of two).
    #[arg(long, value_name = "BYTES", default_value = "64", value_parser = parse_size)]
    pub min: u64,
    /// Largest transfer size.
    #[arg(long, value_name = "BYTES", default_value = "1M", value_parser = parse_size)]
    pub max: u64,
    /// Channel counts 1 ..= N.
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u8).range(1..=4))]
    pub channels: u8,
    /// Directions.
    #[arg(long, value_enum, default_value = "both")]
    pub dir: DirSel,
    /// Device memories.
    #[arg(long, value_enum, default_value = "both")]
    pub mem: MemSel,
    /// Completion modes.
    #[arg(long, value_enum, default_value = "both")]
    pub completion: CompletionSel,
    /// Transfers per channel per point (default: as many as fit the time budget).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub iters: Option<u64>,
    /// Time budget of the whole sweep in seconds (when --iters is not given).
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    pub seconds: f64,
    /// A few transfers per point (for tests): fast, not precise.
    #[arg(long)]
    pub quick: bool,
    /// Print the points as one JSON array instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Write PREFIX.svg and PREFIX.png: bandwidth vs size, one line per channel count, one
    /// panel per (direction, memory, completion).
    #[arg(long, value_name = "PREFIX")]
    pub plot: Option<PathBuf>,
    /// Give up on a transfer after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub timeout: f64,
    /// Notes on skipped points and buffer sizes; the server's log.
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

/// Powers of two from `min` (rounded up) to `max`.
pub fn sizes(min: u64, max: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = min.max(1).next_power_of_two();
    while s <= max {
        v.push(s);
        match s.checked_mul(2) {
            Some(n) => s = n,
            None => break,
        }
    }
    v
}

/// Everything one completion mode's client owns.
struct Rig {
    dev: Device,
    /// Channels per direction (index = channel number).
    chans: Vec<(Dir, Vec<Channel>)>,
    /// One host data buffer per channel index.
    host: Vec<HostBuf>,
    /// Descriptors: slot (dir * 4 + index).
    chain: HostBuf,
}

fn dirs(sel: DirSel) -> Vec<Dir> {
    match sel {
        DirSel::H2c => vec![Dir::H2c],
        DirSel::C2h => vec![Dir::C2h],
        DirSel::Both => vec![Dir::H2c, Dir::C2h],
    }
}

fn mems(sel: MemSel) -> Vec<MemArg> {
    match sel {
        MemSel::OnChip => vec![MemArg::OnChip],
        MemSel::OnBoard => vec![MemArg::OnBoard],
        MemSel::Both => vec![MemArg::OnChip, MemArg::OnBoard],
    }
}

fn completions(sel: CompletionSel) -> Vec<bool> {
    match sel {
        CompletionSel::Poll => vec![false],
        CompletionSel::Interrupt => vec![true],
        CompletionSel::Both => vec![false, true],
    }
}

/// Completion name.
pub fn completion_name(interrupt: bool) -> &'static str {
    if interrupt { "interrupt" } else { "poll" }
}

fn chain_slot(dir: Dir, index: usize) -> usize {
    (usize::from(dir.code()) * 4 + index) * DESC_SIZE
}

/// Allocate `n` device buffers of `want` bytes in `mem`; halve the size while they do not fit
/// (on-chip memory is small). Returns the addresses and the size that fitted.
fn alloc_fit(
    dev: &Device,
    mem: MemArg,
    n: usize,
    want: u64,
    floor: u64,
) -> Result<(Vec<u64>, u64)> {
    let mut size = want;
    loop {
        let mut got = Vec::new();
        let mut failed = None;
        for _ in 0..n {
            match dev.alloc_device(mem.kind(), size, 4096) {
                Ok(a) => got.push(a),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        match failed {
            None => return Ok((got, size)),
            Some(e) => {
                for a in got {
                    dev.free_device(a).context("freeing a device buffer")?;
                }
                if size / 2 < floor {
                    return Err(e).with_context(|| {
                        format!("{n} buffers of {size} bytes of {} memory", mem.name())
                    });
                }
                size /= 2;
            }
        }
    }
}

/// Run `iters` rounds: start the transfer on every channel, then wait for each in turn (a
/// channel's own [`Channel::wait`]: busy-polled, or on its interrupt eventfd) until the
/// round's deadline. One host thread: on a small machine, a busy-polling thread per channel
/// would take the cores the workers need. Stops early after `cap`. Returns the wall time and
/// the transfers done.
fn measure(
    chans: &mut [Channel],
    chain: u64,
    dir: Dir,
    iters: u64,
    cap: Option<Duration>,
    timeout: Duration,
) -> Result<(Duration, u64)> {
    let n = chans.len();
    let t0 = Instant::now();
    let mut rounds = 0u64;
    while rounds < iters {
        if cap.is_some_and(|c| t0.elapsed() > c) {
            break;
        }
        for (i, ch) in chans.iter_mut().enumerate() {
            ch.start(chain + chain_slot(dir, i) as u64).context("starting a channel")?;
        }
        let deadline = Instant::now() + timeout;
        for (i, ch) in chans.iter_mut().enumerate() {
            let left = deadline.saturating_duration_since(Instant::now());
            let r = ch.wait(left).with_context(|| format!("waiting for channel {i}"))?;
            check_channel(&r).with_context(|| format!("channel {i}"))?;
        }
        rounds += 1;
    }
    Ok((t0.elapsed(), rounds * n as u64))
}

/// [`iterations_for`] from 4 transfers, then measure with the time capped at twice the target
/// (transfer times vary under load).
fn calibrate(
    target: Duration,
    mut m: impl FnMut(u64, Option<Duration>) -> Result<(Duration, u64)>,
) -> Result<(Duration, u64)> {
    let n = iterations_for(4, target, |k| Ok(m(k, None)?.0))?;
    m(n, Some(target * 2))
}

/// `snic dma sweep`
pub fn run(a: SweepArgs) -> Result<()> {
    ensure!(a.timeout > 0.0 && a.timeout.is_finite(), "--timeout must be positive");
    ensure!(a.seconds > 0.0 && a.seconds.is_finite(), "--seconds must be positive");
    let timeout = Duration::from_secs_f64(a.timeout);
    let sizes = sizes(a.min, a.max);
    ensure!(!sizes.is_empty(), "no power of two between --min {} and --max {}", a.min, a.max);
    ensure!(a.max <= 1 << 30, "--max above 1 GiB");
    let max_size = *sizes.last().unwrap_or(&a.max);
    let nch = usize::from(a.channels);
    let dirs = dirs(a.dir);
    let mems = mems(a.mem);
    let comps = completions(a.completion);
    let total = comps.len() * mems.len() * dirs.len() * nch * sizes.len();
    let target = Duration::from_secs_f64((a.seconds / total as f64).clamp(0.002, 2.0));
    let fixed = if a.quick { Some(a.iters.unwrap_or(3)) } else { a.iters };

    let pb = if a.json || !std::io::stderr().is_terminal() {
        indicatif::ProgressBar::hidden()
    } else {
        let pb = indicatif::ProgressBar::with_draw_target(
            Some(total as u64),
            indicatif::ProgressDrawTarget::stderr(),
        );
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{bar:40.cyan/blue} {pos}/{len} points [{elapsed_precise} < {eta_precise}] {msg}",
        ) {
            pb.set_style(style);
        }
        pb
    };

    let session = Session::open_with(a.device.as_deref(), "snic-dma-sweep", a.workers, a.verbose)?;
    let mut points = Vec::new();
    let mut notes = Vec::new();
    for &interrupt in &comps {
        let dev = session.connect_again(
            a.device.as_deref(),
            &format!("snic-dma-sweep-{}", completion_name(interrupt)),
        )?;
        let mut chans = Vec::new();
        for &d in &dirs {
            let mut v = Vec::new();
            for i in 0..a.channels {
                v.push(
                    dev.channel(d, i, interrupt)
                        .with_context(|| format!("setting up {} channel {i}", d.name()))?,
                );
            }
            chans.push((d, v));
        }
        let mut host = Vec::new();
        for _ in 0..nch {
            let hb = dev.alloc_host(max_size as usize).context("allocating a host buffer")?;
            // Touch every page now so page faults are not measured.
            hb.write(0, &vec![0x5a; max_size as usize]).context("filling a host buffer")?;
            host.push(hb);
        }
        let chain = dev.alloc_host(4096).context("allocating the descriptor buffer")?;
        let mut rig = Rig { dev, chans, host, chain };
        for &mem in &mems {
            let (bufs, fit) = alloc_fit(&rig.dev, mem, nch, max_size, sizes[0])?;
            if fit < max_size {
                let note = format!(
                    "{} memory: {nch} buffers of {fit} bytes fit; sizes above {fit} skipped",
                    mem.name()
                );
                if !notes.contains(&note) {
                    notes.push(note);
                }
            }
            // Touch the device buffers once (the server's memory may be lazily backed).
            for &b in &bufs {
                rig.dev
                    .write_device(b, &vec![0u8; fit as usize])
                    .context("clearing device memory")?;
            }
            for (dir, chs) in rig.chans.iter_mut() {
                let dir = *dir;
                for n in 1..=nch {
                    for &size in &sizes {
                        pb.set_message(format!(
                            "{} {} {} {n}ch {size}B",
                            dir.name(),
                            mem.name(),
                            completion_name(interrupt)
                        ));
                        if size > fit {
                            pb.inc(1);
                            continue;
                        }
                        for (i, (hb, &db)) in rig.host.iter().zip(&bufs).take(n).enumerate() {
                            let (src, dst) = match dir {
                                Dir::H2c => (hb.iova(), db),
                                Dir::C2h => (db, hb.iova()),
                            };
                            let d = Descriptor {
                                src,
                                dst,
                                len: size as u32,
                                flags: flags::SOP | flags::EOP | flags::STOP,
                                next: 0,
                            };
                            rig.chain
                                .write(chain_slot(dir, i), &d.encode())
                                .context("writing a descriptor")?;
                        }
                        let chain = rig.chain.iova();
                        let what =
                            || format!("{} {} {n} channel(s) {size} bytes", dir.name(), mem.name());
                        let mut m =
                            |k: u64, cap| measure(&mut chs[..n], chain, dir, k, cap, timeout);
                        let (t, total) = match fixed {
                            Some(k) => m(k, None),
                            None => calibrate(target, m),
                        }
                        .with_context(what)?;
                        let secs = t.as_secs_f64();
                        points.push(Point {
                            dir: dir.name(),
                            mem: mem.name(),
                            completion: completion_name(interrupt),
                            channels: n as u8,
                            size,
                            iters: total / n as u64,
                            seconds: secs,
                            gbps: gbps(size * total, secs),
                        });
                        pb.inc(1);
                    }
                }
            }
            for b in bufs {
                rig.dev.free_device(b).context("freeing a device buffer")?;
            }
        }
    }
    pb.finish_and_clear();

    if a.json {
        println!("{}", serde_json::to_string_pretty(&points)?);
    } else {
        print_table(&points);
    }
    for n in &notes {
        eprintln!("note: {n}");
    }
    if let Some(prefix) = &a.plot {
        let r = plot::plot(&points, prefix)?;
        let msg = format!(
            "plots: {} and {}{}",
            r.svg.display(),
            r.png.display(),
            if r.text { String::new() } else { format!(" (no text: {})", r.note) }
        );
        eprintln!("{msg}");
    }
    Ok(())
}

/// The table: one row per point.
pub fn print_table(points: &[Point]) {
    println!(
        "{:<4} {:<9} {:<10} {:>8} {:>10} {:>9} {:>12} {:>9}",
        "dir", "mem", "completion", "channels", "size", "iters", "seconds", "GB/s"
    );
    for p in points {
        println!(
            "{:<4} {:<9} {:<10} {:>8} {:>10} {:>9} {:>12.6} {:>9.3}",
            p.dir, p.mem, p.completion, p.channels, p.size, p.iters, p.seconds, p.gbps
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_powers_of_two_in_range() {
        let s = sizes(64, 1 << 20);
        assert_eq!(s.len(), 15);
        assert_eq!(s[0], 64);
        assert_eq!(*s.last().unwrap(), 1 << 20);
        assert_eq!(sizes(100, 300), vec![128, 256]);
        assert!(sizes(600, 300).is_empty());
    }

    #[test]
    fn calibration_doubles_then_caps() {
        let mut calls = Vec::new();
        let r = calibrate(Duration::from_millis(100), |k, cap| {
            calls.push((k, cap));
            Ok((Duration::from_millis(k), k))
        })
        .unwrap();
        // 4 ms, 8 ms (< 10 ms), 16 ms -> 1 ms each -> 100 transfers, capped at 200 ms.
        assert_eq!(
            calls,
            vec![(4, None), (8, None), (16, None), (100, Some(Duration::from_millis(200)))]
        );
        assert_eq!(r, (Duration::from_millis(100), 100));
    }

    #[test]
    fn chain_slots_do_not_overlap() {
        let mut all: Vec<usize> = [Dir::H2c, Dir::C2h]
            .iter()
            .flat_map(|&d| (0..4).map(move |i| chain_slot(d, i)))
            .collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 8);
        assert!(all.iter().all(|&o| o + DESC_SIZE <= 4096));
    }
}
