//! Per-packet metadata.

use snic_time::Instant;
use snic_wire::stack::Stack;

/// A port number inside one snic instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PortId(pub u16);

/// Segmentation and checksum-offload state a frame carries (from a virtio-net header on AF_PACKET
/// or TAP ports). Ports that cannot take a super-packet segment it in software.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Offload {
    /// The L4 checksum is partial and must be completed: the sum starts at `csum_start` (from the
    /// frame start) and is stored at `csum_start + csum_offset`.
    pub csum_partial: Option<(u16, u16)>,
    /// This is a super-packet to be segmented into `gso_size`-byte payloads.
    pub gso: Option<Gso>,
}

/// Kind and size of a super-packet's segmentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gso {
    pub kind: GsoKind,
    /// Payload bytes per segment (the MSS for TCP).
    pub size: u16,
    /// Length of all headers up to the L4 payload, as the sender stated it.
    pub hdr_len: u16,
}

/// The segmentation kinds of virtio-net.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GsoKind {
    TcpV4,
    TcpV6,
    UdpL4,
}

/// What the pipeline knows about a packet. Stages fill it in as the packet moves.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    /// Port the packet arrived on.
    pub ingress: PortId,
    /// Port the packet is to leave by, once a stage decided.
    pub egress: Option<PortId>,
    /// When it arrived (the driver's clock).
    pub rx_time: Instant,
    /// Sequence number of the packet on this pipeline, from 1 (for tracing by index).
    pub seq: u64,
    /// Where each parsed layer starts (filled by the parse stage).
    pub stack: Stack,
    /// RSS hash over the (inner where present) 5-tuple.
    pub rss_hash: u32,
    /// Segmentation / checksum offload state.
    pub offload: Offload,
    /// True when this packet's path through the stages is being traced.
    pub trace: bool,
}
