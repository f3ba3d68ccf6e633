# PTF base test for snic's P4Runtime server: the same pattern as a BMv2 PTF test.
#
# Each test (setUp) connects with gRPC to the P4Runtime server, becomes the primary client of
# the device (StreamChannel, MasterArbitrationUpdate with an election id), pushes the P4
# program (SetForwardingPipelineConfig, VERIFY_AND_COMMIT: P4Info in protobuf text format +
# the P4 source as p4_device_config, which is what snic compiles), so every test starts from
# an empty pipeline. Helpers write table entries by name (looked up in the P4Info) and read
# them back. tearDown closes the stream and the channel.
#
# Test parameters (ptf --test-params "k='v';k2='v2'", Python literals):
#   grpcaddr   the server, host:port (default '127.0.0.1:9559')
#   device_id  the P4Runtime device id (default 1)
#   program    the P4 source; default: <PROGRAM_DIR>/<PROGRAM>.p4 of the test class
#              (examples/p4/ unless the class says otherwise)
#   p4info     its P4Info, protobuf text format (`snic p4 info PROG.p4 --p4info OUT.txt`);
#              default: <p4infodir>/<PROGRAM>.p4info.txt
#   p4infodir  where the default P4Info files are (default: the current directory)
#   election   the election id (low 64 bits) of the primary client (default 10; tests
#              connect backups with lower ids). When the device has seen a higher one and
#              has no primary, the test takes that one instead.
#   p4runtime  False: no P4Runtime at all, the program is already in snic (`--stage
#              p4:PROG.p4`); tests that write entries are skipped. To tell data-plane
#              problems from control-plane ones. (default True)
#
# A run of ptf serves one program: tests whose class's PROGRAM is not the stem of the
# `program` parameter are skipped (select the module on the ptf command line instead).

import os

# The p4runtime package's stubs need protobuf's pure-Python backend (scripts/ptf-venv.sh).
os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")

import ipaddress  # noqa: E402
import logging  # noqa: E402
import queue  # noqa: E402
import threading  # noqa: E402

import grpc  # noqa: E402
import ptf  # noqa: E402
from google.protobuf import text_format  # noqa: E402
from google.rpc import code_pb2, status_pb2  # noqa: E402
from p4.config.v1 import p4info_pb2  # noqa: E402
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc  # noqa: E402
from ptf import testutils  # noqa: E402
from ptf.base_tests import BaseTest  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RPC_TIMEOUT = 10.0  # seconds, every unary RPC
STREAM_TIMEOUT = 10.0  # seconds, waiting for a stream message


def encode(value, bitwidth, canonical=True):
    """A P4Runtime binary string for `value` of `bitwidth` bits.

    `value` is an int, bytes, an IPv4/IPv6 address string or a MAC string (aa:bb:...).
    canonical=True gives the shortest form (leading zero bytes stripped, at least one byte),
    the form P4Runtime 1.3 asks clients to send; False pads to the full width, which a server
    must accept too.
    """
    nbytes = (bitwidth + 7) // 8
    if isinstance(value, (bytes, bytearray)):
        value = int.from_bytes(value, "big")
    elif isinstance(value, str):
        if value.count(":") == 5 and len(value) == 17:
            value = int(value.replace(":", ""), 16)
        else:
            value = int(ipaddress.ip_address(value))
    if value < 0 or value >> bitwidth:
        raise ValueError(f"{value:#x} does not fit in {bitwidth} bits")
    raw = value.to_bytes(nbytes, "big")
    if canonical:
        raw = raw.lstrip(b"\x00") or b"\x00"
    return raw


def decode(raw):
    return int.from_bytes(raw, "big")


class P4Info:
    """Name and id look-ups in a P4Info message. A name is the fully qualified one
    (MyIngress.ipv4_lpm) or the alias (ipv4_lpm)."""

    def __init__(self, msg):
        self.msg = msg

    @staticmethod
    def _find(objs, name, what):
        for o in objs:
            if name in (o.preamble.name, o.preamble.alias):
                return o
        names = [o.preamble.name for o in objs]
        raise KeyError(f"no {what} named {name!r} in the P4Info (there are {names})")

    def table(self, name):
        return self._find(self.msg.tables, name, "table")

    def action(self, name):
        return self._find(self.msg.actions, name, "action")

    def table_by_id(self, tid):
        for t in self.msg.tables:
            if t.preamble.id == tid:
                return t
        raise KeyError(f"no table with id {tid:#x}")

    def action_by_id(self, aid):
        for a in self.msg.actions:
            if a.preamble.id == aid:
                return a
        raise KeyError(f"no action with id {aid:#x}")

    def packet_metadata(self, name):
        """The controller_packet_metadata "packet_in" or "packet_out"."""
        return self._find(self.msg.controller_packet_metadata, name, "controller packet")

    @staticmethod
    def match_field(table, name):
        for mf in table.match_fields:
            if mf.name == name:
                return mf
        names = [mf.name for mf in table.match_fields]
        raise KeyError(f"table {table.preamble.name} has no match field {name!r} ({names})")

    @staticmethod
    def param(action, name):
        for p in action.params:
            if p.name == name:
                return p
        names = [p.name for p in action.params]
        raise KeyError(f"action {action.preamble.name} has no parameter {name!r} ({names})")


