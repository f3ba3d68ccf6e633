//! The LPM trie's index. A key is a 4-byte prefix length (host order) followed by the data
//! (network order), as `struct bpf_lpm_trie_key`. Rather than a bit trie, entries live in one
//! hash table keyed by (prefix length, data masked to that length), and the index keeps the set
//! of prefix lengths in use: a lookup tries them longest first, one hash probe each. That is
//! simple to get right, and a lookup costs at most one probe per distinct prefix length
//! (33 for IPv4, usually a handful).

use super::fasthash::Seeded;
use super::{BPF_EXIST, BPF_NOEXIST, MapError};
use std::collections::{BTreeMap, HashMap};

/// Largest data part of a key, in bytes (the kernel's `LPM_DATA_SIZE_MAX`).
pub(super) const MAX_DATA: usize = 256;

/// Key bytes on the stack: the prefix length and the largest data.
const KEY_BUF: usize = 4 + MAX_DATA;

/// An entry: its value slot and its key as last written.
type Entry = (u32, Box<[u8]>);

/// An LPM trie's index.
#[derive(Debug)]
pub(super) struct LpmIndex {
    data_len: usize,
    /// Masked key -> (slot, the key as last written).
    map: HashMap<Box<[u8]>, Entry, Seeded>,
    /// Prefix length -> number of entries with it.
    lens: BTreeMap<u32, usize>,
    max: u32,
    next: u32,
    free: Vec<u32>,
}

/// Writes `key`'s prefix length `plen` and its data masked to `plen` bits into `buf`; returns
/// the key's length.
fn masked(key: &[u8], plen: u32, buf: &mut [u8; KEY_BUF]) -> usize {
    let n = key.len();
    buf[..4].copy_from_slice(&plen.to_ne_bytes());
    let full = (plen / 8) as usize;
    for (i, b) in buf[4..n].iter_mut().enumerate() {
        *b = if i < full {
            key[4 + i]
        } else if i == full && !plen.is_multiple_of(8) {
            key[4 + i] & (0xffu8 << (8 - plen % 8))
        } else {
            0
        };
    }
    n
}

fn prefix_len(key: &[u8]) -> u32 {
    u32::from_ne_bytes([key[0], key[1], key[2], key[3]])
}

impl LpmIndex {
    pub(super) fn new(key_size: u32, max: u32) -> LpmIndex {
        LpmIndex {
            data_len: key_size as usize - 4,
            map: HashMap::with_hasher(Seeded::new()),
            lens: BTreeMap::new(),
            max,
            next: 0,
            free: Vec::new(),
        }
    }

    fn max_plen(&self) -> u32 {
        8 * self.data_len as u32
    }

    /// Longest-prefix match of `key` (a full key; its own prefix length bounds the match, and
    /// one longer than the data matches nothing, as in the kernel).
    pub(super) fn lookup(&self, key: &[u8]) -> Option<u32> {
        let limit = prefix_len(key);
        if limit > self.max_plen() {
            return None;
        }
        let mut buf = [0u8; KEY_BUF];
        for &plen in self.lens.range(..=limit).rev().map(|(l, _)| l) {
            let n = masked(key, plen, &mut buf);
            if let Some(&(slot, _)) = self.map.get(&buf[..n]) {
                return Some(slot);
            }
        }
        None
    }

    /// The slot for exactly `key`'s prefix under `flags`, and whether it is new.
    pub(super) fn insert(&mut self, key: &[u8], flags: u64) -> Result<(u32, bool), MapError> {
        let plen = prefix_len(key);
        if plen > self.max_plen() {
            return Err(MapError::Invalid("prefix length longer than the key's data"));
        }
        let mut buf = [0u8; KEY_BUF];
        let n = masked(key, plen, &mut buf);
        if let Some((slot, stored)) = self.map.get_mut(&buf[..n]) {
            if flags == BPF_NOEXIST {
                return Err(MapError::Exists);
            }
            *stored = key.into();
            return Ok((*slot, false));
        }
        if flags == BPF_EXIST {
            return Err(MapError::NotFound);
        }
        let slot = if let Some(s) = self.free.pop() {
            s
        } else if self.next < self.max {
            self.next += 1;
            self.next - 1
        } else {
            return Err(MapError::NoSpace);
        };
        self.map.insert(buf[..n].into(), (slot, key.into()));
        *self.lens.entry(plen).or_default() += 1;
        Ok((slot, true))
    }

    /// Removes exactly `key`'s prefix.
    pub(super) fn remove(&mut self, key: &[u8]) -> Result<u32, MapError> {
        let plen = prefix_len(key);
        if plen > self.max_plen() {
            return Err(MapError::Invalid("prefix length longer than the key's data"));
        }
        let mut buf = [0u8; KEY_BUF];
        let n = masked(key, plen, &mut buf);
        let (slot, _) = self.map.remove(&buf[..n]).ok_or(MapError::NotFound)?;
        if let Some(c) = self.lens.get_mut(&plen) {
            *c -= 1;
            if *c == 0 {
                self.lens.remove(&plen);
            }
        }
        self.free.push(slot);
        Ok(slot)
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// `(key as last written, slot)` of every entry.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&[u8], u32)> {
        self.map.values().map(|(s, k)| (&**k, *s))
    }
}
