//! Two `snic rdma` processes over loopback UDP: WRITE, READ, SEND and atomics pass with their
//! data verified, in bandwidth and latency mode, with table and JSON output; a client without a
//! server fails with a clear error instead of hanging.
//!
//! The server listens on 127.0.0.1; the client of a loopback server takes 127.0.0.2 as its RoCE
//! address, so both can bind the same RoCE UDP port. Over IPv6 both share ::1 and the port.
//! Every test has its own ports.

use serde_json::Value;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BW_HEADER: &str =
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";
const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

fn snic() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_snic"));
    c.env_remove("RUST_LOG");
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Ports of test number `k`: away from perftest's 18515 and RoCE's 4791, so a real perftest or
/// another snic on this machine is not disturbed.
fn ports(k: u16) -> (u16, u16) {
    (24_700 + k, 28_500 + k)
}

/// Run `snic rdma OP --server` and `snic rdma OP --client 127.0.0.1` with `extra` on both;
/// returns (server, client) outputs. Both bound their own waits with `--timeout`.
fn pair(op: &str, k: u16, extra: &[&str]) -> (Output, Output) {
    pair_at(op, k, "127.0.0.1", extra)
}

/// [`pair`] with the client pointed at `server`.
fn pair_at(op: &str, k: u16, addr: &str, extra: &[&str]) -> (Output, Output) {
    let (udp, tcp) = ports(k);
    let (udp, tcp) = (udp.to_string(), tcp.to_string());
    let common = ["--port", &udp, "--tcp-port", &tcp, "--timeout", "20"];
    let server = snic()
        .args(["rdma", op, "--server"])
        .args(common)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn server");
    let client = snic()
        .args(["rdma", op, "--client", addr])
        .args(common)
        .args(extra)
        .output()
        .expect("run client");
    let server = server.wait_with_output().expect("server output");
    (server, client)
}

/// Both exited 0, else panic with everything they printed.
fn both_ok(what: &str, s: &Output, c: &Output) {
    if !s.status.success() || !c.status.success() {
        panic!(
            "{what}: server {} / client {}\n--- server stdout\n{}\n--- server stderr\n{}\n\
             --- client stdout\n{}\n--- client stderr\n{}",
            s.status,
            c.status,
            text(&s.stdout),
            text(&s.stderr),
            text(&c.stdout),
            text(&c.stderr)
        );
    }
}

/// A table run: both sides print the header, one row for `size` with `iters`, and the verdict.
fn assert_table(what: &str, out: &Output, header: &str, size: u32, iters: u64) {
    let t = text(&out.stdout);
    let lines: Vec<&str> = t.lines().collect();
    let h = lines.iter().position(|l| *l == header);
    let h = h.unwrap_or_else(|| panic!("{what}: no header {header:?} in\n{t}"));
    let row: Vec<&str> = lines[h + 1].split_whitespace().collect();
    assert_eq!(row.first().copied(), Some(size.to_string().as_str()), "{what}: row {row:?}");
    assert_eq!(row.get(1).copied(), Some(iters.to_string().as_str()), "{what}: row {row:?}");
    let figures: Vec<f64> = row[2..].iter().map(|x| x.parse().expect("a number")).collect();
    assert!(figures.iter().all(|f| f.is_finite() && *f >= 0.0), "{what}: {row:?}");
    assert!(figures[1] > 0.0, "{what}: zero figure in {row:?}");
    assert!(t.lines().any(|l| l == "data verified: OK"), "{what}: not verified:\n{t}");
}

fn bw_pair(op: &str, k: u16, extra: &[&str]) {
    let mut args = vec!["-s", "65536", "-n", "50"];
    args.extend_from_slice(extra);
    let (s, c) = pair(op, k, &args);
    both_ok(op, &s, &c);
    let size = if op == "atomic" { 8 } else { 65536 };
    assert_table(&format!("{op} client"), &c, BW_HEADER, size, 50);
    assert_table(&format!("{op} server"), &s, BW_HEADER, size, 50);
}

#[test]
fn write_bw_two_processes_data_verified() {
    bw_pair("write", 1, &[]);
}

#[test]
fn read_bw_two_processes_data_verified() {
    bw_pair("read", 2, &[]);
}

#[test]
fn send_bw_two_processes_data_verified() {
    bw_pair("send", 3, &[]);
}

#[test]
fn atomic_fetch_add_bw_counter_equals_iterations() {
    bw_pair("atomic", 4, &[]);
}

#[test]
fn write_bw_with_batches_in_device_memory() {
    bw_pair("write", 5, &["--batch", "8", "-l", "dev_mem", "--mtu", "1024"]);
}

#[test]
fn write_lat_ping_pong_prints_the_latency_table() {
    let (s, c) = pair("write", 6, &["--lat", "-s", "64", "-n", "50"]);
    both_ok("write lat", &s, &c);
    assert_table("write lat client", &c, LAT_HEADER, 64, 50);
    assert_table("write lat server", &s, LAT_HEADER, 64, 50);
}

