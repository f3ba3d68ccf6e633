// Tests: an out-of-bounds packet write: checks 4 bytes, writes 8.
// expect: reject
#include "common.h"

SEC("xdp")
int packet_write_oob(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	if (data + 4 > (void *)(long)ctx->data_end)
		return XDP_PASS;
	*(__u64 *)data = 0;
	return XDP_PASS;
}
