//! XDP programs compiled by clang, run by the interpreter.

use super::*;
use crate::testing::{compile_str, require_clang};
use crate::vm::Worker;

const HDR: &str = "#include <linux/bpf.h>\n#include <linux/if_ether.h>\n#include <linux/ip.h>\n\
                   #include <bpf/bpf_helpers.h>\n#include <bpf/bpf_endian.h>\n";

fn load(name: &str, body: &str) -> (Object, XdpProgram) {
    let src = format!("{HDR}{body}\nchar _license[] SEC(\"license\") = \"GPL\";\n");
    let bytes = compile_str(name, &src, &[]);
    let obj = Object::parse(&bytes, name).expect("parses");
    let maps = MapSet::new(&obj, 2).expect("maps");
    let prog = XdpProgram::load(&obj, None, maps).unwrap_or_else(|e| panic!("{name}: {e}"));
    (obj, prog)
}

/// An Ethernet + IPv4 frame with protocol `proto`, 64 bytes.
fn ipv4(proto: u8) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[23] = proto;
    for (i, b) in f[34..].iter_mut().enumerate() {
        *b = i as u8;
    }
    f
}

#[test]
fn protocol_counter_counts_into_an_array_map() {
    if !require_clang("protocol_counter") {
        return;
    }
    let (_, prog) = load(
        "vm_counter",
        r#"
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, __u32); __type(value, __u64);
         __uint(max_entries, 256); } counts SEC(".maps");
SEC("xdp") int count(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end) return XDP_PASS;
    __u32 key = 0;
    if (eth->h_proto == bpf_htons(ETH_P_IP)) {
        struct iphdr *ip = (void *)(eth + 1);
        if ((void *)(ip + 1) > end) return XDP_PASS;
        key = ip->protocol;
    }
    __u64 *v = bpf_map_lookup_elem(&counts, &key);
    if (v) __sync_fetch_and_add(v, 1);
    return XDP_PASS;
}"#,
    );
    let mut w = Worker::new(1);
    for (proto, n) in [(6u8, 3), (17, 5), (1, 1)] {
        for _ in 0..n {
            let mut p = PacketBuf::from_frame(&ipv4(proto));
            assert_eq!(prog.run(&mut w, &mut p, 1, 0, 0).action, XdpAction::Pass);
        }
    }
    let mut arp = ipv4(0);
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    prog.run(&mut w, &mut PacketBuf::from_frame(&arp), 1, 0, 0);
    let counts = prog.maps().by_name("counts").unwrap();
    let get =
        |k: u32| u64::from_le_bytes(counts.get(&k.to_le_bytes()).unwrap()[..8].try_into().unwrap());
    assert_eq!((get(6), get(17), get(1), get(0), get(2)), (3, 5, 1, 1, 0));
}

#[test]
fn mac_swap_bounces_with_xdp_tx_in_place() {
    if !require_clang("mac_swap") {
        return;
    }
    let (_, prog) = load(
        "vm_macswap",
        r#"
SEC("xdp") int swap(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end) return XDP_DROP;
    unsigned char tmp[ETH_ALEN];
    __builtin_memcpy(tmp, eth->h_dest, ETH_ALEN);
    __builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
    __builtin_memcpy(eth->h_source, tmp, ETH_ALEN);
    return XDP_TX;
}"#,
    );
    let f = ipv4(17);
    let mut p = PacketBuf::from_frame(&f);
    let before = p.data().as_ptr();
    let out = prog.run(&mut Worker::new(0), &mut p, 3, 0, 0);
    assert_eq!(out, XdpOutcome { action: XdpAction::Tx, fault: None });
    assert_eq!(&p.data()[..6], &f[6..12]);
    assert_eq!(&p.data()[6..12], &f[..6]);
    assert_eq!(&p.data()[12..], &f[12..]);
    assert_eq!(p.data().as_ptr(), before, "in place");
    // Too short: dropped.
    let mut short = PacketBuf::from_frame(&[0; 10]);
    assert_eq!(prog.run(&mut Worker::new(0), &mut short, 3, 0, 0).action, XdpAction::Drop);
}

