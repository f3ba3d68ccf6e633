//! The vSwitch fast path allocates nothing per packet: once the flows are cached (the slow
//! path allocates when it compiles them), batches of hits (VXLAN encap), of cached drops and of
//! TCP segments whose SYN/FIN copies go to the slow path make zero heap allocations.
//!
//! Checked with dhat's heap profiler in testing mode (this test binary holds only this test).

use snic_pipeline::{Batch, Pipeline, PortId};
use snic_time::Instant;
use snic_vswitch::engine::{VSwitch, VSwitchConfig};
use snic_vswitch::policy::default_policy;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// Ethernet/IPv4 from the VM (10.0.0.1) to 10.0.0.`dst` with protocol `proto` and an 8-byte
/// L4 header whose ports are `sport` -> 80 (TCP gets a 20-byte header with `flags`).
fn frame(dst: u8, proto: u8, sport: u16, flags: u8) -> Vec<u8> {
    let l4 = if proto == 6 { 20 } else { 8 };
    let mut f = vec![0u8; 14 + 20 + l4 + 16];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, dst]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let total = (f.len() - 14) as u16;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[8] = 64;
    ip[9] = proto;
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 0, 0, dst]);
    let c = !snic_wire::checksum::data(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&80u16.to_be_bytes());
    if proto == 6 {
        f[46] = 5 << 4;
        f[47] = flags;
    } else {
        f[38..40].copy_from_slice(&((8 + 16) as u16).to_be_bytes());
    }
    f
}

#[test]
fn steady_state_fast_path_does_not_allocate() {
    let vs = VSwitch::new(default_policy(), VSwitchConfig::default()).unwrap();
    let mut p = Pipeline::from_strs(&["parse"]).unwrap();
    p.push(Box::new(vs.stage().unwrap()));
    // UDP flows to mapped CAs (hits), flows to an unmapped CA (cached drops: the default
    // policy maps 10.0.0.2..=10.0.0.254 only, so .255 is denied), and TCP with SYN/FIN flags
    // (copied to the slow path; the connection is tracked there).
    let mut frames = Vec::new();
    for i in 0..24u16 {
        frames.push(frame(2 + (i % 20) as u8, 17, 1000 + i, 0));
    }
    frames.push(frame(255, 17, 7, 0));
    frames.push(frame(3, 6, 4000, 0x02));
    frames.push(frame(3, 6, 4000, 0x10));
    let _profiler = dhat::Profiler::builder().testing().build();
    let mut batch = Batch::new(64);
    let mut out_total = 0;
    for round in 0..6u64 {
        batch.clear();
        for f in &frames {
            batch.push_frame(f).unwrap().meta.ingress = PortId(0);
        }
        let before = dhat::HeapStats::get().total_blocks;
        p.process(Instant::from_millis(round), &mut batch);
        let allocs = dhat::HeapStats::get().total_blocks - before;
        out_total += batch.len();
        // Rounds 0 and 1 warm up: the slow path compiles every flow, and the first TCP copy
        // grows the slow path's connection table.
        if round >= 2 {
            assert_eq!(allocs, 0, "round {round} allocated {allocs} blocks on the fast path");
        } else if round == 0 {
            assert!(allocs > 0, "the first round compiles flows (shows the count works)");
        }
    }
    let st = vs.stats();
    assert!(st.fast.hits >= 4 * 26, "{:?}", st.fast);
    assert!(st.fast.denied_cached >= 4);
    assert!(st.fast.tcp_copies >= 4);
    assert_eq!(out_total, 6 * 26, "every UDP and TCP packet forwarded");
}
