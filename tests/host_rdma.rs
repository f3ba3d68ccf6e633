//! `snic serve --rdma ADDR` as a real process: a host process creates two QPs (rings in its
//! host memory and in on-board device memory), connects them over snic's RoCE transport on
//! loopback, and moves data with WRITE and SEND.

use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use snic_host::{DevKind, Device, Placement, RdmaSge, WC_SUCCESS, rdma_access};

const T: Duration = Duration::from_secs(10);

/// A `snic serve --rdma` child process, killed on drop.
struct Serve {
    child: Child,
    dir: PathBuf,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start() -> (Serve, Device) {
    let dir = std::env::temp_dir().join(format!("snic-host-rdma-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let sock = dir.join("snic.sock");
    let port = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap().local_addr().unwrap().port();
    let child = Command::new(env!("CARGO_BIN_EXE_snic"))
        .args(["serve", "--no-huge", "--workers", "1", "--on-board", "16M", "--socket"])
        .arg(&sock)
        .arg("--rdma")
        .arg(format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn snic serve");
    let mut s = Serve { child, dir };
    let t = Instant::now();
    loop {
        if let Ok(Some(st)) = s.child.try_wait() {
            panic!("snic serve exited early: {st}");
        }
        if let Ok(d) = Device::connect(&sock, "host-rdma") {
            return (s, d);
        }
        assert!(t.elapsed() < T, "snic serve did not come up");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn rdma_through_snic_serve() {
    let (_serve, dev) = start();
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let n = 32 << 10;
    let data: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
    let buf = dev.alloc_host(2 * n).unwrap();
    buf.write(0, &data).unwrap();
    let rings = dev.alloc_host(16 << 10).unwrap();
    let devbuf = dev.alloc_device(DevKind::OnBoard, n as u64, 4096).unwrap();
    let (lkey, _) = dev.rdma_reg_mr(buf.iova(), 2 * n as u64, rdma_access::LOCAL_WRITE).unwrap();
    let (_, rkey) = dev.rdma_reg_mr(devbuf, n as u64, rdma_access::ALL).unwrap();

    let a = dev.rdma_create_qp(Placement::Host(&rings), 16).unwrap();
    assert!(a.sq_addr >= rings.iova() && a.sq_addr < rings.iova() + rings.len() as u64);
    let b = dev.rdma_create_qp(Placement::OnBoard, 16).unwrap();
    let board = dev.device_regions().into_iter().find(|r| r.kind == DevKind::OnBoard).unwrap();
    assert!(b.sq_addr >= board.base && b.sq_addr < board.base + board.size, "{b:?}");
    dev.rdma_connect(a.qpn, b.qpn, lo, 1024).unwrap();
    dev.rdma_connect(b.qpn, a.qpn, lo, 1024).unwrap();

    let all = RdmaSge { addr: buf.iova(), lkey, len: n as u32 };
    dev.rdma_post_write(a.qpn, 10, all, devbuf, rkey).unwrap();
    let c = dev.rdma_wait_cq(a.qpn, 4, T).unwrap();
    assert_eq!((c.len(), c[0].wr_id, c[0].status), (1, 10, WC_SUCCESS), "{c:?}");
    let mut got = vec![0u8; n];
    dev.read_device(devbuf, &mut got).unwrap();
    assert!(got == data, "device memory differs after the WRITE");

    let second = RdmaSge { addr: buf.iova() + n as u64, lkey, len: n as u32 };
    dev.rdma_post_recv(b.qpn, 20, second).unwrap();
    dev.rdma_post_send(a.qpn, 21, RdmaSge { len: 5000, ..all }).unwrap();
    let r = dev.rdma_wait_cq(b.qpn, 4, T).unwrap();
    assert_eq!((r[0].wr_id, r[0].status, r[0].byte_len), (20, WC_SUCCESS, 5000), "{r:?}");
    let mut msg = vec![0u8; 5000];
    buf.read(n, &mut msg).unwrap();
    assert_eq!(&msg[..], &data[..5000]);
    let st = dev.stats().unwrap();
    assert_eq!(st["rdma"]["qps"], 2, "{st}");
    assert!(st["rdma"]["engine"]["tx_packets"].as_u64().unwrap() >= 32, "{st}");
}
