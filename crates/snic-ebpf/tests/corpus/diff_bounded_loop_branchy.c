// Tests: a real loop (not unrolled) with a constant bound whose body branches on packet
// data: counts the 0xff bytes among the first 64 of the frame, each read checked.
// expect: accept
// known-difference: snic=accept kernel=reject: the kernel walks every path through every
// iteration with exact scalar values (the count differs on each path, so no state is pruned)
// and gives up at its 1,000,000-instruction budget (E2BIG); PREVAIL joins the paths at the
// loop head and proves the bound of 64 iterations. good_bounded_loop is the same loop without
// the data-dependent branch, which both accept.
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
		n += p[i] == 0xff;
	}
	return n > 3 ? XDP_DROP : XDP_PASS;
}
