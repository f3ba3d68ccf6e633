//! `snic dma bench`: the host interface's figures in one run, across processes.
//!
//! 1. Bandwidth: H2C and C2H through a queue (polled, up to `--window` transfers in flight)
//!    against memcpy of the same size in this process, between the same registered host buffer
//!    (the DMA source / destination) and an ordinary heap buffer; ratio = DMA / memcpy.
//! 2. 64-byte operations per second: one doorbell and one completion per descriptor, serially
//!    (seed 003's single-request mode) and pipelined (reaped as they come), against batches of
//!    64 descriptors with one doorbell and one completion (EOP on the last only).
//! 3. Doorbell-to-completion latency of one 64-byte descriptor: polled vs interrupt (eventfd).

use super::{MemArg, Session, calibrated, check, gbps, parse_size, pattern};
use anyhow::{Context, Result, ensure};
use serde::Serialize;
use snic_dma::desc::flags;
use snic_dma::{Completion, Descriptor, Dir};
use snic_host::{HostBuf, HostError, Queue, QueueOpts};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Descriptors per batch in the batched operation-rate test.
const BATCH: u32 = 64;
/// Size of the operations of sections 2 and 3.
const OP_SIZE: u32 = 64;

/// Arguments of `snic dma bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// snic's setup socket; when omitted, a private `snic serve` child is started.
    #[arg(short = 'd', long = "device", value_name = "PATH")]
    pub device: Option<PathBuf>,
    /// Workers of the private server (without `-d`).
    #[arg(long, value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: u32,
    /// Transfer sizes of the bandwidth section (comma-separated, K/M suffixes).
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "4K,64K,1M",
          value_parser = parse_size)]
    pub sizes: Vec<u64>,
    /// Device memory of the bandwidth section.
    #[arg(long, value_enum, default_value = "on-board")]
    pub mem: MemArg,
    /// Transfers in flight on the queue in the bandwidth section.
    #[arg(long, value_name = "N", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=128))]
    pub window: u32,
    /// Seconds each bandwidth measurement (DMA or memcpy, per size and direction) aims for.
    #[arg(long, value_name = "SECS", default_value_t = 0.5)]
    pub seconds: f64,
    /// 64-byte operations per mode in the operation-rate section.
    #[arg(long, value_name = "N", default_value_t = 2_000_000,
          value_parser = clap::value_parser!(u64).range(64..=100_000_000))]
    pub ops: u64,
    /// Latency samples per completion mode.
    #[arg(long, value_name = "N", default_value_t = 2_000,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub samples: u64,
    /// Small counts (for tests): fast, not precise.
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object with the three sections instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Give up on a wait after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub timeout: f64,
    /// The server's log.
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

/// Section 1 row.
#[derive(Debug, Clone, Serialize)]
pub struct BwRow {
    /// "h2c" or "c2h".
    pub dir: &'static str,
    /// Bytes per transfer.
    pub size: u64,
    /// DMA transfers measured.
    pub dma_iters: u64,
    /// DMA GB/s (bytes per ns).
    pub dma_gbps: f64,
    /// memcpy copies measured.
    pub memcpy_iters: u64,
    /// memcpy GB/s.
    pub memcpy_gbps: f64,
    /// dma_gbps / memcpy_gbps.
    pub ratio: f64,
}

/// Section 2 row.
#[derive(Debug, Clone, Serialize)]
pub struct OpsRow {
    /// "single" (serial), "pipelined" or "batch64".
    pub mode: &'static str,
    /// Descriptors completed.
    pub ops: u64,
    /// Doorbells rung.
    pub doorbells: u64,
    /// Completion entries consumed.
    pub completions: u64,
    /// Wall time.
    pub seconds: f64,
    /// Millions of descriptors per second.
    pub mops: f64,
}

/// Section 3 row (microseconds).
#[derive(Debug, Clone, Serialize)]
pub struct LatRow {
    /// "poll" or "interrupt".
    pub completion: &'static str,
    /// Samples.
    pub samples: u64,
    /// Minimum.
    pub min_us: f64,
    /// Median.
    pub median_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Maximum.
    pub max_us: f64,
    /// Mean.
    pub mean_us: f64,
}

/// Everything `bench` measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Section 1.
    pub bandwidth: Vec<BwRow>,
    /// Section 2.
    pub ops_64b: Vec<OpsRow>,
    /// Section 2: batch64 mops / single mops (the target's ratio).
    pub ops_ratio: f64,
    /// Section 2: batch64 mops / pipelined mops.
    pub ops_ratio_pipelined: f64,
    /// Section 3.
    pub latency_64b: Vec<LatRow>,
}

/// Post `d` on the `dir` ring: `false` when the ring is full.
fn try_post(q: &mut Queue, dir: Dir, d: &Descriptor) -> Result<bool> {
    match q.post(dir, d) {
        Ok(()) => Ok(true),
        Err(HostError::RingFull) => Ok(false),
        Err(e) => Err(e).context("posting"),
    }
}

