//! Shared by the eBPF differential test and bench: packet sets (snic's frame builders and
//! scapy) and a kernel-side runner (`BPF_PROG_TEST_RUN` over kernel maps made from the
//! object's map specs).

#![allow(dead_code, reason = "each test binary uses part of the kit")]

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use snic_ebpf::testing::compile;
use snic_ebpf::{Object, Program};
use snic_io::bpf::{self, KernelMap, KernelProgram};
use snic_pipeline::testing::frames;

/// Seeded frames from snic's builders: UDP/TCP over IPv4 with varied addresses and ports, small
/// and up to 3.4 KB,
/// VXLAN around them (good and with the I flag cleared), ARP-typed and random-ethertype frames,
/// truncations at every header boundary, and runts.
pub fn snic_frames(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let srcs = [
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 1, 2, 3),
        Ipv4Addr::new(192, 0, 2, 7),
        Ipv4Addr::new(198, 51, 100, 1),
        Ipv4Addr::new(203, 0, 113, 77),
        Ipv4Addr::new(8, 8, 8, 8),
    ];
    let ports = [53u16, 80, 123, 443, 4789, 11211, 9, 12345];
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let src = srcs[rng.gen_range(0..srcs.len())];
        let dst = srcs[rng.gen_range(0..srcs.len())];
        let sp = if rng.gen_bool(0.5) { ports[rng.gen_range(0..ports.len())] } else { rng.r#gen() };
        let dp = if rng.gen_bool(0.7) { ports[rng.gen_range(0..ports.len())] } else { rng.r#gen() };
        // Mostly small frames; one in 25 up to a full test-run buffer (3520 bytes of frame).
        let plen =
            if rng.gen_ratio(1, 25) { rng.gen_range(1400..3400) } else { rng.gen_range(0..80) };
        let payload: Vec<u8> = (0..plen).map(|_| rng.r#gen()).collect();
        let l3 = match rng.gen_range(0..3) {
            0 => frames::ipv4_udp(src, dst, sp, dp, &payload, rng.gen_bool(0.3)),
            1 => frames::ipv4_tcp(src, dst, sp, dp, &payload),
            _ => frames::ipv4(src, dst, rng.r#gen(), &payload),
        };
        let mut f = match rng.gen_range(0..6) {
            0..=2 => frames::eth(frames::MAC_B, frames::MAC_A, 0x0800, &l3),
            3 => {
                let inner = frames::eth(frames::MAC_A, frames::MAC_B, 0x0800, &l3);
                let mut v = frames::vxlan(rng.gen_range(0..1 << 24), &inner);
                if rng.gen_bool(0.2) {
                    v[42] = 0; // VXLAN flags without I
                }
                v
            }
            4 => frames::eth(frames::MAC_B, frames::MAC_A, 0x0806, &payload),
            _ => frames::eth(frames::MAC_B, frames::MAC_A, rng.r#gen(), &l3),
        };
        match rng.gen_range(0..20) {
            0 => f.truncate(rng.gen_range(14..f.len().max(15))),
            1 => f.truncate([14, 33, 34, 41, 42, 49, 50, 63][rng.gen_range(0..8)].min(f.len())),
            2 => f.truncate(rng.gen_range(0..14)),
            _ => {}
        }
        out.push(f);
    }
    out
}

/// Seeded frames from `tests/ebpf/packets.py` (scapy); `None` (after saying why) when python3
/// or scapy is missing outside CI; panics under CI, where `.ci/run` installs scapy.
pub fn scapy_frames(seed: u64, n: usize) -> Option<Vec<Vec<u8>>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ebpf/packets.py");
    let out =
        Command::new("python3").arg(&script).arg(seed.to_string()).arg(n.to_string()).output();
    let out = match out {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            let msg = format!("packets.py failed: {}", String::from_utf8_lossy(&o.stderr));
            assert!(!bpf::under_ci(), "{msg}");
            eprintln!("skipping scapy packets: {msg}");
            return None;
        }
        Err(e) => {
            assert!(!bpf::under_ci(), "python3: {e}");
            eprintln!("skipping scapy packets: python3: {e}");
            return None;
        }
    };
    let text = String::from_utf8(out.stdout).expect("packets.py prints hex");
    let frames: Vec<Vec<u8>> = text.lines().map(|l| hex(l.trim())).collect();
    assert_eq!(frames.len(), n, "packets.py printed {} frames, not {n}", frames.len());
    Some(frames)
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap()).collect()
}

/// Every frame of the differential run: snic's and scapy's.
pub fn all_frames(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut v = snic_frames(seed, n);
    if let Some(s) = scapy_frames(seed, n) {
        v.extend(s);
    }
    v
}

