# PTF tests of examples/p4/l3_router.p4 on snic through P4Runtime (the cases of
# examples/p4/l3_router.stf, with the entries written over P4Runtime instead of STF `add`).
#
# Ports: PTF port N is snic's P4 port N (the veth pair of snic's Nth --port).

import os

import grpc
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2
from ptf import testutils as tu
from scapy.layers.inet import IP, UDP, IPOption_EOL, IPOption_NOP
from scapy.layers.l2 import ARP, Ether

from p4rt_base import P4RuntimeTest, WriteError

TABLE = "MyIngress.ipv4_lpm"
DST = "hdr.ipv4.dstAddr"
SET_NHOP = "MyIngress.set_nhop"
DROP = "MyIngress.drop"

IN_PORT = 0
NHOP1 = {"port": 1, "smac": "00:00:00:00:aa:01", "dmac": "00:00:00:00:01:01"}
NHOP2 = {"port": 2, "smac": "00:00:00:00:aa:02", "dmac": "00:00:00:00:02:02"}


def pkt(dst, ttl=64, **kw):
    """The packet PTF sends: a UDP datagram to `dst` from the router's upstream."""
    return tu.simple_udp_packet(
        eth_dst="00:00:00:00:aa:00",
        eth_src="00:00:00:00:00:99",
        ip_src="192.0.2.1",
        ip_dst=dst,
        ip_ttl=ttl,
        udp_sport=1000,
        udp_dport=2000,
        **kw,
    )


def routed(dst, nhop, ttl=64, **kw):
    """What the router sends for pkt(dst, ttl): next hop MACs, TTL - 1, checksum redone."""
    return tu.simple_udp_packet(
        eth_dst=nhop["dmac"],
        eth_src=nhop["smac"],
        ip_src="192.0.2.1",
        ip_dst=dst,
        ip_ttl=ttl - 1,
        udp_sport=1000,
        udp_dport=2000,
        **kw,
    )


class RouterTest(P4RuntimeTest):
    PROGRAM = "l3_router"

    def add_routes(self):
        """The STF's three entries: 10/8 -> port 1, 10.1.2/24 -> port 2, 10.1.2.3/32 drop."""
        self.insert(TABLE, {DST: ("10.0.0.0", 8)}, SET_NHOP, NHOP1)
        self.insert(TABLE, {DST: ("10.1.2.0", 24)}, SET_NHOP, NHOP2)
        self.insert(TABLE, {DST: ("10.1.2.3", 32)}, DROP)

    def expect_routed(self, dst, nhop, ttl=64):
        tu.send_packet(self, IN_PORT, pkt(dst, ttl))
        tu.verify_packet(self, routed(dst, nhop, ttl), nhop["port"])
        tu.verify_no_other_packets(self)

    def expect_dropped(self, packet):
        tu.send_packet(self, IN_PORT, packet)
        tu.verify_no_other_packets(self)


class Forward(RouterTest):
    """An /8 route: port 1, MACs rewritten, TTL 64 -> 63, header checksum updated."""

    def runTest(self):
        self.add_routes()
        self.expect_routed("10.9.9.9", NHOP1)
        self.expect_routed("10.200.0.1", NHOP1, ttl=255)


class LongestPrefix(RouterTest):
    """10.1.2.77 matches /8 and /24: the /24 wins (port 2); /32 drop beats both."""

    def runTest(self):
        self.add_routes()
        self.expect_routed("10.1.2.77", NHOP2)
        self.expect_routed("10.1.3.1", NHOP1)
        self.expect_dropped(pkt("10.1.2.3"))


class Ttl(RouterTest):
    """TTL 2 is forwarded with TTL 1; TTL 1 and TTL 0 are dropped."""

    def runTest(self):
        self.add_routes()
        self.expect_routed("10.1.2.5", NHOP2, ttl=2)
        self.expect_dropped(pkt("10.9.9.9", ttl=1))
        self.expect_dropped(pkt("10.9.9.9", ttl=0))


