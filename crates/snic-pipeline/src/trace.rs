//! Packet trace: "where did my packet go".
//!
//! A packet is traced when its `meta.trace` flag is set. The pipeline sets it for packets chosen by
//! a [`TraceFilter`]: by sequence number (`seq 5`, `seq 10-20`) or by a match on its headers
//! (`udp dst 4791`, `ip 10.0.0.1`, `class rdma`, terms joined with `and`). While the flag is set,
//! every stage records what it did (parsed as which layers, classified as what, forwarded to which
//! port, dropped why) as a [`TraceEvent`] in a bounded [`TraceRing`], which the caller drains.
//!
//! The I/O layer adds the last step under the stage name [`TX_STAGE`] (`tx`): the port that sent
//! the packet ([`TraceWhat::Sent`]), the software segmentation of a super-packet
//! ([`TraceWhat::Segmented`]), or the port that could not send it and why
//! ([`TraceWhat::TxDropped`]).
//!
//! Tracing off costs one branch per packet per stage (the `meta.trace` test); events are only
//! built, and may allocate, for traced packets.
//!
//! # Stage taps
//!
//! [`StageTaps`] lets a live capture (`snic capture --stage NAME`) see what leaves a stage:
//! the pipeline reads its armed mask once per batch (one relaxed atomic load, no per-packet
//! work) and, for each armed stage, hands the batch to the [`TapSink`] after that stage ran.
//! With no capture armed the mask is zero and nothing else happens.

use crate::PacketBuf;
use crate::drop::DropReason;
use crate::meta::{Class, PortId, RoceMeta};
use core::fmt;
use core::net::IpAddr;
use snic_wire::stack::{Layer, Stack};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where the packets of an armed stage tap go (a capture's bounded queue): called by the
/// pipeline after stage `stage` (its index and name) ran, with the batch as it left the stage.
/// Implementations copy what they want and never block.
pub trait TapSink: Send + Sync {
    /// The packets of `batch` left stage `stage` (`name`).
    fn tap(&self, stage: usize, name: &str, batch: &crate::Batch);
}

/// The stage tap points of a run's pipelines: an armed mask (bit `i`: stage `i`, the first
/// [`StageTaps::MAX_STAGES`] stages) and the sink armed stages feed. Shared by every worker's
/// pipeline and the control plane that arms it.
pub struct StageTaps {
    armed: AtomicU64,
    sink: Arc<dyn TapSink>,
}

impl fmt::Debug for StageTaps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StageTaps").field("armed", &self.armed()).finish_non_exhaustive()
    }
}

impl StageTaps {
    /// Stages that can be tapped (the bits of the mask).
    pub const MAX_STAGES: usize = 64;

    /// Tap points feeding `sink`, none armed.
    pub fn new(sink: Arc<dyn TapSink>) -> Self {
        StageTaps { armed: AtomicU64::new(0), sink }
    }

    /// The armed mask: what the pipeline reads once per batch.
    #[inline]
    pub fn armed(&self) -> u64 {
        self.armed.load(Ordering::Relaxed)
    }

    /// Arm exactly the stages of `mask` (0 disarms all).
    pub fn arm(&self, mask: u64) {
        self.armed.store(mask, Ordering::Release);
    }

    /// Hand `batch` to the sink if stage `stage` is armed in `mask` (a mask read once per batch).
    #[inline]
    pub fn after_stage(&self, mask: u64, stage: usize, name: &str, batch: &crate::Batch) {
        if mask.checked_shr(stage as u32).unwrap_or(0) & 1 != 0 && !batch.is_empty() {
            self.sink.tap(stage, name, batch);
        }
    }
}

/// An optional [`StageTaps`] in a configuration: two handles are equal when they share the
/// same tap points (or both have none). Not serialised.
#[derive(Debug, Clone, Default)]
pub struct TapHandle(pub Option<Arc<StageTaps>>);

