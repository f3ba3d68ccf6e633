//! The fast path allocates nothing: once a pipeline has seen its ports, `Pipeline::process` over
//! a mixed batch (with drops of every kind, MAC learning, tracing off) makes no heap allocation.
//! Checked with dhat's heap profiler in testing mode (this test binary holds only this test, so
//! no other thread allocates while it counts).

use snic_pipeline::testing::frames::*;
use snic_pipeline::{Batch, Pipeline, PortId};
use snic_time::Instant;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

#[test]
fn steady_state_process_does_not_allocate() {
    let frames: Vec<(u16, Vec<u8>)> = vec![
        (0, udp64(1, 2)),
        (1, tcp_frame(3, 4, b"tcp")),
        (0, vxlan(9, &tcp_frame(5, 6, b"inner"))),
        (1, roce_write(Write::default(), false)),
        (0, roce_write(Write::default(), true)),
        (1, udp64(1, 2)[..20].to_vec()),
        (0, vec![1, 2, 3]),
    ];
    let _profiler = dhat::Profiler::builder().testing().build();
    for stages in
        [&["parse", "classify", "l2fwd"][..], &["parse:pass", "classify:mark", "l2fwd:learn"]]
    {
        let mut p = Pipeline::from_strs(stages).unwrap();
        let mut batch = Batch::new(32);
        for round in 0..3 {
            batch.clear();
            for (port, f) in &frames {
                batch.push_frame(f).unwrap().meta.ingress = PortId(*port);
            }
            // Round 0 warms up: the port table grows to the ports seen.
            let before = dhat::HeapStats::get().total_blocks;
            p.process(Instant::from_secs(round), &mut batch);
            let allocs = dhat::HeapStats::get().total_blocks - before;
            assert!(!batch.is_empty());
            if round > 0 {
                assert_eq!(allocs, 0, "{stages:?} allocated on the fast path in round {round}");
            } else {
                assert!(allocs > 0, "warm-up grows the port table (shows the count works)");
            }
        }
        assert!(p.counters().total_drops() > 0);
    }
}
