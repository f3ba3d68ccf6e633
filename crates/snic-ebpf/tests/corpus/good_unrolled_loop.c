// Tests: a loop fully unrolled by `#pragma unroll` summing the first 16 bytes of the frame
// after one bounds check.
// expect: accept
#include "common.h"

SEC("xdp")
int unrolled_loop(struct xdp_md *ctx)
{
	unsigned char *p = (void *)(long)ctx->data;
	if ((void *)(p + 16) > (void *)(long)ctx->data_end)
		return XDP_PASS;
	__u32 sum = 0;
#pragma unroll
	for (int i = 0; i < 16; i++)
		sum += p[i];
	return sum & 1 ? XDP_DROP : XDP_PASS;
}
