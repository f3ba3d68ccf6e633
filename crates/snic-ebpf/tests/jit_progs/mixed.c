// Exercises what the JIT must get right beyond plain ALU: bpf-to-bpf calls, fetch atomics,
// map update through a helper, adjust_head moving ctx->data, and 64-bit arithmetic on
// packet bytes.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 64);
    __type(key, __u32);
    __type(value, __u64);
} seen SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 4);
    __type(key, __u32);
    __type(value, __u64);
} stats SEC(".maps");

static __attribute__((noinline)) __u64 mix(__u64 a, __u64 b)
{
    __u64 x = a * 0x9e3779b97f4a7c15ULL ^ (b >> 3);
    if (b)
        x = x / b + x % (b | 1);
    return x ^ (x << 13) ^ ((__s64)x >> 7);
}

SEC("xdp")
int mixed(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;
    if (data + 16 > end)
        return XDP_ABORTED;
    __u64 a = *(__u64 *)data;
    __u64 b = *(__u64 *)(data + 8);
    __u64 h = mix(a, b);
    __u32 key = (__u32)h & 63;
    __u64 *v = bpf_map_lookup_elem(&seen, &key);
    if (v) {
        __sync_fetch_and_add(v, h);
    } else {
        bpf_map_update_elem(&seen, &key, &h, BPF_ANY);
    }
    __u32 k0 = 0, k1 = 1, k2 = 2;
    __u64 *s0 = bpf_map_lookup_elem(&stats, &k0);
    __u64 *s1 = bpf_map_lookup_elem(&stats, &k1);
    __u64 *s2 = bpf_map_lookup_elem(&stats, &k2);
    if (!s0 || !s1 || !s2)
        return XDP_ABORTED;
    __u64 old = __sync_fetch_and_or(s0, h);
    __sync_fetch_and_xor(s1, old ^ a);
    __sync_fetch_and_and(s2, ~b);
    /* Pop the first 4 bytes when the packet is long enough, then write through the new data. */
    if (bpf_xdp_adjust_head(ctx, 4))
        return XDP_PASS;
    data = (void *)(long)ctx->data;
    end = (void *)(long)ctx->data_end;
    if (data + 4 > end)
        return XDP_DROP;
    *(__u32 *)data = (__u32)h;
    return (h & 1) ? XDP_TX : XDP_PASS;
}

char _license[] SEC("license") = "GPL";
