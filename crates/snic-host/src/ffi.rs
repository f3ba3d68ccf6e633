//! The C ABI of the host library (declared in `include/snic.h`).
//!
//! Handles are opaque pointers to boxed Rust objects. Every function checks its pointers for
//! null, catches panics (none crosses into C), and returns 0 (or a count) on success and a
//! negative [`SNIC_E_IO`] ... code on failure, with a message for [`snic_last_error`].
#![allow(
    unsafe_code,
    reason = "C ABI: raw pointers from C callers; each unsafe block has a SAFETY comment"
)]

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::time::Duration;

use snic_dma::Completion;
use snic_dma::desc::{Descriptor, Dir};

use crate::conn::HostBuf;
use crate::device::Device;
use crate::error::HostError;
use crate::kernel::{AddrArg, KernelCmd, KernelStatus};
use crate::queue::{Queue, QueueOpts};
use snic_hostif::proto::{DevKind, QueueMode};

/// Error code: a system call failed.
pub const SNIC_E_IO: c_int = -1;
/// Error code: snic refused the request.
pub const SNIC_E_REFUSED: c_int = -2;
/// Error code: protocol error.
pub const SNIC_E_PROTOCOL: c_int = -3;
/// Error code: an argument is out of range.
pub const SNIC_E_RANGE: c_int = -4;
/// Error code: ring full.
pub const SNIC_E_RING_FULL: c_int = -5;
/// Error code: timed out.
pub const SNIC_E_TIMEOUT: c_int = -6;
/// Error code: a DMA transfer completed with an error status.
pub const SNIC_E_DMA: c_int = -7;
/// Error code: bad argument (null pointer, bad enum value).
pub const SNIC_E_INVAL: c_int = -22;

/// Opaque device handle (`snic_dev` in C).
#[derive(Debug)]
pub struct SnicDev(Device);
/// Opaque host-buffer handle (`snic_buf` in C).
#[derive(Debug)]
pub struct SnicBuf(HostBuf);
/// Opaque queue handle (`snic_queue` in C).
#[derive(Debug)]
pub struct SnicQueue(Queue);

/// A completion entry as C sees it (`snic_completion`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SnicCompletion {
    /// Bytes moved.
    pub len: u32,
    /// Ring counter after the transfer.
    pub index: u32,
    /// Status code (0 = OK).
    pub status: u8,
    /// 0 = H2C, 1 = C2H, 2 = queue-level error.
    pub dir: u8,
    /// Queue id.
    pub qid: u16,
    /// Completion word bits (colour, SOP, EOP).
    pub flags: u32,
}

impl From<Completion> for SnicCompletion {
    fn from(c: Completion) -> SnicCompletion {
        SnicCompletion {
            len: c.len,
            index: c.index,
            status: c.status,
            dir: c.dir,
            qid: c.qid,
            flags: c.word,
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// An error for C: its code and message.
struct Fail(c_int, String);

impl From<HostError> for Fail {
    fn from(e: HostError) -> Fail {
        let code = match &e {
            HostError::Io(_) => SNIC_E_IO,
            HostError::Refused { .. } => SNIC_E_REFUSED,
            HostError::Protocol(_) => SNIC_E_PROTOCOL,
            HostError::OutOfRange(_) => SNIC_E_RANGE,
            HostError::RingFull => SNIC_E_RING_FULL,
            HostError::Timeout => SNIC_E_TIMEOUT,
            HostError::Dma(_) => SNIC_E_DMA,
        };
        Fail(code, e.to_string())
    }
}

fn inval(what: &str) -> Fail {
    Fail(SNIC_E_INVAL, format!("bad argument: {what}"))
}

/// Run `f`, turning errors and panics into a negative code (and the message).
fn guard(f: impl FnOnce() -> Result<c_int, Fail>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(Fail(code, msg))) => {
            set_error(&msg);
            code
        }
        Err(_) => {
            set_error("internal error (panic) in the snic host library");
            SNIC_E_PROTOCOL
        }
    }
}

fn dir_of(d: c_int) -> Result<Dir, Fail> {
    u8::try_from(d)
        .ok()
        .and_then(Dir::from_code)
        .ok_or_else(|| inval("dir must be 0 (h2c) or 1 (c2h)"))
}

fn ms(t: u32) -> Duration {
    Duration::from_millis(u64::from(t))
}

/// Message of the last error on this thread ("" when none). Valid until the next failing
/// call on this thread.
#[unsafe(no_mangle)]
pub extern "C" fn snic_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Connect to snic at socket `path` as `name`; on success `*out` is the device handle.
///
/// # Safety
/// `path` and `name` must be NUL-terminated strings; `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_open(
    path: *const c_char,
    name: *const c_char,
    out: *mut *mut SnicDev,
) -> c_int {
    guard(|| {
        if path.is_null() || name.is_null() || out.is_null() {
            return Err(inval("null pointer"));
        }
        // SAFETY: non-null, and the caller promises NUL-terminated strings.
        let (p, n) = unsafe { (CStr::from_ptr(path), CStr::from_ptr(name)) };
        let p = p.to_str().map_err(|_| inval("path is not UTF-8"))?;
        let n = n.to_string_lossy();
        let dev = Device::connect(Path::new(p), &n)?;
        // SAFETY: `out` is non-null and the caller promises it is writable.
        unsafe { *out = Box::into_raw(Box::new(SnicDev(dev))) };
        Ok(0)
    })
}

/// Close a device handle (null is ignored). Buffers and queues keep the connection open
/// until they are freed too.
///
/// # Safety
/// `dev` must be null or a handle from [`snic_open`] not closed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_close(dev: *mut SnicDev) {
    // SAFETY: the caller's promise about `dev`.
    unsafe { free_handle(dev) }
}

