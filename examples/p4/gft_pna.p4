/* gft_pna.p4: Azure's GFT (Generic Flow Table, AccelNet, NSDI 2018) as a PNA program.
 *
 * The fast path is one exact-match flow table, `flows`, keyed by the packet's direction, its
 * input port (the VM's vport) and its IPv4 5-tuple. A hit runs the flow's header
 * transposition, `encap`: the one snic's native vSwitch compiles for the default policy's VNET
 * layer (crates/snic-vswitch, `Op::PushEncap` with the VNET mapping's inner MAC):
 *   - inner Ethernet destination = the mapping's MAC;
 *   - outer Ethernet: GW_MAC <- UNDERLAY_MAC, type IPv4;
 *   - outer IPv4: version 4, IHL 5, ECN copied from the inner header (DSCP 0), total length =
 *     inner IPv4 total length + 50, identification 0, DF, TTL 64, protocol 17, source
 *     UNDERLAY_IP, destination the mapping's provider address; header checksum computed
 *     (Hash with ONES_COMPLEMENT16);
 *   - outer UDP: the flow's source port (entropy, computed once by the slow path), destination
 *     4789, length = inner IPv4 total length + 30, checksum 0;
 *   - VXLAN: flags 0x08, the mapping's VNI;
 * and sends the packet to UPLINK_PORT. Each hit also counts the flow (pna_direct_counter) and
 * restarts its expire timer: a flow idle for its expire time profile's time (profile 0: snic's
 * default is 30 s, Switch::set_expire_time_profile changes it) is deleted
 * (pna_idle_timeout = AUTO_DELETE).
 *
 * The slow path plays VFP on a flow's first packet. Pass 0: `flows` misses; the policy
 * tables decide: `acl` (ternary, priorities: allow / deny; default deny), then `vnet` (exact on
 * the inner destination, the customer address: provider address, MAC, VNI; a miss denies). The
 * decision travels in an internal header `sp` in front of the packet, which recirculates.
 * Pass 1: `flows` misses again and its default action `learn` installs the flow with
 * add_entry: `encap` with the decided parameters, or `drop_flow` for a denied flow (denied
 * flows stay on the fast path too, as in GFT). The first packet itself is then transposed
 * (or dropped) by the decision. From the second packet on, `flows` hits.
 *
 * Ports: VM_PORT (0) is the VM's vport; everything else (the network, UPLINK_PORT 1) is
 * dropped here (the decapsulation direction is not part of this example). Non-IPv4 and
 * non-TCP/UDP packets from the VM are dropped.
 */
#include <core.p4>
#include <pna.p4>

const PortId_t VM_PORT = 0;
const PortId_t UPLINK_PORT = 1;
const bit<48> UNDERLAY_MAC = 0x020000000101;
const bit<48> GW_MAC = 0x020000000201;
const bit<32> UNDERLAY_IP = 0xc0a86401;   /* 192.168.100.1 */
const bit<16> VXLAN_PORT = 4789;

header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> totalLen;
    bit<16> identification; bit<3> flags; bit<13> fragOffset;
    bit<8> ttl; bit<8> protocol; bit<16> hdrChecksum;
    bit<32> srcAddr; bit<32> dstAddr;
}
header ports_t { bit<16> srcPort; bit<16> dstPort; }
header udp_t { bit<16> srcPort; bit<16> dstPort; bit<16> length; bit<16> checksum; }
header vxlan_t { bit<8> flags; bit<24> reserved; bit<24> vni; bit<8> reserved2; }

/* The slow path's decision, carried in front of the packet from pass 0 to pass 1. */
header slow_path_t {
    bit<8>  allow;   /* 1: allow */
    bit<32> pa;      /* provider address of the destination */
    bit<48> mac;     /* inner destination MAC */
    bit<24> vni;
    bit<16> sport;   /* outer UDP source port */
}

struct headers_t {
    slow_path_t sp;
    ethernet_t outer_ethernet;
    ipv4_t outer_ipv4;
    udp_t outer_udp;
    vxlan_t vxlan;
    ethernet_t ethernet;
    ipv4_t ipv4;
    ports_t ports;   /* the TCP or UDP ports */
}

struct meta_t { }

parser MainParserImpl(packet_in pkt, out headers_t hdr, inout meta_t meta,
                      in pna_main_parser_input_metadata_t istd) {
    state start {
        transition select(istd.pass) {
            0: parse_ethernet;
            default: parse_slow_path;
        }
    }
    state parse_slow_path {
        pkt.extract(hdr.sp);
        transition parse_ethernet;
    }
    state parse_ethernet {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            0x0800: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.fragOffset, hdr.ipv4.protocol) {
            (5, 0, 6): parse_ports;
            (5, 0, 17): parse_ports;
            default: accept;
        }
    }
    state parse_ports {
        pkt.extract(hdr.ports);
        transition accept;
    }
}

control PreControlImpl(in headers_t hdr, inout meta_t meta,
                       in pna_pre_input_metadata_t istd,
                       inout pna_pre_output_metadata_t ostd) {
    apply { }
}

