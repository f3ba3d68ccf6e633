//! The pcap port: replay a pcap or pcapng file, record what is sent as pcap or pcapng.
//!
//! Input is read by [`read::CaptureReader`] (format by magic number, pcap-file's slice parsers
//! over a buffer this crate owns; the same reader `snic decode` uses). Only Ethernet captures
//! are accepted: a classic pcap file of another link type is refused at open. A pcapng packet
//! block that holds no Ethernet frame (another link type, an empty frame) or whose body does
//! not parse is counted in `rx_errors` and skipped. A record that cannot be stepped over (a
//! corrupt pcap record header, broken pcapng block framing, a file cut short) is counted and
//! ends the input. At the end of the input the port reports [`Port::is_exhausted`].
//!
//! The output is written by this module itself (classic pcap, microsecond timestamps, Ethernet),
//! buffered, so recording a frame allocates nothing.

pub mod read;

use crate::port::{Port, PortCaps, PortCounters};
use core::fmt;
use pcap_file::DataLink;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
use read::{CaptureReader, INPUT_BUF, PCAP_MAGIC_US, Record};
use snic_pipeline::Batch;
use snic_time::Instant;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// Largest frame the writer records (the snap length it announces).
pub const SNAPLEN: u32 = 262_144;

/// What was wrong with a capture file. Carried inside the `io::Error` the port returns
/// (`err.get_ref()` then `downcast_ref::<PcapFileError>()`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PcapFileError {
    /// The first four bytes are not a pcap or pcapng magic number.
    BadMagic {
        /// The bytes found (fewer when the file is shorter).
        got: [u8; 4],
    },
    /// The capture's link type is not Ethernet.
    NotEthernet {
        /// The link type number found.
        linktype: u32,
    },
    /// The file header could not be parsed.
    BadHeader {
        /// What the parser said.
        reason: String,
    },
}

impl fmt::Display for PcapFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PcapFileError::BadMagic { got } => write!(
                f,
                "not a pcap or pcapng file: magic {:02x}{:02x}{:02x}{:02x}",
                got[0], got[1], got[2], got[3]
            ),
            PcapFileError::NotEthernet { linktype } => {
                write!(f, "capture link type {linktype} is not Ethernet (1)")
            }
            PcapFileError::BadHeader { reason } => write!(f, "bad capture file header: {reason}"),
        }
    }
}

impl std::error::Error for PcapFileError {}

impl From<PcapFileError> for io::Error {
    fn from(e: PcapFileError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

/// Counters the pcap port keeps beyond [`PortCounters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PcapCounters {
    /// Packet records skipped: non-Ethernet interface, empty frame, unparsable block body.
    /// (Blocks that are not packets, like statistics, are not counted.)
    pub skipped_records: u64,
    /// Record errors that ended the input early.
    pub fatal_record_errors: u64,
    /// Frames sent but not recorded: too large, or a write error.
    pub write_errors: u64,
}

/// Writes what is sent to the port: classic pcap, or pcapng when the path ends in `.pcapng`.
///
/// Classic pcap is written by hand (a 24-byte file header, then a 16-byte header per record)
/// because `pcap-file`'s `PcapWriter` gives no access to its inner writer, so it could not be
/// flushed while a run goes on; its `PcapNgWriter` can, and writes the pcapng output.
enum Writer {
    Pcap(BufWriter<File>),
    PcapNg(PcapNgWriter<BufWriter<File>>),
}

impl fmt::Debug for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Writer::Pcap(_) => "Writer::Pcap",
            Writer::PcapNg(_) => "Writer::PcapNg",
        })
    }
}

