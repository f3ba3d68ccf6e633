// Tests: a helper argument of the wrong type: a scalar (the frame length) passed as the key
// pointer of a map lookup.
// expect: reject
#include "common.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u32);
} vals SEC(".maps");

SEC("xdp")
int helper_key_scalar(struct xdp_md *ctx)
{
	long len = ctx->data_end - ctx->data;
	void *v = bpf_map_lookup_elem(&vals, (void *)len);
	return v ? XDP_DROP : XDP_PASS;
}
