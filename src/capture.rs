//! Reading capture files: pcap and pcapng, told apart by their magic number.
//!
//! [`CaptureReader`] yields the frames of either format one at a time. Only Ethernet link types
//! are decoded by snic; frames on other link types are yielded with their link type so the
//! caller can report them instead of misparsing them.

use anyhow::{Context, Result, bail};
use pcap_file::DataLink;
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::{Block, PcapNgReader};
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

/// Magic numbers of classic pcap (microsecond and nanosecond, both byte orders).
const PCAP_MAGICS: [[u8; 4]; 4] = [
    [0xd4, 0xc3, 0xb2, 0xa1],
    [0xa1, 0xb2, 0xc3, 0xd4],
    [0x4d, 0x3c, 0xb2, 0xa1],
    [0xa1, 0xb2, 0x3c, 0x4d],
];
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
    if PCAP_MAGICS.contains(&magic) {
        Some(Format::Pcap)
    } else if magic == PCAPNG_MAGIC {
        Some(Format::PcapNg)
    } else {
        None
    }
}

/// One frame read from a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Link type of the interface the frame was captured on.
    pub linktype: DataLink,
    /// Length of the frame on the wire (may exceed `data.len()` when the capture was snapped).
    pub orig_len: u32,
    /// The captured bytes.
    pub data: Vec<u8>,
}

enum Inner {
    Pcap(PcapReader<BufReader<File>>),
    PcapNg { reader: PcapNgReader<BufReader<File>>, linktypes: Vec<DataLink> },
}

/// A reader over the frames of a pcap or pcapng file.
pub struct CaptureReader {
    inner: Inner,
    format: Format,
}

impl std::fmt::Debug for CaptureReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureReader").field("format", &self.format).finish()
    }
}

impl CaptureReader {
    /// Open `path`, detect its format by magic number, and read its header.
    pub fn open(path: &Path) -> Result<Self> {
        let mut file =
            File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let mut magic = [0u8; 4];
        file.read_exact(&mut magic)
            .with_context(|| format!("{}: too short to be a capture file", path.display()))?;
        file.seek(SeekFrom::Start(0))?;
        let Some(format) = detect(magic) else {
            bail!(
                "{}: not a pcap or pcapng file (magic {:02x}{:02x}{:02x}{:02x})",
                path.display(),
                magic[0],
                magic[1],
                magic[2],
                magic[3]
            );
        };
        let buf = BufReader::new(file);
        let inner = match format {
            Format::Pcap => Inner::Pcap(
                PcapReader::new(buf)
                    .with_context(|| format!("{}: bad pcap header", path.display()))?,
            ),
            Format::PcapNg => Inner::PcapNg {
                reader: PcapNgReader::new(buf)
                    .with_context(|| format!("{}: bad pcapng header", path.display()))?,
                linktypes: Vec::new(),
            },
        };
        Ok(CaptureReader { inner, format })
    }

    /// The file's format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The next frame, `None` at the end of the file, or an error for a damaged file.
    pub fn next_frame(&mut self) -> Option<Result<Frame>> {
        match &mut self.inner {
            Inner::Pcap(reader) => {
                let linktype = reader.header().datalink;
                let packet = reader.next_packet()?;
                Some(
                    packet
                        .map(|p| Frame {
                            linktype,
                            orig_len: p.orig_len,
                            data: p.data.into_owned(),
                        })
                        .context("damaged pcap record"),
                )
            }
            Inner::PcapNg { reader, linktypes } => loop {
                let block = match reader.next_block()? {
                    Ok(b) => b,
                    Err(e) => {
                        return Some(Err(anyhow::Error::new(e).context("damaged pcapng block")));
                    }
                };
                match block {
                    Block::SectionHeader(_) => linktypes.clear(),
                    Block::InterfaceDescription(idb) => linktypes.push(idb.linktype),
                    Block::EnhancedPacket(epb) => {
                        let linktype = usize::try_from(epb.interface_id)
                            .ok()
                            .and_then(|i| linktypes.get(i).copied())
                            .unwrap_or(DataLink::ETHERNET);
                        return Some(Ok(Frame {
                            linktype,
                            orig_len: epb.original_len,
                            data: epb.data.into_owned(),
                        }));
                    }
                    Block::SimplePacket(spb) => {
                        let linktype = linktypes.first().copied().unwrap_or(DataLink::ETHERNET);
                        return Some(Ok(Frame {
                            linktype,
                            orig_len: spb.original_len,
                            data: spb.data.into_owned(),
                        }));
                    }
                    Block::Packet(pb) => {
                        let linktype = linktypes
                            .get(usize::from(pb.interface_id))
                            .copied()
                            .unwrap_or(DataLink::ETHERNET);
                        return Some(Ok(Frame {
                            linktype,
                            orig_len: pb.original_len,
                            data: pb.data.into_owned(),
                        }));
                    }
                    _ => {}
                }
            },
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

    fn tmp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("snic-capture-test-{}-{name}", std::process::id()))
    }

    #[test]
    fn reads_pcap_and_pcapng_frames_byte_exact() {
        let frames: [&[u8]; 2] = [&[1, 2, 3, 4, 5], &[0xaa; 60]];

        let p = tmp("a.pcap");
        let mut w = PcapWriter::new(File::create(&p).unwrap()).unwrap();
        for f in frames {
            w.write_packet(&PcapPacket::new(Duration::from_secs(1), f.len() as u32, f)).unwrap();
        }
        drop(w);

        let n = tmp("a.pcapng");
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
                let got = r.next_frame().expect("a frame").unwrap();
                assert_eq!(got.data, f);
                assert_eq!(got.linktype, DataLink::ETHERNET);
                assert_eq!(got.orig_len as usize, f.len());
            }
            assert!(r.next_frame().is_none());
            std::fs::remove_file(path).unwrap();
        }
    }

    #[test]
    fn rejects_a_file_that_is_not_a_capture() {
        let p = tmp("not.pcap");
        std::fs::write(&p, b"hello world").unwrap();
        let err = CaptureReader::open(&p).unwrap_err().to_string();
        assert!(err.contains("not a pcap or pcapng file"), "{err}");
        std::fs::remove_file(&p).unwrap();
    }
}
