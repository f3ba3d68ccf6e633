// SPDX-License-Identifier: MIT OR Apache-2.0
// udp_firewall: drops IPv4 UDP datagrams to blocked destination ports and IPv4 packets from
// blocked source prefixes; both lists are maps an operator updates at run time (a new DDoS
// signature is one `snic ebpf map update`, no reload).
//
// Maps:
//   blocked_ports  (hash, key u16 destination port in host order, value u64 hit count)
//   blocked_srcs   (LPM trie, key {u32 prefix length, u8[4] address in network order},
//                   value u64 hit count): the source blocklist
//   stats          (array of 3 u64: [0] passed, [1] dropped by port, [2] dropped by source)
// Everything that is not IPv4 passes. Fragments after the first (no UDP header) are checked
// against the source list only.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct src_key {
	__u32 prefixlen;
	__u8 addr[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u16);
	__type(value, __u64);
} blocked_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct src_key);
	__type(value, __u64);
} blocked_srcs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

enum { PASSED, DROPPED_PORT, DROPPED_SOURCE };

static __always_inline int count(__u32 what, int action)
{
	__u64 *n = bpf_map_lookup_elem(&stats, &what);
	if (n)
		__sync_fetch_and_add(n, 1);
	return action;
}

SEC("xdp")
int udp_firewall(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return count(PASSED, XDP_PASS);

	struct src_key key = { .prefixlen = 32 };
	__builtin_memcpy(key.addr, &ip->saddr, 4);
	__u64 *hit = bpf_map_lookup_elem(&blocked_srcs, &key);
	if (hit) {
		__sync_fetch_and_add(hit, 1);
		return count(DROPPED_SOURCE, XDP_DROP);
	}

	if (ip->protocol != IPPROTO_UDP || (ip->frag_off & bpf_htons(0x1fff)))
		return count(PASSED, XDP_PASS);
	struct udphdr *udp = (void *)ip + ip->ihl * 4;
	if ((void *)(udp + 1) > data_end)
		return count(PASSED, XDP_PASS);
	__u16 port = bpf_ntohs(udp->dest);
	hit = bpf_map_lookup_elem(&blocked_ports, &port);
	if (hit) {
		__sync_fetch_and_add(hit, 1);
		return count(DROPPED_PORT, XDP_DROP);
	}
	return count(PASSED, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
