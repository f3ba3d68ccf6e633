//! Fuzz target `ebpf_maps`: an arbitrary map spec and a sequence of program-side and
//! control-plane operations on the runtime eBPF maps (`snic_ebpf::maps`).
//!
//! Input: byte 0 picks the type (`Hash`, `Array`, `PerCpuArray`, `PerCpuHash`, `LruHash`,
//! `LpmTrie`, `DevMap`, `DevMapHash`, `RingBuf`, an unsupported type), bytes 1-2 the key size
//! (LE16, so LPM keys up to 260 bytes), byte 3 the value size (bit 7 set: a huge value size),
//! byte 4 the max entries (bit 7 set: bytes 5-8 give a raw 32-bit max_entries, to exercise the
//! memory cap), byte 9 the workers (0-4). The rest is a sequence of operations: a selector byte,
//! then a flags/worker byte, then key and value bytes taken from the input (zero-padded).
//!
//! Checked, besides "never panics": refused specs are `EINVAL`/`ENOMEM` errors; for `Hash`
//! maps, every result agrees with a `HashMap` model; a looked-up value is inside the map
//! (`contains`) and 8-byte aligned; hash and trie `entries()` match `len()`; an LRU map never
//! holds more than `max_entries`; every errno is negative.

#![no_main]

use libfuzzer_sys::fuzz_target;
use snic_ebpf::maps::{BPF_EXIST, BPF_NOEXIST, Map, MapError, errno};
use snic_ebpf::{MapKind, MapSpec};
use std::collections::HashMap;

struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }

    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
}

const KINDS: [MapKind; 10] = [
    MapKind::Hash,
    MapKind::Array,
    MapKind::PerCpuArray,
    MapKind::PerCpuHash,
    MapKind::LruHash,
    MapKind::LpmTrie,
    MapKind::DevMap,
    MapKind::DevMapHash,
    MapKind::RingBuf,
    MapKind::Other(7),
];

fuzz_target!(|data: &[u8]| {
    let mut inp = Input { data, pos: 0 };
    let kind = KINDS[inp.byte() as usize % KINDS.len()];
    let key_size = u16::from_le_bytes([inp.byte(), inp.byte()]) as u32 % 300;
    let v = inp.byte();
    let value_size = if v & 0x80 != 0 { u32::from(v) << 20 } else { u32::from(v) };
    let m = inp.byte();
    let raw = u32::from_le_bytes([inp.byte(), inp.byte(), inp.byte(), inp.byte()]);
    let max_entries = match (m & 0x80 != 0, kind) {
        (true, _) => raw,
        (false, MapKind::RingBuf) => 4096 << (m % 3),
        (false, _) => u32::from(m % 64),
    };
    let workers = inp.byte() as usize % 5;
    let spec = MapSpec {
        name: "fuzz".into(),
        kind,
        key_size,
        value_size,
        max_entries,
        data: None,
        readonly: false,
    };
    let map = match Map::new(&spec, workers) {
        Ok(map) => map,
        Err(e) => {
            assert!(e.errno() == -errno::EINVAL || e.errno() == -errno::ENOMEM, "{spec:?}: {e}");
            return;
        }
    };
    let ks = key_size as usize;
    let vs = value_size as usize;
    let model_on = kind == MapKind::Hash;
    let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut reserved: Vec<u64> = Vec::new();
    while !inp.done() {
        let op = inp.byte();
        let arg = inp.byte();
        let worker = arg as usize % (workers + 1);
        let flags = u64::from(arg >> 4) % 4;
        match op % 9 {
            0 => {
                let key = inp.bytes(ks);
                let value = inp.bytes(vs);
                let r = map.update(&key, &value, flags, worker);
                if let Err(e) = &r {
                    assert!(e.errno() < 0);
                }
                if model_on {
                    let want = if worker >= workers {
                        Err(MapError::Invalid("worker index"))
                    } else {
                        match (flags, model.contains_key(&key)) {
                            (3, _) => Err(MapError::Invalid("unknown update flags")),
                            (BPF_NOEXIST, true) => Err(MapError::Exists),
                            (BPF_EXIST, false) => Err(MapError::NotFound),
                            (_, false) if model.len() == max_entries as usize => {
                                Err(MapError::TooBig)
                            }
                            _ => {
                                model.insert(key, value);
                                Ok(())
                            }
                        }
                    };
                    assert_eq!(r, want);
                }
            }
            1 => {
                let key = inp.bytes(ks);
                let r = map.delete(&key);
                if model_on {
                    assert_eq!(r.is_ok(), model.remove(&key).is_some());
                }
            }
            2 => {
                let key = inp.bytes(ks);
                let got = map.lookup(&key, worker);
                if let Some(a) = got {
                    assert_eq!(a % 8, 0);
                    assert!(map.contains(a, vs as u64).is_some());
                    assert!(map.contains(a, vs as u64 + 1).is_none());
                    let v = map.read_at(a, vs as u64).expect("a looked-up value is readable");
                    if model_on {
                        assert_eq!(Some(&v), model.get(&key));
                    }
                    // A program's store, seen by the control plane.
                    let store = inp.bytes(arg as usize % (vs + 1));
                    map.write_at(a, &store).unwrap();
                    if let Some(v) = model.get_mut(&key) {
                        v[..store.len()].copy_from_slice(&store);
                    }
                } else if model_on && worker < workers {
                    assert!(!model.contains_key(&key));
                }
            }
            3 => {
                let key = inp.bytes(ks);
                let value = inp.bytes(vs);
                let r = map.set(&key, &value, flags);
                if model_on {
                    let present = model.contains_key(&key);
                    let ok = flags != 3
                        && !(flags == BPF_NOEXIST && present)
                        && !(flags == BPF_EXIST && !present)
                        && (present || model.len() < max_entries as usize);
                    assert_eq!(r.is_ok(), ok, "{r:?}");
                    if ok {
                        model.insert(key, value);
                    }
                }
            }
            4 => {
                let key = inp.bytes(ks);
                let got = map.get(&key);
                if model_on {
                    assert_eq!(got.as_ref(), model.get(&key));
                }
            }
            5 => {
                let size = u64::from(u16::from_le_bytes([arg, inp.byte()]));
                if let Some(a) = map.ringbuf_reserve(size) {
                    assert_eq!(map.contains(a, size.max(1)).is_some(), size > 0);
                    reserved.push(a);
                }
            }
            6 => {
                if !reserved.is_empty() {
                    let a = reserved.remove(arg as usize % reserved.len());
                    map.ringbuf_commit(a, op & 0x80 != 0).unwrap();
                    assert!(map.ringbuf_commit(a, false).is_err());
                }
            }
            7 => {
                let n = arg as usize;
                let got = map.ringbuf_output(&inp.bytes(n));
                assert!(got.is_ok() || kind != MapKind::RingBuf || got == Err(MapError::Again));
                let _ = map.ringbuf_drain(arg as usize % 4);
            }
            _ => {
                // Arrays list every index: bound the answer (a valid array may have 16M).
                let entries = map.entries_up_to(1 << 12);
                match kind {
                    MapKind::Hash
                    | MapKind::PerCpuHash
                    | MapKind::LruHash
                    | MapKind::LpmTrie
                    | MapKind::DevMapHash => assert_eq!(entries.len(), map.len().min(1 << 12)),
                    _ => {}
                }
                if model_on {
                    assert_eq!(entries.len(), model.len());
                    for (k, v) in entries {
                        assert_eq!(model.get(&k), Some(&v));
                    }
                }
            }
        }
        if kind == MapKind::LruHash {
            assert!(map.len() <= max_entries as usize);
        }
    }
});
