//! The port abstraction, and the counters every port keeps.

use core::fmt;
use serde::Serialize;
use snic_pipeline::{Batch, MAX_BATCH};
use snic_time::Instant;
use std::io;
use std::os::fd::RawFd;

/// What a port can take on transmit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortCaps {
    /// The port accepts super-packets (GSO) and a partial checksum, and passes them on as such
    /// (AF_PACKET or TAP with a virtio-net header). Ports without it get segmented, fully
    /// checksummed frames.
    pub gso: bool,
    /// Largest frame the port sends without segmentation (its MTU plus L2 header).
    pub max_frame: usize,
    /// The port also takes UDP-tunnel super-packets whole (a TAP device that negotiated
    /// `TUN_F_UDP_TUNNEL_GSO` with the 24-byte virtio-net header): a guest's TSO packet that the
    /// vSwitch encapsulated in VXLAN leaves as one write. Ports without it but with `gso` get a
    /// VXLAN one as UDP GSO buffers (counted as `tunnel_udp_gso`); the others, and NVGRE ones,
    /// are segmented in software (counted as `tunnel_segmented`).
    pub tunnel_gso: bool,
    /// Consecutive VXLAN datagrams of one flow are merged into one UDP GSO buffer before
    /// [`Port::send`] (counted in `gro_coalesced`): worth it only where a kernel cuts the
    /// buffer again after one system call (AF_PACKET). Ports that count what they send one
    /// frame per datagram (sinks, links of the testbed) leave it `false`. A capability, so a
    /// wrapper port that forwards [`Port::caps`] keeps it.
    pub merges_udp_tunnel: bool,
}

/// Counters a port keeps about itself. Drivers (runtime, testbed) read them with
/// [`Port::counters`] and merge them with [`PortCounters::merge`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct PortCounters {
    /// Frames handed to the pipeline.
    pub rx_packets: u64,
    /// Bytes of those frames.
    pub rx_bytes: u64,
    /// Input that could not become a frame (a bad pcap record, a short datagram, a receive
    /// error); each such event counts once.
    pub rx_errors: u64,
    /// Frames that left the port.
    pub tx_packets: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Frames the port was handed but could not send (full socket buffer, queue tail drop,
    /// write error, frame too large, full transmit ring).
    pub tx_dropped: u64,
    /// Frames the kernel dropped at the port's socket before snic could read them: AF_PACKET's
    /// `PACKET_STATISTICS` `tp_drops` (socket buffer or ring full), AF_XDP's `rx_dropped`.
    /// These are snic's drops: the frames reached the port and never entered the pipeline.
    pub rx_kernel_drops: u64,
    /// Frames the kernel dropped because snic's receive ring was full (AF_XDP `rx_ring_full`;
    /// TPACKET_V3 counts these in `rx_kernel_drops`).
    pub rx_ring_full: u64,
    /// Times the kernel found the AF_XDP fill ring empty (`rx_fill_ring_empty_descs`): frames
    /// that had no buffer to land in.
    pub rx_fill_empty: u64,
    /// Transmit attempts that found the transmit ring (or the AF_XDP completion ring) full.
    /// The frames they carried are also in `tx_dropped`.
    pub tx_ring_full: u64,
}

impl PortCounters {
    /// Add `other` into `self` (saturating).
    pub fn merge(&mut self, other: &PortCounters) {
        self.rx_packets = self.rx_packets.saturating_add(other.rx_packets);
        self.rx_bytes = self.rx_bytes.saturating_add(other.rx_bytes);
        self.rx_errors = self.rx_errors.saturating_add(other.rx_errors);
        self.tx_packets = self.tx_packets.saturating_add(other.tx_packets);
        self.tx_bytes = self.tx_bytes.saturating_add(other.tx_bytes);
        self.tx_dropped = self.tx_dropped.saturating_add(other.tx_dropped);
        self.rx_kernel_drops = self.rx_kernel_drops.saturating_add(other.rx_kernel_drops);
        self.rx_ring_full = self.rx_ring_full.saturating_add(other.rx_ring_full);
        self.rx_fill_empty = self.rx_fill_empty.saturating_add(other.rx_fill_empty);
        self.tx_ring_full = self.tx_ring_full.saturating_add(other.tx_ring_full);
    }

