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

apply {
  sm.egress_spec = 1;
  if (hdr.h.a == 1 && sm.instance_type == 0) { clone(CloneType.I2E, 5); }
  if (hdr.h.a == 2 && sm.instance_type == 0) { resubmit_preserving_field_list(0); }
  if (hdr.h.a == 3) { hdr.h.d = (bit<8>)sm.ingress_port; hdr.h.e = (bit<8>)sm.instance_type; }

}
}
control MyEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {

apply {   hdr.h.b = (bit<8>)sm.ingress_port; hdr.h.c = (bit<8>)sm.instance_type;
  if (hdr.h.a == 3 && hdr.h.f == 0) { hdr.h.f = 1; recirculate_preserving_field_list(0); }
 }
}
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply {  } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr); } }
V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(), MyDeparser()) main;
