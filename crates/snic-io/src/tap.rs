//! TAP port: Ethernet frames to and from a Linux TAP device, with virtio-net headers.
//!
//! The device is created (or attached to, when it already exists and is persistent) with the
//! `tun-rs` crate in layer-2 mode with its offload option on, which opens it with
//! `IFF_VNET_HDR` and enables `TUNSETOFFLOAD` (`TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6`, plus
//! `TUN_F_USO4 | TUN_F_USO6` where the kernel has them). Every frame read or written then
//! carries a [`VnetHdr`]: the kernel hands us TCP/UDP super-packets and partial checksums with
//! their metadata, and takes them back the same way ([`PortCaps::gso`] is true).
//!
//! Where the kernel has it (Linux 6.17+), the port then also negotiates UDP-tunnel GSO: header
//! size 24 (`TUNSETVNETHDRSZ`) and `TUN_F_UDP_TUNNEL_GSO` (`TUNSETOFFLOAD`), so that a VXLAN
//! super-packet (a guest's TSO packet encapsulated by the vSwitch) is written whole with the
//! tunnel header, and tunnelled super-packets the kernel sends come in whole
//! ([`PortCaps::tunnel_gso`], [`TapStats::tunnel_gso`]; see `crate::vnet`). Older kernels keep
//! the 10-byte header.
//!
//! The header is read into, and written from, the packet buffer's headroom, so neither direction
//! copies the frame. The descriptor is non-blocking; [`Port::poll_fd`] returns it.
//!
//! Needs root (`CAP_NET_ADMIN`) to create the device.
//!
//! A queue handed over by another snic process ([`TapPort::adopt`], a hitless upgrade) is read
//! and written through its descriptor directly: tun-rs adopts only descriptors without
//! virtio-net headers, and the header size and offloads are the descriptor's, kept by the
//! kernel, so nothing needs setting up again.

use crate::handover::{PortHandover, PortState, TapState};
use crate::port::{Port, PortCaps, PortCounters, Refused};
use crate::sys::tun;
use crate::vnet::{
    GSO_UDP_TUNNEL_IPV4, GSO_UDP_TUNNEL_IPV6, VNET_HDR_LEN, VNET_HDR_TNL_LEN, VnetHdr,
};
use snic_pipeline::Batch;
use snic_time::Instant;
use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use tun_rs::{DeviceBuilder, Layer, SyncDevice};

/// The device queue: one tun-rs opened, or one handed over by another process.
enum TapDev {
    Built(SyncDevice),
    Adopted { file: std::fs::File, ifname: String },
}

impl TapDev {
    fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            TapDev::Built(d) => d.recv(buf),
            TapDev::Adopted { file, .. } => (&*file).read(buf),
        }
    }
    fn send(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            TapDev::Built(d) => d.send(buf),
            TapDev::Adopted { file, .. } => (&*file).write(buf),
        }
    }
    fn mtu(&self) -> io::Result<u16> {
        match self {
            TapDev::Built(d) => d.mtu(),
            TapDev::Adopted { ifname, .. } => {
                let c = CString::new(ifname.as_str())
                    .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the name"))?;
                let m = crate::sys::sock::interface_mtu(&c)?;
                Ok(u16::try_from(m).unwrap_or(u16::MAX))
            }
        }
    }
    fn name(&self) -> io::Result<String> {
        match self {
            TapDev::Built(d) => d.name(),
            TapDev::Adopted { ifname, .. } => Ok(ifname.clone()),
        }
    }
    fn as_raw_fd(&self) -> RawFd {
        match self {
            TapDev::Built(d) => d.as_raw_fd(),
            TapDev::Adopted { file, .. } => file.as_raw_fd(),
        }
    }
}

/// Receive room per frame: a 64 KiB super-packet, its virtio-net header, Ethernet and VLAN.
pub const RX_FRAME_ROOM: usize = 65_536 + 64 + VNET_HDR_TNL_LEN;

