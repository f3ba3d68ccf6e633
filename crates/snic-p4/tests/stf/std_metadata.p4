/* std_metadata: the intrinsic metadata a program reads in ingress and egress.
 *
 * Packet: m_t { in_port (16), length (32), eg_port (16), rnd, pe }.
 * Ingress: in_port = ingress_port; length = packet_length (the frame as received, in bytes:
 *   STF frames have no FCS and no padding); egress_spec = ingress_port + 1;
 *   rnd = random(7, 7) (a one-value range: deterministic);
 *   pe = 1 when parser_error is NoError.
 * Egress: eg_port = egress_port. (egress_spec is not observed in egress: v1model leaves its
 * value there unspecified; BMv2 versions differ.)
 */
#include <core.p4>
#include <v1model.p4>

header m_t { bit<16> in_port; bit<32> length; bit<16> eg_port; bit<8> rnd; bit<8> pe; }

struct headers_t { m_t m; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start { pkt.extract(hdr.m); transition accept; }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        hdr.m.in_port = (bit<16>)standard_metadata.ingress_port;
        hdr.m.length = standard_metadata.packet_length;
        standard_metadata.egress_spec = standard_metadata.ingress_port + 1;
        random(hdr.m.rnd, 8w7, 8w7);
        hdr.m.pe = standard_metadata.parser_error == error.NoError ? 8w1 : 8w0;
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) {
    apply {
        hdr.m.eg_port = (bit<16>)standard_metadata.egress_port;
    }
}
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.m); } }

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
