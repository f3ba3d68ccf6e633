//! The runtime maps against the Linux semantics of each type: flags, error codes, per-CPU
//! layout, LRU eviction, longest-prefix match, ring-buffer records; models under random
//! operations; hot-swap rebinding; concurrent updates.

use proptest::prelude::*;
use snic_ebpf::maps::{
    BPF_ANY, BPF_EXIST, BPF_NOEXIST, Map, MapError, MapSet, Origin, errno, format_hex, parse_bytes,
    parse_hex,
};
use snic_ebpf::{MapKind, MapSpec, Object};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

fn spec(name: &str, kind: MapKind, key: u32, value: u32, max: u32) -> MapSpec {
    MapSpec {
        name: name.into(),
        kind,
        key_size: key,
        value_size: value,
        max_entries: max,
        data: None,
        readonly: false,
    }
}

fn k(i: u32) -> [u8; 4] {
    i.to_ne_bytes()
}

fn u64v(v: u64) -> [u8; 8] {
    v.to_ne_bytes()
}

fn lpm_key(plen: u32, addr: [u8; 4]) -> Vec<u8> {
    let mut v = plen.to_ne_bytes().to_vec();
    v.extend_from_slice(&addr);
    v
}

fn object(maps: Vec<MapSpec>) -> Object {
    Object { programs: Vec::new(), maps, license: None }
}

#[test]
fn spec_validation_refuses_bad_sizes_without_panicking() {
    let bad = [
        spec("a", MapKind::Array, 4, 0, 4),
        spec("a", MapKind::Array, 4, 8, 0),
        spec("a", MapKind::Array, 8, 8, 4),
        spec("h", MapKind::Hash, 0, 8, 4),
        spec("h", MapKind::Hash, 4, 8, u32::MAX),
        spec("h", MapKind::Hash, 600, 8, 4),
        spec("a", MapKind::Array, 4, u32::MAX, 1),
        spec("a", MapKind::Array, 4, 1 << 20, 1 << 20),
        spec("p", MapKind::PerCpuArray, 4, 64 << 10, 1),
        spec("l", MapKind::LpmTrie, 4, 8, 16),
        spec("l", MapKind::LpmTrie, 300, 8, 16),
        spec("d", MapKind::DevMap, 4, 2, 16),
        spec("r", MapKind::RingBuf, 0, 0, 4096 + 8),
        spec("r", MapKind::RingBuf, 0, 0, 2048),
        spec("r", MapKind::RingBuf, 4, 8, 4096),
        spec("r", MapKind::RingBuf, 0, 0, 1 << 31),
        spec("o", MapKind::Other(99), 4, 4, 4),
    ];
    for s in &bad {
        let e = Map::new(s, 4).expect_err(&format!("{s:?} must be refused"));
        assert_eq!(e.errno(), -errno::EINVAL, "{s:?}: {e}");
        assert!(e.to_string().contains(&format!("{:?}", s.name)), "{e}");
    }
    let ok = spec("a", MapKind::Array, 4, 8, 4);
    assert!(Map::new(&ok, 0).is_err());
    assert!(Map::new(&ok, 100_000).is_err());
    // Per-CPU memory counts every worker.
    let big = spec("p", MapKind::PerCpuArray, 4, 1024, 64 << 10);
    assert!(Map::new(&big, 1).is_ok());
    assert!(Map::new(&big, 8).is_err());
}

#[test]
fn array_semantics() {
    let m = Map::new(&spec("a", MapKind::Array, 4, 12, 4), 2).unwrap();
    assert_eq!(m.get(&k(3)), Some(vec![0; 12]));
    let v: Vec<u8> = (1..=12).collect();
    m.update(&k(3), &v, BPF_ANY, 1).unwrap();
    assert_eq!(m.get(&k(3)), Some(v.clone()));
    assert_eq!(m.update(&k(3), &v, BPF_NOEXIST, 0), Err(MapError::Exists));
    m.update(&k(2), &v, BPF_EXIST, 0).unwrap();
    assert_eq!(m.update(&k(4), &v, BPF_ANY, 0).unwrap_err().errno(), -errno::E2BIG);
    assert_eq!(m.update(&k(0), &v, 8, 0).unwrap_err().errno(), -errno::EINVAL);
    assert_eq!(m.update(&k(0), &v[..8], BPF_ANY, 0).unwrap_err().errno(), -errno::EINVAL);
    assert_eq!(m.update(&[0; 3], &v, BPF_ANY, 0).unwrap_err().errno(), -errno::EINVAL);
    assert_eq!(m.lookup(&k(4), 0), None);
    assert_eq!(m.delete(&k(0)).unwrap_err().errno(), -errno::EINVAL);
    // Values are 8-byte aligned slots of round_up(12, 8) = 16 bytes.
    let a1 = m.lookup(&k(1), 0).unwrap();
    assert_eq!(a1, m.base() + 16);
    assert_eq!(a1 % 8, 0);
    assert_eq!(m.contains(a1, 12), Some(true));
    assert_eq!(m.contains(a1 + 4, 8), Some(true));
    assert_eq!(m.contains(a1 + 4, 9), None, "past value_size");
    assert_eq!(m.contains(m.base() + 64, 1), None, "past the map");
    assert_eq!(m.contains(m.base() - 1, 1), None);
    // A program's store is what the control plane reads.
    m.write_at(a1 + 2, &[0xaa, 0xbb]).unwrap();
    assert_eq!(&m.get(&k(1)).unwrap()[..4], &[0, 0, 0xaa, 0xbb]);
    assert_eq!(m.read_at(a1 + 2, 2), Some(vec![0xaa, 0xbb]));
    let e = m.entries();
    assert_eq!(e.len(), 4);
    assert_eq!(e[3], (k(3).to_vec(), v));
    assert_eq!(m.entries_up_to(2), e[..2].to_vec());
}

