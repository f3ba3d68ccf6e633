//! Observability as an operator uses it: the Prometheus endpoint of `snic run` and
//! `snic serve` (`--metrics`), scraped over HTTP and parsed strictly, and `snic top` (`--once`
//! text, and the live screen through a pseudo-terminal): rates per port and stage, the top
//! flows of a vSwitch run by packets and by bytes, and the rate of each RDMA QP of a
//! `snic serve` whose QPs move data.

mod common;

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SNIC: &str = env!("CARGO_BIN_EXE_snic");

/// How long a readiness wait may take before the test fails.
const READY: Duration = Duration::from_secs(30);

/// A child process stopped (SIGTERM, then SIGKILL) on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        common::netns::stop(&mut self.0, Duration::from_secs(5));
    }
}

/// Read lines of `r` until one contains `http://ADDR/metrics`; the rest is drained in a
/// thread so the child never blocks on a full pipe.
fn metrics_addr(r: impl Read + Send + 'static) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(r).lines().map_while(Result::ok) {
            if !sent && let Some(rest) = line.split("http://").nth(1) {
                let addr = rest.trim_end_matches("/metrics").to_owned();
                let _ = tx.send(addr);
                sent = true;
            }
        }
    });
    let addr = rx.recv_timeout(READY).expect("the metrics address is printed");
    addr.parse().unwrap_or_else(|e| panic!("{addr:?}: {e}"))
}

/// GET /metrics: the body, after checking the status and content type.
fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.contains("Content-Type: application/openmetrics-text; version=1.0.0"), "{head}");
    body.to_owned()
}

/// One series: its sample name and label set, as text.
type Series = (String, String);

/// Parse the exposition text strictly: every line is a HELP, TYPE or UNIT line of a family
/// declared once, a sample of the family declared last (counters end in `_total`, histograms
/// in `_bucket`/`_sum`/`_count`), or the final `# EOF`; label sets are `name="value"` pairs
/// with escaped values; values are numbers; no series twice. Returns the values and the
/// family type of each series.
fn parse(text: &str) -> BTreeMap<Series, (f64, String)> {
    let mut out = BTreeMap::new();
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut family = String::new();
    let mut eof = false;
    for line in text.lines() {
        assert!(!eof, "text after # EOF: {line}");
        if line == "# EOF" {
            eof = true;
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut p = rest.splitn(3, ' ');
            let (kind, name, arg) = (p.next().unwrap(), p.next().unwrap(), p.next().unwrap_or(""));
            assert!(name.starts_with("snic_"), "{line}");
            assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "{line}");
            match kind {
                "HELP" => {
                    assert!(!types.contains_key(name), "family {name} declared twice");
                    assert!(!arg.is_empty(), "empty help: {line}");
                    family = name.to_owned();
                }
                "TYPE" => {
                    assert_eq!(name, family, "TYPE of another family: {line}");
                    assert!(["counter", "gauge", "histogram"].contains(&arg), "{line}");
                    types.insert(name.to_owned(), arg.to_owned());
                }
                "UNIT" => {
                    assert_eq!(name, family, "{line}");
                    assert!(name.ends_with(&format!("_{arg}")), "unit not in the name: {line}");
                }
                _ => panic!("unknown comment line: {line}"),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
        let v: f64 = value.parse().unwrap_or_else(|_| panic!("bad value: {line}"));
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.strip_suffix('}').unwrap_or_else(|| panic!("{line}"))),
            None => (series, ""),
        };
        check_labels(labels, line);
        let ty = types.get(&family).unwrap_or_else(|| panic!("sample before TYPE: {line}"));
        let ok = match ty.as_str() {
            "counter" => name == format!("{family}_total"),
            "gauge" => name == family,
            _ => ["_bucket", "_sum", "_count"].iter().any(|s| name == format!("{family}{s}")),
        };
        assert!(ok, "sample {name} does not belong to {ty} family {family}");
        let prev = out.insert((name.to_owned(), labels.to_owned()), (v, ty.clone()));
        assert!(prev.is_none(), "series twice: {line}");
    }
    assert!(eof, "no # EOF");
    out
}

