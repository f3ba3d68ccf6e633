/* drop_truncate: mark_to_drop, egress_spec 511, dropping in egress, the default egress_spec,
 * a later assignment undoing mark_to_drop, and truncate.
 *
 * Packet: h_t { op, x } then payload. Ingress by op:
 *   1: mark_to_drop(standard_metadata) (egress_spec = 511): dropped
 *   2: egress_spec = 511 written directly: dropped
 *   3: egress_spec = 1, and egress calls mark_to_drop: dropped at the end of egress
 *   4: egress_spec = 1; truncate(6): only the first 6 bytes of the packet leave
 *   5: nothing: egress_spec keeps its initial value 0, so the packet leaves on port 0
 *   6: mark_to_drop, then egress_spec = 2: mark_to_drop is only an assignment; port 2
 *   other: egress_spec = 1
 * Egress sets x = 0xE0 | op (so a dropped packet cannot be an unchanged copy).
 */
#include <core.p4>
#include <v1model.p4>

header h_t { bit<8> op; bit<8> x; }

struct headers_t { h_t h; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        if (hdr.h.op == 1) {
            mark_to_drop(standard_metadata);
        } else if (hdr.h.op == 2) {
            standard_metadata.egress_spec = 511;
        } else if (hdr.h.op == 3) {
            standard_metadata.egress_spec = 1;
        } else if (hdr.h.op == 4) {
            standard_metadata.egress_spec = 1;
            truncate(6);
        } else if (hdr.h.op == 5) {
            /* egress_spec not written */
        } else if (hdr.h.op == 6) {
            mark_to_drop(standard_metadata);
            standard_metadata.egress_spec = 2;
        } else {
            standard_metadata.egress_spec = 1;
        }
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        hdr.h.x = 0xE0 | hdr.h.op;
        if (hdr.h.op == 3) {
            mark_to_drop(standard_metadata);
        }
    }
}
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
