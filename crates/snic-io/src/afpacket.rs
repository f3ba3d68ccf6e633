//! AF_PACKET port: raw Ethernet frames on one Linux interface, with virtio-net headers.
//!
//! The socket is `SOCK_RAW` for all EtherTypes, bound to the interface's index, promiscuous,
//! non-blocking, and has `PACKET_VNET_HDR` on: every frame comes with a [`VnetHdr`], so the kernel
//! hands over GSO super-packets (up to 64 KiB, as a veth with default offloads makes them) and
//! frames whose L4 checksum is still partial, and takes them back the same way on transmit
//! ([`PortCaps::gso`] is true). `PACKET_IGNORE_OUTGOING` keeps our own transmissions out of the
//! receive path; frames the kernel still reports as outgoing are skipped and counted.
//!
//! # Two ways to move frames ([`AfPacketMode`])
//!
//! **Rings** ([`AfPacketMode::Ring`]; the default is the `TPACKET_V2` ring below): a
//! `TPACKET_V3` receive ring of blocks and,
//! with [`RingSizes::tx_ring`], a transmit ring of frames, both mapped into the process once.
//! By default transmit uses `sendmmsg` (see [`RingSizes::tx_ring`] for why). Receive walks the blocks the
//! kernel handed over (`TP_STATUS_USER`), copies each frame into the batch's buffer (the one copy
//! on the way in: the pipeline owns its buffers, so ring memory is never handed out) and gives
//! the block back (`TP_STATUS_KERNEL`) when it is walked: no system call per batch. A block is
//! handed over when it is full or after `tp_retire_blk_tov` (1 ms by default), so a trickle of
//! frames is not held back. The virtio-net header sits right before each frame (`tp_mac - 10`);
//! the stripped VLAN tag is in the frame header. The block walk ([`tpacket`]) checks every
//! offset against the block: a malformed block is counted in
//! [`AfPacketStats::rx_ring_errors`] and handed back, never read out of bounds. Transmit writes
//! each frame, behind its virtio-net header, into the next free ring frame and marks it
//! `TP_STATUS_SEND_REQUEST`; one `sendto(fd, NULL, 0, MSG_DONTWAIT)` per batch makes the kernel
//! send them all. The socket has `PACKET_LOSS` on, so the kernel skips a frame it cannot send
//! (bad offload metadata) instead of stopping the ring; such frames are not seen as errors here.
//! When the ring has no free frame (after a bounded wait of a few milliseconds), the rest of
//! the batch is dropped and counted in [`AfPacketStats::tx_ring_full`] (and `tx_dropped`).
//!
//! **The low-latency receive ring** (the default; [`RingSizes::rx_v2`],
//! [`RingSizes::low_latency`]): a
//! `TPACKET_V2` ring of fixed slots, each with its own status word. The kernel hands a frame
//! over as soon as it wrote it (no block, no block timeout: what libpcap's immediate mode
//! does), so a quiet link's frames are not held for up to a millisecond. The slots are fixed
//! in size (by default 2 KiB, an MTU-sized frame), so the same memory holds fewer small
//! frames than the V3 blocks. A frame longer than its slot (a super-packet, a jumbo frame) is
//! also queued whole on the socket (`PACKET_COPY_THRESH`; the slot is marked
//! `TP_STATUS_COPY`) and read from there with `recvmmsg`, in ring order, so nothing is cut.
//! Transmit is with `sendmmsg`. A malformed slot is counted like a malformed block (one frame
//! lost).
//!
//! A transmit ring's frames count as sent once marked for the kernel; [`Port::flush`] (at the
//! end of a run) waits, bounded, for the ring to drain and counts what is still on it as not
//! sent ([`AfPacketStats::tx_unsent`]). Frames lost in a malformed receive block count one by
//! one ([`AfPacketStats::rx_ring_lost`]).
//!
//! **`recvmmsg`/`sendmmsg`** ([`AfPacketMode::Mmsg`], kept for comparison and as a fallback):
//! receive is batched with `recvmmsg` straight into the batch's buffers (each reserved for a
//! 64 KiB super-packet once, then reused), transmit with `sendmmsg`.
//!
//! Either way, errors are counted in [`AfPacketStats`], never panics. The kernel's own drops at
//! the socket (`PACKET_STATISTICS`: the ring or the socket buffer was full) are read whenever a
//! receive finds nothing, every 256 receives, and when the counters are read; they accumulate in
//! [`AfPacketStats::rx_kernel_drops`] and [`PortCounters::rx_kernel_drops`].
//!
//! # Queues
//!
//! [`AfPacketPort::open_queues`] opens `n` sockets on one interface, each with its own rings,
//! joined in one `PACKET_FANOUT` group (hash mode): the kernel spreads flows over them by a
//! symmetric hash, one flow always to the same socket. Not with `PACKET_FANOUT_FLAG_DEFRAG`: a
//! NIC passes IP fragments on as they are, and the kernel would hold a fragment whose siblings
//! never come (the P4 classifier's PTF test sends a lone first fragment). The kernel's hash of
//! a fragment leaves out the ports, so every fragment of a datagram lands on one queue. The group id is
//! picked by the kernel (`PACKET_FANOUT_FLAG_UNIQUEID`), so two processes never share a group
//! by accident; the group ignores outgoing frames (`PACKET_FANOUT_FLAG_IGNORE_OUTGOING`), so no
//! queue receives its own or its siblings' transmissions.
//!
//! # VLAN tags
//!
//! On receive the kernel takes the outer 802.1Q or 802.1ad tag out of every tagged frame and
//! keeps it as packet metadata (`skb->vlan_tci`), whatever the interface's offload settings
//! (a veth too): the bytes a packet socket reads lack it, and a QinQ frame shows only its inner
//! tag. With rings the tag is in the frame header; with `recvmmsg` (and for a `TPACKET_V2`
//! slot's whole copy, read from the socket's queue) the socket has
//! `PACKET_AUXDATA` on, so each message also fills a small per-slot control buffer with a
//! `tpacket_auxdata`. When the status has `TP_STATUS_VLAN_VALID`, the port puts the tag back
//! after the two MAC addresses: TPID `tp_vlan_tpid` (when `TP_STATUS_VLAN_TPID_VALID`, else
//! 0x8100), then `tp_vlan_tci` (a priority tag with TCI 0 included). The MAC addresses move 4
//! bytes into the buffer's headroom, so nothing is allocated and only 12 bytes are copied, and
//! a frame that filled the receive area still fits. The virtio-net header counts `csum_start`
//! and `hdr_len` from the untagged frame the kernel hands over; both move by 4 with the tag (see
//! [`VnetHdr::shifted`]). Frames so restored are counted in [`AfPacketStats::rx_vlan`];
//! `rx_bytes` counts them with their tag, as they were on the wire.
//!
//! On transmit the kernel does not touch the frame: tags written in the frame leave as they
//! are (single, QinQ, with GSO or a partial checksum, whose offsets then count the tags).
//! [`PortCaps::max_frame`] is the MTU plus 18 bytes (Ethernet header and one tag), the most
//! the kernel's packet socket sends without GSO; a longer frame, such as a QinQ frame with a
//! full-MTU payload, is dropped as too big before `send`.
//!
//! Needs root (`CAP_NET_RAW`); [`AfPacketPort::open`] says so in its error otherwise.
#![allow(
    unsafe_code,
    reason = "AF_PACKET sockets are driven through libc system calls and mapped rings"
)]

pub mod tpacket;

use crate::handover::{AfPacketState, PortHandover, PortState, RingState};
use crate::port::{Port, PortCaps, PortCounters, Refused};
use crate::sys::{self, sock, sock::setsockopt_int};
use crate::vnet::{VNET_HDR_LEN, VnetHdr};
use core::sync::atomic::{AtomicU32, Ordering};
use snic_pipeline::buf::NoRoom;
use snic_pipeline::meta::Offload;
use snic_pipeline::{Batch, PacketBuf};
use snic_time::Instant;
use std::cell::Cell;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use tpacket::{RingError, RxFrame};

/// Largest frame a receive buffer takes: a 64 KiB super-packet plus Ethernet and VLAN headers.
pub const RX_FRAME_ROOM: usize = 65_536 + 64;
/// Most frames moved per `recvmmsg` / `sendmmsg` call.
pub const BURST: usize = 64;

// Kernel ABI constants (include/uapi/linux/if_packet.h, if_ether.h), stable since their
// introduction; spelled out here so this builds against any libc version.
const ETH_P_ALL: u16 = 0x0003;
const SOL_PACKET: libc::c_int = 263;
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_MR_PROMISC: libc::c_ushort = 1;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_TX_RING: libc::c_int = 13;
const PACKET_LOSS: libc::c_int = 14;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_OUTGOING: u8 = 4;
const TPACKET_V2: libc::c_int = 1;
const TPACKET_V3: libc::c_int = 2;
/// Bytes of a `TPACKET_V2` receive slot that takes a whole super-packet ([`RX_FRAME_ROOM`])
/// behind the frame header, the address and the virtio-net header (17 pages).
pub const V2_SLOT: usize = 17 << 12;
/// Bytes of one `TPACKET_V2` receive slot by default: an MTU-sized frame (1500 bytes, a VLAN
/// tag) behind the headroom. Longer frames are read whole from the socket's queue.
pub const V2_MTU_SLOT: usize = 2 << 10;
const _: () = assert!(V2_MTU_SLOT >= V2_HEADROOM + 1518);
/// Room in a `TPACKET_V2` slot before the frame: header, address, virtio-net header, and the
/// alignment the kernel adds.
const V2_HEADROOM: usize = 128;
/// Bytes of one `TPACKET_V2` receive block (the kernel allocates rings by blocks): 15 slots.
const V2_BLOCK: usize = 1 << 20;
const _: () = assert!(V2_SLOT >= V2_HEADROOM + RX_FRAME_ROOM);
const _: () = assert!(V2_HEADROOM >= tpacket::TPACKET2_HDRLEN + 64 + VNET_HDR_LEN);
const SOCKET_BUF_BYTES: libc::c_int = 8 << 20;

const PACKET_AUXDATA: libc::c_int = 8;
/// With a `TPACKET_V1`/`V2` ring, a frame too long for its slot is also queued whole on the
/// socket (the slot gets a cut copy marked [`TP_STATUS_COPY`]) when this is non-zero.
const PACKET_COPY_THRESH: libc::c_int = 7;
/// A `TPACKET_V2` slot's frame was cut, and the whole frame waits on the socket's queue.
const TP_STATUS_COPY: u32 = 1 << 1;
/// Reads of a copied frame before it counts as missing (a link going down makes one read
/// report the error and take nothing).
const COPY_READ_TRIES: usize = 3;
/// Most datagrams one drain of the socket's queue throws away (the receive buffer's worth of
/// small frames is far fewer).
const DRAIN_MAX: usize = 65_536;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
const ETH_P_8021Q: u16 = 0x8100;
/// Bytes of one VLAN tag (TPID and TCI).
const VLAN_TAG_LEN: usize = 4;
/// Where a VLAN tag goes: after the destination and source MAC addresses.
const MACS_LEN: usize = 12;

const PACKET_FANOUT: libc::c_int = 18;
const PACKET_FANOUT_HASH: libc::c_int = 0;
const PACKET_FANOUT_FLAG_UNIQUEID: libc::c_int = 0x2000;
const PACKET_FANOUT_FLAG_IGNORE_OUTGOING: libc::c_int = 0x4000;

