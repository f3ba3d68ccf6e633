//! The connection every handle shares ([`Inner`]: the setup socket, the BAR, the NIC page, the
//! workers' kick eventfds, the kernel slots' host-side state) and registered host memory
//! ([`HostBuf`]).

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{Ordering, fence};
use std::sync::{Arc, Mutex, MutexGuard};

use snic_compute::KernelStatus;
use snic_hostif::abi;
use snic_hostif::proto::{DeviceRegion, MAX_MESSAGE, Request, Response};
use snic_hostif::shm::{EventFd, Mapping, SeqPacket};

use crate::error::{HostError, Result};

/// Lock a mutex, going on with the data when another thread panicked while holding it (the
/// data are indices that stay consistent between statements).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Host-side state of one kernel slot.
#[derive(Debug, Default)]
pub(crate) struct KernelState {
    /// Commands written (shadow of KCTL_PIDX).
    pub(crate) ctl_pidx: u32,
    /// Statuses read (shadow of KSTS_CIDX).
    pub(crate) sts_cidx: u32,
    /// Statuses read from the FIFO but not handed out yet (a wait for one workload reads past
    /// the others'), oldest first.
    pub(crate) stash: VecDeque<KernelStatus>,
    /// The eventfd attached with `kernel_irq` (kept once attached).
    pub(crate) irq: Option<Arc<EventFd>>,
    /// Whether interrupt mode is on (K_CONTROL bit 0 as this client last wrote it).
    pub(crate) interrupt: bool,
}

/// What every handle of one connection shares.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) sock: Mutex<SeqPacket>,
    /// The client's register space.
    pub(crate) bar: Mapping,
    /// The NIC page (worker sleeping flags).
    pub(crate) nic: Mapping,
    /// One kick eventfd per worker.
    pub(crate) kicks: Vec<EventFd>,
    pub(crate) client: u32,
    /// DMA workers (their kicks come first in `kicks`).
    pub(crate) workers: u32,
    /// Compute workers (kicks after the DMA workers').
    pub(crate) compute: u32,
    pub(crate) regions: Vec<DeviceRegion>,
    pub(crate) huge: bool,
    /// One per kernel id.
    pub(crate) kernels: Vec<Mutex<KernelState>>,
}

impl Inner {
    /// Send one request (with `fds`) and read its answer. A [`Response::Error`] becomes
    /// [`HostError::Refused`].
    pub(crate) fn request(
        &self,
        req: &Request,
        fds: &[BorrowedFd<'_>],
    ) -> Result<(Response, Vec<OwnedFd>)> {
        let sock = lock(&self.sock);
        sock.send(&req.to_bytes(), fds)?;
        let mut buf = vec![0u8; MAX_MESSAGE];
        let (n, got) = match sock.recv(&mut buf) {
            Ok(r) => r,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(HostError::Timeout);
            }
            Err(e) => return Err(HostError::Io(e)),
        };
        drop(sock);
        if n == 0 {
            return Err(HostError::Protocol("snic closed the connection".into()));
        }
        let resp = Response::from_bytes(&buf[..n])
            .map_err(|e| HostError::Protocol(format!("undecodable response: {e}")))?;
        match resp {
            Response::Error { code, message } => Err(HostError::Refused { code, message }),
            r => Ok((r, got)),
        }
    }

    /// A request whose answer must be `Ok`.
    pub(crate) fn request_ok(&self, req: &Request, fds: &[BorrowedFd<'_>]) -> Result<()> {
        match self.request(req, fds)?.0 {
            Response::Ok => Ok(()),
            r => Err(unexpected(&r)),
        }
    }

    /// The kick rule, after a store to a host register that worker `w` watches: make the store
    /// globally visible before reading the worker's sleeping flag, and kick it if it sleeps.
    /// (The worker sets its flag, fences, then re-scans the registers before it blocks, so
    /// either it sees the store or this sees the flag.)
    pub(crate) fn kick(&self, w: u32) {
        fence(Ordering::SeqCst);
        if self.nic.load_u32(abi::worker_sleeping(w)) != 0
            && let Some(k) = self.kicks.get(w as usize)
        {
            // A failed kick only delays the worker until its next wake-up; nothing to undo.
            let _ = k.signal();
        }
    }

    /// The kick rule for a register no single worker is known to watch: kick every sleeper.
    pub(crate) fn kick_all(&self) {
        for w in 0..self.kicks.len() as u32 {
            self.kick(w);
        }
    }

    /// The kick rule for kernel `kernel`'s slot (its compute worker).
    pub(crate) fn kick_kernel(&self, kernel: u32) {
        self.kick(self.workers + abi::kernel_worker(kernel, self.compute));
    }

    pub(crate) fn workers(&self) -> u32 {
        self.workers
    }

    pub(crate) fn alloc_host(self: &Arc<Inner>, size: usize) -> Result<HostBuf> {
        if size == 0 {
            return Err(HostError::OutOfRange("host buffer size 0".into()));
        }
        let (map, fd) = Mapping::memfd("snic-host", size, false)?;
        let resp = self.request(&Request::RegisterHost { len: size as u64 }, &[fd.as_fd()])?.0;
        let Response::Registered { iova } = resp else { return Err(unexpected(&resp)) };
        Ok(HostBuf { inner: Arc::clone(self), map, iova, len: size })
    }
}

/// A response that is not the one the request calls for.
pub(crate) fn unexpected(r: &Response) -> HostError {
    HostError::Protocol(format!("unexpected response {r:?}"))
}

/// Host memory registered with snic: a shared memfd mapping and the IOVA snic gave it.
/// Dropping it unregisters it (best effort).
#[derive(Debug)]
pub struct HostBuf {
    inner: Arc<Inner>,
    map: Mapping,
    iova: u64,
    len: usize,
}

impl HostBuf {
    /// The address descriptors use for the first byte.
    pub fn iova(&self) -> u64 {
        self.iova
    }
    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the buffer is empty (never: buffers have at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// First byte, for code that reads and writes the buffer itself (snic may access the
    /// memory concurrently while DMA is outstanding).
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_ptr()
    }
    /// Copy `data` to offset `off`.
    pub fn write(&self, off: usize, data: &[u8]) -> Result<()> {
        self.map.write(off, data).ok_or_else(|| self.range(off, data.len()))
    }
    /// Copy `buf.len()` bytes at `off` into `buf`.
    pub fn read(&self, off: usize, buf: &mut [u8]) -> Result<()> {
        self.map.read(off, buf).ok_or_else(|| self.range(off, buf.len()))
    }
    fn range(&self, off: usize, len: usize) -> HostError {
        HostError::OutOfRange(format!("{len} bytes at {off} in a buffer of {}", self.len))
    }
    /// The mapping (for acquire loads of completion words).
    pub(crate) fn map(&self) -> &Mapping {
        &self.map
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        let _ = self.inner.request_ok(&Request::UnregisterHost { iova: self.iova }, &[]);
    }
}
