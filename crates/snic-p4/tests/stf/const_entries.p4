/* const_entries: tables filled by the program: const entries with range and ternary keys
 * (the first entry that matches wins: entries are in priority order), an exact const table,
 * and const default_action.
 *
 * Packet: h_t { a, b, r1, r2 }.
 *   t_range (a: range, b: ternary):
 *     (1 .. 10, _)            -> 1
 *     (5 .. 20, _)            -> 2
 *     (_, 0xFF)               -> 3
 *     (21 .. 30, 0x10 &&& 0xF0) -> 4
 *     default (const)         -> 0xEE
 *   t_exact (a: exact): 1 -> 0x11, 2 -> 0x22; default 0.
 * Out on port 1.
 */
#include <core.p4>
#include <v1model.p4>

header h_t { bit<8> a; bit<8> b; bit<8> r1; bit<8> r2; }

struct headers_t { h_t h; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    action set1(bit<8> v) { hdr.h.r1 = v; }
    action set2(bit<8> v) { hdr.h.r2 = v; }
    table t_range {
        key = {
            hdr.h.a : range;
            hdr.h.b : ternary;
        }
        actions = { set1; }
        const entries = {
            (1 .. 10, _) : set1(1);
            (5 .. 20, _) : set1(2);
            (_, 0xFF) : set1(3);
            (21 .. 30, 0x10 &&& 0xF0) : set1(4);
        }
        const default_action = set1(0xEE);
    }
    table t_exact {
        key = { hdr.h.a : exact; }
        actions = { set2; }
        const entries = {
            1 : set2(0x11);
            2 : set2(0x22);
        }
        default_action = set2(0);
    }
    apply {
        standard_metadata.egress_spec = 1;
        t_range.apply();
        t_exact.apply();
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
