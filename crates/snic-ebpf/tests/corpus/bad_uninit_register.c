// Tests: a read of a register never written (r7, callee-saved, untouched by the program).
// expect: reject
#include "common.h"

SEC("xdp")
int uninit_register(struct xdp_md *ctx)
{
	__u64 r;
	asm volatile("%0 = r7" : "=r"(r));
	return r & 1;
}
