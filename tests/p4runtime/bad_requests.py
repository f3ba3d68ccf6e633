"""Requests a P4Runtime server must refuse, sent with raw gRPC (the `p4runtime` package's
`p4.v1.p4runtime_pb2` / `_grpc` stubs, from p4runtime-shell's venv), as
tests/p4runtime_clients.rs runs it:

    python bad_requests.py --grpc HOST:PORT --udp SNIC,PEER P4INFO l3_router.p4 \
        FEATURES_P4INFO features.p4

Each case checks the status the P4Runtime specification gives (Write: UNKNOWN with one
p4.v1.Error per update in the details, or a plain status for a request refused as a whole) and
that a read afterwards shows the table as it was. First on l3_router.p4 (tables, arbitration),
then on tests/p4runtime/features.p4 (counters, meters, action profiles, digests, ternary keys).
"""

import queue
import threading

import grpc
from google.protobuf import text_format
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2 as p4r
from p4.v1 import p4runtime_pb2_grpc

from p4rt_common import parse_args, run_main

ARGS = parse_args(["p4info", "program", "features_p4info", "features_p4"])
TIMEOUT = 10.0
CODE = {v: k for k, v in code_pb2.Code.items()}  # number -> name


def name(code):
    return CODE.get(code, str(code))


class Stream:
    """A StreamChannel: requests through a queue, responses read by a thread."""

    def __init__(self, stub):
        self.out = queue.Queue()
        self.inq = queue.Queue()
        self.call = stub.StreamChannel(iter(self.out.get, None))
        self.status = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for msg in self.call:
                self.inq.put(msg)
        except grpc.RpcError as e:
            self.status = e.code()
        self.inq.put(None)

    def arbitrate(self, election_low, device_id=None):
        req = p4r.StreamMessageRequest()
        req.arbitration.device_id = ARGS.device_id if device_id is None else device_id
        req.arbitration.election_id.high = 0
        req.arbitration.election_id.low = election_low
        self.out.put(req)

    def next(self, timeout=TIMEOUT):
        """The next response, or None when the stream ended (or nothing came in time)."""
        try:
            return self.inq.get(timeout=timeout)
        except queue.Empty:
            return None

    def next_arbitration(self, timeout=TIMEOUT):
        while True:
            msg = self.next(timeout)
            if msg is None or msg.HasField("arbitration"):
                return msg

    def close(self):
        self.out.put(None)
        self.call.cancel()


def write_status(stub, updates, election_low, device_id=None):
    """Send a WriteRequest; return (grpc code name, [per-update canonical code names])."""
    req = p4r.WriteRequest(device_id=ARGS.device_id if device_id is None else device_id)
    req.election_id.high = 0
    req.election_id.low = election_low
    req.updates.extend(updates)
    try:
        stub.Write(req, timeout=TIMEOUT)
        return "OK", []
    except grpc.RpcError as e:
        return e.code().name, per_update(e)


def per_update(e):
    for key, value in e.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            st = status_pb2.Status()
            st.ParseFromString(value)
            out = []
            for any_ in st.details:
                err = p4r.Error()
                if not any_.Unpack(err):
                    out.append(f"not a p4.v1.Error: {any_.type_url}")
                else:
                    out.append(name(err.canonical_code))
            return out
    return []


