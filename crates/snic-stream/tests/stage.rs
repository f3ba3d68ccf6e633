//! The kernel stage in a pipeline: drops counted under exactly the kernel's reason, emitted
//! packets counted as `created`, control commands applied between batches (also to an idle
//! worker), results readable while packets flow.

use snic_pipeline::testing::counters::CounterCheck;
use snic_pipeline::testing::frames::udp64;
use snic_pipeline::{Batch, DropReason, PacketBuf, Pipeline, PipelineConfig, PortId};
use snic_stream::telemetry::reg;
use snic_stream::{
    Emit, HeapRegion, KernelControl, KernelError, Registry, ResultsRegion, StreamKernel, Verdict,
};
use snic_time::Instant;
use std::sync::Arc;

fn args(s: &[(&str, &str)]) -> Vec<(String, String)> {
    s.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// `parse`, then the stages, then `l2fwd` (port 0 -> 1).
fn pipeline(stages: Vec<snic_stream::KernelStage>) -> Pipeline {
    let mut p = Pipeline::build(&PipelineConfig::from_strs(&["parse"]).unwrap(), &mut |_: &str| {
        unreachable!("no taps")
    })
    .unwrap();
    for s in stages {
        p.push(Box::new(s));
    }
    p.push(Box::new(snic_pipeline::stages::L2Fwd::with_map(&[(0, 1)])));
    p
}

fn batch(frames: &[Vec<u8>]) -> Batch {
    let mut b = Batch::new(64);
    for f in frames {
        b.push_frame(f).unwrap().meta.ingress = PortId(0);
    }
    b
}

#[test]
fn telemetry_counts_every_packet_and_the_control_reads_the_table() {
    let (ctl, stages) = Registry::with_builtins()
        .stages("telemetry", "telemetry", &args(&[("capacity", "8")]), 1, [0; 4])
        .unwrap();
    assert_eq!(ctl.spec(), "kernel:telemetry,capacity=8");
    let mut p = pipeline(stages);
    let mut check = CounterCheck::new(&p.counters());
    let mut b = batch(&[udp64(1, 2), udp64(1, 2), udp64(3, 4)]);
    p.process(Instant::from_micros(5), &mut b);
    assert_eq!(b.len(), 3, "telemetry never drops");
    check.assert_moved(
        &p.counters(),
        &[
            ("ports.0.rx_packets", 3),
            ("ports.0.rx_bytes", 3 * 64),
            ("stages.parse.packets_in", 3),
            ("stages.parse.bytes_in", 3 * 64),
            ("stages.parse.packets_out", 3),
            ("stages.kernel:telemetry.packets_in", 3),
            ("stages.kernel:telemetry.bytes_in", 3 * 64),
            ("stages.kernel:telemetry.packets_out", 3),
            ("stages.l2fwd.packets_in", 3),
            ("stages.l2fwd.bytes_in", 3 * 64),
            ("stages.l2fwd.packets_out", 3),
            ("stages.output.packets_in", 3),
            ("stages.output.bytes_in", 3 * 64),
            ("stages.output.packets_out", 3),
        ],
    );
    let tables = ctl.tables();
    let t = tables[0].as_ref().unwrap();
    assert_eq!(t.header.entries, 2);
    assert_eq!(t.flows[0].packets, 2);
    assert_eq!(t.flows[1].key.src_port, 3);
    assert_eq!(ctl.read_reg(reg::FLOWS).unwrap(), [2]);
    // Reset through the control handle: applied before the next batch.
    ctl.write_reg(reg::RESET, 1).unwrap();
    assert!(ctl.pending());
    assert_eq!(p.poll_timeout(), Some(Instant::ZERO), "an idle worker is asked to run");
    p.process(Instant::from_micros(6), &mut Batch::new(4));
    assert!(!ctl.pending());
    assert_eq!(ctl.tables()[0].as_ref().unwrap().header.entries, 0);
    assert_eq!(ctl.read_reg(reg::FLOWS).unwrap(), [0]);
    // Refused writes are refused at once and change nothing.
    assert_eq!(ctl.write_reg(reg::FLOWS, 3), Err(KernelError::ReadOnly("flows")));
    assert_eq!(ctl.read_reg(99), Err(KernelError::NoRegister(99)));
    assert!(!ctl.pending());
}

#[test]
fn crypt_stages_round_trip_and_count_auth_failures_under_one_reason() {
    let hex = "11".repeat(32);
    let reg = Registry::with_builtins();
    let (_, enc) = reg
        .stages("crypt", "crypt", &args(&[("mode", "encrypt"), ("key", &hex)]), 1, [5; 4])
        .unwrap();
    let (dctl, dec) =
        reg.stages("crypt", "crypt", &args(&[("mode", "decrypt")]), 1, [6; 4]).unwrap();
    let mut a = pipeline(enc);
    let mut b = pipeline(dec);
    let plain = udp64(7, 8);
    let mut x = batch(&[plain.clone(), plain.clone()]);
    a.process(Instant::ZERO, &mut x);
    assert_eq!(x.len(), 2);
    assert_ne!(x.packets()[0].data(), &plain[..]);
    // No key yet on the peer: dropped as kernel_no_key, never passed on as ciphertext.
    let frames: Vec<Vec<u8>> = x.iter().map(|p| p.data().to_vec()).collect();
    let mut y = batch(&frames);
    let mut check = CounterCheck::new(&b.counters()).ignore("ports.").ignore("classes.");
    b.process(Instant::ZERO, &mut y);
    assert!(y.is_empty());
    let moved = check.take_moved(&b.counters());
    assert_eq!(moved.get("stages.kernel:crypt.drops.kernel_no_key"), Some(&2), "{moved:?}");
    assert!(
        !moved.keys().any(|k| k.contains("drops.") && !k.ends_with("kernel_no_key")),
        "{moved:?}"
    );
    // The key from the control plane; then one intact and one tampered packet.
    dctl.set_key(0, &[0x11; 32]).unwrap();
    let mut bad = frames[1].clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    let mut y = batch(&[frames[0].clone(), bad]);
    b.process(Instant::ZERO, &mut y);
    assert_eq!(y.len(), 1);
    assert_eq!(y.packets()[0].data(), &plain[..]);
    let moved = check.take_moved(&b.counters());
    assert_eq!(moved.get("stages.kernel:crypt.drops.kernel_auth"), Some(&1), "{moved:?}");
    assert!(
        !moved.keys().any(|k| k.contains("drops.") && !k.ends_with("kernel_auth")),
        "{moved:?}"
    );
}

/// A user kernel: drops odd first payload bytes, emits a copy of every packet to port 2.
#[derive(Debug)]
struct Mirror;

impl StreamKernel for Mirror {
    fn name(&self) -> &'static str {
        "mirror"
    }
    fn process(&mut self, _: Instant, pkt: &mut PacketBuf, emit: &mut Emit<'_>) -> Verdict {
        if pkt.data().last().is_some_and(|b| b % 2 == 1) {
            return Verdict::Drop(DropReason::KernelDrop);
        }
        let _ = emit.packet(pkt.data(), Some(PortId(2)));
        Verdict::Pass
    }
}

