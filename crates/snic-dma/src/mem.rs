//! One address space for the engines: host memory and device memory, each mapped as regions.
//!
//! An address is a `u64`. Device addresses carry [`DEVICE_ADDR_PREFIX`] in their top four bits
//! (RecoNIC likewise routes an access to device or host memory by a fixed high address window);
//! everything else is a host address. [`HostAddr`] and [`DevAddr`] keep the two apart in the
//! code; [`DevAddr::offset`] is the offset in device memory. A region's bytes come from a
//! [`Backing`]: a `Vec` here, a shared-memory mapping in the I/O layer.
//!
//! Every access is checked: the whole `[addr, addr + len)` must lie inside one mapped region,
//! otherwise a typed [`MemError`] is returned and nothing is read or written.

use std::fmt;

use crate::alloc::{AllocError, AllocStats, Allocator};

/// Top four bits of every device address.
pub const DEVICE_ADDR_PREFIX: u64 = 0xD000_0000_0000_0000;
/// Mask that selects the prefix bits.
pub const DEVICE_ADDR_MASK: u64 = 0xF000_0000_0000_0000;
/// Largest device-memory offset + 1 (the bits below the prefix).
pub const DEVICE_SPACE: u64 = !DEVICE_ADDR_MASK + 1;

/// Whether `addr` lies in device memory (carries [`DEVICE_ADDR_PREFIX`]).
pub const fn is_device_address(addr: u64) -> bool {
    addr & DEVICE_ADDR_MASK == DEVICE_ADDR_PREFIX
}

/// An address in host memory (never carries the device prefix).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HostAddr(u64);

impl HostAddr {
    /// `None` when `raw` carries the device prefix.
    pub const fn new(raw: u64) -> Option<HostAddr> {
        if is_device_address(raw) { None } else { Some(HostAddr(raw)) }
    }
    /// The address as the engines see it.
    pub const fn raw(self) -> u64 {
        self.0
    }
}

impl fmt::Debug for HostAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "host:{:#x}", self.0)
    }
}

/// An address in device memory, kept as its offset from the start of device space.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct DevAddr(u64);

impl DevAddr {
    /// The device address at `offset`; `None` when the offset does not fit below the prefix.
    pub const fn from_offset(offset: u64) -> Option<DevAddr> {
        if offset < DEVICE_SPACE { Some(DevAddr(offset)) } else { None }
    }
    /// `None` unless `raw` carries the device prefix.
    pub const fn from_raw(raw: u64) -> Option<DevAddr> {
        if is_device_address(raw) { Some(DevAddr(raw & !DEVICE_ADDR_MASK)) } else { None }
    }
    /// Offset in device memory.
    pub const fn offset(self) -> u64 {
        self.0
    }
    /// The address as the engines see it (prefix | offset).
    pub const fn raw(self) -> u64 {
        DEVICE_ADDR_PREFIX | self.0
    }
}

impl fmt::Debug for DevAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "dev:{:#x}", self.0)
    }
}

/// An engine address, classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Addr {
    /// Host memory.
    Host(HostAddr),
    /// Device memory.
    Device(DevAddr),
}

impl Addr {
    /// Classify a raw address by its prefix.
    pub const fn from_raw(raw: u64) -> Addr {
        if is_device_address(raw) {
            Addr::Device(DevAddr(raw & !DEVICE_ADDR_MASK))
        } else {
            Addr::Host(HostAddr(raw))
        }
    }
    /// The raw address.
    pub const fn raw(self) -> u64 {
        match self {
            Addr::Host(h) => h.raw(),
            Addr::Device(d) => d.raw(),
        }
    }
}

/// What a region's memory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemKind {
    /// Host memory (buffers of a host process).
    Host,
    /// Small, fast device memory (on-chip: BRAM/URAM on an FPGA NIC).
    OnChip,
    /// Large device memory (on-board DRAM).
    OnBoard,
}

impl MemKind {
    /// Whether regions of this kind live in device space.
    pub const fn is_device(self) -> bool {
        !matches!(self, MemKind::Host)
    }
    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            MemKind::Host => "host",
            MemKind::OnChip => "on-chip",
            MemKind::OnBoard => "on-board",
        }
    }
}

/// The bytes behind a region.
///
/// A backing that another process (or another engine's thread) may touch at the same time
/// (a shared-memory mapping) overrides the ranged and atomic methods, so that an access only
/// ever borrows the bytes it moves, and so that ring indices and completion colour bits are
/// published with release/acquire ordering.
pub trait Backing: Send + Sync + fmt::Debug {
    /// The region's bytes.
    fn bytes(&self) -> &[u8];
    /// The region's bytes, writable.
    fn bytes_mut(&mut self) -> &mut [u8];
    /// Length in bytes.
    fn len(&self) -> usize {
        self.bytes().len()
    }
    /// Whether the backing is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `[off, off + len)`; the caller has checked the bounds.
    fn range(&self, off: usize, len: usize) -> &[u8] {
        &self.bytes()[off..off + len]
    }
    /// `[off, off + len)`, writable; the caller has checked the bounds.
    fn range_mut(&mut self, off: usize, len: usize) -> &mut [u8] {
        &mut self.bytes_mut()[off..off + len]
    }
    /// Load the little-endian `u32` at `off` (4-byte aligned, in bounds) with acquire ordering.
    fn load_u32_acquire(&self, off: usize) -> u32 {
        let v = u32::from_le_bytes(self.range(off, 4).try_into().expect("4 bytes"));
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        v
    }
    /// Store the little-endian `u32` at `off` (4-byte aligned, in bounds) with release
    /// ordering: every earlier write to the backing is visible before it.
    fn store_u32_release(&mut self, off: usize, v: u32) {
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        self.range_mut(off, 4).copy_from_slice(&v.to_le_bytes());
    }
}

