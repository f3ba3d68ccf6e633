//! [`Device`], the connection to snic: hello and setup requests, registered host memory,
//! device memory, registers, the lookaside-kernel FIFOs, and queues and channels. What its
//! handles share (socket, BAR, kicks) and [`HostBuf`] are in [`crate::conn`].

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use snic_dma::desc::{DIR_QUEUE, Descriptor, Dir};
use snic_dma::{Completion, Status};
use snic_hostif::abi;
use snic_hostif::proto::{DevKind, DeviceRegion, MAX_MESSAGE, Request, Response};
use snic_hostif::shm::{EventFd, Mapping, SeqPacket};

use crate::conn::{HostBuf, Inner, KernelState, lock, unexpected};
use crate::error::{HostError, Result};
use crate::queue::{Channel, Queue, QueueOpts};

/// How long a setup request may wait for its answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Size of the bounce buffer [`Device::write_device`] and [`Device::read_device`] use (and the
/// largest chunk of one transfer).
const BOUNCE: usize = 1 << 20;
/// How long one bounce transfer may take.
const BOUNCE_TIMEOUT: Duration = Duration::from_secs(30);

/// The bounce queue and buffer of [`Device::write_device`] / [`Device::read_device`].
#[derive(Debug)]
struct Bounce {
    queue: Queue,
    buf: HostBuf,
}

impl Bounce {
    /// Flush the queue (stop, start; best effort) so the next transfer starts clean.
    fn reset(&mut self) {
        let _ = self.queue.stop();
        let _ = self.queue.start();
    }
}

/// A connection to snic. `Send + Sync`: setup requests are serialized on the socket; the
/// queues and channels it opens are separate handles.
#[derive(Debug)]
pub struct Device {
    pub(crate) inner: Arc<Inner>,
    bounce: Mutex<Option<Bounce>>,
}

impl Device {
    /// Connect to snic's socket at `path` as `name`: say hello, map the BAR and the NIC page,
    /// keep the workers' kick eventfds.
    pub fn connect(path: &Path, name: &str) -> Result<Device> {
        let sock = SeqPacket::connect(path)?;
        sock.set_read_timeout(Some(REQUEST_TIMEOUT))?;
        let hello = Request::Hello { name: name.to_string(), version: abi::VERSION_VALUE };
        sock.send(&hello.to_bytes(), &[])?;
        let mut buf = vec![0u8; MAX_MESSAGE];
        let (n, fds) = sock.recv(&mut buf)?;
        if n == 0 {
            return Err(HostError::Protocol("snic closed the connection during hello".into()));
        }
        let resp = Response::from_bytes(&buf[..n])
            .map_err(|e| HostError::Protocol(format!("undecodable welcome: {e}")))?;
        let (client, workers, compute, device, huge_pages) = match resp {
            Response::Welcome {
                client,
                version,
                workers,
                compute_workers,
                device,
                huge_pages,
                ..
            } => {
                if version != abi::VERSION_VALUE {
                    return Err(HostError::Protocol(format!(
                        "snic speaks version {version}, this library {}",
                        abi::VERSION_VALUE
                    )));
                }
                (client, workers, compute_workers, device, huge_pages)
            }
            Response::Error { code, message } => return Err(HostError::Refused { code, message }),
            r => return Err(unexpected(&r)),
        };
        if workers == 0 || compute == 0 || workers.saturating_add(compute) > abi::MAX_WORKERS {
            return Err(HostError::Protocol(format!(
                "welcome says {workers} workers and {compute} compute workers"
            )));
        }
        if fds.len() != 2 + (workers + compute) as usize {
            return Err(HostError::Protocol(format!(
                "welcome carried {} fds, expected {}",
                fds.len(),
                2 + workers + compute
            )));
        }
        let mut fds = fds.into_iter();
        let (Some(bar_fd), Some(nic_fd)) = (fds.next(), fds.next()) else {
            return Err(HostError::Protocol("welcome without BAR fds".into()));
        };
        let bar = Mapping::map_fd(bar_fd.as_fd(), abi::BAR_SIZE)?;
        let nic = Mapping::map_fd(nic_fd.as_fd(), abi::NIC_PAGE_SIZE)?;
        let kicks = fds.map(EventFd::from_fd).collect();
        if bar.load_u32(abi::ID) != abi::ID_VALUE {
            return Err(HostError::Protocol(format!(
                "BAR ID register is {:#x}, expected {:#x}",
                bar.load_u32(abi::ID),
                abi::ID_VALUE
            )));
        }
        let kernels = (0..abi::MAX_KERNELS)
            .map(|id| {
                Mutex::new(KernelState {
                    ctl_pidx: bar.load_u32(abi::kernel_reg(id, abi::KCTL_PIDX)),
                    sts_cidx: bar.load_u32(abi::kernel_reg(id, abi::KSTS_CIDX)),
                    ..KernelState::default()
                })
            })
            .collect();
        let inner = Inner {
            sock: Mutex::new(sock),
            bar,
            nic,
            kicks,
            client,
            workers,
            compute,
            regions: device,
            huge: huge_pages,
            kernels,
        };
        Ok(Device { inner: Arc::new(inner), bounce: Mutex::new(None) })
    }