#[test]
fn read_send_and_cmp_swap_latency() {
    for (k, op, extra) in
        [(7, "read", &[][..]), (8, "send", &[][..]), (9, "atomic", &["--cmp-swap"][..])]
    {
        let mut args = vec!["--lat", "-n", "50"];
        args.extend_from_slice(extra);
        let (s, c) = pair(op, k, &args);
        both_ok(op, &s, &c);
        let size = if op == "atomic" { 8 } else { 2 };
        assert_table(&format!("{op} lat client"), &c, LAT_HEADER, size, 50);
    }
}

#[test]
fn json_output_is_one_object_per_size() {
    let (s, c) = pair("write", 10, &["-s", "65536", "-n", "50", "--json"]);
    both_ok("write json", &s, &c);
    let t = text(&c.stdout);
    let rows: Vec<Value> = t
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert_eq!(rows.len(), 1, "{t}");
    let r = &rows[0];
    assert_eq!(r["op"], "write");
    assert_eq!(r["mode"], "bw");
    assert_eq!(r["bytes"], 65536);
    assert_eq!(r["iterations"], 50);
    assert_eq!(r["verified"], true);
    assert!(r["bw_avg"].as_f64().is_some_and(|x| x > 0.0), "{r}");
    assert!(r["bw_peak"].as_f64().unwrap_or(0.0) >= r["bw_avg"].as_f64().unwrap_or(1.0), "{r}");
    // 50 WRITEs of 16 packets each at MTU 4096 left the client's engine.
    assert!(r["engine"]["tx_packets"].as_u64().is_some_and(|n| n >= 50 * 16), "{r}");
    assert!(r["transport"].is_object(), "{r}");
}

#[test]
fn blast_prints_the_same_bandwidth_table() {
    let (s, c) = pair("blast", 13, &["-s", "65536", "-n", "20"]);
    both_ok("blast", &s, &c);
    for (who, out) in [("client", &c), ("server", &s)] {
        let t = text(&out.stdout);
        let lines: Vec<&str> = t.lines().collect();
        let h = lines.iter().position(|l| *l == BW_HEADER);
        let h = h.unwrap_or_else(|| panic!("blast {who}: no header in\n{t}"));
        let row: Vec<&str> = lines[h + 1].split_whitespace().collect();
        assert_eq!(&row[..2], ["65536", "20"], "blast {who}: {row:?}");
        // Nothing is verified in a blast, so nothing may claim it.
        assert!(!t.contains("data verified"), "blast {who}:\n{t}");
    }
}

/// Two processes over IPv6 on one host, without `--local-ip`: both take the one loopback
/// address ::1 and the same RoCE UDP port there (SO_REUSEPORT, the client's socket connected
/// to the server's QP), and WRITE, READ and SEND pass with their data verified both ways.
#[test]
fn ipv6_loopback_without_local_ip() {
    if std::net::UdpSocket::bind("[::1]:0").is_err() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI: this host has no ::1");
        eprintln!("skipped: this host has no IPv6 loopback address (::1)");
        return;
    }
    for (k, op) in [(20, "write"), (21, "read"), (22, "send")] {
        let args = ["--ipv6", "-s", "65536", "-n", "50"];
        let (s, c) = pair_at(op, k, "::1", &args);
        both_ok(&format!("{op} over ::1"), &s, &c);
        assert_table(&format!("{op} client over ::1"), &c, BW_HEADER, 65536, 50);
        assert_table(&format!("{op} server over ::1"), &s, BW_HEADER, 65536, 50);
    }
}

#[test]
fn client_without_server_fails_clearly() {
    let (udp, tcp) = ports(11);
    let started = Instant::now();
    let out = snic()
        .args(["rdma", "write", "--client", "127.0.0.1", "--timeout", "1"])
        .args(["--port", &udp.to_string(), "--tcp-port", &tcp.to_string()])
        .output()
        .expect("run client");
    assert!(!out.status.success(), "succeeded without a server: {}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(err.contains("could not connect to the server at 127.0.0.1"), "{err}");
    // Not a hang: the one-second timeout ended it (generous bound for a loaded machine).
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn mismatched_operations_are_refused() {
    let (udp, tcp) = ports(12);
    let (udp, tcp) = (udp.to_string(), tcp.to_string());
    let common = ["--port", &udp, "--tcp-port", &tcp, "--timeout", "10"];
    let server = snic()
        .args(["rdma", "read", "--server"])
        .args(common)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn server");
    let c = snic().args(["rdma", "write", "--client", "127.0.0.1"]).args(common).output().unwrap();
    let s = server.wait_with_output().unwrap();
    assert!(!s.status.success());
    assert!(!c.status.success());
    assert!(text(&s.stderr).contains("the client runs `write`"), "{}", text(&s.stderr));
}
