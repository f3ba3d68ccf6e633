/* recirculate: recirculate_preserving_field_list at the end of egress sends the deparsed
 * packet (with its egress changes) back to the parser; @field_list(2) metadata is kept.
 *
 * Packet: h_t { passes, inst, prev }.
 * Ingress: passes = passes + 1; inst = instance_type; prev = meta.last; out on port 1.
 * Egress: meta.last = passes (@field_list(2)); when passes < 3, recirculate: the packet
 *   does not leave this time.
 * One packet with passes 0 goes round three times and leaves once with passes 3, inst 4
 * (RECIRC) and prev 2 (the value egress kept on the pass before).
 */
#include <core.p4>
#include <v1model.p4>

header h_t { bit<8> passes; bit<8> inst; bit<8> prev; }

struct headers_t { h_t h; }
struct meta_t {
    @field_list(2) bit<8> last;
}

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        standard_metadata.egress_spec = 1;
        hdr.h.passes = hdr.h.passes + 1;
        hdr.h.inst = (bit<8>)standard_metadata.instance_type;
        hdr.h.prev = meta.last;
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        meta.last = hdr.h.passes;
        if (hdr.h.passes < 3) {
            recirculate_preserving_field_list(2);
        }
    }
}
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
