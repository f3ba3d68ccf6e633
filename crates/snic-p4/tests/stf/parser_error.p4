/* parser_error: a parser that rejects does not drop the packet in v1model. Ingress runs with
 * standard_metadata.parser_error set, and the headers extracted before the error stay valid.
 *
 * Packet: h_t { version, kind, code } then, for kind 1, x_t (4 bytes).
 *   verify(version == 1, error.BadVersion)   the program's own error
 *   select(kind) { 1: x_t; 3: accept; default: no_match }
 *                                             any other kind: verify(false, error.NoMatch)
 *   (The P4-16 spec says a select with no matching case and no default rejects with NoMatch,
 *   but according to p4c PR 5746 p4c's simple_switch back end lacked the HandleNoMatch pass,
 *   so BMv2 took "no case matches" as accept with no error. The explicit default state keeps
 *   this test independent of that difference.)
 *   extract(x) on fewer than 4 bytes          -> PacketTooShort (x stays invalid)
 * Ingress writes the error into h.code: NoError 0, BadVersion 1, NoMatch 2,
 * PacketTooShort 3; and h.kind |= 0x80 when x is valid. Out on port 1.
 */
#include <core.p4>
#include <v1model.p4>

error { BadVersion }

header h_t { bit<8> version; bit<8> kind; bit<8> code; }
header x_t { bit<32> v; }

struct headers_t { h_t h; x_t x; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.h);
        verify(hdr.h.version == 1, error.BadVersion);
        transition select(hdr.h.kind) {
            1: parse_x;
            3: accept;
            default: no_match;
        }
    }
    state no_match {
        verify(false, error.NoMatch);
        transition accept;  /* never reached: verify(false, ...) always stops the parser */
    }
    state parse_x {
        pkt.extract(hdr.x);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        standard_metadata.egress_spec = 1;
        error e = standard_metadata.parser_error;
        if (e == error.NoError) {
            hdr.h.code = 0;
        } else if (e == error.BadVersion) {
            hdr.h.code = 1;
        } else if (e == error.NoMatch) {
            hdr.h.code = 2;
        } else if (e == error.PacketTooShort) {
            hdr.h.code = 3;
        } else {
            hdr.h.code = 0xFF;
        }
        if (hdr.x.isValid()) {
            hdr.h.kind = hdr.h.kind | 0x80;
        }
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.h);
        pkt.emit(hdr.x);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
