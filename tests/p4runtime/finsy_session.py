"""A finsy (PyPI `finsy`, asyncio) session against `snic run --p4runtime`, as
tests/p4runtime_clients.rs runs it:

    python finsy_session.py --grpc HOST:PORT --udp SNIC,PEER \
        ROUTER_P4INFO l3_router.p4 FEATURES_P4INFO features.p4

1. As primary, finsy pushes l3_router.p4 (its P4Info and the P4 source as device config) and
   programs `ipv4_lpm`: insert, read back, modify, wildcard read, default action, delete, the
   per-update errors of refused writes; a routed packet through snic's UDP port 0.
2. A second session pushes tests/p4runtime/features.p4 over it (a new cookie: a new pipeline)
   and does packet-out / packet-in with metadata both ways, a digest triggered by a
   packet-out (acknowledged), a register and a counter.
"""

import asyncio
import logging
from pathlib import Path

import finsy as fy
from finsy.proto import p4r

from p4rt_common import UdpPeer, csum16, eth_frame, ipv4_frame, mac, parse_args, run_main, to_int

ARGS = parse_args(["router_p4info", "router_p4", "features_p4info", "features_p4"])
CPU = ARGS.cpu_port
WAIT = 5.0

ROUTER_T = "MyIngress.ipv4_lpm"
SET_NHOP = "MyIngress.set_nhop"
DST = "hdr.ipv4.dstAddr"


def options(p4info, p4blob):
    return fy.SwitchOptions(
        p4info=Path(p4info),
        p4blob=Path(p4blob),
        device_id=ARGS.device_id,
        initial_election_id=20,
        fail_fast=True,
    )


def route(prefix, port, smac, dmac):
    return fy.P4TableEntry(
        ROUTER_T,
        match=fy.Match({DST: prefix}),
        action=fy.Action(SET_NHOP, port=port, smac=smac, dmac=dmac),
    )


async def read_pb(sw, entity):
    """Read entities; return them as protobuf TableEntry / ... messages (encoded back from
    finsy's objects), which do not depend on finsy's value formatting."""
    out = []
    async for e in sw.read(entity):
        out.append(e)
    return out


def te_pb(sw, e):
    return e.encode_entry(sw.p4info)


def params_pb(sw, te):
    action = sw.p4info.actions[te.action.action.action_id]
    names = {p.id: p.name for p in action.params}
    return action.name, {names[p.param_id]: to_int(p.value) for p in te.action.action.params}


async def write_error(sw, updates):
    """A write that must fail: its per-update canonical codes, by update index."""
    try:
        await sw.write(updates)
    except fy.P4ClientError as e:
        assert e.code == fy.GRPCStatusCode.UNKNOWN, f"outer status {e.code!r}: {e}"
        return {i: int(err.canonical_code) for i, err in e.details.items()}
    raise AssertionError("the write succeeded")


def check_routed(c, got, sent, smac, dmac, what):
    c.ok(got is not None, f"{what}: the packet comes back out of port 0")
    c.eq((got[0:6], got[6:12]), (mac(dmac), mac(smac)), f"{what}: MACs rewritten")
    c.eq(got[22], 63, f"{what}: TTL decremented")
    c.eq(csum16(got[14:34]), 0, f"{what}: IPv4 checksum right")
    c.eq(got[34:], sent[34:], f"{what}: payload unchanged")


