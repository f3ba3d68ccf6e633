//! Whole-frame parse: walk Ethernet, VLAN tags, ARP/IP, L4, tunnels (VXLAN, Geneve, NVGRE) and
//! the inner frame, and RoCEv2 (BTH and its extension headers), recording where each layer starts.
//!
//! [`Stack::parse`] never allocates and never panics. It stops at the first layer it cannot read
//! and records that layer and the [`Error`] in [`Stack::error`]; the layers before it stay valid,
//! so a caller can still say "an IPv4/UDP packet whose VXLAN header is truncated".
//!
//! Offsets are `u16` from the start of the frame (frames are at most 64 KiB).

use crate::ethernet::EtherType;
use crate::ipv4::IpProtocol;
use crate::roce::packet::WalkError;
use crate::roce::{self, ExtHeader, RocePacket, icrc};
use crate::{Error, arp, ethernet, geneve, gre, icmpv4, icmpv6, ipv4, ipv6, tcp, udp, vxlan};

/// The most layers one frame records (outer L2..L4, tunnel, inner L2..L4, RoCE headers).
pub const MAX_LAYERS: usize = 16;

/// One kind of header. `name()` is the lower-case name used in JSON output and traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Layer {
    Eth,
    Vlan,
    Arp,
    Ipv4,
    Ipv6,
    Icmpv4,
    Icmpv6,
    Udp,
    Tcp,
    Vxlan,
    Geneve,
    Nvgre,
    /// A GRE header that is not NVGRE (plain GRE carrying IP, or Ethernet without a key).
    Gre,
    Bth,
    Reth,
    Aeth,
    AtomicEth,
    AtomicAckEth,
    ImmDt,
    Ieth,
    Deth,
    /// A RoCEv2 CNP (BTH opcode 0x81): its 16 reserved bytes.
    Cnp,
    /// The FLUSH extended transport header (RC FLUSH, IBTA 1.5).
    Feth,
}

impl Layer {
    /// Every layer kind, in the order of the enum (for parsers of layer names).
    pub const ALL: [Layer; 23] = [
        Layer::Eth,
        Layer::Vlan,
        Layer::Arp,
        Layer::Ipv4,
        Layer::Ipv6,
        Layer::Icmpv4,
        Layer::Icmpv6,
        Layer::Udp,
        Layer::Tcp,
        Layer::Vxlan,
        Layer::Geneve,
        Layer::Nvgre,
        Layer::Gre,
        Layer::Bth,
        Layer::Reth,
        Layer::Aeth,
        Layer::AtomicEth,
        Layer::AtomicAckEth,
        Layer::ImmDt,
        Layer::Ieth,
        Layer::Deth,
        Layer::Cnp,
        Layer::Feth,
    ];

    /// The layer called `name`, as [`Layer::name`] spells it.
    pub fn from_name(name: &str) -> Option<Layer> {
        Layer::ALL.into_iter().find(|l| l.name() == name)
    }

    /// Lower-case name: `"eth"`, `"vlan"`, `"ipv4"`, `"udp"`, `"vxlan"`, `"bth"`, `"reth"`, ...
    pub const fn name(self) -> &'static str {
        match self {
            Layer::Eth => "eth",
            Layer::Vlan => "vlan",
            Layer::Arp => "arp",
            Layer::Ipv4 => "ipv4",
            Layer::Ipv6 => "ipv6",
            Layer::Icmpv4 => "icmp",
            Layer::Icmpv6 => "icmpv6",
            Layer::Udp => "udp",
            Layer::Tcp => "tcp",
            Layer::Vxlan => "vxlan",
            Layer::Geneve => "geneve",
            Layer::Nvgre => "nvgre",
            Layer::Gre => "gre",
            Layer::Bth => "bth",
            Layer::Reth => "reth",
            Layer::Aeth => "aeth",
            Layer::AtomicEth => "atomiceth",
            Layer::AtomicAckEth => "atomicacketh",
            Layer::ImmDt => "immdt",
            Layer::Ieth => "ieth",
            Layer::Deth => "deth",
            Layer::Cnp => "cnp",
            Layer::Feth => "feth",
        }
    }
}

/// Where one header starts in the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerAt {
    pub layer: Layer,
    pub offset: u16,
}

