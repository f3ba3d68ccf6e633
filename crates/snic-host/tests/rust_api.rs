//! The Rust API against an in-process snic server.

mod common;

use std::time::Duration;

use common::{REGS_KERNEL, SLEEP_KERNEL, TestServer, pattern};
use snic_dma::desc::flags;
use snic_host::{
    Completion, DevKind, Device, Dir, HostError, KernelCmd, QueueMode, QueueOpts, Status,
};
use snic_hostif::abi;

const T: Duration = Duration::from_secs(10);

/// Wait (up to T) for the queue's state register to read `want` (snic writes it back after
/// the completion entries).
fn wait_state(q: &snic_host::Queue, want: u32) {
    let start = std::time::Instant::now();
    while q.state() != want {
        assert!(start.elapsed() < T, "queue state {:#x}, want {want:#x}", q.state());
        std::thread::yield_now();
    }
}

fn wait_one(q: &mut snic_host::Queue) -> Completion {
    let mut c = [Completion::default()];
    assert_eq!(q.wait(&mut c, T).expect("completion"), 1);
    c[0]
}

#[test]
fn registers_and_identity() {
    let s = TestServer::start("regs", 2);
    let dev = Device::connect(&s.socket(), "regs").expect("connect");
    assert_eq!(dev.workers(), 2);
    assert_eq!(dev.reg_read(abi::ID as u32).unwrap(), abi::ID_VALUE);
    assert_eq!(dev.reg_read(abi::VERSION as u32).unwrap(), abi::VERSION_VALUE);
    assert_eq!(dev.reg_read(abi::CLIENT as u32).unwrap(), dev.client_id());
    assert_eq!(dev.reg_read(abi::WORKERS as u32).unwrap(), 2);
    dev.reg_write(abi::SCRATCH as u32, 0xDEAD_BEEF).unwrap();
    assert_eq!(dev.reg_read(abi::SCRATCH as u32).unwrap(), 0xDEAD_BEEF);
    assert!(matches!(dev.reg_read(3), Err(HostError::OutOfRange(_))));
    assert!(matches!(dev.reg_read(abi::BAR_SIZE as u32), Err(HostError::OutOfRange(_))));
    let kinds: Vec<_> = dev.device_regions().iter().map(|r| r.kind).collect();
    assert!(kinds.contains(&DevKind::OnChip) && kinds.contains(&DevKind::OnBoard), "{kinds:?}");
    // A second client gets its own id and its own scratch register.
    let dev2 = Device::connect(&s.socket(), "regs2").expect("connect 2");
    assert_ne!(dev2.client_id(), dev.client_id());
    assert_ne!(dev2.reg_read(abi::SCRATCH as u32).unwrap(), 0xDEAD_BEEF);
}

#[test]
fn device_memory_round_trip() {
    let s = TestServer::start("mem", 1);
    let dev = Device::connect(&s.socket(), "mem").expect("connect");
    // Larger than one bounce chunk, not a multiple of it.
    let data = pattern((1 << 20) * 2 + 1000, 7);
    let a = dev.alloc_device(DevKind::OnBoard, data.len() as u64, 4096).expect("alloc");
    assert!(snic_dma::is_device_address(a));
    dev.write_device(a, &data).expect("write");
    let mut back = vec![0u8; data.len()];
    dev.read_device(a, &mut back).expect("read");
    assert!(back == data, "device memory round trip differs");
    // On-chip too.
    let c = dev.alloc_device(DevKind::OnChip, 4096, 64).expect("alloc on-chip");
    dev.write_device(c, &data[..4096]).unwrap();
    let mut b2 = vec![0u8; 4096];
    dev.read_device(c, &mut b2).unwrap();
    assert_eq!(b2, data[..4096]);
    // Past the end of on-board memory: a DMA error, and the library keeps working afterwards.
    let regions = dev.device_regions();
    let ob = regions.iter().find(|r| r.kind == DevKind::OnBoard).expect("on-board region");
    let e = dev.write_device(ob.base + ob.size - 10, &[0u8; 100]).unwrap_err();
    assert!(matches!(e, HostError::Dma(Status::OutOfBounds)), "{e}");
    dev.read_device(c, &mut b2).expect("still works");
    dev.free_device(a).expect("free");
    dev.free_device(c).expect("free on-chip");
    assert!(matches!(dev.free_device(a), Err(HostError::Refused { .. })));
    // Too big: refused.
    assert!(matches!(
        dev.alloc_device(DevKind::OnChip, 1 << 40, 64),
        Err(HostError::Refused { .. })
    ));
}