/// `iters` copies of `d` through `q`, at most `window` in flight; the wall time.
fn stream(
    q: &mut Queue,
    dir: Dir,
    d: &Descriptor,
    iters: u64,
    window: u32,
    timeout: Duration,
) -> Result<Duration> {
    let mut out = [Completion::default(); 64];
    let t0 = Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    while done < iters {
        let mut rung = false;
        while posted < iters && posted - done < u64::from(window) && try_post(q, dir, d)? {
            posted += 1;
            rung = true;
        }
        if rung {
            q.doorbell(dir);
        }
        let got = q.wait(&mut out, timeout).context("waiting for completions")?;
        for c in &out[..got] {
            check(c)?;
            done += 1;
        }
    }
    Ok(t0.elapsed())
}

/// Section 1.
fn bandwidth(a: &BenchArgs, s: &Session, timeout: Duration) -> Result<Vec<BwRow>> {
    let dev = &s.dev;
    let max = a.sizes.iter().copied().max().unwrap_or(4096);
    ensure!(max > 0 && max <= 1 << 28, "bandwidth sizes must be 1 .. 256 MiB");
    let devbuf = dev
        .alloc_device(a.mem.kind(), max, 4096)
        .with_context(|| format!("allocating {max} bytes of {} memory", a.mem.name()))?;
    let hb: HostBuf = dev.alloc_host(max as usize).context("allocating the host buffer")?;
    hb.write(0, &pattern(max as usize)).context("filling the host buffer")?;
    let mut heap = vec![0u8; max as usize];
    dev.write_device(devbuf, &heap).context("clearing device memory")?;
    let mut q = dev.open_queue(QueueOpts::default()).context("opening a queue")?;
    let target = Duration::from_secs_f64(a.seconds);
    let mut rows = Vec::new();
    for dir in [Dir::H2c, Dir::C2h] {
        for &size in &a.sizes {
            ensure!(size > 0, "size 0");
            let d = match dir {
                Dir::H2c => Descriptor::new(hb.iova(), devbuf, size as u32),
                Dir::C2h => Descriptor::new(devbuf, hb.iova(), size as u32),
            };
            let (dma_iters, dma_t) =
                calibrated(a.quick, target, |n| stream(&mut q, dir, &d, n, a.window, timeout))?;
            let len = size as usize;
            let (memcpy_iters, memcpy_t) = calibrated(a.quick, target, |n| {
                let t0 = Instant::now();
                for _ in 0..n {
                    match dir {
                        // H2C reads the registered buffer; so does this copy.
                        Dir::H2c => hb.read(0, &mut heap[..len]).context("memcpy")?,
                        // C2H writes the registered buffer; so does this copy.
                        Dir::C2h => hb.write(0, &heap[..len]).context("memcpy")?,
                    }
                    std::hint::black_box(&heap);
                }
                Ok(t0.elapsed())
            })?;
            let dma = gbps(size * dma_iters, dma_t.as_secs_f64());
            let mc = gbps(size * memcpy_iters, memcpy_t.as_secs_f64());
            rows.push(BwRow {
                dir: dir.name(),
                size,
                dma_iters,
                dma_gbps: dma,
                memcpy_iters,
                memcpy_gbps: mc,
                ratio: if mc > 0.0 { dma / mc } else { 0.0 },
            });
        }
    }
    drop(q);
    dev.free_device(devbuf).context("freeing device memory")?;
    Ok(rows)
}

