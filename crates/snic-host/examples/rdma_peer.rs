//! A host program doing RDMA WRITE, READ and SEND through its snic NIC with the host library,
//! against a peer program on another NIC (this one, or `tests/c/rdma_peer.c`, its C twin).
//!
//! ```text
//! rdma_peer SOCKET active|passive host|on-chip|on-board PEER_IP SIZE [host|device]
//! ```
//!
//! Both programs register one buffer of 5 x SIZE bytes (local source, local sink, WRITE
//! target, READ source, receive buffer) in host memory or, with `device`, in on-board device
//! memory (filled and checked by DMA through the host library), create an RC QP with its rings
//! where the third argument says, print `QP <qpn> <buffer address> <rkey>` and read the peer's line from stdin.
//! The passive side fills its READ source with pattern 2 and posts a receive; the active
//! side WRITEs pattern 1 into the peer's target, READs the peer's READ source (and checks
//! pattern 2) and SENDs pattern 3. The passive side waits for the receive, then checks its
//! target holds pattern 1 and its receive buffer pattern 3 (RC delivers in order: the WRITE
//! was placed before the SEND arrived). Each prints `OK ...` and exits 0, or says what failed
//! and exits 1. The path MTU is 0: the NIC derives it from its wire port's MTU.
//!
//! Bench mode (`scripts/bench_nic.py`), same `QP` line exchange:
//!
//! ```text
//! rdma_peer SOCKET bw-write|bw-read|lat-write|sink host|on-chip|on-board PEER_IP SIZE [N [SECS [WINDOW]]]
//! ```
//!
//! `sink` is the passive side: it registers 2 x SIZE bytes, connects its QP back and waits for
//! a line `END` on stdin (or EOF), then prints `OK sink` and exits. `bw-write` / `bw-read`
//! keep WINDOW (default 16) WRITEs / READs of SIZE bytes outstanding against the sink's
//! buffer until N messages (default: 1 GiB worth) completed or SECS (default 10) passed, and
//! print one JSON line: bytes, seconds (first post to last completion), Gb/s. `lat-write`
//! posts one 8-byte (SIZE) WRITE at a time and busy-polls its completion, N times (default
//! 2000), and prints min / median / p99 / mean post-to-completion in microseconds. Every
//! verb (post, poll) is a request/response over the NIC's setup socket, so that cost is part
//! of every figure; post-to-completion of a WRITE is a full round trip (the ACK), not
//! `ib_write_lat`'s half round trip. One warm-up message precedes each measurement.

use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Duration;

use snic_host::{DevKind, Device, Placement, RdmaQp, RdmaSge, WC_SUCCESS, rdma_access};

/// Byte `i` of pattern `seed` (the C program computes the same).
fn pattern(seed: u8, i: usize) -> u8 {
    ((i as u32).wrapping_mul(2_654_435_761) >> 13) as u8 ^ seed
}

fn fill(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| pattern(seed, i)).collect()
}

type Res<T> = Result<T, String>;

fn main() {
    match run() {
        Ok(msg) => println!("OK {msg}"),
        Err(e) => {
            println!("FAIL {e}");
            std::process::exit(1);
        }
    }
}

const USAGE: &str =
    "usage: rdma_peer SOCKET active|passive host|on-chip|on-board PEER_IP SIZE [host|device]";

/// Where the data buffer lives: registered host memory, or on-board device memory (reached
/// by DMA through the host library).
enum Data<'a> {
    Host(snic_host::HostBuf),
    Device(&'a Device, u64),
}

impl Data<'_> {
    /// The buffer's address for MRs and WRs (host IOVA or device address).
    fn base(&self) -> u64 {
        match self {
            Data::Host(b) => b.iova(),
            Data::Device(_, a) => *a,
        }
    }

    fn write(&self, off: usize, bytes: &[u8]) -> snic_host::Result<()> {
        match self {
            Data::Host(b) => b.write(off, bytes),
            Data::Device(d, a) => d.write_device(a + off as u64, bytes),
        }
    }

    fn read(&self, off: usize, out: &mut [u8]) -> snic_host::Result<()> {
        match self {
            Data::Host(b) => b.read(off, out),
            Data::Device(d, a) => d.read_device(a + off as u64, out),
        }
    }
}

