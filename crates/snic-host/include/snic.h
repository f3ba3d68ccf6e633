/*
 * snic.h: C interface of snic's host library (libsnic_host.so, crate snic-host).
 *
 * A host process connects to a running snic (`snic serve --socket PATH`) with snic_open and
 * gets a device handle. Through it: registered host memory (snic_alloc_host), device memory
 * (snic_alloc_dev, snic_write_dev, snic_read_dev), the client's registers (snic_reg_read,
 * snic_reg_write), lookaside kernels (snic_kernel_*: one control FIFO, status FIFO and
 * register set per kernel, completion polled or by interrupt) and DMA queues (snic_queue_*).
 *
 * Return codes: 0 (or a count) on success, a negative SNIC_E_* code on failure; then
 * snic_last_error() gives a message. Handles are opaque. A device handle may be used from
 * several threads; a queue handle by one thread at a time. Buffers and queues stay valid
 * after snic_close of their device (the connection closes when the last one is freed).
 */
#ifndef SNIC_H
#define SNIC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes. */
#define SNIC_E_IO (-1)        /* a system call failed */
#define SNIC_E_REFUSED (-2)   /* snic refused the request (nothing changed) */
#define SNIC_E_PROTOCOL (-3)  /* snic answered something unexpected */
#define SNIC_E_RANGE (-4)     /* an argument is out of range */
#define SNIC_E_RING_FULL (-5) /* no free ring slot */
#define SNIC_E_TIMEOUT (-6)   /* nothing happened in time */
#define SNIC_E_DMA (-7)       /* a DMA transfer completed with an error status */
#define SNIC_E_INVAL (-22)    /* bad argument (null pointer, bad enum value) */

/* Device memory kinds (snic_alloc_dev). */
#define SNIC_MEM_ON_CHIP 0
#define SNIC_MEM_ON_BOARD 1

/* Queue modes (snic_queue_open). */
#define SNIC_QUEUE_MM 0 /* memory-mapped */
#define SNIC_QUEUE_ST 1 /* streaming */

/* Directions (snic_queue_post, snic_queue_doorbell; snic_completion.dir). */
#define SNIC_H2C 0
#define SNIC_C2H 1
#define SNIC_DIR_QUEUE 2 /* completion of a queue-level error */

/* Descriptor flags (snic_queue_post). */
#define SNIC_DESC_SOP 0x1
#define SNIC_DESC_EOP 0x2 /* a completion is written for a transfer ending with EOP */
#define SNIC_DESC_SOP_EOP 0x3

/* Lookaside kernels: ids (snic_kernel_cmd.kernel). aN = address argument N, sN = scalar N. */
#define SNIC_MAX_KERNELS 16
#define SNIC_KERNEL_COPY 0           /* a0 src, a1 dst; result = bytes copied */
#define SNIC_KERNEL_REDUCE 1         /* a0 vector; s0 SNIC_REDUCE_*, s1 dtype; result = value */
#define SNIC_KERNEL_GEMM 2           /* a0 A, a1 B, a2 C; s0 M, s1 N, s2 K, s3 dtype, s4 flags */
#define SNIC_KERNEL_VADD 3           /* a0 x, a1 y, a2 out; s0 dtype */
#define SNIC_KERNEL_VSCALE 4         /* a0 x, a1 out; s0 dtype, s1 alpha, s2 beta */
#define SNIC_KERNEL_GATHER 5         /* a0 list of {addr u64, len u32, 0 u32}, a1 dst; s0 n */
#define SNIC_KERNEL_CRC32C 6         /* a0 data; s0 initial CRC; result = CRC-32C */
#define SNIC_KERNEL_LZ4_COMPRESS 7   /* a0 src, a1 dst; result = compressed bytes */
#define SNIC_KERNEL_LZ4_DECOMPRESS 8 /* a0 LZ4 block, a1 dst; result = bytes */
#define SNIC_KERNEL_EBPF 9           /* s0 NIC-core program slot, s1.. its scalars; a0..a7 its memory; result = r0 */
#define SNIC_KERNEL_MAX_ADDRS 8
#define SNIC_KERNEL_MAX_SCALARS 8
#define SNIC_KERNEL_USER_REGS 8      /* user registers per kernel (snic_kernel_reg_*) */

/* Element types (dtype scalars). */
#define SNIC_DTYPE_I8 0
#define SNIC_DTYPE_F32 1
#define SNIC_DTYPE_I32 2
#define SNIC_DTYPE_U32 3
#define SNIC_DTYPE_I64 4
#define SNIC_DTYPE_U64 5
#define SNIC_DTYPE_F64 6

