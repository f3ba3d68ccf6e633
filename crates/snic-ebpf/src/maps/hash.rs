//! The key index of hash maps: key -> value slot, a free list of slots, and for LRU hashes an
//! exact least-recently-used list (doubly linked through slot-indexed arrays).
//!
//! Slots are handed out lazily (`next` counts the never-used ones) and recycled through `free`,
//! so the index costs nothing for entries never inserted while the value memory it indexes is
//! preallocated by the map.

use super::fasthash::Seeded;
use super::{BPF_EXIST, BPF_NOEXIST, MapError};
use std::collections::HashMap;

/// No slot (end of the LRU list).
const NIL: u32 = u32::MAX;

/// Recency order of the live slots.
#[derive(Debug)]
struct Lru {
    /// Towards more recent.
    prev: Vec<u32>,
    /// Towards less recent.
    next: Vec<u32>,
    /// Most recently used.
    head: u32,
    /// Least recently used (evicted first).
    tail: u32,
    /// Key of each live slot, to evict it.
    keys: Vec<Option<Box<[u8]>>>,
}

impl Lru {
    fn unlink(&mut self, s: u32) {
        let (p, n) = (self.prev[s as usize], self.next[s as usize]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
    }

    fn push_front(&mut self, s: u32) {
        self.prev[s as usize] = NIL;
        self.next[s as usize] = self.head;
        if self.head != NIL {
            self.prev[self.head as usize] = s;
        }
        self.head = s;
        if self.tail == NIL {
            self.tail = s;
        }
    }

    fn grow(&mut self, s: u32) {
        let need = s as usize + 1;
        if self.prev.len() < need {
            self.prev.resize(need, NIL);
            self.next.resize(need, NIL);
            self.keys.resize(need, None);
        }
    }
}

/// A hash map's index.
#[derive(Debug)]
pub(super) struct HashIndex {
    map: HashMap<Box<[u8]>, u32, Seeded>,
    max: u32,
    /// Slots below `next` have been used at least once.
    next: u32,
    free: Vec<u32>,
    lru: Option<Lru>,
}

impl HashIndex {
    pub(super) fn new(max: u32, lru: bool) -> HashIndex {
        HashIndex {
            map: HashMap::with_hasher(Seeded::new()),
            max,
            next: 0,
            free: Vec::new(),
            lru: lru.then(|| Lru {
                prev: Vec::new(),
                next: Vec::new(),
                head: NIL,
                tail: NIL,
                keys: Vec::new(),
            }),
        }
    }

    pub(super) fn get(&self, key: &[u8]) -> Option<u32> {
        self.map.get(key).copied()
    }

    /// Makes `slot` the most recently used (LRU maps only).
    pub(super) fn touch(&mut self, slot: u32) {
        if let Some(lru) = &mut self.lru
            && lru.head != slot
        {
            lru.unlink(slot);
            lru.push_front(slot);
        }
    }

    /// The slot for `key` under `flags`, and whether it is new. A full map fails with `-E2BIG`,
    /// except an LRU map, which evicts its least recently used entry.
    pub(super) fn insert(&mut self, key: &[u8], flags: u64) -> Result<(u32, bool), MapError> {
        if let Some(&slot) = self.map.get(key) {
            if flags == BPF_NOEXIST {
                return Err(MapError::Exists);
            }
            self.touch(slot);
            return Ok((slot, false));
        }
        if flags == BPF_EXIST {
            return Err(MapError::NotFound);
        }
        let slot = if let Some(s) = self.free.pop() {
            s
        } else if self.next < self.max {
            self.next += 1;
            self.next - 1
        } else if let Some(lru) = &mut self.lru {
            let victim = lru.tail;
            if victim == NIL {
                return Err(MapError::TooBig);
            }
            lru.unlink(victim);
            if let Some(k) = lru.keys[victim as usize].take() {
                self.map.remove(&k);
            }
            victim
        } else {
            return Err(MapError::TooBig);
        };
        let boxed: Box<[u8]> = key.into();
        if let Some(lru) = &mut self.lru {
            lru.grow(slot);
            lru.keys[slot as usize] = Some(boxed.clone());
            lru.push_front(slot);
        }
        self.map.insert(boxed, slot);
        Ok((slot, true))
    }

    /// Removes `key`, returning its slot to the free list.
    pub(super) fn remove(&mut self, key: &[u8]) -> Result<u32, MapError> {
        let slot = self.map.remove(key).ok_or(MapError::NotFound)?;
        if let Some(lru) = &mut self.lru {
            lru.unlink(slot);
            lru.keys[slot as usize] = None;
        }
        self.free.push(slot);
        Ok(slot)
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&[u8], u32)> {
        self.map.iter().map(|(k, &s)| (&**k, s))
    }
}
