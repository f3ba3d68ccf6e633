/* core_struct_eq_list: a struct compared with a list expression of its fields. */
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<8> b; bit<8> c; bit<8> d; bit<8> e; bit<8> f; bit<8> g; bit<8> h; }
struct pair_t { bit<8> p; bit<8> q; }
struct headers_t { h_t h; }
struct meta_t { pair_t pr; }


parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
state start { pkt.extract(hdr.h); transition accept; }
}
control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply {  } }
control MyIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {

apply {
  sm.egress_spec = 1;
  if (meta.pr == { hdr.h.a, hdr.h.b }) { hdr.h.c = 1; }

}
}
control MyEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {

apply {  }
}
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply {  } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr); } }
V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(), MyDeparser()) main;
