// Tests: an out-of-bounds packet read: checks 14 bytes, then reads byte 20.
// expect: reject
#include "common.h"

SEC("xdp")
int oob_packet_read(struct xdp_md *ctx)
{
	unsigned char *p = (void *)(long)ctx->data;
	if ((void *)(p + 14) > (void *)(long)ctx->data_end)
		return XDP_PASS;
	return p[20] ? XDP_DROP : XDP_PASS;
}
