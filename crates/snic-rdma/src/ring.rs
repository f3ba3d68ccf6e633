//! A work queue ring in engine memory: the SQ and RQ of a QP, and an SRQ.

/// A work queue ring in engine memory: `depth` slots of `slot` bytes at `base`. `pidx` and
/// `cidx` run freely (u32, wrapping); the live WQEs are `[cidx, pidx)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Ring {
    /// First slot's address (host or device memory).
    pub base: u64,
    /// Slots (a power of two).
    pub depth: u32,
    /// Bytes per slot.
    pub slot: usize,
    /// Producer index: WQEs posted (the doorbell value).
    pub pidx: u32,
    /// Consumer index: WQEs retired.
    pub cidx: u32,
}

impl Ring {
    /// A ring of `depth` slots at `base`.
    pub const fn new(base: u64, depth: u32, slot: usize) -> Ring {
        Ring { base, depth, slot, pidx: 0, cidx: 0 }
    }
    /// Address of the slot of free-running index `idx`.
    pub const fn slot_addr(&self, idx: u32) -> u64 {
        self.base + (idx & (self.depth - 1)) as u64 * self.slot as u64
    }
    /// Live WQEs.
    pub const fn len(&self) -> u32 {
        self.pidx.wrapping_sub(self.cidx)
    }
    /// No live WQE.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Free slots.
    pub const fn room(&self) -> u32 {
        self.depth - self.len()
    }
}
