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

/// The layers of one [`Stack`], outer to inner, as [`Stack::layers`] lists them. It derefs to
/// a slice of [`LayerAt`].
#[derive(Clone, Copy)]
pub struct Layers {
    items: [LayerAt; MAX_LAYERS],
    len: u8,
}

impl Layers {
    fn push(&mut self, l: LayerAt) {
        // A frame records at most 14 layers (two L2..L4 stacks with two VLAN tags each, a
        // tunnel, a BTH and two extension headers), below `MAX_LAYERS`.
        if let Some(slot) = self.items.get_mut(usize::from(self.len)) {
            *slot = l;
            self.len += 1;
        }
    }
}

impl core::ops::Deref for Layers {
    type Target = [LayerAt];
    fn deref(&self) -> &[LayerAt] {
        &self.items[..usize::from(self.len)]
    }
}

impl core::fmt::Debug for Layers {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Layers {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Layers {}

impl IntoIterator for Layers {
    type Item = LayerAt;
    type IntoIter = core::iter::Take<core::array::IntoIter<LayerAt, MAX_LAYERS>>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter().take(usize::from(self.len))
    }
}

impl<'a> IntoIterator for &'a Layers {
    type Item = &'a LayerAt;
    type IntoIter = core::slice::Iter<'a, LayerAt>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
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

impl Headers {
    /// Visit this frame's layers in order (Ethernet, its VLAN tags, L3, L4); stop and return
    /// true as soon as `f` does.
    fn visit(&self, f: &mut impl FnMut(LayerAt) -> bool) -> bool {
        if let Some(eth) = self.eth {
            if f(LayerAt { layer: Layer::Eth, offset: eth }) {
                return true;
            }
            let mut tag = eth.saturating_add(ethernet::HEADER_LEN as u16);
            for _ in 0..self.vlans {
                if f(LayerAt { layer: Layer::Vlan, offset: tag }) {
                    return true;
                }
                tag = tag.saturating_add(ethernet::VLAN_TAG_LEN as u16);
            }
        }
        [self.l3, self.l4].into_iter().flatten().any(|(layer, offset)| f(LayerAt { layer, offset }))
    }
}

/// The error that stopped a walk, packed into 12 bytes (an [`Error`] is 24: two `usize`s or a
/// `&'static str`). Lengths are frame offsets and header fields, far below `u32::MAX` (larger
/// ones are stored as `u32::MAX`); `BadValue` field names are an index into [`FIELDS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PackedError {
    layer: Layer,
    kind: u8,
    a: u32,
    b: u32,
}

/// Every field name a parser of this crate reports in `Error::BadValue` (a test checks that the
/// crate's sources name no other). The last is for a name not in the list.
const FIELDS: [&str; 34] = [
    "aeth.msn",
    "aeth.nak_code",
    "aeth.syndrome",
    "arp.hlen",
    "arp.htype",
    "arp.plen",
    "arp.ptype",
    "bth.dest_qp",
    "bth.pad_count",
    "bth.psn",
    "deth.src_qp",
    "feth.placement_type",
    "feth.selectivity_level",
    "geneve.options",
    "geneve.vni",
    "hop_by_hop",
    "ip.fragment",
    "ip.protocol",
    "ipv6.next_header",
    "ndisc.code",
    "ndisc.target",
    "nvgre.protocol",
    "nvgre.vsid",
    "offset",
    "roce.aeth",
    "roce.atomic_ack_eth",
    "roce.atomic_eth",
    "roce.deth",
    "roce.feth",
    "roce.ieth",
    "roce.imm_dt",
    "roce.reth",
    "vxlan.vni",
    "(unknown,
    field)",
];

fn narrow(x: usize) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

impl PackedError {
    fn pack(layer: Layer, e: Error) -> PackedError {
        let (kind, a, b) = match e {
            Error::Truncated { need, got } => (0, narrow(need), narrow(got)),
            Error::BadVersion { got } => (1, u32::from(got), 0),
            Error::BadHeaderLen { got } => (2, narrow(got), 0),
            Error::BadTotalLen { got } => (3, narrow(got), 0),
            Error::BadChecksum => (4, 0, 0),
            Error::BadIcrc { expected, got } => (5, expected, got),
            Error::BadOpcode { got } => (6, u32::from(got), 0),
            Error::BadOption => (7, 0, 0),
            Error::BadFlags => (8, 0, 0),
            Error::TooManyHeaders => (9, 0, 0),
            Error::BadValue { field } => {
                let i = FIELDS.iter().position(|&n| n == field).unwrap_or(FIELDS.len() - 1);
                (10, i as u32, 0)
            }
        };
        PackedError { layer, kind, a, b }
    }

