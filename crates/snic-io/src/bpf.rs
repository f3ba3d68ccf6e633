//! The Linux kernel's eBPF, as an oracle: maps, program loading with the kernel's verifier
//! log, and `BPF_PROG_TEST_RUN`, through the raw `bpf(2)` system call.
//!
//! snic verifies and runs eBPF programs itself (`snic-ebpf`); the tests and benchmarks hold
//! that work against the kernel: the same object's programs must get the same verdict from
//! `BPF_PROG_LOAD` as from snic's verifier, and the same packets must give the same verdicts,
//! bytes and map contents under `BPF_PROG_TEST_RUN` as under snic's interpreter.
//!
//! Why our own wrapper rather than libbpf or aya: the oracle must load exactly the instructions
//! snic verified (those of [`snic_ebpf::Program`], already relocated by snic's loader), with
//! our map indexes bound to kernel maps we create from [`MapSpec`]s; a loader that re-parses
//! the ELF itself would test its own relocation, not ours. The part of `bpf(2)` needed is small:
//! six commands. Each attribute block is built as bytes at the offsets of the kernel's
//! `union bpf_attr` (stable ABI), so the only `unsafe` code is the system call itself and the
//! adoption of the descriptor it returns.
//!
//! The AF_XDP ports ([`crate::afxdp`]) use the same wrapper for their own small program:
//! [`KernelProgram::load_raw`] loads hand-built instructions, and [`KernelLink::xdp`] attaches
//! an XDP program with `BPF_LINK_CREATE`, detached when the link's descriptor closes.
//!
//! Every file descriptor is an [`OwnedFd`]: a map or a program lives as long as its value.
//! Ring-buffer records are read through the map's memory mapping, with bounds-checked
//! volatile reads ([`KernelMap::ringbuf_drain`]).
#![allow(
    unsafe_code,
    reason = "the bpf(2) system call, adopting the descriptors it returns, and mapping a ring \
              buffer to read its records; each block has a SAFETY comment"
)]

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use snic_ebpf::insn::{Insn, pseudo};
use snic_ebpf::{MapKind, MapSpec, Program};

/// `enum bpf_cmd` values used here.
mod cmd {
    pub const MAP_CREATE: i64 = 0;
    pub const MAP_LOOKUP_ELEM: i64 = 1;
    pub const MAP_UPDATE_ELEM: i64 = 2;
    pub const MAP_DELETE_ELEM: i64 = 3;
    pub const MAP_GET_NEXT_KEY: i64 = 4;
    pub const PROG_LOAD: i64 = 5;
    pub const PROG_TEST_RUN: i64 = 10;
    pub const OBJ_GET_INFO_BY_FD: i64 = 15;
    pub const MAP_FREEZE: i64 = 22;
    pub const LINK_CREATE: i64 = 28;
}

/// `BPF_XDP`, the `enum bpf_attach_type` value of XDP links.
pub const ATTACH_XDP: u32 = 37;

/// `BPF_LINK_TYPE_XDP` (`enum bpf_link_type`).
const LINK_TYPE_XDP: u32 = 6;
/// `BPF_PROG_TYPE_XDP`.
pub const PROG_TYPE_XDP: u32 = 6;
/// `BPF_PROG_TYPE_SOCKET_FILTER` (the most restricted type; for programs of other sections).
pub const PROG_TYPE_SOCKET_FILTER: u32 = 1;
/// `BPF_F_NO_PREALLOC`: required for LPM tries.
pub const F_NO_PREALLOC: u32 = 1;
/// `BPF_F_RDONLY_PROG`: programs may only read the map (`.rodata`).
pub const F_RDONLY_PROG: u32 = 1 << 7;
/// `BPF_ANY` update flag.
pub const ANY: u64 = 0;
/// `BPF_PSEUDO_MAP_FD` source register of `lddw`.
const PSEUDO_MAP_FD: u8 = 1;
/// `BPF_PSEUDO_MAP_VALUE` source register of `lddw`.
const PSEUDO_MAP_VALUE: u8 = 2;
/// Size of `union bpf_attr` we pass (larger than any command's part used here, zero-filled).
const ATTR_SIZE: usize = 160;
/// The first verifier log buffer; doubled on `ENOSPC` up to [`LOG_MAX`].
const LOG_START: usize = 1 << 20;
/// The largest verifier log buffer tried (the kernel caps `log_size` near 16 MiB).
const LOG_MAX: usize = (1 << 24) - 1;
/// Bytes of room past the input packet in [`KernelProgram::test_run`]'s output buffer, so that
/// `bpf_xdp_adjust_tail` growth and `adjust_head` pushes fit.
const OUT_SLACK: usize = 4096;

