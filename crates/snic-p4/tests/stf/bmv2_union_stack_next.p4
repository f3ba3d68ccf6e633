#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<8> b; }
header x_t { bit<8> x; }
header y_t { bit<16> y; }
header_union u_t { x_t x; y_t y; }
struct headers_t { h_t h; u_t[2] us; }
struct meta_t { bit<8> m; }


parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
state start { pkt.extract(hdr.h); pkt.extract(hdr.us.next.x); transition accept; }

}
control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply {  } }
control MyIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {

apply {
  sm.egress_spec = 1;
  hdr.h.b = (bit<8>)hdr.us.lastIndex;
  if (hdr.us[0].x.isValid()) { hdr.h.a = 0xAA; }

}
}
control MyEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {

apply {  }
}
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply {  } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr); } }
V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(), MyDeparser()) main;
