//! `snic decode`: print what snic sees in every frame of a pcap/pcapng file.
//!
//! Text (one line per packet), verbose text (plus every header's fields), or JSON lines (one
//! object per packet). A malformed frame is reported with the layer and reason, never a crash;
//! a frame on a non-Ethernet link type is reported as such.

use crate::report::{self, Report};
use anyhow::{Context, Result, bail};
use pcap_file::DataLink;
use snic_io::pcap::read::{CaptureReader, Record};
use std::io::Write;
use std::path::Path;

/// Decode every frame of `path` and write the result to `out`.
pub fn run(path: &Path, json: bool, verbose: bool, out: &mut impl Write) -> Result<()> {
    let mut reader =
        CaptureReader::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    tracing::debug!("{}: {:?} capture", path.display(), reader.format());
    let mut index = 0u64;
    let (mut errors, mut rdma) = (0u64, 0u64);
    loop {
        let record = reader
            .next_record()
            .with_context(|| format!("{}: frame {}", path.display(), index + 1))?;
        let Some(record) = record else { break };
        index += 1;
        let Record::Frame { linktype, data, .. } = record else {
            bail!("{}: frame {index}: damaged pcapng block", path.display());
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
