// Tests: a write to the read-only context (xdp_md.data).
// expect: reject
#include "common.h"

SEC("xdp")
int write_ctx(struct xdp_md *ctx)
{
	*(volatile __u32 *)&ctx->data = 0;
	return XDP_PASS;
}
