//! Streaming kernels (`--stage kernel:NAME`) end to end against the built binary, without
//! root: ChaCha20-Poly1305 over UDP payloads through two pcap runs (encrypt, then decrypt
//! gives the capture back; a tampered packet is a `kernel_auth` drop and nothing else), the
//! telemetry table of a live two-worker `snic run` read, reset and switched off over the
//! control socket (`snic stream ...`), and the table of a whole NIC (`snic serve --port`) read
//! by a host program from device memory with the memory API.

mod common;

use serde_json::Value;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Longest wait for anything a running snic should do.
const WAIT: Duration = Duration::from_secs(20);
const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

fn snic() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_snic"));
    c.env_remove("RUST_LOG");
    c
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A UDP frame (IPv4 or IPv6) from source port `sport` with `n` payload bytes.
fn udp(v6: bool, sport: u16, n: usize) -> Vec<u8> {
    let mut f = Vec::new();
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let b = if v6 {
        b.ipv6([0xfd; 16], [0xfe; 16], 64)
    } else {
        b.ipv4([10, 1, 0, 1], [10, 1, 0, 2], 64)
    };
    let payload: Vec<u8> = (0..n).map(|i| (i * 7 + usize::from(sport)) as u8).collect();
    b.udp(sport, 4500).write(&mut f, &payload).unwrap();
    f
}

/// `snic run` from `input` to `output` with `stages`; the final counters as JSON.
fn pcap_run(input: &Path, output: &Path, stages: &[&str]) -> Value {
    let mut c = snic();
    c.args(["run", "--json", "--port"]).arg(format!("pcap:{}", input.display()));
    c.arg("--port").arg(format!("pcap:,{}", output.display()));
    for s in stages {
        c.args(["--stage", s]);
    }
    let out = common::run_ok(&mut c);
    serde_json::from_slice(&out.stdout).expect("run --json prints JSON")
}

fn stage<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["stages"].as_array().unwrap().iter().find(|s| s["name"] == name).unwrap()
}

#[test]
fn crypt_round_trips_a_capture_and_drops_tampering_as_kernel_auth() {
    let dir = common::temp_dir("cli-stream-crypt");
    let frames: Vec<Vec<u8>> =
        (0..12).map(|i| udp(i % 2 == 1, 1000 + i as u16, 40 + 90 * i)).collect();
    let (input, mid, out) = (dir.join("in.pcap"), dir.join("mid.pcap"), dir.join("out.pcap"));
    common::write_pcap(&input, &frames);
    let enc = format!("kernel:crypt,mode=encrypt,key={KEY}");
    let dec = format!("kernel:crypt,mode=decrypt,key={KEY}");
    let r = pcap_run(&input, &mid, &["parse", &enc, "l2fwd"]);
    assert_eq!(stage(&r, "kernel:crypt")["packets_out"], 12, "{r}");
    let sealed = common::read_pcap(&mid);
    assert_eq!(sealed.len(), 12);
    for (s, f) in sealed.iter().zip(&frames) {
        assert_eq!(s.len(), f.len() + 29, "slot, nonce and tag added");
        assert!(!s.windows(24).any(|w| f[f.len() - 24..] == *w), "plaintext left in the packet");
    }
    let r = pcap_run(&mid, &out, &["parse", &dec, "l2fwd"]);
    assert_eq!(common::read_pcap(&out), frames, "decrypting gives the capture back: {r}");
    peer_decrypts(&sealed, &frames);
    // One bit flipped in one sealed packet: exactly one kernel_auth drop, the rest intact.
    let mut bad = sealed.clone();
    let last = bad[3].len() - 1;
    bad[3][last] ^= 0x80;
    common::write_pcap(&mid, &bad);
    let r = pcap_run(&mid, &out, &["parse", &dec, "l2fwd"]);
    let st = stage(&r, "kernel:crypt");
    assert_eq!(st["drops"], serde_json::json!({"kernel_auth": 1}), "{r}");
    let mut want = frames.clone();
    want.remove(3);
    assert_eq!(common::read_pcap(&out), want);
    // Telemetry beside it: the run's final report carries the table.
    let r = pcap_run(&input, &mid, &["parse", "kernel:telemetry", &enc, "l2fwd"]);
    let w = &r["stream"]["telemetry"]["workers"][0];
    assert_eq!(w["header"]["entries"], 12, "{r}");
    let bytes: u64 = frames.iter().map(|f| f.len() as u64).sum();
    assert_eq!(w["header"]["bytes"], bytes);
    assert_eq!(w["flows"][11]["src_port"], 1011);
    // Without a key the packets are dropped, not sent in the clear.
    let r = pcap_run(&input, &mid, &["parse", "kernel:crypt,mode=encrypt", "l2fwd"]);
    assert_eq!(stage(&r, "kernel:crypt")["drops"], serde_json::json!({"kernel_no_key": 12}));
    // A bad argument is refused before anything runs.
    let o =
        snic().args(["run", "--port", "null", "--stage", "kernel:crypt,mode=up"]).output().unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("argument mode: encrypt or decrypt"), "{}", text(&o));
}

