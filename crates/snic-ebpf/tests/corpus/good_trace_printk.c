// Tests: bpf_trace_printk through libbpf's bpf_printk (format string on the stack, two
// scalar arguments); GPL-compatible licence, as the kernel requires for this helper.
// expect: accept
#include "common.h"

SEC("xdp")
int trace_printk(struct xdp_md *ctx)
{
	__u32 len = ctx->data_end - ctx->data;
	bpf_printk("len %u queue %u", len, ctx->rx_queue_index);
	return XDP_PASS;
}
