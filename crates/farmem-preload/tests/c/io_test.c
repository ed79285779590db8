/* System calls on far buffers: every byte moved by write, read, pwrite,
 * pread, writev, readv, send, recv, fwrite and fread between large
 * (far) buffers, through a file, a socket pair and a pipe, with the
 * buffers pushed out of the local cache before each step; then a thread
 * that blocks every signal (as jemalloc's background threads do) copies
 * one far buffer into another, fputs writes a far string, and epoll_wait
 * and poll fill event arrays in far memory, and a signal handler run inside
 * sigsuspend touches far memory. Prints one line per step with its
 * checksum, then "ok"; exits with the failing step's number.
 * Usage: io_test MIB (size of each of the three buffers). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

static size_t n;
static unsigned char *a, *b, *c;

static uint64_t sum(const unsigned char *p, size_t len) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* Overwrites the third buffer, so the others' pages leave the cache. */
static void push_out(void) {
    for (size_t i = 0; i < n; i += 4096) c[i] = (unsigned char)(c[i] + 1);
}

static int check(int step, const char *what) {
    uint64_t ha = sum(a, n), hb = sum(b, n);
    printf("%d %s %016llx\n", step, what, (unsigned long long)hb);
    if (ha != hb) {
        fprintf(stderr, "step %d (%s): the bytes differ\n", step, what);
        exit(step);
    }
    memset(b, 0, n);
    push_out();
    return 0;
}

