//! Match-action tables: the entry store and lookup for every P4 match kind.
//!
//! Keys are a list of fields, each 1 to 128 bits wide, given as `u128` values. A [`Table`] is
//! built from its key's fields and behaves like BMv2's `simple_switch` tables:
//!
//! - **Exact** tables (every field `exact`): one hash lookup.
//! - **LPM** tables (`exact` fields and one `lpm` field): the longest matching prefix wins.
//! - **Priority** tables (any `ternary`, `range` or `optional` field): every entry has a
//!   priority; of the matching entries the one with the **largest** priority wins, and on equal
//!   priorities the one inserted first. `lpm` fields act as masks there.
//!
//! Note that BMv2 itself picks the *smallest* priority value; a caller holding BMv2-style
//! priorities (such as [`crate::stf::bmv2_priority`]'s) must negate them.
//!
//! # How lookup works
//!
//! Every entry is put in a *group* by its mask tuple: one mask per field (the field's full
//! width for `exact` and `optional` values, the prefix for `lpm`, the mask for `ternary`, and
//! zero for `range` and wildcard `optional`). A group is a hash table from the masked key to the
//! entries with that masked key (tuple-space search). Each entry has a *rank*: its priority in
//! a priority table, its prefix length in an LPM table, and zero in an exact table. Groups are
//! visited from the largest best rank down, and the search stops as soon as the best match
//! found beats every group still to visit. An exact table has a single group; an LPM table has
//! one group per prefix length present, visited longest first, so the first hit wins. Range
//! fields are checked on the candidates a group's hash lookup yields.
//!
//! Lookup allocates nothing and takes no lock.
//!
//! # Entries
//!
//! Entries are normalised when inserted: `ternary` values are masked (`value &= mask`) and
//! `lpm` values lose the bits outside the prefix, so [`Table::iter`] shows what matches and
//! [`Table::find`] finds an entry however its don't-care bits were written. Values with bits
//! beyond the field's width are an error. Lookup keys are truncated to each field's width.
//!
//! # Duplicates, priorities and ties
//!
//! - Two entries are duplicates when their normalised matches are equal field by field and, in
//!   a priority table, their priorities are equal too. The same match with another priority is
//!   a separate entry (the one with the smaller priority only wins where the other is deleted).
//! - Priorities matter in priority tables only; elsewhere the priority given is ignored and
//!   not kept ([`Entry::priority`] is `None`).
//! - Among matching entries of equal priority, the one inserted first wins (BMv2 leaves such
//!   ties to the order of its internal entry store). [`Table::modify`] keeps an entry's place.
//! - A key of the wrong length matches nothing; a table without key fields has no entries
//!   ([`TableError::NoKey`]), only its default action, which the caller keeps.
//! - Checks happen in this order: the match (field count, then field by field), the priority,
//!   duplicates, then the size.

use std::collections::BTreeMap;
use std::fmt;
use std::hash::{BuildHasher, Hasher};

use hashbrown::hash_table::Entry as TableEntry;
use hashbrown::{DefaultHashBuilder, HashMap, HashTable};

/// A key field's match kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatchKind {
    /// `exact`
    Exact,
    /// `ternary`
    Ternary,
    /// `lpm`
    Lpm,
    /// `range`
    Range,
    /// `optional` (exact or wildcard)
    Optional,
}

impl fmt::Display for MatchKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MatchKind::Exact => "exact",
            MatchKind::Ternary => "ternary",
            MatchKind::Lpm => "lpm",
            MatchKind::Range => "range",
            MatchKind::Optional => "optional",
        })
    }
}

/// How one key field of an entry matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldMatch {
    /// Equal to the value.
    Exact(u128),
    /// `key & mask == value & mask`.
    Ternary {
        /// The value.
        value: u128,
        /// The mask.
        mask: u128,
    },
    /// The top `len` bits (of the field's width) equal the value's.
    Lpm {
        /// The value.
        value: u128,
        /// The prefix length, 0..=width.
        len: u32,
    },
    /// `lo <= key <= hi`.
    Range {
        /// Lowest value matched.
        lo: u128,
        /// Highest value matched.
        hi: u128,
    },
    /// `optional`: `Some(v)` matches `v` only, `None` matches anything.
    Optional(Option<u128>),
}

impl FieldMatch {
    /// The match kind this field match is for.
    pub fn kind(&self) -> MatchKind {
        match self {
            FieldMatch::Exact(_) => MatchKind::Exact,
            FieldMatch::Ternary { .. } => MatchKind::Ternary,
            FieldMatch::Lpm { .. } => MatchKind::Lpm,
            FieldMatch::Range { .. } => MatchKind::Range,
            FieldMatch::Optional(_) => MatchKind::Optional,
        }
    }

    /// Whether `key` (already truncated to the field's `width`) is matched.
    pub fn matches(&self, key: u128, width: u32) -> bool {
        match *self {
            FieldMatch::Exact(v) => key == v,
            FieldMatch::Ternary { value, mask } => key & mask == value & mask,
            FieldMatch::Lpm { value, len } => {
                let m = prefix_mask(width, len);
                key & m == value & m
            }
            FieldMatch::Range { lo, hi } => lo <= key && key <= hi,
            FieldMatch::Optional(v) => v.is_none_or(|v| v == key),
        }
    }
}

/// How a table picks among matching entries, from its key's match kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TableKind {
    /// Only `exact` fields (or none): at most one entry matches.
    Exact,
    /// `exact` fields and one `lpm` field: the longest prefix wins.
    Lpm,
    /// Some `ternary`, `range` or `optional` field: the largest priority wins, then the entry
    /// inserted first.
    Priority,
}

/// A handle to a table entry, valid until the entry is deleted (or the table cleared).
///
/// Handles of deleted entries are not reused for new ones (up to a 32-bit generation count per
/// slot), so a stale handle is reported as [`TableError::UnknownHandle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryHandle {
    index: u32,
    generation: u32,
}

