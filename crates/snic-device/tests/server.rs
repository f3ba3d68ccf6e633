//! The host-interface server driven by a minimal client of its own over the raw protocol
//! (SeqPacket + JSON messages + shared mappings), independent of the host library.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{Ordering, fence};
use std::time::{Duration, Instant};

use serde_json::Value;
use snic_compute::{KernelCmd, KernelStatus};
use snic_device::{Server, ServerConfig, ServerHandle};
use snic_dma::desc::{CMPT_SIZE, Completion, DESC_SIZE, Descriptor, flags};
use snic_hostif::abi;
use snic_hostif::proto::{DevKind, DirName, QueueMode, RdmaRequest, Request, Response};
use snic_hostif::shm::{EventFd, Mapping, SeqPacket};

fn start(dir: &Path, workers: u32, spin_us: u64) -> ServerHandle {
    let cfg = ServerConfig {
        socket: dir.join("snic.sock"),
        on_chip: 1 << 20,
        on_board: 4 << 20,
        workers,
        huge: false,
        spin_us,
        rdma: None,
        ..ServerConfig::default()
    };
    Server::start(cfg).expect("server starts")
}

/// Wait (at most 10 s, so a bug hangs no test) until `f` holds.
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(10), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Host memory layout of a test queue (offsets in the registered buffer).
const H2C_RING: usize = 0;
const C2H_RING: usize = 4096;
const CMPT_RING: usize = 8192;
const DATA: usize = 16384;
const HOST_LEN: usize = 64 * 1024;
const RING: u32 = 16;

struct Client {
    sock: SeqPacket,
    id: u32,
    workers: u32,
    bar: Mapping,
    nic: Mapping,
    kicks: Vec<EventFd>,
}