/// Drop a handle (null is ignored; a panic in its drop is caught).
///
/// # Safety
/// `p` must be null or a pointer from `Box::into_raw` not given back before.
unsafe fn free_handle<T>(p: *mut T) {
    if p.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller gives back a pointer from Box::into_raw, once.
        drop(unsafe { Box::from_raw(p) });
    }));
}

/// Borrow a handle.
///
/// # Safety
/// `p` must be null or a live handle of type `T` not used mutably elsewhere meanwhile.
unsafe fn borrow<'a, T>(p: *const T) -> Result<&'a T, Fail> {
    // SAFETY: the caller's promise.
    unsafe { p.as_ref() }.ok_or_else(|| inval("null handle"))
}

/// Borrow a handle mutably.
///
/// # Safety
/// `p` must be null or a live handle of type `T` not used elsewhere meanwhile.
unsafe fn borrow_mut<'a, T>(p: *mut T) -> Result<&'a mut T, Fail> {
    // SAFETY: the caller's promise.
    unsafe { p.as_mut() }.ok_or_else(|| inval("null handle"))
}

/// This client's id (negative on a null handle).
///
/// # Safety
/// `dev` must be null or a live device handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_client_id(dev: *const SnicDev) -> i64 {
    // SAFETY: the caller's promise about `dev`.
    match unsafe { borrow(dev) } {
        Ok(d) => i64::from(d.0.client_id()),
        Err(Fail(c, m)) => {
            set_error(&m);
            i64::from(c)
        }
    }
}

/// Allocate and register `size` bytes of host memory; `*out` is the buffer handle.
///
/// # Safety
/// `dev` a live device handle, `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_alloc_host(
    dev: *const SnicDev,
    size: usize,
    out: *mut *mut SnicBuf,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        if out.is_null() {
            return Err(inval("null out"));
        }
        let b = d.0.alloc_host(size)?;
        // SAFETY: non-null, writable by the caller's promise.
        unsafe { *out = Box::into_raw(Box::new(SnicBuf(b))) };
        Ok(0)
    })
}

/// First byte of a host buffer (null for a null handle).
///
/// # Safety
/// `buf` must be null or a live buffer handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_buf_ptr(buf: *const SnicBuf) -> *mut c_void {
    // SAFETY: the caller's promise about `buf`.
    match unsafe { buf.as_ref() } {
        Some(b) => b.0.as_ptr().cast(),
        None => std::ptr::null_mut(),
    }
}

/// IOVA of a host buffer (0 for a null handle).
///
/// # Safety
/// `buf` must be null or a live buffer handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_buf_iova(buf: *const SnicBuf) -> u64 {
    // SAFETY: the caller's promise about `buf`.
    unsafe { buf.as_ref() }.map_or(0, |b| b.0.iova())
}

/// Length of a host buffer (0 for a null handle).
///
/// # Safety
/// `buf` must be null or a live buffer handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_buf_len(buf: *const SnicBuf) -> usize {
    // SAFETY: the caller's promise about `buf`.
    unsafe { buf.as_ref() }.map_or(0, |b| b.0.len())
}

/// Unregister and unmap a host buffer (null is ignored).
///
/// # Safety
/// `buf` must be null or a buffer handle not freed before; no DMA may still use it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_free_host(buf: *mut SnicBuf) {
    // SAFETY: the caller's promise about `buf`.
    unsafe { free_handle(buf) }
}

/// Allocate device memory (`kind` 0 on-chip, 1 on-board); `*addr` is its device address.
///
/// # Safety
/// `dev` a live device handle, `addr` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_alloc_dev(
    dev: *const SnicDev,
    kind: c_int,
    size: u64,
    align: u64,
    addr: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        let kind = match kind {
            0 => DevKind::OnChip,
            1 => DevKind::OnBoard,
            _ => return Err(inval("kind must be 0 (on-chip) or 1 (on-board)")),
        };
        if addr.is_null() {
            return Err(inval("null addr"));
        }
        let a = d.0.alloc_device(kind, size, align)?;
        // SAFETY: non-null and writable by the caller's promise.
        unsafe { *addr = a };
        Ok(0)
    })
}

/// Free device memory.
///
/// # Safety
/// `dev` a live device handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_free_dev(dev: *const SnicDev, addr: u64) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        d.0.free_device(addr)?;
        Ok(0)
    })
}

/// Copy `len` bytes from `data` to device memory at `addr` (DMA).
///
/// # Safety
/// `dev` a live device handle; `data` readable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_write_dev(
    dev: *const SnicDev,
    addr: u64,
    data: *const c_void,
    len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        if len == 0 {
            return Ok(0);
        }
        if data.is_null() {
            return Err(inval("null data"));
        }
        // SAFETY: non-null and readable for `len` bytes by the caller's promise.
        let s = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) };
        d.0.write_device(addr, s)?;
        Ok(0)
    })
}

/// Copy `len` bytes of device memory at `addr` into `data` (DMA).
///
/// # Safety
/// `dev` a live device handle; `data` writable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_read_dev(
    dev: *const SnicDev,
    addr: u64,
    data: *mut c_void,
    len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        if len == 0 {
            return Ok(0);
        }
        if data.is_null() {
            return Err(inval("null data"));
        }
        // SAFETY: non-null and writable for `len` bytes by the caller's promise.
        let s = unsafe { std::slice::from_raw_parts_mut(data.cast::<u8>(), len) };
        d.0.read_device(addr, s)?;
        Ok(0)
    })
}

