//! Reading capture files: pcap (either byte order, either timestamp resolution) and pcapng, told
//! apart by their magic number. The one reader of snic: the pcap port replays with it,
//! `snic decode` prints what it reads, and scenarios read traffic and golden captures with it.
//!
//! The records are parsed with the `pcap-file` crate's slice parsers (`PcapParser`,
//! `PcapNgParser`) over a read buffer this module owns: 256 KiB by default, refilled from the
//! file as records are consumed, and grown (up to 16 MiB) only for a record larger than it. (The
//! crate's own readers allocate and zero 8 MiB on every open.) Reading a record allocates
//! nothing: [`CaptureReader::next_record`] lends the frame's bytes from the buffer.
//!
//! A pcapng block that is well framed but whose body does not parse is reported as
//! [`Record::Unreadable`], and reading goes on (the block length steps over it). A record that
//! cannot be stepped over (a corrupt pcap record header, broken pcapng block framing, a file cut
//! short) is a [`RecordError`], after which the reader has nothing more.

use super::PcapFileError;
use byteorder_slice::{BigEndian, LittleEndian};
use core::fmt;
use core::time::Duration;
use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::blocks::SECTION_HEADER_BLOCK;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::{DataLink, Endianness, PcapError};
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// Initial size of the input buffer.
pub const INPUT_BUF: usize = 256 * 1024;
/// Largest the input buffer grows to, for a single record larger than [`INPUT_BUF`]. A record
/// larger than this (in practice, a corrupt length field) is a [`RecordError::Truncated`].
pub const INPUT_BUF_MAX: usize = 16 * 1024 * 1024;

/// The classic pcap magic (microsecond timestamps), as written in native byte order.
pub(crate) const PCAP_MAGIC_US: u32 = 0xa1b2_c3d4;
/// The classic pcap magic (nanosecond timestamps).
const PCAP_MAGIC_NS: u32 = 0xa1b2_3c4d;
/// Block type of a pcapng section header block (the same in both byte orders).
const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

/// Which file format a capture is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Classic libpcap.
    Pcap,
    /// pcapng.
    PcapNg,
}

/// Tell the format from the first four bytes of a file.
pub fn detect(magic: [u8; 4]) -> Option<Format> {
    let (le, be) = (u32::from_le_bytes(magic), u32::from_be_bytes(magic));
    if [le, be].iter().any(|m| *m == PCAP_MAGIC_US || *m == PCAP_MAGIC_NS) {
        Some(Format::Pcap)
    } else if magic == PCAPNG_MAGIC {
        Some(Format::PcapNg)
    } else {
        None
    }
}

/// One packet record of a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    /// A captured frame.
    Frame {
        /// Link type of the interface it was captured on (`None`: a pcapng packet naming an
        /// interface the file never described).
        linktype: Option<DataLink>,
        /// Length on the wire (may exceed `data.len()` when the capture was snapped).
        orig_len: u32,
        /// When it was captured (since the epoch); zero for pcapng blocks that carry no
        /// time (simple packet blocks, obsolete packet blocks).
        timestamp: Duration,
        /// The captured bytes, lent from the reader's buffer until the next call.
        data: &'a [u8],
    },
    /// A well-framed pcapng packet block whose body does not parse; reading goes on.
    Unreadable {
        /// What the parser said about the block.
        reason: String,
    },
}

/// A record that cannot be read past: reading ends.
#[derive(Debug)]
#[non_exhaustive]
pub enum RecordError {
    /// The file ends inside a record, or the record is larger than the buffer may grow.
    Truncated,
    /// A corrupt pcap record header or broken pcapng block framing.
    Corrupt(PcapError),
    /// The file could not be read.
    Io(io::Error),
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::Truncated => {
                write!(f, "record cut short (the file ends inside it, or it is over 16 MiB)")
            }
            RecordError::Corrupt(e) => write!(f, "damaged record: {e}"),
            RecordError::Io(e) => write!(f, "read error: {e}"),
        }
    }
}