/* GEMM flags (s4). */
#define SNIC_GEMM_A_COL_MAJOR 1
#define SNIC_GEMM_B_COL_MAJOR 2
#define SNIC_GEMM_C_COL_MAJOR 4
#define SNIC_GEMM_ACCUMULATE 8

/* REDUCE operations (s0). */
#define SNIC_REDUCE_SUM 0
#define SNIC_REDUCE_MIN 1
#define SNIC_REDUCE_MAX 2

/* Kernel status codes (snic_kernel_status.status). */
#define SNIC_KSTATUS_OK 0
#define SNIC_KSTATUS_UNKNOWN_KERNEL 1
#define SNIC_KSTATUS_BAD_ADDRESS 2
#define SNIC_KSTATUS_BAD_LENGTH 3
#define SNIC_KSTATUS_BAD_ARGS 4
#define SNIC_KSTATUS_OVERLAP 5
#define SNIC_KSTATUS_CORRUPT_INPUT 6
#define SNIC_KSTATUS_NO_SPACE 7

/* Registers (byte offsets in the client's register space). */
#define SNIC_REG_ID 0x0000      /* reads 0x534E4943 ("SNIC") */
#define SNIC_REG_VERSION 0x0004
#define SNIC_REG_SCRATCH 0x0008 /* free read/write register */
#define SNIC_REG_CLIENT 0x000C
#define SNIC_REG_KERNELS 0x001C /* one bit per kernel id snic offers */
#define SNIC_ID_VALUE 0x534E4943u
#define SNIC_VERSION_VALUE 2

/* Opaque handles. */
typedef struct snic_dev snic_dev;
typedef struct snic_buf snic_buf;
typedef struct snic_queue snic_queue;

/* One completion entry. */
typedef struct snic_completion {
    uint32_t len;   /* bytes moved */
    uint32_t index; /* ring counter after the transfer */
    uint8_t status; /* 0 = OK, else the DMA error code */
    uint8_t dir;    /* SNIC_H2C, SNIC_C2H or SNIC_DIR_QUEUE */
    uint16_t qid;   /* queue id */
    uint32_t flags; /* completion word: bit 0 colour, bit 1 SOP, bit 2 EOP */
} snic_completion;

/* One address argument of a kernel command. */
typedef struct snic_kernel_arg {
    uint64_t addr; /* host IOVA (snic_buf_iova) or device address */
    uint64_t len;  /* bytes */
} snic_kernel_arg;

/* A kernel command (the control FIFO entry of kernel `kernel`). */
typedef struct snic_kernel_cmd {
    uint32_t workload;  /* caller's id, echoed in the status */
    uint32_t kernel;    /* SNIC_KERNEL_* */
    uint8_t n_addrs;    /* addrs in use, 0 .. 8 */
    uint8_t n_scalars;  /* scalars in use, 0 .. 8 */
    uint8_t reserved[6];
    snic_kernel_arg addrs[SNIC_KERNEL_MAX_ADDRS];
    uint64_t scalars[SNIC_KERNEL_MAX_SCALARS];
} snic_kernel_cmd;

/* A kernel status (the status FIFO entry). */
typedef struct snic_kernel_status {
    uint32_t workload; /* the command's */
    uint32_t status;   /* SNIC_KSTATUS_* */
    uint64_t result;   /* kernel-specific; 0 on error */
    uint64_t busy_ns;  /* time the kernel ran */
} snic_kernel_status;

/* A kernel's counters for this client. */
typedef struct snic_kernel_counters {
    uint32_t runs;
    uint32_t errors;
    uint32_t last_status;
    uint32_t reserved;
    uint64_t busy_ns;
} snic_kernel_counters;

/* Message of the last failure on this thread ("" if none); valid until the next failure. */
const char *snic_last_error(void);

/* Connect to snic's socket at `path` as `name`; *out gets the device handle. */
int snic_open(const char *path, const char *name, snic_dev **out);
/* Close a device handle (NULL is ignored). */
void snic_close(snic_dev *dev);
/* This client's id (negative on error). */
int64_t snic_client_id(const snic_dev *dev);

/* Allocate and register `size` bytes of host memory; *out gets the buffer handle. */
int snic_alloc_host(const snic_dev *dev, size_t size, snic_buf **out);
/* The buffer's memory (the process may read and write it directly). */
void *snic_buf_ptr(const snic_buf *buf);
/* The buffer's IOVA: the address descriptors and kernels use for its first byte. */
uint64_t snic_buf_iova(const snic_buf *buf);
/* The buffer's length in bytes. */
size_t snic_buf_len(const snic_buf *buf);
/* Unregister and unmap a buffer (NULL is ignored). No DMA may still use it. */
void snic_free_host(snic_buf *buf);

