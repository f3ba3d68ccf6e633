//! AF_XDP ports (`afxdp:IFNAME[,QUEUE]`): one AF_XDP socket per interface queue, fed by a small
//! XDP program that snic loads and attaches itself.
//!
//! # The socket
//!
//! Each port owns a UMEM: one memory file (`memfd`), mapped shared and cut into equal frames
//! (2 KiB, or 4 KiB when the MTU needs it), registered with `XDP_UMEM_REG`. (A memory file
//! rather than anonymous memory so that a hitless upgrade can hand it over: the new process
//! maps the same pages the kernel pinned, see [`adopt`].) The first [`RX_FRAMES`] frames belong
//! to receive, the rest to transmit. The four rings (fill, completion, RX, TX) are mapped from
//! the socket at the offsets `XDP_MMAP_OFFSETS` reports; their producer and consumer indexes are
//! read and written as atomics (acquire on the other side's index, release on our own).
//!
//! - Receive: the kernel takes frames from the fill ring, writes packets into them and posts
//!   descriptors on the RX ring. `recv` copies each packet into a [`snic_pipeline::PacketBuf`]
//!   of the batch and gives the frame straight back on the fill ring, so the fill ring never
//!   runs dry because of snic. (The packet buffers are owned boxes that the pipeline moves
//!   between batches and grows for encapsulation; sharing them with the UMEM would tie every
//!   buffer's life to one socket, so the port copies: 64 to 1518 bytes per packet, no system
//!   call.)
//! - Transmit: `send` reaps the completion ring into a free list of transmit frames, copies each
//!   packet into a free frame, posts its descriptor on the TX ring, and wakes the kernel with
//!   `sendto(2)` only when the TX ring's `XDP_RING_NEED_WAKEUP` flag asks for it (sockets are
//!   bound with `XDP_USE_NEED_WAKEUP`). A packet larger than [`PortCaps::max_frame`], or one
//!   for which no frame or ring slot frees up after a few bounded waits, is dropped and counted.
//!
//! # Modes
//!
//! [`AttachMode::Auto`] tries, in order: the program attached in driver (native) mode with the
//! socket bound zero-copy (`XDP_FLAGS_DRV_MODE`, `XDP_ZEROCOPY`: the NIC DMAs into the UMEM);
//! native mode with a copying socket (`XDP_COPY`); generic (SKB) mode with a copying socket.
//! The mode it got is in the port's name (`afxdp:veth0,0 (native copy)`) and [`AfXdpPort::mode`].
//! A veth has native XDP but no zero-copy: it lands on native copy. In native mode a veth stops
//! its peer from making GSO super-packets (an XDP frame is one page); in generic mode the
//! peer's super-packets would exceed a UMEM frame and be dropped by the kernel (counted in
//! `rx_kernel_drops`), so turn the peer's TSO/GSO off there. A veth's local peer also leaves
//! TCP and UDP checksums to offload (`CHECKSUM_PARTIAL`); an AF_XDP descriptor has no field
//! for that, so the frame leaves snic with the checksum unfinished: turn the peer's `tx`
//! checksum offload off (real NICs hand over finished checksums).
//!
//! # The XDP program
//!
//! ```text
//! r2 = *(u32 *)(r1 + 16)        ; ctx->rx_queue_index
//! r1 = map[xsks]                ; lddw, BPF_PSEUDO_MAP_FD
//! r3 = XDP_PASS                 ; the action when the queue has no socket
//! call bpf_redirect_map         ; helper 51
//! exit
//! ```
//!
//! Six instructions, written here with `snic-ebpf`'s instruction encoder ([`redirect_program`])
//! rather than compiled from C: the build then needs no clang, the instructions are exactly what
//! the kernel verifies, and they are loaded through snic's own `bpf(2)` wrapper ([`crate::bpf`])
//! with the verifier's log on refusal. The program and its `XSKMAP` are shared by every queue of
//! an interface opened together ([`AfXdpPort::open_queues`]); each socket is put in the map at
//! its queue index. The program is attached with `BPF_LINK_CREATE`, so it is detached when the
//! link's descriptor closes: when the last port of the interface is dropped, or the process
//! exits however it exits. Frames of a queue without a socket go to the kernel's stack.
//!
//! # Counters
//!
//! `XDP_STATISTICS` gives the kernel's side: `rx_ring_full` (the RX ring had no room: snic was
//! too slow), `rx_fill_ring_empty_descs` (no frame to land in) and `rx_dropped` (every other
//! receive drop; a copying socket also counts fill-ring-empty drops there, so the port reports
//! `rx_dropped` minus them as `rx_kernel_drops` and each lost frame is counted once). In
//! zero-copy mode `rx_fill_ring_empty_descs` counts the driver's refill attempts that found the
//! fill ring empty, not lost frames, so it is not reported as drops there.
//!
//! Transmit counts a frame as sent when it is posted on the TX ring. [`Port::flush`] (at the
//! end of a run) wakes the kernel and waits, bounded, for every posted frame to complete; the
//! frames still outstanding then are moved from `tx_packets` to `tx_dropped` (and counted in
//! [`AfXdpStats::tx_unsent`]).
//!
//! Needs root (`CAP_NET_ADMIN`, `CAP_NET_RAW`, `CAP_BPF`): [`AfXdpPort::open`] says so.
#![allow(
    unsafe_code,
    reason = "AF_XDP: the socket, its UMEM and ring memory mappings, the atomics of the rings' \
              indexes, and copies between packets and UMEM frames; each block has a SAFETY \
              comment"
)]

use crate::bpf::{KernelLink, KernelMap, KernelProgram, PROG_TYPE_XDP};
use crate::handover::{AfXdpState, PortHandover, PortState, XskState};
use crate::port::{Port, PortCaps, PortCounters, Refused};
use crate::sys::{self, sock};
use snic_ebpf::insn::{Insn, pseudo};
use snic_ebpf::{MapKind, MapSpec};
use snic_pipeline::Batch;
use snic_time::Instant;
use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

// include/uapi/linux/if_link.h
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
// include/uapi/linux/bpf.h
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const XDP_PASS: i32 = 2;
/// Offset of `rx_queue_index` in `struct xdp_md`.
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;
/// `XDP_PACKET_HEADROOM` (include/net/xdp.h): room the kernel keeps in front of a received
/// packet in its frame.
const XDP_PACKET_HEADROOM: usize = 256;

/// Frames of the UMEM given to receive (all of them sit in the fill ring or the RX ring).
pub const RX_FRAMES: u32 = 4096;
/// Frames of the UMEM for transmit (free, on the TX ring, or awaiting completion).
pub const TX_FRAMES: u32 = 2048;
/// Entries of the fill ring (holds every receive frame).
const FILL_SIZE: u32 = RX_FRAMES;
/// Entries of the RX ring: smaller than the receive frames, so an overload shows as
/// `rx_ring_full` (snic too slow) rather than an empty fill ring.
const RX_SIZE: u32 = 2048;
/// Entries of the TX and completion rings.
const TX_SIZE: u32 = TX_FRAMES;
/// Most packets `recv` takes at once.
pub const BURST: usize = 64;
/// Rounds of "wake the kernel, reap completions, wait 1 ms" `send` tries before dropping what
/// does not fit.
const TX_FULL_ROUNDS: u32 = 8;
/// `tx_len` of a frame [`Port::flush`] gave up on (counted as not sent).
const WRITTEN_OFF: u32 = u32::MAX;
/// `XDP_MAX_TX_SKB_BUDGET` (include/uapi/linux/if_xdp.h, Linux 6.17+): frames one `sendto`
/// of a copying socket may send.
const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;
/// The budget asked for: the largest batch a worker transmits at once.
const TX_BUDGET: libc::c_int = 256;
/// Longest [`Port::flush`] waits for posted frames to complete.
const FLUSH_LIMIT: Duration = Duration::from_millis(200);

/// How the XDP program is attached and the socket bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum XdpMode {
    /// Driver mode, zero-copy socket: the driver fills the UMEM directly.
    NativeZeroCopy,
    /// Driver mode, the kernel copies between its buffers and the UMEM.
    NativeCopy,
    /// Generic (SKB) mode, copying: works on every interface.
    GenericCopy,
}

impl fmt::Display for XdpMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            XdpMode::NativeZeroCopy => "native zero-copy",
            XdpMode::NativeCopy => "native copy",
            XdpMode::GenericCopy => "generic copy",
        })
    }
}

impl XdpMode {
    /// `XDP_FLAGS_*` of the link.
    fn link_flags(self) -> u32 {
        match self {
            XdpMode::NativeZeroCopy | XdpMode::NativeCopy => XDP_FLAGS_DRV_MODE,
            XdpMode::GenericCopy => XDP_FLAGS_SKB_MODE,
        }
    }

