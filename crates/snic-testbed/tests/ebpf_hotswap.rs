//! Hot swap of an `xdp:` stage under steady load, on the testbed's simulated clock.
//!
//! One node runs a pipeline whose only stage is an XDP program bouncing every packet back out
//! of its port (`XDP_TX`). Program A stamps `0xA` into two bytes of the payload (its first
//! and last byte) and counts the packet in `hits[0]`; program B stamps `0xB` and counts in
//! `hits[1]`. Frames arrive every microsecond while the test swaps A and B 100 times, each
//! swap between two slices of simulated time, and tries a program the verifier refuses every
//! tenth swap.
//!
//! Checked: no packet is lost (every frame pushed comes back); every packet was handled by
//! exactly one whole program (both stamps equal, and either 0xA or 0xB); the `hits` map is
//! kept across every swap and its two counters equal the packets each program stamped, and
//! their sum the packets sent; a refused program changes nothing (the running program, its
//! generation, the map). The swap time (load + verify + prepare + publish, and the time until
//! the stage runs the new program) is printed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant as WallInstant};

use snic_io::ebpf::{XdpControl, XdpPrograms};
use snic_io::script::{ScriptHandle, ScriptPort};
use snic_pipeline::pipeline::{PipelineConfig, StageSpec};
use snic_pipeline::{BuildError, Pipeline, Stage};
use snic_testbed::Testbed;
use snic_time::Instant;

const HEADER: &str = "#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n";

/// An XDP program stamping `mark` at the first and last payload byte (after 42 bytes of
/// Ethernet, IPv4 and UDP headers) and counting in `hits[key]`.
fn stamper(mark: u8, key: u32) -> String {
    format!(
        "{HEADER}struct {{ __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, __u32); __type(value, __u64); __uint(max_entries, 2); }} hits SEC(\".maps\");
SEC(\"xdp\") int stamp(struct xdp_md *ctx) {{
  unsigned char *d = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
  if (d + 43 > end) return XDP_DROP;
  d[42] = {mark};
  end[-1] = {mark};
  __u32 k = {key}; __u64 *v = bpf_map_lookup_elem(&hits, &k);
  if (v) __sync_fetch_and_add(v, 1);
  return XDP_TX;
}}
char LICENSE[] SEC(\"license\") = \"GPL\";\n"
    )
}