/// `Rings::tx_len` of a frame [`Port::flush`] counted as not sent.
const TX_WRITTEN_OFF: u32 = u32::MAX;
/// Longest [`Port::flush`] waits for the transmit ring to drain.
const FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_millis(200);

/// Receives between two reads of `PACKET_STATISTICS` while frames keep coming.
const STATS_EVERY: u32 = 256;
/// Times a transmit waits (1 ms each) for a free ring frame or socket buffer before it drops.
const TX_FULL_WAITS: u32 = 8;

/// Sizes of the rings of one socket: the `TPACKET_V3` blocks (and transmit ring), or the
/// `TPACKET_V2` receive slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RingSizes {
    /// Bytes per receive block: a multiple of the page size, and more than 64 KiB plus the
    /// headers to take a super-packet whole (a larger frame is cut and counted as truncated).
    pub rx_block_size: usize,
    /// Receive blocks.
    pub rx_block_nr: usize,
    /// Milliseconds after which the kernel hands over a block that is not full
    /// (`tp_retire_blk_tov`).
    pub rx_block_timeout_ms: u32,
    /// Transmit through a ring too (true); false (the default): receive through the ring,
    /// transmit with `sendmmsg`. On veth the transmit ring measured slower than `sendmmsg`
    /// (BENCHMARKS.md, issue 18); likely because its frames reach the kernel as zero-copy page
    /// fragments of the ring, which a veth copies again before handing them on.
    pub tx_ring: bool,
    /// Transmit frames (rounded up to whole blocks). Each takes a 64 KiB super-packet.
    pub tx_frame_nr: usize,
    /// Receive through a `TPACKET_V2` ring of [`RingSizes::rx_v2_slots`] slots instead of the
    /// `TPACKET_V3` blocks: each frame has its own status word and is user space's as soon
    /// as the kernel wrote it, with no block timeout, so a quiet link's frames are not held
    /// (what libpcap's immediate mode does). Slots are fixed in size, so the same memory
    /// holds fewer small frames than the blocks do. Transmit is with `sendmmsg` (`tx_ring`
    /// is refused with it).
    pub rx_v2: bool,
    /// Slots of the `TPACKET_V2` receive ring (rounded up to whole 1 MiB blocks).
    pub rx_v2_slots: usize,
    /// Bytes per `TPACKET_V2` slot: a multiple of 16 up to 1 MiB. The default,
    /// [`V2_MTU_SLOT`], takes an MTU-sized frame; a frame longer than its slot (a
    /// super-packet, a jumbo frame) is queued whole on the socket too (`PACKET_COPY_THRESH`)
    /// and read from there in ring order (counted in [`AfPacketStats::rx_copied`]), so no
    /// slot size loses frames; [`V2_SLOT`] takes a whole super-packet in its slot.
    pub rx_v2_slot_size: usize,
}

impl RingSizes {
    /// The low-latency receive ring: `TPACKET_V2`, 4096 slots of 2 KiB (8 MiB), `sendmmsg`
    /// transmit.
    pub fn low_latency() -> RingSizes {
        RingSizes { rx_v2: true, ..RingSizes::default() }
    }
}

impl Default for RingSizes {
    /// 64 receive blocks of 128 KiB (8 MiB, the size of the socket buffer the `recvmmsg` path
    /// asks for), handed over after 1 ms; transmit with `sendmmsg` (with `tx_ring`: 120
    /// transmit frames of 64 KiB).
    fn default() -> Self {
        RingSizes {
            rx_block_size: 128 << 10,
            rx_block_nr: 64,
            rx_block_timeout_ms: 1,
            tx_ring: false,
            tx_frame_nr: 120,
            rx_v2: false,
            rx_v2_slots: 4096,
            rx_v2_slot_size: V2_MTU_SLOT,
        }
    }
}

/// How an AF_PACKET port moves frames (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfPacketMode {
    /// A receive ring (`TPACKET_V2` frame slots or `TPACKET_V3` blocks) and, with V3, a
    /// transmit ring, mapped into the process. The default: the `TPACKET_V2` ring
    /// ([`RingSizes::low_latency`]), which matched the V3 blocks' forwarding rate on veth and
    /// hands each frame over at once (BENCHMARKS.md, issue 18).
    Ring(RingSizes),
    /// `recvmmsg` / `sendmmsg` into and from the batch's buffers.
    Mmsg,
}

impl Default for AfPacketMode {
    fn default() -> Self {
        AfPacketMode::Ring(RingSizes::low_latency())
    }
}

/// Options of [`AfPacketPort::open_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AfPacketOptions {
    /// Put the interface in promiscuous mode (default true: a NIC port sees every frame).
    pub promiscuous: bool,
    /// Join this `PACKET_FANOUT` group in hash mode: every socket on the interface with the same
    /// group id gets a share of the frames, one flow always to the same socket (one port per
    /// worker). `None` (the default): this socket gets every frame. [`AfPacketPort::open_queues`]
    /// picks a group id of its own instead.
    pub fanout_group: Option<u16>,
    /// Rings or `recvmmsg`/`sendmmsg` (default: rings).
    pub mode: AfPacketMode,
}

impl Default for AfPacketOptions {
    fn default() -> Self {
        AfPacketOptions { promiscuous: true, fanout_group: None, mode: AfPacketMode::default() }
    }
}

/// `struct packet_mreq`.
#[repr(C)]
#[derive(Clone, Copy)]
struct PacketMreq {
    mr_ifindex: libc::c_int,
    mr_type: libc::c_ushort,
    mr_alen: libc::c_ushort,
    mr_address: [u8; 8],
}

/// `struct tpacket_req3`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct TpacketReq3 {
    tp_block_size: u32,
    tp_block_nr: u32,
    tp_frame_size: u32,
    tp_frame_nr: u32,
    tp_retire_blk_tov: u32,
    tp_sizeof_priv: u32,
    tp_feature_req_word: u32,
}

/// `struct tpacket_auxdata`, the `PACKET_AUXDATA` control message's payload.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
struct TpacketAuxdata {
    tp_status: u32,
    tp_len: u32,
    tp_snaplen: u32,
    tp_mac: u16,
    tp_net: u16,
    tp_vlan_tci: u16,
    tp_vlan_tpid: u16,
}

/// Control-message space of one received frame: `CMSG_SPACE(sizeof(tpacket_auxdata))` is 40
/// bytes on 64-bit Linux (32 on 32-bit); aligned for `cmsghdr`.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct CmsgBuf([u8; 64]);

/// An outer VLAN tag the kernel took out of a received frame (reported in `PACKET_AUXDATA`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct VlanTag {
    /// The tag protocol identifier: 0x8100 (802.1Q) or 0x88a8 (802.1ad).
    tpid: u16,
    /// Priority, drop-eligible bit and VLAN id.
    tci: u16,
}

impl VlanTag {
    /// The stripped tag `aux` reports, if any. Kernels before 3.14 do not report the TPID; the
    /// tag is 802.1Q then.
    fn from_auxdata(aux: &TpacketAuxdata) -> Option<VlanTag> {
        if aux.tp_status & TP_STATUS_VLAN_VALID == 0 {
            return None;
        }
        let tpid = if aux.tp_status & TP_STATUS_VLAN_TPID_VALID != 0 {
            aux.tp_vlan_tpid
        } else {
            ETH_P_8021Q
        };
        Some(VlanTag { tpid, tci: aux.tp_vlan_tci })
    }
}

/// Put `tag` back into the received frame of `p`, after the two MAC addresses: the addresses
/// move 4 bytes into the headroom (12 bytes copied; the rest of the frame stays in place).
/// Fails, leaving `p` unchanged, when the frame is shorter than the two addresses or the
/// headroom has no 4 bytes left.
fn insert_vlan_tag(p: &mut PacketBuf, tag: VlanTag) -> Result<(), NoRoom> {
    if p.len() < MACS_LEN {
        return Err(NoRoom { need: MACS_LEN, have: p.len() });
    }
    p.push_front(VLAN_TAG_LEN)?;
    let f = p.data_mut();
    f.copy_within(VLAN_TAG_LEN..VLAN_TAG_LEN + MACS_LEN, 0);
    f[MACS_LEN..MACS_LEN + 2].copy_from_slice(&tag.tpid.to_be_bytes());
    f[MACS_LEN + 2..MACS_LEN + 4].copy_from_slice(&tag.tci.to_be_bytes());
    Ok(())
}

/// Counters of one AF_PACKET port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AfPacketStats {
    /// Frames received and handed to the pipeline.
    pub rx_packets: u64,
    /// Bytes of those frames (virtio-net headers excluded).
    pub rx_bytes: u64,
    /// Received frames that were GSO super-packets.
    pub rx_gso: u64,
    /// Frames dropped because their virtio-net header was short or invalid.
    pub rx_bad_vnet: u64,
    /// Frames dropped because they did not fit the receive buffer (or the ring's block).
    pub rx_truncated: u64,
    /// Our own transmissions seen on receive and skipped.
    pub rx_outgoing: u64,
    /// Frames longer than their `TPACKET_V2` slot, read whole from the socket's queue and
    /// delivered (each also counts in `rx_packets`). A copy that is missing or not the slot's
    /// frame counts in `rx_ring_lost`, with whatever else was on the queue.
    pub rx_copied: u64,
    /// Received frames whose outer VLAN tag the kernel had stripped and the port put back.
    pub rx_vlan: u64,
    /// Frames dropped because their stripped VLAN tag could not be put back (shorter than two
    /// MAC addresses; the kernel does not strip tags from such frames).
    pub rx_vlan_lost: u64,
    /// `recvmmsg` calls that failed with something other than "nothing to read".
    pub rx_errors: u64,
    /// Receive blocks (or the rest of one) given back unread because a header in them was out
    /// of bounds (see [`tpacket::RingError`]).
    pub rx_ring_errors: u64,
    /// Frames lost in those blocks: the frames the block still claimed when its walk failed
    /// (bounded by what fits in a block, at least one per error). These count in the port's
    /// `rx_errors`, frame by frame.
    pub rx_ring_lost: u64,
    /// Frames the kernel dropped at this socket because the ring or the socket buffer was full
    /// (`PACKET_STATISTICS` `tp_drops`, accumulated: the kernel resets it on every read).
    pub rx_kernel_drops: u64,
    /// Times the kernel froze the receive ring because every block was in user space
    /// (`tp_freeze_q_cnt`, rings only).
    pub rx_ring_freezes: u64,
    /// Frames the kernel accepted for transmission (with rings: written into the transmit ring
    /// and handed to the kernel).
    pub tx_packets: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Transmitted frames that were super-packets.
    pub tx_gso: u64,
    /// Frames refused: by the kernel (`sendmmsg`), or before they reached it (too large for the
    /// MTU without GSO, or for a ring frame).
    pub tx_errors: u64,
    /// Times transmission stopped because the socket buffer stayed full.
    pub tx_full: u64,
    /// Frames dropped because the transmit ring had no free frame (also in `tx_dropped`).
    pub tx_ring_full: u64,
    /// Frames handed to `send` that did not leave (refused, or left over when the buffer
    /// or the ring stayed full, or still on the transmit ring when [`Port::flush`] gave up).
    pub tx_dropped: u64,
    /// Frames written into the transmit ring that the kernel had not sent when
    /// [`Port::flush`] stopped waiting: moved from `tx_packets` to `tx_dropped`.
    pub tx_unsent: u64,
}