    /// `sxdp_flags` of the bind.
    fn bind_flags(self) -> u16 {
        let copy = match self {
            XdpMode::NativeZeroCopy => libc::XDP_ZEROCOPY,
            XdpMode::NativeCopy | XdpMode::GenericCopy => libc::XDP_COPY,
        };
        copy | libc::XDP_USE_NEED_WAKEUP
    }
}

/// Which modes [`AfXdpPort::open_with`] may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttachMode {
    /// Native zero-copy, else native copy, else generic copy (the default).
    #[default]
    Auto,
    /// Native (driver) mode only: zero-copy, else copy.
    Native,
    /// Generic (SKB) mode only.
    Generic,
}

impl AttachMode {
    /// The modes to try, best first.
    fn candidates(self) -> &'static [XdpMode] {
        match self {
            AttachMode::Auto => {
                &[XdpMode::NativeZeroCopy, XdpMode::NativeCopy, XdpMode::GenericCopy]
            }
            AttachMode::Native => &[XdpMode::NativeZeroCopy, XdpMode::NativeCopy],
            AttachMode::Generic => &[XdpMode::GenericCopy],
        }
    }
}

/// The redirect program (see the module documentation): map index 0 is the `XSKMAP`.
pub fn redirect_program() -> Vec<Insn> {
    let op = |code: u8, dst: u8, src: u8, off: i16, imm: i32| Insn { code, dst, src, off, imm };
    vec![
        // ldxw r2, [r1 + rx_queue_index]
        op(0x61, 2, 1, XDP_MD_RX_QUEUE_INDEX, 0),
        // lddw r1, map 0
        op(0x18, 1, pseudo::MAP_FD, 0, 0),
        op(0x00, 0, 0, 0, 0),
        // mov64 r3, XDP_PASS
        op(0xb7, 3, 0, 0, XDP_PASS),
        // call bpf_redirect_map
        op(0x85, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        // exit
        op(0x95, 0, 0, 0, 0),
    ]
}

/// UMEM frame size for an interface MTU: 2 KiB when a full frame (Ethernet header, one VLAN
/// tag) fits after the kernel's receive headroom, else 4 KiB; `None` above that (AF_XDP
/// multi-buffer frames are not supported).
pub fn frame_size_for_mtu(mtu: usize) -> Option<usize> {
    let need = mtu + 18 + XDP_PACKET_HEADROOM;
    [2048, 4096].into_iter().find(|&s| need <= s)
}

/// The XDP program, its `XSKMAP` and the link that keeps it attached to one interface; shared
/// by every socket opened on the interface together. Dropping the last one detaches it.
#[derive(Debug)]
struct Attachment {
    // Field order is drop order: the link first (detach), then the program and the map.
    _link: KernelLink,
    _prog: KernelProgram,
    map: KernelMap,
}

impl Attachment {
    /// Loads the program with an `XSKMAP` of `entries` and attaches it to `ifindex` in `mode`.
    fn attach(ifindex: u32, entries: u32, mode: XdpMode) -> io::Result<Attachment> {
        let map = KernelMap::create(&MapSpec {
            name: "snic_xsks".into(),
            kind: MapKind::Other(BPF_MAP_TYPE_XSKMAP),
            key_size: 4,
            value_size: 4,
            max_entries: entries,
            data: None,
            readonly: false,
        })
        .map_err(|e| io::Error::new(e.kind(), format!("creating the XSKMAP: {e}")))?;
        let prog = KernelProgram::load_raw(
            &redirect_program(),
            &[&map],
            PROG_TYPE_XDP,
            "Dual MIT/GPL",
            "snic_xsk_redir",
        )
        .map_err(|r| io::Error::other(format!("loading the XDP redirect program: {r}")))?;
        let link = KernelLink::xdp(&prog, ifindex, mode.link_flags())?;
        Ok(Attachment { _link: link, _prog: prog, map })
    }

    /// Duplicates of the link's, the program's and the map's descriptors, in that order.
    fn handover_fds(&self) -> io::Result<[OwnedFd; 3]> {
        Ok([self._link.try_clone_fd()?, self._prog.try_clone_fd()?, self.map.try_clone_fd()?])
    }

    /// The attachment another process handed over ([`Attachment::handover_fds`]'s order),
    /// each descriptor checked: an `XSKMAP`, an XDP program, and the link attaching that
    /// program to `ifindex`.
    fn adopt(fds: [OwnedFd; 3], ifindex: u32) -> io::Result<Attachment> {
        let [link, prog, map] = fds;
        let map = KernelMap::adopt(map, MapKind::Other(BPF_MAP_TYPE_XSKMAP))?;
        let prog = KernelProgram::adopt(prog, PROG_TYPE_XDP)?;
        let link = KernelLink::adopt_xdp(link, &prog, ifindex)?;
        Ok(Attachment { _link: link, _prog: prog, map })
    }
}

/// The seals of a UMEM's memory file: its size is fixed.
const UMEM_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// Whether `fd` is a memory file sealed as a UMEM is ([`UMEM_SEALS`]).
fn sealed_umem(fd: RawFd) -> bool {
    // SAFETY: fcntl(2) F_GET_SEALS takes no argument; any descriptor may be asked (others
    // answer an error).
    let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
    seals >= 0 && seals & UMEM_SEALS == UMEM_SEALS
}

/// A shared memory mapping, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    /// A memory file of `len` bytes (the UMEM), zeroed, mapped shared: the file's descriptor
    /// lets another process map the same pages (a takeover, see [`crate::handover`]); the
    /// kernel's registration pins the pages, not this mapping. The file is sealed at its size
    /// ([`UMEM_SEALS`]), so no holder of the descriptor can cut the mapping short.
    fn memfd(len: usize) -> io::Result<(Mapping, OwnedFd)> {
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // SAFETY: the name is a NUL-terminated literal; the result is checked.
        let fd = unsafe { libc::memfd_create(c"snic-umem".as_ptr(), flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let size = libc::off_t::try_from(len).map_err(|_| io::Error::other("UMEM size"))?;
        // SAFETY: plain ftruncate(2) on our own descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fcntl(2) F_ADD_SEALS on our own descriptor, an integer argument.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, UMEM_SEALS) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((Mapping::file(fd.as_raw_fd(), len)?, fd))
    }

    /// A shared mapping of the first `len` bytes of memory file `fd`.
    fn file(fd: RawFd, len: usize) -> io::Result<Mapping> {
        // SAFETY: a fresh shared mapping at an address the kernel picks; in this process only
        // the owner of the mapping reaches it (another process may map the same file: the
        // UMEM's frames are then handed over, never used by both at once).
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr: p.cast(), len })
    }

    /// A shared mapping of `len` bytes of socket `fd` at page offset `off` (a ring).
    fn ring(fd: RawFd, len: usize, off: u64) -> io::Result<Mapping> {
        let off = libc::off_t::try_from(off).map_err(|_| io::Error::other("ring offset"))?;
        // SAFETY: a fresh shared mapping of the socket's ring at an address the kernel picks;
        // nothing else in this process aliases it.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr: p.cast(), len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in the constructor; no reference into it
        // outlives `self` (rings and frames are only reached through their owner).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Where a ring's parts are, in bytes from the start of its memory (`struct xdp_ring_offset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RingLayout {
    producer: usize,
    consumer: usize,
    flags: usize,
    desc: usize,
}

impl RingLayout {
    fn from_kernel(o: &libc::xdp_ring_offset) -> io::Result<RingLayout> {
        let f = |v: u64| usize::try_from(v).map_err(|_| io::Error::other("ring offset"));
        Ok(RingLayout {
            producer: f(o.producer)?,
            consumer: f(o.consumer)?,
            flags: f(o.flags)?,
            desc: f(o.desc)?,
        })
    }

    /// Bytes to map for `size` entries of `entry` bytes.
    fn len(&self, size: u32, entry: usize) -> usize {
        self.desc + size as usize * entry
    }

    /// Whether the layout fits `len` bytes with aligned indexes (checked before any access).
    fn fits(&self, len: usize, size: u32, entry: usize) -> bool {
        let idx_ok = |o: usize| o.is_multiple_of(4) && o + 4 <= len;
        idx_ok(self.producer)
            && idx_ok(self.consumer)
            && idx_ok(self.flags)
            && self.desc.is_multiple_of(8)
            && self.len(size, entry) <= len
    }
}

/// One ring: a power-of-two array of entries plus the kernel's and our index.
///
/// A ring we produce into (fill, TX) keeps our producer in `local` and the last consumer we
/// read in `cached`; a ring we consume (RX, completion) keeps our consumer in `local` and the
/// last producer we read in `cached`. Indexes run freely and wrap; entry `i` is at `i & mask`.
struct Ring {
    base: *mut u8,
    layout: RingLayout,
    mask: u32,
    size: u32,
    entry: usize,
    local: u32,
    cached: u32,
    /// The memory, when the ring owns it (kernel rings); tests lend plain memory instead.
    _map: Option<Mapping>,
}

impl Ring {
    /// A ring over `len` bytes at `base`, checked against `layout`.
    ///
    /// # Safety
    ///
    /// `base` must point to `len` readable and writable bytes, 8-aligned, that stay valid (and
    /// are only accessed through this ring and its peer) for the ring's life.
    unsafe fn new(
        base: *mut u8,
        len: usize,
        layout: RingLayout,
        size: u32,
        entry: usize,
        map: Option<Mapping>,
    ) -> io::Result<Ring> {
        if !size.is_power_of_two() || !layout.fits(len, size, entry) {
            return Err(io::Error::other("AF_XDP ring layout does not fit its mapping"));
        }
        let mut r =
            Ring { base, layout, mask: size - 1, size, entry, local: 0, cached: 0, _map: map };
        // Start from where the kernel's indexes are (zero on a fresh socket).
        let p = r.index(r.layout.producer).load(Ordering::Acquire);
        let c = r.index(r.layout.consumer).load(Ordering::Acquire);
        (r.local, r.cached) = (p, c);
        Ok(r)
    }

    /// Maps ring `off` of socket `fd`.
    fn map(
        fd: RawFd,
        o: &libc::xdp_ring_offset,
        size: u32,
        entry: usize,
        off: u64,
    ) -> io::Result<Ring> {
        let layout = RingLayout::from_kernel(o)?;
        let len = layout.len(size, entry);
        let m = Mapping::ring(fd, len, off)?;
        let base = m.ptr;
        // SAFETY: `m` maps `len` bytes at `base` (page-aligned) and moves into the ring, which
        // keeps it alive; only this ring and the kernel touch it.
        unsafe { Ring::new(base, len, layout, size, entry, Some(m)) }
    }

    fn index(&self, off: usize) -> &AtomicU32 {
        // SAFETY: `off` is one of the layout's index offsets, checked in `new` to be 4-aligned
        // and inside the memory, which lives as long as `self`. The kernel accesses the same
        // word atomically (smp_load_acquire / smp_store_release).
        unsafe { &*self.base.add(off).cast::<AtomicU32>() }
    }

    /// Pointer to entry `i` (any index; masked).
    fn slot(&self, i: u32) -> *mut u8 {
        let at = self.layout.desc + (i & self.mask) as usize * self.entry;
        // SAFETY: `at + entry <= len` for every masked index (checked in `new`).
        unsafe { self.base.add(at) }
    }

    /// Producer side: free entries, up to `want` (re-reads the consumer only when short).
    fn prod_free(&mut self, want: u32) -> u32 {
        let free = self.size - self.local.wrapping_sub(self.cached);
        if free >= want {
            return want;
        }
        self.cached = self.index(self.layout.consumer).load(Ordering::Acquire);
        (self.size - self.local.wrapping_sub(self.cached)).min(want)
    }

    /// Producer side: write `v` as the `i`-th entry after our producer (an address ring).
    fn put_addr(&mut self, i: u32, v: u64) {
        debug_assert_eq!(self.entry, 8);
        // SAFETY: `slot` is inside the ring's entries and 8-aligned (desc offset and entry
        // size are multiples of 8); the kernel does not read entries past the producer.
        unsafe { self.slot(self.local.wrapping_add(i)).cast::<u64>().write_volatile(v) };
    }

    /// Producer side: write descriptor `d` as the `i`-th entry after our producer.
    fn put_desc(&mut self, i: u32, d: libc::xdp_desc) {
        debug_assert_eq!(self.entry, 16);
        // SAFETY: as in `put_addr`, for a 16-byte descriptor.
        unsafe { self.slot(self.local.wrapping_add(i)).cast::<libc::xdp_desc>().write_volatile(d) };
    }

    /// Producer side: publish `n` written entries.
    fn submit(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        self.index(self.layout.producer).store(self.local, Ordering::Release);
    }

    /// A ring snic reads (RX, completion): its own index is the consumer's and the cached one
    /// the producer's. `new` reads the kernel's indexes the producer's way round (its own =
    /// producer, cached = consumer); on a fresh socket both are 0, so only the roles differ.
    fn consumer(mut self) -> Ring {
        core::mem::swap(&mut self.local, &mut self.cached);
        self
    }

    /// Producer side: entries published but not yet consumed by the kernel.
    fn prod_outstanding(&mut self) -> u32 {
        self.cached = self.index(self.layout.consumer).load(Ordering::Acquire);
        self.local.wrapping_sub(self.cached)
    }

    /// Consumer side: entries ready, up to `want` (re-reads the producer only when empty).
    fn cons_ready(&mut self, want: u32) -> u32 {
        let mut n = self.cached.wrapping_sub(self.local);
        if n == 0 {
            self.cached = self.index(self.layout.producer).load(Ordering::Acquire);
            n = self.cached.wrapping_sub(self.local);
        }
        n.min(want).min(self.size)
    }

    /// Consumer side: the `i`-th ready address entry.
    fn get_addr(&self, i: u32) -> u64 {
        // SAFETY: inside the entries and aligned (see `put_addr`); the kernel wrote the entry
        // before publishing its producer index, which we read with acquire.
        unsafe { self.slot(self.local.wrapping_add(i)).cast::<u64>().read_volatile() }
    }

    /// Consumer side: the `i`-th ready descriptor.
    fn get_desc(&self, i: u32) -> libc::xdp_desc {
        // SAFETY: as in `get_addr`, for a 16-byte descriptor.
        unsafe { self.slot(self.local.wrapping_add(i)).cast::<libc::xdp_desc>().read_volatile() }
    }

    /// Consumer side: give `n` entries back.
    fn release(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        self.index(self.layout.consumer).store(self.local, Ordering::Release);
    }

    /// Whether the kernel asks to be woken (`XDP_RING_NEED_WAKEUP`).
    fn needs_wakeup(&self) -> bool {
        self.index(self.layout.flags).load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }
}

/// Counters of one AF_XDP port (snic's side; the kernel's are read in [`Port::counters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AfXdpStats {
    /// Frames received and handed to the pipeline.
    pub rx_packets: u64,
    /// Bytes of those frames.
    pub rx_bytes: u64,
    /// RX descriptors outside the UMEM's receive frames (never expected; dropped).
    pub rx_bad_desc: u64,
    /// Frames posted on the TX ring.
    pub tx_packets: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Frames larger than a UMEM frame or the interface's MTU (or empty), dropped.
    pub tx_too_big: u64,
    /// `send` calls that found no free frame or TX slot after bounded waits.
    pub tx_ring_full: u64,
    /// Frames handed to `send` that were not posted.
    pub tx_dropped: u64,
    /// `sendto(2)` wake-ups of the transmit path.
    pub tx_wakeups: u64,
    /// Wake-ups that failed with something other than "busy, retry".
    pub tx_wakeup_errors: u64,
    /// `recvfrom(2)` wake-ups of the fill ring (zero-copy drivers that ask for them).
    pub rx_wakeups: u64,
    /// Frames posted on the TX ring that had not completed when [`Port::flush`] gave up
    /// waiting: moved from `tx_packets` to `tx_dropped`.
    pub tx_unsent: u64,
}

