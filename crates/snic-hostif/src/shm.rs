//! Shared memory and the setup socket: memfd mappings, `SCM_RIGHTS` fd passing, eventfds.
//!
//! This is the one module of the crate that talks to the kernel directly (through `libc`).
//! Everything another process can influence (the bytes of a shared mapping, the size of a
//! passed fd, the messages and fds on the setup socket) is checked here and surfaces as a
//! typed error or a harmless value, never as a panic or undefined behaviour on our side.
//!
//! Shared memory is outside Rust's memory model: another process may write it at any time.
//! snic treats its contents as untrusted bytes: it copies them out with bounds-checked raw
//! copies ([`Mapping::read`]), and the words used for signalling (ring indices, doorbells)
//! are accessed as atomics ([`Mapping::atomic_u32`]).
#![allow(
    unsafe_code,
    reason = "mmap, memfd, sendmsg/recvmsg with SCM_RIGHTS and atomics on shared memory; each \
              block has a SAFETY comment"
)]

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::proto::{MAX_FDS, MAX_MESSAGE};

/// Size of the huge pages `MFD_HUGETLB` asks for (and the rounding of huge mappings).
pub const HUGE_PAGE: usize = 2 << 20;

/// Turn a libc return value (`-1` = error) into an `io::Result`.
fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc == -1 { Err(io::Error::last_os_error()) } else { Ok(rc) }
}

/// Like [`cvt`], retrying while the call was interrupted by a signal.
fn cvt_retry(mut f: impl FnMut() -> libc::c_int) -> io::Result<libc::c_int> {
    loop {
        match cvt(f()) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// [`cvt_retry`] for calls that return a byte count (`ssize_t`).
fn cvt_retry_len(mut f: impl FnMut() -> libc::ssize_t) -> io::Result<usize> {
    loop {
        let n = f();
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Take ownership of a fd the kernel just returned (`fd >= 0`).
fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: the caller passes a fd that a successful syscall has just created for us; no
    // other owner exists, so wrapping it (and closing it on drop) is sound.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// A shared (MAP_SHARED) read-write mapping of a memfd (or any mappable fd). Another process
/// may map the same memory: every access goes through raw-pointer copies bounded by the
/// mapping's length, and 32-bit words used for signalling through atomics.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    huge: bool,
    /// Bytes actually mapped (`len` rounded up to the page size of the mapping): what `munmap`
    /// is given.
    map_len: usize,
    /// Whether the fd carries `F_SEAL_SHRINK` (the other side cannot shrink it under us).
    sealed: bool,
}

/// `mmap(len)` shared read-write of `fd` at offset 0.
fn mmap_shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a fresh mapping at an address the kernel chooses (addr = NULL): it cannot
    // overlap or replace any existing Rust allocation. The fd is borrowed, so it is open for
    // the duration of the call; the mapping keeps its own reference to the file.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))
}

/// `F_GET_SEALS` has `F_SEAL_SHRINK`.
fn has_shrink_seal(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: fcntl(F_GET_SEALS) only reads the seals of the fd's file; no memory is passed.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    seals != -1 && seals & libc::F_SEAL_SHRINK != 0
}

/// `f_type` of a hugetlbfs file system (linux/magic.h).
const HUGETLBFS_MAGIC: u32 = 0x9584_58f6;

/// The huge page size of `fd`'s file when it lives on hugetlbfs (a `MFD_HUGETLB` memfd or a
/// file under a hugetlbfs mount), `None` for any other file. Asked with `fstatfs`: the file
/// system type is the only reliable sign (a large `st_blksize` is not: ordinary file systems
/// may report one). hugetlbfs reports its page size as `f_bsize`.
fn hugetlb_page_size(fd: BorrowedFd<'_>) -> io::Result<Option<usize>> {
    // SAFETY: `statfs` is a plain C struct for which all-zero bytes are a valid value.
    let mut sfs: libc::statfs = unsafe { zeroed() };
    // SAFETY: `sfs` is a valid, writable `statfs` that outlives the call.
    cvt(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut sfs) })?;
    // `f_type` is a signed word of platform-dependent width; the magic is its low 32 bits.
    #[allow(clippy::unnecessary_cast, reason = "f_type's type differs between targets")]
    let magic = (sfs.f_type as u64 & 0xffff_ffff) as u32;
    if magic != HUGETLBFS_MAGIC {
        return Ok(None);
    }
    let page = usize::try_from(sfs.f_bsize).unwrap_or(0);
    // A page size the kernel would not report means we cannot round correctly: refuse.
    if !page.is_power_of_two() || page < 4096 {
        return Err(io::Error::other("hugetlbfs reports an odd page size"));
    }
    Ok(Some(page))
}