/// Offsets of the L2/L3/L4 headers of one (outer or inner) frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Headers {
    /// Ethernet header.
    pub eth: Option<u16>,
    /// Number of VLAN tags (0, 1 or 2 for QinQ).
    pub vlans: u8,
    /// Outermost VLAN ID, when tagged.
    pub vlan_id: Option<u16>,
    /// EtherType after the VLAN tags.
    pub ethertype: u16,
    /// L3 header (IPv4, IPv6 or ARP) and its kind.
    pub l3: Option<(Layer, u16)>,
    /// L4 header (UDP, TCP, ICMP, ICMPv6) and its kind. For IPv6, after extension headers.
    pub l4: Option<(Layer, u16)>,
    /// IP protocol / IPv6 final next-header value, when there is an IP header.
    pub ip_proto: Option<u8>,
}

/// The result of walking a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stack {
    layers: [LayerAt; MAX_LAYERS],
    len: u8,
    /// The outer frame's headers.
    pub outer: Headers,
    /// The tunnel header (VXLAN, Geneve, NVGRE) and its offset, when there is one.
    pub tunnel: Option<(Layer, u16)>,
    /// Virtual network ID of the tunnel (VXLAN VNI, Geneve VNI, NVGRE VSID).
    pub vni: Option<u32>,
    /// The inner frame's headers, for tunnelled packets.
    pub inner: Option<Headers>,
    /// Offset of the RoCEv2 BTH, when the frame is a well-formed RoCEv2 packet (UDP destination
    /// port 4791): `Some` only when the BTH, every extension header its opcode implies and the
    /// payload/pad/ICRC length rules all checked out. A RoCE packet that failed to parse leaves
    /// it `None` (its layers that did parse are still in [`Stack::layers`], and the failure in
    /// [`Stack::error`]). The ICRC itself is not checked: see [`Stack::verify_icrc`].
    pub bth: Option<u16>,
    /// Offset of the first byte after the last parsed header.
    pub payload: u16,
    /// The layer that could not be read and why; `None` when the whole frame parsed.
    pub error: Option<(Layer, Error)>,
}

impl Default for Stack {
    fn default() -> Self {
        Stack {
            layers: [LayerAt { layer: Layer::Eth, offset: 0 }; MAX_LAYERS],
            len: 0,
            outer: Headers::default(),
            tunnel: None,
            vni: None,
            inner: None,
            bth: None,
            payload: 0,
            error: None,
        }
    }
}

impl Stack {
    /// The layers that parsed, outer to inner.
    pub fn layers(&self) -> &[LayerAt] {
        &self.layers[..usize::from(self.len)]
    }

    /// Offset of the first (outermost) layer of this kind.
    pub fn find(&self, layer: Layer) -> Option<u16> {
        self.layers().iter().find(|l| l.layer == layer).map(|l| l.offset)
    }

    /// Offset of the last (innermost) layer of this kind.
    pub fn find_last(&self, layer: Layer) -> Option<u16> {
        self.layers().iter().rev().find(|l| l.layer == layer).map(|l| l.offset)
    }

    /// The innermost frame's headers: the inner frame of a tunnel, else the outer frame.
    pub fn innermost(&self) -> &Headers {
        self.inner.as_ref().unwrap_or(&self.outer)
    }

    /// True when every byte the frame announced was understood.
    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }

    /// Record a layer. Returns `Err(TooManyHeaders)` past [`MAX_LAYERS`].
    pub(crate) fn push(&mut self, layer: Layer, offset: usize) -> Result<(), Error> {
        let offset = u16::try_from(offset).map_err(|_| Error::BadValue { field: "offset" })?;
        let i = usize::from(self.len);
        if i >= MAX_LAYERS {
            return Err(Error::TooManyHeaders);
        }
        self.layers[i] = LayerAt { layer, offset };
        self.len += 1;
        Ok(())
    }
}

/// Walk a whole frame; same as [`Stack::parse`].
pub fn parse(frame: &[u8]) -> Stack {
    Stack::parse(frame)
}

/// A failed layer and why.
type Fail = (Layer, Error);

