//! Per-packet metadata.

use crate::PacketBuf;
use core::net::IpAddr;
use snic_time::Instant;
use snic_wire::stack::Stack;

/// A port number inside one snic instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PortId(pub u16);

impl PortId {
    /// Reserved egress meaning "flood": send to every port except the ingress port. The I/O
    /// layer fans such a packet out (copying it per port); no real port has this number.
    pub const FLOOD: PortId = PortId(u16::MAX);

    /// Reserved egress meaning "the device itself": the packet is for the NIC (its RoCE
    /// engine, its neighbour responder), not for a port. The pipeline takes such a packet out
    /// of the batch right after the stage that chose it, so later stages never see it, and
    /// counts it in that stage's `local`; the driver collects it with
    /// [`crate::Pipeline::take_local`].
    pub const LOCAL: PortId = PortId(u16::MAX - 1);

    /// True for [`PortId::FLOOD`].
    pub const fn is_flood(self) -> bool {
        self.0 == u16::MAX
    }

    /// True for [`PortId::LOCAL`].
    pub const fn is_local(self) -> bool {
        self.0 == u16::MAX - 1
    }
}

/// What kind of traffic a packet is, after the classify stage (RecoNIC's packet classification).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// Not classified yet.
    #[default]
    Unclassified,
    /// RoCEv2 RDMA traffic: UDP destination port 4791 with a valid BTH of a reliable-connection
    /// opcode. It goes to the RDMA engine.
    Rdma,
    /// Everything else. It goes to the host network queues (or the vSwitch).
    Other,
}

impl Class {
    /// Lower-case name: `"unclassified"`, `"rdma"`, `"other"`.
    pub const fn name(self) -> &'static str {
        match self {
            Class::Unclassified => "unclassified",
            Class::Rdma => "rdma",
            Class::Other => "other",
        }
    }
}

/// The RoCEv2 fields RecoNIC's parser extracts for the RDMA engine.
///
/// Not stored in [`Metadata`] (104 bytes, in every packet's metadata, for a rare kind of
/// packet): the classify stage keeps only its verdict ([`Metadata::roce`]) and
/// [`PacketBuf::roce`] reads the fields from the frame at the parsed offsets when asked.
///
/// Fields a packet's opcode does not carry are `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceMeta {
    /// IP source address.
    pub ip_src: IpAddr,
    /// IP destination address.
    pub ip_dst: IpAddr,
    /// UDP source port (the flow entropy).
    pub udp_src: u16,
    /// UDP destination port (4791).
    pub udp_dst: u16,
    /// BTH opcode.
    pub opcode: u8,
    /// BTH solicited-event bit.
    pub se: bool,
    /// BTH destination queue pair (24 bits).
    pub dest_qp: u32,
    /// BTH acknowledge-request bit.
    pub ack_req: bool,
    /// BTH packet sequence number (24 bits).
    pub psn: u32,
    /// DMA length from the RETH (RDMA WRITE first/only, RDMA READ request).
    pub dma_len: Option<u32>,
    /// Virtual address from the RETH or AtomicETH.
    pub va: Option<u64>,
    /// Remote key from the RETH, the AtomicETH, or the key to invalidate from the IETH.
    pub rkey: Option<u32>,
    /// Message sequence number from the AETH (24 bits).
    pub msn: Option<u32>,
    /// AETH syndrome (ACK/NAK/RNR code).
    pub syndrome: Option<u8>,
    /// Immediate data from the ImmDt header.
    pub imm: Option<u32>,
    /// True when the invariant CRC verified.
    pub icrc_ok: bool,
}

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
    /// What the (inner, when tunnelled) L4 segments are.
    pub kind: GsoKind,
    /// Payload bytes per segment (the MSS for TCP).
    pub size: u16,
    /// Length of all headers up to the L4 payload, as the sender stated it (outer headers
    /// included once a tunnel was pushed).
    pub hdr_len: u16,
    /// Outer tunnel headers pushed in front of the super-packet (by the vSwitch's
    /// encapsulation, or received whole from a TAP port with UDP-tunnel GSO), `None` for a
    /// plain one. Ports that cannot take it whole get it segmented in software ("tunnel TSO").
    pub tunnel: Option<TunnelGso>,
}

