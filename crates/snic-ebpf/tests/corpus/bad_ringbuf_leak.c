// Tests: a ring-buffer record reserved and never submitted nor discarded (a leaked
// reference).
// expect: reject
// known-difference: snic=accept kernel=reject: PREVAIL does not track acquired references,
// so it cannot see a reserved record that is never released; the kernel refuses the program
// ("Unreleased reference"). At run time snic's ring buffer must cope with such a record.
#include "common.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} events SEC(".maps");

SEC("xdp")
int ringbuf_leak(struct xdp_md *ctx)
{
	__u64 *rec = bpf_ringbuf_reserve(&events, 8, 0);
	if (!rec)
		return XDP_PASS;
	*rec = 1;
	return XDP_DROP;
}
