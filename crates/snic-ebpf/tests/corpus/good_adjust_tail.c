// Tests: bpf_xdp_adjust_tail: trims 4 bytes from frames longer than 64, grows shorter ones
// by 4 and writes the first byte after re-checking the bounds.
// expect: accept
#include "common.h"

SEC("xdp")
int adjust_tail(struct xdp_md *ctx)
{
	__u32 len = ctx->data_end - ctx->data;
	if (len > 64)
		return bpf_xdp_adjust_tail(ctx, -4) ? XDP_ABORTED : XDP_PASS;
	if (bpf_xdp_adjust_tail(ctx, 4))
		return XDP_ABORTED;
	unsigned char *data = (void *)(long)ctx->data;
	unsigned char *end = (void *)(long)ctx->data_end;
	if (data + 1 > end)
		return XDP_ABORTED;
	data[0] = 0xee;
	return XDP_PASS;
}
