// Tests: an LPM-trie lookup keyed by the IPv4 source address (prefix length + address on
// the stack).
// expect: accept
#include "common.h"

struct lpm_key {
	__u32 prefixlen;
	__u32 addr;
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 128);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm_key);
	__type(value, __u32);
} blocked SEC(".maps");

SEC("xdp")
int lpm_trie(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	struct lpm_key k = { .prefixlen = 32, .addr = ip->saddr };
	__u32 *hit = bpf_map_lookup_elem(&blocked, &k);
	if (hit) {
		__sync_fetch_and_add(hit, 1);
		return XDP_DROP;
	}
	return XDP_PASS;
}
