//! `classify`: RecoNIC's packet classification, RDMA or not.
//!
//! A packet is [`Class::Rdma`] when its UDP destination port is 4791 (RoCEv2) **and** a complete
//! BTH follows whose opcode is a defined reliable-connection (RC) opcode or the RoCEv2 CNP
//! (0x81: the RDMA engine's rate control consumes it); everything else is [`Class::Other`]. For RDMA packets the stage fills [`RoceMeta`] with the fields RecoNIC's parser
//! hands to its RDMA engine (addresses, ports, opcode, SE, dest QP, ack-request, PSN, and from the
//! extension headers DMA length, VA, rkey, MSN, syndrome, immediate) and verifies the invariant CRC
//! (`snic_wire::roce::icrc`).
//!
//! A packet whose ICRC does not verify is dropped as `bad_icrc` when the stage enforces it (the
//! default, `classify`), or kept with `icrc_ok = false` (`classify:mark`).
//!
//! Counters: besides the drops, the stage counts every packet it is handed by the class it gave
//! (`classes.rdma`, `classes.other` in its [`StageCounters`](crate::StageCounters)), so that
//! `packets_in == classes.rdma + classes.other`. The class is decided before the ICRC check, so a
//! bad-ICRC RoCE packet counts as classified `rdma` and, when enforced, also as a `bad_icrc`
//! drop: "classified" says what traffic arrived, the drops say what did not go on.
//!
//! The stage reads only the parse stage's offsets (`meta.stack`) and bounds-checked bytes; run it
//! after `parse`. A packet that was not parsed is `Other`.

use crate::drop::DropReason;
use crate::meta::{Class, RoceMeta};
use crate::stage::{Stage, StageCtx};
use crate::trace::TraceWhat;
use crate::{Batch, PacketBuf};
use core::net::IpAddr;
use snic_time::Instant;
use snic_wire::roce::{self, bth, ext, opcode};
use snic_wire::stack::{Headers, Layer, Stack};
use snic_wire::{ipv4, ipv6, udp};

/// The `classify` stage.
#[derive(Debug, Clone)]
pub struct Classify {
    enforce_icrc: bool,
}

impl Default for Classify {
    fn default() -> Self {
        Self::new(true)
    }
}

impl Classify {
    /// A classifier that drops bad-ICRC RDMA packets when `enforce_icrc`, else marks them.
    pub fn new(enforce_icrc: bool) -> Self {
        Classify { enforce_icrc }
    }
}

/// True for the opcodes of the reliable-connection (RC) transport that snic-wire's opcode table
/// defines (top three bits 000; the reserved codes in that range are not RC opcodes).
pub fn is_rc_opcode(op: u8) -> bool {
    opcode::lookup(op).is_some_and(|info| info.transport() == 0)
}

/// True for the opcodes the RDMA engine takes: [`is_rc_opcode`], and the RoCEv2 congestion
/// notification (CNP), which its rate control consumes.
pub fn is_rdma_opcode(op: u8) -> bool {
    is_rc_opcode(op) || op == opcode::CNP
}

/// The headers (outer or inner) whose UDP header carries the BTH at `bth`.
fn carrier(stack: &Stack, bth: usize) -> Option<&Headers> {
    [Some(&stack.outer), stack.inner.as_ref()].into_iter().flatten().find(
        |h| matches!(h.l4, Some((Layer::Udp, off)) if usize::from(off) + udp::HEADER_LEN == bth),
    )
}

fn ip_addrs(d: &[u8], l3: (Layer, u16)) -> Option<(IpAddr, IpAddr)> {
    let at = d.get(usize::from(l3.1)..)?;
    match l3.0 {
        Layer::Ipv4 => {
            let ip = ipv4::Packet::new_checked(at).ok()?;
            Some((ip.src_addr().into(), ip.dst_addr().into()))
        }
        Layer::Ipv6 => {
            let ip = ipv6::Packet::new_checked(at).ok()?;
            Some((ip.src_addr().into(), ip.dst_addr().into()))
        }
        _ => None,
    }
}

/// The RoCE fields of `frame`, or `None` when it is not RDMA traffic ([`is_rdma_opcode`]).
///
/// Reads through snic-wire's header views at the offsets the parse stage recorded (the walk
/// already checked every header, so nothing is parsed twice).
pub fn roce_meta(frame: &[u8], stack: &Stack) -> Option<RoceMeta> {
    roce_fields(frame, stack, |h| icrc_ok(frame, h))
}

