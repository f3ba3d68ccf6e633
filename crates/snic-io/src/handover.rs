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
//! Ports that hold no kernel object worth keeping (generators, sinks, pcap files) and AF_XDP
//! sockets (whose UMEM is the old process's memory) are not handed over: the new process
//! opens them again, an AF_XDP one after the old process has let go of the queue.

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
}

impl PortState {
    /// The port kind's name, as in a port spec (`afpacket`, `tap`, `udp`).
    pub fn kind(&self) -> &'static str {
        match self {
            PortState::AfPacket(_) => "afpacket",
            PortState::Tap(_) => "tap",
            PortState::Udp => "udp",
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
