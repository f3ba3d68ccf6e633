/* registers: a register array read and written by the data plane, keeping state from one
 * packet to the next, and written by the control plane (register_write).
 *
 * Packet: h_t { idx, add, old (32), new (32) }.
 * Ingress: old = acc[idx]; new = old + add; acc[idx] = new. Out on port 1.
 * Registers start at 0.
 */
#include <core.p4>
#include <v1model.p4>

header h_t { bit<8> idx; bit<8> add; bit<32> old; bit<32> new; }

struct headers_t { h_t h; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    register<bit<32>, bit<8>>(16) acc;
    apply {
        standard_metadata.egress_spec = 1;
        bit<32> v;
        acc.read(v, hdr.h.idx);
        hdr.h.old = v;
        v = v + (bit<32>)hdr.h.add;
        hdr.h.new = v;
        acc.write(hdr.h.idx, v);
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
