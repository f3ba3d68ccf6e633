// Tests: bpf_redirect_map through a DEVMAP, PASS as the fallback action.
// expect: accept
#include "common.h"

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u32);
} ports SEC(".maps");

SEC("xdp")
int devmap_redirect(struct xdp_md *ctx)
{
	__u32 port = (ctx->data_end - ctx->data) & 3;
	return bpf_redirect_map(&ports, port, XDP_PASS);
}
