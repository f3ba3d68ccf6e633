// Tests: reading every readable xdp_md field (data, data_end, data_meta, ingress_ifindex,
// rx_queue_index).
// expect: accept
#include "common.h"

SEC("xdp")
int xdp_md_fields(struct xdp_md *ctx)
{
	__u32 a = ctx->ingress_ifindex;
	__u32 b = ctx->rx_queue_index;
	void *meta = (void *)(long)ctx->data_meta;
	void *data = (void *)(long)ctx->data;
	if (meta > data)
		return XDP_ABORTED;
	return (a + b) == 0xffffffff ? XDP_DROP : XDP_PASS;
}
