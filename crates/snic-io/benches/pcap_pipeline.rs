//! pcap → pipeline → pcap, in packets per second: the path `snic run` takes for
//! `--port pcap:IN --port pcap:,OUT` with the default chain (parse, classify, l2fwd 0 → 1).
//!
//! Two inputs of 100 000 frames each, written once to a pcap file in a temporary directory
//! before anything is measured:
//!
//! - `mix`: the generator's deterministic traffic mix (`snic_io::generator::frames`, seed 1):
//!   IPv4/IPv6 UDP and TCP, VLAN, QinQ, VXLAN, Geneve, NVGRE, ARP, ICMP, every RoCEv2 RC opcode
//!   with a valid ICRC, and about 4 % malformed frames (truncated, bad ICRC) that the chain drops;
//! - `trio`: a round robin of a 64-byte UDP frame, a VXLAN-in-UDP TCP frame and a RoCEv2 RDMA
//!   WRITE ONLY with a valid ICRC (the frames of `snic-pipeline`'s `parse_classify` bench), with
//!   64 flows each; every frame is forwarded.
//!
//! What is measured (throughput in input frames, except `write`):
//!
//! - `runtime_1w` / `runtime_2w`: the whole run, `Runtime::new` + `Runtime::run` with one worker
//!   (the I/O loop runs the pipeline inline) or two worker threads, from port specs parsed like
//!   `--port` arguments: open both files, read every frame, process, write the forwarded frames,
//!   flush, close. This is the real runtime code path, stopped by the input's end. The output
//!   file of the previous iteration is deleted first (not timed), so each run creates a new file.
//! - `runtime_1w_overwrite`: the same, but the previous output is left in place, so opening it
//!   truncates the previous ~17 MB output in the page cache, and ext4 forces the new data out
//!   when the file is closed (its `auto_da_alloc` rule for truncated files): what rerunning
//!   `snic run` over the same output path costs.
//!
//! (`snic run --port pcap:IN,OUT` alone, one port, forwards nothing with the default chain:
//! the default `l2fwd` map pairs ports 0 and 1, so every frame is a `no_egress` drop. Hence the
//! two ports here.)
//! - `read`: only the pcap port's receive side (`worker::receive` until the file is exhausted).
//! - `pipeline`: only `Pipeline::process` over the same frames pre-loaded into 256-packet
//!   batches (refilling a batch is not timed), no file I/O.
//! - `write`: only the transmit side, for the frames the chain forwards: create the output port
//!   (a new file), `worker::transmit` every batch into it, flush, close (refilling a batch is not
//!   timed); throughput in frames written.
//!
//! Before measuring, one run of the runtime (one and two workers) and of the pipeline alone is
//! checked: the output file must hold exactly the frames the chain is expected to forward.
//!
//! Run: `cargo bench -p snic-io --bench pcap_pipeline -- --warm-up-time 1 --measurement-time 5`
//!
//! The temporary directory is `$TMPDIR` (default `/tmp`); `TMPDIR=/dev/shm` puts both files on
//! tmpfs and shows what the file system costs. These are wall-clock figures: on a shared machine
//! other processes' CPU use inflates them (up to 3x was seen on 2 cores); run under
//! `nice -n -15` or on an idle machine.

use criterion::{
    BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use snic_io::null::NullPort;
use snic_io::pcap::PcapPort;
use snic_io::runtime::{RunConfig, RunReport, Runtime};
use snic_io::worker::{receive, transmit};
use snic_io::{Port, PortSpec};
use snic_pipeline::testing::frames;
use snic_pipeline::{Batch, Counters, MAX_BATCH, Pipeline, PortId, TraceRing};
use snic_time::Instant;
use std::fs::File;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant as WallClock};

/// Frames per input file.
const FRAMES: usize = 100_000;
/// Seed of the generator mix.
const SEED: u64 = 1;
/// Flows per frame kind in the `trio` input.
const TRIO_FLOWS: usize = 64;

/// One input: its frames, the pcap file holding them, and what the default chain forwards.
struct Workload {
    name: &'static str,
    frames: Vec<Vec<u8>>,
    /// The frames the default chain forwards, in order.
    forwarded: Vec<Vec<u8>>,
    input: PathBuf,
    output: PathBuf,
}