/// `union bpf_attr` as bytes, written at the kernel's field offsets.
#[repr(C, align(8))]
struct Attr([u8; ATTR_SIZE]);

impl Attr {
    fn new() -> Attr {
        Attr([0; ATTR_SIZE])
    }
    fn u32(&mut self, off: usize, v: u32) -> &mut Attr {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, off: usize, v: u64) -> &mut Attr {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn ptr<T>(&mut self, off: usize, p: *const T) -> &mut Attr {
        self.u64(off, p as usize as u64)
    }
    fn name(&mut self, off: usize, name: &str) -> &mut Attr {
        // BPF object names: up to 15 characters of [A-Za-z0-9_.], NUL-terminated.
        for (i, c) in name
            .bytes()
            .filter(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'.')
            .take(15)
            .enumerate()
        {
            self.0[off + i] = c;
        }
        self
    }
    fn get_u32(&self, off: usize) -> u32 {
        let mut b = [0; 4];
        b.copy_from_slice(&self.0[off..off + 4]);
        u32::from_ne_bytes(b)
    }
}

/// Runs one `bpf(2)` command; returns the non-negative result or the error.
fn sys_bpf(cmd: i64, attr: &mut Attr) -> io::Result<i64> {
    // SAFETY: `attr` is a live, writable, 8-aligned buffer of ATTR_SIZE bytes laid out as the
    // kernel's `union bpf_attr` (unused bytes zero, as the kernel requires); every pointer
    // written into it points to memory that outlives this call and has the length the
    // neighbouring size field states. The kernel reads and writes only within those.
    let r = unsafe {
        libc::syscall(libc::SYS_bpf, cmd, attr.0.as_mut_ptr(), ATTR_SIZE as libc::c_uint)
    };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

/// The first eight words of a BPF object's information (`BPF_OBJ_GET_INFO_BY_FD`: the
/// kernel copies at most the length asked): for a map `type, id, key_size, value_size,
/// max_entries, ...` (`struct bpf_map_info`), for a program `type, id, ...`, for a link
/// `type, id, prog_id, -, ifindex` (an XDP link's `ifindex` at byte 16).
fn info_words(fd: &OwnedFd) -> io::Result<[u32; 8]> {
    let mut info = [0u32; 8];
    let mut a = Attr::new();
    a.u32(0, fd.as_raw_fd() as u32)
        .u32(4, core::mem::size_of_val(&info) as u32)
        .ptr(8, info.as_mut_ptr());
    sys_bpf(cmd::OBJ_GET_INFO_BY_FD, &mut a)?;
    Ok(info)
}

/// An error saying a handed descriptor is not the BPF object expected.
fn not_object(what: &str, e: io::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("the handed descriptor is not {what}: {e}"))
}

/// Like [`sys_bpf`] for commands that return a new file descriptor.
fn sys_bpf_fd(cmd: i64, attr: &mut Attr) -> io::Result<OwnedFd> {
    let fd = sys_bpf(cmd, attr)?;
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("bpf(2) returned no descriptor"))?;
    // SAFETY: on success these commands return a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether the `bpf(2)` system call works here (root, or unprivileged BPF allowed; not
/// forbidden by a seccomp filter): creates and drops a one-entry array map.
pub fn bpf_available() -> bool {
    let spec = MapSpec {
        name: "probe".into(),
        kind: MapKind::Array,
        key_size: 4,
        value_size: 4,
        max_entries: 1,
        data: None,
        readonly: false,
    };
    KernelMap::create(&spec).is_ok()
}

/// True when tests run under CI (`CI` set): an unavailable `bpf(2)` is a failure there.
pub fn under_ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// For tests: returns false (after saying why) when `bpf(2)` is unavailable outside CI, and
/// panics under CI, where the tests run as root on a kernel with BPF.
pub fn require_bpf(test: &str) -> bool {
    if bpf_available() {
        return true;
    }
    assert!(!under_ci(), "{test}: the bpf(2) system call is unavailable under CI (needs root)");
    eprintln!("skipping {test}: the bpf(2) system call is unavailable (not root?)");
    false
}

/// A map in the kernel.
#[derive(Debug)]
pub struct KernelMap {
    fd: OwnedFd,
    key_size: usize,
    value_size: usize,
    max_entries: usize,
    kind: MapKind,
}

impl KernelMap {
    /// Creates a map like `spec` (LPM tries get `BPF_F_NO_PREALLOC`; global data gets its
    /// initial contents in entry 0, and `.rodata` is frozen after that, as libbpf does).
    pub fn create(spec: &MapSpec) -> io::Result<KernelMap> {
        let mut flags = 0;
        if spec.kind == MapKind::LpmTrie {
            flags |= F_NO_PREALLOC;
        }
        if spec.readonly {
            flags |= F_RDONLY_PROG;
        }
        let mut a = Attr::new();
        a.u32(0, spec.kind.linux_type())
            .u32(4, if spec.kind == MapKind::RingBuf { 0 } else { spec.key_size })
            .u32(8, if spec.kind == MapKind::RingBuf { 0 } else { spec.value_size })
            .u32(12, spec.max_entries)
            .u32(16, flags)
            .name(28, &spec.name);
        let fd = sys_bpf_fd(cmd::MAP_CREATE, &mut a)?;
        let map = KernelMap {
            fd,
            key_size: spec.key_size as usize,
            value_size: spec.value_size as usize,
            max_entries: spec.max_entries as usize,
            kind: spec.kind,
        };
        if let Some(data) = &spec.data {
            let mut value = vec![0u8; map.value_size];
            let n = data.len().min(value.len());
            value[..n].copy_from_slice(&data[..n]);
            map.update(&0u32.to_ne_bytes(), &value, ANY)?;
        }
        if spec.readonly {
            map.freeze()?;
        }
        Ok(map)
    }

