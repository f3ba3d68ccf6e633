// Tests: array map lookup with a null check, then an atomic add on the value.
// expect: accept
#include "common.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

SEC("xdp")
int array_lookup(struct xdp_md *ctx)
{
	__u32 key = (ctx->data_end - ctx->data) & 3;
	__u64 *v = bpf_map_lookup_elem(&counts, &key);
	if (!v)
		return XDP_ABORTED;
	__sync_fetch_and_add(v, 1);
	return XDP_PASS;
}
