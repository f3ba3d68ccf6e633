//! The hitless upgrade of `snic serve` (`--takeover SOCK`): a host program keeps doing DMA
//! through the host library while a new process takes the server over, and every transfer
//! completes with the data it should, on the same session (same client, same queues, same
//! eventfds); so does an RDMA WRITE stream, over kernel UDP (`--rdma`) and between two whole
//! NICs (`--port`) over a UDP tunnel; a takeover the new process refuses leaves the old one
//! serving; what cannot be taken over (a stateful stage) is refused before the old process
//! is paused.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use snic_dma::desc::Descriptor;
use snic_host::{Completion, DevKind, Device, Dir, KernelCmd, QueueOpts};
use snic_hostif::abi;

const SNIC: &str = env!("CARGO_BIN_EXE_snic");
const T: Duration = Duration::from_secs(10);

/// A `snic serve` child whose stderr lines are collected; stopped (SIGTERM) on drop.
struct Serve {
    child: Child,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Serve {
    fn start(dir: &Path, extra: &[&str]) -> Serve {
        let mut child = Command::new(SNIC)
            .arg("serve")
            .arg("--socket")
            .arg(dir.join("snic.sock"))
            .arg("--control")
            .arg(dir.join("control.sock"))
            .args(["--no-huge", "--on-board", "16M", "--spin-us", "50"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn snic serve");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let pipe = child.stderr.take().expect("stderr");
        let lines = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for l in BufReader::new(pipe).lines().map_while(Result::ok) {
                eprintln!("[snic serve] {l}");
                lines.lock().unwrap().push(l);
            }
        });
        Serve { child, stderr }
    }

    /// Wait for the process to exit (at most `T`); its status.
    fn wait(&mut self) -> std::process::ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                return st;
            }
            assert!(t0.elapsed() < T, "snic serve did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().expect("wait").is_none()
    }

