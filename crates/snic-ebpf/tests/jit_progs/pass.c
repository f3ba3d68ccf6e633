// The trivial program: the fixed cost of one run.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("xdp") int pass(struct xdp_md *ctx) { return XDP_PASS; }
char _license[] SEC("license") = "GPL";
