//! Wire format of DMA descriptors and completion entries: what a host writes into a ring in
//! shared memory and what the engine writes back. Little-endian, fixed size.
//!
//! Descriptor (32 bytes; [`DESC_SIZE`]):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | `src`: source address (engine address: host IOVA or device address) |
//! | 8 | 8 | `dst`: destination address |
//! | 16 | 4 | `len`: bytes to move (1 ..= [`MAX_DESC_LEN`]) |
//! | 20 | 2 | `flags`: [`flags::SOP`], [`flags::EOP`], [`flags::CHAIN`], [`flags::STOP`] |
//! | 22 | 2 | `magic`: [`DESC_MAGIC`] (XDMA's descriptors carry one too; catches stale slots) |
//! | 24 | 8 | `next`: address of the next descriptor of a scatter-gather chain (with `CHAIN`) |
//!
//! Completion entry (16 bytes; [`CMPT_SIZE`]):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | `len`: bytes moved (for an error: bytes moved before the fault, 0 when none) |
//! | 4 | 4 | `index`: ring counter after the transfer's last descriptor (the new CIDX) |
//! | 8 | 1 | `status`: [`Status`] (0 = OK) |
//! | 9 | 1 | `dir`: [`Dir`] as 0 = H2C, 1 = C2H, 2 = queue (doorbell/ring errors) |
//! | 10 | 2 | `qid` |
//! | 12 | 4 | `word`: bit 0 colour, bit 1 SOP, bit 2 EOP; written last, with release ordering |

/// Size of one descriptor in bytes.
pub const DESC_SIZE: usize = 32;
/// Size of one completion entry in bytes.
pub const CMPT_SIZE: usize = 16;
/// The magic every valid descriptor carries.
pub const DESC_MAGIC: u16 = 0xAD4B;
/// Largest length one descriptor may carry (256 MiB, as XDMA's 28-bit length field).
pub const MAX_DESC_LEN: u32 = (1 << 28) - 1;
/// Longest scatter-gather chain the engine follows from one ring slot or channel start.
pub const MAX_CHAIN: u32 = 1 << 20;

/// Descriptor flag bits.
pub mod flags {
    /// Start of packet (streaming) / transfer.
    pub const SOP: u16 = 1 << 0;
    /// End of packet (streaming) / transfer: a completion entry is written for it.
    pub const EOP: u16 = 1 << 1;
    /// `next` holds the address of the next descriptor of this chain.
    pub const CHAIN: u16 = 1 << 2;
    /// Channel mode: stop after this descriptor even if `CHAIN` is set.
    pub const STOP: u16 = 1 << 3;
    /// Every defined bit; a descriptor with any other bit set is refused.
    pub const ALL: u16 = SOP | EOP | CHAIN | STOP;
}

/// Completion-word bits.
pub mod cmpt_word {
    /// Colour bit: flips each time the producer wraps the completion ring.
    pub const COLOR: u32 = 1 << 0;
    /// The completed transfer started a packet.
    pub const SOP: u32 = 1 << 1;
    /// The completed transfer ended a packet.
    pub const EOP: u32 = 1 << 2;
}

/// One DMA descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Descriptor {
    /// Source address.
    pub src: u64,
    /// Destination address.
    pub dst: u64,
    /// Length in bytes.
    pub len: u32,
    /// [`flags`] bits.
    pub flags: u16,
    /// Next descriptor of the chain (with [`flags::CHAIN`]).
    pub next: u64,
}

/// Why a descriptor's bytes cannot be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DescError {
    /// The magic field is not [`DESC_MAGIC`] (a slot the host never wrote, or garbage).
    BadMagic(u16),
    /// Flag bits outside [`flags::ALL`].
    BadFlags(u16),
}

impl Descriptor {
    /// A single-descriptor transfer (SOP | EOP) of `len` bytes.
    pub const fn new(src: u64, dst: u64, len: u32) -> Descriptor {
        Descriptor { src, dst, len, flags: flags::SOP | flags::EOP, next: 0 }
    }

