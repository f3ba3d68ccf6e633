/* core_meters: two-rate three-colour meters (RFC 2698) as BMv2 runs them, indexed and direct;
 * an unconfigured meter says GREEN (0). The STF runner advances time 1 ms per packet. */
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> idx; bit<8> color; bit<8> dcolor; }
struct headers_t { h_t h; }
struct meta_t { }
parser P(packet_in pkt, out headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control VC(inout headers_t hdr, inout meta_t m) { apply { } }
control I(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    meter(4, MeterType.packets) mtr;
    direct_meter<bit<8>>(MeterType.packets) dm;
    action read_dm() { dm.read(hdr.h.dcolor); }
    table t { key = { hdr.h.idx : exact; } actions = { read_dm; NoAction; } meters = dm; }
    apply {
        mtr.execute_meter((bit<32>)hdr.h.idx, hdr.h.color);
        t.apply();
        sm.egress_spec = 1;
    }
}
control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers_t hdr, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