impl PartialEq for TapHandle {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for TapHandle {}

/// What a stage did to a traced packet.
#[derive(Debug, Clone, PartialEq)]
pub enum TraceWhat {
    /// The trace filter selected this packet (after the named point); the layers known so far.
    Selected {
        /// The parsed stack at selection time (empty before the parse stage).
        stack: Stack,
    },
    /// Parsed: the layers found, and the error that stopped the walk, if any.
    Parsed {
        /// The parsed stack.
        stack: Stack,
        /// The RSS hash computed.
        rss_hash: u32,
    },
    /// Classified.
    Classified {
        /// The class given.
        class: Class,
        /// The RoCE fields, for RDMA packets.
        roce: Option<RoceMeta>,
    },
    /// An egress port was chosen; `how` says why (`"static"`, `"learned"`).
    Forwarded {
        /// The port.
        port: PortId,
        /// Why this port.
        how: &'static str,
    },
    /// Marked for flooding to every port but the ingress port.
    Flooded,
    /// Dropped.
    Dropped(DropReason),
    /// Copied to a capture (pcap tap).
    Tapped,
    /// The packet was changed; says how.
    Modified(&'static str),
    /// Anything else worth saying.
    Note(&'static str),
    /// A line of a stage's own trace (a P4 program's parser states, table lookups, actions
    /// and egress decision, like BMv2's `--log-console`). Made only for traced packets.
    Detail(String),
    /// The I/O layer handed the packet to its egress port, which took it.
    Sent {
        /// The port.
        port: PortId,
        /// The port's name (`null`, `pcap:out.pcap`, ...).
        name: String,
    },
    /// The I/O layer cut the super-packet into segments for a port without segmentation offload
    /// (each segment is then traced on its own, under the same sequence number).
    Segmented {
        /// The port.
        port: PortId,
        /// How many segments.
        segments: usize,
    },
    /// The I/O layer could not send the packet out of `port` (`too_big`, `tx_queue_full`,
    /// `tx_error`, `offload_failed`).
    TxDropped {
        /// The port.
        port: PortId,
        /// Why.
        reason: DropReason,
    },
}

/// The stage name under which the I/O layer records its [`TraceWhat::Sent`],
/// [`TraceWhat::Segmented`] and [`TraceWhat::TxDropped`] events.
pub const TX_STAGE: &str = "tx";

/// Writes the layers of a stack as `eth/ipv4/udp/bth` and its error, if any.
struct Layers<'a>(&'a Stack);

impl fmt::Display for Layers<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, l) in self.0.layers().iter().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            f.write_str(l.layer.name())?;
        }
        if self.0.layers().is_empty() {
            f.write_str("(none)")?;
        }
        if let Some((layer, err)) = self.0.error() {
            write!(f, " [error in {}: {}]", layer.name(), err)?;
        }
        Ok(())
    }
}

impl fmt::Display for TraceWhat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceWhat::Selected { stack } if stack.layers().is_empty() && stack.is_ok() => {
                f.write_str("selected for trace (not parsed yet)")
            }
            TraceWhat::Selected { stack } => write!(f, "selected for trace: {}", Layers(stack)),
            TraceWhat::Parsed { stack, rss_hash } => {
                write!(f, "parsed as {} rss={rss_hash:#010x}", Layers(stack))
            }
            TraceWhat::Classified { class, roce: None } => {
                write!(f, "classified as {}", class.name())
            }
            TraceWhat::Classified { class, roce: Some(r) } => {
                write!(
                    f,
                    "classified as {} opcode={:#04x} qp={:#x} psn={}",
                    class.name(),
                    r.opcode,
                    r.dest_qp,
                    r.psn
                )?;
                if let Some(k) = r.rkey {
                    write!(f, " rkey={k:#x}")?;
                }
                if let Some(n) = r.dma_len {
                    write!(f, " dma_len={n}")?;
                }
                if let Some(m) = r.msn {
                    write!(f, " msn={m}")?;
                }
                write!(f, " icrc_ok={}", r.icrc_ok)
            }
            TraceWhat::Forwarded { port, how } => write!(f, "forwarded to port {} ({how})", port.0),
            TraceWhat::Flooded => f.write_str("flooded to every other port"),
            TraceWhat::Dropped(r) => write!(f, "dropped: {r}"),
            TraceWhat::Tapped => f.write_str("copied to capture"),
            TraceWhat::Modified(how) => write!(f, "modified: {how}"),
            TraceWhat::Note(s) => f.write_str(s),
            TraceWhat::Detail(s) => f.write_str(s),
            TraceWhat::Sent { port, name } => write!(f, "sent out port {} ({name})", port.0),
            TraceWhat::Segmented { port, segments } => {
                write!(f, "segmented into {segments} segments for port {}", port.0)
            }
            TraceWhat::TxDropped { port, reason } => {
                write!(f, "dropped at port {}: {reason}", port.0)
            }
        }
    }
}

