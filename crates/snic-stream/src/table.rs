//! The telemetry table's layout in results memory, and its decoder.
//!
//! One table per worker (flows are pinned to a worker by RSS hash, so the tables hold
//! disjoint flows; a reader concatenates them). All integers are little-endian.
//!
//! ```text
//! header (128 bytes)
//!   0  u32  magic       0x5454_4e53 ("SNTT" in memory order)
//!   4  u16  version     1
//!   6  u16  header_len  128
//!   8  u16  entry_len   192
//!  10  u8   iat_buckets 20
//!  11  u8   size_buckets 8
//!  12  u32  seq         odd while the writer is publishing; even when the table is whole
//!  16  u32  capacity    most flows the table holds
//!  20  u32  entries     flows in use (entries 0..entries follow the header)
//!  24  u32  worker      the worker whose flows these are
//!  28  u32  flags       bit 0: enabled
//!  32  u64  packets     packets seen while enabled
//!  40  u64  bytes       their frame bytes
//!  48  u64  overflow    packets of new flows that found the table full (not in any entry)
//!  56  u64  resets      times the table was cleared
//!  64  u64  evicted     flows evicted idle to make room for new ones
//!  72  u64  idle_ns     idle time after which a flow may be evicted (0: never)
//!  80  [48] reserved    0
//! entry i at 128 + i * 192
//!   0  u8   family      4 or 6
//!   1  u8   protocol    IP protocol (6 TCP, 17 UDP, ...; ports are 0 for others)
//!   2  u16  src_port
//!   4  u16  dst_port
//!   6  u16  reserved    0
//!   8  [16] src         IPv4 in the first 4 bytes (rest 0), or IPv6
//!  24  [16] dst
//!  40  u64  packets
//!  48  u64  bytes       frame bytes
//!  56  u64  first_ns    time of the first packet (the run's clock, ns)
//!  64  u64  last_ns     time of the last packet
//!  72  [u32; 20] iat    inter-arrival histogram: bucket 0 < 1024 ns; bucket k in 1..19 holds
//!                       [2^(9+k), 2^(10+k)) ns; bucket 19 everything from 2^28 ns (268 ms)
//! 152  [u32; 8]  size   frame-size histogram: bucket 0 < 64 bytes; bucket k in 1..7 holds
//!                       [2^(5+k), 2^(6+k)) bytes; bucket 7 everything from 4096
//! 184  [8]  reserved    0
//! ```
//!
//! Histogram buckets saturate at `u32::MAX`. A reader takes a consistent copy by reading
//! `seq`, the table, then `seq` again, and retrying while `seq` is odd or changed
//! ([`read_consistent`]).

use crate::kernel::ResultsRegion;
use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `magic` of a telemetry table.
pub const MAGIC: u32 = 0x5454_4e53;
/// Layout version.
pub const VERSION: u16 = 1;
/// Bytes of the header.
pub const HEADER_LEN: usize = 128;
/// Bytes of one entry.
pub const ENTRY_LEN: usize = 192;
/// Inter-arrival histogram buckets.
pub const IAT_BUCKETS: usize = 20;
/// Frame-size histogram buckets.
pub const SIZE_BUCKETS: usize = 8;
/// Offset of `seq` in the header.
pub const SEQ_OFFSET: usize = 12;
/// Bytes of the flow key at the start of an entry.
pub const KEY_LEN: usize = 40;

/// The inter-arrival bucket of a gap of `ns` nanoseconds.
#[inline]
pub fn iat_bucket(ns: u64) -> usize {
    if ns < 1024 { 0 } else { ((63 - ns.leading_zeros() as usize) - 9).min(IAT_BUCKETS - 1) }
}

/// The size bucket of a `len`-byte frame.
#[inline]
pub fn size_bucket(len: usize) -> usize {
    if len < 64 {
        0
    } else {
        ((63 - (len as u64).leading_zeros() as usize) - 5).min(SIZE_BUCKETS - 1)
    }
}

/// Bytes of a table of `capacity` entries.
pub fn table_len(capacity: usize) -> usize {
    HEADER_LEN + capacity * ENTRY_LEN
}

/// A flow's identity: the innermost IP addresses, protocol and ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol.
    pub protocol: u8,
    /// Source port (0 without one).
    pub src_port: u16,
    /// Destination port (0 without one).
    pub dst_port: u16,
}