impl EntryHandle {
    /// The handle as one number (for a runtime API or a dump).
    pub fn to_raw(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    /// The handle [`EntryHandle::to_raw`] gave `raw` for.
    pub fn from_raw(raw: u64) -> Self {
        EntryHandle { index: raw as u32, generation: (raw >> 32) as u32 }
    }
}

impl fmt::Display for EntryHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_raw())
    }
}

/// What went wrong building a table or changing its entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableError {
    /// A key field's width is not within 1..=128 bits.
    BadWidth {
        /// The field's index.
        field: usize,
        /// The width asked for.
        width: u32,
    },
    /// A table without ternary, range or optional fields has more than one lpm field.
    MultipleLpm,
    /// The table has no key fields, so it has no entries, only its default action.
    NoKey,
    /// An entry has the wrong number of fields.
    FieldCount {
        /// The key's number of fields.
        expected: usize,
        /// The entry's.
        got: usize,
    },
    /// A field match is not of the field's match kind.
    KindMismatch {
        /// The field's index.
        field: usize,
        /// The field's match kind.
        expected: MatchKind,
        /// The kind of match given.
        got: MatchKind,
    },
    /// A value (or mask, or range bound) has bits set beyond the field's width.
    TooWide {
        /// The field's index.
        field: usize,
        /// The field's width in bits.
        width: u32,
    },
    /// An lpm prefix is longer than the field.
    PrefixTooLong {
        /// The field's index.
        field: usize,
        /// The prefix length given.
        len: u32,
        /// The field's width in bits.
        width: u32,
    },
    /// A range's low bound is above its high bound.
    InvertedRange {
        /// The field's index.
        field: usize,
        /// The low bound.
        lo: u128,
        /// The high bound.
        hi: u128,
    },
    /// A priority table's entry has no priority.
    MissingPriority,
    /// An entry with the same match (and, in a priority table, the same priority) exists.
    Duplicate(EntryHandle),
    /// The table holds `size` entries already.
    Full {
        /// The table's size.
        size: usize,
    },
    /// No entry has this handle (never had, or deleted).
    UnknownHandle(EntryHandle),
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableError::BadWidth { field, width } => {
                write!(f, "key field {field}: width {width} is not within 1..=128 bits")
            }
            TableError::MultipleLpm => f.write_str("more than one lpm field in the key"),
            TableError::NoKey => f.write_str("table has no key: it only has its default action"),
            TableError::FieldCount { expected, got } => {
                write!(f, "entry has {got} key fields, the table has {expected}")
            }
            TableError::KindMismatch { field, expected, got } => {
                write!(f, "key field {field}: {got} match for a {expected} field")
            }
            TableError::TooWide { field, width } => {
                write!(f, "key field {field}: value has bits beyond its width of {width}")
            }
            TableError::PrefixTooLong { field, len, width } => {
                write!(f, "key field {field}: prefix /{len} longer than its width of {width}")
            }
            TableError::InvertedRange { field, lo, hi } => {
                write!(f, "key field {field}: range low bound {lo:#x} above high bound {hi:#x}")
            }
            TableError::MissingPriority => f.write_str("entry needs a priority"),
            TableError::Duplicate(h) => write!(f, "duplicate entry (handle {h})"),
            TableError::Full { size } => write!(f, "table full ({size} entries)"),
            TableError::UnknownHandle(h) => write!(f, "no entry with handle {h}"),
        }
    }
}

impl std::error::Error for TableError {}

/// A table entry: its (normalised) match, priority and action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<A> {
    matches: Box<[FieldMatch]>,
    priority: Option<i64>,
    action: A,
}

impl<A> Entry<A> {
    /// The field matches, normalised (ternary values masked, lpm values cut to the prefix).
    pub fn matches(&self) -> &[FieldMatch] {
        &self.matches
    }

    /// The priority: `Some` in priority tables, `None` in the others (where it is ignored).
    pub fn priority(&self) -> Option<i64> {
        self.priority
    }

    /// The action data.
    pub fn action(&self) -> &A {
        &self.action
    }

    /// The action data, taken out.
    pub fn into_action(self) -> A {
        self.action
    }
}

/// A key field: its match kind and width.
#[derive(Debug, Clone)]
struct Field {
    kind: MatchKind,
    width: u32,
    /// The `width` low bits.
    wmask: u128,
}

/// An entry in its slot, with what lookup needs.
#[derive(Debug, Clone)]
struct Stored<A> {
    entry: Entry<A>,
    /// Larger wins: priority, prefix length or 0.
    rank: i64,
    /// Insertion order: smaller wins among equal ranks.
    seq: u64,
    /// The group holding it.
    group: u32,
}

#[derive(Debug, Clone)]
struct Slot<A> {
    generation: u32,
    stored: Option<Stored<A>>,
}

/// A masked key, held inline when it has at most two fields (most keys) so that probing a
/// bucket reads no other memory.
#[derive(Debug, Clone)]
enum MaskedKey {
    Inline { len: u8, vals: [u128; 2] },
    Heap(Box<[u128]>),
}

impl MaskedKey {
    fn new(key: Box<[u128]>) -> Self {
        match *key {
            [] => MaskedKey::Inline { len: 0, vals: [0; 2] },
            [a] => MaskedKey::Inline { len: 1, vals: [a, 0] },
            [a, b] => MaskedKey::Inline { len: 2, vals: [a, b] },
            _ => MaskedKey::Heap(key),
        }
    }

    fn as_slice(&self) -> &[u128] {
        match self {
            MaskedKey::Inline { len, vals } => &vals[..usize::from(*len)],
            MaskedKey::Heap(v) => v,
        }
    }
}

/// The entries of a group sharing a masked key, best first (rank down, then seq up). The
/// first is held inline: in exact and LPM tables it is the only one.
#[derive(Debug, Clone)]
struct Bucket {
    key: MaskedKey,
    first: u32,
    rest: Vec<u32>,
}

