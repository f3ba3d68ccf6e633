//! The host library (`snic-host`) against a real `snic serve` process: the setup socket, the
//! BAR, registered memory and eventfds all cross a process boundary here.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use snic_dma::desc::Descriptor;
use snic_host::{Completion, DevKind, Device, Dir, KernelCmd, QueueOpts};
use snic_hostif::abi;

const T: Duration = Duration::from_secs(10);

/// A `snic serve` child process, killed on drop.
struct Serve {
    child: Child,
    dir: PathBuf,
}

impl Serve {
    fn start(tag: &str) -> Serve {
        let dir = std::env::temp_dir().join(format!("snic-hostlib-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let sock = dir.join("snic.sock");
        let child = Command::new(env!("CARGO_BIN_EXE_snic"))
            .arg("serve")
            .arg("--socket")
            .arg(&sock)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn snic serve");
        let mut s = Serve { child, dir };
        let start = Instant::now();
        while !sock.exists() {
            if let Ok(Some(st)) = s.child.try_wait() {
                panic!("snic serve exited early: {st}");
            }
            assert!(start.elapsed() < T, "snic serve did not create {}", sock.display());
            std::thread::sleep(Duration::from_millis(10));
        }
        s
    }
    fn socket(&self) -> PathBuf {
        self.dir.join("snic.sock")
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Connect, retrying while the listener comes up.
fn connect(sock: &Path, name: &str) -> Device {
    let start = Instant::now();
    loop {
        match Device::connect(sock, name) {
            Ok(d) => return d,
            Err(e) if start.elapsed() < T => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("connect: {e}"),
        }
    }
}

#[test]
fn host_library_against_snic_serve() {
    let s = Serve::start("main");
    let dev = connect(&s.socket(), "host-lib-test");
    assert_eq!(dev.reg_read(abi::ID as u32).unwrap(), abi::ID_VALUE);
    dev.reg_write(abi::SCRATCH as u32, 0x1234_5678).unwrap();
    assert_eq!(dev.reg_read(abi::SCRATCH as u32).unwrap(), 0x1234_5678);

    // Device memory round trip (two bounce chunks).
    let data: Vec<u8> = (0..(3 << 19)).map(|i: u32| (i.wrapping_mul(31) >> 3) as u8).collect();
    let d = dev.alloc_device(DevKind::OnBoard, data.len() as u64, 4096).unwrap();
    dev.write_device(d, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    dev.read_device(d, &mut back).unwrap();
    assert!(back == data);

    // Polled and interrupt queues.
    let src = dev.alloc_host(1 << 16).unwrap();
    let dst = dev.alloc_host(1 << 16).unwrap();
    src.write(0, &data[..1 << 16]).unwrap();
    for interrupt in [false, true] {
        let mut q = dev.open_queue(QueueOpts { interrupt, ..Default::default() }).unwrap();
        q.post(Dir::H2c, &Descriptor::new(src.iova(), d, 1 << 16)).unwrap();
        q.doorbell(Dir::H2c);
        q.post(Dir::C2h, &Descriptor::new(d, dst.iova(), 1 << 16)).unwrap();
        let mut cs = [Completion::default(); 4];
        let n = q.wait(&mut cs, T).unwrap();
        assert_eq!(n, 1);
        assert_eq!((cs[0].status, cs[0].dir), (0, 0));
        q.doorbell(Dir::C2h);
        let n = q.wait(&mut cs, T).unwrap();
        assert_eq!((n, cs[0].status, cs[0].dir), (1, 0, 1));
        let mut b = vec![0u8; 1 << 16];
        dst.read(0, &mut b).unwrap();
        assert!(b == data[..1 << 16]);
    }

    // Channel chain of three descriptors.
    let descs = dev.alloc_host(4096).unwrap();
    for i in 0..3u64 {
        let last = i == 2;
        let desc = Descriptor {
            src: src.iova() + i * 4096,
            dst: d + i * 4096,
            len: 4096,
            flags: if last { snic_dma::desc::flags::EOP } else { snic_dma::desc::flags::CHAIN },
            next: if last { 0 } else { descs.iova() + (i + 1) * 32 },
        };
        descs.write(i as usize * 32, &desc.encode()).unwrap();
    }
    let mut ch = dev.channel(Dir::H2c, 1, false).unwrap();
    ch.start(descs.iova()).unwrap();
    let r = ch.wait(T).unwrap();
    assert!(r.ok(), "{r:?}");
    assert_eq!((r.descs, r.bytes), (3, 3 * 4096));

    // A kernel.
    let kd = dev.alloc_device(DevKind::OnBoard, 4096, 64).unwrap();
    let cmd = KernelCmd::new(abi::kernel::COPY, 9).addr(src.iova(), 4096).addr(kd, 4096);
    let st = dev.kernel_run(&cmd, T).unwrap();
    assert_eq!((st.workload, st.status, st.result), (9, abi::kernel::OK, 4096));
    let mut back = vec![0u8; 4096];
    dev.read_device(kd, &mut back).unwrap();
    assert!(back[..] == data[..4096]);

    assert!(dev.stats().unwrap().is_object());

    // A second process-level client is isolated: it cannot DMA from the first one's memory.
    let other = connect(&s.socket(), "other");
    assert_ne!(other.client_id(), dev.client_id());
    let mut q = other.open_queue(QueueOpts::default()).unwrap();
    let od = other.alloc_device(DevKind::OnChip, 4096, 64).unwrap();
    q.post(Dir::H2c, &Descriptor::new(src.iova(), od, 64)).unwrap();
    q.doorbell(Dir::H2c);
    let mut cs = [Completion::default(); 1];
    assert_eq!(q.wait(&mut cs, T).unwrap(), 1);
    assert_ne!(cs[0].status, 0, "another client's host memory must not be readable");
}

/// Device bytes in use, from the stats document.
fn device_used(dev: &Device) -> u64 {
    let st = dev.stats().unwrap();
    let d = &st["device"];
    ["on-chip", "on-board"].iter().map(|k| d[*k]["used"].as_u64().expect("device used")).sum()
}

#[test]
fn a_killed_host_process_is_reclaimed_and_others_keep_working() {
    let s = Serve::start("kill");
    let dev = connect(&s.socket(), "survivor");
    let used_before = device_used(&dev);
    // Another host process: `snic dma` moving data in a long loop through its own queue,
    // registrations and device buffer. Kill it (SIGKILL: no chance to clean up) mid-run.
    let mut victim = Command::new(env!("CARGO_BIN_EXE_snic"))
        .args(["dma", "--queue", "-s", "64K", "-c", "100000000", "-d"])
        .arg(s.socket())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn snic dma");
    // Wait until the victim holds device memory (it is mid-run).
    let start = Instant::now();
    while device_used(&dev) == used_before {
        assert!(start.elapsed() < T, "the victim never allocated device memory");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50));
    victim.kill().expect("SIGKILL");
    let _ = victim.wait();
    let start = Instant::now();
    loop {
        let st = dev.stats().unwrap();
        if st["clients_reclaimed"].as_u64() == Some(1) {
            assert!(st["queues_reclaimed"].as_u64().unwrap() >= 1, "{st}");
            assert!(st["regions_reclaimed"].as_u64().unwrap() >= 1, "{st}");
            assert!(st["device_bytes_freed"].as_u64().unwrap() >= 64 << 10, "{st}");
            break;
        }
        assert!(start.elapsed() < T, "the killed client was not reclaimed: {st}");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(device_used(&dev), used_before, "the killed client's device memory is free");
    // The survivor is unaffected: a full round trip still works.
    let data: Vec<u8> = (0..1u32 << 16).map(|i| (i * 7) as u8).collect();
    let d = dev.alloc_device(DevKind::OnBoard, data.len() as u64, 4096).unwrap();
    dev.write_device(d, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    dev.read_device(d, &mut back).unwrap();
    assert!(back == data);
}