/// Section 2.
fn ops(a: &BenchArgs, s: &Session, timeout: Duration) -> Result<(Vec<OpsRow>, f64, f64)> {
    let dev = &s.dev;
    let n = if a.quick { 4096 } else { a.ops.div_ceil(u64::from(BATCH)) * u64::from(BATCH) };
    let span = 64 * u64::from(OP_SIZE);
    let devbuf = dev.alloc_device(a.mem.kind(), span, 4096).context("allocating device memory")?;
    let hb = dev.alloc_host(span as usize).context("allocating the host buffer")?;
    hb.write(0, &pattern(span as usize)).context("filling the host buffer")?;
    let opts = QueueOpts { ring_size: 1024, cmpt_size: 2048, ..QueueOpts::default() };
    let mut q = dev.open_queue(opts).context("opening a queue")?;
    let desc = |i: u64, f: u16| {
        let off = (i % 64) * u64::from(OP_SIZE);
        Descriptor { src: hb.iova() + off, dst: devbuf + off, len: OP_SIZE, flags: f, next: 0 }
    };
    let mut out = vec![Completion::default(); 256];
    let dir = Dir::H2c;

    // Seed 003's single-request mode: post one descriptor, ring its doorbell, poll until its
    // completion arrives, then the next: one doorbell and one completion poll per descriptor,
    // serially.
    let t0 = Instant::now();
    for i in 0..n {
        q.post(dir, &desc(i, flags::SOP | flags::EOP)).context("posting")?;
        q.doorbell(dir);
        q.wait(&mut out[..1], timeout).context("waiting")?;
        check(&out[0])?;
    }
    let t_single = t0.elapsed().as_secs_f64();
    let single = OpsRow {
        mode: "single",
        ops: n,
        doorbells: n,
        completions: n,
        seconds: t_single,
        mops: n as f64 / t_single / 1e6,
    };

    // One doorbell and one completion per descriptor, but without waiting: completions are
    // reaped as they come, so many descriptors are in flight (a polling NIC then picks up
    // several per doorbell scan: batching it does by itself).
    let t0 = Instant::now();
    let (mut posted, mut done, mut doorbells, mut cmpts) = (0u64, 0u64, 0u64, 0u64);
    while done < n {
        let mut full = false;
        if posted < n {
            if try_post(&mut q, dir, &desc(posted, flags::SOP | flags::EOP))? {
                q.doorbell(dir);
                posted += 1;
                doorbells += 1;
            } else {
                full = true;
            }
        }
        let got = if posted == n || full {
            q.wait(&mut out, timeout).context("waiting")?
        } else {
            q.poll(&mut out)
        };
        for c in &out[..got] {
            check(c)?;
            done += 1;
            cmpts += 1;
        }
    }
    let t_pipe = t0.elapsed().as_secs_f64();
    let pipelined = OpsRow {
        mode: "pipelined",
        ops: n,
        doorbells,
        completions: cmpts,
        seconds: t_pipe,
        mops: n as f64 / t_pipe / 1e6,
    };

    // Batches of 64: one doorbell, one completion (EOP on the last descriptor only).
    let t0 = Instant::now();
    let (mut posted, mut done, mut doorbells, mut cmpts) = (0u64, 0u64, 0u64, 0u64);
    let b = u64::from(BATCH);
    while done < n {
        while posted < n && q.free_slots(dir) >= BATCH {
            for k in 0..b {
                let f = if k + 1 == b {
                    flags::EOP
                } else if k == 0 {
                    flags::SOP
                } else {
                    0
                };
                q.post(dir, &desc(posted + k, f)).context("posting")?;
            }
            q.doorbell(dir);
            doorbells += 1;
            posted += b;
        }
        let got = q.wait(&mut out, timeout).context("waiting")?;
        for c in &out[..got] {
            check(c)?;
            done += b;
            cmpts += 1;
        }
    }
    let t_batch = t0.elapsed().as_secs_f64();
    let batch = OpsRow {
        mode: "batch64",
        ops: n,
        doorbells,
        completions: cmpts,
        seconds: t_batch,
        mops: n as f64 / t_batch / 1e6,
    };
    let ratio = if single.mops > 0.0 { batch.mops / single.mops } else { 0.0 };
    let pipe_ratio = if pipelined.mops > 0.0 { batch.mops / pipelined.mops } else { 0.0 };
    drop(q);
    dev.free_device(devbuf).context("freeing device memory")?;
    Ok((vec![single, pipelined, batch], ratio, pipe_ratio))
}

/// Percentile of sorted samples (nearest rank).
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Summary of latency samples in microseconds.
fn summarize(completion: &'static str, mut us: Vec<f64>) -> LatRow {
    us.sort_by(f64::total_cmp);
    let n = us.len();
    LatRow {
        completion,
        samples: n as u64,
        min_us: us.first().copied().unwrap_or(0.0),
        median_us: percentile(&us, 50.0),
        p99_us: percentile(&us, 99.0),
        max_us: us.last().copied().unwrap_or(0.0),
        mean_us: if n > 0 { us.iter().sum::<f64>() / n as f64 } else { 0.0 },
    }
}

/// Section 3.
fn latency(a: &BenchArgs, s: &Session, timeout: Duration) -> Result<Vec<LatRow>> {
    let dev = &s.dev;
    let samples = if a.quick { 50 } else { a.samples };
    let devbuf = dev.alloc_device(a.mem.kind(), 4096, 4096).context("allocating device memory")?;
    let hb = dev.alloc_host(4096).context("allocating the host buffer")?;
    let d = Descriptor::new(hb.iova(), devbuf, OP_SIZE);
    let mut rows = Vec::new();
    let mut out = [Completion::default(); 4];
    for interrupt in [false, true] {
        let mut q = dev
            .open_queue(QueueOpts { interrupt, ..QueueOpts::default() })
            .context("opening a queue")?;
        let mut us = Vec::with_capacity(samples as usize);
        for i in 0..samples + 10 {
            let t0 = Instant::now();
            q.post(Dir::H2c, &d).context("posting")?;
            q.doorbell(Dir::H2c);
            let got = q.wait(&mut out, timeout).context("waiting")?;
            let dt = t0.elapsed();
            for c in &out[..got] {
                check(c)?;
            }
            // The first ten are warm-up.
            if i >= 10 {
                us.push(dt.as_secs_f64() * 1e6);
            }
        }
        rows.push(summarize(super::sweep::completion_name(interrupt), us));
    }
    dev.free_device(devbuf).context("freeing device memory")?;
    Ok(rows)
}

