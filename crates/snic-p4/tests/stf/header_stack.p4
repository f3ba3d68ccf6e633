/* header_stack: a stack of 4 one-byte elements parsed with next / last / lastIndex,
 * push_front, pop_front, size, and a runtime index in a control.
 *
 * Packet: info_t (4 bytes) then elements until one has bos = 1, then the payload.
 * info.op selects what ingress does:
 *   0: nothing
 *   1: push_front(1), then stack[0] = { label 0x55, bos 0 } made valid
 *   2: pop_front(1)
 *   3: runtime index i = info.idx: info.idx = old stack[i].label; stack[i].label = 0x7F
 * Always: info.last_index = lastIndex when the parser stopped (written in the parser),
 *         info.size = stack.size (4).
 * A fifth element makes extract(next) fail with StackOutOfBounds: ingress still runs, with
 * parser_error set, and sets info.op = 0xEE.
 * Everything goes out on port 1.
 */
#include <core.p4>
#include <v1model.p4>

header info_t { bit<8> op; bit<8> idx; bit<8> last_index; bit<8> size; }
header elem_t { bit<7> label; bit<1> bos; }

struct headers_t { info_t info; elem_t[4] stack; }
struct meta_t { }

parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.info);
        transition parse_elem;
    }
    state parse_elem {
        pkt.extract(hdr.stack.next);
        hdr.info.last_index = (bit<8>)hdr.stack.lastIndex;
        transition select(hdr.stack.last.bos) {
            1: accept;
            0: parse_elem;
        }
    }
}

control MyVerifyChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }

control MyIngress(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        standard_metadata.egress_spec = 1;
        hdr.info.size = (bit<8>)hdr.stack.size;
        if (standard_metadata.parser_error == error.StackOutOfBounds) {
            hdr.info.op = 0xEE;
        } else if (hdr.info.op == 1) {
            hdr.stack.push_front(1);
            hdr.stack[0].setValid();
            hdr.stack[0].label = 0x55;
            hdr.stack[0].bos = 0;
        } else if (hdr.info.op == 2) {
            hdr.stack.pop_front(1);
        } else if (hdr.info.op == 3) {
            bit<8> i = hdr.info.idx;
            hdr.info.idx = (bit<8>)hdr.stack[i].label;
            hdr.stack[i].label = 0x7F;
        }
    }
}

control MyEgress(inout headers_t hdr, inout meta_t meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers_t hdr, inout meta_t meta) { apply { } }
control MyDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.info);
        pkt.emit(hdr.stack);
    }
}

V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(), MyComputeChecksum(),
         MyDeparser()) main;
