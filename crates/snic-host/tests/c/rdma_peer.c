/* The C twin of examples/rdma_peer.rs: RDMA WRITE, READ and SEND through a snic NIC with the
 * host library's C ABI, against a peer program on another NIC.
 *
 *   rdma_peer SOCKET active|passive host|on-chip|on-board PEER_IP SIZE [host|device]
 *
 * Same protocol as the Rust program: one buffer of 5 x SIZE bytes (local source, local sink,
 * WRITE target, READ source, receive buffer), in host memory or (`device`) in on-board device
 * memory reached by DMA, registered as one MR; print
 * "QP <qpn> <iova> <rkey>", read the peer's line from stdin; the active side WRITEs pattern 1,
 * READs (and checks) pattern 2 and SENDs pattern 3; the passive side checks its WRITE target
 * and receive buffer once the receive completes. Prints "OK ..." and exits 0, or "FAIL ...". */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snic.h"

static uint8_t pattern(uint8_t seed, size_t i) {
    uint32_t x = (uint32_t)i * 2654435761u;
    return (uint8_t)((x >> 13) ^ seed);
}

static int fail(const char *what) {
    const char *e = snic_last_error();
    printf("FAIL %s: %s\n", what, e ? e : "");
    return 1;
}

static int wait_one(const snic_dev *dev, uint32_t qpn, uint64_t wr_id, uint32_t *len) {
    snic_rdma_cqe c;
    int n = snic_rdma_wait(dev, qpn, &c, 1, 60000);
    if (n != 1) return fail("snic_rdma_wait");
    if (c.wr_id != wr_id || c.status != SNIC_WC_SUCCESS) {
        printf("FAIL completion wr_id %" PRIu64 " status %u, expected %" PRIu64 " success\n",
               c.wr_id, c.status, wr_id);
        return 1;
    }
    if (len) *len = c.byte_len;
    return 0;
}