impl std::error::Error for RecordError {}

/// The input file and the buffer the parsers read from: `buf[start..end]` holds the bytes read
/// from the file and not yet consumed.
#[derive(Debug)]
struct Input {
    file: File,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The file returned end-of-file.
    eof: bool,
}

impl Input {
    /// Make more bytes available after the unconsumed ones: move those to the front, grow the
    /// buffer when they fill it (doubling, up to `INPUT_BUF_MAX`), and read from the file.
    /// `Ok(false)` when no more bytes can be had: end of file, or the buffer is at its cap.
    fn refill(&mut self) -> io::Result<bool> {
        if self.eof {
            return Ok(false);
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            if self.buf.len() >= INPUT_BUF_MAX {
                return Ok(false);
            }
            let grown = self.buf.len().saturating_mul(2).clamp(64, INPUT_BUF_MAX);
            self.buf.resize(grown, 0);
        }
        loop {
            match self.file.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// The parser of the input's format.
enum Parser {
    Pcap(PcapParser),
    PcapNg(PcapNgParser),
}

/// A reader over the packet records of a pcap or pcapng file.
pub struct CaptureReader {
    input: Input,
    parser: Parser,
    /// A record error ended the input.
    failed: bool,
}

impl fmt::Debug for CaptureReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureReader").field("format", &self.format()).finish()
    }
}

/// What one step of the reader found.
enum Step {
    /// A frame at `buf[at..at + len]`.
    Frame { linktype: Option<DataLink>, orig_len: u32, timestamp: Duration, at: usize, len: usize },
    /// A well-framed block that does not parse, and why.
    Unreadable(String),
    /// A record that is not a packet (section header, interface description, statistics...).
    NotAPacket,
    /// The buffer holds only part of the next record.
    More,
    /// A record that cannot be read past.
    Fatal(PcapError),
}

impl CaptureReader {
    /// Open `path`, detect its format by magic number, and read its header.
    pub fn open(path: &Path) -> io::Result<Self> {
        Self::open_with_buffer(path, INPUT_BUF)
    }

    /// [`CaptureReader::open`] with an input buffer of `cap` bytes to start with (tests use a
    /// small one to exercise refilling and growing).
    pub fn open_with_buffer(path: &Path, cap: usize) -> io::Result<Self> {
        let file = File::open(path)?;
        let mut input = Input { file, buf: vec![0; cap.max(4)], start: 0, end: 0, eof: false };
        while input.end < 4 && input.refill()? {}
        let mut magic = [0u8; 4];
        let got = input.end.min(4);
        magic[..got].copy_from_slice(&input.buf[..got]);
        let parser = match (got == 4).then(|| detect(magic)).flatten() {
            Some(Format::Pcap) => {
                let (used, p) = parse_header(&mut input, |d| {
                    PcapParser::new(d).map(|(rem, p)| (d.len() - rem.len(), p))
                })?;
                input.start += used;
                Parser::Pcap(p)
            }
            Some(Format::PcapNg) => {
                let (used, p) = parse_header(&mut input, |d| {
                    PcapNgParser::new(d).map(|(rem, p)| (d.len() - rem.len(), p))
                })?;
                input.start += used;
                Parser::PcapNg(p)
            }
            None => return Err(PcapFileError::BadMagic { got: magic }.into()),
        };
        Ok(CaptureReader { input, parser, failed: false })
    }

    /// The file's format.
    pub fn format(&self) -> Format {
        match self.parser {
            Parser::Pcap(_) => Format::Pcap,
            Parser::PcapNg(_) => Format::PcapNg,
        }
    }

    /// The link type of a classic pcap file (pcapng names one per interface instead).
    pub fn file_linktype(&self) -> Option<DataLink> {
        match &self.parser {
            Parser::Pcap(p) => Some(p.header().datalink),
            Parser::PcapNg(_) => None,
        }
    }

    /// Bytes of input buffer allocated now.
    pub fn buffer_len(&self) -> usize {
        self.input.buf.len()
    }

