# PTF tests of P4Runtime's ternary, range and optional matches and priorities on snic
# (tests/ptf/p4/acl.p4): of the entries that match a packet, the one with the highest
# priority wins (P4Runtime 9.1: a larger number is a higher priority, unlike BMv2's CLI).
#
# Ports: PTF port N is snic's P4 port N (the veth pair of snic's Nth --port).

import os

from p4.v1 import p4runtime_pb2
from ptf import testutils as tu

from p4rt_base import P4RuntimeTest

TABLE = "MyIngress.acl"
SRC = "hdr.ipv4.srcAddr"
DST = "hdr.ipv4.dstAddr"
DPORT = "hdr.udp.dstPort"
PROTO = "hdr.ipv4.protocol"
FWD = "MyIngress.fwd"
INSERT = p4runtime_pb2.Update.INSERT


def udp(src="192.0.2.1", dst="198.51.100.1", dport=80):
    return tu.simple_udp_packet(ip_src=src, ip_dst=dst, udp_dport=dport)


def tcp(src="192.0.2.1", dst="198.51.100.1"):
    return tu.simple_tcp_packet(ip_src=src, ip_dst=dst)


class AclTest(P4RuntimeTest):
    PROGRAM = "acl"
    PROGRAM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "p4")

    def fwd(self, match, port, priority):
        return self.insert(TABLE, match, FWD, {"port": port}, priority=priority)

    def expect(self, packet, port):
        """`packet` leaves unchanged on `port` (None: dropped), and nowhere else."""
        tu.send_packet(self, 0, packet)
        if port is not None:
            tu.verify_packet(self, packet, port)
        tu.verify_no_other_packets(self)


class TernaryPriority(AclTest):
    """Two overlapping ternary entries: the higher priority wins, whichever was written
    first; after the more specific one gets the lower priority, the other wins."""

    def runTest(self):
        wide = {SRC: ("10.0.0.0", "255.0.0.0")}
        narrow = {SRC: ("10.1.0.0", "255.255.0.0")}
        self.fwd(wide, 1, priority=10)
        self.fwd(narrow, 2, priority=20)
        self.expect(udp(src="10.1.2.3"), 2)
        self.expect(udp(src="10.2.0.1"), 1)
        self.expect(udp(src="11.0.0.1"), None)
        self.delete(TABLE, narrow, priority=20)
        self.fwd(narrow, 2, priority=5)
        self.expect(udp(src="10.1.2.3"), 1)
        # The same match with another priority is another entry.
        self.fwd(narrow, 2, priority=50)
        self.assertEqual(len(self.read_entries(TABLE)), 3)
        self.expect(udp(src="10.1.2.3"), 2)


class RangeMatch(AclTest):
    """A range key matches its bounds and what is between, nothing outside."""

    def runTest(self):
        self.fwd({DPORT: (1000, 2000)}, 1, priority=1)
        for dport, port in ((999, None), (1000, 1), (1500, 1), (2000, 1), (2001, None)):
            with self.subTest(dport=dport):
                self.expect(udp(dport=dport), port)


class OptionalMatch(AclTest):
    """An optional key given matches that value only; left out, it matches anything (here a
    TCP packet, which only an entry without the UDP port can match)."""

    def runTest(self):
        host = {DST: ("10.9.9.9", "255.255.255.255")}
        self.fwd(dict(host, **{PROTO: 17}), 1, priority=10)
        self.fwd(host, 2, priority=5)
        self.expect(udp(dst="10.9.9.9"), 1)
        self.expect(tcp(dst="10.9.9.9"), 2)
        self.expect(tcp(dst="10.9.9.8"), None)


class MatchErrors(AclTest):
    """Refused with INVALID_ARGUMENT (P4Runtime 9.1): no priority in a table that needs one,
    ternary value bits outside the mask, a zero mask (leave the field out instead), a range
    whose low is above its high."""

    def runTest(self):
        def entry(match, priority=10):
            return self.table_entry(TABLE, match, FWD, {"port": 1}, priority=priority)

        cases = {
            "no priority": entry({SRC: ("10.0.0.0", "255.0.0.0")}, priority=None),
            "bits outside the mask": entry({SRC: ("10.1.0.0", "255.0.0.0")}),
            "zero mask": entry({SRC: ("0.0.0.0", "0.0.0.0")}),
            "low above high": entry({DPORT: (2000, 1000)}),
        }
        for name, e in cases.items():
            with self.subTest(name):
                self.assert_write_fails("INVALID_ARGUMENT", [(INSERT, e)])
        self.assertEqual(len(self.read_entries(TABLE)), 0)
        self.expect(udp(src="10.1.0.1"), None)


class Counters(AclTest):
    """An indexed counter (by ingress port) and the table's direct counter, read over
    P4Runtime after PTF sent the packets: packets and bytes as sent (the frame without FCS),
    the direct counter only for the entry that matched."""

    def runTest(self):
        e = self.fwd({SRC: ("10.0.0.0", "255.0.0.0")}, 1, priority=10)
        other = self.fwd({SRC: ("11.0.0.0", "255.0.0.0")}, 2, priority=10)
        # Six flows: with several snic workers, spread over them (the counts are summed).
        sent = [udp(src=f"10.1.1.{i}") for i in range(1, 7)]
        for p in sent:
            self.expect(p, 1)
        tu.send_packet(self, 2, udp(src="12.0.0.1"))  # a miss, from port 2
        tu.verify_no_other_packets(self)
        ctr = self.p4info._find(self.p4info.msg.counters, "MyIngress.in_ctr", "counter")
        got = {}
        for port in (0, 1, 2):
            req = p4runtime_pb2.ReadRequest(device_id=self.device_id)
            c = req.entities.add().counter_entry
            c.counter_id = ctr.preamble.id
            c.index.index = port
            (r,) = [x.counter_entry for resp in self.stub.Read(req, timeout=10) for x in resp.entities]
            got[port] = (r.data.packet_count, r.data.byte_count)
        total = (len(sent), sum(len(p) for p in sent))
        self.assertEqual(got, {0: total, 1: (0, 0), 2: (1, 100)})
        for entry, want in ((e, total), (other, (0, 0))):
            req = p4runtime_pb2.ReadRequest(device_id=self.device_id)
            te = req.entities.add().table_entry
            te.CopyFrom(entry)
            te.ClearField("action")
            te.counter_data.SetInParent()
            (r,) = [x.table_entry for resp in self.stub.Read(req, timeout=10) for x in resp.entities]
            self.assertEqual((r.counter_data.packet_count, r.counter_data.byte_count), want, r)


class Multicast(AclTest):
    """A multicast group written over P4Runtime (PacketReplicationEngineEntry): a packet
    flooded to it leaves on each of its ports, once."""

    def runTest(self):
        pre = p4runtime_pb2.Entity()
        g = pre.packet_replication_engine_entry.multicast_group_entry
        g.multicast_group_id = 5
        for port in (1, 2):
            g.replicas.add(port=bytes([port]), instance=0)
        self.write([(INSERT, pre)])
        self.insert(TABLE, {SRC: ("10.0.0.0", "255.0.0.0")}, "MyIngress.flood", {"grp": 5},
                    priority=10)
        p = udp(src="10.1.1.1")
        tu.send_packet(self, 0, p)
        tu.verify_packets(self, p, [1, 2])
        # A group without port 2 after a MODIFY.
        del g.replicas[1]
        self.write([(p4runtime_pb2.Update.MODIFY, pre)])
        tu.send_packet(self, 0, p)
        tu.verify_packets(self, p, [1])
