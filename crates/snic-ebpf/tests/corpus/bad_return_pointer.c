// Tests: a pointer leaked as the return value (the packet pointer itself).
// expect: reject
// kernel-privilege: bpf-only
#include "common.h"

SEC("xdp")
int return_pointer(struct xdp_md *ctx)
{
	return (long)ctx->data;
}