/// Tag an error with the layer it happened at. `base` is the frame offset of the slice the
/// failing parser saw: its `Truncated { need, got }` are made frame-absolute.
fn at(layer: Layer, base: usize) -> impl Fn(Error) -> Fail {
    move |e| match e {
        Error::Truncated { need, got } => {
            (layer, Error::Truncated { need: need + base, got: got + base })
        }
        e => (layer, e),
    }
}

/// `frame[start..end]`, or `Truncated` when the frame is shorter than `end` or `start > end`
/// (the walk's length checks rule both out; this keeps a slip from becoming a panic).
fn slice(frame: &[u8], start: usize, end: usize) -> Result<&[u8], Error> {
    frame.get(start..end).ok_or(Error::Truncated { need: end.max(start), got: frame.len() })
}

impl Stack {
    /// Walk a whole frame: Ethernet, up to 2 VLAN tags, ARP/IPv4/IPv6 (IPv6 extension headers
    /// skipped), ICMP/ICMPv6/UDP/TCP; one level of tunnel (VXLAN on UDP 4789, Geneve on UDP 6081,
    /// GRE/NVGRE on IP protocol 47) and the inner frame behind it; RoCEv2 on UDP 4791 (BTH and
    /// the extension headers its opcode implies, outer or inner).
    ///
    /// Never fails and never panics: the first layer that cannot be read is recorded in
    /// [`Stack::error`] with why, and everything before it stays valid. Lengths are bounded by
    /// the IP total/payload length and the UDP length, so Ethernet padding is never parsed as a
    /// header. IP fragments stop the walk after the IP header (their L4 header is absent or
    /// incomplete). A tunnel inside the inner frame is left as payload. For RoCEv2 the last 4
    /// bytes of the UDP payload are the ICRC and the headers must fit before them; [`Stack::bth`]
    /// is set only when the whole RoCE packet parsed. The ICRC itself is not checked here (see
    /// [`Stack::verify_icrc`]).
    pub fn parse(frame: &[u8]) -> Stack {
        let mut s = Stack::default();
        if let Err(fail) = s.walk_l2(frame, 0, frame.len(), false) {
            s.error = Some(fail);
        }
        s
    }

    /// Verify the RoCEv2 ICRC of a frame this stack was parsed from.
    ///
    /// - `None` when the frame is not RoCEv2: no UDP datagram to port 4791 was found.
    /// - `Some(Err(e))` when it is (UDP destination port 4791) but the RoCE headers did not
    ///   parse: `e` is the error in [`Stack::error`] (the ICRC of a packet whose headers are
    ///   malformed is not evidence of anything).
    /// - `Some(Err(BadValue { field: "ipv6.next_header" }))` for RoCEv2 over IPv6 with
    ///   extension headers between the IPv6 header and UDP: [`icrc`] does not model which of
    ///   those bytes the ICRC would cover (rxe never sends such packets), so it cannot be
    ///   verified. This is an error rather than `None` because the packet *is* RoCEv2: a
    ///   classifier that enforces the ICRC must not be bypassed by inserting an extension
    ///   header.
    /// - Otherwise the result of [`icrc::verify`] over the IP header that carries the UDP
    ///   datagram (the innermost one; RoCE is not walked inside RoCE).
    pub fn verify_icrc(&self, frame: &[u8]) -> Option<Result<(), Error>> {
        if let Some((layer, e)) = self.error
            && is_roce_layer(layer)
        {
            return Some(Err(e));
        }
        self.bth?;
        let (_, l3) = self.innermost().l3?;
        let ip = frame.get(usize::from(l3)..)?;
        Some(icrc::verify(ip))
    }

    fn headers(&mut self, inner: bool) -> &mut Headers {
        if inner { self.inner.get_or_insert_with(Headers::default) } else { &mut self.outer }
    }

    /// Record `layer` at `offset` and move `payload` to `end` (the first byte after it).
    /// Returns the offset as stored. `Err(BadValue { field: "offset" })` past 64 KiB.
    fn record(&mut self, layer: Layer, offset: usize, end: usize) -> Result<u16, Fail> {
        let end = u16::try_from(end).map_err(|_| (layer, Error::BadValue { field: "offset" }))?;
        self.push(layer, offset).map_err(at(layer, 0))?;
        self.payload = end;
        // `push` succeeded, so `offset` fits.
        Ok(offset as u16)
    }

