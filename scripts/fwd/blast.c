/* blast: send small UDP frames out of one interface as fast as it can, for a bounded time.
 *
 *   blast IFNAME SECONDS [-s FRAME_BYTES] [-f FLOWS] [-b BATCH] [-d DST_MAC]
 *
 * An AF_PACKET SOCK_RAW socket with PACKET_QDISC_BYPASS sends prebuilt Ethernet/IPv4/UDP frames
 * (default 64 bytes as handed to the kernel, i.e. without FCS) with sendmmsg(2), BATCH frames per
 * call (default 64). Frame i carries source port 10000 + i % FLOWS (default 256 flows), so a
 * receiver hashing on the 5-tuple (RSS, PACKET_FANOUT_HASH) spreads them. The destination MAC is
 * 02:00:00:00:00:02 by default: no interface has it, so a kernel that gets the frame drops it
 * as "other host" early. Stops after SECONDS (checked every batch) and prints one line:
 *   sent N frames in S s (K kpps), send errors E
 * The interface's own tx counter is the authoritative "offered" figure (bench_fwd.sh reads it).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_BATCH 1024
#define MAX_FLOWS 65536

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint16_t csum(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint32_t s = 0;
    for (size_t i = 0; i + 1 < n; i += 2)
        s += (uint32_t)b[i] << 8 | b[i + 1];
    if (n & 1)
        s += (uint32_t)b[n - 1] << 8;
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return htons((uint16_t)~s);
}

static int parse_mac(const char *s, uint8_t m[6])
{
    unsigned v[6];
    if (sscanf(s, "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6)
        return -1;
    for (int i = 0; i < 6; i++)
        m[i] = (uint8_t)v[i];
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: blast IFNAME SECONDS [-s FRAME_BYTES] [-f FLOWS] [-b BATCH] [-d DST_MAC]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 3)
        usage();
    const char *ifname = argv[1];
    double secs = atof(argv[2]);
    int size = 64, flows = 256, batch = 64;
    uint8_t dst[6] = {2, 0, 0, 0, 0, 2}, src[6] = {2, 0, 0, 0, 0, 1};
    for (int i = 3; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        if (!strcmp(argv[i], "-s"))
            size = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-f"))
            flows = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-b"))
            batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-d")) {
            if (parse_mac(argv[++i], dst))
                usage();
        } else
            usage();
    }
    if (secs <= 0 || secs > 3600 || size < 60 || size > 1514 || flows < 1 || flows > MAX_FLOWS ||
        batch < 1 || batch > MAX_BATCH)
        usage();

    int fd = socket(AF_PACKET, SOCK_RAW, 0); /* protocol 0: send only, receive nothing */
    if (fd < 0) {
        perror("socket(AF_PACKET)");
        return 1;
    }
    int one = 1;
    if (setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one) < 0)
        perror("PACKET_QDISC_BYPASS (continuing)");
    int sndbuf = 8 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof sndbuf);
    struct sockaddr_ll sll = {0};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_IP);
    sll.sll_ifindex = (int)if_nametoindex(ifname);
    if (!sll.sll_ifindex) {
        perror(ifname);
        return 1;
    }
    if (bind(fd, (struct sockaddr *)&sll, sizeof sll) < 0) {
        perror("bind");
        return 1;
    }

    /* One frame per flow, built once. */
    uint8_t *frames = calloc((size_t)flows, (size_t)size);
    if (!frames)
        return 1;
    for (int f = 0; f < flows; f++) {
        uint8_t *p = frames + (size_t)f * size;
        memcpy(p, dst, 6);
        memcpy(p + 6, src, 6);
        p[12] = 0x08;
        p[13] = 0x00;
        struct iphdr *ip = (struct iphdr *)(p + 14);
        ip->version = 4;
        ip->ihl = 5;
        ip->ttl = 64;
        ip->protocol = IPPROTO_UDP;
        ip->tot_len = htons((uint16_t)(size - 14));
        ip->saddr = htonl(0x0a5a0101); /* 10.90.1.1 */
        ip->daddr = htonl(0x0a5a0202); /* 10.90.2.2 */
        ip->check = csum(ip, 20);
        struct udphdr *u = (struct udphdr *)(p + 34);
        u->source = htons((uint16_t)(10000 + f));
        u->dest = htons(9);
        u->len = htons((uint16_t)(size - 34));
        u->check = 0;
    }

    static struct mmsghdr msgs[MAX_BATCH];
    static struct iovec iov[MAX_BATCH];
    unsigned long long sent = 0, errors = 0;
    unsigned next = 0;
    double start = now_s(), end = start + secs, t = start;
    while (t < end) {
        for (int i = 0; i < batch; i++) {
            iov[i].iov_base = frames + (size_t)next * size;
            iov[i].iov_len = (size_t)size;
            memset(&msgs[i].msg_hdr, 0, sizeof msgs[i].msg_hdr);
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            next = (next + 1) % (unsigned)flows;
        }
        int n = sendmmsg(fd, msgs, (unsigned)batch, 0);
        if (n < 0) {
            if (errno != ENOBUFS && errno != EAGAIN && errno != EINTR) {
                perror("sendmmsg");
                return 1;
            }
            errors++;
        } else {
            sent += (unsigned long long)n;
        }
        t = now_s();
    }
    double el = t - start;
    printf("sent %llu frames in %.3f s (%.1f kpps), send errors %llu\n", sent, el,
           sent / el / 1e3, errors);
    return 0;
}
