// Tests: a write into .rodata (a read-only global, frozen).
// expect: reject
// known-difference: snic=accept kernel=reject: PREVAIL types global data as a writable
// map value; the kernel knows the frozen, BPF_F_RDONLY_PROG .rodata map is read-only to the
// program. At run time snic's map refuses the store (read-only value memory: a fault).
#include "common.h"

volatile const __u32 limit = 10;

SEC("xdp")
int rodata_write(struct xdp_md *ctx)
{
	*(volatile __u32 *)&limit = 11;
	return XDP_PASS;
}
