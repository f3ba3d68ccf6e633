/* default_action: a default action with arguments, replaced at run time by setdefault with
 * another action; entries with arguments; a table whose default is const.
 *
 * Packet: h_t { k, v, w, c }.
 *   t (exact on k): actions set_v(v), set_w(w); default_action = set_v(0x42).
 *   c (exact on k): const default_action = set_c(0x77) (setdefault on it would fail).
 * Out on port 1.
 */
#include <core.p4>
#include <v1model.p4>

header h_t { bit<8> k; bit<8> v; bit<8> w; bit<8> c; }

struct headers_t { h_t h; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    action set_v(bit<8> v) { hdr.h.v = v; }
    action set_w(bit<8> w) { hdr.h.w = w; }
    action set_c(bit<8> c) { hdr.h.c = c; }
    table t {
        key = { hdr.h.k : exact; }
        actions = { set_v; set_w; }
        default_action = set_v(0x42);
    }
    table c {
        key = { hdr.h.k : exact; }
        actions = { set_c; }
        const default_action = set_c(0x77);
    }
    apply {
        standard_metadata.egress_spec = 1;
        t.apply();
        c.apply();
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