/// Register `len` bytes at `base` as an MR with every access and create an RC QP (depth 64)
/// with its rings where `place` says (`host`: in a host buffer returned with it, which must
/// live as long as the QP). Returns (lkey, rkey, QP, ring buffer).
fn mr_and_qp(
    dev: &Device,
    base: u64,
    len: u64,
    place: &str,
) -> Res<(u32, u32, RdmaQp, snic_host::HostBuf)> {
    let e = |what: &'static str| move |err: snic_host::HostError| format!("{what}: {err}");
    let (lkey, rkey) = dev.rdma_reg_mr(base, len, rdma_access::ALL).map_err(e("reg_mr"))?;
    let rings = dev.alloc_host(256 << 10).map_err(e("alloc_host rings"))?;
    let placement = match place {
        "host" => Placement::Host(&rings),
        "on-chip" => Placement::OnChip,
        "on-board" => Placement::OnBoard,
        p => return Err(format!("placement {p:?}")),
    };
    let qp = dev.rdma_create_qp(placement, 64).map_err(e("create_qp"))?;
    Ok((lkey, rkey, qp, rings))
}

/// Print this side's `QP <qpn> <buffer address> <rkey>` line and read the peer's from stdin.
fn swap_qp_lines(qpn: u32, base: u64, rkey: u32) -> Res<(u32, u64, u32)> {
    println!("QP {qpn} {base} {rkey}");
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).map_err(|e| e.to_string())?;
    let f: Vec<&str> = line.split_whitespace().collect();
    let [_, pq, pbase, prkey] = f[..] else { return Err(format!("peer line {line:?}")) };
    let num = |s: &str| s.parse::<u64>().map_err(|e| format!("peer line {line:?}: {e}"));
    Ok((num(pq)? as u32, num(pbase)?, num(prkey)? as u32))
}

fn run() -> Res<String> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() >= 3 && ["bw-write", "bw-read", "lat-write", "sink"].contains(&&*args[2]) {
        return bench(&args);
    }
    let (sock, role, place, peer_ip, size, data) = match &args[..] {
        [_, sock, role, place, peer_ip, size] => (sock, role, place, peer_ip, size, "host"),
        [_, sock, role, place, peer_ip, size, data] => {
            (sock, role, place, peer_ip, size, data.as_str())
        }
        _ => return Err(USAGE.into()),
    };
    let active = match role.as_str() {
        "active" => true,
        "passive" => false,
        r => return Err(format!("role {r:?}")),
    };
    let size: usize = size.parse().map_err(|e| format!("size {size:?}: {e}"))?;
    let peer_ip = peer_ip.parse().map_err(|e| format!("peer ip {peer_ip:?}: {e}"))?;
    let e = |what: &'static str| move |err: snic_host::HostError| format!("{what}: {err}");
    let dev = Device::connect(Path::new(sock), "rdma_peer").map_err(e("connect"))?;
    let buf = match data {
        "host" => Data::Host(dev.alloc_host(5 * size).map_err(e("alloc_host"))?),
        "device" => Data::Device(
            &dev,
            dev.alloc_device(DevKind::OnBoard, 5 * size as u64, 4096).map_err(e("alloc_device"))?,
        ),
        d => return Err(format!("data {d:?} (host or device)")),
    };
    let base = buf.base();
    let (lkey, rkey, qp, _rings) = mr_and_qp(&dev, base, 5 * size as u64, place)?;
    let off = |k: usize| base + (k * size) as u64;
    let sge = |k: usize| RdmaSge { addr: off(k), lkey, len: size as u32 };
    if !active {
        buf.write(3 * size, &fill(2, size)).map_err(e("write"))?;
    }
    let (pq, pbase, prkey) = swap_qp_lines(qp.qpn, base, rkey)?;
    dev.rdma_connect(qp.qpn, pq, peer_ip, 0).map_err(e("connect"))?;
    if !active {
        // A SEND that comes before this receive is posted waits (RNR NAK, then a retry).
        dev.rdma_post_recv(qp.qpn, 10, sge(4)).map_err(e("post_recv"))?;
    }
    let wait = |wr_id: u64| -> Res<u32> {
        let c = dev.rdma_wait_cq(qp.qpn, 1, Duration::from_secs(60)).map_err(e("wait_cq"))?;
        let c = c.first().ok_or("no completion")?;
        if c.wr_id != wr_id || c.status != WC_SUCCESS {
            return Err(format!("completion {c:?}, expected wr_id {wr_id} success"));
        }
        Ok(c.byte_len)
    };
    let check = |k: usize, seed: u8, what: &str| -> Res<()> {
        let mut got = vec![0u8; size];
        buf.read(k * size, &mut got).map_err(e("read"))?;
        match got.iter().zip(fill(seed, size)).position(|(a, b)| *a != b) {
            None => Ok(()),
            Some(i) => Err(format!("{what}: byte {i} differs")),
        }
    };
    let peer = |k: usize| pbase + (k * size) as u64;
    if active {
        buf.write(0, &fill(1, size)).map_err(e("write"))?;
        dev.rdma_post_write(qp.qpn, 1, sge(0), peer(2), prkey).map_err(e("post write"))?;
        wait(1)?;
        dev.rdma_post_read(qp.qpn, 2, sge(1), peer(3), prkey).map_err(e("post read"))?;
        wait(2)?;
        check(1, 2, "READ result")?;
        buf.write(0, &fill(3, size)).map_err(e("write"))?;
        dev.rdma_post_send(qp.qpn, 3, sge(0)).map_err(e("post send"))?;
        wait(3)?;
        Ok(format!("active: WRITE, READ (verified), SEND of {size} bytes"))
    } else {
        let n = wait(10)?;
        if n as usize != size {
            return Err(format!("received {n} bytes, expected {size}"));
        }
        check(2, 1, "WRITE target")?;
        check(4, 3, "SEND payload")?;
        Ok(format!("passive: WRITE and SEND of {size} bytes verified"))
    }
}

