/* arith: bit<W> wrap-around, saturating arithmetic, signed int<W>, shifts (logical, arithmetic,
 * by a runtime amount, by >= the width), slices (read and assign), concatenation, casts
 * (truncate, zero- and sign-extend), comparisons, bit<128>, and compile-time int arithmetic.
 *
 * Packet: in_t { a, b, w } then r_t (all zero on input). Ingress fills r_t from a, b, w;
 * the expected values are computed in gen/arith.py. Out on port 1.
 */
#include <core.p4>
#include <v1model.p4>

/* infinite-precision int at compile time: (1 << 9) >> 4 = 32, no wrap at 8 bits */
const bit<8> K = (1 << 9) >> 4;

header in_t { bit<8> a; bit<8> b; bit<128> w; }
header r_t {
    bit<8> add; bit<8> sub; bit<8> mul;
    bit<8> sat_add; bit<8> sat_sub; bit<8> s_sat_add; bit<8> s_sat_sub;
    bit<8> shl; bit<8> shr; bit<8> sshr; bit<8> shr_var; bit<8> shl_width;
    bit<8> neg; bit<8> inv; bit<8> slice_hi;
    bit<16> cat;
    bit<4> nib_hi; bit<4> nib_lo;
    bit<16> sext; bit<16> zext;
    bit<8> cmp;
    bit<8> slice_set;
    bit<8> k;
    bit<128> w_add; bit<128> w_shl; bit<128> w_inv; bit<64> w_hi;
}

struct headers_t { in_t i; r_t r; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.i);
        pkt.extract(hdr.r);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        standard_metadata.egress_spec = 1;
        bit<8> a = hdr.i.a;
        bit<8> b = hdr.i.b;
        int<8> sa = (int<8>)a;
        int<8> sb = (int<8>)b;

        hdr.r.add = a + b;
        hdr.r.sub = a - b;
        hdr.r.mul = a * b;
        hdr.r.sat_add = a |+| b;
        hdr.r.sat_sub = a |-| b;
        hdr.r.s_sat_add = (bit<8>)(sa |+| sb);
        hdr.r.s_sat_sub = (bit<8>)(sa |-| sb);
        hdr.r.shl = a << 3;
        hdr.r.shr = a >> 2;
        hdr.r.sshr = (bit<8>)(sa >> 2);
        hdr.r.shr_var = a >> b[3:0];
        hdr.r.shl_width = a << 8;
        hdr.r.neg = -a;
        hdr.r.inv = ~a;
        hdr.r.slice_hi = (bit<8>)a[7:4];
        hdr.r.cat = a ++ b;
        hdr.r.nib_hi = b[3:0];
        hdr.r.nib_lo = (bit<4>)a;
        hdr.r.sext = (bit<16>)(int<16>)sa;
        hdr.r.zext = (bit<16>)a;
        bit<8> cmp = 0;
        if (sa < sb) { cmp = cmp | 1; }
        if (a < b) { cmp = cmp | 2; }
        if (sa >= 0) { cmp = cmp | 4; }
        if (a == b) { cmp = cmp | 8; }
        hdr.r.cmp = cmp;
        hdr.r.slice_set = a;
        hdr.r.slice_set[3:0] = b[7:4];
        hdr.r.k = K;
        hdr.r.w_add = hdr.i.w + 1;
        hdr.r.w_shl = hdr.i.w << 64;
        hdr.r.w_inv = hdr.i.w ^ 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF;
        hdr.r.w_hi = hdr.i.w[127:64];
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.i);
        pkt.emit(hdr.r);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