/// Counters of one TAP port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TapStats {
    /// Frames received and handed to the pipeline.
    pub rx_packets: u64,
    /// Bytes of those frames (virtio-net headers excluded).
    pub rx_bytes: u64,
    /// Received super-packets.
    pub rx_gso: u64,
    /// Frames dropped for a short or invalid virtio-net header.
    pub rx_bad_vnet: u64,
    /// Reads that failed with something other than "nothing to read".
    pub rx_errors: u64,
    /// Frames written to the device.
    pub tx_packets: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Transmitted super-packets.
    pub tx_gso: u64,
    /// Frames the device refused, or that had no headroom for the virtio-net header.
    pub tx_errors: u64,
    /// Frames handed to `send` that did not leave (refused, or the device queue was full).
    pub tx_dropped: u64,
    /// UDP-tunnel super-packets received whole.
    pub rx_tunnel_gso: u64,
    /// UDP-tunnel super-packets written whole.
    pub tx_tunnel_gso: u64,
    /// Whether the device negotiated UDP-tunnel GSO (24-byte headers).
    pub tunnel_gso: bool,
}

/// How often a TAP port re-reads its device's MTU: the host may change it while the port runs
/// (`ip link set NAME mtu 9000` on a NIC's host netdev), and frames over the old MTU would be
/// dropped as too big.
const MTU_REFRESH: std::time::Duration = std::time::Duration::from_secs(1);

/// A TAP device port. See the module documentation.
pub struct TapPort {
    dev: TapDev,
    name: String,
    mtu: usize,
    /// When `mtu` was last read from the device (`None`: not since the port opened).
    mtu_read: Option<Instant>,
    /// Bytes of the virtio-net header in front of every frame: 10, or 24 with UDP-tunnel GSO.
    vnet_len: usize,
    stats: TapStats,
}

impl std::fmt::Debug for TapPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TapPort")
            .field("name", &self.name)
            .field("fd", &self.dev.as_raw_fd())
            .field("mtu", &self.mtu)
            .field("stats", &self.stats)
            .finish()
    }
}

impl TapPort {
    /// Create (or attach to) TAP device `name`, bring it up, and open it with virtio-net
    /// headers and offloads on, non-blocking.
    pub fn open(name: &str) -> io::Result<TapPort> {
        let dev = DeviceBuilder::new()
            .name(name)
            .layer(Layer::L2)
            .offload(true)
            .enable(true)
            .build_sync()
            .map_err(|e| Self::ctx(name, "creating the device", e))?;
        Self::from_device(name, dev)
    }

