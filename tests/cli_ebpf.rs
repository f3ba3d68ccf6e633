//! `snic ebpf` end to end against the built binary: `verify` of a good and a refused
//! program (text and JSON, exit codes), and the `xdp:` stage of a running `snic run` driven
//! over its control socket: hot swap (`load`), maps (`map dump|update|delete`) and ring-buffer
//! events; and a whole NIC (`snic serve --port`) with an `xdp:` stage and NIC-core programs
//! (`--core-prog`, `snic ebpf load --core`) that a host program runs as kernel 9. Programs are
//! compiled with the machine's clang (skipped without it, outside CI).

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn snic() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_snic"));
    c.env_remove("RUST_LOG").env_remove("RUST_BACKTRACE");
    c
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Compile `c` and write the object to `dir/name.o`.
fn object(dir: &Path, name: &str, c: &str) -> PathBuf {
    let bytes = snic_ebpf::testing::compile_str(name, c, &[]);
    let path = dir.join(format!("{name}.o"));
    std::fs::write(&path, bytes).unwrap();
    path
}

const HEADER: &str = "#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n";

/// Counts packets in `hits[KEY]` and passes them.
fn counter(key: u32) -> String {
    format!(
        "{HEADER}struct {{ __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, __u32); __type(value, __u64); __uint(max_entries, 4); }} hits SEC(\".maps\");
SEC(\"xdp\") int count(struct xdp_md *ctx) {{
  __u32 k = {key}; __u64 *v = bpf_map_lookup_elem(&hits, &k);
  if (v) __sync_fetch_and_add(v, 1);
  return XDP_PASS;
}}
char LICENSE[] SEC(\"license\") = \"GPL\";\n"
    )
}

/// Reads a byte 20 bytes into the packet without checking the length.
const UNCHECKED: &str = "SEC(\"xdp\") int oob(struct xdp_md *ctx) {
  unsigned char *d = (void *)(long)ctx->data;
  return d[20] == 1 ? XDP_DROP : XDP_PASS;
}
char LICENSE[] SEC(\"license\") = \"GPL\";\n";

#[test]
fn verify_prints_programs_and_maps_or_the_refusal_with_its_state() {
    if !snic_ebpf::testing::require_clang("verify_prints") {
        return;
    }
    let dir = common::temp_dir("cli-ebpf-verify");
    let good = object(&dir, "good", &counter(0));
    let out = common::run_ok(snic().args(["ebpf", "verify"]).arg(&good));
    let t = text(&out);
    assert!(t.contains("map hits array key 4 value 8 max_entries 4"), "{t}");
    assert!(t.contains("program xdp/count (xdp, "), "{t}");
    assert!(t.contains("verified in"), "{t}");

    let out = common::run_ok(snic().args(["ebpf", "verify", "--json"]).arg(&good));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["programs"][0]["maps"][0], "hits", "{v}");
    assert!(v["programs"][0]["insns"].as_u64().unwrap() > 3, "{v}");

    let bad = object(&dir, "bad", &format!("{HEADER}{UNCHECKED}"));
    let out = snic().args(["ebpf", "verify"]).arg(&bad).output().unwrap();
    assert!(!out.status.success(), "a refused program is a failure: {}", text(&out));
    let t = text(&out);
    assert!(t.contains("REFUSED at instruction 1:"), "{t}");
    assert!(t.contains("packet_size"), "the failing path's state is shown: {t}");
    assert!(t.contains("r1.type=packet"), "{t}");

    let out = snic().args(["ebpf", "verify", "--json"]).arg(&bad).output().unwrap();
    assert!(!out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["programs"][0]["ok"], false, "{v}");
    assert_eq!(v["programs"][0]["insn"], 1, "{v}");
    assert!(!v["programs"][0]["state"].as_array().unwrap().is_empty(), "{v}");

    // Not an object, a missing section: clear errors, non-zero exit.
    let junk = dir.join("junk.o");
    std::fs::write(&junk, b"not an ELF file").unwrap();
    let out = snic().args(["ebpf", "verify"]).arg(&junk).output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("not a loadable BPF object"), "{}", text(&out));
    let out = snic().args(["ebpf", "verify", "--section", "tc"]).arg(&good).output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("the object has: xdp/count"), "{}", text(&out));
}

