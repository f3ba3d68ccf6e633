// Tests: a context read past the end of xdp_md.
// expect: reject
#include "common.h"

SEC("xdp")
int read_ctx_oob(struct xdp_md *ctx)
{
	return *(volatile __u32 *)((char *)ctx + 64);
}