fn call_raw(sock: &SeqPacket, msg: &[u8], fds: &[BorrowedFd<'_>]) -> (Response, Vec<OwnedFd>) {
    sock.send(msg, fds).expect("send");
    let mut buf = vec![0u8; 65536];
    let (n, got) = sock.recv(&mut buf).expect("recv");
    assert!(n > 0, "server closed the connection");
    (Response::from_bytes(&buf[..n]).expect("response decodes"), got)
}

fn error_code(r: &Response) -> &str {
    match r {
        Response::Error { code, .. } => code,
        other => panic!("expected an error, got {other:?}"),
    }
}

impl Client {
    fn connect(path: &Path) -> Client {
        let sock = SeqPacket::connect(path).expect("connect");
        let hello = Request::Hello { name: "test".into(), version: abi::VERSION_VALUE };
        let (r, fds) = call_raw(&sock, &hello.to_bytes(), &[]);
        let Response::Welcome { client, workers, compute_workers, version, max_queues, .. } = r
        else {
            panic!("expected welcome, got {r:?}")
        };
        assert_eq!((version, max_queues, compute_workers), (abi::VERSION_VALUE, 2048, 1));
        assert_eq!(fds.len(), 2 + workers as usize + 1);
        let mut fds = fds.into_iter();
        let bar = Mapping::map_fd(fds.next().unwrap().as_fd(), abi::BAR_SIZE).unwrap();
        let nic = Mapping::map_fd(fds.next().unwrap().as_fd(), abi::NIC_PAGE_SIZE).unwrap();
        let kicks = fds.map(EventFd::from_fd).collect();
        Client { sock, id: client, workers, bar, nic, kicks }
    }

    fn call(&self, req: &Request, fds: &[BorrowedFd<'_>]) -> Response {
        call_raw(&self.sock, &req.to_bytes(), fds).0
    }

    fn ok(&self, req: &Request) {
        assert_eq!(self.call(req, &[]), Response::Ok, "{req:?}");
    }

    fn register(&self, len: usize) -> (Mapping, u64) {
        let (map, fd) = Mapping::memfd("test-host", len, false).unwrap();
        match self.call(&Request::RegisterHost { len: len as u64 }, &[fd.as_fd()]) {
            Response::Registered { iova } => (map, iova),
            other => panic!("register: {other:?}"),
        }
    }

    fn alloc(&self, kind: DevKind, size: u64) -> u64 {
        match self.call(&Request::AllocDevice { kind, size, align: 64 }, &[]) {
            Response::Allocated { addr } => addr,
            other => panic!("alloc: {other:?}"),
        }
    }

    fn stats(&self) -> Value {
        match self.call(&Request::Stats, &[]) {
            Response::Stats { stats } => stats,
            other => panic!("stats: {other:?}"),
        }
    }

    /// Add (and start) an MM queue with its rings in `iova`'s buffer; returns (qid, worker).
    fn mm_queue(&self, iova: u64, irq: Option<&EventFd>) -> (u16, u32) {
        let req = queue_req(QueueMode::Mm, iova, irq.is_some());
        let fds: Vec<BorrowedFd<'_>> = irq.iter().map(|e| e.fd()).collect();
        let (qid, worker) = match self.call(&req, &fds) {
            Response::Queue { qid, worker } => (qid, worker),
            other => panic!("add queue: {other:?}"),
        };
        assert_eq!(worker, abi::queue_worker(qid, self.workers));
        assert_eq!(self.bar.load_u32(abi::queue_slot(qid) + abi::Q_STATE), abi::QSTATE_ADDED);
        self.ok(&Request::StartQueue { qid });
        assert_eq!(self.bar.load_u32(abi::queue_slot(qid) + abi::Q_STATE), abi::QSTATE_RUNNING);
        (qid, worker)
    }

    /// Store a register, then kick worker `w` if it sleeps (the host side of the protocol).
    fn doorbell(&self, off: usize, v: u32, w: u32) {
        self.bar.store_u32(off, v);
        fence(Ordering::SeqCst);
        if self.nic.load_u32(abi::worker_sleeping(w)) == 1 {
            self.kicks[w as usize].signal().unwrap();
        }
    }
}

fn queue_req(mode: QueueMode, iova: u64, interrupt: bool) -> Request {
    Request::AddQueue {
        mode,
        ring_size: RING,
        cmpt_size: RING,
        h2c_ring: iova + H2C_RING as u64,
        c2h_ring: iova + C2H_RING as u64,
        cmpt_ring: iova + CMPT_RING as u64,
        align: 1,
        interrupt,
        stream_to: None,
    }
}

fn put_desc(host: &Mapping, at: usize, d: &Descriptor) {
    host.write(at, &d.encode()).unwrap();
}

/// Wait for completion entry `i` (first pass of the ring: colour 1) and decode it.
fn completion(host: &Mapping, i: u32) -> Completion {
    let at = CMPT_RING + (i % RING) as usize * CMPT_SIZE;
    let colour = (i / RING).is_multiple_of(2);
    wait_until("a completion entry", || (host.load_u32(at + 12) & 1 != 0) == colour);
    let mut b = [0u8; CMPT_SIZE];
    host.read(at, &mut b).unwrap();
    Completion::decode(&b)
}

#[test]
fn hello_mm_queue_moves_data_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), 2, 200);
    let c = Client::connect(server.socket_path());
    assert_eq!(c.id, 1);
    assert_eq!(c.bar.load_u32(abi::ID), abi::ID_VALUE);
    assert_eq!(c.bar.load_u32(abi::VERSION), abi::VERSION_VALUE);
    assert_eq!(c.bar.load_u32(abi::CLIENT), 1);
    assert_eq!(c.bar.load_u32(abi::WORKERS), 2);
    assert_eq!(c.bar.load_u32(abi::MAX_QUEUES_REG), 2048);
    assert_eq!(c.bar.load_u32(abi::COMPUTE_WORKERS), 1);
    let kernels = c.bar.load_u32(abi::KERNELS);
    assert_eq!(kernels, snic_compute::Kernels::with_builtins().mask());
    assert_ne!(kernels & 1 << abi::kernel::COPY, 0);

    let (host, iova) = c.register(HOST_LEN);
    assert_eq!(iova, 1 << 40);
    let dev = c.alloc(DevKind::OnBoard, 4096);
    assert!(snic_dma::is_device_address(dev));
    let (qid, w) = c.mm_queue(iova, None);
    let slot = abi::queue_slot(qid);

    let payload: Vec<u8> = (0..256u32).map(|i| (i * 7 + 3) as u8).collect();
    host.write(DATA, &payload).unwrap();
    put_desc(&host, H2C_RING, &Descriptor::new(iova + DATA as u64, dev + 128, 256));
    c.doorbell(slot + abi::Q_H2C_PIDX, 1, w);
    let e = completion(&host, 0);
    assert_eq!((e.status, e.len, e.dir, e.qid, e.index), (0, 256, 0, qid, 1));
    wait_until("write-back", || {
        c.bar.load_u32(slot + abi::Q_H2C_CIDX) == 1 && c.bar.load_u32(slot + abi::Q_CMPT_PIDX) == 1
    });
    c.doorbell(slot + abi::Q_CMPT_CIDX, 1, w);

    // Read it back with a C2H transfer into another part of the host buffer.
    put_desc(&host, C2H_RING, &Descriptor::new(dev + 128, iova + DATA as u64 + 8192, 256));
    c.doorbell(slot + abi::Q_C2H_PIDX, 1, w);
    let e = completion(&host, 1);
    assert_eq!((e.status, e.len, e.dir), (0, 256, 1));
    let mut back = vec![0u8; 256];
    host.read(DATA + 8192, &mut back).unwrap();
    assert_eq!(back, payload);
    wait_until("C2H write-back", || c.bar.load_u32(slot + abi::Q_C2H_CIDX) == 1);

    // A descriptor into memory the client does not own gets an error completion.
    put_desc(&host, H2C_RING + DESC_SIZE, &Descriptor::new(2 << 40, dev, 16));
    c.doorbell(slot + abi::Q_H2C_PIDX, 2, w);
    let e = completion(&host, 2);
    assert_eq!(e.status, snic_dma::Status::Unmapped as u8);

    let s = c.stats();
    assert_eq!(s["clients"], 1);
    assert_eq!(s["queues"], 1);
    assert!(s["engine"]["descs"].as_u64().unwrap() >= 2, "{s}");
    assert_eq!(s["engine"]["h2c_bytes"], 256);
    assert_eq!(s["engine"]["c2h_bytes"], 256);
    assert_eq!(s["engine"]["errors"]["Unmapped"], 1);
    assert_eq!(s["device"]["on-board"]["used"], 4096);
    assert_eq!(s["device"]["on-chip"]["size"], 1 << 20);
    assert_eq!(server.stats()["queues"], 1);
    drop(c);
    server.shutdown().unwrap();
    assert!(!dir.path().join("snic.sock").exists());
}

