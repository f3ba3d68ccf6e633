//! What `snic decode` says about one frame: a [`Report`] built from snic-wire's whole-frame
//! parse, the pipeline's classify helper, and snic-wire's RoCEv2 views and ICRC check.
//!
//! The same module is compiled into the interop tests (`tests/interop_scapy.rs` includes it by
//! path), so what the CLI prints and what the tests check against scapy are one code path.
//!
//! A report allocates (names, strings): decoding a capture is not the fast path.

use serde::Serialize;
use snic_wire::roce::{bth, icrc, packet::RocePacket};
use snic_wire::stack::{Layer, LayerAt, Stack};
use snic_wire::{ethernet, geneve, ipv4, ipv6, tcp, udp, vxlan};
use std::net::IpAddr;

/// RETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RethFields {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// DMA length.
    pub dma_len: u32,
}

/// AETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AethFields {
    /// The raw syndrome byte.
    pub syndrome: u8,
    /// Message sequence number.
    pub msn: u32,
}

/// AtomicETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AtomicEthFields {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap (compare-and-swap) or add (fetch-and-add) value.
    pub swap_add: u64,
    /// Compare value.
    pub compare: u64,
}

/// DETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DethFields {
    /// Queue key.
    pub qkey: u32,
    /// Source QP.
    pub src_qp: u32,
}

/// The RoCEv2 part of a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RoceReport {
    /// BTH opcode.
    pub opcode: u8,
    /// Opcode name (`"RC_SEND_ONLY"`).
    pub opcode_name: &'static str,
    /// Destination QP.
    pub dest_qp: u32,
    /// Packet sequence number.
    pub psn: u32,
    /// AckReq bit.
    pub ack_req: bool,
    /// Solicited-event bit.
    pub se: bool,
    /// Partition key.
    pub pkey: u16,
    /// FECN bit.
    pub fecn: bool,
    /// BECN bit.
    pub becn: bool,
    /// Whether the invariant CRC verified.
    pub icrc_ok: bool,
    /// RETH, when present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reth: Option<RethFields>,
    /// AETH, when present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aeth: Option<AethFields>,
    /// Immediate data, when present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub immdt: Option<u32>,
    /// IETH rkey, when present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ieth: Option<u32>,
    /// AtomicETH, when present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub atomiceth: Option<AtomicEthFields>,
    /// AtomicAckETH original remote data, when present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub atomicacketh: Option<u64>,
    /// DETH, when present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deth: Option<DethFields>,
    /// Why the RoCE headers after the BTH could not be read, when they could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Everything `snic decode` says about one frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Index in the capture, from 1.
    pub index: u64,
    /// Captured length.
    pub len: usize,
    /// Layer names, outer to inner.
    pub layers: Vec<&'static str>,
    /// `"rdma"` or `"other"` (RecoNIC's rule, from the pipeline's classify stage).
    pub class: &'static str,
    /// Outermost VLAN ID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// Tunnel VNI / VSID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vni: Option<u32>,
    /// Innermost IP source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src: Option<IpAddr>,
    /// Innermost IP destination.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst: Option<IpAddr>,
    /// Innermost IP protocol (IPv6: after extension headers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proto: Option<u8>,
    /// Innermost L4 source port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sport: Option<u16>,
    /// Innermost L4 destination port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dport: Option<u16>,
    /// RoCEv2 fields, for frames with a BTH.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roce: Option<RoceReport>,
    /// Why the frame could not be fully parsed: `"LAYER: reason"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The layer that failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_layer: Option<&'static str>,
    /// The error kind (`snic_wire::Error::name`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<&'static str>,
}