    /// Drops the kernel counted for this port (socket, ring and fill-ring drops on receive).
    pub fn kernel_drops(&self) -> u64 {
        self.rx_kernel_drops.saturating_add(self.rx_ring_full).saturating_add(self.rx_fill_empty)
    }

    /// Count one received frame of `len` bytes.
    pub fn count_rx(&mut self, len: usize) {
        self.rx_packets += 1;
        self.rx_bytes += len as u64;
    }

    /// Count one sent frame of `len` bytes.
    pub fn count_tx(&mut self, len: usize) {
        self.tx_packets += 1;
        self.tx_bytes += len as u64;
    }
}

impl fmt::Display for PortCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rx {} pkts {} bytes {} errors, tx {} pkts {} bytes {} dropped",
            self.rx_packets,
            self.rx_bytes,
            self.rx_errors,
            self.tx_packets,
            self.tx_bytes,
            self.tx_dropped
        )?;
        if self.kernel_drops() != 0 || self.tx_ring_full != 0 {
            write!(
                f,
                "; kernel: {} socket drops, {} ring full, {} fill ring empty, {} tx ring full",
                self.rx_kernel_drops, self.rx_ring_full, self.rx_fill_empty, self.tx_ring_full
            )?;
        }
        Ok(())
    }
}

/// A source and sink of frames.
///
/// `recv` appends received packets to `batch` (until it is full) and returns how many it added;
/// `Ok(0)` means nothing is ready now (ports never block in `recv`). `send` transmits the live
/// packets of `batch` in order and returns how many left; the caller counts the rest as drops.
/// `send` leaves `batch` as it was (the caller clears it).
pub trait Port: Send {
    /// Name for counters and logs (`"afpacket:veth0"`, `"pcap:in.pcap"`).
    fn name(&self) -> &str;
    /// Receive into the free slots of `batch`.
    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize>;
    /// Send the live packets of `batch`.
    fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize>;
    /// A file descriptor that becomes readable when `recv` may return packets, for `poll(2)`.
    fn poll_fd(&self) -> Option<RawFd> {
        None
    }
    /// For ports that live on simulated time (generators with a pace, virtual links): the
    /// earliest instant at which `recv` will return a packet, `None` when nothing is pending.
    /// An instant in the past means "now". Ports on real I/O return `None` and use `poll_fd`.
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    /// True when the port will never produce another packet (a pcap file read to its end).
    fn is_exhausted(&self) -> bool {
        false
    }
    /// What the port can take on transmit.
    fn caps(&self) -> PortCaps;
    /// Flush anything buffered (pcap writers).
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// The port's own counters. Ports that keep none report zeros.
    fn counters(&self) -> PortCounters {
        PortCounters::default()
    }
    /// Duplicates of the port's descriptors and its state, for another process to carry on
    /// with it (see [`crate::handover`]); called while the port is paused and flushed. `None`:
    /// this kind is not handed over (the new process opens it again). The port stays usable.
    /// Wrapper ports forward it.
    fn handover(&mut self) -> Option<io::Result<crate::handover::PortHandover>> {
        None
    }
}

/// The frames of one batch that a sender refused while it went on with later ones. A sender
/// that skips a refused frame and sends the next marks it here and, before it returns, calls
/// [`Refused::move_sent_first`], which keeps [`Port::send`]'s contract: the frames that left are
/// the first `sent` of the batch, in their order (callers count bytes and trace packets by
/// position).
#[derive(Debug, Clone, Copy, Default)]
pub struct Refused {
    bits: [u64; MAX_BATCH / 64],
    any: bool,
}