/// The receive ring's read position: the block being walked and where in it.
#[derive(Debug, Clone, Copy)]
struct RxPos {
    hdr: tpacket::BlockHdr,
    off: usize,
    remaining: u32,
}

/// The `TPACKET_V3` rings of one socket, mapped into the process: the receive blocks first,
/// then the transmit blocks. Unmapped on drop.
struct Rings {
    map: *mut u8,
    map_len: usize,
    rx_block_size: usize,
    /// Receive slots: blocks (`TPACKET_V3`) or frame slots (`TPACKET_V2`).
    rx_slots: usize,
    /// Bytes of one slot (a block, or a `TPACKET_V2` frame slot).
    rx_slot_len: usize,
    /// Slots per block (1 for `TPACKET_V3`).
    rx_slots_per_block: usize,
    /// Offset of the status word in a slot.
    rx_status_off: usize,
    /// The ring is `TPACKET_V2` (per-frame slots).
    rx_v2: bool,
    /// The next receive block (or slot) to look at.
    rx_cur: usize,
    /// Where the walk of `rx_cur` stands, once the kernel has handed it over.
    rx_pos: Option<RxPos>,
    /// Byte offset of the transmit ring in the mapping.
    tx_base: usize,
    tx_block_size: usize,
    tx_frame_size: usize,
    tx_frames_per_block: usize,
    tx_frame_nr: usize,
    /// The next transmit frame to fill (the kernel sends them in the same order).
    tx_head: usize,
    /// Frames marked for sending that no `sendto` has taken yet.
    tx_unkicked: bool,
    /// Length of the frame last written into each transmit frame ([`TX_WRITTEN_OFF`] once
    /// [`Port::flush`] counted it as not sent), for the counts of a flush.
    tx_len: Vec<u32>,
}

impl Rings {
    /// The mapping's layout, as a handover carries it: bytes mapped, receive slots, slot
    /// size, transmit frames, transmit frame size.
    fn layout(&self) -> [usize; 5] {
        [self.map_len, self.rx_slots, self.rx_slot_len, self.tx_frame_nr, self.tx_frame_size]
    }
}

impl Drop for Rings {
    fn drop(&mut self) {
        // SAFETY: `map` and `map_len` are exactly what mmap returned; nothing borrows the
        // mapping once the port is being dropped.
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

impl Rings {
    /// Byte offset of receive slot `i` (`i < rx_slots`) in the mapping.
    fn rx_slot_offset(&self, i: usize) -> usize {
        let (block, k) = (i / self.rx_slots_per_block, i % self.rx_slots_per_block);
        block * self.rx_block_size + k * self.rx_slot_len
    }

    /// The status word of receive slot `i` (`i < rx_slots`): a block's `block_status` or a
    /// `TPACKET_V2` frame's `tp_status`.
    fn rx_status(&self, i: usize) -> &AtomicU32 {
        debug_assert!(i < self.rx_slots);
        // SAFETY: slot `i` lies inside the mapping (checked in `setup_rings`: slots fit their
        // blocks), which lives as long as `self`; blocks are page-aligned and slots a multiple
        // of 16 bytes, so the status word (offset 8 or 0) is aligned for a u32. The kernel
        // writes it concurrently, which is why it is only accessed atomically.
        unsafe {
            AtomicU32::from_ptr(self.map.add(self.rx_slot_offset(i) + self.rx_status_off).cast())
        }
    }

    /// Receive slot `i` as bytes. Only while user space owns it (its status has
    /// `TP_STATUS_USER`, read with acquire ordering): the kernel does not write it then.
    fn rx_block(&self, i: usize) -> &[u8] {
        debug_assert!(i < self.rx_slots);
        // SAFETY: the slot lies inside the mapping, which lives as long as `self`; the
        // callers only take it after seeing TP_STATUS_USER (acquire), when the kernel leaves
        // the slot alone until we store TP_STATUS_KERNEL, which happens after the slice is
        // dropped (the borrow of `self` ends first).
        unsafe {
            core::slice::from_raw_parts(self.map.add(self.rx_slot_offset(i)), self.rx_slot_len)
        }
    }

    /// Hand receive slot `rx_cur` back to the kernel and move on.
    fn rx_release(&mut self) {
        self.rx_status(self.rx_cur).store(tpacket::TP_STATUS_KERNEL, Ordering::Release);
        self.rx_cur = (self.rx_cur + 1) % self.rx_slots;
        self.rx_pos = None;
    }

    /// Byte offset of transmit frame `i` in the mapping.
    fn tx_frame_offset(&self, i: usize) -> usize {
        let (block, slot) = (i / self.tx_frames_per_block, i % self.tx_frames_per_block);
        self.tx_base + block * self.tx_block_size + slot * self.tx_frame_size
    }

    /// The status word of transmit frame `i`.
    fn tx_status(&self, i: usize) -> &AtomicU32 {
        debug_assert!(i < self.tx_frame_nr);
        // SAFETY: the frame lies inside the mapping (blocks are page-aligned, frame sizes a
        // multiple of 16), so the status word is in bounds and aligned; it is shared with the
        // kernel and only accessed atomically.
        unsafe {
            AtomicU32::from_ptr(
                self.map.add(self.tx_frame_offset(i) + tpacket::FRAME_STATUS_OFFSET).cast(),
            )
        }
    }

    /// Transmit frame `i` as bytes, writable. Only while its status is `TP_STATUS_AVAILABLE`
    /// (read with acquire ordering): the kernel does not touch it then.
    fn tx_frame(&mut self, i: usize) -> &mut [u8] {
        debug_assert!(i < self.tx_frame_nr);
        // SAFETY: the frame lies inside the mapping, which lives as long as `self`; callers
        // take it only after seeing TP_STATUS_AVAILABLE, and the kernel does not read it until
        // we store TP_STATUS_SEND_REQUEST after the slice is dropped.
        unsafe {
            core::slice::from_raw_parts_mut(
                self.map.add(self.tx_frame_offset(i)),
                self.tx_frame_size,
            )
        }
    }
}

/// Scratch of the `recvmmsg`/`sendmmsg` path: every pointer in it is set before each call.
struct MmsgScratch {
    /// One virtio-net header slot per burst entry, for receive and transmit.
    vnet: [[u8; VNET_HDR_LEN]; BURST],
    /// Scatter lists: [virtio-net header, frame] per burst entry.
    iov: [[libc::iovec; 2]; BURST],
    /// Sender addresses on receive (for the packet type).
    addrs: [libc::sockaddr_ll; BURST],
    /// Control messages on receive (`PACKET_AUXDATA`: the stripped VLAN tag).
    ctrl: [CmsgBuf; BURST],
    msgs: [libc::mmsghdr; BURST],
    /// Datagrams the last `recvmmsg` took off the socket's queue (delivered or not).
    taken: usize,
}

impl MmsgScratch {
    /// Fresh, zeroed scratch (the pointers are set before every system call).
    fn boxed() -> Box<MmsgScratch> {
        Box::new(MmsgScratch {
            vnet: [[0; VNET_HDR_LEN]; BURST],
            iov: [[sock::empty_iovec(); 2]; BURST],
            addrs: [sock::empty_sockaddr_ll(); BURST],
            ctrl: [CmsgBuf([0; 64]); BURST],
            msgs: [sock::empty_mmsghdr(); BURST],
            taken: 0,
        })
    }
}

/// An AF_PACKET port on one interface. See the module documentation.
pub struct AfPacketPort {
    /// The mapped rings (ring mode); unmapped before the socket closes.
    rings: Option<Box<Rings>>,
    /// The `recvmmsg`/`sendmmsg` scratch (mmsg mode).
    mmsg: Option<Box<MmsgScratch>>,
    fd: OwnedFd,
    name: String,
    ifindex: libc::c_int,
    mtu: usize,
    stats: AfPacketStats,
    /// `tp_drops` and `tp_freeze_q_cnt` accumulated from `PACKET_STATISTICS` (read from
    /// `&self` too, when the counters are read).
    kernel: Cell<(u64, u64)>,
    /// Receives since `PACKET_STATISTICS` was last read.
    since_stats: u32,
    /// The fanout group this socket joined, if any.
    fanout: Option<u16>,
    /// How it moves frames (the ring sizes asked for), for a handover.
    mode: AfPacketMode,
}

// SAFETY: the raw pointers inside the port (the ring mapping, the `mmsg` scratch) point at
// memory the port owns (the mapping lives until `Rings` drops; the scratch pointers are rebuilt
// before every system call); nothing is shared with another thread, so moving the port moves
// them all together.
unsafe impl Send for AfPacketPort {}

impl std::fmt::Debug for AfPacketPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfPacketPort")
            .field("name", &self.name)
            .field("fd", &self.fd.as_raw_fd())
            .field("ifindex", &self.ifindex)
            .field("mtu", &self.mtu)
            .field("ring", &self.rings.is_some())
            .field("fanout", &self.fanout)
            .field("stats", &self.stats())
            .finish()
    }
}

/// A fresh shared read-write mapping of `len` bytes of the rings of packet socket `fd`, to be
/// owned (and unmapped) by [`Rings`]; `None` when mmap failed, with `errno` left for
/// [`os_err`].
fn map_rings(fd: RawFd, len: usize) -> Option<*mut u8> {
    // SAFETY: a fresh shared mapping at an address the kernel picks; nothing aliases it, and
    // the caller hands it to `Rings`, whose drop unmaps exactly this range.
    let map = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    (map != libc::MAP_FAILED).then(|| map.cast())
}

fn os_err(what: &str, ifname: &str) -> io::Error {
    let e = io::Error::last_os_error();
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => " (AF_PACKET needs root or CAP_NET_RAW)",
        _ => "",
    };
    io::Error::new(e.kind(), format!("afpacket:{ifname}: {what}: {e}{hint}"))
}

fn invalid(ifname: &str, what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("afpacket:{ifname}: {what}"))
}

/// How a socket joins a fanout group.
#[derive(Debug, Clone, Copy)]
enum Fanout {
    /// Not at all.
    None,
    /// Join group `id` with these type and flag bits.
    Join { id: u16, type_flags: libc::c_int },
    /// Create a new group with an id the kernel picks, with these type and flag bits.
    Unique { type_flags: libc::c_int },
}

/// Size of one transmit ring frame: the frame header, the virtio-net header and a 64 KiB
/// super-packet with its headers.
const TX_FRAME_SIZE: usize =
    tpacket::tpacket_align(tpacket::TX_DATA_OFFSET + VNET_HDR_LEN + RX_FRAME_ROOM);
/// Size of one transmit ring block (15 frames).
const TX_BLOCK_SIZE: usize = 1 << 20;
// A transmit frame takes a whole super-packet behind its headers, aligned; a block holds 15.
const _: () = assert!(TX_FRAME_SIZE >= tpacket::TX_DATA_OFFSET + VNET_HDR_LEN + RX_FRAME_ROOM);
const _: () = assert!(TX_FRAME_SIZE.is_multiple_of(tpacket::TPACKET_ALIGNMENT));
const _: () = assert!(TX_BLOCK_SIZE / TX_FRAME_SIZE == 15);

