//! RDMA API hooks through the host library: QPs with rings in host or device memory, WRITE /
//! READ / SEND between two QPs of one client over snic's loopback RoCE transport, isolation
//! between clients, and reclaim on disconnect. Each test runs its own in-process server.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::pattern;
use snic_device::{Server, ServerConfig, ServerHandle};
use snic_dma::is_device_address;
use snic_host::{
    DevKind, Device, HostError, Placement, RdmaSge, WC_RDMA_READ, WC_RDMA_WRITE, WC_RECV, WC_SEND,
    WC_SUCCESS, rdma_access,
};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const WAIT: Duration = Duration::from_secs(5);

struct Rig {
    handle: Option<ServerHandle>,
    dir: PathBuf,
}

impl Rig {
    /// A server with RDMA on a free loopback port (or without RDMA).
    fn start(tag: &str, rdma: bool) -> Rig {
        Self::start_with(tag, rdma, None)
    }

    /// A server that is a whole NIC on a wire of MTU 1500 (a `null` port) with the RoCE
    /// addresses 10.9.0.1 and fd09::1.
    fn start_nic(tag: &str) -> Rig {
        use snic_nic::{Nic, NicConfig};
        let ips: Vec<IpAddr> = vec!["10.9.0.1".parse().unwrap(), "fd09::1".parse().unwrap()];
        let nic = Nic::new(NicConfig {
            mac: snic_wire::ethernet::EthernetAddress([2, 0, 0, 0, 9, 1]),
            ips: ips.clone(),
            wire: snic_pipeline::PortId(0),
            neigh: Default::default(),
        });
        let cfg = snic_pipeline::PipelineConfig::new(Vec::new());
        let pipeline = snic_io::nic::build_pipeline(&cfg, &nic, None).expect("pipeline");
        let ports: Vec<Box<dyn snic_io::Port>> = vec![Box::new(snic_io::null::NullPort::new())];
        let node = snic_io::nic::NicNode::new("nic", pipeline, ports, nic, 64);
        Self::start_with(tag, false, Some(snic_device::Wire { node, ips, link_mtu: 1500 }))
    }

    fn start_with(tag: &str, rdma: bool, wire: Option<snic_device::Wire>) -> Rig {
        let dir = std::env::temp_dir().join(format!("snic-rdma-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let rdma = rdma.then(|| {
            let probe = UdpSocket::bind((LOOPBACK, 0)).expect("a free UDP port");
            let port = probe.local_addr().expect("bound").port();
            SocketAddr::new(LOOPBACK, port)
        });
        let cfg = ServerConfig {
            socket: dir.join("snic.sock"),
            on_chip: 1 << 20,
            on_board: 8 << 20,
            workers: 1,
            huge: false,
            rdma,
            ..Default::default()
        };
        let handle = Server::start_with(cfg, wire).expect("server starts");
        Rig { handle: Some(handle), dir }
    }

    fn connect(&self, name: &str) -> Device {
        let path = self.handle.as_ref().expect("running").socket_path().to_path_buf();
        Device::connect(&path, name).expect("connect")
    }