class MissDrop(RouterTest):
    """A miss runs the default action drop: nothing comes out; so for an empty table."""

    def runTest(self):
        self.expect_dropped(pkt("10.9.9.9"))
        self.add_routes()
        self.expect_dropped(pkt("192.168.1.1"))


class BadPackets(RouterTest):
    """Dropped whatever the routes: a wrong IPv4 header checksum, IPv4 options (a parser
    error), ARP (not IPv4)."""

    def runTest(self):
        self.add_routes()
        bad = Ether(bytes(pkt("10.9.9.9")))
        bad[IP].chksum = (bad[IP].chksum + 0x2F00) & 0xFFFF
        self.expect_dropped(bad)
        opts = Ether(dst="00:00:00:00:aa:00", src="00:00:00:00:00:99") / IP(
            src="192.0.2.1", dst="10.9.9.9", ttl=64, options=[IPOption_NOP(), IPOption_NOP(), IPOption_NOP(), IPOption_EOL()]
        ) / UDP(sport=1000, dport=2000) / (b"\x00" * 20)
        self.assertEqual(Ether(bytes(opts))[IP].ihl, 6)
        self.expect_dropped(opts)
        arp = Ether(dst="ff:ff:ff:ff:ff:ff", src="00:00:00:00:00:99") / ARP(
            hwsrc="00:00:00:00:00:99", psrc="192.0.2.1", pdst="10.9.9.9"
        )
        self.expect_dropped(arp)
        # The routes still work after all that.
        self.expect_routed("10.9.9.9", NHOP1)


class DefaultAction(RouterTest):
    """After the default action becomes set_nhop(port 1), misses go to port 1; a Read of
    the default entry shows it."""

    def runTest(self):
        self.add_routes()
        self.expect_dropped(pkt("192.168.1.1"))
        self.set_default(TABLE, SET_NHOP, NHOP1)
        self.expect_routed("192.168.1.1", NHOP1, ttl=10)
        (entry,) = self.read_entries(TABLE, default=True)
        self.assertTrue(entry.is_default_action)
        want = self.p4info.action(SET_NHOP).preamble.id
        self.assertEqual(entry.action.action.action_id, want, entry)


class ModifyDelete(RouterTest):
    """MODIFY moves a route to another next hop; DELETE removes it (misses drop again)."""

    def runTest(self):
        self.insert(TABLE, {DST: ("10.0.0.0", 8)}, SET_NHOP, NHOP1)
        self.expect_routed("10.9.9.9", NHOP1)
        self.modify(TABLE, {DST: ("10.0.0.0", 8)}, SET_NHOP, NHOP2)
        self.expect_routed("10.9.9.9", NHOP2)
        self.delete(TABLE, {DST: ("10.0.0.0", 8)})
        self.expect_dropped(pkt("10.9.9.9"))


class PaddedValues(RouterTest):
    """Values padded to the full width (not canonical) are accepted too, and read back in
    the canonical form (P4Runtime 8.4, read-write symmetry)."""

    def runTest(self):
        self.insert(TABLE, {DST: ("10.0.0.0", 8)}, SET_NHOP, NHOP1, canonical=False)
        self.expect_routed("10.9.9.9", NHOP1)
        (e,) = self.read_entries(TABLE)
        self.assertEqual(e.match[0].lpm.value, b"\x0a\x00\x00\x00")
        values = sorted(p.value for p in e.action.action.params)
        self.assertEqual(values, sorted([b"\x01", b"\xaa\x01", b"\x01\x01"]), e)


class ReadBack(RouterTest):
    """A Read returns the entries written, with their match and action data."""

    def runTest(self):
        self.add_routes()
        entries = self.read_entries(TABLE)
        self.assertEqual(len(entries), 3, entries)
        t = self.p4info.table(TABLE)
        got = {}
        for e in entries:
            self.assertEqual(e.table_id, t.preamble.id)
            (m,) = e.match
            got[(int.from_bytes(m.lpm.value, "big"), m.lpm.prefix_len)] = e.action.action
        ten = 10 << 24
        self.assertEqual(sorted(got), sorted([(ten, 8), (ten | 0x010200, 24), (ten | 0x010203, 32)]))
        nhop = got[(ten, 8)]
        self.assertEqual(nhop.action_id, self.p4info.action(SET_NHOP).preamble.id)
        a = self.p4info.action(SET_NHOP)
        params = {p.param_id: int.from_bytes(p.value, "big") for p in nhop.params}
        self.assertEqual(params[self.p4info.param(a, "port").id], 1)
        self.assertEqual(params[self.p4info.param(a, "dmac").id], 0x0101)


