//! Tables against a reference: a list of entries scanned in full on every lookup, written from
//! the rules (BMv2's) rather than from the table's code.
//!
//! Each case builds a table, runs a random sequence of inserts (some invalid, some duplicate),
//! deletes, modifies, finds, clears and lookups on both, and compares every result. Entries are
//! drawn from small value pools and lookup keys mostly derived from live entries, so that
//! entries overlap and lookups hit.

use proptest::prelude::*;
use snic_p4::table::{EntryHandle, FieldMatch, MatchKind, Table, TableError};

/// A small, seedable generator, so one proptest-drawn seed decides an operation's details
/// given the state it meets.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn wide(&mut self) -> u128 {
        (u128::from(self.next()) << 64) | u128::from(self.next())
    }
}

fn ones(width: u32) -> u128 {
    if width == 128 { u128::MAX } else { (1u128 << width) - 1 }
}

/// The top `len` of `width` bits, computed differently from the table.
fn top_bits(width: u32, len: u32) -> u128 {
    (0..len).fold(0, |m, i| m | 1u128 << (width - 1 - i))
}

/// A value of `width` bits, usually from a small pool.
fn value(rng: &mut Rng, width: u32) -> u128 {
    let w = ones(width);
    match rng.below(6) {
        0 | 1 => u128::from(rng.below(4)) & w,
        2 => w,
        3 => w ^ u128::from(rng.below(4)) & w,
        4 => 1u128 << rng.below(u64::from(width)),
        _ => rng.wide() & w,
    }
}

fn prefix_len(rng: &mut Rng, width: u32) -> u32 {
    match rng.below(5) {
        0 => 0,
        1 => width,
        2 => width / 2,
        _ => rng.below(u64::from(width) + 1) as u32,
    }
}

/// A valid field match for a field (not normalised: don't-care bits are often set).
fn field_match(rng: &mut Rng, kind: MatchKind, width: u32) -> FieldMatch {
    let w = ones(width);
    match kind {
        MatchKind::Exact => FieldMatch::Exact(value(rng, width)),
        MatchKind::Ternary => {
            let mask = match rng.below(5) {
                0 => 0,
                1 => w,
                2 => top_bits(width, prefix_len(rng, width)),
                _ => rng.wide() & w,
            };
            let v = value(rng, width);
            let value = if rng.chance(50) { v & mask } else { v };
            FieldMatch::Ternary { value, mask }
        }
        MatchKind::Lpm => FieldMatch::Lpm { value: value(rng, width), len: prefix_len(rng, width) },
        MatchKind::Range => {
            let (a, b) = match rng.below(5) {
                0 => (0, w),
                1 => {
                    let v = value(rng, width);
                    (v, v)
                }
                _ => (value(rng, width), value(rng, width)),
            };
            FieldMatch::Range { lo: a.min(b), hi: a.max(b) }
        }
        MatchKind::Optional => {
            FieldMatch::Optional(if rng.chance(40) { None } else { Some(value(rng, width)) })
        }
    }
}

/// Makes one field of a match invalid (or of the wrong kind).
fn spoil(rng: &mut Rng, m: &mut [FieldMatch], fields: &[(MatchKind, u32)]) {
    let i = rng.below(m.len() as u64) as usize;
    let (kind, width) = fields[i];
    let over = if width == 128 { None } else { Some(1u128 << width) };
    m[i] = match (rng.below(3), over) {
        (0, Some(big)) => match kind {
            MatchKind::Exact => FieldMatch::Exact(big),
            MatchKind::Ternary => FieldMatch::Ternary { value: 0, mask: big | 1 },
            MatchKind::Lpm => FieldMatch::Lpm { value: big, len: 0 },
            MatchKind::Range => FieldMatch::Range { lo: 0, hi: big },
            MatchKind::Optional => FieldMatch::Optional(Some(big)),
        },
        (1, _) if kind == MatchKind::Lpm => FieldMatch::Lpm { value: 0, len: width + 1 },
        (1, _) if kind == MatchKind::Range && width > 1 => FieldMatch::Range { lo: 2, hi: 1 },
        _ => match kind {
            MatchKind::Exact => FieldMatch::Optional(None),
            _ => FieldMatch::Exact(0),
        },
    };
}

/// How the reference picks a winner.
#[derive(Debug, Clone, Copy, PartialEq)]
enum RefKind {
    Exact,
    Lpm,
    Priority,
}

