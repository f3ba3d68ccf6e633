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
    // One directory per server: the tests run in parallel, and each removes its own.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("snic-host-rdma-{}-{k}", std::process::id()));
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

/// RC ATOMIC WRITE and FLUSH (IBTA 1.5) through `snic serve`: the 8 bytes land in device
/// memory, the FLUSH completes, and a FLUSH for persistence on an MR without that right fails
/// with a remote access error.
#[test]
fn atomic_write_and_flush_through_snic_serve() {
    use snic_host::{RdmaOp, WC_ATOMIC_WRITE, WC_FLUSH};
    let (_serve, dev) = start();
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let rings = dev.alloc_host(16 << 10).unwrap();
    let devbuf = dev.alloc_device(DevKind::OnBoard, 4096, 4096).unwrap();
    let (_, rkey) = dev.rdma_reg_mr(devbuf, 2048, rdma_access::ALL).unwrap();
    let acc = rdma_access::LOCAL_WRITE | rdma_access::REMOTE_WRITE | rdma_access::FLUSH_GLOBAL;
    let (_, rkey_g) = dev.rdma_reg_mr(devbuf + 2048, 2048, acc).unwrap();
    let a = dev.rdma_create_qp(Placement::Host(&rings), 16).unwrap();
    let b = dev.rdma_create_qp(Placement::OnBoard, 16).unwrap();
    dev.rdma_connect(a.qpn, b.qpn, lo, 1024).unwrap();
    dev.rdma_connect(b.qpn, a.qpn, lo, 1024).unwrap();
    let none = RdmaSge { addr: 0, lkey: 0, len: 0 };
    let value = 0x0123_4567_89ab_cdefu64;
    let aw = RdmaOp::AtomicWrite { remote_addr: devbuf + 64, rkey, value };
    dev.rdma_post(a.qpn, 1, aw, none).unwrap();
    let fl = RdmaOp::Flush { remote_addr: devbuf, rkey, len: 128, whole_mr: false, placement: 3 };
    dev.rdma_post(a.qpn, 2, fl, none).unwrap();
    let mut c = Vec::new();
    let t = Instant::now();
    while c.len() < 2 && t.elapsed() < T {
        c.extend(dev.rdma_wait_cq(a.qpn, 4, T).unwrap());
    }
    let got: Vec<_> = c.iter().map(|c| (c.wr_id, c.opcode, c.status)).collect();
    assert_eq!(got, [(1, WC_ATOMIC_WRITE, WC_SUCCESS), (2, WC_FLUSH, WC_SUCCESS)], "{c:?}");
    let mut word = [0u8; 8];
    dev.read_device(devbuf + 64, &mut word).unwrap();
    assert_eq!(u64::from_le_bytes(word), value);
    // Persistence on an MR that only allows global visibility: remote access error (10).
    let fl = RdmaOp::Flush {
        remote_addr: devbuf + 2048,
        rkey: rkey_g,
        len: 8,
        whole_mr: true,
        placement: 2,
    };
    dev.rdma_post(a.qpn, 3, fl, none).unwrap();
    let c = dev.rdma_wait_cq(a.qpn, 4, T).unwrap();
    assert_eq!((c[0].wr_id, c[0].opcode, c[0].status), (3, WC_FLUSH, 10), "{c:?}");
}

