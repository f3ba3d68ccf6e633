//! The JIT against the interpreter on clang-compiled XDP programs: for each program and a few
//! hundred packets, both engines give the same action, the same output bytes and window
//! (adjust_head moves `data`), and leave the same map contents. The JIT targets x86-64 only.
#![cfg(target_arch = "x86_64")]

use proptest::prelude::*;
use snic_ebpf::testing::{compile, require_clang};
use snic_ebpf::{Engine, MapSet, Object, Worker, XdpOutcome, XdpProgram};
use snic_pipeline::PacketBuf;
use std::path::PathBuf;

fn source(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/jit_progs").join(format!("{name}.c"))
}

/// The program loaded twice over separate maps: (interpreter, JIT).
fn pair(name: &str) -> (XdpProgram, XdpProgram) {
    let obj = Object::parse(&compile(&source(name), &[]), name).expect("object parses");
    let load = |engine| {
        let maps = MapSet::new(&obj, 1).expect("maps");
        let mut p = XdpProgram::load(&obj, None, maps).expect("loads");
        p.set_engine(engine).expect("engine available");
        assert_eq!(p.engine(), engine);
        p
    };
    let (i, j) = (load(Engine::Interpreter), load(Engine::Jit));
    assert!(j.jit().is_some_and(|c| c.code_len() > 0));
    (i, j)
}

/// What a run shows from outside: action, fault, headroom, metadata length and frame bytes.
fn run(p: &XdpProgram, w: &mut Worker, frame: &[u8]) -> (XdpOutcome, usize, usize, Vec<u8>) {
    let mut pkt = PacketBuf::from_frame(frame);
    let out = p.run(w, &mut pkt, 3, 1, 1_000);
    (out, pkt.headroom(), pkt.meta_len(), pkt.data().to_vec())
}

/// Every map's entries, by name.
type MapContents = Vec<(String, Vec<(Vec<u8>, Vec<u8>)>)>;

fn map_contents(p: &XdpProgram) -> MapContents {
    p.maps().iter().map(|m| (m.name().to_string(), m.entries())).collect()
}

/// Ethernet + IPv4 + UDP/TCP/other with the given fields, padded by `tail` random bytes.
fn frame(proto: u8, ihl: u8, dport: u16, ethertype: u16, tail: &[u8], cut: usize) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    f.extend_from_slice(&ethertype.to_be_bytes());
    let ihl = ihl.clamp(5, 15);
    let mut ip = vec![0x40 | ihl, 0, 0, 0, 0, 0, 0, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
    ip.resize(usize::from(ihl) * 4, 0);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&1234u16.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0, 8, 0, 0]);
    f.extend_from_slice(tail);
    f.truncate(cut.max(1).min(f.len()));
    f
}

fn frames() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let one = (
        prop_oneof![Just(17u8), Just(6), Just(1), any::<u8>()],
        prop_oneof![Just(5u8), 5u8..16],
        prop_oneof![Just(53u16), Just(80), Just(4789), Just(9999), any::<u16>()],
        prop_oneof![4 => Just(0x0800u16), 1 => Just(0x86dd), 1 => any::<u16>()],
        proptest::collection::vec(any::<u8>(), 0..64),
        prop_oneof![4 => Just(usize::MAX), 1 => 1usize..80],
    )
        .prop_map(|(p, ihl, port, et, tail, cut)| frame(p, ihl, port, et, &tail, cut));
    proptest::collection::vec(one, 1..40)
}

/// Runs every frame through both engines, comparing each run and the maps at the end.
fn agree(name: &str, frames: &[Vec<u8>], setup: impl Fn(&XdpProgram)) -> Result<(), TestCaseError> {
    let (interp, jit) = pair(name);
    setup(&interp);
    setup(&jit);
    let (mut wi, mut wj) = (Worker::new(0), Worker::new(0));
    wi.seed(5);
    wj.seed(5);
    for f in frames {
        let a = run(&interp, &mut wi, f);
        let b = run(&jit, &mut wj, f);
        prop_assert_eq!(&b, &a, "{}: frame {:02x?}", name, f);
    }
    prop_assert_eq!(map_contents(&jit), map_contents(&interp), "{}: maps", name);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn counter_agrees(fs in frames()) {
        if require_clang("counter_agrees") {
            agree("counter", &fs, |_| {})?;
        }
    }

    #[test]
    fn mac_swap_agrees(fs in frames()) {
        if require_clang("mac_swap_agrees") {
            agree("macswap", &fs, |_| {})?;
        }
    }

    #[test]
    fn firewall_agrees(fs in frames()) {
        if require_clang("firewall_agrees") {
            agree("firewall", &fs, |p| {
                let m = p.maps().by_name("blocked").expect("blocked map");
                for port in [53u16, 9999] {
                    m.set(&port.to_ne_bytes(), &0u64.to_ne_bytes(), 0).expect("set");
                }
            })?;
        }
    }

    #[test]
    fn calls_atomics_and_adjust_head_agree(fs in frames()) {
        if require_clang("calls_atomics_and_adjust_head_agree") {
            agree("mixed", &fs, |_| {})?;
        }
    }
}

