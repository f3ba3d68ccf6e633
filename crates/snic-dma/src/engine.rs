//! The queue-based DMA engine (QDMA-like queues, XDMA-like channels), sans-IO.
//!
//! The engine owns an [`AddressSpace`] and moves bytes inside it. It never reads a clock, a
//! socket or a doorbell register: the I/O layer reads doorbells (from shared memory) and hands
//! them in with [`DmaEngine::doorbell`], [`DmaEngine::cmpt_doorbell`] and
//! [`DmaEngine::channel_run`]; [`DmaEngine::poll`] does the work; [`DmaEngine::poll_event`]
//! says which queues and channels have news (so the I/O layer can write back indices and
//! signal eventfds).
//!
//! # Queues
//!
//! A queue ([`QueueConfig`]) has an H2C ring and a C2H ring of [`Descriptor`]s and one
//! completion ring of [`Completion`] entries, all in the engine's address space (normally a
//! buffer the owning host registered). Producer and consumer indices are free-running `u32`
//! counters; slot = counter % ring size (sizes are powers of two). One ring slot holds one
//! descriptor, the head of a scatter-gather chain when it carries [`flags::CHAIN`].
//!
//! - Memory-mapped mode ([`Mode::Mm`]): every ring slot (with its chain) is one transfer, copied
//!   src -> dst. A completion entry is written for a slot whose last descriptor has
//!   [`flags::EOP`] (so a host can ask for one completion per batch) and for every error.
//! - Streaming mode ([`Mode::St`]): H2C slots from SOP to EOP form one packet, which goes to
//!   the queue named by [`QueueConfig::stream_to`] (loopback) or out through
//!   [`DmaEngine::poll_stream`]. C2H slots are buffers; [`DmaEngine::push_stream`] writes a
//!   packet into as many consecutive ones as it needs and writes one completion. A bad buffer
//!   that stands in the way is consumed, together with the good buffers before it that are
//!   too small for the packet, with one error completion (len 0), and the packet goes to the
//!   buffers behind it. A queue that streams to itself leaves room for the H2C completion of
//!   a packet while delivering it; when the delivery needs more entries than are free, the
//!   H2C slot waits (like a full completion ring) and no completion is ever dropped.
//!
//! Checks: every descriptor of a transfer is validated (magic, flags, length, alignment, both
//! ranges mapped, in bounds, owned by the queue's owner, memory kinds that match the direction,
//! chains acyclic and at most [`MAX_CHAIN`] long) before any byte of it moves. A bad
//! descriptor gets an error completion with its [`Status`]; the queue goes on with the next
//! slot. A bad doorbell (backwards, past the ring, or claiming more than the ring holds) gets a
//! queue-level error completion and puts the queue in [`QueueState::Error`] until it is
//! stopped and started again. A full completion ring stalls the queue (backpressure), it never
//! overwrites an entry the host has not consumed.
//!
//! # Channels
//!
//! A channel ([`ChannelConfig`]) is XDMA's: the host writes a descriptor chain in memory and
//! starts the channel with the chain's first address ([`DmaEngine::channel_run`]); the engine
//! walks the chain (until a descriptor without `CHAIN`, or with `STOP`) and reports
//! [`Event::ChannelDone`] with the count of descriptors and bytes, or the first error.

use std::collections::{BTreeMap, VecDeque};

use crate::desc::{
    CMPT_SIZE, Completion, DESC_SIZE, DIR_QUEUE, DescError, Descriptor, Dir, MAX_CHAIN,
    MAX_DESC_LEN, Status, cmpt_word, flags,
};
use crate::mem::{AddressSpace, MemError, Span, is_device_address};

/// Most queues an engine serves (QDMA's 2048).
pub const MAX_QUEUES: u16 = 2048;
/// Channels per direction (XDMA's 4 H2C + 4 C2H).
pub const CHANNELS_PER_DIR: u8 = 4;
/// Largest ring (descriptors or completion entries).
pub const MAX_RING: u32 = 1 << 15;

/// How a queue moves data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Memory to memory.
    Mm,
    /// To and from a packet stream.
    St,
}

/// How the host learns of completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Notify {
    /// The host busy-polls the completion ring.
    Poll,
    /// The engine raises an interrupt ([`Event::Completed::interrupt`]; an eventfd in snic).
    Interrupt,
}

/// Configuration of one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    /// Client that owns the queue; its descriptors may only touch host memory this client
    /// registered (and device memory).
    pub owner: u32,
    /// Memory-mapped or streaming.
    pub mode: Mode,
    /// Descriptors in each of the H2C and C2H rings (power of two, 2 ..= [`MAX_RING`]).
    pub ring_size: u32,
    /// Entries in the completion ring (power of two, 2 ..= [`MAX_RING`]).
    pub cmpt_size: u32,
    /// Address of the H2C ring (`ring_size` * [`crate::desc::DESC_SIZE`] bytes).
    pub h2c_ring: u64,
    /// Address of the C2H ring.
    pub c2h_ring: u64,
    /// Address of the completion ring (`cmpt_size` * [`crate::desc::CMPT_SIZE`] bytes).
    pub cmpt_ring: u64,
    /// Every descriptor address and length must be a multiple of this (power of two, 1 ..= 4096).
    pub align: u32,
    /// Poll or interrupt.
    pub notify: Notify,
    /// Streaming mode: H2C packets are delivered to this queue's C2H ring (loopback); `None`
    /// hands them out through [`DmaEngine::poll_stream`].
    pub stream_to: Option<u16>,
}

/// Life cycle of a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueState {
    /// Added, not started: doorbells are counted and ignored.
    Added,
    /// Serving doorbells.
    Running,
    /// Stopped: outstanding descriptors were flushed; doorbells are ignored.
    Stopped,
    /// A queue-level error (bad doorbell, ring overflow, completion ring unwritable); the
    /// queue must be stopped and started again.
    Error(Status),
}

/// Indices of a queue, free-running counters (the I/O layer writes them back for the host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueIndices {
    /// H2C producer (last doorbell accepted).
    pub h2c_pidx: u32,
    /// H2C consumer (slots the engine has finished).
    pub h2c_cidx: u32,
    /// C2H producer.
    pub c2h_pidx: u32,
    /// C2H consumer.
    pub c2h_cidx: u32,
    /// Completion entries written.
    pub cmpt_pidx: u32,
    /// Completion entries the host has consumed (last completion doorbell).
    pub cmpt_cidx: u32,
}

/// A queue as another engine takes it over (a hitless upgrade): its configuration, state and
/// indices. Everything else of a queue is in the rings, in shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSnapshot {
    /// Configuration.
    pub cfg: QueueConfig,
    /// State.
    pub state: QueueState,
    /// Indices.
    pub idx: QueueIndices,
}

/// Identifies a channel inside one engine (the I/O layer chooses the numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChannelKey(pub u32);

/// Configuration of one XDMA-like channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelConfig {
    /// Owning client.
    pub owner: u32,
    /// Direction.
    pub dir: Dir,
    /// Alignment rule, as for queues.
    pub align: u32,
    /// Poll or interrupt.
    pub notify: Notify,
}

/// What the engine tells the I/O layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Completion entries were written to a queue's completion ring (one event per queue per
    /// [`DmaEngine::poll`] call, however many entries).
    Completed {
        /// Queue.
        qid: u16,
        /// Entries written since the last event for this queue.
        entries: u32,
        /// The queue asked for interrupts.
        interrupt: bool,
    },
    /// A channel finished (or failed) the chain it was started with.
    ChannelDone {
        /// Channel.
        key: ChannelKey,
        /// Descriptors completed.
        descs: u32,
        /// Bytes moved.
        bytes: u64,
        /// [`Status::Ok`] or the first error.
        status: Status,
        /// Address of the descriptor that failed (0 on success).
        fault_desc: u64,
        /// The channel asked for interrupts.
        interrupt: bool,
    },
    /// A queue entered [`QueueState::Error`].
    QueueError {
        /// Queue.
        qid: u16,
        /// Why.
        status: Status,
    },
}

/// Why a control-path request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DmaError {
    /// Queue id >= [`MAX_QUEUES`].
    BadQid(u16),
    /// The queue id is taken.
    QidInUse(u16),
    /// No such queue.
    NoQueue(u16),
    /// No such channel.
    NoChannel(ChannelKey),
    /// The channel key is taken.
    ChannelInUse(ChannelKey),
    /// A channel was started while it still runs a chain.
    ChannelBusy(ChannelKey),
    /// A configuration value is out of range; the text names it.
    BadConfig(&'static str),
    /// A ring is not in memory the owner may use.
    RingMemory(crate::mem::MemError),
    /// The request does not fit the queue's state (for example start while running).
    BadState(QueueState),
}