/// An AF_XDP socket on one queue of an interface. See the module documentation.
pub struct AfXdpPort {
    name: String,
    mode: XdpMode,
    queue: u32,
    mtu: usize,
    frame_size: usize,
    // Field order is drop order: the rings are unmapped, then the socket closes (taking it out
    // of the XSKMAP), then the UMEM is unmapped, then the program may be detached.
    rx: Ring,
    fill: Ring,
    tx: Ring,
    comp: Ring,
    fd: OwnedFd,
    umem: Mapping,
    /// The memory file behind the UMEM (handed over with the socket).
    umem_fd: OwnedFd,
    ifname: String,
    ifindex: u32,
    /// Transmit frames (UMEM offsets) free for a new packet.
    tx_free: Vec<u64>,
    /// Length of the packet in each transmit frame while it is posted and not completed (0:
    /// the frame is free), by transmit frame number.
    tx_len: Vec<u32>,
    /// Frames one `sendto` sends in copy mode (`XDP_MAX_TX_SKB_BUDGET`, 32 by default).
    tx_budget: u32,
    stats: AfXdpStats,
    /// The kernel's `XDP_STATISTICS` words when this process got the socket (zero for a socket
    /// it opened).
    kernel_base: [u64; 6],
    _attach: Arc<Attachment>,
}

// SAFETY: the raw pointers are into memory this port owns (its UMEM and ring mappings) and
// the kernel; nothing else in the process refers to them, so moving the port to another
// thread moves all access with it.
unsafe impl Send for AfXdpPort {}

impl fmt::Debug for AfXdpPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AfXdpPort")
            .field("name", &self.name)
            .field("fd", &self.fd.as_raw_fd())
            .field("mode", &self.mode)
            .field("queue", &self.queue)
            .field("stats", &self.stats)
            .finish()
    }
}

fn ctx(ifname: &str, what: &str, e: io::Error) -> io::Error {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => " (AF_XDP needs root: CAP_NET_ADMIN, CAP_BPF)",
        _ => "",
    };
    io::Error::new(e.kind(), format!("afxdp:{ifname}: {what}: {e}{hint}"))
}