/// One thing one stage did to one traced packet.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceEvent {
    /// The packet's sequence number (`meta.seq`).
    pub seq: u64,
    /// The stage's name.
    pub stage: String,
    /// What happened.
    pub what: TraceWhat,
}

impl fmt::Display for TraceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{} {}: {}", self.seq, self.stage, self.what)
    }
}

/// A bounded ring of trace events. When full, the oldest event is dropped and counted in
/// [`TraceRing::lost`].
#[derive(Debug, Clone)]
pub struct TraceRing {
    events: VecDeque<TraceEvent>,
    cap: usize,
    lost: u64,
}

impl TraceRing {
    /// A ring holding at most `cap` events (at least 1).
    pub fn new(cap: usize) -> Self {
        let cap = cap.max(1);
        TraceRing { events: VecDeque::with_capacity(cap), cap, lost: 0 }
    }

    /// Record an event, evicting the oldest when full.
    pub fn push(&mut self, ev: TraceEvent) {
        if self.events.len() >= self.cap {
            self.events.pop_front();
            self.lost += 1;
        }
        self.events.push_back(ev);
    }

    /// Take every recorded event, oldest first.
    pub fn drain(&mut self) -> impl Iterator<Item = TraceEvent> + '_ {
        self.events.drain(..)
    }

    /// Events recorded and not drained.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// True when no event is waiting.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Events evicted because the ring was full.
    pub fn lost(&self) -> u64 {
        self.lost
    }
}

/// Which side of a header pair a term matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Source only.
    Src,
    /// Destination only.
    Dst,
    /// Either.
    Any,
}

/// One term of a trace filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceTerm {
    /// `seq N` or `seq A-B` (inclusive).
    Seq(u64, u64),
    /// `ingress N`: arrived on port N.
    Ingress(u16),
    /// `udp [src|dst] P` (innermost UDP header).
    Udp(Dir, u16),
    /// `tcp [src|dst] P` (innermost TCP header).
    Tcp(Dir, u16),
    /// `ip [src|dst] ADDR` (innermost IP header).
    Ip(Dir, IpAddr),
    /// `class rdma|other|unclassified`.
    Class(Class),
    /// `vni N`: tunnelled with this virtual network ID.
    Vni(u32),
    /// `layer NAME`: has a layer of that name anywhere (`layer vxlan`, `layer reth`).
    Layer(Layer),
}

/// A trace filter: terms that must all hold (`udp dst 4791 and ip 10.0.0.1`), or `all`.
///
/// Bounded: at most [`TraceFilter::MAX_TERMS`] terms, stored inline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceFilter {
    terms: [Option<TraceTerm>; TraceFilter::MAX_TERMS],
    all: bool,
}

/// A trace filter expression that could not be parsed; says which word was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError(pub String);

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad trace filter: {}", self.0)
    }
}

impl std::error::Error for FilterError {}

impl TraceFilter {
    /// Most terms in one filter.
    pub const MAX_TERMS: usize = 8;

    /// A filter matching every packet.
    pub const fn all() -> Self {
        TraceFilter { terms: [None; Self::MAX_TERMS], all: true }
    }

