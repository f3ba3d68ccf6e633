//! Real interop test of the vSwitch stage against the Linux kernel's own VXLAN device (root
//! only; skipped with a message otherwise).
//!
//! As root, a missing tool (`ip`, `ping`, `iperf3`, `timeout`, `kill`, `ethtool`, `tshark`)
//! fails the test when the `CI` environment variable is set (CI installs them); otherwise a
//! missing required tool skips the test, and a missing `ethtool` or `tshark` skips only its step
//! (turning TX offloads off, the underlay capture) with a note.
//!
//! Topology, made fresh for each run (names carry the pid; namespace addresses only) and torn
//! down on every exit path (deleting the three namespaces deletes every link):
//!
//! ```text
//!  netns vm-a:  eth0 10.0.0.1/24, MTU 1450, MAC 02:00:00:00:00:0a, TX offloads off,
//!               default via 10.0.0.254 (static neighbour, for the NAT reply path)
//!      ==(veth)== va<pid> in netns snic   (pipeline port 0: the VM side)
//!  netns snic:  `snic run --stage parse --stage vswitch --policy tests/data/vswitch/interop.toml`
//!               ub<pid>, MAC 02:00:00:00:01:01 (pipeline port 1: the underlay, PA 192.168.100.1)
//!      ==(veth)== netns host-b: eth0 192.168.100.2/24, MAC 02:00:00:00:02:02,
//!                 static neighbours 192.168.100.1 and the VIP 192.168.100.10 -> snic's MAC;
//!                 vxlan42 (the kernel's VXLAN: VNI 42, remote 192.168.100.1, port 4789,
//!                 MTU 1450, MAC 02:00:00:00:00:0b, TX offloads off) 10.0.0.2/24
//! ```
//!
//! The test checks, each step bounded by `timeout(1)`:
//! 1. `ping` both ways through the tunnel (the ARP exchange crosses the tunnel too: snic answers
//!    nothing itself), with host-b's underlay captured meanwhile and decoded by `tshark`: VXLAN
//!    both ways, VNI 42, nothing malformed, no bad checksum in what snic sent;
//! 2. a 5-second `iperf3` TCP run each way through the tunnel; then, with vm-a's TX offloads
//!    turned ON (a default guest: TSO/GSO super-packets with partial checksums), a 5-second run
//!    vm-a -> host-b that snic must carry by handing each encapsulated super-packet to the
//!    AF_PACKET underlay as one UDP GSO buffer (`tunnel_udp_gso`; nothing `tunnel_segmented`),
//!    with no `transpose_failed` drop; offloads go off again after it;
//! 3. NAT: host-b pings the VIP from its underlay address (not tunnelled), DNATed to vm-a, and
//!    the replies come back from the VIP; a 2-second `iperf3` run to the VIP;
//! 4. ACL deny: a rule added at run time (`snic vswitch add-rule`) makes `ping` fail both ways
//!    and grows the `policy_deny` drops of `snic stats` and the denials of `snic vswitch show`;
//!    after `remove-rule`, `ping` works again;
//! 5. `snic vswitch dump-flows` lists flows of host-b's address with packet counts;
//! 6. for scale, snic is stopped and the kernel takes its place (a bridge and a VXLAN device in
//!    snic's namespace), and the two `iperf3` runs are repeated.
//!
//! It prints a summary, the final counters and snic's own report. It asserts no throughput
//! figure, only that each TCP run moved at least 1 MB (with offloads off, and the TSO run).

mod common;

use common::netns::{have, iperf3_client, iperf3_report, is_root, must, note, run, stop, words};
use std::path::PathBuf;
use std::process::Child;
use std::thread;
use std::time::{Duration, Instant};

/// The policy snic runs with.
const POLICY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/vswitch/interop.toml");

/// vm-a's customer address.
const VM_A: &str = "10.0.0.1";
/// host-b's customer address (on its kernel VXLAN device).
const HOST_B_CA: &str = "10.0.0.2";
/// host-b's provider (underlay) address.
const HOST_B_PA: &str = "192.168.100.2";
/// snic's provider address.
const SNIC_PA: &str = "192.168.100.1";
/// The virtual IP DNATed to vm-a.
const VIP: &str = "192.168.100.10";
/// snic's underlay MAC (`underlay.mac` of the policy).
const SNIC_MAC: &str = "02:00:00:00:01:01";
/// host-b's underlay MAC (`underlay.gateway_mac` of the policy).
const HOST_B_MAC: &str = "02:00:00:00:02:02";
/// The MAC of host-b's VXLAN device (the mapping's MAC in the policy).
const HOST_B_VXLAN_MAC: &str = "02:00:00:00:00:0b";
/// vm-a's MAC (the vPort's MAC in the policy).
const VM_A_MAC: &str = "02:00:00:00:00:0a";
/// The VNI of the tunnel.
const VNI: u32 = 42;
/// Fewest bytes a tunnelled (5 s) or NATed (2 s) iperf3 run must move (1 MB: a stall, not a
/// slow run).
const MIN_TUNNEL_BYTES: f64 = 1e6;
/// How long `snic run` may run in all (the test takes well under a minute).
const SNIC_SECS: u32 = 85;

/// The three namespaces of the topology, by index.
const VM: usize = 0;
const SW: usize = 1;
const HB: usize = 2;

/// Everything one run creates: namespaces (and so every link), processes and log files. Drop
/// removes all of it, whatever the exit path (assertion failure included).
struct Guard {
    ns: [String; 3],
    /// snic's VM-side port (in the snic namespace).
    va: String,
    /// snic's underlay port (in the snic namespace).
    ub: String,
    children: Vec<Child>,
    dir: PathBuf,
    /// Whether TX offloads could be turned off (ethtool present).
    offloads_off: bool,
}