impl std::fmt::Display for DmaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DmaError::BadQid(q) => write!(f, "queue id {q} is out of range (max {MAX_QUEUES})"),
            DmaError::QidInUse(q) => write!(f, "queue {q} already exists"),
            DmaError::NoQueue(q) => write!(f, "no queue {q}"),
            DmaError::NoChannel(c) => write!(f, "no channel {}", c.0),
            DmaError::ChannelInUse(c) => write!(f, "channel {} already exists", c.0),
            DmaError::ChannelBusy(c) => write!(f, "channel {} is still running", c.0),
            DmaError::BadConfig(what) => write!(f, "bad queue configuration: {what}"),
            DmaError::RingMemory(e) => write!(f, "ring memory: {e}"),
            DmaError::BadState(s) => write!(f, "not allowed in queue state {s:?}"),
        }
    }
}

impl std::error::Error for DmaError {}

/// Why [`DmaEngine::push_stream`] dropped a packet (each is also counted in [`DmaStats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamDrop {
    /// No such queue, or not a running streaming queue.
    NoQueue,
    /// The posted C2H buffers cannot hold the packet (no buffer was written; bad buffers met
    /// on the way were consumed with error completions, see [`DmaEngine::push_stream`]).
    NoBuffer,
    /// The completion ring is full.
    CmptFull,
    /// An empty packet.
    Empty,
}

/// Engine counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DmaStats {
    /// Descriptors completed successfully.
    pub descs: u64,
    /// Bytes moved host to card.
    pub h2c_bytes: u64,
    /// Bytes moved card to host.
    pub c2h_bytes: u64,
    /// Completion entries written (including error completions).
    pub completions: u64,
    /// Error completions, indexed by [`Status`] code.
    pub errors: [u64; 17],
    /// Doorbells accepted.
    pub doorbells: u64,
    /// Doorbells to a queue that is missing, not running or in error (ignored).
    pub doorbells_ignored: u64,
    /// Times a queue waited because its completion ring was full.
    pub cmpt_full_stalls: u64,
    /// Streaming packets delivered to C2H rings.
    pub stream_rx: u64,
    /// Streaming packets sent out of H2C rings.
    pub stream_tx: u64,
    /// Streaming packets dropped, by reason: no queue, no buffer, completion ring full, empty.
    pub stream_drops: [u64; 4],
    /// Channel chains completed (with or without error).
    pub channel_runs: u64,
    /// Failed channel runs, indexed by [`Status`] code (channels write no completions).
    pub channel_errors: [u64; 17],
    /// Outstanding descriptors flushed by [`DmaEngine::stop_queue`] (or packets completed)
    /// without a completion entry because the completion ring was full or unwritable.
    pub flushed_silent: u64,
}

impl DmaStats {
    /// Add `o`'s counters to these (to sum the engines of several worker threads).
    pub fn add(&mut self, o: &DmaStats) {
        let DmaStats {
            descs,
            h2c_bytes,
            c2h_bytes,
            completions,
            errors,
            doorbells,
            doorbells_ignored,
            cmpt_full_stalls,
            stream_rx,
            stream_tx,
            stream_drops,
            channel_runs,
            channel_errors,
            flushed_silent,
        } = o;
        for (a, b) in [
            (&mut self.descs, descs),
            (&mut self.h2c_bytes, h2c_bytes),
            (&mut self.c2h_bytes, c2h_bytes),
            (&mut self.completions, completions),
            (&mut self.doorbells, doorbells),
            (&mut self.doorbells_ignored, doorbells_ignored),
            (&mut self.cmpt_full_stalls, cmpt_full_stalls),
            (&mut self.stream_rx, stream_rx),
            (&mut self.stream_tx, stream_tx),
            (&mut self.channel_runs, channel_runs),
            (&mut self.flushed_silent, flushed_silent),
        ] {
            *a += b;
        }
        let arrays: [(&mut [u64], &[u64]); 3] = [
            (&mut self.errors, errors),
            (&mut self.stream_drops, stream_drops),
            (&mut self.channel_errors, channel_errors),
        ];
        for (a, b) in arrays {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
    }
}

/// Largest streaming packet an H2C queue gathers (bigger ones are dropped with
/// [`Status::BadLength`]).
pub const MAX_STREAM_PKT: usize = 1 << 20;
/// Packets [`DmaEngine::poll_stream`] may hold before H2C streaming queues without
/// `stream_to` wait (backpressure) for the I/O layer to take some.
pub const MAX_STREAM_OUT: usize = 1024;
/// Slots one queue may process in a row before [`DmaEngine::poll`] turns to the next queue.
const QUANTUM: usize = 32;
/// Scratch segments kept between transfers (larger scratch buffers are released after use).
const SCRATCH_KEEP: usize = 4096;

/// One validated piece of a transfer: `len` bytes from `src` to `dst` (for streaming, only the
/// host side of the two is meaningful).
#[derive(Debug, Clone, Copy)]
struct Seg {
    src: u64,
    dst: u64,
    len: u32,
    /// `src` as validated (when the walk checked it): the copy needs no second lookup.
    src_span: Option<Span>,
    /// `dst` as validated.
    dst_span: Option<Span>,
}

impl Seg {
    /// Copy the segment, through its validated spans when it has both.
    fn copy(&self, mem: &mut AddressSpace) -> Result<(), MemError> {
        match (&self.src_span, &self.dst_span) {
            (Some(a), Some(b)) => mem.copy_span(a, b, self.len as usize),
            _ => mem.copy(self.src, self.dst, self.len as usize),
        }
    }
    /// The source bytes.
    fn src_bytes<'m>(&self, mem: &'m AddressSpace) -> Result<&'m [u8], MemError> {
        match &self.src_span {
            Some(a) => mem.span_bytes(a, self.len as usize),
            None => mem.slice(self.src, self.len as usize),
        }
    }
    /// Write `data` (at most `len` bytes) to the destination.
    fn write_dst(&self, mem: &mut AddressSpace, data: &[u8]) -> Result<(), MemError> {
        if data.len() > self.len as usize {
            return Err(MemError::OutOfBounds { addr: self.dst, len: data.len() as u64 });
        }
        match &self.dst_span {
            Some(b) => mem.write_span(b, data),
            None => mem.write(self.dst, data),
        }
    }
}

/// What a chain walk found.
#[derive(Debug, Clone, Copy, Default)]
struct ChainInfo {
    /// Descriptors in the chain.
    descs: u32,
    /// Bytes the chain moves.
    bytes: u64,
    /// Flags of the first descriptor.
    first_flags: u16,
    /// Flags of the last descriptor.
    last_flags: u16,
}

/// A failed chain walk: the status and the address of the descriptor at fault.
#[derive(Debug, Clone, Copy)]
struct ChainFault {
    status: Status,
    desc: u64,
}

/// The rules one chain walk applies.
#[derive(Debug, Clone, Copy)]
struct ChainRules {
    owner: u32,
    align: u32,
    dir: Dir,
    /// Which addresses the transfer uses (streaming ignores the non-host side).
    use_src: bool,
    use_dst: bool,
    /// Channel mode: a descriptor with [`flags::STOP`] ends the chain.
    honor_stop: bool,
    max_chain: u32,
}

fn mem_status(e: MemError) -> Status {
    match e {
        MemError::Unmapped { .. } => Status::Unmapped,
        MemError::NotOwner { .. } => Status::NotOwner,
        _ => Status::OutOfBounds,
    }
}

/// Check one side of a descriptor: mapped, in bounds, owned, and in the memory kind the
/// direction wants (`device` = must be device memory). Returns the validated range, so the
/// copy does not look it up again.
fn check_side(
    mem: &AddressSpace,
    addr: u64,
    len: u32,
    owner: u32,
    device: bool,
) -> Result<Span, Status> {
    let span = mem.resolve(addr, u64::from(len), owner).map_err(mem_status)?;
    if is_device_address(addr) != device {
        return Err(Status::WrongDirection);
    }
    Ok(span)
}

/// Read and decode the descriptor at `addr` (which must be readable and owned): one lookup,
/// one copy of its bytes into a private buffer, which is all that is decoded.
fn read_desc(mem: &AddressSpace, addr: u64, owner: u32) -> Result<Descriptor, Status> {
    let span = mem.resolve(addr, DESC_SIZE as u64, owner).map_err(|_| Status::BadDescAddr)?;
    let mut raw = [0u8; DESC_SIZE];
    raw.copy_from_slice(mem.span_bytes(&span, DESC_SIZE).map_err(|_| Status::BadDescAddr)?);
    Descriptor::decode(&raw).map_err(|e| match e {
        DescError::BadMagic(_) => Status::BadMagic,
        DescError::BadFlags(_) => Status::BadFlags,
    })
}

