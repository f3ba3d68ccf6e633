/* Networked matrix multiplication, peer 2's side, in C against snic.h (RecoNIC's lookaside
 * example, its Fig. 6): the same run as `snic compute mm --peer`, against a peer 1 started with
 * `snic compute mm --serve`.
 *
 *   netmm SOCKET PEER_HOST PEER_PORT LOCAL_IP M N K i8|f32 host_mem|dev_mem SEED
 *         [poll|interrupt] [chained]
 *
 * SOCKET is the local snic's setup socket, LOCAL_IP its RoCE address. Steps:
 *  1. allocate A, B and C in on-board device memory, an MR over A and B, a QP with its rings
 *     in device memory; exchange QP, address and regions with peer 1 over TCP (JSON lines:
 *     `request`, `ready`, `done`, as src/compute.rs documents); connect the QP;
 *  2-5. post the RDMA READs of A and B as one batch (one doorbell) and poll the CQ;
 *  6-7. send the GEMM command to the lookaside kernel and wait for its status (polling, or the
 *     kernel's interrupt);
 *  With `chained`, steps 2-7 are one snic_rdma_chain call: the NIC posts the READs, runs
 *  the kernel when they are in and completes once (SNIC_WC_OP_CHAIN); the host rings one
 *  doorbell and waits for one completion.
 *  8. read C back by C2H DMA on a queue into host memory, and check it against A x B computed
 *     here from the seed (i8 exactly, f32 within the rounding bound).
 * Prints the time of each step, then "verified" (exit 0) or the first mismatching element
 * "mismatch at row R col C: got G, want W" (exit 1); "FAIL ..." on any other error. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "snic.h"

#define CHUNK (1u << 20)     /* largest READ and C2H descriptor */
#define MAX_LINE (64 * 1024) /* longest exchange line */
#define TIMEOUT_MS 30000

