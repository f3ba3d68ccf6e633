//! Packet buffers with headroom and tailroom, and batches that recycle them.
//!
//! A [`PacketBuf`] owns one byte buffer laid out as `[headroom | frame | tailroom]`. Prepending a
//! header (encapsulation) moves the start of the frame back into the headroom; stripping one
//! moves it forward. Neither copies the frame.
//!
//! A [`Batch`] owns up to [`MAX_BATCH`] buffers and reuses them: clearing a batch or removing a
//! packet keeps its buffer for the next packet, so the steady state allocates nothing.

use crate::meta::Metadata;
use core::fmt;

/// Most packets in one batch.
pub const MAX_BATCH: usize = 256;
/// Headroom reserved in front of every frame: enough for outer Ethernet + IPv6 + UDP + VXLAN/Geneve
/// with options, twice over.
pub const DEFAULT_HEADROOM: usize = 192;
/// Default room for the frame itself (a 1500-byte MTU frame with VLAN tags fits, with tailroom).
pub const DEFAULT_FRAME_ROOM: usize = 2048;

/// Not enough headroom or tailroom for the requested change. The buffer is left unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoRoom {
    /// Bytes requested.
    pub need: usize,
    /// Bytes available.
    pub have: usize,
}

impl fmt::Display for NoRoom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no room in packet buffer: need {} bytes, have {}", self.need, self.have)
    }
}

impl std::error::Error for NoRoom {}

/// One packet: a frame inside a buffer with headroom and tailroom, plus its metadata.
#[derive(Clone)]
pub struct PacketBuf {
    buf: Box<[u8]>,
    head: usize,
    len: usize,
    /// Bytes of XDP metadata right in front of the frame (`data_meta..data`), inside the
    /// headroom: `meta_len <= head`. Any other change of the frame's start forgets it.
    meta_len: usize,
    /// What the pipeline knows about this packet.
    pub meta: Metadata,
}

impl fmt::Debug for PacketBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacketBuf")
            .field("len", &self.len)
            .field("headroom", &self.head)
            .field("meta_len", &self.meta_len)
            .field("tailroom", &self.tailroom())
            .field("meta", &self.meta)
            .finish()
    }
}

impl Default for PacketBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl PacketBuf {
    /// An empty buffer with [`DEFAULT_HEADROOM`] and room for a [`DEFAULT_FRAME_ROOM`]-byte frame.
    pub fn new() -> Self {
        Self::with_room(DEFAULT_HEADROOM, DEFAULT_FRAME_ROOM)
    }

    /// An empty buffer with `headroom` bytes in front and room for a `frame_room`-byte frame.
    pub fn with_room(headroom: usize, frame_room: usize) -> Self {
        PacketBuf {
            buf: vec![0u8; headroom + frame_room].into_boxed_slice(),
            head: headroom,
            len: 0,
            meta_len: 0,
            meta: Metadata::default(),
        }
    }

    /// A buffer holding a copy of `frame`, with default headroom.
    pub fn from_frame(frame: &[u8]) -> Self {
        let mut p = Self::with_room(DEFAULT_HEADROOM, frame.len().max(DEFAULT_FRAME_ROOM));
        p.set_frame(frame);
        p
    }

    /// The frame bytes.
    pub fn data(&self) -> &[u8] {
        &self.buf[self.head..self.head + self.len]
    }