    fn unpack(self) -> (Layer, Error) {
        let (a, b) = (self.a, self.b);
        let e = match self.kind {
            0 => Error::Truncated { need: a as usize, got: b as usize },
            1 => Error::BadVersion { got: a as u8 },
            2 => Error::BadHeaderLen { got: a as usize },
            3 => Error::BadTotalLen { got: a as usize },
            4 => Error::BadChecksum,
            5 => Error::BadIcrc { expected: a, got: b },
            6 => Error::BadOpcode { got: a as u8 },
            7 => Error::BadOption,
            8 => Error::BadFlags,
            9 => Error::TooManyHeaders,
            _ => Error::BadValue { field: FIELDS.get(a as usize).copied().unwrap_or("") },
        };
        (self.layer, e)
    }
}

/// The result of walking a frame.
///
/// Kept small (80 bytes): it rides in every packet's metadata. The layer list is not stored:
/// [`Stack::layers`] rebuilds it from the headers' offsets (the walk records layers in a fixed
/// order: outer L2..L4, tunnel, inner L2..L4, RoCE), and the error is packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stack {
    /// The outer frame's headers.
    pub outer: Headers,
    /// The inner frame's headers, for tunnelled packets.
    pub inner: Option<Headers>,
    /// The tunnel header (VXLAN, Geneve, NVGRE) and its offset, when there is one.
    pub tunnel: Option<(Layer, u16)>,
    /// Virtual network ID of the tunnel (VXLAN VNI, Geneve VNI, NVGRE VSID).
    pub vni: Option<u32>,
    /// Offset of the RoCEv2 BTH, when the frame is a well-formed RoCEv2 packet (UDP destination
    /// port 4791): `Some` only when the BTH, every extension header its opcode implies and the
    /// payload/pad/ICRC length rules all checked out. A RoCE packet that failed to parse leaves
    /// it `None` (its layers that did parse are still in [`Stack::layers`], and the failure in
    /// [`Stack::error`]). The ICRC itself is not checked: see [`Stack::verify_icrc`].
    pub bth: Option<u16>,
    /// Offset of the first byte after the last parsed header.
    pub payload: u16,
    /// Where the walk recorded a BTH (also when the RoCE packet then failed); 0 for none (a
    /// BTH never starts a frame).
    roce_at: u16,
    /// The extension headers recorded after that BTH, in order.
    roce_ext: [Option<ExtHeader>; roce::packet::MAX_EXT],
    error: Option<PackedError>,
}

impl Stack {
    /// The layers that parsed, outer to inner.
    pub fn layers(&self) -> Layers {
        let mut out =
            Layers { items: [LayerAt { layer: Layer::Eth, offset: 0 }; MAX_LAYERS], len: 0 };
        self.visit(|l| {
            out.push(l);
            false
        });
        out
    }

    /// Visit the recorded layers outer to inner; stop and return true as soon as `f` does.
    fn visit(&self, mut f: impl FnMut(LayerAt) -> bool) -> bool {
        if self.outer.visit(&mut f) {
            return true;
        }
        if let Some((layer, offset)) = self.tunnel
            && f(LayerAt { layer, offset })
        {
            return true;
        }
        if let Some(inner) = &self.inner
            && inner.visit(&mut f)
        {
            return true;
        }
        if self.roce_at == 0 {
            return false;
        }
        if f(LayerAt { layer: Layer::Bth, offset: self.roce_at }) {
            return true;
        }
        let mut at_ = self.roce_at.saturating_add(roce::bth::HEADER_LEN as u16);
        for e in self.roce_ext.into_iter().flatten() {
            if f(LayerAt { layer: ext_layer(e), offset: at_ }) {
                return true;
            }
            at_ = at_.saturating_add(e.header_len() as u16);
        }
        false
    }

    /// Offset of the first (outermost) layer of this kind.
    pub fn find(&self, layer: Layer) -> Option<u16> {
        let mut found = None;
        self.visit(|l| {
            found = Some(l.offset).filter(|_| l.layer == layer);
            found.is_some()
        });
        found
    }

    /// Offset of the last (innermost) layer of this kind.
    pub fn find_last(&self, layer: Layer) -> Option<u16> {
        let mut found = None;
        self.visit(|l| {
            if l.layer == layer {
                found = Some(l.offset);
            }
            false
        });
        found
    }

    /// The innermost frame's headers: the inner frame of a tunnel, else the outer frame.
    pub fn innermost(&self) -> &Headers {
        self.inner.as_ref().unwrap_or(&self.outer)
    }

