#!/usr/bin/env python3
"""Check a pcap of RoCEv2 packets (link type RAW: each record starts at the IP header) with
scapy: every packet must dissect as IPv4/IPv6 + UDP (destination port 4791) + BTH, and the
ICRC trailer must equal the ICRC scapy's RoCE layer computes (BTH.compute_icrc).

Usage: interop_rdma.py PCAP JSON_OUT

The JSON holds one entry per packet (index, IP version, opcode, AETH syndrome when the opcode
carries an AETH, the ICRC on the wire and scapy's, the verdict, and the problems found) and the
per-opcode counts. Used by tests/interop_rdma.rs.
"""

import json
import struct
import sys

from scapy.all import IP, UDP, IPv6
from scapy.contrib.roce import BTH
from scapy.utils import RawPcapReader

ROCE_PORT = 4791
# Opcodes whose first extension header is an AETH (read responses first/last/only, ACK,
# atomic ACK): scapy only binds AETH for ACK, so the syndrome is read from the bytes.
AETH_FIRST = {0x0D, 0x0F, 0x10, 0x11, 0x12}


def check(index, data):
    out = {"index": index, "problems": []}
    version = data[0] >> 4 if data else 0
    out["ip"] = version
    if version == 4:
        pkt = IP(data)
    elif version == 6:
        pkt = IPv6(data)
    else:
        out["problems"].append("not IPv4 or IPv6")
        return out
    if not pkt.haslayer(UDP):
        out["problems"].append("no UDP layer")
        return out
    udp = pkt[UDP]
    out["dport"] = udp.dport
    out["sport"] = udp.sport
    if udp.dport != ROCE_PORT:
        out["problems"].append("UDP destination port %d" % udp.dport)
    if not pkt.haslayer(BTH):
        out["problems"].append("no BTH layer")
        return out
    bth = pkt[BTH]
    out["opcode"] = bth.opcode
    out["psn"] = bth.psn
    out["dqpn"] = bth.dqpn
    udp_payload = bytes(udp.payload)
    # Whatever IP said is the end of the packet: the ICRC is the last 4 bytes of the UDP
    # payload (UDP length), not of the record.
    roce = udp_payload[: udp.len - 8] if udp.len else udp_payload
    if len(roce) < 16:
        out["problems"].append("RoCE part shorter than BTH + ICRC")
        return out
    if bth.opcode in AETH_FIRST:
        out["syndrome"] = roce[12]
    wire = roce[-4:]
    computed = bth.compute_icrc(None)
    out["icrc_wire"] = wire.hex()
    out["icrc_scapy"] = computed.hex()
    out["icrc_ok"] = wire == computed
    if not out["icrc_ok"]:
        out["problems"].append("ICRC %s on the wire, scapy computes %s" % (wire.hex(), computed.hex()))
    if version == 4:
        ip = pkt[IP]
        # A header checksum scapy recomputes must match the one on the wire.
        hdr = bytes(data[: ip.ihl * 4])
        s = sum(struct.unpack("!%dH" % (len(hdr) // 2), hdr))
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        if s != 0xFFFF:
            out["problems"].append("bad IPv4 header checksum")
    return out


def main():
    pcap, json_out = sys.argv[1], sys.argv[2]
    packets = []
    counts = {}
    for i, (data, _meta) in enumerate(RawPcapReader(pcap)):
        r = check(i, bytes(data))
        packets.append(r)
        if "opcode" in r:
            counts[str(r["opcode"])] = counts.get(str(r["opcode"]), 0) + 1
    with open(json_out, "w") as f:
        json.dump({"packets": packets, "counts": counts}, f)


if __name__ == "__main__":
    main()