class WriteErrors(RouterTest):
    """The server refuses what P4Runtime says it must: a duplicate INSERT (ALREADY_EXISTS),
    a DELETE or MODIFY of a missing entry (NOT_FOUND), an LPM value with bits past the
    prefix (INVALID_ARGUMENT), an unknown table (NOT_FOUND or INVALID_ARGUMENT), and a Write
    from a client that is not primary (PERMISSION_DENIED). None of it changes forwarding."""

    def runTest(self):
        INSERT, MODIFY, DELETE = (
            p4runtime_pb2.Update.INSERT,
            p4runtime_pb2.Update.MODIFY,
            p4runtime_pb2.Update.DELETE,
        )
        e = self.insert(TABLE, {DST: ("10.0.0.0", 8)}, SET_NHOP, NHOP1)
        self.assert_write_fails("ALREADY_EXISTS", [(INSERT, e)])
        missing = self.table_entry(TABLE, {DST: ("10.2.0.0", 16)}, SET_NHOP, NHOP2)
        self.assert_write_fails("NOT_FOUND", [(DELETE, missing)])
        self.assert_write_fails("NOT_FOUND", [(MODIFY, missing)])
        unmasked = self.table_entry(TABLE, {DST: ("10.1.2.3", 24)}, SET_NHOP, NHOP2)
        self.assert_write_fails("INVALID_ARGUMENT", [(INSERT, unmasked)])
        bogus = self.table_entry(TABLE, {DST: ("10.3.0.0", 16)}, SET_NHOP, NHOP2)
        bogus.table_id = 0x0DEAD
        with self.assertRaises(WriteError) as cm:
            self.write([(INSERT, bogus)])
        err = cm.exception
        self.assertTrue(
            {"NOT_FOUND", "INVALID_ARGUMENT"} & ({err.code.name} | set(err.update_codes())),
            f"unknown table: {err}",
        )
        # A second client with a lower election id is a backup: its Write is refused.
        backup = self.connect(self.election - 1)
        arb = backup.arbitrate()
        self.assertEqual(arb.arbitration.status.code, code_pb2.ALREADY_EXISTS, arb)
        self.assertEqual(arb.arbitration.election_id.low, self.election, arb)
        other = self.table_entry(TABLE, {DST: ("10.4.0.0", 16)}, SET_NHOP, NHOP2)
        self.assert_write_fails("PERMISSION_DENIED", [(INSERT, other)], client=backup)
        # None of the refused writes took effect: all of 10/8 goes by the one good entry.
        self.expect_routed("10.9.9.9", NHOP1)
        self.expect_routed("10.1.2.9", NHOP1)  # not by the refused 10.1.2.3/24 (port 2)
        self.expect_routed("10.3.0.1", NHOP1)  # not by the unknown table's entry
        self.expect_routed("10.4.0.1", NHOP1)  # not by the backup's 10.4.0.0/16 (port 2)


# --- P4Runtime semantics beyond forwarding (with the router as the program) ---

INSERT = p4runtime_pb2.Update.INSERT
MODIFY = p4runtime_pb2.Update.MODIFY
SFPC = p4runtime_pb2.SetForwardingPipelineConfigRequest
GFPC = p4runtime_pb2.GetForwardingPipelineConfigRequest