#[test]
fn interrupt_queue_channel_runs_and_streaming_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), 2, 50);
    let c = Client::connect(server.socket_path());
    let (host, iova) = c.register(HOST_LEN);
    let dev = c.alloc(DevKind::OnChip, 8192);

    // Interrupt-mode queue: its eventfd is signalled when completions are written.
    let irq = EventFd::new().unwrap();
    let (qid, w) = c.mm_queue(iova, Some(&irq));
    host.write(DATA, b"interrupt me").unwrap();
    put_desc(&host, H2C_RING, &Descriptor::new(iova + DATA as u64, dev, 12));
    c.doorbell(abi::queue_slot(qid) + abi::Q_H2C_PIDX, 1, w);
    assert!(irq.wait(Some(Duration::from_secs(10))).unwrap() > 0, "no interrupt");
    assert_eq!(completion(&host, 0).status, 0);
    assert_eq!(c.bar.load_u32(abi::queue_slot(qid) + abi::Q_CMPT_PIDX), 1);

    // H2C channel 0: a two-descriptor chain host -> device.
    let ch_irq = EventFd::new().unwrap();
    let r = c.call(
        &Request::SetChannel { dir: DirName::H2c, index: 0, align: 1, interrupt: true },
        &[ch_irq.fd()],
    );
    let Response::Channel { worker: hw } = r else { panic!("{r:?}") };
    assert_eq!(hw, abi::channel_worker(snic_dma::Dir::H2c, 0, 2));
    let chain = DATA + 4096;
    host.write(DATA + 1024, b"first half|second half").unwrap();
    let d0 = Descriptor {
        src: iova + DATA as u64 + 1024,
        dst: dev + 4096,
        len: 11,
        flags: flags::SOP | flags::CHAIN,
        next: iova + chain as u64 + DESC_SIZE as u64,
    };
    let d1 = Descriptor::new(iova + DATA as u64 + 1035, dev + 4107, 11);
    put_desc(&host, chain, &d0);
    put_desc(&host, chain + DESC_SIZE, &Descriptor { flags: flags::EOP, ..d1 });
    let blk = abi::channel_block(snic_dma::Dir::H2c, 0);
    assert_eq!(c.bar.load_u32(blk + abi::CH_CONTROL), 1);
    let first = iova + chain as u64;
    c.bar.store_u32(blk + abi::CH_DESC_LO, first as u32);
    c.bar.store_u32(blk + abi::CH_DESC_HI, (first >> 32) as u32);
    c.doorbell(blk + abi::CH_RUN_SEQ, 1, hw);
    wait_until("H2C channel run", || c.bar.load_u32(blk + abi::CH_DONE_SEQ) == 1);
    assert_eq!(c.bar.load_u32(blk + abi::CH_STATUS), 0);
    assert_eq!(c.bar.load_u32(blk + abi::CH_DESCS), 2);
    assert_eq!(c.bar.load_u32(blk + abi::CH_BYTES_LO), 22);
    assert!(ch_irq.wait(Some(Duration::from_secs(10))).unwrap() > 0, "no channel interrupt");

    // C2H channel 1 (polled, on the other worker) reads the device bytes back.
    let r = c.call(
        &Request::SetChannel { dir: DirName::C2h, index: 1, align: 1, interrupt: false },
        &[],
    );
    let Response::Channel { worker: cw } = r else { panic!("{r:?}") };
    let cblk = abi::channel_block(snic_dma::Dir::C2h, 1);
    let back = chain + 1024;
    put_desc(&host, back, &Descriptor::new(dev + 4096, iova + DATA as u64 + 2048, 22));
    let first = iova + back as u64;
    c.bar.store_u32(cblk + abi::CH_DESC_LO, first as u32);
    c.bar.store_u32(cblk + abi::CH_DESC_HI, (first >> 32) as u32);
    c.doorbell(cblk + abi::CH_RUN_SEQ, 1, cw);
    wait_until("C2H channel run", || c.bar.load_u32(cblk + abi::CH_DONE_SEQ) == 1);
    let mut got = [0u8; 22];
    host.read(DATA + 2048, &mut got).unwrap();
    assert_eq!(&got, b"first half|second half");

    // A failing run reports the status and the faulting descriptor.
    let bad = chain + 2048;
    put_desc(&host, bad, &Descriptor::new(dev, 3 << 40, 4));
    let first = iova + bad as u64;
    c.bar.store_u32(cblk + abi::CH_DESC_LO, first as u32);
    c.bar.store_u32(cblk + abi::CH_DESC_HI, (first >> 32) as u32);
    c.doorbell(cblk + abi::CH_RUN_SEQ, 2, cw);
    wait_until("failing channel run", || c.bar.load_u32(cblk + abi::CH_DONE_SEQ) == 2);
    assert_eq!(c.bar.load_u32(cblk + abi::CH_STATUS), snic_dma::Status::Unmapped as u32);
    assert_eq!(c.bar.load_u32(cblk + abi::CH_FAULT_LO), first as u32);

    // Streaming loopback: an H2C packet lands in the same queue's C2H buffer.
    let (host2, iova2) = c.register(HOST_LEN);
    let r = c.call(&queue_req(QueueMode::St, iova2, false), &[]);
    let Response::Queue { qid: sq, worker: sw } = r else { panic!("{r:?}") };
    c.ok(&Request::StartQueue { qid: sq });
    let slot = abi::queue_slot(sq);
    put_desc(&host2, C2H_RING, &Descriptor::new(0, iova2 + DATA as u64 + 4096, 64));
    c.doorbell(slot + abi::Q_C2H_PIDX, 1, sw);
    host2.write(DATA, b"looped packet").unwrap();
    put_desc(&host2, H2C_RING, &Descriptor::new(iova2 + DATA as u64, 0, 13));
    c.doorbell(slot + abi::Q_H2C_PIDX, 1, sw);
    let a = completion(&host2, 0);
    let b = completion(&host2, 1);
    let rx = if a.dir == 1 { a } else { b };
    assert_eq!((rx.dir, rx.status, rx.len), (1, 0, 13));
    let mut got = [0u8; 13];
    host2.read(DATA + 4096, &mut got).unwrap();
    assert_eq!(&got, b"looped packet");
    let s = server.stats();
    assert_eq!(s["engine"]["channel_runs"], 3);
    assert_eq!(s["engine"]["stream_rx"], 1);
}