#[test]
fn host_buffers() {
    let s = TestServer::start("hbuf", 1);
    let dev = Device::connect(&s.socket(), "hbuf").expect("connect");
    let b = dev.alloc_host(8192).expect("alloc host");
    assert_eq!(b.len(), 8192);
    b.write(8000, &[1, 2, 3]).unwrap();
    let mut r = [0u8; 3];
    b.read(8000, &mut r).unwrap();
    assert_eq!(r, [1, 2, 3]);
    assert!(matches!(b.write(8190, &[0; 3]), Err(HostError::OutOfRange(_))));
    assert!(matches!(dev.alloc_host(0), Err(HostError::OutOfRange(_))));
    let b2 = dev.alloc_host(4096).unwrap();
    assert_ne!(b.iova(), b2.iova());
}

#[test]
fn mm_queue_h2c_c2h_and_wrap() {
    let s = TestServer::start("mmq", 2);
    let dev = Device::connect(&s.socket(), "mmq").expect("connect");
    let src = dev.alloc_host(64 * 1024).unwrap();
    let dst = dev.alloc_host(64 * 1024).unwrap();
    let data = pattern(64 * 1024, 3);
    src.write(0, &data).unwrap();
    let d = dev.alloc_device(DevKind::OnBoard, 64 * 1024, 64).unwrap();
    let opts = QueueOpts { ring_size: 8, cmpt_size: 8, ..Default::default() };
    let mut q = dev.open_queue(opts).expect("open queue");
    assert_eq!(q.state(), abi::QSTATE_RUNNING);
    assert_eq!(q.free_slots(Dir::H2c), 8);
    // 64 transfers of 1 KiB through rings of 8: wraps the rings and the completion colour
    // several times.
    let chunk = 1024u64;
    let mut posted = 0u64;
    let mut done = 0u64;
    let mut cs = [Completion::default(); 8];
    while done < 64 {
        while posted < 64 {
            let off = posted * chunk;
            let desc = snic_host::Descriptor::new(src.iova() + off, d + off, chunk as u32);
            match q.post(Dir::H2c, &desc) {
                Ok(()) => posted += 1,
                Err(HostError::RingFull) => break,
                Err(e) => panic!("post: {e}"),
            }
        }
        q.doorbell(Dir::H2c);
        let n = q.wait(&mut cs, T).expect("completions");
        for c in &cs[..n] {
            assert_eq!(c.status, 0, "{c:?}");
            assert_eq!(c.dir, 0);
            assert_eq!(c.qid, q.qid());
            assert_eq!(c.len, chunk as u32);
        }
        done += n as u64;
    }
    // Read it back with C2H descriptors on the same queue.
    let desc = snic_host::Descriptor::new(d, dst.iova(), data.len() as u32);
    q.post(Dir::C2h, &desc).unwrap();
    q.doorbell(Dir::C2h);
    let c = wait_one(&mut q);
    assert_eq!((c.status, c.dir, c.len), (0, 1, data.len() as u32));
    let mut back = vec![0u8; data.len()];
    dst.read(0, &mut back).unwrap();
    assert!(back == data);
    // Ring-full: 8 posts succeed, the 9th does not (no doorbell rung).
    for _ in 0..8 {
        q.post(Dir::H2c, &snic_host::Descriptor::new(src.iova(), d, 64)).unwrap();
    }
    assert!(matches!(
        q.post(Dir::H2c, &snic_host::Descriptor::new(src.iova(), d, 64)),
        Err(HostError::RingFull)
    ));
}