#[test]
fn adjust_head_meta_and_tail_move_the_window_with_kernel_limits() {
    if !require_clang("adjust") {
        return;
    }
    // scalars: how much to move, taken from the first bytes of the frame.
    let (_, prog) = load(
        "vm_adjust",
        r#"
SEC("xdp") int adj(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    if (data + 16 > end) return XDP_ABORTED;
    int head = *(__s16 *)data, meta = *(__s16 *)(data + 2), tail = *(__s16 *)(data + 4);
    int r1 = bpf_xdp_adjust_meta(ctx, meta);
    int r2 = bpf_xdp_adjust_head(ctx, head);
    int r3 = bpf_xdp_adjust_tail(ctx, tail);
    data = (void *)(long)ctx->data; end = (void *)(long)ctx->data_end;
    void *md = (void *)(long)ctx->data_meta;
    if (md + 4 <= data) *(__u32 *)md = 0xfeedf00d;
    if (data + 16 > end) return XDP_PASS;
    ((__s32 *)data)[1] = r1; ((__s32 *)data)[2] = r2; ((__s32 *)data)[3] = r3;
    return XDP_PASS;
}"#,
    );
    let run = |head: i16, meta: i16, tail: i16, len: usize| {
        let mut f: Vec<u8> = (0..len).map(|i| i as u8).collect();
        f[..2].copy_from_slice(&head.to_le_bytes());
        f[2..4].copy_from_slice(&meta.to_le_bytes());
        f[4..6].copy_from_slice(&tail.to_le_bytes());
        let mut p = test_run_buf(&f);
        let out = prog.run(&mut Worker::new(0), &mut p, 1, 0, 0);
        assert_eq!(out.action, XdpAction::Pass, "{out:?}");
        let d = p.data().to_vec();
        let r = |k: usize| i32::from_le_bytes(d[4 * k..4 * k + 4].try_into().unwrap());
        (p, r(1), r(2), r(3))
    };
    // Meta 8 bytes, strip 14 bytes of header, cut 4 bytes of tail.
    let (p, r1, r2, r3) = run(14, -8, -4, 100);
    assert_eq!((r1, r2, r3), (0, 0, 0));
    assert_eq!(p.len(), 100 - 14 - 4);
    assert_eq!(p.headroom(), XDP_PACKET_HEADROOM + 14);
    assert_eq!(p.meta_len(), 8);
    assert_eq!(&p.data_meta()[..4], &0xfeedf00du32.to_le_bytes());
    assert_eq!(p.data()[0], 14, "the frame now starts at old byte 14");
    // Metadata must be a multiple of 4 and fit the headroom (less the 40 reserved bytes); the
    // expected values are Linux 6.18's for the same program and frames.
    let (_, r1, ..) = run(0, -6, 0, 100);
    assert_eq!(r1, -13);
    let (p, r1, ..) = run(0, -36, 0, 100);
    assert_eq!((r1, p.meta_len()), (0, 36));
    let (p, r1, ..) = run(0, -216, 0, 100);
    assert_eq!((r1, p.meta_len()), (0, 216));
    let (p, r1, ..) = run(0, -220, 0, 100);
    assert_eq!((r1, p.meta_len()), (-22, 0));
    // Head: at most headroom - 40 bytes of growth, never past data_end - 14.
    let (p, _, r2, _) = run(-216, 0, 0, 100);
    assert_eq!((r2, p.headroom()), (0, 40));
    let (_, _, r2, _) = run(-217, 0, 0, 100);
    assert_eq!(r2, -22);
    let (_, _, r2, _) = run(87, 0, 0, 100);
    assert_eq!(r2, -22, "would leave fewer than 14 bytes");
    // Head growth with metadata: the metadata moves along and counts against the room.
    let (p, r1, r2, _) = run(-200, -16, 0, 100);
    assert_eq!((r1, r2), (0, 0));
    assert_eq!(p.meta_len(), 16);
    let (_, r1, r2, _) = run(-208, -16, 0, 100);
    assert_eq!((r1, r2), (0, -22));
    // Tail: grows into the tailroom (zeroed), never past the buffer, never below 14 bytes.
    let (p, .., r3) = run(0, 0, 50, 100);
    assert_eq!((r3, p.len()), (0, 150));
    assert!(p.data()[100..].iter().all(|&b| b == 0));
    let (.., r3) = run(0, 0, (TEST_RUN_FRAME_ROOM - 99) as i16, 100);
    assert_eq!(r3, -22);
    let (p, .., r3) = run(0, 0, (TEST_RUN_FRAME_ROOM - 100) as i16, 100);
    assert_eq!((r3, p.len()), (0, TEST_RUN_FRAME_ROOM));
    let (.., r3) = run(0, 0, -87, 100);
    assert_eq!(r3, -22);
}

