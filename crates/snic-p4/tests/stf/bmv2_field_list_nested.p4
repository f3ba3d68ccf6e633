#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<8> b; bit<8> c; bit<8> d; }
struct inner_t { @field_list(1) bit<8> p; bit<8> q; }
struct headers_t { h_t h; }
struct meta_t { @field_list(1, 2) bit<8> m; bit<8> n; inner_t i; }


parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
state start { pkt.extract(hdr.h); transition accept; }
}
control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply {  } }
control MyIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {

apply {
  sm.egress_spec = 1;
  meta.m = 0x11; meta.n = 0x22; meta.i.p = 0x33; meta.i.q = 0x44;
  if (hdr.h.a == 1) { clone_preserving_field_list(CloneType.I2E, 5, 1); }
  if (hdr.h.a == 2) { clone_preserving_field_list(CloneType.I2E, 5, 2); }

}
}
control MyEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {

apply {   if (sm.instance_type == 1) { hdr.h.b = meta.m; hdr.h.c = meta.n; hdr.h.d = meta.i.p; }
 }
}
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply {  } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr); } }
V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(), MyDeparser()) main;
