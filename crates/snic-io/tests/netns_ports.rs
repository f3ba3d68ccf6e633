//! Real-interface test of the AF_PACKET port (root only; skipped with a message otherwise).
//!
//! Two network namespaces, each with a veth pair whose outer end stays in the root namespace;
//! kernel default offloads stay on. A forwarding thread moves batches between two
//! [`AfPacketPort`]s on the outer ends. The test checks that ping crosses, that TCP super-packets
//! arrive with virtio-net GSO metadata and leave as super-packets, and that a 4 MiB TCP transfer
//! arrives intact (SHA-256 compared on both sides). A negative control checks that the receiving
//! kernel drops a plain frame with a bad UDP checksum.
//!
//! As root, a missing tool (`ip`, `ping`, `python3`, `timeout`, `cat`) fails the tests when the
//! `CI` environment variable is set (CI installs them) and skips them with a message otherwise.

mod common;
use common::{have, is_root, must, run};
use snic_io::Port;
use snic_io::afpacket::{AfPacketOptions, AfPacketPort};
use snic_io::tap::TapPort;
use snic_pipeline::{Batch, offload};
use snic_time::Instant;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

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

/// Send the packets of `out` on `tx` and empty it; returns how many `send` did not take.
fn flush(tx: &mut dyn Port, now: Instant, out: &mut Batch) -> u64 {
    let left = out.len();
    let sent = tx.send(now, out).expect("send");
    out.clear();
    (left - sent) as u64
}

/// Forwards between two ports on a thread; stops and joins it on drop.
///
/// The forwarder itself never drops a frame: it flushes its staging batch before the batch
/// could overflow. So its drop count is exactly the frames the ports' `send` did not take.
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
                                // A 64 KiB super-packet at the veths' MSS makes < 64 segments.
                                if plain.max() - plain.len() < 64 {
                                    dropped += flush(tx, now, &mut plain);
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
                                if plain.is_full() {
                                    dropped += flush(tx, now, &mut plain);
                                }
                                plain.push(p.clone()).expect("room after a flush");
                            }
                        }
                        dropped += flush(tx, now, &mut plain);
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
/// etherparse, an implementation independent of ours. (The receiving kernel verifies these sums
/// too: a frame sent without offload metadata crosses the veth as `CHECKSUM_NONE`, and a bad L4
/// sum is dropped and counted in `UdpInCsumErrors` / `TcpInCsumErrors`. But for TCP that would
/// show only as a retransmission that the transfer survives; checking here fails the test and
/// names the bad frame.)
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
            // One's complement has two zeros. Completing a partial checksum stores 0xffff for
            // a zero sum whatever the protocol, as the kernel's `skb_checksum_help` does
            // (`CSUM_MANGLED_0`); a receiver verifies either. etherparse computes 0x0000.
            let same = h.checksum == want || (want == 0 && h.checksum == 0xffff);
            assert!(same, "TCP checksum {:#06x}, want {want:#06x}", h.checksum);
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

/// Whether the tests can run: false (after a message on stderr) when not root, or when root but
/// a tool is missing and `CI` is unset. Panics when root, `CI` is set and a tool is missing.
///
/// The message goes straight to stderr, not through `eprintln!`, which libtest captures for
/// passing tests: a plain `cargo test` must show that the test was skipped.
fn can_run(test: &str) -> bool {
    if !is_root() {
        let _ = writeln!(std::io::stderr(), "skipping {test}: needs root");
        return false;
    }
    let missing: Vec<&str> =
        ["ip", "ping", "python3", "timeout", "cat"].into_iter().filter(|t| !have(t)).collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: CI is set but these tools are missing: {missing:?}"
    );
    let _ = writeln!(std::io::stderr(), "skipping {test}: missing tools {missing:?}");
    false
}

/// Why the forwarder's drop count must be 0 in these tests: an AF_PACKET transmit on a veth
/// hands the frame straight to the peer's receive path (a veth has no queue), and the socket's
/// 8 MiB send buffer is released as the namespace's stack consumes the frames, so `sendmmsg`
/// does not stay at EAGAIN; a TAP write injects the frame into the stack and never blocks (its
/// send buffer is unlimited). A frame the receiving stack cannot take is dropped there and
/// recovered by TCP, never refused to the sender. Refusals of malformed frames are `tx_errors`,
/// asserted 0 separately.
fn assert_no_drops(dropped: u64, tx_dropped: [u64; 2]) {
    assert_eq!(dropped, 0, "forwarder drops (ports' tx_dropped: {tx_dropped:?})");
    assert_eq!(tx_dropped, [0, 0], "ports' tx_dropped");
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
    if !can_run("afpacket_forwards_super_packets_between_namespaces") {
        return;
    }
    forward_super_packets("pt", AfPacketOptions::default());
}

/// The same through the `recvmmsg`/`sendmmsg` path (the fallback).
#[test]
fn afpacket_mmsg_forwards_super_packets_between_namespaces() {
    if !can_run("afpacket_mmsg_forwards_super_packets_between_namespaces") {
        return;
    }
    let opts = AfPacketOptions {
        mode: snic_io::afpacket::AfPacketMode::Mmsg,
        ..AfPacketOptions::default()
    };
    forward_super_packets("pm", opts);
}

/// The same with a transmit ring too (`RingSizes::tx_ring`): the virtio-net header goes in
/// front of each frame in the ring.
#[test]
fn afpacket_tx_ring_forwards_super_packets_between_namespaces() {
    if !can_run("afpacket_tx_ring_forwards_super_packets_between_namespaces") {
        return;
    }
    let sizes = snic_io::afpacket::RingSizes { tx_ring: true, ..Default::default() };
    let opts = AfPacketOptions {
        mode: snic_io::afpacket::AfPacketMode::Ring(sizes),
        ..AfPacketOptions::default()
    };
    forward_super_packets("pr", opts);
}

/// The same through the low-latency `TPACKET_V2` receive ring (`RingSizes::low_latency`):
/// its 2 KiB slots cannot hold a super-packet, which is read whole from the socket's queue.
#[test]
fn afpacket_v2_ring_forwards_super_packets_between_namespaces() {
    if !can_run("afpacket_v2_ring_forwards_super_packets_between_namespaces") {
        return;
    }
    let opts = AfPacketOptions {
        mode: snic_io::afpacket::AfPacketMode::Ring(snic_io::afpacket::RingSizes::low_latency()),
        ..AfPacketOptions::default()
    };
    forward_super_packets("hiov2", opts);
}

