// The program of snic-p4rt's tests: one of every object P4Runtime reaches.
#include <core.p4>
#include <v1model.p4>

const bit<9> CPU_PORT = 255;

@controller_header("packet_in")
header packet_in_t {
    bit<9> ingress_port;
    bit<7> _pad;
}

@controller_header("packet_out")
header packet_out_t {
    bit<9> egress_port;
    bit<7> _pad;
}

header ethernet_t {
    bit<48> dst;
    bit<48> src;
    bit<16> etype;
}

struct headers_t {
    packet_out_t po;
    packet_in_t pi;
    ethernet_t eth;
}

struct learn_t {
    bit<48> src;
    bit<9> port;
}

struct meta_t {
    bit<1> special;
}

parser P(packet_in pkt, out headers_t h, inout meta_t m, inout standard_metadata_t s) {
    value_set<bit<16>>(4) special_types;
    state start {
        transition select(s.ingress_port) {
            CPU_PORT: po;
            default: eth;
        }
    }
    state po {
        pkt.extract(h.po);
        transition eth;
    }
    state eth {
        pkt.extract(h.eth);
        transition select(h.eth.etype) {
            special_types: special;
            default: accept;
        }
    }
    state special {
        m.special = 1;
        transition accept;
    }
}

control NoCk(inout headers_t h, inout meta_t m) {
    apply {}
}

control I(inout headers_t h, inout meta_t m, inout standard_metadata_t s) {
    counter(16, CounterType.packets_and_bytes) port_ctr;
    register<bit<32>>(8) seen;
    meter(4, MeterType.packets) rate;
    direct_counter(CounterType.packets_and_bytes) fwd_ctr;
    action_selector(HashAlgorithm.crc16, 32w64, 32w14) sel;

    action drop() {
        mark_to_drop(s);
    }
    action forward(bit<9> port) {
        s.egress_spec = port;
    }
    action to_cpu() {
        s.egress_spec = CPU_PORT;
    }
    table fwd {
        key = { h.eth.dst: exact; }
        actions = { forward; drop; to_cpu; }
        default_action = drop();
        counters = fwd_ctr;
        support_timeout = true;
        size = 1024;
    }
    action set_mcast(bit<16> grp) {
        s.mcast_grp = grp;
    }
    table acl {
        key = {
            h.eth.src: ternary;
            h.eth.etype: range;
        }
        actions = { set_mcast; NoAction; }
        default_action = NoAction();
    }
    action lb(bit<9> port) {
        s.egress_spec = port;
    }
    table ecmp {
        key = {
            h.eth.etype: exact;
            h.eth.src: selector;
        }
        actions = { lb; NoAction; }
        implementation = sel;
    }
    apply {
        if (h.po.isValid()) {
            s.egress_spec = h.po.egress_port;
            h.po.setInvalid();
            return;
        }
        port_ctr.count((bit<32>) s.ingress_port);
        seen.write((bit<32>) s.ingress_port & 7, (bit<32>) h.eth.etype);
        if (m.special == 1) {
            s.egress_spec = 7;
            return;
        }
        if (h.eth.etype == 0x9999) {
            digest<learn_t>(1, { h.eth.src, s.ingress_port });
        }
        if (h.eth.etype == 0x8888) {
            ecmp.apply();
            return;
        }
        fwd.apply();
        acl.apply();
    }
}

control E(inout headers_t h, inout meta_t m, inout standard_metadata_t s) {
    apply {
        if (s.egress_port == CPU_PORT) {
            h.pi.setValid();
            h.pi.ingress_port = s.ingress_port;
        }
    }
}

control D(packet_out pkt, in headers_t h) {
    apply {
        pkt.emit(h.pi);
        pkt.emit(h.eth);
    }
}

V1Switch(P(), NoCk(), I(), E(), NoCk(), D()) main;