/// Build the report of `frame`, the `index`-th frame of a capture.
pub fn report(index: u64, frame: &[u8]) -> Report {
    let stack = snic_wire::stack::parse(frame);
    let class = if snic_pipeline::stages::classify::roce_meta(frame, &stack).is_some() {
        "rdma"
    } else {
        "other"
    };
    let inner = stack.innermost();
    let mut r = Report {
        index,
        len: frame.len(),
        layers: stack.layers().iter().map(|l| l.layer.name()).collect(),
        class,
        vlan: stack.outer.vlan_id,
        vni: stack.vni,
        src: None,
        dst: None,
        proto: inner.ip_proto,
        sport: None,
        dport: None,
        roce: roce_report(frame, &stack),
        error: stack.error().map(|(l, e)| format!("{}: {e}", l.name())),
        error_layer: stack.error().map(|(l, _)| l.name()),
        error_kind: stack.error().map(|(_, e)| e.name()),
    };
    if let Some((layer, off)) = inner.l3 {
        let at = frame.get(usize::from(off)..).unwrap_or_default();
        match layer {
            Layer::Ipv4 => {
                if let Ok(p) = ipv4::Packet::new_checked(at) {
                    r.src = Some(p.src_addr().into());
                    r.dst = Some(p.dst_addr().into());
                }
            }
            Layer::Ipv6 => {
                if let Ok(p) = ipv6::Packet::new_checked(at) {
                    r.src = Some(p.src_addr().into());
                    r.dst = Some(p.dst_addr().into());
                }
            }
            _ => {}
        }
    }
    if let Some((layer, off)) = inner.l4 {
        let at = frame.get(usize::from(off)..).unwrap_or_default();
        match layer {
            Layer::Udp => {
                if let Ok(p) = udp::Packet::new_checked(at) {
                    r.sport = Some(p.src_port());
                    r.dport = Some(p.dst_port());
                }
            }
            Layer::Tcp => {
                if let Ok(p) = tcp::Packet::new_checked(at) {
                    r.sport = Some(p.src_port());
                    r.dport = Some(p.dst_port());
                }
            }
            _ => {}
        }
    }
    r
}

/// The IP header that carries the UDP datagram in front of the BTH at `bth`.
fn roce_ip(stack: &Stack, bth: usize) -> Option<(usize, usize)> {
    let layers = stack.layers();
    let udp = layers.iter().rposition(|l| l.layer == Layer::Udp && usize::from(l.offset) < bth)?;
    let ip = layers[..udp].iter().rev().find(|l| matches!(l.layer, Layer::Ipv4 | Layer::Ipv6))?;
    Some((usize::from(ip.offset), usize::from(layers[udp].offset)))
}

fn roce_report(frame: &[u8], stack: &Stack) -> Option<RoceReport> {
    // `stack.bth` is set only when the whole RoCE packet parsed; a BTH followed by a broken
    // extension header is still recorded as a layer, and its fields are still worth showing.
    let bth_at = usize::from(stack.bth.or_else(|| stack.find(Layer::Bth))?);
    let (ip_at, udp_at) = roce_ip(stack, bth_at)?;
    let hdr = bth::Header::new_checked(frame.get(bth_at..)?).ok()?;
    let mut r = RoceReport {
        opcode: hdr.opcode(),
        opcode_name: snic_wire::roce::opcode::name(hdr.opcode()),
        dest_qp: hdr.dest_qp(),
        psn: hdr.psn(),
        ack_req: hdr.ack_req(),
        se: hdr.solicited(),
        pkey: hdr.pkey(),
        fecn: hdr.fecn(),
        becn: hdr.becn(),
        icrc_ok: icrc::verify(frame.get(ip_at..)?).is_ok(),
        reth: None,
        aeth: None,
        immdt: None,
        ieth: None,
        atomiceth: None,
        atomicacketh: None,
        deth: None,
        error: None,
    };
    // The RoCE packet runs from the BTH to the end of the UDP datagram (not Ethernet padding).
    let udp_len = udp::Packet::new_checked(frame.get(udp_at..)?).ok()?.len();
    let end = (udp_at + usize::from(udp_len)).min(frame.len());
    match frame.get(bth_at..end).map(RocePacket::parse) {
        Some(Ok(pkt)) => {
            let p = pkt.headers();
            r.reth = p.reth.map(|x| RethFields { va: x.va, rkey: x.rkey, dma_len: x.dma_len });
            r.aeth = p
                .aeth
                .map(|x| AethFields { syndrome: x.syndrome.to_byte().unwrap_or(0xff), msn: x.msn });
            r.immdt = p.imm_dt.map(|x| x.imm);
            r.ieth = p.ieth.map(|x| x.rkey);
            r.atomiceth = p.atomic_eth.map(|x| AtomicEthFields {
                va: x.va,
                rkey: x.rkey,
                swap_add: x.swap_add,
                compare: x.compare,
            });
            r.atomicacketh = p.atomic_ack_eth.map(|x| x.orig_data);
            r.deth = p.deth.map(|x| DethFields { qkey: x.qkey, src_qp: x.src_qp });
        }
        Some(Err(e)) => r.error = Some(e.to_string()),
        None => r.error = Some("bth: past the end of the frame".to_owned()),
    }
    Some(r)
}

/// One line per header with every field (`-v`): the header's `Repr` as parsed by snic-wire.
pub fn layer_details(frame: &[u8], stack: &Stack) -> Vec<String> {
    stack
        .layers()
        .iter()
        .map(|l| format!("{:>12} @{:<4} {}", l.layer.name(), l.offset, layer_detail(frame, l)))
        .collect()
}

