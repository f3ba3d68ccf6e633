//! Two snic NICs on one machine, real interfaces (root only; skipped with a message otherwise;
//! under CI a missing tool fails the test).
//!
//! Two network namespaces joined by a veth pair; in each, one `snic serve --port afpacket:veth`
//! process is the whole NIC: its wire port is its end of the veth, its host netdev is a TAP
//! device (`snic0`) that the namespace's kernel gives an address, and its RoCE address is
//! another address on the same subnet that only the NIC answers for (ARP). Nothing else joins
//! the namespaces: every packet between them crosses both NICs' pipelines.
//!
//! Checked:
//! - `ping` between the host netdevs (ARP, ICMP through both pipelines);
//! - a 5 s `iperf3` TCP run between them, while
//! - host programs on each side, through the host library (one in Rust, one in C), run RDMA
//!   WRITE, READ and SEND of 1 MiB with verified data over the wire ports, QP rings and data
//!   buffers in host memory on one side and in device memory on the other, then the other way
//!   round, then over the NICs' IPv6 RoCE addresses (neighbour discovery instead of ARP);
//! - the same device serves DMA queues, channels and kernels (the host library's C test
//!   program against the NIC's setup socket);
//! - tshark on the veth sees the RoCEv2 packets beside the TCP, and scapy confirms every
//!   RoCEv2 packet's ICRC (`tests/interop_rdma.py`);
//! - the NICs' counters, live on the control socket (`snic stats --control`) and at the end:
//!   RoCE delivered from the wire to the engine, ARP answered by the NIC.

mod common;

use common::netns::{VethPair, have, is_root, note, stop, wait_for};
use common::rdma_peer::{programs, rdma_pair};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SIZE: usize = 1 << 20;

fn ready() -> bool {
    if !is_root() {
        note("skipping netns_nic: needs root");
        return false;
    }
    let tools = ["ip", "ping", "iperf3", "tshark", "cc", "python3"];
    let missing: Vec<&str> = tools.into_iter().filter(|t| !have(t)).collect();
    let scapy = Command::new("python3")
        .args(["-c", "import scapy.all, scapy.contrib.roce"])
        .output()
        .is_ok_and(|o| o.status.success());
    if missing.is_empty() && scapy {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but tools are missing: {missing:?}, scapy {scapy}"
    );
    note(&format!("skipping netns_nic: missing {missing:?} (scapy: {scapy})"));
    false
}

/// A NIC process and the file its output goes to.
struct Nic {
    child: Child,
    out: PathBuf,
}