impl AfPacketPort {
    /// Open an AF_PACKET port on interface `ifname` (see the module documentation). Fails with a
    /// clear error when the interface does not exist or the process lacks `CAP_NET_RAW`.
    pub fn open(ifname: &str) -> io::Result<AfPacketPort> {
        Self::open_with(ifname, AfPacketOptions::default())
    }

    /// [`AfPacketPort::open`] with options (promiscuous mode, fanout group, rings or not).
    pub fn open_with(ifname: &str, opts: AfPacketOptions) -> io::Result<AfPacketPort> {
        let fanout = match opts.fanout_group {
            None => Fanout::None,
            Some(id) => Fanout::Join { id, type_flags: fanout_type_flags(true) },
        };
        Self::open_inner(ifname, opts, fanout)
    }

    /// Open `n` queues of one interface: `n` sockets, each with its own rings (or `recvmmsg`
    /// scratch), joined in a new `PACKET_FANOUT` hash group whose id the kernel picks (see the
    /// module documentation). `opts.fanout_group` is ignored. With `n == 1` no group is made.
    pub fn open_queues(
        ifname: &str,
        n: usize,
        opts: AfPacketOptions,
    ) -> io::Result<Vec<AfPacketPort>> {
        if n == 0 {
            return Err(invalid(ifname, "zero queues".into()));
        }
        if n == 1 {
            return Ok(vec![Self::open_inner(ifname, opts, Fanout::None)?]);
        }
        // Kernels before 6.6 (or so) lack IGNORE_OUTGOING for groups: try without it then (the
        // packet type still filters our own frames out on receive).
        let (first, type_flags) = match Self::open_inner(
            ifname,
            opts,
            Fanout::Unique { type_flags: fanout_type_flags(true) },
        ) {
            Ok(p) => (p, fanout_type_flags(true)),
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                let tf = fanout_type_flags(false);
                (Self::open_inner(ifname, opts, Fanout::Unique { type_flags: tf })?, tf)
            }
            Err(e) => return Err(e),
        };
        let id = first.fanout.ok_or_else(|| invalid(ifname, "fanout group id missing".into()))?;
        let mut queues = vec![first];
        for _ in 1..n {
            queues.push(Self::open_inner(ifname, opts, Fanout::Join { id, type_flags })?);
        }
        Ok(queues)
    }

    fn open_inner(ifname: &str, opts: AfPacketOptions, fanout: Fanout) -> io::Result<AfPacketPort> {
        let cname = CString::new(ifname).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "interface name contains a NUL byte")
        })?;
        // SAFETY: `cname` is a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            return Err(os_err("no such interface", ifname));
        }
        let ifindex = libc::c_int::try_from(ifindex).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "interface index too large")
        })?;
        let mtu = sock::interface_mtu(&cname).map_err(|e| {
            io::Error::new(e.kind(), format!("afpacket:{ifname}: reading the MTU: {e}"))
        })?;

        // Protocol 0 until bound, so no frame of another interface is queued in between (and
        // none lands in the plain receive queue before the ring is there).
        // SAFETY: plain socket(2) call; the result is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            return Err(os_err("socket(AF_PACKET)", ifname));
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = fd.as_raw_fd();

        if setsockopt_int(raw, SOL_PACKET, PACKET_VNET_HDR, 1).is_err() {
            return Err(os_err("PACKET_VNET_HDR", ifname));
        }
        // Best effort: older kernels lack it, and outgoing frames are also filtered by type.
        let _ = setsockopt_int(raw, SOL_PACKET, PACKET_IGNORE_OUTGOING, 1);
        let scratch = MmsgScratch::boxed;
        let (rings, mmsg) = match opts.mode {
            AfPacketMode::Ring(sizes) => {
                let rings = setup_rings(raw, ifname, &sizes, true)?;
                (Some(rings), (!sizes.tx_ring).then(scratch))
            }
            AfPacketMode::Mmsg => {
                // The kernel strips the outer VLAN tag of received frames into metadata; this
                // reports it with every frame so that `recv` can put it back.
                if setsockopt_int(raw, SOL_PACKET, PACKET_AUXDATA, 1).is_err() {
                    return Err(os_err("PACKET_AUXDATA", ifname));
                }
                // Large socket buffers: a burst of super-packets is megabytes. FORCE needs
                // CAP_NET_ADMIN; fall back to the capped variant.
                sock::set_buffer(raw, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, SOCKET_BUF_BYTES);
                (None, Some(scratch()))
            }
        };
        // Frames in flight (from the transmit ring or `sendmmsg`) are charged to the send
        // buffer.
        sock::set_buffer(raw, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, SOCKET_BUF_BYTES);

        let mut sll = sock::empty_sockaddr_ll();
        sll.sll_family = libc::AF_PACKET as libc::c_ushort;
        sll.sll_protocol = ETH_P_ALL.to_be();
        sll.sll_ifindex = ifindex;
        // SAFETY: `sll` is a live sockaddr_ll and its exact size is passed.
        let r = unsafe {
            libc::bind(
                raw,
                (&sll as *const libc::sockaddr_ll).cast(),
                core::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(os_err("bind", ifname));
        }

        if opts.promiscuous {
            let mreq = PacketMreq {
                mr_ifindex: ifindex,
                mr_type: PACKET_MR_PROMISC,
                mr_alen: 0,
                mr_address: [0; 8],
            };
            if sock::setsockopt_value(raw, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq).is_err() {
                return Err(os_err("PACKET_ADD_MEMBERSHIP promiscuous", ifname));
            }
        }
        let fanout_id = match fanout {
            Fanout::None => None,
            Fanout::Join { id, type_flags } => {
                let arg = libc::c_int::from(id) | (type_flags << 16);
                if setsockopt_int(raw, SOL_PACKET, PACKET_FANOUT, arg).is_err() {
                    return Err(os_err("PACKET_FANOUT", ifname));
                }
                Some(id)
            }
            Fanout::Unique { type_flags } => {
                let arg = (type_flags | PACKET_FANOUT_FLAG_UNIQUEID) << 16;
                if setsockopt_int(raw, SOL_PACKET, PACKET_FANOUT, arg).is_err() {
                    return Err(os_err("PACKET_FANOUT (new group)", ifname));
                }
                let v = sock::getsockopt_int(raw, SOL_PACKET, PACKET_FANOUT)
                    .map_err(|_| os_err("reading the PACKET_FANOUT group", ifname))?;
                Some((v & 0xffff) as u16)
            }
        };

        let port = AfPacketPort {
            rings,
            mmsg,
            fd,
            name: format!("afpacket:{ifname}"),
            ifindex,
            mtu,
            stats: AfPacketStats::default(),
            kernel: Cell::new((0, 0)),
            since_stats: 0,
            fanout: fanout_id,
            mode: opts.mode,
        };
        // Start the drop count from zero: the socket existed (unbound) a moment before.
        port.read_kernel_stats();
        port.kernel.set((0, 0));
        Ok(port)
    }

    /// Carry on with a socket another process handed over (see [`crate::handover`]): the same
    /// socket, bound to `ifname`, with its rings (mapped again here with the layout `state`
    /// gives) and its fanout group; the walk of the rings starts where the old process
    /// stopped. Nothing of the socket is reconfigured. Refuses a descriptor that is not an
    /// AF_PACKET socket of the ring version `state` says, or positions outside the rings.
    pub fn adopt(ifname: &str, fd: OwnedFd, state: &AfPacketState) -> io::Result<AfPacketPort> {
        let cname = CString::new(ifname).map_err(|_| invalid(ifname, "NUL in the name".into()))?;
        // SAFETY: `cname` is a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        let ifindex = libc::c_int::try_from(ifindex)
            .ok()
            .filter(|&i| i != 0)
            .ok_or_else(|| os_err("no such interface", ifname))?;
        let mtu = sock::interface_mtu(&cname).map_err(|e| {
            io::Error::new(e.kind(), format!("afpacket:{ifname}: reading the MTU: {e}"))
        })?;
        let raw = fd.as_raw_fd();
        if sock::getsockopt_int(raw, libc::SOL_SOCKET, libc::SO_DOMAIN).ok()
            != Some(libc::AF_PACKET)
        {
            return Err(invalid(ifname, "the handed descriptor is not an AF_PACKET socket".into()));
        }
        let version = sock::getsockopt_int(raw, SOL_PACKET, PACKET_VERSION)
            .map_err(|_| os_err("reading PACKET_VERSION", ifname))?;
        let scratch = MmsgScratch::boxed;
        let (rings, mmsg, mode) = match &state.ring {
            None => (None, Some(scratch()), AfPacketMode::Mmsg),
            Some(rs) => {
                let sizes = rs.sizes;
                let want = if sizes.rx_v2 { TPACKET_V2 } else { TPACKET_V3 };
                if version != want {
                    return Err(invalid(
                        ifname,
                        format!("the socket has ring version {version}, the state says {want}"),
                    ));
                }
                let mut r = setup_rings(raw, ifname, &sizes, false)?;
                if r.layout() != rs.layout {
                    return Err(invalid(
                        ifname,
                        format!(
                            "the handed rings' layout {:?} is not this build's {:?}",
                            rs.layout,
                            r.layout()
                        ),
                    ));
                }
                if rs.rx_cur >= r.rx_slots || (r.tx_frame_nr > 0 && rs.tx_head >= r.tx_frame_nr) {
                    return Err(invalid(ifname, format!("ring positions out of range: {rs:?}")));
                }
                r.rx_cur = rs.rx_cur;
                r.tx_head = if r.tx_frame_nr > 0 { rs.tx_head } else { 0 };
                if let Some((off, remaining)) = rs.rx_pos {
                    let owned = r.rx_status(r.rx_cur).load(Ordering::Acquire)
                        & tpacket::TP_STATUS_USER
                        != 0;
                    let hdr = (!r.rx_v2 && owned)
                        .then(|| tpacket::block_header(r.rx_block(r.rx_cur)).ok())
                        .flatten()
                        .ok_or_else(|| {
                            invalid(ifname, "the handed block is not user space's".into())
                        })?;
                    r.rx_pos = Some(RxPos { hdr, off, remaining });
                }
                (Some(r), (!sizes.tx_ring).then(scratch), AfPacketMode::Ring(sizes))
            }
        };
        Ok(AfPacketPort {
            rings,
            mmsg,
            fd,
            name: format!("afpacket:{ifname}"),
            ifindex,
            mtu,
            stats: AfPacketStats::default(),
            kernel: Cell::new((0, 0)),
            since_stats: 0,
            fanout: state.fanout,
            mode,
        })
    }

    /// The descriptor and state [`Port::handover`] gives.
    fn handover_state(&mut self) -> io::Result<PortHandover> {
        if self.uses_tx_ring() && self.tx_ring_pending().next().is_some() {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{}: frames still in the transmit ring (flush first)", self.name),
            ));
        }
        let ring = match (&self.mode, &self.rings) {
            (AfPacketMode::Ring(sizes), Some(r)) => Some(RingState {
                sizes: *sizes,
                rx_cur: r.rx_cur,
                rx_pos: r.rx_pos.map(|p| (p.off, p.remaining)),
                tx_head: r.tx_head,
                layout: r.layout(),
            }),
            _ => None,
        };
        Ok(PortHandover {
            state: PortState::AfPacket(AfPacketState { ring, fanout: self.fanout }),
            fds: vec![self.fd.try_clone()?],
        })
    }

    /// This port's counters (the kernel's drop counts read now).
    pub fn stats(&self) -> AfPacketStats {
        self.read_kernel_stats();
        let (drops, freezes) = self.kernel.get();
        AfPacketStats { rx_kernel_drops: drops, rx_ring_freezes: freezes, ..self.stats }
    }

    /// The interface's index.
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// The interface's MTU when the port was opened.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// True when the port receives through a mapped ring, false for `recvmmsg`.
    pub fn uses_rings(&self) -> bool {
        self.rings.is_some()
    }

    /// True when the port transmits through a mapped ring, false for `sendmmsg`.
    pub fn uses_tx_ring(&self) -> bool {
        self.rings.as_ref().is_some_and(|r| r.tx_frame_nr > 0)
    }

    /// The `PACKET_FANOUT` group this socket is in, if any.
    pub fn fanout_group(&self) -> Option<u16> {
        self.fanout
    }

    /// Read (and so clear) a pending socket error (`SO_ERROR`: the kernel sets `ENETDOWN`
    /// when the link goes down). The ring paths never call `recvmsg`, which would report it,
    /// and while it is set `poll(2)` says the socket is ready: an idle worker would spin.
    /// Counted in `rx_errors`.
    fn clear_socket_error(&mut self) {
        if sock::getsockopt_int(self.fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_ERROR)
            .is_ok_and(|e| e != 0)
        {
            self.stats.rx_errors += 1;
        }
    }

    /// Add the kernel's drop counts since the last read (`PACKET_STATISTICS` resets them).
    fn read_kernel_stats(&self) {
        // `struct tpacket_stats_v3 { tp_packets, tp_drops, tp_freeze_q_cnt }`; a socket
        // without a TPACKET_V3 ring fills only the first two.
        if let Ok(([_packets, drops, freezes], _)) =
            sock::getsockopt_words::<u32, 3>(self.fd.as_raw_fd(), SOL_PACKET, PACKET_STATISTICS)
        {
            let (d, f) = self.kernel.get();
            self.kernel.set((d + u64::from(drops), f + u64::from(freezes)));
        }
    }

    /// Wait up to `timeout_ms` for the socket to become writable (with a ring: for the frame
    /// at the kernel's transmit head to be free).
    fn wait_writable(&self, timeout_ms: u64) {
        sys::poll::wait_writable(self.fd.as_raw_fd(), std::time::Duration::from_millis(timeout_ms));
    }

    /// Ask the kernel to send every frame marked in the transmit ring.
    fn kick(&mut self) {
        let Some(r) = self.rings.as_mut() else { return };
        if !r.tx_unkicked {
            return;
        }
        // SAFETY: a zero-length sendto with no buffer and no address: the kernel reads only the
        // transmit ring, which it owns for the frames marked TP_STATUS_SEND_REQUEST.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                core::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                core::ptr::null(),
                0,
            )
        };
        if n >= 0 {
            r.tx_unkicked = false;
        } else {
            // EAGAIN / ENOBUFS: the send buffer is full for now; the frames stay marked and
            // the next kick sends them. Anything else: the link is down or the device refused;
            // count it and try again with the next batch.
            let e = io::Error::last_os_error();
            if !sock::is_full(&e) && e.raw_os_error() != Some(libc::EINTR) {
                self.stats.tx_errors += 1;
                r.tx_unkicked = false;
            }
        }
    }

    /// Transmit frames written and not yet sent (not `TP_STATUS_AVAILABLE`), except those a
    /// flush already counted as not sent.
    fn tx_ring_pending(&self) -> impl Iterator<Item = usize> + '_ {
        let r = self.rings.as_deref();
        (0..r.map_or(0, |r| r.tx_frame_nr)).filter(move |&i| {
            r.is_some_and(|r| {
                r.tx_len[i] != TX_WRITTEN_OFF
                    && r.tx_status(i).load(Ordering::Acquire) != tpacket::TP_STATUS_AVAILABLE
            })
        })
    }

    /// Receive through the `TPACKET_V2` ring: take the frames user space owns, in order,
    /// copying each into `batch` and giving its slot straight back. A frame too long for its
    /// slot (a super-packet, a jumbo frame in a small slot) was queued whole on the socket as
    /// well, in ring order ([`TP_STATUS_COPY`]): it is read from there ([`Self::recv_copy`]),
    /// so small slots lose nothing.
    fn recv_v2(&mut self, now: Instant, batch: &mut Batch) -> usize {
        let mut got = 0;
        while !batch.is_full() {
            let Some(r) = self.rings.as_mut() else { break };
            let status = r.rx_status(r.rx_cur).load(Ordering::Acquire);
            if status & tpacket::TP_STATUS_USER == 0 {
                break;
            }
            let slot = r.rx_block(r.rx_cur);
            let frame = tpacket::v2_frame(slot, VNET_HDR_LEN).ok();
            // The copy bit is read from the status word itself: a slot whose header is
            // malformed still has its copy on the queue, which must be taken in turn.
            let copied = status & TP_STATUS_COPY != 0;
            if !copied {
                match &frame {
                    Some(f) => {
                        got += usize::from(deliver_ring_frame(&mut self.stats, now, batch, slot, f))
                    }
                    None => {
                        self.stats.rx_ring_errors += 1;
                        self.stats.rx_ring_lost += 1;
                    }
                }
            }
            r.rx_release();
            if copied {
                got += self.recv_copy(now, batch, frame);
            }
        }
        got
    }

    /// Take the whole frame of a [`TP_STATUS_COPY`] slot (`f`: the slot's header, `None` when
    /// malformed) off the socket's queue into `batch`; returns the frames delivered (0 or 1).
    ///
    /// The kernel queues the copy before it hands the slot over and frees it on every path
    /// that does not, so the queue's head is this slot's frame. A read that took nothing (the
    /// link went down: the kernel reports that once; an interrupted call) is tried again; if
    /// nothing comes, the frame counts as lost ([`AfPacketStats::rx_ring_lost`]). A frame of
    /// another length means the queue and the ring are out of step (another reader of the
    /// socket, a copy left by an older build): the queue is drained and what was on it counted
    /// lost, so the next copied slot reads its own frame or nothing, never another's. A
    /// malformed slot's copy is taken and lost with it.
    fn recv_copy(&mut self, now: Instant, batch: &mut Batch, f: Option<RxFrame>) -> usize {
        let before = batch.len();
        for _ in 0..COPY_READ_TRIES {
            let delivered = self.recv_mmsg(now, batch, 1).unwrap_or(0);
            let Some(m) = self.mmsg.as_ref() else { return 0 };
            if m.taken == 0 {
                continue;
            }
            let Some(f) = f else {
                // A malformed slot: its copy, taken in turn, is lost with it.
                self.drop_delivered(batch, before);
                self.stats.rx_ring_errors += 1;
                self.stats.rx_ring_lost += 1;
                return 0;
            };
            if (m.msgs[0].msg_len as usize).checked_sub(VNET_HDR_LEN) != Some(f.len) {
                self.drop_delivered(batch, before);
                self.stats.rx_ring_lost += 1;
                self.drain_queue();
                return 0;
            }
            if f.pkttype == PACKET_OUTGOING {
                // The copy's own address is zeroed by the kernel: the slot tells.
                self.drop_delivered(batch, before);
                self.stats.rx_outgoing += 1;
                return 0;
            }
            self.stats.rx_copied += delivered as u64;
            return delivered;
        }
        // Nothing was there to take: the frame is lost, and the queue holds nothing to drain.
        self.stats.rx_ring_lost += 1;
        0
    }

    /// Take back the frames delivered into `batch` past `len` (and their receive counts).
    fn drop_delivered(&mut self, batch: &mut Batch, len: usize) {
        while batch.len() > len {
            if let Some(p) = batch.packets().last() {
                let s = &mut self.stats;
                s.rx_packets = s.rx_packets.saturating_sub(1);
                s.rx_bytes = s.rx_bytes.saturating_sub(p.len() as u64);
                if p.meta.offload.gso.is_some() {
                    s.rx_gso = s.rx_gso.saturating_sub(1);
                }
            }
            batch.pop_slot();
        }
    }

    /// Throw away everything on the socket's queue (bounded), counting it lost.
    fn drain_queue(&mut self) {
        for _ in 0..DRAIN_MAX {
            // SAFETY: a zero-length receive into no buffer: the kernel only takes the
            // datagram off the queue (and, the buffer being shorter than the virtio-net
            // header, fails with EINVAL after freeing it).
            let r = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    core::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                )
            };
            let err = (r < 0).then(|| io::Error::last_os_error().raw_os_error()).flatten();
            match err {
                None | Some(libc::EINVAL) => self.stats.rx_ring_lost += 1,
                Some(libc::EINTR) | Some(libc::ENETDOWN) => {}
                Some(_) => break,
            }
        }
    }

    /// Receive through the ring: walk the blocks user space owns, copying frames into `batch`.
    fn recv_ring(&mut self, now: Instant, batch: &mut Batch) -> usize {
        if self.rings.as_ref().is_some_and(|r| r.rx_v2) {
            return self.recv_v2(now, batch);
        }
        let Some(r) = self.rings.as_mut() else { return 0 };
        let stats = &mut self.stats;
        let mut got = 0;
        while !batch.is_full() {
            let mut pos = match r.rx_pos {
                Some(p) => p,
                None => {
                    if r.rx_status(r.rx_cur).load(Ordering::Acquire) & tpacket::TP_STATUS_USER == 0
                    {
                        break;
                    }
                    let block = r.rx_block(r.rx_cur);
                    match tpacket::block_header(block) {
                        Ok(hdr) => RxPos { hdr, off: hdr.first, remaining: hdr.num_pkts },
                        Err(_) => {
                            let claimed = tpacket::claimed_frames(block);
                            stats.rx_ring_errors += 1;
                            stats.rx_ring_lost += tpacket::frames_lost(claimed, block.len());
                            r.rx_release();
                            continue;
                        }
                    }
                }
            };
            if pos.remaining == 0 {
                r.rx_release();
                continue;
            }
            let block = r.rx_block(r.rx_cur);
            match tpacket::frame_at(block, &pos.hdr, pos.off, pos.remaining, VNET_HDR_LEN) {
                Ok((f, next)) => {
                    if deliver_ring_frame(stats, now, batch, block, &f) {
                        got += 1;
                    }
                    pos.remaining -= 1;
                    match next {
                        Some(n) => pos.off = n,
                        None => pos.remaining = 0,
                    }
                    r.rx_pos = Some(pos);
                }
                Err(RingError::BadBlock | RingError::FrameOutside { .. })
                | Err(RingError::BadFrameData { .. } | RingError::BadNext { .. }) => {
                    // This frame and every one after it in the block are lost.
                    stats.rx_ring_errors += 1;
                    stats.rx_ring_lost += tpacket::frames_lost(pos.remaining, block.len());
                    r.rx_release();
                }
            }
        }
        // A block walked to its end goes back now, not at the next receive.
        if r.rx_pos.is_some_and(|p| p.remaining == 0) {
            r.rx_release();
        }
        got
    }

    /// Transmit through the ring; returns how many frames went into it (frames refused on the
    /// way are marked in `refused`).
    fn send_ring(&mut self, batch: &Batch, refused: &mut Refused) -> usize {
        let max_plain = self.mtu + 18;
        let mut sent = 0;
        let mut waits = 0;
        for (i, p) in batch.iter().enumerate() {
            let len = VNET_HDR_LEN + p.len();
            let Some(r) = self.rings.as_mut() else { return sent };
            if tpacket::TX_DATA_OFFSET + len > r.tx_frame_size
                || (p.meta.offload.gso.is_none() && p.len() > max_plain)
            {
                self.stats.tx_errors += 1;
                refused.mark(i);
                continue;
            }
            // A free frame at the head, or send what is marked and wait a little.
            loop {
                let r = self.rings.as_ref().expect("ring mode");
                if r.tx_status(r.tx_head).load(Ordering::Acquire) == tpacket::TP_STATUS_AVAILABLE {
                    break;
                }
                if waits >= TX_FULL_WAITS {
                    let left = (batch.len() - i) as u64;
                    self.stats.tx_ring_full += left;
                    self.kick();
                    return sent;
                }
                waits += 1;
                self.kick();
                self.wait_writable(1);
            }
            let r = self.rings.as_mut().expect("ring mode");
            let head = r.tx_head;
            let hdr = VnetHdr::from_offload(&p.meta.offload, p.data()).to_bytes();
            let f = r.tx_frame(head);
            // Cannot fail: the frame size was checked above.
            let _ = tpacket::write_tx_header(f, len as u32);
            let d = tpacket::TX_DATA_OFFSET;
            f[d..d + VNET_HDR_LEN].copy_from_slice(&hdr);
            f[d + VNET_HDR_LEN..d + len].copy_from_slice(p.data());
            r.tx_len[head] = p.len() as u32;
            r.tx_status(head).store(tpacket::TP_STATUS_SEND_REQUEST, Ordering::Release);
            r.tx_head = (head + 1) % r.tx_frame_nr;
            r.tx_unkicked = true;
            sent += 1;
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += p.len() as u64;
            if p.meta.offload.gso.is_some() {
                self.stats.tx_gso += 1;
            }
        }
        self.kick();
        sent
    }

    /// Receive up to `limit` frames from the socket's queue with `recvmmsg`.
    fn recv_mmsg(&mut self, now: Instant, batch: &mut Batch, limit: usize) -> io::Result<usize> {
        let Some(m) = self.mmsg.as_mut() else { return Ok(0) };
        let base = batch.len();
        let want = (batch.max() - base).min(BURST).min(limit);
        if want == 0 {
            return Ok(0);
        }
        for _ in 0..want {
            match batch.push_slot() {
                Some(p) => p.reserve_frame(RX_FRAME_ROOM),
                None => break,
            }
        }
        let want = batch.len() - base;
        let slots = &mut batch.packets_mut()[base..];
        for (i, p) in slots.iter_mut().enumerate() {
            let area = p.recv_area();
            m.iov[i] = [
                libc::iovec { iov_base: m.vnet[i].as_mut_ptr().cast(), iov_len: VNET_HDR_LEN },
                libc::iovec { iov_base: area.as_mut_ptr().cast(), iov_len: area.len() },
            ];
            let msg = &mut m.msgs[i];
            msg.msg_hdr.msg_name = (&mut m.addrs[i] as *mut libc::sockaddr_ll).cast();
            msg.msg_hdr.msg_namelen = core::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            msg.msg_hdr.msg_iov = m.iov[i].as_mut_ptr();
            msg.msg_hdr.msg_iovlen = 2;
            msg.msg_hdr.msg_control = m.ctrl[i].0.as_mut_ptr().cast();
            msg.msg_hdr.msg_controllen = core::mem::size_of::<CmsgBuf>() as _;
            msg.msg_hdr.msg_flags = 0;
            msg.msg_len = 0;
        }
        // SAFETY: the first `want` entries of `msgs` point at live buffers: the scratch's vnet
        // slots, addresses and control buffers, and the receive areas of the batch's slots,
        // which stay borrowed (through `slots`) until after the call.
        let r = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                m.msgs.as_mut_ptr(),
                want as libc::c_uint,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                core::ptr::null_mut(),
            )
        };
        m.taken = 0;
        let got = if r < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => 0,
                Some(libc::ENETDOWN) | Some(libc::EINVAL) => {
                    // EINVAL: a frame whose offload state has no virtio-net encoding was
                    // dropped by the kernel (taken off the queue); ENETDOWN: the link went
                    // down (reported once, nothing taken). Both transient.
                    self.stats.rx_errors += 1;
                    m.taken = usize::from(e.raw_os_error() == Some(libc::EINVAL));
                    0
                }
                _ => {
                    self.stats.rx_errors += 1;
                    for _ in 0..want {
                        batch.pop_slot();
                    }
                    return Err(e);
                }
            }
        } else {
            usize::try_from(r).unwrap_or(0).min(want)
        };
        m.taken = m.taken.max(got);

        // Keep the good frames at the front of the new slots; drop the rest.
        let mut kept = 0;
        for i in 0..got {
            let msg = &m.msgs[i];
            let len = msg.msg_len as usize;
            let ok = if m.addrs[i].sll_pkttype == PACKET_OUTGOING {
                self.stats.rx_outgoing += 1;
                None
            } else if msg.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                self.stats.rx_truncated += 1;
                None
            } else if len < VNET_HDR_LEN {
                self.stats.rx_bad_vnet += 1;
                None
            } else {
                let tag = vlan_tag(msg).as_ref().and_then(VlanTag::from_auxdata);
                match frame_offload(&m.vnet[i], tag) {
                    Ok(off) => Some((off, len - VNET_HDR_LEN, tag)),
                    Err(()) => {
                        self.stats.rx_bad_vnet += 1;
                        None
                    }
                }
            };
            let Some((off, flen, tag)) = ok else { continue };
            let slots = &mut batch.packets_mut()[base..];
            slots.swap(kept, i);
            let p = &mut slots[kept];
            if p.set_len(flen).is_err() {
                self.stats.rx_truncated += 1;
                continue;
            }
            if finish_rx(&mut self.stats, now, p, off, tag) {
                kept += 1;
            }
        }
        for _ in kept..want {
            batch.pop_slot();
        }
        Ok(kept)
    }

    /// Send the live packets of `batch` with `sendmmsg`; returns how many the kernel took
    /// (frames it refused are marked in `refused`).
    fn send_mmsg(&mut self, batch: &mut Batch, refused: &mut Refused) -> usize {
        let Some(m) = self.mmsg.as_mut() else { return 0 };
        let mut sent = 0;
        let mut full_waits = 0;
        for (c, chunk) in batch.packets_mut().chunks_mut(BURST).enumerate() {
            let n = chunk.len();
            for (i, p) in chunk.iter_mut().enumerate() {
                let h = VnetHdr::from_offload(&p.meta.offload, p.data());
                m.vnet[i] = h.to_bytes();
                let data = p.data_mut();
                m.iov[i] = [
                    libc::iovec { iov_base: m.vnet[i].as_mut_ptr().cast(), iov_len: VNET_HDR_LEN },
                    libc::iovec { iov_base: data.as_mut_ptr().cast(), iov_len: data.len() },
                ];
                let msg = &mut m.msgs[i];
                msg.msg_hdr.msg_name = core::ptr::null_mut();
                msg.msg_hdr.msg_namelen = 0;
                msg.msg_hdr.msg_iov = m.iov[i].as_mut_ptr();
                msg.msg_hdr.msg_iovlen = 2;
                msg.msg_hdr.msg_control = core::ptr::null_mut();
                msg.msg_hdr.msg_controllen = 0;
                msg.msg_hdr.msg_flags = 0;
                msg.msg_len = 0;
            }
            let mut idx = 0;
            while idx < n {
                // SAFETY: entries idx..n of `msgs` point at the scratch's vnet slots and at
                // the frames of `chunk`, all live and borrowed for the duration of the call.
                let r = unsafe {
                    libc::sendmmsg(
                        self.fd.as_raw_fd(),
                        m.msgs.as_mut_ptr().add(idx),
                        (n - idx) as libc::c_uint,
                        libc::MSG_DONTWAIT,
                    )
                };
                if r > 0 {
                    let r = (r as usize).min(n - idx);
                    for p in &chunk[idx..idx + r] {
                        self.stats.tx_packets += 1;
                        self.stats.tx_bytes += p.len() as u64;
                        if p.meta.offload.gso.is_some() {
                            self.stats.tx_gso += 1;
                        }
                    }
                    idx += r;
                    sent += r;
                    continue;
                }
                if r == 0 {
                    // Nothing taken and no error to read: stop rather than spin.
                    self.stats.tx_full += 1;
                    return sent;
                }
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => {}
                    Some(libc::EAGAIN) | Some(libc::ENOBUFS) if full_waits < TX_FULL_WAITS => {
                        // The socket buffer or the device queue is full: give the kernel a
                        // moment, bounded, then let the caller count the rest as drops.
                        full_waits += 1;
                        sys::poll::wait_writable(
                            self.fd.as_raw_fd(),
                            std::time::Duration::from_millis(1),
                        );
                    }
                    Some(libc::EAGAIN) | Some(libc::ENOBUFS) => {
                        self.stats.tx_full += 1;
                        return sent;
                    }
                    _ => {
                        // This frame was refused (bad metadata, too large, link down): skip
                        // it and go on with the next.
                        self.stats.tx_errors += 1;
                        refused.mark(c * BURST + idx);
                        idx += 1;
                    }
                }
            }
        }
        sent
    }
}

