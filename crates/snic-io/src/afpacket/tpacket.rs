//! TPACKET_V3 ring layouts and the walk over one receive block, sans-IO.
//!
//! A TPACKET_V3 receive ring is a sequence of blocks. Each block starts with a
//! `struct tpacket_block_desc` (48 bytes); the kernel fills it with frames, each a
//! `struct tpacket3_hdr` (48 bytes), a `struct sockaddr_ll` right after it, the virtio-net
//! header (when `PACKET_VNET_HDR` is on) and the frame at `tp_mac`. `tp_next_offset` chains the
//! frames of a block (0 on the last). When a block is full, or its timer (`tp_retire_blk_tov`)
//! fires, the kernel sets its `block_status` to `TP_STATUS_USER`; user space walks it and hands
//! it back with `TP_STATUS_KERNEL`.
//!
//! This module reads a block that user space owns, as bytes: every offset is checked against
//! the block, so a malformed block is a [`RingError`] (counted by the port), never a panic or
//! a read outside the block. The fields are in the host's byte order.

use core::fmt;

/// `TPACKET_ALIGNMENT`.
pub const TPACKET_ALIGNMENT: usize = 16;

/// Round `x` up to [`TPACKET_ALIGNMENT`].
pub const fn tpacket_align(x: usize) -> usize {
    (x + TPACKET_ALIGNMENT - 1) & !(TPACKET_ALIGNMENT - 1)
}

/// `sizeof(struct tpacket_block_desc)`.
pub const BLOCK_DESC_LEN: usize = 48;
/// `sizeof(struct tpacket3_hdr)`.
pub const TPACKET3_HDR_LEN: usize = 48;
/// `sizeof(struct sockaddr_ll)`.
pub const SOCKADDR_LL_LEN: usize = 20;
/// `TPACKET3_HDRLEN`: the aligned frame header and the address after it.
pub const TPACKET3_HDRLEN: usize = tpacket_align(TPACKET3_HDR_LEN) + SOCKADDR_LL_LEN;
/// Where the data of a transmit frame starts (without `PACKET_TX_HAS_OFF`): the kernel uses
/// `tp_hdrlen - sizeof(struct sockaddr_ll)`.
pub const TX_DATA_OFFSET: usize = TPACKET3_HDRLEN - SOCKADDR_LL_LEN;

/// Offset of `block_status` in the block descriptor.
pub const BLOCK_STATUS_OFFSET: usize = 8;
const BLOCK_NUM_PKTS: usize = 12;
const BLOCK_FIRST_PKT: usize = 16;
const BLOCK_LEN: usize = 20;

const FRAME_NEXT: usize = 0;
const FRAME_SNAPLEN: usize = 12;
const FRAME_LEN: usize = 16;
/// Offset of `tp_status` in `struct tpacket3_hdr` (also the transmit frames' status word).
pub const FRAME_STATUS_OFFSET: usize = 20;
const FRAME_MAC: usize = 24;
const FRAME_VLAN_TCI: usize = 32;
const FRAME_VLAN_TPID: usize = 36;
/// `sll_pkttype` in the `sockaddr_ll` after the aligned frame header.
const FRAME_PKTTYPE: usize = tpacket_align(TPACKET3_HDR_LEN) + 10;

/// `TP_STATUS_KERNEL`: the block (or transmit frame) belongs to the kernel / is free.
pub const TP_STATUS_KERNEL: u32 = 0;
/// `TP_STATUS_USER`: the block holds frames for user space.
pub const TP_STATUS_USER: u32 = 1;
/// `TP_STATUS_AVAILABLE`: a transmit frame is free.
pub const TP_STATUS_AVAILABLE: u32 = 0;
/// `TP_STATUS_SEND_REQUEST`: a transmit frame is ready to go.
pub const TP_STATUS_SEND_REQUEST: u32 = 1;
/// `TP_STATUS_VLAN_VALID` (per frame): the kernel stripped an outer VLAN tag.
pub const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
/// `TP_STATUS_VLAN_TPID_VALID` (per frame): `tp_vlan_tpid` is set.
pub const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;

