#!/usr/bin/env python3
"""Build the scapy interop corpus: a pcap of every format snic parses, and the fields we expect.

Usage: scapy_corpus.py OUT.pcap [OUT.json]

Writes OUT.pcap (classic pcap, Ethernet link type) and OUT.json (default: OUT.pcap with a
.json suffix). The JSON holds one object per packet, in pcap order, with what a correct parser
must report for it: the layer names outer to inner (snic_wire::stack::Layer::name spelling), the
innermost 5-tuple, the tunnel VNI, the RoCEv2 BTH and extension-header fields, the ICRC verdict,
the RecoNIC class ("rdma" or "other"), and for malformed packets the layer that fails and the
error kind (snic_wire::Error::name spelling).

Every packet is built by scapy (checksums, lengths and RoCEv2 ICRCs are scapy's), so the
corpus checks snic against a parser nobody on this project wrote. RoCEv2 extension headers
(RETH, ImmDt, IETH, AtomicETH, AtomicAckETH, DETH) are packed here from the IBTA layouts
because scapy.contrib.roce only defines BTH and AETH; the ICRC over them is still scapy's
BTH.compute_icrc.
"""

import json
import logging
import os
import struct
import sys

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)

from scapy.all import (  # noqa: E402
    ARP,
    GRE,
    ICMP,
    IP,
    TCP,
    UDP,
    Dot1AD,
    Dot1Q,
    Ether,
    ICMPv6EchoRequest,
    IPOption_Router_Alert,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
    Raw,
)
from scapy.contrib.geneve import GENEVE, GeneveOptions  # noqa: E402
from scapy.contrib.roce import AETH, BTH, cnp  # noqa: E402
from scapy.layers.vxlan import VXLAN  # noqa: E402

ROCE_PORT = 4791
MAC_A = "02:00:00:00:00:0a"
MAC_B = "02:00:00:00:00:0b"
MAC_C = "02:00:00:00:00:0c"
MAC_D = "02:00:00:00:00:0d"

# Opcode names as snic reports them (IBTA names, RC transport).
OPCODE_NAMES = {
    0x04: "RC_SEND_ONLY",
    0x05: "RC_SEND_ONLY_WITH_IMMEDIATE",
    0x0A: "RC_RDMA_WRITE_ONLY",
    0x0B: "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
    0x0C: "RC_RDMA_READ_REQUEST",
    0x0D: "RC_RDMA_READ_RESPONSE_FIRST",
    0x0E: "RC_RDMA_READ_RESPONSE_MIDDLE",
    0x0F: "RC_RDMA_READ_RESPONSE_LAST",
    0x10: "RC_RDMA_READ_RESPONSE_ONLY",
    0x11: "RC_ACKNOWLEDGE",
    0x12: "RC_ATOMIC_ACKNOWLEDGE",
    0x13: "RC_COMPARE_SWAP",
    0x14: "RC_FETCH_ADD",
    0x17: "RC_SEND_ONLY_WITH_INVALIDATE",
    0x64: "UD_SEND_ONLY",
    0x81: "CNP",
}


def reth(va, rkey, dma_len):
    return struct.pack("!QII", va, rkey, dma_len)


def immdt(imm):
    return struct.pack("!I", imm)


def ieth(rkey):
    return struct.pack("!I", rkey)


def atomiceth(va, rkey, swap_add, compare):
    return struct.pack("!QIQQ", va, rkey, swap_add, compare)


def atomicacketh(orig):
    return struct.pack("!Q", orig)


def deth(qkey, src_qp):
    return struct.pack("!II", qkey, src_qp & 0xFFFFFF)


def aeth_bytes(syndrome, msn):
    return struct.pack("!I", (syndrome << 24) | (msn & 0xFFFFFF))