/* Allocate device memory (kind SNIC_MEM_*; align a power of two); *addr gets its address. */
int snic_alloc_dev(const snic_dev *dev, int kind, uint64_t size, uint64_t align, uint64_t *addr);
/* Free device memory. */
int snic_free_dev(const snic_dev *dev, uint64_t addr);
/* Copy `len` bytes to device memory at `addr` (DMA through a bounce buffer). */
int snic_write_dev(const snic_dev *dev, uint64_t addr, const void *data, size_t len);
/* Copy `len` bytes of device memory at `addr` to `data` (DMA through a bounce buffer). */
int snic_read_dev(const snic_dev *dev, uint64_t addr, void *data, size_t len);

/* Read the 32-bit register at byte offset `off` (4-aligned). */
int snic_reg_read(const snic_dev *dev, uint32_t off, uint32_t *v);
/* Write the 32-bit register at byte offset `off` (4-aligned). */
int snic_reg_write(const snic_dev *dev, uint32_t off, uint32_t v);

/* Push a command on its kernel's control FIFO (SNIC_E_RING_FULL when full). */
int snic_kernel_submit(const snic_dev *dev, const snic_kernel_cmd *cmd);
/* Take the oldest status of `kernel` without waiting: 1 (*out filled, out may be NULL) or 0. */
int snic_kernel_poll(const snic_dev *dev, uint32_t kernel, snic_kernel_status *out);
/* Wait up to timeout_ms for the status of `workload` on `kernel` (sleeping on the kernel's
 * eventfd in interrupt mode, else polling); other workloads' statuses are kept for later. */
int snic_kernel_wait(const snic_dev *dev, uint32_t kernel, uint32_t workload,
                     uint32_t timeout_ms, snic_kernel_status *out);
/* Submit and wait: 0 whatever the kernel answered (see out->status), < 0 on failure. */
int snic_kernel_run(const snic_dev *dev, const snic_kernel_cmd *cmd, uint32_t timeout_ms,
                    snic_kernel_status *out);
/* Interrupt (on != 0) or polled completion for `kernel`. */
int snic_kernel_set_interrupt(const snic_dev *dev, uint32_t kernel, int on);
/* Read / write user register `idx` (< SNIC_KERNEL_USER_REGS) of `kernel`; the kernel sees the
 * values the registers hold when it takes a command. */
int snic_kernel_reg_read(const snic_dev *dev, uint32_t kernel, uint32_t idx, uint32_t *v);
int snic_kernel_reg_write(const snic_dev *dev, uint32_t kernel, uint32_t idx, uint32_t v);
/* `kernel`'s counters for this client. */
int snic_kernel_get_counters(const snic_dev *dev, uint32_t kernel, snic_kernel_counters *out);
/* Name of built-in kernel `kernel` ("copy", "gemm", ...), or NULL. */
const char *snic_kernel_name(uint32_t kernel);

/* Open a DMA queue (mode SNIC_QUEUE_*, ring_size a power of two, completion ring twice that;
 * interrupt != 0: snic_queue_wait sleeps instead of busy-polling); *out gets the handle. */
int snic_queue_open(const snic_dev *dev, int mode, uint32_t ring_size, int interrupt,
                    snic_queue **out);
/* Delete a queue and free its rings (NULL is ignored). */
void snic_queue_close(snic_queue *q);
/* The queue id (negative on error). */
int snic_queue_id(const snic_queue *q);
/* Write a descriptor into the next slot of ring `dir` (no doorbell yet). src/dst are IOVAs or
 * device addresses; flags SNIC_DESC_*. SNIC_E_RING_FULL when no slot is free. */
int snic_queue_post(snic_queue *q, int dir, uint64_t src, uint64_t dst, uint32_t len,
                    uint32_t flags);
/* Publish the descriptors posted on ring `dir`. */
int snic_queue_doorbell(snic_queue *q, int dir);
/* Take up to `max` completions without waiting; returns how many (0 if none) or < 0. */
int snic_queue_poll(snic_queue *q, snic_completion *out, uint32_t max);
/* Wait up to timeout_ms for completions; returns how many (>= 1) or < 0 (SNIC_E_TIMEOUT). */
int snic_queue_wait(snic_queue *q, snic_completion *out, uint32_t max, uint32_t timeout_ms);