impl Guard {
    /// The topology with names starting with `tag`; with `tap_underlay`, no underlay veth: snic
    /// opens a TAP device `ub` that [`Guard::tap_to_host_b`] then moves into host-b.
    fn create(tag: &str, ethtool: bool, tap_underlay: bool) -> Guard {
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("snic-netns-vswitch-{tag}{pid}"));
        let _ = std::fs::create_dir_all(&dir);
        let mut g = Guard {
            ns: [format!("{tag}vm{pid}"), format!("{tag}sw{pid}"), format!("{tag}hb{pid}")],
            va: format!("{tag}va{pid}"),
            ub: format!("{tag}ub{pid}"),
            children: Vec::new(),
            dir,
            offloads_off: false,
        };
        for i in [VM, SW, HB] {
            must(10, &["ip", "netns", "add", &g.ns[i]]);
            // IPv4 only: no IPv6 router solicitations or DAD probes in the counters.
            for s in ["all", "default"] {
                let key = format!("net.ipv6.conf.{s}.disable_ipv6=1");
                g.must_in(i, &["sysctl", "-qw", &key]);
            }
            g.must_in(i, &["ip", "link", "set", "lo", "up"]);
        }
        let (vm, sw, hb) = (&g.ns[VM], &g.ns[SW], &g.ns[HB]);
        let (va, ub) = (&g.va, &g.ub);
        must(
            10,
            &words(&format!("ip link add {va} netns {sw} type veth peer name eth0 netns {vm}")),
        );
        if !tap_underlay {
            must(
                10,
                &words(&format!(
                    "ip link add {ub} netns {sw} address {SNIC_MAC} type veth \
                     peer name eth0 netns {hb} address {HOST_B_MAC}"
                )),
            );
        }
        // vm-a.
        g.must_in(VM, &["ip", "link", "set", "eth0", "address", VM_A_MAC, "mtu", "1450", "up"]);
        g.must_in(VM, &["ip", "addr", "add", "10.0.0.1/24", "dev", "eth0"]);
        g.must_in(VM, &["ip", "route", "add", "default", "via", "10.0.0.254"]);
        g.must_in(
            VM,
            &words("ip neigh replace 10.0.0.254 lladdr 02:00:00:00:00:fe dev eth0 nud permanent"),
        );
        // snic's namespace: two bare ports, no addresses.
        g.must_in(SW, &["ip", "link", "set", va, "up"]);
        if tap_underlay {
            if ethtool {
                g.must_in(VM, &["ethtool", "-K", "eth0", "tx", "off", "tso", "off", "gso", "off"]);
                g.offloads_off = true;
            }
            return g;
        }
        g.must_in(SW, &["ip", "link", "set", ub, "up"]);
        g.host_b(ethtool);
        if ethtool {
            g.must_in(VM, &["ethtool", "-K", "eth0", "tx", "off", "tso", "off", "gso", "off"]);
            g.offloads_off = true;
        }
        g
    }

    /// Move snic's TAP underlay device into host-b as its eth0, then set host-b up.
    fn tap_to_host_b(&self, ethtool: bool) {
        self.must_in(SW, &["ip", "link", "set", &self.ub, "netns", &self.ns[HB]]);
        self.must_in(HB, &["ip", "link", "set", &self.ub, "name", "eth0", "address", HOST_B_MAC]);
        self.host_b(ethtool);
    }

    /// host-b's side on its eth0 (a veth peer, or snic's TAP device).
    fn host_b(&self, ethtool: bool) {
        let g = self;
        // host-b: snic answers no ARP, so its PA and the VIP are static neighbours.
        g.must_in(HB, &["ip", "link", "set", "eth0", "up"]);
        g.must_in(HB, &["ip", "addr", "add", "192.168.100.2/24", "dev", "eth0"]);
        for ip in [SNIC_PA, VIP] {
            let cmd = format!("ip neigh replace {ip} lladdr {SNIC_MAC} dev eth0 nud permanent");
            g.must_in(HB, &words(&cmd));
        }
        g.must_in(
            HB,
            &words(&format!(
                "ip link add vxlan42 address {HOST_B_VXLAN_MAC} mtu 1450 type vxlan id {VNI} \
                 local {HOST_B_PA} remote {SNIC_PA} dstport 4789 dev eth0"
            )),
        );
        g.must_in(HB, &["ip", "addr", "add", "10.0.0.2/24", "dev", "vxlan42"]);
        g.must_in(HB, &["ip", "link", "set", "vxlan42", "up"]);
        // TX checksum and segmentation offloads off (vm-a's in `create`), so snic sees
        // MTU-sized packets with full checksums unless a step turns vm-a's on.
        if ethtool {
            for dev in ["eth0", "vxlan42"] {
                g.must_in(HB, &["ethtool", "-K", dev, "tx", "off", "tso", "off", "gso", "off"]);
            }
        }
    }

    /// `args` prefixed with `ip netns exec NS`.
    fn in_ns(&self, i: usize, args: &[&str]) -> Vec<String> {
        ["ip", "netns", "exec", self.ns[i].as_str()]
            .iter()
            .chain(args)
            .map(|s| s.to_string())
            .collect()
    }

    fn must_in(&self, i: usize, args: &[&str]) -> String {
        must(10, &self.in_ns(i, args))
    }

    /// Start a long-running process bounded by `timeout`, output to log files; returns its index.
    fn spawn<S: AsRef<str> + std::fmt::Debug>(
        &mut self,
        label: &str,
        secs: u32,
        args: &[S],
    ) -> usize {
        common::netns::spawn_logged(&self.dir, &mut self.children, label, secs, args)
    }

    fn log(&self, label: &str) -> String {
        common::netns::read_logged(&self.dir, label)
    }

    /// Replace snic (stopped by then) by the kernel: a bridge of the VM-side port and a VXLAN
    /// device (VNI 42, 192.168.100.1 -> 192.168.100.2) on the underlay port.
    fn kernel_standin(&self) {
        let (va, ub) = (&self.va, &self.ub);
        self.must_in(SW, &["ip", "link", "add", "br0", "type", "bridge"]);
        self.must_in(SW, &["ip", "addr", "add", "192.168.100.1/24", "dev", ub]);
        self.must_in(
            SW,
            &words(&format!(
                "ip link add vxlan42 mtu 1450 type vxlan id {VNI} local {SNIC_PA} \
                 remote {HOST_B_PA} dstport 4789 dev {ub}"
            )),
        );
        for dev in ["vxlan42", va] {
            self.must_in(SW, &["ip", "link", "set", dev, "master", "br0"]);
        }
        for dev in ["vxlan42", "br0"] {
            self.must_in(SW, &["ip", "link", "set", dev, "up"]);
        }
    }

    /// `ping -c 3` from namespace `i` to `dst`; returns (success, output).
    fn ping(&self, i: usize, dst: &str) -> (bool, String) {
        let (ok, out, err) =
            run(10, &self.in_ns(i, &["ping", "-c", "3", "-i", "0.2", "-W", "1", dst]));
        (ok, format!("{out}{err}"))
    }

    /// One iperf3 TCP test: the server in namespace `server.0` bound to `server.1`, the client
    /// in `client.0` connecting to `client.1` for `secs` seconds with `extra` arguments (`-R`).
    /// Returns (bytes, bit/s) received.
    fn iperf(
        &mut self,
        label: &str,
        server: (usize, &str),
        client: (usize, &str),
        secs: u32,
        extra: &[&str],
    ) -> (f64, f64) {
        let ((si, bind), (ci, target)) = (server, client);
        let server = self.in_ns(si, &["iperf3", "-s", "-1", "-B", bind]);
        let sidx = self.spawn(&format!("iperf3-server-{label}"), secs + 15, &server);
        let t = secs.to_string();
        let mut args = vec!["iperf3", "-c", target, "-t", &t, "-J"];
        args.extend_from_slice(extra);
        let client = self.in_ns(ci, &args);
        iperf3_client(label, &client, secs + 10, &mut self.children[sidx], &self.dir)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        for c in &mut self.children {
            stop(c, Duration::from_secs(3));
        }
        for ns in &self.ns {
            let _ = run(10, &["ip", "netns", "del", ns]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether the test can run: false (after a note) when not root, or when root but a required
/// tool is missing and `CI` is unset. Panics when root, `CI` is set and any tool is missing.
fn can_run(required: &[&str], optional: &[&str]) -> bool {
    if !is_root() {
        note("skipping netns vswitch test: needs root");
        return false;
    }
    let missing: Vec<&str> =
        required.iter().chain(optional).copied().filter(|t| !have(t)).collect();
    if missing.is_empty() {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "CI is set but these tools are missing: {missing:?}");
    if required.iter().any(|t| missing.contains(t)) {
        note(&format!("skipping netns vswitch test: missing tools {missing:?}"));
        return false;
    }
    note(&format!(
        "netns vswitch test: missing optional tools {missing:?}; their steps are skipped"
    ));
    true
}

/// How long `snic run` may take to open its ports and answer on its control socket.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Fetch `snic stats` as JSON.
fn stats(snic: &str, sock: &str) -> Result<serde_json::Value, String> {
    let (ok, out, err) = run(5, &[snic, "stats", "--control", sock]);
    if !ok {
        return Err(err);
    }
    serde_json::from_str(out.trim()).map_err(|e| format!("snic stats is not JSON ({e}): {out}"))
}

/// `snic stats` once the run is quiet: the document is a snapshot refreshed every 100 ms from
/// counters each worker publishes every 100 ms, so one read right after a transfer may predate
/// its last packets. Reads until two documents at least 250 ms apart carry the same port
/// counters (at most about 5 s; then the last one, for the caller's checks to judge).
fn quiet_stats(snic: &str, sock: &str) -> serde_json::Value {
    let read = || stats(snic, sock).unwrap_or_else(|e| panic!("snic stats: {e}"));
    let at = |v: &serde_json::Value| v["elapsed_secs"].as_f64().unwrap_or(0.0);
    let mut last = read();
    for _ in 0..50 {
        thread::sleep(Duration::from_millis(100));
        let next = read();
        if at(&next) >= at(&last) + 0.25 {
            if next["ports"] == last["ports"] {
                return next;
            }
            last = next;
        }
    }
    last
}

/// Start `snic run` in the switch namespace with ports `pa` (the VM side) and `pb` (the
/// underlay), the vSwitch stage with the interop policy and a control socket, for `secs`
/// seconds; wait until it answers. Returns snic's path, the control socket's and snic's child
/// index.
fn start_vswitch(g: &mut Guard, pa: &str, pb: &str, secs: u32) -> (&'static str, String, usize) {
    let snic = env!("CARGO_BIN_EXE_snic");
    let sock = g.dir.join("ctl.sock");
    let sock = sock.to_str().expect("temp dir path is UTF-8").to_string();
    let cmd = vswitch_cmd(g, pa, pb, &sock, secs, &[]);
    let si = g.spawn("snic", secs + 5, &cmd);
    wait_ready(g, si, snic, &sock);
    (snic, sock, si)
}

/// The `snic run` command line of [`start_vswitch`], with `extra` arguments.
fn vswitch_cmd(
    g: &Guard,
    pa: &str,
    pb: &str,
    sock: &str,
    secs: u32,
    extra: &[&str],
) -> Vec<String> {
    let snic = env!("CARGO_BIN_EXE_snic");
    let dur = secs.to_string();
    let mut args = vec![
        snic,
        "run",
        "--port",
        pa,
        "--port",
        pb,
        "--stage",
        "parse",
        "--stage",
        "vswitch",
        "--policy",
        POLICY,
        "--control",
        sock,
        "--duration",
        &dur,
    ];
    args.extend_from_slice(extra);
    g.in_ns(SW, &args)
}

/// Wait until the `snic run` child `si` answers `snic stats` with real counters for both ports.
fn wait_ready(g: &mut Guard, si: usize, snic: &str, sock: &str) {
    let t0 = Instant::now();
    let mut last = String::new();
    loop {
        if let Ok(Some(status)) = g.children[si].try_wait() {
            panic!("snic run exited early ({status}); last stats: {last}\n{}", g.log("snic"));
        }
        match stats(snic, sock) {
            Ok(v) => {
                let ports = v["ports"]
                    .as_array()
                    .map_or(0, |p| p.iter().filter(|p| p["rx_packets"].is_u64()).count());
                if v.get("status").is_none() && ports == 2 {
                    return;
                }
                last = v.to_string();
            }
            Err(e) => last = e,
        }
        assert!(
            t0.elapsed() < READY_TIMEOUT,
            "snic run not ready within {READY_TIMEOUT:?}; last stats: {last}\n{}",
            g.log("snic")
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the running kernel is at least `major.minor`.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let rel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut it = rel.trim().split(['.', '-']).map(|x| x.parse::<u32>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0)) >= (major, minor)
}

/// The sum over the ports of counter `key` of a `snic stats` document (0 when absent).
fn port_sum(v: &serde_json::Value, key: &str) -> u64 {
    v["ports"].as_array().map_or(0, |p| p.iter().map(|p| p[key].as_u64().unwrap_or(0)).sum())
}

/// The `policy_deny` drop count of a `snic stats` document (0 when absent).
fn policy_denies(v: &serde_json::Value) -> u64 {
    v["drops"]["policy_deny"].as_u64().unwrap_or(0)
}

/// Not root-only: the policy file the interop test runs with is a valid policy of the shape the
/// test's topology assumes.
#[test]
fn interop_policy_file_is_valid() {
    use snic_vswitch::policy::{Action, LayerKind, TunnelKind};
    let p = snic_vswitch::policy::toml::load_policy(std::path::Path::new(POLICY))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.underlay.port, 1);
    assert_eq!(p.underlay.ip.to_string(), SNIC_PA);
    assert_eq!(p.underlay.mac, [2, 0, 0, 0, 1, 1]);
    assert_eq!(p.underlay.gateway_mac, [2, 0, 0, 0, 2, 2]);
    assert_eq!(p.vports.len(), 1);
    let v = &p.vports[0];
    assert_eq!((v.port, v.vni, v.mac), (0, VNI, [2, 0, 0, 0, 0, 0x0a]));
    assert_eq!(v.ips.iter().map(ToString::to_string).collect::<Vec<_>>(), [VM_A]);
    let kinds: Vec<LayerKind> = v.layers.iter().map(|l| l.kind).collect();
    assert_eq!(kinds, [LayerKind::Acl, LayerKind::Nat, LayerKind::Route, LayerKind::Vnet]);
    let vnet = &v.layers[3];
    assert_eq!(vnet.mappings.len(), 1);
    assert_eq!(vnet.mappings[0].ca.to_string(), HOST_B_CA);
    assert_eq!(vnet.mappings[0].pa.to_string(), HOST_B_PA);
    assert_eq!(vnet.mappings[0].mac, [2, 0, 0, 0, 0, 0x0b]);
    assert!(
        vnet.rules.iter().any(|r| r.action == Action::Encap { kind: TunnelKind::Vxlan, vni: VNI })
    );
    assert!(vnet.rules.iter().any(|r| r.action == Action::Decap));
    assert_eq!(v.layers[0].default, Action::Deny);
    assert!(
        v.layers[0]
            .rules
            .iter()
            .any(|r| r.action == Action::AllowStateful && r.predicates.is_empty())
    );
    assert!(
        matches!(&v.layers[1].rules[0].action, Action::Dnat { backends } if backends.len() == 1 && backends[0].0.to_string() == VM_A)
    );
}

#[test]
fn vswitch_interops_with_the_kernel_vxlan_device() {
    if !can_run(&["ip", "ping", "iperf3", "timeout", "kill", "sysctl"], &["ethtool", "tshark"]) {
        return;
    }
    let t_start = Instant::now();
    let mut g = Guard::create("sn", have("ethtool"), false);
    if !g.offloads_off {
        note("ethtool missing: TX offloads stay on (snic may see GSO super-packets)");
    }
    let (pa, pb) = (format!("afpacket:{}", g.va), format!("afpacket:{}", g.ub));
    let (snic, sock, si) = start_vswitch(&mut g, &pa, &pb, SNIC_SECS);

    // 1. ping both ways through the tunnel, with the underlay captured meanwhile.
    let pcap = g.dir.join("underlay.pcap");
    let pcap = pcap.to_str().expect("temp dir path is UTF-8").to_string();
    let capture = have("tshark").then(|| {
        let args =
            g.in_ns(HB, &["tshark", "-n", "-q", "-i", "eth0", "-f", "udp port 4789", "-w", &pcap]);
        let ci = g.spawn("tshark-capture", 20, &args);
        // Wait until the capture is on (dumpcap says so on stderr), at most 5 s.
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5)
            && !g.log("tshark-capture").contains("Capturing on")
        {
            thread::sleep(Duration::from_millis(50));
        }
        // The message comes a moment before packets are actually taken.
        thread::sleep(Duration::from_millis(500));
        ci
    });
    let (ok, out) = g.ping(VM, HOST_B_CA);
    assert!(
        ok,
        "ping vm-a -> host-b ({HOST_B_CA}) through the tunnel failed:\n{out}\n{}",
        g.log("snic")
    );
    let (ok, out) = g.ping(HB, VM_A);
    assert!(
        ok,
        "ping host-b -> vm-a ({VM_A}) through the tunnel failed:\n{out}\n{}",
        g.log("snic")
    );
    let mut vxlan_summary = String::from("skipped (no tshark)");
    if let Some(ci) = capture {
        thread::sleep(Duration::from_millis(300));
        stop(&mut g.children[ci], Duration::from_secs(3));
        vxlan_summary = check_capture(&g, &pcap);
    }

    // 2. iperf3 TCP, 5 s each way.
    let (fwd_bytes, fwd) = g.iperf("vm-a->host-b", (HB, HOST_B_CA), (VM, HOST_B_CA), 5, &[]);
    let (rev_bytes, rev) =
        g.iperf("host-b->vm-a (-R)", (HB, HOST_B_CA), (VM, HOST_B_CA), 5, &["-R"]);
    // Not a throughput target, a floor far below any working run (even unoptimized snic moves
    // hundreds of MB here): a tunnel that passes a handful of segments and then stalls fails.
    // With offloads on, GSO super-packets are refused by design (`transpose_failed`), so the
    // floor holds only when they are off.
    if g.offloads_off {
        for (what, bytes) in [("vm-a -> host-b", fwd_bytes), ("host-b -> vm-a", rev_bytes)] {
            assert!(
                bytes >= MIN_TUNNEL_BYTES,
                "iperf3 {what} through the tunnel moved only {bytes:.0} bytes in 5 s\n{}",
                g.log("snic")
            );
        }
    } else {
        note("offloads on: the tunnelled iperf3 runs may starve on refused GSO packets");
    }

    // 2b. vm-a's TX offloads ON: TSO super-packets are encapsulated and segmented by snic.
    let mut tso_summary = String::from("skipped (no ethtool)");
    if g.offloads_off {
        let transpose_failed =
            |v: &serde_json::Value| v["drops"]["transpose_failed"].as_u64().unwrap_or(0);
        let before = stats(snic, &sock).unwrap_or_else(|e| panic!("snic stats: {e}"));
        g.must_in(VM, &["ethtool", "-K", "eth0", "tx", "on", "tso", "on", "gso", "on"]);
        let (tso_bytes, tso) =
            g.iperf("vm-a->host-b (vm-a TSO on)", (HB, HOST_B_CA), (VM, HOST_B_CA), 5, &[]);
        let after = stats(snic, &sock).unwrap_or_else(|e| panic!("snic stats: {e}"));
        g.must_in(VM, &["ethtool", "-K", "eth0", "tx", "off", "tso", "off", "gso", "off"]);
        let failed = transpose_failed(&after).saturating_sub(transpose_failed(&before));
        // The veth underlay (AF_PACKET) takes no UDP-tunnel super-packets: the fallback, one
        // UDP GSO buffer per super-packet, is counted; nothing is segmented in software.
        let moved = |k: &str| port_sum(&after, k).saturating_sub(port_sum(&before, k));
        let (udp_gso, segmented) = (moved("tunnel_udp_gso"), moved("tunnel_segmented"));
        assert!(udp_gso > 0, "no tunnel_udp_gso count with vm-a's TSO on: {after}");
        assert_eq!(segmented, 0, "tunnelled super-packets segmented in software: {after}");
        // What snic received from vm-a meanwhile: frames larger than vm-a's MTU allows are
        // super-packets, so the run did exercise the tunnel TSO path.
        let rx0 = |v: &serde_json::Value, k: &str| v["ports"][0][k].as_u64().unwrap_or(0);
        let frames = rx0(&after, "rx_packets").saturating_sub(rx0(&before, "rx_packets"));
        let avg = rx0(&after, "rx_bytes").saturating_sub(rx0(&before, "rx_bytes")) as f64
            / frames.max(1) as f64;
        assert_eq!(
            failed,
            0,
            "{failed} transpose_failed drops with vm-a's TSO on: {after}\n{}",
            g.log("snic")
        );
        // Every iperf3 run so far was valid TCP: nothing may have been denied. (Issue 18: the
        // RSTs that trail a reset connection were denied as `tcp_invalid`, ~100 per TSO run.)
        assert_eq!(
            policy_denies(&after),
            0,
            "valid TCP denied by the vSwitch during the iperf3 runs: {after}\n{}",
            g.log("snic")
        );
        assert!(
            avg > 1450.0 + 14.0,
            "vm-a sent no super-packets with TSO on ({frames} frames, {avg:.0} bytes on \
             average): the run did not test tunnel TSO"
        );
        assert!(
            tso_bytes >= MIN_TUNNEL_BYTES,
            "iperf3 vm-a -> host-b with TSO on moved only {tso_bytes:.0} bytes in 5 s\n{}",
            g.log("snic")
        );
        tso_summary = format!(
            "{:.3} Gbit/s ({tso_bytes:.0} bytes; {frames} frames from vm-a, {avg:.0} bytes on \
             average; 0 transpose_failed; {udp_gso} as UDP GSO buffers; offloads off: \
             {:.3})",
            tso / 1e9,
            fwd / 1e9
        );
    }

    // 3. NAT: host-b's underlay address (not tunnelled) reaches the VIP, DNATed to vm-a.
    let (ok, out) = g.ping(HB, VIP);
    assert!(ok, "ping host-b -> VIP {VIP} (DNAT to {VM_A}) failed:\n{out}\n{}", g.log("snic"));
    // The replies come back from the VIP (the reverse translation), not from vm-a's address.
    assert!(
        out.contains(&format!("bytes from {VIP}:")) && !out.contains(VM_A),
        "the VIP's echo replies were not translated back to {VIP}:\n{out}"
    );
    let (nat_bytes, _) = g.iperf("host-b->VIP", (VM, VM_A), (HB, VIP), 2, &[]);
    assert!(
        nat_bytes >= MIN_TUNNEL_BYTES,
        "iperf3 to the VIP moved only {nat_bytes:.0} bytes in 2 s\n{}",
        g.log("snic")
    );

    // 4. ACL deny at run time: ICMP denied, counted, then allowed again.
    let ctl = |cmd: &str, args: &[&str]| {
        let mut v = vec![snic, "vswitch", cmd, "--control", &sock];
        v.extend_from_slice(args);
        run(10, &v)
    };
    let show_json = || {
        let (ok, out, err) = ctl("show", &["--json"]);
        assert!(ok, "snic vswitch show --json failed: {err}");
        serde_json::from_str::<serde_json::Value>(out.trim())
            .unwrap_or_else(|e| panic!("snic vswitch show --json is not JSON ({e}): {out}"))
    };
    let before = stats(snic, &sock).unwrap_or_else(|e| panic!("snic stats: {e}"));
    let sw_before = show_json()["fast"]["denied"].as_u64().unwrap_or(0);
    let deny =
        ["--vport", "0", "--layer", "acl", "id=1", "priority=1", "ip.proto=1", "action=deny"];
    let (ok, out, err) = ctl("add-rule", &deny);
    assert!(ok, "snic vswitch add-rule failed:\n{out}{err}");
    note(&format!("snic vswitch add-rule: {}", out.trim()));
    // Both directions: outbound (vm-a's echo requests) and inbound (host-b's, decapsulated
    // and then denied by the ACL layer, the last one inbound).
    for (from, to) in [(VM, HOST_B_CA), (HB, VM_A)] {
        let (ok, out) = g.ping(from, to);
        assert!(
            !ok && out.contains(" 0 received"),
            "ping {to} went through despite the ACL deny rule:\n{out}"
        );
    }
    let after = stats(snic, &sock).unwrap_or_else(|e| panic!("snic stats: {e}"));
    let denied = policy_denies(&after).saturating_sub(policy_denies(&before));
    assert!(denied >= 6, "fewer than 6 policy_deny drops for 2 x 3 denied pings: {after}");
    let sw_after = show_json()["fast"]["denied"].as_u64().unwrap_or(0);
    assert!(
        sw_after > sw_before,
        "snic vswitch show counted no denial ({sw_before} -> {sw_after})"
    );
    let (ok, show, err) = ctl("show", &[]);
    assert!(ok, "snic vswitch show failed: {err}");
    let (ok, out, err) = ctl("remove-rule", &["--vport", "0", "--layer", "acl", "--id", "1"]);
    assert!(ok, "snic vswitch remove-rule failed:\n{out}{err}");
    note(&format!("snic vswitch remove-rule: {}", out.trim()));
    for (from, to) in [(VM, HOST_B_CA), (HB, VM_A)] {
        let (ok, out) = g.ping(from, to);
        assert!(ok, "ping {to} failed after the deny rule was removed:\n{out}\n{}", g.log("snic"));
    }

    // 5. dump-flows lists the flows with their packet counts: some flow of host-b's CA has
    // served packets.
    let (ok, flows, err) = ctl("dump-flows", &[]);
    assert!(ok, "snic vswitch dump-flows failed: {err}");
    let (ok, json, err) = ctl("dump-flows", &["--json"]);
    assert!(ok, "snic vswitch dump-flows --json failed: {err}");
    let served: u64 = json
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|f| f["key"].as_str().is_some_and(|k| k.contains(HOST_B_CA)))
        .map(|f| f["packets"].as_u64().unwrap_or(0))
        .sum();
    assert!(served > 0, "dump-flows lists no flow of {HOST_B_CA} with packets:\n{flows}");

    // Final counters, then stop snic (it prints its own on exit).
    let end = stats(snic, &sock).unwrap_or_else(|e| panic!("snic stats: {e}"));
    stop(&mut g.children[si], Duration::from_secs(3));

    // 6. For scale: the kernel in snic's place (a bridge of the VM-side veth and a VXLAN device
    // on the underlay veth), same endpoints, same offload settings.
    g.kernel_standin();
    let (ok, out) = g.ping(VM, HOST_B_CA);
    assert!(ok, "ping through the kernel stand-in failed:\n{out}");
    let (_, kfwd) = g.iperf("kernel vm-a->host-b", (HB, HOST_B_CA), (VM, HOST_B_CA), 5, &[]);
    let (_, krev) =
        g.iperf("kernel host-b->vm-a (-R)", (HB, HOST_B_CA), (VM, HOST_B_CA), 5, &["-R"]);

    note(&format!("--- snic vswitch show (during the deny) ---\n{show}"));
    note(&format!("--- snic vswitch dump-flows ---\n{flows}"));
    note(&format!(
        "--- snic stats (end) ---\n{}",
        serde_json::to_string_pretty(&end).unwrap_or_default()
    ));
    note(&g.log("snic"));
    let secs = t_start.elapsed().as_secs_f64();
    let build = if cfg!(debug_assertions) { "debug (unoptimized)" } else { "optimized" };
    note(&format!(
        "summary ({secs:.1} s; snic build: {build}; TX offloads off: {}):\n\
         \x20 ping vm-a -> host-b and host-b -> vm-a through VXLAN {VNI}: ok\n\
         \x20 underlay capture: {vxlan_summary}\n\
         \x20 iperf3 TCP through snic: vm-a -> host-b {:.3} Gbit/s, host-b -> vm-a {:.3} Gbit/s\n\
         \x20 iperf3 vm-a -> host-b with vm-a's TSO/GSO/checksum offload on: {tso_summary}\n\
         \x20 NAT: ping {VIP} ok, {nat_bytes:.0} TCP bytes to {VIP} (DNAT to {VM_A})\n\
         \x20 ACL deny of ICMP: ping failed both ways, {denied} policy_deny drops; \
         ok again after removal\n\
         \x20 dump-flows: {served} packets on flows of {HOST_B_CA}\n\
         \x20 kernel bridge + VXLAN in snic's place: {:.3} / {:.3} Gbit/s \
         (snic/kernel {:.3} / {:.3})",
        g.offloads_off,
        fwd / 1e9,
        rev / 1e9,
        kfwd / 1e9,
        krev / 1e9,
        fwd / kfwd.max(1.0),
        rev / krev.max(1.0),
    ));
    drop(g);
}

/// Decode the underlay capture with tshark (checksums verified): it must hold VXLAN packets both
/// ways, all with VNI 42 and none malformed; the packets snic sent (outer source 192.168.100.1)
/// must have no bad IP, UDP, TCP or ICMP checksum, outer or inner. (host-b's own packets are
/// taken at its transmit side, where checksums still left to offload look bad.) Returns a
/// one-line summary.
fn check_capture(g: &Guard, pcap: &str) -> String {
    let fields = [
        "vxlan.vni",
        "_ws.malformed",
        "ip.src",
        "ip.checksum.status",
        "udp.checksum.status",
        "tcp.checksum.status",
        "icmp.checksum.status",
    ];
    let mut args = vec!["tshark", "-n", "-r", pcap, "-T", "fields"];
    for o in ["ip.check_checksum:TRUE", "udp.check_checksum:TRUE", "tcp.check_checksum:TRUE"] {
        args.extend(["-o", o]);
    }
    for f in fields {
        args.extend(["-e", f]);
    }
    let (ok, out, err) = run(20, &args);
    assert!(ok, "tshark could not read the underlay capture: {err}\n{}", g.log("tshark-capture"));
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        !lines.is_empty(),
        "no VXLAN packet captured on host-b's underlay\n{}",
        g.log("tshark-capture")
    );
    let (mut from_snic, mut from_host_b) = (0, 0);
    for l in &lines {
        let cols: Vec<&str> = l.split('\t').collect();
        let col = |i: usize| cols.get(i).copied().unwrap_or("");
        assert_eq!(
            col(0),
            VNI.to_string(),
            "a captured packet has VNI {:?}, not {VNI}:\n{out}",
            col(0)
        );
        assert!(col(1).is_empty(), "tshark found a malformed packet:\n{out}");
        if col(2).split(',').next() != Some(SNIC_PA) {
            from_host_b += 1;
            continue;
        }
        from_snic += 1;
        for (i, name) in fields.iter().enumerate().skip(3) {
            // Status 0 is "bad" (1 good, 2 unverified, 3 not present).
            assert!(
                !col(i).split(',').any(|s| s == "0"),
                "tshark found a bad {name} in a captured packet:\n{out}"
            );
        }
    }
    let (_, text, _) = run(20, &["tshark", "-n", "-r", pcap, "-c", "6"]);
    note(&format!("--- underlay capture on host-b (first packets) ---\n{text}"));
    assert!(
        from_snic > 0 && from_host_b > 0,
        "the capture lacks a direction ({from_snic} from snic, {from_host_b} from host-b):\n{out}"
    );
    format!(
        "{from_snic} VXLAN packets from snic, {from_host_b} from host-b, all VNI {VNI}, none \
         malformed, no bad checksum in snic's"
    )
}