#[test]
fn queue_errors_and_restart() {
    let s = TestServer::start("qerr", 1);
    let dev = Device::connect(&s.socket(), "qerr").expect("connect");
    let src = dev.alloc_host(4096).unwrap();
    let d = dev.alloc_device(DevKind::OnChip, 4096, 64).unwrap();
    let mut q = dev.open_queue(QueueOpts { ring_size: 16, ..Default::default() }).unwrap();
    // A garbage slot: BadMagic completion, queue keeps running.
    q.write_slot(Dir::H2c, 0, &[0x5A; 32]).unwrap();
    q.raw_doorbell(Dir::H2c, 1);
    let c = wait_one(&mut q);
    assert_eq!(c.status(), Some(Status::BadMagic));
    assert_eq!(q.state(), abi::QSTATE_RUNNING);
    // A doorbell claiming more than the ring holds: queue-level error.
    q.raw_doorbell(Dir::H2c, 100);
    let c = wait_one(&mut q);
    assert_eq!(c.dir, snic_dma::desc::DIR_QUEUE);
    assert_eq!(c.status(), Some(Status::RingOverflow));
    wait_state(&q, abi::QSTATE_ERROR | Status::RingOverflow as u32);
    // Stop and start: the queue works again from index 0.
    q.stop().unwrap();
    assert_eq!(q.state(), abi::QSTATE_STOPPED);
    q.start().unwrap();
    assert_eq!(q.state(), abi::QSTATE_RUNNING);
    src.write(0, &[9u8; 256]).unwrap();
    q.post(Dir::H2c, &snic_host::Descriptor::new(src.iova(), d, 256)).unwrap();
    q.doorbell(Dir::H2c);
    let c = wait_one(&mut q);
    assert_eq!((c.status, c.len), (0, 256));
    // A descriptor touching memory of no one: an error completion, not a crash.
    q.post(Dir::H2c, &snic_host::Descriptor::new(0x7777_0000_0000, d, 64)).unwrap();
    q.doorbell(Dir::H2c);
    let c = wait_one(&mut q);
    assert_ne!(c.status, 0);
    let mut b = [0u8; 256];
    dev.read_device(d, &mut b).unwrap();
    assert_eq!(b, [9u8; 256]);
}

#[test]
fn interrupt_queue() {
    let s = TestServer::start("irq", 2);
    let dev = Device::connect(&s.socket(), "irq").expect("connect");
    let src = dev.alloc_host(1 << 16).unwrap();
    let dst = dev.alloc_host(1 << 16).unwrap();
    let data = pattern(1 << 16, 11);
    src.write(0, &data).unwrap();
    let d = dev.alloc_device(DevKind::OnBoard, 1 << 16, 64).unwrap();
    let mut q = dev
        .open_queue(QueueOpts {
            interrupt: true,
            ring_size: 32,
            cmpt_size: 64,
            ..Default::default()
        })
        .expect("open interrupt queue");
    for round in 0..20u64 {
        let off = round * 2048;
        q.post(Dir::H2c, &snic_host::Descriptor::new(src.iova() + off, d + off, 2048)).unwrap();
        q.doorbell(Dir::H2c);
        let c = wait_one(&mut q);
        assert_eq!((c.status, c.len), (0, 2048));
    }
    q.post(Dir::C2h, &snic_host::Descriptor::new(d, dst.iova(), 20 * 2048)).unwrap();
    q.doorbell(Dir::C2h);
    let c = wait_one(&mut q);
    assert_eq!(c.status, 0);
    let mut back = vec![0u8; 20 * 2048];
    dst.read(0, &mut back).unwrap();
    assert!(back == data[..20 * 2048]);
    // Nothing outstanding: a short wait times out.
    let mut cs = [Completion::default()];
    assert!(matches!(q.wait(&mut cs, Duration::from_millis(20)), Err(HostError::Timeout)));
}

/// Write a chain of descriptors into `buf` at `at`, each moving `len` bytes from
/// `src + i*len` to `dst + i*len`; returns the first descriptor's address.
fn write_chain(buf: &snic_host::HostBuf, at: usize, n: usize, src: u64, dst: u64, len: u32) -> u64 {
    for i in 0..n {
        let last = i + 1 == n;
        let d = snic_host::Descriptor {
            src: src + (i as u64) * u64::from(len),
            dst: dst + (i as u64) * u64::from(len),
            len,
            flags: if last { flags::EOP } else { flags::CHAIN },
            next: if last { 0 } else { buf.iova() + (at + (i + 1) * 32) as u64 },
        };
        buf.write(at + i * 32, &d.encode()).unwrap();
    }
    buf.iova() + at as u64
}