/// A malformed receive block or frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingError {
    /// The block descriptor is cut off, or its length or first frame lies outside the block.
    BadBlock,
    /// A frame header at `off` lies (partly) outside the block.
    FrameOutside {
        /// Offset of the frame header in the block.
        off: usize,
    },
    /// The frame at `off` has its data (or the virtio-net header before it) outside the block
    /// or overlapping its own header.
    BadFrameData {
        /// Offset of the frame header in the block.
        off: usize,
    },
    /// The frame at `off` points at a next frame that is not after it, or outside the block,
    /// or says it is the last while the block counts more.
    BadNext {
        /// Offset of the frame header in the block.
        off: usize,
    },
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RingError::BadBlock => write!(f, "TPACKET_V3 block descriptor out of bounds"),
            RingError::FrameOutside { off } => write!(f, "frame header at {off} out of bounds"),
            RingError::BadFrameData { off } => write!(f, "frame at {off}: data out of bounds"),
            RingError::BadNext { off } => write!(f, "frame at {off}: bad next offset"),
        }
    }
}

impl std::error::Error for RingError {}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    let s = b.get(off..off.checked_add(2)?)?;
    Some(u16::from_ne_bytes([s[0], s[1]]))
}

/// The descriptor of a block that user space owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHdr {
    /// Frames in the block.
    pub num_pkts: u32,
    /// Offset of the first frame header from the block start.
    pub first: usize,
    /// Bytes of the block in use (the end of the last frame).
    pub len: usize,
}

/// Read the descriptor of `block` (the whole block as mapped). The length is clamped to the
/// block; a first frame outside it is an error unless the block is empty.
pub fn block_header(block: &[u8]) -> Result<BlockHdr, RingError> {
    let num_pkts = u32_at(block, BLOCK_NUM_PKTS).ok_or(RingError::BadBlock)?;
    let first = u32_at(block, BLOCK_FIRST_PKT).ok_or(RingError::BadBlock)? as usize;
    let len = u32_at(block, BLOCK_LEN).ok_or(RingError::BadBlock)? as usize;
    if len > block.len() {
        return Err(RingError::BadBlock);
    }
    if num_pkts > 0 && (first < BLOCK_DESC_LEN || first >= len) {
        return Err(RingError::BadBlock);
    }
    Ok(BlockHdr { num_pkts, first, len })
}

/// Frames a block whose walk failed still claimed, `claimed` by its descriptor, bounded by
/// what fits in `block_len` bytes (a garbled count is not believed past that), and at least
/// one: the error itself lost something.
pub fn frames_lost(claimed: u32, block_len: usize) -> u64 {
    let most = block_len / tpacket_align(TPACKET3_HDRLEN);
    u64::from(claimed).min(most as u64).max(1)
}

/// The frame count a block's descriptor claims, however malformed the rest is (0 when the
/// descriptor itself is cut off).
pub fn claimed_frames(block: &[u8]) -> u32 {
    u32_at(block, BLOCK_NUM_PKTS).unwrap_or(0)
}

/// One received frame, as its header describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxFrame {
    /// Offset of the frame's first byte (the Ethernet header) in the block.
    pub mac: usize,
    /// Bytes of the frame in the block.
    pub snaplen: usize,
    /// The frame's length on the wire (more than `snaplen` when the kernel cut it).
    pub len: usize,
    /// The frame's `tp_status` bits.
    pub status: u32,
    /// The stripped outer VLAN tag's TCI (valid with [`TP_STATUS_VLAN_VALID`]).
    pub vlan_tci: u16,
    /// Its TPID (valid with [`TP_STATUS_VLAN_TPID_VALID`]).
    pub vlan_tpid: u16,
    /// `sll_pkttype` (`PACKET_OUTGOING` for our own transmissions).
    pub pkttype: u8,
}

