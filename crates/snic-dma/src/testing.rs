//! The DMA engine's test rig, written once for this crate's tests and benches and the fuzz
//! target (feature `testing`; always on for this crate's own unit tests).
//!
//! After virtio-queue's `mock` module: plain `Vec` memory in an [`AddressSpace`] stands in for
//! the host, and the helpers do what a host driver does (write descriptors into ring slots and
//! chains, ring doorbells, read completion entries back) plus what a test needs on top (poll
//! until idle, drain events, snapshot memory to check that nothing else changed).
//!
//! - [`Client`]: one client's host memory (owner, address, length, fill byte).
//! - [`QueueLayout`]: where queues' rings go (a block per queue, the three rings `stride`
//!   bytes apart) and what every queue config of a rig shares (owner, notify mode).
//! - [`Rig`]: the engine over the clients' memory and one on-board device region, with the
//!   helpers.
//! - [`Snapshot`] and [`changed`]: every mapped byte at one moment, and the addresses that
//!   differ between two moments.
//!
//! The helpers check nothing the caller does not ask for; they panic, at the caller's line,
//! only on set-up mistakes such as writing outside mapped memory. The unit test at the end of
//! this file shows a whole round trip.

use crate::desc::{CMPT_SIZE, DESC_SIZE, flags};
use crate::mem::{AddressSpace, HostAddr, MemKind};
use crate::{
    ChannelConfig, ChannelKey, Completion, Descriptor, Dir, DmaEngine, Event, Mode, Notify,
    QueueConfig,
};

/// One client's host memory: `len` bytes at `base`, owned by `owner`, every byte `fill`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Client {
    /// The owner the region is mapped for (queues and channels name it in their config).
    pub owner: u32,
    /// First address (a host address: below [`crate::DEVICE_ADDR_PREFIX`]).
    pub base: u64,
    /// Length in bytes.
    pub len: usize,
    /// The byte every address holds at the start.
    pub fill: u8,
}

impl Client {
    /// Zeroed memory of `owner`.
    pub const fn new(owner: u32, base: u64, len: usize) -> Client {
        Client { owner, base, len, fill: 0 }
    }

    /// The same memory with every byte `fill`: a client whose memory must never change is
    /// filled with a byte a test can recognise (0xEE, say).
    pub const fn filled(self, fill: u8) -> Client {
        Client { fill, ..self }
    }
}

/// Where queues' rings go, and what every queue config of a rig shares.
///
/// Queue block `q` starts at `base + q * block`: its H2C ring at the block's start, its C2H
/// ring `stride` bytes in and its completion ring `2 * stride` bytes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLayout {
    /// The queues' owner (the client whose memory holds the rings).
    pub owner: u32,
    /// The queues' notify mode.
    pub notify: Notify,
    /// Start of block 0.
    pub base: u64,
    /// Bytes from one queue's block to the next.
    pub block: u64,
    /// Bytes from one ring of a block to the next.
    pub stride: u64,
}

impl QueueLayout {
    /// 64 KiB blocks from `base`, rings 16 KiB apart (room for 512 descriptors a ring).
    pub const fn new(owner: u32, base: u64, notify: Notify) -> QueueLayout {
        QueueLayout { owner, notify, base, block: 0x1_0000, stride: 0x4000 }
    }

    /// Address of block `q`'s H2C ring (the block's start).
    pub const fn h2c_ring(&self, q: u64) -> u64 {
        self.base + q * self.block
    }

    /// Address of block `q`'s C2H ring.
    pub const fn c2h_ring(&self, q: u64) -> u64 {
        self.h2c_ring(q) + self.stride
    }

    /// Address of block `q`'s completion ring.
    pub const fn cmpt_ring(&self, q: u64) -> u64 {
        self.h2c_ring(q) + 2 * self.stride
    }