static int fail(const char *what) {
    const char *e = snic_last_error();
    printf("FAIL %s: %s\n", what, e ? e : "");
    return 1;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* splitmix64 stream `which` (1: A, 2: B) of `seed`, as src/compute.rs `matrix`. */
typedef struct { uint64_t state; } stream;
static stream stream_new(uint64_t seed, uint64_t which) {
    stream s = { seed ^ (which * 0x9E3779B97F4A7C15ull) };
    return s;
}
static uint64_t stream_next(stream *s) {
    uint64_t z = (s->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static void matrix(uint64_t seed, uint64_t which, size_t len, int f32, void *out) {
    stream s = stream_new(seed, which);
    for (size_t i = 0; i < len; i++) {
        uint64_t x = stream_next(&s);
        if (f32) ((float *)out)[i] = (float)(x >> 40) / 16777216.0f * 2.0f - 1.0f;
        else ((int8_t *)out)[i] = (int8_t)(uint8_t)(x >> 56);
    }
}

/* ----- the exchange: JSON lines over TCP ----- */

static int tcp_connect(const char *host, const char *port) {
    struct addrinfo hints = { 0 }, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res) != 0) return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

static int send_all(int fd, const char *s) {
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = send(fd, s, n, 0);
        if (w <= 0) return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* One line (without its newline) into `buf`; -1 on error, end of stream or a line too long. */
static int recv_line(int fd, char *buf, size_t cap) {
    size_t n = 0;
    while (n + 1 < cap) {
        char c;
        ssize_t r = recv(fd, &c, 1, 0);
        if (r <= 0) return -1;
        if (c == '\n') {
            buf[n] = 0;
            return 0;
        }
        buf[n++] = c;
    }
    return -1;
}

/* The unsigned number after `"key":` in `s` (searched from `s`); 0 and *ok = 0 when absent. */
static uint64_t json_u64(const char *s, const char *key, int *ok) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(s, pat);
    if (!p) {
        *ok = 0;
        return 0;
    }
    char *end;
    uint64_t v = strtoull(p + strlen(pat), &end, 10);
    if (end == p + strlen(pat)) *ok = 0;
    return v;
}

/* The string after `"key":"` in `s`, copied into out (cap bytes); 0 on success. */
static int json_str(const char *s, const char *key, char *out, size_t cap) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = strstr(s, pat);
    if (!p) return -1;
    p += strlen(pat);
    const char *q = strchr(p, '"');
    if (!q || (size_t)(q - p) >= cap) return -1;
    memcpy(out, p, (size_t)(q - p));
    out[q - p] = 0;
    return 0;
}

typedef struct { uint64_t addr, len; uint32_t rkey; } region;

/* Region `"name":{...}` of the ready line. */
static int json_region(const char *s, const char *name, region *r) {
    char pat[16];
    snprintf(pat, sizeof pat, "\"%s\":{", name);
    const char *p = strstr(s, pat);
    if (!p) return -1;
    const char *end = strchr(p, '}');
    if (!end) return -1;
    char obj[256];
    size_t n = (size_t)(end - p);
    if (n >= sizeof obj) return -1;
    memcpy(obj, p, n);
    obj[n] = 0;
    int ok = 1;
    r->addr = json_u64(obj, "addr", &ok);
    r->rkey = (uint32_t)json_u64(obj, "rkey", &ok);
    r->len = json_u64(obj, "len", &ok);
    return ok ? 0 : -1;
}

/* ----- the check ----- */

static int verify(uint32_t m, uint32_t n, uint32_t k, int f32, const void *a, const void *b,
                  const void *c) {
    double *want = calloc(n, sizeof(double)), *mag = calloc(n, sizeof(double));
    if (!want || !mag) return 2;
    int bad = 0;
    for (uint32_t i = 0; i < m && !bad; i++) {
        memset(want, 0, n * sizeof(double));
        memset(mag, 0, n * sizeof(double));
        for (uint32_t l = 0; l < k; l++) {
            double x = f32 ? ((const float *)a)[(size_t)i * k + l]
                           : ((const int8_t *)a)[(size_t)i * k + l];
            for (uint32_t j = 0; j < n; j++) {
                double y = f32 ? ((const float *)b)[(size_t)l * n + j]
                               : ((const int8_t *)b)[(size_t)l * n + j];
                want[j] += x * y;
                mag[j] += fabs(x * y);
            }
        }
        for (uint32_t j = 0; j < n; j++) {
            double got = f32 ? ((const float *)c)[(size_t)i * n + j]
                             : ((const int32_t *)c)[(size_t)i * n + j];
            double tol = f32 ? ((double)k + 2.0) * 1.1920928955078125e-7 * mag[j] : 0.0;
            if (!(fabs(got - want[j]) <= tol)) {
                printf("mismatch at row %u col %u: got %.9g, want %.9g\n", i, j, got, want[j]);
                bad = 1;
                break;
            }
        }
    }
    free(want);
    free(mag);
    return bad;
}

int main(int argc, char **argv) {
    if (argc < 11 || argc > 13) {
        printf("FAIL usage: netmm SOCKET PEER_HOST PEER_PORT LOCAL_IP M N K i8|f32 "
               "host_mem|dev_mem SEED [poll|interrupt] [chained]\n");
        return 1;
    }
    uint32_t m = (uint32_t)strtoul(argv[5], NULL, 10);
    uint32_t n = (uint32_t)strtoul(argv[6], NULL, 10);
    uint32_t k = (uint32_t)strtoul(argv[7], NULL, 10);
    int f32 = strcmp(argv[8], "f32") == 0;
    if (!f32 && strcmp(argv[8], "i8") != 0) {
        printf("FAIL dtype %s (i8 or f32)\n", argv[8]);
        return 1;
    }
    const char *mem = argv[9];
    if (strcmp(mem, "host_mem") != 0 && strcmp(mem, "dev_mem") != 0) {
        printf("FAIL memory %s (host_mem or dev_mem)\n", mem);
        return 1;
    }
    uint64_t seed = strtoull(argv[10], NULL, 10);
    int interrupt = 0, chained = 0;
    for (int i = 11; i < argc; i++) {
        if (strcmp(argv[i], "interrupt") == 0) {
            interrupt = 1;
        } else if (strcmp(argv[i], "chained") == 0) {
            chained = 1;
        } else if (strcmp(argv[i], "poll") != 0) {
            printf("FAIL option %s (poll, interrupt or chained)\n", argv[i]);
            return 1;
        }
    }
    if (m == 0 || n == 0 || k == 0 || m > 16384 || n > 16384 || k > 16384) {
        printf("FAIL dimensions %ux%ux%u (1 .. 16384 each)\n", m, n, k);
        return 1;
    }
    uint64_t es = f32 ? 4 : 1;
    uint64_t a_len = (uint64_t)m * k * es, b_len = (uint64_t)k * n * es;
    uint64_t c_len = (uint64_t)m * n * 4;
    if (a_len + b_len + c_len > (1ull << 30)) {
        printf("FAIL A, B and C take more than 1 GiB\n");
        return 1;
    }

    /* Step 1: device memory, MR, QP, the C2H queue and C's host buffer; the exchange. */
    double t0 = now_ms();
    snic_dev *dev = NULL;
    if (snic_open(argv[1], "netmm_c", &dev) != 0) return fail("snic_open");
    uint64_t base;
    if (snic_alloc_dev(dev, SNIC_MEM_ON_BOARD, a_len + b_len + c_len, 4096, &base) != 0)
        return fail("snic_alloc_dev");
    uint64_t da = base, db = base + a_len, dc = base + a_len + b_len;
    uint32_t lkey;
    if (snic_rdma_reg_mr(dev, base, a_len + b_len, SNIC_RDMA_ACCESS_LOCAL_WRITE, &lkey, NULL))
        return fail("snic_rdma_reg_mr");
    snic_rdma_qp qp;
    if (snic_rdma_create_qp(dev, SNIC_RDMA_PLACE_ON_BOARD, NULL, SNIC_RDMA_MAX_BATCH, &qp))
        return fail("snic_rdma_create_qp");
    snic_buf *host_c = NULL;
    if (snic_alloc_host(dev, (size_t)c_len, &host_c) != 0) return fail("snic_alloc_host");
    uint32_t c2h_descs = (uint32_t)((c_len + CHUNK - 1) / CHUNK), ring = 2;
    while (ring < c2h_descs) ring *= 2;
    snic_queue *q = NULL;
    if (snic_queue_open(dev, SNIC_QUEUE_MM, ring, interrupt, &q) != 0)
        return fail("snic_queue_open");
    if (snic_kernel_set_interrupt(dev, SNIC_KERNEL_GEMM, interrupt) != 0)
        return fail("snic_kernel_set_interrupt");

    int fd = tcp_connect(argv[2], argv[3]);
    if (fd < 0) {
        printf("FAIL connecting to peer 1 at %s:%s\n", argv[2], argv[3]);
        return 1;
    }
    char *line = malloc(MAX_LINE);
    if (!line) return fail("malloc");
    snprintf(line, MAX_LINE,
             "{\"msg\":\"request\",\"version\":1,\"m\":%u,\"n\":%u,\"k\":%u,\"dtype\":\"%s\","
             "\"seed\":%" PRIu64 ",\"mem\":\"%s\",\"qpn\":%u,\"ip\":\"%s\",\"mtu\":0}\n",
             m, n, k, f32 ? "f32" : "i8", seed, mem, qp.qpn, argv[4]);
    if (send_all(fd, line) != 0 || recv_line(fd, line, MAX_LINE) != 0) {
        printf("FAIL the exchange with peer 1\n");
        return 1;
    }
    if (!strstr(line, "\"msg\":\"ready\"")) {
        printf("FAIL peer 1 answered: %s\n", line);
        return 1;
    }
    int ok = 1;
    uint32_t peer_qpn = (uint32_t)json_u64(line, "qpn", &ok);
    char peer_ip[64];
    region ra, rb;
    if (!ok || json_str(line, "ip", peer_ip, sizeof peer_ip) != 0 ||
        json_region(line, "a", &ra) != 0 || json_region(line, "b", &rb) != 0 ||
        ra.len != a_len || rb.len != b_len) {
        printf("FAIL a ready message without QP, address or regions of the sizes asked: %s\n",
               line);
        return 1;
    }
    if (snic_rdma_connect(dev, qp.qpn, peer_qpn, peer_ip, 0) != 0)
        return fail("snic_rdma_connect");
    double t_setup = now_ms() - t0;

    /* Steps 2-5: one batch of READs, one doorbell; poll the CQ. */
    uint64_t chunk = CHUNK;
    uint32_t most = chained ? SNIC_CHAIN_MAX_READS : SNIC_RDMA_MAX_BATCH;
    while ((a_len + chunk - 1) / chunk + (b_len + chunk - 1) / chunk > most) chunk *= 2;
    snic_rdma_wr wrs[SNIC_RDMA_MAX_BATCH];
    uint32_t nwr = 0;
    const region *rem[2] = { &ra, &rb };
    uint64_t loc[2] = { da, db };
    for (int x = 0; x < 2; x++) {
        for (uint64_t off = 0; off < rem[x]->len; off += chunk) {
            uint64_t l = rem[x]->len - off < chunk ? rem[x]->len - off : chunk;
            snic_rdma_wr w = { nwr, loc[x] + off, rem[x]->addr + off, SNIC_RDMA_READ, lkey,
                               (uint32_t)l, rem[x]->rkey };
            wrs[nwr++] = w;
        }
    }
    /* The GEMM command (steps 6-7, or the chain's kernel). */
    snic_kernel_cmd cmd;
    memset(&cmd, 0, sizeof cmd);
    cmd.workload = 1;
    cmd.kernel = SNIC_KERNEL_GEMM;
    cmd.n_addrs = 3;
    cmd.addrs[0].addr = da;
    cmd.addrs[0].len = a_len;
    cmd.addrs[1].addr = db;
    cmd.addrs[1].len = b_len;
    cmd.addrs[2].addr = dc;
    cmd.addrs[2].len = c_len;
    cmd.n_scalars = 5;
    cmd.scalars[0] = m;
    cmd.scalars[1] = n;
    cmd.scalars[2] = k;
    cmd.scalars[3] = f32 ? SNIC_DTYPE_F32 : SNIC_DTYPE_I8;
    cmd.scalars[4] = 0;
    double t_fetch = 0, t_kernel = 0, t_notify = 0, t_chain = 0;
    double t1 = now_ms();
    if (chained) {
        /* One command, one doorbell, one completion: the NIC does steps 2-7 by itself. */
        snic_chain_read reads[SNIC_CHAIN_MAX_READS];
        for (uint32_t i = 0; i < nwr; i++) {
            snic_chain_read r = { wrs[i].remote_addr, wrs[i].local_addr, wrs[i].rkey,
                                  wrs[i].lkey, wrs[i].len, 0 };
            reads[i] = r;
        }
        if (snic_rdma_chain(dev, qp.qpn, 99, reads, nwr, &cmd, NULL) != 0)
            return fail("snic_rdma_chain");
        snic_rdma_cqe c;
        int got = snic_rdma_wait(dev, qp.qpn, &c, 1, TIMEOUT_MS);
        if (got != 1) return fail("snic_rdma_wait (chain)");
        if (c.opcode != SNIC_WC_OP_CHAIN || c.wr_id != 99 || c.status != SNIC_WC_SUCCESS ||
            c.imm != SNIC_KSTATUS_OK) {
            printf("FAIL the chain completed with opcode %u status %u kernel status %u\n",
                   c.opcode, c.status, c.imm);
            return 1;
        }
        t_chain = now_ms() - t1;
    } else {
        if (snic_rdma_post_batch(dev, qp.qpn, wrs, nwr) != 0)
            return fail("snic_rdma_post_batch");
        uint32_t done = 0;
        snic_rdma_cqe cqes[SNIC_RDMA_MAX_BATCH];
        while (done < nwr) {
            int got = snic_rdma_wait(dev, qp.qpn, cqes, nwr - done, TIMEOUT_MS);
            if (got < 0) return fail("snic_rdma_wait");
            for (int i = 0; i < got; i++) {
                if (cqes[i].status != SNIC_WC_SUCCESS) {
                    printf("FAIL READ %" PRIu64 " completed with status %u\n", cqes[i].wr_id,
                           cqes[i].status);
                    return 1;
                }
            }
            done += (uint32_t)got;
        }
        t_fetch = now_ms() - t1;

        /* Steps 6-7: the GEMM command; wait for its status. */
        snic_kernel_status st;
        double t2 = now_ms();
        if (snic_kernel_submit(dev, &cmd) != 0) return fail("snic_kernel_submit");
        if (snic_kernel_wait(dev, SNIC_KERNEL_GEMM, 1, TIMEOUT_MS, &st) != 0)
            return fail("snic_kernel_wait");
        double observed = now_ms() - t2;
        if (st.status != SNIC_KSTATUS_OK) {
            printf("FAIL the GEMM kernel: status %u\n", st.status);
            return 1;
        }
        t_kernel = (double)st.busy_ns / 1e6;
        t_notify = observed > t_kernel ? observed - t_kernel : 0.0;
    }

    /* Step 8: C back by C2H DMA. */
    double t3 = now_ms();
    for (uint64_t off = 0; off < c_len; off += CHUNK) {
        uint64_t l = c_len - off < CHUNK ? c_len - off : CHUNK;
        if (snic_queue_post(q, SNIC_C2H, dc + off, snic_buf_iova(host_c) + off, (uint32_t)l,
                            SNIC_DESC_SOP_EOP) != 0)
            return fail("snic_queue_post");
    }
    if (snic_queue_doorbell(q, SNIC_C2H) != 0) return fail("snic_queue_doorbell");
    snic_completion cmpt[64];
    for (uint32_t got = 0; got < c2h_descs;) {
        uint32_t want = c2h_descs - got < 64 ? c2h_descs - got : 64;
        int r = snic_queue_wait(q, cmpt, want, TIMEOUT_MS);
        if (r < 0) return fail("snic_queue_wait");
        for (int i = 0; i < r; i++) {
            if (cmpt[i].status != 0 || cmpt[i].dir != SNIC_C2H) {
                printf("FAIL read-back DMA status %u dir %u\n", cmpt[i].status, cmpt[i].dir);
                return 1;
            }
        }
        got += (uint32_t)r;
    }
    double t_back = now_ms() - t3;

    double ops = 2.0 * m * n * k, total = t_chain + t_fetch + t_kernel + t_notify + t_back;
    printf("netmm %ux%ux%u %s: A, B in peer 1's %s, %u READs in one batch, %s\n", m, n, k,
           f32 ? "f32" : "i8", mem, nwr,
           chained ? "chained" : interrupt ? "interrupt" : "poll");
    printf("  connection set-up %10.3f ms\n", t_setup);
    if (chained) {
        printf("  chain             %10.3f ms  (fetch, kernel, completion)\n", t_chain);
    } else {
        printf("  RDMA fetch        %10.3f ms\n", t_fetch);
        printf("  kernel            %10.3f ms  (%.2f %s)\n", t_kernel,
               t_kernel > 0 ? ops / t_kernel / 1e6 : 0.0, f32 ? "GFLOP/s" : "GOP/s");
        printf("  notification      %10.3f ms\n", t_notify);
    }
    printf("  read-back (C2H)   %10.3f ms\n", t_back);
    printf("  total             %10.3f ms\n", total);

    void *a = malloc((size_t)a_len), *b = malloc((size_t)b_len);
    if (!a || !b) return fail("malloc");
    matrix(seed, 1, (size_t)m * k, f32, a);
    matrix(seed, 2, (size_t)k * n, f32, b);
    int bad = verify(m, n, k, f32, a, b, snic_buf_ptr(host_c));
    if (!bad) printf("verified\n");
    snprintf(line, MAX_LINE, "{\"msg\":\"done\",\"verified\":%s}\n", bad ? "false" : "true");
    send_all(fd, line);
    close(fd);
    free(line);
    free(a);
    free(b);
    snic_queue_close(q);
    snic_free_host(host_c);
    snic_rdma_destroy_qp(dev, qp.qpn);
    snic_close(dev);
    return bad ? 1 : 0;
}
