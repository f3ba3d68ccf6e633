// Tests: a read of a stack slot never written (written in BPF assembly so the compiler
// cannot remove it).
// expect: reject
// kernel-privilege: bpf-only
#include "common.h"

SEC("xdp")
int uninit_stack(struct xdp_md *ctx)
{
	__u64 r;
	asm volatile("%0 = *(u64 *)(r10 - 256)" : "=r"(r));
	return r & 1;
}
