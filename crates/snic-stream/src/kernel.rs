//! The [`StreamKernel`] trait: what a user kernel implements to run on every packet.
//!
//! A kernel is a sans-IO state machine. The [`KernelStage`](crate::KernelStage) hands it each
//! packet of a batch in order with the batch's time; the kernel reads and may rewrite the
//! packet (headers and payload, growing or shrinking it within the buffer's room), and answers
//! with a [`Verdict`]: the packet goes on, or is dropped for a [`DropReason`] the stage counts.
//! It may also [`Emit`] packets of its own (a report, a reply), which join the batch after the
//! packets of the batch and are counted as the stage's `created`.
//!
//! Its control surface is a file of numbered `u32` registers ([`RegInfo`]: name, access) and,
//! for kernels that need them, key slots; the control plane reaches both through
//! [`KernelControl`](crate::KernelControl) while packets flow. Its results (a table the host
//! reads) are bytes in a fixed layout the kernel writes into a [`ResultsRegion`] when asked to
//! [`publish`](StreamKernel::publish).

use core::fmt;
use snic_pipeline::{DropReason, PacketBuf, PortId};
use snic_time::Instant;

/// What happens to a packet after a kernel saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The packet goes on to the next stage (possibly rewritten).
    Pass,
    /// The packet is dropped and counted under this reason.
    Drop(DropReason),
}

/// May a register be written by the control plane?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read-only: a status or counter the kernel keeps.
    ReadOnly,
    /// Read and write.
    ReadWrite,
}

/// One register of a kernel's register file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegInfo {
    /// Short name (`enable`, `flows`), for the control plane's listings.
    pub name: &'static str,
    /// Whether the control plane may write it.
    pub access: Access,
    /// One line on what it means.
    pub doc: &'static str,
}

/// Why a kernel could not be built or a control command was refused. Its `Display` is what
/// the operator sees.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KernelError {
    /// No kernel has this name.
    UnknownKernel(String),
    /// A stage argument is unknown or its value is wrong.
    BadArg {
        /// The argument.
        key: String,
        /// Why.
        why: String,
    },
    /// The kernel has no register with this index.
    NoRegister(u32),
    /// The register cannot be written.
    ReadOnly(&'static str),
    /// The value is not one the register takes.
    BadValue {
        /// The register.
        reg: &'static str,
        /// The value given.
        value: u32,
        /// What it takes.
        why: &'static str,
    },
    /// The kernel takes no keys, or not in this slot or of this length.
    BadKey(String),
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::UnknownKernel(n) => {
                write!(
                    f,
                    "no streaming kernel called {n:?} (kernels: {})",
                    crate::KERNELS.join(", ")
                )
            }
            KernelError::BadArg { key, why } => write!(f, "argument {key}: {why}"),
            KernelError::NoRegister(i) => write!(f, "no register {i}"),
            KernelError::ReadOnly(r) => write!(f, "register {r} is read-only"),
            KernelError::BadValue { reg, value, why } => {
                write!(f, "register {reg} does not take {value}: {why}")
            }
            KernelError::BadKey(why) => write!(f, "{why}"),
        }
    }
}

impl std::error::Error for KernelError {}

/// Packets a kernel makes itself during one batch. Bounded: a kernel that emits more than
/// there is room for gets `Err` back and should count what it could not send.
#[derive(Debug)]
pub struct Emit<'a> {
    pub(crate) out: &'a mut snic_pipeline::Batch,
}

/// The emit queue is full for this batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmitFull;