class GetPipeline(RouterTest):
    """GetForwardingPipelineConfig gives back the P4Info and cookie pushed (ALL), only the
    cookie (COOKIE_ONLY)."""

    def runTest(self):
        cfg = self.get_pipeline(GFPC.ALL).config
        self.assertEqual(cfg.cookie.cookie, 0x5111C)
        got = sorted((t.preamble.id, t.preamble.name) for t in cfg.p4info.tables)
        want = sorted((t.preamble.id, t.preamble.name) for t in self.p4info.msg.tables)
        self.assertEqual(got, want)
        only = self.get_pipeline(GFPC.COOKIE_ONLY).config
        self.assertEqual(only.cookie.cookie, 0x5111C)
        self.assertEqual(len(only.p4info.tables), 0, only)


class VerifyOnly(RouterTest):
    """SetForwardingPipelineConfig VERIFY: a program that does not compile is refused with
    INVALID_ARGUMENT; a good one is accepted and changes nothing (the entries stay)."""

    def runTest(self):
        self.add_routes()
        req = SFPC(device_id=self.device_id, action=SFPC.VERIFY)
        req.election_id.CopyFrom(self.client.election_id)
        req.config.p4info.CopyFrom(self.p4info.msg)
        req.config.p4_device_config = b"this is not a P4 program"
        with self.assertRaises(grpc.RpcError) as cm:
            self.stub.SetForwardingPipelineConfig(req, timeout=10)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, cm.exception)
        self.set_pipeline(SFPC.VERIFY)
        self.assertEqual(len(self.read_entries(TABLE)), 3)
        self.expect_routed("10.9.9.9", NHOP1)


class WrongDevice(RouterTest):
    """A Write or Read for another device id is refused with NOT_FOUND."""

    def runTest(self):
        req = p4runtime_pb2.WriteRequest(device_id=self.device_id + 98)
        req.election_id.CopyFrom(self.client.election_id)
        u = req.updates.add(type=INSERT)
        u.entity.table_entry.CopyFrom(
            self.table_entry(TABLE, {DST: ("10.0.0.0", 8)}, SET_NHOP, NHOP1)
        )
        with self.assertRaises(grpc.RpcError) as cm:
            self.stub.Write(req, timeout=10)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.NOT_FOUND, cm.exception)
        rreq = p4runtime_pb2.ReadRequest(device_id=self.device_id + 98)
        rreq.entities.add().table_entry.table_id = 0
        with self.assertRaises(grpc.RpcError) as cm:
            list(self.stub.Read(rreq, timeout=10))
        self.assertEqual(cm.exception.code(), grpc.StatusCode.NOT_FOUND, cm.exception)
        self.expect_dropped(pkt("10.9.9.9"))


class BatchPartial(RouterTest):
    """A batch with one bad update (CONTINUE_ON_ERROR): the Write fails with UNKNOWN and one
    p4.v1.Error per update (OK, ALREADY_EXISTS, OK), and the good updates are applied."""

    def runTest(self):
        a = self.table_entry(TABLE, {DST: ("10.0.0.0", 8)}, SET_NHOP, NHOP1)
        b = self.table_entry(TABLE, {DST: ("10.1.2.0", 24)}, SET_NHOP, NHOP2)
        self.insert(TABLE, {DST: ("10.0.0.0", 8)}, SET_NHOP, NHOP1)
        with self.assertRaises(WriteError) as cm:
            self.write([(INSERT, b), (INSERT, a), (MODIFY, a)])
        err = cm.exception
        self.assertEqual(err.code.name, "UNKNOWN", err)
        self.assertEqual([i for i, _ in err.errors], [1], err)
        self.assertEqual(err.update_codes(), ["ALREADY_EXISTS"], err)
        self.assertEqual(len(self.read_entries(TABLE)), 2)
        self.expect_routed("10.1.2.9", NHOP2)
        self.expect_routed("10.9.9.9", NHOP1)


