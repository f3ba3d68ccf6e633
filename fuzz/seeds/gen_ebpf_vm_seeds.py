#!/usr/bin/env python3
"""Writes seeds for the `ebpf_vm` fuzz target into seeds/ebpf_vm/.

Layout (see fuzz_targets/ebpf_vm.rs): byte 0 even = ELF object, odd = raw instructions; bytes
1..3 the packet length (LE16); the packet; the program.

Raw seeds are hand-assembled here; ELF seeds are compiled with clang when it is installed.
"""
import os
import shutil
import struct
import subprocess
import tempfile

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ebpf_vm")
FRAME = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0, 0x45]) + bytes(8) + bytes([17]) + bytes(40)


def insn(code, dst=0, src=0, off=0, imm=0):
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def seed(name, elf, prog):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(bytes([0 if elf else 1]) + struct.pack("<H", len(FRAME)) + FRAME + prog)


RAW = {
    # r2 = data; r3 = data_end (context loads are not rewritten without a verdict: they read
    # snic's own layout); swap two bytes; XDP_TX.
    "raw_swap": [insn(0x79, 2, 1, 0), insn(0x71, 3, 2, 0), insn(0x71, 4, 2, 6),
                 insn(0x73, 2, 4, 0), insn(0x73, 2, 3, 6), insn(0xb7, 0, imm=3), insn(0x95)],
    # A loop that exhausts the budget.
    "raw_loop": [insn(0x07, 0, imm=1), insn(0x05, off=-2), insn(0x95)],
    # Recursion past the frame limit.
    "raw_recurse": [insn(0x85, src=1, imm=-1), insn(0x95)],
    # Atomics on the stack, then a helper (ktime).
    "raw_atomic": [insn(0x7a, 10, off=-8, imm=5), insn(0xb7, 1, imm=3),
                   insn(0xdb, 10, 1, -8, 0x01), insn(0x85, imm=5), insn(0x95)],
    # adjust_head(ctx, -14) then a load past the frame.
    "raw_adjust": [insn(0xbf, 6, 1), insn(0xb7, 2, imm=-14), insn(0x85, imm=44),
                   insn(0x79, 2, 6, 0), insn(0x79, 0, 2, 4096), insn(0x95)],
}

C = {
    "elf_counter": r'''
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, __u32); __type(value, __u64);
         __uint(max_entries, 256); } counts SEC(".maps");
SEC("xdp") int count(struct xdp_md *ctx) {
    unsigned char *d = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    if (d + 24 > end) return XDP_PASS;
    __u32 key = d[23];
    __u64 *v = bpf_map_lookup_elem(&counts, &key);
    if (v) __sync_fetch_and_add(v, 1);
    return XDP_PASS;
}''',
    "elf_adjust": r'''
SEC("xdp") int adj(struct xdp_md *ctx) {
    if (bpf_xdp_adjust_meta(ctx, -8)) return XDP_DROP;
    if (bpf_xdp_adjust_head(ctx, 14)) return XDP_DROP;
    if (bpf_xdp_adjust_tail(ctx, -4)) return XDP_DROP;
    return XDP_PASS;
}''',
}

HDR = "#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n"

if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for name, insns in RAW.items():
        seed(name, False, b"".join(insns))
    if shutil.which("clang"):
        arch = os.uname().machine
        with tempfile.TemporaryDirectory() as tmp:
            for name, body in C.items():
                src, obj = os.path.join(tmp, name + ".c"), os.path.join(tmp, name + ".o")
                with open(src, "w") as f:
                    f.write(HDR + body + '\nchar _license[] SEC("license") = "GPL";\n')
                subprocess.run(["clang", "-O2", "-g", "-target", "bpf", f"-I/usr/include/{arch}-linux-gnu",
                                "-c", src, "-o", obj], check=True)
                with open(obj, "rb") as f:
                    seed(name, True, f.read())
