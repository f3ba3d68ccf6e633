//! Fuzz target `pipeline`: arbitrary frames through a whole `snic_pipeline::Pipeline`.
//!
//! Input layout: byte 0 picks the stage chain (and whether everything is traced), then frames,
//! each as `ingress port (1 byte, mod 4)`, `length (2 bytes LE)`, `bytes` (a short last frame
//! takes what is left). Frames go in batches of up to 8, at increasing times, so learning
//! tables and sequence numbers see more than one batch.
//!
//! Chains (byte 0 mod 4): `parse:pass, classify:mark, l2fwd` (the brief's), `parse, classify,
//! l2fwd:learn`, `parse:pass, classify, l2fwd:0=1,1=0,2=3`, `parse, classify:mark, l2fwd`. Bit 2
//! of byte 0 turns on the trace filter `all`.
//!
//! Checked, besides "never panics": after each `process` every packet left has an egress port
//! (never its ingress port, and not the flood port unless the stage is `l2fwd:learn`); for every
//! stage (and the final `output` step) `packets_in == packets_out + drops`; each stage's
//! `packets_in` is the previous stage's `packets_out`; the first stage saw every frame; the ports
//! counted every frame received, with its bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_pipeline::{Batch, Pipeline, PipelineConfig, PortId, TraceFilter};
use snic_time::Instant;

const CHAINS: [&[&str]; 4] = [
    &["parse:pass", "classify:mark", "l2fwd"],
    &["parse", "classify", "l2fwd:learn"],
    &["parse:pass", "classify", "l2fwd:0=1,1=0,2=3"],
    &["parse", "classify:mark", "l2fwd"],
];

/// Most frames per batch.
const BATCH: usize = 8;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, mut rest)) = data.split_first() else { return };
    let chain = usize::from(sel) % CHAINS.len();
    let cfg = PipelineConfig::from_strs(CHAINS[chain]).expect("fixed stage strings parse");
    let mut p = Pipeline::build(&cfg, &mut |_: &str| unreachable!("no tap stage"))
        .expect("fixed pipeline builds");
    if sel & 4 != 0 {
        p.set_trace_filter(Some(TraceFilter::all()));
    }
    let learning = chain == 1;

    let mut frames = 0u64;
    let mut bytes = 0u64;
    let mut per_port = [0u64; 4];
    let mut batch = Batch::new(BATCH);
    let mut t = 0u64;
    while !rest.is_empty() {
        batch.clear();
        while !batch.is_full() && rest.len() >= 3 {
            let port = rest[0] % 4;
            let len = usize::from(u16::from_le_bytes([rest[1], rest[2]])).min(rest.len() - 3);
            let frame = &rest[3..3 + len];
            rest = &rest[3 + len..];
            let pkt = batch.push_frame(frame).expect("batch not full");
            pkt.meta.ingress = PortId(u16::from(port));
            frames += 1;
            bytes += frame.len() as u64;
            per_port[usize::from(port)] += 1;
        }
        if rest.len() < 3 {
            rest = &[];
        }
        if batch.is_empty() {
            break;
        }
        t += 1_000_000_000;
        p.process(Instant::from_nanos(t), &mut batch);
        for pkt in batch.iter() {
            let e = pkt.meta.egress.expect("a packet left in the batch has no egress");
            assert!(learning || !e.is_flood(), "static forwarding flooded");
            assert_ne!(e, pkt.meta.ingress, "l2fwd sent a packet back where it came from");
        }
        let _ = p.drain_trace().count();
    }

    let c = p.counters();
    let mut prev_out = frames;
    for s in &c.stages {
        assert_eq!(
            s.packets_in,
            s.packets_out + s.drops.total() + s.held + s.local,
            "stage {}: in {} != out {} + drops {} + held + local",
            s.name,
            s.packets_in,
            s.packets_out,
            s.drops.total()
        );
        assert_eq!(s.packets_in, prev_out, "stage {} lost or invented packets", s.name);
        prev_out = s.packets_out;
    }
    assert_eq!(c.stages.len(), CHAINS[chain].len() + 1, "stages + output");
    let rx: u64 = c.ports.iter().map(|pc| pc.rx_packets).sum();
    let rx_bytes: u64 = c.ports.iter().map(|pc| pc.rx_bytes).sum();
    assert_eq!((rx, rx_bytes), (frames, bytes));
    for (port, &n) in per_port.iter().enumerate() {
        let got = c.port(PortId(port as u16)).map_or(0, |pc| pc.rx_packets);
        assert_eq!(got, n, "port {port} rx count");
    }
    assert_eq!(c.total_drops(), frames - prev_out);
});
