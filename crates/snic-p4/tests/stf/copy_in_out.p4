/* copy_in_out: functions, and the copy-in/copy-out calling convention (P4-16 6.8), including
 * aliased arguments.
 *
 * Packet: h_t { a, b, c, d, e, f, g, m, n }.
 *   m = max8(a, b)                       a function returning a value
 *   swap(c, d)                           inout parameters
 *   bump(e, e)                           the same field twice: both parameters copy in the
 *                                        old e; x = e + 1, y = e + 2; copy-out goes left to
 *                                        right, so y's value is written last: e = old e + 2
 *   bump(f, g)                           f + 1, g + 2
 *   n = plus_one(n) and n is unchanged   an in parameter is a copy: plus_one changes its
 *       by the call itself                copy only (n = n + 1 once)
 *   set_whole(h, h.a) after the above    hh.a = 9 copies out first (whole header), then
 *                                        x = 5 copies out into h.a: h.a = 5
 * Out on port 1.
 */
#include <core.p4>
#include <v1model.p4>

header h_t {
    bit<8> a; bit<8> b; bit<8> c; bit<8> d; bit<8> e; bit<8> f; bit<8> g; bit<8> m; bit<8> n;
}

struct headers_t { h_t h; }
struct meta_t { }

bit<8> max8(in bit<8> x, in bit<8> y) {
    if (x > y) {
        return x;
    }
    return y;
}

void swap(inout bit<8> x, inout bit<8> y) {
    bit<8> t = x;
    x = y;
    y = t;
}

void bump(inout bit<8> x, inout bit<8> y) {
    x = x + 1;
    y = y + 2;
}

bit<8> plus_one(in bit<8> x) {
    x = x + 1;
    return x;
}

void set_whole(inout h_t hh, inout bit<8> x) {
    x = 5;
    hh.a = 9;
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
        hdr.h.m = max8(hdr.h.a, hdr.h.b);
        swap(hdr.h.c, hdr.h.d);
        bump(hdr.h.e, hdr.h.e);
        bump(hdr.h.f, hdr.h.g);
        hdr.h.n = plus_one(hdr.h.n);
        set_whole(hdr.h, hdr.h.a);
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
