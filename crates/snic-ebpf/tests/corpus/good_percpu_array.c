// Tests: a per-CPU array of packet and byte counters (non-atomic updates, as usual with
// per-CPU maps).
// expect: accept
#include "common.h"

struct stats {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stats);
} stats SEC(".maps");

SEC("xdp")
int percpu_array(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct stats *s = bpf_map_lookup_elem(&stats, &zero);
	if (!s)
		return XDP_ABORTED;
	s->packets++;
	s->bytes += ctx->data_end - ctx->data;
	return XDP_PASS;
}
