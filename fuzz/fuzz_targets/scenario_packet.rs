//! Fuzz target `scenario_packet`: arbitrary UTF-8 text (non-UTF-8 inputs are skipped) as a
//! scapy-like packet spec through `snic_scenario::packet::build`, and as hex through
//! `snic_scenario::packet::from_hex`.
//!
//! - `build`: `Err` must point inside the spec (`at <= len`) with a message; `Ok` must give a
//!   frame of at least an Ethernet header and at most `MAX_FRAME` bytes, the same frame every
//!   time, and that frame written back as `Ether(...)/Raw(hex=...)` with its own addresses and
//!   type must build to the same bytes.
//! - `from_hex`: `Err` must point inside the text; `Ok` written back as hex decodes the same.
//!
//! Any panic is a bug: arbitrary text must give a frame or a typed error.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_scenario::packet::{MAX_FRAME, build, from_hex};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn mac(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(":")
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = core::str::from_utf8(data) else { return };
    match build(text) {
        Ok(frame) => {
            assert!(frame.len() >= 14 && frame.len() <= MAX_FRAME, "{} bytes", frame.len());
            assert_eq!(build(text).as_ref(), Ok(&frame), "not deterministic");
            let ty = u16::from_be_bytes([frame[12], frame[13]]);
            let mut again = format!(
                "Ether(dst=\"{}\",src=\"{}\",type={ty})",
                mac(&frame[..6]),
                mac(&frame[6..12])
            );
            if frame.len() > 14 {
                again += &format!("/Raw(hex=\"{}\")", hex(&frame[14..]));
            }
            assert_eq!(build(&again), Ok(frame));
        }
        Err(e) => {
            assert!(e.at <= text.len(), "{e} outside the spec");
            assert!(!e.message.is_empty());
        }
    }
    match from_hex(text) {
        Ok(bytes) => assert_eq!(from_hex(&hex(&bytes)), Ok(bytes)),
        Err(e) => assert!(e.at <= text.len(), "{e} outside the text"),
    }
});