impl FlowKey {
    /// The key's 40 bytes as the entry stores them.
    pub fn to_bytes(&self) -> [u8; KEY_LEN] {
        let mut b = [0u8; KEY_LEN];
        b[0] = if self.src.is_ipv4() { 4 } else { 6 };
        b[1] = self.protocol;
        b[2..4].copy_from_slice(&self.src_port.to_le_bytes());
        b[4..6].copy_from_slice(&self.dst_port.to_le_bytes());
        put_addr(&mut b[8..24], self.src);
        put_addr(&mut b[24..40], self.dst);
        b
    }

    /// Read a key from an entry's first 40 bytes.
    pub fn from_bytes(b: &[u8; KEY_LEN]) -> Result<FlowKey, TableError> {
        let addr = |s: &[u8]| -> Result<IpAddr, TableError> {
            let mut a = [0u8; 16];
            a.copy_from_slice(s);
            match b[0] {
                4 => Ok(IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))),
                6 => Ok(IpAddr::V6(Ipv6Addr::from(a))),
                f => Err(TableError::BadFamily(f)),
            }
        };
        Ok(FlowKey {
            src: addr(&b[8..24])?,
            dst: addr(&b[24..40])?,
            protocol: b[1],
            src_port: u16::from_le_bytes([b[2], b[3]]),
            dst_port: u16::from_le_bytes([b[4], b[5]]),
        })
    }
}

impl fmt::Display for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ep = |a: IpAddr, p: u16| match a {
            IpAddr::V4(a) => format!("{a}:{p}"),
            IpAddr::V6(a) => format!("[{a}]:{p}"),
        };
        write!(
            f,
            "{} -> {} proto {}",
            ep(self.src, self.src_port),
            ep(self.dst, self.dst_port),
            self.protocol
        )
    }
}

fn put_addr(out: &mut [u8], a: IpAddr) {
    match a {
        IpAddr::V4(a) => out[..4].copy_from_slice(&a.octets()),
        IpAddr::V6(a) => out.copy_from_slice(&a.octets()),
    }
}

/// One flow's entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowEntry {
    /// The flow.
    pub key: FlowKey,
    /// Packets.
    pub packets: u64,
    /// Frame bytes.
    pub bytes: u64,
    /// Time of the first packet (ns).
    pub first_ns: u64,
    /// Time of the last packet (ns).
    pub last_ns: u64,
    /// Inter-arrival histogram (see the module doc).
    pub iat: [u32; IAT_BUCKETS],
    /// Frame-size histogram (see the module doc).
    pub size: [u32; SIZE_BUCKETS],
}

impl FlowEntry {
    /// The entry's bytes.
    pub fn encode(&self, out: &mut [u8; ENTRY_LEN]) {
        out.fill(0);
        out[..KEY_LEN].copy_from_slice(&self.key.to_bytes());
        encode_counters(
            out,
            self.packets,
            self.bytes,
            self.first_ns,
            self.last_ns,
            &self.iat,
            &self.size,
        );
    }

    /// Decode one entry.
    pub fn decode(b: &[u8; ENTRY_LEN]) -> Result<FlowEntry, TableError> {
        let mut key = [0u8; KEY_LEN];
        key.copy_from_slice(&b[..KEY_LEN]);
        let mut iat = [0u32; IAT_BUCKETS];
        for (i, v) in iat.iter_mut().enumerate() {
            *v = u32_at(b, 72 + 4 * i);
        }
        let mut size = [0u32; SIZE_BUCKETS];
        for (i, v) in size.iter_mut().enumerate() {
            *v = u32_at(b, 152 + 4 * i);
        }
        Ok(FlowEntry {
            key: FlowKey::from_bytes(&key)?,
            packets: u64_at(b, 40),
            bytes: u64_at(b, 48),
            first_ns: u64_at(b, 56),
            last_ns: u64_at(b, 64),
            iat,
            size,
        })
    }
}