impl RxFrame {
    /// The frame bytes in `block`, and the `vnet_len` bytes in front of them (the virtio-net
    /// header). [`frame_at`] checked both ranges against the same block.
    pub fn slices<'b>(&self, block: &'b [u8], vnet_len: usize) -> (&'b [u8], &'b [u8]) {
        let vnet = block.get(self.mac - vnet_len..self.mac).unwrap_or(&[]);
        let data = block.get(self.mac..self.mac + self.snaplen).unwrap_or(&[]);
        (vnet, data)
    }
}

/// Read the frame header at `off` of `block` (whose descriptor is `hdr`), with `vnet_len`
/// bytes of virtio-net header in front of each frame. Returns the frame and the offset of the
/// next one (`None` for the last). `remaining` is how many frames the block still counts,
/// this one included: a frame that says it is the last while more are counted is an error.
pub fn frame_at(
    block: &[u8],
    hdr: &BlockHdr,
    off: usize,
    remaining: u32,
    vnet_len: usize,
) -> Result<(RxFrame, Option<usize>), RingError> {
    let end = hdr.len.min(block.len());
    let outside = RingError::FrameOutside { off };
    if off < BLOCK_DESC_LEN || off.checked_add(TPACKET3_HDRLEN).is_none_or(|e| e > end) {
        return Err(outside);
    }
    let f = &block[off..end];
    let next = u32_at(f, FRAME_NEXT).ok_or(outside)? as usize;
    let snaplen = u32_at(f, FRAME_SNAPLEN).ok_or(outside)? as usize;
    let len = u32_at(f, FRAME_LEN).ok_or(outside)? as usize;
    let status = u32_at(f, FRAME_STATUS_OFFSET).ok_or(outside)?;
    let mac = usize::from(u16_at(f, FRAME_MAC).ok_or(outside)?);
    let vlan_tci = u32_at(f, FRAME_VLAN_TCI).ok_or(outside)? as u16;
    let vlan_tpid = u16_at(f, FRAME_VLAN_TPID).ok_or(outside)?;
    let pkttype = *f.get(FRAME_PKTTYPE).ok_or(outside)?;
    // The virtio-net header sits right before the frame and after the header and address.
    let bad_data = RingError::BadFrameData { off };
    if mac < TPACKET3_HDRLEN + vnet_len || mac.checked_add(snaplen).is_none_or(|e| e > f.len()) {
        return Err(bad_data);
    }
    let next_off = if next == 0 {
        if remaining > 1 {
            return Err(RingError::BadNext { off });
        }
        None
    } else {
        // Strictly forward, past this frame's header, and inside the block.
        let n = off.checked_add(next).ok_or(RingError::BadNext { off })?;
        if next < TPACKET3_HDRLEN || n >= end {
            return Err(RingError::BadNext { off });
        }
        Some(n)
    };
    let frame = RxFrame { mac: off + mac, snaplen, len, status, vlan_tci, vlan_tpid, pkttype };
    Ok((frame, next_off))
}

/// `sizeof(struct tpacket2_hdr)`, already a multiple of [`TPACKET_ALIGNMENT`].
pub const TPACKET2_HDR_LEN: usize = 32;
/// `TPACKET2_HDRLEN`: the frame header and the address after it.
pub const TPACKET2_HDRLEN: usize = tpacket_align(TPACKET2_HDR_LEN) + SOCKADDR_LL_LEN;
/// Offset of `tp_status` in `struct tpacket2_hdr` (a frame of a `TPACKET_V2` ring).
pub const V2_STATUS_OFFSET: usize = 0;
const V2_LEN: usize = 4;
const V2_SNAPLEN: usize = 8;
const V2_MAC: usize = 12;
const V2_VLAN_TCI: usize = 24;
const V2_VLAN_TPID: usize = 26;
const V2_PKTTYPE: usize = tpacket_align(TPACKET2_HDR_LEN) + 10;

