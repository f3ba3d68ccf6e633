//! Fuzz target `p4_exec`: the example programs of `examples/p4/` (embedded, each compiled once)
//! run arbitrary packets on arbitrary ports through `snic_p4::v1model::Switch::process`.
//!
//! Input layout:
//! - byte 0: `program = b % 5` (l3_router, reconic_classifier, ecn_incast, vxlan, telemetry);
//!   `(b / 5) & 1` set: the tables hold the entries (and default actions) of the program's
//!   `.stf` file, else they are as the program declares them; `(b / 10) & 1` set: tracing on;
//! - then up to 16 records `port (1 byte), len (LE16, cut to what is left), bytes`; a
//!   record's time is 1 us after the previous one.
//!
//! Each input runs on a fresh copy of the program's switch. A bug is any panic, and:
//! - a packet with more outputs than `MAX_DERIVED`, or an output longer than the packet plus
//!   every header the program declares (`frame_len` slots of at most 16 bytes each: none of the
//!   examples recirculates, so nothing is deparsed twice);
//! - a packet whose fate is not exactly one of sent, dropped in ingress, dropped in egress
//!   (none of the examples clones, multicasts, resubmits or recirculates), or whose outcome's
//!   `sent` is not the number of packets it appended;
//! - counters that do not add up: `received` != packets given, `sent` != packets out,
//!   `sent + dropped_ingress + dropped_egress != received`, `derived_limit` != 0.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_p4::builtin::Builtins;
use snic_p4::ir::Compiled;
use snic_p4::span::SourceMap;
use snic_p4::v1model::{MAX_DERIVED, Stats, Switch};
use std::sync::OnceLock;

const PROGRAMS: [(&str, &str, &str); 5] = [
    (
        "l3_router",
        include_str!("../../examples/p4/l3_router.p4"),
        include_str!("../../examples/p4/l3_router.stf"),
    ),
    (
        "reconic_classifier",
        include_str!("../../examples/p4/reconic_classifier.p4"),
        include_str!("../../examples/p4/reconic_classifier.stf"),
    ),
    (
        "ecn_incast",
        include_str!("../../examples/p4/ecn_incast.p4"),
        include_str!("../../examples/p4/ecn_incast.stf"),
    ),
    (
        "vxlan",
        include_str!("../../examples/p4/vxlan.p4"),
        include_str!("../../examples/p4/vxlan.stf"),
    ),
    (
        "telemetry",
        include_str!("../../examples/p4/telemetry.p4"),
        include_str!("../../examples/p4/telemetry.stf"),
    ),
];

/// The programs, compiled once.
static COMPILED: OnceLock<Vec<Compiled>> = OnceLock::new();

thread_local! {
    /// Per program: the switch as compiled, and the switch after the STF file's control-plane
    /// commands (its `packet` and `expect` lines left out). `Switch` is not `Sync` (entries
    /// hold cells), so the ready switches live here; each input runs on a clone.
    static SWITCHES: Vec<[Switch; 2]> = switches();
}

fn compiled() -> &'static [Compiled] {
    COMPILED.get_or_init(|| {
        PROGRAMS
            .iter()
            .map(|(name, src, _)| {
                let mut map = SourceMap::new();
                let id = map.add(format!("{name}.p4"), *src);
                snic_p4::runner::build(&mut map, id, &mut Builtins, &Default::default())
                    .unwrap_or_else(|_| panic!("{name}.p4 does not compile"))
                    .program
            })
            .collect()
    })
}

fn switches() -> Vec<[Switch; 2]> {
    PROGRAMS
        .iter()
        .zip(compiled())
        .map(|((name, _, stf), prog)| {
            let bare = Switch::new(prog.clone()).expect("switch");
            let control: String = stf
                .lines()
                .filter(|l| {
                    let l = l.trim_start();
                    !l.starts_with("packet") && !l.starts_with("expect")
                })
                .map(|l| format!("{l}\n"))
                .collect();
            let run = snic_p4::runner::run_stf(prog.clone(), &control, false)
                .unwrap_or_else(|e| panic!("{name}.stf: {e}"));
            assert_eq!(run.switch.stats(), Stats::default());
            [bare, run.switch]
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, mut rest)) = data.split_first() else { return };
    let mut sw =
        SWITCHES.with(|s| s[usize::from(sel) % PROGRAMS.len()][usize::from((sel / 5) & 1)].clone());
    sw.set_trace((sel / 10) & 1 == 1);
    let header_bytes = sw.program().frame_len as usize * 16;
    let mut out = Vec::new();
    let mut given = 0u64;
    while given < 16 {
        let [port, l0, l1, tail @ ..] = rest else { break };
        let len = usize::from(u16::from_le_bytes([*l0, *l1])).min(tail.len());
        let (pkt, next) = tail.split_at(len);
        rest = next;
        given += 1;
        let before = out.len();
        sw.process(u32::from(*port), pkt, given * 1_000, &mut out);
        let o = sw.outcome();
        let new = &out[before..];
        assert!(new.len() <= MAX_DERIVED, "{} packets out of one", new.len());
        assert_eq!(o.sent as usize, new.len(), "{o:?}");
        let fates = o.sent + u32::from(o.dropped_ingress) + o.dropped_egress;
        assert_eq!(fates, 1, "{o:?}");
        assert!(!o.over_limit, "{o:?}");
        for (_, b) in new {
            assert!(b.len() <= pkt.len() + header_bytes, "{} bytes out of {}", b.len(), pkt.len());
        }
        let _ = sw.take_trace();
    }
    let s = sw.stats();
    assert_eq!(s.received, given, "{s:?}");
    assert_eq!(s.sent, out.len() as u64, "{s:?}");
    assert_eq!(s.sent + s.dropped_ingress + s.dropped_egress, s.received, "{s:?}");
    assert_eq!(s.derived_limit, 0, "{s:?}");
});