fn last(ifname: &str, what: &str) -> io::Error {
    ctx(ifname, what, io::Error::last_os_error())
}

/// Number of receive queues of `ifname` (`/sys/class/net/IF/queues/rx-*`), `None` when
/// unknown (no such interface, no sysfs).
pub fn rx_queue_count(ifname: &str) -> Option<u32> {
    let dir = std::fs::read_dir(format!("/sys/class/net/{ifname}/queues")).ok()?;
    let n = dir
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
        .count();
    u32::try_from(n).ok()
}

/// Interface index, MTU and receive-queue count of `ifname`, with errors naming it.
fn interface(ifname: &str) -> io::Result<(u32, usize, Option<u32>)> {
    let cname = CString::new(ifname).map_err(|_| {
        io::Error::new(io::ErrorKind::InvalidInput, "interface name contains a NUL byte")
    })?;
    // SAFETY: `cname` is a valid NUL-terminated string.
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if ifindex == 0 {
        return Err(last(ifname, "no such interface"));
    }
    let mtu = sock::interface_mtu(&cname).map_err(|e| ctx(ifname, "reading the MTU", e))?;
    Ok((ifindex, mtu, rx_queue_count(ifname)))
}

/// Options of [`AfXdpPort::open_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AfXdpOptions {
    /// Which attach modes to try.
    pub attach: AttachMode,
}

impl AfXdpPort {
    /// Open an AF_XDP socket on `queue` of `ifname`, attaching snic's redirect program to the
    /// interface (best mode available; see the module documentation).
    pub fn open(ifname: &str, queue: u32) -> io::Result<AfXdpPort> {
        Self::open_with(ifname, queue, AfXdpOptions::default())
    }

    /// [`AfXdpPort::open`] with options.
    pub fn open_with(ifname: &str, queue: u32, opts: AfXdpOptions) -> io::Result<AfXdpPort> {
        let mut v = Self::open_queues_with(ifname, queue, 1, opts)?;
        v.pop().ok_or_else(|| io::Error::other("no queue opened"))
    }

    /// `n` sockets on queues `queue..queue + n` of `ifname`, sharing one XDP program and
    /// `XSKMAP` (each socket at its queue index).
    pub fn open_queues(ifname: &str, queue: u32, n: usize) -> io::Result<Vec<AfXdpPort>> {
        Self::open_queues_with(ifname, queue, n, AfXdpOptions::default())
    }

    /// [`AfXdpPort::open_queues`] with options.
    pub fn open_queues_with(
        ifname: &str,
        queue: u32,
        n: usize,
        opts: AfXdpOptions,
    ) -> io::Result<Vec<AfXdpPort>> {
        let (ifindex, mtu, queues) = interface(ifname)?;
        let n32 = u32::try_from(n)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "bad queue count"))?;
        let end = queue
            .checked_add(n32)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "queue out of range"))?;
        if let Some(q) = queues
            && end > q
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "afxdp:{ifname}: queues {queue}..{end} asked, the interface has {q} receive \
                     queue(s)"
                ),
            ));
        }
        let frame_size = frame_size_for_mtu(mtu).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                format!("afxdp:{ifname}: MTU {mtu} needs multi-buffer AF_XDP (not supported)"),
            )
        })?;
        let mut errors = Vec::new();
        let mut attached: Option<(XdpMode, Arc<Attachment>)> = None;
        for &mode in opts.attach.candidates() {
            // Zero-copy and copy share the driver-mode attachment.
            let reuse = match (&attached, mode) {
                (Some((XdpMode::NativeZeroCopy, a)), XdpMode::NativeCopy) => Some(a.clone()),
                _ => None,
            };
            let att = match reuse {
                Some(a) => a,
                None => {
                    attached = None;
                    match Attachment::attach(ifindex, end, mode) {
                        Ok(a) => Arc::new(a),
                        Err(e) => {
                            errors.push(format!("{mode}: attaching: {e}"));
                            continue;
                        }
                    }
                }
            };
            attached = Some((mode, att.clone()));
            let mut ports = Vec::with_capacity(n);
            let mut failed = None;
            for q in queue..end {
                match Self::open_socket(ifname, ifindex, q, mtu, frame_size, mode, att.clone()) {
                    Ok(p) => ports.push(p),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            match failed {
                None => return Ok(ports),
                Some(e) => errors.push(format!("{mode}: {e}")),
            }
        }
        let perm = errors.iter().any(|e| e.contains("Operation not permitted"));
        Err(io::Error::new(
            if perm { io::ErrorKind::PermissionDenied } else { io::ErrorKind::Unsupported },
            format!("afxdp:{ifname},{queue}: no mode worked: {}", errors.join("; ")),
        ))
    }

    /// One socket on `queue`, bound in `mode`, registered in `att`'s map.
    fn open_socket(
        ifname: &str,
        ifindex: u32,
        queue: u32,
        mtu: usize,
        frame_size: usize,
        mode: XdpMode,
        att: Arc<Attachment>,
    ) -> io::Result<AfXdpPort> {
        // SAFETY: plain socket(2) call; the result is checked.
        let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(last(ifname, "socket(AF_XDP)"));
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = fd.as_raw_fd();

        let frames = (RX_FRAMES + TX_FRAMES) as usize;
        let (umem, umem_fd) =
            Mapping::memfd(frames * frame_size).map_err(|e| ctx(ifname, "UMEM", e))?;
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr as usize as u64,
            len: umem.len as u64,
            chunk_size: frame_size as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        sock::setsockopt_value(raw, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg)
            .map_err(|e| ctx(ifname, "XDP_UMEM_REG", e))?;
        for (opt, size, what) in [
            (libc::XDP_UMEM_FILL_RING, FILL_SIZE, "fill ring"),
            (libc::XDP_UMEM_COMPLETION_RING, TX_SIZE, "completion ring"),
            (libc::XDP_RX_RING, RX_SIZE, "RX ring"),
            (libc::XDP_TX_RING, TX_SIZE, "TX ring"),
        ] {
            sock::setsockopt_int(raw, libc::SOL_XDP, opt, size as libc::c_int)
                .map_err(|e| ctx(ifname, what, e))?;
        }
        // Copy mode sends at most 32 frames per `sendto` unless told more (Linux 6.17+,
        // `XDP_MAX_TX_SKB_BUDGET`): a whole TX ring's worth per wake-up instead. Older kernels
        // refuse the option, and stay at 32.
        let budget = sock::setsockopt_int(raw, libc::SOL_XDP, XDP_MAX_TX_SKB_BUDGET, TX_BUDGET)
            .map_or(32, |()| TX_BUDGET as u32);
        // Copy mode charges frames in flight to the send buffer.
        sock::set_buffer(raw, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, 8 << 20);
        let [rx, tx, mut fill, comp] = map_rings(ifname, raw)?;

        // Every receive frame into the fill ring before the socket can receive.
        let n = fill.prod_free(RX_FRAMES);
        for i in 0..n {
            fill.put_addr(i, u64::from(i) * frame_size as u64);
        }
        fill.submit(n);
        let tx_free: Vec<u64> = (RX_FRAMES..RX_FRAMES + TX_FRAMES)
            .rev()
            .map(|i| u64::from(i) * frame_size as u64)
            .collect();

        let sxdp = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: mode.bind_flags(),
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: `sxdp` is a live sockaddr_xdp and its exact size is passed.
        let r = unsafe {
            libc::bind(
                raw,
                (&sxdp as *const libc::sockaddr_xdp).cast(),
                core::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(last(ifname, &format!("bind to queue {queue}")));
        }
        att.map
            .update(&queue.to_ne_bytes(), &raw.to_ne_bytes(), crate::bpf::ANY)
            .map_err(|e| ctx(ifname, "putting the socket in the XSKMAP", e))?;
        Ok(AfXdpPort {
            name: format!("afxdp:{ifname},{queue} ({mode})"),
            mode,
            queue,
            mtu,
            frame_size,
            rx,
            fill,
            tx,
            comp,
            fd,
            umem,
            umem_fd,
            ifname: ifname.to_string(),
            ifindex,
            tx_free,
            tx_len: vec![0; TX_FRAMES as usize],
            tx_budget: budget,
            stats: AfXdpStats::default(),
            kernel_base: [0; 6],
            _attach: att,
        })
    }

    /// The mode the port got.
    pub fn mode(&self) -> XdpMode {
        self.mode
    }

    /// The interface queue the socket is bound to.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// snic's counters of this port.
    pub fn stats(&self) -> AfXdpStats {
        self.stats
    }

    /// The kernel's `XDP_STATISTICS` of the socket since this port has it (fields a kernel
    /// does not report stay 0). The kernel's counts run for the socket's whole life: for a
    /// socket adopted from another process, what they were at the handover is taken off.
    pub fn kernel_stats(&self) -> io::Result<libc::xdp_statistics> {
        let mut w = self.kernel_words()?;
        for (v, b) in w.iter_mut().zip(self.kernel_base) {
            *v = v.saturating_sub(b);
        }
        Ok(libc::xdp_statistics {
            rx_dropped: w[0],
            rx_invalid_descs: w[1],
            tx_invalid_descs: w[2],
            rx_ring_full: w[3],
            rx_fill_ring_empty_descs: w[4],
            tx_ring_empty_descs: w[5],
        })
    }

    /// The six words of the socket's `XDP_STATISTICS`, as the kernel counts them.
    fn kernel_words(&self) -> io::Result<[u64; 6]> {
        let (w, _) = sock::getsockopt_words::<u64, 6>(
            self.fd.as_raw_fd(),
            libc::SOL_XDP,
            libc::XDP_STATISTICS,
        )?;
        Ok(w)
    }

    /// The transmit frame number of UMEM offset `base` (a frame start), if it is one.
    fn tx_slot(&self, base: u64) -> Option<usize> {
        let k = (base / self.frame_size as u64).checked_sub(u64::from(RX_FRAMES))?;
        usize::try_from(k).ok().filter(|&k| k < TX_FRAMES as usize)
    }

    /// Completed transmit frames back to the free list.
    fn reap(&mut self) {
        let n = self.comp.cons_ready(TX_SIZE);
        for i in 0..n {
            let a = self.comp.get_addr(i);
            let fs = self.frame_size as u64;
            let base = a - a % fs;
            // Only our own transmit frames go back to the free list, each once.
            if let Some(len) = self.tx_slot(base).and_then(|k| self.tx_len.get_mut(k))
                && *len != 0
            {
                *len = 0;
                self.tx_free.push(base);
            }
        }
        self.comp.release(n);
    }

    /// Frames one `sendto` sends in copy mode: 32, or more where the kernel took
    /// `XDP_MAX_TX_SKB_BUDGET`.
    pub fn tx_budget(&self) -> u32 {
        self.tx_budget
    }

    /// Wake the kernel's transmit path while it asks for it and takes descriptors (a copying
    /// socket sends at most [`AfXdpPort::tx_budget`] frames per call).
    fn kick(&mut self) {
        let mut rounds = 0;
        loop {
            let left = self.tx.prod_outstanding();
            if left == 0 || !self.tx.needs_wakeup() || rounds >= TX_SIZE / 16 {
                break;
            }
            rounds += 1;
            self.stats.tx_wakeups += 1;
            // SAFETY: a zero-length sendto on our socket, no buffers or addresses passed.
            let r = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    core::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    core::ptr::null(),
                    0,
                )
            };
            if r >= 0 {
                continue;
            }
            match io::Error::last_os_error().raw_os_error() {
                // More to send, or the device queue is busy: go on while the kernel progresses.
                Some(libc::EAGAIN | libc::EINTR | libc::EBUSY | libc::ENOBUFS) => {
                    if self.tx.prod_outstanding() >= left {
                        break;
                    }
                }
                _ => {
                    self.stats.tx_wakeup_errors += 1;
                    break;
                }
            }
        }
    }

    /// Post the live packets of `batch` on the TX ring; returns how many were posted (frames
    /// refused on the way are marked in `refused`).
    fn send_frames(&mut self, batch: &Batch, refused: &mut Refused) -> usize {
        self.reap();
        let max_len = (self.mtu + 18).min(self.frame_size);
        let pkts = batch.packets();
        let mut next = 0;
        let mut sent = 0;
        let mut rounds = 0;
        while next < pkts.len() {
            let want = (pkts.len() - next).min(self.tx_free.len()) as u32;
            let room = self.tx.prod_free(want);
            let mut posted = 0u32;
            while posted < room && next < pkts.len() {
                let p = &pkts[next];
                next += 1;
                if p.len() > max_len || p.is_empty() {
                    self.stats.tx_too_big += 1;
                    refused.mark(next - 1);
                    continue;
                }
                let Some(addr) = self.tx_free.pop() else {
                    // Not reached (`room` counts free frames), but never lose the packet.
                    next -= 1;
                    break;
                };
                let len = p.len();
                match frame_mut(&mut self.umem, self.frame_size, addr, len) {
                    Some(f) => f.copy_from_slice(p.data()),
                    None => {
                        self.tx_free.push(addr);
                        self.stats.tx_too_big += 1;
                        refused.mark(next - 1);
                        continue;
                    }
                }
                if let Some(l) = self.tx_slot(addr).and_then(|k| self.tx_len.get_mut(k)) {
                    *l = len as u32;
                }
                self.tx.put_desc(posted, libc::xdp_desc { addr, len: len as u32, options: 0 });
                posted += 1;
                self.stats.tx_packets += 1;
                self.stats.tx_bytes += len as u64;
            }
            self.tx.submit(posted);
            sent += posted as usize;
            self.kick();
            if next >= pkts.len() {
                break;
            }
            // No frame or no slot for the rest: let the kernel drain, bounded.
            self.reap();
            if posted == 0 {
                rounds += 1;
                if rounds > TX_FULL_ROUNDS {
                    self.stats.tx_ring_full += 1;
                    break;
                }
                sys::poll::wait_writable(self.fd.as_raw_fd(), Duration::from_millis(1));
                self.reap();
            }
        }
        sent
    }
}