class WriteError(Exception):
    """A failed Write: the gRPC code and, per update, the p4.v1.Error details."""

    def __init__(self, rpc_error):
        self.code = rpc_error.code()
        self.details = rpc_error.details()
        self.errors = []  # (update index, p4.v1.Error) of the updates that failed
        for key, value in rpc_error.trailing_metadata() or ():
            if key == "grpc-status-details-bin":
                st = status_pb2.Status()
                st.ParseFromString(value)
                for i, any_msg in enumerate(st.details):
                    err = p4runtime_pb2.Error()
                    if any_msg.Unpack(err) and err.canonical_code != code_pb2.OK:
                        self.errors.append((i, err))
        super().__init__(self.__str__())

    def __str__(self):
        per = "; ".join(
            f"update {i}: {code_pb2.Code.Name(e.canonical_code)} {e.message}"
            for i, e in self.errors
        )
        return f"Write failed: {self.code.name} {self.details!r}" + (f" [{per}]" if per else "")

    def update_codes(self):
        """The canonical codes (google.rpc.Code names) of the failed updates."""
        return [code_pb2.Code.Name(e.canonical_code) for _, e in self.errors]


class Client:
    """One P4Runtime client: a channel, a stream, an election id."""

    def __init__(self, addr, device_id, election_low, election_high=0):
        self.addr = addr
        self.device_id = device_id
        self.election_id = p4runtime_pb2.Uint128(high=election_high, low=election_low)
        # Straight to the server, whatever http_proxy says.
        self.channel = grpc.insecure_channel(addr, options=[("grpc.enable_http_proxy", 0)])
        grpc.channel_ready_future(self.channel).result(timeout=RPC_TIMEOUT)
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self._requests = queue.Queue()
        self.responses = queue.Queue()
        self._stream = self.stub.StreamChannel(self._request_iter())
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _request_iter(self):
        while True:
            req = self._requests.get()
            if req is None:
                return
            yield req

    def _read(self):
        try:
            for resp in self._stream:
                self.responses.put(resp)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                self.responses.put(e)
        self.responses.put(None)

    def arbitrate(self, election_low=None):
        """Send MasterArbitrationUpdate (with a new election id when given); return the
        server's arbitration answer (its status.code is OK for the primary, ALREADY_EXISTS
        for a backup)."""
        if election_low is not None:
            self.election_id.low = election_low
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = self.device_id
        req.arbitration.election_id.CopyFrom(self.election_id)
        self._requests.put(req)
        return self.next_message("arbitration")

    def send(self, req):
        """Send a StreamMessageRequest."""
        self._requests.put(req)

    def next_message(self, kind, timeout=STREAM_TIMEOUT):
        """The next stream message that has field `kind` set (others are logged, dropped)."""
        while True:
            try:
                msg = self.responses.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no {kind} message on the stream in {timeout} s")
            if msg is None:
                raise AssertionError(f"the stream ended while waiting for {kind}")
            if isinstance(msg, Exception):
                raise AssertionError(f"the stream failed while waiting for {kind}: {msg}")
            if msg.WhichOneof("update") == kind:
                return msg
            logging.info("stream message ignored while waiting for %s: %s", kind, msg)

    def close(self):
        self._requests.put(None)
        try:
            self._stream.cancel()
        except Exception:  # noqa: BLE001 - closing whatever state the stream is in
            pass
        self.channel.close()