/// Tunnel GSO end to end: snic's underlay is a TAP device (moved into host-b's namespace, snic
/// keeps its descriptor) that negotiated UDP-tunnel GSO. With vm-a's TSO on, its super-packets
/// are encapsulated and written whole: nothing is segmented in software (`tunnel_segmented`
/// stays 0), the frames snic sends on the underlay are larger than any MTU-sized frame, and
/// host-b's kernel (its VXLAN device, then TCP) receives the data. Skipped (with a note) on
/// kernels without UDP-tunnel GSO on TAP (before 6.17), where snic falls back to the 10-byte
/// header.
#[test]
fn vswitch_super_packets_cross_a_tap_underlay_whole() {
    if !can_run(&["ip", "ping", "iperf3", "timeout", "kill", "sysctl", "ethtool"], &[]) {
        return;
    }
    let mut g = Guard::create("fpt", true, true);
    let (pa, pb) = (format!("afpacket:{}", g.va), format!("tap:{}", g.ub));
    let (snic, sock, _) = start_vswitch(&mut g, &pa, &pb, 40);
    g.tap_to_host_b(true);
    let (ok, out) = g.ping(VM, HOST_B_CA);
    assert!(ok, "ping vm-a -> host-b through the TAP underlay failed:\n{out}\n{}", g.log("snic"));
    let before = stats(snic, &sock).unwrap_or_else(|e| panic!("snic stats: {e}"));
    g.must_in(VM, &["ethtool", "-K", "eth0", "tx", "on", "tso", "on", "gso", "on"]);
    let (bytes, bps) =
        g.iperf("vm-a->host-b over TAP (TSO on)", (HB, HOST_B_CA), (VM, HOST_B_CA), 3, &[]);
    let after = stats(snic, &sock).unwrap_or_else(|e| panic!("snic stats: {e}"));
    let tx1 = |v: &serde_json::Value, k: &str| v["ports"][1][k].as_u64().unwrap_or(0);
    let frames = tx1(&after, "tx_packets").saturating_sub(tx1(&before, "tx_packets"));
    let avg = tx1(&after, "tx_bytes").saturating_sub(tx1(&before, "tx_bytes")) as f64
        / frames.max(1) as f64;
    let segmented = port_sum(&after, "tunnel_segmented");
    note(&format!(
        "TAP underlay, TSO on: {:.3} Gbit/s, {bytes:.0} bytes; {frames} frames out of the \
         underlay, {avg:.0} bytes on average; {segmented} segmented in software\n{}",
        bps / 1e9,
        g.log("snic")
    ));
    if !kernel_at_least(6, 17) {
        note("skipping the whole-super-packet checks: TAP UDP-tunnel GSO needs Linux 6.17+");
        return;
    }
    assert_eq!(segmented, 0, "tunnelled super-packets were segmented: {after}");
    assert!(
        avg > 1518.0,
        "no super-packet left the TAP underlay whole ({avg:.0} bytes on average)"
    );
    assert!(bytes >= MIN_TUNNEL_BYTES, "only {bytes:.0} bytes crossed in 3 s\n{}", g.log("snic"));
    assert_eq!(after["drops"]["transpose_failed"].as_u64().unwrap_or(0), 0, "{after}");
}

