#include <core.p4>
#include <v1model.p4>
header in_t { bit<8> a; bit<8> b; int<8> c; int<8> d; bit<16> w; }
header out_t { bit<8> add; bit<8> sub; bit<8> mul; bit<8> div; bit<8> mod; bit<8> sat_add; bit<8> sat_sub;
  int<8> s_sat_add; int<8> s_sat_sub; bit<8> shl; bit<8> shr; int<8> sshr; bit<8> band; bit<8> bor; bit<8> bxor; bit<8> bnot;
  bit<8> neg; bit<16> cat; bit<4> slice; bit<8> cast_s; bit<16> sext; bit<16> zext; bit<8> lt; bit<8> slt; bit<8> tern; bit<8> bigc; bit<32> wide; }
struct headers_t { in_t i; out_t o; }
struct meta_t { }
parser P(packet_in pkt, out headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.i); transition accept; }
}
control VC(inout headers_t hdr, inout meta_t m) { apply { } }
control I(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    apply {
        hdr.o.setValid();
        hdr.o.add = hdr.i.a + hdr.i.b;
        hdr.o.sub = hdr.i.a - hdr.i.b;
        hdr.o.mul = hdr.i.a * hdr.i.b;
        hdr.o.div = hdr.i.a / 7;
        hdr.o.mod = hdr.i.a % 7;
        hdr.o.sat_add = hdr.i.a |+| hdr.i.b;
        hdr.o.sat_sub = hdr.i.b |-| hdr.i.a;
        hdr.o.s_sat_add = hdr.i.c |+| hdr.i.d;
        hdr.o.s_sat_sub = hdr.i.c |-| hdr.i.d;
        hdr.o.shl = hdr.i.a << 3;
        hdr.o.shr = hdr.i.a >> 3;
        hdr.o.sshr = hdr.i.c >> 2;
        hdr.o.band = hdr.i.a & hdr.i.b;
        hdr.o.bor = hdr.i.a | hdr.i.b;
        hdr.o.bxor = hdr.i.a ^ hdr.i.b;
        hdr.o.bnot = ~hdr.i.a;
        hdr.o.neg = -hdr.i.a;
        hdr.o.cat = hdr.i.a ++ hdr.i.b;
        hdr.o.slice = hdr.i.a[6:3];
        hdr.o.cast_s = (bit<8>)hdr.i.c;
        hdr.o.sext = (bit<16>)(int<16>)hdr.i.c;
        hdr.o.zext = (bit<16>)hdr.i.a;
        hdr.o.lt = (hdr.i.a < hdr.i.b) ? 8w1 : 8w0;
        hdr.o.slt = (hdr.i.c < hdr.i.d) ? 8w1 : 8w0;
        hdr.o.tern = hdr.i.w[15:8] == 0xAB ? hdr.i.w[7:0] : 8w0xEE;
        hdr.o.bigc = (bit<8>)(300 + 5);
        hdr.o.wide = (bit<32>)hdr.i.w << 12 | 32w0x5;
        sm.egress_spec = 1;
    }
}
control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers_t hdr, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.i); pkt.emit(hdr.o); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
