//! Fuzz target `control_input`: every control-plane text parser on the same arbitrary UTF-8
//! string (non-UTF-8 inputs are skipped):
//!
//! - `snic_io::spec::PortSpec` (`pcap:IN,OUT`, `gen:N,SEED`, ...): `Ok` must re-parse from its
//!   `Display` to the same value.
//! - `snic_pipeline::StageSpec` (`parse:pass`, `l2fwd:0=1`, ...): same round trip.
//! - `snic_pipeline::TraceFilter::parse` (`udp dst 4791 and ip 10.0.0.1`): `Ok` has at most
//!   `MAX_TERMS` terms and can be matched against a packet (it has no `Display`).
//! - `snic_io::runtime::RunConfig::from_toml`: `Ok` must serialise back to TOML and re-parse to
//!   the same value, and its pipeline configuration must build or fail with a typed error.
//! - `snic_pipeline::PipelineConfig` from TOML (its documented format): builds or fails with a
//!   typed error.
//!
//! Any panic is a bug: arbitrary text must give `Ok` or a typed error.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_io::runtime::RunConfig;
use snic_io::spec::PortSpec;
use snic_pipeline::{PacketBuf, Pipeline, PipelineConfig, StageSpec, TraceFilter};
use std::io::Write;

/// Opens every `tap:PATH` sink as a byte sink: nothing touches the file system.
fn sink(_: &str) -> std::io::Result<Box<dyn Write + Send>> {
    Ok(Box::new(std::io::sink()))
}

/// A UDP/IPv4 frame to match trace filters against (parsed, so every term has data to read).
fn probe() -> PacketBuf {
    let mut f = vec![0u8; 14 + 20 + 8 + 4];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&(32u16).to_be_bytes());
    f[14 + 8] = 64;
    f[14 + 9] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&1234u16.to_be_bytes());
    f[36..38].copy_from_slice(&4791u16.to_be_bytes());
    f[38..40].copy_from_slice(&12u16.to_be_bytes());
    let mut p = PacketBuf::from_frame(&f);
    p.meta.stack = snic_wire::stack::parse(p.data());
    p.meta.seq = 5;
    p
}

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };

    if let Ok(p) = s.parse::<PortSpec>() {
        let text = p.to_string();
        assert_eq!(text.parse::<PortSpec>(), Ok(p), "PortSpec {s:?} -> {text:?}");
    }

    if let Ok(st) = s.parse::<StageSpec>() {
        let text = st.to_string();
        assert_eq!(text.parse::<StageSpec>(), Ok(st), "StageSpec {s:?} -> {text:?}");
    }

    if let Ok(f) = TraceFilter::parse(s) {
        assert!(f.terms().count() <= TraceFilter::MAX_TERMS);
        let p = probe();
        let _ = (f.matches(&p), f.is_entry_only());
    }

    if let Ok(cfg) = RunConfig::from_toml(s) {
        if let Ok(text) = toml::to_string(&cfg) {
            let again = RunConfig::from_toml(&text)
                .unwrap_or_else(|e| panic!("RunConfig re-parse of {text:?}: {e}"));
            assert_eq!(again, cfg, "RunConfig round trip through {text:?}");
        }
        let _ = Pipeline::build(&cfg.pipeline_config(), &mut sink);
    }

    if let Ok(cfg) = toml::from_str::<PipelineConfig>(s) {
        let _ = Pipeline::build(&cfg, &mut sink);
    }
});
