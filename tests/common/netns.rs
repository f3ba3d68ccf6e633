//! Helpers of the root-only network-namespace tests (`tests/netns.rs`, `tests/netns_afxdp.rs`,
//! `tests/netns_vswitch.rs`): bounded commands, tool and root checks, stopping children.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Run `args` bounded by `timeout(1)`; returns (success, stdout, stderr).
pub fn run<S: AsRef<str> + std::fmt::Debug>(secs: u32, args: &[S]) -> (bool, String, String) {
    match Command::new("timeout")
        .args(["-k", "2", &secs.to_string()])
        .args(args.iter().map(|a| a.as_ref()))
        .stdin(Stdio::null())
        .output()
    {
        Ok(o) => (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        ),
        Err(e) => (false, String::new(), format!("could not start {args:?}: {e}")),
    }
}

pub fn must<S: AsRef<str> + std::fmt::Debug>(secs: u32, args: &[S]) -> String {
    let (ok, out, err) = run(secs, args);
    assert!(ok, "command failed: {args:?}: {err}{out}");
    out
}

/// A command line split at whitespace (for commands without spaces in their arguments).
pub fn words(cmd: &str) -> Vec<&str> {
    cmd.split_whitespace().collect()
}

/// Whether `tool` is an executable file in a `PATH` directory.
pub fn have(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(tool))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Whether the effective user id is 0, from `/proc/self/status`.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

/// Write a line straight to stderr: libtest captures `eprintln!` of passing tests, and the
/// summary and skip notes must show in a plain `cargo test`.
pub fn note(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// Run an iperf3 client command (with `-J`), retrying only while the server is not yet
/// listening, for at most `secs` seconds a try; then stop the `server`. Fails the test (with
/// the log of the `snic` process [`spawn_logged`] in `dir`) when iperf3 failed or moved no
/// data; returns the bytes and bit/s received, and notes them under `label`.
pub fn iperf3_client(
    label: &str,
    client: &[String],
    secs: u32,
    server: &mut Child,
    dir: &std::path::Path,
) -> (f64, f64) {
    let mut result = (false, String::new(), String::new());
    for _ in 0..20 {
        // The server needs a moment to listen; retry only while it refuses connections.
        thread::sleep(Duration::from_millis(250));
        result = run(secs, client);
        if result.0 || !result.1.contains("Connection refused") {
            break;
        }
    }
    let (ok, json, err) = result;
    stop(server, Duration::from_secs(2));
    assert!(ok, "iperf3 {label} failed: {err}\n{json}\n{}", read_logged(dir, "snic"));
    let v: serde_json::Value = serde_json::from_str(&json).expect("iperf3 -J output is JSON");
    let recv = &v["end"]["sum_received"];
    let bytes = recv["bytes"].as_f64().unwrap_or(0.0);
    let bps = recv["bits_per_second"].as_f64().unwrap_or(0.0);
    assert!(bytes > 0.0, "iperf3 {label} moved no data: {json}");
    note(&format!("iperf3 {label}: {bytes:.0} bytes, {:.3} Gbit/s", bps / 1e9));
    (bytes, bps)
}

/// The `-J` report of an iperf3 client that ran in the background as `label` (see
/// [`spawn_logged`]) and exited with `status`: fails the test when it failed (a reset
/// connection, say; `context` is added to the message) or reported an error; returns the
/// report and the bytes received.
pub fn iperf3_report(
    dir: &std::path::Path,
    label: &str,
    status: std::process::ExitStatus,
    context: &str,
) -> (serde_json::Value, f64) {
    let log = read_logged(dir, label);
    assert!(status.success(), "iperf3 failed (a reset?):\n{log}\n{context}");
    let json = std::fs::read_to_string(dir.join(format!("{label}.out"))).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&json).expect("iperf3 -J output is JSON");
    assert!(v.get("error").is_none(), "iperf3: {}", v["error"]);
    let bytes = v["end"]["sum_received"]["bytes"].as_f64().unwrap_or(0.0);
    (v, bytes)
}

