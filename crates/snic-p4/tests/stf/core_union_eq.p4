/* core_union_eq: extracting into a header union member invalidates the other member; header
 * equality: two invalid headers are equal whatever their stale fields, valid ones compare
 * fields. */
#include <core.p4>
#include <v1model.p4>
header a_t { bit<8> v; }
header b_t { bit<8> v; }
header_union u_t { a_t a; b_t b; }
header r_t { bit<8> a_valid; bit<8> b_valid; bit<8> eq_invalid; bit<8> eq_valid; bit<8> ne_valid; }
struct headers_t { u_t u; r_t r; }
struct meta_t { }
parser P(packet_in pkt, out headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.u.b); pkt.extract(hdr.u.a); transition accept; }
}
control VC(inout headers_t hdr, inout meta_t m) { apply { } }
control I(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    apply {
        a_t x = { 1 };
        a_t y = { 2 };
        x.setInvalid();
        y.setInvalid();
        a_t z = { 5 };
        a_t w = { 5 };
        a_t q = { 6 };
        hdr.r.setValid();
        hdr.r.a_valid = hdr.u.a.isValid() ? 8w1 : 8w0;
        hdr.r.b_valid = hdr.u.b.isValid() ? 8w1 : 8w0;
        hdr.r.eq_invalid = x == y ? 8w1 : 8w0;
        hdr.r.eq_valid = z == w ? 8w1 : 8w0;
        hdr.r.ne_valid = z != q ? 8w1 : 8w0;
        sm.egress_spec = 1;
    }
}
control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers_t hdr, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
