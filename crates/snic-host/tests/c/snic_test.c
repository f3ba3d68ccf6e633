/* Exercise libsnic_host through its C header against a running snic.
 * Usage: snic_test SOCKET_PATH. Prints "ok <step>" per step and "ALL OK" at the end;
 * exits non-zero at the first failure. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snic.h"

#define CHECK(cond, what)                                                                 \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "FAIL %s (line %d): %s\n", what, __LINE__, snic_last_error()); \
            return 1;                                                                     \
        }                                                                                 \
        printf("ok %s\n", what);                                                          \
    } while (0)

#define MIB (1024u * 1024u)

static void fill(uint8_t *p, size_t n, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)x;
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s SOCKET\n", argv[0]);
        return 2;
    }
    snic_dev *dev = NULL;
    CHECK(snic_open(argv[1], "c-test", &dev) == 0 && dev != NULL, "open");
    CHECK(snic_client_id(dev) >= 0, "client id");

    uint32_t v = 0;
    CHECK(snic_reg_read(dev, SNIC_REG_ID, &v) == 0 && v == SNIC_ID_VALUE, "id register");
    CHECK(snic_reg_write(dev, SNIC_REG_SCRATCH, 0xC0FFEE11u) == 0, "scratch write");
    CHECK(snic_reg_read(dev, SNIC_REG_SCRATCH, &v) == 0 && v == 0xC0FFEE11u, "scratch read");
    CHECK(snic_reg_read(dev, 3, &v) == SNIC_E_RANGE, "misaligned register refused");
    CHECK(snic_reg_read(NULL, 0, &v) == SNIC_E_INVAL, "null handle refused");

    /* Host and device buffers. */
    snic_buf *hb = NULL;
    CHECK(snic_alloc_host(dev, MIB, &hb) == 0 && hb != NULL, "alloc host");
    CHECK(snic_buf_len(hb) == MIB && snic_buf_ptr(hb) != NULL, "host buffer");
    uint64_t dv = 0;
    CHECK(snic_alloc_dev(dev, SNIC_MEM_ON_BOARD, MIB, 4096, &dv) == 0 && dv != 0, "alloc dev");

    /* 1 MiB round trip through device memory. */
    uint8_t *pat = malloc(MIB), *back = malloc(MIB);
    CHECK(pat != NULL && back != NULL, "malloc");
    fill(pat, MIB, 42);
    memset(back, 0, MIB);
    CHECK(snic_write_dev(dev, dv, pat, MIB) == 0, "write_dev 1 MiB");
    CHECK(snic_read_dev(dev, dv, back, MIB) == 0, "read_dev 1 MiB");
    CHECK(memcmp(pat, back, MIB) == 0, "round trip matches");

    /* A queue: H2C from the host buffer to device memory, C2H back. */
    snic_queue *q = NULL;
    CHECK(snic_queue_open(dev, SNIC_QUEUE_MM, 64, 0, &q) == 0 && q != NULL, "queue open");
    CHECK(snic_queue_id(q) >= 0, "queue id");
    uint8_t *hp = snic_buf_ptr(hb);
    fill(hp, 65536, 7);
    uint64_t iova = snic_buf_iova(hb);
    CHECK(snic_queue_post(q, SNIC_H2C, iova, dv, 65536, SNIC_DESC_SOP_EOP) == 0, "post h2c");
    CHECK(snic_queue_doorbell(q, SNIC_H2C) == 0, "doorbell h2c");
    snic_completion c[4];
    int n = snic_queue_wait(q, c, 4, 10000);
    CHECK(n == 1 && c[0].status == 0 && c[0].dir == SNIC_H2C && c[0].len == 65536, "h2c done");
    CHECK(c[0].qid == (uint16_t)snic_queue_id(q), "completion qid");
    CHECK(snic_queue_post(q, SNIC_C2H, dv, iova + 65536, 65536, SNIC_DESC_SOP_EOP) == 0,
          "post c2h");
    CHECK(snic_queue_doorbell(q, SNIC_C2H) == 0, "doorbell c2h");
    n = snic_queue_wait(q, c, 4, 10000);
    CHECK(n == 1 && c[0].status == 0 && c[0].dir == SNIC_C2H, "c2h done");
    CHECK(memcmp(hp, hp + 65536, 65536) == 0, "queue data matches");
    CHECK(snic_read_dev(dev, dv, back, 65536) == 0 && memcmp(back, hp, 65536) == 0,
          "device holds queue data");
    CHECK(snic_queue_poll(q, c, 4) == 0, "nothing more to poll");
    CHECK(snic_queue_wait(q, c, 4, 10) == SNIC_E_TIMEOUT, "wait times out");
    /* A bad descriptor gives an error completion. */
    CHECK(snic_queue_post(q, SNIC_H2C, 0x10, dv, 64, SNIC_DESC_SOP_EOP) == 0, "post bad");
    CHECK(snic_queue_doorbell(q, SNIC_H2C) == 0, "doorbell bad");
    n = snic_queue_wait(q, c, 4, 10000);
    CHECK(n == 1 && c[0].status != 0, "bad descriptor reported");
    snic_queue_close(q);

    /* Kernels: COPY host -> device, polled then by interrupt; submit/wait; registers. */
    CHECK(snic_reg_read(dev, SNIC_REG_KERNELS, &v) == 0 && (v & (1u << SNIC_KERNEL_COPY)),
          "copy kernel offered");
    CHECK(snic_kernel_name(SNIC_KERNEL_COPY) != NULL &&
              strcmp(snic_kernel_name(SNIC_KERNEL_COPY), "copy") == 0,
          "kernel name");
    CHECK(snic_kernel_name(SNIC_MAX_KERNELS) == NULL, "no name past the ids");
    fill(hp, 8192, 9);
    snic_kernel_cmd kc;
    memset(&kc, 0, sizeof kc);
    kc.workload = 7;
    kc.kernel = SNIC_KERNEL_COPY;
    kc.n_addrs = 2;
    kc.addrs[0].addr = iova;
    kc.addrs[0].len = 4096;
    kc.addrs[1].addr = dv;
    kc.addrs[1].len = 4096;
    snic_kernel_status ks;
    memset(&ks, 0xAA, sizeof ks);
    CHECK(snic_kernel_run(dev, &kc, 10000, &ks) == 0, "kernel copy runs");
    CHECK(ks.workload == 7 && ks.status == SNIC_KSTATUS_OK && ks.result == 4096,
          "kernel copy result");
    CHECK(snic_read_dev(dev, dv, back, 4096) == 0 && memcmp(back, hp, 4096) == 0,
          "kernel copy data");
    CHECK(snic_kernel_set_interrupt(dev, SNIC_KERNEL_COPY, 1) == 0, "interrupt mode");
    kc.workload = 8;
    kc.addrs[0].addr = iova + 4096;
    CHECK(snic_kernel_submit(dev, &kc) == 0, "kernel submit");
    CHECK(snic_kernel_wait(dev, SNIC_KERNEL_COPY, 8, 10000, &ks) == 0 && ks.workload == 8 &&
              ks.status == SNIC_KSTATUS_OK,
          "kernel wait by interrupt");
    CHECK(snic_read_dev(dev, dv, back, 4096) == 0 && memcmp(back, hp + 4096, 4096) == 0,
          "interrupt copy data");
    CHECK(snic_kernel_poll(dev, SNIC_KERNEL_COPY, &ks) == 0, "nothing left to poll");
    /* Overlapping output: refused with a status, nothing written. */
    kc.workload = 9;
    kc.addrs[0].addr = dv;
    kc.addrs[1].addr = dv + 16;
    CHECK(snic_kernel_run(dev, &kc, 10000, &ks) == 0 && ks.status == SNIC_KSTATUS_OVERLAP,
          "overlap refused");
    CHECK(snic_read_dev(dev, dv, back, 4096) == 0 && memcmp(back, hp + 4096, 4096) == 0,
          "refused command wrote nothing");
    /* REDUCE: sum of the u32 1..1024 in host memory. */
    uint32_t *w = (uint32_t *)hp;
    for (uint32_t i = 0; i < 1024; i++) w[i] = i + 1;
    snic_kernel_cmd rc;
    memset(&rc, 0, sizeof rc);
    rc.workload = 11;
    rc.kernel = SNIC_KERNEL_REDUCE;
    rc.n_addrs = 1;
    rc.addrs[0].addr = iova;
    rc.addrs[0].len = 4096;
    rc.n_scalars = 2;
    rc.scalars[0] = SNIC_REDUCE_SUM;
    rc.scalars[1] = SNIC_DTYPE_U32;
    CHECK(snic_kernel_run(dev, &rc, 10000, &ks) == 0 && ks.status == SNIC_KSTATUS_OK &&
              ks.result == 1024u * 1025u / 2u && ks.workload == 11,
          "kernel reduce sum");
    CHECK(snic_kernel_name(SNIC_KERNEL_GEMM) != NULL &&
              strcmp(snic_kernel_name(SNIC_KERNEL_GEMM), "gemm") == 0,
          "gemm named");
    snic_kernel_counters kn;
    CHECK(snic_kernel_get_counters(dev, SNIC_KERNEL_COPY, &kn) == 0 && kn.runs == 3 &&
              kn.errors == 1 && kn.last_status == SNIC_KSTATUS_OVERLAP,
          "kernel counters");
    CHECK(snic_kernel_reg_write(dev, SNIC_KERNEL_COPY, 3, 0xABCD) == 0, "user reg write");
    CHECK(snic_kernel_reg_read(dev, SNIC_KERNEL_COPY, 3, &v) == 0 && v == 0xABCD,
          "user reg read");
    CHECK(snic_kernel_reg_write(dev, SNIC_KERNEL_COPY, SNIC_KERNEL_USER_REGS, 1) == SNIC_E_RANGE,
          "user reg index checked");
    kc.kernel = 1234;
    CHECK(snic_kernel_submit(dev, &kc) == SNIC_E_RANGE, "kernel id checked");
    kc.kernel = SNIC_MAX_KERNELS - 1;
    kc.workload = 10;
    CHECK(snic_kernel_run(dev, &kc, 10000, &ks) == 0 &&
              ks.status == SNIC_KSTATUS_UNKNOWN_KERNEL,
          "unknown kernel status");

    CHECK(snic_free_dev(dev, dv) == 0, "free dev");
    CHECK(snic_free_dev(dev, dv) == SNIC_E_REFUSED && strlen(snic_last_error()) > 0,
          "double free refused");
    snic_free_host(hb);
    snic_close(dev);
    free(pat);
    free(back);
    printf("ALL OK\n");
    return 0;
}
