// Tests: bpf_csum_diff over a checked 20-byte IPv4 header in the packet, folded to 16 bits
// and compared with zero (a valid header sums to 0xffff).
// expect: accept
#include "common.h"

SEC("xdp")
int csum_diff(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	if ((void *)(ip + 1) > data_end)
		return XDP_PASS;
	__s64 sum = bpf_csum_diff(0, 0, (__be32 *)ip, sizeof(*ip), 0);
	if (sum < 0)
		return XDP_ABORTED;
	__u32 s = sum;
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return s == 0xffff ? XDP_PASS : XDP_DROP;
}
