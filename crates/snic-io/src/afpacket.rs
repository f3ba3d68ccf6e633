//! AF_PACKET port: raw Ethernet frames on one Linux interface, with virtio-net headers.
//!
//! The socket is `SOCK_RAW` for all EtherTypes, bound to the interface's index, promiscuous,
//! non-blocking, and has `PACKET_VNET_HDR` on: every frame comes with a [`VnetHdr`], so the kernel
//! hands over GSO super-packets (up to 64 KiB, as a veth with default offloads makes them) and
//! frames whose L4 checksum is still partial, and takes them back the same way on transmit
//! ([`PortCaps::gso`] is true). `PACKET_IGNORE_OUTGOING` keeps our own transmissions out of the
//! receive path; frames the kernel still reports as outgoing are skipped and counted.
//!
//! Receive is batched with `recvmmsg` straight into the batch's buffers (each reserved for a
//! 64 KiB super-packet once, then reused), transmit with `sendmmsg`. Errors are counted in
//! [`AfPacketStats`], never panics.
//!
//! Needs root (`CAP_NET_RAW`); [`AfPacketPort::open`] says so in its error otherwise.
#![allow(unsafe_code, reason = "AF_PACKET sockets are driven through libc system calls")]

use crate::port::{Port, PortCaps, PortCounters};
use crate::sys::{self, sock, sock::setsockopt_int};
use crate::vnet::{VNET_HDR_LEN, VnetHdr};
use snic_pipeline::Batch;
use snic_time::Instant;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

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
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_OUTGOING: u8 = 4;
const SOCKET_BUF_BYTES: libc::c_int = 8 << 20;

const PACKET_FANOUT: libc::c_int = 18;
const PACKET_FANOUT_HASH: libc::c_int = 0;

/// Options of [`AfPacketPort::open_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AfPacketOptions {
    /// Put the interface in promiscuous mode (default true: a NIC port sees every frame).
    pub promiscuous: bool,
    /// Join this `PACKET_FANOUT` group in hash mode: every socket on the interface with the same
    /// group id gets a share of the frames, one flow always to the same socket (one port per
    /// worker). `None` (the default): this socket gets every frame.
    pub fanout_group: Option<u16>,
}

impl Default for AfPacketOptions {
    fn default() -> Self {
        AfPacketOptions { promiscuous: true, fanout_group: None }
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
    /// Frames dropped because they did not fit the receive buffer.
    pub rx_truncated: u64,
    /// Our own transmissions seen on receive and skipped.
    pub rx_outgoing: u64,
    /// `recvmmsg` calls that failed with something other than "nothing to read".
    pub rx_errors: u64,
    /// Frames the kernel accepted for transmission.
    pub tx_packets: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Transmitted frames that were super-packets.
    pub tx_gso: u64,
    /// Frames the kernel refused (bad offload metadata, too large, no buffer).
    pub tx_errors: u64,
    /// Times transmission stopped because the socket buffer stayed full.
    pub tx_full: u64,
    /// Frames handed to `send` that did not leave (refused, or left over when the buffer
    /// stayed full).
    pub tx_dropped: u64,
}

/// An AF_PACKET port on one interface. See the module documentation.
pub struct AfPacketPort {
    fd: OwnedFd,
    name: String,
    ifindex: libc::c_int,
    mtu: usize,
    stats: AfPacketStats,
    /// One virtio-net header slot per burst entry, for receive and transmit.
    vnet: Box<[[u8; VNET_HDR_LEN]; BURST]>,
    /// Scatter lists: [virtio-net header, frame] per burst entry.
    iov: Box<[[libc::iovec; 2]; BURST]>,
    /// Sender addresses on receive (for the packet type).
    addrs: Box<[libc::sockaddr_ll; BURST]>,
    msgs: Box<[libc::mmsghdr; BURST]>,
}

// SAFETY: the raw pointers inside `iov` and `msgs` are scratch space, rebuilt before every system
// call and never dereferenced otherwise; the port owns everything they point to while in use.
unsafe impl Send for AfPacketPort {}

impl std::fmt::Debug for AfPacketPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfPacketPort")
            .field("name", &self.name)
            .field("fd", &self.fd.as_raw_fd())
            .field("ifindex", &self.ifindex)
            .field("mtu", &self.mtu)
            .field("stats", &self.stats)
            .finish()
    }
}