    /// The first stderr line containing `what` (waiting at most `T` for it).
    fn line(&self, what: &str) -> String {
        let t0 = Instant::now();
        loop {
            if let Some(l) = self.stderr.lock().unwrap().iter().find(|l| l.contains(what)) {
                return l.clone();
            }
            assert!(t0.elapsed() < T, "no stderr line with {what:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        common::netns::stop(&mut self.child, Duration::from_secs(5));
    }
}

/// Connect once both sockets are up.
fn connect(dir: &Path) -> Device {
    let t0 = Instant::now();
    loop {
        if dir.join("control.sock").exists()
            && let Ok(d) = Device::connect(&dir.join("snic.sock"), "upgrade-test")
        {
            return d;
        }
        assert!(t0.elapsed() < T, "snic serve did not come up");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What the DMA loop did.
#[derive(Default)]
struct Progress {
    /// Round trips verified.
    rounds: AtomicU64,
    /// The first failure.
    error: Mutex<Option<String>>,
    /// The longest round trip, in microseconds (a takeover's gap as the host sees it).
    longest_us: AtomicU64,
}

/// Round trips host -> device -> host until `stop`, each with its own pattern, checked:
/// through the host library's bounce queue (a polled queue), through an interrupt queue of
/// its own (its eventfd), and through the lookaside `copy` kernel (its FIFOs), in turn.
fn dma_loop(dev: Arc<Device>, stop: Arc<AtomicBool>, p: Arc<Progress>) {
    const LEN: usize = 64 << 10;
    let run = || -> Result<(), String> {
        let e = |e: snic_host::HostError| e.to_string();
        let d = dev.alloc_device(DevKind::OnBoard, LEN as u64, 4096).map_err(e)?;
        let src = dev.alloc_host(LEN).map_err(e)?;
        let dst = dev.alloc_host(LEN).map_err(e)?;
        let mut q =
            dev.open_queue(QueueOpts { interrupt: true, ..Default::default() }).map_err(e)?;
        let mut back = vec![0u8; LEN];
        let mut round = 0u64;
        while !stop.load(Ordering::Acquire) {
            round += 1;
            let data: Vec<u8> = (0..LEN as u64)
                .map(|i| (i.wrapping_mul(131) ^ round.wrapping_mul(7)) as u8)
                .collect();
            let t0 = Instant::now();
            if round.is_multiple_of(3) {
                dev.write_device(d, &data).map_err(e)?;
                dev.read_device(d, &mut back).map_err(e)?;
            } else if round % 3 == 2 {
                src.write(0, &data).map_err(e)?;
                let cmd = KernelCmd::new(abi::kernel::COPY, round as u32)
                    .addr(src.iova(), LEN as u64)
                    .addr(d, LEN as u64);
                let st = dev.kernel_run(&cmd, T).map_err(e)?;
                if (st.workload, st.status, st.result)
                    != (round as u32, abi::kernel::OK, LEN as u64)
                {
                    return Err(format!("round {round}: kernel status {st:?}"));
                }
                dev.read_device(d, &mut back).map_err(e)?;
            } else {
                src.write(0, &data).map_err(e)?;
                let mut cs = [Completion::default(); 2];
                q.post(Dir::H2c, &Descriptor::new(src.iova(), d, LEN as u32)).map_err(e)?;
                q.doorbell(Dir::H2c);
                let n = q.wait(&mut cs, T).map_err(e)?;
                if n != 1 || cs[0].status != 0 {
                    return Err(format!("round {round}: H2C completion {:?}", &cs[..n]));
                }
                q.post(Dir::C2h, &Descriptor::new(d, dst.iova(), LEN as u32)).map_err(e)?;
                q.doorbell(Dir::C2h);
                let n = q.wait(&mut cs, T).map_err(e)?;
                if n != 1 || cs[0].status != 0 {
                    return Err(format!("round {round}: C2H completion {:?}", &cs[..n]));
                }
                dst.read(0, &mut back).map_err(e)?;
            }
            if back != data {
                return Err(format!("round {round}: the data read back differs"));
            }
            let us = t0.elapsed().as_micros() as u64;
            p.longest_us.fetch_max(us, Ordering::Relaxed);
            p.rounds.fetch_add(1, Ordering::Release);
        }
        Ok(())
    };
    if let Err(e) = run() {
        *p.error.lock().unwrap() = Some(e);
    }
}

/// Let the DMA loop do `n` more round trips (failing on its first error).
fn more_rounds(p: &Progress, n: u64) {
    let want = p.rounds.load(Ordering::Acquire) + n;
    let t0 = Instant::now();
    while p.rounds.load(Ordering::Acquire) < want {
        if let Some(e) = p.error.lock().unwrap().as_ref() {
            panic!("DMA failed: {e}");
        }
        assert!(t0.elapsed() < T, "the DMA loop stalled");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn start_loop(dev: &Arc<Device>) -> (Arc<AtomicBool>, Arc<Progress>, std::thread::JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let p = Arc::new(Progress::default());
    let h = {
        let (dev, stop, p) = (Arc::clone(dev), Arc::clone(&stop), Arc::clone(&p));
        std::thread::spawn(move || dma_loop(dev, stop, p))
    };
    (stop, p, h)
}

fn dir(name: &str) -> PathBuf {
    common::temp_dir(name)
}

#[test]
fn a_host_client_keeps_doing_dma_across_a_takeover() {
    let dir = dir("serve-upgrade");
    let mut old = Serve::start(&dir, &[]);
    let dev = Arc::new(connect(&dir));
    let client = dev.client_id();
    let (stop, p, h) = start_loop(&dev);
    more_rounds(&p, 50);

    let control = dir.join("control.sock");
    let mut new = Serve::start(&dir, &["--takeover", control.to_str().unwrap()]);
    let took = new.line("took over from pid");
    assert!(old.wait().success(), "the old process exits 0 after handing over");
    assert!(old.line("handed over to the new process").contains("paused"));
    let report: serde_json::Value =
        serde_json::from_str(&took[took.find('{').expect("report")..]).expect("report JSON");
    assert_eq!(report["clients"], 1, "{report}");
    assert!(report["queues"].as_u64().unwrap() >= 2, "bounce and interrupt queues: {report}");
    eprintln!("takeover gap: {} ms", report["gap_ms"]);
    let before = p.longest_us.load(Ordering::Relaxed);

    // The same session goes on with the new process: transfers on the queues set up before,
    // setup requests (a new registration, a new queue) and the counters show its workers
    // moving the data.
    more_rounds(&p, 100);
    let extra = dev.alloc_host(4096).expect("registration after the takeover");
    extra.write(0, b"after").unwrap();
    let mut q = dev.open_queue(QueueOpts::default()).expect("queue after the takeover");
    let d = dev.alloc_device(DevKind::OnChip, 4096, 4096).unwrap();
    q.post(Dir::H2c, &Descriptor::new(extra.iova(), d, 4096)).unwrap();
    q.doorbell(Dir::H2c);
    let mut cs = [Completion::default(); 1];
    assert_eq!(q.wait(&mut cs, T).unwrap(), 1);
    assert_eq!(cs[0].status, 0);
    let mut five = [0u8; 5];
    dev.read_device(d, &mut five).unwrap();
    assert_eq!(&five, b"after");
    stop.store(true, Ordering::Release);
    h.join().unwrap();
    assert!(p.error.lock().unwrap().is_none(), "{:?}", p.error.lock().unwrap());
    eprintln!(
        "longest round trip: {} us before the takeover was reported, {} us in all",
        before,
        p.longest_us.load(Ordering::Relaxed)
    );
    assert_eq!(dev.client_id(), client);
    let stats = dev.stats().expect("stats from the new process");
    assert_eq!(stats["clients"], 1, "the one client, never reconnected: {stats}");
    assert_eq!(stats["clients_reclaimed"], 0, "{stats}");
    assert!(stats["engine"]["descs"].as_u64().unwrap() >= 100, "the new workers moved: {stats}");
    assert!(new.running());
}

#[test]
fn a_refused_takeover_rolls_back_and_the_old_serves_on() {
    let dir = dir("serve-upgrade-refused");
    let mut old = Serve::start(&dir, &["--workers", "2"]);
    let dev = Arc::new(connect(&dir));
    let (stop, p, h) = start_loop(&dev);
    more_rounds(&p, 20);
    let control = dir.join("control.sock");
    // Another worker count: the new process refuses what it is handed, the old resumes.
    let mut new = Serve::start(&dir, &["--workers", "3", "--takeover", control.to_str().unwrap()]);
    assert!(!new.wait().success(), "the new process fails");
    assert!(new.line("workers").contains("differs"), "{:?}", new.stderr.lock().unwrap());
    assert!(old.line("takeover failed, carrying on").contains("workers"));
    more_rounds(&p, 50);
    stop.store(true, Ordering::Release);
    h.join().unwrap();
    assert!(p.error.lock().unwrap().is_none(), "{:?}", p.error.lock().unwrap());
    assert!(old.running(), "the old process serves on");
    let stats = dev.stats().unwrap();
    assert_eq!(stats["workers"], 2, "{stats}");
    assert_eq!(stats["clients_reclaimed"], 0, "{stats}");
}

/// A whole NIC with a stateful stage is refused before the old process is paused.
#[test]
fn a_nic_with_a_stateful_stage_is_refused_before_the_old_process_pauses() {
    let dir = dir("serve-upgrade-nic");
    let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    // A free port for snic's end (bound and released; snic binds it right after).
    let addr = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let port = format!("udp:{addr},{}", peer.local_addr().unwrap());
    let nic = ["--port", port.as_str(), "--rdma-ip", "10.77.0.1"];
    let nic =
        [&nic[..], &["--stage", "parse", "--stage", "classify", "--stage", "l2fwd:learn"]].concat();
    let mut old = Serve::start(&dir, &nic);
    let dev = Arc::new(connect(&dir));
    let (stop, p, h) = start_loop(&dev);
    more_rounds(&p, 10);
    let control = dir.join("control.sock");
    let mut args = nic.to_vec();
    args.extend(["--takeover", control.to_str().unwrap()]);
    let mut new = Serve::start(&dir, &args);
    assert!(!new.wait().success(), "the new process refuses");
    assert!(new.line("cannot be taken over").contains("--stage l2fwd:learn"));
    more_rounds(&p, 20);
    stop.store(true, Ordering::Release);
    h.join().unwrap();
    assert!(p.error.lock().unwrap().is_none(), "{:?}", p.error.lock().unwrap());
    assert!(old.running(), "the old process serves on");
    let said = old.stderr.lock().unwrap().clone();
    assert!(!said.iter().any(|l| l.contains("takeover")), "never asked to pause: {said:?}");
}

/// `snic serve --rdma`: a host program streams RDMA WRITEs (four outstanding) from its memory
/// into device memory between two of its QPs, over snic's RoCE transport on loopback, while
/// a new process takes over; every WRITE completes successfully and lands whole.
#[test]
fn an_rdma_write_stream_goes_on_across_a_takeover() {
    use snic_host::{Placement, RdmaSge, WC_SUCCESS, rdma_access};
    const SLOT: usize = 16 << 10;
    const SLOTS: u64 = 8;
    let dir = dir("serve-upgrade-rdma");
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let rdma = format!("127.0.0.1:{port}");
    let mut old = Serve::start(&dir, &["--rdma", rdma.as_str()]);
    let dev = Arc::new(connect(&dir));
    let lo = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    let buf = dev.alloc_host(SLOT * SLOTS as usize).unwrap();
    let rings = dev.alloc_host(16 << 10).unwrap();
    let devbuf = dev.alloc_device(DevKind::OnBoard, SLOT as u64 * SLOTS, 4096).unwrap();
    let (lkey, _) =
        dev.rdma_reg_mr(buf.iova(), (SLOT as u64) * SLOTS, rdma_access::LOCAL_WRITE).unwrap();
    let (_, rkey) = dev.rdma_reg_mr(devbuf, SLOT as u64 * SLOTS, rdma_access::ALL).unwrap();
    let a = dev.rdma_create_qp(Placement::Host(&rings), 16).unwrap();
    let b = dev.rdma_create_qp(Placement::OnBoard, 16).unwrap();
    dev.rdma_connect(a.qpn, b.qpn, lo, 1024).unwrap();
    dev.rdma_connect(b.qpn, a.qpn, lo, 1024).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let p = Arc::new(Progress::default());
    let h = {
        let (dev, stop, p) = (Arc::clone(&dev), Arc::clone(&stop), Arc::clone(&p));
        std::thread::spawn(move || {
            let pattern = |i: u64| -> Vec<u8> {
                (0..SLOT as u64).map(|k| (k.wrapping_mul(29) ^ i.wrapping_mul(11)) as u8).collect()
            };
            let run = || -> Result<(), String> {
                let e = |e: snic_host::HostError| e.to_string();
                let (mut next, mut done) = (0u64, 0u64);
                let mut back = vec![0u8; SLOT];
                let mut last = Instant::now();
                while !stop.load(Ordering::Acquire) || done < next {
                    while next - done < 4 && !stop.load(Ordering::Acquire) {
                        let off = (next % SLOTS) * SLOT as u64;
                        buf.write(off as usize, &pattern(next)).map_err(e)?;
                        let sge = RdmaSge { addr: buf.iova() + off, lkey, len: SLOT as u32 };
                        dev.rdma_post_write(a.qpn, next, sge, devbuf + off, rkey).map_err(e)?;
                        next += 1;
                    }
                    for c in dev.rdma_wait_cq(a.qpn, 4, T).map_err(e)? {
                        if c.status != WC_SUCCESS || c.wr_id != done {
                            return Err(format!("WRITE {done}: completion {c:?}"));
                        }
                        let off = (done % SLOTS) * SLOT as u64;
                        dev.read_device(devbuf + off, &mut back).map_err(e)?;
                        if back != pattern(done) {
                            return Err(format!("WRITE {done}: device memory differs"));
                        }
                        done += 1;
                        let us = last.elapsed().as_micros() as u64;
                        p.longest_us.fetch_max(us, Ordering::Relaxed);
                        last = Instant::now();
                        p.rounds.fetch_add(1, Ordering::Release);
                    }
                }
                Ok(())
            };
            if let Err(e) = run() {
                *p.error.lock().unwrap() = Some(e);
            }
        })
    };
    more_rounds(&p, 50);
    let control = dir.join("control.sock");
    let new =
        Serve::start(&dir, &["--rdma", rdma.as_str(), "--takeover", control.to_str().unwrap()]);
    let took = new.line("took over from pid");
    assert!(old.wait().success(), "the old process exits 0 after handing over");
    let report: serde_json::Value =
        serde_json::from_str(&took[took.find('{').expect("report")..]).expect("report JSON");
    assert_eq!(report["rdma_qps"], 2, "{report}");
    more_rounds(&p, 200);
    stop.store(true, Ordering::Release);
    h.join().unwrap();
    assert!(p.error.lock().unwrap().is_none(), "{:?}", p.error.lock().unwrap());
    let st = dev.stats().unwrap();
    assert_eq!(st["rdma"]["qps"], 2, "both QPs carried: {st}");
    assert!(st["rdma"]["engine"]["tx_packets"].as_u64().unwrap() > 0, "the new engine sends: {st}");
    eprintln!(
        "takeover gap: {} ms; longest time between two WRITE completions: {} us",
        report["gap_ms"],
        p.longest_us.load(Ordering::Relaxed)
    );
}

/// Stream RDMA WRITEs (four outstanding, 16 KiB each) from QP `a` of `src` into `dst_dev`'s
/// device memory at `devbuf` (rkey `rkey`) until `stop`, each one checked there after its
/// completion.
#[allow(clippy::too_many_arguments)]
fn write_stream(
    src: Arc<Device>,
    dst_dev: Arc<Device>,
    qpn: u32,
    devbuf: u64,
    rkey: u32,
    stop: Arc<AtomicBool>,
    p: Arc<Progress>,
) -> std::thread::JoinHandle<()> {
    use snic_host::{RdmaSge, WC_SUCCESS, rdma_access};
    const SLOT: usize = 16 << 10;
    const SLOTS: u64 = 8;
    std::thread::spawn(move || {
        let pattern = |i: u64| -> Vec<u8> {
            (0..SLOT as u64).map(|k| (k.wrapping_mul(29) ^ i.wrapping_mul(11)) as u8).collect()
        };
        let run = || -> Result<(), String> {
            let e = |e: snic_host::HostError| e.to_string();
            let buf = src.alloc_host(SLOT * SLOTS as usize).map_err(e)?;
            let len = SLOT as u64 * SLOTS;
            let (lkey, _) =
                src.rdma_reg_mr(buf.iova(), len, rdma_access::LOCAL_WRITE).map_err(e)?;
            let (mut next, mut done) = (0u64, 0u64);
            let mut back = vec![0u8; SLOT];
            let mut last = Instant::now();
            while !stop.load(Ordering::Acquire) || done < next {
                while next - done < 4 && !stop.load(Ordering::Acquire) {
                    let off = (next % SLOTS) * SLOT as u64;
                    buf.write(off as usize, &pattern(next)).map_err(e)?;
                    let sge = RdmaSge { addr: buf.iova() + off, lkey, len: SLOT as u32 };
                    src.rdma_post_write(qpn, next, sge, devbuf + off, rkey).map_err(e)?;
                    next += 1;
                }
                for c in src.rdma_wait_cq(qpn, 4, T).map_err(e)? {
                    if c.status != WC_SUCCESS || c.wr_id != done {
                        return Err(format!("WRITE {done}: completion {c:?}"));
                    }
                    let off = (done % SLOTS) * SLOT as u64;
                    dst_dev.read_device(devbuf + off, &mut back).map_err(e)?;
                    if back != pattern(done) {
                        return Err(format!("WRITE {done}: device memory differs"));
                    }
                    done += 1;
                    let us = last.elapsed().as_micros() as u64;
                    p.longest_us.fetch_max(us, Ordering::Relaxed);
                    last = Instant::now();
                    p.rounds.fetch_add(1, Ordering::Release);
                }
            }
            Ok(())
        };
        if let Err(e) = run() {
            *p.error.lock().unwrap() = Some(e);
        }
    })
}

/// Two whole NICs (`snic serve --port`) whose wire ports are the ends of a UDP tunnel on
/// loopback: a host program on NIC A streams RDMA WRITEs into NIC B's device memory while a
/// new process takes NIC A over (its wire port, MAC, RDMA engine and the host program's
/// session): every WRITE completes successfully and lands whole.
#[test]
fn an_rdma_write_stream_between_two_nics_goes_on_across_a_takeover() {
    use snic_host::{Placement, rdma_access};
    let (dir_a, dir_b) = (dir("serve-upgrade-nic-a"), dir("serve-upgrade-nic-b"));
    let free = || std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let (ua, ub) = (free(), free());
    let (port_a, port_b) = (format!("udp:{ua},{ub}"), format!("udp:{ub},{ua}"));
    let mut nic_a = vec!["--port", port_a.as_str(), "--rdma-ip", "10.78.0.1", "--workers", "1"];
    // As root, NIC A also has a host netdev (a TAP device), which must stay the same device.
    let tap = format!("snup{}", std::process::id() % 100_000);
    let root = common::netns::is_root();
    if root {
        nic_a.extend(["--host-netdev", tap.as_str()]);
    } else {
        common::netns::note("serve_upgrade: not root, the NIC has no host netdev");
    }
    let ifindex = || std::fs::read_to_string(format!("/sys/class/net/{tap}/ifindex")).ok();
    let nic_b = ["--port", port_b.as_str(), "--rdma-ip", "10.78.0.2", "--workers", "1"];
    let mut old = Serve::start(&dir_a, &nic_a);
    let _b = Serve::start(&dir_b, &nic_b);
    let (a, b) = (Arc::new(connect(&dir_a)), Arc::new(connect(&dir_b)));
    let devbuf = b.alloc_device(DevKind::OnBoard, 16 << 17, 4096).unwrap();
    let (_, rkey) = b.rdma_reg_mr(devbuf, 16 << 17, rdma_access::ALL).unwrap();
    let rings = a.alloc_host(16 << 10).unwrap();
    let qa = a.rdma_create_qp(Placement::Host(&rings), 16).unwrap();
    let qb = b.rdma_create_qp(Placement::OnBoard, 16).unwrap();
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    a.rdma_connect(qa.qpn, qb.qpn, ip("10.78.0.2"), 1024).unwrap();
    b.rdma_connect(qb.qpn, qa.qpn, ip("10.78.0.1"), 1024).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let p = Arc::new(Progress::default());
    let h = write_stream(
        Arc::clone(&a),
        Arc::clone(&b),
        qa.qpn,
        devbuf,
        rkey,
        Arc::clone(&stop),
        Arc::clone(&p),
    );
    more_rounds(&p, 50);
    let before = ifindex();
    assert_eq!(before.is_some(), root, "the host netdev {tap}");
    let control = dir_a.join("control.sock");
    let mut args = nic_a.to_vec();
    args.extend(["--takeover", control.to_str().unwrap()]);
    let new = Serve::start(&dir_a, &args);
    let took = new.line("took over from pid");
    assert!(old.wait().success(), "the old process exits 0 after handing over");
    let report: serde_json::Value =
        serde_json::from_str(&took[took.find('{').expect("report")..]).expect("report JSON");
    let ports = if root { 2 } else { 1 };
    assert_eq!(
        (report["rdma_qps"].as_u64(), report["ports_adopted"].as_u64()),
        (Some(1), Some(ports))
    );
    assert_eq!(ifindex(), before, "the same host netdev, not a new one");
    more_rounds(&p, 200);
    stop.store(true, Ordering::Release);
    h.join().unwrap();
    assert!(p.error.lock().unwrap().is_none(), "{:?}", p.error.lock().unwrap());
    let st = a.stats().unwrap();
    assert_eq!(st["rdma"]["qps"], 1, "the QP carried: {st}");
    let neigh = &st["nic"]["neighbours"];
    assert!(neigh["learned"].as_u64().unwrap() >= 1, "B's MAC carried: {neigh}");
    assert_eq!(neigh["queued"], 0, "no packet waited for a resolution in the new NIC: {neigh}");
    eprintln!(
        "NIC takeover gap: {} ms; longest time between two WRITE completions: {} us",
        report["gap_ms"],
        p.longest_us.load(Ordering::Relaxed)
    );
}

/// A whole NIC's arguments, on a fresh UDP tunnel end.
fn nic_args() -> Vec<String> {
    let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let addr = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    ["--port", &format!("udp:{addr},{peer}"), "--rdma-ip", "10.79.0.1"].map(String::from).to_vec()
}

/// Run `old` (a NIC serving a DMA loop), then a new process with `new_args` taking it over:
/// the new one fails, the old one says `said` naming `what` and serves on, never handed over.
fn refused_nic_takeover(
    name: &str,
    old_args: &[String],
    new_args: &[String],
    said: &str,
    what: &str,
) {
    let dir = dir(name);
    let args: Vec<&str> = old_args.iter().map(String::as_str).collect();
    let mut old = Serve::start(&dir, &args);
    let dev = Arc::new(connect(&dir));
    let (stop, p, h) = start_loop(&dev);
    more_rounds(&p, 10);
    let control = dir.join("control.sock");
    let mut args: Vec<&str> = new_args.iter().map(String::as_str).collect();
    args.extend(["--takeover", control.to_str().unwrap()]);
    let mut new = Serve::start(&dir, &args);
    assert!(!new.wait().success(), "the new process fails");
    let line = old.line(said);
    assert!(line.contains(what), "{line}");
    more_rounds(&p, 20);
    stop.store(true, Ordering::Release);
    h.join().unwrap();
    assert!(p.error.lock().unwrap().is_none(), "{:?}", p.error.lock().unwrap());
    assert!(old.running(), "the old process serves on");
    let said = old.stderr.lock().unwrap().clone();
    assert!(!said.iter().any(|l| l.contains("handed over to")), "{said:?}");
}

/// The old process runs a stateful stage the new one is started without: the old one refuses
/// on its own arguments (before pausing) and serves on.
#[test]
fn the_old_process_refuses_when_its_own_stages_cannot_be_taken_over() {
    let nic = nic_args();
    let mut old = nic.clone();
    old.extend(
        ["--stage", "parse", "--stage", "classify", "--stage", "l2fwd:learn"].map(String::from),
    );
    refused_nic_takeover(
        "serve-upgrade-old-stage",
        &old,
        &nic,
        "takeover refused, carrying on",
        "--stage l2fwd:learn",
    );
}

/// The new process is started with another RoCE address: it refuses the handover (its
/// pipeline would differ), the old one resumes.
#[test]
fn a_new_process_with_other_nic_settings_is_refused_and_the_old_resumes() {
    let nic = nic_args();
    let mut new = nic.clone();
    new[3] = "10.79.0.2".into();
    refused_nic_takeover(
        "serve-upgrade-other-ip",
        &nic,
        &new,
        "takeover failed, carrying on",
        "rdma_ip",
    );
}
