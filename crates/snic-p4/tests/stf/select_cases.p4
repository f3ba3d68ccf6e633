/* select_cases: select on a tuple with masks, ranges, don't-care and default; the first
 * case that matches wins.
 *
 * Packet: k_t { a, b, res }. Parser states write res:
 *   (0x10 &&& 0xF0, _)     -> 1    a in 0x10..0x1F, any b
 *   (0x20 .. 0x2F, 0x01)   -> 2    range (inclusive) and exact
 *   (0x20 .. 0x2F, _)      -> 3
 *   (0x30, 0x30)           -> 4
 *   (_, 0xFF)              -> 5
 *   default                -> 6
 * A second select on one field with a set of values: b in {0x40, 0x41} -> res |= 0x80.
 * Out on port 1.
 */
#include <core.p4>
#include <v1model.p4>

header k_t { bit<8> a; bit<8> b; bit<8> res; }

struct headers_t { k_t k; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.k);
        transition select(hdr.k.a, hdr.k.b) {
            (0x10 &&& 0xF0, _): case1;
            (0x20 .. 0x2F, 0x01): case2;
            (0x20 .. 0x2F, _): case3;
            (0x30, 0x30): case4;
            (_, 0xFF): case5;
            default: case6;
        }
    }
    state case1 { hdr.k.res = 1; transition second; }
    state case2 { hdr.k.res = 2; transition second; }
    state case3 { hdr.k.res = 3; transition second; }
    state case4 { hdr.k.res = 4; transition second; }
    state case5 { hdr.k.res = 5; transition second; }
    state case6 { hdr.k.res = 6; transition second; }
    state second {
        transition select(hdr.k.b) {
            0x40: flag;
            0x41: flag;
            default: accept;
        }
    }
    state flag {
        hdr.k.res = hdr.k.res | 0x80;
        transition accept;
    }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply { standard_metadata.egress_spec = 1; }
}
control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.k); } }

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