    /// Open `n` queues of multi-queue TAP device `name` (`IFF_MULTI_QUEUE`, created or attached
    /// to like [`TapPort::open`]): `/dev/net/tun` is opened `n` times on the same name, each
    /// with virtio-net headers and offloads, non-blocking. The kernel spreads the frames the
    /// host sends into the device over the queues by flow; any queue may send any frame. A
    /// device that exists without `IFF_MULTI_QUEUE` cannot be attached this way (the error
    /// says so). With `n == 1` this is [`TapPort::open`].
    pub fn open_queues(name: &str, n: usize) -> io::Result<Vec<TapPort>> {
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("tap:{name}: zero queues"),
            ));
        }
        if n == 1 {
            return Ok(vec![Self::open(name)?]);
        }
        let first = DeviceBuilder::new()
            .name(name)
            .layer(Layer::L2)
            .offload(true)
            .multi_queue(true)
            .enable(true)
            .build_sync()
            .map_err(|e| Self::ctx(name, "creating the multi-queue device", e))?;
        let mut devs = Vec::with_capacity(n);
        for _ in 1..n {
            devs.push(first.try_clone().map_err(|e| Self::ctx(name, "opening a queue", e))?);
        }
        devs.insert(0, first);
        devs.into_iter().map(|d| Self::from_device(name, d)).collect()
    }

    fn ctx(name: &str, what: &str, e: io::Error) -> io::Error {
        let hint = if e.kind() == io::ErrorKind::PermissionDenied {
            " (TAP devices need root or CAP_NET_ADMIN)"
        } else {
            ""
        };
        io::Error::new(e.kind(), format!("tap:{name}: {what}: {e}{hint}"))
    }

    /// A port over an opened device (or one queue of it).
    fn from_device(name: &str, dev: SyncDevice) -> io::Result<TapPort> {
        if !dev.tcp_gso() {
            return Err(io::Error::other(format!(
                "tap:{name}: the kernel refused IFF_VNET_HDR / TUNSETOFFLOAD"
            )));
        }
        dev.set_nonblocking(true).map_err(|e| Self::ctx(name, "set_nonblocking", e))?;
        let mtu = dev.mtu().map(usize::from).unwrap_or(1500);
        let tunnel_gso = negotiate_tunnel_gso(dev.as_raw_fd());
        let vnet_len = if tunnel_gso { VNET_HDR_TNL_LEN } else { VNET_HDR_LEN };
        Ok(TapPort {
            dev: TapDev::Built(dev),
            name: format!("tap:{name}"),
            mtu,
            mtu_read: None,
            vnet_len,
            stats: TapStats { tunnel_gso, ..TapStats::default() },
        })
    }

    /// Carry on with a TAP queue another process handed over (see [`crate::handover`]): `name`
    /// as in the port spec, the descriptor, and the header size it was set up with. Refuses
    /// a descriptor that is not a TAP queue.
    pub fn adopt(name: &str, fd: OwnedFd, state: &TapState) -> io::Result<TapPort> {
        if state.vnet_len != VNET_HDR_LEN && state.vnet_len != VNET_HDR_TNL_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("tap:{name}: virtio-net header of {} bytes", state.vnet_len),
            ));
        }
        if tun::vnet_hdr_size(fd.as_raw_fd()).ok() != Some(state.vnet_len as libc::c_int) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "tap:{name}: the handed descriptor is not a TAP queue with a {}-byte header",
                    state.vnet_len
                ),
            ));
        }
        let dev = TapDev::Adopted { file: std::fs::File::from(fd), ifname: state.ifname.clone() };
        let mtu = dev.mtu().map(usize::from).unwrap_or(1500);
        Ok(TapPort {
            dev,
            name: format!("tap:{name}"),
            mtu,
            mtu_read: None,
            vnet_len: state.vnet_len,
            stats: TapStats { tunnel_gso: state.tunnel_gso, ..TapStats::default() },
        })
    }

    /// This port's counters.
    pub fn stats(&self) -> TapStats {
        self.stats
    }

    /// The kernel's name of the device.
    pub fn ifname(&self) -> io::Result<String> {
        self.dev.name()
    }
}

/// Ask for UDP-tunnel GSO on TAP descriptor `fd`: the tunnel offload (with and, on kernels
/// without USO, without the UDP offloads), then the 24-byte header. Returns whether both took;
/// on failure the device is left with the 10-byte header and the offloads tun-rs set.
fn negotiate_tunnel_gso(fd: RawFd) -> bool {
    let tcp = tun::TUN_F_CSUM | tun::TUN_F_TSO4 | tun::TUN_F_TSO6;
    let uso = tun::TUN_F_USO4 | tun::TUN_F_USO6;
    let Some(base) = [tcp | uso, tcp]
        .into_iter()
        .find(|b| tun::set_offload(fd, b | tun::TUN_F_UDP_TUNNEL_GSO).is_ok())
    else {
        return false;
    };
    if tun::set_vnet_hdr_size(fd, VNET_HDR_TNL_LEN as libc::c_int).is_ok() {
        return true;
    }
    // Back to what the device had: the same offloads without the tunnel.
    let _ = tun::set_offload(fd, base);
    false
}