impl Bucket {
    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::once(self.first).chain(self.rest.iter().copied())
    }

    /// The index of the first slot `pred` is false for (`pred` true then false, as the order).
    fn partition_point(&self, pred: impl Fn(u32) -> bool) -> usize {
        if pred(self.first) { 1 + self.rest.partition_point(|&s| pred(s)) } else { 0 }
    }

    fn insert(&mut self, at: usize, slot: u32) {
        if at == 0 {
            self.rest.insert(0, std::mem::replace(&mut self.first, slot));
        } else {
            self.rest.insert(at - 1, slot);
        }
    }

    /// Removes `slot`; false if that leaves the bucket empty.
    fn remove(&mut self, slot: u32) -> bool {
        if self.first != slot {
            self.rest.retain(|&s| s != slot);
        } else if self.rest.is_empty() {
            return false;
        } else {
            self.first = self.rest.remove(0);
        }
        true
    }
}

/// The entries sharing a mask tuple.
#[derive(Debug, Clone)]
struct Group {
    masks: Box<[u128]>,
    buckets: HashTable<Bucket>,
    /// How many entries have each rank; the largest is `max_rank`.
    ranks: BTreeMap<i64, u32>,
    max_rank: i64,
}

/// A match-action table holding entries with action data `A`.
///
/// See the [module documentation](self) for the semantics.
///
/// ```
/// use snic_p4::table::{FieldMatch, MatchKind, Table, TableError};
///
/// // key = { hdr.ipv4.dst : lpm; }
/// let mut t = Table::new(&[(MatchKind::Lpm, 32)], 1024)?;
/// t.insert(&[FieldMatch::Lpm { value: 0x0a00_0000, len: 8 }], None, "port 1")?;
/// let h = t.insert(&[FieldMatch::Lpm { value: 0x0a01_0000, len: 16 }], None, "port 2")?;
/// assert_eq!(t.lookup(&[0x0a01_0203]), Some((h, &"port 2")));
/// assert_eq!(t.lookup(&[0x0a02_0203]).map(|(_, a)| *a), Some("port 1"));
/// assert_eq!(t.lookup(&[0x0b00_0000]), None);
///
/// // key = { hdr.tcp.dport : range; meta.flag : ternary; }: the largest priority wins.
/// let mut acl = Table::new(&[(MatchKind::Range, 16), (MatchKind::Ternary, 8)], 64)?;
/// let any = FieldMatch::Ternary { value: 0, mask: 0 };
/// acl.insert(&[FieldMatch::Range { lo: 0, hi: 1023 }, any], Some(10), "deny")?;
/// acl.insert(&[FieldMatch::Range { lo: 22, hi: 22 }, any], Some(20), "allow")?;
/// assert_eq!(acl.lookup(&[22, 0]).map(|(_, a)| *a), Some("allow"));
/// assert_eq!(acl.lookup(&[23, 0]).map(|(_, a)| *a), Some("deny"));
/// let no_priority = acl.insert(&[FieldMatch::Range { lo: 0, hi: 9 }, any], None, "x");
/// assert_eq!(no_priority, Err(TableError::MissingPriority));
/// # Ok::<(), TableError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Table<A> {
    fields: Box<[Field]>,
    kind: TableKind,
    size: usize,
    /// Indices of the range fields.
    range_fields: Box<[usize]>,
    slots: Vec<Slot<A>>,
    free_slots: Vec<u32>,
    len: usize,
    next_seq: u64,
    /// Groups by id; ids in `free_groups` are unused.
    groups: Vec<Group>,
    free_groups: Vec<u32>,
    group_ids: HashMap<Box<[u128]>, u32>,
    /// Ids of the groups in use, by `max_rank` down.
    order: Vec<u32>,
    hasher: DefaultHashBuilder,
}

/// The `width` low bits set (all of them from 128 on).
fn width_mask(width: u32) -> u128 {
    u128::MAX.checked_shr(128u32.saturating_sub(width)).unwrap_or(0)
}

/// The top `len` of `width` bits set.
fn prefix_mask(width: u32, len: u32) -> u128 {
    let w = width_mask(width);
    w ^ w.checked_shr(len).unwrap_or(0)
}

/// The hash of `key` masked by `masks`.
fn hash_masked(hasher: &DefaultHashBuilder, key: &[u128], masks: &[u128]) -> u64 {
    let mut h = hasher.build_hasher();
    for (k, m) in key.iter().zip(masks) {
        h.write_u128(k & m);
    }
    h.finish()
}

/// Whether a bucket's key is `key` masked by `masks`.
fn same_masked(bucket_key: &[u128], key: &[u128], masks: &[u128]) -> bool {
    bucket_key.iter().zip(key).zip(masks).all(|((b, k), m)| *b == k & m)
}

impl<A> Table<A> {
    /// An empty table whose key has `fields` (match kind and width in bits, in key order),
    /// holding at most `size` entries.
    ///
    /// Errors: a width outside 1..=128 ([`TableError::BadWidth`]), or several lpm fields in a
    /// table without ternary, range or optional fields ([`TableError::MultipleLpm`]).
    pub fn new(fields: &[(MatchKind, u32)], size: usize) -> Result<Self, TableError> {
        let mut lpm = 0;
        let mut priority = false;
        for (i, &(kind, width)) in fields.iter().enumerate() {
            if !(1..=128).contains(&width) {
                return Err(TableError::BadWidth { field: i, width });
            }
            match kind {
                MatchKind::Exact => {}
                MatchKind::Lpm => lpm += 1,
                MatchKind::Ternary | MatchKind::Range | MatchKind::Optional => priority = true,
            }
        }
        let kind = match (priority, lpm) {
            (true, _) => TableKind::Priority,
            (false, 0) => TableKind::Exact,
            (false, 1) => TableKind::Lpm,
            (false, _) => return Err(TableError::MultipleLpm),
        };
        Ok(Table {
            fields: fields
                .iter()
                .map(|&(kind, width)| Field { kind, width, wmask: width_mask(width) })
                .collect(),
            kind,
            size,
            range_fields: fields
                .iter()
                .enumerate()
                .filter(|(_, (k, _))| *k == MatchKind::Range)
                .map(|(i, _)| i)
                .collect(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            len: 0,
            next_seq: 0,
            groups: Vec::new(),
            free_groups: Vec::new(),
            group_ids: HashMap::new(),
            order: Vec::new(),
            hasher: DefaultHashBuilder::default(),
        })
    }

    /// How the table picks among matching entries.
    pub fn kind(&self) -> TableKind {
        self.kind
    }

    /// The key's fields: match kind and width in bits.
    pub fn fields(&self) -> impl ExactSizeIterator<Item = (MatchKind, u32)> + '_ {
        self.fields.iter().map(|f| (f.kind, f.width))
    }

