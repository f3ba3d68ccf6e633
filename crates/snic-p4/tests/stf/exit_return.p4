/* exit_return: exit in an action, return in a control and in an action.
 *
 * Packet: h_t { op, a, b, c, e, sub }.
 * Ingress:
 *   a = 0xA1 (always);
 *   op 1: the action stop() sets b = 0xB1 and exits: nothing after it in ingress runs
 *         (c and sub stay), but egress still runs (exit ends only the current block);
 *   op 2: return from ingress's apply after a: b, c, sub stay;
 *   otherwise: the control Sub runs: for op 3 it sets sub = 0x33 and returns (only Sub
 *         ends: c is still set after it); for other ops sub = 0x44;
 *         the action half() sets b = 0xB2, returns, and the statement after the return
 *         does not run; c = 0xC1.
 * Egress: e = 0xE1 for every packet. Out on port 1.
 */
#include <core.p4>
#include <v1model.p4>

header h_t { bit<8> op; bit<8> a; bit<8> b; bit<8> c; bit<8> e; bit<8> sub; }

struct headers_t { h_t h; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control Sub(inout h_t h) {
    apply {
        if (h.op == 3) {
            h.sub = 0x33;
            return;
        }
        h.sub = 0x44;
    }
}

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    Sub() sub;
    action stop() {
        hdr.h.b = 0xB1;
        exit;
    }
    action half() {
        hdr.h.b = 0xB2;
        return;
        hdr.h.b = 0xB3;
    }
    apply {
        standard_metadata.egress_spec = 1;
        hdr.h.a = 0xA1;
        if (hdr.h.op == 1) {
            stop();
        }
        if (hdr.h.op == 2) {
            return;
        }
        sub.apply(hdr.h);
        half();
        hdr.h.c = 0xC1;
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply { hdr.h.e = 0xE1; }
}
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