/// Bytes each checked transfer of [`vswitch_super_packets_cross_a_veth_underlay_as_udp_gso`]
/// moves.
const XFER_BYTES: usize = 4 << 20;

/// A python3 TCP server for namespace `HB`: accepts one connection on `HOST_B_CA:port`, reads
/// to the end and prints the byte count and SHA-256 of what it read.
fn sink_script(port: u16) -> String {
    format!(
        "import hashlib,socket\n\
         s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
         s.bind(('{HOST_B_CA}',{port})); s.listen(1); s.settimeout(20)\n\
         c,_=s.accept(); c.settimeout(20); h=hashlib.sha256(); n=0\n\
         while True:\n\
         \x20   b=c.recv(1<<16)\n\
         \x20   if not b: break\n\
         \x20   h.update(b); n+=len(b)\n\
         print(n,h.hexdigest(),flush=True)\n"
    )
}

/// A python3 TCP client for namespace `VM`: sends [`XFER_BYTES`] pseudo-random bytes (seed
/// `seed`) to `HOST_B_CA:port` and prints the byte count and SHA-256 of what it sent.
fn source_script(port: u16, seed: u32) -> String {
    format!(
        "import hashlib,random,socket\n\
         d=random.Random({seed}).randbytes({XFER_BYTES})\n\
         c=socket.create_connection(('{HOST_B_CA}',{port}),timeout=20)\n\
         c.sendall(d); c.shutdown(socket.SHUT_WR); c.recv(1)\n\
         print(len(d),hashlib.sha256(d).hexdigest(),flush=True)\n"
    )
}

