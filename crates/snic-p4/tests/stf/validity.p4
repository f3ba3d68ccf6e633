/* validity: header validity under assignment, setValid / setInvalid, and the deparser
 * skipping invalid headers; struct assignment from a list expression.
 *
 * Packet: a_t a, then d_t d. Headers b and c are never extracted (invalid).
 * Ingress:
 *   b = a          copies the fields and the validity: b is a valid copy of a
 *   a.setInvalid() a is not emitted
 *   d = c          c is invalid, so d becomes invalid: d is not emitted (its bytes were
 *                  extracted, so they are gone from the packet)
 *   e.setValid(), then every field of e written (fields of a header made valid this way
 *                  are unspecified until written)
 *   meta.pair = { 0x12, 0x34 } (a list expression assigned to a struct); e.x = pair.hi,
 *   e.y = pair.lo
 *   flags: bit 0 a valid, bit 1 b valid, bit 2 c valid, bit 3 d valid, at the end
 * Deparser: a, b, c, d, e. Out on port 1.
 */
#include <core.p4>
#include <v1model.p4>

header a_t { bit<8> v; bit<8> flags; }
header d_t { bit<16> w; }
header e_t { bit<8> x; bit<8> y; }

struct pair_t { bit<8> hi; bit<8> lo; }
struct headers_t { a_t a; a_t b; d_t c; d_t d; e_t e; }
struct meta_t { pair_t pair; }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.a);
        pkt.extract(hdr.d);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        standard_metadata.egress_spec = 1;
        hdr.b = hdr.a;
        hdr.a.setInvalid();
        hdr.d = hdr.c;
        hdr.e.setValid();
        meta.pair = { 0x12, 0x34 };
        hdr.e.x = meta.pair.hi;
        hdr.e.y = meta.pair.lo;
        bit<8> f = 0;
        if (hdr.a.isValid()) { f = f | 1; }
        if (hdr.b.isValid()) { f = f | 2; }
        if (hdr.c.isValid()) { f = f | 4; }
        if (hdr.d.isValid()) { f = f | 8; }
        hdr.b.flags = f;
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.a);
        pkt.emit(hdr.b);
        pkt.emit(hdr.c);
        pkt.emit(hdr.d);
        pkt.emit(hdr.e);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