def main(c):
    info = p4info_pb2.P4Info()
    with open(ARGS.p4info) as f:
        text_format.Merge(f.read(), info)
    (table,) = [t for t in info.tables if t.preamble.name.endswith("ipv4_lpm")]
    (set_nhop,) = [a for a in info.actions if a.preamble.name.endswith("set_nhop")]
    (dst_field,) = table.match_fields
    pid = {p.name: p.id for p in set_nhop.params}
    c.eq(dst_field.bitwidth, 32, "P4Info: the LPM key is 32 bits wide")

    channel = grpc.insecure_channel(ARGS.grpc)
    stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)

    def entry(value, plen, port=b"\x01", table_id=None):
        te = p4r.TableEntry(table_id=table.preamble.id if table_id is None else table_id)
        m = te.match.add()
        m.field_id = dst_field.id
        m.lpm.value = value
        m.lpm.prefix_len = plen
        te.action.action.action_id = set_nhop.preamble.id
        for pname, v in (("port", port), ("smac", b"\x02\0\0\0\0\x01"), ("dmac", b"\x02\0\0\0\0\x02")):
            p = te.action.action.params.add()
            p.param_id = pid[pname]
            p.value = v
        return te

    def update(kind, te):
        u = p4r.Update(type=kind)
        u.entity.table_entry.CopyFrom(te)
        return u

    def read_status(*entities):
        req = p4r.ReadRequest(device_id=ARGS.device_id)
        req.entities.extend(entities)
        try:
            for _ in stub.Read(req, timeout=TIMEOUT):
                pass
            return "OK"
        except grpc.RpcError as e:
            return e.code().name

    def snapshot():
        req = p4r.ReadRequest(device_id=ARGS.device_id)
        req.entities.add().table_entry.table_id = table.preamble.id
        out = []
        for resp in stub.Read(req, timeout=TIMEOUT):
            out.extend(e.SerializeToString(deterministic=True) for e in resp.entities)
        return sorted(out)

    # The primary: election id 10.
    a = Stream(stub)
    a.arbitrate(10)
    m = a.next_arbitration()
    c.ok(m is not None, "the primary's arbitration is answered", f"stream status {a.status}")
    c.eq(name(m.arbitration.status.code), "OK", "election id 10 is the primary")

    # No pipeline yet: writes and reads get FAILED_PRECONDITION (after the device and primary
    # checks).
    got = write_status(stub, [update(p4r.Update.INSERT, entry(b"\x0a\x01\x00\x00", 16))], 10)
    c.eq(got, ("FAILED_PRECONDITION", []), "a write before any pipeline")
    c.eq(read_status(p4r.Entity(table_entry=p4r.TableEntry())), "FAILED_PRECONDITION",
         "a read before any pipeline")

    cfg = p4r.SetForwardingPipelineConfigRequest(
        device_id=ARGS.device_id, action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
    )
    cfg.election_id.low = 10
    cfg.config.p4info.CopyFrom(info)
    with open(ARGS.program, "rb") as f:
        cfg.config.p4_device_config = f.read()
    stub.SetForwardingPipelineConfig(cfg, timeout=TIMEOUT)
    c.ok(True, "the primary pushed l3_router.p4")

    base = entry(b"\x0a\x01\x00\x00", 16)
    c.eq(write_status(stub, [update(p4r.Update.INSERT, base)], 10), ("OK", []), "baseline insert")
    before = snapshot()
    c.eq(len(before), 1, "one entry to compare against")

    def unchanged(what):
        c.eq(snapshot(), before, f"{what}: the table is unchanged")

    def refused(what, updates, want_outer, want_details, election=10, device_id=None):
        got = write_status(stub, updates, election, device_id)
        want = (want_outer, want_details)
        if callable(want_details):
            c.ok(got[0] == want_outer and want_details(got[1]), what, f"got {got!r}")
            print(f"note {what}: {got!r}", flush=True)
        else:
            c.eq(got, want, what)
        unchanged(what)

    # Unknown table id: NOT_FOUND for that update.
    refused("unknown table id", [update(p4r.Update.INSERT, entry(b"\x0a\x02\x00\x00", 16,
            table_id=table.preamble.id ^ 0x00ABCDEF))], "UNKNOWN", ["NOT_FOUND"])
    # A key value wider than the key's 32 bits.
    # The spec: OUT_OF_RANGE (Bytestrings); its match-format list says INVALID_ARGUMENT.
    wide = lambda d: d in (["OUT_OF_RANGE"], ["INVALID_ARGUMENT"])  # noqa: E731
    refused("LPM value of 33 bits", [update(p4r.Update.INSERT, entry(b"\x01\x0a\x02\x00\x00", 16))],
            "UNKNOWN", wide)
    # An action parameter wider than its 9 bits (512).
    refused("port parameter of 10 bits",
            [update(p4r.Update.INSERT, entry(b"\x0a\x02\x00\x00", 16, port=b"\x02\x00"))],
            "UNKNOWN", wide)
    refused("empty port parameter", [update(p4r.Update.INSERT, entry(b"\x0a\x02\x00\x00", 16,
            port=b""))], "UNKNOWN", ["OUT_OF_RANGE"])
    # Longer strings whose value fits are accepted; reads give the shortest form back.
    padded = entry(b"\x00\x0a\x06\x00\x00", 16, port=b"\x00\x00\x01")
    c.eq(write_status(stub, [update(p4r.Update.INSERT, padded)], 10), ("OK", []),
         "zero-padded bytestrings that fit are accepted")
    req = p4r.ReadRequest(device_id=ARGS.device_id)
    req.entities.add().table_entry.CopyFrom(entry(b"\x0a\x06\x00\x00", 16))
    got = [e.table_entry for r in stub.Read(req, timeout=TIMEOUT) for e in r.entities]
    c.eq(len(got), 1, "the padded entry reads back by its canonical key")
    c.eq(got[0].match[0].lpm.value, b"\x0a\x06\x00\x00", "read back: the key in canonical form")
    port = [p.value for p in got[0].action.action.params if p.param_id == pid["port"]]
    c.eq(port, [b"\x01"], "read back: the parameter in canonical form")
    c.eq(write_status(stub, [update(p4r.Update.DELETE, padded)], 10), ("OK", []),
         "delete by the padded key")
    unchanged("padded entry deleted")
    # LPM: bits past the prefix must be zero; prefix length 0 must be an omitted field.
    refused("LPM value with bits past the prefix",
            [update(p4r.Update.INSERT, entry(b"\x0a\x02\x00\x01", 16))], "UNKNOWN",
            ["INVALID_ARGUMENT"])
    refused("LPM prefix length 0 given as a field",
            [update(p4r.Update.INSERT, entry(b"\x00", 0))], "UNKNOWN", ["INVALID_ARGUMENT"])
    refused("LPM prefix length 33", [update(p4r.Update.INSERT, entry(b"\x0a\x02\x00\x00", 33))],
            "UNKNOWN", ["INVALID_ARGUMENT"])

    # INSERT of an existing key, DELETE and MODIFY of a missing one.
    refused("insert of an existing entry", [update(p4r.Update.INSERT, base)], "UNKNOWN",
            ["ALREADY_EXISTS"])
    missing = entry(b"\x0a\x09\x00\x00", 16)
    refused("delete of a missing entry", [update(p4r.Update.DELETE, missing)], "UNKNOWN",
            ["NOT_FOUND"])
    refused("modify of a missing entry", [update(p4r.Update.MODIFY, missing)], "UNKNOWN",
            ["NOT_FOUND"])
    # A batch: one error per update, in order, OK for the ones that are fine (those apply).
    good = entry(b"\x0a\x05\x00\x00", 16)
    got = write_status(
        stub,
        [update(p4r.Update.DELETE, missing), update(p4r.Update.INSERT, good),
         update(p4r.Update.INSERT, base)],
        10,
    )
    c.eq(got, ("UNKNOWN", ["NOT_FOUND", "OK", "ALREADY_EXISTS"]), "batch: one error per update")
    c.eq(len(snapshot()), 2, "batch: the good update was applied")
    c.eq(write_status(stub, [update(p4r.Update.DELETE, good)], 10), ("OK", []), "undo the good one")
    unchanged("batch undone")

    # More malformed entries: a priority on a table without ternary keys, a missing action
    # parameter, an INSERT of the default entry.
    prio = entry(b"\x0a\x02\x00\x00", 16)
    prio.priority = 10
    refused("priority on an LPM-only table", [update(p4r.Update.INSERT, prio)], "UNKNOWN",
            ["INVALID_ARGUMENT"])
    short = entry(b"\x0a\x02\x00\x00", 16)
    del short.action.action.params[-1]
    refused("a missing action parameter", [update(p4r.Update.INSERT, short)], "UNKNOWN",
            ["INVALID_ARGUMENT"])
    dflt = p4r.TableEntry(table_id=table.preamble.id, is_default_action=True)
    dflt.action.CopyFrom(base.action)
    refused("INSERT of the default entry", [update(p4r.Update.INSERT, dflt)], "UNKNOWN",
            ["INVALID_ARGUMENT"])
    # The same new key twice in one batch: one applies, the other ALREADY_EXISTS (the server
    # may reorder a batch).
    twice = entry(b"\x0a\x07\x00\x00", 16)
    got = write_status(stub, [update(p4r.Update.INSERT, twice)] * 2, 10)
    c.eq((got[0], sorted(got[1])), ("UNKNOWN", ["ALREADY_EXISTS", "OK"]),
         "one key inserted twice in a batch")
    c.eq(write_status(stub, [update(p4r.Update.DELETE, twice)], 10), ("OK", []), "undo it")
    unchanged("key inserted twice, undone")
    # An LPM field may be omitted: the /0 "don't care" entry, read back without the field.
    anyk = entry(b"\x00", 0)
    del anyk.match[:]
    c.eq(write_status(stub, [update(p4r.Update.INSERT, anyk)], 10), ("OK", []),
         "an entry with the LPM field omitted (/0)")
    req = p4r.ReadRequest(device_id=ARGS.device_id)
    req.entities.add().table_entry.table_id = table.preamble.id
    got = [e.table_entry for r in stub.Read(req, timeout=TIMEOUT) for e in r.entities]
    c.eq(sorted(len(t.match) for t in got), [0, 1], "the /0 entry reads back with no match field")
    c.eq(write_status(stub, [update(p4r.Update.DELETE, anyk)], 10), ("OK", []), "delete the /0")
    unchanged("/0 entry deleted")
    # A read needs the entity set.
    c.eq(read_status(p4r.Entity()), "INVALID_ARGUMENT", "a read of an empty Entity")

    # Atomic batches: unsupported (UNIMPLEMENTED) or all-or-none.
    for mode in ("ROLLBACK_ON_ERROR", "DATAPLANE_ATOMIC"):
        req = p4r.WriteRequest(device_id=ARGS.device_id,
                               atomicity=p4r.WriteRequest.Atomicity.Value(mode))
        req.election_id.low = 10
        req.updates.extend([update(p4r.Update.INSERT, good), update(p4r.Update.INSERT, base)])
        try:
            stub.Write(req, timeout=TIMEOUT)
            got = "OK"
        except grpc.RpcError as e:
            got = e.code().name
        c.ok(got in ("UNIMPLEMENTED", "UNKNOWN"), f"{mode} batch with an error", f"got {got}")
        print(f"note {mode}: {got}", flush=True)
        unchanged(f"{mode} batch with an error")

    # Unknown device id: NOT_FOUND for the whole request.
    refused("write to an unknown device id", [update(p4r.Update.INSERT, good)], "NOT_FOUND", [],
            device_id=ARGS.device_id + 41)

    # A backup client (lower election id) is told who the primary is, and may not write.
    b = Stream(stub)
    b.arbitrate(5)
    m = b.next_arbitration()
    c.ok(m is not None, "the backup's arbitration is answered", f"stream status {b.status}")
    c.eq(name(m.arbitration.status.code), "ALREADY_EXISTS", "election id 5 is a backup")
    c.eq(m.arbitration.election_id.low, 10, "the backup is told the primary's election id")
    refused("write from a backup", [update(p4r.Update.INSERT, good)], "PERMISSION_DENIED", [],
            election=5)
    refused("write with an election id no stream holds", [update(p4r.Update.INSERT, good)],
            "PERMISSION_DENIED", [], election=7)
    refused("write without an election id", [update(p4r.Update.INSERT, good)],
            "PERMISSION_DENIED", [], election=0)
    cfg.election_id.low = 5
    try:
        stub.SetForwardingPipelineConfig(cfg, timeout=TIMEOUT)
        got = "OK"
    except grpc.RpcError as e:
        got = e.code().name
    c.eq(got, "PERMISSION_DENIED", "SetForwardingPipelineConfig from a backup")
    unchanged("pipeline push from a backup")

    # A second client with the primary's election id: INVALID_ARGUMENT, its stream ends.
    d = Stream(stub)
    d.arbitrate(10)
    m = d.next(TIMEOUT)
    while m is not None and not m.HasField("arbitration"):
        m = d.next(TIMEOUT)
    c.ok(m is None, "a duplicate election id gets no arbitration answer",
         f"got {m}" if m is not None else "")
    c.eq(d.status.name if d.status else None, "INVALID_ARGUMENT",
         "a duplicate election id ends the stream with INVALID_ARGUMENT")
    c.eq(write_status(stub, [update(p4r.Update.INSERT, good)], 10), ("OK", []),
         "the first primary is still primary")
    c.eq(write_status(stub, [update(p4r.Update.DELETE, good)], 10), ("OK", []), "and deletes")
    unchanged("duplicate election id")

    # A higher election id takes over; the old primary is told, and may no longer write.
    e = Stream(stub)
    e.arbitrate(20)
    m = e.next_arbitration()
    c.eq(name(m.arbitration.status.code) if m else None, "OK", "election id 20 becomes primary")
    m = a.next_arbitration()
    c.ok(m is not None, "the old primary hears of the new one")
    c.eq((name(m.arbitration.status.code), m.arbitration.election_id.low), ("ALREADY_EXISTS", 20),
         "the old primary is now a backup of 20")
    refused("write from the old primary", [update(p4r.Update.INSERT, good)], "PERMISSION_DENIED",
            [], election=10)
    c.eq(write_status(stub, [update(p4r.Update.DELETE, base)], 20), ("OK", []),
         "the new primary writes")
    c.eq(snapshot(), [], "the new primary's delete took effect")

    externs(c, stub)
    for s in (a, b, d, e):
        s.close()
    channel.close()