/// Type and flag bits of the fanout groups snic makes: hash, and (when `ignore_outgoing`)
/// leave transmitted frames out. No defragmentation: fragments pass as they are.
fn fanout_type_flags(ignore_outgoing: bool) -> libc::c_int {
    let io = if ignore_outgoing { PACKET_FANOUT_FLAG_IGNORE_OUTGOING } else { 0 };
    PACKET_FANOUT_HASH | io
}

/// Set up and map the `TPACKET_V3` rings of socket `fd` (before it is bound).
/// Set up (when `configure`; an adopted socket has its rings already) and map the rings of
/// socket `fd`.
fn setup_rings(
    fd: RawFd,
    ifname: &str,
    sizes: &RingSizes,
    configure: bool,
) -> io::Result<Box<Rings>> {
    // SAFETY: sysconf has no memory effects.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let bs = sizes.rx_block_size;
    if bs == 0 || !bs.is_multiple_of(page) || bs > u32::MAX as usize || sizes.rx_block_nr == 0 {
        return Err(invalid(
            ifname,
            format!("receive ring: block size {bs} must be a non-zero multiple of {page}"),
        ));
    }
    if (sizes.tx_ring && sizes.tx_frame_nr == 0) || sizes.rx_block_nr > u32::MAX as usize {
        return Err(invalid(ifname, "ring sizes must be non-zero".into()));
    }
    if sizes.rx_v2 {
        return setup_v2_ring(fd, ifname, sizes, configure);
    }
    let tx_fpb = TX_BLOCK_SIZE / TX_FRAME_SIZE;
    let tx_block_nr = if sizes.tx_ring { sizes.tx_frame_nr.div_ceil(tx_fpb) } else { 0 };
    let tx_frame_nr = tx_block_nr * tx_fpb;
    if configure && setsockopt_int(fd, SOL_PACKET, PACKET_VERSION, TPACKET_V3).is_err() {
        return Err(os_err("PACKET_VERSION TPACKET_V3", ifname));
    }
    // A frame the kernel cannot send is skipped, not a stop of the whole transmit ring.
    if configure && setsockopt_int(fd, SOL_PACKET, PACKET_LOSS, 1).is_err() {
        return Err(os_err("PACKET_LOSS", ifname));
    }
    // The frame size is not used by TPACKET_V3 receive, but must divide the block.
    let rx_frame = 2048.min(bs);
    let rx = TpacketReq3 {
        tp_block_size: bs as u32,
        tp_block_nr: sizes.rx_block_nr as u32,
        tp_frame_size: rx_frame as u32,
        tp_frame_nr: ((bs / rx_frame) * sizes.rx_block_nr) as u32,
        tp_retire_blk_tov: sizes.rx_block_timeout_ms,
        ..TpacketReq3::default()
    };
    if configure && sock::setsockopt_value(fd, SOL_PACKET, PACKET_RX_RING, &rx).is_err() {
        return Err(os_err(&format!("PACKET_RX_RING {rx:?}"), ifname));
    }
    let tx = TpacketReq3 {
        tp_block_size: TX_BLOCK_SIZE as u32,
        tp_block_nr: tx_block_nr as u32,
        tp_frame_size: TX_FRAME_SIZE as u32,
        tp_frame_nr: tx_frame_nr as u32,
        ..TpacketReq3::default()
    };
    if configure
        && tx_block_nr > 0
        && sock::setsockopt_value(fd, SOL_PACKET, PACKET_TX_RING, &tx).is_err()
    {
        return Err(os_err(&format!("PACKET_TX_RING {tx:?}"), ifname));
    }
    let rx_len = bs * sizes.rx_block_nr;
    let map_len = rx_len + TX_BLOCK_SIZE * tx_block_nr;
    // Receive ring first, then transmit, as the kernel lays them out.
    let map = map_rings(fd, map_len).ok_or_else(|| os_err("mmap of the rings", ifname))?;
    Ok(Box::new(Rings {
        map,
        map_len,
        rx_block_size: bs,
        rx_slots: sizes.rx_block_nr,
        rx_slot_len: bs,
        rx_slots_per_block: 1,
        rx_status_off: tpacket::BLOCK_STATUS_OFFSET,
        rx_v2: false,
        rx_cur: 0,
        rx_pos: None,
        tx_base: rx_len,
        tx_block_size: TX_BLOCK_SIZE,
        tx_frame_size: TX_FRAME_SIZE,
        tx_frames_per_block: tx_fpb,
        tx_frame_nr,
        tx_head: 0,
        tx_unkicked: false,
        tx_len: vec![0; tx_frame_nr],
    }))
}