    /// A map another process created and handed over (its descriptor), checked to be a map of
    /// kind `kind`; sizes as the kernel reports them.
    pub fn adopt(fd: OwnedFd, kind: MapKind) -> io::Result<KernelMap> {
        let w = info_words(&fd).map_err(|e| not_object("a BPF map", e))?;
        if w[0] != kind.linux_type() {
            return Err(not_object(
                &format!("a {} map", kind.name()),
                io::Error::other(format!("map type {}", w[0])),
            ));
        }
        Ok(KernelMap {
            fd,
            key_size: w[2] as usize,
            value_size: w[3] as usize,
            max_entries: w[4] as usize,
            kind,
        })
    }

    /// A duplicate of the map's descriptor (to hand the map to another process).
    pub fn try_clone_fd(&self) -> io::Result<OwnedFd> {
        self.fd.try_clone()
    }

    /// The map's descriptor.
    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Its type.
    pub fn kind(&self) -> MapKind {
        self.kind
    }

    /// Bytes of one value as the system call returns it: per-CPU maps return one value per
    /// possible CPU, each rounded up to 8 bytes.
    pub fn value_len(&self) -> usize {
        match self.kind {
            MapKind::PerCpuArray | MapKind::PerCpuHash => {
                self.value_size.next_multiple_of(8) * possible_cpus()
            }
            _ => self.value_size,
        }
    }

    fn check_key(&self, key: &[u8]) -> io::Result<()> {
        if key.len() == self.key_size {
            Ok(())
        } else {
            Err(io::Error::from_raw_os_error(libc::EINVAL))
        }
    }

