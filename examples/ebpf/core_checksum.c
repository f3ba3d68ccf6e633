// SPDX-License-Identifier: MIT OR Apache-2.0
// core_checksum: a NIC-core kernel (SEC("snic/core")): the Internet checksum (RFC 1071) of
// argument 0, a range of device or host memory (its first 64 KiB), returned as the command's
// result: the one's complement of the folded 16-bit one's-complement sum of the big-endian
// words (an odd last byte padded with zero), as it goes in an IPv4 header. Scalar 0 is an
// initial sum (e.g. a pseudo-header's), 0 for none. When there is an argument 1 of at least
// 2 bytes, the checksum is also written there, big-endian.
//
// The data is copied in 64-byte chunks with snic_arg_read (checked at run time) rather than
// read through data/data_end: a loop over a 64 KiB range with a packet pointer needs bounds
// the verifier loses when it widens the loop.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <snic_core.h>

#define CHUNK 64
#define MAX_CHUNKS 1024

SEC("snic/core")
int core_checksum(struct snic_core_md *ctx)
{
	__u32 len = ctx->arg_len[0];
	__u64 sum = ctx->scalars[0] & 0xffffffff;
	__u8 buf[CHUNK];
	if (len > CHUNK * MAX_CHUNKS)
		len = CHUNK * MAX_CHUNKS;
	for (__u32 off = 0; off < len; off += CHUNK) {
		/* CHUNK, or the 1..CHUNK-1 bytes left (masked so the verifier sees the bound). */
		__u32 n = CHUNK;
		if (len - off < CHUNK)
			n = (len - off) & (CHUNK - 1);
		__builtin_memset(buf, 0, CHUNK);
		if (snic_arg_read(0, off, buf, n))
			return -1;
#pragma unroll
		for (int i = 0; i < CHUNK; i += 2)
			sum += ((__u32)buf[i] << 8) | buf[i + 1];
	}
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	__u16 csum = ~sum & 0xffff;
	if (ctx->nargs > 1 && ctx->arg_len[1] >= 2) {
		__u8 out[2] = { csum >> 8, csum & 0xff };
		snic_arg_write(1, 0, out, 2);
	}
	return csum;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