/// The segmentation kinds of virtio-net.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GsoKind {
    /// TCP over IPv4 (`VIRTIO_NET_HDR_GSO_TCPV4`).
    TcpV4,
    /// TCP over IPv6 (`VIRTIO_NET_HDR_GSO_TCPV6`).
    TcpV6,
    /// UDP segmentation, each segment a datagram (`VIRTIO_NET_HDR_GSO_UDP_L4`).
    UdpL4,
}

/// The outer headers of a tunnelled super-packet: segmentation copies them in front of every
/// inner segment and fixes their lengths and checksums per segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunnelGso {
    /// The encapsulation.
    pub kind: TunnelGsoKind,
    /// Bytes of outer headers (Ethernet, IP, UDP + VXLAN or GRE) before the inner Ethernet
    /// header.
    pub outer_len: u16,
}

/// Encapsulations a tunnelled super-packet may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TunnelGsoKind {
    /// VXLAN (RFC 7348): outer UDP, then an 8-byte VXLAN header.
    Vxlan,
    /// NVGRE (RFC 7637): an 8-byte GRE header with key, protocol 0x6558.
    Nvgre,
}

/// What the pipeline knows about a packet. Stages fill it in as the packet moves.
///
/// It is reset and written for every packet, so it is kept to two cache lines (128 bytes on
/// x86-64; it was 312): the parsed stack is compact and the RoCE fields are read from the
/// frame on demand ([`PacketBuf::roce`]).
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
    /// True once [`crate::rss::Toeplitz::parse_and_hash`] walked the frame into `stack` and
    /// computed `rss_hash` (the receive side does it to choose a worker, as a NIC hashes before
    /// choosing a queue; otherwise the parse stage does); nothing walks it again. Reset with the
    /// buffer.
    pub parsed: bool,
    /// Segmentation / checksum offload state.
    pub offload: Offload,
    /// True when this packet's path through the stages is being traced.
    pub trace: bool,
    /// Traffic class (filled by the classify stage).
    pub class: Class,
    /// For packets the classify stage found to be RoCEv2 RDMA traffic, `Some(icrc_ok)`: whether
    /// the invariant CRC verified. The other RoCE fields are read from the frame by
    /// [`PacketBuf::roce`].
    pub roce: Option<bool>,
}

impl PacketBuf {
    /// The RoCEv2 fields of a packet the classify stage found to be RDMA traffic
    /// ([`Metadata::roce`] is `Some`), read from the frame at the offsets in `meta.stack` (as
    /// [`crate::stages::classify::roce_meta`] does, without verifying the ICRC again: its verdict
    /// is `meta.roce`). `None` for other packets. Like every offset in the stack, this reads
    /// the frame as it was parsed.
    pub fn roce(&self) -> Option<RoceMeta> {
        let icrc_ok = self.meta.roce?;
        crate::stages::classify::roce_fields(self.data(), &self.meta.stack, |_| icrc_ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::size_of;

    /// Per-packet metadata is reset and written for every packet: keep it small. Issue 18
    /// shrank it from 312 bytes (`Stack` 160, `Option<RoceMeta>` 104, `Offload` 16) to 128, two
    /// cache lines: the stack rebuilds its layer list from the headers' offsets and packs its
    /// error (80 bytes), and the RoCE fields are read from the frame on demand (1 byte).
    #[test]
    fn metadata_stays_small() {
        eprintln!(
            "Metadata {} B: Stack {} B, roce {} B, Offload {} B",
            size_of::<Metadata>(),
            size_of::<Stack>(),
            size_of::<Option<bool>>(),
            size_of::<Offload>()
        );
        assert!(size_of::<Stack>() <= 80);
        assert!(size_of::<Metadata>() <= 128);
    }
}