/// Send [`XFER_BYTES`] from vm-a to host-b through the tunnel and check host-b received
/// exactly what vm-a sent (count and SHA-256).
fn checked_transfer(g: &mut Guard, label: &str, port: u16, seed: u32) {
    let server = g.in_ns(HB, &["python3", "-c", &sink_script(port)]);
    let si = g.spawn(&format!("sink-{label}"), 30, &server);
    let client = g.in_ns(VM, &["python3", "-c", &source_script(port, seed)]);
    let mut result = (false, String::new(), String::new());
    for _ in 0..20 {
        // The server needs a moment to listen; retry only while it refuses connections.
        thread::sleep(Duration::from_millis(250));
        result = run(30, &client);
        if result.0 || !result.2.contains("ConnectionRefused") {
            break;
        }
    }
    let (ok, sent, err) = result;
    assert!(ok, "the {label} transfer failed: {err}\n{}", g.log("snic"));
    let t0 = Instant::now();
    while g.children[si].try_wait().ok().flatten().is_none()
        && t0.elapsed() < Duration::from_secs(10)
    {
        thread::sleep(Duration::from_millis(50));
    }
    let got = std::fs::read_to_string(g.dir.join(format!("sink-{label}.out"))).unwrap_or_default();
    assert_eq!(
        got.trim(),
        sent.trim(),
        "host-b did not receive what vm-a sent ({label})\n{}\n{}",
        g.log(&format!("sink-{label}")),
        g.log("snic")
    );
}