/// The child's exit status, waiting at most `limit`; `None` if it still runs then.
pub fn exit_within(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t0 = Instant::now();
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if t0.elapsed() >= limit {
            return None;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Stop a child: SIGTERM, up to `grace` for it to exit, then SIGKILL. Always reaped.
pub fn stop(child: &mut Child, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let t0 = Instant::now();
    while t0.elapsed() < grace {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Two network namespaces joined by a veth pair (one end in each, up, IPv6 off so the veth
/// carries only what the test sends); Drop deletes the namespaces, and with them every
/// interface and process's address in them, whatever the exit path.
pub struct VethPair {
    /// The namespaces' names.
    pub ns: [String; 2],
    /// The veth ends' names (end `i` in namespace `i`).
    pub veth: [String; 2],
    /// Bound of [`VethPair::exec`] commands, seconds.
    pub exec_secs: u32,
}

impl VethPair {
    /// Namespaces `{ns}A{pid}`, `{ns}B{pid}` and veth ends `{veth}A{pid}`, `{veth}B{pid}`
    /// (cut to 15 characters); commands of [`VethPair::exec`] bounded to `exec_secs`.
    pub fn create(ns: &str, veth: &str, exec_secs: u32) -> VethPair {
        let id = std::process::id();
        let t = VethPair {
            ns: [format!("{ns}A{id}"), format!("{ns}B{id}")],
            veth: [format!("{veth}A{id}"), format!("{veth}B{id}")]
                .map(|n| n.chars().take(15).collect::<String>()),
            exec_secs,
        };
        for ns in &t.ns {
            must(10, &["ip", "netns", "add", ns]);
            must(10, &["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        must(
            10,
            &[
                "ip", "link", "add", &t.veth[0], "netns", &t.ns[0], "type", "veth", "peer", "name",
                &t.veth[1], "netns", &t.ns[1],
            ],
        );
        for i in 0..2 {
            let sysctl = format!("net.ipv6.conf.{}.disable_ipv6=1", t.veth[i]);
            must(10, &["ip", "netns", "exec", &t.ns[i], "sysctl", "-qw", &sysctl]);
            must(10, &["ip", "-n", &t.ns[i], "link", "set", &t.veth[i], "up"]);
        }
        t
    }

    /// A command in namespace `i`, bounded to `exec_secs`. `--foreground`: a SIGTERM to
    /// `timeout` reaches the command once (without it, timeout also signals its process
    /// group, and a second SIGTERM makes snic exit at once, without its counters).
    pub fn exec(&self, i: usize) -> Command {
        let mut c = Command::new("ip");
        let secs = self.exec_secs.to_string();
        c.args(["netns", "exec", &self.ns[i], "timeout", "--foreground", "-k", "2", &secs]);
        c
    }

    /// Run `args` in namespace `i` (bounded to 20 s); its stdout, or a panic.
    pub fn must(&self, i: usize, args: &[&str]) -> String {
        let mut v = vec!["ip", "netns", "exec", &self.ns[i]];
        v.extend_from_slice(args);
        must(20, &v)
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = run(10, &["ip", "netns", "del", ns]);
        }
    }
}

/// Wait until `f` holds, checking every 50 ms; panic naming `what` after `secs`.
pub fn wait_for(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(secs), "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// Whether a root-only test can run: false (after a note) when not root, or when root but one
/// of `tools` is missing and `CI` is unset. Panics when root, `CI` is set and a tool is missing
/// (CI installs them).
pub fn can_run(test: &str, tools: &[&str]) -> bool {
    if !is_root() {
        note(&format!("skipping {test}: needs root"));
        return false;
    }
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !have(t)).collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: CI is set but these tools are missing: {missing:?}"
    );
    note(&format!("skipping {test}: missing tools {missing:?}"));
    false
}

/// Two namespaces, each holding the inner end of a veth whose outer end stays in the root
/// namespace (where the test's `snic run` opens its ports), with an address on each inner
/// end; processes the test starts, links it adds (a bridge) and a log directory. Drop stops
/// the processes and removes all of it, whatever the exit path.
///
/// ```text
///  netns 0: inner 0  addr[0]/24 ==(veth)== outer 0  (root ns)
///  netns 1: inner 1  addr[1]/24 ==(veth)== outer 1  (root ns)
/// ```
pub struct OuterVeths {
    /// The namespaces.
    pub ns: [String; 2],
    /// The veth ends in the root namespace.
    pub outer: [String; 2],
    /// The veth ends in the namespaces.
    pub inner: [String; 2],
    /// The inner ends' addresses (a /24).
    pub addr: [&'static str; 2],
    /// Processes started with [`OuterVeths::spawn`].
    pub children: Vec<Child>,
    /// More links to delete on drop (a bridge the test made).
    pub links: Vec<String>,
    /// Log files and control sockets.
    pub dir: PathBuf,
}

impl OuterVeths {
    /// Namespaces `{tag}n{pid}a/b`, outer ends `{tag}o{pid}a/b`, inner ends `{tag}i{pid}a/b`
    /// (names cut to 15 characters); IPv6 off on every end, so the links carry only what the
    /// test sends.
    pub fn create(tag: &str, addr: [&'static str; 2]) -> OuterVeths {
        Self::create_with_queues(tag, addr, 1)
    }

    /// [`OuterVeths::create`] with `queues` receive and transmit queues on every veth end.
    pub fn create_with_queues(tag: &str, addr: [&'static str; 2], queues: u32) -> OuterVeths {
        let q = queues.to_string();
        let pid = std::process::id();
        let name = |kind: &str, side: &str| -> String {
            format!("{tag}{kind}{pid}{side}").chars().take(15).collect()
        };
        let dir = std::env::temp_dir().join(format!("snic-{tag}-{pid}"));
        let _ = std::fs::create_dir_all(&dir);
        let g = OuterVeths {
            ns: [name("n", "a"), name("n", "b")],
            outer: [name("o", "a"), name("o", "b")],
            inner: [name("i", "a"), name("i", "b")],
            addr,
            children: Vec::new(),
            links: Vec::new(),
            dir,
        };
        for i in 0..2 {
            must(10, &["ip", "netns", "add", &g.ns[i]]);
            must(
                10,
                &[
                    "ip",
                    "link",
                    "add",
                    &g.outer[i],
                    "numrxqueues",
                    &q,
                    "numtxqueues",
                    &q,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &g.inner[i],
                    "numrxqueues",
                    &q,
                    "numtxqueues",
                    &q,
                ],
            );
            std::fs::write(format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", g.outer[i]), "1")
                .expect("disable IPv6 on the outer veth");
            must(10, &["ip", "link", "set", &g.inner[i], "netns", &g.ns[i]]);
            let sysctl = format!("net.ipv6.conf.{}.disable_ipv6=1", g.inner[i]);
            g.must_in(i, &["sysctl", "-qw", &sysctl]);
            must(10, &["ip", "link", "set", &g.outer[i], "up"]);
            let cidr = format!("{}/24", g.addr[i]);
            g.must_in(i, &["ip", "addr", "add", &cidr, "dev", &g.inner[i]]);
            g.must_in(i, &["ip", "link", "set", &g.inner[i], "up"]);
            g.must_in(i, &["ip", "link", "set", "lo", "up"]);
        }
        g
    }

    /// `args` prefixed with `ip netns exec NS`.
    pub fn in_ns(&self, i: usize, args: &[&str]) -> Vec<String> {
        ["ip", "netns", "exec", self.ns[i].as_str()]
            .iter()
            .chain(args)
            .map(|s| s.to_string())
            .collect()
    }

    /// Run `args` in namespace `i` (bounded to 10 s), or panic.
    pub fn must_in(&self, i: usize, args: &[&str]) {
        must(10, &self.in_ns(i, args));
    }

    /// Start a long-running process bounded by `timeout`, its output to `LABEL.out` and
    /// `LABEL.err` in the log directory; returns its index in `children`.
    pub fn spawn<S: AsRef<str> + std::fmt::Debug>(
        &mut self,
        label: &str,
        secs: u32,
        args: &[S],
    ) -> usize {
        spawn_logged(&self.dir, &mut self.children, label, secs, args)
    }

    /// The output of process `label` so far.
    pub fn log(&self, label: &str) -> String {
        read_logged(&self.dir, label)
    }

    /// Wait until the `snic run` child `si` answers `snic stats --control SOCK` with real
    /// counters for both ports (not the `{"status":"starting"}` placeholder): its ports are
    /// open then. Panics (with snic's log, label `snic`) if it exits first or is not ready in
    /// 10 s.
    pub fn wait_ready(&mut self, si: usize, snic: &str, sock: &str) {
        let t0 = Instant::now();
        let mut last = String::new();
        loop {
            if let Ok(Some(status)) = self.children[si].try_wait() {
                panic!(
                    "snic run exited early ({status}); last stats: {last}\n{}",
                    self.log("snic")
                );
            }
            let (ok, out, err) = run(5, &[snic, "stats", "--control", sock]);
            if ok {
                let v: serde_json::Value = serde_json::from_str(out.trim())
                    .unwrap_or_else(|e| panic!("snic stats is not JSON ({e}): {out}"));
                let ports = v["ports"]
                    .as_array()
                    .map_or(0, |p| p.iter().filter(|p| p["rx_packets"].is_u64()).count());
                if v.get("status").is_none() && ports == 2 {
                    return;
                }
                last = out;
            } else {
                last = err;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "snic run not ready within 10 s; last stats: {last}\n{}",
                self.log("snic")
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for OuterVeths {
    fn drop(&mut self) {
        for c in &mut self.children {
            stop(c, Duration::from_secs(3));
        }
        for l in &self.links {
            let _ = run(10, &["ip", "link", "del", l]);
        }
        for i in 0..2 {
            let _ = run(10, &["ip", "link", "del", &self.outer[i]]);
            let _ = run(10, &["ip", "netns", "del", &self.ns[i]]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Start a long-running process bounded by `timeout` (killed 2 s after `secs`), its output to
/// `LABEL.out` and `LABEL.err` in `dir`; push it on `children` and return its index there. The
/// one spawn of every namespace fixture.
pub fn spawn_logged<S: AsRef<str> + std::fmt::Debug>(
    dir: &std::path::Path,
    children: &mut Vec<std::process::Child>,
    label: &str,
    secs: u32,
    args: &[S],
) -> usize {
    let out = std::fs::File::create(dir.join(format!("{label}.out"))).expect("log file");
    let err = std::fs::File::create(dir.join(format!("{label}.err"))).expect("log file");
    let child = Command::new("timeout")
        .args(["-k", "2", &secs.to_string()])
        .args(args.iter().map(|a| a.as_ref()))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("could not start {args:?}: {e}"));
    children.push(child);
    children.len() - 1
}

/// The stdout and stderr of the process [`spawn_logged`] as `label` in `dir`, headed.
pub fn read_logged(dir: &std::path::Path, label: &str) -> String {
    let read =
        |ext: &str| std::fs::read_to_string(dir.join(format!("{label}.{ext}"))).unwrap_or_default();
    format!("--- {label} stdout ---\n{}--- {label} stderr ---\n{}", read("out"), read("err"))
}
