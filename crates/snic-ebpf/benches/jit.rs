//! Nanoseconds per packet, interpreter against JIT, for clang-compiled XDP programs: a
//! per-protocol counter (array map lookup + atomic add), a MAC swap (XDP_TX), a UDP-port
//! firewall (parse Ethernet/IPv4/UDP, hash map lookup). Each run is `XdpProgram::run`, the
//! whole per-packet cost (context and region table set-up included); `pass` (return XDP_PASS)
//! shows that fixed part.
//!
//! Time is the thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), not wall time: the machines this
//! runs on are shared, and wall time would count the time other processes hold the CPU.
#![allow(unsafe_code, reason = "clock_gettime for the thread's CPU time")]

use criterion::{Criterion, black_box, criterion_group, criterion_main};
use snic_ebpf::testing::{compile, have_clang};
use snic_ebpf::{Engine, MapSet, Object, Worker, XdpProgram};
use snic_pipeline::PacketBuf;
use std::path::PathBuf;
use std::time::Duration;

/// This thread's CPU time in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn udp_frame(dport: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    f.extend_from_slice(&[0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend_from_slice(&1234u16.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0, 26, 0, 0]);
    f.resize(64, 0xab);
    f
}

fn bench(c: &mut Criterion) {
    if !have_clang() {
        eprintln!("skipping the JIT bench: clang is not installed");
        return;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/jit_progs");
    let mut g = c.benchmark_group("xdp_per_packet");
    let cases =
        [("pass", 53u16), ("counter", 53), ("macswap", 53), ("firewall", 80), ("firewall", 53)];
    for (name, port) in cases {
        let obj = Object::parse(&compile(&dir.join(format!("{name}.c")), &[]), name)
            .expect("object parses");
        for engine in [Engine::Interpreter, Engine::Jit] {
            let maps = MapSet::new(&obj, 1).expect("maps");
            let mut p = XdpProgram::load(&obj, None, maps).expect("loads");
            if let Err(e) = p.set_engine(engine) {
                eprintln!("{name}: no {engine:?}: {e}");
                continue;
            }
            if let Some(m) = p.maps().by_name("blocked") {
                m.set(&53u16.to_ne_bytes(), &0u64.to_ne_bytes(), 0).expect("block 53");
            }
            let mut w = Worker::new(0);
            let mut pkt = PacketBuf::from_frame(&udp_frame(port));
            let id = format!("{name}-port{port}/{engine:?}");
            g.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    let t0 = thread_cpu_ns();
                    for _ in 0..iters {
                        black_box(p.run(&mut w, &mut pkt, 1, 0, 0));
                    }
                    Duration::from_nanos(thread_cpu_ns() - t0)
                });
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
