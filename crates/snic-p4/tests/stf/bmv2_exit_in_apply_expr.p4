#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<8> b; bit<8> c; bit<8> d; bit<8> e; bit<8> f; bit<8> g; bit<8> h; }
struct headers_t { h_t h; }
struct meta_t { bit<8> m; }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
state start { pkt.extract(hdr.h); transition accept; }
}
control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply {  } }
control MyIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
  action stop() { hdr.h.b = 0xB1; exit; }
  action noop() { }
  table t { key = { hdr.h.a : exact; } actions = { stop; noop; } default_action = stop(); }
  table t2 { key = { hdr.h.a : exact; } actions = { stop; noop; } default_action = stop(); }

apply {
  sm.egress_spec = 1;
  if (hdr.h.a == 1) {
    if (t.apply().hit) { hdr.h.c = 0xC1; } else { hdr.h.c = 0xC2; }
    hdr.h.d = 0xD1;
  } else {
    switch (t2.apply().action_run) { stop: { hdr.h.c = 0xC3; } default: { hdr.h.c = 0xC4; } }
    hdr.h.d = 0xD2;
  }

}
}
control MyEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {

apply {  }
}
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply {  } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr); } }
V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(), MyDeparser()) main;