/// Bench parameters of the optional arguments after SIZE.
struct BenchOpts {
    /// Messages (0: the default of the role).
    n: u64,
    /// Time bound.
    secs: f64,
    /// Outstanding WRs (bandwidth roles).
    window: u32,
}

/// The bench roles (see the module doc).
fn bench(args: &[String]) -> Res<String> {
    let usage = "usage: rdma_peer SOCKET bw-write|bw-read|lat-write|sink \
                 host|on-chip|on-board PEER_IP SIZE [N [SECS [WINDOW]]]";
    if args.len() < 6 || args.len() > 9 {
        return Err(usage.into());
    }
    let (sock, role, place, peer_ip) = (&args[1], args[2].as_str(), &args[3], &args[4]);
    let size: usize = args[5].parse().map_err(|e| format!("size {:?}: {e}", args[5]))?;
    let opt = |i: usize| args.get(i).map(|s| s.parse::<f64>().map_err(|e| format!("{s:?}: {e}")));
    let o = BenchOpts {
        n: opt(6).transpose()?.unwrap_or(0.0) as u64,
        secs: opt(7).transpose()?.unwrap_or(10.0),
        window: opt(8).transpose()?.unwrap_or(16.0) as u32,
    };
    if size == 0 || size > u32::MAX as usize || o.window == 0 || o.window > 64 {
        return Err(format!("size {size} or window {} out of range (window 1..=64)", o.window));
    }
    let peer_ip = peer_ip.parse().map_err(|e| format!("peer ip {peer_ip:?}: {e}"))?;
    let e = |what: &'static str| move |err: snic_host::HostError| format!("{what}: {err}");
    let dev = Device::connect(Path::new(sock), "rdma_peer").map_err(e("connect"))?;
    // [0, size): local source / READ sink; [size, 2 size): the target peers WRITE and READ.
    let buf = dev.alloc_host(2 * size).map_err(e("alloc_host"))?;
    let base = buf.iova();
    let (lkey, rkey, qp, _rings) = mr_and_qp(&dev, base, 2 * size as u64, place)?;
    buf.write(0, &fill(1, size)).map_err(e("write"))?;
    let (pq, pbase, prkey) = swap_qp_lines(qp.qpn, base, rkey)?;
    dev.rdma_connect(qp.qpn, pq, peer_ip, 0).map_err(e("connect"))?;
    if role == "sink" {
        // The active side drives everything; wait for its end (or the pipe's).
        let mut stdin = std::io::stdin().lock();
        let mut line = String::new();
        loop {
            line.clear();
            let n = stdin.read_line(&mut line).map_err(|e| e.to_string())?;
            if n == 0 || line.trim() == "END" {
                return Ok("sink".into());
            }
        }
    }
    let sge = RdmaSge { addr: base, lkey, len: size as u32 };
    let target = pbase + size as u64;
    let post = |wr_id: u64| match role {
        "bw-read" => dev.rdma_post_read(qp.qpn, wr_id, sge, target, prkey),
        _ => dev.rdma_post_write(qp.qpn, wr_id, sge, target, prkey),
    };
    let check = |c: &snic_host::RdmaCqe| -> Res<()> {
        if c.status == WC_SUCCESS { Ok(()) } else { Err(format!("completion {c:?}")) }
    };
    // Warm-up: one message there and back (the peer's QP may connect a moment after ours;
    // the retry absorbs that here, not in the measurement).
    post(0).map_err(e("post"))?;
    let c = dev.rdma_wait_cq(qp.qpn, 1, Duration::from_secs(30)).map_err(e("wait_cq"))?;
    check(c.first().ok_or("no completion")?)?;
    let bound = Duration::from_secs_f64(o.secs);
    let t0 = std::time::Instant::now();
    if role == "lat-write" {
        let n = if o.n == 0 { 2000 } else { o.n };
        let mut us = Vec::with_capacity(n as usize);
        for i in 1..=n {
            let t = std::time::Instant::now();
            post(i).map_err(e("post"))?;
            let c = loop {
                let c = dev.rdma_poll_cq(qp.qpn, 1).map_err(e("poll_cq"))?;
                if let Some(c) = c.into_iter().next() {
                    break c;
                }
                if t.elapsed() > Duration::from_secs(10) {
                    return Err(format!("WRITE {i}: no completion in 10 s"));
                }
            };
            us.push(t.elapsed().as_secs_f64() * 1e6);
            check(&c)?;
            if t0.elapsed() > bound {
                break;
            }
        }
        us.sort_by(f64::total_cmp);
        let q = |p: f64| us[((us.len() - 1) as f64 * p).round() as usize];
        let mean = us.iter().sum::<f64>() / us.len() as f64;
        println!(
            "{{\"role\":\"{role}\",\"size\":{size},\"iters\":{},\"min_us\":{:.2},\
             \"median_us\":{:.2},\"p99_us\":{:.2},\"mean_us\":{mean:.2}}}",
            us.len(),
            q(0.0),
            q(0.5),
            q(0.99)
        );
        return Ok(format!("{role}: {} WRITEs of {size} bytes", us.len()));
    }
    let n = if o.n == 0 { ((1u64 << 30) / size as u64).max(1) } else { o.n };
    let window = u64::from(o.window);
    let (mut posted, mut done) = (0u64, 0u64);
    while done < posted || (posted < n && t0.elapsed() < bound) {
        while posted - done < window && posted < n && t0.elapsed() < bound {
            posted += 1;
            post(posted).map_err(e("post"))?;
        }
        let got =
            dev.rdma_wait_cq(qp.qpn, o.window, Duration::from_secs(30)).map_err(e("wait_cq"))?;
        for c in &got {
            check(c)?;
        }
        done += got.len() as u64;
    }
    let secs = t0.elapsed().as_secs_f64();
    let bytes = done * size as u64;
    println!(
        "{{\"role\":\"{role}\",\"size\":{size},\"window\":{window},\"msgs\":{done},\
         \"bytes\":{bytes},\"seconds\":{secs:.4},\"gbps\":{:.3}}}",
        bytes as f64 * 8.0 / 1e9 / secs
    );
    Ok(format!("{role}: {done} messages of {size} bytes"))
}