/// The AF_PACKET fallback of tunnel GSO, end to end over a veth underlay with the kernel's VXLAN
/// device on host-b. With vm-a's TSO on, each encapsulated super-packet leaves snic as one UDP
/// GSO buffer (`tunnel_udp_gso` moves, `tunnel_segmented` and the transmit drops do not, the
/// underlay frames are larger than any MTU-sized one) and host-b receives exactly the bytes
/// vm-a sent:
/// 1. with the underlay veth's UDP segmentation on, the buffers cross the veth whole and
///    host-b's kernel cuts them (its VXLAN socket takes no UDP GSO);
/// 2. with it and TX checksumming off on snic's underlay veth, the kernel cuts them at snic's
///    side and computes the outer UDP checksums; host-b's capture, decoded by `tshark`, shows
///    every datagram from snic well formed with good outer IPv4, outer UDP and inner TCP
///    checksums (the capture step needs `tshark`; it is skipped with a note without it, unless
///    `CI` is set).
#[test]
fn vswitch_super_packets_cross_a_veth_underlay_as_udp_gso() {
    if !can_run(&["ip", "ping", "timeout", "kill", "sysctl", "ethtool", "python3"], &["tshark"]) {
        return;
    }
    let mut g = Guard::create("htg", true, false);
    let (pa, pb) = (format!("afpacket:{}", g.va), format!("afpacket:{}", g.ub));
    let (snic, sock, _) = start_vswitch(&mut g, &pa, &pb, 40);
    let (ok, out) = g.ping(VM, HOST_B_CA);
    assert!(ok, "ping vm-a -> host-b through the veth underlay failed:\n{out}\n{}", g.log("snic"));
    g.must_in(VM, &["ethtool", "-K", "eth0", "tx", "on", "tso", "on", "gso", "on"]);
    let tx1 = |v: &serde_json::Value, k: &str| v["ports"][1][k].as_u64().unwrap_or(0);
    let tx_drops = |v: &serde_json::Value| {
        v["ports"].as_array().map_or(String::new(), |p| {
            p.iter().map(|p| p["tx_drops"].to_string()).collect::<Vec<_>>().join(" ")
        })
    };
    let check_moved = |label: &str, before: &serde_json::Value, after: &serde_json::Value| {
        let moved = |k: &str| port_sum(after, k).saturating_sub(port_sum(before, k));
        assert!(moved("tunnel_udp_gso") > 0, "{label}: no tunnel_udp_gso count: {after}");
        assert_eq!(moved("tunnel_segmented"), 0, "{label}: segmented in software: {after}");
        assert_eq!(tx_drops(after), tx_drops(before), "{label}: transmit drops: {after}");
        let frames = tx1(after, "tx_packets").saturating_sub(tx1(before, "tx_packets"));
        let avg = tx1(after, "tx_bytes").saturating_sub(tx1(before, "tx_bytes")) as f64
            / frames.max(1) as f64;
        assert!(avg > 1518.0, "{label}: no UDP GSO buffer left snic ({avg:.0} bytes on average)");
        note(&format!(
            "{label}: {} super-packets as UDP GSO buffers, {frames} writes to the underlay, \
             {avg:.0} bytes on average",
            moved("tunnel_udp_gso")
        ));
    };

    // 1. The buffers cross the veth whole; host-b's kernel cuts them.
    let before = stats(snic, &sock).unwrap_or_else(|e| panic!("snic stats: {e}"));
    checked_transfer(&mut g, "whole", 5301, 1);
    let after = quiet_stats(snic, &sock);
    check_moved("buffers crossing the veth whole", &before, &after);

    // 2. The kernel cuts them at snic's side, with full checksums, under host-b's capture.
    g.must_in(SW, &["ethtool", "-K", &g.ub, "tx-udp-segmentation", "off", "tx", "off"]);
    let pcap = g.dir.join("udp-gso.pcap");
    let pcap = pcap.to_str().expect("temp dir path is UTF-8").to_string();
    let capture = have("tshark").then(|| {
        let args = g.in_ns(
            HB,
            &["tshark", "-n", "-q", "-i", "eth0", "-f", "udp port 4789", "-c", "3000", "-w", &pcap],
        );
        let ci = g.spawn("tshark-capture", 25, &args);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5)
            && !g.log("tshark-capture").contains("Capturing on")
        {
            thread::sleep(Duration::from_millis(50));
        }
        thread::sleep(Duration::from_millis(500));
        ci
    });
    let before = stats(snic, &sock).unwrap_or_else(|e| panic!("snic stats: {e}"));
    checked_transfer(&mut g, "cut", 5302, 2);
    let after = quiet_stats(snic, &sock);
    check_moved("buffers cut at snic's side", &before, &after);
    match capture {
        Some(ci) => {
            thread::sleep(Duration::from_millis(300));
            stop(&mut g.children[ci], Duration::from_secs(3));
            note(&check_capture(&g, &pcap));
        }
        None => note("tshark missing: the capture check of the cut datagrams is skipped"),
    }
    assert_eq!(after["drops"]["transpose_failed"].as_u64().unwrap_or(0), 0, "{after}");
}

/// The sum of every drop reason of a `snic stats` document.
fn all_drops(v: &serde_json::Value) -> u64 {
    v["drops"].as_object().map_or(0, |m| m.values().filter_map(serde_json::Value::as_u64).sum())
}