/// Walk the chain starting at `first`, validating every descriptor, and append its segments
/// to `out`. On error `out` is left as it was. Memory is only read.
fn walk_chain(
    mem: &AddressSpace,
    first: u64,
    rules: &ChainRules,
    out: &mut Vec<Seg>,
) -> Result<ChainInfo, ChainFault> {
    let mark = out.len();
    let r = walk_chain_inner(mem, first, rules, out);
    if r.is_err() {
        out.truncate(mark);
    }
    r
}

fn walk_chain_inner(
    mem: &AddressSpace,
    first: u64,
    rules: &ChainRules,
    out: &mut Vec<Seg>,
) -> Result<ChainInfo, ChainFault> {
    // `add_queue` and `add_channel` only admit powers of two in 1..=4096, so a mask does.
    let mask = u64::from(rules.align.max(1)) - 1;
    let misaligned = |v: u64| v & mask != 0;
    let (src_dev, dst_dev) = match rules.dir {
        Dir::H2c => (false, true),
        Dir::C2h => (true, false),
    };
    let mut info = ChainInfo::default();
    let mut addr = first;
    // Brent's cycle detection: `tortoise` is parked on one address; `power` doubles each time
    // `steps` (hops since it was parked) reaches it.
    let mut tortoise = first;
    let mut power: u64 = 1;
    let mut steps: u64 = 0;
    loop {
        let fault = |status| ChainFault { status, desc: addr };
        if info.descs >= rules.max_chain {
            return Err(fault(Status::ChainTooLong));
        }
        let d = read_desc(mem, addr, rules.owner).map_err(fault)?;
        if d.len == 0 || d.len > MAX_DESC_LEN {
            return Err(fault(Status::BadLength));
        }
        let len = u64::from(d.len);
        if (rules.use_src && misaligned(d.src))
            || (rules.use_dst && misaligned(d.dst))
            || misaligned(len)
        {
            return Err(fault(Status::Misaligned));
        }
        let src_span = if rules.use_src {
            Some(check_side(mem, d.src, d.len, rules.owner, src_dev).map_err(fault)?)
        } else {
            None
        };
        let dst_span = if rules.use_dst {
            Some(check_side(mem, d.dst, d.len, rules.owner, dst_dev).map_err(fault)?)
        } else {
            None
        };
        out.push(Seg { src: d.src, dst: d.dst, len: d.len, src_span, dst_span });
        if info.descs == 0 {
            info.first_flags = d.flags;
        }
        info.descs += 1;
        info.bytes += len;
        info.last_flags = d.flags;
        let more = d.flags & flags::CHAIN != 0 && !(rules.honor_stop && d.flags & flags::STOP != 0);
        if !more {
            return Ok(info);
        }
        addr = d.next;
        steps += 1;
        if addr == tortoise {
            return Err(ChainFault { status: Status::CyclicChain, desc: addr });
        }
        if steps == power {
            tortoise = addr;
            power = power.saturating_mul(2);
            steps = 0;
        }
    }
}

/// An open streaming packet of an H2C queue.
#[derive(Debug, Default)]
struct OpenPacket {
    open: bool,
    buf: Vec<u8>,
    /// Descriptors gathered into `buf` (counted as completed only when the packet is sent).
    descs: u64,
}

impl OpenPacket {
    /// Drop the packet being gathered (the buffer keeps its capacity).
    fn reset(&mut self) {
        self.open = false;
        self.buf.clear();
        self.descs = 0;
    }
}

#[derive(Debug)]
struct Queue {
    cfg: QueueConfig,
    state: QueueState,
    idx: QueueIndices,
    /// Waiting for room in the completion ring.
    stalled: bool,
    /// Streaming H2C waiting for [`DmaEngine::poll_stream`] to drain.
    tx_blocked: bool,
    /// In the engine's work list.
    queued: bool,
    /// Next turn serves the C2H ring first (memory-mapped mode alternates the rings).
    c2h_turn: bool,
    /// Completion entries written since the last [`Event::Completed`].
    entries: u32,
    /// Streaming H2C packet being gathered.
    pkt: OpenPacket,
}

impl Queue {
    fn has_work(&self) -> bool {
        self.state == QueueState::Running
            && !self.stalled
            && !self.tx_blocked
            && (self.idx.h2c_cidx != self.idx.h2c_pidx
                || (self.cfg.mode == Mode::Mm && self.idx.c2h_cidx != self.idx.c2h_pidx))
    }
    fn cmpt_room(&self) -> bool {
        self.cmpt_room_for(1)
    }
    fn cmpt_room_for(&self, n: u32) -> bool {
        let used = self.idx.cmpt_pidx.wrapping_sub(self.idx.cmpt_cidx);
        self.cfg.cmpt_size.checked_sub(n).is_some_and(|free_needed| used <= free_needed)
    }
    fn slot_addr(&self, dir: Dir, counter: u32) -> u64 {
        let base = match dir {
            Dir::H2c => self.cfg.h2c_ring,
            Dir::C2h => self.cfg.c2h_ring,
        };
        base + u64::from(counter & (self.cfg.ring_size - 1)) * DESC_SIZE as u64
    }
}

#[derive(Debug)]
struct Channel {
    cfg: ChannelConfig,
    /// First descriptor of the chain being run.
    run: Option<u64>,
}

/// An entry of the engine's work list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    Queue(u16),
    Channel(ChannelKey),
}

/// What serving one slot did.
enum Slot {
    /// Descriptors processed (at least 1).
    Done(usize),
    /// The completion ring is full.
    Stall,
    /// Streaming output is full.
    Blocked,
    /// The queue went into the error state.
    Failed,
}

/// The DMA engine. See the module documentation.
///
/// Work scheduling: queues with outstanding slots and channels with a chain to run sit in one
/// round-robin work list, so an idle [`DmaEngine::poll`] costs nothing per queue. A queue gets
/// up to 32 slots per turn. A slot (with its whole chain) and a channel chain are always
/// validated and copied in one go inside one `poll` call, however long, so a transfer is
/// never half done between calls; the descriptors count against the budget, which therefore
/// may be exceeded by the last transfer of a call.
pub struct DmaEngine {
    /// The memory the engine moves bytes in (public, as [`crate::mem`]'s users map regions).
    pub mem: AddressSpace,
    stats: DmaStats,
    queues: Vec<Option<Box<Queue>>>,
    channels: BTreeMap<ChannelKey, Channel>,
    work: VecDeque<Work>,
    events: VecDeque<Event>,
    /// Queues whose `entries` are not yet reported.
    touched: Vec<u16>,
    scratch: Vec<Seg>,
    stream_out: VecDeque<(u16, Vec<u8>)>,
    /// Spare packet buffers (so a steady stream does not allocate per packet).
    spare: Vec<Vec<u8>>,
    /// Queues waiting for `stream_out` to drain.
    tx_blocked: Vec<u16>,
    max_chain: u32,
}

impl std::fmt::Debug for DmaEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaEngine")
            .field("mem", &self.mem)
            .field("stats", &self.stats)
            .field("queues", &self.queues.iter().filter(|q| q.is_some()).count())
            .field("channels", &self.channels.len())
            .field("work", &self.work.len())
            .field("events", &self.events.len())
            .field("stream_out", &self.stream_out.len())
            .field("max_chain", &self.max_chain)
            .finish()
    }
}

fn clamp32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

fn pow2_in(v: u32, lo: u32, hi: u32) -> bool {
    v.is_power_of_two() && (lo..=hi).contains(&v)
}

impl DmaEngine {
    /// An engine over `mem` with no queues or channels.
    pub fn new(mem: AddressSpace) -> DmaEngine {
        DmaEngine {
            mem,
            stats: DmaStats::default(),
            queues: (0..MAX_QUEUES).map(|_| None).collect(),
            channels: BTreeMap::new(),
            work: VecDeque::new(),
            events: VecDeque::new(),
            touched: Vec::new(),
            scratch: Vec::new(),
            stream_out: VecDeque::new(),
            spare: Vec::new(),
            tx_blocked: Vec::new(),
            max_chain: MAX_CHAIN,
        }
    }

    /// Counters.
    pub fn stats(&self) -> &DmaStats {
        &self.stats
    }

    /// Longest chain the engine follows (default [`MAX_CHAIN`]; clamped to 1 ..= `MAX_CHAIN`).
    /// A lower limit bounds the work one slot or channel run can cost.
    pub fn set_max_chain(&mut self, n: u32) {
        self.max_chain = n.clamp(1, MAX_CHAIN);
    }

