/* acl.p4: one ACL table with ternary, range and optional keys and priorities, for the PTF
 * tests of P4Runtime's priority rules (tests/ptf/acl.py): of the entries that match, the one
 * with the highest P4Runtime priority wins.
 *
 * - IPv4 (IHL 5) is looked up in `acl` by source and destination address (ternary), UDP
 *   destination port (range; a non-UDP packet has no UDP header and only matches entries
 *   that leave the port out) and IP protocol (optional). fwd(port) forwards; a miss drops.
 * - flood(grp) sends the packet to multicast group grp (replicas set over P4Runtime).
 * - Anything else is dropped.
 * - in_ctr counts packets and bytes by ingress port; acl_ctr (direct) counts each entry's hits.
 */
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> totalLen;
    bit<16> identification; bit<3> flags; bit<13> fragOffset;
    bit<8> ttl; bit<8> protocol; bit<16> hdrChecksum;
    bit<32> srcAddr; bit<32> dstAddr;
}
header udp_t { bit<16> srcPort; bit<16> dstPort; bit<16> length; bit<16> checksum; }

struct headers_t { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            0x0800: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol) {
            (5, 17): parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        pkt.extract(hdr.udp);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    action drop() {
        mark_to_drop(standard_metadata);
    }
    action fwd(PortId_t port) {
        standard_metadata.egress_spec = port;
    }
    action flood(bit<16> grp) {
        standard_metadata.mcast_grp = grp;
    }
    counter(8, CounterType.packets_and_bytes) in_ctr;
    direct_counter(CounterType.packets_and_bytes) acl_ctr;
    table acl {
        key = {
            hdr.ipv4.srcAddr : ternary;
            hdr.ipv4.dstAddr : ternary;
            hdr.udp.dstPort : range;
            hdr.ipv4.protocol : optional;
        }
        actions = { fwd; flood; drop; }
        default_action = drop();
        counters = acl_ctr;
        size = 256;
    }
    apply {
        in_ctr.count((bit<32>)standard_metadata.ingress_port);
        if (hdr.ipv4.isValid() && hdr.ipv4.ihl == 5) {
            acl.apply();
        } else {
            drop();
        }
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }

control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