fn forward_super_packets(tag: &str, opts: AfPacketOptions) {
    let topo = Topology::create(tag, [true, true]);
    // Default offloads stay on: TSO on the veths is what makes super-packets.
    let a = AfPacketPort::open_with(&topo.outer[0], opts).expect("open port a");
    let b = AfPacketPort::open_with(&topo.outer[1], opts).expect("open port b");
    assert_eq!(a.name(), format!("afpacket:{}", topo.outer[0]));
    let rings = matches!(opts.mode, snic_io::afpacket::AfPacketMode::Ring(_));
    assert_eq!((a.uses_rings(), b.uses_rings()), (rings, rings));
    let tx_ring = matches!(opts.mode, snic_io::afpacket::AfPacketMode::Ring(s) if s.tx_ring);
    assert_eq!(b.uses_tx_ring(), tx_ring);
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
    let small_slots = matches!(opts.mode,
        snic_io::afpacket::AfPacketMode::Ring(s) if s.rx_v2 && s.rx_v2_slot_size < 65_536);
    if small_slots {
        assert!(a.rx_copied > 0, "no frame came through the socket's queue: {a:?}");
    } else {
        assert_eq!(a.rx_copied + b.rx_copied, 0);
    }
    assert_no_drops(dropped, [a.tx_dropped, b.tx_dropped]);
}

#[test]
fn tap_and_afpacket_forward_super_packets_both_ways() {
    if !can_run("tap_and_afpacket_forward_super_packets_both_ways") {
        return;
    }
    let topo = Topology::create("tp", [true, false]);
    let pid = std::process::id();
    let tap_name = format!("stpt{pid}");
    let tap = TapPort::open(&tap_name).expect("open tap");
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
    assert_no_drops(dropped, [a.tx_dropped, t.tx_dropped]);
    drop(tap);
}

#[test]
fn fanout_group_shares_an_interface() {
    if !can_run("fanout_group_shares_an_interface") {
        return;
    }
    let topo = Topology::create("fo", [true, true]);
    let group = Some((std::process::id() & 0xffff) as u16);
    let opts = AfPacketOptions { fanout_group: group, ..Default::default() };
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
    if !can_run("software_segmentation_feeds_a_path_without_offload") {
        return;
    }
    let topo = Topology::create("sw", [true, true]);
    let a = AfPacketPort::open(&topo.outer[0]).expect("open port a");
    let b = AfPacketPort::open(&topo.outer[1]).expect("open port b");
    // Every super-packet from A is cut into MTU-sized frames with full checksums by
    // `offload::segment`, every partial checksum completed by `offload::complete_checksum`; B
    // then carries only plain frames. The forwarder checks each one's sums with etherparse (see
    // `assert_checksums_ok`); the receiving kernel verifies them as well.
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
    assert_no_drops(dropped, [a.tx_dropped, b.tx_dropped]);
}

const UDP_SINK: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], 5398)); s.settimeout(10)
while True:
    d = s.recv(100); print(d.decode(errors="replace"), flush=True)
    if d == b"GOOD": break
"#;

/// `Udp: ... InCsumErrors` of namespace `i`, from `/proc/net/snmp`.
fn udp_in_csum_errors(topo: &Topology, i: usize) -> u64 {
    let (ok, snmp) = topo.exec(i, 10, &["cat", "/proc/net/snmp"]);
    assert!(ok, "cannot read /proc/net/snmp in {}", topo.ns[i]);
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp: "));
    let (names, values) = (udp.next().expect("Udp header"), udp.next().expect("Udp values"));
    let col = names.split_whitespace().position(|n| n == "InCsumErrors").expect("InCsumErrors");
    values.split_whitespace().nth(col).and_then(|v| v.parse().ok()).expect("a number")
}

/// Negative control for the claim in `assert_checksums_ok`: a plain frame (no offload metadata)
/// that an AF_PACKET port sends on a veth with a wrong UDP checksum is dropped by the receiving
/// kernel and counted in `InCsumErrors`, while the same frame with the right sum is delivered.
#[test]
fn receiving_kernel_drops_plain_frames_with_a_bad_checksum() {
    if !can_run("receiving_kernel_drops_plain_frames_with_a_bad_checksum") {
        return;
    }
    let topo = Topology::create("ck", [true, true]);
    let (ok, mac) =
        topo.exec(1, 10, &["cat", &format!("/sys/class/net/{}/address", topo.inner[1])]);
    assert!(ok, "no MAC address for {}", topo.inner[1]);
    let mac: Vec<u8> =
        mac.trim().split(':').map(|h| u8::from_str_radix(h, 16).expect("hex octet")).collect();
    let dst_mac: [u8; 6] = mac.try_into().expect("6 octets");
    let frame = |payload: &[u8], bad: bool| {
        let mut f = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], dst_mac)
            .ipv4([10, 199, 77, 1], [10, 199, 77, 2], 64)
            .udp(4444, 5398)
            .write(&mut f, payload)
            .expect("build frame");
        assert_checksums_ok(&f);
        if bad {
            // UDP checksum: Ethernet 14 + IPv4 20 + offset 6.
            f[40] ^= 0x5a;
        }
        f
    };
    let (bad, good) = (frame(b"BAD!", true), frame(b"GOOD", false));
    let mut port = AfPacketPort::open(&topo.outer[1]).expect("open port");
    let sink = {
        let nsx = ["ip", "netns", "exec", &topo.ns[1]];
        Command::new("timeout")
            .args(["-k", "2", "15"])
            .args(nsx)
            .args(["python3", "-c", UDP_SINK, &topo.addr[1]])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start UDP sink")
    };
    // The sink needs a moment to bind; send bad-then-good pairs until it has the good frame and
    // exits. Every bad frame is checksum-checked whether the port is bound yet or not.
    let t0 = std::time::Instant::now();
    let mut sink = Some(sink);
    let mut bad_sent = 0u64;
    let mut out = None;
    while out.is_none() {
        assert!(t0.elapsed() < Duration::from_secs(15), "the UDP sink never got the good frame");
        let mut batch = Batch::new(2);
        batch.push_frame(&bad).unwrap();
        batch.push_frame(&good).unwrap();
        assert_eq!(port.send(Instant::ZERO, &mut batch).expect("send"), 2);
        bad_sent += 1;
        thread::sleep(Duration::from_millis(100));
        let s = sink.as_mut().expect("sink");
        if s.try_wait().expect("sink status").is_some() {
            out = Some(sink.take().expect("sink").wait_with_output().expect("sink output"));
        }
    }
    let out = out.expect("sink output");
    assert!(out.status.success(), "UDP sink failed: {:?}", out.status);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "GOOD\n", "only the good frame arrives");
    assert_eq!(udp_in_csum_errors(&topo, 1), bad_sent, "every bad frame counted");
    assert_eq!(port.stats().tx_packets, 2 * bad_sent);
}

