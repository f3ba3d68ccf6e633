//! Fuzz target `vswitch_packets`: arbitrary frames through `parse:pass -> vswitch` with the
//! embedded default policy (VM on port 0, underlay on port 1, port 2 unknown), a tiny flow table
//! (16 flows, so eviction runs), a tiny exception queue (8) and a slow-path budget of 2 per batch
//! (so packets are held across batches).
//!
//! Input layout: frames as `port (1 byte, mod 3)`, `time step (1 byte, microseconds)`,
//! `length (2 bytes LE)`, `bytes`; up to 8 frames per batch.
//!
//! Checked, besides "never panics": every packet left in a batch has an egress port; for every
//! stage `packets_in == packets_out + drops + held`; after the input ends, polling empty batches
//! releases every held packet (the exception queue drains).

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_pipeline::{Batch, Pipeline, PortId};
use snic_time::Instant;
use snic_vswitch::engine::{VSwitch, VSwitchConfig};
use snic_vswitch::policy::default_policy;

const BATCH: usize = 8;

fuzz_target!(|data: &[u8]| {
    let mut cfg =
        VSwitchConfig { exception_queue: 8, slow_budget: 2, age_budget: 4, ..Default::default() };
    cfg.gft.capacity = 16;
    cfg.gft.idle_timeout = core::time::Duration::from_millis(5);
    let vs = VSwitch::new(default_policy(), cfg).expect("default policy is valid");
    let mut p = Pipeline::from_strs(&["parse:pass"]).expect("fixed stage");
    p.push(Box::new(vs.stage().expect("shard")));
    let mut rest = data;
    let mut batch = Batch::new(BATCH);
    let mut t = 0u64;
    while rest.len() >= 4 {
        batch.clear();
        while !batch.is_full() && rest.len() >= 4 {
            let port = rest[0] % 3;
            t += u64::from(rest[1]) * 1000;
            let len = usize::from(u16::from_le_bytes([rest[2], rest[3]])).min(rest.len() - 4);
            let frame = &rest[4..4 + len];
            rest = &rest[4 + len..];
            let pkt = batch.push_frame(frame).expect("batch not full");
            pkt.meta.ingress = PortId(u16::from(port));
        }
        p.process(Instant::from_nanos(t), &mut batch);
        for pkt in batch.iter() {
            assert!(pkt.meta.egress.is_some(), "a packet left without an egress");
        }
    }
    // Drain what the stage holds.
    for _ in 0..64 {
        if p.pending() == 0 {
            break;
        }
        t += 1000;
        batch.clear();
        p.process(Instant::from_nanos(t), &mut batch);
    }
    assert_eq!(p.pending(), 0, "held packets never released");
    let c = p.counters();
    for s in &c.stages {
        assert_eq!(
            s.packets_in,
            s.packets_out + s.drops.total() + s.held + s.local,
            "stage {}: in {} != out {} + drops {} + held {}",
            s.name,
            s.packets_in,
            s.packets_out,
            s.drops.total(),
            s.held
        );
    }
});
