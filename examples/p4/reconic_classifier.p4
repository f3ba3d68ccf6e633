/* reconic_classifier.p4: RecoNIC's packet classification (seed 003) as a v1model program.
 *
 * The same decision as snic's native `classify` stage (crates/snic-pipeline/src/stages/
 * classify.rs): a packet is RDMA when
 *   - it is UDP to destination port 4791 (RoCEv2) over IPv4 or IPv6, after Ethernet and up to
 *     two VLAN tags (0x8100, 0x88A8 or 0x9100, like the native walk);
 *   - a complete BTH follows (transport version 0) whose opcode is a reliable-connection (RC)
 *     opcode the IBTA defines, or the RoCEv2 CNP (0x81);
 *   - every extension header the opcode implies is there (an AETH with a reserved syndrome
 *     does not count, as in snic-wire), and the headers plus the 4-byte
 *     ICRC fit in the UDP datagram with the opcode's payload rules (no payload for READ
 *     requests, ACKs, atomics, FLUSH and CNP; exactly 8 bytes for ATOMIC WRITE; pad count at
 *     most the payload).
 * Everything else (including a RoCE packet that is cut short, which leaves parser_error set,
 * and UC/UD traffic) is non-RDMA.
 *
 * Where the packets go (constants, not a table, so the program needs no control plane):
 *   RDMA     -> port RDMA_PORT  (1): the RDMA engine
 *   non-RDMA -> port OTHER_PORT (2): the host / the rest of the pipeline
 *
 * Extension headers by RC opcode (IBTA Vol 1, 9.2 and table 38):
 *   none            0x00-0x02, 0x04 SEND; 0x07, 0x08 WRITE middle/last; 0x0E READ resp middle
 *   ImmDt           0x03, 0x05 SEND with immediate; 0x09 WRITE last with immediate
 *   RETH            0x06, 0x0A WRITE first/only; 0x0C READ request; 0x1D ATOMIC WRITE
 *   RETH, ImmDt     0x0B WRITE only with immediate
 *   AETH            0x0D, 0x0F, 0x10 READ response first/last/only; 0x11 ACK
 *   AETH, AtomicAck 0x12 ATOMIC ACK
 *   AtomicETH       0x13 CmpSwap, 0x14 FetchAdd
 *   IETH            0x16, 0x17 SEND with invalidate
 *   FETH, RETH      0x1C FLUSH
 *   CNP (16 bytes)  0x81
 *
 * What the native stage does and this program does not: it verifies the ICRC (a P4 parser
 * cannot reach the 4-byte trailer without knowing the payload length) and drops bad ones;
 * it looks for RoCE inside a VXLAN/Geneve/GRE tunnel and after IPv6 extension headers (here
 * those packets are non-RDMA); it bounds the UDP datagram by the IP length and stops at IP
 * fragments (here: a fragment is non-RDMA, like native, but the IP length is not checked).
 */
#include <core.p4>
#include <v1model.p4>

const PortId_t RDMA_PORT = 1;
const PortId_t OTHER_PORT = 2;
const bit<16> ROCEV2_UDP_PORT = 4791;

error { ReservedAethSyndrome }

header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
header vlan_t { bit<3> pcp; bit<1> dei; bit<12> vid; bit<16> etherType; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> totalLen;
    bit<16> identification; bit<3> flags; bit<13> fragOffset;
    bit<8> ttl; bit<8> protocol; bit<16> hdrChecksum;
    bit<32> srcAddr; bit<32> dstAddr;
}
header ipv4_options_t { varbit<320> options; }
header ipv6_t {
    bit<4> version; bit<8> trafficClass; bit<20> flowLabel;
    bit<16> payloadLen; bit<8> nextHdr; bit<8> hopLimit;
    bit<128> srcAddr; bit<128> dstAddr;
}
header udp_t { bit<16> srcPort; bit<16> dstPort; bit<16> length; bit<16> checksum; }
/* Base Transport Header, 12 bytes. */
header bth_t {
    bit<8> opcode; bit<1> se; bit<1> migReq; bit<2> padCount; bit<4> tver;
    bit<16> pkey; bit<1> fecn; bit<1> becn; bit<6> resv6; bit<24> destQp;
    bit<1> ackReq; bit<7> resv7; bit<24> psn;
}
/* RDMA Extended Transport Header, 16 bytes. */
header reth_t { bit<64> va; bit<32> rkey; bit<32> dmaLen; }
/* ACK Extended Transport Header, 4 bytes. */
header aeth_t { bit<8> syndrome; bit<24> msn; }
/* Atomic Extended Transport Header, 28 bytes. */
header atomic_eth_t { bit<64> va; bit<32> rkey; bit<64> swapAdd; bit<64> compare; }
/* Atomic ACK Extended Transport Header, 8 bytes. */
header atomic_ack_eth_t { bit<64> origRemoteData; }
/* Immediate data, 4 bytes. */
header immdt_t { bit<32> imm; }
/* Invalidate Extended Transport Header, 4 bytes. */
header ieth_t { bit<32> rkey; }
/* FLUSH Extended Transport Header, 4 bytes. */
header feth_t { bit<26> resv; bit<2> selectivityLevel; bit<4> placementType; }
/* The 16 reserved bytes of a CNP. */
header cnp_t { bit<128> resv; }