/// Create a memfd of `len` bytes, sealed against shrinking and growing.
fn memfd_sized(name: &CString, len: usize, flags: libc::c_uint) -> io::Result<OwnedFd> {
    let size = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "memfd length too large"))?;
    // SAFETY: `name` is a valid NUL-terminated string that outlives the call.
    let fd = cvt(unsafe {
        libc::memfd_create(name.as_ptr(), flags | libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
    })?;
    let fd = owned(fd);
    // SAFETY: ftruncate on a fd we own; no memory is passed.
    cvt_retry(|| unsafe { libc::ftruncate(fd.as_raw_fd(), size) })?;
    // Seal the size so that a peer holding the fd cannot shrink it under our mapping (which
    // would turn our accesses into SIGBUS). Best effort: old kernels may refuse.
    // SAFETY: fcntl(F_ADD_SEALS) on a fd we own; no memory is passed.
    let _ = unsafe {
        libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW)
    };
    Ok(fd)
}

impl Mapping {
    /// Create a memfd of `len` bytes named `name`, map it shared, and return the mapping and
    /// the fd (to pass to another process). With `huge`, try `MFD_HUGETLB` first (len rounded
    /// up to 2 MiB) and fall back to normal pages (then ask for transparent huge pages with
    /// `madvise`); [`Mapping::huge`] says which happened.
    ///
    /// The memfd is sealed against shrinking and growing (`F_SEAL_SHRINK | F_SEAL_GROW`), so
    /// whoever receives it can map it without fearing that it is truncated under them.
    pub fn memfd(name: &str, len: usize, huge: bool) -> io::Result<(Mapping, OwnedFd)> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "zero-length mapping"));
        }
        let cname = CString::new(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "memfd name contains NUL"))?;
        if huge {
            let hlen = len
                .checked_next_multiple_of(HUGE_PAGE)
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "length too large"))?;
            let try_huge = || -> io::Result<(Mapping, OwnedFd)> {
                let fd = memfd_sized(&cname, hlen, libc::MFD_HUGETLB | libc::MFD_HUGE_2MB)?;
                let ptr = mmap_shared(fd.as_fd(), hlen)?;
                let sealed = has_shrink_seal(fd.as_fd());
                Ok((Mapping { ptr, len: hlen, huge: true, map_len: hlen, sealed }, fd))
            };
            if let Ok(r) = try_huge() {
                return Ok(r);
            }
        }
        let fd = memfd_sized(&cname, len, 0)?;
        let ptr = mmap_shared(fd.as_fd(), len)?;
        if huge {
            // SAFETY: MADV_HUGEPAGE only changes how the kernel backs the pages of a mapping
            // we just created and own; contents and validity are unchanged. Errors (THP
            // disabled) are harmless and ignored.
            let _ = unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
        }
        let sealed = has_shrink_seal(fd.as_fd());
        Ok((Mapping { ptr, len, huge: false, map_len: len, sealed }, fd))
    }

    /// Map `len` bytes of a received fd shared read-write. Fails (EINVAL) when the fd is
    /// smaller than `len` (checked with fstat) or `len` is 0.
    ///
    /// If the fd is a memfd that allows sealing, `F_SEAL_SHRINK` is added first (best
    /// effort), so that the sender cannot truncate it afterwards; [`Mapping::shrink_sealed`]
    /// says whether the fd is protected that way. A hugetlbfs fd gives a huge mapping.
    pub fn map_fd(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mapping> {
        let einval = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
        if len == 0 {
            return Err(einval("zero-length mapping"));
        }
        // SAFETY: fcntl(F_ADD_SEALS) changes only the seals of the fd's file; no memory is
        // passed. Failure (not a memfd, sealing not allowed, already sealed) is ignored.
        let _ = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
        // SAFETY: `st` is a plain C struct for which all-zero bytes are a valid value.
        let mut st: libc::stat = unsafe { zeroed() };
        // SAFETY: `st` is a valid, writable `stat` that outlives the call.
        cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
        let size = u64::try_from(st.st_size).unwrap_or(0);
        if size < len as u64 {
            return Err(einval("fd is smaller than the mapping asked for"));
        }
        // A hugetlbfs mapping is unmapped in whole huge pages; anything else is unmapped with
        // the length it was mapped with (the kernel rounds that to base pages itself).
        let page = hugetlb_page_size(fd)?;
        let huge = page.is_some();
        let map_len = match page {
            Some(p) => len.checked_next_multiple_of(p).ok_or_else(|| einval("length too large"))?,
            None => len,
        };
        let ptr = mmap_shared(fd, len)?;
        Ok(Mapping { ptr, len, huge, map_len, sealed: has_shrink_seal(fd) })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the mapping is empty (never: mappings have at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Whether it is backed by huge pages (hugetlbfs).
    pub fn huge(&self) -> bool {
        self.huge
    }
    /// Whether the underlying file is sealed against shrinking (`F_SEAL_SHRINK`), so that no
    /// process holding the fd can truncate it under this mapping.
    pub fn shrink_sealed(&self) -> bool {
        self.sealed
    }
    /// First byte (for the C ABI, which hands buffers to C code).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    /// `off` if `[off, off + n)` lies inside the mapping.
    fn check(&self, off: usize, n: usize) -> Option<usize> {
        off.checked_add(n).filter(|&end| end <= self.len).map(|_| off)
    }
    /// Copy `buf.len()` bytes at `off` into `buf`; `None` when out of bounds.
    pub fn read(&self, off: usize, buf: &mut [u8]) -> Option<()> {
        let off = self.check(off, buf.len())?;
        // SAFETY: `[off, off + buf.len())` lies inside the live mapping (checked above), and
        // `buf` is a distinct Rust allocation, so the ranges do not overlap. Another process
        // may write the source concurrently: the bytes copied are then some mix of old and
        // new values, which callers treat as untrusted input.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), buf.as_mut_ptr(), buf.len())
        };
        Some(())
    }
    /// Copy `data` to `off`; `None` when out of bounds.
    pub fn write(&self, off: usize, data: &[u8]) -> Option<()> {
        let off = self.check(off, data.len())?;
        // SAFETY: `[off, off + data.len())` lies inside the live, writable mapping (checked
        // above); `data` is a Rust slice, which cannot point into this mapping through safe
        // code except via `SharedBacking::bytes`, whose caveat is documented there.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(off), data.len())
        };
        Some(())
    }
    /// The 32-bit word at `off` as an atomic; `None` when out of bounds or not 4-aligned.
    pub fn atomic_u32(&self, off: usize) -> Option<&AtomicU32> {
        if !off.is_multiple_of(4) {
            return None;
        }
        let off = self.check(off, 4)?;
        // SAFETY: the mapping starts on a page boundary and `off` is a multiple of 4, so the
        // word is 4-byte aligned; it lies inside the mapping (checked), which lives as long as
        // `&self`. `AtomicU32` has the layout of `u32`, any bit pattern is valid, and all
        // accesses through it are atomic, so concurrent access from other threads or
        // processes (through their own atomics) is well-defined.
        Some(unsafe { &*(self.ptr.as_ptr().add(off) as *const AtomicU32) })
    }
    /// Acquire-load the u32 at `off` (0 when out of bounds or misaligned: offsets are
    /// constants of [`crate::abi`], checked by tests).
    pub fn load_u32(&self, off: usize) -> u32 {
        self.atomic_u32(off).map_or(0, |a| a.load(Ordering::Acquire))
    }
    /// Release-store the u32 at `off` (ignored when out of bounds or misaligned).
    pub fn store_u32(&self, off: usize, v: u32) {
        if let Some(a) = self.atomic_u32(off) {
            a.store(v, Ordering::Release);
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`map_len` describe exactly the mapping `mmap` returned, which this
        // value owns; every borrow handed out (`atomic_u32`, slices of a `SharedBacking`)
        // borrows `self` (directly or through the `Arc`), so none outlives it.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.map_len) };
    }
}

// SAFETY: a `Mapping` owns its memory region (no thread-local state; `munmap` may run on any
// thread). Moving it to another thread moves that ownership.
unsafe impl Send for Mapping {}
// SAFETY: through `&Mapping` the memory is only reached by bounds-checked raw copies (which
// other processes may race with anyway; their results are treated as untrusted bytes) and by
// atomics, so sharing `&Mapping` between threads adds no new hazard.
unsafe impl Sync for Mapping {}

/// A window `[off, off + len)` of a shared [`Mapping`], as a [`snic_dma::Backing`] for the
/// engines' address space. Cloning the `Arc` gives several address spaces (one per worker
/// thread) views of the same memory.
///
/// A window that runs past the end of the mapping is clamped to it (its [`Backing::len`] is
/// then smaller than `len`), so a wrong window is never undefined behaviour.
///
/// Aliasing caveat: [`Backing::bytes`] and [`Backing::bytes_mut`] hand out ordinary slices of
/// memory that other processes (and other clones of this backing) may write at the same time.
/// snic treats these bytes as untrusted input, only ever copies them, and publishes indices
/// with [`Backing::store_u32_release`] / reads them with [`Backing::load_u32_acquire`]
/// (atomics); the engines borrow only the range they move ([`Backing::range`]).
///
/// [`Backing`]: snic_dma::mem::Backing
/// [`Backing::len`]: snic_dma::mem::Backing::len
/// [`Backing::bytes`]: snic_dma::mem::Backing::bytes
/// [`Backing::bytes_mut`]: snic_dma::mem::Backing::bytes_mut
/// [`Backing::range`]: snic_dma::mem::Backing::range
/// [`Backing::store_u32_release`]: snic_dma::mem::Backing::store_u32_release
/// [`Backing::load_u32_acquire`]: snic_dma::mem::Backing::load_u32_acquire
#[derive(Debug, Clone)]
pub struct SharedBacking {
    /// The mapping.
    pub map: Arc<Mapping>,
    /// Window start.
    pub off: usize,
    /// Window length.
    pub len: usize,
}

impl SharedBacking {
    /// The whole mapping as one window.
    pub fn whole(map: Arc<Mapping>) -> SharedBacking {
        let len = map.len();
        SharedBacking { map, off: 0, len }
    }

    /// The window clamped to the mapping: (start offset in the mapping, length).
    fn window(&self) -> (usize, usize) {
        let start = self.off.min(self.map.len());
        let end = self.off.saturating_add(self.len).min(self.map.len());
        (start, end - start)
    }

    /// `[off, off + len)` of the window as (offset in the mapping, length); empty when it is
    /// not inside the window.
    fn sub(&self, off: usize, len: usize) -> (usize, usize) {
        let (start, wlen) = self.window();
        match off.checked_add(len) {
            Some(end) if end <= wlen => (start + off, len),
            _ => (start, 0),
        }
    }
}

impl snic_dma::mem::Backing for SharedBacking {
    fn bytes(&self) -> &[u8] {
        let (start, len) = self.window();
        // SAFETY: `[start, start + len)` lies inside the live mapping (clamped by `window`),
        // which the `Arc` keeps alive for the borrow of `self`. Other processes may write it
        // concurrently (see the aliasing caveat on the type): its bytes are plain `u8`, any
        // value is valid, and snic treats them as untrusted.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(start), len) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        let (start, len) = self.window();
        // SAFETY: as in `bytes`; the mapping is writable (PROT_WRITE). Other views of the
        // same memory may exist (clones, other processes): see the aliasing caveat on the type.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr().add(start), len) }
    }
    fn len(&self) -> usize {
        self.window().1
    }
    fn range(&self, off: usize, len: usize) -> &[u8] {
        let (start, len) = self.sub(off, len);
        // SAFETY: `sub` keeps `[start, start + len)` inside the window, hence inside the live
        // mapping; see `bytes`.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(start), len) }
    }
    fn range_mut(&mut self, off: usize, len: usize) -> &mut [u8] {
        let (start, len) = self.sub(off, len);
        // SAFETY: `sub` keeps `[start, start + len)` inside the window, hence inside the live,
        // writable mapping; see `bytes_mut`.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr().add(start), len) }
    }
    fn load_u32_acquire(&self, off: usize) -> u32 {
        let (start, len) = self.sub(off, 4);
        if len != 4 {
            return 0;
        }
        if let Some(a) = self.map.atomic_u32(start) {
            return u32::from_le(a.load(Ordering::Acquire));
        }
        // A window that starts off a 4-byte boundary: plain copy, then the fence.
        let mut b = [0u8; 4];
        let _ = self.map.read(start, &mut b);
        std::sync::atomic::fence(Ordering::Acquire);
        u32::from_le_bytes(b)
    }
    fn store_u32_release(&mut self, off: usize, v: u32) {
        let (start, len) = self.sub(off, 4);
        if len != 4 {
            return;
        }
        if let Some(a) = self.map.atomic_u32(start) {
            a.store(v.to_le(), Ordering::Release);
        } else {
            // A window that starts off a 4-byte boundary: the fence, then a plain copy.
            std::sync::atomic::fence(Ordering::Release);
            let _ = self.map.write(start, &v.to_le_bytes());
        }
    }
}

/// A `SOCK_SEQPACKET` Unix socket (the setup channel).
#[derive(Debug)]
pub struct SeqPacket {
    fd: OwnedFd,
}

/// A listening `SOCK_SEQPACKET` Unix socket.
#[derive(Debug)]
pub struct SeqListener {
    fd: OwnedFd,
}

/// A new `AF_UNIX`, `SOCK_SEQPACKET` socket (close-on-exec).
fn seq_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes no pointers.
    let fd =
        cvt(unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) })?;
    Ok(owned(fd))
}

