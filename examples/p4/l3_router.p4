/* l3_router.p4: an IPv4 router.
 *
 * - The parser takes Ethernet and IPv4 without options (IHL 5); a packet with options stops
 *   the parser with the program's own error IPv4OptionsUnsupported and is dropped in ingress.
 * - MyVerifyChecksum checks the IPv4 header checksum (csum16). BMv2 does not drop a packet
 *   whose checksum is wrong: it sets standard_metadata.checksum_error, and ingress drops it.
 * - ipv4_lpm: longest-prefix match on the destination address; the hit action set_nhop sets
 *   the egress port and the next hop's MAC addresses and decrements the TTL. A miss runs the
 *   default action drop (the control plane may change it).
 * - A packet arriving with TTL 0 or 1 is dropped (it may not be forwarded with TTL 0).
 * - Non-IPv4 packets are dropped.
 * - MyComputeChecksum recomputes the header checksum with update_checksum (csum16).
 */
#include <core.p4>
#include <v1model.p4>

typedef bit<48> mac_t;
typedef bit<32> ip4_t;

error { IPv4OptionsUnsupported }

header ethernet_t { mac_t dstAddr; mac_t srcAddr; bit<16> etherType; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> totalLen;
    bit<16> identification; bit<3> flags; bit<13> fragOffset;
    bit<8> ttl; bit<8> protocol; bit<16> hdrChecksum;
    ip4_t srcAddr; ip4_t dstAddr;
}

struct headers_t { ethernet_t ethernet; ipv4_t ipv4; }
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
        verify(hdr.ipv4.ihl == 5, error.IPv4OptionsUnsupported);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) {
    apply {
        verify_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset,
              hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    action drop() {
        mark_to_drop(standard_metadata);
    }
    action set_nhop(PortId_t port, mac_t smac, mac_t dmac) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.srcAddr = smac;
        hdr.ethernet.dstAddr = dmac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr : lpm; }
        actions = { set_nhop; drop; }
        default_action = drop();
        size = 131072;
    }
    apply {
        if (standard_metadata.parser_error != error.NoError
                || standard_metadata.checksum_error == 1
                || !hdr.ipv4.isValid()
                || hdr.ipv4.ttl <= 1) {
            drop();
            return;
        }
        ipv4_lpm.apply();
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply { }
}

control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset,
              hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
