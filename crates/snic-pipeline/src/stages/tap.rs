//! `tap`: copy every packet passing this point of the chain to a pcap capture.
//!
//! The stage writes to any `std::io::Write + Send` sink through `pcap_file::pcap::PcapWriter`
//! (Ethernet link type, microsecond timestamps taken from `now`). This crate never opens a file:
//! the I/O layer hands in the sink (a `File`, or a `BufWriter<File>`, which is flushed when the
//! pipeline is dropped). A failed write is counted in the stage's `errors` and never stops or
//! drops the packet; after a failed write the capture may be incomplete.

use crate::Batch;
use crate::stage::{Stage, StageCtx};
use crate::trace::TraceWhat;
use core::time::Duration;
use pcap_file::pcap::{PcapPacket, PcapWriter};
use snic_time::Instant;
use std::io::Write;

/// The `tap` stage.
pub struct Tap<W: Write + Send> {
    writer: PcapWriter<W>,
    name: String,
}

impl<W: Write + Send> core::fmt::Debug for Tap<W> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Tap").field("name", &self.name).finish_non_exhaustive()
    }
}

impl<W: Write + Send> Tap<W> {
    /// A tap writing to `sink`; writes the pcap file header now.
    pub fn new(sink: W) -> Result<Self, pcap_file::PcapError> {
        Ok(Tap { writer: PcapWriter::new(sink)?, name: "tap".to_owned() })
    }

    /// Give the stage another name in counters and traces (`"tap:in"`).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Stop capturing and get the sink back.
    pub fn into_inner(self) -> W {
        self.writer.into_writer()
    }
}

impl<W: Write + Send> Stage for Tap<W> {
    fn name(&self) -> &str {
        &self.name
    }

    fn process(&mut self, now: Instant, batch: &mut Batch, ctx: &mut StageCtx<'_>) {
        let ts = Duration::from_nanos(now.as_nanos());
        for p in batch.iter() {
            let data = p.data();
            let orig_len = u32::try_from(data.len()).unwrap_or(u32::MAX);
            match self.writer.write_packet(&PcapPacket::new(ts, orig_len, data)) {
                Ok(_) => ctx.trace(p, || TraceWhat::Tapped),
                Err(_) => {
                    ctx.error();
                    ctx.trace(p, || TraceWhat::Note("capture write failed"));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::StageCounters;
    use crate::trace::TraceRing;
    use pcap_file::pcap::PcapReader;

    #[test]
    fn writes_readable_pcap() {
        let mut tap = Tap::new(Vec::new()).unwrap();
        let mut b = Batch::new(4);
        b.push_frame(&[1, 2, 3, 4]).unwrap();
        b.push_frame(&[5; 60]).unwrap();
        let mut c = StageCounters::new("tap");
        let mut ring = TraceRing::new(4);
        tap.process(Instant::from_micros(1_500_000), &mut b, &mut StageCtx::new(&mut c, &mut ring));
        assert_eq!(b.len(), 2, "a tap never removes packets");
        let bytes = tap.into_inner();
        let mut r = PcapReader::new(&bytes[..]).unwrap();
        let p1 = r.next_packet().unwrap().unwrap();
        assert_eq!(&p1.data[..], &[1, 2, 3, 4]);
        assert_eq!(p1.timestamp, Duration::from_micros(1_500_000));
        let p2 = r.next_packet().unwrap().unwrap();
        assert_eq!(p2.data.len(), 60);
        assert!(r.next_packet().is_none());
        assert_eq!(c.errors, 0);
    }

    /// A sink that accepts the header and then fails.
    struct FailAfter(usize);
    impl Write for FailAfter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.0 == 0 {
                return Err(std::io::Error::other("disk full"));
            }
            let n = buf.len().min(self.0);
            self.0 -= n;
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn write_errors_are_counted_not_fatal() {
        let mut tap = Tap::new(FailAfter(24)).unwrap();
        let mut b = Batch::new(4);
        b.push_frame(&[1; 10]).unwrap().meta.trace = true;
        b.push_frame(&[2; 10]).unwrap();
        let mut c = StageCounters::new("tap");
        let mut ring = TraceRing::new(4);
        tap.process(Instant::ZERO, &mut b, &mut StageCtx::new(&mut c, &mut ring));
        assert_eq!(b.len(), 2);
        assert_eq!(c.errors, 2);
        assert_eq!(c.drops.total(), 0);
        assert_eq!(ring.drain().next().unwrap().what, TraceWhat::Note("capture write failed"));
    }
}