    /// This client's id.
    pub fn client_id(&self) -> u32 {
        self.inner.client
    }
    /// snic's DMA worker threads.
    pub fn workers(&self) -> u32 {
        self.inner.workers
    }
    /// snic's compute worker threads (they run the lookaside kernels).
    pub fn compute_workers(&self) -> u32 {
        self.inner.compute
    }
    /// Device memory regions.
    pub fn device_regions(&self) -> Vec<DeviceRegion> {
        self.inner.regions.clone()
    }
    /// Whether snic's device memory is on huge pages.
    pub fn huge_pages(&self) -> bool {
        self.inner.huge
    }

    // ----- memory -----

    /// Allocate `size` bytes of host memory (a shared memfd mapping) and register it; the
    /// buffer's [`HostBuf::iova`] is what descriptors use.
    pub fn alloc_host(&self, size: usize) -> Result<HostBuf> {
        self.inner.alloc_host(size)
    }

    /// Allocate device memory; returns its device address.
    pub fn alloc_device(&self, kind: DevKind, size: u64, align: u64) -> Result<u64> {
        let resp = self.inner.request(&Request::AllocDevice { kind, size, align }, &[])?.0;
        match resp {
            Response::Allocated { addr } => Ok(addr),
            r => Err(unexpected(&r)),
        }
    }

    /// Free device memory this client allocated.
    pub fn free_device(&self, addr: u64) -> Result<()> {
        self.inner.request_ok(&Request::FreeDevice { addr }, &[])
    }

