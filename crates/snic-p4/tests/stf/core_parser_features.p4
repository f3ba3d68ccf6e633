#include <core.p4>
#include <v1model.p4>
typedef bit<48> mac_t;
const bit<16> TYPE_VLAN = 0x8100;
enum bit<8> Kind { A = 1, B = 2 }
enum Color { Red, Green }
error { MyError }
header ethernet_t { mac_t dst; mac_t src; bit<16> type; }
header vlan_t { bit<3> pcp; bit<1> cfi; bit<12> vid; bit<16> type; }
header opt_t { bit<8> kind; bit<8> len; varbit<256> data; }
header h8_t { bit<8> v; }
header h16_t { bit<16> v; }
header_union u_t { h8_t a; h16_t b; }
header res_t { bit<8> r0; bit<8> r1; bit<8> r2; bit<8> r3; bit<32> err; bit<8> cnt; }
struct headers_t { ethernet_t eth; vlan_t[2] vlans; opt_t opt; u_t u; res_t res; }
struct meta_t { bit<8> x; Color c; }
parser Sub(packet_in pkt, inout headers_t hdr) {
    state start { pkt.extract(hdr.opt, (bit<32>)(((bit<32>)pkt.lookahead<bit<16>>()[7:0]) * 8)); transition accept; }
}
parser P(packet_in pkt, out headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    Sub() sub;
    state start { pkt.extract(hdr.eth); transition select(hdr.eth.type) { TYPE_VLAN: vlan; 0x0800 &&& 0xff00: opt; 0x9000 .. 0x90ff: un; default: accept; } }
    state vlan { pkt.extract(hdr.vlans.next); transition select(hdr.vlans.last.type, hdr.vlans.lastIndex) { (TYPE_VLAN, _): vlan; (0x0800, 0): opt; default: accept; } }
    state opt { sub.apply(pkt, hdr); transition accept; }
    state un { bit<8> k = pkt.lookahead<bit<8>>(); transition select(k) { 1: ua; 2: ub; default: bad; } }
    state ua { pkt.extract(hdr.u.a); transition accept; }
    state ub { pkt.advance(8); pkt.extract(hdr.u.b); transition accept; }
    state bad { verify(false, error.MyError); transition accept; }
}
control VC(inout headers_t hdr, inout meta_t m) { apply { } }
bit<8> twice(in bit<8> v) { return v + v; }
control I(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    action inc(inout bit<8> v) { v = v + 1; }
    action setx(bit<8> v) { m.x = v; }
    action stop() { hdr.res.r3 = 0x55; exit; }
    table t { key = { m.x : exact; } actions = { setx; stop; NoAction; } const entries = { 1 : setx(10); 2 : stop(); } default_action = NoAction(); }
    apply {
        hdr.res.setValid();
        hdr.res.err = (bit<32>)(bit<8>)0;
        if (sm.parser_error == error.MyError) { hdr.res.err = 1; }
        else if (sm.parser_error == error.PacketTooShort) { hdr.res.err = 2; }
        else if (sm.parser_error == error.StackOutOfBounds) { hdr.res.err = 3; }
        hdr.res.cnt = (bit<8>)(bit<32>)hdr.vlans.lastIndex;
        if (hdr.vlans[0].isValid()) { m.x = (bit<8>)hdr.vlans[0].vid; }
        inc(m.x);
        hdr.res.r0 = twice(m.x);
        switch (t.apply().action_run) {
            setx: { hdr.res.r1 = m.x; }
            NoAction: { hdr.res.r1 = 0xAA; }
        }
        if (hdr.u.isValid()) { hdr.res.r2 = hdr.u.a.isValid() ? hdr.u.a.v : hdr.u.b.v[7:0]; }
        sm.egress_spec = 2;
    }
}
control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers_t hdr, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
