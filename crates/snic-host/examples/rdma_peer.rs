//! A host program doing RDMA WRITE, READ and SEND through its snic NIC with the host library,
//! against a peer program on another NIC (this one, or `tests/c/rdma_peer.c`, its C twin).
//!
//! ```text
//! rdma_peer SOCKET active|passive host|on-chip|on-board PEER_IP SIZE
//! ```
//!
//! Both programs register one host buffer of 5 x SIZE bytes (local source, local sink, WRITE
//! target, READ source, receive buffer), create an RC QP with its rings where the third
//! argument says, print `QP <qpn> <buffer iova> <rkey>` and read the peer's line from stdin.
//! The passive side fills its READ source with pattern 2 and posts a receive; the active
//! side WRITEs pattern 1 into the peer's target, READs the peer's READ source (and checks
//! pattern 2) and SENDs pattern 3. The passive side waits for the receive, then checks its
//! target holds pattern 1 and its receive buffer pattern 3 (RC delivers in order: the WRITE
//! was placed before the SEND arrived). Each prints `OK ...` and exits 0, or says what failed
//! and exits 1. The path MTU is 0: the NIC derives it from its wire port's MTU.

use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Duration;

use snic_host::{Device, Placement, RdmaSge, WC_SUCCESS, rdma_access};

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

fn run() -> Res<String> {
    let args: Vec<String> = std::env::args().collect();
    let [_, sock, role, place, peer_ip, size] = &args[..] else {
        return Err(
            "usage: rdma_peer SOCKET active|passive host|on-chip|on-board PEER_IP SIZE".into()
        );
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
    let buf = dev.alloc_host(5 * size).map_err(e("alloc_host"))?;
    let base = buf.iova();
    let (lkey, rkey) =
        dev.rdma_reg_mr(base, 5 * size as u64, rdma_access::ALL).map_err(e("reg_mr"))?;
    let rings = dev.alloc_host(256 << 10).map_err(e("alloc_host rings"))?;
    let placement = match place.as_str() {
        "host" => Placement::Host(&rings),
        "on-chip" => Placement::OnChip,
        "on-board" => Placement::OnBoard,
        p => return Err(format!("placement {p:?}")),
    };
    let qp = dev.rdma_create_qp(placement, 64).map_err(e("create_qp"))?;
    let off = |k: usize| base + (k * size) as u64;
    let sge = |k: usize| RdmaSge { addr: off(k), lkey, len: size as u32 };
    if !active {
        buf.write(3 * size, &fill(2, size)).map_err(e("write"))?;
    }
    println!("QP {} {base} {rkey}", qp.qpn);
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).map_err(|e| e.to_string())?;
    let f: Vec<&str> = line.split_whitespace().collect();
    let [_, pq, pbase, prkey] = f[..] else { return Err(format!("peer line {line:?}")) };
    let num = |s: &str| s.parse::<u64>().map_err(|e| format!("peer line {line:?}: {e}"));
    let (pq, pbase, prkey) = (num(pq)? as u32, num(pbase)?, num(prkey)? as u32);
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