impl Writer {
    fn create(path: &Path) -> io::Result<Self> {
        let mut out = BufWriter::new(File::create(path)?);
        if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("pcapng")) {
            let mut w = PcapNgWriter::new(out).map_err(io::Error::other)?;
            let idb = InterfaceDescriptionBlock::new(DataLink::ETHERNET, SNAPLEN);
            w.write_pcapng_block(idb).map_err(io::Error::other)?;
            return Ok(Writer::PcapNg(w));
        }
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&PCAP_MAGIC_US.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&1u32.to_le_bytes());
        out.write_all(&h)?;
        Ok(Writer::Pcap(out))
    }

    fn write(&mut self, ts: Instant, frame: &[u8]) -> io::Result<()> {
        let len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        if len > SNAPLEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame larger than snap length",
            ));
        }
        let nanos = ts.as_nanos();
        match self {
            Writer::Pcap(out) => {
                let secs = u32::try_from(nanos / 1_000_000_000).unwrap_or(u32::MAX);
                let micros = ((nanos % 1_000_000_000) / 1_000) as u32;
                let mut h = [0u8; 16];
                h[0..4].copy_from_slice(&secs.to_le_bytes());
                h[4..8].copy_from_slice(&micros.to_le_bytes());
                h[8..12].copy_from_slice(&len.to_le_bytes());
                h[12..16].copy_from_slice(&len.to_le_bytes());
                out.write_all(&h)?;
                out.write_all(frame)
            }
            Writer::PcapNg(w) => {
                let epb = EnhancedPacketBlock {
                    interface_id: 0,
                    timestamp: std::time::Duration::from_nanos(nanos),
                    original_len: len,
                    data: std::borrow::Cow::Borrowed(frame),
                    options: Vec::new(),
                };
                w.write_pcapng_block(epb).map(|_| ()).map_err(io::Error::other)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Writer::Pcap(out) => out.flush(),
            Writer::PcapNg(w) => w.get_mut().flush(),
        }
    }
}

/// A port over capture files: frames are read from an input file and what is sent is written
/// to an output file. Either side may be absent.
#[derive(Debug)]
pub struct PcapPort {
    name: String,
    reader: Option<CaptureReader>,
    writer: Option<Writer>,
    exhausted: bool,
    counters: PortCounters,
    pcap_counters: PcapCounters,
}

impl PcapPort {
    /// Open `input` for reading (pcap or pcapng, by magic) and create `output` (pcap).
    pub fn open(input: Option<&Path>, output: Option<&Path>) -> io::Result<Self> {
        Self::open_with_buffer(input, output, INPUT_BUF)
    }

    /// [`PcapPort::open`] with an input buffer of `cap` bytes to start with (tests use a small
    /// one to exercise refilling and growing).
    fn open_with_buffer(
        input: Option<&Path>,
        output: Option<&Path>,
        cap: usize,
    ) -> io::Result<Self> {
        let reader = input.map(|p| open_ethernet(p, cap)).transpose()?;
        let writer = output.map(Writer::create).transpose()?;
        let mut name = String::from("pcap:");
        if let Some(i) = input {
            name.push_str(&i.display().to_string());
        }
        if let Some(o) = output {
            name.push(',');
            name.push_str(&o.display().to_string());
        }
        Ok(PcapPort {
            name,
            exhausted: reader.is_none(),
            reader,
            writer,
            counters: PortCounters::default(),
            pcap_counters: PcapCounters::default(),
        })
    }

    /// The pcap-specific counters.
    pub fn pcap_counters(&self) -> PcapCounters {
        self.pcap_counters
    }

    /// Read the next Ethernet frame into `batch`. `false` at the end of the input.
    fn read_one(&mut self, now: Instant, batch: &mut Batch) -> bool {
        let Some(reader) = self.reader.as_mut() else { return false };
        loop {
            match reader.next_record() {
                Ok(Some(Record::Frame { linktype: Some(DataLink::ETHERNET), data, .. }))
                    if !data.is_empty() =>
                {
                    push(batch, data, now, &mut self.counters);
                    return true;
                }
                // No usable Ethernet frame (another link type, an empty frame, an unparsable
                // block): counted and skipped.
                Ok(Some(_)) => {
                    self.counters.rx_errors += 1;
                    self.pcap_counters.skipped_records += 1;
                }
                Ok(None) => {
                    self.exhausted = true;
                    return false;
                }
                // A record that cannot be read past: counted, ends the input.
                Err(_) => {
                    self.counters.rx_errors += 1;
                    self.pcap_counters.fatal_record_errors += 1;
                    self.exhausted = true;
                    return false;
                }
            }
        }
    }
}

/// Open a capture for replay: classic pcap must be Ethernet (pcapng is checked per interface).
fn open_ethernet(path: &Path, cap: usize) -> io::Result<CaptureReader> {
    let reader = CaptureReader::open_with_buffer(path, cap)?;
    match reader.file_linktype() {
        Some(dl) if dl != DataLink::ETHERNET => {
            Err(PcapFileError::NotEthernet { linktype: u32::from(dl) }.into())
        }
        _ => Ok(reader),
    }
}

