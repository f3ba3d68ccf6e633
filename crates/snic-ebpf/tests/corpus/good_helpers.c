// Tests: scalar helpers with the right arguments: ktime, prandom, smp_processor_id.
// expect: accept
#include "common.h"

SEC("xdp")
int helpers(struct xdp_md *ctx)
{
	__u64 t = bpf_ktime_get_ns();
	__u32 r = bpf_get_prandom_u32();
	__u32 cpu = bpf_get_smp_processor_id();
	return (t + r + cpu) & 1 ? XDP_PASS : XDP_PASS;
}
