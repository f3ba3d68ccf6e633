// Tests: a loop that never ends (the exit condition reads a stack slot that stays 0).
// expect: reject
#include "common.h"

SEC("xdp")
int unbounded_loop(struct xdp_md *ctx)
{
	volatile __u32 stop = 0;
	__u32 n = 0;
	while (!stop)
		n++;
	return n;
}