#[test]
fn tap_port_follows_an_mtu_change_of_its_device() {
    if !can_run("tap_port_follows_an_mtu_change_of_its_device") {
        return;
    }
    let name = format!("stmt{}", std::process::id());
    let mut tap = TapPort::open(&name).expect("open tap");
    let mut b = Batch::new(8);
    let t0 = Instant::from_secs(1);
    let _ = tap.recv(t0, &mut b);
    assert_eq!(tap.caps().max_frame, 1500 + 18);
    // The host raises its netdev's MTU while the port runs (as on a NIC's host netdev):
    // frames up to the new size must not be dropped as too big, after at most a second.
    must(10, &["ip", "link", "set", &name, "mtu", "9000"]);
    let _ = tap.recv(t0 + Duration::from_millis(500), &mut b);
    assert_eq!(tap.caps().max_frame, 1500 + 18, "re-read at most once a second");
    let _ = tap.recv(t0 + Duration::from_secs(1), &mut b);
    assert_eq!(tap.caps().max_frame, 9000 + 18);
}

/// Source MAC address of the frames the VLAN tests send (the sniffer ignores every other frame,
/// such as the namespaces' IPv6 neighbour discovery).
const VLAN_SRC_MAC: [u8; 6] = [0x02, 0x5e, 0x10, 0, 0, 1];

/// Send frames on an interface through a raw AF_PACKET socket: `argv[1]` the interface, then
/// one `VNET:FRAME` argument per frame in hex. With any VNET non-empty the socket has
/// `PACKET_VNET_HDR` on and every frame goes with its virtio-net header (all zero when empty).
const VLAN_SENDER: &str = r#"
import socket, sys
items = [a.split(":") for a in sys.argv[2:]]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
vnet = any(v for v, _ in items)
if vnet: s.setsockopt(263, 15, 1)  # SOL_PACKET, PACKET_VNET_HDR
s.bind((sys.argv[1], 0))
for v, f in items:
    hdr = bytes.fromhex(v) if v else bytes(10)
    s.send((hdr if vnet else b"") + bytes.fromhex(f))
"#;

/// Receive `argv[2]` frames from source MAC `argv[3]` on interface `argv[1]`, print each in hex.
/// The kernel strips the outer VLAN tag on receive; it is put back from `PACKET_AUXDATA`, as
/// libpcap does, so a frame prints as it was on the wire. Prints `ready` once bound.
const VLAN_SNIFFER: &str = r#"
import socket, struct, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.setsockopt(263, 8, 1)  # SOL_PACKET, PACKET_AUXDATA
s.bind((sys.argv[1], 0)); s.settimeout(10)
want, src = int(sys.argv[2]), bytes.fromhex(sys.argv[3])
print("ready", flush=True)
n = 0
while n < want:
    d, anc, _, addr = s.recvmsg(1 << 16, socket.CMSG_SPACE(20))
    if addr[2] == socket.PACKET_OUTGOING: continue
    for lvl, typ, data in anc:
        if lvl == 263 and typ == 8:
            st, _, _, _, _, tci, tpid = struct.unpack("IIIHHHH", data[:20])
            if st & (1 << 4):
                tpid = tpid if st & (1 << 6) else 0x8100
                d = d[:12] + struct.pack("!HH", tpid, tci) + d[12:]
    if d[6:12] != src: continue
    print(d.hex(), flush=True); n += 1
"#;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// An untagged Ethernet/IPv4/UDP frame from [`VLAN_SRC_MAC`] with a `payload`-byte payload and
/// a correct UDP checksum.
fn vlan_test_frame(payload: usize) -> Vec<u8> {
    let data: Vec<u8> = (0..payload).map(|i| (i * 13 + 7) as u8).collect();
    let mut f = Vec::new();
    etherparse::PacketBuilder::ethernet2(VLAN_SRC_MAC, [0x02, 0x5e, 0x10, 0, 0, 2])
        .ipv4([10, 199, 78, 1], [10, 199, 78, 2], 64)
        .udp(4321, 5397)
        .write(&mut f, &data)
        .expect("build frame");
    f
}

/// `frame` with a tag (`tpid`, `tci`) inserted after its MAC addresses.
fn with_tag(frame: &[u8], tpid: u16, tci: u16) -> Vec<u8> {
    let mut t = frame[..12].to_vec();
    t.extend_from_slice(&tpid.to_be_bytes());
    t.extend_from_slice(&tci.to_be_bytes());
    t.extend_from_slice(&frame[12..]);
    t
}

/// Send `items` ((virtio-net header, frame) pairs) from namespace A's inner interface, through
/// a forwarder between the two AF_PACKET ports on the outer ends, and return what a sniffer on
/// namespace B's inner interface saw from [`VLAN_SRC_MAC`] (in hex, in order), with the ports'
/// counters and the forwarder's drop count.
fn send_through_snic(
    topo: &Topology,
    items: &[(Option<[u8; 10]>, Vec<u8>)],
    soft_offload: bool,
) -> (Vec<String>, [snic_io::afpacket::AfPacketStats; 2], u64) {
    send_through_snic_expecting(topo, items, soft_offload, items.len())
}

/// [`send_through_snic`] when `want` frames arrive (segments of super-packets).
fn send_through_snic_expecting(
    topo: &Topology,
    items: &[(Option<[u8; 10]>, Vec<u8>)],
    soft_offload: bool,
    want: usize,
) -> (Vec<String>, [snic_io::afpacket::AfPacketStats; 2], u64) {
    send_through_snic_with(topo, items, soft_offload, want, AfPacketOptions::default())
}

