/* fwd: the classic user-space forwarder between two interfaces, the baseline of bench_fwd.sh.
 *
 *   fwd IF_A IF_B [-b BATCH] [-r RCVBUF_BYTES]
 *
 * One AF_PACKET SOCK_RAW socket per interface (all EtherTypes, PACKET_IGNORE_OUTGOING,
 * non-blocking, SO_RCVBUF/SO_SNDBUF 8 MiB by default like snic's afpacket port); one thread:
 * recvmmsg(2) up to BATCH frames (default 64) from one socket, sendmmsg(2) them out of the other,
 * both directions in turn, poll(2) when both are empty. On SIGINT/SIGTERM it prints
 *   fwd: A->B N frames, B->A N frames, send failures F, kernel drops A D B D
 * (kernel drops: PACKET_STATISTICS tp_drops, frames the socket's receive queue had no room for).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif
#define MAX_BATCH 1024
#define FRAME 2048

static volatile sig_atomic_t stop;
static void on_signal(int s) { (void)s; stop = 1; }

static int open_if(const char *ifname, int rcvbuf)
{
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_ALL));
    if (fd < 0) {
        perror("socket(AF_PACKET)");
        exit(1);
    }
    int one = 1;
    setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &rcvbuf, sizeof rcvbuf);
    struct sockaddr_ll sll = {0};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = (int)if_nametoindex(ifname);
    if (!sll.sll_ifindex) {
        perror(ifname);
        exit(1);
    }
    if (bind(fd, (struct sockaddr *)&sll, sizeof sll) < 0) {
        perror("bind");
        exit(1);
    }
    return fd;
}

static struct mmsghdr msgs[MAX_BATCH];
static struct iovec iov[MAX_BATCH];
static char bufs[MAX_BATCH][FRAME];
static unsigned long long send_fail;

/* Move one batch from `in` to `out`; returns frames received. */
static int forward(int in, int out, int batch, unsigned long long *moved)
{
    for (int i = 0; i < batch; i++) {
        iov[i].iov_base = bufs[i];
        iov[i].iov_len = FRAME;
        memset(&msgs[i].msg_hdr, 0, sizeof msgs[i].msg_hdr);
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int n = recvmmsg(in, msgs, (unsigned)batch, MSG_DONTWAIT, NULL);
    if (n <= 0)
        return 0;
    for (int i = 0; i < n; i++)
        iov[i].iov_len = msgs[i].msg_len;
    int done = 0, tries = 0;
    while (done < n) {
        int s = sendmmsg(out, msgs + done, (unsigned)(n - done), 0);
        if (s < 0) {
            if ((errno == EAGAIN || errno == ENOBUFS || errno == EINTR) && ++tries < 100)
                continue;
            /* Skip the frame that failed. */
            send_fail++;
            done++;
            continue;
        }
        done += s;
        *moved += (unsigned)s;
    }
    return n;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: fwd IF_A IF_B [-b BATCH] [-r RCVBUF_BYTES]\n");
        return 2;
    }
    int batch = 64, rcvbuf = 8 << 20;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-b"))
            batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r"))
            rcvbuf = atoi(argv[i + 1]);
    }
    if (batch < 1 || batch > MAX_BATCH)
        batch = 64;
    int a = open_if(argv[1], rcvbuf), b = open_if(argv[2], rcvbuf);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    unsigned long long ab = 0, ba = 0;
    while (!stop) {
        int got = forward(a, b, batch, &ab) + forward(b, a, batch, &ba);
        if (!got) {
            struct pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
            poll(p, 2, 100);
        }
    }
    struct tpacket_stats sa_st = {0}, sb_st = {0};
    socklen_t l = sizeof sa_st;
    getsockopt(a, SOL_PACKET, PACKET_STATISTICS, &sa_st, &l);
    l = sizeof sb_st;
    getsockopt(b, SOL_PACKET, PACKET_STATISTICS, &sb_st, &l);
    printf("fwd: A->B %llu frames, B->A %llu frames, send failures %llu, kernel drops A %u B %u\n",
           ab, ba, send_fail, sa_st.tp_drops, sb_st.tp_drops);
    return 0;
}