#[test]
fn user_kernels_drop_and_emit_with_every_packet_accounted() {
    let (_, stages) =
        KernelControl::new("mirror", "kernel:mirror", 1, |_| Ok(Box::new(Mirror))).unwrap();
    let mut p = Pipeline::new();
    for s in stages {
        p.push(Box::new(s));
    }
    let mut frames = Vec::new();
    for i in 0..40u8 {
        frames.push(vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, i]);
    }
    // 40 in, 20 dropped, 20 emitted into a batch of 32 with 20 live: 12 fit.
    let mut b = Batch::new(32);
    for f in &frames[..32] {
        b.push_frame(f).unwrap();
    }
    let mut check = CounterCheck::new(&p.counters()).ignore("ports.");
    p.process(Instant::ZERO, &mut b);
    let moved = check.take_moved(&p.counters());
    let get = |k: &str| moved.get(k).copied().unwrap_or(0);
    assert_eq!(get("stages.kernel:mirror.packets_in"), 32);
    assert_eq!(get("stages.kernel:mirror.drops.kernel_drop"), 16);
    assert_eq!(get("stages.kernel:mirror.created"), 16);
    assert_eq!(get("stages.kernel:mirror.packets_out"), 32);
    assert_eq!(get("stages.kernel:mirror.drops.pipeline_full"), 0);
    // The emitted copies leave by port 2; the originals had no egress (no_egress).
    assert_eq!(b.iter().filter(|x| x.meta.egress == Some(PortId(2))).count(), 16);
    assert_eq!(get("stages.output.drops.no_egress"), 16);
    // A batch that is full: copies that do not fit are pipeline_full drops, counted as made.
    let mut b = Batch::new(8);
    for f in frames.iter().step_by(2).take(8) {
        b.push_frame(f).unwrap();
    }
    p.process(Instant::ZERO, &mut b);
    let moved = check.take_moved(&p.counters());
    let get = |k: &str| moved.get(k).copied().unwrap_or(0);
    assert_eq!(get("stages.kernel:mirror.created"), 8);
    assert_eq!(get("stages.kernel:mirror.drops.pipeline_full"), 8);
    assert_eq!(get("stages.kernel:mirror.packets_out"), 8);
}