/// Set up and map a `TPACKET_V2` receive ring of socket `fd` (before it is bound): 1 MiB
/// blocks of `rx_v2_slot_size`-byte slots. No transmit ring.
fn setup_v2_ring(
    fd: RawFd,
    ifname: &str,
    sizes: &RingSizes,
    configure: bool,
) -> io::Result<Box<Rings>> {
    if sizes.tx_ring {
        return Err(invalid(ifname, "a TPACKET_V2 receive ring transmits with sendmmsg".into()));
    }
    let slot = sizes.rx_v2_slot_size;
    if !slot.is_multiple_of(tpacket::TPACKET_ALIGNMENT)
        || !(V2_HEADROOM + 64..=V2_BLOCK).contains(&slot)
    {
        return Err(invalid(
            ifname,
            format!("TPACKET_V2 slot of {slot} bytes: a multiple of 16 from 192 to 1 MiB"),
        ));
    }
    let per = V2_BLOCK / slot;
    let block_nr = sizes.rx_v2_slots.max(1).div_ceil(per);
    let slots = block_nr * per;
    if u32::try_from(V2_BLOCK * block_nr).is_err() {
        return Err(invalid(ifname, format!("TPACKET_V2 ring of {slots} slots is too large")));
    }
    if configure && setsockopt_int(fd, SOL_PACKET, PACKET_VERSION, TPACKET_V2).is_err() {
        return Err(os_err("PACKET_VERSION TPACKET_V2", ifname));
    }
    // A frame longer than its slot is also queued whole on the socket, read with `recvmmsg`
    // (its stripped VLAN tag in `PACKET_AUXDATA`). Asked again of a handed-over socket (both
    // can be set on a live ring), whose build may not have asked: best effort there.
    for (opt, name) in
        [(PACKET_COPY_THRESH, "PACKET_COPY_THRESH"), (PACKET_AUXDATA, "PACKET_AUXDATA")]
    {
        if setsockopt_int(fd, SOL_PACKET, opt, 1).is_err() && configure {
            return Err(os_err(name, ifname));
        }
    }
    if configure {
        // The socket buffer holds a burst of super-packets.
        sock::set_buffer(fd, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, SOCKET_BUF_BYTES);
    }
    // The first four fields are `struct tpacket_req`, all the kernel reads for TPACKET_V2.
    let req = TpacketReq3 {
        tp_block_size: V2_BLOCK as u32,
        tp_block_nr: block_nr as u32,
        tp_frame_size: slot as u32,
        tp_frame_nr: slots as u32,
        ..TpacketReq3::default()
    };
    if configure && sock::setsockopt_value(fd, SOL_PACKET, PACKET_RX_RING, &req).is_err() {
        return Err(os_err(&format!("PACKET_RX_RING (TPACKET_V2) {req:?}"), ifname));
    }
    let map_len = V2_BLOCK * block_nr;
    let map =
        map_rings(fd, map_len).ok_or_else(|| os_err("mmap of the TPACKET_V2 ring", ifname))?;
    Ok(Box::new(Rings {
        map,
        map_len,
        rx_block_size: V2_BLOCK,
        rx_slots: slots,
        rx_slot_len: slot,
        rx_slots_per_block: per,
        rx_status_off: tpacket::V2_STATUS_OFFSET,
        rx_v2: true,
        rx_cur: 0,
        rx_pos: None,
        tx_base: map_len,
        tx_block_size: TX_BLOCK_SIZE,
        tx_frame_size: TX_FRAME_SIZE,
        tx_frames_per_block: 1,
        tx_frame_nr: 0,
        tx_head: 0,
        tx_unkicked: false,
        tx_len: Vec::new(),
    }))
}