impl Refused {
    /// Packet `i` of the batch did not leave.
    pub fn mark(&mut self, i: usize) {
        if let Some(w) = self.bits.get_mut(i / 64) {
            *w |= 1 << (i % 64);
            self.any = true;
        }
    }

    /// True when packet `i` was marked.
    pub fn contains(&self, i: usize) -> bool {
        self.bits.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Move the `sent` packets that left to the front of `batch`, keeping their order. The
    /// sender tried the packets in order: those it sent are the first `sent` unmarked ones
    /// (packets after the last one it tried are unmarked too, and stay behind).
    pub fn move_sent_first(&self, batch: &mut Batch, sent: usize) {
        if !self.any {
            return;
        }
        let pkts = batch.packets_mut();
        let mut w = 0;
        for i in 0..pkts.len() {
            if w == sent {
                break;
            }
            if !self.contains(i) {
                pkts.swap(w, i);
                w += 1;
            }
        }
    }
}

impl fmt::Debug for dyn Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_adds_every_field() {
        let mut a = PortCounters { rx_packets: 1, rx_bytes: 10, ..Default::default() };
        let b = PortCounters {
            rx_packets: 2,
            rx_bytes: 20,
            rx_errors: 1,
            tx_packets: 3,
            tx_bytes: 30,
            tx_dropped: 4,
            rx_kernel_drops: 5,
            rx_ring_full: 6,
            rx_fill_empty: 7,
            tx_ring_full: 8,
        };
        a.merge(&b);
        assert_eq!(
            a,
            PortCounters {
                rx_packets: 3,
                rx_bytes: 30,
                rx_errors: 1,
                tx_packets: 3,
                tx_bytes: 30,
                tx_dropped: 4,
                rx_kernel_drops: 5,
                rx_ring_full: 6,
                rx_fill_empty: 7,
                tx_ring_full: 8,
            }
        );
        assert_eq!(a.kernel_drops(), 18);
        assert_eq!(
            a.to_string(),
            "rx 3 pkts 30 bytes 1 errors, tx 3 pkts 30 bytes 4 dropped; kernel: 5 socket drops, \
             6 ring full, 7 fill ring empty, 8 tx ring full"
        );
        let quiet = PortCounters { rx_packets: 1, ..Default::default() };
        assert_eq!(quiet.to_string(), "rx 1 pkts 0 bytes 0 errors, tx 0 pkts 0 bytes 0 dropped");
    }

    #[test]
    fn refused_frames_move_behind_the_sent_ones_in_order() {
        let mut b = Batch::new(MAX_BATCH);
        for i in 0..MAX_BATCH {
            b.push_frame(&[(i % 251) as u8, (i / 251) as u8]).unwrap();
        }
        let mut r = Refused::default();
        r.move_sent_first(&mut b, 3);
        assert_eq!(b.packets()[3].data(), [3, 0], "nothing marked: nothing moves");
        // Refused frames among the first 201 tried; the sender stopped after frame 200 (the
        // rest, never tried, are not marked and must stay behind).
        let refused = [0, 1, 63, 64, 200];
        for i in refused {
            r.mark(i);
        }
        // Out of range: ignored, never a panic.
        r.mark(MAX_BATCH);
        assert!(r.contains(63) && !r.contains(62) && !r.contains(MAX_BATCH));
        let sent = 201 - refused.len();
        r.move_sent_first(&mut b, sent);
        let tag = |p: &snic_pipeline::PacketBuf| {
            usize::from(p.data()[0]) + 251 * usize::from(p.data()[1])
        };
        let front: Vec<usize> = b.iter().take(sent).map(tag).collect();
        let want: Vec<usize> = (0..201).filter(|i| !refused.contains(i)).collect();
        assert_eq!(front, want);
        let mut back: Vec<usize> = b.iter().skip(sent).map(tag).collect();
        back.sort_unstable();
        let mut rest: Vec<usize> = refused.to_vec();
        rest.extend(201..MAX_BATCH);
        assert_eq!(back, rest);
    }
}
