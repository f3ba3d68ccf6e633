//! The device-memory allocator: first fit over a free list ordered by offset, any power-of-two
//! alignment, splitting on allocation and coalescing with both neighbours on free, so
//! fragmentation heals as blocks come back. Offsets are relative to the region it manages.
//!
//! Not a general-purpose heap: O(free blocks) allocation and O(log n) free are right for
//! buffers and queues allocated at setup time, not for per-packet use.

use std::collections::BTreeMap;
use std::fmt;

/// Why an allocation or a free failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocError {
    /// A zero-byte allocation.
    ZeroSize,
    /// The alignment is not a power of two.
    BadAlign {
        /// The alignment asked for.
        align: u64,
    },
    /// No free block holds `size` bytes at that alignment.
    OutOfMemory {
        /// Bytes asked for.
        size: u64,
        /// Largest free block now.
        largest_free: u64,
    },
    /// `free` of an offset that is not the start of a live allocation.
    NotAllocated {
        /// The offset given.
        offset: u64,
    },
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AllocError::ZeroSize => write!(f, "zero-byte allocation"),
            AllocError::BadAlign { align } => write!(f, "alignment {align} is not a power of two"),
            AllocError::OutOfMemory { size, largest_free } => {
                write!(f, "out of memory: {size} bytes asked, largest free block {largest_free}")
            }
            AllocError::NotAllocated { offset } => {
                write!(f, "offset {offset:#x} is not the start of an allocation")
            }
        }
    }
}

impl std::error::Error for AllocError {}

/// Usage figures of an [`Allocator`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AllocStats {
    /// Bytes managed.
    pub size: u64,
    /// Bytes in live allocations (alignment padding that was split off is free, not counted).
    pub used: u64,
    /// Live allocations.
    pub allocations: u64,
    /// Free blocks (1 when nothing is fragmented).
    pub free_blocks: u64,
    /// Largest free block.
    pub largest_free: u64,
}

/// First-fit allocator with coalescing over `[0, size)`.
#[derive(Debug, Clone)]
pub struct Allocator {
    size: u64,
    /// Free blocks: offset -> length. Never two adjacent blocks (they are merged).
    free: BTreeMap<u64, u64>,
    /// Live allocations: offset -> length.
    used: BTreeMap<u64, u64>,
    used_bytes: u64,
}

