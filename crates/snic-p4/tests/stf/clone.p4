/* clone: ingress-to-egress (I2E) and egress-to-egress (E2E) clones to mirror sessions.
 *
 * Packet: h_t { op, inst, mark, port }.
 * Ingress: egress_spec = 1; mark = 0x11 (an ingress change);
 *   op 1: clone(I2E, 5);
 *   op 3: clone(I2E, 6), then mark_to_drop: the original is dropped, the clone still goes;
 *   op 4: clone(I2E, 9), a session the control plane never configured: no clone;
 *   op 5: clone(I2E, 8), a session that sends to multicast group 1 (ports 5 and 6).
 * Egress: inst = instance_type, port = egress_port;
 *   op 2 on the original (instance_type 0): clone(E2E, 7).
 * Sessions: 5 -> port 2, 6 -> port 3, 7 -> port 4, 8 -> multicast group 1 (mirroring_add_mc);
 * the copies of a clone to a group keep instance_type 1.
 *
 * What the clones carry (BMv2 simple_switch):
 *   I2E: the packet as it came in, parsed again: ingress changes (mark) are not in it;
 *        metadata is reset; it runs egress with instance_type 1 (PKT_INSTANCE_TYPE_INGRESS_CLONE).
 *   E2E: the headers as egress left them (mark 0x11, inst 0, port 1), metadata reset; it
 *        runs egress again with instance_type 2 (EGRESS_CLONE), which overwrites inst and port.
 */
#include <core.p4>
#include <v1model.p4>

header h_t { bit<8> op; bit<8> inst; bit<8> mark; bit<8> port; }

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
        standard_metadata.egress_spec = 1;
        hdr.h.mark = 0x11;
        if (hdr.h.op == 1) {
            clone(CloneType.I2E, 5);
        } else if (hdr.h.op == 3) {
            clone(CloneType.I2E, 6);
            mark_to_drop(standard_metadata);
        } else if (hdr.h.op == 4) {
            clone(CloneType.I2E, 9);
        } else if (hdr.h.op == 5) {
            clone(CloneType.I2E, 8);
        }
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        hdr.h.inst = (bit<8>)standard_metadata.instance_type;
        hdr.h.port = (bit<8>)standard_metadata.egress_port;
        if (hdr.h.op == 2 && standard_metadata.instance_type == 0) {
            clone(CloneType.E2E, 7);
        }
    }
}
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