/// Reads past the packet without checking: the verifier refuses it.
const REFUSED: &str = "SEC(\"xdp\") int bad(struct xdp_md *ctx) {
  unsigned char *d = (void *)(long)ctx->data;
  d[60] = 1;
  return XDP_TX;
}
char LICENSE[] SEC(\"license\") = \"GPL\";\n";

fn object(dir: &Path, name: &str, c: &str) -> PathBuf {
    let bytes = snic_ebpf::testing::compile_str(name, c, &[]);
    let path = dir.join(format!("{name}.o"));
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A 64-byte UDP frame with sequence number `n` in its payload.
fn frame(n: u32) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&50u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[38..40].copy_from_slice(&30u16.to_be_bytes());
    f[44..48].copy_from_slice(&n.to_be_bytes());
    f
}

fn build(path: &Path, jit: bool) -> (Pipeline, XdpControl) {
    let spec =
        StageSpec::Xdp { program: path.display().to_string(), section: None, jit: Some(jit) };
    let mut xdp = XdpPrograms::from_stages(std::slice::from_ref(&spec), 1).expect("loads");
    let ctl = xdp.controls()[0].clone();
    let cfg = PipelineConfig::new(vec![spec]);
    let mut no_taps = |_: &str| -> std::io::Result<Box<dyn std::io::Write + Send>> {
        Err(std::io::Error::other("no taps"))
    };
    let mut stage = xdp.factory_for(0);
    let mut factory = |s: &StageSpec| -> Option<Result<Box<dyn Stage>, BuildError>> { stage(s) };
    let p = Pipeline::build_with(&cfg, &mut no_taps, &mut factory).expect("pipeline");
    (p, ctl)
}

fn hits(ctl: &XdpControl) -> [u64; 2] {
    let maps = ctl.maps();
    let m = maps.by_name("hits").expect("hits map");
    std::array::from_fn(|k| {
        let v = m.get(&(k as u32).to_ne_bytes()).expect("array entry");
        u64::from_ne_bytes(v[..8].try_into().unwrap())
    })
}

#[test]
fn hundred_swaps_under_load_lose_nothing_and_never_mix_programs() {
    if !snic_ebpf::testing::require_clang("hundred_swaps_under_load") {
        return;
    }
    hundred_swaps(false);
}

/// The same with `engine=jit` (x86-64 only: elsewhere the JIT refuses every program).
#[test]
#[cfg(target_arch = "x86_64")]
fn hundred_swaps_with_the_jit() {
    if !snic_ebpf::testing::require_clang("hundred_swaps_with_the_jit") {
        return;
    }
    hundred_swaps(true);
}

fn hundred_swaps(jit: bool) {
    let dir = std::env::temp_dir().join(format!("snic-ebpf-hotswap-{}-{jit}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let a = object(&dir, "stamp_a", &stamper(0xA, 0));
    let b = object(&dir, "stamp_b", &stamper(0xB, 1));
    let bad = object(&dir, "refused", &format!("{HEADER}{REFUSED}"));

    let (pipeline, ctl) = build(&a, jit);
    assert_eq!(ctl.info().engine, if jit { "jit" } else { "interp" });
    let (port, handle): (ScriptPort, ScriptHandle) = ScriptPort::new("p0");
    let mut tb = Testbed::new();
    tb.add_node("xdp", pipeline, vec![Box::new(port)]);

    const SWAPS: u32 = 100;
    const PER_SLICE: u32 = 200;
    let total = (SWAPS + 1) * PER_SLICE;
    for n in 0..total {
        handle.push(Instant::from_micros(u64::from(n)), frame(n));
    }
    let (mut load_times, mut verify_times) = (Vec::new(), Vec::new());
    let (mut pending, mut slices) = (Vec::new(), Vec::new());
    let hits_map = ctl.maps().by_name("hits").cloned().expect("hits");
    for swap in 0..=SWAPS {
        // One slice of traffic with the current program.
        let until = Instant::from_micros(u64::from((swap + 1) * PER_SLICE));
        let t = WallInstant::now();
        tb.run_until(until).expect("testbed");
        if let Some(g) = pending.pop() {
            assert!(ctl.wait_picked_up(g, Duration::ZERO).is_some(), "taken by the next batch");
            slices.push(t.elapsed());
        }
        if swap == SWAPS {
            break;
        }
        if swap % 10 == 0 {
            let (generation, prog, before) = (ctl.generation(), ctl.info().program, hits(&ctl));
            let e = ctl.load(&bad, None).expect_err("the verifier refuses it");
            assert!(e.to_string().contains("verification failed"), "{e}");
            assert_eq!(ctl.generation(), generation, "a refused program publishes nothing");
            assert_eq!(ctl.info().program, prog);
            assert_eq!(hits(&ctl), before, "a refused program touches no map");
        }
        let next = if swap % 2 == 0 { &b } else { &a };
        let r = ctl.load(next, None).expect("swap");
        assert_eq!(r.maps, [("hits".to_string(), true)], "hits is kept across swaps");
        load_times.push(r.load);
        verify_times.push(r.verify);
        // Published, not yet running: the stage takes it before its next batch only.
        assert_eq!(ctl.wait_picked_up(r.generation, Duration::ZERO), None);
        pending.push(r.generation);
    }
    tb.drive(1_000_000).expect("drains");
    assert!(
        std::sync::Arc::ptr_eq(&hits_map, ctl.maps().by_name("hits").unwrap()),
        "the very same map object after 100 swaps"
    );

    let sent = handle.take_sent();
    assert_eq!(sent.len() as u32, total, "every packet comes back: none lost");
    let mut seen = vec![false; total as usize];
    let (mut by_a, mut by_b) = (0u64, 0u64);
    for (_, f) in &sent {
        let n = u32::from_be_bytes(f[44..48].try_into().unwrap());
        assert!(!std::mem::replace(&mut seen[n as usize], true), "packet {n} twice");
        match (f[42], f[63]) {
            (0xA, 0xA) => by_a += 1,
            (0xB, 0xB) => by_b += 1,
            other => panic!("packet {n} handled by a half-installed program: stamps {other:?}"),
        }
    }
    assert!(by_a > 0 && by_b > 0, "both programs ran: {by_a} {by_b}");
    assert_eq!(hits(&ctl), [by_a, by_b], "each program's counter equals the packets it stamped");
    assert_eq!(by_a + by_b, u64::from(total), "the pinned map counted every packet sent");
    assert_eq!(ctl.info().swaps, u64::from(SWAPS));

    assert_eq!(slices.len(), SWAPS as usize, "the stage took every program at its next batch");
    let stats = |v: &[Duration]| {
        let mut v = v.to_vec();
        v.sort();
        (v[v.len() / 2], v[v.len() - 1])
    };
    let (lm, lx) = stats(&load_times);
    let (vm, vx) = stats(&verify_times);
    let (sm, sx) = stats(&slices);
    let engine = ctl.info().engine;
    println!(
        "{engine} hot swap over {SWAPS} swaps: load+verify+prepare+publish median {lm:?} max {lx:?} \
         (verify median {vm:?} max {vx:?}); each next slice of {PER_SLICE} packets, run by \
         the new program: median {sm:?} max {sx:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
