#!/usr/bin/env python3
"""Seeded random packets for the eBPF differential test (ebpf_differential.rs), built with
scapy: IPv4 (with and without options, fragments), IPv6, TCP, UDP, ICMP, ICMPv6, 802.1Q,
VXLAN (good and malformed), ARP, runts and truncated headers.

Usage: packets.py SEED COUNT -- prints one frame per line as hex.
"""
import random
import sys

from scapy.all import (ARP, ICMP, IP, UDP, TCP, Dot1Q, Ether, IPv6, ICMPv6EchoRequest,
                       IPOption_NOP, IPOption_RR, Raw, VXLAN)

SRC_POOL = ["10.0.0.1", "10.1.2.3", "10.255.0.9", "192.0.2.7", "192.0.2.200", "198.51.100.1",
            "203.0.113.77", "172.16.5.5", "8.8.8.8", "1.2.3.4"]
PORTS = [53, 80, 123, 443, 1900, 4789, 6881, 11211, 19, 9, 12345, 65535]


def payload(rng, lo=0, hi=64):
    return Raw(bytes(rng.getrandbits(8) for _ in range(rng.randint(lo, hi))))


def mac(rng):
    return "02:%02x:%02x:%02x:%02x:%02x" % tuple(rng.getrandbits(8) for _ in range(5))


def l4(rng):
    k = rng.randrange(4)
    if k == 0:
        return UDP(sport=rng.choice(PORTS + [rng.randrange(65536)]),
                   dport=rng.choice(PORTS + [rng.randrange(65536)])) / payload(rng)
    if k == 1:
        return TCP(sport=rng.randrange(65536), dport=rng.choice(PORTS),
                   flags=rng.choice(["S", "SA", "A", "PA", "R", "F"])) / payload(rng)
    if k == 2:
        return ICMP(type=rng.choice([0, 8, 3, 11])) / payload(rng)
    return Raw(bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 40))))


def ipv4(rng):
    ip = IP(src=rng.choice(SRC_POOL), dst=rng.choice(SRC_POOL), ttl=rng.randint(1, 255))
    r = rng.random()
    if r < 0.1:
        ip.options = [IPOption_NOP(), IPOption_RR()]
    elif r < 0.15:
        ip.flags = "MF"
    elif r < 0.2:
        ip.frag = rng.randint(1, 100)
    return ip / l4(rng)


def ipv6(rng):
    ip6 = IPv6(src="2001:db8::%x" % rng.randrange(65536), dst="2001:db8::1")
    if rng.random() < 0.3:
        return ip6 / ICMPv6EchoRequest() / payload(rng)
    return ip6 / l4(rng)


def inner_frame(rng):
    return Ether(src=mac(rng), dst=mac(rng)) / (ipv4(rng) if rng.random() < 0.7 else ipv6(rng))


def frame(rng):
    k = rng.randrange(10)
    eth = Ether(src=mac(rng), dst=mac(rng))
    if k <= 2:
        p = eth / ipv4(rng)
    elif k == 3:
        p = eth / ipv6(rng)
    elif k == 4:
        p = eth / Dot1Q(vlan=rng.choice([1, 100, 4094])) / (ipv4(rng) if rng.random() < 0.5 else ipv6(rng))
    elif k == 5:
        flags = 0x08 if rng.random() < 0.8 else 0x00
        p = (eth / IP(src=rng.choice(SRC_POOL), dst="192.168.0.2") /
             UDP(sport=rng.randrange(49152, 65536), dport=4789) / VXLAN(vni=rng.randrange(1 << 24), flags=flags) /
             inner_frame(rng))
    elif k == 6:
        p = eth / ARP(psrc=rng.choice(SRC_POOL), pdst=rng.choice(SRC_POOL))
    else:
        p = eth / ipv4(rng)
    b = bytes(p)
    t = rng.random()
    if t < 0.08:
        b = b[:rng.randint(14, max(14, len(b) - 1))]  # truncated headers
    elif t < 0.10:
        b = b[:rng.randint(0, 13)]  # runts (the kernel refuses these in test runs)
    return b


def main():
    seed, count = int(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    out = sys.stdout
    for _ in range(count):
        out.write(frame(rng).hex() + "\n")


if __name__ == "__main__":
    main()