/// `snic vswitch show --json` of the run on `sock`.
fn vswitch_show(snic: &str, sock: &str) -> serde_json::Value {
    let (ok, out, err) = run(5, &[snic, "vswitch", "show", "--control", sock, "--json"]);
    assert!(ok, "snic vswitch show failed: {err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("show is not JSON ({e}): {out}"))
}

/// Issue 19's fast-path restart between namespaces: an `iperf3` TCP stream vm-a -> host-b
/// through the tunnel; 2 s in, `snic vswitch restart-fastpath --hold-ms 300` drops the flow
/// tables and the slow path carries every packet for 300 ms. The stream completes with no
/// reset, snic drops nothing meanwhile (no drop reason moves), no connection is closed or
/// found invalid by the slow path, the window's packets are counted as served by the slow path
/// and the connection is cached again afterwards. The lowest 100 ms throughput around the
/// restart and iperf3's retransmits are printed, not asserted.
#[test]
fn fastpath_restart_under_iperf3_load_resets_nothing() {
    if !can_run(&["ip", "ping", "iperf3", "timeout", "kill", "sysctl"], &["ethtool"]) {
        return;
    }
    let mut g = Guard::create("hs", have("ethtool"), false);
    let (pa, pb) = (format!("afpacket:{}", g.va), format!("afpacket:{}", g.ub));
    let (snic, sock, _si) = start_vswitch(&mut g, &pa, &pb, 40);
    let (ok, out) = g.ping(VM, HOST_B_CA);
    assert!(ok, "ping through the tunnel failed:\n{out}\n{}", g.log("snic"));
    let server = g.in_ns(HB, &["iperf3", "-s", "-1", "-B", HOST_B_CA]);
    g.spawn("iperf3-server", 30, &server);
    thread::sleep(Duration::from_millis(500));
    let client = g.in_ns(VM, &["iperf3", "-c", HOST_B_CA, "-t", "5", "-i", "0.1", "-J"]);
    let ci = g.spawn("iperf3-client", 25, &client);
    thread::sleep(Duration::from_secs(2));
    let before = stats(snic, &sock).unwrap_or_else(|e| panic!("snic stats: {e}"));
    let sw0 = vswitch_show(snic, &sock);
    let (ok, out, err) = run(
        10,
        &[snic, "vswitch", "restart-fastpath", "--control", &sock, "--hold-ms", "300", "--json"],
    );
    assert!(ok, "restart-fastpath failed: {err}{out}\n{}", g.log("snic"));
    let r: serde_json::Value = serde_json::from_str(out.trim()).expect("JSON answer");
    assert_eq!(r["restarts"], 1, "{r}");
    assert!(r["flushed"].as_u64().unwrap_or(0) >= 2, "the stream's flows were cached: {r}");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = g.children[ci].try_wait().expect("iperf3 client") {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "iperf3 did not finish");
        thread::sleep(Duration::from_millis(100));
    };
    let log = g.log("iperf3-client");
    assert!(status.success(), "iperf3 failed (a reset?):\n{log}\n{}", g.log("snic"));
    let after = stats(snic, &sock).unwrap_or_else(|e| panic!("snic stats: {e}"));
    let sw1 = vswitch_show(snic, &sock);
    let json = std::fs::read_to_string(g.dir.join("iperf3-client.out")).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&json).expect("iperf3 -J output is JSON");
    assert!(v.get("error").is_none(), "iperf3: {}", v["error"]);
    let bytes = v["end"]["sum_received"]["bytes"].as_f64().unwrap_or(0.0);
    assert!(bytes >= MIN_TUNNEL_BYTES, "the stream moved only {bytes} bytes");
    // Zero drops at snic across the restart, whatever the reason.
    assert_eq!(
        all_drops(&after),
        all_drops(&before),
        "snic dropped packets across the restart: before {}\nafter {}",
        before["drops"],
        after["drops"]
    );
    // The connections: none closed, none invalid, none new but iperf3's own (none here).
    let slow = |v: &serde_json::Value, k: &str| v["slow"][k].as_u64().unwrap_or(u64::MAX);
    for k in ["closed", "tcp_invalid", "half_open_rejected"] {
        assert_eq!(slow(&sw1, k), slow(&sw0, k), "slow path {k} moved: {}", sw1["slow"]);
    }
    let fast = |v: &serde_json::Value, k: &str| v["fast"][k].as_u64().unwrap_or(u64::MAX);
    assert!(fast(&sw1, "slow_served") > 0, "the slow path served the window: {}", sw1["fast"]);
    assert_eq!(fast(&sw1, "flushed"), r["flushed"].as_u64().unwrap_or(0));
    for k in ["exception_overflow", "denied", "transpose_errors"] {
        assert_eq!(fast(&sw1, k), fast(&sw0, k), "{k} moved: {}", sw1["fast"]);
    }
    assert!(
        fast(&sw1, "installs") > fast(&sw0, "installs"),
        "flows were compiled into the new tables: {}",
        sw1["fast"]
    );
    assert_eq!((sw1["restarts"].as_u64(), sw1["fastpath"].as_str()), (Some(1), Some("on")));
    // Printed, not asserted: the 100 ms intervals around the restart and the retransmits.
    let ivals: Vec<f64> = v["intervals"]
        .as_array()
        .map(|a| a.iter().filter_map(|i| i["sum"]["bits_per_second"].as_f64()).collect())
        .unwrap_or_default();
    let around: Vec<f64> = ivals.iter().skip(19).take(6).copied().collect();
    let median = {
        let mut s = ivals.clone();
        s.sort_by(f64::total_cmp);
        s.get(s.len() / 2).copied().unwrap_or(0.0)
    };
    note(&format!(
        "fast-path restart under iperf3: {bytes:.0} bytes, retransmits {}, median 100 ms \
         interval {:.3} Gbit/s, intervals 1.9-2.5 s {:?} Gbit/s, slow path served {} packets, \
         {} flows dropped, snic drops +0",
        v["end"]["sum_sent"]["retransmits"],
        median / 1e9,
        around.iter().map(|b| (b / 1e7).round() / 100.0).collect::<Vec<_>>(),
        fast(&sw1, "slow_served"),
        r["flushed"]
    ));
}

/// The pid of the one child of process `pid` (snic under `timeout`).
fn only_child(pid: u32) -> u32 {
    let path = format!("/proc/{pid}/task/{pid}/children");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let kids: Vec<u32> = text.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    assert_eq!(kids.len(), 1, "{path}: {text:?}");
    kids[0]
}

/// Send SIGHUP to `pid` and wait until `snic stats` shows reload number `n` done; returns the
/// `reload` object.
fn sighup(snic: &str, sock: &str, pid: u32, n: u64) -> serde_json::Value {
    must(5, &["kill", "-HUP", &pid.to_string()]);
    let t0 = Instant::now();
    loop {
        let v = stats(snic, sock).unwrap_or_else(|e| panic!("snic stats: {e}"));
        if v["reload"]["requests"].as_u64() == Some(n) {
            return v["reload"].clone();
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "reload {n} not done: {}", v["reload"]);
        thread::sleep(Duration::from_millis(100));
    }
}

/// Issue 19's configuration reload: `snic run --config FILE` between namespaces. SIGHUP after
/// the policy file gained an ACL rule denying ICMP: pings fail and are counted as denied. SIGHUP
/// after the run file's port list changed and the policy went back: the policy is applied (pings
/// work again), the port change is reported and not applied (still two ports). SIGHUP with a
/// run file that does not parse: refused and reported, nothing changes.
#[test]
fn sighup_reloads_the_policy_and_reports_what_it_cannot_change() {
    if !can_run(&["ip", "ping", "timeout", "kill", "sysctl"], &["ethtool"]) {
        return;
    }
    let mut g = Guard::create("hr", have("ethtool"), false);
    let policy_text = std::fs::read_to_string(POLICY).expect("interop policy");
    let policy = g.dir.join("policy.toml");
    std::fs::write(&policy, &policy_text).unwrap();
    let config = g.dir.join("run.toml");
    let (va, ub) = (g.va.clone(), g.ub.clone());
    let run_toml = |extra_port: &str| {
        format!(
            "ports = [\"afpacket:{}\", \"afpacket:{}\"{extra_port}]\nstages = [\"parse\", \
             \"vswitch\"]\n\n[vswitch]\npolicy = \"{}\"\n",
            va,
            ub,
            policy.display()
        )
    };
    std::fs::write(&config, run_toml("")).unwrap();
    let snic = env!("CARGO_BIN_EXE_snic");
    let sock = g.dir.join("ctl.sock").to_str().expect("UTF-8 path").to_string();
    let cfg = config.to_str().expect("UTF-8 path").to_string();
    let cmd = g.in_ns(SW, &[snic, "run", "--config", &cfg, "--control", &sock, "--duration", "40"]);
    let si = g.spawn("snic", 45, &cmd);
    wait_ready(&mut g, si, snic, &sock);
    let pid = only_child(g.children[si].id());
    let (ok, out) = g.ping(VM, HOST_B_CA);
    assert!(ok, "ping through the tunnel failed:\n{out}\n{}", g.log("snic"));
    let gen0 = vswitch_show(snic, &sock)["generation"].as_u64().unwrap_or(0);

    // 1. The policy file denies ICMP now.
    let rule = "{ id = 100, priority = 100, action = \"allow-stateful\" },";
    assert!(policy_text.contains(rule), "the interop policy's ACL rule");
    let deny = format!(
        "{{ id = 1, priority = 1, match = {{ \"ip.proto\" = 1 }}, action = \"deny\" }},\n    {rule}"
    );
    std::fs::write(&policy, policy_text.replace(rule, &deny)).unwrap();
    let before = stats(snic, &sock).unwrap_or_else(|e| panic!("snic stats: {e}"));
    let r = sighup(snic, &sock, pid, 1);
    assert_eq!((r["ok"].as_u64(), r["failed"].as_u64()), (Some(1), Some(0)), "{r}");
    assert_eq!(r["applied"][0], format!("vswitch.policy (generation {})", gen0 + 1), "{r}");
    assert_eq!(r["not_applied"], serde_json::json!([]), "{r}");
    let (ok, out) = g.ping(VM, HOST_B_CA);
    assert!(!ok && out.contains(" 0 received"), "ping went through the reloaded deny:\n{out}");
    let after = stats(snic, &sock).unwrap_or_else(|e| panic!("snic stats: {e}"));
    assert!(policy_denies(&after) >= policy_denies(&before) + 3, "{}", after["drops"]);

    // 2. A third port in the run file and the policy back as it was.
    std::fs::write(&config, run_toml(", \"null\"")).unwrap();
    std::fs::write(&policy, &policy_text).unwrap();
    let r = sighup(snic, &sock, pid, 2);
    assert_eq!((r["ok"].as_u64(), r["failed"].as_u64()), (Some(2), Some(0)), "{r}");
    assert_eq!(r["applied"][0], format!("vswitch.policy (generation {})", gen0 + 2), "{r}");
    assert_eq!(r["not_applied"], serde_json::json!(["ports"]), "{r}");
    let (ok, out) = g.ping(VM, HOST_B_CA);
    assert!(ok, "ping failed after the policy went back:\n{out}");
    let v = stats(snic, &sock).unwrap_or_else(|e| panic!("snic stats: {e}"));
    assert_eq!(v["ports"].as_array().map(Vec::len), Some(2), "the ports stayed as they were");

    // 3. A run file that does not parse: refused, nothing changes.
    std::fs::write(&config, "ports = [\n").unwrap();
    let r = sighup(snic, &sock, pid, 3);
    assert_eq!((r["ok"].as_u64(), r["failed"].as_u64()), (Some(2), Some(1)), "{r}");
    assert!(r["error"].as_str().is_some_and(|e| !e.is_empty()), "{r}");
    assert_eq!(vswitch_show(snic, &sock)["generation"].as_u64(), Some(gen0 + 2));
    let (ok, out) = g.ping(VM, HOST_B_CA);
    assert!(ok, "ping failed after a refused reload:\n{out}");
    assert!(g.log("snic").contains("reload (SIGHUP) refused"), "{}", g.log("snic"));
}

