#!/usr/bin/env python3
"""Print the ICRC known answer of snic-io's `generator.rs` test `icrc_known_answer` (ICRC_KAT).

The frame there is Ethernet / IPv4 10.0.0.1 -> 10.0.0.2 / UDP 49152 -> 4791 / BTH (RC SEND
Only, P_Key 0xffff, dest QP 0x11, PSN 1) / payload 01 02 03 04. The RoCEv2 ICRC is a CRC-32
(zlib's) over 8 bytes of 0xff standing in for the InfiniBand LRH, then the IP header, UDP header,
BTH and payload with the variant fields set to all ones: IPv4 TOS, TTL and header checksum, UDP
checksum, and the BTH byte holding FECN/BECN/reserved. This is the one-liner:

    python3 -c "import zlib; print(hex(zlib.crc32(bytes.fromhex('ff'*8 + \
'45ff003000014000ff11ffff0a0000010a000002' + 'c00012b7001cffff' + \
'0400ffffff00001100000001' + '01020304'))))"

It uses only the standard library, so it checks our CRC independently of snic and of scapy.
"""

import zlib

LRH = "ff" * 8
IPV4 = "45ff003000014000ff11ffff0a0000010a000002"  # TOS, TTL, checksum masked
UDP = "c00012b7001cffff"  # checksum masked
BTH = "0400ffffff00001100000001"  # byte 4 (FECN/BECN/resv) masked
PAYLOAD = "01020304"

print(hex(zlib.crc32(bytes.fromhex(LRH + IPV4 + UDP + BTH + PAYLOAD))))
