//! eBPF per-packet and verification cost, snic against the Linux kernel, on the shipped
//! examples (`examples/ebpf`), same packet, same run:
//!
//! - the kernel's `BPF_PROG_TEST_RUN` with `repeat` = 1,000,000 (its own mean ns per run, JIT
//!   on when `net.core.bpf_jit_enable` is 1);
//! - snic's interpreter and JIT (`XdpProgram::run`), 1,000,000 runs on one packet buffer with
//!   the kernel test run's geometry, mean ns per run;
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
        "{:<14} {:>6} {:>10} {:>10} {:>10} {:>14} {:>14}",
        "example", "insns", "kernel ns", "interp ns", "jit ns", "snic verify", "kernel load"
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
        let verify = best(20, || snic_ebpf::verify(prog).expect("verifies"));
        let load = best(20, || kit::Kernel::load(&obj).prog.load_time);
        println!(
            "{:<14} {:>6} {:>10} {:>10.1} {:>10.1} {:>11.1} µs {:>11.1} µs",
            name,
            prog.insns.len(),
            ns,
            interp,
            jit,
            verify.as_secs_f64() * 1e6,
            load.as_secs_f64() * 1e6
        );
    }
    // The NIC-core example has no kernel counterpart: its verification time only.
    let obj = kit::example("core_checksum");
    let prog = obj.programs.iter().find(|p| p.kind == snic_ebpf::ProgKind::NicCore).unwrap();
    let verify = best(5, || snic_ebpf::verify(prog).expect("verifies"));
    println!(
        "{:<14} {:>6} {:>10} {:>10} {:>10} {:>11.1} µs {:>14}",
        "core_checksum",
        prog.insns.len(),
        "-",
        "-",
        "-",
        verify.as_secs_f64() * 1e6,
        "-"
    );
}
