"""A p4runtime-shell (PyPI `p4runtime-shell`, `p4runtime_sh.shell`) session against
`snic run --p4runtime`, as tests/p4runtime_clients.rs runs it:

    python shell_session.py --grpc HOST:PORT --udp SNIC,PEER router P4INFO PROG.p4
    python shell_session.py --grpc HOST:PORT --udp SNIC,PEER preloaded P4INFO
    python shell_session.py --grpc HOST:PORT --udp SNIC,PEER features P4INFO PROG.p4

router: pushes examples/p4/l3_router.p4 and programs `ipv4_lpm` (insert, read back, modify,
wildcard reads, default action set/read/reset, delete), with routed packets through snic's UDP
port 0 showing what the entries do. preloaded: the run was started with the program; the
shell pushes nothing and reads the P4Info from the server. features: pushes
tests/p4runtime/features.p4 and reads/writes its counters, direct counter, meters, direct
meter, register, action profile members, a ternary table; packet-out, packet-in and a digest.
"""

import p4runtime_sh.shell as sh
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2
from p4runtime_sh.p4runtime import P4RuntimeWriteException

from p4rt_common import (
    UdpPeer,
    csum16,
    eth_frame,
    ipv4_frame,
    mac,
    parse_args,
    run_main,
    to_int,
    wait_for,
)

ARGS = parse_args(["mode", "p4info", "program?"])


def load_p4info(path):
    info = p4info_pb2.P4Info()
    with open(path) as f:
        text_format.Merge(f.read(), info)
    return info


def setup(push):
    config = sh.FwdPipeConfig(ARGS.p4info, ARGS.program) if push else None
    sh.setup(
        device_id=ARGS.device_id,
        grpc_addr=ARGS.grpc,
        election_id=(0, 1),
        config=config,
        verbose=False,
    )


def params(entry):
    """{param name: int} of a read TableEntry / member's action."""
    msg = entry.action.msg()
    info = sh.context.get_action(entry.action.action_name)
    names = {p.id: p.name for p in info.params}
    return {names[p.param_id]: to_int(p.value) for p in msg.params}


def lpm_of(entry):
    (mf,) = entry.msg().match
    return (to_int(mf.lpm.value), mf.lpm.prefix_len)


def read_all(entity):
    return list(entity.read())


def write_error_codes(fn):
    """Run a write that must fail; return the per-update canonical codes."""
    try:
        fn()
    except P4RuntimeWriteException as e:
        return [err.canonical_code for _, err in e.errors]
    raise AssertionError("the write succeeded")


# ----------------------------------------------------------------------------------- router


ROUTER_T = "MyIngress.ipv4_lpm"
SET_NHOP = "MyIngress.set_nhop"


def route_entry(prefix, port, smac, dmac):
    te = sh.TableEntry(ROUTER_T)(action=SET_NHOP)
    te.match["hdr.ipv4.dstAddr"] = prefix
    te.action["port"] = str(port)
    te.action["smac"] = smac
    te.action["dmac"] = dmac
    return te


def lpm_key(prefix):
    te = sh.TableEntry(ROUTER_T)
    te.match["hdr.ipv4.dstAddr"] = prefix
    return te


def check_routed(c, peer, dst_ip, smac, dmac, what):
    """A packet to dst_ip sent into port 0 comes back out of port 0 routed: MACs rewritten,
    TTL decremented, header checksum still right."""
    sent = ipv4_frame("02:00:00:00:00:01", "02:00:00:00:00:02", "192.0.2.1", dst_ip, ttl=64)
    peer.send(sent)
    got = peer.recv(5.0)
    c.ok(got is not None, f"{what}: the packet comes back out of port 0")
    c.eq(got[0:6], mac(dmac), f"{what}: destination MAC rewritten")
    c.eq(got[6:12], mac(smac), f"{what}: source MAC rewritten")
    c.eq(got[14 + 8], 63, f"{what}: TTL decremented")
    c.eq(csum16(got[14:34]), 0, f"{what}: IPv4 checksum still right")
    c.eq(got[34:], sent[34:], f"{what}: payload unchanged")


