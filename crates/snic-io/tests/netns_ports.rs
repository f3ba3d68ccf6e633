//! Real-interface test of the AF_PACKET port (root only; skipped otherwise).
//!
//! Two network namespaces, each with a veth pair whose outer end stays in the root namespace;
//! kernel default offloads stay on. A forwarding thread moves batches between two
//! [`AfPacketPort`]s on the outer ends. The test checks that ping crosses, that TCP super-packets
//! arrive with virtio-net GSO metadata and leave as super-packets, and that a 4 MiB TCP transfer
//! arrives intact (SHA-256 compared on both sides).

use snic_io::Port;
use snic_io::afpacket::{AfPacketOptions, AfPacketPort};
use snic_io::tap::TapPort;
use snic_pipeline::{Batch, offload};
use snic_time::Instant;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

/// Run `args` under `timeout`, returning (success, stdout).
fn run(secs: u32, args: &[&str]) -> (bool, String) {
    let out = Command::new("timeout")
        .arg("-k")
        .arg("2")
        .arg(secs.to_string())
        .args(args)
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) => {
            if !o.status.success() {
                eprintln!(
                    "command {:?} failed: {}\n{}",
                    args,
                    o.status,
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned())
        }
        Err(e) => {
            eprintln!("command {args:?} could not start: {e}");
            (false, String::new())
        }
    }
}

