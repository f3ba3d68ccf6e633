"""Helpers shared by the P4Runtime client scripts (tests/p4runtime_clients.rs runs them).

No protobuf imports here: the scripts run in different venvs (p4runtime-shell's and finsy's),
each with its own generated P4Runtime modules.

Every script prints one `ok WHAT` line per check that held and ends with
`PASS NAME: N checks`; a check that fails raises `CheckFailed` (the script exits 1).
"""

import argparse
import os
import socket
import struct
import sys
import time
import traceback


class CheckFailed(AssertionError):
    pass


class Checks:
    def __init__(self, name):
        self.name = name
        self.count = 0

    def ok(self, cond, what, detail=""):
        """Record `what` as checked; raise with `detail` unless `cond` holds."""
        if not cond:
            raise CheckFailed(f"{what}: {detail}" if detail else what)
        self.count += 1
        print(f"ok {what}", flush=True)

    def eq(self, got, want, what):
        self.ok(got == want, what, f"got {got!r}, want {want!r}")

    def gap(self, cond, what, detail=""):
        """A known gap of the server: print `GAP what` instead of failing (the Rust test shows
        these lines), or `ok what` once it holds."""
        if cond:
            self.ok(True, what)
        else:
            print(f"GAP {what}: {detail}", flush=True)


def parse_args(positional):
    """`--grpc ADDR --udp SNIC,PEER` and the named positional arguments (`NAME?`: optional)."""
    p = argparse.ArgumentParser()
    p.add_argument("--grpc", required=True, help="P4Runtime server, HOST:PORT")
    p.add_argument("--udp", required=True, help="snic's UDP port 0 and its peer: SNIC,PEER")
    p.add_argument("--device-id", type=int, default=1)
    p.add_argument("--cpu-port", type=int, default=255)
    for name in positional:
        if name.endswith("?"):
            p.add_argument(name[:-1], nargs="?")
        else:
            p.add_argument(name)
    args = p.parse_args()
    snic, peer = args.udp.split(",")
    args.udp_snic = hostport(snic)
    args.udp_peer = hostport(peer)
    return args


def hostport(s):
    host, port = s.rsplit(":", 1)
    return (host, int(port))


def run_main(name, main):
    """Run `main(checks)`; print PASS and exit 0, or the failure and exit 1. os._exit: the
    clients leave non-daemon threads (p4runtime-shell's stream readers) that would keep a
    failed script alive."""
    checks = Checks(name)
    code = 1
    try:
        main(checks)
        print(f"PASS {name}: {checks.count} checks", flush=True)
        code = 0
    except BaseException:  # noqa: BLE001 - report anything, then exit
        traceback.print_exc()
        print(f"FAIL {name} after {checks.count} checks", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def mac(s):
    return bytes(int(x, 16) for x in s.split(":"))


def ipv4(s):
    return socket.inet_aton(s)


def csum16(data):
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return (~total) & 0xFFFF


def ipv4_frame(dst_mac, src_mac, src_ip, dst_ip, ttl=64, payload=b"snic-p4rt" * 4):
    """Ethernet + IPv4 (IHL 5, valid checksum) + UDP 1234->5678 + payload."""
    udp = struct.pack("!HHHH", 1234, 5678, 8 + len(payload), 0) + payload
    total = 20 + len(udp)
    hdr = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, total, 1, 0, ttl, 17, 0, ipv4(src_ip), ipv4(dst_ip)
    )
    hdr = hdr[:10] + struct.pack("!H", csum16(hdr)) + hdr[12:]
    return mac(dst_mac) + mac(src_mac) + b"\x08\x00" + hdr + udp


def eth_frame(dst_mac, src_mac, ethertype, payload=b"", size=60):
    f = mac(dst_mac) + mac(src_mac) + struct.pack("!H", ethertype) + payload
    return f + b"\x5a" * max(0, size - len(f))


class UdpPeer:
    """The far end of snic's `udp:SNIC,PEER` port: frames sent here enter snic on port 0,
    frames snic sends out of port 0 arrive here."""

    def __init__(self, snic, peer):
        self.snic = snic
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(peer)

    def send(self, frame):
        self.sock.sendto(frame, self.snic)

    def recv(self, timeout=5.0):
        """The next frame out of port 0, or None after `timeout` seconds."""
        self.sock.settimeout(timeout)
        try:
            data, _ = self.sock.recvfrom(65536)
            return data
        except socket.timeout:
            return None

    def drain(self, quiet=0.2):
        while self.recv(quiet) is not None:
            pass


def wait_for(fn, timeout=5.0, step=0.05):
    """Poll `fn()` until it returns a true value (returned) or `timeout` passes (last value)."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(step)


def to_int(b):
    return int.from_bytes(b, "big")
