// SPDX-License-Identifier: MIT OR Apache-2.0
// vxlan_decap: strips the outer Ethernet, IPv4 (without options), UDP (destination port 4789)
// and VXLAN (I flag set) headers with bpf_xdp_adjust_head and passes the inner Ethernet frame
// on. Everything else passes untouched.
//
// Map `stats` (array of 2 u64): [0] frames decapsulated, [1] frames passed as they were.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define VXLAN_PORT 4789
#define VXLAN_I_FLAG 0x08

struct vxlanhdr {
	__u8 flags;
	__u8 reserved1[3];
	__u8 vni[3];
	__u8 reserved2;
};

/* Outer headers removed: Ethernet + IPv4 without options + UDP + VXLAN. */
#define OUTER (sizeof(struct ethhdr) + sizeof(struct iphdr) + sizeof(struct udphdr) + \
	       sizeof(struct vxlanhdr))

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline int count(__u32 what, int action)
{
	__u64 *n = bpf_map_lookup_elem(&stats, &what);
	if (n)
		__sync_fetch_and_add(n, 1);
	return action;
}

SEC("xdp")
int vxlan_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);
	struct vxlanhdr *vx = (void *)(udp + 1);
	/* The outer headers and an inner Ethernet header must all be there. */
	if ((void *)(vx + 1) + sizeof(struct ethhdr) > data_end)
		return count(1, XDP_PASS);
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 || ip->protocol != IPPROTO_UDP ||
	    (ip->frag_off & bpf_htons(0x3fff)) || udp->dest != bpf_htons(VXLAN_PORT) ||
	    !(vx->flags & VXLAN_I_FLAG))
		return count(1, XDP_PASS);
	if (bpf_xdp_adjust_head(ctx, OUTER))
		return XDP_ABORTED;
	return count(0, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
