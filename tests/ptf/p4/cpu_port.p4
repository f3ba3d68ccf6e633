/* cpu_port.p4: packet-in and packet-out through P4Runtime's StreamChannel, for the PTF tests
 * (tests/ptf/cpu_port.py).
 *
 * - A packet from the controller (PacketOut) enters on CPU_PORT with a packet_out header
 *   first: it leaves on packet_out.egress_port, the header removed.
 * - Any other packet is looked up in `punt` by EtherType: send_to_cpu sends it to the
 *   controller (PacketIn) with a packet_in header carrying its ingress port; fwd sends it to a
 *   port; a miss drops it.
 * CPU_PORT is snic's default `--cpu-port` (255).
 */
#include <core.p4>
#include <v1model.p4>

const PortId_t CPU_PORT = 255;

@controller_header("packet_in")
header packet_in_t {
    bit<9> ingress_port;
    bit<7> _pad;
}

@controller_header("packet_out")
header packet_out_t {
    bit<9> egress_port;
    bit<7> _pad;
}

header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }

struct headers_t {
    packet_in_t packet_in;
    packet_out_t packet_out;
    ethernet_t ethernet;
}
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        transition select(standard_metadata.ingress_port) {
            CPU_PORT: parse_packet_out;
            default: parse_ethernet;
        }
    }
    state parse_packet_out {
        pkt.extract(hdr.packet_out);
        transition parse_ethernet;
    }
    state parse_ethernet {
        pkt.extract(hdr.ethernet);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    action drop() {
        mark_to_drop(standard_metadata);
    }
    action send_to_cpu() {
        standard_metadata.egress_spec = CPU_PORT;
        hdr.packet_in.setValid();
        hdr.packet_in.ingress_port = standard_metadata.ingress_port;
        hdr.packet_in._pad = 0;
    }
    action fwd(PortId_t port) {
        standard_metadata.egress_spec = port;
    }
    table punt {
        key = { hdr.ethernet.etherType : exact; }
        actions = { send_to_cpu; fwd; drop; }
        default_action = drop();
        size = 64;
    }
    apply {
        if (hdr.packet_out.isValid()) {
            standard_metadata.egress_spec = hdr.packet_out.egress_port;
            hdr.packet_out.setInvalid();
        } else if (hdr.ethernet.isValid()) {
            punt.apply();
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
        pkt.emit(hdr.packet_in);
        pkt.emit(hdr.ethernet);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