    /// The 32 bytes of this descriptor.
    pub fn encode(&self) -> [u8; DESC_SIZE] {
        let mut b = [0u8; DESC_SIZE];
        b[0..8].copy_from_slice(&self.src.to_le_bytes());
        b[8..16].copy_from_slice(&self.dst.to_le_bytes());
        b[16..20].copy_from_slice(&self.len.to_le_bytes());
        b[20..22].copy_from_slice(&self.flags.to_le_bytes());
        b[22..24].copy_from_slice(&DESC_MAGIC.to_le_bytes());
        b[24..32].copy_from_slice(&self.next.to_le_bytes());
        b
    }

    /// Decode 32 bytes; checks the magic and the flag bits (not addresses or lengths: the
    /// engine checks those against memory).
    pub fn decode(b: &[u8; DESC_SIZE]) -> Result<Descriptor, DescError> {
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let magic = u16::from_le_bytes([b[22], b[23]]);
        if magic != DESC_MAGIC {
            return Err(DescError::BadMagic(magic));
        }
        let flags = u16::from_le_bytes([b[20], b[21]]);
        if flags & !flags::ALL != 0 {
            return Err(DescError::BadFlags(flags));
        }
        Ok(Descriptor {
            src: u64_at(0),
            dst: u64_at(8),
            len: u32::from_le_bytes(b[16..20].try_into().expect("4 bytes")),
            flags,
            next: u64_at(24),
        })
    }
}

/// Transfer direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dir {
    /// Host to card: source in host memory, destination in device memory (or the stream).
    H2c,
    /// Card to host: source in device memory (or the stream), destination in host memory.
    C2h,
}

impl Dir {
    /// The wire value in a completion entry.
    pub const fn code(self) -> u8 {
        match self {
            Dir::H2c => 0,
            Dir::C2h => 1,
        }
    }
    /// The direction with wire value `code` ([`Dir::code`]), or `None` for any other value
    /// (including [`DIR_QUEUE`]).
    pub const fn from_code(code: u8) -> Option<Dir> {
        match code {
            0 => Some(Dir::H2c),
            1 => Some(Dir::C2h),
            _ => None,
        }
    }
    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Dir::H2c => "h2c",
            Dir::C2h => "c2h",
        }
    }
}

/// Completion direction code for queue-level errors (bad doorbell, ring overflow).
pub const DIR_QUEUE: u8 = 2;

/// Status of a completion (0 = success). Every error is a reason a host can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Status {
    /// The transfer completed.
    Ok = 0,
    /// A descriptor's magic is wrong (the slot was never written, or was overwritten).
    BadMagic = 1,
    /// A descriptor has undefined flag bits.
    BadFlags = 2,
    /// A descriptor has length 0 (or above [`MAX_DESC_LEN`]).
    BadLength = 3,
    /// An address or length is not a multiple of the queue's alignment.
    Misaligned = 4,
    /// An address is not mapped at all.
    Unmapped = 5,
    /// The range runs past the end of its region.
    OutOfBounds = 6,
    /// Host memory that the queue's owner did not register.
    NotOwner = 7,
    /// Source or destination is in the wrong kind of memory for the direction (H2C must read
    /// host memory and write device memory; C2H the reverse).
    WrongDirection = 8,
    /// A scatter-gather chain revisits a descriptor.
    CyclicChain = 9,
    /// A scatter-gather chain is longer than [`MAX_CHAIN`].
    ChainTooLong = 10,
    /// A descriptor address itself (ring slot or `next`) is unmapped, out of bounds or not
    /// owned.
    BadDescAddr = 11,
    /// A doorbell moved the producer index backwards or past the ring.
    BadDoorbell = 12,
    /// A doorbell claims more outstanding descriptors than the ring holds.
    RingOverflow = 13,
    /// A streaming packet did not fit the C2H buffers posted for it (it was truncated; the
    /// `len` field says how much was written).
    Truncated = 14,
    /// Streaming: a packet arrived with SOP missing or a new SOP before the previous EOP.
    BadFraming = 15,
    /// The queue was stopped or deleted with this descriptor outstanding.
    Flushed = 16,
}