impl Backing for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl Backing for Box<[u8]> {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

/// Handle of a mapped region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionId(pub u32);

/// A typed memory error. No access that returns one has touched memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemError {
    /// No region is mapped at `addr`.
    Unmapped {
        /// The address.
        addr: u64,
    },
    /// `[addr, addr + len)` runs past the end of the region that holds `addr` (or overflows).
    OutOfBounds {
        /// Start of the access.
        addr: u64,
        /// Its length.
        len: u64,
    },
    /// An access that must be aligned (atomics: 8 bytes) is not.
    Misaligned {
        /// The address.
        addr: u64,
        /// The alignment needed.
        align: u64,
    },
    /// A new mapping overlaps a mapped region or leaves its address class.
    Overlap {
        /// Base of the new mapping.
        base: u64,
        /// Its length.
        len: u64,
    },
    /// A zero-length region.
    Empty,
    /// No region with this id.
    UnknownRegion {
        /// The id.
        id: u32,
    },
    /// No device region of this kind has room.
    NoDeviceMemory {
        /// The kind asked for.
        kind: MemKind,
        /// Bytes asked for.
        size: u64,
    },
    /// An allocator error.
    Alloc(AllocError),
    /// Device space is exhausted (no room for another region).
    DeviceSpaceFull,
    /// Host memory that belongs to another client.
    NotOwner {
        /// The address.
        addr: u64,
        /// The client that tried to reach it.
        owner: u32,
    },
}

impl fmt::Display for MemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            MemError::Unmapped { addr } => write!(f, "address {addr:#x} is not mapped"),
            MemError::OutOfBounds { addr, len } => {
                write!(f, "access of {len} bytes at {addr:#x} leaves its region")
            }
            MemError::Misaligned { addr, align } => {
                write!(f, "address {addr:#x} is not {align}-byte aligned")
            }
            MemError::Overlap { base, len } => {
                write!(f, "mapping of {len} bytes at {base:#x} overlaps a region or its class")
            }
            MemError::Empty => write!(f, "zero-length region"),
            MemError::UnknownRegion { id } => write!(f, "no region {id}"),
            MemError::NoDeviceMemory { kind, size } => {
                write!(f, "no {} device region has {size} free bytes", kind.name())
            }
            MemError::Alloc(e) => write!(f, "{e}"),
            MemError::DeviceSpaceFull => write!(f, "device address space is full"),
            MemError::NotOwner { addr, owner } => {
                write!(f, "host address {addr:#x} is not registered by client {owner}")
            }
        }
    }
}

impl std::error::Error for MemError {}

impl From<AllocError> for MemError {
    fn from(e: AllocError) -> Self {
        MemError::Alloc(e)
    }
}

/// A mapped region, as [`AddressSpace::regions`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionInfo {
    /// Handle.
    pub id: RegionId,
    /// First address (raw).
    pub base: u64,
    /// Length in bytes.
    pub len: u64,
    /// Host, on-chip or on-board.
    pub kind: MemKind,
    /// Allocator figures, for device regions.
    pub alloc: Option<AllocStats>,
    /// Who the region belongs to: [`NIC_OWNER`] for device memory and the NIC's own pools, a
    /// host client's id for memory that client registered.
    pub owner: u32,
}

/// Owner tag of regions that belong to the NIC itself (device memory, engine pools).
pub const NIC_OWNER: u32 = 0;

#[derive(Debug)]
struct Region {
    id: RegionId,
    base: u64,
    len: u64,
    kind: MemKind,
    backing: Box<dyn Backing>,
    alloc: Option<Allocator>,
    owner: u32,
}

impl Region {
    fn info(&self) -> RegionInfo {
        RegionInfo {
            id: self.id,
            base: self.base,
            len: self.len,
            kind: self.kind,
            alloc: self.alloc.as_ref().map(Allocator::stats),
            owner: self.owner,
        }
    }

    /// Allocate `size` bytes aligned to `align` from the region's allocator: the raw address,
    /// `None` when the region has no allocator or no room, an error for a request no region
    /// could satisfy (zero size, bad alignment).
    fn carve(&mut self, size: u64, align: u64) -> Result<Option<u64>, MemError> {
        let Some(a) = self.alloc.as_mut() else { return Ok(None) };
        match a.alloc(size, align) {
            Ok(off) => Ok(Some(self.base + off)),
            Err(e @ (AllocError::ZeroSize | AllocError::BadAlign { .. })) => Err(e.into()),
            Err(_) => Ok(None),
        }
    }
}

/// Alignment of device regions in device space (each new region starts on this boundary).
const REGION_ALIGN: u64 = 2 << 20;

/// The engines' address space: mapped host and device regions, ordered by base address.
#[derive(Debug, Default)]
pub struct AddressSpace {
    regions: Vec<Region>,
    next_id: u32,
    next_dev: u64,
    /// Indices of the regions the last two lookups hit, most recent first (an engine
    /// alternates between a host and a device region, so one entry would thrash).
    last: [std::cell::Cell<usize>; 2],
    /// Bumped by every change of the region list, so a [`Span`] resolved before a map or
    /// unmap is never used after it.
    generation: u64,
}