    fn stats(&self) -> serde_json::Value {
        self.handle.as_ref().expect("running").stats()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            let _ = h.shutdown();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn refused_code<T: std::fmt::Debug>(r: Result<T, HostError>) -> String {
    match r {
        Err(HostError::Refused { code, .. }) => code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Wait for exactly one completion of `qpn` and check it succeeded with `opcode`.
fn one_cqe(dev: &Device, qpn: u32, wr_id: u64, opcode: u32) -> u32 {
    let c = dev.rdma_wait_cq(qpn, 4, WAIT).expect("a completion");
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!((c[0].wr_id, c[0].status, c[0].opcode), (wr_id, WC_SUCCESS, opcode), "{c:?}");
    c[0].byte_len
}

#[test]
fn host_and_on_chip_qps_write_read_and_send() {
    let rig = Rig::start("data", true);
    let dev = rig.connect("rdma-a");
    const N: usize = 64 << 10;
    let data = pattern(N, 7);

    let src = dev.alloc_host(N).unwrap();
    src.write(0, &data).unwrap();
    let back = dev.alloc_host(N).unwrap();
    let rings = dev.alloc_host(64 << 10).unwrap();
    let devbuf = dev.alloc_device(DevKind::OnBoard, N as u64, 4096).unwrap();
    let (src_l, _) = dev.rdma_reg_mr(src.iova(), N as u64, rdma_access::LOCAL_WRITE).unwrap();
    let (back_l, _) = dev.rdma_reg_mr(back.iova(), N as u64, rdma_access::LOCAL_WRITE).unwrap();
    let (_, dev_r) = dev.rdma_reg_mr(devbuf, N as u64, rdma_access::ALL).unwrap();

    // QP A: rings in the host buffer; QP B: rings in on-chip memory.
    let a = dev.rdma_create_qp(Placement::Host(&rings), 32).unwrap();
    let in_rings = |x: u64| (rings.iova()..rings.iova() + rings.len() as u64).contains(&x);
    assert!(in_rings(a.sq_addr) && in_rings(a.rq_addr), "{a:?} vs {:#x}", rings.iova());
    let b = dev.rdma_create_qp(Placement::OnChip, 32).unwrap();
    let on_chip = dev
        .device_regions()
        .into_iter()
        .find(|r| r.kind == DevKind::OnChip)
        .expect("an on-chip region");
    for x in [b.sq_addr, b.rq_addr] {
        assert!(is_device_address(x), "{b:?}");
        assert!((on_chip.base..on_chip.base + on_chip.size).contains(&x), "{b:?} {on_chip:?}");
    }
    let st = rig.stats();
    assert_eq!(st["rdma"]["qps"], 2, "{st}");
    // The on-chip rings are carved from the same allocator as client allocations.
    assert!(st["device"]["on-chip"]["used"].as_u64().unwrap() > 0, "{st}");

    dev.rdma_connect(a.qpn, b.qpn, LOOPBACK, 4096).unwrap();
    // MTU 0: the route's (loopback carries 4096, the same as A's).
    dev.rdma_connect(b.qpn, a.qpn, LOOPBACK, 0).unwrap();

    // WRITE 64 KiB from host memory into on-board device memory.
    let whole = |addr, lkey| RdmaSge { addr, lkey, len: N as u32 };
    dev.rdma_post_write(a.qpn, 1, whole(src.iova(), src_l), devbuf, dev_r).unwrap();
    one_cqe(&dev, a.qpn, 1, WC_RDMA_WRITE);
    let mut got = vec![0u8; N];
    dev.read_device(devbuf, &mut got).unwrap();
    assert!(got == data, "device memory differs from what was written");

    // READ it back into another host buffer.
    dev.rdma_post_read(a.qpn, 2, whole(back.iova(), back_l), devbuf, dev_r).unwrap();
    assert_eq!(one_cqe(&dev, a.qpn, 2, WC_RDMA_READ), N as u32);
    let mut again = vec![0u8; N];
    back.read(0, &mut again).unwrap();
    assert!(again == data, "READ result differs");

    // SEND / RECV: B receives into the back buffer's first KiB.
    back.write(0, &[0u8; 1024]).unwrap();
    dev.rdma_post_recv(b.qpn, 3, RdmaSge { addr: back.iova(), lkey: back_l, len: 1024 }).unwrap();
    dev.rdma_post_send(a.qpn, 4, RdmaSge { addr: src.iova() + 100, lkey: src_l, len: 300 })
        .unwrap();
    one_cqe(&dev, a.qpn, 4, WC_SEND);
    assert_eq!(one_cqe(&dev, b.qpn, 3, WC_RECV), 300);
    let mut msg = vec![0u8; 301];
    back.read(0, &mut msg).unwrap();
    assert_eq!(&msg[..300], &data[100..400]);
    assert_eq!(msg[300], 0, "nothing past the message");
    assert!(dev.rdma_poll_cq(a.qpn, 8).unwrap().is_empty());

    // A registration holding a QP's rings cannot go while the QP lives.
    assert_eq!(
        refused_code(dev.request(&snic_host::Request::UnregisterHost { iova: rings.iova() }, &[])),
        "busy"
    );
    dev.rdma_destroy_qp(a.qpn).unwrap();
    assert_eq!(refused_code(dev.rdma_poll_cq(a.qpn, 1)), "no_qp");
}

#[test]
fn clients_are_isolated_and_disconnect_reclaims() {
    let rig = Rig::start("iso", true);
    let one = rig.connect("one");
    let buf = one.alloc_host(8192).unwrap();
    let devbuf = one.alloc_device(DevKind::OnBoard, 8192, 4096).unwrap();
    let (lkey, _) = one.rdma_reg_mr(buf.iova(), 8192, rdma_access::LOCAL_WRITE).unwrap();
    let (dkey, _) = one.rdma_reg_mr(devbuf, 4096, rdma_access::ALL).unwrap();
    let qp = one.rdma_create_qp(Placement::OnBoard, 16).unwrap();
    one.rdma_connect(qp.qpn, qp.qpn, LOOPBACK, 1024).unwrap();
    let before = rig.stats()["device"]["on-board"]["used"].as_u64().unwrap();

    let two = rig.connect("two");
    let sge = RdmaSge { addr: buf.iova(), lkey, len: 64 };
    // Not its QP.
    assert_eq!(refused_code(two.rdma_post_send(qp.qpn, 1, sge)), "no_qp");
    assert_eq!(refused_code(two.rdma_poll_cq(qp.qpn, 1)), "no_qp");
    assert_eq!(refused_code(two.rdma_destroy_qp(qp.qpn)), "no_qp");
    // Not its keys, even on its own QP.
    let own = two.rdma_create_qp(Placement::OnChip, 4).unwrap();
    two.rdma_connect(own.qpn, own.qpn, LOOPBACK, 1024).unwrap();
    assert_eq!(refused_code(two.rdma_post_send(own.qpn, 1, sge)), "bad_key");
    assert_eq!(refused_code(two.rdma_post_recv(own.qpn, 1, sge)), "bad_key");
    assert_eq!(refused_code(two.rdma_dereg_mr(dkey)), "bad_key");
    // Not its memory: the first client's registration or device allocation.
    assert_eq!(refused_code(two.rdma_reg_mr(buf.iova(), 64, 1)), "bad_address");
    assert_eq!(refused_code(two.rdma_reg_mr(devbuf, 64, 1)), "bad_address");
    let two_buf = two.alloc_host(4096).unwrap();
    let hosted = two.rdma_create_qp(Placement::Host(&two_buf), 4).unwrap();
    assert!(hosted.sq_addr >= two_buf.iova(), "rings in the second client's own buffer");
    // Bad requests are refused, not fatal.
    assert_eq!(refused_code(two.rdma_reg_mr(two_buf.iova(), 64, 0x100)), "bad_request");
    assert_eq!(refused_code(two.rdma_create_qp(Placement::OnChip, 0)), "bad_request");
    assert_eq!(refused_code(two.rdma_connect(own.qpn, 1, LOOPBACK, 1000)), "bad_request");

    // The first client cannot free memory an MR still covers.
    assert_eq!(refused_code(one.free_device(devbuf)), "busy");
    one.rdma_dereg_mr(dkey).unwrap();

    // The first client goes: everything RDMA it had is reclaimed.
    drop(buf);
    drop(one);
    let t = Instant::now();
    let st = loop {
        let st = rig.stats();
        if st["rdma"]["clients_reclaimed"] == 1 {
            break st;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "no reclaim: {st}");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(st["rdma"]["qps_reclaimed"], 1, "{st}");
    assert_eq!(st["rdma"]["mrs_reclaimed"], 1, "{st}");
    assert_eq!(st["rdma"]["qps"], 2, "the second client's QPs stay: {st}");
    let after = st["device"]["on-board"]["used"].as_u64().unwrap();
    assert!(after + 8192 < before, "rings and allocation freed: {before} -> {after}");
    // The second client still works.
    assert!(two.rdma_poll_cq(own.qpn, 4).unwrap().is_empty());
}

#[test]
fn rdma_requests_are_refused_without_rdma() {
    let rig = Rig::start("off", false);
    let dev = rig.connect("off");
    let buf = dev.alloc_host(4096).unwrap();
    assert_eq!(refused_code(dev.rdma_reg_mr(buf.iova(), 64, 1)), "rdma_disabled");
    assert_eq!(refused_code(dev.rdma_create_qp(Placement::OnChip, 4)), "rdma_disabled");
    assert_eq!(rig.stats()["rdma"]["enabled"], false);
}

/// On a NIC, `connect` refuses what its wire could never carry: a path MTU above the wire's, a
/// peer that is the NIC itself (a wire does not loop back), a group address, another family
/// than the NIC's addresses'. MTU 0 takes the wire's (1024 at MTU 1500).
#[test]
fn a_nic_refuses_connections_its_wire_cannot_carry() {
    let rig = Rig::start_nic("nic-connect");
    let dev = rig.connect("nic");
    let qp = dev.rdma_create_qp(Placement::OnChip, 8).unwrap();
    let peer: IpAddr = "10.9.0.2".parse().unwrap();
    let code = |ip: &str, mtu| refused_code(dev.rdma_connect(qp.qpn, 1, ip.parse().unwrap(), mtu));
    assert_eq!(code("10.9.0.2", 4096), "bad_request", "4096 over a 1500-byte wire");
    assert_eq!(code("10.9.0.2", 2048), "bad_request", "2048 needs a 2112-byte wire");
    assert_eq!(code("10.9.0.1", 0), "bad_request", "its own address");
    assert_eq!(code("fd09::1", 0), "bad_request", "its own IPv6 address");
    assert_eq!(code("224.0.0.1", 0), "bad_request", "a group");
    assert_eq!(code("ff02::1", 0), "bad_request", "an IPv6 group");
    assert_eq!(code("255.255.255.255", 0), "bad_request", "broadcast");
    dev.rdma_connect(qp.qpn, 1, peer, 1024).expect("1024 fits the wire");
    let other = dev.rdma_create_qp(Placement::OnChip, 8).unwrap();
    dev.rdma_connect(other.qpn, 2, "fd09::2".parse().unwrap(), 0).expect("IPv6, the wire's MTU");
    let st = rig.stats();
    // The connects started resolving both peers at once (ARP and ND solicitations, sent).
    assert_eq!(st["nic"]["neighbours"]["solicits_sent"], 2, "{st}");
}
