#!/usr/bin/env python3
"""Write seeds for the `p4rt_messages` fuzz target: byte 0 picks the message (0 Write, 1 Read,
2 PacketOut), the rest is the message encoded with the `p4runtime` PyPI package's classes.

Usage (from fuzz/): python3 seeds/gen_p4rt.py P4INFO.txt, with the P4Info that
`snic p4 info ../crates/snic-p4rt/tests/p4/p4rt_test.p4 --p4info P4INFO.txt` writes.
"""
import os
import sys

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as p

info = p4info_pb2.P4Info()
text_format.Parse(open(sys.argv[1]).read(), info)
ids = {}
for group in (info.tables, info.actions, info.action_profiles, info.counters, info.meters,
              info.registers, info.digests, info.value_sets, info.direct_counters):
    for o in group:
        ids[o.preamble.name] = o.preamble.id

out = os.path.join(os.path.dirname(__file__), "p4rt_messages")
os.makedirs(out, exist_ok=True)


def write(name, updates, atomicity=0):
    req = p.WriteRequest(device_id=1, atomicity=atomicity)
    for ty, ent in updates:
        req.updates.add(type=ty, entity=ent)
    open(os.path.join(out, name), "wb").write(b"\x00" + req.SerializeToString())


def fwd(mac, port):
    e = p.Entity()
    t = e.table_entry
    t.table_id = ids["I.fwd"]
    t.match.add(field_id=1).exact.value = mac
    t.action.action.action_id = ids["I.forward"]
    t.action.action.params.add(param_id=1, value=port)
    return e


def acl():
    e = p.Entity()
    t = e.table_entry
    t.table_id = ids["I.acl"]
    m = t.match.add(field_id=1).ternary
    m.value, m.mask = b"\x02", b"\xff"
    r = t.match.add(field_id=2).range
    r.low, r.high = b"\x08\x00", b"\x08\xff"
    t.action.action.action_id = ids["I.set_mcast"]
    t.action.action.params.add(param_id=1, value=b"\x05")
    t.priority = 10
    return e


def member(mid, port):
    e = p.Entity()
    m = e.action_profile_member
    m.action_profile_id, m.member_id = ids["I.sel"], mid
    m.action.action_id = ids["I.lb"]
    m.action.params.add(param_id=1, value=port)
    return e


def group(gid, members):
    e = p.Entity()
    g = e.action_profile_group
    g.action_profile_id, g.group_id, g.max_size = ids["I.sel"], gid, 4
    for m in members:
        g.members.add(member_id=m, weight=1)
    return e


def counter(idx):
    e = p.Entity()
    c = e.counter_entry
    c.counter_id = ids["I.port_ctr"]
    c.index.index = idx
    c.data.packet_count = 5
    return e


def register(idx):
    e = p.Entity()
    r = e.register_entry
    r.register_id = ids["I.seen"]
    r.index.index = idx
    r.data.bitstring = b"\x01\x02"
    return e


def mcast():
    e = p.Entity()
    g = e.packet_replication_engine_entry.multicast_group_entry
    g.multicast_group_id = 5
    g.replicas.add(port=b"\x01", instance=0)
    g.replicas.add(port=b"\x02", instance=1)
    return e


def digest():
    e = p.Entity()
    d = e.digest_entry
    d.digest_id = ids["learn_t"]
    d.config.max_list_size = 1
    return e


I, M, D = 1, 2, 3
write("write_fwd", [(I, fwd(b"\x01", b"\x03"))])
write("write_fwd_twice", [(I, fwd(b"\x01", b"\x03")), (I, fwd(b"\x01", b"\x04"))], atomicity=1)
write("write_acl", [(I, acl())])
write("write_profile", [(I, member(1, b"\x04")), (I, group(10, [1])), (M, member(1, b"\x05"))])
write("write_counter_register", [(M, counter(2)), (M, register(3))])
write("write_mcast_digest", [(I, mcast()), (I, digest()), (D, mcast())])
read = p.ReadRequest(device_id=1)
read.entities.add().table_entry.table_id = 0
read.entities.add().counter_entry.counter_id = 0
open(os.path.join(out, "read_all"), "wb").write(b"\x01" + read.SerializeToString())
po = p.PacketOut(payload=b"\x00" * 14)
po.metadata.add(metadata_id=1, value=b"\x03")
open(os.path.join(out, "packet_out"), "wb").write(b"\x02" + po.SerializeToString())
