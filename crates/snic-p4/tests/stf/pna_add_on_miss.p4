/* pna_add_on_miss: a table with add_on_miss = true learns from the data plane. Its default
 * action calls add_entry, which adds an entry keyed by the table's key values of this lookup
 * (k), running hit_act with the given parameter; the next packet with that key hits it. The
 * table holds two entries: a third key is not added (add_entry returns false).
 *
 * Packet: h_t { k, r, added }, out on port 1.
 *   hit: r = the learned parameter (k ^ 0xf0), added untouched.
 *   miss: r = 0xee, added = add_entry's result (1 added, 0 not).
 * Hand-written (no generator): the expectations follow from the rules above.
 */
#include <core.p4>
#include <pna.p4>

header h_t { bit<8> k; bit<8> r; bit<8> added; }

struct headers_t { h_t h; }
struct meta_t { }

parser MainParserImpl(packet_in pkt, out headers_t hdr, inout meta_t meta,
                      in pna_main_parser_input_metadata_t istd) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control PreControlImpl(in headers_t hdr, inout meta_t meta,
                       in pna_pre_input_metadata_t istd,
                       inout pna_pre_output_metadata_t ostd) {
    apply { }
}

control MainControlImpl(inout headers_t hdr, inout meta_t meta,
                        in pna_main_input_metadata_t istd,
                        inout pna_main_output_metadata_t ostd) {
    action hit_act(bit<8> v) { hdr.h.r = v; }
    action learn() {
        hdr.h.r = 0xee;
        bool ok = add_entry(action_name = "hit_act",
                            action_params = {hdr.h.k ^ 0xf0},
                            expire_time_profile_id = 0);
        hdr.h.added = ok ? 8w1 : 8w0;
    }
    table flows {
        key = { hdr.h.k : exact; }
        actions = { hit_act; @defaultonly learn; }
        default_action = learn;
        add_on_miss = true;
        size = 2;
    }
    apply {
        flows.apply();
        send_to_port(1);
    }
}

control MainDeparserImpl(packet_out pkt, in headers_t hdr, in meta_t meta,
                         in pna_main_output_metadata_t ostd) {
    apply { pkt.emit(hdr.h); }
}

PNA_NIC(MainParserImpl(), PreControlImpl(), MainControlImpl(), MainDeparserImpl()) main;
