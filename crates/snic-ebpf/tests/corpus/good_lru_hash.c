// Tests: an LRU hash keyed by the IPv4 destination: update on miss, increment on hit.
// expect: accept
#include "common.h"

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} recent SEC(".maps");

SEC("xdp")
int lru_hash(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	if ((void *)(ip + 1) > data_end)
		return XDP_PASS;
	__u32 dst = ip->daddr;
	__u64 *n = bpf_map_lookup_elem(&recent, &dst);
	if (n) {
		__sync_fetch_and_add(n, 1);
	} else {
		__u64 one = 1;
		bpf_map_update_elem(&recent, &dst, &one, BPF_NOEXIST);
	}
	return XDP_PASS;
}