    /// A queue with its rings in block `q`: `ring_size` slots in each descriptor ring,
    /// `cmpt_size` completion entries, alignment 1, no stream target.
    pub const fn config(&self, q: u64, mode: Mode, ring_size: u32, cmpt_size: u32) -> QueueConfig {
        QueueConfig {
            owner: self.owner,
            mode,
            ring_size,
            cmpt_size,
            h2c_ring: self.h2c_ring(q),
            c2h_ring: self.c2h_ring(q),
            cmpt_ring: self.cmpt_ring(q),
            align: 1,
            notify: self.notify,
            stream_to: None,
        }
    }
}

/// A DMA engine over one or more clients' host memory and one on-board device region, with the
/// helpers a test drives it with. The fields are public: a test reaches the engine (and its
/// memory, `e.mem`) directly for anything the helpers do not cover.
#[derive(Debug)]
pub struct Rig {
    /// The engine.
    pub e: DmaEngine,
    /// First address of the device region.
    pub dev: u64,
    /// Where [`Rig::cfg`], [`Rig::mm`] and [`Rig::mixed_queues`] put queues' rings.
    pub layout: QueueLayout,
}

impl Rig {
    /// Map each of `clients`' memory (in order) and `device_len` zeroed bytes of on-board
    /// device memory, and build an engine over them; no queue yet.
    #[track_caller]
    pub fn new(clients: &[Client], device_len: u64, layout: QueueLayout) -> Rig {
        let mut m = AddressSpace::new();
        for c in clients {
            let base = HostAddr::new(c.base).expect("a client's base is a host address");
            m.map_host_owned(base, Box::new(vec![c.fill; c.len]), c.owner)
                .expect("client regions fit and do not overlap");
        }
        let (_, dev) =
            m.add_device_region(MemKind::OnBoard, device_len).expect("device region fits");
        Rig { e: DmaEngine::new(m), dev: dev.raw(), layout }
    }

    /// The config of a queue with its rings in block `q` of the rig's layout (see
    /// [`QueueLayout::config`]); change fields with struct update syntax.
    pub const fn cfg(&self, q: u64, mode: Mode, ring_size: u32, cmpt_size: u32) -> QueueConfig {
        self.layout.config(q, mode, ring_size, cmpt_size)
    }

    /// Add queue `qid` with `cfg` and start it.
    #[track_caller]
    pub fn queue(&mut self, qid: u16, cfg: QueueConfig) {
        self.e.add_queue(qid, cfg).unwrap();
        self.e.start_queue(qid).unwrap();
    }

    /// Start queue `qid`: memory-mapped, rings of 16 slots and 16 completion entries, in block
    /// `qid`.
    #[track_caller]
    pub fn mm(&mut self, qid: u16) {
        self.queue(qid, self.cfg(u64::from(qid), Mode::Mm, 16, 16));
    }

    /// Start the four queues of the random-input tests, each in the block of its number: 0
    /// memory-mapped, 1 memory-mapped with alignment 8, 2 streaming to 3, 3 streaming; rings of
    /// 8 slots and 4 completion entries.
    #[track_caller]
    pub fn mixed_queues(&mut self) {
        for q in 0..4u16 {
            let mode = if q < 2 { Mode::Mm } else { Mode::St };
            let c = QueueConfig {
                align: if q == 1 { 8 } else { 1 },
                stream_to: (q == 2).then_some(3),
                ..self.cfg(u64::from(q), mode, 8, 4)
            };
            self.queue(q, c);
        }
    }

    /// Add channel `key` for the layout's owner (alignment 1, polled) moving `dir`; returns
    /// its config.
    #[track_caller]
    pub fn channel(&mut self, key: ChannelKey, dir: Dir) -> ChannelConfig {
        let ch = ChannelConfig { owner: self.layout.owner, dir, align: 1, notify: Notify::Poll };
        self.e.add_channel(key, ch).unwrap();
        ch
    }

    /// Write descriptor `d` at `addr` (a chain element, or anything a test wants there).
    #[track_caller]
    pub fn put(&mut self, addr: u64, d: Descriptor) {
        self.e.mem.write(addr, &d.encode()).unwrap();
    }