class P4RuntimeTest(BaseTest):
    """Base of the PTF tests of a P4 program on snic through P4Runtime."""

    PROGRAM = None  # the stem of examples/p4/NAME.p4, set by each test class
    PROGRAM_DIR = os.path.join(REPO, "examples", "p4")  # where PROGRAM.p4 is
    NEEDS_ENTRIES = True  # False: runs on the program alone (p4runtime=False works)

    def setUp(self):
        BaseTest.setUp(self)
        self.dataplane = ptf.dataplane_instance
        params = testutils.test_params_get()
        program = params.get("program") or os.path.join(self.PROGRAM_DIR, f"{self.PROGRAM}.p4")
        stem = os.path.splitext(os.path.basename(program))[0]
        if self.PROGRAM and stem != self.PROGRAM:
            self.skipTest(f"this run is for {stem}.p4, the test for {self.PROGRAM}.p4")
        p4info_path = params.get("p4info") or os.path.join(
            params.get("p4infodir", "."), f"{stem}.p4info.txt"
        )
        self.program_path = program
        self.device_id = int(params.get("device_id", 1))
        self.grpc_addr = params.get("grpcaddr", "127.0.0.1:9559")
        self.election = int(params.get("election", 10))
        self.clients = []
        self.client = None
        # Closed however the test ends (a failing setUp skips tearDown, not cleanups).
        self.addCleanup(self._close_clients)
        if not params.get("p4runtime", True):
            if self.NEEDS_ENTRIES:
                self.skipTest("writes table entries: needs P4Runtime (p4runtime=False)")
            self.dataplane.flush()
            return
        with open(p4info_path) as f:
            self.p4info = P4Info(text_format.Parse(f.read(), p4info_pb2.P4Info()))
        with open(program, "rb") as f:
            self.p4_source = f.read()
        self.client = self.connect(self.election)
        arb = self.client.arbitrate()
        seen = arb.arbitration.election_id
        if arb.arbitration.status.code == code_pb2.NOT_FOUND and (seen.high, seen.low) > (
            0,
            self.election,
        ):
            # No primary, but the device saw a higher election id before (a test took over
            # with one): P4Runtime makes primary only a client at least that high (5.3).
            self.assertEqual(seen.high, 0, arb)
            self.election = seen.low
            arb = self.client.arbitrate(self.election)
        self.assertEqual(
            arb.arbitration.status.code,
            code_pb2.OK,
            f"not primary with election id {self.election}: {arb}",
        )
        self.set_pipeline()
        # Nothing from before the pipeline counts.
        self.dataplane.flush()

    def _close_clients(self):
        for c in self.clients:
            c.close()
        self.clients = []

    # --- connection and pipeline ---

    def connect(self, election_low, election_high=0):
        c = Client(self.grpc_addr, self.device_id, election_low, election_high)
        self.clients.append(c)
        return c

    @property
    def stub(self):
        return self.client.stub

    def set_pipeline(self, action=None, client=None):
        c = client or self.client
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest()
        req.device_id = self.device_id
        req.election_id.CopyFrom(c.election_id)
        req.action = (
            action
            if action is not None
            else p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
        )
        req.config.p4info.CopyFrom(self.p4info.msg)
        req.config.p4_device_config = self.p4_source
        req.config.cookie.cookie = 0x5111C
        return c.stub.SetForwardingPipelineConfig(req, timeout=RPC_TIMEOUT)

    def get_pipeline(self, response_type=None):
        req = p4runtime_pb2.GetForwardingPipelineConfigRequest(device_id=self.device_id)
        req.response_type = (
            response_type
            if response_type is not None
            else p4runtime_pb2.GetForwardingPipelineConfigRequest.ALL
        )
        return self.stub.GetForwardingPipelineConfig(req, timeout=RPC_TIMEOUT)

    # --- packet-in / packet-out ---

    def packet_out(self, payload, client=None, **metadata):
        """Send a PacketOut: `payload` with the packet_out metadata by name (fields not
        given are 0)."""
        cpm = self.p4info.packet_metadata("packet_out")
        req = p4runtime_pb2.StreamMessageRequest()
        req.packet.payload = bytes(payload)
        for m in cpm.metadata:
            value = metadata.pop(m.name, 0)
            req.packet.metadata.add(metadata_id=m.id, value=encode(value, m.bitwidth))
        if metadata:
            raise KeyError(f"packet_out has no metadata {sorted(metadata)}")
        (client or self.client).send(req)

    def packet_in(self, client=None, timeout=STREAM_TIMEOUT):
        """The next PacketIn: (payload bytes, {metadata name: int})."""
        msg = (client or self.client).next_message("packet", timeout)
        cpm = self.p4info.packet_metadata("packet_in")
        names = {m.id: m.name for m in cpm.metadata}
        meta = {names.get(m.metadata_id, m.metadata_id): decode(m.value) for m in msg.packet.metadata}
        return msg.packet.payload, meta

    # --- table entries ---

    def table_entry(self, table, match=None, action=None, params=None, priority=None,
                    default=False, canonical=True):
        """A TableEntry by names. `match` maps a match-field name to:
        exact: a value; lpm: (value, prefix length); ternary: (value, mask);
        range: (low, high); optional: a value. Values: see encode(). `params` maps the
        action's parameter names to values."""
        t = self.p4info.table(table)
        e = p4runtime_pb2.TableEntry(table_id=t.preamble.id)
        MF = p4info_pb2.MatchField
        for name, v in (match or {}).items():
            mf = P4Info.match_field(t, name)
            fm = e.match.add(field_id=mf.id)
            bw = mf.bitwidth
            if mf.match_type == MF.EXACT:
                fm.exact.value = encode(v, bw, canonical)
            elif mf.match_type == MF.LPM:
                fm.lpm.value = encode(v[0], bw, canonical)
                fm.lpm.prefix_len = v[1]
            elif mf.match_type == MF.TERNARY:
                fm.ternary.value = encode(v[0], bw, canonical)
                fm.ternary.mask = encode(v[1], bw, canonical)
            elif mf.match_type == MF.RANGE:
                fm.range.low = encode(v[0], bw, canonical)
                fm.range.high = encode(v[1], bw, canonical)
            elif mf.match_type == MF.OPTIONAL:
                fm.optional.value = encode(v, bw, canonical)
            else:
                raise ValueError(f"match type {mf.match_type} of {name} is not supported here")
        if action is not None:
            a = self.p4info.action(action)
            e.action.action.action_id = a.preamble.id
            for pname, v in (params or {}).items():
                p = P4Info.param(a, pname)
                e.action.action.params.add(param_id=p.id, value=encode(v, p.bitwidth, canonical))
        if priority is not None:
            e.priority = priority
        if default:
            e.is_default_action = True
        return e

    def write(self, updates, client=None):
        """Write updates [(Update.Type, TableEntry, DigestEntry or Entity)]; raise WriteError
        on failure."""
        c = client or self.client
        req = p4runtime_pb2.WriteRequest(device_id=self.device_id)
        req.election_id.CopyFrom(c.election_id)
        req.atomicity = p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR
        for typ, entry in updates:
            u = req.updates.add(type=typ)
            if isinstance(entry, p4runtime_pb2.Entity):
                u.entity.CopyFrom(entry)
            elif isinstance(entry, p4runtime_pb2.DigestEntry):
                u.entity.digest_entry.CopyFrom(entry)
            else:
                u.entity.table_entry.CopyFrom(entry)
        try:
            return c.stub.Write(req, timeout=RPC_TIMEOUT)
        except grpc.RpcError as e:
            raise WriteError(e) from None

    def insert(self, table, match, action, params=None, **kw):
        e = self.table_entry(table, match, action, params, **kw)
        self.write([(p4runtime_pb2.Update.INSERT, e)])
        return e

    def modify(self, table, match, action, params=None, **kw):
        e = self.table_entry(table, match, action, params, **kw)
        self.write([(p4runtime_pb2.Update.MODIFY, e)])
        return e

    def delete(self, table, match, **kw):
        e = self.table_entry(table, match, **kw)
        self.write([(p4runtime_pb2.Update.DELETE, e)])
        return e

    def set_default(self, table, action, params=None):
        """Change the table's default action (MODIFY of the default entry)."""
        e = self.table_entry(table, None, action, params, default=True)
        self.write([(p4runtime_pb2.Update.MODIFY, e)])
        return e

    def read_entries(self, table=None, default=False):
        """Every TableEntry of `table` (all tables when None) that a Read returns."""
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id)
        e = req.entities.add().table_entry
        e.SetInParent()  # an empty TableEntry (all tables) is still a table entry
        if table is not None:
            e.table_id = self.p4info.table(table).preamble.id
        if default:
            e.is_default_action = True
        out = []
        for resp in self.stub.Read(req, timeout=RPC_TIMEOUT):
            out.extend(ent.table_entry for ent in resp.entities)
        return out

    def assert_write_fails(self, code, updates, client=None):
        """The Write is refused with gRPC status `code`, or with an update error of
        canonical code `code` (P4Runtime reports batch errors as UNKNOWN + per-update
        codes)."""
        with self.assertRaises(WriteError) as cm:
            self.write(updates, client)
        err = cm.exception
        ok = err.code.name == code or code in err.update_codes()
        self.assertTrue(ok, f"expected {code}, got {err}")
        return err
