// Tests: IPv6 + TCP parsing with bounds checks; drops TCP SYNs without ACK to port 80.
// expect: accept
#include "common.h"

SEC("xdp")
int ipv6_tcp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	if ((void *)(ip6 + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto != bpf_htons(ETH_P_IPV6) || ip6->nexthdr != IPPROTO_TCP)
		return XDP_PASS;
	struct tcphdr *tcp = (void *)(ip6 + 1);
	if ((void *)(tcp + 1) > data_end)
		return XDP_DROP;
	if (tcp->dest == bpf_htons(80) && tcp->syn && !tcp->ack)
		return XDP_DROP;
	return XDP_PASS;
}