class ValueWidths(RouterTest):
    """Binary strings (P4Runtime 8.4): a value wider than its field is refused with
    OUT_OF_RANGE (a port of 10 bits for a 9-bit parameter, a 33-bit IPv4 address), and so is
    an empty string; leading zero bytes beyond the width are accepted."""

    def runTest(self):
        def entry(port=None, dst=None):
            e = self.table_entry(TABLE, {DST: ("10.0.0.0", 8)}, SET_NHOP, NHOP1)
            if port is not None:
                e.action.action.params[0].value = port
            if dst is not None:
                e.match[0].lpm.value = dst
            return e

        self.assert_write_fails("OUT_OF_RANGE", [(INSERT, entry(port=b"\x02\x00"))])
        self.assert_write_fails("OUT_OF_RANGE", [(INSERT, entry(dst=b"\x01\x0a\x00\x00\x00"))])
        self.assert_write_fails("OUT_OF_RANGE", [(INSERT, entry(port=b""))])
        self.assertEqual(len(self.read_entries(TABLE)), 0)
        self.expect_dropped(pkt("10.9.9.9"))
        self.write([(INSERT, entry(port=b"\x00\x00\x01", dst=b"\x00\x00\x0a\x00\x00\x00"))])
        self.expect_routed("10.9.9.9", NHOP1)


class DefaultReset(RouterTest):
    """A MODIFY of the default entry without an action resets it to the program's default
    (drop): misses are dropped again."""

    def runTest(self):
        self.set_default(TABLE, SET_NHOP, NHOP2)
        self.expect_routed("192.168.1.1", NHOP2)
        e = self.table_entry(TABLE, default=True)
        self.write([(MODIFY, e)])
        self.expect_dropped(pkt("192.168.1.1"))
        (d,) = self.read_entries(TABLE, default=True)
        self.assertEqual(d.action.action.action_id, self.p4info.action(DROP).preamble.id, d)


class ReadFilters(RouterTest):
    """Read with table id 0 returns every table's entries; with a match, only that entry."""

    def runTest(self):
        self.add_routes()
        self.assertEqual(len(self.read_entries(None)), 3)
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id)
        req.entities.add().table_entry.CopyFrom(
            self.table_entry(TABLE, {DST: ("10.1.2.0", 24)})
        )
        got = [e.table_entry for r in self.stub.Read(req, timeout=10) for e in r.entities]
        self.assertEqual(len(got), 1, got)
        self.assertEqual(got[0].match[0].lpm.prefix_len, 24)


class PrimaryChange(RouterTest):
    """A client with a higher election id becomes primary: the old primary is told (an
    arbitration update that is not OK) and its Writes are refused; when the new primary
    leaves, the old one is told there is none, and takes over with a higher election id."""

    def runTest(self):
        old = self.client
        new = self.connect(self.election + 10)
        arb = new.arbitrate()
        self.assertEqual(arb.arbitration.status.code, code_pb2.OK, arb)
        note = old.next_message("arbitration")
        self.assertNotEqual(note.arbitration.status.code, code_pb2.OK, note)
        self.assertEqual(note.arbitration.election_id.low, self.election + 10, note)
        e = self.table_entry(TABLE, {DST: ("10.0.0.0", 8)}, SET_NHOP, NHOP1)
        self.assert_write_fails("PERMISSION_DENIED", [(INSERT, e)], client=old)
        self.write([(INSERT, e)], client=new)
        self.expect_routed("10.9.9.9", NHOP1)
        new.close()
        self.clients.remove(new)
        # No primary now: the backup is told so (NOT_FOUND, with the highest election id
        # seen); it becomes primary by sending an election id at least that high.
        gone = old.next_message("arbitration")
        self.assertEqual(gone.arbitration.status.code, code_pb2.NOT_FOUND, gone)
        self.assertEqual(gone.arbitration.election_id.low, self.election + 10, gone)
        back = old.arbitrate(self.election + 11)
        self.assertEqual(back.arbitration.status.code, code_pb2.OK, back)
        self.modify(TABLE, {DST: ("10.0.0.0", 8)}, SET_NHOP, NHOP2)
        self.expect_routed("10.9.9.9", NHOP2)


