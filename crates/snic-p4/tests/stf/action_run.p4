/* action_run: switch on t.apply().action_run (with a fall-through label and default), and
 * .hit / .miss of apply results.
 *
 * Packet: h_t { k, sw, hit, miss }.
 *   t (exact on k): actions a1, a2, a3, NoAction; default NoAction.
 *     switch (t.apply().action_run) { a1: sw = 1;  a2: a3: sw = 2 (a3 falls through to
 *     a2's block);  default: sw = 3 }  (a miss runs NoAction: default)
 *   u (exact on k): hit -> h.hit = 1, else 2. The table has the same entries under the
 *     action set_hit; a miss runs its default action set_miss, which is still a miss.
 *   v (exact on k): if (v.apply().miss) h.miss = 1; else h.miss = 2.
 * Out on port 1.
 */
#include <core.p4>
#include <v1model.p4>

header h_t { bit<8> k; bit<8> sw; bit<8> hit; bit<8> miss; }

struct headers_t { h_t h; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    action a1() { }
    action a2() { }
    action a3() { }
    table t {
        key = { hdr.h.k : exact; }
        actions = { a1; a2; a3; NoAction; }
        default_action = NoAction();
    }
    action set_hit() { }
    action set_miss() { }
    table u {
        key = { hdr.h.k : exact; }
        actions = { set_hit; set_miss; }
        default_action = set_miss();
    }
    table v {
        key = { hdr.h.k : exact; }
        actions = { NoAction; }
        default_action = NoAction();
    }
    apply {
        standard_metadata.egress_spec = 1;
        switch (t.apply().action_run) {
            a1: { hdr.h.sw = 1; }
            a2:
            a3: { hdr.h.sw = 2; }
            default: { hdr.h.sw = 3; }
        }
        if (u.apply().hit) {
            hdr.h.hit = 1;
        } else {
            hdr.h.hit = 2;
        }
        if (v.apply().miss) {
            hdr.h.miss = 1;
        } else {
            hdr.h.miss = 2;
        }
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