/// [`roce_meta`] with `icrc_ok` given by `icrc` (called with the headers that carry the BTH).
pub(crate) fn roce_fields(
    frame: &[u8],
    stack: &Stack,
    icrc: impl FnOnce(&Headers) -> bool,
) -> Option<RoceMeta> {
    let bth_at = usize::from(stack.bth?);
    let h = carrier(stack, bth_at)?;
    let udp = udp::Packet::new_checked(frame.get(bth_at - udp::HEADER_LEN..)?).ok()?;
    if udp.dst_port() != roce::UDP_PORT {
        return None;
    }
    let b = bth::Header::new_checked(frame.get(bth_at..)?).ok()?;
    if !is_rdma_opcode(b.opcode()) {
        return None;
    }
    let (ip_src, ip_dst) = ip_addrs(frame, h.l3?)?;
    let mut m = RoceMeta {
        ip_src,
        ip_dst,
        udp_src: udp.src_port(),
        udp_dst: udp.dst_port(),
        opcode: b.opcode(),
        se: b.solicited(),
        dest_qp: b.dest_qp(),
        ack_req: b.ack_req(),
        psn: b.psn(),
        dma_len: None,
        va: None,
        rkey: None,
        msn: None,
        syndrome: None,
        imm: None,
        icrc_ok: icrc(h),
    };
    let at = |l: Layer| stack.find(l).and_then(|o| frame.get(usize::from(o)..));
    if let Some(r) = at(Layer::Reth).and_then(|x| ext::Reth::new_checked(x).ok()) {
        m.va = Some(r.va());
        m.rkey = Some(r.rkey());
        m.dma_len = Some(r.dma_len());
    }
    if let Some(a) = at(Layer::AtomicEth).and_then(|x| ext::AtomicEth::new_checked(x).ok()) {
        m.va = Some(a.va());
        m.rkey = Some(a.rkey());
    }
    if let Some(i) = at(Layer::Ieth).and_then(|x| ext::Ieth::new_checked(x).ok()) {
        m.rkey = Some(i.rkey());
    }
    if let Some(a) = at(Layer::Aeth).and_then(|x| ext::Aeth::new_checked(x).ok()) {
        m.syndrome = Some(a.syndrome_raw());
        m.msn = Some(a.msn());
    }
    if let Some(i) = at(Layer::ImmDt).and_then(|x| ext::ImmDt::new_checked(x).ok()) {
        m.imm = Some(i.imm());
    }
    Some(m)
}

/// True when the ICRC of the RoCEv2 datagram whose IP header is `h.l3` verifies
/// (`snic_wire::roce::icrc::verify`, which bounds the datagram by the UDP length).
fn icrc_ok(frame: &[u8], h: &Headers) -> bool {
    h.l3.and_then(|(_, ip)| frame.get(usize::from(ip)..))
        .is_some_and(|ip| snic_wire::roce::icrc::verify(ip).is_ok())
}

impl Classify {
    fn classify(&self, p: &mut PacketBuf, ctx: &mut StageCtx<'_>) -> Result<(), DropReason> {
        let roce = roce_meta(p.data(), &p.meta.stack);
        p.meta.class = if roce.is_some() { Class::Rdma } else { Class::Other };
        p.meta.roce = roce.map(|r| r.icrc_ok);
        ctx.counters.classes.add(p.meta.class);
        ctx.trace(p, || TraceWhat::Classified { class: p.meta.class, roce });
        match roce {
            Some(r) if !r.icrc_ok && self.enforce_icrc => Err(DropReason::BadIcrc),
            _ => Ok(()),
        }
    }
}

impl Stage for Classify {
    fn name(&self) -> &str {
        "classify"
    }