/// The byte range `len` at UMEM offset `addr`, if it stays inside the frame holding `addr`
/// and inside the UMEM.
fn frame_range(umem_len: usize, frame_size: usize, addr: u64, len: usize) -> Option<usize> {
    let addr = usize::try_from(addr).ok()?;
    let base = addr - addr % frame_size;
    let end = addr.checked_add(len)?;
    (end <= base + frame_size && base + frame_size <= umem_len).then_some(addr)
}

/// The received packet `len` at `addr` of the UMEM (see [`frame_range`]).
fn frame_ref(umem: &Mapping, frame_size: usize, addr: u64, len: usize) -> Option<&[u8]> {
    let at = frame_range(umem.len, frame_size, addr, len)?;
    // SAFETY: `at..at + len` is inside the UMEM (checked), mapped for `umem`'s life. The frame
    // is ours while we read it: the kernel posted it on the RX ring and gets it back only on the
    // fill ring, after this borrow ends.
    Some(unsafe { core::slice::from_raw_parts(umem.ptr.add(at), len) })
}

/// The transmit frame `len` at `addr` of the UMEM, writable (see [`frame_range`]).
fn frame_mut(umem: &mut Mapping, frame_size: usize, addr: u64, len: usize) -> Option<&mut [u8]> {
    let at = frame_range(umem.len, frame_size, addr, len)?;
    // SAFETY: as in `frame_ref`; a transmit frame from the free list is ours until we post it,
    // and `&mut umem` makes this the only borrow into the UMEM.
    Some(unsafe { core::slice::from_raw_parts_mut(umem.ptr.add(at), len) })
}

/// The UMEM frame and ring sizes compiled into this build, as [`AfXdpState::layout`] carries
/// them.
const LAYOUT: [u32; 5] = [RX_FRAMES, TX_FRAMES, FILL_SIZE, RX_SIZE, TX_SIZE];

fn refused(ifname: &str, what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("afxdp:{ifname}: {what}"))
}

impl AfXdpPort {
    /// This socket's part of a handover: its state and duplicates of its socket and UMEM
    /// memory file. Frames posted and not completed are carried (a flush before leaves none
    /// but those it wrote off).
    fn socket_handover(&self) -> io::Result<(XskState, [OwnedFd; 2])> {
        let tx_pending =
            (0u32..).zip(&self.tx_len).filter(|&(_, &l)| l != 0).map(|(k, &l)| (k, l)).collect();
        let st = XskState {
            queue: self.queue,
            frame_size: self.frame_size,
            tx_budget: self.tx_budget,
            tx_pending,
            kernel_stats: self.kernel_words().unwrap_or([0; 6]),
        };
        Ok((st, [self.fd.try_clone()?, self.umem_fd.try_clone()?]))
    }

