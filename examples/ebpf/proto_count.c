// SPDX-License-Identifier: MIT OR Apache-2.0
// proto_count: counts packets per IP protocol in an array map and passes every packet.
//
// Map `counts` (array, 257 entries of u64): entry N counts IPv4 packets with protocol N and
// IPv6 packets with next header N (TCP 6, UDP 17, ICMP 1, ICMPv6 58, ...); entry 256 counts
// frames that are not IP (ARP, runts, anything else). One 802.1Q tag is looked through.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define NOT_IP 256

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 257);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

static __always_inline __u32 protocol(void *data, void *data_end)
{
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return NOT_IP;
	__u16 proto = eth->h_proto;
	void *l3 = eth + 1;
	if (proto == bpf_htons(ETH_P_8021Q)) {
		__be16 *tag = l3;
		if ((void *)(tag + 2) > data_end)
			return NOT_IP;
		proto = tag[1];
		l3 = tag + 2;
	}
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = l3;
		if ((void *)(ip + 1) > data_end)
			return NOT_IP;
		return ip->protocol;
	}
	if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;
		if ((void *)(ip6 + 1) > data_end)
			return NOT_IP;
		return ip6->nexthdr;
	}
	return NOT_IP;
}

SEC("xdp")
int proto_count(struct xdp_md *ctx)
{
	__u32 key = protocol((void *)(long)ctx->data, (void *)(long)ctx->data_end);
	__u64 *n = bpf_map_lookup_elem(&counts, &key);
	if (n)
		__sync_fetch_and_add(n, 1);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
