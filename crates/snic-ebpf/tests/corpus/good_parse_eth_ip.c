// Tests: Ethernet + IPv4 + UDP parsing, every header bounds-checked against data_end
// before it is read; drops UDP to port 9.
// expect: accept
#include "common.h"

SEC("xdp")
int parse_eth_ip(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end)
		return XDP_DROP;
	if (ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	struct udphdr *udp = (void *)ip + ip->ihl * 4;
	if ((void *)(udp + 1) > data_end)
		return XDP_DROP;
	return udp->dest == bpf_htons(9) ? XDP_DROP : XDP_PASS;
}