#[derive(Debug, Clone)]
struct RefEntry {
    handle: EntryHandle,
    matches: Vec<FieldMatch>,
    priority: Option<i64>,
    action: u32,
    seq: u64,
}

/// The reference table: entries in a list.
#[derive(Debug)]
struct Reference {
    fields: Vec<(MatchKind, u32)>,
    kind: RefKind,
    size: usize,
    entries: Vec<RefEntry>,
    seq: u64,
}

impl Reference {
    fn new(fields: &[(MatchKind, u32)], size: usize) -> Result<Reference, TableError> {
        let has = |k| fields.iter().any(|f| f.0 == k);
        let lpms = fields.iter().filter(|f| f.0 == MatchKind::Lpm).count();
        let kind = if has(MatchKind::Ternary) || has(MatchKind::Range) || has(MatchKind::Optional) {
            RefKind::Priority
        } else if lpms > 1 {
            return Err(TableError::MultipleLpm);
        } else if lpms == 1 {
            RefKind::Lpm
        } else {
            RefKind::Exact
        };
        Ok(Reference { fields: fields.to_vec(), kind, size, entries: Vec::new(), seq: 0 })
    }

    /// Checks and normalises a match as BMv2 would.
    fn normalise(&self, m: &[FieldMatch]) -> Result<Vec<FieldMatch>, TableError> {
        if self.fields.is_empty() {
            return Err(TableError::NoKey);
        }
        if m.len() != self.fields.len() {
            return Err(TableError::FieldCount { expected: self.fields.len(), got: m.len() });
        }
        let mut out = Vec::new();
        for (field, (fm, &(kind, width))) in m.iter().zip(&self.fields).enumerate() {
            let too_wide = |v: u128| width < 128 && v >> width != 0;
            let wide = Err(TableError::TooWide { field, width });
            out.push(match (kind, *fm) {
                (MatchKind::Exact, FieldMatch::Exact(v)) => {
                    if too_wide(v) {
                        return wide;
                    }
                    FieldMatch::Exact(v)
                }
                (MatchKind::Ternary, FieldMatch::Ternary { value, mask }) => {
                    if too_wide(value) || too_wide(mask) {
                        return wide;
                    }
                    FieldMatch::Ternary { value: value & mask, mask }
                }
                (MatchKind::Lpm, FieldMatch::Lpm { value, len }) => {
                    if too_wide(value) {
                        return wide;
                    }
                    if len > width {
                        return Err(TableError::PrefixTooLong { field, len, width });
                    }
                    FieldMatch::Lpm { value: value & top_bits(width, len), len }
                }
                (MatchKind::Range, FieldMatch::Range { lo, hi }) => {
                    if too_wide(lo) || too_wide(hi) {
                        return wide;
                    }
                    if lo > hi {
                        return Err(TableError::InvertedRange { field, lo, hi });
                    }
                    FieldMatch::Range { lo, hi }
                }
                (MatchKind::Optional, FieldMatch::Optional(v)) => {
                    if v.is_some_and(too_wide) {
                        return wide;
                    }
                    FieldMatch::Optional(v)
                }
                (expected, got) => {
                    let got = match got {
                        FieldMatch::Exact(_) => MatchKind::Exact,
                        FieldMatch::Ternary { .. } => MatchKind::Ternary,
                        FieldMatch::Lpm { .. } => MatchKind::Lpm,
                        FieldMatch::Range { .. } => MatchKind::Range,
                        FieldMatch::Optional(_) => MatchKind::Optional,
                    };
                    return Err(TableError::KindMismatch { field, expected, got });
                }
            });
        }
        Ok(out)
    }

    /// The normalised match and kept priority, or the error.
    fn check(
        &self,
        m: &[FieldMatch],
        priority: Option<i64>,
    ) -> Result<(Vec<FieldMatch>, Option<i64>), TableError> {
        let m = self.normalise(m)?;
        match self.kind {
            RefKind::Priority if priority.is_none() => Err(TableError::MissingPriority),
            RefKind::Priority => Ok((m, priority)),
            _ => Ok((m, None)),
        }
    }

    fn find(&self, m: &[FieldMatch], priority: Option<i64>) -> Option<EntryHandle> {
        self.entries.iter().find(|e| e.matches == m && e.priority == priority).map(|e| e.handle)
    }