/// Write command `n` (free-running) into kernel `slot`'s control FIFO: a COPY of `len` bytes.
fn put_copy(bar: &Mapping, slot: u32, n: u32, workload: u32, src: u64, dst: u64, len: u64) {
    let cmd = KernelCmd::new(abi::kernel::COPY, workload).addr(src, len).addr(dst, len);
    bar.write(abi::kctl_slot(slot, n), &cmd.encode()).unwrap();
}

/// Status entry `n` of kernel `slot`: (workload, status, result).
fn kstatus(bar: &Mapping, slot: u32, n: u32) -> (u32, u32, u64) {
    let mut b = [0u8; abi::KSTS_SIZE];
    bar.read(abi::ksts_slot(slot, n), &mut b).unwrap();
    let st = KernelStatus::decode(&b);
    (st.workload, st.status, st.result)
}

#[test]
fn kernel_copy_through_its_slot() {
    const K: u32 = abi::kernel::COPY;
    let reg = |r| abi::kernel_reg(K, r);
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), 2, 50);
    let c = Client::connect(server.socket_path());
    // The compute worker comes after the two DMA workers.
    let w = c.workers + abi::kernel_worker(K, 1);
    let (host, iova) = c.register(HOST_LEN);
    let src = iova + DATA as u64;
    let dst = src + 4096;
    host.write(DATA, b"lookaside kernel").unwrap();
    let irq = EventFd::new().unwrap();
    c.ok_with(&Request::KernelIrq { kernel: K }, &[irq.fd()]);
    c.bar.store_u32(reg(abi::K_CONTROL), abi::K_CONTROL_IRQ);

    put_copy(&c.bar, K, 0, 42, src, dst, 16);
    c.doorbell(reg(abi::KCTL_PIDX), 1, w);
    wait_until("kernel status", || c.bar.load_u32(reg(abi::KSTS_PIDX)) == 1);
    assert_eq!(kstatus(&c.bar, K, 0), (42, abi::kernel::OK, 16));
    assert_eq!(c.bar.load_u32(reg(abi::KCTL_CIDX)), 1);
    assert_eq!(c.bar.load_u32(reg(abi::K_RUNS)), 1);
    assert_eq!(c.bar.load_u32(reg(abi::K_LAST_STATUS)), abi::kernel::OK);
    let mut got = [0u8; 16];
    host.read(DATA + 4096, &mut got).unwrap();
    assert_eq!(&got, b"lookaside kernel");
    assert!(irq.wait(Some(Duration::from_secs(10))).unwrap() > 0, "no kernel interrupt");
    c.bar.store_u32(reg(abi::KSTS_CIDX), 1);

    // Another client's window, an overlap, a command in the wrong kernel's FIFO.
    put_copy(&c.bar, K, 1, 1, 2 << 40, dst, 4);
    put_copy(&c.bar, K, 2, 2, src, src + 8, 16);
    let other = KernelCmd::new(5, 3).addr(src, 4).addr(dst, 4);
    c.bar.write(abi::kctl_slot(K, 3), &other.encode()).unwrap();
    c.doorbell(reg(abi::KCTL_PIDX), 4, w);
    wait_until("three statuses", || c.bar.load_u32(reg(abi::KSTS_PIDX)) == 4);
    assert_eq!(kstatus(&c.bar, K, 1), (1, abi::kernel::BAD_ADDRESS, 0));
    assert_eq!(kstatus(&c.bar, K, 2), (2, abi::kernel::OVERLAP, 0));
    assert_eq!(kstatus(&c.bar, K, 3), (3, abi::kernel::BAD_ARGS, 0));
    assert_eq!(c.bar.load_u32(reg(abi::K_ERRORS)), 3);
    host.read(DATA, &mut got).unwrap();
    assert_eq!(&got, b"lookaside kernel", "a refused command wrote memory");

    // A full status FIFO holds the kernel back until the host consumes statuses.
    for n in 4..4 + abi::KFIFO_DEPTH {
        put_copy(&c.bar, K, n, n, src, dst, 8);
    }
    c.doorbell(reg(abi::KCTL_PIDX), 4 + abi::KFIFO_DEPTH, w);
    wait_until("FIFO fills", || c.bar.load_u32(reg(abi::KSTS_PIDX)) == 1 + abi::KFIFO_DEPTH);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(c.bar.load_u32(reg(abi::KSTS_PIDX)), 1 + abi::KFIFO_DEPTH, "status FIFO overrun");
    c.bar.store_u32(reg(abi::KSTS_CIDX), 1 + abi::KFIFO_DEPTH);
    c.doorbell(reg(abi::KCTL_PIDX), 4 + abi::KFIFO_DEPTH, w);
    wait_until("the rest", || c.bar.load_u32(reg(abi::KSTS_PIDX)) == 4 + abi::KFIFO_DEPTH);
    let last = 3 + abi::KFIFO_DEPTH;
    assert_eq!(kstatus(&c.bar, K, last), (last, abi::kernel::OK, 8));
    // A producer index claiming more than the FIFO holds is ignored (and counted).
    c.doorbell(reg(abi::KCTL_PIDX), 100, w);
    wait_until("ignored", || c.bar.load_u32(abi::DOORBELLS_IGNORED) == 1);
    let s = server.stats();
    assert_eq!(s["kernels_run"], u64::from(3 + abi::KFIFO_DEPTH), "{s}");
    assert_eq!(s["kernels"]["copy"]["errors"], 2, "{s}");
    assert_eq!(s["kernel_fifo_ignored"], 1, "{s}");
    // Kernel ids past the slots have no eventfd.
    assert_eq!(
        error_code(&c.call(&Request::KernelIrq { kernel: abi::MAX_KERNELS }, &[irq.fd()])),
        "bad_request"
    );
}

