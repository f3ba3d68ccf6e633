/* subparser: a parser instantiated and applied from another parser, with out and inout
 * arguments; a reject in the sub-parser rejects the caller.
 *
 * Packet: h_t { n, count, code } then n option headers opt_t { kind, val } (n = 0, 1 or 2).
 * OptParser first verifies that the next byte (the kind, by lookahead) is not 0, else it
 * rejects with NoMatch before extracting anything; then it extracts one opt_t and counts it
 * (inout). (Rejecting before any change keeps the test independent of whether the out and
 * inout arguments are copied out when a sub-parser rejects.)
 * Two instances parse the first and the second option into hdr.o1 / hdr.o2.
 * Ingress: count = the number counted (meta.count); code = 1 on NoMatch, else 0.
 * Out on port 1.
 */
#include <core.p4>
#include <v1model.p4>

header h_t { bit<8> n; bit<8> count; bit<8> code; }
header opt_t { bit<8> kind; bit<8> val; }

struct headers_t { h_t h; opt_t o1; opt_t o2; }
struct meta_t { bit<8> count; }

parser OptParser(packet_in pkt, out opt_t o, inout bit<8> count) {
    state start {
        verify(pkt.lookahead<bit<8>>() != 0, error.NoMatch);
        pkt.extract(o);
        count = count + 1;
        transition accept;
    }
}

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    OptParser() first;
    OptParser() second;
    state start {
        pkt.extract(hdr.h);
        meta.count = 0;
        transition select(hdr.h.n) {
            0: accept;
            default: parse_first;
        }
    }
    state parse_first {
        first.apply(pkt, hdr.o1, meta.count);
        transition select(hdr.h.n) {
            1: accept;
            default: parse_second;
        }
    }
    state parse_second {
        second.apply(pkt, hdr.o2, meta.count);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        standard_metadata.egress_spec = 1;
        hdr.h.count = meta.count;
        hdr.h.code = standard_metadata.parser_error == error.NoMatch ? 8w1 : 8w0;
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.h);
        pkt.emit(hdr.o1);
        pkt.emit(hdr.o2);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
