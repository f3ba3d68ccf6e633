/* core_accept: a mix of ordinary constructs (value sets, stacks, sub-controls, switch, functions, log_msg, casts, ?: with int literals) compile and run. */
#include <core.p4>
#include <v1model.p4>
const bool DEBUG = true;
typedef bit<9> port_t;
type bit<32> ip4_t;
header h_t { bit<8> op; bit<8> idx; bit<8> a; bit<8> b; }
header s_t { bit<8> v; }
struct headers_t { h_t h; s_t[4] st; }
struct meta_t { bit<8> x; port_t p; int<8> sx; }
error { Foo }
parser P(packet_in pkt, out headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    bit<8> tmp;
    value_set<bit<8>>(4) pvs;
    state start { pkt.extract<h_t>(hdr.h); tmp = hdr.h.op; transition select(pkt.lookahead<bit<8>>()) { pvs: accept; 0 &&& 0x80: stk; default: accept; } }
    state stk { pkt.extract(hdr.st.next); verify(hdr.h.a != 0xff, error.Foo); transition select(hdr.st.last.v) { 0: accept; default: stk; } }
}
control VC(inout headers_t hdr, inout meta_t m) { apply { } }
bit<8> f(in bit<8> v) { return v + 1; }
control Sub(inout headers_t hdr, inout standard_metadata_t sm) { apply { sm.egress_spec = (port_t)hdr.h.a; } }
control I(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    const bit<8> K = 3;
    Sub() sub;
    action a(in bit<8> x, bit<8> y) { hdr.h.b = x + y; }
    action noop() { }
    table t { key = { m.x : exact @name("x"); hdr.h.isValid() : exact; } actions = { a(hdr.h.op); noop; } default_action = noop(); size = 16; }
    apply {
        bit<32> w = hdr.h.isValid() ? 1 : 2;
        m.x = f(f(hdr.h.op)) |+| K;
        m.sx = -1;
        hdr.h.a = (bit<8>)m.sx;
        if (!hdr.h.isValid() || (bit<1>)hdr.h.isValid() == 0) { exit; }
        if (hdr.st[0].isValid()) { hdr.st[hdr.h.idx].v = 0x55; hdr.st.push_front(1); hdr.st[0].setValid(); hdr.st[0].v = 0x66; }
        switch (hdr.h.op) { 1: { noop(); } 2: 3: { a(4, 5); } default: { } }
        t.apply();
        log_msg("x={}", {m.x});
        sub.apply(hdr, sm);
        if (DEBUG) { hdr.h.idx = (bit<8>)(w[7:0]); }
    }
}
control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers_t hdr, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit<h_t>(hdr.h); pkt.emit(hdr.st); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