    /// The value under `key` (`None`: no such entry).
    pub fn lookup(&self, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
        self.check_key(key)?;
        let mut value = vec![0u8; self.value_len()];
        let mut a = Attr::new();
        a.u32(0, self.fd() as u32).ptr(8, key.as_ptr()).ptr(16, value.as_mut_ptr());
        match sys_bpf(cmd::MAP_LOOKUP_ELEM, &mut a) {
            Ok(_) => Ok(Some(value)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sets `key` to `value` (`flags`: `BPF_ANY` 0, `BPF_NOEXIST` 1, `BPF_EXIST` 2).
    pub fn update(&self, key: &[u8], value: &[u8], flags: u64) -> io::Result<()> {
        self.check_key(key)?;
        if value.len() != self.value_len() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mut a = Attr::new();
        a.u32(0, self.fd() as u32).ptr(8, key.as_ptr()).ptr(16, value.as_ptr()).u64(24, flags);
        sys_bpf(cmd::MAP_UPDATE_ELEM, &mut a).map(drop)
    }

    /// Deletes `key`.
    pub fn delete(&self, key: &[u8]) -> io::Result<()> {
        self.check_key(key)?;
        let mut a = Attr::new();
        a.u32(0, self.fd() as u32).ptr(8, key.as_ptr());
        sys_bpf(cmd::MAP_DELETE_ELEM, &mut a).map(drop)
    }

    /// The key after `key` (`None` for the first key); `Ok(None)` at the end.
    pub fn next_key(&self, key: Option<&[u8]>) -> io::Result<Option<Vec<u8>>> {
        if let Some(k) = key {
            self.check_key(k)?;
        }
        let mut next = vec![0u8; self.key_size];
        let mut a = Attr::new();
        a.u32(0, self.fd() as u32)
            .u64(8, key.map_or(0, |k| k.as_ptr() as usize as u64))
            .ptr(16, next.as_mut_ptr());
        match sys_bpf(cmd::MAP_GET_NEXT_KEY, &mut a) {
            Ok(_) => Ok(Some(next)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every entry, in the kernel's iteration order.
    pub fn entries(&self) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        let mut key: Option<Vec<u8>> = None;
        while let Some(next) = self.next_key(key.as_deref())? {
            if let Some(v) = self.lookup(&next)? {
                out.push((next.clone(), v));
            }
            key = Some(next);
            if out.len() > 1 << 24 {
                return Err(io::Error::other("map iteration does not end"));
            }
        }
        Ok(out)
    }

    /// Takes every committed record out of a ring buffer, oldest first (discarded records are
    /// skipped), as a consumer does: through the map's memory mapping (the consumer page
    /// read-write, the producer page and the data pages read-only), advancing the consumer
    /// position past what it read. Call it while no program runs on the map (after test runs).
    pub fn ringbuf_drain(&self) -> io::Result<Vec<Vec<u8>>> {
        const BUSY: u32 = 1 << 31;
        const DISCARD: u32 = 1 << 30;
        if self.kind != MapKind::RingBuf || !self.max_entries.is_power_of_two() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: sysconf has no memory effects.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .map_err(|_| io::Error::other("no page size"))?;
        let size = self.max_entries;
        let cons = Mapping::new(self.fd(), page, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        // The producer page, then the data pages mapped twice in a row (records that wrap
        // read straight through).
        let prod = Mapping::new(self.fd(), page + 2 * size, libc::PROT_READ, page)?;
        let mut pos = cons.read_u64(0)?;
        let end = prod.read_u64(0)?;
        let mut out = Vec::new();
        while pos < end {
            let at = page + (pos as usize & (size - 1));
            let hdr = prod.read_u32(at)?;
            if hdr & BUSY != 0 {
                break;
            }
            let len = (hdr & !(BUSY | DISCARD)) as usize;
            if len > size {
                return Err(io::Error::other("ring buffer record longer than the ring"));
            }
            if hdr & DISCARD == 0 {
                out.push((0..len).map(|i| prod.read_u8(at + 8 + i)).collect::<io::Result<_>>()?);
            }
            pos += (len + 8).next_multiple_of(8) as u64;
        }
        cons.write_u64(0, pos)?;
        Ok(out)
    }

    /// Freezes the map: no more writes from the system call side (for `.rodata`).
    pub fn freeze(&self) -> io::Result<()> {
        let mut a = Attr::new();
        a.u32(0, self.fd() as u32);
        sys_bpf(cmd::MAP_FREEZE, &mut a).map(drop)
    }
}

/// A shared memory mapping of a map's fd, unmapped on drop; every access is bounds-checked.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(fd: i32, len: usize, prot: i32, offset: usize) -> io::Result<Mapping> {
        let off = libc::off_t::try_from(offset).map_err(|_| io::Error::other("offset"))?;
        // SAFETY: a fresh shared mapping chosen by the kernel (no address hint), of a map fd we
        // own; nothing else in this process aliases it.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, off) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr: p.cast(), len })
    }

    /// Ok when `n` bytes at `at` are inside the mapping and `at` is aligned to `align`.
    fn check(&self, at: usize, n: usize, align: usize) -> io::Result<()> {
        if at.checked_add(n).is_some_and(|e| e <= self.len) && at.is_multiple_of(align) {
            Ok(())
        } else {
            Err(io::Error::other("ring buffer position outside its mapping"))
        }
    }

    fn read_u8(&self, at: usize) -> io::Result<u8> {
        self.check(at, 1, 1)?;
        // SAFETY: in range (checked); the kernel's mapping stays valid until drop. Volatile:
        // the kernel writes this memory.
        Ok(unsafe { self.ptr.add(at).read_volatile() })
    }

    fn read_u32(&self, at: usize) -> io::Result<u32> {
        self.check(at, 4, 4)?;
        // SAFETY: in range and aligned (checked; the base is page-aligned).
        Ok(unsafe { self.ptr.add(at).cast::<u32>().read_volatile() })
    }

    fn read_u64(&self, at: usize) -> io::Result<u64> {
        self.check(at, 8, 8)?;
        // SAFETY: in range and aligned (checked; the base is page-aligned).
        Ok(unsafe { self.ptr.add(at).cast::<u64>().read_volatile() })
    }

    fn write_u64(&self, at: usize, v: u64) -> io::Result<()> {
        self.check(at, 8, 8)?;
        // SAFETY: in range and aligned (checked), and the consumer page is mapped writable.
        unsafe { self.ptr.add(at).cast::<u64>().write_volatile(v) };
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` made; no reference into it outlives self.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Number of possible CPUs (`/sys/devices/system/cpu/possible`), the per-CPU value count.
pub fn possible_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| parse_cpu_list(s.trim()))
        .unwrap_or(1)
}

/// Counts the CPUs in a list such as `0-3,5`.
fn parse_cpu_list(s: &str) -> Option<usize> {
    let mut n = 0;
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => n += b.parse::<usize>().ok()? - a.parse::<usize>().ok()? + 1,
            None => {
                part.parse::<usize>().ok()?;
                n += 1
            }
        }
    }
    Some(n)
}

/// The kernel refused a program: its errno and verifier log.
#[derive(Clone, Debug)]
pub struct KernelRefusal {
    /// The error number (`EACCES`, `EINVAL`, ... ).
    pub errno: i32,
    /// The verifier's log (may be empty when the refusal came before verification).
    pub log: String,
}

impl fmt::Display for KernelRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel refused the program: {}", io::Error::from_raw_os_error(self.errno))?;
        let tail: Vec<&str> = self.log.lines().rev().take(12).collect();
        for l in tail.into_iter().rev() {
            write!(f, "\n  {l}")?;
        }
        Ok(())
    }
}

impl std::error::Error for KernelRefusal {}

/// A program loaded (and verified) by the kernel.
#[derive(Debug)]
pub struct KernelProgram {
    fd: OwnedFd,
    /// The verifier's log (level 1) of the successful load.
    pub log: String,
    /// How long `BPF_PROG_LOAD` took (verification included), the last attempt.
    pub load_time: Duration,
}

/// The result of one `BPF_PROG_TEST_RUN`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestRun {
    /// The program's return value (for XDP: the action).
    pub retval: u32,
    /// The packet after the run (`data`..`data_end`).
    pub data_out: Vec<u8>,
    /// Mean time per run, as the kernel measured it over `repeat` runs.
    pub duration_ns: u32,
}

/// Copies `program`'s instructions with map references bound to kernel maps: `lddw` with
/// `src = MAP_FD, imm = map index` gets the map's descriptor; `src = MAP_VALUE` too (its
/// second half keeps the value offset). A reference to a map index without a kernel map is
/// an `EINVAL` refusal.
fn bind_maps(program: &[Insn], maps: &[&KernelMap]) -> Result<Vec<u8>, KernelRefusal> {
    let mut out = Vec::with_capacity(program.len() * 8);
    let mut insns = program.iter().copied();
    while let Some(mut i) = insns.next() {
        let lddw = i.code == 0x18;
        if lddw && (i.src == pseudo::MAP_FD || i.src == pseudo::MAP_VALUE) {
            let map = usize::try_from(i.imm).ok().and_then(|m| maps.get(m)).ok_or_else(|| {
                KernelRefusal {
                    errno: libc::EINVAL,
                    log: format!("lddw names map {} of {}", i.imm, maps.len()),
                }
            })?;
            i.src = if i.src == pseudo::MAP_FD { PSEUDO_MAP_FD } else { PSEUDO_MAP_VALUE };
            i.imm = map.fd();
        }
        out.extend_from_slice(&i.encode());
        if lddw && let Some(second) = insns.next() {
            out.extend_from_slice(&second.encode());
        }
    }
    Ok(out)
}

/// Under which capabilities the kernel verifies a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Privilege {
    /// As the caller (root: `CAP_SYS_ADMIN`, which implies `CAP_PERFMON`). The kernel then
    /// allows what it considers safe only for the trusted: reading uninitialised stack,
    /// returning or storing pointers, and it skips its Spectre v1 checks.
    Root,
    /// With `CAP_BPF` and `CAP_NET_ADMIN` but without `CAP_SYS_ADMIN` and `CAP_PERFMON`
    /// (dropped on the loading thread): the kernel's strict mode, which refuses uninitialised
    /// stack reads and pointer leaks, as snic's verifier always does.
    BpfOnly,
}

/// `BPF_PROG_LOAD` of encoded instructions with a growing log buffer.
fn load_insns(
    insns: &[u8],
    lic: &[u8],
    prog_type: u32,
    name: &str,
) -> Result<KernelProgram, KernelRefusal> {
    let mut size = LOG_START;
    loop {
        let mut log = vec![0u8; size];
        let mut a = Attr::new();
        a.u32(0, prog_type)
            .u32(4, (insns.len() / 8) as u32)
            .ptr(8, insns.as_ptr())
            .ptr(16, lic.as_ptr())
            .u32(24, 1)
            .u32(28, size as u32)
            .ptr(32, log.as_mut_ptr())
            .name(48, name);
        let start = std::time::Instant::now();
        let r = sys_bpf_fd(cmd::PROG_LOAD, &mut a);
        let load_time = start.elapsed();
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let text = String::from_utf8_lossy(&log[..end]).into_owned();
        match r {
            Ok(fd) => return Ok(KernelProgram { fd, log: text, load_time }),
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && size < LOG_MAX => {
                size = (size * 4).min(LOG_MAX);
            }
            Err(e) => {
                return Err(KernelRefusal {
                    errno: e.raw_os_error().unwrap_or(libc::EINVAL),
                    log: text,
                });
            }
        }
    }
}

/// Drops `CAP_SYS_ADMIN` and `CAP_PERFMON` from the calling thread's effective set (raw
/// `capset(2)` changes only the calling thread).
fn drop_to_bpf_only() -> io::Result<()> {
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_PERFMON: u32 = 38;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut h = Header { version: VERSION_3, pid: 0 };
    let mut d = [Data::default(); 2];
    // SAFETY: capget writes one header and two data structs (version 3), both live and of the
    // kernel's layout.
    if unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    for cap in [CAP_SYS_ADMIN, CAP_PERFMON] {
        d[(cap / 32) as usize].effective &= !(1 << (cap % 32));
    }
    // SAFETY: as above; capset only reads them.
    if unsafe { libc::syscall(libc::SYS_capset, &h as *const Header, d.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl KernelProgram {
    /// Loads `program` into the kernel as `prog_type` ([`PROG_TYPE_XDP`], ...), its map
    /// references bound to `maps` (indexed like `Object::maps`), under `license` (the kernel
    /// allows GPL-only helpers to GPL-compatible licences only). On refusal, the errno and the
    /// verifier's log; the log buffer grows on `ENOSPC`.
    pub fn load(
        program: &Program,
        maps: &[&KernelMap],
        prog_type: u32,
        license: &str,
    ) -> Result<KernelProgram, KernelRefusal> {
        Self::load_as(program, maps, prog_type, license, Privilege::Root)
    }

    /// Loads instructions built by hand (not from an object), named `name`, as `prog_type`:
    /// `lddw` with `src = MAP_FD` and `imm = i` refers to `maps[i]`, as in [`load`](Self::load).
    pub fn load_raw(
        insns: &[Insn],
        maps: &[&KernelMap],
        prog_type: u32,
        license: &str,
        name: &str,
    ) -> Result<KernelProgram, KernelRefusal> {
        let bytes = bind_maps(insns, maps)?;
        let mut lic = license.as_bytes().to_vec();
        lic.retain(|&b| b != 0);
        lic.push(0);
        load_insns(&bytes, &lic, prog_type, name)
    }

    /// Like [`load`](Self::load), verified under `privilege`.
    pub fn load_as(
        program: &Program,
        maps: &[&KernelMap],
        prog_type: u32,
        license: &str,
        privilege: Privilege,
    ) -> Result<KernelProgram, KernelRefusal> {
        let insns = bind_maps(&program.insns, maps)?;
        let mut lic = license.as_bytes().to_vec();
        lic.retain(|&b| b != 0);
        lic.push(0);
        let name = program.name.clone();
        match privilege {
            Privilege::Root => load_insns(&insns, &lic, prog_type, &name),
            // Capabilities are per thread: drop them on a thread of its own, which ends with
            // the load, so the caller keeps its own.
            Privilege::BpfOnly => std::thread::scope(|s| {
                s.spawn(|| {
                    drop_to_bpf_only().map_err(|e| KernelRefusal {
                        errno: e.raw_os_error().unwrap_or(libc::EPERM),
                        log: format!("dropping capabilities: {e}"),
                    })?;
                    load_insns(&insns, &lic, prog_type, &name)
                })
                .join()
                .unwrap_or_else(|_| {
                    Err(KernelRefusal { errno: libc::EINVAL, log: "loader thread panicked".into() })
                })
            }),
        }
    }

    /// A program another process loaded and handed over (its descriptor), checked to be of
    /// `prog_type`.
    pub fn adopt(fd: OwnedFd, prog_type: u32) -> io::Result<KernelProgram> {
        let w = info_words(&fd).map_err(|e| not_object("a BPF program", e))?;
        if w[0] != prog_type {
            return Err(not_object(
                &format!("a program of type {prog_type}"),
                io::Error::other(format!("type {}", w[0])),
            ));
        }
        Ok(KernelProgram { fd, log: String::new(), load_time: Duration::ZERO })
    }

    /// The kernel's id of the program.
    pub fn id(&self) -> io::Result<u32> {
        Ok(info_words(&self.fd)?[1])
    }

    /// A duplicate of the program's descriptor (to hand it to another process).
    pub fn try_clone_fd(&self) -> io::Result<OwnedFd> {
        self.fd.try_clone()
    }

    /// The program's descriptor.
    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Runs the program `repeat` times (at least once) on `data` with `BPF_PROG_TEST_RUN` and
    /// returns the last run's verdict and packet. The kernel refuses (EINVAL) packets shorter
    /// than an Ethernet header or longer than a page minus its headroom.
    pub fn test_run(&self, data: &[u8], repeat: u32) -> io::Result<TestRun> {
        self.test_run_ctx(data, repeat, None)
    }

    /// Like [`test_run`](Self::test_run) with an XDP context in (`struct xdp_md`: 24 bytes;
    /// `ingress_ifindex` and `rx_queue_index` must name a real device and queue, or be 0).
    pub fn test_run_ctx(
        &self,
        data: &[u8],
        repeat: u32,
        ctx: Option<&[u8]>,
    ) -> io::Result<TestRun> {
        let mut out = vec![0u8; data.len() + OUT_SLACK];
        let mut a = Attr::new();
        a.u32(0, self.fd() as u32)
            .u32(8, data.len() as u32)
            .u32(12, out.len() as u32)
            .ptr(16, data.as_ptr())
            .ptr(24, out.as_mut_ptr())
            .u32(32, repeat.max(1));
        if let Some(c) = ctx {
            a.u32(40, c.len() as u32).ptr(48, c.as_ptr());
        }
        sys_bpf(cmd::PROG_TEST_RUN, &mut a)?;
        let n = (a.get_u32(12) as usize).min(out.len());
        out.truncate(n);
        Ok(TestRun { retval: a.get_u32(4), data_out: out, duration_ns: a.get_u32(36) })
    }
}

/// A BPF link (`BPF_LINK_CREATE`): the program stays attached while the link's descriptor is
/// open, and is detached when it closes (drop, or the process's exit).
#[derive(Debug)]
pub struct KernelLink {
    fd: OwnedFd,
}

impl KernelLink {
    /// Attaches the XDP program `prog` to interface `ifindex` with `flags`
    /// (`XDP_FLAGS_SKB_MODE` 2, `XDP_FLAGS_DRV_MODE` 4; `include/uapi/linux/if_link.h`).
    pub fn xdp(prog: &KernelProgram, ifindex: u32, flags: u32) -> io::Result<KernelLink> {
        let mut a = Attr::new();
        // struct { prog_fd; target_ifindex; attach_type; flags; } of `link_create`.
        a.u32(0, prog.fd() as u32).u32(4, ifindex).u32(8, ATTACH_XDP).u32(12, flags);
        Ok(KernelLink { fd: sys_bpf_fd(cmd::LINK_CREATE, &mut a)? })
    }

    /// An XDP link another process made and handed over (its descriptor), checked to attach
    /// `prog` to interface `ifindex`: while it stays open here the program stays attached,
    /// whatever the other process does.
    pub fn adopt_xdp(fd: OwnedFd, prog: &KernelProgram, ifindex: u32) -> io::Result<KernelLink> {
        let w = info_words(&fd).map_err(|e| not_object("a BPF link", e))?;
        let prog_id = prog.id()?;
        if w[0] != LINK_TYPE_XDP || w[2] != prog_id || w[4] != ifindex {
            return Err(not_object(
                &format!("the XDP link of program {prog_id} on interface {ifindex}"),
                io::Error::other(format!(
                    "link type {}, program {}, interface {}",
                    w[0], w[2], w[4]
                )),
            ));
        }
        Ok(KernelLink { fd })
    }

    /// A duplicate of the link's descriptor (to hand it to another process).
    pub fn try_clone_fd(&self) -> io::Result<OwnedFd> {
        self.fd.try_clone()
    }

    /// The link's descriptor.
    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0-3"), Some(4));
        assert_eq!(parse_cpu_list("0-3,6,8-9"), Some(7));
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn names_are_sanitised_and_truncated() {
        let mut a = Attr::new();
        a.name(0, "a-very.long:map_name_indeed");
        assert_eq!(&a.0[..16], b"avery.longmap_n\0");
    }

    fn array(value_size: u32, entries: u32) -> MapSpec {
        MapSpec {
            name: "t".into(),
            kind: MapKind::Array,
            key_size: 4,
            value_size,
            max_entries: entries,
            data: None,
            readonly: false,
        }
    }

    #[test]
    fn array_map_round_trips_and_iterates() {
        if !require_bpf("array_map_round_trips_and_iterates") {
            return;
        }
        let m = KernelMap::create(&array(8, 3)).unwrap();
        m.update(&1u32.to_ne_bytes(), &7u64.to_ne_bytes(), ANY).unwrap();
        assert_eq!(m.lookup(&1u32.to_ne_bytes()).unwrap(), Some(7u64.to_ne_bytes().to_vec()));
        assert_eq!(m.lookup(&9u32.to_ne_bytes()).unwrap(), None);
        let e = m.entries().unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!(e[1].1, 7u64.to_ne_bytes().to_vec());
        // Wrong key size: a typed error, never a kernel read past the buffer.
        assert!(m.lookup(&[0u8; 2]).is_err());
        assert!(m.update(&0u32.to_ne_bytes(), &[0u8; 3], ANY).is_err());
    }

    #[test]
    fn ring_buffer_of_an_unused_map_drains_empty() {
        if !require_bpf("ring_buffer_of_an_unused_map_drains_empty") {
            return;
        }
        let mut s = array(0, 4096);
        s.kind = MapKind::RingBuf;
        s.key_size = 0;
        let m = KernelMap::create(&s).unwrap();
        assert_eq!(m.ringbuf_drain().unwrap(), Vec::<Vec<u8>>::new());
        // Not a ring buffer: refused, not misread.
        let a = KernelMap::create(&array(4, 1)).unwrap();
        assert!(a.ringbuf_drain().is_err());
    }

    #[test]
    fn hash_map_deletes_and_frozen_rodata_refuses_writes() {
        if !require_bpf("hash_map_deletes_and_frozen_rodata_refuses_writes") {
            return;
        }
        let mut s = array(4, 4);
        s.kind = MapKind::Hash;
        let m = KernelMap::create(&s).unwrap();
        m.update(&5u32.to_ne_bytes(), &6u32.to_ne_bytes(), ANY).unwrap();
        m.delete(&5u32.to_ne_bytes()).unwrap();
        assert!(m.delete(&5u32.to_ne_bytes()).is_err());
        assert!(m.entries().unwrap().is_empty());

        let mut ro = array(4, 1);
        ro.name = ".rodata".into();
        ro.data = Some(vec![1, 2, 3, 4]);
        ro.readonly = true;
        let m = KernelMap::create(&ro).unwrap();
        assert_eq!(m.lookup(&0u32.to_ne_bytes()).unwrap(), Some(vec![1, 2, 3, 4]));
        assert!(m.update(&0u32.to_ne_bytes(), &[0; 4], ANY).is_err());
    }
}