#[test]
fn percpu_array_keeps_one_value_per_worker() {
    let m = Map::new(&spec("p", MapKind::PerCpuArray, 4, 4, 2), 3).unwrap();
    m.update(&k(1), &5u32.to_ne_bytes(), BPF_ANY, 2).unwrap();
    let a0 = m.lookup(&k(1), 0).unwrap();
    let a2 = m.lookup(&k(1), 2).unwrap();
    assert_ne!(a0, a2);
    assert_eq!(m.read_at(a0, 4), Some(vec![0; 4]));
    assert_eq!(m.read_at(a2, 4), Some(5u32.to_ne_bytes().to_vec()));
    assert_eq!(m.lookup(&k(1), 3), None, "no such worker");
    // The syscall layout: every worker's value padded to 8 bytes.
    let mut want = vec![0u8; 24];
    want[16..20].copy_from_slice(&5u32.to_ne_bytes());
    assert_eq!(m.get(&k(1)), Some(want));
    // set: one value for all, or all values.
    m.set(&k(0), &9u32.to_ne_bytes(), BPF_ANY).unwrap();
    let all = m.get(&k(0)).unwrap();
    assert_eq!(all.len(), 24);
    for c in all.chunks(8) {
        assert_eq!(&c[..4], &9u32.to_ne_bytes());
    }
    let mut each = vec![0u8; 24];
    for (i, c) in each.chunks_mut(8).enumerate() {
        c[..4].copy_from_slice(&(i as u32 + 10).to_ne_bytes());
    }
    m.set(&k(0), &each, BPF_ANY).unwrap();
    assert_eq!(m.get(&k(0)), Some(each));
    assert_eq!(m.read_at(m.lookup(&k(0), 1).unwrap(), 4), Some(11u32.to_ne_bytes().to_vec()));
    assert_eq!(m.set(&k(0), &[0; 7], BPF_ANY).unwrap_err().errno(), -errno::EINVAL);
}

#[test]
fn global_data_starts_with_its_contents_and_rodata_is_frozen() {
    let mut s = spec(".rodata", MapKind::Array, 4, 6, 1);
    s.data = Some(vec![1, 2, 3, 4, 5, 6]);
    s.readonly = true;
    let ro = Map::new(&s, 2).unwrap();
    let a = ro.lookup(&k(0), 0).unwrap();
    assert_eq!(a, ro.base());
    assert_eq!(ro.read_at(a, 6), Some(vec![1, 2, 3, 4, 5, 6]));
    assert_eq!(ro.contains(a + 2, 4), Some(false));
    assert_eq!(ro.set(&k(0), &[0; 6], BPF_ANY).unwrap_err().errno(), -errno::EPERM);
    assert_eq!(ro.update(&k(0), &[0; 6], BPF_ANY, 0).unwrap_err().errno(), -errno::EPERM);
    assert_eq!(ro.write_at(a, &[0]).unwrap_err().errno(), -errno::EPERM);
    assert_eq!(ro.get(&k(0)), Some(vec![1, 2, 3, 4, 5, 6]));

    let mut d = spec(".data", MapKind::Array, 4, 4, 1);
    d.data = Some(vec![7, 0, 0, 0]);
    let rw = Map::new(&d, 1).unwrap();
    assert_eq!(rw.contains(rw.base(), 4), Some(true));
    rw.set(&k(0), &[8, 0, 0, 0], BPF_ANY).unwrap();
    assert_eq!(rw.get(&k(0)), Some(vec![8, 0, 0, 0]));

    let mut toolong = d.clone();
    toolong.data = Some(vec![0; 5]);
    assert!(Map::new(&toolong, 1).is_err());
}

#[test]
fn hash_semantics() {
    let m = Map::new(&spec("h", MapKind::Hash, 4, 8, 2), 1).unwrap();
    assert_eq!(m.lookup(&k(1), 0), None);
    assert_eq!(m.update(&k(1), &u64v(1), BPF_EXIST, 0), Err(MapError::NotFound));
    m.update(&k(1), &u64v(1), BPF_NOEXIST, 0).unwrap();
    assert_eq!(m.update(&k(1), &u64v(2), BPF_NOEXIST, 0).unwrap_err().errno(), -errno::EEXIST);
    let a1 = m.lookup(&k(1), 0).unwrap();
    m.update(&k(1), &u64v(3), BPF_EXIST, 0).unwrap();
    assert_eq!(m.lookup(&k(1), 0), Some(a1), "an update keeps the value's address");
    assert_eq!(m.read_at(a1, 8), Some(u64v(3).to_vec()));
    m.update(&k(2), &u64v(4), BPF_ANY, 0).unwrap();
    assert_eq!(m.update(&k(3), &u64v(5), BPF_ANY, 0).unwrap_err().errno(), -errno::E2BIG);
    // Replacing in a full map is fine.
    m.update(&k(2), &u64v(6), BPF_ANY, 0).unwrap();
    assert_eq!(m.delete(&k(3)).unwrap_err().errno(), -errno::ENOENT);
    m.delete(&k(1)).unwrap();
    assert_eq!(m.lookup(&k(1), 0), None);
    assert_eq!(m.len(), 1);
    m.update(&k(3), &u64v(7), BPF_ANY, 0).unwrap();
    assert_eq!(
        m.entries(),
        vec![(k(2).to_vec(), u64v(6).to_vec()), (k(3).to_vec(), u64v(7).to_vec())]
    );
    assert_eq!(m.entries_up_to(1), vec![(k(2).to_vec(), u64v(6).to_vec())]);
    assert_eq!(m.update(&k(9), &u64v(0), 3, 0).unwrap_err().errno(), -errno::EINVAL);
    assert_eq!(m.lookup(&[1, 2, 3], 0), None, "wrong key size");
    assert_eq!(m.get(&k(3)), Some(u64v(7).to_vec()));
    m.remove(&k(3)).unwrap();
    assert_eq!(m.get(&k(3)), None);
}