fn must(secs: u32, args: &[&str]) -> String {
    let (ok, out) = run(secs, args);
    assert!(ok, "command failed: {args:?}");
    out
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// Namespaces and links of one run; everything is deleted on drop, on every exit path.
///
/// Namespace `i` gets address `addr[i]` on interface `inner[i]`. With `veth[i]` true that is
/// a veth whose other end `outer[i]` stays in the root namespace; otherwise the test moves a
/// device of its own (a TAP) into the namespace under the name `inner[i]`.
struct Topology {
    ns: [String; 2],
    outer: [String; 2],
    inner: [String; 2],
    addr: [String; 2],
    veth: [bool; 2],
}

impl Topology {
    fn create(tag: &str, veth: [bool; 2]) -> Topology {
        let pid = std::process::id();
        let t = Topology {
            ns: [format!("snic{tag}{pid}a"), format!("snic{tag}{pid}b")],
            outer: [format!("s{tag}o{pid}a"), format!("s{tag}o{pid}b")],
            inner: [format!("s{tag}i{pid}a"), format!("s{tag}i{pid}b")],
            addr: ["10.199.77.1".to_string(), "10.199.77.2".to_string()],
            veth,
        };
        for (i, has_veth) in veth.into_iter().enumerate() {
            must(10, &["ip", "netns", "add", &t.ns[i]]);
            if has_veth {
                must(
                    10,
                    &[
                        "ip",
                        "link",
                        "add",
                        &t.outer[i],
                        "type",
                        "veth",
                        "peer",
                        "name",
                        &t.inner[i],
                    ],
                );
                must(10, &["ip", "link", "set", &t.outer[i], "up"]);
                t.adopt(i, &t.inner[i]);
            }
        }
        t
    }

    /// Move root-namespace interface `dev` into namespace `i`, rename it `inner[i]`, address it
    /// and bring it up.
    fn adopt(&self, i: usize, dev: &str) {
        must(10, &["ip", "link", "set", dev, "netns", &self.ns[i], "name", &self.inner[i]]);
        let cidr = format!("{}/24", self.addr[i]);
        self.must_in(i, &["ip", "addr", "add", &cidr, "dev", &self.inner[i]]);
        self.must_in(i, &["ip", "link", "set", &self.inner[i], "up"]);
        self.must_in(i, &["ip", "link", "set", "lo", "up"]);
    }

    fn exec(&self, i: usize, secs: u32, args: &[&str]) -> (bool, String) {
        let nsx = ["ip", "netns", "exec", &self.ns[i]];
        run(secs, &[&nsx[..], args].concat())
    }

    fn must_in(&self, i: usize, args: &[&str]) {
        let (ok, _) = self.exec(i, 10, args);
        assert!(ok, "command failed in {}: {args:?}", self.ns[i]);
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for i in 0..2 {
            if self.veth[i] {
                let _ = run(10, &["ip", "link", "del", &self.outer[i]]);
            }
            let _ = run(10, &["ip", "netns", "del", &self.ns[i]]);
        }
    }
}

/// Forwards between two ports on a thread; stops and joins it on drop.
struct Forwarder<A: Port + 'static, B: Port + 'static> {
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<(A, B, u64)>>,
}

impl<A: Port + 'static, B: Port + 'static> Forwarder<A, B> {
    /// Forward as is (`soft_offload` false), or, as the runtime does for an egress port
    /// without GSO, segment super-packets and complete partial checksums in software first.
    fn start(mut a: A, mut b: B, soft_offload: bool) -> Forwarder<A, B> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = thread::spawn(move || {
            let mut batch = Batch::new(64);
            let mut plain = Batch::new(256);
            let mut dropped = 0u64;
            let t0 = std::time::Instant::now();
            while !s.load(Ordering::Relaxed) {
                let now = Instant::from_nanos(t0.elapsed().as_nanos() as u64);
                let mut moved = 0;
                for dir in 0..2 {
                    let (rx, tx): (&mut dyn Port, &mut dyn Port) =
                        if dir == 0 { (&mut a, &mut b) } else { (&mut b, &mut a) };
                    batch.clear();
                    let n = rx.recv(now, &mut batch).expect("recv");
                    if n > 0 && soft_offload {
                        for p in batch.iter_mut() {
                            if p.meta.offload.gso.is_some() {
                                if plain.max() - plain.len() < 64 {
                                    let left = plain.len();
                                    dropped +=
                                        (left - tx.send(now, &mut plain).expect("send")) as u64;
                                    plain.clear();
                                }
                                let first = plain.len();
                                offload::segment(p, &mut plain).expect("segment");
                                for seg in &plain.packets()[first..] {
                                    assert_checksums_ok(seg.data());
                                }
                            } else {
                                if p.meta.offload.csum_partial.is_some() {
                                    offload::complete_checksum(p).expect("complete checksum");
                                    assert_checksums_ok(p.data());
                                }
                                if plain.push(p.clone()).is_err() {
                                    dropped += 1;
                                }
                            }
                        }
                        let left = plain.len();
                        dropped += (left - tx.send(now, &mut plain).expect("send")) as u64;
                        plain.clear();
                        moved += n;
                    } else if n > 0 {
                        let sent = tx.send(now, &mut batch).expect("send");
                        dropped += (n - sent) as u64;
                        moved += n;
                    }
                }
                if moved == 0 {
                    // Idle: back off briefly (the test stays free of unsafe poll(2) calls).
                    thread::sleep(Duration::from_micros(200));
                }
            }
            (a, b, dropped)
        });
        Forwarder { stop, handle: Some(handle) }
    }

    /// Stop forwarding; hand back both ports and the number of frames `send` did not take.
    fn finish(mut self) -> (A, B, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().expect("forwarder thread panicked")
    }
}

impl<A: Port + 'static, B: Port + 'static> Drop for Forwarder<A, B> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Check an Ethernet/IP/TCP-or-UDP frame's IPv4 header checksum and L4 checksum with
/// etherparse, an implementation independent of ours. (A veth marks frames without offload
/// metadata as checksum-verified, so the receiving kernel would not catch a bad sum.)
fn assert_checksums_ok(frame: &[u8]) {
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};
    let s = SlicedPacket::from_ethernet(frame).expect("segment parses");
    let (src, dst) = match s.net.as_ref().expect("IP") {
        NetSlice::Ipv4(ip) => {
            let h = ip.header().to_header();
            assert_eq!(h.header_checksum, h.calc_header_checksum(), "IPv4 header checksum");
            (std::net::IpAddr::from(h.source), std::net::IpAddr::from(h.destination))
        }
        NetSlice::Ipv6(ip) => (
            std::net::IpAddr::from(ip.header().source()),
            std::net::IpAddr::from(ip.header().destination()),
        ),
    };
    let v4 = |a: std::net::IpAddr| match a {
        std::net::IpAddr::V4(a) => a.octets(),
        std::net::IpAddr::V6(_) => panic!("mixed families"),
    };
    match s.transport.expect("transport") {
        TransportSlice::Tcp(t) => {
            let h = t.to_header();
            let want = h.calc_checksum_ipv4_raw(v4(src), v4(dst), t.payload()).expect("sum");
            assert_eq!(h.checksum, want, "TCP checksum");
        }
        TransportSlice::Udp(u) => {
            let h = u.to_header();
            let want = h.calc_checksum_ipv4_raw(v4(src), v4(dst), u.payload()).expect("sum");
            assert_eq!(h.checksum, want, "UDP checksum");
        }
        other => panic!("unexpected transport {other:?}"),
    }
}

