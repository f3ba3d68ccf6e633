/* counters: an indexed counter (packets and bytes) and a direct counter on a table.
 *
 * Packet: h_t { idx, k }. Ingress counts the packet in pkt_counter[idx] and applies t
 * (exact on k) whose direct counter counts its hits per entry. Out on port 1, unchanged.
 * Byte counts are the packet's length as received (standard_metadata.packet_length).
 * The STF checks the counters with check_counter (BMv2's STF driver ignores these lines; an
 * executor that reads counters can check them).
 */
#include <core.p4>
#include <v1model.p4>

header h_t { bit<8> idx; bit<8> k; }

struct headers_t { h_t h; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    counter<bit<8>>(8, CounterType.packets_and_bytes) pkt_counter;
    direct_counter(CounterType.packets) t_counter;
    action hit() { t_counter.count(); }
    table t {
        key = { hdr.h.k : exact; }
        actions = { hit; NoAction; }
        default_action = NoAction();
        counters = t_counter;
    }
    apply {
        standard_metadata.egress_spec = 1;
        pkt_counter.count(hdr.h.idx);
        t.apply();
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
