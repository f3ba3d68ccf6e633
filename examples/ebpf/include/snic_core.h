/* snic NIC-core programs: the context and helpers of SEC("snic/core") programs.
 *
 * A NIC-core program runs on a compute worker over address arguments (ranges of device or
 * host memory the caller resolved and bounds-checked) and up to eight scalars. Argument 0 is
 * readable and writable directly between `data` and `data_end`, with the usual verified
 * pointer checks; every argument can be copied from and to with snic_arg_read/snic_arg_write,
 * which check the range at run time and return -EINVAL (zeroing `dst`) when it does not fit.
 * The program's return value (r0) is the command's result.
 *
 * Keep in step with crates/snic-ebpf/src/core.rs and platform::NIC_CORE_CTX.
 */
#ifndef SNIC_CORE_H
#define SNIC_CORE_H

#include <linux/types.h>

struct snic_core_md {
    __u32 data;          /* start of argument 0 */
    __u32 data_end;      /* end of argument 0 */
    __u32 nargs;         /* number of address arguments */
    __u32 id;            /* the caller's workload id */
    __u64 scalars[8];    /* scalar arguments */
    __u32 arg_len[8];    /* length of each address argument */
};

/* Copies len bytes at offset of address argument arg into dst. 0 or -EINVAL. */
static long (*const snic_arg_read)(__u32 arg, __u32 offset, void *dst, __u32 len) = (void *)0x7000;
/* Copies len bytes from src to offset of address argument arg. 0 or -EINVAL. */
static long (*const snic_arg_write)(__u32 arg, __u32 offset, const void *src, __u32 len) = (void *)0x7001;

#endif
