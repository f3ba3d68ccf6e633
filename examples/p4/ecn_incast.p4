/* ecn_incast.p4: ECN marking against incast (seed 002).
 *
 * Many senders answering one receiver at once fill the receiver's egress queue. Instead of
 * dropping, the switch marks ECN-capable packets Congestion Experienced (CE) when the queue is
 * deep, and the senders' congestion control (DCTCP, DCQCN for RoCE) slows down.
 *
 * - Ingress forwards by a port table (fwd: ingress port -> egress port, filled by the control
 *   plane); unknown ingress ports are dropped.
 * - Egress: when standard_metadata.enq_qdepth (packets queued when this one was enqueued)
 *   >= the threshold, and the packet is ECN-capable (ECT(0) = 0b10 or ECT(1) = 0b01), its
 *   ECN field becomes CE (0b11). Not-ECT (0b00) packets are never marked, CE stays CE.
 *   IPv4 and IPv6 (traffic class) are both marked; the IPv4 header checksum is recomputed.
 * - The threshold is the parameter of the default action of the keyless table ecn_threshold,
 *   set by the control plane (`setdefault ecn_threshold set_threshold(qdepth:N)`). Until it is
 *   set the threshold is 0x7FFFF, the largest bit<19> value, so nothing is marked.
 *
 * Testing: in an STF run packets go through one at a time, so enq_qdepth is 0. The STF test
 * sets the threshold to 0 to make marking observable (0 >= 0), and checks first that nothing
 * is marked with the initial threshold.
 */
#include <core.p4>
#include <v1model.p4>

const bit<2> ECN_NOT_ECT = 0;
const bit<2> ECN_ECT1 = 1;
const bit<2> ECN_ECT0 = 2;
const bit<2> ECN_CE = 3;

header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<6> dscp; bit<2> ecn; bit<16> totalLen;
    bit<16> identification; bit<3> flags; bit<13> fragOffset;
    bit<8> ttl; bit<8> protocol; bit<16> hdrChecksum;
    bit<32> srcAddr; bit<32> dstAddr;
}
header ipv6_t {
    bit<4> version; bit<6> dscp; bit<2> ecn; bit<20> flowLabel;
    bit<16> payloadLen; bit<8> nextHdr; bit<8> hopLimit;
    bit<128> srcAddr; bit<128> dstAddr;
}

struct headers_t { ethernet_t ethernet; ipv4_t ipv4; ipv6_t ipv6; }
struct meta_t { bit<19> threshold; }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            0x0800: parse_ipv4;
            0x86DD: parse_ipv6;
            default: accept;
        }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition accept;
    }
    state parse_ipv6 {
        pkt.extract(hdr.ipv6);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) {
    apply { }
}

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    action set_port(PortId_t port) {
        standard_metadata.egress_spec = port;
    }
    action drop() {
        mark_to_drop(standard_metadata);
    }
    table fwd {
        key = { standard_metadata.ingress_port : exact; }
        actions = { set_port; drop; }
        default_action = drop();
    }
    apply {
        fwd.apply();
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) {
    action set_threshold(bit<19> qdepth) {
        meta.threshold = qdepth;
    }
    table ecn_threshold {
        actions = { set_threshold; }
        default_action = set_threshold(0x7FFFF);
    }
    apply {
        ecn_threshold.apply();
        if (standard_metadata.enq_qdepth >= meta.threshold) {
            if (hdr.ipv4.isValid()
                    && (hdr.ipv4.ecn == ECN_ECT0 || hdr.ipv4.ecn == ECN_ECT1)) {
                hdr.ipv4.ecn = ECN_CE;
            } else if (hdr.ipv6.isValid()
                    && (hdr.ipv6.ecn == ECN_ECT0 || hdr.ipv6.ecn == ECN_ECT1)) {
                hdr.ipv6.ecn = ECN_CE;
            }
        }
    }
}

control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset,
              hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.ipv6);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