#[test]
fn ringbuf_output_reserve_submit_and_discard() {
    if !require_clang("ringbuf") {
        return;
    }
    let (_, prog) = load(
        "vm_ringbuf",
        r#"
struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 4096); } events SEC(".maps");
SEC("xdp") int rb(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    if (data + 8 > end) return XDP_DROP;
    bpf_ringbuf_output(&events, data, 8, 0);
    __u32 *r = bpf_ringbuf_reserve(&events, 8, 0);
    if (!r) return XDP_ABORTED;
    r[0] = ctx->ingress_ifindex; r[1] = ctx->rx_queue_index;
    if (((unsigned char *)data)[0] == 0xdd) bpf_ringbuf_discard(r, 0);
    else bpf_ringbuf_submit(r, 0);
    return XDP_PASS;
}"#,
    );
    let mut w = Worker::new(0);
    let mut p = PacketBuf::from_frame(&[1, 2, 3, 4, 5, 6, 7, 8, 9]);
    assert_eq!(prog.run(&mut w, &mut p, 7, 3, 0).action, XdpAction::Pass);
    let mut p = PacketBuf::from_frame(&[0xdd, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(prog.run(&mut w, &mut p, 7, 3, 0).action, XdpAction::Pass);
    let events = prog.maps().by_name("events").unwrap().ringbuf_drain(16);
    let mut rec = 7u32.to_le_bytes().to_vec();
    rec.extend(3u32.to_le_bytes());
    assert_eq!(
        events,
        vec![vec![1, 2, 3, 4, 5, 6, 7, 8], rec, vec![0xdd, 2, 3, 4, 5, 6, 7, 8]],
        "the discarded record is skipped"
    );
}

#[test]
fn a_leaked_ring_record_is_discarded_at_the_end_of_its_run() {
    if !require_clang("ringbuf leak") {
        return;
    }
    // Leaks its reservation when the first byte is 0x11 (PREVAIL accepts this; the kernel
    // would not), submits otherwise.
    let (_, prog) = load(
        "vm_ringbuf_leak",
        r#"
struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 4096); } events SEC(".maps");
SEC("xdp") int rb(struct xdp_md *ctx) {
    unsigned char *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    if (data + 1 > end) return XDP_DROP;
    __u64 *r = bpf_ringbuf_reserve(&events, 8, 0);
    if (!r) return XDP_ABORTED;
    *r = data[0];
    if (data[0] == 0x11) return XDP_DROP;
    bpf_ringbuf_submit(r, 0);
    return XDP_PASS;
}"#,
    );
    let mut w = Worker::new(0);
    // Far more leaks than the 4 KiB ring could hold if they stayed reserved.
    for i in 0..1000u32 {
        let first = if i % 2 == 0 { 0x11 } else { 0x22 };
        let mut p = PacketBuf::from_frame(&[first, 0, 0, 0]);
        let want = if first == 0x11 { XdpAction::Drop } else { XdpAction::Pass };
        assert_eq!(prog.run(&mut w, &mut p, 1, 0, 0).action, want, "packet {i}");
        if i % 50 == 49 {
            let got = prog.maps().by_name("events").unwrap().ringbuf_drain(1000);
            assert_eq!(got.len(), 25, "every submitted record reaches the consumer (packet {i})");
            assert!(got.iter().all(|r| r[0] == 0x22), "no leaked record is delivered");
        }
    }
    assert_eq!(w.ringbuf_leaked, 500);
}