    /// The chain limit in force.
    pub fn max_chain(&self) -> u32 {
        self.max_chain
    }

    fn queue(&self, qid: u16) -> Option<&Queue> {
        self.queues.get(usize::from(qid)).and_then(|q| q.as_deref())
    }

    fn queue_mut(&mut self, qid: u16) -> Option<&mut Queue> {
        self.queues.get_mut(usize::from(qid)).and_then(|q| q.as_deref_mut())
    }

    fn check_ring(&self, owner: u32, addr: u64, len: u64) -> Result<(), DmaError> {
        self.mem.check_owned(addr, len, owner).map_err(DmaError::RingMemory)
    }

    fn check_rings(&self, cfg: &QueueConfig) -> Result<(), DmaError> {
        let ring = u64::from(cfg.ring_size) * DESC_SIZE as u64;
        self.check_ring(cfg.owner, cfg.h2c_ring, ring)?;
        self.check_ring(cfg.owner, cfg.c2h_ring, ring)?;
        self.check_ring(cfg.owner, cfg.cmpt_ring, u64::from(cfg.cmpt_size) * CMPT_SIZE as u64)?;
        if !cfg.cmpt_ring.is_multiple_of(4) {
            return Err(DmaError::BadConfig("completion ring must be 4-byte aligned"));
        }
        Ok(())
    }

    /// Add queue `qid`, in [`QueueState::Added`]. Checks the configuration and that the rings
    /// lie in memory the owner may use.
    pub fn add_queue(&mut self, qid: u16, cfg: QueueConfig) -> Result<(), DmaError> {
        if qid >= MAX_QUEUES {
            return Err(DmaError::BadQid(qid));
        }
        if self.queue(qid).is_some() {
            return Err(DmaError::QidInUse(qid));
        }
        if !pow2_in(cfg.ring_size, 2, MAX_RING) {
            return Err(DmaError::BadConfig("ring_size must be a power of two in 2..=32768"));
        }
        if !pow2_in(cfg.cmpt_size, 2, MAX_RING) {
            return Err(DmaError::BadConfig("cmpt_size must be a power of two in 2..=32768"));
        }
        if !pow2_in(cfg.align, 1, 4096) {
            return Err(DmaError::BadConfig("align must be a power of two in 1..=4096"));
        }
        if let Some(t) = cfg.stream_to {
            if cfg.mode != Mode::St {
                return Err(DmaError::BadConfig("stream_to needs streaming mode"));
            }
            if t >= MAX_QUEUES {
                return Err(DmaError::BadConfig("stream_to is not a valid queue id"));
            }
        }
        self.check_rings(&cfg)?;
        self.queues[usize::from(qid)] = Some(Box::new(Queue {
            cfg,
            state: QueueState::Added,
            idx: QueueIndices::default(),
            stalled: false,
            tx_blocked: false,
            queued: false,
            c2h_turn: false,
            entries: 0,
            pkt: OpenPacket::default(),
        }));
        Ok(())
    }

    /// Start a queue: all indices 0, completion colour 1, completion ring zeroed.
    pub fn start_queue(&mut self, qid: u16) -> Result<(), DmaError> {
        let q = self.queue(qid).ok_or(DmaError::NoQueue(qid))?;
        if !matches!(q.state, QueueState::Added | QueueState::Stopped) {
            return Err(DmaError::BadState(q.state));
        }
        let cfg = q.cfg;
        self.check_rings(&cfg)?;
        let bytes = cfg.cmpt_size as usize * CMPT_SIZE;
        self.mem.fill(cfg.cmpt_ring, bytes, 0).map_err(DmaError::RingMemory)?;
        let q = self.queue_mut(qid).ok_or(DmaError::NoQueue(qid))?;
        q.state = QueueState::Running;
        q.idx = QueueIndices::default();
        q.stalled = false;
        q.tx_blocked = false;
        q.c2h_turn = false;
        q.pkt.reset();
        Ok(())
    }

    /// Stop a queue: outstanding descriptors get [`Status::Flushed`] completions (as many as
    /// the completion ring has room for; the rest are counted in
    /// [`DmaStats::flushed_silent`]). Allowed while running or in error.
    pub fn stop_queue(&mut self, qid: u16) -> Result<(), DmaError> {
        let mut q = self.take_queue(qid).ok_or(DmaError::NoQueue(qid))?;
        if !matches!(q.state, QueueState::Running | QueueState::Error(_)) {
            let s = q.state;
            self.put_queue(qid, q);
            return Err(DmaError::BadState(s));
        }
        for dir in [Dir::H2c, Dir::C2h] {
            loop {
                let (c, p) = match dir {
                    Dir::H2c => (q.idx.h2c_cidx, q.idx.h2c_pidx),
                    Dir::C2h => (q.idx.c2h_cidx, q.idx.c2h_pidx),
                };
                if c == p {
                    break;
                }
                let next = c.wrapping_add(1);
                match dir {
                    Dir::H2c => q.idx.h2c_cidx = next,
                    Dir::C2h => q.idx.c2h_cidx = next,
                }
                let wrote = q.cmpt_room()
                    && q.state != QueueState::Error(Status::BadDescAddr)
                    && self.write_cmpt(qid, &mut q, dir.code(), Status::Flushed, next, 0, 0);
                if !wrote {
                    self.stats.flushed_silent += 1;
                }
            }
        }
        self.recycle(std::mem::take(&mut q.pkt.buf));
        q.pkt.reset();
        q.state = QueueState::Stopped;
        q.stalled = false;
        q.tx_blocked = false;
        self.put_queue(qid, q);
        self.flush_events();
        Ok(())
    }

    /// Delete a queue (stopping it first if it runs); returns its configuration.
    pub fn delete_queue(&mut self, qid: u16) -> Result<QueueConfig, DmaError> {
        let state = self.queue(qid).ok_or(DmaError::NoQueue(qid))?.state;
        if matches!(state, QueueState::Running | QueueState::Error(_)) {
            self.stop_queue(qid)?;
        }
        let q = self.take_queue(qid).ok_or(DmaError::NoQueue(qid))?;
        self.work.retain(|w| *w != Work::Queue(qid));
        self.touched.retain(|t| *t != qid);
        Ok(q.cfg)
    }

    /// A queue's state.
    pub fn queue_state(&self, qid: u16) -> Option<QueueState> {
        self.queue(qid).map(|q| q.state)
    }
    /// A queue's configuration.
    pub fn queue_config(&self, qid: u16) -> Option<&QueueConfig> {
        self.queue(qid).map(|q| &q.cfg)
    }
    /// A queue's indices.
    pub fn queue_indices(&self, qid: u16) -> Option<QueueIndices> {
        self.queue(qid).map(|q| q.idx)
    }
    /// A queue's snapshot, for another engine to carry it on ([`Self::restore_queue`]).
    /// Refused ([`DmaError::BadState`]) while a streaming packet is half gathered or waits
    /// for [`Self::poll_stream`]: that would be lost. Taken between two [`Self::poll`] calls,
    /// no transfer is half done (see [`DmaEngine`]).
    pub fn queue_snapshot(&self, qid: u16) -> Result<QueueSnapshot, DmaError> {
        let q = self.queue(qid).ok_or(DmaError::NoQueue(qid))?;
        if q.pkt.open || q.tx_blocked || self.stream_out.iter().any(|(o, _)| *o == qid) {
            return Err(DmaError::BadState(q.state));
        }
        Ok(QueueSnapshot { cfg: q.cfg, state: q.state, idx: q.idx })
    }

    /// Add queue `qid` as another engine had it ([`Self::queue_snapshot`]): the same checks
    /// as [`Self::add_queue`], then its state and indices; outstanding slots are served by the
    /// next [`Self::poll`] (a full completion ring stalls it again there).
    pub fn restore_queue(&mut self, qid: u16, snap: &QueueSnapshot) -> Result<(), DmaError> {
        if snap.idx.cmpt_pidx.wrapping_sub(snap.idx.cmpt_cidx) > snap.cfg.cmpt_size {
            return Err(DmaError::BadConfig("completion indices beyond the ring"));
        }
        self.add_queue(qid, snap.cfg)?;
        let q = self.queue_mut(qid).ok_or(DmaError::NoQueue(qid))?;
        q.state = snap.state;
        q.idx = snap.idx;
        self.schedule(qid);
        Ok(())
    }

    /// A channel's configuration.
    pub fn channel_config(&self, key: ChannelKey) -> Option<&ChannelConfig> {
        self.channels.get(&key).map(|c| &c.cfg)
    }