/// Read the register at `off` into `*v`.
///
/// # Safety
/// `dev` a live device handle, `v` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_reg_read(dev: *const SnicDev, off: u32, v: *mut u32) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        if v.is_null() {
            return Err(inval("null v"));
        }
        let x = d.0.reg_read(off)?;
        // SAFETY: non-null and writable by the caller's promise.
        unsafe { *v = x };
        Ok(0)
    })
}

/// Write `v` to the register at `off`.
///
/// # Safety
/// `dev` a live device handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_reg_write(dev: *const SnicDev, off: u32, v: u32) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        d.0.reg_write(off, v)?;
        Ok(0)
    })
}

/// One address argument of a kernel command (`snic_kernel_arg`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SnicKernelArg {
    /// First byte (host IOVA or device address).
    pub addr: u64,
    /// Bytes.
    pub len: u64,
}

/// A kernel command as C writes it (`snic_kernel_cmd`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SnicKernelCmd {
    /// Caller's id, echoed in the status.
    pub workload: u32,
    /// Kernel id (`SNIC_KERNEL_*`).
    pub kernel: u32,
    /// Address arguments in use.
    pub n_addrs: u8,
    /// Scalars in use.
    pub n_scalars: u8,
    /// Zero.
    pub reserved: [u8; 6],
    /// Address arguments.
    pub addrs: [SnicKernelArg; snic_compute::MAX_ADDRS],
    /// Scalars.
    pub scalars: [u64; snic_compute::MAX_SCALARS],
}

impl From<&SnicKernelCmd> for KernelCmd {
    fn from(c: &SnicKernelCmd) -> KernelCmd {
        let mut k = KernelCmd::new(c.kernel, c.workload);
        // Counts are passed as given: snic refuses out-of-range ones with a status.
        k.n_addrs = c.n_addrs;
        k.n_scalars = c.n_scalars;
        for (d, a) in k.addrs.iter_mut().zip(&c.addrs) {
            *d = AddrArg::new(a.addr, a.len);
        }
        k.scalars = c.scalars;
        k
    }
}

/// A kernel status as C reads it (`snic_kernel_status`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SnicKernelStatus {
    /// The command's workload id.
    pub workload: u32,
    /// `SNIC_KSTATUS_*`.
    pub status: u32,
    /// Kernel-specific result.
    pub result: u64,
    /// Nanoseconds the kernel ran.
    pub busy_ns: u64,
}

impl From<KernelStatus> for SnicKernelStatus {
    fn from(s: KernelStatus) -> SnicKernelStatus {
        SnicKernelStatus {
            workload: s.workload,
            status: s.status,
            result: s.result,
            busy_ns: s.busy_ns,
        }
    }
}

/// A kernel's counters for this client (`snic_kernel_counters`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SnicKernelCounters {
    /// Commands run.
    pub runs: u32,
    /// Commands failed.
    pub errors: u32,
    /// Status of the last command.
    pub last_status: u32,
    /// Zero.
    pub reserved: u32,
    /// Nanoseconds run.
    pub busy_ns: u64,
}

/// Write `v` through `out` when `out` is not null.
///
/// # Safety
/// `out` null or writable.
unsafe fn put<T>(out: *mut T, v: T) {
    // SAFETY: the caller's promise.
    if let Some(o) = unsafe { out.as_mut() } {
        *o = v;
    }
}

/// Push `cmd` on the control FIFO of the kernel it names (`SNIC_E_RING_FULL` when full).
///
/// # Safety
/// `dev` a live device handle; `cmd` null or a readable command.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_kernel_submit(
    dev: *const SnicDev,
    cmd: *const SnicKernelCmd,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        // SAFETY: null or readable by the caller's promise.
        let c = unsafe { cmd.as_ref() }.ok_or_else(|| inval("null cmd"))?;
        d.0.kernel_submit(&KernelCmd::from(c))?;
        Ok(0)
    })
}

/// Take the oldest status of `kernel` into `*out` without waiting: 1 when there was one, 0
/// when not.
///
/// # Safety
/// `dev` a live device handle; `out` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_kernel_poll(
    dev: *const SnicDev,
    kernel: u32,
    out: *mut SnicKernelStatus,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        match d.0.kernel_poll(kernel)? {
            Some(s) => {
                // SAFETY: null or writable by the caller's promise.
                unsafe { put(out, s.into()) };
                Ok(1)
            }
            None => Ok(0),
        }
    })
}

/// Wait up to `timeout_ms` for the status of `workload` on `kernel` (on its eventfd in
/// interrupt mode, else polling); statuses of other workloads are kept for later calls.
///
/// # Safety
/// `dev` a live device handle; `out` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_kernel_wait(
    dev: *const SnicDev,
    kernel: u32,
    workload: u32,
    timeout_ms: u32,
    out: *mut SnicKernelStatus,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        let s = d.0.kernel_wait(kernel, workload, ms(timeout_ms))?;
        // SAFETY: null or writable by the caller's promise.
        unsafe { put(out, s.into()) };
        Ok(0)
    })
}

/// Submit `cmd` and wait up to `timeout_ms` for its status (into `*out`; the return value is
/// 0 whatever the kernel's status: look at `out->status`).
///
/// # Safety
/// `dev` a live device handle; `cmd` null or readable; `out` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_kernel_run(
    dev: *const SnicDev,
    cmd: *const SnicKernelCmd,
    timeout_ms: u32,
    out: *mut SnicKernelStatus,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        // SAFETY: null or readable by the caller's promise.
        let c = unsafe { cmd.as_ref() }.ok_or_else(|| inval("null cmd"))?;
        let s = d.0.kernel_run(&KernelCmd::from(c), ms(timeout_ms))?;
        // SAFETY: null or writable by the caller's promise.
        unsafe { put(out, s.into()) };
        Ok(0)
    })
}

