/* vxlan.p4: a VXLAN tunnel endpoint (VTEP, RFC 7348).
 *
 * Ports: ACCESS_PORT (1) faces the local hosts (plain Ethernet frames); every other port is the
 * underlay (VXLAN in UDP/IPv4).
 *
 * Encapsulation (a frame from the access port): table vxlan_encap matches the inner
 * destination MAC and gives the VNI, the outer IPv4 source/destination (local and remote VTEP),
 * the outer MACs and the underlay port. The frame gets outer Ethernet / IPv4 / UDP / VXLAN in
 * front of it:
 *   - outer IPv4: version 4, IHL 5, DSCP/ECN 0, total length = frame + 36, identification 0,
 *     DF set, TTL 64, protocol 17; header checksum by update_checksum (csum16);
 *   - outer UDP: source port 49152 + (crc16 of the inner destination MAC, source MAC and
 *     EtherType) mod 16384 (flow entropy, RFC 7348 section 5), destination 4789,
 *     length = frame + 16, checksum 0 (allowed for UDP over IPv4);
 *   - VXLAN: flags 0x08 (VNI valid), VNI from the table, reserved fields 0.
 *   The frame length is standard_metadata.packet_length (the whole frame as received).
 *   A miss drops the frame.
 *
 * Decapsulation (a packet from the underlay): when it is IPv4/UDP to port 4789 with a VXLAN
 * header, table vxlan_decap matches the outer destination IPv4 (one of our VTEP addresses)
 * and the VNI, and gives the access port the inner frame leaves by; the outer headers are
 * removed. A miss, or anything from the underlay that is not VXLAN, is dropped.
 */
#include <core.p4>
#include <v1model.p4>

const PortId_t ACCESS_PORT = 1;
const bit<16> VXLAN_UDP_PORT = 4789;

header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> totalLen;
    bit<16> identification; bit<3> flags; bit<13> fragOffset;
    bit<8> ttl; bit<8> protocol; bit<16> hdrChecksum;
    bit<32> srcAddr; bit<32> dstAddr;
}
header udp_t { bit<16> srcPort; bit<16> dstPort; bit<16> length; bit<16> checksum; }
header vxlan_t { bit<8> flags; bit<24> reserved; bit<24> vni; bit<8> reserved2; }

struct headers_t {
    ethernet_t outer_ethernet;
    ipv4_t outer_ipv4;
    udp_t outer_udp;
    vxlan_t vxlan;
    ethernet_t inner_ethernet;
}
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        transition select(standard_metadata.ingress_port) {
            ACCESS_PORT: parse_inner_ethernet;
            default: parse_outer_ethernet;
        }
    }
    state parse_outer_ethernet {
        pkt.extract(hdr.outer_ethernet);
        transition select(hdr.outer_ethernet.etherType) {
            0x0800: parse_outer_ipv4;
            default: accept;
        }
    }
    state parse_outer_ipv4 {
        pkt.extract(hdr.outer_ipv4);
        transition select(hdr.outer_ipv4.ihl, hdr.outer_ipv4.protocol) {
            (5, 17): parse_outer_udp;
            default: accept;
        }
    }
    state parse_outer_udp {
        pkt.extract(hdr.outer_udp);
        transition select(hdr.outer_udp.dstPort) {
            VXLAN_UDP_PORT: parse_vxlan;
            default: accept;
        }
    }
    state parse_vxlan {
        pkt.extract(hdr.vxlan);
        transition parse_inner_ethernet;
    }
    state parse_inner_ethernet {
        pkt.extract(hdr.inner_ethernet);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) {
    apply { }
}

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    action drop() {
        mark_to_drop(standard_metadata);
    }

    action encap(bit<24> vni, bit<32> src_ip, bit<32> dst_ip, bit<48> smac, bit<48> dmac,
                 PortId_t port) {
        bit<16> frame_len = (bit<16>)standard_metadata.packet_length;

        hdr.outer_ethernet.setValid();
        hdr.outer_ethernet.dstAddr = dmac;
        hdr.outer_ethernet.srcAddr = smac;
        hdr.outer_ethernet.etherType = 0x0800;

        hdr.outer_ipv4.setValid();
        hdr.outer_ipv4.version = 4;
        hdr.outer_ipv4.ihl = 5;
        hdr.outer_ipv4.diffserv = 0;
        hdr.outer_ipv4.totalLen = frame_len + 20 + 8 + 8;
        hdr.outer_ipv4.identification = 0;
        hdr.outer_ipv4.flags = 0b010;  /* DF */
        hdr.outer_ipv4.fragOffset = 0;
        hdr.outer_ipv4.ttl = 64;
        hdr.outer_ipv4.protocol = 17;
        hdr.outer_ipv4.hdrChecksum = 0;  /* MyComputeChecksum fills it in */
        hdr.outer_ipv4.srcAddr = src_ip;
        hdr.outer_ipv4.dstAddr = dst_ip;

        hdr.outer_udp.setValid();
        hash(hdr.outer_udp.srcPort, HashAlgorithm.crc16, (bit<16>)49152,
             { hdr.inner_ethernet.dstAddr, hdr.inner_ethernet.srcAddr,
               hdr.inner_ethernet.etherType },
             (bit<32>)16384);
        hdr.outer_udp.dstPort = VXLAN_UDP_PORT;
        hdr.outer_udp.length = frame_len + 8 + 8;
        hdr.outer_udp.checksum = 0;

        hdr.vxlan.setValid();
        hdr.vxlan.flags = 0x08;
        hdr.vxlan.reserved = 0;
        hdr.vxlan.vni = vni;
        hdr.vxlan.reserved2 = 0;

        standard_metadata.egress_spec = port;
    }

    table vxlan_encap {
        key = { hdr.inner_ethernet.dstAddr : exact; }
        actions = { encap; drop; }
        default_action = drop();
    }

    action decap(PortId_t port) {
        hdr.outer_ethernet.setInvalid();
        hdr.outer_ipv4.setInvalid();
        hdr.outer_udp.setInvalid();
        hdr.vxlan.setInvalid();
        standard_metadata.egress_spec = port;
    }

    table vxlan_decap {
        key = {
            hdr.outer_ipv4.dstAddr : exact;
            hdr.vxlan.vni : exact;
        }
        actions = { decap; drop; }
        default_action = drop();
    }

    apply {
        if (standard_metadata.ingress_port == ACCESS_PORT) {
            vxlan_encap.apply();
        } else if (hdr.vxlan.isValid() && hdr.inner_ethernet.isValid()) {
            vxlan_decap.apply();
        } else {
            drop();
        }
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply { }
}

control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) {
    apply {
        update_checksum(hdr.outer_ipv4.isValid(),
            { hdr.outer_ipv4.version, hdr.outer_ipv4.ihl, hdr.outer_ipv4.diffserv,
              hdr.outer_ipv4.totalLen, hdr.outer_ipv4.identification, hdr.outer_ipv4.flags,
              hdr.outer_ipv4.fragOffset, hdr.outer_ipv4.ttl, hdr.outer_ipv4.protocol,
              hdr.outer_ipv4.srcAddr, hdr.outer_ipv4.dstAddr },
            hdr.outer_ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.outer_ethernet);
        pkt.emit(hdr.outer_ipv4);
        pkt.emit(hdr.outer_udp);
        pkt.emit(hdr.vxlan);
        pkt.emit(hdr.inner_ethernet);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
