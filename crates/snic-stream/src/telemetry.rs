//! `telemetry`: per-flow packet and byte counts, inter-arrival and size histograms, in a
//! bounded table the host reads ([`crate::table`] is the layout).
//!
//! Per packet: the flow key (innermost IP addresses, protocol, ports; the 40 key bytes of a
//! table entry) is built straight from the frame at the offsets the parse stage found, looked
//! up in an index of the table (a `hashbrown` table of entry numbers, sized for the capacity at
//! build time: it never grows), and the entry's counters and histogram buckets are bumped. A
//! new flow that finds the table full takes the place of a flow idle for `idle_ms` (when set):
//! a hand looks at up to [`EVICT_SCAN`] entries from where it stopped last, so the cost stays
//! bounded, and the idle flow's entry is reused for the new one (counted in `evicted`).
//! Otherwise the packet is counted in `overflow` and nothing else;
//! the packet always goes on (telemetry never drops). A packet's time is its receive time
//! (`meta.rx_time`, stamped by the port) or, when the port stamped none, the batch's. Frames that are not IP (ARP, or what
//! did not parse as far as IP) are counted in the header's totals only.
//!
//! Publishing writes the header and only the entries touched since the last publish, so the
//! cost per batch is bounded by the batch, not the table.
//!
//! Registers: 0 `enable` (rw, 1 at start), 1 `reset` (write 1 to clear the table; reads 0),
//! 2 `flows` (ro), 3 `overflow` (ro, low 32 bits), 4 `capacity` (ro), 5 `idle_ms` (rw, 0:
//! never evict), 6 `evicted` (ro, low 32 bits).

use crate::kernel::{Access, Emit, KernelError, RegInfo, ResultsRegion, StreamKernel, Verdict};
use crate::table::{self, ENTRY_LEN, HEADER_LEN, Header, IAT_BUCKETS, KEY_LEN, SIZE_BUCKETS};
use hashbrown::HashTable;
use snic_pipeline::PacketBuf;
use snic_time::Instant;
use snic_wire::stack::Layer;

/// Default table capacity (flows per worker).
pub const DEFAULT_CAPACITY: usize = 4096;
/// Largest capacity a stage may ask for (per worker; 192 MiB of table).
pub const MAX_CAPACITY: usize = 1 << 20;
/// Entries the eviction hand looks at for one new flow, at most.
pub const EVICT_SCAN: usize = 8;

/// Register numbers.
pub mod reg {
    /// Counting on (1) or off (0).
    pub const ENABLE: u32 = 0;
    /// Write 1 to clear the table.
    pub const RESET: u32 = 1;
    /// Flows in the table.
    pub const FLOWS: u32 = 2;
    /// Packets of new flows that found the table full (low 32 bits).
    pub const OVERFLOW: u32 = 3;
    /// The table's capacity.
    pub const CAPACITY: u32 = 4;
    /// Idle time (ms) after which a flow may give its entry to a new one; 0: never.
    pub const IDLE_MS: u32 = 5;
    /// Flows evicted (low 32 bits).
    pub const EVICTED: u32 = 6;
}

const REGS: &[RegInfo] = &[
    RegInfo {
        name: "enable",
        access: Access::ReadWrite,
        doc: "1: count packets, 0: pass them uncounted",
    },
    RegInfo {
        name: "reset",
        access: Access::ReadWrite,
        doc: "write 1 to clear the table (reads 0)",
    },
    RegInfo { name: "flows", access: Access::ReadOnly, doc: "flows in the table" },
    RegInfo {
        name: "overflow",
        access: Access::ReadOnly,
        doc: "packets of new flows that found the table full (low 32 bits)",
    },
    RegInfo { name: "capacity", access: Access::ReadOnly, doc: "most flows the table holds" },
    RegInfo {
        name: "idle_ms",
        access: Access::ReadWrite,
        doc: "a flow idle this long gives its entry to a new flow when the table is full (0: never)",
    },
    RegInfo { name: "evicted", access: Access::ReadOnly, doc: "flows evicted idle (low 32 bits)" },
];

#[derive(Debug, Clone)]
struct Entry {
    key: [u8; KEY_LEN],
    packets: u64,
    bytes: u64,
    first_ns: u64,
    last_ns: u64,
    iat: [u32; IAT_BUCKETS],
    size: [u32; SIZE_BUCKETS],
    dirty: bool,
}

