// Tests: a real loop (not unrolled) with a constant bound, as clang 14 emits it: sums the
// first 64 bytes of the frame, each read checked (no branch on the data inside the loop).
// expect: accept
#include "common.h"

SEC("xdp")
int bounded_loop(struct xdp_md *ctx)
{
	unsigned char *p = (void *)(long)ctx->data;
	unsigned char *end = (void *)(long)ctx->data_end;
	__u32 n = 0;
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < 64; i++) {
		if (p + i + 1 > end)
			break;
		n += p[i];
	}
	return n > 1000 ? XDP_DROP : XDP_PASS;
}