/// A program with the same `hits` map as [`counter`] plus a ring buffer: counts in `hits[1]`
/// and sends every packet's length as an 8-byte event.
const COUNTER_EVENTS: &str = "struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, __u32); __type(value, __u64); __uint(max_entries, 4); } hits SEC(\".maps\");
struct { __uint(type, BPF_MAP_TYPE_HASH); __type(key, __u32); __type(value, __u32); __uint(max_entries, 16); } ports SEC(\".maps\");
struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 4096); } events SEC(\".maps\");
SEC(\"xdp\") int count_events(struct xdp_md *ctx) {
  __u32 k = 1; __u64 *v = bpf_map_lookup_elem(&hits, &k);
  if (v) __sync_fetch_and_add(v, 1);
  __u64 len = ctx->data_end - ctx->data;
  bpf_ringbuf_output(&events, &len, sizeof(len), 0);
  return XDP_PASS;
}
char LICENSE[] SEC(\"license\") = \"GPL\";\n";

/// A running `snic run`, killed on drop.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ctl(sock: &Path, args: &[&str]) -> Output {
    let mut c = snic();
    c.arg("ebpf").args(args).arg("--control").arg(sock);
    c.output().unwrap()
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `hits[key]` from a JSON dump.
fn hit(sock: &Path, key: usize) -> u64 {
    let v: Value =
        serde_json::from_str(&ok(ctl(sock, &["map", "dump", "hits", "--json"]))).unwrap();
    let s = v["entries"][key]["values"][0].as_str().unwrap().to_owned();
    s.rsplit_once('(').unwrap().1.trim_end_matches(')').parse().unwrap()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !f() {
        assert!(std::time::Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn load_swaps_a_running_stage_and_maps_and_events_work_over_the_control_socket() {
    if !snic_ebpf::testing::require_clang("load_swaps_a_running_stage") {
        return;
    }
    let dir = common::temp_dir("cli-ebpf-run");
    let a = object(&dir, "count0", &counter(0));
    let b = object(&dir, "count_events", &format!("{HEADER}{COUNTER_EVENTS}"));
    let bad = object(&dir, "unchecked", &format!("{HEADER}{UNCHECKED}"));
    let sock = dir.join("ctl.sock");
    let child = snic()
        .args(["run", "--port", "gen:1000000000", "--port", "null", "--duration", "60"])
        .args(["--stage", &format!("xdp:{}", a.display()), "--stage", "l2fwd"])
        .arg("--control")
        .arg(&sock)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _run = Running(child);
    wait_for("the control socket", || {
        sock.exists() && ctl(&sock, &["map", "dump", "hits"]).status.success()
    });
    wait_for("packets counted by program A", || hit(&sock, 0) > 0);

    // A refused program changes nothing.
    let o = ctl(&sock, &["load", bad.to_str().unwrap()]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("verification failed: instruction 1"), "{t}");
    assert!(t.contains("nothing changed: stage 0 still runs xdp/count"), "{t}");
    let before_b = hit(&sock, 1);
    assert_eq!(before_b, 0, "B never ran");

    // Hot swap to B: hits kept, the others created; B counts in hits[1], A's count stays.
    let out = ok(ctl(&sock, &["load", b.to_str().unwrap()]));
    assert!(out.contains("loaded xdp/count_events"), "{out}");
    assert!(out.contains("map hits: kept"), "{out}");
    assert!(out.contains("map events: created"), "{out}");
    assert!(out.contains("map ports: created"), "{out}");
    let a_final = hit(&sock, 0);
    wait_for("packets counted by program B", || hit(&sock, 1) > 0);
    assert_eq!(hit(&sock, 0), a_final, "A no longer runs");

    // Map updates and deletes, with the flags' semantics.
    ok(ctl(&sock, &["map", "update", "hits", "3", "0x0700000000000000"]));
    assert_eq!(hit(&sock, 3), 7);
    let dump = ok(ctl(&sock, &["map", "dump", "hits", "--limit", "2"]));
    assert!(dump.contains("2 entries\n(of 4: --limit for more)"), "{dump}");
    assert!(!dump.contains("02 00 00 00 (2):"), "{dump}");
    ok(ctl(&sock, &["map", "update", "ports", "53", "1", "--flags", "noexist"]));
    let o = ctl(&sock, &["map", "update", "ports", "53", "2", "--flags", "noexist"]);
    assert!(!o.status.success() && text(&o).contains("EEXIST"), "{}", text(&o));
    ok(ctl(&sock, &["map", "update", "ports", "53", "2", "--flags", "exist"]));
    let dump = ok(ctl(&sock, &["map", "dump", "ports"]));
    assert!(dump.contains("35 00 00 00 (53): 02 00 00 00 (2)"), "{dump}");
    assert!(dump.contains("1 entry"), "{dump}");
    ok(ctl(&sock, &["map", "delete", "ports", "53"]));
    let o = ctl(&sock, &["map", "delete", "ports", "53"]);
    assert!(!o.status.success() && text(&o).contains("ENOENT"), "{}", text(&o));
    let o = ctl(&sock, &["map", "dump", "nosuch"]);
    assert!(!o.status.success() && text(&o).contains("no map \"nosuch\""), "{}", text(&o));

    // Ring-buffer events: each is a packet length (8 bytes, little-endian).
    let out = ok(ctl(&sock, &["events", "--count", "5", "--json", "--timeout", "20"]));
    let recs: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(recs.len(), 5, "{out}");
    for r in &recs {
        assert_eq!(r["map"], "events");
        let hex = r["data"].as_str().unwrap();
        assert_eq!(hex.len(), 16, "{hex}");
        let len = u64::from_str_radix(&hex[..2], 16).unwrap()
            + (u64::from_str_radix(&hex[2..4], 16).unwrap() << 8);
        assert!((14..=9000).contains(&len), "a frame length: {len}");
    }

    let list = ok(ctl(&sock, &["list"]));
    assert!(list.contains("stage 0 (xdp): xdp/count_events from "), "{list}");
    // The default engine: the JIT where there is one (x86-64), the interpreter elsewhere.
    let engine = if cfg!(target_arch = "x86_64") { "jit" } else { "interp" };
    assert!(list.contains(&format!("{engine}, 1 swaps")), "{list}");
    assert!(list.contains("map ports hash key 4 value 4 max_entries 16 (0 entries)"), "{list}");

    // The stats document counts actions per stage.
    let o = snic().args(["stats", "--control"]).arg(&sock).output().unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["xdp"]["xdp"]["program"], "xdp/count_events", "{v}");
    assert_eq!(v["xdp"]["xdp"]["swaps"], 1, "{v}");
    assert!(v["xdp"]["xdp"]["pass"].as_u64().unwrap() > 0, "{v}");
}

/// `a0` data: returns the sum of its bytes plus the program's scalar 0.
const CORE_SUM: &str =
    "struct snic_core_md { __u32 data, data_end, nargs, id; __u64 scalars[8]; __u32 arg_len[8]; };
SEC(\"snic/core\") int sum(struct snic_core_md *ctx) {
  unsigned char *d = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
  __u64 s = 0;
  for (int i = 0; i < 256; i++) {
    if (d + i + 1 > end) break;
    s += d[i];
  }
  return s + ctx->scalars[0];
}
char LICENSE[] SEC(\"license\") = \"GPL\";\n";

#[test]
fn a_nic_runs_an_xdp_stage_and_nic_core_programs_for_host_programs() {
    if !snic_ebpf::testing::require_clang("a_nic_runs_an_xdp_stage") {
        return;
    }
    let dir = common::temp_dir("cli-ebpf-serve");
    let a = object(&dir, "count0", &counter(0));
    let core = object(&dir, "core_sum", &format!("{HEADER}{CORE_SUM}"));
    let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let (sock, ctl) = (dir.join("dev.sock"), dir.join("ctl.sock"));
    let child = snic()
        .args(["serve", "--no-huge", "--workers", "1", "--on-board", "8M", "--socket"])
        .arg(&sock)
        .arg("--port")
        .arg(format!("udp:{addr},{}", peer.local_addr().unwrap()))
        .args(["--rdma-ip", "10.77.0.1", "--stage", "parse", "--stage", "classify"])
        .args(["--stage", &format!("xdp:{},xdp", a.display()), "--stage", "l2fwd"])
        .arg("--core-prog")
        .arg(&core)
        .arg("--control")
        .arg(&ctl)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _serve = Running(child);
    wait_for("the control socket", || ctl.exists() && ctl_ok(&ctl));
    let mut f = Vec::new();
    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 1, 0, 1], [10, 1, 0, 2], 64)
        .udp(1000, 2000)
        .write(&mut f, &[7u8; 40])
        .unwrap();
    for _ in 0..5 {
        peer.send_to(&f, addr).unwrap();
    }
    wait_for("5 packets through the NIC's xdp stage", || hit(&ctl, 0) == 5);

    // Slot 0 from --core-prog; slot 1 loaded over the control socket; an XDP program is not
    // a NIC-core one.
    let out = ok(ctl_core(&ctl, 1, &core));
    assert!(out.contains("core slot 1: loaded snic/core/sum"), "{out}");
    let o = ctl_core(&ctl, 2, &a);
    assert!(!o.status.success(), "{}", text(&o));
    let host = snic_host::Device::connect(&sock, "cli-ebpf").expect("connect");
    assert_eq!(host.kernel_id("ebpf"), Some(snic_compute::ids::EBPF));
    let d = host.alloc_device(snic_host::DevKind::OnBoard, 4096, 64).unwrap();
    let data: Vec<u8> = (0..200u32).map(|i| (i * 13) as u8).collect();
    host.write_device(d, &data).unwrap();
    let want: u64 = data.iter().map(|&b| u64::from(b)).sum();
    for slot in [0, 1] {
        let cmd = snic_host::KernelCmd::new(snic_compute::ids::EBPF, slot)
            .addr(d, data.len() as u64)
            .scalar(u64::from(slot))
            .scalar(5);
        let st = host.kernel_run(&cmd, std::time::Duration::from_secs(10)).unwrap();
        assert_eq!((st.status, st.result), (snic_compute::status::OK, want + 5), "slot {slot}");
    }
    let cmd = snic_host::KernelCmd::new(snic_compute::ids::EBPF, 9).addr(d, 10).scalar(2);
    let st = host.kernel_run(&cmd, std::time::Duration::from_secs(10)).unwrap();
    assert_eq!(st.status, snic_compute::status::BAD_ARGS, "slot 2 is empty");
}

fn ctl_ok(sock: &Path) -> bool {
    ctl(sock, &["map", "dump", "hits"]).status.success()
}

fn ctl_core(sock: &Path, slot: u32, file: &Path) -> Output {
    let mut c = snic();
    c.args(["ebpf", "load", "--core", &slot.to_string()]).arg(file).arg("--control").arg(sock);
    c.output().unwrap()
}