/* ----- RDMA API hooks (needs `snic serve --rdma ADDR`; otherwise SNIC_E_REFUSED) -----
 * One RC QP = send ring + receive ring + one CQ, placed in a registered host buffer or in
 * device memory. In this first cut verbs travel over the setup socket (one round trip each);
 * the WQEs still live in the placed rings and snic's RDMA engine fetches them from there. */

/* MR access bits (snic_rdma_reg_mr); remote write/atomic need local write. */
#define SNIC_RDMA_ACCESS_LOCAL_WRITE 0x1
#define SNIC_RDMA_ACCESS_REMOTE_WRITE 0x2
#define SNIC_RDMA_ACCESS_REMOTE_READ 0x4
#define SNIC_RDMA_ACCESS_REMOTE_ATOMIC 0x8
#define SNIC_RDMA_ACCESS_FLUSH_GLOBAL 0x10     /* peers may FLUSH for global visibility */
#define SNIC_RDMA_ACCESS_FLUSH_PERSISTENT 0x20 /* peers may FLUSH for persistence */

/* QP ring placement (snic_rdma_create_qp). */
#define SNIC_RDMA_PLACE_HOST 0     /* in ring_buf (the whole buffer becomes a ring pool) */
#define SNIC_RDMA_PLACE_ON_CHIP 1
#define SNIC_RDMA_PLACE_ON_BOARD 2

/* Work request opcodes (snic_rdma_post). */
#define SNIC_RDMA_WRITE 0
#define SNIC_RDMA_READ 1
#define SNIC_RDMA_SEND 2

/* Completion status (snic_rdma_cqe.status, numbered as ibv_wc_status) and opcodes. */
#define SNIC_WC_SUCCESS 0
#define SNIC_WC_OP_SEND 0
#define SNIC_WC_OP_RDMA_WRITE 1
#define SNIC_WC_OP_RDMA_READ 2
#define SNIC_WC_OP_FLUSH 8
#define SNIC_WC_OP_ATOMIC_WRITE 9
#define SNIC_WC_OP_RECV 128
#define SNIC_WC_OP_CHAIN 64 /* a chained command (snic_rdma_chain); imm = kernel status */

/* A QP: its number and where its rings landed (host IOVA or device address). */
typedef struct snic_rdma_qp {
    uint32_t qpn;
    uint32_t reserved;
    uint64_t sq_addr;
    uint64_t rq_addr;
} snic_rdma_qp;

/* One RDMA completion. */
typedef struct snic_rdma_cqe {
    uint64_t wr_id;
    uint32_t status;   /* SNIC_WC_SUCCESS or an ibv_wc_status error number */
    uint32_t opcode;   /* SNIC_WC_OP_* */
    uint32_t byte_len;
    uint32_t imm;      /* immediate data, 0 when none */
} snic_rdma_cqe;

/* Register `len` bytes at `addr` (this client's host IOVA or device address) as an MR;
 * *lkey / *rkey get its keys (either pointer may be NULL). */
int snic_rdma_reg_mr(const snic_dev *dev, uint64_t addr, uint64_t len, uint32_t access,
                     uint32_t *lkey, uint32_t *rkey);
/* Deregister an MR. */
int snic_rdma_dereg_mr(const snic_dev *dev, uint32_t lkey);
/* Create an RC QP with `depth` send and receive WRs, rings in `placement` (SNIC_RDMA_PLACE_*;
 * ring_buf is used for SNIC_RDMA_PLACE_HOST only). */
int snic_rdma_create_qp(const snic_dev *dev, int placement, const snic_buf *ring_buf,
                        uint32_t depth, snic_rdma_qp *out);
/* Destroy a QP. */
int snic_rdma_destroy_qp(const snic_dev *dev, uint32_t qpn);
/* Connect QP `qpn` to `remote_qpn` on the snic at `remote_ip` (PSNs start at 0 both ways) with
 * path MTU `mtu` (256 .. 4096; 0: the largest the route to `remote_ip` carries). */
int snic_rdma_connect(const snic_dev *dev, uint32_t qpn, uint32_t remote_qpn,
                      const char *remote_ip, uint32_t mtu);
/* Post a WRITE / READ (remote_addr, rkey) or SEND of `len` bytes at local_addr (MR lkey). */
int snic_rdma_post(const snic_dev *dev, uint32_t qpn, int opcode, uint64_t wr_id,
                   uint64_t local_addr, uint32_t lkey, uint32_t len, uint64_t remote_addr,
                   uint32_t rkey);
