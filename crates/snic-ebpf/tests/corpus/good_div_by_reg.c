// Tests: division and modulo by a register that may be zero (BPF defines x/0 = 0 and
// x%0 = x), and by a constant.
// expect: accept
#include "common.h"

SEC("xdp")
int div_by_reg(struct xdp_md *ctx)
{
	__u32 len = ctx->data_end - ctx->data;
	__u32 q = 1000 / (len & 7);
	__u32 r = 1000 % (len & 7);
	return (q + r + len / 3) & 1 ? XDP_DROP : XDP_PASS;
}