fn mix() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let all = snic_io::generator::frames(FRAMES, SEED);
    let forwarded = all.iter().filter(|(k, _)| !k.is_malformed()).map(|(_, f)| f.clone()).collect();
    (all.into_iter().map(|(_, f)| f).collect(), forwarded)
}

fn trio() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let flows: Vec<[Vec<u8>; 3]> = (0..TRIO_FLOWS)
        .map(|i| {
            let i16 = i as u16;
            let write = frames::Write {
                udp_src: 0xc000 + i16,
                dest_qp: 0x11 + i as u32,
                ..frames::Write::default()
            };
            [
                frames::udp64(1024 + i16, 5678),
                frames::vxlan(100 + i as u32, &frames::tcp_frame(40_000 + i16, 443, &[0x5a; 64])),
                frames::roce_write(write, false),
            ]
        })
        .collect();
    let all: Vec<Vec<u8>> =
        (0..FRAMES).map(|n| flows[(n / 3) % TRIO_FLOWS][n % 3].clone()).collect();
    (all.clone(), all)
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut w =
        PcapWriter::new(File::create(path).expect("create input pcap")).expect("write pcap header");
    for (i, f) in frames.iter().enumerate() {
        let len = u32::try_from(f.len()).expect("frame fits a pcap record");
        w.write_packet(&PcapPacket::new(Duration::from_micros(i as u64), len, f))
            .expect("write pcap record");
    }
}

fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let mut r = PcapReader::new(File::open(path).expect("open output pcap")).expect("pcap header");
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.expect("pcap record").data.to_vec());
    }
    out
}

/// `snic run --port pcap:IN --port pcap:,OUT [--workers N]`, without signal handling.
fn run_runtime(w: &Workload, workers: usize) -> RunReport {
    let ports = [format!("pcap:{}", w.input.display()), format!("pcap:,{}", w.output.display())];
    let ports = ports.iter().map(|s| s.parse::<PortSpec>().expect("port spec")).collect();
    let mut cfg = RunConfig::new(ports);
    cfg.workers = workers;
    let rt = Runtime::new(cfg).expect("runtime starts");
    let (stop, stats) = (AtomicBool::new(false), AtomicBool::new(false));
    rt.run(&stop, &stats, |_| {}).expect("run completes")
}

/// Delete the output file a previous run left, so that the next run creates a new one.
fn remove_output(w: &Workload) {
    match std::fs::remove_file(&w.output) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("cannot remove {}: {e}", w.output.display()),
    }
}

/// The default chain, built the way the runtime builds it for two ports.
fn default_pipeline() -> Pipeline {
    Pipeline::from_strs(&["parse", "classify", "l2fwd"]).expect("default chain builds")
}

/// Refill `batch` with `chunk`, as received on port 0.
fn refill(batch: &mut Batch, chunk: &[Vec<u8>], egress: Option<PortId>) {
    batch.clear();
    for f in chunk {
        let p = batch.push_frame(f).expect("chunk fits the batch");
        p.meta.ingress = PortId(0);
        p.meta.egress = egress;
    }
}

/// Check once, outside the measurements, that the measured paths do what they claim.
fn check(w: &Workload) {
    let want = w.forwarded.len() as u64;
    for workers in [1, 2] {
        let r = run_runtime(w, workers);
        assert_eq!(r.ports[0].counters.rx_packets, FRAMES as u64, "{}: {r}", w.name);
        assert_eq!(r.ports[1].counters.tx_packets, want, "{}: {r}", w.name);
        assert_eq!(r.counters.total_drops(), FRAMES as u64 - want, "{}: {r}", w.name);
        let mut got = read_pcap(&w.output);
        if workers == 1 {
            assert!(got == w.forwarded, "{}: output differs from the forwarded frames", w.name);
        } else {
            // Flows are spread over workers: order holds within a flow only.
            let mut expect = w.forwarded.clone();
            got.sort();
            expect.sort();
            assert!(got == expect, "{}: output differs from the forwarded frames", w.name);
        }
    }
    let mut p = default_pipeline();
    let mut batch = Batch::new(MAX_BATCH);
    let mut fwd = 0;
    for chunk in w.frames.chunks(MAX_BATCH) {
        refill(&mut batch, chunk, None);
        p.process(Instant::ZERO, &mut batch);
        assert!(batch.iter().all(|p| p.meta.egress == Some(PortId(1))));
        fwd += batch.len() as u64;
    }
    assert_eq!(fwd, want, "{}: pipeline alone", w.name);
}

