//! A fast seeded hasher for map keys. std's SipHash costs tens of nanoseconds a key, which
//! dominates a hash-map lookup and multiplies in the LPM index (one probe per prefix length).
//! Keys here have a fixed size per map, and each map draws its own random seed (from std's
//! `RandomState`), like the kernel's `jhash` with a random seed per map: an attacker who
//! controls packet-derived keys cannot precompute collisions for an unknown seed.

use std::hash::{BuildHasher, Hasher};

const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// Builds [`KeyHasher`]s with this map's seed.
#[derive(Clone, Debug)]
pub(super) struct Seeded(u64);

impl Seeded {
    /// A fresh random seed.
    pub(super) fn new() -> Seeded {
        Seeded(std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64) | 1)
    }
}

impl BuildHasher for Seeded {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher { h: self.0, seed: self.0 }
    }
}

/// Multiply-rotate over 8-byte words, with a final avalanche mixed with the seed.
#[derive(Debug)]
pub(super) struct KeyHasher {
    h: u64,
    seed: u64,
}

impl KeyHasher {
    fn word(&mut self, w: u64) {
        self.h = (self.h ^ w).wrapping_mul(K).rotate_left(29) ^ self.seed;
    }
}

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.word(u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.word(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.word(n as u64);
    }

    fn finish(&self) -> u64 {
        // murmur3's 64-bit finaliser.
        let mut x = self.h ^ (self.h >> 33);
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    /// Consecutive small keys (array-like indexes, counters) spread over the low bits (bucket
    /// index) and the top bits (hashbrown's tag) about as a random function would (65536 keys
    /// into 65536 values: about 41,400 distinct).
    #[test]
    fn spreads_small_keys() {
        let s = Seeded::new();
        let mut low = std::collections::HashSet::new();
        let mut top = std::collections::HashSet::new();
        for i in 0..65536u32 {
            let b: Box<[u8]> = i.to_ne_bytes().into();
            let h = s.hash_one(&b);
            assert_ne!(h, s.hash_one([i as u8]), "key length matters");
            low.insert(h & 0xffff);
            top.insert(h >> 48);
        }
        assert!(low.len() > 35_000 && top.len() > 35_000);
    }
}
