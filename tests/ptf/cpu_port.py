# PTF tests of P4Runtime packet-in and packet-out on snic (tests/ptf/p4/cpu_port.p4): a
# PacketOut on the StreamChannel leaves on the port its packet_out header names; a packet the
# program sends to the CPU port (255, snic's default --cpu-port) arrives as a PacketIn with
# its ingress port in the packet_in metadata.
#
# Ports: PTF port N is snic's P4 port N (the veth pair of snic's Nth --port).

import os
import time

from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2
from ptf import testutils as tu

from p4rt_base import P4RuntimeTest

TABLE = "MyIngress.punt"
ETHERTYPE = "hdr.ethernet.etherType"
PUNT_TYPE = 0x88B6  # IEEE local experimental EtherType 2


def frame(ethertype=PUNT_TYPE):
    """A 64-byte Ethernet frame of `ethertype`."""
    return tu.simple_eth_packet(
        pktlen=64, eth_dst="02:00:00:00:00:0b", eth_src="02:00:00:00:00:0a", eth_type=ethertype
    )


class CpuPortTest(P4RuntimeTest):
    PROGRAM = "cpu_port"
    PROGRAM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "p4")


class PacketOut(CpuPortTest):
    """A PacketOut to each port leaves on that port, without its packet_out header."""

    def runTest(self):
        for port in (0, 1, 2):
            with self.subTest(port=port):
                self.dataplane.flush()
                p = tu.simple_udp_packet(ip_id=port + 1, eth_src="02:00:00:00:00:ff")
                self.packet_out(bytes(p), egress_port=port)
                tu.verify_packet(self, p, port)
                tu.verify_no_other_packets(self)


class PacketIn(CpuPortTest):
    """A frame punted by the table arrives as a PacketIn (payload unchanged, ingress_port set)
    from each port, and on no data port."""

    def runTest(self):
        self.insert(TABLE, {ETHERTYPE: PUNT_TYPE}, "MyIngress.send_to_cpu")
        for port in (0, 1, 2):
            with self.subTest(port=port):
                p = frame()
                tu.send_packet(self, port, p)
                payload, meta = self.packet_in()
                self.assertEqual(payload, bytes(p))
                self.assertEqual(meta.get("ingress_port"), port, meta)
                tu.verify_no_other_packets(self)


class PuntTable(CpuPortTest):
    """fwd entries forward by EtherType; a miss drops (no PacketIn, no packet)."""

    def runTest(self):
        self.insert(TABLE, {ETHERTYPE: 0x0800}, "MyIngress.fwd", {"port": 2})
        p = tu.simple_udp_packet()
        tu.send_packet(self, 0, p)
        tu.verify_packet(self, p, 2)
        tu.verify_no_other_packets(self)
        tu.send_packet(self, 1, frame(0x86DD))
        tu.verify_no_other_packets(self)
        self.assertTrue(self.client.responses.empty(), "a stream message came for a miss")


class BackupPacketIO(CpuPortTest):
    """Only the primary does packet I/O: a backup's PacketOut is refused (a StreamError
    with PERMISSION_DENIED, nothing on the wire) and PacketIns go to the primary only."""

    def runTest(self):
        backup = self.connect(self.election - 1)
        arb = backup.arbitrate()
        self.assertEqual(arb.arbitration.status.code, code_pb2.ALREADY_EXISTS, arb)
        self.packet_out(bytes(tu.simple_udp_packet()), client=backup, egress_port=1)
        err = backup.next_message("error")
        self.assertEqual(err.error.canonical_code, code_pb2.PERMISSION_DENIED, err)
        tu.verify_no_other_packets(self)
        self.insert(TABLE, {ETHERTYPE: PUNT_TYPE}, "MyIngress.send_to_cpu")
        p = frame()
        tu.send_packet(self, 0, p)
        payload, meta = self.packet_in()
        self.assertEqual(payload, bytes(p))
        time.sleep(0.3)
        self.assertTrue(backup.responses.empty(), "the backup got a stream message")


class BadPacketOut(CpuPortTest):
    """A PacketOut naming metadata the program's packet_out header does not have is refused
    with a StreamError (INVALID_ARGUMENT) and sends nothing."""

    def runTest(self):
        req = p4runtime_pb2.StreamMessageRequest()
        req.packet.payload = bytes(tu.simple_udp_packet())
        req.packet.metadata.add(metadata_id=99, value=b"\x01")
        self.client.send(req)
        err = self.client.next_message("error")
        self.assertEqual(err.error.canonical_code, code_pb2.INVALID_ARGUMENT, err)
        tu.verify_no_other_packets(self)