/// The UDP payload of a frame.
fn udp_payload(f: &[u8]) -> Vec<u8> {
    let s = etherparse::SlicedPacket::from_ethernet(f).unwrap();
    match s.transport {
        Some(etherparse::TransportSlice::Udp(u)) => u.payload().to_vec(),
        _ => panic!("not UDP"),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// An implementation nobody here wrote (Python's `cryptography`, OpenSSL underneath) reads
/// the wire format: slot byte (the associated data), 12-byte nonce, ciphertext, 16-byte tag.
fn peer_decrypts(sealed: &[Vec<u8>], frames: &[Vec<u8>]) {
    let test = "crypt_round_trips_a_capture_and_drops_tampering_as_kernel_auth";
    let have = Command::new("python3")
        .args(["-c", "import cryptography.hazmat.primitives.ciphers.aead"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !common::need(have, "python3 with cryptography", test) {
        return;
    }
    let script = r#"
import sys
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
key = bytes.fromhex(sys.argv[1])
for line in sys.stdin.read().split():
    p = bytes.fromhex(line)
    print(ChaCha20Poly1305(key).decrypt(p[1:13], p[13:], p[:1]).hex())
"#;
    let input: String = sealed.iter().map(|f| hex(&udp_payload(f)) + "\n").collect();
    let mut child = Command::new("python3")
        .args(["-c", script, KEY])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "python: {}", String::from_utf8_lossy(&out.stderr));
    let got: Vec<String> =
        String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
    let want: Vec<String> = frames.iter().map(|f| hex(&udp_payload(f))).collect();
    assert_eq!(got, want, "the peer's plaintexts");
}

/// A running snic (run or serve) with its control socket.
struct Live {
    child: Child,
    ctl: PathBuf,
}

impl Live {
    fn stream(&self, args: &[&str]) -> String {
        let o = snic()
            .arg("stream")
            .arg(args[0])
            .arg("--control")
            .arg(&self.ctl)
            .args(&args[1..])
            .output()
            .unwrap();
        assert!(o.status.success(), "snic stream {args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn table(&self) -> Value {
        serde_json::from_str(&self.stream(&["table", "telemetry", "--json"])).unwrap()
    }

    /// Flows and packets over every worker's table.
    fn totals(&self) -> (u64, u64) {
        let t = self.table();
        let ws = t["workers"].as_array().unwrap().clone();
        let flows = ws.iter().map(|w| w["header"]["entries"].as_u64().unwrap()).sum();
        let pkts = ws
            .iter()
            .flat_map(|w| w["flows"].as_array().unwrap().clone())
            .map(|f| f["packets"].as_u64().unwrap())
            .sum();
        (flows, pkts)
    }

    fn wait_until(&mut self, what: &str, ok: impl Fn(&Live) -> bool) {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("snic exited ({status:?}) while waiting until {what}");
            }
            if ok(self) {
                return;
            }
            assert!(Instant::now() < deadline, "gave up waiting until {what}: {}", self.table());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        common::netns::stop(&mut self.child, Duration::from_secs(5));
    }
}

fn wait_for_socket(child: &mut Child, ctl: &Path) {
    let t0 = Instant::now();
    while !ctl.exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "snic exited before serving its control socket"
        );
        assert!(t0.elapsed() < WAIT, "no control socket");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn telemetry_of_a_live_run_is_read_reset_and_switched_off_over_the_control_socket() {
    let dir = common::temp_dir("cli-stream-live");
    let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let ctl = dir.join("ctl.sock");
    let mut child = snic()
        .args(["run", "--duration", "120", "--workers", "2", "--port"])
        .arg(format!("udp:{addr},{}", peer.local_addr().unwrap()))
        .args(["--port", "null", "--stage", "parse", "--stage", "kernel:telemetry,capacity=64"])
        .args(["--stage", "l2fwd", "--control"])
        .arg(&ctl)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_socket(&mut child, &ctl);
    let mut live = Live { child, ctl };
    // Five flows, 1 + 2 + ... + 5 packets.
    for flow in 0..5u16 {
        for _ in 0..=flow {
            peer.send_to(&udp(false, 2000 + flow, 100), addr).unwrap();
        }
    }
    live.wait_until("15 packets in 5 flows", |l| l.totals() == (5, 15));
    let t = live.table();
    let mut per_flow: Vec<(u64, u64)> = t["workers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| w["flows"].as_array().unwrap().clone())
        .map(|f| (f["src_port"].as_u64().unwrap(), f["packets"].as_u64().unwrap()))
        .collect();
    per_flow.sort();
    assert_eq!(per_flow, (0..5).map(|i| (2000 + i, i + 1)).collect::<Vec<_>>());
    assert_eq!(t["workers"].as_array().unwrap().len(), 2, "one table per worker");
    let txt = live.stream(&["table", "telemetry"]);
    assert!(txt.contains("10.1.0.1:2004 -> 10.1.0.2:4500 proto 17 packets 5 bytes 710"), "{txt}");
    let list = live.stream(&["list"]);
    assert!(list.contains("telemetry (kernel:telemetry,capacity=64)"), "{list}");
    assert!(list.contains("capacity"), "{list}");
    assert_eq!(live.stream(&["reg", "telemetry", "capacity"]).trim(), "capacity = 64");
    // Reset: every worker's table empties before its next batch (idle workers too).
    live.stream(&["reg", "telemetry", "reset", "1"]);
    live.wait_until("the tables are empty", |l| l.totals() == (0, 0));
    // Off: packets pass uncounted.
    live.stream(&["reg", "telemetry", "enable", "0"]);
    live.wait_until("enable reads 0", |l| {
        l.stream(&["reg", "telemetry", "enable"]).trim() == "enable = 0"
    });
    peer.send_to(&udp(false, 1, 100), addr).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(live.totals(), (0, 0));
    // Refused: read-only registers, unknown stages.
    let o = snic()
        .args(["stream", "reg", "--control"])
        .arg(&live.ctl)
        .args(["telemetry", "flows", "1"])
        .output()
        .unwrap();
    assert!(
        !o.status.success() && text(&o).contains("register flows is read-only"),
        "{}",
        text(&o)
    );
    let o =
        snic().args(["stream", "table", "--control"]).arg(&live.ctl).arg("crypt").output().unwrap();
    assert!(text(&o).contains("no kernel stage \"crypt\" (stages: telemetry)"), "{}", text(&o));
}

#[test]
fn a_host_program_reads_the_telemetry_table_of_a_nic_from_device_memory() {
    let dir = common::temp_dir("cli-stream-serve");
    let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let (sock, ctl, out) = (dir.join("dev.sock"), dir.join("ctl.sock"), dir.join("serve.out"));
    let mut child = Command::new("timeout")
        .args(["--foreground", "-k", "2", "120"])
        .arg(env!("CARGO_BIN_EXE_snic"))
        .args(["serve", "--no-huge", "--workers", "1", "--on-board", "8M", "--socket"])
        .arg(&sock)
        .arg("--port")
        .arg(format!("udp:{addr},{}", peer.local_addr().unwrap()))
        .args(["--rdma-ip", "10.77.0.1", "--stage", "parse", "--stage", "classify"])
        .args(["--stage", "kernel:telemetry,capacity=32", "--stage", "l2fwd", "--control"])
        .arg(&ctl)
        .env_remove("RUST_LOG")
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_socket(&mut child, &ctl);
    let mut live = Live { child, ctl };
    let printed = std::fs::read_to_string(&out).unwrap();
    let line = printed.lines().find(|l| l.contains("kernel telemetry results at device address"));
    let dev: u64 = line
        .and_then(|l| l.split("address 0x").nth(1))
        .and_then(|a| a.split_whitespace().next())
        .and_then(|a| u64::from_str_radix(a, 16).ok())
        .unwrap_or_else(|| panic!("no device address printed: {printed}"));
    for i in 0..6u16 {
        peer.send_to(&udp(i % 3 == 0, 3000 + i % 3, 200), addr).unwrap();
    }
    live.wait_until("6 packets in 3 flows", |l| l.totals() == (3, 6));
    let t = live.table();
    assert_eq!(t["workers"][0]["device_addr"], format!("{dev:#x}"));
    let o = snic().args(["stats", "--control"]).arg(&live.ctl).output().unwrap();
    let st: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(st["stream_kernels"][0]["results"][0]["device_addr"], format!("{dev:#x}"), "{st}");
    // The host's view, through the memory API (C2H DMA from device memory).
    let host = snic_host::Device::connect(&sock, "cli-stream").expect("connect");
    let len = snic_stream::table::table_len(32);
    let mut bytes = vec![0u8; len];
    let table = (0..50)
        .find_map(|_| {
            host.read_device(dev, &mut bytes).expect("read device memory");
            let t = snic_stream::table::Table::decode(&bytes).ok();
            if t.is_none() {
                std::thread::sleep(Duration::from_millis(10));
            }
            t
        })
        .expect("a whole table");
    assert_eq!(table.header.entries, 3);
    let mut seen: Vec<(u16, u64, bool)> =
        table.flows.iter().map(|f| (f.key.src_port, f.packets, f.key.src.is_ipv6())).collect();
    seen.sort();
    assert_eq!(seen, [(3000, 2, true), (3001, 2, false), (3002, 2, false)]);
    assert_eq!(
        table.flows.iter().map(|f| f.bytes).sum::<u64>(),
        t["workers"][0]["header"]["bytes"].as_u64().unwrap()
    );
}
