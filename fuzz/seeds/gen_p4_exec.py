#!/usr/bin/env python3
"""Regenerate seeds/p4_exec/ from the `packet` lines of examples/p4/*.stf.

Run from fuzz/: python3 seeds/gen_p4_exec.py (no scapy needed). The input layout is described at
the top of fuzz_targets/p4_exec.rs: a selector byte, then records `port, len LE16, bytes`. Each
program gets two seeds, with and without its STF table entries, of at most 16 packets each.
"""

import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples", "p4")
# The order of PROGRAMS in fuzz_targets/p4_exec.rs.
PROGRAMS = ["l3_router", "reconic_classifier", "ecn_incast", "vxlan", "telemetry"]


def packets(stf):
    out = []
    with open(stf) as f:
        for line in f:
            w = line.split()
            if len(w) >= 2 and w[0] == "packet":
                out.append((int(w[1], 0), bytes.fromhex("".join(w[2:]))))
    return out


def main():
    d = os.path.join(HERE, "p4_exec")
    os.makedirs(d, exist_ok=True)
    for i, name in enumerate(PROGRAMS):
        pkts = packets(os.path.join(EXAMPLES, name + ".stf"))[:16]
        body = b"".join(bytes([port & 0xFF]) + struct.pack("<H", len(p)) + p for port, p in pkts)
        for entries in (0, 1):
            sel = i + 5 * entries
            with open(os.path.join(d, f"{name}_{'entries' if entries else 'bare'}"), "wb") as f:
                f.write(bytes([sel]) + body)


if __name__ == "__main__":
    main()