/// Read the frame of one `TPACKET_V2` receive slot that user space owns (its `tp_status` has
/// [`TP_STATUS_USER`]): `slot` is the whole slot, with `vnet_len` bytes of virtio-net header
/// in front of the frame. The returned offsets are from the slot's start; everything is
/// checked against the slot.
pub fn v2_frame(slot: &[u8], vnet_len: usize) -> Result<RxFrame, RingError> {
    let outside = RingError::FrameOutside { off: 0 };
    if slot.len() < TPACKET2_HDRLEN {
        return Err(outside);
    }
    let status = u32_at(slot, V2_STATUS_OFFSET).ok_or(outside)?;
    let len = u32_at(slot, V2_LEN).ok_or(outside)? as usize;
    let snaplen = u32_at(slot, V2_SNAPLEN).ok_or(outside)? as usize;
    let mac = usize::from(u16_at(slot, V2_MAC).ok_or(outside)?);
    let vlan_tci = u16_at(slot, V2_VLAN_TCI).ok_or(outside)?;
    let vlan_tpid = u16_at(slot, V2_VLAN_TPID).ok_or(outside)?;
    let pkttype = *slot.get(V2_PKTTYPE).ok_or(outside)?;
    if mac < TPACKET2_HDRLEN + vnet_len || mac.checked_add(snaplen).is_none_or(|e| e > slot.len()) {
        return Err(RingError::BadFrameData { off: 0 });
    }
    Ok(RxFrame { mac, snaplen, len, status, vlan_tci, vlan_tpid, pkttype })
}

/// Write the header of a transmit frame carrying `len` bytes (virtio-net header included) into
/// `frame` (the frame slot, at least [`TX_DATA_OFFSET`] bytes); the status word is left alone
/// (the caller publishes it last). Returns false when `frame` is too short.
pub fn write_tx_header(frame: &mut [u8], len: u32) -> bool {
    if frame.len() < TX_DATA_OFFSET {
        return false;
    }
    frame[FRAME_NEXT..FRAME_NEXT + 4].copy_from_slice(&0u32.to_ne_bytes());
    frame[FRAME_SNAPLEN..FRAME_SNAPLEN + 4].copy_from_slice(&len.to_ne_bytes());
    frame[FRAME_LEN..FRAME_LEN + 4].copy_from_slice(&len.to_ne_bytes());
    true
}

#[cfg(test)]
pub(crate) mod fake {
    //! A fake receive block, built the way the kernel fills one.
    use super::*;

    /// Put `v` at `off` of `b`.
    pub fn put32(b: &mut [u8], off: usize, v: u32) {
        b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    }

    /// Put `v` at `off` of `b`.
    pub fn put16(b: &mut [u8], off: usize, v: u16) {
        b[off..off + 2].copy_from_slice(&v.to_ne_bytes());
    }

