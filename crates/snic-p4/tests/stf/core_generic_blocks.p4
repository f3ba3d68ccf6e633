/* core_generic_blocks: generic parser and control types bound from V1Switch's storage. */
#include <core.p4>
#include <v1model.p4>
header ethernet_t { bit<48> dst; bit<48> src; bit<16> type; }
header ipv4_t { bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> totalLen; bit<16> identification; bit<3> flags; bit<13> fragOffset; bit<8> ttl; bit<8> protocol; bit<16> hdrChecksum; bit<32> srcAddr; bit<32> dstAddr; }
struct headers_t { ethernet_t eth; ipv4_t ipv4; }
struct meta_t { }
parser P<HH>(packet_in pkt, out HH hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.eth); transition select(hdr.eth.type) { 0x800: ipv4; default: accept; } }
    state ipv4 { pkt.extract(hdr.ipv4); transition accept; }
}
control VC(inout headers_t hdr, inout meta_t m) { apply {
  verify_checksum(hdr.ipv4.isValid(), { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen, hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr }, hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
} }
control I<H>(inout H hdr, inout meta_t m, inout standard_metadata_t sm) {
    action drop() { mark_to_drop(sm); }
    action fwd(bit<48> dmac, bit<48> smac, PortId_t port) { hdr.eth.src = smac; hdr.eth.dst = dmac; sm.egress_spec = port; hdr.ipv4.ttl = hdr.ipv4.ttl - 1; }
    table lpm { key = { hdr.ipv4.dstAddr : lpm; } actions = { fwd; drop; } default_action = drop(); }
    apply { if (sm.checksum_error == 1) { drop(); return; } if (hdr.ipv4.isValid() && hdr.ipv4.ttl > 1) { lpm.apply(); } else { drop(); } }
}
control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers_t hdr, inout meta_t m) { apply {
  update_checksum(hdr.ipv4.isValid(), { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen, hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr }, hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
} }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.eth); pkt.emit(hdr.ipv4); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
