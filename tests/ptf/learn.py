# PTF tests of P4Runtime digests on snic (tests/ptf/p4/learn.p4): MAC learning. A frame from
# an unknown source MAC makes the program send a learn_t digest; the controller gets it as a
# DigestList on the StreamChannel, acknowledges it and programs the tables; then traffic to
# that MAC is forwarded to the port it was learnt on.
#
# Ports: PTF port N is snic's P4 port N (the veth pair of snic's Nth --port).

import os
import time

from p4.v1 import p4runtime_pb2
from ptf import testutils as tu

from p4rt_base import P4RuntimeTest, decode

INSERT = p4runtime_pb2.Update.INSERT
HOST_A = "02:00:00:00:0a:0a"
HOST_B = "02:00:00:00:0b:0b"


def frame(src, dst):
    return tu.simple_eth_packet(pktlen=64, eth_src=src, eth_dst=dst, eth_type=0x88B5)


def mac_int(mac):
    return int(mac.replace(":", ""), 16)


class LearnTest(P4RuntimeTest):
    PROGRAM = "learn"
    PROGRAM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "p4")

    def setUp(self):
        P4RuntimeTest.setUp(self)
        (d,) = self.p4info.msg.digests
        self.digest_id = d.preamble.id

    def configure_digest(self, max_list_size=1, max_timeout_ns=0, ack_timeout_ns=2_000_000_000):
        e = p4runtime_pb2.DigestEntry(digest_id=self.digest_id)
        e.config.max_list_size = max_list_size
        e.config.max_timeout_ns = max_timeout_ns
        e.config.ack_timeout_ns = ack_timeout_ns
        self.write([(INSERT, e)])

    def next_digest(self, timeout=5.0):
        """The next DigestList: (list id, [(mac, port)])."""
        msg = self.client.next_message("digest", timeout).digest
        self.assertEqual(msg.digest_id, self.digest_id, msg)
        out = []
        for d in msg.data:
            members = d.struct.members
            self.assertEqual(len(members), 2, d)
            out.append((decode(members[0].bitstring), decode(members[1].bitstring)))
        return msg.list_id, out

    def ack(self, list_id):
        req = p4runtime_pb2.StreamMessageRequest()
        req.digest_ack.digest_id = self.digest_id
        req.digest_ack.list_id = list_id
        self.client.send(req)


class Learn(LearnTest):
    """An unknown source is reported once (not again while unacknowledged); once the
    controller has programmed it, traffic to it goes to its port and no digest comes."""

    def runTest(self):
        self.configure_digest()
        tu.send_packet(self, 1, frame(HOST_A, HOST_B))
        list_id, data = self.next_digest()
        self.assertEqual(data, [(mac_int(HOST_A), 1)])
        tu.verify_no_other_packets(self)  # dmac missed: dropped
        # The same source again before the ack: no second digest with the same data.
        tu.send_packet(self, 1, frame(HOST_A, HOST_B))
        time.sleep(0.3)
        self.assertTrue(self.client.responses.empty(), "a digest came again before the ack")
        self.ack(list_id)
        self.insert("MyIngress.smac", {"hdr.ethernet.srcAddr": HOST_A}, "NoAction")
        self.insert("MyIngress.dmac", {"hdr.ethernet.dstAddr": HOST_A}, "MyIngress.fwd",
                    {"port": 1})
        self.insert("MyIngress.smac", {"hdr.ethernet.srcAddr": HOST_B}, "NoAction")
        p = frame(HOST_B, HOST_A)
        tu.send_packet(self, 2, p)
        tu.verify_packet(self, p, 1)
        tu.verify_no_other_packets(self)
        time.sleep(0.3)
        self.assertTrue(self.client.responses.empty(), "a digest for a known source")


class NotConfigured(LearnTest):
    """Without a DigestEntry for it, the program's digests do not reach the controller."""

    def runTest(self):
        tu.send_packet(self, 2, frame(HOST_B, HOST_A))
        tu.verify_no_other_packets(self)
        time.sleep(0.3)
        self.assertTrue(self.client.responses.empty(), "a digest nobody asked for")


class Batched(LearnTest):
    """With max_list_size 3, three new sources come in one DigestList."""

    def runTest(self):
        self.configure_digest(max_list_size=3, max_timeout_ns=5_000_000_000)
        macs = ["02:00:00:00:01:01", "02:00:00:00:01:02", "02:00:00:00:01:03"]
        for i, m in enumerate(macs):
            tu.send_packet(self, i, frame(m, HOST_B))
        list_id, data = self.next_digest()
        self.assertEqual(sorted(data), sorted((mac_int(m), i) for i, m in enumerate(macs)))
        self.ack(list_id)
        tu.verify_no_other_packets(self)
