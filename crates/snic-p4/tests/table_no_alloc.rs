//! Table lookups allocate nothing, hit or miss, for every kind of table.
//!
//! Checked with dhat's heap profiler in testing mode (this test binary holds only this test).

use snic_p4::table::{FieldMatch, MatchKind, Table};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// A table with `fields`, filled by `entry(i)` for `i` in `0..n`.
fn filled(
    fields: &[(MatchKind, u32)],
    n: u128,
    entry: impl Fn(u128) -> Vec<FieldMatch>,
) -> Table<u128> {
    let mut t = Table::new(fields, 10_000).unwrap();
    for i in 0..n {
        t.insert(&entry(i), Some(i as i64 % 7), i).unwrap();
    }
    t
}

#[test]
fn lookups_do_not_allocate() {
    use FieldMatch as F;
    use MatchKind as K;
    let exact =
        filled(&[(K::Exact, 48), (K::Exact, 128)], 500, |i| vec![F::Exact(i), F::Exact(i << 64)]);
    let lpm = filled(&[(K::Exact, 8), (K::Lpm, 32)], 500, |i| {
        vec![F::Exact(i % 4), F::Lpm { value: i << 20, len: 8 + (i % 25) as u32 }]
    });
    let priority = filled(&[(K::Ternary, 32), (K::Range, 16), (K::Optional, 9)], 500, |i| {
        vec![
            F::Ternary { value: i << 8, mask: 0xffff_ff00 >> (i % 8) },
            F::Range { lo: i % 100, hi: 100 + i },
            F::Optional((i % 3 != 0).then_some(i % 512)),
        ]
    });
    let _profiler = dhat::Profiler::builder().testing().build();
    let before = dhat::HeapStats::get().total_blocks;
    let mut hits = [0usize; 3];
    for i in 0..2000u128 {
        let a = i % 600;
        hits[0] += usize::from(exact.lookup(&[a, a << 64]).is_some());
        hits[1] += usize::from(lpm.lookup(&[i % 5, (i << 20) & 0xffff_ffff]).is_some());
        let key = [(i << 8) & 0xffff_ffff, i % 200, i % 512];
        hits[2] += usize::from(priority.lookup(&key).is_some());
    }
    let allocs = dhat::HeapStats::get().total_blocks - before;
    assert_eq!(allocs, 0, "lookups allocated {allocs} blocks");
    assert!(hits.iter().all(|&h| h > 0 && h < 2000), "hits and misses: {hits:?}");
    let mut t = Table::new(&[(K::Exact, 8)], 1).unwrap();
    t.insert(&[F::Exact(1)], None, ()).unwrap();
    assert!(dhat::HeapStats::get().total_blocks > before, "the count works");
}