static int full_write(int fd, const unsigned char *p, size_t len) {
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static int full_read(int fd, unsigned char *p, size_t len) {
    while (len > 0) {
        ssize_t r = read(fd, p, len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

static void *sender(void *arg) {
    int fd = *(int *)arg;
    size_t off = 0;
    while (off < n) {
        size_t chunk = n - off < (1 << 20) ? n - off : (1 << 20);
        ssize_t s = send(fd, a + off, chunk, 0);
        if (s <= 0) {
            perror("send");
            exit(20);
        }
        off += (size_t)s;
    }
    return 0;
}

static void *pipe_writer(void *arg) {
    int fd = *(int *)arg;
    if (full_write(fd, a, n) != 0) {
        perror("write to pipe");
        exit(21);
    }
    close(fd);
    return 0;
}

#define DGRAM 4096
static void *dgram_sender(void *arg) {
    int fd = *(int *)arg;
    for (size_t off = 0; off < n; off += DGRAM)
        if (send(fd, a + off, DGRAM, 0) != DGRAM) {
            perror("send datagram");
            exit(22);
        }
    return 0;
}

static volatile long handler_sum;
static void on_usr1(int sig) {
    (void)sig;
    long s = 1;
    for (size_t i = 0; i < n; i += 4096) s += b[i];
    handler_sum = s;
}

static void *masked_copy(void *arg) {
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, 0);
    memcpy(b, a, n);
    return 0;
}

int main(int argc, char **argv) {
    n = (size_t)(argc > 1 ? atoi(argv[1]) : 48) << 20;
    a = malloc(n);
    b = malloc(n);
    c = malloc(n);
    if (!a || !b || !c) return 90;
    for (size_t i = 0; i < n; i++) a[i] = (unsigned char)(i * 2654435761u >> 13);
    memset(b, 0, n);
    memset(c, 0, n);
    push_out();

    char path[] = "/tmp/farmem-io-test-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 91;
    unlink(path);

    /* 1: one write and one read of the whole buffer. */
    if (write(fd, a, n) != (ssize_t)n) { perror("write"); return 1; }
    push_out();
    if (lseek(fd, 0, SEEK_SET) != 0) return 1;
    if (read(fd, b, n) != (ssize_t)n) { perror("read"); return 1; }
    check(1, "write/read");

    /* 2: pwrite and pread at an offset. */
    if (pwrite(fd, a, n, 4096) != (ssize_t)n) { perror("pwrite"); return 2; }
    push_out();
    if (pread(fd, b, n, 4096) != (ssize_t)n) { perror("pread"); return 2; }
    check(2, "pwrite/pread");

    /* 3: writev and readv, two pieces each. */
    struct iovec wv[2] = {{a, n / 2}, {a + n / 2, n - n / 2}};
    struct iovec rv[2] = {{b, n / 3}, {b + n / 3, n - n / 3}};
    if (lseek(fd, 0, SEEK_SET) != 0) return 3;
    ssize_t w = writev(fd, wv, 2);
    if (w < 0) { perror("writev"); return 3; }
    if (w < (ssize_t)n && full_write(fd, a + w, n - (size_t)w) != 0) return 3;
    push_out();
    if (lseek(fd, 0, SEEK_SET) != 0) return 3;
    ssize_t r = readv(fd, rv, 2);
    if (r < 0) { perror("readv"); return 3; }
    if (r < (ssize_t)n && full_read(fd, b + r, n - (size_t)r) != 0) return 3;
    check(3, "writev/readv");

    /* 4: fwrite and fread. */
    FILE *f = tmpfile();
    if (!f) return 4;
    if (fwrite(a, 1, n, f) != n) { perror("fwrite"); return 4; }
    push_out();
    rewind(f);
    if (fread(b, 1, n, f) != n) { perror("fread"); return 4; }
    fclose(f);
    check(4, "fwrite/fread");

    /* 5: send and recv over a socket pair, the sender on its own thread. */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 5;
    pthread_t t;
    pthread_create(&t, 0, sender, &sv[0]);
    size_t got = 0;
    while (got < n) {
        ssize_t k = recv(sv[1], b + got, n - got, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) { perror("recv"); return 5; }
        got += (size_t)k;
    }
    pthread_join(t, 0);
    close(sv[0]);
    close(sv[1]);
    check(5, "send/recv");

    /* 6: write and read through a pipe. */
    int p[2];
    if (pipe(p) != 0) return 6;
    pthread_create(&t, 0, pipe_writer, &p[1]);
    if (full_read(p[0], b, n) != 0) { perror("read from pipe"); return 6; }
    pthread_join(t, 0);
    close(p[0]);
    check(6, "pipe");

    /* 5b: the same, recv with MSG_WAITALL (one call fills the buffer). */
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 5;
    pthread_create(&t, 0, sender, &sv[0]);
    for (got = 0; got < n;) {
        ssize_t k = recv(sv[1], b + got, n - got, MSG_WAITALL);
        if (k <= 0) { perror("recv MSG_WAITALL"); return 5; }
        got += (size_t)k;
    }
    pthread_join(t, 0);
    close(sv[0]);
    close(sv[1]);
    check(5, "recv MSG_WAITALL");

    /* 5c: datagrams into far pages not yet local, by recvfrom and recvmsg
     * in turn, with the address, its length and the message header in far
     * memory too: a receive that faulted would drop its datagram. */
    if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) != 0) return 5;
    pthread_create(&t, 0, dgram_sender, &sv[0]);
    struct sockaddr_storage *from = (struct sockaddr_storage *)(c + n / 2);
    socklen_t *fromlen = (socklen_t *)(c + n / 2 + 4096);
    struct msghdr *mh = (struct msghdr *)(c + n / 2 + 8192);
    for (size_t off = 0, i = 0; off < n; off += DGRAM, i++) {
        ssize_t k;
        if (i % 2 == 0) {
            *fromlen = sizeof *from;
            k = recvfrom(sv[1], b + off, DGRAM, 0, (struct sockaddr *)from, fromlen);
        } else {
            struct iovec *v = (struct iovec *)(c + n / 2 + 12288);
            v[0].iov_base = b + off;
            v[0].iov_len = DGRAM / 2;
            v[1].iov_base = b + off + DGRAM / 2;
            v[1].iov_len = DGRAM / 2;
            memset(mh, 0, sizeof *mh);
            mh->msg_iov = v;
            mh->msg_iovlen = 2;
            k = recvmsg(sv[1], mh, 0);
        }
        if (k != DGRAM) { perror("receive datagram"); return 5; }
    }
    pthread_join(t, 0);
    close(sv[0]);
    close(sv[1]);
    check(5, "datagrams");

    /* 7: far memory touched by a thread with every signal blocked. */
    pthread_create(&t, 0, masked_copy, 0);
    pthread_join(t, 0);
    check(7, "masked thread");

    /* 8: fputs of a far string longer than the local cache. */
    for (size_t i = 0; i + 1 < n; i++) c[i] = (char)('a' + i % 26);
    c[n - 1] = 0;
    uint64_t hc = sum(c, n - 1);
    for (size_t i = 0; i < n; i += 4096) a[i] = b[i] = 0;
    FILE *g = tmpfile();
    if (!g || fputs((char *)c, g) == EOF) { perror("fputs"); return 8; }
    rewind(g);
    if (fread(b, 1, n - 1, g) != n - 1 || sum(b, n - 1) != hc) return 8;
    fclose(g);
    printf("8 fputs %016llx\n", (unsigned long long)hc);

    /* 9: event arrays the kernel fills, in far pages not yet local. */
    memset(b, 0, n);
    push_out();
    int ep = epoll_create1(0), q[2];
    if (ep < 0 || pipe(q) != 0 || write(q[1], "x", 1) != 1) return 9;
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = q[0]};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, q[0], &ev) != 0) return 9;
    struct epoll_event *evs = (struct epoll_event *)(b + n / 3);
    if (epoll_wait(ep, evs, 16, 1000) != 1 || evs[0].data.fd != q[0]) { perror("epoll_wait"); return 9; }
    struct pollfd *pf = (struct pollfd *)(b + 2 * (n / 3));
    pf[0].fd = q[0];
    pf[0].events = POLLIN;
    push_out();
    if (poll(pf, 1, 1000) != 1 || !(pf[0].revents & POLLIN)) { perror("poll"); return 9; }
    printf("9 epoll/poll\n");

    /* 10: a handler that touches far memory, run inside sigsuspend with
     * every other signal blocked. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, 0);
    sigset_t usr1, all_but;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, 0);
    push_out();
    pthread_kill(pthread_self(), SIGUSR1); /* to this thread, not a runtime one */
    sigfillset(&all_but);
    sigdelset(&all_but, SIGUSR1);
    sigsuspend(&all_but);
    if (handler_sum == 0) return 10;
    printf("10 sigsuspend handler\n");

    close(fd);
    printf("ok\n");
    return 0;
}
