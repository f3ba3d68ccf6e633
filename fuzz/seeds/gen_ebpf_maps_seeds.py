#!/usr/bin/env python3
"""Writes seeds/ebpf_maps/: for each map type, a valid spec (layout in
fuzz_targets/ebpf_maps.rs) followed by a short, fixed pseudo-random sequence of operations with
keys from a small set, so updates, lookups and deletes hit the same entries. Run from fuzz/."""
import os
import random
import struct

# kind index -> (key size, value size, max entries byte)
SPECS = {
    0: ("hash", 4, 8, 16),
    1: ("array", 4, 12, 8),
    2: ("percpu_array", 4, 8, 4),
    3: ("percpu_hash", 2, 4, 8),
    4: ("lru_hash", 4, 8, 4),
    5: ("lpm_trie", 8, 4, 16),
    6: ("devmap", 4, 4, 8),
    7: ("devmap_hash", 4, 4, 4),
    8: ("ringbuf", 0, 0, 1),
}

def main():
    out = "seeds/ebpf_maps"
    os.makedirs(out, exist_ok=True)
    rng = random.Random(16)
    for kind, (name, k, v, m) in SPECS.items():
        for n in range(2):
            data = bytearray([kind]) + struct.pack("<H", k) + bytes([v, m]) + bytes(4) + bytes([2])
            for _ in range(40):
                op = rng.randrange(9)
                data += bytes([op, rng.randrange(256)])
                if op in (0, 3):
                    data += bytes(rng.choice([0, 1, 2, 8, 24]) for _ in range(k))
                    data += bytes(rng.randrange(256) for _ in range(v))
                elif op in (1, 2, 4):
                    data += bytes(rng.choice([0, 1, 2, 8, 24]) for _ in range(k))
                elif op == 5:
                    data.append(rng.randrange(8))
            with open(f"{out}/{name}_{n}", "wb") as f:
                f.write(data)

if __name__ == "__main__":
    main()