#[test]
fn results_move_to_a_new_region_whole() {
    let (ctl, stages) = Registry::with_builtins()
        .stages("telemetry", "telemetry", &args(&[("capacity", "4")]), 2, [0; 4])
        .unwrap();
    let mut stages = stages.into_iter();
    let mut p = pipeline(vec![stages.next().unwrap()]);
    p.process(Instant::from_nanos(1), &mut batch(&[udp64(1, 2)]));
    let region = Arc::new(HeapRegion::new(ctl.results_len()));
    assert!(ctl.attach_region(0, Arc::new(HeapRegion::new(10)), None).is_err(), "too small");
    assert!(ctl.attach_region(5, region.clone(), None).is_err(), "no such worker");
    ctl.attach_region(0, region.clone(), Some(0xd000_0000_0000_1000)).unwrap();
    p.process(Instant::from_nanos(2), &mut Batch::new(1));
    let t = snic_stream::table::read_consistent(&*region, 1).unwrap();
    assert_eq!((t.header.entries, t.flows[0].packets), (1, 1));
    assert_eq!(ctl.regions()[0].1, Some(0xd000_0000_0000_1000));
    // Worker 1 never ran: its table is a valid empty one.
    let t1 = ctl.tables().remove(1).unwrap();
    assert_eq!((t1.header.worker, t1.header.entries), (1, 0));
    assert!(region.len() >= ctl.results_len());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Any frames (garbage, plain UDP, sealed UDP, tampered) through parse:pass, a decrypting
    /// crypt, telemetry and the mirror kernel: every stage keeps `in + created == out + drops`,
    /// and the packets that leave plus every counted drop are the packets that came in plus
    /// the ones kernels made.
    #[test]
    fn every_packet_is_accounted_for(
        frames in proptest::collection::vec(
            (0u8..4, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120), 0usize..200),
            1..40,
        ),
    ) {
        let reg = Registry::with_builtins();
        let hex = "33".repeat(32);
        let (_, mut enc) =
            reg.stages("crypt", "crypt", &args(&[("mode", "encrypt"), ("key", &hex)]), 1, [1; 4]).unwrap();
        let mut sealer = Pipeline::new();
        sealer.push(Box::new(enc.remove(0)));
        sealer.push(Box::new(snic_pipeline::stages::L2Fwd::with_map(&[(0, 1)])));
        let (_, dec) =
            reg.stages("crypt", "crypt", &args(&[("mode", "decrypt"), ("key", &hex)]), 1, [2; 4]).unwrap();
        let (_, tel) = reg.stages("telemetry", "telemetry", &args(&[("capacity", "4")]), 1, [0; 4]).unwrap();
        let (_, mir) = KernelControl::new("mirror", "kernel:mirror", 1, |_| Ok(Box::new(Mirror))).unwrap();
        let mut p = Pipeline::build(&PipelineConfig::from_strs(&["parse:pass"]).unwrap(), &mut |_: &str| {
            unreachable!("no taps")
        })
        .unwrap();
        for s in dec.into_iter().chain(tel).chain(mir) {
            p.push(Box::new(s));
        }
        p.push(Box::new(snic_pipeline::stages::L2Fwd::with_map(&[(0, 1)])));
        let mut b = Batch::new(64);
        for (kind, bytes, flip) in &frames {
            let f = match kind {
                0 => bytes.clone(),
                1 => udp64(bytes.len() as u16, 9),
                _ => {
                    // Sealed by an encrypting kernel; kind 3 flips one byte after it.
                    let mut s = Batch::new(1);
                    s.push_frame(&udp64(7, 9)).unwrap().meta.ingress = PortId(0);
                    sealer.process(Instant::ZERO, &mut s);
                    let mut f = s.packets()[0].data().to_vec();
                    if *kind == 3 {
                        let i = flip % f.len();
                        f[i] ^= 1;
                    }
                    f
                }
            };
            b.push_frame(&f).unwrap().meta.ingress = PortId(0);
        }
        let n = b.len() as u64;
        p.process(Instant::from_nanos(1), &mut b);
        let c = p.counters();
        let mut created = 0;
        for s in &c.stages {
            proptest::prop_assert_eq!(
                s.packets_in + s.created,
                s.packets_out + s.drops.total() + s.held + s.local,
                "stage {}", s.name
            );
            created += s.created;
        }
        let drops: u64 = c.stages.iter().map(|s| s.drops.total()).sum();
        proptest::prop_assert_eq!(b.len() as u64 + drops, n + created);
    }
}