/// Interrupt (`on != 0`) or polled completion for `kernel`.
///
/// # Safety
/// `dev` a live device handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_kernel_set_interrupt(
    dev: *const SnicDev,
    kernel: u32,
    on: c_int,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        d.0.kernel_set_interrupt(kernel, on != 0)?;
        Ok(0)
    })
}

/// Read user register `idx` of `kernel` into `*v`.
///
/// # Safety
/// `dev` a live device handle; `v` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_kernel_reg_read(
    dev: *const SnicDev,
    kernel: u32,
    idx: u32,
    v: *mut u32,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        if v.is_null() {
            return Err(inval("null v"));
        }
        let x = d.0.kernel_reg_read(kernel, idx as usize)?;
        // SAFETY: non-null and writable by the caller's promise.
        unsafe { put(v, x) };
        Ok(0)
    })
}

/// Write user register `idx` of `kernel` (commands taken from now on see it).
///
/// # Safety
/// `dev` a live device handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_kernel_reg_write(
    dev: *const SnicDev,
    kernel: u32,
    idx: u32,
    v: u32,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        d.0.kernel_reg_write(kernel, idx as usize, v)?;
        Ok(0)
    })
}

/// `kernel`'s counters for this client into `*out`.
///
/// # Safety
/// `dev` a live device handle; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_kernel_get_counters(
    dev: *const SnicDev,
    kernel: u32,
    out: *mut SnicKernelCounters,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        if out.is_null() {
            return Err(inval("null out"));
        }
        let c = d.0.kernel_counters(kernel)?;
        let v = SnicKernelCounters {
            runs: c.runs,
            errors: c.errors,
            last_status: c.last_status,
            reserved: 0,
            busy_ns: c.busy_ns,
        };
        // SAFETY: non-null and writable by the caller's promise.
        unsafe { put(out, v) };
        Ok(0)
    })
}

/// Name of built-in kernel `kernel` (a static string), or null when there is none.
#[unsafe(no_mangle)]
pub extern "C" fn snic_kernel_name(kernel: u32) -> *const c_char {
    static NAMES: std::sync::OnceLock<Vec<(u32, CString)>> = std::sync::OnceLock::new();
    let find = || {
        let names = NAMES.get_or_init(|| {
            snic_compute::builtins()
                .iter()
                .filter_map(|k| Some((k.id(), CString::new(k.name()).ok()?)))
                .collect()
        });
        names.iter().find(|(id, _)| *id == kernel).map_or(std::ptr::null(), |(_, n)| n.as_ptr())
    };
    catch_unwind(find).unwrap_or(std::ptr::null())
}

/// Open a queue (`mode` 0 memory-mapped, 1 streaming; completion ring twice `ring_size`);
/// `*out` is the queue handle.
///
/// # Safety
/// `dev` a live device handle, `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_queue_open(
    dev: *const SnicDev,
    mode: c_int,
    ring_size: u32,
    interrupt: c_int,
    out: *mut *mut SnicQueue,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        let mode = match mode {
            0 => QueueMode::Mm,
            1 => QueueMode::St,
            _ => return Err(inval("mode must be 0 (mm) or 1 (st)")),
        };
        if out.is_null() {
            return Err(inval("null out"));
        }
        let opts = QueueOpts {
            mode,
            ring_size,
            cmpt_size: ring_size.saturating_mul(2),
            interrupt: interrupt != 0,
            ..QueueOpts::default()
        };
        let q = d.0.open_queue(opts)?;
        // SAFETY: non-null and writable by the caller's promise.
        unsafe { *out = Box::into_raw(Box::new(SnicQueue(q))) };
        Ok(0)
    })
}

/// Delete a queue and free its rings (null is ignored).
///
/// # Safety
/// `q` null or a queue handle not closed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_queue_close(q: *mut SnicQueue) {
    // SAFETY: the caller's promise about `q`.
    unsafe { free_handle(q) }
}

/// The queue id (negative on a null handle).
///
/// # Safety
/// `q` null or a live queue handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_queue_id(q: *const SnicQueue) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `q`.
        let q = unsafe { borrow(q) }?;
        Ok(c_int::from(q.0.qid()))
    })
}

/// Write a descriptor into the next slot of ring `dir` (0 H2C, 1 C2H); no doorbell.
/// `flags`: descriptor flags (`SNIC_DESC_SOP | SNIC_DESC_EOP` for one whole transfer).
///
/// # Safety
/// `q` a live queue handle, not used by another thread meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_queue_post(
    q: *mut SnicQueue,
    dir: c_int,
    src: u64,
    dst: u64,
    len: u32,
    flags: u32,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `q`.
        let q = unsafe { borrow_mut(q) }?;
        let dir = dir_of(dir)?;
        let flags = u16::try_from(flags).map_err(|_| inval("flags above 16 bits"))?;
        q.0.post(dir, &Descriptor { src, dst, len, flags, next: 0 })?;
        Ok(0)
    })
}

/// Ring the doorbell of ring `dir`.
///
/// # Safety
/// `q` a live queue handle, not used by another thread meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_queue_doorbell(q: *mut SnicQueue, dir: c_int) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `q`.
        let q = unsafe { borrow_mut(q) }?;
        q.0.doorbell(dir_of(dir)?);
        Ok(0)
    })
}

