// UDP-port firewall: drops IPv4/UDP packets whose destination port is in a hash map and counts
// them per port; everything else passes.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1024);
    __type(key, __u16);
    __type(value, __u64);
} blocked SEC(".maps");

SEC("xdp")
int udp_firewall(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end)
        return XDP_PASS;
    if (eth->h_proto != bpf_htons(ETH_P_IP))
        return XDP_PASS;
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_UDP)
        return XDP_PASS;
    struct udphdr *udp = (void *)ip + ip->ihl * 4;
    if ((void *)(udp + 1) > end)
        return XDP_PASS;
    __u16 port = bpf_ntohs(udp->dest);
    __u64 *hits = bpf_map_lookup_elem(&blocked, &port);
    if (!hits)
        return XDP_PASS;
    __sync_fetch_and_add(hits, 1);
    return XDP_DROP;
}

char _license[] SEC("license") = "GPL";