/// The offload metadata of a received frame from its virtio-net header, with its offsets moved
/// past a VLAN tag that is put back.
fn frame_offload(vnet: &[u8], tag: Option<VlanTag>) -> Result<Offload, ()> {
    let shift = if tag.is_some() { VLAN_TAG_LEN as u16 } else { 0 };
    VnetHdr::parse(vnet).and_then(|h| h.shifted(shift)).and_then(|h| h.to_offload()).map_err(|_| ())
}

/// The last steps of receiving a frame into `p`: put the stripped tag back, set the metadata,
/// count. False (counted) when the tag could not be put back.
fn finish_rx(
    stats: &mut AfPacketStats,
    now: Instant,
    p: &mut PacketBuf,
    off: Offload,
    tag: Option<VlanTag>,
) -> bool {
    if let Some(tag) = tag {
        if insert_vlan_tag(p, tag).is_err() {
            stats.rx_vlan_lost += 1;
            return false;
        }
        stats.rx_vlan += 1;
    }
    p.meta.offload = off;
    p.meta.rx_time = now;
    stats.rx_packets += 1;
    stats.rx_bytes += p.len() as u64;
    if off.gso.is_some() {
        stats.rx_gso += 1;
    }
    true
}

/// Copy ring frame `f` of `block` into a new slot of `batch` (the caller checked that one is
/// free); false (counted) when it is dropped.
fn deliver_ring_frame(
    stats: &mut AfPacketStats,
    now: Instant,
    batch: &mut Batch,
    block: &[u8],
    f: &RxFrame,
) -> bool {
    if f.pkttype == PACKET_OUTGOING {
        stats.rx_outgoing += 1;
        return false;
    }
    if f.snaplen < f.len || f.snaplen > RX_FRAME_ROOM {
        stats.rx_truncated += 1;
        return false;
    }
    let tag = (f.status & TP_STATUS_VLAN_VALID != 0).then_some(VlanTag {
        tpid: if f.status & TP_STATUS_VLAN_TPID_VALID != 0 { f.vlan_tpid } else { ETH_P_8021Q },
        tci: f.vlan_tci,
    });
    let (vnet, data) = f.slices(block, VNET_HDR_LEN);
    let Ok(off) = frame_offload(vnet, tag) else {
        stats.rx_bad_vnet += 1;
        return false;
    };
    let Some(p) = batch.push_slot() else { return false };
    p.reserve_frame(data.len());
    p.recv_area()[..data.len()].copy_from_slice(data);
    if p.set_len(data.len()).is_err() || !finish_rx(stats, now, p, off, tag) {
        batch.pop_slot();
        return false;
    }
    true
}

