// Tests: a struct built on the stack (every byte initialised) used as a hash-map key.
// expect: accept
#include "common.h"

struct flow {
	__u32 a;
	__u32 b;
	__u16 c;
	__u16 d;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct flow);
	__type(value, __u32);
} flows SEC(".maps");

SEC("xdp")
int stack_use(struct xdp_md *ctx)
{
	struct flow f;
	__builtin_memset(&f, 0, sizeof(f));
	f.a = ctx->data_end - ctx->data;
	f.c = 7;
	__u32 *v = bpf_map_lookup_elem(&flows, &f);
	if (v)
		return *v;
	__u32 one = 1;
	bpf_map_update_elem(&flows, &f, &one, BPF_ANY);
	return XDP_PASS;
}