/// Write an entry's counters and histograms (everything after the key) into `out`.
pub(crate) fn encode_counters(
    out: &mut [u8; ENTRY_LEN],
    packets: u64,
    bytes: u64,
    first_ns: u64,
    last_ns: u64,
    iat: &[u32; IAT_BUCKETS],
    size: &[u32; SIZE_BUCKETS],
) {
    out[40..48].copy_from_slice(&packets.to_le_bytes());
    out[48..56].copy_from_slice(&bytes.to_le_bytes());
    out[56..64].copy_from_slice(&first_ns.to_le_bytes());
    out[64..72].copy_from_slice(&last_ns.to_le_bytes());
    for (i, v) in iat.iter().enumerate() {
        out[72 + 4 * i..76 + 4 * i].copy_from_slice(&v.to_le_bytes());
    }
    for (i, v) in size.iter().enumerate() {
        out[152 + 4 * i..156 + 4 * i].copy_from_slice(&v.to_le_bytes());
    }
}

/// The table's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// Sequence word (even in a whole table).
    pub seq: u32,
    /// Most flows the table holds.
    pub capacity: u32,
    /// Flows in use.
    pub entries: u32,
    /// The worker whose flows these are.
    pub worker: u32,
    /// Counting is on.
    pub enabled: bool,
    /// Packets seen while enabled.
    pub packets: u64,
    /// Their frame bytes.
    pub bytes: u64,
    /// Packets of new flows that found the table full.
    pub overflow: u64,
    /// Times the table was cleared.
    pub resets: u64,
    /// Flows evicted idle to make room for new ones.
    pub evicted: u64,
    /// Idle time after which a flow may be evicted (0: never).
    pub idle_ns: u64,
}

impl Header {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&(HEADER_LEN as u16).to_le_bytes());
        b[8..10].copy_from_slice(&(ENTRY_LEN as u16).to_le_bytes());
        b[10] = IAT_BUCKETS as u8;
        b[11] = SIZE_BUCKETS as u8;
        b[12..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..20].copy_from_slice(&self.capacity.to_le_bytes());
        b[20..24].copy_from_slice(&self.entries.to_le_bytes());
        b[24..28].copy_from_slice(&self.worker.to_le_bytes());
        b[28..32].copy_from_slice(&u32::from(self.enabled).to_le_bytes());
        b[32..40].copy_from_slice(&self.packets.to_le_bytes());
        b[40..48].copy_from_slice(&self.bytes.to_le_bytes());
        b[48..56].copy_from_slice(&self.overflow.to_le_bytes());
        b[56..64].copy_from_slice(&self.resets.to_le_bytes());
        b[64..72].copy_from_slice(&self.evicted.to_le_bytes());
        b[72..80].copy_from_slice(&self.idle_ns.to_le_bytes());
        b
    }

    /// Decode and check a header (magic, version, layout, `entries <= capacity`).
    pub fn decode(b: &[u8]) -> Result<Header, TableError> {
        if b.len() < HEADER_LEN {
            return Err(TableError::Truncated { need: HEADER_LEN, got: b.len() });
        }
        let magic = u32_at(b, 0);
        if magic != MAGIC {
            return Err(TableError::BadMagic(magic));
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != VERSION {
            return Err(TableError::BadVersion(version));
        }
        let layout = (
            usize::from(u16::from_le_bytes([b[6], b[7]])),
            usize::from(u16::from_le_bytes([b[8], b[9]])),
            usize::from(b[10]),
            usize::from(b[11]),
        );
        if layout != (HEADER_LEN, ENTRY_LEN, IAT_BUCKETS, SIZE_BUCKETS) {
            return Err(TableError::BadLayout);
        }
        let h = Header {
            seq: u32_at(b, 12),
            capacity: u32_at(b, 16),
            entries: u32_at(b, 20),
            worker: u32_at(b, 24),
            enabled: u32_at(b, 28) & 1 == 1,
            packets: u64_at(b, 32),
            bytes: u64_at(b, 40),
            overflow: u64_at(b, 48),
            resets: u64_at(b, 56),
            evicted: u64_at(b, 64),
            idle_ns: u64_at(b, 72),
        };
        if h.entries > h.capacity {
            return Err(TableError::OverCapacity { entries: h.entries, capacity: h.capacity });
        }
        Ok(h)
    }
}

/// A decoded table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// The header.
    pub header: Header,
    /// Entries `0..header.entries`.
    pub flows: Vec<FlowEntry>,
}

