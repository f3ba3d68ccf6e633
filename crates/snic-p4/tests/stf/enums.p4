/* enums: a serializable enum (enum bit<8>) as a header field, in select, in a switch
 * statement, as a table key and in casts; a plain enum in a local variable.
 *
 * Packet: h_t { op (Op), v, res, color }.
 *   Parser: op SET also extracts arg_t { bit<8> x }.
 *   Ingress: switch (op) { INC: v = v + 1; DEC: v = v - 1; SET: v = arg.x; default: v = 0xEE }
 *            (an op with no name, such as 0x77, is a legal Op value and takes default);
 *            table by_op (exact on op) from the control plane sets res;
 *            Color c = op == Op.NOP ? Color.Red : Color.Green; color = 1 for Red, 2 for Green.
 *            arg.x = (bit<8>)Op.SET when arg is valid (a cast of an enum member).
 * Out on port 1.
 */
#include <core.p4>
#include <v1model.p4>

enum bit<8> Op { NOP = 0, INC = 1, DEC = 2, SET = 0x10 }
enum Color { Red, Green }

header h_t { Op op; bit<8> v; bit<8> res; bit<8> color; }
header arg_t { bit<8> x; }

struct headers_t { h_t h; arg_t arg; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.h);
        transition select(hdr.h.op) {
            Op.SET: parse_arg;
            default: accept;
        }
    }
    state parse_arg {
        pkt.extract(hdr.arg);
        transition accept;
    }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    action set_res(bit<8> r) { hdr.h.res = r; }
    table by_op {
        key = { hdr.h.op : exact; }
        actions = { set_res; NoAction; }
        default_action = NoAction();
    }
    apply {
        standard_metadata.egress_spec = 1;
        switch (hdr.h.op) {
            Op.INC: { hdr.h.v = hdr.h.v + 1; }
            Op.DEC: { hdr.h.v = hdr.h.v - 1; }
            Op.SET: { hdr.h.v = hdr.arg.x; }
            default: { hdr.h.v = 0xEE; }
        }
        by_op.apply();
        Color c = hdr.h.op == Op.NOP ? Color.Red : Color.Green;
        if (c == Color.Red) {
            hdr.h.color = 1;
        } else {
            hdr.h.color = 2;
        }
        if (hdr.arg.isValid()) {
            hdr.arg.x = (bit<8>)Op.SET;
        }
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.h);
        pkt.emit(hdr.arg);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