    /// What inserting should give: `Ok(normalised, priority)` or the error.
    fn expect_insert(
        &self,
        m: &[FieldMatch],
        priority: Option<i64>,
    ) -> Result<(Vec<FieldMatch>, Option<i64>), TableError> {
        let (m, priority) = self.check(m, priority)?;
        if let Some(h) = self.find(&m, priority) {
            return Err(TableError::Duplicate(h));
        }
        if self.entries.len() >= self.size {
            return Err(TableError::Full { size: self.size });
        }
        Ok((m, priority))
    }

    fn field_hits(fm: &FieldMatch, key: u128, width: u32) -> bool {
        match *fm {
            FieldMatch::Exact(v) => key == v,
            FieldMatch::Ternary { value, mask } => key & mask == value & mask,
            FieldMatch::Lpm { value, len } => {
                len == 0 || key >> (width - len) == value >> (width - len)
            }
            FieldMatch::Range { lo, hi } => (lo..=hi).contains(&key),
            FieldMatch::Optional(v) => v.is_none_or(|v| v == key),
        }
    }

    fn lookup(&self, key: &[u128]) -> Option<(EntryHandle, u32)> {
        if key.len() != self.fields.len() {
            return None;
        }
        let key: Vec<u128> = key.iter().zip(&self.fields).map(|(k, f)| k & ones(f.1)).collect();
        let hits: Vec<&RefEntry> = self
            .entries
            .iter()
            .filter(|e| {
                e.matches
                    .iter()
                    .zip(&key)
                    .zip(&self.fields)
                    .all(|((fm, &k), &(_, w))| Self::field_hits(fm, k, w))
            })
            .collect();
        let best = match self.kind {
            RefKind::Exact => {
                assert!(hits.len() <= 1, "two exact entries match one key: {hits:?}");
                hits.first().copied()
            }
            RefKind::Lpm => {
                let len = |e: &RefEntry| {
                    e.matches.iter().find_map(|m| match m {
                        FieldMatch::Lpm { len, .. } => Some(*len),
                        _ => None,
                    })
                };
                let best = hits.iter().copied().max_by_key(|e| len(e));
                if let Some(b) = best {
                    let ties = hits.iter().filter(|e| len(e) == len(b)).count();
                    assert_eq!(ties, 1, "two lpm entries of one length match one key");
                }
                best
            }
            RefKind::Priority => {
                let mut best: Option<&RefEntry> = None;
                for e in hits {
                    let better = match best {
                        None => true,
                        Some(b) => {
                            e.priority > b.priority || (e.priority == b.priority && e.seq < b.seq)
                        }
                    };
                    if better {
                        best = Some(e);
                    }
                }
                best
            }
        };
        best.map(|e| (e.handle, e.action))
    }
}

/// A key that the entry `m` matches (bits outside what it looks at drawn at random).
fn key_for(rng: &mut Rng, m: &[FieldMatch], fields: &[(MatchKind, u32)]) -> Vec<u128> {
    m.iter()
        .zip(fields)
        .map(|(fm, &(_, width))| {
            let w = ones(width);
            let noise = value(rng, width);
            match *fm {
                FieldMatch::Exact(v) | FieldMatch::Optional(Some(v)) => v,
                FieldMatch::Ternary { value, mask } => (value & mask) | (noise & !mask & w),
                FieldMatch::Lpm { value, len } => {
                    let p = top_bits(width, len);
                    (value & p) | (noise & !p & w)
                }
                FieldMatch::Range { lo, hi } => {
                    let span = hi - lo;
                    match rng.below(3) {
                        0 => lo,
                        1 => hi,
                        _ => lo + if span == u128::MAX { noise } else { noise % (span + 1) },
                    }
                }
                FieldMatch::Optional(None) => noise,
            }
        })
        .collect()
}

/// One operation, its details decided by the seed and the state.
#[derive(Debug, Clone, Copy)]
enum Op {
    Insert(u64),
    Delete(u64),
    Modify(u64),
    Find(u64),
    Lookup(u64),
    Clear,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        30 => any::<u64>().prop_map(Op::Insert),
        8 => any::<u64>().prop_map(Op::Delete),
        3 => any::<u64>().prop_map(Op::Modify),
        4 => any::<u64>().prop_map(Op::Find),
        30 => any::<u64>().prop_map(Op::Lookup),
        1 => Just(Op::Clear),
    ];
    prop::collection::vec(op, 1..250)
}

/// Lookups compared per `Lookup` operation.
const LOOKUPS: usize = 4;

