/* learn.p4: MAC learning through P4Runtime digests, for the PTF tests (tests/ptf/learn.py).
 *
 * - smac (exact source MAC): a miss runs learn, which sends a learn_t digest (the source MAC
 *   and the ingress port) to the controller; the controller adds the MAC (NoAction) so the
 *   digest stops.
 * - dmac (exact destination MAC): fwd(port) forwards; a miss drops.
 */
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }

struct learn_t {
    bit<48> srcAddr;
    PortId_t port;
}

struct headers_t { ethernet_t ethernet; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.ethernet);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    action drop() {
        mark_to_drop(standard_metadata);
    }
    action learn() {
        digest<learn_t>(1, { hdr.ethernet.srcAddr, standard_metadata.ingress_port });
    }
    action fwd(PortId_t port) {
        standard_metadata.egress_spec = port;
    }
    table smac {
        key = { hdr.ethernet.srcAddr : exact; }
        actions = { learn; NoAction; }
        default_action = learn();
        size = 256;
    }
    table dmac {
        key = { hdr.ethernet.dstAddr : exact; }
        actions = { fwd; drop; }
        default_action = drop();
        size = 256;
    }
    apply {
        smac.apply();
        dmac.apply();
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }

control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply { pkt.emit(hdr.ethernet); }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