/// [`send_through_snic_expecting`] with ports opened with `opts`.
fn send_through_snic_with(
    topo: &Topology,
    items: &[(Option<[u8; 10]>, Vec<u8>)],
    soft_offload: bool,
    want: usize,
    opts: AfPacketOptions,
) -> (Vec<String>, [snic_io::afpacket::AfPacketStats; 2], u64) {
    use std::io::BufRead;
    let a = AfPacketPort::open_with(&topo.outer[0], opts).expect("open port a");
    let b = AfPacketPort::open_with(&topo.outer[1], opts).expect("open port b");
    let fwd = Forwarder::start(a, b, soft_offload);
    let mut sniffer = Command::new("timeout")
        .args(["-k", "2", "20", "ip", "netns", "exec", &topo.ns[1]])
        .args(["python3", "-c", VLAN_SNIFFER, &topo.inner[1]])
        .arg(want.to_string())
        .arg(hex(&VLAN_SRC_MAC))
        .stdout(Stdio::piped())
        .spawn()
        .expect("start sniffer");
    let mut out = std::io::BufReader::new(sniffer.stdout.take().expect("sniffer stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("sniffer output");
    assert_eq!(line.trim(), "ready", "the sniffer did not start");
    let args: Vec<String> = items
        .iter()
        .map(|(v, f)| format!("{}:{}", v.map(|v| hex(&v)).unwrap_or_default(), hex(f)))
        .collect();
    let mut cmd = vec!["python3", "-c", VLAN_SENDER, &topo.inner[0]];
    cmd.extend(args.iter().map(String::as_str));
    let (ok, _) = topo.exec(0, 10, &cmd);
    assert!(ok, "sender failed");
    let got: Vec<String> = out.lines().map(|l| l.expect("sniffer output")).collect();
    let status = sniffer.wait().expect("sniffer status");
    let (a, b, dropped) = fwd.finish();
    let stats = [a.stats(), b.stats()];
    eprintln!("port a: {:?}\nport b: {:?}\nforwarder drops: {dropped}", stats[0], stats[1]);
    assert!(status.success(), "sniffer failed ({status}) after {} of {want} frames", got.len());
    (got, stats, dropped)
}

/// The kernel strips the outer VLAN tag of every frame an AF_PACKET socket receives (into
/// `PACKET_AUXDATA`), even on a veth: the port must put it back, and a tagged frame it sends
/// must leave with its tags. Untagged, 802.1Q (with priority, and priority-only), QinQ with an
/// 802.1ad or an 802.1Q outer tag, and a full-size tagged frame cross byte-identical.
#[test]
fn afpacket_keeps_vlan_tags() {
    if !can_run("afpacket_keeps_vlan_tags") {
        return;
    }
    let topo = Topology::create("vl", [true, true]);
    let plain = vlan_test_frame(32);
    let q = with_tag(&plain, 0x8100, 0xa064); // PCP 5, VLAN 100
    // A full-size tagged frame: 1500-byte IP packet, 14 + 4 + 1500 = 1518 bytes.
    let full = with_tag(&vlan_test_frame(1500 - 28), 0x8100, 0x0fff);
    assert_eq!(full.len(), 1518);
    let frames = [
        plain.clone(),
        q.clone(),
        with_tag(&plain, 0x8100, 0x6000), // priority tag: PCP 3, VLAN 0
        with_tag(&q, 0x88a8, 0x00c8),     // QinQ: 802.1ad 200 over 802.1Q 100
        with_tag(&q, 0x8100, 0x012c),     // double 802.1Q: 300 over 100
        full,
        plain,
    ];
    let items: Vec<_> = frames.iter().map(|f| (None, f.clone())).collect();
    let (got, [a, b], dropped) = send_through_snic(&topo, &items, false);
    let want: Vec<String> = frames.iter().map(|f| hex(f)).collect();
    assert_eq!(got, want, "frames changed crossing snic");
    assert_eq!(a.rx_vlan, 5, "tags restored on port a: {a:?}");
    assert_eq!(a.rx_vlan_lost + b.rx_vlan_lost, 0);
    assert_eq!(a.rx_bad_vnet + a.rx_truncated + a.rx_errors, 0);
    assert_eq!(a.tx_errors + b.tx_errors, 0);
    assert_no_drops(dropped, [a.tx_dropped, b.tx_dropped]);
}

/// A frame with a partial UDP checksum whose tag the kernel stripped: the virtio-net header's
/// `csum_start` counts from the untagged frame and must move by 4 with the restored tag. The
/// forwarder completes the checksum in software from `csum_start` (and checks every sum with
/// etherparse), so a wrong offset corrupts the frame; B must get it whole, checksum correct.
#[test]
fn afpacket_moves_checksum_offsets_past_a_restored_tag() {
    if !can_run("afpacket_moves_checksum_offsets_past_a_restored_tag") {
        return;
    }
    let topo = Topology::create("vc", [true, true]);
    let mut items = Vec::new();
    let mut want = Vec::new();
    for tags in [&[][..], &[(0x8100, 100)][..], &[(0x8100, 100), (0x88a8, 200)][..]] {
        let mut full = vlan_test_frame(200);
        for &(tpid, tci) in tags {
            full = with_tag(&full, tpid, tci);
        }
        // The sender leaves the pseudo-header sum in the checksum field and the rest to the
        // device: NEEDS_CSUM from the UDP header (after the tags), checksum at offset 6.
        let l4 = 14 + 4 * tags.len() + 20;
        let partial = udp_partial(&full, l4);
        let mut vnet = [0u8; 10];
        vnet[0] = 1; // NEEDS_CSUM
        vnet[6..8].copy_from_slice(&(l4 as u16).to_le_bytes());
        vnet[8..10].copy_from_slice(&6u16.to_le_bytes());
        items.push((Some(vnet), partial));
        want.push(hex(&full));
    }
    let (got, [a, b], dropped) = send_through_snic(&topo, &items, true);
    assert_eq!(got, want, "frames with completed checksums");
    assert_eq!(a.rx_vlan, 2, "tags restored on port a: {a:?}");
    assert_eq!(a.rx_bad_vnet + a.rx_truncated + a.rx_errors + a.rx_vlan_lost, 0);
    assert_eq!(a.tx_errors + b.tx_errors, 0);
    assert_no_drops(dropped, [a.tx_dropped, b.tx_dropped]);
}

/// A tagged UDP super-packet (virtio-net `GSO_UDP_L4`, 3 segments of 1000 bytes) whose outer
/// tag the kernel stripped: with hardware-style offload the port sends it on as a super-packet,
/// tags and bytes intact (the receiving sniffer sees the super-packet as it was sent); with
/// software segmentation every segment carries both tags and correct checksums (checked by
/// the forwarder with etherparse) and the segments' payloads make up the original one.
#[test]
fn afpacket_keeps_vlan_tags_of_super_packets() {
    if !can_run("afpacket_keeps_vlan_tags_of_super_packets") {
        return;
    }
    let topo = Topology::create("vg", [true, true]);
    let plain = vlan_test_frame(3000);
    let payload = plain[42..].to_vec();
    let q = with_tag(&plain, 0x8100, 100);
    let qinq = with_tag(&q, 0x88a8, 200);
    let l4 = 14 + 8 + 20;
    let (vnet, partial) = gso_udp_l4(&qinq, l4);
    let items = [(Some(vnet), partial.clone())];

    let (got, [a, b], dropped) = send_through_snic(&topo, &items, false);
    assert_eq!(got, vec![hex(&partial)], "the super-packet changed crossing snic");
    assert!(a.rx_gso >= 1 && a.rx_vlan >= 1 && b.tx_gso >= 1, "{a:?} {b:?}");
    assert_eq!(a.rx_bad_vnet + a.rx_vlan_lost + b.tx_errors, 0);
    assert_no_drops(dropped, [a.tx_dropped, b.tx_dropped]);

    // Through 2 KiB `TPACKET_V2` slots: the super-packet comes whole from the socket's queue,
    // its tag from `PACKET_AUXDATA`.
    let v2 = AfPacketOptions {
        mode: snic_io::afpacket::AfPacketMode::Ring(snic_io::afpacket::RingSizes::low_latency()),
        ..AfPacketOptions::default()
    };
    let (got, [a, b], dropped) = send_through_snic_with(&topo, &items, false, 1, v2);
    assert_eq!(got, vec![hex(&partial)], "the super-packet changed crossing the V2 ring");
    assert!(a.rx_copied >= 1 && a.rx_vlan >= 1 && b.tx_gso >= 1, "{a:?} {b:?}");
    assert_eq!(a.rx_bad_vnet + a.rx_vlan_lost + a.rx_truncated + b.tx_errors, 0);
    assert_no_drops(dropped, [a.tx_dropped, b.tx_dropped]);

    // Software segmentation: the sniffer waits for three segments.
    let (got, [a, b], dropped) = send_through_snic_expecting(&topo, &items, true, 3);
    let mut joined = Vec::new();
    for h in &got {
        let f: Vec<u8> = (0..h.len() / 2)
            .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).expect("hex"))
            .collect();
        // MAC addresses, both tags and the EtherType as sent; the rest checked by sums.
        assert_eq!(&f[..22], &qinq[..22], "segment headers");
        assert_checksums_ok(&f);
        joined.extend_from_slice(&f[l4 + 8..]);
    }
    assert_eq!(got.len(), 3);
    assert_eq!(joined, payload, "the segments' payloads differ from the super-packet's");
    assert!(a.rx_gso >= 1 && a.rx_vlan >= 1 && b.tx_gso == 0, "{a:?} {b:?}");
    assert_eq!(a.rx_bad_vnet + a.rx_vlan_lost + b.tx_errors, 0);
    assert_no_drops(dropped, [a.tx_dropped, b.tx_dropped]);
}

