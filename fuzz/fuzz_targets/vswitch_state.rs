//! Fuzz target `vswitch_state`: the vSwitch state a hitless upgrade carries
//! (`VSwitch::export_state` / `import_state`, issue 19), from arbitrary bytes:
//!
//! - bytes that are not a `VSwitchState` in JSON are refused by serde;
//! - a state that parses is imported into a fresh vSwitch with the default policy: `Ok` (then
//!   exporting it again and importing that into another fresh vSwitch must succeed too, with
//!   the same connection count) or a typed `ImportError`. An import that fails must leave the
//!   vSwitch empty, so a second attempt with the first state's re-export is not refused as
//!   `NotEmpty`.
//!
//! Any panic is a bug: the state comes from another process and is checked, not trusted.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_time::Instant;
use snic_vswitch::engine::{VSwitch, VSwitchConfig, VSwitchState};
use snic_vswitch::policy::default_policy;

fn fresh() -> VSwitch {
    VSwitch::new(default_policy(), VSwitchConfig::default()).expect("the default vSwitch")
}

fuzz_target!(|data: &[u8]| {
    let Ok(state) = serde_json::from_slice::<VSwitchState>(data) else { return };
    let now = Instant::from_secs(1_000);
    let vs = fresh();
    match vs.import_state(&state, now) {
        Ok(summary) => {
            let again = vs.export_state(now);
            let other = fresh();
            let s2 = other
                .import_state(&again, now)
                .unwrap_or_else(|e| panic!("a re-exported state is refused: {e}"));
            assert_eq!(s2.connections, summary.connections);
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            let empty = fresh().export_state(now);
            vs.import_state(&empty, now)
                .unwrap_or_else(|e| panic!("a failed import left state behind: {e}"));
        }
    }
});
