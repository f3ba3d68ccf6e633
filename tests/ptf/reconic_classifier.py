# PTF tests of examples/p4/reconic_classifier.p4 on snic through P4Runtime: the program has
# no tables (its ports are constants), so P4Runtime only pushes the pipeline; then RoCEv2 RC
# traffic must leave on port 1 (the RDMA engine) and everything else on port 2, unchanged.
#
# Ports: PTF port N is snic's P4 port N (the veth pair of snic's Nth --port).

import os
import struct

from ptf import testutils as tu
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Dot1AD, Dot1Q, Ether

from p4rt_base import P4RuntimeTest

IN_PORT = 0
RDMA_PORT = 1
OTHER_PORT = 2
ROCE = 4791


def bth(opcode, pad=0, tver=0, qp=0x2A, psn=7):
    """A 12-byte Base Transport Header (P_Key 0xffff, AckReq clear)."""
    flags = (pad & 3) << 4 | (tver & 0xF)
    return struct.pack("!BBHII", opcode, flags, 0xFFFF, qp & 0xFFFFFF, psn & 0xFFFFFF)


def reth(va=0x1122334455667788, rkey=0xAABBCCDD, length=0x1000):
    return struct.pack("!QII", va, rkey, length)


AETH_ACK = bytes([0x1F, 0, 1, 2])  # syndrome ACK, MSN 0x000102
ICRC = b"\xde\xad\xbe\xef"  # the program does not check the ICRC


def roce4(payload, flags="DF"):
    """Ether / IPv4 / UDP 4791 / payload (the RoCE headers and body) / ICRC."""
    return (
        Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
        / IP(src="10.0.0.1", dst="10.0.0.2", flags=flags)
        / UDP(sport=0xC000, dport=ROCE)
        / (payload + ICRC)
    )


def roce6(payload):
    return (
        Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
        / IPv6(src="2001:db8::1", dst="2001:db8::2")
        / UDP(sport=0xC000, dport=ROCE)
        / (payload + ICRC)
    )


class ClassifierTest(P4RuntimeTest):
    PROGRAM = "reconic_classifier"
    NEEDS_ENTRIES = False

    def expect(self, packet, port):
        """`packet` leaves unchanged on `port` and nowhere else."""
        self.dataplane.flush()  # a failed case before leaves nothing behind for this one
        tu.send_packet(self, IN_PORT, packet)
        tu.verify_packet(self, packet, port)
        tu.verify_no_other_packets(self)


class Rdma(ClassifierTest):
    """RC opcodes with their extension headers, the CNP and IPv6: all to the RDMA port."""

    def runTest(self):
        cases = {
            "SEND ONLY": roce4(bth(0x04) + bytes(range(16))),
            "SEND LAST with immediate": roce4(bth(0x03) + b"\x01\x02\x03\x04" + b"\x01" * 4),
            "WRITE ONLY": roce4(bth(0x0A) + reth() + b"\x02" * 30),
            "WRITE MIDDLE, pad 2": roce4(bth(0x07, pad=2) + b"\x04" * 8),
            "READ REQUEST": roce4(bth(0x0C) + reth()),
            "ACK": roce4(bth(0x11) + AETH_ACK),
            "ATOMIC ACK": roce4(bth(0x12) + AETH_ACK + b"\x01\x23\x45\x67\x89\xab\xcd\xef"),
            "CNP": roce4(bth(0x81) + bytes(16)),
            "SEND ONLY over IPv6": roce6(bth(0x04) + b"\x08" * 8),
        }
        for name, p in cases.items():
            with self.subTest(name):
                self.expect(p, RDMA_PORT)


class VlanTags(ClassifierTest):
    """RoCEv2 behind one VLAN tag and behind two (QinQ) to the RDMA port, tags kept; behind
    three tags (the parser's stack overflows) to the other port."""

    def runTest(self):
        inner = Ether(bytes(roce4(bth(0x04) + b"\x09" * 8)))[IP]
        eth = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
        cases = [
            ("one tag", eth / Dot1Q(vlan=100) / inner, RDMA_PORT),
            ("QinQ", eth / Dot1AD(vlan=10) / Dot1Q(vlan=20) / inner, RDMA_PORT),
            ("three tags", eth / Dot1AD(vlan=1) / Dot1Q(vlan=2) / Dot1Q(vlan=3) / inner,
             OTHER_PORT),
        ]
        for name, p, port in cases:
            with self.subTest(name):
                self.expect(p, port)