impl Table {
    /// Encode the header and entries into a table of `header.capacity` entries (unused
    /// entries zero).
    pub fn encode(&self) -> Vec<u8> {
        let cap = self.header.capacity as usize;
        let mut out = vec![0u8; table_len(cap.max(self.flows.len()))];
        out[..HEADER_LEN].copy_from_slice(&self.header.encode());
        let mut e = [0u8; ENTRY_LEN];
        for (i, f) in self.flows.iter().enumerate() {
            f.encode(&mut e);
            let at = HEADER_LEN + i * ENTRY_LEN;
            out[at..at + ENTRY_LEN].copy_from_slice(&e);
        }
        out
    }

    /// Decode a table from its bytes. Never panics: a short, foreign or half-written table is
    /// a [`TableError`].
    pub fn decode(b: &[u8]) -> Result<Table, TableError> {
        let header = Header::decode(b)?;
        if header.seq % 2 == 1 {
            return Err(TableError::Torn);
        }
        let n = header.entries as usize;
        let need = n
            .checked_mul(ENTRY_LEN)
            .and_then(|x| x.checked_add(HEADER_LEN))
            .ok_or(TableError::Truncated { need: usize::MAX, got: b.len() })?;
        if b.len() < need {
            return Err(TableError::Truncated { need, got: b.len() });
        }
        let mut flows = Vec::with_capacity(n);
        for chunk in b[HEADER_LEN..need].chunks_exact(ENTRY_LEN) {
            let mut e = [0u8; ENTRY_LEN];
            e.copy_from_slice(chunk);
            flows.push(FlowEntry::decode(&e)?);
        }
        Ok(Table { header, flows })
    }
}

/// Why bytes are not a telemetry table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TableError {
    /// Fewer bytes than the header or its entries need.
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes there.
        got: usize,
    },
    /// Not a telemetry table.
    BadMagic(u32),
    /// A layout version this decoder does not know.
    BadVersion(u16),
    /// Header, entry or histogram sizes differ from this version's.
    BadLayout,
    /// More entries than capacity.
    OverCapacity {
        /// Entries claimed.
        entries: u32,
        /// Capacity.
        capacity: u32,
    },
    /// An entry's address family is neither 4 nor 6.
    BadFamily(u8),
    /// The writer was publishing (odd `seq`), or kept publishing while every retry read.
    Torn,
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableError::Truncated { need, got } => {
                write!(f, "table truncated: need {need} bytes, got {got}")
            }
            TableError::BadMagic(m) => write!(f, "not a telemetry table (magic {m:#010x})"),
            TableError::BadVersion(v) => write!(f, "table layout version {v} is not {VERSION}"),
            TableError::BadLayout => f.write_str("table header, entry or histogram sizes differ"),
            TableError::OverCapacity { entries, capacity } => {
                write!(f, "table claims {entries} entries in a capacity of {capacity}")
            }
            TableError::BadFamily(x) => write!(f, "entry address family {x} is not 4 or 6"),
            TableError::Torn => f.write_str("table was being written (retry)"),
        }
    }
}

impl std::error::Error for TableError {}