    fn process(&mut self, _now: Instant, batch: &mut Batch, ctx: &mut StageCtx<'_>) {
        ctx.each(batch, |p, ctx| self.classify(p, ctx));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::{ClassCounts, StageCounters};
    use crate::trace::TraceRing;

    /// Ethernet/IPv4/UDP(4791)/BTH(opcode)/`ext`/`payload`/ICRC, ICRC filled in.
    fn roce(opcode: u8, ext: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut bth =
            vec![opcode, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x2a, 0x00, 0x00, 0x00, 0x07];
        bth.extend_from_slice(ext);
        bth.extend_from_slice(payload);
        bth.extend_from_slice(&[0; 4]);
        let udp_len = u16::try_from(8 + bth.len()).unwrap();
        let total = 20 + udp_len;
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        f.extend_from_slice(&[
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            0,
            0x40,
            0,
            64,
            17,
            0,
            0,
        ]);
        f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        let c = !snic_wire::checksum::data(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&[0xc0, 0x00, 0x12, 0xb7]);
        f.extend_from_slice(&udp_len.to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(&bth);
        snic_wire::roce::icrc::fill(&mut f[14..]).unwrap();
        f
    }

    /// The same over IPv6 (2001:db8::1 -> 2001:db8::2, traffic class and flow label set).
    fn roce6(opcode: u8, ext: &[u8], payload: &[u8]) -> Vec<u8> {
        let v4 = roce(opcode, ext, payload);
        let udp = &v4[34..];
        let mut f = v4[..12].to_vec();
        f.extend_from_slice(&[0x86, 0xdd, 0x6b, 0x81, 0x23, 0x45]);
        f.extend_from_slice(&u16::try_from(udp.len()).unwrap().to_be_bytes());
        f.extend_from_slice(&[17, 64]);
        f.extend_from_slice(&"2001:db8::1".parse::<core::net::Ipv6Addr>().unwrap().octets());
        f.extend_from_slice(&"2001:db8::2".parse::<core::net::Ipv6Addr>().unwrap().octets());
        f.extend_from_slice(udp);
        snic_wire::roce::icrc::fill(&mut f[14..]).unwrap();
        f
    }

    #[test]
    fn ipv6_roce() {
        let f = roce6(0x0a, &[0; 16], &[1; 8]);
        let m = meta(&f).unwrap();
        assert_eq!(m.ip_src, "2001:db8::1".parse::<IpAddr>().unwrap());
        assert_eq!(m.ip_dst, "2001:db8::2".parse::<IpAddr>().unwrap());
        assert!(m.icrc_ok);
        // Hop limit and flow label are not covered by the ICRC; the payload length is.
        let mut routed = f.clone();
        routed[21] = 1;
        routed[15] ^= 0x0f;
        assert!(meta(&routed).unwrap().icrc_ok);
        let mut bad = f;
        let n = bad.len();
        bad[n - 10] ^= 1;
        assert!(!meta(&bad).unwrap().icrc_ok);
    }

    fn meta(frame: &[u8]) -> Option<RoceMeta> {
        let stack = snic_wire::stack::parse(frame);
        assert!(stack.is_ok(), "{:?}", stack.error());
        roce_meta(frame, &stack)
    }

    #[test]
    fn ack_carries_msn_and_syndrome() {
        let m = meta(&roce(0x11, &[0x1f, 0x00, 0x01, 0x02], &[])).unwrap();
        assert_eq!(m.opcode, 0x11);
        assert_eq!(m.dest_qp, 0x2a);
        assert_eq!(m.psn, 7);
        assert_eq!((m.msn, m.syndrome), (Some(0x102), Some(0x1f)));
        assert_eq!((m.rkey, m.dma_len, m.va), (None, None, None));
        assert_eq!((m.se, m.ack_req), (false, false));
        assert_eq!(m.udp_src, 0xc000);
        assert!(m.icrc_ok);
    }

    #[test]
    fn read_request_atomic_invalidate_and_immediate() {
        let mut reth = Vec::new();
        reth.extend_from_slice(&0x1122_3344_5566_7788u64.to_be_bytes());
        reth.extend_from_slice(&0xaabb_ccddu32.to_be_bytes());
        reth.extend_from_slice(&4096u32.to_be_bytes());
        let m = meta(&roce(0x0c, &reth, &[])).unwrap();
        assert_eq!(
            (m.va, m.rkey, m.dma_len),
            (Some(0x1122_3344_5566_7788), Some(0xaabb_ccdd), Some(4096))
        );

        let mut atomic = Vec::new();
        atomic.extend_from_slice(&0x1000u64.to_be_bytes());
        atomic.extend_from_slice(&0x0bad_f00du32.to_be_bytes());
        atomic.extend_from_slice(&[0; 16]);
        let m = meta(&roce(0x13, &atomic, &[])).unwrap();
        assert_eq!((m.va, m.rkey, m.dma_len), (Some(0x1000), Some(0x0bad_f00d), None));

        let m = meta(&roce(0x17, &0x5555_6666u32.to_be_bytes(), &[1, 2, 3, 4])).unwrap();
        assert_eq!(m.rkey, Some(0x5555_6666));

        let m = meta(&roce(0x03, &0x0102_0304u32.to_be_bytes(), &[9; 8])).unwrap();
        assert_eq!((m.imm, m.rkey), (Some(0x0102_0304), None));
    }

    #[test]
    fn only_rc_opcodes_are_rdma() {
        assert!(is_rc_opcode(0x00) && is_rc_opcode(0x14) && is_rc_opcode(0x17));
        // RC FLUSH and RC ATOMIC WRITE (IBTA 1.5, sent by Linux rxe) are in the opcode table.
        assert!(is_rc_opcode(0x1c) && is_rc_opcode(0x1d));
        assert!(
            !is_rc_opcode(0x15)
                && !is_rc_opcode(0x18)
                && !is_rc_opcode(0x64)
                && !is_rc_opcode(0x81)
        );
        // UD SEND ONLY (DETH) parses but is not RDMA for the classifier.
        assert_eq!(meta(&roce(0x64, &[0; 8], &[0; 4])), None);
    }

    #[test]
    fn a_cnp_is_rdma_traffic_for_the_engine() {
        assert!(is_rdma_opcode(0x81) && !is_rc_opcode(0x81));
        assert!(!is_rdma_opcode(0x64) && !is_rdma_opcode(0x80) && !is_rdma_opcode(0x82));
        let m = meta(&roce(0x81, &[0; 16], &[])).expect("a CNP is classified RDMA");
        assert_eq!(m.opcode, 0x81);
        assert!(m.icrc_ok);
    }

    fn run(
        stage: &mut Classify,
        frames: &[Vec<u8>],
    ) -> (Vec<(Class, Option<bool>)>, StageCounters) {
        let mut b = Batch::new(8);
        for f in frames {
            let p = b.push_frame(f).unwrap();
            p.meta.stack = snic_wire::stack::parse(f);
        }
        let mut c = StageCounters::new("classify");
        let mut ring = TraceRing::new(4);
        stage.process(Instant::ZERO, &mut b, &mut StageCtx::new(&mut c, &mut ring));
        (b.iter().map(|p| (p.meta.class, p.meta.roce)).collect(), c)
    }

    #[test]
    fn bad_icrc_dropped_or_marked() {
        let good = roce(0x04, &[], &[0x42; 16]);
        let mut bad = good.clone();
        let n = bad.len();
        bad[n - 2] ^= 1;
        // A payload bit flip is caught too.
        let mut flipped = good.clone();
        flipped[60] ^= 0x80;
        // Fields routers may change do not matter: TTL, DSCP/ECN, the BTH FECN/BECN byte.
        let mut routed = good.clone();
        routed[22] -= 1; // TTL
        routed[15] = 0x03; // ECN CE
        routed[42 + 4] = 0x80; // FECN
        let frames = vec![good, bad, flipped, routed, vec![0; 60]];

        let (got, c) = run(&mut Classify::default(), &frames);
        assert_eq!(
            got,
            vec![(Class::Rdma, Some(true)), (Class::Rdma, Some(true)), (Class::Other, None)]
        );
        assert_eq!(c.drops.get(DropReason::BadIcrc), 2);
        assert_eq!(c.drops.total(), 2);
        // The dropped bad-ICRC packets were classified as RDMA before the check dropped them.
        assert_eq!(c.classes, ClassCounts { rdma: 4, other: 1 });

        let (got, c) = run(&mut Classify::new(false), &frames);
        assert_eq!(
            got,
            vec![
                (Class::Rdma, Some(true)),
                (Class::Rdma, Some(false)),
                (Class::Rdma, Some(false)),
                (Class::Rdma, Some(true)),
                (Class::Other, None)
            ]
        );
        assert_eq!(c.drops.total(), 0);
        assert_eq!(c.classes, ClassCounts { rdma: 4, other: 1 });
    }

    #[test]
    fn truncated_frames_never_panic() {
        let f = roce(0x0a, &[0; 16], &[7; 32]);
        for n in 0..f.len() {
            let cut = &f[..n];
            let stack = snic_wire::stack::parse(cut);
            // Whatever parse made of it, reading fields stays in bounds.
            let _ = roce_meta(cut, &stack);
        }
        // And a stack that claims offsets past a short frame reads nothing.
        let stack = snic_wire::stack::parse(&f);
        assert_eq!(roce_meta(&f[..40], &stack), None);
    }
}