impl<'a> Emit<'a> {
    /// Emitted packets go into `out` (the stage's own batch; tests and tools make their own).
    pub fn new(out: &'a mut snic_pipeline::Batch) -> Emit<'a> {
        Emit { out }
    }

    /// Queue a copy of `frame`, leaving by `egress` (`None`: a later stage decides). The new
    /// packet enters the batch after the batch's own packets.
    pub fn packet(&mut self, frame: &[u8], egress: Option<PortId>) -> Result<(), EmitFull> {
        let p = self.out.push_frame(frame).ok_or(EmitFull)?;
        p.meta.egress = egress;
        Ok(())
    }

    /// Room left for emitted packets in this batch.
    pub fn room(&self) -> usize {
        self.out.max() - self.out.len()
    }
}

/// Memory a kernel's results are published into: device memory in `snic serve` (a window of
/// the on-board memfd a host maps or reads by DMA), plain heap memory in `snic run` and in
/// tests. Writes are plain copies; a reader on the other side of the region uses the
/// header's sequence word (see [`crate::table`]) to tell a torn read.
pub trait ResultsRegion: Send + Sync + fmt::Debug {
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether the region is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copy `bytes` to `[off, off + bytes.len())`. A write past the end is ignored (and
    /// reported `false`), never a panic.
    fn write(&self, off: usize, bytes: &[u8]) -> bool;
    /// Copy `[off, off + out.len())` into `out`; `false` (and `out` untouched) when out of
    /// bounds.
    fn read(&self, off: usize, out: &mut [u8]) -> bool;
}

/// A results region in heap memory, shared between the stage (writer) and the control plane
/// (reader). One uncontended lock per publish (once per batch), none per packet.
#[derive(Debug)]
pub struct HeapRegion {
    bytes: std::sync::Mutex<Vec<u8>>,
}

impl HeapRegion {
    /// `len` zero bytes.
    pub fn new(len: usize) -> HeapRegion {
        HeapRegion { bytes: std::sync::Mutex::new(vec![0; len]) }
    }

    /// A copy of the whole region.
    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.lock().map_or_else(|p| p.into_inner().clone(), |b| b.clone())
    }
}

impl ResultsRegion for HeapRegion {
    fn len(&self) -> usize {
        self.bytes.lock().map_or_else(|p| p.into_inner().len(), |b| b.len())
    }
    fn write(&self, off: usize, bytes: &[u8]) -> bool {
        let mut g = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
        match off.checked_add(bytes.len()).and_then(|end| g.get_mut(off..end)) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                true
            }
            None => false,
        }
    }
    fn read(&self, off: usize, out: &mut [u8]) -> bool {
        let g = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
        match off.checked_add(out.len()).and_then(|end| g.get(off..end)) {
            Some(src) => {
                out.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
}

/// A streaming kernel: user code that sees every packet of a batch.
///
/// Contract (checked by the stage's tests): `process` never panics on any packet; a kernel
/// that rewrites a packet leaves valid headers (lengths and checksums it changed are fixed)
/// or drops it; registers and keys change only through [`StreamKernel::write_reg`] and
/// [`StreamKernel::set_key`], between batches.
pub trait StreamKernel: Send + fmt::Debug {
    /// The kernel's name (`telemetry`, `crypt`).
    fn name(&self) -> &'static str;

    /// Process one packet at time `now`.
    fn process(&mut self, now: Instant, pkt: &mut PacketBuf, emit: &mut Emit<'_>) -> Verdict;

    /// The register file's layout; register `i` is `registers()[i]`.
    fn registers(&self) -> &'static [RegInfo] {
        &[]
    }

    /// Read register `idx` (`None`: no such register).
    fn read_reg(&self, idx: u32) -> Option<u32> {
        let _ = idx;
        None
    }

    /// Write register `idx`. Refused values change nothing.
    fn write_reg(&mut self, idx: u32, value: u32) -> Result<(), KernelError> {
        let _ = value;
        Err(KernelError::NoRegister(idx))
    }

    /// Load `key` into key slot `slot` (an empty `key` clears the slot).
    fn set_key(&mut self, slot: u32, key: &[u8]) -> Result<(), KernelError> {
        let _ = (slot, key);
        Err(KernelError::BadKey(format!("kernel {} takes no keys", self.name())))
    }

    /// Bytes of results memory the kernel publishes into (0: it has no results).
    fn results_len(&self) -> usize {
        0
    }

    /// Write what changed since the last call into `region` (the stage calls it after every
    /// batch that had packets or control changes).
    fn publish(&mut self, region: &dyn ResultsRegion) {
        let _ = region;
    }

    /// Make the next [`StreamKernel::publish`] write all results, not only what changed (the
    /// stage calls it when the kernel's region is replaced).
    fn republish(&mut self) {}
}