struct headers_t {
    ethernet_t ethernet;
    vlan_t[2] vlan;
    ipv4_t ipv4;
    ipv4_options_t ipv4_options;
    ipv6_t ipv6;
    udp_t udp;
    bth_t bth;
    feth_t feth;
    reth_t reth;
    atomic_eth_t atomic_eth;
    aeth_t aeth;
    atomic_ack_eth_t atomic_ack_eth;
    immdt_t immdt;
    ieth_t ieth;
    cnp_t cnp;
}

struct meta_t {
    bit<16> etherType;       /* after the VLAN tags */
    bit<16> roce_hdr_len;    /* BTH + extension headers, bytes */
    bit<1>  no_payload;      /* the opcode carries no payload */
    bit<1>  fixed8;          /* the opcode carries exactly 8 bytes (ATOMIC WRITE) */
    bit<1>  rdma_opcode;     /* an RC opcode or the CNP */
}

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.ethernet);
        meta.etherType = hdr.ethernet.etherType;
        transition select(hdr.ethernet.etherType) {
            0x8100 &&& 0xEFFF: parse_vlan;  /* 0x8100 and 0x9100 */
            0x88A8: parse_vlan;
            default: parse_l3;
        }
    }
    state parse_vlan {
        pkt.extract(hdr.vlan.next);
        meta.etherType = hdr.vlan.last.etherType;
        transition select(hdr.vlan.last.etherType) {
            /* a third tag: extracting it fails with StackOutOfBounds, so non-RDMA */
            0x8100 &&& 0xEFFF: parse_vlan;
            0x88A8: parse_vlan;
            default: parse_l3;
        }
    }
    state parse_l3 {
        transition select(meta.etherType) {
            0x0800: parse_ipv4;
            0x86DD: parse_ipv6;
            default: accept;
        }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        verify(hdr.ipv4.version == 4 && hdr.ipv4.ihl >= 5, error.NoMatch);
        transition select(hdr.ipv4.ihl) {
            5: parse_ipv4_l4;
            default: parse_ipv4_options;
        }
    }
    state parse_ipv4_options {
        pkt.extract(hdr.ipv4_options, ((bit<32>)hdr.ipv4.ihl - 5) * 32);
        transition parse_ipv4_l4;
    }
    state parse_ipv4_l4 {
        /* A fragment (more fragments set, or an offset) carries no whole UDP header. */
        transition select(hdr.ipv4.flags[0:0], hdr.ipv4.fragOffset, hdr.ipv4.protocol) {
            (0, 0, 17): parse_udp;
            default: accept;
        }
    }
    state parse_ipv6 {
        pkt.extract(hdr.ipv6);
        transition select(hdr.ipv6.nextHdr) {
            17: parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        pkt.extract(hdr.udp);
        transition select(hdr.udp.dstPort) {
            ROCEV2_UDP_PORT: parse_bth;
            default: accept;
        }
    }
    state parse_bth {
        pkt.extract(hdr.bth);
        meta.roce_hdr_len = 12;
        meta.rdma_opcode = 1;
        transition select(hdr.bth.opcode) {
            0x00 &&& 0xFE: accept;                   /* 0x00, 0x01 SEND first/middle */
            0x02: accept;
            0x03: parse_immdt;
            0x04: accept;
            0x05: parse_immdt;
            0x06: parse_reth;
            0x07: accept;
            0x08: accept;
            0x09: parse_immdt;
            0x0A: parse_reth;
            0x0B: parse_reth;
            0x0C: parse_reth_no_payload;
            0x0D: parse_aeth;
            0x0E: accept;
            0x0F: parse_aeth;
            0x10: parse_aeth;
            0x11: parse_aeth_no_payload;
            0x12: parse_aeth_no_payload;    /* AETH, then AtomicAckETH */
            0x13: parse_atomic_eth;
            0x14: parse_atomic_eth;
            0x16: parse_ieth;
            0x17: parse_ieth;
            0x1C: parse_feth;
            0x1D: parse_reth_fixed8;
            0x81: parse_cnp;
            default: not_rdma;
        }
    }
    state not_rdma {
        meta.rdma_opcode = 0;
        transition accept;
    }
    state parse_immdt {
        pkt.extract(hdr.immdt);
        meta.roce_hdr_len = meta.roce_hdr_len + 4;
        transition accept;
    }
    state parse_reth {
        pkt.extract(hdr.reth);
        meta.roce_hdr_len = meta.roce_hdr_len + 16;
        transition select(hdr.bth.opcode) {
            0x0B: parse_immdt;
            default: accept;
        }
    }
    state parse_reth_no_payload {
        meta.no_payload = 1;
        transition parse_reth;
    }
    state parse_reth_fixed8 {
        meta.fixed8 = 1;
        transition parse_reth;
    }
    state parse_aeth {
        pkt.extract(hdr.aeth);
        /* syndrome 000xxxxx ACK, 001xxxxx RNR NAK, 011xxxxx NAK with codes 0-4; the rest
         * (bit 7 set, type 10, NAK codes 5-31) is reserved */
        verify(hdr.aeth.syndrome[7:6] == 0
               || (hdr.aeth.syndrome[7:5] == 3 && hdr.aeth.syndrome[4:0] <= 4),
               error.ReservedAethSyndrome);
        meta.roce_hdr_len = meta.roce_hdr_len + 4;
        transition select(hdr.bth.opcode) {
            0x12: parse_atomic_ack_eth;
            default: accept;
        }
    }
    state parse_aeth_no_payload {
        meta.no_payload = 1;
        transition parse_aeth;
    }
    state parse_atomic_ack_eth {
        pkt.extract(hdr.atomic_ack_eth);
        meta.roce_hdr_len = meta.roce_hdr_len + 8;
        transition accept;
    }
    state parse_atomic_eth {
        pkt.extract(hdr.atomic_eth);
        meta.roce_hdr_len = meta.roce_hdr_len + 28;
        meta.no_payload = 1;
        transition accept;
    }
    state parse_ieth {
        pkt.extract(hdr.ieth);
        meta.roce_hdr_len = meta.roce_hdr_len + 4;
        transition accept;
    }
    state parse_feth {
        pkt.extract(hdr.feth);
        meta.roce_hdr_len = meta.roce_hdr_len + 4;
        meta.no_payload = 1;
        transition parse_reth;
    }
    state parse_cnp {
        pkt.extract(hdr.cnp);
        meta.roce_hdr_len = meta.roce_hdr_len + 16;
        meta.no_payload = 1;
        transition accept;
    }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) {
    apply { }
}