/// Take up to `max` completions into `out` without waiting; returns how many.
///
/// # Safety
/// `q` a live queue handle, not used by another thread meanwhile; `out` writable for `max`
/// entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_queue_poll(
    q: *mut SnicQueue,
    out: *mut SnicCompletion,
    max: u32,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `q`.
        let q = unsafe { borrow_mut(q) }?;
        // SAFETY: the caller's promise about `out`.
        let out = unsafe { out_slice(out, max) }?;
        let n = poll_into(&mut q.0, out);
        Ok(n as c_int)
    })
}

/// Wait up to `timeout_ms` for completions; returns how many (at least 1) or an error
/// (`SNIC_E_TIMEOUT`).
///
/// # Safety
/// As [`snic_queue_poll`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_queue_wait(
    q: *mut SnicQueue,
    out: *mut SnicCompletion,
    max: u32,
    timeout_ms: u32,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `q`.
        let q = unsafe { borrow_mut(q) }?;
        // SAFETY: the caller's promise about `out`.
        let out = unsafe { out_slice(out, max) }?;
        if out.is_empty() {
            return Ok(0);
        }
        // Wait for the first entries, then take whatever else is there.
        let mut first = [Completion::default()];
        q.0.wait(&mut first, ms(timeout_ms))?;
        out[0] = first[0].into();
        let n = 1 + poll_into(&mut q.0, &mut out[1..]);
        Ok(n as c_int)
    })
}

/// Poll `q` into the C array `out` (through a small stack buffer); returns the count.
fn poll_into(q: &mut Queue, out: &mut [SnicCompletion]) -> usize {
    let mut tmp = [Completion::default(); 32];
    let mut n = 0;
    while n < out.len() {
        let want = (out.len() - n).min(tmp.len());
        let got = q.poll(&mut tmp[..want]);
        for (o, c) in out[n..].iter_mut().zip(&tmp[..got]) {
            *o = (*c).into();
        }
        n += got;
        if got < want {
            break;
        }
    }
    n
}

/// The completion array of a poll or wait (at most `i32::MAX` entries, so counts fit).
///
/// # Safety
/// `out` null or writable for `max` entries.
unsafe fn out_slice<'a>(
    out: *mut SnicCompletion,
    max: u32,
) -> Result<&'a mut [SnicCompletion], Fail> {
    if max == 0 {
        return Ok(&mut []);
    }
    if out.is_null() {
        return Err(inval("null out"));
    }
    let n = (max as usize).min(i32::MAX as usize);
    // SAFETY: non-null, writable for `max` >= `n` entries by the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts_mut(out, n) })
}

// ----- RDMA API hooks (crate::rdma): appended block -----

use crate::rdma::{Placement, RdmaCqe, RdmaOp, RdmaSge};

/// QP placement (`snic_rdma_create_qp`): rings in a registered host buffer.
pub const SNIC_RDMA_PLACE_HOST: c_int = 0;
/// QP placement: rings in on-chip device memory.
pub const SNIC_RDMA_PLACE_ON_CHIP: c_int = 1;
/// QP placement: rings in on-board device memory.
pub const SNIC_RDMA_PLACE_ON_BOARD: c_int = 2;
/// Opcode of `snic_rdma_post`: RDMA WRITE.
pub const SNIC_RDMA_WRITE: c_int = 0;
/// Opcode of `snic_rdma_post`: RDMA READ.
pub const SNIC_RDMA_READ: c_int = 1;
/// Opcode of `snic_rdma_post`: SEND.
pub const SNIC_RDMA_SEND: c_int = 2;

/// A QP as C sees it (`snic_rdma_qp`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SnicRdmaQp {
    /// QP number.
    pub qpn: u32,
    /// Zero.
    pub reserved: u32,
    /// Where the send ring landed (host IOVA or device address).
    pub sq_addr: u64,
    /// Where the receive ring landed.
    pub rq_addr: u64,
}

/// An RDMA completion as C sees it (`snic_rdma_cqe`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SnicRdmaCqe {
    /// The work request's id.
    pub wr_id: u64,
    /// `ibv_wc_status` number (0 = success).
    pub status: u32,
    /// `ibv_wc_opcode` number (0 send, 1 write, 2 read, 128 receive).
    pub opcode: u32,
    /// Bytes.
    pub byte_len: u32,
    /// Immediate data (0 when none).
    pub imm: u32,
}

impl From<&RdmaCqe> for SnicRdmaCqe {
    fn from(c: &RdmaCqe) -> SnicRdmaCqe {
        SnicRdmaCqe {
            wr_id: c.wr_id,
            status: c.status,
            opcode: c.opcode,
            byte_len: c.byte_len,
            imm: c.imm.unwrap_or(0),
        }
    }
}

/// Register `len` bytes at `addr` (host IOVA or device address of this client) as an MR with
/// `access` (SNIC_RDMA_ACCESS_* bits); `*lkey` / `*rkey` get the keys (either may be null).
///
/// # Safety
/// `dev` a live device handle; `lkey` and `rkey` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_rdma_reg_mr(
    dev: *const SnicDev,
    addr: u64,
    len: u64,
    access: u32,
    lkey: *mut u32,
    rkey: *mut u32,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        let (l, r) = d.0.rdma_reg_mr(addr, len, access)?;
        // SAFETY: each pointer is null (skipped) or writable by the caller's promise.
        unsafe {
            if let Some(p) = lkey.as_mut() {
                *p = l;
            }
            if let Some(p) = rkey.as_mut() {
                *p = r;
            }
        }
        Ok(0)
    })
}

/// Deregister the MR with `lkey`.
///
/// # Safety
/// `dev` a live device handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_rdma_dereg_mr(dev: *const SnicDev, lkey: u32) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        d.0.rdma_dereg_mr(lkey)?;
        Ok(0)
    })
}