    /// Carry on with a socket another process handed over (see [`adopt`]): the same socket,
    /// UMEM pages and rings, the walk resumed at the indexes in the rings' memory.
    fn adopt_socket(
        ifname: &str,
        (ifindex, mtu): (u32, usize),
        mode: XdpMode,
        st: &XskState,
        [sock, umem_fd]: [OwnedFd; 2],
        att: Arc<Attachment>,
    ) -> io::Result<AfXdpPort> {
        let raw = sock.as_raw_fd();
        if sock::getsockopt_int(raw, libc::SOL_SOCKET, libc::SO_DOMAIN).ok() != Some(libc::AF_XDP) {
            return Err(refused(ifname, "the handed descriptor is not an AF_XDP socket".into()));
        }
        // The zero-copy flag is the socket's, fixed at bind.
        let zc = sock::getsockopt_int(raw, libc::SOL_XDP, libc::XDP_OPTIONS)
            .map_err(|e| ctx(ifname, "XDP_OPTIONS", e))?
            & libc::XDP_OPTIONS_ZEROCOPY as libc::c_int
            != 0;
        if zc != (mode == XdpMode::NativeZeroCopy) {
            return Err(refused(ifname, format!("the socket is not bound in {mode} mode")));
        }
        let frame_size = st.frame_size;
        if !frame_size.is_power_of_two() || !(2048..=65536).contains(&frame_size) {
            return Err(refused(ifname, format!("UMEM frames of {frame_size} bytes")));
        }
        let len = (RX_FRAMES + TX_FRAMES) as usize * frame_size;
        let meta = std::fs::File::from(umem_fd.try_clone()?).metadata()?;
        if !meta.file_type().is_file() || !sealed_umem(umem_fd.as_raw_fd()) {
            return Err(refused(
                ifname,
                "the handed UMEM descriptor is not a memory file sealed at its size".into(),
            ));
        }
        let have = meta.len();
        if have != len as u64 {
            return Err(refused(
                ifname,
                format!("the UMEM memory file has {have} bytes, {len} expected"),
            ));
        }
        let mut tx_len = vec![0u32; TX_FRAMES as usize];
        for &(k, l) in &st.tx_pending {
            match tx_len.get_mut(k as usize) {
                Some(slot) if l != 0 && *slot == 0 => *slot = l,
                _ => return Err(refused(ifname, format!("pending transmit frame {k} ({l})"))),
            }
        }
        let tx_free = (RX_FRAMES..RX_FRAMES + TX_FRAMES)
            .rev()
            .filter(|&i| tx_len[(i - RX_FRAMES) as usize] == 0)
            .map(|i| u64::from(i) * frame_size as u64)
            .collect();
        let umem = Mapping::file(umem_fd.as_raw_fd(), len).map_err(|e| ctx(ifname, "UMEM", e))?;
        // Nothing is written to the rings here: if this process fails before it takes over,
        // the old one resumes exactly where it paused.
        let [rx, tx, fill, comp] = map_rings(ifname, raw)?;
        Ok(AfXdpPort {
            name: format!("afxdp:{ifname},{} ({mode})", st.queue),
            mode,
            queue: st.queue,
            mtu,
            frame_size,
            rx,
            fill,
            tx,
            comp,
            fd: sock,
            umem,
            umem_fd,
            ifname: ifname.to_string(),
            ifindex,
            tx_free,
            tx_len,
            tx_budget: st.tx_budget,
            stats: AfXdpStats::default(),
            kernel_base: st.kernel_stats,
            _attach: att,
        })
    }
}

/// The handover of AF_XDP sockets sharing one attachment: the state, then the descriptors
/// (link, program, map, then each socket's socket and UMEM memory file).
fn handover_sockets(ports: &[AfXdpPort], all_queues: bool) -> io::Result<PortHandover> {
    let first = ports.first().ok_or_else(|| io::Error::other("no socket to hand over"))?;
    let mut fds: Vec<OwnedFd> = first._attach.handover_fds()?.into();
    let mut sockets = Vec::with_capacity(ports.len());
    for p in ports {
        let (st, f) = p.socket_handover()?;
        sockets.push(st);
        fds.extend(f);
    }
    let state = AfXdpState {
        ifname: first.ifname.clone(),
        ifindex: first.ifindex,
        mode: first.mode,
        all_queues,
        layout: LAYOUT,
        sockets,
    };
    Ok(PortHandover { state: PortState::AfXdp(state), fds })
}

/// Carry on with an AF_XDP port of `ifname` another process handed over: its sockets (still
/// bound, still in the `XSKMAP`), their UMEMs (the same pages, mapped from the memory files)
/// and rings, and the XDP program's link, so the program stays attached across the change.
/// Frames the kernel put in the RX ring while the processes changed over are read here. A
/// state made by a build with other frame or ring sizes, an interface that is not the one the
/// sockets are bound to, or descriptors of the wrong kind are refused, and nothing is changed.
pub fn adopt(ifname: &str, state: &AfXdpState, fds: Vec<OwnedFd>) -> io::Result<Box<dyn Port>> {
    if state.layout != LAYOUT {
        return Err(refused(
            ifname,
            format!(
                "the sockets were made with frames and rings {:?}, this build uses {LAYOUT:?}",
                state.layout
            ),
        ));
    }
    let (ifindex, mtu, _) = interface(ifname)?;
    if ifindex != state.ifindex {
        return Err(refused(
            ifname,
            format!("interface index {ifindex}, the sockets are bound to {}", state.ifindex),
        ));
    }
    let n = state.sockets.len();
    if n == 0 || (!state.all_queues && n != 1) || fds.len() != 3 + 2 * n {
        return Err(refused(
            ifname,
            format!("{} descriptors for {n} socket(s), {} expected", fds.len(), 3 + 2 * n),
        ));
    }
    let mut fds = fds.into_iter();
    let mut next = || fds.next().ok_or_else(|| io::Error::other("descriptor count"));
    let att = Arc::new(
        Attachment::adopt([next()?, next()?, next()?], ifindex)
            .map_err(|e| ctx(ifname, "adopting the XDP program", e))?,
    );
    let mut ports = Vec::with_capacity(n);
    for st in &state.sockets {
        let pair = [next()?, next()?];
        ports.push(AfXdpPort::adopt_socket(
            ifname,
            (ifindex, mtu),
            state.mode,
            st,
            pair,
            att.clone(),
        )?);
    }
    if state.all_queues {
        Ok(Box::new(AfXdpQueuesPort::from_queues(ifname, ports)?))
    } else {
        Ok(Box::new(ports.pop().ok_or_else(|| io::Error::other("no socket"))?))
    }
}

/// The kernel's receive drops at one socket, each lost frame counted once (see the module
/// documentation, "Counters").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct KernelDrops {
    /// Frames dropped for any other reason (too large for a frame, no buffer in copy mode).
    socket: u64,
    /// Frames dropped because the RX ring was full.
    ring_full: u64,
    /// Frames dropped because the fill ring was empty.
    fill_empty: u64,
}

impl KernelDrops {
    /// The drops `k` reports for a socket in `mode`.
    ///
    /// A copying socket drops the frame when the fill ring is empty and counts it twice: in
    /// `rx_fill_ring_empty_descs` and in `rx_dropped`. In zero-copy mode the driver takes frames
    /// from the fill ring to refill its hardware ring ahead of time: `rx_fill_ring_empty_descs`
    /// counts its refill attempts that found the ring empty, not lost frames (a frame the NIC
    /// then had no buffer for is in the driver's own statistics), and `rx_dropped` does not
    /// include them. So zero-copy reports no fill-ring drops rather than an overstated count.
    fn of(mode: XdpMode, k: &libc::xdp_statistics) -> KernelDrops {
        let (socket, fill_empty) = match mode {
            XdpMode::NativeZeroCopy => (k.rx_dropped, 0),
            XdpMode::NativeCopy | XdpMode::GenericCopy => (
                k.rx_dropped.saturating_sub(k.rx_fill_ring_empty_descs),
                k.rx_fill_ring_empty_descs,
            ),
        };
        KernelDrops { socket, ring_full: k.rx_ring_full, fill_empty }
    }
}

/// The four rings of socket `fd` mapped: RX, TX, fill, completion. Each ring starts from the
/// indexes in its memory (zero on a fresh socket; where the old process left them on a
/// handed-over one), RX and completion as rings snic consumes.
fn map_rings(ifname: &str, fd: RawFd) -> io::Result<[Ring; 4]> {
    let off = mmap_offsets(fd).map_err(|e| ctx(ifname, "XDP_MMAP_OFFSETS", e))?;
    let desc = core::mem::size_of::<libc::xdp_desc>();
    let rx = Ring::map(fd, &off.rx, RX_SIZE, desc, libc::XDP_PGOFF_RX_RING as u64)
        .map_err(|e| ctx(ifname, "mapping the RX ring", e))?
        .consumer();
    let tx = Ring::map(fd, &off.tx, TX_SIZE, desc, libc::XDP_PGOFF_TX_RING as u64)
        .map_err(|e| ctx(ifname, "mapping the TX ring", e))?;
    let fill = Ring::map(fd, &off.fr, FILL_SIZE, 8, libc::XDP_UMEM_PGOFF_FILL_RING)
        .map_err(|e| ctx(ifname, "mapping the fill ring", e))?;
    let comp = Ring::map(fd, &off.cr, TX_SIZE, 8, libc::XDP_UMEM_PGOFF_COMPLETION_RING)
        .map_err(|e| ctx(ifname, "mapping the completion ring", e))?
        .consumer();
    Ok([rx, tx, fill, comp])
}

