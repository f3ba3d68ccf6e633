// Tests: a constant-initialised stack array (clang keeps the initialiser in .rodata.cst16 and
// copies it with map-value loads), then sent with bpf_ringbuf_output.
// expect: accept
#include "common.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} events SEC(".maps");

SEC("xdp")
int const_init(struct xdp_md *ctx)
{
	__u64 buf[2] = { 1, 2 };
	bpf_ringbuf_output(&events, buf, sizeof(buf), 0);
	return (ctx->data_end - ctx->data) & 1 ? XDP_DROP : XDP_PASS;
}