/// Create an RC QP (`depth` send and receive WRs) with its rings in `placement`
/// (SNIC_RDMA_PLACE_*; for HOST, `ring_buf` is the registered buffer the rings are carved
/// from, otherwise it is ignored). `*out` gets the QP number and ring addresses.
///
/// # Safety
/// `dev` a live device handle; `ring_buf` null or a live buffer handle; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_rdma_create_qp(
    dev: *const SnicDev,
    placement: c_int,
    ring_buf: *const SnicBuf,
    depth: u32,
    out: *mut SnicRdmaQp,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        if out.is_null() {
            return Err(inval("null out"));
        }
        let place = match placement {
            SNIC_RDMA_PLACE_HOST => {
                // SAFETY: the caller's promise about `ring_buf`.
                Placement::Host(&unsafe { borrow(ring_buf) }?.0)
            }
            SNIC_RDMA_PLACE_ON_CHIP => Placement::OnChip,
            SNIC_RDMA_PLACE_ON_BOARD => Placement::OnBoard,
            _ => return Err(inval("placement must be SNIC_RDMA_PLACE_*")),
        };
        let q = d.0.rdma_create_qp(place, depth)?;
        let v = SnicRdmaQp { qpn: q.qpn, reserved: 0, sq_addr: q.sq_addr, rq_addr: q.rq_addr };
        // SAFETY: non-null, writable by the caller's promise.
        unsafe { *out = v };
        Ok(0)
    })
}

/// Destroy a QP.
///
/// # Safety
/// `dev` a live device handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_rdma_destroy_qp(dev: *const SnicDev, qpn: u32) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        d.0.rdma_destroy_qp(qpn)?;
        Ok(0)
    })
}

/// Connect QP `qpn` to QP `remote_qpn` of the snic at `remote_ip` (a NUL-terminated IPv4 or
/// IPv6 address) with path MTU `mtu` (256 ..= 4096; 0: the largest the route carries).
///
/// # Safety
/// `dev` a live device handle; `remote_ip` a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_rdma_connect(
    dev: *const SnicDev,
    qpn: u32,
    remote_qpn: u32,
    remote_ip: *const c_char,
    mtu: u32,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        if remote_ip.is_null() {
            return Err(inval("null remote_ip"));
        }
        // SAFETY: non-null, NUL-terminated by the caller's promise.
        let s = unsafe { CStr::from_ptr(remote_ip) };
        let ip = s
            .to_str()
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| inval("remote_ip is not an IP address"))?;
        d.0.rdma_connect(qpn, remote_qpn, ip, mtu)?;
        Ok(0)
    })
}

/// Post a send work request on `qpn`: `opcode` SNIC_RDMA_WRITE / READ (to or from
/// `remote_addr` under `rkey`) or SEND (remote fields ignored), local buffer `len` bytes at
/// `local_addr` in the MR `lkey`; the completion carries `wr_id`.
///
/// # Safety
/// `dev` a live device handle.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments, reason = "one flat C call per work request")]
pub unsafe extern "C" fn snic_rdma_post(
    dev: *const SnicDev,
    qpn: u32,
    opcode: c_int,
    wr_id: u64,
    local_addr: u64,
    lkey: u32,
    len: u32,
    remote_addr: u64,
    rkey: u32,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        let op = match opcode {
            SNIC_RDMA_WRITE => RdmaOp::Write { remote_addr, rkey },
            SNIC_RDMA_READ => RdmaOp::Read { remote_addr, rkey },
            SNIC_RDMA_SEND => RdmaOp::Send,
            _ => return Err(inval("opcode must be SNIC_RDMA_WRITE, _READ or _SEND")),
        };
        d.0.rdma_post(qpn, wr_id, op, RdmaSge { addr: local_addr, lkey, len })?;
        Ok(0)
    })
}

/// FLUSH level of `snic_rdma_post_flush`: the range.
pub const SNIC_RDMA_FLUSH_RANGE: c_int = 0;
/// FLUSH level of `snic_rdma_post_flush`: the whole MR.
pub const SNIC_RDMA_FLUSH_MR: c_int = 1;

/// Post an RC FLUSH (IBTA 1.5) on `qpn`: `placement` SNIC_RDMA_FLUSH_GLOBAL (1) and/or
/// SNIC_RDMA_FLUSH_PERSISTENT (2) of `len` bytes at `remote_addr` under `rkey`, or of that
/// whole MR with `level` SNIC_RDMA_FLUSH_MR; the completion carries `wr_id`.
///
/// # Safety
/// `dev` a live device handle.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments, reason = "one flat C call per work request")]
pub unsafe extern "C" fn snic_rdma_post_flush(
    dev: *const SnicDev,
    qpn: u32,
    wr_id: u64,
    remote_addr: u64,
    rkey: u32,
    len: u32,
    level: c_int,
    placement: c_int,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        let whole_mr = match level {
            SNIC_RDMA_FLUSH_RANGE => false,
            SNIC_RDMA_FLUSH_MR => true,
            _ => return Err(inval("level must be SNIC_RDMA_FLUSH_RANGE or _MR")),
        };
        let placement = match placement {
            1..=3 => placement as u8,
            _ => return Err(inval("placement must be SNIC_RDMA_FLUSH_GLOBAL and/or _PERSISTENT")),
        };
        let op = RdmaOp::Flush { remote_addr, rkey, len, whole_mr, placement };
        d.0.rdma_post(qpn, wr_id, op, RdmaSge { addr: 0, lkey: 0, len: 0 })?;
        Ok(0)
    })
}

