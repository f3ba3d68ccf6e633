// Tests: bpf_xdp_adjust_tail growth, then a write at data + len, where len <= 64 was
// checked on one copy of the length and clang re-derives the offset from another copy.
// expect: accept
// known-difference: snic=accept kernel=reject: the kernel's bound (len <= 64) lives on the
// register that was compared; clang zero-extends a second copy for the offset, which the
// kernel sees as 0..=0xffffffff, past its 64 KiB packet-offset limit ("R1 offset is outside of
// the packet"). PREVAIL's relational domain knows both copies are equal. good_adjust_tail
// grows the tail and writes at a constant offset, which both accept.
#include "common.h"

SEC("xdp")
int adjust_tail_copy_bound(struct xdp_md *ctx)
{
	__u32 len = ctx->data_end - ctx->data;
	if (len > 64)
		return bpf_xdp_adjust_tail(ctx, -4) ? XDP_ABORTED : XDP_PASS;
	if (bpf_xdp_adjust_tail(ctx, 4))
		return XDP_ABORTED;
	unsigned char *data = (void *)(long)ctx->data;
	unsigned char *end = (void *)(long)ctx->data_end;
	unsigned char *tail = data + len;
	if (tail + 4 > end)
		return XDP_ABORTED;
	__builtin_memset(tail, 0xee, 4);
	return XDP_PASS;
}
