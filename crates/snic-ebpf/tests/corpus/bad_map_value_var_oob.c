// Tests: a map value indexed by a packet byte bounded to 0..=4 into a 4-element array
// (off by one: index 4 is past the value).
// expect: reject
#include "common.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32[4]);
} vals SEC(".maps");

SEC("xdp")
int map_value_var_oob(struct xdp_md *ctx)
{
	unsigned char *p = (void *)(long)ctx->data;
	if ((void *)(p + 1) > (void *)(long)ctx->data_end)
		return XDP_PASS;
	__u32 i = p[0];
	if (i > 4)
		return XDP_PASS;
	__u32 k = 0;
	__u32 *v = bpf_map_lookup_elem(&vals, &k);
	if (!v)
		return XDP_PASS;
	return v[i];
}