impl Nic {
    fn start(t: &VethPair, i: usize, dir: &Path, rdma_ips: &[&str]) -> Nic {
        let out = dir.join(format!("nic{i}.out"));
        let child = t
            .exec(i)
            .arg(env!("CARGO_BIN_EXE_snic"))
            .args(["serve", "--no-huge", "--workers", "1", "--socket"])
            .arg(dir.join(format!("nic{i}.sock")))
            .args(["--port", &format!("afpacket:{}", t.veth[i])])
            .args(rdma_ips.iter().flat_map(|ip| ["--rdma-ip", ip]))
            .args(["--host-netdev", "snic0", "--control"])
            .arg(dir.join(format!("nic{i}.ctl")))
            .env_remove("RUST_LOG")
            .stdout(std::fs::File::create(&out).expect("output file"))
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start snic serve");
        Nic { child, out }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Stop with SIGTERM; the counters document is the last line printed.
    fn finish(mut self) -> Value {
        if let Ok(Some(st)) = self.child.try_wait() {
            panic!("the NIC exited before it was stopped ({st}):\n{}", self.output());
        }
        let t0 = Instant::now();
        stop(&mut self.child, Duration::from_secs(5));
        let st = self.child.wait().expect("reaped");
        note(&format!("netns_nic: NIC stopped in {:?} ({st})", t0.elapsed()));
        let text = self.output();
        let line = text.lines().rev().find(|l| l.starts_with('{')).unwrap_or_else(|| {
            panic!("no counters line in:\n{text}");
        });
        serde_json::from_str(line).expect("counters JSON")
    }
}

impl Drop for Nic {
    fn drop(&mut self) {
        stop(&mut self.child, Duration::from_secs(2));
    }
}

/// Keep the RoCEv2 frames of an Ethernet capture, as IP packets (link type RAW) for scapy;
/// also count the TCP frames seen.
fn roce_of(cap: &Path, raw: &Path) -> (usize, usize) {
    use pcap_file::DataLink;
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let frames = common::read_pcap(cap);
    let mut roce = Vec::new();
    let mut tcp = 0;
    for f in &frames {
        let Ok(p) = etherparse::SlicedPacket::from_ethernet(f) else { continue };
        match p.transport {
            Some(etherparse::TransportSlice::Udp(u)) if u.destination_port() == 4791 => {
                roce.push(f[14..].to_vec());
            }
            Some(etherparse::TransportSlice::Tcp(_)) => tcp += 1,
            _ => {}
        }
    }
    let header = PcapHeader { datalink: DataLink::RAW, ..Default::default() };
    let mut w = PcapWriter::with_header(std::fs::File::create(raw).expect("create"), header)
        .expect("pcap writer");
    for (i, f) in roce.iter().enumerate() {
        let ts = Duration::from_micros(i as u64);
        w.write_packet(&PcapPacket::new(ts, f.len() as u32, f)).expect("write");
    }
    (roce.len(), tcp)
}

#[test]
fn two_nics_carry_ping_tcp_and_rdma_between_host_programs() {
    if !ready() {
        return;
    }
    let dir = common::temp_dir("netns-nic");
    let (rust_peer, c_peer, dma_prog) = programs(&dir);
    let t = VethPair::create("snicnic", "sn", 90);
    let host = ["10.77.0.1", "10.77.0.2"];
    let roce = ["10.77.0.11", "10.77.0.12"];
    let roce6 = ["fd77::11", "fd77::12"];
    let nics = [
        Nic::start(&t, 0, &dir, &[roce[0], roce6[0]]),
        Nic::start(&t, 1, &dir, &[roce[1], roce6[1]]),
    ];
    for (i, nic) in nics.iter().enumerate() {
        wait_for(20, "the NIC to start", || nic.output().contains("snic serve: NIC"));
        t.must(i, &["ip", "addr", "add", &format!("{}/24", host[i]), "dev", "snic0"]);
        t.must(i, &["ip", "link", "set", "snic0", "up"]);
    }

    // The capture: RoCE in full, TCP only its small segments (ACKs), so it stays small.
    let cap = dir.join("veth.pcap");
    let mut tshark = t
        .exec(0)
        .args(["tshark", "-q", "-i", &t.veth[0], "-F", "pcap", "-w"])
        .arg(&cap)
        .args(["-f", "udp port 4791 or (tcp and less 200)"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tshark");
    let mut err = BufReader::new(tshark.stderr.take().expect("stderr"));
    let mut line = String::new();
    // tshark says "Capturing on ..." once the capture runs.
    while err.read_line(&mut line).is_ok_and(|n| n > 0) && !line.contains("Capturing on") {
        line.clear();
    }

    let ping = t.must(0, &["ping", "-c", "3", "-W", "2", "-i", "0.2", host[1]]);
    assert!(ping.contains("3 received"), "{ping}");

    let mut iperf_s = t.exec(1).args(["iperf3", "-s", "-1"]).stdout(Stdio::null()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let iperf_c = t
        .exec(0)
        .args(["iperf3", "-J", "-t", "5", "-c", host[1]])
        .stdout(Stdio::piped())
        .spawn()
        .expect("iperf3 client");

    // RDMA while the TCP runs: Rust (host-memory QP) active, C (device-memory QP) passive;
    // then C active with its QP in host memory, Rust passive with on-chip rings.
    let size = SIZE.to_string();
    // Rings in host memory come with data in host memory; rings in device memory (on-chip,
    // on-board) with data in on-board memory.
    let prog_to = |peer: [&str; 2], i: usize, exe: &Path, role: &str, place: &str| {
        let data = if place == "host" { "host" } else { "device" };
        let mut c = t.exec(i);
        c.arg(exe).arg(dir.join(format!("nic{i}.sock")));
        c.args([role, place, peer[1 - i], &size, data]);
        c
    };
    let prog = |i, exe, role, place| prog_to(roce, i, exe, role, place);
    let (a, b) =
        rdma_pair(prog(0, &rust_peer, "active", "host"), prog(1, &c_peer, "passive", "on-board"));
    assert!(a.contains("OK active") && b.contains("OK passive"), "{a}\n{b}");
    let (a, b) =
        rdma_pair(prog(0, &rust_peer, "passive", "on-chip"), prog(1, &c_peer, "active", "host"));
    assert!(a.contains("OK passive") && b.contains("OK active"), "{a}\n{b}");
    // Over the NICs' IPv6 RoCE addresses (neighbour discovery instead of ARP).
    let (a, b) = rdma_pair(
        prog_to(roce6, 0, &rust_peer, "active", "on-board"),
        prog_to(roce6, 1, &c_peer, "passive", "host"),
    );
    assert!(a.contains("OK active") && b.contains("OK passive"), "{a}\n{b}");
    // The same device serves DMA queues, channels and kernels to host programs.
    let dma = t.exec(0).arg(&dma_prog).arg(dir.join("nic0.sock")).output().expect("snic_test");
    let dma_out = String::from_utf8_lossy(&dma.stdout);
    assert!(dma.status.success() && dma_out.lines().any(|l| l == "ALL OK"), "{dma_out}");

    // The control socket answers while the NIC runs (refreshed every 100 ms).
    std::thread::sleep(Duration::from_millis(300));
    let live = common::run_ok(
        Command::new(env!("CARGO_BIN_EXE_snic"))
            .args(["stats", "--control"])
            .arg(dir.join("nic1.ctl")),
    );
    let live: Value = serde_json::from_slice(&live.stdout).expect("stats JSON");
    assert!(live["nic"]["nic"]["roce_rx"].as_u64().unwrap_or(0) > 1000, "{live}");
    assert!(live["rdma"]["engine"]["tx_packets"].as_u64().unwrap_or(0) > 1000, "{live}");

    let out = iperf_c.wait_with_output().expect("iperf3 client");
    let _ = iperf_s.wait();
    let v: Value = serde_json::from_slice(&out.stdout).expect("iperf3 JSON");
    let bps = v["end"]["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0);
    assert!(bps > 1e6, "iperf3 through both NICs: {bps} bit/s\n{v}");
    note(&format!("netns_nic: iperf3 through two NICs {:.2} Gbit/s", bps / 1e9));

    stop(&mut tshark, Duration::from_secs(5));
    let raw = dir.join("roce.pcap");
    let (n_roce, n_tcp) = roce_of(&cap, &raw);
    // 9 x 1 MiB at path MTU 1024 is more than 9216 data packets.
    assert!(n_roce > 9216, "RoCE frames captured: {n_roce}");
    assert!(n_tcp > 0, "no TCP beside the RoCE");
    // tshark decodes every one as InfiniBand (RoCEv2), none malformed.
    let tshark = |filter: &str| {
        let mut c = Command::new("tshark");
        c.args(["-n", "-r"]).arg(&cap);
        for h in common::tshark_payload_heuristics() {
            c.args(["--disable-protocol", &h]);
        }
        let out = common::run_ok(c.args(["-Y", filter, "-T", "fields", "-e", "frame.number"]));
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    assert_eq!(tshark("infiniband"), n_roce, "tshark's RoCEv2 frames");
    assert_eq!(tshark("infiniband && _ws.malformed"), 0, "malformed RoCEv2 for tshark");
    let json = dir.join("scapy.json");
    common::run_ok(
        Command::new("python3")
            .arg(common::root().join("tests/interop_rdma.py"))
            .arg(&raw)
            .arg(&json),
    );
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let pkts = s["packets"].as_array().expect("packets");
    // 3 x 1 MiB over IPv6 at path MTU 1024 is more than 3072 data packets.
    let v6 = pkts.iter().filter(|p| p["ip"] == 6).count();
    assert!(v6 > 3072, "RoCE over IPv6 frames: {v6}");
    assert_eq!(pkts.len(), n_roce);
    let bad: Vec<&Value> =
        pkts.iter().filter(|p| p["icrc_ok"] != Value::Bool(true)).take(3).collect();
    assert!(bad.is_empty(), "scapy refused the ICRC of: {bad:?}");

    let [a, b] = nics;
    for (i, st) in [a.finish(), b.finish()].iter().enumerate() {
        let nic = &st["nic"];
        assert!(nic["nic"]["roce_rx"].as_u64().unwrap_or(0) > 1000, "NIC {i}: {st}");
        // Asked by its peer over ARP and over ND at least.
        assert!(nic["neighbours"]["answers_sent"].as_u64().unwrap_or(0) >= 2, "NIC {i}: {st}");
        assert_eq!(nic["nic"]["local_unknown"], 0, "NIC {i}: {st}");
        let engine = &st["rdma"]["engine"];
        assert!(engine["rx_packets"].as_u64().unwrap_or(0) > 1000, "NIC {i}: {st}");
    }
    note(&format!("netns_nic: {n_roce} RoCE frames (ICRC confirmed by scapy), {n_tcp} TCP"));
}
