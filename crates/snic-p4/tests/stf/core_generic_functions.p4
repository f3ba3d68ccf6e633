/* core_generic_functions: a generic function is compiled once per type it is called with,
 * with the type taken from the arguments or given explicitly. */
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<8> b; bit<16> c; bit<16> d; bit<8> m8; bit<16> m16; bit<8> e; }
struct headers_t { h_t h; }
struct meta_t { }
T max<T>(in T x, in T y) { return x > y ? x : y; }
void swap<T>(inout T x, inout T y) { T t = x; x = y; y = t; }
parser P(packet_in pkt, out headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control VC(inout headers_t hdr, inout meta_t m) { apply { } }
control I(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    apply {
        hdr.h.m8 = max(hdr.h.a, hdr.h.b);
        hdr.h.m16 = max<bit<16>>(hdr.h.c, hdr.h.d);
        swap(hdr.h.a, hdr.h.b);
        hdr.h.e = max(hdr.h.a, 8w0x40);
        sm.egress_spec = 1;
    }
}
control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers_t hdr, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