    /// Write `descs` one after another from `at` as one chain: each descriptor's `next` is the
    /// address of the one after it (the last's, the address just past the chain) and each but
    /// the last gets [`flags::CHAIN`]; other flags stay as given.
    #[track_caller]
    pub fn put_chain(&mut self, at: u64, descs: impl IntoIterator<Item = Descriptor>) {
        let mut descs = descs.into_iter().peekable();
        let mut addr = at;
        while let Some(mut d) = descs.next() {
            let next = addr + DESC_SIZE as u64;
            d.next = next;
            if descs.peek().is_some() {
                d.flags |= flags::CHAIN;
            }
            self.put(addr, d);
            addr = next;
        }
    }

    /// Address of slot `i` (a free-running counter, taken modulo the ring size) of queue
    /// `qid`'s `dir` ring, from the queue's config.
    #[track_caller]
    pub fn slot(&self, qid: u16, dir: Dir, i: u32) -> u64 {
        let c = self.e.queue_config(qid).unwrap();
        let base = if dir == Dir::H2c { c.h2c_ring } else { c.c2h_ring };
        base + u64::from(i & (c.ring_size - 1)) * DESC_SIZE as u64
    }

    /// Write `d` into slot `i` of queue `qid`'s `dir` ring (no doorbell).
    #[track_caller]
    pub fn post(&mut self, qid: u16, dir: Dir, i: u32, d: Descriptor) {
        let a = self.slot(qid, dir, i);
        self.put(a, d);
    }

    /// Write raw bytes (garbage, say) into slot `i` of queue `qid`'s `dir` ring.
    #[track_caller]
    pub fn post_raw(&mut self, qid: u16, dir: Dir, i: u32, raw: [u8; DESC_SIZE]) {
        let a = self.slot(qid, dir, i);
        self.e.mem.write(a, &raw).unwrap();
    }

    /// Producer doorbell `k` slots past queue `qid`'s current `dir` producer index (past 0
    /// for a queue that does not exist).
    pub fn advance(&mut self, qid: u16, dir: Dir, k: u32) {
        let p = self.e.queue_indices(qid).map_or(0, |i| match dir {
            Dir::H2c => i.h2c_pidx,
            Dir::C2h => i.c2h_pidx,
        });
        self.e.doorbell(qid, dir, p.wrapping_add(k));
    }

    /// Completion entry `i` (a free-running counter, taken modulo the ring size) of queue
    /// `qid`, decoded as it stands in memory (whatever its colour).
    #[track_caller]
    pub fn cmpt(&self, qid: u16, i: u32) -> Completion {
        let c = self.e.queue_config(qid).unwrap();
        let a = c.cmpt_ring + u64::from(i & (c.cmpt_size - 1)) * CMPT_SIZE as u64;
        let mut b = [0u8; CMPT_SIZE];
        self.e.mem.read(a, &mut b).unwrap();
        Completion::decode(&b)
    }

    /// Write `len` bytes of a pattern that differs with `seed` at `addr`; returns them.
    #[track_caller]
    pub fn fill(&mut self, addr: u64, len: usize, seed: u8) -> Vec<u8> {
        let v: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
        self.e.mem.write(addr, &v).unwrap();
        v
    }

    /// The `len` bytes at `addr`.
    #[track_caller]
    pub fn bytes(&self, addr: u64, len: usize) -> Vec<u8> {
        self.e.mem.slice(addr, len).unwrap().to_vec()
    }

    /// Poll (budget 64 a call) until the engine is idle; returns the descriptors processed.
    /// Panics past [`RUN_BOUND`] descriptors: an engine that never goes idle is a failure, not
    /// a hang.
    #[track_caller]
    pub fn run(&mut self) -> usize {
        let mut n = 0;
        loop {
            let k = self.e.poll(64);
            if k == 0 {
                return n;
            }
            n += k;
            assert!(n <= RUN_BOUND, "engine still busy after {n} descriptors: livelock");
        }
    }

    /// Every event the engine has queued, in order.
    pub fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.e.poll_event()).collect()
    }

    /// Every mapped region's bytes, now.
    pub fn snapshot(&self) -> Snapshot {
        let regions = self.e.mem.regions().map(|r| {
            let len = usize::try_from(r.len).expect("a mapped region fits in memory");
            (r.base, self.bytes(r.base, len))
        });
        Snapshot(regions.collect())
    }
}