fn run(fields: &[(MatchKind, u32)], size: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    let reference = Reference::new(fields, size);
    let table = Table::<u32>::new(fields, size);
    let (mut r, mut t) = match (reference, table) {
        (Ok(r), Ok(t)) => (r, t),
        (Err(a), Err(b)) => {
            prop_assert_eq!(a, b);
            return Ok(());
        }
        (r, t) => return Err(TestCaseError::fail(format!("new: {r:?} vs {t:?}"))),
    };
    let mut dead: Vec<EntryHandle> = Vec::new();
    let mut action = 0u32;
    for &op in ops {
        match op {
            Op::Insert(seed) => {
                let mut rng = Rng(seed);
                let mut m: Vec<FieldMatch> = match r.entries.len() {
                    // Reuse a live entry's match sometimes: a duplicate or another priority.
                    n if n > 0 && rng.chance(15) => {
                        r.entries[rng.below(n as u64) as usize].matches.clone()
                    }
                    _ => fields.iter().map(|&(k, w)| field_match(&mut rng, k, w)).collect(),
                };
                if !m.is_empty() && rng.chance(5) {
                    spoil(&mut rng, &mut m, fields);
                }
                if rng.chance(2) {
                    m.push(FieldMatch::Exact(0));
                }
                let priority = if rng.chance(4) { None } else { Some(rng.below(7) as i64 - 3) };
                action += 1;
                let expect = r.expect_insert(&m, priority);
                let got = t.insert(&m, priority, action);
                match (expect, got) {
                    (Ok((matches, priority)), Ok(handle)) => {
                        prop_assert!(r.entries.iter().all(|e| e.handle != handle));
                        prop_assert!(!dead.contains(&handle), "stale handle reused");
                        let stored = t.get(handle).unwrap();
                        prop_assert_eq!(stored.matches(), &matches[..]);
                        prop_assert_eq!(stored.priority(), priority);
                        r.entries.push(RefEntry { handle, matches, priority, action, seq: r.seq });
                        r.seq += 1;
                    }
                    (Err(a), Err(b)) => prop_assert_eq!(a, b),
                    (a, b) => {
                        return Err(TestCaseError::fail(format!("insert {m:?}: {a:?} vs {b:?}")));
                    }
                }
            }
            Op::Delete(seed) => {
                let mut rng = Rng(seed);
                if r.entries.is_empty() || rng.chance(10) {
                    if let Some(&h) = dead.get(rng.below(dead.len() as u64 + 1) as usize) {
                        prop_assert_eq!(t.delete(h), Err(TableError::UnknownHandle(h)));
                    }
                    continue;
                }
                let e = r.entries.remove(rng.below(r.entries.len() as u64) as usize);
                let got = t.delete(e.handle).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(got.matches(), &e.matches[..]);
                prop_assert_eq!(got.priority(), e.priority);
                prop_assert_eq!(*got.action(), e.action);
                dead.push(e.handle);
            }
            Op::Modify(seed) => {
                let mut rng = Rng(seed);
                action += 1;
                if r.entries.is_empty() {
                    if let Some(&h) = dead.first() {
                        prop_assert_eq!(t.modify(h, action), Err(TableError::UnknownHandle(h)));
                    }
                    continue;
                }
                let i = rng.below(r.entries.len() as u64) as usize;
                let e = &mut r.entries[i];
                prop_assert_eq!(t.modify(e.handle, action), Ok(e.action));
                e.action = action;
            }
            Op::Find(seed) => {
                let mut rng = Rng(seed);
                let (m, priority) = match r.entries.len() {
                    n if n > 0 && rng.chance(60) => {
                        let e = &r.entries[rng.below(n as u64) as usize];
                        // The same match written with other don't-care bits.
                        let m = e
                            .matches
                            .iter()
                            .zip(fields)
                            .map(|(fm, &(_, w))| match *fm {
                                FieldMatch::Ternary { value, mask } => FieldMatch::Ternary {
                                    value: value | (rng.wide() & !mask & ones(w)),
                                    mask,
                                },
                                FieldMatch::Lpm { value, len } => FieldMatch::Lpm {
                                    value: value | (rng.wide() & !top_bits(w, len) & ones(w)),
                                    len,
                                },
                                other => other,
                            })
                            .collect::<Vec<_>>();
                        (m, e.priority)
                    }
                    _ => (
                        fields.iter().map(|&(k, w)| field_match(&mut rng, k, w)).collect(),
                        Some(rng.below(7) as i64 - 3),
                    ),
                };
                let expect = r.check(&m, priority).map(|(m, p)| r.find(&m, p));
                prop_assert_eq!(t.find(&m, priority), expect);
            }
            Op::Lookup(seed) => {
                let mut rng = Rng(seed);
                for _ in 0..LOOKUPS {
                    let mut key = match r.entries.len() {
                        n if n > 0 && rng.chance(75) => {
                            let e = &r.entries[rng.below(n as u64) as usize];
                            key_for(&mut rng, &e.matches, fields)
                        }
                        _ => fields.iter().map(|&(_, w)| value(&mut rng, w)).collect(),
                    };
                    if !key.is_empty() && rng.chance(10) {
                        // Bits beyond a field's width are ignored.
                        let i = rng.below(key.len() as u64) as usize;
                        key[i] |= rng.wide() & !ones(fields[i].1);
                    }
                    if rng.chance(2) {
                        key.pop();
                    }
                    let got = t.lookup(&key).map(|(h, a)| (h, *a));
                    prop_assert_eq!(got, r.lookup(&key), "key {:x?}", key);
                }
            }
            Op::Clear => {
                dead.extend(r.entries.drain(..).map(|e| e.handle));
                t.clear();
            }
        }
        prop_assert_eq!(t.len(), r.entries.len());
    }
    let mut dump: Vec<_> =
        t.iter().map(|(h, e)| (h, e.matches().to_vec(), e.priority(), *e.action())).collect();
    let mut want: Vec<_> =
        r.entries.iter().map(|e| (e.handle, e.matches.clone(), e.priority, e.action)).collect();
    dump.sort_by_key(|d| d.0);
    want.sort_by_key(|d| d.0);
    prop_assert_eq!(dump, want);
    Ok(())
}

