//! End-to-end tests of the `p4` stage against the built binary, without root: a live
//! `snic run --stage p4:PROG.p4 --control SOCK` with two workers fed through a UDP port, its
//! tables programmed with `snic p4 table-add` and friends over the control socket (forwarding,
//! drops named by reason, refused commands that change nothing, counters summed over workers),
//! and a pcap run with `--trace` showing the program's own trace.

mod common;

use serde_json::Value;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Longest wait for anything a running `snic run` should do.
const WAIT: Duration = Duration::from_secs(20);

/// An L2 program: `l2` maps a destination MAC to a port (default: drop); the parser accepts
/// IPv4 only (anything else ends in `NoMatch`, and ingress still runs); the source MAC is
/// rewritten so a forwarded frame shows the program ran.
const PROG: &str = r#"#include <core.p4>
#include <v1model.p4>
header ethernet_t { bit<48> dst; bit<48> src; bit<16> type; }
struct headers_t { ethernet_t eth; }
struct meta_t { }
parser P(packet_in pkt, out headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.eth); verify(hdr.eth.type == 0x800, error.NoMatch); transition accept; }
}
control VC(inout headers_t hdr, inout meta_t m) { apply { } }
control MyIngress(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    counter(1, CounterType.packets_and_bytes) seen;
    action fwd(bit<9> port) { sm.egress_spec = port; }
    action drop() { mark_to_drop(sm); }
    action set_mc(bit<16> grp) { sm.mcast_grp = grp; }
    table l2 {
        key = { hdr.eth.dst : exact; }
        actions = { fwd; drop; set_mc; }
        default_action = drop();
    }
    apply { seen.count(0); l2.apply(); hdr.eth.src = 0x0200000000ff; }
}
control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers_t hdr, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.eth); } }
V1Switch(P(), VC(), MyIngress(), E(), CC(), D()) main;
"#;

fn snic() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_snic"));
    c.env_remove("RUST_LOG");
    c
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A 60-byte Ethernet frame to `02:00:00:00:00:DST` of EtherType `ty`.
fn frame(dst: u8, ty: u16) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, dst, 2, 0, 0, 0, 0, 0x11];
    f.extend_from_slice(&ty.to_be_bytes());
    f.resize(60, 0x5a);
    f
}

/// A running `snic run` that is killed when dropped (so a failing test leaves nothing behind).
struct Run {
    child: Child,
    sock: PathBuf,
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Run {
    /// `snic run` with UDP port 0 (fed by `peer`), a null port 1 and `extra` arguments; returns
    /// once its control socket serves real counters.
    fn start(dir: &Path, peer: &UdpSocket, extra: &[&str]) -> (Run, SocketAddr) {
        let addr = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let sock = dir.join("ctl.sock");
        let child = snic()
            .args(["run", "--duration", "120", "--port"])
            .arg(format!("udp:{addr},{}", peer.local_addr().unwrap()))
            .args(["--port", "null", "--control"])
            .arg(&sock)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut run = Run { child, sock };
        run.wait_until("the counters are served", |r| r.stats().get("status").is_none());
        (run, addr)
    }

    fn stats(&self) -> Value {
        let out = snic().arg("stats").arg("--control").arg(&self.sock).output().unwrap();
        serde_json::from_str(stdout(&out).trim()).unwrap_or(Value::Null)
    }

    /// Poll `ok` every 20 ms; panic when the run exits or [`WAIT`] passes first.
    fn wait_until(&mut self, what: &str, ok: impl Fn(&Run) -> bool) {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("snic run exited ({status:?}) while waiting until {what}");
            }
            if ok(self) {
                return;
            }
            assert!(Instant::now() < deadline, "gave up waiting until {what}: {}", self.stats());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `snic p4 SUB --control SOCK args...`.
    fn p4(&self, sub: &str, args: &[&str]) -> Output {
        snic().args(["p4", sub, "--control"]).arg(&self.sock).args(args).output().unwrap()
    }

    fn p4_ok(&self, sub: &str, args: &[&str]) -> String {
        let out = self.p4(sub, args);
        assert!(out.status.success(), "p4 {sub} {args:?} failed: {}", stderr(&out));
        stdout(&out)
    }

    fn stop(mut self) {
        let _ = Command::new("kill").arg("-INT").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "snic run exits cleanly on SIGINT: {status:?}");
                return;
            }
            assert!(Instant::now() < deadline, "snic run did not stop within {WAIT:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn num(v: &Value, ptr: &str) -> u64 {
    v.pointer(ptr).and_then(Value::as_u64).unwrap_or(0)
}

fn p4_stage(v: &Value) -> Value {
    v["stages"].as_array().unwrap().iter().find(|s| s["name"] == "p4").cloned().unwrap()
}

#[test]
fn p4_tables_of_a_live_run_over_the_control_socket() {
    let dir = common::temp_dir("p4-live");
    let prog = dir.join("l2.p4");
    std::fs::write(&prog, PROG).unwrap();
    let entries = dir.join("entries.txt");
    std::fs::write(
        &entries,
        "# sends 02:..:07 back out of port 0\ntable_add l2 fwd 02:00:00:00:00:07 => 0\n",
    )
    .unwrap();
    let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
    peer.set_read_timeout(Some(WAIT)).unwrap();
    let stage = format!("p4:{},entries={}", prog.display(), entries.display());
    let (mut run, addr) = Run::start(&dir, &peer, &["--stage", &stage, "--workers", "2"]);

    // No entry for 02:..:01 yet: the default action drops it.
    peer.send_to(&frame(1, 0x800), addr).unwrap();
    run.wait_until("the first packet is a p4_drop", |r| num(&r.stats(), "/drops/p4_drop") == 1);

    // Add one over the control socket: now it leaves by port 1.
    let text = run.p4_ok("table-add", &["l2", "fwd", "02:00:00:00:00:01", "=>", "1"]);
    assert!(text.contains("Adding entry to exact match table l2\n"), "{text}");
    assert!(text.ends_with("Entry has been added with handle 1\n"), "{text}");
    for _ in 0..4 {
        peer.send_to(&frame(1, 0x800), addr).unwrap();
    }
    run.wait_until("four packets leave by port 1", |r| num(&r.stats(), "/ports/1/tx_packets") == 4);

    // The entries file's entry sends 02:..:07 back out of port 0 to the peer, rewritten.
    peer.send_to(&frame(7, 0x800), addr).unwrap();
    let mut buf = [0u8; 2048];
    let (n, _) = peer.recv_from(&mut buf).expect("the frame comes back");
    let mut want = frame(7, 0x800);
    want[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xff]);
    assert_eq!(&buf[..n], &want[..]);