fn push(batch: &mut Batch, data: &[u8], now: Instant, c: &mut PortCounters) {
    if let Some(p) = batch.push_frame(data) {
        p.meta.rx_time = now;
        c.count_rx(data.len());
    }
}

impl Port for PcapPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let mut n = 0;
        while !self.exhausted && !batch.is_full() && self.read_one(now, batch) {
            n += 1;
        }
        Ok(n)
    }

    fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let Some(w) = self.writer.as_mut() else {
            self.counters.tx_dropped += batch.len() as u64;
            return Ok(0);
        };
        let mut sent = 0;
        let mut refused = crate::port::Refused::default();
        for (i, p) in batch.iter().enumerate() {
            match w.write(now, p.data()) {
                Ok(()) => {
                    self.counters.count_tx(p.len());
                    sent += 1;
                }
                Err(_) => {
                    self.counters.tx_dropped += 1;
                    self.pcap_counters.write_errors += 1;
                    refused.mark(i);
                }
            }
        }
        refused.move_sent_first(batch, sent);
        Ok(sent)
    }

    fn is_exhausted(&self) -> bool {
        self.exhausted
    }

    fn caps(&self) -> PortCaps {
        PortCaps {
            gso: false,
            max_frame: SNAPLEN as usize,
            tunnel_gso: false,
            merges_udp_tunnel: false,
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.writer.as_mut() {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }

    fn counters(&self) -> PortCounters {
        self.counters
    }
}

impl Drop for PcapPort {
    fn drop(&mut self) {
        // Best effort: an explicit `flush` reports errors; dropping cannot.
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
    use pcap_file::pcapng::PcapNgWriter;
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
    use pcap_file::pcapng::{Block, PcapNgReader};
    use std::borrow::Cow;
    use std::time::Duration;

    fn frames() -> Vec<Vec<u8>> {
        (0..5u8).map(|i| vec![i; 60 + usize::from(i)]).collect()
    }

    fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
        let mut w = PcapWriter::new(File::create(path).unwrap()).unwrap();
        for (i, f) in frames.iter().enumerate() {
            w.write_packet(&PcapPacket::new(Duration::from_micros(i as u64), f.len() as u32, f))
                .unwrap();
        }
    }

    fn read_all(port: &mut PcapPort) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut b = Batch::new(2);
        while !port.is_exhausted() {
            b.clear();
            port.recv(Instant::ZERO, &mut b).unwrap();
            out.extend(b.iter().map(|p| p.data().to_vec()));
        }
        out
    }

    #[test]
    fn pcapng_output_when_the_path_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("out.pcapng");
        let mut port = PcapPort::open(None, Some(&output)).unwrap();
        let mut b = Batch::new(8);
        for f in &frames() {
            b.push_frame(f).unwrap();
        }
        assert_eq!(port.send(Instant::from_micros(2_000_003), &mut b).unwrap(), 5);
        port.flush().unwrap();
        drop(port);
        // Read back with pcap-file's own pcapng reader: one interface, Ethernet, then the frames
        // with their timestamps.
        let mut r = PcapNgReader::new(File::open(&output).unwrap()).unwrap();
        let mut back = Vec::new();
        while let Some(block) = r.next_block() {
            match block.unwrap() {
                Block::InterfaceDescription(idb) => assert_eq!(idb.linktype, DataLink::ETHERNET),
                Block::EnhancedPacket(epb) => {
                    assert_eq!(epb.timestamp, Duration::from_micros(2_000_003));
                    assert_eq!(epb.original_len as usize, epb.data.len());
                    back.push(epb.data.to_vec());
                }
                other => panic!("unexpected block {other:?}"),
            }
        }
        assert_eq!(back, frames());
        // And our own reader takes it back as input.
        let mut port = PcapPort::open(Some(&output), None).unwrap();
        assert_eq!(read_all(&mut port), frames());
    }

    #[test]
    fn pcap_round_trip_byte_exact() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.pcap");
        let output = dir.path().join("out.pcap");
        write_pcap(&input, &frames());
        let mut port = PcapPort::open(Some(&input), Some(&output)).unwrap();
        let got = read_all(&mut port);
        assert_eq!(got, frames());
        assert_eq!(port.counters().rx_packets, 5);
        assert_eq!(port.counters().rx_bytes, (60..65).sum::<u64>());

        let mut b = Batch::new(8);
        for f in &got {
            b.push_frame(f).unwrap();
        }
        assert_eq!(port.send(Instant::from_micros(1_500_001), &mut b).unwrap(), 5);
        port.flush().unwrap();
        drop(port);

        let mut r = PcapReader::new(File::open(&output).unwrap()).unwrap();
        let mut back = Vec::new();
        while let Some(p) = r.next_packet() {
            let p = p.unwrap();
            assert_eq!(p.timestamp, Duration::from_micros(1_500_001));
            back.push(p.data.to_vec());
        }
        assert_eq!(back, frames());
    }

    #[test]
    fn reads_pcapng_and_skips_non_ethernet_interfaces() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.pcapng");
        let mut w = PcapNgWriter::new(File::create(&input).unwrap()).unwrap();
        let eth =
            InterfaceDescriptionBlock { linktype: DataLink::ETHERNET, snaplen: 0, options: vec![] };
        let raw =
            InterfaceDescriptionBlock { linktype: DataLink::RAW, snaplen: 0, options: vec![] };
        w.write_pcapng_block(eth).unwrap();
        w.write_pcapng_block(raw).unwrap();
        for (i, f) in frames().iter().enumerate() {
            let epb = EnhancedPacketBlock {
                interface_id: if i == 2 { 1 } else { 0 },
                timestamp: Duration::from_micros(i as u64),
                original_len: f.len() as u32,
                data: Cow::Borrowed(f),
                options: vec![],
            };
            w.write_pcapng_block(epb).unwrap();
        }
        drop(w);
        let mut port = PcapPort::open(Some(&input), None).unwrap();
        let got = read_all(&mut port);
        let mut want = frames();
        want.remove(2);
        assert_eq!(got, want);
        assert_eq!(port.counters().rx_errors, 1);
        assert_eq!(port.pcap_counters().skipped_records, 1);
    }

    #[test]
    fn unparsable_pcapng_block_is_skipped_and_reading_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("bad.pcapng");
        let mut w = PcapNgWriter::new(File::create(&input).unwrap()).unwrap();
        let eth =
            InterfaceDescriptionBlock { linktype: DataLink::ETHERNET, snaplen: 0, options: vec![] };
        w.write_pcapng_block(eth).unwrap();
        for f in frames() {
            let epb = EnhancedPacketBlock {
                interface_id: 0,
                timestamp: Duration::ZERO,
                original_len: f.len() as u32,
                data: Cow::Borrowed(&f),
                options: vec![],
            };
            w.write_pcapng_block(epb).unwrap();
        }
        drop(w);
        // Walk the blocks (little-endian) and make the second packet block's captured length
        // run past its body.
        let mut bytes = std::fs::read(&input).unwrap();
        let mut at = 0;
        let mut epbs = 0;
        while at + 8 <= bytes.len() {
            let ty = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
            let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
            if ty == 6 {
                epbs += 1;
                if epbs == 2 {
                    bytes[at + 20..at + 24].copy_from_slice(&5000u32.to_le_bytes());
                }
            }
            at += len;
        }
        std::fs::write(&input, &bytes).unwrap();
        let mut port = PcapPort::open(Some(&input), None).unwrap();
        let got = read_all(&mut port);
        let mut want = frames();
        want.remove(1);
        assert_eq!(got, want);
        assert_eq!(port.pcap_counters().skipped_records, 1);
        assert_eq!(port.pcap_counters().fatal_record_errors, 0);
    }

    #[test]
    fn truncated_record_is_counted_and_ends_input() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("t.pcap");
        write_pcap(&input, &frames());
        let bytes = std::fs::read(&input).unwrap();
        // Cut the last record in half.
        std::fs::write(&input, &bytes[..bytes.len() - 30]).unwrap();
        let mut port = PcapPort::open(Some(&input), None).unwrap();
        let got = read_all(&mut port);
        assert_eq!(got, frames()[..4].to_vec());
        assert_eq!(port.counters().rx_errors, 1);
        assert_eq!(port.pcap_counters().fatal_record_errors, 1);
    }

    #[test]
    fn typed_errors_for_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("junk");
        std::fs::write(&p, b"hello world").unwrap();
        let e = PcapPort::open(Some(&p), None).unwrap_err();
        let inner = e.get_ref().and_then(|i| i.downcast_ref::<PcapFileError>()).unwrap();
        assert_eq!(inner, &PcapFileError::BadMagic { got: *b"hell" });

        let p = dir.path().join("raw.pcap");
        let h = PcapHeader { datalink: DataLink::RAW, ..Default::default() };
        PcapWriter::with_header(File::create(&p).unwrap(), h).unwrap();
        let e = PcapPort::open(Some(&p), None).unwrap_err();
        let inner = e.get_ref().and_then(|i| i.downcast_ref::<PcapFileError>()).unwrap();
        assert_eq!(inner, &PcapFileError::NotEthernet { linktype: 101 });

        let e = PcapPort::open(Some(&dir.path().join("missing")), None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    fn input_buf_len(port: &PcapPort) -> usize {
        port.reader.as_ref().map_or(0, |r| r.buffer_len())
    }

    #[test]
    fn small_buffer_refills_and_grows_only_for_a_larger_record() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.pcap");
        // Records of 16 + 60..=64 bytes, then one of 16 + 300 bytes, then small ones again.
        let mut want = frames();
        want.push(vec![0xab; 300]);
        want.extend(frames());
        write_pcap(&input, &want);
        // 100 bytes hold the file header and any one small record, never two: every record
        // needs a refill, and the 300-byte one needs the buffer grown (100 -> 200 -> 400).
        let mut port = PcapPort::open_with_buffer(Some(&input), None, 100).unwrap();
        assert_eq!(read_all(&mut port), want);
        assert_eq!(input_buf_len(&port), 400);
        assert_eq!(port.counters().rx_errors, 0);
        assert_eq!(port.pcap_counters().fatal_record_errors, 0);

        // The same for pcapng: write it through our own pcapng output.
        let ng = dir.path().join("in.pcapng");
        let mut out = PcapPort::open(None, Some(&ng)).unwrap();
        let mut b = Batch::new(16);
        for f in &want {
            b.push_frame(f).unwrap();
        }
        assert_eq!(out.send(Instant::ZERO, &mut b).unwrap(), want.len());
        drop(out);
        let mut port = PcapPort::open_with_buffer(Some(&ng), None, 100).unwrap();
        assert_eq!(read_all(&mut port), want);
        assert_eq!(input_buf_len(&port), 400);
        assert_eq!(port.pcap_counters().skipped_records, 0);
        assert_eq!(port.pcap_counters().fatal_record_errors, 0);

        // The default buffer is not grown for ordinary records.
        let mut port = PcapPort::open(Some(&ng), None).unwrap();
        assert_eq!(read_all(&mut port), want);
        assert_eq!(input_buf_len(&port), INPUT_BUF);
    }

    #[test]
    fn pcapng_block_longer_than_the_file_is_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("long.pcapng");
        let mut out = PcapPort::open(None, Some(&input)).unwrap();
        let mut b = Batch::new(8);
        for f in &frames() {
            b.push_frame(f).unwrap();
        }
        out.send(Instant::ZERO, &mut b).unwrap();
        drop(out);
        // Append a packet block header announcing 64 MiB, and only a few bytes of it.
        let mut bytes = std::fs::read(&input).unwrap();
        bytes.extend_from_slice(&6u32.to_le_bytes());
        bytes.extend_from_slice(&(64u32 << 20).to_le_bytes());
        bytes.extend_from_slice(&[0; 40]);
        std::fs::write(&input, &bytes).unwrap();
        let mut port = PcapPort::open_with_buffer(Some(&input), None, 128).unwrap();
        assert_eq!(read_all(&mut port), frames());
        assert_eq!(port.counters().rx_errors, 1);
        assert_eq!(port.pcap_counters().fatal_record_errors, 1);
        assert_eq!(port.pcap_counters().skipped_records, 0);
    }

    #[test]
    fn header_cut_short_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("short.pcap");
        write_pcap(&p, &[]);
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..10]).unwrap();
        let e = PcapPort::open(Some(&p), None).unwrap_err();
        let inner = e.get_ref().and_then(|i| i.downcast_ref::<PcapFileError>()).unwrap();
        assert!(matches!(inner, PcapFileError::BadHeader { .. }), "{inner:?}");
    }

    #[test]
    fn send_without_output_counts_drops() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.pcap");
        write_pcap(&input, &frames());
        let mut port = PcapPort::open(Some(&input), None).unwrap();
        let mut b = Batch::new(4);
        b.push_frame(&[1; 60]).unwrap();
        assert_eq!(port.send(Instant::ZERO, &mut b).unwrap(), 0);
        assert_eq!(port.counters().tx_dropped, 1);
    }
}
