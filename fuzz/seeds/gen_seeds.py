#!/usr/bin/env python3
"""Regenerate the seed inputs of the fuzz targets other than stack_parse.

Run from fuzz/: python3 seeds/gen_seeds.py. Needs scapy. The layout of each target's input is
described at the top of its fuzz_targets/TARGET.rs; the `stack_parse` seeds are reused as frames.
"""

import os
import struct

from scapy.all import IP, TCP, UDP, Ether, IPv6, Dot1Q, Raw, wrpcap
from scapy.utils import PcapNgWriter

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def frame(name):
    with open(os.path.join(HERE, "stack_parse", name), "rb") as f:
        return f.read()


MAC = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
TCP4 = Ether(**MAC) / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(
    sport=40000, dport=5201, seq=1000, flags="PA", options=[("NOP", None), ("NOP", None),
                                                            ("Timestamp", (1, 2))])
TCP6 = Ether(**MAC) / IPv6(src="fd00::1", dst="fd00::2") / TCP(sport=40000, dport=5201,
                                                              flags="FPA")
UDP4 = Ether(**MAC) / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=4000, dport=4001)


def vnet(flags, gso_type, hdr_len, gso_size, csum_start, csum_offset):
    return struct.pack("<BBHHHH", flags, gso_type, hdr_len, gso_size, csum_start, csum_offset)


# --- vnet_hdr: 10-byte virtio-net header, then the frame ---
t4 = bytes(TCP4 / Raw(b"x" * 100))
cwr = bytearray(t4)
cwr[34 + 13] |= 0x80
put("vnet_hdr", "tcpv4_gso", vnet(1, 1, 66, 1448, 34, 16) + t4)
put("vnet_hdr", "tcpv4_ecn_cwr", vnet(1, 0x81, 66, 1448, 34, 16) + bytes(cwr))
put("vnet_hdr", "tcpv6_gso", vnet(1, 4, 74, 1428, 54, 16) + bytes(TCP6 / Raw(b"y" * 50)))
put("vnet_hdr", "udp_l4", vnet(1, 5, 42, 1200, 34, 6) + bytes(UDP4 / Raw(b"z" * 30)))
put("vnet_hdr", "bad_flags_ufo", vnet(0x41, 3, 0, 1000, 0, 0))


# --- offload: 10 bytes of metadata, then the frame ---
def offload_meta(kind, csum, small, size, hdr_len=0, cstart=0, coff=0, room=0):
    b0 = kind | (4 if csum else 0) | (8 if small else 0)
    return struct.pack("<BHHHHB", b0, size, hdr_len, cstart, coff, room)


put("offload", "tcpv4_3000_mss1000",
    offload_meta(1, True, False, 1000, 66, 34, 16) + bytes(TCP4 / Raw(bytes(range(256)) * 12)))
put("offload", "tcpv6_2500_mss1200",
    offload_meta(2, True, False, 1200, 74, 54, 16) + bytes(TCP6 / Raw(b"q" * 2500)))
put("offload", "udp_l4_vlan_3000_1200",
    offload_meta(3, True, False, 1200, 46, 38, 6)
    + bytes(Ether(**MAC) / Dot1Q(vlan=7) / IP(src="10.0.0.1", dst="10.0.0.2")
            / UDP(sport=1, dport=2) / Raw(b"u" * 3000)))
put("offload", "noroom_small_batch",
    offload_meta(1, False, True, 100, 0, 0, 0, 2) + bytes(TCP4 / Raw(b"n" * 1000)))
put("offload", "csum_only_udp",
    offload_meta(0, True, False, 0, 0, 34, 6) + bytes(UDP4 / Raw(b"c" * 33)))


# --- pipeline: chain selector, then (port, len LE, bytes) per frame ---
def frames(*fs):
    out = b""
    for port, f in fs:
        out += struct.pack("<BH", port, len(f)) + f
    return out


put("pipeline", "chain0_mix",
    b"\x00" + frames((0, frame("tcp4")), (1, frame("vxlan")), (0, frame("roce_write")),
                     (2, frame("arp")), (1, frame("roce_no_icrc"))))
put("pipeline", "chain1_learn_traced",
    b"\x05" + frames((0, frame("vlan_udp4")), (1, frame("tcp4")), (0, frame("geneve")),
                     (1, frame("roce_cnp"))))
put("pipeline", "chain2_static_map",
    b"\x02" + frames((0, frame("nvgre")), (2, frame("qinq_icmp6")), (3, frame("frag4")),
                     (1, frame("vxlan_roce"))))
put("pipeline", "chain3_short",
    b"\x07" + frames((0, frame("roce_short_reth")), (1, b"\x01\x02\x03"), (0, b"")))

# --- control_input: UTF-8 text ---
put("control_input", "port_specs", b"pcap:in.pcap,out.pcap")
put("control_input", "stage_map", b"l2fwd:0=1,1=0,2=3")
put("control_input", "trace_filter", b"udp dst 4791 and ip 10.0.0.1 and seq 1-100 and layer reth")
put("control_input", "run_toml",
    b'ports = ["gen:100,7", "pcap:,out.pcap", "udp:127.0.0.1:7000,127.0.0.1:7001", "null"]\n'
    b'stages = ["parse:pass", "classify:mark", "tap:/tmp/x.pcap", "l2fwd:learn"]\n'
    b'workers = 2\nbatch_size = 64\ntrace = "class rdma"\nidle_exit_ms = 100\n')
