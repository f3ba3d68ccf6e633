// Tests: bpf_redirect to an interface index.
// expect: accept
#include "common.h"

SEC("xdp")
int redirect(struct xdp_md *ctx)
{
	return bpf_redirect(1, 0);
}
