// Tests: a helper size argument from an unbounded scalar: bpf_ringbuf_output of a 16-byte
// stack buffer with a length read from the packet.
// expect: reject
#include "common.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} events SEC(".maps");

SEC("xdp")
int helper_unbounded_size(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	if (data + 4 > (void *)(long)ctx->data_end)
		return XDP_PASS;
	__u32 n = *(__u32 *)data;
	__u64 buf[2];
	buf[0] = n;
	buf[1] = ctx->rx_queue_index;
	bpf_ringbuf_output(&events, buf, n, 0);
	return XDP_PASS;
}