#[test]
fn the_counter_counts_through_the_jit() {
    if !require_clang("the_counter_counts_through_the_jit") {
        return;
    }
    let (_, jit) = pair("counter");
    let mut w = Worker::new(0);
    for _ in 0..5 {
        run(&jit, &mut w, &frame(17, 5, 53, 0x0800, &[], usize::MAX));
    }
    run(&jit, &mut w, &frame(6, 5, 80, 0x0800, &[], usize::MAX));
    let counts = jit.maps().by_name("counts").expect("counts");
    let get = |k: u32| {
        counts.get(&k.to_ne_bytes()).map(|v| u64::from_ne_bytes(v[..8].try_into().unwrap()))
    };
    assert_eq!(get(17), Some(5));
    assert_eq!(get(6), Some(1));
    assert_eq!(get(1), Some(0));
}

#[test]
fn adjust_head_moves_the_window_under_the_jit() {
    if !require_clang("adjust_head_moves_the_window_under_the_jit") {
        return;
    }
    let (_, jit) = pair("mixed");
    let mut w = Worker::new(0);
    let f = frame(17, 5, 53, 0x0800, &[7; 20], usize::MAX);
    let before = PacketBuf::from_frame(&f).headroom();
    let (out, head, _, data) = run(&jit, &mut w, &f);
    assert!(out.fault.is_none(), "{out:?}");
    assert_eq!(head, before + 4);
    assert_eq!(data.len(), f.len() - 4);
    assert_eq!(data[4..], f[8..]);
}

/// An array lookup with a key from the packet, often out of range: the JIT inlines array
/// lookups, so both the hit and the NULL path must match the map's own lookup.
const ARRAY_INDEX: &str = r#"
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 5);
    __type(key, __u32);
    __type(value, __u32[3]);
} slots SEC(".maps");

SEC("xdp")
int array_index(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;
    if (data + 4 > end)
        return XDP_ABORTED;
    __u32 key = *(__u32 *)data & 7;
    __u32 *v = bpf_map_lookup_elem(&slots, &key);
    if (!v)
        return XDP_DROP;
    v[0] += 1;
    v[2] = key;
    return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
"#;

#[test]
fn inlined_array_lookups_agree_in_and_out_of_range() {
    if !require_clang("inlined_array_lookups_agree_in_and_out_of_range") {
        return;
    }
    let bytes = snic_ebpf::testing::compile_str("jit_array_index", ARRAY_INDEX, &[]);
    let obj = Object::parse(&bytes, "array_index").expect("parses");
    let load = |engine| {
        let mut p =
            XdpProgram::load(&obj, None, MapSet::new(&obj, 1).expect("maps")).expect("loads");
        p.set_engine(engine).expect("engine");
        p
    };
    let (interp, jit) = (load(Engine::Interpreter), load(Engine::Jit));
    let (mut wi, mut wj) = (Worker::new(0), Worker::new(0));
    let mut drops = 0;
    for k in 0..32u8 {
        let f = [k, 0, 0, 0, 9, 9];
        let a = run(&interp, &mut wi, &f);
        let b = run(&jit, &mut wj, &f);
        assert_eq!(b, a, "key {k}");
        drops += usize::from(a.0.action == snic_ebpf::XdpAction::Drop);
    }
    assert_eq!(drops, 32 / 8 * 3, "keys 5, 6, 7 of every 8 are out of range");
    assert_eq!(map_contents(&jit), map_contents(&interp));
}

/// A NIC-core kernel (a byte histogram with a loop, a bpf-to-bpf call and argument copies)
/// under both engines: same result, same output argument.
#[test]
fn nic_core_programs_agree() {
    use snic_ebpf::core::CoreProgram;
    if !require_clang("nic_core_programs_agree") {
        return;
    }
    let src = r#"
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "snic_core.h"

static __attribute__((noinline)) __u64 weight(__u64 b, __u64 k) { return (b * k) ^ (b >> 3); }

SEC("snic/core") int histogram(struct snic_core_md *md) {
    unsigned char *d = (void *)(long)md->data, *end = (void *)(long)md->data_end;
    __u32 hist[16] = {};
    __u64 acc = md->scalars[0];
    for (int i = 0; i < 512; i++) {
        if (d + i + 1 > end) break;
        hist[d[i] & 15]++;
        acc += weight(d[i], i);
    }
    if (snic_arg_write(1, 0, hist, sizeof(hist))) return -1;
    return acc ^ md->id;
}
char _license[] SEC("license") = "GPL";
"#;
    let bytes = snic_ebpf::testing::compile_str("jit_core_histogram", src, &[]);
    let obj = Object::parse(&bytes, "histogram").expect("parses");
    let load = |engine| {
        let mut p =
            CoreProgram::load(&obj, None, MapSet::new(&obj, 1).expect("maps")).expect("loads");
        p.set_engine(engine).expect("engine");
        assert_eq!(p.engine(), engine);
        p
    };
    let (interp, jit) = (load(Engine::Interpreter), load(Engine::Jit));
    for len in [0usize, 1, 17, 300, 600] {
        let mut data: Vec<u8> = (0..len).map(|i| (i * 37 % 251) as u8).collect();
        let (mut oi, mut oj) = (vec![0u8; 64], vec![0u8; 64]);
        let scalars = [len as u64 * 3, 0, 0, 0, 0, 0, 0, 0];
        let ri =
            interp.run_with(&mut Worker::new(0), &mut [&mut data.clone(), &mut oi], &scalars, 9, 0);
        let rj = jit.run_with(&mut Worker::new(0), &mut [&mut data, &mut oj], &scalars, 9, 0);
        assert!(ri.is_ok(), "{ri:?}");
        assert_eq!(rj, ri, "len {len}");
        assert_eq!(oj, oi, "len {len}");
    }
}
