// Tests: a loop bounded only by a 32-bit value read from the packet (up to 4 billion
// iterations): no small bound can be proven.
// expect: reject
#include "common.h"

SEC("xdp")
int data_bounded_loop(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	if (data + 4 > (void *)(long)ctx->data_end)
		return XDP_PASS;
	__u32 n = *(__u32 *)data;
	__u32 acc = 0;
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < n; i++)
		acc += i ^ (acc << 1);
	return acc & 1;
}
