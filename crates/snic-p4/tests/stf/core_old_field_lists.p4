/* core_old_field_lists: resubmit(data) and recirculate(data), the deprecated forms, keep the fields they name. */
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> op; bit<8> a; bit<8> b; bit<8> c; bit<32> itype; bit<16> rid; bit<8> rs; }
struct headers_t { h_t h; }
struct meta_t { bit<8> kept; bit<8> lost; }
parser P(packet_in pkt, out headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control VC(inout headers_t hdr, inout meta_t m) { apply { } }
control I(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    counter(4, CounterType.packets_and_bytes) cnt;
    register<bit<8>>(4) reg;
    apply {
        cnt.count((bit<32>)hdr.h.op);
        bit<8> r;
        reg.read(r, 0);
        reg.write(0, r + 1);
        hdr.h.c = r;
        sm.egress_spec = 1;
        if (hdr.h.op == 1) { clone(CloneType.I2E, 5); }
        else if (hdr.h.op == 2) {
            if (sm.instance_type == 0) { m.kept = 7; m.lost = 9; resubmit({ m.kept }); }
            else { hdr.h.a = m.kept; hdr.h.b = m.lost; }
        }
        else if (hdr.h.op == 3) { sm.mcast_grp = 1; }
        else if (hdr.h.op == 4) { mark_to_drop(sm); }
        else if (hdr.h.op == 6) { if (m.kept == 3) { hdr.h.a = m.kept; hdr.h.b = m.lost; } }
    }
}
control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    apply {
        hdr.h.itype = sm.instance_type;
        hdr.h.rid = sm.egress_rid;
        if (hdr.h.op == 5 && sm.instance_type == 0) { clone(CloneType.E2E, 5); hdr.h.a = 0x11; }
        if (hdr.h.op == 6 && m.kept == 0) { m.kept = 3; m.lost = 4; recirculate({ m.kept }); }
        if (hdr.h.op == 7) { truncate(3); }
        if (sm.egress_port == 3 && hdr.h.op == 3) { mark_to_drop(sm); }
    }
}
control CC(inout headers_t hdr, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