#[test]
fn percpu_hash_new_entries_start_zeroed_on_other_workers() {
    let m = Map::new(&spec("ph", MapKind::PerCpuHash, 2, 4, 8), 2).unwrap();
    m.update(&[0, 1], &[1, 1, 1, 1], BPF_ANY, 0).unwrap();
    m.update(&[0, 1], &[2, 2, 2, 2], BPF_ANY, 1).unwrap();
    assert_eq!(m.get(&[0, 1]), Some(vec![1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 2, 2, 0, 0, 0, 0]));
    m.delete(&[0, 1]).unwrap();
    // The recycled slot must not leak worker 1's old value.
    m.update(&[0, 2], &[3, 3, 3, 3], BPF_ANY, 0).unwrap();
    assert_eq!(m.get(&[0, 2]), Some(vec![3, 3, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]));
    let a1 = m.lookup(&[0, 2], 1).unwrap();
    assert_eq!(m.read_at(a1, 4), Some(vec![0; 4]));
    assert_ne!(m.lookup(&[0, 2], 0), Some(a1));
}

#[test]
fn lru_hash_evicts_least_recently_used() {
    let m = Map::new(&spec("lru", MapKind::LruHash, 4, 8, 3), 1).unwrap();
    for i in 0..3 {
        m.update(&k(i), &u64v(i as u64), BPF_ANY, 0).unwrap();
    }
    // Refresh 0: 1 becomes the least recently used.
    assert!(m.lookup(&k(0), 0).is_some());
    m.update(&k(3), &u64v(3), BPF_NOEXIST, 0).unwrap();
    assert_eq!(m.len(), 3);
    assert_eq!(m.get(&k(1)), None, "1 was evicted");
    assert!(m.get(&k(0)).is_some());
    // Updating an existing key refreshes it too: order is now 2, 3, 0 (most recent first).
    m.update(&k(2), &u64v(20), BPF_EXIST, 0).unwrap();
    m.update(&k(4), &u64v(4), BPF_ANY, 0).unwrap();
    assert_eq!(m.get(&k(0)), None);
    let keys: Vec<Vec<u8>> = m.entries().into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, vec![k(2).to_vec(), k(3).to_vec(), k(4).to_vec()]);
    assert_eq!(m.delete(&k(0)), Err(MapError::NotFound));
}

#[test]
fn lpm_trie_longest_prefix_match() {
    let m = Map::new(&spec("lpm", MapKind::LpmTrie, 8, 4, 4), 1).unwrap();
    m.update(&lpm_key(8, [10, 0, 0, 0]), &1u32.to_ne_bytes(), BPF_ANY, 0).unwrap();
    m.update(&lpm_key(24, [10, 1, 2, 99]), &2u32.to_ne_bytes(), BPF_ANY, 0).unwrap();
    m.update(&lpm_key(0, [0, 0, 0, 0]), &3u32.to_ne_bytes(), BPF_ANY, 0).unwrap();
    let get =
        |a: [u8; 4]| m.get(&lpm_key(32, a)).map(|v| u32::from_ne_bytes(v[..4].try_into().unwrap()));
    assert_eq!(get([10, 1, 2, 3]), Some(2));
    assert_eq!(get([10, 1, 3, 3]), Some(1));
    assert_eq!(get([11, 1, 2, 3]), Some(3));
    // The lookup key's own prefix length bounds the match.
    assert_eq!(m.get(&lpm_key(16, [10, 1, 2, 3])), Some(1u32.to_ne_bytes().to_vec()));
    assert_eq!(m.get(&lpm_key(33, [10, 1, 2, 3])), None, "longer than the data: no match");
    assert_eq!(m.lookup(&lpm_key(33, [10, 1, 2, 3]), 0), None);
    let a = m.lookup(&lpm_key(32, [10, 1, 2, 3]), 0).unwrap();
    assert_eq!(m.read_at(a, 4), Some(2u32.to_ne_bytes().to_vec()));
    // Same prefix, different bits past it: the same entry.
    assert_eq!(
        m.update(&lpm_key(24, [10, 1, 2, 0]), &4u32.to_ne_bytes(), BPF_NOEXIST, 0),
        Err(MapError::Exists)
    );
    assert_eq!(
        m.update(&lpm_key(16, [10, 1, 0, 0]), &4u32.to_ne_bytes(), BPF_EXIST, 0),
        Err(MapError::NotFound)
    );
    assert_eq!(
        m.update(&lpm_key(33, [0; 4]), &[0; 4], BPF_ANY, 0).unwrap_err().errno(),
        -errno::EINVAL
    );
    assert_eq!(m.delete(&lpm_key(33, [0; 4])).unwrap_err().errno(), -errno::EINVAL);
    m.update(&lpm_key(32, [1, 2, 3, 4]), &[0; 4], BPF_ANY, 0).unwrap();
    assert_eq!(
        m.update(&lpm_key(31, [1, 2, 3, 4]), &[0; 4], BPF_ANY, 0).unwrap_err().errno(),
        -errno::ENOSPC
    );
    // Replacing in a full trie works.
    m.update(&lpm_key(32, [1, 2, 3, 4]), &[9; 4], BPF_EXIST, 0).unwrap();
    assert_eq!(m.delete(&lpm_key(16, [10, 1, 0, 0])).unwrap_err().errno(), -errno::ENOENT);
    m.delete(&lpm_key(24, [10, 1, 2, 7])).unwrap();
    assert_eq!(get([10, 1, 2, 3]), Some(1));
    assert_eq!(m.len(), 3);
    let e = m.entries();
    assert_eq!(e.len(), 3);
    assert!(e.contains(&(lpm_key(8, [10, 0, 0, 0]), 1u32.to_ne_bytes().to_vec())));
}