/* FLUSH placement types and levels (snic_rdma_post_flush, IBTA 1.5). */
#define SNIC_RDMA_FLUSH_GLOBAL 1     /* make the data globally visible */
#define SNIC_RDMA_FLUSH_PERSISTENT 2 /* make the data persistent */
#define SNIC_RDMA_FLUSH_RANGE 0      /* the range remote_addr .. + len */
#define SNIC_RDMA_FLUSH_MR 1         /* the whole MR of rkey */
/* Post an RC FLUSH: once every earlier WRITE of the QP is placed at the peer, make the range
 * (or the whole MR) visible and/or persistent (placement: SNIC_RDMA_FLUSH_GLOBAL |
 * SNIC_RDMA_FLUSH_PERSISTENT; level SNIC_RDMA_FLUSH_RANGE or _MR). Completes with
 * SNIC_WC_OP_FLUSH. */
int snic_rdma_post_flush(const snic_dev *dev, uint32_t qpn, uint64_t wr_id, uint64_t remote_addr,
                         uint32_t rkey, uint32_t len, int level, int placement);
/* Post an RC ATOMIC WRITE: store `value` (its little-endian bytes) at the 8-byte aligned
 * remote_addr in one atomic write. Completes with SNIC_WC_OP_ATOMIC_WRITE. */
int snic_rdma_post_atomic_write(const snic_dev *dev, uint32_t qpn, uint64_t wr_id,
                                uint64_t remote_addr, uint32_t rkey, uint64_t value);
/* Most work requests of one snic_rdma_post_batch. */
#define SNIC_RDMA_MAX_BATCH 256

/* One work request of snic_rdma_post_batch. */
typedef struct snic_rdma_wr {
    uint64_t wr_id;
    uint64_t local_addr;   /* in the MR lkey */
    uint64_t remote_addr;  /* WRITE, READ */
    int32_t opcode;        /* SNIC_RDMA_WRITE, SNIC_RDMA_READ or SNIC_RDMA_SEND */
    uint32_t lkey;
    uint32_t len;
    uint32_t rkey;         /* WRITE, READ */
} snic_rdma_wr;

/* Post `n` (1 .. SNIC_RDMA_MAX_BATCH) work requests on `qpn` with one doorbell, as RecoNIC's
 * batch mode: one request to snic, which writes every WQE into the send ring and then moves
 * the producer index once. All or none. */
int snic_rdma_post_batch(const snic_dev *dev, uint32_t qpn, const snic_rdma_wr *wrs,
                         uint32_t n);
/* One READ of a chained command: the peer's remote_addr (rkey) into local_addr (lkey). */
typedef struct snic_chain_read {
    uint64_t remote_addr;
    uint64_t local_addr;
    uint32_t rkey;
    uint32_t lkey;
    uint32_t len;
    uint32_t reserved;
} snic_chain_read;

/* The WRITE that ends a chained command: local_addr (lkey; the kernel's output) to the
 * peer's remote_addr (rkey). */
typedef struct snic_chain_write {
    uint64_t local_addr;
    uint64_t remote_addr;
    uint32_t lkey;
    uint32_t len;
    uint32_t rkey;
    uint32_t reserved;
} snic_chain_write;

/* Most READs of one chained command. */
#define SNIC_CHAIN_MAX_READS 64

/* A chained command the NIC carries out by itself: READ every reads[i] (1 .. 64, one batch,
 * one doorbell), run `kernel` once all are in, then WRITE write_back to the peer (NULL: only
 * notify). One completion on the QP's CQ: opcode SNIC_WC_OP_CHAIN, the given wr_id, status
 * SNIC_WC_SUCCESS when every step succeeded, byte_len the bytes written back, imm the kernel's
 * status (SNIC_KSTATUS_*). The chain's own READ/WRITE completions never reach the host. */
int snic_rdma_chain(const snic_dev *dev, uint32_t qpn, uint64_t wr_id,
                    const snic_chain_read *reads, uint32_t n, const snic_kernel_cmd *kernel,
                    const snic_chain_write *write_back);
/* Post a receive buffer. */
int snic_rdma_post_recv(const snic_dev *dev, uint32_t qpn, uint64_t wr_id, uint64_t addr,
                        uint32_t lkey, uint32_t len);
/* Take up to `max` completions of the QP's CQ; returns how many (0 if none) or < 0. */
int snic_rdma_poll(const snic_dev *dev, uint32_t qpn, snic_rdma_cqe *out, uint32_t max);
/* Wait up to timeout_ms for completions; returns how many (>= 1) or < 0 (SNIC_E_TIMEOUT). */
int snic_rdma_wait(const snic_dev *dev, uint32_t qpn, snic_rdma_cqe *out, uint32_t max,
                   uint32_t timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* SNIC_H */