/// A veth pair in the root namespace with IPv6 off on both ends (so the kernel sends nothing
/// on them by itself: every frame on the pair is the test's); deleted on drop.
struct VethPair {
    a: String,
    b: String,
}

impl VethPair {
    fn create(tag: &str) -> VethPair {
        let pid = std::process::id();
        let p = VethPair { a: format!("fp{tag}{pid}a"), b: format!("fp{tag}{pid}b") };
        must(10, &["ip", "link", "add", &p.a, "type", "veth", "peer", "name", &p.b]);
        for d in [&p.a, &p.b] {
            std::fs::write(format!("/proc/sys/net/ipv6/conf/{d}/disable_ipv6"), "1")
                .expect("disable IPv6");
            must(10, &["ip", "link", "set", d, "up"]);
        }
        p
    }

    /// A counter of interface `dev` from sysfs.
    fn stat(dev: &str, what: &str) -> u64 {
        std::fs::read_to_string(format!("/sys/class/net/{dev}/statistics/{what}"))
            .expect("interface statistics")
            .trim()
            .parse()
            .expect("a number")
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        let _ = run(10, &["ip", "link", "del", &self.a]);
    }
}

/// A 64-byte Ethernet/IPv4/UDP frame of flow `flow` (its source port) carrying `seq`.
fn flow_frame(flow: u16, seq: u32) -> Vec<u8> {
    let mut f = Vec::new();
    let mut payload = b"FPKT".to_vec();
    payload.extend_from_slice(&seq.to_be_bytes());
    payload.resize(18, 0);
    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 198, 0, 1], [10, 198, 0, 2], 64)
        .udp(10_000 + flow, 7777)
        .write(&mut f, &payload)
        .expect("build frame");
    f
}

/// The sequence number of a frame built by [`flow_frame`], if it is one.
fn flow_seq(frame: &[u8]) -> Option<u32> {
    let p = frame.get(42..50)?;
    (p[..4] == *b"FPKT").then(|| u32::from_be_bytes([p[4], p[5], p[6], p[7]]))
}

/// Send `n` frames of `flows` flows (sequence numbers `first..first + n`) on `tx`, in batches.
fn send_flows(tx: &mut dyn Port, first: u32, n: u32, flows: u16) -> u64 {
    let mut sent = 0;
    let mut seq = first;
    while seq < first + n {
        let mut b = Batch::new(64);
        while !b.is_full() && seq < first + n {
            b.push_frame(&flow_frame((seq % u32::from(flows)) as u16, seq)).unwrap();
            seq += 1;
        }
        sent += tx.send(Instant::ZERO, &mut b).expect("send") as u64;
    }
    sent
}

/// [`drain`] every queue: how many frames each received, and all their sequence numbers.
fn drain_queues(queues: &mut [Box<dyn Port>]) -> (Vec<usize>, Vec<u32>) {
    let mut per_queue = Vec::new();
    let mut all = Vec::new();
    for q in queues.iter_mut() {
        let got = drain(q.as_mut());
        per_queue.push(got.len());
        all.extend(got);
    }
    eprintln!("per queue: {per_queue:?}");
    (per_queue, all)
}

/// Read `port` until it has had nothing for 100 ms in a row (a drain, not a timing check);
/// returns the sequence numbers of the test frames received.
fn drain(port: &mut dyn Port) -> Vec<u32> {
    let mut seqs = Vec::new();
    let mut idle = std::time::Instant::now();
    let start = std::time::Instant::now();
    while idle.elapsed() < Duration::from_millis(100) && start.elapsed() < Duration::from_secs(20) {
        let mut b = Batch::new(256);
        if port.recv(Instant::ZERO, &mut b).expect("recv") > 0 {
            seqs.extend(b.iter().filter_map(|p| flow_seq(p.data())));
            idle = std::time::Instant::now();
        } else {
            thread::sleep(Duration::from_micros(200));
        }
    }
    seqs
}

