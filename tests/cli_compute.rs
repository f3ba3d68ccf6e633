//! `snic compute mm` between two `snic serve --rdma` devices on loopback (no root): peer 1
//! (`--serve --once`) holds A and B, peer 2 fetches them by RDMA READ into its device memory,
//! runs the GEMM kernel, reads C back by DMA and checks it. Both element types, A and B in
//! peer 1's host and device memory, kernel status by polling and by interrupt, the chained
//! command, non-square non-power-of-two shapes, the C example (`examples/c/netmm.c`), and bad
//! input on the exchange (a typed error, no hang).
//!
//! The two devices use RoCE addresses 127.0.0.1 and 127.0.0.2 on one UDP port; every test has
//! its own ports.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn snic() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_snic"));
    c.env_remove("RUST_LOG");
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Two `snic serve --rdma` devices and their sockets; killed on drop.
struct Devices {
    children: Vec<Child>,
    sock: [PathBuf; 2],
    dir: PathBuf,
}

impl Drop for Devices {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Devices {
    /// Device `i` at RoCE address 127.0.0.{i+1} on UDP port `udp`.
    fn start(name: &str, udp: u16) -> Devices {
        let dir = common::temp_dir(name);
        let sock = [dir.join("p1.sock"), dir.join("p2.sock")];
        let mut d = Devices { children: Vec::new(), sock: sock.clone(), dir };
        for (i, s) in sock.iter().enumerate() {
            let child = snic()
                .args(["serve", "--no-huge", "--workers", "1", "--on-board", "32M", "--socket"])
                .arg(s)
                .arg("--rdma")
                .arg(format!("127.0.0.{}:{udp}", i + 1))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn snic serve");
            d.children.push(child);
        }
        let t = Instant::now();
        while !sock.iter().all(|s| s.exists()) {
            assert!(t.elapsed() < Duration::from_secs(20), "snic serve did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    /// Peer 1 (`--serve --once`) on TCP `tcp`, once it listens; its stdout reader.
    fn peer1(&self, tcp: u16) -> (Child, BufReader<ChildStdout>) {
        let mut c = snic()
            .args(["compute", "mm", "--serve", "--once", "--timeout", "30", "--listen"])
            .arg(format!("127.0.0.1:{tcp}"))
            .arg("--socket")
            .arg(&self.sock[0])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn peer 1");
        let mut out = BufReader::new(c.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("peer 1's first line");
        assert!(line.contains("waiting for peers"), "peer 1 said {line:?}");
        (c, out)
    }
}

/// What peer 1 printed after its one peer, and its exit.
fn finish(mut c: Child, mut out: BufReader<ChildStdout>) -> (bool, String, String) {
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut out, &mut rest);
    let mut err = String::new();
    if let Some(mut e) = c.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    let st = c.wait().expect("peer 1 exits");
    (st.success(), rest, err)
}

/// Run peer 2 (`snic compute mm --peer ... --json` with `args`) against a fresh peer 1; both
/// must succeed; returns peer 2's JSON report and peer 1's output.
fn run_mm(d: &Devices, tcp: u16, args: &[&str]) -> (Value, String) {
    let (p1, out) = d.peer1(tcp);
    let p2 = snic()
        .args(["compute", "mm", "--json", "--timeout", "30", "--peer"])
        .arg(format!("127.0.0.1:{tcp}"))
        .arg("--socket")
        .arg(&d.sock[1])
        .args(args)
        .output()
        .expect("run peer 2");
    let (ok1, out1, err1) = finish(p1, out);
    assert!(
        p2.status.success() && ok1,
        "{args:?}: peer 2 {}: {}{}\npeer 1: {out1}{err1}",
        p2.status,
        text(&p2.stdout),
        text(&p2.stderr)
    );
    let v: Value = serde_json::from_slice(&p2.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: peer 2's JSON: {e}: {}", text(&p2.stdout)));
    (v, out1)
}

fn assert_report(v: &Value, m: u64, n: u64, k: u64) {
    assert_eq!(v["verified"], Value::Bool(true), "{v}");
    assert_eq!(v["mismatch"], Value::Null, "{v}");
    assert_eq!((v["m"].as_u64(), v["n"].as_u64(), v["k"].as_u64()), (Some(m), Some(n), Some(k)));
    for step in ["setup_ns", "fetch_ns", "kernel_ns", "readback_ns"] {
        assert!(v[step].as_u64().is_some_and(|t| t > 0), "{step} in {v}");
    }
    let total: u64 = ["fetch_ns", "kernel_ns", "notify_ns", "write_back_ns", "readback_ns"]
        .iter()
        .map(|s| v[s].as_u64().expect("a step time"))
        .sum();
    assert_eq!(v["total_ns"].as_u64(), Some(total), "{v}");
    assert!(v["gops_kernel"].as_f64().is_some_and(|g| g > 0.0), "{v}");
}

/// (dtype, peer 1's memory, extra flags, M, N, K)
type Case = (&'static str, &'static str, &'static [&'static str], u64, u64, u64);

#[test]
fn networked_mm_both_dtypes_memories_and_notifications() {
    let d = Devices::start("compute-mm", 24_760);
    // (dtype, peer 1's memory, extra flags, M, N, K)
    let cases: [Case; 4] = [
        ("f32", "host_mem", &[], 100, 75, 130),
        ("i8", "dev_mem", &["--interrupt"], 64, 96, 50),
        ("i8", "host_mem", &["--chunk", "4K"], 37, 53, 201),
        ("f32", "dev_mem", &["--interrupt", "--chunk", "8K"], 128, 64, 96),
    ];
    for (i, (dt, mem, extra, m, n, k)) in cases.into_iter().enumerate() {
        let dims = [m.to_string(), n.to_string(), k.to_string()];
        let mut args = vec!["--dtype", dt, "-l", mem, "--seed", "5"];
        args.extend(["-m", &dims[0], "-n", &dims[1], "-k", &dims[2]]);
        args.extend_from_slice(extra);
        let (v, p1) = run_mm(&d, 28_760 + i as u16, &args);
        assert_report(&v, m, n, k);
        assert_eq!(v["dtype"], dt, "{v}");
        assert_eq!(v["mem"], mem, "{v}");
        assert_eq!(v["interrupt"], Value::Bool(extra.contains(&"--interrupt")), "{v}");
        assert!(p1.contains(&format!("served {m}x{n}x{k} {dt} ({mem})")), "{p1}");
        assert!(p1.contains(": verified"), "{p1}");
        if extra.contains(&"--chunk") {
            // Small chunks: many READs, still one batch.
            assert!(v["reads"].as_u64().is_some_and(|r| r > 4), "{v}");
        }
    }
}

#[test]
fn chained_command_fetches_computes_and_writes_back() {
    let d = Devices::start("compute-chain", 24_770);
    for (i, (dt, mem)) in [("f32", "dev_mem"), ("i8", "host_mem")].into_iter().enumerate() {
        let args = ["--chained", "--dtype", dt, "-l", mem, "-m", "90", "-n", "70", "-k", "110"];
        let (v, p1) = run_mm(&d, 28_770 + i as u16, &args);
        assert_report(&v, 90, 70, 110);
        assert_eq!(v["chained"], Value::Bool(true), "{v}");
        assert!(v["write_back_ns"].as_u64().is_some_and(|t| t > 0), "{v}");
        // Peer 1 checked the C it was written, too.
        assert!(p1.contains("the C written back verified"), "{p1}");
    }
}

#[test]
fn c_example_does_peer_2() {
    if !common::need(
        Command::new("cc").arg("--version").output().is_ok_and(|o| o.status.success()),
        "a C compiler (cc)",
        "c_example_does_peer_2",
    ) {
        return;
    }
    let d = Devices::start("compute-c", 24_780);
    let exe = common::rdma_peer::netmm_program(&d.dir);
    let cases = [
        ("i8", "host_mem", "interrupt"),
        ("f32", "dev_mem", "poll"),
        ("f32", "dev_mem", "chained"),
    ];
    for (i, (dt, mem, irq)) in cases.into_iter().enumerate() {
        let tcp = 28_780 + i as u16;
        let (p1, out) = d.peer1(tcp);
        let p2 = Command::new(&exe)
            .arg(&d.sock[1])
            .args(["127.0.0.1", &tcp.to_string(), "127.0.0.2", "70", "45", "99", dt, mem, "3"])
            .arg(irq)
            .output()
            .expect("run netmm_c");
        let (ok1, out1, err1) = finish(p1, out);
        let stdout = text(&p2.stdout);
        assert!(
            p2.status.success() && ok1,
            "netmm_c {}: {stdout}\npeer 1: {out1}{err1}",
            p2.status
        );
        assert!(stdout.lines().any(|l| l == "verified"), "{stdout}");
        let steps: &[&str] = if irq == "chained" {
            &["connection set-up", "chain ", "read-back"]
        } else {
            &["connection set-up", "RDMA fetch", "kernel", "notification", "read-back"]
        };
        for step in steps {
            assert!(stdout.contains(step), "{step} missing in {stdout}");
        }
        assert!(out1.contains(": verified"), "{out1}");
    }
}

/// Write `line` to peer 1 and return how it ended.
fn poke(d: &Devices, tcp: u16, line: &[u8]) -> (bool, String, String) {
    let (p1, out) = d.peer1(tcp);
    let mut s = TcpStream::connect(("127.0.0.1", tcp)).expect("connect to peer 1");
    s.write_all(line).expect("send");
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut answer = String::new();
    let _ = BufReader::new(&s).read_line(&mut answer);
    let (ok, _, err) = finish(p1, out);
    (ok, answer, err)
}

#[test]
fn bad_exchange_input_is_a_typed_error_not_a_hang() {
    let d = Devices::start("compute-bad", 24_790);
    let t0 = Instant::now();
    let (ok, _, err) = poke(&d, 28_790, b"this is not json\n");
    assert!(!ok && err.contains("not a message"), "{err}");
    let (ok, _, err) = poke(&d, 28_791, b"{\"msg\":\"done\",\"verified\":true}\n");
    assert!(!ok && err.contains("expected request"), "{err}");
    // A request peer 1 refuses: it answers with an error message, and says so.
    let big = b"{\"msg\":\"request\",\"version\":1,\"m\":16384,\"n\":16384,\"k\":16384,\
        \"dtype\":\"f32\",\"seed\":1,\"mem\":\"host_mem\",\"qpn\":5,\"ip\":\"127.0.0.2\",\"mtu\":0}\n";
    let (ok, answer, err) = poke(&d, 28_792, big);
    assert!(!ok && answer.contains(r#""msg":"error""#) && answer.contains("bytes"), "{answer}");
    assert!(err.contains("more than"), "{err}");
    // And peer 2 against a closed port fails at once with the address in the message.
    let p2 = snic()
        .args(["compute", "mm", "--peer", "127.0.0.1:1", "--socket"])
        .arg(&d.sock[1])
        .output()
        .expect("run peer 2");
    assert!(!p2.status.success() && text(&p2.stderr).contains("127.0.0.1:1"), "{p2:?}");
    assert!(t0.elapsed() < Duration::from_secs(60));
}