    /// Parse an expression: `all`, or terms joined by `and`:
    /// `seq N`, `seq A-B`, `ingress N`, `udp [src|dst] PORT`, `tcp [src|dst] PORT`,
    /// `ip [src|dst] ADDR`, `class rdma|other|unclassified`, `vni N`, `layer NAME`.
    pub fn parse(expr: &str) -> Result<Self, FilterError> {
        let expr = expr.trim();
        if expr == "all" || expr == "*" {
            return Ok(Self::all());
        }
        let mut f = TraceFilter { terms: [None; Self::MAX_TERMS], all: false };
        for (n, part) in expr.split(" and ").enumerate() {
            let words: Vec<&str> = part.split_whitespace().collect();
            let term = Self::parse_term(&words)?;
            let slot = f
                .terms
                .get_mut(n)
                .ok_or_else(|| FilterError(format!("more than {} terms", Self::MAX_TERMS)))?;
            *slot = Some(term);
        }
        Ok(f)
    }

    fn parse_term(words: &[&str]) -> Result<TraceTerm, FilterError> {
        let bad = |what: &str| FilterError(format!("{what} in `{}`", words.join(" ")));
        let (dir, rest) = match words.get(1) {
            Some(&"src") => (Dir::Src, &words[2..]),
            Some(&"dst") => (Dir::Dst, &words[2..]),
            _ => (Dir::Any, words.get(1..).unwrap_or(&[])),
        };
        let arg = || -> Result<&str, FilterError> {
            match rest {
                [one] => Ok(*one),
                [] => Err(bad("missing value")),
                _ => Err(bad("too many words")),
            }
        };
        let port = |s: &str| s.parse::<u16>().map_err(|_| bad("bad port number"));
        match words.first().copied() {
            Some("seq") => {
                let v = arg()?;
                let num = |s: &str| s.parse::<u64>().map_err(|_| bad("bad sequence number"));
                match v.split_once('-') {
                    Some((a, b)) => Ok(TraceTerm::Seq(num(a)?, num(b)?)),
                    None => {
                        let n = num(v)?;
                        Ok(TraceTerm::Seq(n, n))
                    }
                }
            }
            Some("ingress") => Ok(TraceTerm::Ingress(port(arg()?)?)),
            Some("udp") => Ok(TraceTerm::Udp(dir, port(arg()?)?)),
            Some("tcp") => Ok(TraceTerm::Tcp(dir, port(arg()?)?)),
            Some("ip") => {
                let a = arg()?.parse::<IpAddr>().map_err(|_| bad("bad IP address"))?;
                Ok(TraceTerm::Ip(dir, a))
            }
            Some("class") => match arg()? {
                "rdma" => Ok(TraceTerm::Class(Class::Rdma)),
                "other" => Ok(TraceTerm::Class(Class::Other)),
                "unclassified" => Ok(TraceTerm::Class(Class::Unclassified)),
                _ => Err(bad("unknown class")),
            },
            Some("vni") => Ok(TraceTerm::Vni(arg()?.parse::<u32>().map_err(|_| bad("bad VNI"))?)),
            Some("layer") => {
                let name = arg()?;
                Layer::from_name(name).map(TraceTerm::Layer).ok_or_else(|| bad("unknown layer"))
            }
            Some(_) => Err(bad("unknown term")),
            None => Err(bad("empty term")),
        }
    }

    /// The terms of this filter.
    pub fn terms(&self) -> impl Iterator<Item = &TraceTerm> {
        self.terms.iter().flatten()
    }

    /// True when the filter decides by sequence number and ingress alone, so it can be applied
    /// as packets enter the pipeline (before any stage).
    pub fn is_entry_only(&self) -> bool {
        self.all || self.terms().all(|t| matches!(t, TraceTerm::Seq(..) | TraceTerm::Ingress(_)))
    }

    /// Does the packet match, with what its metadata says so far?
    pub fn matches(&self, pkt: &PacketBuf) -> bool {
        self.all || self.terms().all(|t| term_matches(t, pkt))
    }
}

fn be16(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*d.get(at)?, *d.get(at + 1)?]))
}

fn ip_addrs(d: &[u8], l3: Option<(Layer, u16)>) -> Option<(IpAddr, IpAddr)> {
    let (layer, off) = l3?;
    let off = usize::from(off);
    match layer {
        Layer::Ipv4 => {
            let s: [u8; 4] = d.get(off + 12..off + 16)?.try_into().ok()?;
            let t: [u8; 4] = d.get(off + 16..off + 20)?.try_into().ok()?;
            Some((IpAddr::from(s), IpAddr::from(t)))
        }
        Layer::Ipv6 => {
            let s: [u8; 16] = d.get(off + 8..off + 24)?.try_into().ok()?;
            let t: [u8; 16] = d.get(off + 24..off + 40)?.try_into().ok()?;
            Some((IpAddr::from(s), IpAddr::from(t)))
        }
        _ => None,
    }
}