/// The `PACKET_AUXDATA` control message of received message `hdr`, if any.
fn vlan_tag(msg: &libc::mmsghdr) -> Option<TpacketAuxdata> {
    let hdr = &msg.msg_hdr;
    let mut aux = None;
    // SAFETY: after `recvmmsg`, `hdr.msg_control` points at the scratch's control buffer of
    // this slot (live, owned by the port) and `hdr.msg_controllen` is the length the kernel
    // wrote there, at most the buffer's size; the CMSG_* walk stays inside that range. The
    // payload is read unaligned and only when the message is as long as a `tpacket_auxdata`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            let need = libc::CMSG_LEN(core::mem::size_of::<TpacketAuxdata>() as u32) as usize;
            if (*c).cmsg_level == SOL_PACKET
                && (*c).cmsg_type == PACKET_AUXDATA
                && (*c).cmsg_len as usize >= need
            {
                aux = Some(libc::CMSG_DATA(c).cast::<TpacketAuxdata>().read_unaligned());
                break;
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    aux
}

impl Port for AfPacketPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn handover(&mut self) -> Option<io::Result<PortHandover>> {
        Some(self.handover_state())
    }

    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let got = if self.rings.is_some() {
            // Frames marked on a full send buffer go out with the next chance.
            if self.rings.as_ref().is_some_and(|r| r.tx_unkicked) {
                self.kick();
            }
            self.recv_ring(now, batch)
        } else {
            self.recv_mmsg(now, batch, BURST)?
        };
        // PACKET_STATISTICS is one getsockopt: read it every STATS_EVERY receives, or sooner
        // when the socket has nothing (a busy loop polling an idle port reads it at most every
        // 16th time).
        self.since_stats += 1;
        if self.since_stats >= STATS_EVERY || (got == 0 && self.since_stats >= 16) {
            self.since_stats = 0;
            self.read_kernel_stats();
            if got == 0 {
                self.clear_socket_error();
            }
        }
        Ok(got)
    }

    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let mut refused = Refused::default();
        let sent = if self.rings.as_ref().is_some_and(|r| r.tx_frame_nr > 0) {
            self.send_ring(batch, &mut refused)
        } else {
            self.send_mmsg(batch, &mut refused)
        };
        refused.move_sent_first(batch, sent);
        self.stats.tx_dropped += (batch.len() - sent) as u64;
        Ok(sent)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    /// With a transmit ring: wake the kernel until every frame written into the ring has been
    /// sent, waiting at most 200 ms; frames still on the ring then did not leave and
    /// are counted so ([`AfPacketStats::tx_unsent`]). `sendmmsg` sends synchronously: nothing
    /// to do.
    fn flush(&mut self) -> io::Result<()> {
        if !self.uses_tx_ring() {
            return Ok(());
        }
        let deadline = std::time::Instant::now() + FLUSH_LIMIT;
        loop {
            let pending = self.tx_ring_pending().count();
            if pending == 0 || std::time::Instant::now() >= deadline {
                break;
            }
            if let Some(r) = self.rings.as_mut() {
                r.tx_unkicked = true;
            }
            self.kick();
            self.wait_writable(1);
        }
        let unsent: Vec<usize> = self.tx_ring_pending().collect();
        let Some(r) = self.rings.as_mut() else { return Ok(()) };
        for i in unsent {
            let len = core::mem::replace(&mut r.tx_len[i], TX_WRITTEN_OFF);
            self.stats.tx_packets = self.stats.tx_packets.saturating_sub(1);
            self.stats.tx_bytes = self.stats.tx_bytes.saturating_sub(u64::from(len));
            self.stats.tx_dropped += 1;
            self.stats.tx_unsent += 1;
        }
        Ok(())
    }

    fn caps(&self) -> PortCaps {
        // Ethernet header plus one VLAN tag beyond the MTU.
        // The kernel cuts a UDP GSO buffer after one `sendmmsg` entry or ring slot.
        PortCaps { gso: true, max_frame: self.mtu + 18, tunnel_gso: false, merges_udp_tunnel: true }
    }

    fn counters(&self) -> PortCounters {
        let s = self.stats();
        PortCounters {
            rx_packets: s.rx_packets,
            rx_bytes: s.rx_bytes,
            rx_errors: s.rx_bad_vnet
                + s.rx_truncated
                + s.rx_vlan_lost
                + s.rx_errors
                + s.rx_ring_lost,
            tx_packets: s.tx_packets,
            tx_bytes: s.tx_bytes,
            tx_dropped: s.tx_dropped,
            rx_kernel_drops: s.rx_kernel_drops,
            tx_ring_full: s.tx_ring_full,
            ..PortCounters::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_interface_is_a_clear_error() {
        let e = AfPacketPort::open("snicnosuch0").unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("afpacket:snicnosuch0: no such interface"), "{msg}");
    }

    #[test]
    fn rings_are_the_default_and_sizes_are_checked() {
        let o = AfPacketOptions::default();
        assert_eq!(o.mode, AfPacketMode::Ring(RingSizes::low_latency()));
        assert!(RingSizes::low_latency().rx_v2 && !RingSizes::default().rx_v2);
        assert!(o.promiscuous && o.fanout_group.is_none());
        // The default receive block takes a super-packet with its headers.
        assert!(RingSizes::default().rx_block_size > RX_FRAME_ROOM + 256);
        assert_eq!(
            AfPacketPort::open_queues("lo", 0, o).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn nul_in_name_is_invalid_input() {
        let e = AfPacketPort::open("eth\0x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    /// An untagged Ethernet/IPv4/UDP frame with a correct UDP checksum.
    fn udp_frame(payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(1000, 2000)
            .write(&mut f, payload)
            .unwrap();
        f
    }

    /// `frame` with `tag` inserted after the MAC addresses, built by hand.
    fn tagged(frame: &[u8], tag: VlanTag) -> Vec<u8> {
        let mut t = frame[..12].to_vec();
        t.extend_from_slice(&tag.tpid.to_be_bytes());
        t.extend_from_slice(&tag.tci.to_be_bytes());
        t.extend_from_slice(&frame[12..]);
        t
    }

    #[test]
    fn tpacket_auxdata_matches_the_kernel_layout() {
        // struct tpacket_auxdata { __u32 tp_status, tp_len, tp_snaplen; __u16 tp_mac, tp_net,
        // tp_vlan_tci, tp_vlan_tpid; } is 20 bytes; one control message of it fits the buffer.
        assert_eq!(core::mem::size_of::<TpacketAuxdata>(), 20);
        // SAFETY: CMSG_SPACE is a pure size computation.
        let space = unsafe { libc::CMSG_SPACE(20) } as usize;
        assert!(space <= core::mem::size_of::<CmsgBuf>(), "{space}");
        assert_eq!(core::mem::align_of::<CmsgBuf>() % core::mem::align_of::<libc::cmsghdr>(), 0);
    }

    #[test]
    fn auxdata_reports_the_stripped_tag() {
        let mut aux =
            TpacketAuxdata { tp_vlan_tci: 0xa064, tp_vlan_tpid: 0x88a8, ..Default::default() };
        // No VLAN_VALID: no tag, whatever the other fields say (TP_STATUS_USER | CSUMNOTREADY).
        aux.tp_status = 1 | 1 << 3;
        assert_eq!(VlanTag::from_auxdata(&aux), None);
        aux.tp_status = TP_STATUS_VLAN_VALID | TP_STATUS_VLAN_TPID_VALID;
        assert_eq!(VlanTag::from_auxdata(&aux), Some(VlanTag { tpid: 0x88a8, tci: 0xa064 }));
        // A kernel that does not report the TPID: 802.1Q.
        aux.tp_status = TP_STATUS_VLAN_VALID;
        assert_eq!(VlanTag::from_auxdata(&aux), Some(VlanTag { tpid: 0x8100, tci: 0xa064 }));
        // A priority tag (VLAN id 0, TCI 0) is still a tag.
        aux.tp_status = TP_STATUS_VLAN_VALID | TP_STATUS_VLAN_TPID_VALID;
        aux.tp_vlan_tci = 0;
        aux.tp_vlan_tpid = 0x8100;
        assert_eq!(VlanTag::from_auxdata(&aux), Some(VlanTag { tpid: 0x8100, tci: 0 }));
    }

    #[test]
    fn insert_vlan_tag_restores_single_and_double_tags() {
        let plain = udp_frame(b"hello vlan");
        let q = VlanTag { tpid: 0x8100, tci: 0x2064 };
        let mut p = PacketBuf::from_frame(&plain);
        let head = p.headroom();
        insert_vlan_tag(&mut p, q).unwrap();
        assert_eq!(p.data(), &tagged(&plain, q)[..]);
        assert_eq!(&p.data()[12..18], &[0x81, 0x00, 0x20, 0x64, 0x08, 0x00]);
        assert_eq!(p.headroom(), head - 4);
        // QinQ: the kernel strips the outer 802.1ad tag and leaves the inner 802.1Q one.
        let inner = tagged(&plain, q);
        let ad = VlanTag { tpid: 0x88a8, tci: 0x00c8 };
        let mut p = PacketBuf::from_frame(&inner);
        insert_vlan_tag(&mut p, ad).unwrap();
        assert_eq!(p.data(), &tagged(&inner, ad)[..]);
        assert_eq!(&p.data()[12..20], &[0x88, 0xa8, 0x00, 0xc8, 0x81, 0x00, 0x20, 0x64]);
    }

    #[test]
    fn insert_vlan_tag_refuses_without_room_and_leaves_the_frame() {
        let q = VlanTag { tpid: 0x8100, tci: 1 };
        let mut runt = PacketBuf::from_frame(&[0xaa; 11]);
        assert_eq!(insert_vlan_tag(&mut runt, q), Err(NoRoom { need: 12, have: 11 }));
        assert_eq!(runt.data(), &[0xaa; 11]);
        // Exactly the two addresses: the tag goes at the end.
        let mut macs = PacketBuf::from_frame(&[0xbb; 12]);
        insert_vlan_tag(&mut macs, q).unwrap();
        assert_eq!(&macs.data()[12..], &[0x81, 0, 0, 1]);
        let mut tight = PacketBuf::with_room(2, 64);
        let before = udp_frame(b"x");
        tight.recv_area()[..before.len()].copy_from_slice(&before);
        tight.set_len(before.len()).unwrap();
        assert_eq!(insert_vlan_tag(&mut tight, q), Err(NoRoom { need: 4, have: 2 }));
        assert_eq!(tight.data(), &before[..]);
    }

    #[test]
    fn a_large_received_frame_gets_its_tag_in_the_headroom() {
        // A receive slot as `recv` prepares it: a 64 KiB super-packet filling the receive
        // area leaves the tailroom at 0; the tag goes into the headroom, nothing is cut.
        let mut p = PacketBuf::new();
        p.reserve_frame(RX_FRAME_ROOM);
        let n = p.recv_area().len();
        assert!(n >= RX_FRAME_ROOM);
        for (i, b) in p.recv_area().iter_mut().enumerate() {
            *b = i as u8;
        }
        p.set_len(n).unwrap();
        assert_eq!(p.tailroom(), 0);
        insert_vlan_tag(&mut p, VlanTag { tpid: 0x8100, tci: 5 }).unwrap();
        assert_eq!(p.len(), n + 4);
        let d = p.data();
        assert_eq!(&d[..12], &(0..12).collect::<Vec<u8>>()[..]);
        assert_eq!(&d[12..16], &[0x81, 0, 0, 5]);
        assert_eq!(d[16], 12);
        assert_eq!(d[n + 3], (n - 1) as u8);
    }

    #[test]
    fn partial_checksum_lands_right_after_the_tag_and_shift() {
        // What `recv` does with a CHECKSUM_PARTIAL UDP frame whose tag the kernel stripped:
        // the virtio-net header counts csum_start (34 = 14 + 20) in the untagged frame; after
        // the tag is put back it must be 38, or completing the sum writes 4 bytes too early.
        let full = udp_frame(b"partial checksum payload");
        let mut partial = full.clone();
        // The pseudo-header sum stands in for the checksum, as the sending stack leaves it.
        let (src, dst, len) = ([10u8, 0, 0, 1], [10u8, 0, 0, 2], (full.len() - 34) as u16);
        let mut sum = 17u32 + u32::from(len);
        for w in src.chunks(2).chain(dst.chunks(2)) {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        partial[40..42].copy_from_slice(&(sum as u16).to_be_bytes());
        let hdr = VnetHdr {
            flags: crate::vnet::FLAG_NEEDS_CSUM,
            csum_start: 34,
            csum_offset: 6,
            hdr_len: 42,
            ..Default::default()
        };
        let tag = VlanTag { tpid: 0x8100, tci: 100 };
        let off = hdr.shifted(VLAN_TAG_LEN as u16).unwrap().to_offload().unwrap();
        assert_eq!(off.csum_partial, Some((38, 6)));
        let mut p = PacketBuf::from_frame(&partial);
        insert_vlan_tag(&mut p, tag).unwrap();
        p.meta.offload = off;
        snic_pipeline::offload::complete_checksum(&mut p).unwrap();
        assert_eq!(p.data(), &tagged(&full, tag)[..]);
    }

    #[test]
    fn packet_mreq_matches_the_kernel_layout() {
        // struct packet_mreq { int mr_ifindex; unsigned short mr_type, mr_alen; unsigned char
        // mr_address[8]; } is 16 bytes.
        assert_eq!(core::mem::size_of::<PacketMreq>(), 16);
    }
}
