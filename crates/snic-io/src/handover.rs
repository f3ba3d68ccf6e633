//! Handing a running port to another process: the state half of a hitless upgrade.
//!
//! A port that can be handed over ([`Port::handover`](crate::Port::handover)) gives duplicates
//! of its file descriptors and a [`PortState`] describing where it stands (the AF_PACKET ring
//! positions, the TAP device's header size, ...). The new process rebuilds the port around
//! the descriptors with [`PortSpec::adopt`](crate::PortSpec::adopt), without reconfiguring the
//! kernel object: the socket, its rings and its fanout group, or the TAP queue, are the same
//! ones, so no frame queued in them is lost while the processes change over. The old port
//! stays usable after `handover` (its own descriptors are still open): when the new process
//! fails before it confirms, the old one resumes with it (the rollback).
//!
//! Handing over is done while the port is paused (no `recv` or `send` running), after
//! [`Port::flush`](crate::Port::flush): an AF_PACKET transmit ring must be empty, the new
//! process starts filling it where the old one stopped.
//!
//! An AF_XDP port hands over its sockets, the memory files behind their UMEMs (so the new
//! process maps the same frames the kernel has pinned and is writing into) and the link that
//! keeps its XDP program attached; the rings' positions are in the rings' own shared memory.
//!
//! Ports that hold no kernel object worth keeping (generators, sinks, pcap files) are not
//! handed over: the new process opens them again.

use serde::{Deserialize, Serialize};
use std::os::fd::OwnedFd;

/// What the new process needs, beside the descriptors, to carry on with a port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PortState {
    /// An AF_PACKET socket (one descriptor).
    AfPacket(AfPacketState),
    /// A TAP device queue (one descriptor).
    Tap(TapState),
    /// A connected UDP socket (one descriptor).
    Udp,
    /// AF_XDP sockets sharing one XDP program (the program's link, the program, its
    /// `XSKMAP`, then a socket and its UMEM memory file per socket).
    AfXdp(AfXdpState),
}

impl PortState {
    /// The port kind's name, as in a port spec (`afpacket`, `tap`, `udp`).
    pub fn kind(&self) -> &'static str {
        match self {
            PortState::AfPacket(_) => "afpacket",
            PortState::Tap(_) => "tap",
            PortState::Udp => "udp",
            PortState::AfXdp(_) => "afxdp",
        }
    }
}

/// Where an AF_PACKET port stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AfPacketState {
    /// The rings' geometry and positions; `None` for a `recvmmsg`/`sendmmsg` socket.
    pub ring: Option<RingState>,
    /// The fanout group the socket is in.
    pub fanout: Option<u16>,
}

/// An AF_PACKET socket's mapped rings: the sizes they were made with (the new process maps
/// the same layout) and the positions of the walk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingState {
    /// The sizes asked for when the rings were made.
    pub sizes: crate::afpacket::RingSizes,
    /// The next receive block (or slot) to look at.
    pub rx_cur: usize,
    /// Inside block `rx_cur`, when the old process stopped part way through it: the offset of
    /// the next frame and the frames left.
    pub rx_pos: Option<(usize, u32)>,
    /// The next transmit frame to fill.
    pub tx_head: usize,
    /// The layout the old process mapped: bytes of the mapping, receive slots and their size,
    /// transmit frames and their size. The new process computes the layout from the sizes
    /// above with its own constants, and refuses the socket when that differs (a new build
    /// with another frame size would read and write at offsets the kernel does not use).
    pub layout: [usize; 5],
}

/// Where a TAP queue stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TapState {
    /// The kernel's name of the device (for its MTU).
    pub ifname: String,
    /// Bytes of the virtio-net header the queue was set up with (10, or 24 with UDP-tunnel
    /// GSO): a property of the descriptor, kept by the kernel.
    pub vnet_len: usize,
    /// Whether UDP-tunnel GSO was negotiated.
    pub tunnel_gso: bool,
}

/// A port's descriptors and state, ready to go to another process.
#[derive(Debug)]
pub struct PortHandover {
    /// The state.
    pub state: PortState,
    /// Duplicates of the port's descriptors (the port keeps its own).
    pub fds: Vec<OwnedFd>,
}

/// Where an AF_XDP port stands: its sockets (one, or one per receive queue for a port that
/// serves every queue of the interface) and what they share.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AfXdpState {
    /// The interface's name in the old process (for messages).
    pub ifname: String,
    /// The interface the sockets are bound to: the new process refuses a name that now
    /// names another interface.
    pub ifindex: u32,
    /// How the program is attached and the sockets bound.
    pub mode: crate::afxdp::XdpMode,
    /// Whether the port serves every receive queue (one loop), not one queue.
    pub all_queues: bool,
    /// Receive frames, transmit frames, and the fill, RX and TX/completion ring entries of the
    /// build that made the sockets. Compiled into each build: the new process refuses other
    /// sizes (it would index frames and rings the kernel does not have).
    pub layout: [u32; 5],
    /// Each socket.
    pub sockets: Vec<XskState>,
}

/// One AF_XDP socket of an [`AfXdpState`]. The rings' positions are not here: they are in the
/// rings' shared memory, which the new process maps from the same socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XskState {
    /// The interface queue the socket is bound to.
    pub queue: u32,
    /// Bytes per UMEM frame (the registered chunk size).
    pub frame_size: usize,
    /// Frames one wake-up sends in copy mode (`XDP_MAX_TX_SKB_BUDGET` as the kernel took it).
    pub tx_budget: u32,
    /// Transmit frames posted and not completed (frame number, length; `u32::MAX` for one a
    /// flush wrote off): their frames stay out of the free list until the kernel completes
    /// them.
    pub tx_pending: Vec<(u32, u32)>,
    /// The socket's `XDP_STATISTICS` words at the handover: the kernel keeps counting for the
    /// socket's life, so the new process reports only what it adds to them.
    #[serde(default)]
    pub kernel_stats: [u64; 6],
}