/// A `sockaddr_un` for a filesystem path, and the address length to pass.
fn unix_addr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: `sockaddr_un` is a plain C struct; all-zero bytes are a valid value.
    let mut addr: libc::sockaddr_un = unsafe { zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    // Room for the terminating NUL.
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "unusable Unix socket path"));
    }
    for (d, &s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

/// Set or clear `O_NONBLOCK` on a fd.
fn set_nonblocking(fd: BorrowedFd<'_>, nb: bool) -> io::Result<()> {
    // SAFETY: fcntl(F_GETFL) takes no pointers.
    let flags = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    let new = if nb { flags | libc::O_NONBLOCK } else { flags & !libc::O_NONBLOCK };
    if new != flags {
        // SAFETY: fcntl(F_SETFL) takes an int, no pointers.
        cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, new) })?;
    }
    Ok(())
}

impl SeqListener {
    /// A listener over a listening `SOCK_SEQPACKET` socket received from elsewhere (another
    /// process handing its socket over).
    pub fn from_fd(fd: OwnedFd) -> SeqListener {
        SeqListener { fd }
    }

    /// Bind and listen at `path` (an existing socket file is replaced).
    pub fn bind(path: &Path) -> io::Result<SeqListener> {
        let (addr, alen) = unix_addr(path)?;
        // Replace a stale socket file; anything else at the path makes bind fail.
        if let Ok(md) = std::fs::symlink_metadata(path)
            && md.file_type().is_socket()
        {
            std::fs::remove_file(path)?;
        }
        let fd = seq_socket()?;
        // SAFETY: `addr` is a valid `sockaddr_un` of at least `alen` bytes, living across
        // the call.
        cvt(unsafe {
            libc::bind(fd.as_raw_fd(), (&raw const addr).cast::<libc::sockaddr>(), alen)
        })?;
        // SAFETY: listen(2) takes no pointers.
        cvt(unsafe { libc::listen(fd.as_raw_fd(), 128) })?;
        Ok(SeqListener { fd })
    }
    /// Accept one connection (blocking, or `WouldBlock` when non-blocking).
    pub fn accept(&self) -> io::Result<SeqPacket> {
        let fd = cvt_retry(|| {
            // SAFETY: null address pointers ask the kernel not to report the peer address.
            unsafe {
                libc::accept4(
                    self.fd.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            }
        })?;
        Ok(SeqPacket { fd: owned(fd) })
    }
    /// Make accept non-blocking.
    pub fn set_nonblocking(&self, nb: bool) -> io::Result<()> {
        set_nonblocking(self.fd.as_fd(), nb)
    }
    /// The fd (to poll on).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Bytes of control buffer for [`MAX_FDS`] fds.
// SAFETY: CMSG_SPACE only computes a size from its argument (it is `unsafe` for no reason
// that applies to a constant argument).
const CMSG_CAP: usize = unsafe { libc::CMSG_SPACE((MAX_FDS * size_of::<RawFd>()) as u32) } as usize;

/// A control-message buffer aligned for `cmsghdr`.
#[repr(C, align(8))]
struct CmsgBuf([u8; CMSG_CAP]);

impl SeqPacket {
    /// A connection over a connected `SOCK_SEQPACKET` socket received from elsewhere
    /// (another process handing its connection over).
    pub fn from_fd(fd: OwnedFd) -> SeqPacket {
        SeqPacket { fd }
    }

    /// Connect to a listener at `path`.
    pub fn connect(path: &Path) -> io::Result<SeqPacket> {
        let (addr, alen) = unix_addr(path)?;
        let fd = seq_socket()?;
        // SAFETY: `addr` is a valid `sockaddr_un` of at least `alen` bytes, living across
        // the call.
        cvt(unsafe {
            libc::connect(fd.as_raw_fd(), (&raw const addr).cast::<libc::sockaddr>(), alen)
        })?;
        Ok(SeqPacket { fd })
    }
    /// A connected pair (for tests).
    pub fn pair() -> io::Result<(SeqPacket, SeqPacket)> {
        let mut fds = [-1 as RawFd; 2];
        // SAFETY: `fds` has room for the two fds socketpair writes.
        cvt(unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        })?;
        Ok((SeqPacket { fd: owned(fds[0]) }, SeqPacket { fd: owned(fds[1]) }))
    }
    /// Send one message with `fds` attached.
    ///
    /// `msg` must hold 1 to [`MAX_MESSAGE`] bytes (an empty message would read as end of
    /// stream on the other side) and `fds` at most [`MAX_FDS`] fds: otherwise `InvalidInput`.
    /// A peer that has gone away gives `BrokenPipe` (no SIGPIPE is raised).
    pub fn send(&self, msg: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        if msg.is_empty() || msg.len() > MAX_MESSAGE {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "message size out of range"));
        }
        if fds.len() > MAX_FDS {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many fds"));
        }
        let mut iov =
            libc::iovec { iov_base: msg.as_ptr() as *mut libc::c_void, iov_len: msg.len() };
        let mut cbuf = CmsgBuf([0; CMSG_CAP]);
        // SAFETY: `msghdr` is a plain C struct; all-zero bytes are a valid (empty) value.
        let mut mh: libc::msghdr = unsafe { zeroed() };
        mh.msg_iov = &raw mut iov;
        mh.msg_iovlen = 1;
        if !fds.is_empty() {
            let data_len = (fds.len() * size_of::<RawFd>()) as u32;
            mh.msg_control = cbuf.0.as_mut_ptr().cast();
            // SAFETY: CMSG_SPACE only computes a size.
            mh.msg_controllen = unsafe { libc::CMSG_SPACE(data_len) } as _;
            // SAFETY: `mh.msg_control` points at `cbuf`, aligned for `cmsghdr` and at least
            // `msg_controllen` (<= CMSG_CAP) bytes long, so the first header and its data lie
            // inside the buffer; CMSG_DATA points `CMSG_LEN(0)` bytes into it, leaving room
            // for `fds.len()` ints (written unaligned, as the data may not be int-aligned).
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&raw const mh);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(data_len) as _;
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                for (i, fd) in fds.iter().enumerate() {
                    data.add(i).write_unaligned(fd.as_raw_fd());
                }
            }
        }
        // SAFETY: `mh` points at `iov` (describing `msg`, readable) and, when fds are passed,
        // at `cbuf`; all outlive the call, and sendmsg only reads them.
        let n = cvt_retry_len(|| unsafe {
            libc::sendmsg(self.fd.as_raw_fd(), &raw const mh, libc::MSG_NOSIGNAL)
        })?;
        if n != msg.len() {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "message sent partially"));
        }
        Ok(())
    }
    /// Receive one message into `buf` (up to [`crate::proto::MAX_MESSAGE`] bytes) and the fds
    /// attached (at most [`crate::proto::MAX_FDS`]; extra or truncated control data is an
    /// error and every fd received is closed). `Ok((0, []))` is end of stream (peer closed).
    ///
    /// A message longer than `buf` is an `InvalidData` error too (its tail is lost). When a
    /// read timeout is set and passes, the error is `TimedOut`.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let mut cbuf = CmsgBuf([0; CMSG_CAP]);
        // SAFETY: `msghdr` is a plain C struct; all-zero bytes are a valid (empty) value.
        let mut mh: libc::msghdr = unsafe { zeroed() };
        mh.msg_iov = &raw mut iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cbuf.0.as_mut_ptr().cast();
        mh.msg_controllen = CMSG_CAP as _;
        // SAFETY: `mh` describes `buf` (writable, `buf.len()` bytes) and `cbuf` (writable,
        // CMSG_CAP bytes); both outlive the call, and the kernel writes only inside them.
        let r = cvt_retry_len(|| unsafe {
            libc::recvmsg(self.fd.as_raw_fd(), &raw mut mh, libc::MSG_CMSG_CLOEXEC)
        });
        let n = match r {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "receive timed out"));
            }
            Err(e) => return Err(e),
        };
        // Take ownership of every fd received before anything else, so that each is closed on
        // every path below.
        let mut fds = Vec::new();
        let clen = (mh.msg_controllen as usize).min(CMSG_CAP);
        if clen > 0 {
            mh.msg_controllen = clen as _;
            // SAFETY: the kernel filled `msg_controllen` (clamped to the buffer) bytes of
            // `cbuf` with well-formed control messages; CMSG_FIRSTHDR/CMSG_NXTHDR stay
            // within `[msg_control, msg_control + msg_controllen)` and return NULL past the
            // end. For SCM_RIGHTS the data holds `(cmsg_len - CMSG_LEN(0)) / 4` ints, which
            // lie inside the header's extent; they are read unaligned. Each is a new fd
            // installed for us by the kernel, owned by nobody else.
            unsafe {
                let base = libc::CMSG_LEN(0) as usize;
                let end = cbuf.0.as_ptr() as usize + clen;
                let mut c = libc::CMSG_FIRSTHDR(&raw const mh);
                while !c.is_null() {
                    let data = libc::CMSG_DATA(c);
                    let clen_here = ((*c).cmsg_len as usize).saturating_sub(base);
                    let avail = end.saturating_sub(data as usize);
                    let bytes = clen_here.min(avail);
                    if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                        let p = data.cast::<RawFd>();
                        for i in 0..bytes / size_of::<RawFd>() {
                            let fd = p.add(i).read_unaligned();
                            if fd >= 0 {
                                fds.push(owned(fd));
                            }
                        }
                    }
                    c = libc::CMSG_NXTHDR(&raw const mh, c);
                }
            }
        }
        if mh.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "too many fds attached"));
        }
        if mh.msg_flags & libc::MSG_TRUNC != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "message too long"));
        }
        if fds.len() > MAX_FDS {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "too many fds attached"));
        }
        Ok((n, fds))
    }
    /// Receive with a timeout (`TimedOut` when nothing arrived).
    ///
    /// `None` blocks forever; a zero duration is `InvalidInput`.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.set_timeout(libc::SO_RCVTIMEO, t)
    }
    /// Send with a timeout (`WouldBlock` when the peer's queue stayed full that long), so a
    /// peer that never reads cannot block the sender for longer.
    ///
    /// `None` blocks forever; a zero duration is `InvalidInput`.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.set_timeout(libc::SO_SNDTIMEO, t)
    }
    /// Set socket option `opt` (`SO_RCVTIMEO` or `SO_SNDTIMEO`) to `t`.
    fn set_timeout(&self, opt: libc::c_int, t: Option<Duration>) -> io::Result<()> {
        let tv = match t {
            None => libc::timeval { tv_sec: 0, tv_usec: 0 },
            Some(d) if d.is_zero() => {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "zero timeout"));
            }
            Some(d) => {
                let secs = libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX);
                let mut usec = libc::suseconds_t::from(d.subsec_micros());
                if secs == 0 && usec == 0 {
                    usec = 1;
                }
                libc::timeval { tv_sec: secs, tv_usec: usec }
            }
        };
        // SAFETY: `self.fd` is a live socket; `tv` is a valid `timeval` of the size passed,
        // living across the call.
        cvt(unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&raw const tv).cast(),
                size_of::<libc::timeval>() as libc::socklen_t,
            )
        })?;
        Ok(())
    }
    /// The fd (to poll on).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
    /// The peer's pid (SO_PEERCRED), when the kernel tells.
    pub fn peer_pid(&self) -> Option<u32> {
        self.peer_cred().map(|(pid, _)| pid)
    }
    /// A pidfd of the peer process (`SO_PEERPIDFD`, Linux 6.5+): the very process that
    /// connected (or listened). Errors: `ENOPROTOOPT` on older kernels (and architectures
    /// whose option number is not asm-generic's); another error (`ESRCH`, `EINVAL`) when the
    /// peer has exited.
    pub fn peer_pidfd(&self) -> io::Result<OwnedFd> {
        if !cfg!(any(target_arch = "x86_64", target_arch = "x86", target_arch = "aarch64")) {
            return Err(io::Error::from_raw_os_error(libc::ENOPROTOOPT));
        }
        /// `SO_PEERPIDFD` (asm-generic socket option numbers, which x86 and arm64 use).
        const SO_PEERPIDFD: libc::c_int = 77;
        let mut fd: libc::c_int = -1;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `fd` and `len` are valid and writable; the kernel writes at most `len`
        // bytes (one int) into `fd`.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_PEERPIDFD,
                (&raw mut fd).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        if fd < 0 || len as usize != size_of::<libc::c_int>() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: the kernel just opened `fd` for this process, and nothing else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// The peer's pid and effective user id as of its `connect` or `listen` (SO_PEERCRED),
    /// when the kernel tells.
    pub fn peer_cred(&self) -> Option<(u32, u32)> {
        let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
        let mut len = size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: `cred` and `len` are valid and writable; the kernel writes at most `len`
        // bytes into `cred`.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&raw mut cred).cast(),
                &mut len,
            )
        };
        if rc == 0 && len as usize == size_of::<libc::ucred>() && cred.pid > 0 {
            Some((cred.pid as u32, cred.uid))
        } else {
            None
        }
    }
}