fn layer_detail(frame: &[u8], l: &LayerAt) -> String {
    use snic_wire::roce::ext;
    let at = frame.get(usize::from(l.offset)..).unwrap_or_default();
    // Wrap the bytes in the layer's checked view, parse its Repr, show every field.
    macro_rules! show {
        ($view:path, $repr:path) => {
            <$view>::new_checked(at).and_then(|v| <$repr>::parse(&v)).map(|r| format!("{r:?}"))
        };
    }
    let shown = match l.layer {
        Layer::Eth => show!(ethernet::Frame<&[u8]>, ethernet::Repr),
        Layer::Vlan => show!(ethernet::VlanTag<&[u8]>, ethernet::VlanRepr),
        Layer::Arp => show!(snic_wire::arp::Packet<&[u8]>, snic_wire::arp::Repr),
        Layer::Ipv4 => show!(ipv4::Packet<&[u8]>, ipv4::Repr),
        Layer::Ipv6 => show!(ipv6::Packet<&[u8]>, ipv6::Repr),
        Layer::Icmpv4 => show!(snic_wire::icmpv4::Packet<&[u8]>, snic_wire::icmpv4::Repr),
        Layer::Icmpv6 => show!(snic_wire::icmpv6::Packet<&[u8]>, snic_wire::icmpv6::Repr),
        Layer::Udp => show!(udp::Packet<&[u8]>, udp::Repr),
        Layer::Tcp => show!(tcp::Packet<&[u8]>, tcp::Repr),
        Layer::Vxlan => show!(vxlan::Packet<&[u8]>, vxlan::Repr),
        Layer::Geneve => show!(geneve::Packet<&[u8]>, geneve::Repr),
        Layer::Nvgre => show!(snic_wire::gre::Packet<&[u8]>, snic_wire::gre::NvgreRepr),
        Layer::Bth => bth::Header::new_checked(at)
            .and_then(|v| bth::Repr::parse(&v))
            .map(|r| format!("{} {r:?}", snic_wire::roce::opcode::name(r.opcode))),
        Layer::Reth => show!(ext::Reth<&[u8]>, ext::RethRepr),
        Layer::Aeth => show!(ext::Aeth<&[u8]>, ext::AethRepr),
        Layer::AtomicEth => show!(ext::AtomicEth<&[u8]>, ext::AtomicEthRepr),
        Layer::AtomicAckEth => show!(ext::AtomicAckEth<&[u8]>, ext::AtomicAckEthRepr),
        Layer::ImmDt => show!(ext::ImmDt<&[u8]>, ext::ImmDtRepr),
        Layer::Ieth => show!(ext::Ieth<&[u8]>, ext::IethRepr),
        Layer::Deth => show!(ext::Deth<&[u8]>, ext::DethRepr),
        Layer::Feth => show!(ext::Feth<&[u8]>, ext::FethRepr),
        _ => Ok(hex_prefix(at, 16)),
    };
    shown.unwrap_or_else(|e| format!("(unreadable: {e})"))
}

fn hex_prefix(b: &[u8], n: usize) -> String {
    let shown: Vec<String> = b.iter().take(n).map(|x| format!("{x:02x}")).collect();
    format!("bytes {}{}", shown.join(" "), if b.len() > n { " ..." } else { "" })
}

/// The short text line of a report (no `-v`).
pub fn summary_line(r: &Report) -> String {
    let mut s = format!("{:>5} len={:<5} {:<5} {}", r.index, r.len, r.class, r.layers.join("/"));
    if let Some(v) = r.vlan {
        s.push_str(&format!(" vlan={v}"));
    }
    if let Some(v) = r.vni {
        s.push_str(&format!(" vni={v}"));
    }
    if let (Some(a), Some(b)) = (r.src, r.dst) {
        match (r.sport, r.dport) {
            (Some(p), Some(q)) => s.push_str(&format!(" {a}:{p} > {b}:{q}")),
            _ => s.push_str(&format!(" {a} > {b}")),
        }
    }
    if let Some(x) = &r.roce {
        s.push_str(&format!(
            " [{} qp={:#x} psn={}{}{} icrc={}]",
            x.opcode_name,
            x.dest_qp,
            x.psn,
            if x.ack_req { " A" } else { "" },
            if x.se { " SE" } else { "" },
            if x.icrc_ok { "ok" } else { "BAD" }
        ));
    }
    if let Some(e) = &r.error {
        s.push_str(&format!(" ERROR {e}"));
    }
    s
}