/// Most descriptors [`Rig::run`] processes before it calls the engine livelocked (far more than
/// any test posts).
pub const RUN_BOUND: usize = 1 << 20;

/// Every mapped region's bytes at one moment, by region base ([`Rig::snapshot`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot(Vec<(u64, Vec<u8>)>);

/// The addresses whose bytes differ between two snapshots of the same memory map, in order.
#[track_caller]
pub fn changed(before: &Snapshot, after: &Snapshot) -> Vec<u64> {
    let mut out = Vec::new();
    assert_eq!(before.0.len(), after.0.len(), "snapshots of different memory maps");
    for ((base, x), (base_after, y)) in before.0.iter().zip(&after.0) {
        assert_eq!(base, base_after, "snapshots of different memory maps");
        assert_eq!(x.len(), y.len(), "region {base:#x} changed size between snapshots");
        for (i, (p, q)) in x.iter().zip(y).enumerate() {
            if p != q {
                out.push(base + i as u64);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;
    use crate::desc::cmpt_word;

    const HOST: u64 = 0x10_0000;
    const OTHER: u64 = 0x20_0000;

    fn rig() -> Rig {
        let clients = [Client::new(1, HOST, 1 << 20), Client::new(2, OTHER, 4096).filled(0xEE)];
        Rig::new(&clients, 1 << 16, QueueLayout::new(1, HOST, Notify::Poll))
    }

    /// Memory as asked for; a chained H2C transfer posted, doorbelled, run and read back;
    /// between snapshots, every byte moved changed and nothing but those and the completion entry.
    #[test]
    fn rig_round_trip() {
        let mut r = rig();
        assert_eq!(r.bytes(OTHER, 4), vec![0xEE; 4]);
        assert_eq!((r.bytes(HOST, 4), r.bytes(r.dev, 4)), (vec![0; 4], vec![0; 4]));
        r.mm(1);
        let c = r.e.queue_config(1).copied().unwrap();
        assert_eq!((c.h2c_ring, c.c2h_ring, c.cmpt_ring), (HOST + 0x1_0000, 0x11_4000, 0x11_8000));
        assert_eq!(r.slot(1, Dir::C2h, 17), 0x11_4000 + 32);

        let buf = HOST + 0x8_0000;
        let data = r.fill(buf, 24, 3);
        assert_eq!(data[..3], [3, 34, 65]);
        let chain = buf + 0x1000;
        let dev = r.dev;
        let piece =
            |i: u64| Descriptor { flags: 0, ..Descriptor::new(buf + i * 8, dev + i * 8, 8) };
        r.put_chain(chain, [piece(1), Descriptor { flags: flags::EOP, ..piece(2) }]);
        let head = Descriptor { flags: flags::SOP | flags::CHAIN, next: chain, ..piece(0) };
        r.post(1, Dir::H2c, 0, head);
        let before = r.snapshot();
        r.advance(1, Dir::H2c, 1);
        assert_eq!(r.run(), 3);

        assert_eq!(r.bytes(r.dev, 24), data);
        let e = r.cmpt(1, 0);
        assert_eq!((e.status(), e.len, e.index, e.qid), (Some(Status::Ok), 24, 1, 1));
        assert_eq!(e.word, cmpt_word::COLOR | cmpt_word::SOP | cmpt_word::EOP);
        assert_eq!(r.events(), vec![Event::Completed { qid: 1, entries: 1, interrupt: false }]);
        let cmpt = r.layout.cmpt_ring(1);
        let want: Vec<u64> = (r.dev..r.dev + 24).chain(cmpt..cmpt + 16).collect();
        let got = changed(&before, &r.snapshot());
        // Completion bytes that happen to be written as 0 do not count as changed.
        assert!(got.iter().all(|a| want.contains(a)), "{got:x?}");
        assert!((r.dev..r.dev + 24).all(|a| got.contains(&a)));
    }
}