control MainControlImpl(inout headers_t hdr, inout meta_t meta,
                        in pna_main_input_metadata_t istd,
                        inout pna_main_output_metadata_t ostd) {
    Hash<bit<16>>(PNA_HashAlgorithm_t.ONES_COMPLEMENT16) ip_csum;
    Hash<bit<16>>(PNA_HashAlgorithm_t.CRC16) entropy;
    DirectCounter<bit<64>>(PNA_CounterType_t.PACKETS_AND_BYTES) flow_stats;

    /* The header transposition of an allowed flow. */
    action encap(bit<32> pa, bit<48> mac, bit<24> vni, bit<16> sport) {
        hdr.ethernet.dstAddr = mac;
        hdr.outer_ethernet.setValid();
        hdr.outer_ethernet.dstAddr = GW_MAC;
        hdr.outer_ethernet.srcAddr = UNDERLAY_MAC;
        hdr.outer_ethernet.etherType = 0x0800;
        hdr.outer_ipv4.setValid();
        hdr.outer_ipv4.version = 4;
        hdr.outer_ipv4.ihl = 5;
        hdr.outer_ipv4.diffserv = hdr.ipv4.diffserv & 3;
        hdr.outer_ipv4.totalLen = hdr.ipv4.totalLen + 50;
        hdr.outer_ipv4.flags = 2;
        hdr.outer_ipv4.ttl = 64;
        hdr.outer_ipv4.protocol = 17;
        hdr.outer_ipv4.srcAddr = UNDERLAY_IP;
        hdr.outer_ipv4.dstAddr = pa;
        hdr.outer_udp.setValid();
        hdr.outer_udp.srcPort = sport;
        hdr.outer_udp.dstPort = VXLAN_PORT;
        hdr.outer_udp.length = hdr.ipv4.totalLen + 30;
        hdr.vxlan.setValid();
        hdr.vxlan.flags = 0x08;
        hdr.vxlan.vni = vni;
        restart_expire_timer();
    }

    /* A denied flow's entry. */
    action drop_flow() {
        restart_expire_timer();
    }

    /* The miss action: in pass 1, install the slow path's decision. */
    action learn() {
        if (hdr.sp.isValid()) {
            if (hdr.sp.allow == 1) {
                add_entry("encap", {hdr.sp.pa, hdr.sp.mac, hdr.sp.vni, hdr.sp.sport},
                          (ExpireTimeProfileId_t) 0);
            } else {
                add_entry("drop_flow", {}, (ExpireTimeProfileId_t) 0);
            }
        }
    }

    table flows {
        key = {
            istd.direction : exact;
            istd.input_port : exact;
            hdr.ipv4.srcAddr : exact;
            hdr.ipv4.dstAddr : exact;
            hdr.ipv4.protocol : exact;
            hdr.ports.srcPort : exact;
            hdr.ports.dstPort : exact;
        }
        actions = { encap; drop_flow; @defaultonly learn; }
        default_action = learn;
        size = 65536;
        add_on_miss = true;
        pna_idle_timeout = PNA_IdleTimeout_t.AUTO_DELETE;
        pna_direct_counter = flow_stats;
    }

    /* The slow path's policy. */
    action allow() { hdr.sp.allow = 1; }
    action deny() { hdr.sp.allow = 0; }
    table acl {
        key = {
            hdr.ipv4.srcAddr : ternary;
            hdr.ipv4.dstAddr : ternary;
            hdr.ipv4.protocol : ternary;
            hdr.ports.dstPort : ternary;
        }
        actions = { allow; deny; }
        default_action = deny;
    }

    action map(bit<32> pa, bit<48> mac, bit<24> vni) {
        hdr.sp.pa = pa;
        hdr.sp.mac = mac;
        hdr.sp.vni = vni;
    }
    table vnet {
        key = { hdr.ipv4.dstAddr : exact; }
        actions = { map; deny; }
        default_action = deny;
    }

    apply {
        if (istd.input_port != VM_PORT || !hdr.ports.isValid()) {
            drop_packet();
            return;
        }
        switch (flows.apply().action_run) {
            encap: {
                send_to_port(UPLINK_PORT);
            }
            drop_flow: {
                drop_packet();
            }
            learn: {
                if (hdr.sp.isValid()) {
                    /* Pass 1: the first packet, by the decision just installed. */
                    if (hdr.sp.allow == 1) {
                        encap(hdr.sp.pa, hdr.sp.mac, hdr.sp.vni, hdr.sp.sport);
                        send_to_port(UPLINK_PORT);
                    } else {
                        drop_packet();
                    }
                    hdr.sp.setInvalid();
                } else {
                    /* Pass 0: the slow path decides, and the packet goes round again. */
                    hdr.sp.setValid();
                    hdr.sp.allow = 0;
                    acl.apply();
                    if (hdr.sp.allow == 1) {
                        vnet.apply();
                    }
                    hdr.sp.sport = 0xc000 | (entropy.get_hash({hdr.ipv4.srcAddr,
                        hdr.ipv4.dstAddr, hdr.ipv4.protocol, hdr.ports.srcPort,
                        hdr.ports.dstPort}) & 0x3fff);
                    recirculate();
                }
            }
        }
        if (hdr.outer_ipv4.isValid()) {
            hdr.outer_ipv4.hdrChecksum = ip_csum.get_hash({
                hdr.outer_ipv4.version, hdr.outer_ipv4.ihl, hdr.outer_ipv4.diffserv,
                hdr.outer_ipv4.totalLen, hdr.outer_ipv4.identification, hdr.outer_ipv4.flags,
                hdr.outer_ipv4.fragOffset, hdr.outer_ipv4.ttl, hdr.outer_ipv4.protocol,
                hdr.outer_ipv4.srcAddr, hdr.outer_ipv4.dstAddr});
        }
    }
}

control MainDeparserImpl(packet_out pkt, in headers_t hdr, in meta_t meta,
                         in pna_main_output_metadata_t ostd) {
    apply {
        pkt.emit(hdr.sp);
        pkt.emit(hdr.outer_ethernet);
        pkt.emit(hdr.outer_ipv4);
        pkt.emit(hdr.outer_udp);
        pkt.emit(hdr.vxlan);
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.ports);
    }
}

PNA_NIC(MainParserImpl(), PreControlImpl(), MainControlImpl(), MainDeparserImpl()) main;
