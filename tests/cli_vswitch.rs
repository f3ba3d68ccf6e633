//! End-to-end tests of `snic vswitch` against the built binary: `check` offline, and the
//! control plane of a live `snic run --stage vswitch --control SOCK` fed through a UDP port
//! (show, dump-flows, policy, add-rule / remove-rule, refused edits and loads that change
//! nothing, and `snic stats` still answering on the same socket).

mod common;

use serde_json::Value;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Longest wait for anything a running `snic run` should do.
const WAIT: Duration = Duration::from_secs(20);

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

/// The embedded default policy as a TOML file (vPort 0 on pipeline port 0, underlay port 1).
fn write_default_policy(path: &Path) {
    let text = snic_vswitch::policy::toml::to_toml(&snic_vswitch::policy::default_policy());
    std::fs::write(path, text).unwrap();
}

/// A policy whose ACL rule 3 (on line 18) has an IPv4 prefix of length 33.
const BAD_POLICY: &str = r#"[underlay]
port = 1
ip = "192.168.100.1"
mac = "02:00:00:00:01:01"
gateway_mac = "02:00:00:00:02:01"

[[vport]]
id = 0
name = "vm-a"
port = 0
mac = "02:00:00:00:00:01"
ips = ["10.0.0.1"]
vni = 42

[[vport.layer]]
name = "acl"
kind = "acl"
rules = [ { id = 3, priority = 10, match = { "ip.dst" = "10.0.0.0/33" }, action = "deny" } ]
"#;

#[test]
fn check_accepts_a_good_policy_and_names_file_line_and_field_of_a_bad_one() {
    let dir = common::temp_dir("vsw-check");
    let good = dir.join("good.toml");
    write_default_policy(&good);
    let out = common::run_ok(snic().args(["vswitch", "check"]).arg(&good));
    let text = stdout(&out);
    assert!(
        text.starts_with(&format!("{}: ok (1 vPort(s), 5 layer(s), ", good.display())),
        "{text}"
    );

    let bad = dir.join("bad.toml");
    std::fs::write(&bad, BAD_POLICY).unwrap();
    let out = snic().args(["vswitch", "check"]).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stdout(&out).is_empty(), "nothing on stdout: {}", stdout(&out));
    let err = stderr(&out);
    let where_ = format!("{}:18:", bad.display());
    assert!(err.contains(&where_), "error names {where_}: {err}");
    assert!(err.contains("rule[id=3].match.ip.dst"), "error names the field: {err}");
    assert!(err.contains("33"), "error names the bad length: {err}");

    // A file that does not exist is an error too, not a panic.
    let out = snic().args(["vswitch", "check"]).arg(dir.join("none.toml")).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let _ = std::fs::remove_dir_all(&dir);
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
    /// Start `snic run` with a UDP port 0 fed by `peer` and a null port 1, plus `extra` args;
    /// return once its control socket serves real counters.
    fn start(dir: &Path, peer: &UdpSocket, extra: &[&str]) -> (Run, SocketAddr) {
        // A free port for snic (tiny race with other processes; fine in a test).
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
        run.wait_until("the counters are served", |r| {
            let out = snic().arg("stats").arg("--control").arg(&r.sock).output().unwrap();
            out.status.success()
                && serde_json::from_str::<Value>(stdout(&out).trim())
                    .is_ok_and(|v| v.get("status").is_none())
        });
        (run, addr)
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
            if Instant::now() >= deadline {
                let show = self.vswitch("show", &["--json"]);
                let stats = snic().arg("stats").arg("--control").arg(&self.sock).output().unwrap();
                panic!(
                    "gave up after {WAIT:?} waiting until {what}; vswitch: {} {}; counters: {}",
                    stdout(&show),
                    stderr(&show),
                    stdout(&stats)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `snic vswitch SUB --control SOCK args...`.
    fn vswitch(&self, sub: &str, args: &[&str]) -> Output {
        snic().args(["vswitch", sub, "--control"]).arg(&self.sock).args(args).output().unwrap()
    }

    /// Like [`Run::vswitch`], panicking on failure; returns stdout.
    fn vswitch_ok(&self, sub: &str, args: &[&str]) -> String {
        let out = self.vswitch(sub, args);
        assert!(out.status.success(), "vswitch {sub} {args:?} failed: {}", stderr(&out));
        stdout(&out)
    }

    fn show(&self) -> Value {
        serde_json::from_str(self.vswitch_ok("show", &["--json"]).trim()).unwrap()
    }

    fn policy(&self) -> String {
        self.vswitch_ok("policy", &[])
    }

    /// Stop with SIGINT; the run must exit cleanly within [`WAIT`].
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

/// An Ethernet + IPv4 + UDP frame from the VM (02:00:00:00:00:01, 10.0.0.1) to `dst`.
fn vm_frame(dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    let payload = [0xabu8; 18];
    let mut f = Vec::new();
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, dst[3]]); // the peer VM's MAC
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + 8 + payload.len()) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&dst);
    let sum =
        !ip.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).fold(0u32, |a, w| {
            let s = a + w;
            (s & 0xffff) + (s >> 16)
        }) as u16;
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]); // no UDP checksum (IPv4 allows it)
    f.extend_from_slice(&payload);
    f
}

