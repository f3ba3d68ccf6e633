/* telemetry.p4: in-band telemetry in a custom header (seed 002: custom headers, debuggability).
 *
 * The telemetry header sits right after Ethernet. Its own EtherType is TELEMETRY_ETYPE
 * (0x88B5, IEEE 802 "local experimental 1"); the EtherType it replaced is kept in the header:
 *
 *   ethernet (etherType = 0x88B5) | telemetry_t (9 bytes) | original L3 ...
 *
 *   telemetry_t: hop_count    bit<8>   hops that carried the header (the inserting one is 1)
 *                reserved     bit<7>   0
 *                source_port  bit<9>   the ingress port where the header was inserted
 *                max_qdepth   bit<32>  the largest enq_qdepth seen on the way (widened)
 *                next_type    bit<16>  the original EtherType
 *
 * Roles of the ports (constants):
 *   PORT_A (1): the edge where traffic enters the telemetry domain: a packet arriving here
 *               without the header gets one (hop_count 1, source_port = 1).
 *   PORT_B (2): the edge where traffic leaves: a packet sent out of port B loses the header
 *               (in egress, so it works whichever port the packet came from).
 *   other ports: transit. A packet arriving with the header gets hop_count + 1.
 * In egress every packet that still has the header records max(max_qdepth, enq_qdepth).
 *
 * Forwarding is a control-plane table on the ingress port (fwd); a miss drops.
 * No timestamps: the output is deterministic (in an STF run enq_qdepth is 0).
 */
#include <core.p4>
#include <v1model.p4>

const bit<16> TELEMETRY_ETYPE = 0x88B5;
const PortId_t PORT_A = 1;
const PortId_t PORT_B = 2;

header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
header telemetry_t {
    bit<8> hop_count;
    bit<7> reserved;
    bit<9> source_port;
    bit<32> max_qdepth;
    bit<16> next_type;
}

struct headers_t { ethernet_t ethernet; telemetry_t telemetry; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            TELEMETRY_ETYPE: parse_telemetry;
            default: accept;
        }
    }
    state parse_telemetry {
        pkt.extract(hdr.telemetry);
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
    action insert() {
        hdr.telemetry.setValid();
        hdr.telemetry.hop_count = 1;
        hdr.telemetry.reserved = 0;
        hdr.telemetry.source_port = standard_metadata.ingress_port;
        hdr.telemetry.max_qdepth = 0;
        hdr.telemetry.next_type = hdr.ethernet.etherType;
        hdr.ethernet.etherType = TELEMETRY_ETYPE;
    }
    apply {
        if (hdr.telemetry.isValid()) {
            hdr.telemetry.hop_count = hdr.telemetry.hop_count + 1;
        } else if (standard_metadata.ingress_port == PORT_A) {
            insert();
        }
        fwd.apply();
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        if (hdr.telemetry.isValid()) {
            bit<32> q = (bit<32>)standard_metadata.enq_qdepth;
            if (q > hdr.telemetry.max_qdepth) {
                hdr.telemetry.max_qdepth = q;
            }
            if (standard_metadata.egress_port == PORT_B) {
                hdr.ethernet.etherType = hdr.telemetry.next_type;
                hdr.telemetry.setInvalid();
            }
        }
    }
}

control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) {
    apply { }
}

control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.telemetry);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
