/* pna_table: a PNA program whose tables the control plane fills (STF `add`), with PNA's
 * Register, Hash, Counter and DirectCounter externs.
 *
 * Packet: h_t { dst(32), cnt, hash(16) }.
 *   fwd (lpm on dst): send(port) -> send_to_port(port); default drop() -> drop_packet().
 *   cnt: a Register<bit<8>, bit<32>> cell incremented per packet that reaches main (also
 *   the dropped ones), written back.
 *   hash: Hash<bit<16>>(CRC32).get_hash({dst}): CRC-32 of dst's 4 bytes, low 16 bits.
 * Hand-written (hash values: python3 zlib.crc32).
 */
#include <core.p4>
#include <pna.p4>

header h_t { bit<32> dst; bit<8> cnt; bit<16> hash; }

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
    Register<bit<8>, bit<32>>(4) seen;
    Hash<bit<16>>(PNA_HashAlgorithm_t.CRC32) h16;
    Counter<bit<32>, bit<32>>(4, PNA_CounterType_t.PACKETS_AND_BYTES) packets;
    DirectCounter<bit<32>>(PNA_CounterType_t.PACKETS) fwd_hits;

    action send(PortId_t port) { send_to_port(port); }
    action drop() { drop_packet(); }
    table fwd {
        key = { hdr.h.dst : lpm; }
        actions = { send; drop; }
        default_action = drop;
        pna_direct_counter = fwd_hits;
    }
    apply {
        bit<8> c = seen.read(0) + 1;
        seen.write(0, c);
        hdr.h.cnt = c;
        hdr.h.hash = h16.get_hash({hdr.h.dst});
        packets.count(0);
        fwd.apply();
    }
}

control MainDeparserImpl(packet_out pkt, in headers_t hdr, in meta_t meta,
                         in pna_main_output_metadata_t ostd) {
    apply { pkt.emit(hdr.h); }
}

PNA_NIC(MainParserImpl(), PreControlImpl(), MainControlImpl(), MainDeparserImpl()) main;
