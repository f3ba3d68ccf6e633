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
//! # VLAN tags
//!
//! On receive the kernel takes the outer 802.1Q or 802.1ad tag out of every tagged frame and
//! keeps it as packet metadata (`skb->vlan_tci`), whatever the interface's offload settings
//! (a veth too): the bytes a packet socket reads lack it, and a QinQ frame shows only its inner
//! tag. The socket has `PACKET_AUXDATA` on, so each `recvmmsg` message also fills a small
//! per-slot control buffer with a `tpacket_auxdata`; when its `tp_status` has
//! `TP_STATUS_VLAN_VALID`, the port puts the tag back after the two MAC addresses: TPID
//! `tp_vlan_tpid` (when `TP_STATUS_VLAN_TPID_VALID`, else 0x8100), then `tp_vlan_tci` (a
//! priority tag with TCI 0 included). The MAC addresses move 4 bytes into the buffer's
//! headroom, so nothing is allocated and only 12 bytes are copied, and a frame that filled the
//! receive area still fits. The virtio-net header counts `csum_start` and `hdr_len` from the
//! untagged frame the kernel hands over; both move by 4 with the tag (see
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
#![allow(unsafe_code, reason = "AF_PACKET sockets are driven through libc system calls")]

use crate::port::{Port, PortCaps, PortCounters};
use crate::sys::{self, sock, sock::setsockopt_int};
use crate::vnet::{VNET_HDR_LEN, VnetHdr};
use snic_pipeline::buf::NoRoom;
use snic_pipeline::{Batch, PacketBuf};
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

const PACKET_AUXDATA: libc::c_int = 8;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
const ETH_P_8021Q: u16 = 0x8100;
/// Bytes of one VLAN tag (TPID and TCI).
const VLAN_TAG_LEN: usize = 4;
/// Where a VLAN tag goes: after the destination and source MAC addresses.
const MACS_LEN: usize = 12;

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
    /// Frames dropped because they did not fit the receive buffer.
    pub rx_truncated: u64,
    /// Our own transmissions seen on receive and skipped.
    pub rx_outgoing: u64,
    /// Received frames whose outer VLAN tag the kernel had stripped and the port put back.
    pub rx_vlan: u64,
    /// Frames dropped because their stripped VLAN tag could not be put back (shorter than two
    /// MAC addresses; the kernel does not strip tags from such frames).
    pub rx_vlan_lost: u64,
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
    /// Control messages on receive (`PACKET_AUXDATA`: the stripped VLAN tag).
    ctrl: Box<[CmsgBuf; BURST]>,
    msgs: Box<[libc::mmsghdr; BURST]>,
}

// SAFETY: the raw pointers inside `iov` and `msgs` are scratch space, rebuilt before every system
// call and never dereferenced otherwise (but for reading `ctrl` right after a receive, in
// `vlan_tag`); the port owns everything they point to while in use.
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
        // The kernel strips the outer VLAN tag of received frames into metadata; this reports
        // it with every frame so that `recv` can put it back.
        if setsockopt_int(raw, SOL_PACKET, PACKET_AUXDATA, 1).is_err() {
            return Err(os_err("PACKET_AUXDATA", ifname));
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
        let ctrl = Box::new([CmsgBuf([0; 64]); BURST]);
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
            ctrl,
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

    /// The outer VLAN tag the kernel stripped from the frame of receive slot `i`, from its
    /// `PACKET_AUXDATA` control message (`None`: the frame was not tagged, or kept its tag).
    fn vlan_tag(&self, i: usize) -> Option<VlanTag> {
        let hdr = &self.msgs[i].msg_hdr;
        let mut aux = None;
        // SAFETY: after `recvmmsg`, `hdr.msg_control` points at `self.ctrl[i]` (live, owned by
        // the port) and `hdr.msg_controllen` is the length the kernel wrote there, at most the
        // buffer's size; the CMSG_* walk stays inside that range. The payload is read unaligned
        // and only when the message is as long as a `tpacket_auxdata`.
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
        aux.as_ref().and_then(VlanTag::from_auxdata)
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
            m.msg_hdr.msg_control = self.ctrl[i].0.as_mut_ptr().cast();
            m.msg_hdr.msg_controllen = core::mem::size_of::<CmsgBuf>() as _;
            m.msg_hdr.msg_flags = 0;
            m.msg_len = 0;
        }
        // SAFETY: the first `want` entries of `msgs` point at live buffers: the port's vnet
        // slots, addresses and control buffers, and the receive areas of the batch's slots,
        // which stay borrowed (through `slots`) until after the call.
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
                let tag = self.vlan_tag(i);
                // A tag put back in front of the L3 header moves every frame offset by 4.
                let shift = if tag.is_some() { VLAN_TAG_LEN as u16 } else { 0 };
                match VnetHdr::parse(&self.vnet[i])
                    .and_then(|h| h.shifted(shift))
                    .and_then(|h| h.to_offload())
                {
                    Ok(off) => Some((off, len - VNET_HDR_LEN, tag)),
                    Err(_) => {
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
            if let Some(tag) = tag {
                if insert_vlan_tag(p, tag).is_err() {
                    self.stats.rx_vlan_lost += 1;
                    continue;
                }
                self.stats.rx_vlan += 1;
            }
            p.meta.offload = off;
            p.meta.rx_time = now;
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += p.len() as u64;
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
        PortCaps { gso: true, max_frame: self.mtu + 18, tunnel_gso: false }
    }

    fn counters(&self) -> PortCounters {
        let s = &self.stats;
        PortCounters {
            rx_packets: s.rx_packets,
            rx_bytes: s.rx_bytes,
            rx_errors: s.rx_bad_vnet + s.rx_truncated + s.rx_vlan_lost + s.rx_errors,
            tx_packets: s.tx_packets,
            tx_bytes: s.tx_bytes,
            tx_dropped: s.tx_dropped,
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
