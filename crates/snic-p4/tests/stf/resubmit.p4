/* resubmit: resubmit_preserving_field_list sends the packet as it came in back to the start
 * of ingress; only the metadata fields annotated @field_list(1) keep their values.
 *
 * Packet: h_t { inst, kept, lost, mark }.
 * Ingress, first pass (instance_type 0): meta.kept = 0x5A (@field_list(1)), meta.lost = 0x6B
 *   (not in the list), mark = 0xFF (a header change, lost: the resubmitted packet is the
 *   original one), resubmit_preserving_field_list(1). The first pass sends nothing.
 * Second pass (instance_type 6, RESUBMIT): inst = instance_type, kept = meta.kept (0x5A),
 *   lost = meta.lost (0: metadata was reset), out on port 1.
 */
#include <core.p4>
#include <v1model.p4>

header h_t { bit<8> inst; bit<8> kept; bit<8> lost; bit<8> mark; }

struct headers_t { h_t h; }
struct meta_t {
    @field_list(1) bit<8> kept;
    bit<8> lost;
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
        if (standard_metadata.instance_type == 0) {
            meta.kept = 0x5A;
            meta.lost = 0x6B;
            hdr.h.mark = 0xFF;
            resubmit_preserving_field_list(1);
        } else {
            hdr.h.inst = (bit<8>)standard_metadata.instance_type;
            hdr.h.kept = meta.kept;
            hdr.h.lost = meta.lost;
        }
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