#[test]
fn channels_run_chains() {
    let s = TestServer::start("chan", 2);
    let dev = Device::connect(&s.socket(), "chan").expect("connect");
    let descs = dev.alloc_host(4096).unwrap();
    let src = dev.alloc_host(5 * 4096).unwrap();
    let dst = dev.alloc_host(5 * 4096).unwrap();
    let data = pattern(5 * 4096, 5);
    src.write(0, &data).unwrap();
    let d = dev.alloc_device(DevKind::OnBoard, 5 * 4096, 4096).unwrap();
    for (interrupt, index) in [(false, 0u8), (true, 3u8)] {
        let mut h2c = dev.channel(Dir::H2c, index, interrupt).expect("h2c channel");
        let mut c2h = dev.channel(Dir::C2h, index, interrupt).expect("c2h channel");
        assert!(h2c.poll().is_none());
        let first = write_chain(&descs, 0, 5, src.iova(), d, 4096);
        h2c.start(first).unwrap();
        let r = h2c.wait(T).expect("h2c run");
        assert!(r.ok(), "{r:?}");
        assert_eq!((r.descs, r.bytes), (5, 5 * 4096));
        let first = write_chain(&descs, 1024, 5, d, dst.iova(), 4096);
        c2h.start(first).unwrap();
        let r = c2h.wait(T).expect("c2h run");
        assert!(r.ok(), "{r:?}");
        assert_eq!((r.descs, r.bytes), (5, 5 * 4096));
        let mut back = vec![0u8; data.len()];
        dst.read(0, &mut back).unwrap();
        assert!(back == data);
        dst.write(0, &vec![0u8; data.len()]).unwrap();
        // A broken chain: the third descriptor has a bad magic.
        let first = write_chain(&descs, 2048, 4, src.iova(), d, 4096);
        descs.write(2048 + 2 * 32 + 22, &[0, 0]).unwrap();
        h2c.start(first).unwrap();
        let r = h2c.wait(T).expect("failed run");
        assert_eq!(r.status(), Some(Status::BadMagic));
        assert_eq!(r.fault_desc, first + 64);
    }
    assert!(matches!(dev.channel(Dir::H2c, 4, false), Err(HostError::OutOfRange(_))));
}