class Other(ClassifierTest):
    """Not RoCEv2 RC, so to the other port: UDP to 4792, UDP from 4791, TCP, ARP, UD and UC
    opcodes, a reserved opcode, BTH transport version 1, a READ REQUEST with a payload, a
    RETH cut short, an IPv4 fragment."""

    def runTest(self):
        eth = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
        ip = IP(src="10.0.0.1", dst="10.0.0.2")
        cases = {
            "UDP 4792": eth / ip / UDP(sport=1234, dport=4792) / bytes(24),
            "UDP from 4791": eth / ip / UDP(sport=ROCE, dport=1234) / bytes(20),
            "TCP": eth / ip / TCP(sport=1, dport=ROCE, flags="S"),
            "ARP": Ether(dst="ff:ff:ff:ff:ff:ff", src="02:00:00:00:00:01")
            / ARP(hwsrc="02:00:00:00:00:01", psrc="10.0.0.1", pdst="10.0.0.2"),
            "UD SEND ONLY": roce4(bth(0x64) + bytes(8) + b"\x0b" * 4),
            "UC SEND ONLY": roce4(bth(0x24) + b"\x0c" * 4),
            "reserved opcode 0x15": roce4(bth(0x15) + b"\x0d" * 4),
            "transport version 1": roce4(bth(0x04, tver=1) + b"\x0e" * 4),
            "READ REQUEST with payload": roce4(bth(0x0C) + reth() + b"\x0f" * 4),
            "IPv4 fragment": roce4(bth(0x04) + b"\x13" * 4, flags="MF"),
        }
        # Raw bytes: the frame ends 6 bytes into the RETH, whatever the IP and UDP lengths say.
        cases["RETH cut short"] = bytes(roce4(bth(0x0A) + reth()))[: 14 + 20 + 8 + 12 + 6]
        for name, p in cases.items():
            with self.subTest(name):
                self.expect(p, OTHER_PORT)


def stf_packets(path):
    """The (in port, frame, out port, expected frame) of every packet of an STF file whose
    expectation follows it (the classifier's STF has no table commands)."""
    out = []
    pending = None
    with open(path) as f:
        for line in f:
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if words[0] == "packet":
                pending = (int(words[1]), bytes.fromhex("".join(words[2:])))
            elif words[0] == "expect" and pending is not None:
                data = "".join(w for w in words[2:] if w != "$")
                out.append((*pending, int(words[1]), bytes.fromhex(data)))
                pending = None
    return out


def tagged(frame):
    """Whether an Ethernet frame starts with a VLAN tag (TPID 0x8100, 0x88a8 or 0x9100)."""
    return frame[12:14] in (b"\x81\x00", b"\x88\xa8", b"\x91\x00")


class StfTest(ClassifierTest):
    """(No runTest: not a test itself.)"""

    def run_stf(self, vlan):
        """The STF packets with (vlan True) or without VLAN tags."""
        stf = os.path.splitext(self.program_path)[0] + ".stf"
        cases = [c for c in stf_packets(stf) if tagged(c[1]) == vlan]
        self.assertGreater(len(cases), 2, f"too few packets read from {stf}")
        for n, (in_port, data, out_port, want) in enumerate(cases):
            with self.subTest(packet=n, out=out_port):
                self.dataplane.flush()
                tu.send_packet(self, in_port, data)
                tu.verify_packet(self, want, out_port)
                tu.verify_no_other_packets(self)


class StfPackets(StfTest):
    """Every untagged packet of examples/p4/reconic_classifier.stf (next to the program)
    leaves on the port the STF expects, byte for byte, and on no other."""

    def runTest(self):
        self.run_stf(vlan=False)


class StfVlanPackets(StfTest):
    """The same for the STF's VLAN-tagged packets."""

    def runTest(self):
        self.run_stf(vlan=True)
