//! The network namespaces and veth pairs of one real run, deleted when the [`Net`] guard is
//! dropped (on every exit path, a panic included), and the bounded commands (`ip`, `nft`, `tc`)
//! that build them.
//!
//! Every namespace of a run is named `snicsc<pid>x<run>-<what>`: unique per process and per
//! run within it, so concurrent runs (tests in parallel, several processes) never meet. A run
//! that was killed before its guard could clean up leaves namespaces whose process is gone;
//! the next run sweeps them.
//!
//! Interface names only need to be unique within their namespace: each veth end is created
//! straight in its namespace (`ip link add A netns X type veth peer name B netns Y`), so a
//! NIC's port keeps its own name (`wire`) when that is a valid interface name.

use crate::ScenarioError;
use std::io::{self, Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Where `ip netns` keeps its namespaces.
const NETNS_DIR: &str = "/run/netns";
/// The prefix of every namespace a run creates.
const PREFIX: &str = "snicsc";
/// The MTU of every veth: jumbo, so a RoCE packet of a 4 KiB path MTU fits a frame (as it
/// does on a simulated link).
pub const VETH_MTU: u32 = 9000;
/// Bound of one command.
const CMD_SECS: u64 = 10;

static RUNS: AtomicU32 = AtomicU32::new(0);

/// Whether the effective user id is 0 (from `/proc/self/status`: no tool, no `unsafe`).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

/// Run `prog args` (feeding `stdin` when given), bounded to 10 s (then killed). Its stdout, or
/// an error naming the command with its stderr.
pub fn cmd(prog: &str, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    let line = || format!("{prog} {}", args.join(" "));
    let mut child = Command::new(prog)
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("`{}` could not start: {e}", line()))?;
    if let (Some(text), Some(mut w)) = (stdin, child.stdin.take()) {
        w.write_all(text.as_bytes())
            .map_err(|e| format!("`{}`: writing its input: {e}", line()))?;
    }
    // Read both pipes on threads so a chatty command never blocks on a full pipe.
    let mut out_pipe = child.stdout.take();
    let mut err_pipe = child.stderr.take();
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(p) = out_pipe.as_mut() {
            let _ = p.read_to_string(&mut s);
        }
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(p) = err_pipe.as_mut() {
            let _ = p.read_to_string(&mut s);
        }
        s
    });
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if t0.elapsed() > Duration::from_secs(CMD_SECS) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("`{}` took more than {CMD_SECS} s (killed)", line()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(format!("`{}`: {e}", line())),
        }
    };
    let out = out_t.join().unwrap_or_default();
    let err = err_t.join().unwrap_or_default();
    if status.success() {
        Ok(out)
    } else {
        Err(format!("`{}` failed ({status}): {}", line(), err.trim()))
    }
}

/// `ip ARGS`, as a setup error when it fails.
fn ip(args: &[&str]) -> Result<String, ScenarioError> {
    cmd("ip", args, None).map_err(ScenarioError::Setup)
}

/// `name` as a valid interface name (at most 15 bytes of letters, digits, `-`, `_`), or
/// `fallback` when it is not one.
pub fn ifname(name: &str, fallback: &str) -> String {
    let ok = !name.is_empty()
        && name.len() <= 15
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok { name.to_string() } else { fallback.to_string() }
}

/// A namespace name part from any scenario name (letters, digits, `-`, `_`, `.`; others `_`).
fn ns_part(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' })
        .collect()
}

/// Run `f` on a thread that entered namespace `ns` (`setns(2)`); what it opens (a socket)
/// stays in that namespace after the thread ends.
pub fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    let path = format!("{NETNS_DIR}/{ns}");
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = std::fs::File::open(&path)
                .map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| io::Error::other(format!("setns({path}): {e}")))?;
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other(format!("the thread in {ns} panicked"))))
    })
}

/// Counters of one interface (`ip -s link`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IfStats {
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames the interface dropped on receive.
    pub rx_dropped: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames the interface dropped on transmit.
    pub tx_dropped: u64,
}

/// Counters of interface `dev` in namespace `ns`.
pub fn if_stats(ns: &str, dev: &str) -> Result<IfStats, String> {
    let out = cmd("ip", &["-n", ns, "-j", "-s", "link", "show", "dev", dev], None)?;
    let v: serde_json::Value =
        serde_json::from_str(&out).map_err(|e| format!("ip -j -s link: {e}"))?;
    let s = v.get(0).and_then(|l| l.get("stats64")).ok_or("ip -j -s link: no stats64")?;
    let n = |dir: &str, f: &str| s.get(dir).and_then(|d| d.get(f)).and_then(|x| x.as_u64());
    Ok(IfStats {
        rx_packets: n("rx", "packets").unwrap_or(0),
        rx_bytes: n("rx", "bytes").unwrap_or(0),
        rx_dropped: n("rx", "dropped").unwrap_or(0),
        tx_packets: n("tx", "packets").unwrap_or(0),
        tx_bytes: n("tx", "bytes").unwrap_or(0),
        tx_dropped: n("tx", "dropped").unwrap_or(0),
    })
}

/// The namespaces of one run (see the module doc); dropping it deletes every one, and with
/// them every interface, qdisc and nftables table in them.
#[derive(Debug)]
pub struct Net {
    prefix: String,
    namespaces: Vec<String>,
}