    /// Ethernet at `off`, the frame ending at `end`.
    fn walk_l2(&mut self, frame: &[u8], off: usize, end: usize, inner: bool) -> Result<(), Fail> {
        let bytes = slice(frame, off, end).map_err(at(Layer::Eth, 0))?;
        let eth = ethernet::Frame::new_checked(bytes).map_err(at(Layer::Eth, off))?;
        let tags_at = off + ethernet::HEADER_LEN;
        let o = self.record(Layer::Eth, off, tags_at)?;
        self.headers(inner).eth = Some(o);
        self.headers(inner).ethertype = eth.ethertype().0;
        // One tag at a time, so that the complete tags before a cut or a third tag stay
        // recorded (with the outer VLAN id), like every other layer before a failing one.
        let mut ethertype = eth.ethertype();
        let mut tag_at = tags_at;
        while ethertype.is_vlan() {
            if usize::from(self.headers(inner).vlans) >= ethernet::MAX_VLAN_TAGS {
                return Err((Layer::Vlan, Error::TooManyHeaders));
            }
            let rest = slice(frame, tag_at.min(end), end).map_err(at(Layer::Vlan, 0))?;
            let tag = ethernet::VlanTag::new_checked(rest)
                .and_then(|t| ethernet::VlanRepr::parse(&t))
                .map_err(at(Layer::Vlan, tag_at))?;
            self.record(Layer::Vlan, tag_at, tag_at + ethernet::VLAN_TAG_LEN)?;
            let h = self.headers(inner);
            if h.vlans == 0 {
                h.vlan_id = Some(tag.vid);
            }
            h.vlans += 1;
            ethertype = tag.ethertype;
            tag_at += ethernet::VLAN_TAG_LEN;
        }
        self.headers(inner).ethertype = ethertype.0;
        self.walk_l3(frame, ethertype.0, tag_at, end, inner)
    }