#[test]
fn devmaps_hold_ports() {
    let m = Map::new(&spec("tx", MapKind::DevMap, 4, 4, 4), 1).unwrap();
    assert_eq!(m.lookup(&k(0), 0), None, "empty slot");
    assert!(m.entries().is_empty());
    m.set(&k(1), &7u32.to_ne_bytes(), BPF_ANY).unwrap();
    let a = m.lookup(&k(1), 0).unwrap();
    assert_eq!(m.read_at(a, 4), Some(7u32.to_ne_bytes().to_vec()));
    assert_eq!(m.set(&k(1), &7u32.to_ne_bytes(), BPF_NOEXIST), Err(MapError::Exists));
    assert_eq!(m.set(&k(4), &7u32.to_ne_bytes(), BPF_ANY), Err(MapError::TooBig));
    assert_eq!(m.entries(), vec![(k(1).to_vec(), 7u32.to_ne_bytes().to_vec())]);
    m.set(&k(1), &0u32.to_ne_bytes(), BPF_ANY).unwrap();
    assert_eq!(m.lookup(&k(1), 0), None, "port 0 empties the slot");
    m.set(&k(2), &3u32.to_ne_bytes(), BPF_ANY).unwrap();
    m.delete(&k(2)).unwrap();
    assert_eq!(m.get(&k(2)), None);
    assert_eq!(m.delete(&k(9)).unwrap_err().errno(), -errno::EINVAL);

    let m8 = Map::new(&spec("tx8", MapKind::DevMap, 4, 8, 4), 1).unwrap();
    m8.set(&k(0), &[3, 0, 0, 0, 0, 0, 0, 0], BPF_ANY).unwrap();
    assert_eq!(m8.get(&k(0)), Some(vec![3, 0, 0, 0, 0, 0, 0, 0]));
    assert_eq!(
        m8.set(&k(1), &[3, 0, 0, 0, 9, 0, 0, 0], BPF_ANY).unwrap_err().errno(),
        -errno::EINVAL
    );
    assert_eq!(m8.get(&k(1)), None);

    let h = Map::new(&spec("txh", MapKind::DevMapHash, 4, 4, 2), 1).unwrap();
    h.set(&k(100), &5u32.to_ne_bytes(), BPF_ANY).unwrap();
    assert_eq!(h.get(&k(100)), Some(5u32.to_ne_bytes().to_vec()));
    assert_eq!(h.set(&k(101), &0u32.to_ne_bytes(), BPF_ANY).unwrap_err().errno(), -errno::EINVAL);
    assert_eq!(h.delete(&k(101)), Err(MapError::NotFound));
}

#[test]
fn ringbuf_records_in_order() {
    let m = Map::new(&spec("rb", MapKind::RingBuf, 0, 0, 4096), 2).unwrap();
    assert_eq!(m.lookup(&[], 0), None);
    let a = m.ringbuf_reserve(5).unwrap();
    assert_eq!(a % 8, 0);
    assert_eq!(m.contains(a, 5), Some(true));
    assert_eq!(m.contains(a, 6), None, "past the record");
    m.write_at(a, b"first").unwrap();
    let b = m.ringbuf_reserve(3).unwrap();
    m.write_at(b, b"two").unwrap();
    let c = m.ringbuf_reserve(1).unwrap();
    let empty = m.ringbuf_reserve(0).unwrap();
    assert!(m.ringbuf_owns(empty) && m.ringbuf_owns(c) && !m.ringbuf_owns(c + 8));
    assert_eq!(m.contains(empty, 1), None, "a zero-size record has no bytes");
    m.ringbuf_commit(empty, false).unwrap();
    assert!(!m.ringbuf_owns(empty));
    m.ringbuf_output(b"out").unwrap();
    // Nothing is delivered past the oldest record still reserved.
    m.ringbuf_commit(b, false).unwrap();
    assert!(m.ringbuf_drain(10).is_empty());
    m.ringbuf_commit(a, false).unwrap();
    assert_eq!(m.contains(a, 5), None, "a committed record is the consumer's");
    assert_eq!(m.ringbuf_commit(a, false).unwrap_err().errno(), -errno::EINVAL);
    assert_eq!(m.ringbuf_drain(1), vec![b"first".to_vec()]);
    assert_eq!(m.ringbuf_drain(10), vec![b"two".to_vec()]);
    m.ringbuf_commit(c, true).unwrap();
    assert_eq!(m.len(), 2);
    assert_eq!(m.ringbuf_drain(10), vec![Vec::new(), b"out".to_vec()]);
    assert!(m.is_empty());
    assert_eq!(m.ringbuf_dropped(), 0);
    assert_eq!(m.ringbuf_commit(m.base() + 8, false).unwrap_err().errno(), -errno::EINVAL);
    assert_eq!(m.set(&[], &[], BPF_ANY).unwrap_err().errno(), -errno::EINVAL);
}

