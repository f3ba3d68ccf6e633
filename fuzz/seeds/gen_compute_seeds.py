#!/usr/bin/env python3
"""Regenerate the seed inputs of the `compute_kernels` fuzz target: one valid command of each
built-in kernel, with the memory it reads.

Run from fuzz/: python3 seeds/gen_compute_seeds.py. The input layout is described at the top of
fuzz_targets/compute_kernels.rs: a 256-byte control-FIFO entry, then bytes written at the start of
each of the three regions (client 1's, client 2's, device memory).
"""

import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "compute_kernels")

# Address selectors of the target: top four bits 0 = client 1, 1 = client 2, 2 = device.
A, B, D = 0, 1 << 60, 2 << 60
HOST_A = 0x10_0000
DEV = 0xD000_0000_0000_0000
I8, F32, I32, U32, I64, U64, F64 = range(7)


def cmd(kernel, addrs, scalars, owner=1):
    b = struct.pack("<IIBB6x", 77, kernel, len(addrs), len(scalars))
    for a, n in addrs + [(0, 0)] * (8 - len(addrs)):
        b += struct.pack("<QQ", a, n)
    for s in scalars + [0] * (8 - len(scalars)):
        b += struct.pack("<Q", s)
    b += bytes([owner - 1]) + bytes(47)
    assert len(b) == 256
    return b


def put(name, c, mem=b""):
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(c + mem)


r = random.Random(15)
noise = bytes(r.randrange(256) for _ in range(512))

put("copy", cmd(0, [(A + 16, 64), (D + 128, 64)], []), noise)
put("reduce_f32", cmd(1, [(A, 64)], [0, F32]), noise)
put("reduce_i64_max", cmd(1, [(D, 128)], [2, I64]), noise)
put("gemm_i8", cmd(2, [(A, 16), (D, 20), (A + 0x400, 80)], [4, 5, 4, I8, 0]), noise)
put("gemm_f32_all_flags", cmd(2, [(A + 4, 84), (D + 8, 140), (A + 0x400, 60)], [3, 5, 7, F32, 15]), noise)
put("gemm_client2", cmd(2, [(B, 9), (B + 64, 9), (B + 128, 36)], [3, 3, 1, I8], owner=2), noise)
put("vadd_i32", cmd(3, [(A, 64), (D, 64), (A + 0x800, 64)], [I32]), noise)
put("vscale_f64", cmd(4, [(D, 64), (A, 64)], [F64, 0x4000000000000000, 0x3FF0000000000000]),
    noise)
sgl = b"".join(struct.pack("<QII", a, n, 0) for a, n in
               [(HOST_A + 0x100, 40), (DEV + 0x40, 24), (HOST_A + 0x10, 0), (HOST_A + 0x200, 9)])
put("gather", cmd(5, [(A, len(sgl)), (D + 0x400, 128)], [4]), sgl.ljust(0x100, b"\0") + noise)
put("crc32c", cmd(6, [(A, 48)], [0]), noise)
put("lz4_compress", cmd(7, [(A, 256), (D, 300)], []), b"abcd" * 64)
# A literal-only block ("hello") and one with a match (8 x "ab").
put("lz4_decompress", cmd(8, [(A, 6), (D, 64)], []), b"\x50hello")
put("lz4_decompress_match", cmd(8, [(A, 11), (D, 64)], []), b"\x24ab\x02\x00\x50abcde")