    /// The most entries the table holds.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table has no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds an entry matching `matches` (one per key field) with action data `action`.
    ///
    /// `priority` is required in a priority table (larger wins) and ignored in the others.
    /// Errors: [`TableError::NoKey`], [`TableError::FieldCount`], [`TableError::KindMismatch`],
    /// [`TableError::TooWide`], [`TableError::PrefixTooLong`], [`TableError::InvertedRange`],
    /// [`TableError::MissingPriority`], then [`TableError::Duplicate`] if an entry with the same
    /// normalised match (and, in a priority table, the same priority) exists, then
    /// [`TableError::Full`].
    pub fn insert(
        &mut self,
        matches: &[FieldMatch],
        priority: Option<i64>,
        action: A,
    ) -> Result<EntryHandle, TableError> {
        let matches = self.normalize(matches)?;
        let (rank, priority) = self.rank(&matches, priority)?;
        let (masks, key) = self.tuple(&matches);
        if let Some(h) = self.find_normalized(&matches, (rank, priority), &masks, &key) {
            return Err(TableError::Duplicate(h));
        }
        if self.len >= self.size {
            return Err(TableError::Full { size: self.size });
        }
        let index = match self.free_slots.pop() {
            Some(i) => i,
            None => {
                let i = u32::try_from(self.slots.len())
                    .map_err(|_| TableError::Full { size: self.size })?;
                self.slots.push(Slot { generation: 0, stored: None });
                i
            }
        };
        let gid = match self.group_ids.get(&masks) {
            Some(&g) => g,
            None => self.new_group(masks),
        };
        let seq = self.next_seq;
        self.next_seq += 1;

        let group = &mut self.groups[gid as usize];
        let hash = hash_masked(&self.hasher, &key, &group.masks);
        let slots = &self.slots;
        let hasher = &self.hasher;
        let masks = &group.masks;
        match group.buckets.entry(
            hash,
            |b| same_masked(b.key.as_slice(), &key, masks),
            |b| hash_masked(hasher, b.key.as_slice(), masks),
        ) {
            TableEntry::Occupied(mut o) => {
                let b = o.get_mut();
                // Existing entries all have smaller seqs: the new one goes after its rank's.
                let at = b.partition_point(|s| {
                    slots[s as usize].stored.as_ref().is_some_and(|st| st.rank >= rank)
                });
                b.insert(at, index);
            }
            TableEntry::Vacant(v) => {
                v.insert(Bucket { key: MaskedKey::new(key), first: index, rest: Vec::new() });
            }
        }
        *group.ranks.entry(rank).or_insert(0) += 1;
        self.update_order(gid);

        let slot = &mut self.slots[index as usize];
        slot.stored =
            Some(Stored { entry: Entry { matches, priority, action }, rank, seq, group: gid });
        self.len += 1;
        Ok(EntryHandle { index, generation: slot.generation })
    }

    /// Replaces the action data of entry `handle`, returning the old one. The entry keeps its
    /// place among equal priorities.
    pub fn modify(&mut self, handle: EntryHandle, action: A) -> Result<A, TableError> {
        match self.slots.get_mut(handle.index as usize) {
            Some(Slot { generation, stored: Some(st) }) if *generation == handle.generation => {
                Ok(std::mem::replace(&mut st.entry.action, action))
            }
            _ => Err(TableError::UnknownHandle(handle)),
        }
    }

    /// Removes entry `handle`, returning it.
    pub fn delete(&mut self, handle: EntryHandle) -> Result<Entry<A>, TableError> {
        let stored = match self.slots.get_mut(handle.index as usize) {
            Some(slot) if slot.generation == handle.generation && slot.stored.is_some() => {
                slot.generation = slot.generation.wrapping_add(1);
                slot.stored.take()
            }
            _ => None,
        };
        let Some(stored) = stored else {
            return Err(TableError::UnknownHandle(handle));
        };
        self.free_slots.push(handle.index);
        self.len -= 1;

        let gid = stored.group;
        let (_, key) = self.tuple(&stored.entry.matches);
        let group = &mut self.groups[gid as usize];
        let hash = hash_masked(&self.hasher, &key, &group.masks);
        let masks = &group.masks;
        if let Ok(mut o) =
            group.buckets.find_entry(hash, |b| same_masked(b.key.as_slice(), &key, masks))
            && !o.get_mut().remove(handle.index)
        {
            o.remove();
        }
        if let Some(n) = group.ranks.get_mut(&stored.rank) {
            *n -= 1;
            if *n == 0 {
                group.ranks.remove(&stored.rank);
            }
        }
        if group.ranks.is_empty() {
            self.order.retain(|&g| g != gid);
            self.group_ids.remove(&group.masks);
            self.free_groups.push(gid);
        } else {
            self.update_order(gid);
        }
        Ok(stored.entry)
    }