    /// The frame bytes, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.head..self.head + self.len]
    }

    /// Frame length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the frame is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes free in front of the frame.
    pub fn headroom(&self) -> usize {
        self.head
    }

    /// Bytes free after the frame.
    pub fn tailroom(&self) -> usize {
        self.buf.len() - self.head - self.len
    }

    /// Total buffer size (headroom + frame + tailroom).
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Empty the frame and reset the metadata, restoring [`DEFAULT_HEADROOM`] where the buffer
    /// is large enough. Keeps the allocation.
    pub fn reset(&mut self) {
        self.head = DEFAULT_HEADROOM.min(self.buf.len());
        self.len = 0;
        self.meta_len = 0;
        self.meta = Metadata::default();
    }

    /// Make sure at least `room` bytes fit after the headroom, reallocating (rarely: super-packets
    /// and jumbo frames) when they do not. The frame is emptied; the metadata is kept.
    pub fn reserve_frame(&mut self, room: usize) {
        if self.buf.len() < DEFAULT_HEADROOM + room {
            self.buf = vec![0u8; DEFAULT_HEADROOM + room].into_boxed_slice();
        }
        self.head = DEFAULT_HEADROOM;
        self.len = 0;
        self.meta_len = 0;
    }

    /// Replace the frame with a copy of `frame` (growing the buffer if needed). Metadata is kept.
    pub fn set_frame(&mut self, frame: &[u8]) {
        self.reserve_frame(frame.len());
        self.buf[self.head..self.head + frame.len()].copy_from_slice(frame);
        self.len = frame.len();
    }

    /// The writable area after the headroom where a port can receive a frame of up to the
    /// returned slice's length; follow with [`PacketBuf::set_len`].
    pub fn recv_area(&mut self) -> &mut [u8] {
        &mut self.buf[self.head..]
    }

    /// Set the frame length after receiving into [`PacketBuf::recv_area`].
    pub fn set_len(&mut self, len: usize) -> Result<(), NoRoom> {
        let have = self.buf.len() - self.head;
        if len > have {
            return Err(NoRoom { need: len, have });
        }
        self.len = len;
        Ok(())
    }

    /// Prepend `n` bytes (for a new outer header) and return them, zeroed. Never copies the frame.
    pub fn push_front(&mut self, n: usize) -> Result<&mut [u8], NoRoom> {
        if n > self.head {
            return Err(NoRoom { need: n, have: self.head });
        }
        self.head -= n;
        self.len += n;
        self.meta_len = 0;
        let front = &mut self.buf[self.head..self.head + n];
        front.fill(0);
        Ok(front)
    }

    /// Prepend a copy of `hdr` (a new outer header) and return the prepended bytes, for the
    /// caller to patch. Like [`PacketBuf::push_front`] but the headroom is not zeroed first,
    /// since every byte is overwritten by the copy. Never copies the frame.
    #[inline]
    pub fn push_front_from(&mut self, hdr: &[u8]) -> Result<&mut [u8], NoRoom> {
        let n = hdr.len();
        if n > self.head {
            return Err(NoRoom { need: n, have: self.head });
        }
        self.head -= n;
        self.len += n;
        self.meta_len = 0;
        let front = &mut self.buf[self.head..self.head + n];
        front.copy_from_slice(hdr);
        Ok(front)
    }

    /// Strip `n` bytes from the front of the frame (decapsulation).
    pub fn pull_front(&mut self, n: usize) -> Result<(), NoRoom> {
        if n > self.len {
            return Err(NoRoom { need: n, have: self.len });
        }
        self.head += n;
        self.len -= n;
        self.meta_len = 0;
        Ok(())
    }

    /// Append `n` zeroed bytes and return them.
    pub fn push_back(&mut self, n: usize) -> Result<&mut [u8], NoRoom> {
        let have = self.tailroom();
        if n > have {
            return Err(NoRoom { need: n, have });
        }
        let start = self.head + self.len;
        self.len += n;
        let back = &mut self.buf[start..start + n];
        back.fill(0);
        Ok(back)
    }

    /// Shorten the frame to `len` bytes (no-op if it is already shorter).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Bytes of metadata in front of the frame (XDP's `data_meta..data`); 0 when none.
    pub fn meta_len(&self) -> usize {
        self.meta_len
    }

    /// The metadata bytes in front of the frame.
    pub fn data_meta(&self) -> &[u8] {
        &self.buf[self.head - self.meta_len..self.head]
    }

    /// The whole buffer (headroom, frame, tailroom) with the frame's start, length and
    /// metadata length, for an engine that works in place (XDP). Follow with
    /// [`PacketBuf::set_window`] if the frame moved.
    pub fn raw_parts_mut(&mut self) -> (&mut [u8], usize, usize, usize) {
        (&mut self.buf, self.head, self.len, self.meta_len)
    }

    /// Sets the frame to `len` bytes at `head` in the buffer, with `meta_len` bytes of
    /// metadata in front of it. Refused (nothing changes) unless
    /// `meta_len <= head` and `head + len <= capacity`.
    pub fn set_window(&mut self, head: usize, len: usize, meta_len: usize) -> Result<(), NoRoom> {
        let cap = self.buf.len();
        if meta_len > head || head > cap || len > cap - head {
            return Err(NoRoom { need: head.saturating_add(len), have: cap });
        }
        self.head = head;
        self.len = len;
        self.meta_len = meta_len;
        Ok(())
    }
}

/// A batch of packets, with buffers recycled across uses.
///
/// Packets `0..len()` are live; buffers past `len()` are spares kept for reuse.
#[derive(Debug)]
pub struct Batch {
    bufs: Vec<PacketBuf>,
    len: usize,
    max: usize,
}

impl Default for Batch {
    fn default() -> Self {
        Self::new(MAX_BATCH)
    }
}

impl Batch {
    /// An empty batch that holds at most `max` packets (capped at [`MAX_BATCH`]). Buffers are
    /// allocated lazily, once, the first time a slot is used.
    pub fn new(max: usize) -> Self {
        let max = max.clamp(1, MAX_BATCH);
        Batch { bufs: Vec::with_capacity(max), len: 0, max }
    }