/// A range `[addr, addr + len)` that [`AddressSpace::resolve`] found inside one region (and
/// reachable by the owner it was resolved for): the region's index, the offset in it, the
/// length and the region's kind. Accesses through a span ([`AddressSpace::copy_span`],
/// [`AddressSpace::span_bytes`], ...) skip the region lookup. A span is tied to the map it
/// was resolved in: after any map or unmap it is stale and every access through it fails with
/// [`MemError::Unmapped`] (nothing is read or written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    index: u32,
    offset: usize,
    len: usize,
    generation: u64,
    addr: u64,
    kind: MemKind,
}

impl Span {
    /// The first address.
    pub const fn addr(&self) -> u64 {
        self.addr
    }
    /// Length in bytes.
    pub const fn len(&self) -> usize {
        self.len
    }
    /// Whether the span is empty.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Kind of the memory it lies in.
    pub const fn kind(&self) -> MemKind {
        self.kind
    }
    /// Offset of the span in its region.
    pub const fn offset(&self) -> usize {
        self.offset
    }
}

impl AddressSpace {
    /// An empty address space.
    pub fn new() -> AddressSpace {
        AddressSpace::default()
    }

    fn insert(
        &mut self,
        base: u64,
        kind: MemKind,
        backing: Box<dyn Backing>,
        alloc: bool,
        owner: u32,
    ) -> Result<RegionId, MemError> {
        let len = backing.len() as u64;
        if len == 0 {
            return Err(MemError::Empty);
        }
        let end = base.checked_add(len).ok_or(MemError::Overlap { base, len })?;
        // Both ends in the same address class.
        if is_device_address(base) != kind.is_device()
            || is_device_address(end - 1) != kind.is_device()
        {
            return Err(MemError::Overlap { base, len });
        }
        let at = self.regions.partition_point(|r| r.base < base);
        if at > 0 {
            let p = &self.regions[at - 1];
            if p.base + p.len > base {
                return Err(MemError::Overlap { base, len });
            }
        }
        if let Some(n) = self.regions.get(at)
            && n.base < end
        {
            return Err(MemError::Overlap { base, len });
        }
        let id = RegionId(self.next_id);
        self.next_id += 1;
        let alloc = alloc.then(|| Allocator::new(len));
        self.regions.insert(at, Region { id, base, len, kind, backing, alloc, owner });
        self.forget();
        Ok(id)
    }

    /// Map host memory at `base` (for example a host process's buffer, at its virtual address).
    pub fn map_host(
        &mut self,
        base: HostAddr,
        backing: Box<dyn Backing>,
    ) -> Result<RegionId, MemError> {
        self.insert(base.raw(), MemKind::Host, backing, false, NIC_OWNER)
    }

    /// Map host memory at `base` and manage it with an allocator (a pool the engine carves
    /// queues and buffers from with [`Self::alloc`]).
    pub fn map_host_pool(
        &mut self,
        base: HostAddr,
        backing: Box<dyn Backing>,
    ) -> Result<RegionId, MemError> {
        self.insert(base.raw(), MemKind::Host, backing, true, NIC_OWNER)
    }

    /// Add a device region of `kind` (on-chip or on-board) backed by `backing`, at the next free
    /// place in device space. Its memory is managed by an allocator ([`Self::alloc`]).
    pub fn map_device(
        &mut self,
        kind: MemKind,
        backing: Box<dyn Backing>,
    ) -> Result<(RegionId, DevAddr), MemError> {
        if !kind.is_device() {
            return Err(MemError::Overlap { base: 0, len: backing.len() as u64 });
        }
        let at = DevAddr::from_offset(self.next_dev).ok_or(MemError::DeviceSpaceFull)?;
        let id = self.map_device_at(kind, at, backing, true)?;
        Ok((id, at))
    }

    /// Map host memory at `base` on behalf of host client `owner` (a registered buffer). The
    /// DMA engine only lets a client's queues touch host regions that client owns.
    pub fn map_host_owned(
        &mut self,
        base: HostAddr,
        backing: Box<dyn Backing>,
        owner: u32,
    ) -> Result<RegionId, MemError> {
        self.insert(base.raw(), MemKind::Host, backing, false, owner)
    }

    /// Map a device region of `kind` at a chosen device address (a second view of device
    /// memory another address space already maps there, for an engine on another thread).
    /// With `alloc` the region gets its own allocator; mirrors leave allocation to the
    /// address space that owns the memory.
    pub fn map_device_at(
        &mut self,
        kind: MemKind,
        at: DevAddr,
        backing: Box<dyn Backing>,
        alloc: bool,
    ) -> Result<RegionId, MemError> {
        if !kind.is_device() {
            return Err(MemError::Overlap { base: at.raw(), len: backing.len() as u64 });
        }
        let len = backing.len() as u64;
        let end = at
            .offset()
            .checked_add(len)
            .filter(|&e| e <= DEVICE_SPACE)
            .ok_or(MemError::DeviceSpaceFull)?;
        let id = self.insert(at.raw(), kind, backing, alloc, NIC_OWNER)?;
        self.next_dev = self.next_dev.max(end.div_ceil(REGION_ALIGN).saturating_mul(REGION_ALIGN));
        Ok(id)
    }

