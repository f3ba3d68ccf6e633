#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<8> b; bit<8> c; bit<8> d; bit<8> e; bit<8> f; bit<8> g; bit<8> h; }
struct headers_t { h_t h; }
struct meta_t { bit<8> m; }
control Sub(inout h_t h) {
  action x() { h.c = 0xCC; exit; }
  table t { key = { h.a: exact; } actions = { x; NoAction; } default_action = x(); }
  apply { h.b = 0xBB; if (h.a == 1) { exit; } if (h.a == 2) { t.apply(); } if (h.a == 3) { switch (t.apply().action_run) { default: { h.e = 1; } } } h.d = 0xDD; }
}

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
state start { pkt.extract(hdr.h); transition accept; }
}
control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply {  } }
control MyIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
  Sub() s;

apply {
  sm.egress_spec = 1;
  s.apply(hdr.h);
  hdr.h.f = 0xFF;

}
}
control MyEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {

apply {  }
}
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply {  } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr); } }
V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(), MyDeparser()) main;
