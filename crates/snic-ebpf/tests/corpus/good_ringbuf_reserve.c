// Tests: bpf_ringbuf_reserve, null check, fill, bpf_ringbuf_submit (the reference is
// released on every path).
// expect: accept
#include "common.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} events SEC(".maps");

SEC("xdp")
int ringbuf_reserve(struct xdp_md *ctx)
{
	__u64 *rec = bpf_ringbuf_reserve(&events, 16, 0);
	if (!rec)
		return XDP_PASS;
	rec[0] = ctx->data_end - ctx->data;
	rec[1] = 0x5a5a;
	bpf_ringbuf_submit(rec, 0);
	return XDP_PASS;
}