    /// True when every byte the frame announced was understood.
    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }

    /// The layer that could not be read and why; `None` when the whole frame parsed.
    pub fn error(&self) -> Option<(Layer, Error)> {
        self.error.map(PackedError::unpack)
    }

    /// Set (or clear) the error [`Stack::error`] reports.
    pub fn set_error(&mut self, error: Option<(Layer, Error)>) {
        self.error = error.map(|(l, e)| PackedError::pack(l, e));
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
        if let Err((layer, e)) = s.walk_l2(frame, 0, frame.len(), false) {
            s.set_error(Some((layer, e)));
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
        if let Some((layer, e)) = self.error()
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

    /// Check that `layer` at `offset`..`end` lies within 64 KiB and move `payload` to `end` (the
    /// first byte after it). Returns the offset as stored; the caller records it (in a
    /// [`Headers`], the tunnel or the RoCE fields). `Err(BadValue { field: "offset" })` past
    /// 64 KiB.
    fn record(&mut self, layer: Layer, offset: usize, end: usize) -> Result<u16, Fail> {
        let bad = || (layer, Error::BadValue { field: "offset" });
        let end = u16::try_from(end).map_err(|_| bad())?;
        let offset = u16::try_from(offset).map_err(|_| bad())?;
        self.payload = end;
        Ok(offset)
    }

    /// Record the RoCE extension header `e` at `off` (after the BTH and those before it).
    fn record_ext(&mut self, e: ExtHeader, off: usize) -> Result<(), Fail> {
        self.record(ext_layer(e), off, off + e.header_len())?;
        if let Some(slot) = self.roce_ext.iter_mut().find(|s| s.is_none()) {
            *slot = Some(e);
        }
        Ok(())
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
            // Recorded by counting it: tag `i` is at `eth + 14 + 4 i`.
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
                self.roce_at = o;
                // The extension headers follow the BTH back to back (the offsets `layers`
                // rebuilds from their lengths).
                for &(e, at_) in p.ext_headers() {
                    self.record_ext(e, off + usize::from(at_))?;
                }
                self.bth = Some(o);
                Ok(())
            }
            Err(WalkError { info, parsed, ext, error }) => {
                if let Some(info) = info {
                    let mut at_ = off + roce::bth::HEADER_LEN;
                    self.roce_at = self.record(Layer::Bth, off, at_)?;
                    for &e in info.ext.iter().take(parsed.min(roce::packet::MAX_EXT)) {
                        self.record_ext(e, at_)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `BadValue` field name in this crate's sources (`field: "..."`, `check_u24(_, "...")`
    /// and the `"roce.*"` names of `RoceRepr`) is in [`FIELDS`], so a packed error unpacks to
    /// the error the walk met.
    #[test]
    fn packed_error_knows_every_field_name() {
        fn scan(dir: &std::path::Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    scan(&p, out);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    let text = std::fs::read_to_string(&p).unwrap();
                    for (pat, prefix, nth) in
                        [("field: \"", "", 0), ("check_u24(", "", 1), ("\"roce.", "roce.", 0)]
                    {
                        for (i, _) in text.match_indices(pat) {
                            let rest = &text[i + pat.len()..];
                            // Only a call's literal argument (not `fn check_u24(..`).
                            let same_line =
                                rest.split('"').next().is_some_and(|x| !x.contains('\n'));
                            if let Some(n) = rest.split('"').nth(nth).filter(|_| same_line) {
                                out.push(format!("{prefix}{n}"));
                            }
                        }
                    }
                }
            }
        }
        let mut names = Vec::new();
        scan(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut names);
        assert!(names.len() > 20, "found the names: {names:?}");
        for n in names {
            // "x" is error.rs's own test value; names that are not field names (`"..."` and
            // `"roce.<hdr>"` in comments, this test's own patterns) are skipped.
            let field_like =
                n.bytes().all(|b| b.is_ascii_lowercase() || b"0123456789_.".contains(&b));
            if n == "x" || !field_like || n.ends_with('.') {
                continue;
            }
            assert!(FIELDS.contains(&n.as_str()), "{n:?} is missing from FIELDS");
        }
    }

    #[test]
    fn errors_round_trip_through_the_packed_form() {
        let all = [
            Error::Truncated { need: 70_000, got: 65_535 },
            Error::BadVersion { got: 6 },
            Error::BadHeaderLen { got: 4 },
            Error::BadTotalLen { got: 9 },
            Error::BadChecksum,
            Error::BadIcrc { expected: 0xdead_beef, got: 1 },
            Error::BadOpcode { got: 0x15 },
            Error::BadOption,
            Error::BadFlags,
            Error::TooManyHeaders,
            Error::BadValue { field: "ipv6.next_header" },
            Error::BadValue { field: "aeth.syndrome" },
        ];
        for e in all {
            let mut s = Stack::default();
            s.set_error(Some((Layer::Udp, e)));
            assert_eq!(s.error(), Some((Layer::Udp, e)));
        }
    }

    /// The stack rides in every packet's metadata (issue 18): 80 bytes, from 160.
    #[test]
    fn stack_stays_small() {
        assert!(core::mem::size_of::<Stack>() <= 80, "{}", core::mem::size_of::<Stack>());
    }
}
