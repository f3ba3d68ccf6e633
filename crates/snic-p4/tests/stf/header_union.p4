/* header_union: a union of a small (2-byte) and a big (6-byte) header, chosen by a tag.
 *
 * Packet: tag_t { kind, res } then, for kind 1, small_t; for kind 2, big_t; else nothing.
 * Ingress:
 *   - tag.res = 1 when u.isValid() (some member valid), 2 when not;
 *   - when the small member is valid, the union is switched to the big member:
 *     big = { a = small.v, b = 0xCAFEBABE } and big.setValid() makes small invalid
 *     (at most one member is valid); the kind becomes 2;
 *   - when the big member is valid, u.big.setInvalid(): the union becomes invalid and
 *     nothing of it is emitted; the kind becomes 0.
 * Emitting a union emits its valid member, if any. Out on port 1.
 */
#include <core.p4>
#include <v1model.p4>

header tag_t { bit<8> kind; bit<8> res; }
header small_t { bit<16> v; }
header big_t { bit<16> a; bit<32> b; }
header_union u_t { small_t small; big_t big; }

struct headers_t { tag_t tag; u_t u; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.tag);
        transition select(hdr.tag.kind) {
            1: parse_small;
            2: parse_big;
            default: accept;
        }
    }
    state parse_small {
        pkt.extract(hdr.u.small);
        transition accept;
    }
    state parse_big {
        pkt.extract(hdr.u.big);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        standard_metadata.egress_spec = 1;
        hdr.tag.res = hdr.u.isValid() ? 8w1 : 8w2;
        if (hdr.u.small.isValid()) {
            bit<16> v = hdr.u.small.v;
            hdr.u.big.setValid();
            hdr.u.big.a = v;
            hdr.u.big.b = 0xCAFEBABE;
            hdr.tag.kind = 2;
        } else if (hdr.u.big.isValid()) {
            hdr.u.big.setInvalid();
            hdr.tag.kind = 0;
        }
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        /* check in egress that setValid on one member invalidated the other */
        if (hdr.u.small.isValid() && hdr.u.big.isValid()) {
            hdr.tag.res = 0xFF;
        }
    }
}
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.tag);
        pkt.emit(hdr.u);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