/// A receive ring far too small for a burst that is not read: the kernel drops at the socket,
/// and those drops show in the port's `rx_kernel_drops` (from `PACKET_STATISTICS`). Every
/// frame the sending interface sent is accounted for: received or dropped by the kernel.
#[test]
fn afpacket_ring_reports_kernel_drops() {
    if !can_run("afpacket_ring_reports_kernel_drops") {
        return;
    }
    use snic_io::afpacket::{AfPacketMode, RingSizes};
    let pair = VethPair::create("kd");
    let tiny = RingSizes { rx_block_size: 4096, rx_block_nr: 2, ..RingSizes::default() };
    let opts = AfPacketOptions { mode: AfPacketMode::Ring(tiny), ..Default::default() };
    let mut rx = AfPacketPort::open_with(&pair.b, opts).expect("open receiver");
    let quiet = AfPacketOptions { promiscuous: false, ..Default::default() };
    let mut tx = AfPacketPort::open_with(&pair.a, quiet).expect("open sender");
    let before = VethPair::stat(&pair.a, "tx_packets");
    let n = 200_000;
    let sent = send_flows(&mut tx, 0, n, 64);
    let wire = VethPair::stat(&pair.a, "tx_packets") - before;
    let got = drain(&mut rx);
    let s = rx.stats();
    eprintln!("sent {sent} (interface: {wire}), received {}, {s:?}", got.len());
    assert!(sent > 0 && wire > 0, "nothing sent: {:?}", tx.stats());
    assert!(s.rx_kernel_drops > 0, "no kernel drops reported: {s:?}");
    assert_eq!(rx.counters().rx_kernel_drops, s.rx_kernel_drops);
    assert_eq!(s.rx_packets, got.len() as u64, "only the test's frames on the pair");
    assert_eq!(s.rx_packets + s.rx_kernel_drops, wire, "received + dropped = sent: {s:?}");
    assert_eq!(s.rx_ring_errors + s.rx_bad_vnet + s.rx_truncated, 0, "{s:?}");
}

/// The same burst through the `recvmmsg` path: drops are reported there too (socket buffer).
#[test]
fn afpacket_mmsg_reports_kernel_drops() {
    if !can_run("afpacket_mmsg_reports_kernel_drops") {
        return;
    }
    use snic_io::afpacket::AfPacketMode;
    let pair = VethPair::create("km");
    let opts = AfPacketOptions { mode: AfPacketMode::Mmsg, ..Default::default() };
    let mut rx = AfPacketPort::open_with(&pair.b, opts).expect("open receiver");
    let mut tx = AfPacketPort::open_with(&pair.a, AfPacketOptions { promiscuous: false, ..opts })
        .expect("open sender");
    assert!(!rx.uses_rings());
    let before = VethPair::stat(&pair.a, "tx_packets");
    send_flows(&mut tx, 0, 200_000, 64);
    let wire = VethPair::stat(&pair.a, "tx_packets") - before;
    let got = drain(&mut rx);
    let s = rx.stats();
    eprintln!("interface sent {wire}, received {}, {s:?}", got.len());
    assert!(s.rx_kernel_drops > 0, "no kernel drops reported: {s:?}");
    assert_eq!(s.rx_packets + s.rx_kernel_drops, wire, "received + dropped = sent: {s:?}");
}

/// Two fanout queues on one interface: frames of many flows land on both, each exactly once
/// in total, and a queue's own transmissions come back to neither.
#[test]
fn afpacket_fanout_queues_split_flows() {
    if !can_run("afpacket_fanout_queues_split_flows") {
        return;
    }
    let pair = VethPair::create("fq");
    let spec: snic_io::PortSpec = format!("afpacket:{}", pair.b).parse().unwrap();
    let mut queues = spec.open_queues(2).expect("open queues").expect("afpacket splits");
    assert_eq!(queues.len(), 2);
    let quiet = AfPacketOptions { promiscuous: false, ..Default::default() };
    let mut tx = AfPacketPort::open_with(&pair.a, quiet).expect("open sender");
    let n = 2000;
    assert_eq!(send_flows(&mut tx, 0, n, 97), u64::from(n));
    // A queue transmits on the shared interface: frames with other sequence numbers.
    assert_eq!(send_flows(queues[0].as_mut(), 1_000_000, 100, 7), 100);
    assert_eq!(send_flows(queues[1].as_mut(), 2_000_000, 100, 7), 100);
    let (per_queue, mut all) = drain_queues(&mut queues);
    assert!(all.iter().all(|&s| s < n), "a queue received transmitted frames");
    all.sort_unstable();
    let want: Vec<u32> = (0..n).collect();
    assert_eq!(all, want, "every frame exactly once over the queues");
    assert!(per_queue.iter().all(|&c| c > 0), "one queue got nothing: {per_queue:?}");
    assert_eq!(VethPair::stat(&pair.a, "rx_packets"), 200, "both queues' frames left");
}

/// UDP to 64 ports, `argv[2]` datagrams, from the namespace to `argv[1]`; payload `FPKT` and a
/// sequence number (as in [`flow_frame`]).
const FLOW_SENDER: &str = r#"
import socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[2])):
    s.sendto(b"FPKT" + struct.pack("!I", i) + bytes(10), (sys.argv[1], 7000 + i % 64))
"#;

/// A multi-queue TAP: the host's frames of many flows are spread over both queues, each
/// exactly once; both queues send.
#[test]
fn tap_queues_split_flows() {
    if !can_run("tap_queues_split_flows") {
        return;
    }
    let topo = Topology::create("tq", [false, false]);
    let name = format!("fptq{}", std::process::id());
    let spec: snic_io::PortSpec = format!("tap:{name}").parse().unwrap();
    let mut queues = spec.open_queues(2).expect("open queues").expect("tap splits");
    assert_eq!(queues.len(), 2);
    topo.adopt(0, &name);
    let dev = &topo.inner[0];
    // A neighbour with a fixed MAC address, so the namespace sends at once (no ARP).
    topo.must_in(
        0,
        &["ip", "neigh", "add", "10.199.77.9", "lladdr", "02:00:00:00:00:09", "dev", dev],
    );
    let n = 500u32;
    topo.must_in(0, &["python3", "-c", FLOW_SENDER, "10.199.77.9", &n.to_string()]);
    let (per_queue, mut all) = drain_queues(&mut queues);
    all.sort_unstable();
    assert_eq!(all, (0..n).collect::<Vec<_>>(), "every datagram exactly once");
    assert!(per_queue.iter().all(|&c| c > 0), "one queue got nothing: {per_queue:?}");
    // Both queues send into the namespace.
    let rx = |topo: &Topology| -> u64 {
        let (ok, s) =
            topo.exec(0, 10, &["cat", &format!("/sys/class/net/{dev}/statistics/rx_packets")]);
        assert!(ok);
        s.trim().parse().expect("a number")
    };
    let before = rx(&topo);
    for q in queues.iter_mut() {
        assert_eq!(send_flows(q.as_mut(), 0, 10, 3), 10);
    }
    assert_eq!(rx(&topo) - before, 20, "frames of both queues arrived");
}