#[test]
fn redirect_map_and_redirect_choose_ports() {
    if !require_clang("redirect") {
        return;
    }
    let (_, prog) = load(
        "vm_redirect",
        r#"
struct { __uint(type, BPF_MAP_TYPE_DEVMAP); __type(key, __u32); __type(value, __u32);
         __uint(max_entries, 8); } ports SEC(".maps");
SEC("xdp") int redir(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    if (data + 2 > end) return XDP_DROP;
    unsigned char *d = data;
    if (d[0] == 0xff) return bpf_redirect(d[1], 0);
    if (d[0] == 0xfe) return bpf_redirect(d[1], 1);
    if (d[0] == 0xfd) return bpf_redirect_map(&ports, 0, BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS);
    if (d[0] == 0xfc) return bpf_redirect_map(&ports, 1, 1 << 5);
    return bpf_redirect_map(&ports, d[0], XDP_PASS);
}"#,
    );
    prog.maps().by_name("ports").unwrap().set(&1u32.to_le_bytes(), &5u32.to_le_bytes(), 0).unwrap();
    let mut w = Worker::new(0);
    let mut run =
        |a: u8, b: u8| prog.run(&mut w, &mut PacketBuf::from_frame(&[a, b, 0, 0]), 1, 0, 0).action;
    assert_eq!(run(1, 0), XdpAction::Redirect(5));
    assert_eq!(run(2, 0), XdpAction::Pass, "missing entry: the flags' fallback action");
    assert_eq!(run(0xff, 9), XdpAction::Redirect(9));
    assert_eq!(run(0xfe, 9), XdpAction::Aborted, "bpf_redirect takes no flags");
    assert_eq!(run(0xfd, 0), XdpAction::Redirect(crate::helpers::REDIRECT_FLOOD), "broadcast");
    assert_eq!(run(0xfc, 0), XdpAction::Aborted, "unknown flags");
}

#[test]
fn helpers_time_random_cpu_trace_and_global_data() {
    if !require_clang("helpers") {
        return;
    }
    let (_, prog) = load(
        "vm_helpers",
        r#"
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __type(key, __u32); __type(value, __u64);
         __uint(max_entries, 4); } out SEC(".maps");
__u64 hits;
const volatile __u32 answer = 42;
static __attribute__((noinline)) __u64 twice(__u64 x) { return x * 2; }
SEC("xdp") int h(struct xdp_md *ctx) {
    __u32 k0 = 0, k1 = 1, k2 = 2, k3 = 3;
    __u64 t = bpf_ktime_get_ns(), r = bpf_get_prandom_u32(), c = bpf_get_smp_processor_id();
    __u64 a = twice(answer);
    bpf_map_update_elem(&out, &k0, &t, BPF_ANY);
    bpf_map_update_elem(&out, &k1, &r, BPF_ANY);
    bpf_map_update_elem(&out, &k2, &c, BPF_ANY);
    bpf_map_update_elem(&out, &k3, &a, BPF_ANY);
    __sync_fetch_and_add(&hits, 1);
    bpf_printk("len %d hex %x str %s", (int)(ctx->data_end - ctx->data), 0xbeef, "ok");
    return XDP_PASS;
}"#,
    );
    let mut w = Worker::new(1);
    w.seed(1234);
    prog.run(&mut w, &mut PacketBuf::from_frame(&[0; 33]), 1, 0, 123_456);
    prog.run(&mut w, &mut PacketBuf::from_frame(&[0; 20]), 1, 0, 123_999);
    let out = prog.maps().by_name("out").unwrap();
    let get =
        |k: u32| u64::from_le_bytes(out.get(&k.to_le_bytes()).unwrap()[..8].try_into().unwrap());
    assert_eq!(get(0), 123_999);
    let mut seed = 1234u64 | 1;
    crate::helpers::next_random(&mut seed);
    assert_eq!(get(1), u64::from(crate::helpers::next_random(&mut seed)));
    assert_eq!(get(2), 1, "worker index");
    assert_eq!(get(3), 84);
    let bss = prog.maps().by_name(".bss").unwrap();
    assert_eq!(bss.get(&0u32.to_le_bytes()).unwrap()[..8], 2u64.to_le_bytes());
    assert_eq!(w.trace.drain(), vec!["len 33 hex beef str ok", "len 20 hex beef str ok"]);
}

