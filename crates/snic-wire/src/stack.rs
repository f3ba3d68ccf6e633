//! Whole-frame parse: walk Ethernet, VLAN tags, ARP/IP, L4, tunnels (VXLAN, Geneve, NVGRE) and
//! the inner frame, and RoCEv2 (BTH and its extension headers), recording where each layer starts.
//!
//! [`Stack::parse`] never allocates and never panics. It stops at the first layer it cannot read
//! and records that layer and the [`Error`] in [`Stack::error`]; the layers before it stay valid,
//! so a caller can still say "an IPv4/UDP packet whose VXLAN header is truncated".
//!
//! Offsets are `u16` from the start of the frame (frames are at most 64 KiB).

use crate::Error;

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
}

impl Layer {
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
            Layer::Bth => "bth",
            Layer::Reth => "reth",
            Layer::Aeth => "aeth",
            Layer::AtomicEth => "atomiceth",
            Layer::AtomicAckEth => "atomicacketh",
            Layer::ImmDt => "immdt",
            Layer::Ieth => "ieth",
            Layer::Deth => "deth",
            Layer::Cnp => "cnp",
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
    /// Offset of the RoCEv2 BTH, when the frame is RoCEv2 (UDP destination port 4791).
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