/// `XDP_MMAP_OFFSETS` of socket `fd` (the full struct, with the rings' flags: Linux 5.4+).
fn mmap_offsets(fd: RawFd) -> io::Result<libc::xdp_mmap_offsets> {
    // Four `struct xdp_ring_offset { producer, consumer, desc, flags }` of u64s: RX, TX, fill,
    // completion.
    let (w, len) = sock::getsockopt_words::<u64, 16>(fd, libc::SOL_XDP, libc::XDP_MMAP_OFFSETS)?;
    if len != core::mem::size_of::<libc::xdp_mmap_offsets>() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the kernel's AF_XDP rings have no flags (Linux before 5.4)",
        ));
    }
    let ring = |k: usize| libc::xdp_ring_offset {
        producer: w[4 * k],
        consumer: w[4 * k + 1],
        desc: w[4 * k + 2],
        flags: w[4 * k + 3],
    };
    Ok(libc::xdp_mmap_offsets { rx: ring(0), tx: ring(1), fr: ring(2), cr: ring(3) })
}

impl Port for AfXdpPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        // Frames left on the TX ring by an earlier send go out now.
        if self.tx.local != self.tx.cached {
            self.kick();
        }
        let want = (batch.max() - batch.len()).min(BURST) as u32;
        let n = self.rx.cons_ready(want);
        let mut got = 0;
        for i in 0..n {
            let d = self.rx.get_desc(i);
            let len = d.len as usize;
            let rx_end = u64::from(RX_FRAMES) * self.frame_size as u64;
            let frame = if d.addr < rx_end {
                frame_ref(&self.umem, self.frame_size, d.addr, len)
            } else {
                None
            };
            // A bad descriptor takes no slot: `push_slot` adds one, so it comes after the check.
            let Some(f) = frame else {
                self.stats.rx_bad_desc += 1;
                continue;
            };
            let Some(p) = batch.push_slot() else {
                // Unreachable: `want` is at most the batch's room.
                self.stats.rx_bad_desc += 1;
                continue;
            };
            p.set_frame(f);
            p.meta.rx_time = now;
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += len as u64;
            got += 1;
        }
        // The frames go straight back to the kernel (the fill ring holds all of them).
        let room = self.fill.prod_free(n);
        for i in 0..room {
            let a = self.rx.get_desc(i).addr;
            self.fill.put_addr(i, a - a % self.frame_size as u64);
        }
        self.fill.submit(room);
        self.rx.release(n);
        if self.fill.needs_wakeup() {
            self.stats.rx_wakeups += 1;
            // SAFETY: a zero-length recvfrom on our socket, no buffers or addresses passed.
            unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    core::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    core::ptr::null_mut(),
                    core::ptr::null_mut(),
                )
            };
        }
        Ok(got)
    }

    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let mut refused = Refused::default();
        let sent = self.send_frames(batch, &mut refused);
        refused.move_sent_first(batch, sent);
        let dropped = (batch.len() - sent) as u64;
        self.stats.tx_dropped += dropped;
        Ok(sent)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    /// Wake the kernel until every posted frame has completed, waiting at most
    /// 200 ms; frames still outstanding then did not leave and are counted so.
    fn flush(&mut self) -> io::Result<()> {
        let deadline = std::time::Instant::now() + FLUSH_LIMIT;
        loop {
            self.kick();
            self.reap();
            let done = self.tx_len.iter().all(|&l| l == 0 || l == WRITTEN_OFF);
            if done || std::time::Instant::now() >= deadline {
                break;
            }
            sys::poll::wait_writable(self.fd.as_raw_fd(), Duration::from_millis(1));
        }
        for l in &mut self.tx_len {
            if *l != 0 && *l != WRITTEN_OFF {
                self.stats.tx_packets = self.stats.tx_packets.saturating_sub(1);
                self.stats.tx_bytes = self.stats.tx_bytes.saturating_sub(u64::from(*l));
                self.stats.tx_dropped += 1;
                self.stats.tx_unsent += 1;
                // Written off: a late completion still frees the frame (see `reap`), but is
                // not counted again.
                *l = WRITTEN_OFF;
            }
        }
        Ok(())
    }

    fn caps(&self) -> PortCaps {
        // No GSO: the caller segments super-packets. Ethernet header and one VLAN tag.
        PortCaps {
            gso: false,
            tunnel_gso: false,
            max_frame: (self.mtu + 18).min(self.frame_size),
            merges_udp_tunnel: false,
        }
    }

    fn counters(&self) -> PortCounters {
        let s = &self.stats;
        let k = self.kernel_stats().unwrap_or(libc::xdp_statistics {
            rx_dropped: 0,
            rx_invalid_descs: 0,
            tx_invalid_descs: 0,
            rx_ring_full: 0,
            rx_fill_ring_empty_descs: 0,
            tx_ring_empty_descs: 0,
        });
        let d = KernelDrops::of(self.mode, &k);
        PortCounters {
            rx_packets: s.rx_packets,
            rx_bytes: s.rx_bytes,
            rx_errors: s.rx_bad_desc + k.rx_invalid_descs,
            tx_packets: s.tx_packets,
            tx_bytes: s.tx_bytes,
            tx_dropped: s.tx_dropped,
            rx_kernel_drops: d.socket,
            rx_ring_full: d.ring_full,
            rx_fill_empty: d.fill_empty,
            tx_ring_full: s.tx_ring_full,
        }
    }

    fn handover(&mut self) -> Option<io::Result<PortHandover>> {
        Some(handover_sockets(core::slice::from_ref(self), false))
    }
}

/// Every receive queue of one interface as one port, for a run where one loop serves the
/// interface (one worker): an AF_XDP socket is bound to a single queue, and the frames the
/// interface steers to the other queues would otherwise never reach snic (the redirect program
/// finds no socket for their queue and passes them to the kernel). Receive takes from each
/// queue in turn; transmit goes out of the first queue's socket (any queue may send). One
/// epoll descriptor, readable when any socket is, is what the I/O loop polls.
pub struct AfXdpQueuesPort {
    queues: Vec<AfXdpPort>,
    /// The queue the next receive starts at (so that no queue starves the others).
    next: usize,
    epoll: OwnedFd,
    name: String,
}

impl fmt::Debug for AfXdpQueuesPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AfXdpQueuesPort").field("name", &self.name).finish()
    }
}

impl AfXdpQueuesPort {
    /// Open every receive queue of `ifname` (one socket each, one shared program); a single
    /// queue interface gives a port of one queue.
    pub fn open(ifname: &str) -> io::Result<AfXdpQueuesPort> {
        let n = rx_queue_count(ifname).unwrap_or(1).max(1) as usize;
        let queues = AfXdpPort::open_queues(ifname, 0, n)?;
        Self::from_queues(ifname, queues)
    }

    /// One port over `queues`, sockets of `ifname` sharing one attachment.
    fn from_queues(ifname: &str, queues: Vec<AfXdpPort>) -> io::Result<AfXdpQueuesPort> {
        let n = queues.len();
        // SAFETY: epoll_create1 takes no pointers; the result is checked.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `ep` is a fresh descriptor that nothing else owns.
        let epoll = unsafe { OwnedFd::from_raw_fd(ep) };
        for q in &queues {
            let fd = q.fd.as_raw_fd();
            let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: fd as u64 };
            // SAFETY: `ev` is a live epoll_event the kernel only reads; both fds are open.
            let r = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        let mode = queues.first().map(|q| q.mode).unwrap_or(XdpMode::GenericCopy);
        let name = if n == 1 {
            format!("afxdp:{ifname},0 ({mode})")
        } else {
            format!("afxdp:{ifname},0-{} ({mode})", n - 1)
        };
        Ok(AfXdpQueuesPort { queues, next: 0, epoll, name })
    }

    /// The sockets, one per receive queue.
    pub fn queues(&self) -> &[AfXdpPort] {
        &self.queues
    }
}