#[test]
fn csum_diff_matches_the_kernel() {
    if !require_clang("csum_diff") {
        return;
    }
    let (_, prog) = load(
        "vm_csum",
        r#"
SEC("xdp") int cs(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    if (data + 64 > end) return XDP_DROP;
    __u32 *w = data;
    __u32 seed = w[0];
    __s64 a = bpf_csum_diff(&w[2], 8, &w[4], 12, seed);
    __s64 b = bpf_csum_diff(0, 0, &w[4], 16, seed);
    __s64 c = bpf_csum_diff(&w[2], 8, 0, 0, seed);
    __s64 d = bpf_csum_diff(&w[1], 3, 0, 0, seed);
    __s64 e = bpf_csum_diff(0, 0, 0, 0, seed);
    __u64 *o = data + 16;
    o[1] = a; o[2] = b; o[3] = c; o[4] = d; o[5] = e;
    return XDP_TX;
}"#,
    );
    // Input and results of this very program under Linux 6.18's BPF_PROG_TEST_RUN.
    let input = "fffe12341a15172e6e8d18ac7e9e33788b68f05cbe76af603aabffcb34b97dce\
                 b0b4cf05b524031d6d608a6dd58b05a200f8528ec879a19e792ade3dea5a6098";
    let bytes: Vec<u8> = (0..input.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&input[i..i + 2], 16).unwrap())
        .collect();
    let mut p = PacketBuf::from_frame(&bytes);
    assert_eq!(prog.run(&mut Worker::new(0), &mut p, 1, 0, 0).action, XdpAction::Tx);
    let got: Vec<u64> = (0..5)
        .map(|k| u64::from_le_bytes(p.data()[24 + 8 * k..32 + 8 * k].try_into().unwrap()))
        .collect();
    assert_eq!(got, vec![0xf6fc, 0xcee8, 0xe2d8, 0x1de1, 0x3312]);
}

#[test]
fn context_fields_and_wrong_program_kinds() {
    if !require_clang("ctx_fields") {
        return;
    }
    let (obj, prog) = load(
        "vm_ctx",
        r#"
SEC("xdp") int c(struct xdp_md *ctx) {
    return ctx->ingress_ifindex == 4 && ctx->rx_queue_index == 2 && ctx->egress_ifindex == 0
        && ctx->data_meta == ctx->data ? XDP_PASS : XDP_DROP;
}"#,
    );
    let mut w = Worker::new(0);
    assert_eq!(
        prog.run(&mut w, &mut PacketBuf::from_frame(&[0; 20]), 4, 2, 0).action,
        XdpAction::Pass
    );
    assert_eq!(
        prog.run(&mut w, &mut PacketBuf::from_frame(&[0; 20]), 4, 1, 0).action,
        XdpAction::Drop
    );
    let maps = MapSet::new(&obj, 1).unwrap();
    let err = crate::core::CoreProgram::load(&obj, Some("xdp"), maps).unwrap_err();
    assert!(matches!(err, LoadFailure::WrongKind { .. }), "{err}");
}

#[test]
fn a_program_the_verifier_refuses_does_not_load() {
    if !require_clang("refused") {
        return;
    }
    let src = format!(
        "{HDR}SEC(\"xdp\") int bad(struct xdp_md *ctx) {{\n\
         unsigned char *d = (void *)(long)ctx->data; return d[20]; }}\n\
         char _license[] SEC(\"license\") = \"GPL\";\n"
    );
    let bytes = compile_str("vm_refused", &src, &[]);
    let obj = Object::parse(&bytes, "vm_refused").unwrap();
    let maps = MapSet::new(&obj, 1).unwrap();
    assert!(matches!(XdpProgram::load(&obj, None, maps), Err(LoadFailure::Refused(_))));
}

