// Tests: bpf_ringbuf_output of a stack record (every byte initialised).
// expect: accept
#include "common.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} events SEC(".maps");

struct event {
	__u32 len;
	__u32 first;
};

SEC("xdp")
int ringbuf_output(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct event e = { .len = data_end - data, .first = 0 };
	if (data + 4 <= data_end)
		e.first = *(__u32 *)data;
	bpf_ringbuf_output(&events, &e, sizeof(e), 0);
	return XDP_PASS;
}
