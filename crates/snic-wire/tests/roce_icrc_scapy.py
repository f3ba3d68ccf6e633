#!/usr/bin/env python3
"""Regenerate the ICRC test vectors of roce_icrc_scapy.rs with scapy (prints Rust consts)."""
from scapy.all import *
from scapy.contrib.roce import *
import zlib
def hx(b): 
    return ", ".join("0x%02x"%x for x in b)
pkts = []
# RC_SEND_ONLY over IPv4, pad 1, payload 'hello!!' + 1 pad byte; odd TOS/TTL
p = IP(src="10.0.0.1", dst="10.0.0.2", tos=0x02|0x60, ttl=17, id=0x1234, flags="DF")/UDP(sport=49152, dport=4791, chksum=0)/BTH(opcode=4, solicited=1, padcount=1, pkey=0xffff, dqpn=0x11, ackreq=1, psn=0x123456, fecn=1)/Raw(b"hello!!\x00")
pkts.append(("V4_RC_SEND_ONLY", p))
# RC_RDMA_WRITE_ONLY over IPv4 with RETH (raw) + 8 byte payload
reth = struct.pack("!QII", 0x00007f0012345678, 0xabcd1234, 8)
p = IP(src="192.168.1.10", dst="192.168.1.20", tos=0x03, ttl=64)/UDP(sport=50000, dport=4791)/BTH(opcode=0x0a, pkey=0x8001, dqpn=0xabcdef, psn=5, becn=1)/Raw(reth + b"ABCDEFGH")
pkts.append(("V4_RC_RDMA_WRITE_ONLY", p))
# RC_ACKNOWLEDGE over IPv4 with AETH
p = IP(src="10.1.1.1", dst="10.1.1.2", ttl=3)/UDP(sport=1234, dport=4791)/BTH(opcode=0x11, dqpn=7, psn=99)/AETH(syndrome=0x1f, msn=42)
pkts.append(("V4_RC_ACKNOWLEDGE", p))
# CNP over IPv4
p = IP(src="10.1.1.2", dst="10.1.1.1", tos=0x88)/UDP(sport=4000, dport=4791)/cnp(0x1234)
pkts.append(("V4_CNP", p))
# IPv6: RC_SEND_ONLY_WITH_IMMEDIATE, tc/fl/hlim non-default
imm = struct.pack("!I", 0xdeadbeef)
p = IPv6(src="fd00::1", dst="fd00::2", tc=0x5a, fl=0xabcde, hlim=7)/UDP(sport=55555, dport=4791)/BTH(opcode=0x05, padcount=2, dqpn=0x000102, psn=0xfffffe, ackreq=1)/Raw(imm + b"ipv6 payload" + b"\x00\x00")
pkts.append(("V6_RC_SEND_ONLY_IMM", p))
# IPv6 UD_SEND_ONLY with DETH
deth = struct.pack("!IB", 0x80010000, 0) + (0x000abc).to_bytes(3, "big")
p = IPv6(src="2001:db8::10", dst="2001:db8::20", hlim=64)/UDP(sport=40000, dport=4791)/BTH(opcode=0x64, dqpn=1, psn=0, fecn=1, becn=1)/Raw(deth + bytes(range(16)))
pkts.append(("V6_UD_SEND_ONLY", p))
# IPv6 RC_READ_REQUEST
reth = struct.pack("!QII", 0x1000, 0x77, 4096)
p = IPv6(src="fd00::a", dst="fd00::b")/UDP(sport=49153, dport=4791)/BTH(opcode=0x0c, dqpn=0x42, psn=0x10)/Raw(reth)
pkts.append(("V6_RC_RDMA_READ_REQUEST", p))
out = []
for name, p in pkts:
    b = raw(p)
    icrc = b[-4:]
    out.append("/// %s (scapy %s); ICRC on the wire %s\npub const %s: &[u8] = &[%s];\n" % (name, conf.version, icrc.hex(), name, hx(b)))
print("\n".join(out))
