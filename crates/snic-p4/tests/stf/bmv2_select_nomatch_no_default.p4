#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<8> b; }
header x_t { bit<8> x; }
struct headers_t { h_t h; x_t x; }
struct meta_t { bit<8> m; }


parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
state start { pkt.extract(hdr.h); transition select(hdr.h.a) { 1: px; } }
state px { pkt.extract(hdr.x); transition accept; }

}
control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply {  } }
control MyIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {

apply {
  sm.egress_spec = 1;
  if (sm.parser_error == error.NoMatch) { hdr.h.b = 0xEE; }
  else if (sm.parser_error == error.NoError) { hdr.h.b = 0x00; }
  else { hdr.h.b = 0x77; }

}
}
control MyEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {

apply {  }
}
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply {  } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr); } }
V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(), MyDeparser()) main;
