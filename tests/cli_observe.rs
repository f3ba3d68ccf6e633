//! Observability as an operator uses it: the Prometheus endpoint of `snic run` and
//! `snic serve` (`--metrics`), scraped over HTTP and parsed strictly, and `snic top` (`--once`
//! text, and the live screen through a pseudo-terminal).

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

/// The live screen through a pseudo-terminal (python3's `pty`): it shows a non-zero port
/// rate next to the generator port's name and quits on `q`.
#[test]
fn top_screen_shows_a_moving_port_rate_and_quits_on_q() {
    let have = Command::new("python3")
        .args(["-c", "import pty"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !common::need(have, "python3", "top_screen_shows_a_moving_port_rate_and_quits_on_q") {
        return;
    }
    let dir = common::temp_dir("hmetrics-top-pty");
    let sock = dir.join("ctl.sock");
    let _run = run_with_control(&sock);
    let script = r#"
import json, os, pty, re, select, sys, time
snic, sock = sys.argv[1], sys.argv[2]
pid, fd = pty.fork()
if pid == 0:
    os.environ["TERM"] = "xterm"
    os.environ["COLUMNS"], os.environ["LINES"] = "120", "40"
    os.execv(snic, [snic, "top", "--interval", "200", "--control", sock])
import fcntl, struct, termios
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
buf, found, deadline = b"", None, time.time() + 20
rate = re.compile(r"gen:\S*\s+(\S*[1-9]\S*pps)")
while time.time() < deadline and found is None:
    r, _, _ = select.select([fd], [], [], 0.5)
    if r:
        try:
            buf += os.read(fd, 65536)
        except OSError:
            break
    text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b" ", buf).decode("utf-8", "replace")
    m = rate.search(text)
    if m:
        found = m.group(1)
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
print(json.dumps({"rate": found, "exit": status, "tail": buf[-400:].decode("utf-8", "replace")}))
"#;
    let out = Command::new("python3").arg("-c").arg(script).arg(SNIC).arg(&sock).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(v["rate"].is_string(), "no non-zero rate beside the generator port: {v}");
    assert_eq!(v["exit"], 0, "snic top quits with status 0 on q: {v}");
    let _ = std::fs::remove_dir_all(&dir);
}