/// Post an RC ATOMIC WRITE (IBTA 1.5) on `qpn`: `value` at the 8-byte aligned `remote_addr`
/// under `rkey`; the completion carries `wr_id`.
///
/// # Safety
/// `dev` a live device handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_rdma_post_atomic_write(
    dev: *const SnicDev,
    qpn: u32,
    wr_id: u64,
    remote_addr: u64,
    rkey: u32,
    value: u64,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        let op = RdmaOp::AtomicWrite { remote_addr, rkey, value };
        d.0.rdma_post(qpn, wr_id, op, RdmaSge { addr: 0, lkey: 0, len: 0 })?;
        Ok(0)
    })
}

/// One work request of `snic_rdma_post_batch` (`snic_rdma_wr`, 40 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SnicRdmaWr {
    /// Echoed in the completion.
    pub wr_id: u64,
    /// Local address (in the MR `lkey`).
    pub local_addr: u64,
    /// Remote address (WRITE, READ).
    pub remote_addr: u64,
    /// `SNIC_RDMA_WRITE`, `SNIC_RDMA_READ` or `SNIC_RDMA_SEND`.
    pub opcode: c_int,
    /// lkey of the local MR.
    pub lkey: u32,
    /// Bytes.
    pub len: u32,
    /// rkey (WRITE, READ).
    pub rkey: u32,
}

/// Post the `n` work requests at `wrs` on `qpn` with one doorbell (one setup request; snic
/// writes every WQE, then moves the producer index once). All or none; `n` is 1 ..=
/// `SNIC_RDMA_MAX_BATCH`.
///
/// # Safety
/// `dev` a live device handle; `wrs` readable for `n` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_rdma_post_batch(
    dev: *const SnicDev,
    qpn: u32,
    wrs: *const SnicRdmaWr,
    n: u32,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        if n == 0 || n as usize > crate::RDMA_MAX_BATCH || wrs.is_null() {
            return Err(inval("wrs must hold 1 ..= SNIC_RDMA_MAX_BATCH work requests"));
        }
        // SAFETY: non-null and readable for `n` entries by the caller's promise.
        let c = unsafe { std::slice::from_raw_parts(wrs, n as usize) };
        let list = c
            .iter()
            .map(|w| {
                let (remote_addr, rkey) = (w.remote_addr, w.rkey);
                let op = match w.opcode {
                    SNIC_RDMA_WRITE => RdmaOp::Write { remote_addr, rkey },
                    SNIC_RDMA_READ => RdmaOp::Read { remote_addr, rkey },
                    SNIC_RDMA_SEND => RdmaOp::Send,
                    _ => return Err(inval("opcode must be SNIC_RDMA_WRITE, _READ or _SEND")),
                };
                let local = RdmaSge { addr: w.local_addr, lkey: w.lkey, len: w.len };
                Ok(crate::RdmaWr { wr_id: w.wr_id, op, local })
            })
            .collect::<Result<Vec<_>, Fail>>()?;
        d.0.rdma_post_batch(qpn, &list)?;
        Ok(0)
    })
}

/// One READ of a chained command (`snic_chain_read`, 32 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SnicChainRead {
    /// Peer address.
    pub remote_addr: u64,
    /// Local address (in the MR `lkey`).
    pub local_addr: u64,
    /// Peer's rkey.
    pub rkey: u32,
    /// lkey of the local MR.
    pub lkey: u32,
    /// Bytes.
    pub len: u32,
    /// Zero.
    pub reserved: u32,
}

/// The WRITE ending a chained command (`snic_chain_write`, 32 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SnicChainWrite {
    /// Local address (the kernel's output, in the MR `lkey`).
    pub local_addr: u64,
    /// Peer address.
    pub remote_addr: u64,
    /// lkey of the local MR.
    pub lkey: u32,
    /// Bytes.
    pub len: u32,
    /// Peer's rkey.
    pub rkey: u32,
    /// Zero.
    pub reserved: u32,
}

/// `snic_chain_read` capacity of one chained command.
pub const SNIC_CHAIN_MAX_READS: u32 = 64;

/// Hand snic a chained command on `qpn` (see `snic.h` and [`Device::rdma_chain`]).
///
/// # Safety
/// `dev` a live device handle; `reads` readable for `n` entries; `kernel` readable;
/// `write_back` null or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_rdma_chain(
    dev: *const SnicDev,
    qpn: u32,
    wr_id: u64,
    reads: *const SnicChainRead,
    n: u32,
    kernel: *const SnicKernelCmd,
    write_back: *const SnicChainWrite,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        if n == 0 || n > SNIC_CHAIN_MAX_READS || reads.is_null() {
            return Err(inval("reads must hold 1 ..= SNIC_CHAIN_MAX_READS entries"));
        }
        // SAFETY: non-null and readable for `n` entries by the caller's promise.
        let c = unsafe { std::slice::from_raw_parts(reads, n as usize) };
        // SAFETY: null or readable by the caller's promise.
        let k = unsafe { kernel.as_ref() }.ok_or_else(|| inval("null kernel"))?;
        // SAFETY: null or readable by the caller's promise.
        let w = unsafe { write_back.as_ref() };
        let list: Vec<crate::ChainRead> = c
            .iter()
            .map(|r| crate::ChainRead {
                remote_addr: r.remote_addr,
                rkey: r.rkey,
                local: RdmaSge { addr: r.local_addr, lkey: r.lkey, len: r.len },
            })
            .collect();
        let back = w.map(|w| crate::ChainWrite {
            local: RdmaSge { addr: w.local_addr, lkey: w.lkey, len: w.len },
            remote_addr: w.remote_addr,
            rkey: w.rkey,
        });
        d.0.rdma_chain(qpn, wr_id, &list, &KernelCmd::from(k), back)?;
        Ok(0)
    })
}

