/* Shared includes of the verifier corpus. Every program states in its header what it tests
 * and the verdict it must get, in lines the cross-check test reads:
 *   expect: accept | reject
 * (optionally `known-difference: <why>` when snic and Linux disagree on purpose). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <linux/tcp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";