async def router(c, peer):
    async with fy.Switch("snic", ARGS.grpc, options(ARGS.router_p4info, ARGS.router_p4)) as sw:
        c.ok(sw.is_primary, "finsy is the primary client")
        c.ok(str(sw.p4runtime_version).startswith("1."), "Capabilities: a 1.x API version")
        got = {t.name: t.id for t in sw.p4info.tables}
        c.ok(ROUTER_T in got, "the pipeline has ipv4_lpm", repr(got))

        await sw.insert(
            [
                route("10.1.0.0/16", 0, "02:00:00:00:aa:01", "02:00:00:00:bb:01"),
                route("10.2.2.0/24", 1, "02:00:00:00:aa:02", "02:00:00:00:bb:02"),
            ]
        )
        (e,) = await read_pb(sw, fy.P4TableEntry(ROUTER_T, match=fy.Match({DST: "10.1.0.0/16"})))
        pb = te_pb(sw, e)
        c.eq((to_int(pb.match[0].lpm.value), pb.match[0].lpm.prefix_len), (0x0A010000, 16),
             "read back: the LPM key")
        c.eq(params_pb(sw, pb), (SET_NHOP, {"port": 0, "smac": 0x02000000AA01, "dmac": 0x02000000BB01}),
             "read back: action and parameters")
        sent = ipv4_frame("02:00:00:00:00:01", "02:00:00:00:00:02", "192.0.2.1", "10.1.3.4")
        peer.send(sent)
        check_routed(c, peer.recv(WAIT), sent, "02:00:00:00:aa:01", "02:00:00:00:bb:01", "route")

        await sw.modify([route("10.1.0.0/16", 0, "02:00:00:00:aa:05", "02:00:00:00:bb:05")])
        (e,) = await read_pb(sw, fy.P4TableEntry(ROUTER_T, match=fy.Match({DST: "10.1.0.0/16"})))
        c.eq(params_pb(sw, te_pb(sw, e))[1]["dmac"], 0x02000000BB05, "modify: read back")
        peer.send(sent)
        check_routed(c, peer.recv(WAIT), sent, "02:00:00:00:aa:05", "02:00:00:00:bb:05", "modified")

        every = await read_pb(sw, fy.P4TableEntry(ROUTER_T))
        c.eq(sorted(te_pb(sw, e).match[0].lpm.prefix_len for e in every), [16, 24], "wildcard read")
        every = await read_pb(sw, fy.P4TableEntry())
        c.eq(len(every), 2, "wildcard read of every table")

        (d,) = await read_pb(sw, fy.P4TableEntry(ROUTER_T, is_default_action=True))
        c.eq(params_pb(sw, te_pb(sw, d))[0], "MyIngress.drop", "default action: the program's")
        await sw.modify(
            [
                fy.P4TableEntry(
                    ROUTER_T,
                    is_default_action=True,
                    action=fy.Action(SET_NHOP, port=0, smac="02:00:00:00:dd:01",
                                     dmac="02:00:00:00:dd:02"),
                )
            ]
        )
        (d,) = await read_pb(sw, fy.P4TableEntry(ROUTER_T, is_default_action=True))
        c.eq(params_pb(sw, te_pb(sw, d)),
             (SET_NHOP, {"port": 0, "smac": 0x02000000DD01, "dmac": 0x02000000DD02}),
             "default action set and read back")
        miss = ipv4_frame("02:00:00:00:00:01", "02:00:00:00:00:02", "192.0.2.1", "10.77.0.1")
        peer.send(miss)
        check_routed(c, peer.recv(WAIT), miss, "02:00:00:00:dd:01", "02:00:00:00:dd:02", "default")

        # One batch, two refused updates and one good one: per-update codes, in order.
        errs = await write_error(
            sw,
            [
                +route("10.1.0.0/16", 0, "02:00:00:00:aa:01", "02:00:00:00:bb:01"),
                -fy.P4TableEntry(ROUTER_T, match=fy.Match({DST: "10.99.0.0/16"})),
                +route("10.3.0.0/16", 1, "02:00:00:00:aa:03", "02:00:00:00:bb:03"),
            ],
        )
        c.eq(errs, {0: 6, 1: 5}, "batch errors: ALREADY_EXISTS, NOT_FOUND, the third applied")
        every = await read_pb(sw, fy.P4TableEntry(ROUTER_T))
        c.eq(len(every), 3, "the batch's good update was applied")

        await sw.delete_all()
        c.eq(len(await read_pb(sw, fy.P4TableEntry(ROUTER_T))), 0, "delete_all empties the table")
        (d,) = await read_pb(sw, fy.P4TableEntry(ROUTER_T, is_default_action=True))
        c.eq(params_pb(sw, te_pb(sw, d))[0], "MyIngress.drop", "delete_all reset the default action")
        peer.send(sent)
        c.ok(peer.recv(0.5) is None, "after delete_all the route's packets are dropped")