fn width() -> impl Strategy<Value = u32> {
    prop_oneof![Just(1u32), Just(3), Just(8), Just(16), Just(32), Just(48), Just(128), 1u32..=128]
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![1 => Just(0usize), 2 => 1usize..8, 6 => Just(1000)]
}

fn kind() -> impl Strategy<Value = MatchKind> {
    prop_oneof![
        Just(MatchKind::Exact),
        Just(MatchKind::Ternary),
        Just(MatchKind::Lpm),
        Just(MatchKind::Range),
        Just(MatchKind::Optional),
    ]
}

/// Fields of the given kinds with random widths.
fn of_kinds(kinds: &'static [MatchKind]) -> impl Strategy<Value = Vec<(MatchKind, u32)>> {
    prop::collection::vec(width(), kinds.len())
        .prop_map(move |w| kinds.iter().copied().zip(w).collect())
}

use MatchKind::{Exact as E, Lpm as L, Optional as O, Range as R, Ternary as T};

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn exact(fields in prop_oneof![of_kinds(&[E]), of_kinds(&[E, E]), of_kinds(&[E, E, E])],
             size in size(), ops in ops()) {
        run(&fields, size, &ops)?;
    }

    #[test]
    fn lpm(fields in of_kinds(&[L]), size in size(), ops in ops()) {
        run(&fields, size, &ops)?;
    }

    #[test]
    fn exact_lpm(fields in prop_oneof![of_kinds(&[E, L]), of_kinds(&[L, E, E])],
                 size in size(), ops in ops()) {
        run(&fields, size, &ops)?;
    }

    #[test]
    fn ternary(fields in prop_oneof![of_kinds(&[T]), of_kinds(&[T, T]), of_kinds(&[E, T])],
               size in size(), ops in ops()) {
        run(&fields, size, &ops)?;
    }

    #[test]
    fn range(fields in prop_oneof![of_kinds(&[R]), of_kinds(&[R, E]), of_kinds(&[R, R])],
             size in size(), ops in ops()) {
        run(&fields, size, &ops)?;
    }

    #[test]
    fn optional(fields in prop_oneof![of_kinds(&[O]), of_kinds(&[O, E]), of_kinds(&[O, O])],
                size in size(), ops in ops()) {
        run(&fields, size, &ops)?;
    }

    #[test]
    fn mixed(fields in prop::collection::vec((kind(), width()), 0..=5),
             size in size(), ops in ops()) {
        run(&fields, size, &ops)?;
    }

    /// Narrow fields and few values: many entries overlap and tie.
    #[test]
    fn mixed_narrow(kinds in prop::collection::vec(kind(), 1..=4),
                    size in size(), ops in ops()) {
        let fields: Vec<_> = kinds.into_iter().map(|k| (k, 2)).collect();
        run(&fields, size, &ops)?;
    }
}