fn bench_workload(c: &mut Criterion, w: &Workload) {
    let mut g = c.benchmark_group("pcap_pipeline");
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(10);
    g.throughput(Throughput::Elements(FRAMES as u64));

    for workers in [1, 2] {
        let id = BenchmarkId::new(format!("runtime_{workers}w"), w.name);
        g.bench_function(id, |b| {
            b.iter_batched(
                || remove_output(w),
                |()| black_box(run_runtime(w, workers)),
                BatchSize::PerIteration,
            )
        });
    }
    if w.name == "mix" {
        g.bench_function(BenchmarkId::new("runtime_1w_overwrite", w.name), |b| {
            b.iter(|| black_box(run_runtime(w, 1)))
        });
    }

    g.bench_function(BenchmarkId::new("read", w.name), |b| {
        let mut rx = Batch::new(MAX_BATCH);
        let mut io = Counters::default();
        b.iter(|| {
            let mut port = PcapPort::open(Some(&w.input), None).expect("open input");
            let mut n = 0;
            while !port.is_exhausted() {
                rx.clear();
                n += receive(Instant::ZERO, &mut port, 0, &mut rx, &mut io);
            }
            assert_eq!(n, FRAMES);
        })
    });

    g.bench_function(BenchmarkId::new("pipeline", w.name), |b| {
        let mut p = default_pipeline();
        let mut batch = Batch::new(MAX_BATCH);
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                for chunk in w.frames.chunks(MAX_BATCH) {
                    refill(&mut batch, chunk, None);
                    let t = WallClock::now();
                    p.process(Instant::ZERO, &mut batch);
                    timed += t.elapsed();
                    black_box(batch.len());
                }
            }
            timed
        })
    });

    g.throughput(Throughput::Elements(w.forwarded.len() as u64));
    g.bench_function(BenchmarkId::new("write", w.name), |b| {
        let mut batch = Batch::new(MAX_BATCH);
        let mut tx: Vec<Batch> = (0..2).map(|_| Batch::new(MAX_BATCH)).collect();
        let mut io = Counters::default();
        let mut trace = TraceRing::new(1);
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                remove_output(w);
                let t = WallClock::now();
                let out = PcapPort::open(None, Some(&w.output)).expect("create output");
                let mut ports: Vec<Box<dyn Port>> = vec![Box::new(NullPort::new()), Box::new(out)];
                timed += t.elapsed();
                for chunk in w.forwarded.chunks(MAX_BATCH) {
                    refill(&mut batch, chunk, Some(PortId(1)));
                    let t = WallClock::now();
                    transmit(Instant::ZERO, &mut batch, &mut ports, &mut tx, &mut io, &mut trace);
                    timed += t.elapsed();
                }
                let t = WallClock::now();
                ports[1].flush().expect("flush output");
                let written = ports[1].counters().tx_packets;
                drop(ports);
                timed += t.elapsed();
                assert_eq!(written, w.forwarded.len() as u64);
            }
            timed
        })
    });
    g.finish();
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temporary directory");
    eprintln!(
        "PacketBuf: {} bytes in the batch (Metadata {} bytes) + its frame buffer",
        size_of::<snic_pipeline::PacketBuf>(),
        size_of::<snic_pipeline::Metadata>()
    );
    for (name, (frames, forwarded)) in [("mix", mix()), ("trio", trio())] {
        let w = Workload {
            name,
            input: dir.path().join(format!("{name}-in.pcap")),
            output: dir.path().join(format!("{name}-out.pcap")),
            frames,
            forwarded,
        };
        write_pcap(&w.input, &w.frames);
        let bytes: usize = w.frames.iter().map(Vec::len).sum();
        eprintln!(
            "{name}: {} frames ({} forwarded), mean {:.1} bytes/frame",
            w.frames.len(),
            w.forwarded.len(),
            bytes as f64 / w.frames.len() as f64
        );
        check(&w);
        bench_workload(c, &w);
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