    /// A `size`-byte block holding `frames` (virtio-net header, frame, status, pkttype), laid
    /// out like the kernel does (`tp_mac` after the aligned header, address and a 16-byte
    /// minimum MAC room; frames 16-byte aligned), status `TP_STATUS_USER`.
    pub fn block(size: usize, frames: &[(&[u8], &[u8], u32, u8)]) -> Vec<u8> {
        let mut b = vec![0u8; size];
        let mut off = BLOCK_DESC_LEN;
        let mut prev = None;
        for (vnet, data, status, pkttype) in frames {
            let netoff = tpacket_align(TPACKET3_HDRLEN + 16) + vnet.len();
            let mac = netoff - 14;
            let total = tpacket_align(mac + data.len());
            put32(&mut b, off + FRAME_SNAPLEN, data.len() as u32);
            put32(&mut b, off + FRAME_LEN, data.len() as u32);
            put32(&mut b, off + FRAME_STATUS_OFFSET, *status);
            put16(&mut b, off + FRAME_MAC, mac as u16);
            b[off + FRAME_PKTTYPE] = *pkttype;
            b[off + mac - vnet.len()..off + mac].copy_from_slice(vnet);
            b[off + mac..off + mac + data.len()].copy_from_slice(data);
            if let Some(p) = prev {
                put32(&mut b, p + FRAME_NEXT, (off - p) as u32);
            }
            prev = Some(off);
            off += total;
        }
        put32(&mut b, BLOCK_STATUS_OFFSET, TP_STATUS_USER);
        put32(&mut b, BLOCK_NUM_PKTS, frames.len() as u32);
        put32(&mut b, BLOCK_FIRST_PKT, BLOCK_DESC_LEN as u32);
        put32(&mut b, BLOCK_LEN, off as u32);
        b
    }

    /// Offsets of the descriptor's fields, for tests that break them.
    pub const NUM_PKTS: usize = BLOCK_NUM_PKTS;
    /// See [`NUM_PKTS`].
    pub const FIRST: usize = BLOCK_FIRST_PKT;
    /// See [`NUM_PKTS`].
    pub const LEN: usize = BLOCK_LEN;
    /// Offsets of a frame header's fields.
    pub const NEXT: usize = FRAME_NEXT;
    /// See [`NEXT`].
    pub const SNAPLEN: usize = FRAME_SNAPLEN;
    /// See [`NEXT`].
    pub const MAC: usize = FRAME_MAC;
}