/// Send 4 MiB of known bytes over TCP from namespace `from` to namespace `to`; assert that the
/// receiver's byte count and SHA-256 match the sender's.
fn transfer_intact(topo: &Topology, from: usize, to: usize) {
    let server = {
        let nsx = ["ip", "netns", "exec", &topo.ns[to]];
        Command::new("timeout")
            .args(["-k", "2", "30"])
            .args(nsx)
            .args(["python3", "-c", SERVER, &topo.addr[to]])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start server")
    };
    let (ok, sent) = topo.exec(from, 30, &["python3", "-c", CLIENT, &topo.addr[to]]);
    let got = server.wait_with_output().expect("server output");
    assert!(ok, "client failed");
    let got = String::from_utf8_lossy(&got.stdout).into_owned();
    assert_eq!(got.trim(), sent.trim(), "received data differs from sent data");
    assert!(sent.starts_with("4194304 "), "client output: {sent}");
}

fn ping(topo: &Topology, from: usize, to: usize) {
    let (ok, out) =
        topo.exec(from, 15, &["ping", "-c", "3", "-i", "0.2", "-W", "2", &topo.addr[to]]);
    assert!(ok, "ping through the forwarder failed:\n{out}");
}

fn can_run() -> bool {
    if !is_root() || !["ip", "ping", "python3", "timeout"].iter().all(|t| have(t)) {
        eprintln!("skipping: needs root (and ip, ping, python3, timeout)");
        return false;
    }
    true
}

const SERVER: &str = r#"
import socket, hashlib, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5399)); s.listen(1); s.settimeout(20)
c, _ = s.accept(); c.settimeout(20); h = hashlib.sha256(); n = 0
while True:
    d = c.recv(1 << 16)
    if not d: break
    h.update(d); n += len(d)
print(n, h.hexdigest())
"#;

