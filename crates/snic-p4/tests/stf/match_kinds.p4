/* match_kinds: exact, ternary with priorities, lpm (with a /0 entry), and optional (BMv2
 * treats it as ternary) tables, filled by the control plane.
 *
 * Packet: h_t { e, t (16), l (32), o, r_tern, r_lpm, r_opt }. Each table writes its result
 * field through a set_* action; a miss leaves it 0 (default NoAction).
 * STF ternary priorities: a larger STF priority wins.
 * Out on port 1.
 */
#include <core.p4>
#include <v1model.p4>

header h_t { bit<8> e; bit<16> t; bit<32> l; bit<8> o; bit<8> r_tern; bit<8> r_lpm; bit<8> r_opt; }

struct headers_t { h_t h; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    action set_tern(bit<8> v) { hdr.h.r_tern = v; }
    action set_lpm(bit<8> v) { hdr.h.r_lpm = v; }
    action set_opt(bit<8> v) { hdr.h.r_opt = v; }
    table t_tern {
        key = { hdr.h.t : ternary; }
        actions = { set_tern; NoAction; }
        default_action = NoAction();
    }
    table t_lpm {
        key = { hdr.h.l : lpm; }
        actions = { set_lpm; NoAction; }
        default_action = NoAction();
    }
    table t_opt {
        key = {
            hdr.h.e : exact;
            hdr.h.o : optional;
        }
        actions = { set_opt; NoAction; }
        default_action = NoAction();
    }
    apply {
        standard_metadata.egress_spec = 1;
        t_tern.apply();
        t_lpm.apply();
        t_opt.apply();
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