/// Compiles and parses one example (`examples/ebpf/NAME.c`).
pub fn example(name: &str) -> Object {
    let src = snic_ebpf::testing::examples_dir().join(format!("{name}.c"));
    Object::parse(&compile(&src, &[]), name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Compiles and parses one corpus program (`crates/snic-ebpf/tests/corpus/NAME.c`).
pub fn corpus(name: &str) -> Object {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../snic-ebpf/tests/corpus")
        .join(format!("{name}.c"));
    Object::parse(&compile(&src, &[]), name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The object's one XDP program.
pub fn xdp_program(obj: &Object) -> &Program {
    obj.programs
        .iter()
        .find(|p| p.kind == snic_ebpf::ProgKind::Xdp)
        .expect("the object has an XDP program")
}

/// One program loaded in the kernel with its own maps.
pub struct Kernel {
    /// The kernel's maps, by `Object::maps` index.
    pub maps: Vec<KernelMap>,
    /// The program.
    pub prog: KernelProgram,
    names: Vec<String>,
}

impl Kernel {
    /// Creates the object's maps and loads its XDP program.
    pub fn load(obj: &Object) -> Kernel {
        let maps: Vec<KernelMap> = obj
            .maps
            .iter()
            .map(|m| KernelMap::create(m).unwrap_or_else(|e| panic!("map {}: {e}", m.name)))
            .collect();
        let refs: Vec<&KernelMap> = maps.iter().collect();
        let prog = KernelProgram::load(
            xdp_program(obj),
            &refs,
            bpf::PROG_TYPE_XDP,
            obj.license.as_deref().unwrap_or("GPL"),
        )
        .unwrap_or_else(|r| panic!("the kernel refuses the program:\n{r}"));
        Kernel { maps, prog, names: obj.maps.iter().map(|m| m.name.clone()).collect() }
    }

    /// The map called `name`.
    pub fn map(&self, name: &str) -> &KernelMap {
        let i =
            self.names.iter().position(|n| n == name).unwrap_or_else(|| panic!("no map {name}"));
        &self.maps[i]
    }

    /// Runs the program once on `frame`: `(action, bytes out)`, or `None` when the kernel cannot
    /// test-run such a frame (shorter than an Ethernet header).
    pub fn run(&self, frame: &[u8]) -> Option<(u32, Vec<u8>)> {
        if frame.len() < 14 {
            return None;
        }
        let r = self
            .prog
            .test_run(frame, 1)
            .unwrap_or_else(|e| panic!("BPF_PROG_TEST_RUN on a {}-byte frame: {e}", frame.len()));
        Some((r.retval, r.data_out))
    }
}

/// The interface index the kernel gives test runs without a context (`lo` in the caller's
/// network namespace: `BPF_PROG_TEST_RUN` runs XDP on loopback's receive queue 0).
pub fn loopback_ifindex() -> u32 {
    std::fs::read_to_string("/sys/class/net/lo/ifindex")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1)
}

/// One program loaded in snic (one worker) with its own maps.
pub struct Snic {
    /// The program.
    pub prog: snic_ebpf::XdpProgram,
    /// The worker state it runs with.
    pub worker: snic_ebpf::Worker,
    /// `ingress_ifindex` of every run (as the kernel's test runs: [`loopback_ifindex`]).
    pub ifindex: u32,
}

impl Snic {
    /// Loads the object's XDP program over fresh maps (one worker), run by `engine`.
    pub fn load(obj: &Object, engine: snic_ebpf::Engine) -> Snic {
        let maps = snic_ebpf::MapSet::new(obj, 1).unwrap_or_else(|e| panic!("maps: {e}"));
        let mut prog = snic_ebpf::XdpProgram::load(obj, None, maps)
            .unwrap_or_else(|e| panic!("snic refuses the program: {e}"));
        prog.set_engine(engine).unwrap_or_else(|e| panic!("engine {engine:?}: {e}"));
        Snic { prog, worker: snic_ebpf::Worker::new(0), ifindex: loopback_ifindex() }
    }

    /// The map called `name`.
    pub fn map(&self, name: &str) -> &snic_ebpf::Map {
        self.prog.maps().by_name(name).unwrap_or_else(|| panic!("no map {name}"))
    }

    /// Runs the program once on `frame` with the kernel test run's buffer geometry:
    /// `(action code, metadata + frame after the run)` (the kernel's test run returns the
    /// metadata in front of the frame too).
    pub fn run(&mut self, frame: &[u8], now_ns: u64) -> (u32, Vec<u8>) {
        let mut pkt = snic_ebpf::xdp::test_run_buf(frame);
        let out = self.prog.run(&mut self.worker, &mut pkt, self.ifindex, 0, now_ns);
        let mut bytes = pkt.data_meta().to_vec();
        bytes.extend_from_slice(pkt.data());
        (out.action.code(), bytes)
    }
}