fn os_err(what: &str, ifname: &str) -> io::Error {
    let e = io::Error::last_os_error();
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => " (AF_PACKET needs root or CAP_NET_RAW)",
        _ => "",
    };
    io::Error::new(e.kind(), format!("afpacket:{ifname}: {what}: {e}{hint}"))
}

impl AfPacketPort {
    /// Open an AF_PACKET port on interface `ifname` (see the module documentation). Fails with a
    /// clear error when the interface does not exist or the process lacks `CAP_NET_RAW`.
    pub fn open(ifname: &str) -> io::Result<AfPacketPort> {
        Self::open_with(ifname, AfPacketOptions::default())
    }

    /// [`AfPacketPort::open`] with options (promiscuous mode, fanout group).
    pub fn open_with(ifname: &str, opts: AfPacketOptions) -> io::Result<AfPacketPort> {
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

        // Protocol 0 until bound, so no frame of another interface is queued in between.
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
        // Large socket buffers: a burst of super-packets is megabytes. FORCE needs
        // CAP_NET_ADMIN; fall back to the capped variant.
        sock::set_buffer(raw, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, SOCKET_BUF_BYTES);
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
        if let Some(group) = opts.fanout_group {
            let arg = libc::c_int::from(group) | (PACKET_FANOUT_HASH << 16);
            if setsockopt_int(raw, SOL_PACKET, PACKET_FANOUT, arg).is_err() {
                return Err(os_err("PACKET_FANOUT", ifname));
            }
        }

        // Scratch for every burst; every pointer in them is set before each system call.
        let iov = Box::new([[sock::empty_iovec(); 2]; BURST]);
        let addrs = Box::new([sock::empty_sockaddr_ll(); BURST]);
        let msgs = Box::new([sock::empty_mmsghdr(); BURST]);
        Ok(AfPacketPort {
            fd,
            name: format!("afpacket:{ifname}"),
            ifindex,
            mtu,
            stats: AfPacketStats::default(),
            vnet: Box::new([[0; VNET_HDR_LEN]; BURST]),
            iov,
            addrs,
            msgs,
        })
    }

    /// This port's counters.
    pub fn stats(&self) -> AfPacketStats {
        self.stats
    }