/// A flush at stop waits for the transmit ring to drain and counts honestly what did not leave:
/// with the interface down the kernel takes nothing from the ring, so every frame written into
/// it is moved from `tx_packets` to `tx_dropped` (and `tx_unsent`) by `flush`. No frame can
/// leave a downed interface, so nothing is sent anywhere.
#[test]
fn afpacket_tx_ring_flush_counts_frames_left_on_the_ring() {
    if !can_run("afpacket_tx_ring_flush_counts_frames_left_on_the_ring") {
        return;
    }
    let topo = Topology::create("hiofl", [true, true]);
    let sizes = snic_io::afpacket::RingSizes { tx_ring: true, ..Default::default() };
    let opts = AfPacketOptions {
        mode: snic_io::afpacket::AfPacketMode::Ring(sizes),
        ..AfPacketOptions::default()
    };
    let mut port = AfPacketPort::open_with(&topo.outer[0], opts).expect("open");
    must(10, &["ip", "link", "set", &topo.outer[0], "down"]);
    let mut b = Batch::new(16);
    for i in 0..10u8 {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0, i]);
        f.extend_from_slice(&[0x88, 0xb5]);
        f.resize(60, i);
        b.push_frame(&f).unwrap();
    }
    assert_eq!(port.send(Instant::ZERO, &mut b).unwrap(), 10, "written into the ring");
    assert_eq!(port.stats().tx_packets, 10);
    port.flush().unwrap();
    let s = port.stats();
    assert!(s.tx_errors > 0, "the kicks on a downed interface fail: {s:?}");
    let want = snic_io::afpacket::AfPacketStats {
        tx_dropped: 10,
        tx_unsent: 10,
        tx_errors: s.tx_errors,
        ..Default::default()
    };
    assert_eq!(s, want);
    let c = port.counters();
    assert_eq!((c.tx_packets, c.tx_bytes, c.tx_dropped), (0, 0, 10));
    // A second flush counts nothing again.
    port.flush().unwrap();
    assert_eq!(port.stats().tx_unsent, 10);
}

/// Receive at most `max` test frames from `port` (one `recv`, retried briefly until something
/// arrives); returns their sequence numbers.
fn recv_some(port: &mut dyn Port, max: usize) -> Vec<u32> {
    let start = std::time::Instant::now();
    loop {
        let mut b = Batch::new(max);
        if port.recv(Instant::ZERO, &mut b).expect("recv") > 0 {
            return b.iter().filter_map(|p| flow_seq(p.data())).collect();
        }
        assert!(start.elapsed() < Duration::from_secs(5), "nothing received");
        thread::sleep(Duration::from_millis(1));
    }
}

/// A hitless upgrade's port handover (`snic_io::handover`): a receiver that read part of a
/// burst hands its socket over; a handover that is dropped unused leaves it as it was (the
/// rollback); the port adopted from the second handover receives the rest of the burst and
/// what came while nobody read, each frame exactly once and in order; the adopted port
/// transmits (continuing the transmit ring where there is one). Bursts of `n` frames (the
/// `TPACKET_V2` ring holds 256).
fn afpacket_handover(tag: &str, mode: snic_io::afpacket::AfPacketMode, n: u32) {
    use snic_io::PortSpec;
    let pair = VethPair::create(tag);
    let opts = AfPacketOptions { mode, ..Default::default() };
    let mut rx = AfPacketPort::open_with(&pair.b, opts).expect("open receiver");
    let quiet = AfPacketOptions { promiscuous: false, ..Default::default() };
    let mut tx = AfPacketPort::open_with(&pair.a, quiet).expect("open sender");
    assert_eq!(send_flows(&mut tx, 0, n, 4), u64::from(n));
    thread::sleep(Duration::from_millis(20));
    let first = recv_some(&mut rx, 10);
    assert_eq!(first, (0..10).collect::<Vec<u32>>(), "the old port read the first frames");
    // A takeover that fails: the new process got the descriptor and let it go unused.
    let lent = rx.handover().expect("AF_PACKET hands over").expect("handover");
    drop(lent);
    let more = recv_some(&mut rx, 10);
    assert_eq!(more, (10..20).collect::<Vec<u32>>(), "the old port carries on after a rollback");
    // The takeover that succeeds: the old port is not read again.
    let h = rx.handover().expect("AF_PACKET hands over").expect("handover");
    assert_eq!(h.fds.len(), 1);
    let spec = PortSpec::AfPacket { ifname: pair.b.clone() };
    // A state of another kind is refused.
    let wrong = snic_io::handover::PortState::Udp;
    let e = spec.adopt(&wrong, vec![h.fds[0].try_clone().unwrap()]).unwrap_err();
    assert!(e.to_string().contains("state is of a udp port"), "{e}");
    // Rings laid out otherwise (another build's frame size) are refused, not misread.
    if let snic_io::handover::PortState::AfPacket(st) = &h.state
        && let Some(r) = &st.ring
    {
        let mut other = st.clone();
        let mut ring = r.clone();
        ring.layout[4] += 16;
        other.ring = Some(ring);
        let other = snic_io::handover::PortState::AfPacket(other);
        let e = spec.adopt(&other, vec![h.fds[0].try_clone().unwrap()]).unwrap_err();
        assert!(e.to_string().contains("layout"), "{e}");
    }
    // Frames that arrive while the processes change over wait in the kernel.
    assert_eq!(send_flows(&mut tx, n, n, 4), u64::from(n));
    thread::sleep(Duration::from_millis(20));
    let mut adopted = spec.adopt(&h.state, h.fds).expect("adopt");
    let rest = drain(adopted.as_mut());
    assert_eq!(rest, (20..2 * n).collect::<Vec<u32>>(), "each frame once, in order");
    let c = adopted.counters();
    assert_eq!((c.rx_packets, c.rx_kernel_drops), (u64::from(2 * n - 20), 0), "{c:?}");
    drop(rx);
    // The adopted socket transmits.
    let mut back = AfPacketPort::open_with(&pair.a, AfPacketOptions::default()).expect("open");
    assert_eq!(send_flows(adopted.as_mut(), 5000, 300, 4), 300);
    adopted.flush().expect("flush");
    let got = drain(&mut back);
    assert_eq!(got, (5000..5300).collect::<Vec<u32>>());
}

#[test]
fn afpacket_v3_ring_hands_over_without_loss() {
    if can_run("afpacket_v3_ring_hands_over_without_loss") {
        afpacket_handover("h3", snic_io::afpacket::AfPacketMode::default(), 500);
    }
}

#[test]
fn afpacket_tx_ring_hands_over_without_loss() {
    if can_run("afpacket_tx_ring_hands_over_without_loss") {
        use snic_io::afpacket::{AfPacketMode, RingSizes};
        let sizes = RingSizes { tx_ring: true, ..RingSizes::default() };
        afpacket_handover("ht", AfPacketMode::Ring(sizes), 500);
    }
}