/// Post a receive buffer (`len` bytes at `addr` in the MR `lkey`) on `qpn`.
///
/// # Safety
/// `dev` a live device handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_rdma_post_recv(
    dev: *const SnicDev,
    qpn: u32,
    wr_id: u64,
    addr: u64,
    lkey: u32,
    len: u32,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        d.0.rdma_post_recv(qpn, wr_id, RdmaSge { addr, lkey, len })?;
        Ok(0)
    })
}

/// Copy `cqes` into the C array `out` (room for `max`); returns the count.
///
/// # Safety
/// `out` writable for `max` entries when `max > 0`.
unsafe fn rdma_out(cqes: &[RdmaCqe], out: *mut SnicRdmaCqe, max: u32) -> Result<c_int, Fail> {
    let n = cqes.len().min(max as usize);
    if n == 0 {
        return Ok(0);
    }
    if out.is_null() {
        return Err(inval("null out"));
    }
    // SAFETY: non-null, writable for `max` >= `n` entries by the caller's promise.
    let o = unsafe { std::slice::from_raw_parts_mut(out, n) };
    for (slot, c) in o.iter_mut().zip(cqes) {
        *slot = c.into();
    }
    Ok(n as c_int)
}

/// Take up to `max` completions of `qpn`'s CQ without waiting; returns how many.
///
/// # Safety
/// `dev` a live device handle; `out` writable for `max` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_rdma_poll(
    dev: *const SnicDev,
    qpn: u32,
    out: *mut SnicRdmaCqe,
    max: u32,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        if max == 0 {
            return Ok(0);
        }
        if out.is_null() {
            return Err(inval("null out"));
        }
        let cqes = d.0.rdma_poll_cq(qpn, max.min(i32::MAX as u32))?;
        // SAFETY: the caller's promise about `out`.
        unsafe { rdma_out(&cqes, out, max) }
    })
}

/// Wait up to `timeout_ms` for completions of `qpn` (polling snic with short sleeps); returns
/// how many (>= 1) or SNIC_E_TIMEOUT.
///
/// # Safety
/// As [`snic_rdma_poll`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn snic_rdma_wait(
    dev: *const SnicDev,
    qpn: u32,
    out: *mut SnicRdmaCqe,
    max: u32,
    timeout_ms: u32,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise about `dev`.
        let d = unsafe { borrow(dev) }?;
        if max == 0 || out.is_null() {
            return Err(inval("out must hold at least one entry"));
        }
        let cqes = d.0.rdma_wait_cq(qpn, max.min(i32::MAX as u32), ms(timeout_ms))?;
        // SAFETY: the caller's promise about `out`.
        unsafe { rdma_out(&cqes, out, max) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        // SAFETY: snic_last_error returns a valid NUL-terminated string of this thread.
        unsafe { CStr::from_ptr(snic_last_error()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn null_and_bad_arguments_are_refused() {
        let mut dev: *mut SnicDev = std::ptr::null_mut();
        let name = c"t";
        // SAFETY: null pointers are what is being tested; `dev` is a valid out pointer.
        unsafe {
            assert_eq!(snic_open(std::ptr::null(), name.as_ptr(), &mut dev), SNIC_E_INVAL);
            assert!(last().contains("null"), "{}", last());
            let mut v = 0u32;
            assert_eq!(snic_reg_read(std::ptr::null(), 0, &mut v), SNIC_E_INVAL);
            assert_eq!(snic_queue_post(std::ptr::null_mut(), 0, 0, 0, 1, 3), SNIC_E_INVAL);
            assert_eq!(
                snic_queue_poll(std::ptr::null_mut(), std::ptr::null_mut(), 4),
                SNIC_E_INVAL
            );
            assert_eq!(snic_buf_iova(std::ptr::null()), 0);
            assert_eq!(snic_buf_len(std::ptr::null()), 0);
            assert!(snic_buf_ptr(std::ptr::null()).is_null());
            assert!(snic_client_id(std::ptr::null()) < 0);
            snic_close(std::ptr::null_mut());
            snic_free_host(std::ptr::null_mut());
            snic_queue_close(std::ptr::null_mut());
        }
        assert!(dev.is_null());
    }

    #[test]
    fn connect_failure_is_an_io_error_with_a_message() {
        let mut dev: *mut SnicDev = std::ptr::null_mut();
        let path = c"/nonexistent/snic-host-test.sock";
        // SAFETY: valid strings and out pointer.
        let r = unsafe { snic_open(path.as_ptr(), c"t".as_ptr(), &mut dev) };
        assert_eq!(r, SNIC_E_IO);
        assert!(dev.is_null());
        assert!(!last().is_empty());
    }

    #[test]
    fn rdma_wr_layout() {
        assert_eq!(std::mem::size_of::<SnicRdmaWr>(), 40);
        assert_eq!(std::mem::offset_of!(SnicRdmaWr, opcode), 24);
        assert_eq!(std::mem::offset_of!(SnicRdmaWr, rkey), 36);
        // SAFETY: null handle and arrays are what is being tested.
        unsafe {
            assert_eq!(
                snic_rdma_post_batch(std::ptr::null(), 1, std::ptr::null(), 1),
                SNIC_E_INVAL
            );
        }
    }

    #[test]
    fn completion_layout() {
        assert_eq!(std::mem::size_of::<SnicCompletion>(), 16);
        let c = Completion { len: 5, index: 6, status: 7, dir: 1, qid: 9, word: 5 };
        let s = SnicCompletion::from(c);
        assert_eq!((s.len, s.index, s.status, s.dir, s.qid, s.flags), (5, 6, 7, 1, 9, 5));
    }
}
