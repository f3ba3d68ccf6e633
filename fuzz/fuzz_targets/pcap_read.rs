//! Fuzz target `pcap_read`: the pcap port (`snic_io::pcap::PcapPort`) reading an arbitrary
//! file, pcap or pcapng (the magic decides; seeds have both).
//!
//! The input is written to a file in the temp directory (one per fuzzing process), opened with
//! `PcapPort::open(Some(path), None)` and drained with `recv` until the port is exhausted or
//! errors. Checked, besides "never panics": `open` fails only with an `io::Error`; every `recv`
//! that returns fewer frames than the batch holds leaves the port exhausted (otherwise the I/O
//! loop would poll it forever); the drain ends within a bound (a hang is a bug); every received
//! frame is non-empty and the port's counters add up to what `recv` returned.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_io::Port;
use snic_io::pcap::PcapPort;
use snic_pipeline::{Batch, MAX_BATCH};
use snic_time::Instant;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Most `recv` calls one input may take: a record is at least 12 bytes (a pcapng block) and a
/// full batch is 256 records, so no input within libFuzzer's length limits needs this many.
const MAX_RECVS: usize = 10_000;

fn path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        std::env::temp_dir().join(format!("snic-fuzz-pcap-{}.bin", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    let path = path();
    std::fs::write(path, data).expect("write the input file");
    let Ok(mut port) = PcapPort::open(Some(path), None) else { return };
    let mut batch = Batch::new(MAX_BATCH);
    let mut frames = 0u64;
    let mut bytes = 0u64;
    let mut calls = 0;
    while !port.is_exhausted() {
        calls += 1;
        assert!(calls <= MAX_RECVS, "pcap port not exhausted after {MAX_RECVS} recv calls");
        batch.clear();
        match port.recv(Instant::from_nanos(calls as u64), &mut batch) {
            Err(_) => break,
            Ok(n) => {
                assert_eq!(n, batch.len(), "recv count != frames in the batch");
                if n < batch.max() {
                    assert!(port.is_exhausted(), "short recv ({n}) but the port is not exhausted");
                }
                for p in batch.iter() {
                    assert!(!p.is_empty(), "an empty frame was received");
                    bytes += p.len() as u64;
                }
                frames += n as u64;
            }
        }
    }
    let c = port.counters();
    assert_eq!((c.rx_packets, c.rx_bytes), (frames, bytes));
    // Exhausted means exhausted: another recv gives nothing.
    if port.is_exhausted() {
        batch.clear();
        assert_eq!(port.recv(Instant::ZERO, &mut batch).ok(), Some(0));
    }
});