    // Not IPv4: the parser's verify fails with NoMatch; with no entry for 02:..:03 nothing
    // leaves, and the drop names the parser error.
    peer.send_to(&frame(3, 0x1234), addr).unwrap();
    run.wait_until("a p4_parser_error drop", |r| num(&r.stats(), "/drops/p4_parser_error") == 1);

    // A refused command says why, exits non-zero and changes nothing on any worker.
    let out = run.p4("table-add", &["l2", "fwd", "02:00:00:00:00:01", "=>", "0"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("an entry with this key exists"), "{}", stderr(&out));
    let out = run.p4("table-add", &["nope", "fwd", "1", "=>", "0"]);
    assert!(stderr(&out).contains("no table named nope"), "{}", stderr(&out));
    let dump = run.p4_ok("table-dump", &["MyIngress.l2"]);
    assert_eq!(dump.matches("Dumping entry").count(), 2, "{dump}");
    assert!(dump.contains("Action entry: MyIngress.fwd - 0001"), "{dump}");

    // The counter is summed over both workers: every packet so far went through ingress.
    let text = run.p4_ok("counter-read", &["seen", "0"]);
    assert_eq!(text, "seen[0]=  BmCounterValue(packets=7, bytes=420)\n");

    // Any command line through `snic p4 cli`; the deleted entry's packets are dropped again.
    let text = run.p4_ok("cli", &["table_delete l2 1", "table_num_entries l2"]);
    assert_eq!(text, "Deleting entry 1 from l2\n1\n");
    // Or from stdin, as `simple_switch_CLI < FILE`.
    let mut child = snic()
        .args(["p4", "cli", "--control"])
        .arg(&run.sock)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"# from stdin\ntable_num_entries MyIngress.l2\n").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "1\n");
    peer.send_to(&frame(1, 0x800), addr).unwrap();
    run.wait_until("a second p4_drop", |r| num(&r.stats(), "/drops/p4_drop") == 2);

    // Multicast: one packet in, a replica to each of ports 0 and 1; the extra one is created.
    let text = run.p4_ok(
        "cli",
        &[
            "mc_mgrp_create 5",
            "mc_node_create 0 0 1",
            "mc_node_associate 5 0",
            "table_add l2 set_mc 02:00:00:00:00:09 => 5",
        ],
    );
    assert!(text.contains("node was created with handle 0"), "{text}");
    peer.send_to(&frame(9, 0x800), addr).unwrap();
    let (n, _) = peer.recv_from(&mut buf).expect("the replica for port 0 comes back");
    assert_eq!(&buf[..6], &frame(9, 0x800)[..6]);
    assert_eq!(n, 60);
    run.wait_until("the replica leaves by port 1 and the workers published", |r| {
        let v = r.stats();
        num(&v, "/ports/1/tx_packets") == 5 && num(&p4_stage(&v), "/packets_in") == 9
    });

    let v = run.stats();
    let s = p4_stage(&v);
    assert_eq!(num(&s, "/packets_in"), 9, "{s}");
    assert_eq!(num(&s, "/created"), 1, "{s}");
    assert_eq!(num(&s, "/packets_out"), 7, "{s}");
    assert_eq!(num(&v, "/drops_total"), 3, "{v}");
    assert_eq!(num(&v, "/created"), 1, "{v}");
    // Every packet accounted for: received + created == sent + dropped.
    let tx = num(&v, "/ports/0/tx_packets") + num(&v, "/ports/1/tx_packets");
    assert_eq!(num(&v, "/ports/0/rx_packets") + 1, tx + 3, "{v}");
    run.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn p4_commands_on_a_run_without_a_p4_stage_say_so() {
    let dir = common::temp_dir("p4-none");
    let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (run, _) = Run::start(&dir, &peer, &[]);
    let out = run.p4("show-tables", &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("this run has no p4 stage"), "{}", stderr(&out));
    run.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pcap_run_with_trace_shows_the_programs_trace_and_bad_programs_are_refused() {
    let dir = common::temp_dir("p4-pcap");
    let prog = dir.join("l2.p4");
    std::fs::write(&prog, PROG).unwrap();
    let entries = dir.join("e.txt");
    std::fs::write(&entries, "table_add l2 fwd 02:00:00:00:00:01 => 1\n").unwrap();
    let input = dir.join("in.pcap");
    common::write_pcap(&input, &[frame(1, 0x800), frame(2, 0x800)]);
    let output = dir.join("out.pcap");
    let out = common::run_ok(
        snic()
            .args(["run", "--port"])
            .arg(format!("pcap:{}", input.display()))
            .arg("--port")
            .arg(format!("pcap:,{}", output.display()))
            .arg("--stage")
            .arg(format!("p4:{},entries={}", prog.display(), entries.display()))
            .args(["--trace", "all"]),
    );
    let text = stdout(&out);
    assert!(text.contains("trace #1 p4: "), "{text}");
    assert!(text.contains("MyIngress.l2"), "the table lookup is traced: {text}");
    assert!(text.contains("trace #1 p4: forwarded to port 1 (p4)"), "{text}");
    assert!(text.contains("trace #2 p4: dropped: p4_drop"), "{text}");
    assert!(text.contains("p4_drop 1"), "{text}");
    let frames = common::read_pcap(&output);
    assert_eq!(frames.len(), 1);
    assert_eq!(&frames[0][6..12], &[2, 0, 0, 0, 0, 0xff]);

    // A program that does not compile stops the run with file:line.
    let bad = dir.join("bad.p4");
    std::fs::write(&bad, "#include <core.p4>\nheader h_t { bit<8> f }\n").unwrap();
    let out = snic()
        .args(["run", "--port", "gen:1", "--port", "null", "--stage"])
        .arg(format!("p4:{}", bad.display()))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains(&format!("{}:2:", bad.display())), "{}", stderr(&out));
    // An entries file with a bad line names it.
    std::fs::write(&entries, "table_add l2 fwd 1 => 1\ntable_add l2 frob 2 => 1\n").unwrap();
    let out = snic()
        .args(["run", "--port", "gen:1", "--port", "null", "--stage"])
        .arg(format!("p4:{},entries={}", prog.display(), entries.display()))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("e.txt: line 2: no action named frob"), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `snic p4 info --p4info` writes the P4Info (text, or binary for `.bin`); `snic run` with
/// `--p4runtime` says where it listens, and refuses without a p4 stage.
#[test]
fn p4info_files_and_the_p4runtime_option() {
    let dir = common::temp_dir("p4-p4info");
    let prog = dir.join("l2.p4");
    std::fs::write(&prog, PROG).unwrap();
    let txt = dir.join("l2.p4info.txt");
    let o = snic().args(["p4", "info"]).arg(&prog).arg("--p4info").arg(&txt).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&txt).unwrap();
    assert!(text.contains("name: \"MyIngress.l2\""), "{text}");
    assert!(text.contains("arch: \"v1model\""), "{text}");
    let bin = dir.join("l2.p4info.bin");
    let o = snic().args(["p4", "info"]).arg(&prog).arg("--p4info").arg(&bin).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(&bin).unwrap();
    assert!(!bytes.is_empty() && !bytes.starts_with(b"pkg_info"), "binary, not text");

    // --p4runtime needs a p4 stage.
    let o = snic()
        .args(["run", "--port", "null", "--stage", "parse", "--p4runtime", "127.0.0.1:0"])
        .args(["--duration", "1"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("needs a p4 stage"), "{}", stderr(&o));
    // With one (here without a program), it listens and says where.
    let o = snic()
        .args(["run", "--port", "null", "--stage", "p4", "--p4runtime", "127.0.0.1:0"])
        .args(["--duration", "1"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("P4Runtime on 127.0.0.1:"), "{}", stderr(&o));
}