#[test]
fn afpacket_v2_ring_hands_over_without_loss() {
    if can_run("afpacket_v2_ring_hands_over_without_loss") {
        use snic_io::afpacket::{AfPacketMode, RingSizes};
        afpacket_handover("h2", AfPacketMode::Ring(RingSizes::low_latency()), 100);
    }
}

#[test]
fn afpacket_mmsg_hands_over_without_loss() {
    if can_run("afpacket_mmsg_hands_over_without_loss") {
        afpacket_handover("hm", snic_io::afpacket::AfPacketMode::Mmsg, 500);
    }
}

/// A TAP queue handed over: what the host sends into the device while nobody reads waits in
/// the queue and the adopted port reads it, after what the old port read; the adopted port
/// writes back into the host.
#[test]
fn tap_hands_over_its_queue() {
    if !can_run("tap_hands_over_its_queue") {
        return;
    }
    use snic_io::PortSpec;
    let name = format!("stho{}", std::process::id());
    let mut tap = TapPort::open(&name).expect("open tap");
    std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"), "1").expect("no IPv6");
    // The host side: frames sent on the netdev reach the TAP reader, and the reverse.
    let mut host = AfPacketPort::open_with(&name, AfPacketOptions::default()).expect("host side");
    assert_eq!(send_flows(&mut host, 0, 100, 4), 100);
    thread::sleep(Duration::from_millis(20));
    let first = recv_some(&mut tap, 10);
    assert_eq!(first, (0..10).collect::<Vec<u32>>());
    let h = tap.handover().expect("TAP hands over").expect("handover");
    assert_eq!(send_flows(&mut host, 100, 100, 4), 100);
    let spec = PortSpec::Tap { name: name.clone() };
    // A descriptor that is not a TAP queue is refused.
    let state = h.state.clone();
    let not_tap: std::os::fd::OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
    assert!(spec.adopt(&state, vec![not_tap]).is_err());
    let mut adopted = spec.adopt(&h.state, h.fds).expect("adopt");
    drop(tap);
    let rest = drain(adopted.as_mut());
    assert_eq!(rest, (10..200).collect::<Vec<u32>>(), "each frame once, in order");
    assert_eq!(send_flows(adopted.as_mut(), 900, 50, 4), 50);
    let got = drain(&mut host);
    assert_eq!(got, (900..950).collect::<Vec<u32>>());
}

/// UDP/IPv4 `frame` (its UDP header at `l4`) with the partial checksum a sender leaves for
/// the device: the pseudo-header sum (addresses, protocol, UDP length).
fn udp_partial(frame: &[u8], l4: usize) -> Vec<u8> {
    let mut partial = frame.to_vec();
    let mut sum = 17 + (frame.len() - l4) as u32;
    for w in frame[l4 - 8..l4].chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    partial[l4 + 6..l4 + 8].copy_from_slice(&(sum as u16).to_be_bytes());
    partial
}

/// UDP/IPv4 `frame` (its UDP header at `l4`) as a GSO_UDP_L4 super-packet of 1000-byte
/// segments: its virtio-net header, and the frame with the partial UDP checksum (the
/// pseudo-header sum) the header asks the kernel to complete.
fn gso_udp_l4(frame: &[u8], l4: usize) -> ([u8; 10], Vec<u8>) {
    let partial = udp_partial(frame, l4);
    let mut vnet = [0u8; 10];
    vnet[0] = 1; // NEEDS_CSUM
    vnet[1] = 5; // GSO_UDP_L4
    vnet[2..4].copy_from_slice(&((l4 + 8) as u16).to_le_bytes());
    vnet[4..6].copy_from_slice(&1000u16.to_le_bytes());
    vnet[6..8].copy_from_slice(&(l4 as u16).to_le_bytes());
    vnet[8..10].copy_from_slice(&6u16.to_le_bytes());
    (vnet, partial)
}

/// An untagged UDP super-packet carrying `payload` bytes: longer than a 2 KiB `TPACKET_V2`
/// slot.
fn udp_super_packet(payload: usize) -> ([u8; 10], Vec<u8>) {
    gso_udp_l4(&vlan_test_frame(payload), 14 + 20)
}

/// A frame longer than its `TPACKET_V2` slot waits whole on the socket's queue; the link going
/// down and up before it is read makes the next read report `ENETDOWN` and take nothing. The
/// port reads the copy again, so that frame and the next one arrive whole and in order: the
/// ring and the queue stay in step.
#[test]
fn afpacket_v2_copied_frames_survive_a_link_flap() {
    if !can_run("afpacket_v2_copied_frames_survive_a_link_flap") {
        return;
    }
    use snic_io::afpacket::{AfPacketMode, RingSizes};
    let topo = Topology::create("cf", [true, true]);
    let opts = AfPacketOptions {
        mode: AfPacketMode::Ring(RingSizes::low_latency()),
        ..AfPacketOptions::default()
    };
    let mut port = AfPacketPort::open_with(&topo.outer[0], opts).expect("open port");
    let send = |(vnet, frame): &([u8; 10], Vec<u8>)| {
        let item = format!("{}:{}", hex(vnet), hex(frame));
        let (ok, _) = topo.exec(0, 10, &["python3", "-c", VLAN_SENDER, &topo.inner[0], &item]);
        assert!(ok, "sender failed");
    };
    let first = udp_super_packet(3000);
    let second = udp_super_packet(3400);
    send(&first);
    thread::sleep(Duration::from_millis(200));
    must(10, &["ip", "link", "set", &topo.outer[0], "down"]);
    must(10, &["ip", "link", "set", &topo.outer[0], "up"]);
    // The veth's carrier comes back within a moment.
    thread::sleep(Duration::from_millis(500));
    send(&second);
    thread::sleep(Duration::from_millis(200));

    let mut got = Vec::new();
    for _ in 0..50 {
        let mut b = Batch::new(64);
        port.recv(Instant::ZERO, &mut b).expect("recv");
        got.extend(b.iter().filter(|p| p.data()[6..12] == VLAN_SRC_MAC).map(|p| p.data().to_vec()));
        if got.len() >= 2 {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let s = port.stats();
    eprintln!("{s:?}");
    assert_eq!(got.len(), 2, "frames from the sender: {} ({s:?})", got.len());
    assert_eq!(hex(&got[0]), hex(&first.1), "the first frame changed");
    assert_eq!(hex(&got[1]), hex(&second.1), "the second frame changed");
    assert_eq!(s.rx_copied, 2, "{s:?}");
    assert_eq!(s.rx_ring_lost + s.rx_truncated + s.rx_bad_vnet, 0, "{s:?}");
    assert!(s.rx_errors >= 1, "the link going down was not reported: {s:?}");
}