/// The telemetry kernel (see the module doc).
#[derive(Debug)]
pub struct Telemetry {
    worker: u32,
    capacity: usize,
    enabled: bool,
    entries: Vec<Entry>,
    index: HashTable<u32>,
    dirty: Vec<u32>,
    packets: u64,
    bytes: u64,
    overflow: u64,
    resets: u64,
    evicted: u64,
    idle_ns: u64,
    /// Where the eviction hand looks next.
    hand: usize,
    seq: u32,
    /// The next publish writes every entry (a new region, a reset, a switch on or off), not
    /// only the dirty ones. Entries past the count a reset left behind need no clearing: the
    /// header's count hides them.
    full_publish: bool,
}

/// A fast hash of the 40 key bytes (multiply-xor over five words; keys are not
/// attacker-chosen beyond what a flow table must bear, and the table is bounded).
#[inline]
fn hash_key(k: &[u8; KEY_LEN]) -> u64 {
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15;
    for c in k.chunks_exact(8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 29;
    }
    h
}

/// The 40 key bytes of `pkt`'s innermost IP flow, from the offsets its stack holds. `None`
/// for frames without an IP header.
pub fn flow_key(pkt: &PacketBuf) -> Option<[u8; KEY_LEN]> {
    let h = pkt.meta.stack.innermost();
    let (l3, at) = h.l3?;
    let f = pkt.data();
    let at = usize::from(at);
    let mut k = [0u8; KEY_LEN];
    match l3 {
        Layer::Ipv4 => {
            k[0] = 4;
            k[1] = *f.get(at + 9)?;
            k[8..12].copy_from_slice(f.get(at + 12..at + 16)?);
            k[24..28].copy_from_slice(f.get(at + 16..at + 20)?);
        }
        Layer::Ipv6 => {
            k[0] = 6;
            k[1] = h.ip_proto.unwrap_or(0);
            k[8..24].copy_from_slice(f.get(at + 8..at + 24)?);
            k[24..40].copy_from_slice(f.get(at + 24..at + 40)?);
        }
        _ => return None,
    }
    if let Some((Layer::Udp | Layer::Tcp, l4)) = h.l4 {
        let l4 = usize::from(l4);
        let p = f.get(l4..l4 + 4)?;
        k[2..4].copy_from_slice(&u16::from_be_bytes([p[0], p[1]]).to_le_bytes());
        k[4..6].copy_from_slice(&u16::from_be_bytes([p[2], p[3]]).to_le_bytes());
    }
    Some(k)
}

impl Telemetry {
    /// A table of `capacity` flows for worker `worker`.
    pub fn new(capacity: usize, worker: u32) -> Result<Telemetry, KernelError> {
        if !(1..=MAX_CAPACITY).contains(&capacity) {
            return Err(KernelError::BadArg {
                key: "capacity".into(),
                why: format!("must be 1..={MAX_CAPACITY}"),
            });
        }
        Ok(Telemetry {
            worker,
            capacity,
            enabled: true,
            entries: Vec::with_capacity(capacity),
            index: HashTable::with_capacity(capacity),
            dirty: Vec::with_capacity(capacity),
            packets: 0,
            bytes: 0,
            overflow: 0,
            resets: 0,
            evicted: 0,
            idle_ns: 0,
            hand: 0,
            seq: 0,
            full_publish: true,
        })
    }

    /// Build from stage arguments: `capacity=N`, `idle_ms=N`.
    pub fn from_args(args: &[(String, String)], worker: u32) -> Result<Telemetry, KernelError> {
        let mut capacity = DEFAULT_CAPACITY;
        let mut idle_ms = 0;
        for (k, v) in args {
            let num = || {
                v.parse::<u32>().map_err(|_| KernelError::BadArg {
                    key: k.clone(),
                    why: format!("{v:?} is not a number"),
                })
            };
            match k.as_str() {
                "capacity" => capacity = num()? as usize,
                "idle_ms" => idle_ms = num()?,
                _ => {
                    return Err(KernelError::BadArg {
                        key: k.clone(),
                        why: "telemetry takes capacity=N, idle_ms=N".into(),
                    });
                }
            }
        }
        let mut t = Telemetry::new(capacity, worker)?;
        t.idle_ns = u64::from(idle_ms) * 1_000_000;
        Ok(t)
    }

    /// Flows in the table.
    pub fn flows(&self) -> usize {
        self.entries.len()
    }