def externs(c, stub):
    """features.p4, pushed by the primary (election id 20): the spec's rules for counters,
    meters, action profiles, digests and ternary keys."""
    info = p4info_pb2.P4Info()
    with open(ARGS.features_p4info) as f:
        text_format.Merge(f.read(), info)
    router_info = p4info_pb2.P4Info()
    with open(ARGS.p4info) as f:
        text_format.Merge(f.read(), router_info)
    with open(ARGS.features_p4, "rb") as f:
        features_src = f.read()
    with open(ARGS.program, "rb") as f:
        router_src = f.read()
    Set = p4r.SetForwardingPipelineConfigRequest

    def set_config(action, p4info=None, src=None, cookie=None):
        req = Set(device_id=ARGS.device_id, action=action)
        req.election_id.low = 20
        if p4info is not None:
            req.config.p4info.CopyFrom(p4info)
            req.config.p4_device_config = src
            if cookie is not None:
                req.config.cookie.cookie = cookie
        try:
            stub.SetForwardingPipelineConfig(req, timeout=TIMEOUT)
            return "OK"
        except grpc.RpcError as e:
            return e.code().name

    def get_config(kind):
        req = p4r.GetForwardingPipelineConfigRequest(device_id=ARGS.device_id, response_type=kind)
        return stub.GetForwardingPipelineConfig(req, timeout=TIMEOUT).config

    def router_entries():
        req = p4r.ReadRequest(device_id=ARGS.device_id)
        req.entities.add().table_entry.SetInParent()
        return [e for r in stub.Read(req, timeout=TIMEOUT) for e in r.entities]

    G = p4r.GetForwardingPipelineConfigRequest
    got = get_config(G.ALL)
    c.eq((got.p4_device_config, [t.preamble.id for t in got.p4info.tables]),
         (router_src, [t.preamble.id for t in router_info.tables]),
         "GetForwardingPipelineConfig: the pushed program and P4Info")
    # A program that does not compile, or a P4Info that is not the program's: refused, and the
    # pipeline and its entries stay.
    route = p4r.Update(type=p4r.Update.INSERT)
    te = route.entity.table_entry
    te.table_id = router_info.tables[0].preamble.id
    te.match.add(field_id=1).lpm.value = b"\x0a\x0a\x00\x00"
    te.match[0].lpm.prefix_len = 16
    te.action.action.action_id = [a.preamble.id for a in router_info.actions
                                  if a.preamble.name.endswith("drop")][0]
    c.eq(write_status(stub, [route], 20), ("OK", []), "an entry to keep")
    c.eq(set_config(Set.VERIFY_AND_COMMIT, router_info, b"control nope {"), "INVALID_ARGUMENT",
         "a device config that does not compile")
    c.eq(set_config(Set.VERIFY_AND_COMMIT, info, router_src), "INVALID_ARGUMENT",
         "a P4Info that is not the program's")
    c.eq(set_config(Set.VERIFY, router_info, b""), "INVALID_ARGUMENT", "VERIFY of an empty config")
    c.eq(len(router_entries()), 1, "refused configs leave the pipeline and its entry")
    # RECONCILE_AND_COMMIT of the same program keeps the forwarding state.
    c.eq(set_config(Set.RECONCILE_AND_COMMIT, router_info, router_src, cookie=7), "OK",
         "RECONCILE_AND_COMMIT of the same program")
    c.eq(len(router_entries()), 1, "... keeps the entry")
    c.eq(get_config(G.COOKIE_ONLY).cookie.cookie, 7, "... and takes the new cookie")
    # VERIFY_AND_SAVE then COMMIT: the saved config replaces the pipeline at COMMIT.
    # Writes between them go to the saved config (the spec: COMMIT replays them).
    c.eq(set_config(Set.VERIFY_AND_SAVE, info, features_src, cookie=42), "OK", "VERIFY_AND_SAVE")
    (l2,) = [x for x in info.tables if x.preamble.name == "Ingress.l2"]
    (fwd,) = [x for x in info.actions if x.preamble.name == "Ingress.l2_fwd"]
    saved = p4r.Update(type=p4r.Update.INSERT)
    ste = saved.entity.table_entry
    ste.table_id = l2.preamble.id
    ste.match.add(field_id=1).exact.value = b"\x02\x00\x00\x00\x00\x0f"
    ste.action.action.action_id = fwd.preamble.id
    ste.action.action.params.add(param_id=fwd.params[0].id, value=b"\x01")
    c.eq(write_status(stub, [saved], 20), ("OK", []), "a write for the saved pipeline")
    c.eq(set_config(Set.COMMIT), "OK", "COMMIT")
    got = get_config(G.P4INFO_AND_COOKIE)
    c.eq(([t.preamble.name for t in got.p4info.tables], got.cookie.cookie),
         ([t.preamble.name for t in info.tables], 42), "the committed pipeline is features.p4")
    got = router_entries()
    c.eq([e.table_entry.table_id for e in got], [l2.preamble.id],
         "the committed pipeline has the write made after VERIFY_AND_SAVE, nothing else")
    saved.type = p4r.Update.DELETE
    c.eq(write_status(stub, [saved], 20), ("OK", []), "delete it")
    got = set_config(Set.COMMIT)
    c.ok(got != "OK", "COMMIT with nothing saved is refused", got)

    ids = {}
    for kind in ("tables", "actions", "counters", "meters", "direct_counters", "direct_meters",
                 "action_profiles", "digests", "registers"):
        for o in getattr(info, kind):
            ids[o.preamble.name] = o.preamble.id
    t = {x.preamble.name: x for x in info.tables}
    acts = {x.preamble.name: x for x in info.actions}

    def write(*updates):
        return write_status(stub, list(updates), 20)

    def upd(kind, **entity):
        u = p4r.Update(type=kind)
        for k, v in entity.items():
            getattr(u.entity, k).CopyFrom(v)
        return u

    def read(entity):
        req = p4r.ReadRequest(device_id=ARGS.device_id)
        req.entities.append(entity)
        try:
            return "OK", [e for r in stub.Read(req, timeout=TIMEOUT) for e in r.entities]
        except grpc.RpcError as e:
            return e.code().name, []

    def action(name, **params):
        a = p4r.Action(action_id=ids[name])
        pid = {p.name: p.id for p in acts[name].params}
        for k, v in params.items():
            a.params.add(param_id=pid[k], value=v)
        return a

    def l2_entry(dst, port=b"\x00"):
        te = p4r.TableEntry(table_id=ids["Ingress.l2"])
        te.match.add(field_id=1).exact.value = dst
        te.action.action.CopyFrom(action("Ingress.l2_fwd", port=port))
        return te

    def counter(index=None, packets=None):
        ce = p4r.CounterEntry(counter_id=ids["Ingress.ingress_ctr"])
        if index is not None:
            ce.index.index = index
        if packets is not None:
            ce.data.packet_count = packets
            ce.data.byte_count = packets * 100
        return ce

    U = p4r.Update
    # Indirect counters: MODIFY only; index checks; no index sets them all; no data: unchanged.
    c.eq(write(upd(U.INSERT, counter_entry=counter(1, 5))), ("UNKNOWN", ["INVALID_ARGUMENT"]),
         "counter INSERT")
    c.eq(write(upd(U.DELETE, counter_entry=counter(1))), ("UNKNOWN", ["INVALID_ARGUMENT"]),
         "counter DELETE")
    c.eq(write(upd(U.MODIFY, counter_entry=counter(-1, 5))), ("UNKNOWN", ["INVALID_ARGUMENT"]),
         "counter MODIFY at a negative index")
    c.eq(write(upd(U.MODIFY, counter_entry=counter(512, 5))), ("UNKNOWN", ["OUT_OF_RANGE"]),
         "counter MODIFY past the array")
    c.eq(write(upd(U.MODIFY, counter_entry=counter(None, 9))), ("OK", []),
         "counter MODIFY without an index")
    got = sorted({e.counter_entry.data.packet_count for e in read(p4r.Entity(counter_entry=counter()))[1]})
    c.eq(got, [9], "... sets every index")
    c.eq(write(upd(U.MODIFY, counter_entry=counter(3))), ("OK", []), "counter MODIFY without data")
    (e,) = read(p4r.Entity(counter_entry=counter(3)))[1]
    c.eq(e.counter_entry.data.packet_count, 9, "... leaves it unchanged")
    c.eq(read(p4r.Entity(counter_entry=counter(512)))[0], "OUT_OF_RANGE",
         "counter read past the array")

    # Direct counters and meters: TableEntry counter_data on INSERT, MODIFY keeps the counter
    # and resets the meter; DirectCounterEntry/DirectMeterEntry MODIFY only, NOT_FOUND for a
    # missing entry.
    te = l2_entry(b"\x02\x00\x00\x00\x00\x01")
    te.counter_data.packet_count = 4
    te.counter_data.byte_count = 400
    te.meter_config.CopyFrom(p4r.MeterConfig(cir=10, cburst=1, pir=20, pburst=2))
    c.eq(write(upd(U.INSERT, table_entry=te)), ("OK", []), "l2 INSERT with counter_data, meter_config")
    q = l2_entry(b"\x02\x00\x00\x00\x00\x01")
    q.ClearField("action")
    q.counter_data.SetInParent()
    q.meter_config.SetInParent()
    (e,) = read(p4r.Entity(table_entry=q))[1]
    c.eq((e.table_entry.counter_data.packet_count, e.table_entry.meter_config.pir), (4, 20),
         "... the initial counter and meter read back with the entry")
    c.eq(write(upd(U.MODIFY, table_entry=l2_entry(b"\x02\x00\x00\x00\x00\x01", b"\x01"))),
         ("OK", []), "l2 MODIFY without counter_data and meter_config")
    (e,) = read(p4r.Entity(table_entry=q))[1]
    c.eq(e.table_entry.counter_data.packet_count, 4, "... keeps the direct counter")
    c.ok(not e.table_entry.HasField("meter_config"), "... resets the direct meter (unset on read)",
         str(e.table_entry.meter_config))
    dce = p4r.DirectCounterEntry(table_entry=l2_entry(b"\x02\x00\x00\x00\x00\x01"))
    dce.data.packet_count = 1
    c.eq(write(upd(U.INSERT, direct_counter_entry=dce)), ("UNKNOWN", ["INVALID_ARGUMENT"]),
         "DirectCounterEntry INSERT")
    missing = p4r.DirectCounterEntry(table_entry=l2_entry(b"\x02\x00\x00\x00\x00\x77"))
    missing.data.packet_count = 1
    c.eq(write(upd(U.MODIFY, direct_counter_entry=missing)), ("UNKNOWN", ["NOT_FOUND"]),
         "DirectCounterEntry MODIFY of a missing entry")
    c.eq(read(p4r.Entity(direct_counter_entry=p4r.DirectCounterEntry(
        table_entry=l2_entry(b"\x02\x00\x00\x00\x00\x77"))))[0], "NOT_FOUND",
         "DirectCounterEntry read of a missing entry")
    dme = p4r.DirectMeterEntry(table_entry=l2_entry(b"\x02\x00\x00\x00\x00\x01"))
    dme.config.CopyFrom(p4r.MeterConfig(cir=10, cburst=1, pir=20, pburst=2))
    c.eq(write(upd(U.DELETE, direct_meter_entry=dme)), ("UNKNOWN", ["INVALID_ARGUMENT"]),
         "DirectMeterEntry DELETE")
    c.eq(write(upd(U.MODIFY, direct_meter_entry=dme)), ("OK", []), "DirectMeterEntry MODIFY")
    dme.ClearField("config")
    c.eq(write(upd(U.MODIFY, direct_meter_entry=dme)), ("OK", []),
         "DirectMeterEntry MODIFY without config")
    (e,) = read(p4r.Entity(direct_meter_entry=p4r.DirectMeterEntry(
        table_entry=l2_entry(b"\x02\x00\x00\x00\x00\x01"))))[1]
    c.ok(not e.direct_meter_entry.HasField("config"), "... resets it to the default (unset)",
         str(e.direct_meter_entry.config))

    # Indirect meters: a trTCM config takes no eburst; an unconfigured meter reads unset.
    def meter(index, **cfg):
        me = p4r.MeterEntry(meter_id=ids["Ingress.port_meter"])
        me.index.index = index
        if cfg:
            me.config.CopyFrom(p4r.MeterConfig(**cfg))
        return me

    # (snic's p4runtime.proto has no MeterConfig.eburst: the field is dropped unseen.)
    got = write(upd(U.MODIFY, meter_entry=meter(2, cir=1, cburst=1, pir=2, pburst=2, eburst=3)))
    c.gap(got == ("UNKNOWN", ["INVALID_ARGUMENT"]), "trTCM meter config with eburst refused",
          f"got {got!r}")
    (e,) = read(p4r.Entity(meter_entry=meter(4)))[1]
    c.ok(not e.meter_entry.HasField("config"), "an unconfigured meter reads without config",
         str(e.meter_entry.config))

    # Action profile members, and what tables may name.
    def member(mid, port=None):
        m = p4r.ActionProfileMember(action_profile_id=ids["Ingress.ecmp_ap"], member_id=mid)
        if port is not None:
            m.action.CopyFrom(action("Ingress.set_port", port=port))
        return m

    c.eq(write(upd(U.INSERT, action_profile_member=member(1))), ("UNKNOWN", ["INVALID_ARGUMENT"]),
         "member INSERT without an action")
    c.eq(write(upd(U.INSERT, action_profile_member=member(1, b"\x00"))), ("OK", []), "member INSERT")
    c.eq(write(upd(U.INSERT, action_profile_member=member(1, b"\x01"))),
         ("UNKNOWN", ["ALREADY_EXISTS"]), "member INSERT of an existing id")
    c.eq(write(upd(U.MODIFY, action_profile_member=member(2, b"\x01"))),
         ("UNKNOWN", ["NOT_FOUND"]), "member MODIFY of a missing id")
    c.eq(write(upd(U.DELETE, action_profile_member=member(2))), ("UNKNOWN", ["NOT_FOUND"]),
         "member DELETE of a missing id")
    ecmp = p4r.TableEntry(table_id=ids["Ingress.ecmp"])
    ecmp.match.add(field_id=1).exact.value = b"\x02\x00\x00\x00\x00\x09"
    ecmp.action.action.CopyFrom(action("Ingress.set_port", port=b"\x00"))
    c.eq(write(upd(U.INSERT, table_entry=ecmp)), ("UNKNOWN", ["INVALID_ARGUMENT"]),
         "an indirect table's entry with a direct action")
    ecmp.action.action_profile_member_id = 7
    got = write(upd(U.INSERT, table_entry=ecmp))
    c.ok(got in (("UNKNOWN", ["NOT_FOUND"]), ("UNKNOWN", ["INVALID_ARGUMENT"])),
         "an indirect table's entry naming a missing member", repr(got))
    print(f"note entry naming a missing member: {got!r}", flush=True)
    direct = l2_entry(b"\x02\x00\x00\x00\x00\x05")
    direct.action.action_profile_member_id = 1
    c.eq(write(upd(U.INSERT, table_entry=direct)), ("UNKNOWN", ["INVALID_ARGUMENT"]),
         "a direct table's entry naming a member")

    # Ternary keys: a priority is needed; value bits outside the mask; an all-zero mask.
    def acl(value, mask, prio):
        te = p4r.TableEntry(table_id=ids["Ingress.acl"], priority=prio)
        m = te.match.add(field_id=1)
        m.ternary.value = value
        m.ternary.mask = mask
        te.action.action.CopyFrom(action("Ingress.drop"))
        return te

    c.eq(write(upd(U.INSERT, table_entry=acl(b"\x08\x00", b"\xff\xff", 0))),
         ("UNKNOWN", ["INVALID_ARGUMENT"]), "ternary entry with priority 0")
    c.eq(write(upd(U.INSERT, table_entry=acl(b"\x08\x01", b"\xff\x00", 5))),
         ("UNKNOWN", ["INVALID_ARGUMENT"]), "ternary value bits outside the mask")
    c.eq(write(upd(U.INSERT, table_entry=acl(b"\x00", b"\x00", 5))),
         ("UNKNOWN", ["INVALID_ARGUMENT"]), "ternary all-zero mask (must be omitted)")
    c.eq(write(upd(U.INSERT, table_entry=acl(b"\x08\x00", b"\xff\xff", 5))), ("OK", []),
         "a good ternary entry")
    c.eq(write(upd(U.INSERT, table_entry=acl(b"\x08\x00", b"\xff\xff", 6))), ("OK", []),
         "the same key at another priority is another entry")
    got = read(p4r.Entity(table_entry=p4r.TableEntry(table_id=ids["Ingress.acl"])))[1]
    c.eq(sorted(e.table_entry.priority for e in got), [5, 6], "both read back")

    # Digest entries.
    d = p4r.DigestEntry(digest_id=ids[info.digests[0].preamble.name])
    d.config.max_list_size = 1
    c.eq(write(upd(U.MODIFY, digest_entry=d)), ("UNKNOWN", ["NOT_FOUND"]),
         "DigestEntry MODIFY before INSERT")
    c.eq(write(upd(U.INSERT, digest_entry=d)), ("OK", []), "DigestEntry INSERT")
    c.eq(write(upd(U.INSERT, digest_entry=d)), ("UNKNOWN", ["ALREADY_EXISTS"]),
         "DigestEntry INSERT again")
    c.eq(write(upd(U.DELETE, digest_entry=d)), ("OK", []), "DigestEntry DELETE")
    c.eq(write(upd(U.DELETE, digest_entry=d)), ("UNKNOWN", ["NOT_FOUND"]),
         "DigestEntry DELETE again")


if __name__ == "__main__":
    run_main("bad_requests", main)
