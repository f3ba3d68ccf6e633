// Tests: a stack write below the 512-byte frame.
// expect: reject
#include "common.h"

SEC("xdp")
int stack_oob(struct xdp_md *ctx)
{
	asm volatile("r1 = 0\n\t*(u64 *)(r10 - 520) = r1" ::: "r1", "memory");
	return XDP_PASS;
}
