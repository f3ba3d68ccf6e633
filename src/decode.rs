//! `snic decode`: print what snic sees in every frame of a pcap/pcapng file.
//!
//! Text (one line per packet), verbose text (plus every header's fields), or JSON lines (one
//! object per packet). A malformed frame is reported with the layer and reason, never a crash;
//! a frame on a non-Ethernet link type is reported as such.

use crate::report::{self, Report};
use anyhow::{Context, Result, bail};
use pcap_file::DataLink;
use snic_io::pcap::read::{CaptureReader, Format, Record};
use std::io::Write;
use std::path::Path;

/// Decode every frame of `path` and write the result to `out`.
pub fn run(path: &Path, json: bool, verbose: bool, out: &mut impl Write) -> Result<()> {
    let len =
        std::fs::metadata(path).with_context(|| format!("cannot open {}", path.display()))?.len();
    if len < 4 {
        bail!("{}: too short to be a capture file", path.display());
    }
    let mut reader =
        CaptureReader::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let what = match reader.format() {
        Format::Pcap => "damaged pcap record",
        Format::PcapNg => "damaged pcapng block",
    };
    tracing::debug!("{}: {:?} capture", path.display(), reader.format());
    let mut index = 0u64;
    let (mut errors, mut rdma) = (0u64, 0u64);
    loop {
        let record = reader
            .next_record()
            .with_context(|| format!("{}: frame {}: {what}", path.display(), index + 1))?;
        let Some(record) = record else { break };
        index += 1;
        let (linktype, data) = match record {
            Record::Frame { linktype, data, .. } => (linktype, data),
            Record::Unreadable { reason } => {
                bail!("{}: frame {index}: {what}: {reason}", path.display())
            }
        };
        // A pcapng packet on an interface the file never described is read as Ethernet.
        let linktype = linktype.unwrap_or(DataLink::ETHERNET);
        if linktype != DataLink::ETHERNET {
            let msg = format!("link type {linktype:?} is not Ethernet");
            if json {
                let v = serde_json::json!({"index": index, "len": data.len(), "layers": [], "class": "other", "error": msg});
                writeln!(out, "{v}")?;
            } else {
                writeln!(out, "{index:>5} len={:<5} ERROR {msg}", data.len())?;
            }
            errors += 1;
            continue;
        }
        let r: Report = report::report(index, data);
        errors += u64::from(r.error.is_some());
        rdma += u64::from(r.class == "rdma");
        if json {
            serde_json::to_writer(&mut *out, &r)?;
            writeln!(out)?;
        } else {
            writeln!(out, "{}", report::summary_line(&r))?;
            if verbose {
                let stack = snic_wire::stack::parse(data);
                for line in report::layer_details(data, &stack) {
                    writeln!(out, "      {line}")?;
                }
            }
        }
    }
    out.flush()?;
    tracing::info!("{}: {index} packets, {rdma} rdma, {errors} with errors", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_err(bytes: &[u8], name: &str) -> String {
        let dir = std::env::temp_dir().join(format!("snic-decode-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        let err = run(&p, false, false, &mut Vec::new()).unwrap_err();
        let _ = std::fs::remove_dir_all(&dir);
        format!("{err:#}")
    }

    #[test]
    fn short_and_damaged_files_say_what_is_wrong() {
        assert!(decode_err(b"ab", "short").contains("too short to be a capture file"));
        // A classic pcap header, then a record header claiming more bytes than the file has.
        let mut f = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&65535u32.to_le_bytes());
        f.extend_from_slice(&1u32.to_le_bytes());
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&100u32.to_le_bytes());
        f.extend_from_slice(&100u32.to_le_bytes());
        f.extend_from_slice(&[0xaa; 10]);
        let err = decode_err(&f, "cut.pcap");
        assert!(err.contains("frame 1: damaged pcap record"), "{err}");
    }
}
