//! eBPF per-packet and verification cost, snic against the Linux kernel, on the shipped
//! examples (`examples/ebpf`), same packet, same run:
//!
//! - the kernel's `BPF_PROG_TEST_RUN` with `repeat` = 1,000,000 (its own mean ns per run, JIT
//!   on when `net.core.bpf_jit_enable` is 1);
//! - verification: snic's (`snic_ebpf::verify`, PREVAIL) and the kernel's `BPF_PROG_LOAD`
//!   (verification, JIT and load), best of 20 each.
//!
//! `cargo bench -p snic-io --bench ebpf_kernel` (root; prints a table). Without root or clang
//! it says so and measures nothing.
//!
//! Caveat: the kernel repeats the program on the same `xdp_buff`, so a program that moves
//! `data` (vxlan_decap's `adjust_head`) decapsulates on the first run only; later runs take
//! its pass-through path.

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
        "{:<14} {:>6} {:>14} {:>14} {:>16}",
        "example", "insns", "kernel ns/run", "snic verify", "kernel load"
    );
    for name in ["proto_count", "mac_swap", "udp_firewall", "vxlan_decap"] {
        let obj = kit::example(name);
        let prog = kit::xdp_program(&obj);
        let k = kit::Kernel::load(&obj);
        let pkt = packet(name);
        // Warm up, then the kernel's own mean over REPEAT runs (best of 3).
        k.prog.test_run(&pkt, 1000).unwrap();
        let ns = (0..3).map(|_| k.prog.test_run(&pkt, REPEAT).unwrap().duration_ns).min().unwrap();
        let verify = best(20, || snic_ebpf::verify(prog).expect("verifies"));
        let load = best(20, || kit::Kernel::load(&obj).prog.load_time);
        println!(
            "{:<14} {:>6} {:>14} {:>11.1} µs {:>13.1} µs",
            name,
            prog.insns.len(),
            ns,
            verify.as_secs_f64() * 1e6,
            load.as_secs_f64() * 1e6
        );
    }
}