/// Wait (at most `secs`) for child `i` to exit; its status.
fn wait_child(g: &mut Guard, i: usize, label: &str, secs: u64) -> std::process::ExitStatus {
    match common::netns::exit_within(&mut g.children[i], Duration::from_secs(secs)) {
        Some(s) => s,
        None => panic!("{label} did not finish in {secs} s:\n{}", g.log(label)),
    }
}

/// The hitless upgrade (`snic run --takeover`): while an iperf3 TCP stream and an RDMA WRITE
/// stream (two `snic rdma` processes, 64 KiB messages, data verified) cross the vSwitch, a new
/// `snic run` takes over the running one's AF_PACKET sockets and vSwitch state; the old one
/// exits. Both streams finish: the TCP connection is not reset, the RDMA data is verified,
/// and no connection of the vSwitch was closed or judged invalid. The gap is printed.
#[test]
fn takeover_under_tcp_and_rdma_load_resets_nothing() {
    if !can_run(&["ip", "ping", "iperf3", "timeout", "kill", "sysctl"], &["ethtool"]) {
        return;
    }
    let mut g = Guard::create("tk", have("ethtool"), false);
    let (pa, pb) = (format!("afpacket:{}", g.va), format!("afpacket:{}", g.ub));
    let (snic, sock, si) = start_vswitch(&mut g, &pa, &pb, 60);
    let (ok, out) = g.ping(VM, HOST_B_CA);
    assert!(ok, "ping through the tunnel failed:\n{out}\n{}", g.log("snic"));
    let server = g.in_ns(HB, &["iperf3", "-s", "-1", "-B", HOST_B_CA]);
    g.spawn("iperf3-server", 40, &server);
    let rdma_server = g.in_ns(HB, &[snic, "rdma", "write", "--server", "--timeout", "40"]);
    let rs = g.spawn("rdma-server", 45, &rdma_server);
    thread::sleep(Duration::from_millis(500));
    let client = g.in_ns(VM, &["iperf3", "-c", HOST_B_CA, "-t", "6", "-i", "0.2", "-J"]);
    let ci = g.spawn("iperf3-client", 30, &client);
    let rdma_client = g.in_ns(
        VM,
        &[
            snic,
            "rdma",
            "write",
            "--client",
            HOST_B_CA,
            "-s",
            "65536",
            "-n",
            "4000",
            "--timeout",
            "40",
        ],
    );
    let rc = g.spawn("rdma-client", 45, &rdma_client);
    thread::sleep(Duration::from_secs(2));
    let sw0 = vswitch_show(snic, &sock);
    assert!(
        g.children[rc].try_wait().expect("rdma client").is_none(),
        "the RDMA stream ended before the takeover:\n{}",
        g.log("rdma-client")
    );
    // A takeover the new process refuses (another worker count): the old one carries on.
    let refused = vswitch_cmd(&g, &pa, &pb, &sock, 60, &["--takeover", &sock, "--workers", "2"]);
    let (ok, out, err) = run(30, &refused);
    assert!(!ok, "a takeover with another worker count was refused: {out}{err}");
    assert!(err.contains("same --workers"), "{err}");
    assert!(g.children[si].try_wait().expect("snic").is_none(), "{}", g.log("snic"));
    assert!(g.log("snic").contains("takeover failed, carrying on"), "{}", g.log("snic"));
    let (ok, out) = g.ping(VM, HOST_B_CA);
    assert!(ok, "ping after a refused takeover:\n{out}\n{}", g.log("snic"));
    let new = vswitch_cmd(&g, &pa, &pb, &sock, 60, &["--takeover", &sock]);
    let ni = g.spawn("snic-new", 65, &new);
    let old = wait_child(&mut g, si, "snic", 20);
    let old_log = g.log("snic");
    assert!(old.success(), "the old snic failed:\n{old_log}\n{}", g.log("snic-new"));
    assert!(old_log.contains("handed over"), "{old_log}\n{}", g.log("snic-new"));
    // The new process answers on the same control socket, with its takeover report.
    let t0 = Instant::now();
    let takeover = loop {
        if let Ok(v) = stats(snic, &sock)
            && v["takeover"].is_object()
        {
            break v["takeover"].clone();
        }
        if let Ok(Some(s)) = g.children[ni].try_wait() {
            panic!("the new snic exited ({s}):\n{}", g.log("snic-new"));
        }
        assert!(t0.elapsed() < READY_TIMEOUT, "no takeover report:\n{}", g.log("snic-new"));
        thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(takeover["ports_adopted"], 2, "{takeover}");
    // iperf3's control and data connections and the RDMA benchmark's TCP one, at least.
    assert!(takeover["vswitch"]["tcp_connections"].as_u64() >= Some(3), "{takeover}");
    assert!(takeover["gap_ms"].as_f64().is_some(), "{takeover}");
    let status = wait_child(&mut g, ci, "iperf3-client", 25);
    let (v, bytes) = iperf3_report(&g.dir, "iperf3-client", status, &g.log("snic-new"));
    assert!(bytes >= MIN_TUNNEL_BYTES, "the stream moved only {bytes} bytes");
    let rdma = wait_child(&mut g, rc, "rdma-client", 40);
    let rlog = g.log("rdma-client");
    assert!(rdma.success(), "the RDMA client failed:\n{rlog}\n{}", g.log("rdma-server"));
    assert!(rlog.contains("data verified: OK"), "{rlog}");
    assert!(wait_child(&mut g, rs, "rdma-server", 10).success(), "{}", g.log("rdma-server"));
    // The vSwitch's connections came over: none judged invalid or refused as half-open (the
    // streams' own ends close connections, so `closed` may move).
    let sw1 = vswitch_show(snic, &sock);
    let slow = |v: &serde_json::Value, k: &str| v["slow"][k].as_u64().unwrap_or(u64::MAX);
    for k in ["tcp_invalid", "half_open_rejected", "denied"] {
        assert_eq!(slow(&sw1, k), slow(&sw0, k), "slow path {k} moved: {}", sw1["slow"]);
    }
    let after = stats(snic, &sock).unwrap_or_else(|e| panic!("snic stats: {e}"));
    note(&format!(
        "takeover under iperf3 + RDMA WRITE: gap {} ms, {takeover}; iperf3 {bytes:.0} bytes, \
         retransmits {}; new process drops {} ({})",
        takeover["gap_ms"],
        v["end"]["sum_sent"]["retransmits"],
        all_drops(&after),
        after["drops"]
    ));
}