    /// Owner of the region holding `addr`.
    pub fn owner_of(&self, addr: u64) -> Option<u32> {
        self.find(addr).map(|i| self.regions[i].owner)
    }

    /// Check that `[addr, addr + len)` lies inside one region and that the region is device
    /// memory or host memory owned by `owner`.
    pub fn check_owned(&self, addr: u64, len: u64, owner: u32) -> Result<(), MemError> {
        self.resolve(addr, len, owner).map(|_| ())
    }

    /// Like [`Self::check_owned`] (the same check, with its errors), and on success the
    /// [`Span`] of `[addr, addr + len)`, through which the range can then be read, written and
    /// copied without another lookup.
    pub fn resolve(&self, addr: u64, len: u64, owner: u32) -> Result<Span, MemError> {
        let (i, off) = self.locate(addr, len)?;
        let r = &self.regions[i];
        if !(r.kind.is_device() || r.owner == owner) {
            return Err(MemError::NotOwner { addr, owner });
        }
        Ok(Span {
            index: i as u32,
            offset: off,
            // `locate` checked `off + len <= r.len`, and the backing's length is a usize.
            len: len as usize,
            generation: self.generation,
            addr,
            kind: r.kind,
        })
    }

    /// The region index and offset of `span`, if it is not stale and `len` fits in it.
    fn span_at(&self, span: &Span, len: usize) -> Result<(usize, usize), MemError> {
        if span.generation != self.generation {
            return Err(MemError::Unmapped { addr: span.addr });
        }
        if len > span.len {
            return Err(MemError::OutOfBounds { addr: span.addr, len: len as u64 });
        }
        Ok((span.index as usize, span.offset))
    }

    /// The first `len` bytes of `span` (at most its length).
    pub fn span_bytes(&self, span: &Span, len: usize) -> Result<&[u8], MemError> {
        let (i, off) = self.span_at(span, len)?;
        Ok(self.regions[i].backing.range(off, len))
    }

    /// The first `len` bytes of `span` (at most its length), writable.
    pub fn span_bytes_mut(&mut self, span: &Span, len: usize) -> Result<&mut [u8], MemError> {
        let (i, off) = self.span_at(span, len)?;
        Ok(self.regions[i].backing.range_mut(off, len))
    }

    /// Copy `data` to the start of `span` (`data` no longer than the span).
    pub fn write_span(&mut self, span: &Span, data: &[u8]) -> Result<(), MemError> {
        let (i, off) = self.span_at(span, data.len())?;
        self.regions[i].backing.range_mut(off, data.len()).copy_from_slice(data);
        Ok(())
    }

    /// Store the `u32` at byte `at` of `span` with release ordering (`at` 4-byte aligned in
    /// the address space, `at + 4` inside the span).
    pub fn store_u32_release_span(
        &mut self,
        span: &Span,
        at: usize,
        v: u32,
    ) -> Result<(), MemError> {
        let addr = span.addr.wrapping_add(at as u64);
        if !addr.is_multiple_of(4) {
            return Err(MemError::Misaligned { addr, align: 4 });
        }
        let end = at.checked_add(4).ok_or(MemError::OutOfBounds { addr, len: 4 })?;
        let (i, off) = self.span_at(span, end)?;
        self.regions[i].backing.store_u32_release(off + at, v);
        Ok(())
    }

    /// Copy the first `len` bytes of `src` to the start of `dst` without looking either up
    /// again (both must be current spans at least `len` long; they may overlap within one
    /// region). Like [`Self::copy`], nothing moves on error.
    pub fn copy_span(&mut self, src: &Span, dst: &Span, len: usize) -> Result<(), MemError> {
        let (si, so) = self.span_at(src, len)?;
        let (di, doff) = self.span_at(dst, len)?;
        self.copy_located(si, so, di, doff, len);
        Ok(())
    }

    /// Load the `u32` at `addr` (4-byte aligned) with acquire ordering.
    pub fn load_u32_acquire(&self, addr: u64) -> Result<u32, MemError> {
        if !addr.is_multiple_of(4) {
            return Err(MemError::Misaligned { addr, align: 4 });
        }
        let (i, off) = self.locate(addr, 4)?;
        Ok(self.regions[i].backing.load_u32_acquire(off))
    }

    /// Store the `u32` at `addr` (4-byte aligned) with release ordering.
    pub fn store_u32_release(&mut self, addr: u64, v: u32) -> Result<(), MemError> {
        if !addr.is_multiple_of(4) {
            return Err(MemError::Misaligned { addr, align: 4 });
        }
        let (i, off) = self.locate(addr, 4)?;
        self.regions[i].backing.store_u32_release(off, v);
        Ok(())
    }

    /// Add a zero-filled device region of `size` bytes (a `Vec` backing).
    pub fn add_device_region(
        &mut self,
        kind: MemKind,
        size: u64,
    ) -> Result<(RegionId, DevAddr), MemError> {
        let size = usize::try_from(size).map_err(|_| MemError::DeviceSpaceFull)?;
        self.map_device(kind, Box::new(vec![0u8; size]))
    }

    /// Unmap a region; returns its backing.
    pub fn unmap(&mut self, id: RegionId) -> Result<Box<dyn Backing>, MemError> {
        let i = self
            .regions
            .iter()
            .position(|r| r.id == id)
            .ok_or(MemError::UnknownRegion { id: id.0 })?;
        self.forget();
        Ok(self.regions.remove(i).backing)
    }

