// Tests: bpf_xdp_adjust_meta reserving 8 bytes of metadata, checked against data before
// the write.
// expect: accept
#include "common.h"

SEC("xdp")
int adjust_meta(struct xdp_md *ctx)
{
	if (bpf_xdp_adjust_meta(ctx, -8))
		return XDP_ABORTED;
	void *meta = (void *)(long)ctx->data_meta;
	void *data = (void *)(long)ctx->data;
	if (meta + 8 > data)
		return XDP_ABORTED;
	*(__u64 *)meta = 0x1122334455667788ULL;
	return XDP_PASS;
}
