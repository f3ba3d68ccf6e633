"""Helpers for the STF generators: build frames with scapy, write `packet` / `expect` lines,
and the checksums and CRCs BMv2 computes, written out here so they can be reviewed.

Every generator script writes one or more `.stf` files next to the `.p4` it tests; run
`python3 gen_all.py` in this folder to regenerate them all (the output is deterministic).
"""

import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
STF_DIR = os.path.normpath(os.path.join(HERE, ".."))
EXAMPLES_DIR = os.path.normpath(os.path.join(HERE, "../../../../../examples/p4"))


def hexs(data):
    """Bytes as STF hex, grouped by 8 bytes for reading (the grouping means nothing)."""
    h = bytes(data).hex()
    return " ".join(h[i:i + 16] for i in range(0, len(h), 16))


class Stf:
    """Lines of one STF file."""

    def __init__(self, title):
        self.lines = ["# " + l if l else "#" for l in title.strip().split("\n")]
        self.lines.append("")

    def comment(self, text):
        self.lines.append("")
        for l in text.strip().split("\n"):
            self.lines.append("# " + l)

    def raw(self, line):
        self.lines.append(line)

    def packet(self, port, data):
        self.lines.append("packet %d %s" % (port, hexs(data)))

    def expect(self, port, data=None, exact=True):
        if data is None:
            self.lines.append("expect %d" % port)
        else:
            self.lines.append("expect %d %s%s" % (port, hexs(data), " $" if exact else ""))

    def write(self, path):
        with open(path, "w") as f:
            f.write("\n".join(self.lines).rstrip("\n") + "\n")


def ones_sum16(data):
    """The 16-bit ones' complement sum of data (padded with a zero byte when odd)."""
    data = bytes(data)
    if len(data) % 2:
        data += b"\0"
    s = 0
    for i in range(0, len(data), 2):
        s += (data[i] << 8) | data[i + 1]
        s = (s & 0xFFFF) + (s >> 16)
    return s


def csum16(data):
    """BMv2's csum16: the ones' complement of the ones' complement sum (the IPv4 checksum)."""
    return (~ones_sum16(data)) & 0xFFFF


def crc32(data):
    """BMv2's crc32: CRC-32 (poly 0x04C11DB7 reflected, init and xor-out 0xFFFFFFFF) = zlib's."""
    return zlib.crc32(bytes(data)) & 0xFFFFFFFF


def crc16(data):
    """BMv2's crc16: CRC-16/ARC (poly 0x8005 reflected = 0xA001, init 0, no xor-out)."""
    crc = 0
    for b in bytes(data):
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc


assert crc16(b"123456789") == 0xBB3D  # the CRC-16/ARC check value
assert crc32(b"123456789") == 0xCBF43926  # the CRC-32 check value


def ipv4_fix(ip):
    """A bytes IPv4 header (no options) with its checksum recomputed."""
    ip = bytearray(ip)
    ip[10:12] = b"\0\0"
    ip[10:12] = struct.pack("!H", csum16(ip[:20]))
    return bytes(ip)


def mac(s):
    return bytes(int(x, 16) for x in s.split(":"))


def u8(v):
    return struct.pack("!B", v)


def u16(v):
    return struct.pack("!H", v)


def u32(v):
    return struct.pack("!I", v)


def u64(v):
    return struct.pack("!Q", v)


def eth(dst="00:00:00:00:00:02", src="00:00:00:00:00:01", etype=0x0800):
    return mac(dst) + mac(src) + u16(etype)