/// `snic dma bench`
pub fn run(a: BenchArgs) -> Result<()> {
    ensure!(a.timeout > 0.0 && a.timeout.is_finite(), "--timeout must be positive");
    ensure!(a.seconds > 0.0 && a.seconds.is_finite(), "--seconds must be positive");
    ensure!(!a.sizes.is_empty(), "--sizes is empty");
    let timeout = Duration::from_secs_f64(a.timeout);
    let s = Session::open_with(a.device.as_deref(), "snic-dma-bench", a.workers, a.verbose)?;
    let say = |m: &str| {
        if !a.json {
            eprintln!("{m}");
        }
    };
    say("bench: 1/3 bandwidth, DMA vs memcpy ...");
    let bw = bandwidth(&a, &s, timeout)?;
    say("bench: 2/3 64-byte operation rate ...");
    let (ops_rows, ratio, pipe_ratio) = ops(&a, &s, timeout)?;
    say("bench: 3/3 doorbell-to-completion latency ...");
    let lat = latency(&a, &s, timeout)?;
    let r = Report {
        bandwidth: bw,
        ops_64b: ops_rows,
        ops_ratio: ratio,
        ops_ratio_pipelined: pipe_ratio,
        latency_64b: lat,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print_report(&a, &s, &r);
    }
    Ok(())
}

fn print_report(a: &BenchArgs, s: &Session, r: &Report) {
    println!(
        "snic dma bench: client {} of a snic with {} workers, huge pages {}",
        s.dev.client_id(),
        s.dev.workers(),
        if s.dev.huge_pages() { "yes" } else { "no" }
    );
    println!();
    println!(
        "1. Bandwidth: DMA through one queue (polled, {} in flight, {} memory) vs memcpy in \
         this process",
        a.window,
        a.mem.name()
    );
    println!(
        "   memcpy copies between the DMA's registered host buffer and a heap buffer (H2C: \
         reads it, C2H: writes it); ratio = DMA / memcpy (target >= 0.9 at 1 MiB)"
    );
    println!(
        "{:<4} {:>10} {:>10} {:>10} {:>12} {:>12} {:>7}",
        "dir", "size", "dma iters", "DMA GB/s", "memcpy iters", "memcpy GB/s", "ratio"
    );
    for b in &r.bandwidth {
        println!(
            "{:<4} {:>10} {:>10} {:>10.3} {:>12} {:>12.3} {:>7.3}",
            b.dir, b.size, b.dma_iters, b.dma_gbps, b.memcpy_iters, b.memcpy_gbps, b.ratio
        );
    }
    println!();
    println!("2. 64-byte H2C operations per second (one queue, polled)");
    println!(
        "   single: post 1 + doorbell, wait for its completion, next (seed 003's single-request); \
         pipelined: doorbell + completion per descriptor, reaped as they come; batch64: 64 \
         descriptors, one doorbell, one completion (EOP on the last)"
    );
    println!(
        "{:<9} {:>10} {:>10} {:>12} {:>10} {:>10}",
        "mode", "ops", "doorbells", "completions", "seconds", "Mops/s"
    );
    for o in &r.ops_64b {
        println!(
            "{:<9} {:>10} {:>10} {:>12} {:>10.4} {:>10.3}",
            o.mode, o.ops, o.doorbells, o.completions, o.seconds, o.mops
        );
    }
    println!("   batch64 / single = {:.2}x (target >= 5x)", r.ops_ratio);
    println!("   batch64 / pipelined = {:.2}x", r.ops_ratio_pipelined);
    println!();
    println!(
        "3. Doorbell-to-completion latency of one 64-byte H2C descriptor (post + doorbell -> \
         completion seen), microseconds"
    );
    println!(
        "{:<10} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "completion", "samples", "min", "median", "p99", "max", "mean"
    );
    for l in &r.latency_64b {
        println!(
            "{:<10} {:>8} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
            l.completion, l.samples, l.min_us, l.median_us, l.p99_us, l.max_us, l.mean_us
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn summary_orders_samples() {
        let r = summarize("poll", vec![5.0, 1.0, 3.0]);
        assert_eq!((r.min_us, r.median_us, r.max_us), (1.0, 3.0, 5.0));
        assert!((r.mean_us - 3.0).abs() < 1e-12);
        assert_eq!(r.samples, 3);
    }
}
