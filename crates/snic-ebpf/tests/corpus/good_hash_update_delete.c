// Tests: hash map update, lookup and delete keyed by frame length; the return value of
// update is used.
// expect: accept
#include "common.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u32);
} lens SEC(".maps");

SEC("xdp")
int hash_update_delete(struct xdp_md *ctx)
{
	__u32 len = ctx->data_end - ctx->data;
	__u32 key = len & 15;
	if (key == 0) {
		bpf_map_delete_elem(&lens, &key);
		return XDP_PASS;
	}
	long err = bpf_map_update_elem(&lens, &key, &len, BPF_ANY);
	return err ? XDP_DROP : XDP_PASS;
}
