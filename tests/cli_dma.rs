//! `snic dma`, `snic dma sweep` and `snic dma bench` as a user runs them: separate processes,
//! a real `snic serve` (spawned by the tool itself, or by the test and named with `-d`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SNIC: &str = env!("CARGO_BIN_EXE_snic");
/// Longest any one command may run before the test gives up on it.
const DEADLINE: Duration = Duration::from_secs(120);

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let p =
            std::env::temp_dir().join(format!("snic-cli-dma-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).expect("scratch dir");
        Scratch(p)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A `snic serve` started by the test; killed on drop.
struct Server {
    child: Child,
    socket: PathBuf,
}

impl Server {
    fn start(dir: &Scratch) -> Server {
        Server::start_with(dir, &[])
    }

    /// Started through `prefix` (a command that execs the rest, as `prlimit ... --`).
    fn start_with(dir: &Scratch, prefix: &[&str]) -> Server {
        let socket = dir.path("snic.sock");
        let mut cmd = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(SNIC);
                c
            }
            None => Command::new(SNIC),
        };
        let mut child = cmd
            .args(["serve", "--workers", "2", "--socket"])
            .arg(&socket)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn snic serve");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("read the listening line");
        assert!(line.contains("listening"), "unexpected first line: {line:?}");
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sink = String::new();
            while out.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
                sink.clear();
            }
        });
        Server { child, socket }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run snic with `args`, killing it after [`DEADLINE`].
