/* core_composite_exprs: ?: choosing between headers, and a struct compared with a list. */
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<8> b; bit<8> c; bit<8> d; }
struct headers_t { h_t h; h_t h2; }
struct meta_t { bit<8> m; }


parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
state start { pkt.extract(hdr.h); transition accept; }
}
control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply {  } }
control MyIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {

apply {
  sm.egress_spec = 1;
  hdr.h2 = hdr.h.a == 1 ? hdr.h : hdr.h2;

}
}
control MyEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {

apply {  }
}
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply {  } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr); } }
V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(), MyDeparser()) main;