/* True when the RoCE headers (hdr_len bytes) and the 4-byte ICRC fit a UDP datagram of
 * udp_len bytes by the opcode's payload rules. */
bool roce_lengths_ok(in bit<16> udp_len, in bit<16> hdr_len, in bit<2> pad_count,
                     in bit<1> no_payload, in bit<1> fixed8) {
    bit<16> need = 8 + hdr_len + 4;  /* UDP header + RoCE headers + ICRC */
    if (udp_len < need) {
        return false;
    }
    bit<16> body = udp_len - need;
    bit<16> pad = (bit<16>)pad_count;
    if (no_payload == 1) {
        return body == 0 && pad == 0;
    }
    if (fixed8 == 1) {
        return body == 8 && pad == 0;
    }
    return pad <= body;
}

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        bool rdma = standard_metadata.parser_error == error.NoError
                    && hdr.bth.isValid()
                    && hdr.bth.tver == 0
                    && meta.rdma_opcode == 1;
        if (rdma) {
            rdma = roce_lengths_ok(hdr.udp.length, meta.roce_hdr_len, hdr.bth.padCount,
                                   meta.no_payload, meta.fixed8);
        }
        if (rdma) {
            standard_metadata.egress_spec = RDMA_PORT;
        } else {
            standard_metadata.egress_spec = OTHER_PORT;
        }
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply { }
}

control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) {
    apply { }
}

control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.vlan);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.ipv4_options);
        pkt.emit(hdr.ipv6);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.bth);
        pkt.emit(hdr.feth);
        pkt.emit(hdr.reth);
        pkt.emit(hdr.atomic_eth);
        pkt.emit(hdr.aeth);
        pkt.emit(hdr.atomic_ack_eth);
        pkt.emit(hdr.immdt);
        pkt.emit(hdr.ieth);
        pkt.emit(hdr.cnp);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