/// `a="x",b="y\"z"`: names of `[a-z_]`, values quoted with only `\\`, `\"`, `\n` escapes.
fn check_labels(l: &str, line: &str) {
    let mut rest = l;
    while !rest.is_empty() {
        let (name, after) = rest.split_once("=\"").unwrap_or_else(|| panic!("bad labels: {line}"));
        assert!(name.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{line}");
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => {
                    let e = chars.next().map(|(_, c)| c);
                    assert!(matches!(e, Some('\\' | '"' | 'n')), "bad escape: {line}");
                }
                Some((i, '"')) => break i,
                Some(_) => {}
                None => panic!("unterminated label value: {line}"),
            }
        };
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

fn value(m: &BTreeMap<Series, (f64, String)>, name: &str, labels: &str) -> f64 {
    m.get(&(name.to_owned(), labels.to_owned()))
        .unwrap_or_else(|| panic!("no {name}{{{labels}}} among {} series", m.len()))
        .0
}

/// Scrape until `ok` holds (or fail after [`READY`]).
fn scrape_until(
    addr: SocketAddr,
    what: &str,
    ok: impl Fn(&BTreeMap<Series, (f64, String)>) -> bool,
) -> BTreeMap<Series, (f64, String)> {
    let t0 = Instant::now();
    loop {
        let m = parse(&scrape(addr));
        if ok(&m) {
            return m;
        }
        assert!(t0.elapsed() < READY, "no scrape with {what} within {READY:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

const GEN: &str = "port=\"0\",kind=\"gen\",name=\"gen:100000000,1\"";
const NULL: &str = "port=\"1\",kind=\"null\",name=\"null\"";

/// A counter of a generator-to-null run that may move: port 0 receives, port 1 sends, the
/// stages pass packets and drop the generator's deliberately bad ones (bad ICRC, malformed),
/// and the run's totals follow.
fn may_move(name: &str, labels: &str) -> bool {
    let rx = ["snic_port_rx_packets_total", "snic_port_rx_bytes_total"];
    let dev_rx = ["snic_port_device_rx_packets_total", "snic_port_device_rx_bytes_total"];
    let tx = ["snic_port_tx_packets_total", "snic_port_tx_bytes_total"];
    let dev_tx = ["snic_port_device_tx_packets_total", "snic_port_device_tx_bytes_total"];
    if rx.contains(&name) || dev_rx.contains(&name) {
        return labels == GEN;
    }
    if tx.contains(&name) || dev_tx.contains(&name) {
        return labels == NULL;
    }
    if name == "snic_stage_drops_total" || name == "snic_drops_total" && !labels.is_empty() {
        return labels.contains("reason=\"malformed.") || labels.contains("reason=\"bad_icrc\"");
    }
    [
        "snic_stage_in_packets_total",
        "snic_stage_out_packets_total",
        "snic_stage_in_bytes_total",
        "snic_stage_classified_packets_total",
        "snic_drops_total",
        "snic_forwarded_packets_total",
        "snic_classified_packets_total",
    ]
    .contains(&name)
}

#[test]
fn run_metrics_move_with_traffic_and_nothing_else_moves() {
    let mut child = Command::new(SNIC)
        .args(["run", "--port", "gen:100000000", "--port", "null", "--duration", "60"])
        .args(["--metrics", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn snic run");
    let addr = metrics_addr(child.stderr.take().expect("stderr"));
    let _run = Proc(child);
    let rx = |m: &BTreeMap<Series, (f64, String)>| {
        m.get(&("snic_port_rx_packets_total".into(), GEN.into())).map_or(0.0, |v| v.0)
    };
    let first = scrape_until(addr, "traffic", |m| rx(m) > 0.0);
    let second = scrape_until(addr, "more traffic", |m| rx(m) > rx(&first));
    assert_eq!(first.keys().collect::<Vec<_>>(), second.keys().collect::<Vec<_>>());
    // What must move did.
    for (name, labels) in [
        ("snic_port_rx_packets_total", GEN),
        ("snic_port_rx_bytes_total", GEN),
        ("snic_port_tx_packets_total", NULL),
        ("snic_stage_in_packets_total", "stage=\"parse\""),
    ] {
        assert!(value(&second, name, labels) > value(&first, name, labels), "{name}{{{labels}}}");
    }
    // Every drop reason is there, zero or not, and the kernel counters of each port.
    assert_eq!(
        value(&second, "snic_stage_drops_total", "stage=\"l2fwd\",reason=\"no_egress\""),
        0.0
    );
    assert_eq!(value(&second, "snic_port_rx_kernel_drops_total", GEN), 0.0);
    assert_eq!(value(&second, "snic_workers", ""), 1.0);
    // Nothing else moved: every other counter has the same value in both scrapes.
    let mut moved = BTreeSet::new();
    for ((name, labels), (v, ty)) in &second {
        let before = first[&(name.clone(), labels.clone())].0;
        if ty == "counter" && *v != before {
            assert!(*v > before, "counter {name}{{{labels}}} went back");
            if !may_move(name, labels) {
                moved.insert(format!("{name}{{{labels}}}: {before} -> {v}"));
            }
        }
    }
    assert!(moved.is_empty(), "counters that must not move moved: {moved:#?}");
}

#[test]
fn serve_metrics_have_the_dma_and_rdma_families_and_dma_latency_moves() {
    let dir = common::temp_dir("hmetrics-serve");
    let sock = dir.join("snic.sock");
    // RoCE needs a fixed port: one the kernel just gave out and took back.
    let rdma = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut child = Command::new(SNIC)
        .args(["serve", "--workers", "1", "--metrics", "127.0.0.1:0", "--rdma"])
        .arg(rdma.to_string())
        .arg("--socket")
        .arg(&sock)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn snic serve");
    let addr = metrics_addr(child.stdout.take().expect("stdout"));
    let _serve = Proc(child);
    let before = scrape_until(addr, "the server's counters", |m| {
        m.contains_key(&("snic_serve_workers".into(), String::new()))
    });
    for name in [
        "snic_dma_descs_total",
        "snic_dma_h2c_bytes_total",
        "snic_rdma_retransmits_total",
        "snic_rdma_seq_naks_rcvd_total",
        "snic_rdma_cnps_sent_total",
        "snic_rdma_timeouts_total",
        "snic_rdma_tx_packets_total",
        "snic_rdma_message_latency_seconds_count",
    ] {
        assert_eq!(value(&before, name, ""), 0.0, "{name} before any work");
    }
    assert_eq!(value(&before, "snic_rdma_enabled", ""), 1.0);
    assert_eq!(value(&before, "snic_rdma_qps", ""), 0.0);
    let q = "path=\"queue\"";
    assert_eq!(value(&before, "snic_dma_completion_latency_seconds_count", q), 0.0);
    assert_eq!(
        value(&before, "snic_dma_completion_latency_seconds_bucket", &format!("le=\"+Inf\",{q}")),
        0.0
    );
    // Some DMA through the host library (a queue, then a channel): the descriptors, the bytes
    // and the latency samples move.
    let sock_s = sock.to_str().unwrap();
    for extra in [&["--queue"][..], &["--channel", "1"][..]] {
        let out = Command::new(SNIC)
            .args(["dma", "-d", sock_s, "-s", "65536", "-c", "20"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "snic dma: {}", String::from_utf8_lossy(&out.stderr));
    }
    let after = scrape_until(addr, "DMA work", |m| {
        m.get(&("snic_dma_completion_latency_seconds_count".into(), q.into()))
            .is_some_and(|v| v.0 > 0.0)
            && m.get(&("snic_dma_channel_runs_total".into(), String::new()))
                .is_some_and(|v| v.0 > 0.0)
    });
    assert!(value(&after, "snic_dma_descs_total", "") > 0.0);
    assert!(value(&after, "snic_dma_h2c_bytes_total", "") >= 20.0 * 65536.0);
    let ch = "path=\"channel\"";
    assert!(value(&after, "snic_dma_completion_latency_seconds_count", ch) > 0.0);
    assert!(value(&after, "snic_dma_completion_latency_seconds_sum", q) > 0.0);
    // The buckets are cumulative and end with the count.
    let count = value(&after, "snic_dma_completion_latency_seconds_count", q);
    let inf =
        value(&after, "snic_dma_completion_latency_seconds_bucket", &format!("le=\"+Inf\",{q}"));
    assert_eq!(inf, count);
    assert_eq!(value(&after, "snic_rdma_tx_packets_total", ""), 0.0, "no RDMA was asked for");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Start `snic run` (generator to null) with a control socket; wait until it answers with
/// traffic.
fn run_with_control(sock: &Path) -> Proc {
    let child = Command::new(SNIC)
        .args(["run", "--port", "gen:100000000", "--port", "null", "--duration", "60"])
        .arg("--control")
        .arg(sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn snic run");
    let p = Proc(child);
    let t0 = Instant::now();
    loop {
        let out = Command::new(SNIC).arg("stats").arg("--control").arg(sock).output().unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if v["ports"][0]["rx_packets"].as_u64().is_some_and(|n| n > 0) {
            return p;
        }
        assert!(t0.elapsed() < READY, "snic run never answered with traffic");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn top_once_prints_rates_per_port_and_stage() {
    let dir = common::temp_dir("hmetrics-top-once");
    let sock = dir.join("ctl.sock");
    let _run = run_with_control(&sock);
    let out = Command::new(SNIC)
        .args(["top", "--once", "--interval", "300", "--control"])
        .arg(&sock)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let line = |start: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("no line starting {start:?} in\n{text}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let nonzero = |cell: &str| !cell.starts_with("0pps") && !cell.starts_with("0bit");
    // Port 0 receives and sends nothing; port 1 sends.
    let p0 = line("0     gen:");
    assert!(nonzero(&p0[2]) && nonzero(&p0[3]), "{text}");
    assert_eq!(p0[4..6], ["0pps", "0bit/s"], "{text}");
    let p1 = line("1     null");
    assert_eq!(p1[2], "0pps", "{text}");
    assert!(nonzero(&p1[4]), "{text}");
    for stage in ["parse", "classify", "l2fwd"] {
        assert!(nonzero(&line(stage)[1]), "{stage} passes packets:\n{text}");
    }
    assert!(text.contains("\ndrops by reason\n"), "{text}");
    assert!(!text.contains("top flows"), "no vSwitch, no flows:\n{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// python3's `pty` is there (the live screen's tests drive `snic top` through it).
fn have_pty(test: &str) -> bool {
    let have = Command::new("python3")
        .args(["-c", "import pty"])
        .output()
        .is_ok_and(|o| o.status.success());
    common::need(have, "python3", test)
}

/// Run `snic top --interval 200 --control SOCK` in a pseudo-terminal of 120 x 60 until the
/// screen (escape sequences blanked) matches every regex of `patterns` (at most 20 s), then
/// press `q`. Returns `{"found": [first group of each match, or null], "exit": status,
/// "tail": the last output}`.
fn top_screen(sock: &Path, patterns: &[&str]) -> Value {
    let script = r#"
import json, os, pty, re, select, sys, time
snic, sock, pats = sys.argv[1], sys.argv[2], [re.compile(p) for p in json.loads(sys.argv[3])]
pid, fd = pty.fork()
if pid == 0:
    os.environ["TERM"] = "xterm"
    os.environ["COLUMNS"], os.environ["LINES"] = "120", "60"
    os.execv(snic, [snic, "top", "--interval", "200", "--control", sock])
import fcntl, struct, termios
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 120, 0, 0))
buf, found, deadline = b"", [None] * len(pats), time.time() + 20
while time.time() < deadline and None in found:
    r, _, _ = select.select([fd], [], [], 0.5)
    if r:
        try:
            buf += os.read(fd, 65536)
        except OSError:
            break
    text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b" ", buf).decode("utf-8", "replace")
    for i, p in enumerate(pats):
        m = p.search(text)
        if m and found[i] is None:
            found[i] = m.group(1) if p.groups else m.group(0)
os.write(fd, b"q")
status, t0 = None, time.time()
while time.time() - t0 < 10:
    p, st = os.waitpid(pid, os.WNOHANG)
    if p:
        status = os.waitstatus_to_exitcode(st)
        break
    try:
        select.select([fd], [], [], 0.2) and os.read(fd, 65536)
    except OSError:
        time.sleep(0.1)
if status is None:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
print(json.dumps({"found": found, "exit": status, "tail": buf[-400:].decode("utf-8", "replace")}))
"#;
    let pats = serde_json::to_string(patterns).unwrap();
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(SNIC)
        .arg(sock)
        .arg(pats)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The live screen through a pseudo-terminal (python3's `pty`): it shows a non-zero port
/// rate next to the generator port's name and quits on `q`.
#[test]
fn top_screen_shows_a_moving_port_rate_and_quits_on_q() {
    if !have_pty("top_screen_shows_a_moving_port_rate_and_quits_on_q") {
        return;
    }
    let dir = common::temp_dir("hmetrics-top-pty");
    let sock = dir.join("ctl.sock");
    let _run = run_with_control(&sock);
    let v = top_screen(&sock, &[r"gen:\S*\s+(\S*[1-9]\S*pps)"]);
    assert!(v["found"][0].is_string(), "no non-zero rate beside the generator port: {v}");
    assert_eq!(v["exit"], 0, "snic top quits with status 0 on q: {v}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The rows of the section `title` of a `snic top --once` text, split into cells (none when
/// it shows `(none)`); panics when there is no such section.
fn section(text: &str, title: &str) -> Vec<Vec<String>> {
    let mut lines = text.lines().skip_while(|l| *l != title);
    assert!(lines.next().is_some(), "no section {title:?} in\n{text}");
    lines
        .skip(1) // the header
        .take_while(|l| l.starts_with("  ") && l.trim() != "(none)")
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

/// A rate cell that is not zero (nor `new`: the thing was there at both samples).
fn moving(cell: &str) -> bool {
    let end = cell.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(cell.len());
    cell[..end].parse::<f64>().is_ok_and(|v| v > 0.0)
}

/// A frame from the default policy's VM (02:00:00:00:00:01, 10.0.0.1) to 10.0.0.2, UDP from
/// `sport` to 2000, with `len` bytes of payload.
fn vm_frame(sport: u16, len: usize) -> Vec<u8> {
    snic_scenario::packet::build(&format!(
        r#"Ether(src="02:00:00:00:00:01",dst="02:00:00:00:00:02")/IP(src="10.0.0.1",dst="10.0.0.2")/UDP(sport={sport},dport=2000)/Raw(len={len})"#
    ))
    .unwrap()
}

/// A `snic run --stage parse --stage vswitch` (the embedded policy: vPort 0 on port 0, the
/// uplink on port 1) fed on a UDP port 0 with two flows until dropped: from port 1000, four
/// small frames per round; from port 1001, one large one. The first leads by packets, the
/// second by bytes. Returns once the vSwitch has cached both.
struct VSwitchRun {
    _run: Proc,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sender: Option<std::thread::JoinHandle<()>>,
}

impl VSwitchRun {
    fn start(sock: &Path) -> VSwitchRun {
        use std::sync::atomic::{AtomicBool, Ordering};
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        // A free port for snic's end (bound and released; snic binds it right after).
        let addr = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let child = Command::new(SNIC)
            .args(["run", "--duration", "120", "--port"])
            .arg(format!("udp:{addr},{}", peer.local_addr().unwrap()))
            .args(["--port", "null", "--stage", "parse", "--stage", "vswitch", "--control"])
            .arg(sock)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn snic run");
        let run = Proc(child);
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let sender = {
            let stop = std::sync::Arc::clone(&stop);
            let (small, large) = (vm_frame(1000, 18), vm_frame(1001, 1200));
            std::thread::spawn(move || {
                let t0 = Instant::now();
                while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(90) {
                    for _ in 0..4 {
                        let _ = peer.send_to(&small, addr);
                    }
                    let _ = peer.send_to(&large, addr);
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        };
        let t0 = Instant::now();
        loop {
            let out = Command::new(SNIC)
                .args(["vswitch", "dump-flows", "--control"])
                .arg(sock)
                .output()
                .unwrap();
            let flows = String::from_utf8_lossy(&out.stdout);
            if ["src=10.0.0.1:1000,", "src=10.0.0.1:1001,"].iter().all(|k| flows.contains(k)) {
                break;
            }
            assert!(t0.elapsed() < READY, "the vSwitch never cached both flows: {flows}");
            std::thread::sleep(Duration::from_millis(50));
        }
        VSwitchRun { _run: run, stop, sender: Some(sender) }
    }
}

impl Drop for VSwitchRun {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(s) = self.sender.take() {
            let _ = s.join();
        }
    }
}

#[test]
fn top_once_lists_the_top_flows_by_packets_and_by_bytes() {
    let dir = common::temp_dir("hmetrics-top-flows");
    let sock = dir.join("ctl.sock");
    let _run = VSwitchRun::start(&sock);
    let out = Command::new(SNIC)
        .args(["top", "--once", "--interval", "300", "--control"])
        .arg(&sock)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    // Rows: flow key, packet rate, bit rate, packets, bytes.
    let num = |cell: &str| cell.parse::<u64>().unwrap_or_else(|_| panic!("{cell:?}:\n{text}"));
    for (title, leader) in [("top flows by packets", ":1000,"), ("top flows by bytes", ":1001,")] {
        let rows = section(&text, title);
        assert!(rows.len() >= 2, "both flows in {title}:\n{text}");
        let first = &rows[0];
        assert!(first[0].starts_with("port=0,out,proto=17,src=10.0.0.1"), "{title}:\n{text}");
        assert!(first[0].contains(leader), "{title} leads with {leader}:\n{text}");
        assert!(moving(&first[1]) && first[2].ends_with("bit/s") && moving(&first[2]), "{text}");
        assert!(num(&first[3]) > 0 && num(&first[4]) > num(&first[3]), "{title}:\n{text}");
        let sorted = |col: usize| rows.windows(2).all(|w| num(&w[0][col]) >= num(&w[1][col]));
        assert!(sorted(if title.ends_with("packets") { 3 } else { 4 }), "{title}:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn top_screen_shows_the_flows_table() {
    if !have_pty("top_screen_shows_the_flows_table") {
        return;
    }
    let dir = common::temp_dir("hmetrics-top-flows-pty");
    let sock = dir.join("ctl.sock");
    let _run = VSwitchRun::start(&sock);
    let v = top_screen(
        &sock,
        &[
            r"top flows by packets",
            r"top flows by bytes",
            r"src=10\.0\.0\.1:1000\S*\s+(\S*[1-9]\S*pps)",
        ],
    );
    assert!(v["found"].as_array().unwrap().iter().all(Value::is_string), "{v}");
    assert_eq!(v["exit"], 0, "snic top quits with status 0 on q: {v}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn top_once_shows_a_moving_rate_per_rdma_qp_of_serve() {
    use snic_host::{Device, Placement, RdmaSge, WC_SUCCESS, rdma_access};
    let dir = common::temp_dir("hmetrics-top-qps");
    let (sock, ctl) = (dir.join("snic.sock"), dir.join("ctl.sock"));
    // RoCE needs a fixed port: one the kernel just gave out and took back.
    let rdma = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let child = Command::new(SNIC)
        .args(["serve", "--no-huge", "--workers", "1", "--on-board", "16M", "--rdma"])
        .arg(rdma.to_string())
        .arg("--socket")
        .arg(&sock)
        .arg("--control")
        .arg(&ctl)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn snic serve");
    let _serve = Proc(child);
    let t0 = Instant::now();
    let dev = loop {
        if let Ok(d) = Device::connect(&sock, "top-qps") {
            break d;
        }
        assert!(t0.elapsed() < READY, "snic serve did not come up");
        std::thread::sleep(Duration::from_millis(20));
    };
    // Two QPs connected to each other over loopback RoCE; a WRITEs 16 KiB into b's memory.
    let n = 16usize << 10;
    let buf = dev.alloc_host(2 * n).unwrap();
    let rings = dev.alloc_host(16 << 10).unwrap();
    let (lkey, _) = dev.rdma_reg_mr(buf.iova(), n as u64, rdma_access::LOCAL_WRITE).unwrap();
    let (_, rkey) = dev.rdma_reg_mr(buf.iova() + n as u64, n as u64, rdma_access::ALL).unwrap();
    let a = dev.rdma_create_qp(Placement::Host(&rings), 16).unwrap();
    let b = dev.rdma_create_qp(Placement::OnBoard, 16).unwrap();
    let lo = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    dev.rdma_connect(a.qpn, b.qpn, lo, 1024).unwrap();
    dev.rdma_connect(b.qpn, a.qpn, lo, 1024).unwrap();
    let sge = RdmaSge { addr: buf.iova(), lkey, len: n as u32 };
    let write = |id: u64| {
        dev.rdma_post_write(a.qpn, id, sge, buf.iova() + n as u64, rkey).unwrap();
        let c = dev.rdma_wait_cq(a.qpn, 4, READY).unwrap();
        assert_eq!((c.len(), c[0].status), (1, WC_SUCCESS), "{c:?}");
    };
    write(0);
    // The control socket answers from a snapshot (refreshed every 100 ms): wait until it has
    // both QPs, so that they are in both of top's samples. WRITEs go on until top has printed.
    let t0 = Instant::now();
    loop {
        let out = Command::new(SNIC).arg("stats").arg("--control").arg(&ctl).output().unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if v["rdma"]["qp_list"].as_array().is_some_and(|l| l.len() == 2) {
            break;
        }
        assert!(t0.elapsed() < READY, "the QPs never showed in the counters: {v}");
        write(0);
    }
    let mut top = Command::new(SNIC)
        .args(["top", "--once", "--interval", "300", "--control"])
        .arg(&ctl)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let mut id = 1;
    while top.try_wait().unwrap().is_none() {
        assert!(t0.elapsed() < READY, "snic top --once did not finish");
        write(id);
        id += 1;
    }
    let out = top.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    // Rows: qpn, state, dest qpn, PSN advance sent, received, outstanding WQEs.
    let rows = section(&text, "rdma qps (PSN advance: requests sent, requests received)");
    let row = |qpn: u32| {
        rows.iter()
            .find(|r| r[0] == qpn.to_string())
            .unwrap_or_else(|| panic!("no row for QP {qpn}:\n{text}"))
            .clone()
    };
    let (ra, rb) = (row(a.qpn), row(b.qpn));
    assert_eq!(ra[1..3], ["Rts".to_owned(), b.qpn.to_string()], "{text}");
    assert!(moving(&ra[3]), "the requester's sent rate moves:\n{text}");
    assert!(moving(&rb[4]), "the responder's received rate moves:\n{text}");
    assert_eq!(rb[3], "0pps", "the responder sends no requests:\n{text}");
    let rdma = section(&text, "rdma");
    assert_eq!(rdma[0][0], "2", "two QPs:\n{text}");
    assert!(moving(&rdma[0][1]), "the engine's tx rate moves:\n{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
