// Tests: bpf_xdp_adjust_head pushing 4 bytes, re-reading data/data_end and re-checking
// bounds before writing the new bytes.
// expect: accept
#include "common.h"

SEC("xdp")
int adjust_head(struct xdp_md *ctx)
{
	if (bpf_xdp_adjust_head(ctx, -4))
		return XDP_ABORTED;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	if (data + 4 > data_end)
		return XDP_ABORTED;
	*(__u32 *)data = bpf_htonl(0xdeadbeef);
	return XDP_PASS;
}