def router(c):
    setup(push=True)
    peer = UdpPeer(ARGS.udp_snic, ARGS.udp_peer)
    c.ok(sh.APIVersion().startswith("1."), "Capabilities gives a 1.x API version")

    # The pushed pipeline is what GetForwardingPipelineConfig returns.
    want = load_p4info(ARGS.p4info)
    got = sh.client.get_p4info()
    c.eq(
        sorted((t.preamble.name, t.preamble.id) for t in got.tables),
        sorted((t.preamble.name, t.preamble.id) for t in want.tables),
        "the server's P4Info has the pushed tables",
    )
    c.eq(len(read_all(sh.TableEntry(ROUTER_T))), 0, "a new pipeline's table is empty")

    # Insert two routes; read one back by its key.
    route_entry("10.1.0.0/16", 0, "02:00:00:00:aa:01", "02:00:00:00:bb:01").insert()
    route_entry("10.2.2.0/24", 1, "02:00:00:00:aa:02", "02:00:00:00:bb:02").insert()
    (e,) = read_all(lpm_key("10.1.0.0/16"))
    c.eq(e.action.action_name, SET_NHOP, "read back: the action")
    c.eq(lpm_of(e), (0x0A010000, 16), "read back: the LPM key")
    c.eq(
        params(e),
        {"port": 0, "smac": 0x020000_00AA01, "dmac": 0x020000_00BB01},
        "read back: the action parameters",
    )
    check_routed(c, peer, "10.1.7.9", "02:00:00:00:aa:01", "02:00:00:00:bb:01", "first route")

    # Modify: new next-hop MACs, read back, and the data plane follows.
    route_entry("10.1.0.0/16", 0, "02:00:00:00:aa:03", "02:00:00:00:bb:03").modify()
    (e,) = read_all(lpm_key("10.1.0.0/16"))
    c.eq(
        params(e),
        {"port": 0, "smac": 0x020000_00AA03, "dmac": 0x020000_00BB03},
        "modify: the new parameters read back",
    )
    check_routed(c, peer, "10.1.7.9", "02:00:00:00:aa:03", "02:00:00:00:bb:03", "modified route")

    # Wildcard reads: the table's entries, and every table's.
    keys = sorted(lpm_of(e) for e in read_all(sh.TableEntry(ROUTER_T)))
    c.eq(keys, [(0x0A010000, 16), (0x0A020200, 24)], "wildcard read of the table")
    all_tables = list(sh.client.read_one(p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry())))
    n = sum(len(r.entities) for r in all_tables)
    c.eq(n, 2, "wildcard read of every table")

    # The default action: the program's drop(), then set_nhop, then reset.
    (d,) = read_all(sh.TableEntry(ROUTER_T)(is_default=True))
    c.eq(d.action.action_name, "MyIngress.drop", "the default action is the program's")
    c.ok(d.is_default, "the default entry reads back with is_default_action")
    peer.send(ipv4_frame("02:00:00:00:00:01", "02:00:00:00:00:02", "192.0.2.1", "10.9.9.9"))
    c.ok(peer.recv(0.5) is None, "a miss is dropped by the default action")
    de = sh.TableEntry(ROUTER_T)(is_default=True, action=SET_NHOP)
    de.action["port"] = "0"
    de.action["smac"] = "02:00:00:00:dd:01"
    de.action["dmac"] = "02:00:00:00:dd:02"
    de.modify()
    (d,) = read_all(sh.TableEntry(ROUTER_T)(is_default=True))
    c.eq(d.action.action_name, SET_NHOP, "set default action: read back")
    c.eq(params(d), {"port": 0, "smac": 0x020000_00DD01, "dmac": 0x020000_00DD02},
         "set default action: its parameters")
    check_routed(c, peer, "10.9.9.9", "02:00:00:00:dd:01", "02:00:00:00:dd:02", "default route")
    sh.TableEntry(ROUTER_T)(is_default=True).modify()  # no action: back to the program's
    (d,) = read_all(sh.TableEntry(ROUTER_T)(is_default=True))
    c.eq(d.action.action_name, "MyIngress.drop", "reset default action: drop again")
    c.eq(len(read_all(sh.TableEntry(ROUTER_T))), 2, "the default entry is not in wildcard reads")

    # Refused writes say why, per update.
    codes = write_error_codes(
        lambda: route_entry("10.1.0.0/16", 0, "02:00:00:00:aa:01", "02:00:00:00:bb:01").insert()
    )
    c.eq(codes, [6], "insert of an existing key: ALREADY_EXISTS")
    codes = write_error_codes(lambda: lpm_key("10.3.0.0/16").delete())
    c.eq(codes, [5], "delete of a missing key: NOT_FOUND")
    codes = write_error_codes(
        lambda: route_entry("10.3.0.0/16", 0, "02:00:00:00:aa:01", "02:00:00:00:bb:01").modify()
    )
    c.eq(codes, [5], "modify of a missing key: NOT_FOUND")

    # Delete one: gone from reads and from the data plane; then the other.
    lpm_key("10.1.0.0/16").delete()
    c.eq(len(read_all(lpm_key("10.1.0.0/16"))), 0, "delete: the entry no longer reads")
    peer.send(ipv4_frame("02:00:00:00:00:01", "02:00:00:00:00:02", "192.0.2.1", "10.1.7.9"))
    c.ok(peer.recv(0.5) is None, "delete: its packets are dropped again")
    lpm_key("10.2.2.0/24").delete()
    c.eq(len(read_all(sh.TableEntry(ROUTER_T))), 0, "delete: the table is empty")
    print("ok routed packet checks done", flush=True)
    sh.teardown()