class LpmAndActionErrors(RouterTest):
    """Refused: an LPM prefix of 0 (a don't-care field must be left out) or longer than the
    field, an action the table does not have or that does not exist, a parameter missing."""

    def runTest(self):
        def entry(prefix=8, action=SET_NHOP, params=NHOP1):
            return self.table_entry(TABLE, {DST: ("10.0.0.0", prefix)}, action, params)

        zero = entry()
        zero.match[0].lpm.value = b"\x00"
        zero.match[0].lpm.prefix_len = 0
        too_long = entry()
        too_long.match[0].lpm.prefix_len = 33
        no_such_action = entry()
        no_such_action.action.action.action_id = 0x01DEAD
        missing_param = entry()
        del missing_param.action.action.params[2]
        cases = {
            "prefix 0": (zero, {"INVALID_ARGUMENT"}),
            "prefix 33": (too_long, {"INVALID_ARGUMENT", "OUT_OF_RANGE"}),
            "unknown action": (no_such_action, {"INVALID_ARGUMENT", "NOT_FOUND"}),
            "missing parameter": (missing_param, {"INVALID_ARGUMENT"}),
        }
        for name, (e, codes) in cases.items():
            with self.subTest(name):
                with self.assertRaises(WriteError) as cm:
                    self.write([(INSERT, e)])
                got = {cm.exception.code.name} | set(cm.exception.update_codes())
                self.assertTrue(codes & got, f"{name}: expected {codes}, got {cm.exception}")
        self.assertEqual(len(self.read_entries(TABLE)), 0)
        self.expect_dropped(pkt("10.9.9.9"))


class ManyRoutes(RouterTest):
    """1024 /24 routes in one Write, to ports 1 and 2 in turn: a Read finds them all and
    packets to a sample of them go where their route says."""

    def runTest(self):
        routes = [(f"10.{i >> 8}.{i & 0xFF}.0", NHOP1 if i % 2 else NHOP2) for i in range(1024)]
        self.write(
            [(INSERT, self.table_entry(TABLE, {DST: (net, 24)}, SET_NHOP, nh)) for net, nh in routes]
        )
        self.assertEqual(len(self.read_entries(TABLE)), 1024)
        for i in (0, 1, 255, 256, 511, 777, 1023):
            net, nh = routes[i]
            with self.subTest(route=net):
                self.expect_routed(net[: -len("0")] + "9", nh)
        self.expect_dropped(pkt("10.4.0.1"))


class ReconcileAndCapabilities(RouterTest):
    """RECONCILE_AND_COMMIT of the same program keeps the entries and forwarding (a plain
    VERIFY_AND_COMMIT clears them); Capabilities names a P4Runtime version."""

    def runTest(self):
        self.add_routes()
        self.set_pipeline(SFPC.RECONCILE_AND_COMMIT)
        self.assertEqual(len(self.read_entries(TABLE)), 3)
        self.expect_routed("10.1.2.77", NHOP2)
        self.set_pipeline(SFPC.VERIFY_AND_COMMIT)
        self.assertEqual(len(self.read_entries(TABLE)), 0)
        self.expect_dropped(pkt("10.1.2.77"))
        caps = self.stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=10)
        self.assertRegex(caps.p4runtime_api_version, r"^1\.\d+")


class MismatchedP4Info(RouterTest):
    """A P4Info that does not describe the program (the router's P4Info with another
    program's source) is refused with INVALID_ARGUMENT; the router keeps running."""

    def runTest(self):
        self.add_routes()
        other = os.path.join(os.path.dirname(os.path.abspath(__file__)), "p4", "acl.p4")
        req = SFPC(device_id=self.device_id, action=SFPC.VERIFY_AND_COMMIT)
        req.election_id.CopyFrom(self.client.election_id)
        req.config.p4info.CopyFrom(self.p4info.msg)
        with open(other, "rb") as f:
            req.config.p4_device_config = f.read()
        with self.assertRaises(grpc.RpcError) as cm:
            self.stub.SetForwardingPipelineConfig(req, timeout=10)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, cm.exception)
        self.assertEqual(len(self.read_entries(TABLE)), 3)
        self.expect_routed("10.9.9.9", NHOP1)