    /// The table as a reader would decode it (for tests and tools).
    pub fn table(&self) -> table::Table {
        let mut bytes = vec![0u8; table::table_len(self.entries.len())];
        bytes[..HEADER_LEN].copy_from_slice(&self.header().encode());
        for (i, e) in self.entries.iter().enumerate() {
            let at = HEADER_LEN + i * ENTRY_LEN;
            encode_entry(e, &mut bytes[at..at + ENTRY_LEN]);
        }
        // The header claims `entries` of a capacity larger than these bytes: decode what is
        // here (the entries), which is all of it.
        match table::Table::decode(&bytes) {
            Ok(t) => t,
            Err(_) => table::Table { header: self.header(), flows: Vec::new() },
        }
    }

    fn header(&self) -> Header {
        Header {
            seq: self.seq,
            capacity: self.capacity as u32,
            entries: self.entries.len() as u32,
            worker: self.worker,
            enabled: self.enabled,
            packets: self.packets,
            bytes: self.bytes,
            overflow: self.overflow,
            resets: self.resets,
            evicted: self.evicted,
            idle_ns: self.idle_ns,
        }
    }

    fn reset(&mut self) {
        self.entries.clear();
        self.index.clear();
        self.dirty.clear();
        self.packets = 0;
        self.bytes = 0;
        self.overflow = 0;
        self.evicted = 0;
        self.hand = 0;
        self.resets += 1;
        self.full_publish = true;
    }

    /// Count one packet of `len` bytes with key `key` at `now_ns`.
    #[inline]
    fn count(&mut self, key: &[u8; KEY_LEN], len: usize, now_ns: u64) {
        let hash = hash_key(key);
        let entries = &self.entries;
        let at = match self.index.find(hash, |&i| entries[i as usize].key == *key) {
            Some(&i) => i as usize,
            None if self.entries.len() >= self.capacity => {
                let Some(i) = self.evict(now_ns) else {
                    self.overflow += 1;
                    return;
                };
                let old = hash_key(&self.entries[i].key);
                if let Ok(slot) = self.index.find_entry(old, |&j| j as usize == i) {
                    slot.remove();
                }
                let e = &mut self.entries[i];
                e.key = *key;
                (e.packets, e.bytes, e.first_ns, e.last_ns) = (0, 0, now_ns, now_ns);
                e.iat = [0; IAT_BUCKETS];
                e.size = [0; SIZE_BUCKETS];
                let entries = &self.entries;
                self.index.insert_unique(hash, i as u32, |&j| hash_key(&entries[j as usize].key));
                i
            }
            None => {
                let i = self.entries.len();
                self.entries.push(Entry {
                    key: *key,
                    packets: 0,
                    bytes: 0,
                    first_ns: now_ns,
                    last_ns: now_ns,
                    iat: [0; IAT_BUCKETS],
                    size: [0; SIZE_BUCKETS],
                    dirty: false,
                });
                let entries = &self.entries;
                self.index.insert_unique(hash, i as u32, |&j| hash_key(&entries[j as usize].key));
                i
            }
        };
        let e = &mut self.entries[at];
        if e.packets > 0 {
            let gap = now_ns.saturating_sub(e.last_ns);
            let b = &mut e.iat[table::iat_bucket(gap)];
            *b = b.saturating_add(1);
        }
        let b = &mut e.size[table::size_bucket(len)];
        *b = b.saturating_add(1);
        e.packets += 1;
        e.bytes += len as u64;
        e.last_ns = e.last_ns.max(now_ns);
        if !e.dirty {
            e.dirty = true;
            self.dirty.push(at as u32);
        }
    }
}

impl Telemetry {
    /// An entry idle for `idle_ns` at `now_ns`, among the next [`EVICT_SCAN`] from the hand.
    fn evict(&mut self, now_ns: u64) -> Option<usize> {
        if self.idle_ns == 0 || self.entries.is_empty() {
            return None;
        }
        let n = self.entries.len();
        for _ in 0..EVICT_SCAN.min(n) {
            let i = self.hand % n;
            self.hand = (i + 1) % n;
            if now_ns.saturating_sub(self.entries[i].last_ns) >= self.idle_ns {
                self.evicted += 1;
                return Some(i);
            }
        }
        None
    }
}

fn encode_entry(e: &Entry, out: &mut [u8]) {
    let mut b = [0u8; ENTRY_LEN];
    b[..KEY_LEN].copy_from_slice(&e.key);
    table::encode_counters(&mut b, e.packets, e.bytes, e.first_ns, e.last_ns, &e.iat, &e.size);
    out.copy_from_slice(&b);
}