def preloaded(c):
    setup(push=False)
    want = load_p4info(ARGS.p4info)
    got = sh.client.get_p4info()
    c.eq(
        sorted((t.preamble.name, t.preamble.id) for t in got.tables),
        sorted((t.preamble.name, t.preamble.id) for t in want.tables),
        "the preloaded program's P4Info: tables",
    )
    c.eq(
        sorted((a.preamble.name, a.preamble.id) for a in got.actions),
        sorted((a.preamble.name, a.preamble.id) for a in want.actions),
        "the preloaded program's P4Info: actions",
    )
    (e,) = read_all(sh.TableEntry(ROUTER_T))
    c.eq((lpm_of(e), params(e)), ((0x0A050000, 16), {"port": 0, "smac": 0x020000000005,
         "dmac": 0x020000000006}), "the entries file's entry reads back")
    route_entry("10.1.0.0/16", 0, "02:00:00:00:aa:01", "02:00:00:00:bb:01").insert()
    (e,) = read_all(lpm_key("10.1.0.0/16"))
    c.eq(params(e)["dmac"], 0x020000_00BB01, "an entry written to the preloaded program reads back")
    peer = UdpPeer(ARGS.udp_snic, ARGS.udp_peer)
    check_routed(c, peer, "10.1.0.1", "02:00:00:00:aa:01", "02:00:00:00:bb:01", "preloaded")
    check_routed(c, peer, "10.5.1.1", "02:00:00:00:00:05", "02:00:00:00:00:06", "entries file")
    lpm_key("10.5.0.0/16").delete()
    c.eq(len(read_all(lpm_key("10.5.0.0/16"))), 0, "the entries file's entry deletes")
    sh.teardown()


# --------------------------------------------------------------------------------- features


CPU = ARGS.cpu_port


