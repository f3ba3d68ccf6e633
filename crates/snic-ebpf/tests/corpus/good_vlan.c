// Tests: 802.1Q tag parsing: drops frames tagged with VLAN 100, checked reads only.
// expect: accept
#include "common.h"

struct vlan_hdr {
	__be16 tci;
	__be16 proto;
};

SEC("xdp")
int vlan(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto != bpf_htons(ETH_P_8021Q))
		return XDP_PASS;
	struct vlan_hdr *v = (void *)(eth + 1);
	if ((void *)(v + 1) > data_end)
		return XDP_DROP;
	return (bpf_ntohs(v->tci) & 0xfff) == 100 ? XDP_DROP : XDP_PASS;
}