impl Net {
    /// A new run's guard (nothing created yet). Sweeps namespaces left by runs whose process
    /// is gone. Fails when not root.
    pub fn new() -> Result<Net, ScenarioError> {
        if !is_root() {
            return Err(ScenarioError::Unsupported(
                "--real needs root (network namespaces)".into(),
            ));
        }
        sweep_stale();
        let run = RUNS.fetch_add(1, Ordering::Relaxed);
        Ok(Net { prefix: format!("{PREFIX}{}x{run}-", std::process::id()), namespaces: Vec::new() })
    }

    /// What every namespace of this run starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The namespaces created so far.
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    /// The namespace called `what` in this run, created (loopback up, IPv6 off so the kernel
    /// sends nothing of its own on the veths) unless it exists already.
    pub fn ns(&mut self, what: &str) -> Result<String, ScenarioError> {
        let name = format!("{}{}", self.prefix, ns_part(what));
        if self.namespaces.contains(&name) {
            return Ok(name);
        }
        ip(&["netns", "add", &name])?;
        self.namespaces.push(name.clone());
        ip(&["-n", &name, "link", "set", "lo", "up"])?;
        for knob in ["all", "default"] {
            let path = format!("net.ipv6.conf.{knob}.disable_ipv6=1");
            // Best effort: a kernel without IPv6 has nothing to turn off.
            let _ = cmd("ip", &["netns", "exec", &name, "sysctl", "-qw", &path], None);
        }
        Ok(name)
    }

    /// A veth pair: end `a.1` in namespace `a.0`, end `b.1` in `b.0`, both up with an MTU of
    /// [`VETH_MTU`].
    pub fn veth(&mut self, a: (&str, &str), b: (&str, &str)) -> Result<(), ScenarioError> {
        ip(&[
            "link", "add", "name", a.1, "netns", a.0, "type", "veth", "peer", "name", b.1, "netns",
            b.0,
        ])?;
        for (ns, dev) in [a, b] {
            let mtu = VETH_MTU.to_string();
            ip(&["-n", ns, "link", "set", "dev", dev, "mtu", &mtu, "up"])?;
        }
        Ok(())
    }

    /// Delete every namespace now (also what drop does). Returns the ones that would not go.
    pub fn teardown(&mut self) -> Vec<String> {
        let mut left = Vec::new();
        for ns in self.namespaces.drain(..).rev() {
            if let Err(e) = cmd("ip", &["netns", "del", &ns], None) {
                left.push(format!("{ns}: {e}"));
            }
        }
        left
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// Delete namespaces of runs whose process no longer exists.
fn sweep_stale() {
    let Ok(dir) = std::fs::read_dir(NETNS_DIR) else { return };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PREFIX) else { continue };
        let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if pid.is_empty() || std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let _ = cmd("ip", &["netns", "del", &name], None);
    }
}

/// Every namespace of this process's runs that exists now (for tests: none after a run).
pub fn leftover_namespaces() -> Vec<String> {
    let mine = format!("{PREFIX}{}x", std::process::id());
    std::fs::read_dir(NETNS_DIR)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&mine))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_fall_back_when_invalid() {
        assert_eq!(ifname("wire", "p0"), "wire");
        assert_eq!(ifname("a.b", "p1"), "p1");
        assert_eq!(ifname("averyveryverylongname", "p2"), "p2");
        assert_eq!(ifname("", "p3"), "p3");
        assert_eq!(ns_part("nic 0/x"), "nic_0_x");
    }

    #[test]
    fn a_bounded_command_reports_failure_with_stderr() {
        assert_eq!(cmd("sh", &["-c", "echo hi"], None).unwrap(), "hi\n");
        assert_eq!(cmd("cat", &[], Some("fed")).unwrap(), "fed");
        let e = cmd("sh", &["-c", "echo nope >&2; exit 3"], None).unwrap_err();
        assert!(e.contains("nope") && e.contains("sh -c"), "{e}");
        assert!(cmd("/nonexistent/tool", &[], None).unwrap_err().contains("could not start"));
    }

    #[test]
    fn namespaces_and_veths_are_gone_after_the_guard() {
        if !is_root() {
            eprintln!("skipped: needs root (network namespaces)");
            return;
        }
        let mut net = Net::new().unwrap();
        let a = net.ns("n-a").unwrap();
        let b = net.ns("n-b").unwrap();
        assert_eq!(net.ns("n-a").unwrap(), a, "the same namespace, not a second one");
        net.veth((&a, "wire"), (&b, "wire")).unwrap();
        // The same interface names in other namespaces of another run: no clash.
        let mut other = Net::new().unwrap();
        let c = other.ns("n-a").unwrap();
        let d = other.ns("n-b").unwrap();
        other.veth((&c, "wire"), (&d, "wire")).unwrap();
        let st = if_stats(&a, "wire").unwrap();
        assert_eq!(st.tx_dropped, 0);
        let names = [a.clone(), b.clone(), c, d];
        drop(net);
        drop(other);
        let left = leftover_namespaces();
        assert!(names.iter().all(|n| !left.contains(n)), "{left:?}");
        assert!(if_stats(&a, "wire").is_err());
    }
}
