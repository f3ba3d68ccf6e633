/* lookahead_advance: lookahead of a bit<8> and of a header type, advance, verify.
 *
 * Packet: an optional 2-byte preamble starting with 0xAA (skipped with advance(16): the
 * skipped bytes are not emitted, so they disappear from the output), then t_t { ty, res },
 * then, for ty 1, a_t (2 bytes).
 *   start: select(lookahead<bit<8>>()) { 0xAA: skip the preamble; default: parse t }
 *   parse_t: extract t; verify(t.ty != 0, NoMatch); meta.peek = lookahead<a_t>().v
 *            (the 16 bits after t, without consuming them)
 * Ingress: res = the first byte of peek; a packet with a parser error is dropped.
 * Out on port 1.
 */
#include <core.p4>
#include <v1model.p4>

header t_t { bit<8> ty; bit<8> res; }
header a_t { bit<16> v; }

struct headers_t { t_t t; a_t a; }
struct meta_t { bit<16> peek; }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        transition select(pkt.lookahead<bit<8>>()) {
            0xAA: skip_preamble;
            default: parse_t;
        }
    }
    state skip_preamble {
        pkt.advance(16);
        transition parse_t;
    }
    state parse_t {
        pkt.extract(hdr.t);
        verify(hdr.t.ty != 0, error.NoMatch);
        meta.peek = pkt.lookahead<a_t>().v;
        transition select(hdr.t.ty) {
            1: parse_a;
            default: accept;
        }
    }
    state parse_a {
        pkt.extract(hdr.a);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        if (standard_metadata.parser_error != error.NoError) {
            mark_to_drop(standard_metadata);
            return;
        }
        standard_metadata.egress_spec = 1;
        hdr.t.res = meta.peek[15:8];
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.t);
        pkt.emit(hdr.a);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