    /// The interface's index.
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// The interface's MTU when the port was opened.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// Send the live packets of `batch`; returns how many the kernel took.
    fn send_frames(&mut self, batch: &mut Batch) -> usize {
        let mut sent = 0;
        let mut full_waits = 0;
        for chunk in batch.packets_mut().chunks_mut(BURST) {
            let n = chunk.len();
            for (i, p) in chunk.iter_mut().enumerate() {
                let h = VnetHdr::from_offload(&p.meta.offload, p.data());
                self.vnet[i] = h.to_bytes();
                let data = p.data_mut();
                self.iov[i] = [
                    libc::iovec {
                        iov_base: self.vnet[i].as_mut_ptr().cast(),
                        iov_len: VNET_HDR_LEN,
                    },
                    libc::iovec { iov_base: data.as_mut_ptr().cast(), iov_len: data.len() },
                ];
                let m = &mut self.msgs[i];
                m.msg_hdr.msg_name = core::ptr::null_mut();
                m.msg_hdr.msg_namelen = 0;
                m.msg_hdr.msg_iov = self.iov[i].as_mut_ptr();
                m.msg_hdr.msg_iovlen = 2;
                m.msg_hdr.msg_control = core::ptr::null_mut();
                m.msg_hdr.msg_controllen = 0;
                m.msg_hdr.msg_flags = 0;
                m.msg_len = 0;
            }
            let mut idx = 0;
            while idx < n {
                // SAFETY: entries idx..n of `msgs` point at the port's vnet slots and at the
                // frames of `chunk`, all live and borrowed for the duration of the call.
                let r = unsafe {
                    libc::sendmmsg(
                        self.fd.as_raw_fd(),
                        self.msgs.as_mut_ptr().add(idx),
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
                    Some(libc::EAGAIN) | Some(libc::ENOBUFS) if full_waits < 8 => {
                        // The socket buffer or the device queue is full: give the kernel a
                        // moment, bounded, then let the caller count the rest as drops.
                        full_waits += 1;
                        self.wait_writable(1);
                    }
                    Some(libc::EAGAIN) | Some(libc::ENOBUFS) => {
                        self.stats.tx_full += 1;
                        return sent;
                    }
                    _ => {
                        // This frame was refused (bad metadata, too large, link down): skip
                        // it and go on with the next.
                        self.stats.tx_errors += 1;
                        idx += 1;
                    }
                }
            }
        }
        sent
    }

    /// Wait up to `timeout_ms` for the socket to become writable.
    fn wait_writable(&self, timeout_ms: u64) {
        sys::poll::wait_writable(self.fd.as_raw_fd(), std::time::Duration::from_millis(timeout_ms));
    }
}

impl Port for AfPacketPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let base = batch.len();
        let want = (batch.max() - base).min(BURST);
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
            self.iov[i] = [
                libc::iovec { iov_base: self.vnet[i].as_mut_ptr().cast(), iov_len: VNET_HDR_LEN },
                libc::iovec { iov_base: area.as_mut_ptr().cast(), iov_len: area.len() },
            ];
            let m = &mut self.msgs[i];
            m.msg_hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_ll).cast();
            m.msg_hdr.msg_namelen = core::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            m.msg_hdr.msg_iov = self.iov[i].as_mut_ptr();
            m.msg_hdr.msg_iovlen = 2;
            m.msg_hdr.msg_control = core::ptr::null_mut();
            m.msg_hdr.msg_controllen = 0;
            m.msg_hdr.msg_flags = 0;
            m.msg_len = 0;
        }
        // SAFETY: the first `want` entries of `msgs` point at live buffers: the port's vnet
        // slots and addresses, and the receive areas of the batch's slots, which stay borrowed
        // (through `slots`) until after the call.
        let r = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                want as libc::c_uint,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                core::ptr::null_mut(),
            )
        };
        let got = if r < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => 0,
                Some(libc::ENETDOWN) | Some(libc::EINVAL) => {
                    // EINVAL: a frame whose offload state has no virtio-net encoding was
                    // dropped by the kernel; ENETDOWN: the link went down. Both transient.
                    self.stats.rx_errors += 1;
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

        // Keep the good frames at the front of the new slots; drop the rest.
        let mut kept = 0;
        for i in 0..got {
            let m = &self.msgs[i];
            let len = m.msg_len as usize;
            let ok = if self.addrs[i].sll_pkttype == PACKET_OUTGOING {
                self.stats.rx_outgoing += 1;
                None
            } else if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                self.stats.rx_truncated += 1;
                None
            } else if len < VNET_HDR_LEN {
                self.stats.rx_bad_vnet += 1;
                None
            } else {
                match VnetHdr::parse(&self.vnet[i]).and_then(|h| h.to_offload()) {
                    Ok(off) => Some((off, len - VNET_HDR_LEN)),
                    Err(_) => {
                        self.stats.rx_bad_vnet += 1;
                        None
                    }
                }
            };
            let Some((off, flen)) = ok else { continue };
            let slots = &mut batch.packets_mut()[base..];
            slots.swap(kept, i);
            let p = &mut slots[kept];
            if p.set_len(flen).is_err() {
                self.stats.rx_truncated += 1;
                continue;
            }
            p.meta.offload = off;
            p.meta.rx_time = now;
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += flen as u64;
            if off.gso.is_some() {
                self.stats.rx_gso += 1;
            }
            kept += 1;
        }
        for _ in kept..want {
            batch.pop_slot();
        }
        Ok(kept)
    }

    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let sent = self.send_frames(batch);
        self.stats.tx_dropped += (batch.len() - sent) as u64;
        Ok(sent)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    fn caps(&self) -> PortCaps {
        // Ethernet header plus one VLAN tag beyond the MTU.
        PortCaps { gso: true, max_frame: self.mtu + 18 }
    }

    fn counters(&self) -> PortCounters {
        let s = &self.stats;
        PortCounters {
            rx_packets: s.rx_packets,
            rx_bytes: s.rx_bytes,
            rx_errors: s.rx_bad_vnet + s.rx_truncated + s.rx_errors,
            tx_packets: s.tx_packets,
            tx_bytes: s.tx_bytes,
            tx_dropped: s.tx_dropped,
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
    fn nul_in_name_is_invalid_input() {
        let e = AfPacketPort::open("eth\0x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn packet_mreq_matches_the_kernel_layout() {
        // struct packet_mreq { int mr_ifindex; unsigned short mr_type, mr_alen; unsigned char
        // mr_address[8]; } is 16 bytes.
        assert_eq!(core::mem::size_of::<PacketMreq>(), 16);
    }
}