    /// Removes every entry. Handles given before stay invalid.
    pub fn clear(&mut self) {
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.stored.take().is_some() {
                slot.generation = slot.generation.wrapping_add(1);
                self.free_slots.push(i as u32);
            }
        }
        self.len = 0;
        self.groups.clear();
        self.free_groups.clear();
        self.group_ids.clear();
        self.order.clear();
    }

    /// The entry `handle` names, if it exists.
    pub fn get(&self, handle: EntryHandle) -> Option<&Entry<A>> {
        match self.slots.get(handle.index as usize) {
            Some(Slot { generation, stored: Some(st) }) if *generation == handle.generation => {
                Some(&st.entry)
            }
            _ => None,
        }
    }

    /// Every entry with its handle, by handle index (for a table dump).
    pub fn iter(&self) -> impl Iterator<Item = (EntryHandle, &Entry<A>)> + '_ {
        self.slots.iter().enumerate().filter_map(|(i, slot)| {
            let st = slot.stored.as_ref()?;
            Some((EntryHandle { index: i as u32, generation: slot.generation }, &st.entry))
        })
    }

    /// The entry whose match is exactly `matches` once normalised (and, in a priority table,
    /// whose priority is `priority`), as for delete-by-key. `priority` is ignored in other
    /// tables. Errors as [`Table::insert`] for an invalid match or a missing priority.
    pub fn find(
        &self,
        matches: &[FieldMatch],
        priority: Option<i64>,
    ) -> Result<Option<EntryHandle>, TableError> {
        let matches = self.normalize(matches)?;
        let rank = self.rank(&matches, priority)?;
        let (masks, key) = self.tuple(&matches);
        Ok(self.find_normalized(&matches, rank, &masks, &key))
    }

    /// The entry `key` (one value per field, each truncated to its field's width) hits, with
    /// its action data; `None` on a miss or a key of the wrong length.
    pub fn lookup(&self, key: &[u128]) -> Option<(EntryHandle, &A)> {
        if key.len() != self.fields.len() {
            return None;
        }
        let mut best: Option<(u32, &Stored<A>)> = None;
        for &gid in &self.order {
            let group = &self.groups[gid as usize];
            if best.is_some_and(|(_, b)| group.max_rank < b.rank) {
                break;
            }
            let masks = &group.masks;
            let hash = hash_masked(&self.hasher, key, masks);
            let Some(bucket) =
                group.buckets.find(hash, |b| same_masked(b.key.as_slice(), key, masks))
            else {
                continue;
            };
            for s in bucket.iter() {
                let Some(st) = self.slots[s as usize].stored.as_ref() else {
                    continue;
                };
                if best.is_some_and(|(_, b)| (st.rank, b.seq) <= (b.rank, st.seq)) {
                    // This and the rest of the bucket lose to the best so far.
                    break;
                }
                if self.ranges_match(st, key) {
                    best = Some((s, st));
                    break;
                }
            }
        }
        best.map(|(s, st)| {
            let generation = self.slots[s as usize].generation;
            (EntryHandle { index: s, generation }, &st.entry.action)
        })
    }

    /// Whether the range fields of `st` match `key`.
    fn ranges_match(&self, st: &Stored<A>, key: &[u128]) -> bool {
        self.range_fields.iter().all(|&f| match st.entry.matches[f] {
            FieldMatch::Range { lo, hi } => {
                let k = key[f] & self.fields[f].wmask;
                lo <= k && k <= hi
            }
            _ => true,
        })
    }

    /// Checks `matches` against the key and normalises it.
    fn normalize(&self, matches: &[FieldMatch]) -> Result<Box<[FieldMatch]>, TableError> {
        if self.fields.is_empty() {
            return Err(TableError::NoKey);
        }
        if matches.len() != self.fields.len() {
            return Err(TableError::FieldCount { expected: self.fields.len(), got: matches.len() });
        }
        let mut out = Vec::with_capacity(matches.len());
        for (i, (m, f)) in matches.iter().zip(self.fields.iter()).enumerate() {
            if m.kind() != f.kind {
                return Err(TableError::KindMismatch { field: i, expected: f.kind, got: m.kind() });
            }
            let fits = |v: u128| {
                if v & !f.wmask == 0 {
                    Ok(v)
                } else {
                    Err(TableError::TooWide { field: i, width: f.width })
                }
            };
            out.push(match *m {
                FieldMatch::Exact(v) => FieldMatch::Exact(fits(v)?),
                FieldMatch::Ternary { value, mask } => {
                    let (value, mask) = (fits(value)?, fits(mask)?);
                    FieldMatch::Ternary { value: value & mask, mask }
                }
                FieldMatch::Lpm { value, len } => {
                    let value = fits(value)?;
                    if len > f.width {
                        return Err(TableError::PrefixTooLong { field: i, len, width: f.width });
                    }
                    FieldMatch::Lpm { value: value & prefix_mask(f.width, len), len }
                }
                FieldMatch::Range { lo, hi } => {
                    let (lo, hi) = (fits(lo)?, fits(hi)?);
                    if lo > hi {
                        return Err(TableError::InvertedRange { field: i, lo, hi });
                    }
                    FieldMatch::Range { lo, hi }
                }
                FieldMatch::Optional(v) => FieldMatch::Optional(v.map(fits).transpose()?),
            });
        }
        Ok(out.into_boxed_slice())
    }

    /// The rank of a normalised entry and the priority it keeps.
    fn rank(
        &self,
        matches: &[FieldMatch],
        priority: Option<i64>,
    ) -> Result<(i64, Option<i64>), TableError> {
        match self.kind {
            TableKind::Priority => match priority {
                Some(p) => Ok((p, Some(p))),
                None => Err(TableError::MissingPriority),
            },
            TableKind::Lpm => {
                let len = matches.iter().find_map(|m| match m {
                    FieldMatch::Lpm { len, .. } => Some(*len),
                    _ => None,
                });
                Ok((i64::from(len.unwrap_or(0)), None))
            }
            TableKind::Exact => Ok((0, None)),
        }
    }

    /// The mask tuple of a normalised entry and its masked key.
    fn tuple(&self, matches: &[FieldMatch]) -> (Box<[u128]>, Box<[u128]>) {
        let (masks, key): (Vec<u128>, Vec<u128>) = matches
            .iter()
            .zip(self.fields.iter())
            .map(|(m, f)| match *m {
                FieldMatch::Exact(v) | FieldMatch::Optional(Some(v)) => (f.wmask, v),
                FieldMatch::Ternary { value, mask } => (mask, value),
                FieldMatch::Lpm { value, len } => (prefix_mask(f.width, len), value),
                FieldMatch::Range { .. } | FieldMatch::Optional(None) => (0, 0),
            })
            .unzip();
        (masks.into_boxed_slice(), key.into_boxed_slice())
    }

    /// The entry with this normalised match, rank and priority (its masks and masked key
    /// given).
    fn find_normalized(
        &self,
        matches: &[FieldMatch],
        (rank, priority): (i64, Option<i64>),
        masks: &[u128],
        key: &[u128],
    ) -> Option<EntryHandle> {
        let &gid = self.group_ids.get(masks)?;
        let group = &self.groups[gid as usize];
        let hash = hash_masked(&self.hasher, key, masks);
        let bucket = group.buckets.find(hash, |b| same_masked(b.key.as_slice(), key, masks))?;
        // The bucket is sorted by rank: only the entries of this rank can be the same.
        let rank_of = |s: u32| self.slots[s as usize].stored.as_ref().map(|st| st.rank);
        let start = bucket.partition_point(|s| rank_of(s) > Some(rank));
        bucket.iter().skip(start).take_while(|&s| rank_of(s) == Some(rank)).find_map(|s| {
            let slot = &self.slots[s as usize];
            let st = slot.stored.as_ref()?;
            (*st.entry.matches == *matches && st.entry.priority == priority)
                .then_some(EntryHandle { index: s, generation: slot.generation })
        })
    }

    /// A new, empty group for `masks`, registered but not yet in `order`.
    fn new_group(&mut self, masks: Box<[u128]>) -> u32 {
        let group = Group {
            masks: masks.clone(),
            buckets: HashTable::new(),
            ranks: BTreeMap::new(),
            max_rank: i64::MIN,
        };
        let gid = match self.free_groups.pop() {
            Some(g) => {
                self.groups[g as usize] = group;
                g
            }
            None => {
                self.groups.push(group);
                (self.groups.len() - 1) as u32
            }
        };
        self.group_ids.insert(masks, gid);
        gid
    }

    /// Puts group `gid` (with entries) at its place in `order` after its ranks changed.
    fn update_order(&mut self, gid: u32) {
        let group = &mut self.groups[gid as usize];
        let Some((&max, _)) = group.ranks.last_key_value() else {
            return;
        };
        let placed = self.order.contains(&gid);
        if placed && group.max_rank == max {
            return;
        }
        group.max_rank = max;
        if placed {
            self.order.retain(|&g| g != gid);
        }
        let groups = &self.groups;
        let at = self.order.partition_point(|&g| groups[g as usize].max_rank >= max);
        self.order.insert(at, gid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use FieldMatch::*;
    use MatchKind as K;

    fn t(fields: &[(MatchKind, u32)]) -> Table<u32> {
        Table::new(fields, 16).unwrap()
    }

    fn hit(t: &Table<u32>, key: &[u128]) -> Option<u32> {
        t.lookup(key).map(|(_, a)| *a)
    }

    #[test]
    fn masks() {
        assert_eq!(width_mask(1), 1);
        assert_eq!(width_mask(8), 0xff);
        assert_eq!(width_mask(128), u128::MAX);
        assert_eq!(prefix_mask(8, 0), 0);
        assert_eq!(prefix_mask(8, 3), 0xe0);
        assert_eq!(prefix_mask(8, 8), 0xff);
        assert_eq!(prefix_mask(128, 1), 1 << 127);
        assert_eq!(prefix_mask(128, 128), u128::MAX);
    }

    #[test]
    fn kinds() {
        assert_eq!(t(&[(K::Exact, 8)]).kind(), TableKind::Exact);
        assert_eq!(t(&[]).kind(), TableKind::Exact);
        assert_eq!(t(&[(K::Exact, 8), (K::Lpm, 32)]).kind(), TableKind::Lpm);
        assert_eq!(t(&[(K::Lpm, 32), (K::Optional, 1)]).kind(), TableKind::Priority);
        assert_eq!(t(&[(K::Lpm, 32), (K::Lpm, 32), (K::Range, 1)]).kind(), TableKind::Priority);
        assert_eq!(t(&[(K::Ternary, 3)]).fields().collect::<Vec<_>>(), [(K::Ternary, 3)]);
    }

    #[test]
    fn construction_errors() {
        let e = Table::<u32>::new(&[(K::Exact, 8), (K::Exact, 0)], 1).unwrap_err();
        assert_eq!(e, TableError::BadWidth { field: 1, width: 0 });
        let e = Table::<u32>::new(&[(K::Exact, 129)], 1).unwrap_err();
        assert_eq!(e, TableError::BadWidth { field: 0, width: 129 });
        let e = Table::<u32>::new(&[(K::Lpm, 8), (K::Lpm, 8)], 1).unwrap_err();
        assert_eq!(e, TableError::MultipleLpm);
    }

    #[test]
    fn entry_errors() {
        let mut x =
            t(&[(K::Exact, 8), (K::Lpm, 8), (K::Ternary, 8), (K::Range, 8), (K::Optional, 8)]);
        let ok = [
            Exact(1),
            Lpm { value: 2, len: 8 },
            Ternary { value: 3, mask: 0xff },
            Range { lo: 1, hi: 2 },
            Optional(None),
        ];
        let with = |i: usize, m: FieldMatch| {
            let mut v = ok;
            v[i] = m;
            v
        };
        let mut check = |m: &[FieldMatch], p: Option<i64>, e: TableError| {
            assert_eq!(x.insert(m, p, 0), Err(e.clone()), "{m:?}");
            assert_eq!(x.find(m, p), Err(e));
        };
        check(&ok[..4], Some(1), TableError::FieldCount { expected: 5, got: 4 });
        check(
            &with(0, Optional(None)),
            Some(1),
            TableError::KindMismatch { field: 0, expected: K::Exact, got: K::Optional },
        );
        check(
            &with(2, Exact(1)),
            Some(1),
            TableError::KindMismatch { field: 2, expected: K::Ternary, got: K::Exact },
        );
        check(&with(0, Exact(0x100)), Some(1), TableError::TooWide { field: 0, width: 8 });
        check(
            &with(1, Lpm { value: 0x100, len: 0 }),
            Some(1),
            TableError::TooWide { field: 1, width: 8 },
        );
        check(
            &with(2, Ternary { value: 0x100, mask: 0 }),
            Some(1),
            TableError::TooWide { field: 2, width: 8 },
        );
        check(
            &with(2, Ternary { value: 0, mask: 0x1ff }),
            Some(1),
            TableError::TooWide { field: 2, width: 8 },
        );
        check(
            &with(3, Range { lo: 0, hi: 0x100 }),
            Some(1),
            TableError::TooWide { field: 3, width: 8 },
        );
        check(&with(4, Optional(Some(0x100))), Some(1), TableError::TooWide { field: 4, width: 8 });
        check(
            &with(1, Lpm { value: 0, len: 9 }),
            Some(1),
            TableError::PrefixTooLong { field: 1, len: 9, width: 8 },
        );
        check(
            &with(3, Range { lo: 3, hi: 2 }),
            Some(1),
            TableError::InvertedRange { field: 3, lo: 3, hi: 2 },
        );
        check(&ok, None, TableError::MissingPriority);
        assert!(x.is_empty());

        let h = x.insert(&ok, Some(1), 7).unwrap();
        assert_eq!(x.insert(&ok, Some(1), 8), Err(TableError::Duplicate(h)));
        assert_eq!(x.find(&ok, Some(1)), Ok(Some(h)));
        assert_eq!(x.find(&ok, Some(2)), Ok(None));
        let h2 = x.insert(&ok, Some(2), 8).unwrap();
        assert_ne!(h, h2);
        assert_eq!(x.len(), 2);

        let mut k: Table<u32> = t(&[]);
        assert_eq!(k.insert(&[], None, 0), Err(TableError::NoKey));
        assert_eq!(k.find(&[], None), Err(TableError::NoKey));
        assert_eq!(k.lookup(&[]), None);
    }

    #[test]
    fn full_and_handles() {
        let mut x: Table<u32> = Table::new(&[(K::Exact, 8)], 2).unwrap();
        let a = x.insert(&[Exact(1)], None, 1).unwrap();
        let b = x.insert(&[Exact(2)], Some(5), 2).unwrap();
        assert_eq!(x.get(b).unwrap().priority(), None, "priority ignored");
        // A duplicate is reported before fullness.
        assert_eq!(x.insert(&[Exact(1)], None, 3), Err(TableError::Duplicate(a)));
        assert_eq!(x.insert(&[Exact(3)], None, 3), Err(TableError::Full { size: 2 }));
        assert_eq!(x.modify(a, 10), Ok(1));
        assert_eq!(hit(&x, &[1]), Some(10));
        let gone = x.delete(a).unwrap();
        assert_eq!((gone.matches(), gone.priority()), (&[Exact(1)][..], None));
        assert_eq!(gone.into_action(), 10);
        assert_eq!(x.delete(a), Err(TableError::UnknownHandle(a)));
        assert_eq!(x.modify(a, 0), Err(TableError::UnknownHandle(a)));
        assert!(x.get(a).is_none());
        let c = x.insert(&[Exact(3)], None, 3).unwrap();
        assert_ne!(a, c, "a stale handle does not name the new entry");
        assert_eq!(x.get(c).map(|e| *e.action()), Some(3));
        assert_eq!(EntryHandle::from_raw(c.to_raw()), c);
        let never = EntryHandle::from_raw(99);
        assert_eq!(x.delete(never), Err(TableError::UnknownHandle(never)));
        assert_eq!(hit(&x, &[1]), None);
        assert_eq!(hit(&x, &[3]), Some(3));
        assert_eq!(x.iter().map(|(h, e)| (h, *e.action())).collect::<Vec<_>>(), [(c, 3), (b, 2)]);
        x.clear();
        assert!(x.is_empty());
        assert_eq!(x.iter().count(), 0);
        assert_eq!(hit(&x, &[3]), None);
        assert_eq!(x.get(c), None);
        x.insert(&[Exact(3)], None, 4).unwrap();
        assert_eq!(hit(&x, &[3]), Some(4));
    }

    #[test]
    fn exact() {
        let mut x = t(&[(K::Exact, 48), (K::Exact, 128)]);
        x.insert(&[Exact(1), Exact(u128::MAX)], None, 1).unwrap();
        x.insert(&[Exact(1), Exact(2)], None, 2).unwrap();
        assert_eq!(hit(&x, &[1, u128::MAX]), Some(1));
        assert_eq!(hit(&x, &[1, 2]), Some(2));
        assert_eq!(hit(&x, &[1 | 1 << 48, 2]), Some(2), "keys are truncated to the width");
        assert_eq!(hit(&x, &[2, 2]), None);
        assert_eq!(hit(&x, &[1]), None, "wrong key length");
    }

    #[test]
    fn lpm_longest_wins_and_values_are_normalised() {
        let mut x = t(&[(K::Exact, 8), (K::Lpm, 32)]);
        x.insert(&[Exact(1), Lpm { value: 0x0a00_0000, len: 8 }], None, 8).unwrap();
        let h = x.insert(&[Exact(1), Lpm { value: 0x0a01_ffff, len: 16 }], None, 16).unwrap();
        x.insert(&[Exact(1), Lpm { value: 0, len: 0 }], None, 0).unwrap();
        x.insert(&[Exact(2), Lpm { value: 0x0a01_0203, len: 32 }], None, 32).unwrap();
        assert_eq!(x.get(h).unwrap().matches()[1], Lpm { value: 0x0a01_0000, len: 16 });
        assert_eq!(
            x.insert(&[Exact(1), Lpm { value: 0x0a01_1234, len: 16 }], None, 0),
            Err(TableError::Duplicate(h))
        );
        assert_eq!(x.find(&[Exact(1), Lpm { value: 0x0a01_9999, len: 16 }], None), Ok(Some(h)));
        assert_eq!(hit(&x, &[1, 0x0a01_0203]), Some(16));
        assert_eq!(hit(&x, &[1, 0x0a02_0203]), Some(8));
        assert_eq!(hit(&x, &[1, 0x0b02_0203]), Some(0));
        assert_eq!(hit(&x, &[2, 0x0a01_0203]), Some(32));
        assert_eq!(hit(&x, &[2, 0x0a01_0204]), None);
        x.delete(h).unwrap();
        assert_eq!(hit(&x, &[1, 0x0a01_0203]), Some(8));
    }

    #[test]
    fn priority_largest_wins_then_first_inserted() {
        let mut x = t(&[(K::Ternary, 8)]);
        x.insert(&[Ternary { value: 0, mask: 0 }], Some(1), 1).unwrap();
        let h = x.insert(&[Ternary { value: 0xf3, mask: 0xf0 }], Some(5), 5).unwrap();
        assert_eq!(x.get(h).unwrap().matches(), [Ternary { value: 0xf0, mask: 0xf0 }]);
        assert_eq!(hit(&x, &[0xf7]), Some(5));
        assert_eq!(hit(&x, &[0x07]), Some(1));
        // Equal priority: the earlier entry wins, whichever group it is in.
        x.insert(&[Ternary { value: 0x07, mask: 0x0f }], Some(5), 6).unwrap();
        assert_eq!(hit(&x, &[0xf7]), Some(5));
        assert_eq!(hit(&x, &[0x07]), Some(6));
        x.insert(&[Ternary { value: 0xf7, mask: 0xff }], Some(-3), 7).unwrap();
        assert_eq!(hit(&x, &[0xf7]), Some(5));
        // Same match, different priority: both kept, the larger wins.
        let low = x.insert(&[Ternary { value: 0xf0, mask: 0xf0 }], Some(2), 2).unwrap();
        let high = x.insert(&[Ternary { value: 0xf0, mask: 0xf0 }], Some(9), 9).unwrap();
        assert_eq!(hit(&x, &[0xf1]), Some(9));
        x.delete(high).unwrap();
        assert_eq!(hit(&x, &[0xf1]), Some(5));
        x.delete(h).unwrap();
        assert_eq!(hit(&x, &[0xf1]), Some(2));
        x.delete(low).unwrap();
        assert_eq!(hit(&x, &[0xf1]), Some(1));
        // Modify keeps the entry's place.
        let first = x.find(&[Ternary { value: 0, mask: 0 }], Some(1)).unwrap().unwrap();
        x.insert(&[Ternary { value: 1, mask: 1 }], Some(1), 11).unwrap();
        x.modify(first, 100).unwrap();
        assert_eq!(hit(&x, &[0xf1]), Some(100));
    }

    #[test]
    fn range_optional_and_lpm_as_mask() {
        let mut x = t(&[(K::Range, 16), (K::Optional, 8), (K::Lpm, 8)]);
        x.insert(&[Range { lo: 10, hi: 20 }, Optional(None), Lpm { value: 0, len: 0 }], Some(1), 1)
            .unwrap();
        x.insert(
            &[Range { lo: 15, hi: 15 }, Optional(Some(3)), Lpm { value: 0x80, len: 1 }],
            Some(2),
            2,
        )
        .unwrap();
        x.insert(
            &[Range { lo: 0, hi: 0xffff }, Optional(Some(3)), Lpm { value: 0xc0, len: 2 }],
            Some(0),
            3,
        )
        .unwrap();
        assert_eq!(hit(&x, &[15, 3, 0x80]), Some(2));
        assert_eq!(hit(&x, &[15, 4, 0x80]), Some(1));
        assert_eq!(hit(&x, &[16, 3, 0xc0]), Some(1));
        assert_eq!(hit(&x, &[21, 3, 0xc0]), Some(3));
        assert_eq!(hit(&x, &[21, 3, 0x80]), None);
        assert_eq!(hit(&x, &[0x1_000f, 3, 0x80]), Some(2), "range keys truncated too");
    }

    #[test]
    fn field_match_matches() {
        assert!(Exact(3).matches(3, 8));
        assert!(Ternary { value: 0x12, mask: 0xf0 }.matches(0x1f, 8));
        assert!(Lpm { value: 0x80, len: 1 }.matches(0xff, 8));
        assert!(!Lpm { value: 0x80, len: 1 }.matches(0x7f, 8));
        assert!(Lpm { value: 0, len: 0 }.matches(u128::MAX, 128));
        assert!(Range { lo: 1, hi: 2 }.matches(2, 8));
        assert!(Optional(None).matches(9, 8));
        assert!(!Optional(Some(1)).matches(9, 8));
        // Out-of-range widths and lengths do not panic.
        assert!(Lpm { value: 1, len: 300 }.matches(1, 200));
        assert!(!Lpm { value: 1, len: 9 }.matches(0, 8));
    }

    #[test]
    fn errors_display() {
        assert_eq!(TableError::Full { size: 3 }.to_string(), "table full (3 entries)");
        let e = TableError::KindMismatch { field: 1, expected: K::Lpm, got: K::Exact };
        assert_eq!(e.to_string(), "key field 1: exact match for a lpm field");
    }
}
