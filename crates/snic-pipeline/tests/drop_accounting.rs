//! "Every dropped packet increments exactly one drop-reason counter", tested generally with the
//! counters kit: one packet at a time, any bytes, through chains of the built-in stages, and
//! after each packet the set of counters that moved must be exactly one packet's story: the
//! ingress port counted it received, the stages it entered moved `packets_in` by one and
//! `bytes_in` by its length, and either it left
//! with an egress port (no drop counter moved anywhere) or exactly one drop counter, of the stage
//! that dropped it, moved by one, and no later stage saw it.

use proptest::prelude::*;
use snic_pipeline::testing::counters::{CounterCheck, unique_labels};
use snic_pipeline::testing::frames::*;
use snic_pipeline::{Batch, Counters, Pipeline, PortId};
use snic_time::Instant;

/// Chains of the built-in stages, as the CLI names them.
const CHAINS: &[&[&str]] = &[
    &["parse", "classify", "l2fwd"],
    &["parse:pass", "parse", "classify", "classify:mark", "l2fwd"],
    &["parse:pass", "classify", "l2fwd:learn"],
    &["parse", "classify:mark", "l2fwd:0=1"],
    &["classify", "l2fwd"],
    &["parse"],
];

/// Run `frame` alone through `p` from `port`; check what moved. Returns whether it left.
fn one_packet(p: &mut Pipeline, check: &mut CounterCheck, port: u16, frame: &[u8]) -> bool {
    let mut b = Batch::new(4);
    let Some(pkt) = b.push_frame(frame) else { return false };
    pkt.meta.ingress = PortId(port);
    p.process(Instant::ZERO, &mut b);
    let left = b.len() == 1;
    let counters: Counters = p.counters();
    let moved = check.take_moved(&counters);
    let names = unique_labels(counters.stages.iter().map(|s| s.name.clone()));

    // Stage drops (`stages.S.drops.R`) and port drops (`ports.N.rx_drops.R`, `tx_drops.R`):
    // every path segment that ends in `drops`.
    let drops: Vec<(&String, &i128)> =
        moved.iter().filter(|(k, _)| k.split('.').any(|seg| seg.ends_with("drops"))).collect();
    if left {
        assert!(drops.is_empty(), "a packet that left also counted a drop: {moved:?}");
        assert!(b.iter().all(|p| p.meta.egress.is_some()), "a packet left without an egress port");
    } else {
        assert_eq!(drops.len(), 1, "a dropped packet must count exactly one reason: {moved:?}");
        assert_eq!(*drops[0].1, 1, "by exactly one: {moved:?}");
    }
    // The stages the packet entered, in order, up to the one that dropped it.
    let dropped_at = drops
        .first()
        .and_then(|(k, _)| k.strip_prefix("stages."))
        .and_then(|k| k.split('.').next())
        .map(str::to_string);
    let mut expect: Vec<(String, i128)> = vec![
        (format!("ports.{port}.rx_packets"), 1),
        (format!("ports.{port}.rx_bytes"), frame.len() as i128),
    ];
    if let Some((k, _)) = drops.first().filter(|(k, _)| k.starts_with("ports.")) {
        expect.push(((*k).clone(), 1));
    }
    for name in &names {
        expect.push((format!("stages.{name}.packets_in"), 1));
        expect.push((format!("stages.{name}.bytes_in"), frame.len() as i128));
        if dropped_at.as_deref() == Some(name.as_str()) {
            expect.push((
                format!(
                    "stages.{name}.drops.{}",
                    drops[0].0.rsplit_once(".drops.").map_or("", |(_, r)| r)
                ),
                1,
            ));
            break;
        }
        expect.push((format!("stages.{name}.packets_out"), 1));
    }
    for (k, d) in &expect {
        assert_eq!(moved.get(k).copied().unwrap_or(0), *d, "{k} in {moved:?}");
    }
    // Anything else that moved must be a classification count of a stage the packet entered
    // (the classify stage counts each packet by class).
    for k in moved.keys() {
        let known = expect.iter().any(|(e, _)| e == k)
            || (k.contains(".classes.")
                && names.iter().any(|n| k.starts_with(&format!("stages.{n}."))));
        assert!(known, "{k} moved for one packet; only the packet's own counters may: {moved:?}");
    }
    left
}

fn sample_frames() -> Vec<Vec<u8>> {
    let good = vec![
        udp64(1000, 2000),
        tcp_frame(1, 2, b"hello"),
        vxlan(7, &udp64(3, 4)),
        roce_write(Write::default(), false),
        roce_write(Write::default(), true),
    ];
    let mut out = good.clone();
    // Every truncation of every good frame: each is malformed at some layer, or still whole.
    for f in &good {
        for n in 0..f.len() {
            out.push(f[..n].to_vec());
        }
    }
    out
}

#[test]
fn every_frame_and_every_truncation_counts_one_reason_or_leaves() {
    for chain in CHAINS {
        let mut p = Pipeline::from_strs(chain).unwrap();
        let mut check = CounterCheck::new(&p.counters());
        let (mut left, mut dropped) = (0, 0);
        for (i, f) in sample_frames().iter().enumerate() {
            if one_packet(&mut p, &mut check, (i % 2) as u16, f) {
                left += 1;
            } else {
                dropped += 1;
            }
        }
        // The corpus exercises every outcome a chain can have: a chain that forwards lets the
        // whole frames leave; a chain that parses strictly (or cannot forward) drops.
        if chain.iter().any(|s| s.starts_with("l2fwd")) {
            assert!(left > 0, "{chain:?}: nothing left");
        }
        if chain.contains(&"parse") || !chain.iter().any(|s| s.starts_with("l2fwd")) {
            assert!(dropped > 0, "{chain:?}: nothing dropped");
        }
    }
}

proptest! {
    #[test]
    fn any_bytes_count_one_reason_or_leave(
        frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..160), 1..24),
        chain in 0..CHAINS.len(),
    ) {
        let mut p = Pipeline::from_strs(CHAINS[chain]).unwrap();
        let mut check = CounterCheck::new(&p.counters());
        for (i, f) in frames.iter().enumerate() {
            one_packet(&mut p, &mut check, (i % 3) as u16, f);
        }
    }
}