/// An eventfd: the interrupt line (snic -> host) and the kick (host -> sleeping worker).
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A new eventfd (non-blocking, close-on-exec, counter mode).
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd(2) takes no pointers.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        Ok(EventFd { fd: owned(fd) })
    }
    /// Wrap a received fd.
    ///
    /// The fd is switched to non-blocking mode (best effort; the flag belongs to the open file,
    /// so every copy of the fd sees it), so that [`EventFd::take`] never
    /// blocks. A fd that is not an eventfd gives errors from the methods, never a panic.
    pub fn from_fd(fd: OwnedFd) -> EventFd {
        let _ = set_nonblocking(fd.as_fd(), true);
        EventFd { fd }
    }
    /// Add 1 to the counter (wakes a waiter).
    pub fn signal(&self) -> io::Result<()> {
        let one = 1u64.to_ne_bytes();
        // SAFETY: `one` is 8 readable bytes living across the call.
        let r = cvt_retry_len(|| unsafe {
            libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), one.len())
        });
        match r {
            Ok(8) => Ok(()),
            Ok(_) => Err(io::Error::new(io::ErrorKind::InvalidData, "short write to eventfd")),
            // The counter is at its maximum: a waiter is woken anyway.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e),
        }
    }
    /// Read and reset the counter without blocking: 0 when it was 0.
    pub fn take(&self) -> io::Result<u64> {
        let mut b = [0u8; 8];
        // SAFETY: `b` is 8 writable bytes living across the call.
        let r = cvt_retry_len(|| unsafe {
            libc::read(self.fd.as_raw_fd(), b.as_mut_ptr().cast(), b.len())
        });
        match r {
            Ok(8) => Ok(u64::from_ne_bytes(b)),
            Ok(_) => Err(io::Error::new(io::ErrorKind::InvalidData, "short read from eventfd")),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e),
        }
    }
    /// Wait until the counter is non-zero (then read and reset it) or `timeout` passes
    /// (`Ok(0)`). `None` waits forever.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<u64> {
        let deadline = timeout.map(|t| Instant::now().checked_add(t));
        loop {
            let v = self.take()?;
            if v != 0 {
                return Ok(v);
            }
            let ms: libc::c_int = match deadline {
                None => -1,
                // Too far in the future to represent: wait forever.
                Some(None) => -1,
                Some(Some(d)) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(0);
                    }
                    // Round up so that a sub-millisecond wait does not spin.
                    let ms = left.as_micros().div_ceil(1000);
                    libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
                }
            };
            let mut pfd =
                libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: `pfd` is one valid, writable `pollfd` living across the call.
            let r = cvt(unsafe { libc::poll(&raw mut pfd, 1, ms) });
            match r {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
                Ok(_) if pfd.revents & libc::POLLNVAL != 0 => {
                    return Err(io::Error::from_raw_os_error(libc::EBADF));
                }
                // Not an eventfd (a passed pipe or socket whose other end is gone): report
                // it rather than spin on a fd that is always "ready".
                Ok(_) if pfd.revents & (libc::POLLERR | libc::POLLHUP) != 0 => {
                    let v = self.take()?;
                    if v != 0 {
                        return Ok(v);
                    }
                    return Err(io::Error::new(io::ErrorKind::BrokenPipe, "eventfd hung up"));
                }
                Ok(_) => {}
            }
        }
    }
    /// The fd.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Send `msg` with `fds` attached, without the limits of [`SeqPacket::send`].
    fn send_unchecked(s: &SeqPacket, msg: &[u8], fds: &[RawFd]) {
        let data_len = size_of_val(fds) as u32;
        // SAFETY: CMSG_SPACE only computes a size.
        let space = unsafe { libc::CMSG_SPACE(data_len) } as usize;
        let mut cbuf = vec![0u64; space.div_ceil(8)];
        let mut iov =
            libc::iovec { iov_base: msg.as_ptr() as *mut libc::c_void, iov_len: msg.len() };
        // SAFETY: all-zero is a valid `msghdr`.
        let mut mh: libc::msghdr = unsafe { zeroed() };
        mh.msg_iov = &raw mut iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cbuf.as_mut_ptr().cast();
        mh.msg_controllen = space as _;
        // SAFETY: `cbuf` is 8-aligned and `space` bytes long: room for one header and its
        // `fds.len()` ints; `mh` points at live buffers during sendmsg.
        let n = unsafe {
            let c = libc::CMSG_FIRSTHDR(&raw const mh);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(data_len) as _;
            let d = libc::CMSG_DATA(c).cast::<RawFd>();
            for (i, &fd) in fds.iter().enumerate() {
                d.add(i).write_unaligned(fd);
            }
            libc::sendmsg(s.fd.as_raw_fd(), &raw const mh, libc::MSG_NOSIGNAL)
        };
        assert_eq!(n, msg.len() as isize);
    }

    #[test]
    fn too_many_fds_are_refused_and_closed() {
        let (a, b) = SeqPacket::pair().unwrap();
        let (probe, probe_peer) = SeqPacket::pair().unwrap();
        let raw = vec![probe.fd().as_raw_fd(); MAX_FDS + 3];
        send_unchecked(&a, b"many", &raw);
        drop(probe);
        let mut buf = [0u8; 64];
        let e = b.recv(&mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        // Every copy of the probe is closed: its peer sees end of stream (not a timeout).
        probe_peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let (n, fds) = probe_peer.recv(&mut buf).unwrap();
        assert_eq!((n, fds.len()), (0, 0));
        // Exactly MAX_FDS is accepted.
        let (p2, _p2_peer) = SeqPacket::pair().unwrap();
        send_unchecked(&a, b"max", &[p2.fd().as_raw_fd(); MAX_FDS]);
        let (n, fds) = b.recv(&mut buf).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"max"[..], MAX_FDS));
    }

    #[test]
    fn write_timeout_ends_a_send_the_peer_never_reads() {
        let (a, _b) = SeqPacket::pair().unwrap();
        assert_eq!(
            a.set_write_timeout(Some(Duration::ZERO)).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        a.set_write_timeout(Some(Duration::from_millis(20))).unwrap();
        let msg = [7u8; 4096];
        // The socket buffer fills after a few dozen messages; then the send times out.
        let err = (0..100_000).find_map(|_| a.send(&msg, &[]).err()).unwrap();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn only_hugetlbfs_files_count_as_huge() {
        // An ordinary memfd (tmpfs) and a file in the temporary directory: never huge, whatever
        // their block size.
        let (m, fd) = Mapping::memfd("snic-not-huge", 4096, false).unwrap();
        assert_eq!(hugetlb_page_size(fd.as_fd()).unwrap(), None);
        assert_eq!(Mapping::map_fd(fd.as_fd(), 4096).unwrap().map_len, 4096);
        drop(m);
        let path = std::env::temp_dir().join(format!("snic-shm-test-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        f.set_len(8192).unwrap();
        assert_eq!(hugetlb_page_size(f.as_fd()).unwrap(), None);
        let m = Mapping::map_fd(f.as_fd(), 100).unwrap();
        assert!(!m.huge());
        assert_eq!(m.map_len, 100);
        // A MFD_HUGETLB memfd is on hugetlbfs (creating one needs no reserved huge pages;
        // mapping it would). Kernels without hugetlbfs refuse to create it: nothing to check.
        let name = CString::new("snic-huge-probe").unwrap();
        // SAFETY: `name` is a valid NUL-terminated string that outlives the call.
        let raw =
            unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_HUGETLB) };
        if raw >= 0 {
            let hfd = owned(raw);
            let page = hugetlb_page_size(hfd.as_fd()).unwrap().expect("hugetlbfs memfd");
            assert!(page >= HUGE_PAGE && page.is_power_of_two(), "page {page}");
        }
    }

    #[test]
    fn cmsg_buffer_fits_max_fds() {
        // SAFETY: CMSG_SPACE only computes a size.
        let need = unsafe { libc::CMSG_SPACE((MAX_FDS * size_of::<RawFd>()) as u32) } as usize;
        assert_eq!(CMSG_CAP, need);
        assert_eq!(std::mem::align_of::<CmsgBuf>() % std::mem::align_of::<libc::cmsghdr>(), 0);
    }

    #[test]
    fn eventfd_from_a_hung_up_fd_is_an_error() {
        // A passed fd that is not an eventfd: a socket whose peer is gone is always
        // readable; reading gives 0 bytes, which must not read as "counter is 0" forever.
        let (a, b) = SeqPacket::pair().unwrap();
        drop(b);
        let ev = EventFd::from_fd(a.fd);
        assert!(ev.take().is_err());
        assert!(ev.wait(Some(Duration::from_secs(5))).is_err());
    }
}