put("control_input", "pipeline_toml",
    b'stages = ["parse", "classify", "l2fwd"]\nports = 4\ntrace = "vni 42"\n'
    b'trace_capacity = 16\nmac_capacity = 64\nmac_age_secs = 5\n'
    b'rss_key = "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa"\n')


# --- roce_packet: the UDP payload of RoCEv2 frames (BTH through ICRC) ---
def udp_payload(f):
    p = Ether(f)
    return bytes(p[UDP].payload)


for name in ["roce_write", "roce_cnp", "roce_atomic_ack6", "roce_no_icrc"]:
    put("roce_packet", name, udp_payload(frame(name)))

# --- pcap_read: capture files ---
os.makedirs(os.path.join(HERE, "pcap_read"), exist_ok=True)
pkts = [Ether(frame("tcp4")), Ether(frame("roce_write")), Ether(frame("vxlan"))]
wrpcap(os.path.join(HERE, "pcap_read", "le_us.pcap"), pkts)
with open(os.path.join(HERE, "pcap_read", "le_us.pcap"), "rb") as f:
    le = f.read()
put("pcap_read", "truncated.pcap", le[: len(le) - 20])
# Big-endian, nanosecond magic, one record.
rec = frame("tcp4")
put("pcap_read", "be_ns.pcap",
    struct.pack(">IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1)
    + struct.pack(">IIII", 1, 2, len(rec), len(rec)) + rec)
w = PcapNgWriter(os.path.join(HERE, "pcap_read", "two.pcapng"))
for p in pkts[:2]:
    w.write(p)
w.close()

# --- control_input regressions (crash until fixed; see README "Results") ---
# `PipelineConfig.trace_capacity` and `mac_capacity` go unchecked into `with_capacity`.
put("control_input", "crash-pipeline-trace-capacity-overflow",
    b"stages = []\ntrace_capacity = 9223372036854775807\n")
put("control_input", "crash-pipeline-mac-capacity-overflow",
    b'stages = ["l2fwd:learn"]\nmac_capacity = 9223372036854775807\n')

# --- rdma_packets: byte 0 = mode, then records (see fuzz_targets/rdma_packets.rs) ---
# Wrapped records carry the RoCE part without ICRC; the target adds IP/UDP, the destination QP
# and the ICRC. PSNs start at 0 (mode bit 1 clear).


def bth(opcode, psn, ack_req=1, pad=0, qpn=0x11):
    return struct.pack("!BBHI", opcode, pad << 4, 0xFFFF, qpn) + struct.pack("!I", (ack_req << 31) | psn)


def wrapped(to_b, roce, ce=False):
    ctl = 1 | (4 if to_b else 0) | (16 if ce else 0)
    return bytes([ctl, len(roce)]) + roce


def aeth(syndrome, msn):
    return struct.pack("!I", (syndrome << 24) | msn)


PUMP = bytes([2 | (8 << 2)])
reth = struct.pack("!QII", 0x10_0000_0400, 3, 16)  # B's first MR: rkey 3
seeds = {
    # Only pump: the engine's own traffic (every WQE kind) between A and B.
    "pump": bytes([0]) + PUMP + bytes([3 | (10 << 2), 200]) + PUMP,
    "pump_v6_wrap": bytes([3]) + PUMP + PUMP,
    # Requests into B: WRITE ONLY, SEND ONLY, READ request, FetchAdd.
    "req_to_b": bytes([0])
    + wrapped(True, bth(0x0A, 0) + reth + b"x" * 16)
    + wrapped(True, bth(0x04, 0) + b"hello!!!")
    + wrapped(True, bth(0x0C, 1) + reth)
    + wrapped(True, bth(0x14, 2) + struct.pack("!QIQQ", 0x10_0000_0400, 3, 1, 0), ce=True)
    + PUMP,
    # Responses into A before and after its requests left: ACK, NAKs, read response, atomic ACK.
    "resp_to_a": bytes([0])
    + bytes([2])
    + wrapped(False, bth(0x11, 0) + aeth(0x1F, 1))
    + wrapped(False, bth(0x11, 1) + aeth(0x60, 1))
    + wrapped(False, bth(0x11, 2) + aeth(0x21, 1))
    + wrapped(False, bth(0x11, 3) + aeth(0x62, 1))
    + wrapped(False, bth(0x10, 5) + aeth(0x1F, 2) + b"r" * 12)
    + wrapped(False, bth(0x12, 7) + aeth(0x1F, 3) + struct.pack("!Q", 42))
    + PUMP,
    # Raw garbage and a CNP, raw mode.
    "raw_cnp": bytes([4]) + bytes.fromhex("4500003c00004000401100000a0000020a000001c00012b700280000")
    + bth(0x81, 0, 0) + bytes(16) + bytes(4),
}
for name, data in seeds.items():
    put("rdma_packets", name, data)
