/* pna_forward: the PNA_NIC package. The main parser, pre control, main control and main
 * deparser run in order; the packet leaves by the port of the last send_to_port, and is
 * dropped without one or after drop_packet (the last forwarding call wins).
 *
 * Packet: h_t { op, port, dir, pre, sel }.
 *   op 1: send_to_port(port).  op 2: send_to_port(port) then drop_packet().
 *   op 3: drop_packet() then send_to_port(port).
 *   op 4: recirculate() (ignoring a send_to_port) in passes 0 and 1, then in pass 2
 *   send_to_port(port + pass).  op 5: recirculate() every pass: dropped after pass 7.
 *   Anything else: no call (dropped).
 *   dir: the main control's istd.direction (0 NET_TO_HOST, 1 HOST_TO_NET), written back.
 *   pre: the pre control writes 0x77 into meta, which main copies here.
 *   sel: SelectByDirection(istd.direction, 0xa1, 0xb2).
 * Hand-written (no generator): the expectations follow from the rules above.
 */
#include <core.p4>
#include <pna.p4>

header h_t { bit<8> op; bit<32> port; bit<8> dir; bit<8> pre; bit<8> sel; }

struct headers_t { h_t h; }
struct meta_t { bit<8> pre; }

parser MainParserImpl(packet_in pkt, out headers_t hdr, inout meta_t meta,
                      in pna_main_parser_input_metadata_t istd) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control PreControlImpl(in headers_t hdr, inout meta_t meta,
                       in pna_pre_input_metadata_t istd,
                       inout pna_pre_output_metadata_t ostd) {
    apply { meta.pre = 0x77; }
}

control MainControlImpl(inout headers_t hdr, inout meta_t meta,
                        in pna_main_input_metadata_t istd,
                        inout pna_main_output_metadata_t ostd) {
    apply {
        hdr.h.dir = (istd.direction == PNA_Direction_t.HOST_TO_NET) ? 8w1 : 8w0;
        hdr.h.pre = meta.pre;
        hdr.h.sel = SelectByDirection(istd.direction, 8w0xa1, 8w0xb2);
        if (hdr.h.op == 1) {
            send_to_port(hdr.h.port);
        } else if (hdr.h.op == 2) {
            send_to_port(hdr.h.port);
            drop_packet();
        } else if (hdr.h.op == 3) {
            drop_packet();
            send_to_port(hdr.h.port);
        } else if (hdr.h.op == 4) {
            if (istd.pass < 2) {
                send_to_port(hdr.h.port);
                recirculate();
            } else {
                send_to_port(hdr.h.port + (bit<32>) istd.pass);
            }
        } else if (hdr.h.op == 5) {
            recirculate();
        }
    }
}

control MainDeparserImpl(packet_out pkt, in headers_t hdr, in meta_t meta,
                         in pna_main_output_metadata_t ostd) {
    apply { pkt.emit(hdr.h); }
}

PNA_NIC(MainParserImpl(), PreControlImpl(), MainControlImpl(), MainDeparserImpl()) main;