    /// Live packets.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there is no live packet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most packets this batch holds.
    pub fn max(&self) -> usize {
        self.max
    }

    /// True when no more packets fit.
    pub fn is_full(&self) -> bool {
        self.len >= self.max
    }

    /// Live packets as a slice.
    pub fn packets(&self) -> &[PacketBuf] {
        &self.bufs[..self.len]
    }

    /// Live packets as a mutable slice.
    pub fn packets_mut(&mut self) -> &mut [PacketBuf] {
        &mut self.bufs[..self.len]
    }

    /// Iterate the live packets.
    pub fn iter(&self) -> core::slice::Iter<'_, PacketBuf> {
        self.packets().iter()
    }

    /// Iterate the live packets mutably.
    pub fn iter_mut(&mut self) -> core::slice::IterMut<'_, PacketBuf> {
        self.packets_mut().iter_mut()
    }

    /// Take the next free slot: a reset buffer (frame empty, metadata default) that becomes live.
    /// `None` when the batch is full.
    pub fn push_slot(&mut self) -> Option<&mut PacketBuf> {
        if self.is_full() {
            return None;
        }
        if self.len == self.bufs.len() {
            self.bufs.push(PacketBuf::new());
        } else {
            self.bufs[self.len].reset();
        }
        self.len += 1;
        Some(&mut self.bufs[self.len - 1])
    }

    /// Give back the slot taken last by [`Batch::push_slot`] (for a receive that produced nothing).
    pub fn pop_slot(&mut self) {
        self.len = self.len.saturating_sub(1);
    }

    /// Append a copy of `frame`; returns the new packet, or `None` when the batch is full.
    pub fn push_frame(&mut self, frame: &[u8]) -> Option<&mut PacketBuf> {
        let p = self.push_slot()?;
        p.set_frame(frame);
        Some(p)
    }

    /// Append a packet by moving it in (its buffer joins this batch's pool). On a full batch the
    /// packet is handed back.
    #[allow(
        clippy::result_large_err,
        reason = "handing the packet back is the point; it is moved, not copied per byte"
    )]
    pub fn push(&mut self, pkt: PacketBuf) -> Result<(), PacketBuf> {
        if self.is_full() {
            return Err(pkt);
        }
        if self.len == self.bufs.len() {
            self.bufs.push(pkt);
        } else {
            self.bufs[self.len] = pkt;
        }
        self.len += 1;
        Ok(())
    }

    /// Append the packet in `pkt` by swapping buffers with this batch's next spare slot, so that
    /// neither side allocates in the steady state: afterwards `pkt` holds the spare (an old
    /// buffer; reset it before reuse). Returns `false`, leaving `pkt` untouched, when the batch
    /// is full. Allocates a fresh spare only when the batch has none to give back.
    pub fn push_swap(&mut self, pkt: &mut PacketBuf) -> bool {
        if self.is_full() {
            return false;
        }
        if self.len == self.bufs.len() {
            self.bufs.push(core::mem::take(pkt));
        } else {
            core::mem::swap(&mut self.bufs[self.len], pkt);
        }
        self.len += 1;
        true
    }

    /// Drop every live packet, keeping the buffers.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Keep the live packets for which `keep` returns true, in order; the others' buffers become
    /// spares. No allocation.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut PacketBuf) -> bool) {
        let mut w = 0;
        for r in 0..self.len {
            if keep(&mut self.bufs[r]) {
                if w != r {
                    self.bufs.swap(w, r);
                }
                w += 1;
            }
        }
        self.len = w;
    }

    /// Move the live packets for which `take` returns true into `out` (until `out` is full), in
    /// order, swapping buffers so neither side allocates in the steady state.
    pub fn drain_into(&mut self, out: &mut Batch, mut take: impl FnMut(&PacketBuf) -> bool) {
        let mut w = 0;
        for r in 0..self.len {
            if !out.is_full() && take(&self.bufs[r]) {
                if out.len == out.bufs.len() {
                    out.bufs.push(PacketBuf::new());
                }
                core::mem::swap(&mut self.bufs[r], &mut out.bufs[out.len]);
                out.len += 1;
            } else {
                if w != r {
                    self.bufs.swap(w, r);
                }
                w += 1;
            }
        }
        self.len = w;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_front_uses_headroom_without_copying() {
        let mut p = PacketBuf::from_frame(b"payload");
        let before = p.data().as_ptr();
        p.push_front(4).unwrap().copy_from_slice(b"hdr:");
        assert_eq!(p.data(), b"hdr:payload");
        // The payload did not move.
        assert_eq!(p.data()[4..].as_ptr(), before);
        p.pull_front(4).unwrap();
        assert_eq!(p.data(), b"payload");
        assert_eq!(p.push_front(10_000), Err(NoRoom { need: 10_000, have: DEFAULT_HEADROOM }));
        assert_eq!(p.data(), b"payload");
    }

    #[test]
    fn push_front_from_copies_over_stale_headroom() {
        let mut p = PacketBuf::from_frame(b"payload");
        let before = p.data().as_ptr();
        // Leave stale bytes in the headroom, then prepend over them.
        p.push_front(6).unwrap().copy_from_slice(b"XXXXXX");
        p.pull_front(6).unwrap();
        let front = p.push_front_from(b"hdr:").unwrap();
        assert_eq!(front, b"hdr:");
        front[3] = b'=';
        assert_eq!(p.data(), b"hdr=payload");
        assert_eq!(p.data()[4..].as_ptr(), before);
        let big = vec![1u8; DEFAULT_HEADROOM];
        assert_eq!(
            p.push_front_from(&big),
            Err(NoRoom { need: DEFAULT_HEADROOM, have: DEFAULT_HEADROOM - 4 })
        );
        assert_eq!(p.data(), b"hdr=payload");
    }

    #[test]
    fn set_window_moves_the_frame_and_keeps_metadata_in_the_headroom() {
        let mut p = PacketBuf::from_frame(b"0123456789");
        let (buf, head, len, meta) = p.raw_parts_mut();
        assert_eq!((len, meta), (10, 0));
        buf[head - 4..head].copy_from_slice(b"META");
        let cap = p.capacity();
        p.set_window(head + 2, 6, 6).unwrap();
        assert_eq!(p.data(), b"234567");
        assert_eq!(p.data_meta(), b"META01");
        assert_eq!(p.headroom(), head + 2);
        // Invalid windows change nothing.
        assert!(p.set_window(3, 1, 4).is_err());
        assert!(p.set_window(cap - 1, 2, 0).is_err());
        assert!(p.set_window(cap + 1, 0, 0).is_err());
        assert_eq!(p.data(), b"234567");
        assert_eq!(p.meta_len(), 6);
        // Moving the frame start by other means forgets the metadata.
        p.pull_front(1).unwrap();
        assert_eq!(p.meta_len(), 0);
        p.set_window(head, 4, 4).unwrap();
        p.push_front(1).unwrap();
        assert_eq!(p.meta_len(), 0);
        p.set_window(head, 4, 4).unwrap();
        p.reset();
        assert_eq!(p.meta_len(), 0);
        assert!(p.data_meta().is_empty());
    }

    #[test]
    fn headroom_is_at_least_128() {
        let p = PacketBuf::new();
        assert!(p.headroom() >= 128);
    }

    #[test]
    fn tail_ops() {
        let mut p = PacketBuf::from_frame(b"ab");
        p.push_back(2).unwrap().copy_from_slice(b"cd");
        assert_eq!(p.data(), b"abcd");
        p.truncate(1);
        assert_eq!(p.data(), b"a");
        assert!(p.pull_front(2).is_err());
    }

    #[test]
    fn large_frame_grows_buffer() {
        let big = vec![7u8; 65_000];
        let p = PacketBuf::from_frame(&big);
        assert_eq!(p.data(), &big[..]);
        assert!(p.headroom() >= 128);
    }

    #[test]
    fn batch_recycles_and_retains_in_order() {
        let mut b = Batch::new(8);
        for i in 0..8u8 {
            b.push_frame(&[i]).unwrap();
        }
        assert!(b.push_frame(&[9]).is_none());
        b.retain(|p| p.data()[0] % 2 == 0);
        let got: Vec<u8> = b.iter().map(|p| p.data()[0]).collect();
        assert_eq!(got, vec![0, 2, 4, 6]);
        let mut out = Batch::new(8);
        b.drain_into(&mut out, |p| p.data()[0] >= 4);
        assert_eq!(b.iter().map(|p| p.data()[0]).collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(out.iter().map(|p| p.data()[0]).collect::<Vec<_>>(), vec![4, 6]);
        b.clear();
        let slot = b.push_slot().unwrap();
        assert!(slot.is_empty());
    }

    #[test]
    fn push_swap_trades_buffers() {
        let mut b = Batch::new(2);
        b.push_frame(b"old").unwrap();
        b.clear();
        let mut p = PacketBuf::from_frame(b"new");
        assert!(b.push_swap(&mut p));
        assert_eq!(b.packets()[0].data(), b"new");
        assert_eq!(p.data(), b"old", "the spare came back");
        let mut q = PacketBuf::from_frame(b"q");
        assert!(b.push_swap(&mut q));
        let mut r = PacketBuf::from_frame(b"r");
        assert!(!b.push_swap(&mut r));
        assert_eq!(r.data(), b"r");
    }
}