#[test]
fn ringbuf_full_refuses_and_counts() {
    let m = Map::new(&spec("rb", MapKind::RingBuf, 0, 0, 4096), 1).unwrap();
    assert_eq!(m.ringbuf_reserve(4096), None, "larger than the ring");
    // 8-byte header + 2040 bytes = 2048; two of them would fill all 4096 bytes, which the
    // kernel refuses (the producer may not get a whole ring ahead).
    assert!(m.ringbuf_reserve(2040).is_some_and(|a| m.ringbuf_commit(a, false).is_ok()));
    assert_eq!(m.ringbuf_reserve(2040), None);
    assert_eq!(m.ringbuf_output(&[0; 2040]).unwrap_err().errno(), -errno::EAGAIN);
    assert_eq!(m.ringbuf_dropped(), 3);
    m.ringbuf_output(&[1; 2032]).unwrap();
    assert_eq!(m.ringbuf_drain(1).len(), 1);
    // Room again; this record wraps past the end of the ring and stays contiguous.
    let data: Vec<u8> = (0..2040u32).map(|i| i as u8).collect();
    m.ringbuf_output(&data).unwrap();
    let got = m.ringbuf_drain(10);
    assert_eq!(got, vec![vec![1; 2032], data]);
}

#[test]
fn mapset_new_and_rebind_keep_same_shaped_maps() {
    let mut rodata = spec(".rodata", MapKind::Array, 4, 4, 1);
    rodata.data = Some(vec![1, 0, 0, 0]);
    rodata.readonly = true;
    let old_obj = object(vec![
        spec("counts", MapKind::Array, 4, 8, 4),
        spec("flows", MapKind::Hash, 4, 8, 16),
        spec("percpu", MapKind::PerCpuArray, 4, 8, 2),
        spec("gone", MapKind::Hash, 4, 8, 16),
        rodata.clone(),
    ]);
    let old = MapSet::new(&old_obj, 2).unwrap();
    assert_eq!(old.len(), 5);
    assert!(old.iter().all(|m| m.workers() == 2));
    assert_eq!(old.origin(0), Some(Origin::Created));
    old.by_name("counts").unwrap().set(&k(1), &u64v(42), BPF_ANY).unwrap();
    old.by_name("flows").unwrap().set(&k(7), &u64v(9), BPF_ANY).unwrap();
    let addr = old.addr(1).unwrap();
    assert!(Arc::ptr_eq(old.by_addr(addr).unwrap(), old.get(1).unwrap()));
    assert!(old.by_addr(addr + 1).is_none());
    let shown = format!("{:?}", old.get(1).unwrap());
    assert!(shown.contains("flows") && shown.contains("len: 1"), "{shown}");
    let v = old.get(0).unwrap().lookup(&k(1), 0).unwrap();
    assert_eq!(old.contains(v, 8), Some(true));
    assert_eq!(old.contains(1, 8), None);

    let mut rodata2 = rodata.clone();
    rodata2.data = Some(vec![2, 0, 0, 0]);
    let new_obj = object(vec![
        spec("flows", MapKind::Hash, 4, 8, 16),
        spec("counts", MapKind::Array, 4, 8, 8),
        spec("percpu", MapKind::PerCpuArray, 4, 8, 2),
        spec("fresh", MapKind::LruHash, 4, 8, 16),
        rodata2,
    ]);
    let new = MapSet::rebind(&new_obj, &old, 2).unwrap();
    let report = new.report();
    assert_eq!(
        report,
        vec![
            ("flows".to_string(), Origin::Kept),
            ("counts".to_string(), Origin::Created),
            ("percpu".to_string(), Origin::Kept),
            ("fresh".to_string(), Origin::Created),
            (".rodata".to_string(), Origin::Created),
        ]
    );
    assert!(Arc::ptr_eq(new.get(0).unwrap(), old.by_name("flows").unwrap()));
    assert_eq!(new.by_name("flows").unwrap().get(&k(7)), Some(u64v(9).to_vec()));
    assert_eq!(new.by_name("counts").unwrap().get(&k(1)), Some(vec![0; 8]));
    assert_eq!(new.get(4).unwrap().get(&k(0)), Some(vec![2, 0, 0, 0]));
    // The old set is untouched.
    assert_eq!(old.by_name("counts").unwrap().get(&k(1)), Some(u64v(42).to_vec()));
    // Other worker counts cannot share a per-CPU map.
    let wider = MapSet::rebind(&new_obj, &new, 3).unwrap();
    assert_eq!(wider.origin(0), Some(Origin::Kept));
    assert_eq!(wider.origin(2), Some(Origin::Created));
    // A bad new spec is an error, and nothing is half-made.
    let bad =
        object(vec![spec("flows", MapKind::Hash, 4, 8, 16), spec("x", MapKind::Hash, 0, 8, 1)]);
    assert!(MapSet::rebind(&bad, &old, 2).is_err());
}