const CLIENT: &str = r#"
import socket, hashlib, sys, time
data = bytes((i * 7 + i // 251) & 0xff for i in range(4 << 20))
for _ in range(50):
    try:
        c = socket.create_connection((sys.argv[1], 5399), timeout=5); break
    except OSError:
        time.sleep(0.1)
c.sendall(data); c.close()
print(len(data), hashlib.sha256(data).hexdigest())
"#;

#[test]
fn afpacket_forwards_super_packets_between_namespaces() {
    if !can_run() {
        return;
    }
    let topo = Topology::create("pt", [true, true]);
    // Default offloads stay on: TSO on the veths is what makes super-packets.
    let a = AfPacketPort::open(&topo.outer[0]).expect("open port a");
    let b = AfPacketPort::open(&topo.outer[1]).expect("open port b");
    assert!(a.caps().gso);
    assert_eq!(a.name(), format!("afpacket:{}", topo.outer[0]));
    let fwd = Forwarder::start(a, b, false);
    ping(&topo, 0, 1);
    transfer_intact(&topo, 0, 1);
    let (a, b, dropped) = fwd.finish();
    let (a, b) = (a.stats(), b.stats());
    eprintln!("port a: {a:?}\nport b: {b:?}\nforwarder drops: {dropped}");
    // The client's side sent TCP super-packets; they arrived with GSO metadata and were sent
    // on as super-packets.
    assert!(a.rx_gso > 0, "no super-packet received: {a:?}");
    assert!(b.tx_gso > 0, "no super-packet transmitted: {b:?}");
    assert_eq!(a.rx_bad_vnet + b.rx_bad_vnet, 0);
    assert_eq!(a.rx_truncated + b.rx_truncated, 0);
    assert_eq!(a.tx_errors + b.tx_errors, 0);
}

#[test]
fn tap_and_afpacket_forward_super_packets_both_ways() {
    if !can_run() {
        return;
    }
    let topo = Topology::create("tp", [true, false]);
    let pid = std::process::id();
    let tap_name = format!("stpt{pid}");
    let tap = TapPort::open(&tap_name).expect("open tap");
    assert!(tap.caps().gso);
    // The TAP's netdev goes into namespace B; our descriptor stays attached to it.
    topo.adopt(1, &tap_name);
    let a = AfPacketPort::open(&topo.outer[0]).expect("open port a");
    let fwd = Forwarder::start(a, tap, false);
    ping(&topo, 0, 1);
    transfer_intact(&topo, 0, 1);
    transfer_intact(&topo, 1, 0);
    let (a, tap, dropped) = fwd.finish();
    let (a, t) = (a.stats(), tap.stats());
    eprintln!("afpacket: {a:?}\ntap: {t:?}\nforwarder drops: {dropped}");
    // A to B: super-packets from the veth go into the TAP as super-packets.
    assert!(a.rx_gso > 0 && t.tx_gso > 0, "A to B: {a:?} {t:?}");
    // B to A: the TAP hands over super-packets with their metadata.
    assert!(t.rx_gso > 0 && a.tx_gso > 0, "B to A: {a:?} {t:?}");
    assert_eq!(a.rx_bad_vnet + t.rx_bad_vnet, 0);
    assert_eq!(a.tx_errors + t.tx_errors, 0);
    drop(tap);
}

#[test]
fn fanout_group_shares_an_interface() {
    if !can_run() {
        return;
    }
    let topo = Topology::create("fo", [true, true]);
    let group = Some((std::process::id() & 0xffff) as u16);
    let opts = AfPacketOptions { promiscuous: true, fanout_group: group };
    let a1 = AfPacketPort::open_with(&topo.outer[0], opts).expect("first socket of the group");
    let a2 = AfPacketPort::open_with(&topo.outer[0], opts).expect("second socket of the group");
    assert_ne!(a1.poll_fd(), a2.poll_fd());
    assert_eq!(a1.ifindex(), a2.ifindex());
    // A socket on another interface cannot join the same group.
    let other = AfPacketPort::open_with(&topo.outer[1], opts).unwrap_err();
    assert!(other.to_string().contains("PACKET_FANOUT"), "{other}");
}

#[test]
fn software_segmentation_feeds_a_path_without_offload() {
    if !can_run() {
        return;
    }
    let topo = Topology::create("sw", [true, true]);
    let a = AfPacketPort::open(&topo.outer[0]).expect("open port a");
    let b = AfPacketPort::open(&topo.outer[1]).expect("open port b");
    // Every super-packet from A is cut into MTU-sized frames with full checksums by
    // `offload::segment`, every partial checksum completed by `offload::complete_checksum`; B
    // then carries only plain frames, whose checksums the receiving kernel verifies.
    let fwd = Forwarder::start(a, b, true);
    ping(&topo, 0, 1);
    transfer_intact(&topo, 0, 1);
    let (a, b, dropped) = fwd.finish();
    let (a, b) = (a.stats(), b.stats());
    eprintln!("port a: {a:?}\nport b: {b:?}\nforwarder drops: {dropped}");
    assert!(a.rx_gso > 0, "no super-packet received: {a:?}");
    assert_eq!(b.tx_gso, 0, "a super-packet left unsegmented: {b:?}");
    assert!(b.tx_packets > a.rx_packets, "segmentation made no extra frames: {a:?} {b:?}");
    assert_eq!(a.tx_errors + b.tx_errors, 0);
}