impl Status {
    /// From the wire value; `None` for values not defined.
    pub const fn from_code(c: u8) -> Option<Status> {
        use Status::*;
        Some(match c {
            0 => Ok,
            1 => BadMagic,
            2 => BadFlags,
            3 => BadLength,
            4 => Misaligned,
            5 => Unmapped,
            6 => OutOfBounds,
            7 => NotOwner,
            8 => WrongDirection,
            9 => CyclicChain,
            10 => ChainTooLong,
            11 => BadDescAddr,
            12 => BadDoorbell,
            13 => RingOverflow,
            14 => Truncated,
            15 => BadFraming,
            16 => Flushed,
            _ => return None,
        })
    }
    /// Short reason, for tools and logs.
    pub const fn reason(self) -> &'static str {
        use Status::*;
        match self {
            Ok => "ok",
            BadMagic => "descriptor magic is wrong",
            BadFlags => "descriptor has undefined flag bits",
            BadLength => "descriptor length is zero or too large",
            Misaligned => "address or length not a multiple of the queue alignment",
            Unmapped => "address not mapped",
            OutOfBounds => "range runs past its region",
            NotOwner => "host memory not registered by this client",
            WrongDirection => "source/destination memory kind does not match the direction",
            CyclicChain => "scatter-gather chain is cyclic",
            ChainTooLong => "scatter-gather chain too long",
            BadDescAddr => "descriptor address not readable",
            BadDoorbell => "doorbell moved the producer index backwards or past the ring",
            RingOverflow => "doorbell claims more descriptors than the ring holds",
            Truncated => "packet larger than the posted buffers",
            BadFraming => "streaming SOP/EOP framing broken",
            Flushed => "queue stopped with the descriptor outstanding",
        }
    }
}

/// One completion entry, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Completion {
    /// Bytes moved.
    pub len: u32,
    /// Ring counter after the transfer (new CIDX of the ring it came from).
    pub index: u32,
    /// Raw status code ([`Status::from_code`]).
    pub status: u8,
    /// 0 = H2C, 1 = C2H, 2 = queue-level error ([`DIR_QUEUE`]).
    pub dir: u8,
    /// Queue id.
    pub qid: u16,
    /// [`cmpt_word`] bits (colour, SOP, EOP).
    pub word: u32,
}

impl Completion {
    /// The 16 bytes of the entry.
    pub fn encode(&self) -> [u8; CMPT_SIZE] {
        let mut b = [0u8; CMPT_SIZE];
        b[0..4].copy_from_slice(&self.len.to_le_bytes());
        b[4..8].copy_from_slice(&self.index.to_le_bytes());
        b[8] = self.status;
        b[9] = self.dir;
        b[10..12].copy_from_slice(&self.qid.to_le_bytes());
        b[12..16].copy_from_slice(&self.word.to_le_bytes());
        b
    }
    /// Decode 16 bytes.
    pub fn decode(b: &[u8; CMPT_SIZE]) -> Completion {
        Completion {
            len: u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")),
            index: u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")),
            status: b[8],
            dir: b[9],
            qid: u16::from_le_bytes([b[10], b[11]]),
            word: u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")),
        }
    }
    /// The colour bit.
    pub const fn color(&self) -> bool {
        self.word & cmpt_word::COLOR != 0
    }
    /// The status, decoded.
    pub const fn status(&self) -> Option<Status> {
        Status::from_code(self.status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_codes_round_trip() {
        for d in [Dir::H2c, Dir::C2h] {
            assert_eq!(Dir::from_code(d.code()), Some(d));
        }
        assert_eq!(Dir::from_code(DIR_QUEUE), None);
        assert_eq!(Dir::from_code(u8::MAX), None);
    }
}
