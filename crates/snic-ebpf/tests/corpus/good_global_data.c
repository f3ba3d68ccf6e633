// Tests: global data: a constant table in .rodata, a counter in .data, one in .bss.
// expect: accept
#include "common.h"

static volatile const __u32 verdicts[4] = { XDP_PASS, XDP_DROP, XDP_PASS, XDP_TX };
__u64 seen = 100;
__u64 dropped;

SEC("xdp")
int global_data(struct xdp_md *ctx)
{
	__u32 i = (ctx->data_end - ctx->data) & 3;
	__u32 v = verdicts[i];
	__sync_fetch_and_add(&seen, 1);
	if (v == XDP_DROP)
		__sync_fetch_and_add(&dropped, 1);
	return v;
}