    /// The mapped regions, by base address.
    pub fn regions(&self) -> impl Iterator<Item = RegionInfo> + '_ {
        self.regions.iter().map(Region::info)
    }

    /// The region list changed: drop the lookup cache, outdate every span.
    fn forget(&mut self) {
        self.last[0].set(0);
        self.last[1].set(0);
        self.generation = self.generation.wrapping_add(1);
    }

    fn hit(&self, i: usize, addr: u64) -> bool {
        self.regions.get(i).is_some_and(|r| addr >= r.base && addr - r.base < r.len)
    }

    fn find(&self, addr: u64) -> Option<usize> {
        let l0 = self.last[0].get();
        if self.hit(l0, addr) {
            return Some(l0);
        }
        let l1 = self.last[1].get();
        if self.hit(l1, addr) {
            self.last[1].set(l0);
            self.last[0].set(l1);
            return Some(l1);
        }
        let at = self.regions.partition_point(|r| r.base <= addr);
        if at == 0 {
            return None;
        }
        let r = &self.regions[at - 1];
        if addr - r.base < r.len {
            self.last[1].set(l0);
            self.last[0].set(at - 1);
            Some(at - 1)
        } else {
            None
        }
    }

    /// The region holding `addr`.
    pub fn region_of(&self, addr: u64) -> Option<RegionInfo> {
        self.find(addr).map(|i| self.regions[i].info())
    }

    /// Kind of the memory at `addr`.
    pub fn kind_of(&self, addr: u64) -> Option<MemKind> {
        self.find(addr).map(|i| self.regions[i].kind)
    }

    /// Check that `[addr, addr + len)` lies inside one region; returns (region index, offset).
    fn locate(&self, addr: u64, len: u64) -> Result<(usize, usize), MemError> {
        let i = self.find(addr).ok_or(MemError::Unmapped { addr })?;
        let r = &self.regions[i];
        let off = addr - r.base;
        match off.checked_add(len) {
            Some(end) if end <= r.len => Ok((i, off as usize)),
            _ => Err(MemError::OutOfBounds { addr, len }),
        }
    }

    /// Whether `[addr, addr + len)` lies inside one region.
    pub fn check(&self, addr: u64, len: u64) -> Result<(), MemError> {
        self.locate(addr, len).map(|_| ())
    }

    /// The bytes `[addr, addr + len)`.
    pub fn slice(&self, addr: u64, len: usize) -> Result<&[u8], MemError> {
        let (i, off) = self.locate(addr, len as u64)?;
        Ok(self.regions[i].backing.range(off, len))
    }

    /// The bytes `[addr, addr + len)`, writable.
    pub fn slice_mut(&mut self, addr: u64, len: usize) -> Result<&mut [u8], MemError> {
        let (i, off) = self.locate(addr, len as u64)?;
        Ok(self.regions[i].backing.range_mut(off, len))
    }

    /// Copy `buf.len()` bytes at `addr` into `buf`.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        buf.copy_from_slice(self.slice(addr, buf.len())?);
        Ok(())
    }

    /// Copy `data` to `addr`.
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        self.slice_mut(addr, data.len())?.copy_from_slice(data);
        Ok(())
    }

    /// Set `len` bytes at `addr` to `byte`.
    pub fn fill(&mut self, addr: u64, len: usize, byte: u8) -> Result<(), MemError> {
        self.slice_mut(addr, len)?.fill(byte);
        Ok(())
    }

    /// Copy `len` bytes from `src` to `dst` (both checked before anything moves; the ranges
    /// may be in different regions, and may overlap within one).
    pub fn copy(&mut self, src: u64, dst: u64, len: usize) -> Result<(), MemError> {
        let (si, so) = self.locate(src, len as u64)?;
        let (di, doff) = self.locate(dst, len as u64)?;
        self.copy_located(si, so, di, doff, len);
        Ok(())
    }

    /// Copy `len` bytes from region `si` at `so` to region `di` at `doff` (both checked).
    fn copy_located(&mut self, si: usize, so: usize, di: usize, doff: usize, len: usize) {
        if si == di {
            let lo = so.min(doff);
            let span = so.max(doff) - lo + len;
            self.regions[si]
                .backing
                .range_mut(lo, span)
                .copy_within(so - lo..so - lo + len, doff - lo);
        } else {
            let (a, b) = if si < di {
                let (lo, hi) = self.regions.split_at_mut(di);
                (&lo[si], &mut hi[0])
            } else {
                let (lo, hi) = self.regions.split_at_mut(si);
                (&hi[0], &mut lo[di])
            };
            b.backing.range_mut(doff, len).copy_from_slice(a.backing.range(so, len));
        }
    }

    /// Read a little-endian `u64` (the in-memory form of an RDMA atomic's target).
    pub fn read_u64(&self, addr: u64) -> Result<u64, MemError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Write a little-endian `u64`.
    pub fn write_u64(&mut self, addr: u64, v: u64) -> Result<(), MemError> {
        self.write(addr, &v.to_le_bytes())
    }

    fn aligned8(addr: u64) -> Result<(), MemError> {
        if addr.is_multiple_of(8) { Ok(()) } else { Err(MemError::Misaligned { addr, align: 8 }) }
    }

    /// 8-byte compare-and-swap: if the value at `addr` equals `compare` it becomes `swap`.
    /// Returns the original value. `addr` must be 8-byte aligned.
    pub fn compare_swap(&mut self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemError> {
        Self::aligned8(addr)?;
        let orig = self.read_u64(addr)?;
        if orig == compare {
            self.write_u64(addr, swap)?;
        }
        Ok(orig)
    }

    /// 8-byte fetch-and-add (wrapping). Returns the original value. `addr` must be 8-byte aligned.
    pub fn fetch_add(&mut self, addr: u64, add: u64) -> Result<u64, MemError> {
        Self::aligned8(addr)?;
        let orig = self.read_u64(addr)?;
        self.write_u64(addr, orig.wrapping_add(add))?;
        Ok(orig)
    }

    /// Allocate `size` bytes aligned to `align` in a region of `kind` that has an allocator
    /// (device regions; host pools). Regions are tried in address order. Returns the raw address.
    pub fn alloc(&mut self, kind: MemKind, size: u64, align: u64) -> Result<u64, MemError> {
        for r in self.regions.iter_mut().filter(|r| r.kind == kind) {
            if let Some(addr) = r.carve(size, align)? {
                return Ok(addr);
            }
        }
        Err(MemError::NoDeviceMemory { kind, size })
    }

    /// Give the region holding `addr` an allocator, if it has none yet, so that
    /// [`Self::alloc_in`] can carve from it (a host buffer a client hands over for QP rings).
    pub fn make_pool(&mut self, addr: u64) -> Result<RegionId, MemError> {
        let i = self.find(addr).ok_or(MemError::Unmapped { addr })?;
        let r = &mut self.regions[i];
        if r.alloc.is_none() {
            r.alloc = Some(Allocator::new(r.len));
        }
        Ok(r.id)
    }

    /// Allocate `size` bytes aligned to `align` from the region holding `pool` (which must have
    /// an allocator: a device region, a host pool, or a region given one by
    /// [`Self::make_pool`]). Returns the raw address.
    pub fn alloc_in(&mut self, pool: u64, size: u64, align: u64) -> Result<u64, MemError> {
        let i = self.find(pool).ok_or(MemError::Unmapped { addr: pool })?;
        let r = &mut self.regions[i];
        r.carve(size, align)?.ok_or(MemError::NoDeviceMemory { kind: r.kind, size })
    }

    /// Allocate exactly `size` bytes at `addr` in the region holding it (which must have an
    /// allocator): an allocation another address space made over the same memory, taken over
    /// by a new process.
    pub fn alloc_at(&mut self, addr: u64, size: u64) -> Result<(), MemError> {
        let i = self.find(addr).ok_or(MemError::Unmapped { addr })?;
        let r = &mut self.regions[i];
        let a = r.alloc.as_mut().ok_or(MemError::NoDeviceMemory { kind: r.kind, size })?;
        a.reserve(addr - r.base, size).map_err(MemError::Alloc)
    }

    /// The live allocations of the region at `base`, as (address, bytes), in address order
    /// (what [`Self::alloc_at`] takes again elsewhere).
    pub fn allocations_in(&self, base: u64) -> Result<Vec<(u64, u64)>, MemError> {
        let i = self.find(base).ok_or(MemError::Unmapped { addr: base })?;
        let r = &self.regions[i];
        Ok(r.alloc.iter().flat_map(|a| a.allocations()).map(|(o, l)| (r.base + o, l)).collect())
    }

    /// Free an allocation made by [`Self::alloc`], given its start address.
    pub fn free(&mut self, addr: u64) -> Result<u64, MemError> {
        let i = self.find(addr).ok_or(MemError::Unmapped { addr })?;
        let r = &mut self.regions[i];
        let a =
            r.alloc.as_mut().ok_or(MemError::Alloc(AllocError::NotAllocated { offset: addr }))?;
        a.free(addr - r.base)
            .map_err(|_| MemError::Alloc(AllocError::NotAllocated { offset: addr }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_and_typed_addresses() {
        let d = DevAddr::from_offset(0x1000).unwrap();
        assert!(is_device_address(d.raw()));
        assert_eq!(DevAddr::from_raw(d.raw()), Some(d));
        assert_eq!(HostAddr::new(d.raw()), None);
        assert_eq!(Addr::from_raw(0x7fff_0000), Addr::Host(HostAddr::new(0x7fff_0000).unwrap()));
        assert_eq!(Addr::from_raw(d.raw()), Addr::Device(d));
        assert_eq!(DevAddr::from_offset(DEVICE_SPACE), None);
    }

    #[test]
    fn bounds_checked_access() {
        let mut m = AddressSpace::new();
        let h = HostAddr::new(0x10_000).unwrap();
        m.map_host(h, Box::new(vec![0u8; 4096])).unwrap();
        let (_, d) = m.add_device_region(MemKind::OnChip, 1024).unwrap();
        m.write(h.raw() + 10, b"hello").unwrap();
        let mut b = [0u8; 5];
        m.read(h.raw() + 10, &mut b).unwrap();
        assert_eq!(&b, b"hello");
        assert_eq!(
            m.write(h.raw() + 4094, b"abc"),
            Err(MemError::OutOfBounds { addr: h.raw() + 4094, len: 3 })
        );
        assert_eq!(m.read(h.raw() - 1, &mut b), Err(MemError::Unmapped { addr: h.raw() - 1 }));
        assert_eq!(m.write(u64::MAX - 1, b"abc"), Err(MemError::Unmapped { addr: u64::MAX - 1 }));
        // Copy host -> device and back.
        m.copy(h.raw() + 10, d.raw() + 100, 5).unwrap();
        assert_eq!(m.slice(d.raw() + 100, 5).unwrap(), b"hello");
        assert_eq!(m.kind_of(d.raw()), Some(MemKind::OnChip));
        // Overlapping host mapping is refused.
        assert!(matches!(
            m.map_host(HostAddr::new(0x10_800).unwrap(), Box::new(vec![0u8; 16])),
            Err(MemError::Overlap { .. })
        ));
    }

    #[test]
    fn atomics() {
        let mut m = AddressSpace::new();
        m.map_host(HostAddr::new(0x1000).unwrap(), Box::new(vec![0u8; 64])).unwrap();
        assert_eq!(m.fetch_add(0x1008, 5), Ok(0));
        assert_eq!(m.fetch_add(0x1008, 5), Ok(5));
        assert_eq!(m.compare_swap(0x1008, 10, 99), Ok(10));
        assert_eq!(m.compare_swap(0x1008, 10, 7), Ok(99));
        assert_eq!(m.read_u64(0x1008), Ok(99));
        assert_eq!(m.fetch_add(0x1004, 1), Err(MemError::Misaligned { addr: 0x1004, align: 8 }));
    }

    #[test]
    fn device_alloc() {
        let mut m = AddressSpace::new();
        m.add_device_region(MemKind::OnChip, 4096).unwrap();
        m.add_device_region(MemKind::OnBoard, 1 << 20).unwrap();
        let a = m.alloc(MemKind::OnChip, 1000, 64).unwrap();
        assert!(is_device_address(a));
        assert_eq!(m.kind_of(a), Some(MemKind::OnChip));
        assert!(matches!(m.alloc(MemKind::OnChip, 4000, 1), Err(MemError::NoDeviceMemory { .. })));
        let b = m.alloc(MemKind::OnBoard, 4000, 4096).unwrap();
        assert_eq!(m.kind_of(b), Some(MemKind::OnBoard));
        m.free(a).unwrap();
        assert!(m.free(a).is_err());
        m.alloc(MemKind::OnChip, 4000, 1).unwrap();
    }

    #[test]
    fn alloc_errors_and_device_space() {
        let mut m = AddressSpace::new();
        // No region of the kind: no memory, whatever the request.
        assert_eq!(
            m.alloc(MemKind::OnChip, 0, 3),
            Err(MemError::NoDeviceMemory { kind: MemKind::OnChip, size: 0 })
        );
        let (_, d) = m.add_device_region(MemKind::OnChip, 4096).unwrap();
        // Requests no region could satisfy keep the allocator's error, in both calls.
        for r in [m.alloc(MemKind::OnChip, 0, 8), m.alloc_in(d.raw(), 0, 8)] {
            assert_eq!(r, Err(MemError::Alloc(AllocError::ZeroSize)));
        }
        for r in [m.alloc(MemKind::OnChip, 8, 3), m.alloc_in(d.raw(), 8, 3)] {
            assert_eq!(r, Err(MemError::Alloc(AllocError::BadAlign { align: 3 })));
        }
        let full = MemError::NoDeviceMemory { kind: MemKind::OnChip, size: 8192 };
        assert_eq!(m.alloc(MemKind::OnChip, 8192, 8), Err(full));
        assert_eq!(m.alloc_in(d.raw(), 8192, 8), Err(full));
        // Device regions are placed one after another on REGION_ALIGN boundaries.
        let (_, d2) = m.add_device_region(MemKind::OnBoard, 1).unwrap();
        assert_eq!(d2.offset(), REGION_ALIGN);
        // A region that would run past device space is refused and moves nothing.
        let at = DevAddr::from_offset(DEVICE_SPACE - REGION_ALIGN).unwrap();
        m.map_device_at(MemKind::OnBoard, at, Box::new(vec![0u8; 16]), false).unwrap();
        let r = m.map_device(MemKind::OnBoard, Box::new(vec![0u8; 16]));
        assert_eq!(r.err(), Some(MemError::DeviceSpaceFull));
        assert_eq!(m.regions().count(), 3);
        assert!(matches!(
            m.map_device(MemKind::Host, Box::new(vec![0u8; 16])),
            Err(MemError::Overlap { base: 0, len: 16 })
        ));
    }

    #[test]
    fn owners_and_pools() {
        let mut m = AddressSpace::new();
        m.map_host_owned(HostAddr::new(0x1_0000).unwrap(), Box::new(vec![0u8; 8192]), 7).unwrap();
        m.map_host_owned(HostAddr::new(0x10_0000).unwrap(), Box::new(vec![0u8; 4096]), 8).unwrap();
        let (_, d) = m.add_device_region(MemKind::OnBoard, 4096).unwrap();
        assert_eq!(m.owner_of(0x1_0000), Some(7));
        assert_eq!(m.check_owned(0x1_0000, 8192, 7), Ok(()));
        assert_eq!(
            m.check_owned(0x10_0000, 16, 7),
            Err(MemError::NotOwner { addr: 0x10_0000, owner: 7 })
        );
        // Device memory is reachable by every client.
        assert_eq!(m.check_owned(d.raw(), 4096, 7), Ok(()));
        assert!(matches!(m.check_owned(0x1_0000, 8193, 7), Err(MemError::OutOfBounds { .. })));
        // A registered buffer becomes a pool; allocations stay inside it.
        assert!(m.alloc_in(0x1_0000, 64, 64).is_err());
        m.make_pool(0x1_0100).unwrap();
        let a = m.alloc_in(0x1_0100, 4096, 4096).unwrap();
        assert!((0x1_0000..0x1_0000 + 8192).contains(&a));
        assert!(m.alloc_in(0x1_0000, 8192, 1).is_err());
        m.free(a).unwrap();
        // Release/acquire words.
        m.store_u32_release(0x1_0004, 0xdead_beef).unwrap();
        assert_eq!(m.load_u32_acquire(0x1_0004), Ok(0xdead_beef));
        assert!(matches!(m.load_u32_acquire(0x1_0002), Err(MemError::Misaligned { .. })));
        // A mirror of device memory at the same address.
        let mut mirror = AddressSpace::new();
        mirror.map_device_at(MemKind::OnBoard, d, Box::new(vec![0u8; 4096]), false).unwrap();
        assert_eq!(mirror.kind_of(d.raw()), Some(MemKind::OnBoard));
        assert!(mirror.alloc(MemKind::OnBoard, 64, 1).is_err());
    }

    #[test]
    fn spans_resolve_once_and_go_stale_on_remap() {
        let mut m = AddressSpace::new();
        m.map_host_owned(HostAddr::new(0x1_0000).unwrap(), Box::new(vec![3u8; 4096]), 7).unwrap();
        let other = m
            .map_host_owned(HostAddr::new(0x10_0000).unwrap(), Box::new(vec![0u8; 64]), 8)
            .unwrap();
        let (_, d) = m.add_device_region(MemKind::OnChip, 1024).unwrap();
        // Same errors as check_owned.
        for (addr, len) in [(0x1_0000, 4097), (0x1_0000 - 1, 1), (0x10_0000, 8), (d.raw(), 2000)] {
            assert_eq!(m.resolve(addr, len, 7).err(), m.check_owned(addr, len, 7).err());
        }
        let src = m.resolve(0x1_0010, 32, 7).unwrap();
        assert_eq!(
            (src.addr(), src.len(), src.kind(), src.offset()),
            (0x1_0010, 32, MemKind::Host, 16)
        );
        let dst = m.resolve(d.raw() + 64, 32, 7).unwrap();
        assert_eq!(dst.kind(), MemKind::OnChip);
        m.copy_span(&src, &dst, 32).unwrap();
        assert_eq!(m.slice(d.raw() + 64, 32).unwrap(), &[3u8; 32]);
        assert_eq!(m.slice(d.raw() + 96, 1).unwrap(), &[0]);
        // Longer than the span: refused, nothing moves.
        assert!(matches!(m.copy_span(&src, &dst, 33), Err(MemError::OutOfBounds { .. })));
        assert_eq!(m.slice(d.raw() + 96, 1).unwrap(), &[0]);
        m.write_span(&dst, b"abcd").unwrap();
        assert_eq!(m.span_bytes(&dst, 4).unwrap(), b"abcd");
        m.store_u32_release_span(&dst, 4, 0x0102_0304).unwrap();
        assert_eq!(m.load_u32_acquire(d.raw() + 68), Ok(0x0102_0304));
        assert!(matches!(m.store_u32_release_span(&dst, 2, 1), Err(MemError::Misaligned { .. })));
        assert!(matches!(m.store_u32_release_span(&dst, 32, 1), Err(MemError::OutOfBounds { .. })));
        // Unmapping anything (even another region) outdates every span.
        m.unmap(other).unwrap();
        let before = m.slice(d.raw(), 1024).unwrap().to_vec();
        assert_eq!(m.copy_span(&src, &dst, 32), Err(MemError::Unmapped { addr: 0x1_0010 }));
        assert!(m.write_span(&dst, b"zz").is_err());
        assert!(m.span_bytes(&src, 1).is_err());
        assert_eq!(m.slice(d.raw(), 1024).unwrap(), &before[..]);
        // Fresh spans work again; a map outdates them too.
        let src = m.resolve(0x1_0000, 8, 7).unwrap();
        assert!(m.span_bytes(&src, 8).is_ok());
        m.map_host(HostAddr::new(0x2_0000).unwrap(), Box::new(vec![0u8; 8])).unwrap();
        assert!(m.span_bytes(&src, 8).is_err());
    }

    #[test]
    fn lookups_alternating_over_three_regions_stay_correct() {
        let mut m = AddressSpace::new();
        m.map_host(HostAddr::new(0x1000).unwrap(), Box::new(vec![1u8; 64])).unwrap();
        m.map_host(HostAddr::new(0x2000).unwrap(), Box::new(vec![2u8; 64])).unwrap();
        let (_, d) = m.add_device_region(MemKind::OnBoard, 64).unwrap();
        m.fill(d.raw(), 64, 9).unwrap();
        for i in 0..12u64 {
            let (addr, want) = match i % 3 {
                0 => (0x1000 + i, 1),
                1 => (0x2000 + i, 2),
                _ => (d.raw() + i, 9),
            };
            assert_eq!(m.slice(addr, 1).unwrap(), &[want]);
            // Just past each region is unmapped, whatever the cache holds.
            assert!(m.slice(addr - i + 64, 1).is_err());
        }
    }
}