impl Port for AfXdpQueuesPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let n = self.queues.len();
        let mut got = 0;
        for k in 0..n {
            if batch.is_full() {
                break;
            }
            got += self.queues[(self.next + k) % n].recv(now, batch)?;
        }
        self.next = (self.next + 1) % n.max(1);
        Ok(got)
    }

    fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        // Frames a receive left for a queue's transmit ring go out with that queue's receive.
        match self.queues.first_mut() {
            Some(q) => q.send(now, batch),
            None => Ok(0),
        }
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.epoll.as_raw_fd())
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut first = Ok(());
        for q in &mut self.queues {
            let r = q.flush();
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    fn caps(&self) -> PortCaps {
        self.queues.first().map(Port::caps).unwrap_or_default()
    }

    fn counters(&self) -> PortCounters {
        let mut c = PortCounters::default();
        for q in &self.queues {
            c.merge(&q.counters());
        }
        c
    }

    fn handover(&mut self) -> Option<io::Result<PortHandover>> {
        Some(handover_sockets(&self.queues, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain memory laid out like a kernel ring: indexes at 0, 64, 128, entries from 192.
    struct FakeRing {
        mem: Vec<u64>,
    }

    const LAYOUT: RingLayout = RingLayout { producer: 0, consumer: 64, flags: 128, desc: 192 };

    impl FakeRing {
        fn new(size: u32, entry: usize) -> FakeRing {
            FakeRing { mem: vec![0; (LAYOUT.len(size, entry)).div_ceil(8)] }
        }
        fn ring(&mut self, size: u32, entry: usize) -> Ring {
            let len = self.mem.len() * 8;
            // SAFETY: `mem` is 8-aligned, `len` bytes, and outlives the ring in every test
            // (the FakeRing is declared first and dropped last).
            unsafe { Ring::new(self.mem.as_mut_ptr().cast(), len, LAYOUT, size, entry, None) }
                .unwrap()
        }
    }

    #[test]
    fn rings_wrap_and_respect_the_other_side() {
        let mut mem = FakeRing::new(8, 8);
        // Producer and consumer views of the same memory (user and "kernel").
        let mut prod = mem.ring(8, 8);
        let mut cons = mem.ring(8, 8);
        let mut next = 0u64;
        let mut seen = Vec::new();
        for round in 0..10u32 {
            let n = prod.prod_free(5);
            // Never more than the ring holds minus what the consumer has not taken.
            assert!(n <= 8 - prod.local.wrapping_sub(cons.local), "round {round}");
            for i in 0..n {
                prod.put_addr(i, next + u64::from(i));
            }
            prod.submit(n);
            next += u64::from(n);
            let take = cons.cons_ready(3 + round % 4);
            for i in 0..take {
                seen.push(cons.get_addr(i));
            }
            cons.release(take);
        }
        let rest = cons.cons_ready(64);
        for i in 0..rest {
            seen.push(cons.get_addr(i));
        }
        cons.release(rest);
        assert_eq!(seen, (0..next).collect::<Vec<_>>());
        assert!(next > 8, "the indexes wrapped the ring");
        assert_eq!(prod.prod_outstanding(), 0);
        // A full ring refuses more until the consumer moves.
        assert_eq!(prod.prod_free(8), 8);
        prod.submit(8);
        assert_eq!(prod.prod_free(1), 0);
        assert_eq!(prod.prod_outstanding(), 8);
        cons.cons_ready(8);
        cons.release(2);
        assert_eq!(prod.prod_free(4), 2);
    }

    #[test]
    fn descriptors_round_trip_and_the_wakeup_flag_is_read() {
        let mut mem = FakeRing::new(4, 16);
        let mut prod = mem.ring(4, 16);
        let mut cons = mem.ring(4, 16);
        assert!(!prod.needs_wakeup());
        prod.put_desc(0, libc::xdp_desc { addr: 4096, len: 60, options: 0 });
        prod.submit(1);
        assert_eq!(cons.cons_ready(4), 1);
        let d = cons.get_desc(0);
        assert_eq!((d.addr, d.len), (4096, 60));
        prod.index(LAYOUT.flags).store(libc::XDP_RING_NEED_WAKEUP, Ordering::Relaxed);
        assert!(prod.needs_wakeup());
    }

    #[test]
    fn ring_layouts_that_do_not_fit_are_refused() {
        let mut mem = FakeRing::new(8, 8);
        let len = mem.mem.len() * 8;
        let p = mem.mem.as_mut_ptr().cast();
        let bad = [
            // Entries past the end.
            (LAYOUT, 16),
            // Misaligned index.
            (RingLayout { consumer: 66, ..LAYOUT }, 8),
            // Not a power of two.
            (LAYOUT, 6),
        ];
        for (layout, size) in bad {
            // SAFETY: as in `FakeRing::ring`; a refused ring never touches the memory.
            assert!(unsafe { Ring::new(p, len, layout, size, 8, None) }.is_err(), "{layout:?}");
        }
    }

    #[test]
    fn frames_stay_inside_their_chunk_and_the_umem() {
        let umem = 4 * 2048;
        assert_eq!(frame_range(umem, 2048, 256, 1518), Some(256));
        assert_eq!(frame_range(umem, 2048, 2048 + 256, 1792), Some(2304));
        // Crossing into the next frame, past the UMEM, or overflowing: refused.
        assert_eq!(frame_range(umem, 2048, 256, 1793), None);
        assert_eq!(frame_range(umem, 2048, 4 * 2048, 60), None);
        assert_eq!(frame_range(umem, 2048, u64::MAX - 10, 60), None);
    }

    /// A copying socket's fill-ring drops are also in `rx_dropped`: counted once. Zero-copy's
    /// fill-ring count is refill attempts, not lost frames: not reported as drops.
    #[test]
    fn kernel_drops_count_each_lost_frame_once_and_no_refill_misses() {
        let k = libc::xdp_statistics {
            rx_dropped: 10,
            rx_invalid_descs: 0,
            tx_invalid_descs: 0,
            rx_ring_full: 3,
            rx_fill_ring_empty_descs: 4,
            tx_ring_empty_descs: 0,
        };
        for mode in [XdpMode::NativeCopy, XdpMode::GenericCopy] {
            let d = KernelDrops::of(mode, &k);
            assert_eq!(d, KernelDrops { socket: 6, ring_full: 3, fill_empty: 4 }, "{mode}");
        }
        let d = KernelDrops::of(XdpMode::NativeZeroCopy, &k);
        assert_eq!(d, KernelDrops { socket: 10, ring_full: 3, fill_empty: 0 });
        // More fill-ring misses than drops (never in copy mode): no underflow.
        let odd = libc::xdp_statistics { rx_fill_ring_empty_descs: 20, ..k };
        assert_eq!(KernelDrops::of(XdpMode::NativeCopy, &odd).socket, 0);
    }

    #[test]
    fn frame_size_follows_the_mtu() {
        assert_eq!(frame_size_for_mtu(1500), Some(2048));
        assert_eq!(frame_size_for_mtu(1774), Some(2048));
        assert_eq!(frame_size_for_mtu(1775), Some(4096));
        assert_eq!(frame_size_for_mtu(3800), Some(4096));
        assert_eq!(frame_size_for_mtu(9000), None);
    }

    #[test]
    fn modes_map_to_kernel_flags_best_first() {
        assert_eq!(XdpMode::NativeZeroCopy.link_flags(), XDP_FLAGS_DRV_MODE);
        assert_eq!(XdpMode::GenericCopy.link_flags(), XDP_FLAGS_SKB_MODE);
        assert_eq!(
            XdpMode::NativeZeroCopy.bind_flags(),
            libc::XDP_ZEROCOPY | libc::XDP_USE_NEED_WAKEUP
        );
        assert_eq!(XdpMode::NativeCopy.bind_flags(), libc::XDP_COPY | libc::XDP_USE_NEED_WAKEUP);
        assert_eq!(AttachMode::Auto.candidates()[0], XdpMode::NativeZeroCopy);
        assert_eq!(AttachMode::Generic.candidates(), &[XdpMode::GenericCopy]);
        assert_eq!(XdpMode::NativeCopy.to_string(), "native copy");
    }

    #[test]
    fn the_redirect_program_reads_the_queue_and_falls_back_to_pass() {
        let p = redirect_program();
        assert_eq!(p.len(), 6);
        assert_eq!((p[0].code, p[0].dst, p[0].src, p[0].off), (0x61, 2, 1, 16));
        assert_eq!((p[1].code, p[1].src, p[1].imm), (0x18, pseudo::MAP_FD, 0));
        assert_eq!((p[3].dst, p[3].imm), (3, XDP_PASS));
        assert_eq!((p[4].code, p[4].imm), (0x85, BPF_FUNC_REDIRECT_MAP));
        assert_eq!(p[5].code, 0x95);
    }

    #[test]
    fn the_kernel_verifies_the_redirect_program_and_it_passes_without_a_socket() {
        if !crate::bpf::require_bpf("the_kernel_verifies_the_redirect_program") {
            return;
        }
        let map = KernelMap::create(&MapSpec {
            name: "t_xsks".into(),
            kind: MapKind::Other(BPF_MAP_TYPE_XSKMAP),
            key_size: 4,
            value_size: 4,
            max_entries: 4,
            data: None,
            readonly: false,
        })
        .unwrap();
        let prog =
            KernelProgram::load_raw(&redirect_program(), &[&map], PROG_TYPE_XDP, "GPL", "t_redir")
                .unwrap_or_else(|r| panic!("{r}"));
        // No socket at queue 0: the fallback action, XDP_PASS.
        let run = prog.test_run(&[0u8; 64], 1).unwrap();
        assert_eq!(run.retval, XDP_PASS as u32);
    }

    #[test]
    fn missing_interfaces_and_bad_queues_are_clear_errors() {
        let e = AfXdpPort::open("snicnosuchxdp0", 0).unwrap_err();
        assert!(e.to_string().starts_with("afxdp:snicnosuchxdp0: no such interface"), "{e}");
        assert_eq!(AfXdpPort::open("a\0b", 0).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        // Loopback has one receive queue.
        let e = AfXdpPort::open("lo", 7).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("receive queue"), "{e}");
        let e = AfXdpPort::open_queues("lo", 0, 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
