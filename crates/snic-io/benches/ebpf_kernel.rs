//! eBPF per-packet and verification cost, snic against the Linux kernel, on the shipped
//! examples (`examples/ebpf`), same packet, same run:
//!
//! - the kernel's `BPF_PROG_TEST_RUN` with `repeat` = 1,000,000 (its own mean ns per run, JIT
//!   on when `net.core.bpf_jit_enable` is 1);
//! - snic's interpreter and JIT (`XdpProgram::run`), 1,000,000 runs on one packet buffer with
//!   the kernel test run's geometry, mean ns per run;
//! - the same logic written as native Rust over the same `PacketBuf` (what a built-in snic
//!   stage would cost), 1,000,000 runs, mean ns per run;
//! - verification: snic's (`snic_ebpf::verify`, PREVAIL) and the kernel's `BPF_PROG_LOAD`
//!   (verification, JIT and load), best of 20 each.
//!
//! `cargo bench -p snic-io --bench ebpf_kernel` (root; prints a table). Without root or clang
//! it says so and measures nothing.
//!
//! Caveat: the kernel repeats the program on the same `xdp_buff`, so a program that moves
//! `data` (vxlan_decap's `adjust_head`) decapsulates on the first run only; later runs take
//! its pass-through path. snic's runs do the same (one buffer, never reset), so the figures
//! compare like with like.

#[path = "../tests/ebpf/kit.rs"]
mod kit;

use std::time::{Duration, Instant};

use snic_io::bpf;
use snic_pipeline::testing::frames;

const REPEAT: u32 = 1_000_000;

fn packet(example: &str) -> Vec<u8> {
    match example {
        "vxlan_decap" => frames::vxlan(42, &frames::udp64(1000, 2000)),
        _ => frames::udp64(1000, 2000),
    }
}

/// snic's mean ns per run over `REPEAT` runs on one buffer (best of 3).
fn snic_ns(obj: &snic_ebpf::Object, engine: snic_ebpf::Engine, pkt: &[u8]) -> f64 {
    let mut s = kit::Snic::load(obj, engine);
    (0..3)
        .map(|_| {
            let mut buf = snic_ebpf::xdp::test_run_buf(pkt);
            let t = Instant::now();
            for i in 0..REPEAT {
                let out = s.prog.run(&mut s.worker, &mut buf, s.ifindex, 0, u64::from(i));
                std::hint::black_box(out);
            }
            t.elapsed().as_secs_f64() * 1e9 / f64::from(REPEAT)
        })
        .fold(f64::INFINITY, f64::min)
}

/// The examples' logic as native Rust, as a built-in stage would do it (maps empty, as in the
/// eBPF runs: the firewall finds nothing blocked).
struct Native {
    counts: Vec<std::sync::atomic::AtomicU64>,
    blocked_ports: std::collections::HashMap<u16, u64>,
    blocked_srcs: Vec<(u32, u8)>,
}

impl Native {
    fn new() -> Native {
        Native {
            counts: (0..257).map(|_| std::sync::atomic::AtomicU64::new(0)).collect(),
            blocked_ports: std::collections::HashMap::new(),
            blocked_srcs: Vec::new(),
        }
    }

