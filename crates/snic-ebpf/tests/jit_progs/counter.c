// Per-protocol packet counter: an array map indexed by the IPv4 protocol byte (0 for non-IPv4).
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 256);
    __type(key, __u32);
    __type(value, __u64);
} counts SEC(".maps");

SEC("xdp")
int count_proto(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    __u32 key = 0;
    if ((void *)(eth + 1) > end)
        return XDP_PASS;
    if (eth->h_proto == bpf_htons(ETH_P_IP)) {
        struct iphdr *ip = (void *)(eth + 1);
        if ((void *)(ip + 1) > end)
            return XDP_PASS;
        key = ip->protocol;
    }
    __u64 *v = bpf_map_lookup_elem(&counts, &key);
    if (v)
        __sync_fetch_and_add(v, 1);
    return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