    /// The L3 header of kind `ethertype` at `off`, the frame ending at `end`.
    fn walk_l3(
        &mut self,
        frame: &[u8],
        ethertype: u16,
        off: usize,
        end: usize,
        inner: bool,
    ) -> Result<(), Fail> {
        match EtherType(ethertype) {
            EtherType::IPV4 => {
                let bytes = slice(frame, off, end).map_err(at(Layer::Ipv4, 0))?;
                let ip = ipv4::Packet::new_checked(bytes).map_err(at(Layer::Ipv4, off))?;
                let l4 = off + ip.header_len();
                let o = self.record(Layer::Ipv4, off, l4)?;
                let proto = ip.protocol().0;
                let h = self.headers(inner);
                h.l3 = Some((Layer::Ipv4, o));
                h.ip_proto = Some(proto);
                if ip.is_fragment() {
                    return Ok(());
                }
                self.walk_l4(frame, proto, l4, off + usize::from(ip.total_len()), inner)
            }
            EtherType::IPV6 => {
                let bytes = slice(frame, off, end).map_err(at(Layer::Ipv6, 0))?;
                let ip = ipv6::Packet::new_checked(bytes).map_err(at(Layer::Ipv6, off))?;
                let ip_end = off + ipv6::HEADER_LEN + usize::from(ip.payload_len());
                let o = self.record(Layer::Ipv6, off, off + ipv6::HEADER_LEN)?;
                self.headers(inner).l3 = Some((Layer::Ipv6, o));
                let exts = ip.extensions().map_err(at(Layer::Ipv6, off + ipv6::HEADER_LEN))?;
                let l4 = off + ipv6::HEADER_LEN + exts.offset;
                self.payload = u16::try_from(l4)
                    .map_err(|_| (Layer::Ipv6, Error::BadValue { field: "offset" }))?;
                self.headers(inner).ip_proto = Some(exts.next_header.0);
                // An atomic fragment (offset 0, M clear: RFC 6946) is a whole datagram.
                if exts.fragment.is_some_and(|f| f.offset != 0 || f.more) {
                    return Ok(());
                }
                self.walk_l4(frame, exts.next_header.0, l4, ip_end, inner)
            }
            EtherType::ARP => {
                let bytes = slice(frame, off, end).map_err(at(Layer::Arp, 0))?;
                let a = arp::Packet::new_checked(bytes).map_err(at(Layer::Arp, off))?;
                arp::Repr::parse(&a).map_err(at(Layer::Arp, off))?;
                let o = self.record(Layer::Arp, off, off + a.header_len())?;
                self.headers(inner).l3 = Some((Layer::Arp, o));
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The L4 header (IP protocol `proto`) at `off`, the IP payload ending at `end`.
    fn walk_l4(
        &mut self,
        frame: &[u8],
        proto: u8,
        off: usize,
        end: usize,
        inner: bool,
    ) -> Result<(), Fail> {
        let v6 = matches!(self.headers(inner).l3, Some((Layer::Ipv6, _)));
        match IpProtocol(proto) {
            IpProtocol::TCP => {
                let bytes = slice(frame, off, end).map_err(at(Layer::Tcp, 0))?;
                let t = tcp::Packet::new_checked(bytes).map_err(at(Layer::Tcp, off))?;
                let o = self.record(Layer::Tcp, off, off + t.header_len())?;
                self.headers(inner).l4 = Some((Layer::Tcp, o));
                Ok(())
            }
            IpProtocol::ICMP if !v6 => {
                let bytes = slice(frame, off, end).map_err(at(Layer::Icmpv4, 0))?;
                icmpv4::Packet::new_checked(bytes).map_err(at(Layer::Icmpv4, off))?;
                let o = self.record(Layer::Icmpv4, off, off + icmpv4::HEADER_LEN)?;
                self.headers(inner).l4 = Some((Layer::Icmpv4, o));
                Ok(())
            }
            IpProtocol::ICMPV6 if v6 => {
                let bytes = slice(frame, off, end).map_err(at(Layer::Icmpv6, 0))?;
                icmpv6::Packet::new_checked(bytes).map_err(at(Layer::Icmpv6, off))?;
                let o = self.record(Layer::Icmpv6, off, off + icmpv6::HEADER_LEN)?;
                self.headers(inner).l4 = Some((Layer::Icmpv6, o));
                Ok(())
            }
            IpProtocol::UDP => {
                let bytes = slice(frame, off, end).map_err(at(Layer::Udp, 0))?;
                let u = udp::Packet::new_checked(bytes).map_err(at(Layer::Udp, off))?;
                let body = off + udp::HEADER_LEN;
                let udp_end = off + usize::from(u.len());
                let o = self.record(Layer::Udp, off, body)?;
                self.headers(inner).l4 = Some((Layer::Udp, o));
                match u.dst_port() {
                    vxlan::UDP_PORT if !inner => self.walk_vxlan(frame, body, udp_end),
                    geneve::UDP_PORT if !inner => self.walk_geneve(frame, body, udp_end),
                    roce::UDP_PORT => self.walk_roce(frame, body, udp_end),
                    _ => Ok(()),
                }
            }
            IpProtocol::GRE if !inner => self.walk_gre(frame, off, end),
            _ => Ok(()),
        }
    }

    fn walk_vxlan(&mut self, frame: &[u8], off: usize, end: usize) -> Result<(), Fail> {
        let bytes = slice(frame, off, end).map_err(at(Layer::Vxlan, 0))?;
        let p = vxlan::Packet::new_checked(bytes).map_err(at(Layer::Vxlan, off))?;
        let r = vxlan::Repr::parse(&p).map_err(at(Layer::Vxlan, off))?;
        let o = self.record(Layer::Vxlan, off, off + vxlan::HEADER_LEN)?;
        self.tunnel = Some((Layer::Vxlan, o));
        self.vni = Some(r.vni);
        self.walk_l2(frame, off + vxlan::HEADER_LEN, end, true)
    }

    fn walk_geneve(&mut self, frame: &[u8], off: usize, end: usize) -> Result<(), Fail> {
        let bytes = slice(frame, off, end).map_err(at(Layer::Geneve, 0))?;
        let p = geneve::Packet::new_checked(bytes).map_err(at(Layer::Geneve, off))?;
        let r = geneve::Repr::parse(&p).map_err(at(Layer::Geneve, off))?;
        let body = off + p.header_len();
        let o = self.record(Layer::Geneve, off, body)?;
        self.tunnel = Some((Layer::Geneve, o));
        self.vni = Some(r.vni);
        self.walk_tunnel_payload(frame, r.protocol, body, end)
    }

    fn walk_gre(&mut self, frame: &[u8], off: usize, end: usize) -> Result<(), Fail> {
        let bytes = slice(frame, off, end).map_err(at(Layer::Gre, 0))?;
        let p = gre::Packet::new_checked(bytes).map_err(at(Layer::Gre, off))?;
        let r = gre::Repr::parse(&p).map_err(at(Layer::Gre, off))?;
        let body = off + p.header_len();
        if let Ok(nv) = gre::NvgreRepr::from_gre(&r) {
            let o = self.record(Layer::Nvgre, off, body)?;
            self.tunnel = Some((Layer::Nvgre, o));
            self.vni = Some(nv.vsid);
        } else {
            let o = self.record(Layer::Gre, off, body)?;
            self.tunnel = Some((Layer::Gre, o));
        }
        self.walk_tunnel_payload(frame, r.protocol, body, end)
    }

    /// What a Geneve or GRE header carries: Ethernet (0x6558) or IP directly (an inner frame
    /// without an Ethernet header); anything else is left as payload.
    fn walk_tunnel_payload(
        &mut self,
        frame: &[u8],
        protocol: u16,
        off: usize,
        end: usize,
    ) -> Result<(), Fail> {
        match EtherType(protocol) {
            EtherType::TEB => self.walk_l2(frame, off, end, true),
            EtherType::IPV4 | EtherType::IPV6 => {
                self.headers(true).ethertype = protocol;
                self.walk_l3(frame, protocol, off, end, true)
            }
            _ => Ok(()),
        }
    }

    /// RoCEv2 from the BTH at `off` to the end of the ICRC at `end` (the UDP length), parsed
    /// once by [`RocePacket`]: the last 4 bytes are the ICRC, the headers must fit before them.
    /// `bth` is set only when the whole RoCE packet parsed; on failure the layers that did
    /// parse are recorded and the error is tagged with the header that failed.
    fn walk_roce(&mut self, frame: &[u8], off: usize, end: usize) -> Result<(), Fail> {
        let bytes = slice(frame, off, end).map_err(at(Layer::Bth, 0))?;
        match RocePacket::walk(bytes) {
            Ok(p) => {
                let o = self.record(Layer::Bth, off, off + roce::bth::HEADER_LEN)?;
                for &(e, at_) in p.ext_headers() {
                    let at_ = off + usize::from(at_);
                    self.record(ext_layer(e), at_, at_ + e.header_len())?;
                }
                self.bth = Some(o);
                Ok(())
            }
            Err(WalkError { info, parsed, ext, error }) => {
                if let Some(info) = info {
                    let mut at_ = off + roce::bth::HEADER_LEN;
                    self.record(Layer::Bth, off, at_)?;
                    for &e in info.ext.iter().take(parsed) {
                        self.record(ext_layer(e), at_, at_ + e.header_len())?;
                        at_ += e.header_len();
                    }
                }
                let layer = ext.map_or(Layer::Bth, ext_layer);
                Err(at(layer, off)(error))
            }
        }
    }
}

/// The layer of a RoCE extension header.
const fn ext_layer(e: ExtHeader) -> Layer {
    match e {
        ExtHeader::Reth => Layer::Reth,
        ExtHeader::Aeth => Layer::Aeth,
        ExtHeader::AtomicEth => Layer::AtomicEth,
        ExtHeader::AtomicAckEth => Layer::AtomicAckEth,
        ExtHeader::ImmDt => Layer::ImmDt,
        ExtHeader::Ieth => Layer::Ieth,
        ExtHeader::Deth => Layer::Deth,
        ExtHeader::Cnp => Layer::Cnp,
        ExtHeader::Feth => Layer::Feth,
    }
}

/// True for the layers a RoCEv2 walk records (BTH and extension headers).
const fn is_roce_layer(layer: Layer) -> bool {
    matches!(
        layer,
        Layer::Bth
            | Layer::Reth
            | Layer::Aeth
            | Layer::AtomicEth
            | Layer::AtomicAckEth
            | Layer::ImmDt
            | Layer::Ieth
            | Layer::Deth
            | Layer::Cnp
            | Layer::Feth
    )
}
