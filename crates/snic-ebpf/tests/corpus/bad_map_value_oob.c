// Tests: a read past a map value's size (the value is 8 bytes, the read is at offset 8).
// expect: reject
#include "common.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} vals SEC(".maps");

SEC("xdp")
int map_value_oob(struct xdp_md *ctx)
{
	__u32 k = 0;
	__u64 *v = bpf_map_lookup_elem(&vals, &k);
	if (!v)
		return XDP_PASS;
	return *(volatile __u32 *)((char *)v + 8);
}
