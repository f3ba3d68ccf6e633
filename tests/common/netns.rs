//! Helpers of the root-only network-namespace tests (`tests/netns.rs`,
//! `tests/netns_vswitch.rs`): bounded commands, tool and root checks, stopping children.

use std::io::Write;
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
