// Tests: a packet read with no bounds check at all.
// expect: reject
#include "common.h"

SEC("xdp")
int unchecked_packet_read(struct xdp_md *ctx)
{
	struct ethhdr *eth = (void *)(long)ctx->data;
	return eth->h_proto == bpf_htons(ETH_P_IP) ? XDP_PASS : XDP_DROP;
}