static int check(const uint8_t *p, uint8_t seed, size_t size, const char *what) {
    for (size_t i = 0; i < size; i++) {
        if (p[i] != pattern(seed, i)) {
            printf("FAIL %s: byte %zu differs\n", what, i);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 7) {
        printf("FAIL usage: rdma_peer SOCKET active|passive host|on-chip|on-board PEER_IP SIZE "
               "[host|device]\n");
        return 1;
    }
    int on_device = argc == 7 && strcmp(argv[6], "device") == 0;
    if (argc == 7 && !on_device && strcmp(argv[6], "host") != 0) {
        printf("FAIL data %s (host or device)\n", argv[6]);
        return 1;
    }
    int active = strcmp(argv[2], "active") == 0;
    size_t size = (size_t)strtoull(argv[5], NULL, 10);
    if (size == 0 || size > (1u << 30)) {
        printf("FAIL size %s\n", argv[5]);
        return 1;
    }
    int place;
    if (strcmp(argv[3], "host") == 0) place = SNIC_RDMA_PLACE_HOST;
    else if (strcmp(argv[3], "on-chip") == 0) place = SNIC_RDMA_PLACE_ON_CHIP;
    else if (strcmp(argv[3], "on-board") == 0) place = SNIC_RDMA_PLACE_ON_BOARD;
    else {
        printf("FAIL placement %s\n", argv[3]);
        return 1;
    }
    snic_dev *dev = NULL;
    snic_buf *buf = NULL, *rings = NULL;
    if (snic_open(argv[1], "rdma_peer_c", &dev) != 0) return fail("snic_open");
    if (snic_alloc_host(dev, 256 << 10, &rings) != 0) return fail("snic_alloc_host rings");
    /* p: the buffer itself (host memory), or a staging copy of the device buffer. */
    uint8_t *p;
    uint64_t base;
    if (on_device) {
        if (snic_alloc_dev(dev, SNIC_MEM_ON_BOARD, 5 * size, 4096, &base) != 0)
            return fail("snic_alloc_dev");
        p = calloc(5, size);
        if (!p) return fail("calloc");
    } else {
        if (snic_alloc_host(dev, 5 * size, &buf) != 0) return fail("snic_alloc_host");
        p = snic_buf_ptr(buf);
        base = snic_buf_iova(buf);
    }
    /* Move slot k (SIZE bytes at k * SIZE) to the device buffer, or back. */
#define PUT(k)                                                                                 \
    do {                                                                                       \
        if (on_device && snic_write_dev(dev, base + (k) * size, p + (k) * size, size) != 0)   \
            return fail("snic_write_dev");                                                     \
    } while (0)
#define GET(k)                                                                                 \
    do {                                                                                       \
        if (on_device && snic_read_dev(dev, base + (k) * size, p + (k) * size, size) != 0)    \
            return fail("snic_read_dev");                                                      \
    } while (0)
    uint32_t lkey = 0, rkey = 0;
    if (snic_rdma_reg_mr(dev, base, 5 * size, 15, &lkey, &rkey) != 0) return fail("reg_mr");
    snic_rdma_qp qp;
    if (snic_rdma_create_qp(dev, place, rings, 64, &qp) != 0) return fail("create_qp");
    if (!active) {
        for (size_t i = 0; i < size; i++) p[3 * size + i] = pattern(2, i);
        PUT(3);
    }
    printf("QP %u %" PRIu64 " %u\n", qp.qpn, base, rkey);
    fflush(stdout);
    char line[256];
    if (!fgets(line, sizeof line, stdin)) {
        printf("FAIL no peer line\n");
        return 1;
    }
    unsigned pq = 0, prkey = 0;
    uint64_t pbase = 0;
    if (sscanf(line, "QP %u %" SCNu64 " %u", &pq, &pbase, &prkey) != 3) {
        printf("FAIL peer line %s\n", line);
        return 1;
    }
    if (snic_rdma_connect(dev, qp.qpn, pq, argv[4], 0) != 0) return fail("connect");
    /* A SEND that comes before this receive is posted waits (RNR NAK, then a retry). */
    if (!active &&
        snic_rdma_post_recv(dev, qp.qpn, 10, base + 4 * size, lkey, (uint32_t)size) != 0)
        return fail("post_recv");
    if (active) {
        for (size_t i = 0; i < size; i++) p[i] = pattern(1, i);
        PUT(0);
        if (snic_rdma_post(dev, qp.qpn, SNIC_RDMA_WRITE, 1, base, lkey, (uint32_t)size,
                           pbase + 2 * size, prkey) != 0)
            return fail("post write");
        if (wait_one(dev, qp.qpn, 1, NULL)) return 1;
        if (snic_rdma_post(dev, qp.qpn, SNIC_RDMA_READ, 2, base + size, lkey, (uint32_t)size,
                           pbase + 3 * size, prkey) != 0)
            return fail("post read");
        if (wait_one(dev, qp.qpn, 2, NULL)) return 1;
        GET(1);
        if (check(p + size, 2, size, "READ result")) return 1;
        for (size_t i = 0; i < size; i++) p[i] = pattern(3, i);
        PUT(0);
        if (snic_rdma_post(dev, qp.qpn, SNIC_RDMA_SEND, 3, base, lkey, (uint32_t)size, 0, 0) != 0)
            return fail("post send");
        if (wait_one(dev, qp.qpn, 3, NULL)) return 1;
        printf("OK active: WRITE, READ (verified), SEND of %zu bytes\n", size);
    } else {
        uint32_t n = 0;
        if (wait_one(dev, qp.qpn, 10, &n)) return 1;
        if (n != size) {
            printf("FAIL received %u bytes, expected %zu\n", n, size);
            return 1;
        }
        GET(2);
        GET(4);
        if (check(p + 2 * size, 1, size, "WRITE target")) return 1;
        if (check(p + 4 * size, 3, size, "SEND payload")) return 1;
        printf("OK passive: WRITE and SEND of %zu bytes verified\n", size);
    }
    snic_rdma_destroy_qp(dev, qp.qpn);
    snic_free_host(rings);
    if (on_device) {
        snic_free_dev(dev, base);
        free(p);
    } else {
        snic_free_host(buf);
    }
    snic_close(dev);
    return 0;
}