    /// Ids of all queues, ascending.
    pub fn qids(&self) -> impl Iterator<Item = u16> + '_ {
        self.queues.iter().enumerate().filter(|(_, q)| q.is_some()).map(|(i, _)| i as u16)
    }

    /// Producer doorbell for a ring of queue `qid`: `pidx` is the new free-running producer
    /// counter. Never fails: a bad doorbell becomes an error completion and a queue error, a
    /// doorbell for a missing or idle queue is counted and ignored.
    pub fn doorbell(&mut self, qid: u16, dir: Dir, pidx: u32) {
        let Some(mut q) = self.take_queue(qid) else {
            self.stats.doorbells_ignored += 1;
            return;
        };
        if q.state != QueueState::Running {
            self.stats.doorbells_ignored += 1;
            self.put_queue(qid, q);
            return;
        }
        let (c, p) = match dir {
            Dir::H2c => (q.idx.h2c_cidx, q.idx.h2c_pidx),
            Dir::C2h => (q.idx.c2h_cidx, q.idx.c2h_pidx),
        };
        let bad = if pidx.wrapping_sub(p) >= 1 << 31 {
            Some(Status::BadDoorbell)
        } else if pidx.wrapping_sub(c) > q.cfg.ring_size {
            Some(Status::RingOverflow)
        } else {
            None
        };
        if let Some(status) = bad {
            self.queue_error(qid, &mut q, status, pidx);
        } else {
            self.stats.doorbells += 1;
            match dir {
                Dir::H2c => q.idx.h2c_pidx = pidx,
                Dir::C2h => q.idx.c2h_pidx = pidx,
            }
        }
        self.put_queue(qid, q);
        self.flush_events();
    }

    /// Completion-ring consumer doorbell: the host has consumed entries up to `cidx`. A
    /// value behind the previous one or past the entries written is a bad doorbell (queue
    /// error); for a missing, added or stopped queue the doorbell is counted and ignored.
    pub fn cmpt_doorbell(&mut self, qid: u16, cidx: u32) {
        let Some(mut q) = self.take_queue(qid) else {
            self.stats.doorbells_ignored += 1;
            return;
        };
        if !matches!(q.state, QueueState::Running | QueueState::Error(_)) {
            self.stats.doorbells_ignored += 1;
            self.put_queue(qid, q);
            return;
        }
        let written = q.idx.cmpt_pidx.wrapping_sub(q.idx.cmpt_cidx);
        if cidx.wrapping_sub(q.idx.cmpt_cidx) > written {
            if q.state == QueueState::Running {
                self.queue_error(qid, &mut q, Status::BadDoorbell, cidx);
            } else {
                self.stats.doorbells_ignored += 1;
            }
        } else {
            self.stats.doorbells += 1;
            q.idx.cmpt_cidx = cidx;
            if q.stalled && q.cmpt_room() {
                q.stalled = false;
            }
        }
        self.put_queue(qid, q);
        self.flush_events();
    }

    /// Do work: process up to `budget` descriptors over all queues and channels (round robin).
    /// Returns the number processed (0 = idle).
    pub fn poll(&mut self, budget: usize) -> usize {
        let mut done = 0;
        while done < budget {
            let Some(w) = self.work.pop_front() else { break };
            match w {
                Work::Queue(qid) => {
                    let Some(mut q) = self.take_queue(qid) else { continue };
                    q.queued = false;
                    if q.has_work() {
                        done += self.serve_queue(qid, &mut q, budget - done);
                    }
                    self.put_queue(qid, q);
                }
                Work::Channel(key) => done += self.serve_channel(key),
            }
        }
        self.flush_events();
        done
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Deliver a packet to streaming queue `qid`'s C2H ring: it fills consecutive posted
    /// buffers from the ring's head and gets one completion. A bad buffer met before the
    /// packet fits is consumed with the good (too small) buffers before it, under one error
    /// completion with len 0 whose index is the new consumer index; the packet is then tried
    /// on the buffers behind it. The drop reasons are in [`StreamDrop`].
    pub fn push_stream(&mut self, qid: u16, pkt: &[u8]) -> Result<(), StreamDrop> {
        let r = self.push_to(qid, pkt);
        self.count_push(r);
        self.flush_events();
        r
    }

    /// Next packet an H2C streaming queue without `stream_to` sent: (queue, bytes appended to
    /// `out`). `out` is cleared first.
    pub fn poll_stream(&mut self, out: &mut Vec<u8>) -> Option<u16> {
        out.clear();
        let (qid, pkt) = self.stream_out.pop_front()?;
        out.extend_from_slice(&pkt);
        self.recycle(pkt);
        if self.stream_out.len() < MAX_STREAM_OUT {
            for qid in std::mem::take(&mut self.tx_blocked) {
                if let Some(q) = self.queue_mut(qid) {
                    q.tx_blocked = false;
                    self.schedule(qid);
                }
            }
        }
        Some(qid)
    }

    /// Add a channel.
    pub fn add_channel(&mut self, key: ChannelKey, cfg: ChannelConfig) -> Result<(), DmaError> {
        if self.channels.contains_key(&key) {
            return Err(DmaError::ChannelInUse(key));
        }
        if !pow2_in(cfg.align, 1, 4096) {
            return Err(DmaError::BadConfig("align must be a power of two in 1..=4096"));
        }
        self.channels.insert(key, Channel { cfg, run: None });
        Ok(())
    }

    /// Remove a channel (a running chain is abandoned).
    pub fn remove_channel(&mut self, key: ChannelKey) -> Result<ChannelConfig, DmaError> {
        let ch = self.channels.remove(&key).ok_or(DmaError::NoChannel(key))?;
        self.work.retain(|w| *w != Work::Channel(key));
        Ok(ch.cfg)
    }

    /// Start a channel on the chain whose first descriptor is at `first_desc`. The chain runs
    /// (validated whole, then copied) in a later [`Self::poll`].
    pub fn channel_run(&mut self, key: ChannelKey, first_desc: u64) -> Result<(), DmaError> {
        let ch = self.channels.get_mut(&key).ok_or(DmaError::NoChannel(key))?;
        if ch.run.is_some() {
            return Err(DmaError::ChannelBusy(key));
        }
        ch.run = Some(first_desc);
        self.work.push_back(Work::Channel(key));
        Ok(())
    }

    /// Whether a channel is running a chain.
    pub fn channel_busy(&self, key: ChannelKey) -> bool {
        self.channels.get(&key).is_some_and(|c| c.run.is_some())
    }

    // ----- internals -----

    fn take_queue(&mut self, qid: u16) -> Option<Box<Queue>> {
        self.queues.get_mut(usize::from(qid)).and_then(Option::take)
    }

    /// Put a queue back (after [`Self::take_queue`]) and schedule it if it has work.
    fn put_queue(&mut self, qid: u16, q: Box<Queue>) {
        self.queues[usize::from(qid)] = Some(q);
        self.schedule(qid);
    }

    /// Schedule a queue that is in place.
    fn schedule(&mut self, qid: u16) {
        if let Some(q) = self.queue_mut(qid)
            && q.has_work()
            && !q.queued
        {
            q.queued = true;
            self.work.push_back(Work::Queue(qid));
        }
    }

    fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.spare.len() < 64 && buf.capacity() <= MAX_STREAM_PKT {
            buf.clear();
            self.spare.push(buf);
        }
    }

    fn trim_scratch(&mut self) {
        self.scratch.clear();
        if self.scratch.capacity() > SCRATCH_KEEP {
            self.scratch.shrink_to(SCRATCH_KEEP);
        }
    }

    fn flush_events(&mut self) {
        for i in 0..self.touched.len() {
            let qid = self.touched[i];
            if let Some(q) = self.queues[usize::from(qid)].as_deref_mut()
                && q.entries > 0
            {
                let entries = std::mem::take(&mut q.entries);
                let interrupt = q.cfg.notify == Notify::Interrupt;
                self.events.push_back(Event::Completed { qid, entries, interrupt });
            }
        }
        self.touched.clear();
    }

    /// Put a queue in the error state, with a queue-level completion if there is room.
    fn queue_error(&mut self, qid: u16, q: &mut Queue, status: Status, index: u32) {
        if q.cmpt_room() {
            // A failed write sets Error(BadDescAddr) itself.
            let _ = self.write_cmpt(qid, q, DIR_QUEUE, status, index, 0, 0);
        }
        if q.state == QueueState::Running {
            q.state = QueueState::Error(status);
            self.events.push_back(Event::QueueError { qid, status });
        }
    }

    /// Write one completion entry (the caller checked there is room). Returns false (and
    /// puts the queue in error) when the completion ring is not writable.
    #[allow(clippy::too_many_arguments, reason = "the fields of one entry")]
    fn write_cmpt(
        &mut self,
        qid: u16,
        q: &mut Queue,
        dir: u8,
        status: Status,
        index: u32,
        len: u32,
        sop_eop: u32,
    ) -> bool {
        let pidx = q.idx.cmpt_pidx;
        let size = q.cfg.cmpt_size;
        let color = if (pidx / size) & 1 == 0 { cmpt_word::COLOR } else { 0 };
        let word = color | sop_eop;
        let c = Completion { len, index, status: status as u8, dir, qid, word };
        let addr = q.cfg.cmpt_ring + u64::from(pidx & (size - 1)) * CMPT_SIZE as u64;
        let bytes = c.encode();
        // One lookup for the entry; the word goes last, with release ordering.
        let ok = match self.mem.resolve(addr, CMPT_SIZE as u64, q.cfg.owner) {
            Ok(span) => {
                self.mem.write_span(&span, &bytes[..12]).is_ok()
                    && self.mem.store_u32_release_span(&span, 12, word).is_ok()
            }
            Err(_) => false,
        };
        if !ok {
            let was_running = q.state == QueueState::Running;
            q.state = QueueState::Error(Status::BadDescAddr);
            if was_running {
                self.events.push_back(Event::QueueError { qid, status: Status::BadDescAddr });
            }
            return false;
        }
        q.idx.cmpt_pidx = pidx.wrapping_add(1);
        self.stats.completions += 1;
        if status != Status::Ok {
            self.stats.errors[status as usize] += 1;
        }
        if q.entries == 0 {
            self.touched.push(qid);
        }
        q.entries += 1;
        true
    }

    fn stall(&mut self, q: &mut Queue) {
        if !q.stalled {
            q.stalled = true;
            self.stats.cmpt_full_stalls += 1;
        }
    }

    /// Serve queue `qid` (taken out of the table) for up to `budget` descriptors.
    fn serve_queue(&mut self, qid: u16, q: &mut Queue, budget: usize) -> usize {
        let mut done = 0;
        let mut slots = 0;
        while done < budget && slots < QUANTUM && q.has_work() {
            let h2c = q.idx.h2c_cidx != q.idx.h2c_pidx;
            let c2h = q.cfg.mode == Mode::Mm && q.idx.c2h_cidx != q.idx.c2h_pidx;
            let dir = if c2h && (q.c2h_turn || !h2c) { Dir::C2h } else { Dir::H2c };
            q.c2h_turn = dir == Dir::H2c;
            let r = match q.cfg.mode {
                Mode::Mm => self.mm_slot(qid, q, dir),
                Mode::St => self.st_h2c_slot(qid, q),
            };
            match r {
                Slot::Done(n) => {
                    done += n;
                    slots += 1;
                }
                Slot::Stall => {
                    self.stall(q);
                    break;
                }
                Slot::Blocked => {
                    q.tx_blocked = true;
                    self.tx_blocked.push(qid);
                    break;
                }
                Slot::Failed => break,
            }
        }
        self.trim_scratch();
        done
    }

    fn rules(&self, q: &Queue, dir: Dir, use_src: bool, use_dst: bool) -> ChainRules {
        ChainRules {
            owner: q.cfg.owner,
            align: q.cfg.align,
            dir,
            use_src,
            use_dst,
            honor_stop: false,
            max_chain: self.max_chain,
        }
    }

    /// One memory-mapped slot: validate the chain, then copy it.
    fn mm_slot(&mut self, qid: u16, q: &mut Queue, dir: Dir) -> Slot {
        let cidx = match dir {
            Dir::H2c => q.idx.h2c_cidx,
            Dir::C2h => q.idx.c2h_cidx,
        };
        let rules = self.rules(q, dir, true, true);
        self.scratch.clear();
        let r = walk_chain(&self.mem, q.slot_addr(dir, cidx), &rules, &mut self.scratch);
        let need_cmpt = match r {
            Ok(info) => info.last_flags & flags::EOP != 0,
            Err(_) => true,
        };
        if need_cmpt && !q.cmpt_room() {
            return Slot::Stall;
        }
        let next = cidx.wrapping_add(1);
        match dir {
            Dir::H2c => q.idx.h2c_cidx = next,
            Dir::C2h => q.idx.c2h_cidx = next,
        }
        let (status, moved, word, descs) = match r {
            Ok(info) => {
                let mut moved: u64 = 0;
                let mut status = Status::Ok;
                for s in &self.scratch {
                    // Validated above; a failure here would mean the map changed under us.
                    if let Err(e) = s.copy(&mut self.mem) {
                        status = mem_status(e);
                        break;
                    }
                    moved += u64::from(s.len);
                }
                match dir {
                    Dir::H2c => self.stats.h2c_bytes += moved,
                    Dir::C2h => self.stats.c2h_bytes += moved,
                }
                if status == Status::Ok {
                    self.stats.descs += u64::from(info.descs);
                }
                let mut word = 0;
                if info.first_flags & flags::SOP != 0 {
                    word |= cmpt_word::SOP;
                }
                if info.last_flags & flags::EOP != 0 {
                    word |= cmpt_word::EOP;
                }
                (status, moved, word, info.descs as usize)
            }
            Err(f) => (f.status, 0, 0, 1),
        };
        if (need_cmpt || status != Status::Ok)
            && q.cmpt_room()
            && !self.write_cmpt(qid, q, dir.code(), status, next, clamp32(moved), word)
        {
            return Slot::Failed;
        }
        Slot::Done(descs)
    }

    /// One streaming H2C slot: part (or all) of a packet.
    fn st_h2c_slot(&mut self, qid: u16, q: &mut Queue) -> Slot {
        let cidx = q.idx.h2c_cidx;
        let next = cidx.wrapping_add(1);
        let rules = self.rules(q, Dir::H2c, true, false);
        self.scratch.clear();
        let r = walk_chain(&self.mem, q.slot_addr(Dir::H2c, cidx), &rules, &mut self.scratch);
        let info = match r {
            Err(f) => {
                if !q.cmpt_room() {
                    return Slot::Stall;
                }
                q.pkt.reset();
                q.idx.h2c_cidx = next;
                if !self.write_cmpt(qid, q, Dir::H2c.code(), f.status, next, 0, 0) {
                    return Slot::Failed;
                }
                return Slot::Done(1);
            }
            Ok(info) => info,
        };
        let sop = info.first_flags & flags::SOP != 0;
        let eop = info.last_flags & flags::EOP != 0;
        if q.pkt.open == sop {
            // No SOP with no packet open, or a new SOP inside an open packet.
            if !q.cmpt_room() {
                return Slot::Stall;
            }
            if q.pkt.open {
                // The open packet is broken: report it ending where it stopped, drop it, and
                // let this slot start a new packet (on the next turn).
                q.pkt.reset();
                if !self.write_cmpt(qid, q, Dir::H2c.code(), Status::BadFraming, cidx, 0, 0) {
                    return Slot::Failed;
                }
                return Slot::Done(0);
            }
            q.idx.h2c_cidx = next;
            if !self.write_cmpt(qid, q, Dir::H2c.code(), Status::BadFraming, next, 0, 0) {
                return Slot::Failed;
            }
            return Slot::Done(info.descs as usize);
        }
        let too_long = q.pkt.buf.len() as u64 + info.bytes > MAX_STREAM_PKT as u64;
        let target = q.cfg.stream_to;
        // A packet looped back to this same queue needs a second entry for its C2H side.
        let room = if eop && target == Some(qid) { 2 } else { 1 };
        if (eop || too_long) && !q.cmpt_room_for(room) {
            return Slot::Stall;
        }
        if too_long {
            q.pkt.reset();
            q.idx.h2c_cidx = next;
            if !self.write_cmpt(qid, q, Dir::H2c.code(), Status::BadLength, next, 0, 0) {
                return Slot::Failed;
            }
            return Slot::Done(info.descs as usize);
        }
        if eop && target.is_none() && self.stream_out.len() >= MAX_STREAM_OUT {
            return Slot::Blocked;
        }
        // Saved so a self-loopback packet whose delivery must wait for completion entries can
        // un-gather this slot and retry it whole.
        let was_open = q.pkt.open;
        let before = q.pkt.buf.len();
        if !q.pkt.open {
            q.pkt.open = true;
            if q.pkt.buf.capacity() == 0 {
                q.pkt.buf = self.spare.pop().unwrap_or_default();
            }
        }
        for s in &self.scratch {
            match s.src_bytes(&self.mem) {
                Ok(b) => q.pkt.buf.extend_from_slice(b),
                Err(_) => break,
            }
        }
        if !eop {
            q.idx.h2c_cidx = next;
            q.pkt.descs += u64::from(info.descs);
            return Slot::Done(info.descs as usize);
        }
        let pkt = std::mem::take(&mut q.pkt.buf);
        let len = pkt.len() as u32;
        match target {
            None => self.stream_out.push_back((qid, pkt)),
            Some(t) if t == qid => {
                // Keep one entry free for this slot's own completion below.
                let r = self.push_into(qid, q, &pkt, 1);
                if r == Err(StreamDrop::CmptFull) {
                    // Delivery needs completion entries the host has not freed yet (bad
                    // buffers at the head may have used some): keep the slot un-consumed and
                    // retry it once the host rings the completion doorbell.
                    q.pkt.buf = pkt;
                    q.pkt.buf.truncate(before);
                    q.pkt.open = was_open;
                    return Slot::Stall;
                }
                self.count_push(r);
                self.recycle(pkt);
            }
            Some(t) => {
                let r = self.push_to(t, &pkt);
                self.count_push(r);
                self.recycle(pkt);
            }
        }
        q.pkt.open = false;
        q.idx.h2c_cidx = next;
        self.stats.descs += std::mem::take(&mut q.pkt.descs) + u64::from(info.descs);
        self.stats.h2c_bytes += u64::from(len);
        self.stats.stream_tx += 1;
        // Room for this entry was checked before the packet moved, and a delivery to this
        // same queue leaves one entry free, so the entry is always written.
        let sop_eop = cmpt_word::SOP | cmpt_word::EOP;
        if !self.write_cmpt(qid, q, Dir::H2c.code(), Status::Ok, next, len, sop_eop) {
            return Slot::Failed;
        }
        Slot::Done(info.descs as usize)
    }

    /// Deliver `pkt` to streaming queue `qid` (taken out of the table for [`Self::push_into`]
    /// and put back); `NoQueue` when there is no such queue.
    fn push_to(&mut self, qid: u16, pkt: &[u8]) -> Result<(), StreamDrop> {
        let mut q = self.take_queue(qid).ok_or(StreamDrop::NoQueue)?;
        let r = self.push_into(qid, &mut q, pkt, 0);
        self.put_queue(qid, q);
        r
    }

    fn count_push(&mut self, r: Result<(), StreamDrop>) {
        match r {
            Ok(()) => self.stats.stream_rx += 1,
            Err(d) => self.stats.stream_drops[d as usize] += 1,
        }
    }

    /// Write `pkt` into the posted C2H buffers of streaming queue `qid` (taken out of the
    /// table), leaving at least `reserve` completion entries free (a queue that streams to
    /// itself keeps one for the H2C side of the packet).
    ///
    /// A packet fills consecutive buffers from the head of the ring, in ring order, like a
    /// NIC's C2H descriptor prefetch. When the buffers from the head up to a bad one cannot
    /// hold the packet, the bad buffer and the good ones before it are consumed together with
    /// ONE error completion (the bad buffer's status, len 0, index = the new consumer index,
    /// so the host gets the good buffers back empty and can post them again), and the packet
    /// is tried again from the next slot. Nothing of the packet is written to the skipped
    /// buffers: a packet is either delivered whole or not at all. Good buffers that do hold
    /// the packet are never given up for a bad one behind them.
    ///
    /// Errors: `NoBuffer` when the good buffers posted (up to the ring's producer index)
    /// cannot hold the packet, nothing consumed beyond the bad-buffer skips described above;
    /// `CmptFull` when an entry (error or packet completion) does not fit next to `reserve`.
    fn push_into(
        &mut self,
        qid: u16,
        q: &mut Queue,
        pkt: &[u8],
        reserve: u32,
    ) -> Result<(), StreamDrop> {
        if q.state != QueueState::Running || q.cfg.mode != Mode::St {
            return Err(StreamDrop::NoQueue);
        }
        if pkt.is_empty() {
            return Err(StreamDrop::Empty);
        }
        let rules = self.rules(q, Dir::C2h, false, true);
        let mark = self.scratch.len();
        let r = self.push_inner(qid, q, pkt, &rules, mark, reserve.saturating_add(1));
        self.scratch.truncate(mark);
        r
    }

    fn push_inner(
        &mut self,
        qid: u16,
        q: &mut Queue,
        pkt: &[u8],
        rules: &ChainRules,
        mark: usize,
        room: u32,
    ) -> Result<(), StreamDrop> {
        let need = pkt.len() as u64;
        // Each pass either delivers, gives up, or consumes at least one (bad) slot, so the
        // loop ends within ring_size passes.
        let slots = loop {
            self.scratch.truncate(mark);
            let mut cap: u64 = 0;
            let mut slots: u32 = 0;
            let mut bad = None;
            while cap < need && q.idx.c2h_cidx.wrapping_add(slots) != q.idx.c2h_pidx {
                let at = q.slot_addr(Dir::C2h, q.idx.c2h_cidx.wrapping_add(slots));
                slots += 1;
                match walk_chain(&self.mem, at, rules, &mut self.scratch) {
                    Ok(info) => cap += info.bytes,
                    Err(f) => {
                        bad = Some(f.status);
                        break;
                    }
                }
            }
            let Some(status) = bad else {
                if cap < need {
                    return Err(StreamDrop::NoBuffer);
                }
                break slots;
            };
            // The buffers up to the bad one cannot hold the packet: give them back with the
            // bad one's error and retry behind it.
            if !q.cmpt_room_for(room) {
                return Err(StreamDrop::CmptFull);
            }
            let next = q.idx.c2h_cidx.wrapping_add(slots);
            q.idx.c2h_cidx = next;
            if !self.write_cmpt(qid, q, Dir::C2h.code(), status, next, 0, 0) {
                return Err(StreamDrop::NoQueue);
            }
        };
        if !q.cmpt_room_for(room) {
            return Err(StreamDrop::CmptFull);
        }
        let mut off = 0usize;
        let mut descs = 0u64;
        for k in mark..self.scratch.len() {
            if off == pkt.len() {
                break;
            }
            let s = self.scratch[k];
            let n = (s.len as usize).min(pkt.len() - off);
            if s.write_dst(&mut self.mem, &pkt[off..off + n]).is_err() {
                break;
            }
            off += n;
            descs += 1;
        }
        let next = q.idx.c2h_cidx.wrapping_add(slots);
        q.idx.c2h_cidx = next;
        self.stats.c2h_bytes += off as u64;
        self.stats.descs += descs;
        let status = if off == pkt.len() { Status::Ok } else { Status::Truncated };
        let sop_eop = cmpt_word::SOP | cmpt_word::EOP;
        if !self.write_cmpt(qid, q, Dir::C2h.code(), status, next, off as u32, sop_eop) {
            return Err(StreamDrop::NoQueue);
        }
        Ok(())
    }

    /// Run a channel's chain: validate it whole, then copy.
    fn serve_channel(&mut self, key: ChannelKey) -> usize {
        let Some(ch) = self.channels.get(&key) else { return 0 };
        let Some(first) = ch.run else { return 0 };
        let cfg = ch.cfg;
        let rules = ChainRules {
            owner: cfg.owner,
            align: cfg.align,
            dir: cfg.dir,
            use_src: true,
            use_dst: true,
            honor_stop: true,
            max_chain: self.max_chain,
        };
        self.scratch.clear();
        let r = walk_chain(&self.mem, first, &rules, &mut self.scratch);
        let (descs, bytes, status, fault_desc, work) = match r {
            Ok(info) => {
                let mut bytes = 0u64;
                let mut descs = 0u32;
                let mut status = Status::Ok;
                for s in &self.scratch {
                    if let Err(e) = s.copy(&mut self.mem) {
                        status = mem_status(e);
                        break;
                    }
                    bytes += u64::from(s.len);
                    descs += 1;
                }
                self.stats.descs += u64::from(descs);
                match cfg.dir {
                    Dir::H2c => self.stats.h2c_bytes += bytes,
                    Dir::C2h => self.stats.c2h_bytes += bytes,
                }
                (descs, bytes, status, 0, info.descs as usize)
            }
            Err(f) => (0, 0, f.status, f.desc, 1),
        };
        if status != Status::Ok {
            self.stats.channel_errors[status as usize] += 1;
        }
        self.trim_scratch();
        self.stats.channel_runs += 1;
        if let Some(ch) = self.channels.get_mut(&key) {
            ch.run = None;
        }
        let interrupt = cfg.notify == Notify::Interrupt;
        self.events.push_back(Event::ChannelDone {
            key,
            descs,
            bytes,
            status,
            fault_desc,
            interrupt,
        });
        work
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Client, QueueLayout, Rig};

    const HOST: u64 = 0x100_0000;
    const OTHER: u64 = 0x1000_0000;
    const BUF: u64 = HOST + 0x10_0000;

    fn rig() -> Rig {
        let clients = [Client::new(1, HOST, 2 << 20), Client::new(2, OTHER, 4096).filled(0xEE)];
        Rig::new(&clients, 1 << 20, QueueLayout::new(1, HOST, Notify::Poll))
    }

    /// Start streaming queue `qid`, rings of 8 slots and `cmpt` entries in block `qid`.
    fn st_queue(r: &mut Rig, qid: u16, cmpt: u32, stream_to: Option<u16>) {
        r.queue(qid, QueueConfig { stream_to, ..r.cfg(u64::from(qid), Mode::St, 8, cmpt) });
    }

    /// Head buffer good but too small, then a bad one: both are given back under one error
    /// completion (index past the bad one, len 0, nothing written to the good one) and the
    /// packet lands whole in the buffers behind.
    #[test]
    fn bad_buffer_behind_a_too_small_head_is_skipped_with_the_head() {
        let mut r = rig();
        st_queue(&mut r, 2, 8, None);
        r.post(2, Dir::C2h, 0, Descriptor::new(0, BUF, 64));
        r.post(2, Dir::C2h, 1, Descriptor::new(0, OTHER, 64));
        r.post(2, Dir::C2h, 2, Descriptor::new(0, BUF + 0x100, 64));
        r.post(2, Dir::C2h, 3, Descriptor::new(0, BUF + 0x200, 64));
        r.e.doorbell(2, Dir::C2h, 4);
        // A packet that fits the head never touches the bad buffer.
        r.e.push_stream(2, &[1; 10]).unwrap();
        assert_eq!((r.cmpt(2, 0).status(), r.cmpt(2, 0).index), (Some(Status::Ok), 1));
        // Slot 1 is now the bad head: consumed alone.
        r.post(2, Dir::C2h, 4, Descriptor::new(0, BUF + 0x300, 16));
        r.post(2, Dir::C2h, 5, Descriptor::new(0, OTHER, 16));
        r.post(2, Dir::C2h, 6, Descriptor::new(0, BUF + 0x400, 64));
        r.e.doorbell(2, Dir::C2h, 7);
        r.e.push_stream(2, &[2; 100]).unwrap();
        let c = r.cmpt(2, 1);
        assert_eq!((c.status(), c.index, c.len), (Some(Status::NotOwner), 2, 0));
        let c = r.cmpt(2, 2);
        assert_eq!((c.status(), c.index, c.len), (Some(Status::Ok), 4, 100));
        assert_eq!(r.e.mem.slice(BUF + 0x100, 64).unwrap(), &[2; 64]);
        assert_eq!(r.e.mem.slice(BUF + 0x200, 36).unwrap(), &[2; 36]);
        // Now 16-byte good slot 4, bad slot 5, good slot 6: a 40-byte packet skips 4 and 5
        // with one entry and goes to 6; slot 4's buffer stays untouched.
        r.e.push_stream(2, &[3; 40]).unwrap();
        let c = r.cmpt(2, 3);
        assert_eq!((c.status(), c.index, c.len), (Some(Status::NotOwner), 6, 0));
        let c = r.cmpt(2, 4);
        assert_eq!((c.status(), c.index, c.len), (Some(Status::Ok), 7, 40));
        assert_eq!(r.e.mem.slice(BUF + 0x300, 16).unwrap(), &[0; 16]);
        assert_eq!(r.e.mem.slice(BUF + 0x400, 40).unwrap(), &[3; 40]);
        assert_eq!(r.e.mem.slice(OTHER, 4096).unwrap(), &[0xEE; 4096][..]);
        assert_eq!(r.e.stats().stream_rx, 3);
        assert_eq!(r.e.stats().errors[Status::NotOwner as usize], 2);
    }

    /// A queue streaming to itself with a 2-entry completion ring and three bad buffers at the
    /// head: the H2C slot waits through several completion doorbells, then the packet is
    /// delivered and its H2C completion written; nothing is silently flushed.
    #[test]
    fn self_loopback_waits_through_many_bad_buffers() {
        let mut r = rig();
        st_queue(&mut r, 1, 2, Some(1));
        for i in 0..3 {
            r.post(1, Dir::C2h, i, Descriptor::new(0, OTHER, 64));
        }
        r.post(1, Dir::C2h, 3, Descriptor::new(0, BUF + 0x1000, 64));
        r.e.doorbell(1, Dir::C2h, 4);
        r.e.mem.write(BUF, &[5; 24]).unwrap();
        r.post(1, Dir::H2c, 0, Descriptor { flags: flags::SOP, ..Descriptor::new(BUF, 0, 8) });
        let eop = Descriptor { flags: flags::EOP, ..Descriptor::new(BUF + 8, 0, 16) };
        r.post(1, Dir::H2c, 1, eop);
        r.e.doorbell(1, Dir::H2c, 2);
        let mut seen = Vec::new();
        let mut cidx = 0u32;
        for _ in 0..10 {
            while r.e.poll(16) > 0 {}
            let pidx = r.e.queue_indices(1).unwrap().cmpt_pidx;
            while cidx != pidx {
                seen.push(r.cmpt(1, cidx));
                cidx += 1;
            }
            r.e.cmpt_doorbell(1, cidx);
        }
        let st: Vec<_> = seen.iter().map(|c| (c.dir, c.status(), c.index, c.len)).collect();
        let bad = Some(Status::NotOwner);
        assert_eq!(
            st,
            vec![
                (1, bad, 1, 0),
                (1, bad, 2, 0),
                (1, bad, 3, 0),
                (1, Some(Status::Ok), 4, 24),
                (0, Some(Status::Ok), 2, 24),
            ]
        );
        assert_eq!(r.e.mem.slice(BUF + 0x1000, 24).unwrap(), &[5; 24]);
        assert_eq!(r.e.stats().flushed_silent, 0);
        // Two H2C descriptors (sent once, despite the retries) and one C2H buffer.
        assert_eq!(r.e.stats().descs, 3);
        assert_eq!(
            (r.e.stats().stream_tx, r.e.stats().stream_rx, r.e.stats().h2c_bytes),
            (1, 1, 24)
        );
        assert!(r.e.stats().cmpt_full_stalls >= 1);
    }

    /// A queue snapshotted with work outstanding carries on in another engine over the same
    /// memory: the remaining slots are served there, completions continue where they were;
    /// a half-gathered streaming packet refuses the snapshot.
    #[test]
    fn a_restored_queue_carries_on_where_it_was() {
        let mut r = rig();
        r.mm(0);
        let data = r.fill(BUF, 3 * 64, 7);
        for i in 0..3u32 {
            let off = u64::from(i) * 64;
            r.post(0, Dir::H2c, i, Descriptor::new(BUF + off, r.dev + off, 64));
        }
        r.e.doorbell(0, Dir::H2c, 3);
        assert_eq!(r.e.poll(1), 1);
        let snap = r.e.queue_snapshot(0).unwrap();
        assert_eq!((snap.idx.h2c_pidx, snap.idx.h2c_cidx, snap.idx.cmpt_pidx), (3, 1, 1));
        let mut other = DmaEngine::new(std::mem::take(&mut r.e.mem));
        other.restore_queue(0, &snap).unwrap();
        assert_eq!(other.queue_state(0), Some(QueueState::Running));
        while other.poll(16) > 0 {}
        r.e.mem = std::mem::take(&mut other.mem);
        let idx: Vec<u32> = (0..3).map(|i| r.cmpt(0, i).index).collect();
        assert_eq!(idx, vec![1, 2, 3]);
        assert_eq!(r.bytes(r.dev, 3 * 64), data);
        assert_eq!(other.stats().descs, 2, "only the outstanding slots ran again");
        // A completion ring the snapshot claims is over-full is refused.
        let bad = QueueSnapshot { idx: QueueIndices { cmpt_pidx: 40, ..snap.idx }, ..snap };
        assert!(DmaEngine::new(AddressSpace::new()).restore_queue(1, &bad).is_err());

        st_queue(&mut r, 2, 8, Some(2));
        r.post(2, Dir::H2c, 0, Descriptor { flags: flags::SOP, ..Descriptor::new(BUF, 0, 8) });
        r.e.doorbell(2, Dir::H2c, 1);
        while r.e.poll(16) > 0 {}
        assert!(matches!(r.e.queue_snapshot(2), Err(DmaError::BadState(_))));
    }

    #[test]
    fn room_check_never_underflows() {
        let mut r = rig();
        st_queue(&mut r, 0, 2, None);
        let q = r.e.queue(0).unwrap();
        assert!(q.cmpt_room_for(2));
        assert!(!q.cmpt_room_for(3));
        assert!(!q.cmpt_room_for(u32::MAX));
    }
}
