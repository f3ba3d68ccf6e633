/* hash: v1model's hash() with crc16, crc32, identity and csum16, with and without a base and
 * a modulo: result = base + (hash of the data) mod max, truncated to the result's width.
 * The data is the concatenation of the listed fields (byte-aligned here: x:16 ++ y:32).
 *
 * Packet: d_t { x (16), y (32) } then r_t (zeros on input), filled by ingress:
 *   crc16 = hash(crc16, 0, {x, y}, 2^16)          CRC-16/ARC (poly 0x8005 reflected)
 *   crc32 = hash(crc32, 0, {x, y}, 2^32)          CRC-32 (zlib's)
 *   ident = hash(identity, 0, {y}, 2^32)          the data itself
 *   csum  = hash(csum16, 0, {x, y}, 2^16)         ones' complement of the ones' complement sum
 *   mod   = hash(crc32, 100, {x, y}, 1000)        100 + crc32 mod 1000
 *   crc16y = hash(crc16, 0, {y}, 2^16)
 * Out on port 1.
 */
#include <core.p4>
#include <v1model.p4>

header d_t { bit<16> x; bit<32> y; }
header r_t { bit<16> crc16; bit<32> crc32; bit<32> ident; bit<16> csum; bit<16> mod; bit<16> crc16y; }

struct headers_t { d_t d; r_t r; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.d);
        pkt.extract(hdr.r);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        standard_metadata.egress_spec = 1;
        hash(hdr.r.crc16, HashAlgorithm.crc16, 16w0, { hdr.d.x, hdr.d.y }, 32w65536);
        hash(hdr.r.crc32, HashAlgorithm.crc32, 32w0, { hdr.d.x, hdr.d.y }, 64w0x100000000);
        hash(hdr.r.ident, HashAlgorithm.identity, 32w0, { hdr.d.y }, 64w0x100000000);
        hash(hdr.r.csum, HashAlgorithm.csum16, 16w0, { hdr.d.x, hdr.d.y }, 32w65536);
        hash(hdr.r.mod, HashAlgorithm.crc32, 16w100, { hdr.d.x, hdr.d.y }, 32w1000);
        hash(hdr.r.crc16y, HashAlgorithm.crc16, 16w0, { hdr.d.y }, 32w65536);
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.d);
        pkt.emit(hdr.r);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