fn dir_matches<T: PartialEq>(dir: Dir, src: T, dst: T, want: T) -> bool {
    match dir {
        Dir::Src => src == want,
        Dir::Dst => dst == want,
        Dir::Any => src == want || dst == want,
    }
}

fn term_matches(t: &TraceTerm, pkt: &PacketBuf) -> bool {
    let m = &pkt.meta;
    let d = pkt.data();
    let h = m.stack.innermost();
    match *t {
        TraceTerm::Seq(a, b) => (a..=b).contains(&m.seq),
        TraceTerm::Ingress(p) => m.ingress.0 == p,
        TraceTerm::Udp(dir, p) | TraceTerm::Tcp(dir, p) => {
            let want = if matches!(t, TraceTerm::Udp(..)) { Layer::Udp } else { Layer::Tcp };
            match h.l4 {
                Some((l, off)) if l == want => {
                    let off = usize::from(off);
                    match (be16(d, off), be16(d, off + 2)) {
                        (Some(s), Some(dd)) => dir_matches(dir, s, dd, p),
                        _ => false,
                    }
                }
                _ => false,
            }
        }
        TraceTerm::Ip(dir, a) => match ip_addrs(d, h.l3) {
            Some((s, dd)) => dir_matches(dir, s, dd, a),
            None => false,
        },
        TraceTerm::Class(c) => m.class == c,
        TraceTerm::Vni(v) => m.stack.vni == Some(v),
        TraceTerm::Layer(l) => m.stack.find(l).is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records which stage handed it how many packets.
    #[derive(Default)]
    struct Seen(std::sync::Mutex<Vec<(usize, String, usize)>>);

    impl TapSink for Seen {
        fn tap(&self, stage: usize, name: &str, batch: &crate::Batch) {
            self.0.lock().unwrap().push((stage, name.to_owned(), batch.len()));
        }
    }

    #[test]
    fn stage_taps_see_what_leaves_an_armed_stage_and_nothing_when_disarmed() {
        let seen = Arc::new(Seen::default());
        let taps = Arc::new(StageTaps::new(seen.clone()));
        let mut cfg = crate::PipelineConfig::from_strs(&["parse", "classify", "l2fwd"]).unwrap();
        cfg.stage_taps = TapHandle(Some(taps.clone()));
        let mut p = crate::Pipeline::build(&cfg, &mut |_: &str| unreachable!("no taps")).unwrap();
        let run = |p: &mut crate::Pipeline, n: usize| {
            let mut b = crate::Batch::new(8);
            for _ in 0..n {
                // Too short to parse: `parse` drops it, so what leaves stage 0 is empty.
                b.push_frame(&[0u8; 4]).unwrap();
            }
            p.process(snic_time::Instant::ZERO, &mut b);
        };
        run(&mut p, 3);
        assert!(seen.0.lock().unwrap().is_empty(), "nothing armed, nothing seen");
        taps.arm(1 << 0);
        run(&mut p, 3);
        assert!(seen.0.lock().unwrap().is_empty(), "an empty batch is not handed over");
        let mut b = crate::Batch::new(8);
        for _ in 0..2 {
            b.push_frame(&[0u8; 60]).unwrap();
        }
        let mut cfg2 = crate::PipelineConfig::from_strs(&["parse:pass", "classify"]).unwrap();
        cfg2.stage_taps = TapHandle(Some(taps.clone()));
        let mut p2 = crate::Pipeline::build(&cfg2, &mut |_: &str| unreachable!()).unwrap();
        taps.arm(1 << 1);
        p2.process(snic_time::Instant::ZERO, &mut b);
        assert_eq!(*seen.0.lock().unwrap(), vec![(1, "classify".to_owned(), 2)]);
        taps.arm(0);
        let mut b = crate::Batch::new(8);
        b.push_frame(&[0u8; 60]).unwrap();
        p2.process(snic_time::Instant::ZERO, &mut b);
        assert_eq!(seen.0.lock().unwrap().len(), 1, "disarmed: nothing more");
        assert_eq!(TapHandle(Some(taps.clone())), TapHandle(Some(taps)));
        assert_ne!(TapHandle(None), TapHandle(Some(Arc::new(StageTaps::new(seen)))));
    }

    #[test]
    fn ring_is_bounded_and_counts_lost() {
        let mut r = TraceRing::new(2);
        for seq in 1..=3 {
            r.push(TraceEvent { seq, stage: "s".into(), what: TraceWhat::Flooded });
        }
        assert_eq!(r.len(), 2);
        assert_eq!(r.lost(), 1);
        let seqs: Vec<u64> = r.drain().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![2, 3]);
        assert!(r.is_empty());
    }

    #[test]
    fn tx_events_read_as_the_last_step() {
        let ev = |what| TraceEvent { seq: 5, stage: TX_STAGE.into(), what }.to_string();
        assert_eq!(
            ev(TraceWhat::Sent { port: PortId(1), name: "null".into() }),
            "#5 tx: sent out port 1 (null)"
        );
        assert_eq!(
            ev(TraceWhat::Segmented { port: PortId(0), segments: 14 }),
            "#5 tx: segmented into 14 segments for port 0"
        );
        assert_eq!(
            ev(TraceWhat::TxDropped { port: PortId(2), reason: DropReason::TooBig }),
            "#5 tx: dropped at port 2: too_big"
        );
    }

    #[test]
    fn filter_parses() {
        let f = TraceFilter::parse("udp dst 4791 and ip 10.0.0.1").unwrap();
        let terms: Vec<TraceTerm> = f.terms().copied().collect();
        assert_eq!(
            terms,
            vec![
                TraceTerm::Udp(Dir::Dst, 4791),
                TraceTerm::Ip(Dir::Any, "10.0.0.1".parse().unwrap())
            ]
        );
        assert!(!f.is_entry_only());
        let f = TraceFilter::parse("seq 10-20").unwrap();
        assert_eq!(f.terms().next(), Some(&TraceTerm::Seq(10, 20)));
        assert!(f.is_entry_only());
        assert_eq!(
            TraceFilter::parse("class rdma").unwrap().terms().next(),
            Some(&TraceTerm::Class(Class::Rdma))
        );
        assert_eq!(
            TraceFilter::parse("layer vxlan").unwrap().terms().next(),
            Some(&TraceTerm::Layer(Layer::Vxlan))
        );
        assert!(TraceFilter::parse("all").unwrap().is_entry_only());
    }

    #[test]
    fn filter_rejects_bad_input() {
        for bad in [
            "",
            "udp",
            "udp dst",
            "udp dst x",
            "ip 10.0.0.300",
            "class blue",
            "frob 1",
            "seq 1-x",
            "layer frob",
            "udp dst 1 2",
        ] {
            assert!(TraceFilter::parse(bad).is_err(), "{bad:?} parsed");
        }
        let many = ["seq 1"; 9].join(" and ");
        assert!(TraceFilter::parse(&many).is_err());
    }

    #[test]
    fn seq_and_ingress_match_without_parse() {
        let mut p = PacketBuf::from_frame(&[0u8; 20]);
        p.meta.seq = 15;
        p.meta.ingress = PortId(3);
        assert!(TraceFilter::parse("seq 10-20").unwrap().matches(&p));
        assert!(!TraceFilter::parse("seq 16").unwrap().matches(&p));
        assert!(TraceFilter::parse("seq 15 and ingress 3").unwrap().matches(&p));
        assert!(!TraceFilter::parse("ingress 2").unwrap().matches(&p));
        // Header terms never match an unparsed packet (and never panic on it).
        assert!(!TraceFilter::parse("udp dst 4791").unwrap().matches(&p));
        assert!(!TraceFilter::parse("ip 10.0.0.1").unwrap().matches(&p));
    }
}