fn snic(args: &[&str]) -> Output {
    let mut child = Command::new(SNIC)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn snic");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "snic {args:?} ran longer than {DEADLINE:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Run and require success; stdout.
fn ok(args: &[&str]) -> String {
    let out = snic(args);
    assert!(
        out.status.success(),
        "snic {args:?} failed ({})\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn a_job_spawns_its_own_server_and_prints_bandwidth() {
    let out = ok(&["dma", "-s", "4096", "-c", "2"]);
    let runs: Vec<&str> = out.lines().filter(|l| l.contains("CLOCK_MONOTONIC")).collect();
    assert_eq!(runs.len(), 2, "{out}");
    assert!(runs[0].starts_with("#0: ") && runs[1].starts_with("#1: "), "{out}");
    for r in &runs {
        assert!(r.contains(", 4096 bytes, ") && r.ends_with(" GB/s"), "{r}");
    }
    let avg = out.lines().find(|l| l.starts_with("** Average BW = ")).expect("average line");
    assert!(avg.contains("size = 4096") && avg.contains("count = 2"), "{avg}");
    let bw: f64 = avg["** Average BW = ".len()..]
        .split_whitespace()
        .next()
        .and_then(|x| x.parse().ok())
        .expect("a number");
    assert!(bw > 0.0, "{avg}");

    // The same through a queue, with interrupt completion and verification, C2H.
    let out = ok(&["dma", "-s", "64K", "-r", "--queue", "--interrupt", "--verify"]);
    assert!(
        out.contains("#0: CLOCK_MONOTONIC") && out.contains("verify: OK (65536 bytes)"),
        "{out}"
    );
}

#[test]
fn file_round_trip_through_device_memory() {
    let dir = Scratch::new("file");
    let server = Server::start(&dir);
    let sock = s(&server.socket).to_string();

    // Where on-board memory starts: -v lists the device regions.
    let info = ok(&["dma", "-d", &sock, "-v", "-s", "64"]);
    let base = info
        .lines()
        .find_map(|l| l.strip_prefix("device memory: on-board "))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| panic!("no on-board region in:\n{info}"));
    let addr = format!("{:#x}", base + (1 << 20));

    let data: Vec<u8> =
        (0..100_003u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let input = dir.path("in.bin");
    let output = dir.path("out.bin");
    std::fs::write(&input, &data).unwrap();
    // H2C from the file over channel 2 (size from the file), then C2H over channel 1 to a file.
    ok(&["dma", "-d", &sock, "-a", &addr, "-f", s(&input), "--channel", "2"]);
    let n = data.len().to_string();
    ok(&["dma", "-d", &sock, "-a", &addr, "-r", "-s", &n, "-w", s(&output), "--channel", "1"]);
    assert_eq!(std::fs::read(&output).unwrap(), data);

    // -o is added to the address: reading 1000 bytes further starts 1000 bytes into the data.
    ok(&["dma", "-d", &sock, "-a", &addr, "-o", "1000", "-r", "-s", "64", "-w", s(&output)]);
    assert_eq!(std::fs::read(&output).unwrap(), data[1000..1064]);
}

#[test]
fn a_bad_address_fails_with_the_dma_status() {
    // Host-space address: no device memory there.
    let out = snic(&["dma", "-a", "0x1234", "-s", "4096"]);
    assert!(!out.status.success(), "stdout:\n{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(err.contains("DMA failed: status"), "{err}");
    assert!(!text(&out.stdout).contains("Average BW"), "{}", text(&out.stdout));

    // Past the end of device space, through a queue: same, with the reason.
    let out = snic(&["dma", "-a", "0xDFFFFFFFFFFFF000", "-s", "4096", "--queue", "-r"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("DMA failed: status"), "{err}");

    // Bad arguments are refused before anything runs.
    let out = snic(&["dma", "-s", "0"]);
    assert!(!out.status.success());
    let out = snic(&["dma", "--channel", "4"]);
    assert!(!out.status.success());
}

#[test]
fn sweep_writes_json_table_and_plots() {
    let dir = Scratch::new("sweep");
    let prefix = dir.path("sweep");
    let out = ok(&[
        "dma",
        "sweep",
        "--quick",
        "--json",
        "--min",
        "64",
        "--max",
        "256",
        "--channels",
        "2",
        "--plot",
        s(&prefix),
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    let pts = v.as_array().expect("an array");
    // 2 completions x 2 memories x 2 directions x 2 channel counts x 3 sizes.
    assert_eq!(pts.len(), 48, "{out}");
    let mut seen = std::collections::BTreeSet::new();
    for p in pts {
        let dir = p["dir"].as_str().unwrap();
        let mem = p["mem"].as_str().unwrap();
        let comp = p["completion"].as_str().unwrap();
        let ch = p["channels"].as_u64().unwrap();
        let size = p["size"].as_u64().unwrap();
        assert!(["h2c", "c2h"].contains(&dir) && ["on-chip", "on-board"].contains(&mem));
        assert!(["poll", "interrupt"].contains(&comp) && (1..=2).contains(&ch));
        assert!([64, 128, 256].contains(&size));
        assert_eq!(p["iters"].as_u64(), Some(3));
        assert!(p["seconds"].as_f64().unwrap() > 0.0);
        assert!(p["gbps"].as_f64().unwrap() > 0.0, "{p}");
        seen.insert((dir.to_string(), mem.to_string(), comp.to_string(), ch, size));
    }
    assert_eq!(seen.len(), 48, "points repeat");
    let svg = std::fs::read_to_string(dir.path("sweep.svg")).expect("svg");
    assert!(svg.contains("<svg") && svg.len() > 1000);
    let png = std::fs::read(dir.path("sweep.png")).expect("png");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(png.len() > 1000);

    // The table form: a header and one row per point.
    let out = ok(&[
        "dma",
        "sweep",
        "--quick",
        "--min",
        "4K",
        "--max",
        "4K",
        "--channels",
        "1",
        "--dir",
        "c2h",
        "--mem",
        "on-chip",
        "--completion",
        "poll",
    ]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].contains("GB/s") && lines[1].starts_with("c2h  on-chip   poll"), "{out}");
}

#[test]
fn bench_reports_all_three_sections() {
    let out = ok(&["dma", "bench", "--quick", "--json", "--sizes", "4K,64K"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    let bw = v["bandwidth"].as_array().expect("bandwidth");
    assert_eq!(bw.len(), 4, "{out}");
    for r in bw {
        assert!(r["dma_gbps"].as_f64().unwrap() > 0.0 && r["memcpy_gbps"].as_f64().unwrap() > 0.0);
        assert!(r["ratio"].as_f64().unwrap() > 0.0);
    }
    let ops = v["ops_64b"].as_array().expect("ops");
    assert_eq!(ops.len(), 3);
    assert_eq!(ops[0]["mode"], "single");
    assert_eq!(ops[1]["mode"], "pipelined");
    assert_eq!(ops[2]["mode"], "batch64");
    let n = ops[0]["ops"].as_u64().unwrap();
    for o in &ops[..2] {
        assert_eq!(o["ops"].as_u64(), Some(n));
        assert_eq!(o["doorbells"].as_u64(), Some(n));
        assert_eq!(o["completions"].as_u64(), Some(n));
    }
    assert_eq!(ops[2]["doorbells"].as_u64().unwrap() * 64, n);
    assert_eq!(ops[2]["completions"].as_u64().unwrap() * 64, n);
    assert!(v["ops_ratio_pipelined"].as_f64().unwrap() > 0.0);
    assert!(v["ops_ratio"].as_f64().unwrap() > 0.0);
    let lat = v["latency_64b"].as_array().expect("latency");
    assert_eq!(lat.len(), 2);
    for (r, comp) in lat.iter().zip(["poll", "interrupt"]) {
        assert_eq!(r["completion"], comp);
        let (min, med, p99, max) = (
            r["min_us"].as_f64().unwrap(),
            r["median_us"].as_f64().unwrap(),
            r["p99_us"].as_f64().unwrap(),
            r["max_us"].as_f64().unwrap(),
        );
        assert!(0.0 < min && min <= med && med <= p99 && p99 <= max, "{r}");
    }
}

/// `snic serve` keeps a descriptor per client, region and eventfd: it raises its soft
/// descriptor limit to the hard one.
#[test]
fn serve_raises_its_descriptor_limit() {
    let dir = Scratch::new("nofile");
    let server = Server::start_with(&dir, &["prlimit", "--nofile=256:4096", "--"]);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", server.child.id()))
        .expect("read the server's limits");
    let line = limits.lines().find(|l| l.starts_with("Max open files")).expect("a NOFILE line");
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(&words[3..5], ["4096", "4096"], "{line}");
}