impl StreamKernel for Telemetry {
    fn name(&self) -> &'static str {
        "telemetry"
    }

    #[inline]
    fn process(&mut self, now: Instant, pkt: &mut PacketBuf, _emit: &mut Emit<'_>) -> Verdict {
        if !self.enabled {
            return Verdict::Pass;
        }
        let len = pkt.len();
        self.packets += 1;
        self.bytes += len as u64;
        // Receive time when the port stamped one (so the gaps are the wire's, not the
        // worker's), else the batch's.
        let t = if pkt.meta.rx_time > Instant::ZERO { pkt.meta.rx_time } else { now };
        if let Some(key) = flow_key(pkt) {
            self.count(&key, len, t.as_nanos());
        }
        Verdict::Pass
    }

    fn registers(&self) -> &'static [RegInfo] {
        REGS
    }

    fn read_reg(&self, idx: u32) -> Option<u32> {
        Some(match idx {
            reg::ENABLE => u32::from(self.enabled),
            reg::RESET => 0,
            reg::FLOWS => self.entries.len() as u32,
            reg::OVERFLOW => self.overflow as u32,
            reg::CAPACITY => self.capacity as u32,
            reg::IDLE_MS => (self.idle_ns / 1_000_000) as u32,
            reg::EVICTED => self.evicted as u32,
            _ => return None,
        })
    }

    fn write_reg(&mut self, idx: u32, value: u32) -> Result<(), KernelError> {
        let info = REGS.get(idx as usize).ok_or(KernelError::NoRegister(idx))?;
        if info.access == Access::ReadOnly {
            return Err(KernelError::ReadOnly(info.name));
        }
        if idx == reg::IDLE_MS {
            self.idle_ns = u64::from(value) * 1_000_000;
            self.full_publish = true;
            return Ok(());
        }
        if value > 1 {
            return Err(KernelError::BadValue { reg: info.name, value, why: "takes 0 or 1" });
        }
        match idx {
            reg::ENABLE => self.enabled = value == 1,
            _ if value == 1 => self.reset(),
            _ => {}
        }
        self.full_publish |= idx == reg::ENABLE;
        Ok(())
    }

    fn results_len(&self) -> usize {
        table::table_len(self.capacity)
    }

    fn republish(&mut self) {
        self.full_publish = true;
    }

    fn publish(&mut self, region: &dyn ResultsRegion) {
        self.seq = self.seq.wrapping_add(1) | 1;
        region.write(table::SEQ_OFFSET, &self.seq.to_le_bytes());
        let mut b = [0u8; ENTRY_LEN];
        if self.full_publish {
            for e in &mut self.entries {
                e.dirty = false;
            }
            self.dirty.clear();
            for (i, e) in self.entries.iter().enumerate() {
                encode_entry(e, &mut b);
                region.write(HEADER_LEN + i * ENTRY_LEN, &b);
            }
            self.full_publish = false;
        } else {
            for &i in &self.dirty {
                let e = &mut self.entries[i as usize];
                e.dirty = false;
                encode_entry(e, &mut b);
                region.write(HEADER_LEN + i as usize * ENTRY_LEN, &b);
            }
            self.dirty.clear();
        }
        self.seq = self.seq.wrapping_add(1);
        region.write(0, &self.header().encode());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::HeapRegion;
    use crate::table::{FlowKey, Table};
    use proptest::prelude::*;
    use snic_pipeline::Batch;
    use std::collections::HashMap;

    fn udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: usize) -> PacketBuf {
        let mut f = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4(src, dst, 64)
            .udp(sport, dport)
            .write(&mut f, &vec![0xab; payload])
            .unwrap();
        let mut p = PacketBuf::from_frame(&f);
        p.meta.stack = snic_wire::stack::parse(p.data());
        p
    }

    fn run(t: &mut Telemetry, now: u64, p: &mut PacketBuf) -> Verdict {
        let mut out = Batch::new(4);
        t.process(Instant::from_nanos(now), p, &mut Emit { out: &mut out })
    }

    #[test]
    fn counts_flows_gaps_and_sizes() {
        let mut t = Telemetry::new(4, 3).unwrap();
        let mut a = udp([10, 0, 0, 1], [10, 0, 0, 2], 1000, 53, 18);
        let mut b = udp([10, 0, 0, 1], [10, 0, 0, 2], 1001, 53, 1000);
        assert_eq!(run(&mut t, 100, &mut a), Verdict::Pass);
        assert_eq!(run(&mut t, 100 + 5000, &mut a), Verdict::Pass);
        assert_eq!(run(&mut t, 200, &mut b), Verdict::Pass);
        let region = HeapRegion::new(t.results_len());
        t.publish(&region);
        let tab = Table::decode(&region.snapshot()).unwrap();
        assert_eq!(tab.header.entries, 2);
        assert_eq!(tab.header.worker, 3);
        assert_eq!(tab.header.packets, 3);
        assert_eq!(tab.header.seq % 2, 0);
        let fa = &tab.flows[0];
        assert_eq!(
            fa.key,
            FlowKey {
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.0.2".parse().unwrap(),
                protocol: 17,
                src_port: 1000,
                dst_port: 53
            }
        );
        assert_eq!((fa.packets, fa.bytes, fa.first_ns, fa.last_ns), (2, 120, 100, 5100));
        // 5000 ns: [4096, 8192) is bucket 3.
        assert_eq!(fa.iat.iter().sum::<u32>(), 1);
        assert_eq!(fa.iat[3], 1);
        // 60-byte frames: bucket 0.
        assert_eq!(fa.size[0], 2);
        assert_eq!(tab.flows[1].size[table::size_bucket(1042)], 1);
        // A receive time, when the port stamped one, is the packet's time.
        b.meta.rx_time = Instant::from_nanos(150);
        run(&mut t, 9999, &mut b);
        assert_eq!(t.table().flows[1].last_ns, 200, "never backwards");
        b.meta.rx_time = Instant::from_nanos(3000);
        run(&mut t, 9999, &mut b);
        assert_eq!(t.table().flows[1].last_ns, 3000);
    }

    #[test]
    fn a_full_table_counts_overflow_and_reset_clears() {
        let mut t = Telemetry::new(2, 0).unwrap();
        for port in 0..5u16 {
            run(&mut t, 1, &mut udp([1, 1, 1, 1], [2, 2, 2, 2], port, 9, 0));
        }
        assert_eq!(t.read_reg(reg::FLOWS), Some(2));
        assert_eq!(t.read_reg(reg::OVERFLOW), Some(3));
        let region = HeapRegion::new(t.results_len());
        t.publish(&region);
        assert_eq!(Table::decode(&region.snapshot()).unwrap().header.overflow, 3);
        assert_eq!(t.write_reg(reg::FLOWS, 1), Err(KernelError::ReadOnly("flows")));
        assert!(matches!(t.write_reg(reg::RESET, 2), Err(KernelError::BadValue { .. })));
        assert_eq!(t.write_reg(9, 1), Err(KernelError::NoRegister(9)));
        t.write_reg(reg::RESET, 1).unwrap();
        t.publish(&region);
        let tab = Table::decode(&region.snapshot()).unwrap();
        assert_eq!((tab.header.entries, tab.header.overflow, tab.header.resets), (0, 0, 1));
        t.write_reg(reg::ENABLE, 0).unwrap();
        run(&mut t, 1, &mut udp([1, 1, 1, 1], [2, 2, 2, 2], 1, 9, 0));
        assert_eq!(t.read_reg(reg::FLOWS), Some(0));
    }

    #[test]
    fn a_full_table_gives_idle_flows_entries_to_new_ones() {
        let args = [("capacity".to_string(), "2".to_string()), ("idle_ms".into(), "1".into())];
        let mut t = Telemetry::from_args(&args, 0).unwrap();
        let ms = 1_000_000;
        run(&mut t, 0, &mut udp([1, 1, 1, 1], [2, 2, 2, 2], 1, 9, 0));
        run(&mut t, 0, &mut udp([1, 1, 1, 1], [2, 2, 2, 2], 2, 9, 0));
        // Flow 2 stays busy; flow 1 goes idle.
        run(&mut t, ms, &mut udp([1, 1, 1, 1], [2, 2, 2, 2], 2, 9, 0));
        // Not idle long enough yet at 0.5 ms past flow 2's last packet: overflow.
        run(&mut t, ms / 2, &mut udp([1, 1, 1, 1], [2, 2, 2, 2], 3, 9, 0));
        assert_eq!((t.read_reg(reg::OVERFLOW), t.read_reg(reg::EVICTED)), (Some(1), Some(0)));
        // At 1.2 ms flow 1 (last seen at 0) is idle, flow 2 (at 1 ms) is not: 3 takes 1's entry.
        run(&mut t, ms + ms / 5, &mut udp([1, 1, 1, 1], [2, 2, 2, 2], 3, 9, 0));
        run(&mut t, ms + ms / 4, &mut udp([1, 1, 1, 1], [2, 2, 2, 2], 3, 9, 0));
        assert_eq!(t.read_reg(reg::EVICTED), Some(1));
        let region = HeapRegion::new(t.results_len());
        t.publish(&region);
        let tab = Table::decode(&region.snapshot()).unwrap();
        assert_eq!((tab.header.evicted, tab.header.idle_ns, tab.header.entries), (1, ms, 2));
        let ports: Vec<(u16, u64, u64)> =
            tab.flows.iter().map(|f| (f.key.src_port, f.packets, f.first_ns)).collect();
        assert_eq!(ports, [(3, 2, ms + ms / 5), (2, 2, 0)]);
        // Flow 1 comes back: a new flow again, and now nobody is idle.
        run(&mut t, ms + ms / 3, &mut udp([1, 1, 1, 1], [2, 2, 2, 2], 1, 9, 0));
        assert_eq!(t.read_reg(reg::OVERFLOW), Some(2));
        t.write_reg(reg::IDLE_MS, 0).unwrap();
        assert_eq!(t.read_reg(reg::IDLE_MS), Some(0));
    }

    #[test]
    fn non_ip_frames_count_in_the_totals_only() {
        let mut t = Telemetry::new(2, 0).unwrap();
        let mut p = PacketBuf::from_frame(&[0xff; 42]);
        p.meta.stack = snic_wire::stack::parse(p.data());
        run(&mut t, 1, &mut p);
        assert_eq!((t.flows(), t.packets), (0, 1));
    }

    proptest! {
        /// Against a reference model (a map from flow to its packets' times and sizes), for
        /// random flows, sizes and increasing times: every counter and bucket agrees, and the
        /// table published in pieces (a publish after every few packets) equals the model.
        #[test]
        fn matches_a_reference_model(
            pkts in proptest::collection::vec((0u8..6, 0usize..1400, 0u64..3_000_000), 1..120),
            every in 1usize..10,
        ) {
            let mut t = Telemetry::new(4, 0).unwrap();
            let region = HeapRegion::new(t.results_len());
            let mut model: HashMap<u16, (Vec<u64>, Vec<usize>)> = HashMap::new();
            let mut order: Vec<u16> = Vec::new();
            let mut now = 0u64;
            let mut overflow = 0u64;
            for (i, (flow, payload, gap)) in pkts.iter().enumerate() {
                now += gap;
                let port = u16::from(*flow);
                let mut p = udp([10, 0, 0, 1], [10, 0, 0, 2], port, 7, *payload);
                let len = p.len();
                run(&mut t, now, &mut p);
                if !model.contains_key(&port) && order.len() == 4 {
                    overflow += 1;
                } else {
                    if !model.contains_key(&port) { order.push(port); }
                    let m = model.entry(port).or_default();
                    m.0.push(now);
                    m.1.push(len);
                }
                if i % every == 0 { t.publish(&region); }
            }
            t.publish(&region);
            let tab = Table::decode(&region.snapshot()).unwrap();
            prop_assert_eq!(tab.header.overflow, overflow);
            prop_assert_eq!(tab.header.packets, pkts.len() as u64);
            prop_assert_eq!(tab.flows.len(), order.len());
            for (e, port) in tab.flows.iter().zip(&order) {
                let (times, sizes) = &model[port];
                prop_assert_eq!(e.key.src_port, *port);
                prop_assert_eq!(e.packets, times.len() as u64);
                prop_assert_eq!(e.bytes, sizes.iter().sum::<usize>() as u64);
                prop_assert_eq!(e.first_ns, times[0]);
                prop_assert_eq!(e.last_ns, *times.last().unwrap());
                let mut iat = [0u32; IAT_BUCKETS];
                for w in times.windows(2) { iat[table::iat_bucket(w[1] - w[0])] += 1; }
                let mut size = [0u32; SIZE_BUCKETS];
                for s in sizes { size[table::size_bucket(*s)] += 1; }
                prop_assert_eq!(e.iat, iat);
                prop_assert_eq!(e.size, size);
            }
            prop_assert_eq!(t.table().flows, tab.flows);
        }
    }
}