/// One request line on the control socket, the way any client would send it.
fn raw_request(sock: &Path, line: &str) -> Value {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(line.as_bytes()).unwrap();
    s.write_all(b"\n").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut doc = String::new();
    s.read_to_string(&mut doc).unwrap();
    serde_json::from_str(doc.trim_end()).unwrap_or_else(|e| panic!("not JSON ({e}): {doc}"))
}

fn num(v: &Value, ptr: &str) -> u64 {
    v.pointer(ptr).and_then(Value::as_u64).unwrap_or_else(|| panic!("no {ptr} in {v}"))
}

#[test]
fn vswitch_control_plane_of_a_live_run() {
    let dir = common::temp_dir("vsw-live");
    let policy_file = dir.join("policy.toml");
    write_default_policy(&policy_file);
    let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (mut run, addr) = Run::start(
        &dir,
        &peer,
        &[
            "--stage",
            "parse",
            "--stage",
            "vswitch",
            "--policy",
            policy_file.to_str().unwrap(),
            "--flows",
            "4096",
        ],
    );

    // show: an idle vSwitch with the policy's vPort.
    let v = run.show();
    let g0 = num(&v, "/generation");
    assert_eq!(num(&v, "/flows"), 0, "{v}");
    assert_eq!(num(&v, "/capacity"), 4096 * num(&v, "/shards"), "--flows sets the capacity: {v}");
    assert_eq!(v["vports"][0]["name"], "vm-a", "{v}");
    let e0 = num(&v, "/vports/0/epoch");
    let text = run.vswitch_ok("show", &[]);
    assert!(text.starts_with(&format!("generation {g0}, ")), "{text}");
    assert!(text.contains("flows: 0 cached"), "{text}");

    // Five packets of one flow: one miss (the exception packet), then the flow is cached.
    for _ in 0..5 {
        peer.send_to(&vm_frame([10, 0, 0, 2], 1000, 2000), addr).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    // Each packet is a hit, a miss, or queued behind the miss of its flow (when they arrive
    // together); the flow is compiled once.
    let seen =
        |v: &Value| num(v, "/fast/hits") + num(v, "/fast/misses") + num(v, "/fast/queued_behind");
    run.wait_until("the 5 packets are counted", |r| seen(&r.show()) >= 5);
    // The flow is stateful (the default ACL allows with state): a forward and a reverse entry.
    let v = run.show();
    assert_eq!(seen(&v), 5, "{v}");
    assert_eq!(num(&v, "/flows"), 2, "{v}");
    assert_eq!((num(&v, "/fast/misses"), num(&v, "/fast/compiled")), (1, 1), "{v}");
    assert_eq!((num(&v, "/fast/installs"), num(&v, "/fast/reverse_installs")), (1, 1), "{v}");

    // dump-flows: one line per entry, the forward one with its key and counters.
    const KEY: &str = "port=0,out,proto=17,src=10.0.0.1:1000,dst=10.0.0.2:2000";
    let flows = run.vswitch_ok("dump-flows", &[]);
    let lines: Vec<&str> = flows.lines().collect();
    assert_eq!(lines.len(), 2, "{flows}");
    assert_eq!(
        lines.iter().filter(|l| l.starts_with(&format!("{KEY}, packets:"))).count(),
        1,
        "{flows}"
    );
    let json = run.vswitch_ok("dump-flows", &["--json", "--limit", "10"]);
    let all: Vec<Value> = json.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(all.len(), 2, "{json}");
    let f = all.iter().find(|f| f["key"] == KEY).unwrap_or_else(|| panic!("no {KEY}: {json}"));
    assert_eq!(num(f, "/packets"), 5, "{f}");
    assert_eq!(run.vswitch_ok("dump-flows", &["--limit", "1"]).lines().count(), 1);
    assert!(run.vswitch_ok("dump-flows", &["--limit", "0"]).is_empty());

    // add-layer, add-rule: applied; each moves the generation and vPort 0's epoch. (The
    // default `acl` layer allows everything at priority 0, so the deny goes in a second ACL
    // layer after it.)
    let p0 = run.policy();
    assert_eq!(p0, std::fs::read_to_string(&policy_file).unwrap(), "policy is the file loaded");
    let applied = |op: &str, g: u64, e: u64| {
        format!(
            "applied {op}: generation {g}; new epoch on vPort 0 (epoch {e}); 0 cached flow(s) removed\n"
        )
    };
    let out = run.vswitch_ok(
        "add-layer",
        &["--vport", "0", "--position", "1", "name=acl2", "kind=acl", "default=pass"],
    );
    assert_eq!(out, applied("add-layer", g0 + 1, e0 + 1));
    let out = run.vswitch_ok(
        "add-rule",
        &["--vport", "0", "--layer", "acl2", "id=50", "ip.dst=10.0.0.3", "action=deny"],
    );
    assert_eq!(out, applied("add-rule", g0 + 2, e0 + 2));
    let p1 = run.policy();
    assert!(p1.contains("acl2") && !p0.contains("acl2"), "{p1}");

    // A bad rule: refused with the field named, nothing applied.
    let out = run.vswitch(
        "add-rule",
        &["--vport", "0", "--layer", "acl2", "id=51", "ip.dst=10.0.0.0/33", "action=deny"],
    );
    assert!(!out.status.success());
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    assert!(stderr(&out).contains("ip.dst"), "the error names the field: {}", stderr(&out));
    // An unknown layer and a duplicate rule id: refused too.
    let out = run.vswitch("add-rule", &["--vport", "0", "--layer", "nope", "id=52", "action=deny"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("nope"), "{}", stderr(&out));
    let out = run.vswitch("add-rule", &["--vport", "0", "--layer", "acl2", "id=50", "action=deny"]);
    assert!(!out.status.success(), "rule 50 exists already");
    assert_eq!(run.policy(), p1, "refused edits change nothing");
    assert_eq!(num(&run.show(), "/generation"), g0 + 2);

    // The change reaches the data path: the cached flow to 10.0.0.2 is stale (its vPort's
    // epoch moved) and re-evaluated; a new flow to 10.0.0.3 is denied.
    let v = run.show();
    let (stale0, denied0) = (num(&v, "/fast/stale"), num(&v, "/fast/denied"));
    peer.send_to(&vm_frame([10, 0, 0, 2], 1000, 2000), addr).unwrap();
    peer.send_to(&vm_frame([10, 0, 0, 3], 1001, 2001), addr).unwrap();
    run.wait_until("the old flow is re-evaluated and the new one denied", |r| {
        let v = r.show();
        num(&v, "/fast/stale") > stale0 && num(&v, "/fast/denied") > denied0
    });

    // remove-rule, remove-layer: back to the policy we started with.
    let out = run.vswitch_ok("remove-rule", &["--vport", "0", "--layer", "acl2", "--id", "50"]);
    assert_eq!(out, applied("remove-rule", g0 + 3, e0 + 3));
    let out = run.vswitch("remove-rule", &["--vport", "0", "--layer", "acl2", "--id", "50"]);
    assert!(!out.status.success(), "removing it twice is an error");
    let out = run.vswitch_ok("remove-layer", &["--vport", "0", "--name", "acl2"]);
    assert_eq!(out, applied("remove-layer", g0 + 4, e0 + 4));
    assert_eq!(run.policy(), p0);

    // load: a file with an error changes nothing and names the file and line; a good one applies.
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, BAD_POLICY).unwrap();
    let out = run.vswitch("load", &[bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains(&format!("{}:18:", bad.display())), "{}", stderr(&out));
    assert_eq!(run.policy(), p0);
    assert_eq!(num(&run.show(), "/generation"), g0 + 4);
    let out = run.vswitch_ok("load", &[policy_file.to_str().unwrap()]);
    assert!(out.starts_with(&format!("applied replace: generation {}; ", g0 + 5)), "{out}");
    assert_eq!(run.policy(), p0);

    // stats still answers on the same socket (the snapshot is refreshed every 100 ms), both the
    // plain counters document and the `stats` request.
    run.wait_until("the counters show the 7 packets sent", |r| {
        let out = common::run_ok(snic().arg("stats").arg("--control").arg(&r.sock));
        let c: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
        num(&c, "/ports/0/rx_packets") == 7
    });
    let v = raw_request(&run.sock, r#"{"cmd":"stats"}"#);
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(num(&v, "/counters/ports/0/rx_packets"), 7, "{v}");
    let v = raw_request(&run.sock, r#"{"cmd":"vswitch.dump-flows","limit":100001}"#);
    assert_eq!(v["ok"], false, "{v}");
    run.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn vswitch_commands_on_a_run_without_a_vswitch_say_so() {
    let dir = common::temp_dir("vsw-none");
    let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (run, _) = Run::start(&dir, &peer, &["--stage", "parse"]);
    for (sub, args) in [("show", &[][..]), ("policy", &[]), ("dump-flows", &[])] {
        let out = run.vswitch(sub, args);
        assert!(!out.status.success(), "vswitch {sub}");
        assert!(
            stderr(&out).contains("this run has no vswitch stage"),
            "vswitch {sub}: {}",
            stderr(&out)
        );
    }
    run.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_refuses_vswitch_flags_without_the_stage_and_a_bad_policy_file() {
    let out = snic()
        .args(["run", "--port", "gen:1", "--port", "null", "--flows", "64"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--flows configures the vswitch stage, but the stage list has none"),
        "{}",
        stderr(&out)
    );
    let dir = common::temp_dir("vsw-run-bad");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, BAD_POLICY).unwrap();
    let out = snic()
        .args(["run", "--port", "gen:1", "--port", "null", "--stage", "parse", "--stage"])
        .args(["vswitch", "--policy"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains(&format!("{}:18:", bad.display())), "{err}");
    assert!(err.contains("rule[id=3].match.ip.dst"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn vswitch_help_lists_every_subcommand() {
    let out = common::run_ok(snic().args(["vswitch", "--help"]));
    let text = stdout(&out);
    for sub in [
        "show",
        "dump-flows",
        "policy",
        "add-rule",
        "remove-rule",
        "add-layer",
        "remove-layer",
        "add-mapping",
        "remove-mapping",
        "load",
        "check",
    ] {
        assert!(text.contains(&format!("  {sub} ")), "help lacks {sub}:\n{text}");
    }
}