class Corpus:
    def __init__(self):
        self.packets = []
        self.expect = []

    def add(self, name, pkt, exp, raw=None):
        data = raw if raw is not None else bytes(pkt)
        e = {"index": len(self.packets) + 1, "name": name, "len": len(data)}
        e.update(
            {
                "layers": [],
                "vlan_id": None,
                "vni": None,
                "l3": None,
                "src": None,
                "dst": None,
                "proto": None,
                "sport": None,
                "dport": None,
                "roce": None,
                "icrc_ok": None,
                "class": "other",
                "error_layer": None,
                "error": None,
            }
        )
        e.update(exp)
        self.expect.append(e)
        self.packets.append(Ether(data) if raw is not None else pkt)
        self._raw = getattr(self, "_raw", [])
        self._raw.append(data)

    def write(self, pcap_path, json_path):
        # Write the raw bytes ourselves (classic pcap, microsecond stamps, link type 1) so
        # nothing can "fix" a deliberately corrupted packet on the way out.
        with open(pcap_path, "wb") as f:
            f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
            for i, data in enumerate(self._raw):
                f.write(struct.pack("<IIII", 1700000000 + i, 0, len(data), len(data)))
                f.write(data)
        with open(json_path, "w") as f:
            json.dump({"packets": self.expect}, f, indent=1)
            f.write("\n")


def five(l3, src, dst, proto, sport=None, dport=None):
    return {"l3": l3, "src": src, "dst": dst, "proto": proto, "sport": sport, "dport": dport}


def roce_exp(opcode, dqpn, psn, ack_req=False, se=False, pkey=0xFFFF, ext=None, becn=False):
    r = {
        "opcode": opcode,
        "opcode_name": OPCODE_NAMES.get(opcode),
        "dest_qp": dqpn,
        "psn": psn,
        "ack_req": ack_req,
        "se": se,
        "pkey": pkey,
        "fecn": False,
        "becn": becn,
    }
    r.update(ext or {})
    return r


def roce_v4(name, c, opcode, ext_bytes, payload, layers_ext, ext_exp, dqpn, psn, ack_req=False, se=False):
    pkt = (
        Ether(src=MAC_A, dst=MAC_B)
        / IP(src="192.168.1.1", dst="192.168.1.2", tos=0x02)
        / UDP(sport=0xC000 + opcode, dport=ROCE_PORT)
        / BTH(opcode=opcode, dqpn=dqpn, psn=psn, ackreq=int(ack_req), solicited=int(se), pkey=0xFFFF)
        / Raw(ext_bytes + payload)
    )
    rc = opcode < 0x20
    c.add(
        name,
        pkt,
        dict(
            layers=["eth", "ipv4", "udp", "bth"] + layers_ext,
            **five("ipv4", "192.168.1.1", "192.168.1.2", 17, 0xC000 + opcode, ROCE_PORT),
            roce=roce_exp(opcode, dqpn, psn, ack_req, se, ext=ext_exp),
            icrc_ok=True,
            **{"class": "rdma" if rc else "other"},
        ),
    )