impl Port for TapPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn handover(&mut self) -> Option<io::Result<PortHandover>> {
        let fd = match &self.dev {
            TapDev::Built(d) => std::os::fd::AsFd::as_fd(d).try_clone_to_owned(),
            TapDev::Adopted { file, .. } => file.try_clone().map(OwnedFd::from),
        };
        let ifname = self.dev.name();
        Some(fd.and_then(|fd| {
            Ok(PortHandover {
                state: PortState::Tap(TapState {
                    ifname: ifname?,
                    vnet_len: self.vnet_len,
                    tunnel_gso: self.stats.tunnel_gso,
                }),
                fds: vec![fd],
            })
        }))
    }

    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        if self.mtu_read.is_none_or(|t| now.saturating_duration_since(t) >= MTU_REFRESH) {
            self.mtu_read = Some(now);
            // The device may be in another namespace (tests move it): keep the last value.
            if let Ok(m) = self.dev.mtu() {
                self.mtu = usize::from(m);
            }
        }
        let mut got = 0;
        while !batch.is_full() {
            let Some(p) = batch.push_slot() else { break };
            p.reserve_frame(RX_FRAME_ROOM);
            let n = match self.dev.recv(p.recv_area()) {
                Ok(n) => n,
                Err(e) => {
                    batch.pop_slot();
                    return match e.kind() {
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(got),
                        _ => {
                            self.stats.rx_errors += 1;
                            if got > 0 { Ok(got) } else { Err(e) }
                        }
                    };
                }
            };
            // The virtio-net header sits in front of the frame: parse it, then move the frame
            // start past it (into the headroom; nothing is copied).
            let vl = self.vnet_len;
            let off =
                match p.set_len(n).ok().and_then(|()| {
                    VnetHdr::parse_sized(p.data(), vl).and_then(|h| h.to_offload()).ok()
                }) {
                    // A tunnel super-packet must be what snic takes whole (VXLAN over IPv4).
                    Some(off)
                        if p.pull_front(vl).is_ok()
                            && off.gso.is_none_or(|g| {
                                g.tunnel.is_none() || VnetHdr::tunnel_whole(&off, p.data())
                            }) =>
                    {
                        off
                    }
                    _ => {
                        self.stats.rx_bad_vnet += 1;
                        batch.pop_slot();
                        continue;
                    }
                };
            p.meta.offload = off;
            p.meta.rx_time = now;
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += p.len() as u64;
            if let Some(g) = off.gso {
                self.stats.rx_gso += 1;
                if g.tunnel.is_some() {
                    self.stats.rx_tunnel_gso += 1;
                }
            }
            got += 1;
        }
        Ok(got)
    }

    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let mut sent = 0;
        let vl = self.vnet_len;
        let mut refused = Refused::default();
        for (i, p) in batch.iter_mut().enumerate() {
            let h = VnetHdr::from_offload(&p.meta.offload, p.data());
            let tunnel = h.gso_type & (GSO_UDP_TUNNEL_IPV4 | GSO_UDP_TUNNEL_IPV6) != 0;
            // A tunnelled super-packet the header cannot describe (the transmit path segments
            // those first) is refused, not sent as a plain one.
            let unfit = p.meta.offload.gso.is_some_and(|g| g.tunnel.is_some()) && !tunnel;
            if unfit || (tunnel && vl < VNET_HDR_TNL_LEN) {
                self.stats.tx_errors += 1;
                refused.mark(i);
                continue;
            }
            let bytes = h.to_tnl_bytes();
            let Ok(front) = p.push_front(vl) else {
                self.stats.tx_errors += 1;
                refused.mark(i);
                continue;
            };
            // The 10-byte header is the first 10 bytes of the tunnel one.
            front.copy_from_slice(&bytes[..vl]);
            let r = self.dev.send(p.data());
            // Restore the frame as it was; cannot fail, the bytes were just pushed.
            let _ = p.pull_front(vl);
            match r {
                Ok(_) => {
                    sent += 1;
                    self.stats.tx_packets += 1;
                    self.stats.tx_bytes += p.len() as u64;
                    if p.meta.offload.gso.is_some() {
                        self.stats.tx_gso += 1;
                    }
                    if tunnel {
                        self.stats.tx_tunnel_gso += 1;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.stats.tx_errors += 1;
                    refused.mark(i);
                }
            }
        }
        refused.move_sent_first(batch, sent);
        self.stats.tx_dropped += (batch.len() - sent) as u64;
        Ok(sent)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.dev.as_raw_fd())
    }

    fn caps(&self) -> PortCaps {
        PortCaps {
            gso: true,
            max_frame: self.mtu + 18,
            tunnel_gso: self.stats.tunnel_gso,
            merges_udp_tunnel: false,
        }
    }

    fn counters(&self) -> PortCounters {
        let s = &self.stats;
        PortCounters {
            rx_packets: s.rx_packets,
            rx_bytes: s.rx_bytes,
            rx_errors: s.rx_bad_vnet + s.rx_errors,
            tx_packets: s.tx_packets,
            tx_bytes: s.tx_bytes,
            tx_dropped: s.tx_dropped,
            ..PortCounters::default()
        }
    }
}
