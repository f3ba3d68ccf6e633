#!/usr/bin/env python3
"""Regenerate the whole-frame vectors of stack_common/mod.rs with scapy (prints Rust consts)."""
from scapy.all import *
from scapy.layers.vxlan import VXLAN
from scapy.contrib.geneve import GENEVE, GeneveOptions
from scapy.contrib.roce import *
from scapy.layers.inet6 import IPv6ExtHdrHopByHop, IPv6ExtHdrDestOpt, ICMPv6EchoRequest, IPv6ExtHdrFragment
import struct
M1 = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
M2 = dict(src="0a:00:00:00:00:01", dst="0a:00:00:00:00:02")
V = {}
V["TCP4"] = (Ether(**M1)/IP(src="10.0.0.1", dst="10.0.0.2")/TCP(sport=1234, dport=80, flags="S", options=[("MSS",1460)])/b"xy", "Ether/IP/TCP(SYN, MSS option)/'xy'")
V["VLAN_UDP4"] = (Ether(**M1)/Dot1Q(vlan=100, prio=3)/IP(src="10.0.0.1", dst="10.0.0.2")/UDP(sport=5000, dport=53)/b"q", "Ether/Dot1Q(vlan=100)/IP/UDP(dport=53)/'q' (Ethernet padding to 60 bytes)")
V["QINQ_ICMP6"] = (Ether(**M1)/Dot1AD(vlan=10)/Dot1Q(vlan=20)/IPv6(src="fd00::1", dst="fd00::2")/ICMPv6EchoRequest(id=1, seq=2), "Ether/Dot1AD(vlan=10)/Dot1Q(vlan=20)/IPv6/ICMPv6EchoRequest")
V["IPV6_EXT_UDP"] = (Ether(**M1)/IPv6(src="fd00::1", dst="fd00::2")/IPv6ExtHdrHopByHop()/IPv6ExtHdrDestOpt()/UDP(sport=1, dport=2)/b"abcd", "Ether/IPv6/HopByHop/DestOpt/UDP/'abcd'")
V["ARP"] = (Ether(src="02:00:00:00:00:01", dst="ff:ff:ff:ff:ff:ff")/ARP(psrc="10.0.0.1", pdst="10.0.0.2", hwsrc="02:00:00:00:00:01"), "Ether/ARP who-has")
V["ICMP4"] = (Ether(**M1)/IP(src="10.0.0.1", dst="10.0.0.2")/ICMP(id=7, seq=1)/b"ping", "Ether/IP/ICMP echo/'ping'")
V["VXLAN"] = (Ether(**M1)/IP(src="192.168.0.1", dst="192.168.0.2")/UDP(sport=40000, dport=4789)/VXLAN(vni=0x123456, flags=0x08)/Ether(**M2)/Dot1Q(vlan=5)/IP(src="172.16.0.1", dst="172.16.0.2")/TCP(sport=33000, dport=443, flags="A")/b"inner", "Ether/IP/UDP(4789)/VXLAN(vni=0x123456)/Ether/Dot1Q(vlan=5)/IP/TCP/'inner'")
V["GENEVE"] = (Ether(**M1)/IPv6(src="fd00::1", dst="fd00::2")/UDP(sport=40001, dport=6081)/GENEVE(vni=0xabcdef, proto=0x6558, options=GeneveOptions(classid=0x0102, type=0x80, data=b"\x01\x02\x03\x04"))/Ether(**M2)/IP(src="172.16.0.1", dst="172.16.0.2")/UDP(sport=7, dport=9)/b"g", "Ether/IPv6/UDP(6081)/GENEVE(vni=0xabcdef, one 8-byte option)/Ether/IP/UDP/'g'")
V["NVGRE"] = (Ether(**M1)/IP(src="192.168.0.1", dst="192.168.0.2")/GRE(key_present=1, proto=0x6558, key=(0x00beef<<8)|0x2a)/Ether(**M2)/IPv6(src="fd01::1", dst="fd01::2")/TCP(sport=1, dport=2), "Ether/IP/GRE(K, 0x6558, key=VSID 0xbeef FlowID 0x2a)/Ether/IPv6/TCP")
V["GRE_IP"] = (Ether(**M1)/IP(src="192.168.0.1", dst="192.168.0.2")/GRE(proto=0x0800)/IP(src="10.9.9.1", dst="10.9.9.2")/ICMP(), "Ether/IP/GRE(0x0800)/IP/ICMP")
reth = struct.pack("!QII", 0x1000, 0x1234, 4)
V["ROCE_WRITE"] = (Ether(**M1)/IP(src="10.0.0.1", dst="10.0.0.2")/UDP(sport=49152, dport=4791, chksum=0)/BTH(opcode=0x0a, dqpn=0x12, psn=100, ackreq=1)/Raw(reth + b"DATA"), "Ether/IP/UDP(4791)/BTH(RC_RDMA_WRITE_ONLY)/RETH/'DATA'/ICRC")
V["ROCE_ATOMIC_ACK6"] = (Ether(**M1)/IPv6(src="fd00::1", dst="fd00::2")/UDP(sport=49152, dport=4791)/BTH(opcode=0x12, dqpn=0x34, psn=7)/AETH(syndrome=0, msn=3)/Raw(struct.pack("!Q", 0x55)), "Ether/IPv6/UDP(4791)/BTH(RC_ATOMIC_ACKNOWLEDGE)/AETH/AtomicAckETH/ICRC")
V["ROCE_CNP"] = (Ether(**M1)/IP(src="10.0.0.2", dst="10.0.0.1", tos=2)/UDP(sport=49152, dport=4791)/cnp(0x12), "Ether/IP/UDP(4791)/BTH(CNP)/16 reserved/ICRC")
V["VXLAN_ROCE"] = (Ether(**M1)/IP(src="192.168.0.1", dst="192.168.0.2")/UDP(sport=40000, dport=4789)/VXLAN(vni=77, flags=0x08)/Ether(**M2)/IP(src="10.0.0.1", dst="10.0.0.2")/UDP(sport=49152, dport=4791)/BTH(opcode=0x11, dqpn=5, psn=1)/AETH(syndrome=0x1f, msn=1), "Ether/IP/UDP/VXLAN(vni=77)/Ether/IP/UDP(4791)/BTH(RC_ACKNOWLEDGE)/AETH/ICRC")
V["FRAG4"] = (Ether(**M1)/IP(src="10.0.0.1", dst="10.0.0.2", flags="MF", frag=0, proto=17)/Raw(b"\x00\x01\x00\x02\x00\x50\x00\x00" + b"z"*8), "Ether/IP(MF, first fragment)/8 bytes of UDP header + 8 bytes")
V["VXLAN_SHORT_INNER"] = (Ether(**M1)/IP(src="192.168.0.1", dst="192.168.0.2")/UDP(sport=40000, dport=4789)/VXLAN(vni=1)/Raw(b"\x02"*10), "Ether/IP/UDP/VXLAN/10 bytes (an inner Ethernet header cut short)")
V["ROCE_SHORT_RETH"] = (Ether(**M1)/IP(src="10.0.0.1", dst="10.0.0.2")/UDP(sport=49152, dport=4791)/BTH(opcode=0x0a, dqpn=1)/Raw(b"\x00"*6), "Ether/IP/UDP(4791)/BTH(RC_RDMA_WRITE_ONLY)/6 bytes (RETH cut short)/ICRC")
V["ROCE_NO_ICRC"] = (Ether(**M1)/IP(src="10.0.0.1", dst="10.0.0.2")/UDP(sport=49152, dport=4791)/Raw(bytes([0x11,0,0xff,0xff,0,0,0,1,0,0,0,1, 0x1f,0,0,1])), "Ether/IP/UDP(4791)/BTH(RC_ACKNOWLEDGE)/AETH, no ICRC")
out = ["// Generated with scapy %s by the snic test-vector script; each is a whole Ethernet frame.\n" % conf.version]
for k, (p, desc) in V.items():
    b = raw(p)
    if len(b) < 60: b = b + b"\x00"*(60-len(b))
    out.append("/// %s\nconst %s: &str = \"%s\";\n" % (desc, k, b.hex()))
print("\n".join(out))
