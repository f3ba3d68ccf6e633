//! The RDMA hooks through the C ABI, as a C program calls them (`include/snic.h`), against an
//! in-process server with RDMA on a free loopback port.
#![allow(unsafe_code, reason = "calls the C ABI; each unsafe block has a SAFETY comment")]

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};

use snic_device::{Server, ServerConfig};

fn server(dir: &std::path::Path) -> snic_device::ServerHandle {
    let probe = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free UDP port");
    let rdma = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), probe.local_addr().unwrap().port());
    drop(probe);
    let cfg = ServerConfig {
        socket: dir.join("snic.sock"),
        on_chip: 1 << 20,
        on_board: 4 << 20,
        workers: 1,
        huge: false,
        rdma: Some(rdma),
        ..Default::default()
    };
    Server::start(cfg).expect("server starts")
}

/// The same hooks through the C ABI (as a C program calls them).
#[test]
fn c_abi_rdma_calls() {
    use snic_host::ffi::*;
    use std::ffi::CString;
    let dir = std::env::temp_dir().join(format!("snic-rdma-cabi-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let handle = server(&dir);
    let path = handle.socket_path().to_str().unwrap().to_string();
    let path = CString::new(path).unwrap();
    let mut dev: *mut SnicDev = std::ptr::null_mut();
    let (mut buf, mut rings): (*mut SnicBuf, *mut SnicBuf) =
        (std::ptr::null_mut(), std::ptr::null_mut());
    let (mut lkey, mut rkey) = (0u32, 0u32);
    let (mut a, mut b) = (SnicRdmaQp::default(), SnicRdmaQp::default());
    let mut cqe = [SnicRdmaCqe::default(); 4];
    let ip = c"127.0.0.1";
    // SAFETY: every pointer passed is valid for the call (handles from the library, locals).
    unsafe {
        assert_eq!(snic_open(path.as_ptr(), c"cabi".as_ptr(), &mut dev), 0);
        assert_eq!(snic_alloc_host(dev, 8192, &mut buf), 0);
        assert_eq!(snic_alloc_host(dev, 8192, &mut rings), 0);
        let iova = snic_buf_iova(buf);
        assert_eq!(snic_rdma_reg_mr(dev, iova, 8192, 15, &mut lkey, &mut rkey), 0);
        assert_eq!(snic_rdma_create_qp(dev, SNIC_RDMA_PLACE_HOST, rings, 8, &mut a), 0);
        let r = snic_buf_iova(rings);
        assert!(a.sq_addr >= r && a.sq_addr < r + 8192);
        assert_eq!(
            snic_rdma_create_qp(dev, SNIC_RDMA_PLACE_ON_BOARD, std::ptr::null(), 8, &mut b),
            0
        );
        assert_eq!(snic_rdma_create_qp(dev, 9, std::ptr::null(), 8, &mut b), SNIC_E_INVAL);
        assert_eq!(snic_rdma_connect(dev, a.qpn, b.qpn, ip.as_ptr(), 4096), 0);
        assert_eq!(snic_rdma_connect(dev, b.qpn, a.qpn, ip.as_ptr(), 4096), 0);
        let p = snic_buf_ptr(buf).cast::<u8>();
        for i in 0..100 {
            *p.add(i) = i as u8 + 1;
        }
        // WRITE the first 100 bytes to offset 4096 of the same MR, through QP A.
        assert_eq!(
            snic_rdma_post(dev, a.qpn, SNIC_RDMA_WRITE, 7, iova, lkey, 100, iova + 4096, rkey),
            0
        );
        assert_eq!(snic_rdma_post(dev, a.qpn, 99, 7, iova, lkey, 100, iova, rkey), SNIC_E_INVAL);
        assert_eq!(snic_rdma_wait(dev, a.qpn, cqe.as_mut_ptr(), 4, 5000), 1);
        assert_eq!((cqe[0].wr_id, cqe[0].status, cqe[0].opcode), (7, 0, 1));
        assert_eq!(
            std::slice::from_raw_parts(p.add(4096), 100),
            std::slice::from_raw_parts(p, 100)
        );
        // SEND 10 bytes into a receive posted on B.
        assert_eq!(snic_rdma_post_recv(dev, b.qpn, 8, iova + 6000, lkey, 64), 0);
        assert_eq!(snic_rdma_post(dev, a.qpn, SNIC_RDMA_SEND, 9, iova, lkey, 10, 0, 0), 0);
        assert_eq!(snic_rdma_wait(dev, b.qpn, cqe.as_mut_ptr(), 4, 5000), 1);
        assert_eq!((cqe[0].wr_id, cqe[0].status, cqe[0].opcode, cqe[0].byte_len), (8, 0, 128, 10));
        assert_eq!(snic_rdma_wait(dev, a.qpn, cqe.as_mut_ptr(), 4, 5000), 1);
        assert_eq!(snic_rdma_poll(dev, a.qpn, cqe.as_mut_ptr(), 4), 0);
        assert_eq!(snic_rdma_destroy_qp(dev, a.qpn), 0);
        assert_eq!(snic_rdma_destroy_qp(dev, a.qpn), SNIC_E_REFUSED);
        assert_eq!(snic_rdma_dereg_mr(dev, lkey), 0);
        snic_free_host(buf);
        snic_free_host(rings);
        snic_close(dev);
    }
    handle.shutdown().expect("clean shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}