    /// The bounce queue and buffer, created on first use.
    fn bounce(&self) -> Result<MutexGuard<'_, Option<Bounce>>> {
        let mut g = lock(&self.bounce);
        if g.is_none() {
            let buf = self.alloc_host(BOUNCE)?;
            let queue =
                self.open_queue(QueueOpts { ring_size: 4, cmpt_size: 8, ..Default::default() })?;
            *g = Some(Bounce { queue, buf });
        }
        Ok(g)
    }

    /// One bounce transfer of `len` bytes between the bounce buffer and `dev_addr`.
    fn bounce_dma(b: &mut Bounce, dir: Dir, dev_addr: u64, len: usize) -> Result<()> {
        let d = match dir {
            Dir::H2c => Descriptor::new(b.buf.iova(), dev_addr, len as u32),
            Dir::C2h => Descriptor::new(dev_addr, b.buf.iova(), len as u32),
        };
        b.queue.post(dir, &d)?;
        b.queue.doorbell(dir);
        let mut c = [Completion::default()];
        let c = match b.queue.wait(&mut c, BOUNCE_TIMEOUT) {
            Ok(1) => c[0],
            r => {
                // Nothing came back: flush the queue so the next call does not start behind
                // an outstanding descriptor.
                b.reset();
                r?;
                return Err(HostError::Timeout);
            }
        };
        match Status::from_code(c.status) {
            Some(Status::Ok) if c.dir == dir.code() && c.len as usize == len => Ok(()),
            Some(Status::Ok) => Err(HostError::Protocol(format!("unexpected completion {c:?}"))),
            Some(s) => {
                if c.dir == DIR_QUEUE {
                    // The queue is in error: restart it so the next call starts clean.
                    b.reset();
                }
                Err(HostError::Dma(s))
            }
            None => Err(HostError::Protocol(format!("completion status {}", c.status))),
        }
    }

    /// Copy `data` to device memory at `dev_addr` (H2C DMA through a bounce buffer, in chunks
    /// of 1 MiB).
    pub fn write_device(&self, dev_addr: u64, data: &[u8]) -> Result<()> {
        let mut g = self.bounce()?;
        let b = g.as_mut().ok_or_else(|| HostError::Protocol("no bounce queue".into()))?;
        for (i, chunk) in data.chunks(BOUNCE).enumerate() {
            b.buf.write(0, chunk)?;
            let addr = dev_addr
                .checked_add((i * BOUNCE) as u64)
                .ok_or_else(|| HostError::OutOfRange("device address overflows".into()))?;
            Self::bounce_dma(b, Dir::H2c, addr, chunk.len())?;
        }
        Ok(())
    }

    /// Copy device memory at `dev_addr` into `buf` (C2H DMA through a bounce buffer).
    pub fn read_device(&self, dev_addr: u64, buf: &mut [u8]) -> Result<()> {
        let mut g = self.bounce()?;
        let b = g.as_mut().ok_or_else(|| HostError::Protocol("no bounce queue".into()))?;
        for (i, chunk) in buf.chunks_mut(BOUNCE).enumerate() {
            let addr = dev_addr
                .checked_add((i * BOUNCE) as u64)
                .ok_or_else(|| HostError::OutOfRange("device address overflows".into()))?;
            Self::bounce_dma(b, Dir::C2h, addr, chunk.len())?;
            b.buf.read(0, chunk)?;
        }
        Ok(())
    }

    // ----- control -----

    fn check_reg(off: u32) -> Result<usize> {
        let o = off as usize;
        if !o.is_multiple_of(4) || o >= abi::BAR_SIZE {
            return Err(HostError::OutOfRange(format!(
                "register offset {off:#x} (must be 4-aligned and below {:#x})",
                abi::BAR_SIZE
            )));
        }
        Ok(o)
    }

    /// Read the 32-bit register at `off` (acquire).
    pub fn reg_read(&self, off: u32) -> Result<u32> {
        Ok(self.inner.bar.load_u32(Self::check_reg(off)?))
    }

    /// Write the 32-bit register at `off` (release), then apply the kick rule for every
    /// worker (any of them may watch it).
    pub fn reg_write(&self, off: u32, v: u32) -> Result<()> {
        self.inner.bar.store_u32(Self::check_reg(off)?, v);
        self.inner.kick_all();
        Ok(())
    }

    // ----- DMA -----

    /// Open a queue: its rings go in a new registered host buffer; snic adds and starts it.
    pub fn open_queue(&self, opts: QueueOpts) -> Result<Queue> {
        Queue::open(&self.inner, opts)
    }

    /// Configure channel `index` of `dir` (polled, or with an interrupt eventfd).
    pub fn channel(&self, dir: Dir, index: u8, interrupt: bool) -> Result<Channel> {
        Channel::open(&self.inner, dir, index, interrupt)
    }

    /// snic's counters document.
    pub fn stats(&self) -> Result<serde_json::Value> {
        match self.inner.request(&Request::Stats, &[])?.0 {
            Response::Stats { stats } => Ok(stats),
            r => Err(unexpected(&r)),
        }
    }

    /// Send a raw setup request (with `fds` attached) and return snic's answer and the fds
    /// it carried. An error answer is [`HostError::Refused`].
    pub fn request(
        &self,
        req: &Request,
        fds: &[BorrowedFd<'_>],
    ) -> Result<(Response, Vec<OwnedFd>)> {
        self.inner.request(req, fds)
    }
}
