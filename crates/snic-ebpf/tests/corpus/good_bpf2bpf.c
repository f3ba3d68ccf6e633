// Tests: bpf-to-bpf calls: two __noinline functions, one taking a packet pointer and the
// end, one a scalar.
// expect: accept
#include "common.h"

static __attribute__((noinline)) int classify(unsigned char *p, unsigned char *end)
{
	if (p + 1 > end)
		return -1;
	return p[0];
}

static __attribute__((noinline)) int to_action(int c)
{
	if (c < 0)
		return XDP_ABORTED;
	return c & 1 ? XDP_DROP : XDP_PASS;
}

SEC("xdp")
int bpf2bpf(struct xdp_md *ctx)
{
	unsigned char *data = (void *)(long)ctx->data;
	unsigned char *end = (void *)(long)ctx->data_end;
	return to_action(classify(data + 12, end));
}