    /// The next packet record: `Ok(None)` at the end of the file (and after an error).
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, RecordError> {
        if self.failed {
            return Ok(None);
        }
        loop {
            let input = &mut self.input;
            if input.start == input.end {
                match input.refill() {
                    Ok(true) => {}
                    Ok(false) => return Ok(None),
                    Err(e) => return Err(self.fail(RecordError::Io(e))),
                }
            }
            let (used, step) = step(&mut self.parser, &input.buf[input.start..input.end]);
            let base = input.start;
            input.start += used;
            match step {
                Step::Frame { linktype, orig_len, timestamp, at, len } => {
                    let data = &self.input.buf[base + at..base + at + len];
                    return Ok(Some(Record::Frame { linktype, orig_len, timestamp, data }));
                }
                Step::Unreadable(reason) => return Ok(Some(Record::Unreadable { reason })),
                Step::NotAPacket => {}
                Step::More => match input.refill() {
                    Ok(true) => {}
                    Ok(false) => return Err(self.fail(RecordError::Truncated)),
                    Err(e) => return Err(self.fail(RecordError::Io(e))),
                },
                Step::Fatal(e) => return Err(self.fail(RecordError::Corrupt(e))),
            }
        }
    }

    fn fail(&mut self, e: RecordError) -> RecordError {
        self.failed = true;
        e
    }
}

/// Parse one record from `data`: how many bytes it took and what it was. A frame's bytes are
/// given as an offset into `data`, so no borrow of the buffer outlives the step.
fn step(parser: &mut Parser, data: &[u8]) -> (usize, Step) {
    // Where a lent frame starts inside `data` (the parsers lend, never copy; anything else is
    // treated as a block that did not parse rather than trusted).
    let span = |d: &[u8]| {
        let at = (d.as_ptr() as usize).checked_sub(data.as_ptr() as usize)?;
        (at.checked_add(d.len())? <= data.len()).then_some((at, d.len()))
    };
    match parser {
        Parser::Pcap(parser) => match parser.next_packet(data) {
            Err(PcapError::IncompleteBuffer) => (0, Step::More),
            // The record header is corrupt: classic pcap has no resync point.
            Err(e) => (0, Step::Fatal(e)),
            Ok((rem, p)) => {
                let used = data.len() - rem.len();
                let Some((at, len)) = span(&p.data) else {
                    return (used, Step::Unreadable("record data not inside the record".into()));
                };
                let linktype = Some(parser.header().datalink);
                let timestamp = p.timestamp;
                (used, Step::Frame { linktype, orig_len: p.orig_len, timestamp, at, len })
            }
        },
        Parser::PcapNg(parser) => match parser.next_raw_block(data) {
            Err(PcapError::IncompleteBuffer) => (0, Step::More),
            // The block framing itself is broken: nothing to resync on.
            Err(e) => (0, Step::Fatal(e)),
            Ok((rem, raw)) => {
                let used = data.len() - rem.len();
                // The parser has taken in section headers and interface descriptions.
                if raw.type_ == SECTION_HEADER_BLOCK {
                    return (used, Step::NotAPacket);
                }
                let block = if parser.section().endianness == Endianness::Big {
                    raw.try_into_block::<BigEndian>()
                } else {
                    raw.try_into_block::<LittleEndian>()
                };
                let (iface, orig_len, timestamp, frame) = match &block {
                    // A well-framed block whose body does not parse: skip it.
                    Err(e) => return (used, Step::Unreadable(e.to_string())),
                    Ok(Block::EnhancedPacket(b)) => {
                        (b.interface_id as usize, b.original_len, b.timestamp, &b.data[..])
                    }
                    Ok(Block::SimplePacket(b)) => (0, b.original_len, Duration::ZERO, &b.data[..]),
                    // Its raw timestamp's unit depends on the interface: not interpreted.
                    Ok(Block::Packet(b)) => {
                        (usize::from(b.interface_id), b.original_len, Duration::ZERO, &b.data[..])
                    }
                    // Interface descriptions, statistics, name resolution, journal, unknown
                    // blocks: not packets.
                    Ok(_) => return (used, Step::NotAPacket),
                };
                let Some((at, len)) = span(frame) else {
                    return (used, Step::Unreadable("packet data not inside the block".into()));
                };
                let linktype = parser.interfaces().get(iface).map(|idb| idb.linktype);
                (used, Step::Frame { linktype, orig_len, timestamp, at, len })
            }
        },
    }
}

/// Parse a file header with `parse`, reading more of the file while the parser asks for it.
/// Returns how many bytes the header took and the parser.
fn parse_header<T>(
    input: &mut Input,
    mut parse: impl FnMut(&[u8]) -> Result<(usize, T), PcapError>,
) -> io::Result<(usize, T)> {
    loop {
        match parse(&input.buf[input.start..input.end]) {
            Err(PcapError::IncompleteBuffer) => {
                if !input.refill()? {
                    let reason = "file ends inside its header".to_string();
                    return Err(PcapFileError::BadHeader { reason }.into());
                }
            }
            Err(e) => return Err(PcapFileError::BadHeader { reason: e.to_string() }.into()),
            Ok(r) => return Ok(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcap::{PcapPacket, PcapWriter};
    use pcap_file::pcapng::PcapNgWriter;
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
    use std::time::Duration;

    #[test]
    fn detects_formats_by_magic() {
        assert_eq!(detect([0xd4, 0xc3, 0xb2, 0xa1]), Some(Format::Pcap));
        assert_eq!(detect([0xa1, 0xb2, 0x3c, 0x4d]), Some(Format::Pcap));
        assert_eq!(detect([0x0a, 0x0d, 0x0d, 0x0a]), Some(Format::PcapNg));
        assert_eq!(detect(*b"GET "), None);
    }

    #[test]
    fn reads_pcap_and_pcapng_frames_byte_exact() {
        let dir = tempfile::tempdir().unwrap();
        let frames: [&[u8]; 2] = [&[1, 2, 3, 4, 5], &[0xaa; 60]];

        let p = dir.path().join("a.pcap");
        let mut w = PcapWriter::new(File::create(&p).unwrap()).unwrap();
        for f in frames {
            w.write_packet(&PcapPacket::new(Duration::from_secs(1), f.len() as u32, f)).unwrap();
        }
        drop(w);

        let n = dir.path().join("a.pcapng");
        let mut w = PcapNgWriter::new(File::create(&n).unwrap()).unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::ETHERNET, 65535)).unwrap();
        for f in frames {
            let epb = EnhancedPacketBlock {
                interface_id: 0,
                timestamp: Duration::from_secs(1),
                original_len: f.len() as u32,
                data: std::borrow::Cow::Borrowed(f),
                options: vec![],
            };
            w.write_pcapng_block(epb).unwrap();
        }
        drop(w);

        for (path, format) in [(&p, Format::Pcap), (&n, Format::PcapNg)] {
            let mut r = CaptureReader::open(path).unwrap();
            assert_eq!(r.format(), format);
            for f in frames {
                let got = r.next_record().unwrap().expect("a frame");
                let Record::Frame { linktype, orig_len, timestamp, data } = got else {
                    panic!("not a frame: {got:?}")
                };
                assert_eq!(data, f);
                assert_eq!(linktype, Some(DataLink::ETHERNET));
                assert_eq!(orig_len as usize, f.len());
                assert_eq!(timestamp, Duration::from_secs(1));
            }
            assert!(r.next_record().unwrap().is_none());
        }
    }

    #[test]
    fn rejects_a_file_that_is_not_a_capture() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("not.pcap");
        std::fs::write(&p, b"hello world").unwrap();
        let err = CaptureReader::open(&p).unwrap_err().to_string();
        assert!(err.contains("not a pcap or pcapng file"), "{err}");
    }
}