impl Allocator {
    /// An allocator over `size` bytes, all free.
    pub fn new(size: u64) -> Allocator {
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(0, size);
        }
        Allocator { size, free, used: BTreeMap::new(), used_bytes: 0 }
    }

    /// Allocate `size` bytes at a multiple of `align` (a power of two). Returns the offset.
    pub fn alloc(&mut self, size: u64, align: u64) -> Result<u64, AllocError> {
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        if align == 0 || !align.is_power_of_two() {
            return Err(AllocError::BadAlign { align });
        }
        let mut found = None;
        for (&off, &len) in &self.free {
            let start = match off.checked_add(align - 1) {
                Some(v) => v & !(align - 1),
                None => continue,
            };
            let end = match start.checked_add(size) {
                Some(e) => e,
                None => continue,
            };
            if end <= off + len {
                found = Some((off, len, start, end));
                break;
            }
        }
        let Some((off, len, start, end)) = found else {
            return Err(AllocError::OutOfMemory { size, largest_free: self.largest_free() });
        };
        self.free.remove(&off);
        if start > off {
            self.free.insert(off, start - off);
        }
        if end < off + len {
            self.free.insert(end, off + len - end);
        }
        self.used.insert(start, size);
        self.used_bytes += size;
        Ok(start)
    }

    /// Free the allocation that starts at `offset`; merges it with free neighbours.
    pub fn free(&mut self, offset: u64) -> Result<u64, AllocError> {
        let size = self.used.remove(&offset).ok_or(AllocError::NotAllocated { offset })?;
        self.used_bytes -= size;
        let mut start = offset;
        let mut len = size;
        if let Some((&poff, &plen)) = self.free.range(..offset).next_back()
            && poff + plen == offset
        {
            self.free.remove(&poff);
            start = poff;
            len += plen;
        }
        if let Some(&nlen) = self.free.get(&(offset + size)) {
            self.free.remove(&(offset + size));
            len += nlen;
        }
        self.free.insert(start, len);
        Ok(size)
    }

    /// Length of the live allocation starting at `offset`.
    pub fn allocation(&self, offset: u64) -> Option<u64> {
        self.used.get(&offset).copied()
    }

    /// The live allocation containing `offset`: `(start, len)`.
    pub fn containing(&self, offset: u64) -> Option<(u64, u64)> {
        let (&s, &l) = self.used.range(..=offset).next_back()?;
        (offset < s + l).then_some((s, l))
    }

    /// Bytes managed.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Largest free block.
    pub fn largest_free(&self) -> u64 {
        self.free.values().copied().max().unwrap_or(0)
    }

    /// Usage figures.
    pub fn stats(&self) -> AllocStats {
        AllocStats {
            size: self.size,
            used: self.used_bytes,
            allocations: self.used.len() as u64,
            free_blocks: self.free.len() as u64,
            largest_free: self.largest_free(),
        }
    }

    /// Live allocations, in offset order.
    pub fn allocations(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.used.iter().map(|(&o, &l)| (o, l))
    }

    /// Allocate exactly `[offset, offset + size)` (the allocations of another allocator over
    /// the same memory, taken over whole: a hitless upgrade). Fails with
    /// [`AllocError::OutOfMemory`] when any byte of it is not free.
    pub fn reserve(&mut self, offset: u64, size: u64) -> Result<(), AllocError> {
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        let end = offset.checked_add(size);
        let block = self.free.range(..=offset).next_back().map(|(&o, &l)| (o, l));
        let Some((off, len)) = block.filter(|&(o, l)| end.is_some_and(|e| e <= o + l)) else {
            return Err(AllocError::OutOfMemory { size, largest_free: self.largest_free() });
        };
        let end = offset + size;
        self.free.remove(&off);
        if offset > off {
            self.free.insert(off, offset - off);
        }
        if end < off + len {
            self.free.insert(end, off + len - end);
        }
        self.used.insert(offset, size);
        self.used_bytes += size;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reserve_takes_exactly_the_range_asked() {
        let mut a = Allocator::new(1024);
        a.reserve(100, 50).unwrap();
        a.reserve(0, 10).unwrap();
        assert_eq!(a.allocations().collect::<Vec<_>>(), vec![(0, 10), (100, 50)]);
        assert!(a.reserve(120, 10).is_err(), "overlaps a reserved range");
        assert!(a.reserve(1000, 100).is_err(), "past the end");
        assert_eq!(a.alloc(20, 1).unwrap(), 10, "first fit goes around what was reserved");
        a.free(100).unwrap();
        assert_eq!(a.stats().used, 30);
    }

    #[test]
    fn split_and_coalesce() {
        let mut a = Allocator::new(1024);
        let x = a.alloc(100, 1).unwrap();
        let y = a.alloc(100, 64).unwrap();
        let z = a.alloc(20, 1).unwrap();
        assert_eq!(x, 0);
        assert_eq!(y, 128);
        assert_eq!(z, 100, "first fit reuses the gap left by alignment");
        a.free(y).unwrap();
        a.free(x).unwrap();
        a.free(z).unwrap();
        assert_eq!(a.stats().free_blocks, 1);
        assert_eq!(a.largest_free(), 1024);
        assert_eq!(a.free(x), Err(AllocError::NotAllocated { offset: x }));
    }

    #[test]
    fn errors() {
        let mut a = Allocator::new(64);
        assert_eq!(a.alloc(0, 1), Err(AllocError::ZeroSize));
        assert_eq!(a.alloc(8, 3), Err(AllocError::BadAlign { align: 3 }));
        assert_eq!(a.alloc(65, 1), Err(AllocError::OutOfMemory { size: 65, largest_free: 64 }));
        assert_eq!(
            a.alloc(u64::MAX, 1).unwrap_err(),
            AllocError::OutOfMemory { size: u64::MAX, largest_free: 64 }
        );
    }

    proptest! {
        /// Random alloc/free sequences: allocations never overlap, stay in bounds, keep their
        /// alignment; after freeing everything one free block of the whole size is left.
        #[test]
        fn never_overlap(ops in proptest::collection::vec((any::<bool>(), 1u64..300, 0u32..7), 1..200)) {
            let mut a = Allocator::new(4096);
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (is_alloc, size, align_log) in ops {
                if is_alloc || live.is_empty() {
                    let align = 1u64 << align_log;
                    if let Ok(off) = a.alloc(size, align) {
                        prop_assert_eq!(off % align, 0);
                        prop_assert!(off + size <= 4096);
                        for &(o, l) in &live {
                            prop_assert!(off + size <= o || o + l <= off, "overlap");
                        }
                        live.push((off, size));
                    }
                } else {
                    let i = (size as usize) % live.len();
                    let (o, l) = live.swap_remove(i);
                    prop_assert_eq!(a.free(o), Ok(l));
                }
                let used: u64 = live.iter().map(|x| x.1).sum();
                prop_assert_eq!(a.stats().used, used);
            }
            for (o, _) in live.drain(..) {
                a.free(o).unwrap();
            }
            prop_assert_eq!(a.stats().free_blocks, 1);
            prop_assert_eq!(a.largest_free(), 4096);
        }
    }
}
