/* features.p4: a v1model program for the P4Runtime client tests (tests/p4runtime_clients.rs).
 * It has one of each thing a controller programs or reads:
 *
 * - packet I/O: `packet_out_t` / `packet_in_t` are the @controller_header headers. A
 *   packet-out (it enters on the CPU port, 255 by default) whose `egress_port` is the CPU port
 *   comes straight back as a packet-in with `ingress_port` = the CPU port and `tag` = the
 *   packet-out's tag + 1; any other `egress_port` sends it out of that port.
 * - a digest: a packet-out whose Ethernet type is 0x88b5 also sends `learn_t` (its source
 *   MAC, the port it came in on and its tag) to the controller.
 * - `ingress_ctr`: an indirect counter (packets and bytes) indexed by ingress port.
 * - `tag_reg`: a register; slot 0 holds the tag of the last packet-out.
 * - `port_meter`: an indirect meter (packets), executed on index 1 for every packet.
 * - `l2`: exact on the Ethernet destination, with a direct counter and a direct meter; its
 *   hit actions are applied to packets from the data-plane ports (not to packet-outs).
 * - `acl`: a ternary table (priorities) on EtherType and source MAC, applied first to packets
 *   from the data-plane ports; its `to_cpu` sends the packet to the controller as a packet-in
 *   with `ingress_port` and `tag` 0xbeef. On a miss `ecmp` applies, and on its miss `l2`.
 * - `ecmp`: a table whose entries name members of the action profile `ecmp_ap`.
 */
#include <core.p4>
#include <v1model.p4>

#define CPU_PORT 255

@controller_header("packet_in")
header packet_in_t {
    bit<9> ingress_port;
    bit<7> _pad;
    bit<16> tag;
}

@controller_header("packet_out")
header packet_out_t {
    bit<9> egress_port;
    bit<7> _pad;
    bit<16> tag;
}

header ethernet_t { bit<48> dst; bit<48> src; bit<16> type; }

struct learn_t {
    bit<48> src;
    bit<9> port;
    bit<16> tag;
}

struct headers_t {
    packet_in_t pkt_in;
    packet_out_t pkt_out;
    ethernet_t eth;
}

struct meta_t {
    bit<2> color;
    bit<16> tag;
}

parser P(packet_in pkt, out headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start {
        transition select(sm.ingress_port) {
            CPU_PORT: parse_packet_out;
            default: parse_ethernet;
        }
    }
    state parse_packet_out {
        pkt.extract(hdr.pkt_out);
        transition parse_ethernet;
    }
    state parse_ethernet {
        pkt.extract(hdr.eth);
        transition accept;
    }
}

control VC(inout headers_t hdr, inout meta_t m) { apply { } }

control Ingress(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    counter(512, CounterType.packets_and_bytes) ingress_ctr;
    register<bit<32>>(16) tag_reg;
    meter(16, MeterType.packets) port_meter;
    direct_counter(CounterType.packets_and_bytes) l2_ctr;
    direct_meter<bit<2>>(MeterType.bytes) l2_meter;
    action_profile(32) ecmp_ap;

    action drop() { mark_to_drop(sm); }
    /* A data-plane packet to the controller: a packet-in with tag 0xbeef. */
    action to_cpu() {
        sm.egress_spec = CPU_PORT;
        hdr.pkt_in.setValid();
        hdr.pkt_in.ingress_port = sm.ingress_port;
        hdr.pkt_in._pad = 0;
        hdr.pkt_in.tag = 0xbeef;
    }
    action set_port(PortId_t port) { sm.egress_spec = port; }

    action l2_drop() { l2_meter.read(m.color); mark_to_drop(sm); }
    action l2_fwd(PortId_t port) { l2_meter.read(m.color); sm.egress_spec = port; }

    table l2 {
        key = { hdr.eth.dst : exact; }
        actions = { l2_fwd; l2_drop; }
        default_action = l2_drop();
        counters = l2_ctr;
        meters = l2_meter;
        size = 1024;
    }

    table acl {
        key = { hdr.eth.type : ternary; hdr.eth.src : ternary; }
        actions = { drop; to_cpu; NoAction; }
        default_action = NoAction();
        size = 64;
    }

    table ecmp {
        key = { hdr.eth.dst : exact; }
        actions = { set_port; drop; }
        implementation = ecmp_ap;
        size = 64;
    }

    apply {
        ingress_ctr.count((bit<32>) sm.ingress_port);
        port_meter.execute_meter((bit<32>) 1, m.color);
        if (hdr.pkt_out.isValid()) {
            m.tag = hdr.pkt_out.tag;
            tag_reg.write(0, (bit<32>) hdr.pkt_out.tag);
            if (hdr.eth.type == 0x88b5) {
                digest<learn_t>(1, { hdr.eth.src, sm.ingress_port, hdr.pkt_out.tag });
            }
            if (hdr.pkt_out.egress_port == CPU_PORT) {
                hdr.pkt_in.setValid();
                hdr.pkt_in.ingress_port = sm.ingress_port;
                hdr.pkt_in._pad = 0;
                hdr.pkt_in.tag = hdr.pkt_out.tag + 1;
            }
            sm.egress_spec = hdr.pkt_out.egress_port;
            hdr.pkt_out.setInvalid();
        } else if (!acl.apply().hit) {
            if (!ecmp.apply().hit) {
                l2.apply();
            }
        }
    }
}

control Egress(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers_t hdr, inout meta_t m) { apply { } }

control D(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.pkt_in);
        pkt.emit(hdr.eth);
    }
}

V1Switch(P(), VC(), Ingress(), Egress(), CC(), D()) main;