#[test]
fn streaming_loopback() {
    // One worker: every queue (and the bounce queue of write_device) on the same thread, so
    // a write_device round trip is a barrier: after it, the worker has seen every doorbell
    // rung before it.
    let s = TestServer::start("st", 1);
    let dev = Device::connect(&s.socket(), "st").expect("connect");
    let tx = dev.alloc_host(16384).unwrap();
    let rx = dev.alloc_host(16384).unwrap();
    // Into another queue: rx queue first, then tx queue streaming to it.
    let st = QueueOpts { mode: QueueMode::St, ring_size: 16, cmpt_size: 32, ..Default::default() };
    let mut rq = dev.open_queue(st).expect("rx queue");
    let mut tq = dev.open_queue(QueueOpts { stream_to: Some(rq.qid()), ..st }).expect("tx queue");
    for i in 0..4u64 {
        rq.post(Dir::C2h, &snic_host::Descriptor::new(0, rx.iova() + i * 1024, 1024)).unwrap();
    }
    rq.doorbell(Dir::C2h);
    // Packets that find no buffer are dropped (as on a real NIC): make sure snic has seen the
    // rx buffers before sending.
    let fence_mem = dev.alloc_device(DevKind::OnChip, 64, 64).unwrap();
    dev.write_device(fence_mem, &[0u8; 64]).unwrap();
    let pkts = [pattern(100, 1), pattern(1500, 2), pattern(60, 3)];
    let mut off = 0u64;
    for p in &pkts {
        tx.write(off as usize, p).unwrap();
        tq.post(Dir::H2c, &snic_host::Descriptor::new(tx.iova() + off, 0, p.len() as u32)).unwrap();
        off += 2048;
    }
    tq.doorbell(Dir::H2c);
    let mut got = Vec::new();
    let mut cs = [Completion::default(); 8];
    while got.len() < 3 {
        let n = tq.wait(&mut cs, T).expect("tx completions");
        got.extend_from_slice(&cs[..n]);
    }
    assert!(got.iter().all(|c| c.status == 0 && c.dir == 0), "{got:?}");
    let mut rxc = Vec::new();
    while rxc.len() < 3 {
        let n = rq.wait(&mut cs, T).expect("rx completions");
        rxc.extend_from_slice(&cs[..n]);
    }
    assert!(rxc.iter().all(|c| c.status == 0 && c.dir == 1), "{rxc:?}");
    let lens: Vec<u32> = rxc.iter().map(|c| c.len).collect();
    assert_eq!(lens, [100, 1500, 60]);
    // Packet 1 fills slot 0; packet 2 (1500 bytes) slots 1-2; packet 3 slot 3.
    let mut b = vec![0u8; 1500];
    rx.read(1024, &mut b).unwrap();
    assert_eq!(b, pkts[1]);
    let mut b = vec![0u8; 60];
    rx.read(3 * 1024, &mut b).unwrap();
    assert_eq!(b, pkts[2]);
    // Loopback to itself (stream_to None).
    let mut lq = dev.open_queue(st).expect("loopback queue");
    lq.post(Dir::C2h, &snic_host::Descriptor::new(0, rx.iova() + 8192, 4096)).unwrap();
    lq.doorbell(Dir::C2h);
    dev.write_device(fence_mem, &[0u8; 64]).unwrap();
    tx.write(0, &pkts[0]).unwrap();
    lq.post(Dir::H2c, &snic_host::Descriptor::new(tx.iova(), 0, 100)).unwrap();
    lq.doorbell(Dir::H2c);
    let mut all = Vec::new();
    while all.len() < 2 {
        let n = lq.wait(&mut cs, T).expect("loopback completions");
        all.extend_from_slice(&cs[..n]);
    }
    assert!(all.iter().any(|c| c.dir == 1 && c.len == 100 && c.status == 0), "{all:?}");
    let mut b = vec![0u8; 100];
    rx.read(8192, &mut b).unwrap();
    assert_eq!(b, pkts[0]);
}

#[test]
fn many_queues() {
    let s = TestServer::start("many", 2);
    let dev = Device::connect(&s.socket(), "many").expect("connect");
    let src = dev.alloc_host(64 * 256).unwrap();
    let data = pattern(64 * 256, 9);
    src.write(0, &data).unwrap();
    let d = dev.alloc_device(DevKind::OnBoard, 64 * 256, 64).unwrap();
    let opts = QueueOpts { ring_size: 4, cmpt_size: 4, ..Default::default() };
    let mut qs: Vec<_> = (0..64).map(|_| dev.open_queue(opts).expect("open")).collect();
    let mut ids: Vec<u16> = qs.iter().map(|q| q.qid()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 64, "queue ids are distinct");
    assert!(qs.iter().any(|q| q.worker() == 1) && qs.iter().any(|q| q.worker() == 0));
    for (i, q) in qs.iter_mut().enumerate() {
        let off = i as u64 * 256;
        q.post(Dir::H2c, &snic_host::Descriptor::new(src.iova() + off, d + off, 256)).unwrap();
        q.doorbell(Dir::H2c);
    }
    for q in &mut qs {
        let c = wait_one(q);
        assert_eq!((c.status, c.len, c.qid), (0, 256, q.qid()));
    }
    let mut back = vec![0u8; data.len()];
    dev.read_device(d, &mut back).unwrap();
    assert!(back == data);
    drop(qs);
    // Deleted queues free their ids: 64 more open fine.
    let more: Vec<_> = (0..64).map(|_| dev.open_queue(opts).expect("reopen")).collect();
    assert_eq!(more.len(), 64);
}

fn copy(workload: u32, src: u64, dst: u64, len: u64) -> KernelCmd {
    KernelCmd::new(abi::kernel::COPY, workload).addr(src, len).addr(dst, len)
}