def packet_out(sw, frame, **md):
    """A P4PacketOut; metadata fields the test does not name (the padding) are 0."""
    names = [m.name for m in sw.p4info.controller_packet_metadata["packet_out"].metadata]
    return fy.P4PacketOut(frame, **{n: md.get(n, 0) for n in names})


async def next_packet(queue_iter):
    return await asyncio.wait_for(anext(queue_iter), WAIT)


async def features(c, peer):
    async with fy.Switch("snic", ARGS.grpc, options(ARGS.features_p4info, ARGS.features_p4)) as sw:
        c.ok(sw.is_primary, "second session: primary")
        c.ok("Ingress.l2" in {t.name for t in sw.p4info.tables}, "features.p4 pipeline pushed")
        c.eq(len(await read_pb(sw, fy.P4TableEntry())), 0, "the new pipeline starts empty")

        packets = sw.read_packets()
        # The queue opens at the first anext(): start it before any packet can arrive.
        first = asyncio.ensure_future(next_packet(packets))
        await asyncio.sleep(0.1)

        # Packet-out to the CPU port comes back as a packet-in: tag + 1, ingress port = CPU.
        frame = eth_frame("02:00:00:00:00:0a", "02:00:00:00:00:0b", 0x0800, b"finsy")
        await sw.write([packet_out(sw, frame, egress_port=CPU, tag=1000)])
        pin = await first
        c.eq(pin.payload, frame, "packet-in payload: the packet-out's frame")
        c.eq((pin["ingress_port"], pin["tag"]), (CPU, 1001), "packet-in metadata")

        # A data-plane packet to the controller: acl to_cpu.
        await sw.insert(
            [
                fy.P4TableEntry(
                    "Ingress.acl",
                    match=fy.Match({"hdr.eth.type": "0x88cc/&0xffff"}),
                    action=fy.Action("Ingress.to_cpu"),
                    priority=5,
                )
            ]
        )
        lldp = eth_frame("01:80:c2:00:00:0e", "02:00:00:00:00:03", 0x88CC, b"lldp")
        peer.send(lldp)
        pin = await next_packet(packets)
        c.eq(pin.payload, lldp, "data-plane packet-in payload")
        c.eq((pin["ingress_port"], pin["tag"]), (0, 0xBEEF), "data-plane packet-in metadata")

        # A backup (lower election id) takes no part in packet I/O: the primary alone gets the
        # packet-in, and the backup's packet-out is not sent.
        bopts = options(ARGS.features_p4info, ARGS.features_p4)(initial_election_id=5)
        async with fy.Switch("backup", ARGS.grpc, bopts) as backup:
            c.ok(not backup.is_primary, "a client with a lower election id is a backup")
            bpackets = backup.read_packets()
            bfirst = asyncio.ensure_future(asyncio.wait_for(anext(bpackets), 1.5))
            await asyncio.sleep(0.1)
            peer.send(lldp)
            pin = await next_packet(packets)
            c.eq(pin.payload, lldp, "with a backup connected, the primary gets the packet-in")
            try:
                got = await bfirst
            except asyncio.TimeoutError:
                got = None
            c.ok(got is None, "the backup gets no packet-in", repr(got))
            await backup.write([packet_out(backup, frame, egress_port=0, tag=5)])
            c.ok(peer.recv(1.0) is None, "the backup's packet-out is not sent")
            await bpackets.aclose()
        await asyncio.sleep(0.2)
        c.ok(sw.is_primary, "the primary is still primary after the backup left")

        # Packet-out to port 0 leaves by port 0 without the packet_out header.
        await sw.write([packet_out(sw, frame, egress_port=0, tag=3)])
        c.eq(peer.recv(WAIT), frame, "packet-out to port 0")

        # Digests: none before a DigestEntry enables them; then one list per learned datum,
        # a duplicate suppressed until the list is acknowledged.
        digest_name = next(iter(sw.p4info.digests)).name
        lists = sw.read_digests(digest_name)
        got_lists = asyncio.Queue()

        async def pump():
            async for dl in lists:
                await got_lists.put(dl)

        pumping = asyncio.ensure_future(pump())

        async def next_list(timeout):
            try:
                return await asyncio.wait_for(got_lists.get(), timeout)
            except asyncio.TimeoutError:
                return None

        learn = eth_frame("02:00:00:00:00:0a", "02:00:00:00:00:77", 0x88B5, b"learn")
        pending = asyncio.ensure_future(next_list(1.0))
        await asyncio.sleep(0.1)
        await sw.write([packet_out(sw, learn, egress_port=1, tag=77)])
        c.ok(await pending is None, "no digest list before a DigestEntry")
        await sw.insert([fy.P4DigestEntry(digest_name, max_list_size=1, max_timeout_ns=0,
                                          ack_timeout_ns=10_000_000_000)])
        pending = asyncio.ensure_future(next_list(WAIT))
        await asyncio.sleep(0.1)
        await sw.write([packet_out(sw, learn, egress_port=1, tag=77)])
        dl = await pending
        c.ok(dl is not None, "a digest list once the DigestEntry is in")
        c.eq(len(dl), 1, "one digest in the list")
        c.eq(dict(dl[0]), {"src": 0x020000000077, "port": CPU, "tag": 77}, "digest data")
        pending = asyncio.ensure_future(next_list(1.0))
        await asyncio.sleep(0.1)
        await sw.write([packet_out(sw, learn, egress_port=1, tag=77)])
        dup = await pending
        c.ok(dup is None, "the same datum again before the ack: no new list", repr(dup))
        await sw.write([dl.ack()])
        await asyncio.sleep(0.2)
        pending = asyncio.ensure_future(next_list(WAIT))
        await asyncio.sleep(0.1)
        await sw.write([packet_out(sw, learn, egress_port=1, tag=77)])
        again = await pending
        c.ok(again is not None and dict(again[0])["tag"] == 77,
             "after the ack the same datum gives a new list", repr(again))

        # The register holds the last packet-out's tag; counters count by ingress port.
        reg = await read_pb(sw, fy.P4RegisterEntry("Ingress.tag_reg", index=0))
        c.eq(to_int(reg[0].encode(sw.p4info).register_entry.data.bitstring), 77, "register[0]")
        await sw.modify([fy.P4RegisterEntry("Ingress.tag_reg", index=1, data=0xABCD)])
        reg = await read_pb(sw, fy.P4RegisterEntry("Ingress.tag_reg", index=1))
        c.eq(to_int(reg[0].encode(sw.p4info).register_entry.data.bitstring), 0xABCD,
             "register[1] written and read back")
        (ctr,) = await read_pb(sw, fy.P4CounterEntry("Ingress.ingress_ctr", index=CPU))
        c.eq(ctr.packet_count, 6, "counter[CPU port]: the six packet-outs")
        (ctr,) = await read_pb(sw, fy.P4CounterEntry("Ingress.ingress_ctr", index=0))
        c.eq(ctr.packet_count, 2, "counter[0]: the two data-plane packets")
        await packets.aclose()
        pumping.cancel()

    # finsy reconnecting with the same program compares the pipeline's cookie and pushes
    # nothing: the forwarding state is still there.
    async with fy.Switch("snic", ARGS.grpc, options(ARGS.features_p4info, ARGS.features_p4)) as sw:
        c.ok(sw.is_primary, "reconnected as primary")
        acl = await read_pb(sw, fy.P4TableEntry("Ingress.acl"))
        c.eq(len(acl), 1, "same cookie: no new push, the acl entry is still there")


async def session(c):
    peer = UdpPeer(ARGS.udp_snic, ARGS.udp_peer)
    await router(c, peer)
    await features(c, peer)


def main(c):
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(asyncio.wait_for(session(c), 120))


if __name__ == "__main__":
    run_main("finsy_session", main)
