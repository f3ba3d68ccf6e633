/* varbit: a variable-size header extracted with the two-argument extract.
 *
 * Packet: len_t { len (bytes of options), res } then opts_t { varbit<64> data } of len * 8
 * bits, then the payload.
 * Ingress (out on port 1):
 *   - when the options were extracted: the whole header is copied (header assignment copies
 *     the varbit value and its size, and validity) into a second header of the same type,
 *     emitted right after the first: the options appear twice; res = 1;
 *   - len > 8 asks for more bits than varbit<64> holds: extract fails with HeaderTooShort,
 *     ingress runs with parser_error set and res = 0xEE; the option bytes stay payload.
 */
#include <core.p4>
#include <v1model.p4>

header len_t { bit<8> len; bit<8> res; }
header opts_t { varbit<64> data; }

struct headers_t { len_t l; opts_t opts; opts_t copy; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.l);
        pkt.extract(hdr.opts, (bit<32>)hdr.l.len * 8);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        standard_metadata.egress_spec = 1;
        if (standard_metadata.parser_error == error.HeaderTooShort) {
            hdr.l.res = 0xEE;
        } else if (hdr.opts.isValid()) {
            hdr.copy = hdr.opts;
            hdr.l.res = 1;
        }
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.l);
        pkt.emit(hdr.opts);
        pkt.emit(hdr.copy);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