    fn count(&self, i: usize) {
        self.counts[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Returns the XDP action number the eBPF example would.
    fn run(&self, name: &str, p: &mut snic_pipeline::PacketBuf) -> u32 {
        const PASS: u32 = 2;
        let d = p.data();
        match name {
            "proto_count" => {
                let mut proto = 256usize;
                if d.len() >= 14 {
                    let (mut et, mut l3) = (u16::from_be_bytes([d[12], d[13]]), 14);
                    if et == 0x8100 && d.len() >= 18 {
                        et = u16::from_be_bytes([d[16], d[17]]);
                        l3 = 18;
                    }
                    if et == 0x0800 && d.len() >= l3 + 20 {
                        proto = usize::from(d[l3 + 9]);
                    } else if et == 0x86dd && d.len() >= l3 + 40 {
                        proto = usize::from(d[l3 + 6]);
                    }
                }
                self.count(proto);
                PASS
            }
            "mac_swap" => {
                if d.len() < 14 {
                    return 1;
                }
                let d = p.data_mut();
                let mut tmp = [0u8; 6];
                tmp.copy_from_slice(&d[0..6]);
                d.copy_within(6..12, 0);
                d[6..12].copy_from_slice(&tmp);
                3
            }
            "udp_firewall" => {
                if d.len() < 34 || d[12..14] != [0x08, 0x00] {
                    self.count(0);
                    return PASS;
                }
                let src = u32::from_be_bytes([d[26], d[27], d[28], d[29]]);
                let hit = self.blocked_srcs.iter().any(|&(net, len)| {
                    len == 0 || (src ^ net) >> (32 - u32::from(len.min(32))) == 0
                });
                if hit {
                    self.count(2);
                    return 1;
                }
                let ihl = usize::from(d[14] & 0x0f) * 4;
                let frag = u16::from_be_bytes([d[20], d[21]]) & 0x1fff;
                if d[23] != 17 || frag != 0 || d.len() < 14 + ihl + 8 {
                    self.count(0);
                    return PASS;
                }
                let port = u16::from_be_bytes([d[14 + ihl + 2], d[14 + ihl + 3]]);
                if self.blocked_ports.contains_key(&port) {
                    self.count(1);
                    return 1;
                }
                self.count(0);
                PASS
            }
            "vxlan_decap" => {
                const OUTER: usize = 14 + 20 + 8 + 8;
                let ok = d.len() >= OUTER + 14
                    && d[12..14] == [0x08, 0x00]
                    && d[14] == 0x45
                    && d[23] == 17
                    && u16::from_be_bytes([d[20], d[21]]) & 0x3fff == 0
                    && u16::from_be_bytes([d[36], d[37]]) == 4789
                    && d[42] & 0x08 != 0;
                if !ok {
                    self.count(1);
                    return PASS;
                }
                if p.pull_front(OUTER).is_err() {
                    return 0;
                }
                self.count(0);
                PASS
            }
            _ => 0,
        }
    }
}

/// The native version's mean ns per run over `REPEAT` runs on one buffer (best of 3).
fn native_ns(name: &str, pkt: &[u8]) -> f64 {
    let n = Native::new();
    (0..3)
        .map(|_| {
            let mut buf = snic_ebpf::xdp::test_run_buf(pkt);
            let t = Instant::now();
            for _ in 0..REPEAT {
                std::hint::black_box(n.run(std::hint::black_box(name), &mut buf));
            }
            t.elapsed().as_secs_f64() * 1e9 / f64::from(REPEAT)
        })
        .fold(f64::INFINITY, f64::min)
}

fn best<T>(n: usize, mut f: impl FnMut() -> T) -> Duration {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed()
        })
        .min()
        .unwrap()
}

fn main() {
    if !snic_ebpf::testing::have_clang() || !bpf::bpf_available() {
        eprintln!("ebpf_kernel: needs clang and the bpf(2) system call (root); nothing measured");
        return;
    }
    let jit = std::fs::read_to_string("/proc/sys/net/core/bpf_jit_enable").unwrap_or_default();
    println!("kernel JIT: bpf_jit_enable={}", jit.trim());
    println!(
        "{:<14} {:>6} {:>10} {:>10} {:>10} {:>10} {:>14} {:>14}",
        "example",
        "insns",
        "kernel ns",
        "interp ns",
        "jit ns",
        "native ns",
        "snic verify",
        "kernel load"
    );
    for name in ["proto_count", "mac_swap", "udp_firewall", "vxlan_decap"] {
        let obj = kit::example(name);
        let prog = kit::xdp_program(&obj);
        let k = kit::Kernel::load(&obj);
        let pkt = packet(name);
        // Warm up, then the kernel's own mean over REPEAT runs (best of 3).
        k.prog.test_run(&pkt, 1000).unwrap();
        let ns = (0..3).map(|_| k.prog.test_run(&pkt, REPEAT).unwrap().duration_ns).min().unwrap();
        let interp = snic_ns(&obj, snic_ebpf::Engine::Interpreter, &pkt);
        let jit = snic_ns(&obj, snic_ebpf::Engine::Jit, &pkt);
        let native = native_ns(name, &pkt);
        // The native version must do what the program does, or the comparison means nothing.
        let (mut a, mut b) =
            (snic_ebpf::xdp::test_run_buf(&pkt), snic_ebpf::xdp::test_run_buf(&pkt));
        let mut s = kit::Snic::load(&obj, snic_ebpf::Engine::Interpreter);
        let ebpf = s.prog.run(&mut s.worker, &mut a, s.ifindex, 0, 0).action.code();
        assert_eq!((Native::new().run(name, &mut b), b.data()), (ebpf, a.data()), "{name}");
        let verify = best(20, || snic_ebpf::verify(prog).expect("verifies"));
        let load = best(20, || kit::Kernel::load(&obj).prog.load_time);
        println!(
            "{:<14} {:>6} {:>10} {:>10.1} {:>10.1} {:>10.1} {:>11.1} µs {:>11.1} µs",
            name,
            prog.insns.len(),
            ns,
            interp,
            jit,
            native,
            verify.as_secs_f64() * 1e6,
            load.as_secs_f64() * 1e6
        );
    }
    // The NIC-core example has no kernel counterpart: its verification time only.
    let obj = kit::example("core_checksum");
    let prog = obj.programs.iter().find(|p| p.kind == snic_ebpf::ProgKind::NicCore).unwrap();
    let verify = best(5, || snic_ebpf::verify(prog).expect("verifies"));
    println!(
        "{:<14} {:>6} {:>10} {:>10} {:>10} {:>10} {:>11.1} µs {:>14}",
        "core_checksum",
        prog.insns.len(),
        "-",
        "-",
        "-",
        "-",
        verify.as_secs_f64() * 1e6,
        "-"
    );
}
