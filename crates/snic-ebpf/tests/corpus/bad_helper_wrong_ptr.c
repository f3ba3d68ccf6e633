// Tests: a helper argument of the wrong type: the context pointer passed where a map is
// expected.
// expect: reject
#include "common.h"

SEC("xdp")
int helper_wrong_ptr(struct xdp_md *ctx)
{
	__u32 k = 0;
	void *v = bpf_map_lookup_elem((void *)ctx, &k);
	return v ? XDP_DROP : XDP_PASS;
}