#[test]
fn concurrent_updates_lose_nothing() {
    let m = Arc::new(Map::new(&spec("h", MapKind::Hash, 4, 8, 4000), 4).unwrap());
    let lru = Arc::new(Map::new(&spec("l", MapKind::LruHash, 4, 8, 100), 4).unwrap());
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let (m, lru) = (Arc::clone(&m), Arc::clone(&lru));
            std::thread::spawn(move || {
                for i in 0..1000u32 {
                    let key = t * 1000 + i;
                    m.update(&k(key), &u64v(key as u64), BPF_NOEXIST, t as usize).unwrap();
                    let a = m.lookup(&k(key), t as usize).unwrap();
                    assert_eq!(m.read_at(a, 8), Some(u64v(key as u64).to_vec()));
                    lru.update(&k(key), &u64v(1), BPF_ANY, t as usize).unwrap();
                    let _ = lru.lookup(&k(key.saturating_sub(3)), t as usize);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(m.len(), 4000);
    for key in 0..4000u32 {
        assert_eq!(m.get(&k(key)), Some(u64v(key as u64).to_vec()));
    }
    assert_eq!(m.update(&k(5000), &u64v(0), BPF_ANY, 0), Err(MapError::TooBig));
    assert_eq!(lru.len(), 100);
    assert_eq!(lru.entries().len(), 100);
}

#[test]
fn hex_formatting_and_parsing() {
    assert_eq!(format_hex(&[10, 0, 0, 1]), "0a 00 00 01");
    assert_eq!(format_hex(&[]), "");
    assert_eq!(parse_bytes("0a 00 00 01", 4).unwrap(), vec![10, 0, 0, 1]);
    assert_eq!(parse_bytes("0x0a000001", 4).unwrap(), vec![10, 0, 0, 1]);
    assert_eq!(parse_bytes("10,0,0,1", 4).unwrap(), vec![10, 0, 0, 1]);
    assert_eq!(parse_bytes("10.0.0.1", 4).unwrap(), vec![10, 0, 0, 1]);
    assert_eq!(parse_bytes("0x01 0x02 3", 3).unwrap(), vec![1, 2, 3]);
    assert_eq!(parse_bytes("258", 4).unwrap(), 258u32.to_le_bytes().to_vec());
    assert_eq!(parse_bytes("10.0.0.0/8", 8).unwrap(), lpm_key(8, [10, 0, 0, 0]));
    let v6 = parse_bytes("2001:db8::/32", 20).unwrap();
    assert_eq!(&v6[..4], &32u32.to_ne_bytes());
    assert_eq!(&v6[4..8], &[0x20, 0x01, 0x0d, 0xb8]);
    for (bad, size) in [
        ("0a 00 00", 4),
        ("0x0a00001", 4),
        ("0xzz", 1),
        ("256,0", 2),
        ("70000", 2),
        ("-1", 4),
        ("10.0.0.0/33", 8),
        ("host/8", 8),
        ("1", 17),
        ("", 1),
    ] {
        let e = parse_bytes(bad, size).expect_err(bad);
        assert!(!e.to_string().is_empty());
    }
}

proptest! {
    #[test]
    fn parse_reads_back_format(bytes in proptest::collection::vec(any::<u8>(), 1..40)) {
        prop_assert_eq!(parse_hex(&format_hex(&bytes), bytes.len()).unwrap(), bytes.clone());
        if bytes.len() > 1 {
            prop_assert_eq!(parse_bytes(&format_hex(&bytes), bytes.len()).unwrap(), bytes);
        }
    }
}

/// The ring-buffer model's record: id, total bytes, address (reserved ones), committed
/// (`Some(true)`), discarded (`Some(false)`) or busy (`None`), content.
type ModelRecord = (u64, u64, Option<u64>, Option<bool>, Vec<u8>);

/// One random map operation on 1-byte-spaced small keys.
#[derive(Clone, Debug)]
enum Op {
    Update(u8, u64, u64),
    Delete(u8),
    Lookup(u8),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(
        prop_oneof![
            (0u8..24, any::<u64>(), 0u64..4).prop_map(|(k, v, f)| Op::Update(k, v, f)),
            (0u8..24).prop_map(Op::Delete),
            (0u8..24).prop_map(Op::Lookup),
        ],
        0..200,
    )
}

proptest! {
    #[test]
    fn hash_agrees_with_a_model(ops in ops(), max in 1u32..16) {
        let m = Map::new(&spec("h", MapKind::Hash, 1, 8, max), 1).unwrap();
        let mut model: HashMap<u8, u64> = HashMap::new();
        for op in ops {
            match op {
                Op::Update(key, v, flags) => {
                    let want = match (flags, model.contains_key(&key)) {
                        (f, _) if f > BPF_EXIST => Err(MapError::Invalid("unknown update flags")),
                        (BPF_NOEXIST, true) => Err(MapError::Exists),
                        (BPF_EXIST, false) => Err(MapError::NotFound),
                        (_, false) if model.len() == max as usize => Err(MapError::TooBig),
                        _ => {
                            model.insert(key, v);
                            Ok(())
                        }
                    };
                    prop_assert_eq!(m.update(&[key], &u64v(v), flags, 0), want);
                }
                Op::Delete(key) => {
                    let want = model.remove(&key).map(|_| ()).ok_or(MapError::NotFound);
                    prop_assert_eq!(m.delete(&[key]), want);
                }
                Op::Lookup(key) => {
                    let got = m.lookup(&[key], 0).and_then(|a| m.read_at(a, 8));
                    prop_assert_eq!(got, model.get(&key).map(|v| u64v(*v).to_vec()));
                }
            }
            prop_assert_eq!(m.len(), model.len());
        }
        let mut want: Vec<(Vec<u8>, Vec<u8>)> =
            model.iter().map(|(k, v)| (vec![*k], u64v(*v).to_vec())).collect();
        want.sort();
        prop_assert_eq!(m.entries(), want);
    }

    #[test]
    fn lru_agrees_with_an_exact_lru_model(ops in ops(), max in 1u32..10) {
        let m = Map::new(&spec("l", MapKind::LruHash, 1, 8, max), 1).unwrap();
        // Most recent first.
        let mut order: VecDeque<u8> = VecDeque::new();
        let mut values: HashMap<u8, u64> = HashMap::new();
        let touch = |order: &mut VecDeque<u8>, key: u8| {
            order.retain(|&k| k != key);
            order.push_front(key);
        };
        for op in ops {
            match op {
                Op::Update(key, v, flags) => {
                    let present = values.contains_key(&key);
                    let want = match (flags, present) {
                        (f, _) if f > BPF_EXIST => Err(MapError::Invalid("unknown update flags")),
                        (BPF_NOEXIST, true) => Err(MapError::Exists),
                        (BPF_EXIST, false) => Err(MapError::NotFound),
                        _ => {
                            if !present && order.len() == max as usize {
                                let victim = order.pop_back().unwrap();
                                values.remove(&victim);
                            }
                            touch(&mut order, key);
                            values.insert(key, v);
                            Ok(())
                        }
                    };
                    prop_assert_eq!(m.update(&[key], &u64v(v), flags, 0), want);
                }
                Op::Delete(key) => {
                    let want = values.remove(&key).map(|_| ()).ok_or(MapError::NotFound);
                    order.retain(|&k| k != key);
                    prop_assert_eq!(m.delete(&[key]), want);
                }
                Op::Lookup(key) => {
                    if values.contains_key(&key) {
                        touch(&mut order, key);
                    }
                    let got = m.lookup(&[key], 0).and_then(|a| m.read_at(a, 8));
                    prop_assert_eq!(got, values.get(&key).map(|v| u64v(*v).to_vec()));
                }
            }
            prop_assert!(m.len() <= max as usize);
            prop_assert_eq!(m.len(), values.len());
        }
    }

    #[test]
    fn lpm_agrees_with_brute_force(
        prefixes in proptest::collection::vec((0u32..=32, any::<[u8; 4]>(), any::<u32>()), 0..40),
        deletes in proptest::collection::vec(any::<proptest::sample::Index>(), 0..10),
        probes in proptest::collection::vec((any::<[u8; 4]>(), 0u32..=36), 1..60),
    ) {
        let m = Map::new(&spec("lpm", MapKind::LpmTrie, 8, 4, 64), 1).unwrap();
        let mask = |plen: u32| if plen == 0 { 0 } else { u32::MAX << (32 - plen) };
        // (plen, masked address) -> value
        let mut model: HashMap<(u32, u32), u32> = HashMap::new();
        for &(plen, addr, v) in &prefixes {
            m.update(&lpm_key(plen, addr), &v.to_ne_bytes(), BPF_ANY, 0).unwrap();
            model.insert((plen, u32::from_be_bytes(addr) & mask(plen)), v);
        }
        for d in deletes {
            if prefixes.is_empty() { break; }
            let (plen, addr, _) = prefixes[d.index(prefixes.len())];
            let want = model.remove(&(plen, u32::from_be_bytes(addr) & mask(plen)));
            prop_assert_eq!(m.delete(&lpm_key(plen, addr)).is_ok(), want.is_some());
        }
        prop_assert_eq!(m.len(), model.len());
        // Probe random addresses and the stored prefixes themselves.
        let mut all: Vec<([u8; 4], u32)> = probes;
        all.extend(prefixes.iter().map(|&(_, a, _)| (a, 32)));
        for (addr, limit) in all {
            let a = u32::from_be_bytes(addr);
            // A lookup prefix longer than the data matches nothing (as the kernel does).
            let want = model
                .iter()
                .filter(|_| limit <= 32)
                .filter(|&(&(plen, net), _)| plen <= limit && a & mask(plen) == net)
                .max_by_key(|&(&(plen, _), _)| plen)
                .map(|(_, &v)| v.to_ne_bytes().to_vec());
            prop_assert_eq!(m.get(&lpm_key(limit, addr)), want.clone());
            let via_addr = m.lookup(&lpm_key(limit, addr), 0).and_then(|p| m.read_at(p, 4));
            prop_assert_eq!(via_addr, want);
        }
    }

    #[test]
    fn ringbuf_delivers_committed_records_in_order(
        ops in proptest::collection::vec((0u8..4, 0usize..600, any::<bool>()), 0..300),
    ) {
        let size = 4096u64;
        let m = Map::new(&spec("rb", MapKind::RingBuf, 0, 0, size as u32), 1).unwrap();
        // Model: records in reservation order (id, total bytes, address, committed?, content).
        let mut live: VecDeque<ModelRecord> = VecDeque::new();
        let mut used = 0u64;
        let mut next_id = 0u64;
        let mut drops = 0u64;
        for (op, n, flag) in ops {
            match op {
                0 | 1 => {
                    let data: Vec<u8> = (0..n).map(|i| (next_id as usize + i) as u8).collect();
                    let total = (n as u64 + 8).div_ceil(8) * 8;
                    let fits = used + total < size;
                    if op == 0 {
                        let got = m.ringbuf_reserve(n as u64);
                        prop_assert_eq!(got.is_some(), fits);
                        if let Some(a) = got {
                            prop_assert_eq!(a % 8, 0);
                            m.write_at(a, &data).unwrap();
                            live.push_back((next_id, total, Some(a), None, data));
                        }
                    } else {
                        let got = m.ringbuf_output(&data);
                        prop_assert_eq!(got.is_ok(), fits);
                        if fits {
                            live.push_back((next_id, total, None, Some(true), data));
                        }
                    }
                    if fits { used += total; } else { drops += 1; }
                    next_id += 1;
                }
                2 => {
                    // Commit or discard the n-th busy record.
                    let busy: Vec<usize> =
                        (0..live.len()).filter(|&i| live[i].3.is_none()).collect();
                    if !busy.is_empty() {
                        let i = busy[n % busy.len()];
                        let addr = live[i].2.unwrap();
                        m.ringbuf_commit(addr, flag).unwrap();
                        live[i].3 = Some(!flag);
                    }
                }
                _ => {
                    let max = n % 5 + 1;
                    let mut want = Vec::new();
                    while want.len() < max {
                        match live.front() {
                            Some((_, total, _, Some(keep), data)) => {
                                if *keep { want.push(data.clone()); }
                                used -= total;
                                live.pop_front();
                            }
                            _ => break,
                        }
                    }
                    prop_assert_eq!(m.ringbuf_drain(max), want);
                }
            }
        }
        prop_assert_eq!(m.ringbuf_dropped(), drops);
    }
}

/// Whether the first `bits` bits of `a` and `b` agree.
fn same_prefix(a: &[u8], b: &[u8], bits: u32) -> bool {
    (0..bits as usize).all(|i| (a[i / 8] >> (7 - i % 8)) & 1 == (b[i / 8] >> (7 - i % 8)) & 1)
}

proptest! {
    #[test]
    fn lpm_of_any_data_length_agrees_with_brute_force(
        dlen in 1usize..=16,
        entries in proptest::collection::vec((any::<u8>(), proptest::collection::vec(any::<u8>(), 16), any::<u8>()), 0..30),
        probes in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 16), 1..30),
    ) {
        let bits = 8 * dlen as u32;
        let m = Map::new(&spec("lpm", MapKind::LpmTrie, 4 + dlen as u32, 1, 64), 1).unwrap();
        // (plen, data) -> value, data as last written.
        let mut model: Vec<(u32, Vec<u8>, u8)> = Vec::new();
        for (p, data, v) in entries {
            let plen = u32::from(p) % (bits + 1);
            let data = data[..dlen].to_vec();
            let mut key = plen.to_ne_bytes().to_vec();
            key.extend_from_slice(&data);
            m.update(&key, &[v], BPF_ANY, 0).unwrap();
            model.retain(|(l, d, _)| !(*l == plen && same_prefix(d, &data, plen)));
            model.push((plen, data, v));
        }
        prop_assert_eq!(m.len(), model.len());
        // Probes: random data, and each entry's own data.
        let mut all: Vec<Vec<u8>> = probes.into_iter().map(|p| p[..dlen].to_vec()).collect();
        all.extend(model.iter().map(|(_, d, _)| d.clone()));
        for probe in all {
            let mut key = bits.to_ne_bytes().to_vec();
            key.extend_from_slice(&probe);
            let want = model
                .iter()
                .filter(|(l, d, _)| same_prefix(d, &probe, *l))
                .max_by_key(|(l, _, _)| *l)
                .map(|(_, _, v)| vec![*v]);
            prop_assert_eq!(m.get(&key), want);
        }
        let mut want: Vec<(Vec<u8>, Vec<u8>)> = model
            .iter()
            .map(|(l, d, v)| {
                let mut k = l.to_ne_bytes().to_vec();
                k.extend_from_slice(d);
                (k, vec![*v])
            })
            .collect();
        want.sort();
        prop_assert_eq!(m.entries(), want);
    }

    #[test]
    fn percpu_hash_agrees_with_a_model(
        ops in proptest::collection::vec((0u8..6, 0usize..3, any::<u32>(), any::<bool>()), 0..150),
    ) {
        let workers = 3;
        let m = Map::new(&spec("ph", MapKind::PerCpuHash, 1, 4, 4), workers).unwrap();
        let mut model: HashMap<u8, Vec<u32>> = HashMap::new();
        for (key, worker, v, delete) in ops {
            if delete {
                prop_assert_eq!(m.delete(&[key]).is_ok(), model.remove(&key).is_some());
                continue;
            }
            let r = m.update(&[key], &v.to_ne_bytes(), BPF_ANY, worker);
            if model.contains_key(&key) || model.len() < 4 {
                prop_assert!(r.is_ok());
                model.entry(key).or_insert_with(|| vec![0; workers])[worker] = v;
            } else {
                prop_assert_eq!(r, Err(MapError::TooBig));
            }
            for (k, vals) in &model {
                let want: Vec<u8> = vals.iter().flat_map(|v| {
                    let mut w = v.to_ne_bytes().to_vec();
                    w.extend_from_slice(&[0; 4]);
                    w
                }).collect();
                prop_assert_eq!(m.get(&[*k]), Some(want));
                for (w, val) in vals.iter().enumerate() {
                    let a = m.lookup(&[*k], w).unwrap();
                    prop_assert_eq!(m.read_at(a, 4), Some(val.to_ne_bytes().to_vec()));
                }
            }
        }
    }
}