/// A chained command through `snic serve`: QP `b` fetches A and B from the memory behind QP
/// `a` (host memory) into device memory by RDMA READ, the GEMM kernel multiplies them, and C
/// goes back by RDMA WRITE; the host posts once and sees one completion.
#[test]
fn chained_gemm_through_snic_serve() {
    use snic_host::{ChainRead, ChainWrite, KernelCmd, WC_CHAIN};
    let (_serve, dev) = start();
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let (m, n, k) = (19usize, 23usize, 17usize);
    let (la, lb, lc) = (m * k * 4, k * n * 4, m * n * 4);
    let a_vals: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
    let b_vals: Vec<f32> = (0..k * n).map(|i| ((i * 53 % 97) as f32 - 48.0) / 24.0).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let host = dev.alloc_host(la + lb + lc).unwrap();
    host.write(0, &bytes(&a_vals)).unwrap();
    host.write(la, &bytes(&b_vals)).unwrap();
    let size = (la + lb + lc) as u64;
    let (_, hrkey) = dev.rdma_reg_mr(host.iova(), size, rdma_access::ALL).unwrap();
    let dbuf = dev.alloc_device(DevKind::OnBoard, size, 4096).unwrap();
    let (dlkey, _) = dev.rdma_reg_mr(dbuf, size, rdma_access::ALL).unwrap();
    let a = dev.rdma_create_qp(Placement::OnChip, 16).unwrap();
    let b = dev.rdma_create_qp(Placement::OnBoard, 16).unwrap();
    dev.rdma_connect(a.qpn, b.qpn, lo, 1024).unwrap();
    dev.rdma_connect(b.qpn, a.qpn, lo, 1024).unwrap();

    let sge =
        |off: usize, len: usize| RdmaSge { addr: dbuf + off as u64, lkey: dlkey, len: len as u32 };
    let reads = [
        ChainRead { remote_addr: host.iova(), rkey: hrkey, local: sge(0, la) },
        ChainRead { remote_addr: host.iova() + la as u64, rkey: hrkey, local: sge(la, lb) },
    ];
    let gemm = |k_dim: usize| {
        KernelCmd::new(snic_compute::ids::GEMM, 9)
            .addr(dbuf, la as u64)
            .addr(dbuf + la as u64, lb as u64)
            .addr(dbuf + (la + lb) as u64, lc as u64)
            .scalar(m as u64)
            .scalar(n as u64)
            .scalar(k_dim as u64)
            .scalar(snic_compute::dtype::F32)
            .scalar(0)
    };
    let back = ChainWrite {
        local: sge(la + lb, lc),
        remote_addr: host.iova() + (la + lb) as u64,
        rkey: hrkey,
    };
    dev.rdma_chain(b.qpn, 77, &reads, &gemm(k), Some(back)).unwrap();
    let done = dev.rdma_wait_cq(b.qpn, 8, T).unwrap();
    assert_eq!(done.len(), 1, "one completion for the whole chain: {done:?}");
    let c = &done[0];
    assert_eq!((c.wr_id, c.opcode, c.status, c.byte_len), (77, WC_CHAIN, WC_SUCCESS, lc as u32));
    let report = c.chain.as_ref().expect("a chain report");
    assert_eq!((report.outcome.as_str(), report.result), ("done", (2 * m * n * k) as u64));
    assert_eq!(report.fetched, (la + lb) as u64);
    let mut got = vec![0u8; lc];
    host.read(la + lb, &mut got).unwrap();
    for i in 0..m {
        for j in 0..n {
            let want: f32 = (0..k).map(|p| a_vals[i * k + p] * b_vals[p * n + j]).sum();
            let at = (i * n + j) * 4;
            let g = f32::from_le_bytes(got[at..at + 4].try_into().unwrap());
            assert!((g - want).abs() <= 1e-3, "C[{i}][{j}] = {g}, want {want}");
        }
    }

    // A kernel command that does not fit its buffers: the chain ends there, nothing is
    // written back, and the one completion says why.
    host.write(la + lb, &vec![0xEE; lc]).unwrap();
    dev.rdma_chain(b.qpn, 78, &reads, &gemm(4 * k), Some(back)).unwrap();
    let done = dev.rdma_wait_cq(b.qpn, 8, T).unwrap();
    assert_eq!(done.len(), 1, "{done:?}");
    let report = done[0].chain.as_ref().expect("a chain report");
    assert_ne!(done[0].status, WC_SUCCESS);
    assert_eq!(report.outcome, "kernel_failed");
    assert_eq!(report.kernel_status, snic_compute::status::BAD_LENGTH);
    host.read(la + lb, &mut got).unwrap();
    assert!(got.iter().all(|&x| x == 0xEE), "a failed chain wrote back");
    let st = dev.stats().unwrap();
    assert_eq!(st["rdma"]["chains"]["started"], 2, "{st}");
    assert_eq!(st["rdma"]["chains"]["in_flight"], 0, "{st}");
}
