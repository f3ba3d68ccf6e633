/* multicast: standard_metadata.mcast_grp replicates the packet to the ports of a multicast
 * group (set up by the control plane with mc_mgrp_create / mc_node_create /
 * mc_node_associate); each copy runs egress with its egress_port and the node's egress_rid,
 * and instance_type 5 (REPLICATION).
 *
 * Packet: h_t { grp, port, rid, inst }.
 * Ingress: grp != 0: mcast_grp = grp; grp 0: unicast to port 1.
 * Egress: port = egress_port, rid = egress_rid, inst = instance_type.
 */
#include <core.p4>
#include <v1model.p4>

header h_t { bit<8> grp; bit<8> port; bit<16> rid; bit<8> inst; }

struct headers_t { h_t h; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        if (hdr.h.grp != 0) {
            standard_metadata.mcast_grp = (bit<16>)hdr.h.grp;
        } else {
            standard_metadata.egress_spec = 1;
        }
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        hdr.h.port = (bit<8>)standard_metadata.egress_port;
        hdr.h.rid = standard_metadata.egress_rid;
        hdr.h.inst = (bit<8>)standard_metadata.instance_type;
    }
}
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