#[test]
fn kernels_copy_check_and_fifo_order() {
    let s = TestServer::start("kern", 1);
    let dev = Device::connect(&s.socket(), "kern").expect("connect");
    assert_eq!(dev.compute_workers(), 1);
    let list = dev.kernels();
    assert!(list.iter().any(|k| k.id == abi::kernel::COPY && k.name == "copy"), "{list:?}");
    assert_eq!(dev.kernel_id("copy"), Some(abi::kernel::COPY));
    let b = dev.alloc_host(8192).unwrap();
    let data = pattern(4096, 3);
    b.write(0, &data).unwrap();
    let d = dev.alloc_device(DevKind::OnChip, 4096, 64).unwrap();
    let cp = dev.kernel_run(&copy(2, b.iova(), d, 4096), T).expect("copy");
    assert_eq!((cp.workload, cp.status, cp.result), (2, abi::kernel::OK, 4096));
    let mut back = vec![0u8; 4096];
    dev.read_device(d, &mut back).unwrap();
    assert!(back == data);

    // Refused commands change no byte: another client's window, an overlap, a short output.
    let before = back.clone();
    let bad = dev.kernel_run(&copy(3, 0x1000, d, 16), T).unwrap();
    assert_eq!(bad.status, abi::kernel::BAD_ADDRESS);
    let other = (u64::from(dev.client_id()) + 1) << 40;
    let bad = dev.kernel_run(&copy(4, d, other, 16), T).unwrap();
    assert_eq!(bad.status, abi::kernel::BAD_ADDRESS);
    let bad = dev.kernel_run(&copy(5, d, d + 8, 64), T).unwrap();
    assert_eq!((bad.status, bad.result), (abi::kernel::OVERLAP, 0));
    let short = KernelCmd::new(abi::kernel::COPY, 6).addr(b.iova(), 64).addr(d, 32);
    assert_eq!(dev.kernel_run(&short, T).unwrap().status, abi::kernel::NO_SPACE);
    dev.read_device(d, &mut back).unwrap();
    assert!(back == before, "a refused command wrote device memory");
    // A slot without a kernel answers with a status; an id past the slots is refused here.
    let none = dev.kernel_run(&KernelCmd::new(12, 7).addr(b.iova(), 4), T).unwrap();
    assert_eq!((none.workload, none.status), (7, abi::kernel::UNKNOWN_KERNEL));
    assert!(matches!(
        dev.kernel_submit(&KernelCmd::new(abi::MAX_KERNELS, 1)),
        Err(HostError::OutOfRange(_))
    ));
    let c = dev.kernel_counters(abi::kernel::COPY).unwrap();
    assert_eq!((c.runs, c.errors, c.last_status), (5, 4, abi::kernel::NO_SPACE));
    assert!(c.busy_ns > 0);

    // More commands than the FIFO holds, submitted then polled: all come back, in order.
    let mut seen = Vec::new();
    for w in 100..140u32 {
        let cmd = copy(w, b.iova(), b.iova() + 4096, 8);
        loop {
            match dev.kernel_submit(&cmd) {
                Ok(()) => break,
                Err(HostError::RingFull) => {
                    if let Some(s) = dev.kernel_poll(abi::kernel::COPY).unwrap() {
                        seen.push(s);
                    }
                    std::thread::yield_now();
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    let start = std::time::Instant::now();
    while seen.len() < 40 && start.elapsed() < T {
        match dev.kernel_poll(abi::kernel::COPY).unwrap() {
            Some(s) => seen.push(s),
            None => std::thread::yield_now(),
        }
    }
    let ids: Vec<u32> = seen.iter().map(|s| s.workload).collect();
    assert_eq!(ids, (100..140).collect::<Vec<_>>());
    assert!(seen.iter().all(|s| s.status == abi::kernel::OK && s.result == 8));
    let st = dev.stats().unwrap();
    assert_eq!(st["kernels"]["copy"]["runs"], 45, "{st}");
    assert_eq!(st["kernels"]["copy"]["errors"], 4, "{st}");
}

#[test]
fn kernels_run_at_once_on_compute_workers() {
    let s = TestServer::start_with("kern-par", common::with_test_kernels(2));
    let dev = Device::connect(&s.socket(), "kern-par").expect("connect");
    assert_eq!(dev.compute_workers(), 2);
    // SLEEP (13) runs on compute worker 1, COPY (0) on compute worker 0.
    assert_ne!(abi::kernel_worker(SLEEP_KERNEL, 2), abi::kernel_worker(abi::kernel::COPY, 2));
    let b = dev.alloc_host(8192).unwrap();
    b.write(0, &pattern(4096, 5)).unwrap();
    let started = std::time::Instant::now();
    dev.kernel_submit(&KernelCmd::new(SLEEP_KERNEL, 1).scalar(600)).unwrap();
    // While it sleeps: COPY commands complete, and so does DMA.
    for w in 0..8 {
        let st = dev.kernel_run(&copy(w, b.iova(), b.iova() + 4096, 4096), T).unwrap();
        assert_eq!(st.status, abi::kernel::OK);
    }
    let d = dev.alloc_device(DevKind::OnChip, 4096, 64).unwrap();
    dev.write_device(d, &pattern(4096, 6)).unwrap();
    assert!(dev.kernel_poll(SLEEP_KERNEL).unwrap().is_none(), "the sleep ended early");
    assert!(started.elapsed() < Duration::from_millis(600), "copies waited for the sleep");
    let mut hb = vec![0u8; 4096];
    b.read(4096, &mut hb).unwrap();
    assert!(hb == pattern(4096, 5));
    let st = dev.kernel_wait(SLEEP_KERNEL, 1, T).unwrap();
    assert_eq!((st.status, st.result), (abi::kernel::OK, 600));
    assert!(st.busy_ns >= 600_000_000, "busy_ns {}", st.busy_ns);
    let stats = dev.stats().unwrap();
    assert_eq!(stats["compute_workers"], 2);
    assert_eq!(stats["kernels"]["sleep"]["runs"], 1, "{stats}");
    assert_eq!(stats["kernels"]["copy"]["runs"], 8, "{stats}");
}

#[test]
fn kernel_interrupt_or_poll_per_kernel_and_stash() {
    let s = TestServer::start_with("kern-irq", common::with_test_kernels(2));
    let dev = Device::connect(&s.socket(), "kern-irq").expect("connect");
    let ctl = |k| dev.reg_read(abi::kernel_reg(k, abi::K_CONTROL) as u32).unwrap();
    dev.kernel_set_interrupt(SLEEP_KERNEL, true).unwrap();
    assert!(dev.kernel_interrupt(SLEEP_KERNEL) && !dev.kernel_interrupt(abi::kernel::COPY));
    assert_eq!((ctl(SLEEP_KERNEL), ctl(abi::kernel::COPY)), (abi::K_CONTROL_IRQ, 0));
    // Interrupt mode: the waiter sleeps on the eventfd until the status is written.
    dev.kernel_submit(&KernelCmd::new(SLEEP_KERNEL, 9).scalar(50)).unwrap();
    let st = dev.kernel_wait(SLEEP_KERNEL, 9, T).unwrap();
    assert_eq!((st.workload, st.result), (9, 50));
    // Polled mode on the other kernel at the same time; workloads out of order are stashed.
    let b = dev.alloc_host(8192).unwrap();
    for w in 1..=3 {
        dev.kernel_submit(&copy(w, b.iova(), b.iova() + 4096, 64)).unwrap();
    }
    dev.kernel_submit(&KernelCmd::new(SLEEP_KERNEL, 10).scalar(20)).unwrap();
    assert_eq!(dev.kernel_wait(abi::kernel::COPY, 3, T).unwrap().workload, 3);
    assert_eq!(dev.kernel_wait(SLEEP_KERNEL, 10, T).unwrap().result, 20);
    assert_eq!(dev.kernel_poll(abi::kernel::COPY).unwrap().map(|s| s.workload), Some(1));
    assert_eq!(dev.kernel_wait(abi::kernel::COPY, 2, T).unwrap().workload, 2);
    assert_eq!(dev.kernel_poll(abi::kernel::COPY).unwrap(), None);
    // Waiting for what never comes times out (in both modes).
    assert!(matches!(
        dev.kernel_wait(SLEEP_KERNEL, 77, Duration::from_millis(30)),
        Err(HostError::Timeout)
    ));
    assert!(matches!(
        dev.kernel_wait(abi::kernel::COPY, 77, Duration::from_millis(30)),
        Err(HostError::Timeout)
    ));
    // Back to polling.
    dev.kernel_set_interrupt(SLEEP_KERNEL, false).unwrap();
    assert_eq!(ctl(SLEEP_KERNEL), 0);
    let st = dev.kernel_run(&KernelCmd::new(SLEEP_KERNEL, 11).scalar(1), T).unwrap();
    assert_eq!((st.workload, st.status), (11, abi::kernel::OK));
    assert!(matches!(dev.kernel_set_interrupt(99, true), Err(HostError::OutOfRange(_))));
}

#[test]
fn kernel_user_registers_reach_the_kernel() {
    let s = TestServer::start_with("kern-regs", common::with_test_kernels(1));
    let dev = Device::connect(&s.socket(), "kern-regs").expect("connect");
    assert!(dev.kernels().iter().any(|k| k.id == REGS_KERNEL && k.name == "kernel14"));
    let b = dev.alloc_host(4096).unwrap();
    for i in 0..abi::USER_REGS {
        dev.kernel_reg_write(REGS_KERNEL, i, 100 + i as u32).unwrap();
        assert_eq!(dev.kernel_reg_read(REGS_KERNEL, i).unwrap(), 100 + i as u32);
    }
    assert!(matches!(dev.kernel_reg_write(REGS_KERNEL, 8, 1), Err(HostError::OutOfRange(_))));
    let cmd = KernelCmd::new(REGS_KERNEL, 1).addr(b.iova(), 32);
    let st = dev.kernel_run(&cmd, T).unwrap();
    assert_eq!((st.status, st.result), (abi::kernel::OK, (100..108).sum::<u64>()));
    let mut out = [0u8; 32];
    b.read(0, &mut out).unwrap();
    let regs: Vec<u32> =
        out.chunks(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    assert_eq!(regs, (100..108).collect::<Vec<_>>());
    // A new value is seen by the next command; other kernels' registers are separate.
    dev.kernel_reg_write(REGS_KERNEL, 7, 0xFFFF_0000).unwrap();
    dev.kernel_reg_write(abi::kernel::COPY, 0, 5).unwrap();
    let st = dev.kernel_run(&cmd, T).unwrap();
    assert_eq!(st.result, (100..107).sum::<u64>() + 0xFFFF_0000);
    assert_eq!(dev.kernel_reg_read(REGS_KERNEL, 0).unwrap(), 100);
    let c = dev.kernel_counters(REGS_KERNEL).unwrap();
    assert_eq!((c.runs, c.errors, c.last_status), (2, 0, abi::kernel::OK));
}

#[test]
fn stats_and_raw_requests() {
    let s = TestServer::start("stats", 1);
    let dev = Device::connect(&s.socket(), "stats-probe").expect("connect");
    let d = dev.alloc_device(DevKind::OnChip, 256, 64).unwrap();
    dev.write_device(d, &[1u8; 256]).unwrap();
    let st = dev.stats().expect("stats");
    assert!(st.is_object(), "{st}");
    let text = st.to_string();
    assert!(text.contains("stats-probe"), "the client's name shows up in the stats: {text}");
    // A raw request that snic refuses.
    let e =
        dev.request(&snic_host::Request::StartQueue { qid: 2047 }, &[]).expect_err("no such queue");
    assert!(matches!(e, HostError::Refused { .. }), "{e}");
}

#[test]
fn device_is_send_sync_and_shared() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Device>();
    assert_send_sync::<snic_host::HostBuf>();
    let s = TestServer::start("threads", 2);
    let dev = Device::connect(&s.socket(), "threads").expect("connect");
    std::thread::scope(|sc| {
        for t in 0..2u32 {
            let dev = &dev;
            sc.spawn(move || {
                let a = dev.alloc_device(DevKind::OnBoard, 8192, 64).unwrap();
                let data = pattern(8192, t);
                dev.write_device(a, &data).unwrap();
                let mut b = vec![0u8; 8192];
                dev.read_device(a, &mut b).unwrap();
                assert!(b == data);
            });
        }
    });
}