/// Read a whole, consistent table from `region`: `seq`, the bytes, `seq` again, retried up to
/// `tries` times while the writer was publishing.
pub fn read_consistent(region: &dyn ResultsRegion, tries: usize) -> Result<Table, TableError> {
    let mut last = TableError::Torn;
    for _ in 0..tries.max(1) {
        let mut head = [0u8; HEADER_LEN];
        if !region.read(0, &mut head) {
            return Err(TableError::Truncated { need: HEADER_LEN, got: region.len() });
        }
        let h = Header::decode(&head)?;
        let len = table_len(h.entries as usize).min(region.len());
        let mut bytes = vec![0u8; len];
        if !region.read(0, &mut bytes) {
            return Err(TableError::Truncated { need: len, got: region.len() });
        }
        let mut seq = [0u8; 4];
        let again = region.read(SEQ_OFFSET, &mut seq).then(|| u32::from_le_bytes(seq));
        match Table::decode(&bytes) {
            Ok(t) if again == Some(t.header.seq) => return Ok(t),
            Ok(_) => last = TableError::Torn,
            Err(e @ TableError::Torn) => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_follow_the_documented_bounds() {
        assert_eq!(iat_bucket(0), 0);
        assert_eq!(iat_bucket(1023), 0);
        assert_eq!(iat_bucket(1024), 1);
        assert_eq!(iat_bucket(2047), 1);
        assert_eq!(iat_bucket(2048), 2);
        assert_eq!(iat_bucket((1 << 28) - 1), 18);
        assert_eq!(iat_bucket(1 << 28), 19);
        assert_eq!(iat_bucket(u64::MAX), 19);
        assert_eq!(size_bucket(0), 0);
        assert_eq!(size_bucket(63), 0);
        assert_eq!(size_bucket(64), 1);
        assert_eq!(size_bucket(127), 1);
        assert_eq!(size_bucket(1514), 5);
        assert_eq!(size_bucket(4095), 6);
        assert_eq!(size_bucket(4096), 7);
        assert_eq!(size_bucket(65535), 7);
    }

    #[test]
    fn header_checks_reject_foreign_bytes() {
        let h = Header { capacity: 2, entries: 1, ..Header::default() };
        let mut b = h.encode().to_vec();
        assert!(matches!(Table::decode(&b), Err(TableError::Truncated { need: 320, got: 128 })));
        b[0] ^= 1;
        assert!(matches!(Header::decode(&b), Err(TableError::BadMagic(_))));
        b[0] ^= 1;
        b[4] = 2;
        assert_eq!(Header::decode(&b), Err(TableError::BadVersion(2)));
        b[4] = 1;
        b[10] = 19;
        assert_eq!(Header::decode(&b), Err(TableError::BadLayout));
        b[10] = 20;
        b[20] = 3;
        assert_eq!(Header::decode(&b), Err(TableError::OverCapacity { entries: 3, capacity: 2 }));
        b[20] = 0;
        b[12] = 1;
        assert_eq!(Table::decode(&b), Err(TableError::Torn));
        assert!(matches!(Header::decode(&b[..10]), Err(TableError::Truncated { .. })));
    }

    fn addr(v6: bool) -> impl Strategy<Value = IpAddr> {
        if v6 {
            any::<[u8; 16]>().prop_map(|a| IpAddr::V6(Ipv6Addr::from(a))).boxed()
        } else {
            any::<[u8; 4]>().prop_map(|a| IpAddr::V4(Ipv4Addr::from(a))).boxed()
        }
    }

    fn entry() -> impl Strategy<Value = FlowEntry> {
        any::<bool>()
            .prop_flat_map(|v6| (addr(v6), addr(v6)))
            .prop_flat_map(|(src, dst)| {
                (
                    Just(src),
                    Just(dst),
                    any::<(u8, u16, u16)>(),
                    any::<(u64, u64, u64, u64)>(),
                    any::<[u32; IAT_BUCKETS]>(),
                    any::<[u32; SIZE_BUCKETS]>(),
                )
            })
            .prop_map(
                |(
                    src,
                    dst,
                    (protocol, src_port, dst_port),
                    (packets, bytes, first_ns, last_ns),
                    iat,
                    size,
                )| FlowEntry {
                    key: FlowKey { src, dst, protocol, src_port, dst_port },
                    packets,
                    bytes,
                    first_ns,
                    last_ns,
                    iat,
                    size,
                },
            )
    }

    proptest! {
        /// Whatever a table holds, encoding then decoding gives it back.
        #[test]
        fn tables_round_trip(
            flows in proptest::collection::vec(entry(), 0..8),
            spare in 0u32..4,
            seq in any::<u32>(),
            h in any::<(u32, bool, u64, u64, u64, u64)>(),
            e in any::<(u64, u64)>(),
        ) {
            let header = Header {
                seq: seq & !1,
                capacity: flows.len() as u32 + spare,
                entries: flows.len() as u32,
                worker: h.0,
                enabled: h.1,
                packets: h.2,
                bytes: h.3,
                overflow: h.4,
                resets: h.5,
                evicted: e.0,
                idle_ns: e.1,
            };
            let t = Table { header, flows };
            let bytes = t.encode();
            prop_assert_eq!(bytes.len(), table_len(header.capacity as usize));
            prop_assert_eq!(Table::decode(&bytes), Ok(t));
        }

        /// Any bytes decode to a table or an error, never a panic.
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = Table::decode(&bytes);
        }
    }
}