def features(c):
    setup(push=True)
    peer = UdpPeer(ARGS.udp_snic, ARGS.udp_peer)
    packet_in = sh.PacketIn()  # its reader thread must exist before packets arrive
    digests = sh.DigestList()

    # l2 (direct counter, direct meter): one entry sending 02:..:01 back out of port 0.
    te = sh.TableEntry("Ingress.l2")(action="Ingress.l2_fwd")
    te.match["hdr.eth.dst"] = "02:00:00:00:00:01"
    te.action["port"] = "0"
    te.insert()
    frame = eth_frame("02:00:00:00:00:01", "02:00:00:00:00:02", 0x0800, size=60)
    for _ in range(3):
        peer.send(frame)
    got = [peer.recv(5.0) for _ in range(3)]
    c.ok(all(g == frame for g in got), "l2 hit: three frames come back out of port 0")

    def l2_key():
        k = sh.TableEntry("Ingress.l2")
        k.match["hdr.eth.dst"] = "02:00:00:00:00:01"
        return k

    dc = sh.DirectCounterEntry("Ingress.l2_ctr")
    dc.table_entry = l2_key()
    (r,) = read_all(dc)
    c.eq((r.packet_count, r.byte_count), (3, 180), "direct counter of the entry: 3 packets")
    rk = l2_key()
    rk.counter_data.packet_count = 0  # asks for the counter data with the entry
    (e,) = read_all(rk)
    c.eq(e.counter_data.packet_count, 3, "table entry read with counter_data")
    dc = sh.DirectCounterEntry("Ingress.l2_ctr")
    dc.table_entry = l2_key()
    dc.packet_count = 100
    dc.byte_count = 1000
    dc.modify()
    (r,) = read_all(dc)
    c.eq((r.packet_count, r.byte_count), (100, 1000), "direct counter written and read back")

    dm = sh.DirectMeterEntry("Ingress.l2_meter")
    dm.table_entry = l2_key()
    dm.cir, dm.cburst, dm.pir, dm.pburst = 1000, 100, 2000, 200
    dm.modify()
    dm = sh.DirectMeterEntry("Ingress.l2_meter")
    dm.table_entry = l2_key()
    (r,) = read_all(dm)
    c.eq((r.cir, r.cburst, r.pir, r.pburst), (1000, 100, 2000, 200), "direct meter config")

    # The indirect counter, by ingress port: port 0 saw the three frames.
    ce = sh.CounterEntry("Ingress.ingress_ctr")
    ce.index = 0
    (r,) = read_all(ce)
    c.eq((r.packet_count, r.byte_count), (3, 180), "counter[0]: the three frames")
    every = read_all(sh.CounterEntry("Ingress.ingress_ctr"))
    c.eq(len(every), 512, "wildcard counter read: every index")
    c.eq(sorted(x.index for x in every), list(range(512)), "wildcard counter read: indices")
    ce = sh.CounterEntry("Ingress.ingress_ctr")
    ce.index = 5
    ce.packet_count = 7
    ce.byte_count = 700
    ce.modify()
    ce = sh.CounterEntry("Ingress.ingress_ctr")
    ce.index = 5
    (r,) = read_all(ce)
    c.eq((r.packet_count, r.byte_count), (7, 700), "counter[5] written and read back")

    # The meter.
    me = sh.MeterEntry("Ingress.port_meter")
    me.index = 2
    me.cir, me.cburst, me.pir, me.pburst = 100, 10, 200, 20
    me.modify()
    me = sh.MeterEntry("Ingress.port_meter")
    me.index = 2
    (r,) = read_all(me)
    c.eq((r.cir, r.cburst, r.pir, r.pburst), (100, 10, 200, 20), "meter[2] config read back")
    c.eq(len(read_all(sh.MeterEntry("Ingress.port_meter"))), 16, "wildcard meter read")

    # The register: p4runtime-shell has no RegisterEntry helper; raw messages through its client.
    # (nor registers in its P4Type: the id comes from the P4Info file).
    (reg_id,) = [r.preamble.id for r in load_p4info(ARGS.p4info).registers
                 if r.preamble.name == "Ingress.tag_reg"]
    reg_write(reg_id, 3, 0x1234)
    c.eq(reg_read(reg_id, 3), 0x1234, "register[3] written and read back")

    # Action profile members and a table that uses them.
    m = sh.ActionProfileMember("Ingress.ecmp_ap")(member_id=1, action="Ingress.set_port")
    m.action["port"] = "0"
    m.insert()
    m2 = sh.ActionProfileMember("Ingress.ecmp_ap")(member_id=2, action="Ingress.set_port")
    m2.action["port"] = "1"
    m2.insert()
    members = {x.member_id: params(x) for x in read_all(sh.ActionProfileMember("Ingress.ecmp_ap"))}
    c.eq(members, {1: {"port": 0}, 2: {"port": 1}}, "action profile members read back")
    ee = sh.TableEntry("Ingress.ecmp")
    ee.match["hdr.eth.dst"] = "02:00:00:00:00:09"
    ee.member_id = 1
    ee.insert()
    (e,) = read_all(sh.TableEntry("Ingress.ecmp"))
    c.eq(e.member_id, 1, "indirect table entry names its member")
    f9 = eth_frame("02:00:00:00:00:09", "02:00:00:00:00:02", 0x0800)
    peer.send(f9)
    c.eq(peer.recv(5.0), f9, "ecmp hit through member 1 leaves by port 0")
    codes = write_error_codes(lambda: sh.ActionProfileMember("Ingress.ecmp_ap")(member_id=1).delete())
    c.eq(codes, [9], "deleting a member a table entry uses: FAILED_PRECONDITION")

    # The ternary acl: priorities read back; its to_cpu gives a packet-in.
    a1 = sh.TableEntry("Ingress.acl")(action="Ingress.to_cpu")
    a1.match["hdr.eth.type"] = "0x88cc&&&0xffff"
    a1.priority = 10
    a1.insert()
    a2 = sh.TableEntry("Ingress.acl")(action="Ingress.drop")
    a2.match["hdr.eth.src"] = "02:00:00:00:00:66&&&ff:ff:ff:ff:ff:ff"
    a2.priority = 20
    a2.insert()
    acl = sorted((x.priority, x.action.action_name) for x in read_all(sh.TableEntry("Ingress.acl")))
    c.eq(acl, [(10, "Ingress.to_cpu"), (20, "Ingress.drop")], "ternary entries and priorities")
    lldp = eth_frame("01:80:c2:00:00:0e", "02:00:00:00:00:03", 0x88CC, b"lldp")
    peer.send(lldp)
    pins = wait_for(lambda: list(packet_in.sniff(timeout=0.2)), timeout=5.0)
    c.eq(len(pins), 1, "acl to_cpu: one packet-in")
    pin = pins[0].packet
    c.eq(pin.payload, lldp, "packet-in payload: the frame without the packet_in header")
    c.eq(pin_metadata(pin), {"ingress_port": 0, "tag": 0xBEEF}, "packet-in metadata")

    # Packet-out back to the CPU port: a packet-in with tag + 1; the register sees the tag.
    po_frame = eth_frame("02:00:00:00:00:0a", "02:00:00:00:00:0b", 0x0800, b"loopback")
    sh.PacketOut(po_frame, egress_port=str(CPU), tag="41").send()
    pins = wait_for(lambda: list(packet_in.sniff(timeout=0.2)), timeout=5.0)
    c.eq(len(pins), 1, "packet-out to the CPU port: one packet-in")
    c.eq(pins[0].packet.payload, po_frame, "looped packet: payload unchanged")
    c.eq(pin_metadata(pins[0].packet), {"ingress_port": CPU, "tag": 42},
         "looped packet: metadata ingress_port = CPU port, tag + 1")
    c.eq(reg_read(reg_id, 0), 41, "register[0]: the packet-out's tag")
    ce = sh.CounterEntry("Ingress.ingress_ctr")
    ce.index = CPU
    (r,) = read_all(ce)
    c.eq(r.packet_count, 1, "counter[CPU port]: the packet-out")

    # Packet-out to port 0: the peer gets the frame without the packet_out header.
    sh.PacketOut(po_frame, egress_port="0", tag="1").send()
    c.eq(peer.recv(5.0), po_frame, "packet-out to port 0 leaves by port 0")

    # A digest: enable it, then a packet-out with EtherType 0x88b5 sends learn_t.
    (digest_name,) = [d.preamble.name for d in load_p4info(ARGS.p4info).digests]
    de = sh.DigestEntry(digest_name)
    de.max_list_size = 1
    de.max_timeout_ns = 0
    de.ack_timeout_ns = 1_000_000_000
    de.insert()
    (r,) = read_all(sh.DigestEntry(digest_name))
    c.eq(r.max_list_size, 1, "digest entry read back")
    learn = eth_frame("02:00:00:00:00:0a", "02:00:00:00:00:42", 0x88B5, b"learn")
    sh.PacketOut(learn, egress_port="1", tag="9").send()
    lists = wait_for(lambda: list(digests.sniff(timeout=0.2)), timeout=5.0)
    c.eq(len(lists), 1, "one digest list")
    dl = lists[0].digest
    c.eq(dl.digest_id, sh.context.get_obj_id(sh.P4Type.digest, digest_name), "digest list id")
    c.eq(len(dl.data), 1, "one digest in the list")
    members = [to_int(m.bitstring) for m in dl.data[0].struct.members]
    c.eq(members, [0x020000000042, CPU, 9], "digest data: source MAC, ingress port, tag")

    sh.teardown()


def pin_metadata(pin):
    info = {
        m.id: m.name
        for m in sh.context.get_obj(sh.P4Type.controller_packet_metadata, "packet_in").metadata
    }
    md = {info[m.metadata_id]: to_int(m.value) for m in pin.metadata}
    md.pop("_pad", None)  # the padding field, if the P4Info lists it
    return md


def reg_write(reg_id, index, value):
    u = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
    u.entity.register_entry.register_id = reg_id
    u.entity.register_entry.index.index = index
    u.entity.register_entry.data.bitstring = value.to_bytes(4, "big").lstrip(b"\0") or b"\0"
    sh.client.write_update(u)


def reg_read(reg_id, index):
    ent = p4runtime_pb2.Entity()
    ent.register_entry.register_id = reg_id
    ent.register_entry.index.index = index
    values = [
        e.register_entry
        for r in sh.client.read_one(ent)
        for e in r.entities
    ]
    assert len(values) == 1, values
    return to_int(values[0].data.bitstring)


def main(c):
    {"router": router, "preloaded": preloaded, "features": features}[ARGS.mode](c)


if __name__ == "__main__":
    run_main("shell_session", main)