impl Client {
    fn ok_with(&self, req: &Request, fds: &[BorrowedFd<'_>]) {
        assert_eq!(self.call(req, fds), Response::Ok, "{req:?}");
    }
}

#[test]
fn bad_requests_get_error_responses() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), 2, 50);
    let path = server.socket_path().to_path_buf();

    // Before hello.
    let raw = SeqPacket::connect(&path).unwrap();
    let (r, _) = call_raw(&raw, &Request::Stats.to_bytes(), &[]);
    assert_eq!(error_code(&r), "bad_state");
    for _ in 0..50 {
        let (r, _) = call_raw(&raw, b"\xff{garbage", &[]);
        assert_eq!(error_code(&r), "bad_request");
    }
    let (r, _) = call_raw(&raw, br#"{"op":"hello","name":"x","version":99}"#, &[]);
    assert_eq!(error_code(&r), "version");
    // Version 1 (one kernel FIFO for all kernels) is gone.
    let (r, _) = call_raw(&raw, br#"{"op":"hello","name":"x","version":1}"#, &[]);
    assert_eq!(error_code(&r), "version");
    let (r, _) = call_raw(&raw, br#"{"op":"hello","name":"x","version":2}"#, &[]);
    assert!(matches!(r, Response::Welcome { .. }), "{r:?}");
    let (r, _) = call_raw(&raw, br#"{"op":"hello","name":"x","version":2}"#, &[]);
    assert_eq!(error_code(&r), "bad_state");
    drop(raw);

    let c = Client::connect(&path);
    let (_host, iova) = c.register(HOST_LEN);
    let err = |req: Request, fds: &[BorrowedFd<'_>]| {
        let r = c.call(&req, fds);
        error_code(&r).to_string()
    };
    let dev = c.alloc(DevKind::OnChip, 4096);
    assert_eq!(
        err(Request::AllocDevice { kind: DevKind::OnChip, size: 0, align: 64 }, &[]),
        "bad_request"
    );
    assert_eq!(
        err(Request::AllocDevice { kind: DevKind::OnChip, size: 64, align: 3 }, &[]),
        "bad_request"
    );
    assert_eq!(
        err(Request::AllocDevice { kind: DevKind::OnBoard, size: 1 << 30, align: 64 }, &[]),
        "no_memory"
    );
    assert_eq!(err(Request::FreeDevice { addr: dev + 64 }, &[]), "not_owner");
    assert_eq!(err(Request::StartQueue { qid: 5 }, &[]), "no_queue");
    assert_eq!(err(Request::DeleteQueue { qid: 4000 }, &[]), "no_queue");
    assert_eq!(err(Request::RegisterHost { len: 4096 }, &[]), "bad_request");
    let (_small, fd) = Mapping::memfd("small", 4096, false).unwrap();
    assert_eq!(err(Request::RegisterHost { len: 1 << 20 }, &[fd.as_fd()]), "bad_fd");
    assert_eq!(err(Request::RegisterHost { len: 0 }, &[fd.as_fd()]), "bad_request");
    // A plain file could be truncated under snic's mapping (SIGBUS): refused.
    let file = tempfile::tempfile().unwrap();
    file.set_len(8192).unwrap();
    assert_eq!(err(Request::RegisterHost { len: 8192 }, &[file.as_fd()]), "bad_fd");
    assert_eq!(err(Request::UnregisterHost { iova: iova + 4096 }, &[]), "no_region");
    let mut q = queue_req(QueueMode::Mm, iova, false);
    if let Request::AddQueue { ring_size, .. } = &mut q {
        *ring_size = 3;
    }
    assert_eq!(err(q, &[]), "bad_request");
    assert_eq!(err(queue_req(QueueMode::Mm, 5 << 40, false), &[]), "bad_address");
    assert_eq!(err(queue_req(QueueMode::Mm, iova, true), &[]), "bad_request");
    let mut q = queue_req(QueueMode::Mm, iova, false);
    if let Request::AddQueue { stream_to, .. } = &mut q {
        *stream_to = Some(0);
    }
    assert_eq!(err(q, &[]), "bad_request");
    let set = Request::SetChannel { dir: DirName::H2c, index: 7, align: 1, interrupt: false };
    assert_eq!(err(set, &[]), "bad_request");
    assert_eq!(err(Request::KernelIrq { kernel: 0 }, &[]), "bad_request");
    let rdma = Request::Rdma(RdmaRequest::PollCq { qpn: 1, max: 1 });
    assert_eq!(err(rdma, &[]), "rdma_disabled");

    // A second client cannot free, or put rings in, the first one's memory.
    let d = Client::connect(&path);
    assert_eq!(error_code(&d.call(&Request::FreeDevice { addr: dev }, &[])), "not_owner");
    assert_eq!(error_code(&d.call(&queue_req(QueueMode::Mm, iova, false), &[])), "bad_address");
    assert_eq!(error_code(&d.call(&Request::UnregisterHost { iova }, &[])), "no_region");
    // The first client is still served normally.
    c.ok(&Request::FreeDevice { addr: dev });
    c.ok(&Request::UnregisterHost { iova });
    assert_eq!(c.stats()["clients"], 2);
}

#[test]
fn disconnect_reclaims_everything_and_others_keep_working() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), 2, 50);
    let a = Client::connect(server.socket_path());
    let b = Client::connect(server.socket_path());
    let (_ha, ia) = a.register(HOST_LEN);
    let (_ha2, _) = a.register(8192);
    a.alloc(DevKind::OnBoard, 65536);
    a.alloc(DevKind::OnChip, 4096);
    let (qa, _) = a.mm_queue(ia, None);
    let set = Request::SetChannel { dir: DirName::H2c, index: 0, align: 1, interrupt: false };
    assert!(matches!(a.call(&set, &[]), Response::Channel { .. }));

    let (hb, ib) = b.register(HOST_LEN);
    let db = b.alloc(DevKind::OnBoard, 4096);
    let (qb, wb) = b.mm_queue(ib, None);
    assert_ne!(qa, qb);
    drop(a);
    wait_until("reclaim", || server.stats()["clients_reclaimed"] == 1);
    let s = server.stats();
    assert_eq!(s["clients"], 1);
    assert_eq!(s["queues"], 1);
    assert_eq!(s["queues_reclaimed"], 1);
    assert_eq!(s["channels_reclaimed"], 1);
    assert_eq!(s["regions_reclaimed"], 2);
    assert_eq!(s["device_bytes_freed"], 65536 + 4096);
    assert_eq!(s["device"]["on-board"]["used"], 4096);
    assert_eq!(s["device"]["on-chip"]["used"], 0);

    // B moves data as before.
    hb.write(DATA, b"still here").unwrap();
    put_desc(&hb, H2C_RING, &Descriptor::new(ib + DATA as u64, db, 10));
    put_desc(&hb, C2H_RING, &Descriptor::new(db, ib + DATA as u64 + 100, 10));
    let slot = abi::queue_slot(qb);
    b.doorbell(slot + abi::Q_H2C_PIDX, 1, wb);
    assert_eq!(completion(&hb, 0).status, 0);
    b.doorbell(slot + abi::Q_C2H_PIDX, 1, wb);
    assert_eq!(completion(&hb, 1).status, 0);
    let mut got = [0u8; 10];
    hb.read(DATA + 100, &mut got).unwrap();
    assert_eq!(&got, b"still here");

    // A's freed device memory is available again: the whole on-chip region fits.
    assert!(matches!(
        b.call(&Request::AllocDevice { kind: DevKind::OnChip, size: 1 << 20, align: 64 }, &[]),
        Response::Allocated { .. }
    ));
    // A new client gets a fresh id and may reuse A's queue id.
    let c = Client::connect(server.socket_path());
    assert_eq!(c.id, 3);
    let (_hc, ic) = c.register(HOST_LEN);
    let (qc, _) = c.mm_queue(ic, None);
    assert_eq!(qc, qa);
}

#[test]
fn idle_worker_sleeps_and_a_kick_wakes_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), 1, 0);
    let c = Client::connect(server.socket_path());
    let (host, iova) = c.register(HOST_LEN);
    let dev = c.alloc(DevKind::OnChip, 4096);
    let (qid, w) = c.mm_queue(iova, None);
    assert_eq!(w, 0);
    let slot = abi::queue_slot(qid);
    for i in 0..5u32 {
        wait_until("sleeping flag", || c.nic.load_u32(abi::worker_sleeping(0)) == 1);
        put_desc(&host, H2C_RING + i as usize * DESC_SIZE, &Descriptor::new(iova, dev, 64));
        c.doorbell(slot + abi::Q_H2C_PIDX, i + 1, 0);
        assert_eq!(completion(&host, i).status, 0);
        c.doorbell(slot + abi::Q_CMPT_CIDX, i + 1, 0);
    }
    let s = server.stats();
    assert!(s["worker_sleeps"].as_u64().unwrap() >= 5, "{s}");
    assert_eq!(s["engine"]["completions"], 5);
}
