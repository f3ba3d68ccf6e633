#!/usr/bin/env python3
"""Check a pcap written by snic with scapy: every checksum and every RoCEv2 ICRC must verify.

Usage: check_pcap.py [--expect-icrc N] FILE.pcap

For each packet, at every depth (outer and tunnelled inner headers alike), each IPv4, UDP, TCP,
ICMP and ICMPv6 checksum is recomputed by scapy (the field is cleared and the packet rebuilt)
and compared with the one in the file; an IPv4 UDP checksum of zero ("no checksum", as RoCEv2
and VXLAN senders may use) is accepted. For each RoCEv2 packet the ICRC is recomputed with
scapy's own BTH.compute_icrc and compared with the four bytes that end the UDP payload.

Prints one line per packet ("INDEX: SUMMARY[ icrc-checked]: ok|FAIL ...") and exits 1 if any
packet failed, naming its index (from 1). With --expect-icrc N it also exits 1 unless exactly N
packets had their ICRC checked: a RoCEv2 frame scapy does not dissect as BTH gets no ICRC check,
and must not pass unnoticed.
"""

import logging
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)

from scapy.all import ICMP, IP, TCP, UDP, Ether, IPv6, NoPayload, rdpcap  # noqa: E402
from scapy.contrib.roce import BTH  # noqa: E402
from scapy.layers.inet6 import _ICMPv6  # noqa: E402
import scapy.layers.vxlan  # noqa: E402,F401  (binds UDP 4789 to VXLAN)
import scapy.contrib.geneve  # noqa: E402,F401  (binds UDP 6081 to Geneve)


def layer_at(pkt, depth):
    cur = pkt
    for _ in range(depth):
        cur = cur.payload
    return cur


def checksum_field(layer):
    if isinstance(layer, (IP, UDP, TCP, ICMP)):
        return "chksum"
    if isinstance(layer, _ICMPv6) and any(f.name == "cksum" for f in layer.fields_desc):
        return "cksum"
    return None


def check_checksums(pkt):
    """Return a list of 'LAYER: carried X, computed Y' strings for mismatching checksums."""
    bad = []
    depth = 0
    cur = pkt
    while not isinstance(cur, NoPayload):
        field = checksum_field(cur)
        if field is not None:
            carried = getattr(cur, field)
            skip = isinstance(cur, UDP) and carried == 0 and isinstance(cur.underlayer, IP)
            if not skip:
                clone = pkt.copy()
                setattr(layer_at(clone, depth), field, None)
                rebuilt = Ether(bytes(clone))
                computed = getattr(layer_at(rebuilt, depth), field, None)
                if computed != carried:
                    bad.append(f"{cur.name} (depth {depth}): carried {carried:#06x}, computed {computed:#06x}")
        cur = cur.payload
        depth += 1
    return bad


def check_icrc(pkt):
    """None when the packet is not RoCEv2, else (ok, carried_hex, computed_hex)."""
    if BTH not in pkt:
        return None
    udp = pkt[BTH].underlayer
    if not isinstance(udp, UDP):
        return (False, "", "BTH not over UDP")
    ip = udp.underlayer
    if not isinstance(ip, (IP, IPv6)):
        return (False, "", "UDP of BTH not over IP")
    # The ICRC is the last four bytes of the UDP payload. Trim anything after the IP datagram
    # (Ethernet padding or trailer) first: scapy would hash it as BTH payload.
    frame = bytes(pkt)
    ip_at = len(frame) - len(bytes(ip))
    ip_len = ip.len if isinstance(ip, IP) else 40 + ip.plen
    trimmed = Ether(frame[: ip_at + ip_len])
    udp_bytes = bytes(trimmed[BTH].underlayer)[: udp.len]
    carried = udp_bytes[-4:]
    computed = trimmed[BTH].compute_icrc(None)
    return (carried == computed, carried.hex(), computed.hex())


def main(argv):
    args = argv[1:]
    expect_icrc = None
    if len(args) == 3 and args[0] == "--expect-icrc" and args[1].isdigit():
        expect_icrc = int(args[1])
        args = args[2:]
    if len(args) != 1:
        print("usage: check_pcap.py [--expect-icrc N] FILE.pcap", file=sys.stderr)
        return 2
    packets = rdpcap(args[0])
    failed = []
    icrc_checked = 0
    for index, pkt in enumerate(packets, start=1):
        pkt = Ether(bytes(pkt))
        problems = check_checksums(pkt)
        icrc = check_icrc(pkt)
        if icrc is not None:
            icrc_checked += 1
            if not icrc[0]:
                problems.append(f"ICRC: carried {icrc[1]}, computed {icrc[2]}")
        verdict = "ok" if not problems else "FAIL " + "; ".join(problems)
        extra = "" if icrc is None else " icrc-checked"
        print(f"{index}: {pkt.summary()}{extra}: {verdict}")
        if problems:
            failed.append(index)
    if not packets:
        print("no packets in file", file=sys.stderr)
        return 1
    if failed:
        print(f"checksum/ICRC mismatch in packet(s): {', '.join(map(str, failed))}", file=sys.stderr)
        return 1
    if expect_icrc is not None and icrc_checked != expect_icrc:
        print(f"ICRC checked in {icrc_checked} packet(s), expected {expect_icrc}", file=sys.stderr)
        return 1
    print(f"all {len(packets)} packets verified ({icrc_checked} ICRCs)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