mod mutated {
    use super::*;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    /// A compiled object with maps, helpers, packet access and a subprogram.
    fn object() -> Option<&'static [u8]> {
        static OBJ: OnceLock<Option<Vec<u8>>> = OnceLock::new();
        OBJ.get_or_init(|| {
            if !crate::testing::have_clang() {
                return None;
            }
            let src = format!(
                "{HDR}struct {{ __uint(type, BPF_MAP_TYPE_HASH); __type(key, __u32); \
                 __type(value, __u64); __uint(max_entries, 16); }} h SEC(\".maps\");\n\
                 static __attribute__((noinline)) int f(unsigned char *d, void *end) {{\n\
                 if ((void *)(d + 20) > end) return 0; return d[3] + d[19]; }}\n\
                 SEC(\"xdp\") int m(struct xdp_md *ctx) {{\n\
                 void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;\n\
                 __u32 k = f(data, end); __u64 one = 1, *v = bpf_map_lookup_elem(&h, &k);\n\
                 if (v) __sync_fetch_and_add(v, 1); else bpf_map_update_elem(&h, &k, &one, 0);\n\
                 if (data + 14 <= end) bpf_xdp_adjust_head(ctx, 14 - (k & 31));\n\
                 return k & 3; }}\nchar _license[] SEC(\"license\") = \"GPL\";\n"
            );
            Some(compile_str("vm_mutated", &src, &[]))
        })
        .as_deref()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Flipped bytes anywhere in a real object: loading, verifying, preparing and running
        /// end in a typed error or an outcome, never a panic.
        #[test]
        fn mutated_objects_never_panic(
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
            frame in proptest::collection::vec(any::<u8>(), 0..80),
        ) {
            let Some(orig) = object() else { return Ok(()) };
            let mut bytes = orig.to_vec();
            for (at, b) in flips {
                let i = at % bytes.len();
                bytes[i] ^= b;
            }
            if let Ok(obj) = Object::parse(&bytes, "mutated")
                && let Ok(maps) = MapSet::new(&obj, 1)
                && let Ok(p) = XdpProgram::load(&obj, None, maps)
            {
                let mut pkt = PacketBuf::from_frame(&frame);
                let _ = p.run(&mut Worker::new(0), &mut pkt, 1, 0, 0);
                prop_assert!(pkt.headroom() + pkt.len() <= pkt.capacity());
            }
        }
    }

    #[test]
    fn the_unmutated_object_runs() {
        let Some(bytes) = object() else { return };
        let obj = Object::parse(bytes, "m").unwrap();
        let p = XdpProgram::load(&obj, None, MapSet::new(&obj, 1).unwrap()).unwrap();
        let mut f = vec![0u8; 40];
        f[3] = 5;
        f[19] = 2;
        let mut pkt = PacketBuf::from_frame(&f);
        let out = p.run(&mut Worker::new(0), &mut pkt, 1, 0, 0);
        assert_eq!(out.action, XdpAction::Tx, "7 & 3");
        assert_eq!(pkt.len(), 40 - 7, "adjust_head(14 - 7)");
        let h = p.maps().by_name("h").unwrap();
        assert_eq!(h.get(&7u32.to_ne_bytes()).unwrap(), 1u64.to_ne_bytes());
    }
}

#[test]
fn read_only_data_keeps_a_program_in_the_interpreter() {
    if !require_clang("rodata engine") {
        return;
    }
    // PREVAIL accepts this store into `.rodata` (the kernel refuses it): the interpreter
    // must be the default engine, and it must fault on the store.
    let (_, mut prog) = load(
        "vm_rodata_write",
        r#"
static const volatile __u32 limit = 7;
SEC("xdp") int w(struct xdp_md *ctx) {
    *(volatile __u32 *)&limit = 9;
    return limit == 9 ? XDP_DROP : XDP_PASS;
}"#,
    );
    assert_eq!(prog.engine(), crate::Engine::Interpreter);
    let mut w = Worker::new(0);
    let mut p = PacketBuf::from_frame(&[0u8; 60]);
    let out = prog.run(&mut w, &mut p, 1, 0, 0);
    assert_eq!(out.action, XdpAction::Aborted, "{out:?}");
    assert!(matches!(out.fault, Some(Fault::Memory { write: true, .. })), "{out:?}");
    // Asked for by name, the JIT may still run it (documented: nothing then stops the store).
    if cfg!(target_arch = "x86_64") {
        prog.set_engine(crate::Engine::Jit).unwrap();
        assert_eq!(prog.engine(), crate::Engine::Jit);
    }
}

#[test]
fn a_failed_redirect_map_clears_an_earlier_target() {
    if !require_clang("redirect clear") {
        return;
    }
    // bpf_redirect(5) then a devmap miss, then XDP_REDIRECT regardless: as in the kernel the
    // miss cleared the target, so the packet goes nowhere (aborted), not to port 5.
    let (_, prog) = load(
        "vm_redirect_clear",
        r#"
struct { __uint(type, BPF_MAP_TYPE_DEVMAP); __type(key, __u32); __type(value, __u32);
         __uint(max_entries, 8); } ports SEC(".maps");
SEC("xdp") int redir(struct xdp_md *ctx) {
    unsigned char *d = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    if (d + 1 > end) return XDP_DROP;
    bpf_redirect(5, 0);
    if (d[0] == 1) bpf_redirect_map(&ports, 3, XDP_PASS);
    return XDP_REDIRECT;
}"#,
    );
    let mut w = Worker::new(0);
    let mut p = PacketBuf::from_frame(&[0, 0, 0, 0]);
    assert_eq!(prog.run(&mut w, &mut p, 1, 0, 0).action, XdpAction::Redirect(5));
    let mut p = PacketBuf::from_frame(&[1, 0, 0, 0]);
    assert_eq!(prog.run(&mut w, &mut p, 1, 0, 0).action, XdpAction::Aborted);
}