/// Walk every frame of `block`: the frames in order, or the first error. For tests and the
/// fuzz-like property test; the port walks incrementally with [`frame_at`].
pub fn walk(block: &[u8], vnet_len: usize) -> Result<Vec<RxFrame>, RingError> {
    let hdr = block_header(block)?;
    let mut out = Vec::new();
    let mut off = hdr.first;
    let mut remaining = hdr.num_pkts;
    while remaining > 0 {
        let (f, next) = frame_at(block, &hdr, off, remaining, vnet_len)?;
        out.push(f);
        remaining -= 1;
        match next {
            Some(n) => off = n,
            None => break,
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::fake::*;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn kernel_layout_constants() {
        assert_eq!(TPACKET3_HDRLEN, 68);
        assert_eq!(TX_DATA_OFFSET, 48);
        assert_eq!(FRAME_PKTTYPE, 58);
    }

    #[test]
    fn walks_a_well_formed_block() {
        let (v1, v2) = ([1u8; 10], [2u8; 10]);
        let f1: Vec<u8> = (0..60u8).collect();
        let f2: Vec<u8> = (0..200).map(|i| i as u8 ^ 0x5a).collect();
        let b = block(4096, &[(&v1, &f1, 1, 0), (&v2, &f2, 1 | TP_STATUS_VLAN_VALID, 4)]);
        let frames = walk(&b, 10).unwrap();
        assert_eq!(frames.len(), 2);
        let (v, d) = frames[0].slices(&b, 10);
        assert_eq!((v, d), (&v1[..], &f1[..]));
        let (v, d) = frames[1].slices(&b, 10);
        assert_eq!((v, d), (&v2[..], &f2[..]));
        assert_eq!(frames[1].pkttype, 4);
        assert_ne!(frames[1].status & TP_STATUS_VLAN_VALID, 0);
        assert_eq!(frames[0].len, 60);
    }

    #[test]
    fn an_empty_block_has_no_frames() {
        let b = block(4096, &[]);
        assert_eq!(walk(&b, 10).unwrap(), vec![]);
    }

    #[test]
    fn malformed_blocks_are_errors() {
        let f: Vec<u8> = vec![7; 64];
        let good = block(4096, &[(&[0; 10], &f, 1, 0), (&[0; 10], &f, 1, 0)]);
        let second =
            BLOCK_DESC_LEN + tpacket_align(tpacket_align(TPACKET3_HDRLEN + 16) + 10 - 14 + 64);

        // Block length beyond the block.
        let mut b = good.clone();
        put32(&mut b, LEN, 5000);
        assert_eq!(walk(&b, 10), Err(RingError::BadBlock));
        // First frame inside the descriptor.
        let mut b = good.clone();
        put32(&mut b, FIRST, 8);
        assert_eq!(walk(&b, 10), Err(RingError::BadBlock));
        // Descriptor cut off.
        assert_eq!(walk(&good[..16], 10), Err(RingError::BadBlock));
        // Frame data beyond the block.
        let mut b = good.clone();
        put32(&mut b, BLOCK_DESC_LEN + SNAPLEN, 1 << 20);
        assert_eq!(walk(&b, 10), Err(RingError::BadFrameData { off: BLOCK_DESC_LEN }));
        // MAC offset inside the header (the virtio-net header would overlap it).
        let mut b = good.clone();
        put16(&mut b, BLOCK_DESC_LEN + MAC, 20);
        assert_eq!(walk(&b, 10), Err(RingError::BadFrameData { off: BLOCK_DESC_LEN }));
        // Next offset backwards (0 length would loop), or beyond the block.
        for next in [4u32, 0x7fff_ffff] {
            let mut b = good.clone();
            put32(&mut b, BLOCK_DESC_LEN + NEXT, next);
            assert_eq!(walk(&b, 10), Err(RingError::BadNext { off: BLOCK_DESC_LEN }), "{next}");
        }
        // More frames counted than chained.
        let mut b = good.clone();
        put32(&mut b, NUM_PKTS, 3);
        assert_eq!(walk(&b, 10), Err(RingError::BadNext { off: second }));
        // Fewer counted than chained: only those are read.
        let mut b = good.clone();
        put32(&mut b, NUM_PKTS, 1);
        assert_eq!(walk(&b, 10).unwrap().len(), 1);
    }

    #[test]
    fn tx_header_is_written_in_place() {
        let mut f = [0xffu8; 64];
        assert!(write_tx_header(&mut f, 1234));
        assert_eq!(u32_at(&f, FRAME_NEXT), Some(0));
        assert_eq!(u32_at(&f, FRAME_LEN), Some(1234));
        assert_eq!(u32_at(&f, FRAME_STATUS_OFFSET), Some(u32::MAX), "status left alone");
        assert!(!write_tx_header(&mut [0u8; 40], 1));
    }

    #[test]
    fn frames_lost_in_a_bad_block_are_counted_within_what_fits() {
        let f: Vec<u8> = vec![3; 100];
        let mut b = block(1024, &[(&[0; 10], &f, 1, 0), (&[0; 10], &f, 1, 0)]);
        assert_eq!(claimed_frames(&b), 2);
        assert_eq!(frames_lost(claimed_frames(&b), b.len()), 2);
        // A garbled count is capped at what the block could hold (1024 / 80), never 0.
        put32(&mut b, NUM_PKTS, u32::MAX);
        assert_eq!(frames_lost(claimed_frames(&b), b.len()), 12);
        assert_eq!(frames_lost(0, 1024), 1);
        assert_eq!(claimed_frames(&[0u8; 10]), 0, "a cut-off descriptor claims nothing");
    }

    /// A `TPACKET_V2` slot as the kernel fills it: header, address, virtio-net header at
    /// `mac - 10`, frame at `mac`.
    fn v2_slot(size: usize, mac: u16, vnet: &[u8; 10], frame: &[u8], status: u32) -> Vec<u8> {
        let mut s = vec![0u8; size];
        put32(&mut s, V2_STATUS_OFFSET, status);
        put32(&mut s, V2_LEN, frame.len() as u32);
        put32(&mut s, V2_SNAPLEN, frame.len() as u32);
        put16(&mut s, V2_MAC, mac);
        put16(&mut s, V2_VLAN_TCI, 0x0123);
        put16(&mut s, V2_VLAN_TPID, 0x88a8);
        s[V2_PKTTYPE] = 4;
        let m = usize::from(mac);
        s[m - 10..m].copy_from_slice(vnet);
        s[m..m + frame.len()].copy_from_slice(frame);
        s
    }

    #[test]
    fn reads_a_v2_slot_and_refuses_bad_ones() {
        assert_eq!(TPACKET2_HDRLEN, 52);
        assert_eq!(V2_PKTTYPE, 42);
        let frame: Vec<u8> = (0..60u8).collect();
        let s = v2_slot(256, 80, &[9; 10], &frame, TP_STATUS_USER | TP_STATUS_VLAN_VALID);
        let f = v2_frame(&s, 10).unwrap();
        assert_eq!((f.mac, f.snaplen, f.len, f.pkttype), (80, 60, 60, 4));
        assert_eq!((f.vlan_tci, f.vlan_tpid), (0x0123, 0x88a8));
        assert_ne!(f.status & TP_STATUS_VLAN_VALID, 0);
        let (vnet, data) = f.slices(&s, 10);
        assert_eq!((vnet, data), (&[9u8; 10][..], &frame[..]));
        // The frame past the slot, the virtio-net header over the slot header, a short slot.
        let mut bad = s.clone();
        put32(&mut bad, V2_SNAPLEN, 177);
        assert_eq!(v2_frame(&bad, 10), Err(RingError::BadFrameData { off: 0 }));
        let mut bad = s.clone();
        put16(&mut bad, V2_MAC, 60);
        assert_eq!(v2_frame(&bad, 10), Err(RingError::BadFrameData { off: 0 }));
        assert_eq!(v2_frame(&s[..40], 10), Err(RingError::FrameOutside { off: 0 }));
    }

    proptest! {
        /// Whatever the bytes of a block, walking it never panics and every frame it returns
        /// lies inside the block.
        #[test]
        fn any_block_walks_without_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..1024),
            num in 0u32..8, first in 0u32..1100, len in 0u32..1100,
        ) {
            let mut b = bytes;
            if b.len() >= BLOCK_DESC_LEN {
                put32(&mut b, NUM_PKTS, num);
                put32(&mut b, FIRST, first);
                put32(&mut b, LEN, len);
            }
            if let Ok(frames) = walk(&b, 10) {
                for f in frames {
                    prop_assert!(f.mac >= 10 && f.mac + f.snaplen <= b.len());
                }
            }
        }

        /// Any bytes as a `TPACKET_V2` slot: never a panic, a frame only inside the slot.
        #[test]
        fn any_v2_slot_reads_without_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            if let Ok(f) = v2_frame(&bytes, 10) {
                prop_assert!(f.mac >= TPACKET2_HDRLEN + 10 && f.mac + f.snaplen <= bytes.len());
                let (vnet, data) = f.slices(&bytes, 10);
                prop_assert_eq!((vnet.len(), data.len()), (10, f.snaplen));
            }
        }

        /// Random edits of a valid block's headers: never a panic, never out of bounds.
        #[test]
        fn edited_blocks_walk_without_panic(
            edits in proptest::collection::vec((0usize..600, any::<u32>()), 1..6),
        ) {
            let f: Vec<u8> = vec![3; 100];
            let mut b = block(1024, &[(&[0; 10], &f, 1, 0), (&[0; 10], &f, 1, 0), (&[0; 10], &f, 1, 0)]);
            for (off, v) in edits {
                put32(&mut b, off.min(1020), v);
            }
            if let Ok(frames) = walk(&b, 10) {
                for f in frames {
                    prop_assert!(f.mac >= 10 && f.mac + f.snaplen <= b.len());
                    let _ = f.slices(&b, 10);
                }
            }
        }
    }
}