def build():
    c = Corpus()
    pay = b"snic-payload-16b"  # 16 bytes: RoCE payloads stay 4-byte aligned (pad count 0)

    # --- plain L2/L3/L4 -------------------------------------------------------------------
    c.add(
        "ipv4_udp",
        Ether(src=MAC_A, dst=MAC_B) / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1000, dport=2000) / Raw(pay),
        dict(layers=["eth", "ipv4", "udp"], **five("ipv4", "10.0.0.1", "10.0.0.2", 17, 1000, 2000)),
    )
    c.add(
        "vlan_ipv4_tcp",
        Ether(src=MAC_A, dst=MAC_B)
        / Dot1Q(vlan=100, prio=3)
        / IP(src="10.1.0.1", dst="10.1.0.2")
        / TCP(sport=40000, dport=80, flags="S", seq=1000),
        dict(layers=["eth", "vlan", "ipv4", "tcp"], vlan_id=100, **five("ipv4", "10.1.0.1", "10.1.0.2", 6, 40000, 80)),
    )
    c.add(
        "qinq_ipv4_udp",
        Ether(src=MAC_A, dst=MAC_B, type=0x88A8)
        / Dot1AD(vlan=200)
        / Dot1Q(vlan=300)
        / IP(src="10.2.0.1", dst="10.2.0.2")
        / UDP(sport=15353, dport=15354)
        / Raw(pay),
        dict(
            layers=["eth", "vlan", "vlan", "ipv4", "udp"],
            vlan_id=200,
            **five("ipv4", "10.2.0.1", "10.2.0.2", 17, 15353, 15354),
        ),
    )
    c.add(
        "ipv4_options_udp",
        Ether(src=MAC_A, dst=MAC_B)
        / IP(src="10.3.0.1", dst="10.3.0.2", options=[IPOption_Router_Alert()])
        / UDP(sport=7, dport=9)
        / Raw(pay),
        dict(layers=["eth", "ipv4", "udp"], **five("ipv4", "10.3.0.1", "10.3.0.2", 17, 7, 9)),
    )
    c.add(
        "ipv4_tcp_options",
        Ether(src=MAC_A, dst=MAC_B)
        / IP(src="10.4.0.1", dst="10.4.0.2")
        / TCP(
            sport=33000,
            dport=443,
            flags="S",
            options=[("MSS", 1460), ("SAckOK", b""), ("Timestamp", (12345, 0)), ("NOP", None), ("WScale", 7)],
        ),
        dict(layers=["eth", "ipv4", "tcp"], **five("ipv4", "10.4.0.1", "10.4.0.2", 6, 33000, 443)),
    )
    c.add(
        "ipv4_icmp_echo",
        Ether(src=MAC_A, dst=MAC_B) / IP(src="10.5.0.1", dst="10.5.0.2") / ICMP(type=8, id=1, seq=1) / Raw(pay),
        dict(layers=["eth", "ipv4", "icmp"], **five("ipv4", "10.5.0.1", "10.5.0.2", 1)),
    )
    c.add(
        "arp_request",
        Ether(src=MAC_A, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=MAC_A, psrc="10.6.0.1", pdst="10.6.0.2"),
        dict(layers=["eth", "arp"]),
    )
    c.add(
        "ipv6_udp",
        Ether(src=MAC_A, dst=MAC_B) / IPv6(src="2001:db8::1", dst="2001:db8::2") / UDP(sport=11110, dport=22220) / Raw(pay),
        dict(layers=["eth", "ipv6", "udp"], **five("ipv6", "2001:db8::1", "2001:db8::2", 17, 11110, 22220)),
    )
    c.add(
        "ipv6_exthdrs_udp",
        Ether(src=MAC_A, dst=MAC_B)
        / IPv6(src="2001:db8::11", dst="2001:db8::12")
        / IPv6ExtHdrHopByHop()
        / IPv6ExtHdrRouting(type=0, addresses=["2001:db8::99"], segleft=0)
        / IPv6ExtHdrFragment(offset=0, m=0, id=0x1234)
        / IPv6ExtHdrDestOpt()
        / UDP(sport=3333, dport=4444)
        / Raw(pay),
        dict(layers=["eth", "ipv6", "udp"], **five("ipv6", "2001:db8::11", "2001:db8::12", 17, 3333, 4444)),
    )
    # Real fragments (not atomic ones) stop the walk after the IP header: L4 is not read.
    c.add(
        "ipv6_first_fragment",
        Ether(src=MAC_A, dst=MAC_B)
        / IPv6(src="2001:db8::41", dst="2001:db8::42")
        / IPv6ExtHdrFragment(offset=0, m=1, id=0x77, nh=17)
        # The UDP header and payload, checksummed as if unfragmented, as the fragment's content.
        / Raw(bytes(IPv6(src="2001:db8::41", dst="2001:db8::42") / UDP(sport=5555, dport=6666) / Raw(pay))[40:]),
        dict(layers=["eth", "ipv6"], **five("ipv6", "2001:db8::41", "2001:db8::42", 17)),
    )
    c.add(
        "ipv4_later_fragment",
        Ether(src=MAC_A, dst=MAC_B) / IP(src="10.7.0.1", dst="10.7.0.2", proto=17, frag=100) / Raw(pay),
        dict(layers=["eth", "ipv4"], **five("ipv4", "10.7.0.1", "10.7.0.2", 17)),
    )
    c.add(
        "ipv6_tcp",
        Ether(src=MAC_A, dst=MAC_B)
        / IPv6(src="2001:db8::21", dst="2001:db8::22")
        / TCP(sport=50000, dport=22, flags="PA", options=[("NOP", None), ("NOP", None), ("Timestamp", (1, 2))])
        / Raw(pay),
        dict(layers=["eth", "ipv6", "tcp"], **five("ipv6", "2001:db8::21", "2001:db8::22", 6, 50000, 22)),
    )
    c.add(
        "ipv6_icmpv6_echo",
        Ether(src=MAC_A, dst=MAC_B) / IPv6(src="2001:db8::31", dst="2001:db8::32") / ICMPv6EchoRequest(id=7, seq=1),
        dict(layers=["eth", "ipv6", "icmpv6"], **five("ipv6", "2001:db8::31", "2001:db8::32", 58)),
    )

    # --- tunnels --------------------------------------------------------------------------
    inner_tcp = (
        Ether(src=MAC_C, dst=MAC_D) / IP(src="172.16.0.1", dst="172.16.0.2") / TCP(sport=1234, dport=8080, flags="S")
    )
    c.add(
        "vxlan_ipv4_tcp",
        Ether(src=MAC_A, dst=MAC_B)
        / IP(src="10.10.0.1", dst="10.10.0.2")
        / UDP(sport=49152, dport=4789)
        / VXLAN(flags=0x08, vni=0x123456)
        / inner_tcp,
        dict(
            layers=["eth", "ipv4", "udp", "vxlan", "eth", "ipv4", "tcp"],
            vni=0x123456,
            **five("ipv4", "172.16.0.1", "172.16.0.2", 6, 1234, 8080),
        ),
    )
    c.add(
        "geneve_options_ipv4_udp",
        Ether(src=MAC_A, dst=MAC_B)
        / IP(src="10.11.0.1", dst="10.11.0.2")
        / UDP(sport=49153, dport=6081)
        / GENEVE(
            vni=0xABCDE,
            proto=0x6558,
            options=[
                GeneveOptions(classid=0x0102, type=0x80, data=b"\x01\x02\x03\x04"),
                GeneveOptions(classid=0xFFFF, type=0x01, data=b"\xaa\xbb\xcc\xdd\xee\xff\x00\x11"),
            ],
        )
        / Ether(src=MAC_C, dst=MAC_D)
        / IP(src="172.17.0.1", dst="172.17.0.2")
        / UDP(sport=15300, dport=15301)
        / Raw(pay),
        dict(
            layers=["eth", "ipv4", "udp", "geneve", "eth", "ipv4", "udp"],
            vni=0xABCDE,
            **five("ipv4", "172.17.0.1", "172.17.0.2", 17, 15300, 15301),
        ),
    )
    c.add(
        "nvgre_ipv4_icmp",
        Ether(src=MAC_A, dst=MAC_B)
        / IP(src="10.12.0.1", dst="10.12.0.2")
        / GRE(key_present=1, proto=0x6558, key=(0x654321 << 8) | 0x2A)
        / Ether(src=MAC_C, dst=MAC_D)
        / IP(src="172.18.0.1", dst="172.18.0.2")
        / ICMP(type=8)
        / Raw(pay),
        dict(
            layers=["eth", "ipv4", "nvgre", "eth", "ipv4", "icmp"],
            vni=0x654321,
            **five("ipv4", "172.18.0.1", "172.18.0.2", 1),
        ),
    )
    c.add(
        "vxlan_over_ipv6_inner_ipv6_udp",
        Ether(src=MAC_A, dst=MAC_B)
        / IPv6(src="2001:db8:1::1", dst="2001:db8:1::2")
        / UDP(sport=49154, dport=4789)
        / VXLAN(flags=0x08, vni=42)
        / Ether(src=MAC_C, dst=MAC_D)
        / IPv6(src="fd00::1", dst="fd00::2")
        / UDP(sport=9000, dport=9001)
        / Raw(pay),
        dict(
            layers=["eth", "ipv6", "udp", "vxlan", "eth", "ipv6", "udp"],
            vni=42,
            **five("ipv6", "fd00::1", "fd00::2", 17, 9000, 9001),
        ),
    )

    # --- RoCEv2 over IPv4 (RC) ------------------------------------------------------------
    roce_v4("roce_send_only", c, 0x04, b"", pay, [], {}, 0x000011, 100, ack_req=True)
    roce_v4(
        "roce_send_only_imm", c, 0x05, immdt(0xDEADBEEF), pay, ["immdt"], {"immdt": 0xDEADBEEF}, 0x12, 101, se=True
    )
    roce_v4(
        "roce_send_only_inv", c, 0x17, ieth(0xCAFE0001), pay, ["ieth"], {"ieth": 0xCAFE0001}, 0x13, 102
    )
    roce_v4(
        "roce_write_only",
        c,
        0x0A,
        reth(0x00007F0012345000, 0x1000ABCD, 16),
        pay,
        ["reth"],
        {"reth": {"va": 0x00007F0012345000, "rkey": 0x1000ABCD, "dma_len": 16}},
        0x14,
        103,
        ack_req=True,
    )
    roce_v4(
        "roce_write_only_imm",
        c,
        0x0B,
        reth(0x1000, 0x2000, 16) + immdt(0x01020304),
        pay,
        ["reth", "immdt"],
        {"reth": {"va": 0x1000, "rkey": 0x2000, "dma_len": 16}, "immdt": 0x01020304},
        0x15,
        104,
    )
    roce_v4(
        "roce_read_request",
        c,
        0x0C,
        reth(0xFFFF800000001000, 0x00C0FFEE, 4096),
        b"",
        ["reth"],
        {"reth": {"va": 0xFFFF800000001000, "rkey": 0x00C0FFEE, "dma_len": 4096}},
        0x16,
        0xFFFFFF,
    )
    roce_v4(
        "roce_read_response_only",
        c,
        0x10,
        aeth_bytes(0x00, 7),
        pay,
        ["aeth"],
        {"aeth": {"syndrome": 0, "msn": 7}},
        0x17,
        0xFFFFFF,
    )
    roce_v4(
        "roce_read_response_middle", c, 0x0E, b"", pay, [], {}, 0x17, 0
    )
    roce_v4(
        "roce_ack",
        c,
        0x11,
        aeth_bytes(0x1F, 0x00ABCD),
        b"",
        ["aeth"],
        {"aeth": {"syndrome": 0x1F, "msn": 0x00ABCD}},
        0x18,
        200,
    )
    roce_v4(
        "roce_nak_psn_seq_err",
        c,
        0x11,
        aeth_bytes(0x60, 5),
        b"",
        ["aeth"],
        {"aeth": {"syndrome": 0x60, "msn": 5}},
        0x18,
        201,
    )
    roce_v4(
        "roce_cmp_swap",
        c,
        0x13,
        atomiceth(0x2000000000000008, 0x11112222, 0x0123456789ABCDEF, 0xFEDCBA9876543210),
        b"",
        ["atomiceth"],
        {
            "atomiceth": {
                "va": 0x2000000000000008,
                "rkey": 0x11112222,
                "swap_add": 0x0123456789ABCDEF,
                "compare": 0xFEDCBA9876543210,
            }
        },
        0x19,
        300,
        ack_req=True,
    )
    roce_v4(
        "roce_fetch_add",
        c,
        0x14,
        atomiceth(0x3000, 0x33334444, 5, 0),
        b"",
        ["atomiceth"],
        {"atomiceth": {"va": 0x3000, "rkey": 0x33334444, "swap_add": 5, "compare": 0}},
        0x19,
        301,
        ack_req=True,
    )
    roce_v4(
        "roce_atomic_ack",
        c,
        0x12,
        aeth_bytes(0, 9) + atomicacketh(0x0BADF00D0BADF00D),
        b"",
        ["aeth", "atomicacketh"],
        {"aeth": {"syndrome": 0, "msn": 9}, "atomicacketh": 0x0BADF00D0BADF00D},
        0x1A,
        300,
    )
    # UD SEND: a valid BTH but not an RC opcode, so RecoNIC's rule says "other".
    roce_v4(
        "roce_ud_send_only",
        c,
        0x64,
        deth(0x11223344, 0x000ABC),
        pay,
        ["deth"],
        {"deth": {"qkey": 0x11223344, "src_qp": 0x000ABC}},
        0x1B,
        400,
    )

    # --- RoCEv2 over IPv6 -----------------------------------------------------------------
    p6 = (
        Ether(src=MAC_A, dst=MAC_B)
        / IPv6(src="fe80::1", dst="fe80::2", tc=0x02, fl=0x12345)
        / UDP(sport=0xC100, dport=ROCE_PORT)
        / BTH(opcode=0x0A, dqpn=0x0000AA, psn=0x123456, ackreq=1)
        / Raw(reth(0xABCDEF00, 0x77, 16) + pay)
    )
    c.add(
        "roce_v6_write_only",
        p6,
        dict(
            layers=["eth", "ipv6", "udp", "bth", "reth"],
            **five("ipv6", "fe80::1", "fe80::2", 17, 0xC100, ROCE_PORT),
            roce=roce_exp(0x0A, 0xAA, 0x123456, True, False, ext={"reth": {"va": 0xABCDEF00, "rkey": 0x77, "dma_len": 16}}),
            icrc_ok=True,
            **{"class": "rdma"},
        ),
    )
    p6a = (
        Ether(src=MAC_A, dst=MAC_B)
        / IPv6(src="fe80::2", dst="fe80::1")
        / UDP(sport=0xC101, dport=ROCE_PORT)
        / BTH(opcode=0x11, dqpn=0x0000BB, psn=0x123456)
        / AETH(syndrome=0, msn=1)
    )
    c.add(
        "roce_v6_ack",
        p6a,
        dict(
            layers=["eth", "ipv6", "udp", "bth", "aeth"],
            **five("ipv6", "fe80::2", "fe80::1", 17, 0xC101, ROCE_PORT),
            roce=roce_exp(0x11, 0xBB, 0x123456, ext={"aeth": {"syndrome": 0, "msn": 1}}),
            icrc_ok=True,
            **{"class": "rdma"},
        ),
    )

    # --- RoCEv2 edge cases ----------------------------------------------------------------
    # Payload not a multiple of 4: pad count 3, three pad bytes before the ICRC.
    roce_v4_pad = (
        Ether(src=MAC_A, dst=MAC_B)
        / IP(src="192.168.1.1", dst="192.168.1.2")
        / UDP(sport=0xC200, dport=ROCE_PORT)
        / BTH(opcode=0x04, dqpn=0x21, psn=500, padcount=3)
        / Raw(b"thirteen-byte" + b"\x00" * 3)
    )
    c.add(
        "roce_send_padded",
        roce_v4_pad,
        dict(
            layers=["eth", "ipv4", "udp", "bth"],
            **five("ipv4", "192.168.1.1", "192.168.1.2", 17, 0xC200, ROCE_PORT),
            roce=roce_exp(0x04, 0x21, 500),
            icrc_ok=True,
            **{"class": "rdma"},
        ),
    )
    # An ACK followed by 6 trailer bytes after the IP datagram (Ethernet padding/trailer): the
    # ICRC is found by the UDP length, not at the end of the frame.
    ack = bytes(
        Ether(src=MAC_A, dst=MAC_B)
        / IP(src="192.168.1.2", dst="192.168.1.1")
        / UDP(sport=0xC201, dport=ROCE_PORT)
        / BTH(opcode=0x11, dqpn=0x22, psn=501)
        / AETH(syndrome=0, msn=3)
    )
    c.add(
        "roce_ack_with_trailer",
        None,
        dict(
            layers=["eth", "ipv4", "udp", "bth", "aeth"],
            **five("ipv4", "192.168.1.2", "192.168.1.1", 17, 0xC201, ROCE_PORT),
            roce=roce_exp(0x11, 0x22, 501, ext={"aeth": {"syndrome": 0, "msn": 3}}),
            icrc_ok=True,
            **{"class": "rdma"},
        ),
        raw=ack + b"\x00" * 6,
    )
    # A short frame padded to the Ethernet minimum: the padding is not UDP payload.
    short = bytes(
        Ether(src=MAC_A, dst=MAC_B) / IP(src="10.30.0.1", dst="10.30.0.2") / UDP(sport=1, dport=2) / Raw(b"hi")
    )
    c.add(
        "ipv4_udp_eth_padding",
        None,
        dict(layers=["eth", "ipv4", "udp"], **five("ipv4", "10.30.0.1", "10.30.0.2", 17, 1, 2)),
        raw=short + b"\x00" * (60 - len(short)),
    )
    # A CNP (congestion notification): BECN set, 16 reserved bytes; not an RC opcode, but RDMA
    # traffic all the same: the engine's rate control consumes it.
    c.add(
        "roce_cnp",
        Ether(src=MAC_A, dst=MAC_B)
        / IP(src="192.168.1.2", dst="192.168.1.1", tos=0x03)
        / UDP(sport=0xC202, dport=ROCE_PORT)
        / cnp(0x23),
        dict(
            layers=["eth", "ipv4", "udp", "bth", "cnp"],
            **five("ipv4", "192.168.1.2", "192.168.1.1", 17, 0xC202, ROCE_PORT),
            roce=roce_exp(0x81, 0x23, 0, becn=True),
            icrc_ok=True,
            **{"class": "rdma"},
        ),
    )
    # RoCEv2 inside a VXLAN tunnel: the BTH, its RETH and the ICRC are the inner datagram's.
    c.add(
        "vxlan_inner_roce_write",
        Ether(src=MAC_A, dst=MAC_B)
        / IP(src="10.40.0.1", dst="10.40.0.2")
        / UDP(sport=49160, dport=4789)
        / VXLAN(flags=0x08, vni=777)
        / Ether(src=MAC_C, dst=MAC_D)
        / IP(src="172.20.0.1", dst="172.20.0.2")
        / UDP(sport=0xC203, dport=ROCE_PORT)
        / BTH(opcode=0x0A, dqpn=0x24, psn=9, ackreq=1)
        / Raw(reth(0x5000, 0x66, 16) + pay),
        dict(
            layers=["eth", "ipv4", "udp", "vxlan", "eth", "ipv4", "udp", "bth", "reth"],
            vni=777,
            **five("ipv4", "172.20.0.1", "172.20.0.2", 17, 0xC203, ROCE_PORT),
            roce=roce_exp(0x0A, 0x24, 9, ack_req=True, ext={"reth": {"va": 0x5000, "rkey": 0x66, "dma_len": 16}}),
            icrc_ok=True,
            **{"class": "rdma"},
        ),
    )

    # --- deliberately broken --------------------------------------------------------------
    good = bytes(
        Ether(src=MAC_A, dst=MAC_B)
        / IP(src="192.168.9.1", dst="192.168.9.2")
        / UDP(sport=0xC0FF, dport=ROCE_PORT, chksum=0)  # no UDP checksum: only the ICRC is wrong
        / BTH(opcode=0x04, dqpn=0x99, psn=77)
        / Raw(pay)
    )
    bad = good[:-4] + bytes(b ^ 0xFF for b in good[-4:])
    c.add(
        "bad_icrc",
        None,
        dict(
            layers=["eth", "ipv4", "udp", "bth"],
            **five("ipv4", "192.168.9.1", "192.168.9.2", 17, 0xC0FF, ROCE_PORT),
            roce=roce_exp(0x04, 0x99, 77),
            icrc_ok=False,
            # The class comes from the headers (RC opcode to the RoCE port), not the ICRC
            # verdict: a bad-ICRC frame is still RDMA traffic; classify drops it afterwards.
            **{"class": "rdma"},
        ),
        raw=bad,
    )
    full = bytes(Ether(src=MAC_A, dst=MAC_B) / IP(src="10.20.0.1", dst="10.20.0.2") / UDP() / Raw(pay))
    c.add(
        "truncated_ipv4",
        None,
        dict(layers=["eth"], error_layer="ipv4", error="truncated", error_prefix="ipv4: truncated: need "),
        raw=full[:21],
    )
    c.add(
        "truncated_tcp",
        None,
        dict(layers=["eth", "ipv4"], error_layer="tcp", error="truncated", **five("ipv4", "10.21.0.1", "10.21.0.2", 6)),
        raw=bytes(Ether(src=MAC_A, dst=MAC_B) / IP(src="10.21.0.1", dst="10.21.0.2", proto=6) / Raw(b"\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a")),
    )
    c.add(
        "truncated_bth",
        None,
        dict(
            layers=["eth", "ipv4", "udp"],
            error_layer="bth",
            error="truncated",
            **five("ipv4", "10.22.0.1", "10.22.0.2", 17, 5000, ROCE_PORT),
        ),
        raw=bytes(Ether(src=MAC_A, dst=MAC_B) / IP(src="10.22.0.1", dst="10.22.0.2") / UDP(sport=5000, dport=ROCE_PORT) / Raw(b"\x04\x00\xff\xff\x00\x00")),
    )
    c.add(
        "truncated_reth",
        None,
        dict(
            layers=["eth", "ipv4", "udp", "bth"],
            error_layer="reth",
            error="truncated",
            roce=roce_exp(0x0A, 1, 1),
            # The last 4 bytes (zeros) stand where the ICRC would be: it does not verify.
            icrc_ok=False,
            # The RoCE headers do not parse, so the packet is not handed to the RDMA engine.
            **{"class": "other"},
            **five("ipv4", "10.23.0.1", "10.23.0.2", 17, 5001, ROCE_PORT),
        ),
        # A WRITE_ONLY BTH followed by 8 bytes: a RETH needs 16, even before the ICRC is set aside.
        raw=bytes(
            Ether(src=MAC_A, dst=MAC_B)
            / IP(src="10.23.0.1", dst="10.23.0.2")
            / UDP(sport=5001, dport=ROCE_PORT)
            / Raw(bytes([0x0A, 0, 0xFF, 0xFF, 0, 0, 0, 1, 0, 0, 0, 1]) + b"\x00" * 8)
        ),
    )
    bad_ihl = bytearray(full)
    bad_ihl[14] = 0x43  # version 4, IHL 3 (12 bytes): below the 20-byte minimum
    c.add(
        "bad_ihl",
        None,
        dict(layers=["eth"], error_layer="ipv4", error="bad_header_len"),
        raw=bytes(bad_ihl),
    )
    c.add(
        "bad_vxlan_flags",
        None,
        dict(
            layers=["eth", "ipv4", "udp"],
            error_layer="vxlan",
            error="bad_flags",
            **five("ipv4", "10.24.0.1", "10.24.0.2", 17, 49155, 4789),
        ),
        raw=bytes(
            Ether(src=MAC_A, dst=MAC_B)
            / IP(src="10.24.0.1", dst="10.24.0.2")
            / UDP(sport=49155, dport=4789)
            / VXLAN(flags=0x00, vni=7)
            / inner_tcp
        ),
    )
    return c


def main(argv):
    if len(argv) < 2:
        print("usage: scapy_corpus.py OUT.pcap [OUT.json]", file=sys.stderr)
        return 2
    pcap_path = argv[1]
    json_path = argv[2] if len(argv) > 2 else os.path.splitext(pcap_path)[0] + ".json"
    c = build()
    c.write(pcap_path, json_path)
    print(f"wrote {len(c.expect)} packets to {pcap_path} and expectations to {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
